//! Native's integer kernels wrap on overflow, as NumPy's integer arithmetic does, instead of
//! panicking in a build with overflow checks (found by the `call_boxed` fuzz target).

use boxfall::tensor::HostArray;
use boxfall::{native, IValue, Library, LibraryKind, Stack, Tensor};
use ndarray::{arr1, ArrayD};

fn call(lib: &Library, name: &str, mut stack: Stack) -> HostArray {
    let op = boxfall::Dispatcher::find(&lib.qualify(name)).unwrap();
    op.call_boxed(&mut stack).unwrap();
    let t = stack[0].as_tensor().unwrap();
    assert_eq!(t.device(), native::DEVICE, "{name} ran on Native");
    (*t.to_host().unwrap()).clone()
}

fn i64s(v: &[i64]) -> Tensor {
    native::tensor(arr1(v).into_dyn())
}

fn i32s(v: &[i32]) -> Tensor {
    native::tensor(arr1(v).into_dyn())
}

#[test]
fn integer_add_sub_mul_and_sum_wrap_around() {
    let mut lib = Library::new("native_overflow", LibraryKind::Def).unwrap();
    for s in [
        "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
        "sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
        "mul.Tensor(Tensor self, Tensor other) -> Tensor",
        "sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    ] {
        lib.define(s).unwrap();
    }
    assert_eq!(native::register_kernels(&mut lib).unwrap().len(), 4);
    let max = i64::MAX;
    let one = IValue::Int(1);
    let out = call(
        &lib,
        "add.Tensor",
        vec![i64s(&[max, 1]).into(), i64s(&[1]).into(), one.clone()],
    );
    assert_eq!(out, HostArray::I64(arr1(&[i64::MIN, 2]).into_dyn()));
    let out = call(
        &lib,
        "add.Tensor",
        vec![i64s(&[0]).into(), i64s(&[max]).into(), IValue::Int(2)],
    );
    assert_eq!(out, HostArray::I64(arr1(&[max.wrapping_mul(2)]).into_dyn()));
    let out = call(
        &lib,
        "sub.Tensor",
        vec![i64s(&[i64::MIN]).into(), i64s(&[1]).into(), one],
    );
    assert_eq!(out, HostArray::I64(arr1(&[max]).into_dyn()));
    let out = call(
        &lib,
        "mul.Tensor",
        vec![i32s(&[i32::MAX, 3]).into(), i32s(&[2, 2]).into()],
    );
    assert_eq!(out, HostArray::I32(arr1(&[-2, 6]).into_dyn()));
    let out = call(&lib, "sum", vec![i64s(&[max, 1, 1]).into(), IValue::None]);
    assert_eq!(out, HostArray::I64(ArrayD::from_elem(vec![], i64::MIN + 1)));
}
