//! Recursion through the dispatcher ends in Python's `RecursionError`, never in a stack
//! overflow. A kernel that calls its own operator recurses through Rust frames that Python
//! does not see: one Python frame per level counts against Python's limit while a level uses
//! 12-22 KB of native stack (a debug build), so the 8 MB stack overflowed (a segfault) at 370
//! to 690 levels, below the default limit of 1000. Each call into the dispatcher therefore
//! counts one level of Python recursion, as C extensions mark their recursive calls
//! (`Py_EnterRecursiveCall`), and refuses to start when the thread's native stack is nearly
//! used up, whatever the limit is set to. The lean `op.redispatch` only checks the stack
//! ([`check_stack`]): the Python function it runs counts the level.

use pyo3::exceptions::PyRecursionError;
use pyo3::prelude::*;

#[cfg(target_os = "linux")]
use super::ffi::thread_stack_bounds;
use super::ffi::{enter_recursive_call, leave_recursive_call};

/// One level of recursion, held for the length of one call into the dispatcher (with the GIL
/// held, which `Python` says).
pub struct Level<'py>(Python<'py>);

/// Native stack a call must find free to start: many levels of the deepest call path.
#[cfg(target_os = "linux")]
const STACK_MARGIN: usize = 256 * 1024;

/// Enters one level; a `RecursionError` when Python's limit is reached or the native stack is
/// nearly used up. Inlined, with its errors made out of line: a call of it was a tenth of its
/// cost.
#[inline(always)]
pub fn enter(py: Python<'_>) -> PyResult<Level<'_>> {
    #[cfg(target_os = "linux")]
    if stack_left() < STACK_MARGIN {
        return Err(stack_error());
    }
    if !enter_recursive_call(py, c" in a boxfall operator call") {
        return Err(fetch(py));
    }
    Ok(Level(py))
}

/// Checks the native stack only, for a call whose level Python counts anyway: the lean
/// `op.redispatch`, which runs a Python function (its frame counts one level of Python's
/// recursion, as every frame does since Python 3.11, and more than one when the interpreter
/// counted the method's call too). Counting it again was about a twentieth of the boxfall
/// part of a documented hop, and halved the depth a recursion through it reached.
#[inline(always)]
pub fn check_stack() -> PyResult<()> {
    #[cfg(target_os = "linux")]
    if stack_left() < STACK_MARGIN {
        return Err(stack_error());
    }
    Ok(())
}

/// The error of a call that finds the native stack nearly used up.
#[cold]
#[inline(never)]
fn stack_error() -> PyErr {
    PyRecursionError::new_err(
        "maximum recursion depth exceeded in a boxfall operator call (the native stack is \
         nearly used up: does a kernel call its own operator?)",
    )
}

/// The error Python set.
#[cold]
#[inline(never)]
fn fetch(py: Python<'_>) -> PyErr {
    PyErr::fetch(py)
}

impl Drop for Level<'_> {
    /// Pairs with the successful `enter_recursive_call` of `enter`. A `Level` is dropped by
    /// the pymethod that made it, on the same thread and with the GIL held (a kernel that
    /// released the GIL meanwhile has taken it back), and the depth it undoes is this
    /// thread's own.
    #[inline]
    fn drop(&mut self) {
        leave_recursive_call(self.0);
    }
}

/// Bytes of native stack left below the caller's frame (`usize::MAX` if the bounds are
/// unknown).
///
/// The bounds of the stack last asked about are kept in two globals, which a call whose stack
/// pointer lies between them reads instead of the thread-local: a thread-local of this shared
/// library is reached through `__tls_get_addr`, about a fifth of the guard's cost on each of a
/// hop's two calls. Threads' stacks do not overlap, so a stack pointer inside the kept range
/// is on the stack the range was read from, whichever thread asks (a thread that reuses an
/// exited thread's stack gets that stack's bounds, which are its own). The globals are
/// written and read with the GIL held (this module keeps it on), which orders the two stores
/// before any other thread's loads.
#[cfg(target_os = "linux")]
#[inline(always)]
fn stack_left() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    /// The kept stack's lowest address and its end (0, 0: none kept).
    static LOW: AtomicUsize = AtomicUsize::new(0);
    static HIGH: AtomicUsize = AtomicUsize::new(0);
    let here = 0u8;
    let sp = std::ptr::addr_of!(here) as usize;
    let low = LOW.load(Ordering::Relaxed);
    if low <= sp && sp < HIGH.load(Ordering::Relaxed) {
        return sp - low;
    }
    match thread_stack() {
        Some((low, high)) => {
            LOW.store(low, Ordering::Relaxed);
            HIGH.store(high, Ordering::Relaxed);
            sp.saturating_sub(low)
        }
        None => usize::MAX,
    }
}

/// This thread's stack as (lowest address, end), asked of the thread's attributes once per
/// thread (None if they cannot be known).
#[cfg(target_os = "linux")]
#[cold]
#[inline(never)]
fn thread_stack() -> Option<(usize, usize)> {
    use std::cell::Cell;
    thread_local! {
        // (lowest address, end); (0, 0) until asked, (1, 1) if it cannot be known.
        static BOUNDS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    }
    let bounds = BOUNDS.with(|c| {
        if c.get().0 == 0 {
            c.set(thread_stack_bounds().unwrap_or((1, 1)));
        }
        c.get()
    });
    (bounds.0 != 1).then_some(bounds)
}
