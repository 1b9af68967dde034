//! Pending tensors: a tensor of a graph backend whose values a recorded node will compute. Its
//! data is a [`Pending`] payload, which knows its dtype and shape (from the shape rules) and
//! the node; a sync puts the computed payload in the tensor's place (and in `Pending::result`,
//! for a copy of the old data held elsewhere).

use std::any::Any;
use std::sync::{Arc, OnceLock, Weak};

use crate::error::Error;
use crate::tensor::{DType, Payload, Tensor, TensorData, TensorMeta};

use super::state::Shared;

/// The payload of a pending tensor.
///
/// ```
/// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// assert!(boxfall::graph::pending_meta(&t).is_none()); // host memory is never pending
/// ```
pub struct Pending {
    pub(crate) meta: TensorMeta,
    /// `meta`'s dtype, parsed once: the shape rules read it at every call that takes the
    /// tensor, where cloning the meta and parsing its name was a tenth of a recorded call.
    pub(crate) dtype: Option<DType>,
    pub(crate) recording: Weak<Shared>,
    /// The recording's generation the node belongs to (a sync starts the next one).
    pub(crate) generation: u64,
    pub(crate) node: usize,
    pub(crate) out: usize,
    /// The computed data, once a sync committed it.
    pub(crate) result: OnceLock<TensorData>,
    /// Why it can never be computed, raised again at each read ([`failure`]): set once a sync
    /// found that it reads an input a failed run consumed (`donate.rs`), or that its node, or
    /// one it is computed from, fails (`sync.rs`: a failed program's graph run a node at a
    /// time).
    pub(crate) lost: OnceLock<Error>,
}

/// An error as a failed pending tensor keeps it, and as each read of it raises it: through the
/// bindings' [`ErrorCopier`] where one is set (a copy of a Python exception without its
/// frames, which may hold the tensor that holds it), else cloned.
pub(crate) fn failure(lost: &Error) -> Error {
    match COPIER.get() {
        Some(copy) => copy(lost),
        None => lost.clone(),
    }
}

/// How the bindings copy an error a failed pending tensor holds, for each read to raise (see
/// [`set_error_copier`]).
pub type ErrorCopier = fn(&Error) -> Error;

static COPIER: OnceLock<ErrorCopier> = OnceLock::new();

/// Sets how an error that a failed pending tensor keeps is copied, when it is kept and for each
/// read that raises it (the Python bindings give a copy of a Python exception without its
/// frames: they may hold the tensor, a cycle through Rust that no collector sees, and the
/// stored one, raised, would take each reader's frames too). The first setting stays.
///
/// ```
/// fn same(e: &boxfall::Error) -> boxfall::Error { e.clone() }
/// boxfall::graph::set_error_copier(same);
/// ```
pub fn set_error_copier(copier: ErrorCopier) {
    let _ = COPIER.set(copier);
}

impl Payload for Pending {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn meta(&self) -> Option<TensorMeta> {
        Some(self.meta.clone())
    }

    fn known_meta(&self) -> Option<(DType, &[usize])> {
        Some((self.dtype?, &self.meta.shape))
    }

    fn describe(&self) -> String {
        format!("{} (pending)", self.meta)
    }
}

/// The pending payload `data` is, if it is one.
pub(crate) fn pending_of(data: &TensorData) -> Option<Arc<dyn Payload>> {
    match data {
        TensorData::Foreign(p) if p.as_any().is::<Pending>() => Some(p.clone()),
        _ => None,
    }
}

/// `p` as a `Pending` (a payload `pending_of` gave).
pub(crate) fn as_pending(p: &Arc<dyn Payload>) -> &Pending {
    // `pending_of` checked the type; a payload of another type is never passed here.
    p.as_any()
        .downcast_ref::<Pending>()
        .unwrap_or_else(|| unreachable!("pending_of checked the payload's type"))
}

/// The dtype and shape of a pending tensor; `None` for any other tensor.
///
/// ```
/// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// assert!(boxfall::graph::pending_meta(&t).is_none());
/// ```
pub fn pending_meta(t: &Tensor) -> Option<TensorMeta> {
    // A view is never pending itself (its values are made from its base's): its data is not
    // read, which would make its values now.
    if t.is_view() {
        return None;
    }
    pending_of(&t.data()).map(|p| as_pending(&p).meta.clone())
}

/// Whether `t` is pending (its values not computed yet): a view is where its base is.
///
/// ```
/// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// assert!(!boxfall::graph::is_pending(&t));
/// ```
pub fn is_pending(t: &Tensor) -> bool {
    match t.view_base() {
        Some(base) => is_pending(base),
        None => pending_of(&t.data()).is_some(),
    }
}
