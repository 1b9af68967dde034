//! Recursion through the dispatcher ends in Python's `RecursionError`, never in a stack
//! overflow. A kernel that calls its own operator recurses through Rust frames that Python
//! does not see: one Python frame per level counts against Python's limit while a level uses
//! 12-22 KB of native stack (a debug build), so the 8 MB stack overflowed (a segfault) at 370
//! to 690 levels, below the default limit of 1000. Each call into the dispatcher therefore
//! counts one level of Python recursion, as C extensions mark their recursive calls
//! (`Py_EnterRecursiveCall`), and refuses to start when the thread's native stack is nearly
//! used up, whatever the limit is set to.

use pyo3::exceptions::PyRecursionError;
use pyo3::ffi;
use pyo3::prelude::*;

/// One level of recursion, held for the length of one call into the dispatcher.
pub struct Level(());

/// Native stack a call must find free to start: many levels of the deepest call path.
#[cfg(target_os = "linux")]
const STACK_MARGIN: usize = 256 * 1024;

/// Enters one level; a `RecursionError` when Python's limit is reached or the native stack is
/// nearly used up.
#[inline]
pub fn enter(py: Python<'_>) -> PyResult<Level> {
    #[cfg(target_os = "linux")]
    if stack_left() < STACK_MARGIN {
        return Err(PyRecursionError::new_err(
            "maximum recursion depth exceeded in a boxfall operator call (the native stack is \
             nearly used up: does a kernel call its own operator?)",
        ));
    }
    // SAFETY: the GIL is held (`py`); the call only reads and raises this thread's recursion
    // depth, and sets a RecursionError when it fails (then nonzero).
    if unsafe { ffi::Py_EnterRecursiveCall(c" in a boxfall operator call".as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(Level(()))
}

impl Drop for Level {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: pairs with the successful `Py_EnterRecursiveCall` of `enter`. A `Level` is
        // dropped by the pymethod that made it, on the same thread and with the GIL held (a
        // kernel that released the GIL meanwhile has taken it back), and the depth it undoes is
        // this thread's own.
        unsafe { ffi::Py_LeaveRecursiveCall() }
    }
}

/// Bytes of native stack left below the caller's frame (`usize::MAX` if the bounds are
/// unknown).
#[cfg(target_os = "linux")]
#[inline]
fn stack_left() -> usize {
    use std::cell::Cell;
    thread_local! {
        // The lowest address of this thread's stack; 0 until asked, 1 if it cannot be known.
        static LOW: Cell<usize> = const { Cell::new(0) };
    }
    let here = 0u8;
    let sp = std::ptr::addr_of!(here) as usize;
    let low = LOW.with(|c| {
        if c.get() == 0 {
            c.set(stack_low().unwrap_or(1));
        }
        c.get()
    });
    if low == 1 {
        return usize::MAX;
    }
    sp.saturating_sub(low)
}

/// The lowest address of this thread's stack, from its attributes (for the main thread glibc
/// derives them from the stack rlimit).
#[cfg(target_os = "linux")]
#[cold]
fn stack_low() -> Option<usize> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: `pthread_getattr_np` initializes `attr` for the calling thread when it returns
    // 0; only then is it read (by `pthread_attr_getstack`) and destroyed, once.
    unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        (ok && !addr.is_null()).then_some(addr as usize)
    }
}
