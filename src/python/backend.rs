//! Backends defined in Python: `bf.register_backend(name, to_cpu=, from_cpu=, copy_from_cpu=)`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use super::errors::{new_err, IntoPy};
use super::tensor::{
    cpu_tensor_to_numpy, hook_error, object_tensor, payload_object, read_only_view, wrap,
};
use crate::backend::{register_backend as register_core, replace_backend as replace_core, Backend};
use crate::error::{Error, Result};
use crate::key::{registered_keys, DispatchKey, NUM_KEYS};
use crate::tensor::{Device, Tensor};

struct PyBackendHooks {
    name: String,
    to_cpu: Py<PyAny>,
    from_cpu: Py<PyAny>,
    copy_from_cpu: Py<PyAny>,
    to_cpu_many: Option<Py<PyAny>>,
    shares_memory: bool,
}

impl PyBackendHooks {
    fn payload<'py>(&self, py: Python<'py>, t: &Tensor) -> Result<Bound<'py, PyAny>> {
        payload_object(py, t).ok_or_else(|| {
            Error::Fallback(format!(
                "a tensor on {} holds no Python payload of backend '{}'",
                t.device(),
                self.name
            ))
        })
    }

    fn fail(&self, py: Python<'_>, hook: &str, e: PyErr) -> Error {
        hook_error(
            py,
            e,
            format!("in the '{hook}' hook of backend '{}'", self.name),
        )
    }

    /// What `to_cpu` gave, as the CPU tensor `usage` needs: for a kernel that writes it, a copy
    /// where the hook may share memory with the payload; for one that only reads it, a
    /// read-only view (the kernel then can neither write the device's memory nor write a copy
    /// whose write would be lost); for `bf.Tensor.numpy()`, the array as the hook gave it.
    fn cpu_result(&self, py: Python<'_>, arr: Bound<'_, PyAny>, usage: Usage) -> Result<Tensor> {
        let Ok(untyped) = arr.cast::<numpy::PyUntypedArray>() else {
            return Err(Error::Fallback(format!(
                "the 'to_cpu' hook of backend '{}' returned {}, not a NumPy array",
                self.name,
                arr.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            )));
        };
        let arr = match usage {
            Usage::Read => read_only_view(untyped).map_err(|e| self.fail(py, "to_cpu", e))?,
            Usage::Write if self.shares_memory => arr
                .call_method0("copy")
                .map_err(|e| self.fail(py, "to_cpu", e))?,
            Usage::Write | Usage::AsIs => arr,
        };
        Ok(super::tensor::numpy_tensor(&arr))
    }

    fn hook_to_cpu(&self, t: &Tensor, usage: Usage) -> Result<Tensor> {
        Python::attach(|py| {
            let p = self.payload(py, t)?;
            let arr = self
                .to_cpu
                .bind(py)
                .call1((p,))
                .map_err(|e| self.fail(py, "to_cpu", e))?;
            self.cpu_result(py, arr, usage)
        })
    }
}

/// What a CPU tensor from `to_cpu` is for.
#[derive(Clone, Copy)]
enum Usage {
    /// A kernel writes it.
    Write,
    /// A kernel only reads it.
    Read,
    /// `bf.Tensor.numpy()`.
    AsIs,
}

impl Usage {
    fn of(for_write: bool) -> Usage {
        if for_write {
            Usage::Write
        } else {
            Usage::Read
        }
    }
}

impl Backend for PyBackendHooks {
    fn to_cpu(&self, t: &Tensor, for_write: bool) -> Result<Tensor> {
        let usage = if for_write { Usage::Write } else { Usage::AsIs };
        self.hook_to_cpu(t, usage)
    }

    fn to_cpu_read_only(&self, t: &Tensor) -> Result<Tensor> {
        self.hook_to_cpu(t, Usage::Read)
    }

    fn batches_transfers(&self) -> bool {
        self.to_cpu_many.is_some()
    }

    fn to_cpu_many(&self, tensors: &[(&Tensor, bool)]) -> Result<Vec<Tensor>> {
        let Some(many) = &self.to_cpu_many else {
            return tensors
                .iter()
                .map(|(t, w)| self.hook_to_cpu(t, Usage::of(*w)))
                .collect();
        };
        if tensors.is_empty() {
            return Ok(vec![]);
        }
        Python::attach(|py| {
            let payloads = tensors
                .iter()
                .map(|(t, _)| self.payload(py, t))
                .collect::<Result<Vec<_>>>()?;
            let list = PyList::new(py, payloads).map_err(|e| self.fail(py, "to_cpu_many", e))?;
            let out = many
                .bind(py)
                .call1((list,))
                .map_err(|e| self.fail(py, "to_cpu_many", e))?;
            let arrays: Vec<Bound<'_, PyAny>> = out
                .try_iter()
                .and_then(|it| it.collect::<PyResult<Vec<_>>>())
                .map_err(|e| self.fail(py, "to_cpu_many", e))?;
            arrays
                .into_iter()
                .zip(tensors)
                .map(|(a, (_, w))| self.cpu_result(py, a, Usage::of(*w)))
                .collect()
        })
    }

    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        Python::attach(|py| {
            let arr =
                cpu_tensor_to_numpy(py, cpu, false).map_err(|e| self.fail(py, "from_cpu", e))?;
            let payload = self
                .from_cpu
                .bind(py)
                .call1((arr,))
                .map_err(|e| self.fail(py, "from_cpu", e))?;
            Ok(object_tensor(device, &payload))
        })
    }

    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        Python::attach(|py| {
            let p = self.payload(py, dst)?;
            let arr = cpu_tensor_to_numpy(py, src, false)
                .map_err(|e| self.fail(py, "copy_from_cpu", e))?;
            self.copy_from_cpu
                .bind(py)
                .call1((p, arr))
                .map_err(|e| self.fail(py, "copy_from_cpu", e))?;
            Ok(())
        })
    }
}

/// The `from_cpu` hook of each backend registered from Python, by key index: what
/// `Backend.tensor` calls, for the object `register_backend` returned and for those
/// `get_backend` and `backends` return, so that all of them use the hooks of the latest
/// registration (`replace=True`).
fn python_backends() -> MutexGuard<'static, [Option<Py<PyAny>>; NUM_KEYS]> {
    static BACKENDS: Mutex<[Option<Py<PyAny>>; NUM_KEYS]> = Mutex::new([const { None }; NUM_KEYS]);
    BACKENDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The keys of the backends registered from Python (`register_backend`), a bit each: their
/// hooks call Python, so a call that runs them must hold PyO3's count of the GIL (see
/// `fast::run`). Read without a lock on the path of every call that falls back.
static PYTHON_KEYS: AtomicU64 = AtomicU64::new(0);

/// Whether `key` is a backend registered from Python (whose hooks call Python functions).
#[inline]
pub(crate) fn is_python_backend(key: DispatchKey) -> bool {
    PYTHON_KEYS.load(Ordering::Relaxed) & (1 << key.index()) != 0
}

/// A registered backend: makes tensors on its devices.
#[pyclass(name = "Backend", module = "boxfall", frozen)]
pub struct PyBackend {
    key: DispatchKey,
    name: String,
}

#[pymethods]
impl PyBackend {
    /// The backend's (and its dispatch key's) name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// A tensor on device `index` holding `array`'s values (through `from_cpu`).
    #[pyo3(signature = (array, index=0))]
    fn tensor<'py>(
        &self,
        py: Python<'py>,
        array: &Bound<'py, PyAny>,
        index: u16,
    ) -> PyResult<Bound<'py, PyAny>> {
        let device = Device::new(self.key, index);
        let arr = py.import("numpy")?.getattr("asarray")?.call1((array,))?;
        let t = match &self.hook_from_cpu(py) {
            Some(f) => {
                let payload = f.bind(py).call1((arr,))?;
                object_tensor(device, &payload)
            }
            None => Tensor::host(device, super::tensor::numpy_to_host(&arr).py(py)?),
        };
        wrap(py, t)
    }

    /// A tensor on device `index` around an existing payload.
    #[pyo3(signature = (payload, index=0))]
    fn tensor_from_payload<'py>(
        &self,
        py: Python<'py>,
        payload: &Bound<'py, PyAny>,
        index: u16,
    ) -> PyResult<Bound<'py, PyAny>> {
        if self.hook_from_cpu(py).is_none() {
            return Err(new_err(
                py,
                "BoxfallError",
                format!("'{}' tensors hold host memory, not payloads", self.name),
            ));
        }
        wrap(py, object_tensor(Device::new(self.key, index), payload))
    }

    fn __repr__(&self) -> String {
        format!("bf.Backend({:?})", self.name)
    }
}

impl PyBackend {
    pub fn native() -> PyBackend {
        PyBackend {
            key: DispatchKey::NATIVE,
            name: "Native".into(),
        }
    }

    /// The `from_cpu` hook of the latest registration of a Python backend (None for Native,
    /// whose tensors hold host memory).
    fn hook_from_cpu(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        python_backends()[self.key.index()]
            .as_ref()
            .map(|f| f.clone_ref(py))
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

/// Registers a Python backend and its dispatch key; later backends rank above earlier ones.
/// With `replace`, a backend registered earlier under `name` gets the new hooks and keeps its
/// key (a notebook cell run twice): its tensors, kernels and fallbacks stay, and every
/// `Backend` object of it uses the new hooks.
#[pyfunction]
#[pyo3(signature = (name, *, to_cpu, from_cpu, copy_from_cpu, to_cpu_many=None, shares_memory=false, replace=false))]
#[allow(clippy::too_many_arguments)]
pub fn register_backend(
    py: Python<'_>,
    name: &str,
    to_cpu: Py<PyAny>,
    from_cpu: Py<PyAny>,
    copy_from_cpu: Py<PyAny>,
    to_cpu_many: Option<Py<PyAny>>,
    shares_memory: bool,
    replace: bool,
) -> PyResult<PyBackend> {
    // Checked before anything is registered, so a refused backend leaves its name free.
    let given = [
        ("to_cpu", Some(&to_cpu)),
        ("from_cpu", Some(&from_cpu)),
        ("copy_from_cpu", Some(&copy_from_cpu)),
        ("to_cpu_many", to_cpu_many.as_ref()),
    ];
    for (hook, f) in given {
        if let Some(f) = f.map(|f| f.bind(py)).filter(|f| !f.is_callable()) {
            let type_name = f.get_type().name()?;
            return Err(PyTypeError::new_err(format!(
                "the '{hook}' hook of backend '{name}' must be callable, not {type_name}; the backend was not registered"
            )));
        }
    }
    let hooks = PyBackendHooks {
        name: name.to_string(),
        to_cpu,
        from_cpu: from_cpu.clone_ref(py),
        copy_from_cpu,
        to_cpu_many,
        shares_memory,
    };
    let key = if replace {
        replace_core(name, Arc::new(hooks)).py(py)?
    } else {
        register_core(name, Arc::new(hooks)).py(py)?
    };
    python_backends()[key.index()] = Some(from_cpu);
    PYTHON_KEYS.fetch_or(1 << key.index(), Ordering::Relaxed);
    Ok(PyBackend {
        key,
        name: name.to_string(),
    })
}
