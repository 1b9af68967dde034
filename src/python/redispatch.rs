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

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::ffi::{FastcallMethod, Getter, KeptAttribute, KnownType, Member, Method};
use super::ops::{PyKeySet, PyOpOverload};

const NAME: &CStr = c"redispatch";

/// `__doc__` (with `__text_signature__` before the `--` line, as CPython reads it).
const DOC: &CStr = c"redispatch($self, keys, *args, **kwargs)
--

From inside a kernel: dispatches on `keys` without its highest key.

`op.redispatch` is one object per operator (bound to it, made at the first look-up), so that a
boxed fallback's `stack[:] = [op.redispatch(keys, *stack)]` makes no method object per call.";

/// The method every `op.redispatch` object is (CPython points to it; called by `METH_FASTCALL`
/// in the lean trampoline, which turns a panic into an exception as PyO3's does, without
/// counting the GIL).
static DEF: Method<Redispatch> = Method::fastcall(NAME, DOC);

/// The method's calls (`FastcallMethod`).
struct Redispatch;

const GET_DOC: &CStr =
    c"From inside a kernel: `op.redispatch(keys, *args, **kwargs)` dispatches on `keys` without
its highest key. One object per operator, made at the first look-up (`redispatch.rs`), so that a
look-up makes no bound method.";

/// The getter of `OpOverload.redispatch` (installed by [`install_getter`] in place of the one
/// PyO3 would make): a look-up of an operator whose function is made is a load and an incref.
/// PyO3's getter wrapper (its trampoline, which counts the GIL in a thread-local twice, and
/// the take-and-put-back of the cell) was about a third of the look-up.
static GETTER: Getter = Getter::new::<PyOpOverload>(NAME, GET_DOC);

/// Puts [`GETTER`] in the `OpOverload` class as its `redispatch` attribute (once, when the
/// module is made, before any `OpOverload` exists).
pub fn install_getter(py: Python<'_>) -> PyResult<()> {
    GETTER.install::<PyOpOverload>(py)
}

/// `OpOverload.redispatch` as a read-only member at the offset of the kept function in the
/// object: CPython 3.11's `LOAD_ATTR` specializes a look-up of such a member into a type
/// check, a load and an incref (`LOAD_ATTR_SLOT`), where a getter always took the generic
/// look-up (`PyObject_GetAttr`, the type's attribute cache, the descriptor's call): about a
/// twentieth of the documented hop. The member reads the object's field, so every
/// `OpOverload` has its function made from the start ([`PyOpOverload::new_bound`]); only an
/// object the collector cleared (garbage) has none, and a look-up on it raises
/// `AttributeError`.
static MEMBER: Member = Member::new(NAME, GET_DOC);

/// Replaces [`GETTER`] with [`MEMBER`], once, given the first `OpOverload` made (whose
/// function is made). If the member cannot be made, the getter stays (it serves every object,
/// made or not).
pub fn install_member(slf: &Bound<'_, PyOpOverload>) {
    let f = PyOpOverload::kept_redispatch(slf);
    MEMBER.install(slf, PyOpOverload::redispatch_offset(slf), f.as_ref());
}

impl KeptAttribute for PyOpOverload {
    #[inline(always)]
    fn kept<'py>(slf: &Borrowed<'_, 'py, Self>) -> Option<Bound<'py, PyAny>> {
        PyOpOverload::kept_redispatch(slf)
    }

    fn make<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        PyOpOverload::redispatch_fn(slf)
    }
}

/// A new `redispatch` object bound to `slf`.
pub fn new<'py>(slf: &Bound<'py, PyOpOverload>) -> PyResult<Bound<'py, PyAny>> {
    DEF.bind(slf)
}

/// `op.redispatch(keys, *args, **kwargs)`: `positional`, then one value per name of `names`.
impl FastcallMethod for Redispatch {
    type Slf = PyOpOverload;

    #[inline(always)]
    fn call<'py>(
        slf: &Borrowed<'_, 'py, PyOpOverload>,
        positional: &[Bound<'py, PyAny>],
        names: Option<&Borrowed<'_, 'py, PyTuple>>,
        values: &[Bound<'py, PyAny>],
    ) -> PyResult<Bound<'py, PyAny>> {
        call(slf, positional, names, values)
    }
}

#[inline(always)]
fn call<'py>(
    slf: &Bound<'py, PyOpOverload>,
    positional: &[Bound<'py, PyAny>],
    names: Option<&Borrowed<'_, 'py, PyTuple>>,
    values: &[Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    if names.is_none() {
        // `op.redispatch(keys, *args)`, the documented hop: nothing to sort out.
        if let Some((keys, rest)) = positional.split_first() {
            let keys = key_set(keys)?;
            return PyOpOverload::redispatch_positional(slf, keys, rest);
        }
    }
    let mut keys = positional.first().cloned();
    let rest = positional.get(1..).unwrap_or(&[]);
    let mut kwargs: Option<Bound<'_, PyDict>> = None;
    if let Some(names) = names {
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
    PyOpOverload::redispatch_with(slf, keys, rest, kwargs.as_ref())
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
