//! A recorded graph as a compiler gets it: its inputs, its nodes (operator, arguments, output
//! dtypes and shapes), which node results are its outputs; its structural key (what the cache
//! of compiled graphs is keyed by); and `replay`, which runs the nodes eagerly below the
//! `Graph` key. The compiler's side: [`GraphCompiler`] and [`CompiledGraph`].

use std::fmt::Write as _;
use std::sync::Arc;

use crate::dispatcher::OperatorHandle;
use crate::error::{Error, Result};
use crate::ivalue::IValue;
use crate::key::{DispatchKey, LocalKeysGuard};
use crate::tensor::{Device, Tensor, TensorData, TensorMeta};

/// An argument of a node: an input of the graph, a result of an earlier node, or a constant.
///
/// ```
/// use boxfall::graph::Arg;
/// let a = Arg::Node(0, 0);
/// assert!(matches!(a, Arg::Node(0, 0)));
/// ```
#[derive(Clone)]
pub enum Arg {
    /// The graph's input of this index.
    Input(usize),
    /// Result `.1` of node `.0`.
    Node(usize, usize),
    /// The graph's scalar input of this index: an elementwise operator's Python scalar
    /// operand (`x * 0.5`), whose value is given at each run, so a changed value compiles
    /// nothing (DESIGN section 13); its type (bool, int, float) is in the structure, as it
    /// decides the result's dtype.
    Scalar(usize),
    /// A value that holds no tensor (an axis, a dtype, a list of ints, a scalar that decides
    /// a shape...): part of the graph's structure, so a changed one compiles a new graph.
    Const(IValue),
}

/// One recorded operator call.
///
/// ```
/// use boxfall::graph::{Arg, Node};
/// fn first_input(n: &Node) -> bool { matches!(n.args.first(), Some(Arg::Input(0))) }
/// # let _ = first_input;
/// ```
#[derive(Clone)]
pub struct Node {
    /// The operator.
    pub op: OperatorHandle,
    /// Its arguments, in the schema's order (defaults filled).
    pub args: Vec<Arg>,
    /// Its results' dtypes and shapes, from the shape rules.
    pub outputs: Vec<TensorMeta>,
}

/// A graph: what a compiler compiles (DESIGN section 13).
///
/// ```
/// use boxfall::graph::Graph;
/// fn nodes(g: &Graph) -> usize { g.nodes.len() }
/// # let _ = nodes;
/// ```
#[derive(Clone)]
pub struct Graph {
    /// The backend whose tensors the graph computes.
    pub backend: DispatchKey,
    /// The device of its inputs and results.
    pub device: Device,
    /// The inputs' dtypes and shapes, in the order their payloads are given.
    pub inputs: Vec<TensorMeta>,
    /// The scalar inputs' types (`"bool"`, `"int"`, `"float"`), in the order their values are
    /// given, after the inputs' payloads.
    pub scalars: Vec<&'static str>,
    /// The nodes, in the order they were recorded (each names only earlier ones).
    pub nodes: Vec<Node>,
    /// The results given back, in order: (node, result).
    pub outputs: Vec<(usize, usize)>,
}

impl Graph {
    /// The graph's structure as a string: operators, arguments, constants, the inputs' and
    /// results' dtypes and shapes, and which results are outputs. Two graphs with one key
    /// compile to one program, so it keys the cache of compiled graphs.
    ///
    /// ```
    /// use boxfall::graph::Graph;
    /// let g = Graph { backend: boxfall::DispatchKey::CPU, device: boxfall::Device::CPU,
    ///                 inputs: vec![], scalars: vec![], nodes: vec![], outputs: vec![] };
    /// assert_eq!(g.key(), "1|\n->");
    /// ```
    pub fn key(&self) -> String {
        let mut k = String::with_capacity(64 + 48 * self.nodes.len());
        let _ = write!(k, "{}|", self.backend.index());
        for m in &self.inputs {
            let _ = write!(k, "{m};");
        }
        for t in &self.scalars {
            let _ = write!(k, "{t};");
        }
        for n in &self.nodes {
            let _ = write!(k, "\n{}(", n.op.name());
            for a in &n.args {
                match a {
                    Arg::Input(i) => {
                        let _ = write!(k, "i{i},");
                    }
                    Arg::Node(n, o) => {
                        let _ = write!(k, "n{n}.{o},");
                    }
                    Arg::Scalar(j) => {
                        let _ = write!(k, "s{j},");
                    }
                    Arg::Const(v) => {
                        let _ = write!(k, "c{},", constant_text(v));
                    }
                }
            }
            k.push(')');
        }
        k.push_str("\n->");
        for (n, o) in &self.outputs {
            let _ = write!(k, "n{n}.{o},");
        }
        k
    }

    /// Runs the nodes eagerly on `inputs` (tensors of the graph's device, one per input) and
    /// `scalars` (one per scalar input), below the `Graph` key (the backend's own kernels, or
    /// the CPU fallback), and gives the outputs. A compiler that runs the graph as it is
    /// returns a function that calls this; a tracing compiler (`jax.jit`) traces it.
    ///
    /// ```
    /// use boxfall::graph::Graph;
    /// let g = Graph { backend: boxfall::DispatchKey::CPU, device: boxfall::Device::CPU,
    ///                 inputs: vec![], scalars: vec![], nodes: vec![], outputs: vec![] };
    /// assert!(g.replay(&[], &[]).unwrap().is_empty());
    /// ```
    pub fn replay(&self, inputs: &[Tensor], scalars: &[IValue]) -> Result<Vec<Tensor>> {
        if inputs.len() != self.inputs.len() || scalars.len() != self.scalars.len() {
            return Err(Error::Fallback(format!(
                "a graph of backend '{}' takes {} inputs and {} scalars, not {} and {}",
                self.backend,
                self.inputs.len(),
                self.scalars.len(),
                inputs.len(),
                scalars.len()
            )));
        }
        let _eager = LocalKeysGuard::exclude(super::keys::graph_keys());
        let mut results: Vec<Vec<Tensor>> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let mut stack = Vec::with_capacity(node.args.len());
            for a in &node.args {
                stack.push(match a {
                    Arg::Input(i) => IValue::Tensor(inputs[*i].clone()),
                    Arg::Node(n, o) => IValue::Tensor(results[*n][*o].clone()),
                    Arg::Scalar(j) => scalars[*j].clone(),
                    Arg::Const(v) => v.clone(),
                });
            }
            node.op.call_boxed(&mut stack)?;
            let outs = stack
                .into_iter()
                .map(|v| match v {
                    IValue::Tensor(t) => Ok(t),
                    other => Err(Error::Fallback(format!(
                        "'{}' returned a {} in a graph of backend '{}', where its shape rule says a tensor",
                        node.op.name(),
                        other.type_name(),
                        self.backend
                    ))),
                })
                .collect::<Result<Vec<_>>>()?;
            results.push(outs);
        }
        Ok(self
            .outputs
            .iter()
            .map(|&(n, o)| results[n][o].clone())
            .collect())
    }

    /// The graph in words, one node a line (`bf.graph.dump()`).
    ///
    /// ```
    /// use boxfall::graph::Graph;
    /// let g = Graph { backend: boxfall::DispatchKey::CPU, device: boxfall::Device::CPU,
    ///                 inputs: vec![], scalars: vec![], nodes: vec![], outputs: vec![] };
    /// assert!(g.describe().starts_with("graph of CPU"));
    /// ```
    pub fn describe(&self) -> String {
        let mut s = format!(
            "graph of {}: {} inputs, {} nodes, {} outputs\n",
            self.backend,
            self.inputs.len(),
            self.nodes.len(),
            self.outputs.len()
        );
        for (i, m) in self.inputs.iter().enumerate() {
            let _ = writeln!(s, "  i{i}: {m}");
        }
        for (j, t) in self.scalars.iter().enumerate() {
            let _ = writeln!(s, "  s{j}: {t}");
        }
        for (j, n) in self.nodes.iter().enumerate() {
            let args: Vec<String> = n
                .args
                .iter()
                .map(|a| match a {
                    Arg::Input(i) => format!("i{i}"),
                    Arg::Node(n, o) => format!("n{n}.{o}"),
                    Arg::Scalar(j) => format!("s{j}"),
                    Arg::Const(v) => constant_text(v),
                })
                .collect();
            let outs: Vec<String> = n.outputs.iter().map(|m| m.to_string()).collect();
            let _ = writeln!(
                s,
                "  n{j} = {}({}) -> {}",
                n.op.name(),
                args.join(", "),
                outs.join(", ")
            );
        }
        let outs: Vec<String> = self
            .outputs
            .iter()
            .map(|(n, o)| format!("n{n}.{o}"))
            .collect();
        let _ = write!(s, "  outputs: {}", outs.join(", "));
        s
    }
}

/// A constant in the key's words: exact (a float by its bits), and distinct per type.
pub(crate) fn constant_text(v: &IValue) -> String {
    match v {
        IValue::None => "None".into(),
        IValue::Bool(b) => format!("{b}"),
        IValue::Int(i) => format!("{i}"),
        IValue::Double(d) => format!("{d:?}f"),
        IValue::Str(s) => format!("{s:?}"),
        IValue::Device(d) => format!("device({d})"),
        IValue::ScalarType(t) => format!("dtype({})", t.name()),
        IValue::IntList(l) => format!("{l:?}"),
        IValue::DoubleList(l) => format!("{l:?}f"),
        IValue::BoolList(l) => format!("{l:?}"),
        IValue::List(l) | IValue::Tuple(l) => {
            let parts: Vec<String> = l.iter().map(constant_text).collect();
            format!("[{}]", parts.join(","))
        }
        // Tensors are never constants (the recorder breaks the graph on a list of them);
        // an object is compared by its described value (`constants.rs`), else by identity.
        IValue::Tensor(_) | IValue::TensorList(_) | IValue::OptionalTensorList(_) => {
            "tensor".into()
        }
        IValue::Object(o) => match super::constants::describe_object(o) {
            Some(d) => format!("o{}", constant_text(&d)),
            None => format!("object@{:p}", Arc::as_ptr(o)),
        },
    }
}

/// A backend's compiler: makes a program of a graph (`compile=` of `bf.register_backend`).
///
/// ```
/// use std::sync::Arc;
/// use boxfall::graph::{CompiledGraph, Graph, GraphCompiler};
/// use boxfall::tensor::{Tensor, TensorData};
/// use boxfall::IValue;
/// /// Runs the graph as it is.
/// struct Replay;
/// struct Replayed(Arc<Graph>);
/// impl CompiledGraph for Replayed {
///     fn run(&self, inputs: &[TensorData], scalars: &[IValue]) -> boxfall::Result<Vec<TensorData>> {
///         let ts: Vec<Tensor> = inputs.iter().map(|d| Tensor::new(self.0.device, d.clone())).collect();
///         Ok(self.0.replay(&ts, scalars)?.iter().map(|t| t.data()).collect())
///     }
/// }
/// impl GraphCompiler for Replay {
///     fn compile(&self, g: &Arc<Graph>) -> boxfall::Result<Arc<dyn CompiledGraph>> {
///         Ok(Arc::new(Replayed(g.clone())))
///     }
/// }
/// # let _ = Replay;
/// ```
pub trait GraphCompiler: Send + Sync + 'static {
    /// A program computing `graph`'s outputs from its inputs' data.
    fn compile(&self, graph: &Arc<Graph>) -> Result<Arc<dyn CompiledGraph>>;

    /// The dtype a result of `dtype` (as the shape rules name it, NumPy's) has on the
    /// backend's device, where it differs: a device without 64-bit dtypes narrows them to the
    /// 32-bit ones of their kinds (JAX without x64), so a pending tensor says the dtype its
    /// computed value will have. None (the default) keeps it.
    fn device_dtype(&self, dtype: &str) -> Option<&'static str> {
        let _ = dtype;
        None
    }
}

/// A compiled graph: a function of the inputs' data giving the outputs' data.
///
/// ```
/// use boxfall::graph::CompiledGraph;
/// use boxfall::tensor::TensorData;
/// struct Nothing;
/// impl CompiledGraph for Nothing {
///     fn run(&self, _: &[TensorData], _: &[boxfall::IValue]) -> boxfall::Result<Vec<TensorData>> {
///         Ok(vec![])
///     }
/// }
/// assert!(Nothing.run(&[], &[]).unwrap().is_empty());
/// ```
pub trait CompiledGraph: Send + Sync + 'static {
    /// The outputs' data, in the graph's order, from the inputs' data (payloads of its
    /// device) and the scalar inputs' values, each in the graph's order.
    fn run(&self, inputs: &[TensorData], scalars: &[IValue]) -> Result<Vec<TensorData>>;
}
