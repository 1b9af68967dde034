//! A tensor's write lock: what makes a read-modify-write of a device tensor atomic between
//! threads. The CPU fallback of an operator that writes a device tensor reads its values,
//! writes them on the host and writes them back whole; through a view, the view's values go
//! back into its base. Two threads writing two parts of one base (scikit-learn's
//! `dist_matrix[slice_, ...] = ...` from joblib's threads) would each write back the part the
//! other wrote as it was before. The lock is the base's own (made on first use, kept with the
//! tensor): the fallback holds the locks of the bases it writes for the whole call
//! ([`hold_writes`]), so the second call reads what the first wrote.
//!
//! The lock is re-entrant (a kernel may write the same tensor again through boxfall), taken in
//! one order (by address) where a call writes several, and waited for through a hook
//! ([`set_write_wait_hook`]) that the Python bindings install to release the GIL: the holder
//! may need it to run its kernel.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

use super::types::TensorInner;
use super::Tensor;

/// The owner of a tensor's write lock and how many times it took it.
#[derive(Default)]
pub(crate) struct WriteLock {
    owner: Mutex<(Option<ThreadId>, usize)>,
    free: Condvar,
}

/// Runs a wait for another thread's write of a tensor (see [`set_write_wait_hook`]).
///
/// ```
/// fn inline(wait: &mut (dyn FnMut() + Send)) { wait() }
/// let hook: boxfall::tensor::WriteWaitHook = inline;
/// let mut waited = false;
/// hook(&mut || waited = true);
/// assert!(waited);
/// ```
pub type WriteWaitHook = fn(&mut (dyn FnMut() + Send));

static WAIT: OnceLock<WriteWaitHook> = OnceLock::new();

/// Installs the function a thread that waits for another thread's write of a tensor runs its
/// wait through: the Python bindings install one that releases the GIL, which the writing
/// thread may need. The first installed stays; returns whether this one was.
///
/// ```
/// fn inline(wait: &mut (dyn FnMut() + Send)) { wait() }
/// let _ = boxfall::tensor::set_write_wait_hook(inline);
/// ```
pub fn set_write_wait_hook(hook: WriteWaitHook) -> bool {
    WAIT.set(hook).is_ok()
}

impl WriteLock {
    fn state(&self) -> MutexGuard<'_, (Option<ThreadId>, usize)> {
        self.owner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn acquire(&self, me: ThreadId) {
        {
            let mut s = self.state();
            match s.0 {
                Some(t) if t == me => {
                    s.1 += 1;
                    return;
                }
                None => {
                    *s = (Some(me), 1);
                    return;
                }
                Some(_) => {}
            }
        }
        let mut wait = || {
            let mut s = self.state();
            while s.0.is_some() {
                s = self.free.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            *s = (Some(me), 1);
        };
        match WAIT.get() {
            Some(hook) => hook(&mut wait),
            None => wait(),
        }
    }

    fn release(&self) {
        let mut s = self.state();
        s.1 = s.1.saturating_sub(1);
        if s.1 == 0 {
            s.0 = None;
            drop(s);
            self.free.notify_one();
        }
    }
}

/// The write locks of some tensors, held until dropped.
pub(crate) struct WritesHeld(Vec<Tensor>);

impl Drop for WritesHeld {
    fn drop(&mut self) {
        for t in self.0.iter().rev() {
            if let Some(lock) = t.0.writes.get() {
                lock.release();
            }
        }
    }
}

/// Takes the write locks of `tensors`' bases (a view's base, else the tensor itself), each
/// once, in the order of their addresses, waiting for other threads that hold them.
pub(crate) fn hold_writes(tensors: impl Iterator<Item = Tensor>) -> WritesHeld {
    let mut bases: Vec<Tensor> = tensors
        .map(|t| t.view_base().cloned().unwrap_or(t))
        .collect();
    bases.sort_by_key(address);
    bases.dedup_by(|a, b| a.same(b));
    if bases.is_empty() {
        return WritesHeld(bases);
    }
    let me = std::thread::current().id();
    for t in &bases {
        t.0.writes.get_or_init(Box::default).acquire(me);
    }
    WritesHeld(bases)
}

/// Where `t`'s tensor lives: the order locks are taken in.
fn address(t: &Tensor) -> usize {
    std::ptr::from_ref::<TensorInner>(&t.0) as usize
}

#[cfg(test)]
mod tests {
    use super::hold_writes;
    use crate::tensor::Tensor;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_held_write_lock_is_reentrant_and_excludes_other_threads() {
        let t = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
        let held = hold_writes([t.clone(), t.clone()].into_iter());
        let again = hold_writes(std::iter::once(t.clone())); // this thread holds it already
        let entered = AtomicBool::new(false);
        std::thread::scope(|s| {
            let other = s.spawn(|| {
                let _lock = hold_writes(std::iter::once(t.clone()));
                entered.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!entered.load(Ordering::SeqCst), "the other thread waits");
            drop(again);
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!entered.load(Ordering::SeqCst), "held once more");
            drop(held);
            other.join().expect("the other thread");
        });
        assert!(entered.load(Ordering::SeqCst));
    }
}
