//! What `bf.Tensor`'s binary operator methods (`tensor.rs`) ask of the layer that calls
//! operators: [`binary`], `x.<name>(other)` by its operator where the operands' types decide
//! it. The tensor class stands below the operator objects and the call paths (they convert
//! to and from tensors), so it names only this trait; the implementation, which calls
//! `array_api`'s `OpOverload`s, is in `array_methods.rs`, above them.

use pyo3::prelude::*;

/// A tensor class whose binary operator methods go straight to their operators.
pub trait BinaryOperators: Sized {
    /// `slf.<name>(other)` by the operator, or `None` where the Python method must serve.
    fn binary(
        slf: &Bound<'_, Self>,
        name: &str,
        other: &Bound<'_, PyAny>,
    ) -> Option<PyResult<Py<PyAny>>>;
}

/// `slf.<name>(other)` by the operator, or `None` where the Python method must serve (an
/// operand it converts or refuses, a method or operator not known there).
#[inline]
pub fn binary<T: BinaryOperators>(
    slf: &Bound<'_, T>,
    name: &str,
    other: &Bound<'_, PyAny>,
) -> Option<PyResult<Py<PyAny>>> {
    T::binary(slf, name, other)
}
