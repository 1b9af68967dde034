//! # boxfall
//!
//! An operator dispatcher with a boxed CPU fallback, in the manner of PyTorch's c10 dispatcher.
//!
//! The model in a page:
//! - An **operator** is a named schema in PyTorch's schema language
//!   (`demo::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor`), defined by a
//!   [`Library`].
//! - Each operator has at most one **kernel** per [`DispatchKey`]: a backend (`CPU`, `Native`,
//!   a registered `Accel`) or a functionality (`Trace`). A [`KernelFunction`] always has a
//!   *boxed* entry point `fn(op, keys, stack)`; one made from a typed function keeps it too.
//! - A **call** ORs the keys of its tensors (plus the thread's included keys, minus the
//!   excluded ones), takes the highest and runs what the operator's precomputed table holds
//!   there: its own kernel, its `CompositeImplicit` kernel, the key's **backend fallback**, or
//!   nothing (a [`Error::NoKernel`]).
//! - [`cpu_fallback`] is a backend fallback that serves every operator: it moves the key's
//!   tensors to the CPU, runs the CPU kernel, writes mutated arguments back and moves results to
//!   the device, counting per operator ([`metrics`]).
//!
//! ```
//! use boxfall::{cpu_fallback, native, DispatchKey, IValue, KernelFunction, Library, LibraryKind, Tensor};
//!
//! let mut lib = Library::new("crate_doc", LibraryKind::Def)?;
//! let op = lib.define("double(Tensor x) -> Tensor")?;
//! lib.impl_kernel("double", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| {
//!     let a = x.to_host()?.as_f64().cloned().unwrap_or_default();
//!     Ok(Tensor::from_array(a * 2.0))
//! }), false)?;
//!
//! // Native has the CPU fallback, so a Native tensor runs the CPU kernel and comes back Native.
//! boxfall::native::install_fallback()?;
//! let x = native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
//! let y = op.typed::<(Tensor,), Tensor>()?.call((x,))?;
//! assert_eq!(y.device(), native::DEVICE);
//! assert_eq!(y.to_host()?.as_f64().unwrap().as_slice().unwrap(), &[2.0, 4.0]);
//! assert_eq!(boxfall::Dispatcher::counter_value("crate_doc::double"), 1);
//! # Ok::<(), boxfall::Error>(())
//! ```

#![warn(missing_docs)]

pub mod backend;
mod blocking;
pub mod clock;
pub mod dispatcher;
pub mod error;
pub mod fallback;
pub mod graph;
mod host_memory;
pub mod ivalue;
pub mod kernel;
pub mod key;
pub mod library;
pub mod metrics;
pub mod native;
mod rcu;
pub mod resident;
pub mod schema;
mod shared;
// Read only by the Python bindings' views.
#[cfg_attr(not(feature = "python"), allow(dead_code))]
mod strided;
pub mod tensor;
mod thread_slot;

#[cfg(feature = "python")]
mod python;

// The README's Rust block, compiled and run by `cargo test --doc` as the README writes it.
#[cfg(doctest)]
#[doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))]
struct ReadmeDoctests;

pub use dispatcher::{Dispatcher, OperatorHandle, TypedOperatorHandle};
pub use error::{Error, ForeignError, Result, SchemaError};
pub use fallback::{call_fallback, cpu_fallback, CpuFallback, FallbackPolicy};
pub use ivalue::{IValue, Stack};
pub use kernel::KernelFunction;
pub use key::{DispatchKey, DispatchKeySet, KeyKind};
pub use library::{Library, LibraryKind};
pub use schema::FunctionSchema;
pub use tensor::{DType, Device, Tensor};
