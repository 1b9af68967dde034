//! Calling a kernel: a Python function (unboxed, or boxed on a list), a Native kernel of two
//! tensors, or any other on a boxed stack.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::dispatcher::{KernelCount, OpSchema, OperatorHandle, Routed};
use crate::ivalue::Stack;
use crate::kernel::TensorsFn;
use crate::key::{DispatchKey, DispatchKeySet};
use crate::python::array_kernel::ArrayKernel;
use crate::python::convert::{returns_to_py, to_ivalue, Passed};
use crate::python::errors::{to_pyerr, IntoPy};
use crate::python::ffi::{call_borrowed3_or_raised, list_set, vectorcall};
use crate::python::kernel::{bad_return, kernel_error};
use crate::python::overload::PyOpOverload;
use crate::python::plan::Body;
use crate::python::tensor::{as_tensor, cpu_tensor_to_numpy, wrap};

use super::bind::Bound_;
use super::objs::Objs;
use super::returns::{refill, ret_error, ret_to_caller, Rets};

/// An array kernel's call ([`ArrayKernel`]): its result, or its error (the `Err` of
/// [`err_kernel`]).
#[inline(never)]
pub(super) fn array_call<'py>(
    py: Python<'py>,
    w: &ArrayKernel,
    args: &[Bound<'py, PyAny>],
) -> Result<Bound<'py, PyAny>, Option<PyErr>> {
    vectorcall(w.kernel.bind(py), args)
        .and_then(|out| w.finish(out))
        .map_err(Some)
}

/// Puts a kernel's error, noted, in `err` (`e`: the error, else the one the interpreter has
/// set); None (for the caller to return).
#[cold]
#[inline(never)]
pub(super) fn err_kernel<'py, T>(
    py: Python<'py>,
    e: Option<PyErr>,
    op: &OperatorHandle,
    keys: DispatchKeySet,
    err: &mut Option<PyErr>,
) -> Option<T> {
    let e = e.unwrap_or_else(|| PyErr::fetch(py));
    *err = Some(to_pyerr(py, kernel_error(py, e, op, keys)));
    None
}

thread_local! {
    /// The buffer of this thread's next boxed call from Python (a nested call allocates its own).
    static SPARE_STACK: std::cell::Cell<Stack> = const { std::cell::Cell::new(Vec::new()) };
}

/// The stack `convert::bind` builds for the bound arguments (None if one does not convert,
/// which the fast bind has ruled out).
pub(super) fn boxed_stack(body: &Body, b: &Bound_<'_>, passed: &mut Passed) -> Option<Stack> {
    let mut stack = SPARE_STACK.with(std::cell::Cell::take);
    stack.reserve(body.args.len());
    for (i, (a, g)) in body.args.iter().zip(b.given.iter()).enumerate() {
        let v = if b.defaulted & (1 << i) != 0 {
            a.default_value.clone()?
        } else {
            to_ivalue(g, &a.ty, passed).ok()?
        };
        stack.push(v);
    }
    Some(stack)
}

/// Runs a kernel that is not a Python function as the router found it (`Routed::call_boxed`:
/// counted, and the CPU fallback with its entry's CPU kernel), and converts its returns as
/// `call_op` does.
pub(super) fn call_kernel_boxed<'py>(
    py: Python<'py>,
    op: &OperatorHandle,
    routed: &Routed<'_>,
    mut stack: Stack,
    passed: &Passed,
) -> PyResult<Bound<'py, PyAny>> {
    let result = routed
        .call_boxed(op, &mut stack)
        .py(py)
        .and_then(|()| returns_to_py(py, &stack, passed));
    stack.clear();
    SPARE_STACK.with(|c| c.set(stack));
    result
}

#[allow(clippy::too_many_arguments)]
pub(super) fn call_unboxed<'py>(
    py: Python<'py>,
    func: &Bound<'py, PyAny>,
    array: bool,
    op: &OperatorHandle,
    schema: &OpSchema,
    keys: DispatchKeySet,
    body: &Body,
    kobjs: &Objs<'py>,
    b: &Bound_<'py>,
    reuse: Option<&[Bound<'py, PyAny>]>,
) -> PyResult<Rets<'py>> {
    let py_err = |e: PyErr| to_pyerr(py, kernel_error(py, e, op, keys));
    let wrapper = array.then(|| func.cast::<ArrayKernel>().ok()).flatten();
    let inner;
    let func = match wrapper {
        Some(w) => {
            inner = w.get().kernel.bind(py).clone();
            &inner
        }
        None => func,
    };
    let out = match reuse {
        Some(args) => vectorcall(func, args),
        None => {
            let k = kobjs.as_slice();
            let kwargs = if body.kwonly {
                let d = PyDict::new(py);
                for (a, o) in body.args[body.positional..]
                    .iter()
                    .zip(kobjs.range(body.positional, body.args.len()))
                {
                    d.set_item(a.name.bind(py), o).map_err(py_err)?;
                }
                Some(d)
            } else {
                None
            };
            match (kwargs, body.positional) {
                // A few positional arguments go by vectorcall, without a tuple.
                (None, 1) => func.call1((&k[0],)),
                (None, 2) => func.call1((&k[0], &k[1])),
                (None, 3) => func.call1((&k[0], &k[1], &k[2])),
                (kwargs, _) => {
                    let args = PyTuple::new(py, kobjs.range(0, body.positional)).map_err(py_err)?;
                    func.call(args, kwargs.as_ref())
                }
            }
        }
    }
    .and_then(|out| match wrapper {
        Some(w) => w.get().finish(out),
        None => Ok(out),
    })
    .map_err(py_err)?;
    let n = body.rets.len();
    let mut rets = Objs::new();
    let mut one = |i: usize, o: &Bound<'py, PyAny>| -> PyResult<()> {
        match ret_to_caller(o, &body.rets[i], b.given.as_slice()) {
            Ok(r) => {
                rets.push(r?);
                Ok(())
            }
            Err(m) => Err(to_pyerr(py, ret_error(op, schema, keys, i, m))),
        }
    };
    match n {
        0 => {}
        1 => one(0, &out)?,
        _ => {
            let bad = |m: String| to_pyerr(py, bad_return(op, keys, m));
            let mut items = Objs::new();
            if let Ok(t) = out.cast::<PyTuple>() {
                if t.len() != n {
                    return Err(bad(format!("expected {n} returns, got {}", t.len())));
                }
                t.iter().for_each(|x| items.push(x));
            } else if let Ok(l) = out.cast::<PyList>() {
                if l.len() != n {
                    return Err(bad(format!("expected {n} returns, got {}", l.len())));
                }
                l.iter().take(n).for_each(|x| items.push(x));
            } else {
                return Err(bad(format!(
                    "expected a tuple of {n} returns, got {}",
                    crate::python::convert::type_name(&out)
                )));
            }
            for (i, o) in items.iter().enumerate() {
                one(i, o)?;
            }
        }
    }
    Ok(Rets::Few(rets))
}

/// Runs a boxed Python kernel `func(op, keys, stack)` on a stack of `kobjs`, and gives the
/// stack back for its returns to be read (the caller then hands it to `Spare::give_back`).
pub(super) fn call_boxed<'py>(
    py: Python<'py>,
    func: &Bound<'py, PyAny>,
    slf: &Bound<'py, PyOpOverload>,
    op: &OperatorHandle,
    keys: DispatchKeySet,
    kobjs: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Option<Bound<'py, PyList>> {
    let spare = &slf.get().spare;
    let made = match spare.list.take(py) {
        Some(l) => {
            let l = l.into_bound(py);
            if l.len() == kobjs.len() {
                // The last call's slots (None), replaced: the list keeps its storage.
                for (i, o) in kobjs.iter().enumerate() {
                    list_set(&l, i, o);
                }
                Ok(l)
            } else {
                refill(&l, kobjs).map(|()| l)
            }
        }
        None => PyList::new(py, kobjs.iter()),
    };
    let list = match made {
        Ok(l) => l,
        Err(e) => return err_kernel(py, Some(e), op, keys, err),
    };
    let keys_obj = match spare.keys_obj(py, keys) {
        Ok(k) => k,
        Err(e) => return err_kernel(py, Some(e), op, keys, err),
    };
    match call_borrowed3_or_raised(func, slf.as_any(), keys_obj.as_any(), list.as_any()) {
        Some(out) => {
            drop(out);
            Some(list)
        }
        None => err_kernel(py, None, op, keys, err),
    }
}

/// A call of two `bf.Tensor`s that a Native kernel of two arrays serves (`Route::Tensors`),
/// run by its typed entry on the caller's tensors: no stack of the arguments, no tensor handle
/// cloned into one, the result wrapped as `returns_to_py` wraps it (a new tensor is never an
/// argument's, so it is never the caller's object). `None` where the boxed kernel must serve:
/// another kernel, an argument that is no `bf.Tensor`, or a call the kernel hands to the CPU
/// fallback (which the boxed kernel then does, on the same arguments). A call the entry serves
/// is counted by `count` (the boxed kernel counts the others).
#[inline(always)]
pub(super) fn native_tensors<'py>(
    py: Python<'py>,
    op: &OperatorHandle,
    entry: TensorsFn,
    count: KernelCount,
    b: &Bound_<'py>,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    let [x, y] = b.given.as_slice() else {
        return None;
    };
    let (x, y) = (as_tensor(x)?, as_tensor(y)?);
    let call = count.begin();
    let t = match entry(op, &x.get().inner, &y.get().inner) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => {
            call.end(op);
            return Some(Err(to_pyerr(py, e)));
        }
    };
    call.end(op);
    Some(if t.key() == DispatchKey::CPU {
        cpu_tensor_to_numpy(py, &t, true)
    } else {
        wrap(py, t)
    })
}
