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
//! each other, so they are defined in this one file, which names nothing above it: the
//! dispatcher (`dispatcher.rs`) adds the routing and the registry to them, the CPU fallback
//! (`fallback/`) its steps. What serves each key, and how, is decided once, when the
//! dispatcher publishes a table: `TableEntry::publish` binds each entry's calls (a boxed call,
//! the typed function, a counted backend's own typed function, a typed wrapper) and records its
//! [`Route`] as information, so that a call runs what was bound and learns nothing from the
//! kernel. A kernel value may call the dispatcher through the handle it gets, as any kernel
//! does (the fallthrough kernel redispatches).
//!
//! A kernel made from a typed function carries, beside its own entry points, the CPU fallback's
//! steps compiled with its signature (a typed entry and a stack entry). They are made where both
//! the signature and the fallback are known: [`KernelFunction::from_unboxed`] is defined in
//! `fallback/typed.rs`, above this file, and hands them to `KernelFunction::from_typed_parts`.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::atomic::AtomicU8;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::ivalue::{CallArgs, CallReturns, Stack, TensorMap};
use crate::key::{DispatchKey, DispatchKeySet, NUM_KEYS};
use crate::metrics::OpMetrics;
use crate::rcu::{self, leave_holding, RcuCell};
use crate::schema::OpSchema;
use crate::tensor::Tensor;

/// The boxed calling convention: the operator, the call's key set (whose highest key is the
/// kernel's own) and the stack, which holds the arguments on entry and the returns on exit.
///
/// ```
/// fn noop(_op: &boxfall::OperatorHandle, _keys: boxfall::DispatchKeySet, _s: &mut boxfall::Stack) -> boxfall::Result<()> { Ok(()) }
/// let f: &boxfall::kernel::BoxedFn = &noop;
/// # let _ = f;
/// ```
pub type BoxedFn = dyn Fn(&OperatorHandle, DispatchKeySet, &mut Stack) -> Result<()> + Send + Sync;

/// The typed calling convention of an unboxed kernel.
///
/// ```
/// let f: boxfall::kernel::UnboxedFn<(f64,), f64> = |_keys, (x,)| Ok(x * 2.0);
/// assert_eq!(f(boxfall::DispatchKeySet::EMPTY, (2.0,)).unwrap(), 4.0);
/// ```
pub type UnboxedFn<A, R> = fn(DispatchKeySet, A) -> Result<R>;

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
type MappedFn = dyn Fn(DispatchKeySet, &mut Stack, &mut dyn TensorMaps) -> Result<()> + Send + Sync;

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
    boxed: Arc<BoxedFn>,
    unboxed: Option<UnboxedPtr>,
    /// For a kernel made from a typed function whose values map their tensors: that function
    /// run on a stack with the tensors mapped (`call_mapped`).
    mapped: Option<Arc<MappedFn>>,
    /// The same, compiled with the CPU fallback's steps (`fallback::typed::stack_entry`): how
    /// the CPU fallback runs a boxed call of an operator whose CPU kernel this is.
    fallback_entry: Option<Arc<StackEntry>>,
    /// The CPU fallback's steps compiled with the typed function's signature, for a typed call
    /// (a `TypedFallbackFn` of the signature `unboxed` records, as an address).
    typed_fallback: Option<usize>,
    /// The boxed entry on a table the caller loaded: the one that reads the call's table
    /// (`from_boxed_in_table`), else the boxed entry's function behind a table it ignores, so
    /// that a table entry runs either with one indirect call.
    in_table: Arc<TableFn>,
    /// Whether `in_table` reads the table (`from_boxed_in_table`).
    reads_table: bool,
    /// The typed entry of a kernel that wraps another (`with_typed_wrapper`).
    wrapper: Option<Arc<dyn TypedWrapper>>,
    /// This is a CPU fallback kernel, and how the table entries it serves bind the CPU kernel
    /// into their call at publication (`Route::CpuFallback`).
    cpu_fallback: Option<Arc<CpuFallbackBinder>>,
    pub(crate) kind: KernelKind,
    /// What the code that made the kernel attached to it (`from_boxed_with_tag`).
    tag: Option<Arc<dyn Any + Send + Sync>>,
    /// A foreign kernel's payload (`with_foreign`): the entries it serves route
    /// [`Route::Foreign`].
    foreign: Option<Arc<dyn Any + Send + Sync>>,
    /// A typed entry on two tensors (`with_tensors_entry`): the entries it serves route
    /// [`Route::Tensors`].
    tensors: Option<TensorsFn>,
    /// Calls of it run outside the dispatcher's read section (`long_running`).
    long_running: bool,
}

/// A typed kernel's function pointer with the `TypeId` of its signature, so that a typed call
/// checks the signature by comparing two words: no virtual call, no pointer chase.
#[derive(Clone, Copy)]
pub(crate) struct UnboxedPtr {
    signature: TypeId,
    address: usize,
}

/// The signature of [`UnboxedPtr::NONE`]: a type no typed call has as its `UnboxedFn`.
struct NoSignature;

impl UnboxedPtr {
    /// A pointer no typed call takes: what a table entry keeps where its typed calls may not
    /// run an unboxed function straight away (`TableEntry::typed`).
    fn none() -> UnboxedPtr {
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

impl KernelFunction {
    /// A kernel with only a boxed entry point.
    ///
    /// ```
    /// let k = boxfall::KernelFunction::from_boxed(|_op, _keys, stack| { stack.clear(); Ok(()) });
    /// assert!(!k.has_unboxed());
    /// ```
    pub fn from_boxed(
        f: impl Fn(&OperatorHandle, DispatchKeySet, &mut Stack) -> Result<()> + Send + Sync + 'static,
    ) -> KernelFunction {
        let (boxed, in_table) = entry_points(f);
        KernelFunction {
            boxed,
            in_table,
            reads_table: false,
            unboxed: None,
            mapped: None,
            fallback_entry: None,
            typed_fallback: None,
            wrapper: None,
            cpu_fallback: None,
            kind: KernelKind::Regular,
            tag: None,
            foreign: None,
            tensors: None,
            long_running: false,
        }
    }

    /// A kernel from a typed function with the CPU fallback's entries compiled with its
    /// signature (`fallback`): how [`from_unboxed`](Self::from_unboxed), defined with the
    /// fallback, makes it. Boxed callers reach `f` through an adapter that unboxes the stack
    /// once and boxes the returns once.
    pub(crate) fn from_typed_parts<A, R>(
        f: UnboxedFn<A, R>,
        fallback: CompiledFallback,
    ) -> KernelFunction
    where
        A: CallArgs + 'static,
        R: CallReturns + 'static,
    {
        let (boxed, in_table) =
            entry_points(move |_op: &OperatorHandle, keys, stack: &mut Stack| {
                if stack.len() != A::LEN {
                    return Err(crate::Error::Kernel {
                        context: "unboxing".into(),
                        message: format!(
                            "the kernel takes {} arguments, the stack holds {}",
                            A::LEN,
                            stack.len()
                        ),
                    });
                }
                let args = A::pop_from(stack)?;
                f(keys, args)?.push_onto(stack);
                Ok(())
            });
        KernelFunction {
            boxed,
            in_table,
            reads_table: false,
            unboxed: Some(UnboxedPtr {
                signature: TypeId::of::<UnboxedFn<A, R>>(),
                address: f as usize,
            }),
            mapped: mapped_entry(f),
            fallback_entry: fallback.stack,
            typed_fallback: fallback.typed,
            wrapper: None,
            cpu_fallback: None,
            kind: KernelKind::Regular,
            tag: None,
            foreign: None,
            tensors: None,
            long_running: false,
        }
    }

    /// A boxed kernel carrying `tag`, by which the code that made it recognises it later (the
    /// Python bindings call their own kernels without boxing when they can).
    ///
    /// ```
    /// let k = boxfall::KernelFunction::from_boxed_with_tag(|_, _, _| Ok(()), "mine");
    /// assert_eq!(k.tag::<&str>(), Some(&"mine"));
    /// assert!(k.tag::<u32>().is_none() && !k.has_unboxed());
    /// ```
    pub fn from_boxed_with_tag<T: Any + Send + Sync>(
        f: impl Fn(&OperatorHandle, DispatchKeySet, &mut Stack) -> Result<()> + Send + Sync + 'static,
        tag: T,
    ) -> KernelFunction {
        let mut k = KernelFunction::from_boxed(f);
        k.tag = Some(Arc::new(tag));
        k
    }

    /// The same kernel carrying `tag` (see [`from_boxed_with_tag`](Self::from_boxed_with_tag)).
    ///
    /// ```
    /// let k = boxfall::KernelFunction::fallthrough().with_tag(3u8);
    /// assert_eq!(k.tag::<u8>(), Some(&3));
    /// ```
    pub fn with_tag<T: Any + Send + Sync>(mut self, tag: T) -> KernelFunction {
        self.tag = Some(Arc::new(tag));
        self
    }

    /// The tag given to `from_boxed_with_tag`, if it is a `T`.
    ///
    /// ```
    /// assert!(boxfall::cpu_fallback().tag::<u32>().is_none());
    /// ```
    #[inline]
    pub fn tag<T: Any>(&self) -> Option<&T> {
        self.tag.as_deref().and_then(|t| t.downcast_ref::<T>())
    }

    /// The same kernel as a *foreign* one: a function of another language, which the code that
    /// registered it (the Python bindings) calls its own way, with `payload`, where it can; the
    /// dispatcher calls its boxed entry. A table entry it serves routes [`Route::Foreign`] (a CPU
    /// fallback whose CPU kernel it is, [`CpuKernel::Foreign`]), and the router gives the payload
    /// back ([`Routed::foreign`](crate::dispatcher::Routed::foreign)), so that no caller asks
    /// the kernel what it is.
    ///
    /// ```
    /// use boxfall::{kernel::Route, DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_with_foreign", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// let k = KernelFunction::from_boxed(|_, _, _| Ok(())).with_foreign(std::sync::Arc::new("a Python function"));
    /// lib.impl_kernel("f", DispatchKey::CPU, k, false).unwrap();
    /// assert_eq!(op.route_for(DispatchKey::CPU), Route::Foreign);
    /// ```
    pub fn with_foreign<T: Any + Send + Sync>(mut self, payload: Arc<T>) -> KernelFunction {
        self.foreign = Some(payload);
        self
    }

    /// Whether the kernel is a foreign one ([`with_foreign`](Self::with_foreign)).
    ///
    /// ```
    /// assert!(!boxfall::KernelFunction::fallthrough().is_foreign());
    /// ```
    #[inline(always)]
    pub fn is_foreign(&self) -> bool {
        self.foreign.is_some()
    }

    /// The same kernel with a typed entry on two tensors (Native's two-array kernels), which a
    /// caller holding the two tensors runs with no stack: a table entry it serves routes
    /// [`Route::Tensors`], and the router gives the entry
    /// ([`Routed::tensors`](crate::dispatcher::Routed::tensors)). Its result and errors must be
    /// the boxed entry's.
    ///
    /// ```
    /// let k = boxfall::KernelFunction::from_boxed(|_, _, _| Ok(())).with_tensors_entry(|_, x, _| Ok(Some(x.clone())));
    /// assert!(k.tensors_entry().is_some());
    /// ```
    pub fn with_tensors_entry(mut self, f: TensorsFn) -> KernelFunction {
        self.tensors = Some(f);
        self
    }

    /// The typed entry on two tensors ([`with_tensors_entry`](Self::with_tensors_entry)).
    ///
    /// ```
    /// assert!(boxfall::KernelFunction::fallthrough().tensors_entry().is_none());
    /// ```
    #[inline(always)]
    pub fn tensors_entry(&self) -> Option<TensorsFn> {
        self.tensors
    }

    /// The kernel that passes the call on to the next key: registering it for a key takes the
    /// key out of the operator's dispatch mask, so it costs nothing per call.
    ///
    /// ```
    /// use boxfall::{dispatcher::Source, DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_fallthrough", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 1)), false).unwrap();
    /// lib.impl_kernel("f", DispatchKey::NATIVE, KernelFunction::fallthrough(), false).unwrap();
    /// assert_eq!(op.kernel_for(DispatchKey::NATIVE).1, Source::Fallthrough);
    /// let mut stack = vec![boxfall::IValue::Int(1)];
    /// op.call_boxed_with_keys(DispatchKey::NATIVE.set() | DispatchKey::CPU, &mut stack).unwrap();
    /// assert_eq!(stack[0].to_int(), Some(2)); // Native passed the call on to CPU
    /// ```
    pub fn fallthrough() -> KernelFunction {
        let (boxed, in_table) = entry_points(|op: &OperatorHandle, keys, stack: &mut Stack| {
            op.redispatch_boxed(keys, stack)
        });
        KernelFunction {
            boxed,
            in_table,
            reads_table: false,
            unboxed: None,
            mapped: None,
            fallback_entry: None,
            typed_fallback: None,
            wrapper: None,
            cpu_fallback: None,
            kind: KernelKind::Fallthrough,
            tag: None,
            foreign: None,
            tensors: None,
            long_running: false,
        }
    }

    /// A boxed kernel that reads the call's dispatch table: dispatched, it gets the table the
    /// call loaded (with the schema and every key's kernel), so that it can run a kernel of
    /// another key without loading it again ([`DispatchTable::call`]); called boxed
    /// ([`call_boxed`](Self::call_boxed)), it loads the table itself. How a backend fallback that
    /// redispatches is written; the CPU fallback is one. A kernel below it that runs long makes
    /// calls reaching it leave the dispatcher's read section first, as a long kernel's do.
    ///
    /// ```
    /// use boxfall::{DispatchKey, IValue, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_in_table", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 1)), false).unwrap();
    /// // Native: the CPU kernel, found in the call's table, on a doubled argument.
    /// let k = KernelFunction::from_boxed_in_table(|op, table, _keys, stack| {
    ///     stack[0] = IValue::Int(2 * stack[0].to_int().unwrap_or(0));
    ///     table.call(op, DispatchKey::CPU.set(), stack)
    /// });
    /// assert!(k.reads_table());
    /// lib.impl_kernel("f", DispatchKey::NATIVE, k, false).unwrap();
    /// let mut stack = vec![IValue::Int(5)];
    /// op.call_boxed_with_keys(DispatchKey::NATIVE.set(), &mut stack).unwrap();
    /// assert_eq!(stack[0].to_int(), Some(11));
    /// ```
    pub fn from_boxed_in_table(
        f: impl Fn(&OperatorHandle, &DispatchTable, DispatchKeySet, &mut Stack) -> Result<()>
            + Send
            + Sync
            + 'static,
    ) -> KernelFunction {
        let f = Arc::new(f);
        let g = f.clone();
        let mut k =
            KernelFunction::from_boxed(move |op: &OperatorHandle, keys, stack: &mut Stack| {
                op.with_table(keys, |table| g(op, table, keys, stack))
            });
        k.in_table = f;
        k.reads_table = true;
        k
    }

    /// The same kernel with a typed entry beside its boxed one: a typed call that reaches the
    /// kernel offers itself to `wrapper` (which may run it without boxing, or decline) before
    /// it boxes its arguments. See [`TypedWrapper`].
    ///
    /// ```
    /// use boxfall::kernel::{TypedCall, TypedWrapper};
    /// use boxfall::{dispatcher::DispatchTable, DispatchKeySet, KernelFunction, OperatorHandle};
    /// struct Declines;
    /// impl TypedWrapper for Declines {
    ///     fn call_typed(&self, _: &OperatorHandle, _: &DispatchTable, _: DispatchKeySet, _: &mut TypedCall<'_>) -> Option<boxfall::Result<()>> { None }
    /// }
    /// let k = KernelFunction::from_boxed(|_, _, _| Ok(())).with_typed_wrapper(Declines);
    /// assert!(k.typed_wrapper().is_some());
    /// ```
    pub fn with_typed_wrapper(mut self, wrapper: impl TypedWrapper) -> KernelFunction {
        self.wrapper = Some(Arc::new(wrapper));
        self
    }

    /// The same kernel, marked as a CPU fallback: a table entry it serves gets the route
    /// [`Route::CpuFallback`] when the table is published, with its boxed call made by `bind`
    /// around the CPU kernel of that table, and its typed call the CPU kernel's compiled
    /// fallback entry ([`typed_fallback`](Self::typed_fallback)) on the same kernel.
    pub(crate) fn marked_cpu_fallback(mut self, bind: Arc<CpuFallbackBinder>) -> KernelFunction {
        self.cpu_fallback = Some(bind);
        self
    }

    /// Whether this is a CPU fallback kernel (`CpuFallback::kernel`): a property the kernel was
    /// made with, which the dispatcher reads when it publishes a table.
    ///
    /// ```
    /// assert!(boxfall::cpu_fallback().is_cpu_fallback());
    /// assert!(!boxfall::KernelFunction::fallthrough().is_cpu_fallback());
    /// ```
    #[inline(always)]
    pub fn is_cpu_fallback(&self) -> bool {
        self.cpu_fallback.is_some()
    }

    /// The boxed entry on a table the caller loaded, as [`call_boxed_in`](Self::call_boxed_in)
    /// runs it.
    #[inline(always)]
    pub(crate) fn in_table(&self) -> &Arc<TableFn> {
        &self.in_table
    }

    /// The CPU fallback's typed entry compiled with this kernel's signature, if the kernel was
    /// made from a typed function of exactly the signature `A -> R`, together with that
    /// function.
    #[inline(always)]
    pub(crate) fn typed_fallback<A: 'static, R: 'static>(
        &self,
    ) -> Option<(UnboxedFn<A, R>, TypedFallbackFn<A, R>)> {
        let f = self.unboxed::<A, R>()?;
        let address = self.typed_fallback?;
        // SAFETY: `typed_fallback` is set only by `from_typed_parts::<A0, R0>`, from a
        // `TypedFallbackFn<A0, R0>` cast to `usize`, where `unboxed` records `A0 -> R0`; the
        // signature check of `unboxed::<A, R>` above passed, so `A = A0` and `R = R0`, and this
        // is that function pointer type (function pointers are address-sized).
        Some((f, unsafe {
            std::mem::transmute::<usize, TypedFallbackFn<A, R>>(address)
        }))
    }

    /// A kernel made from a typed function, run on the values of `stack` (as its boxed entry
    /// point would) with the argument tensors replaced by `maps.args` and each returned tensor by
    /// `maps.ret`: the typed function is called once, with no second stack. `None` for a kernel
    /// that offers no such entry (a boxed one, a long-running one, or one whose signature has a
    /// value that cannot map its tensors). The caller checks the stack's length.
    ///
    /// ```
    /// use boxfall::kernel::{TensorBatch, TensorMaps};
    /// use boxfall::{DispatchKeySet, IValue, KernelFunction, Tensor};
    /// struct Count(usize);
    /// impl TensorMaps for Count {
    ///     fn args(&mut self, ts: &mut TensorBatch<'_, '_>, _: bool) -> boxfall::Result<()> { self.0 += ts.iter_mut().count(); Ok(()) }
    ///     fn ret(&mut self, t: Tensor) -> boxfall::Result<Tensor> { self.0 += 10; Ok(t) }
    /// }
    /// let k = KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (t,)| Ok(t));
    /// let mut stack = vec![IValue::Tensor(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()))];
    /// let mut count = Count(0);
    /// k.call_mapped(DispatchKeySet::EMPTY, &mut stack, &mut count).unwrap().unwrap();
    /// assert_eq!((count.0, stack.len()), (11, 1));
    /// ```
    #[inline(always)]
    pub fn call_mapped(
        &self,
        keys: DispatchKeySet,
        stack: &mut Stack,
        maps: &mut dyn TensorMaps,
    ) -> Option<Result<()>> {
        self.mapped.as_deref().map(|f| f(keys, stack, maps))
    }

    /// The CPU fallback's entry compiled with this kernel's signature, if it was made from a
    /// typed function whose values map their tensors (as `call_mapped` is).
    #[inline(always)]
    pub(crate) fn fallback_entry(&self) -> Option<&StackEntry> {
        self.fallback_entry.as_deref()
    }

    /// Whether the CPU fallback's steps were compiled with this kernel's signature (a kernel
    /// made from a typed function whose values map their tensors): what a table's CPU fallback
    /// entries record as [`CpuKernel::Compiled`].
    #[inline]
    pub(crate) fn has_compiled_fallback(&self) -> bool {
        self.typed_fallback.is_some() || self.fallback_entry.is_some()
    }

    /// Whether the kernel offers [`call_mapped`](Self::call_mapped).
    ///
    /// ```
    /// use boxfall::{KernelFunction, Tensor};
    /// assert!(KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (t,)| Ok(t)).has_mapped());
    /// assert!(!KernelFunction::from_boxed(|_, _, _| Ok(())).has_mapped());
    /// ```
    #[inline(always)]
    pub fn has_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// The same kernel, marked as one whose calls may run for long (a Python function, a
    /// remote call, anything that blocks). The dispatcher calls it outside its read section,
    /// holding the operator's table by a reference count, so that while it runs, tables
    /// replaced by registrations on other threads are freed as usual; a quick kernel runs
    /// inside the section, which costs no atomic operation. Python kernels are marked so.
    /// A long-running kernel keeps only its boxed entry point: typed calls box once.
    ///
    /// ```
    /// let k = boxfall::KernelFunction::from_boxed(|_, _, _| Ok(())).long_running();
    /// assert!(k.runs_long());
    /// assert!(!boxfall::KernelFunction::from_boxed(|_, _, _| Ok(())).runs_long());
    /// ```
    pub fn long_running(mut self) -> KernelFunction {
        self.long_running = true;
        // Typed calls of an unboxed kernel run it inside the read section with no test; a
        // long-running one is reached boxed, where the dispatcher looks (its cost is the
        // kernel's, not the boxing).
        self.unboxed = None;
        self.mapped = None;
        self.fallback_entry = None;
        self.typed_fallback = None;
        self
    }

    /// Whether calls of this kernel run outside the dispatcher's read section
    /// ([`long_running`](Self::long_running)).
    ///
    /// ```
    /// assert!(!boxfall::cpu_fallback().runs_long()); // it is long only if its CPU kernel is
    /// ```
    #[inline]
    pub fn runs_long(&self) -> bool {
        self.long_running
    }

    /// Whether this is the fallthrough kernel.
    ///
    /// ```
    /// use boxfall::KernelFunction;
    /// assert!(KernelFunction::fallthrough().is_fallthrough());
    /// assert!(!boxfall::cpu_fallback().is_fallthrough());
    /// ```
    pub fn is_fallthrough(&self) -> bool {
        matches!(self.kind, KernelKind::Fallthrough)
    }

    /// Whether the kernel reads the call's dispatch table ([`from_boxed_in_table`](Self::from_boxed_in_table)).
    ///
    /// ```
    /// assert!(boxfall::cpu_fallback().reads_table());
    /// assert!(!boxfall::KernelFunction::from_boxed(|_, _, _| Ok(())).reads_table());
    /// ```
    #[inline(always)]
    pub fn reads_table(&self) -> bool {
        self.reads_table
    }

    /// Whether a call handed to the kernel directly (`TypedOperatorHandle::call_fallback`)
    /// needs the table: the kernel reads it or has a typed wrapper. A dispatched call reads
    /// the entry's route instead.
    #[inline(always)]
    pub(crate) fn wraps(&self) -> bool {
        self.reads_table || self.wrapper.is_some()
    }

    /// The typed entry of a kernel that wraps another ([`with_typed_wrapper`](Self::with_typed_wrapper)).
    ///
    /// ```
    /// assert!(boxfall::cpu_fallback().typed_wrapper().is_some());
    /// assert!(boxfall::KernelFunction::fallthrough().typed_wrapper().is_none());
    /// ```
    #[inline(always)]
    pub fn typed_wrapper(&self) -> Option<&dyn TypedWrapper> {
        self.wrapper.as_deref()
    }

    /// Whether a typed entry point exists.
    ///
    /// ```
    /// use boxfall::KernelFunction;
    /// assert!(KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x)).has_unboxed());
    /// assert!(!KernelFunction::fallthrough().has_unboxed());
    /// ```
    pub fn has_unboxed(&self) -> bool {
        self.unboxed.is_some()
    }

    /// The typed entry point, if the kernel has one of exactly this signature.
    ///
    /// ```
    /// use boxfall::KernelFunction;
    /// let k = KernelFunction::from_unboxed::<(f64,), f64>(|_, (x,)| Ok(-x));
    /// assert!(k.unboxed::<(f64,), f64>().is_some());
    /// assert!(k.unboxed::<(i64,), i64>().is_none()); // another signature
    /// ```
    #[inline]
    pub fn unboxed<A: 'static, R: 'static>(&self) -> Option<UnboxedFn<A, R>> {
        self.unboxed.and_then(UnboxedPtr::get::<A, R>)
    }

    /// Runs the boxed entry point.
    ///
    /// ```
    /// use boxfall::{DispatchKey, IValue, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_kernel_call_boxed", LibraryKind::Def).unwrap();
    /// let op = lib.define("sq(int x) -> int").unwrap();
    /// let k = KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x * x));
    /// let mut stack = vec![IValue::Int(5)];
    /// k.call_boxed(&op, DispatchKey::CPU.set(), &mut stack).unwrap();
    /// assert_eq!(stack[0].to_int(), Some(25));
    /// ```
    #[inline]
    pub fn call_boxed(
        &self,
        op: &OperatorHandle,
        keys: DispatchKeySet,
        stack: &mut Stack,
    ) -> Result<()> {
        (self.boxed)(op, keys, stack)
    }
}

impl KernelFunction {
    /// Runs the kernel on a table the caller loaded: the entry that reads the table if the
    /// kernel has one (no second load), else the boxed entry point.
    ///
    /// ```
    /// use boxfall::{DispatchKey, IValue, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_call_boxed_in", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x * 3)), false).unwrap();
    /// let k = KernelFunction::from_boxed_in_table(|op, t, _, s| t.call(op, DispatchKey::CPU.set(), s));
    /// let mut stack = vec![IValue::Int(2)];
    /// op.with_table(DispatchKey::NATIVE.set(), |t| k.call_boxed_in(&op, t, DispatchKey::NATIVE.set(), &mut stack)).unwrap();
    /// assert_eq!(stack[0].to_int(), Some(6));
    /// ```
    #[inline(always)]
    pub fn call_boxed_in(
        &self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        stack: &mut Stack,
    ) -> Result<()> {
        (self.in_table)(op, table, keys, stack)
    }
}

/// A boxed function's two entry points: as itself, and behind a table it ignores (what a table
/// entry calls). The second calls `f` by its own type, so that each is one indirect call.
fn entry_points<F>(f: F) -> (Arc<BoxedFn>, Arc<TableFn>)
where
    F: Fn(&OperatorHandle, DispatchKeySet, &mut Stack) -> Result<()> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let g = f.clone();
    let in_table =
        move |op: &OperatorHandle, _: &DispatchTable, keys, stack: &mut Stack| g(op, keys, stack);
    (f, Arc::new(in_table))
}

/// Whether a call runs a backend's own kernel of its operator, and which backend's
/// ([`Routed::counted`](crate::dispatcher::Routed::counted)): such calls are counted in the operator's `kernel_calls`, and timed
/// in its `kernel_call_ns` while [`crate::metrics::profiling`].
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

impl KernelCount {
    /// A call that is not counted.
    pub const NONE: KernelCount = KernelCount(None);

    /// The backend whose own kernel runs (None: the call is not counted).
    ///
    /// ```
    /// assert_eq!(boxfall::dispatcher::KernelCount::NONE.backend(), None);
    /// ```
    #[inline(always)]
    pub fn backend(self) -> Option<DispatchKey> {
        self.0
    }

    /// Runs `call`, the kernel's call, counting it (and timing it while profiling) if it is
    /// counted.
    ///
    /// ```
    /// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_kernel_count_run", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::NATIVE, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x)), false).unwrap();
    /// let count = op.route(DispatchKey::NATIVE.set(), |r| r.counted()).unwrap();
    /// assert_eq!(count.run(&op, || 7), 7);
    /// assert_eq!(op.metrics().snapshot().kernel_calls, 1);
    /// ```
    #[inline(always)]
    pub fn run<T>(self, op: &OperatorHandle, call: impl FnOnce() -> T) -> T {
        match self.0 {
            None => call(),
            Some(key) => count_call(op, key, call),
        }
    }

    /// Starts a counted call whose end the caller marks ([`KernelCall::end`]): for a caller
    /// that counts a call only once it knows the kernel ran it.
    ///
    /// ```
    /// use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind};
    /// let mut lib = Library::new("doc_kernel_count_begin", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// lib.impl_kernel("f", DispatchKey::NATIVE, KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x)), false).unwrap();
    /// let call = op.route(DispatchKey::NATIVE.set(), |r| r.counted()).unwrap().begin();
    /// call.end(&op);
    /// assert_eq!(op.metrics().snapshot().kernel_calls, 1);
    /// ```
    #[inline(always)]
    pub fn begin(self) -> KernelCall {
        match self.0 {
            None => KernelCall {
                key: None,
                start: 0,
            },
            Some(key) => KernelCall::started(key),
        }
    }
}

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
    key: Option<DispatchKey>,
    /// Clock ticks at the start while profiling, else 0.
    start: u64,
}

impl KernelCall {
    #[cold]
    #[inline(never)]
    fn started(key: DispatchKey) -> KernelCall {
        let start = if crate::metrics::profiling() {
            crate::clock::ticks().max(1)
        } else {
            0
        };
        KernelCall {
            key: Some(key),
            start,
        }
    }

    /// Counts the call (and its time, if it was timed) in `op`'s `kernel_calls`.
    ///
    /// ```
    /// let mut lib = boxfall::Library::new("doc_kernel_call_end", boxfall::LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// boxfall::dispatcher::KernelCount::NONE.begin().end(&op);
    /// ```
    #[inline(always)]
    pub fn end(self, op: &OperatorHandle) {
        if let Some(key) = self.key {
            record_call(op, key, self.start);
        }
    }
}

#[cold]
#[inline(never)]
fn record_call(op: &OperatorHandle, key: DispatchKey, start: u64) {
    let ticks = if start == 0 {
        0
    } else {
        crate::clock::ticks().saturating_sub(start).max(1)
    };
    op.metrics().record_kernel_call(key, ticks);
}

/// `call`, a call of `key`'s own kernel of `op`, counted. Out of line and cold: most calls
/// run no backend's own kernel, and theirs pay only the test of the entry's flag.
#[cold]
#[inline(never)]
fn count_call<T>(op: &OperatorHandle, key: DispatchKey, call: impl FnOnce() -> T) -> T {
    let c = KernelCall::started(key);
    let out = call();
    c.end(op);
    out
}

impl KernelCount {
    /// `call` counted as [`run`](Self::run) counts it, for the dispatcher's calls of a
    /// backend's own kernel: unless a profile is open, counted before it runs by a function
    /// that takes no closure, so that the arguments and the result are not moved through
    /// `count_call`'s frames.
    #[inline(always)]
    pub(crate) fn run_then<T>(self, op: &OperatorHandle, call: impl FnOnce() -> T) -> T {
        match self.0 {
            Some(key) if crate::metrics::profiling() => count_call(op, key, call),
            Some(key) => {
                count_untimed(op, key);
                call()
            }
            None => call(),
        }
    }
}

/// One untimed call of `key`'s own kernel of `op` (`KernelCount::run_then`).
#[inline(never)]
fn count_untimed(op: &OperatorHandle, key: DispatchKey) {
    op.metrics().record_kernel_call(key, 0);
}

/// The tensor maps a wrapping kernel puts around a wrapped kernel's typed function
/// ([`TypedCall::run`], [`KernelFunction::call_mapped`]): the argument tensors go through `args`
/// before the function runs, each returned tensor through `ret` after. The CPU fallback's move
/// tensors to the CPU and back; a logging key's may only look.
///
/// ```
/// use boxfall::kernel::{TensorBatch, TensorMaps};
/// use boxfall::Tensor;
/// struct Same;
/// impl TensorMaps for Same {
///     fn args(&mut self, _: &mut TensorBatch<'_, '_>, _last: bool) -> boxfall::Result<()> { Ok(()) }
///     fn ret(&mut self, t: Tensor) -> boxfall::Result<Tensor> { Ok(t) }
/// }
/// let e = Same.kernel_error(boxfall::Error::Fallback("no".into()));
/// assert!(e.to_string().contains("no"));
/// ```
pub trait TensorMaps {
    /// Replaces argument tensors in place: `tensors` holds the next ones, in order (a call
    /// with many comes in several batches); `last` says that none follow, so the function runs
    /// next (an error then stops the call before it runs).
    fn args(&mut self, tensors: &mut TensorBatch<'_, '_>, last: bool) -> Result<()>;
    /// The error the caller sees for an error of the function (or of unboxing its arguments).
    fn kernel_error(&mut self, e: Error) -> Error {
        e
    }
    /// The tensor that takes a returned tensor's place.
    fn ret(&mut self, t: Tensor) -> Result<Tensor>;
}

/// Argument tensors of a typed call, a batch at a time, as [`TensorMaps::args`] gets them: in
/// one call rather than one call a tensor, so that a wrapper's per-tensor work is its own
/// loop, not a virtual call each.
///
/// ```
/// use boxfall::kernel::TensorBatch;
/// use boxfall::Tensor;
/// let mut t = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// let mut slots = [Some(&mut t), None];
/// let mut batch = TensorBatch::new(&mut slots);
/// assert_eq!(batch.iter_mut().count(), 1);
/// ```
pub struct TensorBatch<'s, 'a>(&'s mut [Option<&'a mut Tensor>]);

impl<'s, 'a> TensorBatch<'s, 'a> {
    /// A batch of the tensors in `slots` (empty slots are skipped).
    #[inline(always)]
    pub fn new(slots: &'s mut [Option<&'a mut Tensor>]) -> TensorBatch<'s, 'a> {
        TensorBatch(slots)
    }

    /// The batch's tensors, in order.
    #[inline(always)]
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Tensor> + use<'_, 's, 'a> {
        self.0.iter_mut().flatten().map(|t| &mut **t)
    }
}

/// How many argument tensors a batch holds.
const BATCH: usize = 8;

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
    signature: TypeId,
    maps_tensors: bool,
    body: &'a mut dyn TypedBody,
}

impl TypedCall<'_> {
    /// Whether `kernel` has a typed function of this call's signature (`run` can run it).
    #[inline(always)]
    pub fn fits(&self, kernel: &KernelFunction) -> bool {
        kernel
            .unboxed
            .is_some_and(|p| p.signature == self.signature)
    }

    /// Whether every argument and return of the signature maps its tensors (a value that
    /// does not would reach the function unmapped: a wrapper that must map declines).
    #[inline(always)]
    pub fn maps_tensors(&self) -> bool {
        self.maps_tensors
    }

    /// Runs `kernel`'s typed function (it must [`fit`](Self::fits)) on the call's arguments
    /// with their tensors mapped by `maps`, with `keys`; the returns, mapped, are the call's.
    /// Runs once: a second run, or one of a kernel that does not fit, is an error.
    #[inline(always)]
    pub fn run(
        &mut self,
        kernel: &KernelFunction,
        keys: DispatchKeySet,
        maps: &mut dyn TensorMaps,
    ) -> Result<()> {
        self.body.run(kernel, keys, maps)
    }

    /// Continues the call on `keys` in `table`, as a dispatched typed call would: the kernel of
    /// their highest key (masked by the operator's fallthroughs) runs typed if it can, else
    /// boxed once. The call's arguments are used up.
    #[inline(always)]
    pub fn redispatch(
        &mut self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
    ) -> Result<()> {
        self.body.redispatch(op, table, keys)
    }

    /// The CPU fallback's steps compiled with `cpu`'s signature, if it has this call's (None,
    /// having run nothing, where it has not); the calls those steps do not serve are boxed
    /// once for `boxed`, the CPU fallback's boxed call.
    #[inline(always)]
    pub(crate) fn run_cpu_fallback(
        &mut self,
        cpu: &KernelFunction,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        boxed: &TableFn,
    ) -> Option<Result<()>> {
        self.body.run_cpu_fallback(cpu, op, table, keys, boxed)
    }
}

/// The typed side of a `TypedCall`, generic over the signature.
trait TypedBody {
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

/// A typed call's arguments until a kernel takes them, then its returns.
struct Slots<A, R> {
    args: Option<A>,
    returns: Option<R>,
    ways: TypedWays<A, R>,
}

impl<A, R> Slots<A, R> {
    #[cold]
    fn used_up() -> Error {
        Error::Kernel {
            context: "typed wrapper".into(),
            message: "a typed call's arguments were used twice".into(),
        }
    }
}

impl<A: CallArgs + 'static, R: CallReturns + 'static> TypedBody for Slots<A, R> {
    #[inline(always)]
    fn run(
        &mut self,
        kernel: &KernelFunction,
        keys: DispatchKeySet,
        maps: &mut dyn TensorMaps,
    ) -> Result<()> {
        let (Some(f), Some(args)) = (kernel.unboxed::<A, R>(), self.args.take()) else {
            return Err(Slots::<A, R>::used_up());
        };
        self.returns = Some(run_mapped(f, keys, args, maps)?);
        Ok(())
    }

    fn redispatch(
        &mut self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
    ) -> Result<()> {
        let args = self.args.take().ok_or_else(Slots::<A, R>::used_up)?;
        self.returns = Some((self.ways.redispatch)(op, table, keys, args)?);
        Ok(())
    }

    #[inline(always)]
    fn run_cpu_fallback(
        &mut self,
        cpu: &KernelFunction,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        boxed: &TableFn,
    ) -> Option<Result<()>> {
        let (f, steps) = cpu.typed_fallback::<A, R>()?;
        let Some(args) = self.args.take() else {
            return Some(Err(Slots::<A, R>::used_up()));
        };
        let boxing = self.ways.boxing;
        let mut declined = |args: A| boxing(op, table, keys, boxed, args);
        Some(steps(op, table, keys, f, args, &mut declined).map(|r| self.returns = Some(r)))
    }
}

/// `f` on `args` with the tensors mapped: the steps every mapped typed call takes.
#[inline(always)]
fn run_mapped<A: CallArgs, R: CallReturns>(
    f: UnboxedFn<A, R>,
    keys: DispatchKeySet,
    mut args: A,
    maps: &mut dyn TensorMaps,
) -> Result<R> {
    map_args(&mut args, maps)?;
    let returns = match f(keys, args) {
        Ok(r) => r,
        Err(e) => return Err(maps.kernel_error(e)),
    };
    returns.map_tensors(&mut Returns(maps))
}

/// The argument tensors through `maps.args`, in batches.
#[inline(always)]
fn map_args<A: CallArgs>(args: &mut A, maps: &mut dyn TensorMaps) -> Result<()> {
    let mut batch: [Option<&mut Tensor>; BATCH] = Default::default();
    let mut n = 0;
    args.for_each_tensor_mut(&mut |t| {
        if n == BATCH {
            maps.args(&mut TensorBatch(&mut batch), false)?;
            n = 0;
        }
        batch[n] = Some(t);
        n += 1;
        Ok(())
    })?;
    maps.args(&mut TensorBatch(&mut batch[..n]), true)
}

struct Returns<'m>(&'m mut dyn TensorMaps);

impl TensorMap for Returns<'_> {
    #[inline(always)]
    fn map(&mut self, t: Tensor) -> Result<Tensor> {
        self.0.ret(t)
    }
}

/// Offers the typed call `args` to `wrapper`: `None` if it declined (the arguments are then
/// given back to `declined`, untouched), else what it made of the call. Each outcome is built in
/// the caller's return slot: a nested `Result` would copy the error-sized value at each level.
#[inline(always)]
pub(crate) fn call_wrapper<A: CallArgs + 'static, R: CallReturns + 'static>(
    wrapper: &dyn TypedWrapper,
    op: &OperatorHandle,
    table: &DispatchTable,
    keys: DispatchKeySet,
    args: A,
    ways: TypedWays<A, R>,
    declined: impl FnOnce(A) -> Result<R>,
) -> Result<R> {
    let mut slots = Slots::<A, R> {
        args: Some(args),
        returns: None,
        ways,
    };
    let mut call = TypedCall {
        signature: TypeId::of::<UnboxedFn<A, R>>(),
        maps_tensors: A::TYPED_FALLBACK && R::TYPED_FALLBACK,
        body: &mut slots,
    };
    match wrapper.call_typed(op, table, keys, &mut call) {
        Some(Ok(())) => match slots.returns {
            Some(r) => Ok(r),
            None => Err(ran_nothing(op)),
        },
        Some(Err(e)) => Err(e),
        // Declined: the arguments go back, unless the wrapper used them (and broke its word).
        None => match slots.args {
            Some(args) => declined(args),
            None => Err(Slots::<A, R>::used_up()),
        },
    }
}

#[cold]
fn ran_nothing(op: &OperatorHandle) -> Error {
    Error::Kernel {
        context: format!("the typed wrapper of '{}'", op.name()),
        message: "it served the call but ran no kernel".into(),
    }
}

/// The `call_mapped` entry of a kernel made from `f`, for signatures whose values map their
/// tensors (`None` for the others).
fn mapped_entry<A, R>(f: UnboxedFn<A, R>) -> Option<Arc<MappedFn>>
where
    A: CallArgs + 'static,
    R: CallReturns + 'static,
{
    if !(A::TYPED_FALLBACK && R::TYPED_FALLBACK) {
        return None;
    }
    Some(Arc::new(
        move |keys, stack: &mut Stack, maps: &mut dyn TensorMaps| {
            // The caller checked the stack's length. A value the signature does not take
            // fails as the kernel's boxed entry point would fail.
            let args = A::pop_from(stack).map_err(|e| maps.kernel_error(e))?;
            run_mapped(f, keys, args, maps)?.push_onto(stack);
            Ok(())
        },
    ))
}

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
    /// A kernel with a typed wrapper ([`KernelFunction::with_typed_wrapper`]) other than the
    /// CPU fallback: a typed call offers itself to the wrapper before it boxes its arguments;
    /// the dispatcher runs a boxed call by the kernel's boxed entry, as a `Kernel` one.
    Wrapper,
    /// A foreign kernel ([`KernelFunction::with_foreign`]): the dispatcher runs its boxed entry;
    /// the bindings that made it call it their own way, with its payload.
    Foreign,
    /// A kernel with a typed entry on two tensors ([`KernelFunction::with_tensors_entry`]):
    /// the dispatcher runs its boxed entry; a caller holding two tensors may run that entry.
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
    /// A foreign kernel ([`KernelFunction::with_foreign`]): as `Boxed` for the dispatcher; the
    /// bindings that made it may run the fallback's steps around it their own way.
    Foreign,
    /// No CPU kernel serves the operator: the fallback's call is a `NoKernel` error.
    Missing,
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
    /// its arguments once for `boxed`: the kernel's typed wrapper, or for the CPU fallback its
    /// steps compiled with the CPU kernel's signature (`BoundCpuFallback`).
    pub(crate) wrapper: Option<Arc<dyn TypedWrapper>>,
}

impl TableEntry {
    /// The entry with no kernel.
    pub(crate) fn missing() -> TableEntry {
        TableEntry {
            kernel: None,
            source: Source::Missing,
            route: Route::Missing,
            count: KernelCount::NONE,
            foreign: None,
            cpu_foreign: None,
            tensors: None,
            boxed: None,
            typed: UnboxedPtr::none(),
            counted_typed: UnboxedPtr::none(),
            wrapper: None,
        }
    }

    /// The entry of `key` served by `kernel` (from `source`), published: its route decided
    /// and its calls bound. `cpu` is the kernel a call on the CPU key reaches in the same
    /// table: the one a CPU fallback entry runs.
    pub(crate) fn publish(
        key: DispatchKey,
        kernel: Option<KernelFunction>,
        source: Source,
        cpu: Option<&KernelFunction>,
    ) -> TableEntry {
        let Some(k) = kernel else {
            return TableEntry::missing();
        };
        let route = match source {
            Source::Fallthrough => Route::Fallthrough,
            _ if k.is_cpu_fallback() => Route::CpuFallback(match cpu {
                None => CpuKernel::Missing,
                Some(c) if c.has_compiled_fallback() => CpuKernel::Compiled,
                Some(c) if c.is_foreign() => CpuKernel::Foreign,
                Some(_) => CpuKernel::Boxed,
            }),
            _ if k.wrapper.is_some() => Route::Wrapper,
            _ if k.is_foreign() => Route::Foreign,
            _ if k.tensors.is_some() => Route::Tensors,
            _ => Route::Kernel,
        };
        // A backend's own kernel: one registered for a backend key other than the CPU (not a
        // composite kernel, a backend fallback or a fallthrough; not the CPU fallback
        // registered as a kernel, which counts as a fallback).
        let own = source == Source::Kernel
            && key.is_backend()
            && key != DispatchKey::CPU
            && !k.is_cpu_fallback();
        let count = KernelCount(own.then_some(key));
        let (boxed, wrapper) = match &k.cpu_fallback {
            Some(bind) => {
                let boxed = bind(cpu.cloned());
                let compiled = cpu.filter(|c| c.typed_fallback.is_some());
                let wrapper = compiled.map(|c| {
                    Arc::new(BoundCpuFallback {
                        cpu: c.clone(),
                        boxed: boxed.clone(),
                    }) as Arc<dyn TypedWrapper>
                });
                (boxed, wrapper)
            }
            None => (k.in_table.clone(), k.wrapper.clone()),
        };
        let boxed = match count.backend() {
            None => boxed,
            Some(_) => Arc::new(
                move |op: &OperatorHandle, table: &DispatchTable, keys, stack: &mut Stack| {
                    count.run_then(op, || boxed(op, table, keys, stack))
                },
            ),
        };
        let unboxed = k.unboxed.unwrap_or_else(UnboxedPtr::none);
        let (typed, counted_typed) = match count.backend() {
            None => (unboxed, UnboxedPtr::none()),
            Some(_) => (UnboxedPtr::none(), unboxed),
        };
        TableEntry {
            foreign: matches!(route, Route::Foreign)
                .then(|| ForeignRef::of(&k))
                .flatten(),
            cpu_foreign: matches!(route, Route::CpuFallback(CpuKernel::Foreign))
                .then(|| cpu.and_then(ForeignRef::of))
                .flatten(),
            tensors: k.tensors.filter(|_| route == Route::Tensors),
            kernel: Some(k),
            source,
            route,
            count,
            boxed: Some(boxed),
            typed,
            counted_typed,
            wrapper,
        }
    }

    /// Whether the key's backend fallback is the CPU fallback, which serves the entry
    /// ([`OperatorHandle::served_by_cpu_fallback`]).
    pub(crate) fn by_cpu_fallback(&self) -> bool {
        self.source == Source::BackendFallback && matches!(self.route, Route::CpuFallback(_))
    }
}

/// The typed call of a CPU fallback entry whose CPU kernel is typed: the fallback's steps
/// compiled with that kernel's signature, on the kernel bound at publication; a call of
/// another signature is declined, and boxed once for `boxed`, the entry's boxed call.
struct BoundCpuFallback {
    cpu: KernelFunction,
    boxed: Arc<TableFn>,
}

impl TypedWrapper for BoundCpuFallback {
    #[inline]
    fn call_typed(
        &self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        call: &mut TypedCall<'_>,
    ) -> Option<Result<()>> {
        call.run_cpu_fallback(&self.cpu, op, table, keys, &*self.boxed)
    }
}

/// A foreign kernel's payload ([`KernelFunction::with_foreign`]) as a table entry records it
/// at publication: its type and where it lies, read once out of the kernel's `Arc<dyn Any>`,
/// so that the router gives it back by comparing the type with a constant and a cast, where a
/// downcast asked the type through the vtable on every call.
#[derive(Clone)]
pub(crate) struct ForeignRef {
    type_id: TypeId,
    payload: std::ptr::NonNull<()>,
    /// The payload `payload` points to, held while the entry lives.
    _held: Arc<dyn Any + Send + Sync>,
}

// SAFETY: `payload` points into `_held`'s value, which is `Send + Sync`, and is only ever read
// through a shared reference (`get`).
unsafe impl Send for ForeignRef {}
// SAFETY: as for `Send`.
unsafe impl Sync for ForeignRef {}

impl ForeignRef {
    /// The payload of `kernel`, if it is a foreign one.
    pub(crate) fn of(kernel: &KernelFunction) -> Option<ForeignRef> {
        let held = kernel.foreign.clone()?;
        // The payload's own type (the `Arc`'s would be `Arc<dyn Any>`'s).
        let type_id = Any::type_id(&*held);
        let payload = std::ptr::NonNull::from(&*held).cast::<()>();
        Some(ForeignRef {
            type_id,
            payload,
            _held: held,
        })
    }

    /// The payload, if it is a `T`.
    #[inline(always)]
    pub(crate) fn get<T: Any>(&self) -> Option<&T> {
        if self.type_id != TypeId::of::<T>() {
            return None;
        }
        // SAFETY: the payload is a `T` (its `TypeId`, read in `of`), and `_held` keeps it alive
        // while `self` lives: a table holds its entries, so a reference got from an entry of
        // the table a read section loaded lives while that section does.
        Some(unsafe { self.payload.cast::<T>().as_ref() })
    }
}

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
}

impl DispatchTable {
    /// The operator's schema (`op` is the table's operator), or the error for an operator
    /// declared but not defined.
    #[inline]
    pub fn schema(&self, op: &OperatorHandle) -> Result<&OpSchema> {
        self.schema.as_deref().ok_or_else(|| op.undefined())
    }

    /// Whether a call on `keys` may reach a kernel that runs long. A long key below the
    /// highest one also counts: leaving the read section is always safe, and this test is one
    /// AND on the path of every call.
    #[inline(always)]
    pub(crate) fn may_run_long(&self, keys: DispatchKeySet) -> bool {
        keys.0 & self.long != 0
    }

    /// The typed function of the entry at the highest of `keys` (masked by the operator's
    /// fallthroughs) if a typed call of this signature runs it and nothing else
    /// ([`TableEntry::typed`]). Such a kernel never runs long (a long-running kernel keeps no
    /// typed entry), so the call needs no test for that either.
    #[inline(always)]
    pub(crate) fn fast_unboxed<A: 'static, R: 'static>(
        &self,
        keys: DispatchKeySet,
    ) -> Option<UnboxedFn<A, R>> {
        self.entries[keys.highest()?.index()].typed.get::<A, R>()
    }

    pub(crate) fn empty() -> DispatchTable {
        DispatchTable {
            entries: std::array::from_fn(|_| TableEntry::missing()),
            mask: !0,
            long: 0,
            schema: None,
        }
    }
}

pub(crate) struct OperatorEntry {
    pub(crate) name: String,
    pub(crate) table: RcuCell<DispatchTable>,
    pub(crate) metrics: CachePadded<OpMetrics>,
    pub(crate) policy: AtomicU8,
    /// The operator's [`Tag`]s, a bit each.
    pub(crate) tags: AtomicU8,
}

/// What an operator says of itself beyond its schema, as c10's `at::Tag`s do; read where a
/// generic part of the dispatcher (a backend's handling of the fallback's results) needs it.
///
/// ```
/// use boxfall::{kernel::Tag, Library, LibraryKind};
/// let mut lib = Library::new("doc_tag", LibraryKind::Def).unwrap();
/// let op = lib.define("argmax(Tensor x) -> Tensor").unwrap();
/// assert!(!op.has_tag(Tag::DefaultDtypes));
/// op.set_tag(Tag::DefaultDtypes, true);
/// assert!(op.has_tag(Tag::DefaultDtypes));
/// assert_eq!(Tag::from_name("default_dtypes"), Some(Tag::DefaultDtypes));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    /// The dtypes of its tensor results are the library's choice where the array API standard
    /// lets it choose (indices, counts: the default indexing dtype), not the caller's: on a
    /// device that lacks the dtype its CPU kernel made, a backend may give the device's
    /// default dtype of that kind instead of refusing the result.
    DefaultDtypes = 1,
}

impl Tag {
    /// Every tag.
    pub const ALL: [Tag; 1] = [Tag::DefaultDtypes];

    /// The tag's name (`"default_dtypes"`), as Python's `Library.define(tags=)` takes it.
    pub const fn name(self) -> &'static str {
        match self {
            Tag::DefaultDtypes => "default_dtypes",
        }
    }

    /// The tag of `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Tag> {
        Tag::ALL.into_iter().find(|t| t.name() == name)
    }
}

// An operator names the results it made, for an error raised when their payload is made.
impl crate::tensor::Origin for OperatorEntry {
    fn name(&self) -> String {
        self.name.clone()
    }
}

impl OperatorHandle {
    /// The operator as the [`Origin`](crate::tensor::Origin) of its results: a reference
    /// count, no allocation.
    ///
    /// ```
    /// let mut lib = boxfall::Library::new("doc_origin", boxfall::LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert_eq!(op.origin().name(), "doc_origin::f");
    /// ```
    pub fn origin(&self) -> std::sync::Arc<dyn crate::tensor::Origin> {
        self.0.clone()
    }
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

impl OperatorHandle {
    /// `ns::op` or `ns::op.overload`.
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_name", LibraryKind::Def).unwrap();
    /// let op = lib.define("f.overload(Tensor x) -> Tensor").unwrap();
    /// assert_eq!(op.name(), "doc_op_name::f.overload");
    /// ```
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The schema, if the operator is defined now.
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_schema", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert_eq!(op.schema().unwrap().text, "doc_op_schema::f(Tensor x) -> Tensor");
    /// lib.close();
    /// assert!(op.schema().is_err()); // no longer defined
    /// ```
    pub fn schema(&self) -> Result<Arc<OpSchema>> {
        let g = rcu::read();
        self.0
            .table
            .load(&g)
            .schema
            .clone()
            .ok_or_else(|| self.undefined())
    }

    /// Runs `f` on the operator's table as a call on `keys` would see it, as a kernel that
    /// reads the table does when it is called boxed, not dispatched. If a kernel at or below
    /// the highest of `keys` runs long, `f` runs outside the dispatcher's read section, on the
    /// table held by a count.
    ///
    /// ```
    /// use boxfall::{DispatchKey, Library, LibraryKind};
    /// let mut lib = Library::new("doc_with_table", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// assert!(op.with_table(DispatchKey::CPU.set(), |t| t.kernel(DispatchKey::CPU.set()).is_none()));
    /// ```
    #[inline]
    pub fn with_table<T>(&self, keys: DispatchKeySet, f: impl FnOnce(&DispatchTable) -> T) -> T {
        let g = rcu::read();
        let table = self.0.table.load(&g);
        let reach = keys.highest().map_or(0, |h| u64::MAX >> (63 - h.index()));
        if table.long & reach != 0 {
            let owned = leave_holding!(g, table);
            return f(&owned);
        }
        f(table)
    }

    pub(crate) fn undefined(&self) -> Error {
        Error::UnknownOperator {
            name: self.0.name.clone(),
            suggestions: vec![],
        }
    }

    /// The operator's fallback counters.
    ///
    /// ```
    /// use boxfall::{metrics::OpStats, Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_metrics", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert_eq!(op.metrics().snapshot(), OpStats::default()); // never fell back
    /// ```
    pub fn metrics(&self) -> &OpMetrics {
        &self.0.metrics
    }

    pub(crate) fn policy_cell(&self) -> &AtomicU8 {
        &self.0.policy
    }

    /// Whether the operator has `tag` ([`Tag`]).
    #[inline]
    pub fn has_tag(&self, tag: Tag) -> bool {
        self.0.tags.load(std::sync::atomic::Ordering::Relaxed) & tag as u8 != 0
    }

    /// Gives the operator `tag`, or takes it away (see [`Tag`] for an example).
    pub fn set_tag(&self, tag: Tag, on: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        if on {
            self.0.tags.fetch_or(tag as u8, Relaxed);
        } else {
            self.0.tags.fetch_and(!(tag as u8), Relaxed);
        }
    }

    /// What a backend moving a result of the operator is told of it
    /// ([`Backend::from_cpu_result`]; see [`crate::backend::ResultOf`] for an example).
    #[inline(always)]
    pub fn result_of(&self) -> crate::backend::ResultOf<'_> {
        crate::backend::ResultOf {
            op: &self.0.name,
            default_dtypes: self.has_tag(Tag::DefaultDtypes),
            metrics: &self.0.metrics,
        }
    }

    /// The operator's tags.
    ///
    /// ```
    /// use boxfall::{kernel::Tag, Library, LibraryKind};
    /// let mut lib = Library::new("doc_tags", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert!(op.tags().is_empty());
    /// ```
    pub fn tags(&self) -> Vec<Tag> {
        Tag::ALL.into_iter().filter(|t| self.has_tag(*t)).collect()
    }
}

impl fmt::Debug for KernelFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            KernelKind::Regular if self.unboxed.is_some() => "unboxed",
            KernelKind::Regular if self.wrapper.is_some() => "boxed, typed wrapper",
            KernelKind::Regular if self.reads_table => "boxed, in table",
            KernelKind::Regular => "boxed",
            KernelKind::Fallthrough => "fallthrough",
        };
        write!(f, "KernelFunction({kind})")
    }
}
