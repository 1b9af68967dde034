//! A tensor's host data, lent or copied, and writes into host memory.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{Error, Result};

use super::dtype::DType;
use super::host::{host_match, write_host_into, HostArray};

use super::types::{Tensor, TensorData, EXPORTED, EXPORTED_BOOL, HOST_EXPORTED};

use super::residency::HostOnly;

impl Tensor {
    /// The host memory, exported: memory that a foreign runtime (NumPy, through `np.asarray`)
    /// may read and write where it is, shared with nobody but this tensor and its loan. From
    /// the first export on, every write of the tensor (`set_data`, the fallback's write-back, a
    /// write through a view) copies the values into this memory rather than replacing it, so
    /// the foreign runtime sees boxfall's writes and boxfall sees its (a view of the tensor
    /// makes its values again at every read). Data of another shape or dtype (an `out=`
    /// argument resized) replaces the memory as for any tensor: the exported memory then stays
    /// with whoever holds it, no longer the tensor's, and the tensor is no longer exported.
    ///
    /// Memory that another tensor shares (one made from this tensor's data), or that is not in
    /// C order, is first copied, so that no other tensor sees the writes. An error for a view
    /// (its memory is its base's: export the base) and for a tensor without host memory.
    ///
    /// ```
    /// use boxfall::{native, tensor::TensorData};
    /// let t = native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let memory = t.export_host().unwrap();
    /// assert!(t.is_exported());
    /// t.set_data(TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[5.0, 6.0]).into_dyn().into())));
    /// assert_eq!(memory.as_f64().unwrap().iter().copied().collect::<Vec<_>>(), vec![5.0, 6.0]); // written where it is
    /// assert!(std::sync::Arc::ptr_eq(&t.export_host().unwrap(), &memory)); // the same memory again
    /// ```
    pub fn export_host(&self) -> Result<Arc<HostArray>> {
        if self.is_view() {
            return Err(Error::Fallback(format!(
                "a view on {} has no memory of its own to export (its base's is)",
                self.device()
            )));
        }
        self.sync_view();
        loop {
            let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
            let TensorData::Host(host) = &slot.data else {
                return Err(Error::Fallback(format!(
                    "a tensor on {} holds no host memory to export",
                    self.device()
                )));
            };
            if self.is_exported() {
                return Ok(Arc::clone(host));
            }
            // Handles this tensor holds itself: its slot's, and its loan's (read under the
            // loan's lock, which is always taken after this tensor's).
            let lent = self.0.loan.get().is_some_and(|l| {
                let loan = l.0.data.read().unwrap_or_else(|e| e.into_inner());
                matches!(&loan.data, TensorData::Host(h) if Arc::ptr_eq(h, host))
            });
            let ordered = host_match!(&**host, a => a.is_standard_layout());
            if ordered && Arc::strong_count(host) <= 1 + usize::from(lent) {
                let bools = if host.dtype() == DType::Bool {
                    EXPORTED_BOOL
                } else {
                    0
                };
                self.0.exported.store(EXPORTED | bools, Ordering::Relaxed);
                return Ok(Arc::clone(host));
            }
            // Shared (or in another order): this tensor takes a copy of its own, and the
            // loop checks it again (a write meanwhile may have replaced it).
            let copy = TensorData::Host(Arc::new(host.try_clone()?));
            self.replace_locked(slot, copy);
        }
    }

    /// Whether the host memory was exported ([`Tensor::export_host`]) and is still the
    /// tensor's: writes then copy values into it.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!t.is_exported());
    /// t.export_host().unwrap();
    /// assert!(t.is_exported());
    /// t.set_data(boxfall::tensor::TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[1.0, 2.0]).into_dyn().into())));
    /// assert!(!t.is_exported()); // another shape: replaced, no longer the exported memory
    /// ```
    #[inline]
    pub fn is_exported(&self) -> bool {
        self.0.exported.load(Ordering::Relaxed) != 0
    }

    /// Whether the tensor holds exported bool memory, which NumPy may have written as bytes
    /// other than 0 and 1.
    #[inline(always)]
    pub(super) fn has_exported_bools(&self) -> bool {
        self.0.exported.load(Ordering::Relaxed) & EXPORTED_BOOL != 0
    }

    /// Puts exported bool memory right before a read (`host_memory::normalize_bools`), under
    /// the write lock, so that no other boxfall write of the memory runs meanwhile.
    #[cold]
    #[inline(never)]
    pub(super) fn normalize_exported_bools(&self) {
        let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        if let TensorData::Host(h) = &slot.data {
            if let HostArray::Bool(a) = &**h {
                crate::host_memory::normalize_bools(a);
            }
        }
    }

    /// `data` written into exported memory `current` where it is (then `current` is what the
    /// slot keeps), or, for data of another shape or dtype, `data` itself, and the tensor is
    /// no longer exported. The caller holds the write lock.
    #[cold]
    #[inline(never)]
    pub(super) fn write_exported(&self, current: &TensorData, data: TensorData) -> TensorData {
        if self.0.exported.load(Ordering::Relaxed) & HOST_EXPORTED != 0 {
            // A device tensor whose host memory is exported stays so while its data is that
            // memory's host-only payload (or a device payload made of it, put in place by
            // `install_exported_payload`, not here): other data ends the export.
            let kept = self.0.kept.lock().unwrap_or_else(|e| e.into_inner());
            let same = match (&data, &*kept) {
                (TensorData::Foreign(p), Some((_, cpu))) => p
                    .as_any()
                    .downcast_ref::<HostOnly>()
                    .is_some_and(|h| h.cpu.same(cpu)),
                _ => false,
            };
            drop(kept);
            if !same {
                self.0.exported.store(0, Ordering::Relaxed);
            }
            return data;
        }
        if let (TensorData::Host(cur), TensorData::Host(new)) = (current, &data) {
            if Arc::ptr_eq(cur, new) || write_host_into(cur, new) {
                return current.clone();
            }
        }
        self.0.exported.store(0, Ordering::Relaxed);
        data
    }
}
