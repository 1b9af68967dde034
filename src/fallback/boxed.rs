//! The boxed walk: the CPU fallback of a call on a stack, driven by the operator's schema. It
//! keeps aside the arguments an operator writes and redoes a call whose Native output another
//! thread wrote meanwhile; its moves, and the write-back with its rollback, are the step
//! engine's (`moves.rs`), which every form of the fallback shares.

use crate::backend::{registered, Registered};
use crate::clock;
use crate::dispatcher::{DispatchTable, OperatorHandle};
use crate::error::{Error, Result};
use crate::ivalue::{IValue, Stack};
use crate::kernel::{KernelFunction, StackEntry};
use crate::key::{DispatchKey, DispatchKeySet};
use crate::schema::SchemaInfo;
use crate::tensor::{hold_writes, Device, Tensor, WritesHeld};

use super::mode::{FallbackMode, ViewPolicy};
use super::moves::{Moves, WriteBack, Written};
use super::policy::WarningKind;
use super::policy::{check_policy, warn};
use super::slots::place;
use super::steps::{count_refusal, kernel_error};
use super::typed;

/// One boxed fallback call: what its walk needs besides its moves.
pub(super) struct FallbackCall<'a> {
    pub(super) info: &'a SchemaInfo,
    /// The backend moves a call's tensors in one `to_cpu_many`.
    pub(super) batches: bool,
    /// The operator's table as the call loaded it: the schema is borrowed from it.
    pub(super) table: &'a DispatchTable,
    /// The kernel that serves the CPU key (None: none does, and step 2 is a `NoKernel` error).
    pub(super) cpu: Option<&'a KernelFunction>,
    /// The call's steps: its tensors' moves, bytes and time marks.
    pub(super) moves: Moves<'a>,
}

/// How many rounds a call that writes a Native tensor makes while other threads keep writing
/// it before giving up (each round, some thread's write went through).
const STALE_ROUNDS: usize = 10_000;

/// The CPU kernel a boxed CPU fallback runs (None: none serves the CPU key), with its stack
/// entry (the typed fallback of a boxed call, for a kernel made from a typed function): bound
/// once, when a table entry is published, for a routed call; the one the table bound when it
/// was published, for a call made directly.
#[derive(Clone, Copy)]
pub(super) struct BoundCpu<'a> {
    pub(super) kernel: Option<&'a KernelFunction>,
    pub(super) entry: Option<&'a StackEntry>,
}

impl<'a> BoundCpu<'a> {
    /// `kernel`, with its stack entry.
    #[inline(always)]
    pub(super) fn of(kernel: Option<&'a KernelFunction>) -> BoundCpu<'a> {
        BoundCpu {
            kernel,
            entry: kernel.and_then(KernelFunction::fallback_entry),
        }
    }
}

/// The CPU fallback on the table the caller loaded (the dispatcher's, in a dispatched call),
/// whose schema is read from it without a second load, running `cpu`, the kernel that serves
/// the CPU key: the one a routed call's entry bound at publication, or `cpu_kernel` of the
/// table for a call made directly. Every boxed CPU fallback call runs here.
#[inline(never)]
pub(crate) fn run_cpu_fallback_on(
    mode: FallbackMode,
    op: &OperatorHandle,
    table: &DispatchTable,
    cpu: BoundCpu<'_>,
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
    if let Some(entry) = cpu.entry.filter(|_| typed_serves(info, backend, stack)) {
        return entry(op, key, backend.hooks, start, stack);
    }
    let mut call = FallbackCall {
        info,
        batches: backend.batches,
        table,
        cpu: cpu.kernel,
        moves: Moves::new(op, key, backend.hooks),
    };
    let result = call.run(stack);
    call.moves.counted(start, result)
}

/// Whether the typed fallback can serve this boxed call through the CPU kernel's stack entry
/// (`typed::stack_entry`): what `typed::serves` asks, and a stack that fits the schema (a call
/// that does not goes the boxed way, which says so).
#[inline(always)]
fn typed_serves(info: &SchemaInfo, backend: &Registered, stack: &Stack) -> bool {
    typed::serves(info, backend) && stack.len() == info.args.len()
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

/// The write locks of the device tensors the call writes (their bases'), held for the call:
/// a Native tensor is redone instead when another thread wrote it meanwhile (`run_with_writes`).
fn hold_written(info: &SchemaInfo, key: DispatchKey, stack: &Stack) -> Option<WritesHeld> {
    if key == DispatchKey::NATIVE || key == DispatchKey::CPU {
        return None;
    }
    let written = info
        .args
        .iter()
        .zip(stack.iter())
        .filter(|(a, _)| a.is_write)
        .flat_map(|(_, v)| v.tensors().filter(|t| t.key() == key).cloned());
    Some(hold_writes(written))
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
    /// Moves the tensors (1), runs the CPU kernel (2), moves the results (3), writes back (4).
    ///
    /// The CPU tensors take the device tensors' places in the caller's stack, so a call builds
    /// no second stack and clones no argument; the arguments the kernel writes are kept aside
    /// first, for the write-back and for the returns that alias them. After an error the
    /// stack's contents are unspecified, as after any boxed call that fails, but no tensor
    /// of the backend has changed: the kernel sees them only as loans and copies, and nothing
    /// is written back unless every step before succeeded.
    fn run(&mut self, stack: &mut Stack) -> Result<()> {
        let (info, op) = (self.info, self.moves.op);
        if stack.len() != info.args.len() {
            return Err(Error::Fallback(format!(
                "CPU fallback of '{}': the stack holds {} values for {} arguments",
                op.name(),
                stack.len(),
                info.args.len()
            )));
        }
        if log::log_enabled!(target: "boxfall", log::Level::Debug) {
            log_call(op, self.moves.key, info, stack);
        }
        if info.is_mutable {
            let hooks = self.moves.hooks;
            // The call reads what it writes and writes it back whole (a view: into its base):
            // another thread's write of the same base between the two would be lost.
            let _held = hold_written(info, self.moves.key, stack);
            return hooks.exclusive(&mut || self.run_with_writes(stack));
        }
        // A functional operator: nothing to keep aside or write back.
        self.moves
            .stack_to_cpu(info, self.batches, stack, &mut ())?;
        self.moves.mark_moved();
        self.run_cpu_kernel(stack)?;
        self.moves.kernel_done();
        for v in stack.iter_mut() {
            self.moves.value_to_device(v)?;
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
            self.moves.op.name(),
            self.moves.key
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
        self.moves
            .stack_to_cpu(info, self.batches, stack, &mut written)?;
        copy_cpu_writes(&kept, stack, &mut written)?;
        self.moves.mark_moved();
        self.run_cpu_kernel(stack)?;
        self.moves.kernel_done();

        // 3. Move every result to the device before writing any argument. A return that
        // aliases a written argument is that argument, as the caller passed it.
        let mut replaced: Vec<(usize, IValue)> = Vec::new();
        for (r, v) in info.returns.iter().zip(stack.iter_mut()) {
            match r
                .aliases_arg
                .and_then(|i| kept.iter().find(|(k, _)| *k == i))
            {
                Some((i, arg)) => replaced.push((*i, std::mem::replace(v, arg.clone()))),
                None => self.moves.value_to_device(v)?,
            }
        }

        // 4. Write the mutated arguments back (from the returned value where the kernel gave
        // a new one for an aliased return), all or none.
        let args = &self.table.schema(self.moves.op)?.schema.arguments;
        self.moves.write_back(args, &kept, &written, &replaced)
    }

    /// Step 2: runs the CPU kernel on the CPU stack, which it leaves holding the returns.
    #[inline(always)]
    fn run_cpu_kernel(&self, stack: &mut Stack) -> Result<()> {
        let (op, cpu) = (self.moves.op, DispatchKey::CPU.set());
        match self.cpu {
            Some(k) => k.call_boxed_in(op, self.table, cpu, stack),
            // Nothing serves the CPU key: the table's call says so as any call would.
            None => self.table.call(op, cpu, stack),
        }
        .map_err(|e| kernel_error(op, self.moves.key, e))?;
        if stack.len() != self.info.returns.len() {
            return Err(Error::Fallback(format!(
                "CPU kernel of '{}' left {} values for {} returns",
                op.name(),
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
