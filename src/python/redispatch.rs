//! `op.redispatch`: one callable per `OpOverload`, made with it and kept by it (read as a
//! member of the object once one is made; `ops.rs` holds the method, getter and member, and
//! this file the calls, for any class that can redispatch: [`Redispatchable`]).
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
use std::marker::PhantomData;

use pyo3::prelude::*;
use pyo3::pyclass::PyClass;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::ffi::{FastcallMethod, KnownType};
use super::keyset::PyKeySet;
use crate::key::DispatchKeySet;

/// The attribute's name.
pub const NAME: &CStr = c"redispatch";

/// `__doc__` (with `__text_signature__` before the `--` line, as CPython reads it).
pub const DOC: &CStr = c"redispatch($self, keys, *args, **kwargs)
--

From inside a kernel: dispatches on `keys` without its highest key.

`op.redispatch` is one object per operator (bound to it, made at the first look-up), so that a
boxed fallback's `stack[:] = [op.redispatch(keys, *stack)]` makes no method object per call.";

/// The attribute's `__doc__`.
pub const GET_DOC: &CStr =
    c"From inside a kernel: `op.redispatch(keys, *args, **kwargs)` dispatches on `keys` without
its highest key. One object per operator, made at the first look-up (`redispatch.rs`), so that a
look-up makes no bound method.";

/// What `op.redispatch` calls: the operator's two ways to redispatch (`OpOverload`'s).
pub trait Redispatchable: PyClass {
    /// `op.redispatch(keys, *args)`, the documented hop.
    fn redispatch_positional<'py>(
        slf: &Bound<'py, Self>,
        keys: DispatchKeySet,
        args: &[Bound<'py, PyAny>],
    ) -> PyResult<Bound<'py, PyAny>>;

    /// `op.redispatch(keys, *args, **kwargs)`, `keys` taken out of the arguments.
    fn redispatch_with<'py>(
        slf: &Bound<'py, Self>,
        keys: DispatchKeySet,
        args: &[Bound<'py, PyAny>],
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>>;
}

/// The calls of an `op.redispatch` bound to a `T` (`FastcallMethod`).
pub struct Redispatch<T>(PhantomData<T>);

/// `op.redispatch(keys, *args, **kwargs)`: `positional`, then one value per name of `names`.
impl<T: Redispatchable> FastcallMethod for Redispatch<T> {
    type Slf = T;

    #[inline(always)]
    fn call<'py>(
        slf: &Borrowed<'_, 'py, T>,
        positional: &[Bound<'py, PyAny>],
        names: Option<&Borrowed<'_, 'py, PyTuple>>,
        values: &[Bound<'py, PyAny>],
    ) -> PyResult<Bound<'py, PyAny>> {
        call(slf, positional, names, values)
    }
}

#[inline(always)]
fn call<'py, T: Redispatchable>(
    slf: &Bound<'py, T>,
    positional: &[Bound<'py, PyAny>],
    names: Option<&Borrowed<'_, 'py, PyTuple>>,
    values: &[Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    if names.is_none() {
        // `op.redispatch(keys, *args)`, the documented hop: nothing to sort out.
        if let Some((keys, rest)) = positional.split_first() {
            let keys = key_set(keys)?;
            return T::redispatch_positional(slf, keys, rest);
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
    T::redispatch_with(slf, keys, rest, kwargs.as_ref())
}

/// The keys of a `DispatchKeySet` argument. The class is told by its type pointer, kept from
/// the first one seen: PyO3's check looks the class object up first, about a fiftieth of the
/// hop.
#[inline(always)]
fn key_set(keys: &Bound<'_, PyAny>) -> PyResult<DispatchKeySet> {
    static KEY_SET: KnownType = KnownType::new(<PyKeySet as pyo3::PyTypeInfo>::type_object_raw);
    if KEY_SET.is_type_of(keys) {
        // SAFETY: the object's type is `DispatchKeySet`'s class (it has no subclasses).
        return Ok(unsafe { keys.cast_unchecked::<PyKeySet>() }.get().0);
    }
    key_set_cast(keys)
}

/// [`key_set`] of an object of another type: PyO3's cast says what it is not (out of line,
/// so that the inlined check stays a compare).
#[inline(never)]
fn key_set_cast(keys: &Bound<'_, PyAny>) -> PyResult<DispatchKeySet> {
    Ok(keys.cast::<PyKeySet>()?.get().0)
}
