//! Basic indexing: `getitem(x, key, arrays)` and `setitem_functional(x, key, arrays, value)`
//! (the functional form of `x[key] = value`, which graph mode records for the write), for a
//! key of ints, slices, `None` and `...` (described as `constants.rs` says: a slice is
//! `("<slice>", start, stop, step)`, `...` is `"<ellipsis>"`). A key with arrays (integer
//! arrays, boolean masks) or a bool has no rule: a mask's result shape depends on its values.
//! Also graph mode's reads and writes of a view (`_strided_view`, `_strided_view_write`: a
//! shape, strides and an offset among the base's elements).

use super::args::{self, broadcasts_to, Meta};
use super::promote::{holds, same_kind};
use crate::ivalue::IValue;
use crate::tensor::{Kind, TensorMeta};

/// The marker of a described slice.
const SLICE: &str = "<slice>";
/// A described `...`.
const ELLIPSIS: &str = "<ellipsis>";

/// One component of a basic index.
enum Part {
    Int(i64),
    Slice(Option<i64>, Option<i64>, Option<i64>),
    NewAxis,
    Ellipsis,
}

/// `x[key]`: `x`'s dtype, the shape the key selects.
pub(super) fn getitem(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    no_arrays(stack.get(2)?)?;
    let shape = indexed_shape(&x.shape, stack.get(1)?)?;
    Some(vec![args::out(x.dtype, shape)])
}

/// `setitem_functional(x, key, arrays, value)` and `.Scalar`: a new array of `x`'s meta, where
/// `value` broadcasts to the part the key selects and casts to `x`'s dtype by `same_kind` (an
/// int scalar `x`'s integer dtype holds, a float one into floating `x`); other values (whose
/// assignment NumPy may refuse by value) have no rule.
pub(super) fn setitem_functional(overload: &str, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    no_arrays(stack.get(2)?)?;
    let part = indexed_shape(&x.shape, stack.get(1)?)?;
    let fits = match overload {
        "" => {
            let v = args::tensor(stack, 3)?;
            broadcasts_to(&v.shape, &part) && same_kind(v.dtype, x.dtype)
        }
        "Scalar" => scalar_fits(&x, args::scalar(stack, 3)?),
        _ => false,
    };
    fits.then(|| vec![x.out()])
}

/// `_strided_view(x, shape, strides, offset)` (graph mode's read of a view of `x`): `x`'s dtype
/// in `shape`, where every element it names is among `x`'s.
pub(super) fn strided_view(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let shape = strided_within(&x, stack, 1)?;
    Some(vec![args::out(x.dtype, shape)])
}

/// `_strided_view_write(x, values, shape, strides, offset)` (graph mode's write through a view
/// of `x`): `x`'s meta, where `values` is of the view's shape and `x`'s dtype, and every
/// element the view names is among `x`'s.
pub(super) fn strided_view_write(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let values = args::tensor(stack, 1)?;
    let shape = strided_within(&x, stack, 2)?;
    (values.shape == shape && values.dtype == x.dtype).then(|| vec![x.out()])
}

/// The shape of the strided view at `at` (`shape, strides, offset`) of `x`, where each of its
/// elements is among `x`'s (an empty view names none).
fn strided_within(x: &Meta, stack: &[IValue], at: usize) -> Option<Vec<usize>> {
    let shape = args::sizes(args::ints(stack, at)?)?;
    let strides = args::ints(stack, at + 1)?;
    let offset = args::int(stack, at + 2)?;
    if strides.len() != shape.len() {
        return None;
    }
    let len = i64::try_from(args::size(&x.shape)?).ok()?;
    if shape.contains(&0) {
        return Some(shape);
    }
    let (mut lo, mut hi) = (offset, offset);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = i64::try_from(n - 1).ok()?.checked_mul(s)?;
        if reach < 0 {
            lo = lo.checked_add(reach)?;
        } else {
            hi = hi.checked_add(reach)?;
        }
    }
    (lo >= 0 && hi < len).then_some(shape)
}

/// Whether NumPy writes the Python scalar `s` into an array of `x`'s dtype whatever its value.
fn scalar_fits(x: &Meta, s: args::Weak) -> bool {
    let inexact = matches!(x.dtype.kind(), Kind::Float | Kind::Complex);
    match s {
        args::Weak::Bool(_) => true,
        args::Weak::Int(i) => {
            inexact
                || (matches!(x.dtype.kind(), Kind::Signed | Kind::Unsigned) && holds(x.dtype, i))
        }
        args::Weak::Float(_) => inexact,
    }
}

/// `Some(())` where `arrays` is an empty list (the key holds no array).
fn no_arrays(arrays: &IValue) -> Option<()> {
    let empty = match arrays {
        IValue::List(v) | IValue::Tuple(v) => v.is_empty(),
        IValue::TensorList(v) => v.is_empty(),
        IValue::OptionalTensorList(v) => v.is_empty(),
        _ => false,
    };
    empty.then_some(())
}

/// The components of a key (one, or a tuple of them).
fn parts(key: &IValue) -> Option<Vec<Part>> {
    match key {
        IValue::Tuple(items) if !is_slice(items) => items.iter().map(part).collect(),
        one => Some(vec![part(one)?]),
    }
}

fn is_slice(items: &[IValue]) -> bool {
    matches!(items, [IValue::Str(s), _, _, _] if &**s == SLICE)
}

fn part(v: &IValue) -> Option<Part> {
    match v {
        IValue::Int(i) => Some(Part::Int(*i)),
        IValue::None => Some(Part::NewAxis),
        IValue::Str(s) if &**s == ELLIPSIS => Some(Part::Ellipsis),
        IValue::Tuple(items) if is_slice(items) => {
            let bound = |v: &IValue| match v {
                IValue::None => Some(None),
                IValue::Int(i) => Some(Some(*i)),
                _ => None,
            };
            Some(Part::Slice(
                bound(&items[1])?,
                bound(&items[2])?,
                bound(&items[3])?,
            ))
        }
        // A bool (a 0-d mask), an array's slot, anything else.
        _ => None,
    }
}

/// The shape `x[key]` has for `x` of `shape`; `None` where NumPy raises (an int out of range,
/// too many indices, two ellipses, a zero step) or the key is no basic index.
fn indexed_shape(shape: &[usize], key: &IValue) -> Option<Vec<usize>> {
    let parts = parts(key)?;
    let consumed = parts
        .iter()
        .filter(|p| matches!(p, Part::Int(_) | Part::Slice(..)))
        .count();
    let ellipses = parts.iter().filter(|p| matches!(p, Part::Ellipsis)).count();
    if consumed > shape.len() || ellipses > 1 {
        return None;
    }
    let rest = shape.len() - consumed;
    let mut out = Vec::with_capacity(shape.len() + parts.len());
    let mut d = 0;
    for p in &parts {
        match *p {
            Part::NewAxis => out.push(1),
            Part::Ellipsis => {
                out.extend_from_slice(&shape[d..d + rest]);
                d += rest;
            }
            Part::Int(i) => {
                let n = i128::try_from(shape[d]).ok()?;
                if i128::from(i) < -n || i128::from(i) >= n {
                    return None;
                }
                d += 1;
            }
            Part::Slice(start, stop, step) => {
                out.push(slice_len(shape[d], start, stop, step)?);
                d += 1;
            }
        }
    }
    out.extend_from_slice(&shape[d..]);
    Some(out)
}

/// How many elements `slice(start, stop, step)` takes of `n` (Python's `slice.indices`).
fn slice_len(n: usize, start: Option<i64>, stop: Option<i64>, step: Option<i64>) -> Option<usize> {
    let n = i128::try_from(n).ok()?;
    let step = i128::from(step.unwrap_or(1));
    if step == 0 {
        return None;
    }
    let (lo, hi) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let clamp = |v: Option<i64>, default: i128| match v {
        None => default,
        Some(v) => {
            let v = i128::from(v);
            let v = if v < 0 { v + n } else { v };
            v.clamp(lo, hi)
        }
    };
    let (start, stop) = if step > 0 {
        (clamp(start, 0), clamp(stop, n))
    } else {
        (clamp(start, n - 1), clamp(stop, -1))
    };
    let len = if step > 0 {
        (stop - start + step - 1).div_euclid(step)
    } else {
        (start - stop + (-step) - 1).div_euclid(-step)
    };
    usize::try_from(len.max(0)).ok()
}

/// A described slice, for tests.
#[cfg(test)]
fn s(start: Option<i64>, stop: Option<i64>, step: Option<i64>) -> IValue {
    let b = |v: Option<i64>| v.map_or(IValue::None, IValue::Int);
    IValue::Tuple(vec![IValue::Str(SLICE.into()), b(start), b(stop), b(step)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    #[test]
    fn slices_count_as_pythons() {
        assert_eq!(slice_len(5, None, None, None), Some(5));
        assert_eq!(slice_len(5, Some(1), Some(4), None), Some(3));
        assert_eq!(slice_len(5, Some(-2), None, None), Some(2));
        assert_eq!(slice_len(5, None, None, Some(2)), Some(3));
        assert_eq!(slice_len(5, None, None, Some(-1)), Some(5));
        assert_eq!(slice_len(5, Some(3), Some(0), Some(-2)), Some(2));
        assert_eq!(slice_len(5, Some(10), Some(20), None), Some(0));
        assert_eq!(slice_len(5, Some(-10), Some(2), None), Some(2));
        assert_eq!(slice_len(0, None, None, Some(-3)), Some(0));
        assert_eq!(slice_len(5, None, None, Some(0)), None);
        assert_eq!(
            slice_len(5, Some(i64::MIN), Some(i64::MAX), Some(i64::MAX)),
            Some(1)
        );
    }

    #[test]
    fn a_basic_key_selects_numpys_shape() {
        let shape = [4, 5, 6];
        let key = |k: IValue| indexed_shape(&shape, &k);
        assert_eq!(key(IValue::Int(1)), Some(vec![5, 6]));
        assert_eq!(key(IValue::Int(-4)), Some(vec![5, 6]));
        assert_eq!(key(IValue::Int(4)), None); // out of range: NumPy's IndexError
        assert_eq!(key(s(Some(1), None, None)), Some(vec![3, 5, 6]));
        let t = IValue::Tuple(vec![
            IValue::None,
            IValue::Str(ELLIPSIS.into()),
            IValue::Int(0),
            s(None, None, Some(-2)),
        ]);
        assert_eq!(key(t), Some(vec![1, 4, 3]));
        let too_many = IValue::Tuple(vec![IValue::Int(0); 4]);
        assert_eq!(key(too_many), None);
        let two_ellipses = IValue::Tuple(vec![IValue::Str(ELLIPSIS.into()); 2]);
        assert_eq!(key(two_ellipses), None);
        assert_eq!(key(IValue::Bool(true)), None); // a mask
        assert_eq!(key(IValue::Str("array".into())), None); // an array's slot
    }

    #[test]
    fn setitem_needs_a_value_that_fits_whatever_its_values() {
        let x = Meta {
            dtype: DType::I8,
            shape: vec![3],
        };
        assert!(scalar_fits(&x, args::Weak::Int(100)));
        assert!(!scalar_fits(&x, args::Weak::Int(300))); // NumPy's OverflowError
        assert!(!scalar_fits(&x, args::Weak::Float(1.5)));
        assert!(scalar_fits(&x, args::Weak::Bool(true)));
    }
}
