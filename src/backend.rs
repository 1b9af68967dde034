//! Backends: the hooks that move a backend's tensors to the CPU and back, which is all the CPU
//! fallback needs to know of a device. Registered once per backend key, read lock-free.

use std::sync::{Arc, OnceLock};

use crate::error::Result;
use crate::key::{register_backend_key, DispatchKey, NUM_KEYS};
use crate::tensor::{Device, Tensor};

/// A device's transfer hooks.
///
/// ```
/// use boxfall::{backend::Backend, Device, Tensor, Result};
/// struct Host;
/// impl Backend for Host {
///     fn to_cpu(&self, t: &Tensor, _for_write: bool) -> Result<Tensor> { Ok(Tensor::new(Device::CPU, t.data())) }
///     fn from_cpu(&self, t: &Tensor, device: Device) -> Result<Tensor> { Ok(Tensor::new(device, t.data())) }
///     fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> { dst.set_data(src.data()); Ok(()) }
/// }
/// let key = boxfall::backend::register_backend("DocHostBackend", std::sync::Arc::new(Host)).unwrap();
/// assert!(boxfall::backend::backend(key).is_some());
/// ```
pub trait Backend: Send + Sync + 'static {
    /// A CPU tensor with `t`'s values. With `for_write`, the kernel will write into it, so it
    /// must not share memory with `t` (the fallback writes it back only when the kernel succeeds).
    fn to_cpu(&self, t: &Tensor, for_write: bool) -> Result<Tensor>;

    /// Whether `to_cpu_many` is a real batched transfer (the fallback then moves all of a
    /// call's tensors with one call of it; otherwise it calls `to_cpu` per tensor).
    fn batches_transfers(&self) -> bool {
        false
    }

    /// Moves all of a call's tensors at once; a backend with a batched transfer overrides it
    /// (and `batches_transfers`).
    fn to_cpu_many(&self, tensors: &[(&Tensor, bool)]) -> Result<Vec<Tensor>> {
        tensors.iter().map(|(t, w)| self.to_cpu(t, *w)).collect()
    }

    /// A tensor on `device` with the CPU tensor's values.
    // Named as the Python hook is (`from_cpu=`), which every backend author meets first.
    #[allow(clippy::wrong_self_convention)]
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor>;

    /// `from_cpu` of a CPU result that the caller owns and gives up (the fallback's results):
    /// a backend whose device tensors hold host memory can take the tensor itself
    /// ([`Tensor::into_device`]). The default calls `from_cpu`.
    #[allow(clippy::wrong_self_convention)]
    fn from_cpu_owned(&self, cpu: Tensor, device: Device) -> Result<Tensor> {
        self.from_cpu(&cpu, device)
    }

    /// Writes the CPU tensor's values (and shape) into the device tensor `dst`.
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()>;
}

/// A registered backend: its hooks, and whether it batches transfers, which the fallback asks
/// on every call (asked of the hooks once, here, rather than by a virtual call each time).
#[derive(Clone, Copy)]
pub(crate) struct Registered {
    pub(crate) hooks: &'static dyn Backend,
    pub(crate) batches: bool,
    /// The leaked `Arc` itself, never read: kept so that the hooks stay reachable for
    /// LeakSanitizer. `hooks` alone points one past the end of the allocation when the backend
    /// is a zero-sized type (as `NativeBackend` is), which LeakSanitizer reports as a leak.
    _owner: &'static Arc<dyn Backend>,
}

impl Registered {
    /// A backend's hooks live as long as its key, that is for the process: they are leaked
    /// once, so that reading them is a plain load (no reference count, no `Arc` offset).
    fn new(hooks: Arc<dyn Backend>) -> Registered {
        let owner: &'static Arc<dyn Backend> = Box::leak(Box::new(hooks));
        let hooks: &'static dyn Backend = &**owner;
        Registered {
            hooks,
            batches: hooks.batches_transfers(),
            _owner: owner,
        }
    }
}

/// One cell per key: a backend key gets its hooks once, when it is registered, and keeps them,
/// so a read is one acquire load and no reference count moves.
static TABLE: [OnceLock<Registered>; NUM_KEYS] = [const { OnceLock::new() }; NUM_KEYS];

/// The registered backend of `key`: Native's from the first look, any other's once registered.
#[inline]
pub(crate) fn registered(key: DispatchKey) -> Option<&'static Registered> {
    let cell = TABLE.get(key.index())?;
    if key == DispatchKey::NATIVE {
        return Some(cell.get_or_init(|| Registered::new(Arc::new(crate::native::NativeBackend))));
    }
    cell.get()
}

/// Registers a backend key with its hooks; later backends rank above earlier ones.
///
/// ```
/// use std::sync::Arc;
/// use boxfall::{backend::{backend, register_backend}, native::NativeBackend, DispatchKey};
/// let key = register_backend("DocRegisterBackend", Arc::new(NativeBackend)).unwrap();
/// assert!(key.is_backend() && key > DispatchKey::NATIVE);
/// assert!(backend(key).is_some());
/// ```
pub fn register_backend(name: &str, hooks: Arc<dyn Backend>) -> Result<DispatchKey> {
    let key = register_backend_key(name)?;
    // A fresh key: its cell is empty (key registration refuses a name twice).
    if let Some(cell) = TABLE.get(key.index()) {
        let _ = cell.set(Registered::new(hooks));
    }
    Ok(key)
}

/// The hooks of a backend key.
///
/// ```
/// assert!(boxfall::backend::backend(boxfall::DispatchKey::NATIVE).is_some());
/// assert!(boxfall::backend::backend(boxfall::DispatchKey::CPU).is_none());
/// ```
#[inline]
pub fn backend(key: DispatchKey) -> Option<&'static dyn Backend> {
    registered(key).map(|r| r.hooks)
}
