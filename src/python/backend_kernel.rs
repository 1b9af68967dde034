//! A Python kernel registered for a backend key, as it runs: under the backend's lock if the
//! backend was registered with `thread_safe=False`, and with residency's steps around it on a
//! lazy backend (`crate::resident`): each host-only tensor argument gets its payload before
//! the kernel runs, the ones its schema marks as written have their data versions moved on
//! after it, and those whose host memory NumPy holds are settled.
//!
//! The tensors are found as the kernel gets them: its arguments by position and keyword, or
//! the stack's items in the schema's order for a kernel registered `boxed=True`
//! (`fn(op, keys, stack)`). A backend's own fallback gets no residency step: it may hand the
//! call on to the CPU fallback (the pattern torch_xla's fallback follows), which moves what it
//! needs itself, so payloads made before it, or writes noted after it, would move data for
//! nothing; a fallback that reads a payload (`t.payload`) gets it made then.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::backend::{backend_lock, is_python_backend, Serial};
use super::errors::{new_err, IntoPy};
use super::payload_kernel::PayloadKernel;
use super::tensor::{as_tensor, object_tensor};
use crate::dispatcher::{OpSchema, OperatorHandle};
use crate::key::DispatchKey;
use crate::schema::ArgKind;
use crate::tensor::Tensor;

/// A Python kernel registered for a backend key, as it runs. Made by `Library.impl` and
/// `Library.fallback`. Its calls are counted in the operator's `kernel_calls` where the call
/// is routed (the dispatcher, or the bindings that run the function themselves), not here.
#[pyclass(name = "BackendKernel", module = "boxfall")]
pub struct BackendKernel {
    func: Option<Py<PyAny>>,
    lock: Option<Py<PyAny>>,
    /// The backend whose residency steps run around the kernel (None: a functionality key, the
    /// CPU, or a fallback, which have none).
    resident: Option<DispatchKey>,
    /// The operator whose schema says which arguments the kernel writes (None: a fallback's).
    op: Option<OperatorHandle>,
    /// `fn(op, keys, stack)`: the tensors are the stack's items.
    boxed: bool,
    /// A `bf.PayloadKernel`, tried first (`func` is its `otherwise`).
    payload: Option<Py<PayloadKernel>>,
}

#[pymethods]
impl BackendKernel {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let func = self
            .func
            .as_ref()
            .ok_or_else(|| new_err(py, "BoxfallError", "the kernel was cleared".to_string()))?;
        let _serial = Serial::enter(py, self.lock.as_ref())?;
        // A Python backend's kernels (lazy or not: a view they write must reach its base, and
        // an in-place kernel may return new payloads), and a lazy Rust backend's.
        let resident = self.resident.filter(|key| {
            is_python_backend(*key) || crate::backend::backend(*key).is_some_and(|b| b.lazy())
        });
        let Some(key) = resident else {
            return func.bind(py).call(args, kwargs);
        };
        if kwargs.is_none() {
            if let Some(out) = self.on_payloads(py, key, args.as_slice()) {
                return out;
            }
        }
        let schema = self.op.as_ref().and_then(|op| op.schema().ok());
        let held = self.arguments(schema.as_deref(), args, kwargs);
        // A view NumPy makes read-only (`broadcast_to`'s) is refused as a written argument, as
        // NumPy refuses it, before anything runs.
        for (obj, _) in held.iter().filter(|(_, w)| *w) {
            each_tensor(obj, &mut |t| self.writable(t))?;
        }
        let refreshed = held
            .iter()
            .try_for_each(|(obj, _)| each_tensor(obj, &mut |t| crate::resident::refresh(t).py(py)));
        if let Err(e) = refreshed {
            // The payloads made for the kernel before the failure go as the kernel's would:
            // every tensor is left as it was.
            let _ = settle(py, key, &[], &held);
            return Err(e);
        }
        let out = func.bind(py).call(args, kwargs);
        let out = match (out, &schema) {
            (Ok(out), Some(schema)) if is_python_backend(key) => {
                self.new_payloads(py, key, schema, (args, kwargs), &held, out)
            }
            (out, _) => out,
        };
        // Whether it succeeded or not: a failing kernel may have written part of it.
        let mut written = Vec::new();
        for (obj, _) in held.iter().filter(|(_, w)| *w) {
            let _ = each_tensor(obj, &mut |t| {
                t.note_write();
                written.push(t.clone());
                Ok(())
            });
        }
        let settled = settle(py, key, &written, &held);
        // A failing kernel's own error is the one to report.
        if out.is_ok() {
            settled?;
        }
        out
    }

    /// The kernel as it was registered.
    #[getter]
    fn __wrapped__(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.func.as_ref().map(|f| f.clone_ref(py))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(f) = &self.func {
            visit.call(f)?;
        }
        if let Some(l) = &self.lock {
            visit.call(l)?;
        }
        if let Some(p) = &self.payload {
            visit.call(p)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.func = None;
        self.lock = None;
        self.payload = None;
    }
}

impl BackendKernel {
    /// A `bf.PayloadKernel`'s call on `args` (given by position), under the backend's lock
    /// where it has one (the caller holds it when `key` is given); None, with nothing run,
    /// where the kernel is none or its `otherwise` is to serve the call.
    fn on_payloads<'py>(
        &self,
        py: Python<'py>,
        key: DispatchKey,
        args: &[Bound<'py, PyAny>],
    ) -> Option<PyResult<Bound<'py, PyAny>>> {
        self.payload
            .as_ref()?
            .get()
            .call(py, key, self.op.as_ref(), args)
    }

    /// A `bf.PayloadKernel`'s call on the caller's own argument array, from the fast path's
    /// lean call, so that no argument tuple is made: as `__call__` runs it, lock included.
    pub(super) fn call_payloads<'py>(
        &self,
        py: Python<'py>,
        args: &[Bound<'py, PyAny>],
    ) -> Option<PyResult<Bound<'py, PyAny>>> {
        let p = self.payload.as_ref()?;
        let key = self.resident?;
        let _serial = match Serial::enter(py, self.lock.as_ref()) {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        p.get().call(py, key, self.op.as_ref(), args)
    }

    /// The objects that may hold the call's tensors, each with whether the schema marks it as
    /// written (false for all where the operator has no schema). A boxed call's are the
    /// stack's items as the kernel gets them (the kernel replaces them with its returns).
    fn arguments<'py>(
        &self,
        schema: Option<&OpSchema>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> Vec<(Bound<'py, PyAny>, bool)> {
        let arguments = schema.map_or(&[][..], |s| &s.schema.arguments[..]);
        let writes = |i: usize| arguments.get(i).is_some_and(|a| a.is_write());
        if self.boxed {
            let stack = args.get_item(2).ok();
            let Some(stack) = stack.as_ref().and_then(|s| s.cast::<PyList>().ok()) else {
                return Vec::new();
            };
            return stack
                .iter()
                .enumerate()
                .map(|(i, o)| (o, writes(i)))
                .collect();
        }
        let mut positional = arguments.iter().filter(|a| !a.kwarg_only);
        let mut held: Vec<_> = args
            .iter()
            .map(|o| (o, positional.next().is_some_and(|a| a.is_write())))
            .collect();
        if let Some(kw) = kwargs {
            for (k, v) in kw.iter() {
                let w = k
                    .extract::<String>()
                    .is_ok_and(|name| arguments.iter().any(|a| a.name == name && a.is_write()));
                held.push((v, w));
            }
        }
        held
    }
}

impl BackendKernel {
    /// A `ValueError`, as NumPy's for an assignment to a read-only array, where `t` is a view
    /// NumPy makes read-only (`broadcast_to`'s) that the kernel would write.
    fn writable(&self, t: &Tensor) -> PyResult<()> {
        match super::view_desc::view_ops(t) {
            Some(view) if !view.writable => {
                let op = self
                    .op
                    .as_ref()
                    .map_or(String::new(), |op| op.name().to_string());
                Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "assignment destination is read-only: {} of a tensor on {} cannot be written (NumPy makes it read-only), and '{op}' did not run",
                    t.view_ops().map_or_else(|| "a view".into(), |v| v.describe()),
                    t.device(),
                )))
            }
            _ => Ok(()),
        }
    }

    /// Immutable device memory: a return of the kernel that aliases a written argument
    /// (`Tensor(a!)`) may be a new payload, or a new `bf.Tensor` of the backend, rather than
    /// the argument written where it is; it is put in the argument's place
    /// (`Tensor::put_written`: a write of it, seen by its views; a view's is written into its
    /// base after the kernel), and the caller gets the argument. None there says the kernel
    /// wrote the argument where it is. A new value of another shape, dtype or device than the
    /// argument's is a `KernelError` naming the operator and the backend, and the argument is
    /// unchanged.
    fn new_payloads<'py>(
        &self,
        py: Python<'py>,
        key: DispatchKey,
        schema: &OpSchema,
        (args, kwargs): (&Bound<'py, PyTuple>, Option<&Bound<'py, PyDict>>),
        held: &[(Bound<'py, PyAny>, bool)],
        out: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let returns = &schema.info.returns;
        let aliased = |r: &crate::schema::ReturnFacts| {
            (r.is_write && r.kind == ArgKind::Tensor)
                .then_some(r.aliases_arg)
                .flatten()
        };
        if !returns.iter().any(|r| aliased(r).is_some()) {
            return Ok(out);
        }
        // The returns as the kernel left them: its return value, a tuple of them, or the
        // stack of a boxed kernel.
        let stack = if self.boxed {
            args.get_item(2)?.cast_into::<PyList>().ok()
        } else {
            None
        };
        let mut items: Vec<Bound<'py, PyAny>> = match (&stack, returns.len()) {
            (Some(stack), _) => stack.iter().collect(),
            (None, 1) => vec![out.clone()],
            (None, _) => match out.try_iter() {
                Ok(it) if out.is_instance_of::<PyTuple>() || out.is_instance_of::<PyList>() => {
                    it.collect::<PyResult<_>>()?
                }
                // Not a sequence: the conversion of the returns says what is wrong.
                _ => return Ok(out),
            },
        };
        if items.len() != returns.len() {
            return Ok(out);
        }
        let mut changed = false;
        for (r, facts) in returns.iter().enumerate() {
            let Some(i) = aliased(facts) else {
                continue;
            };
            let arg_obj = if self.boxed {
                held.get(i).map(|(o, _)| o.clone())
            } else {
                argument_object(schema, i, args, kwargs)
            };
            let Some(arg_obj) = arg_obj else {
                continue;
            };
            let Some(arg) = as_tensor(&arg_obj).map(|t| t.get().inner.clone()) else {
                continue;
            };
            let ret = &items[r];
            if !ret.is_none() {
                if let Some(t) = as_tensor(ret) {
                    if t.get().inner.same(&arg) {
                        continue;
                    }
                }
                let made = match as_tensor(ret) {
                    Some(t) => t.get().inner.clone(),
                    None => object_tensor(arg.device(), ret),
                };
                let op = self
                    .op
                    .as_ref()
                    .map_or(String::new(), |op| op.name().to_string());
                check_new_payload((key, &op), schema, i, &arg, &made).py(py)?;
                arg.put_written(made.data());
            }
            items[r] = arg_obj;
            changed = true;
        }
        if !changed {
            return Ok(out);
        }
        match stack {
            Some(stack) => {
                for (r, item) in items.into_iter().enumerate() {
                    stack.set_item(r, item)?;
                }
                Ok(out)
            }
            None if returns.len() == 1 => Ok(items.swap_remove(0)),
            None => Ok(PyTuple::new(py, items)?.into_any()),
        }
    }
}

/// The object the kernel got for the schema's argument `i`: by position, or by keyword for a
/// keyword-only one (or a positional one given by keyword).
fn argument_object<'py>(
    schema: &OpSchema,
    i: usize,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> Option<Bound<'py, PyAny>> {
    let arguments = &schema.schema.arguments;
    let arg = arguments.get(i)?;
    if !arg.kwarg_only {
        let pos = arguments[..i].iter().filter(|a| !a.kwarg_only).count();
        if let Ok(o) = args.get_item(pos) {
            return Some(o);
        }
    }
    kwargs.and_then(|kw| kw.get_item(&arg.name).ok().flatten())
}

/// A new payload (or tensor) an in-place kernel returned for argument `i`, `arg`: of `arg`'s
/// device, shape and dtype, as a write in place keeps them.
fn check_new_payload(
    (key, op): (DispatchKey, &str),
    schema: &OpSchema,
    i: usize,
    arg: &Tensor,
    made: &Tensor,
) -> crate::error::Result<()> {
    let context = || format!("the '{}' kernel of '{op}'", key.name());
    let param = &schema.schema.arguments[i];
    if made.device() != arg.device() {
        return Err(crate::error::Error::Kernel {
            context: context(),
            message: format!(
                "it returned a tensor on {} for argument '{}', a tensor on {}; an in-place kernel returns the argument, a new payload for it, or None, and the argument is unchanged",
                made.device(),
                param.name,
                arg.device()
            ),
        });
    }
    if let (Some(before), Some(after)) = (arg.meta(), made.meta()) {
        crate::fallback::check_write(param, &before, &after).map_err(|message| {
            crate::error::Error::Kernel {
                context: context(),
                message,
            }
        })?;
    }
    Ok(())
}

/// Calls `f` with every `bf.Tensor` among a kernel's arguments (list and tuple elements
/// included).
fn each_tensor(
    obj: &Bound<'_, PyAny>,
    f: &mut impl FnMut(&Tensor) -> PyResult<()>,
) -> PyResult<()> {
    if let Some(t) = as_tensor(obj) {
        return f(&t.get().inner);
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        for item in obj.try_iter()? {
            if let Some(t) = as_tensor(&item?) {
                f(&t.get().inner)?;
            }
        }
    }
    Ok(())
}

/// Residency: the arguments whose host memory NumPy holds (`np.asarray(t)`) are settled after
/// a backend's kernel (`resident::settle`): the `written` ones have the kernel's values copied
/// back into that memory, and every one drops the payload made for the kernel.
fn settle(
    py: Python<'_>,
    key: DispatchKey,
    written: &[Tensor],
    held: &[(Bound<'_, PyAny>, bool)],
) -> PyResult<()> {
    let Some(hooks) = crate::backend::backend(key) else {
        return Ok(());
    };
    for (obj, _) in held {
        each_tensor(obj, &mut |t| {
            let wrote = written.iter().any(|w| w.same(t));
            crate::resident::settle(hooks, t, wrote).py(py)
        })?;
    }
    Ok(())
}

/// `func`, a Python kernel registered for `key`, as it is to run: a [`BackendKernel`] if `key`
/// is a backend (other than the CPU) or a backend registered with `thread_safe=False`, else
/// `func` itself. `op` is the kernel's operator, whose schema the residency step reads (None
/// for a fallback, which gets no residency step). `boxed`: the kernel is
/// `fn(op, keys, stack)`.
pub(crate) fn backend_kernel<'py>(
    py: Python<'py>,
    key: DispatchKey,
    func: &Bound<'py, PyAny>,
    op: Option<OperatorHandle>,
    boxed: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let lock = backend_lock(py, key);
    let resident = (key.is_backend() && key != DispatchKey::CPU && op.is_some()).then_some(key);
    let payload = func.cast::<PayloadKernel>().ok();
    if let Some(p) = payload {
        check_payload_kernel(py, key, op.as_ref(), boxed)?;
        let otherwise = p.get().otherwise.bind(py).clone();
        return Ok(Bound::new(
            py,
            BackendKernel {
                func: Some(otherwise.unbind()),
                lock,
                resident,
                op,
                boxed,
                payload: Some(p.clone().unbind()),
            },
        )?
        .into_any());
    }
    if lock.is_none() && resident.is_none() {
        return Ok(func.clone());
    }
    Ok(Bound::new(
        py,
        BackendKernel {
            func: Some(func.clone().unbind()),
            lock,
            resident,
            op,
            boxed,
            payload: None,
        },
    )?
    .into_any())
}

/// A `bf.PayloadKernel` is registered for a Python backend's key, unboxed, for a defined
/// operator that writes none of its arguments (its function returns new payloads only).
fn check_payload_kernel(
    py: Python<'_>,
    key: DispatchKey,
    op: Option<&OperatorHandle>,
    boxed: bool,
) -> PyResult<()> {
    let what = |op: Option<&OperatorHandle>| match op {
        Some(op) => format!("the '{key}' kernel of '{}'", op.name()),
        None => format!("a '{key}' kernel"),
    };
    let refuse = |message: String| Err(new_err(py, "RegistrationError", message));
    if !is_python_backend(key) {
        return refuse(format!(
            "{}: a bf.PayloadKernel serves a backend registered from Python (its tensors hold payloads), and '{key}' is not one; nothing was registered",
            what(op)
        ));
    }
    if boxed {
        return refuse(format!(
            "{}: a bf.PayloadKernel is not boxed (it gets payloads, not a stack); nothing was registered",
            what(op)
        ));
    }
    let Some(schema) = op.and_then(|op| op.schema().ok()) else {
        return refuse(format!(
            "{}: a bf.PayloadKernel's operator must be defined first (its schema says which arguments are written); nothing was registered",
            what(op)
        ));
    };
    if let Some(a) = schema.schema.arguments.iter().find(|a| a.is_write()) {
        return refuse(format!(
            "{}: the operator writes its argument '{}', and a bf.PayloadKernel returns new payloads only (register a usual kernel, which may return the argument's new payload); nothing was registered",
            what(op),
            a.name
        ));
    }
    Ok(())
}
