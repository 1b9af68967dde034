//! A typed kernel's function pointer, kept with the `TypeId` of its signature.

use std::any::TypeId;

use crate::error::Result;
use crate::key::DispatchKeySet;

/// The typed calling convention of an unboxed kernel.
///
/// ```
/// let f: boxfall::kernel::UnboxedFn<(f64,), f64> = |_keys, (x,)| Ok(x * 2.0);
/// assert_eq!(f(boxfall::DispatchKeySet::EMPTY, (2.0,)).unwrap(), 4.0);
/// ```
pub type UnboxedFn<A, R> = fn(DispatchKeySet, A) -> Result<R>;

/// A typed kernel's function pointer with the `TypeId` of its signature, so that a typed call
/// checks the signature by comparing two words: no virtual call, no pointer chase.
#[derive(Clone, Copy)]
pub(crate) struct UnboxedPtr {
    pub(crate) signature: TypeId,
    pub(crate) address: usize,
}

/// The signature of [`UnboxedPtr::NONE`]: a type no typed call has as its `UnboxedFn`.
struct NoSignature;

impl UnboxedPtr {
    /// A pointer no typed call takes: what a table entry keeps where its typed calls may not
    /// run an unboxed function straight away (`TableEntry::typed`).
    pub(crate) fn none() -> UnboxedPtr {
        UnboxedPtr {
            signature: TypeId::of::<NoSignature>(),
            address: 0,
        }
    }

    /// The function, if it has exactly this signature.
    #[inline(always)]
    pub(crate) fn get<A: 'static, R: 'static>(self) -> Option<UnboxedFn<A, R>> {
        if self.signature != TypeId::of::<UnboxedFn<A, R>>() {
            return None;
        }
        // SAFETY: `address` is a `UnboxedFn<A, R>` cast to `usize` in `from_unboxed`, which
        // recorded that type's id as `signature`; equal ids mean this is the same function
        // pointer type, and function pointers are address-sized. (`none`'s signature is a
        // type no `UnboxedFn` is, so it never gets here.)
        Some(unsafe { std::mem::transmute::<usize, UnboxedFn<A, R>>(self.address) })
    }
}
