//! A kernel's constructors, properties and entry points.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

use crate::error::Result;
use crate::ivalue::{CallArgs, CallReturns, Stack};
use crate::key::DispatchKeySet;

use super::maps::{run_mapped, TensorMaps};
use super::types::{
    BoxedFn, CompiledFallback, CpuFallbackBinder, DispatchTable, KernelFunction, KernelKind,
    MappedFn, OperatorHandle, StackEntry, TableFn, TensorsFn, TypedFallbackFn, TypedWrapper,
};
use super::unboxed::{UnboxedFn, UnboxedPtr};

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
        KernelFunction::with_entry_points(boxed, in_table)
    }

    /// The kernel of these boxed entry points and nothing else: what every constructor starts
    /// from, setting what its kernel has besides.
    fn with_entry_points(boxed: Arc<BoxedFn>, in_table: Arc<TableFn>) -> KernelFunction {
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
            copied_entry_points(move |_op: &OperatorHandle, keys, stack: &mut Stack| {
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
            unboxed: Some(UnboxedPtr {
                signature: TypeId::of::<UnboxedFn<A, R>>(),
                address: f as usize,
            }),
            mapped: mapped_entry(f),
            fallback_entry: fallback.stack,
            typed_fallback: fallback.typed,
            ..KernelFunction::with_entry_points(boxed, in_table)
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
    /// dispatcher calls its boxed entry. A table entry it serves routes
    /// [`Route::Foreign`](crate::kernel::Route::Foreign) (a CPU fallback whose CPU kernel it is,
    /// [`CpuKernel::Foreign`](crate::kernel::CpuKernel::Foreign)), and the router gives the payload
    /// back ([`Routed::foreign`](crate::dispatcher::Routed::foreign)), so that no caller asks the
    /// kernel what it is.
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
    /// [`Route::Tensors`](crate::kernel::Route::Tensors), and the router gives the entry
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
        let (boxed, in_table) =
            copied_entry_points(|op: &OperatorHandle, keys, stack: &mut Stack| {
                op.redispatch_boxed(keys, stack)
            });
        KernelFunction {
            kind: KernelKind::Fallthrough,
            ..KernelFunction::with_entry_points(boxed, in_table)
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
/// entry calls). The second calls `f` by its own type, so that each is one indirect call; `f`
/// is shared between them, and the second reaches its captures through that share.
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

/// [`entry_points`] of a function that can be copied (a typed kernel's adapter captures only
/// the function pointer): each entry point holds its own copy, so that a table entry's call
/// reads the captures in its own allocation rather than through a second pointer, on the
/// path of every boxed call of a typed kernel (`benches/dispatch.rs`: `boxed`, `hop`).
fn copied_entry_points<F>(f: F) -> (Arc<BoxedFn>, Arc<TableFn>)
where
    F: Fn(&OperatorHandle, DispatchKeySet, &mut Stack) -> Result<()> + Copy + Send + Sync + 'static,
{
    let in_table =
        move |op: &OperatorHandle, _: &DispatchTable, keys, stack: &mut Stack| f(op, keys, stack);
    (Arc::new(f), Arc::new(in_table))
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
