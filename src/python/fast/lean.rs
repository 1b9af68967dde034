//! The lean path: every argument given by position and bound to itself, one return.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::dispatcher::{dispatch_keys, KernelCount, OperatorHandle};
use crate::key::{DispatchKey, DispatchKeySet};
use crate::python::array_kernel::ArrayKernel;
use crate::python::backend_kernel::BackendKernel;
use crate::python::ffi::vectorcall_or_raised;
use crate::python::overload::PyOpOverload;
use crate::python::plan::{Body, Kind, Plan};
use crate::python::py_kernel::PyKernel;
use crate::python::tensor::as_tensor;

use super::bind::is_exact_scalar;
use super::calls::{array_call, call_boxed, err_kernel};
use super::fallback::run_fallback;
use super::returns::{boxed_one, lean_return, Lean};
use super::route::{fallback_runs_here, Found};

/// A lean call ([`lean_args`]) that a Python function serves, run on the caller's argument
/// array: no bound arguments are built (two objects held and released per argument) and the
/// one return comes back as it is, not through `Rets`. [`Lean::Passed`], with nothing run,
/// where another kernel serves (`run` then takes the call); an error goes to `err`.
#[inline(always)]
pub(super) fn run_lean<'py>(
    slf: &Bound<'py, PyOpOverload>,
    plan: &Plan,
    body: &Body,
    keys: DispatchKeySet,
    args: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Lean<'py> {
    let py = slf.py();
    let op = &slf.get().handle;
    let Some((func, boxed, array, masked, count)) = lean_kernel(py, op, plan, keys) else {
        return Lean::Passed;
    };
    let schema = &plan.schema;
    // Begun and ended around the call rather than given it as a closure, which the compiler
    // would leave out of line: a frame of its own on every lean call.
    let counted = count.begin();
    // Each step answers an `Option` (one register) and puts its error in `err`: as
    // `PyResult`s (the size of a `PyErr`), the answers were moved through memory at every
    // step.
    let r = if boxed {
        match call_boxed(py, &func, slf, op, masked, args, err) {
            Some(list) => {
                let r = boxed_one(op, schema, masked, body, args, &list, err);
                slf.get().spare.give_back(list);
                r
            }
            None => None,
        }
    } else {
        let out = match array.then(|| func.cast::<ArrayKernel>().ok()).flatten() {
            Some(w) => array_call(py, w.get(), args),
            None => match payload_call(py, &func, args) {
                Some(out) => out.map_err(Some),
                None => vectorcall_or_raised(&func, args).ok_or(None),
            },
        };
        match out {
            Ok(out) => lean_return(out, &body.rets[0], op, schema, masked, args, err),
            Err(e) => err_kernel(py, e, op, masked, err),
        }
    };
    counted.end(op);
    match r {
        Some(r) => Lean::Done(r),
        None => Lean::Raised,
    }
}

/// A `bf.PayloadKernel`'s call on the caller's argument array, where `func` is a backend's
/// kernel made from one; None where it is not, or where its `otherwise` is to serve the call.
#[inline(always)]
fn payload_call<'py>(
    py: Python<'py>,
    func: &Bound<'py, PyAny>,
    args: &[Bound<'py, PyAny>],
) -> Option<PyResult<Bound<'py, PyAny>>> {
    let k = func.cast_exact::<BackendKernel>().ok()?;
    k.try_borrow().ok()?.call_payloads(py, args)
}

/// The Python function that serves a lean call on `keys`, whether it is boxed and takes arrays,
/// the masked keys, and whether the call is counted (a backend's own kernel); None where no
/// Python function serves it. Out of line: inlined into the
/// vectorcall entry with the rest of the lean path, the thread-local accesses of the read
/// section and of the key set were left out of line there, each a call of its own.
#[inline(never)]
pub(super) fn lean_kernel<'py>(
    py: Python<'py>,
    op: &OperatorHandle,
    plan: &Plan,
    keys: DispatchKeySet,
) -> Option<(Bound<'py, PyAny>, bool, bool, DispatchKeySet, KernelCount)> {
    op.route(keys, |r| {
        if !Arc::ptr_eq(r.schema(), &plan.schema) {
            return None;
        }
        let k = r.foreign::<PyKernel>()?;
        Some((k.func(py)?, k.boxed, k.array, r.keys(), r.counted()))
    })
    .flatten()
}

/// The keys of a call of device tensors that `bind_call` would bind each to itself: every
/// argument given by position, each tensor a `bf.Tensor` of a device that the call does not
/// write (`kernel_arg` gives it back as it is, to be lent to the kernel), every other argument
/// an exact scalar or None where optional (as `lean_args`), and one return. None for any other
/// call, which `bind_call` then binds.
#[inline(always)]
pub(super) fn device_keys(body: &Body, args: &[Bound<'_, PyAny>]) -> Option<DispatchKeySet> {
    if args.len() != body.args.len() || body.kwonly || body.rets.len() != 1 {
        return None;
    }
    let mut keys = DispatchKeySet::EMPTY;
    for (a, obj) in body.args.iter().zip(args) {
        if a.optional && obj.is_none() {
            continue;
        }
        match a.kind {
            Kind::Tensor => {
                let key = as_tensor(obj)?.get().inner.key();
                if a.write || key == DispatchKey::CPU {
                    return None;
                }
                keys |= key;
            }
            kind if is_exact_scalar(obj, kind) => {}
            _ => return None,
        }
    }
    if keys.is_empty() {
        return None;
    }
    Some(dispatch_keys(keys))
}

/// A call of device tensors (`device_keys`) that the CPU fallback serves with a Python CPU
/// kernel, from the lean entry (so only for a backend whose hooks are Rust, as `run` does
/// there): `run_fallback` on the caller's argument array, which is what `bind_call` would have
/// bound, with no bound-argument set built. None, with nothing run, where anything else serves
/// the call: the general way then binds it.
#[inline(never)]
pub(super) fn run_device_lean<'py>(
    slf: &Bound<'py, PyOpOverload>,
    plan: &Plan,
    body: &Body,
    keys: DispatchKeySet,
    args: &[Bound<'py, PyAny>],
) -> Option<PyResult<Bound<'py, PyAny>>> {
    match Found::of(slf.py(), &slf.get().handle, plan, keys)? {
        Found::Other(Some(found), masked) if fallback_runs_here(masked, false) => {
            run_fallback(slf, plan, body, found, args, args)
        }
        _ => None,
    }
}

/// The keys of a lean call: every tensor is a NumPy array, so the arguments' keys are CPU's
/// (as `bind_call` finds them, and as it takes for a call with no tensor).
#[inline(always)]
pub(super) fn lean_keys() -> DispatchKeySet {
    dispatch_keys(DispatchKey::CPU.set())
}

/// `op(*args)` by the lean path for `call_as`, once `lean_args` holds: out of line, so that a
/// call that is not lean (a Native kernel's `bf.Tensor`s, by `bf.Tensor.__add__`) pays only
/// the test, not a larger `call_as`.
#[inline(never)]
pub(super) fn call_lean<'py>(
    slf: &Bound<'py, PyOpOverload>,
    plan: &Plan,
    body: &Body,
    args: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Lean<'py> {
    run_lean(slf, plan, body, lean_keys(), args, err)
}
