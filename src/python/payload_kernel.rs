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

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::{intern, PyTraverseError, PyVisit};

use super::errors::IntoPy;
use super::ffi::vectorcall_or_raised;
use super::tensor::{as_tensor, object_tensor, payload_object, wrap};
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
    /// with nothing run, where `otherwise` is to serve it.
    pub(super) fn call<'py>(
        &self,
        py: Python<'py>,
        key: DispatchKey,
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
        Some(out.and_then(|out| wrap_result(py, device, out)))
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

/// A result payload, or a tuple of them, as tensors on `device`.
fn wrap_result<'py>(
    py: Python<'py>,
    device: Device,
    out: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(tuple) = out.cast::<PyTuple>() {
        let items = tuple
            .iter()
            .map(|p| wrap(py, object_tensor(device, &p)))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(PyTuple::new(py, items)?.into_any());
    }
    wrap(py, object_tensor(device, &out))
}
