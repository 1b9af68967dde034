//! Binding the caller's arguments to the schema's, as the general path binds them.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList};

use crate::key::{DispatchKey, DispatchKeySet};
use crate::python::convert::{
    is_exact_ndarray, is_numpy_array, to_ivalue, to_py, Passed, TensorStyle,
};
use crate::python::plan::{ArgPlan, Body, Kind};
use crate::python::tensor::{as_tensor, wrap, PyTensor};

use super::objs::Objs;

/// The arguments as the kernel gets them, with what the caller gave (for the identity of
/// returned tensors) and the key set of their tensors.
pub(super) struct Bound_<'py> {
    pub(super) kernel: Objs<'py>,
    pub(super) given: Objs<'py>,
    pub(super) keys: DispatchKeySet,
    /// The kernel objects are the caller's tuple, item by item: call with it.
    pub(super) reuse: bool,
    /// Some kernel objects are device tensors still to be wrapped (`wrapped`).
    pub(super) wraps: bool,
    /// Bit i: argument i took its default.
    pub(super) defaulted: u32,
}

/// The kernel objects with every device tensor as a new `bf.Tensor` of its tensor, one per
/// tensor in the call (what the general path's `to_py` gives a kernel).
pub(super) fn wrapped<'py>(b: &Bound_<'py>) -> PyResult<Objs<'py>> {
    let mut out = Objs::new();
    for (i, k) in b.kernel.iter().enumerate() {
        let Ok(t) = k.cast::<PyTensor>() else {
            out.push(k.clone());
            continue;
        };
        let inner = &t.get().inner;
        let earlier = b.kernel.range(0, i).zip(out.iter()).find_map(|(e, w)| {
            e.cast::<PyTensor>()
                .ok()
                .filter(|e| e.get().inner.same(inner))
                .map(|_| w.clone())
        });
        out.push(match earlier {
            Some(w) => w,
            None => wrap(k.py(), inner.clone())?,
        });
    }
    Ok(out)
}

/// Whether `obj` is an exact `int` (in range), `float` or `bool` as `kind` takes it: a value
/// that binds to itself (the kernel gets it, and a kernel's return comes back, as it is).
/// False for a tensor's kind and for `str`, which the general path binds.
#[inline(always)]
pub(super) fn is_exact_scalar(obj: &Bound<'_, PyAny>, kind: Kind) -> bool {
    match kind {
        Kind::Int => obj.is_exact_instance_of::<PyInt>() && fits_i64(obj),
        Kind::Float => obj.is_exact_instance_of::<PyFloat>(),
        Kind::Bool => obj.is_exact_instance_of::<PyBool>(),
        Kind::Scalar => {
            obj.is_exact_instance_of::<PyBool>()
                || obj.is_exact_instance_of::<PyFloat>()
                || (obj.is_exact_instance_of::<PyInt>() && fits_i64(obj))
        }
        Kind::Tensor | Kind::Str => false,
    }
}

pub(super) fn fits_i64(obj: &Bound<'_, PyAny>) -> bool {
    obj.extract::<i64>().is_ok()
}

/// An argument as the kernel gets it (the object the general path would build from its
/// `IValue`); None where the general path would raise, or where the fast path does not go.
pub(super) fn kernel_arg<'py>(
    obj: &Bound<'py, PyAny>,
    a: &ArgPlan,
    keys: &mut DispatchKeySet,
    wraps: &mut bool,
) -> Option<Bound<'py, PyAny>> {
    if a.optional && obj.is_none() {
        return Some(obj.clone());
    }
    let exact = match a.kind {
        Kind::Tensor => {
            // A plain `ndarray` first, by its type pointer (a comparison); then a `bf.Tensor`,
            // whose check walks the array's bases when it is none (no object is both).
            if is_exact_ndarray(obj) {
                *keys |= DispatchKey::CPU;
                return Some(obj.clone());
            }
            if let Some(t) = as_tensor(obj) {
                // A device tensor reaches a kernel as a new `bf.Tensor` of the same tensor
                // (made in `run` once the kernel is known to be a Python one); CPU ones, and
                // written ones, go the general way.
                let inner = &t.get().inner;
                if a.write || inner.key() == DispatchKey::CPU {
                    return None;
                }
                *keys |= inner.key();
                *wraps = true;
                return Some(obj.clone());
            }
            if is_numpy_array(obj) {
                *keys |= DispatchKey::CPU;
                return Some(obj.clone());
            }
            return None;
        }
        kind => is_exact_scalar(obj, kind),
    };
    if exact {
        return Some(obj.clone());
    }
    let v = to_ivalue(obj, &a.ty, &mut Passed::default()).ok()?;
    to_py(obj.py(), &v, &Passed::default(), TensorStyle::Caller).ok()
}

/// Binds a call's arguments as `convert::bind` does, or None (the general path then binds, and
/// raises if they do not bind). Fills `b`, which starts empty: the bound arguments are about
/// 160 bytes, which a returned `Option<Bound_>` would have copied out twice by `memcpy`.
pub(super) fn bind_call<'py>(
    py: Python<'py>,
    body: &Body,
    args: &[Bound<'py, PyAny>],
    kwargs: Option<&Bound<'py, PyDict>>,
    b: &mut Bound_<'py>,
) -> Option<()> {
    let n = args.len();
    if n > body.positional {
        return None;
    }
    let kw = kwargs.filter(|k| !k.is_empty());
    let nkw = kw.map_or(0, |k| k.len());
    let mut matched = 0;
    b.reuse = n == body.args.len() && !body.kwonly;
    let mut keys = DispatchKeySet::EMPTY;
    for (i, a) in body.args.iter().enumerate() {
        let given = if i < n {
            Some(args[i].clone())
        } else if let Some(kw) = kw {
            let g = kw.get_item(a.name.bind(py)).ok()?;
            matched += usize::from(g.is_some());
            g
        } else {
            None
        };
        let (obj, given) = match given {
            Some(g) => (kernel_arg(&g, a, &mut keys, &mut b.wraps)?, g),
            None => {
                let d = a.default.as_ref()?.bind(py).clone();
                b.defaulted |= 1 << i;
                (d.clone(), d)
            }
        };
        b.reuse &= obj.is(&given);
        b.kernel.push(obj);
        b.given.push(given);
    }
    if matched != nkw {
        return None;
    }
    b.keys = keys;
    Some(())
}

impl Bound_<'_> {
    pub(super) fn empty() -> Self {
        Bound_ {
            kernel: Objs::new(),
            given: Objs::new(),
            keys: DispatchKeySet::EMPTY,
            reuse: false,
            wraps: false,
            defaulted: 0,
        }
    }
}

/// The objects of a boxed stack (every argument), as `redispatch_boxed` converts them.
/// Fills `b`, which starts empty (as `bind_call` does, to spare two copies of it).
pub(super) fn bind_stack<'py>(
    body: &Body,
    stack: &Bound<'py, PyList>,
    b: &mut Bound_<'py>,
) -> Option<()> {
    if stack.len() != body.args.len() {
        return None;
    }
    let mut keys = DispatchKeySet::EMPTY;
    for (a, g) in body.args.iter().zip(stack.iter()) {
        let obj = kernel_arg(&g, a, &mut keys, &mut b.wraps)?;
        b.kernel.push(obj);
        b.given.push(g);
    }
    b.keys = keys;
    Some(())
}

/// Whether no keyword argument was given.
#[inline(always)]
pub(super) fn no_kwargs(kwargs: Option<&Bound<'_, PyDict>>) -> bool {
    kwargs.is_none_or(|k| k.is_empty())
}

/// Whether a call takes the lean path ([`run_lean`]): every argument given by position, each
/// one bound to itself (`kernel_arg` gives the caller's object back: a NumPy `ndarray`, an
/// exact `int` that fits, `float` or `bool`, or None where the argument is optional), so that
/// the kernel gets the caller's own argument array; and one return. Nothing else is looked at:
/// a call that is not lean takes `bind_call` and `run`.
#[inline(always)]
pub(super) fn lean_args(body: &Body, args: &[Bound<'_, PyAny>]) -> bool {
    if args.len() != body.args.len() || body.kwonly || body.rets.len() != 1 {
        return false;
    }
    for (i, a) in body.args.iter().enumerate() {
        // In range: the lengths are equal.
        if !binds_to_itself(&args[i], a) {
            return false;
        }
    }
    true
}

/// Whether `kernel_arg` gives `obj` itself for `a`, with no device tensor and the CPU key (an
/// exact type's test, in `kernel_arg`'s order).
#[inline(always)]
pub(super) fn binds_to_itself(obj: &Bound<'_, PyAny>, a: &ArgPlan) -> bool {
    if a.optional && obj.is_none() {
        return true;
    }
    match a.kind {
        Kind::Tensor => is_exact_ndarray(obj),
        kind => is_exact_scalar(obj, kind),
    }
}
