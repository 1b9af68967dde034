//! Rust kernels of the Native backend for a core set of operators. Each reads its arguments
//! off the stack (so one table serves every operator) and hands any case it does not cover
//! (a dtype pair, a batched matmul, an explicit dtype) to the CPU fallback with
//! `call_fallback`, so the operator still runs. Large kernels run through the blocking hook,
//! which the Python bindings use to release the GIL.

use std::sync::{Arc, OnceLock};

use ndarray::{ArrayD, Axis, Ix2, LinalgScalar, ScalarOperand};

use crate::dispatcher::{Dispatcher, OperatorHandle};
use crate::error::{Error, Result};
use crate::fallback::{call_fallback, cpu_fallback};
use crate::ivalue::{IValue, Stack};
use crate::kernel::KernelFunction;
use crate::key::{DispatchKey, DispatchKeySet};
use crate::library::Library;
use crate::tensor::{Device, HostArray, Tensor};

/// Elements above which a kernel runs through the blocking hook (and, from Python, without
/// the GIL).
///
/// ```
/// # use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
/// # use boxfall::{native, Library, LibraryKind, Tensor};
/// static RUNS: AtomicUsize = AtomicUsize::new(0);
/// native::set_blocking_hook(|f| { RUNS.fetch_add(1, SeqCst); f() });
/// # let mut lib = Library::new("doc_blocking_elements", LibraryKind::Def).unwrap();
/// # let neg = lib.define("neg(Tensor self) -> Tensor").unwrap().typed::<(Tensor,), Tensor>().unwrap();
/// # native::register_kernels(&mut lib).unwrap();
/// let n = native::BLOCKING_ELEMENTS;
/// neg.call((native::tensor(ndarray::ArrayD::<f64>::ones(vec![n - 1])),)).unwrap();
/// assert_eq!(RUNS.load(SeqCst), 0); // small: runs in place
/// neg.call((native::tensor(ndarray::ArrayD::<f64>::ones(vec![n])),)).unwrap();
/// assert_eq!(RUNS.load(SeqCst), 1); // large: through the hook
/// ```
pub const BLOCKING_ELEMENTS: usize = 1 << 16;

type NativeKernel = fn(&OperatorHandle, DispatchKeySet, &mut Stack) -> Result<()>;

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
    KERNELS.iter().map(|(n, t, _)| (*n, *t)).collect()
}

/// Registers, in `lib`, Native's Rust kernel for every operator of `lib`'s namespace that is
/// defined with one of the known schemas (same name and argument types); returns the names.
///
/// ```
/// use boxfall::{Library, LibraryKind, native};
/// let mut lib = Library::new("doc_native_kernels", LibraryKind::Def).unwrap();
/// lib.define("relu(Tensor self) -> Tensor").unwrap();
/// assert_eq!(native::register_kernels(&mut lib).unwrap(), vec!["doc_native_kernels::relu"]);
/// ```
pub fn register_kernels(lib: &mut Library) -> Result<Vec<String>> {
    let mut done = Vec::new();
    for (name, types, kernel) in KERNELS {
        let full = lib.qualify(name);
        let Some(op) = Dispatcher::lookup(&full) else {
            continue;
        };
        let schema = op.schema()?;
        let actual: Vec<String> = schema
            .schema
            .arguments
            .iter()
            .map(|a| a.type_str())
            .collect();
        if actual.iter().map(String::as_str).ne(types.iter().copied()) {
            continue;
        }
        lib.impl_kernel(
            name,
            DispatchKey::NATIVE,
            KernelFunction::from_boxed(*kernel),
            false,
        )?;
        done.push(full);
    }
    Ok(done)
}

/// Runs a large computation; the Python bindings install a hook that releases the GIL.
///
/// ```
/// fn inline(work: &mut (dyn FnMut() + Send)) { work() }
/// let hook: boxfall::native::BlockingHook = inline;
/// let mut ran = false;
/// hook(&mut || ran = true);
/// assert!(ran);
/// ```
pub type BlockingHook = fn(&mut (dyn FnMut() + Send));

static BLOCKING_HOOK: OnceLock<BlockingHook> = OnceLock::new();

/// Installs the blocking hook (once).
///
/// ```
/// fn run(f: &mut (dyn FnMut() + Send)) { f() }
/// let _ = boxfall::native::set_blocking_hook(run);
/// ```
pub fn set_blocking_hook(h: BlockingHook) -> bool {
    BLOCKING_HOOK.set(h).is_ok()
}

fn run_blocking<T: Send>(elements: usize, f: impl FnOnce() -> T + Send) -> T {
    let hook = match BLOCKING_HOOK.get() {
        Some(h) if elements >= BLOCKING_ELEMENTS => h,
        _ => return f(),
    };
    let mut f = Some(f);
    let mut out = None;
    hook(&mut || {
        if let Some(f) = f.take() {
            out = Some(f());
        }
    });
    match (out, f) {
        (Some(v), _) => v,
        // A hook that did not run the work: run it here.
        (None, Some(f)) => f(),
        (None, None) => unreachable_work(),
    }
}

#[cold]
fn unreachable_work<T>() -> T {
    // `f` was taken and `out` is set in the same step; reaching here means the closure panicked
    // inside the hook and the panic was swallowed. Re-raise as a panic of our own.
    panic!("the blocking hook swallowed a panicking kernel")
}

/// The CPU fallback, for the cases a kernel does not cover.
fn fall_back(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    static FALLBACK: OnceLock<KernelFunction> = OnceLock::new();
    call_fallback(FALLBACK.get_or_init(cpu_fallback), op, keys, stack)
}

fn native_host(v: Option<&IValue>) -> Option<(Arc<HostArray>, Device)> {
    match v {
        Some(IValue::Tensor(t)) if t.key() == DispatchKey::NATIVE => {
            t.host_array().map(|h| (h, t.device()))
        }
        _ => None,
    }
}

fn kernel_error(op: &OperatorHandle, message: String) -> Error {
    Error::Kernel {
        context: format!("the Native kernel of '{}'", op.name()),
        message,
    }
}

fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n {
                a[i + a.len() - n]
            } else {
                1
            };
            let y = if i + b.len() >= n {
                b[i + b.len() - n]
            } else {
                1
            };
            match (x, y) {
                (x, y) if x == y => Some(x),
                (1, y) => Some(y),
                (x, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
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

fn apply<T: LinalgScalar + ScalarOperand + PartialEq + Send + Sync>(
    x: &ArrayD<T>,
    y: &ArrayD<T>,
    alpha: T,
    op: Bin,
) -> ArrayD<T> {
    run_blocking(x.len().max(y.len()), || match op {
        Bin::Add if alpha == T::one() => x + y,
        Bin::Sub if alpha == T::one() => x - y,
        Bin::Add => x + &(y * alpha),
        Bin::Sub => x - &(y * alpha),
        Bin::Mul => x * y,
        Bin::Div => x / y,
    })
}

/// Integer elements, whose arithmetic wraps on overflow as NumPy's does: the `+` of `apply`
/// would panic on overflow in a build with overflow checks (a debug build, the fuzz build).
trait Wrapping: Copy {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
}

macro_rules! wrapping {
    ($($t:ty),+) => {$(
        impl Wrapping for $t {
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
        }
    )+};
}
wrapping!(i32, i64);

/// `x + alpha*y`, `x - alpha*y` or `x * y` on integers, broadcast to `shape`, wrapping. Callers
/// never pass `Div`: integer division is true division in PyTorch, which the CPU kernel does.
fn apply_wrapping<T: Wrapping + Send + Sync>(
    x: &ArrayD<T>,
    y: &ArrayD<T>,
    shape: &[usize],
    alpha: T,
    op: Bin,
) -> Option<ArrayD<T>> {
    let (x, y) = (x.broadcast(shape)?, y.broadcast(shape)?);
    Some(run_blocking(x.len(), || {
        ndarray::Zip::from(&x)
            .and(&y)
            .map_collect(|&a, &b| match op {
                Bin::Add => a.add(b.mul(alpha)),
                Bin::Sub => a.sub(b.mul(alpha)),
                Bin::Mul | Bin::Div => a.mul(b),
            })
    }))
}

fn binary(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack, which: Bin) -> Result<()> {
    let (Some((a, device)), Some((b, _))) = (native_host(stack.first()), native_host(stack.get(1)))
    else {
        return fall_back(op, keys, stack);
    };
    let Some(shape) = broadcast(a.shape(), b.shape()) else {
        return Err(kernel_error(
            op,
            format!(
                "shapes {:?} and {:?} do not broadcast",
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
            HostArray::F64(apply(x, y, s, which))
        }
        (HostArray::F64(x), HostArray::F64(y), Some(Scalar::Int(s))) => {
            HostArray::F64(apply(x, y, s as f64, which))
        }
        (HostArray::F32(x), HostArray::F32(y), Some(Scalar::Float(s))) => {
            HostArray::F32(apply(x, y, s as f32, which))
        }
        (HostArray::F32(x), HostArray::F32(y), Some(Scalar::Int(s))) => {
            HostArray::F32(apply(x, y, s as f32, which))
        }
        // Integer division is true division in PyTorch (a float result): the CPU kernel decides.
        (HostArray::I64(x), HostArray::I64(y), Some(Scalar::Int(s)))
            if !matches!(which, Bin::Div) =>
        {
            match apply_wrapping(x, y, &shape, s, which) {
                Some(out) => HostArray::I64(out),
                None => return fall_back(op, keys, stack),
            }
        }
        (HostArray::I32(x), HostArray::I32(y), Some(Scalar::Int(s)))
            if !matches!(which, Bin::Div) && i32::try_from(s).is_ok() =>
        {
            match apply_wrapping(x, y, &shape, s as i32, which) {
                Some(out) => HostArray::I32(out),
                None => return fall_back(op, keys, stack),
            }
        }
        _ => return fall_back(op, keys, stack),
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
    keys: DispatchKeySet,
    stack: &mut Stack,
    float: fn(f64) -> f64,
    int: Option<fn(i64) -> i64>,
) -> Result<()> {
    let Some((a, device)) = native_host(stack.first()) else {
        return fall_back(op, keys, stack);
    };
    let n = a.shape().iter().product();
    let out = match (&*a, int) {
        (HostArray::F64(x), _) => HostArray::F64(run_blocking(n, || x.mapv(float))),
        (HostArray::F32(x), _) => {
            HostArray::F32(run_blocking(n, || x.mapv(|v| float(f64::from(v)) as f32)))
        }
        (HostArray::I64(x), Some(g)) => HostArray::I64(run_blocking(n, || x.mapv(g))),
        _ => return fall_back(op, keys, stack),
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
    unary(
        op,
        keys,
        stack,
        |v| if v > 0.0 { v } else { 0.0 },
        Some(|v| v.max(0)),
    )
}

/// The dimensions to reduce, normalized and sorted high to low; None for out of range.
fn reduce_dims(v: Option<&IValue>, ndim: usize) -> Option<Vec<usize>> {
    let dims: Vec<i64> = match v {
        None | Some(IValue::None) => vec![],
        Some(IValue::IntList(d)) => d.clone(),
        Some(IValue::Int(d)) => vec![*d],
        _ => return None,
    };
    if dims.is_empty() {
        return Some((0..ndim).rev().collect());
    }
    let mut out = dims
        .iter()
        .map(|&d| {
            let d = if d < 0 { d + ndim as i64 } else { d };
            usize::try_from(d).ok().filter(|&d| d < ndim.max(1))
        })
        .collect::<Option<Vec<usize>>>()?;
    out.sort_unstable_by(|a, b| b.cmp(a));
    out.dedup();
    Some(out)
}

/// A sum along one axis: floats by ndarray's (vectorised) sum, integers wrapping on overflow as
/// NumPy's do (ndarray's `sum_axis` panics on overflow in a build with overflow checks).
trait SumAxis: Sized {
    fn sum_axis(a: &ArrayD<Self>, axis: Axis) -> ArrayD<Self>;
}

impl SumAxis for f32 {
    fn sum_axis(a: &ArrayD<f32>, axis: Axis) -> ArrayD<f32> {
        a.sum_axis(axis)
    }
}

impl SumAxis for f64 {
    fn sum_axis(a: &ArrayD<f64>, axis: Axis) -> ArrayD<f64> {
        a.sum_axis(axis)
    }
}

impl SumAxis for i64 {
    fn sum_axis(a: &ArrayD<i64>, axis: Axis) -> ArrayD<i64> {
        a.fold_axis(axis, 0, |&s, &v| s.wrapping_add(v))
    }
}

fn reduce<T: LinalgScalar + SumAxis + Send + Sync>(
    x: &ArrayD<T>,
    dims: &[usize],
    keepdim: bool,
    mean: Option<fn(T, usize) -> T>,
) -> ArrayD<T> {
    run_blocking(x.len(), || {
        let mut r = x.clone();
        let mut count = 1usize;
        for &d in dims {
            if d < r.ndim() {
                count *= r.shape()[d];
                r = T::sum_axis(&r, Axis(d));
                if keepdim {
                    r.insert_axis_inplace(Axis(d));
                }
            }
        }
        match mean {
            Some(m) => r.mapv(|v| m(v, count)),
            None => r,
        }
    })
}

fn reduction(
    op: &OperatorHandle,
    keys: DispatchKeySet,
    stack: &mut Stack,
    with_dims: bool,
    mean: bool,
) -> Result<()> {
    let Some((a, device)) = native_host(stack.first()) else {
        return fall_back(op, keys, stack);
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
    let Some(dims) = reduce_dims(dims_arg, a.shape().len()) else {
        return Err(kernel_error(
            op,
            format!(
                "bad dimensions {dims_arg:?} for a {}-d tensor",
                a.shape().len()
            ),
        ));
    };
    if !matches!(dtype, None | Some(IValue::None)) {
        return fall_back(op, keys, stack);
    }
    let out = match (&*a, mean) {
        (HostArray::F64(x), true) => {
            HostArray::F64(reduce(x, &dims, keepdim, Some(|v, n| v / n as f64)))
        }
        (HostArray::F32(x), true) => {
            HostArray::F32(reduce(x, &dims, keepdim, Some(|v, n| v / n as f32)))
        }
        (HostArray::F64(x), false) => HostArray::F64(reduce(x, &dims, keepdim, None)),
        (HostArray::F32(x), false) => HostArray::F32(reduce(x, &dims, keepdim, None)),
        (HostArray::I64(x), false) => HostArray::I64(reduce(x, &dims, keepdim, None)),
        _ => return fall_back(op, keys, stack),
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

fn matmul2<T: LinalgScalar + Send + Sync>(
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
                "shapes {:?} and {:?} cannot be multiplied",
                x.shape(),
                y.shape()
            ),
        ));
    }
    let work = x.nrows() * x.ncols() * y.ncols();
    Ok(Some(run_blocking(work, || x.dot(&y).into_dyn())))
}

fn matmul(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    let (Some((a, device)), Some((b, _))) = (native_host(stack.first()), native_host(stack.get(1)))
    else {
        return fall_back(op, keys, stack);
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
        None => fall_back(op, keys, stack),
    }
}

fn transpose(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    let Some((a, device)) = native_host(stack.first()) else {
        return fall_back(op, keys, stack);
    };
    let ndim = a.shape().len() as i64;
    let dim = |v: Option<&IValue>| -> Option<usize> {
        let d = v?.to_int()?;
        let d = if d < 0 { d + ndim } else { d };
        usize::try_from(d)
            .ok()
            .filter(|&d| (d as i64) < ndim.max(1))
    };
    let (Some(d0), Some(d1)) = (dim(stack.get(1)), dim(stack.get(2))) else {
        return Err(kernel_error(
            op,
            format!("dimensions out of range for a {ndim}-d tensor"),
        ));
    };
    macro_rules! swap {
        ($x:expr) => {{
            let mut v = $x.view();
            if ($x.ndim()) > d0.max(d1) {
                v.swap_axes(d0, d1);
            }
            v.as_standard_layout().into_owned()
        }};
    }
    let out = match &*a {
        HostArray::F64(x) => HostArray::F64(swap!(x)),
        HostArray::F32(x) => HostArray::F32(swap!(x)),
        HostArray::I64(x) => HostArray::I64(swap!(x)),
        HostArray::I32(x) => HostArray::I32(swap!(x)),
        HostArray::Bool(x) => HostArray::Bool(swap!(x)),
    };
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
    fn reduce_dims_normalizes_and_rejects() {
        assert_eq!(
            reduce_dims(Some(&IValue::IntList(vec![-1, 0])), 3),
            Some(vec![2, 0])
        );
        assert_eq!(reduce_dims(None, 2), Some(vec![1, 0]));
        assert_eq!(reduce_dims(Some(&IValue::IntList(vec![3])), 3), None);
    }
}
