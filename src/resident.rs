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
//! host copy, so views share it; a view a kernel of the backend reads is made on the device
//! from its base's payload where the backend has a `view` hook (the base's payload made once,
//! if it had none), so that nothing the base holds on the device crosses again.
//!
//! These are the steps the fallback (and the bindings' reads of a tensor's values) take
//! instead of calling a backend's hooks directly on a tensor that holds no host memory; a
//! tensor of host memory (Native's) never comes here.

use crate::backend::{backend, Backend};
use crate::error::{Error, Result};
use crate::metrics::{record_user_transfer, Direction};
use crate::tensor::{
    Device, DeviceView, HostArray, HostOnly, Tensor, TensorData, ViewOps, ViewWrite,
};

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
    if let Some(e) = t.view_failure() {
        return Err(e);
    }
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
    // Exported memory is written where it is (by the write-back, by NumPy): the kernel's
    // values, and the fallback's backup made of them, must not change with it.
    if cpu.is_host() && cpu.is_exported() {
        let copy = cpu.to_host().and_then(|h| h.try_clone());
        return Some(copy.map(|h| Tensor::host(Device::CPU, h)));
    }
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
    if let Some(cpu) = dst.host_exported() {
        // The host is authoritative: the values go into the exported memory where it is (NumPy
        // sees them), and a device payload made before is dropped as stale.
        let values = if src.is_host() {
            src.data()
        } else {
            TensorData::Host(src.to_host()?)
        };
        cpu.set_data(values);
        if cpu.is_exported() {
            dst.set_data(Tensor::host_only(cpu, dst.device()).data());
            return Ok(false);
        }
        // Another shape or dtype (an `out=` resized): the tensor is written as any other,
        // and its memory is no longer exported (the NumPy arrays keep the old values).
        dst.end_host_export();
    }
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
    // A view of a base on the device only: a device view of the base's payload, if the
    // backend makes one (else its values come from the base's, on the host).
    if t.is_view() && t.sync_device_view()? {
        return Ok(());
    }
    if let Some(cpu) = t.host_exported() {
        // A payload put in place for the backend kernel now running is current (`refresh`
        // made it when the kernel began).
        if !t.is_host_only() {
            return Ok(());
        }
        return materialize_exported(t, &cpu);
    }
    let TensorData::Foreign(was) = t.data() else {
        return Ok(());
    };
    let Some(host) = was.as_any().downcast_ref::<HostOnly>() else {
        return Ok(());
    };
    let cpu = host.cpu().clone();
    if let Some(made) = device_view(t)? {
        // A view of the base's payload: nothing crossed for it (the base's own payload, if it
        // had to be made, was counted as the base's), and the view's host values stay current.
        let version = t.data_version();
        if t.install_device_view(&was, made) {
            t.keep_host_copy(version, cpu);
        }
        return Ok(());
    }
    let hooks = backend(t.key()).ok_or_else(|| {
        Error::Fallback(format!(
            "a tensor on {} holds host values, and '{}' has no from_cpu hook to put them on the device",
            t.device(),
            t.key()
        ))
    })?;
    let version = t.data_version();
    let made = hooks.from_cpu(&cpu, t.device()).map_err(|e| {
        // Raised far from the call that made the tensor: the error names that operator.
        match t.made_by() {
            Some(op) => made_by_note(e, &op, t.device()),
            None => e,
        }
    })?;
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

/// `e`, an error making the payload of a result of `op` kept on the host, with a note naming
/// `op`: the error is raised where the device needs the values, far from the call.
fn made_by_note(e: Error, op: &str, device: Device) -> Error {
    let note = format!(
        "making the device payload of a result of '{op}' on {device}, whose values were kept on the host; the tensor keeps them there"
    );
    match e {
        Error::Foreign { .. } => e.with_foreign_note(note),
        Error::Kernel { context, message } => Error::Kernel {
            context: format!("{context}, {note}"),
            message,
        },
        e => e,
    }
}

/// A view's payload made on the device from its base's ([`ViewOps::on_device`]: the backend's
/// `view` hook, given the base's payload, which the base gets first if it has none), where the
/// backend makes one; `None` for a tensor that is no view, a view of a base whose host memory
/// is exported (its payload is made again for every kernel), and a backend that makes none.
///
/// [`ViewOps::on_device`]: crate::tensor::ViewOps::on_device
fn device_view(t: &Tensor) -> Result<Option<DeviceView>> {
    let (Some(base), Some(ops)) = (t.view_base(), t.view_ops()) else {
        return Ok(None);
    };
    if base.is_host() || base.host_exported().is_some() {
        return Ok(None);
    }
    ops.on_device(base, t.device())
}

/// What a backend kernel calls on each tensor argument before it runs: `materialize`, except
/// that a tensor whose host memory is exported (NumPy may have written it since any payload
/// was made) gets a payload made of it again, always. [`settle`] drops it after the kernel.
///
/// ```
/// use boxfall::{native, resident, Tensor};
/// let t = Tensor::host_only(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()), native::DEVICE);
/// resident::refresh(&t).unwrap();
/// assert!(!t.is_host_only());
/// ```
pub fn refresh(t: &Tensor) -> Result<()> {
    if let Some(cpu) = t.host_exported() {
        return materialize_exported(t, &cpu);
    }
    if exported_base(t) {
        // A view of a base whose host memory NumPy holds: a payload of its values made now,
        // kept for the kernel (pinned) and written into the base by `settle`.
        let made = view_payload(t)?;
        t.pin_view_payload(made.data());
        return Ok(());
    }
    materialize(t)
}

/// Whether `t` is a view of a base whose host memory is exported.
fn exported_base(t: &Tensor) -> bool {
    t.view_base().is_some_and(|b| b.host_exported().is_some())
}

/// A device payload made now of the values of `t`, a view of a base whose host memory is
/// exported (the backend's `from_cpu` of them, counted as materialized).
fn view_payload(t: &Tensor) -> Result<Tensor> {
    let cpu = t.host_only_values().ok_or_else(|| {
        Error::Fallback(format!(
            "a view on {} of a base whose memory NumPy holds has no host values",
            t.device()
        ))
    })?;
    let made = hooks_of(t)?.from_cpu(&cpu, t.device())?;
    record_user_transfer(t.key(), Direction::Materialized, cpu.nbytes() as u64);
    Ok(made)
}

/// The device data of `t` (a payload of its backend), for a hook or a kernel that reads it:
/// its payload, made first where its values are on the host only ([`materialize`]). Another
/// thread's write between the two (which may leave `t` on the host only again, or make a
/// view of it again) is met by making it again, so that a reader never finds no payload. A
/// tensor whose host memory is exported, or a view of a base whose host memory is, gives a
/// payload made now and not kept ([`fresh_payload`]), but while a kernel holds one.
///
/// ```
/// use boxfall::{native, resident, Tensor};
/// let t = native::tensor(ndarray::arr1(&[1.0]).into_dyn());
/// assert!(matches!(resident::device_data(&t).unwrap(), boxfall::tensor::TensorData::Host(_)));
/// ```
pub fn device_data(t: &Tensor) -> Result<TensorData> {
    if let Some(made) = fresh_payload(t)? {
        return Ok(made.data());
    }
    loop {
        materialize(t)?;
        let data = t.data();
        let host_only = matches!(&data, TensorData::Foreign(p) if p.as_any().downcast_ref::<HostOnly>().is_some());
        if !host_only {
            return Ok(data);
        }
    }
}

/// A device tensor holding a payload made now of the exported host memory of `t` (the
/// backend's `from_cpu`, counted as materialized), where `t`'s host memory is exported and no
/// kernel is running on it; `t` itself stays host-only (its payload would be stale as soon
/// as NumPy writes the memory). `None` for any other tensor. What `t.payload` gives the user.
///
/// ```
/// use boxfall::{native, resident, Tensor};
/// let t = Tensor::host_only(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()), native::DEVICE);
/// assert!(resident::fresh_payload(&t).unwrap().is_none()); // not exported
/// ```
pub fn fresh_payload(t: &Tensor) -> Result<Option<Tensor>> {
    if exported_base(t) && !t.is_pinned_view() {
        return view_payload(t).map(Some);
    }
    let Some(cpu) = t.host_exported().filter(|_| t.is_host_only()) else {
        return Ok(None);
    };
    let made = hooks_of(t)?.from_cpu(&cpu, t.device())?;
    record_user_transfer(t.key(), Direction::Materialized, cpu.nbytes() as u64);
    Ok(Some(made))
}

/// `materialize` of a tensor whose host memory is exported: NumPy may have written the memory
/// since any payload was made, so a payload is made of it again every time (counted each time).
fn materialize_exported(t: &Tensor, cpu: &Tensor) -> Result<()> {
    let hooks = hooks_of(t)?;
    let made = hooks.from_cpu(cpu, t.device())?;
    if made.is_host_only() {
        return Err(Error::Fallback(format!(
            "the from_cpu hook of '{}' left a tensor's values on the host; from_cpu must make device data",
            t.key()
        )));
    }
    if t.install_exported_payload(made.data()) {
        record_user_transfer(t.key(), Direction::Materialized, cpu.nbytes() as u64);
    }
    Ok(())
}

fn hooks_of(t: &Tensor) -> Result<&'static dyn Backend> {
    backend(t.key()).ok_or_else(|| {
        Error::Fallback(format!(
            "a tensor on {} holds host values, and '{}' has no from_cpu hook to put them on the device",
            t.device(),
            t.key()
        ))
    })
}

/// Makes the host authoritative for the device tensor `t` of a lazy backend (no view) and
/// gives its values' host memory, exported (`Tensor::export_device_values`): what NumPy's
/// `np.asarray(t)` is made over, written in place by NumPy and by boxfall from then on. The
/// values are read as the fallback reads them (`read`: a current host copy, else the backend's
/// `to_cpu_read_only`, counted as a `ToHost` transfer) and copied into memory of the tensor's
/// own; its device payload is dropped. The same memory again for a tensor already exported.
/// `None` (nothing exported) for values of a dtype host memory does not hold; an error for a
/// backend that is not lazy (its payload is the values: the host cannot be).
///
/// ```
/// use boxfall::{native, resident, Tensor};
/// // Native is not lazy: its tensors export their own memory (`Tensor::export_host`).
/// let t = Tensor::host_only(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()), native::DEVICE);
/// assert!(resident::export(&native::NativeBackend, &t).is_err());
/// ```
pub fn export(hooks: &dyn Backend, t: &Tensor) -> Result<Option<std::sync::Arc<HostArray>>> {
    if !hooks.lazy() {
        return Err(Error::Fallback(format!(
            "'{}' keeps no host values (lazy=False): its tensors' values cannot be shared with the host",
            t.key()
        )));
    }
    loop {
        if let Some(cpu) = t.host_exported() {
            if cpu.is_exported() {
                return cpu.export_host().map(Some);
            }
        }
        let version = t.data_version();
        let (values, crossed) = read(hooks, t)?;
        // Values of a dtype host memory does not hold (a CPU payload: a NumPy array of
        // float16, of objects) have no memory to export: the caller makes a copy.
        let host = match values.to_host() {
            Ok(host) => host,
            Err(_) if !values.is_host() => return Ok(None),
            Err(e) => return Err(e),
        };
        if crossed {
            record_user_transfer(t.key(), Direction::ToHost, values.nbytes() as u64);
        }
        let own = Tensor::host(Device::CPU, host.try_clone()?);
        if let Some(memory) = t.export_device_values(version, own)? {
            return Ok(Some(memory));
        }
        // Written or exported (by another thread) meanwhile: look again.
    }
}

/// After a backend kernel ran on `t`: a view that is a device copy of its base's part
/// ([`Tensor::is_device_copy`]) and that the kernel wrote ([`Tensor::note_write`]) has its
/// values written into its base (`write_back_copy`). Where `t`'s host memory is exported,
/// the kernel's write (`written`: its schema marks `t` written) is copied back into that
/// memory where it is (the backend's `to_cpu` of the payload, counted as a `ToHost`
/// transfer), so that NumPy sees it, and the payload is dropped (NumPy may write the memory
/// at any time, so the next kernel gets a payload made again). Nothing for any other tensor.
///
/// ```
/// use boxfall::{native, resident, Tensor};
/// let t = native::tensor(ndarray::arr1(&[1.0]).into_dyn());
/// resident::settle(&native::NativeBackend, &t, true).unwrap(); // not exported: nothing
/// ```
pub fn settle(hooks: &dyn Backend, t: &Tensor, written: bool) -> Result<()> {
    let saved = match t.take_unsaved_view() {
        Some(copy) => write_back_copy(hooks, t, copy),
        None => Ok(()),
    };
    // A kernel's pin of a view's payload ends whether its write reached the base or not.
    t.unpin_view_payload();
    saved?;
    if t.host_exported().is_none() {
        return Ok(());
    }
    let Some(payload) = t.release_exported_payload() else {
        return Ok(());
    };
    if !written {
        return Ok(());
    }
    // Read from a tensor of its own: `t` itself would have its payload made again.
    let made = Tensor::new(t.device(), payload);
    let values = hooks.to_cpu(&made, false)?;
    record_user_transfer(t.key(), Direction::ToHost, values.nbytes() as u64);
    write(hooks, t, &values).map(drop)
}

/// Writes `copy` (a view's values, on the device) into `base` on the device, through the
/// backend's `view_write` hook ([`ViewOps::write_on_device`]), where it has one and `base`'s
/// host memory is not exported (the host is authoritative then): `base` gets its payload first
/// if its values are on the host only, and new data the hook made is put in its place as a
/// write of it (again, on the values written meanwhile, where another write came between).
/// False (nothing done) where the backend writes no view on the device.
///
/// [`ViewOps::write_on_device`]: crate::tensor::ViewOps::write_on_device
fn write_on_device(ops: &dyn ViewOps, base: &Tensor, copy: &Tensor) -> Result<bool> {
    if base.host_exported().is_some() {
        return Ok(false);
    }
    loop {
        // Read before the payload, so that a write of the base meanwhile is not overwritten.
        let version = base.data_version();
        materialize(base)?;
        match ops.write_on_device(base, copy)? {
            ViewWrite::Declined => return Ok(false),
            ViewWrite::InPlace => {
                base.note_write();
                return Ok(true);
            }
            ViewWrite::Replaced(data) => {
                if base.set_data_if(version, data) {
                    return Ok(true);
                }
            }
        }
    }
}

/// Writes the values of `copy`, the payload of the view `view` that its backend's `view` hook
/// made as a copy of its base's part and that a kernel of the backend wrote, into the base, as
/// a write through a NumPy view reaches its base: the copy's values come to the host (`to_cpu`,
/// counted as a `ToHost` transfer), are written through the view into the base's host values
/// (its host copy where current, else `to_cpu` of its payload, counted too), and the base
/// becomes host-only with the new values (its device payload is stale; `from_cpu` makes it
/// again when the device needs it, counted as materialized). All or nothing: on an error the
/// base is as it was and the view is made again from it (the kernel's write of the copy is
/// dropped), and the error names the view, the hook and the backend.
fn write_back_copy(hooks: &dyn Backend, view: &Tensor, copy: TensorData) -> Result<()> {
    let (Some(base), Some(ops)) = (view.view_base(), view.view_ops()) else {
        return Ok(());
    };
    let key = view.key();
    // The view's own backend made the copy (a kernel may have had tensors of others).
    let hooks = backend(key).unwrap_or(hooks);
    let written = (|| {
        let copy = Tensor::new(view.device(), copy);
        if write_on_device(ops.as_ref(), base, &copy)? {
            return Ok(());
        }
        let values = hooks.to_cpu(&copy, false)?;
        record_user_transfer(key, Direction::ToHost, values.nbytes() as u64);
        if base.host_exported().is_some() {
            // The host is authoritative already: the values go into its memory where it is.
            return ops.write(base, &values);
        }
        loop {
            // Read before the values, so that a write of the base meanwhile is not overwritten.
            let version = base.data_version();
            let (host, crossed) = read(hooks, base)?;
            if crossed {
                record_user_transfer(key, Direction::ToHost, host.nbytes() as u64);
            }
            // The new values are made beside the base (a host-only stand-in), which is written
            // only once they all are.
            let stand_in = Tensor::host_only(host, base.device());
            ops.write(&stand_in, &values)?;
            if !stand_in.is_host_only() {
                // A backend that is not lazy put them on the device at once.
                record_user_transfer(key, Direction::ToDevice, stand_in.nbytes() as u64);
            }
            if base.set_data_if(version, stand_in.data()) {
                return Ok(());
            }
        }
    })();
    written.map_err(|e| {
        view.forget_view_slot();
        let what = format!(
            "writing {} of a tensor on {}, which a kernel of '{key}' wrote, into its base: the 'view' hook of backend '{key}' made it as a copy of the base's memory (not sharing it); the base is unchanged and the kernel's write of the view is dropped",
            ops.describe(),
            view.device(),
        );
        match e {
            Error::Foreign { .. } => e.with_foreign_note(what),
            e => Error::Kernel {
                context: what,
                message: e.to_string(),
            },
        }
    })
}
