//! `bf.Library`, and the markers `bf.fallthrough` and `bf.cpu_fallback`.

use pyo3::prelude::*;

use super::errors::{new_err, IntoPy};
use super::kernel::python_kernel;
use crate::fallback::{CpuFallback, ViewPolicy};
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

/// The boxed CPU fallback. `CpuFallback(views="copy")` copies view operators (with a warning)
/// instead of refusing them.
#[pyclass(name = "CpuFallback", module = "boxfall", frozen)]
pub struct PyCpuFallback {
    pub config: CpuFallback,
}

#[pymethods]
impl PyCpuFallback {
    #[new]
    #[pyo3(signature = (*, views="refuse"))]
    fn new(py: Python<'_>, views: &str) -> PyResult<Self> {
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
        Ok(PyCpuFallback {
            config: CpuFallback { views },
        })
    }

    /// "refuse" or "copy".
    #[getter]
    fn views(&self) -> &'static str {
        match self.config.views {
            ViewPolicy::Refuse => "refuse",
            ViewPolicy::Copy => "copy",
        }
    }

    fn __repr__(&self) -> String {
        format!("bf.CpuFallback(views={:?})", self.views())
    }
}

/// The kernel a Python object stands for: `bf.fallthrough`, a `bf.CpuFallback`, or a function
/// (boxed `fn(op, keys, stack)` when `boxed`).
pub fn kernel_from(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    boxed: bool,
) -> PyResult<KernelFunction> {
    if obj.cast::<PyFallthrough>().is_ok() {
        return Ok(KernelFunction::fallthrough());
    }
    if let Ok(c) = obj.cast::<PyCpuFallback>() {
        return Ok(c.get().config.kernel());
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
    Ok(python_kernel(obj.clone().unbind(), boxed))
}

fn key(py: Python<'_>, name: &str) -> PyResult<DispatchKey> {
    DispatchKey::from_name(name).py(py)
}

/// Registrations of one namespace, undone by `close()`, at the end of a `with` block, or when
/// the library is collected.
#[pyclass(name = "Library", module = "boxfall")]
pub struct PyLibrary {
    lib: Option<Library>,
    ns: String,
    kind: String,
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
}

#[pymethods]
impl PyLibrary {
    #[new]
    fn new(py: Python<'_>, ns: &str, kind: &str) -> PyResult<Self> {
        let k: LibraryKind = kind.parse().py(py)?;
        Ok(PyLibrary {
            lib: Some(Library::new(ns, k).py(py)?),
            ns: ns.to_string(),
            kind: kind.to_string(),
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

    /// Defines an operator; returns its name (`ns::op.overload`).
    fn define(&mut self, py: Python<'_>, schema: &str) -> PyResult<String> {
        let op = self.lib(py)?.define(schema).py(py)?;
        Ok(op.name().to_string())
    }

    /// Registers `fn` as the kernel of `name` for `dispatch_key`.
    #[pyo3(signature = (name, r#fn, dispatch_key="CPU", *, boxed=false, allow_override=false))]
    fn r#impl(
        &mut self,
        py: Python<'_>,
        name: &str,
        r#fn: &Bound<'_, PyAny>,
        dispatch_key: &str,
        boxed: bool,
        allow_override: bool,
    ) -> PyResult<()> {
        let k = key(py, dispatch_key)?;
        let kernel = kernel_from(py, r#fn, boxed)?;
        self.lib(py)?
            .impl_kernel(name, k, kernel, allow_override)
            .py(py)
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
        let kernel = kernel_from(py, r#fn, true)?;
        self.lib(py)?.fallback(k, kernel).py(py)
    }

    /// Registers Native's Rust kernels for this library's operators that have one of the
    /// schemas Native implements; returns their names.
    fn register_native_kernels(&mut self, py: Python<'_>) -> PyResult<Vec<String>> {
        crate::native::register_kernels(self.lib(py)?).py(py)
    }

    /// Removes every registration of this library.
    fn close(&mut self) {
        if let Some(mut lib) = self.lib.take() {
            lib.close();
        }
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
