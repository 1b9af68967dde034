//! The fast path of a Python call. When the kernel that serves a call is a Python function
//! (registered through `Library.impl` or as a Python boxed fallback), the function is called
//! with the caller's own objects, checked against the schema as binding checks them, without
//! building `IValue`s or asking the core to box anything; only the function's result is checked
//! and converted. The schema facts it needs are computed once per schema ([`Plan`]).
//!
//! It decides nothing the core decides: the key set comes from `dispatch_keys`, and what serves
//! the call from the router (`OperatorHandle::route`, `resolve`), whose `Routed` gives what the
//! entry published for a caller that runs it its own way: a Python function's `PyKernel`
//! (`Routed::foreign`), the Python CPU kernel of the CPU fallback around it
//! (`Routed::cpu_foreign`), a Native kernel's entry on two tensors (`Routed::tensors`), whether
//! the call is counted (`Routed::counted`); anything else runs as the entry's boxed call
//! (`Routed::call_boxed`).
//!
//! The commonest call, every argument given by position and bound to itself (NumPy arrays and
//! exact scalars) with one return, takes a leaner way still ([`run_lean`]): the kernel gets the
//! caller's own argument array, and no bound arguments are built.
//!
//! The fast path never raises an error of its own before the kernel runs: whatever it does not
//! handle (an argument type it has no plan for, an argument that fails the check, a written
//! `bf.Tensor`, a kernel that is not a Python function, an operator redefined since the plan
//! was made) returns `None`, and the caller takes the general path, which raises the same errors
//! as before. Once the kernel has run, its result is converted exactly as the general path
//! converts it (the same functions give the same errors).

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyTuple};

use super::array_kernel::ArrayKernel;
use super::convert::{
    is_exact_ndarray, is_numpy_array, returns_to_py, to_ivalue, to_py, Passed, TensorStyle,
};
use super::errors::{to_pyerr, IntoPy};
use super::ffi::{call_borrowed3_or_raised, list_get, list_set, vectorcall, vectorcall_or_raised};
use super::kernel::{bad_return, kernel_error, stack_count_error};
use super::overload::PyOpOverload;
use super::plan::{ArgPlan, Body, Kind, Plan, RetPlan, MAX};
use super::py_kernel::PyKernel;
use super::tensor::{as_tensor, cpu_tensor_to_numpy, kernel_array, lent_array, wrap, PyTensor};
use crate::dispatcher::{dispatch_keys, KernelCount, OpSchema, OperatorHandle, Routed};
use crate::ivalue::Stack;
use crate::kernel::TensorsFn;
use crate::key::{DispatchKey, DispatchKeySet};

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the fast path on or off (for tests that compare it with the general path); returns
/// whether it was on.
#[pyfunction]
pub fn set_fast_path(on: bool) -> bool {
    ENABLED.swap(on, Ordering::Relaxed)
}

fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Up to `MAX` objects, kept on the stack. Only the filled slots are touched: with
/// `Option` slots, making and dropping the three of a call wrote and tested all 24 of them,
/// about a tenth of a Python kernel's fast path.
struct Objs<'py> {
    /// Slots `..len` are initialized.
    items: [MaybeUninit<Bound<'py, PyAny>>; MAX],
    len: usize,
}

impl<'py> Objs<'py> {
    fn new() -> Self {
        Objs {
            items: [const { MaybeUninit::uninit() }; MAX],
            len: 0,
        }
    }

    /// Adds `o`; the plans bound every count by `MAX`, so a full `Objs` is a bug here, which
    /// drops `o` rather than writing past the end.
    fn push(&mut self, o: Bound<'py, PyAny>) {
        debug_assert!(self.len < MAX, "more than MAX objects");
        if let Some(slot) = self.items.get_mut(self.len) {
            slot.write(o);
            self.len += 1;
        }
    }

    fn as_slice(&self) -> &[Bound<'py, PyAny>] {
        // SAFETY: slots `..len` are initialized (`push` is the only writer and counts them),
        // and `MaybeUninit<T>` has the layout of `T`.
        unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast(), self.len) }
    }

    fn iter(&self) -> Items<'_, 'py> {
        self.as_slice().iter()
    }

    fn range(&self, from: usize, to: usize) -> Items<'_, 'py> {
        self.as_slice()[from..to].iter()
    }

    /// The last object, taken out.
    fn pop(&mut self) -> Option<Bound<'py, PyAny>> {
        let i = self.len.checked_sub(1)?;
        self.len = i;
        // SAFETY: slot `i` was initialized (it was below `len`), and lowering `len` first
        // hands its ownership to the caller, so `drop` does not drop it again.
        Some(unsafe { self.items[i].assume_init_read() })
    }
}

impl Drop for Objs<'_> {
    fn drop(&mut self) {
        for slot in &mut self.items[..self.len] {
            // SAFETY: slots `..len` are initialized and dropped once, here.
            unsafe { slot.assume_init_drop() }
        }
    }
}

/// The objects of a range of `Objs`.
type Items<'a, 'py> = std::slice::Iter<'a, Bound<'py, PyAny>>;

/// A kernel's returns, as the caller gets them.
enum Rets<'py> {
    Few(Objs<'py>),
    /// A call's result, already as the caller gets it (only for calls, not redispatches).
    Done(PyResult<Bound<'py, PyAny>>),
}

impl<'py> Rets<'py> {
    /// None for no return, the value for one, else a tuple (as `returns_to_py`).
    pub fn into_result(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Rets::Few(mut o) => match o.len {
                0 => Ok(py.None().into_bound(py)),
                1 => Ok(o.pop().unwrap_or_else(|| py.None().into_bound(py))),
                _ => Ok(PyTuple::new(py, o.iter())?.into_any()),
            },
            Rets::Done(r) => r,
        }
    }

    /// Replaces the contents of `list` with the returns (as deleting them all and appending
    /// the returns would, with the slots reused).
    pub fn into_list(self, list: &Bound<'py, PyList>) -> PyResult<()> {
        let items: Items<'_, 'py> = match self {
            Rets::Few(ref o) => o.iter(),
            // A redispatch gets a finished result only from `run_fallback` (the CPU fallback
            // with a Python CPU kernel, on a backend with Rust hooks), whose operator has one
            // Tensor return: that return is the stack.
            Rets::Done(r) => return one_into_list(r?, list),
        };
        let n = items.len();
        let old = list.len();
        for (i, x) in items.enumerate() {
            if i < old {
                list.set_item(i, x)?;
            } else {
                list.append(x)?;
            }
        }
        if old > n {
            list.del_slice(n, old)?;
        }
        Ok(())
    }
}

/// The arguments as the kernel gets them, with what the caller gave (for the identity of
/// returned tensors) and the key set of their tensors.
struct Bound_<'py> {
    kernel: Objs<'py>,
    given: Objs<'py>,
    keys: DispatchKeySet,
    /// The kernel objects are the caller's tuple, item by item: call with it.
    reuse: bool,
    /// Some kernel objects are device tensors still to be wrapped (`wrapped`).
    wraps: bool,
    /// Bit i: argument i took its default.
    defaulted: u32,
}

/// The kernel objects with every device tensor as a new `bf.Tensor` of its tensor, one per
/// tensor in the call (what the general path's `to_py` gives a kernel).
fn wrapped<'py>(b: &Bound_<'py>) -> PyResult<Objs<'py>> {
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
fn is_exact_scalar(obj: &Bound<'_, PyAny>, kind: Kind) -> bool {
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

fn fits_i64(obj: &Bound<'_, PyAny>) -> bool {
    obj.extract::<i64>().is_ok()
}

/// An argument as the kernel gets it (the object the general path would build from its
/// `IValue`); None where the general path would raise, or where the fast path does not go.
fn kernel_arg<'py>(
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
fn bind_call<'py>(
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
    fn empty() -> Self {
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
fn bind_stack<'py>(body: &Body, stack: &Bound<'py, PyList>, b: &mut Bound_<'py>) -> Option<()> {
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

/// A kernel's return as the caller gets it (`to_ivalue` in the kernel wrapper, then `to_py`
/// for the caller), or the message of the error. Out of line: the lean path inlines only the
/// test for an exact NumPy array, the common return.
#[inline(never)]
fn ret_to_caller<'py>(
    obj: &Bound<'py, PyAny>,
    r: &RetPlan,
    given: &[Bound<'py, PyAny>],
) -> Result<PyResult<Bound<'py, PyAny>>, String> {
    let py = obj.py();
    if r.optional && obj.is_none() {
        return Ok(Ok(obj.clone()));
    }
    let exact = match r.kind {
        Kind::Tensor => {
            if is_numpy_array(obj) {
                return Ok(Ok(obj.clone()));
            }
            if let Some(t) = as_tensor(obj) {
                let inner = &t.get().inner;
                // An argument's tensor comes back as the caller's object.
                for g in given.iter() {
                    if let Some(gt) = as_tensor(g) {
                        if gt.get().inner.same(inner) {
                            return Ok(Ok(g.clone()));
                        }
                    }
                }
                return Ok(if inner.key() == DispatchKey::CPU {
                    cpu_tensor_to_numpy(py, inner, true)
                } else {
                    wrap(py, inner.clone())
                });
            }
            false
        }
        kind => is_exact_scalar(obj, kind),
    };
    if exact {
        return Ok(Ok(obj.clone()));
    }
    let v = to_ivalue(obj, &r.ty, &mut Passed::default())?;
    Ok(to_py(py, &v, &Passed::default(), TensorStyle::Caller))
}

fn ret_error(
    op: &OperatorHandle,
    schema: &OpSchema,
    keys: DispatchKeySet,
    i: usize,
    m: String,
) -> crate::Error {
    let r = &schema.schema.returns[i];
    bad_return(
        op,
        keys,
        format!("return '{}' ({}): {m}", r.name, r.type_str()),
    )
}

/// Whether no keyword argument was given.
#[inline(always)]
fn no_kwargs(kwargs: Option<&Bound<'_, PyDict>>) -> bool {
    kwargs.is_none_or(|k| k.is_empty())
}

/// Whether a call takes the lean path ([`run_lean`]): every argument given by position, each
/// one bound to itself (`kernel_arg` gives the caller's object back: a NumPy `ndarray`, an
/// exact `int` that fits, `float` or `bool`, or None where the argument is optional), so that
/// the kernel gets the caller's own argument array; and one return. Nothing else is looked at:
/// a call that is not lean takes `bind_call` and `run`, as before.
#[inline(always)]
fn lean_args(body: &Body, args: &[Bound<'_, PyAny>]) -> bool {
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
fn binds_to_itself(obj: &Bound<'_, PyAny>, a: &ArgPlan) -> bool {
    if a.optional && obj.is_none() {
        return true;
    }
    match a.kind {
        Kind::Tensor => is_exact_ndarray(obj),
        kind => is_exact_scalar(obj, kind),
    }
}

/// What the lean path ([`run_lean`]) did with a call: two words, returned in registers, where
/// an `Option<PyResult<_>>` (the size of a `PyErr`, about nine words) was copied out through
/// memory at every level of the call.
pub enum Lean<'py> {
    /// The kernel ran: the caller's result.
    Done(Bound<'py, PyAny>),
    /// The kernel ran and failed: the error is in the caller's slot.
    Raised,
    /// Nothing ran: the call is not lean, or no Python function serves it.
    Passed,
}

impl<'py> Lean<'py> {
    /// As the other ways of the fast path answer: None where nothing ran.
    #[inline(always)]
    fn into_option(self, err: &mut Option<PyErr>) -> Option<PyResult<Bound<'py, PyAny>>> {
        match self {
            Lean::Done(r) => Some(Ok(r)),
            Lean::Raised => Some(Err(raised(err))),
            Lean::Passed => None,
        }
    }
}

/// The error a [`Lean::Raised`] left in its slot (always there: `run_lean` fills it).
#[cold]
#[inline(never)]
pub fn raised(err: &mut Option<PyErr>) -> PyErr {
    err.take().unwrap_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err("boxfall: a failed call lost its error")
    })
}

/// A lean call ([`lean_args`]) that a Python function serves, run on the caller's argument
/// array: no bound arguments are built (two objects held and released per argument) and the
/// one return comes back as it is, not through `Rets`. [`Lean::Passed`], with nothing run,
/// where another kernel serves (`run` then takes the call); an error goes to `err`.
#[inline(always)]
fn run_lean<'py>(
    slf: &Bound<'py, PyOpOverload>,
    plan: &Plan,
    body: &Body,
    keys: DispatchKeySet,
    args: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Lean<'py> {
    let py = slf.py();
    let op = &slf.get().handle;
    let Some((func, boxed, array, masked, count)) = lean_kernel(py, op, plan, keys) else {
        return Lean::Passed;
    };
    let schema = &plan.schema;
    // Begun and ended around the call rather than given it as a closure, which the compiler
    // would leave out of line (a frame, about 44 instructions on every lean call).
    let counted = count.begin();
    // Each step answers an `Option` (one register) and puts its error in `err`: as
    // `PyResult`s (the size of a `PyErr`), the answers were moved through memory at every
    // step, about a tenth of the lean path's own instructions on a hop.
    let r = if boxed {
        match call_boxed(py, &func, slf, op, masked, args, err) {
            Some(list) => {
                let r = boxed_one(op, schema, masked, body, args, &list, err);
                slf.get().spare.give_back(list);
                r
            }
            None => None,
        }
    } else {
        let out = match array.then(|| func.cast::<ArrayKernel>().ok()).flatten() {
            Some(w) => array_call(py, w.get(), args),
            None => vectorcall_or_raised(&func, args).ok_or(None),
        };
        match out {
            Ok(out) => lean_return(out, &body.rets[0], op, schema, masked, args, err),
            Err(e) => err_kernel(py, e, op, masked, err),
        }
    };
    counted.end(op);
    match r {
        Some(r) => Lean::Done(r),
        None => Lean::Raised,
    }
}

/// An array kernel's call ([`ArrayKernel`]): its result, or its error (the `Err` of
/// [`err_kernel`]).
#[inline(never)]
fn array_call<'py>(
    py: Python<'py>,
    w: &ArrayKernel,
    args: &[Bound<'py, PyAny>],
) -> Result<Bound<'py, PyAny>, Option<PyErr>> {
    vectorcall(w.kernel.bind(py), args)
        .and_then(|out| w.finish(out))
        .map_err(Some)
}

/// Puts a kernel's error, noted, in `err` (`e`: the error, else the one the interpreter has
/// set); None (for the caller to return).
#[cold]
#[inline(never)]
fn err_kernel<'py, T>(
    py: Python<'py>,
    e: Option<PyErr>,
    op: &OperatorHandle,
    keys: DispatchKeySet,
    err: &mut Option<PyErr>,
) -> Option<T> {
    let e = e.unwrap_or_else(|| PyErr::fetch(py));
    *err = Some(to_pyerr(py, kernel_error(py, e, op, keys)));
    None
}

/// A lean call's one return as the caller gets it: an exact NumPy array as it is, else as
/// [`ret_to_caller`] converts it; None with the error in `err`.
#[inline(always)]
fn lean_return<'py>(
    out: Bound<'py, PyAny>,
    r: &RetPlan,
    op: &OperatorHandle,
    schema: &OpSchema,
    keys: DispatchKeySet,
    given: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Option<Bound<'py, PyAny>> {
    if r.kind == Kind::Tensor && is_exact_ndarray(&out) {
        return Some(out);
    }
    match ret_to_caller(&out, r, given) {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            *err = Some(e);
            None
        }
        Err(m) => {
            *err = Some(to_pyerr(out.py(), ret_error(op, schema, keys, 0, m)));
            None
        }
    }
}

/// The Python function that serves a lean call on `keys`, whether it is boxed and takes arrays,
/// the masked keys, and whether the call is counted (a backend's own kernel); None where no
/// Python function serves it. Out of line: inlined into the
/// vectorcall entry with the rest of the lean path, the thread-local accesses of the read
/// section and of the key set were left out of line there (about 130 instructions a call more).
#[inline(never)]
fn lean_kernel<'py>(
    py: Python<'py>,
    op: &OperatorHandle,
    plan: &Plan,
    keys: DispatchKeySet,
) -> Option<(Bound<'py, PyAny>, bool, bool, DispatchKeySet, KernelCount)> {
    op.route(keys, |r| {
        if !Arc::ptr_eq(r.schema(), &plan.schema) {
            return None;
        }
        let k = r.foreign::<PyKernel>()?;
        Some((k.func(py)?, k.boxed, k.array, r.keys(), r.counted()))
    })
    .flatten()
}

/// What serves a call, as the fast path found it.
enum Found<'py> {
    /// A Python function (boxed or not), with the call's keys masked by the operator's, and
    /// whether the call is counted (a backend's own kernel).
    Python(Bound<'py, PyAny>, bool, bool, DispatchKeySet, KernelCount),
    /// Another kernel, on these keys: the CPU fallback with a Python CPU kernel (`Some`, which
    /// `run_fallback` may run without a stack, with what it needs of the table), or any other
    /// (`None`, straight to the boxed call).
    Other(Option<FallbackKernel<'py>>, DispatchKeySet),
}

impl<'py> Found<'py> {
    /// What serves a call on `keys`, found in one read section of the operator's table. A
    /// Python function is taken out of the table there, and the section ends before it runs;
    /// only another kernel needs the table held while it runs (`resolve`). None where the
    /// general path serves: the table is not of the plan's schema (redefined or undefined
    /// since), no kernel serves the keys, or a kernel's library was collected (no function),
    /// which the general path reports.
    #[inline(always)]
    fn of(
        py: Python<'py>,
        op: &OperatorHandle,
        plan: &Plan,
        keys: DispatchKeySet,
    ) -> Option<Found<'py>> {
        op.route(keys, |r| {
            if !Arc::ptr_eq(r.schema(), &plan.schema) {
                return None;
            }
            let masked = r.keys();
            if let Some(k) = r.foreign::<PyKernel>() {
                return Some(Found::Python(
                    k.func(py)?,
                    k.boxed,
                    k.array,
                    masked,
                    r.counted(),
                ));
            }
            r.kernel()?;
            Some(Found::Other(FallbackKernel::of(py, &r), masked))
        })
        .flatten()
    }
}

/// Whether `run_fallback` may run the CPU fallback on `masked` here. From PyO3's entry
/// (`done_ok`), always; from the lean entry, which holds no PyO3 count of the GIL, only for a
/// backend whose hooks are Rust: its Python CPU kernel is called from here, with no
/// `Python::attach` under it.
#[inline(always)]
fn fallback_runs_here(masked: DispatchKeySet, done_ok: bool) -> bool {
    done_ok
        || masked
            .highest()
            .is_some_and(|k| !super::backend::is_python_backend(k))
}

/// What `run_fallback` needs of the table, taken out of it in `Found::of`'s read section (the
/// function is a Python reference): the backend's key, and the CPU kernel's Python function
/// and whether it takes arrays.
struct FallbackKernel<'py> {
    key: DispatchKey,
    func: Bound<'py, PyAny>,
    array: bool,
}

impl<'py> FallbackKernel<'py> {
    /// The Python CPU kernel of a call that the CPU fallback serves (None: none there, or a
    /// boxed one, which the boxed way runs).
    #[inline(always)]
    fn of(py: Python<'py>, r: &Routed<'_>) -> Option<FallbackKernel<'py>> {
        let key = r.keys().highest()?;
        let kernel = r.cpu_foreign::<PyKernel>().filter(|k| !k.boxed)?;
        Some(FallbackKernel {
            key,
            func: kernel.func(py)?,
            array: kernel.array,
        })
    }
}

/// Runs the Python kernel that serves the call, or None where the general path must.
/// `done_ok`: the caller takes a finished result ([`Rets::Done`]), which lets a kernel that is
/// no Python function run here too.
fn run<'py>(
    slf: &Bound<'py, PyOpOverload>,
    plan: &Plan,
    body: &Body,
    keys: DispatchKeySet,
    b: &Bound_<'py>,
    args: Option<&[Bound<'py, PyAny>]>,
    done_ok: bool,
) -> Option<PyResult<Rets<'py>>> {
    let py = slf.py();
    let op = &slf.get().handle;
    let found = Found::of(py, op, plan, keys)?;
    let (func, boxed, array, masked, count) = match found {
        Found::Python(func, boxed, array, masked, count) => (func, boxed, array, masked, count),
        Found::Other(fallback, masked) => {
            // Only the CPU fallback runs there: a Rust kernel (Native's `array_api::add`)
            // spares the fallback's table look-up, a third of its own cost on one element.
            let found = fallback.filter(|_| b.wraps && fallback_runs_here(masked, done_ok));
            if let Some(found) = found {
                if let Some(r) = run_fallback(
                    slf,
                    plan,
                    body,
                    found,
                    b.given.as_slice(),
                    b.kernel.as_slice(),
                ) {
                    return Some(Ok(Rets::Done(r)));
                }
            }
            if !done_ok {
                return None;
            }
            return op
                .resolve(keys, |r| {
                    if !Arc::ptr_eq(r.schema(), &plan.schema) {
                        return None;
                    }
                    r.kernel()?;
                    let tensors = r.tensors();
                    if let Some(out) =
                        tensors.and_then(|f| native_tensors(py, op, f, r.counted(), b))
                    {
                        return Some(Ok(Rets::Done(out)));
                    }
                    let mut passed = Passed::default();
                    let stack = boxed_stack(body, b, &mut passed)?;
                    Some(Ok(Rets::Done(call_kernel_boxed(
                        py, op, &r, stack, &passed,
                    ))))
                })
                .flatten();
        }
    };
    let schema = &plan.schema;
    let fixed;
    let kobjs = if b.wraps {
        fixed = match wrapped(b) {
            Ok(o) => o,
            Err(e) => return Some(Err(to_pyerr(py, kernel_error(py, e, op, masked)))),
        };
        &fixed
    } else {
        &b.kernel
    };
    let reuse = args.filter(|_| b.reuse && !b.wraps);
    // As `run_lean` counts, with no closure left out of line.
    let counted = count.begin();
    let r = if boxed {
        let mut err = None;
        match call_boxed(py, &func, slf, op, masked, kobjs.as_slice(), &mut err) {
            Some(list) => {
                let r = boxed_returns(py, op, schema, masked, body, b.given.as_slice(), &list);
                slf.get().spare.give_back(list);
                r
            }
            None => Err(raised(&mut err)),
        }
    } else {
        call_unboxed(py, &func, array, op, schema, masked, body, kobjs, b, reuse)
    };
    counted.end(op);
    Some(r)
}

/// A call of backend tensors that the CPU fallback serves with a Python CPU kernel, run
/// without a stack: the caller's tensors go through the fallback's maps (`run_with_maps`: the
/// moves, checks, policy and counters of the typed fallback) straight to the kernel's NumPy
/// arguments, and its NumPy result straight to the device. The boxed way built a stack of the
/// arguments, walked it by the schema, built the kernel's arguments from it, wrapped the result
/// as a CPU tensor holding the array object and copied that into the device: two thirds of a
/// one-element call's time outside NumPy.
///
/// `None` before anything ran where the boxed way must serve: another kernel, a boxed or
/// collected Python kernel, keyword-only arguments, a NumPy array among the tensors, a return
/// that is not one Tensor, or an operator or backend the typed fallback does not serve. Once
/// the kernel ran, every outcome is the boxed way's: the same conversions and the same errors,
/// noted the same way. Not inlined into `run`, whose other calls (a Python kernel's) it would
/// slow with its frame.
#[inline(never)]
fn run_fallback<'py>(
    slf: &Bound<'py, PyOpOverload>,
    plan: &Plan,
    body: &Body,
    found: FallbackKernel<'py>,
    given: &[Bound<'py, PyAny>],
    kernel: &[Bound<'py, PyAny>],
) -> Option<PyResult<Bound<'py, PyAny>>> {
    if body.kwonly || body.rets.len() != 1 {
        return None;
    }
    let ret = &body.rets[0];
    if ret.kind != Kind::Tensor || ret.optional {
        return None;
    }
    let py = slf.py();
    let op = &slf.get().handle;
    // The tensors of the call, by argument (the general path's stack holds the same ones).
    // Borrowed from the caller's objects, which outlive the call: no tensor handle is cloned.
    let mut tensors: [Option<&crate::tensor::Tensor>; MAX] = [None; MAX];
    for ((a, g), slot) in body.args.iter().zip(given.iter()).zip(tensors.iter_mut()) {
        if a.kind != Kind::Tensor {
            continue;
        }
        match as_tensor(g) {
            Some(t) => *slot = Some(&t.get().inner),
            None if g.is_none() => {}
            None => return None,
        }
    }
    let n = body.args.len();
    // The Python kernel runs outside the table's read section, with no count of it held.
    let FallbackKernel { key, func, array } = found;
    let result = crate::fallback::run_with_maps(op, &plan.schema.info, key, |maps| {
        kernel_in_fallback(
            py,
            &func,
            array,
            op,
            &plan.schema,
            key,
            (given, kernel),
            &tensors[..n],
            maps,
        )
    })?
    .py(py);
    Some(result.and_then(|t| {
        // As `returns_to_py` gives it: an argument's tensor as the caller's object.
        for g in given {
            if let Some(gt) = as_tensor(g) {
                if gt.get().inner.same(&t) {
                    return Ok(g.clone());
                }
            }
        }
        if t.key() == DispatchKey::CPU {
            cpu_tensor_to_numpy(py, &t, true)
        } else {
            wrap(py, t)
        }
    }))
}

/// The fallback's steps 1-3 around the Python kernel `func` (see `run_fallback`): the result's
/// tensor on the device.
#[allow(clippy::too_many_arguments)]
fn kernel_in_fallback<'py>(
    py: Python<'py>,
    func: &Bound<'py, PyAny>,
    array: bool,
    op: &OperatorHandle,
    schema: &OpSchema,
    key: DispatchKey,
    (objs_given, objs_kernel): (&[Bound<'py, PyAny>], &[Bound<'py, PyAny>]),
    given: &[Option<&crate::tensor::Tensor>],
    maps: &mut crate::fallback::Moves<'_>,
) -> crate::Result<crate::tensor::Tensor> {
    use crate::kernel::TensorMaps;
    let cpu_keys = DispatchKey::CPU.set();
    // 1. The backend's tensors to the CPU: the kernel's tensor of argument i is its CPU tensor
    // if it moved, else the caller's own.
    let n = given.len();
    let mut lent: [Option<&crate::tensor::Tensor>; MAX] = [None; MAX];
    lent[..n].copy_from_slice(given);
    let mut moved: [Option<crate::tensor::Tensor>; MAX] = Default::default();
    maps.args_lent(&mut lent[..n], &mut moved[..n])?;
    let mut tensors: [Option<&crate::tensor::Tensor>; MAX] = [None; MAX];
    for ((t, m), l) in tensors.iter_mut().zip(moved.iter()).zip(lent.iter()) {
        *t = m.as_ref().or(*l);
    }
    let tensors = &tensors[..n];
    // 2. The kernel, with CPU tensors as NumPy arrays (one object a tensor) and the other
    // arguments as the fast bind made them.
    let kernel_err = |maps: &mut crate::fallback::Moves<'_>, e: PyErr| {
        maps.kernel_error(kernel_error(py, e, op, cpu_keys))
    };
    let mut objs = Objs::new();
    for (i, (t, k)) in tensors.iter().zip(objs_kernel.iter()).enumerate() {
        let Some(t) = *t else {
            objs.push(k.clone());
            continue;
        };
        let earlier = tensors[..i]
            .iter()
            .zip(objs.iter())
            .find_map(|(e, o)| e.as_ref().filter(|e| e.same(t)).map(|_| o.clone()));
        let obj = match earlier {
            Some(o) => Ok(o),
            None if t.key() == DispatchKey::CPU => match objs_given.get(i) {
                Some(g) => lent_array(g, t),
                None => kernel_array(py, t, false),
            },
            None => wrap(py, t.clone()),
        };
        match obj {
            Ok(o) => objs.push(o),
            Err(e) => return Err(kernel_err(maps, e)),
        }
    }
    let wrapper = array.then(|| func.cast::<ArrayKernel>().ok()).flatten();
    let out = match wrapper {
        Some(w) => {
            vectorcall(w.get().kernel.bind(py), objs.as_slice()).and_then(|out| w.get().finish(out))
        }
        None => vectorcall(func, objs.as_slice()),
    };
    let out = match out {
        Ok(o) => o,
        Err(e) => return Err(kernel_err(maps, e)),
    };
    // 3. The result to the device, timed from here: for Native, its copy into host memory just
    // below is that step's move.
    maps.kernel_done();
    // The return as the kernel wrapper converts it: an argument's array is that argument's
    // tensor; a new NumPy array, for Native, goes into host memory at once (the one copy
    // `from_cpu` would make of it; if it cannot, `from_cpu` says why, as before).
    let passed = tensors
        .iter()
        .zip(objs.iter())
        .find_map(|(t, o)| t.filter(|_| o.is(&out)).cloned());
    let plain = match passed {
        // SAFETY: an object whose type is exactly `ndarray` is a NumPy array (told by its
        // type pointer, without PyO3's look-up of the class). Exercised by every Native
        // fallback to a NumPy kernel (test_native.py, test_fast_fallback.py).
        None if key == DispatchKey::NATIVE && is_exact_ndarray(&out) => {
            Some(unsafe { out.cast_unchecked::<numpy::PyUntypedArray>() })
        }
        _ => None,
    };
    let cpu = match (passed, plain) {
        (Some(t), _) => t,
        (None, Some(arr)) => match super::tensor::plain_numpy_to_cpu(arr) {
            Ok(t) => t,
            Err(_) => super::tensor::numpy_tensor(&out),
        },
        (None, None) => match super::convert::to_tensor(&out, &mut Passed::default()) {
            Ok(t) => t,
            Err(m) => {
                return Err(maps.kernel_error(ret_error(op, schema, cpu_keys, 0, m)));
            }
        },
    };
    maps.ret(cpu)
}

/// A call of two `bf.Tensor`s that a Native kernel of two arrays serves (`Route::Tensors`),
/// run by its typed entry on the caller's tensors: no stack of the arguments, no tensor handle
/// cloned into one, the result wrapped as `returns_to_py` wraps it (a new tensor is never an
/// argument's, so it is never the caller's object). `None` where the boxed kernel must serve:
/// another kernel, an argument that is no `bf.Tensor`, or a call the kernel hands to the CPU
/// fallback (which the boxed kernel then does, on the same arguments). A call the entry serves
/// is counted by `count` (the boxed kernel counts the others).
#[inline(always)]
fn native_tensors<'py>(
    py: Python<'py>,
    op: &OperatorHandle,
    entry: TensorsFn,
    count: KernelCount,
    b: &Bound_<'py>,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    let [x, y] = b.given.as_slice() else {
        return None;
    };
    let (x, y) = (as_tensor(x)?, as_tensor(y)?);
    let call = count.begin();
    let t = match entry(op, &x.get().inner, &y.get().inner) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => {
            call.end(op);
            return Some(Err(to_pyerr(py, e)));
        }
    };
    call.end(op);
    Some(if t.key() == DispatchKey::CPU {
        cpu_tensor_to_numpy(py, &t, true)
    } else {
        wrap(py, t)
    })
}

thread_local! {
    /// The buffer of this thread's next boxed call from Python (a nested call allocates its own).
    static SPARE_STACK: std::cell::Cell<Stack> = const { std::cell::Cell::new(Vec::new()) };
}

/// The stack `convert::bind` builds for the bound arguments (None if one does not convert,
/// which the fast bind has ruled out).
fn boxed_stack(body: &Body, b: &Bound_<'_>, passed: &mut Passed) -> Option<Stack> {
    let mut stack = SPARE_STACK.with(std::cell::Cell::take);
    stack.reserve(body.args.len());
    for (i, (a, g)) in body.args.iter().zip(b.given.iter()).enumerate() {
        let v = if b.defaulted & (1 << i) != 0 {
            a.default_value.clone()?
        } else {
            to_ivalue(g, &a.ty, passed).ok()?
        };
        stack.push(v);
    }
    Some(stack)
}

/// Runs a kernel that is not a Python function as the router found it (`Routed::call_boxed`:
/// counted, and the CPU fallback with its entry's CPU kernel), and converts its returns as
/// `call_op` does.
fn call_kernel_boxed<'py>(
    py: Python<'py>,
    op: &OperatorHandle,
    routed: &Routed<'_>,
    mut stack: Stack,
    passed: &Passed,
) -> PyResult<Bound<'py, PyAny>> {
    let result = routed
        .call_boxed(op, &mut stack)
        .py(py)
        .and_then(|()| returns_to_py(py, &stack, passed));
    stack.clear();
    SPARE_STACK.with(|c| c.set(stack));
    result
}

#[allow(clippy::too_many_arguments)]
fn call_unboxed<'py>(
    py: Python<'py>,
    func: &Bound<'py, PyAny>,
    array: bool,
    op: &OperatorHandle,
    schema: &OpSchema,
    keys: DispatchKeySet,
    body: &Body,
    kobjs: &Objs<'py>,
    b: &Bound_<'py>,
    reuse: Option<&[Bound<'py, PyAny>]>,
) -> PyResult<Rets<'py>> {
    let py_err = |e: PyErr| to_pyerr(py, kernel_error(py, e, op, keys));
    let wrapper = array.then(|| func.cast::<ArrayKernel>().ok()).flatten();
    let inner;
    let func = match wrapper {
        Some(w) => {
            inner = w.get().kernel.bind(py).clone();
            &inner
        }
        None => func,
    };
    let out = match reuse {
        Some(args) => vectorcall(func, args),
        None => {
            let k = kobjs.as_slice();
            let kwargs = if body.kwonly {
                let d = PyDict::new(py);
                for (a, o) in body.args[body.positional..]
                    .iter()
                    .zip(kobjs.range(body.positional, body.args.len()))
                {
                    d.set_item(a.name.bind(py), o).map_err(py_err)?;
                }
                Some(d)
            } else {
                None
            };
            match (kwargs, body.positional) {
                // A few positional arguments go by vectorcall, without a tuple.
                (None, 1) => func.call1((&k[0],)),
                (None, 2) => func.call1((&k[0], &k[1])),
                (None, 3) => func.call1((&k[0], &k[1], &k[2])),
                (kwargs, _) => {
                    let args = PyTuple::new(py, kobjs.range(0, body.positional)).map_err(py_err)?;
                    func.call(args, kwargs.as_ref())
                }
            }
        }
    }
    .and_then(|out| match wrapper {
        Some(w) => w.get().finish(out),
        None => Ok(out),
    })
    .map_err(py_err)?;
    let n = body.rets.len();
    let mut rets = Objs::new();
    let mut one = |i: usize, o: &Bound<'py, PyAny>| -> PyResult<()> {
        match ret_to_caller(o, &body.rets[i], b.given.as_slice()) {
            Ok(r) => {
                rets.push(r?);
                Ok(())
            }
            Err(m) => Err(to_pyerr(py, ret_error(op, schema, keys, i, m))),
        }
    };
    match n {
        0 => {}
        1 => one(0, &out)?,
        _ => {
            let bad = |m: String| to_pyerr(py, bad_return(op, keys, m));
            let mut items = Objs::new();
            if let Ok(t) = out.cast::<PyTuple>() {
                if t.len() != n {
                    return Err(bad(format!("expected {n} returns, got {}", t.len())));
                }
                t.iter().for_each(|x| items.push(x));
            } else if let Ok(l) = out.cast::<PyList>() {
                if l.len() != n {
                    return Err(bad(format!("expected {n} returns, got {}", l.len())));
                }
                l.iter().take(n).for_each(|x| items.push(x));
            } else {
                return Err(bad(format!(
                    "expected a tuple of {n} returns, got {}",
                    super::convert::type_name(&out)
                )));
            }
            for (i, o) in items.iter().enumerate() {
                one(i, o)?;
            }
        }
    }
    Ok(Rets::Few(rets))
}

/// Runs a boxed Python kernel `func(op, keys, stack)` on a stack of `kobjs`, and gives the
/// stack back for its returns to be read (the caller then hands it to `Spare::give_back`).
fn call_boxed<'py>(
    py: Python<'py>,
    func: &Bound<'py, PyAny>,
    slf: &Bound<'py, PyOpOverload>,
    op: &OperatorHandle,
    keys: DispatchKeySet,
    kobjs: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Option<Bound<'py, PyList>> {
    let spare = &slf.get().spare;
    let made = match spare.list.take(py) {
        Some(l) => {
            let l = l.into_bound(py);
            if l.len() == kobjs.len() {
                // The last call's slots (None), replaced: the list keeps its storage.
                for (i, o) in kobjs.iter().enumerate() {
                    list_set(&l, i, o);
                }
                Ok(l)
            } else {
                refill(&l, kobjs).map(|()| l)
            }
        }
        None => PyList::new(py, kobjs.iter()),
    };
    let list = match made {
        Ok(l) => l,
        Err(e) => return err_kernel(py, Some(e), op, keys, err),
    };
    let keys_obj = match spare.keys_obj(py, keys) {
        Ok(k) => k,
        Err(e) => return err_kernel(py, Some(e), op, keys, err),
    };
    match call_borrowed3_or_raised(func, slf.as_any(), keys_obj.as_any(), list.as_any()) {
        Some(out) => {
            drop(out);
            Some(list)
        }
        None => err_kernel(py, None, op, keys, err),
    }
}

/// `list[:] = kobjs` (a kept list of another length).
#[cold]
fn refill<'py>(list: &Bound<'py, PyList>, kobjs: &[Bound<'py, PyAny>]) -> PyResult<()> {
    list.del_slice(0, list.len())?;
    for o in kobjs.iter() {
        list.append(o)?;
    }
    Ok(())
}

/// A boxed kernel's returns from its stack, as the caller gets them.
fn boxed_returns<'py>(
    py: Python<'py>,
    op: &OperatorHandle,
    schema: &OpSchema,
    keys: DispatchKeySet,
    body: &Body,
    given: &[Bound<'py, PyAny>],
    list: &Bound<'py, PyList>,
) -> PyResult<Rets<'py>> {
    let n = list.len();
    // The plan has no `...` returns, so the count is the schema's.
    if n != body.rets.len() {
        return Err(to_pyerr(
            py,
            stack_count_error(op, keys, schema, n, body.args.len()),
        ));
    }
    let mut rets = Objs::new();
    for (i, o) in list.iter().enumerate() {
        match ret_to_caller(&o, &body.rets[i], given) {
            Ok(r) => rets.push(r?),
            Err(m) => return Err(to_pyerr(py, ret_error(op, schema, keys, i, m))),
        }
    }
    Ok(Rets::Few(rets))
}

/// Replaces the contents of `list` with the one object `r` (as `Rets::into_list` does with
/// one return).
fn one_into_list<'py>(r: Bound<'py, PyAny>, list: &Bound<'py, PyList>) -> PyResult<()> {
    let old = list.len();
    if old == 0 {
        return list.append(r);
    }
    list_set(list, 0, &r);
    if old > 1 {
        list.del_slice(1, old)?;
    }
    Ok(())
}

/// A boxed kernel's one return from its stack, as the caller gets it (`boxed_returns` for a
/// schema of one return, without `Rets`).
#[inline(always)]
fn boxed_one<'py>(
    op: &OperatorHandle,
    schema: &OpSchema,
    keys: DispatchKeySet,
    body: &Body,
    given: &[Bound<'py, PyAny>],
    list: &Bound<'py, PyList>,
    err: &mut Option<PyErr>,
) -> Option<Bound<'py, PyAny>> {
    let py = list.py();
    let n = list.len();
    // A reference of ours to the one return: converting it may run Python code, which may
    // change the list.
    let one = match (n, body.rets.first()) {
        (1, Some(r)) => list_get(list, 0).map(|o| (o, r)),
        _ => None,
    };
    let Some((o, r)) = one else {
        let e = stack_count_error(op, keys, schema, n, body.args.len());
        *err = Some(to_pyerr(py, e));
        return None;
    };
    lean_return(o, r, op, schema, keys, given, err)
}

/// `op(*args, **kwargs)` by the fast path, or None. The lean path is tried only while the
/// operator's calls from Python still try it first (`PyOpOverload::lean`): once one of its
/// calls found no Python function, its calls come here, and mostly for another kernel (a
/// Native one's `bf.Tensor`s), where the lean test only added its own cost. `relearn`: a
/// call from Python that the lean entry passed on (`OpOverload`'s vectorcall entry) tries the
/// lean path all the same, and one it serves sets the operator's calls back to the lean
/// entry: one call with a Python backend's tensors cleared it, and every later NumPy call
/// went the general way (~284 -> ~341 ns, for good).
pub fn call<'py>(
    slf: &Bound<'py, PyOpOverload>,
    args: &[Bound<'py, PyAny>],
    kwargs: Option<&Bound<'py, PyDict>>,
    relearn: bool,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    let lean = relearn || slf.get().lean.load(Ordering::Relaxed);
    call_as(slf, args, kwargs, true, lean, relearn)
}

/// `op(*args)` by the fast path where a Python function serves it; else [`Lean::Passed`],
/// with nothing run (`OpOverload`'s vectorcall entry then takes the whole call). The lean path's answer goes
/// back in two words; only another way's is converted to a `Lean`.
#[inline(always)]
pub fn call_python<'py>(
    slf: &Bound<'py, PyOpOverload>,
    args: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Lean<'py> {
    if !enabled() {
        return Lean::Passed;
    }
    let py = slf.py();
    let Some(plan) = slf.get().plan(py) else {
        return Lean::Passed;
    };
    if let Some(body) = plan.body.as_ref() {
        if lean_args(body, args) {
            match run_lean(slf, plan, body, lean_keys(), args, err) {
                Lean::Passed => {}
                done => return done,
            }
        } else if let Some(keys) = device_keys(body, args) {
            match run_device_lean(slf, plan, body, keys, args) {
                Some(Ok(r)) => return Lean::Done(r),
                Some(Err(e)) => {
                    *err = Some(e);
                    return Lean::Raised;
                }
                None => {}
            }
        }
    }
    match call_as(slf, args, None, false, false, false) {
        Some(Ok(r)) => Lean::Done(r),
        Some(Err(e)) => {
            *err = Some(e);
            Lean::Raised
        }
        None => Lean::Passed,
    }
}

/// The keys of a call of device tensors that `bind_call` would bind each to itself: every
/// argument given by position, each tensor a `bf.Tensor` of a device that the call does not
/// write (`kernel_arg` gives it back as it is, to be lent to the kernel), every other argument
/// an exact scalar or None where optional (as `lean_args`), and one return. None for any other
/// call, which `bind_call` then binds.
#[inline(always)]
fn device_keys(body: &Body, args: &[Bound<'_, PyAny>]) -> Option<DispatchKeySet> {
    if args.len() != body.args.len() || body.kwonly || body.rets.len() != 1 {
        return None;
    }
    let mut keys = DispatchKeySet::EMPTY;
    for (a, obj) in body.args.iter().zip(args) {
        if a.optional && obj.is_none() {
            continue;
        }
        match a.kind {
            Kind::Tensor => {
                let key = as_tensor(obj)?.get().inner.key();
                if a.write || key == DispatchKey::CPU {
                    return None;
                }
                keys |= key;
            }
            kind if is_exact_scalar(obj, kind) => {}
            _ => return None,
        }
    }
    if keys.is_empty() {
        return None;
    }
    Some(dispatch_keys(keys))
}

/// A call of device tensors (`device_keys`) that the CPU fallback serves with a Python CPU
/// kernel, from the lean entry (so only for a backend whose hooks are Rust, as `run` does
/// there): `run_fallback` on the caller's argument array, which is what `bind_call` would have
/// bound, with no bound-argument set built. None, with nothing run, where anything else serves
/// the call: the general way then binds it as before.
#[inline(never)]
fn run_device_lean<'py>(
    slf: &Bound<'py, PyOpOverload>,
    plan: &Plan,
    body: &Body,
    keys: DispatchKeySet,
    args: &[Bound<'py, PyAny>],
) -> Option<PyResult<Bound<'py, PyAny>>> {
    match Found::of(slf.py(), &slf.get().handle, plan, keys)? {
        Found::Other(Some(found), masked) if fallback_runs_here(masked, false) => {
            run_fallback(slf, plan, body, found, args, args)
        }
        _ => None,
    }
}

/// The keys of a lean call: every tensor is a NumPy array, so the arguments' keys are CPU's
/// (as `bind_call` finds them, and as it takes for a call with no tensor).
#[inline(always)]
fn lean_keys() -> DispatchKeySet {
    dispatch_keys(DispatchKey::CPU.set())
}

/// `op(*args)` by the lean path for `call_as`, once `lean_args` holds: out of line, so that a
/// call that is not lean (a Native kernel's `bf.Tensor`s, by `bf.Tensor.__add__`) pays only
/// the test, not a larger `call_as`.
#[inline(never)]
fn call_lean<'py>(
    slf: &Bound<'py, PyOpOverload>,
    plan: &Plan,
    body: &Body,
    args: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Lean<'py> {
    run_lean(slf, plan, body, lean_keys(), args, err)
}

/// `lean`: the lean path may serve the call (false where it passed it on already).
#[inline(always)]
fn call_as<'py>(
    slf: &Bound<'py, PyOpOverload>,
    args: &[Bound<'py, PyAny>],
    kwargs: Option<&Bound<'py, PyDict>>,
    done_ok: bool,
    lean: bool,
    relearn: bool,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    if !enabled() {
        return None;
    }
    let py = slf.py();
    let plan = slf.get().plan(py)?;
    let body = plan.body.as_ref()?;
    if lean && no_kwargs(kwargs) && lean_args(body, args) {
        let mut err = None;
        if let Some(r) = call_lean(slf, plan, body, args, &mut err).into_option(&mut err) {
            if relearn {
                relearned(&slf.get().lean);
            }
            return Some(r);
        }
    }
    let mut b = Bound_::empty();
    bind_call(py, body, args, kwargs, &mut b)?;
    let arg_keys = if b.keys.is_empty() {
        DispatchKey::CPU.set()
    } else {
        b.keys
    };
    let keys = dispatch_keys(arg_keys);
    let r = run(slf, plan, body, keys, &b, Some(args), done_ok)?;
    Some(r.and_then(|r| r.into_result(py)))
}

/// Sets an operator's calls from Python back to the lean entry (written only when it changes,
/// so that the calls that keep it read a clean cache line).
#[inline(always)]
fn relearned(lean: &AtomicBool) {
    if !lean.load(Ordering::Relaxed) {
        lean.store(true, Ordering::Relaxed);
    }
}

/// `op.redispatch(keys, *args)` by the lean path ([`run_lean`]): [`Lean::Passed`], with
/// nothing run, where it does not serve (`redispatch` then takes the call, `lean` false).
#[inline(always)]
pub fn redispatch_lean<'py>(
    slf: &Bound<'py, PyOpOverload>,
    keys: DispatchKeySet,
    args: &[Bound<'py, PyAny>],
    err: &mut Option<PyErr>,
) -> Lean<'py> {
    if !enabled() {
        return Lean::Passed;
    }
    let Some(plan) = slf.get().plan(slf.py()) else {
        return Lean::Passed;
    };
    match &plan.body {
        Some(body) if lean_args(body, args) => {
            run_lean(slf, plan, body, keys.without_highest(), args, err)
        }
        _ => Lean::Passed,
    }
}

/// `op.redispatch(keys, *args, **kwargs)` by the fast path, or None. `lean`: the lean path may
/// serve it (false where [`redispatch_lean`] has passed it on already).
#[inline]
pub fn redispatch<'py>(
    slf: &Bound<'py, PyOpOverload>,
    keys: DispatchKeySet,
    args: &[Bound<'py, PyAny>],
    kwargs: Option<&Bound<'py, PyDict>>,
    lean: bool,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    if !enabled() {
        return None;
    }
    let py = slf.py();
    let plan = slf.get().plan(py)?;
    let body = plan.body.as_ref()?;
    if lean && no_kwargs(kwargs) && lean_args(body, args) {
        let mut err = None;
        let keys = keys.without_highest();
        if let Some(r) = run_lean(slf, plan, body, keys, args, &mut err).into_option(&mut err) {
            return Some(r);
        }
    }
    let mut b = Bound_::empty();
    bind_call(py, body, args, kwargs, &mut b)?;
    let r = run(
        slf,
        plan,
        body,
        keys.without_highest(),
        &b,
        Some(args),
        true,
    )?;
    Some(r.and_then(|r| r.into_result(py)))
}

/// `op.redispatch_boxed(keys, stack)` by the fast path, or None.
pub fn redispatch_boxed<'py>(
    slf: &Bound<'py, PyOpOverload>,
    keys: DispatchKeySet,
    stack: &Bound<'py, PyList>,
) -> Option<PyResult<()>> {
    if !enabled() {
        return None;
    }
    let py = slf.py();
    let plan = slf.get().plan(py)?;
    let body = plan.body.as_ref()?;
    if stack.len() == body.args.len() {
        // References of ours to the stack's objects: the kernel may change the list.
        let mut objs = Objs::new();
        for o in stack.iter().take(body.args.len()) {
            objs.push(o);
        }
        let args = objs.as_slice();
        if lean_args(body, args) {
            let mut err = None;
            let keys = keys.without_highest();
            if let Some(r) = run_lean(slf, plan, body, keys, args, &mut err).into_option(&mut err) {
                return Some(r.and_then(|r| one_into_list(r, stack)));
            }
        }
    }
    let mut b = Bound_::empty();
    bind_stack(body, stack, &mut b)?;
    let r = run(slf, plan, body, keys.without_highest(), &b, None, false)?;
    Some(r.and_then(|r| r.into_list(stack)))
}
