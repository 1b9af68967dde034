//! Per-operator fallback counters. `metrics::reset` and `report` are process-wide, so every
//! test here holds `SERIAL`.

mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use boxfall::fallback::set_fallback_policy;
use boxfall::metrics::{self, counter_value, counters, op_stats, OpStats};
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
    assert_eq!(counter_value(&a), 3);
    assert_eq!(counter_value(&b), 2);
    let all = counters();
    assert!(all.contains(&(a.clone(), 3)), "{all:?}");
    assert!(all.contains(&(b.clone(), 2)), "{all:?}");
    let s = op_stats(&a).unwrap();
    assert_eq!(
        (s.fallbacks, s.failures, s.bytes_to_cpu, s.bytes_from_cpu),
        (3, 0, 3 * 16, 3 * 16)
    );
    assert_eq!(s.backends, dev().key.set());
    // A CPU call is no fallback.
    foo.call((cpu(&[1.0]),)).unwrap();
    assert_eq!(counter_value(&a), 3);
    assert_eq!(counter_value(&format!("{ns}::nothing")), 0);
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
    assert_eq!(counter_value(&name), 2000);
    let s = op_stats(&name).unwrap();
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
    let s = op_stats(&format!("{ns}::crowd")).unwrap();
    assert_eq!(s.fallbacks, 100 * 30 + 100);
    assert_eq!((s.bytes_to_cpu, s.bytes_from_cpu), (3100 * 8, 3100 * 8));

    // After a reset every thread's counts start again from zero.
    metrics::reset();
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
    assert_eq!(op_stats(&format!("{ns}::crowd")).unwrap().fallbacks, 1000);
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
    assert_eq!(counter_value(&name), 1);
    assert_eq!(op_stats(failing.name()).unwrap().failures, 1);

    metrics::reset();
    assert_eq!(counter_value(&name), 0);
    assert_eq!(op_stats(&name).unwrap(), OpStats::default());
    assert_eq!(op_stats(failing.name()).unwrap(), OpStats::default());
    assert!(
        counters().is_empty(),
        "only operators counted since the reset"
    );
    assert!(metrics::all_stats().is_empty());
    assert!(metrics::report().contains("(no operator fell back)"));

    op.call((dev().tensor(&[1.0]),)).unwrap();
    assert_eq!(counters(), vec![(name, 1)]);
}

fn slow_neg(keys: DispatchKeySet, args: (Tensor,)) -> Result<Tensor> {
    std::thread::sleep(Duration::from_millis(50));
    neg_cpu(keys, args)
}

#[test]
fn report_lists_operators_by_fallback_time() {
    let _s = serial();
    metrics::reset();
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
    // The fast operator falls back more often; the slow one takes longer in all.
    for _ in 0..3 {
        fast.call((dev().tensor(&[1.0]),)).unwrap();
    }
    slow.call((dev().tensor(&[1.0]),)).unwrap();

    let (fast_name, slow_name) = (format!("{ns}::fast"), format!("{ns}::slow"));
    let stats = metrics::all_stats();
    let names: Vec<&str> = stats.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec![slow_name.as_str(), fast_name.as_str()]);
    assert!(stats[0].1.fallback_ns >= 50_000_000);

    let report = metrics::report();
    let lines: Vec<&str> = report.lines().collect();
    assert!(lines[0].starts_with("operator"), "{report}");
    for col in ["backend", "count", "fail", "total ms", "mean us"] {
        assert!(lines[0].contains(col), "{report}");
    }
    let row = |name: &str| {
        lines
            .iter()
            .position(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{report}"))
    };
    assert!(row(&slow_name) < row(&fast_name), "{report}");
    let fast_row: Vec<&str> = lines[row(&fast_name)].split_whitespace().collect();
    assert_eq!(fast_row[1], dev().key.name());
    assert_eq!(fast_row[2], "3", "{report}");
    assert_eq!(fast_row[3], "0", "{report}");
    assert!(
        lines.iter().any(|l| l.starts_with("total (2 operators)")),
        "{report}"
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
    assert_eq!(counter_value(&name), 3);
    assert!(counters().contains(&(name.clone(), 3)));
    assert_eq!(op_stats(&name).unwrap().bytes_to_cpu, 3 * 16);
    // Defined again, it counts on from there.
    let mut again = boxfall::Library::new(&ns, boxfall::LibraryKind::Def).unwrap();
    let op = unary(&mut again, "closed");
    op.call((dev().tensor(&[1.0]),)).unwrap();
    assert_eq!(counter_value(&name), 4);
    assert!(metrics::report().contains(&name));
    metrics::reset();
    assert_eq!(counter_value(&name), 0);
    again.close();
    assert!(!counters().iter().any(|(n, _)| n == &name));
}

#[test]
fn a_name_without_an_overload_is_the_empty_overload_and_an_unknown_one_lists_the_overloads() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let add_t = unary(&mut lib, "add.Tensor");
    unary(&mut lib, "add.Scalar");
    add_t.call((dev().tensor(&[1.0]),)).unwrap();
    assert_eq!(op_stats(&format!("{ns}::add.Tensor")).unwrap().fallbacks, 1);
    // "ns::add" names the overload "" (not defined here), not "any overload of add".
    let e = op_stats(&format!("{ns}::add")).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("unknown operator '{ns}::add'; did you mean: {ns}::add.Scalar, {ns}::add.Tensor?")
    );
    assert!(matches!(e, boxfall::Error::UnknownOperator { .. }));
    // A typo of the overload suggests the overloads too.
    let e = op_stats(&format!("{ns}::add.Tensr"))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("{ns}::add.Tensor")), "{e}");
    // Defined, never fell back: zeros, not an error.
    assert_eq!(
        op_stats(&format!("{ns}::add.Scalar")).unwrap(),
        OpStats::default()
    );
    // The default overload is named without a dot.
    let neg = unary(&mut lib, "neg");
    neg.call((dev().tensor(&[1.0]),)).unwrap();
    assert_eq!(op_stats(&format!("{ns}::neg")).unwrap().fallbacks, 1);
}

#[test]
fn an_operator_that_fell_back_is_known_after_its_library_closed_until_a_reset() {
    let _s = serial();
    let (ns, mut lib) = def_lib("met");
    let op = unary(&mut lib, "gone");
    op.call((dev().tensor(&[1.0]),)).unwrap();
    let name = format!("{ns}::gone");
    lib.close();
    // counters() still lists it; op_stats agrees with it.
    assert!(counters().contains(&(name.clone(), 1)));
    assert_eq!(op_stats(&name).unwrap().fallbacks, 1);
    assert_eq!(counter_value(&name), 1);
    metrics::reset();
    assert!(matches!(
        op_stats(&name),
        Err(boxfall::Error::UnknownOperator { .. })
    ));
}
