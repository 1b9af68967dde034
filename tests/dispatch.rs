//! Dispatch: typed and boxed calls, the key set of a call, CompositeImplicit, fallthroughs,
//! redispatch, and the NoKernel error.

mod common;

use std::cell::Cell;
use std::sync::{Arc, Mutex, OnceLock};

use boxfall::ivalue::ArgValue;
use boxfall::key::LocalKeysGuard;
use boxfall::{
    Device, DispatchKey, DispatchKeySet, Error, IValue, KernelFunction, Library, OperatorHandle,
    Result, Tensor,
};
use common::*;

/// A backend key used only for per-operator kernels (no fallback), shared by the tests here.
fn accel() -> DispatchKey {
    static KEY: OnceLock<DispatchKey> = OnceLock::new();
    *KEY.get_or_init(|| backend_key("DispAccel"))
}

// ------------------------------------------------------------------------ boxing, counted

thread_local! {
    static BOXED: Cell<usize> = const { Cell::new(0) };
    static UNBOXED: Cell<usize> = const { Cell::new(0) };
}

/// An int argument that counts how often it is boxed and unboxed (on this thread).
#[derive(Debug, PartialEq)]
struct Counted(i64);

impl ArgValue for Counted {
    fn into_ivalue(self) -> IValue {
        BOXED.with(|c| c.set(c.get() + 1));
        IValue::Int(self.0)
    }
    fn from_ivalue(v: IValue) -> Result<Self> {
        UNBOXED.with(|c| c.set(c.get() + 1));
        v.to_int()
            .map(Counted)
            .ok_or_else(|| kernel_error("expected an int"))
    }
}

fn boxings() -> (usize, usize) {
    (BOXED.with(Cell::get), UNBOXED.with(Cell::get))
}

fn reset_boxings() {
    BOXED.with(|c| c.set(0));
    UNBOXED.with(|c| c.set(0));
}

fn inc_counted(_keys: DispatchKeySet, (x,): (Counted,)) -> Result<Counted> {
    Ok(Counted(x.0 + 1))
}

#[test]
fn typed_call_of_an_unboxed_kernel_never_boxes() {
    let (_, mut lib) = def_lib("disp");
    let op = lib.define("inc(int x) -> int").unwrap();
    lib.impl_kernel(
        "inc",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Counted,), Counted>(inc_counted),
        false,
    )
    .unwrap();
    let inc = op.typed::<(Counted,), Counted>().unwrap();
    reset_boxings();
    assert_eq!(inc.call((Counted(41),)).unwrap(), Counted(42));
    assert_eq!(boxings(), (0, 0), "no boxing on the typed path");
    let (kernel, _) = op.kernel_for(DispatchKey::CPU);
    assert!(kernel.unwrap().unboxed::<(Counted,), Counted>().is_some());
}

#[test]
fn typed_call_of_a_boxed_kernel_boxes_once() {
    let (_, mut lib) = def_lib("disp");
    let op = lib.define("inc(int x) -> int").unwrap();
    let seen: Arc<Mutex<Vec<Vec<i64>>>> = Arc::default();
    let s = seen.clone();
    lib.impl_kernel(
        "inc",
        DispatchKey::CPU,
        KernelFunction::from_boxed(move |_op, _keys, stack| {
            s.lock()
                .unwrap()
                .push(stack.iter().filter_map(IValue::to_int).collect());
            let x = stack[0].to_int().unwrap();
            stack.clear();
            stack.push(IValue::Int(x + 1));
            Ok(())
        }),
        false,
    )
    .unwrap();
    let inc = op.typed::<(Counted,), Counted>().unwrap();
    reset_boxings();
    assert_eq!(inc.call((Counted(1),)).unwrap(), Counted(2));
    // The argument was boxed once, the return unboxed once; the kernel ran once.
    assert_eq!(boxings(), (1, 1));
    assert_eq!(*seen.lock().unwrap(), vec![vec![1]]);
}

#[test]
fn boxed_call_of_an_unboxed_kernel_unboxes_once() {
    let (_, mut lib) = def_lib("disp");
    let op = lib.define("inc(int x) -> int").unwrap();
    lib.impl_kernel(
        "inc",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Counted,), Counted>(inc_counted),
        false,
    )
    .unwrap();
    reset_boxings();
    let mut stack = vec![IValue::Int(9)];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack.len(), 1);
    assert_eq!(stack[0].to_int(), Some(10));
    assert_eq!(
        boxings(),
        (1, 1),
        "one unboxing of the argument, one boxing of the return"
    );
}

#[test]
fn a_typed_handle_must_fit_the_schema() {
    let (_, mut lib) = def_lib("disp");
    let op = lib.define("f(int x, int y) -> int").unwrap();
    let err = op.typed::<(i64,), i64>().err().expect("the arity differs");
    assert!(matches!(err, Error::Argument { .. }), "{err:?}");
    assert!(op.typed::<(i64, i64), i64>().is_ok());
}

// -------------------------------------------------------------------- the keys of a call

/// A boxed kernel returning `id` that records the key set it was called with.
fn recording(id: i64, log: &Arc<Mutex<Vec<DispatchKeySet>>>) -> KernelFunction {
    let log = log.clone();
    KernelFunction::from_boxed(move |_op, keys, stack| {
        log.lock().unwrap().push(keys);
        stack.clear();
        stack.push(IValue::Int(id));
        Ok(())
    })
}

#[test]
fn the_key_set_includes_tensor_list_elements() {
    let (_, mut lib) = def_lib("disp");
    let op = lib.define("pick(Tensor[] xs) -> int").unwrap();
    let log = Arc::default();
    lib.impl_kernel("pick", DispatchKey::CPU, recording(1, &log), false)
        .unwrap();
    lib.impl_kernel("pick", accel(), recording(2, &log), false)
        .unwrap();
    let typed = op.typed::<(Vec<Tensor>,), i64>().unwrap();
    let mixed = vec![cpu(&[1.0]), on_key(accel(), &[2.0]), cpu(&[3.0])];

    assert_eq!(typed.call((mixed.clone(),)).unwrap(), 2);
    let mut stack = vec![IValue::TensorList(mixed)];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(2));
    assert_eq!(typed.call((vec![cpu(&[1.0])],)).unwrap(), 1);

    let seen = log.lock().unwrap().clone();
    assert_eq!(seen[0], DispatchKey::CPU.set() | accel());
    assert_eq!(seen[1], DispatchKey::CPU.set() | accel());
    assert_eq!(seen[2], DispatchKey::CPU.set());
}

#[test]
fn the_key_set_includes_optional_tensor_list_elements_and_optional_tensors() {
    let (_, mut lib) = def_lib("disp");
    let op = lib.define("pick(Tensor?[] xs) -> int").unwrap();
    let opt = lib.define("pick1(Tensor? x) -> int").unwrap();
    for name in ["pick", "pick1"] {
        lib.impl_kernel(name, DispatchKey::CPU, returns_id(1), false)
            .unwrap();
        lib.impl_kernel(name, accel(), returns_id(2), false)
            .unwrap();
    }
    let list = IValue::OptionalTensorList(vec![None, Some(on_key(accel(), &[1.0])), None]);
    let mut stack = vec![list.clone()];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(2));
    assert_eq!(
        op.typed::<(IValue,), i64>().unwrap().call((list,)).unwrap(),
        2
    );

    let mut stack = vec![IValue::OptionalTensorList(vec![None, Some(cpu(&[1.0]))])];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(1));

    let typed = opt.typed::<(Option<Tensor>,), i64>().unwrap();
    assert_eq!(typed.call((Some(on_key(accel(), &[1.0])),)).unwrap(), 2);
    assert_eq!(typed.call((None,)).unwrap(), 1);
}

#[test]
fn a_call_without_tensors_dispatches_on_its_device_argument() {
    let (_lib, op) = make_on_cpu_and_accel("make(int n, Device device) -> int");
    let typed = op.typed::<(i64, Device), i64>().unwrap();
    assert_eq!(typed.call((3, Device::new(accel(), 0))).unwrap(), 2);
    assert_eq!(typed.call((3, Device::new(accel(), 5))).unwrap(), 2);
    assert_eq!(typed.call((3, Device::CPU)).unwrap(), 1);

    let mut stack = vec![IValue::Int(3), IValue::Device(Device::new(accel(), 0))];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(2));
}

#[test]
fn an_optional_device_argument_decides_a_boxed_call() {
    let (_lib, op) = make_on_cpu_and_accel("make(int n, *, Device? device=None) -> int");
    let mut stack = vec![IValue::Int(3), IValue::Device(Device::new(accel(), 0))];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(2));
    let mut stack = vec![IValue::Int(3), IValue::None];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(1));
}

#[test]
fn a_typed_call_with_a_boxed_device_argument_dispatches_on_its_key() {
    let (_lib, op) = make_on_cpu_and_accel("make(int n, *, Device? device=None) -> int");
    let typed = op.typed::<(i64, IValue), i64>().unwrap();
    // The boxed call of the same arguments goes to the device's key...
    let mut stack = vec![IValue::Int(3), IValue::Device(Device::new(accel(), 0))];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(2));
    // ...and so must the typed one.
    assert_eq!(
        typed
            .call((3, IValue::Device(Device::new(accel(), 0))))
            .unwrap(),
        2
    );
}

#[test]
fn a_call_without_tensors_or_device_dispatches_on_cpu() {
    let (ns, mut lib) = def_lib("disp");
    let op = lib.define("count(int n) -> int").unwrap();
    lib.impl_kernel("count", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    lib.impl_kernel("count", accel(), returns_id(2), false)
        .unwrap();
    assert_eq!(op.typed::<(i64,), i64>().unwrap().call((1,)).unwrap(), 1);
    let mut stack = vec![IValue::Int(1)];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(1));

    let only_accel = lib.define("count2(int n) -> int").unwrap();
    lib.impl_kernel("count2", accel(), returns_id(2), false)
        .unwrap();
    let err = only_accel
        .typed::<(i64,), i64>()
        .unwrap()
        .call((1,))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Could not run '{ns}::count2' with arguments from the 'CPU' backend. '{ns}::count2' is only available for these backends: [{}].",
            accel().name()
        )
    );
}

#[test]
fn mixed_cpu_and_device_inputs_go_to_the_device_key() {
    let (_, mut lib) = def_lib("disp");
    let op = lib.define("pair(Tensor a, Tensor b) -> int").unwrap();
    lib.impl_kernel("pair", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    lib.impl_kernel("pair", accel(), returns_id(2), false)
        .unwrap();
    lib.impl_kernel("pair", DispatchKey::NATIVE, returns_id(3), false)
        .unwrap();
    let typed = op.typed::<(Tensor, Tensor), i64>().unwrap();
    let (c, a, n) = (
        cpu(&[1.0]),
        on_key(accel(), &[1.0]),
        on_key(DispatchKey::NATIVE, &[1.0]),
    );
    assert_eq!(typed.call((c.clone(), a.clone())).unwrap(), 2);
    assert_eq!(typed.call((a.clone(), c.clone())).unwrap(), 2);
    assert_eq!(typed.call((c.clone(), n.clone())).unwrap(), 3);
    assert_eq!(typed.call((c.clone(), c.clone())).unwrap(), 1);
    // The later-registered backend outranks Native.
    assert_eq!(typed.call((n, a.clone())).unwrap(), 2);
    let mut stack = vec![IValue::Tensor(c), IValue::Tensor(a)];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(2));
}

// ---------------------------------------------------------------------- CompositeImplicit

/// A kernel that tags its result with the key it ran for: the device of the result.
fn neg_on(key: DispatchKey) -> KernelFunction {
    KernelFunction::from_boxed(move |_op, _keys, stack| {
        let x = f64_array(tensor_of(&stack[0]))?;
        *stack = vec![IValue::Tensor(Tensor::host(
            Device::new(key, 0),
            (-x).into(),
        ))];
        Ok(())
    })
}

fn add_on(key: DispatchKey) -> KernelFunction {
    KernelFunction::from_boxed(move |_op, _keys, stack| {
        let a = f64_array(tensor_of(&stack[0]))?;
        let b = f64_array(tensor_of(&stack[1]))?;
        *stack = vec![IValue::Tensor(Tensor::host(
            Device::new(key, 0),
            (a + b).into(),
        ))];
        Ok(())
    })
}

#[test]
fn composite_implicit_serves_backend_keys_lacking_their_own_kernel() {
    let (_, mut lib) = def_lib("disp");
    let neg = lib.define("neg(Tensor x) -> Tensor").unwrap();
    let add = lib.define("add(Tensor a, Tensor b) -> Tensor").unwrap();
    let sub = lib.define("sub(Tensor a, Tensor b) -> Tensor").unwrap();
    for key in [DispatchKey::CPU, accel()] {
        lib.impl_kernel("neg", key, neg_on(key), false).unwrap();
        lib.impl_kernel("add", key, add_on(key), false).unwrap();
    }
    // sub = add(a, neg(b)): decomposed into operators that have device kernels.
    let (neg_t, add_t) = (
        neg.typed::<(Tensor,), Tensor>().unwrap(),
        add.typed::<(Tensor, Tensor), Tensor>().unwrap(),
    );
    lib.impl_kernel(
        "sub",
        DispatchKey::COMPOSITE_IMPLICIT,
        KernelFunction::from_boxed(move |_op, _keys, stack| {
            let a = tensor_of(&stack[0]).clone();
            let b = tensor_of(&stack[1]).clone();
            let r = add_t.call((a, neg_t.call((b,))?))?;
            *stack = vec![IValue::Tensor(r)];
            Ok(())
        }),
        false,
    )
    .unwrap();
    let sub_t = sub.typed::<(Tensor, Tensor), Tensor>().unwrap();

    let r = sub_t
        .call((on_key(accel(), &[5.0, 7.0]), on_key(accel(), &[1.0, 2.0])))
        .unwrap();
    assert_eq!(r.key(), accel(), "the data stayed on the device");
    assert_eq!(values(&r), vec![4.0, 5.0]);
    let r = sub_t.call((cpu(&[5.0]), cpu(&[1.0]))).unwrap();
    assert_eq!(r.key(), DispatchKey::CPU);
    assert_eq!(values(&r), vec![4.0]);

    assert_eq!(source_of(&sub, DispatchKey::CPU), "composite kernel");
    assert_eq!(source_of(&sub, accel()), "composite kernel");
    assert_eq!(source_of(&sub, DispatchKey::NATIVE), "composite kernel");
    assert_eq!(source_of(&sub, DispatchKey::COMPOSITE_IMPLICIT), "kernel");
    // An operator without a composite kernel does not list the alias key.
    assert!(!neg
        .dispatch_table()
        .iter()
        .any(|(k, _)| k == "CompositeImplicit"));
}

#[test]
fn an_own_kernel_beats_composite_which_beats_a_backend_fallback() {
    let (_, mut lib) = def_lib("disp");
    let b = backend_key("DispCompFb");
    let f = functionality_key("DispCompF");
    let mut fb = fallback_lib();
    fb.fallback(b, returns_id(99)).unwrap();
    fb.fallback(f, returns_id(98)).unwrap();
    let op = lib.define("which(Tensor x) -> int").unwrap();
    lib.impl_kernel("which", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    assert_eq!(source_of(&op, b), "backend fallback");
    lib.impl_kernel(
        "which",
        DispatchKey::COMPOSITE_IMPLICIT,
        returns_id(7),
        false,
    )
    .unwrap();
    let typed = op.typed::<(Tensor,), i64>().unwrap();
    assert_eq!(typed.call((cpu(&[1.0]),)).unwrap(), 1);
    assert_eq!(typed.call((on_key(b, &[1.0]),)).unwrap(), 7);
    assert_eq!(source_of(&op, DispatchKey::CPU), "kernel");
    assert_eq!(source_of(&op, b), "composite kernel");
    // CompositeImplicit serves backend keys only: the functionality key keeps its fallback.
    assert_eq!(source_of(&op, f), "backend fallback");
    let _g = LocalKeysGuard::include(f.set());
    assert_eq!(typed.call((cpu(&[1.0]),)).unwrap(), 98);
}

// ---------------------------------------------------------------------------- fallthrough

#[test]
fn a_fallthrough_kernel_for_one_operator_passes_the_call_on() {
    let (ns, mut lib) = def_lib("disp");
    let f = functionality_key("DispFt");
    let op = lib.define("which(Tensor x) -> int").unwrap();
    let other = lib.define("other(Tensor x) -> int").unwrap();
    for name in ["which", "other"] {
        lib.impl_kernel(name, DispatchKey::CPU, returns_id(1), false)
            .unwrap();
    }
    lib.impl_kernel("which", f, KernelFunction::fallthrough(), false)
        .unwrap();
    assert_eq!(source_of(&op, f), "fallthrough");
    assert_eq!(source_of(&other, f), "missing");

    let _g = LocalKeysGuard::include(f.set());
    assert_eq!(
        op.typed::<(Tensor,), i64>()
            .unwrap()
            .call((cpu(&[1.0]),))
            .unwrap(),
        1
    );
    let mut stack = vec![IValue::Tensor(cpu(&[1.0]))];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(1));
    // The fallthrough belongs to one operator only.
    let err = other
        .typed::<(Tensor,), i64>()
        .unwrap()
        .call((cpu(&[1.0]),))
        .unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "Could not run '{ns}::other' with arguments from the '{}' backend.",
            f.name()
        )),
        "{err}"
    );
}

#[test]
fn a_fallthrough_fallback_masks_its_key_for_every_operator() {
    let (_, mut lib) = def_lib("disp");
    let f = functionality_key("DispFtFb");
    let mut fb = fallback_lib();
    fb.fallback(f, KernelFunction::fallthrough()).unwrap();
    let plain = lib.define("plain(Tensor x) -> int").unwrap();
    let own = lib.define("own(Tensor x) -> int").unwrap();
    lib.impl_kernel("plain", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    lib.impl_kernel("own", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    lib.impl_kernel("own", f, returns_id(5), false).unwrap();
    assert_eq!(source_of(&plain, f), "fallthrough");
    assert_eq!(source_of(&own, f), "kernel");

    let log = Arc::default();
    let rec = lib.define("rec(Tensor x) -> int").unwrap();
    lib.impl_kernel("rec", DispatchKey::CPU, recording(1, &log), false)
        .unwrap();

    let _g = LocalKeysGuard::include(f.set());
    let call = |op: &OperatorHandle| {
        op.typed::<(Tensor,), i64>()
            .unwrap()
            .call((cpu(&[1.0]),))
            .unwrap()
    };
    assert_eq!(call(&plain), 1);
    assert_eq!(
        call(&own),
        5,
        "an operator's own kernel wins over the fallthrough fallback"
    );
    assert_eq!(call(&rec), 1);
    // Masked: the CPU kernel does not see the fallthrough key.
    assert_eq!(log.lock().unwrap()[0], DispatchKey::CPU.set());

    drop(fb);
    assert_eq!(source_of(&plain, f), "missing");
}

#[test]
fn a_fallthrough_fallback_of_the_only_backend_key_leaves_nothing_to_run() {
    let (ns, mut lib) = def_lib("disp");
    let b = backend_key("DispFtB");
    let mut fb = fallback_lib();
    fb.fallback(b, KernelFunction::fallthrough()).unwrap();
    let op = lib.define("which(Tensor x) -> int").unwrap();
    lib.impl_kernel("which", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    let typed = op.typed::<(Tensor, Tensor), i64>();
    assert!(typed.is_err(), "one argument");
    let typed = op.typed::<(Tensor,), i64>().unwrap();
    // With a CPU tensor beside it, the call falls through to CPU...
    let two = lib.define("two(Tensor x, Tensor y) -> int").unwrap();
    lib.impl_kernel("two", DispatchKey::CPU, returns_id(2), false)
        .unwrap();
    assert_eq!(
        two.typed::<(Tensor, Tensor), i64>()
            .unwrap()
            .call((on_key(b, &[1.0]), cpu(&[1.0])))
            .unwrap(),
        2
    );
    // ...alone, no key is left: the error names the key the call had.
    let err = typed.call((on_key(b, &[1.0]),)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Could not run '{ns}::which' with arguments from the '{}' backend. '{ns}::which' is only available for these backends: [CPU].", b.name())
    );
}

// ------------------------------------------------------------------------------ redispatch

#[test]
fn a_boxed_functionality_kernel_redispatches_to_the_backend_kernel() {
    let (_, mut lib) = def_lib("disp");
    let f = functionality_key("DispRedis");
    let op = lib.define("which(Tensor x) -> int").unwrap();
    let log = Arc::default();
    lib.impl_kernel("which", accel(), recording(2, &log), false)
        .unwrap();
    lib.impl_kernel("which", DispatchKey::CPU, recording(1, &log), false)
        .unwrap();
    let seen_by_trace: Arc<Mutex<Vec<DispatchKeySet>>> = Arc::default();
    let s = seen_by_trace.clone();
    lib.impl_kernel(
        "which",
        f,
        KernelFunction::from_boxed(move |op, keys, stack| {
            s.lock().unwrap().push(keys);
            op.redispatch_boxed(keys, stack)?;
            let v = stack[0].to_int().unwrap();
            stack[0] = IValue::Int(100 + v);
            Ok(())
        }),
        false,
    )
    .unwrap();
    let typed = op.typed::<(Tensor,), i64>().unwrap();
    assert_eq!(typed.call((on_key(accel(), &[1.0]),)).unwrap(), 2);
    {
        let _g = LocalKeysGuard::include(f.set());
        assert_eq!(typed.call((on_key(accel(), &[1.0]),)).unwrap(), 102);
        assert_eq!(typed.call((cpu(&[1.0]),)).unwrap(), 101);
        let mut stack = vec![IValue::Tensor(on_key(accel(), &[1.0]))];
        op.call_boxed(&mut stack).unwrap();
        assert_eq!(stack[0].to_int(), Some(102));
    }
    let trace = seen_by_trace.lock().unwrap().clone();
    assert_eq!(trace[0], f.set() | accel());
    assert_eq!(
        trace[0].highest(),
        Some(f),
        "a kernel's keys have its own key highest"
    );
    let backend = log.lock().unwrap().clone();
    assert_eq!(
        backend[1],
        accel().set(),
        "the backend kernel runs without the functionality key"
    );
    assert_eq!(backend[2], DispatchKey::CPU.set());
}

static TYPED_REDISPATCH_OP: OnceLock<OperatorHandle> = OnceLock::new();

fn trace_typed(keys: DispatchKeySet, (x,): (Tensor,)) -> Result<i64> {
    let op = TYPED_REDISPATCH_OP.get().expect("set before the call");
    let below = op.typed::<(Tensor,), i64>()?.redispatch(keys, (x,))?;
    Ok(1000 + below)
}

#[test]
fn a_typed_functionality_kernel_redispatches_to_the_backend_kernel() {
    let (_, mut lib) = def_lib("disp");
    let f = functionality_key("DispRedisT");
    let op = lib.define("which(Tensor x) -> int").unwrap();
    TYPED_REDISPATCH_OP.set(op.clone()).unwrap();
    lib.impl_kernel("which", accel(), returns_id(2), false)
        .unwrap();
    lib.impl_kernel(
        "which",
        f,
        KernelFunction::from_unboxed::<(Tensor,), i64>(trace_typed),
        false,
    )
    .unwrap();
    let _g = LocalKeysGuard::include(f.set());
    let typed = op.typed::<(Tensor,), i64>().unwrap();
    assert_eq!(typed.call((on_key(accel(), &[1.0]),)).unwrap(), 1002);
    let mut stack = vec![IValue::Tensor(on_key(accel(), &[1.0]))];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(1002));
}

#[test]
fn an_excluded_key_is_skipped() {
    let (_, mut lib) = def_lib("disp");
    let op = lib.define("which(Tensor x) -> int").unwrap();
    lib.impl_kernel("which", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    lib.impl_kernel("which", accel(), returns_id(2), false)
        .unwrap();
    let typed = op.typed::<(Tensor,), i64>().unwrap();
    let x = on_key(accel(), &[1.0]);
    let _g = LocalKeysGuard::exclude(accel().set());
    let err = typed.call((x.clone(),)).unwrap_err();
    assert!(matches!(err, Error::NoKernel { .. }), "{err:?}");
    let _h = LocalKeysGuard::include(DispatchKey::CPU.set());
    assert_eq!(typed.call((x,)).unwrap(), 1);
}

// -------------------------------------------------------------------------------- NoKernel

#[test]
fn no_kernel_error_text_lists_backends_lowest_first() {
    let (ns, mut lib) = def_lib("disp");
    let b = backend_key("DispNoK");
    let later = backend_key("DispNoKLater");
    let op = lib.define("foo(Tensor x) -> int").unwrap();
    lib.impl_kernel("foo", later, returns_id(3), false).unwrap();
    lib.impl_kernel("foo", DispatchKey::NATIVE, returns_id(2), false)
        .unwrap();
    lib.impl_kernel("foo", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    let expected = format!(
        "Could not run '{ns}::foo' with arguments from the '{}' backend. '{ns}::foo' is only available for these backends: [CPU, Native, {}].",
        b.name(),
        later.name()
    );
    let err = op
        .typed::<(Tensor,), i64>()
        .unwrap()
        .call((on_key(b, &[1.0]),))
        .unwrap_err();
    assert_eq!(err.to_string(), expected);
    match &err {
        Error::NoKernel {
            op: o,
            key,
            available,
            ..
        } => {
            assert_eq!(o, &format!("{ns}::foo"));
            assert_eq!(key, &b.name());
            assert_eq!(
                available,
                &vec!["CPU".to_string(), "Native".to_string(), later.name()]
            );
        }
        other => panic!("expected NoKernel, got {other:?}"),
    }
    let mut stack = vec![IValue::Tensor(on_key(b, &[1.0]))];
    assert_eq!(op.call_boxed(&mut stack).unwrap_err().to_string(), expected);
    assert_eq!(source_of(&op, b), "missing");
}

#[test]
fn no_kernel_error_lists_composite_implicit_last() {
    let (ns, mut lib) = def_lib("disp");
    let f = functionality_key("DispNoKF");
    let op = lib.define("foo.Tensor(Tensor x) -> int").unwrap();
    lib.impl_kernel(
        "foo.Tensor",
        DispatchKey::COMPOSITE_IMPLICIT,
        returns_id(9),
        false,
    )
    .unwrap();
    lib.impl_kernel("foo.Tensor", DispatchKey::NATIVE, returns_id(2), false)
        .unwrap();
    lib.impl_kernel("foo.Tensor", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    let _g = LocalKeysGuard::include(f.set());
    let err = op
        .typed::<(Tensor,), i64>()
        .unwrap()
        .call((cpu(&[1.0]),))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Could not run '{ns}::foo.Tensor' with arguments from the '{}' backend. '{ns}::foo.Tensor' is only available for these backends: [CPU, Native, CompositeImplicit].",
            f.name()
        )
    );
}

#[test]
fn no_kernel_error_of_an_operator_without_kernels() {
    let (ns, mut lib) = def_lib("disp");
    let op = lib.define("bare(Tensor x) -> int").unwrap();
    let err = op
        .typed::<(Tensor,), i64>()
        .unwrap()
        .call((cpu(&[1.0]),))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Could not run '{ns}::bare' with arguments from the 'CPU' backend. '{ns}::bare' is only available for these backends: [].")
    );
    // Fallthroughs and fallbacks are not the operator's own kernels.
    let f = functionality_key("DispNoKFt");
    lib.impl_kernel("bare", f, KernelFunction::fallthrough(), false)
        .unwrap();
    let err = op
        .typed::<(Tensor,), i64>()
        .unwrap()
        .call((cpu(&[1.0]),))
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("available for these backends: []."),
        "{err}"
    );
}

/// Defines `make` from `schema` with a CPU kernel returning 1 and an Accel kernel returning 2.
fn make_on_cpu_and_accel(schema: &str) -> (Library, OperatorHandle) {
    let (_, mut lib) = def_lib("disp");
    let op = lib.define(schema).unwrap();
    lib.impl_kernel("make", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    lib.impl_kernel("make", accel(), returns_id(2), false)
        .unwrap();
    (lib, op)
}
