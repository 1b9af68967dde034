//! The operator object, `bf.OpOverload`: what it holds (its handle, the fast path's plan and
//! spare objects, its `op.redispatch` and its vectorcall entry) and how it is made. Its calls
//! (`ops.rs`, which re-exports it) and the fast path (`fast.rs`) stand above it; so does
//! every file that only names the type.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use super::ffi::{self, refcnt, Member, Method};
use super::gil_cell::GilCell;
use super::plan::{schema_for_plan, Plan, Spare};
use super::redispatch::{self, Redispatch};
use crate::dispatcher::OperatorHandle;

/// One operator overload: callable, with its schema and dispatch table.
#[pyclass(name = "OpOverload", module = "boxfall", frozen)]
pub struct PyOpOverload {
    /// Where a call from Python enters (see "calls by vectorcall" in `ops.rs`), read by the interpreter at the
    /// offset the class names.
    pub(super) vectorcall: ffi::Entry,
    pub handle: OperatorHandle,
    /// The schema facts of the fast path, made at the first call.
    plan: PyOnceLock<Arc<Plan>>,
    /// Objects a boxed Python kernel's calls reuse.
    pub spare: Spare,
    /// `op.redispatch`, made with the object (`new_bound`), read by the interpreter as a
    /// member at its offset (`install_redispatch_member`).
    pub(super) redispatch: GilCell<Option<Py<PyAny>>>,
    /// Calls from Python try the lean entry first (`Vectorcall` in `ops.rs`); cleared for good by the
    /// first call that a Python function does not serve.
    pub lean: std::sync::atomic::AtomicBool,
}

impl PyOpOverload {
    /// A new `OpOverload` of `handle`, its `op.redispatch` made (the member of
    /// member reads it, so no object may be seen by Python code without it).
    pub fn new_bound(py: Python<'_>, handle: OperatorHandle) -> PyResult<Bound<'_, Self>> {
        let slf = Bound::new(py, Self::from_handle(handle))?;
        drop(Self::redispatch_fn(&slf)?);
        install_redispatch_member(&slf);
        Ok(slf)
    }

    fn from_handle(handle: OperatorHandle) -> Self {
        PyOpOverload {
            vectorcall: ENTRY,
            handle,
            plan: PyOnceLock::new(),
            spare: Spare::default(),
            redispatch: GilCell::default(),
            lean: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Breaks the cycle of `op.redispatch` (which holds its operator) when nothing else holds
    /// either object: an `OpOverload` made for one boxed call (the general path's) then goes
    /// when the call ends, not at the garbage collector's next run.
    pub fn drop_redispatch_cycle(slf: &Bound<'_, Self>) {
        let py = slf.py();
        let cell = &slf.get().redispatch;
        let kept = cell.take(py);
        // Ours and the function's (`__self__`) are the operator's only references, and the
        // cell's is the function's only one.
        let alone = kept
            .as_ref()
            .is_some_and(|f| refcnt(f.bind(py)) == 1 && refcnt(slf.as_any()) == 2);
        if alone {
            drop(kept);
        } else {
            let old = cell.replace(py, kept);
            drop(old);
        }
    }

    /// `op.redispatch`: one object per operator, made at the first look-up (`REDISPATCH`,
    /// whose getter serves every later look-up without coming here).
    pub fn redispatch_fn<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let cell = &slf.get().redispatch;
        let kept = cell.take(py);
        if let Some(f) = &kept {
            let found = f.clone_ref(py).into_bound(py);
            cell.replace(py, kept);
            return Ok(found);
        }
        let f = REDISPATCH.bind(slf)?;
        let old = cell.replace(py, Some(f.clone().unbind()));
        drop(old);
        Ok(f)
    }

    /// `op.redispatch` if it was made, a reference of the caller's.
    #[inline(always)]
    pub fn kept_redispatch<'py>(slf: &Bound<'py, Self>) -> Option<Bound<'py, PyAny>> {
        // SAFETY: the GIL is held (`slf`), and the reference into the cell ends (the function
        // given a reference of its own) before any Python code runs.
        unsafe { slf.get().redispatch.peek() }
            .as_ref()
            .map(|f| f.bind(slf.py()).clone())
    }

    /// Where in the object `op.redispatch` is kept (bytes from its start).
    pub fn redispatch_offset(slf: &Bound<'_, Self>) -> Option<usize> {
        ffi::offset_in(slf, &slf.get().redispatch)
    }

    /// The fast path's plan (None while the operator is not defined).
    #[inline]
    pub fn plan(&self, py: Python<'_>) -> Option<&Arc<Plan>> {
        if let Some(p) = self.plan.get(py) {
            return Some(p);
        }
        let schema = schema_for_plan(py, &self.handle)?;
        Some(self.plan.get_or_init(py, || Plan::of(py, schema)))
    }
}

/// The entry point every `OpOverload` carries.
const ENTRY: ffi::Entry = ffi::entry::<PyOpOverload>();

/// The method every `op.redispatch` object is (CPython points to it; called by `METH_FASTCALL`
/// in the lean trampoline, which turns a panic into an exception as PyO3's does, without
/// counting the GIL).
static REDISPATCH: Method<Redispatch<PyOpOverload>> =
    Method::fastcall(redispatch::NAME, redispatch::DOC);

/// `OpOverload.redispatch` as a read-only member at the offset of the kept function in the
/// object: CPython 3.11's `LOAD_ATTR` specializes a look-up of such a member into a type
/// check, a load and an incref (`LOAD_ATTR_SLOT`), where a getter always took the generic
/// look-up (`PyObject_GetAttr`, the type's attribute cache, the descriptor's call): about a
/// twentieth of the documented hop. The member reads the object's field, so every
/// `OpOverload` has its function made from the start ([`PyOpOverload::new_bound`]); only an
/// object the collector cleared (garbage) has none, and a look-up on it raises
/// `AttributeError`.
static MEMBER: Member = Member::new(redispatch::NAME, redispatch::GET_DOC);

/// Replaces [`GETTER`] with [`MEMBER`], once, given the first `OpOverload` made (whose
/// function is made). If the member cannot be made, the getter stays (it serves every object,
/// made or not).
fn install_redispatch_member(slf: &Bound<'_, PyOpOverload>) {
    let f = PyOpOverload::kept_redispatch(slf);
    MEMBER.install(slf, PyOpOverload::redispatch_offset(slf), f.as_ref());
}
