//! Python's recursion depth, counted by C extensions around their recursive calls, and the
//! bounds of the native stack the calls run on (libc's pthread attributes).

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

/// This thread's stack as (lowest address, end), from its attributes (for the main thread
/// glibc derives them from the stack rlimit); `None` if they cannot be known.
#[cfg(target_os = "linux")]
#[cold]
pub fn thread_stack_bounds() -> Option<(usize, usize)> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: `pthread_getattr_np` initializes `attr` for the calling thread when it returns
    // 0; only then is it read (by `pthread_attr_getstack`) and destroyed, once. Exercised by
    // tests/python/test_no_panic.py (recursion on a thread of 1 MiB of stack) and this module's test.
    unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        let low = addr as usize;
        (ok && low > 1 && size > 0).then(|| (low, low.saturating_add(size)))
    }
}
