//! A kernel that wraps the kernel below its key, as the CPU fallback does, but is no CPU
//! fallback: a "logging" kernel for a functionality key that counts what it sees, reads the
//! call's dispatch table and key set, and redispatches below its own key. Its boxed entry reads
//! the table (`KernelFunction::from_boxed_in_table`); its typed wrapper (`with_typed_wrapper`)
//! serves typed calls without boxing. The tests show that the two properties are the kernel's,
//! not the fallback's: the dispatcher runs them for any kernel that has them.

mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};

use boxfall::dispatcher::DispatchTable;
use boxfall::kernel::{TensorBatch, TensorMaps, TypedCall, TypedWrapper};
use boxfall::key::{register_functionality_key, LocalKeysGuard};
use boxfall::{
    DispatchKey, DispatchKeySet, IValue, KernelFunction, Library, LibraryKind, OperatorHandle,
    Result, Tensor,
};
use common::*;

/// What one logging kernel saw.
#[derive(Default)]
struct Seen {
    /// Calls of its boxed entry.
    boxed: AtomicUsize,
    /// Typed calls offered to its wrapper.
    typed: AtomicUsize,
    /// Argument and returned tensors its maps saw.
    args: AtomicUsize,
    returns: AtomicUsize,
    /// The key set of the last call it got.
    keys: AtomicU64,
}

/// The logging key, registered once for this test binary (the key space is finite).
fn log_key() -> DispatchKey {
    static KEY: OnceLock<DispatchKey> = OnceLock::new();
    *KEY.get_or_init(|| register_functionality_key("TestWrapLog").expect("a functionality key"))
}

/// The logging kernel. `decline`: its wrapper turns every typed call down.
fn logging_kernel(seen: Arc<Seen>, decline: bool) -> KernelFunction {
    let s = seen.clone();
    KernelFunction::from_boxed_in_table(move |op, table, keys, stack| {
        s.boxed.fetch_add(1, SeqCst);
        s.keys.store(keys.0, SeqCst);
        // The kernel below this key, found in the table the call loaded.
        table.call(op, keys.without_highest(), stack)
    })
    .with_typed_wrapper(Logging { seen, decline })
}

struct Logging {
    seen: Arc<Seen>,
    decline: bool,
}

impl TypedWrapper for Logging {
    fn call_typed(
        &self,
        op: &OperatorHandle,
        table: &DispatchTable,
        keys: DispatchKeySet,
        call: &mut TypedCall<'_>,
    ) -> Option<Result<()>> {
        if self.decline {
            return None;
        }
        self.seen.typed.fetch_add(1, SeqCst);
        self.seen.keys.store(keys.0, SeqCst);
        let below = keys.without_highest();
        match table.kernel(below) {
            // The kernel below has this call's typed function: run it, watching its tensors.
            Some(k) if call.fits(k) && call.maps_tensors() => {
                let mut maps = Count(&self.seen);
                Some(call.run(k, below, &mut maps))
            }
            // Anything else: pass the call on as a dispatched typed call would.
            _ => Some(call.redispatch(op, table, below)),
        }
    }
}

/// Tensor maps that only count.
struct Count<'a>(&'a Seen);

impl TensorMaps for Count<'_> {
    fn args(&mut self, tensors: &mut TensorBatch<'_, '_>, _last: bool) -> Result<()> {
        self.0.args.fetch_add(tensors.iter_mut().count(), SeqCst);
        Ok(())
    }
    fn ret(&mut self, t: Tensor) -> Result<Tensor> {
        self.0.returns.fetch_add(1, SeqCst);
        Ok(t)
    }
}

fn add_cpu(_: DispatchKeySet, (a, b): (Tensor, Tensor)) -> Result<Tensor> {
    Ok(Tensor::from_array(values(&a) + values(&b)))
}

fn values(t: &Tensor) -> ndarray::ArrayD<f64> {
    t.to_host()
        .ok()
        .and_then(|h| h.as_f64().cloned())
        .unwrap_or_default()
}

/// An operator `add` with a typed CPU kernel and the logging kernel at the logging key.
fn logged_add(seen: &Arc<Seen>, decline: bool) -> (Library, OperatorHandle) {
    let (_, mut lib) = def_lib("wrap");
    let op = lib
        .define("add(Tensor a, Tensor b) -> Tensor")
        .expect("define");
    lib.impl_kernel(
        "add",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(add_cpu),
        false,
    )
    .expect("CPU kernel");
    lib.impl_kernel(
        "add",
        log_key(),
        logging_kernel(seen.clone(), decline),
        false,
    )
    .expect("logging kernel");
    (lib, op)
}

fn t(v: &[f64]) -> Tensor {
    Tensor::from_array(ndarray::arr1(v).into_dyn())
}

#[test]
fn a_typed_call_through_a_wrapping_kernel_runs_the_kernel_below_typed_without_boxing() {
    let seen = Arc::new(Seen::default());
    let (_lib, op) = logged_add(&seen, false);
    let add = op.typed::<(Tensor, Tensor), Tensor>().expect("typed");
    let _on = LocalKeysGuard::include(log_key().set());
    let sum = add.call((t(&[1.0, 2.0]), t(&[10.0, 20.0]))).expect("call");
    assert_eq!(values(&sum).as_slice().unwrap(), &[11.0, 22.0]);
    // The wrapper served it, typed; the boxed entry never ran, so nothing was boxed.
    assert_eq!(seen.typed.load(SeqCst), 1);
    assert_eq!(seen.boxed.load(SeqCst), 0);
    // Its maps saw both argument tensors and the return, around the CPU kernel's function.
    assert_eq!((seen.args.load(SeqCst), seen.returns.load(SeqCst)), (2, 1));
    // It was given the call's key set: its own key on top, the CPU's below.
    let keys = DispatchKeySet(seen.keys.load(SeqCst));
    assert_eq!(keys.highest(), Some(log_key()));
    assert!(keys.contains(DispatchKey::CPU));
}

#[test]
fn a_boxed_call_gets_the_calls_table_and_key_set_and_redispatches_below_the_key() {
    let seen = Arc::new(Seen::default());
    let (_lib, op) = logged_add(&seen, false);
    let _on = LocalKeysGuard::include(log_key().set());
    let mut stack = vec![IValue::Tensor(t(&[1.0])), IValue::Tensor(t(&[2.0]))];
    op.call_boxed(&mut stack).expect("boxed call");
    assert_eq!(
        values(stack[0].as_tensor().unwrap()).as_slice().unwrap(),
        &[3.0]
    );
    assert_eq!((seen.boxed.load(SeqCst), seen.typed.load(SeqCst)), (1, 0));
    assert_eq!(
        DispatchKeySet(seen.keys.load(SeqCst)).highest(),
        Some(log_key())
    );
}

#[test]
fn without_the_key_the_wrapping_kernel_is_not_reached() {
    let seen = Arc::new(Seen::default());
    let (_lib, op) = logged_add(&seen, false);
    let add = op.typed::<(Tensor, Tensor), Tensor>().expect("typed");
    let sum = add.call((t(&[1.0]), t(&[1.0]))).expect("call");
    assert_eq!(values(&sum).as_slice().unwrap(), &[2.0]);
    assert_eq!((seen.boxed.load(SeqCst), seen.typed.load(SeqCst)), (0, 0));
}

#[test]
fn a_wrapper_that_declines_leaves_the_call_to_the_boxed_entry() {
    let seen = Arc::new(Seen::default());
    let (_lib, op) = logged_add(&seen, true);
    let add = op.typed::<(Tensor, Tensor), Tensor>().expect("typed");
    let _on = LocalKeysGuard::include(log_key().set());
    let sum = add.call((t(&[4.0]), t(&[5.0]))).expect("call");
    assert_eq!(values(&sum).as_slice().unwrap(), &[9.0]);
    // Boxed once, with the arguments the wrapper left untouched.
    assert_eq!((seen.boxed.load(SeqCst), seen.typed.load(SeqCst)), (1, 0));
}

#[test]
fn a_kernel_below_without_the_calls_signature_is_reached_by_redispatching() {
    let seen = Arc::new(Seen::default());
    let (_, mut lib) = def_lib("wrap_boxed_cpu");
    let op = lib.define("neg(float x) -> float").expect("define");
    // A boxed CPU kernel: no typed function the wrapper's call could fit.
    lib.impl_kernel(
        "neg",
        DispatchKey::CPU,
        KernelFunction::from_boxed(|_, _, stack| {
            let x = stack[0].to_double().unwrap_or(0.0);
            stack[0] = IValue::Double(-x);
            Ok(())
        }),
        false,
    )
    .expect("CPU kernel");
    lib.impl_kernel("neg", log_key(), logging_kernel(seen.clone(), false), false)
        .expect("logging kernel");
    let neg = op.typed::<(f64,), f64>().expect("typed");
    let _on = LocalKeysGuard::include(log_key().set());
    assert_eq!(neg.call((2.5,)).expect("call"), -2.5);
    // The wrapper took the call and redispatched it (the CPU kernel boxed it, once); the
    // logging kernel's own boxed entry never ran, and no tensor map was used.
    assert_eq!((seen.typed.load(SeqCst), seen.boxed.load(SeqCst)), (1, 0));
    assert_eq!(seen.args.load(SeqCst), 0);
}

#[test]
fn as_a_backend_fallback_the_wrapping_kernel_serves_every_operator_typed() {
    static KEY: OnceLock<DispatchKey> = OnceLock::new();
    let key = *KEY.get_or_init(|| register_functionality_key("TestWrapLogFallback").expect("key"));
    let seen = Arc::new(Seen::default());
    let mut fb = Library::new("_", LibraryKind::Impl).expect("fallback library");
    fb.fallback(key, logging_kernel(seen.clone(), false))
        .expect("fallback");
    let (_, mut lib) = def_lib("wrap_fb");
    let op = lib
        .define("add(Tensor a, Tensor b) -> Tensor")
        .expect("define");
    lib.impl_kernel(
        "add",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(add_cpu),
        false,
    )
    .expect("CPU kernel");
    let add = op.typed::<(Tensor, Tensor), Tensor>().expect("typed");
    {
        let _on = LocalKeysGuard::include(key.set());
        let sum = add.call((t(&[1.0]), t(&[2.0]))).expect("call");
        assert_eq!(values(&sum).as_slice().unwrap(), &[3.0]);
    }
    assert_eq!((seen.typed.load(SeqCst), seen.boxed.load(SeqCst)), (1, 0));
    // Another operator, another signature, the same fallback: typed again.
    let scale = lib
        .define("scale(Tensor a, float k) -> Tensor")
        .expect("define");
    lib.impl_kernel(
        "scale",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, f64), Tensor>(|_, (a, k)| {
            Ok(Tensor::from_array(values(&a) * k))
        }),
        false,
    )
    .expect("CPU kernel");
    let scale = scale.typed::<(Tensor, f64), Tensor>().expect("typed");
    let _on = LocalKeysGuard::include(key.set());
    let y = scale.call((t(&[1.5]), 2.0)).expect("call");
    assert_eq!(values(&y).as_slice().unwrap(), &[3.0]);
    assert_eq!((seen.typed.load(SeqCst), seen.boxed.load(SeqCst)), (2, 0));
    assert_eq!((seen.args.load(SeqCst), seen.returns.load(SeqCst)), (3, 2));
    drop(fb);
}
