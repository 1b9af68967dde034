//! The fallback policy ("allow", "warn", "error"), process-wide and per operator. The policy is
//! global, so every test here holds `SERIAL` and puts the policy back to "allow" when it ends.
//! No warning handler is installed: warnings go to the `log` crate, which a capturing logger
//! records.

mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};

use boxfall::fallback::{fallback_policy, set_fallback_policy, set_operator_policy};
use boxfall::Dispatcher;
use boxfall::{
    call_fallback, cpu_fallback, native, CpuFallback, DispatchKey, Error, FallbackPolicy, IValue,
    KernelFunction, OperatorHandle, Stack, Tensor,
};
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the policy lock; on drop (also when a test fails) the policy is "allow" again.
struct Serial(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Drop for Serial {
    fn drop(&mut self) {
        set_fallback_policy(FallbackPolicy::Allow);
    }
}

fn serial(policy: FallbackPolicy) -> Serial {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    logger();
    set_fallback_policy(policy);
    Serial(guard)
}

// --------------------------------------------------------------------------------- logger

struct Capture(Mutex<Vec<(log::Level, String, String)>>);

impl log::Log for Capture {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }
    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push((
                record.level(),
                record.target().to_string(),
                record.args().to_string(),
            ));
        }
    }
    fn flush(&self) {}
}

fn logger() -> &'static Capture {
    static LOGGER: OnceLock<&'static Capture> = OnceLock::new();
    LOGGER.get_or_init(|| {
        let capture: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(capture).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Warn);
        capture
    })
}

/// The fallback warnings logged so far about `op` on `dev`.
fn warnings(op: &OperatorHandle, dev: &Dev) -> usize {
    warnings_on(op, dev.key)
}

/// The fallback warnings logged so far about `op` on `key`.
fn warnings_on(op: &OperatorHandle, key: DispatchKey) -> usize {
    let quoted = format!("'{}'", op.name());
    let key = format!("'{}'", key.name());
    logger()
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(level, target, msg)| {
            *level == log::Level::Warn
                && target == "boxfall"
                && msg.contains(&quoted)
                && msg.contains(&key)
        })
        .count()
}

// ---------------------------------------------------------------------------------- setup

fn call_neg(op: &OperatorHandle, x: &Tensor) -> boxfall::Result<Tensor> {
    op.typed::<(Tensor,), Tensor>()?.call((x.clone(),))
}

fn fallbacks(op: &OperatorHandle) -> u64 {
    Dispatcher::op_stats(op.name()).unwrap().fallbacks
}

#[test]
fn policy_names_parse() {
    assert_eq!(
        "allow".parse::<FallbackPolicy>().unwrap(),
        FallbackPolicy::Allow
    );
    assert_eq!(
        "warn".parse::<FallbackPolicy>().unwrap(),
        FallbackPolicy::Warn
    );
    assert_eq!(
        "error".parse::<FallbackPolicy>().unwrap(),
        FallbackPolicy::Error
    );
    assert!("loud".parse::<FallbackPolicy>().is_err());
    assert_eq!(FallbackPolicy::Warn.as_str(), "warn");
}

#[test]
fn the_error_policy_refuses_and_counts_the_refusal() {
    let _s = serial(FallbackPolicy::Error);
    let d = Dev::with_cpu_fallback("PolErr");
    let (ns, mut lib) = def_lib("pol");
    let op = define_neg(&mut lib);
    let x = d.tensor(&[1.0, 2.0]);
    let err = call_neg(&op, &x).unwrap_err();
    assert!(matches!(err, Error::Fallback(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("'{ns}::neg'")), "{text}");
    assert!(text.contains(&d.key.name()), "{text}");
    assert!(text.contains("\"error\""), "{text}");
    // A refused fallback counts as a fallback that failed (fallbacks +1, failures +1).
    assert_eq!(fallbacks(&op), 1, "a refused fallback is counted");
    assert_eq!(Dispatcher::op_stats(op.name()).unwrap().failures, 1);
    assert_eq!(d.count(Hook::ToCpu), 0, "nothing moved");
    assert_eq!(values(&x), vec![1.0, 2.0]);
    // CPU calls are not fallbacks and run.
    assert_eq!(values(&call_neg(&op, &cpu(&[1.0])).unwrap()), vec![-1.0]);

    // The policy can change at any time.
    set_fallback_policy(FallbackPolicy::Allow);
    assert_eq!(fallback_policy(), FallbackPolicy::Allow);
    assert_eq!(values(&call_neg(&op, &x).unwrap()), vec![-1.0, -2.0]);
    assert_eq!(fallbacks(&op), 2);
    assert_eq!(Dispatcher::op_stats(op.name()).unwrap().failures, 1);
}

#[test]
fn the_warn_policy_warns_once_per_operator_and_backend() {
    let _s = serial(FallbackPolicy::Warn);
    let (d1, d2) = (
        Dev::with_cpu_fallback("PolWarnA"),
        Dev::with_cpu_fallback("PolWarnB"),
    );
    let (_, mut lib) = def_lib("pol");
    let a = define_neg(&mut lib);
    let b = define_add(&mut lib);

    for _ in 0..3 {
        assert_eq!(
            values(&call_neg(&a, &d1.tensor(&[1.0])).unwrap()),
            vec![-1.0]
        );
    }
    assert_eq!(warnings(&a, &d1), 1, "one warning for three calls");
    let add = b.typed::<(Tensor, Tensor), Tensor>().unwrap();
    for _ in 0..2 {
        add.call((d1.tensor(&[1.0]), d1.tensor(&[2.0]))).unwrap();
    }
    assert_eq!(warnings(&b, &d1), 1, "another operator warns for itself");
    call_neg(&a, &d2.tensor(&[1.0])).unwrap();
    call_neg(&a, &d2.tensor(&[1.0])).unwrap();
    assert_eq!(warnings(&a, &d2), 1, "another backend warns for itself");
    assert_eq!(warnings(&a, &d1), 1);
    // Warned fallbacks run and count.
    assert_eq!(fallbacks(&a), 5);
    assert_eq!(fallbacks(&b), 2);

    // metrics::reset forgets which operators warned.
    boxfall::Dispatcher::reset_metrics();
    call_neg(&a, &d1.tensor(&[1.0])).unwrap();
    assert_eq!(warnings(&a, &d1), 2);
    assert_eq!(fallbacks(&a), 1);
}

#[test]
fn the_allow_policy_is_silent() {
    let _s = serial(FallbackPolicy::Allow);
    let d = Dev::with_cpu_fallback("PolAllow");
    let (_, mut lib) = def_lib("pol");
    let op = define_neg(&mut lib);
    call_neg(&op, &d.tensor(&[1.0])).unwrap();
    assert_eq!(warnings(&op, &d), 0);
    assert_eq!(fallbacks(&op), 1);
}

#[test]
fn an_operators_own_policy_wins_over_the_global_one() {
    let _s = serial(FallbackPolicy::Allow);
    let d = Dev::with_cpu_fallback("PolOwn");
    let (_, mut lib) = def_lib("pol");
    let strict = define_neg(&mut lib);
    let relaxed = define_add(&mut lib);
    let add = |x: &Tensor| {
        relaxed
            .typed::<(Tensor, Tensor), Tensor>()
            .unwrap()
            .call((x.clone(), x.clone()))
    };
    let x = d.tensor(&[1.0]);

    set_operator_policy(&strict, Some(FallbackPolicy::Error));
    assert!(matches!(call_neg(&strict, &x), Err(Error::Fallback(_))));
    assert_eq!(
        values(&add(&x).unwrap()),
        vec![2.0],
        "the global allow holds for the others"
    );

    set_fallback_policy(FallbackPolicy::Error);
    set_operator_policy(&relaxed, Some(FallbackPolicy::Allow));
    assert_eq!(
        values(&add(&x).unwrap()),
        vec![2.0],
        "its own allow beats the global error"
    );
    assert!(call_neg(&strict, &x).is_err());
    // Two refusals of `strict`, counted; two runs of `relaxed`.
    assert_eq!((fallbacks(&strict), fallbacks(&relaxed)), (2, 2));

    set_operator_policy(&strict, Some(FallbackPolicy::Warn));
    assert_eq!(values(&call_neg(&strict, &x).unwrap()), vec![-1.0]);
    assert_eq!(warnings(&strict, &d), 1);

    // Cleared, the operator follows the global policy again.
    set_operator_policy(&strict, None);
    set_operator_policy(&relaxed, None);
    assert!(call_neg(&strict, &x).is_err());
    assert!(add(&x).is_err());
    set_fallback_policy(FallbackPolicy::Allow);
    assert!(call_neg(&strict, &x).is_ok());
}

/// One way a call reaches the CPU fallback (the policy applies to every one: README, "A
/// backend's own fallback").
struct Path {
    name: &'static str,
    dev: Dev,
    op: OperatorHandle,
    _lib: boxfall::Library,
    call: fn(&Path, &Tensor) -> boxfall::Result<Tensor>,
}

/// `neg` on a backend of its own, reached through the fallback in each of the five ways.
fn paths() -> Vec<Path> {
    let path = |name, dev: Dev, own_kernel: bool, call| {
        let (_, mut lib) = def_lib("polpath");
        let op = define_neg(&mut lib);
        if own_kernel {
            lib.impl_kernel("neg", dev.key, cpu_fallback(), false)
                .unwrap();
        }
        Path {
            name,
            dev,
            op,
            _lib: lib,
            call,
        }
    };
    // A backend's own boxed fallback, which hands every call to the CPU fallback.
    let own = KernelFunction::from_boxed(|op: &OperatorHandle, keys, stack: &mut Stack| {
        CpuFallback::default().call(op, keys, stack)
    });
    vec![
        path(
            "registered as the backend fallback",
            Dev::with_cpu_fallback("PolPathReg"),
            false,
            |p, x| call_neg(&p.op, x),
        ),
        path(
            "CpuFallback::call in a backend's own fallback",
            Dev::with_fallback("PolPathOwnFb", own),
            false,
            |p, x| call_neg(&p.op, x),
        ),
        path(
            "registered as the operator's own kernel",
            Dev::new("PolPathOwnKernel"),
            true,
            |p, x| call_neg(&p.op, x),
        ),
        path(
            "an explicit boxed call_fallback",
            Dev::new("PolPathBoxed"),
            false,
            |p, x| {
                let mut stack = vec![IValue::Tensor(x.clone())];
                call_fallback(&cpu_fallback(), &p.op, p.dev.key.set(), &mut stack)?;
                Ok(tensor_of(&stack[0]).clone())
            },
        ),
        path(
            "an explicit typed call_fallback",
            Dev::new("PolPathTyped"),
            false,
            |p, x| {
                p.op.typed::<(Tensor,), Tensor>()?
                    .call_fallback(&cpu_fallback(), (x.clone(),))
            },
        ),
    ]
}

#[test]
fn the_error_policy_refuses_the_cpu_fallback_however_it_is_reached() {
    let _s = serial(FallbackPolicy::Error);
    for p in paths() {
        let x = p.dev.tensor(&[1.0, 2.0]);
        let err = (p.call)(&p, &x).unwrap_err();
        assert!(matches!(err, Error::Fallback(_)), "{}: {err:?}", p.name);
        let text = err.to_string();
        assert!(
            text.contains(&format!("'{}'", p.op.name()))
                && text.contains(&p.dev.key.name())
                && text.contains("\"error\"")
                && text.contains("\"allow\""),
            "{}: {text}",
            p.name
        );
        let stats = Dispatcher::op_stats(p.op.name()).unwrap();
        assert_eq!(
            (stats.fallbacks, stats.failures),
            (1, 1),
            "{}: a refusal counts as a failed fallback",
            p.name
        );
        assert_eq!(p.dev.count(Hook::ToCpu), 0, "{}: nothing moved", p.name);
        assert_eq!(values(&x), vec![1.0, 2.0]);
        // An operator's own "allow" exempts it.
        set_operator_policy(&p.op, Some(FallbackPolicy::Allow));
        let r = (p.call)(&p, &x).unwrap();
        assert_eq!(
            (r.device(), values(&r)),
            (p.dev.device(0), vec![-1.0, -2.0])
        );
        set_operator_policy(&p.op, None);
        assert!((p.call)(&p, &x).is_err(), "{}", p.name);
        let stats = Dispatcher::op_stats(p.op.name()).unwrap();
        assert_eq!((stats.fallbacks, stats.failures), (3, 2), "{}", p.name);
    }
}

#[test]
fn the_warn_policy_warns_once_however_the_cpu_fallback_is_reached() {
    let _s = serial(FallbackPolicy::Warn);
    for p in paths() {
        for _ in 0..3 {
            let r = (p.call)(&p, &p.dev.tensor(&[2.0])).unwrap();
            assert_eq!(values(&r), vec![-2.0], "{}", p.name);
        }
        assert_eq!(
            warnings(&p.op, &p.dev),
            1,
            "{}: once per (operator, backend)",
            p.name
        );
        assert_eq!(fallbacks(&p.op), 3, "{}", p.name);
    }
}

#[test]
fn the_allow_policy_runs_the_cpu_fallback_however_it_is_reached_silently() {
    let _s = serial(FallbackPolicy::Allow);
    for p in paths() {
        let r = (p.call)(&p, &p.dev.tensor(&[2.0])).unwrap();
        assert_eq!(values(&r), vec![-2.0], "{}", p.name);
        assert_eq!(warnings(&p.op, &p.dev), 0, "{}", p.name);
        assert_eq!(fallbacks(&p.op), 1, "{}", p.name);
    }
}

/// An add whose Native kernel hands mixed dtypes on to the CPU fallback, and whose CPU kernel
/// returns `[7.0]`.
fn native_add(lib: &mut boxfall::Library) -> OperatorHandle {
    let op = lib
        .define("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
        .unwrap();
    let cpu = KernelFunction::from_boxed(|_op: &OperatorHandle, _keys, stack: &mut Stack| {
        *stack = vec![IValue::Tensor(Tensor::from_array(arr(&[7.0])))];
        Ok(())
    });
    lib.impl_kernel("add.Tensor", DispatchKey::CPU, cpu, false)
        .unwrap();
    assert_eq!(native::register_kernels(lib).unwrap().len(), 1);
    op
}

fn mixed_add(op: &OperatorHandle) -> boxfall::Result<Tensor> {
    let f32s = ndarray::ArrayD::<f32>::ones(vec![1]);
    let mut stack = vec![
        IValue::Tensor(native::tensor(arr(&[1.0]))),
        IValue::Tensor(native::tensor(f32s)),
        IValue::Int(1),
    ];
    op.call_boxed(&mut stack)?;
    Ok(tensor_of(&stack[0]).clone())
}

#[test]
fn the_fallback_a_native_kernel_takes_inside_itself_obeys_the_error_policy() {
    let _s = serial(FallbackPolicy::Error);
    let (ns, mut lib) = def_lib("polnat");
    let op = native_add(&mut lib);
    let err = mixed_add(&op).unwrap_err();
    assert!(matches!(err, Error::Fallback(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("'{ns}::add.Tensor'")), "{text}");
    assert!(
        text.contains("'Native'") && text.contains("\"error\""),
        "{text}"
    );
    let stats = Dispatcher::op_stats(op.name()).unwrap();
    assert_eq!(
        (stats.fallbacks, stats.failures),
        (1, 1),
        "refused and counted"
    );
    // What the kernel computes itself is no fallback, and runs.
    let mut same = vec![
        IValue::Tensor(native::tensor(arr(&[1.0]))),
        IValue::Tensor(native::tensor(arr(&[2.0]))),
        IValue::Int(1),
    ];
    op.call_boxed(&mut same).unwrap();
    assert_eq!(values(tensor_of(&same[0])), [3.0]);
    // An operator's own "allow" exempts it.
    set_operator_policy(&op, Some(FallbackPolicy::Allow));
    assert_eq!(values(&mixed_add(&op).unwrap()), [7.0]);
    set_operator_policy(&op, None);
    assert_eq!(fallbacks(&op), 2);
}

#[test]
fn the_fallback_a_native_kernel_takes_inside_itself_warns_once() {
    let _s = serial(FallbackPolicy::Warn);
    let (_, mut lib) = def_lib("polnatw");
    let op = native_add(&mut lib);
    for _ in 0..3 {
        assert_eq!(values(&mixed_add(&op).unwrap()), [7.0]);
    }
    assert_eq!(
        warnings_on(&op, DispatchKey::NATIVE),
        1,
        "once per (operator, backend)"
    );
    assert_eq!(fallbacks(&op), 3);
    set_fallback_policy(FallbackPolicy::Allow);
    mixed_add(&op).unwrap();
    assert_eq!(warnings_on(&op, DispatchKey::NATIVE), 1);
}

#[test]
fn policy_names_are_taken_in_any_case_and_a_bad_one_names_the_valid_ones() {
    for (text, p) in [
        ("Warn", FallbackPolicy::Warn),
        ("ERROR", FallbackPolicy::Error),
        ("aLLow", FallbackPolicy::Allow),
    ] {
        assert_eq!(text.parse::<FallbackPolicy>().unwrap(), p);
    }
    let e = "bogus".parse::<FallbackPolicy>().unwrap_err().to_string();
    assert!(
        e.contains("\"allow\", \"warn\" or \"error\"") && e.contains("\"bogus\""),
        "{e}"
    );
}

#[test]
fn an_operators_own_policy_reads_back_and_clears() {
    let _s = serial(FallbackPolicy::Allow);
    let (_, mut lib) = def_lib("pol");
    let op = define_neg(&mut lib);
    assert_eq!(boxfall::fallback::operator_policy(&op), None);
    set_operator_policy(&op, Some(FallbackPolicy::Error));
    assert_eq!(
        boxfall::fallback::operator_policy(&op),
        Some(FallbackPolicy::Error)
    );
    set_operator_policy(&op, None);
    assert_eq!(boxfall::fallback::operator_policy(&op), None);
}
