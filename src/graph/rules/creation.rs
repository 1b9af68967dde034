//! Creation operators (`zeros`, `ones`, `empty`, `full`, `arange`, `linspace`, `eye`, the
//! `_like` ones, `asarray` of an array or a Python scalar) and `astype`: the shape the
//! arguments say, `dtype=` or NumPy's default for the values given.

use super::args::{self, broadcasts_to, sizes, Meta};
use super::promote::holds;
use crate::ivalue::IValue;
use crate::tensor::{DType, Kind, TensorMeta};

/// `zeros`, `ones`, `empty(shape, *, dtype, device)`: float64 unless `dtype` says.
pub(super) fn filled(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let shape = sizes(args::ints(stack, 0)?)?;
    let dtype = args::opt_dtype(stack, 1)?.unwrap_or(DType::F64);
    Some(vec![args::out(dtype, shape)])
}

/// The dtype a fill value gives an array of `shape`: `dtype` if given, else the value's own
/// (a Python bool, int or float as NumPy's defaults, an array its dtype). `None` for a value
/// `dtype` cannot hold (NumPy's `OverflowError` for an int outside an integer dtype), an array
/// that does not broadcast to `shape`, or anything else (a complex Python number).
fn fill_dtype(fill: &IValue, dtype: Option<DType>, shape: &[usize]) -> Option<DType> {
    let own = match fill {
        IValue::Bool(_) => DType::Bool,
        IValue::Int(i) => {
            if let Some(d) = dtype {
                if matches!(d.kind(), Kind::Signed | Kind::Unsigned) && !holds(d, *i) {
                    return None;
                }
            }
            DType::I64
        }
        IValue::Double(_) => DType::F64,
        IValue::Tensor(t) => {
            let m = args::meta_of(t)?;
            // NumPy's assignment broadcasts, dropping leading dimensions of size 1 too.
            let first = m
                .shape
                .iter()
                .position(|&n| n != 1)
                .unwrap_or(m.shape.len());
            if !broadcasts_to(m.shape.get(first..)?, shape) {
                return None;
            }
            m.dtype
        }
        _ => return None,
    };
    Some(dtype.unwrap_or(own))
}

/// `full(shape, fill_value, *, dtype, device)`.
pub(super) fn full(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let shape = sizes(args::ints(stack, 0)?)?;
    let dtype = fill_dtype(stack.get(1)?, args::opt_dtype(stack, 2)?, &shape)?;
    Some(vec![args::out(dtype, shape)])
}

/// `zeros_like`, `ones_like`, `empty_like(x, *, dtype, device)`: `x`'s shape, `dtype` or
/// `x`'s.
pub(super) fn like(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let dtype = args::opt_dtype(stack, 1)?.unwrap_or(x.dtype);
    Some(vec![args::out(dtype, x.shape)])
}

/// `full_like(x, fill_value, *, dtype, device)`: `x`'s shape, `dtype` or `x`'s.
pub(super) fn full_like(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let dtype = args::opt_dtype(stack, 2)?.unwrap_or(x.dtype);
    fill_dtype(stack.get(1)?, Some(dtype), &x.shape)?;
    Some(vec![args::out(dtype, x.shape)])
}

/// The exact float of a Python number, `None` for a bool (NumPy's `arange(True)` is no
/// standard call) or an int a float64 does not hold exactly.
fn exact_float(v: &IValue) -> Option<f64> {
    const EXACT: i64 = 1 << 53;
    match v {
        IValue::Int(i) if (-EXACT..=EXACT).contains(i) => Some(*i as f64),
        IValue::Double(d) if d.is_finite() => Some(*d),
        _ => None,
    }
}

/// `arange(start, stop, step, *, dtype, device)`: `ceil((stop - start) / step)` elements (none
/// below zero), computed in float64 as NumPy does; int64 for ints, float64 with a float,
/// unless `dtype` says (a real one: bool and complex aranges have no rule).
pub(super) fn arange(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (first, stop, step) = (stack.first()?, stack.get(1)?, stack.get(2)?);
    let (start, stop) = match stop {
        IValue::None => (&IValue::Int(0), first),
        s => (first, s),
    };
    let values = [start, stop, step];
    let floats = values.iter().any(|v| matches!(v, IValue::Double(_)));
    let [a, b, s] = values.map(exact_float);
    let (a, b, s) = (a?, b?, s?);
    if s == 0.0 {
        return None;
    }
    let dtype = match args::opt_dtype(stack, 3)? {
        None if floats => DType::F64,
        None => DType::I64,
        Some(d) => match d.kind() {
            Kind::Float | Kind::Signed | Kind::Unsigned => d,
            _ => return None,
        },
    };
    let len = ((b - a) / s).ceil();
    if !len.is_finite() {
        return None;
    }
    let len = if len <= 0.0 { 0 } else { len as usize };
    Some(vec![args::out(dtype, vec![len])])
}

/// `linspace(start, stop, num, *, dtype, device, endpoint)`: `num` elements, float64 unless
/// `dtype` says.
pub(super) fn linspace(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    args::scalar(stack, 0)?;
    args::scalar(stack, 1)?;
    let num = usize::try_from(args::int(stack, 2)?).ok()?;
    let dtype = args::opt_dtype(stack, 3)?.unwrap_or(DType::F64);
    Some(vec![args::out(dtype, vec![num])])
}

/// `eye(n_rows, n_cols, *, k, dtype, device)`: `(n_rows, n_cols or n_rows)`, float64 unless
/// `dtype` says.
pub(super) fn eye(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let rows = usize::try_from(args::int(stack, 0)?).ok()?;
    let cols = match args::opt_int(stack, 1)? {
        None => rows,
        Some(c) => usize::try_from(c).ok()?,
    };
    args::int(stack, 2)?;
    let dtype = args::opt_dtype(stack, 3)?.unwrap_or(DType::F64);
    Some(vec![args::out(dtype, vec![rows, cols])])
}

/// `asarray(obj, *, dtype, device, copy)` of an array (its shape; `dtype` or its own, no
/// rule for `copy=False` with another dtype, which needs a copy) or of one Python bool, int
/// or float (0-d). Nested lists have no rule: their shape is in their values.
pub(super) fn asarray(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let asked = args::opt_dtype(stack, 1)?;
    let copy = args::opt_bool(stack, 3)?;
    match stack.first()? {
        IValue::Tensor(t) => {
            let m: Meta = args::meta_of(t)?;
            let dtype = asked.unwrap_or(m.dtype);
            if copy == Some(false) && dtype != m.dtype {
                return None;
            }
            Some(vec![args::out(dtype, m.shape)])
        }
        v @ (IValue::Bool(_) | IValue::Int(_) | IValue::Double(_)) => {
            Some(vec![args::out(fill_dtype(v, asked, &[])?, vec![])])
        }
        _ => None,
    }
}

/// `astype(x, dtype, *, copy, device)`: `x`'s shape in `dtype`.
pub(super) fn astype(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let dtype = DType::from_name(args::string(stack, 1)?)?;
    Some(vec![args::out(dtype, x.shape)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(v: Option<Vec<TensorMeta>>) -> String {
        v.map(|m| m[0].to_string()).unwrap_or_else(|| "none".into())
    }

    #[test]
    fn arange_counts_as_numpy() {
        let ar = |a: IValue, b: IValue, s: IValue| one(arange(&[a, b, s, IValue::None]));
        use IValue::{Double as F, Int as I, None as N};
        assert_eq!(ar(I(5), N, I(1)), "int64[5]");
        assert_eq!(ar(I(1), I(10), I(3)), "int64[3]");
        assert_eq!(ar(I(10), I(1), I(1)), "int64[0]");
        assert_eq!(ar(I(10), I(1), I(-3)), "int64[3]");
        assert_eq!(ar(F(0.0), F(1.0), F(0.1)), "float64[10]");
        assert_eq!(ar(I(0), I(1), I(0)), "none");
        assert_eq!(ar(IValue::Bool(true), N, I(1)), "none");
    }

    #[test]
    fn fill_values_must_fit() {
        let shape = IValue::IntList(vec![2]);
        let f = |v: IValue, d: IValue| one(full(&[shape.clone(), v, d, IValue::None]));
        assert_eq!(f(IValue::Int(3), IValue::None), "int64[2]");
        assert_eq!(f(IValue::Double(3.0), IValue::None), "float64[2]");
        assert_eq!(f(IValue::Int(300), IValue::Str("int8".into())), "none");
        assert_eq!(
            f(IValue::Int(300), IValue::Str("float32".into())),
            "float32[2]"
        );
        assert_eq!(
            one(filled(&[IValue::IntList(vec![-1]), IValue::None])),
            "none"
        );
    }
}
