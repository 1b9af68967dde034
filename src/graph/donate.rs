//! Donation (in-place updates donate their input buffers): which of a
//! graph's inputs its program may consume, reusing their buffers for its results, as
//! `jax.jit`'s `donate_argnums` does ([`CompiledGraph::run_donating`]).
//!
//! A write recorded functionally (`x += y`) rebinds the tensor to a pending result, so the old
//! data is then held by the recording's input alone: no tensor, view or other handle can read
//! it after the run, and the program may write its result there instead of in new memory (the
//! device holds one copy of `x`, not two, while the program runs). Only such inputs are
//! offered: a payload (host memory is never consumed) whose `Arc` the graph's input is the
//! sole holder of, of a tensor no view was made of, of an output's dtype and shape (a buffer
//! no result fits is of no use, and JAX warns of it), at most one per output.
//!
//! A failure after a donation cannot be undone: the buffer is gone, while the graph is kept
//! for a retry (nothing committed). The program says which inputs it kept; the others are
//! marked consumed, and the pending tensors computed from them are lost: the next sync leaves
//! them out and computes the rest, and reading one fails with an error that says why
//! ([`drop_lost`]), never a run on freed memory ([`check_inputs`] guards that too). No tensor
//! the user can read otherwise is touched: a consumed input was held by nothing else. A
//! program that keeps what it may fail on (JAX's with a host callback, whose Python kernel may
//! raise, consumes nothing) leaves only a runtime failure of the device (out of memory) to
//! that path.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::key::DispatchKey;
use crate::tensor::{TensorData, TensorMeta};

use super::pending::{as_pending, pending_of};
use super::program::{Arg, CompiledGraph, Graph};
use super::state::State;

/// Which of `graph`'s inputs (`at[j]`: the index of input `j` in `state.inputs`) its program
/// may consume (see the module's documentation).
pub(super) fn donatable(graph: &Graph, state: &State, at: &[usize]) -> Vec<bool> {
    let mut donate: Vec<bool> = at
        .iter()
        .map(|&i| match &state.inputs[i].data {
            // Counted before the data is cloned for the program: 1 is the graph's input alone.
            // A weak handle could be upgraded to read the buffer after the run. A tensor a view
            // was made of is left alone: a backend's view payload may share its base's buffer
            // without holding its base's payload (boxfall cannot tell).
            TensorData::Foreign(p) => {
                Arc::strong_count(p) == 1
                    && Arc::weak_count(p) == 0
                    && !state.inputs[i].tensor.was_viewed()
            }
            TensorData::Host(_) => false,
        })
        .collect();
    if !donate.contains(&true) {
        return donate;
    }
    // Each output takes at most one input of its dtype and shape.
    let mut free: Vec<&TensorMeta> = graph
        .outputs
        .iter()
        .filter_map(|&(n, k)| graph.nodes.get(n)?.outputs.get(k))
        .collect();
    for (j, d) in donate.iter_mut().enumerate() {
        if *d {
            match free.iter().position(|m| Some(*m) == graph.inputs.get(j)) {
                Some(k) => {
                    free.swap_remove(k);
                }
                None => *d = false,
            }
        }
    }
    donate
}

/// An error where one of `graph`'s inputs was consumed by a failed run of a program allowed
/// to donate it: its values are gone.
pub(super) fn check_inputs(
    backend: DispatchKey,
    graph: &Graph,
    state: &State,
    at: &[usize],
) -> Result<()> {
    match at.iter().position(|&i| state.inputs[i].consumed) {
        None => Ok(()),
        Some(j) => Err(Error::Fallback(format!(
            "the graph of backend '{backend}' cannot be computed: its input {j} ({}) was \
             consumed (donated) by a run of its program that failed, so its values are gone; \
             the tensors computed from it cannot be computed (drop them, and the rest of the \
             graph computes); no tensor was changed",
            graph.inputs[j]
        ))),
    }
}

/// Takes out of `outputs` (indices into `state.pending`) the pending tensors computed from an
/// input a failed run consumed, and marks them lost: reading one says why, and the rest of
/// the graph computes (a graph that read a consumed input would fail at every sync, and
/// `bf.sync()` with it). Nothing to do (a pass over the inputs) where none was consumed.
pub(super) fn drop_lost(backend: DispatchKey, state: &State, outputs: &mut Vec<usize>) {
    if !state.inputs.iter().any(|i| i.consumed) {
        return;
    }
    // Nodes name only earlier ones: one pass in order finds every node a consumed input reaches.
    let mut reached = vec![false; state.nodes.len()];
    for (n, node) in state.nodes.iter().enumerate() {
        reached[n] = node.args.iter().any(|a| match a {
            Arg::Input(i) => state.inputs[*i].consumed,
            Arg::Node(m, _) => reached[*m],
            Arg::Scalar(_) | Arg::Const(_) => false,
        });
    }
    outputs.retain(|&i| {
        let (t, node, _) = &state.pending[i];
        if !reached[*node] {
            return true;
        }
        if let Some(p) = pending_of(&t.data()) {
            let pending = as_pending(&p);
            let _ = pending.lost.set(Error::Fallback(format!(
                "a pending tensor ({}) of backend '{backend}' cannot be computed: an input it is \
                 computed from was consumed (donated) by a run of its graph's program that failed",
                pending.meta
            )));
        }
        false
    });
}

/// Runs `program` on `inputs`, letting it consume those `donate` allows; where it fails (or
/// gives the wrong number of results, checked by `check`), the inputs it did not say it kept
/// are marked consumed in `state` (`at` as in [`donatable`]) and the error says so. Gives the
/// results and how many inputs the program consumed.
pub(super) fn run(
    program: &dyn CompiledGraph,
    inputs: Vec<TensorData>,
    scalars: &[crate::ivalue::IValue],
    mut donate: Vec<bool>,
    state: &mut State,
    at: &[usize],
    check: impl FnOnce(Result<Vec<TensorData>>) -> Result<Vec<TensorData>>,
) -> Result<(Vec<TensorData>, usize)> {
    let run = if donate.contains(&true) {
        program.run_donating(&inputs, scalars, &mut donate)
    } else {
        program.run(&inputs, scalars)
    };
    // The clones given to the program let go now: a consumed input is freed memory.
    drop(inputs);
    let consumed = donate.iter().filter(|d| **d).count();
    match check(run) {
        Ok(outs) => Ok((outs, consumed)),
        Err(e) if consumed == 0 => Err(e),
        Err(e) => {
            mark_consumed(state, at, &donate);
            Err(Error::Fallback(format!(
                "{e}; the program may have consumed {consumed} input buffer(s) it was allowed to \
                 donate (which no tensor held), so the tensors computed from them cannot be \
                 computed again"
            )))
        }
    }
}

/// Marks consumed the inputs (`at` as in [`donatable`]) that `donate` says a failed run may
/// have consumed.
fn mark_consumed(state: &mut State, at: &[usize], donate: &[bool]) {
    for (&i, &d) in at.iter().zip(donate) {
        if d {
            state.inputs[i].consumed = true;
        }
    }
}
