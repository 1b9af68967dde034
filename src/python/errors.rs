//! The one place that maps `boxfall::Error` onto the Python exception tree of
//! `boxfall._errors`, and Python exceptions back into the core.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::error::{Error, ForeignError};

/// A Python exception carried through the core.
pub struct PyErrPayload(pub PyErr);

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let m = MODULE.get_or_try_init(py, || py.import("boxfall._errors").map(Bound::unbind))?;
    m.bind(py)
        .getattr(name)?
        .cast_into::<PyType>()
        .map_err(Into::into)
}

/// A new exception of the named class of `boxfall._errors`.
pub fn new_err(py: Python<'_>, name: &str, message: String) -> PyErr {
    match class(py, name) {
        Ok(t) => PyErr::from_type(t, message),
        Err(e) => e,
    }
}

/// The Python exception for a core error.
pub fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    let name = match &e {
        Error::Foreign { payload, .. } => {
            if let Some(p) = payload.downcast_ref::<PyErrPayload>() {
                let mut err = p.0.clone_ref(py);
                for note in payload.notes() {
                    err = with_note(py, err, note.clone());
                }
                return err;
            }
            "BoxfallError"
        }
        Error::Schema(_) => "SchemaError",
        Error::Registration(_) => "RegistrationError",
        Error::UnknownOperator { .. } | Error::UnknownNamespace { .. } => "UnknownOperatorError",
        Error::UnknownKey { .. } => "UnknownKeyError",
        Error::NoKernel { .. } => "NoKernelError",
        Error::Argument { .. } => "ArgumentError",
        Error::Fallback(_) => "FallbackError",
        Error::Kernel { .. } => "KernelError",
        Error::DType { .. } | Error::DeviceDType { .. } => "DTypeError",
        // As NumPy does for a request it cannot allocate.
        Error::OutOfMemory { .. } => {
            return pyo3::exceptions::PyMemoryError::new_err(e.to_string());
        }
    };
    new_err(py, name, e.to_string())
}

/// The class `to_pyerr` raises for an error of this kind (`metrics::Failure::kind`).
pub fn class_name_of_kind(kind: &str) -> &'static str {
    match kind {
        "Schema" => "SchemaError",
        "Registration" => "RegistrationError",
        "UnknownOperator" | "UnknownNamespace" => "UnknownOperatorError",
        "UnknownKey" => "UnknownKeyError",
        "NoKernel" => "NoKernelError",
        "Argument" => "ArgumentError",
        "Fallback" => "FallbackError",
        "Kernel" => "KernelError",
        "DType" => "DTypeError",
        "OutOfMemory" => "MemoryError",
        _ => "BoxfallError",
    }
}

/// A Python exception as a core error.
pub fn from_pyerr(e: PyErr) -> Error {
    Error::Foreign {
        message: e.to_string(),
        payload: ForeignError::new(PyErrPayload(e)),
    }
}

/// Adds a note (PEP 678) to a Python exception, unless it already carries that very note.
///
/// One exception object can pass the same kernel many times: a stored exception raised again,
/// or a recursion through kernels (a `RecursionError` crosses every level). Each text is added
/// once, so the notes stay bounded by the distinct (key, operator) pairs the exception crossed,
/// innermost first, and each of them still says where it went.
pub fn with_note(py: Python<'_>, e: PyErr, note: String) -> PyErr {
    let value = e.value(py);
    let present = value
        .getattr(pyo3::intern!(py, "__notes__"))
        .ok()
        .and_then(|notes| notes.cast_into::<pyo3::types::PyList>().ok())
        .is_some_and(|notes| notes.iter().any(|n| n.eq(note.as_str()).unwrap_or(false)));
    if !present {
        let _ = value.call_method1(pyo3::intern!(py, "add_note"), (note,));
    }
    e
}

/// `Result<T, Error>` into `PyResult<T>`.
pub trait IntoPy<T> {
    /// Maps the error.
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, Error> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_pyerr(py, e))
    }
}

/// Issues a warning of the class `category` of `boxfall._errors` (`"NarrowingWarning"`),
/// attributed to the user's frame as the fallback's are; a warning filter that makes it an
/// error fails the call with it.
pub fn warn_as(py: Python<'_>, category: &str, message: &str) -> crate::Result<()> {
    py.import("boxfall._errors")
        .and_then(|m| m.getattr("_warn"))
        .and_then(|f| f.call1((message, category)))
        .map(|_| ())
        .map_err(from_pyerr)
}
