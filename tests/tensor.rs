//! Tensor handles: the byte count kept beside the data, and moving a result to a device.

use std::sync::Arc;

use boxfall::tensor::{HostArray, Payload, TensorData};
use boxfall::{native, Device, Tensor};
use ndarray::ArrayD;

struct Sized(usize);
impl Payload for Sized {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn nbytes(&self) -> usize {
        self.0
    }
}

#[test]
fn nbytes_follows_every_write_of_the_data() {
    let t = Tensor::from_array(ArrayD::<f64>::zeros(vec![4]));
    let alias = t.clone();
    assert_eq!(alias.nbytes(), 32);
    t.set_data(TensorData::Host(Arc::new(HostArray::from(
        ArrayD::<i32>::zeros(vec![3, 5]),
    ))));
    assert_eq!(alias.nbytes(), 60);
    assert!(alias.is_host());
    t.set_data(TensorData::Foreign(Arc::new(Sized(1000))));
    assert_eq!(alias.nbytes(), 1000);
    assert!(!alias.is_host());
    t.set_data(TensorData::Host(Arc::new(HostArray::from(
        ArrayD::<bool>::from_elem(vec![7], true),
    ))));
    assert_eq!((alias.nbytes(), alias.is_host()), (7, true));
}

#[test]
fn into_device_moves_a_tensor_alone_and_copies_the_handle_of_a_shared_one() {
    let alone = Tensor::from_array(ArrayD::<f64>::ones(vec![2]));
    let data = alone.host_array().unwrap();
    let moved = alone.into_device(native::DEVICE);
    assert_eq!(moved.device(), native::DEVICE);
    assert!(Arc::ptr_eq(&moved.host_array().unwrap(), &data));

    let shared = Tensor::from_array(ArrayD::<f64>::ones(vec![2]));
    let kept = shared.clone();
    let other = shared.into_device(native::DEVICE);
    assert_eq!(kept.device(), Device::CPU);
    assert_eq!(other.device(), native::DEVICE);
    assert!(!other.same(&kept));
    assert!(Arc::ptr_eq(
        &other.host_array().unwrap(),
        &kept.host_array().unwrap()
    ));
}

#[test]
fn into_device_moves_in_place_once_the_other_handles_are_dropped_even_on_another_thread() {
    // The tensor's kept loan shows whether the tensor itself moved (it keeps its loan) or a
    // new one was made (a new loan).
    let t = Tensor::from_array(ArrayD::<f64>::ones(vec![3]));
    let loan = t.host_loan().unwrap();
    let clone = t.clone();
    std::thread::spawn(move || drop(clone)).join().unwrap();
    let far = Device::new(boxfall::DispatchKey::NATIVE, u16::MAX);
    let moved = t.into_device(far);
    assert_eq!(moved.device(), far);
    assert_eq!(moved.key(), boxfall::DispatchKey::NATIVE);
    assert!(moved.host_loan().unwrap().same(&loan));
    // Moved back by a handle that is not alone: a new tensor, the old one unchanged.
    let kept = moved.clone();
    let back = moved.into_device(Device::CPU);
    assert_eq!((back.device(), kept.device()), (Device::CPU, far));
    assert!(!back.host_loan().unwrap().same(&loan));
}

struct Fixed(usize);
impl Payload for Fixed {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn nbytes(&self) -> usize {
        unreachable!("a fixed byte count is read once, through fixed_nbytes")
    }
    fn fixed_nbytes(&self) -> Option<usize> {
        Some(self.0)
    }
}

#[test]
fn a_fixed_payload_size_is_kept_by_the_tensor_and_it_stays_foreign() {
    let t = Tensor::foreign(native::DEVICE, Arc::new(Fixed(64)));
    assert_eq!(t.nbytes(), 64);
    assert!(!t.is_host());
    t.set_data(TensorData::Foreign(Arc::new(Fixed(0))));
    assert_eq!((t.nbytes(), t.is_host()), (0, false));
}

#[test]
fn loans_taken_while_another_thread_writes_always_hold_one_whole_write() {
    // Four threads lend one tensor and read their loan while a fifth writes the tensor over
    // and over: no deadlock (the writer takes the tensor's lock, then the loan's), and every
    // loan read sees one of the written arrays whole.
    let t = native::tensor(ArrayD::from_elem(vec![4], 0.0));
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads < 1000 {
                    let loan = t.host_loan().expect("host memory");
                    assert_eq!(loan.device(), Device::CPU);
                    let a = loan.host_array().expect("host memory");
                    let v = a.as_f64().expect("float64");
                    assert!(v.iter().all(|x| *x == v[[0]]), "a torn write: {v}");
                    reads += 1;
                }
            });
        }
        for i in 1..=20_000 {
            let next = HostArray::from(ArrayD::from_elem(vec![4], f64::from(i)));
            t.set_data(TensorData::Host(Arc::new(next)));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let last = t.host_loan().expect("host memory");
    assert_eq!(last.host_array().unwrap().as_f64().unwrap()[[0]], 20_000.0);
}
