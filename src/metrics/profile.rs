//! Whether the backends' own kernels are timed (`bf.metrics.profile()`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Whether backend kernels are timed (`bf.metrics.profile()`): a count of the profiles open,
/// so that nested ones end with the outermost.
static PROFILING: AtomicU64 = AtomicU64::new(0);
/// `PROFILING > 0`, read by every counted kernel call.
static PROFILE_ON: AtomicBool = AtomicBool::new(false);

/// Starts timing the backends' own kernels (`kernel_call_ns`); each call is matched by one
/// [`profile_end`]. Counting calls is always on; timing costs two clock reads a call.
///
/// ```
/// boxfall::metrics::profile_begin();
/// assert!(boxfall::metrics::profiling());
/// boxfall::metrics::profile_end();
/// ```
pub fn profile_begin() {
    PROFILING.fetch_add(1, Relaxed);
    PROFILE_ON.store(true, Relaxed);
}

/// Ends one [`profile_begin`]; timing stops when the last one ends.
///
/// ```
/// boxfall::metrics::profile_begin();
/// boxfall::metrics::profile_end();
/// boxfall::metrics::profile_end(); // one too many: no effect
/// ```
pub fn profile_end() {
    let before = PROFILING
        .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)))
        .unwrap_or(0);
    if before <= 1 {
        PROFILE_ON.store(false, Relaxed);
    }
}

/// Whether the backends' own kernels are being timed.
///
/// ```
/// let _ = boxfall::metrics::profiling();
/// ```
#[inline]
pub fn profiling() -> bool {
    PROFILE_ON.load(Relaxed)
}
