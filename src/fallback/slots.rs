//! Where a tensor sits among a call's arguments (an argument, or an element of a list one).

use crate::error::Result;
use crate::ivalue::{IValue, Stack};
use crate::schema::SchemaInfo;
use crate::tensor::Tensor;

/// Calls `f(arg, slot, tensor, is_write)` for every tensor among the arguments, list elements
/// included, and stops at its first error.
pub(super) fn try_each_tensor<'s>(
    info: &SchemaInfo,
    stack: &'s Stack,
    mut f: impl FnMut(usize, Option<usize>, &'s Tensor, bool) -> Result<()>,
) -> Result<()> {
    for &i in &info.tensor_args {
        let write = info.args.get(i).is_some_and(|a| a.is_write);
        match stack.get(i) {
            Some(IValue::Tensor(t)) => f(i, None, t, write)?,
            Some(IValue::TensorList(ts)) => {
                for (j, t) in ts.iter().enumerate() {
                    f(i, Some(j), t, write)?;
                }
            }
            Some(IValue::OptionalTensorList(ts)) => {
                for (j, t) in ts.iter().enumerate() {
                    if let Some(t) = t {
                        f(i, Some(j), t, write)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

pub(super) fn element(v: &IValue, slot: Option<usize>) -> Option<&Tensor> {
    match (v, slot) {
        (IValue::Tensor(t), None) => Some(t),
        (IValue::TensorList(ts), Some(j)) => ts.get(j),
        (IValue::OptionalTensorList(ts), Some(j)) => ts.get(j).and_then(|t| t.as_ref()),
        _ => None,
    }
}

pub(super) fn place(v: &mut IValue, slot: Option<usize>, t: Tensor) {
    match (v, slot) {
        (v, None) => *v = IValue::Tensor(t),
        (IValue::TensorList(ts), Some(j)) => {
            if let Some(x) = ts.get_mut(j) {
                *x = t;
            }
        }
        (IValue::OptionalTensorList(ts), Some(j)) => {
            if let Some(x) = ts.get_mut(j) {
                *x = Some(t);
            }
        }
        _ => {}
    }
}
