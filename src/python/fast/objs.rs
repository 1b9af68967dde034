//! A call's Python objects, up to `MAX`, kept on the stack.

use std::mem::MaybeUninit;

use pyo3::prelude::*;

use crate::python::plan::MAX;

/// Up to `MAX` objects, kept on the stack. Only the filled slots are touched: with
/// `Option` slots, making and dropping the three of a call wrote and tested all 24 of them,
/// about a tenth of a Python kernel's fast path.
///
/// Hand-written rather than the `arrayvec` crate it replaces (`ArrayVec<Bound<PyAny>, MAX>`
/// behind these same methods, `push` by `try_push`), which measured slower on the path these
/// serve: `op(a)`, a trivial Python CPU kernel on a 1-element NumPy array, took 120 ns with this
/// type and 128 ns with `ArrayVec` (medians of 20 paired rounds; per-round ratio 1.066,
/// quartiles 1.053-1.091; a Native `add` through the CPU fallback and `np.add` stayed within
/// noise), release builds of both, on a shared 2-core machine:
/// `python benches/builds_paired.py BUILD_THIS BUILD_ARRAYVEC --rounds 20`.
pub(super) struct Objs<'py> {
    /// Slots `..len` are initialized.
    pub(super) items: [MaybeUninit<Bound<'py, PyAny>>; MAX],
    pub(super) len: usize,
}

impl<'py> Objs<'py> {
    pub(super) fn new() -> Self {
        Objs {
            items: [const { MaybeUninit::uninit() }; MAX],
            len: 0,
        }
    }

    /// Adds `o`; the plans bound every count by `MAX`, so a full `Objs` is a bug here, which
    /// drops `o` rather than writing past the end.
    pub(super) fn push(&mut self, o: Bound<'py, PyAny>) {
        debug_assert!(self.len < MAX, "more than MAX objects");
        if let Some(slot) = self.items.get_mut(self.len) {
            slot.write(o);
            self.len += 1;
        }
    }

    pub(super) fn as_slice(&self) -> &[Bound<'py, PyAny>] {
        // SAFETY: slots `..len` are initialized (`push` is the only writer and counts them),
        // and `MaybeUninit<T>` has the layout of `T`.
        unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast(), self.len) }
    }

    pub(super) fn iter(&self) -> Items<'_, 'py> {
        self.as_slice().iter()
    }

    pub(super) fn range(&self, from: usize, to: usize) -> Items<'_, 'py> {
        self.as_slice()[from..to].iter()
    }

    /// The last object, taken out.
    pub(super) fn pop(&mut self) -> Option<Bound<'py, PyAny>> {
        let i = self.len.checked_sub(1)?;
        self.len = i;
        // SAFETY: slot `i` was initialized (it was below `len`), and lowering `len` first
        // hands its ownership to the caller, so `drop` does not drop it again.
        Some(unsafe { self.items[i].assume_init_read() })
    }
}

impl Drop for Objs<'_> {
    fn drop(&mut self) {
        for slot in &mut self.items[..self.len] {
            // SAFETY: slots `..len` are initialized and dropped once, here.
            unsafe { slot.assume_init_drop() }
        }
    }
}

/// The objects of a range of `Objs`.
pub(super) type Items<'a, 'py> = std::slice::Iter<'a, Bound<'py, PyAny>>;
