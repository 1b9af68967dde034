//! A backend's `from_cpu` hook, told which of the backend's devices the payload is for where
//! the backend was registered with `from_cpu_takes_device=True` (`from_cpu(array, device=i)`,
//! the device's index): a backend of several devices (JAX's chips) puts each tensor's payload
//! on its own device. Any other hook is called with the array alone. The registration says
//! it, not the hook's signature: a hook wrapped by a decorator (`def g(*a, **k)`, a lock, a
//! timer) takes `**k` whatever the hook it wraps takes.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The `from_cpu` hook and whether it takes the device's index.
pub(crate) struct FromCpu {
    hook: Py<PyAny>,
    takes_device: bool,
}

impl FromCpu {
    /// The hook, called with the device's index where `takes_device`
    /// (`register_backend(from_cpu_takes_device=)`).
    pub(crate) fn new(hook: Py<PyAny>, takes_device: bool) -> FromCpu {
        FromCpu { hook, takes_device }
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
