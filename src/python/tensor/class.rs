//! `bf.Tensor`: the class, how an object is told to be one, and the view of its loan it keeps.

use pyo3::prelude::*;

use super::lent::{kernel_array, LentView};
use crate::python::ffi::KnownType;
use crate::python::gil_cell::GilCell;
use crate::tensor::Tensor;

/// A boxfall tensor on a device: `.device`, `.dtype`, `.shape`, `.payload`, `.numpy()`.
// No `freelist`: PyO3's free list takes a mutex on every allocation and every free, which
// costs more than Python's own small-object allocator does for every result a call makes.
#[pyclass(name = "Tensor", module = "boxfall", frozen)]
pub struct PyTensor {
    pub inner: Tensor,
    /// The read-only NumPy view of `inner`'s loan last lent to a Python kernel (`lent_array`),
    /// with the loan's `data_version` when it was made. Boxed: a `bf.Tensor` that is never
    /// lent stays small (Python zeroes every new object's memory).
    lent: GilCell<Option<Box<(u64, LentView)>>>,
}

impl PyTensor {
    /// The `bf.Tensor` of `inner`.
    fn new(inner: Tensor) -> PyTensor {
        PyTensor {
            inner,
            lent: GilCell::default(),
        }
    }
}

/// The largest loan whose view `lent_array` keeps in the `bf.Tensor`: a view kept there holds
/// the data it sees until the next loan, also after a write has replaced it, so only small ones
/// are kept (where the lock of the tensor's own kept view is a noticeable share of the call).
const KEEP_LENT_BYTES: usize = 4096;

/// `obj` as a `bf.Tensor`, told by its type pointer (kept from the first look-up): the class
/// has no subclasses (it is not declared `subclass`), so this is what `cast` finds, inline,
/// where `cast` (which asks the lazily made class object first) was a call of its own on the
/// path of every `bf.Tensor` argument.
#[inline(always)]
pub(crate) fn as_tensor<'a, 'py>(obj: &'a Bound<'py, PyAny>) -> Option<&'a Bound<'py, PyTensor>> {
    static TENSOR: KnownType = KnownType::new(<PyTensor as pyo3::PyTypeInfo>::type_object_raw);
    if !TENSOR.is_type_of(obj) {
        return None;
    }
    // SAFETY: the object's type is the `bf.Tensor` class itself (checked above).
    Some(unsafe { obj.cast_unchecked::<PyTensor>() })
}

/// `kernel_array(py, loan, false)` for `loan`, the loan of the tensor of `owner` (a
/// `bf.Tensor`; else, or for another tensor, the same as `kernel_array`). The view is kept in
/// `owner` with the loan's data version, so a tensor lent again reaches the kernel without
/// taking the loan's lock (its read and its release, two atomic operations) or a new array:
/// the GIL guards the `bf.Tensor`'s cell. A view the kernel reshaped or retyped in place, or
/// one of data replaced since (the version moved on), is not handed out again.
pub fn lent_array<'py>(owner: &Bound<'py, PyAny>, loan: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let py = owner.py();
    let owner = match as_tensor(owner) {
        Some(o) if loan.nbytes() <= KEEP_LENT_BYTES && o.get().inner.has_loan(loan) => o.get(),
        _ => return kernel_array(py, loan, false),
    };
    // Read before the view is made: a write meanwhile leaves the kept version behind, so the
    // view is made again next time.
    let version = loan.data_version();
    // SAFETY: the GIL is held (`py`), and while the reference lives no Python code runs and
    // nothing writes the cell: `intact` reads the view's array fields and takes a count of it
    // (a reference-count increment, which runs no code). Read in place rather than taken out
    // and put back (two writes of the cell, and the moves, each call).
    let kept = unsafe { owner.lent.peek() }
        .as_deref()
        .filter(|(v, _)| *v == version)
        .and_then(|(_, view)| view.intact(py));
    if let Some(array) = kept {
        return Ok(array);
    }
    let array = kernel_array(py, loan, false);
    // The stale view goes in any case, whether or not a new one is made.
    let view = array.as_ref().ok().and_then(LentView::new);
    let old = owner
        .lent
        .replace(py, view.map(|view| Box::new((version, view))));
    drop(old);
    array
}

/// Wraps a core tensor for Python (a new `bf.Tensor` object).
pub fn wrap(py: Python<'_>, t: Tensor) -> PyResult<Bound<'_, PyAny>> {
    Ok(Bound::new(py, PyTensor::new(t))?.into_any())
}
