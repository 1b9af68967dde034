//! Type promotion of the array API standard (its table for two arrays of the same kind, and
//! mixed signed and unsigned integers), NumPy 2's rules where the standard is silent (integers
//! with floating point), and Python scalars as "weak" (NEP 50): a scalar takes the array's
//! dtype when its kind allows, so `x + 1` keeps `x.dtype` and an integer array plus `1.5` is
//! float64.

use crate::tensor::{DType, Kind};

/// The dtype two arrays promote to.
pub(super) fn promote(a: DType, b: DType) -> DType {
    use DType::{C128, C64, F32, F64, I16, I32, I64};
    use Kind::{Bool, Complex, Float, Signed, Unsigned};
    if a == b {
        return a;
    }
    let (ka, kb) = (a.kind(), b.kind());
    // Order the pair so `a` is the "lower" kind.
    let rank = |k: Kind| match k {
        Bool => 0,
        Signed | Unsigned => 1,
        Float => 2,
        Complex => 3,
    };
    let (a, b, ka, kb) = if rank(ka) <= rank(kb) {
        (a, b, ka, kb)
    } else {
        (b, a, kb, ka)
    };
    let bigger = |x: DType, y: DType| if x.size() >= y.size() { x } else { y };
    match (ka, kb) {
        (Bool, _) => b,
        (Signed, Signed) | (Unsigned, Unsigned) | (Float, Float) | (Complex, Complex) => {
            bigger(a, b)
        }
        (Signed, Unsigned) | (Unsigned, Signed) => {
            let (s, u) = if ka == Signed { (a, b) } else { (b, a) };
            match (s.size(), u.size()) {
                (ss, us) if us < ss => s,
                (_, 1) => I16,
                (_, 2) => I32,
                (_, 4) => I64,
                _ => F64,
            }
        }
        // Integers with floating point: NumPy's rule (the standard leaves it open); an integer
        // of up to 16 bits fits in float32's mantissa.
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
        // `a` is the lower kind: no other pair is left.
        _ => b,
    }
}

/// A Python scalar of a binary operator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Weak {
    Bool(bool),
    Int(i64),
    Float(f64),
}

/// The dtype of an array of dtype `a` with a Python scalar (NEP 50); `None` where NumPy
/// raises (an int that the array's integer dtype cannot hold: `OverflowError`) or where a
/// comparison would compare it exactly instead (left to the CPU kernel).
pub(super) fn with_scalar(a: DType, s: Weak) -> Option<DType> {
    match (a.kind(), s) {
        (_, Weak::Bool(_)) => Some(a),
        (Kind::Bool, Weak::Int(_)) => Some(DType::I64),
        (Kind::Signed | Kind::Unsigned, Weak::Int(i)) => holds_int(a, i).then_some(a),
        (Kind::Bool | Kind::Signed | Kind::Unsigned, Weak::Float(_)) => Some(DType::F64),
        (Kind::Float | Kind::Complex, _) => Some(a),
    }
}

/// Whether integer dtype `d` holds `i`.
fn holds_int(d: DType, i: i64) -> bool {
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

/// The dtype a true division of `d` computes in: integers and bools divide as float64.
pub(super) fn division(d: DType) -> DType {
    match d.kind() {
        Kind::Bool | Kind::Signed | Kind::Unsigned => DType::F64,
        _ => d,
    }
}

/// The standard's accumulation dtype of `sum` and `prod`: int64 for bools and signed
/// integers, uint64 for unsigned ones, the dtype itself for floating point.
pub(super) fn accumulation(d: DType) -> DType {
    match d.kind() {
        Kind::Bool | Kind::Signed => DType::I64,
        Kind::Unsigned => DType::U64,
        _ => d,
    }
}

/// Whether `from` casts safely (exactly) to `to`.
pub(super) fn safe(from: DType, to: DType) -> bool {
    promote(from, to) == to
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn the_standards_table() {
        assert_eq!(promote(I8, I32), I32);
        assert_eq!(promote(U8, U64), U64);
        assert_eq!(promote(I8, U8), I16);
        assert_eq!(promote(U32, I8), I64);
        assert_eq!(promote(I64, U8), I64);
        assert_eq!(promote(F32, F64), F64);
        assert_eq!(promote(C64, F64), C128);
        assert_eq!(promote(F32, C64), C64);
        assert_eq!(promote(Bool, U16), U16);
        for d in DType::ALL {
            assert_eq!(promote(d, d), d);
            for e in DType::ALL {
                assert_eq!(promote(d, e), promote(e, d));
            }
        }
    }

    #[test]
    fn numpys_rules_where_the_standard_is_silent() {
        assert_eq!(promote(I64, U64), F64);
        assert_eq!(promote(I16, F32), F32);
        assert_eq!(promote(I32, F32), F64);
        assert_eq!(promote(U8, C64), C64);
        assert_eq!(promote(I64, C64), C128);
    }

    #[test]
    fn python_scalars_are_weak() {
        assert_eq!(with_scalar(I8, Weak::Int(1)), Some(I8));
        assert_eq!(with_scalar(I8, Weak::Int(1000)), None);
        assert_eq!(with_scalar(U8, Weak::Int(-1)), None);
        assert_eq!(with_scalar(Bool, Weak::Int(1)), Some(I64));
        assert_eq!(with_scalar(I32, Weak::Float(0.5)), Some(F64));
        assert_eq!(with_scalar(F32, Weak::Float(0.5)), Some(F32));
        assert_eq!(with_scalar(U16, Weak::Bool(true)), Some(U16));
        assert_eq!(with_scalar(C64, Weak::Int(3)), Some(C64));
    }

    #[test]
    fn accumulation_and_division_dtypes() {
        assert_eq!(accumulation(Bool), I64);
        assert_eq!(accumulation(U8), U64);
        assert_eq!(accumulation(F32), F32);
        assert_eq!(division(U8), F64);
        assert_eq!(division(C64), C64);
        assert!(safe(I8, I64) && !safe(F64, F32) && !safe(C64, F64));
    }
}
