//! `_output_metas`: the shape rules (`graph::rules`) called from Python, so that tests compare
//! a rule with the eager result of the same call. The arguments bind to the operator's schema
//! as a boxed call binds them (`convert::bind`); nothing runs.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::convert::{bind, Passed};
use super::errors::IntoPy;

/// Output metas as Python sees them: `(dtype name, shape tuple)` pairs.
type Metas<'py> = Vec<(String, Bound<'py, PyTuple>)>;

/// The dtypes and shapes the rule of operator `op` (`"array_api::add.Tensor_Scalar"`) gives
/// for these arguments, as `(dtype name, shape tuple)` pairs; None where it has no rule. Arguments
/// the schema does not bind raise TypeError.
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
        .map_err(|m| pyo3::exceptions::PyTypeError::new_err(format!("{op}(): {m}")))?;
    // An object (an index's `slice`) is read by its description, as the recorder reads it.
    let metas = crate::graph::described_stack(&stack)
        .and_then(|s| crate::graph::rules::output_metas(handle.name(), &s));
    metas
        .map(|ms| {
            ms.into_iter()
                .map(|m| Ok((m.dtype.into_owned(), PyTuple::new(py, m.shape)?)))
                .collect()
        })
        .transpose()
}
