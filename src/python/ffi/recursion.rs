//! Python's recursion depth, counted by C extensions around their recursive calls.

use std::ffi::CStr;

use pyo3::ffi;
use pyo3::Python;

/// Counts one level of this thread's recursion; false (with a `RecursionError` set, which
/// `PyErr::fetch` takes) when Python's limit is reached, and then nothing was counted.
#[inline(always)]
pub fn enter_recursive_call(_py: Python<'_>, where_: &'static CStr) -> bool {
    // SAFETY: the GIL is held (`_py`); the call only reads and raises this thread's recursion
    // depth, and sets a RecursionError when it fails (then nonzero); `where_` is a static
    // C string.
    unsafe { ffi::Py_EnterRecursiveCall(where_.as_ptr()) == 0 }
}

/// Undoes one level counted by [`enter_recursive_call`] (the caller pairs them).
#[inline(always)]
pub fn leave_recursive_call(_py: Python<'_>) {
    // SAFETY: the GIL is held (`_py`), and the call only lowers this thread's recursion depth
    // (an unpaired call would only make the limit looser, never touch memory).
    unsafe { ffi::Py_LeaveRecursiveCall() }
}
