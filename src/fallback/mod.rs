//! The boxed CPU fallback: one kernel, written once, that runs any operator on any backend by
//! moving the backend's tensors to the CPU, running the CPU kernel, writing mutated arguments
//! back and moving the results to the device; and `call_fallback`. The policy is in `policy`.
//!
//! Failure atomicity: the CPU kernel works on CPU copies (or read-only loans) of the arguments,
//! written CPU arguments included, every result is moved to the device and checked against its
//! argument before any argument is written, nothing is written unless the kernel succeeded, and
//! a write-back that fails part way is undone (`write_back`).

use crate::backend::{registered, Backend, Registered};
use crate::clock;
use crate::dispatcher::{DispatchTable, OperatorHandle};
use crate::error::{Error, Result};
use crate::ivalue::{IValue, Stack};
use crate::kernel::KernelFunction;
use crate::key::{DispatchKey, DispatchKeySet};
use crate::resident;
use crate::schema::SchemaInfo;
use crate::tensor::{Device, Tensor};

mod policy;
mod steps;
mod target;
mod typed;
mod write_back;

use policy::{check_policy, warn};
pub use policy::{
    fallback_policy, set_fallback_policy, set_operator_policy, set_warning_handler, FallbackPolicy,
    WarningHandler, WarningKind,
};
pub use policy::{fallback_policy_from_env, operator_policy};
use steps::{count_refusal, kernel_error, record, step_error, StepMarks};
use target::TargetDevice;
#[cfg(feature = "python")]
pub(crate) use typed::run_with_maps;
#[cfg(feature = "python")]
pub(crate) use typed::Moves;
use typed::TypedCpuFallback;
#[cfg(feature = "python")]
pub(crate) use write_back::check_write;

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
/// assert_eq!(CpuFallback::of(&k), Some(&CpuFallback { views: ViewPolicy::Copy }));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuFallback {
    /// What to do with view operators.
    pub views: ViewPolicy,
}

impl CpuFallback {
    /// The boxed kernel. It is a kernel as any other, with two properties any kernel may
    /// have: dispatched, it reads the call's table (the schema, the CPU kernel) rather than
    /// loading it again; and it has a typed wrapper, which runs a typed call of a functional
    /// operator whose CPU kernel has the call's signature without boxing (`typed`).
    ///
    /// ```
    /// use boxfall::CpuFallback;
    /// let k = CpuFallback::default().kernel();
    /// assert!(CpuFallback::of(&k).is_some() && k.reads_table() && k.typed_wrapper().is_some());
    /// assert!(!k.has_unboxed()); // no typed function: it serves every signature
    /// ```
    pub fn kernel(&self) -> KernelFunction {
        let mode = FallbackMode::new(self);
        // Called directly (or by a kernel that reads the table), it finds the CPU kernel in the
        // table; routed, the dispatcher hands it the one its entry records.
        let k = KernelFunction::from_boxed_in_table(move |op, table, keys, stack| {
            run_cpu_fallback_on(mode, op, table, cpu_kernel(table), keys, stack)
        });
        let boxed = k.in_table().clone();
        k.with_typed_wrapper(TypedCpuFallback { boxed })
            .marked_cpu_fallback(std::sync::Arc::new(move |cpu: Option<KernelFunction>| {
                std::sync::Arc::new(move |op: &_, table: &_, keys, stack: &mut _| {
                    run_cpu_fallback_on(mode, op, table, cpu.as_ref(), keys, stack)
                })
            }))
            .with_tag(self.clone())
    }

    /// The configuration of a CPU fallback kernel; `None` for any other kernel.
    ///
    /// ```
    /// use boxfall::{CpuFallback, KernelFunction};
    /// assert_eq!(CpuFallback::of(&boxfall::cpu_fallback()), Some(&CpuFallback::default()));
    /// assert!(CpuFallback::of(&KernelFunction::fallthrough()).is_none());
    /// ```
    pub fn of(kernel: &KernelFunction) -> Option<&CpuFallback> {
        kernel.tag::<CpuFallback>()
    }

    /// Runs the CPU fallback on a boxed call, as its kernel would: the pattern of a backend's
    /// own boxed fallback that logs or counts, then hands the call to the CPU (torch_xla's
    /// `xla_cpu_fallback` calling `at::native::cpu_fallback`). The policy, the counters and
    /// the failure atomicity are those of the registered fallback: the call counts for `op`,
    /// and a kernel that fails leaves every argument as it was. `keys` is the call's key set,
    /// as the calling kernel received it; its highest key names the backend.
    ///
    /// ```
    /// use boxfall::{*, fallback::ViewPolicy};
    /// # use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    /// # let mut lib = Library::new("doc_cpu_fallback_call", LibraryKind::Def).unwrap();
    /// # let op = lib.define("neg(Tensor x) -> Tensor").unwrap();
    /// # lib.impl_kernel("neg", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| {
    /// #     Ok(Tensor::from_array(-x.to_host()?.as_f64().cloned().unwrap_or_default()))
    /// # }), false).unwrap();
    /// static SEEN: AtomicUsize = AtomicUsize::new(0);
    /// let cpu = CpuFallback { views: ViewPolicy::Refuse };
    /// // A backend's own fallback: count, then the CPU fallback.
    /// let own = KernelFunction::from_boxed(move |op, keys, stack| {
    ///     SEEN.fetch_add(1, SeqCst);
    ///     cpu.call(op, keys, stack)
    /// });
    /// let x = native::tensor(ndarray::arr1(&[1.0, -2.0]).into_dyn());
    /// let mut stack = vec![IValue::Tensor(x)];
    /// own.call_boxed(&op, DispatchKey::NATIVE.set(), &mut stack).unwrap();
    /// assert_eq!(SEEN.load(SeqCst), 1);
    /// let y = stack[0].as_tensor().unwrap();
    /// assert_eq!(y.device(), native::DEVICE);
    /// assert_eq!(y.to_host().unwrap().as_f64().unwrap().as_slice().unwrap(), &[-1.0, 2.0]);
    /// assert_eq!(Dispatcher::counter_value(op.name()), 1); // counted as the registered fallback is
    /// ```
    pub fn call(&self, op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
        let mode = FallbackMode::new(self);
        op.with_table(keys, |table| {
            run_cpu_fallback_on(mode, op, table, cpu_kernel(table), keys, stack)
        })
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

/// Runs a boxed fallback from a kernel of a backend's own that hands one case to the fallback
/// (c10's `call_fallback_fn`, boxed; typed handles have the typed form,
/// [`TypedOperatorHandle::call_fallback`](crate::dispatcher::TypedOperatorHandle::call_fallback)).
/// A CPU fallback run so obeys the fallback policy as a registered one does.
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

/// A moved tensor the kernel writes: the CPU copy, and where its device tensor sits among the
/// arguments (`slot` is the list index).
struct Written {
    arg: usize,
    slot: Option<usize>,
    cpu: Tensor,
    /// The values before the kernel ran, where they could be kept without asking the
    /// backend (`write_back::early_backup`).
    backup: Option<Tensor>,
    /// For a Native tensor, its data's version when it was read (`Tensor::data_version`):
    /// the write-back happens only if no other write came between (`write_back::Stale`).
    version: Option<u64>,
}

/// One fallback call: what each step needs, and what it has moved so far.
struct FallbackCall<'a> {
    op: &'a OperatorHandle,
    info: &'a SchemaInfo,
    key: DispatchKey,
    hooks: &'a dyn Backend,
    /// The backend moves a call's tensors in one `to_cpu_many`.
    batches: bool,
    /// The operator's table as the call loaded it: the schema is borrowed from it.
    table: &'a DispatchTable,
    /// The kernel that serves the CPU key (None: none does, and step 2 is a `NoKernel` error).
    cpu: Option<&'a KernelFunction>,
    bytes_to_cpu: u64,
    bytes_from_cpu: u64,
    /// When steps 1 and 2 ended (clock ticks; `u64::MAX` until then).
    marks: StepMarks,
}

/// How a round of writing arguments back ended.
enum WriteBack {
    /// Every argument was written.
    Done,
    /// A Native argument was written by another thread meanwhile: nothing was written.
    Stale,
}

/// How many rounds a call that writes a Native tensor makes while other threads keep writing
/// it before giving up (each round, some thread's write went through).
const STALE_ROUNDS: usize = 10_000;

/// Where step 1 keeps the moved tensors the kernel writes: a list for an operator that writes
/// some argument; nothing at all for a functional one, whose fallback then carries no list.
trait WriteLog {
    /// Whether the operator writes some argument.
    const WRITES: bool;
    fn keep(&mut self, w: Written);
}

impl WriteLog for Vec<Written> {
    const WRITES: bool = true;
    fn keep(&mut self, w: Written) {
        self.push(w);
    }
}

impl WriteLog for () {
    const WRITES: bool = false;
    #[inline(always)]
    fn keep(&mut self, _: Written) {}
}

/// How one CPU fallback kernel runs: its view policy. The fallback policy applies to every
/// one, however it is reached (README, "A backend's own fallback"). One byte, so that with the
/// call's other arguments it is passed in registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FallbackMode(u8);

impl FallbackMode {
    const COPY_VIEWS: u8 = 2;

    pub(crate) fn new(cfg: &CpuFallback) -> FallbackMode {
        FallbackMode(match cfg.views {
            ViewPolicy::Refuse => 0,
            ViewPolicy::Copy => FallbackMode::COPY_VIEWS,
        })
    }

    fn views(self) -> ViewPolicy {
        if self.0 & FallbackMode::COPY_VIEWS != 0 {
            ViewPolicy::Copy
        } else {
            ViewPolicy::Refuse
        }
    }
}

/// The kernel that serves the CPU key in `table`: what the CPU fallback runs when it is called
/// directly, as `compute_table` recorded it for a routed call.
#[inline(always)]
fn cpu_kernel(table: &DispatchTable) -> Option<&KernelFunction> {
    table.kernel(DispatchKey::CPU.set())
}

/// The CPU fallback on the table the caller loaded (the dispatcher's, in a dispatched call),
/// whose schema is read from it without a second load, running `cpu`, the kernel that serves
/// the CPU key: the one a routed call's entry records, or `cpu_kernel` of the table for a call
/// made directly. Every boxed CPU fallback call runs here.
#[inline(never)]
pub(crate) fn run_cpu_fallback_on(
    mode: FallbackMode,
    op: &OperatorHandle,
    table: &DispatchTable,
    cpu: Option<&KernelFunction>,
    keys: DispatchKeySet,
    stack: &mut Stack,
) -> Result<()> {
    let key = keys.highest().unwrap_or(DispatchKey::CPU);
    let info = &table.schema(op)?.info;
    check_policy(op, key)?;
    if info.has_view_returns {
        view_operator(mode.views(), op, key)?;
    }
    let backend = registered(key).ok_or_else(|| not_a_backend(op, key))?;
    let start = clock::ticks();
    // A functional operator whose CPU kernel is typed runs the typed fallback from the stack.
    if let Some(entry) = typed_stack_entry(info, backend, cpu, stack) {
        return entry(op, key, backend.hooks, start, stack);
    }
    let mut call = FallbackCall {
        op,
        info,
        key,
        hooks: backend.hooks,
        batches: backend.batches,
        table,
        cpu,
        bytes_to_cpu: 0,
        bytes_from_cpu: 0,
        marks: StepMarks::default(),
    };
    // The error case apart, so that a call that went well returns without copying a `Result`.
    match call.run(stack) {
        Ok(()) => {
            call.record(start, true);
            Ok(())
        }
        Err(e) => {
            call.record(start, false);
            op.metrics().record_failure(key, &e);
            Err(e)
        }
    }
}

/// The CPU kernel's stack entry, where the typed fallback can serve this boxed call through it
/// (`typed::stack_entry`): what `typed::serves` asks, a stack that fits the schema (a call that
/// does not goes the boxed way, which says so), and a CPU kernel that the operator's
/// fallthroughs let through and that was made from a typed function.
#[inline(always)]
fn typed_stack_entry<'t>(
    info: &SchemaInfo,
    backend: &Registered,
    cpu: Option<&'t KernelFunction>,
    stack: &Stack,
) -> Option<&'t crate::kernel::StackEntry> {
    if !typed::serves(info, backend) || stack.len() != info.args.len() {
        return None;
    }
    cpu?.fallback_entry()
}

/// A view operator: refused, or copied with a warning (which the user may make an error); a
/// refusal counts as a fallback that failed, as the policy's do.
#[cold]
fn view_operator(views: ViewPolicy, op: &OperatorHandle, key: DispatchKey) -> Result<()> {
    let verdict = view_verdict(views, op, key);
    if let Err(e) = &verdict {
        count_refusal(op, key, e);
    }
    verdict
}

fn view_verdict(views: ViewPolicy, op: &OperatorHandle, key: DispatchKey) -> Result<()> {
    match views {
        ViewPolicy::Refuse => Err(Error::Fallback(format!(
            "'{}' is a view operator: its result aliases its input, and the CPU fallback cannot share storage between '{key}' and the CPU; implement it for '{key}', or use CpuFallback(views=\"copy\") to get copies",
            op.name()
        ))),
        ViewPolicy::Copy => warn(
            WarningKind::ViewCopy,
            &format!(
                "'{}' is a view operator; the CPU fallback for '{key}' returns a copy, which does not share storage with its input",
                op.name()
            ),
        ),
    }
}

#[cold]
fn not_a_backend(op: &OperatorHandle, key: DispatchKey) -> Error {
    let e = Error::Fallback(format!(
        "cannot run '{}' through the CPU fallback: '{key}' is not a backend with transfer hooks (register it with register_backend)",
        op.name()
    ));
    count_refusal(op, key, &e);
    e
}

impl FallbackCall<'_> {
    /// Counts the call in the operator's counters.
    #[inline(always)]
    fn record(&self, start: u64, ok: bool) {
        record(
            self.op,
            self.key,
            start,
            self.marks,
            [self.bytes_to_cpu, self.bytes_from_cpu],
            ok,
        );
    }

    /// Moves the tensors (1), runs the CPU kernel (2), moves the results (3), writes back (4).
    ///
    /// The CPU tensors take the device tensors' places in the caller's stack, so a call builds
    /// no second stack and clones no argument; the arguments the kernel writes are kept aside
    /// first, for the write-back and for the returns that alias them. After an error the
    /// stack's contents are unspecified, as after any boxed call that fails, but no tensor
    /// of the backend has changed: the kernel sees them only as loans and copies, and nothing
    /// is written back unless every step before succeeded.
    fn run(&mut self, stack: &mut Stack) -> Result<()> {
        let info = self.info;
        if stack.len() != info.args.len() {
            return Err(Error::Fallback(format!(
                "CPU fallback of '{}': the stack holds {} values for {} arguments",
                self.op.name(),
                stack.len(),
                info.args.len()
            )));
        }
        if log::log_enabled!(target: "boxfall", log::Level::Debug) {
            log_call(self.op, self.key, info, stack);
        }
        if info.is_mutable {
            let hooks = self.hooks;
            return hooks.exclusive(&mut || self.run_with_writes(stack));
        }
        // A functional operator: nothing to keep aside or write back.
        let target = self.move_to_cpu(stack, &mut ())?;
        self.marks.moved = clock::ticks();
        self.run_cpu_kernel(stack)?;
        self.marks.ran = clock::ticks();
        for v in stack.iter_mut() {
            self.return_to_device(v, target)?;
        }
        Ok(())
    }

    /// `run` for an operator that writes some argument. A Native tensor written by another
    /// thread while this call ran (between its read and its write-back) is read again and the
    /// call redone, as the write of an in-place NumPy ufunc on host memory would not have been
    /// lost either; the other arguments are as they were before each round.
    #[inline(never)]
    fn run_with_writes(&mut self, stack: &mut Stack) -> Result<()> {
        let writes_native = self
            .info
            .args
            .iter()
            .zip(stack.iter())
            .any(|(a, v)| a.is_write && v.tensors().any(|t| t.key() == DispatchKey::NATIVE));
        if !writes_native {
            return self.run_with_writes_once(stack).map(|_| ());
        }
        let given = stack.clone();
        for _ in 0..STALE_ROUNDS {
            if let WriteBack::Done = self.run_with_writes_once(stack)? {
                return Ok(());
            }
            stack.clone_from(&given);
        }
        Err(Error::Fallback(format!(
            "CPU fallback of '{}' for '{}': another thread wrote its output in each of {STALE_ROUNDS} rounds; nothing was written",
            self.op.name(),
            self.key
        )))
    }

    /// One round of `run_with_writes`.
    fn run_with_writes_once(&mut self, stack: &mut Stack) -> Result<WriteBack> {
        let info = self.info;
        // The written arguments as the caller passed them.
        let kept: Vec<(usize, IValue)> = info
            .args
            .iter()
            .zip(stack.iter())
            .enumerate()
            .filter(|(_, (a, _))| a.is_write)
            .map(|(i, (_, v))| (i, v.clone()))
            .collect();
        // The moved tensors the kernel writes, and the copies of written CPU tensors.
        let mut written: Vec<Written> = Vec::new();
        let target = self.move_to_cpu(stack, &mut written)?;
        copy_cpu_writes(&kept, stack, &mut written)?;
        self.marks.moved = clock::ticks();
        self.run_cpu_kernel(stack)?;
        self.marks.ran = clock::ticks();

        // 3. Move every result to the device before writing any argument. A return that
        // aliases a written argument is that argument, as the caller passed it.
        let mut replaced: Vec<(usize, IValue)> = Vec::new();
        for (r, v) in info.returns.iter().zip(stack.iter_mut()) {
            match r
                .aliases_arg
                .and_then(|i| kept.iter().find(|(k, _)| *k == i))
            {
                Some((i, arg)) => replaced.push((*i, std::mem::replace(v, arg.clone()))),
                None => self.return_to_device(v, target)?,
            }
        }

        // 4. Write the mutated arguments back (from the returned value where the kernel gave
        // a new one for an aliased return), all or none.
        let writes: Vec<write_back::Write<'_>> = written
            .iter()
            .filter_map(|w| {
                let src = replaced
                    .iter()
                    .find(|(i, _)| *i == w.arg)
                    .and_then(|(_, v)| element(v, w.slot))
                    .unwrap_or(&w.cpu);
                let dst = kept
                    .iter()
                    .find(|(i, _)| *i == w.arg)
                    .and_then(|(_, v)| element(v, w.slot))?;
                // A CPU tensor the kernel wrote as it is (it could not be copied).
                (!dst.same(src)).then_some(write_back::Write {
                    arg: w.arg,
                    dst,
                    src,
                    backup: w.backup.as_ref(),
                    version: w.version,
                })
            })
            .collect();
        let args = &self.table.schema(self.op)?.schema.arguments;
        match write_back::write_all(self.op, self.key, self.hooks, args, &writes)? {
            Ok(bytes) => {
                self.bytes_from_cpu += bytes;
                Ok(WriteBack::Done)
            }
            Err(write_back::Stale) => Ok(WriteBack::Stale),
        }
    }

    /// Step 1: moves the backend's tensors to the CPU, each into its device tensor's place in
    /// the stack: one by one, or all at once where the backend batches. Finds the device the
    /// results go to on the way (two devices are an error before any tensor is written), and
    /// a `Device` argument naming the backend becomes the CPU. `log` keeps the tensors the
    /// kernel writes (for a functional operator it is `()`, and the bookkeeping compiles away).
    #[inline(always)]
    fn move_to_cpu<W: WriteLog>(&mut self, stack: &mut Stack, log: &mut W) -> Result<Device> {
        let (op, info, key) = (self.op, self.info, self.key);
        let mut target = TargetDevice::default();
        if self.batches {
            target = self.move_batched(target, stack, log)?;
        } else {
            for &i in &info.tensor_args {
                let write = W::WRITES && info.args.get(i).is_some_and(|a| a.is_write);
                match stack.get_mut(i) {
                    Some(IValue::Tensor(t)) => {
                        target.see(op, t)?;
                        if t.key() == key {
                            self.move_one(i, None, write, t, log)?;
                        }
                    }
                    Some(IValue::TensorList(ts)) => {
                        for (j, t) in ts.iter_mut().enumerate() {
                            target.see(op, t)?;
                            if t.key() == key {
                                self.move_one(i, Some(j), write, t, log)?;
                            }
                        }
                    }
                    Some(IValue::OptionalTensorList(ts)) => {
                        for (j, t) in ts.iter_mut().enumerate() {
                            if let Some(t) = t {
                                target.see(op, t)?;
                                if t.key() == key {
                                    self.move_one(i, Some(j), write, t, log)?;
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        match info.device_arg {
            None => target.finish(op, key, None),
            Some(d) => device_argument(op, key, target, stack.get_mut(d)),
        }
    }

    /// Step 1 for one tensor: its CPU loan or copy takes its place.
    #[inline(always)]
    fn move_one(
        &mut self,
        arg: usize,
        slot: Option<usize>,
        write: bool,
        t: &mut Tensor,
        log: &mut impl WriteLog,
    ) -> Result<()> {
        // Read before the data, so that a write after it is seen at the write-back.
        let version = (write && t.key() == DispatchKey::NATIVE).then(|| t.data_version());
        if !t.is_host() {
            return self.move_resident(arg, slot, write, t, log);
        }
        let cpu = if write {
            self.hooks.to_cpu(t, true)
        } else {
            self.hooks.to_cpu_read_only(t)
        }
        .map_err(|e| step_error(self.op, self.key, "to_cpu", e))?;
        self.moved(arg, slot, write, &cpu, log, version);
        *t = cpu;
        Ok(())
    }

    /// Step 1 for a tensor that holds no host memory: its host copy where current (no bytes
    /// cross), else the backend's `to_cpu` (`resident::read`, `resident::read_for_write`).
    #[inline(never)]
    fn move_resident(
        &mut self,
        arg: usize,
        slot: Option<usize>,
        write: bool,
        t: &mut Tensor,
        log: &mut impl WriteLog,
    ) -> Result<()> {
        let (cpu, crossed) = if write {
            resident::read_for_write(self.hooks, t)
        } else {
            resident::read(self.hooks, t)
        }
        .map_err(|e| step_error(self.op, self.key, "to_cpu", e))?;
        let before = self.bytes_to_cpu;
        self.moved(arg, slot, write, &cpu, log, None);
        if !crossed {
            self.bytes_to_cpu = before;
        }
        *t = cpu;
        Ok(())
    }

    /// Counts a moved tensor's bytes, and keeps a handle on its CPU copy if the kernel writes
    /// it (for the write-back).
    #[inline(always)]
    fn moved(
        &mut self,
        arg: usize,
        slot: Option<usize>,
        write: bool,
        cpu: &Tensor,
        log: &mut impl WriteLog,
        version: Option<u64>,
    ) {
        self.bytes_to_cpu += cpu.nbytes() as u64;
        if write {
            log.keep(Written {
                arg,
                slot,
                cpu: cpu.clone(),
                backup: write_back::early_backup(cpu),
                version,
            });
        }
    }

    /// Step 1 on a backend that batches: every tensor in one `to_cpu_many`, after all of them
    /// were seen to be on one device.
    fn move_batched(
        &mut self,
        mut target: TargetDevice,
        stack: &mut Stack,
        log: &mut impl WriteLog,
    ) -> Result<TargetDevice> {
        let (op, key) = (self.op, self.key);
        let mut sources: Vec<(&Tensor, bool)> = Vec::new();
        let mut places: Vec<(usize, Option<usize>, bool)> = Vec::new();
        // Tensors whose values are on the host already (residency) are not in the batch.
        let mut resident: Vec<(usize, Option<usize>, bool, Tensor)> = Vec::new();
        let mut versions: Vec<u64> = Vec::new();
        try_each_tensor(self.info, stack, |arg, slot, t, write| {
            target.see(op, t)?;
            if t.key() == key {
                if !t.is_host() && t.host_copy().is_some() {
                    resident.push((arg, slot, write, t.clone()));
                    return Ok(());
                }
                sources.push((t, write));
                places.push((arg, slot, write));
                versions.push(t.data_version());
            }
            Ok(())
        })?;
        let cpus = if sources.is_empty() {
            Vec::new()
        } else {
            self.hooks
                .to_cpu_many(&sources)
                .map_err(|e| step_error(self.op, self.key, "to_cpu", e))?
        };
        if cpus.len() != sources.len() {
            return Err(Error::Fallback(format!(
                "CPU fallback of '{}': to_cpu_many returned {} tensors for {}",
                self.op.name(),
                cpus.len(),
                sources.len()
            )));
        }
        if self.hooks.lazy() {
            for (((t, write), v), cpu) in sources.iter().zip(&versions).zip(&cpus) {
                if !write {
                    t.keep_host_copy(*v, cpu.clone());
                }
            }
        }
        for ((arg, slot, write), cpu) in places.into_iter().zip(cpus) {
            self.moved(arg, slot, write, &cpu, log, None);
            if let Some(v) = stack.get_mut(arg) {
                place(v, slot, cpu);
            }
        }
        for (arg, slot, write, t) in resident {
            let mut t = t;
            self.move_resident(arg, slot, write, &mut t, log)?;
            if let Some(v) = stack.get_mut(arg) {
                place(v, slot, t);
            }
        }
        Ok(target)
    }

    /// Step 2: runs the CPU kernel on the CPU stack, which it leaves holding the returns.
    #[inline(always)]
    fn run_cpu_kernel(&self, stack: &mut Stack) -> Result<()> {
        let cpu = DispatchKey::CPU.set();
        match self.cpu {
            Some(k) => k.call_boxed_in(self.op, self.table, cpu, stack),
            // Nothing serves the CPU key: the table's call says so as any call would.
            None => self.table.call(self.op, cpu, stack),
        }
        .map_err(|e| kernel_error(self.op, self.key, e))?;
        if stack.len() != self.info.returns.len() {
            return Err(Error::Fallback(format!(
                "CPU kernel of '{}' left {} values for {} returns",
                self.op.name(),
                stack.len(),
                self.info.returns.len()
            )));
        }
        Ok(())
    }

    /// Step 3 for one return: its CPU tensors go to the device (a tensor the kernel gave on
    /// another device, or a CPU tensor the caller passed and got back, stays).
    #[inline(always)]
    fn return_to_device(&mut self, v: &mut IValue, target: Device) -> Result<()> {
        self.value_to_device(v, target)
            .map_err(|e| step_error(self.op, self.key, "from_cpu", e))
    }

    #[inline(always)]
    fn value_to_device(&mut self, v: &mut IValue, target: Device) -> Result<()> {
        // A tensor is tested for first: it is what almost every return is.
        if let IValue::Tensor(t) = v {
            // Taken out and put back, so that a backend keeping host memory can take the
            // tensor itself; a tensor on a device stays.
            if t.key() == DispatchKey::CPU {
                let bytes = t.nbytes() as u64;
                self.bytes_from_cpu += bytes;
                // Only the tensor's pointer is read, not the whole value: the CPU kernel has
                // just written this value with two stores, and a wide load across them (as
                // moving the value out makes) cannot be forwarded from them, which stalled
                // every fallback until they reached the cache.
                // SAFETY: `t` is valid (borrowed from `v`), and is not used after this read.
                // Its place is overwritten at once with `IValue::None`, without dropping the
                // old value, so the tensor read is from then on the only owner of its
                // reference: no drop is lost or doubled, even if `from_cpu_owned` panics (the
                // stack then holds None).
                let cpu = unsafe { std::ptr::read(t) };
                // SAFETY: `v` is valid for writes; see above for the value it held.
                unsafe { std::ptr::write(v, IValue::None) };
                let on_device = self
                    .hooks
                    .from_cpu_result(cpu, target, self.op.result_of())?;
                // A lazy backend's result stays on the host side: nothing crossed (yet).
                if on_device.is_host_only() {
                    self.bytes_from_cpu -= bytes;
                    on_device.note_made_by(self.op.origin());
                }
                // SAFETY: `v` holds the None written above, which owns nothing, so writing over
                // it without a drop leaks nothing.
                unsafe { std::ptr::write(v, IValue::Tensor(on_device)) };
            }
            return Ok(());
        }
        match v {
            IValue::TensorList(_) | IValue::OptionalTensorList(_) | IValue::Tuple(_) => {
                self.lists_to_device(v, target)
            }
            _ => Ok(()),
        }
    }

    fn lists_to_device(&mut self, v: &mut IValue, target: Device) -> Result<()> {
        if let IValue::Tuple(vs) = v {
            return vs
                .iter_mut()
                .try_for_each(|x| self.value_to_device(x, target));
        }
        let (hooks, op) = (self.hooks, self.op);
        let bytes = &mut self.bytes_from_cpu;
        let mut move_one = |t: Tensor| -> Result<Tensor> {
            if t.key() != DispatchKey::CPU {
                return Ok(t);
            }
            let n = t.nbytes() as u64;
            *bytes += n;
            let on_device = hooks.from_cpu_result(t, target, op.result_of())?;
            if on_device.is_host_only() {
                *bytes -= n;
                on_device.note_made_by(op.origin());
            }
            Ok(on_device)
        };
        match v {
            IValue::TensorList(ts) => {
                *ts = std::mem::take(ts)
                    .into_iter()
                    .map(&mut move_one)
                    .collect::<Result<_>>()?;
            }
            IValue::OptionalTensorList(ts) => {
                *ts = std::mem::take(ts)
                    .into_iter()
                    .map(|t| t.map(&mut move_one).transpose())
                    .collect::<Result<_>>()?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The end of step 1 for an operator with a `Device` argument: the argument decides the
/// results' device when no tensor did, and one naming the backend becomes the CPU.
#[inline(never)]
fn device_argument(
    op: &OperatorHandle,
    key: DispatchKey,
    target: TargetDevice,
    arg: Option<&mut IValue>,
) -> Result<Device> {
    let target = target.finish(op, key, arg.as_deref())?;
    if let Some(IValue::Device(dev)) = arg {
        if dev.key == key {
            *dev = Device::CPU;
        }
    }
    Ok(target)
}

/// Gives the kernel a copy of each written CPU tensor (one the caller passed on the CPU, not
/// moved from the device), so that a kernel that fails leaves it as it was: the copy is
/// written into it with the device tensors, once the kernel has succeeded. Host memory is
/// shared rather than copied (a kernel replaces it, never writes it); a CPU payload that
/// cannot be copied is given as it is.
fn copy_cpu_writes(
    kept: &[(usize, IValue)],
    stack: &mut Stack,
    written: &mut Vec<Written>,
) -> Result<()> {
    for (arg, v) in kept {
        let slots: Vec<(Option<usize>, &Tensor)> = match v {
            IValue::Tensor(t) => vec![(None, t)],
            IValue::TensorList(ts) => ts.iter().enumerate().map(|(j, t)| (Some(j), t)).collect(),
            IValue::OptionalTensorList(ts) => ts
                .iter()
                .enumerate()
                .filter_map(|(j, t)| t.as_ref().map(|t| (Some(j), t)))
                .collect(),
            _ => continue,
        };
        for (slot, t) in slots {
            if t.key() != DispatchKey::CPU {
                continue;
            }
            let copy = if t.is_host() {
                Tensor::new(Device::CPU, t.data())
            } else {
                match t.payload().and_then(|p| p.duplicate()) {
                    Some(p) => Tensor::foreign(Device::CPU, p?),
                    None => t.clone(),
                }
            };
            if let Some(v) = stack.get_mut(*arg) {
                place(v, slot, copy.clone());
            }
            written.push(Written {
                arg: *arg,
                slot,
                cpu: copy,
                // The kernel does not write `t`: it is backed up when it is written.
                backup: None,
                version: None,
            });
        }
    }
    Ok(())
}

/// Calls `f(arg, slot, tensor, is_write)` for every tensor among the arguments, list elements
/// included, and stops at its first error.
fn try_each_tensor<'s>(
    info: &SchemaInfo,
    stack: &'s Stack,
    mut f: impl FnMut(usize, Option<usize>, &'s Tensor, bool) -> Result<()>,
) -> Result<()> {
    for &i in &info.tensor_args {
        let write = info.args.get(i).is_some_and(|a| a.is_write);
        match stack.get(i) {
            Some(IValue::Tensor(t)) => f(i, None, t, write)?,
            Some(IValue::TensorList(ts)) => {
                for (j, t) in ts.iter().enumerate() {
                    f(i, Some(j), t, write)?;
                }
            }
            Some(IValue::OptionalTensorList(ts)) => {
                for (j, t) in ts.iter().enumerate() {
                    if let Some(t) = t {
                        f(i, Some(j), t, write)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
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
