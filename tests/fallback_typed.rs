//! The typed CPU fallback, which serves a functional operator whose CPU kernel is typed: from a
//! typed call, without boxing (compiled with the call's signature, or through the fallback's
//! typed wrapper as another kernel may call it), and from a boxed call, through the CPU
//! kernel's stack entry.
//! Over random mixes of device, second-device and CPU tensors, with failures injected in each
//! step, both give what the schema-driven walk of the boxed fallback gives (which a boxed-only
//! CPU kernel gets): the same values on the same devices, or the same error; they call the same
//! hooks as often, and move the counters alike. Calls they leave to the walk still fall back,
//! in full.
//!
//! The fallback policy is process-wide: these tests keep it at "allow" (tests/policy.rs owns it).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use boxfall::backend::{register_backend, Backend};
use boxfall::dispatcher::DispatchTable;
use boxfall::fallback::set_fallback_policy;
use boxfall::ivalue::Multi;
use boxfall::kernel::{TypedCall, TypedWrapper};
use boxfall::Dispatcher;
use boxfall::{
    Device, DispatchKey, DispatchKeySet, FallbackPolicy, IValue, KernelFunction, OperatorHandle,
    Result, Tensor,
};
use common::*;
use proptest::prelude::*;

type BlendArgs = (Tensor, Option<Tensor>, Vec<Tensor>, i64);
type BlendReturns = Multi<(Tensor, Vec<Tensor>)>;

/// `blend(a, b, cs, k) -> (a + k (+ b), [c * k for c in cs])`; an error when `k` is 0.
fn blend_cpu(_keys: DispatchKeySet, (a, b, cs, k): BlendArgs) -> Result<BlendReturns> {
    if k == 0 {
        return Err(kernel_error("blend refuses k = 0"));
    }
    let mut first = f64_array(&a)? + k as f64;
    if let Some(b) = &b {
        first = first + f64_array(b)?;
    }
    let rest = cs
        .iter()
        .map(|c| Ok(Tensor::from_array(f64_array(c)? * k as f64)))
        .collect::<Result<Vec<_>>>()?;
    Ok(Multi((Tensor::from_array(first), rest)))
}

struct Fixture {
    dev: Dev,
    blend: OperatorHandle,
    /// `blend` again, with a boxed-only CPU kernel: its fallback is the schema-driven walk.
    blend_walk: OperatorHandle,
    /// `blend` again, whose kernel on the device passes typed calls on to the CPU fallback's
    /// typed wrapper (`ViaCpuFallback`).
    blend_via: OperatorHandle,
    _libs: [boxfall::Library; 3],
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        set_fallback_policy(FallbackPolicy::Allow);
        let dev = Dev::with_cpu_fallback("FbTyped");
        let (lib, blend) = define_blend();
        let (walk_lib, blend_walk) = define_blend_walk();
        let (via_lib, blend_via) = define_blend_via(dev.key);
        Fixture {
            dev,
            blend,
            blend_walk,
            blend_via,
            _libs: [lib, walk_lib, via_lib],
        }
    })
}

/// A `blend` operator of its own (its counters are its own), with `blend_cpu` as its CPU kernel.
fn define_blend() -> (boxfall::Library, OperatorHandle) {
    define_blend_with(
        "fbtyped",
        KernelFunction::from_unboxed::<BlendArgs, BlendReturns>(blend_cpu),
    )
}

/// `blend` with a CPU kernel made boxed-only (the same `blend_cpu`, unboxed by hand), so that
/// no typed entry reaches it.
fn define_blend_walk() -> (boxfall::Library, OperatorHandle) {
    define_blend_with(
        "fbwalk",
        KernelFunction::from_boxed(|_, keys, stack| {
            use boxfall::ivalue::{CallArgs, CallReturns};
            let args = BlendArgs::pop_from(stack)?;
            blend_cpu(keys, args)?.push_onto(stack);
            Ok(())
        }),
    )
}

/// A wrapper that passes every typed call on to the CPU fallback's typed wrapper, as a user's
/// kernel may: the CPU fallback's typed entry reached through `dyn TypedWrapper`, where a
/// dispatched typed call runs it compiled with the call's signature.
struct ViaCpuFallback(KernelFunction);

/// The typed calls `ViaCpuFallback` passed on and the CPU fallback's wrapper served.
static SERVED_VIA: AtomicUsize = AtomicUsize::new(0);

impl TypedWrapper for ViaCpuFallback {
    fn call_typed(
        &self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        call: &mut TypedCall<'_>,
    ) -> Option<Result<()>> {
        let served = self.0.typed_wrapper()?.call_typed(op, table, keys, call)?;
        SERVED_VIA.fetch_add(1, Ordering::Relaxed);
        Some(served)
    }
}

/// `blend` with `blend_cpu` as its CPU kernel and, on `key`, the CPU fallback's boxed entry
/// with `ViaCpuFallback` as its typed wrapper.
fn define_blend_via(key: DispatchKey) -> (boxfall::Library, OperatorHandle) {
    let (mut lib, blend) = define_blend_with(
        "fbvia",
        KernelFunction::from_unboxed::<BlendArgs, BlendReturns>(blend_cpu),
    );
    let fallback = boxfall::cpu_fallback();
    let boxed = fallback.clone();
    let kernel = KernelFunction::from_boxed_in_table(move |op, table, keys, stack| {
        boxed.call_boxed_in(op, table, keys, stack)
    })
    .with_typed_wrapper(ViaCpuFallback(fallback));
    lib.impl_kernel("blend", key, kernel, false).unwrap();
    (lib, blend)
}

/// `blend` in a library of its own namespace, with `cpu` as its CPU kernel.
fn define_blend_with(prefix: &str, cpu: KernelFunction) -> (boxfall::Library, OperatorHandle) {
    let (_, mut lib) = def_lib(prefix);
    let blend = lib
        .define("blend(Tensor a, Tensor? b, Tensor[] cs, int k) -> (Tensor, Tensor[])")
        .unwrap();
    lib.impl_kernel("blend", DispatchKey::CPU, cpu, false)
        .unwrap();
    (lib, blend)
}

/// A boxed call of a `blend`, its two returns taken off the stack.
fn call_boxed(
    op: &OperatorHandle,
    (a, b, cs, k): (&Tensor, Option<&Tensor>, &[Tensor], i64),
) -> Result<(Tensor, Vec<Tensor>)> {
    let mut stack = vec![
        IValue::Tensor(a.clone()),
        b.cloned().map_or(IValue::None, IValue::Tensor),
        IValue::TensorList(cs.to_vec()),
        IValue::Int(k),
    ];
    op.call_boxed(&mut stack)?;
    match (stack.pop(), stack.pop()) {
        (Some(IValue::TensorList(rest)), Some(IValue::Tensor(first))) => Ok((first, rest)),
        other => Err(kernel_error(format!("boxed returns: {other:?}"))),
    }
}

/// Where a tensor lives: 0 the CPU, 1 the test device's index 0, 2 its index 1.
type Spec = (u8, Vec<f64>);

fn spec() -> impl Strategy<Value = Spec> {
    (0u8..3, prop::collection::vec(-8i8..8, 2..3))
        .prop_map(|(at, v)| (at, v.into_iter().map(f64::from).collect()))
}

fn make(dev: &Dev, (at, v): &Spec) -> Tensor {
    match at {
        0 => cpu(v),
        i => dev.tensor_at(u16::from(*i - 1), arr(v)),
    }
}

/// What a call left: values and devices of its results, or its error's text.
type Outcome = std::result::Result<(Vec<f64>, Device, Vec<(Vec<f64>, Device)>), String>;

fn outcome(r: Result<(Tensor, Vec<Tensor>)>) -> Outcome {
    let (first, rest) = r.map_err(|e| e.to_string())?;
    Ok((
        values(&first),
        first.device(),
        rest.iter().map(|t| (values(t), t.device())).collect(),
    ))
}

/// An operator's counters and the backend's hook calls, to compare two calls' effects.
fn effects(f: &Fixture, op: &OperatorHandle) -> [u64; 7] {
    let s = Dispatcher::op_stats(op.name()).expect("a defined operator");
    let hooks = [Hook::ToCpu, Hook::FromCpu, Hook::CopyFromCpu].map(|h| f.dev.count(h) as u64);
    [
        s.fallbacks,
        s.failures,
        s.bytes_to_cpu,
        s.bytes_from_cpu,
        hooks[0],
        hooks[1],
        hooks[2],
    ]
}

fn delta(before: [u64; 7], after: [u64; 7]) -> [u64; 7] {
    std::array::from_fn(|i| after[i] - before[i])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_typed_fallback_from_typed_and_boxed_calls_gives_what_the_walk_gives(
        a in spec(),
        b in prop::option::of(spec()),
        cs in prop::collection::vec(spec(), 0..4),
        k in -2i64..3,
        failure in prop::option::of((0usize..2, 0i64..3)),
    ) {
        let f = fixture();
        let (ta, tb) = (make(&f.dev, &a), b.as_ref().map(|b| make(&f.dev, b)));
        let tcs: Vec<Tensor> = cs.iter().map(|c| make(&f.dev, c)).collect();
        // Each call with the same failure injected, its effects measured on its own operator.
        let run = |op: &OperatorHandle, call: &dyn Fn() -> Result<(Tensor, Vec<Tensor>)>| {
            if let Some((hook, after)) = failure {
                f.dev.hooks.fail([Hook::ToCpu, Hook::FromCpu][hook], after);
            }
            let before = effects(f, op);
            let r = call();
            let after = effects(f, op);
            f.dev.hooks.fail(Hook::ToCpu, -1);
            f.dev.hooks.fail(Hook::FromCpu, -1);
            // The two operators' names differ; what the errors say otherwise may not.
            let r = outcome(r).map_err(|e| e.replace(op.name(), "<blend>"));
            (r, delta(before, after))
        };
        let args = (&ta, tb.as_ref(), tcs.as_slice(), k);
        let (walk, walk_effects) = run(&f.blend_walk, &|| call_boxed(&f.blend_walk, args));
        let (boxed, boxed_effects) = run(&f.blend, &|| call_boxed(&f.blend, args));
        let (typed, typed_effects) = run(&f.blend, &|| {
            f.blend
                .typed::<BlendArgs, BlendReturns>()
                .unwrap()
                .call((ta.clone(), tb.clone(), tcs.clone(), k))
                .map(|Multi(r)| r)
        });
        let served_before = SERVED_VIA.load(Ordering::Relaxed);
        let (via, via_effects) = run(&f.blend_via, &|| {
            f.blend_via
                .typed::<BlendArgs, BlendReturns>()
                .unwrap()
                .call((ta.clone(), tb.clone(), tcs.clone(), k))
                .map(|Multi(r)| r)
        });
        prop_assert_eq!(&boxed, &walk);
        prop_assert_eq!(boxed_effects, walk_effects);
        // The typed fallback compiled with the call's signature (`typed`) and reached through
        // its typed wrapper (`via`) are one fallback.
        prop_assert_eq!(&via, &walk);
        prop_assert_eq!(via_effects, walk_effects);
        let on_device = a.0 > 0 || b.iter().any(|b| b.0 > 0) || cs.iter().any(|c| c.0 > 0);
        let served = SERVED_VIA.load(Ordering::Relaxed) - served_before;
        prop_assert_eq!(served, usize::from(on_device), "the wrapper serves, not the boxed path");
        prop_assert_eq!(&typed, &walk);
        prop_assert_eq!(typed_effects, walk_effects);
        prop_assert_eq!(typed_effects[0], u64::from(on_device), "one fallback when a tensor is on the device");
        if let Ok((_, device, rest)) = &typed {
            prop_assert_eq!(device.key == f.dev.key, on_device);
            prop_assert!(rest.iter().all(|(_, d)| d == device));
        }
        // The caller's tensors are unchanged, whatever happened.
        prop_assert_eq!((values(&ta), ta.device() == Device::CPU), (a.1.clone(), a.0 == 0));
        prop_assert_eq!(tb.as_ref().map(values), b.map(|b| b.1));
        for (t, c) in tcs.iter().zip(&cs) {
            prop_assert_eq!(values(t), c.1.clone());
        }
    }
}

#[test]
fn a_typed_call_whose_cpu_kernel_is_boxed_only_falls_back_through_the_boxed_path() {
    fixture();
    let dev = Dev::with_cpu_fallback("FbTypedBoxedOnly");
    let (_, mut lib) = def_lib("fbtyped");
    let op = lib.define("twice(Tensor x) -> Tensor").unwrap();
    lib.impl_kernel(
        "twice",
        DispatchKey::CPU,
        KernelFunction::from_boxed(|_, _, stack| match stack.pop() {
            Some(IValue::Tensor(x)) => {
                stack.push(IValue::Tensor(Tensor::from_array(f64_array(&x)? * 2.0)));
                Ok(())
            }
            other => Err(kernel_error(format!("twice got {other:?}"))),
        }),
        false,
    )
    .unwrap();
    let x = dev.tensor(&[1.5, -2.0]);
    let r = op
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((x.clone(),))
        .unwrap();
    assert_eq!((values(&r), r.device()), (vec![3.0, -4.0], dev.device(0)));
    let s = Dispatcher::op_stats(op.name()).unwrap();
    assert_eq!((s.fallbacks, s.bytes_to_cpu, s.bytes_from_cpu), (1, 16, 16));
}

/// Copies like the test backend, but moves a call's tensors in one batch, and counts batches.
struct Batching {
    inner: Arc<dyn Backend>,
    batches: AtomicUsize,
}

impl Backend for Batching {
    fn to_cpu(&self, t: &Tensor, for_write: bool) -> Result<Tensor> {
        self.inner.to_cpu(t, for_write)
    }
    fn batches_transfers(&self) -> bool {
        true
    }
    fn to_cpu_many(&self, tensors: &[(&Tensor, bool)]) -> Result<Vec<Tensor>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        tensors
            .iter()
            .map(|(t, w)| self.inner.to_cpu(t, *w))
            .collect()
    }
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        self.inner.from_cpu(cpu, device)
    }
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        self.inner.copy_from_cpu(dst, src)
    }
}

#[test]
fn a_typed_call_on_a_batching_backend_moves_its_tensors_in_one_batch() {
    fixture();
    // Hooks of their own: the property above counts the fixture's.
    let hooks = Arc::new(Batching {
        inner: Dev::new("FbTypedInner").hooks,
        batches: AtomicUsize::new(0),
    });
    let key = register_backend(&ns("FbTypedBatch"), hooks.clone()).unwrap();
    let mut fb = fallback_lib();
    fb.fallback(key, boxfall::cpu_fallback()).unwrap();
    let on = |v: &[f64]| {
        Tensor::foreign(
            Device::new(key, 0),
            Arc::new(DevPayload::new(arr(v).into())),
        )
    };
    let (a, c0, c1) = (on(&[1.0, 2.0]), on(&[3.0, 4.0]), on(&[5.0, 6.0]));
    let (_lib, blend) = define_blend();
    let Multi((first, rest)) = blend
        .typed::<BlendArgs, BlendReturns>()
        .unwrap()
        .call((a, None, vec![c0, c1], 2))
        .unwrap();
    assert_eq!(
        hooks.batches.load(Ordering::SeqCst),
        1,
        "one batch of three"
    );
    assert_eq!(
        (values(&first), first.device()),
        (vec![3.0, 4.0], Device::new(key, 0))
    );
    assert_eq!(
        rest.iter().map(values).collect::<Vec<_>>(),
        [vec![6.0, 8.0], vec![10.0, 12.0]]
    );
}

/// Records the DEBUG records of the threads that ask for them (so the other tests' calls, on
/// their own threads, see logging off and keep the typed path).
struct Capture(std::sync::Mutex<Vec<String>>);

thread_local! {
    static CAPTURING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl log::Log for Capture {
    fn enabled(&self, _metadata: &log::Metadata) -> bool {
        CAPTURING.with(|c| c.get())
    }
    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) && record.target() == "boxfall" {
            let mut records = self.0.lock().unwrap_or_else(|e| e.into_inner());
            records.push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

#[test]
fn a_typed_call_with_debug_logging_on_logs_its_fallback_with_every_tensor() {
    fixture();
    let dev = Dev::with_cpu_fallback("FbTypedLog");
    let capture: &'static Capture = Box::leak(Box::new(Capture(Default::default())));
    log::set_logger(capture).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Debug);
    CAPTURING.with(|c| c.set(true));
    let (a, c) = (dev.tensor(&[1.0, 2.0]), cpu(&[3.0, 4.0]));
    let (_lib, blend) = define_blend();
    let Multi((first, _)) = blend
        .typed::<BlendArgs, BlendReturns>()
        .unwrap()
        .call((a, None, vec![c], 1))
        .unwrap();
    CAPTURING.with(|c| c.set(false));
    assert_eq!(values(&first), vec![2.0, 3.0]);
    let records = capture.0.lock().unwrap();
    let ours: Vec<&String> = records
        .iter()
        .filter(|r| r.contains(blend.name()))
        .collect();
    assert_eq!(ours.len(), 1, "{records:?}");
    let device = dev.device(0).to_string();
    assert!(ours[0].starts_with("cpu_fallback:"), "{}", ours[0]);
    assert!(
        ours[0].contains(&device) && ours[0].contains("cpu"),
        "both tensors, with their devices: {}",
        ours[0]
    );
}

#[test]
fn a_boxed_call_whose_values_the_typed_cpu_kernel_does_not_take_fails_naming_the_operator() {
    let f = fixture();
    let (_, mut lib) = def_lib("fbtyped");
    let op = lib.define("tag(Tensor x, int k) -> Tensor").unwrap();
    // Registered with a signature that does not fit the schema: `k` is no string.
    lib.impl_kernel(
        "tag",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, String), Tensor>(|_, (x, _)| Ok(x)),
        false,
    )
    .unwrap();
    let x = f.dev.tensor(&[1.0, 2.0]);
    let mut stack = vec![IValue::Tensor(x.clone()), IValue::Int(3)];
    let err = op.call_boxed(&mut stack).unwrap_err().to_string();
    assert!(err.contains("expected str"), "{err}");
    assert!(
        err.contains(&format!("the CPU kernel of '{}'", op.name())),
        "{err}"
    );
    let s = Dispatcher::op_stats(op.name()).unwrap();
    assert_eq!((s.fallbacks, s.failures), (1, 1));
    assert_eq!((values(&x), x.device()), (vec![1.0, 2.0], f.dev.device(0)));
}
