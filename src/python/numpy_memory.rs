//! NumPy arrays over a tensor's own host memory (`np.asarray(t)` of a Native tensor): the
//! tensor's memory exported (`Tensor::export_host`), so that NumPy's writes are the tensor's
//! and boxfall's writes are seen through the array; for a view of a Native tensor, a NumPy view
//! of its base's memory at the view's place; for a tensor of a lazy backend, host memory its
//! values move to, made authoritative (`resident::export`).

use std::sync::Arc;

use pyo3::prelude::*;

use super::errors::IntoPy;
use super::ffi::array_over;
use super::view_desc::view_ops;
use crate::key::DispatchKey;
use crate::strided::Strided;
use crate::tensor::{HostArray, Tensor};

/// The base object of an array `shared_array` makes: it keeps the exported memory alive for
/// as long as NumPy can reach it, whatever the tensor holds by then.
#[pyclass(frozen, module = "boxfall._boxfall")]
struct ExportedMemory {
    _data: Arc<HostArray>,
}

/// `t`'s values as a NumPy array over `t`'s own host memory, writable where `writable` and the
/// tensor allows it (a view NumPy makes read-only, as `broadcast_to`'s, gives a read-only
/// array). `None` where `t` has no host memory of its own to share: a backend's payload, or a
/// view of one (the caller then makes a host copy).
pub fn shared_array<'py>(
    py: Python<'py>,
    t: &Tensor,
    writable: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let (base, place) = match t.view_base() {
        None => (t, None),
        Some(base) => match view_ops(t) {
            Some(ops) => (base, Some((&ops.place, ops.shape(), ops.writable))),
            None => return Ok(None),
        },
    };
    let memory = if base.is_host() {
        base.export_host().py(py)?
    } else {
        // A lazy backend's tensor: its values move to host memory of its own, which becomes
        // authoritative (`resident::export`); any other backend's payload is the values, and
        // the caller makes a copy.
        match crate::backend::backend(base.key())
            .filter(|b| b.lazy() && base.key() != DispatchKey::CPU)
        {
            Some(hooks) => match crate::resident::export(hooks, base).py(py)? {
                Some(memory) => memory,
                None => return Ok(None),
            },
            None => return Ok(None),
        }
    };
    let owner = Bound::new(
        py,
        ExportedMemory {
            _data: Arc::clone(&memory),
        },
    )?
    .into_any();
    let writable = writable && place.is_none_or(|(_, _, w)| w);
    crate::tensor::host_match!(&*memory, a => over(a, place.map(|(p, s, _)| (p, s)), writable, owner))
        .map(Some)
}

/// A NumPy array over `a`'s memory (exported, C-ordered), or over the part of it `place`
/// describes (a view's offset and strides, in elements, and its shape), whose base object
/// `owner` keeps that memory alive.
fn over<'py, T: numpy::Element>(
    a: &ndarray::ArrayD<T>,
    place: Option<(&Strided, &[usize])>,
    writable: bool,
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let item = std::mem::size_of::<T>() as isize;
    let bad = |what: &str| pyo3::exceptions::PyValueError::new_err(what.to_owned());
    let (mut dims, mut strides, offset): (Vec<isize>, Vec<isize>, isize) = match place {
        None => (
            a.shape().iter().map(|&d| d as isize).collect(),
            a.strides().iter().map(|&s| s * item).collect(),
            0,
        ),
        Some((place, shape)) => {
            place
                .within(shape, a.len())
                .ok_or_else(|| bad("a view reaches outside its base's memory"))?;
            let empty = shape.contains(&0);
            (
                shape.iter().map(|&d| d as isize).collect(),
                place.strides.iter().map(|&s| s * item).collect(),
                // An empty view reads nothing: its data pointer is the base's.
                if empty { 0 } else { place.offset },
            )
        }
    };
    if !a.is_standard_layout() {
        return Err(bad("exported memory is not in C order"));
    }
    // SAFETY: `offset` is 0 or the offset of a view all of whose elements lie among `a`'s
    // (`within`, above), so `offset` stays inside `a`'s allocation.
    let data = unsafe { a.as_ptr().offset(offset) }.cast_mut();
    // SAFETY: `data` and the strides reach only `a`'s elements (checked above), which `owner`
    // keeps alive (it holds the `Arc` of the `HostArray` that `a` is in). The pointer carries
    // the allocation's own provenance, so NumPy writing through it (when `writable`) is sound
    // while no Rust reference to the elements is alive (the reasoning of `host_memory.rs`; the
    // tensor is exported, so boxfall writes it in place and makes no new copy it would miss).
    // Exercised by tests/python/test_native_numpy_memory.py.
    unsafe { array_over::<T>(owner, &mut dims, &mut strides, data.cast(), writable) }
}
