//! What every form of the CPU fallback shares about its steps: the marks that time them, the
//! record that counts a call, and the errors that name the operator, the backend and the step.
//! It stands below the boxed walk (`mod.rs`), the typed fallback, the policy and the
//! write-back, which all use it, so that none of them names another to reach these.

use crate::clock;
use crate::dispatcher::OperatorHandle;
use crate::error::Error;
use crate::key::DispatchKey;

/// Counts a fallback refused before its steps began (by the policy, as a view operator, on a key
/// without transfer hooks) as one that failed, so that every refusal is in the figures the same
/// way: a refusal counts in `fallbacks` and in `failures`.
#[cold]
pub(crate) fn count_refusal(op: &OperatorHandle, key: DispatchKey, e: &Error) {
    op.metrics().record(key, 0, 0, 0, false);
    op.metrics().record_failure(key, e);
}

/// When a fallback call's steps 1 (moving to the CPU) and 2 (the CPU kernel) ended, in clock
/// ticks; `u64::MAX` for a step not reached (the call failed before its end).
#[derive(Clone, Copy)]
pub(crate) struct StepMarks {
    pub(crate) moved: u64,
    pub(crate) ran: u64,
}

impl StepMarks {
    /// The mark of a step not timed: it ends where it began (see `record`).
    pub(crate) const UNTIMED: u64 = 0;
}

impl Default for StepMarks {
    #[inline(always)]
    fn default() -> StepMarks {
        StepMarks {
            moved: u64::MAX,
            ran: u64::MAX,
        }
    }
}

/// Counts one fallback of `op` for `key`, begun at `start` (clock ticks), with its steps'
/// ends, that moved `bytes` (to the CPU, back from it). A step not reached ends with the call,
/// so the steps never add up to more than the whole (on one core's clock).
#[inline(always)]
pub(super) fn record(
    op: &OperatorHandle,
    key: DispatchKey,
    start: u64,
    marks: StepMarks,
    bytes: [u64; 2],
    ok: bool,
) {
    let end = clock::ticks();
    // A step not reached ends with the call; a step not timed (a mark of 0, before any
    // start) ends where it began. `max` then `min`, not `clamp`, which would panic were the
    // clock ever to read less at the end than at the start.
    let moved = marks.moved.max(start).min(end);
    let ran = marks.ran.max(moved).min(end);
    let t = crate::metrics::StepTicks {
        total: end.saturating_sub(start),
        to_cpu: moved.saturating_sub(start),
        kernel: ran.saturating_sub(moved),
        from_cpu: end.saturating_sub(ran),
    };
    op.metrics().record_steps(key, t, bytes[0], bytes[1], ok);
}

/// The note a foreign error (a Python exception) gets as it leaves the fallback: its own
/// note names the hook or kernel it came from, this one the operator and the backend.
fn fallback_note(op: &OperatorHandle, key: DispatchKey) -> String {
    format!(
        "while running '{}' through the CPU fallback for '{key}'",
        op.name()
    )
}

/// A fallback step's error, naming the operator, the backend and the step (a foreign error
/// keeps its own object, so that the bindings can raise the original exception, and gets a
/// note that says so).
#[cold]
pub(super) fn step_error(op: &OperatorHandle, key: DispatchKey, step: &str, e: Error) -> Error {
    match e {
        Error::Foreign { .. } => e.with_foreign_note(fallback_note(op, key)),
        // A hook's result that breaks the backend contract (a payload of the wrong shape, a
        // dtype the device lacks) keeps its kind, and learns the operator it was for.
        Error::Kernel { context, message } => Error::Kernel {
            context: format!(
                "{context}, in {step} of the CPU fallback of '{}' for '{key}'",
                op.name()
            ),
            message,
        },
        Error::DeviceDType {
            dtype,
            backend,
            held,
            op: None,
        } => Error::DeviceDType {
            dtype,
            backend,
            held,
            op: Some(op.name().to_string()),
        },
        Error::OutOfMemory { what, bytes } => Error::OutOfMemory {
            what: format!(
                "{what}, in {step} of the CPU fallback of '{}' for '{key}'",
                op.name()
            ),
            bytes,
        },
        other => Error::Fallback(format!(
            "CPU fallback of '{}' for '{key}' failed in {step}: {other}",
            op.name()
        )),
    }
}

/// A CPU kernel's own error, with the operator and the fallback's backend named (a foreign
/// error gets a note; a missing CPU kernel keeps its NoKernel form).
pub(super) fn kernel_error(op: &OperatorHandle, key: DispatchKey, e: Error) -> Error {
    match e {
        Error::Kernel { context, message } => Error::Kernel {
            // A Python kernel's context names the operator already.
            context: if context.contains(&format!("'{}'", op.name())) {
                format!("{context}, reached through the CPU fallback for '{key}'")
            } else {
                format!(
                    "{context} (the CPU kernel of '{}', reached through the CPU fallback for '{key}')",
                    op.name()
                )
            },
            message,
        },
        Error::Foreign { .. } => e.with_foreign_note(fallback_note(op, key)),
        Error::NoKernel { .. } => e,
        other => step_error(op, key, "the CPU kernel", other),
    }
}
