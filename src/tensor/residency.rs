//! Where a tensor's values are: host copies kept beside a backend's payload (`Residency`),
//! and `HostOnly`, the payload of values made on the host for a device.

use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};
use crate::key::DispatchKey;

use super::device::{Device, Residency};
use super::host::{HostArray, TensorMeta};
use super::types::{nbytes_of, Origin, Payload, Tensor, TensorData, HOST_EXPORTED};

/// The payload of a device tensor whose values are on the host only (residency): a result the
/// CPU fallback left on the host side, whose device payload the backend's `from_cpu` makes
/// when the device first needs it ([`Tensor::host_only`]). It answers for its values (byte
/// count, dtype and shape, a host copy) from the CPU tensor it holds.
///
/// ```
/// use boxfall::{native, tensor::HostOnly, Tensor};
/// let cpu = Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
/// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
/// let p = t.payload().unwrap();
/// assert!(p.as_any().downcast_ref::<HostOnly>().unwrap().cpu().same(&cpu));
/// assert_eq!((p.nbytes(), p.describe()), (16, "float64[2]".to_string()));
/// ```
pub struct HostOnly {
    pub(super) cpu: Tensor,
    /// The operator whose result it is (`Tensor::note_made_by`), named by an error when its
    /// payload cannot be made later.
    pub(super) made_by: OnceLock<Arc<dyn Origin>>,
}

impl HostOnly {
    /// The CPU tensor holding the values.
    ///
    /// ```
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu.clone(), boxfall::native::DEVICE);
    /// let p = t.payload().unwrap();
    /// assert!(p.as_any().downcast_ref::<boxfall::tensor::HostOnly>().unwrap().cpu().same(&cpu));
    /// ```
    pub fn cpu(&self) -> &Tensor {
        &self.cpu
    }
}

impl Payload for HostOnly {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn nbytes(&self) -> usize {
        self.cpu.nbytes()
    }
    // The CPU tensor is never written (it is a host copy), so its size is fixed.
    fn fixed_nbytes(&self) -> Option<usize> {
        Some(self.cpu.nbytes())
    }
    fn to_host(&self) -> Result<HostArray> {
        self.cpu.to_host()?.try_clone()
    }
    fn describe(&self) -> String {
        self.cpu.describe()
    }
    fn meta(&self) -> Option<TensorMeta> {
        self.cpu.meta()
    }
}

// Residency: a device tensor's host copy, kept beside its payload and tagged with the data
// version it holds the values of, and a device tensor whose values are on the host only.
// Kept apart from the host-memory code above: a tensor of host memory never has either.
impl Tensor {
    /// A tensor on `device` whose values are `cpu`'s and stay on the host until the device
    /// needs them (a [`HostOnly`] payload): what a lazy backend's `from_cpu_owned` gives for
    /// the CPU fallback's results. The backend's `from_cpu` makes its device payload when it
    /// is asked for (`boxfall::resident::materialize`).
    ///
    /// ```
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu.clone(), boxfall::native::DEVICE);
    /// assert!(t.is_host_only() && !t.is_host() && t.nbytes() == 16);
    /// assert!(t.host_copy().unwrap().same(&cpu));
    /// ```
    pub fn host_only(cpu: Tensor, device: Device) -> Tensor {
        Tensor::foreign(
            device,
            Arc::new(HostOnly {
                cpu,
                made_by: OnceLock::new(),
            }),
        )
    }

    /// Records `origin` (the operator whose result this is) on a tensor whose values are on
    /// the host only, for the error of a payload that cannot be made later
    /// ([`Tensor::made_by`]); nothing for any other tensor.
    ///
    /// ```
    /// use std::sync::Arc;
    /// struct Named;
    /// impl boxfall::tensor::Origin for Named { fn name(&self) -> String { "demo::f".into() } }
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu, boxfall::native::DEVICE);
    /// t.note_made_by(Arc::new(Named));
    /// assert_eq!(t.made_by().as_deref(), Some("demo::f"));
    /// ```
    pub fn note_made_by(&self, origin: Arc<dyn Origin>) {
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        if let TensorData::Foreign(p) = &slot.data {
            if let Some(h) = p.as_any().downcast_ref::<HostOnly>() {
                let _ = h.made_by.set(origin);
            }
        }
    }

    /// The name of the operator whose result this host-only tensor is, where it was recorded
    /// ([`Tensor::note_made_by`]).
    ///
    /// ```
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(boxfall::Tensor::host_only(cpu, boxfall::native::DEVICE).made_by().is_none());
    /// ```
    pub fn made_by(&self) -> Option<String> {
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        match &slot.data {
            TensorData::Foreign(p) => p
                .as_any()
                .downcast_ref::<HostOnly>()
                .and_then(|h| h.made_by.get().map(|o| o.name())),
            TensorData::Host(_) => None,
        }
    }

    /// Whether the tensor's values are on the host only ([`Tensor::host_only`]).
    ///
    /// ```
    /// assert!(!boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).is_host_only());
    /// ```
    #[inline]
    pub fn is_host_only(&self) -> bool {
        !self.is_host() && self.host_only_values().is_some()
    }

    /// The CPU tensor of a tensor whose values are on the host only.
    ///
    /// ```
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu.clone(), boxfall::native::DEVICE);
    /// assert!(t.host_only_values().unwrap().same(&cpu));
    /// ```
    pub fn host_only_values(&self) -> Option<Tensor> {
        match self.data() {
            TensorData::Foreign(p) => p.as_any().downcast_ref::<HostOnly>().map(|h| h.cpu.clone()),
            TensorData::Host(_) => None,
        }
    }

    /// The tensor's current values on the host, where it has them without asking its backend:
    /// the values of a host-only tensor, or the host copy kept beside its payload while its data
    /// version is still the one the copy was made at. `None` for a tensor of host memory (which
    /// is its own host copy) and for a device tensor without a current copy.
    ///
    /// ```
    /// use boxfall::{native, tensor::Payload, Tensor};
    /// struct Remote;
    /// impl Payload for Remote { fn as_any(&self) -> &dyn std::any::Any { self } }
    /// let t = Tensor::foreign(native::DEVICE, std::sync::Arc::new(Remote));
    /// assert!(t.host_copy().is_none());
    /// let copy = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// t.keep_host_copy(t.data_version(), copy.clone());
    /// assert!(t.host_copy().unwrap().same(&copy));
    /// t.note_write(); // a write: the copy is stale
    /// assert!(t.host_copy().is_none());
    /// ```
    pub fn host_copy(&self) -> Option<Tensor> {
        if self.is_host() {
            return None;
        }
        if let Some(cpu) = self.host_exported() {
            return Some(cpu);
        }
        // A view whose values cannot be made from its base now (an `out=` argument resized
        // it) has no current copy: what was kept is the old base's, and the read that makes
        // the view's values says why they cannot be made.
        if self.is_view() && self.view_failure().is_some() {
            return None;
        }
        // Read first: it brings a view's slot up to date with its base.
        if let Some(cpu) = self.host_only_values() {
            return Some(cpu);
        }
        let kept = self.0.kept.lock().unwrap_or_else(|e| e.into_inner());
        match &*kept {
            Some((v, cpu)) if *v == self.data_version() => Some(cpu.clone()),
            _ => None,
        }
    }

    /// Keeps `cpu` (a CPU tensor nobody writes) as the host copy of this device tensor's
    /// values at data version `version`, read before the values were: kept only while the
    /// version is still that (a write since, which the copy may have missed, keeps nothing).
    /// A tensor of host memory keeps nothing.
    ///
    /// ```
    /// use boxfall::{native, tensor::Payload, Tensor};
    /// struct Remote;
    /// impl Payload for Remote { fn as_any(&self) -> &dyn std::any::Any { self } }
    /// let t = Tensor::foreign(native::DEVICE, std::sync::Arc::new(Remote));
    /// let v = t.data_version();
    /// t.note_write();
    /// t.keep_host_copy(v, Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()));
    /// assert!(t.host_copy().is_none()); // read before the write: not kept
    /// ```
    pub fn keep_host_copy(&self, version: u64, cpu: Tensor) {
        // Exported host memory is the values themselves, kept in the same slot.
        if self.is_host() || self.host_exported().is_some() {
            return;
        }
        let mut kept = self.0.kept.lock().unwrap_or_else(|e| e.into_inner());
        let old = if self.data_version() == version {
            kept.replace((version, cpu))
        } else {
            kept.take()
        };
        drop(kept);
        // A foreign object's drop may run foreign code: not under the lock.
        drop(old);
    }

    /// Where the tensor's values are: host memory of its own, a device payload, the host only,
    /// or both a payload and a current host copy.
    ///
    /// ```
    /// use boxfall::{native, tensor::{Payload, Residency}, Tensor};
    /// struct Remote;
    /// impl Payload for Remote { fn as_any(&self) -> &dyn std::any::Any { self } }
    /// let t = Tensor::foreign(native::DEVICE, std::sync::Arc::new(Remote));
    /// assert_eq!(t.residency(), Residency::Device);
    /// t.keep_host_copy(t.data_version(), Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()));
    /// assert_eq!(t.residency(), Residency::Both);
    /// ```
    pub fn residency(&self) -> Residency {
        if self.is_host() {
            Residency::Memory
        } else if self.is_host_only() {
            Residency::Host
        } else if self.host_copy().is_some() {
            Residency::Both
        } else {
            Residency::Device
        }
    }

    /// Puts `data` (the device payload made of a host-only tensor's values) in place of the
    /// host-only payload `was`, if the tensor still holds it: the values are the same, so the
    /// data version stays and the tensor's views stay as they are. False (nothing done) where
    /// the tensor was written since.
    ///
    /// ```
    /// use boxfall::{native, tensor::TensorData, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
    /// let (was, v) = (t.payload().unwrap(), t.data_version());
    /// let made = Tensor::host_only(cpu, native::DEVICE); // stands in for a device payload
    /// assert!(t.install_payload(&was, made.data()));
    /// assert_eq!(t.data_version(), v);
    /// assert!(!t.install_payload(&was, made.data())); // `was` is gone
    /// ```
    pub fn install_payload(&self, was: &Arc<dyn Payload>, data: TensorData) -> bool {
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        let same = matches!(&slot.data, TensorData::Foreign(p) if std::ptr::addr_eq(Arc::as_ptr(p), Arc::as_ptr(was)));
        if !same {
            return false;
        }
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        let old = std::mem::replace(&mut slot.data, data);
        drop(slot);
        drop(old);
        true
    }

    /// The CPU tensor whose exported memory holds this device tensor's values
    /// ([`Tensor::export_device_values`]), while it does: `None` for any other tensor.
    ///
    /// ```
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu.clone(), boxfall::native::DEVICE);
    /// assert!(t.host_exported().is_none());
    /// assert!(t.export_device_values(t.data_version(), cpu.clone()).unwrap().is_some());
    /// assert!(t.host_exported().unwrap().same(&cpu));
    /// ```
    pub fn host_exported(&self) -> Option<Tensor> {
        if self.0.exported.load(Ordering::Relaxed) & HOST_EXPORTED == 0 {
            return None;
        }
        let kept = self.0.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.as_ref().map(|(_, cpu)| cpu.clone())
    }

    /// Makes the host authoritative for this device tensor (no view, not of host memory): `cpu`
    /// (a CPU tensor of host memory holding its values as of data version `version`) has its
    /// memory exported (`export_host`), and the tensor becomes host-only over it, its device
    /// payload dropped, its data version unchanged (the values are the same). From then on the
    /// tensor's writes through boxfall are written into that memory where it is
    /// (`resident::write`), and its device payload is made from it again each time the device
    /// needs one (`resident::materialize`). `Ok(None)` where the tensor was written since
    /// `version` or is exported already (nothing done; read again), else the exported memory.
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let t = Tensor::host_only(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()), native::DEVICE);
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let memory = t.export_device_values(t.data_version(), cpu.clone()).unwrap().unwrap();
    /// assert!(t.is_host_only() && cpu.is_exported() && t.is_exported());
    /// assert!(std::sync::Arc::ptr_eq(&memory, &cpu.host_array().unwrap()));
    /// ```
    pub fn export_device_values(
        &self,
        version: u64,
        cpu: Tensor,
    ) -> Result<Option<Arc<HostArray>>> {
        if self.is_host() || self.is_view() || !cpu.is_host() || cpu.key() != DispatchKey::CPU {
            return Err(Error::Fallback(format!(
                "the values of a tensor on {} cannot be exported as host memory it stands on",
                self.device()
            )));
        }
        let memory = cpu.export_host()?;
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        // Another thread's export meanwhile holds the values now (its NumPy array must stay
        // the tensor's): the caller takes that memory instead.
        let exported = self.0.exported.load(Ordering::Relaxed) & HOST_EXPORTED != 0;
        if exported || self.0.version.load(Ordering::Relaxed) != version {
            return Ok(None);
        }
        let data = TensorData::Foreign(Arc::new(HostOnly {
            cpu: cpu.clone(),
            made_by: OnceLock::new(),
        }));
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        let old = std::mem::replace(&mut slot.data, data);
        let old_kept = self
            .0
            .kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace((version, cpu));
        self.0.exported.store(HOST_EXPORTED, Ordering::Relaxed);
        drop(slot);
        // Foreign objects' drops may run foreign code: not under the lock.
        drop((old, old_kept));
        Ok(Some(memory))
    }

    /// Ends the export of this device tensor's host memory ([`Tensor::host_exported`]): what
    /// a write of another shape or dtype does, after which the memory is no longer the
    /// tensor's values (NumPy's arrays of it keep the old ones).
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
    /// t.export_device_values(t.data_version(), cpu).unwrap();
    /// t.end_host_export();
    /// assert!(t.host_exported().is_none() && !t.is_exported());
    /// ```
    pub fn end_host_export(&self) {
        let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        self.0.exported.fetch_and(!HOST_EXPORTED, Ordering::Relaxed);
        drop(slot);
    }

    /// Puts `data` (a device payload made of the exported host values) in place while the
    /// tensor's host memory is still exported ([`Tensor::host_exported`]), without moving the
    /// data version; false (nothing done) otherwise.
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
    /// assert!(!t.install_exported_payload(native::tensor(ndarray::arr1(&[1.0]).into_dyn()).data()));
    /// t.export_device_values(t.data_version(), cpu).unwrap();
    /// assert!(t.install_exported_payload(native::tensor(ndarray::arr1(&[1.0]).into_dyn()).data()));
    /// assert!(!t.is_host_only() && t.host_exported().is_some());
    /// ```
    pub fn install_exported_payload(&self, data: TensorData) -> bool {
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        if self.0.exported.load(Ordering::Relaxed) & HOST_EXPORTED == 0 {
            return false;
        }
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        let old = std::mem::replace(&mut slot.data, data);
        drop(slot);
        drop(old);
        true
    }

    /// Drops the device payload of a tensor whose host memory is exported, which becomes
    /// host-only over that memory again (without moving the data version), and gives the payload
    /// back (`None`: the tensor held none, or its memory is not exported).
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
    /// t.export_device_values(t.data_version(), cpu).unwrap();
    /// assert!(t.release_exported_payload().is_none()); // host-only already
    /// t.install_exported_payload(native::tensor(ndarray::arr1(&[1.0]).into_dyn()).data());
    /// assert!(t.release_exported_payload().is_some() && t.is_host_only());
    /// ```
    pub fn release_exported_payload(&self) -> Option<TensorData> {
        let cpu = self.host_exported()?;
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        if self.0.exported.load(Ordering::Relaxed) & HOST_EXPORTED == 0 {
            return None;
        }
        if let TensorData::Foreign(p) = &slot.data {
            if p.as_any().downcast_ref::<HostOnly>().is_some() {
                return None;
            }
        }
        let data = TensorData::Foreign(Arc::new(HostOnly {
            cpu,
            made_by: OnceLock::new(),
        }));
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        let old = std::mem::replace(&mut slot.data, data);
        drop(slot);
        Some(old)
    }
}
