//! A kernel's returns as the caller gets them, and the errors of a return that does not fit.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::dispatcher::{OpSchema, OperatorHandle};
use crate::key::{DispatchKey, DispatchKeySet};
use crate::python::convert::{
    is_exact_ndarray, is_numpy_array, to_ivalue, to_py, Passed, TensorStyle,
};
use crate::python::errors::to_pyerr;
use crate::python::ffi::{list_get, list_set};
use crate::python::kernel::{bad_return, stack_count_error};
use crate::python::plan::{Body, Kind, RetPlan};
use crate::python::tensor::{as_tensor, cpu_tensor_to_numpy, wrap};

use super::bind::is_exact_scalar;
use super::objs::{Items, Objs};

/// A kernel's returns, as the caller gets them.
pub(super) enum Rets<'py> {
    Few(Objs<'py>),
    /// A call's result, already as the caller gets it (only for calls, not redispatches).
    Done(PyResult<Bound<'py, PyAny>>),
}

impl<'py> Rets<'py> {
    /// None for no return, the value for one, else a tuple (as `returns_to_py`).
    pub fn into_result(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Rets::Few(mut o) => match o.len {
                0 => Ok(py.None().into_bound(py)),
                1 => Ok(o.pop().unwrap_or_else(|| py.None().into_bound(py))),
                _ => Ok(PyTuple::new(py, o.iter())?.into_any()),
            },
            Rets::Done(r) => r,
        }
    }

    /// Replaces the contents of `list` with the returns (as deleting them all and appending
    /// the returns would, with the slots reused).
    pub fn into_list(self, list: &Bound<'py, PyList>) -> PyResult<()> {
        let items: Items<'_, 'py> = match self {
            Rets::Few(ref o) => o.iter(),
            // A redispatch gets a finished result only from `run_fallback` (the CPU fallback
            // with a Python CPU kernel, on a backend with Rust hooks), whose operator has one
            // Tensor return: that return is the stack.
            Rets::Done(r) => return one_into_list(r?, list),
        };
        let n = items.len();
        let old = list.len();
        for (i, x) in items.enumerate() {
            if i < old {
                list.set_item(i, x)?;
            } else {
                list.append(x)?;
            }
        }
        if old > n {
            list.del_slice(n, old)?;
        }
        Ok(())
    }
}

/// What the lean path ([`run_lean`]) did with a call: two words, returned in registers, where
/// an `Option<PyResult<_>>` (the size of a `PyErr`, about nine words) was copied out through
/// memory at every level of the call.
pub enum Lean<'py> {
    /// The kernel ran: the caller's result.
    Done(Bound<'py, PyAny>),
    /// The kernel ran and failed: the error is in the caller's slot.
    Raised,
    /// Nothing ran: the call is not lean, or no Python function serves it.
    Passed,
}

impl<'py> Lean<'py> {
    /// As the other ways of the fast path answer: None where nothing ran.
    #[inline(always)]
    pub(super) fn into_option(
        self,
        err: &mut Option<PyErr>,
    ) -> Option<PyResult<Bound<'py, PyAny>>> {
        match self {
            Lean::Done(r) => Some(Ok(r)),
            Lean::Raised => Some(Err(raised(err))),
            Lean::Passed => None,
        }
    }
}

/// The error a [`Lean::Raised`] left in its slot (always there: `run_lean` fills it).
#[cold]
#[inline(never)]
pub fn raised(err: &mut Option<PyErr>) -> PyErr {
    err.take().unwrap_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err("boxfall: a failed call lost its error")
    })
}

/// A kernel's return as the caller gets it (`to_ivalue` in the kernel wrapper, then `to_py`
/// for the caller), or the message of the error. Out of line: the lean path inlines only the
/// test for an exact NumPy array, the common return.
#[inline(never)]
pub(super) fn ret_to_caller<'py>(
    obj: &Bound<'py, PyAny>,
    r: &RetPlan,
    given: &[Bound<'py, PyAny>],
) -> Result<PyResult<Bound<'py, PyAny>>, String> {
    let py = obj.py();
    if r.optional && obj.is_none() {
        return Ok(Ok(obj.clone()));
    }
    let exact = match r.kind {
        Kind::Tensor => {
            if is_numpy_array(obj) {
                return Ok(Ok(obj.clone()));
            }
            if let Some(t) = as_tensor(obj) {
                let inner = &t.get().inner;
                // An argument's tensor comes back as the caller's object.
                for g in given.iter() {
                    if let Some(gt) = as_tensor(g) {
                        if gt.get().inner.same(inner) {
                            return Ok(Ok(g.clone()));
                        }
                    }
                }
                return Ok(if inner.key() == DispatchKey::CPU {
                    cpu_tensor_to_numpy(py, inner, true)
                } else {
                    wrap(py, inner.clone())
                });
            }
            false
        }
        kind => is_exact_scalar(obj, kind),
    };
    if exact {
        return Ok(Ok(obj.clone()));
    }
    let v = to_ivalue(obj, &r.ty, &mut Passed::default())?;
    Ok(to_py(py, &v, &Passed::default(), TensorStyle::Caller))
}

pub(super) fn ret_error(
    op: &OperatorHandle,
    schema: &OpSchema,
    keys: DispatchKeySet,
    i: usize,
    m: String,
) -> crate::Error {
    let r = &schema.schema.returns[i];
    bad_return(
        op,
        keys,
        format!("return '{}' ({}): {m}", r.name, r.type_str()),
    )
}

/// A lean call's one return as the caller gets it: an exact NumPy array as it is, else as
/// [`ret_to_caller`] converts it; None with the error in `err`.
#[inline(always)]
pub(super) fn lean_return<'py>(
    out: Bound<'py, PyAny>,
    r: &RetPlan,
    op: &OperatorHandle,
    schema: &OpSchema,
    keys: DispatchKeySet,
    given: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Option<Bound<'py, PyAny>> {
    if r.kind == Kind::Tensor && is_exact_ndarray(&out) {
        return Some(out);
    }
    match ret_to_caller(&out, r, given) {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            *err = Some(e);
            None
        }
        Err(m) => {
            *err = Some(to_pyerr(out.py(), ret_error(op, schema, keys, 0, m)));
            None
        }
    }
}

/// `list[:] = kobjs` (a kept list of another length).
#[cold]
pub(super) fn refill<'py>(list: &Bound<'py, PyList>, kobjs: &[Bound<'py, PyAny>]) -> PyResult<()> {
    list.del_slice(0, list.len())?;
    for o in kobjs.iter() {
        list.append(o)?;
    }
    Ok(())
}

/// A boxed kernel's returns from its stack, as the caller gets them.
pub(super) fn boxed_returns<'py>(
    py: Python<'py>,
    op: &OperatorHandle,
    schema: &OpSchema,
    keys: DispatchKeySet,
    body: &Body,
    given: &[Bound<'py, PyAny>],
    list: &Bound<'py, PyList>,
) -> PyResult<Rets<'py>> {
    let n = list.len();
    // The plan has no `...` returns, so the count is the schema's.
    if n != body.rets.len() {
        return Err(to_pyerr(
            py,
            stack_count_error(op, keys, schema, n, body.args.len()),
        ));
    }
    let mut rets = Objs::new();
    for (i, o) in list.iter().enumerate() {
        match ret_to_caller(&o, &body.rets[i], given) {
            Ok(r) => rets.push(r?),
            Err(m) => return Err(to_pyerr(py, ret_error(op, schema, keys, i, m))),
        }
    }
    Ok(Rets::Few(rets))
}

/// Replaces the contents of `list` with the one object `r` (as `Rets::into_list` does with
/// one return).
pub(super) fn one_into_list<'py>(r: Bound<'py, PyAny>, list: &Bound<'py, PyList>) -> PyResult<()> {
    let old = list.len();
    if old == 0 {
        return list.append(r);
    }
    list_set(list, 0, &r);
    if old > 1 {
        list.del_slice(1, old)?;
    }
    Ok(())
}

/// A boxed kernel's one return from its stack, as the caller gets it (`boxed_returns` for a
/// schema of one return, without `Rets`).
#[inline(always)]
pub(super) fn boxed_one<'py>(
    op: &OperatorHandle,
    schema: &OpSchema,
    keys: DispatchKeySet,
    body: &Body,
    given: &[Bound<'py, PyAny>],
    list: &Bound<'py, PyList>,
    err: &mut Option<PyErr>,
) -> Option<Bound<'py, PyAny>> {
    let py = list.py();
    let n = list.len();
    // A reference of ours to the one return: converting it may run Python code, which may
    // change the list.
    let one = match (n, body.rets.first()) {
        (1, Some(r)) => list_get(list, 0).map(|o| (o, r)),
        _ => None,
    };
    let Some((o, r)) = one else {
        let e = stack_count_error(op, keys, schema, n, body.args.len());
        *err = Some(to_pyerr(py, e));
        return None;
    };
    lean_return(o, r, op, schema, keys, given, err)
}
