//! The fast path's entries: `op(...)`, the vectorcall entry, and the redispatches.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::dispatcher::dispatch_keys;
use crate::key::{DispatchKey, DispatchKeySet};
use crate::python::overload::PyOpOverload;

use super::bind::{bind_call, bind_stack, lean_args, no_kwargs, Bound_};
use super::lean::{call_lean, device_keys, lean_keys, run_device_lean, run_lean};
use super::objs::Objs;
use super::returns::{one_into_list, Lean};
use super::route::run;

pub(super) static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the fast path on or off (for tests that compare it with the general path); returns
/// whether it was on.
#[pyfunction]
pub fn set_fast_path(on: bool) -> bool {
    ENABLED.swap(on, Ordering::Relaxed)
}

pub(super) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// `op(*args, **kwargs)` by the fast path, or None. The lean path is tried only while the
/// operator's calls from Python still try it first (`PyOpOverload::lean`): once one of its
/// calls found no Python function, its calls come here, and mostly for another kernel (a
/// Native one's `bf.Tensor`s), where the lean test only added its own cost. `relearn`: a
/// call from Python that the lean entry passed on (`OpOverload`'s vectorcall entry) tries the
/// lean path all the same, and one it serves sets the operator's calls back to the lean
/// entry: one call with a Python backend's tensors cleared it, and every later NumPy call
/// went the general way (~284 -> ~341 ns, for good).
pub fn call<'py>(
    slf: &Bound<'py, PyOpOverload>,
    args: &[Bound<'py, PyAny>],
    kwargs: Option<&Bound<'py, PyDict>>,
    relearn: bool,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    let lean = relearn || slf.get().lean.load(Ordering::Relaxed);
    call_as(slf, args, kwargs, true, lean, relearn)
}

/// `op(*args)` by the fast path where a Python function serves it; else [`Lean::Passed`],
/// with nothing run (`OpOverload`'s vectorcall entry then takes the whole call). The lean path's answer goes
/// back in two words; only another way's is converted to a `Lean`.
#[inline(always)]
pub fn call_python<'py>(
    slf: &Bound<'py, PyOpOverload>,
    args: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Lean<'py> {
    if !enabled() {
        return Lean::Passed;
    }
    let py = slf.py();
    let Some(plan) = slf.get().plan(py) else {
        return Lean::Passed;
    };
    if let Some(body) = plan.body.as_ref() {
        if lean_args(body, args) {
            match run_lean(slf, plan, body, lean_keys(), args, err) {
                Lean::Passed => {}
                done => return done,
            }
        } else if let Some(keys) = device_keys(body, args) {
            match run_device_lean(slf, plan, body, keys, args) {
                Some(Ok(r)) => return Lean::Done(r),
                Some(Err(e)) => {
                    *err = Some(e);
                    return Lean::Raised;
                }
                None => {}
            }
        }
    }
    match call_as(slf, args, None, false, false, false) {
        Some(Ok(r)) => Lean::Done(r),
        Some(Err(e)) => {
            *err = Some(e);
            Lean::Raised
        }
        None => Lean::Passed,
    }
}

/// `lean`: the lean path may serve the call (false where it passed it on already).
#[inline(always)]
pub(super) fn call_as<'py>(
    slf: &Bound<'py, PyOpOverload>,
    args: &[Bound<'py, PyAny>],
    kwargs: Option<&Bound<'py, PyDict>>,
    done_ok: bool,
    lean: bool,
    relearn: bool,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    if !enabled() {
        return None;
    }
    let py = slf.py();
    let plan = slf.get().plan(py)?;
    let body = plan.body.as_ref()?;
    if lean && no_kwargs(kwargs) && lean_args(body, args) {
        let mut err = None;
        if let Some(r) = call_lean(slf, plan, body, args, &mut err).into_option(&mut err) {
            if relearn {
                relearned(&slf.get().lean);
            }
            return Some(r);
        }
    }
    let mut b = Bound_::empty();
    bind_call(py, body, args, kwargs, &mut b)?;
    let arg_keys = if b.keys.is_empty() {
        DispatchKey::CPU.set()
    } else {
        b.keys
    };
    let keys = dispatch_keys(arg_keys);
    let r = run(slf, plan, body, keys, &b, Some(args), done_ok)?;
    Some(r.and_then(|r| r.into_result(py)))
}

/// Sets an operator's calls from Python back to the lean entry (written only when it changes,
/// so that the calls that keep it read a clean cache line).
#[inline(always)]
pub(super) fn relearned(lean: &AtomicBool) {
    if !lean.load(Ordering::Relaxed) {
        lean.store(true, Ordering::Relaxed);
    }
}

/// `op.redispatch(keys, *args)` by the lean path ([`run_lean`]): [`Lean::Passed`], with
/// nothing run, where it does not serve (`redispatch` then takes the call, `lean` false).
#[inline(always)]
pub fn redispatch_lean<'py>(
    slf: &Bound<'py, PyOpOverload>,
    keys: DispatchKeySet,
    args: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Lean<'py> {
    if !enabled() {
        return Lean::Passed;
    }
    let Some(plan) = slf.get().plan(slf.py()) else {
        return Lean::Passed;
    };
    match &plan.body {
        Some(body) if lean_args(body, args) => {
            run_lean(slf, plan, body, keys.without_highest(), args, err)
        }
        _ => Lean::Passed,
    }
}

/// `op.redispatch(keys, *args, **kwargs)` by the fast path, or None. `lean`: the lean path may
/// serve it (false where [`redispatch_lean`] has passed it on already).
#[inline]
pub fn redispatch<'py>(
    slf: &Bound<'py, PyOpOverload>,
    keys: DispatchKeySet,
    args: &[Bound<'py, PyAny>],
    kwargs: Option<&Bound<'py, PyDict>>,
    lean: bool,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    if !enabled() {
        return None;
    }
    let py = slf.py();
    let plan = slf.get().plan(py)?;
    let body = plan.body.as_ref()?;
    if lean && no_kwargs(kwargs) && lean_args(body, args) {
        let mut err = None;
        let keys = keys.without_highest();
        if let Some(r) = run_lean(slf, plan, body, keys, args, &mut err).into_option(&mut err) {
            return Some(r);
        }
    }
    let mut b = Bound_::empty();
    bind_call(py, body, args, kwargs, &mut b)?;
    let r = run(
        slf,
        plan,
        body,
        keys.without_highest(),
        &b,
        Some(args),
        true,
    )?;
    Some(r.and_then(|r| r.into_result(py)))
}

/// `op.redispatch_boxed(keys, stack)` by the fast path, or None.
pub fn redispatch_boxed<'py>(
    slf: &Bound<'py, PyOpOverload>,
    keys: DispatchKeySet,
    stack: &Bound<'py, PyList>,
) -> Option<PyResult<()>> {
    if !enabled() {
        return None;
    }
    let py = slf.py();
    let plan = slf.get().plan(py)?;
    let body = plan.body.as_ref()?;
    if stack.len() == body.args.len() {
        // References of ours to the stack's objects: the kernel may change the list.
        let mut objs = Objs::new();
        for o in stack.iter().take(body.args.len()) {
            objs.push(o);
        }
        let args = objs.as_slice();
        if lean_args(body, args) {
            let mut err = None;
            let keys = keys.without_highest();
            if let Some(r) = run_lean(slf, plan, body, keys, args, &mut err).into_option(&mut err) {
                return Some(r.and_then(|r| one_into_list(r, stack)));
            }
        }
    }
    let mut b = Bound_::empty();
    bind_stack(body, stack, &mut b)?;
    let r = run(slf, plan, body, keys.without_highest(), &b, None, false)?;
    Some(r.and_then(|r| r.into_list(stack)))
}
