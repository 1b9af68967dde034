//! The [`Dispatcher`]'s look-ups: operators by name, namespaces, coverage, and the metrics of
//! every operator.

use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::kernel::{OperatorHandle, Source};
use crate::key::DispatchKey;
use crate::metrics::{OpStats, Snapshot};
use crate::rcu;

use super::registry::{closest, registry, Dispatcher, DEFINITIONS};

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
}
