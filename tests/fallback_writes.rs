//! The write-back of a fallback that writes arguments: all or none (a `copy_from_cpu` that
//! writes part of its tensor and fails is rolled back, the failing tensor included; a CPU
//! argument is unchanged when the kernel fails), an in-place result must fit its argument, and
//! errors name the operator, the backend and the step.

mod common;

use std::any::Any;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use boxfall::backend::{register_backend, Backend};
use boxfall::fallback::set_fallback_policy;
use boxfall::tensor::Payload;
use boxfall::{
    native, Device, DispatchKey, Error, FallbackPolicy, ForeignError, IValue, KernelFunction,
    Library, Result, Tensor,
};
use common::*;

/// Device memory: host memory behind a lock, written in place element by element.
struct Buf(Mutex<Vec<f64>>);

impl Payload for Buf {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn buf_values(t: &Tensor) -> Vec<f64> {
    let p = t.payload().expect("a payload");
    let b = p.as_any().downcast_ref::<Buf>().expect("a Buf");
    let v = b.0.lock().unwrap().clone();
    v
}

/// A backend whose `copy_from_cpu` calls number `fail_from` and after (counted from 0) write
/// the first element and fail, `failures` of them (negative: all).
struct HalfWrites {
    calls: AtomicI64,
    fail_from: i64,
    failures: i64,
}

impl Backend for HalfWrites {
    fn to_cpu(&self, t: &Tensor, _for_write: bool) -> Result<Tensor> {
        Ok(Tensor::from_array(arr(&buf_values(t))))
    }
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        Ok(Tensor::foreign(
            device,
            Arc::new(Buf(Mutex::new(values(cpu)))),
        ))
    }
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        let src = values(src);
        let p = dst.payload().expect("a payload");
        let b = p.as_any().downcast_ref::<Buf>().expect("a Buf");
        let mut d = b.0.lock().unwrap();
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let fails =
            n >= self.fail_from && (self.failures < 0 || n < self.fail_from + self.failures);
        if fails {
            if let (Some(x), Some(s)) = (d.first_mut(), src.first()) {
                *x = *s;
            }
            return Err(Error::Foreign {
                message: "half written".into(),
                payload: ForeignError::new("half written"),
            });
        }
        *d = src;
        Ok(())
    }
}

struct Half {
    key: DispatchKey,
    _fb: Library,
}

fn half(prefix: &str, fail_from: i64, failures: i64) -> Half {
    set_fallback_policy(FallbackPolicy::Allow);
    let hooks = Arc::new(HalfWrites {
        calls: AtomicI64::new(0),
        fail_from,
        failures,
    });
    let key = register_backend(&ns(prefix), hooks).unwrap();
    let mut fb = fallback_lib();
    fb.fallback(key, boxfall::cpu_fallback()).unwrap();
    Half { key, _fb: fb }
}

impl Half {
    fn tensor(&self, v: &[f64]) -> Tensor {
        Tensor::foreign(
            Device::new(self.key, 0),
            Arc::new(Buf(Mutex::new(v.to_vec()))),
        )
    }
}

/// `neg2_(Tensor(a!) a, Tensor(b!) b) -> ()`: negates both.
fn define_neg2(lib: &mut Library) -> boxfall::OperatorHandle {
    let op = lib
        .define("neg2_(Tensor(a!) a, Tensor(b!) b) -> ()")
        .unwrap();
    lib.impl_kernel(
        "neg2_",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor), ()>(|_, (a, b)| {
            write(&a, -f64_array(&a)?);
            write(&b, -f64_array(&b)?);
            Ok(())
        }),
        false,
    )
    .unwrap();
    op
}

#[test]
fn a_copy_from_cpu_that_writes_part_and_fails_leaves_its_tensor_as_it_was() {
    // The write fails once; putting the tensor back through the same hook then works.
    let d = half("HalfOnce", 0, 1);
    let (ns, mut lib) = def_lib("fbw");
    let op = define_neg_(&mut lib);
    let x = d.tensor(&[1.0, 2.0]);
    let payload = x.payload().unwrap();
    let err = op
        .typed::<(Tensor,), ()>()
        .unwrap()
        .call((x.clone(),))
        .unwrap_err();
    assert_eq!(
        buf_values(&x),
        vec![1.0, 2.0],
        "the failing write is undone"
    );
    assert!(
        Arc::ptr_eq(&x.payload().unwrap(), &payload),
        "put back through copy_from_cpu, in the same payload"
    );
    // A foreign error keeps its own object, with a note naming the operator and the backend.
    let Error::Foreign { payload: p, .. } = &err else {
        panic!("expected the foreign error, got {err:?}");
    };
    let notes = p.notes().join(" ");
    assert!(notes.contains(&format!("{ns}::neg_")), "{notes}");
    assert!(notes.contains(&d.key.name()), "{notes}");
    let s = boxfall::Dispatcher::op_stats(op.name()).unwrap();
    assert_eq!((s.fallbacks, s.failures), (1, 1));
}

#[test]
fn a_copy_from_cpu_that_always_fails_gets_a_new_payload_with_the_old_values() {
    let d = half("HalfAlways", 0, -1);
    let (_, mut lib) = def_lib("fbw");
    let op = define_neg2(&mut lib);
    let (a, b) = (d.tensor(&[1.0, 2.0]), d.tensor(&[3.0]));
    let mut stack = vec![IValue::Tensor(a.clone()), IValue::Tensor(b.clone())];
    assert!(op.call_boxed(&mut stack).is_err());
    assert_eq!(buf_values(&a), vec![1.0, 2.0]);
    assert_eq!(buf_values(&b), vec![3.0]);
}

#[test]
fn the_second_of_two_writes_failing_part_way_undoes_both() {
    // Call 0 (a) succeeds, call 1 (b) writes one element and fails; putting back works.
    let d = half("HalfSecond", 1, 1);
    let (ns, mut lib) = def_lib("fbw");
    let op = define_neg2(&mut lib);
    let (a, b) = (d.tensor(&[1.0, 2.0]), d.tensor(&[3.0, 4.0]));
    let err = op
        .typed::<(Tensor, Tensor), ()>()
        .unwrap()
        .call((a.clone(), b.clone()))
        .unwrap_err();
    assert!(err.to_string().contains(&format!("{ns}::neg2_")), "{err}");
    assert_eq!(buf_values(&a), vec![1.0, 2.0], "the first write is undone");
    assert_eq!(
        buf_values(&b),
        vec![3.0, 4.0],
        "the failing write is undone"
    );
}

#[test]
fn an_inplace_result_of_another_shape_or_dtype_is_refused_and_changes_nothing() {
    native::install_fallback().unwrap();
    set_fallback_policy(FallbackPolicy::Allow);
    let (ns, mut lib) = def_lib("fbw");
    let op = lib.define("grow_(Tensor(a!) self) -> Tensor(a!)").unwrap();
    lib.impl_kernel(
        "grow_",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| {
            let n = f64_array(&x)?.len();
            Ok(Tensor::from_array(arr(&vec![0.0; n + 1])))
        }),
        false,
    )
    .unwrap();
    let retype = lib
        .define("retype_(Tensor(a!) self) -> Tensor(a!)")
        .unwrap();
    lib.impl_kernel(
        "retype_",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| {
            let n = f64_array(&x)?.len();
            Ok(Tensor::from_array(ndarray::ArrayD::<f32>::zeros(vec![n])))
        }),
        false,
    )
    .unwrap();
    for (op, name) in [(&op, "grow_"), (&retype, "retype_")] {
        let x = native::tensor(arr(&[1.0, 2.0]));
        let err = op
            .typed::<(Tensor,), Tensor>()
            .unwrap()
            .call((x.clone(),))
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::Kernel { .. }), "{err:?}");
        assert!(text.contains(&format!("{ns}::{name}")), "{text}");
        assert!(text.contains("'self'") && text.contains("Native"), "{text}");
        assert_eq!(values(&x), vec![1.0, 2.0]);
        assert_eq!(shape(&x), vec![2]);
        let s = boxfall::Dispatcher::op_stats(op.name()).unwrap();
        assert_eq!((s.fallbacks, s.failures), (1, 1));
    }
}

#[test]
fn a_keyword_only_out_argument_may_be_resized() {
    native::install_fallback().unwrap();
    let (_, mut lib) = def_lib("fbw");
    let op = lib
        .define("grow.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
        .unwrap();
    lib.impl_kernel(
        "grow.out",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(|_, (x, _)| {
            Ok(Tensor::from_array(f64_array(&x)? * 2.0))
        }),
        false,
    )
    .unwrap();
    let out = native::tensor(arr(&[0.0]));
    let r = op
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((native::tensor(arr(&[1.0, 2.0, 3.0])), out.clone()))
        .unwrap();
    assert!(r.same(&out));
    assert_eq!(values(&out), vec![2.0, 4.0, 6.0]);
}

#[test]
fn a_cpu_argument_written_through_the_fallback_is_unchanged_when_the_kernel_fails() {
    native::install_fallback().unwrap();
    set_fallback_policy(FallbackPolicy::Allow);
    let (_, mut lib) = def_lib("fbw");
    let op = lib
        .define("fill_(Tensor(a!) out, Tensor x, bool fail) -> Tensor(a!)")
        .unwrap();
    lib.impl_kernel(
        "fill_",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor, bool), Tensor>(|_, (out, _, fail)| {
            write(&out, arr(&[999.0, 999.0]));
            if fail {
                return Err(kernel_error("gave up after writing"));
            }
            Ok(out)
        }),
        false,
    )
    .unwrap();
    let typed = op.typed::<(Tensor, Tensor, bool), Tensor>().unwrap();
    let out = cpu(&[1.0, 2.0]);
    let x = native::tensor(arr(&[0.0]));
    assert!(typed.call((out.clone(), x.clone(), true)).is_err());
    assert_eq!(
        values(&out),
        vec![1.0, 2.0],
        "not written: the kernel failed"
    );
    let r = typed.call((out.clone(), x, false)).unwrap();
    assert!(r.same(&out));
    assert_eq!(
        values(&out),
        vec![999.0, 999.0],
        "written once the kernel succeeded"
    );
}

#[test]
fn a_cpu_kernels_error_through_the_fallback_names_the_backend() {
    native::install_fallback().unwrap();
    let (ns, mut lib) = def_lib("fbw");
    let op = lib.define("bad(Tensor x) -> Tensor").unwrap();
    lib.impl_kernel(
        "bad",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, _| {
            Err(Error::Foreign {
                message: "boom".into(),
                payload: ForeignError::new(()),
            })
        }),
        false,
    )
    .unwrap();
    let err = op
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((native::tensor(arr(&[1.0])),))
        .unwrap_err();
    let Error::Foreign { payload, message } = &err else {
        panic!("expected the foreign error, got {err:?}");
    };
    let notes = payload.notes().join(" ");
    assert!(
        notes.contains(&format!("'{ns}::bad'")) && notes.contains("'Native'"),
        "{notes}"
    );
    assert!(message.contains("Native"), "{message}");
}

#[test]
fn in_place_writes_to_one_native_tensor_from_threads_lose_no_update() {
    // Each call reads the tensor, adds on a copy and writes back: a write-back that finds the
    // tensor written by another thread since its read redoes the call on the new values.
    native::install_fallback().unwrap();
    let (ns, mut lib) = def_lib("fbw_threads");
    let op = define_add_(&mut lib);
    let x = native::tensor(arr(&vec![0.0; 100]));
    let one = native::tensor(arr(&vec![1.0; 100]));
    let typed = op.typed::<(Tensor, Tensor), Tensor>().unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..200 {
                    typed.call((x.clone(), one.clone())).unwrap();
                }
            });
        }
    });
    assert_eq!(values(&x), vec![800.0; 100], "{ns}: every update stays");
}

/// A backend that counts the calls run through `Backend::exclusive` and the hook calls made
/// inside and outside one.
#[derive(Default)]
struct Exclusive {
    inside: std::sync::atomic::AtomicBool,
    calls: AtomicI64,
    hooks_inside: AtomicI64,
    hooks_outside: AtomicI64,
}

impl Exclusive {
    fn hook(&self) {
        let counter = if self.inside.load(Ordering::SeqCst) {
            &self.hooks_inside
        } else {
            &self.hooks_outside
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

impl Backend for Exclusive {
    fn to_cpu(&self, t: &Tensor, _for_write: bool) -> Result<Tensor> {
        self.hook();
        Ok(cpu(&values(t)))
    }
    fn from_cpu(&self, t: &Tensor, device: Device) -> Result<Tensor> {
        self.hook();
        Ok(on(device, &values(t)))
    }
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        self.hook();
        write(dst, arr(&values(src)));
        Ok(())
    }
    fn exclusive(&self, call: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inside.store(true, Ordering::SeqCst);
        let out = call();
        self.inside.store(false, Ordering::SeqCst);
        out
    }
}

#[test]
fn a_fallback_that_writes_an_argument_runs_its_reads_kernel_and_write_backs_as_one_exclusive_call()
{
    // A backend whose hooks must run one at a time holds its lock across the whole call, so
    // that no other thread reads the tensor between this call's read and its write-back.
    set_fallback_policy(FallbackPolicy::Allow);
    let hooks = Arc::new(Exclusive::default());
    let key = register_backend(&ns("Exclusive"), hooks.clone()).unwrap();
    let mut fb = fallback_lib();
    fb.fallback(key, boxfall::cpu_fallback()).unwrap();
    let (_ns, mut lib) = def_lib("fbw");
    let add_ = define_add_(&mut lib);
    let neg = define_neg(&mut lib);
    let x = on_key(key, &[1.0, 2.0]);
    add_.typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((x.clone(), on_key(key, &[10.0, 10.0])))
        .unwrap();
    assert_eq!(values(&x), [11.0, 12.0]);
    // Two reads and one write-back, all inside the one exclusive call.
    assert_eq!(hooks.calls.load(Ordering::SeqCst), 1);
    assert_eq!(hooks.hooks_inside.load(Ordering::SeqCst), 3);
    assert_eq!(hooks.hooks_outside.load(Ordering::SeqCst), 0);
    // A functional operator writes nothing back, so another thread's call cannot lose it: it
    // is not made exclusive.
    neg.typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((x.clone(),))
        .unwrap();
    assert_eq!(hooks.calls.load(Ordering::SeqCst), 1);
    assert_eq!(hooks.hooks_outside.load(Ordering::SeqCst), 2);
}
