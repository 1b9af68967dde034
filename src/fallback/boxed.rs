//! The boxed walk: the CPU fallback of a call on a stack, driven by the operator's schema,
//! with the write-back of mutated arguments and its rollback.

use crate::backend::{registered, Backend, Registered};
use crate::clock;
use crate::dispatcher::{DispatchTable, OperatorHandle};
use crate::error::{Error, Result};
use crate::ivalue::{IValue, Stack};
use crate::kernel::KernelFunction;
use crate::key::{DispatchKey, DispatchKeySet};
use crate::schema::SchemaInfo;
use crate::tensor::{Device, Tensor};

use super::mode::{FallbackMode, ViewPolicy};
use super::policy::WarningKind;
use super::policy::{check_policy, warn};
use super::slots::{element, place};
use super::steps::{count_refusal, kernel_error, record, StepMarks};
use super::typed;
use super::write_back;

/// A moved tensor the kernel writes: the CPU copy, and where its device tensor sits among the
/// arguments (`slot` is the list index).
pub(super) struct Written {
    pub(super) arg: usize,
    pub(super) slot: Option<usize>,
    pub(super) cpu: Tensor,
    /// The values before the kernel ran, where they could be kept without asking the
    /// backend (`write_back::early_backup`).
    pub(super) backup: Option<Tensor>,
    /// For a Native tensor, its data's version when it was read (`Tensor::data_version`):
    /// the write-back happens only if no other write came between (`write_back::Stale`).
    pub(super) version: Option<u64>,
}

/// One fallback call: what each step needs, and what it has moved so far.
pub(super) struct FallbackCall<'a> {
    pub(super) op: &'a OperatorHandle,
    pub(super) info: &'a SchemaInfo,
    pub(super) key: DispatchKey,
    pub(super) hooks: &'a dyn Backend,
    /// The backend moves a call's tensors in one `to_cpu_many`.
    pub(super) batches: bool,
    /// The operator's table as the call loaded it: the schema is borrowed from it.
    pub(super) table: &'a DispatchTable,
    /// The kernel that serves the CPU key (None: none does, and step 2 is a `NoKernel` error).
    pub(super) cpu: Option<&'a KernelFunction>,
    pub(super) bytes_to_cpu: u64,
    pub(super) bytes_from_cpu: u64,
    /// When steps 1 and 2 ended (clock ticks; `u64::MAX` until then).
    pub(super) marks: StepMarks,
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
pub(super) trait WriteLog {
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
