//! The Python bindings (`boxfall._boxfall`): the only part of the crate that names pyo3 or
//! numpy. Each file wraps one concern of the core; `errors.rs` maps every core error. The raw
//! C APIs (CPython's, PyO3's private trampolines, mimalloc's) are named only in `ffi/`, behind
//! safe wrappers.

mod array_kernel;
mod array_methods;
mod array_ops;
mod backend;
mod backend_kernel;
mod convert;
mod coverage;
mod errors;
mod fast;
mod ffi;
mod gil_cell;
mod graph;
mod graph_constants;
mod graph_rules;
mod kept;
mod kernel;
mod keyset;
mod library;
mod logging;
mod namespace;
mod namespace_function;
mod numpy_memory;
mod ops;
mod overload;
mod packet;
mod payload_kernel;
mod plan;
mod py_kernel;
mod recursion;
mod redispatch;
mod schema;
mod tensor;
mod view;
mod view_desc;
mod view_function;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use errors::IntoPy;

// Parsing schemas and boxing calls allocate many small objects; mimalloc makes them about a
// third cheaper than glibc's malloc (measured by `python -m boxfall bench`). Only the
// extension module uses it; the pure-Rust crate keeps the system allocator.
#[global_allocator]
static ALLOCATOR: ffi::MiMalloc = ffi::MiMalloc;

use crate::fallback::{FallbackPolicy, WarningKind};
use crate::key::{DispatchKey, DispatchKeySet};

/// Registers a functionality key (above every backend key); returns its name.
#[pyfunction]
fn register_functionality_key(py: Python<'_>, name: &str) -> PyResult<String> {
    crate::key::register_functionality_key(name).py(py)?;
    Ok(name.to_string())
}

/// The bits of the named keys (an unknown name raises KeyError listing the known keys).
#[pyfunction]
fn key_bits(py: Python<'_>, names: Vec<String>) -> PyResult<u64> {
    let mut set = DispatchKeySet::EMPTY;
    for n in names {
        set |= DispatchKey::from_name(&n).py(py)?;
    }
    Ok(set.0)
}

/// Every registered key's name, lowest priority first.
#[pyfunction]
fn key_names() -> Vec<String> {
    crate::key::registered_keys()
        .into_iter()
        .map(|k| k.name())
        .collect()
}

/// This thread's (included, excluded) key bits.
#[pyfunction]
fn local_keys() -> (u64, u64) {
    let (i, e) = crate::key::local_keys();
    (i.0, e.0)
}

/// Sets this thread's included/excluded key bits; returns the previous ones.
#[pyfunction]
fn set_local_keys(include: u64, exclude: u64) -> (u64, u64) {
    let (i, e) = crate::key::set_local_keys(DispatchKeySet(include), DispatchKeySet(exclude));
    (i.0, e.0)
}

/// Sets the fallback policy, for every operator or (with `ops`) for those operators only;
/// `None` with `ops` clears their own policies.
#[pyfunction]
#[pyo3(signature = (policy, ops=None))]
fn set_fallback_policy(
    py: Python<'_>,
    policy: Option<&str>,
    ops: Option<Vec<String>>,
) -> PyResult<()> {
    let policy_error = |m: String| errors::new_err(py, "PolicyError", m);
    let p: Option<FallbackPolicy> = match policy {
        Some(text) => Some(
            text.parse()
                .map_err(|e: crate::Error| policy_error(e.to_string()))?,
        ),
        None => None,
    };
    match (p, ops) {
        (Some(p), None) => crate::fallback::set_fallback_policy(p),
        (None, None) => {
            return Err(policy_error(
                "the process-wide fallback policy is \"allow\", \"warn\" or \"error\"; None \
                 clears the own policy of the operators given as ops"
                    .into(),
            ))
        }
        (p, Some(names)) => {
            // Every name is checked before any policy changes.
            let handles = names
                .iter()
                .map(|n| crate::Dispatcher::find(n))
                .collect::<crate::Result<Vec<_>>>()
                .py(py)?;
            for h in handles {
                crate::fallback::set_operator_policy(&h, p);
            }
        }
    }
    Ok(())
}

/// The process-wide fallback policy, or with `op` that operator's own (None if it has none).
#[pyfunction]
#[pyo3(signature = (op=None))]
fn get_fallback_policy(py: Python<'_>, op: Option<&str>) -> PyResult<Option<&'static str>> {
    Ok(match op {
        None => Some(crate::fallback::fallback_policy().as_str()),
        Some(name) => {
            let h = crate::Dispatcher::find(name).py(py)?;
            crate::fallback::operator_policy(&h).map(FallbackPolicy::as_str)
        }
    })
}

/// What is wrong with `BOXFALL_FALLBACK`, if anything (the package warns with it at import).
#[pyfunction]
fn fallback_env_problem() -> Option<String> {
    crate::fallback::fallback_policy_from_env()
        .err()
        .map(|e| e.to_string())
}

#[pyfunction]
fn counter_value(py: Python<'_>, name: &str) -> PyResult<u64> {
    Ok(crate::Dispatcher::op_stats(name).py(py)?.fallbacks)
}

#[pyfunction]
fn counters() -> Vec<(String, u64)> {
    crate::Dispatcher::metrics().counters()
}

fn figures_dict<'py>(py: Python<'py>, f: &crate::metrics::Figures) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("fallbacks", f.fallbacks)?;
    d.set_item("failures", f.failures)?;
    d.set_item("fallback_ns", f.fallback_ns)?;
    d.set_item("to_cpu_ns", f.to_cpu_ns)?;
    d.set_item("kernel_ns", f.kernel_ns)?;
    d.set_item("from_cpu_ns", f.from_cpu_ns)?;
    d.set_item("bytes_to_cpu", f.bytes_to_cpu)?;
    d.set_item("bytes_from_cpu", f.bytes_from_cpu)?;
    d.set_item("kernel_calls", f.kernel_calls)?;
    d.set_item("kernel_call_ns", f.kernel_call_ns)?;
    d.set_item("narrowed", f.narrowed)?;
    Ok(d)
}

/// The last failure as `{"type": <the Python exception's class name>, "message": <its text>}`:
/// a Python exception's own class (its text reads `"IndexError: ..."`), else the class the
/// bindings raise for the core's error (`errors::to_pyerr`).
fn failure_dict<'py>(py: Python<'py>, f: &crate::metrics::Failure) -> PyResult<Bound<'py, PyDict>> {
    let (type_name, message) = match f.kind.as_str() {
        "Foreign" => match f.message.split_once(": ") {
            Some((t, m)) if !t.is_empty() && !t.contains(' ') => (t.to_string(), m.to_string()),
            _ => ("Exception".to_string(), f.message.clone()),
        },
        kind => (
            errors::class_name_of_kind(kind).to_string(),
            f.message.clone(),
        ),
    };
    let d = PyDict::new(py);
    d.set_item("type", type_name)?;
    d.set_item("message", message)?;
    Ok(d)
}

/// `"last_failure"`: `failure_dict` of `f`, or None.
fn set_failure(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
    f: Option<&crate::metrics::Failure>,
) -> PyResult<()> {
    match f {
        Some(f) => d.set_item("last_failure", failure_dict(py, f)?),
        None => d.set_item("last_failure", py.None()),
    }
}

/// The totals, and `"backends"`: each backend's figures by its name; `"last_failure"` in each,
/// the operator's last and each backend's own.
fn stats_dict<'py>(py: Python<'py>, s: &crate::metrics::OpStats) -> PyResult<Bound<'py, PyDict>> {
    let d = figures_dict(py, &s.totals())?;
    let backends = PyDict::new(py);
    for (key, f) in &s.per_backend {
        let b = figures_dict(py, f)?;
        set_failure(py, &b, s.last_failure_of(*key))?;
        backends.set_item(key.name(), b)?;
    }
    d.set_item("backends", backends)?;
    set_failure(py, &d, s.last_failure.as_ref())?;
    Ok(d)
}

/// The transfers users asked for, per backend name (`bf.metrics.transfers()`).
#[pyfunction]
fn user_transfers<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (key, t) in crate::metrics::user_transfers() {
        let e = PyDict::new(py);
        e.set_item("to_host", t.to_host)?;
        e.set_item("bytes_to_host", t.bytes_to_host)?;
        e.set_item("to_device", t.to_device)?;
        e.set_item("bytes_to_device", t.bytes_to_device)?;
        e.set_item("materialized", t.materialized)?;
        e.set_item("bytes_materialized", t.bytes_materialized)?;
        d.set_item(key.name(), e)?;
    }
    Ok(d)
}

/// Starts timing the backends' own kernels (`bf.metrics.profile()` enters it).
#[pyfunction]
fn profile_begin() {
    crate::metrics::profile_begin();
}

/// Ends one `profile_begin` (`bf.metrics.profile()` leaves it).
#[pyfunction]
fn profile_end() {
    crate::metrics::profile_end();
}

#[pyfunction]
fn op_stats<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
    let s = crate::Dispatcher::op_stats(name).py(py)?;
    stats_dict(py, &s)
}

#[pyfunction]
fn all_stats<'py>(py: Python<'py>) -> PyResult<Vec<(String, Bound<'py, PyDict>)>> {
    crate::Dispatcher::metrics()
        .all_stats()
        .to_vec()
        .iter()
        .map(|(n, s)| Ok((n.clone(), stats_dict(py, s)?)))
        .collect()
}

/// The report; `sort` was checked by the caller (`metrics.report`), `backend` is a key name
/// (in any case, where that names one key).
#[pyfunction]
#[pyo3(signature = (backend=None, sort="time", top=None))]
fn report(
    py: Python<'_>,
    backend: Option<&str>,
    sort: &str,
    top: Option<usize>,
) -> PyResult<String> {
    let backend = backend
        .map(|name| {
            DispatchKey::from_name(name)
                .or_else(|e| DispatchKey::from_name_ignore_case(name).ok_or(e))
        })
        .transpose()
        .py(py)?;
    let sort = sort
        .parse()
        .map_err(|e: crate::Error| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    Ok(
        crate::Dispatcher::metrics().report_with(&crate::metrics::ReportOptions {
            backend,
            sort,
            top,
        }),
    )
}

#[pyfunction]
fn reset_metrics() {
    crate::Dispatcher::reset_metrics()
}

/// Turns the counting of this thread's calls on or off; returns whether it was on
/// (`metrics::set_counting`; `bf.metrics._uncounted()` enters it).
#[pyfunction]
fn set_counting(on: bool) -> bool {
    crate::metrics::set_counting(on)
}

/// Counts one CPU fallback of `op` on `backend` that ran outside the dispatcher (a graph
/// program's host callback): its time, the CPU kernel's part of it, the bytes each way, and
/// the exception it failed with, if it did (`bf.metrics.record_fallback`).
#[pyfunction]
#[pyo3(signature = (op, backend, fallback_ns, kernel_ns, bytes_to_cpu, bytes_from_cpu, error=None))]
#[allow(clippy::too_many_arguments)]
fn record_fallback(
    py: Python<'_>,
    op: PyRef<'_, overload::PyOpOverload>,
    backend: &str,
    fallback_ns: u64,
    kernel_ns: u64,
    bytes_to_cpu: u64,
    bytes_from_cpu: u64,
    error: Option<Bound<'_, pyo3::exceptions::PyBaseException>>,
) -> PyResult<()> {
    let key = DispatchKey::from_name(backend).py(py)?;
    let ticks = crate::metrics::StepTicks {
        total: crate::metrics::ticks_of_ns(fallback_ns.max(kernel_ns)),
        kernel: crate::metrics::ticks_of_ns(kernel_ns),
        ..crate::metrics::StepTicks::default()
    };
    let metrics = op.handle.metrics();
    metrics.record_steps(key, ticks, bytes_to_cpu, bytes_from_cpu, error.is_none());
    if let Some(e) = error {
        metrics.record_failure(key, &errors::from_pyerr(PyErr::from_value(e.into_any())));
    }
    Ok(())
}

/// The compiled graph running in this thread spent `ns` compiling (`graph::compiled_in_run`).
#[pyfunction]
fn graph_compiled_in_run(ns: u64) {
    crate::graph::compiled_in_run(ns);
}

/// The built-in Native backend.
#[pyfunction]
fn native_backend() -> backend::PyBackend {
    backend::PyBackend::native()
}

fn warn_in_python(_kind: WarningKind, message: &str) -> crate::Result<()> {
    // Both kinds are FallbackWarnings; `_warn_fallback` attributes them to the user's frame.
    Python::attach(|py| {
        py.import("boxfall._errors")
            .and_then(|m| m.getattr("_warn_fallback"))
            .and_then(|f| f.call1((message,)))
            .map(|_| ())
            .map_err(errors::from_pyerr)
    })
}

/// Runs a large Native kernel, or a wait for another thread (graph mode's sync, a tensor's
/// write lock), with the GIL released, so other Python threads go on. The work holds no lock
/// of boxfall's when it starts, so a thread that did not hold the GIL may take it first.
fn release_gil(work: &mut (dyn FnMut() + Send)) {
    Python::attach(|py| py.detach(work));
}

/// The operators Native implements in Rust: `(name, argument types)`.
#[pyfunction]
fn native_kernel_names() -> Vec<(String, Vec<String>)> {
    crate::native::kernel_names()
        .into_iter()
        .map(|(n, t)| (n.to_string(), t.iter().map(|s| s.to_string()).collect()))
        .collect()
}

#[pymodule]
fn _boxfall(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // The core's log records go to Python's `logging`; levels are checked as `logging` itself
    // checks them, so a user who turns on DEBUG for "boxfall" after import gets the records.
    logging::install(py)?;
    crate::fallback::set_warning_handler(warn_in_python);
    // Native's large kernels, and a thread waiting for another's sync of a graph or its write
    // of a tensor, let go of the GIL (which the other thread may need to finish).
    crate::native::set_blocking_hook(release_gil);
    crate::native::install_fallback().py(py)?;
    graph_constants::install();

    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<schema::PyFunctionSchema>()?;
    m.add_class::<schema::PyArgument>()?;
    m.add_class::<schema::PyAliasInfo>()?;
    m.add_class::<library::PyLibrary>()?;
    m.add_class::<library::PyFallthrough>()?;
    m.add_class::<library::PyCpuFallback>()?;
    m.add_class::<payload_kernel::PayloadKernel>()?;
    m.add_class::<ops::PyOpOverload>()?;
    m.add_class::<namespace::PyOpNamespace>()?;
    m.add_class::<packet::PyOpOverloadPacket>()?;
    ops::install_redispatch_getter(py)?;
    m.add_class::<keyset::PyKeySet>()?;
    m.add_class::<backend::PyBackend>()?;
    m.add_class::<graph::PyGraph>()?;
    m.add("fallthrough", library::PyFallthrough)?;
    m.add(
        "cpu_fallback",
        library::PyCpuFallback::new(Default::default()),
    )?;

    m.add_function(wrap_pyfunction!(schema::parse_schema, m)?)?;
    m.add_function(wrap_pyfunction!(schema::parse_schemas_count, m)?)?;
    m.add_function(wrap_pyfunction!(ops::overloads, m)?)?;
    m.add_function(wrap_pyfunction!(ops::definitions_version, m)?)?;
    m.add_function(wrap_pyfunction!(ops::find_op, m)?)?;
    m.add_function(wrap_pyfunction!(array_kernel::array_kernel, m)?)?;
    m.add_class::<namespace_function::NamespaceFunction>()?;
    m.add_function(wrap_pyfunction!(namespace_function::binary_function, m)?)?;
    m.add_function(wrap_pyfunction!(namespace_function::operator_function, m)?)?;
    m.add_function(wrap_pyfunction!(namespace_function::view_function, m)?)?;
    m.add_function(wrap_pyfunction!(view::_make_view, m)?)?;
    m.add_function(wrap_pyfunction!(view::_view_info, m)?)?;
    m.add_function(wrap_pyfunction!(ops::call_first_binding, m)?)?;
    m.add_function(wrap_pyfunction!(library::call_fallback, m)?)?;
    m.add_function(wrap_pyfunction!(backend::register_backend, m)?)?;
    m.add_function(wrap_pyfunction!(backend::get_backend, m)?)?;
    m.add_function(wrap_pyfunction!(backend::backends, m)?)?;
    m.add_function(wrap_pyfunction!(backend::host_data_target, m)?)?;
    m.add_function(wrap_pyfunction!(backend::backends_version, m)?)?;
    m.add_function(wrap_pyfunction!(coverage::coverage, m)?)?;
    m.add_function(wrap_pyfunction!(coverage::namespaces, m)?)?;
    m.add_function(wrap_pyfunction!(coverage::operators_in, m)?)?;
    m.add_function(wrap_pyfunction!(native_backend, m)?)?;
    m.add_function(wrap_pyfunction!(native_kernel_names, m)?)?;
    m.add_function(wrap_pyfunction!(register_functionality_key, m)?)?;
    m.add_function(wrap_pyfunction!(key_bits, m)?)?;
    m.add_function(wrap_pyfunction!(key_names, m)?)?;
    m.add_function(wrap_pyfunction!(local_keys, m)?)?;
    m.add_function(wrap_pyfunction!(set_local_keys, m)?)?;
    m.add_function(wrap_pyfunction!(set_fallback_policy, m)?)?;
    m.add_function(wrap_pyfunction!(get_fallback_policy, m)?)?;
    m.add_function(wrap_pyfunction!(fallback_env_problem, m)?)?;
    m.add_function(wrap_pyfunction!(counter_value, m)?)?;
    m.add_function(wrap_pyfunction!(counters, m)?)?;
    m.add_function(wrap_pyfunction!(op_stats, m)?)?;
    m.add_function(wrap_pyfunction!(all_stats, m)?)?;
    m.add_function(wrap_pyfunction!(report, m)?)?;
    m.add_function(wrap_pyfunction!(reset_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(set_counting, m)?)?;
    m.add_function(wrap_pyfunction!(record_fallback, m)?)?;
    m.add_function(wrap_pyfunction!(graph_compiled_in_run, m)?)?;
    m.add_function(wrap_pyfunction!(profile_begin, m)?)?;
    m.add_function(wrap_pyfunction!(user_transfers, m)?)?;
    m.add_function(wrap_pyfunction!(profile_end, m)?)?;
    m.add_function(wrap_pyfunction!(fast::set_fast_path, m)?)?;
    m.add_function(wrap_pyfunction!(ops::vectorcall_installed, m)?)?;
    m.add_function(wrap_pyfunction!(ops::tries_lean_entry, m)?)?;
    m.add_function(wrap_pyfunction!(graph_rules::_output_metas, m)?)?;
    m.add_function(wrap_pyfunction!(graph_rules::_refuse_in_graph, m)?)?;
    m.add_function(wrap_pyfunction!(graph_rules::_graph_refusal, m)?)?;
    m.add_function(wrap_pyfunction!(graph::sync, m)?)?;
    crate::graph::set_site_finder(graph::python_site);
    crate::graph::set_narrowing_warner(graph::warn_narrowed);
    crate::graph::set_error_copier(graph::copy_failure);
    m.add_function(wrap_pyfunction!(graph::graph_key_bits, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_dump, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_limit, m)?)?;
    m.add_function(wrap_pyfunction!(graph::set_graph_limit, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(graph::reset_graph_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(graph::is_pending, m)?)?;
    Ok(())
}
