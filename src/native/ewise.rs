//! The array API's element-wise arithmetic (`add`, `subtract`, `multiply`, `divide`) and
//! comparisons (`equal` ... `greater_equal`) on Native, in their three overloads (two arrays,
//! array and Python scalar, Python scalar and array), for every dtype: the operands promote
//! (`promote`), the one of another dtype is cast, and one flat loop computes over contiguous
//! memory (a broadcast walks with ndarray's `Zip`). Integers wrap, floats are IEEE (which
//! gives the standard's special cases), true division of integers is float64, complex division
//! is NumPy's. What is not covered goes to the CPU fallback: `subtract` of bools (NumPy
//! refuses it), ordering comparisons of complex numbers (the standard defines none), int64
//! against uint64 comparisons, and a Python int that the array's integer dtype cannot hold.

use std::borrow::Cow;

use ndarray::ArrayD;

use super::alloc::{try_full, try_map, try_map_slice, try_zip, try_zip_slices};
use super::cast::cast_host;
use super::elem::{with_elem, HostElem};
use super::promote::{division, promote, with_scalar, Weak};
use super::support::{broadcast, fall_back, native_host, native_host_of, result_of, run_blocking};
use crate::dispatcher::OperatorHandle;
use crate::error::Result;
use crate::ivalue::{IValue, Stack};
use crate::key::DispatchKeySet;
use crate::tensor::{DType, HostArray, Kind, Tensor};

/// The operators (the kernels' first const parameter).
pub(super) const ADD: u8 = 0;
pub(super) const SUB: u8 = 1;
pub(super) const MUL: u8 = 2;
pub(super) const DIV: u8 = 3;
pub(super) const EQ: u8 = 4;
pub(super) const NE: u8 = 5;
pub(super) const LT: u8 = 6;
pub(super) const LE: u8 = 7;
pub(super) const GT: u8 = 8;
pub(super) const GE: u8 = 9;

/// The overloads (the kernels' second const parameter).
pub(super) const TENSORS: u8 = 0;
pub(super) const TENSOR_SCALAR: u8 = 1;
pub(super) const SCALAR_TENSOR: u8 = 2;

/// One operand: an array, or a Python scalar already in the computation's element type.
enum Side<'a, T> {
    Array(&'a ArrayD<T>),
    Scalar(T),
}

fn weak(v: Option<&IValue>) -> Option<Weak> {
    match v {
        Some(IValue::Bool(b)) => Some(Weak::Bool(*b)),
        Some(IValue::Int(i)) => Some(Weak::Int(*i)),
        Some(IValue::Double(d)) => Some(Weak::Float(*d)),
        _ => None,
    }
}

/// The scalar as a `T` (a Python int as a float32 goes through a double, as Python's does).
fn scalar_as<T: HostElem>(s: Weak) -> T {
    match s {
        Weak::Bool(b) => T::from_bool(b),
        Weak::Int(i) if matches!(T::DTYPE, DType::F32 | DType::C64) => T::from_f64(i as f64),
        Weak::Int(i) => T::from_i64(i),
        Weak::Float(f) => T::from_f64(f),
    }
}

/// `f` over the two operands broadcast to `shape`.
fn zip_with<T: HostElem, O: Copy + Send>(
    op: &OperatorHandle,
    shape: &[usize],
    x: Side<'_, T>,
    y: Side<'_, T>,
    f: impl Fn(T, T) -> O + Sync + Send,
) -> Result<ArrayD<O>> {
    let what = result_of(op);
    let n = shape.iter().product();
    run_blocking(n, || match (x, y) {
        // Contiguous operands of the result's shape (the common case): their slices, without
        // the views (whose dynamic shapes and strides are copies) that `try_zip` would check.
        (Side::Array(a), Side::Array(b)) => match (a.as_slice(), b.as_slice()) {
            (Some(xs), Some(ys)) if a.shape() == shape && b.shape() == shape => {
                try_zip_slices(shape, xs, ys, &what, f)
            }
            _ => try_zip(shape, &a.view(), &b.view(), &what, f),
        },
        (Side::Array(a), Side::Scalar(s)) => match a.as_slice() {
            Some(xs) => try_map_slice(a.shape(), xs, &what, |v| f(v, s)),
            None => try_map(&a.view(), &what, |v| f(v, s)),
        },
        (Side::Scalar(s), Side::Array(b)) => match b.as_slice() {
            Some(ys) => try_map_slice(b.shape(), ys, &what, |v| f(s, v)),
            None => try_map(&b.view(), &what, |v| f(s, v)),
        },
        (Side::Scalar(s), Side::Scalar(t)) => try_full(shape, f(s, t), &what),
    })
}

/// The result of operator `OP` in element type `T`; `None`: not covered here.
fn compute<T: HostElem, const OP: u8>(
    op: &OperatorHandle,
    shape: &[usize],
    x: Side<'_, T>,
    y: Side<'_, T>,
    complex: bool,
) -> Result<Option<HostArray>> {
    let b = |a: ArrayD<bool>| Some(HostArray::Bool(a));
    Ok(match OP {
        ADD => Some(T::wrap(zip_with(op, shape, x, y, T::add)?)),
        SUB => Some(T::wrap(zip_with(op, shape, x, y, T::sub)?)),
        MUL => Some(T::wrap(zip_with(op, shape, x, y, T::mul)?)),
        DIV => Some(T::wrap(zip_with(op, shape, x, y, T::div)?)),
        EQ => b(zip_with(op, shape, x, y, |a, c| a == c)?),
        NE => b(zip_with(op, shape, x, y, |a, c| a != c)?),
        _ if complex => None,
        LT => b(zip_with(op, shape, x, y, T::less)?),
        LE => b(zip_with(op, shape, x, y, T::less_equal)?),
        GT => b(zip_with(op, shape, x, y, |a, c| T::less(c, a))?),
        GE => b(zip_with(op, shape, x, y, |a, c| T::less_equal(c, a))?),
        _ => None,
    })
}

/// `h` in dtype `d`: itself, or a cast copy.
fn as_dtype<'a>(op: &OperatorHandle, h: &'a HostArray, d: DType) -> Result<Cow<'a, HostArray>> {
    if h.dtype() == d {
        Ok(Cow::Borrowed(h))
    } else {
        Ok(Cow::Owned(cast_host(h, d, &result_of(op))?))
    }
}

/// The dtype the operator computes in, from the operands' promoted dtype; `None`: not covered.
fn computes_in<const OP: u8>(promoted: DType) -> Option<DType> {
    match OP {
        DIV => Some(division(promoted)),
        SUB if promoted == DType::Bool => None,
        _ => Some(promoted),
    }
}

/// The two-array overload on the stack's arguments.
fn tensors<const OP: u8>(op: &OperatorHandle, stack: &Stack) -> Result<Option<Tensor>> {
    match (stack.first(), stack.get(1)) {
        (Some(IValue::Tensor(x)), Some(IValue::Tensor(y))) => typed_tensors::<OP>(op, x, y),
        _ => Ok(None),
    }
}

/// The two-array overload of operator `OP` on the operands themselves: the result, or `None`
/// where the kernel hands the call to the CPU fallback (the boxed kernel then does, on the same
/// arguments). The typed entry of the kernel ([`super::NativeTensors`]), which a caller holding
/// the two tensors runs without building a stack.
pub(super) fn typed_tensors<const OP: u8>(
    op: &OperatorHandle,
    x: &Tensor,
    y: &Tensor,
) -> Result<Option<Tensor>> {
    let (Some((a, device)), Some((b, _))) = (native_host_of(x), native_host_of(y)) else {
        return Ok(None);
    };
    let same = a.shape() == b.shape();
    // Equal shapes and dtypes that the operator computes in (`x + y` of two float64 arrays):
    // no broadcast, no promotion, no cast.
    let d = a.dtype();
    if same && b.dtype() == d && computes_in::<OP>(d) == Some(d) {
        let complex = d.kind() == Kind::Complex;
        let out = with_elem!(d, T => match (T::of(&a), T::of(&b)) {
            (Some(x), Some(y)) => {
                compute::<T, OP>(op, a.shape(), Side::Array(x), Side::Array(y), complex)?
            }
            _ => None,
        });
        if let Some(o) = out {
            return Ok(Some(Tensor::host(device, o)));
        }
    }
    // Shapes that do not broadcast go to the CPU kernel, whose error is NumPy's (a
    // `ValueError`), as on every other backend, not a `KernelError` of Native's own.
    let Some(shape) = (if same {
        Some(Vec::new())
    } else {
        broadcast(a.shape(), b.shape())
    }) else {
        return Ok(None);
    };
    let (da, db) = (a.dtype(), b.dtype());
    let promoted = promote(da, db);
    // int64 against uint64 promotes to float64, which NumPy's comparisons avoid (and its
    // arithmetic rounds): left to the CPU kernel.
    let mixed_64 = promoted == DType::F64 && da.kind() != Kind::Float && db.kind() != Kind::Float;
    if mixed_64 && OP >= EQ {
        return Ok(None);
    }
    let Some(d) = computes_in::<OP>(promoted) else {
        return Ok(None);
    };
    // A cast copy of a large operand runs without the GIL too.
    let n = a.shape().iter().product::<usize>() + b.shape().iter().product::<usize>();
    let (x, y) = run_blocking(n, || -> Result<_> {
        Ok((as_dtype(op, &a, d)?, as_dtype(op, &b, d)?))
    })?;
    let complex = d.kind() == Kind::Complex;
    // Equal shapes (the common case) are the shape itself, not a broadcast one.
    let shape: &[usize] = if same { a.shape() } else { &shape };
    let out = with_elem!(d, T => match (T::of(&x), T::of(&y)) {
        (Some(x), Some(y)) => compute::<T, OP>(op, shape, Side::Array(x), Side::Array(y), complex)?,
        _ => None,
    });
    Ok(out.map(|o| Tensor::host(device, o)))
}

/// An overload with one Python scalar (`scalar_first`: `Scalar_Tensor`).
fn with_python_scalar<const OP: u8>(
    op: &OperatorHandle,
    stack: &Stack,
    scalar_first: bool,
) -> Result<Option<Tensor>> {
    let (t, s) = if scalar_first { (1, 0) } else { (0, 1) };
    let (Some((a, device)), Some(s)) = (native_host(stack.get(t)), weak(stack.get(s))) else {
        return Ok(None);
    };
    let Some(d) = with_scalar(a.dtype(), s).and_then(computes_in::<OP>) else {
        return Ok(None);
    };
    let x = run_blocking(a.shape().iter().product(), || as_dtype(op, &a, d))?;
    let complex = d.kind() == Kind::Complex;
    let shape = a.shape().to_vec();
    let out = with_elem!(d, T => match T::of(&x) {
        Some(x) => {
            let s = Side::Scalar(scalar_as::<T>(s));
            if scalar_first {
                compute::<T, OP>(op, &shape, s, Side::Array(x), complex)?
            } else {
                compute::<T, OP>(op, &shape, Side::Array(x), s, complex)?
            }
        }
        None => None,
    });
    Ok(out.map(|o| Tensor::host(device, o)))
}

/// The kernel of operator `OP` in overload `FORM`.
pub(super) fn kernel<const OP: u8, const FORM: u8>(
    op: &OperatorHandle,
    _keys: DispatchKeySet,
    stack: &mut Stack,
) -> Result<()> {
    let out = match FORM {
        TENSORS => tensors::<OP>(op, stack)?,
        _ => with_python_scalar::<OP>(op, stack, FORM == SCALAR_TENSOR)?,
    };
    match (out, FORM) {
        (Some(t), _) => {
            // The stack keeps its memory: the arguments go, the result takes their place.
            stack.clear();
            stack.push(IValue::Tensor(t));
            Ok(())
        }
        (None, TENSORS) => fall_back::<(Tensor, Tensor)>(op, stack),
        (None, TENSOR_SCALAR) => fall_back::<(Tensor, IValue)>(op, stack),
        (None, _) => fall_back::<(IValue, Tensor)>(op, stack),
    }
}
