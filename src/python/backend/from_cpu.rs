//! A backend's `from_cpu` hook, told which of the backend's devices the payload is for where
//! it takes a `device` parameter (`from_cpu(array, *, device)`, the device's index): a backend
//! of several devices (JAX's chips) puts each tensor's payload on its own device. A hook
//! without one is called with the array alone, as before.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The `from_cpu` hook and whether it takes the device's index.
pub(crate) struct FromCpu {
    hook: Py<PyAny>,
    takes_device: bool,
}

impl FromCpu {
    /// The hook, its signature read once (at registration): a parameter named `device`, or a
    /// `**kwargs`, takes the index. A callable whose signature cannot be read (a builtin
    /// without one) is called with the array alone.
    pub(crate) fn new(py: Python<'_>, hook: Py<PyAny>) -> PyResult<FromCpu> {
        let takes_device = takes_keyword(py, hook.bind(py), "device")?;
        Ok(FromCpu { hook, takes_device })
    }

    /// The payload of `arr` for the backend's device `index`.
    pub(crate) fn call<'py>(
        &self,
        py: Python<'py>,
        arr: &Bound<'py, PyAny>,
        index: u16,
    ) -> PyResult<Bound<'py, PyAny>> {
        let hook = self.hook.bind(py);
        if !self.takes_device {
            return hook.call1((arr,));
        }
        let kwargs = PyDict::new(py);
        kwargs.set_item(pyo3::intern!(py, "device"), index)?;
        hook.call((arr,), Some(&kwargs))
    }

    pub(crate) fn clone_ref(&self, py: Python<'_>) -> FromCpu {
        FromCpu {
            hook: self.hook.clone_ref(py),
            takes_device: self.takes_device,
        }
    }
}

/// Whether `f` takes `keyword` by name (a parameter of that name that is not positional-only,
/// or a `**kwargs`). False where `inspect.signature` cannot read it.
fn takes_keyword(py: Python<'_>, f: &Bound<'_, PyAny>, keyword: &str) -> PyResult<bool> {
    let inspect = py.import("inspect")?;
    let Ok(signature) = inspect.getattr("signature")?.call1((f,)) else {
        return Ok(false);
    };
    let parameter = inspect.getattr("Parameter")?;
    let positional_only = parameter.getattr("POSITIONAL_ONLY")?;
    let var_keyword = parameter.getattr("VAR_KEYWORD")?;
    let parameters = signature.getattr("parameters")?.call_method0("values")?;
    for p in parameters.try_iter()? {
        let p = p?;
        let kind = p.getattr("kind")?;
        if kind.eq(&var_keyword)? {
            return Ok(true);
        }
        if p.getattr("name")?.extract::<String>()? == keyword && !kind.eq(&positional_only)? {
            return Ok(true);
        }
    }
    Ok(false)
}
