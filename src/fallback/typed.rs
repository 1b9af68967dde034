//! The CPU fallback of a typed call, without boxing: when a typed call of a functional operator
//! reaches the CPU fallback and the operator's CPU kernel is unboxed with the call's own
//! signature, the fallback moves the tensors of the typed arguments, calls that kernel's function
//! and moves the tensors of its typed returns, with no stack in between. It is the same fallback,
//! generic over the signature rather than over the stack: the same steps, checks, errors,
//! counters and policy as the boxed one, which serves every other call (boxed callers, operators
//! that write an argument, view operators, a `Device` argument, backends that batch transfers,
//! DEBUG logging, and CPU kernels without that typed entry point).
//!
//! A boxed call (Python's, or any caller holding a stack) of such an operator runs the same
//! typed fallback through the CPU kernel's stack entry (`stack_entry`): made with the kernel,
//! generic over its signature, it unboxes the stack as the kernel's boxed entry point would,
//! runs the typed fallback on the arguments and pushes the device returns. The schema-driven
//! walk over the stack, and the second unboxing it leads to, are skipped.

use crate::backend::{registered, Backend, Registered};
use crate::clock;
use crate::dispatcher::OperatorHandle;
use crate::error::Result;
use crate::ivalue::{CallArgs, CallReturns, Stack, TensorMap};
use crate::kernel::UnboxedFn;
use crate::key::DispatchKey;
use crate::schema::SchemaInfo;
use crate::tensor::{Device, Tensor};

use super::policy::check_policy;
use super::target::TargetDevice;
use super::{kernel_error, step_error, StepMarks};

/// The backend's hooks if the typed fallback can serve this operator on `key`, else `None`
/// (the boxed fallback then does).
#[inline(always)]
pub(crate) fn typed_hooks(info: &SchemaInfo, key: DispatchKey) -> Option<&'static dyn Backend> {
    registered(key).filter(|r| serves(info, r)).map(|r| r.hooks)
}

/// Whether the typed fallback can serve this operator on this backend: a functional operator
/// with no view return and no `Device` argument, a backend that moves tensors one by one, and
/// no DEBUG record to write (the boxed fallback writes it).
#[inline(always)]
pub(crate) fn serves(info: &SchemaInfo, backend: &Registered) -> bool {
    let blocked = info.is_mutable || info.has_view_returns || info.device_arg.is_some();
    !blocked && !backend.batches && !log::log_enabled!(target: "boxfall", log::Level::Debug)
}

/// Runs the fallback of a typed call: `cpu` is the operator's CPU kernel, `hooks` what
/// `typed_hooks` gave. The fallback policy applies, as to every CPU fallback.
#[inline(always)]
pub(crate) fn call_typed<A: CallArgs, R: CallReturns>(
    op: &OperatorHandle,
    key: DispatchKey,
    hooks: &dyn Backend,
    cpu: UnboxedFn<A, R>,
    args: A,
) -> Result<R> {
    check_policy(op, key)?;
    let start = clock::ticks();
    let mut moves = Moves::new(op, key, hooks);
    let result = moves.run(cpu, args);
    moves.record(start, result.is_ok());
    result
}

/// A CPU kernel's stack entry for the typed fallback of a boxed call: `Moves::run` on the
/// arguments the stack holds, the returns pushed back.
pub(crate) type StackEntry =
    dyn for<'a, 'b> Fn(&'a mut Moves<'b>, &mut Stack) -> Result<()> + Send + Sync;

/// The stack entry of a CPU kernel made from `cpu`, for the signatures the typed fallback
/// takes (`None` for the others).
pub(crate) fn stack_entry<A, R>(cpu: UnboxedFn<A, R>) -> Option<std::sync::Arc<StackEntry>>
where
    A: CallArgs + 'static,
    R: CallReturns + 'static,
{
    if !(A::TYPED_FALLBACK && R::TYPED_FALLBACK) {
        return None;
    }
    Some(std::sync::Arc::new(
        move |moves: &mut Moves<'_>, stack: &mut Stack| {
            // The caller checked the stack's length against the schema. A value the kernel's
            // signature does not take fails as the kernel's boxed entry point would fail.
            let args = A::pop_from(stack).map_err(|e| kernel_error(moves.op, moves.key, e))?;
            moves.run(cpu, args)?.push_onto(stack);
            Ok(())
        },
    ))
}

/// Runs the typed fallback of a boxed call through the CPU kernel's stack entry, and counts it
/// (the policy was applied by the caller; `start` is when the fallback began).
#[inline(always)]
pub(crate) fn call_stack_entry(
    op: &OperatorHandle,
    key: DispatchKey,
    hooks: &dyn Backend,
    entry: &StackEntry,
    start: u64,
    stack: &mut Stack,
) -> Result<()> {
    let mut moves = Moves::new(op, key, hooks);
    let result = entry(&mut moves, stack);
    moves.record(start, result.is_ok());
    result
}

/// One typed fallback call: moves its tensors, and counts their bytes.
pub(crate) struct Moves<'a> {
    op: &'a OperatorHandle,
    key: DispatchKey,
    hooks: &'a dyn Backend,
    target: TargetDevice,
    to_cpu: u64,
    from_cpu: u64,
    marks: StepMarks,
}

impl<'a> Moves<'a> {
    #[inline(always)]
    fn new(op: &'a OperatorHandle, key: DispatchKey, hooks: &'a dyn Backend) -> Moves<'a> {
        Moves {
            op,
            key,
            hooks,
            target: TargetDevice::default(),
            to_cpu: 0,
            from_cpu: 0,
            marks: StepMarks::default(),
        }
    }

    /// Counts the call in the operator's counters.
    #[inline(always)]
    fn record(&self, start: u64, ok: bool) {
        super::record(
            self.op,
            self.key,
            start,
            self.marks,
            [self.to_cpu, self.from_cpu],
            ok,
        );
    }

    #[inline(always)]
    fn run<A: CallArgs, R: CallReturns>(&mut self, cpu: UnboxedFn<A, R>, args: A) -> Result<R> {
        // 1. The backend's tensors to the CPU, each checked to be on the call's one device.
        let args = args.map_tensors(&mut ToCpu(self))?;
        let target = std::mem::take(&mut self.target).finish(self.op, self.key, None)?;
        self.marks.moved = clock::ticks();
        // 2. The CPU kernel.
        let returns =
            cpu(DispatchKey::CPU.set(), args).map_err(|e| kernel_error(self.op, self.key, e))?;
        self.marks.ran = clock::ticks();
        // 3. The returns' CPU tensors to the device.
        returns.map_tensors(&mut ToDevice(self, target))
    }
}

/// Step 1 for one tensor.
struct ToCpu<'m, 'a>(&'m mut Moves<'a>);

impl TensorMap for ToCpu<'_, '_> {
    #[inline(always)]
    fn map(&mut self, t: Tensor) -> Result<Tensor> {
        let m = &mut *self.0;
        m.target.see(m.op, &t)?;
        if t.key() != m.key {
            return Ok(t);
        }
        let cpu = m
            .hooks
            .to_cpu_read_only(&t)
            .map_err(|e| step_error(m.op, m.key, "to_cpu", e))?;
        m.to_cpu += cpu.nbytes() as u64;
        Ok(cpu)
    }
}

/// Step 3 for one tensor: a CPU tensor goes to the device, any other stays.
struct ToDevice<'m, 'a>(&'m mut Moves<'a>, Device);

impl TensorMap for ToDevice<'_, '_> {
    #[inline(always)]
    fn map(&mut self, t: Tensor) -> Result<Tensor> {
        if t.key() != DispatchKey::CPU {
            return Ok(t);
        }
        let m = &mut *self.0;
        m.from_cpu += t.nbytes() as u64;
        m.hooks
            .from_cpu_owned(t, self.1)
            .map_err(|e| step_error(m.op, m.key, "from_cpu", e))
    }
}
