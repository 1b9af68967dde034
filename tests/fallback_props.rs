//! Properties of the CPU fallback over random mixes of Native and CPU tensors, in plain, list
//! and optional-list arguments: results equal the CPU kernel's on the same values and come back
//! on the device; the caller's tensors (Native and CPU ones) are unchanged by a functional
//! operator, written exactly when a mutating one succeeds, and untouched when it fails.

mod common;

use std::sync::OnceLock;

use boxfall::fallback::set_fallback_policy;
use boxfall::Dispatcher;
use boxfall::{
    native, Device, FallbackPolicy, IValue, KernelFunction, Library, OperatorHandle, Tensor,
};
use common::*;
use proptest::prelude::*;

/// One tensor argument: its values, and whether it lives on Native (else on the CPU).
type Spec = (bool, Vec<f64>);

fn make(&(on_native, ref v): &Spec) -> Tensor {
    if on_native {
        native::tensor(arr(v))
    } else {
        cpu(v)
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    (any::<bool>(), prop::collection::vec(-8i8..8, 1..4))
        .prop_map(|(n, v)| (n, v.into_iter().map(f64::from).collect()))
}

struct Ops {
    mix: OperatorHandle,
    scale: OperatorHandle,
    _lib: Library,
}

/// `mix(a, bs, cs, k) -> [a + k, b * 2 for b in bs, c - 1 for each c in cs that is not None]`
/// and `scale_(xs, k, fail)`: every x *= k, then an error if `fail`; both boxed CPU kernels.
fn ops() -> &'static Ops {
    static OPS: OnceLock<Ops> = OnceLock::new();
    OPS.get_or_init(|| {
        set_fallback_policy(FallbackPolicy::Allow);
        native::install_fallback().expect("Native's fallback");
        let (_, mut lib) = def_lib("fbprop");
        let mix = lib
            .define("mix(Tensor a, Tensor[] bs, Tensor?[] cs, int k) -> Tensor[]")
            .unwrap();
        let scale = lib
            .define("scale_(Tensor(a!)[] xs, int k, bool fail) -> ()")
            .unwrap();
        let cpu_kernel = |f: fn(&mut boxfall::Stack) -> boxfall::Result<()>| {
            KernelFunction::from_boxed(move |_, _, stack| f(stack))
        };
        lib.impl_kernel(
            "mix",
            boxfall::DispatchKey::CPU,
            cpu_kernel(|stack| {
                let on_cpu = |t: &Tensor| {
                    if t.device() == Device::CPU {
                        f64_array(t)
                    } else {
                        Err(kernel_error(format!("the kernel got {}", t.device())))
                    }
                };
                let (Some(IValue::Int(k)), Some(IValue::OptionalTensorList(cs))) =
                    (stack.pop(), stack.pop())
                else {
                    return Err(kernel_error("mix: k and cs"));
                };
                let (Some(IValue::TensorList(bs)), Some(IValue::Tensor(a))) =
                    (stack.pop(), stack.pop())
                else {
                    return Err(kernel_error("mix: a and bs"));
                };
                let mut out = vec![Tensor::from_array(on_cpu(&a)? + k as f64)];
                for b in &bs {
                    out.push(Tensor::from_array(on_cpu(b)? * 2.0));
                }
                for c in cs.iter().flatten() {
                    out.push(Tensor::from_array(on_cpu(c)? - 1.0));
                }
                stack.push(IValue::TensorList(out));
                Ok(())
            }),
            false,
        )
        .unwrap();
        lib.impl_kernel(
            "scale_",
            boxfall::DispatchKey::CPU,
            cpu_kernel(|stack| {
                let (Some(IValue::Bool(fail)), Some(IValue::Int(k)), Some(IValue::TensorList(xs))) =
                    (stack.pop(), stack.pop(), stack.pop())
                else {
                    return Err(kernel_error("scale_: arguments"));
                };
                for x in &xs {
                    write(x, f64_array(x)? * k as f64);
                }
                if fail {
                    return Err(kernel_error("scale_ gave up after writing"));
                }
                Ok(())
            }),
            false,
        )
        .unwrap();
        Ops {
            mix,
            scale,
            _lib: lib,
        }
    })
}

fn fallbacks(op: &OperatorHandle) -> (u64, u64) {
    Dispatcher::op_stats(op.name()).map_or((0, 0), |s| (s.fallbacks, s.failures))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_functional_operator_gives_the_cpu_kernels_values_on_the_device_and_changes_no_input(
        a in spec(),
        bs in prop::collection::vec(spec(), 0..4),
        cs in prop::collection::vec(prop::option::of(spec()), 0..4),
        k in -3i64..4,
    ) {
        let op = &ops().mix;
        let on_native = a.0 || bs.iter().any(|b| b.0) || cs.iter().flatten().any(|c| c.0);
        let ta = make(&a);
        let tbs: Vec<Tensor> = bs.iter().map(make).collect();
        let tcs: Vec<Option<Tensor>> = cs.iter().map(|c| c.as_ref().map(make)).collect();
        let before = fallbacks(op);
        let mut stack = vec![
            IValue::Tensor(ta.clone()),
            IValue::TensorList(tbs.clone()),
            IValue::OptionalTensorList(tcs.clone()),
            IValue::Int(k),
        ];
        op.call_boxed(&mut stack).unwrap();

        let mut expected: Vec<Vec<f64>> = vec![a.1.iter().map(|x| x + k as f64).collect()];
        expected.extend(bs.iter().map(|b| b.1.iter().map(|x| x * 2.0).collect()));
        expected.extend(cs.iter().flatten().map(|c| c.1.iter().map(|x| x - 1.0).collect()));
        prop_assert_eq!(stack.len(), 1);
        let IValue::TensorList(out) = &stack[0] else {
            return Err(TestCaseError::fail(format!("not a list: {:?}", stack[0])));
        };
        prop_assert_eq!(out.iter().map(values).collect::<Vec<_>>(), expected);
        let device = if on_native { native::DEVICE } else { Device::CPU };
        prop_assert!(out.iter().all(|t| t.device() == device));
        // The caller's tensors: same values, same devices, not replaced.
        prop_assert_eq!(values(&ta), a.1.clone());
        prop_assert_eq!(ta.device() == native::DEVICE, a.0);
        for (t, b) in tbs.iter().zip(&bs) {
            prop_assert_eq!(values(t), b.1.clone());
        }
        for (t, c) in tcs.iter().zip(&cs) {
            prop_assert_eq!(t.as_ref().map(values), c.as_ref().map(|c| c.1.clone()));
        }
        let after = fallbacks(op);
        prop_assert_eq!(after.0 - before.0, u64::from(on_native));
        prop_assert_eq!(after.1, before.1);
    }

    #[test]
    fn a_mutating_operator_writes_every_element_exactly_when_its_kernel_succeeds(
        xs in prop::collection::vec(spec(), 1..5),
        k in -3i64..4,
        fail in any::<bool>(),
    ) {
        let op = &ops().scale;
        let on_native = xs.iter().any(|x| x.0);
        let txs: Vec<Tensor> = xs.iter().map(make).collect();
        let mut stack = vec![IValue::TensorList(txs.clone()), IValue::Int(k), IValue::Bool(fail)];
        let before = fallbacks(op);
        let result = op.call_boxed(&mut stack);
        prop_assert_eq!(result.is_err(), fail);
        for (t, x) in txs.iter().zip(&xs) {
            let scaled: Vec<f64> = x.1.iter().map(|v| v * k as f64).collect();
            prop_assert_eq!(t.device() == native::DEVICE, x.0);
            // Through the fallback (some element on Native), every element is written back
            // only when the kernel succeeds, CPU ones too; a plain CPU call's kernel writes its
            // own arguments, as it writes them.
            let expected = if fail && on_native { x.1.clone() } else { scaled };
            prop_assert_eq!(values(t), expected);
        }
        if on_native {
            let after = fallbacks(op);
            prop_assert_eq!((after.0 - before.0, after.1 - before.1), (1, u64::from(fail)));
        } else if !fail {
            prop_assert!(stack.is_empty());
        }
    }
}
