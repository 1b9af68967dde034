//! Running work that may block (a large kernel, a wait for another thread's sync or write)
//! through one hook: the Python bindings install one that releases the GIL meanwhile, which
//! the other thread may need to finish. Native's large kernels, graph mode's waits for a sync
//! and a tensor's write lock all run through it.

use std::sync::OnceLock;

/// Runs blocking work; the Python bindings install a hook that releases the GIL.
///
/// ```
/// fn inline(work: &mut (dyn FnMut() + Send)) { work() }
/// let hook: boxfall::native::BlockingHook = inline;
/// let mut ran = false;
/// hook(&mut || ran = true);
/// assert!(ran);
/// ```
pub type BlockingHook = fn(&mut (dyn FnMut() + Send));

static HOOK: OnceLock<BlockingHook> = OnceLock::new();

/// Installs the blocking hook (once); returns whether this one was installed.
///
/// ```
/// fn run(f: &mut (dyn FnMut() + Send)) { f() }
/// let _ = boxfall::native::set_blocking_hook(run);
/// ```
pub fn set_blocking_hook(h: BlockingHook) -> bool {
    HOOK.set(h).is_ok()
}

/// The installed hook, if any.
pub(crate) fn hook() -> Option<BlockingHook> {
    HOOK.get().copied()
}

/// Runs `work` through the hook (in place where none is installed).
pub(crate) fn blocking(work: &mut (dyn FnMut() + Send)) {
    match hook() {
        Some(h) => h(work),
        None => work(),
    }
}
