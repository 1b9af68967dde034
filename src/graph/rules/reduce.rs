//! Reductions (`sum`, `prod`, `mean`, `max`, `min`, `std`, `var`, `all`, `any`,
//! `count_nonzero`, `argmax`, `argmin`) and the scans (`cumulative_sum`, `cumulative_prod`,
//! `diff`): the reduced shape of `axis` and `keepdims`, the dtype each kernel gives.

use super::args::{self, reduced, reduction_mask, Meta};
use super::promote::{accumulation, promote, real};
use crate::ivalue::IValue;
use crate::tensor::{DType, Kind, TensorMeta};

/// What a reduction's result dtype is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reduction {
    /// `sum`, `prod`: `dtype=` if given, else the standard's accumulation dtype.
    Accumulate,
    /// `mean`: floating point (integers and bools as float64).
    Mean,
    /// `max`, `min`: the dtype; an empty reduction has no identity.
    Extreme,
    /// `std`, `var`: the real floating dtype (integers as float64).
    Spread,
    /// `all`, `any`: bool.
    Truth,
    /// `count_nonzero`: int64.
    Count,
}

/// Whether a reduction over `mask` reduces no element into some output (`max` of nothing,
/// NumPy's ValueError): the reduced dimensions hold nothing, whatever the others hold.
fn empty_reduction(shape: &[usize], mask: &[bool]) -> bool {
    shape.iter().zip(mask).any(|(&n, &r)| r && n == 0)
}

/// `name(x, *, axis, [dtype,] [correction,] keepdims)`: the stack's layout is the schema's,
/// `x` and `axis` first and `keepdims` last.
pub(super) fn reduction(kind: Reduction, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let mask = reduction_mask(args::opt_ints(stack, 1)?, x.ndim())?;
    let keepdims = args::boolean(stack, stack.len().checked_sub(1)?)?;
    let d = x.dtype;
    let floating = |d: DType| match d.kind() {
        Kind::Bool | Kind::Signed | Kind::Unsigned => DType::F64,
        _ => d,
    };
    let dtype = match kind {
        Reduction::Accumulate => match args::opt_dtype(stack, 2)? {
            // A reduction casts its input to the asked dtype unsafely, as NumPy's does.
            Some(asked) => asked,
            None => accumulation(d),
        },
        Reduction::Mean => floating(d),
        Reduction::Extreme => {
            if empty_reduction(&x.shape, &mask) {
                return None;
            }
            d
        }
        Reduction::Spread => {
            args::scalar(stack, 2)?;
            real(floating(d))
        }
        Reduction::Truth => DType::Bool,
        Reduction::Count => DType::I64,
    };
    Some(vec![args::out(dtype, reduced(&x.shape, &mask, keepdims))])
}

/// `argmax`, `argmin(x, *, int? axis, keepdims)`: int64 indices; every dimension reduced for
/// None (kept as ones with `keepdims`); an empty reduction has no index.
pub(super) fn arg_extreme(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let mask = match args::opt_int(stack, 1)? {
        None => vec![true; x.ndim()],
        Some(a) => {
            let mut m = vec![false; x.ndim()];
            *m.get_mut(args::axis(a, x.ndim())?)? = true;
            m
        }
    };
    if empty_reduction(&x.shape, &mask) {
        return None;
    }
    let keepdims = args::boolean(stack, 2)?;
    Some(vec![args::out(
        DType::I64,
        reduced(&x.shape, &mask, keepdims),
    )])
}

/// `cumulative_sum`, `cumulative_prod(x, *, int? axis, dtype, include_initial)`: `x`'s shape,
/// one longer along `axis` with the initial value; the accumulation dtype as `sum`'s.
pub(super) fn cumulative(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    // NumPy scans a 0-d array as a 1-d one of one element.
    let mut shape = if x.ndim() == 0 { vec![1] } else { x.shape };
    let axis = match args::opt_int(stack, 1)? {
        // Optional only for a 1-d array (the kernel's ValueError otherwise).
        None if shape.len() == 1 => 0,
        None => return None,
        Some(a) => args::axis(a, shape.len())?,
    };
    let dtype = match args::opt_dtype(stack, 2)? {
        Some(asked) => asked,
        None => accumulation(x.dtype),
    };
    if args::boolean(stack, 3)? {
        let n = shape.get_mut(axis)?;
        *n = n.checked_add(1)?;
    }
    Some(vec![args::out(dtype, shape)])
}

/// `diff(x, *, axis, n, prepend, append)`: the `n`-th differences of `x` with `prepend` and
/// `append` joined along `axis` (a 0-d one as one element there): that length less `n`
/// (none left below zero); the joined dtype, `not_equal`'s bool for bools.
pub(super) fn diff(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let n = usize::try_from(args::int(stack, 2)?).ok()?;
    if n == 0 {
        // NumPy returns `x` itself before it reads the axis or the arrays to join.
        return Some(vec![x.out()]);
    }
    let axis = args::axis(args::int(stack, 1)?, x.ndim())?;
    let mut dtype = x.dtype;
    let mut shape = x.shape.clone();
    for i in [3, 4] {
        if let Some(extra) = args::opt_tensor(stack, i)? {
            let len = joined_length(&x, &extra, axis)?;
            let along = shape.get_mut(axis)?;
            *along = along.checked_add(len)?;
            dtype = promote(dtype, extra.dtype);
        }
    }
    let along = shape.get_mut(axis)?;
    *along = along.saturating_sub(n);
    Some(vec![args::out(dtype, shape)])
}

/// How many elements `extra` adds along `axis` when joined to `x` (`diff`'s `prepend` and
/// `append`): a 0-d array one, else its length there if its other dimensions are `x`'s.
fn joined_length(x: &Meta, extra: &Meta, axis: usize) -> Option<usize> {
    if extra.ndim() == 0 {
        return Some(1);
    }
    if extra.ndim() != x.ndim() {
        return None;
    }
    let others_match = x
        .shape
        .iter()
        .zip(&extra.shape)
        .enumerate()
        .all(|(i, (a, b))| i == axis || a == b);
    others_match.then(|| extra.shape.get(axis).copied())?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn t(shape: &[usize]) -> IValue {
        IValue::Tensor(Tensor::from_array(ndarray::ArrayD::<i8>::zeros(
            shape.to_vec(),
        )))
    }

    fn one(v: Option<Vec<TensorMeta>>) -> String {
        v.map(|m| m[0].to_string()).unwrap_or_else(|| "none".into())
    }

    #[test]
    fn reductions_reduce_the_named_axes() {
        let (x, kd, no) = (t(&[2, 3, 4]), IValue::Bool(true), IValue::Bool(false));
        let sum = |axis: IValue, keep: &IValue| {
            one(reduction(
                Reduction::Accumulate,
                &[x.clone(), axis, IValue::None, keep.clone()],
            ))
        };
        assert_eq!(sum(IValue::None, &no), "int64[]");
        assert_eq!(sum(IValue::None, &kd), "int64[1, 1, 1]");
        assert_eq!(sum(IValue::IntList(vec![0, -1]), &no), "int64[3]");
        assert_eq!(sum(IValue::IntList(vec![1]), &kd), "int64[2, 1, 4]");
        assert_eq!(sum(IValue::IntList(vec![]), &no), "int64[2, 3, 4]");
        assert_eq!(sum(IValue::IntList(vec![3]), &no), "none");
        assert_eq!(sum(IValue::IntList(vec![0, 0]), &no), "none");
        let mean = one(reduction(
            Reduction::Mean,
            &[x.clone(), IValue::None, no.clone()],
        ));
        assert_eq!(mean, "float64[]");
        let var = reduction(
            Reduction::Spread,
            &[x.clone(), IValue::IntList(vec![2]), IValue::Int(1), no],
        );
        assert_eq!(one(var), "float64[2, 3]");
    }

    #[test]
    fn sum_takes_any_dtype_asked() {
        let x = t(&[3]);
        let with = |d: &str| {
            one(reduction(
                Reduction::Accumulate,
                &[
                    x.clone(),
                    IValue::None,
                    IValue::Str(d.into()),
                    IValue::Bool(false),
                ],
            ))
        };
        assert_eq!(with("int16"), "int16[]");
        assert_eq!(with("float32"), "float32[]");
        assert_eq!(with("uint8"), "uint8[]");
        assert_eq!(with("bfloat16"), "none");
    }

    #[test]
    fn empty_reductions_without_identity_have_no_rule() {
        let empty = t(&[3, 0]);
        let max = |axis: IValue| {
            one(reduction(
                Reduction::Extreme,
                &[empty.clone(), axis, IValue::Bool(false)],
            ))
        };
        assert_eq!(max(IValue::IntList(vec![1])), "none");
        assert_eq!(max(IValue::IntList(vec![0])), "int8[0]");
        assert_eq!(max(IValue::IntList(vec![])), "int8[3, 0]");
        assert_eq!(max(IValue::None), "none");
        let arg = arg_extreme(&[t(&[2, 5]), IValue::Int(-1), IValue::Bool(true)]);
        assert_eq!(one(arg), "int64[2, 1]");
    }

    #[test]
    fn scans_keep_or_grow_the_axis() {
        let cum = cumulative(&[t(&[4]), IValue::None, IValue::None, IValue::Bool(true)]);
        assert_eq!(one(cum), "int64[5]");
        let cum = cumulative(&[t(&[2, 4]), IValue::None, IValue::None, IValue::Bool(false)]);
        assert_eq!(one(cum), "none");
        let d = diff(&[
            t(&[2, 5]),
            IValue::Int(-1),
            IValue::Int(2),
            IValue::None,
            IValue::None,
        ]);
        assert_eq!(one(d), "int8[2, 3]");
        let d = diff(&[
            t(&[2, 1]),
            IValue::Int(1),
            IValue::Int(3),
            t(&[]),
            IValue::None,
        ]);
        assert_eq!(one(d), "int8[2, 0]");
    }
}
