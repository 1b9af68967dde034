//! `bf.PayloadKernel`: a backend's kernel that takes its tensors' payloads and returns payloads.
//! boxfall takes the payloads out and wraps the results in Rust, so the kernel may be a compiled
//! function itself (`jax.jit(jnp.add)`), with no Python frame of the backend's around it. On a
//! device whose host runs each Python frame after a launch with cold caches (a TPU's), that
//! frame (its checks, the payload reads, the wrap of the result) costs more than the dispatch.
//!
//! It serves the calls it can vouch for: every argument a tensor of the backend, given by
//! position, all of one dtype among those it was made with. Any other call (a scalar, a
//! keyword, mixed dtypes, a tensor elsewhere), and a `TypeError` or `ValueError` the function
//! raises (a case it refuses), goes to `otherwise`, a usual kernel of the backend.
//!
//! Its result is checked here, as a usual kernel's is by the dispatcher: a payload (an object
//! that gives a dtype and a shape, as the backend's tensors hold) or a tuple of them. None, a
//! number, a string or a `bf.Tensor` is a `KernelError` at the call, naming the operator and
//! the backend, not a tensor that fails when it is read. A payload of a type that passed once
//! is taken as it is (one pointer comparison), so the check costs the hot path nothing.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::errors::{to_pyerr, IntoPy};
use super::ffi::vectorcall_or_raised;
use super::tensor::{as_tensor, object_tensor, payload_object, wrap};
use crate::dispatcher::OperatorHandle;
use crate::key::DispatchKey;
use crate::tensor::{Device, Tensor};

/// The most arguments a payload call takes (the payloads are held in an array, not a `Vec`).
const MOST: usize = 4;

/// A kernel of a Python backend that gets its tensors' payloads and returns the result's
/// payload (or a tuple of them): `bf.PayloadKernel(fn, dtypes=..., otherwise=kernel)`,
/// registered with `Library.impl` for the backend's key.
#[pyclass(name = "PayloadKernel", module = "boxfall", frozen)]
pub struct PayloadKernel {
    pub(super) func: Py<PyAny>,
    /// The dtypes served, as NumPy dtype objects: a payload's `dtype` is compared by identity
    /// first (NumPy's built-in dtypes are one object each), then by equality.
    pub(super) dtypes: Vec<Py<PyAny>>,
    pub(super) otherwise: Py<PyAny>,
    /// The type of the first result payload that passed the check: a payload of it is taken
    /// as it is.
    checked: PyOnceLock<Py<PyType>>,
}

#[pymethods]
impl PayloadKernel {
    #[new]
    #[pyo3(signature = (r#fn, *, dtypes, otherwise))]
    fn new(
        py: Python<'_>,
        r#fn: &Bound<'_, PyAny>,
        dtypes: &Bound<'_, PyAny>,
        otherwise: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        for (what, f) in [("fn", r#fn), ("otherwise", otherwise)] {
            if !f.is_callable() {
                return Err(PyTypeError::new_err(format!(
                    "bf.PayloadKernel's {what} must be callable, not {}",
                    f.get_type().name()?
                )));
            }
        }
        let np_dtype = py.import("numpy")?.getattr("dtype")?;
        let dtypes = dtypes
            .try_iter()?
            .map(|d| Ok(np_dtype.call1((d?,))?.unbind()))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PayloadKernel {
            func: r#fn.clone().unbind(),
            dtypes,
            otherwise: otherwise.clone().unbind(),
            checked: PyOnceLock::new(),
        })
    }

    /// The function that gets payloads.
    #[getter]
    fn r#fn(&self, py: Python<'_>) -> Py<PyAny> {
        self.func.clone_ref(py)
    }

    /// The kernel that serves every other call.
    #[getter]
    fn otherwise(&self, py: Python<'_>) -> Py<PyAny> {
        self.otherwise.clone_ref(py)
    }

    /// The dtypes served.
    #[getter]
    fn dtypes(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        self.dtypes.iter().map(|d| d.clone_ref(py)).collect()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let name = |f: &Py<PyAny>| {
            f.bind(py)
                .getattr(intern!(py, "__name__"))
                .map_or_else(|_| "?".to_string(), |n| n.to_string())
        };
        format!(
            "bf.PayloadKernel({}, dtypes={}, otherwise={})",
            name(&self.func),
            self.dtypes.len(),
            name(&self.otherwise)
        )
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.func)?;
        visit.call(&self.otherwise)?;
        for d in &self.dtypes {
            visit.call(d)?;
        }
        Ok(())
    }
}

impl PayloadKernel {
    /// Runs the call on the payloads of `args`, tensors of `key`, and wraps the result; None,
    /// with nothing run, where `otherwise` is to serve it. `op`, the operator registered, names
    /// it in the error of a result that is no payload.
    pub(super) fn call<'py>(
        &self,
        py: Python<'py>,
        key: DispatchKey,
        op: Option<&OperatorHandle>,
        args: &[Bound<'py, PyAny>],
    ) -> Option<PyResult<Bound<'py, PyAny>>> {
        if args.is_empty() || args.len() > MOST {
            return None;
        }
        let mut tensors: [Option<Tensor>; MOST] = Default::default();
        for (slot, obj) in tensors.iter_mut().zip(args) {
            let t = &as_tensor(obj)?.get().inner;
            if t.key() != key {
                return None;
            }
            *slot = Some(t.clone());
        }
        let tensors = &tensors[..args.len()];
        // A host-only tensor gets its payload, as before any kernel of the backend; done for
        // every argument before any is read, so that a failure leaves none half-made.
        for t in tensors.iter().flatten() {
            if let Err(e) = crate::resident::refresh(t).py(py) {
                let _ = settle(py, key, tensors);
                return Some(Err(e));
            }
        }
        let out = self.run(py, tensors);
        let settled = settle(py, key, tensors);
        // The function's own error is the one to report.
        let out = match out? {
            Ok(out) => settled.map(|()| out),
            Err(e) => Err(e),
        };
        let device = tensors[0].as_ref()?.device();
        Some(out.and_then(|out| self.wrap_result(py, device, op, out)))
    }

    /// A result payload, or a tuple of them, as tensors on `device`; anything else is a
    /// `KernelError` naming the operator and the backend.
    fn wrap_result<'py>(
        &self,
        py: Python<'py>,
        device: Device,
        op: Option<&OperatorHandle>,
        out: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(tuple) = out.cast::<PyTuple>() {
            let items = tuple
                .iter()
                .map(|p| wrap(py, self.payload_tensor(py, device, op, &p)?))
                .collect::<PyResult<Vec<_>>>()?;
            return Ok(PyTuple::new(py, items)?.into_any());
        }
        wrap(py, self.payload_tensor(py, device, op, &out)?)
    }

    /// The tensor of one result payload, checked.
    fn payload_tensor(
        &self,
        py: Python<'_>,
        device: Device,
        op: Option<&OperatorHandle>,
        p: &Bound<'_, PyAny>,
    ) -> PyResult<Tensor> {
        let t = object_tensor(device, p);
        let of_type = p.get_type();
        if self
            .checked
            .get(py)
            .is_some_and(|c| c.bind(py).is(&of_type))
        {
            return Ok(t);
        }
        let wrong = if p.is_none() {
            "None".to_string()
        } else if as_tensor(p).is_some() {
            "a bf.Tensor (its function returns payloads: the tensor's .payload)".to_string()
        } else if t.meta().is_some() {
            let _ = self.checked.set(py, of_type.unbind());
            return Ok(t);
        } else {
            format!(
                "an object of type {} (no dtype and shape read from it)",
                of_type
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            )
        };
        let op = op.map_or_else(
            || "an operator".to_string(),
            |op| format!("'{}'", op.name()),
        );
        Err(to_pyerr(
            py,
            crate::Error::Kernel {
                context: format!(
                    "the '{}' kernel of {op} (a bf.PayloadKernel)",
                    device.key.name()
                ),
                message: format!(
                    "its function returned {wrong}, not a payload of the backend (an object with a dtype and a shape) or a tuple of them"
                ),
            },
        ))
    }

    /// The function on the tensors' payloads, if each has one of the same served dtype.
    fn run<'py>(
        &self,
        py: Python<'py>,
        tensors: &[Option<Tensor>],
    ) -> Option<PyResult<Bound<'py, PyAny>>> {
        let mut payloads: [Option<Bound<'py, PyAny>>; MOST] = Default::default();
        let mut first: Option<Bound<'py, PyAny>> = None;
        for (slot, t) in payloads.iter_mut().zip(tensors) {
            let p = payload_object(py, t.as_ref()?)?;
            let d = p.getattr(intern!(py, "dtype")).ok()?;
            match &first {
                Some(f) if !(f.is(&d) || f.eq(&d).unwrap_or(false)) => return None,
                Some(_) => {}
                None => {
                    if !self.serves(&d) {
                        return None;
                    }
                    first = Some(d);
                }
            }
            *slot = Some(p);
        }
        let func = self.func.bind(py);
        let out = match &payloads[..tensors.len()] {
            [Some(a)] => vectorcall_or_raised(func, std::slice::from_ref(a)),
            [Some(a), Some(b)] => vectorcall_or_raised(func, &[a.clone(), b.clone()]),
            all => {
                let all: Vec<_> = all.iter().flatten().cloned().collect();
                vectorcall_or_raised(func, &all)
            }
        };
        match out {
            Some(out) => Some(Ok(out)),
            None => {
                let e = PyErr::fetch(py);
                // A case the function refuses (a broadcast, a dtype its library will not take):
                // `otherwise` says what is wrong, or serves it.
                if e.is_instance_of::<PyTypeError>(py) || e.is_instance_of::<PyValueError>(py) {
                    None
                } else {
                    Some(Err(e))
                }
            }
        }
    }

    fn serves(&self, dtype: &Bound<'_, PyAny>) -> bool {
        let py = dtype.py();
        self.dtypes.iter().any(|d| d.bind(py).is(dtype))
            || self
                .dtypes
                .iter()
                .any(|d| d.bind(py).eq(dtype).unwrap_or(false))
    }
}

/// Residency: a tensor whose host memory NumPy holds drops the payload made for the call (the
/// function wrote nothing).
fn settle(py: Python<'_>, key: DispatchKey, tensors: &[Option<Tensor>]) -> PyResult<()> {
    let Some(hooks) = crate::backend::backend(key) else {
        return Ok(());
    };
    tensors
        .iter()
        .flatten()
        .try_for_each(|t| crate::resident::settle(hooks, t, false).py(py))
}
