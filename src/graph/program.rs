//! A recorded graph as a compiler gets it: its inputs, its nodes (operator, arguments, output
//! dtypes and shapes), which node results are its outputs; its structural key (what the cache
//! of compiled graphs is keyed by); and `replay`, which runs the nodes eagerly below the
//! `Graph` key. The compiler's side: [`GraphCompiler`] and [`CompiledGraph`].

use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
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
    /// nothing; its type (bool, int, float) is in the structure, as it
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

/// A graph: what a compiler compiles.
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
    /// The backend's settings the graph was compiled under ([`GraphCompiler::settings`]:
    /// JAX's x64 and matmul precision), empty where it has none: part of the key, so a graph
    /// compiled under other settings is not reused.
    pub settings: String,
}

impl Graph {
    /// The graph's structure as a string: operators, arguments, constants, the inputs' and
    /// results' dtypes and shapes, which results are outputs, and the backend's settings (a
    /// last line, where there are any). Two graphs with one key compile to one program, so it
    /// keys the cache of compiled graphs.
    ///
    /// ```
    /// use boxfall::graph::Graph;
    /// let mut g = Graph { backend: boxfall::DispatchKey::CPU, device: boxfall::Device::CPU,
    ///                 inputs: vec![], scalars: vec![], nodes: vec![], outputs: vec![],
    ///                 settings: String::new() };
    /// assert_eq!(g.key(), "1|\n->");
    /// g.settings = "x64=False".into();
    /// assert_eq!(g.key(), "1|\n->\nsettings: x64=False");
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
        if !self.settings.is_empty() {
            let _ = write!(k, "\n{SETTINGS}{}", self.settings);
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
    ///                 inputs: vec![], scalars: vec![], nodes: vec![], outputs: vec![],
    ///                 settings: String::new() };
    /// assert!(g.replay(&[], &[]).unwrap().is_empty());
    /// ```
    pub fn replay(&self, inputs: &[Tensor], scalars: &[IValue]) -> Result<Vec<Tensor>> {
        self.check_arity(inputs, scalars)?;
        let _eager = LocalKeysGuard::exclude(super::keys::graph_keys());
        let mut results: Vec<Vec<Tensor>> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let outs = self.run_node(node, inputs, scalars, &mut |n, o| results[n][o].clone())?;
            results.push(outs);
        }
        Ok(self
            .outputs
            .iter()
            .map(|&(n, o)| results[n][o].clone())
            .collect())
    }

    /// [`replay`](Self::replay), where each output gets its own value or its own error: a
    /// node that fails gives its error to every node computed from it (the first failed
    /// argument's), and the others still run. What a sync runs where a graph's program failed,
    /// so that the failure stays with the tensors computed from the node that failed.
    ///
    /// ```
    /// use boxfall::graph::Graph;
    /// let g = Graph { backend: boxfall::DispatchKey::CPU, device: boxfall::Device::CPU,
    ///                 inputs: vec![], scalars: vec![], nodes: vec![], outputs: vec![],
    ///                 settings: String::new() };
    /// assert!(g.replay_each(&[], &[]).unwrap().is_empty());
    /// ```
    pub fn replay_each(
        &self,
        inputs: &[Tensor],
        scalars: &[IValue],
    ) -> Result<Vec<Result<Tensor>>> {
        self.check_arity(inputs, scalars)?;
        let _eager = LocalKeysGuard::exclude(super::keys::graph_keys());
        let mut results: Vec<Result<Vec<Tensor>>> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let failed = node.args.iter().find_map(|a| match a {
                Arg::Node(n, _) => results[*n].as_ref().err(),
                _ => None,
            });
            let outs = match failed {
                Some(e) => Err(e.clone()),
                None => self
                    .run_node(node, inputs, scalars, &mut |n, o| match &results[n] {
                        Ok(r) => r[o].clone(),
                        // Not reached: a failed argument is taken above.
                        Err(_) => unreachable!("a failed node's result is never read"),
                    })
                    .map_err(|e| {
                        e.with_foreign_note(format!(
                            "while graph mode ran '{}' of a graph of backend '{}' alone, the \
                             graph's program having failed",
                            node.op.name(),
                            self.backend
                        ))
                    }),
            };
            results.push(outs);
        }
        Ok(self
            .outputs
            .iter()
            .map(|&(n, o)| match &results[n] {
                Ok(r) => Ok(r[o].clone()),
                Err(e) => Err(e.clone()),
            })
            .collect())
    }

    /// An error where `inputs` and `scalars` are not one a graph input and scalar input.
    fn check_arity(&self, inputs: &[Tensor], scalars: &[IValue]) -> Result<()> {
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
        Ok(())
    }

    /// Runs `node` eagerly (the caller excludes the `Graph` key), an earlier node's result
    /// `(n, o)` read by `result`; its results.
    fn run_node(
        &self,
        node: &Node,
        inputs: &[Tensor],
        scalars: &[IValue],
        result: &mut dyn FnMut(usize, usize) -> Tensor,
    ) -> Result<Vec<Tensor>> {
        let mut stack = Vec::with_capacity(node.args.len());
        for a in &node.args {
            stack.push(match a {
                Arg::Input(i) => IValue::Tensor(inputs[*i].clone()),
                Arg::Node(n, o) => IValue::Tensor(result(*n, *o)),
                Arg::Scalar(j) => scalars[*j].clone(),
                Arg::Const(v) => v.clone(),
            });
        }
        node.op.call_boxed(&mut stack)?;
        stack
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
            .collect()
    }

    /// The graph in words, one node a line (`bf.graph.dump()`).
    ///
    /// ```
    /// use boxfall::graph::Graph;
    /// let g = Graph { backend: boxfall::DispatchKey::CPU, device: boxfall::Device::CPU,
    ///                 inputs: vec![], scalars: vec![], nodes: vec![], outputs: vec![],
    ///                 settings: String::new() };
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
        if !self.settings.is_empty() {
            let _ = write!(s, "\n  {SETTINGS}{}", self.settings);
        }
        s
    }
}

/// What starts the line of [`Graph::key`] that says the backend's settings.
pub(crate) const SETTINGS: &str = "settings: ";

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

/// A structural hash of a graph, folded as its inputs and nodes are recorded, so that a sync
/// finds a cached program without writing the graph's key ([`Graph::key`]) or copying its
/// nodes. Graphs of one key hash alike when recorded alike; a hit is confirmed by comparing the
/// structures ([`same_node`]), so a collision costs a comparison, never a wrong program. An
/// operator is hashed by its entry's address (stable while it is registered); the comparison
/// goes by name, as the key does.
#[derive(Clone, Copy, Default)]
pub(crate) struct StructureHash(u64);

impl Hasher for StructureHash {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, w: u64) {
        // FxHash's step: a rotate, a xor and a multiply a word (SipHash, std's, costs several
        // times that, for a resistance to chosen collisions that a confirmed hit does not need).
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, w: usize) {
        self.write_u64(w as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl StructureHash {
    /// Folds in an input's dtype and shape.
    pub(crate) fn input(&mut self, m: &TensorMeta) {
        self.write_u64(1);
        m.dtype.hash(self);
        m.shape.hash(self);
    }

    /// Folds in a node: its operator and arguments.
    pub(crate) fn node(&mut self, n: &Node) {
        self.write_u64(2);
        self.write_usize(Arc::as_ptr(&n.op.0) as usize);
        for a in &n.args {
            match a {
                Arg::Input(i) => {
                    self.write_u64(3);
                    self.write_usize(*i);
                }
                Arg::Node(m, o) => {
                    self.write_u64(4);
                    self.write_usize(*m);
                    self.write_usize(*o);
                }
                Arg::Scalar(j) => {
                    self.write_u64(7);
                    self.write_usize(*j);
                }
                Arg::Const(v) => {
                    self.write_u64(5);
                    hash_const(v, self);
                }
            }
        }
    }

    /// Folds in a scalar input's type (its value is no part of the structure).
    pub(crate) fn scalar(&mut self, v: &IValue) {
        self.write_u64(8);
        v.type_name().hash(self);
    }

    /// Folds in the backend's settings (nothing for none, so a backend without settings
    /// hashes as before).
    pub(crate) fn settings(&mut self, settings: &str) {
        if !settings.is_empty() {
            self.write_u64(9);
            settings.hash(self);
        }
    }

    /// The hash of the graph so far with `outputs` as its outputs.
    pub(crate) fn with_outputs(mut self, outputs: &[(usize, usize)]) -> u64 {
        self.write_u64(6);
        for &(n, o) in outputs {
            self.write_usize(n);
            self.write_usize(o);
        }
        self.0
    }
}

/// Hashes a constant as [`same_const`] compares it (a float by its bits).
fn hash_const(v: &IValue, h: &mut StructureHash) {
    std::mem::discriminant(v).hash(h);
    match v {
        IValue::None => {}
        IValue::Bool(b) => b.hash(h),
        IValue::Int(i) => i.hash(h),
        IValue::Double(d) => d.to_bits().hash(h),
        IValue::Str(s) => s.hash(h),
        IValue::Device(d) => d.hash(h),
        IValue::ScalarType(t) => t.hash(h),
        IValue::IntList(l) => l.hash(h),
        IValue::DoubleList(l) => l.iter().for_each(|d| d.to_bits().hash(h)),
        IValue::BoolList(l) => l.hash(h),
        IValue::List(l) | IValue::Tuple(l) => l.iter().for_each(|v| hash_const(v, h)),
        IValue::Tensor(_) | IValue::TensorList(_) | IValue::OptionalTensorList(_) => {}
        // An object a binding describes (a Python `slice`) by its value, as the key says it.
        IValue::Object(o) => match super::constants::describe_object(o) {
            Some(d) => hash_const(&d, h),
            None => (Arc::as_ptr(o) as *const () as usize).hash(h),
        },
    }
}

/// Whether two constants are the same: equal ones always have the same text in
/// [`Graph::key`] (a float compared by its bits, a list and a tuple never alike); a tensor is
/// never a constant, so never the same.
pub(crate) fn same_const(a: &IValue, b: &IValue) -> bool {
    match (a, b) {
        (IValue::None, IValue::None) => true,
        (IValue::Bool(x), IValue::Bool(y)) => x == y,
        (IValue::Int(x), IValue::Int(y)) => x == y,
        (IValue::Double(x), IValue::Double(y)) => x.to_bits() == y.to_bits(),
        (IValue::Str(x), IValue::Str(y)) => x == y,
        (IValue::Device(x), IValue::Device(y)) => x == y,
        (IValue::ScalarType(x), IValue::ScalarType(y)) => x == y,
        (IValue::IntList(x), IValue::IntList(y)) => x == y,
        (IValue::DoubleList(x), IValue::DoubleList(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        }
        (IValue::BoolList(x), IValue::BoolList(y)) => x == y,
        (IValue::List(x), IValue::List(y)) | (IValue::Tuple(x), IValue::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_const(p, q))
        }
        (IValue::Object(x), IValue::Object(y)) => {
            Arc::ptr_eq(x, y)
                || matches!(
                    (super::constants::describe_object(x), super::constants::describe_object(y)),
                    (Some(p), Some(q)) if same_const(&p, &q)
                )
        }
        _ => false,
    }
}

/// Whether two nodes have one text in [`Graph::key`]: the same operator (by name) and
/// arguments. Their results' dtypes and shapes are not compared, as the key does not say them
/// (the shape rules give them from the rest).
pub(crate) fn same_node(a: &Node, b: &Node) -> bool {
    (a.op == b.op || a.op.name() == b.op.name())
        && a.args.len() == b.args.len()
        && a.args.iter().zip(&b.args).all(|(x, y)| match (x, y) {
            (Arg::Input(i), Arg::Input(j)) => i == j,
            (Arg::Node(m, o), Arg::Node(n, p)) => m == n && o == p,
            (Arg::Scalar(i), Arg::Scalar(j)) => i == j,
            (Arg::Const(v), Arg::Const(w)) => same_const(v, w),
            _ => false,
        })
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

    /// The backend's settings that change what a compile makes, in words (JAX's x64 and
    /// default matmul precision: `"x64=False matmul_precision=highest"`), read once a sync:
    /// they are part of the graph's key ([`Graph::settings`]), so a change of them compiles
    /// anew, and the recompile's reason names them. Empty (the default) for none.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// use boxfall::graph::{CompiledGraph, Graph, GraphCompiler};
    /// struct Precise;
    /// impl GraphCompiler for Precise {
    ///     fn compile(&self, _: &Arc<Graph>) -> boxfall::Result<Arc<dyn CompiledGraph>> {
    ///         Err(boxfall::Error::Fallback("not here".into()))
    ///     }
    ///     fn settings(&self) -> boxfall::Result<String> {
    ///         Ok("precision=highest".into())
    ///     }
    /// }
    /// assert_eq!(Precise.settings().unwrap(), "precision=highest");
    /// ```
    fn settings(&self) -> Result<String> {
        Ok(String::new())
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

    /// [`run`](Self::run), where the program may consume (donate) the inputs whose `donate`
    /// entry is true, as `jax.jit`'s `donate_argnums` does: reuse their buffers for its results.
    /// Boxfall allows it only for a payload (never host memory) that nothing but the graph holds
    /// (no tensor, no view, no other handle: no one can read it after the run), whose dtype and
    /// shape are an output's, and at most as many inputs of one dtype and shape as there are
    /// outputs of it. The program sets to false, before it fails or returns, each entry of an
    /// input it did not consume: where it fails, boxfall keeps the graph for a retry (nothing is
    /// committed), and marks the inputs still true as gone, so that a retry that reads them
    /// fails with an error that says so instead of reading freed buffers. The default consumes
    /// nothing: it clears `donate` and calls [`run`](Self::run).
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
    /// let mut donate = [true];
    /// let data = TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[1.0]).into_dyn().into()));
    /// assert!(Nothing.run_donating(&[data], &[], &mut donate).unwrap().is_empty());
    /// assert_eq!(donate, [false]); // the default consumes nothing
    /// ```
    fn run_donating(
        &self,
        inputs: &[TensorData],
        scalars: &[IValue],
        donate: &mut [bool],
    ) -> Result<Vec<TensorData>> {
        donate.fill(false);
        self.run(inputs, scalars)
    }

    /// Whether boxfall may run the program ahead: launch it while its graph is still being
    /// recorded (on the inputs' data read so far and the last run's for the rest, and on the
    /// last run's scalar values), and let its results go unread where the recording turns out
    /// to be another graph or to read other data. True only for a program whose run has no
    /// effect but its results (JAX's without a host callback, whose CPU kernel counts its
    /// calls), that returns at once, computing meanwhile (JAX's async dispatch: then the
    /// device computes while the host records), on payloads nothing writes in place (JAX's
    /// arrays: boxfall tells data apart by its address). False (the default) runs it at the
    /// sync.
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
    /// assert!(!Nothing.runs_ahead());
    /// ```
    fn runs_ahead(&self) -> bool {
        false
    }

    /// Checks a run's results before a sync commits them: the outputs of a run at the sync, or
    /// of a run ahead once the sync confirmed it. An error fails the run (the sync then runs
    /// it as a failed program), for a program whose results can be wrong where a value was
    /// out of its domain (JAX's `solve` of a singular matrix gives infinities where NumPy
    /// raises) and which reads its check here rather than in [`run`](Self::run), so that a
    /// run ahead still only launches. The default checks nothing.
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
    /// assert!(Nothing.check_results(&[]).is_ok());
    /// ```
    fn check_results(&self, outs: &[TensorData]) -> Result<()> {
        let _ = outs;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{constant_text, hash_const, same_const, StructureHash};
    use crate::ivalue::IValue;
    use std::hash::Hasher;

    fn hash(v: &IValue) -> u64 {
        let mut h = StructureHash::default();
        hash_const(v, &mut h);
        h.finish()
    }

    #[test]
    fn same_constants_have_one_text_and_one_hash() {
        let values = [
            IValue::None,
            IValue::Bool(true),
            IValue::Int(1),
            IValue::Double(1.0),
            IValue::Double(0.0),
            IValue::Double(-0.0),
            IValue::Double(f64::NAN),
            IValue::Str("a".into()),
            IValue::IntList(vec![1, 2]),
            IValue::DoubleList(vec![1.0, -0.0]),
            IValue::BoolList(vec![true]),
            IValue::List(vec![IValue::Int(1)]),
            IValue::Tuple(vec![IValue::Int(1)]),
        ];
        for a in &values {
            for b in &values {
                if same_const(a, b) {
                    assert_eq!(constant_text(a), constant_text(b));
                    assert_eq!(hash(a), hash(b));
                }
            }
            assert!(same_const(a, &a.clone()), "{}", constant_text(a));
        }
        // A float by its bits: 0.0 and -0.0 are two constants, as in the key.
        assert!(!same_const(&IValue::Double(0.0), &IValue::Double(-0.0)));
        assert!(!same_const(&IValue::Int(1), &IValue::Double(1.0)));
    }
}
