//! A view of host memory (a Native base) made and written in Rust, from its place in the base's
//! C-ordered elements (offset and strides, in elements): the Python bindings' views of a Native
//! tensor run no Python code to read or write, where the chain of NumPy steps costs a Python
//! call each time.

use ndarray::{ArrayD, IxDyn};

use crate::tensor::HostArray;

/// Where a view's elements are among its base's, in C order.
#[derive(Clone, Debug)]
pub(crate) struct Strided {
    /// The first element's index.
    pub(crate) offset: isize,
    /// The step between neighbours along each axis (negative for a reversed axis, 0 for a
    /// broadcast one).
    pub(crate) strides: Vec<isize>,
}

impl Strided {
    /// Calls `f(position)` for every element of a view of `shape`, in C order; `None` (nothing
    /// called) where one of them is not among `len` elements.
    fn each(&self, shape: &[usize], len: usize, mut f: impl FnMut(usize)) -> Option<()> {
        self.within(shape, len)?;
        if shape.contains(&0) {
            return Some(());
        }
        let mut index = vec![0usize; shape.len()];
        let mut pos = self.offset;
        loop {
            // In bounds: every position lies between `lo` and `hi` (checked above).
            f(pos as usize);
            let mut axis = shape.len();
            loop {
                if axis == 0 {
                    return Some(());
                }
                axis -= 1;
                index[axis] += 1;
                pos += self.strides[axis];
                if index[axis] < shape[axis] {
                    break;
                }
                pos -= self.strides[axis] * shape[axis] as isize;
                index[axis] = 0;
            }
        }
    }

    /// `Some` where every element of a view of `shape` is among `len` elements (an empty view
    /// always is), so that a pointer to the base's first element plus the view's offset and
    /// strides reaches only the base's memory.
    pub(crate) fn within(&self, shape: &[usize], len: usize) -> Option<()> {
        if shape.len() != self.strides.len() {
            return None;
        }
        if shape.contains(&0) {
            return Some(());
        }
        let (mut lo, mut hi) = (self.offset, self.offset);
        for (&n, &s) in shape.iter().zip(&self.strides) {
            let reach = isize::try_from(n - 1).ok()?.checked_mul(s)?;
            if reach < 0 {
                lo = lo.checked_add(reach)?;
            } else {
                hi = hi.checked_add(reach)?;
            }
        }
        if lo < 0 || usize::try_from(hi).ok()? >= len {
            return None;
        }
        Some(())
    }

    fn gather<T: Clone>(&self, base: &ArrayD<T>, shape: &[usize]) -> Option<ArrayD<T>> {
        let data = base.as_slice()?;
        let mut out = Vec::new();
        out.try_reserve_exact(shape.iter().product()).ok()?;
        self.each(shape, data.len(), |p| {
            if let Some(v) = data.get(p) {
                out.push(v.clone());
            }
        })?;
        ArrayD::from_shape_vec(IxDyn(shape), out).ok()
    }

    fn scatter<T: Clone>(&self, base: &ArrayD<T>, src: &ArrayD<T>) -> Option<ArrayD<T>> {
        let data = base.as_slice()?;
        let mut out = Vec::new();
        out.try_reserve_exact(data.len()).ok()?;
        out.extend_from_slice(data);
        let mut values = src.iter();
        let len = out.len();
        self.each(src.shape(), len, |p| {
            if let (Some(d), Some(v)) = (out.get_mut(p), values.next()) {
                *d = v.clone();
            }
        })?;
        ArrayD::from_shape_vec(IxDyn(base.shape()), out).ok()
    }

    /// The view's values, of `shape`, from host memory in C order; `None` where the base is in
    /// another order or the view reaches outside it.
    pub(crate) fn read(&self, base: &HostArray, shape: &[usize]) -> Option<HostArray> {
        Some(crate::tensor::host_map!(base, a => self.gather(a, shape)?))
    }

    /// A copy of `base` with `src` (of the view's shape and the base's dtype) written through
    /// the view; `None` where that cannot be done here.
    pub(crate) fn write(&self, base: &HostArray, src: &HostArray) -> Option<HostArray> {
        macro_rules! pairs {
            ($($v:ident),*) => {
                match (base, src) {
                    $((HostArray::$v(b), HostArray::$v(s)) => HostArray::$v(self.scatter(b, s)?),)*
                    _ => return None,
                }
            };
        }
        Some(pairs!(
            Bool, I8, I16, I32, I64, U8, U16, U32, U64, F32, F64, C64, C128
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reversed_strided_view_reads_and_writes_its_elements() {
        // A (2, 3) base; the view [:, ::-2] has shape (2, 2), offset 2, strides (3, -2).
        let base = HostArray::from(
            ndarray::ArrayD::from_shape_vec(vec![2, 3], (0..6).map(f64::from).collect()).unwrap(),
        );
        let s = Strided {
            offset: 2,
            strides: vec![3, -2],
        };
        let v = s.read(&base, &[2, 2]).unwrap();
        assert_eq!(
            v.as_f64().unwrap().iter().copied().collect::<Vec<_>>(),
            vec![2.0, 0.0, 5.0, 3.0]
        );
        let src = HostArray::from(ndarray::ArrayD::from_elem(vec![2, 2], -1.0));
        let w = s.write(&base, &src).unwrap();
        assert_eq!(
            w.as_f64().unwrap().iter().copied().collect::<Vec<_>>(),
            vec![-1.0, 1.0, -1.0, -1.0, 4.0, -1.0]
        );
        // Out of bounds: refused, not read.
        assert!(Strided {
            offset: 5,
            strides: vec![3, 1]
        }
        .read(&base, &[2, 2])
        .is_none());
        assert!(s.read(&base, &[2]).is_none());
    }
}
