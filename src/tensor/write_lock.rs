//! A tensor's write lock: what makes a read-modify-write of a device tensor atomic between
//! threads. The CPU fallback of an operator that writes a device tensor reads its values,
//! writes them on the host and writes them back whole; through a view, the view's values go
//! back into its base. Two threads writing two parts of one base (scikit-learn's
//! `dist_matrix[slice_, ...] = ...` from joblib's threads) would each write back the part the
//! other wrote as it was before. The lock is the base's own (made on first use, kept with the
//! tensor): the fallback holds the locks of the bases it writes for the whole call
//! (`hold_writes`), so the second call reads what the first wrote.
//!
//! The lock is re-entrant (a kernel may write the same tensor again through boxfall), taken in
//! one order (by address) where a call writes several (`writes.rs`, which names the tensors),
//! and waited for through the crate's blocking hook (`crate::blocking`), which the Python
//! bindings install to release the GIL: the holder may need it to run its kernel.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

/// A tensor's write lock: its owner, how many times the owner took it, and how many threads
/// wait for it.
#[derive(Default)]
pub(crate) struct WriteLock {
    owner: Mutex<Owner>,
    free: Condvar,
}

#[derive(Default)]
struct Owner {
    thread: Option<ThreadId>,
    times: usize,
    /// The threads waiting: a release with none wakes nobody (`notify_one` is a system call
    /// even then, which made an in-place call through the fallback 18% slower).
    waiting: usize,
}

impl WriteLock {
    fn state(&self) -> MutexGuard<'_, Owner> {
        self.owner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the lock for thread `me`, again if it holds it, else waiting for its holder.
    pub(super) fn acquire(&self, me: ThreadId) {
        {
            let mut s = self.state();
            match s.thread {
                Some(t) if t == me => {
                    s.times += 1;
                    return;
                }
                None => {
                    s.thread = Some(me);
                    s.times = 1;
                    return;
                }
                Some(_) => s.waiting += 1,
            }
        }
        let mut wait = || {
            let mut s = self.state();
            while s.thread.is_some() {
                s = self.free.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            s.thread = Some(me);
            s.times = 1;
            s.waiting -= 1;
        };
        crate::blocking::blocking(&mut wait);
    }

    /// Gives one taking of the lock back; the last lets a waiting thread take it.
    pub(super) fn release(&self) {
        let mut s = self.state();
        s.times = s.times.saturating_sub(1);
        if s.times == 0 {
            s.thread = None;
            let waiting = s.waiting > 0;
            drop(s);
            if waiting {
                self.free.notify_one();
            }
        }
    }
}
