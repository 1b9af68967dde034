//! Residency on a Rust backend: a lazy backend's tensors keep the host copy the CPU fallback
//! read of them (until a write moves their data version on), and the fallback's results stay on
//! the host until `resident::materialize` gives them a payload; an eager backend moves
//! everything, as before. Hooks count their calls; the fallback's counters count only the
//! bytes that crossed.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use boxfall::backend::{register_backend, Backend};
use boxfall::metrics::user_transfers;
use boxfall::tensor::{HostArray, Payload, Residency};
use boxfall::{resident, Device, DispatchKey, Dispatcher, Error, Result, Tensor};
use common::*;

/// Counting hooks; `lazy` says whether the backend takes part in residency.
struct Counting {
    lazy: bool,
    to_cpu: AtomicUsize,
    from_cpu: AtomicUsize,
    copy_from_cpu: AtomicUsize,
}

fn dev(t: &Tensor) -> Result<Arc<dyn Payload>> {
    let p = t
        .payload()
        .ok_or_else(|| Error::Fallback("no payload".into()))?;
    if p.as_any().downcast_ref::<DevPayload>().is_none() {
        return Err(Error::Fallback(format!("not device data: {t:?}")));
    }
    Ok(p)
}

impl Backend for Counting {
    fn to_cpu(&self, t: &Tensor, _for_write: bool) -> Result<Tensor> {
        self.to_cpu.fetch_add(1, Ordering::SeqCst);
        Ok(Tensor::host(Device::CPU, dev(t)?.to_host()?))
    }
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        self.from_cpu.fetch_add(1, Ordering::SeqCst);
        let a = cpu.to_host()?.try_clone()?;
        Ok(Tensor::foreign(device, Arc::new(DevPayload::new(a))))
    }
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        self.copy_from_cpu.fetch_add(1, Ordering::SeqCst);
        let p = dev(dst)?;
        let d = p
            .as_any()
            .downcast_ref::<DevPayload>()
            .expect("checked by dev");
        d.set(src.to_host()?.try_clone()?);
        Ok(())
    }
    fn lazy(&self) -> bool {
        self.lazy
    }
}

struct Setup {
    key: DispatchKey,
    hooks: &'static Counting,
    _fb: boxfall::Library,
}

impl Setup {
    fn new(lazy: bool) -> Setup {
        let hooks: &'static Counting = Box::leak(Box::new(Counting {
            lazy,
            to_cpu: AtomicUsize::new(0),
            from_cpu: AtomicUsize::new(0),
            copy_from_cpu: AtomicUsize::new(0),
        }));
        struct Shared(&'static Counting);
        impl Backend for Shared {
            fn to_cpu(&self, t: &Tensor, w: bool) -> Result<Tensor> {
                self.0.to_cpu(t, w)
            }
            fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
                self.0.from_cpu(cpu, device)
            }
            fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
                self.0.copy_from_cpu(dst, src)
            }
            fn lazy(&self) -> bool {
                self.0.lazy()
            }
        }
        let key = register_backend(&ns("Resid"), Arc::new(Shared(hooks))).expect("backend");
        let mut fb = fallback_lib();
        fb.fallback(key, boxfall::cpu_fallback()).expect("fallback");
        Setup {
            key,
            hooks,
            _fb: fb,
        }
    }

    fn tensor(&self, v: &[f64]) -> Tensor {
        let t = Tensor::foreign(
            Device::new(self.key, 0),
            Arc::new(DevPayload::new(HostArray::from(arr(v)))),
        );
        assert_eq!(t.residency(), Residency::Device);
        t
    }

    fn calls(&self) -> [usize; 3] {
        [
            self.hooks.to_cpu.load(Ordering::SeqCst),
            self.hooks.from_cpu.load(Ordering::SeqCst),
            self.hooks.copy_from_cpu.load(Ordering::SeqCst),
        ]
    }
}

fn bytes(op: &boxfall::OperatorHandle) -> (u64, u64) {
    let s = Dispatcher::op_stats(op.name()).expect("counted");
    (s.totals().bytes_to_cpu, s.totals().bytes_from_cpu)
}

#[test]
fn a_chain_of_fallbacks_moves_each_input_once_and_no_result() {
    let s = Setup::new(true);
    let (_, mut lib) = def_lib("resid_chain");
    let add = define_add(&mut lib);
    let neg = define_neg(&mut lib);
    let (x, y) = (s.tensor(&[1.0, 2.0]), s.tensor(&[10.0, 20.0]));
    // A typed call and a boxed one: both forms of the fallback keep to residency.
    let sum = add
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((x.clone(), y.clone()))
        .unwrap();
    assert_eq!(s.calls(), [2, 0, 0]);
    assert!(sum.is_host_only() && sum.device() == Device::new(s.key, 0));
    assert_eq!(x.residency(), Residency::Both);
    let mut stack = vec![boxfall::IValue::Tensor(sum.clone())];
    neg.call_boxed(&mut stack).unwrap();
    let negated = tensor_of(&stack[0]).clone();
    let again = add
        .typed::<(Tensor, Tensor), Tensor>()
        .unwrap()
        .call((negated.clone(), x.clone()))
        .unwrap();
    assert_eq!(s.calls(), [2, 0, 0]); // x read from its host copy, results never moved
    assert_eq!(values(&again), vec![-10.0, -20.0]);
    assert_eq!(bytes(&add), (32, 0));
    assert_eq!(bytes(&neg), (0, 0));
}

#[test]
fn materialize_gives_a_host_result_its_payload_once_and_counts_it() {
    let s = Setup::new(true);
    let (_, mut lib) = def_lib("resid_mat");
    let neg = define_neg(&mut lib);
    let x = s.tensor(&[1.0, 2.0, 3.0]);
    let y = neg
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((x,))
        .unwrap();
    assert_eq!(y.residency(), Residency::Host);
    let version = y.data_version();
    let before = user_transfers()
        .into_iter()
        .find(|(k, _)| *k == s.key)
        .map_or(0, |(_, t)| t.bytes_materialized);
    resident::materialize(&y).unwrap();
    assert_eq!(s.calls(), [1, 1, 0]);
    assert!(dev(&y).is_ok());
    assert_eq!(y.residency(), Residency::Both);
    assert_eq!(y.data_version(), version); // same values: no write
    resident::materialize(&y).unwrap();
    assert_eq!(s.calls(), [1, 1, 0]);
    let after = user_transfers()
        .into_iter()
        .find(|(k, _)| *k == s.key)
        .map_or(0, |(_, t)| t.bytes_materialized);
    assert_eq!(after - before, 24);
    // Its host copy is current: reading it again moves nothing.
    let z = neg
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((y,))
        .unwrap();
    assert_eq!(s.calls(), [1, 1, 0]);
    assert_eq!(values(&z), vec![1.0, 2.0, 3.0]);
}

#[test]
fn writes_invalidate_the_host_copy_and_a_host_result_is_written_on_the_host() {
    let s = Setup::new(true);
    let (_, mut lib) = def_lib("resid_write");
    let add_ = define_add_(&mut lib);
    let neg = define_neg(&mut lib);
    let x = s.tensor(&[1.0, 2.0]);
    let one = cpu(&[1.0, 1.0]);
    let call = |t: &Tensor| {
        let mut st = vec![
            boxfall::IValue::Tensor(t.clone()),
            boxfall::IValue::Tensor(one.clone()),
        ];
        add_.call_boxed(&mut st).unwrap();
    };
    // A tensor with its payload: written by copy_from_cpu, its host copy no longer read.
    neg.typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((x.clone(),))
        .unwrap();
    assert_eq!(x.residency(), Residency::Both);
    call(&x);
    assert_eq!(s.calls(), [1, 0, 1]); // the copy was read; the write crossed
    assert_eq!(x.residency(), Residency::Device);
    assert_eq!(values(&x), vec![2.0, 3.0]);
    let n = neg
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((x,))
        .unwrap();
    assert_eq!(s.calls(), [2, 0, 1]); // read from the device again
                                      // A host result: written on the host side, nothing crosses.
    assert!(n.is_host_only());
    call(&n);
    assert!(n.is_host_only());
    assert_eq!(s.calls(), [2, 0, 1]);
    assert_eq!(values(&n), vec![-1.0, -2.0]);
    assert_eq!(bytes(&add_), (0, 16)); // only the first write crossed
}

#[test]
fn a_failing_materialize_leaves_the_tensor_on_the_host() {
    struct Refuses;
    impl Backend for Refuses {
        fn to_cpu(&self, _: &Tensor, _: bool) -> Result<Tensor> {
            Err(Error::Fallback("no".into()))
        }
        fn from_cpu(&self, _: &Tensor, _: Device) -> Result<Tensor> {
            Err(Error::Fallback("the device is full".into()))
        }
        fn copy_from_cpu(&self, _: &Tensor, _: &Tensor) -> Result<()> {
            Err(Error::Fallback("no".into()))
        }
        fn lazy(&self) -> bool {
            true
        }
    }
    let key = register_backend(&ns("ResidRefuses"), Arc::new(Refuses)).unwrap();
    let t = Tensor::host_only(cpu(&[1.0]), Device::new(key, 0));
    let v = t.data_version();
    let e = resident::materialize(&t).unwrap_err();
    assert!(e.to_string().contains("the device is full"), "{e}");
    assert!(t.is_host_only() && t.data_version() == v);
    assert_eq!(values(&t), vec![1.0]);
}

#[test]
fn an_eager_backend_moves_every_read_and_every_result() {
    let s = Setup::new(false);
    let (_, mut lib) = def_lib("resid_eager");
    let neg = define_neg(&mut lib);
    let x = s.tensor(&[1.0, 2.0]);
    let typed = neg.typed::<(Tensor,), Tensor>().unwrap();
    let y = typed.call((x.clone(),)).unwrap();
    let _ = typed.call((x.clone(),)).unwrap();
    assert_eq!(s.calls(), [2, 2, 0]);
    assert_eq!(y.residency(), Residency::Device);
    assert_eq!(x.residency(), Residency::Device);
    assert_eq!(bytes(&neg), (32, 32));
}

#[test]
fn a_host_copy_kept_from_an_old_version_is_not_read() {
    let s = Setup::new(true);
    let x = s.tensor(&[1.0]);
    let v = x.data_version();
    x.keep_host_copy(v, cpu(&[1.0]));
    assert_eq!(x.residency(), Residency::Both);
    x.note_write();
    assert_eq!(x.residency(), Residency::Device);
    let (read, crossed) = resident::read(s.hooks, &x).unwrap();
    assert!(crossed && values(&read) == vec![1.0]);
    assert_eq!(x.residency(), Residency::Both);
}

#[test]
fn an_exported_tensor_is_written_in_its_host_memory_and_its_payload_is_made_again() {
    let s = Setup::new(true);
    let (_, mut lib) = def_lib("resid_export");
    let add_ = define_add_(&mut lib);
    let neg = define_neg(&mut lib);
    let x = s.tensor(&[1.0, 2.0]);
    let memory = resident::export(s.hooks, &x).unwrap().unwrap();
    assert_eq!(s.calls(), [1, 0, 0]); // read once
    assert_eq!(x.residency(), Residency::Host); // the payload is dropped
    assert!(x.is_exported() && x.host_exported().is_some());
    assert!(Arc::ptr_eq(
        &resident::export(s.hooks, &x).unwrap().unwrap(),
        &memory
    ));
    // A second export (another thread's, racing) leaves the first's memory the tensor's.
    let other = x.export_device_values(x.data_version(), cpu(&[0.0, 0.0]));
    assert!(other.unwrap().is_none());
    let now = || memory.as_f64().unwrap().iter().copied().collect::<Vec<_>>();
    // The fallback's write-back lands in the memory where it is, and nothing crosses.
    let mut st = vec![
        boxfall::IValue::Tensor(x.clone()),
        boxfall::IValue::Tensor(cpu(&[1.0, 1.0])),
    ];
    add_.call_boxed(&mut st).unwrap();
    assert_eq!(now(), vec![2.0, 3.0]);
    assert!(x.is_host_only() && x.is_exported());
    // A read is of the memory: nothing crosses.
    let n = neg
        .typed::<(Tensor,), Tensor>()
        .unwrap()
        .call((x.clone(),))
        .unwrap();
    assert_eq!(values(&n), vec![-2.0, -3.0]);
    assert_eq!(s.calls(), [1, 0, 0]);
    // The device gets a payload made of the memory for each kernel, dropped after it.
    resident::refresh(&x).unwrap();
    assert!(!x.is_host_only());
    resident::materialize(&x).unwrap(); // within the kernel: the payload made is current
    assert_eq!(s.calls(), [1, 1, 0]);
    resident::settle(s.hooks, &x, false).unwrap();
    assert!(x.is_host_only());
    resident::refresh(&x).unwrap();
    assert_eq!(s.calls(), [1, 2, 0]);
    // A kernel's write of the payload is copied back into the memory.
    let p = x.payload().unwrap();
    p.as_any()
        .downcast_ref::<DevPayload>()
        .unwrap()
        .set(HostArray::from(arr(&[7.0, 8.0])));
    resident::settle(s.hooks, &x, true).unwrap();
    assert_eq!(now(), vec![7.0, 8.0]);
    assert_eq!(s.calls(), [2, 2, 0]);
    assert!(x.is_host_only() && x.is_exported());
    let moved = user_transfers()
        .into_iter()
        .find(|(k, _)| *k == s.key)
        .map(|(_, m)| m)
        .unwrap();
    assert_eq!((moved.to_host, moved.materialized), (2, 2));
}

#[test]
fn an_eager_backend_exports_nothing() {
    let s = Setup::new(false);
    let x = s.tensor(&[1.0]);
    let e = resident::export(s.hooks, &x).unwrap_err();
    assert!(e.to_string().contains("lazy=False"), "{e}");
    assert_eq!(x.residency(), Residency::Device);
}
