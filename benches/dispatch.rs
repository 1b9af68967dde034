//! The cost of dispatch itself: a trivial kernel called directly, through a typed handle
//! (unboxed and boxed kernels), through a boxed call, and through a functionality key whose
//! boxed fallback redispatches. `cargo bench --bench dispatch`.
//!
//! `BOXFALL_BENCH_LOOP=hop:1000000` (or `direct`, `typed-unboxed`, `typed-boxed`, `boxed`) runs
//! just that call so many times, for a profiler or an instruction count
//! (`valgrind --tool=callgrind`, with a run of 0 calls to subtract the setup).

use std::hint::black_box;

use boxfall::key::{register_functionality_key, LocalKeysGuard};
use boxfall::{DispatchKey, DispatchKeySet, IValue, KernelFunction, Library, LibraryKind, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};

fn identity(_keys: DispatchKeySet, (t,): (Tensor,)) -> boxfall::Result<Tensor> {
    Ok(t)
}

fn bench_dispatch(c: &mut Criterion) {
    let mut lib = Library::new("bench_dispatch", LibraryKind::Def).expect("library");
    let unboxed_op = lib
        .define("unboxed(Tensor self) -> Tensor")
        .expect("define");
    let boxed_op = lib.define("boxed(Tensor self) -> Tensor").expect("define");
    lib.impl_kernel(
        "unboxed",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(identity),
        false,
    )
    .expect("impl");
    // The boxed twin of `identity`: the argument is already the return.
    lib.impl_kernel(
        "boxed",
        DispatchKey::CPU,
        KernelFunction::from_boxed(|_op, _keys, _stack| Ok(())),
        false,
    )
    .expect("impl");
    let trace = register_functionality_key("BenchTrace").expect("key");
    let mut fb = Library::new("_", LibraryKind::Impl).expect("fallback library");
    fb.fallback(
        trace,
        KernelFunction::from_boxed(|op, keys, stack| op.redispatch_boxed(keys, stack)),
    )
    .expect("fallback");

    let t = Tensor::from_array(ndarray::ArrayD::<f64>::zeros(vec![1]));
    let typed_unboxed = unboxed_op.typed::<(Tensor,), Tensor>().expect("typed");
    let typed_boxed = boxed_op.typed::<(Tensor,), Tensor>().expect("typed");

    if let Some((which, calls)) = loop_request() {
        let _g = (which == "hop").then(|| LocalKeysGuard::include(trace.set()));
        let f: boxfall::kernel::UnboxedFn<(Tensor,), Tensor> = identity;
        let mut stack = Vec::with_capacity(1);
        match which.as_str() {
            "direct" => repeat(calls, || {
                black_box(f)(DispatchKey::CPU.set(), (black_box(&t).clone(),))
            }),
            "typed-unboxed" | "hop" => repeat(calls, || typed_unboxed.call((black_box(&t).clone(),))),
            "typed-boxed" => repeat(calls, || typed_boxed.call((black_box(&t).clone(),))),
            // On a stack kept between calls, so that the loop counts dispatch only.
            "boxed" => repeat(calls, || {
                stack.push(IValue::Tensor(black_box(&t).clone()));
                let r = unboxed_op.call_boxed(&mut stack);
                stack.clear();
                r
            }),
            other => panic!("BOXFALL_BENCH_LOOP: no call {other:?} (direct, typed-unboxed, typed-boxed, boxed, hop)"),
        }
        return;
    }

    let mut g = c.benchmark_group("dispatch");
    g.bench_function("direct function call", |b| {
        let f: boxfall::kernel::UnboxedFn<(Tensor,), Tensor> = identity;
        b.iter(|| black_box(f)(DispatchKey::CPU.set(), (black_box(&t).clone(),)))
    });
    g.bench_function("typed call, unboxed kernel", |b| {
        b.iter(|| typed_unboxed.call((black_box(&t).clone(),)))
    });
    g.bench_function("typed call, boxed kernel", |b| {
        b.iter(|| typed_boxed.call((black_box(&t).clone(),)))
    });
    g.bench_function("boxed call, unboxed kernel", |b| {
        b.iter(|| {
            let mut stack = vec![IValue::Tensor(black_box(&t).clone())];
            unboxed_op.call_boxed(&mut stack).map(|_| stack)
        })
    });
    g.bench_function("typed call through a boxed functionality fallback", |b| {
        let _g = LocalKeysGuard::include(trace.set());
        b.iter(|| typed_unboxed.call((black_box(&t).clone(),)))
    });
    g.finish();
}

/// Makes `calls` calls with `f`, and nothing else.
fn repeat<T>(calls: u64, mut f: impl FnMut() -> T) {
    for _ in 0..calls {
        black_box(f());
    }
}

/// `BOXFALL_BENCH_LOOP=<call>:<count>`, if set.
fn loop_request() -> Option<(String, u64)> {
    let v = std::env::var("BOXFALL_BENCH_LOOP").ok()?;
    let (which, calls) = v.split_once(':')?;
    Some((which.to_owned(), calls.parse().ok()?))
}

criterion_group!(benches, bench_dispatch);
criterion_main!(benches);
