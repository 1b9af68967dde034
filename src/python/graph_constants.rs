//! The Python objects graph mode reads as constants (`graph::set_object_describer`): an index's
//! `slice` as `("<slice>", start, stop, step)`, `...` as `"<ellipsis>"`, a NumPy integer as its
//! int. The node keeps the object itself, so kernels get the index as Python wrote it.

use std::any::Any;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyEllipsis, PyInt, PySlice};

use crate::ivalue::IValue;

/// Installs the describer (at the module's import).
pub fn install() {
    crate::graph::set_object_describer(describe);
}

fn describe(o: &(dyn Any + Send + Sync)) -> Option<IValue> {
    let obj = o.downcast_ref::<Py<PyAny>>()?;
    Python::attach(|py| {
        let obj = obj.bind(py);
        if obj.is_instance_of::<PyEllipsis>() {
            return Some(IValue::Str("<ellipsis>".into()));
        }
        if let Ok(s) = obj.cast::<PySlice>() {
            let bound = |name: &str| s.getattr(name).ok().and_then(|v| int_or_none(py, &v));
            return Some(IValue::Tuple(vec![
                IValue::Str("<slice>".into()),
                bound("start")?,
                bound("stop")?,
                bound("step")?,
            ]));
        }
        numpy_int(py, obj).map(IValue::Int)
    })
}

/// A slice's bound: None, a Python int or a NumPy integer (a bool is neither).
fn int_or_none(py: Python<'_>, v: &Bound<'_, PyAny>) -> Option<IValue> {
    if v.is_none() {
        return Some(IValue::None);
    }
    if v.is_instance_of::<PyBool>() {
        return None;
    }
    if v.is_instance_of::<PyInt>() {
        return v.extract::<i64>().ok().map(IValue::Int);
    }
    numpy_int(py, v).map(IValue::Int)
}

/// The value of a NumPy integer scalar (`numpy.integer`, which excludes `numpy.bool_`).
fn numpy_int(py: Python<'_>, v: &Bound<'_, PyAny>) -> Option<i64> {
    static INTEGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let integer = INTEGER
        .get_or_try_init(py, || {
            py.import("numpy")
                .and_then(|m| m.getattr("integer"))
                .map(Bound::unbind)
        })
        .ok()?;
    if !v.is_instance(integer.bind(py)).ok()? {
        return None;
    }
    v.extract::<i64>().ok()
}
