//! The seed's pattern (torch_xla's `xla_cpu_fallback`): a backend's own boxed fallback that
//! logs and counts, then calls the CPU fallback (`CpuFallback::call`), and a backend kernel
//! that hands a case to the fallback with the typed `call_fallback` (c10's `call_fallback_fn`).
//! Both give what the plain registration of `cpu_fallback` gives: the same values on the same
//! devices, the same counters, the same atomicity.
//!
//! The fallback policy is process-wide: these tests keep it at "allow" (tests/policy.rs owns it).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use boxfall::metrics::OpStats;
use boxfall::Dispatcher;
use boxfall::{
    cpu_fallback, CpuFallback, DispatchKeySet, IValue, KernelFunction, Library, OperatorHandle,
    Result, Stack, Tensor,
};
use common::*;

/// A backend whose fallback is its own: it counts the calls it sees, then calls the CPU
/// fallback.
fn own_fallback_dev(prefix: &str) -> (Dev, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let cpu = CpuFallback::default();
    let own = KernelFunction::from_boxed(move |op: &OperatorHandle, keys, stack: &mut Stack| {
        counter.fetch_add(1, Ordering::SeqCst);
        cpu.call(op, keys, stack)
    });
    (Dev::with_fallback(prefix, own), seen)
}

/// `neg`, `add` and the in-place `add_` in a namespace of their own.
struct Ops {
    neg: OperatorHandle,
    add: OperatorHandle,
    add_: OperatorHandle,
    _lib: Library,
}

fn ops(add_inplace: fn(DispatchKeySet, (Tensor, Tensor)) -> Result<Tensor>) -> Ops {
    let (_, mut lib) = def_lib("ownfb");
    let neg = define_neg(&mut lib);
    let add = define_add(&mut lib);
    let add_ = lib
        .define("add_(Tensor(a!) self, Tensor other) -> Tensor(a!)")
        .unwrap();
    lib.impl_kernel(
        "add_",
        boxfall::DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(add_inplace),
        false,
    )
    .unwrap();
    Ops {
        neg,
        add,
        add_,
        _lib: lib,
    }
}

/// Counters without the time.
fn counts(op: &OperatorHandle) -> (u64, u64, u64, u64) {
    let OpStats {
        fallbacks,
        failures,
        bytes_to_cpu,
        bytes_from_cpu,
        ..
    } = Dispatcher::op_stats(op.name()).unwrap();
    (fallbacks, failures, bytes_to_cpu, bytes_from_cpu)
}

/// Runs neg, add (typed and boxed) and add_ on `dev`: the values and devices of the results
/// and of the written argument.
fn run(dev: &Dev, o: &Ops) -> Vec<(String, Vec<f64>)> {
    let show = |t: &Tensor| (t.device().to_string(), values(t));
    let x = dev.tensor(&[1.0, 2.0]);
    let neg = o.neg.typed::<(Tensor,), Tensor>().unwrap();
    let add = o.add.typed::<(Tensor, Tensor), Tensor>().unwrap();
    let mut out = vec![
        show(&neg.call((x.clone(),)).unwrap()),
        show(&add.call((x.clone(), cpu(&[10.0, 20.0]))).unwrap()),
    ];
    let mut stack = vec![IValue::Tensor(x.clone()), IValue::Tensor(x.clone())];
    o.add.call_boxed(&mut stack).unwrap();
    out.push(show(tensor_of(&stack[0])));
    let y = dev.tensor(&[5.0]);
    let add_ = o.add_.typed::<(Tensor, Tensor), Tensor>().unwrap();
    let r = add_.call((y.clone(), dev.tensor(&[1.0]))).unwrap();
    assert!(r.same(&y), "the return that aliases self is self");
    out.push(show(&y));
    out
}

#[test]
fn a_backends_own_fallback_calling_cpu_fallback_gives_what_the_plain_registration_gives() {
    let plain = Dev::with_cpu_fallback("OwnFbPlain");
    let (own, seen) = own_fallback_dev("OwnFbOwn");
    let (p, o) = (ops(add_inplace_cpu), ops(add_inplace_cpu));
    let by_plain = run(&plain, &p);
    let by_own = run(&own, &o);
    let strip = |v: Vec<(String, Vec<f64>)>, name: &str| -> Vec<(String, Vec<f64>)> {
        v.into_iter()
            .map(|(d, x)| (d.replace(name, "DEV"), x))
            .collect()
    };
    assert_eq!(
        strip(by_plain, &plain.key.name()),
        strip(by_own.clone(), &own.key.name())
    );
    assert_eq!(by_own[0], (own.device(0).to_string(), vec![-1.0, -2.0]));
    assert_eq!(by_own[3], (own.device(0).to_string(), vec![6.0]));
    assert_eq!(
        seen.load(Ordering::SeqCst),
        4,
        "the own fallback saw each call"
    );
    for (a, b) in [(&p.neg, &o.neg), (&p.add, &o.add), (&p.add_, &o.add_)] {
        assert_eq!(counts(a), counts(b), "{}", b.name());
    }
    assert_eq!(counts(&o.add).0, 2);
    assert_eq!(
        [Hook::ToCpu, Hook::FromCpu, Hook::CopyFromCpu].map(|h| plain.count(h)),
        [Hook::ToCpu, Hook::FromCpu, Hook::CopyFromCpu].map(|h| own.count(h)),
        "the same transfers"
    );
}

/// `add_` whose CPU kernel writes its argument, then fails.
fn add_inplace_failing(_keys: DispatchKeySet, (a, _): (Tensor, Tensor)) -> Result<Tensor> {
    write(&a, arr(&[99.0]));
    Err(kernel_error("add_ fails after writing"))
}

#[test]
fn a_failing_cpu_kernel_behind_a_backends_own_fallback_changes_no_argument_and_counts_a_failure() {
    let (own, seen) = own_fallback_dev("OwnFbFail");
    let o = ops(add_inplace_failing);
    let y = own.tensor(&[5.0]);
    let add_ = o.add_.typed::<(Tensor, Tensor), Tensor>().unwrap();
    let err = add_.call((y.clone(), own.tensor(&[1.0]))).unwrap_err();
    assert!(
        err.to_string().contains("add_ fails after writing"),
        "{err}"
    );
    assert_eq!(values(&y), vec![5.0], "the argument is as it was");
    assert_eq!(own.count(Hook::CopyFromCpu), 0, "nothing written back");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    let (fallbacks, failures, _, _) = counts(&o.add_);
    assert_eq!((fallbacks, failures), (1, 1));
}

#[test]
fn the_typed_call_fallback_gives_what_a_dispatched_call_gives_and_counts_alike() {
    let plain = Dev::with_cpu_fallback("OwnFbTypedPlain");
    let bare = Dev::new("OwnFbTypedBare"); // no fallback: only explicit calls fall back
    let (p, o) = (ops(add_inplace_cpu), ops(add_inplace_cpu));
    let fb = cpu_fallback();
    let dispatched = p
        .add
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((plain.tensor(&[1.0, 2.0]), cpu(&[3.0, 4.0])))
        .unwrap();
    let explicit = o
        .add
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call_fallback(&fb, (bare.tensor(&[1.0, 2.0]), cpu(&[3.0, 4.0])))
        .unwrap();
    assert_eq!(values(&dispatched), values(&explicit));
    assert_eq!(explicit.device(), bare.device(0));
    assert_eq!(counts(&p.add), counts(&o.add));
    // An operator that writes an argument goes the boxed way: written back, all the same.
    let y = bare.tensor(&[5.0]);
    let r = o
        .add_
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call_fallback(&fb, (y.clone(), bare.tensor(&[1.0])))
        .unwrap();
    assert!(r.same(&y));
    assert_eq!(values(&y), vec![6.0]);
    assert_eq!(counts(&o.add_).0, 1);
}

#[test]
fn the_typed_call_fallback_runs_a_boxed_fallback_of_a_backends_own() {
    let bare = Dev::new("OwnFbTypedOwn");
    let o = ops(add_inplace_cpu);
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let own = KernelFunction::from_boxed(move |op: &OperatorHandle, keys, stack: &mut Stack| {
        counter.fetch_add(1, Ordering::SeqCst);
        CpuFallback::default().call(op, keys, stack)
    });
    let neg = o.neg.typed::<(Tensor,), Tensor>().unwrap();
    let r = neg.call_fallback(&own, (bare.tensor(&[3.0]),)).unwrap();
    assert_eq!((r.device(), values(&r)), (bare.device(0), vec![-3.0]));
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(counts(&o.neg).0, 1);
}

#[test]
fn the_typed_call_fallback_of_a_cpu_kernel_that_is_boxed_only_runs_it_through_the_boxed_fallback() {
    let bare = Dev::new("OwnFbTypedBoxedCpu");
    let (_, mut lib) = def_lib("ownfbboxed");
    let op = lib.define("neg(Tensor self) -> Tensor").unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r2 = runs.clone();
    lib.impl_kernel(
        "neg",
        boxfall::DispatchKey::CPU,
        KernelFunction::from_boxed(move |_op, _keys, stack: &mut Stack| {
            r2.fetch_add(1, Ordering::SeqCst);
            let x = f64_array(tensor_of(&stack[0]))?;
            *stack = vec![IValue::Tensor(Tensor::from_array(-x))];
            Ok(())
        }),
        false,
    )
    .unwrap();
    let r = op
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call_fallback(&cpu_fallback(), (bare.tensor(&[1.5]),))
        .unwrap();
    assert_eq!((r.device(), values(&r)), (bare.device(0), vec![-1.5]));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(counts(&op).0, 1);
}

/// The README's Rust block of "A backend's own fallback" is the example's code: its lines, in
/// order, each block of lines (between blank lines) a run of the example's lines.
#[test]
fn the_readme_shows_the_example_as_it_is() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let example = std::fs::read_to_string(format!("{root}/examples/own_fallback.rs")).unwrap();
    let section = readme
        .split("## A backend's own fallback")
        .nth(1)
        .expect("the README has the section");
    let block = section
        .split("```rust,ignore\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section has a Rust block");
    let mut rest = example.as_str();
    for part in block.split("\n\n").filter(|p| !p.trim().is_empty()) {
        let at = rest
            .find(part.trim_end())
            .unwrap_or_else(|| panic!("the example lacks, in order:\n{part}"));
        rest = &rest[at + part.len()..];
    }
}

/// A CPU fallback handed a call directly runs the CPU kernel its operator's table bound when it
/// was published: a CPU kernel registered after the first call, and one taken away, are what the
/// next calls (typed and boxed) run; each call counts once; with no CPU kernel, the error names
/// the operator and the CPU, the backend that has nothing, and counts as a failure.
#[test]
fn a_cpu_fallback_called_directly_runs_the_cpu_kernel_the_table_holds_now() {
    let bare = Dev::new("OwnFbDirectBound");
    let (name, mut lib) = def_lib("ownfbbound");
    let op = define_neg(&mut lib);
    let fb = cpu_fallback();
    let neg = op.typed::<(Tensor,), Tensor>().unwrap();
    let boxed = |x: Tensor| -> Result<Vec<f64>> {
        let mut stack = vec![IValue::Tensor(x)];
        let keys = DispatchKeySet::EMPTY | bare.key;
        boxfall::call_fallback(&fb, &op, keys, &mut stack)?;
        Ok(values(tensor_of(&stack[0])))
    };
    let r = neg.call_fallback(&fb, (bare.tensor(&[1.0]),)).unwrap();
    assert_eq!((r.device(), values(&r)), (bare.device(0), vec![-1.0]));
    assert_eq!(boxed(bare.tensor(&[2.0])).unwrap(), vec![-2.0]);
    {
        // A CPU kernel of another library, registered later, serves the next calls.
        let mut twice = impl_lib(&name);
        twice
            .impl_kernel(
                "neg",
                boxfall::DispatchKey::CPU,
                KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (a,)| {
                    Ok(Tensor::from_array(f64_array(&a)? * -2.0))
                }),
                true,
            )
            .unwrap();
        let r = neg.call_fallback(&fb, (bare.tensor(&[1.0]),)).unwrap();
        assert_eq!(values(&r), vec![-2.0]);
        assert_eq!(boxed(bare.tensor(&[2.0])).unwrap(), vec![-4.0]);
    }
    // That library closed: the operator's own CPU kernel again.
    assert_eq!(boxed(bare.tensor(&[3.0])).unwrap(), vec![-3.0]);
    assert_eq!(counts(&op).0, 5);
    // No CPU kernel at all: an error that names the operator and the backend.
    let (_, mut none) = def_lib("ownfbboundnone");
    let bare_op = none.define("neg(Tensor self) -> Tensor").unwrap();
    let err = bare_op
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call_fallback(&fb, (bare.tensor(&[1.0]),))
        .unwrap_err()
        .to_string();
    assert!(err.contains(bare_op.name()), "{err}");
    assert!(err.contains("from the 'CPU' backend"), "{err}");
    assert_eq!(counts(&bare_op).1, 1, "the failure is counted");
}
