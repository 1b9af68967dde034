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

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::PyTypeInfo;

use super::fast::Lean;
use super::ops::PyOpOverload;

/// The entry point as the object stores it (null: none, which the interpreter reads as "use
/// `tp_call`").
pub type Entry = Option<ffi::vectorcallfunc>;

/// The entry point every `OpOverload` carries.
pub const ENTRY: Entry = Some(op_vectorcall);

/// Whether the class was switched over.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Switches the `OpOverload` class to vectorcall, from one of its objects (once; the GIL
/// serialises the callers).
pub fn install(slf: &Bound<'_, PyOpOverload>) {
    let ty = PyOpOverload::type_object_raw(slf.py());
    install_at(&INSTALLED, ty, slf.as_any(), || {
        PyOpOverload::entry_offset(slf)
    });
}

/// Switches class `ty` to vectorcall, from `obj`, one of its objects, whose entry point field
/// lies at `offset()` bytes from its start: once, as `installed` records (the GIL serialises
/// the callers). The class must have no subclasses (not declared `subclass`), so that every
/// object of it has this layout, and each of its objects must hold a valid `vectorcallfunc`
/// there, set when it is made and never changed.
pub(super) fn install_at(
    installed: &AtomicBool,
    ty: *mut ffi::PyTypeObject,
    obj: &Bound<'_, PyAny>,
    offset: impl FnOnce() -> Option<usize>,
) {
    if installed.load(Ordering::Relaxed) {
        return;
    }
    installed.store(true, Ordering::Relaxed);
    let Some(offset) = offset() else {
        return;
    };
    // SAFETY: `ty` is the live class object of `obj` (checked below; not a subclass, see
    // above), and the GIL is held, so no other thread reads its slots while they change. Its
    // objects hold a valid `vectorcallfunc` at `offset` (the caller's promise), which is checked
    // to fall inside the object; and the flag is set after the offset, so a reader that sees
    // the flag sees the offset.
    unsafe {
        let size = usize::try_from((*ty).tp_basicsize).unwrap_or(0);
        if offset + std::mem::size_of::<Entry>() > size
            || !std::ptr::eq(ffi::Py_TYPE(obj.as_ptr()), ty)
        {
            return;
        }
        (*ty).tp_vectorcall_offset = offset as ffi::Py_ssize_t;
        (*ty).tp_flags |= ffi::Py_TPFLAGS_HAVE_VECTORCALL;
    }
}

/// Whether calls from Python now come by vectorcall (for tests).
#[pyfunction]
pub fn vectorcall_installed(py: Python<'_>) -> bool {
    let ty = PyOpOverload::type_object_raw(py);
    // SAFETY: reading the flags of a live class object with the GIL held.
    unsafe { (*ty).tp_flags & ffi::Py_TPFLAGS_HAVE_VECTORCALL != 0 }
}

/// The vectorcall entry. A call that a Python function serves by the fast path (the one path
/// that never asks for `Python::attach`) runs in the lean [`trampoline`]; whatever else, in
/// PyO3's own trampoline (which counts the GIL for PyO3) around [`call`]: under the lean one,
/// a call from plain Python code would run with PyO3's count at zero, and every
/// `Python::attach` under it (the core's calls of Python kernels, a Python backend's
/// conversions) would go through `PyGILState_Ensure`, a twentieth more on a call by the
/// general path. An operator tries the lean way until a call finds no Python function to run
/// (which the fast path tells before it runs anything); from then on it goes PyO3's way.
unsafe extern "C" fn op_vectorcall(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: the interpreter calls this with the GIL held, `callable` an `OpOverload`, and
    // `args` the vectorcall array (see `call`).
    unsafe {
        let nargs = ffi::PyVectorcall_NARGS(nargsf);
        if kwnames.is_null() {
            let slf = Borrowed::from_ptr(Python::assume_attached(), callable)
                .cast_unchecked::<PyOpOverload>();
            let lean = &slf.get().lean;
            if lean.load(Ordering::Relaxed) {
                let mut served = true;
                let out = trampoline(|py| {
                    let slf = Borrowed::from_ptr(py, callable).cast_unchecked::<PyOpOverload>();
                    let all = positional_args(args, nargs);
                    let mut err = None;
                    match PyOpOverload::call_python(&slf, all, &mut err) {
                        Lean::Done(r) => Ok(r.into_ptr()),
                        Lean::Raised => Err(super::fast::raised(&mut err)),
                        Lean::Passed => {
                            served = false;
                            Ok(std::ptr::null_mut())
                        }
                    }
                });
                if served {
                    return out;
                }
                lean.store(false, Ordering::Relaxed);
            }
        }
        pyo3::impl_::trampoline::get_trampoline_function!(fastcall_cfunction_with_keywords, call)(
            callable, args, nargs, kwnames,
        )
    }
}

/// The `nargs` objects of a vectorcall array.
///
/// # Safety
/// `args` holds `nargs` objects, borrowed for the length of the call (which `'a` must not
/// outlive); the GIL is held.
unsafe fn positional_args<'a, 'py>(
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
) -> &'a [Bound<'py, PyAny>] {
    let n = usize::try_from(nargs).unwrap_or(0);
    if n == 0 {
        return &[];
    }
    // SAFETY: the function's contract; `Bound<PyAny>` has the layout of a `*mut PyObject`
    // (PyO3's `as_slice` of a tuple relies on it).
    unsafe { std::slice::from_raw_parts(args.cast(), n) }
}

/// What PyO3's trampoline does around a call from the interpreter, but for counting the GIL in
/// PyO3's thread-local: a panic becomes a `PanicException`, an error is raised, and the result
/// is handed over. For `op.redispatch`, which a boxed kernel calls inside a call of the
/// operator, so inside PyO3's count of that call: counting again (two thread-local accesses,
/// through `__tls_get_addr` in a shared library) was about a twentieth of the hop. The count
/// only decides whether the drop of a `Py` (not of a `Bound`) decrements at once or leaves it
/// to PyO3's pool, which the next PyO3 entry point empties, and whether `Python::attach` is
/// cheap; the thread is attached whatever it says. So that an error's objects (an exception
/// and its traceback) never wait in the pool, a call that fails enters PyO3's own trampoline
/// once before it raises, which empties it.
///
/// # Safety
/// The thread is attached (the GIL is held), as for any call from the interpreter.
#[inline(always)]
pub(super) unsafe fn trampoline(
    f: impl FnOnce(Python<'_>) -> PyResult<*mut ffi::PyObject>,
) -> *mut ffi::PyObject {
    // SAFETY: the caller's contract: the thread is attached.
    let py = unsafe { Python::assume_attached() };
    let err = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(py))) {
        Ok(Ok(out)) => return out,
        Ok(Err(e)) => e,
        Err(payload) => panic_error(payload),
    };
    fail(py, err)
}

/// Empties PyO3's pool of deferred decrements (by entering its trampoline), then raises `err`.
#[cold]
#[inline(never)]
fn fail(py: Python<'_>, err: PyErr) -> *mut ffi::PyObject {
    /// Nothing, inside PyO3's trampoline, which empties the pool on entry.
    ///
    /// # Safety
    /// None needed: the argument is not read.
    unsafe fn nothing(_py: Python<'_>, _o: *mut ffi::PyObject) -> PyResult<*mut ffi::PyObject> {
        Ok(std::ptr::null_mut())
    }
    // SAFETY: the thread is attached (`py`); `nothing` reads no argument and sets no error.
    unsafe {
        pyo3::impl_::trampoline::get_trampoline_function!(unaryfunc, nothing)(std::ptr::null_mut());
    }
    err.restore(py);
    std::ptr::null_mut()
}

/// A panic's payload as the `PanicException` PyO3 raises for it.
#[cold]
#[inline(never)]
fn panic_error(payload: Box<dyn std::any::Any + Send + 'static>) -> PyErr {
    let message = if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else {
        "panic from Rust code".to_string()
    };
    pyo3::panic::PanicException::new_err(message)
}

/// `op(*args, **kwargs)` from the vectorcall arguments (see [`call_arguments`]).
///
/// # Safety
/// As the vectorcall protocol promises: the GIL is held, `callable` is an object of the class
/// (the only one whose objects carry this entry), and `args` holds `nargs` objects and then
/// one per keyword name, borrowed for the length of the call.
unsafe fn call(
    py: Python<'_>,
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: see the function's contract.
    let (slf, (positional, kwargs)) = unsafe {
        (
            Borrowed::from_ptr(py, callable).cast_unchecked::<PyOpOverload>(),
            call_arguments(py, args, nargs, kwnames)?,
        )
    };
    PyOpOverload::call_with(&slf, positional, None, kwargs.as_ref()).map(Bound::into_ptr)
}

/// The positional arguments of a call, and its keywords (None without any).
pub(super) type CallArguments<'a, 'py> = (&'a [Bound<'py, PyAny>], Option<Bound<'py, PyDict>>);

/// A vectorcall's arguments as a call sees them: the `nargs` positional objects in `args`,
/// and the keywords (one object after them per name of the `kwnames` tuple, or null) as a new
/// dict, or None without any.
///
/// # Safety
/// The GIL is held, and `args` holds `nargs` objects and then one per keyword name, borrowed
/// for the length of the call (which `'a` must not outlive).
pub(super) unsafe fn call_arguments<'a, 'py>(
    py: Python<'py>,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<CallArguments<'a, 'py>> {
    // SAFETY: see the function's contract; `Bound<PyAny>` has the layout of a
    // `*mut PyObject` (PyO3's `as_slice` of a tuple relies on it), and the slice, like the
    // objects it borrows, does not outlive the call.
    let (names, all) = unsafe {
        let names = Borrowed::from_ptr_or_opt(py, kwnames).map(|n| n.cast_unchecked::<PyTuple>());
        let nkw = names.as_ref().map_or(0, |n| n.len());
        let n = usize::try_from(nargs).unwrap_or(0) + nkw;
        let all: &'a [Bound<'py, PyAny>] = if n == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(args.cast(), n)
        };
        (names, all)
    };
    let positional = &all[..all.len() - names.as_ref().map_or(0, |n| n.len())];
    let kwargs = match &names {
        Some(names) if !names.is_empty() => {
            let d = PyDict::new(py);
            for (k, v) in names.iter().zip(&all[positional.len()..]) {
                d.set_item(k, v)?;
            }
            Some(d)
        }
        _ => None,
    };
    Ok((positional, kwargs))
}
