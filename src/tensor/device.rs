//! Where a tensor lives (`Device`) and where its values are (`Residency`).

use std::fmt;

use crate::error::{Error, Result};
use crate::key::DispatchKey;

/// A device: a backend key and an index.
///
/// ```
/// use boxfall::{Device, DispatchKey};
/// let d = Device::new(DispatchKey::NATIVE, 1);
/// assert_eq!(d.to_string(), "Native:1");
/// assert_eq!(Device::parse("native:1").unwrap(), d);
/// assert_eq!(Device::parse("cpu").unwrap(), Device::CPU);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Device {
    /// The backend key.
    pub key: DispatchKey,
    /// The device index within the backend.
    pub index: u16,
}

impl Device {
    /// The host CPU.
    ///
    /// ```
    /// use boxfall::{Device, DispatchKey};
    /// assert_eq!(Device::CPU.key, DispatchKey::CPU);
    /// assert_eq!(Device::CPU.to_string(), "CPU:0");
    /// ```
    pub const CPU: Device = Device {
        key: DispatchKey::CPU,
        index: 0,
    };

    /// A device of a backend key.
    ///
    /// ```
    /// use boxfall::{Device, DispatchKey};
    /// let d = Device::new(DispatchKey::NATIVE, 3);
    /// assert_eq!((d.key, d.index), (DispatchKey::NATIVE, 3));
    /// ```
    pub const fn new(key: DispatchKey, index: u16) -> Device {
        Device { key, index }
    }

    /// Reads `"Backend:index"`, or the backend name alone, ignoring case.
    ///
    /// ```
    /// use boxfall::{Device, DispatchKey};
    /// assert_eq!(Device::parse("NATIVE:2").unwrap(), Device::new(DispatchKey::NATIVE, 2));
    /// assert!(Device::parse("cpu:x").is_err()); // bad index
    /// assert!(Device::parse("CompositeImplicit").is_err()); // not a backend
    /// ```
    pub fn parse(text: &str) -> Result<Device> {
        let (name, index) = match text.rsplit_once(':') {
            Some((n, i)) => {
                let index = i.parse::<u16>().map_err(|_| {
                    Error::Fallback(format!("'{text}' is not a device: bad index '{i}'"))
                })?;
                (n, index)
            }
            None => (text, 0),
        };
        let key = DispatchKey::from_name_ignore_case(name)
            .filter(|k| k.is_backend())
            .ok_or_else(|| Error::UnknownKey {
                name: name.to_string(),
                known: crate::key::registered_keys()
                    .into_iter()
                    .filter(|k| k.is_backend())
                    .map(|k| k.name())
                    .collect(),
            })?;
        Ok(Device { key, index })
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.key, self.index)
    }
}

/// Where a tensor's values are.
///
/// ```
/// use boxfall::{native, tensor::Residency, Tensor};
/// assert_eq!(native::tensor(ndarray::arr1(&[1.0]).into_dyn()).residency(), Residency::Memory);
/// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// assert_eq!(Tensor::host_only(cpu, native::DEVICE).residency(), Residency::Host);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// Host memory the tensor owns (a CPU or Native tensor): no payload, nothing to move.
    Memory,
    /// A device payload, and no current host copy.
    Device,
    /// The host only: no payload yet ([`Tensor::host_only`](crate::Tensor::host_only)).
    Host,
    /// A device payload and a host copy of the same values.
    Both,
}
