//! The fallback's one step engine, [`Moves`]: how every form of the CPU fallback moves a call's
//! tensors (the boxed walk over a stack, the typed fallback compiled with a CPU kernel's
//! signature, the CPU kernel's stack entry, the bindings' `run_with_maps`). Step 1 moves the
//! backend's tensors to the CPU (one by one, lent where the backend keeps a CPU tensor, a
//! resident tensor's host copy, the elements of lists, or all at once where the backend
//! batches), step 3 moves the results to the device, and step 4 writes the arguments the
//! kernel wrote back, all or none (`write_back`, whose rollback puts back every argument
//! written so far when one fails). The engine counts the bytes each way and marks the steps'
//! ends for the operator's counters, so that every form counts a call the same way.

use crate::backend::Backend;
use crate::clock;
use crate::dispatcher::OperatorHandle;
use crate::error::{Error, Result};
use crate::ivalue::{IValue, Stack};
use crate::key::DispatchKey;
use crate::resident;
use crate::schema::{Argument, SchemaInfo};
use crate::tensor::{Device, Tensor};

use super::slots::{element, place, try_each_tensor};
use super::steps::{record, step_error, StepMarks};
use super::target::TargetDevice;
use super::write_back;

/// One fallback call's moves: its operator and backend, the device its results go to, the
/// bytes it moved each way and the marks of its steps' ends.
pub(crate) struct Moves<'a> {
    pub(super) op: &'a OperatorHandle,
    pub(super) key: DispatchKey,
    pub(super) hooks: &'a dyn Backend,
    target: TargetDevice,
    /// The results' device, once the arguments are moved.
    device: Device,
    to_cpu: u64,
    from_cpu: u64,
    marks: StepMarks,
    /// Whether step 1 copied a tensor (rather than lending every one): only then does the typed
    /// fallback time it.
    copied: bool,
}

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

/// Where step 1 keeps the moved tensors the kernel writes: a list for an operator that writes
/// some argument; nothing at all for a functional one, whose moves then carry no list.
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

/// How a round of writing arguments back ended.
pub(super) enum WriteBack {
    /// Every argument was written.
    Done,
    /// A Native argument was written by another thread meanwhile: nothing was written.
    Stale,
}

impl<'a> Moves<'a> {
    #[inline(always)]
    pub(super) fn new(
        op: &'a OperatorHandle,
        key: DispatchKey,
        hooks: &'a dyn Backend,
    ) -> Moves<'a> {
        Moves {
            op,
            key,
            hooks,
            target: TargetDevice::default(),
            device: Device::CPU,
            to_cpu: 0,
            from_cpu: 0,
            marks: StepMarks::default(),
            copied: false,
        }
    }

    /// `result`, the call counted in the operator's counters (`start`: when the fallback
    /// began). The two cases apart, so that a call that went well returns without copying a
    /// `Result` (an error-sized value) from a local into the caller's slot.
    #[inline(always)]
    pub(super) fn counted<T>(&self, start: u64, result: Result<T>) -> Result<T> {
        match result {
            Ok(v) => {
                self.record(start, true);
                Ok(v)
            }
            Err(e) => {
                self.record(start, false);
                self.op.metrics().record_failure(self.key, &e);
                Err(e)
            }
        }
    }

    /// Counts the call in the operator's counters.
    #[inline(always)]
    fn record(&self, start: u64, ok: bool) {
        record(
            self.op,
            self.key,
            start,
            self.marks,
            [self.to_cpu, self.from_cpu],
            ok,
        );
    }

    /// The end of step 1, marked now (the boxed walk times its step 1 whatever it copied).
    #[inline(always)]
    pub(super) fn mark_moved(&mut self) {
        self.marks.moved = clock::ticks();
    }

    /// The end of step 2, marked where the CPU kernel returned, before its result is converted
    /// (for a caller that converts the result into the device's memory itself: that copy is
    /// step 3's work).
    #[inline(always)]
    pub(crate) fn kernel_done(&mut self) {
        self.marks.ran = clock::ticks();
    }

    /// The end of step 2, at the first return that is moved (unless marked already).
    #[inline(always)]
    fn mark_ran(&mut self) {
        if self.marks.ran == u64::MAX {
            self.marks.ran = clock::ticks();
        }
    }
}

/// Step 1: the backend's tensors to the CPU.
impl Moves<'_> {
    /// Step 1 for one tensor the kernel only reads: a tensor of the backend goes to the CPU,
    /// each checked to be on the call's one device.
    #[inline(always)]
    pub(super) fn arg(&mut self, t: &mut Tensor) -> Result<()> {
        self.arg_at(0, None, false, t, &mut ())
    }

    /// Step 1 for the tensor of argument `arg` (list element `slot`): its CPU tensor takes its
    /// place, and where the kernel writes it (`write`), `log` keeps it for the write-back.
    #[inline(always)]
    fn arg_at<W: WriteLog>(
        &mut self,
        arg: usize,
        slot: Option<usize>,
        write: bool,
        t: &mut Tensor,
        log: &mut W,
    ) -> Result<()> {
        self.target.see(self.op, t)?;
        if t.key() != self.key {
            return Ok(());
        }
        let write = W::WRITES && write;
        // Read before the data, so that a write after it is seen at the write-back.
        let version =
            (write && self.key == DispatchKey::NATIVE && t.is_host()).then(|| t.data_version());
        let lent = if write { None } else { self.lent(t) };
        let cpu = match lent {
            Some(cpu) => cpu.clone(),
            None => self.made(t, write)?,
        };
        if write {
            keep_written(log, arg, slot, &cpu, version);
        }
        *t = cpu;
        Ok(())
    }

    /// The CPU tensor of one of the backend's tensors that the kernel only reads, borrowed from
    /// it where the backend keeps one (`lent_to_cpu`: nothing is copied); `None` where it
    /// keeps none, or the tensor holds no host memory (`made` then makes it).
    #[inline(always)]
    fn lent<'t>(&mut self, t: &'t Tensor) -> Option<&'t Tensor> {
        if !t.is_host() {
            return None;
        }
        let cpu = self.hooks.lent_to_cpu(t)?;
        self.to_cpu += cpu.nbytes() as u64;
        Some(cpu)
    }

    /// The CPU tensor of one of the backend's tensors, made: a resident tensor's host copy,
    /// else the backend's `to_cpu` (a copy the kernel may write where `write`).
    #[inline(always)]
    fn made(&mut self, t: &Tensor, write: bool) -> Result<Tensor> {
        // A tensor without host memory may have its values on the host already (residency).
        if !t.is_host() {
            return self.resident(t, write);
        }
        let cpu = if write {
            self.hooks.to_cpu(t, true)
        } else {
            self.hooks.to_cpu_read_only(t)
        }
        .map_err(|e| step_error(self.op, self.key, "to_cpu", e))?;
        self.to_cpu += cpu.nbytes() as u64;
        self.copied = true;
        Ok(cpu)
    }

    /// Step 1 for a tensor that holds no host memory: its host copy where current (no bytes
    /// cross), else the backend's `to_cpu` (`resident::read`, `resident::read_for_write`).
    #[inline(never)]
    fn resident(&mut self, t: &Tensor, write: bool) -> Result<Tensor> {
        self.copied = true;
        let (cpu, crossed) = if write {
            resident::read_for_write(self.hooks, t)
        } else {
            resident::read(self.hooks, t)
        }
        .map_err(|e| step_error(self.op, self.key, "to_cpu", e))?;
        if crossed {
            self.to_cpu += cpu.nbytes() as u64;
        }
        Ok(cpu)
    }

    /// The end of step 1 of a call whose tensors were moved one by one: the results' device,
    /// and the step's time mark where it copied a tensor. A step that copied nothing (every
    /// tensor lent, or none the backend's) gets no mark: a clock read costs more than its
    /// bookkeeping, so it counts as taking no time (`StepMarks::UNTIMED`).
    #[inline(always)]
    pub(super) fn args_done(&mut self) -> Result<()> {
        self.device = std::mem::take(&mut self.target).finish(self.op, self.key, None)?;
        self.marks.moved = if self.copied {
            clock::ticks()
        } else {
            StepMarks::UNTIMED
        };
        Ok(())
    }

    /// Step 1 for all of a call's argument tensors (`args` with `last`), borrowed from the
    /// caller rather than handed over. Where `tensors[i]` is the backend's, its CPU tensor
    /// takes its place: borrowed from it where the backend keeps one (`lent_to_cpu`), else
    /// made into `moved[i]` (and `tensors[i]` left for the caller to replace by it). No tensor
    /// handle is cloned for a backend that keeps its CPU tensors (for `run_with_maps`'
    /// caller, which holds the arguments in its own objects for the call).
    #[cfg(feature = "python")]
    #[inline(always)]
    pub(crate) fn args_lent(
        &mut self,
        tensors: &mut [Option<&Tensor>],
        moved: &mut [Option<Tensor>],
    ) -> Result<()> {
        for (g, m) in tensors.iter_mut().zip(moved.iter_mut()) {
            let Some(t) = *g else {
                continue;
            };
            self.target.see(self.op, t)?;
            if t.key() != self.key {
                continue;
            }
            match self.lent(t) {
                Some(cpu) => *g = Some(cpu),
                None => *m = Some(self.made(t, false)?),
            }
        }
        self.args_done()
    }

    /// Step 1 of a call on a stack: moves the backend's tensors to the CPU, each into its
    /// device tensor's place: one by one, or all at once where the backend batches. Finds the
    /// device the results go to on the way (two devices are an error before any tensor is
    /// written), and a `Device` argument naming the backend becomes the CPU. `log` keeps the
    /// tensors the kernel writes (for a functional operator it is `()`, and the bookkeeping
    /// compiles away).
    #[inline(always)]
    pub(super) fn stack_to_cpu<W: WriteLog>(
        &mut self,
        info: &SchemaInfo,
        batches: bool,
        stack: &mut Stack,
        log: &mut W,
    ) -> Result<()> {
        if batches {
            self.batched_to_cpu(info, stack, log)?;
        } else {
            for &i in &info.tensor_args {
                let write = W::WRITES && info.args.get(i).is_some_and(|a| a.is_write);
                match stack.get_mut(i) {
                    Some(IValue::Tensor(t)) => self.arg_at(i, None, write, t, log)?,
                    Some(IValue::TensorList(ts)) => {
                        for (j, t) in ts.iter_mut().enumerate() {
                            self.arg_at(i, Some(j), write, t, log)?;
                        }
                    }
                    Some(IValue::OptionalTensorList(ts)) => {
                        for (j, t) in ts.iter_mut().enumerate() {
                            if let Some(t) = t {
                                self.arg_at(i, Some(j), write, t, log)?;
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        let target = std::mem::take(&mut self.target);
        self.device = match info.device_arg {
            None => target.finish(self.op, self.key, None)?,
            Some(d) => device_argument(self.op, self.key, target, stack.get_mut(d))?,
        };
        Ok(())
    }

    /// Step 1 on a backend that batches: every tensor in one `to_cpu_many`, after all of them
    /// were seen to be on one device.
    fn batched_to_cpu(
        &mut self,
        info: &SchemaInfo,
        stack: &mut Stack,
        log: &mut impl WriteLog,
    ) -> Result<()> {
        let (op, key) = (self.op, self.key);
        let target = &mut self.target;
        let mut sources: Vec<(&Tensor, bool)> = Vec::new();
        let mut places: Vec<(usize, Option<usize>, bool)> = Vec::new();
        // Tensors whose values are on the host already (residency) are not in the batch.
        let mut resident: Vec<(usize, Option<usize>, bool, Tensor)> = Vec::new();
        let mut versions: Vec<u64> = Vec::new();
        try_each_tensor(info, stack, |arg, slot, t, write| {
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
                .map_err(|e| step_error(op, key, "to_cpu", e))?
        };
        if cpus.len() != sources.len() {
            return Err(Error::Fallback(format!(
                "CPU fallback of '{}': to_cpu_many returned {} tensors for {}",
                op.name(),
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
            self.to_cpu += cpu.nbytes() as u64;
            self.copied = true;
            if write {
                keep_written(log, arg, slot, &cpu, None);
            }
            if let Some(v) = stack.get_mut(arg) {
                place(v, slot, cpu);
            }
        }
        for (arg, slot, write, t) in resident {
            let cpu = self.resident(&t, write)?;
            if write {
                keep_written(log, arg, slot, &cpu, None);
            }
            if let Some(v) = stack.get_mut(arg) {
                place(v, slot, cpu);
            }
        }
        Ok(())
    }
}

/// Keeps a moved tensor the kernel writes, with a handle on its CPU copy (for the write-back).
#[inline(always)]
fn keep_written<W: WriteLog>(
    log: &mut W,
    arg: usize,
    slot: Option<usize>,
    cpu: &Tensor,
    version: Option<u64>,
) {
    if !W::WRITES {
        return;
    }
    log.keep(Written {
        arg,
        slot,
        cpu: cpu.clone(),
        backup: write_back::early_backup(cpu),
        version,
    });
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

/// Steps 3 and 4: the results to the device, the written arguments back.
impl Moves<'_> {
    /// Step 3 for one tensor: a CPU tensor goes to the device, any other stays (a tensor the
    /// kernel gave on another device, or a CPU tensor the caller passed and got back). The
    /// first return that the backend moves marks the end of step 2 (unless the caller marked
    /// it); one it takes as it is (`adopt_from_cpu`: Native's host memory) copies nothing and
    /// is not timed, as a lent argument is not (a kernel whose returns are all taken so, or
    /// hold no tensor, ends step 2 with the call).
    #[inline(always)]
    pub(super) fn ret_one(&mut self, t: Tensor) -> Result<Tensor> {
        if t.key() != DispatchKey::CPU {
            return Ok(t);
        }
        let bytes = t.nbytes() as u64;
        self.from_cpu += bytes;
        let t = match self.hooks.adopt_from_cpu(t, self.device) {
            Ok(on_device) => return Ok(on_device),
            Err(t) => t,
        };
        self.mark_ran();
        let on_device = self
            .hooks
            .from_cpu_result(t, self.device, self.op.result_of())
            .map_err(|e| step_error(self.op, self.key, "from_cpu", e))?;
        // A lazy backend's result stays on the host side: nothing crossed (yet).
        if on_device.is_host_only() {
            self.from_cpu -= bytes;
            on_device.note_made_by(self.op.origin());
        }
        Ok(on_device)
    }

    /// Step 3 for one value of a stack: its CPU tensors go to the device (`ret_one`), lists'
    /// and tuples' included.
    #[inline(always)]
    pub(super) fn value_to_device(&mut self, v: &mut IValue) -> Result<()> {
        // A tensor is tested for first: it is what almost every return is.
        if let IValue::Tensor(t) = v {
            // Taken out and put back, so that a backend keeping host memory can take the
            // tensor itself; a tensor on a device stays.
            if t.key() == DispatchKey::CPU {
                // Only the tensor's pointer is read, not the whole value: the CPU kernel has
                // just written this value with two stores, and a wide load across them (as
                // moving the value out makes) cannot be forwarded from them, which stalled
                // every fallback until they reached the cache.
                // SAFETY: `t` is valid (borrowed from `v`), and is not used after this read.
                // Its place is overwritten at once with `IValue::None`, without dropping the
                // old value, so the tensor read is from then on the only owner of its
                // reference: no drop is lost or doubled, even if `ret_one` fails or panics
                // (the stack then holds None).
                let cpu = unsafe { std::ptr::read(t) };
                // SAFETY: `v` is valid for writes; see above for the value it held.
                unsafe { std::ptr::write(v, IValue::None) };
                let on_device = self.ret_one(cpu)?;
                // SAFETY: `v` holds the None written above, which owns nothing, so writing over
                // it without a drop leaks nothing.
                unsafe { std::ptr::write(v, IValue::Tensor(on_device)) };
            }
            return Ok(());
        }
        match v {
            IValue::TensorList(_) | IValue::OptionalTensorList(_) | IValue::Tuple(_) => {
                self.lists_to_device(v)
            }
            _ => Ok(()),
        }
    }

    fn lists_to_device(&mut self, v: &mut IValue) -> Result<()> {
        match v {
            IValue::Tuple(vs) => vs.iter_mut().try_for_each(|x| self.value_to_device(x)),
            IValue::TensorList(ts) => {
                *ts = std::mem::take(ts)
                    .into_iter()
                    .map(|t| self.ret_one(t))
                    .collect::<Result<_>>()?;
                Ok(())
            }
            IValue::OptionalTensorList(ts) => {
                *ts = std::mem::take(ts)
                    .into_iter()
                    .map(|t| t.map(|t| self.ret_one(t)).transpose())
                    .collect::<Result<_>>()?;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Step 4: the written arguments take the kernel's results, all or none (`write_back`:
    /// every result checked against its argument before the first is written, and every
    /// argument written so far put back if a write fails). `args` are the schema's arguments,
    /// `kept` the written arguments as the caller passed them, `written` the CPU tensors the
    /// kernel wrote, and `replaced` the values the kernel returned for a return that aliases
    /// a written argument (the new value written where the kernel gave one).
    pub(super) fn write_back(
        &mut self,
        args: &[Argument],
        kept: &[(usize, IValue)],
        written: &[Written],
        replaced: &[(usize, IValue)],
    ) -> Result<WriteBack> {
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
        match write_back::write_all(self.op, self.key, self.hooks, args, &writes)? {
            Ok(bytes) => {
                self.from_cpu += bytes;
                Ok(WriteBack::Done)
            }
            Err(write_back::Stale) => Ok(WriteBack::Stale),
        }
    }
}
