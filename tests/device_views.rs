//! Device views (`Backend::view`, `ViewOps::on_device`): a view that a kernel of a lazy
//! backend reads is made on the device from its base's payload, so that nothing its base holds
//! on the device crosses again; a base on the host only gets its payload once, for all its
//! views; a backend without the hook moves the view's values with `from_cpu`; a write of a
//! device view is a write of its base, whether the view shares the base's memory or is a copy
//! (written into the base by `resident::settle`, the base then on the host only).

mod common;

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use boxfall::backend::{backend, register_backend, Backend};
use boxfall::metrics::user_transfers;
use boxfall::tensor::{DeviceView, HostArray, Payload, Residency, TensorData, ViewOps, ViewWrite};
use boxfall::{resident, Device, DispatchKey, Error, Result, Tensor};
use common::*;
use ndarray::s;

/// A device view of a `DevPayload`: its elements `from..to`, read where they are.
struct Slice {
    base: Arc<dyn Payload>,
    from: usize,
    to: usize,
}

impl Payload for Slice {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn to_host(&self) -> Result<HostArray> {
        let all = self.base.to_host()?;
        let a = all.as_f64().expect("float64").slice(s![self.from..self.to]);
        Ok(a.to_owned().into_dyn().into())
    }
}

/// Counting hooks of a lazy backend, with the `view` hook where `views` (a copy of the
/// base's elements where `copies`, else a `Slice` sharing them).
struct Hooks {
    views: bool,
    copies: bool,
    to_cpu: AtomicUsize,
    from_cpu: AtomicUsize,
    view: AtomicUsize,
    /// `to_cpu` fails (the device is gone).
    broken: AtomicBool,
}

impl Backend for &'static Hooks {
    fn to_cpu(&self, t: &Tensor, _for_write: bool) -> Result<Tensor> {
        self.to_cpu.fetch_add(1, Ordering::SeqCst);
        if self.broken.load(Ordering::SeqCst) {
            return Err(Error::Fallback("the device is gone".into()));
        }
        resident::materialize(t)?;
        let p = t
            .payload()
            .ok_or_else(|| Error::Fallback("no payload".into()))?;
        Ok(Tensor::host(Device::CPU, p.to_host()?))
    }
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        self.from_cpu.fetch_add(1, Ordering::SeqCst);
        let a = cpu.to_host()?.try_clone()?;
        Ok(Tensor::foreign(device, Arc::new(DevPayload::new(a))))
    }
    fn copy_from_cpu(&self, _dst: &Tensor, _src: &Tensor) -> Result<()> {
        Err(Error::Fallback("not written here".into()))
    }
    fn lazy(&self) -> bool {
        true
    }
    fn view(
        &self,
        base: &Tensor,
        shape: &[usize],
        strides: &[isize],
        offset: isize,
    ) -> Result<Option<DeviceView>> {
        if !self.views {
            return Ok(None);
        }
        self.view.fetch_add(1, Ordering::SeqCst);
        assert_eq!(strides, &[1]);
        // The base's payload first, as a hook always sees device data.
        resident::materialize(base)?;
        let payload = base.payload().expect("materialized");
        let from = usize::try_from(offset).expect("offset");
        let slice = Slice {
            base: payload,
            from,
            to: from + shape[0],
        };
        if self.copies {
            let copy = DevPayload::new(slice.to_host()?);
            return Ok(Some(DeviceView {
                data: Tensor::foreign(base.device(), Arc::new(copy)).data(),
                shares: false,
            }));
        }
        Ok(Some(DeviceView {
            data: Tensor::foreign(base.device(), Arc::new(slice)).data(),
            shares: true,
        }))
    }
}

/// The elements `from..to` of a float64 vector, made from its base's host values, or on the
/// device by the backend's `view` hook.
struct Range {
    from: usize,
    to: usize,
    /// A copy's write is written into the base on the device (`ViewOps::write_on_device`,
    /// a scatter into a new payload), as a backend with a `view_write` hook does.
    scatters: bool,
}

impl ViewOps for Range {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn materialize(&self, base: &Tensor, device: Device) -> Result<TensorData> {
        let hooks = backend(base.key()).expect("registered");
        let (cpu, _) = resident::read(hooks, base)?;
        let a = f64_array(&cpu)?.slice(s![self.from..self.to]).to_owned();
        let values = Tensor::from_array(a.into_dyn());
        Ok(Tensor::host_only(values, device).data())
    }
    /// Into a host-only base only (what a device copy's write-back writes).
    fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> {
        let host = base
            .host_only_values()
            .ok_or_else(|| Error::Fallback("not written here".into()))?;
        let mut a = f64_array(&host)?.to_owned();
        a.slice_mut(s![self.from..self.to])
            .assign(&f64_array(src)?.to_owned());
        base.set_data(Tensor::host_only(Tensor::from_array(a.into_dyn()), base.device()).data());
        Ok(())
    }
    fn on_device(&self, base: &Tensor, device: Device) -> Result<Option<DeviceView>> {
        let hooks = backend(device.key).expect("registered");
        hooks.view(base, &[self.to - self.from], &[1], self.from as isize)
    }
    fn write_on_device(&self, base: &Tensor, values: &Tensor) -> Result<ViewWrite> {
        if !self.scatters {
            return Ok(ViewWrite::Declined);
        }
        let all = base.payload().expect("materialized").to_host()?;
        let mut a = all.as_f64().expect("float64").to_owned();
        let part = values.payload().expect("a payload").to_host()?;
        a.slice_mut(s![self.from..self.to])
            .assign(part.as_f64().expect("float64"));
        let made = DevPayload::new(HostArray::from(a));
        Ok(ViewWrite::Replaced(
            Tensor::foreign(base.device(), Arc::new(made)).data(),
        ))
    }
}

fn setup(views: bool) -> (DispatchKey, &'static Hooks) {
    setup_with(views, false)
}

fn setup_with(views: bool, copies: bool) -> (DispatchKey, &'static Hooks) {
    let hooks: &'static Hooks = Box::leak(Box::new(Hooks {
        views,
        copies,
        to_cpu: AtomicUsize::new(0),
        from_cpu: AtomicUsize::new(0),
        view: AtomicUsize::new(0),
        broken: AtomicBool::new(false),
    }));
    let name = if copies { "DevViewCopies" } else { "DevViews" };
    let key = register_backend(&ns(name), Arc::new(hooks)).expect("backend");
    (key, hooks)
}

fn calls(h: &Hooks) -> [usize; 3] {
    [
        h.to_cpu.load(Ordering::SeqCst),
        h.from_cpu.load(Ordering::SeqCst),
        h.view.load(Ordering::SeqCst),
    ]
}

fn materialized(key: DispatchKey) -> u64 {
    user_transfers()
        .into_iter()
        .find(|(k, _)| *k == key)
        .map_or(0, |(_, t)| t.bytes_materialized)
}

fn device_tensor(key: DispatchKey, v: &[f64]) -> Tensor {
    Tensor::foreign(
        Device::new(key, 0),
        Arc::new(DevPayload::new(HostArray::from(arr(v)))),
    )
}

fn range(base: &Tensor, from: usize, to: usize) -> Tensor {
    let ops = Range {
        from,
        to,
        scatters: false,
    };
    Tensor::view_of(base, Arc::new(ops), (to - from) * 8).unwrap()
}

#[test]
fn a_view_of_a_base_on_the_device_is_made_there_and_nothing_crosses() {
    let (key, hooks) = setup(true);
    let base = device_tensor(key, &[1.0, 2.0, 3.0, 4.0]);
    let v = range(&base, 1, 3);
    resident::materialize(&v).unwrap();
    assert_eq!(calls(hooks), [0, 0, 1]);
    assert!(v.is_device_view());
    let p = v.payload().unwrap();
    assert!(p.as_any().downcast_ref::<Slice>().is_some());
    assert_eq!(
        p.to_host().unwrap().as_f64().unwrap().as_slice(),
        Some(&[2.0, 3.0][..])
    );
    assert_eq!(materialized(key), 0);
    // Current: asked again, the hook is not called again.
    resident::materialize(&v).unwrap();
    assert_eq!(calls(hooks), [0, 0, 1]);
}

#[test]
fn a_base_on_the_host_only_crosses_once_for_all_its_views() {
    let (key, hooks) = setup(true);
    let cpu = Tensor::from_array(arr(&[1.0, 2.0, 3.0, 4.0]));
    let base = Tensor::host_only(cpu, Device::new(key, 0));
    let (a, b) = (range(&base, 0, 2), range(&base, 2, 4));
    resident::materialize(&a).unwrap();
    resident::materialize(&b).unwrap();
    assert_eq!(calls(hooks), [0, 1, 2]); // one from_cpu: the base's
    assert_eq!(materialized(key), 32);
    assert_eq!(base.residency(), Residency::Both);
    assert!(a.is_device_view() && b.is_device_view());
    // The views keep their host values: a CPU kernel reading them moves nothing.
    assert_eq!(a.residency(), Residency::Both);
    assert_eq!(values(&a.host_copy().unwrap()), vec![1.0, 2.0]);
    assert_eq!(values(&b.host_copy().unwrap()), vec![3.0, 4.0]);
}

#[test]
fn without_the_hook_a_view_moves_its_own_values() {
    let (key, hooks) = setup(false);
    let cpu = Tensor::from_array(arr(&[1.0, 2.0, 3.0, 4.0]));
    let base = Tensor::host_only(cpu, Device::new(key, 0));
    let v = range(&base, 1, 3);
    resident::materialize(&v).unwrap();
    assert_eq!(calls(hooks), [0, 1, 0]);
    assert_eq!(materialized(key), 16); // the view's bytes, not the base's
    assert!(!v.is_device_view());
    assert_eq!(base.residency(), Residency::Host);
}

#[test]
fn a_write_of_a_device_view_is_a_write_of_its_base() {
    let (key, _) = setup(true);
    let base = device_tensor(key, &[1.0, 2.0, 3.0]);
    let hooks = backend(key).unwrap();
    resident::read(hooks, &base).unwrap(); // a host copy, kept
    assert_eq!(base.residency(), Residency::Both);
    let v = range(&base, 0, 2);
    // The base has a host copy: the view's values come from it, on the host.
    resident::materialize(&v).unwrap();
    assert!(v.is_device_view());
    let version = base.data_version();
    v.note_write(); // what a backend kernel that wrote the view's payload reports
    assert_ne!(base.data_version(), version);
    assert_eq!(base.residency(), Residency::Device); // its host copy was stale
}

fn to_host_bytes(key: DispatchKey) -> u64 {
    user_transfers()
        .into_iter()
        .find(|(k, _)| *k == key)
        .map_or(0, |(_, t)| t.bytes_to_host)
}

/// What a backend kernel does to a view it writes: its payload, written where it is (here:
/// every element times ten), then `note_write` and `settle`.
fn scale_by_ten(key: DispatchKey, v: &Tensor) -> Result<()> {
    resident::materialize(v)?;
    let p = v.payload().expect("materialized");
    let dev = p
        .as_any()
        .downcast_ref::<DevPayload>()
        .expect("a device copy");
    let scaled = dev.get().as_f64().expect("float64").mapv(|x| x * 10.0);
    dev.set(HostArray::from(scaled));
    v.note_write();
    resident::settle(backend(key).unwrap(), v, true)
}

#[test]
fn a_write_of_a_device_copy_is_written_into_its_base_after_the_kernel() {
    let (key, hooks) = setup_with(true, true);
    let base = device_tensor(key, &[1.0, 2.0, 3.0, 4.0]);
    let v = range(&base, 1, 3);
    resident::materialize(&v).unwrap();
    assert!(v.is_device_view() && v.is_device_copy());
    let version = base.data_version();
    let before = to_host_bytes(key);
    scale_by_ten(key, &v).unwrap();
    assert_ne!(base.data_version(), version);
    // The base's values are on the host now, with the view's write; its payload is stale.
    assert_eq!(base.residency(), Residency::Host);
    assert_eq!(
        values(&base.host_copy().unwrap()),
        vec![1.0, 20.0, 30.0, 4.0]
    );
    // Counted: the copy's 16 bytes and the base's 32 (it had no host copy).
    assert_eq!(to_host_bytes(key) - before, 16 + 32);
    assert_eq!(calls(hooks)[0], 2);
    // The view is made again from the base, and reads the write.
    let (read, _) = resident::read(backend(key).unwrap(), &v).unwrap();
    assert_eq!(values(&read), vec![20.0, 30.0]);
}

#[test]
fn a_device_copy_of_a_host_only_base_is_written_from_its_host_values() {
    let (key, hooks) = setup_with(true, true);
    let cpu = Tensor::from_array(arr(&[1.0, 2.0, 3.0, 4.0]));
    let base = Tensor::host_only(cpu, Device::new(key, 0));
    let v = range(&base, 0, 2);
    let before = to_host_bytes(key);
    scale_by_ten(key, &v).unwrap();
    // The base got its payload for the hook (from_cpu once); its host copy was current, so
    // only the copy's values came back.
    assert_eq!(calls(hooks)[..2], [1, 1]);
    assert_eq!(to_host_bytes(key) - before, 16);
    assert_eq!(
        values(&base.host_copy().unwrap()),
        vec![10.0, 20.0, 3.0, 4.0]
    );
}

#[test]
fn a_device_copy_that_cannot_be_written_back_leaves_its_base_and_view_as_they_were() {
    let (key, hooks) = setup_with(true, true);
    let base = device_tensor(key, &[1.0, 2.0, 3.0, 4.0]);
    let v = range(&base, 1, 3);
    let version = base.data_version();
    hooks.broken.store(true, Ordering::SeqCst);
    let e = scale_by_ten(key, &v).unwrap_err().to_string();
    for part in ["the device is gone", "'view' hook", "copy", "unchanged"] {
        assert!(e.contains(part), "{e}");
    }
    hooks.broken.store(false, Ordering::SeqCst);
    assert_eq!(base.data_version(), version);
    assert_eq!(base.residency(), Residency::Device);
    let (read, _) = resident::read(backend(key).unwrap(), &base).unwrap();
    assert_eq!(values(&read), vec![1.0, 2.0, 3.0, 4.0]);
    // The view is made again from the base: the dropped write is not seen through it either.
    let (read, _) = resident::read(backend(key).unwrap(), &v).unwrap();
    assert_eq!(values(&read), vec![2.0, 3.0]);
    // And settling again writes nothing (the write was taken once).
    resident::settle(backend(key).unwrap(), &v, true).unwrap();
    assert_eq!(base.data_version(), version);
}

#[test]
fn a_write_of_a_shared_device_view_is_not_written_back() {
    let (key, hooks) = setup(true);
    let base = device_tensor(key, &[1.0, 2.0, 3.0]);
    let v = range(&base, 0, 2);
    resident::materialize(&v).unwrap();
    assert!(v.is_device_view() && !v.is_device_copy());
    v.note_write();
    resident::settle(backend(key).unwrap(), &v, true).unwrap();
    assert_eq!(calls(hooks), [0, 0, 1]); // nothing moved
    assert_eq!(base.residency(), Residency::Device);
}

#[test]
fn a_view_of_a_host_base_is_never_made_on_a_device() {
    let base = boxfall::native::tensor(arr(&[1.0, 2.0]));
    assert!(boxfall::native::NativeBackend
        .view(&base, &[1], &[1], 0)
        .unwrap()
        .is_none());
    let v = range(&base, 0, 1);
    assert!(!v.sync_device_view().unwrap());
    assert!(!v.is_device_view());
}

fn device_values(t: &Tensor) -> Vec<f64> {
    let a = t.payload().unwrap().to_host().unwrap();
    a.as_f64().unwrap().iter().copied().collect()
}

#[test]
fn a_new_payload_of_a_view_is_scattered_into_its_base_on_the_device() {
    // No view hook: the view's payload is from_cpu's of its values, a copy.
    let (key, hooks) = setup(false);
    let base = device_tensor(key, &[1.0, 2.0, 3.0, 4.0]);
    let ops = Range {
        from: 1,
        to: 3,
        scatters: true,
    };
    let v = Tensor::view_of(&base, Arc::new(ops), 16).unwrap();
    resident::materialize(&v).unwrap();
    let (before, version) = (calls(hooks), base.data_version());
    // An immutable device's kernel made the view a new payload (`put_written`).
    v.put_written(device_tensor(key, &[20.0, 30.0]).data());
    resident::settle(backend(key).unwrap(), &v, true).unwrap();
    assert_eq!(calls(hooks), before); // scattered on the device: nothing crossed
    assert_ne!(base.data_version(), version);
    assert_eq!(base.residency(), Residency::Device);
    assert_eq!(device_values(&base), vec![1.0, 20.0, 30.0, 4.0]);
}

#[test]
fn a_written_view_whose_payload_from_cpu_made_reaches_its_base() {
    let (key, _) = setup(false);
    let base = device_tensor(key, &[1.0, 2.0, 3.0, 4.0]);
    let v = range(&base, 1, 3);
    resident::materialize(&v).unwrap();
    assert!(!v.is_device_view());
    // A kernel wrote the view's payload where it is, and said so.
    let p = v.payload().unwrap();
    let p = p.as_any().downcast_ref::<DevPayload>().expect("from_cpu's");
    p.set(HostArray::from(arr(&[20.0, 30.0])));
    v.note_write();
    resident::settle(backend(key).unwrap(), &v, true).unwrap();
    let (read, _) = resident::read(backend(key).unwrap(), &base).unwrap();
    assert_eq!(values(&read), vec![1.0, 20.0, 30.0, 4.0]);
}
