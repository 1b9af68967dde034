//! What serves each key of an operator now, as its table was published: for coverage, for
//! `dispatch_table()`, and for the bindings that ask where data go.

use std::sync::atomic::Ordering;

use crate::kernel::{KernelFunction, OperatorHandle, Route, Source};
use crate::key::{registered_keys, DispatchKey, KeyKind};
use crate::rcu;

impl OperatorHandle {
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

pub(crate) fn policy_of(op: &OperatorHandle) -> u8 {
    op.policy_cell().load(Ordering::Relaxed)
}
