//! What running ahead (`ahead.rs`) keeps: the guess of the graph a recording repeats, held by
//! the recording, and where each state stands with it.

use std::sync::{Arc, Weak};

use crate::ivalue::IValue;
use crate::tensor::{HostArray, Payload, TensorData};

use super::program::{same_const, CompiledGraph, Graph};

/// A whole graph a sync ran, with its program, the scalar values and the inputs it ran on:
/// what the next recording is guessed to repeat.
pub(crate) struct Guess {
    pub(crate) graph: Arc<Graph>,
    pub(crate) program: Arc<dyn CompiledGraph>,
    pub(crate) scalars: Vec<IValue>,
    /// The inputs' data, held weakly: a recording that reads the same tensors again reads
    /// that data, which a launch may take before the recording reaches the node that reads it;
    /// data nothing else holds any more is let go, and cannot be read again.
    pub(crate) inputs: Vec<WeakData>,
}

impl Guess {
    /// Whether `self` and `other` are one program on the same scalar values.
    pub(crate) fn repeats(&self, other: &Guess) -> bool {
        Arc::ptr_eq(&self.graph, &other.graph)
            && self.scalars.len() == other.scalars.len()
            && self
                .scalars
                .iter()
                .zip(&other.scalars)
                .all(|(a, b)| same_const(a, b))
    }

    /// How many of the state's inputs a launch waits for: up to the last of the guess's
    /// inputs whose data is gone (the recording will read another there).
    pub(crate) fn inputs_needed(&self) -> usize {
        self.inputs
            .iter()
            .rposition(|w| !w.alive())
            .map_or(0, |i| i + 1)
    }
}

/// A tensor's data, held weakly.
pub(crate) enum WeakData {
    Host(Weak<HostArray>),
    Foreign(Weak<dyn Payload>),
}

impl WeakData {
    pub(crate) fn of(data: &TensorData) -> WeakData {
        match data {
            TensorData::Host(a) => WeakData::Host(Arc::downgrade(a)),
            TensorData::Foreign(p) => WeakData::Foreign(Arc::downgrade(p)),
        }
    }

    /// The data, if something still holds it.
    pub(crate) fn upgrade(&self) -> Option<TensorData> {
        match self {
            WeakData::Host(w) => w.upgrade().map(TensorData::Host),
            WeakData::Foreign(w) => w.upgrade().map(TensorData::Foreign),
        }
    }

    fn alive(&self) -> bool {
        match self {
            WeakData::Host(w) => w.strong_count() > 0,
            WeakData::Foreign(w) => w.strong_count() > 0,
        }
    }
}

/// Whether two handles hold one data (not equal values: the same allocation).
pub(crate) fn same_data(a: &TensorData, b: &TensorData) -> bool {
    match (a, b) {
        (TensorData::Host(x), TensorData::Host(y)) => Arc::ptr_eq(x, y),
        (TensorData::Foreign(x), TensorData::Foreign(y)) => {
            std::ptr::addr_eq(Arc::as_ptr(x) as *const (), Arc::as_ptr(y) as *const ())
        }
        _ => false,
    }
}

/// Where a recording's state stands with running ahead.
#[derive(Default)]
pub(crate) enum Ahead {
    /// Not tried yet.
    #[default]
    Waiting,
    /// To launch once the state has this many inputs (the guess's data for the rest is
    /// alive), if it still fits the guess then.
    Until(usize),
    /// Launched: the results, to commit if the sync confirms the guess.
    Launched(Launched),
    /// Not for this state (the recording went another way, or a launch was declined).
    Declined,
}

/// A program launched ahead and its results (on JAX, arrays the device is still computing).
pub(crate) struct Launched {
    pub(crate) guess: Arc<Guess>,
    pub(crate) outs: Vec<TensorData>,
    /// The inputs' data the program read: the state's where it had them, else the guess's.
    pub(crate) inputs: Vec<TensorData>,
    /// The launch's time, in nanoseconds (the run's, for the metrics).
    pub(crate) ns: u64,
}

/// What became of a state's run ahead at its sync.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Outcome {
    /// None was launched.
    NotLaunched,
    /// Its results were the sync's.
    Confirmed,
    /// They were let go: the recording was another graph, or ran on other data.
    Missed,
}
