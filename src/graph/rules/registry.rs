//! Shape rules registered per operator, as `torch.library.register_fake` registers a fake
//! kernel: a rule ([`ShapeRule`]) hangs off its operator's entry (the slot a layer above keeps
//! there, [`OpRule`]), so a recorded call loads it as the dispatcher loads a kernel, with no
//! name matched and nothing looked up. [`Library::register_shape_rule`](crate::Library) registers
//! one, and the library's close undoes it (an older registration of the operator's is then its
//! rule again); the array API's rules are registered so too
//! ([`Library::register_array_api_shape_rules`](crate::Library)).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::ivalue::IValue;
use crate::kernel::OperatorHandle;
use crate::key::DispatchKey;
use crate::rcu::{self, RcuCell};
use crate::tensor::TensorMeta;

/// An operator's shape rule: its outputs' dtypes and shapes from its arguments, computed
/// without running it, as its CPU kernel would make them (NumPy's dtypes: a graph backend
/// without 64-bit types narrows them as it narrows every result).
///
/// ```
/// use std::sync::Arc;
/// use boxfall::graph::rules::ShapeRule;
/// use boxfall::{IValue, Library, LibraryKind, OperatorHandle, Result};
/// use boxfall::tensor::TensorMeta;
/// /// `doc_rule::double(Tensor x) -> Tensor`: its output is its input's dtype and shape.
/// struct Same;
/// impl ShapeRule for Same {
///     fn metas(&self, _: &OperatorHandle, stack: &[IValue]) -> Result<Option<Vec<TensorMeta>>> {
///         Ok(match stack.first() {
///             Some(IValue::Tensor(t)) => t.meta().map(|m| vec![m]),
///             _ => None,
///         })
///     }
/// }
/// let mut lib = Library::new("doc_rule", LibraryKind::Def).unwrap();
/// let op = lib.define("double(Tensor x) -> Tensor").unwrap();
/// lib.register_shape_rule("double", Arc::new(Same)).unwrap();
/// let x = boxfall::Tensor::from_array(ndarray::ArrayD::<f32>::zeros(vec![2, 3]));
/// let out = boxfall::graph::rules::shape_rule_metas(&op, &[IValue::Tensor(x)]).unwrap();
/// assert_eq!(out.unwrap()[0].to_string(), "float32[2, 3]");
/// lib.close();
/// assert!(!boxfall::graph::rules::has_shape_rule(&op));
/// ```
pub trait ShapeRule: Send + Sync + 'static {
    /// The outputs of `op` (the operator the rule is registered for) called with `stack` (its
    /// arguments in the schema's order, defaults filled; a tensor's `meta()` gives its dtype
    /// and shape): `Ok(None)` where the rule cannot know them (data-dependent, or arguments the
    /// kernel would refuse: the call then breaks the graph, and the eager call reports what
    /// was wrong); an error fails the call with it. A dtype is a [`DType`](crate::tensor::DType)'s
    /// name (`DType::name`), which a recorded call does not look up again; one output a return
    /// of the schema, else the call fails naming the operator.
    fn metas(&self, op: &OperatorHandle, stack: &[IValue]) -> Result<Option<Vec<TensorMeta>>>;

    /// Whether the operator's Python scalars (`int`, `float`, `bool` arguments) may enter a
    /// graph as inputs rather than constants: true only where no scalar's value decides an
    /// output's dtype or shape, nor what the operator computes beyond the value itself (the
    /// elementwise operators' scalar overloads: `x * 0.5`). A value a rule reads must stay a
    /// constant, which keys the compiled graph. False (the default) keeps every one a
    /// constant.
    fn scalar_inputs(&self) -> bool {
        false
    }
}

/// What graph mode keeps on an operator's entry (made at its first use, by a registration or
/// a recorded call): its shape rule, the registrations it came from, where its graph-backend
/// kernels cannot be compiled, and an in-place operator's functional counterpart.
pub(crate) struct OpRule {
    /// The newest registration's rule, loaded by each recorded call.
    rule: RcuCell<Option<Arc<dyn ShapeRule>>>,
    /// `rule`'s [`ShapeRule::scalar_inputs`], read without the cell.
    pub(crate) scalar_inputs: AtomicBool,
    /// The registrations, oldest first (id, rule); the last is `rule`.
    registered: Mutex<Vec<(u64, Arc<dyn ShapeRule>)>>,
    /// The graph backends (a bit per key index) whose compiler cannot put the operator in a
    /// program ([`refuse`]): a call there breaks the graph.
    refused: AtomicU64,
    /// Why, per backend refused.
    reasons: Mutex<Vec<(DispatchKey, String)>>,
    /// An in-place operator's functional counterpart's name (`add_` is `add`, graph mode's
    /// `inplace.rs`), and its handle once found: a recorded in-place call then formats and
    /// looks up nothing.
    pub(crate) functional: Option<(Box<str>, OnceLock<OperatorHandle>)>,
}

impl OpRule {
    fn of(name: &str) -> OpRule {
        OpRule {
            rule: RcuCell::new(None),
            scalar_inputs: AtomicBool::new(false),
            registered: Mutex::new(Vec::new()),
            refused: AtomicU64::new(0),
            reasons: Mutex::new(Vec::new()),
            functional: functional_name(name).map(|f| (f.into(), OnceLock::new())),
        }
    }

    /// The outputs of `op` (whose slot this is) called with `stack`, by its rule; `Ok(None)`
    /// where it has none, or its rule cannot know them.
    #[inline]
    pub(crate) fn metas(
        &self,
        op: &OperatorHandle,
        stack: &[IValue],
    ) -> Result<Option<Vec<TensorMeta>>> {
        // A Python rule runs long in a read section: that only delays the release of a rule
        // replaced meanwhile, never a writer.
        let guard = rcu::read();
        match self.rule.load(&guard) {
            Some(rule) => rule.metas(op, stack),
            None => Ok(None),
        }
    }

    /// [`metas`](Self::metas) where an error is no rule (the views' and in-place calls'
    /// own operators, whose rules are the array API's and fail on nothing).
    pub(crate) fn known(&self, op: &OperatorHandle, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
        self.metas(op, stack).ok().flatten()
    }

    /// Whether graph backend `backend` refused the operator ([`refuse`]).
    #[inline]
    pub(crate) fn refused(&self, backend: DispatchKey) -> bool {
        backend.index() < 64 && self.refused.load(Ordering::Relaxed) & (1 << backend.index()) != 0
    }

    /// Publishes the newest registration's rule (none where none is left).
    fn publish(&self, registered: &[(u64, Arc<dyn ShapeRule>)]) {
        let top = registered.last().map(|(_, r)| r.clone());
        self.scalar_inputs.store(
            top.as_ref().is_some_and(|r| r.scalar_inputs()),
            Ordering::Relaxed,
        );
        self.rule.replace(top);
    }
}

/// The [`OpRule`] of `op`, made at the first use that asks: no name is matched, nor anything
/// looked up, at a recorded call after that.
pub(crate) fn op_rule(op: &OperatorHandle) -> &OpRule {
    // Only this sets the slot, so it is an `OpRule`; the fallback is never reached.
    static NONE: OnceLock<OpRule> = OnceLock::new();
    op.0.by_name
        .get_or_init(|| Box::new(OpRule::of(op.name())))
        .downcast_ref::<OpRule>()
        .unwrap_or_else(|| NONE.get_or_init(|| OpRule::of("")))
}

/// One registration of a shape rule, undone when dropped (a [`Library`](crate::Library) holds
/// its own and drops them at its close).
pub struct ShapeRuleRegistration {
    op: OperatorHandle,
    id: u64,
}

impl std::fmt::Debug for ShapeRuleRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShapeRuleRegistration({})", self.op.name())
    }
}

impl Drop for ShapeRuleRegistration {
    fn drop(&mut self) {
        let slot = op_rule(&self.op);
        let mut registered = slot.registered.lock().unwrap_or_else(|e| e.into_inner());
        registered.retain(|(id, _)| *id != self.id);
        slot.publish(&registered);
    }
}

/// Registers `rule` as `op`'s shape rule, newest first: it replaces the rule registered before
/// until the registration is dropped. `Library::register_shape_rule` is the usual way.
///
/// ```
/// use std::sync::Arc;
/// use boxfall::graph::rules::{has_shape_rule, register_shape_rule, ShapeRule};
/// use boxfall::{IValue, Library, LibraryKind, OperatorHandle, Result};
/// use boxfall::tensor::TensorMeta;
/// struct Unknown;
/// impl ShapeRule for Unknown {
///     fn metas(&self, _: &OperatorHandle, _: &[IValue]) -> Result<Option<Vec<TensorMeta>>> {
///         Ok(None)
///     }
/// }
/// let mut lib = Library::new("doc_register_rule", LibraryKind::Def).unwrap();
/// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
/// let registration = register_shape_rule(&op, Arc::new(Unknown));
/// assert!(has_shape_rule(&op));
/// drop(registration);
/// assert!(!has_shape_rule(&op));
/// ```
pub fn register_shape_rule(op: &OperatorHandle, rule: Arc<dyn ShapeRule>) -> ShapeRuleRegistration {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let slot = op_rule(op);
    let mut registered = slot.registered.lock().unwrap_or_else(|e| e.into_inner());
    registered.push((id, rule));
    slot.publish(&registered);
    ShapeRuleRegistration { op: op.clone(), id }
}

/// Whether `op` has a shape rule registered.
///
/// ```
/// let op = boxfall::Library::new("doc_has_rule", boxfall::LibraryKind::Def).unwrap()
///     .define("f(Tensor x) -> Tensor").unwrap();
/// assert!(!boxfall::graph::rules::has_shape_rule(&op));
/// ```
pub fn has_shape_rule(op: &OperatorHandle) -> bool {
    let slot = op_rule(op);
    !slot
        .registered
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_empty()
}

/// The outputs `op`'s registered shape rule gives for `stack` (`Ok(None)` where it has none,
/// or it cannot know them), as a recorded call gets them.
///
/// ```
/// let op = boxfall::Library::new("doc_rule_metas", boxfall::LibraryKind::Def).unwrap()
///     .define("f(Tensor x) -> Tensor").unwrap();
/// assert!(boxfall::graph::rules::shape_rule_metas(&op, &[]).unwrap().is_none());
/// ```
pub fn shape_rule_metas(op: &OperatorHandle, stack: &[IValue]) -> Result<Option<Vec<TensorMeta>>> {
    op_rule(op).metas(op, stack)
}

/// Marks `op` as one graph backend `backend`'s compiler cannot put in a program (its kernel
/// there cannot be traced), for `reason`: from now on a call of it there breaks the graph
/// (counted), where a rule would have recorded it. A compiler that finds this while it
/// compiles fails that program; the sync then computes the graph a node at a time, eagerly,
/// and commits it (see `sync.rs`).
///
/// ```
/// let op = boxfall::Library::new("doc_refuse", boxfall::LibraryKind::Def).unwrap()
///     .define("f(Tensor x) -> Tensor").unwrap();
/// let key = boxfall::key::register_backend_key("DocRefuseBackend").unwrap();
/// boxfall::graph::rules::refuse(&op, key, "its kernel reads the values");
/// assert_eq!(boxfall::graph::rules::refusal(&op, key).as_deref(), Some("its kernel reads the values"));
/// ```
pub fn refuse(op: &OperatorHandle, backend: DispatchKey, reason: &str) {
    let slot = op_rule(op);
    let mut reasons = slot.reasons.lock().unwrap_or_else(|e| e.into_inner());
    reasons.retain(|(k, _)| *k != backend);
    reasons.push((backend, reason.to_string()));
    if backend.index() < 64 {
        slot.refused
            .fetch_or(1 << backend.index(), Ordering::Relaxed);
    }
}

/// Why graph backend `backend` refused `op` ([`refuse`]), if it did.
pub fn refusal(op: &OperatorHandle, backend: DispatchKey) -> Option<String> {
    let slot = op_rule(op);
    let reasons = slot.reasons.lock().unwrap_or_else(|e| e.into_inner());
    reasons
        .iter()
        .find(|(k, _)| *k == backend)
        .map(|(_, r)| r.clone())
}

/// The outputs a rule gave for `op`, checked against its schema before they are recorded:
/// one a return, each of a shape of sizes that fit; anything else is an error naming the
/// operator, raised at the call (a rule that cannot know its
/// outputs says so with `Ok(None)`, not with a wrong meta).
pub(crate) fn checked(op: &OperatorHandle, returns: usize, metas: &[TensorMeta]) -> Result<()> {
    let wrong = |what: String| {
        Err(Error::Registration(format!(
            "the shape rule of '{}' {what}; a rule returns one bf.TensorMeta per return of the \
             schema, of a dtype boxfall knows (as its CPU kernel makes it), with a shape of \
             non-negative sizes",
            op.name()
        )))
    };
    if metas.len() != returns {
        return wrong(format!(
            "gave {} outputs for {returns} returns",
            metas.len()
        ));
    }
    for (i, m) in metas.iter().enumerate() {
        // A dtype's name is checked where it is read from a foreign rule (Python's); a Rust
        // rule names a `DType`'s, and a recorded call pays no look-up of it.
        // A size past isize::MAX is a negative number where it came from.
        if m.shape.iter().any(|&s| s > isize::MAX as usize) {
            return wrong(format!("gave output {i} a negative size ({:?})", m.shape));
        }
    }
    Ok(())
}

/// The functional counterpart of in-place operator `name` (`ns::op` or `ns::op.overload`): the
/// array object's in-place operators (`add_`, `add_.Scalar`) and `setitem`.
fn functional_name(name: &str) -> Option<String> {
    let (ns, rest) = name.split_once("::")?;
    let (base, overload) = rest.split_once('.').unwrap_or((rest, ""));
    if ns != "array_api" {
        return None;
    }
    if base == "setitem" {
        return Some(match overload {
            "" => "array_api::setitem_functional".to_string(),
            o => format!("array_api::setitem_functional.{o}"),
        });
    }
    let functional = base.strip_suffix('_')?;
    match overload {
        "" => Some(format!("array_api::{functional}")),
        "Scalar" => Some(format!("array_api::{functional}.Tensor_Scalar")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_operators_map_to_their_functional_overloads() {
        let f = |n: &str| functional_name(n);
        assert_eq!(f("array_api::add_").as_deref(), Some("array_api::add"));
        assert_eq!(
            f("array_api::add_.Scalar").as_deref(),
            Some("array_api::add.Tensor_Scalar")
        );
        assert_eq!(
            f("array_api::setitem.Scalar").as_deref(),
            Some("array_api::setitem_functional.Scalar")
        );
        assert_eq!(f("array_api::add"), None);
        assert_eq!(f("aten::add_"), None);
    }
}
