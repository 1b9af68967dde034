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
use crate::schema::SchemaInfo;
use crate::tensor::Tensor;

use super::moves::Moves;
use super::policy::check_policy;
use super::steps::kernel_error;

/// The CPU fallback kernel's typed entry (`KernelFunction::with_typed_wrapper`): the CPU kernel
/// the call's table bound when it was published, with the fallback's steps compiled with its
/// signature, if it has the call's (else it declines); the calls those steps do not serve are
/// boxed once for `boxed`, the fallback's boxed entry on the table. It is the one typed wrapper
/// of the CPU fallback: a typed call handed to the fallback (`call_fallback`) reaches it as
/// any wrapper's, and a table entry the fallback serves offers a dispatched typed call to it
/// where the table's CPU kernel has the compiled steps (`TableEntry::publish`).
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
        let cpu = table.cpu.as_ref()?;
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
/// (through `TypedCpuFallback`, the entry's wrapper or the one a kernel handed the call to),
/// with the tensors mapped in this one frame rather than through the virtual calls of
/// `TensorMaps`. `f` is the CPU kernel's function; `declined` serves the calls the typed steps
/// do not (the boxed fallback).
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

impl Moves<'_> {
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
