//! A NumPy array over memory boxfall owns: the one place the bindings make one with NumPy's C
//! API (`PyArray_NewFromDescr` and `PyArray_SetBaseObject`), for the read-only arrays lent to
//! Python kernels (`tensor.rs`) and the writable arrays of exported memory
//! (`numpy_memory.rs`).

use numpy::npyffi::{self, npy_intp, PY_ARRAY_API};
use numpy::PyArrayDescrMethods;
use pyo3::prelude::*;

/// A NumPy array of `T` with `dims` and byte `strides` at `data`, writable if `writable`,
/// whose base object `owner` keeps the memory alive.
///
/// # Safety
/// `data` with `dims` and `strides` must reach only elements of one live allocation that
/// `owner` keeps alive, and, when `writable`, NumPy writing them must be sound (no Rust
/// reference to those elements alive while Python code runs).
pub unsafe fn array_over<'py, T: numpy::Element>(
    owner: Bound<'py, PyAny>,
    dims: &mut [npy_intp],
    strides: &mut [npy_intp],
    data: *mut std::os::raw::c_void,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = owner.py();
    let nd = std::os::raw::c_int::try_from(dims.len()).map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "a tensor of {} dimensions has no NumPy array",
            dims.len()
        ))
    })?;
    let flags = if writable {
        npyffi::flags::NPY_ARRAY_WRITEABLE
    } else {
        0
    };
    // SAFETY: the caller vouches for `data` (above). `PyArray_NewFromDescr` (the GIL is held:
    // `owner` is bound) reads `nd` dimensions and strides from the two slices, which live
    // across the call, and steals the dtype reference `into_dtype_ptr` gives it; NULL is
    // NumPy's error (too many dimensions: ValueError), taken over by `from_owned_ptr_or_err`.
    // `PyArray_SetBaseObject` steals the reference to `owner` that `into_ptr` gives up, also
    // when it fails (-1, with an error set).
    unsafe {
        let raw = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
            T::get_dtype(py).into_dtype_ptr(),
            nd,
            dims.as_mut_ptr(),
            strides.as_mut_ptr(),
            data,
            flags,
            std::ptr::null_mut(),
        );
        let arr = Bound::from_owned_ptr_or_err(py, raw)?;
        if PY_ARRAY_API.PyArray_SetBaseObject(
            py,
            arr.as_ptr() as *mut npyffi::PyArrayObject,
            owner.into_ptr(),
        ) < 0
        {
            return Err(PyErr::fetch(py));
        }
        Ok(arr)
    }
}
