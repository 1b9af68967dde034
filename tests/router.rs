//! The router: what serves each key, and how, is decided when an operator's table is published
//! (`Route`, read with `OperatorHandle::route_for`), so that no call has to ask a kernel what
//! it is; a kernel registered for one key serves that key (and, for CompositeImplicit, the
//! backend keys) and no other; every entry point computes a call's keys the same way.

mod common;

use boxfall::kernel::{CpuKernel, Route};
use boxfall::key::LocalKeysGuard;
use boxfall::{cpu_fallback, DispatchKey, Error, IValue, KernelFunction, OperatorHandle, Tensor};
use common::*;

fn neg_kernel() -> KernelFunction {
    KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| {
        Ok(Tensor::from_array(-f64_array(&x)?))
    })
}

/// A boxed kernel that returns `marker` (as an int), whatever its arguments.
fn marker(marker: i64) -> KernelFunction {
    KernelFunction::from_boxed(move |_, _, stack| {
        stack.clear();
        stack.push(IValue::Int(marker));
        Ok(())
    })
}

#[test]
fn a_table_entry_tells_how_its_calls_run() {
    boxfall::native::install_fallback().expect("Native's fallback");
    let (ns, mut lib) = def_lib("route");
    let op = lib.define("neg(Tensor x) -> Tensor").expect("defines");
    // Nothing for CPU: Native's entry is the CPU fallback, with no CPU kernel to run.
    assert_eq!(op.route_for(DispatchKey::CPU), Route::Missing);
    assert_eq!(
        op.route_for(DispatchKey::NATIVE),
        Route::CpuFallback(CpuKernel::Missing)
    );
    // A CPU kernel made from a typed function: the fallback runs it compiled.
    let mut cpu = impl_lib(&ns);
    cpu.impl_kernel("neg", DispatchKey::CPU, neg_kernel(), false)
        .expect("registers");
    assert_eq!(op.route_for(DispatchKey::CPU), Route::Kernel);
    assert_eq!(
        op.route_for(DispatchKey::NATIVE),
        Route::CpuFallback(CpuKernel::Compiled)
    );
    // Its registration gone, the table is published again without it.
    drop(cpu);
    assert_eq!(
        op.route_for(DispatchKey::NATIVE),
        Route::CpuFallback(CpuKernel::Missing)
    );
    // A boxed CPU kernel: the fallback runs its boxed entry point.
    let mut boxed = impl_lib(&ns);
    boxed
        .impl_kernel("neg", DispatchKey::CPU, marker(1), false)
        .expect("registers");
    assert_eq!(
        op.route_for(DispatchKey::NATIVE),
        Route::CpuFallback(CpuKernel::Boxed)
    );
    // Native's own kernel replaces the fallback.
    lib.impl_kernel("neg", DispatchKey::NATIVE, marker(2), false)
        .expect("registers");
    assert_eq!(op.route_for(DispatchKey::NATIVE), Route::Kernel);
}

#[test]
fn fallthroughs_composites_and_other_fallbacks_have_their_routes() {
    let key = backend_key("route_other");
    let mut fb = fallback_lib();
    fb.fallback(key, marker(9)).expect("a fallback of its own");
    let (_, mut lib) = def_lib("route_kinds");
    let op = lib.define("f(Tensor x) -> int").expect("defines");
    // A backend fallback that is not the CPU fallback runs as the kernel it is.
    assert_eq!(op.route_for(key), Route::Kernel);
    lib.impl_kernel("f", DispatchKey::COMPOSITE_IMPLICIT, marker(3), false)
        .expect("registers");
    // A composite kernel serves the backend keys before their fallbacks.
    assert_eq!(op.route_for(key), Route::Kernel);
    assert_eq!(op.route_for(DispatchKey::CPU), Route::Kernel);
    lib.impl_kernel("f", DispatchKey::CPU, KernelFunction::fallthrough(), false)
        .expect("registers");
    assert_eq!(op.route_for(DispatchKey::CPU), Route::Fallthrough);
}

#[test]
fn a_cpu_fallback_entry_runs_the_cpu_kernel_the_cpu_key_reaches() {
    // A fallthrough on CPU masks the CPU kernel: the fallback has none to run.
    let key = backend_key("route_masked");
    let mut fb = fallback_lib();
    fb.fallback(key, cpu_fallback()).expect("the CPU fallback");
    let (_, mut lib) = def_lib("route_masked");
    let op = lib.define("neg(Tensor x) -> Tensor").expect("defines");
    lib.impl_kernel("neg", DispatchKey::CPU, neg_kernel(), false)
        .expect("registers");
    assert_eq!(op.route_for(key), Route::CpuFallback(CpuKernel::Compiled));
    let mut ft = impl_lib(op.name().split("::").next().expect("a namespace"));
    ft.impl_kernel("neg", DispatchKey::CPU, KernelFunction::fallthrough(), true)
        .expect("registers");
    assert_eq!(op.route_for(key), Route::CpuFallback(CpuKernel::Missing));
}

/// Calls `op` boxed on exactly `keys`: the marker it returned, or the error.
fn boxed_on(op: &OperatorHandle, keys: boxfall::DispatchKeySet) -> Result<i64, Error> {
    let mut stack = vec![IValue::Int(0)];
    op.call_boxed_with_keys(keys, &mut stack)?;
    Ok(stack[0].to_int().expect("an int"))
}

#[test]
fn a_kernel_registered_for_one_key_serves_no_other() {
    let (a, b) = (backend_key("route_a"), backend_key("route_b"));
    let (_, mut lib) = def_lib("route_one_key");
    let op = lib.define("f(int x) -> int").expect("defines");
    lib.impl_kernel("f", a, marker(7), false)
        .expect("registers");
    assert_eq!(boxed_on(&op, a.set()).expect("served"), 7);
    // Not Native: other tests of this binary install its fallback, which would serve it.
    for other in [b, DispatchKey::CPU] {
        assert_eq!(op.route_for(other), Route::Missing, "{other}");
        let e = boxed_on(&op, other.set()).expect_err("nothing serves it");
        assert!(
            matches!(&e, Error::NoKernel { key, .. } if *key == other.name()),
            "{e}"
        );
        // Redispatching from above lands on the key below, never on `a`.
        let e = op
            .redispatch_boxed(b.set() | other, &mut vec![IValue::Int(0)])
            .expect_err("nothing serves it");
        assert!(matches!(e, Error::NoKernel { .. }), "{e}");
    }
    // Typed and boxed calls route alike.
    let typed = op.typed::<(i64,), i64>().expect("typed");
    assert!(typed.redispatch(b.set() | DispatchKey::CPU, (0,)).is_err());
    assert_eq!(typed.redispatch(b.set() | a, (0,)).expect("served"), 7);
}

#[test]
fn every_entry_point_computes_the_call_keys_the_same_way() {
    let key = functionality_key("route_tls");
    let (_, mut lib) = def_lib("route_tls");
    let op = lib.define("f(Tensor x) -> int").expect("defines");
    lib.impl_kernel("f", DispatchKey::CPU, marker(1), false)
        .expect("registers");
    lib.impl_kernel("f", key, marker(2), false)
        .expect("registers");
    let typed = op.typed::<(Tensor,), i64>().expect("typed");
    let boxed = |op: &OperatorHandle| {
        let mut stack = vec![IValue::Tensor(cpu(&[1.0]))];
        op.call_boxed(&mut stack).expect("served");
        stack[0].to_int().expect("an int")
    };
    let args = [IValue::Tensor(cpu(&[1.0]))];
    assert_eq!(
        (boxed(&op), typed.call((cpu(&[1.0]),)).expect("served")),
        (1, 1)
    );
    {
        let _in = LocalKeysGuard::include(key.set());
        assert_eq!(op.call_keys(&args).expect("keys").highest(), Some(key));
        assert_eq!(
            (boxed(&op), typed.call((cpu(&[1.0]),)).expect("served")),
            (2, 2)
        );
        let _out = LocalKeysGuard::exclude(key.set());
        assert_eq!(
            op.call_keys(&args).expect("keys").highest(),
            Some(DispatchKey::CPU)
        );
        assert_eq!(
            (boxed(&op), typed.call((cpu(&[1.0]),)).expect("served")),
            (1, 1)
        );
    }
    assert_eq!(
        (boxed(&op), typed.call((cpu(&[1.0]),)).expect("served")),
        (1, 1)
    );
}

#[test]
fn a_typed_call_through_a_cpu_fallback_entry_runs_the_cpu_kernel_once_and_counts() {
    boxfall::native::install_fallback().expect("Native's fallback");
    let (_, mut lib) = def_lib("route_typed");
    let op = lib.define("neg(Tensor x) -> Tensor").expect("defines");
    lib.impl_kernel("neg", DispatchKey::CPU, neg_kernel(), false)
        .expect("registers");
    let x = boxfall::native::tensor(arr(&[1.0, -2.0]));
    let y = op
        .typed::<(Tensor,), Tensor>()
        .expect("typed")
        .call((x.clone(),))
        .expect("the fallback serves it");
    assert_eq!(y.device(), boxfall::native::DEVICE);
    assert_eq!(values(&y), vec![-1.0, 2.0]);
    let mut stack = vec![IValue::Tensor(x)];
    op.call_boxed(&mut stack).expect("the fallback serves it");
    assert_eq!(values(tensor_of(&stack[0])), vec![-1.0, 2.0]);
    let stats = boxfall::Dispatcher::op_stats(op.name()).expect("counted");
    assert_eq!(stats.fallbacks, 2);
}

#[test]
fn foreign_kernels_and_two_tensor_entries_have_routes_of_their_own() {
    boxfall::native::install_fallback().expect("Native's fallback");
    let (_, mut lib) = def_lib("route_foreign");
    let op = lib.define("f(Tensor x) -> int").expect("defines");
    let foreign = |n: i64| marker(n).with_foreign(std::sync::Arc::new(n));
    lib.impl_kernel("f", DispatchKey::CPU, foreign(4), false)
        .expect("registers");
    assert_eq!(op.route_for(DispatchKey::CPU), Route::Foreign);
    // The CPU fallback around a foreign CPU kernel says so, and the router gives its payload.
    assert_eq!(
        op.route_for(DispatchKey::NATIVE),
        Route::CpuFallback(CpuKernel::Foreign)
    );
    let native = op
        .route(DispatchKey::NATIVE.set() | DispatchKey::CPU, |r| {
            (
                r.route(),
                r.cpu_foreign::<i64>().copied(),
                r.foreign::<i64>().is_none(),
            )
        })
        .expect("defined");
    assert_eq!(
        native,
        (Route::CpuFallback(CpuKernel::Foreign), Some(4), true)
    );
    let on_cpu = op
        .route(DispatchKey::CPU.set(), |r| {
            (
                r.foreign::<i64>().copied(),
                r.foreign::<u8>().copied(),
                r.tensors().is_none(),
            )
        })
        .expect("defined");
    assert_eq!(on_cpu, (Some(4), None, true));
    // The dispatcher calls a foreign kernel by its boxed entry.
    assert_eq!(boxed_on(&op, DispatchKey::CPU.set()).expect("served"), 4);
    // A kernel with an entry on two tensors.
    let two = marker(5).with_tensors_entry(|_, x, _| Ok(Some(x.clone())));
    lib.impl_kernel("f", DispatchKey::NATIVE, two, false)
        .expect("registers");
    assert_eq!(op.route_for(DispatchKey::NATIVE), Route::Tensors);
    let x = cpu(&[3.0]);
    let out = op
        .resolve(DispatchKey::NATIVE.set(), |r| {
            assert_eq!(r.keys(), DispatchKey::NATIVE.set());
            r.tensors().expect("the entry")(&op, &x, &x)
        })
        .expect("defined")
        .expect("runs")
        .expect("a result");
    assert_eq!(values(&out), vec![3.0]);
    assert_eq!(boxed_on(&op, DispatchKey::NATIVE.set()).expect("served"), 5);
}

#[test]
fn the_router_gives_the_registered_payload_itself_from_the_table_it_loaded() {
    let (ns, mut lib) = def_lib("route_payload");
    let op = lib.define("f(int x) -> int").expect("defines");
    let first = std::sync::Arc::new(String::from("first"));
    lib.impl_kernel(
        "f",
        DispatchKey::CPU,
        marker(1).with_foreign(first.clone()),
        false,
    )
    .expect("registers");
    let payload_at = |op: &OperatorHandle| {
        op.route(DispatchKey::CPU.set(), |r| {
            r.foreign::<String>()
                .map(|s| (s.clone(), std::ptr::from_ref(s)))
        })
        .flatten()
    };
    // The object registered, not a copy: the table records where it lies.
    assert_eq!(
        payload_at(&op),
        Some(("first".to_owned(), std::sync::Arc::as_ptr(&first)))
    );
    // A kernel registered over it: the next table gives the new payload, and the old one
    // again once that registration is undone.
    let mut over = impl_lib(&ns);
    let second = std::sync::Arc::new(String::from("second"));
    over.impl_kernel(
        "f",
        DispatchKey::CPU,
        marker(2).with_foreign(second.clone()),
        true,
    )
    .expect("registers");
    assert_eq!(
        payload_at(&op),
        Some(("second".to_owned(), std::sync::Arc::as_ptr(&second)))
    );
    over.close();
    assert_eq!(payload_at(&op).map(|(s, _)| s), Some("first".to_owned()));
    // A payload read inside a route is that table's, though the table is replaced meanwhile.
    let mut later = impl_lib(&ns);
    let seen = op
        .route(DispatchKey::CPU.set(), |r| {
            let p = r.foreign::<String>().expect("the payload");
            later
                .impl_kernel(
                    "f",
                    DispatchKey::CPU,
                    marker(3).with_foreign(second.clone()),
                    true,
                )
                .expect("registers");
            p.clone()
        })
        .expect("defined");
    assert_eq!(seen, "first");
    assert_eq!(payload_at(&op).map(|(s, _)| s), Some("second".to_owned()));
    drop(later);
    drop(first);
    assert_eq!(payload_at(&op).map(|(s, _)| s), Some("first".to_owned()));
}

#[test]
fn the_router_masks_the_keys_and_tells_an_undefined_operator() {
    let (_, mut lib) = def_lib("route_router");
    let op = lib.define("f(int x) -> int").expect("defines");
    lib.impl_kernel("f", DispatchKey::CPU, marker(1), false)
        .expect("registers");
    lib.impl_kernel(
        "f",
        DispatchKey::NATIVE,
        KernelFunction::fallthrough(),
        false,
    )
    .expect("registers");
    let keys = DispatchKey::NATIVE.set() | DispatchKey::CPU;
    let routed = op.route(keys, |r| (r.keys(), r.route(), r.kernel().is_some()));
    assert_eq!(routed, Some((DispatchKey::CPU.set(), Route::Kernel, true)));
    let missing = op.route(DispatchKey::NATIVE.set(), |r| {
        (r.route(), r.kernel().is_none())
    });
    assert_eq!(missing, Some((Route::Missing, true)));
    lib.close();
    assert!(op.route(keys, |_| ()).is_none());
    assert!(op.resolve(keys, |_| ()).is_none());
}

/// A typed wrapper that declines every typed call, counting the calls offered to it.
struct Declines(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl boxfall::kernel::TypedWrapper for Declines {
    fn call_typed(
        &self,
        _: &OperatorHandle,
        _: &boxfall::dispatcher::DispatchTable,
        _: boxfall::DispatchKeySet,
        _: &mut boxfall::kernel::TypedCall<'_>,
    ) -> Option<boxfall::Result<()>> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        None
    }
}

#[test]
fn a_kernel_with_a_typed_wrapper_has_its_route_and_typed_calls_offered_to_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let f = functionality_key("route_wrapper");
    let (_, mut lib) = def_lib("route_wrapper");
    let op = lib.define("f(int x) -> int").expect("defines");
    let offers = std::sync::Arc::new(AtomicUsize::new(0));
    let wrapping = marker(4).with_typed_wrapper(Declines(offers.clone()));
    lib.impl_kernel("f", f, wrapping, false).expect("registers");
    assert_eq!(op.route_for(f), Route::Wrapper);
    let _include = LocalKeysGuard::include(f.set());
    // Typed: offered to the wrapper, which declines, so the kernel's boxed entry serves it.
    let typed = op.typed::<(i64,), i64>().expect("typed");
    assert_eq!(typed.call((1,)).expect("served"), 4);
    assert_eq!(offers.load(Ordering::Relaxed), 1);
    // Boxed: the kernel's boxed entry, with no offer to the wrapper.
    let mut stack = vec![IValue::Int(1)];
    op.call_boxed(&mut stack).expect("served");
    assert_eq!(stack[0].to_int(), Some(4));
    assert_eq!(offers.load(Ordering::Relaxed), 1);
}
