//! `bf.register_backend`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use super::class::PyBackend;
use super::from_cpu::FromCpu;
use super::held::Held;
use super::hooks::PyBackendHooks;
use super::registry::{python_backends, Registration, PYTHON_KEYS, REGISTRATIONS};
use crate::backend::{register_backend as register_core, replace_backend as replace_core};
use crate::python::errors::IntoPy;

/// Registers a Python backend and its dispatch key; later backends rank above earlier ones.
/// With `replace`, a backend registered earlier under `name` gets the new hooks and keeps its
/// key (a notebook cell run twice): its tensors, kernels and fallbacks stay, and every
/// `Backend` object of it uses the new hooks.
///
/// `dtypes` names the dtypes the device holds (None: every dtype of the array API standard):
/// a result of another dtype is a `DTypeError` before it moves. With `thread_safe=False` the
/// backend's hooks, and the kernels and fallbacks registered for it from then on, run one at a
/// time (under one re-entrant lock of the backend). `lazy` (residency, `crate::resident`):
/// host copies kept and the fallback's results left on the host until the device needs them;
/// `lazy=False` moves every read and every result at once. `view(payload, shape, strides,
/// offset)` (optional) makes a view of a payload on the device (strides and offset in elements
/// of the payload's values in C order): the payload, sharing the base's memory, or
/// `(payload, False)` for a copy (a kernel's write of it is written into the base after the
/// kernel), or None where it cannot: a kernel of the backend then reads a view with nothing
/// moved. With `from_cpu_takes_device=True`, `from_cpu` is called `from_cpu(array, device=i)`,
/// `i` the index of the tensor's device (`FromCpu`), for a backend of several devices;
/// without it, `from_cpu(array)` (the hook's signature is not read: a decorated hook takes
/// `**kwargs` whatever it wraps).
/// `copy_from_cpu` may return a new payload (a device whose memory is immutable), which
/// takes the tensor's place as a write of it; None: it wrote the payload where it is.
/// `view_write(base, values, shape, strides, offset)` (optional) writes the values of a view
/// that a kernel of the backend wrote as a copy (made by `view` as `(payload, False)`, or by
/// `from_cpu` where `view` made none) into its base on the device, and returns the base's new
/// payload (None: written where it is); without it boxfall writes them through the host.
///
/// `dtypes` may also name extension dtypes NumPy knows (`ml_dtypes.bfloat16`): tensors of them
/// work through the CPU fallback (its kernels get NumPy arrays of that dtype). With `narrow`
/// (JAX's rule without 64-bit types), a 64-bit dtype the device lacks, asked for or made by a
/// CPU kernel, becomes the 32-bit one of its kind (int64 to int32, uint64 to uint32, float64
/// to float32, complex128 to complex64), with a `bf.NarrowingWarning` once per operator and a
/// count in `bf.metrics.op_stats(op)["narrowed"]`; without it such a request is a `DTypeError`.
/// Either way, the results whose dtype the array API standard lets the library choose
/// (indices, counts: operators tagged `default_dtypes`) come in the device's default dtype.
///
/// `compile(graph)` (optional) makes the backend a graph backend (graph
/// mode): operators on its tensors are recorded and return pending tensors, and at a sync the
/// pending graph (a `bf.Graph`) is given to `compile`, which returns a function of the input
/// payloads (a list) giving the output payloads (cached by the graph's structure). Where
/// `compile` has a `settings()` method, its string (the backend's settings that change what a
/// compile makes: JAX's x64 and matmul precision) is read once a sync and is part of the
/// cache's key, so a change of them compiles anew, with a reason that names them. A function
/// with a true attribute `donates` is given `donate=` where an input may be consumed (see
/// `graph.rs`'s `PyCompiled`).
#[pyfunction]
#[pyo3(signature = (name, *, to_cpu, from_cpu, copy_from_cpu, to_cpu_many=None, shares_memory=false, replace=false, dtypes=None, thread_safe=true, lazy=true, view=None, view_write=None, narrow=false, compile=None, from_cpu_takes_device=false))]
#[allow(clippy::too_many_arguments)]
pub fn register_backend(
    py: Python<'_>,
    name: &str,
    to_cpu: Py<PyAny>,
    from_cpu: Py<PyAny>,
    copy_from_cpu: Py<PyAny>,
    to_cpu_many: Option<Py<PyAny>>,
    shares_memory: bool,
    replace: bool,
    dtypes: Option<Bound<'_, PyAny>>,
    thread_safe: bool,
    lazy: bool,
    view: Option<Py<PyAny>>,
    view_write: Option<Py<PyAny>>,
    narrow: bool,
    compile: Option<Py<PyAny>>,
    from_cpu_takes_device: bool,
) -> PyResult<PyBackend> {
    // Checked before anything is registered, so a refused backend leaves its name free.
    let given = [
        ("to_cpu", Some(&to_cpu)),
        ("from_cpu", Some(&from_cpu)),
        ("copy_from_cpu", Some(&copy_from_cpu)),
        ("to_cpu_many", to_cpu_many.as_ref()),
        ("view", view.as_ref()),
        ("view_write", view_write.as_ref()),
        ("compile", compile.as_ref()),
    ];
    for (hook, f) in given {
        if let Some(f) = f.map(|f| f.bind(py)).filter(|f| !f.is_callable()) {
            let type_name = f.get_type().name()?;
            return Err(PyTypeError::new_err(format!(
                "the '{hook}' hook of backend '{name}' must be callable, not {type_name}; the backend was not registered"
            )));
        }
    }
    let held = match &dtypes {
        Some(d) => Held::of_names(py, name, d)?,
        None => Held::all(),
    };
    let lock = if thread_safe {
        None
    } else {
        Some(py.import("threading")?.getattr("RLock")?.call0()?.unbind())
    };
    let from_cpu = FromCpu::new(from_cpu, from_cpu_takes_device);
    let hooks = PyBackendHooks {
        name: name.to_string(),
        to_cpu,
        from_cpu: from_cpu.clone_ref(py),
        copy_from_cpu,
        to_cpu_many,
        view,
        view_write,
        shares_memory,
        held: held.clone(),
        narrow,
        lock: lock.as_ref().map(|l| l.clone_ref(py)),
        lazy,
    };
    let key = if replace {
        replace_core(name, Arc::new(hooks)).py(py)?
    } else {
        register_core(name, Arc::new(hooks)).py(py)?
    };
    let narrowed = if narrow {
        ["int64", "uint64", "float64", "complex128"]
            .into_iter()
            .filter_map(|wide| held.narrowed(wide).map(|to| (wide, to)))
            .collect()
    } else {
        Vec::new()
    };
    python_backends()[key.index()] = Some(Registration {
        from_cpu,
        held,
        narrow,
        lock,
    });
    if let Some(compile) = compile {
        let settings = compile
            .bind(py)
            .getattr_opt(pyo3::intern!(py, "settings"))?
            .map(Bound::unbind);
        let compiler = crate::python::graph::PyCompiler {
            compile,
            narrowed,
            settings,
        };
        crate::graph::register_graph_backend(key, Arc::new(compiler)).py(py)?;
    }
    PYTHON_KEYS.fetch_or(1 << key.index(), Ordering::Relaxed);
    REGISTRATIONS.fetch_add(1, Ordering::Release);
    Ok(PyBackend {
        key,
        name: name.to_string(),
    })
}
