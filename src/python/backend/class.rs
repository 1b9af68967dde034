//! `bf.Backend`: a registered backend, which makes tensors on its devices; `bf.get_backend`,
//! `bf.backends`.

use pyo3::prelude::*;

use super::checks::check_payload;
use super::held::Held;
use super::registry::{is_python_backend, python_backends, Registration, Serial};
use crate::error::Error;
use crate::key::{registered_keys, DispatchKey};
use crate::python::errors::{new_err, to_pyerr, warn_as, IntoPy};
use crate::python::tensor::{object_tensor, wrap};
use crate::tensor::{Device, Tensor};
use crate::OperatorHandle;

/// A registered backend: makes tensors on its devices.
#[pyclass(name = "Backend", module = "boxfall", frozen)]
pub struct PyBackend {
    pub(super) key: DispatchKey,
    pub(super) name: String,
}

#[pymethods]
impl PyBackend {
    /// The backend's (and its dispatch key's) name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// A tensor on device `index` holding `array`'s values (through `from_cpu`). On a backend
    /// registered with `narrow=True`, a 64-bit dtype the device lacks becomes the 32-bit one
    /// of its kind, warned once and counted for `op` (the operator that asked, e.g.
    /// `asarray`), warned every time without one.
    #[pyo3(signature = (array, index=0, *, op=None))]
    fn tensor<'py>(
        &self,
        py: Python<'py>,
        array: &Bound<'py, PyAny>,
        index: u16,
        op: Option<PyRef<'_, crate::python::overload::PyOpOverload>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let device = Device::new(self.key, index);
        let mut arr = py.import("numpy")?.getattr("asarray")?.call1((array,))?;
        let t = match self.registration(py) {
            Some(Registration {
                from_cpu,
                held,
                narrow,
                lock,
            }) => {
                let hooks_name = &self.name;
                let dtype = arr.getattr("dtype")?.str()?.to_string();
                let op = op.as_ref().map(|op| &op.handle);
                if let Some(to) = self.fit(py, &held, narrow, &dtype, op, "was given values")? {
                    let by = || {
                        let who =
                            op.map_or_else(|| "a call".into(), |op| format!("'{}'", op.name()));
                        format!("{who} on backend '{}' was given", self.name)
                    };
                    super::hooks::ints_fit_narrowed(py, &arr, to, by)?;
                    arr = arr.call_method1("astype", (to,))?;
                }
                let payload = {
                    let _serial = Serial::enter(py, lock.as_ref())?;
                    from_cpu.call(py, &arr, index)?
                };
                check_payload(hooks_name, "from_cpu", &arr, &payload).py(py)?;
                let nbytes = arr.getattr("nbytes")?.extract::<u64>()?;
                crate::metrics::record_user_transfer(
                    self.key,
                    crate::metrics::Direction::ToDevice,
                    nbytes,
                );
                object_tensor(device, &payload)
            }
            None => Tensor::host(device, crate::python::tensor::numpy_to_host(&arr).py(py)?),
        };
        wrap(py, t)
    }

    /// The dtype (its name) that a request for `dtype` gets on this backend's devices: `dtype`
    /// itself where the device holds it; on a backend registered with `narrow=True`, the
    /// 32-bit dtype of a 64-bit one's kind the device lacks (int64 to int32), with a
    /// `bf.NarrowingWarning` the first time for `op` (the operator that asked) and a count in
    /// its `op_stats(op)["narrowed"]`; else a `bf.DTypeError` naming the dtype, the operator
    /// and the backend. A backend's own kernel given a `dtype` argument asks this, so that its
    /// result's dtype is the one the CPU fallback's would have.
    #[pyo3(signature = (dtype, *, op=None))]
    fn dtype_for(
        &self,
        py: Python<'_>,
        dtype: &Bound<'_, PyAny>,
        op: Option<PyRef<'_, crate::python::overload::PyOpOverload>>,
    ) -> PyResult<String> {
        let name = py
            .import("numpy")?
            .getattr("dtype")?
            .call1((dtype,))?
            .getattr("name")?
            .extract::<String>()?;
        let Some(r) = self.registration(py) else {
            return Ok(name);
        };
        let op = op.as_ref().map(|op| &op.handle);
        Ok(self
            .fit(py, &r.held, r.narrow, &name, op, "asked for values")?
            .map_or(name, str::to_string))
    }

    /// A tensor on device `index` around an existing payload.
    #[pyo3(signature = (payload, index=0))]
    fn tensor_from_payload<'py>(
        &self,
        py: Python<'py>,
        payload: &Bound<'py, PyAny>,
        index: u16,
    ) -> PyResult<Bound<'py, PyAny>> {
        // A kernel's every result comes through here: the backends' bit set, not their
        // registrations' lock.
        if !is_python_backend(self.key) {
            return Err(new_err(
                py,
                "BoxfallError",
                format!("'{}' tensors hold host memory, not payloads", self.name),
            ));
        }
        wrap(py, object_tensor(Device::new(self.key, index), payload))
    }

    /// The dtypes the backend's devices hold, by name (every dtype of the array API standard
    /// unless `register_backend(dtypes=)` named fewer).
    #[getter]
    fn dtypes(&self, py: Python<'_>) -> Vec<String> {
        self.registration(py)
            .map_or_else(Held::all, |r| r.held)
            .names()
    }

    /// Whether a 64-bit dtype the device lacks becomes the 32-bit one of its kind
    /// (`register_backend(narrow=)`), as JAX without 64-bit types does.
    #[getter]
    fn narrow(&self, py: Python<'_>) -> bool {
        self.registration(py).is_some_and(|r| r.narrow)
    }

    /// Whether the backend's hooks and kernels may run on several threads at once (False:
    /// boxfall runs them one at a time).
    #[getter]
    fn thread_safe(&self, py: Python<'_>) -> bool {
        self.registration(py).is_none_or(|r| r.lock.is_none())
    }

    /// Whether the backend takes part in residency (`register_backend(lazy=)`): host copies
    /// kept, the CPU fallback's results left on the host until the device needs them. False
    /// for Native, whose tensors are host memory.
    #[getter]
    fn lazy(&self) -> bool {
        crate::backend::backend(self.key).is_some_and(|b| b.lazy())
    }

    fn __repr__(&self) -> String {
        format!("bf.Backend({:?})", self.name)
    }
}

impl PyBackend {
    /// What `dtype` (asked for, or given) becomes on the device: None where it holds it; the
    /// dtype to narrow to where the backend narrows (warned once for `op`, or every time
    /// without one, and counted); else a `DTypeError`. `what` says what happened to `op`.
    fn fit(
        &self,
        py: Python<'_>,
        held: &Held,
        narrow: bool,
        dtype: &str,
        op: Option<&OperatorHandle>,
        what: &str,
    ) -> PyResult<Option<&'static str>> {
        if held.holds(dtype) {
            return Ok(None);
        }
        let Some(to) = held.narrowed(dtype).filter(|_| narrow) else {
            return Err(to_pyerr(
                py,
                Error::DeviceDType {
                    dtype: dtype.to_string(),
                    backend: self.name.clone(),
                    held: held.names(),
                    op: op.map(|op| op.name().to_string()),
                },
            ));
        };
        if op.is_none_or(|op| op.metrics().record_narrowed(self.key)) {
            let by = op.map_or_else(|| "a call".to_string(), |op| format!("'{}'", op.name()));
            warn_as(
                py,
                "NarrowingWarning",
                &format!(
                    "{by} on backend '{}' {what} of dtype {dtype}, which the device does not hold: {to} instead (register_backend(narrow=True), JAX's rule without 64-bit types); warned once per operator and backend, counted in bf.metrics.op_stats(op)['narrowed']",
                    self.name
                ),
            )
            .py(py)?;
        }
        Ok(Some(to))
    }

    pub fn native() -> PyBackend {
        PyBackend {
            key: DispatchKey::NATIVE,
            name: "Native".into(),
        }
    }

    /// The latest registration of a Python backend, copied (None for Native, whose tensors
    /// hold host memory).
    fn registration(&self, py: Python<'_>) -> Option<Registration> {
        python_backends()[self.key.index()]
            .as_ref()
            .map(|r| Registration {
                from_cpu: r.from_cpu.clone_ref(py),
                held: r.held.clone(),
                narrow: r.narrow,
                lock: r.lock.as_ref().map(|l| l.clone_ref(py)),
            })
    }

    /// The backend object of `key`: Native, or a backend registered from Python.
    fn of_key(key: DispatchKey) -> Option<PyBackend> {
        let known = key == DispatchKey::NATIVE || python_backends()[key.index()].is_some();
        known.then(|| PyBackend {
            key,
            name: key.name(),
        })
    }
}

/// The backend registered under `name` (any case: `"accel"` finds `Accel`), Native included.
/// A name that is no backend (`"CPU"`, whose tensors are NumPy arrays, a functionality key, an
/// unknown name) is an `UnknownKeyError` that lists the backends.
#[pyfunction]
pub fn get_backend(py: Python<'_>, name: &str) -> PyResult<PyBackend> {
    let unknown = |what: String| {
        let known = backends()
            .iter()
            .map(|b| b.name.clone())
            .collect::<Vec<_>>();
        new_err(
            py,
            "UnknownKeyError",
            format!("{what}; backends: [{}]", known.join(", ")),
        )
    };
    let key = match DispatchKey::from_name(name) {
        Ok(k) => k,
        Err(_) => return Err(unknown(format!("no backend is registered as '{name}'"))),
    };
    if key == DispatchKey::CPU {
        return Err(unknown(
            "'CPU' has no Backend object: CPU tensors are NumPy arrays".to_string(),
        ));
    }
    PyBackend::of_key(key)
        .ok_or_else(|| unknown(format!("'{}' is a dispatch key, not a backend", key.name())))
}

/// Every backend, Native first, then those registered from Python in registration order
/// (lowest priority first, as `bf.dispatch_keys()` lists keys).
#[pyfunction]
pub fn backends() -> Vec<PyBackend> {
    registered_keys()
        .into_iter()
        .filter(|k| k.is_backend())
        .filter_map(PyBackend::of_key)
        .collect()
}
