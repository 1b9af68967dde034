//! A Python backend's hooks (`to_cpu`, `from_cpu`, `copy_from_cpu`, `view`, `view_write`) as
//! the core's `Backend`.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::checks::{check_payload, check_view};
use super::from_cpu::FromCpu;
use super::held::Held;
use super::registry::Serial;
use crate::backend::{Backend, ResultOf};
use crate::error::{Error, Result};
use crate::python::errors::warn_as;
use crate::python::ffi::{owns_data, read_only_view};
use crate::python::tensor::{cpu_tensor_to_numpy, data_object, hook_error, object_tensor};
use crate::tensor::{Device, DeviceView, Tensor, ViewWrite};

pub(super) struct PyBackendHooks {
    pub(super) name: String,
    pub(super) to_cpu: Py<PyAny>,
    pub(super) from_cpu: FromCpu,
    pub(super) copy_from_cpu: Py<PyAny>,
    pub(super) to_cpu_many: Option<Py<PyAny>>,
    /// `register_backend(view=)`: a view made on the device from its base's payload.
    pub(super) view: Option<Py<PyAny>>,
    /// `register_backend(view_write=)`: a view's values written into its base on the device.
    pub(super) view_write: Option<Py<PyAny>>,
    pub(super) shares_memory: bool,
    pub(super) held: Held,
    /// `register_backend(narrow=)`: a 64-bit result the device lacks becomes 32-bit.
    pub(super) narrow: bool,
    pub(super) lock: Option<Py<PyAny>>,
    /// `register_backend(lazy=)`: residency (`crate::resident`).
    pub(super) lazy: bool,
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
        Serial::enter(py, self.lock.as_ref()).map_err(crate::python::errors::from_pyerr)
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
        Ok(crate::python::tensor::numpy_tensor(&arr))
    }

    fn hook_to_cpu(&self, t: &Tensor, usage: Usage) -> Result<Tensor> {
        fresh_view(t)?;
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

/// Nothing for a tensor that is no view or a view whose values can be made from its base;
/// for one whose base an `out=` argument resized, the error that says so (naming the view's
/// operators), as Native's reads raise it: its payload, made from the old base, would read
/// stale values or zeros.
fn fresh_view(t: &Tensor) -> Result<()> {
    match t.is_view().then(|| t.view_failure()).flatten() {
        Some(e) => Err(e),
        None => Ok(()),
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
        for (t, _) in tensors {
            fresh_view(t)?;
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
                crate::python::tensor::numpy_tensor(&kept),
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
            let by = || format!("'{}' on backend '{}' made", op.op, self.name);
            ints_fit_narrowed(py, &arr, to, by).map_err(crate::python::errors::from_pyerr)?;
            let out = arr
                .call_method1(pyo3::intern!(py, "astype"), (to,))
                .map_err(|e| self.fail(py, "from_cpu", e))?;
            Ok::<_, Error>(crate::python::tensor::numpy_tensor(&out))
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
                .call(py, &arr, device.index)
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

/// Refuses (`OverflowError`) an integer array `arr` whose values the narrowed dtype `to`
/// (int32, uint32) cannot all hold: NumPy's `astype` would wrap them (`2**40` as int32 is 0),
/// where JAX's own conversion raises. The message names the first value found (the least or
/// the greatest) after `by` (who made them). Nothing to check for another `to`.
pub(super) fn ints_fit_narrowed(
    py: Python<'_>,
    arr: &Bound<'_, PyAny>,
    to: &str,
    by: impl FnOnce() -> String,
) -> PyResult<()> {
    if !matches!(to, "int32" | "uint32")
        || arr.getattr(pyo3::intern!(py, "size"))?.extract::<usize>()? == 0
    {
        return Ok(());
    }
    let info = py
        .import(pyo3::intern!(py, "numpy"))?
        .getattr(pyo3::intern!(py, "iinfo"))?
        .call1((to,))?;
    let least = arr.call_method0(pyo3::intern!(py, "min"))?;
    let greatest = arr.call_method0(pyo3::intern!(py, "max"))?;
    let bad = if least.lt(info.getattr(pyo3::intern!(py, "min"))?)? {
        least
    } else if greatest.gt(info.getattr(pyo3::intern!(py, "max"))?)? {
        greatest
    } else {
        return Ok(());
    };
    Err(pyo3::exceptions::PyOverflowError::new_err(format!(
        "{} the integer {bad}, which {to} (the device's dtype for a 64-bit one: register_backend(narrow=True), JAX's rule without 64-bit types) cannot hold",
        by()
    )))
}
