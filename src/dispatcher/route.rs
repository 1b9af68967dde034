//! The key set of a call and its route: `dispatch_keys`, `DispatchTable::route`, and
//! [`Routed`], what the router gives a caller that runs a kernel its own way.

use std::sync::Arc;

use crate::error::Result;
use crate::ivalue::Stack;
use crate::kernel::{
    DispatchTable, KernelCount, KernelFunction, OperatorHandle, Route, TableEntry, TableFn,
    TensorsFn,
};
use crate::key::{local_keys, with_carried, DispatchKeySet};
use crate::schema::OpSchema;

/// The key set a call dispatches on, from its arguments' keys: the functionality key their
/// backends carry (graph mode's, `key::with_carried`) and this thread's included keys added,
/// its excluded keys removed (c10's `DispatchKeyExtractor`). Every entry point that starts a
/// call computes its keys here, the Python bindings' included; the operator's mask
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
    DispatchKeySet((with_carried(argument_keys).0 | included.0) & !excluded.0)
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
    pub(super) fn routed(&self, keys: DispatchKeySet) -> Option<Routed<'_>> {
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
