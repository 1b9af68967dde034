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
