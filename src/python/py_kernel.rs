//! What a Python function registered as a kernel carries: [`PyKernel`], the foreign payload
//! of its `KernelFunction` (`kernel.rs` makes the kernel), which the router gives back for the
//! table entries it serves, so that the fast path (`fast.rs`) calls the function directly.
//! It stands below the operator object and the fast path, which both name it.

use std::cell::UnsafeCell;

use pyo3::prelude::*;
use pyo3::pyclass::{PyTraverseError, PyVisit};

use super::array_kernel::ArrayKernel;

/// What a Python kernel carries as its foreign payload ([`crate::KernelFunction::with_foreign`]),
/// which the router gives back for the entries it serves ([`crate::dispatcher::Routed::foreign`]).
pub struct PyKernel {
    /// The function. The library that registered the kernel shows it to the garbage collector
    /// (`library.rs`), and takes it out when the library is collected, so that the reference
    /// it showed goes with the library even where a call elsewhere still holds the kernel.
    ///
    /// A cell, not a lock: every access but the drop takes a `Python` token, and this module
    /// runs with the GIL (its `#[pymodule]` does not declare `gil_used = false`, so even a
    /// free-threaded interpreter keeps the GIL on for it), so no two threads reach the slot at
    /// once. A mutex here would take and release a lock on every call of a Python kernel,
    /// for a guarantee the GIL already gives.
    func: UnsafeCell<Option<Py<PyAny>>>,
    /// Boxed: `fn(op, keys, stack)`; else called with the arguments.
    pub boxed: bool,
    /// The function is an `ArrayKernel` (`array_ops.rs`): the fast path calls its function
    /// directly and finishes the result as it would.
    pub array: bool,
}

// SAFETY: the slot is read and written only with the GIL held (see `func`), which serialises
// the threads that share a kernel; `Py<PyAny>` itself is Send and Sync.
unsafe impl Sync for PyKernel {}

impl PyKernel {
    /// A kernel calling `func`.
    pub fn new(func: Py<PyAny>, boxed: bool) -> PyKernel {
        let array = Python::attach(|py| func.bind(py).is_exact_instance_of::<ArrayKernel>());
        PyKernel {
            func: UnsafeCell::new(Some(func)),
            boxed,
            array,
        }
    }

    /// The function, as a reference of the caller's own, which keeps it alive (and visibly
    /// referenced, to the garbage collector) while it runs; `None` once its library was
    /// collected.
    #[inline]
    pub fn func<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        // SAFETY: the GIL is held (`py`), so no other thread takes the function meanwhile
        // (see `func`); the reference is cloned before the GIL can be released.
        unsafe { &*self.func.get() }
            .as_ref()
            .map(|f| f.bind(py).clone())
    }

    /// Shows the function to the garbage collector (which holds the GIL while it traverses).
    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: as in `func`: the collector runs with the GIL held.
        visit.call(unsafe { &*self.func.get() })
    }

    /// Takes the function out (the caller drops it).
    pub fn take(&self, _py: Python<'_>) -> Option<Py<PyAny>> {
        // SAFETY: as in `func`: the GIL is held, and no reference into the slot outlives the
        // calls above.
        unsafe { &mut *self.func.get() }.take()
    }
}
