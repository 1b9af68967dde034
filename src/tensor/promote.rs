//! Type promotion of the array API standard (its table for two arrays of the same kind, and
//! mixed signed and unsigned integers), NumPy 2's rules where the standard is silent (integers
//! with floating point, int64 with uint64), and Python scalars as "weak" (NEP 50). Native's
//! kernels (`native/promote.rs`) and graph mode's shape rules (`graph/rules/promote.rs`) build
//! their own rules on these, so that both promote as `boxfall.array_api`'s NumPy kernels do.

use super::dtype::{DType, Kind};

/// The dtype two arrays promote to.
pub(crate) fn promote(a: DType, b: DType) -> DType {
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

/// A Python scalar argument (`Scalar`) as NumPy takes it: weakly typed (NEP 50).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Weak {
    /// A Python bool.
    Bool(bool),
    /// A Python int (of 64 bits: the bindings refuse larger ones).
    Int(i64),
    /// A Python float.
    Float(f64),
}

/// Whether integer dtype `d` holds `i` (false for any other dtype).
pub(crate) fn holds(d: DType, i: i64) -> bool {
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

/// The standard's accumulation dtype of `sum` and `prod`: int64 for bools and signed
/// integers, uint64 for unsigned ones, the dtype itself for floating point.
pub(crate) fn accumulation(d: DType) -> DType {
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
        assert_eq!(promote(U8, U64), U64);
        assert_eq!(promote(I8, U8), I16);
        assert_eq!(promote(U32, I8), I64);
        assert_eq!(promote(I64, U8), I64);
        assert_eq!(promote(F32, F64), F64);
        assert_eq!(promote(C64, F64), C128);
        assert_eq!(promote(F32, C64), C64);
        assert_eq!(promote(Bool, U16), U16);
        assert_eq!(promote(I64, U64), F64);
        assert_eq!(promote(I16, F32), F32);
        assert_eq!(promote(I32, F32), F64);
        assert_eq!(promote(U8, C64), C64);
        assert_eq!(promote(I64, C64), C128);
        for d in DType::ALL {
            assert_eq!(promote(d, d), d);
            for e in DType::ALL {
                assert_eq!(promote(d, e), promote(e, d));
            }
        }
    }

    #[test]
    fn integer_ranges_and_accumulation() {
        assert!(holds(I8, 127) && !holds(I8, 128) && !holds(U8, -1) && holds(U64, 0));
        assert!(!holds(F32, 1));
        assert_eq!(accumulation(Bool), I64);
        assert_eq!(accumulation(U8), U64);
        assert_eq!(accumulation(F32), F32);
    }
}
