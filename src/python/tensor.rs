//! `bf.Tensor`, Python payloads, and the NumPy <-> host memory conversions.

use std::any::Any;
use std::sync::Arc;

use numpy::{
    PyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::errors::{from_pyerr, IntoPy};
use crate::backend::backend;
use crate::error::{Error, Result};
use crate::key::DispatchKey;
use crate::tensor::{HostArray, Payload, Tensor, TensorData, TensorMeta};

/// A Python object as a tensor payload: a backend's device payload, or a NumPy array on CPU.
pub struct PyPayload(pub Py<PyAny>, Option<usize>);

impl PyPayload {
    /// The payload of `obj`; a plain ndarray's byte count is read now, once.
    pub fn new(obj: &Bound<'_, PyAny>) -> PyPayload {
        let fixed = obj
            .cast_exact::<PyUntypedArray>()
            .ok()
            .map(|a| a.len() * a.dtype().itemsize());
        PyPayload(obj.clone().unbind(), fixed)
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
        Python::attach(|py| {
            let o = self.0.bind(py);
            if let Ok(a) = o.cast::<PyUntypedArray>() {
                return Some(TensorMeta {
                    dtype: a.dtype().str().ok()?.to_string(),
                    shape: a.shape().to_vec(),
                });
            }
            Some(TensorMeta {
                dtype: o.getattr("dtype").ok()?.str().ok()?.to_string(),
                shape: o.getattr("shape").ok()?.extract().ok()?,
            })
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

/// The Python object a tensor's payload is, if it is one.
pub fn payload_object<'py>(py: Python<'py>, t: &Tensor) -> Option<Bound<'py, PyAny>> {
    let p = t.payload()?;
    p.as_any()
        .downcast_ref::<PyPayload>()
        .map(|p| p.0.bind(py).clone())
}

/// A tensor on `device` whose payload is the Python object itself (no copy).
pub fn object_tensor(device: crate::tensor::Device, obj: &Bound<'_, PyAny>) -> Tensor {
    Tensor::foreign(device, Arc::new(PyPayload::new(obj)))
}

/// A NumPy array as a CPU tensor that holds the array object itself (no copy).
pub fn numpy_tensor(obj: &Bound<'_, PyAny>) -> Tensor {
    object_tensor(crate::tensor::Device::CPU, obj)
}

fn unsupported(dtype: &str) -> Error {
    Error::Fallback(format!(
        "NumPy dtype {dtype} is not supported in Rust host memory (float32, float64, int32, int64, bool are)"
    ))
}

/// A C-ordered array of `shape` over `v`. Arrays of up to four dimensions are built with a
/// fixed dimension first: ndarray's dynamic-dimension constructor spends about 40 ns on
/// strides and checks, as long as a one-element copy takes.
fn array_from_vec<T>(shape: &[usize], v: Vec<T>) -> Option<ndarray::ArrayD<T>> {
    use ndarray::Array;
    match *shape {
        [] => Array::from_shape_vec((), v).ok().map(Array::into_dyn),
        [n] if n == v.len() => Some(Array::from_vec(v).into_dyn()),
        [a, b] => Array::from_shape_vec((a, b), v).ok().map(Array::into_dyn),
        [a, b, c] => Array::from_shape_vec((a, b, c), v)
            .ok()
            .map(Array::into_dyn),
        [a, b, c, d] => Array::from_shape_vec((a, b, c, d), v)
            .ok()
            .map(Array::into_dyn),
        _ => ndarray::ArrayD::from_shape_vec(shape, v).ok(),
    }
}

/// Copies a NumPy array into Rust host memory.
pub fn numpy_to_host(obj: &Bound<'_, PyAny>) -> Result<HostArray> {
    macro_rules! try_as {
        ($t:ty) => {
            if let Ok(a) = obj.cast::<PyArrayDyn<$t>>() {
                // A contiguous array copies as one slice (no strided view to build).
                if a.is_c_contiguous() {
                    if let Ok(v) = a.to_vec() {
                        if let Some(arr) = array_from_vec(a.shape(), v) {
                            return Ok(HostArray::from(arr));
                        }
                    }
                }
                return Ok(HostArray::from(a.to_owned_array()));
            }
        };
    }
    try_as!(f64);
    try_as!(f32);
    try_as!(i64);
    try_as!(i32);
    try_as!(bool);
    let dtype = obj
        .cast::<PyUntypedArray>()
        .map(|a| a.dtype().to_string())
        .unwrap_or_else(|_| "of a non-array".into());
    Err(unsupported(&dtype))
}

/// Keeps host memory alive for as long as a NumPy array that borrows it.
#[pyclass(frozen, module = "boxfall._boxfall")]
struct HostOwner {
    _data: Arc<HostArray>,
}

/// Host memory as NumPy: a read-only array that borrows it (lent), or a writable copy.
pub fn host_to_numpy<'py>(
    py: Python<'py>,
    host: Arc<HostArray>,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if writable {
        return Ok(match &*host {
            HostArray::F32(a) => PyArray::from_array(py, a).into_any(),
            HostArray::F64(a) => PyArray::from_array(py, a).into_any(),
            HostArray::I32(a) => PyArray::from_array(py, a).into_any(),
            HostArray::I64(a) => PyArray::from_array(py, a).into_any(),
            HostArray::Bool(a) => PyArray::from_array(py, a).into_any(),
        });
    }
    // The owner takes the `Arc` itself (no second count to take and drop).
    let owner = Bound::new(py, HostOwner { _data: host })?;
    let host: &HostArray = &owner.get()._data;
    let owner = owner.clone().into_any();
    // SAFETY: the NumPy array borrows the memory of `host`'s ndarray. Its base object `owner`
    // holds an `Arc` of that same `HostArray`, so the memory lives as long as the array. A
    // `HostArray` behind an `Arc` is never written in place (a write replaces the tensor's
    // `Arc`, see tensor.rs), and the array is made read-only before anyone else sees it (by
    // clearing its WRITEABLE flag, as NumPy's own `PyArray_CLEARFLAGS` does: the array is new
    // and ours alone), so neither side can see the other write. Exercised by
    // tests/python/test_native.py (the lent-memory tests).
    unsafe {
        Ok(match host {
            HostArray::F32(a) => read_only(PyArray::borrow_from_array(a, owner)),
            HostArray::F64(a) => read_only(PyArray::borrow_from_array(a, owner)),
            HostArray::I32(a) => read_only(PyArray::borrow_from_array(a, owner)),
            HostArray::I64(a) => read_only(PyArray::borrow_from_array(a, owner)),
            HostArray::Bool(a) => read_only(PyArray::borrow_from_array(a, owner)),
        })
    }
}

/// Clears a new array's WRITEABLE flag (what `arr.setflags(write=False)` does, without the
/// Python call).
///
/// # Safety
/// `arr` must be a new array that no other code has seen yet.
unsafe fn read_only<'py, T: numpy::Element, D: numpy::ndarray::Dimension>(
    arr: Bound<'py, PyArray<T, D>>,
) -> Bound<'py, PyAny> {
    // SAFETY: `as_array_ptr` points at the live array object `arr` holds; the caller
    // guarantees no one else uses it while its flags change.
    unsafe {
        (*arr.as_array_ptr()).fields.flags &= !numpy::npyffi::flags::NPY_ARRAY_WRITEABLE;
    }
    arr.into_any()
}

/// A read-only view of `arr`: a new array object sharing its memory, which a kernel cannot
/// write through (NumPy raises "assignment destination is read-only").
pub fn read_only_view<'py>(arr: &Bound<'py, PyUntypedArray>) -> PyResult<Bound<'py, PyAny>> {
    let py = arr.py();
    // SAFETY: `arr` holds a live array object and the GIL is held. `PyArray_View` (NumPy's
    // `arr.view()`) with no dtype and no type returns a new reference to a new array of
    // `arr`'s type, or NULL with a Python error set, which `from_owned_ptr_or_err` takes over.
    let view = unsafe {
        let ptr = numpy::npyffi::PY_ARRAY_API.PyArray_View(
            py,
            arr.as_array_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, ptr)?
    };
    let view = view.cast_into::<PyUntypedArray>()?;
    // SAFETY: `view` is the new array made above, which only this function holds; clearing its
    // WRITEABLE flag is what `view.setflags(write=False)` does (NumPy's `PyArray_CLEARFLAGS`),
    // and a flag may always be cleared. Exercised by tests/python/test_read_only_args.py.
    unsafe {
        (*view.as_array_ptr()).fields.flags &= !numpy::npyffi::flags::NPY_ARRAY_WRITEABLE;
    }
    Ok(view.into_any())
}

/// A read-only NumPy view kept with the tensor it sees (`Tensor::host_view`), and what it
/// looked like when made: a kernel may reshape or retype the array object in place
/// (`a.shape = ...`), and such a view is not handed out again.
struct LentView {
    array: Py<PyAny>,
    data: usize,
    descr: usize,
    dims: Box<[isize]>,
    strides: Box<[isize]>,
}

impl LentView {
    fn new(array: &Bound<'_, PyAny>) -> Option<LentView> {
        let (data, descr, dims, strides) = array_fields(array)?;
        Some(LentView {
            array: array.clone().unbind(),
            data,
            descr,
            dims: dims.into(),
            strides: strides.into(),
        })
    }

    /// The view, if it is still read-only and as it was made.
    fn intact<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        let array = self.array.bind(py);
        let (data, descr, dims, strides) = array_fields(array)?;
        let same = data == self.data
            && descr == self.descr
            && dims == &*self.dims
            && strides == &*self.strides;
        same.then(|| array.clone())
    }
}

/// A read-only array's data pointer, dtype, shape and strides, as NumPy holds them (`None` for
/// a writable array or a non-array).
fn array_fields<'a>(
    array: &'a Bound<'_, PyAny>,
) -> Option<(usize, usize, &'a [isize], &'a [isize])> {
    let arr = array.cast::<PyUntypedArray>().ok()?;
    let raw = arr.as_array_ptr();
    // SAFETY: `raw` points at the live array object `array` holds (it is borrowed for 'a, with
    // the GIL held, so no other thread changes it); its `dimensions` and `strides` point at
    // `nd` values each, owned by the array, as NumPy's `PyArray_DIMS`/`PyArray_STRIDES` read them.
    // Exercised by tests/python/test_native.py (the lent-view tests).
    unsafe {
        let f = &(*raw).fields;
        if f.flags & numpy::npyffi::flags::NPY_ARRAY_WRITEABLE != 0 {
            return None;
        }
        let nd = usize::try_from(f.nd).ok()?;
        let (dims, strides) = if nd == 0 {
            (&[][..], &[][..])
        } else {
            (
                std::slice::from_raw_parts(f.dimensions, nd),
                std::slice::from_raw_parts(f.strides, nd),
            )
        };
        Some((f.data as usize, f.descr as usize, dims, strides))
    }
}

/// A CPU tensor as the NumPy array a Python kernel receives: as `cpu_tensor_to_numpy`, except
/// that a read-only view of host memory is made once per tensor and data and kept with the
/// tensor (Native lends one tensor, its loan, for its whole life; a write drops the view), so a
/// tensor lent on every call costs one view. Only kernels get kept views: a caller's `x.numpy()` is a new array each
/// time, as NumPy users expect of a method that returns a view.
pub fn kernel_array<'py>(
    py: Python<'py>,
    t: &Tensor,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if writable || !t.is_host() {
        return cpu_tensor_to_numpy(py, t, writable);
    }
    let kept = t.host_view();
    if let Some(view) = kept.as_ref().and_then(|v| v.downcast_ref::<LentView>()) {
        if let Some(array) = view.intact(py) {
            return Ok(array);
        }
    }
    let array = cpu_tensor_to_numpy(py, t, false)?;
    if let Some(view) = LentView::new(&array) {
        t.set_host_view(Arc::new(view));
    }
    Ok(array)
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
                super::errors::new_err(
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

/// A boxfall tensor on a device: `.device`, `.dtype`, `.shape`, `.payload`, `.numpy()`.
#[pyclass(name = "Tensor", module = "boxfall", frozen)]
pub struct PyTensor {
    pub inner: Tensor,
}

#[pymethods]
impl PyTensor {
    /// `"<Backend>:<index>"`, e.g. `"Accel:0"`.
    #[getter]
    fn device(&self) -> String {
        self.inner.device().to_string()
    }

    /// The backend's name.
    #[getter]
    fn backend(&self) -> String {
        self.inner.key().name()
    }

    /// The device index.
    #[getter]
    fn index(&self) -> u16 {
        self.inner.device().index
    }

    /// The backend payload (None for host memory).
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        payload_object(py, &self.inner)
    }

    /// The payload's `.dtype`, or the host memory's NumPy dtype.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.inner.data() {
            TensorData::Host(h) => numpy_dtype(py, h.dtype().name()),
            TensorData::Foreign(_) => self.attr(py, "dtype"),
        }
    }

    /// The payload's `.shape`, or the host memory's shape.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.inner.data() {
            TensorData::Host(h) => Ok(PyTuple::new(py, h.shape())?.into_any()),
            TensorData::Foreign(_) => self.attr(py, "shape"),
        }
    }

    /// The values as a NumPy array: the backend's `to_cpu(payload)`; for Native, a read-only
    /// array sharing the tensor's memory.
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.inner.key() == DispatchKey::CPU {
            return cpu_tensor_to_numpy(py, &self.inner, false);
        }
        let hooks = backend(self.inner.key()).ok_or_else(|| {
            super::errors::new_err(
                py,
                "FallbackError",
                format!("'{}' has no transfer hooks", self.inner.key()),
            )
        })?;
        let cpu = hooks.to_cpu(&self.inner, false).py(py)?;
        cpu_tensor_to_numpy(py, &cpu, false)
    }

    fn __repr__(&self) -> String {
        format!(
            "bf.Tensor(device={}, {})",
            self.inner.device(),
            self.inner.describe()
        )
    }
}

impl PyTensor {
    fn attr<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        match payload_object(py, &self.inner) {
            Some(p) => p.getattr(name),
            None => Ok(py.None().into_bound(py)),
        }
    }
}

/// `numpy.dtype(name)`.
pub fn numpy_dtype<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("numpy")?.getattr("dtype")?.call1((name,))
}

/// Wraps a core tensor for Python (a new `bf.Tensor` object).
pub fn wrap(py: Python<'_>, t: Tensor) -> PyResult<Bound<'_, PyAny>> {
    Ok(Bound::new(py, PyTensor { inner: t })?.into_any())
}

/// A Python error from a hook as a core error.
pub fn hook_error(py: Python<'_>, e: PyErr, note: String) -> Error {
    from_pyerr(super::errors::with_note(py, e, note))
}
