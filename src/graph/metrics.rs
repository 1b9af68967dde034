//! Graph mode's figures (`bf.metrics.graphs()`): graphs compiled, cache hits, compile and
//! execute time, nodes per graph, syncs by reason, graph breaks per operator. Counted under
//! one lock by the recorder and at syncs only: an eager call never reaches them.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Graph mode's figures since the last reset.
///
/// ```
/// let f = boxfall::graph::graph_metrics();
/// assert!(f.graphs_run >= f.compiled.min(f.graphs_run));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphFigures {
    /// Graphs compiled (cache misses).
    pub compiled: u64,
    /// Syncs whose graph was found compiled in the backend's cache.
    pub cache_hits: u64,
    /// Time in the backends' compilers, in nanoseconds, with the time a compiled graph's run
    /// spent compiling where its function reported it ([`compiled_in_run`]: `jax.jit`
    /// compiles at a program's first call).
    pub compile_ns: u64,
    /// Time running compiled graphs, in nanoseconds (less their reported compiling).
    pub execute_ns: u64,
    /// Compiled graphs run.
    pub graphs_run: u64,
    /// Nodes of the graphs run, all together (over `graphs_run`: nodes per graph).
    pub nodes: u64,
    /// The most nodes in one graph run.
    pub max_nodes: u64,
    /// Input buffers the programs run consumed (donated) to hold their results: the old data
    /// of tensors written in place, which nothing else held
    /// ([`CompiledGraph::run_donating`](super::CompiledGraph::run_donating)).
    pub donated: u64,
    /// Syncs whose results came from their program run ahead, launched while the graph was
    /// still being recorded ([`CompiledGraph::runs_ahead`](super::CompiledGraph::runs_ahead)).
    pub ran_ahead: u64,
    /// Programs run ahead whose results were let go: the recording was another graph (the
    /// device's time they took was spent for nothing).
    pub ahead_missed: u64,
    /// Syncs that failed (nothing committed).
    pub failures: u64,
    /// Syncs by reason (`"numpy"`, `"payload"`, `"graph break"`, `"sync"`, ...).
    pub syncs: BTreeMap<String, u64>,
    /// Graph breaks per operator.
    pub breaks: BTreeMap<String, u64>,
    /// Why each graph after a backend's first was compiled (the first difference from the
    /// nearest compiled graph), the last [`KEPT_REASONS`] of them, oldest first.
    pub recompiles: Vec<String>,
}

/// How many recompile reasons the figures keep.
///
/// ```
/// assert!(boxfall::graph::graph_metrics().recompiles.len() <= boxfall::graph::KEPT_REASONS);
/// ```
pub const KEPT_REASONS: usize = 64;

static FIGURES: Mutex<GraphFigures> = Mutex::new(GraphFigures {
    compiled: 0,
    cache_hits: 0,
    compile_ns: 0,
    execute_ns: 0,
    graphs_run: 0,
    nodes: 0,
    max_nodes: 0,
    donated: 0,
    ran_ahead: 0,
    ahead_missed: 0,
    failures: 0,
    syncs: BTreeMap::new(),
    breaks: BTreeMap::new(),
    recompiles: Vec::new(),
});

fn with(f: impl FnOnce(&mut GraphFigures)) {
    f(&mut FIGURES.lock().unwrap_or_else(|e| e.into_inner()));
}

/// Graph mode's figures now.
///
/// ```
/// boxfall::graph::reset_graph_metrics();
/// assert_eq!(boxfall::graph::graph_metrics().compiled, 0);
/// ```
pub fn graph_metrics() -> GraphFigures {
    FIGURES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Sets graph mode's figures back to zero.
///
/// ```
/// boxfall::graph::reset_graph_metrics();
/// assert!(boxfall::graph::graph_metrics().breaks.is_empty());
/// ```
pub fn reset_graph_metrics() {
    with(|f| *f = GraphFigures::default());
}

pub(crate) fn graph_break(op: &str) {
    with(|f| *f.breaks.entry(op.to_string()).or_default() += 1);
}

pub(crate) fn sync(reason: &'static str) {
    with(|f| *f.syncs.entry(reason.to_string()).or_default() += 1);
}

pub(crate) fn cache_hit() {
    with(|f| f.cache_hits += 1);
}

thread_local! {
    /// Nanoseconds the run going on in this thread spent compiling, as its compiled function
    /// said ([`compiled_in_run`]); taken by the run's count.
    static COMPILING: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Says that the compiled graph running in this thread spent `ns` nanoseconds of its run
/// compiling: a compiler that compiles at a program's first call (`jax.jit` traces and
/// compiles then) reports it, so that [`GraphFigures::compile_ns`] holds that time and
/// [`GraphFigures::execute_ns`] only the rest of the run.
///
/// ```
/// boxfall::graph::compiled_in_run(0);
/// ```
pub fn compiled_in_run(ns: u64) {
    COMPILING.with(|c| c.set(c.get().saturating_add(ns)));
}

/// The run's time split into its compiling (what its function reported) and the rest.
fn split_run(ns: u64) -> (u64, u64) {
    let compiling = COMPILING.with(|c| c.replace(0));
    (compiling.min(ns), ns - compiling.min(ns))
}

pub(crate) fn compiled(ns: u64) {
    with(|f| {
        f.compiled += 1;
        f.compile_ns += ns;
    });
}

pub(crate) fn executed(ns: u64, nodes: u64, donated: u64) {
    let (compiling, ns) = split_run(ns);
    with(|f| {
        f.compile_ns += compiling;
        f.donated += donated;
        f.graphs_run += 1;
        f.execute_ns += ns;
        f.nodes += nodes;
        f.max_nodes = f.max_nodes.max(nodes);
    });
}

pub(crate) fn ran_ahead(ns: u64, nodes: u64) {
    with(|f| f.ran_ahead += 1);
    executed(ns, nodes, 0);
}

pub(crate) fn ahead_missed() {
    with(|f| f.ahead_missed += 1);
}

pub(crate) fn failure() {
    // A run that compiled, then failed: its compile is counted still.
    let compiling = COMPILING.with(|c| c.replace(0));
    with(|f| {
        f.failures += 1;
        f.compile_ns += compiling;
    });
}

pub(crate) fn recompiled(reason: String) {
    with(|f| {
        if f.recompiles.len() >= KEPT_REASONS {
            f.recompiles.remove(0);
        }
        f.recompiles.push(reason);
    });
}
