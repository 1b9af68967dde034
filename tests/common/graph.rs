//! A graph compiler for the graph-mode tests (`graph_mode.rs`, `graph_inplace.rs`): it
//! replays each graph on the host and counts what it did.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use boxfall::graph::{CompiledGraph, Graph, GraphCompiler};
use boxfall::tensor::TensorData;
use boxfall::{Error, IValue, Result, Tensor};

/// Replays each graph; counts compiles and runs; fails its programs while `fail` is set, and
/// sleeps `delay_ms` in each run (so that other threads find its graph being computed); gives
/// `settings` as the backend's settings.
#[derive(Default)]
pub struct Counting {
    pub compiles: AtomicUsize,
    pub fail: Arc<AtomicBool>,
    pub runs: Arc<AtomicUsize>,
    pub delay_ms: Arc<AtomicU64>,
    pub settings: Mutex<String>,
    /// Whether the device lacks float64 (its results float32 instead).
    pub narrows: AtomicBool,
    /// The `donate` mask of each `run_donating` call, as given; the program consumes (takes
    /// as gone) every input it is offered.
    pub donations: Arc<Mutex<Vec<Vec<bool>>>>,
}

struct Replayed {
    graph: Arc<Graph>,
    fail: Arc<AtomicBool>,
    runs: Arc<AtomicUsize>,
    delay_ms: Arc<AtomicU64>,
    donations: Arc<Mutex<Vec<Vec<bool>>>>,
}

impl CompiledGraph for Replayed {
    fn run(&self, inputs: &[TensorData], scalars: &[IValue]) -> Result<Vec<TensorData>> {
        self.runs.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(
            self.delay_ms.load(Ordering::Relaxed),
        ));
        if self.fail.load(Ordering::Relaxed) {
            return Err(Error::Fallback("the test program failed".into()));
        }
        let ts: Vec<Tensor> = inputs
            .iter()
            .map(|d| Tensor::new(self.graph.device, d.clone()))
            .collect();
        Ok(self
            .graph
            .replay(&ts, scalars)?
            .iter()
            .map(|t| t.data())
            .collect())
    }

    fn run_donating(
        &self,
        inputs: &[TensorData],
        scalars: &[IValue],
        donate: &mut [bool],
    ) -> Result<Vec<TensorData>> {
        self.donations
            .lock()
            .expect("donations")
            .push(donate.to_vec());
        self.run(inputs, scalars)
    }
}

impl GraphCompiler for Counting {
    fn compile(&self, graph: &Arc<Graph>) -> Result<Arc<dyn CompiledGraph>> {
        self.compiles.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(Replayed {
            graph: graph.clone(),
            fail: self.fail.clone(),
            runs: self.runs.clone(),
            delay_ms: self.delay_ms.clone(),
            donations: self.donations.clone(),
        }))
    }

    fn settings(&self) -> Result<String> {
        Ok(self.settings.lock().expect("settings").clone())
    }

    fn device_dtype(&self, dtype: &str) -> Option<&'static str> {
        (self.narrows.load(Ordering::Relaxed) && dtype == "float64").then_some("float32")
    }
}

/// The values of a float64 tensor argument.
pub fn read_f64(v: &IValue) -> Result<Vec<f64>> {
    let IValue::Tensor(t) = v else {
        return Err(Error::Fallback("not a tensor".into()));
    };
    Ok(t.to_host()?
        .as_f64()
        .ok_or_else(|| Error::Fallback("not float64".into()))?
        .iter()
        .copied()
        .collect())
}
