//! `bf.Library`, and the markers `bf.fallthrough` and `bf.cpu_fallback`.

use std::sync::Arc;

use pyo3::exceptions::{PyResourceWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::pyclass::{PyTraverseError, PyVisit};

use pyo3::types::{PyDict, PyList, PyTuple};

use super::convert::{bind, returns_to_py, to_ivalue, to_py, Passed, TensorStyle};
use super::errors::{new_err, IntoPy};
use super::kernel::python_kernel;
use super::keyset::PyKeySet;
use super::ops::{argument_error, schema_of, PyOpOverload};
use super::py_kernel::PyKernel;
use super::recursion;
use crate::error::Error;
use crate::fallback::{CpuFallback, ViewPolicy};
use crate::ivalue::Stack;
use crate::kernel::KernelFunction;
use crate::key::DispatchKey;
use crate::library::{Library, LibraryKind};

/// The fallthrough kernel: registered for a key, the key is skipped.
#[pyclass(name = "Fallthrough", module = "boxfall", frozen)]
pub struct PyFallthrough;

#[pymethods]
impl PyFallthrough {
    fn __repr__(&self) -> &'static str {
        "bf.fallthrough"
    }
}

/// The boxed CPU fallback: register it (`fb.fallback(bf.cpu_fallback, "Accel")`), or call it,
/// `bf.cpu_fallback(op, keys, stack)`, from a boxed fallback of a backend's own.
/// `CpuFallback(views="copy")` copies view operators (with a warning) instead of refusing them.
#[pyclass(name = "CpuFallback", module = "boxfall", frozen)]
pub struct PyCpuFallback {
    config: CpuFallback,
    /// The configuration's kernel, made once: what every registration and every
    /// `bf.call_fallback` of this object runs, so that no call makes a kernel.
    kernel: KernelFunction,
}

impl PyCpuFallback {
    /// The object of `config`, with its kernel.
    pub fn new(config: CpuFallback) -> PyCpuFallback {
        PyCpuFallback {
            kernel: config.kernel(),
            config,
        }
    }
}

#[pymethods]
impl PyCpuFallback {
    #[new]
    #[pyo3(signature = (*, views="refuse"))]
    fn py_new(py: Python<'_>, views: &str) -> PyResult<Self> {
        let views = match views {
            "refuse" => ViewPolicy::Refuse,
            "copy" => ViewPolicy::Copy,
            other => {
                return Err(new_err(
                    py,
                    "BoxfallError",
                    format!("views must be \"refuse\" or \"copy\", not {other:?}"),
                ))
            }
        };
        Ok(PyCpuFallback::new(CpuFallback { views }))
    }

    /// "refuse" or "copy".
    #[getter]
    fn views(&self) -> &'static str {
        match self.config.views {
            ViewPolicy::Refuse => "refuse",
            ViewPolicy::Copy => "copy",
        }
    }

    /// Runs the CPU fallback on a boxed call, as a backend's own boxed fallback does after
    /// logging or counting: `stack` holds every argument (defaults filled), as the fallback
    /// received it, and holds the returns afterwards. The policy, the counters and the
    /// atomicity are the registered fallback's: a CPU kernel that fails leaves the arguments
    /// and the stack as they were.
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        op: PyRef<'py, PyOpOverload>,
        keys: PyRef<'py, PyKeySet>,
        stack: &Bound<'py, PyList>,
    ) -> PyResult<()> {
        let handle = &op.handle;
        let schema = handle.schema().py(py)?;
        let args = &schema.schema.arguments;
        let argument_error = |message: String| Error::Argument {
            op: handle.name().to_string(),
            message,
            schema: schema.text.clone(),
        };
        if stack.len() != args.len() {
            return Err(argument_error(format!(
                "the CPU fallback takes the stack a boxed fallback receives, all {} arguments (defaults filled), not {} values",
                args.len(),
                stack.len()
            )))
            .py(py);
        }
        let mut passed = Passed::default();
        let mut s: Stack = Vec::with_capacity(args.len());
        for (a, o) in args.iter().zip(stack.iter()) {
            let v = to_ivalue(&o, &a.ty, &mut passed)
                .map_err(|m| argument_error(format!("argument '{}': {m}", a.name)))
                .py(py)?;
            s.push(v);
        }
        self.config.call(handle, keys.0, &mut s).py(py)?;
        let out = s
            .iter()
            .map(|v| to_py(py, v, &passed, TensorStyle::Caller))
            .collect::<PyResult<Vec<_>>>()?;
        // Replaced only once every return is converted: a failure leaves the stack as it was.
        stack.del_slice(0, stack.len())?;
        for o in out {
            stack.append(o)?;
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("bf.CpuFallback(views={:?})", self.views())
    }
}

/// The kernel a Python object stands for: `bf.fallthrough`, a `bf.CpuFallback`, or a function
/// (boxed `fn(op, keys, stack)` when `boxed`), with the function's payload for a function.
pub fn kernel_from(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    boxed: bool,
) -> PyResult<(KernelFunction, Option<Arc<PyKernel>>)> {
    if obj.cast::<PyFallthrough>().is_ok() {
        return Ok((KernelFunction::fallthrough(), None));
    }
    if let Ok(c) = obj.cast::<PyCpuFallback>() {
        return Ok((c.get().kernel.clone(), None));
    }
    if !obj.is_callable() {
        return Err(new_err(
            py,
            "RegistrationError",
            format!(
                "a kernel must be callable, bf.fallthrough or a bf.CpuFallback, not {}",
                obj.get_type().name()?
            ),
        ));
    }
    let (kernel, payload) = python_kernel(obj.clone().unbind(), boxed);
    Ok((kernel, Some(payload)))
}

/// A Python kernel registered for `key` as it is to run (`backend::backend_kernel`): with
/// residency's steps on a lazy backend's key, under the backend's lock when it was registered
/// with `thread_safe=False`. `bf.fallthrough` runs nothing, and `bf.cpu_fallback` takes the
/// lock in the hooks it calls.
fn run_as<'py>(
    py: Python<'py>,
    key: DispatchKey,
    func: &Bound<'py, PyAny>,
    op: Option<crate::dispatcher::OperatorHandle>,
    boxed: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if func.cast::<PyFallthrough>().is_ok() || func.cast::<PyCpuFallback>().is_ok() {
        return Ok(func.clone());
    }
    super::backend_kernel::backend_kernel(py, key, func, op, boxed)
}

fn key(py: Python<'_>, name: &str) -> PyResult<DispatchKey> {
    DispatchKey::from_name(name).py(py)
}

/// An operator's name from a name or a `bf.OpOverload` (`bf.ops.demo.relu.default`), as
/// torch.library takes either.
fn op_name(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(op) = obj.cast::<super::ops::PyOpOverload>() {
        return Ok(op.get().handle.name().to_string());
    }
    obj.extract::<String>().map_err(|_| {
        let type_name = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        pyo3::exceptions::PyTypeError::new_err(format!(
            "an operator is a name such as 'demo::add.Tensor' or a bf.OpOverload \
             (bf.ops.demo.add.Tensor), not {type_name}"
        ))
    })
}

/// Registrations of one namespace: definitions, kernels and fallbacks, undone together by
/// `close()` or at the end of a `with` block.
///
/// A library collected while still open undoes its registrations too, and warns with a
/// `ResourceWarning` that names the library and what it undid, as an unclosed file warns: keep
/// a reference to the library for as long as its registrations are needed. The garbage
/// collector sees the Python kernels a library registered, so a kernel that refers back to
/// its library does not keep it alive forever.
#[pyclass(name = "Library", module = "boxfall", weakref)]
pub struct PyLibrary {
    lib: Option<Library>,
    ns: String,
    kind: String,
    /// The Python kernels and fallbacks it registered, while it holds them. A kernel's function
    /// is referenced from the global registry, which the garbage collector cannot see; the
    /// library shows it instead (`__traverse__`), so that a function that refers back to its
    /// library (`l.impl("f", lambda x: (l, x)[1])`) makes a cycle the collector can break.
    kernels: Vec<Arc<PyKernel>>,
    /// What it registered, in order, for the warning of a library collected while open.
    made: Vec<String>,
    /// Kept for the life of the process (`@bf.impl`): it goes at exit without a warning.
    for_process_life: bool,
}

impl PyLibrary {
    fn lib(&mut self, py: Python<'_>) -> PyResult<&mut Library> {
        let ns = self.ns.clone();
        self.lib.as_mut().ok_or_else(|| {
            new_err(
                py,
                "RegistrationError",
                format!("Library(\"{ns}\") is closed"),
            )
        })
    }

    /// Registers `kernel` through `register`, remembering its Python function (`payload`, if it
    /// has one) once the registration stands.
    fn register(
        &mut self,
        py: Python<'_>,
        (kernel, payload): (KernelFunction, Option<Arc<PyKernel>>),
        what: String,
        register: impl FnOnce(&mut Library, KernelFunction) -> crate::Result<()>,
    ) -> PyResult<()> {
        register(self.lib(py)?, kernel).py(py)?;
        self.kernels.extend(payload);
        self.made.push(what);
        Ok(())
    }

    /// Undoes a library that goes without having been closed (collected, or broken out of a
    /// cycle by the garbage collector): warns, closes it, and takes the functions out of its
    /// kernels, so that what `__traverse__` showed goes now, whoever still holds a kernel.
    fn collected(&mut self) {
        let Some(mut lib) = self.lib.take() else {
            return;
        };
        if lib.is_open() && !self.for_process_life {
            Python::attach(|py| self.warn_collected(py));
        }
        lib.close();
        let funcs: Vec<_> =
            Python::attach(|py| self.kernels.drain(..).filter_map(|k| k.take(py)).collect());
        self.made.clear();
        drop(funcs);
    }

    fn warn_collected(&self, py: Python<'_>) {
        const SHOWN: usize = 8;
        let mut undid = self
            .made
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if self.made.len() > SHOWN {
            undid += &format!(" and {} more", self.made.len() - SHOWN);
        }
        let message = format!(
            "bf.Library({:?}, {:?}) was collected while open, which undid its registrations: \
             {undid}; keep a reference to the library for as long as they are needed, and \
             close() it (or use it in a 'with' block) to end them",
            self.ns, self.kind
        );
        // This may run while an exception is being raised (a frame's locals going) or inside
        // the garbage collector: the warning must not disturb what is in flight, and one that a
        // filter turns into an error can only be reported, as an unclosed file's is.
        let pending = PyErr::take(py);
        let category = py.get_type::<PyResourceWarning>();
        let warned = std::ffi::CString::new(message)
            .map_err(|e| PyValueError::new_err(e.to_string()))
            .and_then(|m| PyErr::warn(py, category.as_any(), &m, 1));
        if let Err(e) = warned {
            e.write_unraisable(py, None);
        }
        if let Some(e) = pending {
            e.restore(py);
        }
    }
}

impl Drop for PyLibrary {
    fn drop(&mut self) {
        self.collected();
    }
}

#[pymethods]
impl PyLibrary {
    #[new]
    fn new(py: Python<'_>, ns: &str, kind: &str) -> PyResult<Self> {
        let k: LibraryKind = kind.parse().py(py)?;
        let lib = Library::new(ns, k).py(py)?;
        let made = if k == LibraryKind::Def {
            vec![format!("its claim on namespace '{ns}'")]
        } else {
            Vec::new()
        };
        Ok(PyLibrary {
            lib: Some(lib),
            ns: ns.to_string(),
            kind: kind.to_string(),
            kernels: Vec::new(),
            made,
            for_process_life: false,
        })
    }

    /// The namespace.
    #[getter]
    fn ns(&self) -> &str {
        &self.ns
    }

    /// "DEF", "IMPL" or "FRAGMENT".
    #[getter]
    fn kind(&self) -> &str {
        &self.kind
    }

    /// Defines an operator; returns its name (`ns::op.overload`). `tags` names what the
    /// operator says of itself beyond its schema, as c10's tags do (`OpOverload.tags`):
    /// `"default_dtypes"`: the dtypes of its results are the library's choice (indices,
    /// counts), so a device lacking the one its CPU kernel made gets its own default of that
    /// kind (int32 for int64) instead of a `DTypeError`. An unknown tag is a `SchemaError`,
    /// and nothing is defined.
    #[pyo3(signature = (schema, *, tags=None))]
    fn define(
        &mut self,
        py: Python<'_>,
        schema: &str,
        tags: Option<Vec<String>>,
    ) -> PyResult<String> {
        let tags = tags
            .unwrap_or_default()
            .iter()
            .map(|t| {
                crate::kernel::Tag::from_name(t).ok_or_else(|| {
                    new_err(
                        py,
                        "SchemaError",
                        format!(
                            "the definition of '{schema}' names the tag {t:?}, which is none of {:?}; nothing was defined",
                            crate::kernel::Tag::ALL.map(|t| t.name())
                        ),
                    )
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let op = self.lib(py)?.define(schema).py(py)?;
        for tag in crate::kernel::Tag::ALL {
            op.set_tag(tag, tags.contains(&tag));
        }
        self.made.push(format!("the definition of '{}'", op.name()));
        Ok(op.name().to_string())
    }

    /// Registers `fn` as the kernel of `name` (a name, or a `bf.OpOverload`) for `dispatch_key`.
    #[pyo3(signature = (name, r#fn, dispatch_key="CPU", *, boxed=false, allow_override=false))]
    fn r#impl(
        &mut self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        r#fn: &Bound<'_, PyAny>,
        dispatch_key: &str,
        boxed: bool,
        allow_override: bool,
    ) -> PyResult<()> {
        let name = op_name(name)?;
        let name = name.as_str();
        let k = key(py, dispatch_key)?;
        let qualified = self.lib(py)?.qualify(name);
        let op = crate::dispatcher::Dispatcher::lookup(&qualified);
        let kernel = kernel_from(py, &run_as(py, k, r#fn, op, boxed)?, boxed)?;
        let what = format!("the '{k}' kernel of '{qualified}'");
        self.register(py, kernel, what, |lib, kernel| {
            lib.impl_kernel(name, k, kernel, allow_override)
        })
    }

    /// Registers a backend fallback for `dispatch_key` (namespace "_" only): `bf.cpu_fallback`,
    /// `bf.fallthrough`, or a Python boxed `fn(op, keys, stack)`.
    #[pyo3(signature = (r#fn, dispatch_key))]
    fn fallback(
        &mut self,
        py: Python<'_>,
        r#fn: &Bound<'_, PyAny>,
        dispatch_key: &str,
    ) -> PyResult<()> {
        let k = key(py, dispatch_key)?;
        let kernel = kernel_from(py, &run_as(py, k, r#fn, None, true)?, true)?;
        let what = format!("the '{k}' fallback");
        self.register(py, kernel, what, |lib, kernel| lib.fallback(k, kernel))
    }

    /// Registers Native's Rust kernels for this library's operators that have one of the
    /// schemas Native implements; returns their names.
    fn register_native_kernels(&mut self, py: Python<'_>) -> PyResult<Vec<String>> {
        let names = crate::native::register_kernels(self.lib(py)?).py(py)?;
        let made = names.iter().map(|n| format!("Native's kernel of '{n}'"));
        self.made.extend(made);
        Ok(names)
    }

    /// Registers Native's Rust kernels for this library's operators that have one of the
    /// array API standard's schemas Native implements (`boxfall.array_api`'s); returns their
    /// names.
    fn register_native_array_api_kernels(&mut self, py: Python<'_>) -> PyResult<Vec<String>> {
        let names = crate::native::register_array_api_kernels(self.lib(py)?).py(py)?;
        let made = names.iter().map(|n| format!("Native's kernel of '{n}'"));
        self.made.extend(made);
        Ok(names)
    }

    /// Registers `fn` as the shape rule of `name` (a name, or a `bf.OpOverload`, of this
    /// library's namespace), as `torch.library.register_fake` does: graph mode asks it for
    /// the outputs of a call it records. `fn` gets a `bf.TensorMeta` per tensor argument and
    /// the other arguments as values, and returns the outputs' `bf.TensorMeta`s (one, or a
    /// tuple for several returns), or raises `bf.DataDependentError` where they depend on the
    /// values (the call then breaks the graph). Undone when the library closes.
    #[pyo3(signature = (name, r#fn))]
    fn register_shape_rule(
        &mut self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        r#fn: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let name = op_name(name)?;
        let qualified = self.lib(py)?.qualify(&name);
        let rule = super::graph_rules::shape_rule_from(py, &qualified, r#fn)?;
        self.lib(py)?
            .register_shape_rule(&name, Arc::new(rule))
            .py(py)?;
        self.made.push(format!("the shape rule of '{qualified}'"));
        Ok(())
    }

    /// Registers the array API's shape rules (Rust's, `boxfall.array_api`'s operators') for
    /// this library's operators that have one; returns their names.
    fn register_array_api_shape_rules(&mut self, py: Python<'_>) -> PyResult<Vec<String>> {
        let names = self.lib(py)?.register_array_api_shape_rules().py(py)?;
        self.made
            .extend(names.iter().map(|n| format!("the shape rule of '{n}'")));
        Ok(names)
    }

    /// Removes every registration of this library (no warning: it was closed on purpose).
    fn close(&mut self) {
        if let Some(mut lib) = self.lib.take() {
            lib.close();
        }
        // Calls on their way to one of its kernels keep the function: only a collected
        // library takes it out.
        self.kernels.clear();
        self.made.clear();
    }

    /// Marks the library as kept for the life of the process (`@bf.impl`'s): it then goes at
    /// interpreter exit without a `ResourceWarning`.
    fn _for_process_life(&mut self) {
        self.for_process_life = true;
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for k in &self.kernels {
            k.visit(&visit)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.collected();
    }

    /// Whether the library is still open.
    #[getter]
    fn is_open(&self) -> bool {
        self.lib.is_some()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "bf.Library({:?}, {:?}{})",
            self.ns,
            self.kind,
            if self.lib.is_some() { "" } else { ", closed" }
        )
    }
}

/// `bf.call_fallback(fallback, op, *args, **kwargs)`: runs a boxed fallback from typed code.
/// `fallback` and `op` are positional-only, so that every keyword goes to the operator, an
/// argument named `op` or `fallback` included.
#[pyfunction]
#[pyo3(signature = (fallback, op, /, *args, **kwargs))]
pub fn call_fallback<'py>(
    py: Python<'py>,
    fallback: &Bound<'py, PyAny>,
    op: PyRef<'py, PyOpOverload>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let _level = recursion::enter(py)?;
    let handle = op.handle.clone();
    let schema = schema_of(py, &handle)?;
    let mut passed = Passed::default();
    let mut stack = bind(&schema, args, kwargs, &mut passed)
        .map_err(|m| argument_error(&handle, &schema, m))
        .py(py)?;
    let keys = handle.call_keys(&stack).py(py)?;
    // A `bf.CpuFallback` runs the kernel it holds; any other object is made a kernel here.
    let held = fallback.cast::<PyCpuFallback>().ok();
    let made;
    let kernel = match &held {
        Some(c) => &c.get().kernel,
        None => {
            made = kernel_from(py, fallback, true)?.0;
            &made
        }
    };
    crate::fallback::call_fallback(kernel, &handle, keys, &mut stack).py(py)?;
    returns_to_py(py, &stack, &passed)
}
