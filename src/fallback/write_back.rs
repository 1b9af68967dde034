//! Step 4 of a fallback that writes arguments: the written arguments take the kernel's
//! results, all or none. Every destination is backed up and every result checked (an in-place
//! result keeps its argument's shape and dtype, unless the schema lets it resize) before the
//! first is written; if a write fails, every argument written so far, the failing one
//! included, is put back as it was before the call.

use crate::backend::Backend;
use crate::dispatcher::OperatorHandle;
use crate::error::{Error, Result};
use crate::key::DispatchKey;
use crate::schema::Argument;
use crate::tensor::{Device, Tensor, TensorData, TensorMeta};

/// One written argument (or list element): where the result goes, and the result.
pub(super) struct Write<'a> {
    /// The argument's index in the schema.
    pub(super) arg: usize,
    /// The tensor as the caller passed it.
    pub(super) dst: &'a Tensor,
    /// What the kernel left for it.
    pub(super) src: &'a Tensor,
    /// `dst`'s values before the call, if they were kept as it was moved.
    pub(super) backup: Option<&'a Tensor>,
    /// A Native `dst`'s data version when it was read: written only if it is still that.
    pub(super) version: Option<u64>,
}

/// A write-back that found a Native output written by another thread since the call read it:
/// nothing of the call was written, and the call is to be redone on the new values.
pub(super) struct Stale;

/// Whether an in-place result fits its argument: the same dtype, and the same shape unless
/// the argument may be resized (a keyword-only written argument, as torch's `out=` are, whose
/// tensor can take a new shape). The message says what is wrong. For the bindings, which
/// copy a Python kernel's writes back.
#[cfg(feature = "python")]
pub(crate) fn check_write(
    arg: &Argument,
    before: &TensorMeta,
    after: &TensorMeta,
) -> std::result::Result<(), String> {
    check(arg, before, after, true)
}

fn check(
    arg: &Argument,
    before: &TensorMeta,
    after: &TensorMeta,
    can_resize: bool,
) -> std::result::Result<(), String> {
    let resizable = arg.kwarg_only && arg.is_write();
    let dtype_ok = before.dtype == after.dtype;
    let shape_ok = before.shape == after.shape || (resizable && can_resize);
    if dtype_ok && shape_ok {
        return Ok(());
    }
    let rule = if !dtype_ok {
        "an in-place or out= result must keep its argument's dtype"
    } else if resizable {
        "this argument's tensor cannot change its shape in place (a NumPy array cannot be resized); pass one of the result's shape"
    } else {
        "an in-place result must keep its argument's shape (only a keyword-only out= argument may be resized)"
    };
    Err(format!(
        "the result for argument '{}' is {after}, but the argument is {before}: {rule}; the argument is unchanged",
        arg.name,
    ))
}

/// A copy of a CPU tensor's values as they are now, made without the backend: host memory is
/// shared, not copied (a write replaces a tensor's host memory, never changes it), but for
/// exported memory, which a write changes where it is (`Tensor::export_host`); a CPU payload
/// is copied where it can be. `None` where neither works.
fn keep(t: &Tensor) -> Option<Result<Tensor>> {
    if t.is_host() && t.is_exported() {
        let copy = t.to_host().and_then(|h| h.try_clone());
        return Some(copy.map(|h| Tensor::host(Device::CPU, h)));
    }
    if t.is_host() {
        return Some(Ok(Tensor::new(Device::CPU, t.data())));
    }
    let p = t.payload()?.duplicate()?;
    Some(p.map(|p| Tensor::foreign(Device::CPU, p)))
}

/// The backup of a written device tensor, made from its CPU copy before the kernel writes
/// that copy (so the backend is not asked for the values a second time). `None`: it is backed
/// up from the device at the write-back.
pub(super) fn early_backup(cpu: &Tensor) -> Option<Tensor> {
    keep(cpu).and_then(Result::ok)
}

/// `dst`'s values as they are now, to put back if a write fails (`None`: they cannot be kept,
/// a CPU payload that cannot be copied).
fn backup(hooks: &dyn Backend, dst: &Tensor) -> Result<Option<Tensor>> {
    if dst.key() == DispatchKey::CPU || dst.is_host() {
        return keep(dst).transpose();
    }
    // Residency: a current host copy holds the values, and nothing crosses to read them.
    if let Some(copy) = dst.host_copy() {
        // Exported memory (`np.asarray` of a lazy backend's tensor) is written where it is:
        // its values are copied.
        if copy.is_exported() {
            return keep(&copy).transpose();
        }
        return Ok(Some(copy));
    }
    hooks.to_cpu(dst, true).map(Some)
}

/// Writes `src`'s values into `dst` as [`write`] does, except that a Native tensor that is no
/// view is written only if its data is still at `version` (else `Ok(false)`, nothing written).
fn write_checked(
    hooks: &dyn Backend,
    dst: &Tensor,
    src: &Tensor,
    version: Option<u64>,
) -> Result<bool> {
    match version {
        Some(v) if !dst.is_view() && dst.key() == DispatchKey::NATIVE && dst.is_host() => {
            Ok(dst.set_data_if(v, TensorData::Host(src.to_host()?)))
        }
        _ => write(hooks, dst, src).map(|()| true),
    }
}

/// Writes `src`'s values into `dst`: a view through its base, a device tensor through the
/// backend's `copy_from_cpu`, a CPU tensor in place (a payload that can be written, such as a
/// NumPy array) or by taking `src`'s data.
fn write(hooks: &dyn Backend, dst: &Tensor, src: &Tensor) -> Result<()> {
    // A view's values are its base's: the write goes there, not into the view's own copy.
    if dst.is_view() {
        return dst.write_view(src);
    }
    if dst.key() != DispatchKey::CPU {
        // A host-only `dst` takes the values on the host side; any other through
        // `copy_from_cpu`, its views told (`resident::write`).
        return crate::resident::write(hooks, dst, src).map(drop);
    }
    if !dst.is_host() {
        if let Some(r) = dst.payload().and_then(|p| p.assign(src)) {
            return r;
        }
        dst.set_data(src.data());
        return Ok(());
    }
    dst.set_data(TensorData::Host(src.to_host()?));
    Ok(())
}

/// Puts `dst` back as `backup` holds it. A backend whose `copy_from_cpu` fails again gets a
/// new payload made from the backup (`from_cpu`), so the tensor holds its values whatever the
/// hook does.
fn restore(hooks: &dyn Backend, dst: &Tensor, backup: &Tensor) {
    // A view's write changes its base all or nothing: one that failed left the base as it was.
    if write(hooks, dst, backup).is_ok() || dst.is_view() {
        return;
    }
    if dst.key() != DispatchKey::CPU {
        if let Ok(fresh) = hooks.from_cpu(backup, dst.device()) {
            dst.set_data(fresh.data());
        }
    } else {
        dst.set_data(backup.data());
    }
}

/// Writes every result into its argument, all or none; returns the bytes moved to the device,
/// or `Stale` (nothing written) where a Native argument was written meanwhile.
/// `args` are the schema's arguments; `context` names the kernel for a result that does not
/// fit, `hook_error` wraps a failing write.
pub(super) fn write_all(
    op: &OperatorHandle,
    key: DispatchKey,
    hooks: &dyn Backend,
    args: &[Argument],
    writes: &[Write<'_>],
) -> Result<std::result::Result<u64, Stale>> {
    let backups: Vec<Option<Tensor>> = writes
        .iter()
        .map(|w| match w.backup {
            Some(b) => Ok(Some(b.clone())),
            None => backup(hooks, w.dst),
        })
        .collect::<Result<_>>()
        .map_err(|e| super::steps::step_error(op, key, "to_cpu (backing up the outputs)", e))?;
    for (w, b) in writes.iter().zip(&backups) {
        let before = b.as_ref().and_then(Tensor::meta);
        if let (Some(arg), Some(before), Some(after)) = (args.get(w.arg), before, w.src.meta()) {
            // A CPU payload is written in place, so it keeps its shape; host memory and device
            // tensors take a new one.
            let can_resize = w.dst.is_host() || w.dst.key() != DispatchKey::CPU;
            check(arg, &before, &after, can_resize).map_err(|message| Error::Kernel {
                context: format!(
                    "the 'CPU' kernel of '{}', reached through the CPU fallback for '{key}'",
                    op.name()
                ),
                message,
            })?;
        }
    }
    let mut bytes = 0;
    for (k, w) in writes.iter().enumerate() {
        let written = write_checked(hooks, w.dst, w.src, w.version);
        if let Ok(false) = written {
            // The stale one was not written: those before it go back.
            for (w, b) in writes.iter().zip(&backups).take(k) {
                if let Some(b) = b {
                    restore(hooks, w.dst, b);
                }
            }
            return Ok(Err(Stale));
        }
        if let Err(e) = written {
            // The failing write too: it may have written part of its tensor.
            for (w, b) in writes.iter().zip(&backups).take(k + 1) {
                if let Some(b) = b {
                    restore(hooks, w.dst, b);
                }
            }
            return Err(super::steps::step_error(op, key, "copy_from_cpu", e));
        }
        // A host-only tensor was written on the host side: nothing crossed.
        if w.dst.key() != DispatchKey::CPU && !w.dst.is_host_only() {
            bytes += w.src.nbytes() as u64;
        }
    }
    Ok(Ok(bytes))
}
