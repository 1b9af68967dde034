//! The dispatcher: operator entries, their precomputed dispatch tables, and the registry that
//! recomputes the tables whenever a definition, kernel or fallback comes or goes.
//!
//! Calls read an operator's table inside a read section of the crate's RCU (`rcu.rs`: two plain
//! stores to a per-thread slot: no lock, no allocation, no read-modify-write); the section keeps
//! the table, and so the kernel, alive until the call ends. Registration takes one global
//! mutex, recomputes the affected tables, publishes each with one atomic swap, and frees the
//! replaced ones once no call that could see them is still running.
//!
//! A call is decided in three places, each written once: `dispatch_keys` computes its key set
//! (the arguments' keys, plus this thread's included keys, minus its excluded ones);
//! `DispatchTable::route` masks them by the operator's fallthroughs and finds the entry of
//! the highest key; and `compute_table`, the one table rule, published that entry with its
//! calls bound (`TableEntry::publish`: counting a backend's own kernel, the CPU kernel a CPU
//! fallback runs). A boxed call runs the entry's boxed call, one indirect call; a typed call
//! runs its typed function, else the counted one, else offers itself to the entry's typed
//! wrapper, else boxes once. Nothing at call time asks the route or the kernel how to run.
//! The handle and table types themselves are defined in `kernel.rs` (kernels are called with
//! them); this file adds the routing and the registry.
//!
//! One file a concern: `route.rs` the key set and the route (`dispatch_keys`,
//! `DispatchTable::route`, [`Routed`]); `boxed.rs` the boxed entry points; `typed.rs` the typed
//! handle and its calls; `inspect.rs` what serves each key, for coverage and for the bindings;
//! `registry.rs` the registry, its registrations and `compute_table`; `queries.rs` the
//! [`Dispatcher`]'s look-ups and metrics.

mod boxed;
mod inspect;
mod queries;
mod registry;
mod route;
mod typed;

pub use crate::kernel::{DispatchTable, KernelCall, KernelCount, OperatorHandle, Route, Source};
pub use crate::schema::OpSchema;
pub(crate) use inspect::policy_of;
pub use registry::Dispatcher;
pub(crate) use registry::{defined, Registration};
pub use route::{dispatch_keys, Routed};
pub use typed::TypedOperatorHandle;
