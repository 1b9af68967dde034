//! The types a tensor is made of, which refer to each other: the handle and its inner state,
//! its data (host memory or a backend's payload), and a view's link to its base. Their methods
//! are in the files of their concerns.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::error::{Error, Result};
use crate::shared::Shared;

use super::device::Device;
use super::dtype::DType;
use super::host::{HostArray, TensorMeta};

/// A backend's opaque tensor payload (or a foreign CPU array, such as a NumPy array).
///
/// ```
/// use boxfall::tensor::Payload;
/// struct Remote(u64);
/// impl Payload for Remote {
///     fn as_any(&self) -> &dyn std::any::Any { self }
/// }
/// let p: std::sync::Arc<dyn Payload> = std::sync::Arc::new(Remote(7));
/// assert_eq!(p.nbytes(), 0);
/// ```
pub trait Payload: Send + Sync + 'static {
    /// The payload itself, to downcast.
    fn as_any(&self) -> &dyn Any;
    /// Bytes held, for the fallback's byte counters.
    fn nbytes(&self) -> usize {
        0
    }
    /// The byte count, if it can never change: a tensor made with this payload then keeps it
    /// and answers `nbytes` without asking again (a NumPy array's size is fixed while it is
    /// referenced).
    fn fixed_nbytes(&self) -> Option<usize> {
        None
    }
    /// A copy in host memory, for Rust code that reads a foreign CPU tensor.
    fn to_host(&self) -> Result<HostArray> {
        Err(Error::Fallback(
            "this tensor's payload cannot be read as host memory".into(),
        ))
    }
    /// Dtype and shape for logs (`"float64[2, 3]"`).
    fn describe(&self) -> String {
        "?".into()
    }
    /// Dtype and shape, if the payload knows them: the fallback checks with them that an
    /// in-place kernel kept its argument's (`None`: not checked).
    fn meta(&self) -> Option<TensorMeta> {
        None
    }
    /// Dtype and shape, borrowed, where the payload keeps them parsed (a pending tensor's):
    /// a reader that needs no `TensorMeta` (graph mode's shape rules, at every recorded call)
    /// then makes none. `None`: read [`Payload::meta`].
    fn known_meta(&self) -> Option<(DType, &[usize])> {
        None
    }
    /// A copy that can be written without changing this payload, for a CPU payload (a NumPy
    /// array) that a kernel reached through the fallback writes: the kernel writes the copy,
    /// which is written into this payload only once the kernel has succeeded. `None`: the
    /// payload cannot be copied, and the kernel writes it as it is.
    fn duplicate(&self) -> Option<Result<Arc<dyn Payload>>> {
        None
    }
    /// Writes `src`'s values into this payload in place (a CPU payload written by the
    /// fallback). `None`: it cannot be written in place, and the tensor takes `src`'s data.
    fn assign(&self, _src: &Tensor) -> Option<Result<()>> {
        None
    }
}

/// What a tensor holds.
///
/// ```
/// use boxfall::{Tensor, tensor::TensorData};
/// let t = Tensor::from_array(ndarray::ArrayD::<f64>::zeros(vec![2]));
/// assert!(matches!(t.data(), TensorData::Host(_)));
/// ```
#[derive(Clone)]
pub enum TensorData {
    /// Rust-owned host memory.
    Host(Arc<HostArray>),
    /// A backend's payload.
    Foreign(Arc<dyn Payload>),
}

pub(super) struct TensorInner {
    pub(super) device: Device,
    pub(super) data: RwLock<Slot>,
    /// The data's byte count, with `FOREIGN` set for a payload, or `ASK_PAYLOAD` for a
    /// payload whose count may change. Kept beside the data, stored under the write lock, so
    /// the fallback's byte counters read it without locking.
    pub(super) nbytes: AtomicUsize,
    /// Set by `set_data`, cleared when the tensor this one is the loan of writes its data in:
    /// a loan a kernel wrote into (against its schema) is put right before it is lent again.
    pub(super) replaced: AtomicBool,
    /// This tensor's CPU loan (`host_loan`): made once, then kept holding this tensor's data
    /// by `set_data`, so that lending it takes no lock.
    pub(super) loan: OnceLock<Tensor>,
    /// How many times the data was replaced (`data_version`): written under the write lock,
    /// read without any.
    pub(super) version: AtomicU64,
    /// What a view sees of its base (`Tensor::view_of`); `None` for every other tensor.
    pub(super) view: Option<Box<ViewLink>>,
    /// `EXPORTED` (and `EXPORTED_BOOL` for bool elements) once the host memory was exported
    /// ([`Tensor::export_host`]): written under the write lock, read without any.
    pub(super) exported: AtomicU8,
    /// A device tensor's host copy and the `version` it holds the values of (residency, see
    /// `Tensor::host_copy`); never set for a tensor of host memory.
    pub(super) kept: Mutex<Option<(u64, Tensor)>>,
    /// Set once a view of this tensor was made (`Tensor::view_of`), never cleared: graph mode
    /// records a write of a tensor functionally only where no view can see the write.
    pub(super) viewed: AtomicBool,
    /// The lock the CPU fallback holds while it writes this tensor or a view of it, made on
    /// first use (`write_lock.rs`).
    pub(super) writes: OnceLock<Box<super::write_lock::WriteLock>>,
}

/// `TensorInner::exported`: the memory is exported, and written in place from then on.
pub(super) const EXPORTED: u8 = 1;

/// `TensorInner::exported`: exported bool elements, which NumPy may have written as bytes other
/// than 0 and 1 (put right before boxfall reads them).
pub(super) const EXPORTED_BOOL: u8 = 2;

/// `TensorInner::exported` of a device tensor: its values are the exported host memory of the
/// CPU tensor its `kept` slot holds (`Tensor::export_device_values`), which is authoritative.
pub(super) const HOST_EXPORTED: u8 = 4;

/// What the lock guards: the data, and a foreign runtime's view of it (`host_view`).
pub(super) struct Slot {
    pub(super) data: TensorData,
    pub(super) view: Option<HostView>,
}

/// A foreign runtime's object that sees a tensor's host memory (see [`Tensor::host_view`]).
///
/// ```
/// let view: boxfall::tensor::HostView = std::sync::Arc::new(());
/// assert!(view.downcast_ref::<()>().is_some());
/// ```
pub type HostView = Arc<dyn Any + Send + Sync>;

pub(super) const FOREIGN: usize = 1 << (usize::BITS - 1);

pub(super) const ASK_PAYLOAD: usize = usize::MAX;

pub(super) fn nbytes_of(data: &TensorData) -> usize {
    match data {
        TensorData::Host(a) => a.nbytes() & !FOREIGN,
        TensorData::Foreign(p) => p.fixed_nbytes().map_or(ASK_PAYLOAD, |n| FOREIGN | n),
    }
}

/// A tensor handle. Cloning shares the tensor.
///
/// ```
/// use boxfall::{Device, Tensor};
/// let t = Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
/// assert_eq!(t.device(), Device::CPU);
/// assert!(t.same(&t.clone()));
/// ```
#[derive(Clone)]
pub struct Tensor(pub(super) Shared<TensorInner>);

/// How a view's values follow from its base's, and how a write through the view reaches the
/// base: what [`Tensor::view_of`] keeps. The Python bindings implement it with NumPy's basic
/// indexing and reshaping functions applied to the base's host copy.
///
/// ```
/// use std::sync::Arc;
/// use boxfall::{tensor::{TensorData, ViewOps}, Device, Result, Tensor};
/// /// The first element of a float64 vector.
/// struct First;
/// impl ViewOps for First {
///     fn as_any(&self) -> &dyn std::any::Any { self }
///     fn materialize(&self, base: &Tensor, _device: Device) -> Result<TensorData> {
///         let a = base.to_host()?.as_f64().unwrap().slice(ndarray::s![0..1]).to_owned().into_dyn();
///         Ok(TensorData::Host(Arc::new(a.into())))
///     }
///     fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> {
///         let mut a = base.to_host()?.as_f64().unwrap().clone();
///         a[[0]] = src.to_host()?.as_f64().unwrap()[[0]];
///         base.set_data(TensorData::Host(Arc::new(a.into())));
///         Ok(())
///     }
/// }
/// let base = boxfall::native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
/// let v = Tensor::view_of(&base, Arc::new(First), 8).unwrap();
/// base.set_data(TensorData::Host(Arc::new(ndarray::arr1(&[5.0, 2.0]).into_dyn().into())));
/// assert_eq!(v.to_host().unwrap().as_f64().unwrap()[[0]], 5.0); // the base's write is seen
/// v.set_data(TensorData::Host(Arc::new(ndarray::arr1(&[7.0]).into_dyn().into())));
/// assert_eq!(base.to_host().unwrap().as_f64().unwrap().iter().copied().collect::<Vec<_>>(), vec![7.0, 2.0]); // and the view's
/// ```
pub trait ViewOps: Send + Sync + 'static {
    /// The description itself, to downcast.
    fn as_any(&self) -> &dyn Any;
    /// The view's values as `base` holds them now, as the data of a tensor on `device` (the
    /// view's, which is the base's).
    fn materialize(&self, base: &Tensor, device: Device) -> Result<TensorData>;
    /// Writes `src` (the view's new values, a tensor on the CPU or on the view's device) into
    /// the part of `base` the view sees, all or nothing.
    fn write(&self, base: &Tensor, src: &Tensor) -> Result<()>;
    /// The view made on the device from `base`'s payload (the backend's
    /// [`view`](crate::backend::Backend::view) hook), where the backend makes one: nothing
    /// crosses to make it. A backend kernel that writes it writes `base` where it shares
    /// `base`'s memory; a copy's write is written into `base` after the kernel
    /// ([`resident::settle`](crate::resident::settle)). `None` (the default) where it makes
    /// none: the view's values are then made from `base`'s host values
    /// ([`materialize`](Self::materialize)).
    fn on_device(&self, base: &Tensor, device: Device) -> Result<Option<DeviceView>> {
        let _ = (base, device);
        Ok(None)
    }

    /// Writes `values` (the view's new values, a payload on `base`'s device that a kernel of
    /// the backend wrote as a copy) into the part of `base` the view sees, on the device (the
    /// backend's [`view_write`](crate::backend::Backend::view_write) hook), where the backend
    /// does: nothing crosses to the host. [`ViewWrite::Declined`] (the default) where it does
    /// not: boxfall then writes the values into `base` through the host
    /// ([`resident::settle`](crate::resident::settle)).
    fn write_on_device(&self, base: &Tensor, values: &Tensor) -> Result<ViewWrite> {
        let _ = (base, values);
        Ok(ViewWrite::Declined)
    }

    /// The view in words, for errors (the operators that made it); "a view" by default.
    fn describe(&self) -> String {
        "a view".into()
    }

    /// Where the view's elements are among its base's, as plain numbers: graph mode records a
    /// view's read (and a write through it) as a node on its base's current data from this,
    /// so that no backend hook runs while a graph is recorded. `None` (the default) where the
    /// description does not say: graph mode then makes the view's values eagerly.
    fn layout(&self) -> Option<ViewLayout> {
        None
    }
}

/// A view's place among its base's elements in C order ([`ViewOps::layout`]): its shape, the
/// step between neighbours along each axis and the first element's index, in elements, and
/// whether a write through it is allowed.
///
/// ```
/// // `x[1:]` of a vector of 3 elements.
/// let l = boxfall::tensor::ViewLayout { shape: vec![2], strides: vec![1], offset: 1, writable: true };
/// assert_eq!(l.shape, [2]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewLayout {
    /// The view's shape.
    pub shape: Vec<usize>,
    /// The step between neighbours along each axis, in elements (negative for a reversed axis,
    /// 0 for a broadcast one).
    pub strides: Vec<i64>,
    /// The index of the view's first element among its base's.
    pub offset: i64,
    /// Whether the view may be written (NumPy makes `broadcast_to`'s read-only).
    pub writable: bool,
}

/// What a backend did with a view's values written into its base on the device
/// ([`ViewOps::write_on_device`], the backend's
/// [`view_write`](crate::backend::Backend::view_write) hook).
///
/// ```
/// use boxfall::tensor::ViewWrite;
/// assert!(matches!(ViewWrite::Declined, ViewWrite::Declined));
/// ```
pub enum ViewWrite {
    /// The backend writes no view on the device: boxfall writes it through the host.
    Declined,
    /// The base's payload was written where it is.
    InPlace,
    /// The base's new data (a device whose memory is immutable made a new payload): put in
    /// the base's place as a write of it.
    Replaced(TensorData),
}

/// A view made on the device from its base's payload ([`ViewOps::on_device`], the backend's
/// [`view`](crate::backend::Backend::view) hook): its data, and whether that shares the base's
/// device memory (a reshape of the whole buffer, a slice at an offset) or is a copy (a gather
/// into a new buffer).
///
/// ```
/// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
/// let v = boxfall::tensor::DeviceView { data: t.data(), shares: false };
/// assert!(!v.shares);
/// ```
pub struct DeviceView {
    /// The view's data: a payload on the base's device.
    pub data: TensorData,
    /// Whether the payload shares the base's device memory, so that a kernel's write of it is
    /// a write of the base. A copy's write reaches the base only through boxfall, which writes
    /// the copy's values into the base after the kernel.
    pub shares: bool,
}

/// A view's base and description, and the base's `data_version` its slot was made from.
pub(super) struct ViewLink {
    pub(super) base: Tensor,
    pub(super) ops: Arc<dyn ViewOps>,
    pub(super) synced: AtomicU64,
    /// What the view's slot is ([`ViewOps::on_device`]): made from the base's values
    /// ([`MADE_ON_HOST`]), a device view sharing the base's payload ([`SHARES_BASE`], whose
    /// write is a write of the base) or a device copy of it ([`COPIES_BASE`]).
    pub(super) on_device: AtomicU8,
    /// A device copy's payload written by a backend kernel ([`Tensor::note_write`]) and not yet
    /// written into the base ([`crate::resident::settle`] does).
    pub(super) unsaved: AtomicBool,
    /// How many backend kernels now running hold the slot as their payload of a view of a base
    /// whose host memory is exported ([`Tensor::pin_view_payload`]): while any does, the slot
    /// is not made again at each read (as NumPy's writes of the memory otherwise ask).
    pub(super) pins: AtomicU32,
    /// Why the slot could not be made from the base at its last try (`refresh_view`), while
    /// it could not: reads that can fail raise it rather than read a stale slot.
    pub(super) failure: Mutex<Option<String>>,
}

/// `ViewLink::on_device`: the slot was made from the base's values.
pub(super) const MADE_ON_HOST: u8 = 0;

/// `ViewLink::on_device`: the slot is a device view sharing the base's payload.
pub(super) const SHARES_BASE: u8 = 1;

/// `ViewLink::on_device`: the slot is a device copy of the view's part of the base's payload.
pub(super) const COPIES_BASE: u8 = 2;

impl ViewLink {
    pub(super) fn made_on_device(&self, shares: bool) {
        let state = if shares { SHARES_BASE } else { COPIES_BASE };
        self.unsaved.store(false, Ordering::Release);
        self.on_device.store(state, Ordering::Release);
    }
}

/// `ViewLink::synced` of a slot made from no version of the base.
pub(super) const NEVER_SYNCED: u64 = u64::MAX;

/// What made a tensor (the operator whose result it is), named by an error raised far from
/// the call (the payload of a result kept on the host, made when the device needs it). The
/// dispatcher's operator entries are one, so that keeping one takes a reference count and no
/// allocation.
///
/// ```
/// struct Named;
/// impl boxfall::tensor::Origin for Named {
///     fn name(&self) -> String { "demo::f".into() }
/// }
/// assert_eq!(boxfall::tensor::Origin::name(&Named), "demo::f");
/// ```
pub trait Origin: Send + Sync + 'static {
    /// The operator's name.
    fn name(&self) -> String;
}
