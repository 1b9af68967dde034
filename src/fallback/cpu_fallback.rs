//! The CPU fallback kernel and its public entries (`cpu_fallback`, `call_fallback`,
//! `CpuFallback::call`).

use crate::dispatcher::{DispatchTable, OperatorHandle};
use crate::error::Result;
use crate::ivalue::Stack;
use crate::kernel::KernelFunction;
use crate::key::DispatchKeySet;

use super::boxed::{run_cpu_fallback_on, BoundCpu};
use super::mode::{FallbackMode, ViewPolicy};
use super::typed::TypedCpuFallback;

/// A CPU fallback's configuration.
///
/// ```
/// use boxfall::fallback::{CpuFallback, ViewPolicy};
/// let k = CpuFallback { views: ViewPolicy::Copy }.kernel();
/// assert_eq!(CpuFallback::of(&k), Some(&CpuFallback { views: ViewPolicy::Copy }));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuFallback {
    /// What to do with view operators.
    pub views: ViewPolicy,
}

impl CpuFallback {
    /// The boxed kernel. It is a kernel as any other, with three properties any kernel may
    /// have: dispatched, it reads the call's table (the schema, the CPU kernel) rather than
    /// loading it again; it has a typed wrapper, which runs a typed call of a functional
    /// operator whose CPU kernel has the call's signature without boxing (`typed`); and it is
    /// marked as the CPU fallback, so that the dispatcher, when it publishes a table, binds the
    /// CPU kernel into the entry it serves (`Route::CpuFallback` records which).
    ///
    /// ```
    /// use boxfall::CpuFallback;
    /// let k = CpuFallback::default().kernel();
    /// assert!(CpuFallback::of(&k).is_some() && k.reads_table() && k.typed_wrapper().is_some());
    /// assert!(!k.has_unboxed()); // no typed function: it serves every signature
    /// ```
    pub fn kernel(&self) -> KernelFunction {
        let mode = FallbackMode::new(self.views);
        // Called directly (or by a kernel that reads the table), it finds the CPU kernel in the
        // table; routed, the dispatcher hands it the one its entry records.
        let k = KernelFunction::from_boxed_in_table(move |op, table, keys, stack| {
            run_cpu_fallback_on(mode, op, table, cpu_kernel(table), keys, stack)
        });
        let boxed = k.in_table().clone();
        k.with_typed_wrapper(TypedCpuFallback { boxed })
            .marked_cpu_fallback(std::sync::Arc::new(move |cpu: Option<KernelFunction>| {
                // The CPU kernel's stack entry, taken once here rather than asked at each call.
                let entry = cpu.as_ref().and_then(|c| c.fallback_entry.clone());
                std::sync::Arc::new(move |op: &_, table: &_, keys, stack: &mut _| {
                    let cpu = BoundCpu {
                        kernel: cpu.as_ref(),
                        entry: entry.as_deref(),
                    };
                    run_cpu_fallback_on(mode, op, table, cpu, keys, stack)
                })
            }))
            .with_tag(self.clone())
    }

    /// The configuration of a CPU fallback kernel; `None` for any other kernel.
    ///
    /// ```
    /// use boxfall::{CpuFallback, KernelFunction};
    /// assert_eq!(CpuFallback::of(&boxfall::cpu_fallback()), Some(&CpuFallback::default()));
    /// assert!(CpuFallback::of(&KernelFunction::fallthrough()).is_none());
    /// ```
    pub fn of(kernel: &KernelFunction) -> Option<&CpuFallback> {
        kernel.tag::<CpuFallback>()
    }

    /// Runs the CPU fallback on a boxed call, as its kernel would: the pattern of a backend's
    /// own boxed fallback that logs or counts, then hands the call to the CPU (torch_xla's
    /// `xla_cpu_fallback` calling `at::native::cpu_fallback`). The policy, the counters and
    /// the failure atomicity are those of the registered fallback: the call counts for `op`,
    /// and a kernel that fails leaves every argument as it was. `keys` is the call's key set,
    /// as the calling kernel received it; its highest key names the backend.
    ///
    /// ```
    /// use boxfall::{*, fallback::ViewPolicy};
    /// # use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    /// # let mut lib = Library::new("doc_cpu_fallback_call", LibraryKind::Def).unwrap();
    /// # let op = lib.define("neg(Tensor x) -> Tensor").unwrap();
    /// # lib.impl_kernel("neg", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| {
    /// #     Ok(Tensor::from_array(-x.to_host()?.as_f64().cloned().unwrap_or_default()))
    /// # }), false).unwrap();
    /// static SEEN: AtomicUsize = AtomicUsize::new(0);
    /// let cpu = CpuFallback { views: ViewPolicy::Refuse };
    /// // A backend's own fallback: count, then the CPU fallback.
    /// let own = KernelFunction::from_boxed(move |op, keys, stack| {
    ///     SEEN.fetch_add(1, SeqCst);
    ///     cpu.call(op, keys, stack)
    /// });
    /// let x = native::tensor(ndarray::arr1(&[1.0, -2.0]).into_dyn());
    /// let mut stack = vec![IValue::Tensor(x)];
    /// own.call_boxed(&op, DispatchKey::NATIVE.set(), &mut stack).unwrap();
    /// assert_eq!(SEEN.load(SeqCst), 1);
    /// let y = stack[0].as_tensor().unwrap();
    /// assert_eq!(y.device(), native::DEVICE);
    /// assert_eq!(y.to_host().unwrap().as_f64().unwrap().as_slice().unwrap(), &[-1.0, 2.0]);
    /// assert_eq!(Dispatcher::counter_value(op.name()), 1); // counted as the registered fallback is
    /// ```
    pub fn call(&self, op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
        let mode = FallbackMode::new(self.views);
        op.with_table(keys, |table| {
            run_cpu_fallback_on(mode, op, table, cpu_kernel(table), keys, stack)
        })
    }
}

/// The default CPU fallback kernel (refuses view operators).
///
/// ```
/// use boxfall::{Library, LibraryKind, DispatchKey, cpu_fallback};
/// let mut fb = Library::new("_", LibraryKind::Impl).unwrap();
/// fb.fallback(DispatchKey::NATIVE, cpu_fallback()).ok(); // may already be registered
/// ```
pub fn cpu_fallback() -> KernelFunction {
    CpuFallback::default().kernel()
}

/// Runs a boxed fallback from a kernel of a backend's own that hands one case to the fallback
/// (c10's `call_fallback_fn`, boxed; typed handles have the typed form,
/// [`TypedOperatorHandle::call_fallback`](crate::dispatcher::TypedOperatorHandle::call_fallback)).
/// A CPU fallback run so obeys the fallback policy as a registered one does.
///
/// ```
/// # use boxfall::{*, fallback::call_fallback};
/// let mut lib = Library::new("doc_callfb", LibraryKind::Def).unwrap();
/// let op = lib.define("neg(Tensor x) -> Tensor").unwrap();
/// lib.impl_kernel("neg", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| {
///     let a = x.to_host()?.as_f64().cloned().unwrap_or_default();
///     Ok(Tensor::from_array(-a))
/// }), false).unwrap();
/// let x = native::tensor(ndarray::arr1(&[1.0, -2.0]).into_dyn());
/// let mut stack = vec![IValue::Tensor(x)];
/// call_fallback(&cpu_fallback(), &op, DispatchKey::NATIVE.set(), &mut stack).unwrap();
/// let y = stack[0].as_tensor().unwrap();
/// assert_eq!(y.device(), native::DEVICE);
/// assert_eq!(y.to_host().unwrap().as_f64().unwrap().as_slice().unwrap(), &[-1.0, 2.0]);
/// ```
pub fn call_fallback(
    fallback: &KernelFunction,
    op: &OperatorHandle,
    keys: DispatchKeySet,
    stack: &mut Stack,
) -> Result<()> {
    fallback.call_boxed(op, keys, stack)
}

/// The kernel that serves the CPU key in `table`, with its stack entry: what the CPU fallback
/// runs when it is called directly, bound when the table was published, as a routed call's
/// entry bound it.
#[inline(always)]
fn cpu_kernel(table: &DispatchTable) -> BoundCpu<'_> {
    BoundCpu::of(table.cpu.as_ref())
}
