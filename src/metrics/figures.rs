//! The figures the counters are read out as: one backend's ([`Figures`]), an operator's
//! ([`OpStats`]: the totals over its backends, and each backend's own), the ticks of a
//! fallback's steps ([`StepTicks`]) and its last failure ([`Failure`]).

use crate::key::{DispatchKey, DispatchKeySet};

/// Declares the figures once: the fields of [`Figures`], the same fields at the head of
/// [`OpStats`] (an operator's totals), and the functions that go between the two field by
/// field, so that a new figure is one field here and nothing else to keep in step.
macro_rules! with_figures {
    (
        figures {
            $($(#[$meta:meta])* $figure:ident,)*
        }

        $(#[$figures_meta:meta])*
        pub struct Figures;

        $(#[$stats_meta:meta])*
        pub struct OpStats {
            $($(#[$more_meta:meta])* pub $more:ident: $more_ty:ty,)*
        }
    ) => {
        $(#[$figures_meta])*
        pub struct Figures {
            $($(#[$meta])* pub $figure: u64,)*
        }

        $(#[$stats_meta])*
        pub struct OpStats {
            $($(#[$meta])* pub $figure: u64,)*
            $($(#[$more_meta])* pub $more: $more_ty,)*
        }

        impl Figures {
            /// Adds `other` to these.
            ///
            /// ```
            /// use boxfall::metrics::Figures;
            /// let mut a = Figures { fallbacks: 1, kernel_ns: 5, ..Figures::default() };
            /// a.add(&Figures { fallbacks: 2, kernel_ns: 1, ..Figures::default() });
            /// assert_eq!((a.fallbacks, a.kernel_ns), (3, 6));
            /// ```
            pub fn add(&mut self, other: &Figures) {
                $(self.$figure += other.$figure;)*
            }
        }

        impl OpStats {
            /// The totals, as one set of figures.
            ///
            /// ```
            /// let s = boxfall::metrics::OpStats { fallbacks: 3, ..Default::default() };
            /// assert_eq!(s.totals().fallbacks, 3);
            /// ```
            pub fn totals(&self) -> Figures {
                Figures {
                    $($figure: self.$figure,)*
                }
            }

            fn set_totals(&mut self, f: Figures) {
                $(self.$figure = f.$figure;)*
            }
        }
    };
}

with_figures! {
    figures {
        /// Calls that reached the CPU fallback, refused and failed ones included.
        fallbacks,
        /// Calls that the fallback refused (the fallback policy, a view operator, a key without
        /// transfer hooks) or that failed in a step (a hook, a missing or failing CPU kernel).
        failures,
        /// Nanoseconds spent in the whole fallback.
        fallback_ns,
        /// Nanoseconds moving arguments to the CPU. A step in which every argument is lent, not
        /// copied (Native's host memory, to a Python kernel or through the typed fallback), is
        /// not timed and adds 0: a clock read would cost more than its bookkeeping, which counts
        /// in `kernel_ns`.
        to_cpu_ns,
        /// Nanoseconds in the CPU kernel.
        kernel_ns,
        /// Nanoseconds moving results back and writing mutated arguments back. Results that the
        /// backend takes as they are (Native's host memory, through the typed fallback:
        /// `Backend::adopt_from_cpu`) are not timed, as lent arguments are not.
        from_cpu_ns,
        /// Bytes moved to the CPU.
        bytes_to_cpu,
        /// Bytes moved back from the CPU (results and written-back arguments).
        bytes_from_cpu,
        /// Calls of the backend's own kernel of the operator (not the fallback's).
        kernel_calls,
        /// Nanoseconds in those calls, counted only while profiling
        /// ([`profile_begin`](super::profile_begin)).
        kernel_call_ns,
        /// Results that the backend narrowed: a 64-bit dtype its device lacks, asked for or made
        /// by a CPU kernel, given as the 32-bit one of its kind (`register_backend(narrow=True)`).
        narrowed,
    }

    /// The figures of fallbacks: of one (operator, backend), or an operator's totals.
    /// `to_cpu_ns + kernel_ns + from_cpu_ns <= fallback_ns`: the rest is the fallback's own work
    /// between the steps.
    ///
    /// ```
    /// let f = boxfall::metrics::Figures::default();
    /// assert_eq!(f.fallbacks, 0);
    /// assert!(f.to_cpu_ns + f.kernel_ns + f.from_cpu_ns <= f.fallback_ns);
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Figures;

    /// A copy of one operator's counters: the totals over its backends (the fields of
    /// [`Figures`], each the sum of the backends' own), and each backend's own.
    ///
    /// ```
    /// let s = boxfall::metrics::OpStats::default();
    /// assert_eq!(s.failures, 0);
    /// assert!(s.per_backend.is_empty());
    /// ```
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct OpStats {
        /// The last failed fallback's error, if one failed since the last reset, whichever
        /// backend it was on.
        pub last_failure: Option<Failure>,
        /// Each backend's own last failed fallback, by key index (only backends with one).
        pub last_failures: Vec<(DispatchKey, Failure)>,
        /// The backends whose tensors fell back, or ran a kernel of the backend's own that was
        /// counted.
        pub backends: DispatchKeySet,
        /// Each of those backends' own figures, by key index.
        pub per_backend: Vec<(DispatchKey, Figures)>,
    }
}

/// The last failure of an operator's fallback: the error's kind (the name of its
/// [`Error`](crate::Error) variant, `"Foreign"` for an error raised by a foreign kernel or
/// hook) and its message.
///
/// ```
/// let f = boxfall::metrics::Failure { kind: "Fallback".into(), message: "refused".into() };
/// assert_eq!(f.kind, "Fallback");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    /// The [`Error`](crate::Error) variant's name.
    pub kind: String,
    /// The error's text.
    pub message: String,
}

impl Failure {
    /// The failure an error describes.
    ///
    /// ```
    /// let e = boxfall::Error::Fallback("no".into());
    /// assert_eq!(boxfall::metrics::Failure::of(&e).kind, "Fallback");
    /// ```
    pub fn of(e: &crate::Error) -> Failure {
        use crate::Error as E;
        let kind = match e {
            E::Schema(_) => "Schema",
            E::Registration(_) => "Registration",
            E::UnknownOperator { .. } => "UnknownOperator",
            E::UnknownNamespace { .. } => "UnknownNamespace",
            E::UnknownKey { .. } => "UnknownKey",
            E::NoKernel { .. } => "NoKernel",
            E::Argument { .. } => "Argument",
            E::Fallback(_) => "Fallback",
            E::Kernel { .. } => "Kernel",
            E::OutOfMemory { .. } => "OutOfMemory",
            E::DType { .. } | E::DeviceDType { .. } => "DType",
            E::Foreign { .. } => "Foreign",
        };
        Failure {
            kind: kind.to_string(),
            message: e.to_string(),
        }
    }
}

/// The clock ticks of one fallback call, whole and per step (see
/// [`OpMetrics::record_steps`](super::OpMetrics::record_steps)).
///
/// ```
/// let t = boxfall::metrics::StepTicks { total: 10, to_cpu: 3, kernel: 4, from_cpu: 2 };
/// assert!(t.to_cpu + t.kernel + t.from_cpu <= t.total);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTicks {
    /// The whole fallback.
    pub total: u64,
    /// Moving the arguments to the CPU (step 1).
    pub to_cpu: u64,
    /// The CPU kernel (step 2).
    pub kernel: u64,
    /// Moving the results back and writing mutated arguments back (steps 3 and 4).
    pub from_cpu: u64,
}

impl OpStats {
    /// Adds `other`'s counts to these, backend by backend.
    ///
    /// ```
    /// use boxfall::{metrics::{Figures, OpStats}, DispatchKey};
    /// let mut a = OpStats { fallbacks: 1, fallback_ns: 10, ..OpStats::default() };
    /// a.add(&OpStats { fallbacks: 2, failures: 1, ..OpStats::default() });
    /// assert_eq!((a.fallbacks, a.failures, a.fallback_ns), (3, 1, 10));
    ///
    /// let one = Figures { fallbacks: 1, ..Figures::default() };
    /// let mut s = OpStats::from_backends(vec![(DispatchKey::NATIVE, one)]);
    /// s.add(&s.clone());
    /// assert_eq!(s.backend(DispatchKey::NATIVE).unwrap().fallbacks, 2);
    /// ```
    pub fn add(&mut self, other: &OpStats) {
        let mut totals = self.totals();
        totals.add(&other.totals());
        self.set_totals(totals);
        if other.last_failure.is_some() {
            self.last_failure.clone_from(&other.last_failure);
        }
        for (key, f) in &other.last_failures {
            match self.last_failures.iter_mut().find(|(k, _)| k == key) {
                Some((_, mine)) => mine.clone_from(f),
                None => self.last_failures.push((*key, f.clone())),
            }
        }
        self.last_failures.sort_by_key(|(k, _)| k.index());
        self.backends = self.backends | other.backends;
        for (key, f) in &other.per_backend {
            match self.per_backend.iter_mut().find(|(k, _)| k == key) {
                Some((_, mine)) => mine.add(f),
                None => self.per_backend.push((*key, *f)),
            }
        }
        self.per_backend.sort_by_key(|(k, _)| k.index());
    }

    /// The stats of these backends' figures: their sums, and them.
    ///
    /// ```
    /// use boxfall::{metrics::{Figures, OpStats}, DispatchKey};
    /// let f = Figures { fallbacks: 2, bytes_to_cpu: 16, ..Figures::default() };
    /// let s = OpStats::from_backends(vec![(DispatchKey::NATIVE, f)]);
    /// assert_eq!((s.fallbacks, s.bytes_to_cpu), (2, 16));
    /// assert_eq!(s.backends, DispatchKey::NATIVE.set());
    /// ```
    pub fn from_backends(mut per_backend: Vec<(DispatchKey, Figures)>) -> OpStats {
        per_backend.sort_by_key(|(k, _)| k.index());
        let mut s = OpStats::default();
        let mut totals = Figures::default();
        for (key, f) in &per_backend {
            totals.add(f);
            s.backends = s.backends | key.set();
        }
        s.set_totals(totals);
        s.per_backend = per_backend;
        s
    }

    /// One backend's last failed fallback, if one failed since the last reset.
    ///
    /// ```
    /// use boxfall::{metrics::{Failure, OpStats}, DispatchKey};
    /// let f = Failure { kind: "Fallback".into(), message: "no".into() };
    /// let s = OpStats { last_failures: vec![(DispatchKey::NATIVE, f.clone())], ..OpStats::default() };
    /// assert_eq!(s.last_failure_of(DispatchKey::NATIVE), Some(&f));
    /// assert_eq!(OpStats::default().last_failure_of(DispatchKey::NATIVE), None);
    /// ```
    pub fn last_failure_of(&self, key: DispatchKey) -> Option<&Failure> {
        self.last_failures
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, f)| f)
    }

    /// One backend's figures, if its tensors fell back.
    ///
    /// ```
    /// use boxfall::{metrics::OpStats, DispatchKey};
    /// assert!(OpStats::default().backend(DispatchKey::NATIVE).is_none());
    /// ```
    pub fn backend(&self, key: DispatchKey) -> Option<&Figures> {
        self.per_backend
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, f)| f)
    }
}
