//! Where a fallback's results go, and the check that a call's tensors are on one device.

use crate::dispatcher::OperatorHandle;
use crate::error::{Error, Result};
use crate::ivalue::IValue;
use crate::key::DispatchKey;
use crate::tensor::{Device, Tensor};

/// The device the results go to, found as the arguments' tensors are looked at: the first
/// tensor of the fallback's backend (lists included), else a `Device` argument naming the
/// backend, else index 0. Two different non-CPU devices are an error naming both.
#[derive(Default)]
pub(super) struct TargetDevice(Option<Device>);

impl TargetDevice {
    #[inline(always)]
    pub(super) fn see(&mut self, op: &OperatorHandle, t: &Tensor) -> Result<()> {
        let d = t.device();
        match self.0 {
            _ if d.key == DispatchKey::CPU => Ok(()),
            None => {
                self.0 = Some(d);
                Ok(())
            }
            Some(f) if f == d => Ok(()),
            Some(f) => Err(two_devices(op, f, d)),
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
            Some(d) if d.key != key => Err(other_backend(op, key, d)),
            Some(d) => Ok(d),
            None => match device_arg {
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

#[cold]
fn two_devices(op: &OperatorHandle, f: Device, d: Device) -> Error {
    Error::Fallback(format!(
        "'{}' got tensors on two devices, {f} and {d}; move them to one device first",
        op.name()
    ))
}
