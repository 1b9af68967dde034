//! Per-operator fallback counters. `metrics::reset` and `report` are process-wide, so every
//! test here holds `SERIAL`.

mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use boxfall::fallback::set_fallback_policy;
use boxfall::metrics::{self, Figures, OpStats, ReportSort};
use boxfall::Dispatcher;
use boxfall::{DispatchKey, DispatchKeySet, FallbackPolicy, KernelFunction, Result, Tensor};
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    set_fallback_policy(FallbackPolicy::Allow);
    guard
}

/// One backend with `cpu_fallback`, shared: these tests count operators, not hooks.
fn dev() -> &'static Dev {
    static DEV: OnceLock<Dev> = OnceLock::new();
    DEV.get_or_init(|| Dev::with_cpu_fallback("MetDev"))
}

fn unary(
    lib: &mut boxfall::Library,
    name: &str,
) -> boxfall::TypedOperatorHandle<(Tensor,), Tensor> {
    let op = lib
        .define(&format!("{name}(Tensor self) -> Tensor"))
        .unwrap();
    lib.impl_kernel(
        name,
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(neg_cpu),
        false,
    )
    .unwrap();
    op.typed().unwrap()
}

#[test]
fn two_operators_through_one_boxed_kernel_count_separately_and_exactly() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let foo = unary(&mut lib, "foo");
    let foo_t = unary(&mut lib, "foo.Tensor");
    let x = dev().tensor(&[1.0, 2.0]);
    for _ in 0..3 {
        foo.call((x.clone(),)).unwrap();
    }
    for _ in 0..2 {
        foo_t.call((x.clone(),)).unwrap();
    }
    let (a, b) = (format!("{ns}::foo"), format!("{ns}::foo.Tensor"));
    assert_eq!(Dispatcher::counter_value(&a), 3);
    assert_eq!(Dispatcher::counter_value(&b), 2);
    let all = Dispatcher::metrics().counters();
    assert!(all.contains(&(a.clone(), 3)), "{all:?}");
    assert!(all.contains(&(b.clone(), 2)), "{all:?}");
    let s = Dispatcher::op_stats(&a).unwrap();
    assert_eq!(
        (s.fallbacks, s.failures, s.bytes_to_cpu, s.bytes_from_cpu),
        (3, 0, 3 * 16, 3 * 16)
    );
    assert_eq!(s.backends, dev().key.set());
    // A CPU call is no fallback.
    foo.call((cpu(&[1.0]),)).unwrap();
    assert_eq!(Dispatcher::counter_value(&a), 3);
    assert_eq!(Dispatcher::counter_value(&format!("{ns}::nothing")), 0);
}

#[test]
fn four_threads_of_500_fallbacks_count_exactly_2000() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let op = unary(&mut lib, "par");
    std::thread::scope(|scope| {
        for t in 0..4 {
            let op = op.clone();
            scope.spawn(move || {
                for i in 0..500 {
                    let r = op.call((dev().tensor(&[t as f64, i as f64]),)).unwrap();
                    assert_eq!(values(&r), vec![-(t as f64), -(i as f64)]);
                }
            });
        }
    });
    let name = format!("{ns}::par");
    assert_eq!(Dispatcher::counter_value(&name), 2000);
    let s = Dispatcher::op_stats(&name).unwrap();
    assert_eq!(s.failures, 0);
    assert_eq!((s.bytes_to_cpu, s.bytes_from_cpu), (2000 * 16, 2000 * 16));
}

#[test]
fn more_threads_than_counter_slots_at_once_and_threads_that_come_and_go_count_exactly() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let op = unary(&mut lib, "crowd");
    // 100 threads alive at once (more than the 64 that own a set of counts: the others share
    // one), then 100 more one after another (each reusing a set another thread gave back).
    let barrier = std::sync::Barrier::new(100);
    std::thread::scope(|scope| {
        for _ in 0..100 {
            let (op, barrier) = (op.clone(), &barrier);
            scope.spawn(move || {
                barrier.wait();
                for _ in 0..30 {
                    op.call((dev().tensor(&[1.0]),)).unwrap();
                }
            });
        }
    });
    for _ in 0..100 {
        let op = op.clone();
        std::thread::spawn(move || op.call((dev().tensor(&[1.0]),)).unwrap())
            .join()
            .unwrap();
    }
    let s = Dispatcher::op_stats(&format!("{ns}::crowd")).unwrap();
    assert_eq!(s.fallbacks, 100 * 30 + 100);
    assert_eq!((s.bytes_to_cpu, s.bytes_from_cpu), (3100 * 8, 3100 * 8));

    // After a reset every thread's counts start again from zero.
    Dispatcher::reset_metrics();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let op = op.clone();
            scope.spawn(move || {
                for _ in 0..250 {
                    op.call((dev().tensor(&[1.0]),)).unwrap();
                }
            });
        }
    });
    assert_eq!(
        Dispatcher::op_stats(&format!("{ns}::crowd"))
            .unwrap()
            .fallbacks,
        1000
    );
}

#[test]
fn reset_zeroes_every_counter() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let op = unary(&mut lib, "gone");
    let failing = lib.define("fails(Tensor x) -> Tensor").unwrap();
    lib.impl_kernel(
        "fails",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, _| Err(kernel_error("no"))),
        false,
    )
    .unwrap();
    op.call((dev().tensor(&[1.0]),)).unwrap();
    assert!(failing
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((dev().tensor(&[1.0]),))
        .is_err());
    let name = format!("{ns}::gone");
    assert_eq!(Dispatcher::counter_value(&name), 1);
    assert_eq!(Dispatcher::op_stats(failing.name()).unwrap().failures, 1);

    Dispatcher::reset_metrics();
    assert_eq!(Dispatcher::counter_value(&name), 0);
    assert_eq!(Dispatcher::op_stats(&name).unwrap(), OpStats::default());
    assert_eq!(
        Dispatcher::op_stats(failing.name()).unwrap(),
        OpStats::default()
    );
    assert!(
        Dispatcher::metrics().counters().is_empty(),
        "only operators counted since the reset"
    );
    assert!(Dispatcher::metrics().all_stats().to_vec().is_empty());
    assert!(Dispatcher::metrics()
        .report()
        .contains("(no operator fell back)"));

    op.call((dev().tensor(&[1.0]),)).unwrap();
    assert_eq!(Dispatcher::metrics().counters(), vec![(name, 1)]);
}

fn slow_neg(keys: DispatchKeySet, args: (Tensor,)) -> Result<Tensor> {
    std::thread::sleep(Duration::from_millis(50));
    neg_cpu(keys, args)
}

#[test]
fn report_lists_one_row_per_operator_and_backend_by_fallback_time() {
    let _s = serial();
    Dispatcher::reset_metrics();
    let (ns, mut lib) = def_lib("met");
    let fast = unary(&mut lib, "fast");
    let slow = lib.define("slow(Tensor self) -> Tensor").unwrap();
    lib.impl_kernel(
        "slow",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(slow_neg),
        false,
    )
    .unwrap();
    let slow = slow.typed::<(Tensor,), Tensor>().unwrap();
    // The fast operator falls back more often, on two backends; the slow one takes longer.
    for _ in 0..3 {
        fast.call((dev().tensor(&[1.0]),)).unwrap();
    }
    fast.call((dev2().tensor(&[1.0]),)).unwrap();
    slow.call((dev().tensor(&[1.0]),)).unwrap();

    let (fast_name, slow_name) = (format!("{ns}::fast"), format!("{ns}::slow"));
    let stats = Dispatcher::metrics().all_stats().to_vec();
    let names: Vec<&str> = stats.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec![slow_name.as_str(), fast_name.as_str()]);
    assert!(stats[0].1.fallback_ns >= 50_000_000);

    let report = Dispatcher::metrics().report();
    let lines: Vec<&str> = report.lines().collect();
    assert!(lines[0].starts_with("operator"), "{report}");
    for col in [
        "backend",
        "calls",
        "failed",
        "total time",
        "mean",
        "to CPU",
        "kernel",
        "from CPU",
        "bytes to CPU",
        "bytes from CPU",
    ] {
        assert!(lines[0].contains(col), "{col}: {report}");
    }
    let rows_of = |name: &str| -> Vec<Vec<&str>> {
        lines
            .iter()
            .filter(|l| l.split_whitespace().next() == Some(name))
            .map(|l| {
                l.split("  ")
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .collect()
    };
    let position = |name: &str| lines.iter().position(|l| l.starts_with(name)).unwrap();
    assert!(position(&slow_name) < position(&fast_name), "{report}");
    // One row per backend, each with its own count (not "MetDev,MetDev2").
    let fast_rows = rows_of(&fast_name);
    assert_eq!(fast_rows.len(), 2, "{report}");
    let on = |b: &str| {
        fast_rows
            .iter()
            .find(|r| r[1] == b)
            .unwrap_or_else(|| panic!("no {b} row:\n{report}"))
    };
    assert_eq!(on(&dev().key.name())[2..4], ["3", "0"], "{report}");
    assert_eq!(on(&dev2().key.name())[2..4], ["1", "0"], "{report}");
    // Every line of the table is as wide as the header; sizes carry their unit.
    let table: Vec<&str> = lines
        .iter()
        .take_while(|l| !l.starts_with("implement"))
        .copied()
        .collect();
    assert!(table.iter().all(|l| l.len() == lines[0].len()), "{report}");
    assert!(on(&dev().key.name()).contains(&"24 B"), "{report}");
    let total = lines
        .iter()
        .find(|l| l.starts_with("total (2 operators, 3 rows)"))
        .expect(&report);
    assert!(total.split_whitespace().any(|c| c == "5"), "{report}");
    let last = lines.last().unwrap();
    assert!(last.starts_with("implement natively first"), "{report}");
    assert!(last.find(&slow_name) < last.find(&fast_name), "{report}");

    // One backend, by count, the first row only.
    let only = Dispatcher::metrics().report_with(&metrics::ReportOptions {
        backend: Some(dev2().key),
        sort: ReportSort::Count,
        top: Some(1),
    });
    assert!(
        only.contains(&fast_name) && !only.contains(&slow_name),
        "{only}"
    );
    assert!(
        !only
            .lines()
            .any(|l| l.contains(&format!(" {}  ", dev().key.name()))),
        "{only}"
    );
    let by_count = Dispatcher::metrics().report_with(&metrics::ReportOptions {
        sort: ReportSort::Count,
        top: Some(1),
        ..Default::default()
    });
    assert_eq!(
        by_count.lines().nth(2).unwrap().split_whitespace().next(),
        Some(fast_name.as_str())
    );
    assert!(
        by_count.contains("(2 more rows not shown; the total counts them)"),
        "{by_count}"
    );
    let by_name = Dispatcher::metrics().report_with(&metrics::ReportOptions {
        sort: ReportSort::Name,
        ..Default::default()
    });
    assert!(
        by_name.find(&fast_name) < by_name.find(&slow_name),
        "{by_name}"
    );
}

/// A second backend with `cpu_fallback`.
fn dev2() -> &'static Dev {
    static DEV: OnceLock<Dev> = OnceLock::new();
    DEV.get_or_init(|| Dev::with_cpu_fallback("MetDevB"))
}

#[test]
fn each_backend_has_its_own_figures_and_the_totals_add_them_up() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let op = unary(&mut lib, "two");
    for _ in 0..3 {
        op.call((dev().tensor(&[1.0, 2.0]),)).unwrap();
    }
    op.call((dev2().tensor(&[1.0, 2.0, 3.0]),)).unwrap();
    dev2().hooks.fail(Hook::FromCpu, 0);
    assert!(op.call((dev2().tensor(&[1.0]),)).is_err());

    let s = Dispatcher::op_stats(&format!("{ns}::two")).unwrap();
    let a = *s.backend(dev().key).expect("first backend");
    let b = *s.backend(dev2().key).expect("second backend");
    assert_eq!(
        (a.fallbacks, a.failures, a.bytes_to_cpu, a.bytes_from_cpu),
        (3, 0, 48, 48)
    );
    assert_eq!(
        (b.fallbacks, b.failures, b.bytes_to_cpu, b.bytes_from_cpu),
        (2, 1, 24 + 8, 24 + 8)
    );
    assert_eq!(s.backends, dev().key.set() | dev2().key.set());
    assert_eq!(s.per_backend.len(), 2);
    let mut sum = a;
    sum.add(&b);
    assert_eq!(s.totals(), sum);
    assert_eq!((s.fallbacks, s.failures), (5, 1));
}

fn check_split(f: &Figures) {
    assert!(
        f.to_cpu_ns + f.kernel_ns + f.from_cpu_ns <= f.fallback_ns,
        "{f:?}"
    );
}

#[test]
fn the_time_splits_into_to_cpu_kernel_and_from_cpu_within_the_whole() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    // Typed calls (the typed fallback), boxed calls (the stack entry), an operator that writes
    // its argument (the boxed fallback with a write-back), and a kernel that fails.
    let slow = lib.define("slow(Tensor self) -> Tensor").unwrap();
    lib.impl_kernel(
        "slow",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(slow_neg),
        false,
    )
    .unwrap();
    let slow_t = slow.typed::<(Tensor,), Tensor>().unwrap();
    slow_t.call((dev().tensor(&[1.0]),)).unwrap();
    let mut stack = vec![boxfall::IValue::Tensor(dev().tensor(&[1.0]))];
    slow.call_boxed(&mut stack).unwrap();
    let f = *Dispatcher::op_stats(slow.name())
        .unwrap()
        .backend(dev().key)
        .unwrap();
    check_split(&f);
    assert!(
        f.to_cpu_ns > 0 && f.kernel_ns > 0 && f.from_cpu_ns > 0,
        "{f:?}"
    );

    let add_ = define_add_(&mut lib);
    let mut stack = vec![
        boxfall::IValue::Tensor(dev().tensor(&[1.0])),
        boxfall::IValue::Tensor(dev().tensor(&[2.0])),
    ];
    add_.call_boxed(&mut stack).unwrap();
    let f = *Dispatcher::op_stats(add_.name())
        .unwrap()
        .backend(dev().key)
        .unwrap();
    check_split(&f);
    assert!(
        f.to_cpu_ns > 0 && f.kernel_ns > 0 && f.from_cpu_ns > 0,
        "{f:?}"
    );

    // A kernel that fails: no step after it ran.
    let failing = lib.define("fails(Tensor x) -> Tensor").unwrap();
    lib.impl_kernel(
        "fails",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, _| Err(kernel_error("no"))),
        false,
    )
    .unwrap();
    let failing_t = failing.typed::<(Tensor,), Tensor>().unwrap();
    assert!(failing_t.call((dev().tensor(&[1.0]),)).is_err());
    let mut stack = vec![boxfall::IValue::Tensor(dev().tensor(&[1.0]))];
    assert!(failing.call_boxed(&mut stack).is_err());
    let f = *Dispatcher::op_stats(failing.name())
        .unwrap()
        .backend(dev().key)
        .unwrap();
    check_split(&f);
    assert_eq!((f.fallbacks, f.failures, f.from_cpu_ns), (2, 2, 0), "{f:?}");
    // And a hook that fails moving to the CPU: nothing after it.
    let op = unary(&mut lib, "early");
    dev().hooks.fail(Hook::ToCpu, 0);
    assert!(op.call((dev().tensor(&[1.0]),)).is_err());
    let f = *Dispatcher::op_stats(&format!("{ns}::early"))
        .unwrap()
        .backend(dev().key)
        .unwrap();
    check_split(&f);
    assert_eq!((f.failures, f.kernel_ns, f.from_cpu_ns), (1, 0, 0), "{f:?}");
}

#[test]
fn native_moves_that_copy_nothing_are_not_timed_and_their_bytes_count() {
    let _s = serial();
    boxfall::native::install_fallback().unwrap();
    let (_ns, mut lib) = def_lib("met_lent");
    let slow = lib.define("slow(Tensor self) -> Tensor").unwrap();
    lib.impl_kernel(
        "slow",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(slow_neg),
        false,
    )
    .unwrap();
    let x = boxfall::native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    // The tensor's loan, which Native makes at its first lending (taking the tensor's lock,
    // which step 1 then times) and lends as it is from then on.
    let _ = x.host_loan();
    // A typed call (the typed fallback) and a boxed one (the CPU kernel's stack entry), each
    // twice: Native lends the argument and takes the result as it is, so neither move is
    // timed, and the whole fallback is the kernel's step.
    let typed = slow.typed::<(Tensor,), Tensor>().unwrap();
    for _ in 0..2 {
        let out = typed.call((x.clone(),)).unwrap();
        assert_eq!(out.device(), boxfall::native::DEVICE);
        assert_eq!(out.describe(), "float64[2]");
        let mut stack = vec![boxfall::IValue::Tensor(x.clone())];
        slow.call_boxed(&mut stack).unwrap();
        assert!(
            matches!(&stack[..], [boxfall::IValue::Tensor(t)] if t.device() == boxfall::native::DEVICE)
        );
    }
    let f = *Dispatcher::op_stats(slow.name())
        .unwrap()
        .backend(DispatchKey::NATIVE)
        .unwrap();
    assert_eq!(
        (f.fallbacks, f.failures, f.bytes_to_cpu, f.bytes_from_cpu),
        (4, 0, 4 * 16, 4 * 16),
        "{f:?}"
    );
    assert_eq!((f.to_cpu_ns, f.from_cpu_ns), (0, 0), "{f:?}");
    assert!(f.kernel_ns >= 4 * 50_000_000, "{f:?}");
    assert_eq!(f.kernel_ns, f.fallback_ns, "{f:?}");
}

#[test]
fn every_refused_or_failed_fallback_counts_as_a_failure() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let one = |name: &str| {
        let s = Dispatcher::op_stats(&format!("{ns}::{name}")).unwrap();
        let f = s.backend(dev().key).copied().unwrap_or_default();
        check_split(&f);
        (f.fallbacks, f.failures)
    };
    // Refused by the policy.
    let refused = unary(&mut lib, "refused");
    boxfall::fallback::set_operator_policy(refused.handle(), Some(FallbackPolicy::Error));
    assert!(refused.call((dev().tensor(&[1.0]),)).is_err());
    boxfall::fallback::set_operator_policy(refused.handle(), None);
    assert_eq!(one("refused"), (1, 1));
    // Refused as a view operator.
    lib.define("view(Tensor(a) self) -> Tensor(a)").unwrap();
    lib.impl_kernel(
        "view",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| Ok(x)),
        false,
    )
    .unwrap();
    let view = boxfall::Dispatcher::find(&format!("{ns}::view")).unwrap();
    let e = view
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((dev().tensor(&[1.0]),))
        .unwrap_err();
    assert!(e.to_string().contains("view operator"), "{e}");
    assert_eq!(one("view"), (1, 1));
    // No CPU kernel.
    lib.define("nocpu(Tensor self) -> Tensor").unwrap();
    let nocpu = boxfall::Dispatcher::find(&format!("{ns}::nocpu")).unwrap();
    assert!(nocpu
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((dev().tensor(&[1.0]),))
        .is_err());
    assert_eq!(one("nocpu"), (1, 1));
    // A CPU kernel that fails, and each hook that fails.
    let failing = lib.define("fails(Tensor x) -> Tensor").unwrap();
    lib.impl_kernel(
        "fails",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, _| Err(kernel_error("no"))),
        false,
    )
    .unwrap();
    assert!(failing
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((dev().tensor(&[1.0]),))
        .is_err());
    assert_eq!(one("fails"), (1, 1));
    let hooks = unary(&mut lib, "hooks");
    for hook in [Hook::ToCpu, Hook::FromCpu] {
        dev().hooks.fail(hook, 0);
        assert!(hooks.call((dev().tensor(&[1.0]),)).is_err());
    }
    let add_ = define_add_(&mut lib);
    dev().hooks.fail(Hook::CopyFromCpu, 0);
    let mut stack = vec![
        boxfall::IValue::Tensor(dev().tensor(&[1.0])),
        boxfall::IValue::Tensor(dev().tensor(&[2.0])),
    ];
    assert!(add_.call_boxed(&mut stack).is_err());
    assert_eq!(one("hooks"), (2, 2));
    assert_eq!(one("add_"), (1, 1));
    // Tensors of two backends in one call.
    let two = lib.define("two(Tensor a, Tensor b) -> Tensor").unwrap();
    lib.impl_kernel(
        "two",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(add_cpu),
        false,
    )
    .unwrap();
    let e = two
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((dev().tensor(&[1.0]), dev2().tensor(&[1.0])))
        .unwrap_err();
    assert!(matches!(e, boxfall::Error::Fallback(_)), "{e}");
    let s = Dispatcher::op_stats(two.name()).unwrap();
    assert_eq!((s.fallbacks, s.failures), (1, 1), "{s:?}");
    // The CPU fallback registered for a key that is no backend with transfer hooks.
    let trace = functionality_key("MetTrace");
    let mut fb = fallback_lib();
    fb.fallback(trace, boxfall::cpu_fallback()).unwrap();
    let plain = unary(&mut lib, "plain");
    let e = {
        let _g = boxfall::key::LocalKeysGuard::include(trace.set());
        plain.call((cpu(&[1.0]),)).unwrap_err()
    };
    assert!(e.to_string().contains("not a backend"), "{e}");
    let s = Dispatcher::op_stats(&format!("{ns}::plain")).unwrap();
    let f = s.backend(trace).copied().unwrap_or_default();
    assert_eq!((f.fallbacks, f.failures, f.fallback_ns), (1, 1, 0), "{s:?}");
    // A fallback that went well is no failure.
    hooks.call((dev().tensor(&[1.0]),)).unwrap();
    assert_eq!(one("hooks"), (3, 2));
}

#[test]
fn per_backend_counts_outlive_the_library_of_their_operator() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let op = unary(&mut lib, "closed2");
    op.call((dev().tensor(&[1.0]),)).unwrap();
    op.call((dev2().tensor(&[1.0, 2.0]),)).unwrap();
    let name = format!("{ns}::closed2");
    drop(op);
    lib.close();
    let s = Dispatcher::op_stats(&name).unwrap();
    assert_eq!(s.backend(dev().key).map(|f| f.bytes_to_cpu), Some(8));
    assert_eq!(s.backend(dev2().key).map(|f| f.bytes_to_cpu), Some(16));
    // Defined again, the new entry's counts join the retired ones backend by backend.
    let mut again = boxfall::Library::new(&ns, boxfall::LibraryKind::Def).unwrap();
    let op = unary(&mut again, "closed2");
    op.call((dev2().tensor(&[1.0]),)).unwrap();
    let s = Dispatcher::op_stats(&name).unwrap();
    assert_eq!(s.backend(dev().key).map(|f| f.fallbacks), Some(1));
    assert_eq!(
        s.backend(dev2().key).map(|f| (f.fallbacks, f.bytes_to_cpu)),
        Some((2, 24))
    );
    assert_eq!(s.fallbacks, 3);
    let rows = Dispatcher::metrics().report();
    assert_eq!(
        rows.lines().filter(|l| l.starts_with(&name)).count(),
        2,
        "{rows}"
    );
}

#[test]
fn counts_outlive_the_library_of_their_operator_until_a_reset() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let op = unary(&mut lib, "closed");
    for _ in 0..3 {
        op.call((dev().tensor(&[1.0, 2.0]),)).unwrap();
    }
    let name = format!("{ns}::closed");
    drop(op);
    lib.close();
    // The entry is freed (nothing is registered for it), its counts are not.
    assert!(!boxfall::Dispatcher::all_operators()
        .iter()
        .any(|o| o.name() == name));
    assert_eq!(Dispatcher::counter_value(&name), 3);
    assert!(Dispatcher::metrics()
        .counters()
        .contains(&(name.clone(), 3)));
    assert_eq!(Dispatcher::op_stats(&name).unwrap().bytes_to_cpu, 3 * 16);
    // Defined again, it counts on from there.
    let mut again = boxfall::Library::new(&ns, boxfall::LibraryKind::Def).unwrap();
    let op = unary(&mut again, "closed");
    op.call((dev().tensor(&[1.0]),)).unwrap();
    assert_eq!(Dispatcher::counter_value(&name), 4);
    assert!(Dispatcher::metrics().report().contains(&name));
    Dispatcher::reset_metrics();
    assert_eq!(Dispatcher::counter_value(&name), 0);
    again.close();
    assert!(!Dispatcher::metrics()
        .counters()
        .iter()
        .any(|(n, _)| n == &name));
}

#[test]
fn a_name_without_an_overload_is_the_empty_overload_and_an_unknown_one_lists_the_overloads() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let add_t = unary(&mut lib, "add.Tensor");
    unary(&mut lib, "add.Scalar");
    add_t.call((dev().tensor(&[1.0]),)).unwrap();
    assert_eq!(
        Dispatcher::op_stats(&format!("{ns}::add.Tensor"))
            .unwrap()
            .fallbacks,
        1
    );
    // "ns::add" names the overload "" (not defined here), not "any overload of add".
    let e = Dispatcher::op_stats(&format!("{ns}::add")).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("unknown operator '{ns}::add'; did you mean: {ns}::add.Scalar, {ns}::add.Tensor?")
    );
    assert!(matches!(e, boxfall::Error::UnknownOperator { .. }));
    // A typo of the overload suggests the overloads too.
    let e = Dispatcher::op_stats(&format!("{ns}::add.Tensr"))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("{ns}::add.Tensor")), "{e}");
    // Defined, never fell back: zeros, not an error.
    assert_eq!(
        Dispatcher::op_stats(&format!("{ns}::add.Scalar")).unwrap(),
        OpStats::default()
    );
    // The default overload is named without a dot.
    let neg = unary(&mut lib, "neg");
    neg.call((dev().tensor(&[1.0]),)).unwrap();
    assert_eq!(
        Dispatcher::op_stats(&format!("{ns}::neg"))
            .unwrap()
            .fallbacks,
        1
    );
}

#[test]
fn an_operator_that_fell_back_is_known_after_its_library_closed_until_a_reset() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let op = unary(&mut lib, "gone");
    op.call((dev().tensor(&[1.0]),)).unwrap();
    let name = format!("{ns}::gone");
    lib.close();
    // Dispatcher::metrics().counters() still lists it; op_stats agrees with it.
    assert!(Dispatcher::metrics()
        .counters()
        .contains(&(name.clone(), 1)));
    assert_eq!(Dispatcher::op_stats(&name).unwrap().fallbacks, 1);
    assert_eq!(Dispatcher::counter_value(&name), 1);
    Dispatcher::reset_metrics();
    assert!(matches!(
        Dispatcher::op_stats(&name),
        Err(boxfall::Error::UnknownOperator { .. })
    ));
}

#[test]
fn each_backend_keeps_its_own_last_failure_and_the_operator_its_latest() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let op = unary(&mut lib, "lastfail");
    let name = format!("{ns}::lastfail");
    dev2().hooks.fail(Hook::FromCpu, 0);
    assert!(op.call((dev2().tensor(&[1.0]),)).is_err());
    op.call((dev().tensor(&[1.0]),)).unwrap();
    let s = Dispatcher::op_stats(&name).unwrap();
    assert_eq!(s.last_failure_of(dev().key), None);
    let theirs = s.last_failure_of(dev2().key).expect("the failed backend's");
    assert!(theirs.message.contains("from_cpu"), "{theirs:?}");
    assert_eq!(s.last_failure.as_ref(), Some(theirs));
    assert_eq!(s.last_failures.len(), 1);

    // A later failure on the first backend: the operator's is it, the other keeps its own.
    dev().hooks.fail(Hook::ToCpu, 0);
    assert!(op.call((dev().tensor(&[1.0]),)).is_err());
    let s = Dispatcher::op_stats(&name).unwrap();
    let mine = s.last_failure_of(dev().key).expect("the first backend's");
    assert!(mine.message.contains("to_cpu"), "{mine:?}");
    assert_eq!(s.last_failure.as_ref(), Some(mine));
    assert!(s
        .last_failure_of(dev2().key)
        .unwrap()
        .message
        .contains("from_cpu"));

    Dispatcher::reset_metrics();
    let s = Dispatcher::op_stats(&name).unwrap();
    assert_eq!((s.last_failure, s.last_failures), (None, vec![]));
}
