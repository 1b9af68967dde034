//! What the fast path (`fast.rs`) keeps, so that a call decides nothing it decided before:
//! the facts of a schema it needs ([`Plan`], made once per schema), and the objects that an
//! operator's next call reuses ([`Spare`], one per `OpOverload`).
//! They stand below the operator object (`overload.rs`), which holds both, and below the fast
//! path, which reads them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

use super::convert::{default_ivalue, to_py, Passed, TensorStyle};
use super::errors::IntoPy;
use super::ffi::{list_set, refcnt};
use super::gil_cell::GilCell;
use super::keyset::PyKeySet;
use crate::dispatcher::{OpSchema, OperatorHandle};
use crate::ivalue::IValue;
use crate::key::DispatchKeySet;
use crate::schema::Type;

/// Operators with more arguments or returns than this take the general path.
pub(super) const MAX: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Tensor,
    Int,
    Float,
    Bool,
    Scalar,
    Str,
}

/// The kind of a schema type the fast path handles, and whether it is optional.
fn kind_of(ty: &Type) -> Option<(Kind, bool)> {
    let k = |t: &Type| match t {
        Type::Tensor => Some(Kind::Tensor),
        Type::Int | Type::SymInt => Some(Kind::Int),
        Type::Float | Type::SymFloat => Some(Kind::Float),
        Type::Bool | Type::SymBool => Some(Kind::Bool),
        Type::Scalar => Some(Kind::Scalar),
        Type::Str => Some(Kind::Str),
        _ => None,
    };
    match ty {
        Type::Optional(inner) => k(inner).map(|k| (k, true)),
        t => k(t).map(|k| (k, false)),
    }
}

pub(super) struct ArgPlan {
    pub(super) kind: Kind,
    pub(super) optional: bool,
    pub(super) write: bool,
    pub(super) ty: Type,
    /// The name, interned (keyword lookups hash it once).
    pub(super) name: Py<PyString>,
    /// The default as the object a kernel gets (only immutable ones: None, bool, int, float,
    /// str).
    pub(super) default: Option<Py<PyAny>>,
    /// The default as the general path binds it.
    pub(super) default_value: Option<IValue>,
}

pub(super) struct RetPlan {
    pub(super) kind: Kind,
    pub(super) optional: bool,
    pub(super) ty: Type,
}

pub(super) struct Body {
    pub(super) args: Vec<ArgPlan>,
    /// How many arguments come before the keyword-only ones.
    pub(super) positional: usize,
    /// Whether the schema has keyword-only arguments (the kernel then gets a kwargs dict).
    pub(super) kwonly: bool,
    pub(super) rets: Vec<RetPlan>,
}

/// The facts of one schema the fast path needs; `body` is None when the schema has an
/// argument or return the fast path does not handle.
pub struct Plan {
    pub(super) schema: Arc<OpSchema>,
    pub(super) body: Option<Body>,
}

impl Plan {
    fn new(py: Python<'_>, schema: Arc<OpSchema>) -> Plan {
        let body = Self::body(py, &schema);
        Plan { schema, body }
    }

    fn body(py: Python<'_>, schema: &OpSchema) -> Option<Body> {
        let s = &schema.schema;
        if s.arguments.len() > MAX || s.returns.len() > MAX || s.is_vararg || s.is_varret {
            return None;
        }
        let positional = s.arguments.iter().take_while(|a| !a.kwarg_only).count();
        if s.arguments[positional..].iter().any(|a| !a.kwarg_only) {
            return None;
        }
        let mut args = Vec::with_capacity(s.arguments.len());
        for a in &s.arguments {
            let (kind, optional) = kind_of(&a.ty)?;
            let default_value = a.default.as_ref().map(|d| default_ivalue(&d.value, &a.ty));
            let default = match &a.default {
                None => None,
                Some(d) => {
                    let v = default_ivalue(&d.value, &a.ty);
                    if !matches!(
                        v,
                        IValue::None
                            | IValue::Bool(_)
                            | IValue::Int(_)
                            | IValue::Double(_)
                            | IValue::Str(_)
                    ) {
                        return None;
                    }
                    let o = to_py(py, &v, &Passed::default(), TensorStyle::Caller).ok()?;
                    Some(o.unbind())
                }
            };
            args.push(ArgPlan {
                kind,
                optional,
                write: a.is_write(),
                ty: a.ty.clone(),
                name: PyString::intern(py, &a.name).unbind(),
                default,
                default_value,
            });
        }
        let mut rets = Vec::with_capacity(s.returns.len());
        for r in &s.returns {
            let (kind, optional) = kind_of(&r.ty)?;
            rets.push(RetPlan {
                kind,
                optional,
                ty: r.ty.clone(),
            });
        }
        Some(Body {
            kwonly: positional < args.len(),
            args,
            positional,
            rets,
        })
    }

    /// The plan of `schema`, shared by every `OpOverload` object of it (made once per schema;
    /// the lock is taken only when an `OpOverload` object first calls, never per call).
    pub fn of(py: Python<'_>, schema: Arc<OpSchema>) -> Arc<Plan> {
        type Cache = Mutex<HashMap<usize, Weak<Plan>>>;
        static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        let key = Arc::as_ptr(&schema) as usize;
        // A live plan holds its schema, so an address in the map with a live plan is that
        // schema's.
        let found = cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .and_then(Weak::upgrade);
        if let Some(p) = found {
            return p;
        }
        let plan = Arc::new(Plan::new(py, schema));
        let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        map.insert(key, Arc::downgrade(&plan));
        drop(map);
        plan
    }
}

/// The objects of a boxed call that the next one may reuse (one of each, kept by the
/// `OpOverload`): making and freeing the stack list and the key set object was a tenth of a
/// Python fallback's hop.
#[derive(Default)]
pub struct Spare {
    /// A list nobody else holds, its items None (the last call's length and storage).
    pub(super) list: GilCell<Option<Py<PyList>>>,
    /// The key set object last passed, with its keys (immutable, so it may be shared).
    keys: GilCell<Option<(DispatchKeySet, Py<PyKeySet>)>>,
}

impl Spare {
    /// The key set object of `keys`: the last one if its keys are these.
    #[inline]
    pub(super) fn keys_obj<'py>(
        &self,
        py: Python<'py>,
        keys: DispatchKeySet,
    ) -> PyResult<Bound<'py, PyKeySet>> {
        let last = self.keys.take(py);
        if let Some((k, obj)) = &last {
            if *k == keys {
                let found = obj.clone_ref(py).into_bound(py);
                self.keys.replace(py, last);
                return Ok(found);
            }
        }
        let obj = Bound::new(py, PyKeySet(keys))?;
        let old = self.keys.replace(py, Some((keys, obj.clone().unbind())));
        // As `Bound`s, whose drop decrements at once (a `Py`'s asks PyO3's count first).
        for (_, o) in last.into_iter().chain(old) {
            drop(o.into_bound(py));
        }
        Ok(obj)
    }

    /// Keeps `list` for the next call if the kernel kept no reference to it (its items
    /// replaced by None first, so that they go now, after the cell was written, while the
    /// list keeps its length and storage: emptying it freed the storage, which the next call's
    /// first append allocated again).
    #[inline(always)]
    pub(super) fn give_back(&self, list: Bound<'_, PyList>) {
        let py = list.py();
        if refcnt(list.as_any()) != 1 {
            return;
        }
        let none = py.None().into_bound(py);
        for i in 0..list.len() {
            list_set(&list, i, &none);
        }
        let old = self.list.replace(py, Some(list.unbind()));
        drop(old.map(|o| o.into_bound(py)));
    }
}

/// The schema of a defined operator, for plans (None: undefined; the general path raises).
pub fn schema_for_plan(py: Python<'_>, op: &OperatorHandle) -> Option<Arc<OpSchema>> {
    op.schema().py(py).ok()
}
