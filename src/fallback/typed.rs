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
//!
//! Both entries are compiled with the CPU kernel's signature when the kernel is made, so
//! [`KernelFunction::from_unboxed`] is defined here, where the signature and the fallback's
//! steps meet, and the kernel carries them (`kernel.rs` names nothing of this module). The
//! dispatcher binds them, with the CPU kernel, into the table entries it publishes as
//! [`Route::CpuFallback`] (`crate::kernel::Route`): a typed call reaches the typed entry
//! through the entry's typed wrapper, a boxed one the stack entry through the boxed fallback.

use crate::backend::{registered, Backend, Registered};
use std::sync::Arc;

use crate::clock;
use crate::dispatcher::{DispatchTable, OperatorHandle};
use crate::error::{Error, Result};
use crate::ivalue::{CallArgs, CallReturns, Stack, TensorMap};
use crate::kernel::{
    CompiledFallback, KernelFunction, StackEntry, TableFn, TensorBatch, TensorMaps, TypedCall,
    TypedFallbackFn, TypedWrapper, UnboxedFn,
};
use crate::key::{DispatchKey, DispatchKeySet};
use crate::resident;
use crate::schema::SchemaInfo;
use crate::tensor::{Device, Tensor};

use super::policy::check_policy;
use super::steps::{kernel_error, record, step_error, StepMarks};
use super::target::TargetDevice;

/// The CPU fallback kernel's typed entry (`KernelFunction::with_typed_wrapper`), as any wrapper
/// may call it: the CPU kernel that serves the CPU key in the call's table, with the fallback's
/// steps compiled with its signature, if it has the call's (else it declines); the calls those
/// steps do not serve are boxed once for `boxed`, the fallback's boxed entry on the table. A
/// dispatched typed call binds the same steps to its entry's CPU kernel at publication.
pub(crate) struct TypedCpuFallback {
    pub(crate) boxed: Arc<TableFn>,
}

impl TypedWrapper for TypedCpuFallback {
    #[inline]
    fn call_typed(
        &self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        call: &mut TypedCall<'_>,
    ) -> Option<Result<()>> {
        let cpu = table.kernel(DispatchKey::CPU.set())?;
        call.run_cpu_fallback(cpu, op, table, keys, &*self.boxed)
    }
}

impl KernelFunction {
    /// A kernel from a typed function; boxed callers reach it through an adapter that unboxes
    /// the stack once and boxes the returns once. It carries the CPU fallback's steps compiled
    /// with its signature, which run it as the CPU kernel of a fallback without boxing.
    ///
    /// ```
    /// use boxfall::{DispatchKeySet, KernelFunction};
    /// let k = KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x * 3));
    /// let f = k.unboxed::<(i64,), i64>().unwrap();
    /// assert_eq!(f(DispatchKeySet::EMPTY, (2,)).unwrap(), 6);
    /// ```
    pub fn from_unboxed<A, R>(f: UnboxedFn<A, R>) -> KernelFunction
    where
        A: CallArgs + 'static,
        R: CallReturns + 'static,
    {
        KernelFunction::from_typed_parts(
            f,
            CompiledFallback {
                stack: stack_entry(f),
                typed: (A::TYPED_FALLBACK && R::TYPED_FALLBACK)
                    .then_some(typed_entry::<A, R> as TypedFallbackFn<A, R> as usize),
            },
        )
    }
}

/// The typed fallback of a typed call, compiled with its signature (the CPU kernel's typed
/// entry, [`KernelFunction::typed_fallback`]), which every typed call of the CPU fallback runs
/// (a dispatched one through its entry's wrapper, one handed to the fallback through
/// `TypedCpuFallback`), with the tensors mapped in this one frame rather than through the
/// virtual calls of `TensorMaps`. `f` is the CPU kernel's function; `declined` serves the
/// calls the typed steps do not (the boxed fallback).
fn typed_entry<A: CallArgs + 'static, R: CallReturns + 'static>(
    op: &OperatorHandle,
    table: &DispatchTable,
    keys: DispatchKeySet,
    f: UnboxedFn<A, R>,
    args: A,
    declined: &mut dyn FnMut(A) -> Result<R>,
) -> Result<R> {
    // The key the call was dispatched on.
    let key = keys.highest().unwrap_or(DispatchKey::CPU);
    let hooks = table
        .schema(op)
        .ok()
        .and_then(|s| typed_hooks(&s.info, key));
    match hooks {
        Some(hooks) => policed_steps(op, key, hooks, |moves| moves.run(f, args)),
        None => declined(args),
    }
}

/// Every typed fallback's frame, the policy first: applies the fallback policy, then
/// `counted_steps` from now.
#[inline(always)]
fn policed_steps<T>(
    op: &OperatorHandle,
    key: DispatchKey,
    hooks: &dyn Backend,
    steps: impl FnOnce(&mut Moves<'_>) -> Result<T>,
) -> Result<T> {
    check_policy(op, key)?;
    counted_steps(op, key, hooks, clock::ticks(), steps)
}

/// Every typed fallback's frame (compiled typed calls, stack entries, a typed wrapper's call,
/// the bindings' `run_with_maps`): makes the call's `Moves`, runs `steps` with them (the three
/// steps around the CPU kernel) and counts the call, begun at `start`, in the operator's
/// counters.
#[inline(always)]
fn counted_steps<T>(
    op: &OperatorHandle,
    key: DispatchKey,
    hooks: &dyn Backend,
    start: u64,
    steps: impl FnOnce(&mut Moves<'_>) -> Result<T>,
) -> Result<T> {
    let mut moves = Moves::new(op, key, hooks);
    let result = steps(&mut moves);
    moves.counted(start, result)
}

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

/// The stack entry of a CPU kernel made from `cpu` (`KernelFunction::from_unboxed` keeps it),
/// for the signatures whose values map their tensors (`None` for the others): the typed
/// fallback of a boxed call, which unboxes the stack as the kernel's boxed entry point would,
/// runs the three steps around the kernel's typed function (`Moves::run`), pushes the device
/// returns and counts the call (the policy was applied by the caller; `start` is when the
/// fallback began). Made with the kernel rather than reached through its general mapped entry
/// (`call_mapped`), whose maps are virtual calls in frames of their own (`cargo bench --bench
/// fallback` compares the two).
fn stack_entry<A, R>(cpu: UnboxedFn<A, R>) -> Option<Arc<StackEntry>>
where
    A: CallArgs + 'static,
    R: CallReturns + 'static,
{
    if !(A::TYPED_FALLBACK && R::TYPED_FALLBACK) {
        return None;
    }
    Some(Arc::new(
        move |op: &OperatorHandle, key, hooks: &dyn Backend, start, stack: &mut Stack| {
            counted_steps(op, key, hooks, start, |moves| {
                stack_steps(moves, cpu, stack)
            })
        },
    ))
}

/// The steps of a stack entry, between its `Moves` being made and the call being counted.
#[inline(always)]
fn stack_steps<A: CallArgs, R: CallReturns>(
    moves: &mut Moves<'_>,
    cpu: UnboxedFn<A, R>,
    stack: &mut Stack,
) -> Result<()> {
    // The caller checked the stack's length against the schema. A value the kernel's
    // signature does not take fails as the kernel's boxed entry point would fail.
    let args = A::pop_from(stack).map_err(|e| kernel_error(moves.op, moves.key, e))?;
    moves.run(cpu, args)?.push_onto(stack);
    Ok(())
}

/// Runs the CPU fallback of a call on `key` whose caller runs the CPU kernel itself, with its
/// tensors mapped by the `TensorMaps` it is given (the Python bindings, for a Python CPU kernel
/// called from Python with a backend's tensors: the arguments go straight from the caller's
/// objects to the kernel's, with no stack). The same steps, checks, errors, counters and policy
/// as the typed fallback (`stack_entry`, which the boxed fallback runs for such an
/// operator): `None`, before anything ran, where that fallback would not serve (an operator
/// that writes an argument, a view or `Device` argument, a backend that batches or is not
/// registered, DEBUG logging), and the caller then takes the boxed fallback. `f` gets the
/// maps: it passes the argument tensors through `args`, runs the kernel (its errors through
/// `kernel_error`), and each returned tensor through `ret`.
#[cfg(feature = "python")]
#[inline(always)]
pub(crate) fn run_with_maps<T>(
    op: &OperatorHandle,
    info: &SchemaInfo,
    key: DispatchKey,
    f: impl FnOnce(&mut Moves<'_>) -> Result<T>,
) -> Option<Result<T>> {
    let backend = registered(key)?;
    if !serves(info, backend) {
        return None;
    }
    Some(policed_steps(op, key, backend.hooks, f))
}

/// One typed fallback call: moves its tensors, and counts their bytes.
pub(crate) struct Moves<'a> {
    op: &'a OperatorHandle,
    key: DispatchKey,
    hooks: &'a dyn Backend,
    target: TargetDevice,
    /// The results' device, once the arguments are moved.
    device: Device,
    to_cpu: u64,
    from_cpu: u64,
    marks: StepMarks,
    /// Whether step 1 copied a tensor (rather than lending every one): only then is it timed.
    copied: bool,
}

impl<'a> Moves<'a> {
    #[inline(always)]
    fn new(op: &'a OperatorHandle, key: DispatchKey, hooks: &'a dyn Backend) -> Moves<'a> {
        Moves {
            op,
            key,
            hooks,
            target: TargetDevice::default(),
            device: Device::CPU,
            to_cpu: 0,
            from_cpu: 0,
            marks: StepMarks::default(),
            copied: false,
        }
    }

    /// `result`, the call counted in the operator's counters (`start`: when the fallback
    /// began). The two cases apart, so that a call that went well returns without copying a
    /// `Result` (an error-sized value) from a local into the caller's slot.
    #[inline(always)]
    fn counted<T>(&self, start: u64, result: Result<T>) -> Result<T> {
        match result {
            Ok(v) => {
                self.record(start, true);
                Ok(v)
            }
            Err(e) => {
                self.record(start, false);
                self.op.metrics().record_failure(self.key, &e);
                Err(e)
            }
        }
    }

    /// Counts the call in the operator's counters.
    #[inline(always)]
    fn record(&self, start: u64, ok: bool) {
        record(
            self.op,
            self.key,
            start,
            self.marks,
            [self.to_cpu, self.from_cpu],
            ok,
        );
    }
}

impl Moves<'_> {
    /// Step 1 for one tensor: the backend's go to the CPU, each checked to be on the call's
    /// one device.
    #[inline(always)]
    fn arg(&mut self, t: &mut Tensor) -> Result<()> {
        self.target.see(self.op, t)?;
        if t.key() != self.key {
            return Ok(());
        }
        // A tensor without host memory may have its values on the host already (residency).
        if !t.is_host() {
            *t = self.resident_arg(t)?;
            return Ok(());
        }
        // Lent where the backend keeps the CPU tensor (Native): nothing is copied.
        if let Some(cpu) = self.hooks.lent_to_cpu(t) {
            self.to_cpu += cpu.nbytes() as u64;
            *t = cpu.clone();
            return Ok(());
        }
        let cpu = self
            .hooks
            .to_cpu_read_only(t)
            .map_err(|e| step_error(self.op, self.key, "to_cpu", e))?;
        self.to_cpu += cpu.nbytes() as u64;
        self.copied = true;
        *t = cpu;
        Ok(())
    }

    /// Step 1 for a tensor that holds no host memory: its host copy where current (no bytes
    /// cross), else the backend's `to_cpu` (`resident::read`).
    #[inline(never)]
    fn resident_arg(&mut self, t: &Tensor) -> Result<Tensor> {
        self.copied = true;
        let (cpu, crossed) = resident::read(self.hooks, t)
            .map_err(|e| step_error(self.op, self.key, "to_cpu", e))?;
        if crossed {
            self.to_cpu += cpu.nbytes() as u64;
        }
        Ok(cpu)
    }

    /// Step 3 for one tensor: a CPU tensor goes to the device, any other stays. The first
    /// return that the backend moves marks the end of step 2; one it takes as it is
    /// (`adopt_from_cpu`: Native's host memory) copies nothing and is not timed, as a lent
    /// argument is not (a kernel whose returns are all taken so, or hold no tensor, ends
    /// step 2 with the call).
    #[inline(always)]
    fn ret_one(&mut self, t: Tensor) -> Result<Tensor> {
        if t.key() != DispatchKey::CPU {
            return Ok(t);
        }
        let bytes = t.nbytes() as u64;
        self.from_cpu += bytes;
        let t = match self.hooks.adopt_from_cpu(t, self.device) {
            Ok(on_device) => return Ok(on_device),
            Err(t) => t,
        };
        self.mark_ran();
        let on_device = self
            .hooks
            .from_cpu_result(t, self.device, self.op.result_of())
            .map_err(|e| step_error(self.op, self.key, "from_cpu", e))?;
        // A lazy backend's result stays on the host side: nothing crossed (yet).
        if on_device.is_host_only() {
            self.from_cpu -= bytes;
            on_device.note_made_by(self.op.origin());
        }
        Ok(on_device)
    }

    /// The end of step 2, at the first return that is moved.
    #[inline(always)]
    fn mark_ran(&mut self) {
        if self.marks.ran == u64::MAX {
            self.marks.ran = clock::ticks();
        }
    }

    /// The three steps around the CPU kernel's typed function `f`, compiled with its signature.
    /// What `kernel::run_mapped` does for any maps, without its batches of argument tensors
    /// (which spare `dyn` maps a virtual call a tensor): `run_mapped` with these maps, even
    /// inlined, keeps a virtual call for each tensor that this form makes direct.
    #[inline(always)]
    fn run<A: CallArgs, R: CallReturns>(&mut self, f: UnboxedFn<A, R>, args: A) -> Result<R> {
        let args = args.map_tensors(&mut ToCpu(self))?;
        self.args_done()?;
        let returns = match f(DispatchKey::CPU.set(), args) {
            Ok(r) => r,
            Err(e) => return Err(kernel_error(self.op, self.key, e)),
        };
        returns.map_tensors(&mut ToDevice(self))
    }

    /// The end of step 1: the results' device, and the step's time mark where it copied a
    /// tensor. A step that copied nothing (every tensor lent, or none the backend's) gets no
    /// mark: a clock read costs more than its bookkeeping, so it counts as taking no time
    /// (`StepMarks::UNTIMED`).
    #[inline(always)]
    fn args_done(&mut self) -> Result<()> {
        self.device = std::mem::take(&mut self.target).finish(self.op, self.key, None)?;
        self.marks.moved = if self.copied {
            clock::ticks()
        } else {
            StepMarks::UNTIMED
        };
        Ok(())
    }

    /// The end of step 2, marked where the CPU kernel returned, before its result is converted
    /// (for a caller that converts the result into the device's memory itself: that copy is
    /// step 3's work).
    #[cfg(feature = "python")]
    #[inline(always)]
    pub(crate) fn kernel_done(&mut self) {
        self.marks.ran = clock::ticks();
    }

    /// Step 1 for all of a call's argument tensors (`args` with `last`), borrowed from the
    /// caller rather than handed over. Where `tensors[i]` is the backend's, its CPU tensor
    /// takes its place: borrowed from it where the backend keeps one (`lent_to_cpu`), else
    /// made into `moved[i]` (and `tensors[i]` left for the caller to replace by it). No tensor
    /// handle is cloned for a backend that keeps its CPU tensors (for `run_with_maps`'
    /// caller, which holds the arguments in its own objects for the call).
    #[cfg(feature = "python")]
    #[inline(always)]
    pub(crate) fn args_lent(
        &mut self,
        tensors: &mut [Option<&Tensor>],
        moved: &mut [Option<Tensor>],
    ) -> Result<()> {
        for (g, m) in tensors.iter_mut().zip(moved.iter_mut()) {
            let Some(t) = *g else {
                continue;
            };
            self.target.see(self.op, t)?;
            if t.key() != self.key {
                continue;
            }
            match self.hooks.lent_to_cpu(t) {
                Some(cpu) => {
                    self.to_cpu += cpu.nbytes() as u64;
                    *g = Some(cpu);
                }
                None if !t.is_host() => {
                    *m = Some(self.resident_arg(t)?);
                }
                None => {
                    let cpu = self
                        .hooks
                        .to_cpu_read_only(t)
                        .map_err(|e| step_error(self.op, self.key, "to_cpu", e))?;
                    self.to_cpu += cpu.nbytes() as u64;
                    self.copied = true;
                    *m = Some(cpu);
                }
            }
        }
        self.args_done()
    }
}

/// The fallback's steps around the CPU kernel's typed function: 1. the backend's tensors to the
/// CPU; 2. the CPU kernel; 3. the returns' CPU tensors to the device.
impl TensorMaps for Moves<'_> {
    fn args(&mut self, tensors: &mut TensorBatch<'_, '_>, last: bool) -> Result<()> {
        for t in tensors.iter_mut() {
            self.arg(t)?;
        }
        if last {
            self.args_done()?;
        }
        Ok(())
    }

    fn kernel_error(&mut self, e: Error) -> Error {
        kernel_error(self.op, self.key, e)
    }

    /// Step 3 for one returned tensor (`ret_one`).
    fn ret(&mut self, t: Tensor) -> Result<Tensor> {
        self.ret_one(t)
    }
}

/// Step 1 for the tensors of a compiled typed call (`Moves::run`).
struct ToCpu<'m, 'a>(&'m mut Moves<'a>);

impl TensorMap for ToCpu<'_, '_> {
    #[inline(always)]
    fn map(&mut self, mut t: Tensor) -> Result<Tensor> {
        self.0.arg(&mut t)?;
        Ok(t)
    }
}

/// Step 3 for the returns of a compiled typed call (`Moves::run`).
struct ToDevice<'m, 'a>(&'m mut Moves<'a>);

impl TensorMap for ToDevice<'_, '_> {
    #[inline(always)]
    fn map(&mut self, t: Tensor) -> Result<Tensor> {
        self.0.ret_one(t)
    }
}
