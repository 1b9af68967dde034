//! The recorder: the `Graph` key's boxed fallback. A call that reaches it (a tensor of a graph
//! backend among its arguments, which carries the key) records a node and returns pending
//! tensors, or, where it cannot be recorded, is a counted graph break: its pending inputs are
//! computed and the call passes on below the `Graph` key, as in eager mode. A view among the
//! arguments is read from its base by a node of its own, and a write through it is recorded
//! into its base (`views.rs`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use crate::dispatcher::{Dispatcher, OperatorHandle};
use crate::error::{Error, Result};
use crate::fallback::two_devices;
use crate::ivalue::{IValue, Stack};
use crate::kernel::KernelFunction;
use crate::key::LocalKeysGuard;
use crate::key::{carry_key, register_functionality_key, DispatchKey, DispatchKeySet};
use crate::schema::ArgKind;
use crate::tensor::promote::holds;
use crate::tensor::{hold_writes, DType, Device, Kind, Tensor, TensorData, TensorMeta};

use super::ahead;
use super::constants::described_stack;
use super::hooks::narrowed;
use super::inplace::{self, Write};
use super::keys::{graph_keys, GRAPH_KEY};
use super::limit::{graph_limit, SIZE_LIMIT};
use super::metrics;
use super::pending::{as_pending, is_pending, pending_of, Pending};
use super::program::{Arg, GraphCompiler, Node};
use super::rules::{checked, op_rule};
use super::state::{
    device_dtype, lock, recording, wait_settled, GraphBackend, Input, Recording, Shared, State,
    BACKENDS, GRAPH_BACKENDS,
};
use super::sync::{compute, sync_recording};
use super::views;

/// Makes `backend` a graph backend: its tensors carry the `Graph` key, so
/// operators on them are recorded, and `compiler` compiles each graph at its sync. The key and
/// its recording fallback are registered with the first graph backend.
///
/// ```
/// # use std::sync::Arc;
/// use boxfall::graph::{register_graph_backend, CompiledGraph, Graph, GraphCompiler};
/// struct Never;
/// impl GraphCompiler for Never {
///     fn compile(&self, _: &Arc<Graph>) -> boxfall::Result<Arc<dyn CompiledGraph>> {
///         Err(boxfall::Error::Fallback("no".into()))
///     }
/// }
/// let key = boxfall::key::register_backend_key("DocGraphBackend").unwrap();
/// register_graph_backend(key, Arc::new(Never)).unwrap();
/// assert!(boxfall::dispatcher::dispatch_keys(key.set()).contains(boxfall::DispatchKey::from_name("Graph").unwrap()));
/// ```
pub fn register_graph_backend(
    backend: DispatchKey,
    compiler: Arc<dyn GraphCompiler>,
) -> Result<()> {
    if !backend.is_backend() || backend == DispatchKey::CPU {
        return Err(Error::Registration(format!(
            "'{backend}' cannot be a graph backend: only a registered device backend can"
        )));
    }
    let graph = graph_key()?;
    {
        let mut all = BACKENDS.write().unwrap_or_else(|e| e.into_inner());
        if all.len() <= backend.index() {
            all.resize(backend.index() + 1, None);
        }
        all[backend.index()] = Some(Arc::new(GraphBackend::new(compiler)));
    }
    GRAPH_BACKENDS.fetch_or(backend.set().0, Ordering::Relaxed);
    carry_key(backend, graph)
}

/// The `Graph` key, registered (with its fallback, the recorder) on first use.
fn graph_key() -> Result<DispatchKey> {
    static REGISTERING: Mutex<()> = Mutex::new(());
    if let Some(k) = GRAPH_KEY.get() {
        return Ok(*k);
    }
    let _once = REGISTERING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = GRAPH_KEY.get() {
        return Ok(*k);
    }
    let key = register_functionality_key("Graph")?;
    // Long-running: a sync at a graph break runs the backend's compiler and program.
    let kernel = KernelFunction::from_boxed(record).long_running();
    // The registration lives as long as the process: graph backends are never unregistered.
    let _kept = Dispatcher::register_fallback(key, kernel, "boxfall graph mode")?;
    let _ = GRAPH_KEY.set(key);
    Ok(key)
}

/// How a call is recorded, or why it cannot be (it breaks the graph).
enum Plan {
    Record(Outputs),
    /// An in-place call recorded as its functional counterpart (`inplace.rs`), with its
    /// outputs' metas: no narrowing is counted, as the write ends in the target's dtype.
    Write(Write, Vec<TensorMeta>),
    Break,
    /// Run below the `Graph` key with nothing computed or counted (a view of computed
    /// tensors).
    Eager,
}

/// A planned call's outputs, in the device's dtypes, and which of them were narrowed to those
/// (index, the dtype the rule gave): counted and warned of ([`narrowed`]) only once the call is
/// recorded, as a plan may end in a graph break, whose eager call counts its own.
struct Outputs {
    metas: Vec<TensorMeta>,
    narrowed: Vec<(usize, std::borrow::Cow<'static, str>)>,
}

impl Outputs {
    /// Counts the narrowed results of `op` (the operator recorded) and gives the metas.
    fn counted(self, op: &OperatorHandle, backend: DispatchKey) -> Result<Vec<TensorMeta>> {
        for (i, from) in &self.narrowed {
            if let Some(m) = self.metas.get(*i) {
                narrowed(op, backend, from, &m.dtype)?;
            }
        }
        Ok(self.metas)
    }
}

/// The `Graph` key's fallback.
fn record(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    let carried = GRAPH_BACKENDS.load(Ordering::Relaxed);
    let Some(backend) = DispatchKeySet(keys.0 & carried).highest() else {
        return pass_on(op, keys, stack);
    };
    if stack
        .iter()
        .any(|v| matches!(v, IValue::Tensor(t) if t.is_view()))
        && record_with_views(op, backend, stack)?
    {
        return Ok(());
    }
    match plan(op, backend, stack)? {
        Plan::Record(out) => record_node(op, backend, stack, out.counted(op, backend)?),
        Plan::Break if cuts_nothing(op, stack)? => pass_on(op, keys, stack),
        Plan::Write(w, metas) => record_write(w, backend, stack, metas),
        Plan::Break => graph_break(op, backend, keys, stack),
        Plan::Eager => pass_on(op, keys, stack),
    }
}

/// Records an in-place call as its functional counterpart (`inplace.rs`).
fn record_write(
    w: Write,
    backend: DispatchKey,
    stack: &mut Stack,
    metas: Vec<TensorMeta>,
) -> Result<()> {
    // The write reads the target and rebinds it: another thread's write of it between the two
    // would be lost, so its write lock is held across both, as the CPU fallback holds it.
    let _held = hold_writes(std::iter::once(w.target.clone()));
    record_node(&w.op, backend, stack, metas)?;
    if let Some((astype, meta)) = inplace::cast_call(&w, stack) {
        record_node(&astype, backend, stack, vec![meta])?;
    }
    inplace::rebind(w, backend, stack)
}

/// Records a call with views of the backend's tensors among its arguments, each read from its
/// base's current data by a node of its own (`views.rs`), and a write of a view (`v += 1`,
/// `v[k] = w`) as the write of those values, then written into the base, which takes the
/// result as its data. False, with the stack as it was, where the call cannot be recorded so
/// (a view whose layout is not known, a call that is not recorded): it goes on as any call
/// (the nodes recorded to read the views are left out of the graph, as nothing holds them).
fn record_with_views(op: &OperatorHandle, backend: DispatchKey, stack: &mut Stack) -> Result<bool> {
    let schema = op.schema()?;
    let info = &schema.info;
    let written = info
        .args
        .iter()
        .position(|a| a.is_write)
        .filter(|_| info.is_mutable);
    let at: Vec<usize> = (0..stack.len())
        .filter(|&i| matches!(&stack[i], IValue::Tensor(t) if t.is_view() && t.key() == backend))
        .collect();
    let target = written.and_then(|w| match &stack[w] {
        IValue::Tensor(t) if at.contains(&w) => Some(t.clone()),
        _ => None,
    });
    if at.is_empty() || target.as_ref().is_some_and(|t| !views::writable(t)) {
        return Ok(false);
    }
    // A write through a view reads its base and rebinds it: its base's write lock is held
    // across both, so another thread's write of the base between the two is not lost.
    let _held = target
        .as_ref()
        .map(|t| hold_writes(std::iter::once(t.clone())));
    let original = stack.clone();
    // One read a view, however many arguments it is (`v += v`).
    let mut read: Vec<(Tensor, Tensor)> = Vec::with_capacity(at.len());
    for i in at {
        let IValue::Tensor(view) = &stack[i] else {
            continue;
        };
        let values = match read.iter().find(|(v, _)| v.same(view)) {
            Some((_, values)) => values.clone(),
            None => {
                let Some(values) = record_view(backend, view)? else {
                    *stack = original;
                    return Ok(false);
                };
                read.push((view.clone(), values.clone()));
                values
            }
        };
        stack[i] = IValue::Tensor(values);
    }
    match plan(op, backend, stack)? {
        Plan::Record(out) if target.is_none() => {
            record_node(op, backend, stack, out.counted(op, backend)?)?
        }
        Plan::Write(w, metas) => {
            record_write(w, backend, stack, metas)?;
            if let Some(view) = target {
                let values = read
                    .iter()
                    .find(|(v, _)| v.same(&view))
                    .map(|(_, values)| values.clone())
                    .ok_or_else(|| {
                        Error::Fallback(format!(
                            "'{}' on backend '{backend}': the written view was not read",
                            op.name()
                        ))
                    })?;
                write_view(op, backend, &view, values.clone())?;
                // The in-place operator returns the view it wrote, not the values read.
                for v in stack.iter_mut() {
                    if matches!(v, IValue::Tensor(t) if t.same(&values)) {
                        *v = IValue::Tensor(view.clone());
                    }
                }
            }
        }
        _ => {
            *stack = original;
            return Ok(false);
        }
    }
    Ok(true)
}

/// Records the read of `view` from its base's current data (`array_api::_strided_view`): the
/// pending values. A read of the same place of the same data recorded before in the graph is
/// the values it read (`views::recorded_read`): `x.T` read by three calls is one node. `None`
/// where it cannot be recorded.
fn record_view(backend: DispatchKey, view: &Tensor) -> Result<Option<Tensor>> {
    let Some((op, mut stack, layout)) = views::read_call(view) else {
        return Ok(None);
    };
    let rec = recording(backend);
    if let Some(values) = views::recorded_read(&rec, &stack, &layout) {
        return Ok(Some(values));
    }
    let Some(metas) = op_rule(&op).known(&op, &stack) else {
        return Ok(None);
    };
    record_node(&op, backend, &mut stack, metas)?;
    match stack.pop() {
        Some(IValue::Tensor(t)) => {
            views::note_read(&rec, &t, layout);
            Ok(Some(t))
        }
        _ => Ok(None),
    }
}

/// Records the write of `values` (pending: the view's new values) through `view` into its base
/// (`array_api::_strided_view_write`), whose result becomes the base's data.
fn write_view(
    op: &OperatorHandle,
    backend: DispatchKey,
    view: &Tensor,
    values: Tensor,
) -> Result<()> {
    let failed = || {
        Error::Fallback(format!(
            "'{}' on backend '{backend}': the write through {} cannot be recorded",
            op.name(),
            view.view_ops().map_or("a view".into(), |o| o.describe())
        ))
    };
    let (write, mut stack, base) = views::write_call(view, values).ok_or_else(failed)?;
    let metas = op_rule(&write).known(&write, &stack).ok_or_else(failed)?;
    record_node(&write, backend, &mut stack, metas)?;
    let Some(IValue::Tensor(result)) = stack.pop() else {
        return Err(failed());
    };
    inplace::take_result(backend, &base, result)
}

/// Whether a call that cannot be recorded leaves the pending graph whole: it reads no pending
/// tensor and writes nothing (`asarray` of host data, a creation function with a device's
/// tensor in an argument). It runs now, as in eager mode, and its results are concrete: the
/// graph reads them as inputs. No graph break is counted, as none happens.
fn cuts_nothing(op: &OperatorHandle, stack: &Stack) -> Result<bool> {
    Ok(!op.schema()?.info.is_mutable && !stack.iter().any(|v| v.tensors().any(is_pending)))
}

/// Whether the call can be recorded, and its outputs if so.
fn plan(op: &OperatorHandle, backend: DispatchKey, stack: &Stack) -> Result<Plan> {
    let schema = op.schema()?;
    let info = &schema.info;
    // A view operator of tensors that are all computed cuts no graph (it is made now, a real
    // view, as in eager mode): no break is counted for it. An in-place call is recorded as
    // its functional counterpart (`inplace.rs`).
    if info.has_view_returns
        && !info.is_mutable
        && !stack.iter().any(|v| v.tensors().any(is_pending))
    {
        return Ok(Plan::Eager);
    }
    if info.is_mutable && !info.has_view_returns {
        let Some(w) = inplace::functional(op, backend, stack)? else {
            return Ok(Plan::Break);
        };
        return Ok(match plan(&w.op, backend, stack)? {
            Plan::Record(out) => match inplace::fitted(w, op, stack, &out.metas) {
                // Not counted as narrowed: the write ends in the target's dtype, as the
                // eager in-place call's result does, whatever dtype its functional form had
                // on the way (float32 `f /= i` of an int32 `i` is float64 in NumPy, float32 on
                // a device without 64-bit types: eager mode counts nothing either).
                Some(w) => Plan::Write(w, out.metas),
                None => Plan::Break,
            },
            _ => Plan::Break,
        });
    }
    if info.is_mutable || info.has_view_returns {
        return Ok(Plan::Break);
    }
    if info.returns.iter().any(|r| r.kind != ArgKind::Tensor) {
        return Ok(Plan::Break);
    }
    for &i in &info.tensor_args {
        match stack.get(i) {
            // A view here is one whose reads are not recorded (`record_with_views` declined):
            // an input like any computed tensor, its device data the view's values.
            Some(IValue::Tensor(t)) if t.key() == backend => {}
            Some(IValue::None) => {}
            // No tensor in the list (`getitem`'s arrays of a basic index).
            Some(IValue::TensorList(v)) if v.is_empty() => {}
            Some(IValue::OptionalTensorList(v)) if v.is_empty() => {}
            Some(IValue::List(v)) if v.is_empty() => {}
            // A CPU tensor, another device's, a list of tensors.
            _ => return Ok(Plan::Break),
        }
    }
    // A tensor in an argument the schema does not type as one (`Any`: `asarray`'s object)
    // is an input too, and must be of the backend as well.
    if stack
        .iter()
        .any(|v| v.tensors().any(|t| t.key() != backend))
    {
        return Ok(Plan::Break);
    }
    // Constants must hold no tensor and be comparable: an object (a Python slice) is read
    // by its description.
    let Some(described) = described_stack(stack) else {
        return Ok(Plan::Break);
    };
    let rule = op_rule(op);
    // An operator whose kernel the backend's compiler cannot put in a program (`refuse`).
    if rule.refused(backend) {
        return Ok(Plan::Break);
    }
    match rule.metas(op, &described)? {
        Some(mut metas) => {
            checked(op, info.returns.len(), &metas)?;
            let mut narrowings = Vec::new();
            for (i, m) in metas.iter_mut().enumerate() {
                if let Some(to) = device_dtype(backend, &m.dtype) {
                    narrowings.push((
                        i,
                        std::mem::replace(&mut m.dtype, std::borrow::Cow::Borrowed(to)),
                    ));
                }
            }
            if !narrowings.is_empty() && narrowed_below_scalar(&metas, &narrowings, &described) {
                return Ok(Plan::Break);
            }
            Ok(Plan::Record(Outputs {
                metas,
                narrowed: narrowings,
            }))
        }
        _ => Ok(Plan::Break),
    }
}

/// Whether an int argument of the call cannot be held by the integer dtype a result of it was
/// narrowed to (`bool + 2**40` and `full((), 2**31, dtype=int64)` are int64 in NumPy, int32 on
/// a device without 64-bit types): eager mode refuses such a result at the call
/// (`OverflowError`), where the values show whether they fit, so the call is not recorded (a
/// program would meet them at its run).
fn narrowed_below_scalar(
    metas: &[TensorMeta],
    narrowings: &[(usize, std::borrow::Cow<'static, str>)],
    stack: &[IValue],
) -> bool {
    narrowings.iter().any(|(i, _)| {
        metas
            .get(*i)
            .and_then(|m| DType::from_name(&m.dtype))
            .is_some_and(|d| {
                matches!(d.kind(), Kind::Signed | Kind::Unsigned)
                    && stack
                        .iter()
                        .any(|v| matches!(v, IValue::Int(s) if !holds(d, *s)))
            })
    })
}

/// A tensor argument made ready before the recording is locked.
enum Ready {
    /// A result of the recording's node: (generation, node, result).
    Pending(u64, usize, usize),
    /// A concrete tensor, its data, version and meta; no meta for one the graph had as an
    /// input at that version when the call began (its meta is the input's).
    Concrete(Tensor, TensorData, u64, Option<TensorMeta>),
}

/// Records the call as a node; its results, pending, replace the arguments on the stack.
fn record_node(
    op: &OperatorHandle,
    backend: DispatchKey,
    stack: &mut Stack,
    metas: Vec<TensorMeta>,
) -> Result<()> {
    let device = call_device(op, backend, stack)?;
    let rec = recording(backend);
    let known = {
        let r = lock(&rec);
        // A graph is cut past its backend's size limit (`limit.rs`): its program is computed
        // now, without waiting for it, and the call starts the next. A graph's program runs
        // on one device: a call on another of the backend's devices computes the graph
        // recorded so far and starts the next, on its device.
        let cut = if r.state.nodes.len() >= graph_limit(backend) {
            Some(SIZE_LIMIT)
        } else if r.state.device.is_some_and(|d| d != device) {
            Some(OTHER_DEVICE)
        } else {
            None
        };
        if let Some(reason) = cut {
            drop(r);
            sync_recording(&rec, reason)?;
            0
        } else {
            known_inputs(&r.state, stack)
        }
    };
    let mut ready = ready_args(op, backend, &rec, stack, known)?;
    let scalar_operands = op_rule(op).scalar_inputs.load(Ordering::Relaxed);
    // The dtype an int scalar beside a bool meets: NumPy's int64, as the device holds it.
    let default_int = match scalar_operands {
        true => device_dtype(backend, "int64")
            .and_then(DType::from_name)
            .unwrap_or(DType::I64),
        false => DType::I64,
    };
    let mut guard = lock(&rec);
    // Another thread syncs the graph (it read a pending tensor of it), or synced it meanwhile
    // (an input or a pending argument's node is gone): the call waits for that sync, and its
    // arguments are made ready again, every meta read, without the lock (a payload's may be
    // read in Python).
    let mut retried = false;
    loop {
        let computing = guard.computing.is_some();
        if !computing && (retried || fits(&guard, &ready)) {
            break;
        }
        drop(guard);
        if computing {
            wait_settled(&rec, &|| {
                format!("'{}' on backend '{backend}' was called", op.name())
            })?;
        } else {
            retried = true;
        }
        ready = ready_args(op, backend, &rec, stack, 0)?;
        guard = lock(&rec);
    }
    let r = &mut *guard;
    let generation = r.generation;
    // An elementwise operator's Python scalar, made a scalar input below where it may be one.
    let mut scalars_at: Vec<usize> = Vec::new();
    let mut args = Vec::with_capacity(stack.len());
    for (v, ready) in stack.drain(..).zip(ready) {
        args.push(match ready {
            None if scalar_operands
                && matches!(v, IValue::Double(_) | IValue::Int(_) | IValue::Bool(_)) =>
            {
                scalars_at.push(args.len());
                Arg::Const(v)
            }
            None => Arg::Const(v),
            Some(Ready::Pending(g, n, o)) if g == generation => Arg::Node(n, o),
            Some(Ready::Pending(..)) => {
                return Err(Error::Fallback(format!(
                    "'{}' on backend '{backend}': a pending argument's graph was synced meanwhile",
                    op.name()
                )))
            }
            Some(Ready::Concrete(t, data, version, meta)) => {
                Arg::Input(input_index(&mut r.state, t, data, version, meta)?)
            }
        });
    }
    if !scalars_at.is_empty() {
        let operand = operand_dtype(&r.state, &args);
        for i in scalars_at {
            if let Some(Arg::Const(v)) = args.get(i) {
                if is_scalar_input(v, operand, default_int) {
                    let v = v.clone();
                    args[i] = Arg::Scalar(r.state.add_scalar(v));
                }
            }
        }
    }
    let node = r.state.nodes.len();
    r.state.device = Some(device);
    for (out, meta) in metas.iter().enumerate() {
        let p = Arc::new(Pending {
            dtype: DType::from_name(&meta.dtype),
            meta: meta.clone(),
            recording: Arc::downgrade(&rec),
            generation,
            node,
            out,
            result: OnceLock::new(),
            lost: OnceLock::new(),
        });
        let t = Tensor::foreign(device, p);
        r.state.pending.push((t.clone(), node, out));
        stack.push(IValue::Tensor(t));
    }
    r.state.push_node(Node {
        op: op.clone(),
        args,
        outputs: metas,
    });
    if let Some((guess, inputs)) = ahead::due(r) {
        drop(guard);
        ahead::launch(&rec, generation, guess, inputs);
    }
    Ok(())
}

/// The dtype of the tensor operand of an elementwise operator's scalar overload
/// (`less.Tensor_Scalar(x, 200)`), from the recorded metas; `None` for a dtype host memory
/// lacks.
fn operand_dtype(state: &State, args: &[Arg]) -> Option<DType> {
    let meta = args.iter().find_map(|a| match a {
        Arg::Input(i) => state.inputs.get(*i).map(|input| &input.meta),
        Arg::Node(n, o) => state.nodes.get(*n).and_then(|node| node.outputs.get(*o)),
        _ => None,
    })?;
    DType::from_name(&meta.dtype)
}

/// Whether a Python scalar beside an operand of dtype `operand` is a scalar input (its value
/// given at each run, its type alone in the graph's key) rather than a constant (its value in
/// the key). An int is one only where the dtype it meets holds it: the integer operand's
/// (NumPy's rule for `uint32 + 2**31`), any float's, else `default_int`'s (beside a bool). A
/// program compiled for an int in range then never runs with one outside it, where a
/// comparison's answer is another (int8 `x < 200` is all True, `x < 100` is not), and a
/// compiler converts every scalar input to the dtype it meets without overflowing. A finite
/// float outside float32's normal range is a constant too: a device without 64-bit types
/// packs its float inputs as float32, where one beyond it is infinite before the operator sees
/// it (NumPy computes `3.5e38 / int8` in float64; its result fits float32) and a subnormal one
/// is flushed to zero (bool `x == 1e-45` was True); a program's usual floats (a learning
/// rate, a tolerance) are normal, so they compile nothing new.
fn is_scalar_input(v: &IValue, operand: Option<DType>, default_int: DType) -> bool {
    if let IValue::Double(d) = v {
        let m = d.abs();
        return !d.is_finite()
            || m == 0.0
            || (f64::from(f32::MIN_POSITIVE)..=f64::from(f32::MAX)).contains(&m);
    }
    let IValue::Int(i) = v else {
        return true;
    };
    match operand.map(DType::kind) {
        Some(Kind::Signed | Kind::Unsigned) => operand.is_some_and(|d| holds(d, *i)),
        Some(Kind::Float | Kind::Complex) => true,
        _ => holds(default_int, *i),
    }
}

/// The sync reason of a graph cut where a call on another of the backend's devices begins.
const OTHER_DEVICE: &str = "another device";

/// The device a call's results are on: its tensors' (all on one device of `backend`, else an
/// error naming the two), else its `Device` argument's where that is `backend`'s, else the
/// backend's device 0.
fn call_device(op: &OperatorHandle, backend: DispatchKey, stack: &Stack) -> Result<Device> {
    let mut found: Option<Device> = None;
    let mut meet = |t: &Tensor| match found {
        Some(f) if f != t.device() => Err(two_devices(op, f, t.device())),
        _ => {
            found = Some(t.device());
            Ok(())
        }
    };
    for v in stack {
        match v {
            // A tensor met directly: `tensors()` boxes its iterator, an allocation a call.
            IValue::Tensor(t) => meet(t)?,
            IValue::TensorList(_)
            | IValue::OptionalTensorList(_)
            | IValue::List(_)
            | IValue::Tuple(_) => v.tensors().try_for_each(&mut meet)?,
            _ => {}
        }
    }
    let argument = || {
        stack.iter().find_map(|v| match v {
            IValue::Device(d) if d.key == backend => Some(*d),
            _ => None,
        })
    };
    Ok(found.or_else(argument).unwrap_or(Device::new(backend, 0)))
}

/// Each tensor of `stack` made ready without the recording's lock: a pending tensor of
/// another graph (another thread's) is computed, a concrete one's device data read (a result
/// kept on the host gets its payload), and its meta unless `known` has its bit (its index).
fn ready_args(
    op: &OperatorHandle,
    backend: DispatchKey,
    rec: &Arc<Shared>,
    stack: &Stack,
    known: u64,
) -> Result<Vec<Option<Ready>>> {
    let mut ready: Vec<Option<Ready>> = Vec::with_capacity(stack.len());
    'args: for (i, v) in stack.iter().enumerate() {
        let IValue::Tensor(t) = v else {
            ready.push(None);
            continue;
        };
        // Until it holds computed data: another thread's write may make it pending again
        // (in that thread's graph, computed first) between the compute and the read.
        let (version, data) = loop {
            if let Some(p) = pending_of(&t.data()) {
                let pend = as_pending(&p);
                // Compared by address: `rec` is alive, so no other recording has its address.
                // A lost one (`donate.rs`, or its node failed) is no node to read: computing
                // it says why.
                let ours = pend.result.get().is_none()
                    && pend.lost.get().is_none()
                    && std::ptr::eq(pend.recording.as_ptr(), Arc::as_ptr(rec));
                if ours {
                    ready.push(Some(Ready::Pending(pend.generation, pend.node, pend.out)));
                    continue 'args;
                }
                compute(t, "graph break")?;
            }
            let version = t.data_version();
            let data = crate::resident::device_data(t)?;
            // (A view is never pending itself: its data is its base's values.)
            if t.is_view() || pending_of(&data).is_none() {
                break (version, data);
            }
        };
        let meta = if i < 64 && known & (1 << i) != 0 {
            None
        } else {
            Some(t.meta().ok_or_else(|| {
                Error::Fallback(format!(
                    "'{}' on backend '{backend}': a tensor argument gives no dtype and shape, so the call cannot be recorded",
                    op.name()
                ))
            })?)
        };
        ready.push(Some(Ready::Concrete(t.clone(), data, version, meta)));
    }
    Ok(ready)
}

/// Which of the first 64 values of `stack` are tensors the graph has as inputs at their
/// version now, a bit each: their metas need not be read again (two allocations each).
fn known_inputs(state: &State, stack: &Stack) -> u64 {
    let mut known = 0;
    for (i, v) in stack.iter().enumerate().take(64) {
        if let IValue::Tensor(t) = v {
            let version = t.data_version();
            if state
                .inputs
                .iter()
                .any(|i| i.tensor.same(t) && i.version == version)
            {
                known |= 1 << i;
            }
        }
    }
    known
}

/// Whether the arguments made ready still fit the recording: every concrete tensor made ready
/// without its meta is still an input of the graph, every pending one of its generation.
fn fits(r: &Recording, ready: &[Option<Ready>]) -> bool {
    ready.iter().all(|a| match a {
        Some(Ready::Concrete(t, _, version, None)) => r
            .state
            .inputs
            .iter()
            .any(|i| i.tensor.same(t) && i.version == *version),
        Some(Ready::Pending(g, _, _)) => *g == r.generation,
        _ => true,
    })
}

/// The index of the graph's input holding `t`'s data at `version`, added if new (`meta` is
/// given for a tensor that may be new: `has_inputs` checked the others).
fn input_index(
    state: &mut State,
    t: Tensor,
    data: TensorData,
    version: u64,
    meta: Option<TensorMeta>,
) -> Result<usize> {
    if let Some(i) = state
        .inputs
        .iter()
        .position(|i| i.tensor.same(&t) && i.version == version)
    {
        return Ok(i);
    }
    let meta = meta.ok_or_else(|| {
        Error::Fallback("graph mode lost an input's dtype and shape while recording".into())
    })?;
    Ok(state.add_input(Input {
        tensor: t,
        version,
        data,
        meta,
        consumed: false,
    }))
}

/// A counted graph break: the call's pending tensors are computed (a sync), and the call runs
/// below the `Graph` key, with the key excluded on the thread meanwhile so that what the
/// backend's kernel calls runs eagerly too. An operator that writes an argument first computes
/// the whole pending graph of the backend: the tensor it writes may be an input of the graph,
/// whose payload a backend may write where it is.
fn graph_break(
    op: &OperatorHandle,
    backend: DispatchKey,
    keys: DispatchKeySet,
    stack: &mut Stack,
) -> Result<()> {
    metrics::graph_break(op.name());
    if op.schema()?.info.is_mutable {
        sync_recording(&recording(backend), "graph break")?;
    }
    for v in stack.iter() {
        for t in v.tensors() {
            compute(t, "graph break")?;
        }
    }
    pass_on(op, keys, stack)
}

/// The call below the `Graph` key, as in eager mode.
fn pass_on(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    let _eager = LocalKeysGuard::exclude(graph_keys());
    let below = DispatchKeySet(keys.0 & !graph_keys().0);
    op.call_boxed_with_keys(below, stack)
}
