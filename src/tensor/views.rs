//! Views of a device tensor: a base and a description, synced when read, written through.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::error::{Error, Result};
use crate::shared::Shared;

use super::types::{
    DeviceView, Payload, Slot, Tensor, TensorData, TensorInner, ViewLink, ViewOps, COPIES_BASE,
    FOREIGN, MADE_ON_HOST, NEVER_SYNCED, SHARES_BASE,
};

use super::residency::HostOnly;

impl Tensor {
    /// A view of `base` (which is no view itself: a view of a view is described from the
    /// first base): a tensor on `base`'s device whose values are what `ops` makes of
    /// `base`'s, now and after any write of `base`, and whose writes `ops` writes into
    /// `base`. Nothing is moved or copied to make it: the values are made when first read
    /// (again after a write of the base). `nbytes` is the view's byte count.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use boxfall::{tensor::{TensorData, ViewOps}, Device, Result, Tensor};
    /// # struct Same;
    /// # impl ViewOps for Same {
    /// #     fn as_any(&self) -> &dyn std::any::Any { self }
    /// #     fn materialize(&self, base: &Tensor, _: Device) -> Result<TensorData> { Ok(TensorData::Host(base.to_host()?)) }
    /// #     fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> { base.set_data(TensorData::Host(src.to_host()?)); Ok(()) }
    /// # }
    /// let base = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let v = Tensor::view_of(&base, Arc::new(Same), 8).unwrap();
    /// assert!(v.is_view() && v.view_base().unwrap().same(&base) && v.nbytes() == 8);
    /// assert!(Tensor::view_of(&v, Arc::new(Same), 8).is_err()); // described from `base` instead
    /// ```
    pub fn view_of(base: &Tensor, ops: Arc<dyn ViewOps>, nbytes: usize) -> Result<Tensor> {
        if base.is_view() {
            return Err(Error::Fallback(
                "a view is made of its base's base (the description starts from it)".into(),
            ));
        }
        base.0.viewed.store(true, Ordering::Relaxed);
        let flag = if base.is_host() { 0 } else { FOREIGN };
        let data = base
            .0
            .data
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .data
            .clone();
        Ok(Tensor(Shared::new_with(|| TensorInner {
            device: base.device(),
            nbytes: AtomicUsize::new((nbytes & !FOREIGN) | flag),
            // A stand-in of the right kind (host memory or a payload), never read: the slot is
            // made from the base before any read (`sync_view`).
            data: RwLock::new(Slot { data, view: None }),
            replaced: AtomicBool::new(false),
            loan: OnceLock::new(),
            version: AtomicU64::new(0),
            view: Some(Box::new(ViewLink {
                base: base.clone(),
                ops,
                synced: AtomicU64::new(NEVER_SYNCED),
                on_device: AtomicU8::new(MADE_ON_HOST),
                unsaved: AtomicBool::new(false),
                pins: AtomicU32::new(0),
                failure: Mutex::new(None),
            })),
            exported: AtomicU8::new(0),
            kept: Mutex::new(None),
            viewed: AtomicBool::new(false),
            writes: OnceLock::new(),
        })))
    }

    /// Why this view's values cannot be made from its base now (its base was resized, the
    /// memory to make them is not there), after trying again: an error naming the view's
    /// operators, which the reads that can fail raise ([`Tensor::to_host`], Native's loans)
    /// rather than read stale values. `None` for a view that could be made and for a tensor
    /// that is no view.
    ///
    /// ```
    /// assert!(boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).view_failure().is_none());
    /// ```
    pub fn view_failure(&self) -> Option<Error> {
        let v = self.0.view.as_ref()?;
        self.sync_view();
        // Cleared by the next slot made: set only while the view cannot be made.
        let failure = v.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure.as_ref().map(|m| Error::Fallback(m.clone()))
    }

    /// Whether this view's slot could not be made at its last try (`view_failure` says why).
    #[cold]
    pub(super) fn view_failed(&self) -> bool {
        self.0.view.as_ref().is_some_and(|v| {
            v.failure
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some()
        })
    }

    /// Whether the tensor is a view ([`Tensor::view_of`]).
    ///
    /// ```
    /// assert!(!boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).is_view());
    /// ```
    #[inline]
    pub fn is_view(&self) -> bool {
        self.0.view.is_some()
    }

    /// Whether a view of this tensor was ever made ([`Tensor::view_of`]; the views may be
    /// gone since): a write of it may be seen through a view.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use boxfall::{tensor::{TensorData, ViewOps}, Device, Result, Tensor};
    /// # struct Same;
    /// # impl ViewOps for Same {
    /// #     fn as_any(&self) -> &dyn std::any::Any { self }
    /// #     fn materialize(&self, base: &Tensor, _: Device) -> Result<TensorData> { Ok(TensorData::Host(base.to_host()?)) }
    /// #     fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> { base.set_data(TensorData::Host(src.to_host()?)); Ok(()) }
    /// # }
    /// let base = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!base.was_viewed());
    /// let _v = Tensor::view_of(&base, Arc::new(Same), 8).unwrap();
    /// assert!(base.was_viewed());
    /// ```
    #[inline]
    pub fn was_viewed(&self) -> bool {
        self.0.viewed.load(Ordering::Relaxed)
    }

    /// The base of a view.
    ///
    /// ```
    /// assert!(boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).view_base().is_none());
    /// ```
    pub fn view_base(&self) -> Option<&Tensor> {
        self.0.view.as_ref().map(|v| &v.base)
    }

    /// The description of a view.
    ///
    /// ```
    /// assert!(boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).view_ops().is_none());
    /// ```
    pub fn view_ops(&self) -> Option<&Arc<dyn ViewOps>> {
        self.0.view.as_ref().map(|v| &v.ops)
    }

    /// Writes `src`'s values (a tensor on the CPU or on this view's device, of the view's
    /// shape and dtype) through this view into its base, which every view of the base then
    /// sees. An error leaves the base as it was (the description's `write` is all or nothing).
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(t.write_view(&t).is_err()); // no view
    /// ```
    pub fn write_view(&self, src: &Tensor) -> Result<()> {
        let Some(v) = self.0.view.as_ref() else {
            return Err(Error::Fallback(format!(
                "a tensor on {} that is no view was written as one",
                self.device()
            )));
        };
        v.ops.write(&v.base, src)?;
        // The view holds what was written, where that is host memory as its own slot is: it
        // need not be made again from the base.
        if self.is_host() && src.is_host() {
            let version = v.base.data_version();
            self.replace_data(src.data());
            v.synced.store(version, Ordering::Release);
        } else {
            v.synced.store(NEVER_SYNCED, Ordering::Release);
        }
        Ok(())
    }

    /// Counts a write that changed the tensor's values where they are (a backend's hook that
    /// writes a payload in place), so that its views make their values again.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let v = t.data_version();
    /// t.note_write();
    /// assert_ne!(t.data_version(), v);
    /// ```
    pub fn note_write(&self) {
        let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        self.bump_version();
        // A view whose slot is a device payload made of its values on the host (`from_cpu`:
        // the backend has no `view` hook, or it declined) holds a copy of its part of the
        // base, as a gathered copy does: read from the slot itself, which a read through
        // `data` would make again from the base, losing the write.
        let host_made_payload = matches!(&slot.data, TensorData::Foreign(p) if p.as_any().downcast_ref::<HostOnly>().is_none());
        drop(slot);
        if let Some(v) = self.0.view.as_ref() {
            match v.on_device.load(Ordering::Acquire) {
                // A device view shares its base's payload: the base was written, its host
                // copy is stale, and its other views make their values again.
                SHARES_BASE => v.base.note_write(),
                // A device copy: the base does not hold the write yet, and its host copy is
                // still its values, from which `resident::settle` writes the copy's into it.
                COPIES_BASE => v.unsaved.store(true, Ordering::Release),
                _ if host_made_payload => v.unsaved.store(true, Ordering::Release),
                _ => {}
            }
        }
    }

    /// Puts `data`, the new device data a backend's kernel or hook made for this tensor
    /// instead of writing its payload where it is (a device whose memory is immutable, as a
    /// `jax.Array` is), in the tensor's place as a write of it: the data version moves on,
    /// so its host copy is stale and its views make their values again. A view's slot takes
    /// it as a device copy of its part of the base not yet written there
    /// ([`crate::resident::settle`] writes it into the base after the kernel). A tensor
    /// whose host memory is exported keeps it as the payload made for the running kernel,
    /// which `settle` copies into that memory.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let v = t.data_version();
    /// t.put_written(boxfall::native::tensor(ndarray::arr1(&[2.0]).into_dyn()).data());
    /// assert_ne!(t.data_version(), v);
    /// assert_eq!(t.to_host().unwrap().as_f64().unwrap()[[0]], 2.0);
    /// ```
    pub fn put_written(&self, data: TensorData) {
        if let Some(v) = self.0.view.as_ref() {
            self.replace_data(data);
            v.on_device.store(COPIES_BASE, Ordering::Release);
            v.unsaved.store(true, Ordering::Release);
            return;
        }
        if self.host_exported().is_some() && self.install_exported_payload(data.clone()) {
            let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
            self.bump_version();
            drop(slot);
            return;
        }
        self.set_data(data);
    }

    /// Whether this view's values are a device copy of its part of its base's payload
    /// ([`DeviceView::shares`] false): a backend kernel's write of it reaches the base only
    /// when [`crate::resident::settle`] writes it there. False for a tensor that is no view.
    ///
    /// ```
    /// assert!(!boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).is_device_copy());
    /// ```
    pub fn is_device_copy(&self) -> bool {
        self.0
            .view
            .as_ref()
            .is_some_and(|v| v.on_device.load(Ordering::Acquire) == COPIES_BASE)
    }

    /// The payload of a view that is a device copy of its base's, if a backend kernel wrote it
    /// ([`Tensor::note_write`]) since it was made and nobody took it since: what is to be
    /// written into the base. The slot's data as it is, not made again from the base (whose
    /// version has not moved for the write).
    pub(crate) fn take_unsaved_view(&self) -> Option<TensorData> {
        let v = self.0.view.as_ref()?;
        if !v.unsaved.swap(false, Ordering::AcqRel) {
            return None;
        }
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        Some(slot.data.clone())
    }

    /// Marks a view's slot as made from no version of its base, so that it is made again at
    /// its next read: a device copy whose write could not be written into the base is
    /// dropped, as the base is left, rather than seen through the view alone.
    pub(crate) fn forget_view_slot(&self) {
        if let Some(v) = self.0.view.as_ref() {
            v.synced.store(NEVER_SYNCED, Ordering::Release);
        }
    }

    /// Puts `data` (a payload made now of this view's values, whose base's host memory is
    /// exported) in the view's slot for a backend kernel about to run, and keeps it there until
    /// [`Tensor::unpin_view_payload`]: a view of such a base is otherwise made again at every
    /// read (NumPy may write the memory at any time), so the kernel would find its payload gone.
    /// A kernel's write of it is written into the base by [`crate::resident::settle`]. False
    /// (nothing done) for a tensor that is no view.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!t.pin_view_payload(t.data())); // no view
    /// ```
    pub fn pin_view_payload(&self, data: TensorData) -> bool {
        let Some(v) = self.0.view.as_ref() else {
            return false;
        };
        let version = v.base.data_version();
        v.pins.fetch_add(1, Ordering::AcqRel);
        self.replace_data(data);
        v.on_device.store(MADE_ON_HOST, Ordering::Release);
        v.synced.store(version, Ordering::Release);
        true
    }

    /// Ends one pin of [`Tensor::pin_view_payload`] (a kernel ended); true where there was one.
    /// The last one leaves the slot to be made again from the base at its next read.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!t.unpin_view_payload());
    /// ```
    pub fn unpin_view_payload(&self) -> bool {
        let Some(v) = self.0.view.as_ref() else {
            return false;
        };
        let unpinned = v
            .pins
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if unpinned {
            v.synced.store(NEVER_SYNCED, Ordering::Release);
        }
        unpinned
    }

    /// Whether this view's slot is pinned for a running kernel ([`Tensor::pin_view_payload`]).
    ///
    /// ```
    /// assert!(!boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).is_pinned_view());
    /// ```
    pub fn is_pinned_view(&self) -> bool {
        self.0
            .view
            .as_ref()
            .is_some_and(|v| v.pins.load(Ordering::Acquire) != 0)
    }

    /// Whether this view's values are a device view of its base's payload
    /// ([`ViewOps::on_device`]), sharing it or a copy; false for a tensor that is no view.
    ///
    /// ```
    /// assert!(!boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).is_device_view());
    /// ```
    pub fn is_device_view(&self) -> bool {
        self.0
            .view
            .as_ref()
            .is_some_and(|v| v.on_device.load(Ordering::Acquire) != MADE_ON_HOST)
    }

    /// Makes a stale view's slot again as a device view of its base's payload
    /// ([`ViewOps::on_device`]), where the base's values are on the device only (no host
    /// memory, no current host copy) and its backend makes one: what a kernel of the backend
    /// reading the view needs, with nothing crossing. True where it did; false (nothing done)
    /// for a tensor that is no view, a view that is current, a base with host values (the
    /// view's are made from them when read) and a backend that makes no device view. The
    /// backend's error (a view of the wrong shape) is returned, and the view stays stale.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!t.sync_device_view().unwrap()); // no view
    /// ```
    pub fn sync_device_view(&self) -> Result<bool> {
        let Some(v) = self.0.view.as_ref() else {
            return Ok(false);
        };
        let base = &v.base;
        if !self.view_is_stale() || base.is_host() || base.is_exported() {
            return Ok(false);
        }
        // Read first: a write of the base meanwhile leaves the view stale, to be made again.
        let version = base.data_version();
        if base.host_copy().is_some() {
            return Ok(false);
        }
        let Some(made) = v.ops.on_device(base, self.device())? else {
            return Ok(false);
        };
        self.replace_data(made.data);
        v.made_on_device(made.shares);
        v.synced.store(version, Ordering::Release);
        Ok(true)
    }

    /// Puts `made`, a device view of this view's base made from the base's payload
    /// ([`ViewOps::on_device`]), in place of the host-only payload `was` (the same values),
    /// if the view still holds it: as [`Tensor::install_payload`], and the view is marked as
    /// sharing its base's payload or copying it ([`DeviceView::shares`]). False (nothing done)
    /// for a tensor that is no view, or was made again since.
    ///
    /// ```
    /// use boxfall::tensor::DeviceView;
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu.clone(), boxfall::native::DEVICE);
    /// let was = t.payload().unwrap();
    /// assert!(!t.install_device_view(&was, DeviceView { data: t.data(), shares: true })); // no view
    /// ```
    pub fn install_device_view(&self, was: &Arc<dyn Payload>, made: DeviceView) -> bool {
        let Some(v) = self.0.view.as_ref() else {
            return false;
        };
        if !self.install_payload(was, made.data) {
            return false;
        }
        v.made_on_device(made.shares);
        true
    }

    /// Whether this view's slot was made from an older version of its base (false for a
    /// tensor that is no view).
    #[inline(always)]
    pub(super) fn view_is_stale(&self) -> bool {
        match &self.0.view {
            None => false,
            // NumPy writes an exported base where it is, moving no version: every read makes
            // the view again.
            Some(v) => {
                v.synced.load(Ordering::Acquire) != v.base.data_version()
                    || (v.base.is_exported() && v.pins.load(Ordering::Acquire) == 0)
            }
        }
    }

    /// Makes a view's slot from its base again if the base was written since (and puts right
    /// exported bool memory that NumPy may have written, before it is read).
    #[inline(always)]
    pub(super) fn sync_view(&self) {
        if self.view_is_stale() {
            self.refresh_view();
        }
        if self.has_exported_bools() {
            self.normalize_exported_bools();
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn refresh_view(&self) {
        let Some(v) = self.0.view.as_ref() else {
            return;
        };
        // Read first: a write of the base meanwhile leaves the view stale, to be made again.
        let version = v.base.data_version();
        match v.ops.materialize(&v.base, self.device()) {
            Ok(data) => {
                self.replace_data(data);
                v.on_device.store(MADE_ON_HOST, Ordering::Release);
                v.synced.store(version, Ordering::Release);
                v.failure.lock().unwrap_or_else(|e| e.into_inner()).take();
            }
            // The slot is stale (it holds older values, or a stand-in): the failure is kept,
            // and every read that can fail raises it (`view_failure`).
            Err(e) => {
                let what = format!(
                    "{} of a tensor on {} ({}) cannot be made from its base: {e}",
                    v.ops.describe(),
                    self.device(),
                    v.base.describe()
                );
                *v.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(what);
            }
        }
    }
}
