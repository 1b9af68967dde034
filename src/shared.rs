//! `Shared<T>`: a thread-safe reference-counted pointer with a strong count only, for the
//! tensor handle. `std::sync::Arc` keeps a weak count beside the strong one, which a tensor
//! never uses but pays for: dropping the last handle decrements both (two locked operations),
//! `Arc::get_mut` takes a locked compare-exchange on it, and `Arc::new` builds its value on the
//! stack before it allocates (then copies it over, a store-forwarding stall). Here the last drop
//! is one locked operation, `get_mut` one load, and `new_with` writes the value into the
//! allocation where it is made. Every fallback result is a tensor made and dropped, so each of
//! those counts once a call.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicUsize, Ordering};

/// The allocation: the count, then the value.
struct Inner<T> {
    count: AtomicUsize,
    value: T,
}

/// A shared handle of a `T` (see the module's documentation).
///
/// Against the crates that serve the same end, a tensor's life (made, a clone dropped,
/// `get_mut`, dropped; 64-byte value) in 41 paired rounds of 10^6 on the 2-core development
/// machine under load: `Shared` 21.5 ns (interquartile range 17.8-22.1), `triomphe::Arc`
/// 21.8 ns (per-round ratio to `Shared` 1.02, range 0.93-1.25), `std::sync::Arc` 23.3 ns
/// (1.12, 1.07-1.33). The gain over `Arc` is its weak count; `triomphe::Arc`, which has none
/// either, is within noise of this type, so it may replace this file once the Python
/// benchmark rows confirm it. Reproduce: `cargo bench --bench handwritten`.
pub(crate) struct Shared<T> {
    ptr: NonNull<Inner<T>>,
    _owns: PhantomData<Inner<T>>,
}

// SAFETY: as `Arc<T>`: a handle sends and shares `&T` across threads (so `T: Sync`), and the
// last handle, on any thread, drops the `T` (so `T: Send`); the count is atomic.
unsafe impl<T: Send + Sync> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Shared<T> {}

/// A count beyond this is a leak of handles (as `Arc`, which aborts there too).
const MAX_COUNT: usize = isize::MAX as usize;

impl<T> Shared<T> {
    /// A handle of the value `make` gives, written straight into the new allocation.
    #[inline(always)]
    pub(crate) fn new_with(make: impl FnOnce() -> T) -> Shared<T> {
        let layout = Layout::new::<Inner<T>>();
        // `Inner<T>` holds an `AtomicUsize`, so its size is never zero, as `alloc` requires.
        // SAFETY: the layout's size is not zero (above).
        let raw = unsafe { alloc(layout) }.cast::<Inner<T>>();
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        // SAFETY: `ptr` is a fresh allocation of `Inner<T>`'s layout, valid for a write and
        // aligned, that nothing else points at. (Should `make` panic, the allocation leaks;
        // nothing reads it.)
        unsafe {
            ptr.as_ptr().write(Inner {
                count: AtomicUsize::new(1),
                value: make(),
            });
        }
        Shared {
            ptr,
            _owns: PhantomData,
        }
    }

    #[inline(always)]
    fn inner(&self) -> &Inner<T> {
        // SAFETY: the allocation lives while any handle does (this one), and was initialized
        // by `new_with`; only `&` references to it are made while handles are shared
        // (`get_mut` gives `&mut` only to the one handle there is).
        unsafe { self.ptr.as_ref() }
    }

    /// Whether `a` and `b` are handles of one value.
    #[inline]
    pub(crate) fn ptr_eq(a: &Shared<T>, b: &Shared<T>) -> bool {
        a.ptr == b.ptr
    }

    /// Whether this handle is the value's only one.
    #[inline]
    pub(crate) fn is_unique(&self) -> bool {
        // Acquire, as `get_mut`: a handle dropped on another thread is seen as dropped.
        self.inner().count.load(Ordering::Acquire) == 1
    }

    /// The value, if this handle is its only one (no other handle can be made meanwhile: only a
    /// handle clones).
    #[inline]
    pub(crate) fn get_mut(&mut self) -> Option<&mut T> {
        // Acquire: pairs with the Release decrement of a handle dropped on another thread, so
        // its uses of the value happen before the caller's writes.
        if self.inner().count.load(Ordering::Acquire) == 1 {
            // SAFETY: the count is 1, so this handle (borrowed mutably) is the only one, and no
            // `&` reference through another handle exists; the `&mut` lives as long as that
            // borrow, during which no handle can be cloned from this one.
            Some(unsafe { &mut (*self.ptr.as_ptr()).value })
        } else {
            None
        }
    }
}

impl<T> Clone for Shared<T> {
    #[inline]
    fn clone(&self) -> Shared<T> {
        // Relaxed, as `Arc::clone`: a new handle is made from an existing one, which keeps
        // the value alive meanwhile.
        let old = self.inner().count.fetch_add(1, Ordering::Relaxed);
        if old > MAX_COUNT {
            std::process::abort();
        }
        Shared {
            ptr: self.ptr,
            _owns: PhantomData,
        }
    }
}

impl<T> Drop for Shared<T> {
    #[inline]
    fn drop(&mut self) {
        // Release, then Acquire before the value is dropped, as `Arc`'s drop: every use of the
        // value through another handle happens before it is dropped.
        if self.inner().count.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        fence(Ordering::Acquire);
        // SAFETY: the count reached 0, so this was the last handle and nothing else can reach
        // the allocation: the value is dropped once, then the memory `new_with` allocated with
        // this layout is freed.
        unsafe {
            std::ptr::drop_in_place(self.ptr.as_ptr());
            dealloc(self.ptr.as_ptr().cast(), Layout::new::<Inner<T>>());
        }
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.inner().value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>, u64);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_value_is_dropped_once_by_the_last_handle_on_any_thread() {
        let drops = Arc::new(AtomicUsize::new(0));
        let s = Shared::new_with(|| Counted(drops.clone(), 7));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let c = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        let d = c.clone();
                        assert_eq!(d.1, 7);
                    }
                    drop(c);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(drops.load(Ordering::Relaxed), 0);
        drop(s);
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn get_mut_serves_only_a_lone_handle() {
        let mut s = Shared::new_with(|| 1_u64);
        *s.get_mut().unwrap() += 1;
        let other = s.clone();
        assert!(Shared::ptr_eq(&s, &other));
        assert!(s.get_mut().is_none());
        std::thread::spawn(move || drop(other)).join().unwrap();
        *s.get_mut().unwrap() += 1;
        assert_eq!(*s, 3);
        assert!(!Shared::ptr_eq(&s, &Shared::new_with(|| 3_u64)));
    }
}
