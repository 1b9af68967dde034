//! The read-only NumPy views lent to Python kernels, kept with the tensor they see.

use std::sync::Arc;

use numpy::PyUntypedArray;
use pyo3::prelude::*;

use super::payload::cpu_tensor_to_numpy;
use crate::python::ffi::read_only_parts;
use crate::tensor::Tensor;

/// A read-only NumPy view kept with the tensor it sees (`Tensor::host_view`), and what it
/// looked like when made: a kernel may reshape or retype the array object in place
/// (`a.shape = ...`), and such a view is not handed out again.
pub(super) struct LentView {
    array: Py<PyUntypedArray>,
    data: usize,
    descr: usize,
    dims: Box<[isize]>,
    strides: Box<[isize]>,
}

impl LentView {
    pub(super) fn new(array: &Bound<'_, PyAny>) -> Option<LentView> {
        let array = array.cast::<PyUntypedArray>().ok()?;
        let (data, descr, dims, strides) = read_only_parts(array)?;
        Some(LentView {
            array: array.clone().unbind(),
            data,
            descr,
            dims: dims.into(),
            strides: strides.into(),
        })
    }

    /// The view, if it is still read-only and as it was made.
    pub(super) fn intact<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        let array = self.array.bind(py);
        let (data, descr, dims, strides) = read_only_parts(array)?;
        let same = data == self.data
            && descr == self.descr
            && same_values(dims, &self.dims)
            && same_values(strides, &self.strides);
        same.then(|| array.clone().into_any())
    }
}

/// `a == b`, compared in place: a slice's `==` calls `memcmp`, which costs more than the one or
/// two values of most arrays' shapes.
#[inline]
fn same_values(a: &[isize], b: &[isize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A CPU tensor as the NumPy array a Python kernel receives: as `cpu_tensor_to_numpy`, except
/// that a read-only view of host memory is made once per tensor and data and kept with the
/// tensor (Native lends one tensor, its loan, for its whole life; a write drops the view), so a
/// tensor lent on every call costs one view. Only kernels get kept views: a caller's `x.numpy()` is a new array each
/// time, as NumPy users expect of a method that returns a view.
pub fn kernel_array<'py>(
    py: Python<'py>,
    t: &Tensor,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if writable || !t.is_host() {
        return cpu_tensor_to_numpy(py, t, writable);
    }
    // Read in place (no Python code runs meanwhile: `intact` only reads the array's fields).
    let kept = t.with_host_view(|v| {
        v.and_then(|v| v.downcast_ref::<LentView>())
            .and_then(|view| view.intact(py))
    });
    if let Some(array) = kept {
        return Ok(array);
    }
    let array = cpu_tensor_to_numpy(py, t, false)?;
    if let Some(view) = LentView::new(&array) {
        t.set_host_view(Arc::new(view));
    }
    Ok(array)
}
