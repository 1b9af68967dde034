//! Native's Rust kernels: registered only for the schemas they implement, their argument checks
//! those of the NumPy kernels they stand in for, and their results allocated fallibly (a size
//! that overflows, or that the allocator refuses, is an `OutOfMemory` error, not an abort).
//! (The fallback policy on the cases they hand on is in tests/policy.rs.)

mod common;

use boxfall::{native, DispatchKey, Error, IValue, KernelFunction, Library, OperatorHandle, Stack};
use common::*;
use ndarray::ArrayD;

const SCHEMAS: &[&str] = &[
    "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "mul.Tensor(Tensor self, Tensor other) -> Tensor",
    "neg(Tensor self) -> Tensor",
    "relu(Tensor self) -> Tensor",
    "sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "matmul(Tensor self, Tensor other) -> Tensor",
    "transpose.int(Tensor self, int dim0, int dim1) -> Tensor",
];

/// A library defining `SCHEMAS` with Native's kernels and no CPU kernel: a call that would
/// fall back fails with NoKernel, so a result is the Rust kernel's.
fn native_ops() -> (String, Library) {
    let (ns, mut lib) = def_lib("nk");
    for s in SCHEMAS {
        lib.define(s).unwrap();
    }
    assert_eq!(
        native::register_kernels(&mut lib).unwrap().len(),
        SCHEMAS.len()
    );
    (ns, lib)
}

fn op(ns: &str, name: &str) -> OperatorHandle {
    boxfall::Dispatcher::lookup(&format!("{ns}::{name}")).unwrap()
}

fn call(op: &OperatorHandle, args: Vec<IValue>) -> boxfall::Result<Stack> {
    let mut stack = args;
    op.call_boxed(&mut stack)?;
    Ok(stack)
}

fn t(a: ArrayD<f64>) -> IValue {
    IValue::Tensor(native::tensor(a))
}

fn zeros(shape: &[usize]) -> IValue {
    t(ArrayD::zeros(shape.to_vec()))
}

fn kernel_message(e: Error) -> String {
    match e {
        Error::Kernel { context, message } => format!("{context}: {message}"),
        other => panic!("a kernel error, not {other:?}"),
    }
}

#[test]
fn a_result_whose_size_overflows_is_out_of_memory() {
    let (ns, _lib) = native_ops();
    // (2^31 x 0) @ (0 x 2^31): empty operands, a result of 2^62 float64s (2^65 bytes).
    let e = call(
        &op(&ns, "matmul"),
        vec![zeros(&[1 << 31, 0]), zeros(&[0, 1 << 31])],
    )
    .unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { bytes: None, .. }), "{e:?}");
    assert!(e.to_string().contains(&format!("'{ns}::matmul'")), "{e}");
}

#[test]
fn a_result_the_allocator_refuses_is_out_of_memory() {
    let (ns, _lib) = native_ops();
    // (2^24 x 0) @ (0 x 2^24): 2^51 bytes (2 PiB), beyond any address space of today.
    let (a, b) = (zeros(&[1 << 24, 0]), zeros(&[0, 1 << 24]));
    let e = call(&op(&ns, "matmul"), vec![a.clone(), b.clone()]).unwrap_err();
    assert!(
        matches!(e, Error::OutOfMemory { bytes: Some(n), .. } if n == 1 << 51),
        "{e:?}"
    );
    // The arguments are as they were.
    assert_eq!(shape(a.as_tensor().unwrap()), [1 << 24, 0]);
    assert_eq!(shape(b.as_tensor().unwrap()), [0, 1 << 24]);
    // Broadcasting to such a size is refused the same way.
    let e = call(
        &op(&ns, "add.Tensor"),
        vec![
            zeros(&[1 << 24, 1, 0]),
            zeros(&[1, 1 << 24, 0]),
            IValue::Int(1),
        ],
    )
    .map(|s| shape(s[0].as_tensor().unwrap()));
    assert_eq!(
        e.unwrap(),
        [1 << 24, 1 << 24, 0],
        "empty: nothing to allocate"
    );
}

#[test]
fn reductions_check_their_axes_as_numpy_does() {
    let (ns, _lib) = native_ops();
    let x = || t(arr_nd(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let sum = op(&ns, "sum.dim_IntList");
    let with = |dims: Vec<i64>| {
        call(
            &sum,
            vec![
                x(),
                IValue::IntList(dims),
                IValue::Bool(false),
                IValue::None,
            ],
        )
    };
    let dup = kernel_message(with(vec![0, 0]).unwrap_err());
    assert!(dup.contains("duplicate value in 'axis'"), "{dup}");
    assert!(dup.contains(&format!("'{ns}::sum.dim_IntList'")), "{dup}");
    // -1 and 1 are the same axis of a 2-d tensor.
    assert!(kernel_message(with(vec![1, -1]).unwrap_err()).contains("duplicate"));
    let out = kernel_message(with(vec![2]).unwrap_err());
    assert!(
        out.contains("axis 2 is out of bounds for array of dimension 2"),
        "{out}"
    );
    assert!(with(vec![-3]).is_err());
    assert_eq!(
        values(with(vec![0]).unwrap()[0].as_tensor().unwrap()),
        [5.0, 7.0, 9.0]
    );
    assert_eq!(
        values(with(vec![-1, 0]).unwrap()[0].as_tensor().unwrap()),
        [21.0]
    );
    // A 0-d tensor has no axis 0 (NumPy: AxisError).
    let mean = op(&ns, "mean.dim");
    let scalar = t(ArrayD::from_elem(vec![], 2.0));
    let e = call(
        &mean,
        vec![
            scalar,
            IValue::IntList(vec![0]),
            IValue::Bool(false),
            IValue::None,
        ],
    );
    assert!(kernel_message(e.unwrap_err()).contains("dimension 0"));
}

#[test]
fn transpose_checks_its_axes_as_numpy_does() {
    let (ns, _lib) = native_ops();
    let tr = op(&ns, "transpose.int");
    let x = || t(arr_nd(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let y = call(&tr, vec![x(), IValue::Int(0), IValue::Int(-1)]).unwrap();
    assert_eq!(shape(y[0].as_tensor().unwrap()), [3, 2]);
    assert_eq!(
        values(y[0].as_tensor().unwrap()),
        [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    let e = call(&tr, vec![x(), IValue::Int(0), IValue::Int(2)]).unwrap_err();
    assert!(kernel_message(e).contains("axis 2 is out of bounds"));
    let scalar = t(ArrayD::from_elem(vec![], 2.0));
    let e = call(&tr, vec![scalar, IValue::Int(0), IValue::Int(0)]).unwrap_err();
    assert!(kernel_message(e).contains("dimension 0"));
}

#[test]
fn elementwise_kernels_compute_as_numpy_does() {
    let (ns, _lib) = native_ops();
    // Integers wrap (a debug build would otherwise panic).
    let big = IValue::Tensor(native::tensor(ndarray::arr1(&[i64::MAX, 1]).into_dyn()));
    let one = IValue::Tensor(native::tensor(ndarray::arr1(&[1i64, 1]).into_dyn()));
    let s = call(
        &op(&ns, "add.Tensor"),
        vec![big.clone(), one, IValue::Int(1)],
    )
    .unwrap();
    let host = s[0].as_tensor().unwrap().to_host().unwrap();
    assert_eq!(
        host.as_ref(),
        &boxfall::tensor::HostArray::from(ndarray::arr1(&[i64::MIN, 2]).into_dyn())
    );
    let s = call(&op(&ns, "mul.Tensor"), vec![big.clone(), big.clone()]).unwrap();
    let host = s[0].as_tensor().unwrap().to_host().unwrap();
    assert_eq!(
        host.as_ref(),
        &boxfall::tensor::HostArray::from(ndarray::arr1(&[1i64, 1]).into_dyn())
    );
    let s = call(&op(&ns, "sum"), vec![big, IValue::None]).unwrap();
    let host = s[0].as_tensor().unwrap().to_host().unwrap();
    assert_eq!(
        host.as_ref(),
        &boxfall::tensor::HostArray::from(ArrayD::from_elem(vec![], i64::MIN))
    );
    // np.maximum(x, 0) keeps NaN.
    let r = call(&op(&ns, "relu"), vec![t(arr(&[f64::NAN, -1.0, 2.0]))]).unwrap();
    let v = values(r[0].as_tensor().unwrap());
    assert!(v[0].is_nan() && v[1..] == [0.0, 2.0], "{v:?}");
    // Shapes that do not broadcast, or multiply, raise naming the operator.
    let e = call(
        &op(&ns, "add.Tensor"),
        vec![zeros(&[3]), zeros(&[2]), IValue::Int(1)],
    )
    .unwrap_err();
    assert!(kernel_message(e).contains("could not be broadcast"));
    let e = call(&op(&ns, "matmul"), vec![zeros(&[2, 3]), zeros(&[2, 3])]).unwrap_err();
    assert!(kernel_message(e).contains("cannot be multiplied"));
    let m = call(
        &op(&ns, "matmul"),
        vec![
            t(arr_nd(&[2, 2], &[1.0, 2.0, 3.0, 4.0])),
            t(arr_nd(&[2, 1], &[1.0, 1.0])),
        ],
    )
    .unwrap();
    assert_eq!(values(m[0].as_tensor().unwrap()), [3.0, 7.0]);
}

#[test]
fn only_schemas_that_match_as_a_whole_get_a_native_kernel() {
    let (ns, mut lib) = def_lib("nkmatch");
    let defined = [
        // In place: Native's functional add would leave `self` as it was.
        "add.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
        // A view: Native's transpose returns a copy.
        "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
        // Returns Native's kernels do not leave.
        "neg(Tensor self) -> (Tensor, Tensor)",
        "relu(Tensor self) -> int",
        "exp(Tensor self) -> ()",
        "sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor[]",
        // This one matches.
        "mul.Tensor(Tensor self, Tensor other) -> Tensor",
    ];
    for s in defined {
        lib.define(s).unwrap();
    }
    for name in [
        "add.Tensor",
        "transpose.int",
        "neg",
        "relu",
        "exp",
        "sub.Tensor",
    ] {
        let cpu = KernelFunction::from_boxed(|_op: &OperatorHandle, _keys, stack: &mut Stack| {
            stack.clear();
            Ok(())
        });
        // Something for the other keys, so the table is not empty.
        lib.impl_kernel(name, DispatchKey::CPU, cpu, false).unwrap();
    }
    assert_eq!(
        native::register_kernels(&mut lib).unwrap(),
        vec![format!("{ns}::mul.Tensor")]
    );
    assert_eq!(
        source_of(&op(&ns, "add.Tensor"), DispatchKey::NATIVE),
        "missing"
    );
    assert_eq!(
        source_of(&op(&ns, "mul.Tensor"), DispatchKey::NATIVE),
        "kernel"
    );
}
