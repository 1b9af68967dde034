//! `bf.ops.<ns>`: the operators of one namespace, as `OpOverloadPacket`s (`packet.rs`), kept
//! while the definitions stay as they are.
//!
//! `bf.ops.<ns>.<op>(...)` is how torch users call an operator, on every call. A Python class
//! can keep its packets only behind `__getattr__`, which Python calls after its own look-up has
//! failed and raised an `AttributeError` (about half a microsecond a call, the error's making
//! most of it); torch keeps them as plain attributes, which would go on answering for an
//! operator whose library has closed. Here `__getattribute__` answers first, from a dict kept
//! with the definitions' version (`Dispatcher::definitions_version`): a version compare and a
//! dict look-up, and a fresh look-up once anything was defined or undefined.

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use super::ffi::generic_getattr;
use super::packet::PyOpOverloadPacket;
use crate::dispatcher::Dispatcher;

/// The operators of one namespace: `bf.ops.demo.add` is the packet of `demo::add`.
#[pyclass(name = "OpNamespace", module = "boxfall", frozen)]
pub struct PyOpNamespace {
    ns: String,
    /// The packets looked up while the definitions' version was `version`, by name.
    packets: Py<PyDict>,
    version: AtomicU64,
}

#[pymethods]
impl PyOpNamespace {
    #[new]
    fn new(py: Python<'_>, ns: String) -> Self {
        PyOpNamespace {
            ns,
            packets: PyDict::new(py).unbind(),
            version: AtomicU64::new(Dispatcher::definitions_version()),
        }
    }

    fn __getattribute__<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyString>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let packets = this.packets.bind(py);
        let version = Dispatcher::definitions_version();
        if this.version.load(Ordering::Relaxed) == version {
            if let Some(packet) = packets.get_item(name)? {
                return Ok(packet);
            }
        } else {
            packets.clear();
            this.version.store(version, Ordering::Relaxed);
        }
        // A name that is no UTF-8 (a lone surrogate) names no operator: `hasattr` must see an
        // `AttributeError`, not a `UnicodeEncodeError`.
        let Ok(op) = name.to_str() else {
            return generic_getattr(slf.as_any(), name);
        };
        // The dunders are the object's own (`__class__`, `__dir__`, ...); every other name is
        // an operator's, as in torch (whose operator names never start with two underscores).
        if op.starts_with("__") {
            return generic_getattr(slf.as_any(), name);
        }
        let qualified = format!("{}::{op}", this.ns);
        if Dispatcher::overloads(&qualified).is_empty() {
            return Err(PyAttributeError::new_err(format!(
                "operator '{qualified}' is not defined"
            )));
        }
        let packet = Bound::new(py, PyOpOverloadPacket::of(qualified))?.into_any();
        if packets.is_empty() {
            super::kept::note(packets.as_any(), version, let_go);
        }
        packets.set_item(name, &packet)?;
        Ok(packet)
    }

    /// The operators defined in the namespace (`add` for `demo::add.Tensor`), sorted.
    fn __dir__(&self) -> Vec<String> {
        Dispatcher::operators_in(&self.ns)
    }

    fn __repr__(&self) -> String {
        format!("OpNamespace({})", self.ns)
    }
}

/// A namespace's `kept::LetGo`: its packets go (the namespace looks up afresh at its next use).
fn let_go(packets: &Bound<'_, PyAny>) {
    if let Ok(packets) = packets.cast::<PyDict>() {
        packets.clear();
    }
}
