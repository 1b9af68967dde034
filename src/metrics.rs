//! Per-operator fallback counters. Each operator entry owns its counters, so a fallback never
//! looks a counter up by name and two operators can never share one. Snapshots and the report
//! walk the registry; that is the slow path.
//!
//! An operator's counters are kept per thread (`thread_slot.rs`): a thread adds to its own with
//! a plain load and store, where one shared set would cost a locked read-modify-write per
//! counter (about 20 ns a fallback here) and bounce one cache line between threads that fall
//! back at once. A snapshot sums them.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use crossbeam_utils::CachePadded;

use crate::dispatcher::Dispatcher;
use crate::error::Result;
use crate::key::{DispatchKey, DispatchKeySet};
use crate::thread_slot;

/// One set of counts: fallbacks, failures, ticks, bytes to the CPU, bytes from the CPU.
#[derive(Default, Debug)]
struct Counts([AtomicU64; 5]);

impl Counts {
    /// Adds `v`; only the thread that owns this set calls it, so nothing is lost without a
    /// read-modify-write.
    #[inline(always)]
    fn add_owned(&self, v: [u64; 5]) {
        for (c, v) in self.0.iter().zip(v) {
            c.store(c.load(Relaxed).wrapping_add(v), Relaxed);
        }
    }

    /// Adds `v` from any thread.
    fn add_shared(&self, v: [u64; 5]) {
        for (c, v) in self.0.iter().zip(v) {
            if v != 0 {
                c.fetch_add(v, Relaxed);
            }
        }
    }

    fn load(&self) -> [u64; 5] {
        self.0.each_ref().map(|c| c.load(Relaxed))
    }
}

/// The live counters of one operator.
///
/// ```
/// let m = boxfall::metrics::OpMetrics::default();
/// assert_eq!(m.snapshot().fallbacks, 0);
/// ```
#[derive(Default, Debug)]
pub struct OpMetrics {
    /// Per thread index, made at the operator's first fallback.
    per_thread: OnceLock<Box<[CachePadded<Counts>]>>,
    /// For threads without an index.
    shared: CachePadded<Counts>,
    /// The sums at the last reset (counts only grow, so a reset is a new zero).
    zero: [AtomicU64; 5],
    backends: AtomicU64,
    warned: AtomicU64,
}

/// A copy of one operator's counters.
///
/// ```
/// let s = boxfall::metrics::OpStats::default();
/// assert_eq!(s.failures, 0);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpStats {
    /// Calls that went through the CPU fallback (failed ones included).
    pub fallbacks: u64,
    /// Fallback calls that failed (in the kernel or in a copy).
    pub failures: u64,
    /// Nanoseconds spent in the fallback, kernel included.
    pub fallback_ns: u64,
    /// Bytes moved to the CPU.
    pub bytes_to_cpu: u64,
    /// Bytes moved back from the CPU.
    pub bytes_from_cpu: u64,
    /// The backends whose tensors fell back.
    pub backends: DispatchKeySet,
}

impl OpStats {
    /// Adds `other`'s counts to these (the backends are joined).
    ///
    /// ```
    /// use boxfall::metrics::OpStats;
    /// let mut a = OpStats { fallbacks: 1, fallback_ns: 10, ..OpStats::default() };
    /// a.add(&OpStats { fallbacks: 2, failures: 1, ..OpStats::default() });
    /// assert_eq!((a.fallbacks, a.failures, a.fallback_ns), (3, 1, 10));
    /// ```
    pub fn add(&mut self, other: &OpStats) {
        self.fallbacks += other.fallbacks;
        self.failures += other.failures;
        self.fallback_ns += other.fallback_ns;
        self.bytes_to_cpu += other.bytes_to_cpu;
        self.bytes_from_cpu += other.bytes_from_cpu;
        self.backends = self.backends | other.backends;
    }
}

impl OpMetrics {
    /// Records one fallback call of `backend`: `ticks` of [`crate::clock`] spent, bytes moved
    /// each way, and whether it succeeded. The CPU fallback calls it; a backend kernel that
    /// falls back by hand can call it too, so that its fallbacks are counted with the others.
    ///
    /// ```
    /// use boxfall::{clock, DispatchKey, Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_metrics_record", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// let start = clock::ticks();
    /// op.metrics().record(DispatchKey::NATIVE, clock::ticks() - start, 8, 8, true);
    /// op.metrics().record(DispatchKey::NATIVE, 0, 8, 0, false);
    /// let s = op.metrics().snapshot();
    /// assert_eq!((s.fallbacks, s.failures, s.bytes_to_cpu, s.bytes_from_cpu), (2, 1, 16, 8));
    /// assert!(s.backends.contains(DispatchKey::NATIVE));
    /// ```
    pub fn record(&self, backend: DispatchKey, ticks: u64, to_cpu: u64, from_cpu: u64, ok: bool) {
        let v = [1, u64::from(!ok), ticks, to_cpu, from_cpu];
        match thread_slot::current() {
            Some(i) => {
                let all = self.per_thread.get_or_init(|| {
                    (0..thread_slot::SLOTS)
                        .map(|_| CachePadded::new(Counts::default()))
                        .collect()
                });
                all[i].add_owned(v);
            }
            None => self.shared.add_shared(v),
        }
        if self.backends.load(Relaxed) & backend.set().0 == 0 {
            self.backends.fetch_or(backend.set().0, Relaxed);
        }
    }

    /// Marks (operator, backend) as warned; true the first time only.
    pub(crate) fn first_warning(&self, backend: DispatchKey) -> bool {
        let bit = backend.set().0;
        self.warned.load(Relaxed) & bit == 0 && self.warned.fetch_or(bit, Relaxed) & bit == 0
    }

    /// A copy of the counters.
    ///
    /// ```
    /// # use boxfall::{native, DispatchKey, KernelFunction, Library, LibraryKind, Tensor};
    /// # native::install_fallback().unwrap();
    /// # let mut lib = Library::new("doc_snapshot", LibraryKind::Def).unwrap();
    /// let op = lib.define("id(Tensor x) -> Tensor").unwrap();
    /// lib.impl_kernel("id", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| Ok(x)), false).unwrap();
    /// op.typed::<(Tensor,), Tensor>().unwrap().call((native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn()),)).unwrap();
    /// let s = op.metrics().snapshot();
    /// assert_eq!((s.fallbacks, s.failures, s.bytes_to_cpu, s.bytes_from_cpu), (1, 0, 16, 16));
    /// assert!(s.backends.contains(DispatchKey::NATIVE));
    /// ```
    pub fn snapshot(&self) -> OpStats {
        let sums = self.sums();
        let zero = self.zero.each_ref().map(|c| c.load(Relaxed));
        // A reset racing with a snapshot may leave a zero above a sum read on another thread.
        let [fallbacks, failures, ticks, bytes_to_cpu, bytes_from_cpu] =
            std::array::from_fn(|k| sums[k].saturating_sub(zero[k]));
        OpStats {
            fallbacks,
            failures,
            fallback_ns: crate::clock::ticks_to_ns(ticks),
            bytes_to_cpu,
            bytes_from_cpu,
            backends: DispatchKeySet(self.backends.load(Relaxed)),
        }
    }

    /// Every thread's counts added up, since the operator was defined.
    fn sums(&self) -> [u64; 5] {
        let mut sums = self.shared.load();
        for counts in self.per_thread.get().into_iter().flatten() {
            for (s, v) in sums.iter_mut().zip(counts.load()) {
                *s = s.wrapping_add(v);
            }
        }
        sums
    }

    /// Zeroes every counter and forgets the warnings.
    ///
    /// ```
    /// # use boxfall::{metrics::OpStats, native, DispatchKey, KernelFunction, Library, LibraryKind, Tensor};
    /// # native::install_fallback().unwrap();
    /// # let mut lib = Library::new("doc_op_metrics_reset", LibraryKind::Def).unwrap();
    /// let op = lib.define("id(Tensor x) -> Tensor").unwrap();
    /// lib.impl_kernel("id", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| Ok(x)), false).unwrap();
    /// op.typed::<(Tensor,), Tensor>().unwrap().call((native::tensor(ndarray::arr1(&[1.0]).into_dyn()),)).unwrap();
    /// assert_eq!(op.metrics().snapshot().fallbacks, 1);
    /// op.metrics().reset();
    /// assert_eq!(op.metrics().snapshot(), OpStats::default());
    /// ```
    pub fn reset(&self) {
        // Counts are never written by another thread than their owner, so they are not zeroed
        // (a store could lose an owner's add in flight): the current sums become the zero.
        for (z, s) in self.zero.iter().zip(self.sums()) {
            z.store(s, Relaxed);
        }
        self.backends.store(0, Relaxed);
        self.warned.store(0, Relaxed);
    }
}

/// Every operator counted since the last reset, by name: the live entries' counters plus what
/// freed entries (every registration gone) had counted.
fn counted() -> Vec<(String, OpStats)> {
    let mut by_name: std::collections::HashMap<String, OpStats> =
        Dispatcher::retired_stats().into_iter().collect();
    for op in Dispatcher::all_operators() {
        let s = op.metrics().snapshot();
        if s.fallbacks > 0 {
            by_name.entry(op.name().to_string()).or_default().add(&s);
        }
    }
    by_name.into_iter().collect()
}

/// The counters of `name`: its entry's (if it has one) plus what a freed entry of that name
/// had counted.
fn stats_of(name: &str) -> Option<OpStats> {
    let retired = Dispatcher::retired_stats()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, s)| s);
    let live = Dispatcher::lookup(name).map(|op| op.metrics().snapshot());
    match (live, retired) {
        (Some(mut l), Some(r)) => {
            l.add(&r);
            Some(l)
        }
        (l, r) => l.or(r),
    }
}

/// The fallback count of one operator (named as [`op_stats`] takes it), 0 if it never fell
/// back, and 0 too for a name that is no operator: [`op_stats`] tells those apart.
///
/// ```
/// assert_eq!(boxfall::metrics::counter_value("nobody::nothing"), 0);
/// ```
pub fn counter_value(name: &str) -> u64 {
    op_stats(name).map_or(0, |s| s.fallbacks)
}

/// Every operator counted since the last reset, with its count, sorted by name.
///
/// ```
/// let c = boxfall::metrics::counters();
/// assert!(c.iter().all(|(_, n)| *n > 0));
/// ```
pub fn counters() -> Vec<(String, u64)> {
    let mut v: Vec<_> = counted()
        .into_iter()
        .map(|(name, s)| (name, s.fallbacks))
        .collect();
    v.sort();
    v
}

/// The full counters of one operator: `"ns::name.overload"`, or `"ns::name"` for the overload
/// whose name is empty (as everywhere: `"ns::add"` is not `"ns::add.Tensor"`). The operator is
/// one defined now, or one counted since the last reset; a defined operator that never fell
/// back has zeros. Any other name is [`crate::Error::UnknownOperator`], which lists the closest names
/// (the overloads of `ns::name` first).
///
/// ```
/// use boxfall::{metrics::op_stats, Error, Library, LibraryKind};
/// let mut lib = Library::new("doc_op_stats", LibraryKind::Def).unwrap();
/// lib.define("add.Tensor(Tensor self, Tensor other) -> Tensor").unwrap();
/// assert_eq!(op_stats("doc_op_stats::add.Tensor").unwrap().fallbacks, 0);
/// let e = op_stats("doc_op_stats::add").unwrap_err();
/// assert!(matches!(&e, Error::UnknownOperator { suggestions, .. }
///     if suggestions == &["doc_op_stats::add.Tensor".to_string()]));
/// assert_eq!(e.to_string(), "unknown operator 'doc_op_stats::add'; did you mean: doc_op_stats::add.Tensor?");
/// ```
pub fn op_stats(name: &str) -> Result<OpStats> {
    if let Some(s) = stats_of(name) {
        return Ok(s);
    }
    // Counted, but not defined now (a kernel of its outlived its definition).
    match counted().into_iter().find(|(n, _)| n == name) {
        Some((_, s)) => Ok(s),
        None => Dispatcher::find(name).map(|op| op.metrics().snapshot()),
    }
}

/// Every operator counted since the last reset with its full counters, by fallback time.
///
/// ```
/// let all = boxfall::metrics::all_stats();
/// assert!(all.windows(2).all(|w| w[0].1.fallback_ns >= w[1].1.fallback_ns));
/// ```
pub fn all_stats() -> Vec<(String, OpStats)> {
    let mut v = counted();
    v.sort_by(|a, b| b.1.fallback_ns.cmp(&a.1.fallback_ns).then(a.0.cmp(&b.0)));
    v
}

/// Zeroes every operator's counters.
///
/// ```
/// boxfall::metrics::reset();
/// assert!(boxfall::metrics::counters().is_empty());
/// ```
pub fn reset() {
    for op in Dispatcher::all_operators() {
        op.metrics().reset();
    }
    Dispatcher::clear_retired_stats();
}

/// A table for people: operator, backend, count, failures, total ms, mean us, MB moved;
/// operators by fallback time.
///
/// ```
/// let r = boxfall::metrics::report();
/// assert!(r.contains("operator"));
/// ```
pub fn report() -> String {
    let rows = all_stats();
    let width = rows
        .iter()
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(0)
        .max("operator".len());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$}  {:<10} {:>8} {:>6} {:>10} {:>10} {:>9} {:>9}",
        "operator", "backend", "count", "fail", "total ms", "mean us", "MB to", "MB from"
    );
    let _ = writeln!(out, "{}", "-".repeat(width + 70));
    if rows.is_empty() {
        let _ = writeln!(out, "(no operator fell back)");
    }
    let mut total = OpStats::default();
    for (name, s) in &rows {
        let mean_us = s.fallback_ns as f64 / 1e3 / s.fallbacks.max(1) as f64;
        let _ = writeln!(
            out,
            "{:<width$}  {:<10} {:>8} {:>6} {:>10.3} {:>10.2} {:>9.3} {:>9.3}",
            name,
            s.backends.names().join(","),
            s.fallbacks,
            s.failures,
            s.fallback_ns as f64 / 1e6,
            mean_us,
            s.bytes_to_cpu as f64 / 1e6,
            s.bytes_from_cpu as f64 / 1e6,
        );
        total.fallbacks += s.fallbacks;
        total.failures += s.failures;
        total.fallback_ns += s.fallback_ns;
        total.bytes_to_cpu += s.bytes_to_cpu;
        total.bytes_from_cpu += s.bytes_from_cpu;
    }
    if !rows.is_empty() {
        let _ = writeln!(
            out,
            "{:<width$}  {:<10} {:>8} {:>6} {:>10.3} {:>10} {:>9.3} {:>9.3}",
            format!(
                "total ({} operator{})",
                rows.len(),
                if rows.len() == 1 { "" } else { "s" }
            ),
            "",
            total.fallbacks,
            total.failures,
            total.fallback_ns as f64 / 1e6,
            "",
            total.bytes_to_cpu as f64 / 1e6,
            total.bytes_from_cpu as f64 / 1e6,
        );
    }
    out
}
