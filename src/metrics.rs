//! Per-operator fallback counters. Each operator entry owns its counters (atomics on their own
//! cache line), so a fallback never looks a counter up by name and two operators can never
//! share one. Snapshots and the report walk the registry; that is the slow path.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::dispatcher::{Dispatcher, OperatorHandle};
use crate::key::{DispatchKey, DispatchKeySet};

/// The live counters of one operator.
///
/// ```
/// let m = boxfall::metrics::OpMetrics::default();
/// assert_eq!(m.snapshot().fallbacks, 0);
/// ```
#[derive(Default, Debug)]
pub struct OpMetrics {
    fallbacks: AtomicU64,
    failures: AtomicU64,
    /// In [`crate::clock`] ticks, converted when read.
    fallback_ticks: AtomicU64,
    bytes_to_cpu: AtomicU64,
    bytes_from_cpu: AtomicU64,
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

impl OpMetrics {
    /// Records one fallback call of `backend`.
    pub(crate) fn record(
        &self,
        backend: DispatchKey,
        ticks: u64,
        to_cpu: u64,
        from_cpu: u64,
        ok: bool,
    ) {
        self.fallbacks.fetch_add(1, Relaxed);
        if !ok {
            self.failures.fetch_add(1, Relaxed);
        }
        self.fallback_ticks.fetch_add(ticks, Relaxed);
        self.bytes_to_cpu.fetch_add(to_cpu, Relaxed);
        self.bytes_from_cpu.fetch_add(from_cpu, Relaxed);
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
        OpStats {
            fallbacks: self.fallbacks.load(Relaxed),
            failures: self.failures.load(Relaxed),
            fallback_ns: crate::clock::ticks_to_ns(self.fallback_ticks.load(Relaxed)),
            bytes_to_cpu: self.bytes_to_cpu.load(Relaxed),
            bytes_from_cpu: self.bytes_from_cpu.load(Relaxed),
            backends: DispatchKeySet(self.backends.load(Relaxed)),
        }
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
        for c in [
            &self.fallbacks,
            &self.failures,
            &self.fallback_ticks,
            &self.bytes_to_cpu,
            &self.bytes_from_cpu,
            &self.backends,
            &self.warned,
        ] {
            c.store(0, Relaxed);
        }
    }
}

fn counted() -> Vec<(OperatorHandle, OpStats)> {
    Dispatcher::all_operators()
        .into_iter()
        .map(|op| {
            let s = op.metrics().snapshot();
            (op, s)
        })
        .filter(|(_, s)| s.fallbacks > 0)
        .collect()
}

/// The fallback count of one operator (`"ns::name"` or `"ns::name.overload"`), 0 if none.
///
/// ```
/// assert_eq!(boxfall::metrics::counter_value("nobody::nothing"), 0);
/// ```
pub fn counter_value(name: &str) -> u64 {
    Dispatcher::lookup(name).map_or(0, |op| op.metrics().snapshot().fallbacks)
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
        .map(|(op, s)| (op.name().to_string(), s.fallbacks))
        .collect();
    v.sort();
    v
}

/// The full counters of one operator, if it exists.
///
/// ```
/// assert!(boxfall::metrics::op_stats("nobody::nothing").is_none());
/// ```
pub fn op_stats(name: &str) -> Option<OpStats> {
    Dispatcher::lookup(name).map(|op| op.metrics().snapshot())
}

/// Every operator counted since the last reset with its full counters, by fallback time.
///
/// ```
/// let all = boxfall::metrics::all_stats();
/// assert!(all.windows(2).all(|w| w[0].1.fallback_ns >= w[1].1.fallback_ns));
/// ```
pub fn all_stats() -> Vec<(String, OpStats)> {
    let mut v: Vec<_> = counted()
        .into_iter()
        .map(|(op, s)| (op.name().to_string(), s))
        .collect();
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
