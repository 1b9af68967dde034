//! Each graph backend's size limit: the most nodes a graph records before it is cut (computed
//! then, the call starting the next graph). Read at every recorded call, so kept in atomics by
//! key index, never in a map.
//!
//! A small limit is a pipeline on a device that runs programs asynchronously (JAX): the first
//! part's program runs on the device while the host records the next part, where one graph
//! would have kept the device idle for the whole recording. Each cut costs a program's launch
//! and whatever fusion the compiler would have done across it; on a TPU v5e that cost more
//! than the overlap gained (`benches/jax_device.py --graph --limits`), so the default is large.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::key::{DispatchKey, NUM_KEYS};

use super::state::graph_backend;

/// The limit of a graph backend nobody set one for: bounds what a program that never reads a
/// value keeps pending, and what one compile takes.
pub const DEFAULT_GRAPH_LIMIT: usize = 4096;

/// The sync reason of a cut (`bf.metrics.graphs()["syncs"]`), which also tells a cut's graph
/// from others where its compile is counted (`sites.rs`).
pub(crate) const SIZE_LIMIT: &str = "size limit";

static LIMITS: [AtomicUsize; NUM_KEYS] =
    [const { AtomicUsize::new(DEFAULT_GRAPH_LIMIT) }; NUM_KEYS];

/// Sets the most nodes a graph of `backend` records before it is cut, from the next recorded
/// call on (a graph already past it is cut at its next call).
///
/// ```
/// use boxfall::graph::{graph_limit, set_graph_limit, DEFAULT_GRAPH_LIMIT};
/// use boxfall::DispatchKey;
/// // The Native backend is no graph backend: nothing compiles its graphs.
/// let err = set_graph_limit(DispatchKey::NATIVE, 40).unwrap_err();
/// assert!(err.to_string().contains("no graph backend"));
/// assert_eq!(graph_limit(DispatchKey::NATIVE), DEFAULT_GRAPH_LIMIT);
/// ```
pub fn set_graph_limit(backend: DispatchKey, nodes: usize) -> Result<()> {
    if graph_backend(backend).is_none() {
        return Err(Error::Registration(format!(
            "'{backend}' is no graph backend: a size limit is set on a backend registered \
             with a compiler"
        )));
    }
    if nodes == 0 {
        return Err(Error::Registration(format!(
            "a graph of backend '{backend}' must be allowed at least one node, not 0"
        )));
    }
    LIMITS[backend.index()].store(nodes, Ordering::Relaxed);
    Ok(())
}

/// The most nodes a graph of `backend` records before it is cut ([`set_graph_limit`]).
///
/// ```
/// use boxfall::graph::{graph_limit, DEFAULT_GRAPH_LIMIT};
/// use boxfall::DispatchKey;
/// assert_eq!(graph_limit(DispatchKey::NATIVE), DEFAULT_GRAPH_LIMIT);
/// ```
pub fn graph_limit(backend: DispatchKey) -> usize {
    LIMITS[backend.index()].load(Ordering::Relaxed)
}
