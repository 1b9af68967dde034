//! `bf.ops.<ns>.<op>`: all overloads of one operator name, callable as torch's
//! `OpOverloadPacket` is.
//!
//! torch users call the packet, not an overload, on every call. The packet keeps its overload
//! objects (each plans its fast path once, at its first call) with the definitions' version
//! they were looked up at (`Dispatcher::definitions_version`), and looks again only once an
//! operator was defined or undefined. A call of an operator with one overload goes by
//! vectorcall straight on to that overload's own vectorcall entry, with the caller's array of
//! arguments: no tuple, no dict, no Python frame (a packet written in Python cost about
//! 330 ns over the overload a call).

use std::sync::atomic::AtomicBool;

use pyo3::exceptions::PyAttributeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use pyo3::PyTypeInfo;

use super::gil_cell::GilCell;
use super::namespace::own_attribute;
use super::ops::PyOpOverload;
use super::vectorcall::{call_arguments, install_at, Entry};
use crate::dispatcher::Dispatcher;

/// All overloads of one operator name; a call picks the first, in definition order, whose
/// schema binds the arguments. `packet.Tensor` is one overload, `packet.default` the overload
/// named `""`.
#[pyclass(name = "OpOverloadPacket", module = "boxfall", frozen)]
pub struct PyOpOverloadPacket {
    /// Where a call from Python enters, read by the interpreter at the offset the class names
    /// (see `vectorcall.rs`).
    vectorcall: Entry,
    name: String,
    /// The overloads, in definition order, as defined at the version kept beside them (at
    /// first version 0, when nothing is defined yet: none).
    found: GilCell<(u64, Vec<Py<PyOpOverload>>)>,
}

/// Whether the class was switched over to vectorcall.
static INSTALLED: AtomicBool = AtomicBool::new(false);

impl PyOpOverloadPacket {
    /// The packet of `ns::op` (which need not be defined: a call says so).
    pub fn of(name: String) -> PyOpOverloadPacket {
        PyOpOverloadPacket {
            vectorcall: Some(packet_vectorcall),
            name,
            found: GilCell::default(),
        }
    }

    /// Looks the overloads up again where an operator was defined or undefined since they
    /// were (`found` then holds the overloads as defined now).
    fn overloads_now(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let version = Dispatcher::definitions_version();
        // SAFETY: the GIL is held (`py`) and no Python code runs while the reference lives.
        if unsafe { this.found.peek() }.0 == version {
            return Ok(());
        }
        let keep: Vec<_> = super::ops::overloads(py, &this.name)?
            .into_iter()
            .map(Bound::unbind)
            .collect();
        if !keep.is_empty() {
            super::kept::note(slf.as_any(), version, let_go);
        }
        drop(this.found.replace(py, (version, keep)));
        Ok(())
    }

    /// The overloads as defined now, in definition order, or `AttributeError` if the operator
    /// is not defined.
    fn defined<'py>(slf: &Bound<'py, Self>) -> PyResult<Vec<Bound<'py, PyOpOverload>>> {
        let py = slf.py();
        Self::overloads_now(slf)?;
        let this = slf.get();
        // SAFETY: as in `overloads_now`.
        let found: Vec<_> = unsafe { this.found.peek() }
            .1
            .iter()
            .map(|o| o.bind(py).clone())
            .collect();
        if found.is_empty() {
            return Err(PyAttributeError::new_err(format!(
                "operator '{}' is not defined",
                this.name
            )));
        }
        Ok(found)
    }

    /// The one overload, kept and current, of an operator that has one: the vectorcall
    /// entry's answer, read with no call (None: look up, or choose by binding).
    #[inline(always)]
    fn single(&self) -> Option<*mut ffi::PyObject> {
        // SAFETY: called with the GIL held (the interpreter's call), and no Python code runs
        // while the reference lives.
        let kept = unsafe { self.found.peek() };
        match kept.1.as_slice() {
            [one] if kept.0 == Dispatcher::definitions_version() => Some(one.as_ptr()),
            _ => None,
        }
    }

    /// `packet(*args, **kwargs)`: the one overload's call, or the first overload whose schema
    /// binds the arguments.
    fn call_with<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let found = Self::defined(slf)?;
        match found.as_slice() {
            [one] => one.call(args, kwargs),
            _ => {
                let refs = found.iter().map(Bound::borrow).collect();
                super::ops::call_first_binding(py, refs, args, kwargs)
            }
        }
    }

    /// Where in the object the interpreter finds the vectorcall entry (bytes from its start).
    fn entry_offset(slf: &Bound<'_, Self>) -> Option<usize> {
        let field = std::ptr::addr_of!(slf.get().vectorcall) as usize;
        field.checked_sub(slf.as_ptr() as usize)
    }
}

#[pymethods]
impl PyOpOverloadPacket {
    #[new]
    fn new(qualified_name: String) -> Self {
        Self::of(qualified_name)
    }

    /// `ns::op`.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The overload names, in definition order (`"default"` for `""`).
    fn overloads(slf: &Bound<'_, Self>) -> PyResult<Vec<String>> {
        Self::defined(slf)?
            .iter()
            .map(|o| {
                let name = o.getattr("overload_name")?.extract::<String>()?;
                Ok(if name.is_empty() {
                    "default".to_string()
                } else {
                    name
                })
            })
            .collect()
    }

    /// `packet.<overload>`: the overload of that name (`default` for `""`), as kept. The
    /// packet's own attributes are `name`, `overloads` and the dunders; answered here first, an
    /// overload costs no failed look-up (and its `AttributeError`) on the way.
    fn __getattribute__<'py>(
        slf: &Bound<'py, Self>,
        attr: &Bound<'py, PyString>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        // A name that is no UTF-8 (a lone surrogate) is no overload's: the default look-up
        // says so with an `AttributeError`.
        let Ok(overload) = attr.to_str() else {
            return own_attribute(slf.as_any(), attr);
        };
        if overload.starts_with("__") || overload == "name" || overload == "overloads" {
            return own_attribute(slf.as_any(), attr);
        }
        Self::overloads_now(slf)?;
        // SAFETY: the GIL is held (`py`), and no Python code runs while the reference lives.
        let kept = unsafe { this.found.peek() };
        let found = kept.1.iter().find(|o| {
            let name = o.get().handle.name();
            match overload {
                "default" => name == this.name,
                _ => {
                    name.strip_prefix(this.name.as_str())
                        .and_then(|rest| rest.strip_prefix('.'))
                        == Some(overload)
                }
            }
        });
        match found {
            Some(o) => Ok(o.bind(py).clone().into_any()),
            None => Err(PyAttributeError::new_err(format!(
                "'{}' has no overload '{overload}'",
                this.name
            ))),
        }
    }

    /// The overload names (`"default"` for `""`) and the packet's own attributes.
    fn __dir__(slf: &Bound<'_, Self>) -> PyResult<Vec<String>> {
        let mut names = Self::overloads(slf).unwrap_or_default();
        names.extend(["name".to_string(), "overloads".to_string()]);
        Ok(names)
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        install_at(
            &INSTALLED,
            Self::type_object_raw(slf.py()),
            slf.as_any(),
            || Self::entry_offset(slf),
        );
        Self::call_with(slf, args, kwargs)
    }

    fn __repr__(&self) -> String {
        format!("OpOverloadPacket({})", self.name)
    }
}

/// A packet's `kept::LetGo`: its overloads go (it looks them up afresh at its next call), each
/// with the cycle of its `op.redispatch` broken where nothing else holds it.
fn let_go(packet: &Bound<'_, PyAny>) {
    let Ok(packet) = packet.cast::<PyOpOverloadPacket>() else {
        return;
    };
    let (_, overloads) = packet.get().found.take(packet.py());
    for o in overloads {
        PyOpOverload::drop_redispatch_cycle(o.bind(packet.py()));
    }
}

/// The packet's vectorcall entry: an operator with one overload, kept and current, is that
/// overload's call, with the caller's own arguments (no frame of ours on the way); any other
/// call is `call_with`'s, in PyO3's trampoline.
unsafe extern "C" fn packet_vectorcall(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: the interpreter calls this entry with the GIL held and `callable` a live packet
    // (only packets carry it). The overload is a live object the packet holds; the call passes
    // the caller's arguments on unchanged, as the vectorcall protocol allows (the
    // `PY_VECTORCALL_ARGUMENTS_OFFSET` flag included: the caller's leave to use `args[-1]`
    // goes on with the same array). Exercised by every packet call in the tests
    // (test_library.py's kept objects, test_dispatch.py's packets).
    unsafe {
        let py = Python::assume_attached();
        let slf = Borrowed::from_ptr(py, callable).cast_unchecked::<PyOpOverloadPacket>();
        if let Some(one) = slf.get().single() {
            // A reference of the call's own: the overload's kernel may define an operator
            // and call this packet again, which then lets go of the overloads it kept.
            let one = Bound::from_borrowed_ptr(py, one);
            return ffi::PyObject_Vectorcall(one.as_ptr(), args, nargsf, kwnames);
        }
        let nargs = ffi::PyVectorcall_NARGS(nargsf);
        pyo3::impl_::trampoline::get_trampoline_function!(fastcall_cfunction_with_keywords, call)(
            callable, args, nargs, kwnames,
        )
    }
}

/// `call_with` of a vectorcall's arguments (`call_arguments`).
///
/// # Safety
/// As in `packet_vectorcall`: the GIL is held, `callable` is a live packet, and `args` holds
/// `nargs` positional arguments and then one value for each name of `kwnames` (or null).
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
            Borrowed::from_ptr(py, callable).cast_unchecked::<PyOpOverloadPacket>(),
            call_arguments(py, args, nargs, kwnames)?,
        )
    };
    let positional = PyTuple::new(py, positional)?;
    PyOpOverloadPacket::call_with(&slf, &positional, kwargs.as_ref()).map(Bound::into_ptr)
}
