//! Rust host memory as NumPy arrays: lent read-only, or copied writable.

use std::sync::Arc;

use numpy::PyUntypedArray;
use pyo3::prelude::*;

use crate::python::ffi::{array_over, new_copy};
use crate::tensor::HostArray;

/// Keeps host memory alive for as long as a NumPy array that borrows it.
#[pyclass(frozen, module = "boxfall._boxfall")]
struct HostOwner {
    _data: Arc<HostArray>,
}

/// Host memory as NumPy: a read-only array that borrows it (lent), or a writable copy, which
/// NumPy makes (so that memory it cannot allocate is its own `MemoryError`). Any rank NumPy
/// supports (64 dimensions in NumPy 2, 32 before); beyond, NumPy's `ValueError`.
pub fn host_to_numpy<'py>(
    py: Python<'py>,
    host: Arc<HostArray>,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    // The owner takes the `Arc` itself (no second count to take and drop).
    let owner = Bound::new(py, HostOwner { _data: host })?;
    let host: &HostArray = &owner.get()._data;
    let owner = owner.clone().into_any();
    let lent = crate::tensor::host_match!(host, a => borrow_read_only(a, owner))?;
    if !writable {
        return Ok(lent);
    }
    new_copy(&lent.cast_into::<PyUntypedArray>()?)
}

/// A read-only NumPy array over `a`'s memory, whose base object `owner` keeps that memory
/// alive. Built with dimensions and strides of `a`'s own rank (rust-numpy's
/// `borrow_from_array` holds them in 32-slot arrays and panics beyond).
fn borrow_read_only<'py, T: numpy::Element>(
    a: &ndarray::ArrayD<T>,
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let itemsize = std::mem::size_of::<T>() as isize;
    let mut dims: Vec<isize> = a.shape().iter().map(|&d| d as isize).collect();
    let mut strides: Vec<isize> = a.strides().iter().map(|&s| s * itemsize).collect();
    let data = a.as_ptr().cast_mut().cast();
    // SAFETY: the data pointer and strides are those of `a`, whose memory `owner` keeps alive
    // (it holds the `Arc` of the `HostArray` that `a` is in), and the array is read-only. A
    // write replaces a tensor's `Arc` (tensor.rs), except for exported memory, which NumPy and
    // boxfall write in place through its raw pointer (host_memory.rs): this array then reads
    // the values as they are now, as NumPy's own read-only views of a written array do.
    // Exercised by tests/python/test_native.py (the lent-memory tests) and
    // test_native_memory.py (33 and more dimensions).
    unsafe { array_over::<T>(owner, &mut dims, &mut strides, data, false) }
}
