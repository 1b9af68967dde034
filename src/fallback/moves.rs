//! The boxed walk's moves: the backend's tensors to the CPU (one by one, resident, or
//! batched) and the results back to the device.

use crate::dispatcher::OperatorHandle;
use crate::error::{Error, Result};
use crate::ivalue::{IValue, Stack};
use crate::key::DispatchKey;
use crate::resident;
use crate::tensor::{Device, Tensor};

use super::boxed::{FallbackCall, WriteLog, Written};
use super::slots::{place, try_each_tensor};
use super::steps::step_error;
use super::target::TargetDevice;
use super::write_back;

impl FallbackCall<'_> {
    /// Step 1: moves the backend's tensors to the CPU, each into its device tensor's place in
    /// the stack: one by one, or all at once where the backend batches. Finds the device the
    /// results go to on the way (two devices are an error before any tensor is written), and
    /// a `Device` argument naming the backend becomes the CPU. `log` keeps the tensors the
    /// kernel writes (for a functional operator it is `()`, and the bookkeeping compiles away).
    #[inline(always)]
    pub(super) fn move_to_cpu<W: WriteLog>(
        &mut self,
        stack: &mut Stack,
        log: &mut W,
    ) -> Result<Device> {
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

    /// Step 3 for one return: its CPU tensors go to the device (a tensor the kernel gave on
    /// another device, or a CPU tensor the caller passed and got back, stays).
    #[inline(always)]
    pub(super) fn return_to_device(&mut self, v: &mut IValue, target: Device) -> Result<()> {
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
