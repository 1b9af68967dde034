//! The boxed CPU fallback: one kernel, written once, that runs any operator on any backend by
//! moving the backend's tensors to the CPU, running the CPU kernel, writing mutated arguments
//! back and moving the results to the device. Also the fallback policy and `call_fallback`.
//!
//! Failure atomicity: the CPU kernel works on CPU copies (or read-only loans) of the arguments,
//! every result is moved to the device before any argument is written, and nothing is written
//! unless the kernel succeeded.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::backend::backend;
use crate::clock;
use crate::dispatcher::{policy_of, OperatorHandle};
use crate::error::{Error, Result};
use crate::ivalue::{IValue, Stack};
use crate::kernel::KernelFunction;
use crate::key::{DispatchKey, DispatchKeySet};
use crate::rcu;
use crate::tensor::{Device, Tensor};

/// What the fallback does with a view operator (a return that aliases an input without
/// writing it), whose storage cannot be shared across devices.
///
/// ```
/// assert_eq!(boxfall::fallback::ViewPolicy::default(), boxfall::fallback::ViewPolicy::Refuse);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ViewPolicy {
    /// A `Fallback` error naming the operator.
    #[default]
    Refuse,
    /// Return a copy, with a warning.
    Copy,
}

/// A CPU fallback's configuration.
///
/// ```
/// use boxfall::fallback::{CpuFallback, ViewPolicy};
/// let k = CpuFallback { views: ViewPolicy::Copy }.kernel();
/// assert!(k.is_cpu_fallback());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuFallback {
    /// What to do with view operators.
    pub views: ViewPolicy,
}

impl CpuFallback {
    /// The boxed kernel.
    ///
    /// ```
    /// use boxfall::CpuFallback;
    /// let k = CpuFallback::default().kernel();
    /// assert!(k.is_cpu_fallback());
    /// assert!(!k.has_unboxed()); // boxed only: it serves every signature
    /// ```
    pub fn kernel(&self) -> KernelFunction {
        KernelFunction::cpu_fallback(self.clone())
    }
}

/// The default CPU fallback kernel (refuses view operators).
///
/// ```
/// use boxfall::{Library, LibraryKind, DispatchKey, cpu_fallback};
/// let mut fb = Library::new("_", LibraryKind::Impl).unwrap();
/// fb.fallback(DispatchKey::NATIVE, cpu_fallback()).ok(); // may already be registered
/// ```
pub fn cpu_fallback() -> KernelFunction {
    CpuFallback::default().kernel()
}

/// Whether fallbacks reached through a backend fallback registration run.
///
/// ```
/// assert_eq!("warn".parse::<boxfall::FallbackPolicy>().unwrap(), boxfall::FallbackPolicy::Warn);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FallbackPolicy {
    /// Run silently.
    Allow = 1,
    /// Run, warning once per (operator, backend).
    Warn = 2,
    /// Refuse with a `Fallback` error.
    Error = 3,
}

impl std::str::FromStr for FallbackPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "allow" => Ok(FallbackPolicy::Allow),
            "warn" => Ok(FallbackPolicy::Warn),
            "error" => Ok(FallbackPolicy::Error),
            other => Err(Error::Fallback(format!(
                "fallback policy must be \"allow\", \"warn\" or \"error\", not {other:?}"
            ))),
        }
    }
}

impl FallbackPolicy {
    fn from_u8(v: u8) -> Option<FallbackPolicy> {
        match v {
            1 => Some(FallbackPolicy::Allow),
            2 => Some(FallbackPolicy::Warn),
            3 => Some(FallbackPolicy::Error),
            _ => None,
        }
    }

    /// The policy's name.
    ///
    /// ```
    /// use boxfall::FallbackPolicy;
    /// assert_eq!(FallbackPolicy::Warn.as_str(), "warn");
    /// for p in [FallbackPolicy::Allow, FallbackPolicy::Warn, FallbackPolicy::Error] {
    ///     assert_eq!(p.as_str().parse::<FallbackPolicy>().unwrap(), p);
    /// }
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackPolicy::Allow => "allow",
            FallbackPolicy::Warn => "warn",
            FallbackPolicy::Error => "error",
        }
    }
}

static POLICY: AtomicU8 = AtomicU8::new(0);

/// The process-wide policy: as set, else `BOXFALL_FALLBACK` from the environment, else allow.
///
/// ```
/// let _ = boxfall::fallback::fallback_policy();
/// ```
pub fn fallback_policy() -> FallbackPolicy {
    if let Some(p) = FallbackPolicy::from_u8(POLICY.load(Ordering::Relaxed)) {
        return p;
    }
    let p = std::env::var("BOXFALL_FALLBACK")
        .ok()
        .and_then(|v| v.trim().to_ascii_lowercase().parse().ok())
        .unwrap_or(FallbackPolicy::Allow);
    let _ = POLICY.compare_exchange(0, p as u8, Ordering::Relaxed, Ordering::Relaxed);
    p
}

/// Sets the process-wide policy.
///
/// ```
/// use boxfall::{fallback::{fallback_policy, set_fallback_policy}, FallbackPolicy};
/// let before = fallback_policy();
/// set_fallback_policy(FallbackPolicy::Warn);
/// assert_eq!(fallback_policy(), FallbackPolicy::Warn);
/// set_fallback_policy(before);
/// ```
pub fn set_fallback_policy(p: FallbackPolicy) {
    POLICY.store(p as u8, Ordering::Relaxed);
}

/// Sets (or with `None` clears) one operator's own policy, which wins over the process-wide one.
///
/// ```
/// use boxfall::{fallback::set_operator_policy, native, *};
/// native::install_fallback().unwrap();
/// let mut lib = Library::new("doc_op_policy", LibraryKind::Def).unwrap();
/// let op = lib.define("id(Tensor x) -> Tensor").unwrap();
/// lib.impl_kernel("id", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| Ok(x)), false).unwrap();
/// let id = op.typed::<(Tensor,), Tensor>().unwrap();
/// set_operator_policy(&op, Some(FallbackPolicy::Error));
/// assert!(matches!(id.call((native::tensor(ndarray::arr1(&[1.0]).into_dyn()),)), Err(Error::Fallback(_))));
/// set_operator_policy(&op, Some(FallbackPolicy::Allow));
/// assert!(id.call((native::tensor(ndarray::arr1(&[1.0]).into_dyn()),)).is_ok());
/// ```
pub fn set_operator_policy(op: &OperatorHandle, p: Option<FallbackPolicy>) {
    op.policy_cell()
        .store(p.map_or(0, |p| p as u8), Ordering::Relaxed);
}

/// What a warning is about.
///
/// ```
/// assert_ne!(boxfall::fallback::WarningKind::Fallback, boxfall::fallback::WarningKind::ViewCopy);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarningKind {
    /// An operator fell back (policy "warn").
    Fallback,
    /// A view operator was copied.
    ViewCopy,
}

/// Receives the fallback's warnings; an error it returns fails the call (a Python warning
/// filter set to "error").
///
/// ```
/// use boxfall::fallback::{WarningHandler, WarningKind};
/// let h: WarningHandler = |kind, _message| match kind {
///     WarningKind::ViewCopy => Err(boxfall::Error::Fallback("no view copies".into())),
///     WarningKind::Fallback => Ok(()),
/// };
/// assert!(h(WarningKind::Fallback, "falls back").is_ok());
/// assert!(h(WarningKind::ViewCopy, "copies").is_err());
/// ```
pub type WarningHandler = fn(WarningKind, &str) -> Result<()>;

static WARNING_HANDLER: OnceLock<WarningHandler> = OnceLock::new();

/// Installs the warning handler (once; the Python bindings turn warnings into
/// `bf.FallbackWarning`). Without one, warnings go to the `log` crate.
///
/// ```
/// use boxfall::fallback::{set_warning_handler, WarningKind};
/// fn quiet(_: WarningKind, _: &str) -> boxfall::Result<()> { Ok(()) }
/// assert!(set_warning_handler(quiet));
/// assert!(!set_warning_handler(quiet)); // only the first handler is installed
/// ```
pub fn set_warning_handler(h: WarningHandler) -> bool {
    WARNING_HANDLER.set(h).is_ok()
}

fn warn(kind: WarningKind, message: &str) -> Result<()> {
    match WARNING_HANDLER.get() {
        Some(h) => h(kind, message),
        None => {
            log::warn!(target: "boxfall", "{message}");
            Ok(())
        }
    }
}

fn check_policy(op: &OperatorHandle, key: DispatchKey) -> Result<()> {
    let policy = FallbackPolicy::from_u8(policy_of(op)).unwrap_or_else(fallback_policy);
    match policy {
        FallbackPolicy::Allow => Ok(()),
        FallbackPolicy::Warn => {
            if op.metrics().first_warning(key) {
                warn(
                    WarningKind::Fallback,
                    &format!(
                        "'{}' has no kernel for the '{key}' backend and falls back to the CPU (its tensors are copied to the CPU and back); implement it for '{key}' to keep it on the device",
                        op.name()
                    ),
                )?;
            }
            Ok(())
        }
        FallbackPolicy::Error => Err(Error::Fallback(format!(
            "'{}' has no kernel for the '{key}' backend, and the fallback policy \"error\" forbids the CPU fallback",
            op.name()
        ))),
    }
}

/// Runs a boxed fallback from typed code: a backend kernel hands one case to the fallback
/// (c10's `call_fallback_fn`). The policy does not apply: the call is explicit.
///
/// ```
/// # use boxfall::{*, fallback::call_fallback};
/// let mut lib = Library::new("doc_callfb", LibraryKind::Def).unwrap();
/// let op = lib.define("neg(Tensor x) -> Tensor").unwrap();
/// lib.impl_kernel("neg", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| {
///     let a = x.to_host()?.as_f64().cloned().unwrap_or_default();
///     Ok(Tensor::from_array(-a))
/// }), false).unwrap();
/// let x = native::tensor(ndarray::arr1(&[1.0, -2.0]).into_dyn());
/// let mut stack = vec![IValue::Tensor(x)];
/// call_fallback(&cpu_fallback(), &op, DispatchKey::NATIVE.set(), &mut stack).unwrap();
/// let y = stack[0].as_tensor().unwrap();
/// assert_eq!(y.device(), native::DEVICE);
/// assert_eq!(y.to_host().unwrap().as_f64().unwrap().as_slice().unwrap(), &[-1.0, 2.0]);
/// ```
pub fn call_fallback(
    fallback: &KernelFunction,
    op: &OperatorHandle,
    keys: DispatchKeySet,
    stack: &mut Stack,
) -> Result<()> {
    fallback.call_boxed(op, keys, stack)
}

thread_local! {
    /// The buffer the CPU stack is built in, kept for this thread's next fallback. Boxed, so
    /// taking and returning it moves one word (see the dispatcher's spare stack).
    static SPARE_STACK: Cell<Option<Box<Stack>>> = const { Cell::new(None) };
}

/// Counts a moved tensor's bytes, and remembers it if the kernel writes it (for the write-back).
fn record_move(
    moved: &mut Vec<Moved>,
    bytes: &mut (u64, u64),
    arg: usize,
    slot: Option<usize>,
    write: bool,
    cpu: &Tensor,
) {
    bytes.0 += cpu.nbytes() as u64;
    if write {
        moved.push(Moved {
            arg,
            slot,
            cpu: cpu.clone(),
        });
    }
}

/// Where one moved tensor sits in the stack.
struct Moved {
    arg: usize,
    slot: Option<usize>,
    cpu: Tensor,
}

pub(crate) fn run_cpu_fallback(
    cfg: &CpuFallback,
    check: bool,
    op: &OperatorHandle,
    keys: DispatchKeySet,
    stack: &mut Stack,
) -> Result<()> {
    let key = keys.highest().unwrap_or(DispatchKey::CPU);
    // The schema is borrowed for the whole call (a typed call is inside a read section
    // already, so this one nests for free).
    let guard = rcu::read();
    let info = &op.schema_in(&guard)?.info;
    if check {
        check_policy(op, key)?;
    }
    if info.has_view_returns {
        match cfg.views {
            ViewPolicy::Refuse => {
                return Err(Error::Fallback(format!(
                    "'{}' is a view operator: its result aliases its input, and the CPU fallback cannot share storage between '{key}' and the CPU; implement it for '{key}', or use CpuFallback(views=\"copy\") to get copies",
                    op.name()
                )))
            }
            ViewPolicy::Copy => warn(
                WarningKind::ViewCopy,
                &format!(
                    "'{}' is a view operator; the CPU fallback for '{key}' returns a copy, which does not share storage with its input",
                    op.name()
                ),
            )?,
        }
    }
    let hooks = backend(key).ok_or_else(|| {
        Error::Fallback(format!(
            "cannot run '{}' through the CPU fallback: '{key}' is not a backend with transfer hooks (register it with register_backend)",
            op.name()
        ))
    })?;
    let start = clock::ticks();
    let mut bytes = (0u64, 0u64);
    let result = fallback_body(op, info, key, hooks, stack, &mut bytes);
    let ticks = clock::ticks().wrapping_sub(start);
    op.metrics()
        .record(key, ticks, bytes.0, bytes.1, result.is_ok());
    result
}

fn step_error(op: &OperatorHandle, step: &str, e: Error) -> Error {
    match e {
        Error::Foreign { .. } => e,
        other => Error::Fallback(format!(
            "CPU fallback of '{}' failed in {step}: {other}",
            op.name()
        )),
    }
}

fn fallback_body(
    op: &OperatorHandle,
    info: &crate::schema::SchemaInfo,
    key: DispatchKey,
    hooks: &dyn crate::backend::Backend,
    stack: &mut Stack,
    bytes: &mut (u64, u64),
) -> Result<()> {
    let target = target_device(op, info, key, stack)?;
    if log::log_enabled!(target: "boxfall", log::Level::Debug) {
        log_call(op, key, info, stack);
    }

    // The arguments stay where they are, for the write-back and so that a failed call leaves
    // its stack as it was; the CPU stack is built beside them and, on success, takes their
    // place. Nothing is cloned for a moved tensor, and the two buffers trade places, so a
    // steady stream of calls allocates no stack.
    let mut cpu_stack: Box<Stack> = SPARE_STACK.with(Cell::take).unwrap_or_default();
    let result = fallback_steps(op, info, key, hooks, target, stack, &mut cpu_stack, bytes);
    if result.is_ok() {
        std::mem::swap(stack, &mut *cpu_stack);
    }
    cpu_stack.clear();
    SPARE_STACK.with(|c| c.set(Some(cpu_stack)));
    result
}

/// Moves the tensors (1, `move_to_cpu`), runs the CPU kernel (2), moves the results (3), writes
/// back (4).
#[allow(clippy::too_many_arguments)]
fn fallback_steps(
    op: &OperatorHandle,
    info: &crate::schema::SchemaInfo,
    key: DispatchKey,
    hooks: &dyn crate::backend::Backend,
    target: Device,
    original: &Stack,
    cpu_stack: &mut Stack,
    bytes: &mut (u64, u64),
) -> Result<()> {
    if original.len() != info.args.len() {
        return Err(Error::Fallback(format!(
            "CPU fallback of '{}': the stack holds {} values for {} arguments",
            op.name(),
            original.len(),
            info.args.len()
        )));
    }
    let moved = move_to_cpu(op, info, key, hooks, original, cpu_stack, bytes)?;

    // 2. Run the CPU kernel.
    op.call_boxed_with_keys(DispatchKey::CPU.set(), cpu_stack)
        .map_err(|e| kernel_error(op, key, e))?;
    if cpu_stack.len() != info.returns.len() {
        return Err(Error::Fallback(format!(
            "CPU kernel of '{}' left {} values for {} returns",
            op.name(),
            cpu_stack.len(),
            info.returns.len()
        )));
    }

    // 3. Move every result to the device before writing any argument (in place: the CPU
    // stack becomes the returns).
    let mut replaced: Vec<(usize, IValue)> = Vec::new();
    for (j, r) in info.returns.iter().enumerate() {
        let value = std::mem::replace(&mut cpu_stack[j], IValue::None);
        cpu_stack[j] = match r
            .aliases_arg
            .filter(|&i| info.args.get(i).is_some_and(|a| a.is_write))
        {
            Some(i) => {
                replaced.push((i, value));
                original.get(i).cloned().unwrap_or(IValue::None)
            }
            None => {
                to_device(value, hooks, target, bytes).map_err(|e| step_error(op, "from_cpu", e))?
            }
        };
    }

    // 4. Write the mutated arguments back (from the returned value where the kernel gave a
    // new one for an aliased return). With several written tensors, each destination is
    // backed up first, so a failing copy_from_cpu can put back those already written.
    let writes: Vec<(&Tensor, &Tensor)> = moved
        .iter()
        .filter(|m| info.args.get(m.arg).is_some_and(|a| a.is_write))
        .filter_map(|m| {
            let src = replaced
                .iter()
                .find(|(i, _)| *i == m.arg)
                .and_then(|(_, v)| element(v, m.slot))
                .unwrap_or(&m.cpu);
            original
                .get(m.arg)
                .and_then(|v| element(v, m.slot))
                .map(|dst| (dst, src))
        })
        .collect();
    let backups: Vec<Tensor> = if writes.len() > 1 {
        writes
            .iter()
            .map(|(dst, _)| hooks.to_cpu(dst, true))
            .collect::<Result<_>>()
            .map_err(|e| step_error(op, "to_cpu (backing up the outputs)", e))?
    } else {
        Vec::new()
    };
    for (k, (dst, src)) in writes.iter().enumerate() {
        if let Err(e) = hooks.copy_from_cpu(dst, src) {
            for ((dst, _), backup) in writes.iter().zip(&backups).take(k) {
                let _ = hooks.copy_from_cpu(dst, backup);
            }
            return Err(step_error(op, "copy_from_cpu", e));
        }
        bytes.1 += src.nbytes() as u64;
    }
    // A CPU tensor the kernel was given as is, but for which it returned a new one.
    for (i, v) in &replaced {
        if let (Some(IValue::Tensor(dst)), IValue::Tensor(src)) = (original.get(*i), v) {
            if dst.key() == DispatchKey::CPU && !dst.same(src) {
                dst.set_data(src.data());
            }
        }
    }
    Ok(())
}

/// Step 1: moves the backend's tensors to the CPU, building the CPU stack: one by one as the
/// stack is built (a moved tensor is never cloned only to be replaced), or all at once where
/// the backend batches. A `Device` argument naming the backend becomes the CPU. Returns the
/// moved tensors the kernel will write.
fn move_to_cpu(
    op: &OperatorHandle,
    info: &crate::schema::SchemaInfo,
    key: DispatchKey,
    hooks: &dyn crate::backend::Backend,
    original: &Stack,
    cpu_stack: &mut Stack,
    bytes: &mut (u64, u64),
) -> Result<Vec<Moved>> {
    cpu_stack.reserve(original.len());
    let mut moved: Vec<Moved> = Vec::new();
    if hooks.batches_transfers() {
        for (v, arg) in original.iter().zip(info.args.iter()) {
            cpu_stack.push(match v {
                IValue::Tensor(t) if t.key() == key && arg.kind.holds_tensors() => IValue::None,
                other => other.clone(),
            });
        }
        let mut sources: Vec<(&Tensor, bool)> = Vec::new();
        let mut places: Vec<(usize, Option<usize>, bool)> = Vec::new();
        each_moved(info, key, original, |arg, slot, t, write| {
            sources.push((t, write));
            places.push((arg, slot, write));
        });
        let cpus = hooks
            .to_cpu_many(&sources)
            .map_err(|e| step_error(op, "to_cpu", e))?;
        if cpus.len() != sources.len() {
            return Err(Error::Fallback(format!(
                "CPU fallback of '{}': to_cpu_many returned {} tensors for {}",
                op.name(),
                cpus.len(),
                sources.len()
            )));
        }
        for ((arg, slot, write), cpu) in places.into_iter().zip(cpus) {
            record_move(&mut moved, bytes, arg, slot, write, &cpu);
            place(&mut cpu_stack[arg], slot, cpu);
        }
    } else {
        let mut move_one = |arg: usize, slot: Option<usize>, t: &Tensor, write: bool| {
            let cpu = hooks
                .to_cpu(t, write)
                .map_err(|e| step_error(op, "to_cpu", e))?;
            record_move(&mut moved, bytes, arg, slot, write, &cpu);
            Ok::<Tensor, Error>(cpu)
        };
        let mut move_arg =
            |i: usize, v: &IValue, arg: &crate::schema::ArgFacts| -> Result<IValue> {
                let holds = arg.kind.holds_tensors();
                Ok(match v {
                    IValue::Tensor(t) if t.key() == key && holds => {
                        IValue::Tensor(move_one(i, None, t, arg.is_write)?)
                    }
                    IValue::TensorList(ts) if holds => IValue::TensorList(
                        ts.iter()
                            .enumerate()
                            .map(|(j, t)| match t.key() == key {
                                true => move_one(i, Some(j), t, arg.is_write),
                                false => Ok(t.clone()),
                            })
                            .collect::<Result<_>>()?,
                    ),
                    IValue::OptionalTensorList(ts) if holds => IValue::OptionalTensorList(
                        ts.iter()
                            .enumerate()
                            .map(|(j, t)| match t {
                                Some(t) if t.key() == key => {
                                    move_one(i, Some(j), t, arg.is_write).map(Some)
                                }
                                other => Ok(other.clone()),
                            })
                            .collect::<Result<_>>()?,
                    ),
                    other => other.clone(),
                })
            };
        // One `extend` over an iterator of known length: each value is written straight into
        // the buffer (a push per value builds it aside first and copies it, a store-forwarding
        // stall of a few ns per argument).
        let mut failed = None;
        cpu_stack.extend(
            original
                .iter()
                .zip(info.args.iter())
                .enumerate()
                .map(|(i, (v, arg))| match failed {
                    Some(_) => IValue::None,
                    None => move_arg(i, v, arg).unwrap_or_else(|e| {
                        failed = Some(e);
                        IValue::None
                    }),
                }),
        );
        if let Some(e) = failed {
            return Err(e);
        }
    }
    if let Some(d) = info.device_arg {
        if let Some(IValue::Device(dev)) = cpu_stack.get(d) {
            if dev.key == key {
                cpu_stack[d] = IValue::Device(Device::CPU);
            }
        }
    }
    Ok(moved)
}

/// A CPU kernel's own error, with the operator and the fallback named (a foreign error carries
/// its own note; a missing CPU kernel keeps its NoKernel form).
fn kernel_error(op: &OperatorHandle, key: DispatchKey, e: Error) -> Error {
    match e {
        Error::Kernel { context, message } => Error::Kernel {
            context: format!(
                "{context} (the CPU kernel of '{}', reached through the CPU fallback for '{key}')",
                op.name()
            ),
            message,
        },
        Error::Foreign { .. } | Error::NoKernel { .. } => e,
        other => step_error(op, "the CPU kernel", other),
    }
}

/// Calls `f(arg, slot, tensor, is_write)` for every tensor of `key` among the arguments, list
/// elements included.
fn each_moved<'s>(
    info: &crate::schema::SchemaInfo,
    key: DispatchKey,
    stack: &'s Stack,
    mut f: impl FnMut(usize, Option<usize>, &'s Tensor, bool),
) {
    for &i in &info.tensor_args {
        let write = info.args.get(i).is_some_and(|a| a.is_write);
        match stack.get(i) {
            Some(IValue::Tensor(t)) if t.key() == key => f(i, None, t, write),
            Some(IValue::TensorList(ts)) => {
                for (j, t) in ts.iter().enumerate().filter(|(_, t)| t.key() == key) {
                    f(i, Some(j), t, write);
                }
            }
            Some(IValue::OptionalTensorList(ts)) => {
                for (j, t) in ts.iter().enumerate() {
                    if let Some(t) = t.as_ref().filter(|t| t.key() == key) {
                        f(i, Some(j), t, write);
                    }
                }
            }
            _ => {}
        }
    }
}

fn element(v: &IValue, slot: Option<usize>) -> Option<&Tensor> {
    match (v, slot) {
        (IValue::Tensor(t), None) => Some(t),
        (IValue::TensorList(ts), Some(j)) => ts.get(j),
        (IValue::OptionalTensorList(ts), Some(j)) => ts.get(j).and_then(|t| t.as_ref()),
        _ => None,
    }
}

fn place(v: &mut IValue, slot: Option<usize>, t: Tensor) {
    match (v, slot) {
        (v, None) => *v = IValue::Tensor(t),
        (IValue::TensorList(ts), Some(j)) => {
            if let Some(x) = ts.get_mut(j) {
                *x = t;
            }
        }
        (IValue::OptionalTensorList(ts), Some(j)) => {
            if let Some(x) = ts.get_mut(j) {
                *x = Some(t);
            }
        }
        _ => {}
    }
}

fn to_device(
    v: IValue,
    hooks: &dyn crate::backend::Backend,
    target: Device,
    bytes: &mut (u64, u64),
) -> Result<IValue> {
    let mut move_one = |t: Tensor| -> Result<Tensor> {
        if t.key() != DispatchKey::CPU {
            return Ok(t);
        }
        bytes.1 += t.nbytes() as u64;
        hooks.from_cpu_owned(t, target)
    };
    Ok(match v {
        IValue::Tensor(t) => IValue::Tensor(move_one(t)?),
        IValue::TensorList(ts) => {
            IValue::TensorList(ts.into_iter().map(&mut move_one).collect::<Result<_>>()?)
        }
        IValue::OptionalTensorList(ts) => IValue::OptionalTensorList(
            ts.into_iter()
                .map(|t| t.map(&mut move_one).transpose())
                .collect::<Result<_>>()?,
        ),
        IValue::Tuple(vs) => IValue::Tuple(
            vs.into_iter()
                .map(|x| to_device(x, hooks, target, bytes))
                .collect::<Result<_>>()?,
        ),
        other => other,
    })
}

/// The device the results go to: the first tensor of the fallback's backend (lists included),
/// else a `Device` argument naming the backend, else index 0. Two different non-CPU devices
/// are an error naming both.
fn target_device(
    op: &OperatorHandle,
    info: &crate::schema::SchemaInfo,
    key: DispatchKey,
    stack: &Stack,
) -> Result<Device> {
    let mut first: Option<Device> = None;
    let mut check = |t: &Tensor| -> Result<()> {
        let d = t.device();
        match first {
            _ if d.key == DispatchKey::CPU => {}
            None => first = Some(d),
            Some(f) if f == d => {}
            Some(f) => {
                return Err(Error::Fallback(format!(
                    "'{}' got tensors on two devices, {f} and {d}; move them to one device first",
                    op.name()
                )))
            }
        }
        Ok(())
    };
    for &i in &info.tensor_args {
        match stack.get(i) {
            Some(IValue::Tensor(t)) => check(t)?,
            Some(IValue::TensorList(ts)) => ts.iter().try_for_each(&mut check)?,
            Some(IValue::OptionalTensorList(ts)) => ts.iter().flatten().try_for_each(&mut check)?,
            _ => {}
        }
    }
    let target = match first {
        Some(d) if d.key != key => {
            return Err(Error::Fallback(format!(
                "'{}' fell back for '{key}' but got tensors on {d}; move them to one device first",
                op.name()
            )))
        }
        other => other,
    };
    if let Some(t) = target {
        return Ok(t);
    }
    if let Some(IValue::Device(d)) = info.device_arg.and_then(|i| stack.get(i)) {
        if d.key == key {
            return Ok(*d);
        }
    }
    Ok(Device::new(key, 0))
}

fn log_call(
    op: &OperatorHandle,
    key: DispatchKey,
    info: &crate::schema::SchemaInfo,
    stack: &Stack,
) {
    let args: Vec<String> = info
        .tensor_args
        .iter()
        .filter_map(|&i| stack.get(i))
        .flat_map(|v| v.tensors())
        .map(|t| format!("{} {}", t.device(), t.describe()))
        .collect();
    log::debug!(
        target: "boxfall",
        "cpu_fallback: {} on {key}: tensors [{}]",
        op.name(),
        args.join(", ")
    );
}
