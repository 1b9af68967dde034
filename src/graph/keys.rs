//! The `Graph` functionality key, once registered: what `bf.eager()` and a replay exclude.

use std::sync::OnceLock;

use crate::key::{DispatchKey, DispatchKeySet};

/// The `Graph` functionality key, registered with the first graph backend.
pub(crate) static GRAPH_KEY: OnceLock<DispatchKey> = OnceLock::new();

/// The `Graph` key as a set (empty before any graph backend): what `bf.eager()` excludes.
///
/// ```
/// let keys = boxfall::graph::graph_keys();
/// assert!(keys.is_empty() || keys.highest().unwrap().name() == "Graph");
/// ```
pub fn graph_keys() -> DispatchKeySet {
    GRAPH_KEY.get().map_or(DispatchKeySet::EMPTY, |k| k.set())
}
