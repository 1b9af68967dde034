//! Where the interpreter enters the bindings' hot calls: the vectorcall entry of a class's
//! objects, a fastcall method, a getter; the trampolines around them; and the arguments as
//! the interpreter passes them. The one file that names `pyo3::impl_` (PyO3's trampolines,
//! which turn a panic into an exception and count the GIL for PyO3): PyO3 offers no public
//! way to give a class's objects a vectorcall entry (its issue #4252), nor to wrap a raw
//! entry in its trampoline. PyO3 is pinned to one version in `Cargo.toml` for that reason.
//!
//! The classes above implement safe traits ([`Vectorcall`], [`FastcallMethod`],
//! [`KeptAttribute`]); the `extern "C"` functions here, generic over them and monomorphized,
//! are what the interpreter calls.

use std::marker::PhantomData;

use pyo3::ffi;
use pyo3::impl_::trampoline::{fastcall_cfunction_with_keywords, unaryfunc, MethodDef};
use pyo3::prelude::*;
use pyo3::pyclass::PyClass;
use pyo3::types::{PyDict, PyString, PyTuple};

/// The entry point as an object stores it (null: none, which the interpreter reads as "use
/// `tp_call`").
pub type Entry = Option<ffi::vectorcallfunc>;

/// A new reference the interpreter takes, or null with an exception set: what an entry
/// returns.
pub struct Return(*mut ffi::PyObject);

/// A class whose objects the interpreter calls by vectorcall ([`entry`] in a field of each;
/// see `install_vectorcall`).
pub trait Vectorcall: PyClass + Sync {
    /// A call from the interpreter, with the GIL held and nothing counted for PyO3: answered
    /// by [`lean`], [`VectorArgs::forward`] or [`VectorArgs::general`].
    fn vectorcall<'a, 'py>(slf: &Borrowed<'a, 'py, Self>, args: VectorArgs<'a, 'py>) -> Return;

    /// The call as PyO3's trampoline runs it (`VectorArgs::general`).
    fn call<'py>(
        slf: &Bound<'py, Self>,
        positional: &[Bound<'py, PyAny>],
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>>;
}

/// The entry point of class `T`'s objects.
pub const fn entry<T: Vectorcall>() -> Entry {
    Some(vectorcall_entry::<T>)
}

/// A vectorcall's arguments, borrowed from the interpreter for the length of the call (`'a`).
pub struct VectorArgs<'a, 'py> {
    args: *const *mut ffi::PyObject,
    /// The count of positional arguments, with the `PY_VECTORCALL_ARGUMENTS_OFFSET` flag.
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
    _borrowed: PhantomData<&'a [Bound<'py, PyAny>]>,
}

impl<'a, 'py> VectorArgs<'a, 'py> {
    /// Whether the call passed keywords (or an empty tuple of names).
    #[inline(always)]
    pub fn has_keywords(&self) -> bool {
        !self.kwnames.is_null()
    }

    /// The positional arguments.
    #[inline(always)]
    pub fn positional(&self) -> &'a [Bound<'py, PyAny>] {
        // SAFETY: the interpreter's array holds `nargs` objects, borrowed for the call.
        unsafe { slice(self.args, nargs(self.nargsf)) }
    }

    /// The value the call passed by keyword `name`, if it passed one.
    #[inline]
    pub fn keyword(&self, name: &Bound<'py, PyString>) -> Option<&'a Bound<'py, PyAny>> {
        if self.kwnames.is_null() {
            return None;
        }
        let n = nargs(self.nargsf);
        // SAFETY: a non-null `kwnames` is the vectorcall's tuple of keyword names, borrowed
        // for the call, and `args` holds the positional objects and then one value per name.
        let (names, all) = unsafe {
            let names = Borrowed::from_ptr(name.py(), self.kwnames).cast_unchecked::<PyTuple>();
            let all = slice(self.args, n + names.len());
            (names, all)
        };
        // The interpreter passes names as its code's interned strings: mostly one pointer.
        let at = names
            .iter()
            .position(|k| k.is(name) || k.eq(name).unwrap_or(false))?;
        all.get(n + at)
    }

    /// The call passed on to `to`, with the same arguments (no frame of ours on the way).
    #[inline(always)]
    pub fn forward(&self, to: &Bound<'py, PyAny>) -> Return {
        // SAFETY: `to` is live and held by the caller; the arguments are passed on unchanged,
        // as the vectorcall protocol allows (the `PY_VECTORCALL_ARGUMENTS_OFFSET` flag
        // included: the caller's leave to use `args[-1]` goes on with the same array).
        Return(unsafe {
            ffi::PyObject_Vectorcall(to.as_ptr(), self.args, self.nargsf, self.kwnames)
        })
    }

    /// [`Vectorcall::call`] of `slf`, in PyO3's trampoline (which counts the GIL for PyO3:
    /// every `Python::attach` under it is then cheap).
    #[inline]
    pub fn general<T: Vectorcall>(self, slf: &Borrowed<'a, 'py, T>) -> Return {
        // SAFETY: the GIL is held (`slf`), `slf` is a `T`, and the arguments are the
        // interpreter's, which `general` reads as its contract says.
        Return(unsafe {
            fastcall_cfunction_with_keywords::<General<T>>(
                slf.as_ptr(),
                self.args,
                nargs(self.nargsf) as ffi::Py_ssize_t,
                self.kwnames,
            )
        })
    }
}

/// The `n` objects at `args`.
///
/// # Safety
/// `args` holds `n` objects, borrowed for `'a`; the GIL is held.
#[inline(always)]
unsafe fn slice<'a, 'py>(args: *const *mut ffi::PyObject, n: usize) -> &'a [Bound<'py, PyAny>] {
    if n == 0 {
        return &[];
    }
    // SAFETY: the function's contract; `Bound<PyAny>` has the layout of a `*mut PyObject`
    // (PyO3's `as_slice` of a tuple relies on it).
    unsafe { std::slice::from_raw_parts(args.cast(), n) }
}

/// The count of positional arguments of a vectorcall's `nargsf`.
#[inline(always)]
fn nargs(nargsf: usize) -> usize {
    nargsf & !ffi::PY_VECTORCALL_ARGUMENTS_OFFSET
}

/// The vectorcall entry of class `T`.
unsafe extern "C" fn vectorcall_entry<T: Vectorcall>(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: the interpreter calls this with the GIL held, `callable` an object of `T` (only
    // `T`'s objects carry this entry, and `T` has no subclasses), and `args` the vectorcall
    // array: `nargsf`'s count of objects, then one per name of `kwnames` (or null).
    unsafe {
        let py = Python::assume_attached();
        let slf = Borrowed::from_ptr(py, callable).cast_unchecked::<T>();
        let args = VectorArgs {
            args,
            nargsf,
            kwnames,
            _borrowed: PhantomData,
        };
        T::vectorcall(&slf, args).0
    }
}

/// PyO3's trampoline's view of [`general`] for `T`.
struct General<T>(PhantomData<T>);

impl<T: Vectorcall> MethodDef<fastcall_cfunction_with_keywords::Func> for General<T> {
    const METH: fastcall_cfunction_with_keywords::Func = general::<T>;
}

/// [`Vectorcall::call`] of the vectorcall's arguments (see [`call_arguments`]).
///
/// # Safety
/// The GIL is held, `callable` is a `T`, and `args` holds `nargs` positional arguments and
/// then one value for each name of `kwnames` (or null), borrowed for the call.
unsafe fn general<T: Vectorcall>(
    py: Python<'_>,
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: see the function's contract.
    let (slf, (positional, kwargs)) = unsafe {
        (
            Borrowed::from_ptr(py, callable).cast_unchecked::<T>(),
            call_arguments(py, args, usize::try_from(nargs).unwrap_or(0), kwnames)?,
        )
    };
    T::call(&slf, positional, kwargs.as_ref()).map(Bound::into_ptr)
}

/// The positional arguments of a call, and its keywords (None without any).
type CallArguments<'a, 'py> = (&'a [Bound<'py, PyAny>], Option<Bound<'py, PyDict>>);

/// A vectorcall's arguments as a call sees them: the `nargs` positional objects in `args`,
/// and the keywords (one object after them per name of the `kwnames` tuple, or null) as a new
/// dict, or None without any.
///
/// # Safety
/// The GIL is held, and `args` holds `nargs` objects and then one per keyword name, borrowed
/// for the length of the call (which `'a` must not outlive).
unsafe fn call_arguments<'a, 'py>(
    py: Python<'py>,
    args: *const *mut ffi::PyObject,
    nargs: usize,
    kwnames: *mut ffi::PyObject,
) -> PyResult<CallArguments<'a, 'py>> {
    // SAFETY: see the function's contract.
    let (names, all) = unsafe {
        let names = Borrowed::from_ptr_or_opt(py, kwnames).map(|n| n.cast_unchecked::<PyTuple>());
        let nkw = names.as_ref().map_or(0, |n| n.len());
        (names, slice(args, nargs + nkw))
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

/// A method bound to one object of class `Slf`, called by `METH_FASTCALL | METH_KEYWORDS`
/// (`Method`).
pub trait FastcallMethod {
    /// The class of the objects the method is bound to.
    type Slf: PyClass;

    /// A call of the method bound to `slf`: `positional`, then the values of the keywords
    /// `names` (None: no keywords), in [`lean`]'s way (the caller is inside a call that PyO3
    /// counted, or needs no `Python::attach`).
    fn call<'py>(
        slf: &Borrowed<'_, 'py, Self::Slf>,
        positional: &[Bound<'py, PyAny>],
        names: Option<&Borrowed<'_, 'py, PyTuple>>,
        values: &[Bound<'py, PyAny>],
    ) -> PyResult<Bound<'py, PyAny>>;
}

/// The `METH_FASTCALL | METH_KEYWORDS` entry of `T`: the lean trampoline around its call.
pub(super) unsafe extern "C" fn fastcall_entry<T: FastcallMethod>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls this with the GIL held, `slf` the object the function was bound
    // to (a `T::Slf`: `Method::bind` binds only those), and the fastcall arguments: `nargs`
    // objects, then one per name of the `kwnames` tuple (or null), borrowed for the call.
    unsafe {
        let py = Python::assume_attached();
        let slf = Borrowed::from_ptr(py, slf).cast_unchecked::<T::Slf>();
        let names = Borrowed::from_ptr_or_opt(py, kwnames).map(|n| n.cast_unchecked::<PyTuple>());
        let nargs = usize::try_from(nargs).unwrap_or(0);
        let nkw = names.as_ref().map_or(0, |n| n.len());
        let all: &[Bound<'_, PyAny>] = slice(args, nargs + nkw);
        let (positional, values) = all.split_at(nargs);
        lean(py, |_| {
            T::call(&slf, positional, names.as_ref(), values).map(Some)
        })
        .map_or(std::ptr::null_mut(), |out| out.0)
    }
}

/// An attribute each object keeps (made at the first look-up, by PyO3's trampoline).
pub trait KeptAttribute: PyClass {
    /// The kept value, if made.
    fn kept<'py>(slf: &Borrowed<'_, 'py, Self>) -> Option<Bound<'py, PyAny>>;

    /// Makes and keeps the value.
    fn make<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>>;
}

/// The getter of `T`'s kept attribute: a look-up of a made one is a load and an incref; the
/// first one makes it in PyO3's trampoline (whose wrapper, which counts the GIL twice in a
/// thread-local, was about a third of a look-up).
pub(super) unsafe extern "C" fn getter_entry<T: KeptAttribute>(
    slf: *mut ffi::PyObject,
    _closure: *mut std::ffi::c_void,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a getter with the GIL held and `slf` an instance of the class the
    // descriptor was made for (`getset_get` checks it): a `T` (which has no subclasses).
    unsafe {
        let py = Python::assume_attached();
        let op = Borrowed::from_ptr(py, slf).cast_unchecked::<T>();
        if let Some(f) = T::kept(&op) {
            return f.into_ptr();
        }
        unaryfunc::<Make<T>>(slf)
    }
}

/// PyO3's trampoline's view of [`make`] for `T`.
struct Make<T>(PhantomData<T>);

impl<T: KeptAttribute> MethodDef<unaryfunc::Func> for Make<T> {
    const METH: unaryfunc::Func = make::<T>;
}

/// [`KeptAttribute::make`] of `slf`.
///
/// # Safety
/// `slf` is a `T`, and the GIL is held.
unsafe fn make<T: KeptAttribute>(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: see the function's contract.
    let op = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<T>() };
    T::make(&op).map(Bound::into_ptr)
}

/// Runs `f` as the interpreter's entry, as PyO3's trampoline does but for counting the GIL in
/// PyO3's thread-local: a panic becomes a `PanicException`, an error is raised, and the
/// result is handed over; `Ok(None)` (f passed the call on, and ran nothing) is None, with
/// nothing raised. For calls that need no `Python::attach` (a Python function served by the
/// fast path) or run inside a call PyO3 counted (`op.redispatch`, which a boxed kernel calls
/// inside a call of the operator): counting again (two thread-local accesses, through
/// `__tls_get_addr` in a shared library) was about a twentieth of the hop. The count only
/// decides whether the drop of a `Py` (not of a `Bound`) decrements at once or leaves it to
/// PyO3's pool, which the next PyO3 entry point empties, and whether `Python::attach` is
/// cheap; the thread is attached whatever it says. So that an error's objects (an exception
/// and its traceback) never wait in the pool, a call that fails enters PyO3's own trampoline
/// once before it raises, which empties it.
#[inline(always)]
pub fn lean<'py>(
    py: Python<'py>,
    f: impl FnOnce(Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>>,
) -> Option<Return> {
    let err = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(py))) {
        Ok(Ok(Some(out))) => return Some(Return(out.into_ptr())),
        Ok(Ok(None)) => return None,
        Ok(Err(e)) => e,
        Err(payload) => panic_error(payload),
    };
    Some(Return(fail(py, err)))
}

/// Empties PyO3's pool of deferred decrements (by entering its trampoline), then raises `err`.
#[cold]
#[inline(never)]
fn fail(py: Python<'_>, err: PyErr) -> *mut ffi::PyObject {
    /// Nothing, inside PyO3's trampoline, which empties the pool on entry.
    struct Nothing;
    impl MethodDef<unaryfunc::Func> for Nothing {
        const METH: unaryfunc::Func = nothing;
    }
    /// # Safety
    /// None needed: the argument is not read.
    unsafe fn nothing(_py: Python<'_>, _o: *mut ffi::PyObject) -> PyResult<*mut ffi::PyObject> {
        Ok(std::ptr::null_mut())
    }
    // SAFETY: the thread is attached (`py`); `nothing` reads no argument and sets no error.
    unsafe {
        unaryfunc::<Nothing>(std::ptr::null_mut());
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
