//! Constants a binding passes as opaque objects (`IValue::Object`: a Python `slice`, `...`, a
//! NumPy integer in an index) made comparable: a binding installs a describer that gives such
//! an object's value as a plain `IValue`, so that a call holding one can be recorded (its shape
//! rule reads the description) and its graph keyed by value, not by the object's identity.
//! The node keeps the object itself, so a kernel replaying it gets what eager kernels get.

use std::any::Any;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use crate::ivalue::IValue;

/// A binding's describer: an object's value as a plain `IValue`, `None` for an object it
/// cannot describe (which then breaks the graph).
pub type ObjectDescriber = fn(&(dyn Any + Send + Sync)) -> Option<IValue>;

static DESCRIBER: OnceLock<ObjectDescriber> = OnceLock::new();

/// Installs the describer of `IValue::Object`s (the first one installed stays). The Python
/// bindings describe a `slice` as `("<slice>", start, stop, step)`, `...` as `"<ellipsis>"`
/// and a NumPy integer as its int.
///
/// ```
/// use boxfall::graph::{describe_object, set_object_describer};
/// use boxfall::IValue;
/// fn unit(o: &(dyn std::any::Any + Send + Sync)) -> Option<IValue> {
///     o.downcast_ref::<()>().map(|_| IValue::Str("unit".into()))
/// }
/// set_object_describer(unit);
/// let o: std::sync::Arc<dyn std::any::Any + Send + Sync> = std::sync::Arc::new(());
/// assert!(describe_object(&o).is_some());
/// ```
pub fn set_object_describer(f: ObjectDescriber) {
    let _ = DESCRIBER.set(f);
}

/// The value of an object as the installed describer gives it; `None` without a describer
/// or for an object it does not describe.
///
/// ```
/// let o: std::sync::Arc<dyn std::any::Any + Send + Sync> = std::sync::Arc::new(1.5_f32);
/// assert!(boxfall::graph::describe_object(&o).is_none());
/// ```
pub fn describe_object(o: &Arc<dyn Any + Send + Sync>) -> Option<IValue> {
    DESCRIBER.get().and_then(|f| f(&**o))
}

/// `v` with every object in it (in lists and tuples too) replaced by its description; `None`
/// if one cannot be described. Borrowed where `v` holds no object.
pub(crate) fn described(v: &IValue) -> Option<Cow<'_, IValue>> {
    match v {
        IValue::Object(o) => describe_object(o).map(Cow::Owned),
        IValue::List(items) | IValue::Tuple(items) => {
            if !items.iter().any(holds_object) {
                return Some(Cow::Borrowed(v));
            }
            let made = items
                .iter()
                .map(|x| described(x).map(Cow::into_owned))
                .collect::<Option<Vec<_>>>()?;
            Some(Cow::Owned(match v {
                IValue::List(_) => IValue::List(made),
                _ => IValue::Tuple(made),
            }))
        }
        _ => Some(Cow::Borrowed(v)),
    }
}

/// The stack with its objects described (see [`described`]); borrowed where it holds none.
pub(crate) fn described_stack(stack: &[IValue]) -> Option<Cow<'_, [IValue]>> {
    if !stack.iter().any(holds_object) {
        return Some(Cow::Borrowed(stack));
    }
    stack
        .iter()
        .map(|v| described(v).map(Cow::into_owned))
        .collect::<Option<Vec<_>>>()
        .map(Cow::Owned)
}

/// Whether `v` is or holds an object.
fn holds_object(v: &IValue) -> bool {
    match v {
        IValue::Object(_) => true,
        IValue::List(items) | IValue::Tuple(items) => items.iter().any(holds_object),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_without_objects_is_borrowed_as_it_is() {
        let stack = [
            IValue::Int(1),
            IValue::Tuple(vec![IValue::None, IValue::Int(2)]),
        ];
        assert!(matches!(described_stack(&stack), Some(Cow::Borrowed(_))));
    }

    #[test]
    fn an_object_nobody_describes_gives_no_stack() {
        // No describer for a `u8` (the doctest's, if installed, describes `()` only).
        let o: Arc<dyn Any + Send + Sync> = Arc::new(7_u8);
        let stack = [IValue::Tuple(vec![IValue::Int(1), IValue::Object(o)])];
        assert!(described_stack(&stack).is_none());
    }
}
