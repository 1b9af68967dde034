//! Native's Rust kernels for the array API's schemas, from Rust: every dtype host memory holds,
//! the standard's promotion, weak Python scalars, integer wrap-around, NumPy's accumulation
//! dtypes; with no CPU kernel registered, a result is the Rust kernel's own (a case it hands on
//! fails with NoKernel).

mod common;

use boxfall::tensor::HostArray;
use boxfall::{native, DType, Error, IValue, Library, OperatorHandle, Stack, Tensor};
use common::*;
use ndarray::{arr1, arr2, ArrayD};
use num_complex::Complex;

const SCHEMAS: &[&str] = &[
    "add(Tensor x1, Tensor x2) -> Tensor",
    "add.Tensor_Scalar(Tensor x1, Scalar x2) -> Tensor",
    "subtract(Tensor x1, Tensor x2) -> Tensor",
    "subtract.Scalar_Tensor(Scalar x1, Tensor x2) -> Tensor",
    "multiply(Tensor x1, Tensor x2) -> Tensor",
    "divide(Tensor x1, Tensor x2) -> Tensor",
    "divide.Tensor_Scalar(Tensor x1, Scalar x2) -> Tensor",
    "less(Tensor x1, Tensor x2) -> Tensor",
    "equal.Tensor_Scalar(Tensor x1, Scalar x2) -> Tensor",
    "sum(Tensor x, *, int[1]? axis=None, str? dtype=None, bool keepdims=False) -> Tensor",
    "prod(Tensor x, *, int[1]? axis=None, str? dtype=None, bool keepdims=False) -> Tensor",
    "mean(Tensor x, *, int[1]? axis=None, bool keepdims=False) -> Tensor",
    "max(Tensor x, *, int[1]? axis=None, bool keepdims=False) -> Tensor",
    "min(Tensor x, *, int[1]? axis=None, bool keepdims=False) -> Tensor",
];

fn ops() -> (String, Library) {
    let (ns, mut lib) = def_lib("aa");
    for s in SCHEMAS {
        lib.define(s).unwrap();
    }
    assert_eq!(
        native::register_array_api_kernels(&mut lib).unwrap().len(),
        SCHEMAS.len()
    );
    // PyTorch's table is another one: none of these schemas is in it.
    assert!(native::register_kernels(&mut lib).unwrap().is_empty());
    (ns, lib)
}

fn call(ns: &str, name: &str, args: Vec<IValue>) -> boxfall::Result<HostArray> {
    let op: OperatorHandle = boxfall::Dispatcher::lookup(&format!("{ns}::{name}")).unwrap();
    let mut stack: Stack = args;
    op.call_boxed(&mut stack)?;
    match stack.pop() {
        Some(IValue::Tensor(t)) => {
            assert_eq!(t.device(), native::DEVICE);
            Ok((*t.host_array().unwrap()).clone())
        }
        other => panic!("a tensor, not {other:?}"),
    }
}

fn t(a: impl Into<HostArray>) -> IValue {
    IValue::Tensor(Tensor::host(native::DEVICE, a.into()))
}

fn reduce_args(x: IValue, axis: Option<Vec<i64>>, dtype: Option<&str>, keep: bool) -> Vec<IValue> {
    vec![
        x,
        axis.map_or(IValue::None, IValue::IntList),
        dtype.map_or(IValue::None, |d| IValue::Str(d.into())),
        IValue::Bool(keep),
    ]
}

#[test]
fn small_integers_promote_as_the_standard_says_and_wrap() {
    let (ns, _lib) = ops();
    let x = arr1(&[100i8, -128, 5]).into_dyn();
    let y = arr1(&[100u8, 1, 250]).into_dyn();
    // int8 + uint8 -> int16: no wrap.
    let s = call(&ns, "add", vec![t(x.clone()), t(y)]).unwrap();
    assert_eq!(s, HostArray::from(arr1(&[200i16, -127, 255]).into_dyn()));
    // int8 + int8 wraps as NumPy's.
    let w = call(&ns, "add", vec![t(x.clone()), t(x.clone())]).unwrap();
    assert_eq!(w, HostArray::from(arr1(&[-56i8, 0, 10]).into_dyn()));
    // A Python int keeps int8; true division is float64.
    let k = call(
        &ns,
        "add.Tensor_Scalar",
        vec![t(x.clone()), IValue::Int(28)],
    )
    .unwrap();
    assert_eq!(k, HostArray::from(arr1(&[-128i8, -100, 33]).into_dyn()));
    let q = call(&ns, "divide.Tensor_Scalar", vec![t(x), IValue::Int(4)]).unwrap();
    assert_eq!(q, HostArray::from(arr1(&[25.0f64, -32.0, 1.25]).into_dyn()));
}

#[test]
fn a_python_int_the_dtype_cannot_hold_is_left_to_the_cpu_kernel() {
    let (ns, _lib) = ops();
    let x = t(arr1(&[1u8, 2]).into_dyn());
    let e = call(&ns, "add.Tensor_Scalar", vec![x, IValue::Int(-1)]).unwrap_err();
    assert!(matches!(e, Error::NoKernel { .. }), "{e:?}");
}

#[test]
fn complex_arithmetic_and_comparisons() {
    let (ns, _lib) = ops();
    let a = arr1(&[Complex::new(1.0f32, 2.0), Complex::new(0.0, -1.0)]).into_dyn();
    let b = arr1(&[Complex::new(3.0f64, -4.0), Complex::new(0.0, -1.0)]).into_dyn();
    // complex64 * complex128 -> complex128.
    let p = call(&ns, "multiply", vec![t(a.clone()), t(b.clone())]).unwrap();
    assert_eq!(
        p,
        HostArray::from(arr1(&[Complex::new(11.0f64, 2.0), Complex::new(-1.0, 0.0)]).into_dyn())
    );
    let d = call(&ns, "divide", vec![t(b.clone()), t(b.clone())]).unwrap();
    assert_eq!(d.dtype(), DType::C128);
    let e = call(
        &ns,
        "equal.Tensor_Scalar",
        vec![t(a.clone()), IValue::Int(1)],
    )
    .unwrap();
    assert_eq!(e, HostArray::from(arr1(&[false, false]).into_dyn()));
    // The standard orders no complex numbers: left to the CPU kernel.
    let l = call(&ns, "less", vec![t(a), t(b)]).unwrap_err();
    assert!(matches!(l, Error::NoKernel { .. }), "{l:?}");
}

#[test]
fn bools_add_as_or_and_refuse_subtraction() {
    let (ns, _lib) = ops();
    let a = arr1(&[true, false, false]).into_dyn();
    let b = arr1(&[true, true, false]).into_dyn();
    let s = call(&ns, "add", vec![t(a.clone()), t(b.clone())]).unwrap();
    assert_eq!(s, HostArray::from(arr1(&[true, true, false]).into_dyn()));
    let e = call(&ns, "subtract", vec![t(a.clone()), t(b)]).unwrap_err();
    assert!(matches!(e, Error::NoKernel { .. }), "{e:?}");
    // A Python int with a bool array is int64.
    let r = call(&ns, "subtract.Scalar_Tensor", vec![IValue::Int(1), t(a)]).unwrap();
    assert_eq!(r, HostArray::from(arr1(&[0i64, 1, 1]).into_dyn()));
}

#[test]
fn reductions_accumulate_in_numpys_dtypes() {
    let (ns, _lib) = ops();
    let x = arr2(&[[100i8, 100], [-128, 127]]).into_dyn();
    let s = call(&ns, "sum", reduce_args(t(x.clone()), None, None, false)).unwrap();
    assert_eq!(s, HostArray::from(ArrayD::from_elem(vec![], 199i64)));
    let rows = call(
        &ns,
        "sum",
        reduce_args(t(x.clone()), Some(vec![-1]), None, true),
    )
    .unwrap();
    assert_eq!(rows, HostArray::from(arr2(&[[200i64], [-1]]).into_dyn()));
    let cols = call(
        &ns,
        "sum",
        reduce_args(t(x.clone()), Some(vec![0]), Some("int16"), false),
    );
    assert_eq!(
        cols.unwrap(),
        HostArray::from(arr1(&[-28i16, 227]).into_dyn())
    );
    let u = arr1(&[250u8, 10]).into_dyn();
    let us = call(&ns, "sum", reduce_args(t(u), None, None, false)).unwrap();
    assert_eq!(us, HostArray::from(ArrayD::from_elem(vec![], 260u64)));
    let m = call(
        &ns,
        "mean",
        vec![t(x.clone()), IValue::IntList(vec![1]), IValue::Bool(false)],
    );
    assert_eq!(
        m.unwrap(),
        HostArray::from(arr1(&[100.0f64, -0.5]).into_dyn())
    );
    let hi = call(
        &ns,
        "max",
        vec![t(x.clone()), IValue::None, IValue::Bool(false)],
    )
    .unwrap();
    assert_eq!(hi, HostArray::from(ArrayD::from_elem(vec![], 127i8)));
    let lo = call(
        &ns,
        "min",
        vec![t(x), IValue::IntList(vec![0]), IValue::Bool(true)],
    )
    .unwrap();
    assert_eq!(lo, HostArray::from(arr2(&[[-128i8, 100]]).into_dyn()));
    let p = arr1(&[3u16, 4, 5]).into_dyn();
    let pr = call(&ns, "prod", reduce_args(t(p), None, None, false)).unwrap();
    assert_eq!(pr, HostArray::from(ArrayD::from_elem(vec![], 60u64)));
}

#[test]
fn float_extremes_propagate_nan_and_complex_means_divide_as_numpy() {
    let (ns, _lib) = ops();
    let mut v: Vec<f64> = (0..100).map(f64::from).collect();
    v[57] = f64::NAN;
    let x = t(ArrayD::from_shape_vec(vec![100], v).unwrap());
    let HostArray::F64(m) = call(&ns, "max", vec![x, IValue::None, IValue::Bool(false)]).unwrap()
    else {
        panic!("float64")
    };
    assert!(m.iter().all(|v| v.is_nan()));
    let c = arr1(&[Complex::new(1.0f32, 3.0), Complex::new(2.0, -1.0)]).into_dyn();
    let mean = call(&ns, "mean", vec![t(c), IValue::None, IValue::Bool(false)]).unwrap();
    assert_eq!(
        mean,
        HostArray::from(ArrayD::from_elem(vec![], Complex::new(1.5f32, 1.0)))
    );
}

#[test]
fn every_dtype_holds_and_reports_its_bytes() {
    for d in DType::ALL {
        assert_eq!(DType::from_name(d.name()), Some(d));
    }
    let c = Tensor::host(
        native::DEVICE,
        HostArray::from(ArrayD::<Complex<f64>>::zeros(vec![3, 2])),
    );
    assert_eq!(c.nbytes(), 3 * 2 * 16);
    assert_eq!(c.describe(), "complex128[3, 2]");
    let u = HostArray::from(ArrayD::<u16>::zeros(vec![5]));
    assert_eq!((u.dtype(), u.nbytes()), (DType::U16, 10));
    let r = u.try_clone().unwrap();
    assert_eq!(r, u);
}
