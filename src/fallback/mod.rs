//! The boxed CPU fallback: one kernel, written once, that runs any operator on any backend by
//! moving the backend's tensors to the CPU, running the CPU kernel, writing mutated arguments
//! back and moving the results to the device; and `call_fallback`. The policy is in `policy`.
//!
//! Failure atomicity: the CPU kernel works on CPU copies (or read-only loans) of the arguments,
//! written CPU arguments included, every result is moved to the device and checked against its
//! argument before any argument is written, nothing is written unless the kernel succeeded, and
//! a write-back that fails part way is undone (`write_back`).

//!
//! One file a concern: `cpu_fallback.rs` the kernel and its public entries; `mode.rs` its
//! configuration; `moves.rs` the one step engine every form moves tensors with (step 1 to the
//! CPU, step 3 to the device, step 4 the write-back, all or none, in `write_back.rs`);
//! `boxed.rs` the boxed walk over a stack; `typed.rs` the typed fallback (compiled with a CPU
//! kernel's signature, and the bindings' maps); `slots.rs` where a tensor sits among the
//! arguments; `policy.rs`, `steps.rs` and `target.rs` what the forms share besides.

mod boxed;
mod cpu_fallback;
mod mode;
mod moves;
mod policy;
mod slots;
mod steps;
mod target;
mod typed;
mod write_back;

pub use cpu_fallback::{call_fallback, cpu_fallback, CpuFallback};
pub use mode::ViewPolicy;
#[cfg(feature = "python")]
pub(crate) use moves::Moves;
pub use policy::{
    fallback_policy, set_fallback_policy, set_operator_policy, set_warning_handler, FallbackPolicy,
    WarningHandler, WarningKind,
};
pub use policy::{fallback_policy_from_env, operator_policy};
pub(crate) use target::two_devices;
#[cfg(feature = "python")]
pub(crate) use typed::run_with_maps;
#[cfg(feature = "python")]
pub(crate) use write_back::check_write;
