//! Manipulation operators: the shape changes (`reshape`, `permute_dims`, `expand_dims`,
//! `squeeze`, `moveaxis`, `matrix_transpose`, `broadcast_to`, `tile`, `repeat`), the joins and
//! splits (`concat`, `stack`, `unstack`, `broadcast_arrays`, `meshgrid`) and those that keep
//! the meta (`flip`, `roll`, `tril`, `triu`, `fft_fftshift`).

use super::args::{self, axes_mask, broadcast, broadcasts_to, size, sizes, Meta};
use super::promote::promote;
use crate::ivalue::IValue;
use crate::tensor::TensorMeta;

/// `broadcast_to(x, shape)`: `shape`, where `x` broadcasts to it.
pub(super) fn broadcast_to(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let shape = sizes(args::ints(stack, 1)?)?;
    broadcasts_to(&x.shape, &shape).then(|| vec![args::out(x.dtype, shape)])
}

/// `broadcast_arrays(arrays)`: each array in the shape they all broadcast to.
pub(super) fn broadcast_arrays(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let xs = args::tensors(stack, 0)?;
    let mut shape = Vec::new();
    for x in &xs {
        shape = broadcast(&shape, &x.shape)?;
    }
    Some(
        xs.into_iter()
            .map(|x| args::out(x.dtype, shape.clone()))
            .collect(),
    )
}

/// The promoted dtype of several arrays (`None` for none).
fn promote_all(xs: &[Meta]) -> Option<crate::tensor::DType> {
    let (first, rest) = xs.split_first()?;
    Some(rest.iter().fold(first.dtype, |d, x| promote(d, x.dtype)))
}

/// `concat(arrays, *, axis)`: joined along `axis`, the other dimensions equal (every array
/// flattened for None); the promoted dtype.
pub(super) fn concat(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let xs = args::tensors(stack, 0)?;
    let dtype = promote_all(&xs)?;
    let Some(axis) = args::opt_int(stack, 1)? else {
        let total = xs
            .iter()
            .try_fold(0usize, |acc, x| acc.checked_add(size(&x.shape)?))?;
        return Some(vec![args::out(dtype, vec![total])]);
    };
    let first = xs.first()?;
    let axis = args::axis(axis, first.ndim())?;
    let mut shape = first.shape.clone();
    for x in xs.iter().skip(1) {
        if x.ndim() != first.ndim() {
            return None;
        }
        for (i, (&a, &b)) in first.shape.iter().zip(&x.shape).enumerate() {
            if i == axis {
                let n = shape.get_mut(axis)?;
                *n = n.checked_add(b)?;
            } else if a != b {
                return None;
            }
        }
    }
    Some(vec![args::out(dtype, shape)])
}

/// `stack(arrays, *, axis)`: the arrays, all of one shape, along a new dimension `axis`.
pub(super) fn stack(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let xs = args::tensors(stack, 0)?;
    let dtype = promote_all(&xs)?;
    let first = xs.first()?;
    if xs.iter().any(|x| x.shape != first.shape) {
        return None;
    }
    let axis = args::axis(args::int(stack, 1)?, first.ndim() + 1)?;
    let mut shape = first.shape.clone();
    shape.insert(axis, xs.len());
    Some(vec![args::out(dtype, shape)])
}

/// `unstack(x, *, axis)`: `x.shape[axis]` arrays without that dimension.
pub(super) fn unstack(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let axis = args::axis(args::int(stack, 1)?, x.ndim())?;
    let mut shape = x.shape.clone();
    let n = shape.remove(axis);
    Some((0..n).map(|_| args::out(x.dtype, shape.clone())).collect())
}

/// `expand_dims(x, axis)`: a dimension of 1 inserted at `axis` (of the result's dimensions).
pub(super) fn expand_dims(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let axis = args::axis(args::int(stack, 1)?, x.ndim() + 1)?;
    let mut shape = x.shape;
    shape.insert(axis, 1);
    Some(vec![args::out(x.dtype, shape)])
}

/// `squeeze(x, axis)`: the named dimensions, each of size 1, removed.
pub(super) fn squeeze(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let mask = axes_mask(args::ints(stack, 1)?, x.ndim())?;
    let mut shape = Vec::with_capacity(x.ndim());
    for (&n, &gone) in x.shape.iter().zip(&mask) {
        match (gone, n) {
            (false, _) => shape.push(n),
            (true, 1) => {}
            (true, _) => return None,
        }
    }
    Some(vec![args::out(x.dtype, shape)])
}

/// `permute_dims(x, axes)`: `axes`, a permutation of the dimensions, orders them.
pub(super) fn permute_dims(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let axes = args::ints(stack, 1)?;
    if axes.len() != x.ndim() {
        return None;
    }
    axes_mask(axes, x.ndim())?;
    let shape = axes
        .iter()
        .map(|&a| x.shape.get(args::axis(a, x.ndim())?).copied())
        .collect::<Option<Vec<_>>>()?;
    Some(vec![args::out(x.dtype, shape)])
}

/// `moveaxis(x, source, destination)`: the `source` dimensions moved to `destination`, the
/// others in their order (NumPy's construction of the permutation).
pub(super) fn moveaxis(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let (src, dst) = (args::ints(stack, 1)?, args::ints(stack, 2)?);
    let n = x.ndim();
    if src.len() != dst.len() {
        return None;
    }
    let src_mask = axes_mask(src, n)?;
    axes_mask(dst, n)?;
    let mut order: Vec<usize> = (0..n).filter(|&i| !src_mask[i]).collect();
    let mut pairs = src
        .iter()
        .zip(dst)
        .map(|(&s, &d)| Some((args::axis(d, n)?, args::axis(s, n)?)))
        .collect::<Option<Vec<_>>>()?;
    pairs.sort_unstable();
    for (d, s) in pairs {
        if d > order.len() {
            return None;
        }
        order.insert(d, s);
    }
    let shape = order
        .iter()
        .map(|&i| x.shape.get(i).copied())
        .collect::<Option<Vec<_>>>()?;
    Some(vec![args::out(x.dtype, shape)])
}

/// `matrix_transpose(x)`: the last two dimensions swapped.
pub(super) fn matrix_transpose(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let n = x.ndim();
    if n < 2 {
        return None;
    }
    let mut shape = x.shape;
    shape.swap(n - 2, n - 1);
    Some(vec![args::out(x.dtype, shape)])
}

/// `reshape(x, shape, *, copy)`: `shape`, one `-1` inferred, with as many elements as `x`.
/// No rule for `copy=False`: whether NumPy can reshape without a copy depends on the
/// strides of the array the kernel gets, which a meta does not say.
pub(super) fn reshape(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let asked = args::ints(stack, 1)?;
    if args::opt_bool(stack, 2)? == Some(false) {
        return None;
    }
    let total = size(&x.shape)?;
    let unknown = asked.iter().filter(|&&n| n == -1).count();
    let known = asked
        .iter()
        .filter(|&&n| n != -1)
        .map(|&n| usize::try_from(n).ok())
        .collect::<Option<Vec<_>>>()?;
    let known_size = size(&known)?;
    let inferred = match unknown {
        0 if known_size == total => None,
        1 if known_size != 0 && total % known_size == 0 => Some(total / known_size),
        _ => return None,
    };
    let shape = asked
        .iter()
        .map(|&n| match (n, inferred) {
            (-1, Some(k)) => Some(k),
            (n, _) => usize::try_from(n).ok(),
        })
        .collect::<Option<Vec<_>>>()?;
    Some(vec![args::out(x.dtype, shape)])
}

/// `tile(x, repetitions)`: each dimension (the shorter of the two padded with leading ones)
/// times its repetition.
pub(super) fn tile(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let reps = sizes(args::ints(stack, 1)?)?;
    let n = x.ndim().max(reps.len());
    let pad = |v: &[usize]| {
        let mut p = vec![1; n - v.len()];
        p.extend_from_slice(v);
        p
    };
    let shape = pad(&x.shape)
        .iter()
        .zip(pad(&reps))
        .map(|(&a, b)| a.checked_mul(b))
        .collect::<Option<Vec<_>>>()?;
    Some(vec![args::out(x.dtype, shape)])
}

/// `repeat(x, repeats, *, axis)` with an int `repeats`: `axis` that many times longer (the
/// flattened `x` for None). `repeat.Tensor` has no rule: its length is the sum of the
/// repeats' values.
pub(super) fn repeat(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let r = usize::try_from(args::int(stack, 1)?).ok()?;
    let shape = match args::opt_int(stack, 2)? {
        None => vec![size(&x.shape)?.checked_mul(r)?],
        // NumPy repeats a 0-d array along axis 0 (or -1) as a 1-d one.
        Some(0 | -1) if x.ndim() == 0 => vec![r],
        Some(a) => {
            let mut s = x.shape.clone();
            let n = s.get_mut(args::axis(a, x.ndim())?)?;
            *n = n.checked_mul(r)?;
            s
        }
    };
    Some(vec![args::out(x.dtype, shape)])
}

/// `flip(x, *, axis)`: `x`'s meta, where the axes are valid and distinct.
pub(super) fn same_with_axes(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    if let Some(axes) = args::opt_ints(stack, 1)? {
        axes_mask(axes, x.ndim())?;
    }
    Some(vec![x.out()])
}

/// `roll(x, shift, *, axis)`: `x`'s meta, where the shifts and axes pair up (NumPy
/// broadcasts one of either to the other's length; axes may repeat).
pub(super) fn roll(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let shift = args::ints(stack, 1)?;
    if let Some(axes) = args::opt_ints(stack, 2)? {
        // NumPy's roll of a 0-d array along given axes fails (it rolls only the flattened one).
        if x.ndim() == 0 {
            return None;
        }
        for &a in axes {
            args::axis(a, x.ndim())?;
        }
        let (s, a) = (shift.len(), axes.len());
        if !(s == a || s == 1 || a == 1) {
            return None;
        }
    }
    Some(vec![x.out()])
}

/// `tril`, `triu(x, *, k)`: `x`'s meta for a stack of matrices; NumPy makes a 1-d `x` of
/// length n the n x n matrix of its rows.
pub(super) fn triangle(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    args::int(stack, 1)?;
    match x.shape.as_slice() {
        [] => None,
        [n] => Some(vec![args::out(x.dtype, vec![*n, *n])]),
        _ => Some(vec![x.out()]),
    }
}

/// `fft_fftshift`, `fft_ifftshift(x, *, axes)`: `x`'s meta, where the axes are valid (they
/// may repeat: NumPy rolls as often); a 0-d `x` has none to roll (NumPy's roll fails).
pub(super) fn fftshift(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    if x.ndim() == 0 {
        return None;
    }
    for &a in args::opt_ints(stack, 1)?.unwrap_or(&[]) {
        args::axis(a, x.ndim())?;
    }
    Some(vec![x.out()])
}

/// `meshgrid(arrays, *, indexing)`: each array's dtype, in the grid of their sizes (the first
/// two swapped for `"xy"`).
pub(super) fn meshgrid(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let xs = args::tensors(stack, 0)?;
    let mut shape = xs
        .iter()
        .map(|x| size(&x.shape))
        .collect::<Option<Vec<_>>>()?;
    match args::string(stack, 1)? {
        "xy" if shape.len() >= 2 => shape.swap(0, 1),
        "xy" | "ij" => {}
        _ => return None,
    }
    Some(
        xs.iter()
            .map(|x| args::out(x.dtype, shape.clone()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn t(shape: &[usize]) -> IValue {
        IValue::Tensor(Tensor::from_array(ndarray::ArrayD::<f32>::zeros(
            shape.to_vec(),
        )))
    }

    fn shape(v: Option<Vec<TensorMeta>>) -> Option<Vec<usize>> {
        v.map(|m| m[0].shape.clone())
    }

    #[test]
    fn reshape_infers_one_dimension() {
        let r = |s: Vec<i64>| shape(reshape(&[t(&[2, 6]), IValue::IntList(s), IValue::None]));
        assert_eq!(r(vec![3, -1]), Some(vec![3, 4]));
        assert_eq!(r(vec![12]), Some(vec![12]));
        assert_eq!(r(vec![5, -1]), None);
        assert_eq!(r(vec![-1, -1]), None);
        assert_eq!(r(vec![-2, -6]), None);
        let empty = reshape(&[t(&[0, 3]), IValue::IntList(vec![0, -1]), IValue::None]);
        assert_eq!(shape(empty), None);
    }

    #[test]
    fn joins_check_the_other_dimensions() {
        let two = IValue::TensorList(vec![]);
        assert!(concat(&[two, IValue::Int(0)]).is_none());
        let list = |a: &[usize], b: &[usize]| {
            let (IValue::Tensor(x), IValue::Tensor(y)) = (t(a), t(b)) else {
                unreachable!()
            };
            IValue::TensorList(vec![x, y])
        };
        let c = concat(&[list(&[2, 3], &[4, 3]), IValue::Int(0)]);
        assert_eq!(shape(c), Some(vec![6, 3]));
        assert!(concat(&[list(&[2, 3], &[2, 4]), IValue::Int(0)]).is_none());
        let c = concat(&[list(&[2, 3], &[5]), IValue::None]);
        assert_eq!(shape(c), Some(vec![11]));
        let s = stack(&[list(&[2, 3], &[2, 3]), IValue::Int(-1)]);
        assert_eq!(shape(s), Some(vec![2, 3, 2]));
    }

    #[test]
    fn axes_move_and_vanish() {
        let m = moveaxis(&[
            t(&[2, 3, 4]),
            IValue::IntList(vec![0]),
            IValue::IntList(vec![-1]),
        ]);
        assert_eq!(shape(m), Some(vec![3, 4, 2]));
        let p = permute_dims(&[t(&[2, 3, 4]), IValue::IntList(vec![2, 0, 1])]);
        assert_eq!(shape(p), Some(vec![4, 2, 3]));
        assert!(permute_dims(&[t(&[2, 3]), IValue::IntList(vec![0, 0])]).is_none());
        let s = squeeze(&[t(&[1, 3, 1]), IValue::IntList(vec![0, 2])]);
        assert_eq!(shape(s), Some(vec![3]));
        assert!(squeeze(&[t(&[2, 3]), IValue::IntList(vec![0])]).is_none());
        let e = expand_dims(&[t(&[2, 3]), IValue::Int(-1)]);
        assert_eq!(shape(e), Some(vec![2, 3, 1]));
        let tl = tile(&[t(&[2, 3]), IValue::IntList(vec![2, 1, 2])]);
        assert_eq!(shape(tl), Some(vec![2, 2, 6]));
    }
}
