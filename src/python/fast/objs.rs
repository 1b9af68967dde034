//! A call's Python objects, up to `MAX`, kept on the stack.

use std::mem::MaybeUninit;

use pyo3::prelude::*;

use crate::python::plan::MAX;

/// Up to `MAX` objects, kept on the stack. Only the filled slots are touched: with
/// `Option` slots, making and dropping the three of a call wrote and tested all 24 of them,
/// about a tenth of a Python kernel's fast path.
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
