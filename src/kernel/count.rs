//! Counting a backend's own kernel: the one place that counts and times its calls in the
//! operator's `kernel_calls`, for the dispatcher's bound calls and the bindings' own ways.

use crate::key::DispatchKey;

use super::types::{KernelCall, KernelCount, OperatorHandle};

impl KernelCount {
    /// A call that is not counted.
    pub const NONE: KernelCount = KernelCount(None);

    /// The backend whose own kernel runs (None: the call is not counted).
    ///
    /// ```
    /// assert_eq!(boxfall::dispatcher::KernelCount::NONE.backend(), None);
    /// ```
    #[inline(always)]
    pub fn backend(self) -> Option<DispatchKey> {
        self.0
    }

    /// Runs `call`, the kernel's call, counting it (and timing it while profiling) if it is
    /// counted.
    ///
    /// ```
    /// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_kernel_count_run", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::NATIVE, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x)), false).unwrap();
    /// let count = op.route(DispatchKey::NATIVE.set(), |r| r.counted()).unwrap();
    /// assert_eq!(count.run(&op, || 7), 7);
    /// assert_eq!(op.metrics().snapshot().kernel_calls, 1);
    /// ```
    #[inline(always)]
    pub fn run<T>(self, op: &OperatorHandle, call: impl FnOnce() -> T) -> T {
        match self.0 {
            None => call(),
            Some(key) => count_call(op, key, call),
        }
    }

    /// Starts a counted call whose end the caller marks ([`KernelCall::end`]): for a caller
    /// that counts a call only once it knows the kernel ran it.
    ///
    /// ```
    /// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_kernel_count_begin", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::NATIVE, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x)), false).unwrap();
    /// let call = op.route(DispatchKey::NATIVE.set(), |r| r.counted()).unwrap().begin();
    /// call.end(&op);
    /// assert_eq!(op.metrics().snapshot().kernel_calls, 1);
    /// ```
    #[inline(always)]
    pub fn begin(self) -> KernelCall {
        match self.0 {
            None => KernelCall {
                key: None,
                start: 0,
            },
            Some(key) => KernelCall::started(key),
        }
    }
}

impl KernelCall {
    #[cold]
    #[inline(never)]
    fn started(key: DispatchKey) -> KernelCall {
        let start = if crate::metrics::profiling() {
            crate::clock::ticks().max(1)
        } else {
            0
        };
        KernelCall {
            key: Some(key),
            start,
        }
    }

    /// Counts the call (and its time, if it was timed) in `op`'s `kernel_calls`.
    ///
    /// ```
    /// let mut lib = boxfall::Library::new("doc_kernel_call_end", boxfall::LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// boxfall::dispatcher::KernelCount::NONE.begin().end(&op);
    /// ```
    #[inline(always)]
    pub fn end(self, op: &OperatorHandle) {
        if let Some(key) = self.key {
            record_call(op, key, self.start);
        }
    }
}

#[cold]
#[inline(never)]
fn record_call(op: &OperatorHandle, key: DispatchKey, start: u64) {
    let ticks = if start == 0 {
        0
    } else {
        crate::clock::ticks().saturating_sub(start).max(1)
    };
    op.metrics().record_kernel_call(key, ticks);
}

/// `call`, a call of `key`'s own kernel of `op`, counted. Out of line and cold: most calls
/// run no backend's own kernel, and theirs pay only the test of the entry's flag.
#[cold]
#[inline(never)]
fn count_call<T>(op: &OperatorHandle, key: DispatchKey, call: impl FnOnce() -> T) -> T {
    let c = KernelCall::started(key);
    let out = call();
    c.end(op);
    out
}

impl KernelCount {
    /// `call` counted as [`run`](Self::run) counts it, for the dispatcher's calls of a
    /// backend's own kernel: unless a profile is open, counted before it runs by a function
    /// that takes no closure, so that the arguments and the result are not moved through
    /// `count_call`'s frames.
    #[inline(always)]
    pub(crate) fn run_then<T>(self, op: &OperatorHandle, call: impl FnOnce() -> T) -> T {
        match self.0 {
            Some(key) if crate::metrics::profiling() => count_call(op, key, call),
            Some(key) => {
                count_untimed(op, key);
                call()
            }
            None => call(),
        }
    }
}

/// One untimed call of `key`'s own kernel of `op` (`KernelCount::run_then`).
#[inline(never)]
fn count_untimed(op: &OperatorHandle, key: DispatchKey) {
    op.metrics().record_kernel_call(key, 0);
}
