//! Backends defined in Python: `bf.register_backend(name, to_cpu=, from_cpu=, copy_from_cpu=)`.
//!
//! One concern a file: `held.rs` the dtypes a device holds, `registry.rs` the backends
//! registered from Python and their locks, `hooks.rs` the hooks as the core's `Backend`,
//! `checks.rs` what the hooks return checked, `from_cpu.rs` the `from_cpu` hook told its device, `class.rs` the `bf.Backend` class,
//! `register.rs` `bf.register_backend`, `host_data.rs` where a creation operator puts host
//! data.

mod checks;
mod class;
mod from_cpu;
mod held;
mod hooks;
mod host_data;
mod register;
mod registry;

pub use class::{backends, get_backend, PyBackend};
pub use host_data::host_data_target;
pub use register::register_backend;
pub use registry::backends_version;
pub(crate) use registry::is_python_backend;
pub(super) use registry::{backend_lock, Serial};
