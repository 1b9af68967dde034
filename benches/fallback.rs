//! The CPU fallback against a hand-written unboxed fallback of the same operator on the same
//! tensors, and against the direct CPU call: on Native, which lends its memory to the CPU
//! kernel, and on `Copying`, a backend whose every transfer copies (where the hand-written
//! fallback is "the copies + the kernel"). A typed call of `cpu_fallback` runs without boxing
//! (the operator is functional and its CPU kernel typed); a boxed call (a stack, as Python's)
//! takes the boxed path, measured against the hand-written kernel called the same way.
//! `cargo bench --bench fallback`.

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::OnceLock;

use boxfall::backend::{register_backend, Backend};
use boxfall::native::{self, NativeBackend};
use boxfall::{
    Device, DispatchKey, DispatchKeySet, IValue, KernelFunction, Library, LibraryKind,
    OperatorHandle, Stack, Tensor, TypedOperatorHandle,
};
use criterion::{criterion_group, criterion_main, Criterion};
use ndarray::ArrayD;

type Binary = TypedOperatorHandle<(Tensor, Tensor), Tensor>;

fn add_cpu(_keys: DispatchKeySet, (a, b): (Tensor, Tensor)) -> boxfall::Result<Tensor> {
    let (x, y) = (a.to_host()?, b.to_host()?);
    match (x.as_f64(), y.as_f64()) {
        (Some(x), Some(y)) => Ok(Tensor::from_array(x + y)),
        _ => Err(boxfall::Error::Fallback("add_cpu takes float64".into())),
    }
}

/// Host memory like Native, but every transfer copies: what a real device's fallback pays.
struct Copying;

impl Backend for Copying {
    fn to_cpu(&self, t: &Tensor, _for_write: bool) -> boxfall::Result<Tensor> {
        Ok(Tensor::host(Device::CPU, (*t.to_host()?).clone()))
    }
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> boxfall::Result<Tensor> {
        Ok(Tensor::host(device, (*cpu.to_host()?).clone()))
    }
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> boxfall::Result<()> {
        dst.set_data(Tensor::host(Device::CPU, (*src.to_host()?).clone()).data());
        Ok(())
    }
}

static HAND_CPU: OnceLock<Binary> = OnceLock::new();
static HAND_OP: OnceLock<OperatorHandle> = OnceLock::new();

/// What a code generator would write for this one operator: move, call the CPU kernel, move
/// back, count, time (with the fallback's clock) and measure the bytes each way, in the
/// operator's own counters, as the boxed fallback does.
fn add_hand_fallback(_keys: DispatchKeySet, (a, b): (Tensor, Tensor)) -> boxfall::Result<Tensor> {
    hand_fallback(&NativeBackend, a, b)
}

/// The same, on `Copying`.
fn add_hand_copying(_keys: DispatchKeySet, (a, b): (Tensor, Tensor)) -> boxfall::Result<Tensor> {
    hand_fallback(&Copying, a, b)
}

#[inline(always)]
fn hand_fallback(backend: &dyn Backend, a: Tensor, b: Tensor) -> boxfall::Result<Tensor> {
    let start = boxfall::clock::ticks();
    // What the boxed fallback guarantees too: one device for the results (two devices are an
    // error), and a DEBUG record when asked for.
    let device = a.device();
    if b.device() != device && b.device() != Device::CPU {
        return Err(boxfall::Error::Fallback(format!(
            "add_hand got tensors on two devices, {device} and {}",
            b.device()
        )));
    }
    if log::log_enabled!(target: "boxfall", log::Level::Debug) {
        log::debug!(target: "boxfall", "add_hand on {device}: {a:?}, {b:?}");
    }
    let ca = backend.to_cpu(&a, false)?;
    let cb = backend.to_cpu(&b, false)?;
    let moved = (ca.nbytes() + cb.nbytes()) as u64;
    let cpu = HAND_CPU
        .get()
        .ok_or_else(|| boxfall::Error::Fallback("not set up".into()))?
        .call((ca, cb))?;
    let back = cpu.nbytes() as u64;
    let out = backend.from_cpu_owned(cpu, device)?;
    if let Some(op) = HAND_OP.get() {
        let ticks = boxfall::clock::ticks() - start;
        op.metrics().record(device.key, ticks, moved, back, true);
    }
    Ok(out)
}

fn bench_fallback(c: &mut Criterion) {
    native::install_fallback().expect("native fallback");
    let mut lib = Library::new("bench_fallback", LibraryKind::Def).expect("library");
    let boxed_op = lib
        .define("add(Tensor self, Tensor other) -> Tensor")
        .expect("define");
    let hand_op = lib
        .define("add_hand(Tensor self, Tensor other) -> Tensor")
        .expect("define");
    for name in ["add", "add_hand"] {
        lib.impl_kernel(
            name,
            DispatchKey::CPU,
            KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(add_cpu),
            false,
        )
        .expect("impl");
    }
    lib.impl_kernel(
        "add_hand",
        DispatchKey::NATIVE,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(add_hand_fallback),
        false,
    )
    .expect("impl");
    let copying = register_backend("Copying", std::sync::Arc::new(Copying)).expect("backend");
    let mut copy_fb = Library::new("_", LibraryKind::Impl).expect("fallback library");
    copy_fb
        .fallback(copying, boxfall::cpu_fallback())
        .expect("fallback");
    lib.impl_kernel(
        "add_hand",
        copying,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(add_hand_copying),
        false,
    )
    .expect("impl");
    let boxed: Binary = boxed_op.typed().expect("typed");
    let hand: Binary = hand_op.typed().expect("typed");
    let _ = HAND_CPU.set(hand.clone());
    let _ = HAND_OP.set(hand_op.clone());

    for n in [1usize, 1 << 20] {
        let a = ArrayD::<f64>::from_elem(vec![n], 1.5);
        let (cpu_a, cpu_b) = (Tensor::from_array(a.clone()), Tensor::from_array(a.clone()));
        let (nat_a, nat_b) = (native::tensor(a.clone()), native::tensor(a.clone()));
        let on_copying = |a: &ArrayD<f64>| Tensor::host(Device::new(copying, 0), a.clone().into());
        let (copy_a, copy_b) = (on_copying(&a), on_copying(&a));
        if let Some((which, calls)) = loop_request().filter(|_| n == 1) {
            let (op, x, y) = match which.as_str() {
                "direct" => (&boxed, &cpu_a, &cpu_b),
                "hand" | "boxed-hand" => (&hand, &nat_a, &nat_b),
                "copying-hand" => (&hand, &copy_a, &copy_b),
                "copying-fallback" => (&boxed, &copy_a, &copy_b),
                "fallback" | "boxed-fallback" => (&boxed, &nat_a, &nat_b),
                other => panic!("BOXFALL_BENCH_LOOP: no call {other:?} (fallback, hand, direct, copying-hand, copying-fallback, boxed-fallback, boxed-hand)"),
            };
            let boxed_caller = which.starts_with("boxed-");
            for _ in 0..calls {
                if boxed_caller {
                    let _ = black_box(call_boxed(op.handle(), black_box(x), y));
                } else {
                    let _ = black_box(op.call((black_box(x).clone(), y.clone())));
                }
            }
            return;
        }
        let mut g = c.benchmark_group(format!("fallback/{n} f64"));
        if n > 1 {
            g.sample_size(30);
        }
        g.bench_function("direct CPU call", |b| {
            b.iter(|| boxed.call((black_box(&cpu_a).clone(), cpu_b.clone())))
        });
        g.bench_function("hand-written unboxed fallback", |b| {
            b.iter(|| hand.call((black_box(&nat_a).clone(), nat_b.clone())))
        });
        g.bench_function("cpu_fallback", |b| {
            b.iter(|| boxed.call((black_box(&nat_a).clone(), nat_b.clone())))
        });
        g.bench_function("boxed call: hand-written", |b| {
            b.iter(|| call_boxed(hand.handle(), black_box(&nat_a), &nat_b))
        });
        g.bench_function("boxed call: cpu_fallback", |b| {
            b.iter(|| call_boxed(boxed.handle(), black_box(&nat_a), &nat_b))
        });
        g.bench_function("Copying: hand-written (the copies + the kernel)", |b| {
            b.iter(|| hand.call((black_box(&copy_a).clone(), copy_b.clone())))
        });
        g.bench_function("Copying: cpu_fallback", |b| {
            b.iter(|| boxed.call((black_box(&copy_a).clone(), copy_b.clone())))
        });
        g.finish();
        // Paired figures: rounds of 2,000 calls for 1 element, 4 for 1M (under 1 ms and about 35 ms); only
        // under `cargo bench` (`cargo test` runs each benchmark once, unoptimized, as a test).
        if !std::env::args().any(|a| a == "--bench") {
            continue;
        }
        let calls = if n == 1 { 2_000 } else { 4 };
        let direct = || boxed.call((black_box(&cpu_a).clone(), cpu_b.clone()));
        let native_hand = || hand.call((black_box(&nat_a).clone(), nat_b.clone()));
        let native_boxed = || boxed.call((black_box(&nat_a).clone(), nat_b.clone()));
        paired(n, "Native", calls, [&direct, &native_hand, &native_boxed]);
        let copying_hand = || hand.call((black_box(&copy_a).clone(), copy_b.clone()));
        let copying_boxed = || boxed.call((black_box(&copy_a).clone(), copy_b.clone()));
        paired(
            n,
            "Copying",
            calls,
            [&direct, &copying_hand, &copying_boxed],
        );
        let boxed_hand = || call_boxed(hand.handle(), black_box(&nat_a), &nat_b);
        let boxed_fallback = || call_boxed(boxed.handle(), black_box(&nat_a), &nat_b);
        paired(
            n,
            "Native, boxed calls",
            calls,
            [&direct, &boxed_hand, &boxed_fallback],
        );
    }
}

thread_local! {
    static STACK: RefCell<Stack> = RefCell::new(Vec::with_capacity(4));
}

/// A boxed call of `op(x, y)`, on a stack kept for the next call (as a boxed caller keeps its
/// own): the path every call of a Python operator takes.
fn call_boxed(op: &OperatorHandle, x: &Tensor, y: &Tensor) -> boxfall::Result<Tensor> {
    STACK.with_borrow_mut(|stack| {
        stack.push(IValue::Tensor(x.clone()));
        stack.push(IValue::Tensor(y.clone()));
        let r = op.call_boxed(stack).and_then(|()| match stack.pop() {
            Some(IValue::Tensor(t)) => Ok(t),
            other => Err(boxfall::Error::Fallback(format!("add returned {other:?}"))),
        });
        stack.clear();
        r
    })
}

/// `BOXFALL_BENCH_LOOP=fallback:100000` (or `hand`, `direct`, `copying-hand`,
/// `copying-fallback`, and the boxed calls `boxed-fallback`, `boxed-hand`): runs that 1-element
/// call so many times and nothing else, for a profiler or an instruction
/// count (`valgrind --tool=callgrind`, with a run of 0 calls to subtract the setup).
fn loop_request() -> Option<(String, u64)> {
    let v = std::env::var("BOXFALL_BENCH_LOOP").ok()?;
    let (which, calls) = v.split_once(':')?;
    Some((which.to_owned(), calls.parse().ok()?))
}

/// The direct call, the hand-written fallback and `cpu_fallback` timed in turn, `rounds` times
/// `calls` calls each, the order reversed every other round: the ratios are the medians of each
/// round's own ratios, so the machine's drift (10-30% between runs here) cancels between
/// neighbours instead of entering them, as it does between criterion's separate measurements.
/// The times are the best rounds'.
fn paired(n: usize, backend: &str, calls: u32, run: [&dyn Fn() -> boxfall::Result<Tensor>; 3]) {
    let time = |f: &dyn Fn() -> boxfall::Result<Tensor>| {
        let start = std::time::Instant::now();
        for _ in 0..calls {
            let _ = black_box(f());
        }
        start.elapsed().as_secs_f64() * 1e9 / f64::from(calls)
    };
    let rounds = if n == 1 { 101 } else { 15 };
    let mut best = [f64::INFINITY; 3];
    let (mut ratios, mut over) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut t = [0.0; 3];
        let order = if round % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] };
        for i in order {
            t[i] = time(run[i]);
            best[i] = best[i].min(t[i]);
        }
        ratios.push(t[2] / t[1]);
        over.push(t[2] - t[0]);
    }
    let [direct, hand, boxed] = best;
    println!(
        "fallback/{n} f64/{backend}, paired: direct {direct:.0} ns, hand-written {hand:.0} ns, cpu_fallback {boxed:.0} ns: {:.3}x the hand-written, {:+.0} ns over the direct call (medians of {rounds} rounds)",
        median(&mut ratios),
        median(&mut over),
    );
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

criterion_group!(benches, bench_fallback);
criterion_main!(benches);
