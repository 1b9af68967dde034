//! Graph mode's state: the graph backends (compiler, cache of compiled graphs) and the
//! pending state of each (graph backend, thread), a [`Recording`] kept by the thread
//! (`RECORDINGS`) and named weakly by each pending payload, so that a pending tensor read on
//! another thread syncs the graph that holds its node (or waits for the sync under way).
//!
//! A payload names its recording weakly because the recording holds the payload's tensor
//! (`State::pending`): a strong name both ways would be a cycle that no thread breaks. When a
//! thread ends, its recordings that still have outputs (pending tensors held elsewhere) are
//! kept in `ORPHANS`, so that another thread can compute them; they are let go once nothing
//! can read them (synced, or every output dropped), checked at each thread's end and each
//! sync while there are any.
//!
//! A recording holds no input that no live tensor can read: past enough bytes of new inputs it
//! lets go of those that only dropped work reads ([`State::release_dead_inputs`]), so a loop
//! that records work and drops it holds an input or two until its sync, not one an iteration.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};
use std::thread::ThreadId;

use crate::ivalue::IValue;
use crate::key::DispatchKey;
use crate::tensor::{DType, Device, Tensor, TensorData, TensorMeta, ViewLayout};

use super::guess::{Ahead, Guess};
use super::program::{same_node, Arg, CompiledGraph, Graph, GraphCompiler, Node, StructureHash};

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

    /// Keeps a newly compiled program under its key. Past [`PROGRAMS_KEPT`] programs the
    /// cache starts again (both of its maps), so that a process that keeps meeting new shapes
    /// holds a bounded number of programs (a JAX program holds its compiled executable: kept
    /// without bound, a test suite of many shapes grew past 10 GB); a dropped program that is
    /// needed again is compiled again, which its recompile reason shows.
    pub(crate) fn keep(&self, key: String, program: Arc<dyn CompiledGraph>) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= PROGRAMS_KEPT {
            cache.clear();
            self.hashed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        }
        cache.insert(key, program);
    }
}

/// The most compiled programs a graph backend keeps (see [`GraphBackend::keep`]): far more than
/// the distinct graphs a loop compiles (a site that compiles more than 8 warns).
pub(crate) const PROGRAMS_KEPT: usize = 256;

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

/// A recording and what a thread that finds it being computed waits on.
pub(crate) struct Shared {
    recording: Mutex<Recording>,
    /// Notified when a sync of the recording ends, committed or failed.
    settled: Condvar,
}

/// The pending state of one (graph backend, thread).
pub(crate) struct Recording {
    pub(crate) backend: DispatchKey,
    /// Counts the syncs that committed; a pending payload of an earlier one is stale.
    pub(crate) generation: u64,
    /// The thread whose sync computes the state (taken out meanwhile): the recording thread
    /// or one that read a pending tensor of it. Others wait for it ([`wait_settled`]).
    pub(crate) computing: Option<ThreadId>,
    /// The graphs cut at the size limit since the last sync for another reason: the part of
    /// a long run of calls the next graph is, which its compile's site names (`limit.rs`).
    pub(crate) cuts: usize,
    pub(crate) state: State,
    /// The whole graph the last sync ran, and the guess for the next recording: that graph
    /// where the sync before it ran it too (`ahead.rs`).
    pub(crate) last: Option<Arc<Guess>>,
    pub(crate) guess: Option<Arc<Guess>>,
    /// Runs ahead missed in a row, and how many repeating recordings are still not guessed
    /// after the last miss (`ahead::guess_next`).
    pub(crate) misses: u32,
    pub(crate) skip: u32,
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
    /// The views read (`_strided_view` nodes): each node's layout, for a later read of the same
    /// place of the same data to reuse (`views.rs`).
    pub(crate) view_reads: Vec<(ViewLayout, usize)>,
    /// Where the state stands with running its guessed program ahead (`ahead.rs`).
    pub(crate) ahead: Ahead,
    /// The bytes of the inputs added since [`State::release_dead_inputs`] last looked, and
    /// of those it kept then: it looks again once the first pass the second (and
    /// [`RELEASE_BYTES`]), so a pass costs its nodes once per as many bytes of new inputs as
    /// were held, at least.
    fresh_bytes: usize,
    kept_bytes: usize,
}

/// The least bytes of new inputs after which a recording looks for inputs no live tensor can
/// read ([`State::release_dead_inputs`]).
pub(crate) const RELEASE_BYTES: usize = 4 << 20;

impl State {
    /// Adds an input; its index.
    pub(crate) fn add_input(&mut self, input: Input) -> usize {
        self.hash.input(&input.meta);
        self.fresh_bytes = self.fresh_bytes.saturating_add(bytes_of(&input.meta));
        self.inputs.push(input);
        self.inputs.len() - 1
    }

    /// Adds a scalar input; its index.
    pub(crate) fn add_scalar(&mut self, v: IValue) -> usize {
        self.hash.scalar(&v);
        self.scalars.push(v);
        self.scalars.len() - 1
    }

    /// Adds a node (its results' pending tensors already made, and held by the caller); past
    /// enough bytes of new inputs, lets go of the inputs no live tensor can read
    /// ([`State::release_dead_inputs`]).
    pub(crate) fn push_node(&mut self, node: Node) {
        self.hash.node(&node);
        self.nodes.push(node);
        if self.fresh_bytes >= RELEASE_BYTES.max(self.kept_bytes) {
            self.release_dead_inputs();
        }
    }

    /// Which nodes a pending tensor held elsewhere (an output, were the graph synced now) is
    /// computed from: nodes name only earlier ones, so one backward pass marks them.
    pub(crate) fn live_nodes(&self) -> Vec<bool> {
        let mut live = vec![false; self.nodes.len()];
        for (t, n, _) in &self.pending {
            if !t.is_only_handle() {
                live[*n] = true;
            }
        }
        for n in (0..self.nodes.len()).rev() {
            if live[n] {
                for a in &self.nodes[n].args {
                    if let Arg::Node(m, _) = a {
                        live[*m] = true;
                    }
                }
            }
        }
        live
    }

    /// Lets go of the data of each input that no live node reads, of a tensor nothing else
    /// holds (so no later call can read it again): a loop that records work and drops it
    /// (`r = xp.asarray(host + i) * 2`) would otherwise keep every input it made alive until
    /// the sync. The graph keeps its numbering (a pending tensor names its node by index): a
    /// released input keeps its dtype and shape, its data is an empty placeholder that no
    /// program reads (a sync builds its graph from the live nodes alone, and a graph recorded
    /// whole, found by its hash, has every node live), and no run ahead of this state is
    /// launched (it would read every input).
    pub(crate) fn release_dead_inputs(&mut self) {
        let live = self.live_nodes();
        let mut read = vec![false; self.inputs.len()];
        for (node, _) in self.nodes.iter().zip(&live).filter(|(_, l)| **l) {
            for a in &node.args {
                if let Arg::Input(i) = a {
                    read[*i] = true;
                }
            }
        }
        let (tensor, data) = released();
        let mut kept = 0usize;
        let mut any = false;
        for (input, read) in self.inputs.iter_mut().zip(read) {
            if input.tensor.same(&tensor) {
                continue;
            }
            if !read && input.tensor.is_only_handle() {
                input.tensor = tensor.clone();
                input.data = data.clone();
                any = true;
            } else {
                kept = kept.saturating_add(bytes_of(&input.meta));
            }
        }
        self.fresh_bytes = 0;
        self.kept_bytes = kept;
        if any && matches!(self.ahead, Ahead::Waiting | Ahead::Until(_)) {
            self.ahead = Ahead::Declined;
        }
    }

    /// Whether `graph` is the graph the state makes with `results` as its outputs, recorded whole:
    /// then their keys ([`Graph::key`]) are one, without writing either.
    pub(crate) fn recorded_as(&self, graph: &Graph, results: &[(usize, usize)]) -> bool {
        let state = self;
        graph.outputs == results
            && graph.inputs.len() == state.inputs.len()
            && graph.scalars.len() == state.scalars.len()
            && graph
                .scalars
                .iter()
                .zip(&state.scalars)
                .all(|(t, v)| *t == v.type_name())
            && graph.nodes.len() == state.nodes.len()
            && graph
                .inputs
                .iter()
                .zip(&state.inputs)
                .all(|(m, i)| *m == i.meta)
            && graph
                .nodes
                .iter()
                .zip(&state.nodes)
                .all(|(a, b)| same_node(a, b))
    }
}

/// The bytes of a tensor of `meta` (8 an element for a dtype host memory lacks).
fn bytes_of(meta: &TensorMeta) -> usize {
    let size = DType::from_name(&meta.dtype).map_or(8, DType::size);
    meta.shape.iter().fold(size, |n, &d| n.saturating_mul(d))
}

/// The tensor and data a released input holds ([`State::release_dead_inputs`]): one empty
/// host array, shared, which no recorded call passes (so no input matches it again).
fn released() -> (Tensor, TensorData) {
    static RELEASED: OnceLock<Tensor> = OnceLock::new();
    let t = RELEASED.get_or_init(|| Tensor::from_array(ndarray::ArrayD::<f64>::zeros(vec![0])));
    (t.clone(), t.data())
}

/// A concrete tensor a graph reads: its data as it was when first read (a later eager write
/// of the tensor makes a new input).
pub(crate) struct Input {
    pub(crate) tensor: Tensor,
    pub(crate) version: u64,
    pub(crate) data: TensorData,
    pub(crate) meta: TensorMeta,
    /// Set where a program allowed to consume (donate) `data` failed without saying it kept
    /// it (`CompiledGraph::run_donating`): its buffer may be freed, so a retry of a graph that
    /// reads it errs instead of running on it.
    pub(crate) consumed: bool,
}

/// A thread's recordings, one per graph backend it used, with the backend (read here without
/// locking each recording); handed to `ORPHANS` when the thread ends.
struct ThreadRecordings(RefCell<Vec<(DispatchKey, Arc<Shared>)>>);

impl Drop for ThreadRecordings {
    fn drop(&mut self) {
        let ended = std::mem::take(self.0.get_mut());
        adopt(ended.into_iter().map(|(_, rec)| rec));
    }
}

thread_local! {
    static RECORDINGS: ThreadRecordings = const { ThreadRecordings(RefCell::new(Vec::new())) };
}

/// This thread's recording for `backend`, made on first use.
pub(crate) fn recording(backend: DispatchKey) -> Arc<Shared> {
    RECORDINGS.with(|r| {
        let mut r = r.0.borrow_mut();
        if let Some((_, found)) = r.iter().find(|(key, _)| *key == backend) {
            return found.clone();
        }
        let made = Arc::new(Shared {
            recording: Mutex::new(Recording {
                backend,
                generation: 0,
                computing: None,
                cuts: 0,
                state: State::default(),
                last: None,
                guess: None,
                misses: 0,
                skip: 0,
            }),
            settled: Condvar::new(),
        });
        r.push((backend, made.clone()));
        made
    })
}

/// This thread's recordings (none while the thread ends).
pub(crate) fn recordings() -> Vec<Arc<Shared>> {
    RECORDINGS
        .try_with(|r| r.0.borrow().iter().map(|(_, rec)| rec.clone()).collect())
        .unwrap_or_default()
}

/// The lock of a recording (a panic while it was held leaves a state still worth reading).
pub(crate) fn lock(r: &Shared) -> MutexGuard<'_, Recording> {
    r.recording.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ends a sync of `r` that `guard` locks: the recording is no longer being computed, and the
/// threads waiting for it go on.
pub(crate) fn settle(r: &Shared, mut guard: MutexGuard<'_, Recording>) {
    guard.computing = None;
    drop(guard);
    r.settled.notify_all();
}

/// Waits until no other thread computes `r`, with the lock not held (and, through the wait
/// hook, the GIL released: the computing thread may need it). Errs where this thread computes
/// it: its compiler or program read a tensor of the graph they compute, a wait without end.
/// `what` says who waits, for the error.
pub(crate) fn wait_settled(r: &Shared, what: &dyn Fn() -> String) -> crate::Result<()> {
    let me = std::thread::current().id();
    {
        let guard = lock(r);
        match guard.computing {
            None => return Ok(()),
            Some(t) if t == me => {
                return Err(crate::Error::Fallback(format!(
                    "{} while its graph of backend '{}' is being computed by this thread (by the \
                     backend's compiler or program?)",
                    what(),
                    guard.backend
                )))
            }
            Some(_) => {}
        }
    }
    crate::blocking::blocking(&mut || {
        let mut guard = lock(r);
        while guard.computing.is_some() {
            guard = r.settled.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
    });
    Ok(())
}

/// The recordings of threads that ended with outputs still held (see the module's
/// documentation), and how many there are (read without the lock at each sync).
static ORPHANS: Mutex<Vec<Arc<Shared>>> = Mutex::new(Vec::new());
static ORPHAN_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Keeps the recordings of an ended thread that something can still read.
fn adopt(ended: impl Iterator<Item = Arc<Shared>>) {
    let kept: Vec<Arc<Shared>> = ended.filter(|rec| readable(rec)).collect();
    if !kept.is_empty() {
        let mut orphans = ORPHANS.lock().unwrap_or_else(|e| e.into_inner());
        orphans.extend(kept);
        ORPHAN_COUNT.store(orphans.len(), Ordering::Relaxed);
    }
    prune_orphans();
}

/// Whether a pending tensor of `rec` can still be read: it is being computed (a failed sync
/// puts its graph back), or a tensor of its graph is held elsewhere.
fn readable(rec: &Shared) -> bool {
    let r = lock(rec);
    r.computing.is_some() || r.state.pending.iter().any(|(t, _, _)| !t.is_only_handle())
}

/// Lets go of the ended threads' recordings that nothing can read any more; nothing to do (an
/// atomic load) while there are none.
pub(crate) fn prune_orphans() {
    if ORPHAN_COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut dropped = Vec::new();
    {
        let mut orphans = ORPHANS.lock().unwrap_or_else(|e| e.into_inner());
        let mut i = 0;
        while i < orphans.len() {
            if readable(&orphans[i]) {
                i += 1;
            } else {
                dropped.push(orphans.swap_remove(i));
            }
        }
        ORPHAN_COUNT.store(orphans.len(), Ordering::Relaxed);
    }
    // Dropped without the lock: a payload's drop may run Python, which may sync.
    drop(dropped);
}
