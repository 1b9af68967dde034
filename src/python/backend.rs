//! Backends defined in Python: `bf.register_backend(name, to_cpu=, from_cpu=, copy_from_cpu=)`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::errors::{new_err, to_pyerr, warn_as, IntoPy};
use super::tensor::{
    cpu_tensor_to_numpy, data_object, hook_error, object_tensor, read_only_view, wrap,
};
use crate::backend::{
    register_backend as register_core, replace_backend as replace_core, Backend, ResultOf,
};
use crate::error::{Error, Result};
use crate::key::{registered_keys, DispatchKey, NUM_KEYS};
use crate::tensor::{DType, Device, DeviceView, Tensor, ViewWrite};
use crate::OperatorHandle;

/// The dtypes a backend's device holds (`register_backend(dtypes=)`): bit `i` stands for
/// `DType::ALL[i]`; `ext` names the extension dtypes NumPy knows beside them
/// (`ml_dtypes.bfloat16`, a TPU's own).
#[derive(Clone, PartialEq, Eq)]
struct Held {
    bits: u16,
    ext: Vec<String>,
}

/// Every dtype of the standard, as `Held` bits.
const ALL_BITS: u16 = (1 << DType::ALL.len()) - 1;

impl Held {
    /// Every dtype of the standard (`dtypes=None`): no result is checked.
    fn all() -> Held {
        Held {
            bits: ALL_BITS,
            ext: Vec::new(),
        }
    }

    /// Whether no result is checked: every dtype of the standard and nothing else declared.
    fn is_all(&self) -> bool {
        self.bits == ALL_BITS && self.ext.is_empty()
    }

    fn of_names(py: Python<'_>, backend: &str, dtypes: &Bound<'_, PyAny>) -> PyResult<Held> {
        let np = py.import("numpy")?;
        let np_dtype = np.getattr("dtype")?;
        let void = np.getattr("void")?;
        let mut held = Held {
            bits: 0,
            ext: Vec::new(),
        };
        for d in dtypes.try_iter()? {
            let d = d?;
            let dtype = np_dtype.call1((&d,)).ok();
            let name = dtype
                .as_ref()
                .and_then(|t| t.getattr("name").ok())
                .and_then(|n| n.extract::<String>().ok());
            if let Some(i) = name
                .as_deref()
                .and_then(|n| DType::ALL.iter().position(|t| t.name() == n))
            {
                held.bits |= 1 << i;
                continue;
            }
            match (dtype, name) {
                (Some(t), Some(n)) if is_extension(&t, &void) => {
                    if !held.ext.contains(&n) {
                        held.ext.push(n);
                    }
                }
                _ => {
                    return Err(PyTypeError::new_err(format!(
                        "dtypes= of backend '{backend}' names {}, which is no dtype of the array API standard ({}) nor a numeric dtype NumPy knows (an extension dtype such as ml_dtypes.bfloat16); the backend was not registered",
                        d.repr()?,
                        DType::supported_names()
                    )))
                }
            }
        }
        if held.bits == 0 && held.ext.is_empty() {
            return Err(PyTypeError::new_err(format!(
                "dtypes= of backend '{backend}' names no dtype; the backend was not registered"
            )));
        }
        Ok(held)
    }

    fn holds(&self, name: &str) -> bool {
        self.is_all()
            || DType::ALL
                .iter()
                .position(|t| t.name() == name)
                .map_or_else(
                    || self.ext.iter().any(|e| e == name),
                    |i| self.bits & (1 << i) != 0,
                )
    }

    /// The dtype a result of dtype `name` that the device lacks becomes where it is narrowed
    /// (JAX's rule without 64-bit types): the 32-bit one of its kind, where the device holds
    /// it. None for a dtype the device holds, or one with nothing to narrow to.
    fn narrowed(&self, name: &str) -> Option<&'static str> {
        if self.holds(name) {
            return None;
        }
        let to = match name {
            "int64" => "int32",
            "uint64" => "uint32",
            "float64" => "float32",
            "complex128" => "complex64",
            _ => return None,
        };
        self.holds(to).then_some(to)
    }

    fn names(&self) -> Vec<String> {
        DType::ALL
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bits & (1 << i) != 0)
            .map(|(_, t)| t.name().to_string())
            .chain(self.ext.iter().cloned())
            .collect()
    }
}

/// Whether a NumPy dtype outside the standard is an extension dtype a backend may declare: a
/// number NumPy knows (`float16`, or one registered with it, as `ml_dtypes`' are, whose kind
/// is `V` but whose scalar type is no `numpy.void`), not objects, strings, dates or records.
fn is_extension(dtype: &Bound<'_, PyAny>, void: &Bound<'_, PyAny>) -> bool {
    let kind = dtype
        .getattr("kind")
        .and_then(|k| k.extract::<String>())
        .unwrap_or_default();
    match kind.as_str() {
        "b" | "i" | "u" | "f" | "c" => true,
        "V" => dtype
            .getattr("type")
            .and_then(|t| {
                let t = t.cast_into::<pyo3::types::PyType>()?;
                let void = void.cast::<pyo3::types::PyType>()?;
                t.is_subclass(void)
            })
            .is_ok_and(|sub| !sub),
        _ => false,
    }
}

/// A backend's lock (`thread_safe=False`): held while one of its hooks or kernels runs, so
/// that they run one at a time. A `threading.RLock`: a kernel that hands a case to the CPU
/// fallback calls the hooks on the thread that holds it, and a thread waiting for it lets go
/// of the GIL (the thread holding it may need the GIL to finish).
pub(super) struct Serial<'py>(Option<Bound<'py, PyAny>>);

impl<'py> Serial<'py> {
    pub(super) fn enter(py: Python<'py>, lock: Option<&Py<PyAny>>) -> PyResult<Serial<'py>> {
        let Some(lock) = lock else {
            return Ok(Serial(None));
        };
        let lock = lock.bind(py).clone();
        lock.call_method0(pyo3::intern!(py, "acquire"))?;
        Ok(Serial(Some(lock)))
    }
}

impl Drop for Serial<'_> {
    fn drop(&mut self) {
        if let Some(lock) = &self.0 {
            // Only the thread that acquired it releases it, so this cannot fail but for a
            // broken interpreter; nothing could be done about it here.
            let _ = lock.call_method0(pyo3::intern!(lock.py(), "release"));
        }
    }
}

/// The lock of the Python backend of `key` (`thread_safe=False`), if it has one.
pub(super) fn backend_lock(py: Python<'_>, key: DispatchKey) -> Option<Py<PyAny>> {
    python_backends()[key.index()]
        .as_ref()
        .and_then(|b| b.lock.as_ref().map(|l| l.clone_ref(py)))
}

struct PyBackendHooks {
    name: String,
    to_cpu: Py<PyAny>,
    from_cpu: Py<PyAny>,
    copy_from_cpu: Py<PyAny>,
    to_cpu_many: Option<Py<PyAny>>,
    /// `register_backend(view=)`: a view made on the device from its base's payload.
    view: Option<Py<PyAny>>,
    /// `register_backend(view_write=)`: a view's values written into its base on the device.
    view_write: Option<Py<PyAny>>,
    shares_memory: bool,
    held: Held,
    /// `register_backend(narrow=)`: a 64-bit result the device lacks becomes 32-bit.
    narrow: bool,
    lock: Option<Py<PyAny>>,
    /// `register_backend(lazy=)`: residency (`crate::resident`).
    lazy: bool,
}

impl PyBackendHooks {
    /// A CPU result of a dtype the device does not hold: refused before `from_cpu` moves it.
    fn check_dtype(&self, arr: &Bound<'_, PyAny>) -> Result<()> {
        if self.held.is_all() {
            return Ok(());
        }
        let name = arr
            .getattr(pyo3::intern!(arr.py(), "dtype"))
            .and_then(|d| d.str())
            .map(|s| s.to_string())
            .unwrap_or_default();
        self.check_dtype_name(&name)
    }

    /// `check_dtype` by the dtype's name.
    fn check_dtype_name(&self, name: &str) -> Result<()> {
        let name = name.to_string();
        if self.held.holds(&name) {
            return Ok(());
        }
        Err(Error::DeviceDType {
            dtype: name,
            backend: self.name.clone(),
            held: self.held.names(),
            op: None,
        })
    }

    /// The payload `from_cpu` made of `arr` must have `arr`'s shape and dtype (where it tells
    /// them: a payload without `shape` or `dtype` is not checked).
    fn check_payload(
        &self,
        hook: &str,
        arr: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
    ) -> Result<()> {
        check_payload(&self.name, hook, arr, payload)
    }

    fn payload<'py>(&self, py: Python<'py>, t: &Tensor) -> Result<Bound<'py, PyAny>> {
        // A host-only tensor gets its payload first: a hook always sees device data (made
        // again where another thread's write left it on the host meanwhile).
        let data = crate::resident::device_data(t)?;
        data_object(py, &data).ok_or_else(|| {
            Error::Fallback(format!(
                "a tensor on {} holds no Python payload of backend '{}'",
                t.device(),
                self.name
            ))
        })
    }

    /// What a `view` hook returned, as the payload and whether it shares the base's memory:
    /// a payload alone shares it; `(payload, shares_memory)` says which (False: a copy, whose
    /// writes boxfall writes into the base after a kernel). Any other tuple is refused, as a
    /// payload that could not be told from the pair.
    fn view_sharing<'py>(&self, out: &Bound<'py, PyAny>) -> Result<(Bound<'py, PyAny>, bool)> {
        let Ok(pair) = out.cast::<PyTuple>() else {
            return Ok((out.clone(), true));
        };
        if pair.len() == 2 {
            if let (Ok(payload), Ok(flag)) = (pair.get_item(0), pair.get_item(1)) {
                if let Ok(flag) = flag.cast::<pyo3::types::PyBool>() {
                    return Ok((payload, flag.is_true()));
                }
            }
        }
        Err(Error::Kernel {
            context: format!("the 'view' hook of backend '{}'", self.name),
            message: format!(
                "it returned a tuple of {} items that is not (payload, shares_memory) with shares_memory a bool; a view hook returns a payload (sharing the base's memory), or (payload, False) for a copy, and the kernel did not run",
                pair.len()
            ),
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
    /// The backend's lock, held until the guard goes (`thread_safe=False`; else nothing).
    fn serial<'py>(&self, py: Python<'py>) -> Result<Serial<'py>> {
        Serial::enter(py, self.lock.as_ref()).map_err(super::errors::from_pyerr)
    }

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
            let _serial = self.serial(py)?;
            let arr = self
                .to_cpu
                .bind(py)
                .call1((p,))
                .map_err(|e| self.fail(py, "to_cpu", e))?;
            self.cpu_result(py, arr, usage)
        })
    }
}

/// Whether `arr` owns its memory (NumPy's `OWNDATA` flag).
fn owns_data(arr: &Bound<'_, numpy::PyUntypedArray>) -> bool {
    use numpy::PyUntypedArrayMethods;
    // SAFETY: `arr` is a live array object and the GIL is held (it is bound); its flags field
    // is read as NumPy's `PyArray_FLAGS` reads it.
    let flags = unsafe { (*arr.as_array_ptr()).fields.flags };
    flags & numpy::npyffi::flags::NPY_ARRAY_OWNDATA != 0
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
            let _serial = self.serial(py)?;
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

    fn lazy(&self) -> bool {
        self.lazy
    }

    /// A lazy backend's result stays on the host (`Tensor::host_only`), checked now against
    /// the dtypes the device holds, and kept read-only, as a host copy is lent to kernels: the
    /// payload's own check waits for `from_cpu`, when the device needs the values.
    fn from_cpu_owned(&self, cpu: Tensor, device: Device) -> Result<Tensor> {
        if !self.lazy {
            return self.from_cpu(&cpu, device);
        }
        if cpu.is_host() {
            // Host memory is never written where it is: it is its own read-only copy.
            if !self.held.is_all() {
                if let Some(meta) = cpu.meta() {
                    self.check_dtype_name(&meta.dtype)?;
                }
            }
            return Ok(Tensor::host_only(cpu, device));
        }
        Python::attach(|py| {
            let arr =
                cpu_tensor_to_numpy(py, &cpu, false).map_err(|e| self.fail(py, "from_cpu", e))?;
            self.check_dtype(&arr)?;
            let Ok(untyped) = arr.cast::<numpy::PyUntypedArray>() else {
                return self.from_cpu(&cpu, device);
            };
            // An array the kernel made owns its memory, which nothing else writes; one that
            // sees another's memory (a caller's array handed back, a view) is copied, as
            // `from_cpu` would have, so that a later write there does not reach the tensor.
            let owned = if owns_data(untyped) {
                untyped.clone().into_any()
            } else {
                arr.call_method0(pyo3::intern!(py, "copy"))
                    .map_err(|e| self.fail(py, "from_cpu", e))?
            };
            let Ok(owned) = owned.cast::<numpy::PyUntypedArray>() else {
                return self.from_cpu(&cpu, device);
            };
            let kept = read_only_view(owned).map_err(|e| self.fail(py, "from_cpu", e))?;
            Ok(Tensor::host_only(
                super::tensor::numpy_tensor(&kept),
                device,
            ))
        })
    }

    /// A result of a dtype the device lacks is fitted before it moves: the 32-bit dtype of its
    /// kind where the operator's results have the library's dtypes (`Tag::DefaultDtypes`:
    /// indices, counts), or where the backend narrows (`narrow=True`, warned once per operator
    /// and counted); any other stays a `DTypeError` (`from_cpu_owned`'s check).
    fn from_cpu_result(&self, cpu: Tensor, device: Device, op: ResultOf<'_>) -> Result<Tensor> {
        if self.held.is_all() {
            return self.from_cpu_owned(cpu, device);
        }
        let Some(to) = cpu.meta().and_then(|m| self.held.narrowed(&m.dtype)) else {
            return self.from_cpu_owned(cpu, device);
        };
        let chosen = op.default_dtypes;
        if !chosen && !self.narrow {
            return self.from_cpu_owned(cpu, device);
        }
        let fitted = Python::attach(|py| {
            let arr =
                cpu_tensor_to_numpy(py, &cpu, false).map_err(|e| self.fail(py, "from_cpu", e))?;
            if !chosen && op.metrics.record_narrowed(device.key) {
                let from = arr
                    .getattr(pyo3::intern!(py, "dtype"))
                    .and_then(|d| d.str())
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                warn_as(
                    py,
                    "NarrowingWarning",
                    &format!(
                        "'{}' on backend '{}' made a result of dtype {from}, which the device does not hold: it is {to} (register_backend(narrow=True), JAX's rule without 64-bit types); warned once per operator and backend, counted in bf.metrics.op_stats(op)['narrowed']",
                        op.op,
                        self.name
                    ),
                )?;
            }
            let out = arr
                .call_method1(pyo3::intern!(py, "astype"), (to,))
                .map_err(|e| self.fail(py, "from_cpu", e))?;
            Ok::<_, Error>(super::tensor::numpy_tensor(&out))
        })?;
        self.from_cpu_owned(fitted, device)
    }

    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        Python::attach(|py| {
            let arr =
                cpu_tensor_to_numpy(py, cpu, false).map_err(|e| self.fail(py, "from_cpu", e))?;
            // A view's host values are a NumPy view of its base's (a transposed one is not in
            // C order): the hook gets them in C order, as a device copies them.
            let arr = match arr.cast::<numpy::PyUntypedArray>() {
                Ok(a) if !numpy::PyUntypedArrayMethods::is_c_contiguous(a) => arr
                    .call_method1(pyo3::intern!(py, "copy"), ("C",))
                    .map_err(|e| self.fail(py, "from_cpu", e))?,
                _ => arr,
            };
            self.check_dtype(&arr)?;
            let _serial = self.serial(py)?;
            let payload = self
                .from_cpu
                .bind(py)
                .call1((&arr,))
                .map_err(|e| self.fail(py, "from_cpu", e))?;
            self.check_payload("from_cpu", &arr, &payload)?;
            Ok(object_tensor(device, &payload))
        })
    }

    fn view(
        &self,
        base: &Tensor,
        shape: &[usize],
        strides: &[isize],
        offset: isize,
    ) -> Result<Option<DeviceView>> {
        let Some(hook) = &self.view else {
            return Ok(None);
        };
        Python::attach(|py| {
            // The base's payload, made first if its values are on the host only (counted
            // there, once: every later view of it is made from it).
            let p = self.payload(py, base)?;
            let args = (
                &p,
                PyTuple::new(py, shape).map_err(|e| self.fail(py, "view", e))?,
                PyTuple::new(py, strides).map_err(|e| self.fail(py, "view", e))?,
                offset,
            );
            let out = {
                let _serial = self.serial(py)?;
                hook.bind(py)
                    .call1(args)
                    .map_err(|e| self.fail(py, "view", e))?
            };
            if out.is_none() {
                return Ok(None);
            }
            let (out, shares) = self.view_sharing(&out)?;
            check_view(&self.name, &p, shape, &out)?;
            Ok(Some(DeviceView {
                data: object_tensor(base.device(), &out).data(),
                shares,
            }))
        })
    }

    fn exclusive(&self, call: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        if self.lock.is_none() {
            return call();
        }
        Python::attach(|py| {
            let _serial = self.serial(py)?;
            call()
        })
    }

    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        Python::attach(|py| {
            let p = self.payload(py, dst)?;
            let arr = cpu_tensor_to_numpy(py, src, false)
                .map_err(|e| self.fail(py, "copy_from_cpu", e))?;
            self.check_dtype(&arr)?;
            let out = {
                let _serial = self.serial(py)?;
                self.copy_from_cpu
                    .bind(py)
                    .call1((&p, &arr))
                    .map_err(|e| self.fail(py, "copy_from_cpu", e))?
            };
            // None (or the payload itself): written where it is. Anything else is the new
            // payload of a device whose memory is immutable, put in `dst`'s place.
            if !out.is_none() && !out.is(&p) {
                self.check_payload("copy_from_cpu", &arr, &out)?;
                dst.put_written(object_tensor(dst.device(), &out).data());
            }
            Ok(())
        })
    }

    fn view_write(
        &self,
        base: &Tensor,
        values: &Tensor,
        shape: &[usize],
        strides: &[isize],
        offset: isize,
    ) -> Result<ViewWrite> {
        let Some(hook) = &self.view_write else {
            return Ok(ViewWrite::Declined);
        };
        Python::attach(|py| {
            let p = self.payload(py, base)?;
            let v = self.payload(py, values)?;
            let args = (
                &p,
                v,
                PyTuple::new(py, shape).map_err(|e| self.fail(py, "view_write", e))?,
                PyTuple::new(py, strides).map_err(|e| self.fail(py, "view_write", e))?,
                offset,
            );
            let out = {
                let _serial = self.serial(py)?;
                hook.bind(py)
                    .call1(args)
                    .map_err(|e| self.fail(py, "view_write", e))?
            };
            if out.is_none() || out.is(&p) {
                return Ok(ViewWrite::InPlace);
            }
            // The base's new payload: of the base's shape and dtype, as `from_cpu`'s of its
            // values would be.
            check_payload(&self.name, "view_write", &p, &out)?;
            Ok(ViewWrite::Replaced(
                object_tensor(base.device(), &out).data(),
            ))
        })
    }
}

/// What `Backend` objects need of a backend registered from Python, as its latest
/// registration (`replace=True`) gave it.
struct Registration {
    /// The `from_cpu` hook, which `Backend.tensor` calls.
    from_cpu: Py<PyAny>,
    /// The dtypes its device holds.
    held: Held,
    /// `register_backend(narrow=)`.
    narrow: bool,
    /// Its lock, for a backend registered with `thread_safe=False`.
    lock: Option<Py<PyAny>>,
}

/// Each backend registered from Python, by key index: for the object `register_backend`
/// returned and for those `get_backend` and `backends` return, so that all of them use the
/// hooks of the latest registration (`replace=True`).
fn python_backends() -> MutexGuard<'static, [Option<Registration>; NUM_KEYS]> {
    static BACKENDS: Mutex<[Option<Registration>; NUM_KEYS]> =
        Mutex::new([const { None }; NUM_KEYS]);
    BACKENDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `from_cpu`'s payload for `arr` must have its shape and dtype (where the payload tells them:
/// one without `shape` or `dtype` is not checked): a payload of another shape would give every
/// later reader of the tensor wrong results, so the call fails instead, naming `hook`.
fn check_payload(
    backend: &str,
    hook: &str,
    arr: &Bound<'_, PyAny>,
    payload: &Bound<'_, PyAny>,
) -> Result<()> {
    let py = arr.py();
    let (Ok(shape), Ok(dtype)) = (
        payload.getattr(pyo3::intern!(py, "shape")),
        payload.getattr(pyo3::intern!(py, "dtype")),
    ) else {
        return Ok(());
    };
    let (Ok(want_shape), Ok(want_dtype)) = (
        arr.getattr(pyo3::intern!(py, "shape")),
        arr.getattr(pyo3::intern!(py, "dtype")),
    ) else {
        return Ok(());
    };
    let shape_ok = match (
        shape.extract::<Vec<usize>>(),
        want_shape.extract::<Vec<usize>>(),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => true,
    };
    let dtype_ok = want_dtype.eq(&dtype).unwrap_or(false);
    if shape_ok && dtype_ok {
        return Ok(());
    }
    let show = |o: &Bound<'_, PyAny>| o.str().map(|s| s.to_string()).unwrap_or_default();
    Err(Error::Kernel {
        context: format!("the '{hook}' hook of backend '{backend}'"),
        message: format!(
            "it returned a payload of shape {} and dtype {} for a CPU result of shape {} and dtype {}; a payload must have its CPU result's shape and dtype, and nothing was written",
            show(&shape),
            show(&dtype),
            show(&want_shape),
            show(&want_dtype),
        ),
    })
}

/// The payload a `view` hook made of `base` must have the view's `shape` and the base's dtype
/// (where the payloads tell them), as `from_cpu`'s must: a view of another shape would give
/// the kernel reading it wrong results.
fn check_view(
    backend: &str,
    base: &Bound<'_, PyAny>,
    shape: &[usize],
    made: &Bound<'_, PyAny>,
) -> Result<()> {
    let py = base.py();
    let got_shape = made
        .getattr(pyo3::intern!(py, "shape"))
        .and_then(|s| s.extract::<Vec<usize>>())
        .ok();
    let (want_dtype, got_dtype) = (
        base.getattr(pyo3::intern!(py, "dtype")).ok(),
        made.getattr(pyo3::intern!(py, "dtype")).ok(),
    );
    let shape_ok = got_shape.as_deref().is_none_or(|s| s == shape);
    let dtype_ok = match (&want_dtype, &got_dtype) {
        (Some(w), Some(g)) => w.eq(g).unwrap_or(false),
        _ => true,
    };
    if shape_ok && dtype_ok {
        return Ok(());
    }
    let show = |o: &Option<Bound<'_, PyAny>>| {
        o.as_ref()
            .and_then(|o| o.str().ok())
            .map(|s| s.to_string())
            .unwrap_or_else(|| "?".into())
    };
    let tuple = |s: &[usize]| match s {
        [one] => format!("({one},)"),
        s => format!(
            "({})",
            s.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let got = got_shape.map_or_else(|| "?".into(), |s| tuple(&s));
    let shape = tuple(shape);
    Err(Error::Kernel {
        context: format!("the 'view' hook of backend '{backend}'"),
        message: format!(
            "it returned a payload of shape {got} and dtype {} for a view of shape {shape} and dtype {}; a view's payload must have the view's shape and its base's dtype, and the kernel did not run",
            show(&got_dtype),
            show(&want_dtype),
        ),
    })
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
        op: Option<PyRef<'_, super::ops::PyOpOverload>>,
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
                    arr = arr.call_method1("astype", (to,))?;
                }
                let payload = {
                    let _serial = Serial::enter(py, lock.as_ref())?;
                    from_cpu.bind(py).call1((&arr,))?
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
            None => Tensor::host(device, super::tensor::numpy_to_host(&arr).py(py)?),
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
        op: Option<PyRef<'_, super::ops::PyOpOverload>>,
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
        if self.registration(py).is_none() {
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

/// Bumped by every `register_backend`: what Python caches of the backends (the dtypes of a
/// device, `boxfall.array_api._dtypes`) is good while it is unchanged.
static REGISTRATIONS: AtomicU64 = AtomicU64::new(0);

/// A number that changes whenever a backend is registered or replaced.
#[pyfunction]
pub fn backends_version() -> u64 {
    REGISTRATIONS.load(Ordering::Acquire)
}

/// Where `op`, a creation operator given host data, puts it when the user asks for `device`
/// and the device's backend serves `op` with `bf.cpu_fallback`: the backend and the device
/// index, for `Backend.tensor` to put the data there as a transfer the user asked for
/// (`bf.metrics.transfers()`), rather than a fallback no kernel could avoid. None for
/// Native, the CPU, a device whose backend has a kernel of its own for `op` or another
/// fallback, and anything that names no backend registered from Python.
#[pyfunction]
pub fn host_data_target(
    op: PyRef<'_, super::ops::PyOpOverload>,
    device: &str,
) -> Option<(PyBackend, u16)> {
    let (name, index) = match device.split_once(':') {
        Some((n, i)) => (n, i.parse::<u16>().ok()?),
        None => (device, 0),
    };
    let key = DispatchKey::from_name(name).ok()?;
    if !is_python_backend(key) {
        return None;
    }
    op.handle.served_by_cpu_fallback(key).then(|| {
        (
            PyBackend {
                key,
                name: key.name(),
            },
            index,
        )
    })
}

/// Registers a Python backend and its dispatch key; later backends rank above earlier ones.
/// With `replace`, a backend registered earlier under `name` gets the new hooks and keeps its
/// key (a notebook cell run twice): its tensors, kernels and fallbacks stay, and every
/// `Backend` object of it uses the new hooks.
///
/// `dtypes` names the dtypes the device holds (None: every dtype of the array API standard):
/// a result of another dtype is a `DTypeError` before it moves. With `thread_safe=False` the
/// backend's hooks, and the kernels and fallbacks registered for it from then on, run one at a
/// time (under one re-entrant lock of the backend). `lazy` (residency, `crate::resident`):
/// host copies kept and the fallback's results left on the host until the device needs them;
/// `lazy=False` moves every read and every result at once. `view(payload, shape, strides,
/// offset)` (optional) makes a view of a payload on the device (strides and offset in elements
/// of the payload's values in C order): the payload, sharing the base's memory, or
/// `(payload, False)` for a copy (a kernel's write of it is written into the base after the
/// kernel), or None where it cannot: a kernel of the backend then reads a view with nothing
/// moved. `copy_from_cpu` may return a new payload (a device whose memory is immutable), which
/// takes the tensor's place as a write of it; None: it wrote the payload where it is.
/// `view_write(base, values, shape, strides, offset)` (optional) writes the values of a view
/// that a kernel of the backend wrote as a copy (made by `view` as `(payload, False)`, or by
/// `from_cpu` where `view` made none) into its base on the device, and returns the base's new
/// payload (None: written where it is); without it boxfall writes them through the host.
///
/// `dtypes` may also name extension dtypes NumPy knows (`ml_dtypes.bfloat16`): tensors of them
/// work through the CPU fallback (its kernels get NumPy arrays of that dtype). With `narrow`
/// (JAX's rule without 64-bit types), a 64-bit dtype the device lacks, asked for or made by a
/// CPU kernel, becomes the 32-bit one of its kind (int64 to int32, uint64 to uint32, float64
/// to float32, complex128 to complex64), with a `bf.NarrowingWarning` once per operator and a
/// count in `bf.metrics.op_stats(op)["narrowed"]`; without it such a request is a `DTypeError`.
/// Either way, the results whose dtype the array API standard lets the library choose
/// (indices, counts: operators tagged `default_dtypes`) come in the device's default dtype.
#[pyfunction]
#[pyo3(signature = (name, *, to_cpu, from_cpu, copy_from_cpu, to_cpu_many=None, shares_memory=false, replace=false, dtypes=None, thread_safe=true, lazy=true, view=None, view_write=None, narrow=false))]
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
    dtypes: Option<Bound<'_, PyAny>>,
    thread_safe: bool,
    lazy: bool,
    view: Option<Py<PyAny>>,
    view_write: Option<Py<PyAny>>,
    narrow: bool,
) -> PyResult<PyBackend> {
    // Checked before anything is registered, so a refused backend leaves its name free.
    let given = [
        ("to_cpu", Some(&to_cpu)),
        ("from_cpu", Some(&from_cpu)),
        ("copy_from_cpu", Some(&copy_from_cpu)),
        ("to_cpu_many", to_cpu_many.as_ref()),
        ("view", view.as_ref()),
        ("view_write", view_write.as_ref()),
    ];
    for (hook, f) in given {
        if let Some(f) = f.map(|f| f.bind(py)).filter(|f| !f.is_callable()) {
            let type_name = f.get_type().name()?;
            return Err(PyTypeError::new_err(format!(
                "the '{hook}' hook of backend '{name}' must be callable, not {type_name}; the backend was not registered"
            )));
        }
    }
    let held = match &dtypes {
        Some(d) => Held::of_names(py, name, d)?,
        None => Held::all(),
    };
    let lock = if thread_safe {
        None
    } else {
        Some(py.import("threading")?.getattr("RLock")?.call0()?.unbind())
    };
    let hooks = PyBackendHooks {
        name: name.to_string(),
        to_cpu,
        from_cpu: from_cpu.clone_ref(py),
        copy_from_cpu,
        to_cpu_many,
        view,
        view_write,
        shares_memory,
        held: held.clone(),
        narrow,
        lock: lock.as_ref().map(|l| l.clone_ref(py)),
        lazy,
    };
    let key = if replace {
        replace_core(name, Arc::new(hooks)).py(py)?
    } else {
        register_core(name, Arc::new(hooks)).py(py)?
    };
    python_backends()[key.index()] = Some(Registration {
        from_cpu,
        held,
        narrow,
        lock,
    });
    PYTHON_KEYS.fetch_or(1 << key.index(), Ordering::Relaxed);
    REGISTRATIONS.fetch_add(1, Ordering::Release);
    Ok(PyBackend {
        key,
        name: name.to_string(),
    })
}
