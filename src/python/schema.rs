//! `bf.parse_schema`, `FunctionSchema`, `Argument`, `AliasInfo`: read-only views of a parsed
//! schema (frozen classes around the core's values).
//!
//! `bf.parse_schema` checks the text as the parser reads it (every error as
//! [`FunctionSchema::parse`] gives it) but keeps only the caller's str, where the names are in
//! it and the two flags: most parsed schemas are only checked, or have their name read. The
//! owned [`FunctionSchema`] is read from the text on the first access that needs more.

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

/// The owned schemas are boxed, so that a parsed schema that never builds one (most) is an
/// object of about 100 bytes rather than 200.
enum Repr {
    /// From an operator's own schema.
    Built(Box<FunctionSchema>),
    /// From `parse_schema`: the caller's text (kept, not copied), what the check found, and
    /// the owned schema once something needs it.
    Parsed {
        text: PyBackedStr,
        checked: Syntax,
        built: OnceLock<Box<FunctionSchema>>,
    },
}

impl PyFunctionSchema {
    pub fn new(schema: FunctionSchema) -> Self {
        PyFunctionSchema {
            repr: Repr::Built(Box::new(schema)),
        }
    }

    /// The owned schema, read from the text on first use for a parsed one. The text passed
    /// the same parser's check, so reading it again cannot fail; were it to, the error is the
    /// parser's own, raised as `bf.SchemaError`.
    fn schema(&self, py: Python<'_>) -> PyResult<&FunctionSchema> {
        match &self.repr {
            Repr::Built(schema) => Ok(schema),
            Repr::Parsed { text, built, .. } => {
                if let Some(schema) = built.get() {
                    return Ok(schema);
                }
                let schema = FunctionSchema::parse(text)
                    .map_err(crate::Error::from)
                    .py(py)?;
                Ok(built.get_or_init(|| Box::new(schema)))
            }
        }
    }

    /// The name and the overload name: spans of the parsed text, or the built schema's.
    fn names(&self) -> (&str, &str) {
        match &self.repr {
            Repr::Built(schema) => (&schema.name, &schema.overload_name),
            Repr::Parsed { text, checked, .. } => {
                (checked.name.of(text), checked.overload.of(text))
            }
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
    fn is_mutable(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.schema(py)?.is_mutable())
    }

    /// Whether the arguments end in `...`.
    #[getter]
    fn is_vararg(&self) -> bool {
        match &self.repr {
            Repr::Built(schema) => schema.is_vararg,
            Repr::Parsed { checked, .. } => checked.is_vararg,
        }
    }

    /// Whether the returns end in `...`.
    #[getter]
    fn is_varret(&self) -> bool {
        match &self.repr {
            Repr::Built(schema) => schema.is_varret,
            Repr::Parsed { checked, .. } => checked.is_varret,
        }
    }

    /// The arguments.
    #[getter]
    fn arguments<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        list(py, &self.schema(py)?.arguments)
    }

    /// The returns.
    #[getter]
    fn returns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        list(py, &self.schema(py)?.returns)
    }

    /// Indices of the arguments that hold tensors (Tensor, Tensor?, Tensor[], Tensor?[]).
    #[getter]
    fn tensor_arguments(&self, py: Python<'_>) -> PyResult<Vec<usize>> {
        Ok(self.schema(py)?.info().tensor_args)
    }

    /// Indices of the arguments the operator writes (`(a!)`, also on a list's elements).
    #[getter]
    fn written_arguments(&self, py: Python<'_>) -> PyResult<Vec<usize>> {
        let info = self.schema(py)?.info();
        Ok((0..info.args.len())
            .filter(|&i| info.args[i].is_write)
            .collect())
    }

    /// For each return, the index of the argument it aliases, or None.
    #[getter]
    fn return_aliases(&self, py: Python<'_>) -> PyResult<Vec<Option<usize>>> {
        Ok(self
            .schema(py)?
            .info()
            .returns
            .iter()
            .map(|r| r.aliases_arg)
            .collect())
    }

    /// Whether some return is a view of an argument (`Tensor(a)`, not written).
    #[getter]
    fn has_view_returns(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.schema(py)?.info().has_view_returns)
    }

    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.schema(py)?.to_string())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "FunctionSchema({:?})",
            self.schema(py)?.to_string()
        ))
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(other) = other.cast::<PyFunctionSchema>() else {
            return Ok(false);
        };
        Ok(other.get().schema(py)? == self.schema(py)?)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<u64> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.schema(py)?.to_string().hash(&mut h);
        Ok(h.finish())
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
    let checked = match Syntax::check(&text) {
        Ok(checked) => checked,
        Err(e) => return Err(crate::Error::from(e)).py(py),
    };
    let schema = Bound::new(
        py,
        PyFunctionSchema {
            repr: Repr::Parsed {
                text,
                checked,
                built: OnceLock::new(),
            },
        },
    )?;
    // It holds no Python object but its text, a str, which refers to nothing, so it can be in
    // no reference cycle: untracking it (as CPython untracks tuples of atomic values) only
    // spares every garbage collection a visit to each parsed schema, of which a program may
    // hold thousands.
    super::ffi::gc_untrack(schema.as_any());
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
