//! Python objects as tensor payloads (a backend's device payload, a NumPy array on CPU), and
//! a CPU tensor as the NumPy array Python sees.

use std::any::Any;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

use super::numpy_in::numpy_to_host;
use super::numpy_out::host_to_numpy;
use crate::error::{Error, Result};
use crate::python::errors::from_pyerr;
use crate::tensor::{HostArray, Payload, Tensor, TensorData, TensorMeta};

/// A Python object as a tensor payload: a backend's device payload, or a NumPy array on CPU.
///
/// The dtype and shape of a payload that is no NumPy array are read from Python once, on first
/// use, and kept: a backend's payload is a value whose dtype and shape do not change over its
/// life (a JAX array is immutable; a kernel that writes an argument in place keeps both, and
/// one that changes them returns a new payload, which a tensor takes with `set_data`). Graph
/// mode reads them for every argument of every operator it records, and two Python attribute
/// reads there cost more than the rest of the recording. A NumPy array's are read from its C
/// struct each time (cheap, and `a.shape = ...` reshapes an array in place).
pub struct PyPayload(pub Py<PyAny>, Option<usize>, OnceLock<TensorMeta>);

impl PyPayload {
    /// The payload of `obj`; a plain ndarray's byte count is read now, once.
    pub fn new(obj: &Bound<'_, PyAny>) -> PyPayload {
        let fixed = obj
            .cast_exact::<PyUntypedArray>()
            .ok()
            .map(|a| a.len() * a.dtype().itemsize());
        PyPayload(obj.clone().unbind(), fixed, OnceLock::new())
    }
}

impl Payload for PyPayload {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn fixed_nbytes(&self) -> Option<usize> {
        self.1
    }

    fn nbytes(&self) -> usize {
        if let Some(n) = self.1 {
            return n;
        }
        Python::attach(|py| {
            let o = self.0.bind(py);
            // A plain ndarray's `nbytes` is its size times its item size.
            if o.is_exact_instance_of::<PyUntypedArray>() {
                if let Ok(a) = o.cast::<PyUntypedArray>() {
                    return a.len() * a.dtype().itemsize();
                }
            }
            o.getattr("nbytes")
                .and_then(|n| n.extract::<usize>())
                .unwrap_or(0)
        })
    }

    fn to_host(&self) -> Result<HostArray> {
        Python::attach(|py| numpy_to_host(self.0.bind(py)))
    }

    fn meta(&self) -> Option<TensorMeta> {
        // Kept only for a payload that is no NumPy array (see the type's documentation).
        if let Some(m) = self.2.get() {
            return Some(m.clone());
        }
        Python::attach(|py| {
            let o = self.0.bind(py);
            if let Ok(a) = o.cast::<PyUntypedArray>() {
                return Some(TensorMeta {
                    dtype: dtype_name(a.dtype().as_any())?,
                    shape: a.shape().to_vec(),
                });
            }
            let meta = TensorMeta {
                dtype: dtype_name(&o.getattr(pyo3::intern!(py, "dtype")).ok()?)?,
                shape: o.getattr(pyo3::intern!(py, "shape")).ok()?.extract().ok()?,
            };
            Some(self.2.get_or_init(|| meta).clone())
        })
    }

    fn duplicate(&self) -> Option<Result<Arc<dyn Payload>>> {
        Python::attach(|py| {
            let a = self.0.bind(py).cast::<PyUntypedArray>().ok()?;
            let copy = a.call_method0("copy").map_err(from_pyerr);
            Some(copy.map(|c| Arc::new(PyPayload::new(&c)) as Arc<dyn Payload>))
        })
    }

    fn assign(&self, src: &Tensor) -> Option<Result<()>> {
        Python::attach(|py| {
            let dst = self.0.bind(py).cast::<PyUntypedArray>().ok()?;
            let write = || -> PyResult<()> {
                let src = cpu_tensor_to_numpy(py, src, false)?;
                py.import("numpy")?.getattr("copyto")?.call1((dst, src))?;
                Ok(())
            };
            Some(write().map_err(from_pyerr))
        })
    }

    fn describe(&self) -> String {
        Python::attach(|py| {
            let o = self.0.bind(py);
            let dtype = o
                .getattr("dtype")
                .map(|d| d.to_string())
                .unwrap_or_else(|_| "?".into());
            let shape = o
                .getattr("shape")
                .and_then(|s| s.extract::<Vec<usize>>())
                .map(|s| format!("{s:?}"))
                .unwrap_or_else(|_| "[?]".into());
            format!("{dtype}{shape}")
        })
    }
}

/// The name of a dtype object (`"float32"`): a NumPy dtype of the standard's read from its
/// kind and item size, without `str(dtype)`, which NumPy computes in Python (several
/// microseconds a call, and graph mode reads every argument's dtype when it records); any
/// other (an extension dtype such as bfloat16, a non-native byte order) by `str`.
fn dtype_name(d: &Bound<'_, PyAny>) -> Option<Cow<'static, str>> {
    if let Ok(descr) = d.cast::<PyArrayDescr>() {
        if descr.is_native_byteorder() != Some(false) {
            let name = match (descr.kind(), descr.itemsize()) {
                (b'b', 1) => Some("bool"),
                (b'i', 1) => Some("int8"),
                (b'i', 2) => Some("int16"),
                (b'i', 4) => Some("int32"),
                (b'i', 8) => Some("int64"),
                (b'u', 1) => Some("uint8"),
                (b'u', 2) => Some("uint16"),
                (b'u', 4) => Some("uint32"),
                (b'u', 8) => Some("uint64"),
                (b'f', 2) => Some("float16"),
                (b'f', 4) => Some("float32"),
                (b'f', 8) => Some("float64"),
                (b'c', 8) => Some("complex64"),
                (b'c', 16) => Some("complex128"),
                _ => None,
            };
            if let Some(name) = name {
                return Some(Cow::Borrowed(name));
            }
        }
    }
    d.str()
        .ok()
        .map(|s| crate::tensor::dtype_name(&s.to_string_lossy()))
}

/// The Python object a tensor's payload is, if it is one.
pub fn payload_object<'py>(py: Python<'py>, t: &Tensor) -> Option<Bound<'py, PyAny>> {
    data_object(py, &t.data())
}

/// The Python object a tensor's data is, if it is a Python payload.
pub fn data_object<'py>(py: Python<'py>, data: &TensorData) -> Option<Bound<'py, PyAny>> {
    let TensorData::Foreign(p) = data else {
        return None;
    };
    if let Some(p) = p.as_any().downcast_ref::<PyPayload>() {
        return Some(p.0.bind(py).clone());
    }
    // A pending tensor (graph mode) reached past the recorder (in `bf.eager()`, by a hook):
    // computed now. A failure reads as no payload here; the sync's error was the graph's.
    let computed = crate::graph::computed(data, "payload").ok()??;
    data_object(py, &computed)
}

/// A tensor on `device` whose payload is the Python object itself (no copy).
pub fn object_tensor(device: crate::tensor::Device, obj: &Bound<'_, PyAny>) -> Tensor {
    Tensor::foreign(device, Arc::new(PyPayload::new(obj)))
}

/// A NumPy array as a CPU tensor that holds the array object itself (no copy).
pub fn numpy_tensor(obj: &Bound<'_, PyAny>) -> Tensor {
    object_tensor(crate::tensor::Device::CPU, obj)
}

/// A CPU tensor as a NumPy array: the caller's own array, a read-only view of host memory, or
/// (for an argument the kernel writes) a writable copy.
pub fn cpu_tensor_to_numpy<'py>(
    py: Python<'py>,
    t: &Tensor,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    match t.data() {
        TensorData::Foreign(p) => p
            .as_any()
            .downcast_ref::<PyPayload>()
            .map(|p| p.0.bind(py).clone())
            .ok_or_else(|| {
                crate::python::errors::new_err(
                    py,
                    "BoxfallError",
                    format!(
                        "a CPU tensor on {} holds a payload Python cannot read",
                        t.device()
                    ),
                )
            }),
        TensorData::Host(h) => host_to_numpy(py, h, writable),
    }
}

/// A Python error from a hook as a core error.
pub fn hook_error(py: Python<'_>, e: PyErr, note: String) -> Error {
    from_pyerr(crate::python::errors::with_note(py, e, note))
}
