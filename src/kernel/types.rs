//! The types a kernel is called with and a table holds, which refer to each other: the kernel,
//! the table and its entries, the operator's handle, the typed call a wrapper sees. Their
//! methods are in the files of their concerns.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::atomic::AtomicU8;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::backend::Backend;
use crate::error::Result;
use crate::ivalue::Stack;
use crate::key::{DispatchKey, DispatchKeySet, NUM_KEYS};
use crate::metrics::OpMetrics;
use crate::rcu::RcuCell;
use crate::schema::OpSchema;
use crate::tensor::Tensor;

use super::maps::TensorMaps;
use super::routes::{Route, Source};
use super::unboxed::{UnboxedFn, UnboxedPtr};

/// The boxed calling convention: the operator, the call's key set (whose highest key is the
/// kernel's own) and the stack, which holds the arguments on entry and the returns on exit.
///
/// ```
/// fn noop(_op: &boxfall::OperatorHandle, _keys: boxfall::DispatchKeySet, _s: &mut boxfall::Stack) -> boxfall::Result<()> { Ok(()) }
/// let f: &boxfall::kernel::BoxedFn = &noop;
/// # let _ = f;
/// ```
pub type BoxedFn = dyn Fn(&OperatorHandle, DispatchKeySet, &mut Stack) -> Result<()> + Send + Sync;

/// The typed entry of a kernel of two tensors (`KernelFunction::with_tensors_entry`): the
/// operator (for its errors) and the two tensors; `Ok(None)` where the kernel's boxed entry
/// would hand the call on (to the CPU fallback), which the caller then reaches by that boxed
/// entry, on the same arguments.
///
/// ```
/// let f: boxfall::kernel::TensorsFn = |_op, x, _y| Ok(Some(x.clone()));
/// # let _ = f;
/// ```
pub type TensorsFn = fn(&OperatorHandle, &Tensor, &Tensor) -> Result<Option<Tensor>>;

/// The boxed calling convention of a kernel that reads the call's dispatch table: the operator,
/// the table the call loaded (the schema, the kernels of the other keys), the call's key set and
/// the stack.
///
/// ```
/// fn below(op: &boxfall::OperatorHandle, t: &boxfall::dispatcher::DispatchTable, k: boxfall::DispatchKeySet, s: &mut boxfall::Stack) -> boxfall::Result<()> {
///     t.call(op, k.without_highest(), s)
/// }
/// let f: &boxfall::kernel::TableFn = &below;
/// # let _ = f;
/// ```
pub type TableFn =
    dyn Fn(&OperatorHandle, &DispatchTable, DispatchKeySet, &mut Stack) -> Result<()> + Send + Sync;

/// How a CPU fallback kernel binds the CPU kernel it runs (None: none serves the CPU key) into
/// the boxed call of a [`Route::CpuFallback`] entry, once, when the table is published: the
/// bound call looks nothing up in the table.
pub(crate) type CpuFallbackBinder = dyn Fn(Option<KernelFunction>) -> Arc<TableFn> + Send + Sync;

/// A typed kernel's function run on a stack's values with their tensors mapped
/// (`KernelFunction::call_mapped`).
pub(crate) type MappedFn =
    dyn Fn(DispatchKeySet, &mut Stack, &mut dyn TensorMaps) -> Result<()> + Send + Sync;

/// The CPU fallback's steps around a typed CPU kernel's function, compiled with its signature,
/// for a boxed call: the operator, the backend key and its hooks, when the fallback began
/// (clock ticks), and the stack, whose values the entry unboxes as the kernel's boxed entry
/// point would. Made by the fallback (`fallback::typed::stack_entry`).
pub(crate) type StackEntry =
    dyn Fn(&OperatorHandle, DispatchKey, &dyn Backend, u64, &mut Stack) -> Result<()> + Send + Sync;

/// The CPU fallback's steps around a typed CPU kernel's function `f`, compiled with its
/// signature, for a typed call on `keys` in a table; where they do not serve the call, the
/// arguments go, untouched, to `declined` (the boxed fallback). The result is built in the
/// caller's slot: an `Option<Result<R>>` to unwrap would copy the error-sized value once more.
pub(crate) type TypedFallbackFn<A, R> = fn(
    &OperatorHandle,
    &DispatchTable,
    DispatchKeySet,
    UnboxedFn<A, R>,
    A,
    &mut dyn FnMut(A) -> Result<R>,
) -> Result<R>;

/// The CPU fallback's entries compiled with a typed kernel's signature
/// ([`KernelFunction::from_typed_parts`]).
pub(crate) struct CompiledFallback {
    /// For a boxed call: `None` for a signature whose values do not map their tensors.
    pub(crate) stack: Option<Arc<StackEntry>>,
    /// For a typed call: a `TypedFallbackFn` of the kernel's signature, as an address.
    pub(crate) typed: Option<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum KernelKind {
    Regular,
    Fallthrough,
}

/// A kernel, as a dispatch table holds it.
///
/// ```
/// use boxfall::KernelFunction;
/// let k = KernelFunction::from_unboxed::<(f64, f64), f64>(|_, (a, b)| Ok(a + b));
/// assert!(k.has_unboxed());
/// assert!(KernelFunction::fallthrough().is_fallthrough());
/// ```
#[derive(Clone)]
pub struct KernelFunction {
    pub(crate) boxed: Arc<BoxedFn>,
    pub(crate) unboxed: Option<UnboxedPtr>,
    /// For a kernel made from a typed function whose values map their tensors: that function
    /// run on a stack with the tensors mapped (`call_mapped`).
    pub(crate) mapped: Option<Arc<MappedFn>>,
    /// The same, compiled with the CPU fallback's steps (`fallback::typed::stack_entry`): how
    /// the CPU fallback runs a boxed call of an operator whose CPU kernel this is.
    pub(crate) fallback_entry: Option<Arc<StackEntry>>,
    /// The CPU fallback's steps compiled with the typed function's signature, for a typed call
    /// (a `TypedFallbackFn` of the signature `unboxed` records, as an address).
    pub(crate) typed_fallback: Option<usize>,
    /// The boxed entry on a table the caller loaded: the one that reads the call's table
    /// (`from_boxed_in_table`), else the boxed entry's function behind a table it ignores, so
    /// that a table entry runs either with one indirect call.
    pub(crate) in_table: Arc<TableFn>,
    /// Whether `in_table` reads the table (`from_boxed_in_table`).
    pub(crate) reads_table: bool,
    /// The typed entry of a kernel that wraps another (`with_typed_wrapper`).
    pub(crate) wrapper: Option<Arc<dyn TypedWrapper>>,
    /// This is a CPU fallback kernel, and how the table entries it serves bind the CPU kernel
    /// into their call at publication (`Route::CpuFallback`).
    pub(crate) cpu_fallback: Option<Arc<CpuFallbackBinder>>,
    pub(crate) kind: KernelKind,
    /// What the code that made the kernel attached to it (`from_boxed_with_tag`).
    pub(crate) tag: Option<Arc<dyn Any + Send + Sync>>,
    /// A foreign kernel's payload (`with_foreign`): the entries it serves route
    /// [`Route::Foreign`].
    pub(crate) foreign: Option<Arc<dyn Any + Send + Sync>>,
    /// A typed entry on two tensors (`with_tensors_entry`): the entries it serves route
    /// [`Route::Tensors`].
    pub(crate) tensors: Option<TensorsFn>,
    /// Calls of it run outside the dispatcher's read section (`long_running`).
    pub(crate) long_running: bool,
}

/// Whether a call runs a backend's own kernel of its operator, and which backend's
/// ([`Routed::counted`](crate::dispatcher::Routed::counted)): such calls are counted in the
/// operator's `kernel_calls`, and timed in its `kernel_call_ns` while
/// [`crate::metrics::profiling`].
///
/// ```
/// use boxfall::dispatcher::KernelCount;
/// use boxfall::{Library, LibraryKind};
/// let mut lib = Library::new("doc_kernel_count", LibraryKind::Def).unwrap();
/// let op = lib.define("f(int x) -> int").unwrap();
/// assert_eq!(KernelCount::NONE.run(&op, || 7), 7); // not counted
/// assert_eq!(op.metrics().snapshot().kernel_calls, 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelCount(pub(crate) Option<DispatchKey>);

/// A counted kernel call in flight ([`KernelCount::begin`]); [`end`](Self::end) counts it.
/// Dropped without `end`, it is not counted.
///
/// ```
/// use boxfall::dispatcher::KernelCount;
/// use boxfall::{Library, LibraryKind};
/// let mut lib = Library::new("doc_kernel_call", LibraryKind::Def).unwrap();
/// let op = lib.define("f(int x) -> int").unwrap();
/// KernelCount::NONE.begin().end(&op); // not counted
/// assert_eq!(op.metrics().snapshot().kernel_calls, 0);
/// ```
#[must_use]
#[derive(Clone, Copy, Debug)]
pub struct KernelCall {
    pub(crate) key: Option<DispatchKey>,
    /// Clock ticks at the start while profiling, else 0.
    pub(crate) start: u64,
}

/// A kernel's typed entry that serves every signature: a typed call that reaches the kernel
/// (dispatched, or through `call_fallback`) hands it a [`TypedCall`], whose arguments and
/// returns it cannot name but can pass, with their tensors mapped, to another kernel's typed
/// function of the same signature (`TypedCall::run`), or on below a key (`TypedCall::redispatch`).
/// It returns `None` to decline before it runs anything: the call then boxes once and runs the
/// boxed entry. A wrapper runs inside the dispatcher's read section unless the table says a
/// kernel below runs long.
///
/// ```
/// use boxfall::kernel::{TypedCall, TypedWrapper};
/// use boxfall::{dispatcher::DispatchTable, DispatchKey, DispatchKeySet, KernelFunction, Library, LibraryKind, OperatorHandle};
/// // A wrapper that passes every typed call on to the CPU kernel.
/// struct ToCpu;
/// impl TypedWrapper for ToCpu {
///     fn call_typed(&self, op: &OperatorHandle, t: &DispatchTable, _: DispatchKeySet, call: &mut TypedCall<'_>) -> Option<boxfall::Result<()>> {
///         Some(call.redispatch(op, t, DispatchKey::CPU.set()))
///     }
/// }
/// let mut lib = Library::new("doc_typed_wrapper", LibraryKind::Def).unwrap();
/// let op = lib.define("f(int x) -> int").unwrap();
/// lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 1)), false).unwrap();
/// let boxed = KernelFunction::from_boxed(|_, _, _| Err(boxfall::Error::Fallback("boxed".into())));
/// lib.impl_kernel("f", DispatchKey::NATIVE, boxed.with_typed_wrapper(ToCpu), false).unwrap();
/// let f = op.typed::<(i64,), i64>().unwrap();
/// assert_eq!(f.call_fallback(&op.kernel_for(DispatchKey::NATIVE).0.unwrap(), (1,)).unwrap(), 2);
/// ```
pub trait TypedWrapper: Send + Sync + 'static {
    /// Serves the typed call `call` on `keys` (the call's key set; its highest key is the
    /// kernel's own) with `table` the operator's table as the call loaded it, or declines
    /// (`None`, having run nothing).
    fn call_typed(
        &self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        call: &mut TypedCall<'_>,
    ) -> Option<Result<()>>;
}

/// A typed call in flight, as a [`TypedWrapper`] sees it: typed arguments of a signature it
/// does not know, and a place for the returns. Made by the dispatcher.
pub struct TypedCall<'a> {
    pub(crate) signature: TypeId,
    pub(crate) maps_tensors: bool,
    pub(crate) body: &'a mut dyn TypedBody,
}

/// The typed side of a `TypedCall`, generic over the signature.
pub(crate) trait TypedBody {
    fn run(
        &mut self,
        kernel: &KernelFunction,
        keys: DispatchKeySet,
        maps: &mut dyn TensorMaps,
    ) -> Result<()>;
    fn redispatch(
        &mut self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
    ) -> Result<()>;
    fn run_cpu_fallback(
        &mut self,
        cpu: &KernelFunction,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        boxed: &TableFn,
    ) -> Option<Result<()>>;
}

/// How a typed call continues on given keys in a table the caller loaded: the dispatcher's
/// typed route (`dispatcher::call_in_table`), which the dispatcher hands to the wrapper calls it
/// makes, so that this file names no routing of its own.
pub(crate) type TypedRedispatch<A, R> =
    fn(&OperatorHandle, &DispatchTable, DispatchKeySet, A) -> Result<R>;

/// How a typed call boxes its arguments once for a boxed call on a table and unboxes the
/// returns: the dispatcher's (`dispatcher::call_boxing_in`), handed over as `TypedRedispatch`.
pub(crate) type TypedBoxing<A, R> =
    fn(&OperatorHandle, &DispatchTable, DispatchKeySet, &TableFn, A) -> Result<R>;

/// The two ways a typed call continues that the dispatcher owns ([`TypedRedispatch`],
/// [`TypedBoxing`]).
pub(crate) struct TypedWays<A, R> {
    pub(crate) redispatch: TypedRedispatch<A, R>,
    pub(crate) boxing: TypedBoxing<A, R>,
}

/// One key's entry of a dispatch table, published once ([`TableEntry::publish`], c10's
/// `computeDispatchTableEntryWithDebug` with its `KernelFunction` filled in): the kernel that
/// serves it, where it comes from, its [`Route`] (information, for coverage and for the
/// bindings' own ways to run it) and its calls, bound to what they run, so that a call runs
/// them without asking what the kernel or the route is.
#[derive(Clone)]
pub(crate) struct TableEntry {
    pub(crate) kernel: Option<KernelFunction>,
    pub(crate) source: Source,
    pub(crate) route: Route,
    /// Whose own kernel this is, if a backend's (its calls count in `kernel_calls`).
    pub(crate) count: KernelCount,
    /// For a [`Route::Foreign`] entry, its kernel's payload.
    pub(crate) foreign: Option<ForeignRef>,
    /// For a `Route::CpuFallback(CpuKernel::Foreign)` entry, the CPU kernel's payload.
    pub(crate) cpu_foreign: Option<ForeignRef>,
    /// For a [`Route::Tensors`] entry, the kernel's typed entry on two tensors.
    pub(crate) tensors: Option<TensorsFn>,
    /// The boxed call, with the counting of a backend's own kernel and the CPU kernel a CPU
    /// fallback runs bound in (None: no kernel).
    pub(crate) boxed: Option<Arc<TableFn>>,
    /// The kernel's typed function where a typed call of its signature runs it and nothing
    /// else (not counted), else [`UnboxedPtr::none`]: the typed call's one test on its
    /// common path.
    pub(crate) typed: UnboxedPtr,
    /// A backend's own kernel's typed function (counted by `count`), else `UnboxedPtr::none`.
    pub(crate) counted_typed: UnboxedPtr,
    /// What a typed call that neither typed function serves offers itself to before it boxes
    /// its arguments once for `boxed`: the kernel's typed wrapper (the CPU fallback's, which
    /// runs its steps compiled with the CPU kernel's signature, only where that kernel has
    /// them).
    pub(crate) wrapper: Option<Arc<dyn TypedWrapper>>,
}

/// A foreign kernel's payload ([`KernelFunction::with_foreign`]) as a table entry records it
/// at publication: its type and where it lies, read once out of the kernel's `Arc<dyn Any>`,
/// so that the router gives it back by comparing the type with a constant and a cast, where a
/// downcast asked the type through the vtable on every call.
#[derive(Clone)]
pub(crate) struct ForeignRef {
    pub(crate) type_id: TypeId,
    pub(crate) payload: std::ptr::NonNull<()>,
    /// The payload `payload` points to, held while the entry lives.
    pub(crate) _held: Arc<dyn Any + Send + Sync>,
}

// SAFETY: `payload` points into `_held`'s value, which is `Send + Sync`, and is only ever read
// through a shared reference (`get`).
unsafe impl Send for ForeignRef {}

// SAFETY: as for `Send`.
unsafe impl Sync for ForeignRef {}

/// An operator's table as one call sees it: its kernels by key, its fallthrough mask and its
/// schema, all from one load (a kernel in it lives while the read section does). A kernel that
/// reads the table (`KernelFunction::from_boxed_in_table`) gets the one its call loaded.
///
/// ```
/// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind};
/// let mut lib = Library::new("doc_dispatch_table", LibraryKind::Def).unwrap();
/// let op = lib.define("f(int x) -> int").unwrap();
/// lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x)), false).unwrap();
/// op.with_table(DispatchKey::CPU.set(), |t| {
///     assert!(t.kernel(DispatchKey::CPU.set()).is_some_and(|k| k.has_unboxed()));
///     assert!(t.kernel(DispatchKey::NATIVE.set()).is_none());
///     assert_eq!(t.schema(&op).unwrap().text, "doc_dispatch_table::f(int x) -> int");
/// });
/// ```
pub struct DispatchTable {
    pub(crate) entries: [TableEntry; NUM_KEYS],
    /// The keys not served by a fallthrough.
    pub(crate) mask: u64,
    /// The keys whose kernel runs long (`KernelFunction::long_running`; a kernel that reads
    /// the table, with a long one below it): a call that may reach one leaves the read section
    /// first.
    pub(crate) long: u64,
    pub(crate) schema: Option<Arc<OpSchema>>,
    /// The kernel a call on the CPU key reaches (none where nothing, or a fallthrough, serves
    /// it): the CPU kernel a CPU fallback runs, bound when the table is published, so that a
    /// CPU fallback called directly (`call_fallback`, `CpuFallback::call`) looks it up no more
    /// than a routed entry's bound call does.
    pub(crate) cpu: Option<KernelFunction>,
}

pub(crate) struct OperatorEntry {
    pub(crate) name: String,
    pub(crate) table: RcuCell<DispatchTable>,
    pub(crate) metrics: CachePadded<OpMetrics>,
    pub(crate) policy: AtomicU8,
    /// The operator's [`Tag`]s, a bit each.
    pub(crate) tags: AtomicU8,
    /// What a layer above keeps here, of its own type, made at its first use: graph mode's
    /// slot (`graph/rules/registry.rs`'s `OpRule`), which holds the operator's registered shape
    /// rule, loaded by a recorded call with no name matched nor anything looked up, and what it
    /// decides once from the name (an in-place operator's functional counterpart).
    pub(crate) by_name: std::sync::OnceLock<Box<dyn Any + Send + Sync>>,
}

/// A handle to an operator: cheap to clone, valid for the life of the process.
///
/// ```
/// use boxfall::{Library, LibraryKind};
/// let mut lib = Library::new("doc_handle", LibraryKind::Def).unwrap();
/// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
/// assert_eq!(op.name(), "doc_handle::f");
/// ```
#[derive(Clone)]
pub struct OperatorHandle(pub(crate) Arc<OperatorEntry>);

impl fmt::Debug for OperatorHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OperatorHandle({})", self.0.name)
    }
}

impl PartialEq for OperatorHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
