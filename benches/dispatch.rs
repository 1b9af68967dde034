//! The cost of dispatch itself: a trivial kernel called directly, through a typed handle
//! (unboxed and boxed kernels), through a boxed call, and through a functionality key whose
//! boxed fallback redispatches. `cargo bench --bench dispatch`.

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

criterion_group!(benches, bench_dispatch);
criterion_main!(benches);
