//! Exported host memory (`Tensor::export_host`, what the Python `np.asarray(t)` of a Native
//! tensor is): memory another tensor shares is copied first; from then on the tensor's writes
//! go into that memory where it is, a foreign runtime's writes into it are the tensor's (its
//! loan and its views read them), data of another shape replaces it, and a fallback that has
//! to undo a write puts back the values, not the memory it wrote.

mod common;

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use boxfall::fallback::set_fallback_policy;
use boxfall::tensor::{HostArray, Payload, TensorData, ViewOps};
use boxfall::{native, Device, DispatchKey, FallbackPolicy, KernelFunction, Result, Tensor};
use common::*;

/// Writes `value` at `index` of exported float64 memory as NumPy does: through the raw pointer,
/// no `&mut` (other handles share the memory).
fn numpy_write(memory: &HostArray, index: usize, value: f64) {
    let a = memory.as_f64().unwrap();
    assert!(index < a.len() && a.is_standard_layout());
    // SAFETY: in bounds of the C-ordered elements (checked above); exported memory is written
    // only through its raw pointer, and no reference to its elements is alive in this test
    // (`a` is the array's header, and its elements are read only after this write).
    unsafe { a.as_ptr().cast_mut().add(index).write(value) };
}

#[test]
fn exported_memory_is_written_in_place_and_seen_both_ways() {
    let t = native::tensor(arr(&[1.0, 2.0, 3.0]));
    let memory = t.export_host().unwrap();
    assert!(t.is_exported());
    let loan = t.host_loan().unwrap();
    write(&t, arr(&[4.0, 5.0, 6.0]));
    assert!(
        Arc::ptr_eq(&t.host_array().unwrap(), &memory),
        "written where it is"
    );
    assert_eq!(
        memory.as_f64().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![4.0, 5.0, 6.0]
    );
    numpy_write(&memory, 1, 50.0);
    assert_eq!(values(&t), vec![4.0, 50.0, 6.0]);
    assert_eq!(values(&t.host_loan().unwrap()), vec![4.0, 50.0, 6.0]);
    assert_eq!(values(&loan), vec![4.0, 50.0, 6.0]);
    // Exported again: the same memory.
    assert!(Arc::ptr_eq(&t.export_host().unwrap(), &memory));
    // A version-checked write goes in place too, and checks the version as before.
    let v = t.data_version();
    assert!(t.set_data_if(v, TensorData::Host(Arc::new(arr(&[7.0, 8.0, 9.0]).into()))));
    assert!(!t.set_data_if(v, TensorData::Host(Arc::new(arr(&[0.0; 3]).into()))));
    assert_eq!(
        memory.as_f64().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![7.0, 8.0, 9.0]
    );
}

#[test]
fn memory_another_tensor_shares_is_copied_before_it_is_exported() {
    let t = native::tensor(arr(&[1.0, 2.0]));
    let other = Tensor::new(native::DEVICE, t.data());
    let memory = t.export_host().unwrap();
    assert!(!Arc::ptr_eq(&memory, &other.host_array().unwrap()));
    write(&t, arr(&[3.0, 4.0]));
    numpy_write(&memory, 0, 30.0);
    assert_eq!(values(&t), vec![30.0, 4.0]);
    assert_eq!(
        values(&other),
        vec![1.0, 2.0],
        "the other tensor sees no write"
    );
}

#[test]
fn memory_only_the_tensor_and_its_loan_hold_is_exported_as_it_is() {
    let t = native::tensor(arr(&[1.0, 2.0]));
    let loan = t.host_loan().unwrap();
    let before = Arc::as_ptr(&t.host_array().unwrap());
    let memory = t.export_host().unwrap();
    assert_eq!(Arc::as_ptr(&memory), before, "not copied");
    assert!(Arc::ptr_eq(&memory, &loan.host_array().unwrap()));
}

#[test]
fn memory_not_in_c_order_is_copied_into_c_order() {
    let reversed = ndarray::arr2(&[[1.0, 2.0], [3.0, 4.0]])
        .reversed_axes()
        .into_dyn();
    let t = native::tensor(reversed);
    let memory = t.export_host().unwrap();
    let a = memory.as_f64().unwrap();
    assert!(a.is_standard_layout());
    assert_eq!(
        a.iter().copied().collect::<Vec<_>>(),
        vec![1.0, 3.0, 2.0, 4.0]
    );
}

#[test]
fn data_of_another_shape_replaces_exported_memory() {
    let t = native::tensor(arr(&[1.0, 2.0]));
    let memory = t.export_host().unwrap();
    write(&t, arr(&[5.0, 6.0, 7.0]));
    assert!(!t.is_exported());
    assert_eq!(
        memory.as_f64().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![1.0, 2.0],
        "kept as it was"
    );
    numpy_write(&memory, 0, 9.0);
    assert_eq!(values(&t), vec![5.0, 6.0, 7.0]);
    let again = t.export_host().unwrap();
    assert!(!Arc::ptr_eq(&again, &memory) && t.is_exported());
    let retyped = TensorData::Host(Arc::new(ndarray::ArrayD::<f32>::zeros(vec![3]).into()));
    t.set_data(retyped);
    assert!(!t.is_exported(), "another dtype replaces it too");
    assert_eq!(
        again.as_f64().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![5.0, 6.0, 7.0]
    );
}

/// The elements `from..` of a float64 vector.
struct Tail(usize);

impl ViewOps for Tail {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn materialize(&self, base: &Tensor, _device: Device) -> Result<TensorData> {
        let a = f64_array(base)?.slice(ndarray::s![self.0..]).to_owned();
        Ok(TensorData::Host(Arc::new(a.into_dyn().into())))
    }
    fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> {
        let mut a = f64_array(base)?;
        let src = f64_array(src)?
            .into_dimensionality::<ndarray::Ix1>()
            .unwrap();
        a.slice_mut(ndarray::s![self.0..]).assign(&src);
        write(base, a);
        Ok(())
    }
}

#[test]
fn a_view_of_an_exported_base_reads_the_foreign_writes_and_writes_in_place() {
    let base = native::tensor(arr(&[1.0, 2.0, 3.0]));
    let v = Tensor::view_of(&base, Arc::new(Tail(1)), 16).unwrap();
    assert_eq!(values(&v), vec![2.0, 3.0]);
    let memory = base.export_host().unwrap();
    numpy_write(&memory, 2, 30.0); // no version moves: the view reads the base again
    assert_eq!(values(&v), vec![2.0, 30.0]);
    assert_eq!(values(&v.host_loan().unwrap()), vec![2.0, 30.0]);
    v.set_data(TensorData::Host(Arc::new(arr(&[-2.0, -3.0]).into())));
    assert_eq!(
        memory.as_f64().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![1.0, -2.0, -3.0]
    );
    assert!(v.export_host().is_err(), "a view's memory is its base's");
}

#[test]
fn a_tensor_without_host_memory_has_none_to_export() {
    struct Remote;
    impl Payload for Remote {
        fn as_any(&self) -> &dyn Any {
            self
        }
    }
    let t = Tensor::foreign(native::DEVICE, Arc::new(Remote));
    assert!(t.export_host().is_err() && !t.is_exported());
}

#[test]
fn bool_bytes_a_foreign_runtime_wrote_are_read_as_true() {
    let t = native::tensor(ndarray::arr1(&[true, false, false]).into_dyn());
    let memory = t.export_host().unwrap();
    let HostArray::Bool(a) = &*memory else {
        panic!("bool memory")
    };
    // SAFETY: byte 1 of the three; written as a byte (what NumPy's `a.view(np.uint8)[1] = 2`
    // does), and no `bool` of the memory is read before the tensor puts it right.
    unsafe { a.as_ptr().cast_mut().cast::<u8>().add(1).write(2) };
    let read = t.host_array().unwrap();
    let HostArray::Bool(read) = &*read else {
        panic!("bool memory")
    };
    assert_eq!(
        read.iter().copied().collect::<Vec<_>>(),
        vec![true, true, false]
    );
    // SAFETY: byte 1 of the three, read as a byte.
    assert_eq!(unsafe { read.as_ptr().cast::<u8>().add(1).read() }, 1);
}

#[test]
fn in_place_writes_of_exported_memory_from_threads_are_all_counted() {
    let t = native::tensor(arr(&[0.0; 64]));
    let memory = t.export_host().unwrap();
    let start = t.data_version();
    std::thread::scope(|s| {
        for k in 0..4 {
            let t = &t;
            s.spawn(move || {
                for _ in 0..100 {
                    // Values that do not depend on a read: the writes race on nothing but
                    // their order, which the write lock sets.
                    let data = TensorData::Host(Arc::new(arr(&[f64::from(k); 64]).into()));
                    loop {
                        let v = t.data_version();
                        if t.set_data_if(v, data.clone()) {
                            break;
                        }
                    }
                }
            });
        }
    });
    assert_eq!(t.data_version().wrapping_sub(start), 400);
    assert!(Arc::ptr_eq(&t.host_array().unwrap(), &memory));
    let last = memory.as_f64().unwrap().iter().copied().collect::<Vec<_>>();
    assert!(
        last.iter().all(|&x| x == last[0]),
        "one write's values, whole"
    );
}

#[test]
fn a_fallback_round_undone_puts_back_the_values_of_exported_memory() {
    // `bump2_` adds 1 to both arguments. In its first run the kernel writes `y` itself, as
    // another thread would: the write-back writes `x`, finds `y` written since it was read,
    // puts `x` back as it was, and runs the call again on the new values. `x`'s backup must
    // be a copy of its values: the write went into the exported memory where it is.
    native::install_fallback().unwrap();
    set_fallback_policy(FallbackPolicy::Allow);
    let (_, mut lib) = def_lib("expmem");
    let op = lib
        .define("bump2_(Tensor(a!) x, Tensor(b!) y) -> ()")
        .unwrap();
    let y = native::tensor(arr(&[10.0]));
    let meddled = Arc::new(AtomicBool::new(false));
    let (y_in, meddled_in) = (y.clone(), meddled.clone());
    lib.impl_kernel(
        "bump2_",
        DispatchKey::CPU,
        KernelFunction::from_boxed(move |_, _, stack| {
            if !meddled_in.swap(true, Ordering::SeqCst) {
                write(&y_in, arr(&[20.0]));
            }
            for v in stack.iter() {
                let t = v.as_tensor().unwrap();
                write(t, f64_array(t)? + 1.0);
            }
            stack.clear();
            Ok(())
        }),
        false,
    )
    .unwrap();
    let x = native::tensor(arr(&[1.0]));
    let memory = x.export_host().unwrap();
    op.call_boxed(&mut vec![
        boxfall::IValue::Tensor(x.clone()),
        boxfall::IValue::Tensor(y.clone()),
    ])
    .unwrap();
    assert!(meddled.load(Ordering::SeqCst));
    assert_eq!(values(&x), vec![2.0], "added once, not twice");
    assert_eq!(values(&y), vec![21.0]);
    assert!(Arc::ptr_eq(&x.host_array().unwrap(), &memory));
}

/// A CPU payload whose in-place write fails.
struct Unwritable;

impl Payload for Unwritable {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn duplicate(&self) -> Option<Result<Arc<dyn Payload>>> {
        Some(Ok(Arc::new(Unwritable)))
    }
    fn assign(&self, _src: &Tensor) -> Option<Result<()>> {
        Some(Err(boxfall::Error::Fallback(
            "this payload cannot be written".into(),
        )))
    }
}

#[test]
fn a_failed_write_back_puts_back_the_values_of_an_exported_cpu_tensor() {
    // `x`, a CPU tensor of exported host memory, is backed up from itself and written in
    // place; the write of `z` after it fails, and `x` goes back: to its values, which its
    // backup must hold apart from the memory the write changed.
    native::install_fallback().unwrap();
    set_fallback_policy(FallbackPolicy::Allow);
    let (_, mut lib) = def_lib("expmem");
    let op = lib
        .define("bump3_(Tensor(a!) n, Tensor(b!) x, Tensor(c!) z) -> ()")
        .unwrap();
    lib.impl_kernel(
        "bump3_",
        DispatchKey::CPU,
        KernelFunction::from_boxed(|_, _, stack| {
            for t in stack.iter().filter_map(|v| v.as_tensor()) {
                if t.is_host() {
                    write(t, f64_array(t)? + 1.0);
                }
            }
            stack.clear();
            Ok(())
        }),
        false,
    )
    .unwrap();
    let n = native::tensor(arr(&[10.0]));
    let x = Tensor::from_array(arr(&[1.0]));
    let memory = x.export_host().unwrap();
    let z = Tensor::foreign(Device::CPU, Arc::new(Unwritable));
    let err = op
        .call_boxed(&mut vec![
            boxfall::IValue::Tensor(n.clone()),
            boxfall::IValue::Tensor(x.clone()),
            boxfall::IValue::Tensor(z),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("cannot be written"), "{err}");
    assert_eq!(values(&x), vec![1.0], "put back");
    assert_eq!(values(&n), vec![10.0], "put back");
    assert!(Arc::ptr_eq(&x.host_array().unwrap(), &memory));
}
