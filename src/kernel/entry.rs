//! Publishing a table entry: its route decided and its calls bound, once (c10's
//! `computeDispatchTableEntryWithDebug` with its `KernelFunction` filled in).

use std::any::{Any, TypeId};
use std::sync::Arc;

use crate::error::Result;
use crate::ivalue::Stack;
use crate::key::{DispatchKey, DispatchKeySet};
use crate::schema::OpSchema;

use super::routes::{CpuKernel, Route, Source};
use super::types::{
    DispatchTable, ForeignRef, KernelCount, KernelFunction, OperatorHandle, TableEntry,
};
use super::unboxed::{UnboxedFn, UnboxedPtr};

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
            // The CPU fallback's own typed wrapper runs its steps compiled with the CPU kernel's
            // signature on the kernel this table binds (`DispatchTable::cpu`, the `cpu` here):
            // offered only where that kernel has them, since any other typed call would be
            // declined and boxed.
            Some(bind) => (
                bind(cpu.cloned()),
                k.wrapper
                    .clone()
                    .filter(|_| cpu.is_some_and(|c| c.typed_fallback.is_some())),
            ),
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
            cpu: None,
        }
    }
}
