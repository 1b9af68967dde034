//! Graph mode's state: the graph backends (compiler, cache of compiled graphs) and the
//! pending state of each (graph backend, thread), a [`Recording`] kept by the thread
//! (`RECORDINGS`) and named weakly by each pending payload, so that a pending tensor read on
//! another thread syncs the graph that holds its node.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use crate::ivalue::IValue;
use crate::key::DispatchKey;
use crate::tensor::{Device, Tensor, TensorData, TensorMeta};

use super::program::{CompiledGraph, GraphCompiler, Node};

/// A graph backend: its compiler and its cache of compiled graphs (by structural key).
pub(crate) struct GraphBackend {
    pub(crate) compiler: Arc<dyn GraphCompiler>,
    pub(crate) cache: Mutex<HashMap<String, Arc<dyn CompiledGraph>>>,
}

/// The graph backends, by key index.
pub(crate) static BACKENDS: RwLock<Vec<Option<Arc<GraphBackend>>>> = RwLock::new(Vec::new());

/// The bits of the graph backends' keys.
pub(crate) static GRAPH_BACKENDS: AtomicU64 = AtomicU64::new(0);

/// The graph backend `key` is, if it is one.
pub(crate) fn graph_backend(key: DispatchKey) -> Option<Arc<GraphBackend>> {
    let all = BACKENDS.read().unwrap_or_else(|e| e.into_inner());
    all.get(key.index()).cloned().flatten()
}

/// The pending state of one (graph backend, thread).
pub(crate) struct Recording {
    pub(crate) backend: DispatchKey,
    /// Counts the syncs that committed; a pending payload of an earlier one is stale.
    pub(crate) generation: u64,
    /// Set while a sync computes the state (taken out meanwhile).
    pub(crate) busy: bool,
    pub(crate) state: State,
}

/// What a graph is recorded into.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) device: Option<Device>,
    pub(crate) inputs: Vec<Input>,
    /// The scalar inputs' values (`Arg::Scalar`).
    pub(crate) scalars: Vec<IValue>,
    pub(crate) nodes: Vec<Node>,
    /// A handle of every pending tensor made, with its node and result index: the ones that
    /// another handle still holds at the sync are the graph's outputs.
    pub(crate) pending: Vec<(Tensor, usize, usize)>,
}

/// A concrete tensor a graph reads: its data as it was when first read (a later eager write
/// of the tensor makes a new input).
pub(crate) struct Input {
    pub(crate) tensor: Tensor,
    pub(crate) version: u64,
    pub(crate) data: TensorData,
    pub(crate) meta: TensorMeta,
}

thread_local! {
    /// This thread's recordings, one per graph backend it used.
    static RECORDINGS: RefCell<Vec<Arc<Mutex<Recording>>>> = const { RefCell::new(Vec::new()) };
}

/// This thread's recording for `backend`, made on first use.
pub(crate) fn recording(backend: DispatchKey) -> Arc<Mutex<Recording>> {
    RECORDINGS.with(|r| {
        let mut r = r.borrow_mut();
        if let Some(found) = r.iter().find(|rec| lock(rec).backend == backend) {
            return found.clone();
        }
        let made = Arc::new(Mutex::new(Recording {
            backend,
            generation: 0,
            busy: false,
            state: State::default(),
        }));
        r.push(made.clone());
        made
    })
}

/// This thread's recordings.
pub(crate) fn recordings() -> Vec<Arc<Mutex<Recording>>> {
    RECORDINGS.with(|r| r.borrow().clone())
}

/// The lock of a recording (a panic while it was held leaves a state still worth reading).
pub(crate) fn lock(r: &Mutex<Recording>) -> std::sync::MutexGuard<'_, Recording> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}
