//! A view's description (`PyViewOps`): what a `bf.Tensor` that is a view knows of itself
//! without making its values (its shape and dtype), apart from `view.rs`, which makes and
//! writes views, so that the tensor class can ask a view its shape without standing above
//! the view machinery (which stands on the tensor class's conversions).

use numpy::PyUntypedArray;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::strided::Strided;
use crate::tensor::Tensor;

/// A view's description: the steps from its base, and the view's layout on a stand-in array of
/// the base's shape and dtype that owns no memory of its base's size (`_views.stand_in`), on
/// which the next view's steps are checked.
pub struct PyViewOps {
    pub(super) chain: Py<PyTuple>,
    pub(super) layout: Py<PyUntypedArray>,
    pub(super) shape: Vec<usize>,
    pub(super) dtype: Py<PyAny>,
    /// The address of the stand-in's first element, from which `layout`'s offset counts.
    pub(super) origin: isize,
    /// Where the view's elements are among its base's: a host base is read and written here,
    /// in Rust.
    pub(super) place: Strided,
    /// Whether a write through the view is allowed (NumPy makes `broadcast_to`'s read-only).
    pub(super) writable: bool,
}

impl PyViewOps {
    /// The view's shape (known without making its values).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The view's NumPy dtype.
    pub fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.dtype.bind(py).clone()
    }
}

/// The description of `t`, if `t` is a view made here.
pub fn view_ops(t: &Tensor) -> Option<&PyViewOps> {
    t.view_ops()?.as_any().downcast_ref::<PyViewOps>()
}
