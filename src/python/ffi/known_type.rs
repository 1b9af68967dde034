//! A class told by its type pointer: one comparison, where PyO3's `cast` (or NumPy's check)
//! looks the class object up first, a call of its own on the path of every argument.

use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::ffi::PyTypeObject;
use pyo3::prelude::*;

/// A class's type object, read once from `load` and kept. The classes kept so are static in
/// their extension modules (NumPy's `ndarray`, boxfall's own), which are never unloaded, so the
/// pointer stays valid; and none of them has subclasses where an exact match is what counts.
pub struct KnownType {
    ptr: AtomicPtr<PyTypeObject>,
    load: fn(Python<'_>) -> *mut PyTypeObject,
}

impl KnownType {
    pub const fn new(load: fn(Python<'_>) -> *mut PyTypeObject) -> KnownType {
        KnownType {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            load,
        }
    }

    /// Whether `obj`'s type is exactly this class (a subclass is not).
    #[inline(always)]
    pub fn is_type_of(&self, obj: &Bound<'_, PyAny>) -> bool {
        let mut known = self.ptr.load(Ordering::Relaxed);
        if known.is_null() {
            known = (self.load)(obj.py());
            self.ptr.store(known, Ordering::Relaxed);
        }
        std::ptr::eq(obj.get_type_ptr(), known)
    }
}
