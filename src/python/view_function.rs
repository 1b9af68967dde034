//! The view route of `boxfall.array_api`'s namespace functions (`NamespaceFunction`):
//! `expand_dims` and `matrix_transpose` make the view of a tensor in Rust where its layout is
//! known, and hand every other call to the Python function (`boxfall.array_api._views`),
//! keeping the layout of the view it made.
//!
//! A loop takes the same views of tensors of the same shapes at every step (the workload's
//! `expand_dims` of its sums, `matrix_transpose` of its centers), and a recorded one (graph
//! mode) is mostly this work: the Python function's frames, its cache's key and the tensor's
//! `shape` and `dtype` read as Python objects were about 1.8 us of a view on this machine, two
//! tenths of recording the workload. Here a view whose layout is known is made from the
//! tensor's dtype and shape, with no Python frame.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use numpy::PyUntypedArray;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyTuple};

use super::tensor::as_tensor;
use super::view::make_view;
use super::view_desc::view_ops;
use crate::tensor::Tensor;

/// The view step a function takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// `expand_dims(x, axis)`: its argument, an int.
    ExpandDims,
    /// `matrix_transpose(x)`: of a tensor of two dimensions or more.
    MatrixTranspose,
}

/// A view's layout on its base's stand-in (what `_views.view` decided), by the base's dtype,
/// shape and the step's argument: the view's chain, its layout and the stand-in's origin.
struct Known {
    chain: Py<PyTuple>,
    layout: Py<PyUntypedArray>,
    origin: isize,
}

type Key = (Cow<'static, str>, Vec<usize>, i64);

/// The most layouts kept a function (a program whose shapes never repeat starts again).
const MOST: usize = 4096;

/// The view route: the step, and the layouts it knows.
pub(super) struct ViewRoute {
    step: Step,
    known: Mutex<HashMap<Key, Known>>,
}

impl ViewRoute {
    /// The route of the namespace's function `name`; an error for a name with no Rust step.
    pub(super) fn of(name: &str) -> PyResult<ViewRoute> {
        let step = match name {
            "expand_dims" => Step::ExpandDims,
            "matrix_transpose" => Step::MatrixTranspose,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "view_function: no Rust view step for '{other}' (expand_dims, matrix_transpose)"
                )))
            }
        };
        Ok(ViewRoute {
            step,
            known: Mutex::new(HashMap::new()),
        })
    }

    /// The call: the view made here where its layout is known, else `general`'s result.
    pub(super) fn call<'py>(
        &self,
        general: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = args.py();
        let Some(arg) = self.argument(args, kwargs) else {
            return general.call(args, kwargs);
        };
        let first = args.get_item(0)?;
        let Some(x) = as_tensor(&first) else {
            return general.call(args, kwargs);
        };
        let x = &x.get().inner;
        let Some(key) = self.key(x, arg) else {
            return general.call(args, kwargs);
        };
        let found = {
            let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            known
                .get(&key)
                .map(|k| (k.chain.clone_ref(py), k.layout.clone_ref(py), k.origin))
        };
        if let Some((chain, layout, origin)) = found {
            return make_view(py, x, chain.bind(py), layout.bind(py), origin, true);
        }
        let made = general.call(args, kwargs)?;
        self.keep(key, x, &made);
        Ok(made)
    }

    /// The step's argument of a call the route takes: `x` alone (and for `expand_dims` an
    /// int `axis`, positional or by name; 0 if absent). None for any other call.
    fn argument(
        &self,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> Option<i64> {
        let int = |v: Bound<'_, PyAny>| {
            v.is_exact_instance_of::<PyInt>()
                .then(|| v.extract::<i64>().ok())
                .flatten()
        };
        match self.step {
            Step::MatrixTranspose => (args.len() == 1 && kwargs.is_none()).then_some(0),
            Step::ExpandDims => match (args.len(), kwargs) {
                (1, None) => Some(0),
                (2, None) => int(args.get_item(1).ok()?),
                (1, Some(kw)) if kw.len() == 1 => int(kw.get_item("axis").ok()??),
                _ => None,
            },
        }
    }

    /// The key of a view of `x` (a tensor that is no view) with argument `arg`, if `x`'s
    /// meta is known and the step makes a view of it here.
    fn key(&self, x: &Tensor, arg: i64) -> Option<Key> {
        if x.is_view() {
            return None;
        }
        let meta = x.meta()?;
        if self.step == Step::MatrixTranspose && meta.shape.len() < 2 {
            return None;
        }
        Some((meta.dtype, meta.shape, arg))
    }

    /// Keeps the layout of `made`, the view of `x` the Python function gave, if it is one step
    /// of `x` that NumPy left writable (another result keeps nothing).
    fn keep(&self, key: Key, x: &Tensor, made: &Bound<'_, PyAny>) {
        let Some(v) = as_tensor(made) else {
            return;
        };
        let inner = &v.get().inner;
        let (Some(base), Some(ops)) = (inner.view_base(), view_ops(inner)) else {
            return;
        };
        let py = made.py();
        if !base.same(x) || !ops.writable || ops.chain.bind(py).len() != 1 {
            return;
        }
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MOST {
            known.clear();
        }
        known.insert(
            key,
            Known {
                chain: ops.chain.clone_ref(py),
                layout: ops.layout.clone_ref(py),
                origin: ops.origin,
            },
        );
    }
}
