//! Element-wise operators: unary ones, binary ones with two arrays or an array and a Python
//! scalar (`Tensor_Scalar`, `Scalar_Tensor`), the in-place forms (`add_`), `clip` and `where`.
//!
//! A NumPy ufunc first promotes its inputs (a Python scalar weakly), then runs the loop it has
//! for that dtype; each class below is one shape of that loop table, read off the kernels
//! (`tests/python/test_graph_rules.py` checks every dtype against them).

use super::args::{self, broadcast, broadcasts_to, Weak};
use super::promote::{float_of, float_width, inexact, promote, real, same_kind, weak, weak_kind};
use crate::ivalue::IValue;
use crate::tensor::{DType, Kind, TensorMeta};

/// What a unary operator's loops give for each dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unary {
    /// `abs`: the dtype, complex to its real dtype.
    Abs,
    /// `ceil`, `floor`, `trunc`: the dtype; none for complex.
    Rounding,
    /// `round`: the dtype; none for bool (NumPy's float16).
    Round,
    /// `bitwise_invert`: bools and integers only.
    Invert,
    /// `negative`, `positive`, `sign`: the dtype; none for bool.
    NoBool,
    /// `conj`, `reciprocal`, `square`: the dtype, bool as int8.
    BoolAsInt8,
    /// `real`, `imag`: the real dtype.
    RealPart,
    /// `sin`, `exp`, `sqrt`...: floating loops (integers to the float that holds them).
    Inexact,
    /// `isfinite`, `isinf`, `isnan`, `logical_not`: bool.
    Predicate,
    /// `signbit`: bool; none for complex.
    Signbit,
}

/// What a binary operator's loops give for the promoted dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Binary {
    /// `add`, `multiply`, `maximum`, `minimum`: the promoted dtype.
    Same,
    /// `subtract`: the promoted dtype; none for bool.
    Subtract,
    /// `divide`: floating point (integers and bools as float64).
    Divide,
    /// `floor_divide`, `remainder`: bool as int8; none for complex.
    Floor,
    /// `pow`: bool as int8; none for an integer to a negative Python int.
    Pow,
    /// `bitwise_and`, `_or`, `_xor`: bools and integers.
    Bitwise,
    /// `bitwise_left_shift`, `_right_shift`: integers, bool as int8.
    Shift,
    /// Comparisons and logical operators: bool, whatever the scalar.
    Predicate,
    /// `atan2`, `copysign`, `hypot`, `logaddexp`, `nextafter`: real floating loops only.
    Float,
}

/// One operand of a binary operator.
#[derive(Clone, Copy, Debug)]
pub(super) enum Operand {
    /// An array of this dtype.
    Array(DType),
    /// A Python scalar.
    Scalar(Weak),
}

/// The result dtype of a unary operator of class `class` on `d`.
pub(super) fn unary_dtype(class: Unary, d: DType) -> Option<DType> {
    let kind = d.kind();
    match class {
        Unary::Abs => Some(real(d)),
        Unary::Rounding => (kind != Kind::Complex).then_some(d),
        Unary::Round | Unary::NoBool => (kind != Kind::Bool).then_some(d),
        Unary::Invert => matches!(kind, Kind::Bool | Kind::Signed | Kind::Unsigned).then_some(d),
        Unary::BoolAsInt8 => Some(if kind == Kind::Bool { DType::I8 } else { d }),
        Unary::RealPart => Some(real(d)),
        Unary::Inexact => inexact(d),
        Unary::Predicate => Some(DType::Bool),
        Unary::Signbit => (kind != Kind::Complex).then_some(DType::Bool),
    }
}

/// `name(x)`: the dtype of its class, `x`'s shape.
pub(super) fn unary(class: Unary, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    Some(vec![args::out(unary_dtype(class, x.dtype)?, x.shape)])
}

/// The result dtype of a binary operator of class `class` on two operands (not two scalars).
pub(super) fn binary_dtype(class: Binary, a: Operand, b: Operand) -> Option<DType> {
    if class == Binary::Predicate {
        // NumPy compares a Python int with any array exactly, in or out of its dtype's range.
        return Some(DType::Bool);
    }
    if class == Binary::Float {
        // Each array casts to the loop on its own: int8 and uint8 meet at float16, not at
        // their promoted int16's float32.
        let w = match (a, b) {
            (Operand::Array(x), Operand::Array(y)) => float_width(x)?.max(float_width(y)?),
            (Operand::Array(x), Operand::Scalar(s)) | (Operand::Scalar(s), Operand::Array(x)) => {
                float_width(weak_kind(x, s))?
            }
            _ => return None,
        };
        return float_of(w);
    }
    let common = match (a, b) {
        (Operand::Array(x), Operand::Array(y)) => promote(x, y),
        // True division's loops are floating point: the int meets no integer dtype there.
        (Operand::Array(x), Operand::Scalar(s)) | (Operand::Scalar(s), Operand::Array(x))
            if class == Binary::Divide =>
        {
            weak_kind(x, s)
        }
        (Operand::Array(x), Operand::Scalar(s)) | (Operand::Scalar(s), Operand::Array(x)) => {
            weak(x, s)?
        }
        _ => return None,
    };
    let kind = common.kind();
    let integral = matches!(kind, Kind::Signed | Kind::Unsigned);
    match class {
        Binary::Same => Some(common),
        Binary::Subtract => (kind != Kind::Bool).then_some(common),
        Binary::Divide => Some(if integral || kind == Kind::Bool {
            DType::F64
        } else {
            common
        }),
        Binary::Floor => match kind {
            Kind::Bool => Some(DType::I8),
            Kind::Complex => None,
            _ => Some(common),
        },
        Binary::Pow => {
            // An integer array to a negative Python int is NumPy's ValueError.
            if let (Operand::Scalar(Weak::Int(i)), true) = (b, integral) {
                if i < 0 {
                    return None;
                }
            }
            Some(if kind == Kind::Bool {
                DType::I8
            } else {
                common
            })
        }
        Binary::Bitwise => (integral || kind == Kind::Bool).then_some(common),
        Binary::Shift => match kind {
            Kind::Bool => Some(DType::I8),
            _ => integral.then_some(common),
        },
        Binary::Predicate | Binary::Float => None,
    }
}

/// The operands of a binary overload: `""` two tensors, `Tensor_Scalar`, `Scalar_Tensor`,
/// and the shape of the result.
fn operands(overload: &str, stack: &[IValue]) -> Option<(Operand, Operand, Vec<usize>)> {
    match overload {
        "" => {
            let (a, b) = (args::tensor(stack, 0)?, args::tensor(stack, 1)?);
            let shape = broadcast(&a.shape, &b.shape)?;
            Some((Operand::Array(a.dtype), Operand::Array(b.dtype), shape))
        }
        "Tensor_Scalar" => {
            let a = args::tensor(stack, 0)?;
            let s = args::scalar(stack, 1)?;
            Some((Operand::Array(a.dtype), Operand::Scalar(s), a.shape))
        }
        "Scalar_Tensor" => {
            let s = args::scalar(stack, 0)?;
            let b = args::tensor(stack, 1)?;
            Some((Operand::Scalar(s), Operand::Array(b.dtype), b.shape))
        }
        _ => None,
    }
}

/// `name.overload(x1, x2)`: the dtype of its class for the two operands, their broadcast shape.
pub(super) fn binary(class: Binary, overload: &str, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (a, b, shape) = operands(overload, stack)?;
    Some(vec![args::out(binary_dtype(class, a, b)?, shape)])
}

/// `name_(x1, x2)` and `name_.Scalar(x1, x2)`: the result is written into `x1`, so it is
/// `x1`'s meta, where NumPy's `out=` takes it: the result casts to `x1`'s dtype by
/// `same_kind`, and the operands' broadcast shape is `x1`'s own.
pub(super) fn in_place(class: Binary, overload: &str, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x1 = args::tensor(stack, 0)?;
    let other = match overload {
        "" => {
            let x2 = args::tensor(stack, 1)?;
            if !broadcasts_to(&x2.shape, &x1.shape) {
                return None;
            }
            Operand::Array(x2.dtype)
        }
        "Scalar" => Operand::Scalar(args::scalar(stack, 1)?),
        _ => return None,
    };
    let r = binary_dtype(class, Operand::Array(x1.dtype), other)?;
    same_kind(r, x1.dtype).then(|| vec![x1.out()])
}

/// `clip(x, min, max)` (bounds arrays or None) and `clip.Scalar` (Python scalars or None):
/// `x`'s dtype (the kernel casts back), the shape the bounds broadcast `x` to.
pub(super) fn clip(overload: &str, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let mut shape = x.shape.clone();
    match overload {
        "" => {
            for i in [1, 2] {
                if let Some(b) = args::opt_tensor(stack, i)? {
                    shape = broadcast(&shape, &b.shape)?;
                }
            }
        }
        "Scalar" => {
            // NumPy's clip takes a Python int bound outside an integer array's range where it
            // bounds nothing (a minimum below it, a maximum above it), not the other way.
            let (lo, hi) = int_range(x.dtype);
            if let Some(Weak::Int(i)) = args::opt_scalar(stack, 1)? {
                if i128::from(i) > hi {
                    return None;
                }
            }
            if let Some(Weak::Int(i)) = args::opt_scalar(stack, 2)? {
                if i128::from(i) < lo {
                    return None;
                }
            }
        }
        _ => return None,
    }
    Some(vec![args::out(x.dtype, shape)])
}

/// The values an integer dtype holds (any for the others).
fn int_range(d: DType) -> (i128, i128) {
    let bits = 8 * d.size() as u32;
    match d.kind() {
        Kind::Signed => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
        Kind::Unsigned => (0, (1i128 << bits) - 1),
        _ => (i128::MIN, i128::MAX),
    }
}

/// `where(condition, x1, x2)` and its scalar overloads: the promoted dtype of `x1` and `x2`
/// (a scalar weakly, and cast unchecked: NumPy's `where(c, int8_array, 128)` is int8), the
/// shape the three broadcast to.
pub(super) fn where_(overload: &str, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let c = args::tensor(stack, 0)?;
    let (dtype, shape) = match overload {
        "" => {
            let (a, b) = (args::tensor(stack, 1)?, args::tensor(stack, 2)?);
            (promote(a.dtype, b.dtype), broadcast(&a.shape, &b.shape)?)
        }
        "Tensor_Scalar" => {
            let a = args::tensor(stack, 1)?;
            (weak_kind(a.dtype, args::scalar(stack, 2)?), a.shape)
        }
        "Scalar_Tensor" => {
            let b = args::tensor(stack, 2)?;
            (weak_kind(b.dtype, args::scalar(stack, 1)?), b.shape)
        }
        _ => return None,
    };
    Some(vec![args::out(dtype, broadcast(&c.shape, &shape)?)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn unary_classes() {
        assert_eq!(unary_dtype(Unary::Abs, C64), Some(F32));
        assert_eq!(unary_dtype(Unary::Inexact, I16), Some(F32));
        assert_eq!(unary_dtype(Unary::Inexact, U8), None);
        assert_eq!(unary_dtype(Unary::Rounding, C128), None);
        assert_eq!(unary_dtype(Unary::NoBool, Bool), None);
        assert_eq!(unary_dtype(Unary::BoolAsInt8, Bool), Some(I8));
        assert_eq!(unary_dtype(Unary::Invert, F32), None);
        assert_eq!(unary_dtype(Unary::Predicate, C64), Some(Bool));
        assert_eq!(unary_dtype(Unary::Signbit, C64), None);
    }

    #[test]
    fn binary_promotion_with_arrays_and_scalars() {
        let (a, s) = (Operand::Array, Operand::Scalar);
        assert_eq!(binary_dtype(Binary::Same, a(I8), a(U8)), Some(I16));
        assert_eq!(binary_dtype(Binary::Same, a(I8), s(Weak::Int(1))), Some(I8));
        assert_eq!(binary_dtype(Binary::Same, a(I8), s(Weak::Int(300))), None);
        assert_eq!(
            binary_dtype(Binary::Same, a(I8), s(Weak::Float(1.5))),
            Some(F64)
        );
        assert_eq!(
            binary_dtype(Binary::Same, a(F32), s(Weak::Int(3))),
            Some(F32)
        );
        assert_eq!(
            binary_dtype(Binary::Same, a(Bool), s(Weak::Int(3))),
            Some(I64)
        );
        assert_eq!(binary_dtype(Binary::Subtract, a(Bool), a(Bool)), None);
        assert_eq!(binary_dtype(Binary::Divide, a(I32), a(I8)), Some(F64));
        assert_eq!(binary_dtype(Binary::Floor, a(Bool), a(Bool)), Some(I8));
        assert_eq!(binary_dtype(Binary::Pow, a(I8), s(Weak::Int(-1))), None);
        assert_eq!(binary_dtype(Binary::Pow, s(Weak::Int(-1)), a(I8)), Some(I8));
        assert_eq!(binary_dtype(Binary::Bitwise, a(F32), a(I8)), None);
        assert_eq!(
            binary_dtype(Binary::Predicate, a(U8), s(Weak::Int(-1))),
            Some(Bool)
        );
        // Two arrays meet at the float loop each casts to: int8 and uint8 at float16.
        assert_eq!(binary_dtype(Binary::Float, a(I8), a(U16)), Some(F32));
        assert_eq!(binary_dtype(Binary::Float, a(I8), a(U8)), None);
        assert_eq!(binary_dtype(Binary::Float, a(C64), a(F32)), None);
        assert_eq!(
            binary_dtype(Binary::Float, a(I8), s(Weak::Float(0.5))),
            Some(F64)
        );
        assert_eq!(
            binary_dtype(Binary::Float, a(I16), s(Weak::Int(1 << 40))),
            Some(F32)
        );
    }

    #[test]
    fn in_place_keeps_the_written_argument() {
        use crate::tensor::Tensor;
        let t = |d: ndarray::ArrayD<f32>| IValue::Tensor(Tensor::from_array(d));
        let x = t(ndarray::ArrayD::zeros(vec![2, 3]));
        let y = t(ndarray::ArrayD::zeros(vec![3]));
        let out = in_place(Binary::Same, "", &[x.clone(), y.clone()]).unwrap();
        assert_eq!(out[0].to_string(), "float32[2, 3]");
        // The broadcast shape must be x1's own.
        assert!(in_place(Binary::Same, "", &[y, x.clone()]).is_none());
        // float32 /= 2 stays float32; an int array could not take a float64 quotient.
        let out = in_place(Binary::Divide, "Scalar", &[x, IValue::Int(2)]).unwrap();
        assert_eq!(out[0].dtype, "float32");
    }
}
