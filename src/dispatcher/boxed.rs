//! The boxed entry points: a call on a stack, routed in one load of the operator's table, runs
//! the entry's boxed call; the router for callers that run a kernel their own way.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ivalue::{IValue, Stack};
use crate::kernel::{DispatchTable, OperatorHandle, Source};
use crate::key::{local_keys, DispatchKey, DispatchKeySet, NUM_KEYS};
use crate::rcu::{self, leave_holding};
use crate::schema::OpSchema;

use super::route::{dispatch_keys, Routed};

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

    /// The router, for callers that run a kernel their own way (the Python bindings): routes a call
    /// on `keys` in one load of the operator's table, as every call is routed
    /// (`DispatchTable::route` on `keys` masked by the operator's fallthroughs), and gives `f` what
    /// serves it ([`Routed`]: the entry's [`Route`](crate::kernel::Route) and what that route
    /// needs). `keys` are a call's keys as [`dispatch_keys`] gives them, or for a redispatch the
    /// keys below the current one. None if the operator is not defined.
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
    pub(super) fn run(
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
    pub(super) fn nothing_serves(
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
