//! `op(x)` by Python's vectorcall protocol. PyO3 gives a class's `__call__` only the `tp_call`
//! slot (PyO3 issue #4252), so every call from Python packed its arguments into a new tuple,
//! which the fast path then unpacked: the tuple's allocation, its release and the generic
//! call machinery around it were about a seventh of a trivial Python kernel's call through
//! boxfall. With vectorcall the interpreter passes its own array of argument pointers.
//!
//! A vectorcall class keeps the entry point in each object, at an offset the class names
//! (`tp_vectorcall_offset`, with the `Py_TPFLAGS_HAVE_VECTORCALL` flag). Every `OpOverload`
//! carries [`ENTRY`] in a field; where that field sits in the object depends on PyO3's layout,
//! so it is read off the first `OpOverload` that is called (through `tp_call`), and the class
//! is switched over then. `tp_call` stays, and gives the same results (both end in
//! `PyOpOverload::call_with`): C code that calls with a tuple still reaches it.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::fast::Lean;
use super::ffi::{self, Return, VectorArgs, Vectorcall};
use super::ops::PyOpOverload;

/// The entry point every `OpOverload` carries.
pub const ENTRY: ffi::Entry = ffi::entry::<PyOpOverload>();

/// Whether the class was switched over.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Switches the `OpOverload` class to vectorcall, from one of its objects (once; the GIL
/// serialises the callers).
pub fn install(slf: &Bound<'_, PyOpOverload>) {
    ffi::install_vectorcall(&INSTALLED, slf, || PyOpOverload::entry_offset(slf));
}

/// Whether calls from Python now come by vectorcall (for tests).
#[pyfunction]
pub fn vectorcall_installed(py: Python<'_>) -> bool {
    ffi::has_vectorcall::<PyOpOverload>(py)
}

/// A call that a Python function serves by the fast path (the one path that never asks for
/// `Python::attach`) runs in the lean trampoline (`ffi::lean`); whatever else, in PyO3's own
/// trampoline (which counts the GIL for PyO3) around `call`: under the lean one, a call from
/// plain Python code would run with PyO3's count at zero, and every `Python::attach` under it
/// (the core's calls of Python kernels, a Python backend's conversions) would go through
/// `PyGILState_Ensure`, a twentieth more on a call by the general path. An operator tries the
/// lean way until a call finds no Python function to run (which the fast path tells before it
/// runs anything); from then on it goes PyO3's way.
impl Vectorcall for PyOpOverload {
    #[inline(always)]
    fn vectorcall<'a, 'py>(slf: &Borrowed<'a, 'py, Self>, args: VectorArgs<'a, 'py>) -> Return {
        if !args.has_keywords() {
            let lean = &slf.get().lean;
            if lean.load(Ordering::Relaxed) {
                let all = args.positional();
                let served = ffi::lean(slf.py(), |_| {
                    let mut err = None;
                    match PyOpOverload::call_python(slf, all, &mut err) {
                        Lean::Done(r) => Ok(Some(r)),
                        Lean::Raised => Err(super::fast::raised(&mut err)),
                        Lean::Passed => Ok(None),
                    }
                });
                if let Some(out) = served {
                    return out;
                }
                lean.store(false, Ordering::Relaxed);
            }
        }
        args.general(slf)
    }

    fn call<'py>(
        slf: &Bound<'py, Self>,
        positional: &[Bound<'py, PyAny>],
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        PyOpOverload::call_with(slf, positional, None, kwargs)
    }
}
