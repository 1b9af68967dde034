//! NumPy's C API, the one place the bindings speak it: an array over memory boxfall owns
//! (`PyArray_NewFromDescr` and `PyArray_SetBaseObject`), for the read-only arrays lent to
//! Python kernels (`tensor/`) and the writable arrays of exported memory (`numpy_memory.rs`);
//! an array's fields read as NumPy's macros read them (`PyArray_FLAGS`, `PyArray_DATA`,
//! `PyArray_DIMS`); copies and read-only views (`PyArray_NewCopy`, `PyArray_View`).

use numpy::npyffi::{self, PY_ARRAY_API};
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// A NumPy array of `T` with `dims` and byte `strides` at `data`, writable if `writable`,
/// whose base object `owner` keeps the memory alive. (`isize` is NumPy's `npy_intp`.)
///
/// # Safety
/// `data` with `dims` and `strides` must reach only elements of one live allocation that
/// `owner` keeps alive, and, when `writable`, NumPy writing them must be sound (no Rust
/// reference to those elements alive while Python code runs).
pub unsafe fn array_over<'py, T: numpy::Element>(
    owner: Bound<'py, PyAny>,
    dims: &mut [isize],
    strides: &mut [isize],
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

/// NumPy's flags of `arr`, as `PyArray_FLAGS` reads them.
#[inline(always)]
fn flags(arr: &Bound<'_, PyUntypedArray>) -> std::os::raw::c_int {
    // SAFETY: `arr` is a live array object and the GIL is held (it is bound), so no other
    // thread changes it; its flags field is read as NumPy's `PyArray_FLAGS` reads it.
    unsafe { (*arr.as_array_ptr()).fields.flags }
}

/// Whether `arr` owns its memory (NumPy's `OWNDATA` flag).
pub fn owns_data(arr: &Bound<'_, PyUntypedArray>) -> bool {
    flags(arr) & npyffi::flags::NPY_ARRAY_OWNDATA != 0
}

/// The address of `arr`'s first element (NumPy's `PyArray_DATA`), to compare, not to read.
pub fn data_address(arr: &Bound<'_, PyUntypedArray>) -> usize {
    // SAFETY: `arr` is a live array object and the GIL is held; its `data` field is read as
    // NumPy's `PyArray_DATA` reads it, and only its address is returned.
    unsafe { (*arr.as_array_ptr()).fields.data as usize }
}

/// `arr`'s data pointer and shape, when it is C-contiguous and aligned (`None` otherwise): what
/// a copy of its elements as one slice needs. The shape is the array's own, borrowed with it.
#[inline(always)]
pub fn contiguous_parts<'a>(
    arr: &'a Bound<'_, PyUntypedArray>,
) -> Option<(*mut std::os::raw::c_void, &'a [usize])> {
    use npyffi::flags::{NPY_ARRAY_ALIGNED, NPY_ARRAY_C_CONTIGUOUS};
    // SAFETY: `arr` is a live array object, borrowed for 'a with the GIL held, so no other
    // thread changes it; `dimensions` points at `nd` values owned by the array (none when
    // `nd` is 0), as NumPy's `PyArray_DIMS` reads them, each at least 0 (so the same bits as a
    // `usize`). Exercised by tests/python/test_native_memory.py and every fallback whose
    // kernel returns a NumPy array to a Native tensor (test_native.py).
    let (flags, data, shape) = unsafe {
        let f = &(*arr.as_array_ptr()).fields;
        let nd = usize::try_from(f.nd).ok()?;
        let shape: &[usize] = if nd == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(f.dimensions.cast::<usize>(), nd)
        };
        (f.flags, f.data, shape)
    };
    let needed = NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED;
    (flags & needed == needed).then_some((data.cast(), shape))
}

/// A read-only array's data address, dtype address, shape and strides, as NumPy holds them
/// (`None` for a writable array): what tells whether a kept view is still as it was made.
pub fn read_only_parts<'a>(
    arr: &'a Bound<'_, PyUntypedArray>,
) -> Option<(usize, usize, &'a [isize], &'a [isize])> {
    let raw = arr.as_array_ptr();
    // SAFETY: `raw` points at the live array object `arr` holds (it is borrowed for 'a, with
    // the GIL held, so no other thread changes it); its `dimensions` and `strides` point at
    // `nd` values each, owned by the array, as NumPy's `PyArray_DIMS`/`PyArray_STRIDES` read
    // them. Exercised by tests/python/test_native.py (the lent-view tests).
    unsafe {
        let f = &(*raw).fields;
        if f.flags & npyffi::flags::NPY_ARRAY_WRITEABLE != 0 {
            return None;
        }
        let nd = usize::try_from(f.nd).ok()?;
        let (dims, strides) = if nd == 0 {
            (&[][..], &[][..])
        } else {
            (
                std::slice::from_raw_parts(f.dimensions, nd),
                std::slice::from_raw_parts(f.strides, nd),
            )
        };
        Some((f.data as usize, f.descr as usize, dims, strides))
    }
}

/// A new, writable, C-ordered copy of `arr` (NumPy's `PyArray_NewCopy`; memory it cannot
/// allocate is its own `MemoryError`).
pub fn new_copy<'py>(arr: &Bound<'py, PyUntypedArray>) -> PyResult<Bound<'py, PyAny>> {
    let py = arr.py();
    // SAFETY: `arr` is a live array object (the GIL is held); `PyArray_NewCopy` returns a new
    // reference to a new, writable, C-ordered array, or NULL with a Python error set (its
    // `MemoryError`), which `from_owned_ptr_or_err` takes over. Exercised by
    // tests/python/test_native.py (writable arguments of Python kernels).
    unsafe {
        let copy =
            PY_ARRAY_API.PyArray_NewCopy(py, arr.as_array_ptr(), npyffi::NPY_ORDER::NPY_CORDER);
        Bound::from_owned_ptr_or_err(py, copy)
    }
}

/// A read-only view of `arr`: a new array object sharing its memory, which a kernel cannot
/// write through (NumPy raises "assignment destination is read-only").
pub fn read_only_view<'py>(arr: &Bound<'py, PyUntypedArray>) -> PyResult<Bound<'py, PyAny>> {
    let py = arr.py();
    // SAFETY: `arr` holds a live array object and the GIL is held. `PyArray_View` (NumPy's
    // `arr.view()`) with no dtype and no type returns a new reference to a new array of
    // `arr`'s type, or NULL with a Python error set, which `from_owned_ptr_or_err` takes over.
    let view = unsafe {
        let ptr = PY_ARRAY_API.PyArray_View(
            py,
            arr.as_array_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, ptr)?
    };
    let view = view.cast_into::<PyUntypedArray>()?;
    // SAFETY: `view` is the new array made above, which only this function holds; clearing its
    // WRITEABLE flag is what `view.setflags(write=False)` does (NumPy's `PyArray_CLEARFLAGS`),
    // and a flag may always be cleared. Exercised by tests/python/test_read_only_args.py.
    unsafe {
        (*view.as_array_ptr()).fields.flags &= !npyffi::flags::NPY_ARRAY_WRITEABLE;
    }
    Ok(view.into_any())
}
