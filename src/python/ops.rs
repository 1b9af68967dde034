//! `OpOverload` (one operator, callable), `DispatchKeySet`, packet calls and `call_fallback`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::convert::{bind, generic, returns_to_py, to_py, Passed, TensorStyle};
use std::sync::Arc;

use pyo3::sync::PyOnceLock;

use super::errors::{new_err, IntoPy};
use super::fast::{self, schema_for_plan, Plan};
use super::ffi::refcnt;
use super::gil_cell::GilCell;
use super::recursion;
use super::redispatch;
use super::schema::PyFunctionSchema;
use super::vectorcall;
use crate::dispatcher::{Dispatcher, OpSchema, OperatorHandle};
use crate::error::Error;
use crate::ivalue::Stack;
use crate::key::{DispatchKey, DispatchKeySet};

/// The key set of a call, as a boxed kernel receives it.
#[pyclass(name = "DispatchKeySet", module = "boxfall", frozen)]
#[derive(Clone, Copy)]
pub struct PyKeySet(pub DispatchKeySet);

#[pymethods]
impl PyKeySet {
    /// The highest key's name (None for an empty set).
    fn highest(&self) -> Option<String> {
        self.0.highest().map(|k| k.name())
    }

    /// The set without its highest key.
    fn without_highest(&self) -> PyKeySet {
        PyKeySet(self.0.without_highest())
    }

    /// The keys' names, highest first.
    fn names(&self) -> Vec<String> {
        self.0.names()
    }

    fn __contains__(&self, name: &str) -> bool {
        DispatchKey::from_name(name).is_ok_and(|k| self.0.contains(k))
    }

    fn __len__(&self) -> usize {
        self.0 .0.count_ones() as usize
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyKeySet>().is_ok_and(|o| o.get().0 == self.0)
    }

    fn __hash__(&self) -> u64 {
        self.0 .0
    }

    fn __repr__(&self) -> String {
        format!("DispatchKeySet({})", self.0.names().join(", "))
    }
}

/// One operator overload: callable, with its schema and dispatch table.
#[pyclass(name = "OpOverload", module = "boxfall", frozen)]
pub struct PyOpOverload {
    /// Where a call from Python enters (`vectorcall.rs`), read by the interpreter at the
    /// offset the class names.
    vectorcall: super::ffi::Entry,
    pub handle: OperatorHandle,
    /// The schema facts of the fast path, made at the first call.
    plan: PyOnceLock<Arc<Plan>>,
    /// Objects a boxed Python kernel's calls reuse.
    pub spare: fast::Spare,
    /// `op.redispatch`, made with the object (`new_bound`), read by the interpreter as a
    /// member at its offset (`redispatch.rs`).
    redispatch: GilCell<Option<Py<PyAny>>>,
    /// Calls from Python try the lean entry first (`vectorcall.rs`); cleared for good by the
    /// first call that a Python function does not serve.
    pub lean: std::sync::atomic::AtomicBool,
}

impl PyOpOverload {
    /// A new `OpOverload` of `handle`, its `op.redispatch` made (the member of
    /// `redispatch.rs` reads it, so no object may be seen by Python code without it).
    pub fn new_bound(py: Python<'_>, handle: OperatorHandle) -> PyResult<Bound<'_, Self>> {
        let slf = Bound::new(py, Self::from_handle(handle))?;
        drop(Self::redispatch_fn(&slf)?);
        redispatch::install_member(&slf);
        Ok(slf)
    }

    fn from_handle(handle: OperatorHandle) -> Self {
        PyOpOverload {
            vectorcall: vectorcall::ENTRY,
            handle,
            plan: PyOnceLock::new(),
            spare: fast::Spare::default(),
            redispatch: GilCell::default(),
            lean: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// `op(*args, **kwargs)`, by either calling convention; `tuple` is `args` when the caller
    /// packed them (the general path binds from a tuple).
    pub fn call_with<'py>(
        slf: &Bound<'py, Self>,
        args: &[Bound<'py, PyAny>],
        tuple: Option<&Bound<'py, PyTuple>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let _level = recursion::enter(py)?;
        if let Some(r) = fast::call(slf, args, kwargs) {
            return r;
        }
        match tuple {
            Some(t) => call_op(py, &slf.get().handle, t, kwargs),
            None => call_op(py, &slf.get().handle, &PyTuple::new(py, args)?, kwargs),
        }
    }

    /// `op(*args)` where a Python function serves it (by the fast path), else
    /// `Lean::Passed` with nothing run; an error goes to `err`.
    #[inline(always)]
    pub fn call_python<'py>(
        slf: &Bound<'py, Self>,
        args: &[Bound<'py, PyAny>],
        err: &mut Option<PyErr>,
    ) -> fast::Lean<'py> {
        let _level = match recursion::enter(slf.py()) {
            Ok(level) => level,
            Err(e) => {
                *err = Some(e);
                return fast::Lean::Raised;
            }
        };
        fast::call_python(slf, args, err)
    }

    /// `op.redispatch(keys, *args)` (the documented hop's form), as a new reference: by the
    /// lean path where it serves, whose answer stays in registers up to the interpreter's
    /// entry, else as `redispatch_with`.
    #[inline(always)]
    pub fn redispatch_positional<'py>(
        slf: &Bound<'py, Self>,
        keys: DispatchKeySet,
        args: &[Bound<'py, PyAny>],
    ) -> PyResult<Bound<'py, PyAny>> {
        let level = recursion::enter(slf.py())?;
        let mut err = None;
        match fast::redispatch_lean(slf, keys, args, &mut err) {
            fast::Lean::Done(r) => return Ok(r),
            fast::Lean::Raised => return Err(fast::raised(&mut err)),
            fast::Lean::Passed => {}
        }
        drop(level);
        Self::redispatch_as(slf, keys, args, None, false)
    }

    /// `op.redispatch(keys, *args, **kwargs)`, `keys` taken out of the arguments.
    #[inline]
    pub fn redispatch_with<'py>(
        slf: &Bound<'py, Self>,
        keys: DispatchKeySet,
        args: &[Bound<'py, PyAny>],
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::redispatch_as(slf, keys, args, kwargs, true)
    }

    /// `redispatch_with`; `lean`: the fast path's lean way may serve the call (false where it
    /// passed it on already).
    #[inline]
    fn redispatch_as<'py>(
        slf: &Bound<'py, Self>,
        keys: DispatchKeySet,
        args: &[Bound<'py, PyAny>],
        kwargs: Option<&Bound<'py, PyDict>>,
        lean: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let _level = recursion::enter(py)?;
        if let Some(r) = fast::redispatch(slf, keys, args, kwargs, lean) {
            return r;
        }
        let handle = &slf.get().handle;
        let schema = schema_of(py, handle)?;
        let mut passed = Passed::default();
        let mut stack = bind(&schema, &PyTuple::new(py, args)?, kwargs, &mut passed)
            .map_err(|m| argument_error(handle, &schema, m))
            .py(py)?;
        handle.redispatch_boxed(keys, &mut stack).py(py)?;
        returns_to_py(py, &stack, &passed)
    }

    /// Breaks the cycle of `op.redispatch` (which holds its operator) when nothing else holds
    /// either object: an `OpOverload` made for one boxed call (the general path's) then goes
    /// when the call ends, not at the garbage collector's next run.
    pub fn drop_redispatch_cycle(slf: &Bound<'_, Self>) {
        let py = slf.py();
        let cell = &slf.get().redispatch;
        let kept = cell.take(py);
        // Ours and the function's (`__self__`) are the operator's only references, and the
        // cell's is the function's only one.
        let alone = kept
            .as_ref()
            .is_some_and(|f| refcnt(f.bind(py)) == 1 && refcnt(slf.as_any()) == 2);
        if alone {
            drop(kept);
        } else {
            let old = cell.replace(py, kept);
            drop(old);
        }
    }

    /// `op.redispatch`: one object per operator, made at the first look-up (`redispatch.rs`,
    /// whose getter serves every later look-up without coming here).
    pub fn redispatch_fn<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let cell = &slf.get().redispatch;
        let kept = cell.take(py);
        if let Some(f) = &kept {
            let found = f.clone_ref(py).into_bound(py);
            cell.replace(py, kept);
            return Ok(found);
        }
        let f = redispatch::new(slf)?;
        let old = cell.replace(py, Some(f.clone().unbind()));
        drop(old);
        Ok(f)
    }

    /// `op.redispatch` if it was made, a reference of the caller's.
    #[inline(always)]
    pub fn kept_redispatch<'py>(slf: &Bound<'py, Self>) -> Option<Bound<'py, PyAny>> {
        // SAFETY: the GIL is held (`slf`), and the reference into the cell ends (the function
        // given a reference of its own) before any Python code runs.
        unsafe { slf.get().redispatch.peek() }
            .as_ref()
            .map(|f| f.bind(slf.py()).clone())
    }

    /// Where in the object `op.redispatch` is kept (bytes from its start).
    pub fn redispatch_offset(slf: &Bound<'_, Self>) -> Option<usize> {
        let field = std::ptr::addr_of!(slf.get().redispatch) as usize;
        field.checked_sub(slf.as_ptr() as usize)
    }

    /// Where in the object the interpreter finds the vectorcall entry (bytes from its start).
    pub fn entry_offset(slf: &Bound<'_, Self>) -> Option<usize> {
        let field = std::ptr::addr_of!(slf.get().vectorcall) as usize;
        field.checked_sub(slf.as_ptr() as usize)
    }

    /// The fast path's plan (None while the operator is not defined).
    pub fn plan(&self, py: Python<'_>) -> Option<&Arc<Plan>> {
        if let Some(p) = self.plan.get(py) {
            return Some(p);
        }
        let schema = schema_for_plan(py, &self.handle)?;
        Some(self.plan.get_or_init(py, || Plan::of(py, schema)))
    }
}

fn schema_of(py: Python<'_>, op: &OperatorHandle) -> PyResult<std::sync::Arc<OpSchema>> {
    op.schema().py(py)
}

fn argument_error(op: &OperatorHandle, schema: &OpSchema, message: String) -> Error {
    Error::Argument {
        op: op.name().to_string(),
        message,
        schema: schema.text.clone(),
    }
}

/// Binds, dispatches and converts the returns: the whole of a Python call.
pub fn call_op<'py>(
    py: Python<'py>,
    op: &OperatorHandle,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let schema = schema_of(py, op)?;
    let mut passed = Passed::default();
    let mut stack = bind(&schema, args, kwargs, &mut passed)
        .map_err(|m| argument_error(op, &schema, m))
        .py(py)?;
    op.call_boxed(&mut stack).py(py)?;
    returns_to_py(py, &stack, &passed)
}

fn stack_from_list(list: &Bound<'_, PyList>, schema: &OpSchema, passed: &mut Passed) -> Stack {
    list.iter()
        .enumerate()
        .map(|(i, o)| match schema.schema.arguments.get(i) {
            Some(a) => {
                super::convert::to_ivalue(&o, &a.ty, passed).unwrap_or_else(|_| generic(&o, passed))
            }
            None => generic(&o, passed),
        })
        .collect()
}

fn stack_to_list<'py>(
    py: Python<'py>,
    stack: &Stack,
    passed: &Passed,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    stack
        .iter()
        .map(|v| to_py(py, v, passed, TensorStyle::Caller))
        .collect()
}

#[pymethods]
impl PyOpOverload {
    /// `ns::op` or `ns::op.overload`.
    #[getter]
    fn name(&self) -> String {
        self.handle.name().to_string()
    }

    /// The overload name (`""` for the default overload).
    #[getter]
    fn overload_name(&self, py: Python<'_>) -> PyResult<String> {
        Ok(schema_of(py, &self.handle)?.schema.overload_name.clone())
    }

    /// The schema.
    #[getter]
    fn schema(&self, py: Python<'_>) -> PyResult<PyFunctionSchema> {
        Ok(PyFunctionSchema::new(
            schema_of(py, &self.handle)?.schema.clone(),
        ))
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        vectorcall::install(slf);
        Self::call_with(slf, args.as_slice(), Some(args), kwargs)
    }

    /// A boxed call: `stack` holds every argument; returns a new list of the returns and leaves
    /// `stack` as it was.
    fn call_boxed<'py>(
        &self,
        py: Python<'py>,
        stack: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyList>> {
        let _level = recursion::enter(py)?;
        let schema = schema_of(py, &self.handle)?;
        if stack.len() != schema.schema.arguments.len() {
            return Err(super::errors::to_pyerr(
                py,
                argument_error(
                    &self.handle,
                    &schema,
                    format!(
                        "call_boxed needs all {} arguments (defaults filled), got {}",
                        schema.schema.arguments.len(),
                        stack.len()
                    ),
                ),
            ));
        }
        let mut passed = Passed::default();
        let mut s = Vec::with_capacity(stack.len());
        for (a, o) in schema.schema.arguments.iter().zip(stack.iter()) {
            let v = super::convert::to_ivalue(&o, &a.ty, &mut passed)
                .map_err(|m| {
                    argument_error(&self.handle, &schema, format!("argument '{}': {m}", a.name))
                })
                .py(py)?;
            s.push(v);
        }
        self.handle.call_boxed(&mut s).py(py)?;
        PyList::new(py, stack_to_list(py, &s, &passed)?)
    }

    /// The boxed form of `redispatch`: replaces the contents of `stack` (the arguments) with
    /// the returns, as a boxed kernel must.
    fn redispatch_boxed<'py>(
        slf: &Bound<'py, Self>,
        keys: PyRef<'py, PyKeySet>,
        stack: &Bound<'py, PyList>,
    ) -> PyResult<()> {
        let _level = recursion::enter(slf.py())?;
        if let Some(r) = fast::redispatch_boxed(slf, keys.0, stack) {
            return r;
        }
        let py = slf.py();
        let handle = &slf.get().handle;
        let schema = schema_of(py, handle)?;
        let mut passed = Passed::default();
        let mut s = stack_from_list(stack, &schema, &mut passed);
        handle.redispatch_boxed(keys.0, &mut s).py(py)?;
        let out = stack_to_list(py, &s, &passed)?;
        stack.del_slice(0, stack.len())?;
        for o in out {
            stack.append(o)?;
        }
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: the collector holds the GIL and runs no Python code while it traverses, so
        // nothing writes the cell meanwhile.
        if let Some(f) = unsafe { self.redispatch.peek() } {
            visit.call(f)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // The collector calls this with the GIL held.
        let old = Python::attach(|py| self.redispatch.take(py));
        drop(old);
    }

    /// Key name -> what serves it: "kernel", "composite kernel", "backend fallback",
    /// "fallthrough" or "missing".
    fn dispatch_table<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.handle.dispatch_table() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("OpOverload({})", self.handle.name())
    }
}

/// A number that changes whenever an operator is defined or undefined (`bf.ops` looks its
/// overloads up again only then).
#[pyfunction]
pub fn definitions_version() -> u64 {
    Dispatcher::definitions_version()
}

/// The defined overloads of `ns::op`, in definition order.
#[pyfunction]
pub fn overloads<'py>(py: Python<'py>, base: &str) -> PyResult<Vec<Bound<'py, PyOpOverload>>> {
    Dispatcher::overloads(base)
        .into_iter()
        .map(|h| PyOpOverload::new_bound(py, h))
        .collect()
}

/// The defined operator `name`.
#[pyfunction]
pub fn find_op<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyOpOverload>> {
    PyOpOverload::new_bound(py, Dispatcher::find(name).py(py)?)
}

/// Calls the first overload, in order, whose schema binds the arguments.
#[pyfunction]
#[pyo3(signature = (overloads, args, kwargs=None))]
pub fn call_first_binding<'py>(
    py: Python<'py>,
    overloads: Vec<Bound<'py, PyOpOverload>>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    first_binding(py, &overloads, args, kwargs)
}

/// `call_first_binding`. Each overload is tried by its fast path first, as a call of the
/// overload itself is: what the fast path binds, the general binder binds too, so the first
/// overload that either binds is the one called. Bound and run by the general path alone, a
/// packet call of `array_api::add(x, 1.5)` (its third overload) cost 2.5 times the overload's.
pub fn first_binding<'py>(
    py: Python<'py>,
    overloads: &[Bound<'py, PyOpOverload>],
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let _level = recursion::enter(py)?;
    let mut reasons = Vec::new();
    for o in overloads {
        if let Some(r) = fast::call(o, args.as_slice(), kwargs) {
            return r;
        }
        let handle = &o.get().handle;
        let schema = schema_of(py, handle)?;
        let mut passed = Passed::default();
        match bind(&schema, args, kwargs, &mut passed) {
            Ok(mut stack) => {
                handle.call_boxed(&mut stack).py(py)?;
                return returns_to_py(py, &stack, &passed);
            }
            Err(m) => reasons.push(format!("  {}: {m}", schema.text)),
        }
    }
    let name = overloads
        .first()
        .and_then(|o| o.get().handle.schema().ok().map(|s| s.schema.name.clone()))
        .unwrap_or_default();
    Err(new_err(
        py,
        "ArgumentError",
        format!(
            "{name}(): no overload binds these arguments:\n{}",
            reasons.join("\n")
        ),
    ))
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
    let kernel = super::library::kernel_from(py, fallback, true)?;
    crate::fallback::call_fallback(&kernel, &handle, keys, &mut stack).py(py)?;
    returns_to_py(py, &stack, &passed)
}
