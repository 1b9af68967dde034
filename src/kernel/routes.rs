//! Where a table entry comes from and what serves it, as information: coverage,
//! `dispatch_table()`, and the bindings' own ways to run an entry.

use std::fmt;

/// Where a dispatch table entry comes from.
///
/// ```
/// assert_eq!(boxfall::dispatcher::Source::BackendFallback.to_string(), "backend fallback");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The operator's own kernel for the key.
    Kernel,
    /// The operator's `CompositeImplicit` kernel, serving a backend key.
    CompositeKernel,
    /// The key's backend fallback.
    BackendFallback,
    /// A fallthrough (the key is masked out).
    Fallthrough,
    /// Nothing: a call reaching it is a `NoKernel` error.
    Missing,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Kernel => "kernel",
            Source::CompositeKernel => "composite kernel",
            Source::BackendFallback => "backend fallback",
            Source::Fallthrough => "fallthrough",
            Source::Missing => "missing",
        })
    }
}

/// How the call of one key runs, decided when the operator's table is published (c10's
/// `computeDispatchTableEntryWithDebug`), so that no call learns it by asking the kernel what it
/// is.
///
/// ```
/// use boxfall::kernel::{CpuKernel, Route};
/// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind, Tensor};
/// boxfall::native::install_fallback().unwrap();
/// let mut lib = Library::new("doc_route", LibraryKind::Def).unwrap();
/// let op = lib.define("neg(Tensor x) -> Tensor").unwrap();
/// assert_eq!(op.route_for(DispatchKey::NATIVE), Route::CpuFallback(CpuKernel::Missing));
/// lib.impl_kernel("neg", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| Ok(x)), false).unwrap();
/// assert_eq!(op.route_for(DispatchKey::CPU), Route::Kernel);
/// assert_eq!(op.route_for(DispatchKey::NATIVE), Route::CpuFallback(CpuKernel::Compiled));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The entry's kernel, through its own entry points: the operator's kernel, its composite
    /// kernel, or a backend fallback other than the CPU fallback.
    Kernel,
    /// The CPU fallback, which runs the operator's CPU kernel as the table serves the CPU key.
    CpuFallback(CpuKernel),
    /// A kernel with a typed wrapper
    /// ([`KernelFunction::with_typed_wrapper`](crate::KernelFunction::with_typed_wrapper)) other
    /// than the CPU fallback: a typed call offers itself to the wrapper before it boxes its
    /// arguments; the dispatcher runs a boxed call by the kernel's boxed entry, as a `Kernel` one.
    Wrapper,
    /// A foreign kernel ([`KernelFunction::with_foreign`](crate::KernelFunction::with_foreign)):
    /// the dispatcher runs its boxed entry; the bindings that made it call it their own way, with
    /// its payload.
    Foreign,
    /// A kernel with a typed entry on two tensors
    /// ([`KernelFunction::with_tensors_entry`](crate::KernelFunction::with_tensors_entry)): the
    /// dispatcher runs its boxed entry; a caller holding two tensors may run that entry.
    Tensors,
    /// A fallthrough: the key is out of the operator's mask; no call reaches it.
    Fallthrough,
    /// Nothing: a call reaching it is a `NoKernel` error.
    Missing,
}

/// How the CPU fallback of a table entry runs the CPU kernel (see [`Route::CpuFallback`]).
///
/// ```
/// assert_ne!(boxfall::kernel::CpuKernel::Compiled, boxfall::kernel::CpuKernel::Boxed);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuKernel {
    /// A kernel made from a typed function: the fallback's steps run compiled with its
    /// signature around that function (typed calls of that signature, and boxed calls of a
    /// functional operator), else its boxed entry point.
    Compiled,
    /// Its boxed entry point, on the stack of moved tensors.
    Boxed,
    /// A foreign kernel ([`KernelFunction::with_foreign`](crate::KernelFunction::with_foreign)): as
    /// `Boxed` for the dispatcher; the bindings that made it may run the fallback's steps around it
    /// their own way.
    Foreign,
    /// No CPU kernel serves the operator: the fallback's call is a `NoKernel` error.
    Missing,
}
