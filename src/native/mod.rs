//! The built-in `Native` backend: host memory owned by Rust (ndarray). Because it is host
//! memory, the CPU fallback lends its read-only tensors to CPU kernels without a copy.

pub(crate) mod alloc;
mod array_api;
mod cast;
mod elem;
mod ewise;
mod kernels;
mod promote;
mod reduce;
mod support;

use crate::dispatcher::OperatorHandle;
use crate::error::Result;
use crate::kernel::{KernelFunction, TensorsFn};
use crate::key::DispatchKey;
use crate::tensor::{Device, HostArray, Tensor};

pub use kernels::{kernel_names, register_array_api_kernels, register_kernels};
pub use support::{set_blocking_hook, BlockingHook, BLOCKING_ELEMENTS};

/// The transfer hooks of `Native` (defined with the backend registry, which serves them from
/// the first look without this module).
pub use crate::backend::NativeBackend;

/// The typed entry of a Native kernel of two arrays (the array API's `add(Tensor x1, Tensor
/// x2)`, `subtract`, `multiply`, `divide` and the six comparisons), which the kernel carries
/// as its entry on two tensors ([`KernelFunction::with_tensors_entry`]; its table entries route
/// [`Route::Tensors`](crate::kernel::Route::Tensors)): a binding that holds the two tensors runs
/// it without building a stack of them. It gives the boxed kernel's result and errors;
/// `Ok(None)` where the boxed kernel hands the call to the CPU fallback, which the caller then
/// reaches by the boxed kernel, on the same arguments.
///
/// ```
/// use boxfall::{native, DispatchKey, Library, LibraryKind};
/// let mut lib = Library::new("doc_native_tensors", LibraryKind::Def).unwrap();
/// let op = lib.define("add(Tensor x1, Tensor x2) -> Tensor").unwrap();
/// native::register_array_api_kernels(&mut lib).unwrap();
/// let (x, y) = (native::tensor(ndarray::arr1(&[1.0]).into_dyn()), native::tensor(ndarray::arr1(&[2.0]).into_dyn()));
/// let out = op.resolve(DispatchKey::NATIVE.set(), |r| {
///     native::NativeTensors::of(r.kernel().unwrap()).unwrap().call(&op, &x, &y).unwrap()
/// });
/// let sum = out.flatten().unwrap().host_array().unwrap();
/// assert_eq!(sum.dtype(), boxfall::DType::F64);
/// ```
#[derive(Clone, Copy)]
pub struct NativeTensors(TensorsFn);

impl NativeTensors {
    /// The typed entry of `kernel`, if it is a Native kernel of two arrays.
    ///
    /// ```
    /// assert!(boxfall::native::NativeTensors::of(&boxfall::KernelFunction::fallthrough()).is_none());
    /// ```
    #[inline]
    pub fn of(kernel: &KernelFunction) -> Option<NativeTensors> {
        kernel.tensors_entry().map(NativeTensors)
    }

    /// The kernel's result on `x` and `y` (`op`: the operator called, for its errors).
    ///
    /// ```
    /// # use boxfall::{native, DispatchKey, Library, LibraryKind};
    /// # let mut lib = Library::new("doc_native_tensors_call", LibraryKind::Def).unwrap();
    /// # let op = lib.define("less(Tensor x1, Tensor x2) -> Tensor").unwrap();
    /// # native::register_array_api_kernels(&mut lib).unwrap();
    /// let x = native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// op.resolve(DispatchKey::NATIVE.set(), |r| {
    ///     let entry = native::NativeTensors::of(r.kernel().unwrap()).unwrap();
    ///     assert!(entry.call(&op, &x, &x).unwrap().is_some());
    ///     assert!(entry.call(&op, &x, &cpu).unwrap().is_none()); // the fallback's case
    /// });
    /// ```
    #[inline]
    pub fn call(&self, op: &OperatorHandle, x: &Tensor, y: &Tensor) -> Result<Option<Tensor>> {
        (self.0)(op, x, y)
    }
}

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
