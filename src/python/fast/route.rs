//! What serves a call, found in one read section of the operator's table, and running it.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::dispatcher::{KernelCount, OperatorHandle};
use crate::key::DispatchKeySet;
use crate::python::convert::Passed;
use crate::python::errors::to_pyerr;
use crate::python::kernel::kernel_error;
use crate::python::overload::PyOpOverload;
use crate::python::plan::{Body, Plan};
use crate::python::py_kernel::PyKernel;

use super::bind::{wrapped, Bound_};
use super::calls::{boxed_stack, call_boxed, call_kernel_boxed, call_unboxed, native_tensors};
use super::fallback::{run_fallback, FallbackKernel};
use super::returns::{boxed_returns, raised, Rets};

/// What serves a call, as the fast path found it.
pub(super) enum Found<'py> {
    /// A Python function (boxed or not), with the call's keys masked by the operator's, and
    /// whether the call is counted (a backend's own kernel).
    Python(Bound<'py, PyAny>, bool, bool, DispatchKeySet, KernelCount),
    /// Another kernel, on these keys: the CPU fallback with a Python CPU kernel (`Some`, which
    /// `run_fallback` may run without a stack, with what it needs of the table), or any other
    /// (`None`, straight to the boxed call).
    Other(Option<FallbackKernel<'py>>, DispatchKeySet),
}

impl<'py> Found<'py> {
    /// What serves a call on `keys`, found in one read section of the operator's table. A
    /// Python function is taken out of the table there, and the section ends before it runs;
    /// only another kernel needs the table held while it runs (`resolve`). None where the
    /// general path serves: the table is not of the plan's schema (redefined or undefined
    /// since), no kernel serves the keys, or a kernel's library was collected (no function),
    /// which the general path reports.
    #[inline(always)]
    pub(super) fn of(
        py: Python<'py>,
        op: &OperatorHandle,
        plan: &Plan,
        keys: DispatchKeySet,
    ) -> Option<Found<'py>> {
        op.route(keys, |r| {
            if !Arc::ptr_eq(r.schema(), &plan.schema) {
                return None;
            }
            let masked = r.keys();
            if let Some(k) = r.foreign::<PyKernel>() {
                return Some(Found::Python(
                    k.func(py)?,
                    k.boxed,
                    k.array,
                    masked,
                    r.counted(),
                ));
            }
            r.kernel()?;
            Some(Found::Other(FallbackKernel::of(py, &r), masked))
        })
        .flatten()
    }
}

/// Whether `run_fallback` may run the CPU fallback on `masked` here. From PyO3's entry
/// (`done_ok`), always; from the lean entry, which holds no PyO3 count of the GIL, only for a
/// backend whose hooks are Rust: its Python CPU kernel is called from here, with no
/// `Python::attach` under it.
#[inline(always)]
pub(super) fn fallback_runs_here(masked: DispatchKeySet, done_ok: bool) -> bool {
    done_ok
        || masked
            .highest()
            .is_some_and(|k| !crate::python::backend::is_python_backend(k))
}

/// Runs the Python kernel that serves the call, or None where the general path must.
/// `done_ok`: the caller takes a finished result ([`Rets::Done`]), which lets a kernel that is
/// no Python function run here too.
pub(super) fn run<'py>(
    slf: &Bound<'py, PyOpOverload>,
    plan: &Plan,
    body: &Body,
    keys: DispatchKeySet,
    b: &Bound_<'py>,
    args: Option<&[Bound<'py, PyAny>]>,
    done_ok: bool,
) -> Option<PyResult<Rets<'py>>> {
    let py = slf.py();
    let op = &slf.get().handle;
    let found = Found::of(py, op, plan, keys)?;
    let (func, boxed, array, masked, count) = match found {
        Found::Python(func, boxed, array, masked, count) => (func, boxed, array, masked, count),
        Found::Other(fallback, masked) => {
            // Only the CPU fallback runs there: a Rust kernel (Native's `array_api::add`)
            // spares the fallback's table look-up, a third of its own cost on one element.
            let found = fallback.filter(|_| b.wraps && fallback_runs_here(masked, done_ok));
            if let Some(found) = found {
                if let Some(r) = run_fallback(
                    slf,
                    plan,
                    body,
                    found,
                    b.given.as_slice(),
                    b.kernel.as_slice(),
                ) {
                    return Some(Ok(Rets::Done(r)));
                }
            }
            if !done_ok {
                return None;
            }
            return op
                .resolve(keys, |r| {
                    if !Arc::ptr_eq(r.schema(), &plan.schema) {
                        return None;
                    }
                    r.kernel()?;
                    let tensors = r.tensors();
                    if let Some(out) =
                        tensors.and_then(|f| native_tensors(py, op, f, r.counted(), b))
                    {
                        return Some(Ok(Rets::Done(out)));
                    }
                    let mut passed = Passed::default();
                    let stack = boxed_stack(body, b, &mut passed)?;
                    Some(Ok(Rets::Done(call_kernel_boxed(
                        py, op, &r, stack, &passed,
                    ))))
                })
                .flatten();
        }
    };
    let schema = &plan.schema;
    let fixed;
    let kobjs = if b.wraps {
        fixed = match wrapped(b) {
            Ok(o) => o,
            Err(e) => return Some(Err(to_pyerr(py, kernel_error(py, e, op, masked)))),
        };
        &fixed
    } else {
        &b.kernel
    };
    let reuse = args.filter(|_| b.reuse && !b.wraps);
    // As `run_lean` counts, with no closure left out of line.
    let counted = count.begin();
    let r = if boxed {
        let mut err = None;
        match call_boxed(py, &func, slf, op, masked, kobjs.as_slice(), &mut err) {
            Some(list) => {
                let r = boxed_returns(py, op, schema, masked, body, b.given.as_slice(), &list);
                slf.get().spare.give_back(list);
                r
            }
            None => Err(raised(&mut err)),
        }
    } else {
        call_unboxed(py, &func, array, op, schema, masked, body, kobjs, b, reuse)
    };
    counted.end(op);
    Some(r)
}
