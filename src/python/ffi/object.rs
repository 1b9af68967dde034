//! Single objects: reference counts, garbage-collector tracking, the default attribute
//! look-up, list slots, and calls with a borrowed argument array.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

/// `obj`'s own attribute `name`, as Python's default look-up finds it: for a class whose
/// `__getattribute__` answers other names itself.
#[inline]
pub fn generic_getattr<'py>(
    obj: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: both pointers are live objects the caller holds, with the GIL held (`obj`'s
    // token); the call returns a new reference, or null with an exception set, which
    // `from_owned_ptr_or_err` takes over. Exercised by test_library.py (`space.__class__`,
    // `packet.name`).
    unsafe {
        Bound::from_owned_ptr_or_err(
            obj.py(),
            ffi::PyObject_GenericGetAttr(obj.as_ptr(), name.as_ptr()),
        )
    }
}

/// The reference count of `obj` (the caller's reference included).
#[inline(always)]
pub fn refcnt(obj: &Bound<'_, PyAny>) -> isize {
    // SAFETY: reading the count of a live object the caller holds, with the GIL held.
    unsafe { ffi::Py_REFCNT(obj.as_ptr()) }
}

/// Stops the garbage collector from visiting `obj` (nothing for an object of a class the
/// collector does not track). Only for an object that can be in no reference cycle: one in a
/// cycle would never be collected (a leak, never unsound).
#[inline]
pub fn gc_untrack(obj: &Bound<'_, PyAny>) {
    // SAFETY: `obj` is live and the GIL is held; `PyObject_GC_UnTrack` is called only on an
    // object of a collected class (`PyObject_IS_GC`), and untracking one that is not tracked
    // does nothing. Its `tp_dealloc` untracks it again, which does nothing either.
    unsafe {
        if ffi::PyObject_IS_GC(obj.as_ptr()) != 0 {
            ffi::PyObject_GC_UnTrack(obj.as_ptr().cast());
        }
    }
}

/// `list[i] = o` for an `i` in range (nothing otherwise), by the list's slot: PyO3's
/// `set_item` checked the index twice and went through `PyList_SetItem`, twice a hop.
#[inline(always)]
pub fn list_set(list: &Bound<'_, PyList>, i: usize, o: &Bound<'_, PyAny>) {
    let Ok(at) = ffi::Py_ssize_t::try_from(i) else {
        return;
    };
    if i >= list.len() {
        // As `PyList_SetItem` would, nothing is written.
        return;
    }
    // SAFETY: `list` is a live list and `at` is within its length (checked above), so slot
    // `at` holds an object (a list's slots below its length are never null); the slot takes
    // a new reference to `o`, and the old item's reference, ours now, is released after the
    // slot was written, as `PyList_SetItem` does (its release may run Python code, which then
    // sees a whole list).
    unsafe {
        let old = ffi::PyList_GET_ITEM(list.as_ptr(), at);
        ffi::PyList_SET_ITEM(list.as_ptr(), at, o.clone().into_ptr());
        ffi::Py_XDECREF(old);
    }
}

/// `list[i]`, a reference of the caller's (None out of range), by the list's slot.
#[inline(always)]
pub fn list_get<'py>(list: &Bound<'py, PyList>, i: usize) -> Option<Bound<'py, PyAny>> {
    let at = ffi::Py_ssize_t::try_from(i).ok()?;
    if i >= list.len() {
        return None;
    }
    // SAFETY: `list` is a live list and `at` within its length, so its slot holds an object,
    // which gets a reference of ours before anything else runs.
    Some(
        unsafe { Borrowed::from_ptr(list.py(), ffi::PyList_GET_ITEM(list.as_ptr(), at)) }
            .to_owned(),
    )
}

/// `func(*args)` with the caller's own argument array: no tuple is made.
#[inline]
pub fn vectorcall<'py>(
    func: &Bound<'py, PyAny>,
    args: &[Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    vectorcall_or_raised(func, args).ok_or_else(|| PyErr::fetch(func.py()))
}

/// `func(*args)` as [`vectorcall`], its error left set in the interpreter (None): the lean
/// path fetches an error only where there is one, so that a call's answer is one register
/// rather than a `PyResult` (the size of a `PyErr`) moved through memory at every step.
#[inline(always)]
pub fn vectorcall_or_raised<'py>(
    func: &Bound<'py, PyAny>,
    args: &[Bound<'py, PyAny>],
) -> Option<Bound<'py, PyAny>> {
    // SAFETY: `Bound<PyAny>` has the layout of a `*mut PyObject` (PyO3's own `as_slice` of a
    // tuple relies on it), so the slice is the array of `args.len()` object pointers that
    // vectorcall takes, borrowed for the call; the result is a new reference or null with an
    // exception set (None, which the caller fetches).
    unsafe {
        let r = ffi::PyObject_Vectorcall(
            func.as_ptr(),
            args.as_ptr().cast(),
            args.len(),
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_opt(func.py(), r)
    }
}

/// `func(a, b, c)` by vectorcall with the three borrowed, and a slot before them that a bound
/// method may use for its `self` (`PY_VECTORCALL_ARGUMENTS_OFFSET`): PyO3's `call1` held and
/// released each one. None with the error left set in the interpreter, as
/// [`vectorcall_or_raised`].
#[inline(always)]
pub fn call_borrowed3_or_raised<'py>(
    func: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    c: &Bound<'py, PyAny>,
) -> Option<Bound<'py, PyAny>> {
    let argv = [std::ptr::null_mut(), a.as_ptr(), b.as_ptr(), c.as_ptr()];
    // SAFETY: `argv[1..]` holds three live objects the caller holds references to for the
    // length of the call, and the offset flag lets the callee write `argv[0]` (ours) during
    // it; the result is a new reference or null with an exception set.
    unsafe {
        let r = ffi::PyObject_Vectorcall(
            func.as_ptr(),
            argv.as_ptr().add(1),
            3 | ffi::PY_VECTORCALL_ARGUMENTS_OFFSET,
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_opt(func.py(), r)
    }
}
