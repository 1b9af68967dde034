//! The raw C APIs under the bindings, behind safe wrappers: CPython's (`pyo3::ffi`), PyO3's
//! private trampolines (`pyo3::impl_`, in `entry.rs` only), NumPy's (`numpy::npyffi`, in
//! `numpy_array.rs`), libc's pthread calls (`recursion.rs`) and mimalloc's. No other file of the
//! bindings names them, so a reader of a Python class sees what it does, not how the
//! interpreter is spoken to.
//!
//! They are here for speed: each wrapper replaces a PyO3 call that cost a measured share of a
//! hot call (a tuple per call, a class look-up per argument check, a thread-local per
//! trampoline). The wrappers are `#[inline]`, so a call through one compiles to the raw call.
//!
//! `pyo3::impl_` is not PyO3's public API and may change in any release; `Cargo.toml` pins
//! PyO3 to one version for that reason, and `entry.rs` is the one place to look when it moves.

mod alloc;
mod class;
mod entry;
mod known_type;
mod numpy_array;
mod object;
mod recursion;

pub use alloc::MiMalloc;
pub use class::{has_vectorcall, install_vectorcall, offset_in, Getter, Member, Method};
pub use entry::{
    entry, lean, Entry, FastcallMethod, KeptAttribute, Return, VectorArgs, Vectorcall,
};
pub use known_type::KnownType;
pub use numpy_array::{
    array_over, contiguous_parts, data_address, new_copy, owns_data, read_only_parts,
    read_only_view,
};
pub use object::{
    call_borrowed3_or_raised, gc_untrack, generic_getattr, list_get, list_set, refcnt, vectorcall,
    vectorcall_or_raised,
};
#[cfg(target_os = "linux")]
pub use recursion::thread_stack_bounds;
pub use recursion::{enter_recursive_call, leave_recursive_call};
