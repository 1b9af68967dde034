//! `bf.Tensor`'s Python methods: attributes, conversions, and the array API's operators.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use super::class::PyTensor;
use super::payload::{cpu_tensor_to_numpy, data_object, payload_object};
use crate::backend::backend;
use crate::key::DispatchKey;
use crate::python::errors::IntoPy;
use crate::tensor::{DType, Residency, TensorData};

#[pymethods]
impl PyTensor {
    /// `"<Backend>:<index>"`, e.g. `"Accel:0"`: a `str` equal to every spelling of the device
    /// (`"Native"`, `"native:0"`), one object a device (`boxfall._device.Device`).
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        device_object(py, self.inner.device())
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

    /// The backend payload (None for host memory). A result whose values are on the host
    /// only (residency) gets its payload from the backend's `from_cpu` first; a tensor whose
    /// host memory NumPy holds (`np.asarray(t)` on a lazy backend) gives a payload made of
    /// that memory now, which the tensor does not keep.
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        // A tensor whose host memory NumPy holds (`np.asarray`) stays on the host: the payload
        // is made of it now, and not kept (NumPy may write the memory at any time).
        if self.inner.is_host() {
            return Ok(None);
        }
        crate::graph::compute(&self.inner, "payload").py(py)?;
        // Made again where another thread's write left it on the host meanwhile: a kernel
        // reading its argument's payload never finds none.
        let data = crate::resident::device_data(&self.inner).py(py)?;
        Ok(data_object(py, &data))
    }

    /// Where the values are (residency): `"device"` (the payload only), `"host"` (a result
    /// kept on the host, no payload yet), `"both"` (the payload and a current host copy), or
    /// None for a tensor of host memory (Native).
    #[getter]
    fn residency(&self) -> Option<&'static str> {
        match self.inner.residency() {
            Residency::Memory => None,
            Residency::Device => Some("device"),
            Residency::Host => Some("host"),
            Residency::Both => Some("both"),
        }
    }

    /// Puts a result kept on the host (residency) on its device now, through the backend's
    /// `from_cpu`, and returns the tensor; nothing for a tensor that has its payload, or whose
    /// host memory NumPy holds (`np.asarray(t)`: its payload is made for each kernel).
    fn materialize(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        // A tensor whose host memory NumPy holds stays on the host (its payload is made for
        // each kernel).
        crate::graph::compute(&slf.get().inner, "materialize").py(slf.py())?;
        if slf.get().inner.host_exported().is_none() {
            crate::resident::materialize(&slf.get().inner).py(slf.py())?;
        }
        Ok(slf.clone().into_any().unbind())
    }

    /// The payload's `.dtype`, or the host memory's NumPy dtype.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(view) = crate::python::view_desc::view_ops(&self.inner) {
            return Ok(view.dtype(py));
        }
        match self.inner.data() {
            TensorData::Host(h) => numpy_dtype(py, h.dtype().name()),
            // A pending tensor (graph mode) knows its dtype without being computed.
            TensorData::Foreign(p) if p.as_any().is::<crate::graph::Pending>() => {
                numpy_dtype(py, &p.meta().map(|m| m.dtype).unwrap_or_default())
            }
            TensorData::Foreign(_) => self.attr(py, "dtype"),
        }
    }

    /// The shape, a tuple of ints: the host memory's, or the payload's `.shape` (any sequence
    /// of ints the payload gives, as a tuple).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        // A view knows its shape without making its values.
        if let Some(view) = crate::python::view_desc::view_ops(&self.inner) {
            return PyTuple::new(py, view.shape());
        }
        match self.inner.data() {
            TensorData::Host(h) => PyTuple::new(py, h.shape()),
            TensorData::Foreign(p) if p.as_any().is::<crate::graph::Pending>() => {
                PyTuple::new(py, p.meta().map(|m| m.shape).unwrap_or_default())
            }
            TensorData::Foreign(_) => {
                let dims: Vec<usize> = self.attr(py, "shape")?.extract()?;
                PyTuple::new(py, dims)
            }
        }
    }

    /// The number of dimensions, `len(shape)`.
    #[getter]
    fn ndim(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.shape(py)?.len())
    }

    /// The number of elements, the product of `shape`.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<usize> {
        let shape: Vec<usize> = self.shape(py)?.extract()?;
        Ok(shape.iter().product())
    }

    /// The values as a NumPy array: the backend's `to_cpu(payload)`; for Native, a read-only
    /// array sharing the tensor's memory; for a tensor with a current host copy (residency),
    /// that copy, read-only, and nothing crosses.
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.inner.key() == DispatchKey::CPU {
            return cpu_tensor_to_numpy(py, &self.inner, false);
        }
        crate::graph::compute(&self.inner, "numpy").py(py)?;
        let hooks = backend(self.inner.key()).ok_or_else(|| {
            crate::python::errors::new_err(
                py,
                "FallbackError",
                format!("'{}' has no transfer hooks", self.inner.key()),
            )
        })?;
        // Residency: a current host copy (read-only, as every host copy is) is read, and
        // nothing crosses; without one, the array is `to_cpu`'s, as the hook gave it.
        if let Some(cpu) = self.inner.host_copy() {
            return cpu_tensor_to_numpy(py, &cpu, false);
        }
        let cpu = hooks.to_cpu(&self.inner, false).py(py)?;
        // Native lends its host memory: nothing crosses.
        if self.inner.key() != DispatchKey::NATIVE {
            crate::metrics::record_user_transfer(
                self.inner.key(),
                crate::metrics::Direction::ToHost,
                cpu.nbytes() as u64,
            );
        }
        cpu_tensor_to_numpy(py, &cpu, false)
    }

    // The array object of the array API standard (README, "The array API standard"): each
    // method is a call of the function of the same name in `boxfall.array_api._array_methods`,
    // which runs the method's operator through the dispatcher.

    /// `array_api::add` (`x + y`); the other operators likewise call their functions.
    fn __add__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__add__", other)
    }
    /// The reflected operator of `__add__`.
    fn __radd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__radd__", other)
    }
    /// The operator of `__sub__` (`boxfall.array_api._array_methods`).
    fn __sub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__sub__", other)
    }
    /// The reflected operator of `__sub__`.
    fn __rsub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rsub__", other)
    }
    /// The operator of `__mul__` (`boxfall.array_api._array_methods`).
    fn __mul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__mul__", other)
    }
    /// The reflected operator of `__mul__`.
    fn __rmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rmul__", other)
    }
    /// The operator of `__truediv__` (`boxfall.array_api._array_methods`).
    fn __truediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__truediv__", other)
    }
    /// The reflected operator of `__truediv__`.
    fn __rtruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rtruediv__", other)
    }
    /// The operator of `__floordiv__` (`boxfall.array_api._array_methods`).
    fn __floordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__floordiv__", other)
    }
    /// The reflected operator of `__floordiv__`.
    fn __rfloordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rfloordiv__", other)
    }
    /// The operator of `__mod__` (`boxfall.array_api._array_methods`).
    fn __mod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__mod__", other)
    }
    /// The reflected operator of `__mod__`.
    fn __rmod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rmod__", other)
    }
    /// The operator of `__and__` (`boxfall.array_api._array_methods`).
    fn __and__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__and__", other)
    }
    /// The reflected operator of `__and__`.
    fn __rand__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rand__", other)
    }
    /// The operator of `__or__` (`boxfall.array_api._array_methods`).
    fn __or__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__or__", other)
    }
    /// The reflected operator of `__or__`.
    fn __ror__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__ror__", other)
    }
    /// The operator of `__xor__` (`boxfall.array_api._array_methods`).
    fn __xor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__xor__", other)
    }
    /// The reflected operator of `__xor__`.
    fn __rxor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rxor__", other)
    }
    /// The operator of `__lshift__` (`boxfall.array_api._array_methods`).
    fn __lshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__lshift__", other)
    }
    /// The reflected operator of `__lshift__`.
    fn __rlshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rlshift__", other)
    }
    /// The operator of `__rshift__` (`boxfall.array_api._array_methods`).
    fn __rshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rshift__", other)
    }
    /// The reflected operator of `__rshift__`.
    fn __rrshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rrshift__", other)
    }
    /// The operator of `__matmul__` (`boxfall.array_api._array_methods`).
    fn __matmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__matmul__", other)
    }
    /// The reflected operator of `__matmul__`.
    fn __rmatmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rmatmul__", other)
    }
    /// `array_api::pow` (`x ** y`; a modulo is refused).
    fn __pow__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        no_modulo(modulo)?;
        array_method(slf, "__pow__", other)
    }
    /// The reflected `x ** y`.
    fn __rpow__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        no_modulo(modulo)?;
        array_method(slf, "__rpow__", other)
    }
    /// The in-place `__add__`: `array_api::<name>_`, written into this tensor.
    fn __iadd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__iadd__", other).map(drop)
    }
    /// The in-place `__sub__`: `array_api::<name>_`, written into this tensor.
    fn __isub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__isub__", other).map(drop)
    }
    /// The in-place `__mul__`: `array_api::<name>_`, written into this tensor.
    fn __imul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__imul__", other).map(drop)
    }
    /// The in-place `__truediv__`: `array_api::<name>_`, written into this tensor.
    fn __itruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__itruediv__", other).map(drop)
    }
    /// The in-place `__floordiv__`: `array_api::<name>_`, written into this tensor.
    fn __ifloordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__ifloordiv__", other).map(drop)
    }
    /// The in-place `__mod__`: `array_api::<name>_`, written into this tensor.
    fn __imod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__imod__", other).map(drop)
    }
    /// The in-place `__and__`: `array_api::<name>_`, written into this tensor.
    fn __iand__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__iand__", other).map(drop)
    }
    /// The in-place `__or__`: `array_api::<name>_`, written into this tensor.
    fn __ior__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__ior__", other).map(drop)
    }
    /// The in-place `__xor__`: `array_api::<name>_`, written into this tensor.
    fn __ixor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__ixor__", other).map(drop)
    }
    /// The in-place `__lshift__`: `array_api::<name>_`, written into this tensor.
    fn __ilshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__ilshift__", other).map(drop)
    }
    /// The in-place `__rshift__`: `array_api::<name>_`, written into this tensor.
    fn __irshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__irshift__", other).map(drop)
    }
    /// `x **= y`: `array_api::pow_`, written into this tensor (Python passes no modulo).
    fn __ipow__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        array_method(slf, "__ipow__", other).map(drop)
    }
    /// The comparison `__eq__`, an array of bools.
    fn __eq__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__eq__", other)
    }
    /// The comparison `__ne__`, an array of bools.
    fn __ne__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__ne__", other)
    }
    /// The comparison `__lt__`, an array of bools.
    fn __lt__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__lt__", other)
    }
    /// The comparison `__le__`, an array of bools.
    fn __le__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__le__", other)
    }
    /// The comparison `__gt__`, an array of bools.
    fn __gt__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__gt__", other)
    }
    /// The comparison `__ge__`, an array of bools.
    fn __ge__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__ge__", other)
    }
    /// Identity, as `object.__hash__`: a tensor stays usable as a dict key although `==` makes
    /// an array.
    fn __hash__(slf: &Bound<'_, Self>) -> isize {
        slf.as_ptr() as isize
    }
    /// The unary `__neg__`.
    fn __neg__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__neg__")
    }
    /// The unary `__pos__`.
    fn __pos__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__pos__")
    }
    /// The unary `__invert__`.
    fn __invert__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__invert__")
    }
    /// The unary `__abs__`.
    fn __abs__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__abs__")
    }
    /// A 0-d tensor as a Python `bool` (through a host copy).
    fn __bool__(slf: &Bound<'_, Self>) -> PyResult<bool> {
        array_call(slf, "__bool__")?.extract(slf.py())
    }
    /// A 0-d tensor as a Python `int` (through a host copy).
    fn __int__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__int__")
    }
    /// A 0-d tensor as a Python `float` (through a host copy).
    fn __float__(slf: &Bound<'_, Self>) -> PyResult<f64> {
        array_call(slf, "__float__")?.extract(slf.py())
    }
    /// A 0-d tensor as a Python `index` (through a host copy).
    fn __index__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__index__")
    }
    /// A 0-d tensor as a Python `complex` (through a host copy).
    fn __complex__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__complex__")
    }

    /// The values as a NumPy array (NumPy's `__array__` protocol, `np.asarray(t)`). A tensor
    /// of host memory (Native), or a view of one, gives an array over that memory itself,
    /// writable (unless the view is read-only), whose writes are the tensor's and which sees
    /// the tensor's later writes, unless `copy=True` or another `dtype` asks for a copy. A
    /// tensor of a lazy backend (or a view of one) does the same once its values move to host
    /// memory of its own, which becomes authoritative (its device payload is dropped, and made
    /// again from that memory for each of the backend's kernels). Any other tensor gives a
    /// host copy (`copy=False`: `ValueError`).
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__(
        slf: &Bound<'_, Self>,
        dtype: Option<&Bound<'_, PyAny>>,
        copy: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        crate::graph::compute(&slf.get().inner, "numpy").py(py)?;
        let copies = copy.map(|c| c.is_truthy()).transpose()?.unwrap_or(false);
        let same_dtype = match dtype {
            None => true,
            Some(d) => py
                .import("numpy")?
                .getattr("dtype")?
                .call1((d,))?
                .eq(slf.getattr("dtype")?)?,
        };
        if !copies && same_dtype {
            if let Some(a) = crate::python::numpy_memory::shared_array(py, &slf.get().inner, true)?
            {
                return Ok(a.unbind());
            }
        }
        array_module(py)?
            .getattr("__array__")?
            .call1((slf, dtype, copy))
            .map(Bound::unbind)
    }

    /// NumPy's ufunc given tensors (`np.sqrt(t)`, `ndarray + t`): NumPy's values, the arrays
    /// on the tensors' device, each ufunc (method) an operator of the namespace `numpy`.
    #[pyo3(signature = (ufunc, method, *inputs, **kwargs))]
    fn __array_ufunc__(
        slf: &Bound<'_, Self>,
        ufunc: &Bound<'_, PyAny>,
        method: &Bound<'_, PyAny>,
        inputs: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let head = [slf.as_any().clone(), ufunc.clone(), method.clone()];
        let all: Vec<_> = head.into_iter().chain(inputs.iter()).collect();
        let args = PyTuple::new(slf.py(), all)?;
        array_module(slf.py())?
            .getattr("__array_ufunc__")?
            .call(args, kwargs)
            .map(Bound::unbind)
    }

    /// NumPy's function given tensors (`np.concatenate([t, u])`): NumPy's values, the arrays
    /// on the tensors' device, each function an operator of the namespace `numpy`.
    fn __array_function__(
        slf: &Bound<'_, Self>,
        func: &Bound<'_, PyAny>,
        types: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        kwargs: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        array_module(slf.py())?
            .getattr("__array_function__")?
            .call1((slf, func, types, args, kwargs))
            .map(Bound::unbind)
    }

    /// The rows, `x[0]`, `x[1]`, ... (a 0-d tensor is no iterable).
    fn __iter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__iter__")
    }

    /// `shape[0]`, as NumPy's `len` (a 0-d tensor has none: `TypeError`).
    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        array_call(slf, "__len__")?.extract(slf.py())
    }

    /// `format(x, spec)`: a 0-d tensor formats as its Python scalar (`f"{x:.3f}"`), as NumPy's
    /// 0-d arrays do; any other tensor only with an empty spec.
    fn __format__(slf: &Bound<'_, Self>, spec: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__format__", spec)
    }

    /// Pickling (and `copy.deepcopy`): the values through a host copy and the device, made
    /// again on that device when unpickled.
    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__reduce__")
    }

    /// `boxfall.array_api`, the namespace of the array API standard.
    #[pyo3(signature = (*, api_version=None))]
    fn __array_namespace__(
        slf: &Bound<'_, Self>,
        api_version: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let kwargs = pyo3::types::PyDict::new(slf.py());
        kwargs.set_item("api_version", api_version)?;
        array_module(slf.py())?
            .getattr("__array_namespace__")?
            .call((slf,), Some(&kwargs))
            .map(Bound::unbind)
    }

    /// The tensor on `device`: itself if it is there, else a copy (`"cpu"`: a NumPy array).
    #[pyo3(signature = (device, /, *, stream=None))]
    fn to_device(
        slf: &Bound<'_, Self>,
        device: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let kwargs = pyo3::types::PyDict::new(slf.py());
        kwargs.set_item("stream", stream)?;
        array_module(slf.py())?
            .getattr("to_device")?
            .call((slf, device), Some(&kwargs))
            .map(Bound::unbind)
    }

    /// A DLPack capsule of a host copy (the array API standard's `__dlpack__`): the device has
    /// no memory DLPack can name, so the capsule is always on the CPU.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<&Bound<'_, PyAny>>,
        copy: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let kwargs = pyo3::types::PyDict::new(slf.py());
        kwargs.set_item("stream", stream)?;
        kwargs.set_item("max_version", max_version)?;
        kwargs.set_item("dl_device", dl_device)?;
        kwargs.set_item("copy", copy)?;
        array_module(slf.py())?
            .getattr("__dlpack__")?
            .call((slf,), Some(&kwargs))
            .map(Bound::unbind)
    }

    /// `(device type, device id)` of the capsule `__dlpack__` exports: `(1, 0)`, kDLCPU.
    fn __dlpack_device__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__dlpack_device__")
    }

    /// The transpose of a 2-d tensor (`array_api::permute_dims`).
    #[getter(T)]
    fn transpose(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "T")
    }

    /// The last two axes swapped (`array_api::matrix_transpose`).
    #[getter(mT)]
    fn matrix_transpose(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "mT")
    }

    /// `x[key]`: `array_api::getitem`, a new tensor (the array API standard's indexing).
    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__getitem__", key)
    }

    /// `x[key] = value`: `array_api::setitem`, written into this tensor.
    fn __setitem__(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        // The name interned once: each write otherwise made a new str to look it up.
        array_module(slf.py())?
            .getattr(pyo3::intern!(slf.py(), "__setitem__"))?
            .call1((slf, key, value))
            .map(drop)
    }

    /// The values, dtype and device, read through a host copy.
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__repr__")
    }
}

impl PyTensor {
    fn attr<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        // A host-only tensor answers from its host values (the payload will have the same
        // shape and dtype), without being put on the device.
        if let Some(cpu) = self.inner.host_only_values() {
            return cpu_tensor_to_numpy(py, &cpu, false)?.getattr(name);
        }
        match payload_object(py, &self.inner) {
            Some(p) => p.getattr(name),
            None => Ok(py.None().into_bound(py)),
        }
    }
}

/// The `boxfall._device.Device` of each device asked for so far: a handful, so a short list
/// (a tensor's `.device` makes no new object).
static DEVICES: std::sync::Mutex<Vec<(crate::tensor::Device, Py<PyAny>)>> =
    std::sync::Mutex::new(Vec::new());

/// `t.device` of a tensor on `device`.
fn device_object(py: Python<'_>, device: crate::tensor::Device) -> PyResult<Py<PyAny>> {
    {
        let known = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, obj)) = known.iter().find(|(d, _)| *d == device) {
            return Ok(obj.clone_ref(py));
        }
    }
    // Made without the lock held: the class is Python code.
    let obj = py
        .import("boxfall._device")?
        .getattr("Device")?
        .call1((device.to_string(),))?
        .unbind();
    let mut known = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    known.push((device, obj.clone_ref(py)));
    Ok(obj)
}

/// `boxfall.array_api._array_methods`, imported once.
fn array_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || {
            py.import("boxfall.array_api._array_methods")
                .map(Bound::unbind)
        })
        .map(|m| m.bind(py))
}

/// `_array_methods.<name>(slf)`.
fn array_call(slf: &Bound<'_, PyTensor>, name: &str) -> PyResult<Py<PyAny>> {
    array_module(slf.py())?
        .getattr(name)?
        .call1((slf,))
        .map(Bound::unbind)
}

/// `_array_methods.<name>(slf, other)`: a binary operator method (its operator called
/// directly, where the operand's type alone decides it: `array_ops`).
fn array_method(
    slf: &Bound<'_, PyTensor>,
    name: &str,
    other: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    if let Some(r) = crate::python::array_ops::binary(slf, name, other) {
        return r;
    }
    array_module(slf.py())?
        .getattr(name)?
        .call1((slf, other))
        .map(Bound::unbind)
}

/// `pow(x, y, z)`: the standard has no modular power.
fn no_modulo(modulo: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    match modulo {
        Some(m) if !m.is_none() => Err(pyo3::exceptions::PyTypeError::new_err(
            "pow() with a modulo is not defined for arrays",
        )),
        _ => Ok(()),
    }
}

/// `numpy.dtype(name)`, the library's dtypes' made once: `np.dtype` is a Python call of most
/// of a microsecond, and `x.dtype` is read at most array API calls (every view made, every
/// `astype(y, x.dtype)`). NumPy's builtin dtypes are singletons, so the objects are the same.
pub fn numpy_dtype<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static MADE: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();
    fn make<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        py.import("numpy")?.getattr("dtype")?.call1((name,))
    }
    let Some(i) = DType::ALL.iter().position(|d| d.name() == name) else {
        return make(py, name);
    };
    let made = MADE.get_or_try_init(py, || {
        DType::ALL
            .iter()
            .map(|d| make(py, d.name()).map(Bound::unbind))
            .collect::<PyResult<Vec<_>>>()
    })?;
    match made.get(i) {
        Some(d) => Ok(d.bind(py).clone()),
        None => make(py, name),
    }
}
