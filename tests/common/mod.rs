//! Helpers shared by the integration tests: unique namespaces, host tensors, simple operators
//! with Rust CPU kernels, and a test backend whose tensors hold a payload of their own.
//!
//! Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

pub mod graph;

use std::any::Any;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use boxfall::backend::{register_backend, Backend};
use boxfall::tensor::{HostArray, Payload, TensorData};
use boxfall::{
    cpu_fallback, Device, DispatchKey, DispatchKeySet, Error, IValue, KernelFunction, Library,
    LibraryKind, OperatorHandle, Result, Tensor,
};
use ndarray::{ArrayD, IxDyn};

// ------------------------------------------------------------------------------------ names

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A namespace (or key name) no other test of this process uses: `ns("disp")` -> `disp_7`.
pub fn ns(prefix: &str) -> String {
    format!("{prefix}_{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A fresh namespace with its DEF library.
pub fn def_lib(prefix: &str) -> (String, Library) {
    let name = ns(prefix);
    let lib = Library::new(&name, LibraryKind::Def).expect("DEF library");
    (name, lib)
}

/// An IMPL library for a namespace.
pub fn impl_lib(ns: &str) -> Library {
    Library::new(ns, LibraryKind::Impl).expect("IMPL library")
}

/// A library for fallbacks (namespace `_`).
pub fn fallback_lib() -> Library {
    Library::new("_", LibraryKind::Impl).expect("fallback library")
}

/// A fresh backend key without transfer hooks (enough for dispatch tests).
pub fn backend_key(prefix: &str) -> DispatchKey {
    boxfall::key::register_backend_key(&ns(prefix)).expect("backend key")
}

/// A fresh functionality key.
pub fn functionality_key(prefix: &str) -> DispatchKey {
    boxfall::key::register_functionality_key(&ns(prefix)).expect("functionality key")
}

// ---------------------------------------------------------------------------------- tensors

/// A 1-d float64 array.
pub fn arr(values: &[f64]) -> ArrayD<f64> {
    ndarray::arr1(values).into_dyn()
}

/// A float64 array of a shape.
pub fn arr_nd(shape: &[usize], values: &[f64]) -> ArrayD<f64> {
    ArrayD::from_shape_vec(IxDyn(shape), values.to_vec()).expect("shape fits values")
}

/// A 1-d float64 CPU tensor.
pub fn cpu(values: &[f64]) -> Tensor {
    Tensor::from_array(arr(values))
}

/// A host-memory tensor on any device (dispatch tests need no transfer hooks).
pub fn on(device: Device, values: &[f64]) -> Tensor {
    Tensor::host(device, HostArray::from(arr(values)))
}

/// A host-memory tensor on index 0 of `key`.
pub fn on_key(key: DispatchKey, values: &[f64]) -> Tensor {
    on(Device::new(key, 0), values)
}

/// The tensor's values as float64 (host memory or a payload that can give host memory).
pub fn values(t: &Tensor) -> Vec<f64> {
    let host = t.to_host().expect("readable tensor");
    host.as_f64()
        .unwrap_or_else(|| panic!("{t:?} is not float64"))
        .iter()
        .copied()
        .collect()
}

/// The tensor's shape.
pub fn shape(t: &Tensor) -> Vec<usize> {
    t.to_host().expect("readable tensor").shape().to_vec()
}

/// The float64 array of a tensor, as a kernel reads it.
pub fn f64_array(t: &Tensor) -> Result<ArrayD<f64>> {
    t.to_host()?
        .as_f64()
        .cloned()
        .ok_or_else(|| kernel_error(format!("expected float64, got {}", t.describe())))
}

/// An error as a Rust kernel reports one.
pub fn kernel_error(message: impl Into<String>) -> Error {
    Error::Kernel {
        context: "test kernel".into(),
        message: message.into(),
    }
}

/// The tensor of a boxed value (panics otherwise).
pub fn tensor_of(v: &IValue) -> &Tensor {
    v.as_tensor()
        .unwrap_or_else(|| panic!("expected a tensor, got {v:?}"))
}

// ---------------------------------------------------------------------------------- kernels

/// CPU kernel of `add(Tensor self, Tensor other) -> Tensor`.
pub fn add_cpu(_keys: DispatchKeySet, (a, b): (Tensor, Tensor)) -> Result<Tensor> {
    Ok(Tensor::from_array(f64_array(&a)? + f64_array(&b)?))
}

/// CPU kernel of `neg(Tensor self) -> Tensor`.
pub fn neg_cpu(_keys: DispatchKeySet, (a,): (Tensor,)) -> Result<Tensor> {
    Ok(Tensor::from_array(-f64_array(&a)?))
}

/// CPU kernel of `add_(Tensor(a!) self, Tensor other) -> Tensor(a!)`: writes into `self`.
pub fn add_inplace_cpu(_keys: DispatchKeySet, (a, b): (Tensor, Tensor)) -> Result<Tensor> {
    let sum = f64_array(&a)? + f64_array(&b)?;
    a.set_data(TensorData::Host(Arc::new(HostArray::from(sum))));
    Ok(a)
}

/// Writes `array` into tensor `t` (an in-place write, as a kernel does).
pub fn write(t: &Tensor, array: ArrayD<f64>) {
    t.set_data(TensorData::Host(Arc::new(HostArray::from(array))));
}

/// A boxed kernel that returns the int `id` (whatever its arguments).
pub fn returns_id(id: i64) -> KernelFunction {
    KernelFunction::from_boxed(move |_op, _keys, stack| {
        stack.clear();
        stack.push(IValue::Int(id));
        Ok(())
    })
}

/// Defines `add(Tensor self, Tensor other) -> Tensor` with [`add_cpu`] as its CPU kernel.
pub fn define_add(lib: &mut Library) -> OperatorHandle {
    let op = lib
        .define("add(Tensor self, Tensor other) -> Tensor")
        .expect("define add");
    lib.impl_kernel(
        "add",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(add_cpu),
        false,
    )
    .expect("impl add");
    op
}

/// Defines `neg(Tensor self) -> Tensor` with [`neg_cpu`] as its CPU kernel.
pub fn define_neg(lib: &mut Library) -> OperatorHandle {
    let op = lib
        .define("neg(Tensor self) -> Tensor")
        .expect("define neg");
    lib.impl_kernel(
        "neg",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(neg_cpu),
        false,
    )
    .expect("impl neg");
    op
}

/// Defines `add_(Tensor(a!) self, Tensor other) -> Tensor(a!)` with [`add_inplace_cpu`] as
/// its CPU kernel.
pub fn define_add_(lib: &mut Library) -> OperatorHandle {
    let op = lib
        .define("add_(Tensor(a!) self, Tensor other) -> Tensor(a!)")
        .expect("define add_");
    lib.impl_kernel(
        "add_",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(add_inplace_cpu),
        false,
    )
    .expect("impl add_");
    op
}

/// Defines `neg_(Tensor(a!) a) -> ()`, whose CPU kernel negates `a` in place.
pub fn define_neg_(lib: &mut Library) -> OperatorHandle {
    let op = lib.define("neg_(Tensor(a!) a) -> ()").expect("define neg_");
    lib.impl_kernel(
        "neg_",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), ()>(|_, (a,)| {
            write(&a, -f64_array(&a)?);
            Ok(())
        }),
        false,
    )
    .expect("impl neg_");
    op
}

/// Defines `which(Tensor x) -> int`, with no kernel.
pub fn define_which(lib: &mut Library, name: &str) -> OperatorHandle {
    lib.define(&format!("{name}(Tensor x) -> int"))
        .expect("define")
}

/// The table entries of `keys` only (other tests register keys and fallbacks concurrently).
pub fn table_of(op: &OperatorHandle, keys: &[DispatchKey]) -> Vec<(String, String)> {
    let names: Vec<String> = keys.iter().map(|k| k.name()).collect();
    op.dispatch_table()
        .into_iter()
        .filter(|(k, _)| names.contains(k))
        .collect()
}

/// What serves `key` in `op`'s table, as `dispatch_table()` shows it.
pub fn source_of(op: &OperatorHandle, key: DispatchKey) -> String {
    let name = key.name();
    op.dispatch_table()
        .into_iter()
        .find(|(k, _)| *k == name)
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("{name} is not in the table of {}", op.name()))
}

// ------------------------------------------------------------------------------ the backend

/// What a test-backend tensor holds: host memory behind a lock, which `copy_from_cpu`
/// overwrites in place (as a device buffer would be), so the payload object stays the same.
pub struct DevPayload {
    array: Mutex<HostArray>,
}

impl DevPayload {
    /// A payload holding `array`.
    pub fn new(array: HostArray) -> DevPayload {
        DevPayload {
            array: Mutex::new(array),
        }
    }

    /// A copy of what the payload holds.
    pub fn get(&self) -> HostArray {
        self.array.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Overwrites what the payload holds, in place (as a kernel writes a device buffer).
    pub fn set(&self, array: HostArray) {
        *self.array.lock().unwrap_or_else(|e| e.into_inner()) = array;
    }
}

impl Payload for DevPayload {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn nbytes(&self) -> usize {
        self.get().nbytes()
    }
    fn to_host(&self) -> Result<HostArray> {
        Ok(self.get())
    }
    fn describe(&self) -> String {
        let a = self.get();
        format!("dev {}{:?}", a.dtype().name(), a.shape())
    }
}

/// One of the backend's hooks, for counting and for injecting failures.
#[allow(clippy::enum_variant_names)] // named as the Backend trait's methods
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    ToCpu,
    FromCpu,
    CopyFromCpu,
}

impl Hook {
    fn index(self) -> usize {
        match self {
            Hook::ToCpu => 0,
            Hook::FromCpu => 1,
            Hook::CopyFromCpu => 2,
        }
    }

    /// The name the fallback's errors use for the step.
    pub fn step(self) -> &'static str {
        match self {
            Hook::ToCpu => "to_cpu",
            Hook::FromCpu => "from_cpu",
            Hook::CopyFromCpu => "copy_from_cpu",
        }
    }
}

/// Transfer hooks that always copy (the device's memory is not host memory), count every call
/// and fail on request.
pub struct TestBackend {
    calls: [AtomicUsize; 3],
    writes: AtomicUsize,
    /// Per hook: how many more calls succeed before one fails (negative: never fails).
    fail_after: [AtomicI64; 3],
}

impl TestBackend {
    fn new() -> TestBackend {
        TestBackend {
            calls: Default::default(),
            writes: AtomicUsize::new(0),
            fail_after: [AtomicI64::new(-1), AtomicI64::new(-1), AtomicI64::new(-1)],
        }
    }

    /// How many times `hook` ran (failed calls included).
    pub fn count(&self, hook: Hook) -> usize {
        self.calls[hook.index()].load(Ordering::SeqCst)
    }

    /// How many `to_cpu` calls asked for a writable copy.
    pub fn to_cpu_for_write(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }

    /// Makes `hook` fail after `successes` more successful calls (once; then it works again).
    pub fn fail(&self, hook: Hook, successes: i64) {
        self.fail_after[hook.index()].store(successes, Ordering::SeqCst);
    }

    fn enter(&self, hook: Hook) -> Result<()> {
        self.calls[hook.index()].fetch_add(1, Ordering::SeqCst);
        let cell = &self.fail_after[hook.index()];
        let left = cell.load(Ordering::SeqCst);
        if left < 0 {
            return Ok(());
        }
        cell.store(left - 1, Ordering::SeqCst);
        if left == 0 {
            Err(Error::Fallback(format!("injected {} failure", hook.step())))
        } else {
            Ok(())
        }
    }
}

fn payload_of(t: &Tensor) -> Result<Arc<dyn Payload>> {
    t.payload()
        .ok_or_else(|| Error::Fallback(format!("{t:?} holds no test-backend payload")))
}

fn dev_payload(p: &Arc<dyn Payload>) -> Result<&DevPayload> {
    p.as_any()
        .downcast_ref::<DevPayload>()
        .ok_or_else(|| Error::Fallback("not a test-backend payload".into()))
}

impl Backend for TestBackend {
    fn to_cpu(&self, t: &Tensor, for_write: bool) -> Result<Tensor> {
        self.enter(Hook::ToCpu)?;
        if for_write {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        let p = payload_of(t)?;
        Ok(Tensor::from_array(dev_payload(&p)?.get()))
    }

    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        self.enter(Hook::FromCpu)?;
        let host = cpu.to_host()?;
        Ok(Tensor::foreign(
            device,
            Arc::new(DevPayload::new((*host).clone())),
        ))
    }

    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        self.enter(Hook::CopyFromCpu)?;
        let host = src.to_host()?;
        let p = payload_of(dst)?;
        dev_payload(&p)?.set((*host).clone());
        Ok(())
    }
}

/// A registered test backend: its key, its hooks (for the counters) and, if asked for, the
/// library that holds `cpu_fallback` as its backend fallback.
pub struct Dev {
    pub key: DispatchKey,
    pub hooks: Arc<TestBackend>,
    pub fallback: Option<Library>,
}

impl Dev {
    /// Registers a backend (its name unique in the process) without a fallback.
    pub fn new(prefix: &str) -> Dev {
        let hooks = Arc::new(TestBackend::new());
        let key = register_backend(&ns(prefix), hooks.clone()).expect("register backend");
        Dev {
            key,
            hooks,
            fallback: None,
        }
    }

    /// Registers a backend with `kernel` as its backend fallback.
    pub fn with_fallback(prefix: &str, kernel: KernelFunction) -> Dev {
        let mut dev = Dev::new(prefix);
        let mut lib = fallback_lib();
        lib.fallback(dev.key, kernel).expect("register fallback");
        dev.fallback = Some(lib);
        dev
    }

    /// Registers a backend with `cpu_fallback` as its backend fallback.
    pub fn with_cpu_fallback(prefix: &str) -> Dev {
        Dev::with_fallback(prefix, cpu_fallback())
    }

    /// Device index `index` of this backend.
    pub fn device(&self, index: u16) -> Device {
        Device::new(self.key, index)
    }

    /// A float64 tensor on index 0.
    pub fn tensor(&self, values: &[f64]) -> Tensor {
        self.tensor_at(0, arr(values))
    }

    /// A tensor of any dtype on a device index.
    pub fn tensor_at(&self, index: u16, array: impl Into<HostArray>) -> Tensor {
        Tensor::foreign(self.device(index), Arc::new(DevPayload::new(array.into())))
    }

    pub fn count(&self, hook: Hook) -> usize {
        self.hooks.count(hook)
    }
}

/// The test-backend payload object of a tensor (to check it is still the same object).
pub fn payload_ptr(t: &Tensor) -> *const () {
    Arc::as_ptr(&t.payload().expect("a payload")) as *const ()
}
