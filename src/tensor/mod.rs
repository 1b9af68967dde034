//! Tensors: a device, and either host memory (an `ndarray` owned by Rust) or a backend's opaque
//! payload (a Python object, a remote handle...).
//!
//! A `Tensor` is a cheap handle (`Arc`); clones share the tensor, and identity is the handle's.
//! Host data sits behind its own `Arc` so a CPU view of a host-accessible tensor can be lent
//! without a copy; writing replaces that `Arc` (copy-on-write), so a lent view never dangles.
//! Memory exported to a foreign runtime ([`Tensor::export_host`], NumPy's `np.asarray`) is
//! instead written where it is, so that both sides see each other's writes.
//!
//! A view ([`Tensor::view_of`], NumPy's views of a device tensor) is its base and a
//! description ([`ViewOps`]): its own slot is made from the base when read after the base's
//! `data_version` moved, and a write of the view goes into the base.
//!
//! One file a concern: `types.rs` the types that refer to each other, whose methods are in
//! `handle.rs` (making, reading and writing a tensor), `views.rs` (views of a device tensor),
//! `host_data.rs` (host data lent or copied), `residency.rs` (host copies beside a payload) and
//! `writes.rs` (the write locks of the tensors a call writes, held together); `dtype.rs`,
//! `host.rs`, `device.rs` and `write_lock.rs` (the lock that makes the CPU fallback's write of
//! a tensor, or through a view of it, atomic between threads) name none of them.

mod device;
mod dtype;
mod handle;
mod host;
mod host_data;
pub(crate) mod promote;
mod residency;
mod types;
mod views;
mod write_lock;
mod writes;

pub use device::{Device, Residency};
pub use dtype::{DType, Kind};
pub use host::{dtype_name, HostArray, TensorMeta};
pub(crate) use host::{host_map, host_match};
pub use residency::HostOnly;
pub use types::{
    DeviceView, HostView, Origin, Payload, Tensor, TensorData, ViewLayout, ViewOps, ViewWrite,
};
pub(crate) use writes::{hold_writes, WritesHeld};
