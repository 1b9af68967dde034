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

use super::program::{CompiledGraph, Graph, GraphCompiler, Node, StructureHash};

/// A graph backend: its compiler and its cache of compiled graphs, by structural key (the
/// text, which a compile's reason compares) and by structural hash (what a sync looks up).
pub(crate) struct GraphBackend {
    pub(crate) compiler: Arc<dyn GraphCompiler>,
    pub(crate) cache: Mutex<HashMap<String, Arc<dyn CompiledGraph>>>,
    /// The programs of graphs recorded whole (every node and input in the graph compiled), by
    /// [`State::hash`] with their outputs: the graph each was compiled from, to confirm a hit.
    pub(crate) hashed: Mutex<HashMap<u64, Vec<Hashed>>>,
}

/// A program found by a structural hash, and the graph it was compiled from.
pub(crate) type Hashed = (Arc<Graph>, Arc<dyn CompiledGraph>);

impl GraphBackend {
    /// A graph backend of `compiler`, nothing compiled yet.
    pub(crate) fn new(compiler: Arc<dyn GraphCompiler>) -> GraphBackend {
        GraphBackend {
            compiler,
            cache: Mutex::default(),
            hashed: Mutex::default(),
        }
    }
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

/// The dtype a result of `dtype` has on graph backend `key`'s device, where it differs
/// ([`GraphCompiler::device_dtype`]), asked without holding the backend (a call records one
/// a result).
pub(crate) fn device_dtype(key: DispatchKey, dtype: &str) -> Option<&'static str> {
    let all = BACKENDS.read().unwrap_or_else(|e| e.into_inner());
    all.get(key.index())?.as_ref()?.compiler.device_dtype(dtype)
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
    /// The structural hash of `inputs` and `nodes` (kept by `add_input` and `push_node`).
    pub(crate) hash: StructureHash,
}

impl State {
    /// Adds an input; its index.
    pub(crate) fn add_input(&mut self, input: Input) -> usize {
        self.hash.input(&input.meta);
        self.inputs.push(input);
        self.inputs.len() - 1
    }

    /// Adds a scalar input; its index.
    pub(crate) fn add_scalar(&mut self, v: IValue) -> usize {
        self.hash.scalar(&v);
        self.scalars.push(v);
        self.scalars.len() - 1
    }

    /// Adds a node.
    pub(crate) fn push_node(&mut self, node: Node) {
        self.hash.node(&node);
        self.nodes.push(node);
    }
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
    /// This thread's recordings, one per graph backend it used, with the backend (read here
    /// without locking each recording).
    static RECORDINGS: RefCell<Vec<(DispatchKey, Arc<Mutex<Recording>>)>> =
        const { RefCell::new(Vec::new()) };
}

/// This thread's recording for `backend`, made on first use.
pub(crate) fn recording(backend: DispatchKey) -> Arc<Mutex<Recording>> {
    RECORDINGS.with(|r| {
        let mut r = r.borrow_mut();
        if let Some((_, found)) = r.iter().find(|(key, _)| *key == backend) {
            return found.clone();
        }
        let made = Arc::new(Mutex::new(Recording {
            backend,
            generation: 0,
            busy: false,
            state: State::default(),
        }));
        r.push((backend, made.clone()));
        made
    })
}

/// This thread's recordings.
pub(crate) fn recordings() -> Vec<Arc<Mutex<Recording>>> {
    RECORDINGS.with(|r| r.borrow().iter().map(|(_, rec)| rec.clone()).collect())
}

/// The lock of a recording (a panic while it was held leaves a state still worth reading).
pub(crate) fn lock(r: &Mutex<Recording>) -> std::sync::MutexGuard<'_, Recording> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}
