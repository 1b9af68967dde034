//! `bf.Tensor`, Python payloads, and the NumPy <-> host memory conversions.
//!
//! One concern a file: `class.rs` the `bf.Tensor` class, `methods.rs` its Python methods,
//! `payload.rs` Python objects as payloads, `numpy_in.rs` NumPy arrays copied into host
//! memory, `numpy_out.rs` host memory as NumPy arrays, `lent.rs` the read-only views lent to
//! kernels.

mod class;
mod lent;
mod methods;
mod numpy_in;
mod numpy_out;
mod payload;

pub(crate) use class::as_tensor;
pub use class::{lent_array, wrap, PyTensor};
pub use lent::kernel_array;
pub use methods::numpy_dtype;
pub use numpy_in::{numpy_to_host, plain_numpy_to_cpu};
pub use payload::{
    cpu_tensor_to_numpy, data_object, hook_error, numpy_tensor, object_tensor, payload_object,
};
