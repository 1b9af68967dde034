//! A typed call in flight as a typed wrapper sees it, and how the dispatcher hands one to a
//! wrapper.

use std::any::TypeId;

use crate::error::{Error, Result};
use crate::ivalue::{CallArgs, CallReturns};
use crate::key::DispatchKeySet;

use super::maps::{run_mapped, TensorMaps};
use super::types::{
    DispatchTable, KernelFunction, OperatorHandle, TableFn, TypedBody, TypedCall, TypedWays,
    TypedWrapper,
};
use super::unboxed::UnboxedFn;

impl TypedCall<'_> {
    /// Whether `kernel` has a typed function of this call's signature (`run` can run it).
    #[inline(always)]
    pub fn fits(&self, kernel: &KernelFunction) -> bool {
        kernel
            .unboxed
            .is_some_and(|p| p.signature == self.signature)
    }

    /// Whether every argument and return of the signature maps its tensors (a value that
    /// does not would reach the function unmapped: a wrapper that must map declines).
    #[inline(always)]
    pub fn maps_tensors(&self) -> bool {
        self.maps_tensors
    }

    /// Runs `kernel`'s typed function (it must [`fit`](Self::fits)) on the call's arguments
    /// with their tensors mapped by `maps`, with `keys`; the returns, mapped, are the call's.
    /// Runs once: a second run, or one of a kernel that does not fit, is an error.
    #[inline(always)]
    pub fn run(
        &mut self,
        kernel: &KernelFunction,
        keys: DispatchKeySet,
        maps: &mut dyn TensorMaps,
    ) -> Result<()> {
        self.body.run(kernel, keys, maps)
    }

    /// Continues the call on `keys` in `table`, as a dispatched typed call would: the kernel of
    /// their highest key (masked by the operator's fallthroughs) runs typed if it can, else
    /// boxed once. The call's arguments are used up.
    #[inline(always)]
    pub fn redispatch(
        &mut self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
    ) -> Result<()> {
        self.body.redispatch(op, table, keys)
    }

    /// The CPU fallback's steps compiled with `cpu`'s signature, if it has this call's (None,
    /// having run nothing, where it has not); the calls those steps do not serve are boxed
    /// once for `boxed`, the CPU fallback's boxed call.
    #[inline(always)]
    pub(crate) fn run_cpu_fallback(
        &mut self,
        cpu: &KernelFunction,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        boxed: &TableFn,
    ) -> Option<Result<()>> {
        self.body.run_cpu_fallback(cpu, op, table, keys, boxed)
    }
}

/// A typed call's arguments until a kernel takes them, then its returns.
struct Slots<A, R> {
    args: Option<A>,
    returns: Option<R>,
    ways: TypedWays<A, R>,
}

impl<A, R> Slots<A, R> {
    #[cold]
    fn used_up() -> Error {
        Error::Kernel {
            context: "typed wrapper".into(),
            message: "a typed call's arguments were used twice".into(),
        }
    }
}

impl<A: CallArgs + 'static, R: CallReturns + 'static> TypedBody for Slots<A, R> {
    #[inline(always)]
    fn run(
        &mut self,
        kernel: &KernelFunction,
        keys: DispatchKeySet,
        maps: &mut dyn TensorMaps,
    ) -> Result<()> {
        let (Some(f), Some(args)) = (kernel.unboxed::<A, R>(), self.args.take()) else {
            return Err(Slots::<A, R>::used_up());
        };
        self.returns = Some(run_mapped(f, keys, args, maps)?);
        Ok(())
    }

    fn redispatch(
        &mut self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
    ) -> Result<()> {
        let args = self.args.take().ok_or_else(Slots::<A, R>::used_up)?;
        self.returns = Some((self.ways.redispatch)(op, table, keys, args)?);
        Ok(())
    }

    #[inline(always)]
    fn run_cpu_fallback(
        &mut self,
        cpu: &KernelFunction,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        boxed: &TableFn,
    ) -> Option<Result<()>> {
        let (f, steps) = cpu.typed_fallback::<A, R>()?;
        let Some(args) = self.args.take() else {
            return Some(Err(Slots::<A, R>::used_up()));
        };
        let boxing = self.ways.boxing;
        let mut declined = |args: A| boxing(op, table, keys, boxed, args);
        Some(steps(op, table, keys, f, args, &mut declined).map(|r| self.returns = Some(r)))
    }
}

/// Offers the typed call `args` to `wrapper`: `None` if it declined (the arguments are then
/// given back to `declined`, untouched), else what it made of the call. Each outcome is built in
/// the caller's return slot: a nested `Result` would copy the error-sized value at each level.
#[inline(always)]
pub(crate) fn call_wrapper<A: CallArgs + 'static, R: CallReturns + 'static>(
    wrapper: &dyn TypedWrapper,
    op: &OperatorHandle,
    table: &DispatchTable,
    keys: DispatchKeySet,
    args: A,
    ways: TypedWays<A, R>,
    declined: impl FnOnce(A) -> Result<R>,
) -> Result<R> {
    let mut slots = Slots::<A, R> {
        args: Some(args),
        returns: None,
        ways,
    };
    let mut call = TypedCall {
        signature: TypeId::of::<UnboxedFn<A, R>>(),
        maps_tensors: A::TYPED_FALLBACK && R::TYPED_FALLBACK,
        body: &mut slots,
    };
    match wrapper.call_typed(op, table, keys, &mut call) {
        Some(Ok(())) => match slots.returns {
            Some(r) => Ok(r),
            None => Err(ran_nothing(op)),
        },
        Some(Err(e)) => Err(e),
        // Declined: the arguments go back, unless the wrapper used them (and broke its word).
        None => match slots.args {
            Some(args) => declined(args),
            None => Err(Slots::<A, R>::used_up()),
        },
    }
}

#[cold]
fn ran_nothing(op: &OperatorHandle) -> Error {
    Error::Kernel {
        context: format!("the typed wrapper of '{}'", op.name()),
        message: "it served the call but ran no kernel".into(),
    }
}
