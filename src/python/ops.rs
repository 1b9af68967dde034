//! `OpOverload`'s calls (one operator, callable, by vectorcall), its `op.redispatch`, and packet
//! calls. The object itself is defined in `overload.rs`, below the fast path.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::convert::{bind, generic, returns_to_py, to_py, Passed, TensorStyle};

use super::errors::{new_err, IntoPy};
use super::fast::{self, Lean};
use super::ffi::{self, Getter, KeptAttribute, Return, VectorArgs, Vectorcall};
use super::keyset::PyKeySet;
use super::recursion;
use super::redispatch::{self, Redispatchable};
use super::schema::PyFunctionSchema;
use crate::dispatcher::{Dispatcher, OpSchema, OperatorHandle};

pub use super::overload::PyOpOverload;
use crate::error::Error;
use crate::ivalue::Stack;
use crate::key::DispatchKeySet;

impl PyOpOverload {
    /// `op(*args, **kwargs)`, by either calling convention; `tuple` is `args` when the caller
    /// packed them (the general path binds from a tuple).
    pub fn call_with<'py>(
        slf: &Bound<'py, Self>,
        args: &[Bound<'py, PyAny>],
        tuple: Option<&Bound<'py, PyTuple>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::call_as(slf, args, tuple, kwargs, false)
    }

    /// `call_with`; `relearn`: a call the vectorcall entry passed on (see `fast::call`).
    #[inline(always)]
    fn call_as<'py>(
        slf: &Bound<'py, Self>,
        args: &[Bound<'py, PyAny>],
        tuple: Option<&Bound<'py, PyTuple>>,
        kwargs: Option<&Bound<'py, PyDict>>,
        relearn: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let _level = recursion::enter(py)?;
        if let Some(r) = fast::call(slf, args, kwargs, relearn) {
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
        // The lean way runs a Python function, whose frame counts the level for Python.
        recursion::check_stack()?;
        let mut err = None;
        match fast::redispatch_lean(slf, keys, args, &mut err) {
            fast::Lean::Done(r) => return Ok(r),
            fast::Lean::Raised => return Err(fast::raised(&mut err)),
            fast::Lean::Passed => {}
        }
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
}

pub(super) fn schema_of(py: Python<'_>, op: &OperatorHandle) -> PyResult<std::sync::Arc<OpSchema>> {
    op.schema().py(py)
}

pub(super) fn argument_error(op: &OperatorHandle, schema: &OpSchema, message: String) -> Error {
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

    /// The operator's tags (`Library.define(tags=)`): `"default_dtypes"` where the dtypes of
    /// its results are the library's choice.
    #[getter]
    fn tags(&self) -> Vec<&'static str> {
        self.handle.tags().into_iter().map(|t| t.name()).collect()
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
        install_vectorcall(slf);
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
        if let Some(r) = fast::call(o, args.as_slice(), kwargs, false) {
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

// ---------------------------------------------------------------- op.redispatch

/// The getter of `OpOverload.redispatch` (installed by [`install_redispatch_getter`] in place
/// of the one PyO3 would make): a look-up of an operator whose function is made is a load and
/// an incref.
/// PyO3's getter wrapper (its trampoline, which counts the GIL in a thread-local twice, and
/// the take-and-put-back of the cell) was about a third of the look-up.
static GETTER: Getter = Getter::new::<PyOpOverload>(redispatch::NAME, redispatch::GET_DOC);

/// Puts [`GETTER`] in the `OpOverload` class as its `redispatch` attribute (once, when the
/// module is made, before any `OpOverload` exists).
pub fn install_redispatch_getter(py: Python<'_>) -> PyResult<()> {
    GETTER.install::<PyOpOverload>(py)
}

impl KeptAttribute for PyOpOverload {
    #[inline(always)]
    fn kept<'py>(slf: &Borrowed<'_, 'py, Self>) -> Option<Bound<'py, PyAny>> {
        PyOpOverload::kept_redispatch(slf)
    }

    fn make<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        PyOpOverload::redispatch_fn(slf)
    }
}

impl Redispatchable for PyOpOverload {
    #[inline(always)]
    fn redispatch_positional<'py>(
        slf: &Bound<'py, Self>,
        keys: DispatchKeySet,
        args: &[Bound<'py, PyAny>],
    ) -> PyResult<Bound<'py, PyAny>> {
        PyOpOverload::redispatch_positional(slf, keys, args)
    }

    #[inline]
    fn redispatch_with<'py>(
        slf: &Bound<'py, Self>,
        keys: DispatchKeySet,
        args: &[Bound<'py, PyAny>],
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        PyOpOverload::redispatch_with(slf, keys, args, kwargs)
    }
}

// ---------------------------------------------------------------- calls by vectorcall
//
// `op(x)` by Python's vectorcall protocol. PyO3 gives a class's `__call__` only the `tp_call`
// slot (PyO3 issue #4252), so every call from Python packed its arguments into a new tuple,
// which the fast path then unpacked: the tuple's allocation, its release and the generic
// call machinery around it were about a seventh of a trivial Python kernel's call through
// boxfall. With vectorcall the interpreter passes its own array of argument pointers.
//
// A vectorcall class keeps the entry point in each object, at an offset the class names
// (`tp_vectorcall_offset`, with the `Py_TPFLAGS_HAVE_VECTORCALL` flag). Every `OpOverload`
// carries [`ENTRY`] in a field; where that field sits in the object depends on PyO3's layout,
// so it is read off the first `OpOverload` that is called (through `tp_call`), and the class
// is switched over then. `tp_call` stays, and gives the same results (both end in
// `PyOpOverload::call_with`): C code that calls with a tuple still reaches it.

/// Whether the class was switched over.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Switches the `OpOverload` class to vectorcall, from one of its objects (once; the GIL
/// serialises the callers).
fn install_vectorcall(slf: &Bound<'_, PyOpOverload>) {
    ffi::install_vectorcall(&INSTALLED, slf, &slf.get().vectorcall);
}

/// Whether `op`'s calls from Python try the lean entry first (for tests).
#[pyfunction]
#[pyo3(name = "_tries_lean_entry")]
pub fn tries_lean_entry(op: &Bound<'_, PyOpOverload>) -> bool {
    op.get().lean.load(Ordering::Relaxed)
}

/// Whether calls from Python now come by vectorcall (for tests).
#[pyfunction]
pub fn vectorcall_installed(py: Python<'_>) -> bool {
    ffi::has_vectorcall::<PyOpOverload>(py)
}

/// A call that a Python function serves by the fast path (the one path that never asks for
/// `Python::attach`) runs in the lean trampoline (`ffi::lean`); whatever else, in PyO3's own
/// trampoline (which counts the GIL for PyO3) around `call`: under the lean one, a call from
/// plain Python code would run with PyO3's count at zero, and every `Python::attach` under it
/// (the core's calls of Python kernels, a Python backend's conversions) would go through
/// `PyGILState_Ensure`, a twentieth more on a call by the general path. An operator tries the
/// lean way until a call finds no Python function to run (which the fast path tells before it
/// runs anything); from then on it goes PyO3's way.
impl Vectorcall for PyOpOverload {
    #[inline(always)]
    fn vectorcall<'a, 'py>(slf: &Borrowed<'a, 'py, Self>, args: VectorArgs<'a, 'py>) -> Return {
        if !args.has_keywords() {
            let lean = &slf.get().lean;
            if lean.load(Ordering::Relaxed) {
                let all = args.positional();
                let served = ffi::lean(slf.py(), |_| {
                    let mut err = None;
                    match PyOpOverload::call_python(slf, all, &mut err) {
                        Lean::Done(r) => Ok(Some(r)),
                        Lean::Raised => Err(super::fast::raised(&mut err)),
                        Lean::Passed => Ok(None),
                    }
                });
                if let Some(out) = served {
                    return out;
                }
                lean.store(false, Ordering::Relaxed);
            }
        }
        args.general(slf)
    }

    fn call<'py>(
        slf: &Bound<'py, Self>,
        positional: &[Bound<'py, PyAny>],
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        PyOpOverload::call_as(slf, positional, None, kwargs, true)
    }
}
