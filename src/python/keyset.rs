//! `bf.DispatchKeySet`: the key set of a call, as a boxed kernel receives it.

use pyo3::prelude::*;

use crate::key::{DispatchKey, DispatchKeySet};

/// The key set of a call, as a boxed kernel receives it.
#[pyclass(name = "DispatchKeySet", module = "boxfall", frozen)]
#[derive(Clone, Copy)]
pub struct PyKeySet(pub DispatchKeySet);

#[pymethods]
impl PyKeySet {
    /// The highest key's name (None for an empty set).
    fn highest(&self) -> Option<String> {
        self.0.highest().map(|k| k.name())
    }

    /// The set without its highest key.
    fn without_highest(&self) -> PyKeySet {
        PyKeySet(self.0.without_highest())
    }

    /// The keys' names, highest first.
    fn names(&self) -> Vec<String> {
        self.0.names()
    }

    fn __contains__(&self, name: &str) -> bool {
        DispatchKey::from_name(name).is_ok_and(|k| self.0.contains(k))
    }

    fn __len__(&self) -> usize {
        self.0 .0.count_ones() as usize
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyKeySet>().is_ok_and(|o| o.get().0 == self.0)
    }

    fn __hash__(&self) -> u64 {
        self.0 .0
    }

    fn __repr__(&self) -> String {
        format!("DispatchKeySet({})", self.0.names().join(", "))
    }
}
