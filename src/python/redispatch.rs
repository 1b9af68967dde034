//! `op.redispatch`: one callable per `OpOverload`, made with it and kept by it (read as a
//! member of the object once one is made: [`install_member`]).
//!
//! As a method, `op.redispatch` made a new bound method object at every look-up: the
//! documented hop `stack[:] = [op.redispatch(keys, *stack)]` calls with `*args`, which
//! Python's method-call shortcut does not serve, so every hop made and freed one (about a
//! ninth of the hop). The attribute is now a builtin method object bound to the `OpOverload`
//! (what the look-up made each time, made once), called by `METH_FASTCALL`: the look-up is an
//! incref, and the call gets the interpreter's argument array. The `OpOverload` keeps it, and
//! it keeps its `OpOverload` (as `__self__`): the garbage collector sees that cycle through
//! the `OpOverload`'s `__traverse__` and breaks it with its `__clear__`.

use std::ffi::CStr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::known_type::KnownType;
use super::ops::{PyKeySet, PyOpOverload};

/// The method's definition, which every `op.redispatch` object points to (CPython reads it,
/// never writes it).
struct Def(ffi::PyMethodDef);

// SAFETY: the definition is never written after it is made, and its pointers are to static
// strings and a function.
unsafe impl Sync for Def {}

const NAME: &CStr = c"redispatch";

/// `__doc__` (with `__text_signature__` before the `--` line, as CPython reads it).
const DOC: &CStr = c"redispatch($self, keys, *args, **kwargs)
--

From inside a kernel: dispatches on `keys` without its highest key.

`op.redispatch` is one object per operator (bound to it, made at the first look-up), so that a
boxed fallback's `stack[:] = [op.redispatch(keys, *stack)]` makes no method object per call.";

static DEF: Def = Def(ffi::PyMethodDef {
    ml_name: NAME.as_ptr(),
    ml_meth: ffi::PyMethodDefPointer {
        PyCFunctionFastWithKeywords: entry,
    },
    ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
    ml_doc: DOC.as_ptr(),
});

/// The getter of `OpOverload.redispatch` (installed by [`install_getter`] in place of the one
/// PyO3 would make): a look-up of an operator whose function is made is a load and an incref.
/// PyO3's getter wrapper (its trampoline, which counts the GIL in a thread-local twice, and
/// the take-and-put-back of the cell) was about a third of the look-up.
struct GetSet(ffi::PyGetSetDef);

// SAFETY: as `Def`: never written after it is made; its pointers are to static strings and a
// function.
unsafe impl Sync for GetSet {}

const GET_DOC: &CStr =
    c"From inside a kernel: `op.redispatch(keys, *args, **kwargs)` dispatches on `keys` without
its highest key. One object per operator, made at the first look-up (`redispatch.rs`), so that a
look-up makes no bound method.";

static GETSET: GetSet = GetSet(ffi::PyGetSetDef {
    name: NAME.as_ptr(),
    get: Some(get),
    set: None,
    doc: GET_DOC.as_ptr(),
    closure: std::ptr::null_mut(),
});

/// Puts the getter of [`GETSET`] in the `OpOverload` class as its `redispatch` attribute (once,
/// when the module is made).
pub fn install_getter(py: Python<'_>) -> PyResult<()> {
    use pyo3::PyTypeInfo;
    let ty = PyOpOverload::type_object_raw(py);
    // SAFETY: `ty` is the live class object, whose `tp_dict` is its attribute dict (a class
    // made by `PyType_FromSpec` has one); `GETSET` is static and only read (the pointer is
    // `*mut` for historical reasons). The GIL is held. The class is changed before any
    // `OpOverload` exists, and `PyType_Modified` drops the interpreter's caches of its
    // attributes all the same.
    unsafe {
        let def = std::ptr::addr_of!(GETSET.0).cast_mut();
        let descr = Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewGetSet(ty, def))?;
        let dict = (*ty).tp_dict;
        if dict.is_null() {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "boxfall: the OpOverload class has no attribute dict",
            ));
        }
        if ffi::PyDict_SetItemString(dict, NAME.as_ptr(), descr.as_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        ffi::PyType_Modified(ty);
    }
    Ok(())
}

/// `OpOverload.redispatch` as a read-only member (`Py_T_OBJECT_EX`) at the offset of the
/// kept function in the object: CPython 3.11's `LOAD_ATTR` specializes a look-up of such a
/// member into a type check, a load and an incref (`LOAD_ATTR_SLOT`), where a getter (a
/// get-set descriptor) always took the generic look-up (`PyObject_GetAttr`, the type's
/// attribute cache, the descriptor's call): about a twentieth of the documented hop. The
/// member reads the object's field, so every `OpOverload` has its function made from the
/// start ([`PyOpOverload::new_bound`]); only an object the collector cleared (garbage) has
/// none, and a look-up on it raises `AttributeError`.
struct Member(ffi::PyMemberDef);

// SAFETY: as `Def`: written once (in the `OnceLock`), then only read; its pointers are to
// static strings.
unsafe impl Sync for Member {}
// SAFETY: as above: plain data and pointers to static strings.
unsafe impl Send for Member {}

static MEMBER: std::sync::OnceLock<Member> = std::sync::OnceLock::new();

/// Replaces the getter of [`GETSET`] with the member of [`Member`], once, given the first
/// `OpOverload` made (whose function is made): its field's offset is read from it and checked
/// (the field holds the function's pointer, within the object). If the check or the change
/// fails, the getter stays (it serves every object, made or not).
pub fn install_member(slf: &Bound<'_, PyOpOverload>) {
    use pyo3::PyTypeInfo;
    use std::sync::atomic::{AtomicBool, Ordering};
    static TRIED: AtomicBool = AtomicBool::new(false);
    if TRIED.load(Ordering::Relaxed) {
        return;
    }
    TRIED.store(true, Ordering::Relaxed);
    let py = slf.py();
    let ty = PyOpOverload::type_object_raw(py);
    // SAFETY: the GIL is held (`slf` is bound), so nothing writes the cell meanwhile.
    let f = unsafe { slf.get().redispatch_ptr() };
    let Some(offset) = PyOpOverload::redispatch_offset(slf) else {
        return;
    };
    // SAFETY: `ty` is the live class object and `slf` an instance of it (checked); the field
    // is read only once it is known to lie within the object's `tp_basicsize` bytes; `MEMBER`
    // lives as long as the process (the descriptor points to it) and is only read; the class
    // is changed with the GIL held, and `PyType_Modified` drops the interpreter's caches of
    // its attributes (and its specialized look-ups, which check the class's version).
    unsafe {
        let size = usize::try_from((*ty).tp_basicsize).unwrap_or(0);
        if f.is_null()
            || !std::ptr::eq(ffi::Py_TYPE(slf.as_ptr()), ty)
            || offset + std::mem::size_of::<*mut ffi::PyObject>() > size
        {
            return;
        }
        let field = slf
            .as_ptr()
            .cast::<u8>()
            .add(offset)
            .cast::<*mut ffi::PyObject>();
        if *field != f {
            return;
        }
        let Ok(offset) = ffi::Py_ssize_t::try_from(offset) else {
            return;
        };
        let member = MEMBER.get_or_init(|| {
            Member(ffi::PyMemberDef {
                name: NAME.as_ptr(),
                type_code: ffi::Py_T_OBJECT_EX,
                offset,
                flags: ffi::Py_READONLY,
                doc: GET_DOC.as_ptr(),
            })
        });
        if member.0.offset != offset {
            return;
        }
        let def = std::ptr::addr_of!(member.0).cast_mut();
        let Ok(descr) = Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMember(ty, def)) else {
            return;
        };
        let dict = (*ty).tp_dict;
        if dict.is_null() || ffi::PyDict_SetItemString(dict, NAME.as_ptr(), descr.as_ptr()) != 0 {
            let _ = PyErr::take(py);
            return;
        }
        ffi::PyType_Modified(ty);
    }
}

/// `op.redispatch`: the kept function, or (the first time) PyO3's trampoline around
/// [`make`], which makes it.
unsafe extern "C" fn get(
    slf: *mut ffi::PyObject,
    _closure: *mut std::ffi::c_void,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a getter with the GIL held and `slf` an instance of the class the
    // descriptor was made for (`getset_get` checks it): an `OpOverload` (which has no
    // subclasses). The kept function is read and given the caller's reference before any
    // Python code runs; nothing here can panic.
    unsafe {
        let py = Python::assume_attached();
        let op = Borrowed::from_ptr(py, slf).cast_unchecked::<PyOpOverload>();
        let f = op.get().redispatch_ptr();
        if !f.is_null() {
            ffi::Py_INCREF(f);
            return f;
        }
        pyo3::impl_::trampoline::get_trampoline_function!(unaryfunc, make)(slf)
    }
}

/// Makes and keeps `op.redispatch` (see [`PyOpOverload::redispatch_fn`]).
///
/// # Safety
/// `slf` is an `OpOverload` (see [`get`]), and the GIL is held.
unsafe fn make(py: Python<'_>, slf: *mut ffi::PyObject) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: see the function's contract.
    let op = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<PyOpOverload>() };
    PyOpOverload::redispatch_fn(&op).map(Bound::into_ptr)
}

/// A new `redispatch` object bound to `slf`.
pub fn new<'py>(slf: &Bound<'py, PyOpOverload>) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    // SAFETY: `DEF` is static and never written (CPython only reads a method definition; the
    // pointer is `*mut` for historical reasons); `slf` is a live object, which the new
    // function holds a reference to; the GIL is held. A null result means an exception is set.
    unsafe {
        let def = std::ptr::addr_of!(DEF.0).cast_mut();
        let f = ffi::PyCFunction_NewEx(def, slf.as_ptr(), std::ptr::null_mut());
        Bound::from_owned_ptr_or_err(py, f)
    }
}

/// The `METH_FASTCALL | METH_KEYWORDS` entry: the lean trampoline of `vectorcall.rs` (which
/// turns a panic into an exception, as PyO3's does, without counting the GIL) around [`call`].
unsafe extern "C" fn entry(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls this with the GIL held, `slf` the object the function was bound
    // to (an `OpOverload`, by `new`), and the fastcall arguments (see `call`).
    unsafe { super::vectorcall::trampoline(|py| call(py, slf, args, nargs, kwnames)) }
}

/// `op.redispatch(keys, *args, **kwargs)` from the fastcall arguments: `nargs` positional
/// objects in `args`, then one per name of the `kwnames` tuple (or null).
///
/// # Safety
/// As the fastcall protocol promises: the GIL is held, `slf` is the `OpOverload` the function
/// was bound to (only `new` binds it, always to one), and `args` holds `nargs` objects and
/// then one per keyword name, borrowed for the length of the call.
unsafe fn call(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: see the function's contract; `Bound<PyAny>` has the layout of a
    // `*mut PyObject` (PyO3's `as_slice` of a tuple relies on it), and the slice, like the
    // objects it borrows, does not outlive the call.
    let (slf, names, all, nargs) = unsafe {
        let slf = Borrowed::from_ptr(py, slf).cast_unchecked::<PyOpOverload>();
        let names = Borrowed::from_ptr_or_opt(py, kwnames).map(|n| n.cast_unchecked::<PyTuple>());
        let nkw = names.as_ref().map_or(0, |n| n.len());
        let nargs = usize::try_from(nargs).unwrap_or(0);
        let n = nargs + nkw;
        let all: &[Bound<'_, PyAny>] = if n == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(args.cast(), n)
        };
        (slf, names, all, nargs)
    };
    let (positional, values) = all.split_at(nargs);
    if names.is_none() {
        // `op.redispatch(keys, *args)`, the documented hop: nothing to sort out.
        if let Some((keys, rest)) = positional.split_first() {
            let keys = key_set(keys)?;
            return PyOpOverload::redispatch_positional(&slf, keys, rest);
        }
    }
    let mut keys = positional.first().cloned();
    let rest = positional.get(1..).unwrap_or(&[]);
    let mut kwargs: Option<Bound<'_, PyDict>> = None;
    if let Some(names) = &names {
        for (k, v) in names.iter().zip(values) {
            if k.cast::<PyString>().is_ok_and(|s| s == "keys") {
                if keys.is_some() {
                    return Err(pyo3::exceptions::PyTypeError::new_err(
                        "OpOverload.redispatch() got multiple values for argument 'keys'",
                    ));
                }
                keys = Some(v.clone());
                continue;
            }
            let d = match &kwargs {
                Some(d) => d,
                None => kwargs.insert(PyDict::new(py)),
            };
            d.set_item(k, v)?;
        }
    }
    let keys = keys.ok_or_else(|| {
        pyo3::exceptions::PyTypeError::new_err(
            "OpOverload.redispatch() missing 1 required positional argument: 'keys'",
        )
    })?;
    let keys = key_set(&keys)?;
    PyOpOverload::redispatch_with(&slf, keys, rest, kwargs.as_ref()).map(Bound::into_ptr)
}

/// The keys of a `DispatchKeySet` argument. The class is told by its type pointer, kept from
/// the first one seen: PyO3's check looks the class object up first, about a fiftieth of the
/// hop.
fn key_set(keys: &Bound<'_, PyAny>) -> PyResult<crate::key::DispatchKeySet> {
    static KEY_SET: KnownType = KnownType::new(<PyKeySet as pyo3::PyTypeInfo>::type_object_raw);
    if KEY_SET.is_type_of(keys) {
        // SAFETY: the object's type is `DispatchKeySet`'s class (it has no subclasses).
        return Ok(unsafe { keys.cast_unchecked::<PyKeySet>() }.get().0);
    }
    // Not a key set: PyO3's cast says so.
    Ok(keys.cast::<PyKeySet>()?.get().0)
}
