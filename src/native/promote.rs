//! Native's promotion rules on top of the shared ones (`tensor/promote.rs`): a binary
//! operator's array with a Python scalar, true division's dtype, and safe casts.

use crate::tensor::promote::holds;
pub(super) use crate::tensor::promote::{accumulation, promote, Weak};
use crate::tensor::{DType, Kind};

/// The dtype of an array of dtype `a` with a Python scalar (NEP 50); `None` where NumPy
/// raises (an int that the array's integer dtype cannot hold: `OverflowError`) or where a
/// comparison would compare it exactly instead (left to the CPU kernel).
pub(super) fn with_scalar(a: DType, s: Weak) -> Option<DType> {
    match (a.kind(), s) {
        (_, Weak::Bool(_)) => Some(a),
        (Kind::Bool, Weak::Int(_)) => Some(DType::I64),
        (Kind::Signed | Kind::Unsigned, Weak::Int(i)) => holds(a, i).then_some(a),
        (Kind::Bool | Kind::Signed | Kind::Unsigned, Weak::Float(_)) => Some(DType::F64),
        (Kind::Float | Kind::Complex, _) => Some(a),
    }
}

/// The dtype a true division of `d` computes in: integers and bools divide as float64.
pub(super) fn division(d: DType) -> DType {
    match d.kind() {
        Kind::Bool | Kind::Signed | Kind::Unsigned => DType::F64,
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
    fn division_and_safe_casts() {
        assert_eq!(division(U8), F64);
        assert_eq!(division(C64), C64);
        assert!(safe(I8, I64) && !safe(F64, F32) && !safe(C64, F64));
    }
}
