//! Read-copy-update for the dispatch tables: a reader pays two plain stores to a per-thread
//! slot, where an `ArcSwap` load pays two sequentially consistent atomics (about 10 ns here, the
//! whole of the dispatch budget).
//!
//! A reader marks its thread's slot with the global epoch before it loads a pointer and clears it
//! when its outermost guard drops. A writer swaps the pointer, retires the old object, and frees
//! it once no reader that entered before the swap is still inside. The store-then-load of the
//! reader needs a full fence to pair with the writer's scan; on Linux the writer pays for that
//! fence instead, with `membarrier(PRIVATE_EXPEDITED)`, which runs a barrier on every thread of
//! the process. Where that call is missing the reader fences itself.
//!
//! Retired objects are never dropped while a registry lock is held: [`collect`] hands back what
//! may be dropped and the caller drops it after unlocking (a Python kernel's finalizer may
//! register again).

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crossbeam_utils::CachePadded;

type Slot = CachePadded<AtomicU64>;

/// Readers entering now record this; a retired object is tagged with it and freed once every
/// active reader has a later tag. Starts at 1: 0 marks a slot as outside any read section.
static EPOCH: AtomicU64 = AtomicU64::new(1);

/// Whether writers issue the process-wide barrier, so readers need only a compiler fence.
static WRITER_FENCES: AtomicBool = AtomicBool::new(false);

/// The newest tag among retired objects that a reader held back (0: none). A reader that
/// entered no later than this collects when it leaves, so that what it held back is freed as
/// soon as it can be rather than at the next registration.
static HELD_BACK: AtomicU64 = AtomicU64::new(0);

struct Reader {
    slot: Cell<*const Slot>,
    depth: Cell<u32>,
    /// The epoch this thread's outermost section entered with.
    entered: Cell<u64>,
}

/// A slot handed back at thread exit: the thread may still read (another thread-local's
/// destructor may call an operator), so it takes a fresh slot that it never returns.
const SLOT_RETURNED: *const Slot = ptr::dangling::<Slot>();

thread_local! {
    // No destructor, so access needs no liveness check: the hot path is one TLS offset.
    static READER: Reader = const {
        Reader { slot: Cell::new(ptr::null()), depth: Cell::new(0), entered: Cell::new(0) }
    };
    static SLOT_OWNER: SlotOwner = const { SlotOwner(Cell::new(ptr::null())) };
}

/// Returns this thread's slot to the pool when the thread exits.
struct SlotOwner(Cell<*const Slot>);

impl Drop for SlotOwner {
    fn drop(&mut self) {
        let s = self.0.get();
        if s.is_null() {
            return;
        }
        let _ = READER.try_with(|r| r.slot.set(SLOT_RETURNED));
        // SAFETY: `s` came from `Box::leak` in `new_slot` and slots are never freed.
        let slot: &'static Slot = unsafe { &*s };
        slot.store(0, Ordering::Release);
        slots().free.push(slot);
    }
}

struct Slots {
    all: Vec<&'static Slot>,
    free: Vec<&'static Slot>,
}

fn slots() -> MutexGuard<'static, Slots> {
    static SLOTS: Mutex<Slots> = Mutex::new(Slots {
        all: Vec::new(),
        free: Vec::new(),
    });
    SLOTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Chooses the barrier once, before the first object is published.
fn init() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| WRITER_FENCES.store(membarrier::register(), Ordering::SeqCst));
}

#[cold]
#[inline(never)]
fn new_slot(r: &Reader) -> *const Slot {
    let mut pool = slots();
    let slot: &'static Slot = match pool.free.pop() {
        Some(s) => s,
        None => {
            let s: &'static Slot = Box::leak(Box::new(CachePadded::new(AtomicU64::new(0))));
            pool.all.push(s);
            s
        }
    };
    drop(pool);
    let p: *const Slot = slot;
    if r.slot.get().is_null() {
        // First read on this thread: the slot goes back to the pool at thread exit. While
        // thread-locals are torn down this fails and the slot stays taken for good (rare).
        let _ = SLOT_OWNER.try_with(|o| o.0.set(p));
    }
    r.slot.set(p);
    p
}

/// Proof that this thread is inside a read section: what [`RcuCell::load`] borrows from.
/// Nestable; not `Send`, because the section belongs to the thread.
///
/// ```ignore
/// let g = rcu::read();
/// let table = cell.load(&g);
/// ```
pub(crate) struct ReadGuard {
    _not_send: PhantomData<*const ()>,
}

/// The epoch now. Every release of a retired object follows a bump of it ([`collect`] bumps it
/// before it frees anything), so a reader that loaded an object inside a read section and then
/// read the epoch knows, when a later read (after a later load of the same cell) gives the
/// same epoch, that the object was not freed meanwhile: an equal pointer is then the same
/// object, not a new one at a reused address. (The tests read it; no call does.)
#[cfg(test)]
#[inline]
pub(crate) fn epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// Enters a read section (or a nested one). Always inlined, as its guard's drop: a call's whole
/// routing is inlined into the bindings' large entry functions, where the inliner left this
/// (and the thread-local access in it) out of line, a call and a TLS look-up each way.
#[inline(always)]
pub(crate) fn read() -> ReadGuard {
    READER.with(|r| {
        let depth = r.depth.get();
        if depth == 0 {
            let mut s = r.slot.get();
            if s.is_null() || s == SLOT_RETURNED {
                s = new_slot(r);
            }
            // SAFETY: `s` is a leaked `Box` (see `new_slot`), valid forever, and used by this
            // thread alone until it is returned to the pool.
            let slot = unsafe { &*s };
            let epoch = EPOCH.load(Ordering::Acquire);
            r.entered.set(epoch);
            slot.store(epoch, Ordering::Relaxed);
            reader_fence();
        }
        r.depth.set(depth + 1);
    });
    ReadGuard {
        _not_send: PhantomData,
    }
}

/// Orders a reader's slot store before its next load: a compiler fence where writers run the
/// process-wide barrier, a full fence otherwise.
#[inline]
fn reader_fence() {
    if WRITER_FENCES.load(Ordering::Relaxed) {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

impl Drop for ReadGuard {
    #[inline(always)]
    fn drop(&mut self) {
        let held_back = READER.with(|r| {
            let depth = r.depth.get() - 1;
            r.depth.set(depth);
            if depth != 0 {
                return false;
            }
            // SAFETY: as in `read`: set there, valid forever.
            let slot = unsafe { &*r.slot.get() };
            slot.store(0, Ordering::Release);
            reader_fence();
            r.entered.get() <= HELD_BACK.load(Ordering::Relaxed)
        });
        if held_back {
            collect_held_back();
        }
    }
}

#[cold]
#[inline(never)]
fn collect_held_back() {
    drop(collect());
}

/// An owned object that readers load without any atomic read-modify-write.
///
/// The object lives in an `Arc` (its pointer is the `Arc`'s own, so a load is one plain load, as
/// for a `Box`): a reader that is about to run for long takes a counted reference with
/// [`own`] and leaves its read section, so that it holds back only that one object, not the
/// reclamation of every object retired while it runs.
pub(crate) struct RcuCell<T: Send + Sync + 'static> {
    ptr: AtomicPtr<T>,
}

impl<T: Send + Sync + 'static> RcuCell<T> {
    /// A cell holding `value`.
    pub(crate) fn new(value: T) -> RcuCell<T> {
        init();
        RcuCell {
            ptr: AtomicPtr::new(Arc::into_raw(Arc::new(value)).cast_mut()),
        }
    }

    /// The current object, valid as long as the guard.
    #[inline]
    pub(crate) fn load<'g>(&self, _guard: &'g ReadGuard) -> &'g T {
        // SAFETY: the pointer came from `Arc::into_raw`; the cell's reference (or, once the
        // object is swapped out, the retired list's) is released only by `collect`, after
        // every reader that entered before the swap has left; this thread is inside a read
        // section for the guard's lifetime.
        unsafe { &*self.ptr.load(Ordering::Acquire) }
    }

    /// Publishes `value` and retires the old object; [`collect`] releases it later.
    pub(crate) fn replace(&self, value: T) {
        let old = self
            .ptr
            .swap(Arc::into_raw(Arc::new(value)).cast_mut(), Ordering::SeqCst);
        retired().push((EPOCH.load(Ordering::SeqCst), Box::new(Unpublished(old))));
    }
}

/// A counted reference to an object that [`RcuCell::load`] gave under a guard that is still
/// alive: it keeps the object after the read section ends.
///
/// # Safety
/// `value` must come from `RcuCell::<T>::load` under a `ReadGuard` this thread still holds.
#[inline]
pub(crate) unsafe fn own<T: Send + Sync + 'static>(value: &T) -> Arc<T> {
    let p: *const T = value;
    // SAFETY: per the contract, `p` is the data pointer of an `Arc<T>` (from `Arc::into_raw` in
    // `RcuCell`) whose reference the cell or the retired list still holds, since the caller's
    // read section has not ended; adding a count and taking it as a new `Arc` is then sound.
    unsafe {
        Arc::increment_strong_count(p);
        Arc::from_raw(p)
    }
}

/// An object swapped out of its cell, released when dropped. It stays a raw pointer until then:
/// readers may still hold plain references, which an `Arc` value would not show.
struct Unpublished<T>(*mut T);

// SAFETY: it owns a reference to a `T: Send + Sync`; readers on other threads only read it until
// `collect` has seen them leave, and only then is it dropped (readers that took their own count
// with `own` keep the object after that, which `Arc` allows for `T: Send + Sync`).
unsafe impl<T: Send + Sync> Send for Unpublished<T> {}

impl<T> Drop for Unpublished<T> {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Arc::into_raw` in `RcuCell`, was unpublished by one
        // swap, and `collect` released it only once no reader without a count can reach it.
        drop(unsafe { Arc::from_raw(self.0) });
    }
}

impl<T: Send + Sync + 'static> Drop for RcuCell<T> {
    fn drop(&mut self) {
        // Readers borrow from a cell they can reach, so none can be inside once it is dropped.
        // SAFETY: the pointer is the cell's own, from `Arc::into_raw`.
        drop(unsafe { Arc::from_raw(*self.ptr.get_mut()) });
    }
}

type Retired = Vec<(u64, Box<dyn Send>)>;

fn retired() -> MutexGuard<'static, Retired> {
    static RETIRED: Mutex<Retired> = Mutex::new(Vec::new());
    RETIRED.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many retired objects wait for readers to leave (for tests of what a long call holds
/// back).
#[cfg(test)]
pub(crate) fn retired_count() -> usize {
    retired().len()
}

/// Takes out the retired objects no reader can see any more; the caller drops them with no
/// lock held. Objects a reader may still see stay for a later call.
pub(crate) fn collect() -> Vec<Box<dyn Send>> {
    let mut list = retired();
    if list.is_empty() {
        return Vec::new();
    }
    // Readers that enter from here on record a later epoch than any object retired so far,
    // and will load the replacements.
    EPOCH.fetch_add(1, Ordering::SeqCst);
    // Before the barrier: a reader leaving after it sees this and collects again; a reader
    // that left before it is seen as gone by the scan below.
    let newest = list.iter().map(|(e, _)| *e).max().unwrap_or(0);
    HELD_BACK.store(newest, Ordering::SeqCst);
    if WRITER_FENCES.load(Ordering::Relaxed) {
        membarrier::all_threads();
    } else {
        fence(Ordering::SeqCst);
    }
    let oldest_reader = slots()
        .all
        .iter()
        .map(|s| s.load(Ordering::Acquire))
        .filter(|&e| e != 0)
        .min()
        .unwrap_or(u64::MAX);
    let (free, keep): (Retired, Retired) = list.drain(..).partition(|(e, _)| *e < oldest_reader);
    let newest_kept = keep.iter().map(|(e, _)| *e).max().unwrap_or(0);
    HELD_BACK.store(newest_kept, Ordering::SeqCst);
    *list = keep;
    free.into_iter().map(|(_, o)| o).collect()
}

/// The process-wide barrier of Linux's `membarrier(2)`.
#[cfg(all(target_os = "linux", not(miri)))]
mod membarrier {
    const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    /// Registers the process for expedited barriers; false where the kernel refuses.
    pub(super) fn register() -> bool {
        // SAFETY: membarrier takes (cmd, flags, cpu_id) integers and touches no memory of ours.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                CMD_REGISTER_PRIVATE_EXPEDITED,
                0 as libc::c_int,
                0 as libc::c_int,
            )
        };
        r == 0 && barrier()
    }

    fn barrier() -> bool {
        // SAFETY: as in `register`.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                CMD_PRIVATE_EXPEDITED,
                0 as libc::c_int,
                0 as libc::c_int,
            )
        };
        r == 0
    }

    /// A full barrier on every running thread of the process.
    pub(super) fn all_threads() {
        if !barrier() {
            // Registered, so this cannot fail short of a kernel bug; a writer's own fence
            // would not order the readers' accesses, so refuse to go on unsafely.
            std::process::abort();
        }
    }
}

// Miri has no membarrier: it checks the readers' fence path instead.
#[cfg(any(not(target_os = "linux"), miri))]
mod membarrier {
    pub(super) fn register() -> bool {
        false
    }

    pub(super) fn all_threads() {}
}

/// Ends the read section `$g`, keeping `$table` (loaded under it) by a reference count: how a
/// call that may reach a long-running kernel leaves the section before the kernel runs.
macro_rules! leave_holding {
    ($g:ident, $table:ident) => {{
        // SAFETY: `$table` was loaded under `$g`, which is alive until the line after.
        let owned = unsafe { crate::rcu::own($table) };
        drop($g);
        owned
    }};
}
pub(crate) use leave_holding;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Collects until `drops` reaches `n`: readers of other tests in this binary may hold an
    /// object back for a moment, never for good.
    fn collect_until(drops: &AtomicUsize, n: usize) -> usize {
        for _ in 0..10_000 {
            drop(collect());
            if drops.load(Ordering::SeqCst) >= n {
                break;
            }
            std::thread::yield_now();
        }
        drops.load(Ordering::SeqCst)
    }

    #[test]
    fn no_retired_object_is_freed_without_the_epoch_moving_first() {
        // What `epoch` promises its readers: an object seen with an epoch, freed, shows a
        // later epoch to whoever reads it next (other tests' collects only move it further).
        let drops = Arc::new(AtomicUsize::new(0));
        let cell = RcuCell::new(Counted(drops.clone()));
        let g = read();
        let _seen = cell.load(&g);
        let seen_at = epoch();
        drop(g);
        cell.replace(Counted(drops.clone()));
        assert_eq!(collect_until(&drops, 1), 1);
        assert!(epoch() > seen_at, "freed, so the epoch moved");
    }

    #[test]
    fn a_retired_object_outlives_the_readers_that_saw_it() {
        let drops = Arc::new(AtomicUsize::new(0));
        let cell = RcuCell::new(Counted(drops.clone()));
        let g = read();
        let seen = cell.load(&g);
        cell.replace(Counted(drops.clone()));
        for _ in 0..100 {
            drop(collect());
        }
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "a reader is inside: nothing freed"
        );
        assert!(
            Arc::ptr_eq(&seen.0, &drops),
            "the object seen is still whole"
        );
        drop(g);
        assert_eq!(collect_until(&drops, 1), 1);
    }

    #[test]
    fn a_reader_that_entered_after_the_swap_does_not_hold_the_old_object_back() {
        let drops = Arc::new(AtomicUsize::new(0));
        let cell = RcuCell::new(Counted(drops.clone()));
        cell.replace(Counted(drops.clone()));
        // The first collect moves the epoch past the retirement, whatever it frees.
        drop(collect());
        let g = read();
        let _current = cell.load(&g);
        assert_eq!(
            collect_until(&drops, 1),
            1,
            "freed while a later reader is inside"
        );
        drop(g);
    }

    #[test]
    fn readers_on_other_threads_see_whole_objects_while_writers_replace() {
        let cell = Arc::new(RcuCell::new(vec![7u64; 64]));
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (cell, stop, reads) = (cell.clone(), stop.clone(), reads.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let g = read();
                        let v = cell.load(&g);
                        let first = v[0];
                        assert!(v.iter().all(|&x| x == first), "a torn or freed object");
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let mut i = 0u64;
        while i < 2000 || reads.load(Ordering::Relaxed) < 20_000 {
            cell.replace(vec![i; 64]);
            drop(collect());
            i += 1;
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().expect("a reader failed");
        }
    }

    #[test]
    fn the_reader_that_held_an_object_back_frees_it_when_it_leaves() {
        let drops = Arc::new(AtomicUsize::new(0));
        let cell = RcuCell::new(Counted(drops.clone()));
        let g = read();
        cell.replace(Counted(drops.clone()));
        drop(collect());
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(g);
        // No writer runs again: leaving the section is what frees it (or, if another test's
        // reader also held it back, that reader's leaving).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while drops.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn an_owned_reference_outlives_its_read_section_and_holds_back_nothing_else() {
        let drops = Arc::new(AtomicUsize::new(0));
        let cell = RcuCell::new(Counted(drops.clone()));
        let g = read();
        // SAFETY: loaded under `g`, which is alive.
        let owned = unsafe { own(cell.load(&g)) };
        drop(g);
        cell.replace(Counted(drops.clone()));
        // No reader is inside: the retired reference is released, but the owned one keeps
        // the object whole.
        for _ in 0..100 {
            drop(collect());
        }
        assert_eq!(drops.load(Ordering::SeqCst), 0, "the owner still holds it");
        assert!(Arc::ptr_eq(&owned.0, &drops));
        // Later replacements are freed while the owner runs on.
        cell.replace(Counted(drops.clone()));
        assert_eq!(
            collect_until(&drops, 1),
            1,
            "the next object is not held back"
        );
        drop(owned);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn nested_sections_end_with_the_outermost() {
        let drops = Arc::new(AtomicUsize::new(0));
        let cell = RcuCell::new(Counted(drops.clone()));
        let outer = read();
        let inner = read();
        cell.replace(Counted(drops.clone()));
        drop(inner);
        for _ in 0..100 {
            drop(collect());
        }
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "the outer section still holds it"
        );
        drop(outer);
        assert_eq!(collect_until(&drops, 1), 1);
    }

    #[test]
    fn a_thread_returns_its_slot_to_the_pool_at_exit() {
        // Another test's new thread may take the slot first; one of a few tries sees it free.
        let returned = (0..10).any(|_| {
            let p = std::thread::spawn(|| {
                drop(read());
                READER.with(|r| r.slot.get()) as usize
            })
            .join()
            .expect("thread");
            slots().free.iter().any(|s| ptr::eq(*s, p as *const Slot))
        });
        assert!(returned);
    }
}
