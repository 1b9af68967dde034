//! Where a creation operator puts host data the user gives it for a device.

use pyo3::prelude::*;

use super::class::PyBackend;
use super::registry::is_python_backend;
use crate::key::DispatchKey;

/// Where `op`, a creation operator given host data, puts it when the user asks for `device`
/// and the device's backend serves `op` with `bf.cpu_fallback`: the backend and the device
/// index, for `Backend.tensor` to put the data there as a transfer the user asked for
/// (`bf.metrics.transfers()`), rather than a fallback no kernel could avoid. None for
/// Native, the CPU, a device whose backend has a kernel of its own for `op` or another
/// fallback, and anything that names no backend registered from Python.
#[pyfunction]
pub fn host_data_target(
    op: PyRef<'_, crate::python::overload::PyOpOverload>,
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
