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
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::ffi::{self, generic_getattr, Entry, Return, VectorArgs, Vectorcall};
use super::gil_cell::GilCell;
use super::ops::PyOpOverload;
use crate::dispatcher::Dispatcher;

/// All overloads of one operator name; a call picks the first, in definition order, whose
/// schema binds the arguments. `packet.Tensor` is one overload, `packet.default` the overload
/// named `""`.
#[pyclass(name = "OpOverloadPacket", module = "boxfall", frozen)]
pub struct PyOpOverloadPacket {
    /// Where a call from Python enters, read by the interpreter at the offset the class names
    /// (see `ffi/entry.rs`).
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
            vectorcall: ffi::entry::<PyOpOverloadPacket>(),
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
    /// entry's answer, read with no call (None: look up, or choose by binding). A reference of
    /// the caller's own: the overload's kernel may define an operator and call this packet
    /// again, which then lets go of the overloads it kept.
    #[inline(always)]
    fn single<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        // SAFETY: the GIL is held (`py`), and no Python code runs while the reference lives.
        let kept = unsafe { self.found.peek() };
        match kept.1.as_slice() {
            [one] if kept.0 == Dispatcher::definitions_version() => {
                Some(one.bind(py).clone().into_any())
            }
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
            _ => super::ops::first_binding(py, &found, args, kwargs),
        }
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
            return generic_getattr(slf.as_any(), attr);
        };
        if overload.starts_with("__") || overload == "name" || overload == "overloads" {
            return generic_getattr(slf.as_any(), attr);
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
        ffi::install_vectorcall(&INSTALLED, slf, &slf.get().vectorcall);
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

/// An operator with one overload, kept and current, is that overload's call, with the
/// caller's own arguments (no frame of ours on the way); any other call is `call_with`'s, in
/// PyO3's trampoline.
impl Vectorcall for PyOpOverloadPacket {
    #[inline(always)]
    fn vectorcall<'a, 'py>(slf: &Borrowed<'a, 'py, Self>, args: VectorArgs<'a, 'py>) -> Return {
        match slf.get().single(slf.py()) {
            Some(one) => args.forward(&one),
            None => args.general(slf),
        }
    }

    fn call<'py>(
        slf: &Bound<'py, Self>,
        positional: &[Bound<'py, PyAny>],
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let positional = PyTuple::new(slf.py(), positional)?;
        Self::call_with(slf, &positional, kwargs)
    }
}
