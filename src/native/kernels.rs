//! Rust kernels of the Native backend for a core set of operators. Each reads its arguments
//! off the stack (so one table serves every operator) and hands any case it does not cover
//! (a dtype pair, a batched matmul, an explicit dtype) to the CPU fallback, which obeys the
//! fallback policy as a backend fallback does, so the operator still runs (or is refused, and
//! counted, under the "error" policy). Where they do compute, they agree with the NumPy kernels
//! they stand in for, argument checks included (axes out of range or repeated, shapes that do
//! not broadcast or multiply), and they allocate their results fallibly (`alloc`).
//! Large kernels run through the blocking hook, which the Python bindings use to release the
//! GIL.

use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayD, Axis, Ix2, LinalgScalar};

use super::alloc::{try_copy, try_full, try_map, try_zip};
use super::elem::{Elem, HostElem};
use super::reduce::{along, Sum};
use super::support::{
    axis, broadcast, fall_back, kernel_error, native_host, reduce_dims, result_of, run_blocking,
    NativeKernel,
};
use crate::dispatcher::{Dispatcher, OperatorHandle};
use crate::error::Result;
use crate::ivalue::{IValue, Stack};
use crate::kernel::KernelFunction;
use crate::key::{DispatchKey, DispatchKeySet};
use crate::library::Library;
use crate::schema::{FunctionSchema, Type};
use crate::tensor::{HostArray, Tensor};

/// Operator name, argument types as written, kernel.
const KERNELS: &[(&str, &[&str], NativeKernel)] = &[
    ("add.Tensor", &["Tensor", "Tensor", "Scalar"], add),
    ("sub.Tensor", &["Tensor", "Tensor", "Scalar"], sub),
    ("mul.Tensor", &["Tensor", "Tensor"], mul),
    ("div.Tensor", &["Tensor", "Tensor"], div),
    ("neg", &["Tensor"], neg),
    ("exp", &["Tensor"], exp),
    ("relu", &["Tensor"], relu),
    ("sum", &["Tensor", "ScalarType?"], sum_all),
    ("mean", &["Tensor", "ScalarType?"], mean_all),
    (
        "sum.dim_IntList",
        &["Tensor", "int[1]?", "bool", "ScalarType?"],
        sum_dim,
    ),
    (
        "mean.dim",
        &["Tensor", "int[1]?", "bool", "ScalarType?"],
        mean_dim,
    ),
    ("matmul", &["Tensor", "Tensor"], matmul),
    ("transpose.int", &["Tensor", "int", "int"], transpose),
];

/// The operators Native can implement: `(name, argument types)`.
///
/// ```
/// assert!(boxfall::native::kernel_names().iter().any(|(n, _)| *n == "add.Tensor"));
/// ```
pub fn kernel_names() -> Vec<(&'static str, &'static [&'static str])> {
    all_rows().map(|(n, t, _)| (*n, *t)).collect()
}

/// The PyTorch-style rows, then the array API's (`super::array_api`).
fn all_rows() -> impl Iterator<Item = &'static (&'static str, &'static [&'static str], NativeKernel)>
{
    KERNELS.iter().chain(super::array_api::rows())
}

/// Whether a kernel of these argument types serves `schema` as it is written: the same
/// argument types with no alias annotation (Native's kernels neither write nor alias their
/// arguments), and one plain `Tensor` return (what they leave on the stack).
fn serves(schema: &FunctionSchema, types: &[&str]) -> bool {
    let args = &schema.arguments;
    let returns = &schema.returns;
    !schema.is_vararg
        && !schema.is_varret
        && args.len() == types.len()
        && args
            .iter()
            .zip(types)
            .all(|(a, t)| a.alias.is_none() && a.type_str() == *t)
        && returns.len() == 1
        && returns[0].ty == Type::Tensor
        && returns[0].alias.is_none()
}

/// Registers, in `lib`, Native's Rust kernel for every operator of `lib`'s namespace that is
/// defined with one of the known schemas: the same name and argument types, no alias
/// annotation (an in-place or view schema of the same name is not Native's functional kernel),
/// and one `Tensor` return. Returns the names it registered. The schemas are PyTorch's
/// (`add.Tensor` with `alpha`, `sum.dim_IntList`...); [`register_array_api_kernels`] has the
/// array API standard's.
///
/// ```
/// use boxfall::{Library, LibraryKind, native};
/// let mut lib = Library::new("doc_native_kernels", LibraryKind::Def).unwrap();
/// lib.define("relu(Tensor self) -> Tensor").unwrap();
/// lib.define("neg(Tensor(a!) self) -> Tensor(a!)").unwrap(); // in place: not Native's neg
/// assert_eq!(native::register_kernels(&mut lib).unwrap(), vec!["doc_native_kernels::relu"]);
/// ```
pub fn register_kernels(lib: &mut Library) -> Result<Vec<String>> {
    register_rows(lib, KERNELS.iter(), |_| None)
}

/// Registers, in `lib`, Native's Rust kernels for the operators of `lib`'s namespace defined
/// with the array API standard's schemas as `boxfall.array_api` writes them: `add(Tensor x1,
/// Tensor x2)`, `add.Tensor_Scalar(Tensor x1, Scalar x2)`, `add.Scalar_Tensor`, the same for
/// `subtract`, `multiply`, `divide` and the six comparisons, and `sum`/`prod(Tensor x, *,
/// int[1]? axis, str? dtype, bool keepdims)`, `mean`/`max`/`min(Tensor x, *, int[1]? axis,
/// bool keepdims)`. They compute as NumPy does (type promotion, weak Python scalars, integer
/// wrap-around) for every dtype; the cases they leave go to the CPU fallback. Returns the
/// names it registered.
///
/// ```
/// use boxfall::{Library, LibraryKind, native};
/// let mut lib = Library::new("doc_native_array_api", LibraryKind::Def).unwrap();
/// lib.define("add.Tensor_Scalar(Tensor x1, Scalar x2) -> Tensor").unwrap();
/// lib.define("relu(Tensor self) -> Tensor").unwrap(); // PyTorch's: not this table's
/// assert_eq!(
///     native::register_array_api_kernels(&mut lib).unwrap(),
///     vec!["doc_native_array_api::add.Tensor_Scalar"]
/// );
/// ```
pub fn register_array_api_kernels(lib: &mut Library) -> Result<Vec<String>> {
    register_rows(lib, super::array_api::rows(), super::array_api::typed)
}

fn register_rows<'a>(
    lib: &mut Library,
    rows: impl Iterator<Item = &'a (&'static str, &'static [&'static str], NativeKernel)>,
    typed: fn(&str) -> Option<super::NativeTensors>,
) -> Result<Vec<String>> {
    let mut done: Vec<String> = Vec::new();
    for (name, types, kernel) in rows {
        let full = lib.qualify(name);
        let Some(op) = Dispatcher::lookup(&full) else {
            continue;
        };
        if !serves(&op.schema()?.schema, types) {
            continue;
        }
        let mut k = KernelFunction::from_boxed(*kernel);
        // A two-array kernel carries its typed entry (`NativeTensors`).
        if let Some(t) = typed(name) {
            k = k.with_tensors_entry(t.0);
        }
        lib.impl_kernel(name, DispatchKey::NATIVE, k, false)?;
        done.push(full);
    }
    Ok(done)
}

fn scalar(v: Option<&IValue>) -> Option<Scalar> {
    match v {
        Some(IValue::Int(i)) => Some(Scalar::Int(*i)),
        Some(IValue::Double(d)) => Some(Scalar::Float(*d)),
        Some(IValue::Bool(b)) => Some(Scalar::Int(i64::from(*b))),
        _ => None,
    }
}

#[derive(Clone, Copy)]
enum Scalar {
    Int(i64),
    Float(f64),
}

#[derive(Clone, Copy)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
}

fn apply<T: Elem>(
    op: &OperatorHandle,
    shape: &[usize],
    x: &ArrayD<T>,
    y: &ArrayD<T>,
    alpha: T,
    which: Bin,
) -> Result<ArrayD<T>> {
    let what = result_of(op);
    let (x, y) = (x.view(), y.view());
    let n = x.len().max(y.len());
    // As the NumPy kernel `self + alpha * other` computes it: the product first.
    run_blocking(n, || match which {
        Bin::Add if alpha == T::ONE => try_zip(shape, &x, &y, &what, T::add),
        Bin::Sub if alpha == T::ONE => try_zip(shape, &x, &y, &what, T::sub),
        Bin::Add => try_zip(shape, &x, &y, &what, |a, b| a.add(b.mul(alpha))),
        Bin::Sub => try_zip(shape, &x, &y, &what, |a, b| a.sub(b.mul(alpha))),
        Bin::Mul => try_zip(shape, &x, &y, &what, T::mul),
        Bin::Div => try_zip(shape, &x, &y, &what, T::div),
    })
}

/// `fall_back` for a binary kernel: add and sub take an `alpha`.
fn binary_fall_back(op: &OperatorHandle, stack: &mut Stack, which: Bin) -> Result<()> {
    match which {
        Bin::Add | Bin::Sub => fall_back::<(Tensor, Tensor, IValue)>(op, stack),
        Bin::Mul | Bin::Div => fall_back::<(Tensor, Tensor)>(op, stack),
    }
}

fn binary(op: &OperatorHandle, _keys: DispatchKeySet, stack: &mut Stack, which: Bin) -> Result<()> {
    let (Some((a, device)), Some((b, _))) = (native_host(stack.first()), native_host(stack.get(1)))
    else {
        return binary_fall_back(op, stack, which);
    };
    let Some(shape) = broadcast(a.shape(), b.shape()) else {
        return Err(kernel_error(
            op,
            format!(
                "operands could not be broadcast together with shapes {:?} and {:?}",
                a.shape(),
                b.shape()
            ),
        ));
    };
    let alpha = match which {
        Bin::Add | Bin::Sub => scalar(stack.get(2)),
        _ => Some(Scalar::Int(1)),
    };
    let out = match (&*a, &*b, alpha) {
        (HostArray::F64(x), HostArray::F64(y), Some(Scalar::Float(s))) => {
            HostArray::F64(apply(op, &shape, x, y, s, which)?)
        }
        (HostArray::F64(x), HostArray::F64(y), Some(Scalar::Int(s))) => {
            HostArray::F64(apply(op, &shape, x, y, s as f64, which)?)
        }
        (HostArray::F32(x), HostArray::F32(y), Some(Scalar::Float(s))) => {
            HostArray::F32(apply(op, &shape, x, y, s as f32, which)?)
        }
        (HostArray::F32(x), HostArray::F32(y), Some(Scalar::Int(s))) => {
            HostArray::F32(apply(op, &shape, x, y, s as f32, which)?)
        }
        // Integer division is true division in PyTorch (a float result): the CPU kernel decides.
        (HostArray::I64(x), HostArray::I64(y), Some(Scalar::Int(s)))
            if !matches!(which, Bin::Div) =>
        {
            HostArray::I64(apply(op, &shape, x, y, s, which)?)
        }
        (HostArray::I32(x), HostArray::I32(y), Some(Scalar::Int(s)))
            if !matches!(which, Bin::Div) && i32::try_from(s).is_ok() =>
        {
            HostArray::I32(apply(op, &shape, x, y, s as i32, which)?)
        }
        _ => return binary_fall_back(op, stack, which),
    };
    *stack = vec![IValue::Tensor(Tensor::host(device, out))];
    Ok(())
}

fn add(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    binary(op, keys, stack, Bin::Add)
}
fn sub(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    binary(op, keys, stack, Bin::Sub)
}
fn mul(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    binary(op, keys, stack, Bin::Mul)
}
fn div(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    binary(op, keys, stack, Bin::Div)
}

/// A unary kernel: `float` maps floats, `int` maps integers (None: the CPU kernel decides).
fn unary(
    op: &OperatorHandle,
    _keys: DispatchKeySet,
    stack: &mut Stack,
    float: fn(f64) -> f64,
    int: Option<fn(i64) -> i64>,
) -> Result<()> {
    let Some((a, device)) = native_host(stack.first()) else {
        return fall_back::<(Tensor,)>(op, stack);
    };
    let what = result_of(op);
    let n = a.shape().iter().product();
    let out = match (&*a, int) {
        (HostArray::F64(x), _) => {
            HostArray::F64(run_blocking(n, || try_map(&x.view(), &what, float))?)
        }
        (HostArray::F32(x), _) => HostArray::F32(run_blocking(n, || {
            try_map(&x.view(), &what, |v| float(f64::from(v)) as f32)
        })?),
        (HostArray::I64(x), Some(g)) => {
            HostArray::I64(run_blocking(n, || try_map(&x.view(), &what, g))?)
        }
        _ => return fall_back::<(Tensor,)>(op, stack),
    };
    *stack = vec![IValue::Tensor(Tensor::host(device, out))];
    Ok(())
}

fn neg(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    unary(op, keys, stack, |v| -v, Some(i64::wrapping_neg))
}
fn exp(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    unary(op, keys, stack, f64::exp, None)
}
fn relu(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    // `np.maximum(x, 0)`: NaN propagates.
    unary(
        op,
        keys,
        stack,
        |v| if v > 0.0 || v.is_nan() { v } else { 0.0 },
        Some(|v| v.max(0)),
    )
}

/// The sum over `dims` (high to low), and how many elements each result sums.
fn reduce<T: HostElem>(
    x: &ArrayD<T>,
    dims: &[usize],
    keepdim: bool,
    what: &(dyn Fn() -> String + Sync),
) -> Result<(ArrayD<T>, usize)> {
    run_blocking(x.len(), || {
        let mut count = 1usize;
        let mut r: Option<ArrayD<T>> = None;
        for &d in dims {
            let src = r.as_ref().map_or_else(|| x.view(), |a| a.view());
            count *= src.len_of(Axis(d));
            let mut next = along(&src, Axis(d), &Sum, what)?;
            if keepdim {
                next.insert_axis_inplace(Axis(d));
            }
            r = Some(next);
        }
        let r = match r {
            Some(r) => r,
            None => try_copy(&x.view(), what)?,
        };
        Ok((r, count))
    })
}

/// `fall_back` for a reduction: the whole tensor's, or along dimensions.
fn reduction_fall_back(op: &OperatorHandle, stack: &mut Stack, with_dims: bool) -> Result<()> {
    if with_dims {
        fall_back::<(Tensor, IValue, bool, IValue)>(op, stack)
    } else {
        fall_back::<(Tensor, IValue)>(op, stack)
    }
}

fn reduction(
    op: &OperatorHandle,
    _keys: DispatchKeySet,
    stack: &mut Stack,
    with_dims: bool,
    mean: bool,
) -> Result<()> {
    let Some((a, device)) = native_host(stack.first()) else {
        return reduction_fall_back(op, stack, with_dims);
    };
    let (dims_arg, keepdim, dtype) = if with_dims {
        (
            stack.get(1),
            matches!(stack.get(2), Some(IValue::Bool(true))),
            stack.get(3),
        )
    } else {
        (None, false, stack.get(1))
    };
    let dims = reduce_dims(dims_arg, a.shape().len()).map_err(|m| kernel_error(op, m))?;
    if !matches!(dtype, None | Some(IValue::None)) {
        return reduction_fall_back(op, stack, with_dims);
    }
    let what = result_of(op);
    let out = match (&*a, mean) {
        (HostArray::F64(x), true) => {
            let (mut r, n) = reduce(x, &dims, keepdim, &what)?;
            r.mapv_inplace(|v| v / n as f64);
            HostArray::F64(r)
        }
        (HostArray::F32(x), true) => {
            let (mut r, n) = reduce(x, &dims, keepdim, &what)?;
            r.mapv_inplace(|v| v / n as f32);
            HostArray::F32(r)
        }
        (HostArray::F64(x), false) => HostArray::F64(reduce(x, &dims, keepdim, &what)?.0),
        (HostArray::F32(x), false) => HostArray::F32(reduce(x, &dims, keepdim, &what)?.0),
        (HostArray::I64(x), false) => HostArray::I64(reduce(x, &dims, keepdim, &what)?.0),
        _ => return reduction_fall_back(op, stack, with_dims),
    };
    *stack = vec![IValue::Tensor(Tensor::host(device, out))];
    Ok(())
}

fn sum_all(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    reduction(op, keys, stack, false, false)
}
fn mean_all(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    reduction(op, keys, stack, false, true)
}
fn sum_dim(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    reduction(op, keys, stack, true, false)
}
fn mean_dim(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    reduction(op, keys, stack, true, true)
}

/// The product of two matrices; None for other ranks (the CPU kernel's batched rules decide).
fn matmul2<T: LinalgScalar + Elem>(
    op: &OperatorHandle,
    x: &ArrayD<T>,
    y: &ArrayD<T>,
) -> Result<Option<ArrayD<T>>> {
    let (Ok(x), Ok(y)) = (
        x.view().into_dimensionality::<Ix2>(),
        y.view().into_dimensionality::<Ix2>(),
    ) else {
        return Ok(None);
    };
    if x.ncols() != y.nrows() {
        return Err(kernel_error(
            op,
            format!(
                "shapes {:?} and {:?} cannot be multiplied ({} columns against {} rows)",
                x.shape(),
                y.shape(),
                x.ncols(),
                y.nrows()
            ),
        ));
    }
    let mut out = try_full(&[x.nrows(), y.ncols()], T::ZERO, &result_of(op))?;
    let mut c = out
        .view_mut()
        .into_dimensionality::<Ix2>()
        .map_err(|e| kernel_error(op, e.to_string()))?;
    let work = x
        .nrows()
        .saturating_mul(x.ncols())
        .saturating_mul(y.ncols());
    run_blocking(work, || general_mat_mul(T::ONE, &x, &y, T::ZERO, &mut c));
    Ok(Some(out))
}

fn matmul(op: &OperatorHandle, _keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    let (Some((a, device)), Some((b, _))) = (native_host(stack.first()), native_host(stack.get(1)))
    else {
        return fall_back::<(Tensor, Tensor)>(op, stack);
    };
    let out = match (&*a, &*b) {
        (HostArray::F64(x), HostArray::F64(y)) => matmul2(op, x, y)?.map(HostArray::F64),
        (HostArray::F32(x), HostArray::F32(y)) => matmul2(op, x, y)?.map(HostArray::F32),
        _ => None,
    };
    match out {
        Some(out) => {
            *stack = vec![IValue::Tensor(Tensor::host(device, out))];
            Ok(())
        }
        // Batched or mixed: the CPU kernel knows the broadcasting rules.
        None => fall_back::<(Tensor, Tensor)>(op, stack),
    }
}

fn transpose(op: &OperatorHandle, _keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    let Some((a, device)) = native_host(stack.first()) else {
        return fall_back::<(Tensor, i64, i64)>(op, stack);
    };
    let ndim = a.shape().len();
    let dim = |v: Option<&IValue>| -> std::result::Result<usize, String> {
        match v.and_then(IValue::to_int) {
            Some(d) => axis(d, ndim),
            None => Err(format!("dimensions must be ints, not {v:?}")),
        }
    };
    let (d0, d1) = match (dim(stack.get(1)), dim(stack.get(2))) {
        (Ok(d0), Ok(d1)) => (d0, d1),
        (Err(m), _) | (_, Err(m)) => return Err(kernel_error(op, m)),
    };
    let what = result_of(op);
    macro_rules! swap {
        ($x:expr) => {{
            let mut v = $x.view();
            v.swap_axes(d0, d1);
            try_copy(&v, &what)?
        }};
    }
    let out = crate::tensor::host_map!(&*a, x => swap!(x));
    *stack = vec![IValue::Tensor(Tensor::host(device, out))];
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_shapes_follow_numpy() {
        assert_eq!(broadcast(&[2, 3], &[3]), Some(vec![2, 3]));
        assert_eq!(broadcast(&[2, 1], &[1, 4]), Some(vec![2, 4]));
        assert_eq!(broadcast(&[2, 3], &[2]), None);
        assert_eq!(broadcast(&[], &[5]), Some(vec![5]));
    }

    #[test]
    fn reduce_dims_normalizes_and_rejects_as_numpy_does() {
        assert_eq!(
            reduce_dims(Some(&IValue::IntList(vec![-1, 0])), 3),
            Ok(vec![2, 0])
        );
        assert_eq!(reduce_dims(None, 2), Ok(vec![1, 0]));
        assert_eq!(reduce_dims(Some(&IValue::IntList(vec![])), 0), Ok(vec![]));
        let out = reduce_dims(Some(&IValue::IntList(vec![3])), 3).unwrap_err();
        assert!(
            out.contains("axis 3 is out of bounds for array of dimension 3"),
            "{out}"
        );
        let dup = reduce_dims(Some(&IValue::IntList(vec![0, 0])), 2).unwrap_err();
        assert!(dup.contains("duplicate value in 'axis'"), "{dup}");
        assert!(reduce_dims(Some(&IValue::IntList(vec![1, -1])), 2).is_err());
        assert!(reduce_dims(Some(&IValue::Int(0)), 0).is_err()); // a 0-d tensor has no axis 0
    }

    #[test]
    fn only_a_functional_schema_is_served() {
        let parse = |s: &str| FunctionSchema::parse(s).unwrap();
        let types = &["Tensor", "Tensor", "Scalar"][..];
        assert!(serves(
            &parse("t::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"),
            types
        ));
        for bad in [
            "t::add.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
            "t::add.Tensor(Tensor(a) self, Tensor other, *, Scalar alpha=1) -> Tensor(a)",
            "t::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> (Tensor, Tensor)",
            "t::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> int",
            "t::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> ()",
            "t::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor[]",
            "t::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor(a)",
            "t::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
            "t::add.Tensor(Tensor self, Tensor other) -> Tensor",
        ] {
            assert!(!serves(&parse(bad), types), "{bad}");
        }
    }
}
