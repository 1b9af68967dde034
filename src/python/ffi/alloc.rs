//! The extension module's global allocator: mimalloc, asked for plain `mi_malloc` blocks where
//! they are aligned enough, as Rust's own `System` allocator asks `malloc`.
//!
//! The `mimalloc` crate's allocator calls `mi_malloc_aligned` for every layout. Its fast path
//! takes a block only from a page's free list; when that list is empty (the blocks freed since
//! are on the page's local list, which a call that frees what the last one allocated always
//! leaves), it takes the generic aligned path, which over-allocates and is slow for every
//! `Tensor` a one-element fallback makes. `mi_malloc` collects the local list instead. Every mimalloc block is aligned to 16 bytes (`MI_MAX_ALIGN_SIZE`), or to its size
//! below that (a power of two from 8), so a layout whose alignment is at most 16 and at most
//! its size gets its alignment from `mi_malloc`; any other layout still goes to the aligned
//! entry points.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as ffi;

/// The alignment every `mi_malloc` block of at least this size has.
const MIN_ALIGN: usize = 16;

/// Whether a plain mimalloc block of `size` bytes has the alignment `align`.
#[inline(always)]
fn plain(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

/// mimalloc as the global allocator (see the module's comment).
pub struct MiMalloc;

// SAFETY: every block comes from mimalloc with at least the layout's size and alignment
// (`plain` decides when a plain block has it, as above; otherwise the aligned entry points are
// asked for it), and `mi_free`/`mi_realloc*` take any mimalloc block, aligned or not. A null
// result is passed on as the allocation failure `GlobalAlloc` expects. Exercised by every test
// of the extension module, which allocates through it.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            ffi::mi_malloc(layout.size()).cast()
        } else {
            ffi::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            ffi::mi_zalloc(layout.size()).cast()
        } else {
            ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        ffi::mi_free(ptr.cast::<c_void>());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            ffi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
        } else {
            ffi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
        }
    }
}
