//! Views of `bf.Tensor`s (`Tensor::view_of`): basic indexing and the reshaping functions of
//! `boxfall.array_api` give tensors that see their base's values on every backend. A view is
//! its base and a chain of NumPy steps (`x[key]`, `reshape`, `permute_dims`...) that
//! `boxfall.array_api._views` applies to the base's host copy: to make the view's values (its
//! own slot, made again after the base is written), and to write through it (a copy of the
//! base's values, written through the steps, then written into the base by the backend's hook).

use std::any::Any;
use std::sync::Arc;

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use super::errors::{from_pyerr, IntoPy};
use super::tensor::{as_tensor, cpu_tensor_to_numpy, numpy_tensor, plain_numpy_to_cpu, wrap};
use super::view_desc::{view_ops, PyViewOps};
use crate::backend::backend;
use crate::error::{Error, Result};
use crate::key::DispatchKey;
use crate::strided::Strided;
use crate::tensor::{Device, DeviceView, Tensor, TensorData, ViewLayout, ViewOps, ViewWrite};

/// `boxfall.array_api._views`, imported once.
fn views(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || {
            py.import("boxfall.array_api._views").map(Bound::unbind)
        })
        .map(|m| m.bind(py))
}

/// `t`'s values as a read-only NumPy array: a CPU tensor's own, a device tensor's through its
/// backend's `to_cpu` (Native lends its memory).
fn host_values<'py>(py: Python<'py>, t: &Tensor) -> Result<Bound<'py, PyAny>> {
    if t.key() == DispatchKey::CPU {
        return cpu_tensor_to_numpy(py, t, false).map_err(from_pyerr);
    }
    // Residency: the base's host copy where current (views share it).
    let (cpu, _) = crate::resident::read(hooks(t.key())?, t)?;
    cpu_tensor_to_numpy(py, &cpu, false).map_err(from_pyerr)
}

fn hooks(key: DispatchKey) -> Result<&'static dyn crate::backend::Backend> {
    backend(key).ok_or_else(|| {
        Error::Fallback(format!(
            "a view on '{key}' needs the backend's transfer hooks (register_backend)"
        ))
    })
}

/// A NumPy array as a CPU tensor: in host memory where it holds a dtype host memory holds,
/// else the array itself.
fn cpu_tensor(arr: &Bound<'_, PyAny>) -> Tensor {
    arr.cast::<PyUntypedArray>()
        .ok()
        .filter(|_| arr.is_exact_instance_of::<PyUntypedArray>())
        .and_then(|a| plain_numpy_to_cpu(a).ok())
        .unwrap_or_else(|| numpy_tensor(arr))
}

impl ViewOps for PyViewOps {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn materialize(&self, base: &Tensor, device: Device) -> Result<TensorData> {
        if let Some(host) = base.host_array() {
            if let Some(values) = self.place.read(&host, &self.shape) {
                return Ok(TensorData::Host(Arc::new(values)));
            }
        }
        Python::attach(|py| {
            let values = host_values(py, base)?;
            let hooks = match device.key {
                DispatchKey::CPU => None,
                key => Some(hooks(key)?),
            };
            if hooks.is_some_and(|h| h.lazy()) {
                // The view's values stay a read-only NumPy view of the base's host copy (which
                // nobody writes where it is but NumPy, through exported memory, whose views
                // are made again at every read): no copy, and a transposed view reaches the
                // CPU kernel as NumPy's own (matmul then reads it in place).
                let out = views(py)
                    .and_then(|m| m.getattr("view_of_host"))
                    .and_then(|f| f.call1((values, self.chain.bind(py))))
                    .map_err(from_pyerr)?;
                self.check_shape(&out)?;
                return Ok(Tensor::host_only(numpy_tensor(&out), device).data());
            }
            let out = views(py)
                .and_then(|m| m.getattr("materialize"))
                .and_then(|f| f.call1((values, self.chain.bind(py))))
                .map_err(from_pyerr)?;
            self.check_shape(&out)?;
            let cpu = cpu_tensor(&out);
            match hooks {
                None => Ok(cpu.data()),
                Some(hooks) => Ok(hooks.from_cpu_owned(cpu, device)?.data()),
            }
        })
    }

    fn on_device(&self, base: &Tensor, device: Device) -> Result<Option<DeviceView>> {
        if device.key == DispatchKey::CPU {
            return Ok(None);
        }
        let made = hooks(device.key)?
            .view(base, &self.shape, &self.place.strides, self.place.offset)
            .map_err(|e| match e {
                // Named by the operators that made the view, as a kernel's error names its
                // operator.
                Error::Kernel { context, message } => Error::Kernel {
                    context: format!("{context}, making the view {}", self.steps()),
                    message,
                },
                e => e,
            })?;
        Ok(made)
    }

    fn write_on_device(&self, base: &Tensor, values: &Tensor) -> Result<ViewWrite> {
        if base.key() == DispatchKey::CPU {
            return Ok(ViewWrite::Declined);
        }
        hooks(base.key())?
            .view_write(
                base,
                values,
                &self.shape,
                &self.place.strides,
                self.place.offset,
            )
            .map_err(|e| match e {
                Error::Kernel { context, message } => Error::Kernel {
                    context: format!("{context}, writing the view {}", self.steps()),
                    message,
                },
                e => e,
            })
    }

    fn describe(&self) -> String {
        format!("the view {}", self.steps())
    }

    fn layout(&self) -> Option<ViewLayout> {
        Some(ViewLayout {
            shape: self.shape.clone(),
            strides: self.place.strides.iter().map(|&s| s as i64).collect(),
            offset: self.place.offset as i64,
            writable: self.writable,
        })
    }

    fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> {
        if self.writable && base.is_host() && src.is_host() {
            let (host, values) = (base.to_host()?, src.to_host()?);
            if let Some(written) = self.place.write(&host, &values) {
                let cpu = Tensor::host(Device::CPU, written);
                return hooks(base.key())?.copy_from_cpu(base, &cpu);
            }
        }
        Python::attach(|py| {
            let values = host_values(py, base)?;
            let src = host_values(py, src)?;
            let out = views(py)
                .and_then(|m| m.getattr("write"))
                .and_then(|f| f.call1((values, self.chain.bind(py), src)))
                .map_err(from_pyerr)?;
            let cpu = cpu_tensor(&out);
            if base.key() == DispatchKey::CPU {
                base.set_data(cpu.data());
                return Ok(());
            }
            crate::resident::write(hooks(base.key())?, base, &cpu).map(drop)
        })
    }
}

impl PyViewOps {
    /// The values the chain made of the base must have the view's shape: a base resized
    /// since (an `out=` argument) gives the steps other values (`o[4:]` of 4 elements is
    /// empty), which are not the view's.
    fn check_shape(&self, out: &Bound<'_, PyAny>) -> Result<()> {
        let got = out
            .getattr(pyo3::intern!(out.py(), "shape"))
            .and_then(|s| s.extract::<Vec<usize>>())
            .map_err(from_pyerr)?;
        if got == self.shape {
            return Ok(());
        }
        Err(Error::Fallback(format!(
            "its steps give values of shape {got:?} from the base as it is now, not the view's {:?} (was the base resized?)",
            self.shape
        )))
    }

    /// The operators that made the view, in order (`matrix_transpose`, `getitem then
    /// reshape`).
    fn steps(&self) -> String {
        Python::attach(|py| {
            let names: Vec<String> = self
                .chain
                .bind(py)
                .iter()
                .filter_map(|step| step.get_item(0).ok()?.extract::<String>().ok())
                .collect();
            names.join(" then ")
        })
    }
}

/// A view of the `bf.Tensor` `base` (no view itself), through the steps `chain`, whose layout on
/// the base's stand-in array is `layout` (`boxfall.array_api._views`).
/// `origin` is the address of the stand-in's first element (the view's offset among the base's
/// elements is its distance from there), `writable` false for a view NumPy makes read-only.
#[pyfunction]
pub fn _make_view<'py>(
    base: &Bound<'py, PyAny>,
    chain: &Bound<'py, PyTuple>,
    layout: &Bound<'py, PyUntypedArray>,
    origin: isize,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let base = as_tensor(base)
        .ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("a view's base is a bf.Tensor"))?;
    make_view(
        base.py(),
        &base.get().inner,
        chain,
        layout,
        origin,
        writable,
    )
}

/// `_make_view` of the tensor `base` (`view_function.rs` makes views with it too).
pub(super) fn make_view<'py>(
    py: Python<'py>,
    base: &Tensor,
    chain: &Bound<'py, PyTuple>,
    layout: &Bound<'py, PyUntypedArray>,
    origin: isize,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let shape = layout.shape().to_vec();
    let dtype = layout.dtype();
    let nbytes = shape.iter().product::<usize>() * dtype.itemsize();
    let item = isize::try_from(dtype.itemsize())
        .ok()
        .filter(|&i| i > 0)
        .ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("a view's dtype has no size"))?;
    // The address is only compared, never dereferenced.
    let data = super::ffi::data_address(layout) as isize;
    let place = Strided {
        offset: (data - origin) / item,
        strides: layout.strides().iter().map(|s| s / item).collect(),
    };
    let ops = PyViewOps {
        chain: chain.clone().unbind(),
        layout: layout.clone().unbind(),
        shape,
        dtype: dtype.into_any().unbind(),
        origin,
        place,
        writable,
    };
    let t = Tensor::view_of(base, Arc::new(ops), nbytes).py(py)?;
    wrap(py, t)
}

/// `(base, chain, layout, origin, writable)` of a view made by `_make_view`, else None.
#[pyfunction]
pub fn _view_info<'py>(t: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let py = t.py();
    let Some(t) = as_tensor(t) else {
        return Ok(None);
    };
    let inner = &t.get().inner;
    let (Some(base), Some(ops)) = (inner.view_base(), view_ops(inner)) else {
        return Ok(None);
    };
    let base = wrap(py, base.clone())?;
    Ok(Some(PyTuple::new(
        py,
        [
            base,
            ops.chain.bind(py).clone().into_any(),
            ops.layout.bind(py).clone().into_any(),
            ops.origin.into_pyobject(py)?.into_any(),
            pyo3::types::PyBool::new(py, ops.writable)
                .to_owned()
                .into_any(),
        ],
    )?))
}
