//! Graph mode's Python face: `bf.Graph` (what a backend's `compile=` gets), the compiler and
//! compiled program that call Python, and the module functions behind `bf.sync()`,
//! `bf.eager()`, `bf.graph.dump()` and `bf.metrics.graphs()`.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict, PyList, PyTuple};

use crate::error::{Error, ForeignError, Result};
use crate::graph::{Arg, CompiledGraph, Graph, GraphCompiler};
use crate::ivalue::IValue;
use crate::key::DispatchKey;
use crate::python::convert::{to_py, Passed, TensorStyle};
use crate::python::errors::{from_pyerr, IntoPy, PyErrPayload};
use crate::python::ffi::refcnt;
use crate::python::overload::PyOpOverload;
use crate::python::tensor::{data_object, object_tensor, PyTensor};
use crate::tensor::TensorData;

/// A recorded graph, as a backend's compiler gets it (`bf.register_backend(...,
/// compile=)`): its inputs, nodes and outputs, and `replay`.
#[pyclass(name = "Graph", module = "boxfall", frozen)]
pub struct PyGraph {
    graph: Arc<Graph>,
}

#[pymethods]
impl PyGraph {
    /// The backend's name.
    #[getter]
    fn backend(&self) -> String {
        self.graph.backend.name()
    }

    /// The device of its inputs and results (`"JAXGraph:1"`): a program with no inputs is
    /// placed there by its compiler.
    #[getter]
    fn device(&self) -> String {
        self.graph.device.to_string()
    }

    /// The inputs' `(dtype, shape)`, in the order their payloads are given.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items: Vec<(String, Bound<'py, PyTuple>)> = self
            .graph
            .inputs
            .iter()
            .map(|m| Ok((m.dtype.to_string(), PyTuple::new(py, &m.shape)?)))
            .collect::<PyResult<_>>()?;
        PyList::new(py, items)
    }

    /// The scalar inputs' types (`"bool"`, `"int"`, `"float"`): their values follow the
    /// inputs' payloads in what the compiled function is given.
    #[getter]
    fn scalars(&self) -> Vec<&'static str> {
        self.graph.scalars.clone()
    }

    /// The nodes, in order: `(op, args, outputs)`, `op` a `bf.OpOverload`, each argument
    /// `("input", i)`, `("scalar", j)` (scalar input `j`), `("node", n, k)` (result `k` of
    /// node `n`) or `("const", value)`, and the outputs' `(dtype, shape)`.
    #[getter]
    fn nodes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut items = Vec::with_capacity(self.graph.nodes.len());
        for n in &self.graph.nodes {
            let op = PyOpOverload::new_bound(py, n.op.clone())?;
            let mut args = Vec::with_capacity(n.args.len());
            for a in &n.args {
                args.push(match a {
                    Arg::Input(i) => ("input", *i).into_pyobject(py)?.into_any(),
                    Arg::Node(j, k) => ("node", *j, *k).into_pyobject(py)?.into_any(),
                    Arg::Scalar(j) => ("scalar", *j).into_pyobject(py)?.into_any(),
                    Arg::Const(v) => (
                        "const",
                        to_py(py, v, &Passed::default(), TensorStyle::Caller)?,
                    )
                        .into_pyobject(py)?
                        .into_any(),
                });
            }
            let outs: Vec<(String, Bound<'py, PyTuple>)> = n
                .outputs
                .iter()
                .map(|m| Ok((m.dtype.to_string(), PyTuple::new(py, &m.shape)?)))
                .collect::<PyResult<_>>()?;
            items.push((op, PyTuple::new(py, args)?, outs).into_pyobject(py)?);
        }
        PyList::new(py, items)
    }

    /// The results given back, in order: `(node, k)`.
    #[getter]
    fn outputs(&self) -> Vec<(usize, usize)> {
        self.graph.outputs.clone()
    }

    /// The graph's structure as a string (what the cache of compiled graphs is keyed by),
    /// the backend's settings last.
    #[getter]
    fn key(&self) -> String {
        self.graph.key()
    }

    /// The backend's settings the graph is compiled under (its compiler's `settings()`; empty
    /// for none).
    #[getter]
    fn settings(&self) -> String {
        self.graph.settings.clone()
    }

    /// Runs the nodes eagerly on the backend (its own kernels, or the CPU fallback), on
    /// tensors wrapping `payloads` (one per input, then the scalar inputs' values), and gives
    /// the outputs' payloads.
    fn replay<'py>(
        &self,
        py: Python<'py>,
        payloads: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let given: Vec<Bound<'py, PyAny>> = payloads.try_iter()?.collect::<PyResult<_>>()?;
        let n = self.graph.inputs.len();
        if given.len() != n + self.graph.scalars.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "a graph of backend '{}' takes {n} payloads and {} scalars, not {} values",
                self.graph.backend,
                self.graph.scalars.len(),
                given.len()
            )));
        }
        let inputs: Vec<crate::tensor::Tensor> = given[..n]
            .iter()
            .map(|p| object_tensor(self.graph.device, p))
            .collect();
        let scalars = given[n..]
            .iter()
            .zip(&self.graph.scalars)
            .map(|(v, kind)| scalar_value(v, kind))
            .collect::<PyResult<Vec<_>>>()?;
        let outs = self.graph.replay(&inputs, &scalars).py(py)?;
        let mut objs = Vec::with_capacity(outs.len());
        for t in &outs {
            let data = crate::resident::device_data(t).py(py)?;
            objs.push(payload_of(py, &data)?);
        }
        PyList::new(py, objs)
    }

    /// The graph in words, one node a line.
    fn __repr__(&self) -> String {
        self.graph.describe()
    }
}

/// A scalar input's value as the graph's type for it says (`"bool"`, `"int"`, `"float"`).
fn scalar_value(v: &Bound<'_, PyAny>, kind: &str) -> PyResult<IValue> {
    Ok(match kind {
        "bool" => IValue::Bool(v.extract()?),
        "int" => IValue::Int(v.extract()?),
        _ => IValue::Double(v.extract()?),
    })
}

/// The Python object a graph's input or output data is: the payload, or a NumPy array for
/// host memory.
fn payload_of<'py>(py: Python<'py>, data: &TensorData) -> PyResult<Bound<'py, PyAny>> {
    if let Some(o) = data_object(py, data) {
        return Ok(o);
    }
    let t = crate::tensor::Tensor::new(crate::tensor::Device::CPU, data.clone());
    crate::python::tensor::cpu_tensor_to_numpy(py, &t, false)
}

/// A backend's `compile=` function as a graph compiler.
pub struct PyCompiler {
    pub compile: Py<PyAny>,
    /// The dtypes the device narrows, and to what (`register_backend(narrow=True)`).
    pub narrowed: Vec<(&'static str, &'static str)>,
    /// `compile.settings`, where it has one: the backend's settings in words.
    pub settings: Option<Py<PyAny>>,
}

impl GraphCompiler for PyCompiler {
    fn device_dtype(&self, dtype: &str) -> Option<&'static str> {
        self.narrowed
            .iter()
            .find(|(from, _)| *from == dtype)
            .map(|(_, to)| *to)
    }

    fn settings(&self) -> Result<String> {
        let Some(settings) = &self.settings else {
            return Ok(String::new());
        };
        Python::attach(|py| {
            settings
                .bind(py)
                .call0()
                .and_then(|s| s.extract::<String>())
                .map_err(from_pyerr)
        })
    }

    fn compile(&self, graph: &Arc<Graph>) -> Result<Arc<dyn CompiledGraph>> {
        Python::attach(|py| {
            let g = Bound::new(
                py,
                PyGraph {
                    graph: graph.clone(),
                },
            )
            .map_err(from_pyerr)?;
            let f = self.compile.bind(py).call1((g,)).map_err(from_pyerr)?;
            if !f.is_callable() {
                return Err(Error::Fallback(format!(
                    "the compile function of backend '{}' returned a {}, not a function of the input payloads",
                    graph.backend,
                    f.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                )));
            }
            // A function opts in to `donate=` by having the attribute `donates` (its value is
            // read at each run where a payload may be consumed).
            let donates = f.hasattr(pyo3::intern!(py, "donates")).unwrap_or(false);
            Ok(Arc::new(PyCompiled {
                f: f.unbind(),
                device: graph.device,
                donates,
                input_bytes: graph.inputs.iter().map(meta_bytes).collect(),
            }) as Arc<dyn CompiledGraph>)
        })
    }
}

/// A compiled graph: the Python function `compile` returned.
///
/// A function whose attribute `donates` is true (any size) or an int (the least bytes of a
/// payload it consumes) is given `donate=`, a list of one bool per payload, where any payload
/// may be consumed: true for a payload that nothing holds but the call (boxfall's core found
/// no other holder of it, and Python none of the object, so no array the user or a cache holds
/// is ever offered), of an output's dtype and shape, and of the least bytes or more. It may
/// consume those (`jax.jit`'s `donate_argnums`), and sets to false, before it returns or
/// raises, the entries of those it kept: where it raises, the ones left true are taken as
/// consumed (`CompiledGraph::run_donating`). The attribute is read at each such run, so its
/// owner may change it; where none is offered, the function is called without `donate=`, as
/// one that does not donate is.
///
/// A function whose attribute `runs_ahead` is true may be called ahead, while its graph is
/// still being recorded, and its results let go unread (`CompiledGraph::runs_ahead`).
struct PyCompiled {
    f: Py<PyAny>,
    device: crate::tensor::Device,
    donates: bool,
    /// Each input's bytes, from the graph's dtypes and shapes (a cached program runs only
    /// graphs of its structure), where its dtype's size is known: read at a run that may
    /// donate without asking the payload.
    input_bytes: Vec<Option<usize>>,
}

/// The references to a payload's object while it is among the arguments made for a program's
/// call: the payload's own (`PyPayload`) and the argument's. One more is a holder elsewhere.
const CALL_REFERENCES: isize = 2;

impl PyCompiled {
    /// The program's arguments (the payloads, then the scalar inputs' values), called with
    /// `donate` where given, and its results.
    fn call(
        &self,
        inputs: &[TensorData],
        scalars: &[IValue],
        mut donate: Option<&mut [bool]>,
    ) -> Result<Vec<TensorData>> {
        Python::attach(|py| {
            let mut args = inputs
                .iter()
                .map(|d| payload_of(py, d))
                .collect::<PyResult<Vec<_>>>()
                .map_err(from_pyerr)?;
            if let Some(donate) = donate.as_deref_mut() {
                // The attribute is read only where something may be offered (a sync without an
                // in-place write reads nothing more than before).
                let least = if donate.contains(&true) {
                    least_bytes(self.f.bind(py))
                } else {
                    None
                };
                // Under the GIL from here to the call: no Python code can take a new reference
                // to an object that has none elsewhere now. Each `args[j]` is a reference.
                for ((d, o), bytes) in donate.iter_mut().zip(&args).zip(&self.input_bytes) {
                    *d = *d
                        && least.is_some_and(|n| n == 0 || bytes.is_none_or(|b| b >= n))
                        && refcnt(o) == CALL_REFERENCES;
                }
            }
            for v in scalars {
                args.push(
                    to_py(py, v, &Passed::default(), TensorStyle::Caller).map_err(from_pyerr)?,
                );
            }
            let args = PyList::new(py, args).map_err(from_pyerr)?;
            let outs = match donate {
                None => self.f.bind(py).call1((args,)),
                Some(donate) if !donate.contains(&true) => self.f.bind(py).call1((args,)),
                Some(donate) => {
                    let given = PyList::new(py, donate.iter()).map_err(from_pyerr)?;
                    let kwargs = [("donate", &given)].into_py_dict(py).map_err(from_pyerr)?;
                    let outs = self.f.bind(py).call((args,), Some(&kwargs));
                    // What the function kept (it sets those false), whether or not it raised;
                    // an entry that cannot be read is taken as consumed.
                    for (j, d) in donate.iter_mut().enumerate() {
                        *d = *d
                            && given
                                .get_item(j)
                                .map_or(true, |v| v.is_truthy().unwrap_or(true));
                    }
                    outs
                }
            }
            .map_err(from_pyerr)?;
            let outs = outs.try_iter().map_err(from_pyerr)?;
            outs.map(|o| {
                let o = o.map_err(from_pyerr)?;
                Ok(object_tensor(self.device, &o).data())
            })
            .collect()
        })
    }
}

impl CompiledGraph for PyCompiled {
    fn run(&self, inputs: &[TensorData], scalars: &[IValue]) -> Result<Vec<TensorData>> {
        self.call(inputs, scalars, None)
    }

    fn run_donating(
        &self,
        inputs: &[TensorData],
        scalars: &[IValue],
        donate: &mut [bool],
    ) -> Result<Vec<TensorData>> {
        if !self.donates {
            donate.fill(false);
            return self.call(inputs, scalars, None);
        }
        self.call(inputs, scalars, Some(donate))
    }

    /// The function's attribute `runs_ahead`, read each time (its owner sets it once it knows:
    /// JAX's program once traced, where it finds whether it has a host callback); none is
    /// false.
    fn runs_ahead(&self) -> bool {
        Python::attach(|py| {
            self.f
                .bind(py)
                .getattr(pyo3::intern!(py, "runs_ahead"))
                .and_then(|v| v.is_truthy())
                .unwrap_or(false)
        })
    }

    /// Where the function's attribute `checks_results` is true (read each time: JAX's program
    /// sets it once traced, where a kernel checks its values), `f.check_results(payloads)`
    /// with the run's output payloads; what it raises fails the run.
    fn check_results(&self, outs: &[TensorData]) -> Result<()> {
        Python::attach(|py| {
            let f = self.f.bind(py);
            let checks = f
                .getattr(pyo3::intern!(py, "checks_results"))
                .and_then(|v| v.is_truthy())
                .unwrap_or(false);
            if !checks {
                return Ok(());
            }
            let payloads = outs
                .iter()
                .map(|d| payload_of(py, d))
                .collect::<PyResult<Vec<_>>>()
                .map_err(from_pyerr)?;
            let payloads = PyList::new(py, payloads).map_err(from_pyerr)?;
            f.call_method1(pyo3::intern!(py, "check_results"), (payloads,))
                .map(drop)
                .map_err(from_pyerr)
        })
    }
}

/// The least bytes of a payload a compiled function consumes, from its attribute `donates`:
/// 0 for `True` (any size), the number for an int, `None` (it consumes none) for anything
/// else false or unreadable.
fn least_bytes(f: &Bound<'_, PyAny>) -> Option<usize> {
    let d = f.getattr(pyo3::intern!(f.py(), "donates")).ok()?;
    // A bool is an int in Python: `True` says any size, not one byte.
    if d.is_instance_of::<pyo3::types::PyBool>() {
        return d.is_truthy().ok()?.then_some(0);
    }
    d.extract::<usize>().ok()
}

/// The bytes of a tensor of `m`'s dtype and shape, where its dtype's size is known (host
/// memory's dtypes, and the 16-bit floats of devices; another's payload is offered at any size).
fn meta_bytes(m: &crate::tensor::TensorMeta) -> Option<usize> {
    let item = match m.dtype.as_ref() {
        "float16" | "bfloat16" => 2,
        name => crate::tensor::DType::from_name(name)?.size(),
    };
    Some(m.shape.iter().product::<usize>() * item)
}

/// The site of a graph's compile: the first Python frame outside boxfall's package
/// (`"fit.py:42"`), where the sync that compiles happened (the call site a recompile's reason names).
/// Runs at compiles only, never per call.
pub fn python_site() -> Option<String> {
    Python::attach(|py| {
        let init: String = py
            .import("boxfall")
            .ok()?
            .getattr("__file__")
            .ok()?
            .extract()
            .ok()?;
        let package = std::path::Path::new(&init).parent()?;
        let mut frame = py
            .import("sys")
            .ok()?
            .call_method1("_getframe", (0,))
            .ok()?;
        while !frame.is_none() {
            let file: String = frame
                .getattr("f_code")
                .and_then(|c| c.getattr("co_filename"))
                .and_then(|f| f.extract())
                .ok()?;
            if !std::path::Path::new(&file).starts_with(package) {
                let line: u32 = frame.getattr("f_lineno").and_then(|l| l.extract()).ok()?;
                return Some(format!("{file}:{line}"));
            }
            frame = frame.getattr("f_back").ok()?;
        }
        None
    })
}

/// Warns of a result narrowed in graph mode with a `bf.NarrowingWarning`, as eager mode does.
pub fn warn_narrowed(message: &str) -> Result<()> {
    Python::attach(|py| crate::python::errors::warn_as(py, "NarrowingWarning", message))
}

/// A copy of the Python exception a failed pending tensor holds (`graph::set_error_copier`):
/// what the sync stores, and what each read of the tensor raises. `copy.copy` of it, with a
/// list of its notes of its own, and without its traceback, cause or context, whose frames
/// link (`f_back`) to the frames that were running when it was raised, and so may hold the
/// tensor: a cycle through Rust that no collector sees (the stored exception, raised, would
/// also take each reader's frames). The traceback becomes a note, where it had one. The
/// exception itself where it cannot be copied; any other error, cloned.
pub fn copy_failure(e: &Error) -> Error {
    let Error::Foreign { message, payload } = e else {
        return e.clone();
    };
    let Some(original) = payload.downcast_ref::<PyErrPayload>() else {
        return e.clone();
    };
    Python::attach(|py| {
        let value = original.0.value(py);
        let copied = || -> PyResult<Bound<'_, PyAny>> {
            let copy = py.import("copy")?.call_method1("copy", (value,))?;
            if !copy.get_type().is(value.get_type()) {
                return Err(pyo3::exceptions::PyTypeError::new_err("not a copy"));
            }
            let notes = match value.getattr("__notes__") {
                Ok(notes) => PyList::new(py, notes.try_iter()?.flatten())?,
                Err(_) => PyList::empty(py),
            };
            let tb = value.getattr("__traceback__")?;
            if !tb.is_none() {
                let lines = py
                    .import("traceback")?
                    .call_method1("format_tb", (tb,))?
                    .extract::<Vec<String>>()?;
                notes.append(format!(
                    "where it was raised (graph mode keeps the error without its frames):\n{}",
                    lines.concat().trim_end()
                ))?;
            }
            copy.setattr("__notes__", notes)?;
            for name in ["__traceback__", "__cause__", "__context__"] {
                copy.setattr(name, py.None())?;
            }
            Ok(copy)
        };
        match copied() {
            Ok(copy) => {
                let mut again = ForeignError::new(PyErrPayload(PyErr::from_value(copy)));
                for note in payload.notes() {
                    again.add_note(note.clone());
                }
                Error::Foreign {
                    message: message.clone(),
                    payload: again,
                }
            }
            Err(_) => e.clone(),
        }
    })
}

/// Computes every pending tensor of this thread (`bf.sync()`). Where a node of a graph fails
/// (its program failed, and the node failed run alone), the tensors computed from it hold its
/// error, raised again at each of their reads, and the rest are computed: `bf.sync()` raises
/// the first such error once every graph was synced.
#[pyfunction]
pub fn sync(py: Python<'_>) -> PyResult<()> {
    crate::graph::sync("sync").py(py)
}

/// The most nodes a graph of `backend` records before it is cut (`bf.graph.limit`).
#[pyfunction]
pub fn graph_limit(py: Python<'_>, backend: &str) -> PyResult<usize> {
    let key = DispatchKey::from_name(backend).py(py)?;
    Ok(crate::graph::graph_limit(key))
}

/// Sets the most nodes a graph of `backend` records before it is cut (`bf.graph.set_limit`).
#[pyfunction]
pub fn set_graph_limit(py: Python<'_>, backend: &str, nodes: usize) -> PyResult<()> {
    let key = DispatchKey::from_name(backend).py(py)?;
    crate::graph::set_graph_limit(key, nodes).py(py)
}

/// The bits of the `Graph` key (0 before any graph backend): what `bf.eager()` excludes.
#[pyfunction]
pub fn graph_key_bits() -> u64 {
    crate::graph::graph_keys().0
}

/// This thread's pending graphs in words (`bf.graph.dump()`).
#[pyfunction]
pub fn graph_dump() -> String {
    let graphs = crate::graph::pending_graphs();
    if graphs.is_empty() {
        return "no pending graph".into();
    }
    graphs
        .iter()
        .map(Graph::describe)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Graph mode's figures (`bf.metrics.graphs()`).
#[pyfunction]
pub fn graph_metrics(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let f = crate::graph::graph_metrics();
    let d = PyDict::new(py);
    d.set_item("compiled", f.compiled)?;
    d.set_item("cache_hits", f.cache_hits)?;
    d.set_item("compile_s", f.compile_ns as f64 * 1e-9)?;
    d.set_item("execute_s", f.execute_ns as f64 * 1e-9)?;
    d.set_item("graphs_run", f.graphs_run)?;
    d.set_item("nodes", f.nodes)?;
    d.set_item("max_nodes", f.max_nodes)?;
    d.set_item("donated", f.donated)?;
    let per = if f.graphs_run == 0 {
        0.0
    } else {
        f.nodes as f64 / f.graphs_run as f64
    };
    d.set_item("nodes_per_graph", per)?;
    d.set_item("ran_ahead", f.ran_ahead)?;
    d.set_item("ahead_missed", f.ahead_missed)?;
    d.set_item("failures", f.failures)?;
    d.set_item("syncs", f.syncs.into_py_dict(py)?)?;
    d.set_item("breaks", f.breaks.into_py_dict(py)?)?;
    d.set_item("recompiles", f.recompiles)?;
    Ok(d)
}

/// Sets graph mode's figures back to zero.
#[pyfunction]
pub fn reset_graph_metrics() {
    crate::graph::reset_graph_metrics();
}

/// Whether a tensor is pending (its values not computed yet).
#[pyfunction]
pub fn is_pending(t: PyRef<'_, PyTensor>) -> bool {
    crate::graph::is_pending(&t.inner)
}
