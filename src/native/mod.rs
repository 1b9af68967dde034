//! The built-in `Native` backend: host memory owned by Rust (ndarray). Because it is host
//! memory, the CPU fallback lends its read-only tensors to CPU kernels without a copy.

mod array_api;
mod cast;
mod elem;
mod ewise;
mod kernels;
mod promote;
mod reduce;

use std::sync::Arc;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::key::DispatchKey;
use crate::tensor::{Device, HostArray, Tensor, TensorData};

pub use kernels::{
    kernel_names, register_array_api_kernels, register_kernels, set_blocking_hook, BlockingHook,
    BLOCKING_ELEMENTS,
};

/// The `Native` device, index 0.
///
/// ```
/// assert_eq!(boxfall::native::DEVICE.to_string(), "Native:0");
/// ```
pub const DEVICE: Device = Device::new(DispatchKey::NATIVE, 0);

/// A Native tensor holding `array`.
///
/// ```
/// let t = boxfall::native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
/// assert_eq!(t.device(), boxfall::native::DEVICE);
/// ```
pub fn tensor(array: impl Into<HostArray>) -> Tensor {
    Tensor::host(DEVICE, array.into())
}

/// The transfer hooks of `Native`.
///
/// ```
/// use boxfall::backend::Backend;
/// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
/// let cpu = boxfall::native::NativeBackend.to_cpu(&t, false).unwrap();
/// // read-only: lent, not copied
/// assert!(std::sync::Arc::ptr_eq(&cpu.host_array().unwrap(), &t.host_array().unwrap()));
/// ```
pub struct NativeBackend;

fn host_of(t: &Tensor) -> Result<Arc<HostArray>> {
    t.host_array()
        .ok_or_else(|| Error::Fallback(format!("a tensor on {} holds no host memory", t.device())))
}

impl Backend for NativeBackend {
    fn to_cpu(&self, t: &Tensor, for_write: bool) -> Result<Tensor> {
        if for_write {
            return Ok(Tensor::host(Device::CPU, host_of(t)?.try_clone()?));
        }
        // Lent, not copied: the tensor's one loan, which holds its data as it is now.
        t.host_loan().ok_or_else(|| {
            Error::Fallback(format!("a tensor on {} holds no host memory", t.device()))
        })
    }

    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        Ok(Tensor::new(device, TensorData::Host(cpu.to_host()?)))
    }

    fn from_cpu_owned(&self, cpu: Tensor, device: Device) -> Result<Tensor> {
        if cpu.is_host() {
            Ok(cpu.into_device(device))
        } else {
            self.from_cpu(&cpu, device)
        }
    }

    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        dst.set_data(TensorData::Host(src.to_host()?));
        Ok(())
    }
}

/// Registers `cpu_fallback` as Native's backend fallback, once for the process (the Python
/// package does this at import), so every operator with a CPU kernel runs on Native tensors.
///
/// ```
/// boxfall::native::install_fallback().unwrap();
/// boxfall::native::install_fallback().unwrap(); // idempotent
/// ```
pub fn install_fallback() -> Result<()> {
    static INSTALLED: std::sync::OnceLock<std::sync::Mutex<Option<crate::Library>>> =
        std::sync::OnceLock::new();
    let cell = INSTALLED.get_or_init(|| std::sync::Mutex::new(None));
    let mut guard = cell.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        let mut lib = crate::Library::new("_", crate::LibraryKind::Impl)?;
        lib.fallback(DispatchKey::NATIVE, crate::cpu_fallback())?;
        *guard = Some(lib);
    }
    Ok(())
}
