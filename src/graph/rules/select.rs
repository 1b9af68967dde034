//! Sorting, searching and indexing by arrays: `sort`, `argsort`, `searchsorted`, `take`,
//! `take_along_axis`. Indices are int64 (NumPy's `intp` on the platforms boxfall builds
//! for). An index out of bounds is an error of the values, which no rule can see.

use super::args::{self, broadcast};
use crate::ivalue::IValue;
use crate::tensor::{DType, Kind, TensorMeta};

/// `sort(x, *, axis, ...)` (`x`'s meta) and `argsort` (int64 indices), along a valid axis.
pub(super) fn sort(indices: bool, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let axis = args::int(stack, 1)?;
    let descending = args::boolean(stack, 2)?;
    if indices && !descending && x.ndim() == 0 && (axis == 0 || axis == -1) {
        // NumPy's argsort of a 0-d array is that of a 1-d one of one element.
        return Some(vec![args::out(DType::I64, vec![1])]);
    }
    args::axis(axis, x.ndim())?;
    let dtype = if indices { DType::I64 } else { x.dtype };
    Some(vec![args::out(dtype, x.shape)])
}

/// Whether `d` indexes: an integer (NumPy casts integers to `intp` by `same_kind`).
fn integral(d: DType) -> bool {
    matches!(d.kind(), Kind::Signed | Kind::Unsigned)
}

/// `searchsorted(x1, x2, *, side, sorter)`: int64 positions in `x2`'s shape, for a 1-d `x1`
/// and a `sorter` of its length.
pub(super) fn searchsorted(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (a, v) = (args::tensor(stack, 0)?, args::tensor(stack, 1)?);
    let [n] = a.shape.as_slice() else {
        return None;
    };
    if !matches!(args::string(stack, 2)?, "left" | "right") {
        return None;
    }
    if let Some(s) = args::opt_tensor(stack, 3)? {
        if s.shape.as_slice() != [*n] || !integral(s.dtype) {
            return None;
        }
    }
    Some(vec![args::out(DType::I64, v.shape)])
}

/// `take(x, indices, *, axis)`: `indices`' shape in place of dimension `axis` (a 1-d `x`
/// without one). A non-empty take from an empty dimension has no element to take.
pub(super) fn take(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (mut x, idx) = (args::tensor(stack, 0)?, args::tensor(stack, 1)?);
    if !integral(idx.dtype) && idx.dtype != DType::Bool {
        return None;
    }
    let axis_given = args::opt_int(stack, 2)?;
    if x.ndim() == 0 && matches!(axis_given, Some(0 | -1)) {
        // NumPy takes from a 0-d array along axis 0 (or -1) as from a 1-d one.
        x.shape = vec![1];
    }
    let axis = match axis_given {
        None if x.ndim() == 1 => 0,
        None => return None,
        Some(a) => args::axis(a, x.ndim())?,
    };
    if *x.shape.get(axis)? == 0 && args::size(&idx.shape)? != 0 {
        return None;
    }
    let shape = [x.shape.get(..axis)?, &idx.shape, x.shape.get(axis + 1..)?].concat();
    Some(vec![args::out(x.dtype, shape)])
}

/// `take_along_axis(x, indices, *, axis)`: arrays of one rank; `indices`' length along
/// `axis`, the other dimensions broadcast.
pub(super) fn take_along_axis(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (x, idx) = (args::tensor(stack, 0)?, args::tensor(stack, 1)?);
    if !integral(idx.dtype) || x.ndim() != idx.ndim() {
        return None;
    }
    let axis = args::axis(args::int(stack, 2)?, x.ndim())?;
    let mut shape = Vec::with_capacity(x.ndim());
    for (i, (&a, &b)) in x.shape.iter().zip(&idx.shape).enumerate() {
        if i == axis {
            shape.push(b);
        } else {
            shape.extend(broadcast(&[a], &[b])?);
        }
    }
    // Any index into an empty dimension is out of bounds: an error where one is taken.
    if *x.shape.get(axis)? == 0 && args::size(&shape)? != 0 {
        return None;
    }
    Some(vec![args::out(x.dtype, shape)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn f(shape: &[usize]) -> IValue {
        IValue::Tensor(Tensor::from_array(ndarray::ArrayD::<f32>::zeros(
            shape.to_vec(),
        )))
    }

    fn i(shape: &[usize]) -> IValue {
        IValue::Tensor(Tensor::from_array(ndarray::ArrayD::<i64>::zeros(
            shape.to_vec(),
        )))
    }

    fn one(v: Option<Vec<TensorMeta>>) -> String {
        v.map(|m| m[0].to_string()).unwrap_or_else(|| "none".into())
    }

    #[test]
    fn indices_replace_the_axis() {
        assert_eq!(
            one(take(&[f(&[2, 3, 4]), i(&[5, 6]), IValue::Int(1)])),
            "float32[2, 5, 6, 4]"
        );
        assert_eq!(one(take(&[f(&[2, 3]), i(&[5]), IValue::None])), "none");
        assert_eq!(one(take(&[f(&[2, 3]), f(&[5]), IValue::Int(0)])), "none");
        assert_eq!(
            one(take_along_axis(&[f(&[2, 3]), i(&[1, 5]), IValue::Int(1)])),
            "float32[2, 5]"
        );
        let side = IValue::Str("left".into());
        assert_eq!(
            one(searchsorted(&[f(&[5]), f(&[2, 2]), side, IValue::None])),
            "int64[2, 2]"
        );
        let (no, yes) = (IValue::Bool(false), IValue::Bool(true));
        let sorted = |x: IValue, indices: bool, desc: &IValue| {
            one(sort(
                indices,
                &[x, IValue::Int(0), desc.clone(), yes.clone()],
            ))
        };
        assert_eq!(sorted(f(&[3, 2]), true, &no), "int64[3, 2]");
        assert_eq!(sorted(f(&[]), false, &no), "none");
        // NumPy argsorts a 0-d array as a 1-d one, but cannot flip it to sort descending.
        assert_eq!(sorted(f(&[]), true, &no), "int64[1]");
        assert_eq!(sorted(f(&[]), true, &yes), "none");
    }
}
