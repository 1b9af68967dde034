//! What serves each operator on a key (`bf.coverage`), and the defined names by namespace
//! (`dir(bf.ops)`, `dir(bf.ops.demo)`).

use pyo3::prelude::*;

use super::errors::IntoPy;
use crate::dispatcher::Dispatcher;
use crate::key::DispatchKey;

/// The key's registered name and `(operator name, what serves it on the key)` for every
/// defined operator, or those of `namespace`, sorted by name. The key takes any case (`"accel"`); an unknown one is an
/// `UnknownKeyError`, an empty namespace an `UnknownOperatorError` listing those with operators.
#[pyfunction]
#[pyo3(signature = (key, namespace=None))]
pub fn coverage(
    py: Python<'_>,
    key: &str,
    namespace: Option<&str>,
) -> PyResult<(String, Vec<(String, String)>)> {
    let k = DispatchKey::from_name(key).py(py)?;
    let rows = Dispatcher::coverage(k, namespace).py(py)?;
    let rows = rows.into_iter().map(|(n, s)| (n, s.to_string())).collect();
    Ok((k.name(), rows))
}

/// The namespaces that hold a defined operator, sorted.
#[pyfunction]
pub fn namespaces() -> Vec<String> {
    Dispatcher::namespaces()
}

/// The operators of namespace `ns` by name (no namespace, no overload), sorted.
#[pyfunction]
pub fn operators_in(ns: &str) -> Vec<String> {
    Dispatcher::operators_in(ns)
}
