//! Residency: a device tensor's values may be on the host as well as on the device, so that
//! the CPU fallback moves data only where it crosses between the backend's own kernels and the
//! CPU kernels, or to the user.
//!
//! A tensor of a [`lazy`](crate::backend::Backend::lazy) backend keeps the host copy the
//! fallback read of it ([`Tensor::keep_host_copy`]), tagged with its data version, which every
//! write through boxfall moves on (an in-place or out= kernel's write-back, setitem,
//! `copy_from_cpu`, [`Tensor::note_write`]); the fallback reads the copy while it is current
//! and asks the backend for nothing. The fallback's results on such a backend are host-only
//! ([`Tensor::host_only`]): no payload until the device needs one ([`materialize`]: a kernel of
//! the backend is about to run on it, its payload is read, the user asks), when the backend's
//! `from_cpu` makes it, counted as a transfer of its own (`metrics::Direction::Materialized`),
//! and the host values stay as the tensor's host copy. A write-back into a host-only tensor
//! writes its host values and leaves it host-only. A view's values are made from its base's
//! host copy, so views share it.
//!
//! These are the steps the fallback (and the bindings' reads of a tensor's values) take
//! instead of calling a backend's hooks directly on a tensor that holds no host memory; a
//! tensor of host memory (Native's) never comes here.

use crate::backend::{backend, Backend};
use crate::error::{Error, Result};
use crate::metrics::{record_user_transfer, Direction};
use crate::tensor::{Device, HostOnly, Tensor, TensorData};

/// `t`'s values on the CPU for a kernel that only reads them, and whether they crossed from
/// the device: its host copy where current (nothing crosses), else the backend's
/// `to_cpu_read_only`, whose result a lazy backend keeps as `t`'s host copy.
///
/// ```
/// use boxfall::{native, resident, Tensor};
/// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
/// let (read, crossed) = resident::read(&native::NativeBackend, &t).unwrap();
/// assert!(read.same(&cpu) && !crossed);
/// ```
pub fn read(hooks: &dyn Backend, t: &Tensor) -> Result<(Tensor, bool)> {
    if let Some(cpu) = t.host_copy() {
        return Ok((cpu, false));
    }
    // Read before the values, so that a write meanwhile leaves nothing kept.
    let version = t.data_version();
    let cpu = hooks.to_cpu_read_only(t)?;
    if hooks.lazy() {
        t.keep_host_copy(version, cpu.clone());
    }
    Ok((cpu, true))
}

/// `t`'s values on the CPU for a kernel that writes them (they must not share memory with
/// `t`), and whether they crossed: a copy of its host copy where current, else the backend's
/// `to_cpu(t, true)`.
///
/// ```
/// use boxfall::{native, resident, Tensor};
/// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
/// let (copy, crossed) = resident::read_for_write(&native::NativeBackend, &t).unwrap();
/// assert!(!copy.same(&cpu) && !crossed);
/// ```
pub fn read_for_write(hooks: &dyn Backend, t: &Tensor) -> Result<(Tensor, bool)> {
    if let Some(copy) = t.host_copy().and_then(|cpu| writable_copy(&cpu)) {
        return Ok((copy?, false));
    }
    Ok((hooks.to_cpu(t, true)?, true))
}

/// A CPU tensor with `cpu`'s values that a kernel may write: host memory is shared (a kernel
/// replaces it, never writes it), a CPU payload copied where it can be.
fn writable_copy(cpu: &Tensor) -> Option<Result<Tensor>> {
    if cpu.is_host() {
        return Some(Ok(Tensor::new(Device::CPU, cpu.data())));
    }
    let p = cpu.payload()?.duplicate()?;
    Some(p.map(|p| Tensor::foreign(Device::CPU, p)))
}

/// Writes `src`'s values (a CPU tensor) into the device tensor `dst`, which is no view, and
/// says whether they crossed to the device: a host-only `dst` takes them on the host side
/// (through `from_cpu_owned`, which checks them as it checks a result); any other is written by
/// the backend's `copy_from_cpu`, and its views and host copy learn of the write.
///
/// ```
/// use boxfall::{native, resident, Tensor};
/// let one = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// let t = native::tensor(ndarray::arr1(&[0.0]).into_dyn());
/// assert!(resident::write(&native::NativeBackend, &t, &one).unwrap());
/// assert_eq!(t.to_host().unwrap().as_f64().unwrap()[[0]], 1.0);
/// ```
pub fn write(hooks: &dyn Backend, dst: &Tensor, src: &Tensor) -> Result<bool> {
    if dst.is_host_only() {
        let made = hooks.from_cpu_owned(src.clone(), dst.device())?;
        let crossed = !made.is_host_only();
        dst.set_data(made.data());
        return Ok(crossed);
    }
    hooks.copy_from_cpu(dst, src)?;
    // The hook may have written the payload where it is: the views of `dst` are told, and
    // its host copy is stale.
    dst.note_write();
    Ok(true)
}

/// Gives a host-only tensor its device payload (the backend's `from_cpu` of its host values),
/// counted as a transfer of its own (`metrics::Direction::Materialized`); the host values stay
/// as its host copy, and its data version and views are unchanged. Nothing for any other
/// tensor. What a backend's kernel, or anything that reads a tensor's payload, calls first.
///
/// ```
/// use boxfall::{native, resident, Tensor};
/// let cpu = Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
/// let t = Tensor::host_only(cpu, native::DEVICE);
/// resident::materialize(&t).unwrap(); // Native's from_cpu: host memory
/// assert!(!t.is_host_only());
/// assert_eq!(t.to_host().unwrap().as_f64().unwrap().sum(), 3.0);
/// ```
pub fn materialize(t: &Tensor) -> Result<()> {
    let TensorData::Foreign(was) = t.data() else {
        return Ok(());
    };
    let Some(host) = was.as_any().downcast_ref::<HostOnly>() else {
        return Ok(());
    };
    let cpu = host.cpu().clone();
    let hooks = backend(t.key()).ok_or_else(|| {
        Error::Fallback(format!(
            "a tensor on {} holds host values, and '{}' has no from_cpu hook to put them on the device",
            t.device(),
            t.key()
        ))
    })?;
    let version = t.data_version();
    let made = hooks.from_cpu(&cpu, t.device())?;
    if made.is_host_only() {
        return Err(Error::Fallback(format!(
            "the from_cpu hook of '{}' left a tensor's values on the host; from_cpu must make device data",
            t.key()
        )));
    }
    if t.install_payload(&was, made.data()) {
        t.keep_host_copy(version, cpu.clone());
        record_user_transfer(t.key(), Direction::Materialized, cpu.nbytes() as u64);
    }
    Ok(())
}
