//! A tensor's making, reading and writing: its data, its slot, its version, its exports.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::error::Result;
use crate::key::DispatchKey;
use crate::shared::Shared;

use super::device::Device;
use super::host::{HostArray, TensorMeta};
use super::types::{
    nbytes_of, HostView, Payload, Slot, Tensor, TensorData, TensorInner, ASK_PAYLOAD, FOREIGN,
};

impl Tensor {
    /// A tensor on `device` holding `data`.
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let t = Tensor::new(native::DEVICE, cpu.data()); // same data, another device
    /// assert_eq!(t.device(), native::DEVICE);
    /// assert_eq!(t.describe(), "float64[2]");
    /// ```
    // Inlined: the data (an `Arc` for host memory) then goes from its maker's registers into
    // the allocation, not through this call's frame (a copy the processor stalls on).
    #[inline]
    pub fn new(device: Device, data: TensorData) -> Tensor {
        let nbytes = nbytes_of(&data);
        // Written where it is allocated (`Shared::new_with`), not built on the stack and
        // copied over.
        Tensor(Shared::new_with(|| TensorInner {
            device,
            nbytes: AtomicUsize::new(nbytes),
            data: RwLock::new(Slot { data, view: None }),
            replaced: AtomicBool::new(false),
            loan: OnceLock::new(),
            version: AtomicU64::new(0),
            view: None,
            exported: AtomicU8::new(0),
            kept: Mutex::new(None),
            viewed: AtomicBool::new(false),
            writes: OnceLock::new(),
        }))
    }

    /// A CPU tensor owning `array`.
    ///
    /// ```
    /// use boxfall::{Device, Tensor};
    /// let t = Tensor::from_array(ndarray::ArrayD::<i32>::zeros(vec![4]));
    /// assert_eq!(t.device(), Device::CPU);
    /// assert_eq!(t.describe(), "int32[4]");
    /// ```
    pub fn from_array(array: impl Into<HostArray>) -> Tensor {
        Tensor::host(Device::CPU, array.into())
    }

    /// A tensor on `device` holding host memory.
    ///
    /// ```
    /// use boxfall::{Device, DispatchKey, Tensor, tensor::HostArray};
    /// let t = Tensor::host(Device::new(DispatchKey::NATIVE, 0), HostArray::from(ndarray::ArrayD::<i64>::zeros(vec![3])));
    /// assert_eq!(t.host_array().unwrap().shape(), &[3]);
    /// ```
    // Inlined: the array (120 bytes) is then moved once, from where its maker built it into
    // the allocation, rather than copied into this call's frame first.
    #[inline]
    pub fn host(device: Device, array: HostArray) -> Tensor {
        Tensor::new(device, TensorData::Host(Arc::new(array)))
    }

    /// A tensor on `device` holding a backend payload.
    ///
    /// ```
    /// use boxfall::{native, tensor::Payload, Tensor};
    /// struct Handle;
    /// impl Payload for Handle {
    ///     fn as_any(&self) -> &dyn std::any::Any { self }
    ///     fn nbytes(&self) -> usize { 128 }
    /// }
    /// let t = Tensor::foreign(native::DEVICE, std::sync::Arc::new(Handle));
    /// assert!(t.host_array().is_none());
    /// assert_eq!(t.nbytes(), 128);
    /// ```
    pub fn foreign(device: Device, payload: Arc<dyn Payload>) -> Tensor {
        Tensor::new(device, TensorData::Foreign(payload))
    }

    /// The device.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert_eq!(t.device(), boxfall::native::DEVICE);
    /// assert_eq!(t.device().index, 0);
    /// ```
    #[inline]
    pub fn device(&self) -> Device {
        self.0.device
    }

    /// The device's dispatch key.
    ///
    /// ```
    /// use boxfall::{native, DispatchKey, Tensor};
    /// assert_eq!(native::tensor(ndarray::arr1(&[1.0]).into_dyn()).key(), DispatchKey::NATIVE);
    /// assert_eq!(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()).key(), DispatchKey::CPU);
    /// ```
    #[inline]
    pub fn key(&self) -> DispatchKey {
        self.0.device.key
    }

    /// Whether two handles are the same tensor.
    ///
    /// ```
    /// use boxfall::Tensor;
    /// let a = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let b = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(a.same(&a.clone()));
    /// assert!(!a.same(&b)); // equal values, different tensors
    /// ```
    #[inline]
    pub fn same(&self, other: &Tensor) -> bool {
        Shared::ptr_eq(&self.0, &other.0)
    }

    /// Whether this handle is the tensor's only one: graph mode keeps a handle of each pending
    /// tensor, and one that nothing else holds is no output of its graph.
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(t.is_only_handle());
    /// let u = t.clone();
    /// assert!(!t.is_only_handle());
    /// drop(u);
    /// assert!(t.is_only_handle());
    /// ```
    #[inline]
    pub fn is_only_handle(&self) -> bool {
        self.0.is_unique()
    }

    /// What the tensor holds now (a cheap clone of an `Arc`).
    ///
    /// ```
    /// use boxfall::{Device, Tensor};
    /// let t = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let view = Tensor::new(Device::CPU, t.data());
    /// assert!(std::sync::Arc::ptr_eq(&view.host_array().unwrap(), &t.host_array().unwrap())); // shared, not copied
    /// ```
    pub fn data(&self) -> TensorData {
        self.sync_view();
        self.0
            .data
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .data
            .clone()
    }

    /// A CPU tensor sharing this tensor's host memory, for a kernel that only reads it (the
    /// fallback's loan of a read-only argument). It is one handle for the tensor's whole life,
    /// holding the tensor's data as it is now (`set_data` writes the loan too), so lending a
    /// tensor again takes no lock and allocates nothing. `None` for a tensor without host
    /// memory.
    ///
    /// ```
    /// use boxfall::{native, Device, tensor::TensorData};
    /// let t = native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let loan = t.host_loan().unwrap();
    /// assert_eq!(loan.device(), Device::CPU);
    /// assert!(std::sync::Arc::ptr_eq(&loan.host_array().unwrap(), &t.host_array().unwrap()));
    /// assert!(t.host_loan().unwrap().same(&loan)); // lent again: the same handle
    /// t.set_data(TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[3.0]).into_dyn().into())));
    /// assert_eq!(loan.describe(), "float64[1]"); // the loan holds the tensor's data as it is
    /// loan.set_data(TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[9.0]).into_dyn().into())));
    /// assert_eq!(t.host_array().unwrap().as_f64().unwrap()[[0]], 3.0); // the tensor is not written
    /// assert!(std::sync::Arc::ptr_eq(&t.host_loan().unwrap().host_array().unwrap(), &t.host_array().unwrap()));
    /// ```
    pub fn host_loan(&self) -> Option<Tensor> {
        if !self.is_host() {
            return None;
        }
        self.sync_view();
        // A view whose values cannot be made is lent to no kernel (`view_failure` says why).
        if self.is_view() && self.view_failed() {
            return None;
        }
        if let Some(loan) = self.0.loan.get() {
            if loan.unchanged() {
                return Some(loan.clone());
            }
        }
        // The first loan, or one a kernel wrote into: made or put right under the read lock,
        // which `set_data` (taking the write lock) waits for, so no write is missed.
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        if !matches!(slot.data, TensorData::Host(_)) {
            return None;
        }
        let loan = self
            .0
            .loan
            .get_or_init(|| Tensor::new(Device::CPU, slot.data.clone()));
        let stale = (!loan.unchanged()).then(|| loan.hold(slot.data.clone()));
        let lent = loan.clone();
        drop(slot);
        drop(stale);
        Some(lent)
    }

    /// The tensor's loan ([`Tensor::host_loan`]) borrowed rather than counted, where it holds
    /// the tensor's data as it is now (the case of every loan but the first and one made after
    /// a write, which `host_loan` makes or puts right). It takes no lock and no count: a
    /// caller lending it for a call it holds the tensor through needs no handle of its own.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(t.kept_loan().is_none()); // never lent yet
    /// let loan = t.host_loan().unwrap();
    /// assert!(t.kept_loan().is_some_and(|l| l.same(&loan)));
    /// let two = boxfall::tensor::TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[2.0]).into_dyn().into()));
    /// t.set_data(two.clone());
    /// assert!(t.kept_loan().is_some_and(|l| l.same(&loan))); // the loan follows the tensor
    /// loan.set_data(two); // a write into the loan itself: `host_loan` puts it right first
    /// assert!(t.kept_loan().is_none());
    /// ```
    #[inline]
    pub fn kept_loan(&self) -> Option<&Tensor> {
        if !self.is_host() || self.view_is_stale() || self.has_exported_bools() {
            return None;
        }
        self.0.loan.get().filter(|l| l.unchanged())
    }

    /// Writes `data` in as this loan's tensor's data (its `set_data`); hands back what to drop
    /// once every lock is released.
    pub(super) fn hold(&self, data: TensorData) -> (TensorData, Option<HostView>) {
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        self.0.replaced.store(false, Ordering::Relaxed);
        self.bump_version();
        let view = slot.view.take();
        (std::mem::replace(&mut slot.data, data), view)
    }

    /// The view a foreign runtime keeps of this tensor's host memory, if one was set: the
    /// Python bindings keep their read-only NumPy view of a loan here, so a tensor lent again
    /// reaches a Python kernel without a new array. Gone once the data is replaced.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(t.host_view().is_none());
    /// t.set_host_view(Arc::new("a view"));
    /// assert_eq!(t.host_view().unwrap().downcast_ref::<&str>(), Some(&"a view"));
    /// t.set_data(t.data()); // a write: the view may no longer match
    /// assert!(t.host_view().is_none());
    /// ```
    pub fn host_view(&self) -> Option<HostView> {
        self.sync_view();
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        slot.view.clone()
    }

    /// `f` of the view [`Tensor::host_view`] gives, borrowed under the tensor's read lock
    /// rather than cloned out of it: no reference count is taken and dropped (two atomic
    /// operations, which the Python bindings' loan of a one-element tensor felt). `f` must be
    /// brief, and must not write this tensor (the lock is held while it runs).
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(t.with_host_view(|v| v.is_none()));
    /// t.set_host_view(std::sync::Arc::new(7_u32));
    /// assert_eq!(t.with_host_view(|v| v.and_then(|v| v.downcast_ref::<u32>()).copied()), Some(7));
    /// ```
    pub fn with_host_view<R>(&self, f: impl FnOnce(Option<&HostView>) -> R) -> R {
        self.sync_view();
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        f(slot.view.as_ref())
    }

    /// Keeps `view` with the tensor until its data is replaced (see [`Tensor::host_view`]).
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// t.set_host_view(std::sync::Arc::new(7_u32));
    /// assert_eq!(t.host_view().unwrap().downcast_ref::<u32>(), Some(&7));
    /// ```
    pub fn set_host_view(&self, view: HostView) {
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        let old = slot.view.replace(view);
        drop(slot);
        // A foreign object's drop may run foreign code: not under the lock.
        drop(old);
    }

    /// Counts a replacement of the data (the caller holds the write lock, which orders the
    /// writers: a plain load and store, no locked instruction).
    pub(super) fn bump_version(&self) {
        let v = self.0.version.load(Ordering::Relaxed);
        self.0.version.store(v.wrapping_add(1), Ordering::Release);
    }

    /// How many times the data was replaced (by `set_data`, or, for a loan, by a write of the
    /// tensor it is the loan of), read without a lock: a foreign runtime that keeps its own
    /// view of a tensor's data (as [`Tensor::host_view`] does, but outside the tensor) knows by
    /// it whether the view still sees the tensor's data.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let (v, loan) = (t.data_version(), t.host_loan().unwrap());
    /// let lent = loan.data_version();
    /// t.set_data(t.data());
    /// assert_ne!(t.data_version(), v);
    /// assert_ne!(loan.data_version(), lent); // the loan holds the new data too
    /// ```
    #[inline]
    pub fn data_version(&self) -> u64 {
        self.0.version.load(Ordering::Acquire)
    }

    /// Whether `loan` is this tensor's loan ([`Tensor::host_loan`]), read without a lock.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!t.has_loan(&t));
    /// let loan = t.host_loan().unwrap();
    /// assert!(t.has_loan(&loan));
    /// ```
    #[inline]
    pub fn has_loan(&self, loan: &Tensor) -> bool {
        self.0.loan.get().is_some_and(|l| l.same(loan))
    }

    /// Whether the data is still what the tensor was made with.
    pub(super) fn unchanged(&self) -> bool {
        !self.0.replaced.load(Ordering::Relaxed)
    }

    /// Replaces what the tensor holds (an in-place write).
    ///
    /// ```
    /// use boxfall::{tensor::TensorData, Tensor};
    /// let t = Tensor::from_array(ndarray::ArrayD::<f64>::zeros(vec![2]));
    /// let alias = t.clone();
    /// t.set_data(TensorData::Host(std::sync::Arc::new(ndarray::ArrayD::<f64>::ones(vec![3]).into())));
    /// assert_eq!(alias.describe(), "float64[3]"); // every handle sees the write
    /// ```
    pub fn set_data(&self, data: TensorData) {
        if self.0.view.is_some() {
            return self.set_view_data(data);
        }
        self.replace_data(data);
    }

    /// What `set_data` does to a tensor that is no view: its slot takes `data`.
    pub(super) fn replace_data(&self, data: TensorData) {
        let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        self.replace_locked(slot, data);
    }

    /// `set_data` of a view: its values written into its base (an error, which `set_data` cannot
    /// return, is logged; the fallback writes views with [`Tensor::write_view`], which returns it).
    #[cold]
    pub(super) fn set_view_data(&self, data: TensorData) {
        let src = Tensor::new(self.device(), data);
        if let Err(e) = self.write_view(&src) {
            log::error!(target: "boxfall", "a write through a view of {:?} was lost: {e}", self.0.view.as_ref().map(|v| &v.base));
        }
    }

    /// `set_data`, if the data was not replaced since [`data_version`](Self::data_version)
    /// read `version`: the check and the write under one lock, so a read-modify-write that
    /// read the data at `version` loses no other writer's update (false: someone wrote
    /// meanwhile, nothing was written; read again and redo). A view is written through its
    /// base by [`set_data`](Self::set_data), not here.
    ///
    /// ```
    /// use boxfall::tensor::TensorData;
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let v = t.data_version();
    /// assert!(t.set_data_if(v, t.data()));
    /// assert!(!t.set_data_if(v, t.data())); // the first write moved the version on
    /// ```
    pub fn set_data_if(&self, version: u64, data: TensorData) -> bool {
        let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        if self.0.version.load(Ordering::Relaxed) != version {
            return false;
        }
        self.replace_locked(slot, data);
        true
    }

    pub(super) fn replace_locked(
        &self,
        mut slot: std::sync::RwLockWriteGuard<'_, Slot>,
        data: TensorData,
    ) {
        // Exported memory is written where it is, so that NumPy's arrays of it see the write.
        let data = if self.0.exported.load(Ordering::Relaxed) != 0 {
            self.write_exported(&slot.data, data)
        } else {
            data
        };
        // Stored before the lock is released: whoever reads the new data after taking the
        // lock also sees its byte count.
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        self.0.replaced.store(true, Ordering::Relaxed);
        self.bump_version();
        let old_view = slot.view.take();
        // The loan follows under this tensor's lock (always taken before the loan's).
        let old_lent = self.0.loan.get().map(|loan| loan.hold(data.clone()));
        let old = std::mem::replace(&mut slot.data, data);
        drop(slot);
        // Dropped after the lock is released: the old data may be a foreign payload whose drop
        // runs foreign code (a Python object's finalizer) that could read this tensor.
        drop((old, old_view, old_lent));
    }

    /// The same data on `device`. When this handle is the tensor's only one, the tensor itself
    /// moves (nobody else can see it change, and nothing is allocated); otherwise a new tensor
    /// shares the data.
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let kept = cpu.clone();
    /// let shared = cpu.into_device(native::DEVICE); // `kept` still sees a CPU tensor
    /// assert_eq!((shared.device(), kept.device()), (native::DEVICE, boxfall::Device::CPU));
    /// let alone = Tensor::from_array(ndarray::arr1(&[3.0]).into_dyn()).into_device(native::DEVICE);
    /// assert_eq!(alone.device(), native::DEVICE);
    /// ```
    pub fn into_device(mut self, device: Device) -> Tensor {
        // One load, where `Arc::get_mut` took a locked compare-exchange (see `Shared`).
        match self.0.get_mut() {
            Some(inner) => {
                inner.device = device;
                self
            }
            None => Tensor::new(device, self.data()),
        }
    }

    /// Whether the tensor holds host memory (read without taking the tensor's lock).
    ///
    /// ```
    /// use boxfall::{native, tensor::Payload, Tensor};
    /// struct Remote;
    /// impl Payload for Remote { fn as_any(&self) -> &dyn std::any::Any { self } }
    /// assert!(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()).is_host());
    /// assert!(!Tensor::foreign(native::DEVICE, std::sync::Arc::new(Remote)).is_host());
    /// ```
    #[inline]
    pub fn is_host(&self) -> bool {
        self.0.nbytes.load(Ordering::Relaxed) & FOREIGN == 0
    }

    /// The host memory, if the tensor holds host memory.
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// assert_eq!(t.host_array().unwrap().as_f64().unwrap().sum(), 3.0);
    /// ```
    pub fn host_array(&self) -> Option<Arc<HostArray>> {
        if self.is_view() && self.view_failure().is_some() {
            return None;
        }
        match self.data() {
            TensorData::Host(a) => Some(a),
            TensorData::Foreign(_) => None,
        }
    }

    /// The host memory, or a host copy of a foreign payload that can give one.
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::ArrayD::<f64>::ones(vec![2]));
    /// assert_eq!(t.to_host().unwrap().nbytes(), 16);
    /// ```
    pub fn to_host(&self) -> Result<Arc<HostArray>> {
        if let Some(e) = self.view_failure() {
            return Err(e);
        }
        match self.data() {
            TensorData::Host(a) => Ok(a),
            TensorData::Foreign(p) => Ok(Arc::new(p.to_host()?)),
        }
    }

    /// The payload, if the tensor holds one.
    ///
    /// ```
    /// use boxfall::{native, tensor::Payload, Tensor};
    /// struct Remote(u64);
    /// impl Payload for Remote {
    ///     fn as_any(&self) -> &dyn std::any::Any { self }
    /// }
    /// let t = Tensor::foreign(native::DEVICE, std::sync::Arc::new(Remote(7)));
    /// assert_eq!(t.payload().unwrap().as_any().downcast_ref::<Remote>().unwrap().0, 7);
    /// assert!(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()).payload().is_none());
    /// ```
    pub fn payload(&self) -> Option<Arc<dyn Payload>> {
        match self.data() {
            TensorData::Host(_) => None,
            TensorData::Foreign(p) => Some(p),
        }
    }

    /// Bytes held.
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::ArrayD::<f32>::zeros(vec![3]));
    /// assert_eq!(t.nbytes(), 3 * 4);
    /// ```
    #[inline]
    pub fn nbytes(&self) -> usize {
        match self.0.nbytes.load(Ordering::Relaxed) {
            ASK_PAYLOAD => self.payload_nbytes(),
            known => known & !FOREIGN,
        }
    }

    /// `nbytes` of a payload whose size may change, asked each time.
    #[cold]
    pub(super) fn payload_nbytes(&self) -> usize {
        // A payload may need a foreign runtime's lock (Python's GIL): `data` clones it, so it
        // is never asked while this tensor's lock is held.
        match self.data() {
            TensorData::Host(a) => a.nbytes(),
            TensorData::Foreign(p) => p.nbytes(),
        }
    }

    /// Dtype and shape, where they are known (host memory, or a payload that gives them).
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::ArrayD::<f64>::ones(vec![2, 3]));
    /// assert_eq!(t.meta().unwrap().shape, vec![2, 3]);
    /// ```
    pub fn meta(&self) -> Option<TensorMeta> {
        match self.data() {
            TensorData::Host(a) => Some(TensorMeta::of_host(&a)),
            TensorData::Foreign(p) => p.meta(),
        }
    }

    /// Dtype and shape, for logs.
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::ArrayD::<f64>::ones(vec![2, 3]));
    /// assert_eq!(t.describe(), "float64[2, 3]");
    /// ```
    pub fn describe(&self) -> String {
        match self.data() {
            TensorData::Host(a) => format!("{}{:?}", a.dtype().name(), a.shape()),
            TensorData::Foreign(p) => p.describe(),
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}, {})", self.device(), self.describe())
    }
}
