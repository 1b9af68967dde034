//! Python functions as kernels: unboxed-style (arguments by position, keyword-only ones by
//! keyword; CPU tensors as NumPy arrays) and boxed `fn(op, keys, stack)`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use std::sync::Arc;

use super::convert::{generic, to_ivalue, to_py, Passed, TensorStyle};
use super::errors::{from_pyerr, with_note};
use super::keyset::PyKeySet;
use super::overload::PyOpOverload;
use super::py_kernel::PyKernel;
use super::tensor::numpy_to_host;
use crate::dispatcher::OperatorHandle;
use crate::error::{Error, Result};
use crate::ivalue::{IValue, Stack};
use crate::kernel::KernelFunction;
use crate::key::{DispatchKey, DispatchKeySet};
use crate::tensor::{Tensor, TensorData, TensorMeta};

/// A Python function as a kernel, and its payload. The kernel is a foreign one
/// ([`KernelFunction::with_foreign`]): the entries it serves route `Route::Foreign`, and the
/// router gives the payload back, so that a Python call whose kernel it is calls the function
/// directly (`fast.rs`). The caller keeps the payload to show the function to the garbage
/// collector (`library.rs`).
pub fn python_kernel(func: Py<PyAny>, boxed: bool) -> (KernelFunction, Arc<PyKernel>) {
    let payload = Arc::new(PyKernel::new(func, boxed));
    let k = payload.clone();
    let kernel = KernelFunction::from_boxed(move |op, keys, stack| {
        Python::attach(|py| {
            let Some(func) = k.func(py) else {
                return Err(bad_return(op, keys, "its Library was collected".into()));
            };
            if k.boxed {
                call_boxed_kernel(py, &func, op, keys, stack)
            } else {
                call_kernel(py, &func, op, keys, stack)
            }
        })
    })
    .with_foreign(payload.clone())
    .long_running();
    (kernel, payload)
}

fn key_name(keys: DispatchKeySet) -> String {
    keys.highest().unwrap_or(DispatchKey::CPU).name()
}

pub(super) fn kernel_error(
    py: Python<'_>,
    e: PyErr,
    op: &OperatorHandle,
    keys: DispatchKeySet,
) -> Error {
    from_pyerr(with_note(
        py,
        e,
        format!(
            "while running the '{}' kernel of '{}'",
            key_name(keys),
            op.name()
        ),
    ))
}

pub(super) fn bad_return(op: &OperatorHandle, keys: DispatchKeySet, message: String) -> Error {
    Error::Kernel {
        context: format!("the '{}' kernel of '{}'", key_name(keys), op.name()),
        message,
    }
}

fn call_kernel(
    py: Python<'_>,
    func: &Bound<'_, PyAny>,
    op: &OperatorHandle,
    keys: DispatchKeySet,
    stack: &mut Stack,
) -> Result<()> {
    // Held by a count, not borrowed from a read section: the kernel may run for long, and a
    // thread inside a read section holds back the reclamation of every replaced table.
    let schema = op.schema()?;
    let schema = &*schema;
    let mut passed = Passed::default();
    let mut written: Written<'_> = Vec::new();
    let params = &schema.schema.arguments;
    // Keyword-only arguments come after the positional ones; most operators have none, and
    // then no dict.
    let npos = params.iter().take_while(|a| !a.kwarg_only).count();
    let py_err = |e: PyErr| kernel_error(py, e, op, keys);
    let objects = kernel_arguments(py, schema, stack, &mut passed, &mut written).map_err(py_err)?;
    let kwargs = if params.iter().any(|a| a.kwarg_only) {
        let kw = PyDict::new(py);
        for (arg, obj) in params.iter().zip(&objects).filter(|(a, _)| a.kwarg_only) {
            kw.set_item(&arg.name, obj).map_err(py_err)?;
        }
        Some(kw)
    } else {
        None
    };
    let regular = params[npos..].iter().all(|a| a.kwarg_only);
    let out = match (&kwargs, objects.as_slice()) {
        // A few positional arguments go by vectorcall, without a tuple.
        (None, [a]) if regular && npos == 1 => func.call1((a,)),
        (None, [a, b]) if regular && npos == 2 => func.call1((a, b)),
        (None, [a, b, c]) if regular && npos == 3 => func.call1((a, b, c)),
        _ => {
            let args = if regular {
                PyTuple::new(py, objects.iter().take(npos)).map_err(py_err)?
            } else {
                let positional = params.iter().zip(&objects).filter(|(a, _)| !a.kwarg_only);
                PyTuple::new(py, positional.map(|(_, o)| o).collect::<Vec<_>>()).map_err(py_err)?
            };
            func.call(args, kwargs.as_ref())
        }
    }
    .map_err(py_err)?;
    let rets = &schema.schema.returns;
    let convert = |r: &crate::schema::Argument, obj: &Bound<'_, PyAny>, passed: &mut Passed| {
        to_ivalue(obj, &r.ty, passed).map_err(|m| {
            bad_return(
                op,
                keys,
                format!("return '{}' ({}): {m}", r.name, r.type_str()),
            )
        })
    };
    // The stack's buffer takes the returns.
    stack.clear();
    match rets.len() {
        0 => {}
        1 => {
            // One tensor cannot alias another return (a list might hold one object twice).
            if crate::schema::ArgKind::of(&rets[0].ty) == crate::schema::ArgKind::Tensor {
                passed.seal();
            }
            stack.push(convert(&rets[0], &out, &mut passed)?)
        }
        n => {
            let xs: Vec<_> = match (out.cast::<PyTuple>(), out.cast::<PyList>()) {
                (Ok(t), _) => t.iter().collect(),
                (_, Ok(l)) => l.iter().collect(),
                _ => {
                    return Err(bad_return(
                        op,
                        keys,
                        format!("expected a tuple of {n} returns, got {}", type_name(&out)),
                    ))
                }
            };
            if xs.len() != n {
                return Err(bad_return(
                    op,
                    keys,
                    format!("expected {n} returns, got {}", xs.len()),
                ));
            }
            for (r, obj) in rets.iter().zip(xs.iter()) {
                let v = convert(r, obj, &mut passed)?;
                stack.push(v);
            }
        }
    }
    // Written last, once nothing else can fail: a kernel whose returns are wrong changes no
    // argument.
    copy_back(op, keys, schema, &written)
}

/// The NumPy copies a kernel writes, with the host tensors they are copied back into and the
/// index of their argument.
type Written<'py> = Vec<(usize, Bound<'py, PyAny>, Tensor)>;

/// The arguments as the Python objects a kernel gets: CPU tensors as NumPy arrays (host memory
/// lent read-only, or copied where the kernel writes it; those copies go in `written`, to be
/// copied back once the kernel has succeeded), device tensors as `bf.Tensor`.
fn kernel_arguments<'py>(
    py: Python<'py>,
    schema: &crate::dispatcher::OpSchema,
    stack: &Stack,
    passed: &mut Passed,
    written: &mut Written<'py>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    // Only a CPU tensor of host memory becomes a NumPy copy; a device tensor reaches the kernel
    // as a `bf.Tensor`, which the kernel writes through operators.
    let is_host = |t: &Tensor| t.key() == DispatchKey::CPU && t.is_host();
    let mut objects = Vec::with_capacity(stack.len());
    for (i, v) in stack.iter().enumerate() {
        let writable = schema.schema.arguments.get(i).is_some_and(|a| a.is_write());
        let obj = to_py(py, v, passed, TensorStyle::Kernel { writable })?;
        match v {
            IValue::Tensor(t) => {
                if writable && is_host(t) {
                    written.push((i, obj.clone(), t.clone()));
                }
                if passed.object_for(py, t).is_none() {
                    passed.note(&obj, t);
                }
            }
            IValue::TensorList(ts) if writable => {
                for (j, t) in ts.iter().enumerate().filter(|(_, t)| is_host(t)) {
                    written.push((i, obj.get_item(j)?, t.clone()));
                }
            }
            IValue::OptionalTensorList(ts) if writable => {
                for (j, t) in ts.iter().enumerate() {
                    if let Some(t) = t.as_ref().filter(|t| is_host(t)) {
                        written.push((i, obj.get_item(j)?, t.clone()));
                    }
                }
            }
            _ => {}
        }
        objects.push(obj);
    }
    Ok(objects)
}

/// Copies what a kernel wrote into NumPy copies back into their host tensors: every copy is
/// read and checked first (an in-place write keeps its argument's shape and dtype, unless the
/// schema lets it resize), and only then are the tensors written, so a failure writes none.
fn copy_back(
    op: &OperatorHandle,
    keys: DispatchKeySet,
    schema: &crate::dispatcher::OpSchema,
    written: &Written<'_>,
) -> Result<()> {
    if written.is_empty() {
        return Ok(());
    }
    let mut hosts = Vec::with_capacity(written.len());
    for (i, arr, t) in written {
        let arg = &schema.schema.arguments[*i];
        let host = numpy_to_host(arr).map_err(|e| {
            bad_return(
                op,
                keys,
                format!("argument '{}' as the kernel left it: {e}", arg.name),
            )
        })?;
        if let Some(before) = t.meta() {
            let after = TensorMeta::of_host(&host);
            crate::fallback::check_write(arg, &before, &after)
                .map_err(|m| bad_return(op, keys, m))?;
        }
        hosts.push(host);
    }
    for ((_, _, t), host) in written.iter().zip(hosts) {
        t.set_data(TensorData::Host(std::sync::Arc::new(host)));
    }
    Ok(())
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn call_boxed_kernel(
    py: Python<'_>,
    func: &Bound<'_, PyAny>,
    op: &OperatorHandle,
    keys: DispatchKeySet,
    stack: &mut Stack,
) -> Result<()> {
    let schema = op.schema()?;
    let mut passed = Passed::default();
    let mut written = Vec::new();
    let py_err = |e: PyErr| kernel_error(py, e, op, keys);
    let nargs = stack.len();
    let items = kernel_arguments(py, &schema, stack, &mut passed, &mut written).map_err(py_err)?;
    let list = PyList::new(py, items).map_err(py_err)?;
    let op_obj = PyOpOverload::new_bound(py, op.clone()).map_err(py_err)?;
    let keys_obj = Bound::new(py, PyKeySet(keys)).map_err(py_err)?;
    let called = func.call1((&op_obj, keys_obj, &list));
    PyOpOverload::drop_redispatch_cycle(&op_obj);
    drop(op_obj);
    called.map_err(py_err)?;
    let rets = &schema.schema.returns;
    if list.len() != rets.len() && !schema.schema.is_varret {
        return Err(stack_count_error(op, keys, &schema, list.len(), nargs));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, obj) in list.iter().enumerate() {
        let v = match rets.get(i).filter(|_| list.len() == rets.len()) {
            Some(r) => to_ivalue(&obj, &r.ty, &mut passed).map_err(|m| {
                bad_return(
                    op,
                    keys,
                    format!("return '{}' ({}): {m}", r.name, r.type_str()),
                )
            })?,
            // A schema with `...` returns takes what the kernel left, by its own types.
            None => generic(&obj, &mut passed),
        };
        out.push(v);
    }
    // Written last, once nothing else can fail: a kernel whose returns are wrong changes no
    // argument.
    copy_back(op, keys, &schema, &written)?;
    *stack = out;
    Ok(())
}

/// A boxed kernel that left another number of values on the stack than the schema has
/// returns (`nargs`: how many arguments it was given, for the hint to a fallback that left
/// them as they were).
pub(super) fn stack_count_error(
    op: &OperatorHandle,
    keys: DispatchKeySet,
    schema: &crate::dispatcher::OpSchema,
    left: usize,
    nargs: usize,
) -> Error {
    let rets = &schema.schema.returns;
    let types: Vec<String> = rets.iter().map(|r| r.type_str()).collect();
    let hint = if left == nargs && nargs > 0 {
        "; a boxed kernel or fallback that does not compute the returns itself must redispatch \
         (`op.redispatch_boxed(keys, stack)`, or `stack[:] = [op.redispatch(keys, *stack)]`)"
    } else {
        "; a boxed kernel replaces the arguments on the stack with the returns"
    };
    bad_return(
        op,
        keys,
        format!(
            "the boxed kernel left {left} value{} on the stack, but the schema returns {} ({}){hint}",
            if left == 1 { "" } else { "s" },
            rets.len(),
            if types.is_empty() { "()".to_string() } else { types.join(", ") },
        ),
    )
}
