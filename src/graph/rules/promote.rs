//! Type promotion as `boxfall.array_api`'s NumPy kernels apply it: the standard's table, NumPy
//! 2's rules where the standard is silent (integers with floating point, int64 with uint64),
//! Python scalars as weak (NEP 50), NumPy's `same_kind` casting (what an in-place operator's
//! output and a reduction's `dtype=` accept), and the floating-point loop a NumPy ufunc picks
//! for integers (`sin(int16)` is float32).
//!
//! The standard's table, weak scalars' kind, integer ranges and accumulation dtypes are the
//! ones Native's kernels use too (`tensor/promote.rs`); what is here is what only shape rules
//! need.

use crate::tensor::promote::Weak;
pub(super) use crate::tensor::promote::{accumulation, holds, promote};
use crate::tensor::{DType, Kind};

/// The dtype of an array of dtype `a` with a Python scalar (NEP 50): the array's dtype where
/// the scalar's kind allows, the default dtype of the scalar's kind where it is wider
/// (`int8 + 1.5` is float64, `bool + 1` int64); `None` for an int the array's integer dtype
/// cannot hold (NumPy's `OverflowError`).
pub(super) fn weak(a: DType, s: Weak) -> Option<DType> {
    let d = weak_kind(a, s);
    match s {
        Weak::Int(i) if matches!(d.kind(), Kind::Signed | Kind::Unsigned) => {
            holds(d, i).then_some(d)
        }
        _ => Some(d),
    }
}

/// `weak` without the range check: what a ufunc whose loops are all floating point promotes
/// to (NumPy converts the int to the loop's float, never to the array's integer dtype, so
/// `atan2(int16_array, 2**40)` is float32).
pub(super) fn weak_kind(a: DType, s: Weak) -> DType {
    match (a.kind(), s) {
        (Kind::Bool, Weak::Int(_)) => DType::I64,
        (Kind::Bool | Kind::Signed | Kind::Unsigned, Weak::Float(_)) => DType::F64,
        _ => a,
    }
}

/// NumPy's `can_cast(from, to, "same_kind")`: a safe cast, or one within a kind or to a
/// higher kind (bool, unsigned, signed, floating, complex in that order).
pub(super) fn same_kind(from: DType, to: DType) -> bool {
    let rank = |d: DType| match d.kind() {
        Kind::Bool => 0,
        Kind::Unsigned => 1,
        Kind::Signed => 2,
        Kind::Float => 3,
        Kind::Complex => 4,
    };
    promote(from, to) == to || rank(from) <= rank(to)
}

/// The width of the floating-point loop a NumPy ufunc with only floating loops picks for
/// `d`: the smallest float `d` casts to safely (16 for bool and 8-bit integers, 32 for
/// 16-bit ones, 64 for wider ones), `None` for complex.
pub(super) fn float_width(d: DType) -> Option<u8> {
    match d {
        DType::Bool | DType::I8 | DType::U8 => Some(16),
        DType::I16 | DType::U16 | DType::F32 => Some(32),
        DType::I32 | DType::U32 | DType::I64 | DType::U64 | DType::F64 => Some(64),
        DType::C64 | DType::C128 => None,
    }
}

/// The float of a width: `None` for float16, which no dtype of the standard (nor host memory)
/// is: NumPy's `sin(int8)` has no rule.
pub(super) fn float_of(width: u8) -> Option<DType> {
    match width {
        32 => Some(DType::F32),
        64 => Some(DType::F64),
        _ => None,
    }
}

/// The result of a ufunc with floating and complex loops (`sin`, `exp`, `sqrt`) for `d`.
pub(super) fn inexact(d: DType) -> Option<DType> {
    match d.kind() {
        Kind::Complex => Some(d),
        _ => float_of(float_width(d)?),
    }
}

/// The dtype `numpy.linalg` computes in: float64 for bools and integers, the dtype itself
/// for floating and complex ones.
pub(super) fn linalg(d: DType) -> DType {
    match d.kind() {
        Kind::Bool | Kind::Signed | Kind::Unsigned => DType::F64,
        _ => d,
    }
}

/// The real dtype of a complex one (the dtype itself otherwise): `abs`, `real`, norms.
pub(super) fn real(d: DType) -> DType {
    match d {
        DType::C64 => DType::F32,
        DType::C128 => DType::F64,
        d => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn python_scalars_are_weak() {
        assert_eq!(weak(I8, Weak::Int(127)), Some(I8));
        assert_eq!(weak(I8, Weak::Int(128)), None);
        assert_eq!(weak(U8, Weak::Int(-1)), None);
        assert_eq!(weak(Bool, Weak::Int(1)), Some(I64));
        assert_eq!(weak(I32, Weak::Float(0.5)), Some(F64));
        assert_eq!(weak(F32, Weak::Float(1e300)), Some(F32));
        assert_eq!(weak(U16, Weak::Bool(true)), Some(U16));
        assert_eq!(weak(C64, Weak::Int(3)), Some(C64));
        assert_eq!(weak_kind(I16, Weak::Int(1 << 40)), I16);
    }

    #[test]
    fn same_kind_casting() {
        assert!(same_kind(I64, I8));
        assert!(same_kind(F64, F32));
        assert!(same_kind(U64, I8));
        assert!(same_kind(I64, F32));
        assert!(!same_kind(I8, U8));
        assert!(!same_kind(F64, I64));
        assert!(!same_kind(C64, F64));
        assert!(!same_kind(I8, Bool));
    }

    #[test]
    fn float_loops_of_integers() {
        assert_eq!(inexact(I16), Some(F32));
        assert_eq!(inexact(U64), Some(F64));
        assert_eq!(inexact(I8), None);
        assert_eq!(inexact(C64), Some(C64));
        assert_eq!(linalg(Bool), F64);
        assert_eq!(real(C64), F32);
        assert_eq!(accumulation(U8), U64);
        assert_eq!(accumulation(Bool), I64);
    }
}
