//! The fast path of a Python call. When the kernel that serves a call is a Python function
//! (registered through `Library.impl` or as a Python boxed fallback), the function is called
//! with the caller's own objects, checked against the schema as binding checks them, without
//! building `IValue`s or asking the core to box anything; only the function's result is checked
//! and converted. The schema facts it needs are computed once per schema ([`Plan`]).
//!
//! It decides nothing the core decides: the key set comes from `dispatch_keys`, and what serves
//! the call from the router (`OperatorHandle::route`, `resolve`), whose `Routed` gives what the
//! entry published for a caller that runs it its own way: a Python function's `PyKernel`
//! (`Routed::foreign`), the Python CPU kernel of the CPU fallback around it
//! (`Routed::cpu_foreign`), a Native kernel's entry on two tensors (`Routed::tensors`), whether
//! the call is counted (`Routed::counted`); anything else runs as the entry's boxed call
//! (`Routed::call_boxed`).
//!
//! The commonest call, every argument given by position and bound to itself (NumPy arrays and
//! exact scalars) with one return, takes a leaner way still ([`run_lean`]): the kernel gets the
//! caller's own argument array, and no bound arguments are built.
//!
//! The fast path never raises an error of its own before the kernel runs: whatever it does not
//! handle (an argument type it has no plan for, an argument that fails the check, a written
//! `bf.Tensor`, a kernel that is not a Python function, an operator redefined since the plan
//! was made) returns `None`, and the caller takes the general path, which raises the errors
//! the fast path would have. Once the kernel has run, its result is converted exactly as the general path
//! converts it (the same functions give the same errors).
//!
//! One file a step: `entry.rs` the entries; `lean.rs` the lean path; `route.rs` what serves
//! the call and running it; `calls.rs` the kernel's call; `fallback.rs` the CPU fallback
//! around a Python CPU kernel; `bind.rs` the arguments; `returns.rs` the returns; `objs.rs`
//! the objects of a call.

mod bind;
mod calls;
mod entry;
mod fallback;
mod lean;
mod objs;
mod returns;
mod route;

pub use entry::{call, call_python, redispatch, redispatch_boxed, redispatch_lean, set_fast_path};
pub use returns::{raised, Lean};
