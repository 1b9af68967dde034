//! Graph mode's own cost, through the dispatcher on a Rust graph backend
//! of host memory whose compiler makes a trivial program: recording one `array_api::add`
//! (against a budget of about a microsecond an operator; the results are dropped, so a graph
//! cut at its size limit computes nothing), and the sync of a cached graph of a chain of 100
//! adds (its recording untimed; the program hands back its first input, so what is timed is
//! boxfall's part of a sync: the graph found in the cache, run, its output committed).
//! `cargo bench --bench graph_record`.
//!
//! `BOXFALL_BENCH_LOOP=record:1000000` (or `sync:10000`) runs just that so many times, for a
//! profiler (`perf record`).

use std::hint::black_box;
use std::sync::Arc;

use boxfall::backend::register_backend;
use boxfall::graph::{self, register_graph_backend, CompiledGraph, Graph, GraphCompiler};
use boxfall::native::NativeBackend;
use boxfall::tensor::{HostArray, TensorData};
use boxfall::{
    Device, DispatchKey, IValue, KernelFunction, Library, LibraryKind, OperatorHandle, Tensor,
};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

/// Compiles every graph to a program that gives its first input for each output (right for
/// a chain of adds of one-element tensors, whose values nobody reads here).
struct Trivial;

struct FirstInput(usize);

impl CompiledGraph for FirstInput {
    fn run(
        &self,
        inputs: &[TensorData],
        _: &[boxfall::IValue],
    ) -> boxfall::Result<Vec<TensorData>> {
        let first = inputs
            .first()
            .ok_or_else(|| boxfall::Error::Fallback("a graph without inputs".into()))?;
        Ok(vec![first.clone(); self.0])
    }
}

impl GraphCompiler for Trivial {
    fn compile(&self, graph: &Arc<Graph>) -> boxfall::Result<Arc<dyn CompiledGraph>> {
        Ok(Arc::new(FirstInput(graph.outputs.len())))
    }
}

/// The graph backend, `array_api::add` (with the array API's rule registered) and a tensor of
/// the backend; the libraries kept registered.
fn setup() -> (OperatorHandle, Tensor, Vec<Library>) {
    let key = register_backend("BenchGraphRecord", Arc::new(NativeBackend)).expect("backend");
    register_graph_backend(key, Arc::new(Trivial)).expect("graph backend");
    let mut lib = Library::new("array_api", LibraryKind::Fragment).expect("fragment");
    let add = lib
        .define("add(Tensor x1, Tensor x2) -> Tensor")
        .expect("define");
    // Never run: the program above stands for it.
    lib.impl_kernel(
        "add",
        DispatchKey::CPU,
        KernelFunction::from_boxed(|_, _, _| Err(boxfall::Error::Fallback("not run".into()))),
        false,
    )
    .expect("kernel");
    let rule = boxfall::graph::rules::array_api_shape_rule("array_api::add").expect("rule");
    lib.register_shape_rule("add", rule).expect("rule");
    let a = ndarray::ArrayD::<f64>::ones(vec![1]);
    let x = Tensor::host(Device::new(key, 0), HostArray::from(a));
    (add, x, vec![lib])
}

fn record(add: &OperatorHandle, x: &Tensor) -> Tensor {
    let mut stack = vec![IValue::Tensor(x.clone()), IValue::Tensor(x.clone())];
    add.call_boxed(&mut stack).expect("recorded");
    match stack.pop() {
        Some(IValue::Tensor(t)) => t,
        _ => panic!("add gives a tensor"),
    }
}

/// A chain of 100 recorded adds; its last result, pending.
fn chain(add: &OperatorHandle, x: &Tensor) -> Tensor {
    let mut y = x.clone();
    for _ in 0..100 {
        let mut stack = vec![IValue::Tensor(y), IValue::Tensor(x.clone())];
        add.call_boxed(&mut stack).expect("recorded");
        y = match stack.pop() {
            Some(IValue::Tensor(t)) => t,
            _ => panic!("add gives a tensor"),
        };
    }
    y
}

fn bench_graph_record(c: &mut Criterion) {
    let (add, x, _libs) = setup();
    assert!(graph::is_pending(&record(&add, &x)), "add is recorded");
    let y = chain(&add, &x);
    graph::sync("sync").expect("sync");
    assert!(!graph::is_pending(&y), "the chain was computed");
    assert_eq!(graph::graph_metrics().compiled, 1, "one graph compiled");

    if let Some((which, calls)) = loop_request() {
        for _ in 0..calls {
            match which.as_str() {
                "record" => drop(black_box(record(&add, &x))),
                _ => {
                    let y = chain(&add, &x);
                    graph::sync("sync").expect("sync");
                    drop(black_box(y));
                }
            }
        }
        return;
    }
    let mut group = c.benchmark_group("graph_record");
    group.bench_function("record_add", |b| b.iter(|| record(&add, black_box(&x))));
    group.bench_function("sync_cached_chain100", |b| {
        b.iter_batched(
            || chain(&add, &x),
            |y| {
                graph::sync("sync").expect("sync");
                y
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
    assert_eq!(
        graph::graph_metrics().compiled,
        1,
        "every later sync hit the cache"
    );
}

/// `BOXFALL_BENCH_LOOP=which:calls`, if set.
fn loop_request() -> Option<(String, u64)> {
    let v = std::env::var("BOXFALL_BENCH_LOOP").ok()?;
    let (which, calls) = v.split_once(':')?;
    Some((which.to_string(), calls.parse().ok()?))
}

criterion_group!(benches, bench_graph_record);
criterion_main!(benches);
