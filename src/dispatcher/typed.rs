//! The typed handle and its calls: the entry's typed function, else the counted one, else
//! the entry's typed wrapper, else one boxing for the entry's boxed call.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ivalue::{CallArgs, CallReturns, Stack};
use crate::kernel::{
    self as kernel_fn, DispatchTable, KernelFunction, OperatorHandle, TableFn, TypedWays,
};
use crate::key::DispatchKeySet;
use crate::rcu::{self, leave_holding};

use super::route::dispatch_keys;

impl OperatorHandle {
    /// A typed handle: calls of an unboxed kernel of this exact signature never box.
    ///
    /// ```
    /// use boxfall::{KernelFunction, Library, LibraryKind, DispatchKey};
    /// let mut lib = Library::new("doc_typed", LibraryKind::Def).unwrap();
    /// let op = lib.define("inc(int x) -> int").unwrap();
    /// lib.impl_kernel("inc", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 1)), false).unwrap();
    /// let inc = op.typed::<(i64,), i64>().unwrap();
    /// assert_eq!(inc.call((1,)).unwrap(), 2);
    /// ```
    pub fn typed<A: CallArgs + 'static, R: CallReturns + 'static>(
        &self,
    ) -> Result<TypedOperatorHandle<A, R>> {
        let schema = self.schema()?;
        if schema.schema.arguments.len() != A::LEN {
            return Err(Error::Argument {
                op: self.0.name.clone(),
                message: format!(
                    "a typed handle with {} arguments does not fit the schema's {}",
                    A::LEN,
                    schema.schema.arguments.len()
                ),
                schema: schema.text.clone(),
            });
        }
        Ok(TypedOperatorHandle {
            op: self.clone(),
            _sig: PhantomData,
        })
    }
}

/// A handle whose calls are typed: `A` a tuple of arguments, `R` the returns.
///
/// ```
/// # use boxfall::{KernelFunction, Library, LibraryKind, DispatchKey};
/// # let mut lib = Library::new("doc_typed2", LibraryKind::Def).unwrap();
/// # let op = lib.define("neg(float x) -> float").unwrap();
/// # lib.impl_kernel("neg", DispatchKey::CPU, KernelFunction::from_boxed(|_, _, s| { let x = s[0].to_double().unwrap_or(0.0); s[0] = (-x).into(); Ok(()) }), false).unwrap();
/// let neg = op.typed::<(f64,), f64>().unwrap();
/// assert_eq!(neg.call((2.0,)).unwrap(), -2.0); // a boxed kernel: boxed once
/// ```
pub struct TypedOperatorHandle<A, R> {
    op: OperatorHandle,
    _sig: PhantomData<fn(A) -> R>,
}

impl<A, R> Clone for TypedOperatorHandle<A, R> {
    fn clone(&self) -> Self {
        TypedOperatorHandle {
            op: self.op.clone(),
            _sig: PhantomData,
        }
    }
}

impl<A: CallArgs + 'static, R: CallReturns + 'static> TypedOperatorHandle<A, R> {
    /// The untyped handle.
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let mut lib = Library::new("doc_typed_handle", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// let typed = op.typed::<(i64,), i64>().unwrap();
    /// assert_eq!(typed.handle(), &op);
    /// ```
    pub fn handle(&self) -> &OperatorHandle {
        &self.op
    }

    /// Calls the operator: no allocation, lock or lookup when the kernel is unboxed with this
    /// signature; one boxing otherwise.
    ///
    /// ```
    /// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_typed_call", LibraryKind::Def).unwrap();
    /// let op = lib.define("add(int a, int b) -> int").unwrap();
    /// lib.impl_kernel("add", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64, i64), i64>(|_, (a, b)| Ok(a + b)), false).unwrap();
    /// let add = op.typed::<(i64, i64), i64>().unwrap();
    /// assert_eq!(add.call((2, 3)).unwrap(), 5);
    /// ```
    #[inline]
    pub fn call(&self, args: A) -> Result<R> {
        let g = rcu::read();
        let table = self.op.0.table.load(&g);
        let keys = args.dispatch_keys();
        let masked = table.masked(dispatch_keys(keys));
        // The entry's typed function: one test. It never runs long (a long-running kernel
        // keeps no typed function), so this path pays no test for that either.
        if let Some(f) = table.fast_unboxed::<A, R>(masked) {
            return f(masked, args);
        }
        if table.may_run_long(masked) {
            let owned = leave_holding!(g, table);
            return self.call_detached(owned, keys, masked, args);
        }
        self.call_entry(table, keys, masked, args)
    }

    /// Continues below the highest key of `keys`.
    ///
    /// ```
    /// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_typed_redispatch", LibraryKind::Def).unwrap();
    /// let op = lib.define("inc(int x) -> int").unwrap();
    /// lib.impl_kernel("inc", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 1)), false).unwrap();
    /// let inc = op.typed::<(i64,), i64>().unwrap();
    /// assert_eq!(inc.redispatch(DispatchKey::NATIVE.set() | DispatchKey::CPU, (1,)).unwrap(), 2);
    /// assert!(inc.redispatch(DispatchKey::CPU.set(), (1,)).is_err()); // nothing below CPU
    /// ```
    pub fn redispatch(&self, keys: DispatchKeySet, args: A) -> Result<R> {
        let g = rcu::read();
        let table = self.op.0.table.load(&g);
        let rest = keys.without_highest();
        let masked = table.masked(rest);
        if table.may_run_long(masked) {
            let owned = leave_holding!(g, table);
            return self.call_detached(owned, rest, masked, args);
        }
        self.call_on(table, rest, masked, args)
    }

    /// Hands the call to a boxed fallback, from typed code: c10's `call_fallback_fn`, as a
    /// backend's own kernel does for the cases it leaves to the CPU. The fallback runs for the
    /// arguments' backend (the highest key of their tensors, else of their `Device` argument),
    /// on the operator's table as a dispatched call runs it: a fallback with a typed wrapper
    /// (the CPU fallback of a functional operator whose CPU kernel is unboxed with this
    /// signature) runs without boxing; any other gets the arguments boxed once and its returns
    /// unboxed. A CPU fallback obeys the fallback policy and counts, as a registered one does.
    ///
    /// ```
    /// use boxfall::*;
    /// let mut lib = Library::new("doc_typed_call_fallback", LibraryKind::Def).unwrap();
    /// let op = lib.define("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor").unwrap();
    /// lib.impl_kernel("add.Tensor", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor, Tensor, f64), Tensor>(|_, (a, b, alpha)| {
    ///     let (a, b) = (a.to_host()?.as_f64().cloned().unwrap_or_default(), b.to_host()?.as_f64().cloned().unwrap_or_default());
    ///     Ok(Tensor::from_array(a + b * alpha))
    /// }), false).unwrap();
    /// let add = op.typed::<(Tensor, Tensor, f64), Tensor>().unwrap();
    /// let (a, b) = (native::tensor(ndarray::arr1(&[1.0]).into_dyn()), native::tensor(ndarray::arr1(&[2.0]).into_dyn()));
    /// let fb = cpu_fallback();
    /// let sum = add.call_fallback(&fb, (a, b, 1.0)).unwrap();
    /// assert_eq!(sum.device(), native::DEVICE);
    /// assert_eq!(sum.to_host().unwrap().as_f64().unwrap().as_slice().unwrap(), &[3.0]);
    /// assert_eq!(Dispatcher::op_stats(op.name()).unwrap().fallbacks, 1);
    /// ```
    pub fn call_fallback(&self, fallback: &KernelFunction, args: A) -> Result<R> {
        let keys = args.dispatch_keys();
        // A fallback that needs no table runs as it is, with no table loaded for it.
        if !fallback.wraps() {
            return boxing(args, |stack| fallback.call_boxed(&self.op, keys, stack));
        }
        self.op
            .with_table(keys, |table| match fallback.typed_wrapper() {
                Some(w) => self.call_wrapper(table, w, &**fallback.in_table(), keys, args),
                None => call_boxing_in(&self.op, table, keys, &**fallback.in_table(), args),
            })
    }

    /// `call_on` on a table held by a count, outside any read section this call entered.
    #[cold]
    #[inline(never)]
    fn call_detached(
        &self,
        table: Arc<DispatchTable>,
        unmasked: DispatchKeySet,
        keys: DispatchKeySet,
        args: A,
    ) -> Result<R> {
        self.call_on(&table, unmasked, keys, args)
    }

    /// A typed call routed in `table` (`keys` masked already; `unmasked` what the error names
    /// when no key is left): the entry's typed function, else `call_entry`.
    #[inline(always)]
    fn call_on(
        &self,
        table: &DispatchTable,
        unmasked: DispatchKeySet,
        keys: DispatchKeySet,
        args: A,
    ) -> Result<R> {
        if let Some(f) = table.fast_unboxed::<A, R>(keys) {
            return f(keys, args);
        }
        self.call_entry(table, unmasked, keys, args)
    }

    /// A typed call of the entry at the highest of `keys` that the entry's typed function does
    /// not serve: a backend's own typed function, counted; else the entry's typed wrapper,
    /// which may decline; else the entry's boxed call, the arguments boxed once.
    #[inline(always)]
    fn call_entry(
        &self,
        table: &DispatchTable,
        unmasked: DispatchKeySet,
        keys: DispatchKeySet,
        args: A,
    ) -> Result<R> {
        let Some((entry, boxed)) = table.route(keys) else {
            return Err(self.op.nothing_serves(table, unmasked, keys));
        };
        if let Some(f) = entry.counted_typed.get::<A, R>() {
            return entry.count.run_then(&self.op, move || f(keys, args));
        }
        match entry.wrapper.as_deref() {
            Some(w) => self.call_wrapper(table, w, boxed, keys, args),
            None => call_boxing_in(&self.op, table, keys, boxed, args),
        }
    }

    /// A typed call offered to a typed `wrapper` (passing it on by `call_in_table`, boxing by
    /// `call_boxing_in`); if it declines, the arguments are boxed once for `boxed`. Out of
    /// line, so that a typed call of a kernel keeps its own code small.
    #[inline(never)]
    fn call_wrapper(
        &self,
        table: &DispatchTable,
        wrapper: &dyn kernel_fn::TypedWrapper,
        boxed: &TableFn,
        keys: DispatchKeySet,
        args: A,
    ) -> Result<R> {
        let ways = TypedWays {
            redispatch: call_in_table::<A, R>,
            boxing: call_boxing_in::<A, R>,
        };
        kernel_fn::call_wrapper::<A, R>(wrapper, &self.op, table, keys, args, ways, |args| {
            call_boxing_in(&self.op, table, keys, boxed, args)
        })
    }
}

/// A typed call of a boxed call on a table: the arguments boxed once, `boxed` run on them,
/// its returns unboxed.
#[inline(always)]
fn call_boxing_in<A: CallArgs, R: CallReturns>(
    op: &OperatorHandle,
    table: &DispatchTable,
    keys: DispatchKeySet,
    boxed: &TableFn,
    args: A,
) -> Result<R> {
    boxing(args, |stack| boxed(op, table, keys, stack))
}

/// Boxes the arguments once, runs `call` on the stack, and unboxes its returns. The stack
/// comes from this thread's spare, so a typed call of a boxed kernel allocates only the
/// first time (a nested call finds the spare taken and allocates its own). The spare is
/// boxed so that taking and returning it moves one word: moving the three words of a Vec
/// that were just written one by one stalls the wide loads of the move, a few ns a call.
#[inline(always)]
fn boxing<A: CallArgs, R: CallReturns>(
    args: A,
    call: impl FnOnce(&mut Stack) -> Result<()>,
) -> Result<R> {
    let mut spare = SpareStack::take();
    let stack = spare.stack();
    args.push_onto(stack);
    // The tail expression, so the result is built in the caller's slot; the spare goes
    // back when `spare` drops, after.
    call(stack).and_then(|()| R::pop_from(stack))
}

/// A typed call on exactly `keys` (masked by the operator's fallthroughs) in a table the caller
/// loaded: how a typed wrapper redispatches (`TypedCall::redispatch`).
#[inline(never)]
fn call_in_table<A: CallArgs + 'static, R: CallReturns + 'static>(
    op: &OperatorHandle,
    table: &DispatchTable,
    keys: DispatchKeySet,
    args: A,
) -> Result<R> {
    let typed = TypedOperatorHandle::<A, R> {
        op: op.clone(),
        _sig: PhantomData,
    };
    typed.call_on(table, keys, table.masked(keys), args)
}

/// This thread's spare stack while a typed call of a boxed kernel uses it; cleared and given
/// back on drop.
struct SpareStack(Option<Box<Stack>>);

impl SpareStack {
    // Always inlined, as `call_boxing`: left to the inliner, it and its neighbours were split
    // into functions of their own once the typed call grew, a frame each on every call.
    #[inline(always)]
    fn take() -> SpareStack {
        SpareStack(SPARE_STACK.try_with(Cell::take).ok().flatten())
    }

    /// The stack, made on the thread's first call.
    #[inline(always)]
    fn stack(&mut self) -> &mut Stack {
        self.0.get_or_insert_with(SpareStack::first)
    }

    #[cold]
    #[inline(never)]
    fn first() -> Box<Stack> {
        Box::default()
    }
}

impl Drop for SpareStack {
    #[inline]
    fn drop(&mut self) {
        if let Some(mut stack) = self.0.take() {
            // Empty after a call that went well: no drop loop to run.
            if !stack.is_empty() {
                stack.clear();
            }
            if stack.capacity() <= SPARE_STACK_MAX {
                let _ = SPARE_STACK.try_with(|c| c.set(Some(stack)));
            }
        }
    }
}

thread_local! {
    /// A stack buffer kept for the next typed call of a boxed kernel on this thread.
    static SPARE_STACK: Cell<Option<Box<Stack>>> = const { Cell::new(None) };
}

/// A spare stack larger than this is dropped rather than kept.
const SPARE_STACK_MAX: usize = 64;
