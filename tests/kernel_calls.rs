//! `kernel_calls` and `kernel_call_ns`: a backend's own kernel (one registered for a backend
//! key other than the CPU) is counted once per call wherever the call is routed, boxed, typed
//! or redispatched; the CPU's kernels, composite kernels and fallbacks are not. Timing is
//! process-wide (`metrics::profile_begin`), so every test here holds `SERIAL`.

mod common;

use std::sync::{Mutex, MutexGuard};

use boxfall::dispatcher::OperatorHandle;
use boxfall::{metrics, native, DispatchKey, IValue, KernelFunction, Library, Tensor};
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn neg_kernel() -> KernelFunction {
    KernelFunction::from_unboxed::<(Tensor,), Tensor>(neg_cpu)
}

/// `neg` with a CPU kernel and a Native Rust kernel of its own.
fn neg_on_native(lib: &mut Library) -> OperatorHandle {
    let op = define_neg(lib);
    lib.impl_kernel("neg", DispatchKey::NATIVE, neg_kernel(), false)
        .unwrap();
    op
}

fn kernel_calls(op: &OperatorHandle, key: DispatchKey) -> (u64, u64) {
    let s = op.metrics().snapshot();
    let f = s.backend(key).copied().unwrap_or_default();
    (f.kernel_calls, f.kernel_call_ns)
}

#[test]
fn a_native_rust_kernel_is_counted_once_per_typed_boxed_and_redispatched_call() {
    let _g = serial();
    let (_, mut lib) = def_lib("kc");
    let op = neg_on_native(&mut lib);
    let x = native::tensor(arr(&[1.0, -2.0]));
    let typed = op.typed::<(Tensor,), Tensor>().unwrap();
    assert_eq!(values(&typed.call((x.clone(),)).unwrap()), [-1.0, 2.0]);
    assert_eq!(kernel_calls(&op, DispatchKey::NATIVE), (1, 0));
    let mut stack = vec![IValue::Tensor(x.clone())];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(kernel_calls(&op, DispatchKey::NATIVE), (2, 0));
    // Redispatched from a functionality key above Native, typed and boxed.
    let f = functionality_key("KcTrace");
    let above = f.set() | DispatchKey::NATIVE;
    typed.redispatch(above, (x.clone(),)).unwrap();
    op.redispatch_boxed(above, &mut vec![IValue::Tensor(x.clone())])
        .unwrap();
    assert_eq!(kernel_calls(&op, DispatchKey::NATIVE), (4, 0));
    // On the given keys, and through a typed signature the kernel does not have (boxed once).
    op.call_boxed_with_keys(
        DispatchKey::NATIVE.set(),
        &mut vec![IValue::Tensor(x.clone())],
    )
    .unwrap();
    let other = op.typed::<(Tensor,), IValue>().unwrap();
    other.call((x,)).unwrap();
    assert_eq!(kernel_calls(&op, DispatchKey::NATIVE), (6, 0));
    // The CPU's kernel ran for none of these, and its calls are never counted.
    typed.call((cpu(&[3.0]),)).unwrap();
    op.call_boxed(&mut vec![IValue::Tensor(cpu(&[3.0]))])
        .unwrap();
    assert_eq!(kernel_calls(&op, DispatchKey::CPU), (0, 0));
    assert_eq!(op.metrics().snapshot().kernel_calls, 6);
}

#[test]
fn a_functionality_kernel_that_redispatches_is_not_counted_but_the_backend_kernel_it_reaches_is() {
    let _g = serial();
    let (ns, mut lib) = def_lib("kc");
    let op = define_neg(&mut lib);
    let f = functionality_key("KcTraceR");
    // A functionality key's kernel passes the call on below its key: not a backend's kernel.
    let trace = KernelFunction::from_boxed(|op, keys, stack| op.redispatch_boxed(keys, stack));
    lib.impl_kernel("neg", f, trace, false).unwrap();
    lib.impl_kernel("neg", DispatchKey::NATIVE, neg_kernel(), false)
        .unwrap();
    let _include = boxfall::key::LocalKeysGuard::include(f.set());
    let x = native::tensor(arr(&[1.0]));
    op.call_boxed(&mut vec![IValue::Tensor(x.clone())]).unwrap();
    op.typed::<(Tensor,), Tensor>().unwrap().call((x,)).unwrap();
    let s = op.metrics().snapshot();
    assert_eq!(s.kernel_calls, 2, "{ns}: Native's kernel once a call");
    assert!(s.backend(f).is_none_or(|b| b.kernel_calls == 0));
}

#[test]
fn composite_kernels_and_fallbacks_are_not_counted_as_a_backends_own() {
    let _g = serial();
    native::install_fallback().unwrap();
    let (_, mut lib) = def_lib("kc");
    let op = define_neg(&mut lib);
    let x = native::tensor(arr(&[1.0]));
    // Native falls back to the CPU kernel: a fallback, not a kernel call.
    op.call_boxed(&mut vec![IValue::Tensor(x.clone())]).unwrap();
    let s = op.metrics().snapshot();
    assert_eq!((s.fallbacks, s.kernel_calls), (1, 0));
    // A composite kernel serving Native is not Native's own either.
    let (_, mut lib2) = def_lib("kc");
    let comp = define_neg(&mut lib2);
    lib2.impl_kernel("neg", DispatchKey::COMPOSITE_IMPLICIT, neg_kernel(), false)
        .unwrap();
    comp.typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((x,))
        .unwrap();
    assert_eq!(comp.metrics().snapshot().kernel_calls, 0);
}

#[test]
fn a_backends_own_kernel_is_timed_only_while_profiling() {
    let _g = serial();
    let (_, mut lib) = def_lib("kc");
    let op = define_neg(&mut lib);
    // A kernel of a known least duration, so that a timed call shows in the figures.
    let slow = KernelFunction::from_unboxed::<(Tensor,), Tensor>(|keys, args| {
        std::thread::sleep(std::time::Duration::from_millis(2));
        neg_cpu(keys, args)
    });
    lib.impl_kernel("neg", DispatchKey::NATIVE, slow, false)
        .unwrap();
    let typed = op.typed::<(Tensor,), Tensor>().unwrap();
    let x = native::tensor(arr(&[1.0]));
    typed.call((x.clone(),)).unwrap();
    assert_eq!(kernel_calls(&op, DispatchKey::NATIVE), (1, 0));
    metrics::profile_begin();
    typed.call((x.clone(),)).unwrap();
    op.call_boxed(&mut vec![IValue::Tensor(x.clone())]).unwrap();
    metrics::profile_end();
    let (calls, ns) = kernel_calls(&op, DispatchKey::NATIVE);
    assert_eq!(calls, 3);
    assert!(ns >= 4_000_000, "two calls of 2 ms timed, not {ns} ns");
    typed.call((x,)).unwrap();
    let (calls, after) = kernel_calls(&op, DispatchKey::NATIVE);
    assert_eq!(calls, 4);
    // Not timed: the figure moves only by the clock's conversion, far less than the 2 ms.
    assert!(after.abs_diff(ns) < 1_000_000, "{ns} -> {after}");
}

#[test]
fn the_router_tells_its_callers_which_calls_to_count() {
    let _g = serial();
    let (_, mut lib) = def_lib("kc");
    let op = neg_on_native(&mut lib);
    let native_keys = DispatchKey::NATIVE.set();
    let count = op.route(native_keys, |r| r.counted()).unwrap();
    assert_eq!(count.backend(), Some(DispatchKey::NATIVE));
    assert_eq!(count.run(&op, || 5), 5);
    let cpu_count = op.route(DispatchKey::CPU.set(), |r| r.counted()).unwrap();
    assert_eq!(cpu_count.backend(), None);
    cpu_count.run(&op, || ());
    assert_eq!(kernel_calls(&op, DispatchKey::NATIVE), (1, 0));
    // A routed boxed call counts as the dispatcher's does.
    let mut stack = vec![IValue::Tensor(native::tensor(arr(&[2.0])))];
    op.resolve(native_keys, |r| r.call_boxed(&op, &mut stack))
        .unwrap()
        .unwrap();
    assert_eq!(values(tensor_of(&stack[0])), [-2.0]);
    assert_eq!(kernel_calls(&op, DispatchKey::NATIVE), (2, 0));
}
