//! The dispatcher: operator entries, their precomputed dispatch tables, and the registry that
//! recomputes the tables whenever a definition, kernel or fallback comes or goes.
//!
//! Calls read an operator's table inside a read section of the crate's RCU (`rcu.rs`: two plain
//! stores to a per-thread slot: no lock, no allocation, no read-modify-write); the section keeps
//! the table, and so the kernel, alive until the call ends. Registration takes one global
//! mutex, recomputes the affected tables, publishes each with one atomic swap, and frees the
//! replaced ones once no call that could see them is still running.
//!
//! A call is decided in three places, each written once: `dispatch_keys` computes its key set
//! (the arguments' keys, plus this thread's included keys, minus its excluded ones);
//! `DispatchTable::route` masks them by the operator's fallthroughs and finds the entry of
//! the highest key; and `compute_table`, the one table rule, published that entry with its
//! calls bound (`TableEntry::publish`: counting a backend's own kernel, the CPU kernel a CPU
//! fallback runs). A boxed call runs the entry's boxed call, one indirect call; a typed call
//! runs its typed function, else the counted one, else offers itself to the entry's typed
//! wrapper, else boxes once. Nothing at call time asks the route or the kernel how to run.
//! The handle and table types themselves are defined in `kernel.rs` (kernels are called with
//! them); this file adds the routing and the registry.

use std::cell::Cell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crossbeam_utils::CachePadded;

use crate::error::{Error, Result};
use crate::ivalue::{CallArgs, CallReturns, IValue, Stack};
use crate::kernel::{
    self as kernel_fn, KernelFunction, OperatorEntry, TableEntry, TableFn, TensorsFn, TypedWays,
};
use crate::key::{local_keys, registered_keys, DispatchKey, DispatchKeySet, KeyKind, NUM_KEYS};
use crate::metrics::{OpMetrics, OpStats, Snapshot};
use crate::rcu::{self, leave_holding, RcuCell};
use crate::schema::FunctionSchema;

pub use crate::kernel::{DispatchTable, KernelCall, KernelCount, OperatorHandle, Route, Source};
pub use crate::schema::OpSchema;

/// The key set a call dispatches on, from its arguments' keys: this thread's included keys
/// added, its excluded keys removed (c10's `DispatchKeyExtractor`). Every entry point that
/// starts a call computes its keys here, the Python bindings' included; the operator's mask
/// is applied by the route (`DispatchTable::route`).
///
/// ```
/// use boxfall::{dispatcher::dispatch_keys, key::LocalKeysGuard, DispatchKey, DispatchKeySet};
/// let cpu = DispatchKey::CPU.set();
/// assert_eq!(dispatch_keys(cpu), cpu);
/// let _g = LocalKeysGuard::exclude(cpu);
/// assert_eq!(dispatch_keys(cpu), DispatchKeySet::EMPTY); // excluded on this thread
/// ```
#[inline(always)]
pub fn dispatch_keys(argument_keys: DispatchKeySet) -> DispatchKeySet {
    let (included, excluded) = local_keys();
    DispatchKeySet((argument_keys.0 | included.0) & !excluded.0)
}

impl DispatchTable {
    /// The kernel that serves the highest of `keys` once the operator's fallthroughs are
    /// masked out (`None`: a call on them would be a `NoKernel` error).
    #[inline(always)]
    pub fn kernel(&self, keys: DispatchKeySet) -> Option<&KernelFunction> {
        self.route(self.masked(keys))
            .and_then(|(e, _)| e.kernel.as_ref())
    }

    /// `keys` without the keys the operator's fallthroughs serve: the keys a call on `keys`
    /// dispatches on (its kernel is `kernel(keys)`, at the highest of them).
    #[inline(always)]
    pub(crate) fn masked(&self, keys: DispatchKeySet) -> DispatchKeySet {
        DispatchKeySet(keys.0 & self.mask)
    }

    /// The one route: the entry that serves a call on `keys` (masked by the operator's
    /// fallthroughs already), and its kernel; `None` where nothing serves them (the call is a
    /// `NoKernel` error). Every call, boxed or typed, dispatched or redispatched, finds its
    /// kernel here; how the entry's call runs was decided when the table was published
    /// ([`Route`]).
    #[inline(always)]
    pub(crate) fn route(&self, keys: DispatchKeySet) -> Option<(&TableEntry, &TableFn)> {
        let entry = &self.entries[keys.highest()?.index()];
        entry.boxed.as_deref().map(|b| (entry, b))
    }

    /// A boxed call on exactly `keys` (masked by the operator's fallthroughs) in this table, as
    /// a kernel that reads the table passes a call on: `keys.without_highest()` to redispatch
    /// below its own key, `DispatchKey::CPU.set()` to reach the CPU kernel. `op` is the table's
    /// operator. Runs inside the caller's read section: the kernel that reads the table left it
    /// already if one below runs long.
    ///
    /// ```
    /// use boxfall::{DispatchKey, IValue, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_table_call", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x * 2)), false).unwrap();
    /// let mut stack = vec![IValue::Int(4)];
    /// op.with_table(DispatchKey::CPU.set(), |t| t.call(&op, DispatchKey::CPU.set(), &mut stack)).unwrap();
    /// assert_eq!(stack[0].to_int(), Some(8));
    /// ```
    #[inline]
    pub fn call(&self, op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
        op.run(self, keys, self.masked(keys), stack)
    }

    /// A call on `keys` routed in this table ([`OperatorHandle::route`]); None if the operator
    /// is not defined.
    #[inline(always)]
    fn routed(&self, keys: DispatchKeySet) -> Option<Routed<'_>> {
        let schema = self.schema.as_ref()?;
        let keys = self.masked(keys);
        Some(Routed {
            table: self,
            schema,
            keys,
            entry: self.route(keys).map(|(e, _)| e),
        })
    }
}

/// What serves a call, as the router found it in one load of the operator's table
/// ([`OperatorHandle::route`], [`OperatorHandle::resolve`]): the route that
/// `compute_table` decided for the entry, with what each route needs, so that a caller that
/// runs kernels its own way reads the route rather than the kernel.
///
/// ```
/// use boxfall::{kernel::{CpuKernel, Route}, DispatchKey, Library, LibraryKind};
/// boxfall::native::install_fallback().unwrap();
/// let mut lib = Library::new("doc_routed", LibraryKind::Def).unwrap();
/// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
/// let r = op.route(DispatchKey::NATIVE.set(), |r| (r.route(), r.keys().highest())).unwrap();
/// assert_eq!(r, (Route::CpuFallback(CpuKernel::Missing), Some(DispatchKey::NATIVE)));
/// ```
#[derive(Clone, Copy)]
pub struct Routed<'t> {
    table: &'t DispatchTable,
    schema: &'t Arc<OpSchema>,
    keys: DispatchKeySet,
    entry: Option<&'t TableEntry>,
}

impl<'t> Routed<'t> {
    /// The call's keys masked by the operator's fallthroughs: the keys its kernel gets.
    #[inline(always)]
    pub fn keys(&self) -> DispatchKeySet {
        self.keys
    }

    /// The operator's schema, as the table holds it.
    #[inline(always)]
    pub fn schema(&self) -> &'t Arc<OpSchema> {
        self.schema
    }

    /// The table the call was routed in (its address tells one table from another while it
    /// lives).
    #[inline(always)]
    pub fn table(&self) -> &'t DispatchTable {
        self.table
    }

    /// What serves the call, as the table was published ([`Route::Missing`]: nothing): for a
    /// caller that reports it; the calls themselves run what the entry bound.
    #[inline(always)]
    pub fn route(&self) -> Route {
        self.entry.map_or(Route::Missing, |e| e.route)
    }

    /// The kernel that serves the call (None: a `NoKernel` error).
    #[inline(always)]
    pub fn kernel(&self) -> Option<&'t KernelFunction> {
        self.entry.and_then(|e| e.kernel.as_ref())
    }

    /// For [`Route::Foreign`], the kernel's payload, if it is a `T` (what the bindings that
    /// registered the kernel gave [`KernelFunction::with_foreign`]).
    #[inline(always)]
    pub fn foreign<T: std::any::Any>(&self) -> Option<&'t T> {
        self.entry?.foreign.as_ref()?.get()
    }

    /// For [`Route::CpuFallback`] with
    /// [`CpuKernel::Foreign`](crate::kernel::CpuKernel::Foreign), the CPU kernel's payload, if
    /// it is a `T`: the kernel whose call the fallback's steps surround.
    #[inline(always)]
    pub fn cpu_foreign<T: std::any::Any>(&self) -> Option<&'t T> {
        self.entry?.cpu_foreign.as_ref()?.get()
    }

    /// For [`Route::Tensors`], the kernel's typed entry on two tensors.
    #[inline(always)]
    pub fn tensors(&self) -> Option<TensorsFn> {
        self.entry?.tensors
    }

    /// Whether the kernel is a backend's own, which a caller that runs it its own way counts
    /// in the operator's `kernel_calls` ([`KernelCount::run`]), as the dispatcher counts the
    /// calls it runs; decided when the table was published.
    ///
    /// ```
    /// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_routed_counted", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// let k = || KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x));
    /// lib.impl_kernel("f", DispatchKey::CPU, k(), false).unwrap();
    /// lib.impl_kernel("f", DispatchKey::NATIVE, k(), false).unwrap();
    /// let counted = |key: DispatchKey| op.route(key.set(), |r| r.counted().backend()).unwrap();
    /// assert_eq!(counted(DispatchKey::NATIVE), Some(DispatchKey::NATIVE));
    /// assert_eq!(counted(DispatchKey::CPU), None); // the CPU's kernels are not counted
    /// ```
    #[inline(always)]
    pub fn counted(&self) -> KernelCount {
        self.entry.map_or(KernelCount::NONE, |e| e.count)
    }

    /// Runs the call as the dispatcher's boxed call runs it (counted, and the CPU fallback
    /// with the CPU kernel its entry names): for a caller that routed it and holds a stack.
    /// `op` is the table's operator.
    ///
    /// ```
    /// use boxfall::{DispatchKey, IValue, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_routed_call_boxed", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::NATIVE, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 1)), false).unwrap();
    /// let mut stack = vec![IValue::Int(1)];
    /// op.resolve(DispatchKey::NATIVE.set(), |r| r.call_boxed(&op, &mut stack)).unwrap().unwrap();
    /// assert_eq!(stack[0].to_int(), Some(2));
    /// assert_eq!(op.metrics().snapshot().kernel_calls, 1);
    /// ```
    #[inline]
    pub fn call_boxed(&self, op: &OperatorHandle, stack: &mut Stack) -> Result<()> {
        op.run(self.table, self.keys, self.keys, stack)
    }
}

impl OperatorHandle {
    /// A boxed call: the stack holds the arguments (defaults filled) and gets the returns. After
    /// an error its contents are unspecified (the arguments' tensors themselves are unchanged).
    ///
    /// ```
    /// use boxfall::{IValue, KernelFunction, Library, LibraryKind, DispatchKey};
    /// let mut lib = Library::new("doc_boxed", LibraryKind::Def).unwrap();
    /// let op = lib.define("twice(int x) -> int").unwrap();
    /// lib.impl_kernel("twice", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(2 * x)), false).unwrap();
    /// let mut stack = vec![IValue::Int(21)];
    /// op.call_boxed(&mut stack).unwrap();
    /// assert_eq!(stack[0].to_int(), Some(42));
    /// ```
    pub fn call_boxed(&self, stack: &mut Stack) -> Result<()> {
        self.boxed_on(stack, |table, stack| {
            let keys = argument_keys(table.schema(self)?, stack);
            Ok((keys, dispatch_keys(keys)))
        })
    }

    /// Every boxed entry point: loads the table, takes the call's keys from `keys` (the keys
    /// its error names if nothing serves it, and the keys it dispatches on), leaves the read
    /// section if the call may reach a kernel that runs long, and runs the call (`run`).
    #[inline(always)]
    fn boxed_on(
        &self,
        stack: &mut Stack,
        keys: impl FnOnce(&DispatchTable, &Stack) -> Result<(DispatchKeySet, DispatchKeySet)>,
    ) -> Result<()> {
        let g = rcu::read();
        let table = self.0.table.load(&g);
        let (named, keys) = keys(table, stack)?;
        let masked = table.masked(keys);
        if table.may_run_long(masked) {
            let owned = leave_holding!(g, table);
            return self.run_detached(owned, named, masked, stack);
        }
        self.run(table, named, masked, stack)
    }

    /// The key set a boxed call with these arguments dispatches on (before the operator's
    /// fallthroughs are masked out): its tensors' keys, else its `Device` argument's, else CPU;
    /// plus this thread's included keys, minus the excluded ones. What a boxed fallback called
    /// directly (`call_fallback`) receives.
    ///
    /// ```
    /// use boxfall::{IValue, Library, LibraryKind, DispatchKey, native};
    /// let mut lib = Library::new("doc_call_keys", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// let x = native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert_eq!(op.call_keys(&[IValue::Tensor(x)]).unwrap().highest(), Some(DispatchKey::NATIVE));
    /// ```
    pub fn call_keys(&self, stack: &[IValue]) -> Result<DispatchKeySet> {
        let schema = self.schema()?;
        Ok(dispatch_keys(argument_keys(&schema, stack)))
    }

    /// Continues a call below the current (highest) key of `keys`, as a kernel does to pass a
    /// call on.
    ///
    /// ```
    /// use boxfall::{DispatchKey, IValue, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_redispatch_boxed", LibraryKind::Def).unwrap();
    /// let op = lib.define("twice(int x) -> int").unwrap();
    /// lib.impl_kernel("twice", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(2 * x)), false).unwrap();
    /// let mut stack = vec![IValue::Int(4)];
    /// op.redispatch_boxed(DispatchKey::NATIVE.set() | DispatchKey::CPU, &mut stack).unwrap(); // below Native: CPU
    /// assert_eq!(stack[0].to_int(), Some(8));
    /// ```
    pub fn redispatch_boxed(&self, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
        let rest = keys.without_highest();
        self.boxed_on(stack, |_, _| Ok((rest, rest)))
    }

    /// The router, for callers that run a kernel their own way (the Python bindings): routes a
    /// call on `keys` in one load of the operator's table, as every call is routed
    /// (`DispatchTable::route` on `keys` masked by the operator's fallthroughs), and gives `f`
    /// what serves it ([`Routed`]: the entry's [`Route`] and what that route needs). `keys` are
    /// a call's keys as [`dispatch_keys`] gives them, or for a redispatch the keys below the
    /// current one. None if the operator is not defined.
    ///
    /// `f` runs inside the dispatcher's read section whatever serves the call: it is for a
    /// caller that looks (takes what it needs out of the route and runs nothing long in `f`,
    /// which would hold back reclamation); [`resolve`](Self::resolve) is for one that runs the
    /// kernel in `f`.
    ///
    /// ```
    /// use boxfall::{kernel::Route, DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_route", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// let k = KernelFunction::from_boxed(|_, _, _| Ok(())).with_foreign(std::sync::Arc::new(7u8));
    /// lib.impl_kernel("f", DispatchKey::CPU, k, false).unwrap();
    /// let found = op.route(DispatchKey::CPU.set(), |r| (r.route(), r.foreign::<u8>().copied()));
    /// assert_eq!(found, Some((Route::Foreign, Some(7))));
    /// ```
    #[inline(always)]
    pub fn route<T>(&self, keys: DispatchKeySet, f: impl FnOnce(Routed<'_>) -> T) -> Option<T> {
        let g = rcu::read();
        let table = self.0.table.load(&g);
        Some(f(table.routed(keys)?))
    }

    /// As [`route`](Self::route), for a caller that runs the kernel in `f`: the table, and so
    /// the kernel, lives until `f` returns, and if the call may reach a kernel that runs long,
    /// `f` runs outside the dispatcher's read section, on the table held by a count.
    ///
    /// ```
    /// use boxfall::{DispatchKey, IValue, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_resolve", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 1)), false).unwrap();
    /// let mut stack = vec![IValue::Int(1)];
    /// op.resolve(DispatchKey::CPU.set(), |r| r.kernel().unwrap().call_boxed(&op, r.keys(), &mut stack)).unwrap().unwrap();
    /// assert_eq!(stack[0].to_int(), Some(2));
    /// ```
    #[inline]
    pub fn resolve<T>(&self, keys: DispatchKeySet, f: impl FnOnce(Routed<'_>) -> T) -> Option<T> {
        let g = rcu::read();
        let table = self.0.table.load(&g);
        table.schema.as_ref()?;
        if table.may_run_long(table.masked(keys)) {
            let owned = leave_holding!(g, table);
            return owned.routed(keys).map(f);
        }
        table.routed(keys).map(f)
    }

    /// A boxed call on exactly `keys` (masked by the operator's fallthroughs), ignoring the
    /// arguments' keys: as a caller that chose the key itself passes a call on.
    ///
    /// ```
    /// use boxfall::{DispatchKey, IValue, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_call_with_keys", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::NATIVE, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 100)), false).unwrap();
    /// let mut stack = vec![IValue::Int(1)];
    /// op.call_boxed_with_keys(DispatchKey::NATIVE.set(), &mut stack).unwrap();
    /// assert_eq!(stack[0].to_int(), Some(101));
    /// assert!(op.call_boxed(&mut vec![IValue::Int(1)]).is_err()); // an int alone dispatches to CPU
    /// ```
    pub fn call_boxed_with_keys(&self, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
        self.boxed_on(stack, |_, _| Ok((keys, keys)))
    }

    /// `run` on a table held by a count, outside any read section this call entered: for a
    /// call that may reach a kernel that runs long.
    #[cold]
    #[inline(never)]
    fn run_detached(
        &self,
        table: Arc<DispatchTable>,
        unmasked: DispatchKeySet,
        keys: DispatchKeySet,
        stack: &mut Stack,
    ) -> Result<()> {
        self.run(&table, unmasked, keys, stack)
    }

    /// A boxed call routed in `table` (`keys` masked already; `unmasked` what the error names
    /// when no key is left): the entry's boxed call, as it was bound at publication.
    #[inline(always)]
    fn run(
        &self,
        table: &DispatchTable,
        unmasked: DispatchKeySet,
        keys: DispatchKeySet,
        stack: &mut Stack,
    ) -> Result<()> {
        match table.route(keys) {
            Some((_, boxed)) => boxed(self, table, keys, stack),
            None => Err(self.nothing_serves(table, unmasked, keys)),
        }
    }

    /// The error of a call that nothing serves: on the highest of `keys` if it has a key left,
    /// else on the highest of `unmasked` (every key was excluded or fell through).
    #[cold]
    fn nothing_serves(
        &self,
        table: &DispatchTable,
        unmasked: DispatchKeySet,
        keys: DispatchKeySet,
    ) -> Error {
        let key = keys
            .highest()
            .unwrap_or_else(|| unmasked.highest().unwrap_or(DispatchKey::CPU));
        self.no_kernel(table, key)
    }

    /// The error of a call that nothing serves: it names the key, the keys that have a kernel
    /// and the keys this thread excludes (a call whose every key is excluded lands here too).
    #[cold]
    fn no_kernel(&self, table: &DispatchTable, key: DispatchKey) -> Error {
        let mut available: Vec<String> = (1..NUM_KEYS)
            .filter(|&i| table.entries[i].source == Source::Kernel)
            .filter_map(DispatchKey::from_index)
            .map(|k| k.name())
            .collect();
        if table.entries[0].source == Source::Kernel {
            available.push(DispatchKey::COMPOSITE_IMPLICIT.name());
        }
        let (_, excluded) = local_keys();
        let mut excluded = excluded.names();
        excluded.reverse();
        Error::NoKernel {
            op: self.0.name.clone(),
            key: key.name(),
            available,
            excluded,
        }
    }

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

    /// What serves each key: `(key name, "kernel" | "composite kernel" | "backend fallback" |
    /// "fallthrough" | "missing")`, for every registered key, lowest first.
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let mut lib = Library::new("doc_table", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert!(op.dispatch_table().contains(&("CPU".to_string(), "missing".to_string())));
    /// ```
    pub fn dispatch_table(&self) -> Vec<(String, String)> {
        let g = rcu::read();
        let table = self.0.table.load(&g);
        registered_keys()
            .into_iter()
            .filter(|k| k.kind() != KeyKind::Alias || table.entries[0].kernel.is_some())
            .map(|k| (k.name(), table.entries[k.index()].source.to_string()))
            .collect()
    }

    /// The kernel that serves `key` now, and where it comes from.
    ///
    /// ```
    /// use boxfall::{dispatcher::Source, DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_kernel_for", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x)), false).unwrap();
    /// let (kernel, source) = op.kernel_for(DispatchKey::CPU);
    /// assert!(kernel.unwrap().has_unboxed() && source == Source::Kernel);
    /// assert_eq!(op.kernel_for(DispatchKey::COMPOSITE_IMPLICIT).1, Source::Missing);
    /// ```
    pub fn kernel_for(&self, key: DispatchKey) -> (Option<KernelFunction>, Source) {
        let g = rcu::read();
        let table = self.0.table.load(&g);
        let e = &table.entries[key.index()];
        (e.kernel.clone(), e.source)
    }

    /// How a call that reaches `key` runs now, as the table was published: the entry's kernel,
    /// the CPU fallback (and how it runs the CPU kernel), a fallthrough, or nothing.
    ///
    /// ```
    /// use boxfall::kernel::Route;
    /// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_route_for", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// assert_eq!(op.route_for(DispatchKey::CPU), Route::Missing);
    /// lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::from_boxed(|_, _, _| Ok(())), false).unwrap();
    /// assert_eq!(op.route_for(DispatchKey::CPU), Route::Kernel);
    /// ```
    pub fn route_for(&self, key: DispatchKey) -> Route {
        let g = rcu::read();
        self.0.table.load(&g).entries[key.index()].route
    }

    /// Whether the CPU fallback, as `key`'s backend fallback, serves a call that reaches `key`
    /// now: such a call moves its tensors to the CPU and back (what the Python bindings ask
    /// before putting a creation operator's host data on a device).
    ///
    /// ```
    /// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind, Tensor};
    /// boxfall::native::install_fallback().unwrap();
    /// let mut lib = Library::new("doc_served_by_cpu_fallback", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert!(op.served_by_cpu_fallback(DispatchKey::NATIVE));
    /// assert!(!op.served_by_cpu_fallback(DispatchKey::CPU)); // nothing serves the CPU
    /// lib.impl_kernel("f", DispatchKey::NATIVE, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| Ok(x)), false).unwrap();
    /// assert!(!op.served_by_cpu_fallback(DispatchKey::NATIVE)); // its own kernel does
    /// ```
    pub fn served_by_cpu_fallback(&self, key: DispatchKey) -> bool {
        let g = rcu::read();
        self.0.table.load(&g).entries[key.index()].by_cpu_fallback()
    }
}

/// The keys of a boxed call's arguments: its tensors' (list elements included), else its
/// `Device` argument's, else CPU.
#[inline]
fn argument_keys(schema: &OpSchema, stack: &[IValue]) -> DispatchKeySet {
    let mut keys = DispatchKeySet::EMPTY;
    for &i in &schema.info.tensor_args {
        if let Some(v) = stack.get(i) {
            keys = keys | v.key_set();
        }
    }
    if keys.is_empty() {
        keys = match schema.info.device_arg.and_then(|i| stack.get(i)) {
            Some(IValue::Device(d)) => d.key.set(),
            _ => DispatchKey::CPU.set(),
        };
    }
    keys
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
pub(crate) fn call_in_table<A: CallArgs + 'static, R: CallReturns + 'static>(
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
    // into functions of their own once the typed call grew (about 20 instructions a call).
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

/// Identifies one registration, so its library can undo exactly it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RegId(u64);

struct Registered<T> {
    id: RegId,
    value: T,
    by: String,
}

struct OpState {
    handle: OperatorHandle,
    def: Option<Registered<Arc<OpSchema>>>,
    kernels: Vec<Vec<Registered<KernelFunction>>>,
}

/// What a registration change replaced; dropped only once the registry lock is released, with
/// the replaced tables no call can see any more.
#[derive(Default)]
struct Garbage {
    kernels: Vec<KernelFunction>,
    /// Entries removed from the registry (their tables hold kernels too).
    entries: Vec<OperatorHandle>,
}

impl Drop for Garbage {
    fn drop(&mut self) {
        drop(rcu::collect());
    }
}

struct Registry {
    /// The operators with a definition or a kernel; an entry that loses its last one leaves.
    ops: HashMap<String, OpState>,
    /// For each `ns::op`, the names of its defined overloads, in definition order (so that
    /// `overloads` is one look-up, whatever else was ever defined).
    overloads: HashMap<String, Vec<String>>,
    /// Entries removed while a handle still held them (a Python `OpOverload` object, a typed
    /// handle): a new definition of the name takes the same entry back, so those handles see
    /// it. Dead ones are swept out as the map grows.
    orphans: HashMap<String, std::sync::Weak<OperatorEntry>>,
    /// What removed entries had counted since the last reset, so that the metrics still report
    /// operators whose library was closed (a few words a name, where the entry is kilobytes).
    retired_stats: HashMap<String, OpStats>,
    fallbacks: Vec<Vec<Registered<KernelFunction>>>,
    def_libraries: HashMap<String, String>,
    next_id: u64,
}

impl Registry {
    fn id(&mut self) -> RegId {
        self.next_id += 1;
        RegId(self.next_id)
    }

    fn state(&mut self, name: &str) -> &mut OpState {
        let orphan = if self.ops.contains_key(name) {
            None
        } else {
            self.orphans.remove(name).and_then(|w| w.upgrade())
        };
        self.ops.entry(name.to_string()).or_insert_with(|| OpState {
            handle: OperatorHandle(orphan.unwrap_or_else(|| {
                Arc::new(OperatorEntry {
                    name: name.to_string(),
                    table: RcuCell::new(DispatchTable::empty()),
                    metrics: CachePadded::new(OpMetrics::default()),
                    policy: AtomicU8::new(0),
                    tags: AtomicU8::new(0),
                })
            })),
            def: None,
            kernels: (0..NUM_KEYS).map(|_| Vec::new()).collect(),
        })
    }

    /// Removes the entry of `name` if nothing is registered for it any more (and it has no
    /// operator policy of its own, which the user set by name and expects to stay). Its table
    /// was published empty already; what it counted moves to `retired_stats`.
    fn remove_if_unused(&mut self, name: &str, garbage: &mut Garbage) {
        let unused = self.ops.get(name).is_some_and(|s| {
            s.def.is_none()
                && s.kernels.iter().all(Vec::is_empty)
                && s.handle.0.policy.load(Ordering::Relaxed) == 0
        });
        if !unused {
            return;
        }
        let Some(state) = self.ops.remove(name) else {
            return;
        };
        let entry = state.handle.0.clone();
        garbage.entries.push(state.handle);
        let counted = entry.metrics.snapshot();
        if counted.fallbacks > 0 {
            // The entry may come back (an orphan): its own counts then start from zero.
            entry.metrics.reset();
            self.retired_stats
                .entry(name.to_string())
                .or_default()
                .add(&counted);
        }
        // Held here and by `garbage`: any other count is a handle outside the registry.
        if Arc::strong_count(&entry) > 2 {
            if self.orphans.len() >= 64 && self.orphans.len().is_power_of_two() {
                self.orphans.retain(|_, w| w.strong_count() > 0);
            }
            self.orphans
                .insert(name.to_string(), Arc::downgrade(&entry));
        }
    }

    /// Publishes the recomputed table of `name`; the old table goes to `garbage`, to be dropped
    /// after the registry lock is released (dropping a kernel may run Python code, which may
    /// register or deregister in turn).
    fn publish(&self, name: &str, _garbage: &mut Garbage) {
        if let Some(state) = self.ops.get(name) {
            state
                .handle
                .0
                .table
                .replace(compute_table(state, &self.fallbacks));
        }
    }

    fn publish_all(&self, _garbage: &mut Garbage) {
        for state in self.ops.values() {
            state
                .handle
                .0
                .table
                .replace(compute_table(state, &self.fallbacks));
        }
    }

    /// The entry of a defined operator.
    fn defined(&self, name: &str) -> Option<&OpState> {
        self.ops.get(name).filter(|s| s.def.is_some())
    }

    fn defined_names(&self) -> impl Iterator<Item = &String> {
        self.ops
            .iter()
            .filter(|(_, s)| s.def.is_some())
            .map(|(n, _)| n)
    }
}

/// c10's order for every key: the operator's own kernel; for a backend key, the operator's
/// CompositeImplicit kernel; the key's backend fallback; missing. Fallthroughs leave the mask.
/// Then each entry is published ([`TableEntry::publish`]): its [`Route`] decided and its calls
/// bound, a CPU fallback entry's to the kernel that serves the CPU key. This is the one table
/// rule (c10's `computeDispatchTableEntryWithDebug`): a call runs what it bound.
fn compute_table(state: &OpState, fallbacks: &[Vec<Registered<KernelFunction>>]) -> DispatchTable {
    let mut table = DispatchTable::empty();
    table.schema = state.def.as_ref().map(|d| d.value.clone());
    let composite = state.kernels[0].last().map(|r| r.value.clone());
    for (i, (own, fallback)) in state.kernels.iter().zip(fallbacks).enumerate() {
        let key = DispatchKey::from_index(i).unwrap_or(DispatchKey::CPU);
        let (kernel, source) = if let Some(own) = own.last() {
            let source = if own.value.is_fallthrough() {
                Source::Fallthrough
            } else {
                Source::Kernel
            };
            (Some(own.value.clone()), source)
        } else if let (true, Some(c)) = (key.is_backend(), &composite) {
            (Some(c.clone()), Source::CompositeKernel)
        } else if let Some(fb) = fallback.last() {
            let source = if fb.value.is_fallthrough() {
                Source::Fallthrough
            } else {
                Source::BackendFallback
            };
            (Some(fb.value.clone()), source)
        } else {
            (None, Source::Missing)
        };
        if source == Source::Fallthrough {
            table.mask &= !(1u64 << i);
        }
        table.entries[i] = TableEntry {
            kernel,
            source,
            ..TableEntry::missing()
        };
    }
    // Each entry published once the mask is known: the CPU kernel a CPU fallback runs is the
    // one a call on the CPU key reaches.
    let cpu = table
        .masked(DispatchKey::CPU.set())
        .highest()
        .and_then(|k| table.entries[k.index()].kernel.clone());
    for (i, e) in table.entries.iter_mut().enumerate() {
        let key = DispatchKey::from_index(i).unwrap_or(DispatchKey::CPU);
        *e = TableEntry::publish(key, e.kernel.take(), e.source, cpu.as_ref());
    }
    // A kernel that reads the table may run any kernel below its key (the CPU fallback runs
    // the CPU kernel): it counts as long if one of those does. Slot 0 (CompositeImplicit) is
    // reached only through the backend keys it serves.
    let mut own_long = 0u64;
    for (i, e) in table.entries.iter().enumerate() {
        if let Some(k) = &e.kernel {
            if k.runs_long() {
                own_long |= 1u64 << i;
            }
            let below = ((1u64 << i) - 1) & !1;
            if k.runs_long() || (k.reads_table() && own_long & below != 0) {
                table.long |= 1u64 << i;
            }
        }
    }
    table
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            Mutex::new(Registry {
                ops: HashMap::new(),
                overloads: HashMap::new(),
                orphans: HashMap::new(),
                retired_stats: HashMap::new(),
                fallbacks: (0..NUM_KEYS).map(|_| Vec::new()).collect(),
                def_libraries: HashMap::new(),
                next_id: 0,
            })
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// What a registration was, so that it can be undone.
#[derive(Debug)]
pub(crate) enum Registration {
    Def(String, RegId),
    Impl(String, DispatchKey, RegId),
    Fallback(DispatchKey, RegId),
    DefLibrary(String),
}

/// The process-wide registry of operators, kernels and fallbacks.
///
/// ```
/// assert!(boxfall::Dispatcher::lookup("nobody::nothing").is_none());
/// ```
pub struct Dispatcher;

/// `Dispatcher::definitions_version`: moved, under the registry's lock, by every definition
/// that comes or goes.
static DEFINITIONS: AtomicU64 = AtomicU64::new(0);

impl Dispatcher {
    /// The defined operator of that name (`ns::op` or `ns::op.overload`).
    ///
    /// ```
    /// use boxfall::{Dispatcher, Library, LibraryKind};
    /// let mut lib = Library::new("doc_lookup", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert_eq!(Dispatcher::lookup("doc_lookup::f"), Some(op));
    /// assert!(Dispatcher::lookup("doc_lookup::g").is_none());
    /// ```
    pub fn lookup(name: &str) -> Option<OperatorHandle> {
        registry().defined(name).map(|s| s.handle.clone())
    }

    /// The defined operator of that name, or an error naming the closest defined names.
    ///
    /// ```
    /// let e = boxfall::Dispatcher::find("nobody::nothing").unwrap_err();
    /// assert!(e.to_string().contains("nobody::nothing"));
    /// ```
    pub fn find(name: &str) -> Result<OperatorHandle> {
        let reg = registry();
        match reg.defined(name) {
            Some(s) => Ok(s.handle.clone()),
            None => Err(Error::UnknownOperator {
                name: name.to_string(),
                suggestions: closest(name, reg.defined_names()),
            }),
        }
    }

    /// A number that changes whenever an operator is defined or its definition goes: a caller
    /// that keeps what it looked up by name (the Python package's `bf.ops` keeps its
    /// overload objects) looks again only when it changed.
    ///
    /// ```
    /// use boxfall::{Dispatcher, Library, LibraryKind};
    /// let before = Dispatcher::definitions_version();
    /// let mut lib = Library::new("doc_definitions_version", LibraryKind::Def).unwrap();
    /// lib.define("f(Tensor x) -> Tensor").unwrap();
    /// let defined = Dispatcher::definitions_version();
    /// assert_ne!(defined, before);
    /// drop(lib);
    /// assert_ne!(Dispatcher::definitions_version(), defined);
    /// ```
    pub fn definitions_version() -> u64 {
        DEFINITIONS.load(Ordering::Acquire)
    }

    /// The defined overloads of `ns::op`, in definition order.
    ///
    /// ```
    /// assert!(boxfall::Dispatcher::overloads("nobody::nothing").is_empty());
    /// ```
    pub fn overloads(base: &str) -> Vec<OperatorHandle> {
        let reg = registry();
        reg.overloads
            .get(base)
            .into_iter()
            .flatten()
            .filter_map(|name| reg.defined(name).map(|s| s.handle.clone()))
            .collect()
    }

    /// Every operator with a definition or a kernel now, for metrics. An operator whose
    /// registrations are all gone is not listed (its entry was freed; what it counted is in
    /// [`retired_stats`](Self::retired_stats)).
    ///
    /// ```
    /// use boxfall::{Dispatcher, Library, LibraryKind};
    /// let mut lib = Library::new("doc_all_operators", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert!(Dispatcher::all_operators().contains(&op));
    /// lib.close();
    /// assert!(!Dispatcher::all_operators().contains(&op)); // nothing registered: freed
    /// ```
    pub fn all_operators() -> Vec<OperatorHandle> {
        registry().ops.values().map(|s| s.handle.clone()).collect()
    }

    /// What operators whose entries were freed (every registration of theirs gone) had
    /// counted since the last [`reset_metrics`](Self::reset_metrics), by name.
    ///
    /// ```
    /// assert!(boxfall::Dispatcher::retired_stats().iter().all(|(_, s)| s.fallbacks > 0));
    /// ```
    pub fn retired_stats() -> Vec<(String, OpStats)> {
        let reg = registry();
        reg.retired_stats
            .iter()
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect()
    }

    /// The fallback counters of every operator counted since the last reset: each entry's own
    /// (the atomics it owns), plus what freed entries had counted, gathered in one walk of the
    /// registry. The slow path: it takes the registry lock, as registration does.
    ///
    /// ```
    /// use boxfall::*;
    /// let mut lib = Library::new("doc_dispatcher_metrics", LibraryKind::Def).unwrap();
    /// let op = lib.define("neg(Tensor x) -> Tensor").unwrap();
    /// lib.impl_kernel("neg", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| {
    ///     Ok(Tensor::from_array(-x.to_host()?.as_f64().cloned().unwrap_or_default()))
    /// }), false).unwrap();
    /// native::install_fallback().unwrap();
    /// op.typed::<(Tensor,), Tensor>().unwrap().call((native::tensor(ndarray::arr1(&[1.0]).into_dyn()),)).unwrap();
    /// let m = Dispatcher::metrics();
    /// assert_eq!(m.get(op.name()).unwrap().fallbacks, 1);
    /// assert!(m.report().contains("doc_dispatcher_metrics::neg"));
    /// ```
    pub fn metrics() -> Snapshot {
        let reg = registry();
        let live = reg
            .ops
            .iter()
            .map(|(name, s)| (name.clone(), s.handle.0.metrics.snapshot()));
        let retired = reg
            .retired_stats
            .iter()
            .map(|(n, s)| (n.clone(), s.clone()));
        Snapshot::from_counts(live.chain(retired).collect::<Vec<_>>())
    }

    /// The full counters of one operator: `"ns::name.overload"`, or `"ns::name"` for the
    /// overload whose name is empty (as everywhere: `"ns::add"` is not `"ns::add.Tensor"`).
    /// The operator is one defined now, or one counted since the last reset; a defined
    /// operator that never fell back has zeros. Any other name is [`Error::UnknownOperator`],
    /// which lists the closest names (the overloads of `ns::name` first).
    ///
    /// ```
    /// use boxfall::{Dispatcher, Error, Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_stats", LibraryKind::Def).unwrap();
    /// lib.define("add.Tensor(Tensor self, Tensor other) -> Tensor").unwrap();
    /// assert_eq!(Dispatcher::op_stats("doc_op_stats::add.Tensor").unwrap().fallbacks, 0);
    /// let e = Dispatcher::op_stats("doc_op_stats::add").unwrap_err();
    /// assert!(matches!(&e, Error::UnknownOperator { suggestions, .. }
    ///     if suggestions == &["doc_op_stats::add.Tensor".to_string()]));
    /// assert_eq!(e.to_string(), "unknown operator 'doc_op_stats::add'; did you mean: doc_op_stats::add.Tensor?");
    /// ```
    pub fn op_stats(name: &str) -> Result<OpStats> {
        let reg = registry();
        let state = reg.ops.get(name);
        let live = state.map(|s| s.handle.0.metrics.snapshot());
        let defined = state.is_some_and(|s| s.def.is_some());
        // An entry that is not defined (a kernel of its outlived its definition) counts only
        // if it fell back.
        let live = live.filter(|l| defined || l.fallbacks > 0);
        match (live, reg.retired_stats.get(name)) {
            (Some(mut l), Some(r)) => {
                l.add(r);
                Ok(l)
            }
            (Some(l), None) => Ok(l),
            (None, Some(r)) => Ok(r.clone()),
            (None, None) => Err(Error::UnknownOperator {
                name: name.to_string(),
                suggestions: closest(name, reg.defined_names()),
            }),
        }
    }

    /// The fallback count of one operator (named as [`op_stats`](Self::op_stats) takes it), 0
    /// if it never fell back, and 0 too for a name that is no operator: `op_stats` tells those
    /// apart.
    ///
    /// ```
    /// assert_eq!(boxfall::Dispatcher::counter_value("nobody::nothing"), 0);
    /// ```
    pub fn counter_value(name: &str) -> u64 {
        Dispatcher::op_stats(name).map_or(0, |s| s.fallbacks)
    }

    /// Zeroes every operator's counters, and forgets what freed entries had counted.
    ///
    /// ```
    /// boxfall::Dispatcher::reset_metrics();
    /// assert!(boxfall::Dispatcher::metrics().counters().is_empty());
    /// ```
    pub fn reset_metrics() {
        let mut reg = registry();
        for s in reg.ops.values() {
            s.handle.0.metrics.reset();
        }
        reg.retired_stats.clear();
        crate::metrics::reset_user_transfers();
    }

    /// The names of the defined operators, sorted.
    ///
    /// ```
    /// let names = boxfall::Dispatcher::operator_names();
    /// assert!(names.windows(2).all(|w| w[0] <= w[1]));
    /// ```
    pub fn operator_names() -> Vec<String> {
        let reg = registry();
        let mut v: Vec<String> = reg.defined_names().cloned().collect();
        v.sort();
        v
    }

    /// The namespaces that hold a defined operator, sorted.
    ///
    /// ```
    /// use boxfall::{Dispatcher, Library, LibraryKind};
    /// let mut lib = Library::new("doc_namespaces", LibraryKind::Def).unwrap();
    /// lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert!(Dispatcher::namespaces().contains(&"doc_namespaces".to_string()));
    /// ```
    pub fn namespaces() -> Vec<String> {
        let reg = registry();
        let mut v: Vec<String> = reg
            .defined_names()
            .filter_map(|n| n.split_once("::").map(|(ns, _)| ns.to_string()))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The operators defined in namespace `ns`, by name without namespace or overload
    /// (`add` for `demo::add.Tensor`), sorted: what `dir(bf.ops.demo)` lists.
    ///
    /// ```
    /// use boxfall::{Dispatcher, Library, LibraryKind};
    /// let mut lib = Library::new("doc_operators_in", LibraryKind::Def).unwrap();
    /// lib.define("add.Tensor(Tensor x, Tensor y) -> Tensor").unwrap();
    /// lib.define("add.Scalar(Tensor x, Scalar y) -> Tensor").unwrap();
    /// lib.define("neg(Tensor x) -> Tensor").unwrap();
    /// assert_eq!(Dispatcher::operators_in("doc_operators_in"), ["add", "neg"]);
    /// assert!(Dispatcher::operators_in("doc_nobody_here").is_empty());
    /// ```
    pub fn operators_in(ns: &str) -> Vec<String> {
        let reg = registry();
        let mut v: Vec<String> = reg
            .defined_names()
            .filter_map(|n| {
                let (op_ns, rest) = n.split_once("::")?;
                (op_ns == ns).then(|| rest.split('.').next().unwrap_or(rest).to_string())
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// What serves `key` for each defined operator (for those of namespace `ns` only, with
    /// `Some(ns)`), sorted by name: a backend author's list of what the backend lacks
    /// ([`Source::Missing`]) and what it hands to its fallback. It takes the registry lock, as
    /// registration does; it is no part of any call.
    ///
    /// A namespace with no defined operator is an [`Error::UnknownNamespace`] listing those
    /// that have some.
    ///
    /// ```
    /// use boxfall::{dispatcher::Source, DispatchKey, Dispatcher, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_coverage", LibraryKind::Def).unwrap();
    /// lib.define("f(int x) -> int").unwrap();
    /// lib.define("g(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x)), false).unwrap();
    /// let cov = Dispatcher::coverage(DispatchKey::CPU, Some("doc_coverage")).unwrap();
    /// assert_eq!(cov, [("doc_coverage::f".to_string(), Source::Kernel), ("doc_coverage::g".to_string(), Source::Missing)]);
    /// assert!(Dispatcher::coverage(DispatchKey::CPU, Some("doc_no_such_ns")).is_err());
    /// ```
    pub fn coverage(key: DispatchKey, ns: Option<&str>) -> Result<Vec<(String, Source)>> {
        let handles: Vec<OperatorHandle> = {
            let reg = registry();
            let in_ns = |name: &str| {
                ns.is_none_or(|ns| name.split_once("::").is_some_and(|(n, _)| n == ns))
            };
            let found: Vec<OperatorHandle> = reg
                .ops
                .iter()
                .filter(|(name, s)| s.def.is_some() && in_ns(name))
                .map(|(_, s)| s.handle.clone())
                .collect();
            if let (Some(ns), true) = (ns, found.is_empty()) {
                drop(reg);
                return Err(Error::UnknownNamespace {
                    name: ns.to_string(),
                    known: Self::namespaces(),
                });
            }
            found
        };
        // The tables are read outside the registry lock, as a call reads them.
        let g = rcu::read();
        let mut v: Vec<(String, Source)> = handles
            .iter()
            .map(|h| {
                let source = h.0.table.load(&g).entries[key.index()].source;
                (h.name().to_string(), source)
            })
            .collect();
        drop(g);
        v.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(v)
    }

    pub(crate) fn claim_def_namespace(ns: &str, by: &str) -> Result<Registration> {
        let mut reg = registry();
        if let Some(other) = reg.def_libraries.get(ns) {
            return Err(Error::Registration(format!(
                "{by}: namespace '{ns}' already has a DEF library ({other}); use a \"FRAGMENT\" library to add definitions"
            )));
        }
        reg.def_libraries.insert(ns.to_string(), by.to_string());
        Ok(Registration::DefLibrary(ns.to_string()))
    }

    pub(crate) fn define(
        schema: FunctionSchema,
        by: &str,
    ) -> Result<(OperatorHandle, Registration)> {
        let name = schema.operator_name();
        let mut reg = registry();
        if let Some(Some(d)) = reg.ops.get(&name).map(|s| s.def.as_ref()) {
            return Err(Error::Registration(format!(
                "{by}: operator '{name}' is already defined by {}:\n  {}",
                d.by, d.value.text
            )));
        }
        let id = reg.id();
        let op = Arc::new(OpSchema::new(schema));
        let base = op.schema.name.clone();
        let state = reg.state(&name);
        state.def = Some(Registered {
            id,
            value: op,
            by: by.to_string(),
        });
        let handle = state.handle.clone();
        reg.overloads.entry(base).or_default().push(name.clone());
        let mut garbage = Garbage::default();
        reg.publish(&name, &mut garbage);
        DEFINITIONS.fetch_add(1, Ordering::Release);
        drop(reg);
        drop(garbage);
        Ok((handle, Registration::Def(name, id)))
    }

    pub(crate) fn register_impl(
        name: &str,
        key: DispatchKey,
        kernel: KernelFunction,
        allow_override: bool,
        by: &str,
    ) -> Result<Registration> {
        let mut reg = registry();
        if reg.ops.get(name).is_none_or(|s| s.def.is_none()) {
            return Err(Error::UnknownOperator {
                name: name.to_string(),
                suggestions: closest(name, reg.defined_names()),
            });
        }
        let id = reg.id();
        let state = reg.state(name);
        if let (false, Some(prev)) = (allow_override, state.kernels[key.index()].last()) {
            return Err(Error::Registration(format!(
                "{by}: operator '{name}' already has a kernel for '{key}', registered by {}; pass allow_override=True to replace it",
                prev.by
            )));
        }
        state.kernels[key.index()].push(Registered {
            id,
            value: kernel,
            by: by.to_string(),
        });
        let mut garbage = Garbage::default();
        reg.publish(name, &mut garbage);
        drop(reg);
        drop(garbage);
        Ok(Registration::Impl(name.to_string(), key, id))
    }

    pub(crate) fn register_fallback(
        key: DispatchKey,
        kernel: KernelFunction,
        by: &str,
    ) -> Result<Registration> {
        if key.kind() == KeyKind::Alias {
            return Err(Error::Registration(format!(
                "{by}: '{key}' cannot have a backend fallback"
            )));
        }
        let mut reg = registry();
        if let Some(prev) = reg.fallbacks[key.index()].last() {
            return Err(Error::Registration(format!(
                "{by}: key '{key}' already has a fallback, registered by {}",
                prev.by
            )));
        }
        let id = reg.id();
        reg.fallbacks[key.index()].push(Registered {
            id,
            value: kernel,
            by: by.to_string(),
        });
        let mut garbage = Garbage::default();
        reg.publish_all(&mut garbage);
        drop(reg);
        drop(garbage);
        Ok(Registration::Fallback(key, id))
    }

    pub(crate) fn deregister(r: &Registration) {
        let mut garbage = Garbage::default();
        let mut reg = registry();
        match r {
            Registration::Def(name, id) => {
                let mut base = None;
                if let Some(s) = reg.ops.get_mut(name) {
                    if s.def.as_ref().is_some_and(|d| d.id == *id) {
                        base = s.def.take().map(|d| d.value.schema.name.clone());
                    }
                }
                let undefined = base.is_some();
                if let Some(base) = base {
                    if let Some(names) = reg.overloads.get_mut(&base) {
                        names.retain(|n| n != name);
                        if names.is_empty() {
                            reg.overloads.remove(&base);
                        }
                    }
                }
                reg.publish(name, &mut garbage);
                reg.remove_if_unused(name, &mut garbage);
                if undefined {
                    DEFINITIONS.fetch_add(1, Ordering::Release);
                }
            }
            Registration::Impl(name, key, id) => {
                if let Some(s) = reg.ops.get_mut(name) {
                    take_registration(&mut s.kernels[key.index()], *id, &mut garbage);
                }
                reg.publish(name, &mut garbage);
                reg.remove_if_unused(name, &mut garbage);
            }
            Registration::Fallback(key, id) => {
                take_registration(&mut reg.fallbacks[key.index()], *id, &mut garbage);
                reg.publish_all(&mut garbage);
            }
            Registration::DefLibrary(ns) => {
                reg.def_libraries.remove(ns);
            }
        }
        drop(reg);
        drop(garbage);
    }
}

fn take_registration(list: &mut Vec<Registered<KernelFunction>>, id: RegId, garbage: &mut Garbage) {
    if let Some(i) = list.iter().position(|k| k.id == id) {
        garbage.kernels.push(list.remove(i).value);
    }
}

/// The defined names closest to `name`: every overload of the operator it names (`ns::op`
/// for `ns::op` or `ns::op.typo`, up to eight), then up to three by edit distance.
fn closest<'a>(name: &str, names: impl Iterator<Item = &'a String>) -> Vec<String> {
    fn base(n: &str) -> &str {
        n.split_once('.').map_or(n, |(b, _)| b)
    }
    let mut same: Vec<&String> = Vec::new();
    let mut scored: Vec<(usize, &String)> = Vec::new();
    for n in names {
        if base(n) == base(name) {
            same.push(n);
        } else {
            let d = edit_distance(name, n);
            if d <= (n.len().max(name.len()) / 4).max(2) {
                scored.push((d, n));
            }
        }
    }
    same.sort();
    scored.sort();
    let near = scored.into_iter().take(3).map(|(_, n)| n);
    same.into_iter().take(8).chain(near).cloned().collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

pub(crate) fn policy_of(op: &OperatorHandle) -> u8 {
    op.policy_cell().load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What publication binds (`TableEntry::publish`): a typed call runs an unboxed kernel
    /// straight away only if it is not counted (a counted one is the entry's counted typed
    /// function), the CPU fallback's typed call is its wrapper, and an entry with no kernel
    /// has no call.
    #[test]
    fn publication_decides_what_a_call_tests_first() {
        crate::native::install_fallback().expect("the Native fallback");
        let mut lib = crate::Library::new("dispatcher_entry_run", crate::LibraryKind::Def)
            .expect("a namespace of its own");
        let unboxed = || KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x));
        let f = lib.define("f(int x) -> int").expect("defines");
        lib.impl_kernel("f", DispatchKey::CPU, unboxed(), false)
            .expect("registers");
        let g = lib.define("g(int x) -> int").expect("defines");
        lib.impl_kernel("g", DispatchKey::NATIVE, unboxed(), false)
            .expect("registers");
        let boxed = KernelFunction::from_boxed(|_, _, _| Ok(()));
        lib.impl_kernel("g", DispatchKey::CPU, boxed, false)
            .expect("registers");
        let h = lib.define("h(int x) -> int").expect("defines");
        let reads = KernelFunction::from_boxed_in_table(|_, _, _, _| Ok(()));
        lib.impl_kernel("h", DispatchKey::CPU, reads, false)
            .expect("registers");
        let decided = |op: &OperatorHandle, key: DispatchKey| {
            let guard = rcu::read();
            let table = op.0.table.load(&guard);
            let fast = table.fast_unboxed::<(i64,), i64>(key.set()).is_some();
            let other_signature = table.fast_unboxed::<(f64,), f64>(key.set()).is_some();
            assert!(
                !other_signature,
                "{op:?} {key}: a typed call of another signature"
            );
            let e = &table.entries[key.index()];
            let counted = e.counted_typed.get::<(i64,), i64>().is_some();
            (fast, counted, e.wrapper.is_some(), e.boxed.is_some())
        };
        // A CPU kernel of the signature: the typed function, nothing else.
        assert_eq!(decided(&f, DispatchKey::CPU), (true, false, false, true));
        // The CPU fallback: its steps compiled with the CPU kernel's signature, as a wrapper.
        assert_eq!(decided(&f, DispatchKey::NATIVE), (false, false, true, true));
        // Native's own kernel is counted: its typed function is the counted one.
        assert_eq!(decided(&g, DispatchKey::NATIVE), (false, true, false, true));
        assert_eq!(decided(&g, DispatchKey::CPU), (false, false, false, true)); // boxed
                                                                                // A boxed kernel that reads the table: its boxed call only.
        assert_eq!(decided(&h, DispatchKey::CPU), (false, false, false, true));
        // No kernel: no call at all.
        assert_eq!(
            decided(&h, DispatchKey::COMPOSITE_IMPLICIT),
            (false, false, false, false)
        );
    }

    /// Runs `call` on another thread while its long-running kernel waits, and meanwhile makes
    /// `cycles` registrations that each retire a table; returns how many retired objects were
    /// still waiting for readers at the end.
    fn retired_while_a_long_call_runs(
        churn_ns: &str,
        cycles: usize,
        call: impl FnOnce(std::sync::mpsc::Receiver<()>) + Send + 'static,
    ) -> usize {
        use std::sync::mpsc::channel;
        let (entered_tx, entered_rx) = channel::<()>();
        let (release_tx, release_rx) = channel::<()>();
        let runner = std::thread::spawn(move || {
            let _ = entered_tx.send(());
            call(release_rx)
        });
        entered_rx.recv().expect("the caller started");
        // The kernel blocks on `release_rx` once it runs; give it a moment to get there.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut lib =
            crate::Library::new(churn_ns, crate::LibraryKind::Def).expect("a namespace of its own");
        lib.define("f(int x) -> int").expect("defines");
        let kernel = KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x));
        for _ in 0..cycles {
            let mut imp =
                crate::Library::new(churn_ns, crate::LibraryKind::Impl).expect("an impl library");
            imp.impl_kernel("f", DispatchKey::CPU, kernel.clone(), false)
                .expect("registers");
        }
        let held = rcu::retired_count();
        release_tx.send(()).expect("the kernel waits");
        runner.join().expect("the long call");
        held
    }

    fn waiting_kernel(release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>) -> KernelFunction {
        KernelFunction::from_boxed(move |_, _, stack| {
            let _ = release.lock().map(|r| r.recv());
            stack.clear();
            stack.push(IValue::Int(7));
            Ok(())
        })
        .long_running()
    }

    /// A library of `ns` defining `schema`, whose CPU kernel waits for `release`.
    fn slow_op(
        ns: &str,
        schema: &str,
        release: std::sync::mpsc::Receiver<()>,
    ) -> (crate::Library, OperatorHandle) {
        let mut lib = crate::Library::new(ns, crate::LibraryKind::Def).expect("a namespace");
        let op = lib.define(schema).expect("defines");
        let kernel = waiting_kernel(std::sync::Mutex::new(release));
        lib.impl_kernel("slow", DispatchKey::CPU, kernel, false)
            .expect("registers");
        (lib, op)
    }

    #[test]
    fn a_long_running_kernel_holds_back_no_replaced_table() {
        let held = retired_while_a_long_call_runs("rcu_churn_a", 2000, |release| {
            let (_lib, op) = slow_op("rcu_long_kernel", "slow(int x) -> int", release);
            let mut stack = vec![IValue::Int(1)];
            op.call_boxed(&mut stack).expect("the call");
            assert_eq!(stack[0].to_int(), Some(7));
        });
        // Other tests of this binary hold a reader for moments, never for 2000 registrations.
        assert!(
            held < 200,
            "{held} retired tables held back by one long call"
        );
    }

    #[test]
    fn a_cpu_fallback_whose_cpu_kernel_runs_long_holds_back_no_replaced_table() {
        let held = retired_while_a_long_call_runs("rcu_churn_b", 2000, |release| {
            crate::native::install_fallback().expect("Native's fallback");
            let (_lib, op) = slow_op("rcu_long_fallback", "slow(Tensor x) -> int", release);
            let x = crate::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
            let typed = op.typed::<(crate::Tensor,), i64>().expect("typed");
            assert_eq!(typed.call((x,)).expect("the call"), 7);
        });
        assert!(
            held < 200,
            "{held} retired tables held back by one long call"
        );
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("demo::add", "demo::add"), 0);
        assert_eq!(edit_distance("demo::ad", "demo::add"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn closest_names_are_near_ones() {
        let names = [
            "demo::add".to_string(),
            "demo::mul".to_string(),
            "zzz::q".to_string(),
        ];
        assert_eq!(
            closest("demo::ad", names.iter()),
            vec!["demo::add".to_string()]
        );
    }
}
