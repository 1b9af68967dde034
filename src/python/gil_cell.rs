//! A cell that only code holding the GIL touches, for caches kept in frozen `#[pyclass]`
//! objects (which must be `Sync`). A lock there would be taken and released on every call;
//! the GIL already serialises the threads (this module's `#[pymodule]` keeps the GIL on even in a
//! free-threaded interpreter).

use std::cell::UnsafeCell;

use pyo3::Python;

/// A value read and written only with the GIL held, and only by swapping it whole: no
/// reference into the cell outlives a call, so no Python code (which could reach the same
/// cell) runs while the cell is borrowed; what is swapped out is dropped by the caller, after.
#[derive(Default)]
pub struct GilCell<T>(UnsafeCell<T>);

// SAFETY: every access takes a `Python` token, so the threads that share the cell reach it
// one at a time, and `T: Send` lets the value move between them.
unsafe impl<T: Send> Sync for GilCell<T> {}

impl<T> GilCell<T> {
    /// A cell holding `value` (a `static`'s).
    pub const fn new(value: T) -> Self {
        GilCell(UnsafeCell::new(value))
    }

    /// Puts `value` in, and returns what was there.
    pub fn replace(&self, _py: Python<'_>, value: T) -> T {
        // SAFETY: the GIL is held (`_py`), and the borrow ends before this returns, with no
        // Python code run meanwhile (see the type).
        unsafe { std::mem::replace(&mut *self.0.get(), value) }
    }
}

impl<T> GilCell<T> {
    /// The value, for the garbage collector's traversal.
    ///
    /// # Safety
    /// The GIL is held and no Python code runs (nor any write of the cell) while the reference
    /// lives: as in a `__traverse__`.
    pub unsafe fn peek(&self) -> &T {
        // SAFETY: the caller's contract; no `&mut` to the value exists outside `replace`,
        // which does not run meanwhile.
        unsafe { &*self.0.get() }
    }
}

impl<T: Default> GilCell<T> {
    /// Takes the value out, leaving the default.
    pub fn take(&self, py: Python<'_>) -> T {
        self.replace(py, T::default())
    }
}
