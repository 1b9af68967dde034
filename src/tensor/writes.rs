//! Holding the write locks (`write_lock.rs`) of the tensors a call writes: their bases', each
//! once, in the order of their addresses.

use super::types::TensorInner;
use super::Tensor;

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
