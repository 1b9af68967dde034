//! Kernels: every kernel has a boxed entry point `fn(op, keys, stack)`; a kernel made from a
//! typed Rust function also keeps that function, so a typed call with the same signature runs it
//! without boxing. The adapters box or unbox exactly once when the two sides differ.
//!
//! Two properties any kernel may have serve kernels that wrap another key's kernel for every
//! operator (a backend fallback such as the CPU fallback, a logging or batching key): a boxed
//! entry that reads the call's dispatch table (`from_boxed_in_table`), so that it finds the
//! schema and the kernel below its key in the table the call loaded; and a typed entry beside
//! the boxed one (`with_typed_wrapper`), generic over no signature, through which a typed call
//! runs the wrapped kernel's own typed function with no stack in between. A kernel made from a
//! typed function offers the wrapped side of that: its typed function run on a stack's values
//! with their tensors mapped (`call_mapped`).
//!
//! # Why the handle and the table are defined here
//!
//! A kernel is called with the operator's handle (and a kernel that reads the table, with the
//! table); a handle holds its operator's table, and a table holds kernels. Those types refer to
//! each other, so they are defined in one file (`types.rs`), and this module names nothing
//! above it: the dispatcher (`dispatcher/`) adds the routing and the registry to them, the CPU
//! fallback (`fallback/`) its steps. What serves each key, and how, is decided once, when the
//! dispatcher publishes a table: `TableEntry::publish` binds each entry's calls (a boxed call,
//! the typed function, a counted backend's own typed function, a typed wrapper) and records its
//! [`Route`] as information, so that a call runs what was bound and learns nothing from the
//! kernel. A kernel value may call the dispatcher through the handle it gets, as any kernel
//! does (the fallthrough kernel redispatches).
//!
//! A kernel made from a typed function carries, beside its own entry points, the CPU fallback's
//! steps compiled with its signature (a typed entry and a stack entry). They are made where both
//! the signature and the fallback are known: [`KernelFunction::from_unboxed`] is defined in
//! `fallback/typed.rs`, above this module, and hands them to `KernelFunction::from_typed_parts`.
//!
//! One file a concern: `types.rs` the types that refer to each other (the kernel, the table
//! and its entries, the handle, the typed call), whose methods are in `function.rs` (a
//! kernel's constructors and entry points), `entry.rs` (publishing a table entry),
//! `typed_call.rs` (a typed call as a wrapper sees it), `count.rs` (counting a backend's own
//! kernel) and `handle.rs` (the operator's handle); `routes.rs`, `maps.rs` and `unboxed.rs`
//! name none of them.

mod count;
mod entry;
mod function;
mod handle;
mod maps;
mod routes;
mod typed_call;
mod types;
mod unboxed;

pub use handle::Tag;
pub use maps::{TensorBatch, TensorMaps};
pub use routes::{CpuKernel, Route, Source};
pub(crate) use typed_call::call_wrapper;
pub use types::{
    BoxedFn, DispatchTable, KernelCall, KernelCount, KernelFunction, OperatorHandle, TableFn,
    TensorsFn, TypedCall, TypedWrapper,
};
pub(crate) use types::{
    CompiledFallback, OperatorEntry, StackEntry, TableEntry, TypedFallbackFn, TypedWays,
};
pub use unboxed::UnboxedFn;
