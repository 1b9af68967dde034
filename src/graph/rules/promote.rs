//! Type promotion as `boxfall.array_api`'s NumPy kernels apply it: the standard's table, NumPy
//! 2's rules where the standard is silent (integers with floating point, int64 with uint64),
//! Python scalars as weak (NEP 50), NumPy's `same_kind` casting (what an in-place operator's
//! output and a reduction's `dtype=` accept), and the floating-point loop a NumPy ufunc picks
//! for integers (`sin(int16)` is float32).
//!
//! The Native backend has its own copy of the first rules (`native/promote.rs`); the graph
//! floor stands below it, and the two are checked against the same NumPy kernels by the
//! Python tests of each.

use super::args::Weak;
use crate::tensor::{DType, Kind};

/// The dtype two arrays promote to (`np.result_type` of two dtypes).
pub(super) fn promote(a: DType, b: DType) -> DType {
    use DType::{C128, C64, F32, F64, I16, I32, I64};
    use Kind::{Bool, Complex, Float, Signed, Unsigned};
    if a == b {
        return a;
    }
    let rank = |k: Kind| match k {
        Bool => 0,
        Signed | Unsigned => 1,
        Float => 2,
        Complex => 3,
    };
    // Order the pair so that `a` is of the lower kind.
    let (a, b) = if rank(a.kind()) <= rank(b.kind()) {
        (a, b)
    } else {
        (b, a)
    };
    let bigger = |x: DType, y: DType| if x.size() >= y.size() { x } else { y };
    match (a.kind(), b.kind()) {
        (Bool, _) => b,
        (Signed, Signed) | (Unsigned, Unsigned) | (Float, Float) | (Complex, Complex) => {
            bigger(a, b)
        }
        (Signed, Unsigned) | (Unsigned, Signed) => {
            let (s, u) = if a.kind() == Signed { (a, b) } else { (b, a) };
            match (s.size(), u.size()) {
                (ss, us) if us < ss => s,
                (_, 1) => I16,
                (_, 2) => I32,
                (_, 4) => I64,
                _ => F64,
            }
        }
        // An integer of up to 16 bits fits float32's mantissa; wider ones go to float64.
        (Signed | Unsigned, Float) => match (a.size(), b) {
            (1 | 2, F32) => F32,
            _ => F64,
        },
        (Signed | Unsigned, Complex) => match (a.size(), b) {
            (1 | 2, C64) => C64,
            _ => C128,
        },
        (Float, Complex) => match (a, b) {
            (F32, C64) => C64,
            _ => C128,
        },
        // `a` is of the lower kind: no other pair is left.
        _ => b,
    }
}

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

/// Whether integer dtype `d` holds `i`.
pub(super) fn holds(d: DType, i: i64) -> bool {
    match d {
        DType::I8 => i8::try_from(i).is_ok(),
        DType::I16 => i16::try_from(i).is_ok(),
        DType::I32 => i32::try_from(i).is_ok(),
        DType::I64 => true,
        DType::U8 => u8::try_from(i).is_ok(),
        DType::U16 => u16::try_from(i).is_ok(),
        DType::U32 => u32::try_from(i).is_ok(),
        DType::U64 => i >= 0,
        _ => false,
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

/// The standard's accumulation dtype of `sum`, `prod` and `cumulative_*`: int64 for bools and
/// signed integers, uint64 for unsigned ones, the dtype itself for floating point.
pub(super) fn accumulation(d: DType) -> DType {
    match d.kind() {
        Kind::Bool | Kind::Signed => DType::I64,
        Kind::Unsigned => DType::U64,
        _ => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn the_standards_table_and_numpys_rules() {
        assert_eq!(promote(I8, I32), I32);
        assert_eq!(promote(I8, U8), I16);
        assert_eq!(promote(U32, I8), I64);
        assert_eq!(promote(I64, U64), F64);
        assert_eq!(promote(I16, F32), F32);
        assert_eq!(promote(I32, F32), F64);
        assert_eq!(promote(F32, C64), C64);
        assert_eq!(promote(F64, C64), C128);
        assert_eq!(promote(Bool, U16), U16);
        for d in DType::ALL {
            assert_eq!(promote(d, d), d);
            for e in DType::ALL {
                assert_eq!(promote(d, e), promote(e, d));
            }
        }
    }

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
