//! Where a fallback's results go, and the check that a call's tensors are on one device.

use crate::dispatcher::OperatorHandle;
use crate::error::{Error, Result};
use crate::ivalue::IValue;
use crate::key::DispatchKey;
use crate::tensor::{Device, Tensor};

/// The device the results go to, found as the arguments' tensors are looked at: the first
/// tensor of the fallback's backend (lists included), else a `Device` argument naming the
/// backend, else index 0. Two different non-CPU devices are an error naming both.
///
/// The CPU stands for "none seen yet" (a CPU tensor never becomes the target), which keeps
/// the check to two compares a tensor.
pub(super) struct TargetDevice(Device);

impl Default for TargetDevice {
    fn default() -> TargetDevice {
        TargetDevice(Device::CPU)
    }
}

impl TargetDevice {
    #[inline(always)]
    pub(super) fn see(&mut self, op: &OperatorHandle, t: &Tensor) -> Result<()> {
        let d = t.device();
        if d.key == DispatchKey::CPU || d == self.0 {
            Ok(())
        } else if self.0.key == DispatchKey::CPU {
            self.0 = d;
            Ok(())
        } else {
            Err(two_devices(op, self.0, d))
        }
    }

    /// The target, once every tensor was seen; `device_arg` is the call's `Device` argument,
    /// if it has one (before it is rewritten).
    #[inline(always)]
    pub(super) fn finish(
        self,
        op: &OperatorHandle,
        key: DispatchKey,
        device_arg: Option<&IValue>,
    ) -> Result<Device> {
        match self.0 {
            d if d.key == key => Ok(d),
            d if d.key != DispatchKey::CPU => Err(other_backend(op, key, d)),
            _ => match device_arg {
                Some(IValue::Device(d)) if d.key == key => Ok(*d),
                _ => Ok(Device::new(key, 0)),
            },
        }
    }
}

#[cold]
fn other_backend(op: &OperatorHandle, key: DispatchKey, d: Device) -> Error {
    Error::Fallback(format!(
        "'{}' fell back for '{key}' but got tensors on {d}; move them to one device first",
        op.name()
    ))
}

/// The error of a call with tensors on two devices (the CPU fallback's, and the graph
/// recorder's).
#[cold]
pub(crate) fn two_devices(op: &OperatorHandle, f: Device, d: Device) -> Error {
    Error::Fallback(format!(
        "'{}' got tensors on two devices, {f} and {d}; move them to one device first",
        op.name()
    ))
}
