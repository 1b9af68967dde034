//! Per-operator fallback counters. Each operator entry owns its counters, one set per backend
//! found by the key's index, so a fallback never looks a counter up by name and two operators
//! (or two backends of one operator) never share one. This module knows no registry: the
//! dispatcher, which owns the list of operators, walks it and gathers each entry's counters
//! into a [`Snapshot`] (`Dispatcher::metrics`, `Dispatcher::op_stats`); that is the slow path.
//!
//! A fallback counts its calls, its failures, the bytes moved each way and its time: whole, and
//! split at the fallback's own step boundaries into moving to the CPU, the CPU kernel, and
//! moving back (writing back included), with the crate's clock (`clock.rs`, ticks converted
//! when read).
//!
//! An operator's counters are kept per thread (`thread_slot.rs`): a thread adds to its own with
//! a plain load and store, where one shared set would cost a locked read-modify-write per
//! counter (about 20 ns a fallback here) and bounce one cache line between threads that fall
//! back at once. A snapshot sums them into the figures of `metrics/figures.rs` (`Figures`,
//! `OpStats`).

use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Acquire, Ordering::Relaxed};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use crate::key::{DispatchKey, NUM_KEYS};
use crate::thread_slot;

mod figures;
mod profile;
mod report;
mod snapshot;
mod user;

pub use figures::{Failure, Figures, OpStats, StepTicks};
pub use profile::{profile_begin, profile_end, profiling};
pub use report::{ReportOptions, ReportSort};
pub use snapshot::Snapshot;
pub use user::{
    record_user_transfer, reset_user_transfers, user_transfers, Direction, UserTransfers,
};

thread_local! {
    /// Whether this thread's calls are counted (see [`set_counting`]).
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Turns the counting of this thread's calls on or off, and returns whether it was on. Off,
/// nothing the thread does is counted in the operators' figures (fallbacks, failures, kernel
/// calls, narrowed results) nor in the user's transfers: a graph compiler turns it off while it
/// traces a graph's program, whose calls of kernels on traced values are not the program's
/// runs (a kernel handing a traced call to the CPU fallback fails there, and the program runs
/// that node on the host, counted when it runs). A reader of the figures sees no difference
/// but in what is counted.
///
/// ```
/// use boxfall::metrics::{counting, set_counting};
/// assert!(counting());
/// let was = set_counting(false);
/// assert!(was && !counting());
/// set_counting(was);
/// assert!(counting());
/// ```
pub fn set_counting(on: bool) -> bool {
    COUNTING.with(|c| c.replace(on))
}

/// Whether this thread's calls are counted ([`set_counting`]).
#[inline(always)]
pub fn counting() -> bool {
    COUNTING.with(std::cell::Cell::get)
}

/// Ticks of [`crate::clock`] in `ns` nanoseconds, at the rate [`crate::clock::ticks_to_ns`]
/// converts at: for a time measured by another clock (a host callback timed in Python) that
/// is counted with the crate's.
///
/// ```
/// let t = boxfall::metrics::ticks_of_ns(1_000_000);
/// let back = boxfall::clock::ticks_to_ns(t);
/// assert!((990_000..=1_010_000).contains(&back), "{back}");
/// ```
pub fn ticks_of_ns(ns: u64) -> u64 {
    const SPAN: u64 = 1 << 30;
    let per_span = crate::clock::ticks_to_ns(SPAN).max(1);
    (u128::from(ns) * u128::from(SPAN) / u128::from(per_span)) as u64
}

/// How many figures one set of counts holds (`Figures` in this order).
const N: usize = 8;
/// Their places: the calls, the failed calls, the clock ticks of the whole fallback and of its
/// three steps, and the bytes moved each way.
const FALLBACKS: usize = 0;
const FAILURES: usize = 1;
const TICKS: usize = 2;
const TO_CPU: usize = 3;
const KERNEL: usize = 4;
const FROM_CPU: usize = 5;
const BYTES_TO: usize = 6;
const BYTES_FROM: usize = 7;

/// One set of counts (64 bytes: one cache line).
#[derive(Default, Debug)]
struct Counts([AtomicU64; N]);

impl Counts {
    /// Adds `v`; only the thread that owns this set calls it, so nothing is lost without a
    /// read-modify-write.
    #[inline(always)]
    fn add_owned(&self, v: [u64; N]) {
        for (c, v) in self.0.iter().zip(v) {
            c.store(c.load(Relaxed).wrapping_add(v), Relaxed);
        }
    }

    /// Adds `v` from any thread.
    fn add_shared(&self, v: [u64; N]) {
        for (c, v) in self.0.iter().zip(v) {
            if v != 0 {
                c.fetch_add(v, Relaxed);
            }
        }
    }

    fn load(&self) -> [u64; N] {
        self.0.each_ref().map(|c| c.load(Relaxed))
    }
}

/// The counts of one (operator, backend): one set per thread index, one for threads without
/// an index, and the sums at the last reset (counts only grow, so a reset is a new zero).
/// Made at the first fallback or backend kernel call of the pair.
#[derive(Debug)]
struct KeyCounts {
    per_thread: [CachePadded<Counts>; thread_slot::SLOTS],
    shared: CachePadded<Counts>,
    zero: [AtomicU64; N],
    /// The backend's own kernels of the operator: calls, and clock ticks of the calls made
    /// while profiling; shared atomics, as a backend kernel that is counted is one written in
    /// Python (microseconds a call, next to which a locked add is noise). Then the results
    /// the backend narrowed (a 64-bit dtype its device lacks made 32-bit: rare, and as cheap
    /// to count here).
    kernels: CachePadded<[AtomicU64; 3]>,
    /// `kernels` at the last reset.
    kernels_zero: [AtomicU64; 3],
    /// The pair's last failed fallback (locked only when one fails, and to read it).
    last_failure: Mutex<Option<Failure>>,
}

impl Default for KeyCounts {
    fn default() -> KeyCounts {
        KeyCounts {
            per_thread: std::array::from_fn(|_| CachePadded::default()),
            shared: CachePadded::default(),
            zero: Default::default(),
            kernels: CachePadded::default(),
            kernels_zero: Default::default(),
            last_failure: Mutex::new(None),
        }
    }
}

impl KeyCounts {
    /// Every thread's counts added up, since the pair's first fallback.
    fn sums(&self) -> [u64; N] {
        let mut sums = self.shared.load();
        for counts in &self.per_thread {
            for (s, v) in sums.iter_mut().zip(counts.load()) {
                *s = s.wrapping_add(v);
            }
        }
        sums
    }
}

/// The live counters of one operator, per backend: a fallback finds its backend's counts by
/// the key's index, with no look-up by name and no lock.
///
/// ```
/// let m = boxfall::metrics::OpMetrics::default();
/// assert_eq!(m.snapshot().fallbacks, 0);
/// ```
#[derive(Debug)]
pub struct OpMetrics {
    /// Per key index: null until that key's first fallback, then a `Box<KeyCounts>` leaked
    /// into the pointer and freed by `drop`.
    by_key: [AtomicPtr<KeyCounts>; NUM_KEYS],
    warned: AtomicU64,
    /// The last failed fallback's error (locked only when a fallback fails, and to read it).
    last_failure: Mutex<Option<Failure>>,
}

impl Default for OpMetrics {
    fn default() -> OpMetrics {
        OpMetrics {
            by_key: [const { AtomicPtr::new(null_mut()) }; NUM_KEYS],
            warned: AtomicU64::new(0),
            last_failure: Mutex::new(None),
        }
    }
}

impl Drop for OpMetrics {
    fn drop(&mut self) {
        for p in &mut self.by_key {
            let p = *p.get_mut();
            if !p.is_null() {
                // SAFETY: a non-null pointer here came from `Box::into_raw` in `counts_of`, is
                // freed nowhere else, and `&mut self` means no reference to it is alive.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

impl Figures {
    /// From counted sums (in ticks), converted at one rate; the whole is made at least the sum
    /// of its steps (a reset racing with a snapshot, or a clock read out of order between
    /// cores, could leave it short).
    fn from_counts(c: [u64; N], kernels: [u64; 3]) -> Figures {
        let [fallback_ns, to_cpu_ns, kernel_ns, from_cpu_ns] =
            crate::clock::ticks_to_ns_all([c[TICKS], c[TO_CPU], c[KERNEL], c[FROM_CPU]]);
        let [kernel_call_ns] = crate::clock::ticks_to_ns_all([kernels[1]]);
        let steps = to_cpu_ns
            .saturating_add(kernel_ns)
            .saturating_add(from_cpu_ns);
        Figures {
            fallbacks: c[FALLBACKS],
            failures: c[FAILURES],
            fallback_ns: fallback_ns.max(steps),
            to_cpu_ns,
            kernel_ns,
            from_cpu_ns,
            bytes_to_cpu: c[BYTES_TO],
            bytes_from_cpu: c[BYTES_FROM],
            kernel_calls: kernels[0],
            kernel_call_ns,
            narrowed: kernels[2],
        }
    }
}

impl OpMetrics {
    /// Records one fallback call of `backend`: `ticks` of [`crate::clock`] spent, bytes moved
    /// each way, and whether it succeeded. A backend kernel that falls back by hand can call
    /// it, so that its fallbacks are counted with the others; the time is counted as the
    /// whole fallback's, with no split into steps ([`record_steps`](Self::record_steps) has one).
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
        let t = StepTicks {
            total: ticks,
            ..StepTicks::default()
        };
        self.record_steps(backend, t, to_cpu, from_cpu, ok);
    }

    /// Records one fallback call of `backend`, with its time split into steps (ticks of
    /// [`crate::clock`]; the steps should add up to at most the whole, and the figures read
    /// back always do).
    ///
    /// ```
    /// use boxfall::{metrics::StepTicks, DispatchKey, Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_metrics_record_steps", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// let t = StepTicks { total: 1000, to_cpu: 300, kernel: 400, from_cpu: 200 };
    /// op.metrics().record_steps(DispatchKey::NATIVE, t, 8, 8, true);
    /// let f = *op.metrics().snapshot().backend(DispatchKey::NATIVE).unwrap();
    /// assert_eq!(f.fallbacks, 1);
    /// assert!(f.to_cpu_ns + f.kernel_ns + f.from_cpu_ns <= f.fallback_ns);
    /// ```
    #[inline(always)]
    pub fn record_steps(
        &self,
        backend: DispatchKey,
        t: StepTicks,
        to_cpu: u64,
        from_cpu: u64,
        ok: bool,
    ) {
        if !counting() {
            return;
        }
        let v = [
            1,
            u64::from(!ok),
            t.total,
            t.to_cpu,
            t.kernel,
            t.from_cpu,
            to_cpu,
            from_cpu,
        ];
        let counts = self.counts_of(backend);
        match thread_slot::current() {
            Some(i) => counts.per_thread[i].add_owned(v),
            None => counts.shared.add_shared(v),
        }
    }

    /// Counts one call of `backend`'s own kernel of the operator (not the fallback's), and
    /// its clock ticks where it was timed (while [`profiling`]; else 0).
    ///
    /// ```
    /// use boxfall::{DispatchKey, Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_metrics_kernel_call", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// op.metrics().record_kernel_call(DispatchKey::NATIVE, 0);
    /// let s = op.metrics().snapshot();
    /// assert_eq!((s.kernel_calls, s.fallbacks), (1, 0));
    /// ```
    pub fn record_kernel_call(&self, backend: DispatchKey, ticks: u64) {
        if !counting() {
            return;
        }
        let k = &self.counts_of(backend).kernels;
        k[0].fetch_add(1, Relaxed);
        if ticks > 0 {
            k[1].fetch_add(ticks, Relaxed);
        }
    }

    /// Counts one result of the operator that `backend` narrowed (a 64-bit dtype its device
    /// lacks given as the 32-bit one of its kind); true for the first since the last reset
    /// (the one to warn of).
    ///
    /// ```
    /// use boxfall::{DispatchKey, Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_metrics_narrowed", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert!(op.metrics().record_narrowed(DispatchKey::NATIVE));
    /// assert!(!op.metrics().record_narrowed(DispatchKey::NATIVE));
    /// assert_eq!(op.metrics().snapshot().narrowed, 2);
    /// ```
    pub fn record_narrowed(&self, backend: DispatchKey) -> bool {
        if !counting() {
            return false;
        }
        let counts = self.counts_of(backend);
        counts.kernels[2].fetch_add(1, Relaxed) == counts.kernels_zero[2].load(Relaxed)
    }

    /// Keeps `e` as the last failure of (the operator, `backend`) and of the operator (a
    /// fallback that failed or was refused), as the figures are kept: per backend, and for
    /// the operator as a whole.
    ///
    /// ```
    /// use boxfall::{DispatchKey, Error, Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_metrics_failure", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// op.metrics().record(DispatchKey::NATIVE, 0, 0, 0, false);
    /// op.metrics().record_failure(DispatchKey::NATIVE, &Error::Fallback("refused".into()));
    /// let s = op.metrics().snapshot();
    /// assert_eq!(s.last_failure_of(DispatchKey::NATIVE).unwrap().message, "refused");
    /// assert_eq!(s.last_failure.unwrap().message, "refused");
    /// ```
    #[cold]
    pub fn record_failure(&self, backend: DispatchKey, e: &crate::Error) {
        if !counting() {
            return;
        }
        let f = Failure::of(e);
        *self
            .counts_of(backend)
            .last_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(f.clone());
        *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// The counts of `key`, made at its first fallback.
    #[inline(always)]
    fn counts_of(&self, key: DispatchKey) -> &KeyCounts {
        let p = self.by_key[key.index()].load(Acquire);
        if p.is_null() {
            return self.first_counts(key);
        }
        // SAFETY: a non-null pointer is a `Box<KeyCounts>` published by `first_counts` (the
        // Acquire load sees it made) and freed only when `self` is dropped, which the borrow
        // of `self` rules out for the reference's life.
        unsafe { &*p }
    }

    #[cold]
    #[inline(never)]
    fn first_counts(&self, key: DispatchKey) -> &KeyCounts {
        let slot = &self.by_key[key.index()];
        let new = Box::into_raw(Box::<KeyCounts>::default());
        let p = match slot.compare_exchange(
            null_mut(),
            new,
            std::sync::atomic::Ordering::AcqRel,
            Acquire,
        ) {
            Ok(_) => new,
            Err(theirs) => {
                // SAFETY: `new` was never published, so this is its only owner.
                drop(unsafe { Box::from_raw(new) });
                theirs
            }
        };
        // SAFETY: as in `counts_of`.
        unsafe { &*p }
    }

    /// The counts made so far, with their keys.
    fn made(&self) -> impl Iterator<Item = (DispatchKey, &KeyCounts)> {
        self.by_key.iter().enumerate().filter_map(|(i, slot)| {
            let p = slot.load(Acquire);
            let key = DispatchKey::from_index(i)?;
            // SAFETY: as in `counts_of`.
            (!p.is_null()).then(|| (key, unsafe { &*p }))
        })
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
    /// assert_eq!(s.backend(DispatchKey::NATIVE).unwrap().fallbacks, 1);
    /// ```
    pub fn snapshot(&self) -> OpStats {
        let last_failures = self
            .made()
            .filter_map(|(key, counts)| {
                let f = counts
                    .last_failure
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                f.map(|f| (key, f))
            })
            .collect();
        let per_backend = self
            .made()
            .filter_map(|(key, counts)| {
                let sums = counts.sums();
                let zero = counts.zero.each_ref().map(|c| c.load(Relaxed));
                // A reset racing with a snapshot may leave a zero above a sum read on another
                // thread.
                let c: [u64; N] = std::array::from_fn(|k| sums[k].saturating_sub(zero[k]));
                let kernels: [u64; 3] = std::array::from_fn(|k| {
                    let v = counts.kernels[k].load(Relaxed);
                    v.saturating_sub(counts.kernels_zero[k].load(Relaxed))
                });
                (c[FALLBACKS] > 0 || kernels[0] > 0 || kernels[2] > 0)
                    .then(|| (key, Figures::from_counts(c, kernels)))
            })
            .collect();
        let mut s = OpStats::from_backends(per_backend);
        s.last_failures = last_failures;
        s.last_failure = self
            .last_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        s
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
        for (_, counts) in self.made() {
            for (z, s) in counts.zero.iter().zip(counts.sums()) {
                z.store(s, Relaxed);
            }
            for (z, k) in counts.kernels_zero.iter().zip(counts.kernels.iter()) {
                z.store(k.load(Relaxed), Relaxed);
            }
            *counts
                .last_failure
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = None;
        }
        *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.warned.store(0, Relaxed);
    }
}
