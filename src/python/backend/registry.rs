//! The backends registered from Python, as their latest registration gave them: what
//! `Backend` objects, the calls that run their hooks, and Python's caches read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;

use super::from_cpu::FromCpu;
use super::held::Held;
use crate::key::{DispatchKey, NUM_KEYS};

/// A backend's lock (`thread_safe=False`): held while one of its hooks or kernels runs, so
/// that they run one at a time. A `threading.RLock`: a kernel that hands a case to the CPU
/// fallback calls the hooks on the thread that holds it, and a thread waiting for it lets go
/// of the GIL (the thread holding it may need the GIL to finish).
pub(crate) struct Serial<'py>(Option<Bound<'py, PyAny>>);

impl<'py> Serial<'py> {
    pub(crate) fn enter(py: Python<'py>, lock: Option<&Py<PyAny>>) -> PyResult<Serial<'py>> {
        let Some(lock) = lock else {
            return Ok(Serial(None));
        };
        let lock = lock.bind(py).clone();
        lock.call_method0(pyo3::intern!(py, "acquire"))?;
        Ok(Serial(Some(lock)))
    }
}

impl Drop for Serial<'_> {
    fn drop(&mut self) {
        if let Some(lock) = &self.0 {
            // Only the thread that acquired it releases it, so this cannot fail but for a
            // broken interpreter; nothing could be done about it here.
            let _ = lock.call_method0(pyo3::intern!(lock.py(), "release"));
        }
    }
}

/// The lock of the Python backend of `key` (`thread_safe=False`), if it has one.
pub(crate) fn backend_lock(py: Python<'_>, key: DispatchKey) -> Option<Py<PyAny>> {
    python_backends()[key.index()]
        .as_ref()
        .and_then(|b| b.lock.as_ref().map(|l| l.clone_ref(py)))
}

/// What `Backend` objects need of a backend registered from Python, as its latest
/// registration (`replace=True`) gave it.
pub(super) struct Registration {
    /// The `from_cpu` hook, which `Backend.tensor` calls.
    pub(super) from_cpu: FromCpu,
    /// The dtypes its device holds.
    pub(super) held: Held,
    /// `register_backend(narrow=)`.
    pub(super) narrow: bool,
    /// Its lock, for a backend registered with `thread_safe=False`.
    pub(super) lock: Option<Py<PyAny>>,
}

/// Each backend registered from Python, by key index: for the object `register_backend`
/// returned and for those `get_backend` and `backends` return, so that all of them use the
/// hooks of the latest registration (`replace=True`).
pub(super) fn python_backends() -> MutexGuard<'static, [Option<Registration>; NUM_KEYS]> {
    static BACKENDS: Mutex<[Option<Registration>; NUM_KEYS]> =
        Mutex::new([const { None }; NUM_KEYS]);
    BACKENDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The keys of the backends registered from Python (`register_backend`), a bit each: their
/// hooks call Python, so a call that runs them must hold PyO3's count of the GIL (see
/// `fast::run`). Read without a lock on the path of every call that falls back.
pub(super) static PYTHON_KEYS: AtomicU64 = AtomicU64::new(0);

/// Whether `key` is a backend registered from Python (whose hooks call Python functions).
#[inline]
pub(crate) fn is_python_backend(key: DispatchKey) -> bool {
    PYTHON_KEYS.load(Ordering::Relaxed) & (1 << key.index()) != 0
}

/// Bumped by every `register_backend`: what Python caches of the backends (the dtypes of a
/// device, `boxfall.array_api._dtypes`) is good while it is unchanged.
pub(super) static REGISTRATIONS: AtomicU64 = AtomicU64::new(0);

/// A number that changes whenever a backend is registered or replaced.
#[pyfunction]
pub fn backends_version() -> u64 {
    REGISTRATIONS.load(Ordering::Acquire)
}
