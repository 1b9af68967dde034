//! A sync: a recording's graph built (inputs, nodes, outputs: the pending tensors another
//! handle still holds), compiled or found in the backend's cache by its structure, run, and
//! its outputs committed only once the whole program succeeded.
//!
//! A failed program commits nothing. Its graph is then run a node at a time, eagerly
//! ([`Graph::replay_each`]), to find where it fails: where a node fails (a singular matrix's
//! `matrix_power(a, -1)` on the host), each pending tensor computed from it holds that node's
//! error, raised again at each read of it, and every other output takes its eager value, so a
//! failure never makes unrelated pending tensors uncomputable, recorded before or after it. The
//! failure surfaces at `bf.sync()` (the first such error, once every graph of the thread was
//! synced) and at each read of a failed tensor; a read of another tensor that synced the graph
//! does not raise it. Where every node computes eagerly (the program failed for a reason of
//! its own: a compile, the device's memory, a run's fault), nothing is committed: every
//! tensor stays pending in its graph, and the sync raises the program's error (the next sync
//! retries it).

use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::ivalue::IValue;
use crate::key::{DispatchKey, LocalKeysGuard};
use crate::tensor::{Payload, Tensor, TensorData};

use super::ahead;
use super::donate;
use super::guess::{Ahead, Guess, Outcome, WeakData};
use super::keys::graph_keys;
use super::limit::SIZE_LIMIT;
use super::metrics;
use super::pending::{as_pending, pending_of};
use super::program::{Arg, CompiledGraph, Graph, SETTINGS};
use super::rules::op_rule;
use super::state::{
    graph_backend, lock, prune_orphans, recordings, settle, wait_settled, GraphBackend, Shared,
    State,
};

/// Computes every pending tensor of this thread (each graph backend's graph), counted as a
/// sync under `reason` (`bf.sync()` gives `"sync"`). Where a node of a graph fails (see the
/// module's documentation), the tensors computed from it hold its error and the rest are
/// computed; the first such error is returned once every graph was synced.
///
/// ```
/// boxfall::graph::sync("sync").unwrap(); // nothing pending: nothing to do
/// ```
pub fn sync(reason: &'static str) -> Result<()> {
    let mut failed = None;
    for rec in recordings() {
        let found = sync_generation(&rec, reason, None)?;
        failed = failed.or(found);
    }
    prune_orphans();
    failed.map_or(Ok(()), |e| Err(super::pending::failure(&e)))
}

/// This thread's pending graphs as they would be compiled now (`bf.graph.dump()`).
///
/// ```
/// assert!(boxfall::graph::pending_graphs().is_empty());
/// ```
pub fn pending_graphs() -> Vec<Graph> {
    recordings()
        .iter()
        .filter_map(|rec| {
            let r = lock(rec);
            if r.state.nodes.is_empty() {
                return None;
            }
            let outputs = outputs_of(&r.state);
            let mut graph = build(r.backend, &r.state, &outputs).0;
            if let Some(gb) = graph_backend(r.backend) {
                graph.settings = gb.compiler.settings().unwrap_or_default();
            }
            Some(graph)
        })
        .collect()
}

/// Which pending tensors are outputs: those another handle still holds.
fn outputs_of(state: &State) -> Vec<usize> {
    (0..state.pending.len())
        .filter(|&i| !state.pending[i].0.is_only_handle())
        .collect()
}

/// The graph of `state`, whose outputs are the pending tensors `outputs` (indices into
/// `state.pending`), with the nodes no output needs left out (their results no tensor holds,
/// so nothing can read them), and the inputs only those nodes read: so two programs that
/// differ only in dead work share one compiled graph. Also gives which of `state.inputs` the
/// graph's inputs are, and which of `state.scalars` its scalar inputs, in order.
fn build(backend: DispatchKey, state: &State, outputs: &[usize]) -> (Graph, Used) {
    let nodes = &state.nodes;
    let mut live = vec![false; nodes.len()];
    for &i in outputs {
        live[state.pending[i].1] = true;
    }
    // Nodes name only earlier ones: one backward pass marks everything an output needs.
    for n in (0..nodes.len()).rev() {
        if live[n] {
            for a in &nodes[n].args {
                if let Arg::Node(m, _) = a {
                    live[*m] = true;
                }
            }
        }
    }
    let mut node_at = vec![usize::MAX; nodes.len()];
    let mut input_at = vec![usize::MAX; state.inputs.len()];
    let mut used_inputs = Vec::new();
    let mut scalar_at = vec![usize::MAX; state.scalars.len()];
    let mut used_scalars = Vec::new();
    let mut kept = Vec::new();
    for (n, node) in nodes.iter().enumerate().filter(|(n, _)| live[*n]) {
        let mut node = node.clone();
        for a in &mut node.args {
            match a {
                Arg::Node(m, _) => *m = node_at[*m],
                Arg::Input(i) => {
                    if input_at[*i] == usize::MAX {
                        input_at[*i] = used_inputs.len();
                        used_inputs.push(*i);
                    }
                    *i = input_at[*i];
                }
                Arg::Scalar(j) => {
                    if scalar_at[*j] == usize::MAX {
                        scalar_at[*j] = used_scalars.len();
                        used_scalars.push(*j);
                    }
                    *j = scalar_at[*j];
                }
                Arg::Const(_) => {}
            }
        }
        node_at[n] = kept.len();
        kept.push(node);
    }
    let graph = Graph {
        backend,
        device: state
            .device
            .unwrap_or(crate::tensor::Device::new(backend, 0)),
        inputs: used_inputs
            .iter()
            .map(|&i| state.inputs[i].meta.clone())
            .collect(),
        scalars: used_scalars
            .iter()
            .map(|&j| state.scalars[j].type_name())
            .collect(),
        nodes: kept,
        outputs: outputs
            .iter()
            .map(|&i| (node_at[state.pending[i].1], state.pending[i].2))
            .collect(),
        settings: String::new(),
    };
    (
        graph,
        Used {
            inputs: used_inputs,
            scalars: used_scalars,
        },
    )
}

/// Which of a recording's inputs and scalars a built graph reads, in its order.
struct Used {
    inputs: Vec<usize>,
    scalars: Vec<usize>,
}

/// Computes a recording's pending tensors (see the module's documentation); a sync another
/// thread runs of it is waited for first. A node's failure stays with the tensors computed
/// from it, raised at their reads: the caller (a graph cut, a graph break) asked for none of
/// them.
pub(crate) fn sync_recording(rec: &Shared, reason: &'static str) -> Result<()> {
    sync_generation(rec, reason, None).map(|_| ())
}

/// [`sync_recording`], which with `only` (a generation) does nothing once that generation was
/// synced: a reader of a pending tensor of it wants that graph's results, not the graph
/// recorded since (which its thread may still be adding to).
///
/// Any thread may run it: the recording's state is taken out under its lock and marked as
/// computed by this thread, so the recording thread, should it record or read meanwhile,
/// waits for the commit (or the failure, which puts the state back) as other readers do.
///
/// Gives the first error of the nodes found to fail (their tensors hold it; the rest were
/// committed); `Err` where nothing was committed.
fn sync_generation(rec: &Shared, reason: &'static str, only: Option<u64>) -> Result<Option<Error>> {
    let (backend, mut state, outputs, part) = loop {
        let mut r = lock(rec);
        if r.computing.is_some() {
            drop(r);
            wait_settled(rec, &|| "a pending tensor was read or synced".to_string())?;
            continue;
        }
        if only.is_some_and(|g| g != r.generation) || r.state.nodes.is_empty() {
            return Ok(None);
        }
        let mut outputs = outputs_of(&r.state);
        // Those computed from an input a failed run consumed are lost, the rest computed.
        donate::drop_lost(r.backend, &r.state, &mut outputs);
        r.computing = Some(std::thread::current().id());
        // A graph cut at the size limit, or the last of a run of cut ones, is a part: its
        // compile is counted at its site as that part, since each part of one run of calls
        // is another graph whose count says nothing of recompiles.
        let cut = reason == SIZE_LIMIT;
        let part = (cut || r.cuts > 0).then_some(r.cuts + 1);
        r.cuts = if cut { r.cuts + 1 } else { 0 };
        break (r.backend, std::mem::take(&mut r.state), outputs, part);
    };
    metrics::sync(reason);
    // The compiler and the program run eagerly: what they call on the backend's tensors is
    // not recorded into the graph being computed.
    let run = {
        let _eager = LocalKeysGuard::exclude(graph_keys());
        if outputs.is_empty() {
            Ok((Vec::new(), None, Outcome::NotLaunched))
        } else {
            let mut in_program = false;
            run_graph(backend, &mut state, &outputs, part, &mut in_program).map_err(|e| {
                // Where the program failed: which outputs fail, each on its own.
                let each = in_program
                    .then(|| isolate(backend, &state, &outputs))
                    .flatten();
                (e, each)
            })
        }
    };
    let mut r = lock(rec);
    let done = match run {
        Ok((datas, ran, outcome)) => {
            ahead::guess_next(&mut r, ran, outcome);
            for (&i, data) in outputs.iter().zip(datas) {
                commit(&state.pending[i].0, data);
            }
            r.generation += 1;
            Ok(None)
        }
        Err((e, Some(each))) => {
            // The failed program committed nothing; the graph run a node at a time did.
            log::debug!(
                "the program of a graph of backend '{backend}' failed ({e}); its outputs were \
                 computed a node at a time, {} of {} failing",
                each.iter().filter(|o| o.is_err()).count(),
                each.len()
            );
            ahead::guess_next(&mut r, None, Outcome::NotLaunched);
            if each.iter().all(|o| o.is_ok()) {
                // Explained by an operator the compiler refused (`isolate`): a graph break.
                let graph = build(backend, &state, &outputs).0;
                for node in graph
                    .nodes
                    .iter()
                    .filter(|n| op_rule(&n.op).refused(backend))
                {
                    metrics::graph_break(node.op.name());
                }
            } else {
                metrics::failure();
            }
            let mut first = None;
            for (&i, got) in outputs.iter().zip(each) {
                let t: &Tensor = &state.pending[i].0;
                match got {
                    Ok(data) => commit(t, data),
                    Err(e) => {
                        // Kept as the bindings copy it: a Python exception without its frames.
                        let e = super::pending::failure(&e);
                        if let Some(p) = pending_of(&t.data()) {
                            let _ = as_pending(&p).lost.set(e.clone());
                        }
                        first.get_or_insert(e);
                    }
                }
            }
            r.generation += 1;
            Ok(first)
        }
        Err((e, None)) => {
            // Nothing committed: every pending tensor stays pending, in the graph it was in.
            r.state = state;
            r.state.ahead = Ahead::Declined;
            ahead::guess_next(&mut r, None, Outcome::NotLaunched);
            metrics::failure();
            Err(e)
        }
    };
    settle(rec, r);
    prune_orphans();
    done
}

/// A committed output: `t` (pending) takes `data`, and so does its payload's `result`, for a
/// copy of the payload held elsewhere.
fn commit(t: &Tensor, data: TensorData) {
    if let Some(p) = pending_of(&t.data()) {
        let _ = as_pending(&p).result.set(data.clone());
    }
    t.set_data(data);
}

/// Each output's data, or its error, of the graph of `state` whose outputs are the pending
/// tensors `outputs`, its nodes run eagerly one at a time ([`Graph::replay_each`]): what a
/// sync whose program failed commits, where some output fails (`None` where none does, or
/// where the graph reads an input a failed run consumed, whose buffer may be gone).
fn isolate(
    backend: DispatchKey,
    state: &State,
    outputs: &[usize],
) -> Option<Vec<Result<TensorData>>> {
    let (graph, used) = build(backend, state, outputs);
    if used.inputs.iter().any(|&i| state.inputs[i].consumed) {
        return None;
    }
    let inputs: Vec<Tensor> = used
        .inputs
        .iter()
        .map(|&i| Tensor::new(graph.device, state.inputs[i].data.clone()))
        .collect();
    let scalars: Vec<IValue> = used
        .scalars
        .iter()
        .map(|&j| state.scalars[j].clone())
        .collect();
    let each = graph.replay_each(&inputs, &scalars).ok()?;
    // A program that failed where its compiler refused an operator (`rules::refuse`: its
    // kernel cannot be traced) is explained by that node: the graph run a node at a time is
    // committed, a break at that operator, as its later calls are.
    if each.iter().all(|o| o.is_ok()) && !refused_in(&graph) {
        return None;
    }
    Some(each.into_iter().map(|o| o.map(|t| t.data())).collect())
}

/// Whether the backend's compiler refused an operator of `graph` (`rules::refuse`).
fn refused_in(graph: &Graph) -> bool {
    graph
        .nodes
        .iter()
        .any(|n| op_rule(&n.op).refused(graph.backend))
}

/// The outputs' data of the graph of `state` whose outputs are the pending tensors `outputs`:
/// its program from the backend's cache (by the state's structural hash, else by the built
/// graph's key), else compiled, run on the inputs' data, consuming those nothing else holds
/// where it can (`donate.rs`, which marks in `state` what a failed run consumed). Errors name
/// the backend; `in_program` is set where the compile or the program failed (not a setting,
/// nor an input a failed run consumed).
fn run_graph(
    backend: DispatchKey,
    state: &mut State,
    outputs: &[usize],
    part: Option<usize>,
    in_program: &mut bool,
) -> Result<(Vec<TensorData>, Option<Guess>, Outcome)> {
    let gb = graph_backend(backend)
        .ok_or_else(|| Error::Fallback(format!("'{backend}' is not a graph backend")))?;
    let results: Vec<(usize, usize)> = outputs
        .iter()
        .map(|&i| (state.pending[i].1, state.pending[i].2))
        .collect();
    // Read once a sync: a program compiled under other settings is another program.
    let settings = gb.compiler.settings().map_err(|e| {
        Error::Fallback(format!(
            "the settings of graph backend '{backend}' could not be read; no tensor was changed: {e}"
        ))
    })?;
    // A program run ahead (`ahead.rs`) gives the results where the recording is its graph.
    let mut outcome = Outcome::NotLaunched;
    if let Ahead::Launched(l) = std::mem::take(&mut state.ahead) {
        // A run ahead whose check fails is run again at the sync, as a failed program.
        if ahead::confirmed(&l, state, &results, &settings)
            && l.guess.program.check_results(&l.outs).is_ok()
        {
            metrics::cache_hit();
            metrics::ran_ahead(l.ns, l.guess.graph.nodes.len() as u64);
            let again = Guess {
                graph: l.guess.graph.clone(),
                program: l.guess.program.clone(),
                scalars: l.guess.scalars.clone(),
                inputs: l.inputs.iter().map(WeakData::of).collect(),
            };
            return Ok((l.outs, part.is_none().then_some(again), Outcome::Confirmed));
        }
        outcome = Outcome::Missed;
        metrics::ahead_missed();
        log::debug!(
            "graph backend '{backend}': the program run ahead was not the graph recorded; its results are let go"
        );
    }
    let mut hash = state.hash;
    hash.settings(&settings);
    let hash = hash.with_outputs(&results);
    let found = gb
        .hashed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&hash)
        .and_then(|progs| {
            progs
                .iter()
                .find(|(g, _)| g.settings == settings && state.recorded_as(g, &results))
                .map(|(g, p)| (g.clone(), p.clone()))
        });
    // A hit runs the graph as recorded: every node, input and scalar of the state, in order.
    let (program, graph, used, nodes, whole) = match found {
        Some((g, p)) => {
            metrics::cache_hit();
            (p, g, None, state.nodes.len(), true)
        }
        None => {
            let (mut graph, used) = build(backend, state, outputs);
            graph.settings = settings;
            let whole = graph.nodes.len() == state.nodes.len()
                && used.inputs.len() == state.inputs.len()
                && used.scalars.len() == state.scalars.len();
            let nodes = graph.nodes.len();
            let (graph, p) = compiled(&gb, graph, part).inspect_err(|_| *in_program = true)?;
            // Only a graph recorded whole is found by the state's hash: a state with nodes or
            // inputs left out hashes them, and its graph numbers the rest anew.
            if whole {
                gb.hashed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(hash)
                    .or_default()
                    .push((graph.clone(), p.clone()));
            }
            (p, graph, Some(used), nodes, whole)
        }
    };
    // Which of `state.inputs` and `state.scalars` the program's inputs and scalars are.
    let (at, scalars): (Vec<usize>, Vec<IValue>) = match used {
        None => ((0..state.inputs.len()).collect(), state.scalars.clone()),
        Some(used) => (
            used.inputs,
            used.scalars
                .iter()
                .map(|&j| state.scalars[j].clone())
                .collect(),
        ),
    };
    donate::check_inputs(backend, &graph, state, &at)?;
    // Asked before the inputs' data is cloned for the program (a clone is another holder).
    let donate = donate::donatable(&graph, state, &at);
    let inputs: Vec<TensorData> = at.iter().map(|&i| state.inputs[i].data.clone()).collect();
    let start = Instant::now();
    *in_program = true;
    let (outs, consumed) = donate::run(&*program, inputs, &scalars, donate, state, &at, |run| {
        let outs = run.map_err(|e| {
            Error::Fallback(format!(
                "the compiled graph of backend '{backend}' ({nodes} nodes) failed; no tensor was changed: {e}"
            ))
        })?;
        if outs.len() != results.len() {
            return Err(Error::Fallback(format!(
                "the compiled graph of backend '{backend}' gave {} results for {} outputs; no tensor was changed",
                outs.len(),
                results.len()
            )));
        }
        Ok(outs)
    })?;
    program.check_results(&outs).map_err(|e| {
        Error::Fallback(format!(
            "the compiled graph of backend '{backend}' ({nodes} nodes) failed; no tensor was changed: {e}"
        ))
    })?;
    *in_program = false;
    metrics::executed(
        start.elapsed().as_nanos() as u64,
        nodes as u64,
        consumed as u64,
    );
    // The next recording may repeat this graph: a whole one, which consumed nothing (a run
    // ahead donates nothing, so it must be a program that ran without donating).
    let ran = (whole && part.is_none() && consumed == 0).then(|| Guess {
        graph,
        program,
        scalars,
        inputs: at
            .iter()
            .map(|&i| WeakData::of(&state.inputs[i].data))
            .collect(),
    });
    Ok((outs, ran, outcome))
}

/// The program of `graph` from the backend's cache by its key, else compiled (the compile's
/// reason, where it is not the backend's first, noted), with the graph as the cache keeps it.
/// `part`: which part of a run of calls cut at the size limit the graph is, if it is one.
fn compiled(
    gb: &GraphBackend,
    graph: Graph,
    part: Option<usize>,
) -> Result<(Arc<Graph>, Arc<dyn CompiledGraph>)> {
    let backend = graph.backend;
    let key = graph.key();
    let cached = gb
        .cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    if let Some(p) = cached {
        metrics::cache_hit();
        return Ok((Arc::new(graph), p));
    }
    let reason = {
        let cache = gb.cache.lock().unwrap_or_else(|e| e.into_inner());
        recompile_reason(&key, cache.keys().map(String::as_str))
    };
    let site = super::sites::site(part);
    let at = site
        .as_deref()
        .map(|s| format!(" at {s}"))
        .unwrap_or_default();
    if let Some(reason) = &reason {
        log::debug!("graph backend '{backend}' compiles again{at}: {reason}");
        metrics::recompiled(format!("{backend}{at}: {reason}"));
    }
    super::sites::compiled_at(backend, site.as_deref(), part, reason.as_deref());
    let nodes = graph.nodes.len();
    let start = Instant::now();
    let graph = Arc::new(graph);
    let p = gb.compiler.compile(&graph).map_err(|e| {
        Error::Fallback(format!(
            "the compiler of graph backend '{backend}' failed on a graph of {nodes} nodes: {e}"
        ))
    })?;
    metrics::compiled(start.elapsed().as_nanos() as u64);
    gb.keep(key, p.clone());
    Ok((graph, p))
}

/// Computes `t` if it is pending: syncs the graph its node is in (counted under `reason`,
/// a sync point: `"numpy"`, `"payload"`, `"graph break"`, ...). Nothing for any other tensor.
///
/// Another thread may write `t` meanwhile (its write rebinds `t` to a pending result of its
/// own graph): the computed value is then not put in `t`'s place, which would undo that
/// write, and `t` is computed again, with the data it holds now; so `t` was not pending at some
/// point before this returns. A failure is `t`'s own (its node, or one it is computed from).
///
/// ```
/// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// boxfall::graph::compute(&t, "numpy").unwrap(); // not pending: nothing to do
/// ```
pub fn compute(t: &Tensor, reason: &'static str) -> Result<()> {
    // A view's values are made from its base's when read: computing the base is enough.
    if let Some(base) = t.view_base() {
        return compute(base, reason);
    }
    loop {
        // Read before the data: a write between the two makes `set_data_if` below refuse.
        let version = t.data_version();
        let Some(p) = pending_of(&t.data()) else {
            return Ok(());
        };
        match resolve(&p, reason) {
            // Another handle's copy of the old data resolved to the committed result: the
            // tensor takes it now, unless written since (the sync already did if it held the
            // tensor, and then the data is no longer pending).
            Ok(data) => {
                if t.set_data_if(version, data) {
                    return Ok(());
                }
            }
            // Written meanwhile by another thread: what it holds now is what is read (the
            // value read before may have been left out of its graph's sync, as nothing held
            // it any more).
            Err(_) if t.data_version() != version => {}
            Err(e) => return Err(e),
        }
    }
}

/// The computed data of `data` if it is a pending payload (its graph synced first if needed,
/// counted under `reason`); `None` for any other data.
///
/// ```
/// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// assert!(boxfall::graph::computed(&t.data(), "payload").unwrap().is_none());
/// ```
pub fn computed(data: &TensorData, reason: &'static str) -> Result<Option<TensorData>> {
    match pending_of(data) {
        Some(p) => resolve(&p, reason).map(Some),
        None => Ok(None),
    }
}

/// The computed data of the pending payload `p`, syncing its graph first if needed.
pub(crate) fn resolve(p: &Arc<dyn Payload>, reason: &'static str) -> Result<TensorData> {
    let pending = as_pending(p);
    if let Some(d) = pending.result.get() {
        return Ok(d.clone());
    }
    if let Some(e) = pending.lost.get() {
        return Err(super::pending::failure(e));
    }
    let recording = pending.recording.upgrade().ok_or_else(|| {
        Error::Fallback(format!(
            "a pending tensor ({}) cannot be computed: the thread that recorded its graph ended \
             while no tensor held its results",
            pending.meta
        ))
    })?;
    sync_generation(&recording, reason, Some(pending.generation))?;
    if let Some(e) = pending.lost.get() {
        return Err(super::pending::failure(e));
    }
    pending.result.get().cloned().ok_or_else(|| {
        Error::Fallback(format!(
            "a pending tensor ({}) was not computed: its graph ran without it (no tensor held it \
             when the graph was synced)",
            pending.meta
        ))
    })
}

/// Why a graph of key `key` compiles although graphs of keys `cached` were compiled: the first
/// line where it differs from the nearest of them (the one sharing the most lines before the
/// first difference), in words; `None` for a backend's first graph. A key is the inputs, one
/// node a line, the outputs, then the backend's settings if any (`Graph::key`).
pub(crate) fn recompile_reason<'a>(
    key: &str,
    cached: impl Iterator<Item = &'a str>,
) -> Option<String> {
    let new: Vec<&str> = key.lines().collect();
    let mut best: Option<(usize, Vec<&str>)> = None;
    for k in cached {
        let old: Vec<&str> = k.lines().collect();
        let same = new.iter().zip(&old).take_while(|(a, b)| a == b).count();
        if best.as_ref().is_none_or(|(n, _)| same > *n) {
            best = Some((same, old));
        }
    }
    let (at, old) = best?;
    let was = old.get(at).copied().unwrap_or("(nothing)");
    let now = new.get(at).copied().unwrap_or("(nothing)");
    let what = match at {
        _ if now.starts_with(SETTINGS) || was.starts_with(SETTINGS) => {
            "the backend's settings".to_string()
        }
        0 => "the inputs' dtypes and shapes".to_string(),
        n if n + 1 >= new.len() || now.starts_with("->") => "the outputs".to_string(),
        n => format!("node {}", n - 1),
    };
    Some(format!(
        "{what}: '{now}' where the nearest compiled graph has '{was}'"
    ))
}

#[cfg(test)]
mod tests {
    use super::recompile_reason;

    #[test]
    fn the_reason_names_the_first_difference_from_the_nearest_graph() {
        let cached = [
            "1|f64[2];\na(i0,)\nb(n0.0,)\n->n1.0,",
            "1|f64[3];\na(i0,)\n->n0.0,",
        ];
        let key = "1|f64[2];\na(i0,)\nc(n0.0,)\n->n1.0,";
        let why = recompile_reason(key, cached.iter().copied()).expect("a reason");
        assert_eq!(
            why,
            "node 1: 'c(n0.0,)' where the nearest compiled graph has 'b(n0.0,)'"
        );
        let why = recompile_reason("1|f64[4];\na(i0,)\n->n0.0,", cached.iter().copied());
        assert!(why
            .expect("a reason")
            .starts_with("the inputs' dtypes and shapes: '1|f64[4];'"));
        assert!(recompile_reason(key, std::iter::empty()).is_none());
        // Only the settings differ: the reason names them, not the outputs.
        let old = "1|f64[2];\na(i0,)\n->n0.0,\nsettings: x64=False matmul_precision=None";
        let new = "1|f64[2];\na(i0,)\n->n0.0,\nsettings: x64=False matmul_precision=highest";
        let why = recompile_reason(new, [old].into_iter()).expect("a reason");
        assert!(
            why.starts_with(
                "the backend's settings: 'settings: x64=False matmul_precision=highest'"
            ),
            "{why}"
        );
    }
}
