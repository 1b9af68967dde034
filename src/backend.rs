//! Backends: the hooks that move a backend's tensors to the CPU and back, which is all the CPU
//! fallback needs to know of a device. Registered once per backend key, read lock-free.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::key::{register_backend_key, DispatchKey, NUM_KEYS};
use crate::metrics::OpMetrics;
use crate::tensor::{Device, DeviceView, HostArray, Tensor, TensorData, ViewWrite};

/// What [`Backend::from_cpu_result`] is told of the operator whose CPU result it moves
/// (`OperatorHandle::result_of` makes it).
///
/// ```
/// use boxfall::{kernel::Tag, Library, LibraryKind};
/// let mut lib = Library::new("doc_result_of", LibraryKind::Def).unwrap();
/// let op = lib.define("argmax(Tensor x) -> Tensor").unwrap();
/// op.set_tag(Tag::DefaultDtypes, true);
/// let of = op.result_of();
/// assert_eq!((of.op, of.default_dtypes), ("doc_result_of::argmax", true));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ResultOf<'a> {
    /// The operator's name (`ns::op.overload`), for messages.
    pub op: &'a str,
    /// Whether the dtypes of its results are the library's choice (the operator's tag
    /// `kernel::Tag::DefaultDtypes`: indices, counts).
    pub default_dtypes: bool,
    /// Its counters: a result the backend narrowed is counted there
    /// ([`OpMetrics::record_narrowed`]).
    pub metrics: &'a OpMetrics,
}

/// A device's transfer hooks.
///
/// ```
/// use boxfall::{backend::Backend, Device, Tensor, Result};
/// struct Host;
/// impl Backend for Host {
///     fn to_cpu(&self, t: &Tensor, _for_write: bool) -> Result<Tensor> { Ok(Tensor::new(Device::CPU, t.data())) }
///     fn from_cpu(&self, t: &Tensor, device: Device) -> Result<Tensor> { Ok(Tensor::new(device, t.data())) }
///     fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> { dst.set_data(src.data()); Ok(()) }
/// }
/// let key = boxfall::backend::register_backend("DocHostBackend", std::sync::Arc::new(Host)).unwrap();
/// assert!(boxfall::backend::backend(key).is_some());
/// ```
pub trait Backend: Send + Sync + 'static {
    /// A CPU tensor with `t`'s values. With `for_write`, the kernel will write into it, so it
    /// must not share memory with `t` (the fallback writes it back only when the kernel succeeds).
    fn to_cpu(&self, t: &Tensor, for_write: bool) -> Result<Tensor>;

    /// A CPU tensor with `t`'s values for a kernel that only reads it (the fallback's read-only
    /// arguments). The default is `to_cpu(t, false)`; a backend whose CPU tensors a kernel
    /// could write (a Python backend's NumPy arrays) lends them read-only, so that a kernel
    /// writing an argument its schema does not mark as written fails, rather than changing
    /// the device tensor or losing the write.
    ///
    /// ```
    /// use boxfall::backend::Backend;
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let cpu = boxfall::native::NativeBackend.to_cpu_read_only(&t).unwrap();
    /// assert!(std::sync::Arc::ptr_eq(&cpu.host_array().unwrap(), &t.host_array().unwrap()));
    /// ```
    #[inline(always)]
    fn to_cpu_read_only(&self, t: &Tensor) -> Result<Tensor> {
        self.to_cpu(t, false)
    }

    /// `to_cpu_read_only`'s tensor borrowed from `t`, where the backend keeps it in `t` (no
    /// handle is made or counted for a call that holds `t` throughout); `None` (the default)
    /// where it has none at hand, and the caller then calls `to_cpu_read_only`. A backend that
    /// overrides it returns exactly the tensor `to_cpu_read_only` would.
    ///
    /// ```
    /// use boxfall::backend::Backend;
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let cpu = boxfall::native::NativeBackend.to_cpu_read_only(&t).unwrap();
    /// let kept = boxfall::native::NativeBackend.lent_to_cpu(&t).unwrap();
    /// assert!(kept.same(&cpu));
    /// ```
    #[inline(always)]
    fn lent_to_cpu<'t>(&self, t: &'t Tensor) -> Option<&'t Tensor> {
        let _ = t;
        None
    }

    /// Whether `to_cpu_many` is a real batched transfer (the fallback then moves all of a
    /// call's tensors with one call of it; otherwise it calls `to_cpu` per tensor).
    fn batches_transfers(&self) -> bool {
        false
    }

    /// Moves all of a call's tensors at once (`true`: the kernel writes it, as `for_write`;
    /// `false`: it only reads it, as `to_cpu_read_only`); a backend with a batched transfer
    /// overrides it (and `batches_transfers`).
    fn to_cpu_many(&self, tensors: &[(&Tensor, bool)]) -> Result<Vec<Tensor>> {
        tensors
            .iter()
            .map(|(t, w)| {
                if *w {
                    self.to_cpu(t, true)
                } else {
                    self.to_cpu_read_only(t)
                }
            })
            .collect()
    }

    /// A tensor on `device` with the CPU tensor's values.
    // Named as the Python hook is (`from_cpu=`), which every backend author meets first.
    #[allow(clippy::wrong_self_convention)]
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor>;

    /// `from_cpu` of a CPU result that the caller owns and gives up (the fallback's results):
    /// a backend whose device tensors hold host memory can take the tensor itself
    /// ([`Tensor::into_device`]). The default calls `from_cpu`, or, for a [`lazy`](Self::lazy)
    /// backend, leaves the values on the host ([`Tensor::host_only`]), to be moved by
    /// `from_cpu` when the device needs them. A lazy backend that overrides it must return
    /// a host-only tensor or device data for every call, and check there what `from_cpu`
    /// would refuse before anything moves (a dtype the device lacks).
    ///
    /// ```
    /// use boxfall::{backend::Backend, Device, Result, Tensor};
    /// struct Lazy;
    /// impl Backend for Lazy {
    ///     fn to_cpu(&self, t: &Tensor, _: bool) -> Result<Tensor> { unimplemented!() }
    ///     fn from_cpu(&self, _: &Tensor, _: Device) -> Result<Tensor> { unimplemented!() }
    ///     fn copy_from_cpu(&self, _: &Tensor, _: &Tensor) -> Result<()> { unimplemented!() }
    ///     fn lazy(&self) -> bool { true }
    /// }
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = Lazy.from_cpu_owned(cpu, boxfall::native::DEVICE).unwrap();
    /// assert!(t.is_host_only()); // no from_cpu yet
    /// ```
    #[allow(clippy::wrong_self_convention)]
    fn from_cpu_owned(&self, cpu: Tensor, device: Device) -> Result<Tensor> {
        if self.lazy() {
            return Ok(Tensor::host_only(cpu, device));
        }
        self.from_cpu(&cpu, device)
    }

    /// `from_cpu_owned` of a result of an operator's CPU kernel, as the CPU fallback moves
    /// every result, told which operator made it ([`ResultOf`]): a backend that fits a result
    /// to its device (a dtype it lacks made the one it holds: the results of an operator
    /// whose dtypes are the library's choice, or every 64-bit result where the device narrows
    /// them, as JAX does without 64-bit types) does it here. The default is
    /// `from_cpu_owned`.
    ///
    /// ```
    /// use boxfall::{backend::Backend, native::{self, NativeBackend}, Library, LibraryKind, Tensor};
    /// let mut lib = Library::new("doc_from_cpu_result", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = NativeBackend.from_cpu_result(cpu, native::DEVICE, op.result_of()).unwrap();
    /// assert_eq!(t.device(), native::DEVICE);
    /// ```
    #[allow(clippy::wrong_self_convention)]
    #[inline(always)]
    fn from_cpu_result(&self, cpu: Tensor, device: Device, op: ResultOf<'_>) -> Result<Tensor> {
        let _ = op;
        self.from_cpu_owned(cpu, device)
    }

    /// `from_cpu_owned`'s tensor where the backend takes the CPU result as it is, with no
    /// copy and no hook of its own (a backend whose device tensors hold host memory:
    /// [`Tensor::into_device`]); `Err(cpu)` (the default) hands the result back, and the
    /// caller then calls `from_cpu_owned`. The CPU fallback does not time a result taken so
    /// (a clock read would cost more than the step), as it does not time an argument lent by
    /// `lent_to_cpu`. A backend that overrides it returns exactly the tensor
    /// `from_cpu_owned` would.
    ///
    /// ```
    /// use boxfall::{backend::Backend, native::{self, NativeBackend}, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = NativeBackend.adopt_from_cpu(cpu, native::DEVICE).unwrap();
    /// assert_eq!(t.device(), native::DEVICE);
    /// struct Copies;
    /// impl Backend for Copies {
    ///     fn to_cpu(&self, t: &Tensor, _: bool) -> boxfall::Result<Tensor> { unimplemented!() }
    ///     fn from_cpu(&self, _: &Tensor, _: boxfall::Device) -> boxfall::Result<Tensor> { unimplemented!() }
    ///     fn copy_from_cpu(&self, _: &Tensor, _: &Tensor) -> boxfall::Result<()> { unimplemented!() }
    /// }
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(Copies.adopt_from_cpu(cpu, native::DEVICE).is_err()); // the default takes none
    /// ```
    #[inline(always)]
    fn adopt_from_cpu(&self, cpu: Tensor, device: Device) -> std::result::Result<Tensor, Tensor> {
        let _ = device;
        Err(cpu)
    }

    /// Residency (`boxfall::resident`): whether the CPU fallback keeps the host copies of this
    /// backend's tensors that it reads (tagged with their data version, and used while no write
    /// came since) and leaves its results on the host side until the device needs them (a
    /// kernel of the backend, its payload read, the user's ask). A lazy backend's kernels read
    /// a tensor's payload through [`resident::materialize`](crate::resident::materialize)
    /// first, and tell boxfall of a payload they write in place ([`Tensor::note_write`]). The
    /// default is false (every read calls `to_cpu`, every result `from_cpu`): a backend whose
    /// payloads change where boxfall does not see it, or whose `from_cpu` must run at once,
    /// keeps it.
    ///
    /// ```
    /// use boxfall::backend::Backend;
    /// assert!(!boxfall::native::NativeBackend.lazy()); // host memory: nothing to keep
    /// ```
    fn lazy(&self) -> bool {
        false
    }

    /// Writes the CPU tensor's values (and shape) into the device tensor `dst`: where they
    /// are, or, for a device whose memory is immutable, by putting new data in `dst`'s place
    /// ([`Tensor::put_written`]), a write of `dst` as any other.
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()>;

    /// A view of `base`'s device data made on the device: the data of the tensor whose element
    /// at index `i` is `base`'s element `offset + sum(i[d] * strides[d])` of its values in C
    /// order (strides and offset count elements; a stride may be negative or 0), and whether
    /// it shares `base`'s memory ([`DeviceView::shares`]). Nothing crosses to make it. A
    /// kernel of the backend that writes a shared view writes `base`; one that writes a copy
    /// (a gather into a new buffer) has its write written into `base` by boxfall after it
    /// ([`resident::settle`](crate::resident::settle): the copy's values to the host, through
    /// the view into `base`'s host values, `base` then host-only). `Ok(None)` (the default)
    /// where the backend makes none: boxfall then makes the view's values from `base`'s on the
    /// host and moves them with `from_cpu`. Residency asks for it when a kernel of the backend
    /// reads a view (`base` has its payload then).
    ///
    /// ```
    /// use boxfall::backend::Backend;
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// assert!(boxfall::native::NativeBackend.view(&t, &[1], &[1], 1).unwrap().is_none());
    /// ```
    fn view(
        &self,
        base: &Tensor,
        shape: &[usize],
        strides: &[isize],
        offset: isize,
    ) -> Result<Option<DeviceView>> {
        let _ = (base, shape, strides, offset);
        Ok(None)
    }

    /// Writes `values` (a payload on `base`'s device: the values of a view of `base` that a
    /// kernel of the backend wrote as a copy, made by [`view`](Self::view) as a copy, or by
    /// `from_cpu` where `view` made none) into `base` on the device: the elements of `base`
    /// at `offset + sum(i[d] * strides[d])` take `values[i]` (as for `view`). Nothing crosses
    /// to the host. [`ViewWrite::InPlace`] where the backend wrote `base`'s payload where it
    /// is, [`ViewWrite::Replaced`] with `base`'s new data where its memory is immutable (a
    /// scatter into a new array: JAX's `base.at[...].set(values)`), which boxfall puts in
    /// `base`'s place as a write of it. [`ViewWrite::Declined`] (the default): boxfall writes
    /// the values into `base` through the host (`to_cpu` of them, written into `base`'s host
    /// values, `base` then host-only until the device needs it).
    ///
    /// ```
    /// use boxfall::{backend::Backend, tensor::ViewWrite};
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let w = boxfall::native::NativeBackend.view_write(&t, &t, &[1], &[1], 1).unwrap();
    /// assert!(matches!(w, ViewWrite::Declined));
    /// ```
    fn view_write(
        &self,
        base: &Tensor,
        values: &Tensor,
        shape: &[usize],
        strides: &[isize],
        offset: isize,
    ) -> Result<ViewWrite> {
        let _ = (base, values, shape, strides, offset);
        Ok(ViewWrite::Declined)
    }

    /// Runs `call`, one whole fallback call of an operator that writes an argument (its moves
    /// to the CPU, the CPU kernel and its write-backs), as one step of the backend. A backend
    /// whose hooks run one at a time (a Python backend registered with `thread_safe=False`)
    /// holds its lock across it, so that no other thread's call reads a tensor between this
    /// call's read and its write-back, which would lose one of the two updates. The default
    /// runs `call` as it is.
    ///
    /// ```
    /// use boxfall::backend::Backend;
    /// let mut ran = false;
    /// boxfall::native::NativeBackend.exclusive(&mut || { ran = true; Ok(()) }).unwrap();
    /// assert!(ran);
    /// ```
    fn exclusive(&self, call: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        call()
    }
}

/// A registered backend: its hooks, and whether it batches transfers, which the fallback asks
/// on every call (asked of the hooks once, here, rather than by a virtual call each time).
#[derive(Clone, Copy)]
pub(crate) struct Registered {
    pub(crate) hooks: &'static dyn Backend,
    pub(crate) batches: bool,
    /// The leaked `Arc` itself, never read: kept so that the hooks stay reachable for
    /// LeakSanitizer. `hooks` alone points one past the end of the allocation when the backend
    /// is a zero-sized type (as `NativeBackend` is), which LeakSanitizer reports as a leak.
    _owner: &'static Arc<dyn Backend>,
}

impl Registered {
    /// A backend's hooks live as long as its key, that is for the process: they are leaked
    /// once, so that reading them is a plain load (no reference count, no `Arc` offset).
    fn new(hooks: Arc<dyn Backend>) -> Registered {
        let owner: &'static Arc<dyn Backend> = Box::leak(Box::new(hooks));
        let hooks: &'static dyn Backend = &**owner;
        Registered {
            hooks,
            batches: hooks.batches_transfers(),
            _owner: owner,
        }
    }
}

/// One cell per key: a backend key gets its hooks when it is registered, so a read is one
/// acquire load and no reference count moves. Replaced hooks (`replace_backend`) are never
/// freed, as a call may still hold them: a notebook re-running its registration cell leaks one
/// small object a run.
static TABLE: [AtomicPtr<Registered>; NUM_KEYS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; NUM_KEYS];

fn publish(key: DispatchKey, hooks: Arc<dyn Backend>) {
    if let Some(cell) = TABLE.get(key.index()) {
        cell.store(
            Box::into_raw(Box::new(Registered::new(hooks))),
            Ordering::Release,
        );
    }
}

/// The registered backend of `key`: Native's from the first look, any other's once registered.
#[inline]
pub(crate) fn registered(key: DispatchKey) -> Option<&'static Registered> {
    let cell = TABLE.get(key.index())?;
    let p = cell.load(Ordering::Acquire);
    if p.is_null() {
        return native_on_first_look(key);
    }
    // SAFETY: a non-null pointer in the table came from `Box::into_raw` in `publish` (or
    // `native_on_first_look`) and is never freed, so it is valid for the rest of the process.
    Some(unsafe { &*p })
}

#[cold]
fn native_on_first_look(key: DispatchKey) -> Option<&'static Registered> {
    if key != DispatchKey::NATIVE {
        return None;
    }
    let cell = &TABLE[key.index()];
    let fresh = Box::into_raw(Box::new(Registered::new(Arc::new(NativeBackend))));
    let p = match cell.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => fresh,
        Err(first) => {
            // SAFETY: `fresh` came from `Box::into_raw` just above and was never published.
            drop(unsafe { Box::from_raw(fresh) });
            first
        }
    };
    // SAFETY: as in `registered`: published pointers are never freed.
    Some(unsafe { &*p })
}

/// Registers a backend key with its hooks; later backends rank above earlier ones.
///
/// ```
/// use std::sync::Arc;
/// use boxfall::{backend::{backend, register_backend}, native::NativeBackend, DispatchKey};
/// let key = register_backend("DocRegisterBackend", Arc::new(NativeBackend)).unwrap();
/// assert!(key.is_backend() && key > DispatchKey::NATIVE);
/// assert!(backend(key).is_some());
/// ```
pub fn register_backend(name: &str, hooks: Arc<dyn Backend>) -> Result<DispatchKey> {
    let key = register_backend_key(name)?;
    publish(key, hooks);
    Ok(key)
}

/// Registers a backend, or gives a backend registered earlier under `name` new hooks (its key,
/// and so its rank, its tensors, kernels and fallbacks, stay): what running a notebook cell
/// twice needs. A name that is a key of another kind, or a built-in backend, is an error.
///
/// ```
/// use std::sync::Arc;
/// use boxfall::{backend::replace_backend, native::NativeBackend};
/// let a = replace_backend("DocReplaceBackend", Arc::new(NativeBackend)).unwrap();
/// let b = replace_backend("DocReplaceBackend", Arc::new(NativeBackend)).unwrap();
/// assert_eq!(a, b); // the same key
/// assert!(replace_backend("Native", Arc::new(NativeBackend)).is_err());
/// ```
pub fn replace_backend(name: &str, hooks: Arc<dyn Backend>) -> Result<DispatchKey> {
    let Some(key) = DispatchKey::from_exact_name(name) else {
        return register_backend(name, hooks);
    };
    let own = key.is_backend() && key != DispatchKey::NATIVE && key != DispatchKey::CPU;
    if !own || registered(key).is_none() {
        return Err(Error::Registration(format!(
            "'{}' is a built-in key or no backend registered with register_backend; it cannot be replaced",
            key.name()
        )));
    }
    publish(key, hooks);
    Ok(key)
}

/// The hooks of a backend key.
///
/// ```
/// assert!(boxfall::backend::backend(boxfall::DispatchKey::NATIVE).is_some());
/// assert!(boxfall::backend::backend(boxfall::DispatchKey::CPU).is_none());
/// ```
#[inline]
pub fn backend(key: DispatchKey) -> Option<&'static dyn Backend> {
    registered(key).map(|r| r.hooks)
}

/// The transfer hooks of `Native`, the built-in backend of host memory owned by Rust (also
/// `boxfall::native::NativeBackend`). They live here, with the registry that serves them
/// from the first look, so that the registry stands below the Native backend's kernels.
///
/// ```
/// use boxfall::backend::Backend;
/// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
/// let cpu = boxfall::native::NativeBackend.to_cpu(&t, false).unwrap();
/// // read-only: lent, not copied
/// assert!(std::sync::Arc::ptr_eq(&cpu.host_array().unwrap(), &t.host_array().unwrap()));
/// ```
pub struct NativeBackend;

fn host_of(t: &Tensor) -> Result<Arc<HostArray>> {
    t.host_array().ok_or_else(|| no_host_memory(t))
}

/// Lent, not copied: the tensor's one loan, which holds its data as it is now.
fn loan_of(t: &Tensor) -> Result<Tensor> {
    t.host_loan().ok_or_else(|| no_host_memory(t))
}

/// Why `t` has no host memory to give: a view whose values cannot be made says why.
#[cold]
fn no_host_memory(t: &Tensor) -> Error {
    t.view_failure().unwrap_or_else(|| {
        Error::Fallback(format!("a tensor on {} holds no host memory", t.device()))
    })
}

impl Backend for NativeBackend {
    fn to_cpu(&self, t: &Tensor, for_write: bool) -> Result<Tensor> {
        if for_write {
            return Ok(Tensor::host(Device::CPU, host_of(t)?.try_clone()?));
        }
        loan_of(t)
    }

    // Its own entry rather than the default's call of `to_cpu`: one call a tensor less.
    fn to_cpu_read_only(&self, t: &Tensor) -> Result<Tensor> {
        loan_of(t)
    }

    #[inline]
    fn lent_to_cpu<'t>(&self, t: &'t Tensor) -> Option<&'t Tensor> {
        t.kept_loan()
    }

    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        Ok(Tensor::new(device, TensorData::Host(cpu.to_host()?)))
    }

    fn from_cpu_owned(&self, cpu: Tensor, device: Device) -> Result<Tensor> {
        match self.adopt_from_cpu(cpu, device) {
            Ok(t) => Ok(t),
            Err(cpu) => self.from_cpu(&cpu, device),
        }
    }

    #[inline]
    fn adopt_from_cpu(&self, cpu: Tensor, device: Device) -> std::result::Result<Tensor, Tensor> {
        if cpu.is_host() {
            Ok(cpu.into_device(device))
        } else {
            Err(cpu)
        }
    }

    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        dst.set_data(TensorData::Host(src.to_host()?));
        Ok(())
    }
}
