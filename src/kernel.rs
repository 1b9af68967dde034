//! Kernels: every kernel has a boxed entry point `fn(op, keys, stack)`; a kernel made from a
//! typed Rust function also keeps that function, so a typed call with the same signature runs it
//! without boxing. The adapters box or unbox exactly once when the two sides differ.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

use crate::dispatcher::OperatorHandle;
use crate::error::Result;
use crate::fallback::{stack_entry, CpuFallback, FallbackMode, StackEntry};
use crate::ivalue::{CallArgs, CallReturns, Stack};
use crate::key::DispatchKeySet;

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

#[derive(Clone)]
pub(crate) enum KernelKind {
    Regular,
    Fallthrough,
    /// `mode`: its view policy.
    CpuFallback {
        mode: FallbackMode,
    },
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
    /// For a kernel made from a typed function: its entry for the CPU fallback of a boxed
    /// call (`fallback::typed`).
    stack_entry: Option<Arc<StackEntry>>,
    pub(crate) kind: KernelKind,
    /// What the code that made the kernel attached to it (`from_boxed_with_tag`).
    tag: Option<Arc<dyn Any + Send + Sync>>,
    /// Calls of it run outside the dispatcher's read section (`long_running`).
    long_running: bool,
}

/// A typed kernel's function pointer with the `TypeId` of its signature, so that a typed call
/// checks the signature by comparing two words: no virtual call, no pointer chase.
#[derive(Clone, Copy)]
struct UnboxedPtr {
    signature: TypeId,
    address: usize,
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
        KernelFunction {
            boxed: Arc::new(f),
            unboxed: None,
            stack_entry: None,
            kind: KernelKind::Regular,
            tag: None,
            long_running: false,
        }
    }

    /// A kernel from a typed function; boxed callers reach it through an adapter that unboxes
    /// the stack once and boxes the returns once.
    ///
    /// ```
    /// use boxfall::{DispatchKeySet, KernelFunction};
    /// let k = KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x * 3));
    /// let f = k.unboxed::<(i64,), i64>().unwrap();
    /// assert_eq!(f(DispatchKeySet::EMPTY, (2,)).unwrap(), 6);
    /// ```
    pub fn from_unboxed<A, R>(f: UnboxedFn<A, R>) -> KernelFunction
    where
        A: CallArgs + 'static,
        R: CallReturns + 'static,
    {
        KernelFunction {
            boxed: Arc::new(move |_op: &OperatorHandle, keys, stack: &mut Stack| {
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
            }),
            unboxed: Some(UnboxedPtr {
                signature: TypeId::of::<UnboxedFn<A, R>>(),
                address: f as usize,
            }),
            stack_entry: stack_entry(f),
            kind: KernelKind::Regular,
            tag: None,
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

    /// The tag given to `from_boxed_with_tag`, if it is a `T`.
    ///
    /// ```
    /// assert!(boxfall::cpu_fallback().tag::<u32>().is_none());
    /// ```
    #[inline]
    pub fn tag<T: Any>(&self) -> Option<&T> {
        self.tag.as_deref().and_then(|t| t.downcast_ref::<T>())
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
        KernelFunction {
            boxed: Arc::new(|op: &OperatorHandle, keys, stack: &mut Stack| {
                op.redispatch_boxed(keys, stack)
            }),
            unboxed: None,
            stack_entry: None,
            kind: KernelKind::Fallthrough,
            tag: None,
            long_running: false,
        }
    }

    pub(crate) fn cpu_fallback(config: CpuFallback) -> KernelFunction {
        let mode = FallbackMode::new(&config);
        KernelFunction {
            boxed: Arc::new(move |op: &OperatorHandle, keys, stack: &mut Stack| {
                crate::fallback::run_cpu_fallback(mode, op, keys, stack)
            }),
            unboxed: None,
            stack_entry: None,
            kind: KernelKind::CpuFallback { mode },
            tag: None,
            long_running: false,
        }
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
        self.stack_entry = None;
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

    /// Whether this is a CPU fallback kernel.
    ///
    /// ```
    /// assert!(boxfall::cpu_fallback().is_cpu_fallback());
    /// ```
    pub fn is_cpu_fallback(&self) -> bool {
        matches!(self.kind, KernelKind::CpuFallback { .. })
    }

    /// The entry for the CPU fallback of a boxed call, if the kernel was made from a typed
    /// function whose signature the typed fallback takes.
    #[inline(always)]
    pub(crate) fn stack_entry(&self) -> Option<&StackEntry> {
        self.stack_entry.as_deref()
    }

    /// How a CPU fallback kernel runs; `None` for any other kernel.
    #[inline(always)]
    pub(crate) fn cpu_fallback_mode(&self) -> Option<FallbackMode> {
        match self.kind {
            KernelKind::CpuFallback { mode } => Some(mode),
            _ => None,
        }
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
        match self.unboxed {
            Some(p) if p.signature == TypeId::of::<UnboxedFn<A, R>>() => {
                // SAFETY: `address` is a `UnboxedFn<A, R>` cast to `usize` in `from_unboxed`,
                // which recorded that type's id as `signature`; equal ids mean this is the
                // same function pointer type, and function pointers are address-sized.
                Some(unsafe { std::mem::transmute::<usize, UnboxedFn<A, R>>(p.address) })
            }
            _ => None,
        }
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

impl fmt::Debug for KernelFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            KernelKind::Regular if self.unboxed.is_some() => "unboxed",
            KernelKind::Regular => "boxed",
            KernelKind::Fallthrough => "fallthrough",
            KernelKind::CpuFallback { .. } => "cpu_fallback",
        };
        write!(f, "KernelFunction({kind})")
    }
}
