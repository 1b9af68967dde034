//! What Native's kernels share: the blocking hook that runs large work (and, from Python,
//! releases the GIL), the hand-off to the CPU fallback for the cases a kernel leaves, reading a
//! Native tensor's host array, the errors kernels raise, broadcasting and reduction axes. The
//! kernel files (`kernels`, `ewise`, `reduce`, `array_api`) stand on this one, so none of them
//! needs another's helpers.

use std::sync::{Arc, OnceLock};

use crate::dispatcher::OperatorHandle;
use crate::error::{Error, Result};
use crate::fallback::cpu_fallback;
use crate::ivalue::{CallArgs, IValue, Stack};
use crate::kernel::KernelFunction;
use crate::key::{DispatchKey, DispatchKeySet};
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

pub(super) type NativeKernel = fn(&OperatorHandle, DispatchKeySet, &mut Stack) -> Result<()>;

pub use crate::blocking::{set_blocking_hook, BlockingHook};

pub(super) fn run_blocking<T: Send>(elements: usize, f: impl FnOnce() -> T + Send) -> T {
    let hook = match crate::blocking::hook() {
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

/// Hands a call to the CPU fallback, for the cases a kernel does not cover: typed, with `A`
/// the kernel's argument types (`IValue` for a value the fallback passes on as it is), as a
/// backend's kernel calls c10's `call_fallback_fn`. A kernel that hands a call on falls back
/// like any other call, under the fallback policy: "warn" reports it and "error" refuses it
/// (and counts the refusal).
pub(super) fn fall_back<A: CallArgs + 'static>(
    op: &OperatorHandle,
    stack: &mut Stack,
) -> Result<()> {
    static FALLBACK: OnceLock<KernelFunction> = OnceLock::new();
    if stack.len() != A::LEN {
        return Err(Error::Fallback(format!(
            "CPU fallback of '{}': the stack holds {} values for {} arguments",
            op.name(),
            stack.len(),
            A::LEN
        )));
    }
    let args = A::pop_from(stack)?;
    let out = op
        .typed::<A, Tensor>()?
        .call_fallback(FALLBACK.get_or_init(cpu_fallback), args)?;
    *stack = vec![IValue::Tensor(out)];
    Ok(())
}

pub(super) fn native_host(v: Option<&IValue>) -> Option<(Arc<HostArray>, Device)> {
    match v {
        Some(IValue::Tensor(t)) => native_host_of(t),
        _ => None,
    }
}

/// A Native tensor's host array and device (`None`: another backend's, or foreign memory).
pub(super) fn native_host_of(t: &Tensor) -> Option<(Arc<HostArray>, Device)> {
    if t.key() == DispatchKey::NATIVE {
        t.host_array().map(|h| (h, t.device()))
    } else {
        None
    }
}

pub(super) fn kernel_error(op: &OperatorHandle, message: String) -> Error {
    Error::Kernel {
        context: format!("the Native kernel of '{}'", op.name()),
        message,
    }
}

/// What a kernel's result is, for an out-of-memory error.
pub(super) fn result_of(op: &OperatorHandle) -> impl Fn() -> String + Sync + '_ {
    move || format!("the result of '{}' on Native", op.name())
}

pub(super) fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
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

/// One axis as NumPy normalizes it: `d` or `d + ndim`, in `0..ndim` (a 0-d tensor has none).
pub(super) fn axis(d: i64, ndim: usize) -> std::result::Result<usize, String> {
    let n = ndim as i64;
    let k = if d < 0 { d + n } else { d };
    if (0..n).contains(&k) {
        Ok(k as usize)
    } else {
        Err(format!(
            "axis {d} is out of bounds for array of dimension {ndim}"
        ))
    }
}

/// The dimensions to reduce, normalized and sorted high to low; an error as NumPy's for one
/// out of range or given twice. None or an empty list reduce every dimension.
pub(super) fn reduce_dims(
    v: Option<&IValue>,
    ndim: usize,
) -> std::result::Result<Vec<usize>, String> {
    let dims: Vec<i64> = match v {
        None | Some(IValue::None) => vec![],
        Some(IValue::IntList(d)) => d.clone(),
        Some(IValue::Int(d)) => vec![*d],
        Some(other) => return Err(format!("dimensions must be ints, not {other:?}")),
    };
    if dims.is_empty() {
        return Ok((0..ndim).rev().collect());
    }
    let mut out = dims
        .iter()
        .map(|&d| axis(d, ndim))
        .collect::<std::result::Result<Vec<usize>, String>>()?;
    out.sort_unstable_by(|a, b| b.cmp(a));
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(format!("duplicate value in 'axis' {dims:?}"));
    }
    Ok(out)
}
