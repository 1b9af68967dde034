//! Shape rules from Python: a function registered with `lib.register_shape_rule(op, fn)` as the
//! operator's rule (`PyShapeRule`, a `graph::rules::ShapeRule`), and `_output_metas`, the
//! registered rule of an operator called from Python, so that tests compare a rule with the
//! eager result of the same call (its arguments bind as a boxed call binds them; nothing runs).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::convert::{bind, to_py, Passed, TensorStyle};
use super::errors::{from_pyerr, new_err, with_note, IntoPy};
use crate::error::{Error, Result};
use crate::graph::rules::ShapeRule;
use crate::ivalue::IValue;
use crate::kernel::OperatorHandle;
use crate::tensor::{dtype_name, Tensor, TensorMeta};

/// Output metas as Python sees them: `(dtype name, shape tuple)` pairs.
type Metas<'py> = Vec<(String, Bound<'py, PyTuple>)>;

/// The dtypes and shapes the registered shape rule of operator `op`
/// (`"array_api::add.Tensor_Scalar"`) gives for these arguments, as `(dtype name, shape tuple)`
/// pairs; None where it has no rule, or its rule cannot know them. Arguments the schema does
/// not bind raise TypeError.
#[pyfunction]
#[pyo3(signature = (op, *args, **kwargs))]
pub fn _output_metas<'py>(
    py: Python<'py>,
    op: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Option<Metas<'py>>> {
    let handle = crate::Dispatcher::find(op).py(py)?;
    let schema = handle.schema().py(py)?;
    let mut passed = Passed::default();
    let stack = bind(&schema, args, kwargs, &mut passed)
        .map_err(|m| PyTypeError::new_err(format!("{op}(): {m}")))?;
    // An object (an index's `slice`) is read by its description, as the recorder reads it.
    let Some(described) = crate::graph::described_stack(&stack) else {
        return Ok(None);
    };
    let metas = crate::graph::rules::shape_rule_metas(&handle, &described).py(py)?;
    metas
        .map(|ms| {
            ms.into_iter()
                .map(|m| Ok((m.dtype.into_owned(), PyTuple::new(py, m.shape)?)))
                .collect()
        })
        .transpose()
}

/// Marks operator `op` as one that graph backend `backend`'s compiler cannot put in a program
/// (its kernel there cannot be traced), for `reason`: its calls there break the graph from now
/// on (`graph::rules::refuse`). For a backend's compiler (boxfall.jax's).
#[pyfunction]
pub fn _refuse_in_graph(py: Python<'_>, op: &str, backend: &str, reason: &str) -> PyResult<()> {
    let handle = crate::Dispatcher::find(op).py(py)?;
    let key = crate::DispatchKey::from_name(backend).py(py)?;
    crate::graph::rules::refuse(&handle, key, reason);
    Ok(())
}

/// Why graph backend `backend` refused operator `op` (`_refuse_in_graph`); None where it did
/// not.
#[pyfunction]
pub fn _graph_refusal(py: Python<'_>, op: &str, backend: &str) -> PyResult<Option<String>> {
    let handle = crate::Dispatcher::find(op).py(py)?;
    let key = crate::DispatchKey::from_name(backend).py(py)?;
    Ok(crate::graph::rules::refusal(&handle, key))
}

/// A shape rule written in Python (`lib.register_shape_rule(op, fn)`): `fn` gets a
/// `bf.TensorMeta` per tensor argument and the other arguments as values, and returns the
/// outputs' metas (a `bf.TensorMeta`, or a tuple of them for several returns), or raises
/// `bf.DataDependentError` where it cannot know them.
pub struct PyShapeRule {
    func: Py<PyAny>,
}

impl PyShapeRule {
    /// The rule calling `func`.
    pub fn new(func: Py<PyAny>) -> PyShapeRule {
        PyShapeRule { func }
    }
}

/// A class of `boxfall._shape_rules` (`TensorMeta`, `DataDependentError`).
fn class<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let c = cell.get_or_try_init(py, || {
        py.import("boxfall._shape_rules")
            .and_then(|m| m.getattr(name))
            .map(Bound::unbind)
    })?;
    Ok(c.bind(py).clone())
}

static TENSOR_META: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static DATA_DEPENDENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// A tensor argument as the rule sees it: its `bf.TensorMeta`.
fn meta_of<'py>(py: Python<'py>, op: &OperatorHandle, t: &Tensor) -> Result<Bound<'py, PyAny>> {
    let m = t.meta().ok_or_else(|| {
        Error::Fallback(format!(
            "'{}': a tensor argument gives no dtype and shape, so its shape rule cannot be asked",
            op.name()
        ))
    })?;
    let device = t.device().to_string();
    class(py, &TENSOR_META, "TensorMeta")
        .and_then(|c| c.call1((m.dtype.as_ref(), PyTuple::new(py, &m.shape)?, device)))
        .map_err(from_pyerr)
}

/// A value of the stack as the rule gets it: tensors as metas, anything else as the value.
fn argument<'py>(py: Python<'py>, op: &OperatorHandle, v: &IValue) -> Result<Bound<'py, PyAny>> {
    let list = |items: Vec<Bound<'py, PyAny>>| {
        PyList::new(py, items)
            .map(Bound::into_any)
            .map_err(from_pyerr)
    };
    match v {
        IValue::Tensor(t) => meta_of(py, op, t),
        IValue::TensorList(ts) => list(
            ts.iter()
                .map(|t| meta_of(py, op, t))
                .collect::<Result<_>>()?,
        ),
        IValue::OptionalTensorList(ts) => list(
            ts.iter()
                .map(|t| match t {
                    Some(t) => meta_of(py, op, t),
                    None => Ok(py.None().into_bound(py)),
                })
                .collect::<Result<_>>()?,
        ),
        IValue::List(vs) if vs.iter().any(|v| matches!(v, IValue::Tensor(_))) => list(
            vs.iter()
                .map(|v| argument(py, op, v))
                .collect::<Result<_>>()?,
        ),
        other => to_py(py, other, &Passed::default(), TensorStyle::Caller).map_err(from_pyerr),
    }
}

/// The outputs a rule returned, read: a `bf.TensorMeta`, or a tuple or list of them.
fn outputs(op: &OperatorHandle, got: &Bound<'_, PyAny>) -> Result<Vec<TensorMeta>> {
    let py = got.py();
    let wrong = |what: String| {
        Error::Registration(format!(
            "the shape rule of '{}' {what}; a rule returns a bf.TensorMeta (dtype, shape), or a \
             tuple of them for several returns, or raises bf.DataDependentError where the \
             outputs depend on the values",
            op.name()
        ))
    };
    let meta_class = class(py, &TENSOR_META, "TensorMeta").map_err(from_pyerr)?;
    let items: Vec<Bound<'_, PyAny>> = if got.is_instance(&meta_class).unwrap_or(false) {
        vec![got.clone()]
    } else if got.is_instance_of::<PyTuple>() || got.is_instance_of::<PyList>() {
        got.try_iter()
            .and_then(|it| it.collect::<PyResult<Vec<_>>>())
            .map_err(from_pyerr)?
    } else {
        let type_name = got
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        return Err(wrong(format!("returned a {type_name}")));
    };
    let mut metas = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if !item.is_instance(&meta_class).unwrap_or(false) {
            let type_name = item
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            return Err(wrong(format!(
                "returned a {type_name} as output {i}, not a bf.TensorMeta"
            )));
        }
        let dtype: String = item
            .getattr("dtype")
            .and_then(|d| d.extract())
            .map_err(|_| wrong(format!("gave output {i} a dtype that is not a name")))?;
        let sizes: Vec<i64> = item
            .getattr("shape")
            .and_then(|s| s.extract())
            .map_err(|_| {
                wrong(format!(
                    "gave output {i} a shape that is not a tuple of ints"
                ))
            })?;
        let shape = sizes
            .iter()
            .map(|&s| usize::try_from(s))
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|_| wrong(format!("gave output {i} a negative size ({sizes:?})")))?;
        if crate::tensor::DType::from_name(&dtype).is_none() {
            return Err(wrong(format!(
                "gave output {i} the dtype '{dtype}', which no device holds"
            )));
        }
        metas.push(TensorMeta {
            dtype: dtype_name(&dtype),
            shape,
        });
    }
    Ok(metas)
}

impl ShapeRule for PyShapeRule {
    fn metas(&self, op: &OperatorHandle, stack: &[IValue]) -> Result<Option<Vec<TensorMeta>>> {
        let schema = op.schema()?;
        Python::attach(|py| {
            let mut positional = Vec::with_capacity(stack.len());
            let kwargs = PyDict::new(py);
            for (a, v) in schema.schema.arguments.iter().zip(stack) {
                let value = argument(py, op, v)?;
                if a.kwarg_only {
                    kwargs.set_item(&a.name, value).map_err(from_pyerr)?;
                } else {
                    positional.push(value);
                }
            }
            let args = PyTuple::new(py, positional).map_err(from_pyerr)?;
            let got = match self.func.bind(py).call(args, Some(&kwargs)) {
                Ok(got) => got,
                Err(e) => {
                    let data_dependent = class(py, &DATA_DEPENDENT, "DataDependentError")
                        .is_ok_and(|c| e.is_instance(py, &c));
                    if data_dependent {
                        return Ok(None);
                    }
                    let note = format!("raised by the shape rule of '{}'", op.name());
                    return Err(from_pyerr(with_note(py, e, note)));
                }
            };
            outputs(op, &got).map(Some)
        })
    }
}

/// `lib.register_shape_rule`'s check of `fn`: a callable.
pub fn shape_rule_from(py: Python<'_>, op: &str, func: &Bound<'_, PyAny>) -> PyResult<PyShapeRule> {
    if !func.is_callable() {
        return Err(new_err(
            py,
            "RegistrationError",
            format!(
                "the shape rule of '{op}' must be callable, not {}",
                func.get_type().name()?
            ),
        ));
    }
    Ok(PyShapeRule::new(func.clone().unbind()))
}
