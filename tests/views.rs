//! Views (`Tensor::view_of`): a view's values are made from its base when read after a write of
//! the base, a write of the view goes into the base, and the CPU fallback writes an in-place
//! argument that is a view through its base, all or nothing.

mod common;

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use boxfall::tensor::{TensorData, ViewOps};
use boxfall::{native, Device, DispatchKey, KernelFunction, Result, Tensor};
use common::*;
use ndarray::s;

/// The elements `from..to` of a float64 vector; counts how often it made its values.
struct Range {
    from: usize,
    to: usize,
    made: AtomicUsize,
}

impl ViewOps for Range {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn materialize(&self, base: &Tensor, _device: Device) -> Result<TensorData> {
        self.made.fetch_add(1, Ordering::SeqCst);
        let a = f64_array(base)?.slice(s![self.from..self.to]).to_owned();
        Ok(TensorData::Host(Arc::new(a.into_dyn().into())))
    }
    fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> {
        let mut a = f64_array(base)?;
        a.slice_mut(s![self.from..self.to]).assign(
            &f64_array(src)?
                .into_dimensionality::<ndarray::Ix1>()
                .unwrap(),
        );
        write(base, a.into_dyn());
        Ok(())
    }
}

fn range(base: &Tensor, from: usize, to: usize) -> (Tensor, Arc<Range>) {
    let ops = Arc::new(Range {
        from,
        to,
        made: AtomicUsize::new(0),
    });
    let v = Tensor::view_of(base, ops.clone(), (to - from) * 8).unwrap();
    (v, ops)
}

#[test]
fn a_view_is_made_when_read_and_again_only_after_its_base_is_written() {
    let base = native::tensor(arr(&[1.0, 2.0, 3.0]));
    let (v, ops) = range(&base, 1, 3);
    assert_eq!(
        ops.made.load(Ordering::SeqCst),
        0,
        "nothing made to make the view"
    );
    assert_eq!(v.nbytes(), 16);
    assert_eq!(values(&v), vec![2.0, 3.0]);
    assert_eq!(values(&v), vec![2.0, 3.0]);
    assert_eq!(
        ops.made.load(Ordering::SeqCst),
        1,
        "made once while the base is unchanged"
    );
    write(&base, arr(&[1.0, 5.0, 6.0]));
    assert_eq!(values(&v), vec![5.0, 6.0]);
    assert_eq!(ops.made.load(Ordering::SeqCst), 2);
    // The loan the fallback lends follows too.
    write(&base, arr(&[0.0, 7.0, 8.0]));
    let loan = v.host_loan().unwrap();
    assert_eq!(values(&loan), vec![7.0, 8.0]);
}

#[test]
fn a_write_of_a_view_goes_into_its_base_and_every_other_view() {
    let base = native::tensor(arr(&[1.0, 2.0, 3.0]));
    let (a, _) = range(&base, 0, 2);
    let (b, _) = range(&base, 1, 3);
    write(&a, arr(&[10.0, 20.0]));
    assert_eq!(values(&base), vec![10.0, 20.0, 3.0]);
    assert_eq!(values(&b), vec![20.0, 3.0]);
    assert_eq!(values(&a), vec![10.0, 20.0]);
}

#[test]
fn the_fallback_writes_an_in_place_argument_that_is_a_view_through_its_base() {
    native::install_fallback().unwrap();
    let (_, mut lib) = def_lib("views");
    let op = define_neg_(&mut lib);
    let base = native::tensor(arr(&[1.0, 2.0, 3.0]));
    let (v, _) = range(&base, 1, 3);
    let neg = op.typed::<(Tensor,), ()>().unwrap();
    neg.call((v.clone(),)).unwrap();
    assert_eq!(values(&base), vec![1.0, -2.0, -3.0]);
    assert_eq!(values(&v), vec![-2.0, -3.0]);
}

#[test]
fn a_kernel_that_fails_after_writing_a_view_changes_nothing() {
    native::install_fallback().unwrap();
    let (_, mut lib) = def_lib("views");
    let op = lib.define("bad_(Tensor(a!) a) -> ()").unwrap();
    lib.impl_kernel(
        "bad_",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), ()>(|_, (a,)| {
            write(&a, arr(&[9.0, 9.0]));
            Err(kernel_error("failed after writing"))
        }),
        false,
    )
    .unwrap();
    let base = native::tensor(arr(&[1.0, 2.0, 3.0]));
    let (v, _) = range(&base, 0, 2);
    assert!(op
        .typed::<(Tensor,), ()>()
        .unwrap()
        .call((v.clone(),))
        .is_err());
    assert_eq!(values(&base), vec![1.0, 2.0, 3.0]);
    assert_eq!(values(&v), vec![1.0, 2.0]);
}
