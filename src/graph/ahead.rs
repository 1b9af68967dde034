//! Running ahead: a recording that repeats the graph its last two syncs computed (one cached
//! program, the same scalar values) launches that program at its first node, before the rest
//! of the graph is recorded, so that a device that runs programs asynchronously (JAX
//! dispatches a call and returns) computes while the host records. The inputs the recording
//! has not read yet are taken from the last run, whose data the guess holds weakly: the same
//! tensors, read again later in the recording; where that data is gone, the launch waits for
//! the recording to read the input. The sync then confirms that the recording is that graph
//! (every node, input, scalar value and output, as a cache hit is confirmed, and the very data
//! the launch read) and commits the results run ahead; where it is not, it lets them go
//! unread, counts a miss, and runs the graph as recorded. A program runs ahead only where it
//! says it may ([`CompiledGraph::runs_ahead`](super::CompiledGraph::runs_ahead): no side
//! effect, such as a host callback's counted CPU kernel, that a run let go would leave), and
//! only where its last run consumed (donated) no input: a run ahead donates nothing, and a
//! form of the program that does not donate would be compiled anew.
//!
//! This closes most of the host's part of a graph's time on a TPU: there, recording the
//! bench's workload (103 nodes) takes about 0.3 ms that `jax.jit` of the same function does
//! not spend, and which the device now spends computing.

use std::sync::Arc;
use std::time::Instant;

use crate::ivalue::IValue;
use crate::key::LocalKeysGuard;
use crate::tensor::TensorData;

use super::guess::{same_data, Ahead, Guess, Launched, Outcome};
use super::keys::graph_keys;
use super::program::{same_const, same_node, Graph};
use super::state::{lock, Recording, Shared, State};

/// The guess to launch now, and the inputs' data to launch it on, where `r`'s guess is due:
/// what is recorded so far begins it, and the state has every input whose data the guess no
/// longer holds (the others are taken from the guess: the same tensors' data, read again
/// later in the recording). Checked once at a state's first node, then at each node until the
/// launch; a state the guess no longer fits is marked declined, so that later calls check
/// nothing.
pub(crate) fn due(r: &mut Recording) -> Option<(Arc<Guess>, Vec<TensorData>)> {
    let guess = r.guess.as_ref()?;
    let needed = match r.state.ahead {
        Ahead::Waiting => guess.inputs_needed(),
        Ahead::Until(n) => n,
        Ahead::Launched(_) | Ahead::Declined => return None,
    };
    let g = &guess.graph;
    let state = &r.state;
    if state.inputs.len() < needed && state.nodes.len() < g.nodes.len() {
        r.state.ahead = Ahead::Until(needed);
        return None;
    }
    let fits = state.inputs.len() <= g.inputs.len()
        && state.nodes.len() <= g.nodes.len()
        && state.device == Some(g.device)
        && begins(g, state, &guess.scalars);
    let launch = fits.then(|| {
        let mut inputs: Vec<TensorData> = state.inputs.iter().map(|i| i.data.clone()).collect();
        for w in guess.inputs.get(inputs.len()..)? {
            inputs.push(w.upgrade()?);
        }
        Some((guess.clone(), inputs))
    });
    r.state.ahead = Ahead::Declined;
    launch.flatten()
}

/// Whether `state` so far is the beginning of `graph` run on `scalars`: its inputs, nodes and
/// scalar values those of the graph, none consumed.
fn begins(graph: &Graph, state: &State, scalars: &[IValue]) -> bool {
    state.scalars.len() <= scalars.len()
        && state
            .scalars
            .iter()
            .zip(scalars)
            .all(|(a, b)| same_const(a, b))
        && graph
            .inputs
            .iter()
            .zip(&state.inputs)
            .all(|(m, i)| *m == i.meta && !i.consumed)
        && graph
            .nodes
            .iter()
            .zip(&state.nodes)
            .all(|(a, b)| same_node(a, b))
}

/// Launches `guess` on `inputs` with `rec` unlocked (the program is the backend's code), and
/// keeps its results in the state, if that is still the one it was launched for (recorded in
/// `generation`, and not being computed by another thread meanwhile). A launch that fails is
/// let go, and the recording guesses no more until two syncs repeat a graph again: the sync
/// runs the graph, and reports its failure, as without running ahead.
pub(crate) fn launch(rec: &Shared, generation: u64, guess: Arc<Guess>, inputs: Vec<TensorData>) {
    let start = Instant::now();
    let run = {
        let _eager = LocalKeysGuard::exclude(graph_keys());
        guess.program.run(&inputs, &guess.scalars)
    };
    let ns = start.elapsed().as_nanos() as u64;
    let mut r = lock(rec);
    let ours = r.generation == generation && r.computing.is_none();
    match run {
        Ok(outs) if ours && outs.len() == guess.graph.outputs.len() => {
            r.state.ahead = Ahead::Launched(Launched {
                guess,
                outs,
                inputs,
                ns,
            });
        }
        Ok(_) => {}
        Err(e) => {
            log::debug!(
                "graph backend '{}': a program run ahead failed, so the sync runs it: {e}",
                guess.graph.backend
            );
            r.guess = None;
        }
    }
}

/// Whether the recording `state` is the graph launched by `l` with `results` as its outputs
/// (and `settings` the backend's), and the scalar values it ran on: its results are the sync's.
pub(crate) fn confirmed(
    l: &Launched,
    state: &State,
    results: &[(usize, usize)],
    settings: &str,
) -> bool {
    l.inputs.len() == state.inputs.len()
        && l.inputs
            .iter()
            .zip(&state.inputs)
            .all(|(d, i)| same_data(d, &i.data))
        && l.guess.graph.settings == settings
        && state.recorded_as(&l.guess.graph, results)
        && state
            .scalars
            .iter()
            .zip(&l.guess.scalars)
            .all(|(a, b)| same_const(a, b))
}

/// After a sync of `r` that ran the whole graph `ran` (None for any other sync), whose run
/// ahead had `outcome`: the guess for the next recording, which is `ran` where the last sync
/// ran it too, on the same scalars, and its program may run ahead. After the `m`th miss in a
/// row of one graph, the next `2^m - 1` recordings repeating it (at most 63) are not guessed
/// either, nor the one after the miss: a recording that repeats a graph on other data (a
/// tensor read late in it that is not last time's, and last time's still alive) wastes ever
/// fewer launches.
pub(crate) fn guess_next(r: &mut Recording, ran: Option<Guess>, outcome: Outcome) {
    let ran = ran.map(Arc::new);
    let repeated = match (&ran, &r.last) {
        (Some(now), Some(last)) => now.repeats(last),
        _ => false,
    };
    if !repeated || outcome == Outcome::Confirmed {
        // Misses in a row are of one graph: another starts afresh.
        r.misses = 0;
        r.skip = 0;
    }
    if outcome == Outcome::Missed {
        r.misses = (r.misses + 1).min(MOST_MISSES);
        r.skip = (1 << r.misses) - 1;
    }
    r.guess = None;
    if repeated && outcome != Outcome::Missed {
        if r.skip > 0 {
            r.skip -= 1;
        } else if let Some(now) = ran.as_ref().filter(|g| g.program.runs_ahead()) {
            r.guess = Some(now.clone());
        }
    }
    r.last = ran;
}

/// The misses in a row past which the recordings skipped after one stop growing.
const MOST_MISSES: u32 = 6;

#[cfg(test)]
mod tests {
    use super::guess_next;
    use crate::graph::guess::{Guess, Outcome};
    use crate::graph::program::{CompiledGraph, Graph};
    use crate::graph::state::Recording;
    use crate::ivalue::IValue;
    use crate::key::DispatchKey;
    use crate::tensor::{Device, TensorData};
    use std::sync::Arc;

    struct Nothing;
    impl CompiledGraph for Nothing {
        fn run(&self, _: &[TensorData], _: &[IValue]) -> crate::Result<Vec<TensorData>> {
            Ok(vec![])
        }
    }

    fn graph() -> Arc<Graph> {
        Arc::new(Graph {
            backend: DispatchKey::CPU,
            device: Device::new(DispatchKey::CPU, 0),
            inputs: vec![],
            scalars: vec!["float"],
            nodes: vec![],
            outputs: vec![],
            settings: String::new(),
        })
    }

    fn guess(graph: &Arc<Graph>, scalar: f64) -> Guess {
        Guess {
            graph: graph.clone(),
            program: Arc::new(Nothing),
            scalars: vec![IValue::Double(scalar)],
            inputs: vec![],
        }
    }

    struct Ahead;
    impl CompiledGraph for Ahead {
        fn run(&self, _: &[TensorData], _: &[IValue]) -> crate::Result<Vec<TensorData>> {
            Ok(vec![])
        }
        fn runs_ahead(&self) -> bool {
            true
        }
    }

    fn recording() -> Recording {
        Recording {
            backend: DispatchKey::CPU,
            generation: 0,
            computing: None,
            cuts: 0,
            state: Default::default(),
            last: None,
            guess: None,
            misses: 0,
            skip: 0,
        }
    }

    #[test]
    fn a_graph_synced_twice_is_guessed_and_misses_in_a_row_skip_ever_more_recordings() {
        let g = graph();
        let ran = || {
            Some(Guess {
                graph: g.clone(),
                program: Arc::new(Ahead),
                scalars: vec![IValue::Double(1.0)],
                inputs: vec![],
            })
        };
        let mut r = recording();
        let guessed = |r: &mut Recording, outcome| {
            guess_next(r, ran(), outcome);
            r.guess.is_some()
        };
        assert!(!guessed(&mut r, Outcome::NotLaunched)); // once: no guess
        assert!(guessed(&mut r, Outcome::NotLaunched)); // twice
        assert!(guessed(&mut r, Outcome::Confirmed));
        // The first miss: that recording and 1 more unguessed; the second: 3 more.
        for misses in [1, 2] {
            assert!(!guessed(&mut r, Outcome::Missed));
            for _ in 0..(1 << misses) - 1 {
                assert!(!guessed(&mut r, Outcome::NotLaunched));
            }
            assert!(guessed(&mut r, Outcome::NotLaunched));
        }
        // A confirmed run forgets the misses.
        assert!(guessed(&mut r, Outcome::Confirmed));
        assert!(!guessed(&mut r, Outcome::Missed));
        assert!(!guessed(&mut r, Outcome::NotLaunched));
        assert!(guessed(&mut r, Outcome::NotLaunched));
        // A program that may not run ahead is never guessed; nor another graph.
        let mut other = recording();
        for _ in 0..3 {
            guess_next(&mut other, Some(guess(&g, 1.0)), Outcome::NotLaunched);
            assert!(other.guess.is_none());
        }
        guess_next(&mut r, Some(guess(&graph(), 1.0)), Outcome::NotLaunched);
        assert!(r.guess.is_none());
    }

    #[test]
    fn a_guess_repeats_only_its_own_graph_on_the_same_scalars() {
        let (g, h) = (graph(), graph());
        assert!(guess(&g, 1.0).repeats(&guess(&g, 1.0)));
        assert!(!guess(&g, 1.0).repeats(&guess(&g, 2.0)));
        assert!(!guess(&g, 0.0).repeats(&guess(&g, -0.0)));
        // Two graphs alike but compiled apart are two programs.
        assert!(!guess(&g, 1.0).repeats(&guess(&h, 1.0)));
    }
}
