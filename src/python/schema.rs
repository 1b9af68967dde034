//! `bf.parse_schema`, `FunctionSchema`, `Argument`, `AliasInfo`: read-only views of a parsed
//! schema (frozen classes around the core's values).
//!
//! `bf.parse_schema` keeps what the parser produced (the text and spans into it) and builds the
//! owned [`FunctionSchema`] only on the first access that needs more than the names: most
//! parsed schemas are only checked, or have their name read.

use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::PyList;

use super::errors::IntoPy;
use crate::schema::{AliasInfo, Argument, FunctionSchema, Syntax};

/// An alias annotation: `(a!)` is `AliasInfo(before=["a"], after=["a"], is_write=True)`.
#[pyclass(name = "AliasInfo", module = "boxfall", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyAliasInfo {
    #[pyo3(get)]
    before: Vec<String>,
    #[pyo3(get)]
    after: Vec<String>,
    #[pyo3(get)]
    is_write: bool,
}

#[pymethods]
impl PyAliasInfo {
    #[new]
    #[pyo3(signature = (before, after=None, is_write=false))]
    fn new(before: Vec<String>, after: Option<Vec<String>>, is_write: bool) -> Self {
        let after = after.unwrap_or_else(|| before.clone());
        PyAliasInfo {
            before,
            after,
            is_write,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "AliasInfo(before={:?}, after={:?}, is_write={})",
            self.before,
            self.after,
            if self.is_write { "True" } else { "False" }
        )
    }
}

impl From<&AliasInfo> for PyAliasInfo {
    fn from(a: &AliasInfo) -> Self {
        PyAliasInfo {
            before: a.before.clone(),
            after: a.after.clone(),
            is_write: a.is_write,
        }
    }
}

/// One argument or return of a schema.
#[pyclass(name = "Argument", module = "boxfall", frozen)]
pub struct PyArgument {
    arg: Argument,
}

#[pymethods]
impl PyArgument {
    /// The name (`""` for an unnamed return).
    #[getter]
    fn name(&self) -> &str {
        &self.arg.name
    }

    /// The type as written, without the alias annotation (`"Tensor"` for `Tensor(a!)`).
    #[getter]
    fn r#type(&self) -> String {
        self.arg.type_str()
    }

    /// The default as written (`"1"`, `"None"`, `"[0,1]"`), or None.
    #[getter]
    fn default(&self) -> Option<String> {
        self.arg.default.as_ref().map(|d| d.text.clone())
    }

    /// Whether it comes after `*`.
    #[getter]
    fn kwarg_only(&self) -> bool {
        self.arg.kwarg_only
    }

    /// The alias annotation, or None.
    #[getter]
    fn alias(&self) -> Option<PyAliasInfo> {
        self.arg.alias.as_ref().map(PyAliasInfo::from)
    }

    /// Whether the operator writes it (`(a!)`, also on a list's elements).
    #[getter]
    fn is_write(&self) -> bool {
        self.arg.is_write()
    }

    fn __repr__(&self) -> String {
        format!(
            "Argument({:?}, type={:?})",
            self.arg.name,
            self.arg.type_str()
        )
    }
}

/// A parsed operator schema; `str()` prints it as PyTorch does.
#[pyclass(name = "FunctionSchema", module = "boxfall", frozen)]
pub struct PyFunctionSchema {
    repr: Repr,
}

enum Repr {
    /// From an operator's own schema.
    Built(FunctionSchema),
    /// From `parse_schema`: the caller's text (kept, not copied), the parser's spans into it,
    /// and the owned schema once something needs it.
    Parsed {
        text: PyBackedStr,
        syntax: Syntax,
        built: OnceLock<FunctionSchema>,
    },
}

impl PyFunctionSchema {
    pub fn new(schema: FunctionSchema) -> Self {
        PyFunctionSchema {
            repr: Repr::Built(schema),
        }
    }

    /// The owned schema, built on first use for a parsed one.
    fn schema(&self) -> &FunctionSchema {
        match &self.repr {
            Repr::Built(schema) => schema,
            Repr::Parsed {
                text,
                syntax,
                built,
            } => built.get_or_init(|| syntax.to_schema(text)),
        }
    }

    /// The name and the overload name: spans of the parsed text, or the built schema's.
    fn names(&self) -> (&str, &str) {
        match &self.repr {
            Repr::Built(schema) => (&schema.name, &schema.overload_name),
            Repr::Parsed { text, syntax, .. } => (syntax.name.of(text), syntax.overload.of(text)),
        }
    }
}

#[pymethods]
impl PyFunctionSchema {
    /// `ns::op` (without the overload).
    #[getter]
    fn name(&self) -> &str {
        self.names().0
    }

    /// The overload name, `""` for the default overload.
    #[getter]
    fn overload_name(&self) -> &str {
        self.names().1
    }

    /// `ns::op` or `ns::op.overload`, as counters and errors name it.
    #[getter]
    fn operator_name(&self) -> String {
        let (name, overload) = self.names();
        if overload.is_empty() {
            name.to_owned()
        } else {
            format!("{name}.{overload}")
        }
    }

    /// Whether some argument is written (`(a!)`).
    #[getter]
    fn is_mutable(&self) -> bool {
        self.schema().is_mutable()
    }

    /// Whether the arguments end in `...`.
    #[getter]
    fn is_vararg(&self) -> bool {
        match &self.repr {
            Repr::Built(schema) => schema.is_vararg,
            Repr::Parsed { syntax, .. } => syntax.is_vararg,
        }
    }

    /// Whether the returns end in `...`.
    #[getter]
    fn is_varret(&self) -> bool {
        match &self.repr {
            Repr::Built(schema) => schema.is_varret,
            Repr::Parsed { syntax, .. } => syntax.is_varret,
        }
    }

    /// The arguments.
    #[getter]
    fn arguments<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        list(py, &self.schema().arguments)
    }

    /// The returns.
    #[getter]
    fn returns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        list(py, &self.schema().returns)
    }

    /// Indices of the arguments that hold tensors (Tensor, Tensor?, Tensor[], Tensor?[]).
    #[getter]
    fn tensor_arguments(&self) -> Vec<usize> {
        self.schema().info().tensor_args
    }

    /// Indices of the arguments the operator writes (`(a!)`, also on a list's elements).
    #[getter]
    fn written_arguments(&self) -> Vec<usize> {
        let info = self.schema().info();
        (0..info.args.len())
            .filter(|&i| info.args[i].is_write)
            .collect()
    }

    /// For each return, the index of the argument it aliases, or None.
    #[getter]
    fn return_aliases(&self) -> Vec<Option<usize>> {
        self.schema()
            .info()
            .returns
            .iter()
            .map(|r| r.aliases_arg)
            .collect()
    }

    /// Whether some return is a view of an argument (`Tensor(a)`, not written).
    #[getter]
    fn has_view_returns(&self) -> bool {
        self.schema().info().has_view_returns
    }

    fn __str__(&self) -> String {
        self.schema().to_string()
    }

    fn __repr__(&self) -> String {
        format!("FunctionSchema({:?})", self.schema().to_string())
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyFunctionSchema>()
            .is_ok_and(|o| o.get().schema() == self.schema())
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.schema().to_string().hash(&mut h);
        h.finish()
    }
}

fn list<'py>(py: Python<'py>, args: &[Argument]) -> PyResult<Bound<'py, PyList>> {
    let items = args
        .iter()
        .map(|a| Bound::new(py, PyArgument { arg: a.clone() }))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// Parses a schema (`"ns::op.overload(args) -> returns"`); a malformed one raises
/// `bf.SchemaError` showing the column and a caret.
#[pyfunction]
pub fn parse_schema(py: Python<'_>, text: PyBackedStr) -> PyResult<Bound<'_, PyFunctionSchema>> {
    // Matched rather than mapped: the Syntax is not moved through two more Results.
    let syntax = match Syntax::parse(&text) {
        Ok(syntax) => syntax,
        Err(e) => return Err(crate::Error::from(e)).py(py),
    };
    let schema = Bound::new(
        py,
        PyFunctionSchema {
            repr: Repr::Parsed {
                text,
                syntax,
                built: OnceLock::new(),
            },
        },
    )?;
    // SAFETY: `schema` is a live object this thread just created, and the thread is attached
    // to the interpreter. It holds no Python object but its text, a str, which refers to
    // nothing, so it can be in no reference cycle: untracking it (as CPython untracks tuples
    // of atomic values) only spares every garbage collection a visit to each parsed schema,
    // which cost about 200 instructions per schema. Its tp_dealloc untracks it again, which
    // does nothing for an untracked object.
    unsafe { pyo3::ffi::PyObject_GC_UnTrack(schema.as_ptr().cast()) };
    Ok(schema)
}

/// Parses many schemas and returns how many parsed (for measuring parse speed without the
/// cost of building Python objects).
#[pyfunction]
pub fn parse_schemas_count(py: Python<'_>, texts: Vec<String>) -> usize {
    py.detach(|| {
        texts
            .iter()
            .filter(|t| FunctionSchema::parse(t).is_ok())
            .count()
    })
}
