//! Reading a rule's arguments off the stack (tensors' dtypes and shapes, ints, axes) and the
//! shape arithmetic every family shares (broadcasting, axis normalization, reduced shapes).
//! Each reader answers `None` for a value of the wrong kind, so a rule given arguments the
//! schema would not bind gives no meta rather than a wrong one.

use crate::ivalue::IValue;
use crate::tensor::{DType, TensorData, TensorMeta};

/// A tensor argument's element type and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Meta {
    /// The element type.
    pub(super) dtype: DType,
    /// The shape.
    pub(super) shape: Vec<usize>,
}

impl Meta {
    /// The number of dimensions.
    pub(super) fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The output meta of this dtype and shape.
    pub(super) fn out(self) -> TensorMeta {
        out(self.dtype, self.shape)
    }
}

/// An output meta.
pub(super) fn out(dtype: DType, shape: Vec<usize>) -> TensorMeta {
    TensorMeta {
        dtype: std::borrow::Cow::Borrowed(dtype.name()),
        shape,
    }
}

/// The meta of a tensor, if its dtype is one host memory holds (a backend's own dtype, such as
/// bfloat16, has no rule). Host memory is read as it is: `Tensor::meta` would name its dtype
/// in a new string, only for the rule to look the name up again.
pub(super) fn meta_of(t: &crate::tensor::Tensor) -> Option<Meta> {
    match t.data() {
        TensorData::Host(a) => Some(Meta {
            dtype: a.dtype(),
            shape: a.shape().to_vec(),
        }),
        TensorData::Foreign(p) => {
            if let Some((dtype, shape)) = p.known_meta() {
                return Some(Meta {
                    dtype,
                    shape: shape.to_vec(),
                });
            }
            let m = p.meta()?;
            Some(Meta {
                dtype: DType::from_name(&m.dtype)?,
                shape: m.shape,
            })
        }
    }
}

/// The tensor at `i`.
pub(super) fn tensor(stack: &[IValue], i: usize) -> Option<Meta> {
    match stack.get(i)? {
        IValue::Tensor(t) => meta_of(t),
        _ => None,
    }
}

/// The optional tensor at `i`: `Some(None)` for `None`.
pub(super) fn opt_tensor(stack: &[IValue], i: usize) -> Option<Option<Meta>> {
    match stack.get(i)? {
        IValue::None => Some(None),
        IValue::Tensor(t) => meta_of(t).map(Some),
        _ => None,
    }
}

/// The tensors of the list at `i`.
pub(super) fn tensors(stack: &[IValue], i: usize) -> Option<Vec<Meta>> {
    match stack.get(i)? {
        IValue::TensorList(ts) => ts.iter().map(meta_of).collect(),
        _ => None,
    }
}

/// The int at `i`.
pub(super) fn int(stack: &[IValue], i: usize) -> Option<i64> {
    match stack.get(i)? {
        IValue::Int(n) => Some(*n),
        _ => None,
    }
}

/// The optional int at `i`.
pub(super) fn opt_int(stack: &[IValue], i: usize) -> Option<Option<i64>> {
    match stack.get(i)? {
        IValue::None => Some(None),
        IValue::Int(n) => Some(Some(*n)),
        _ => None,
    }
}

/// The bool at `i`.
pub(super) fn boolean(stack: &[IValue], i: usize) -> Option<bool> {
    match stack.get(i)? {
        IValue::Bool(b) => Some(*b),
        _ => None,
    }
}

/// The optional bool at `i`.
pub(super) fn opt_bool(stack: &[IValue], i: usize) -> Option<Option<bool>> {
    match stack.get(i)? {
        IValue::None => Some(None),
        IValue::Bool(b) => Some(Some(*b)),
        _ => None,
    }
}

/// The string at `i`.
pub(super) fn string(stack: &[IValue], i: usize) -> Option<&str> {
    match stack.get(i)? {
        IValue::Str(s) => Some(s),
        _ => None,
    }
}

/// The int list at `i` (an `int[1]` argument given one int is a list of one already).
pub(super) fn ints(stack: &[IValue], i: usize) -> Option<&[i64]> {
    match stack.get(i)? {
        IValue::IntList(v) => Some(v),
        _ => None,
    }
}

/// The optional int list at `i`.
pub(super) fn opt_ints(stack: &[IValue], i: usize) -> Option<Option<&[i64]>> {
    match stack.get(i)? {
        IValue::None => Some(None),
        IValue::IntList(v) => Some(Some(v)),
        _ => None,
    }
}

/// The `str? dtype` at `i`: `Some(None)` for None; `None` for a name that is no dtype host
/// memory holds (the kernel may still take it, as NumPy's `"f4"`: no rule then).
pub(super) fn opt_dtype(stack: &[IValue], i: usize) -> Option<Option<DType>> {
    match stack.get(i)? {
        IValue::None => Some(None),
        IValue::Str(s) => DType::from_name(s).map(Some),
        _ => None,
    }
}

pub(super) use crate::tensor::promote::Weak;

/// The scalar at `i`.
pub(super) fn scalar(stack: &[IValue], i: usize) -> Option<Weak> {
    match stack.get(i)? {
        IValue::Bool(b) => Some(Weak::Bool(*b)),
        IValue::Int(n) => Some(Weak::Int(*n)),
        IValue::Double(d) => Some(Weak::Float(*d)),
        _ => None,
    }
}

/// The optional scalar at `i`.
pub(super) fn opt_scalar(stack: &[IValue], i: usize) -> Option<Option<Weak>> {
    match stack.get(i)? {
        IValue::None => Some(None),
        _ => scalar(stack, i).map(Some),
    }
}

/// `axis` of an array of `ndim` dimensions as an index (`-1` is the last), `None` out of range.
pub(super) fn axis(axis: i64, ndim: usize) -> Option<usize> {
    let n = i64::try_from(ndim).ok()?;
    let a = if axis < 0 { axis.checked_add(n)? } else { axis };
    if (0..n).contains(&a) {
        usize::try_from(a).ok()
    } else {
        None
    }
}

/// Several axes as a mask of dimensions; `None` for one out of range or named twice (NumPy's
/// `normalize_axis_tuple` refuses both).
pub(super) fn axes_mask(axes: &[i64], ndim: usize) -> Option<Vec<bool>> {
    let mut mask = vec![false; ndim];
    for &a in axes {
        let i = axis(a, ndim)?;
        let seen = mask.get_mut(i)?;
        if *seen {
            return None;
        }
        *seen = true;
    }
    Some(mask)
}

/// The broadcast of two shapes (NumPy's rule), `None` where they do not broadcast.
pub(super) fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        let pad = n - s.len();
        if i < pad {
            1
        } else {
            s.get(i - pad).copied().unwrap_or(1)
        }
    };
    (0..n)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect()
}

/// Whether `from` broadcasts to exactly `to` (`broadcast_to`, an in-place operator's output).
pub(super) fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == 1)
}

/// The shape left after reducing the dimensions in `mask` (kept as 1 with `keepdims`).
pub(super) fn reduced(shape: &[usize], mask: &[bool], keepdims: bool) -> Vec<usize> {
    shape
        .iter()
        .zip(mask)
        .filter_map(|(&n, &r)| match (r, keepdims) {
            (false, _) => Some(n),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// The reduction's mask of an `int[1]? axis`: every dimension for None.
pub(super) fn reduction_mask(axes: Option<&[i64]>, ndim: usize) -> Option<Vec<bool>> {
    match axes {
        None => Some(vec![true; ndim]),
        Some(a) => axes_mask(a, ndim),
    }
}

/// The number of elements of a shape, `None` past `usize`.
pub(super) fn size(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n))
}

/// A list of ints as sizes, `None` for a negative one.
pub(super) fn sizes(v: &[i64]) -> Option<Vec<usize>> {
    v.iter().map(|&n| usize::try_from(n).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast(&[2, 1], &[3]), Some(vec![2, 3]));
        assert_eq!(broadcast(&[], &[4, 5]), Some(vec![4, 5]));
        assert_eq!(broadcast(&[0], &[1]), Some(vec![0]));
        assert_eq!(broadcast(&[1], &[0]), Some(vec![0]));
        assert_eq!(broadcast(&[2], &[3]), None);
        assert_eq!(broadcast(&[0], &[2]), None);
        assert!(broadcasts_to(&[3, 1], &[2, 3, 4]));
        assert!(!broadcasts_to(&[2, 3], &[3]));
        assert!(!broadcasts_to(&[3], &[4]));
    }

    #[test]
    fn axes_are_normalized_and_checked() {
        assert_eq!(axis(-1, 3), Some(2));
        assert_eq!(axis(3, 3), None);
        assert_eq!(axis(-4, 3), None);
        assert_eq!(axis(i64::MIN, 3), None);
        assert_eq!(axes_mask(&[0, -1], 3), Some(vec![true, false, true]));
        assert_eq!(axes_mask(&[1, -2], 3), None);
        assert_eq!(reduced(&[2, 3, 4], &[true, false, true], false), vec![3]);
        assert_eq!(
            reduced(&[2, 3, 4], &[true, false, true], true),
            vec![1, 3, 1]
        );
        assert_eq!(sizes(&[2, -1]), None);
    }
}
