//! The boxed CPU fallback with a test backend whose tensors hold their own payload: functional,
//! in-place and out= operators, lists, devices, views, dtypes, failure atomicity, byte counts,
//! and Native's lending of read-only arguments.
//!
//! The fallback policy is process-wide: these tests keep it at "allow" (tests/policy.rs owns it).

mod common;

use std::sync::{Arc, Mutex, OnceLock};

use boxfall::fallback::{set_fallback_policy, CpuFallback, ViewPolicy};
use boxfall::ivalue::Multi;
use boxfall::native;
use boxfall::tensor::HostArray;
use boxfall::Dispatcher;
use boxfall::{
    call_fallback, cpu_fallback, DType, Device, DispatchKey, DispatchKeySet, Error, FallbackPolicy,
    IValue, KernelFunction, Library, OperatorHandle, Result, Tensor,
};
use common::*;
use ndarray::ArrayD;

/// The backend most tests share: `cpu_fallback` is its backend fallback. Tests that count hook
/// calls or inject failures register a backend of their own.
fn dev() -> &'static Dev {
    static DEV: OnceLock<Dev> = OnceLock::new();
    DEV.get_or_init(|| {
        set_fallback_policy(FallbackPolicy::Allow);
        Dev::with_cpu_fallback("FbDev")
    })
}

/// A backend of its own for one test (counters and failures are per backend).
fn own_dev(prefix: &str) -> Dev {
    dev();
    Dev::with_cpu_fallback(prefix)
}

fn fallbacks(op: &boxfall::OperatorHandle) -> (u64, u64) {
    let s = Dispatcher::op_stats(op.name()).expect("a defined operator");
    (s.fallbacks, s.failures)
}

// ----------------------------------------------------------------------------- CPU kernels

fn mul_out_cpu(_k: DispatchKeySet, (a, b, out): (Tensor, Tensor, Tensor)) -> Result<Tensor> {
    write(&out, f64_array(&a)? * f64_array(&b)?);
    Ok(out)
}

/// `lo` gets `x - 1` (x's shape), `hi` gets the sum of `x` (shape [1]).
fn lohi_out_cpu(
    _k: DispatchKeySet,
    (x, lo, hi): (Tensor, Tensor, Tensor),
) -> Result<Multi<(Tensor, Tensor)>> {
    let a = f64_array(&x)?;
    write(&lo, a.mapv(|v| v - 1.0));
    write(&hi, arr(&[a.sum()]));
    Ok(Multi((lo, hi)))
}

fn neg_list_cpu(_k: DispatchKeySet, (xs,): (Vec<Tensor>,)) -> Result<Vec<Tensor>> {
    xs.iter()
        .map(|x| Ok(Tensor::from_array(-f64_array(x)?)))
        .collect()
}

fn sum_list_cpu(_k: DispatchKeySet, (xs,): (Vec<Tensor>,)) -> Result<Tensor> {
    let mut total = 0.0;
    for x in &xs {
        if x.key() != DispatchKey::CPU {
            return Err(kernel_error(format!("got a tensor on {}", x.device())));
        }
        total += f64_array(x)?.sum();
    }
    Ok(cpu(&[total]))
}

fn fill_list_cpu(_k: DispatchKeySet, (xs, v): (Vec<Tensor>, f64)) -> Result<()> {
    for x in &xs {
        let a = f64_array(x)?;
        write(x, a.mapv(|_| v));
    }
    Ok(())
}

fn ident_cpu(_k: DispatchKeySet, (x,): (Tensor,)) -> Result<Tensor> {
    if x.key() != DispatchKey::CPU {
        return Err(kernel_error("not a CPU tensor"));
    }
    Ok(Tensor::from_array((*x.to_host()?).clone()))
}

fn full_cpu(_k: DispatchKeySet, (n, v, device): (i64, f64, Device)) -> Result<Tensor> {
    if device != Device::CPU {
        return Err(kernel_error(format!("the kernel got device {device}")));
    }
    Ok(cpu(&vec![v; n as usize]))
}

fn impl_cpu(lib: &mut Library, name: &str, kernel: KernelFunction) {
    lib.impl_kernel(name, DispatchKey::CPU, kernel, false)
        .expect("CPU kernel");
}

// ------------------------------------------------------------------------------ functional

#[test]
fn a_tuple_a_boxed_cpu_kernel_returns_comes_back_with_every_tensor_on_the_device() {
    let d = own_dev("FbTuple");
    let (_, mut lib) = def_lib("fb");
    let op = lib.define("pack(Tensor x, Tensor[] ys) -> Any").unwrap();
    // (x + 1, [y * 2 for y in ys], (x, 7)): tensors at the top, in a list and in a nested tuple.
    impl_cpu(
        &mut lib,
        "pack",
        KernelFunction::from_boxed(|_, _, stack| {
            let ys: Vec<Tensor> = match stack.pop() {
                Some(IValue::TensorList(ys)) => ys,
                other => return Err(kernel_error(format!("ys was {other:?}"))),
            };
            let x = tensor_of(&stack[0]).clone();
            stack.clear();
            let doubled = ys
                .iter()
                .map(|y| Ok(Tensor::from_array(f64_array(y)? * 2.0)))
                .collect::<Result<Vec<_>>>()?;
            stack.push(IValue::Tuple(vec![
                IValue::Tensor(Tensor::from_array(f64_array(&x)? + 1.0)),
                IValue::TensorList(doubled),
                IValue::Tuple(vec![IValue::Tensor(x), IValue::Int(7)]),
            ]));
            Ok(())
        }),
    );
    let (x, y0, y1) = (d.tensor(&[1.0]), d.tensor(&[2.0, 3.0]), d.tensor(&[4.0]));
    let mut stack = vec![
        IValue::Tensor(x.clone()),
        IValue::TensorList(vec![y0.clone(), y1.clone()]),
    ];
    op.call_boxed(&mut stack).unwrap();
    let IValue::Tuple(out) = &stack[0] else {
        panic!("not a tuple: {:?}", stack[0]);
    };
    let on_device = |t: &Tensor| t.device() == d.device(0);
    assert!(on_device(tensor_of(&out[0])));
    assert_eq!(values(tensor_of(&out[0])), vec![2.0]);
    let IValue::TensorList(ys) = &out[1] else {
        panic!("not a list: {:?}", out[1]);
    };
    assert!(ys.iter().all(on_device));
    assert_eq!(
        ys.iter().map(values).collect::<Vec<_>>(),
        [vec![4.0, 6.0], vec![8.0]]
    );
    let IValue::Tuple(inner) = &out[2] else {
        panic!("not a tuple: {:?}", out[2]);
    };
    assert!(on_device(tensor_of(&inner[0])));
    assert_eq!(values(tensor_of(&inner[0])), vec![1.0]);
    assert_eq!(inner[1].to_int(), Some(7));
    // Four tensors of 8, 16, 8 and 8 bytes came back (x went out once, y0 and y1 once each).
    let s = Dispatcher::op_stats(op.name()).unwrap();
    assert_eq!((s.bytes_to_cpu, s.bytes_from_cpu), (32, 40));
    assert_eq!(values(&x), vec![1.0]);
}

#[test]
fn a_functional_operator_runs_on_the_cpu_and_returns_a_device_tensor() {
    let d = own_dev("FbFunc");
    let (_, mut lib) = def_lib("fb");
    let op = define_add(&mut lib);
    let (x, y) = (d.tensor(&[1.0, 2.0]), d.tensor(&[10.0, 20.0]));
    let (px, py) = (payload_ptr(&x), payload_ptr(&y));
    let r = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((x.clone(), y.clone()))
        .unwrap();
    assert_eq!(r.device(), d.device(0));
    assert!(r.payload().is_some(), "a test-backend tensor");
    assert_eq!(values(&r), vec![11.0, 22.0]);
    assert_eq!(values(&x), vec![1.0, 2.0]);
    assert_eq!(values(&y), vec![10.0, 20.0]);
    assert_eq!((payload_ptr(&x), payload_ptr(&y)), (px, py));
    assert_eq!(d.count(Hook::ToCpu), 2);
    assert_eq!(d.hooks.to_cpu_for_write(), 0);
    assert_eq!(d.count(Hook::FromCpu), 1);
    assert_eq!(d.count(Hook::CopyFromCpu), 0);

    let mut stack = vec![IValue::Tensor(x), IValue::Tensor(y)];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack.len(), 1);
    assert_eq!(values(tensor_of(&stack[0])), vec![11.0, 22.0]);
    assert_eq!(tensor_of(&stack[0]).device(), d.device(0));
    assert_eq!(fallbacks(&op), (2, 0));
    assert_eq!(boxfall::Dispatcher::counter_value(op.name()), 2);
    assert!(Dispatcher::op_stats(op.name())
        .unwrap()
        .backends
        .contains(d.key));
}

#[test]
fn results_go_to_the_device_index_of_the_first_input() {
    let (_, mut lib) = def_lib("fb");
    let op = define_neg(&mut lib);
    let x = dev().tensor_at(3, arr(&[1.0]));
    let r = op.typed::<(Tensor,), Tensor>().unwrap().call((x,)).unwrap();
    assert_eq!(r.device(), dev().device(3));
    assert_eq!(values(&r), vec![-1.0]);
}

// -------------------------------------------------------------------------------- in-place

#[test]
fn an_inplace_operator_writes_into_the_callers_device_tensor_and_returns_it() {
    let d = own_dev("FbInplace");
    let (_, mut lib) = def_lib("fb");
    let op = define_add_(&mut lib);
    let (x, y) = (d.tensor(&[1.0, 2.0, 3.0]), d.tensor(&[1.0, 1.0, 1.0]));
    let px = payload_ptr(&x);
    let r = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((x.clone(), y.clone()))
        .unwrap();
    assert!(Tensor::same(&r, &x), "the return IS the argument");
    assert_eq!(values(&x), vec![2.0, 3.0, 4.0]);
    assert_eq!(payload_ptr(&x), px, "written in place by copy_from_cpu");
    assert_eq!(values(&y), vec![1.0, 1.0, 1.0]);
    assert_eq!(
        d.hooks.to_cpu_for_write(),
        1,
        "only self is asked for writing"
    );
    assert_eq!(d.count(Hook::CopyFromCpu), 1);
    assert_eq!(d.count(Hook::FromCpu), 0, "nothing new to move back");

    let mut stack = vec![IValue::Tensor(x.clone()), IValue::Tensor(y)];
    op.call_boxed(&mut stack).unwrap();
    assert!(Tensor::same(tensor_of(&stack[0]), &x));
    assert_eq!(values(&x), vec![3.0, 4.0, 5.0]);
}

#[test]
fn a_kernel_returning_a_new_tensor_for_an_aliased_return_writes_it_into_the_argument() {
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define("scale_(Tensor(a!) self, float k) -> Tensor(a!)")
        .unwrap();
    impl_cpu(
        &mut lib,
        "scale_",
        KernelFunction::from_unboxed::<(Tensor, f64), Tensor>(|_, (x, k)| {
            Ok(Tensor::from_array(f64_array(&x)? * k))
        }),
    );
    let x = dev().tensor(&[1.0, 2.0]);
    let r = op
        .typed::<(Tensor, f64), Tensor>()
        .unwrap()
        .call((x.clone(), 3.0))
        .unwrap();
    assert!(Tensor::same(&r, &x));
    assert_eq!(values(&x), vec![3.0, 6.0]);
}

// ------------------------------------------------------------------------------------ out=

#[test]
fn out_with_one_output_writes_the_out_tensor_and_returns_it() {
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define("mul.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)")
        .unwrap();
    impl_cpu(
        &mut lib,
        "mul.out",
        KernelFunction::from_unboxed::<(Tensor, Tensor, Tensor), Tensor>(mul_out_cpu),
    );
    let typed = op.typed::<(Tensor, Tensor, Tensor), Tensor>().unwrap();
    let d = dev();
    let (a, b, out) = (
        d.tensor(&[1.0, 2.0]),
        d.tensor(&[3.0, 4.0]),
        d.tensor(&[0.0, 0.0]),
    );
    let r = typed.call((a.clone(), b, out.clone())).unwrap();
    assert!(Tensor::same(&r, &out));
    assert_eq!(values(&out), vec![3.0, 8.0]);
    assert_eq!(values(&a), vec![1.0, 2.0]);

    // An out tensor of another shape takes the result's shape.
    let small = d.tensor(&[0.0]);
    let big = d.tensor_at(0, arr_nd(&[2, 2], &[1.0, 2.0, 3.0, 4.0]));
    let r = typed.call((big.clone(), big, small.clone())).unwrap();
    assert!(Tensor::same(&r, &small));
    assert_eq!(shape(&small), vec![2, 2]);
    assert_eq!(values(&small), vec![1.0, 4.0, 9.0, 16.0]);
}

#[test]
fn out_with_two_outputs_writes_both_and_returns_both() {
    let d = own_dev("FbOut2");
    let (_lib, op) = define_lohi_out();
    let (x, lo, hi) = (
        d.tensor(&[1.0, 2.0, 3.0]),
        d.tensor(&[0.0]),
        d.tensor(&[0.0, 0.0, 0.0, 0.0]),
    );
    let Multi((rlo, rhi)) = op
        .typed::<(Tensor, Tensor, Tensor), Multi<(Tensor, Tensor)>>()
        .unwrap()
        .call((x.clone(), lo.clone(), hi.clone()))
        .unwrap();
    assert!(Tensor::same(&rlo, &lo) && Tensor::same(&rhi, &hi));
    assert_eq!(values(&lo), vec![0.0, 1.0, 2.0]);
    assert_eq!(shape(&lo), vec![3], "grown");
    assert_eq!(values(&hi), vec![6.0]);
    assert_eq!(shape(&hi), vec![1], "shrunk");
    assert_eq!(values(&x), vec![1.0, 2.0, 3.0]);
    // Two moves for the kernel; the backups that make the two write-backs all-or-nothing are
    // kept from those moves, without a second transfer.
    assert_eq!(d.hooks.to_cpu_for_write(), 2);
    assert_eq!(d.count(Hook::CopyFromCpu), 2);
    assert_eq!(d.count(Hook::FromCpu), 0);
}

#[test]
fn a_cpu_out_tensor_gets_a_new_tensor_returned_for_it() {
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define("neg.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)")
        .unwrap();
    // The kernel returns a new tensor for `out` instead of writing into it.
    impl_cpu(
        &mut lib,
        "neg.out",
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(|_, (x, _out)| {
            Ok(Tensor::from_array(-f64_array(&x)?))
        }),
    );
    let out = cpu(&[0.0, 0.0]);
    let r = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((dev().tensor(&[1.0, 2.0]), out.clone()))
        .unwrap();
    assert!(Tensor::same(&r, &out));
    assert_eq!(values(&out), vec![-1.0, -2.0]);
}

// ----------------------------------------------------------------------------------- lists

#[test]
fn tensor_lists_move_in_and_out() {
    let (_, mut lib) = def_lib("fb");
    let op = lib.define("neg_all(Tensor[] xs) -> Tensor[]").unwrap();
    impl_cpu(
        &mut lib,
        "neg_all",
        KernelFunction::from_unboxed::<(Vec<Tensor>,), Vec<Tensor>>(neg_list_cpu),
    );
    let d = dev();
    let xs = vec![
        d.tensor_at(2, arr(&[1.0])),
        cpu(&[2.0]),
        d.tensor_at(2, arr(&[3.0, 4.0])),
    ];
    let rs = op
        .typed::<(Vec<Tensor>,), Vec<Tensor>>()
        .unwrap()
        .call((xs.clone(),))
        .unwrap();
    assert_eq!(rs.len(), 3);
    assert!(rs.iter().all(|r| r.device() == d.device(2)), "{rs:?}");
    let got: Vec<Vec<f64>> = rs.iter().map(values).collect();
    assert_eq!(got, vec![vec![-1.0], vec![-2.0], vec![-3.0, -4.0]]);
    assert_eq!(values(&xs[0]), vec![1.0]);
    assert_eq!(xs[1].device(), Device::CPU);
}

#[test]
fn a_mutable_tensor_list_is_written_element_by_element() {
    let d = own_dev("FbMutList");
    let (_, mut lib) = def_lib("fb");
    let op = lib.define("fill_(Tensor(a!)[] xs, float v) -> ()").unwrap();
    impl_cpu(
        &mut lib,
        "fill_",
        KernelFunction::from_unboxed::<(Vec<Tensor>, f64), ()>(fill_list_cpu),
    );
    let xs = vec![
        d.tensor(&[1.0, 2.0]),
        cpu(&[3.0]),
        d.tensor(&[4.0, 5.0, 6.0]),
    ];
    let ptrs = (payload_ptr(&xs[0]), payload_ptr(&xs[2]));
    op.typed::<(Vec<Tensor>, f64), ()>()
        .unwrap()
        .call((xs.clone(), 7.0))
        .unwrap();
    assert_eq!(values(&xs[0]), vec![7.0, 7.0]);
    assert_eq!(
        values(&xs[1]),
        vec![7.0],
        "the CPU element is written back with the others"
    );
    assert_eq!(values(&xs[2]), vec![7.0, 7.0, 7.0]);
    assert_eq!((payload_ptr(&xs[0]), payload_ptr(&xs[2])), ptrs);
    assert_eq!(xs[1].device(), Device::CPU);
    // Two moves for the kernel; the backups for an all-or-nothing write-back are kept from
    // them, without a second transfer.
    assert_eq!(d.hooks.to_cpu_for_write(), 2);
    assert_eq!(d.count(Hook::CopyFromCpu), 2);

    let mut stack = vec![IValue::TensorList(xs.clone()), IValue::Double(0.5)];
    op.call_boxed(&mut stack).unwrap();
    assert!(stack.is_empty(), "() returns nothing");
    assert_eq!(values(&xs[2]), vec![0.5, 0.5, 0.5]);
}

#[test]
fn an_optional_tensor_list_keeps_its_nones() {
    let (_, mut lib) = def_lib("fb");
    let op = lib.define("keep(Tensor?[] xs) -> Tensor?[]").unwrap();
    let seen: Arc<Mutex<Vec<Option<Device>>>> = Arc::default();
    let s = seen.clone();
    impl_cpu(
        &mut lib,
        "keep",
        KernelFunction::from_boxed(move |_op, _keys, stack| {
            let IValue::OptionalTensorList(xs) = &stack[0] else {
                return Err(kernel_error("expected Tensor?[]"));
            };
            *s.lock().unwrap() = xs.iter().map(|x| x.as_ref().map(Tensor::device)).collect();
            let out: Vec<Option<Tensor>> = xs
                .iter()
                .map(|x| {
                    x.as_ref()
                        .map(|t| Tensor::from_array(-f64_array(t).unwrap()))
                })
                .collect();
            *stack = vec![IValue::OptionalTensorList(out)];
            Ok(())
        }),
    );
    let d = dev();
    let mut stack = vec![IValue::OptionalTensorList(vec![
        None,
        Some(d.tensor(&[1.0])),
        None,
        Some(cpu(&[2.0])),
    ])];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        vec![None, Some(Device::CPU), None, Some(Device::CPU)]
    );
    let IValue::OptionalTensorList(out) = &stack[0] else {
        panic!("expected Tensor?[], got {:?}", stack[0]);
    };
    assert_eq!(out.len(), 4);
    assert!(out[0].is_none() && out[2].is_none());
    assert_eq!(out[1].as_ref().unwrap().device(), d.device(0));
    assert_eq!(values(out[1].as_ref().unwrap()), vec![-1.0]);
    assert_eq!(out[3].as_ref().unwrap().device(), d.device(0));
}

#[test]
fn an_operator_with_tensors_only_in_lists_returns_to_the_first_listed_device() {
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define("sum2(Tensor[] a, Tensor[] b) -> Tensor")
        .unwrap();
    impl_cpu(
        &mut lib,
        "sum2",
        KernelFunction::from_unboxed::<(Vec<Tensor>, Vec<Tensor>), Tensor>(|k, (a, b)| {
            let x = sum_list_cpu(k, (a,))?;
            let y = sum_list_cpu(k, (b,))?;
            add_cpu(k, (x, y))
        }),
    );
    let d = dev();
    let r = op
        .typed::<(Vec<Tensor>, Vec<Tensor>), Tensor>()
        .unwrap()
        .call((vec![], vec![cpu(&[1.0]), d.tensor_at(4, arr(&[2.0, 3.0]))]))
        .unwrap();
    assert_eq!(r.device(), d.device(4));
    assert_eq!(values(&r), vec![6.0]);
}

#[test]
fn empty_lists_pass_through() {
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define("with_list(Tensor x, Tensor[] ys) -> Tensor[]")
        .unwrap();
    impl_cpu(
        &mut lib,
        "with_list",
        KernelFunction::from_unboxed::<(Tensor, Vec<Tensor>), Vec<Tensor>>(|_, (x, ys)| {
            if x.key() != DispatchKey::CPU {
                return Err(kernel_error("x not on the CPU"));
            }
            Ok(ys)
        }),
    );
    let rs = op
        .typed::<(Tensor, Vec<Tensor>), Vec<Tensor>>()
        .unwrap()
        .call((dev().tensor(&[1.0]), vec![]))
        .unwrap();
    assert!(rs.is_empty());
    assert_eq!(fallbacks(&op), (1, 0));

    // Only empty lists: no tensor, so the call is a CPU call (no fallback).
    let only = lib.define("count(Tensor[] xs) -> int").unwrap();
    impl_cpu(
        &mut lib,
        "count",
        KernelFunction::from_unboxed::<(Vec<Tensor>,), i64>(|_, (xs,)| Ok(xs.len() as i64)),
    );
    assert_eq!(
        only.typed::<(Vec<Tensor>,), i64>()
            .unwrap()
            .call((vec![],))
            .unwrap(),
        0
    );
    assert_eq!(fallbacks(&only), (0, 0));
}

// --------------------------------------------------------------------------------- devices

#[test]
fn a_device_argument_is_rewritten_to_cpu_and_decides_the_results_device() {
    let d = own_dev("FbDevArg");
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define("full(int n, float v, *, Device device) -> Tensor")
        .unwrap();
    impl_cpu(
        &mut lib,
        "full",
        KernelFunction::from_unboxed::<(i64, f64, Device), Tensor>(full_cpu),
    );
    let typed = op.typed::<(i64, f64, Device), Tensor>().unwrap();
    let r = typed.call((2, 1.5, d.device(1))).unwrap();
    assert_eq!(r.device(), d.device(1));
    assert_eq!(values(&r), vec![1.5, 1.5]);
    assert_eq!(d.count(Hook::ToCpu), 0);
    assert_eq!(d.count(Hook::FromCpu), 1);
    assert_eq!(fallbacks(&op), (1, 0));

    // A CPU device is a plain CPU call.
    let r = typed.call((1, 2.0, Device::CPU)).unwrap();
    assert_eq!(r.device(), Device::CPU);
    assert_eq!(fallbacks(&op), (1, 0));
}

#[test]
fn cpu_tensors_mixed_with_device_tensors_stay_as_they_are() {
    let d = own_dev("FbMixed");
    let (_, mut lib) = def_lib("fb");
    let op = lib.define("add(Tensor a, Tensor b) -> Tensor").unwrap();
    let seen: Arc<Mutex<Vec<Tensor>>> = Arc::default();
    let s = seen.clone();
    impl_cpu(
        &mut lib,
        "add",
        KernelFunction::from_boxed(move |_op, _keys, stack| {
            s.lock()
                .unwrap()
                .extend(stack.iter().map(|v| tensor_of(v).clone()));
            let r = add_cpu(
                DispatchKeySet::EMPTY,
                (tensor_of(&stack[0]).clone(), tensor_of(&stack[1]).clone()),
            )?;
            *stack = vec![IValue::Tensor(r)];
            Ok(())
        }),
    );
    let c = cpu(&[1.0, 2.0]);
    let x = d.tensor(&[10.0, 20.0]);
    let r = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((c.clone(), x.clone()))
        .unwrap();
    assert_eq!(r.device(), d.device(0));
    assert_eq!(values(&r), vec![11.0, 22.0]);
    let seen = seen.lock().unwrap();
    assert!(
        Tensor::same(&seen[0], &c),
        "the CPU tensor itself reaches the kernel"
    );
    assert!(!Tensor::same(&seen[1], &x));
    assert_eq!(seen[1].device(), Device::CPU);
    assert_eq!(c.device(), Device::CPU);
    assert_eq!(values(&c), vec![1.0, 2.0]);
    assert_eq!(d.count(Hook::ToCpu), 1, "only the device tensor moves");
}

#[test]
fn a_mutable_cpu_argument_is_written_by_the_kernel_and_returned_as_it_is() {
    let d = own_dev("FbMixedInplace");
    let (_, mut lib) = def_lib("fb");
    let op = define_add_(&mut lib);
    let c = cpu(&[1.0, 2.0]);
    let r = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((c.clone(), d.tensor(&[10.0, 10.0])))
        .unwrap();
    assert!(Tensor::same(&r, &c));
    assert_eq!(r.device(), Device::CPU);
    assert_eq!(values(&c), vec![11.0, 12.0]);
    assert_eq!(d.count(Hook::CopyFromCpu), 0);
    assert_eq!(d.hooks.to_cpu_for_write(), 0);
    assert_eq!(fallbacks(&op), (1, 0));
}

#[test]
fn two_different_devices_of_one_backend_are_an_error_naming_both() {
    let (ns, mut lib) = def_lib("fb");
    let op = define_add(&mut lib);
    let d = dev();
    let err = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((d.tensor_at(0, arr(&[1.0])), d.tensor_at(1, arr(&[1.0]))))
        .unwrap_err();
    assert!(matches!(err, Error::Fallback(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("{ns}::add")), "{text}");
    assert!(text.contains(&d.device(0).to_string()), "{text}");
    assert!(text.contains(&d.device(1).to_string()), "{text}");
}

#[test]
fn tensors_of_two_backends_are_an_error_naming_both() {
    let (_, mut lib) = def_lib("fb");
    let op = define_add(&mut lib);
    let d = dev();
    let typed = op.typed::<(Tensor, Tensor), Tensor>().unwrap();
    let err = typed
        .call((d.tensor_at(2, arr(&[1.0])), native::tensor(arr(&[1.0]))))
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Fallback(_)), "{err:?}");
    assert!(text.contains(&d.device(2).to_string()), "{text}");
    assert!(text.contains("Native:0"), "{text}");
}

#[test]
fn tensors_of_two_backends_are_an_error_naming_both_whatever_their_order() {
    let (_, mut lib) = def_lib("fb");
    let op = define_add(&mut lib);
    let d = dev();
    let err = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((native::tensor(arr(&[1.0])), d.tensor_at(2, arr(&[1.0]))))
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("Native:0"), "{text}");
    assert!(text.contains(&d.device(2).to_string()), "{text}");
}

// ----------------------------------------------------------------------------------- views

#[test]
fn a_view_operator_is_refused_naming_the_operator() {
    let d = own_dev("FbView");
    let (ns, mut lib) = def_lib("fb");
    let op = lib.define("alias(Tensor(a) self) -> Tensor(a)").unwrap();
    impl_cpu(
        &mut lib,
        "alias",
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| Ok(x)),
    );
    let x = d.tensor(&[1.0]);
    let err = op
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((x.clone(),))
        .unwrap_err();
    assert!(matches!(err, Error::Fallback(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("'{ns}::alias'")), "{text}");
    assert!(text.contains("view"), "{text}");
    assert_eq!(d.count(Hook::ToCpu), 0, "refused before moving anything");
    assert_eq!(values(&x), vec![1.0]);
}

#[test]
fn a_copying_fallback_runs_a_view_operator_on_a_copy() {
    let d = Dev::with_fallback(
        "FbViewCopy",
        CpuFallback {
            views: ViewPolicy::Copy,
        }
        .kernel(),
    );
    dev();
    let (_, mut lib) = def_lib("fb");
    let op = lib.define("alias(Tensor(a) self) -> Tensor(a)").unwrap();
    impl_cpu(
        &mut lib,
        "alias",
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| Ok(x)),
    );
    let x = d.tensor(&[1.0, 2.0]);
    let r = op
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((x.clone(),))
        .unwrap();
    assert!(!Tensor::same(&r, &x), "a copy, not the input");
    assert_eq!(r.device(), d.device(0));
    assert_eq!(values(&r), vec![1.0, 2.0]);
    assert_ne!(payload_ptr(&r), payload_ptr(&x));
    assert_eq!(fallbacks(&op), (1, 0));
}

// ---------------------------------------------------------------------------------- dtypes

#[test]
fn every_dtype_survives_the_round_trip() {
    let (_, mut lib) = def_lib("fb");
    let op = lib.define("ident(Tensor x) -> Tensor").unwrap();
    impl_cpu(
        &mut lib,
        "ident",
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(ident_cpu),
    );
    let typed = op.typed::<(Tensor,), Tensor>().unwrap();
    let arrays: Vec<HostArray> = vec![
        ndarray::arr1(&[1.5f32, -2.0]).into_dyn().into(),
        ndarray::arr1(&[1.5f64, -2.0]).into_dyn().into(),
        ndarray::arr1(&[7i32, -8]).into_dyn().into(),
        ndarray::arr1(&[i64::MAX, i64::MIN]).into_dyn().into(),
        ndarray::arr1(&[true, false, true]).into_dyn().into(),
        ArrayD::<f32>::zeros(vec![2, 0, 3]).into(),
    ];
    let dtypes = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::F32,
    ];
    for (a, dtype) in arrays.into_iter().zip(dtypes) {
        let x = dev().tensor_at(0, a.clone());
        let r = typed.call((x,)).unwrap();
        assert_eq!(r.device(), dev().device(0));
        let back = r.to_host().unwrap();
        assert_eq!(back.dtype(), dtype);
        assert_eq!(*back, a);
    }
}

// ------------------------------------------------------------------------ failure atomicity

/// `acc_(Tensor(a!) acc, Tensor x) -> Tensor`: adds x into acc and returns a new `acc * 10`.
fn define_acc(lib: &mut Library) -> boxfall::OperatorHandle {
    let op = lib
        .define("acc_(Tensor(a!) acc, Tensor x) -> Tensor")
        .unwrap();
    impl_cpu(
        lib,
        "acc_",
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(|_, (acc, x)| {
            let sum = f64_array(&acc)? + f64_array(&x)?;
            write(&acc, sum.clone());
            Ok(Tensor::from_array(sum * 10.0))
        }),
    );
    op
}

fn assert_failed_in_step(err: &Error, op: &str, step: &str) {
    let text = err.to_string();
    assert!(text.contains(op), "names the operator: {text}");
    assert!(text.contains(step), "names the step {step}: {text}");
}

#[test]
fn a_failing_cpu_kernel_changes_no_argument_and_is_counted() {
    let d = own_dev("FbKernelFail");
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define("bad_(Tensor(a!) self, Tensor other) -> Tensor(a!)")
        .unwrap();
    impl_cpu(
        &mut lib,
        "bad_",
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(|k, (a, b)| {
            add_inplace_cpu(k, (a, b))?; // writes into self first...
            Err(kernel_error("the kernel gave up")) // ...then fails
        }),
    );
    let (x, y) = (d.tensor(&[1.0, 2.0]), d.tensor(&[5.0, 5.0]));
    let px = payload_ptr(&x);
    let err = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((x.clone(), y.clone()))
        .unwrap_err();
    assert!(err.to_string().contains("the kernel gave up"), "{err}");
    assert_eq!(values(&x), vec![1.0, 2.0]);
    assert_eq!(values(&y), vec![5.0, 5.0]);
    assert_eq!(payload_ptr(&x), px);
    assert_eq!(d.count(Hook::CopyFromCpu), 0);
    assert_eq!(fallbacks(&op), (1, 1));

    // The same through a boxed call: after the error the stack's contents are unspecified (the
    // CPU copies took the arguments' places), but the tensors the caller holds are unchanged.
    let mut stack = vec![IValue::Tensor(x.clone()), IValue::Tensor(y.clone())];
    assert!(op.call_boxed(&mut stack).is_err());
    assert_eq!(values(&x), vec![1.0, 2.0]);
    assert_eq!(values(&y), vec![5.0, 5.0]);
    assert_eq!(payload_ptr(&x), px);
    assert_eq!(d.count(Hook::CopyFromCpu), 0);
    assert_eq!(fallbacks(&op), (2, 2));
}

#[test]
fn a_failing_cpu_kernel_error_names_the_operator_and_the_step() {
    let (ns, mut lib) = def_lib("fb");
    let op = lib.define("bad(Tensor x) -> Tensor").unwrap();
    impl_cpu(
        &mut lib,
        "bad",
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, _| Err(kernel_error("boom"))),
    );
    let err = op
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((dev().tensor(&[1.0]),))
        .unwrap_err();
    assert!(err.to_string().contains("boom"), "{err}");
    assert_failed_in_step(&err, &format!("{ns}::bad"), "CPU kernel");
}

#[test]
fn a_failing_to_cpu_changes_no_argument_and_names_the_step() {
    let d = own_dev("FbToCpuFail");
    let (ns, mut lib) = def_lib("fb");
    let op = define_acc(&mut lib);
    let (acc, x) = (d.tensor(&[1.0]), d.tensor(&[2.0]));
    d.hooks.fail(Hook::ToCpu, 1); // the second transfer fails
    let err = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((acc.clone(), x.clone()))
        .unwrap_err();
    assert!(matches!(err, Error::Fallback(_)), "{err:?}");
    assert_failed_in_step(&err, &format!("'{ns}::acc_'"), "to_cpu");
    assert!(err.to_string().contains("injected to_cpu failure"), "{err}");
    assert_eq!((values(&acc), values(&x)), (vec![1.0], vec![2.0]));
    assert_eq!(d.count(Hook::CopyFromCpu), 0);
    assert_eq!(fallbacks(&op), (1, 1));
    // The hook works again: the same call now succeeds.
    let r = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((acc.clone(), x))
        .unwrap();
    assert_eq!(values(&acc), vec![3.0]);
    assert_eq!(values(&r), vec![30.0]);
    assert_eq!(fallbacks(&op), (2, 1));
}

#[test]
fn a_failing_to_cpu_inside_a_mutable_list_changes_no_element() {
    let d = own_dev("FbListToCpuFail");
    let (ns, mut lib) = def_lib("fb");
    let op = lib.define("fill_(Tensor(a!)[] xs, float v) -> ()").unwrap();
    impl_cpu(
        &mut lib,
        "fill_",
        KernelFunction::from_unboxed::<(Vec<Tensor>, f64), ()>(fill_list_cpu),
    );
    let xs = vec![d.tensor(&[1.0]), cpu(&[2.0]), d.tensor(&[3.0, 4.0])];
    d.hooks.fail(Hook::ToCpu, 1); // the second device element fails to move
    let mut stack = vec![IValue::TensorList(xs.clone()), IValue::Double(9.0)];
    let err = op.call_boxed(&mut stack).unwrap_err();
    assert_failed_in_step(&err, &format!("'{ns}::fill_'"), "to_cpu");
    assert_eq!(
        (values(&xs[0]), values(&xs[1]), values(&xs[2])),
        (vec![1.0], vec![2.0], vec![3.0, 4.0]),
        "the kernel never ran, so no element is written"
    );
    assert_eq!(d.count(Hook::CopyFromCpu), 0);
    assert_eq!(stack.len(), 2, "the stack is left as it was");
    assert_eq!(fallbacks(&op), (1, 1));
}

#[test]
fn a_failing_from_cpu_changes_no_argument_and_names_the_step() {
    let d = own_dev("FbFromCpuFail");
    let (ns, mut lib) = def_lib("fb");
    let op = define_acc(&mut lib);
    let (acc, x) = (d.tensor(&[1.0]), d.tensor(&[2.0]));
    let pacc = payload_ptr(&acc);
    d.hooks.fail(Hook::FromCpu, 0);
    let err = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((acc.clone(), x.clone()))
        .unwrap_err();
    assert_failed_in_step(&err, &format!("'{ns}::acc_'"), "from_cpu");
    // The result moves before any argument is written: acc is untouched.
    assert_eq!(values(&acc), vec![1.0]);
    assert_eq!(payload_ptr(&acc), pacc);
    assert_eq!(values(&x), vec![2.0]);
    assert_eq!(d.count(Hook::CopyFromCpu), 0);
    assert_eq!(fallbacks(&op), (1, 1));
}

#[test]
fn a_failing_copy_from_cpu_changes_no_argument_and_names_the_step() {
    let d = own_dev("FbCopyFail");
    let (ns, mut lib) = def_lib("fb");
    let op = define_acc(&mut lib);
    let (acc, x) = (d.tensor(&[1.0]), d.tensor(&[2.0]));
    d.hooks.fail(Hook::CopyFromCpu, 0);
    let err = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((acc.clone(), x.clone()))
        .unwrap_err();
    assert_failed_in_step(&err, &format!("'{ns}::acc_'"), "copy_from_cpu");
    assert_eq!((values(&acc), values(&x)), (vec![1.0], vec![2.0]));
    assert_eq!(fallbacks(&op), (1, 1));
    let s = Dispatcher::op_stats(op.name()).unwrap();
    assert_eq!(s.failures, 1);
}

#[test]
fn a_failing_copy_from_cpu_of_the_second_output_leaves_the_first_unchanged() {
    let d = own_dev("FbCopyFail2");
    let (_lib, op) = define_lohi_out();
    let (x, lo, hi) = (
        d.tensor(&[1.0, 2.0]),
        d.tensor(&[0.0, 0.0]),
        d.tensor(&[0.0]),
    );
    d.hooks.fail(Hook::CopyFromCpu, 1);
    let result = op
        .typed::<(Tensor, Tensor, Tensor), Multi<(Tensor, Tensor)>>()
        .unwrap()
        .call((x, lo.clone(), hi.clone()));
    assert!(result.is_err());
    assert_eq!(values(&hi), vec![0.0]);
    assert_eq!(
        values(&lo),
        vec![0.0, 0.0],
        "the first output was written anyway"
    );
}

// ----------------------------------------------------------------------------------- bytes

#[test]
fn byte_counts_are_exact() {
    let (_, mut lib) = def_lib("fb");
    let add = define_add(&mut lib);
    let d = dev();
    add.typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((d.tensor(&[1.0; 4]), d.tensor(&[2.0; 4])))
        .unwrap();
    let s = Dispatcher::op_stats(add.name()).unwrap();
    assert_eq!((s.bytes_to_cpu, s.bytes_from_cpu), (64, 32));

    // In place: both inputs go to the CPU, self comes back.
    let inplace = define_add_(&mut lib);
    inplace
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((d.tensor(&[1.0; 3]), d.tensor(&[2.0; 3])))
        .unwrap();
    let s = Dispatcher::op_stats(inplace.name()).unwrap();
    assert_eq!((s.bytes_to_cpu, s.bytes_from_cpu), (48, 24));

    // Other dtypes, and a CPU argument that does not move.
    let ident = lib.define("ident(Tensor x) -> Tensor").unwrap();
    impl_cpu(
        &mut lib,
        "ident",
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(ident_cpu),
    );
    ident
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((d.tensor_at(0, ndarray::arr1(&[1i32, 2, 3, 4, 5]).into_dyn()),))
        .unwrap();
    let s = Dispatcher::op_stats(ident.name()).unwrap();
    assert_eq!((s.bytes_to_cpu, s.bytes_from_cpu), (20, 20));
    add.typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((cpu(&[1.0; 2]), d.tensor(&[2.0; 2])))
        .unwrap();
    let s = Dispatcher::op_stats(add.name()).unwrap();
    assert_eq!((s.bytes_to_cpu, s.bytes_from_cpu), (64 + 16, 32 + 16));
    assert_eq!(s.fallbacks, 2);
}

// ---------------------------------------------------------------------------------- Native

#[test]
fn native_lends_read_only_arguments_and_copies_mutable_ones() {
    native::install_fallback().unwrap();
    dev();
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define("peek(Tensor x, Tensor(a!) y) -> Tensor(a!)")
        .unwrap();
    let originals: Arc<Mutex<Vec<Arc<HostArray>>>> = Arc::default();
    let shared: Arc<Mutex<Vec<bool>>> = Arc::default();
    let (o, s) = (originals.clone(), shared.clone());
    impl_cpu(
        &mut lib,
        "peek",
        KernelFunction::from_boxed(move |_op, _keys, stack| {
            let orig = o.lock().unwrap();
            let mut sh = s.lock().unwrap();
            for (i, v) in stack.iter().enumerate() {
                let t = tensor_of(v);
                assert_eq!(t.device(), Device::CPU);
                sh.push(Arc::ptr_eq(&t.host_array().unwrap(), &orig[i]));
            }
            let y = tensor_of(&stack[1]).clone();
            write(&y, f64_array(tensor_of(&stack[0]))? * 2.0);
            *stack = vec![IValue::Tensor(y)];
            Ok(())
        }),
    );
    let x = native::tensor(arr(&[1.0, 2.0]));
    let y = native::tensor(arr(&[0.0, 0.0]));
    *originals.lock().unwrap() = vec![x.host_array().unwrap(), y.host_array().unwrap()];
    let r = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((x.clone(), y.clone()))
        .unwrap();
    assert_eq!(
        *shared.lock().unwrap(),
        vec![true, false],
        "x is lent (same host array), y is a copy"
    );
    assert!(Tensor::same(&r, &y));
    assert_eq!(values(&y), vec![2.0, 4.0]);
    assert_eq!(values(&x), vec![1.0, 2.0]);
    assert!(Arc::ptr_eq(
        &x.host_array().unwrap(),
        &originals.lock().unwrap()[0]
    ));
    assert_eq!(y.device(), native::DEVICE);
}

#[test]
fn native_lends_one_handle_and_a_kernel_writing_its_input_does_not_reach_the_tensor() {
    native::install_fallback().unwrap();
    dev();
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define("scribble(Tensor x, Tensor y) -> Tensor")
        .unwrap();
    let seen: Arc<Mutex<Vec<Tensor>>> = Arc::default();
    let s = seen.clone();
    impl_cpu(
        &mut lib,
        "scribble",
        KernelFunction::from_boxed(move |_op, _keys, stack| {
            let (x, y) = (tensor_of(&stack[0]).clone(), tensor_of(&stack[1]).clone());
            s.lock().unwrap().extend([x.clone(), y.clone()]);
            let sum = f64_array(&x)? + f64_array(&y)?;
            // Against its schema, the kernel writes its read-only input.
            write(&x, arr(&[-1.0, -1.0]));
            *stack = vec![IValue::Tensor(Tensor::from_array(sum))];
            Ok(())
        }),
    );
    let scribble = op.typed::<(Tensor, Tensor), Tensor>().unwrap();
    let x = native::tensor(arr(&[1.0, 2.0]));
    let r = scribble.call((x.clone(), x.clone())).unwrap();
    assert_eq!(values(&r), vec![2.0, 4.0]);
    assert_eq!(
        values(&x),
        vec![1.0, 2.0],
        "the write went to the loan only"
    );
    let r = scribble.call((x.clone(), x.clone())).unwrap();
    assert_eq!(
        values(&r),
        vec![2.0, 4.0],
        "a written loan is put right before it is lent again"
    );
    let seen = seen.lock().unwrap();
    assert!(
        seen[0].same(&seen[1]),
        "one tensor passed twice is lent once"
    );
    assert!(
        seen[2].same(&seen[0]),
        "one loan for the tensor's whole life"
    );
    assert_eq!(values(&x), vec![1.0, 2.0]);
    drop(seen);
    // A write to the tensor reaches its loan.
    write(&x, arr(&[5.0, 6.0]));
    let r = scribble.call((x.clone(), x.clone())).unwrap();
    assert_eq!(values(&r), vec![10.0, 12.0]);
}

#[test]
fn native_keeps_a_mutable_argument_when_the_kernel_fails() {
    native::install_fallback().unwrap();
    dev();
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define("bad_(Tensor(a!) self, Tensor other) -> Tensor(a!)")
        .unwrap();
    impl_cpu(
        &mut lib,
        "bad_",
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(|k, (a, b)| {
            add_inplace_cpu(k, (a, b))?;
            Err(kernel_error("no"))
        }),
    );
    let x = native::tensor(arr(&[1.0]));
    let before = x.host_array().unwrap();
    assert!(op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((x.clone(), native::tensor(arr(&[1.0]))))
        .is_err());
    assert!(Arc::ptr_eq(&x.host_array().unwrap(), &before));
    assert_eq!(values(&x), vec![1.0]);
    assert_eq!(fallbacks(&op), (1, 1));
}

// ------------------------------------------------------------------ explicit fallback calls

#[test]
fn call_fallback_runs_the_cpu_fallback_for_a_backend_without_a_registered_fallback() {
    dev();
    let d = Dev::new("FbExplicit");
    let (_, mut lib) = def_lib("fb");
    let op = define_add(&mut lib);
    let (x, y) = (d.tensor(&[1.0]), d.tensor(&[2.0]));
    let err = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((x.clone(), y.clone()))
        .unwrap_err();
    assert!(matches!(err, Error::NoKernel { .. }), "{err:?}");
    let mut stack = vec![IValue::Tensor(x), IValue::Tensor(y)];
    call_fallback(&cpu_fallback(), &op, d.key.set(), &mut stack).unwrap();
    assert_eq!(tensor_of(&stack[0]).device(), d.device(0));
    assert_eq!(values(tensor_of(&stack[0])), vec![3.0]);
    assert_eq!(fallbacks(&op), (1, 0));
}

#[test]
fn cpu_fallback_as_an_operators_own_kernel() {
    dev();
    let d = Dev::new("FbOwnKernel");
    let (_, mut lib) = def_lib("fb");
    let op = define_add(&mut lib);
    lib.impl_kernel("add", d.key, cpu_fallback(), false)
        .unwrap();
    assert_eq!(source_of(&op, d.key), "kernel");
    let r = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((d.tensor(&[1.0]), d.tensor(&[2.0])))
        .unwrap();
    assert_eq!(r.device(), d.device(0));
    assert_eq!(values(&r), vec![3.0]);
    assert_eq!(fallbacks(&op), (1, 0));
}

#[test]
fn an_operator_without_a_cpu_kernel_fails_through_the_fallback() {
    let (ns, mut lib) = def_lib("fb");
    let op = lib.define("nocpu(Tensor x) -> Tensor").unwrap();
    let err = op
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((dev().tensor(&[1.0]),))
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&format!("{ns}::nocpu")), "{text}");
    assert!(text.contains("CPU"), "{text}");
    assert_eq!(fallbacks(&op), (1, 1));
}

/// `lohi.out` (an out= operator with two outputs) with its CPU kernel.
fn define_lohi_out() -> (Library, OperatorHandle) {
    let (_, mut lib) = def_lib("fb");
    let op = lib
        .define(
            "lohi.out(Tensor x, *, Tensor(a!) lo, Tensor(b!) hi) -> (Tensor(a!) lo, Tensor(b!) hi)",
        )
        .unwrap();
    impl_cpu(
        &mut lib,
        "lohi.out",
        KernelFunction::from_unboxed::<(Tensor, Tensor, Tensor), Multi<(Tensor, Tensor)>>(
            lohi_out_cpu,
        ),
    );
    (lib, op)
}

#[test]
fn a_stack_that_does_not_fit_the_schema_is_an_error_and_is_left_as_it_was() {
    let (_, mut lib) = def_lib("fb");
    let op = lib.define("pair(Tensor a, Tensor b) -> Tensor").unwrap();
    let x = dev().tensor(&[1.0]);
    let mut stack = vec![IValue::Tensor(x.clone())];
    let err = call_fallback(&cpu_fallback(), &op, dev().key.set(), &mut stack).unwrap_err();
    assert!(
        err.to_string()
            .contains("the stack holds 1 values for 2 arguments"),
        "{err}"
    );
    assert_eq!(stack.len(), 1);
    assert!(Tensor::same(tensor_of(&stack[0]), &x));
}

/// Transfers like a host backend, but `from_cpu` panics: a backend's bug, not an error.
struct PanicsFromCpu;

impl boxfall::backend::Backend for PanicsFromCpu {
    fn to_cpu(&self, t: &Tensor, _for_write: bool) -> Result<Tensor> {
        Ok(Tensor::host(Device::CPU, (*t.to_host()?).clone()))
    }
    fn from_cpu(&self, _cpu: &Tensor, _device: Device) -> Result<Tensor> {
        panic!("from_cpu of a buggy backend")
    }
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        dst.set_data(src.data());
        Ok(())
    }
}

#[test]
fn a_backend_hook_that_panics_while_a_result_moves_drops_every_tensor_once() {
    // The fallback takes each result tensor out of its stack slot to give it to `from_cpu`
    // (`value_to_device`); a panic there must leave nothing owned twice.
    let key = boxfall::backend::register_backend("FbPanicsFromCpu", Arc::new(PanicsFromCpu))
        .expect("backend");
    let mut fb = fallback_lib();
    fb.fallback(key, cpu_fallback()).expect("fallback");
    let (_ns, mut lib) = def_lib("fb");
    let op = define_neg(&mut lib);
    let x = on_key(key, &[1.0, -2.0]);
    let mut stack = vec![IValue::Tensor(x.clone())];
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op.call_boxed(&mut stack)));
    assert!(outcome.is_err(), "the hook's panic reaches the caller");
    // The stack (whatever it holds) drops cleanly, and the argument is whole and unchanged.
    drop(stack);
    assert_eq!(values(&x), vec![1.0, -2.0]);
    assert_eq!(x.device().key, key);
}
