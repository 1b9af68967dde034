//! Shape rules: an operator's output dtypes and shapes from its arguments, computed without
//! running it. An operator without a rule, or whose outputs depend on its values (`nonzero`,
//! `unique_*`, a boolean mask), has none, and breaks a graph.

use crate::ivalue::IValue;
use crate::tensor::TensorMeta;

/// The outputs' dtypes and shapes of operator `name` (`ns::op` or `ns::op.overload`, as
/// [`OperatorHandle::name`](crate::dispatcher::OperatorHandle::name) gives it) called with
/// `stack` (its arguments in the schema's order, defaults filled), as its CPU kernel would
/// make them; `None` where no rule says (data-dependent, unknown, or arguments the kernel would
/// refuse: the eager call then reports what was wrong).
///
/// ```
/// use boxfall::{IValue, Tensor};
/// use boxfall::graph::rules::output_metas;
/// let x = Tensor::from_array(ndarray::ArrayD::<f32>::zeros(vec![2, 1]));
/// let y = Tensor::from_array(ndarray::ArrayD::<f32>::zeros(vec![3]));
/// let out = output_metas("array_api::add", &[IValue::Tensor(x), IValue::Tensor(y)]).unwrap();
/// assert_eq!(out[0].to_string(), "float32[2, 3]");
/// assert!(output_metas("array_api::nonzero", &[]).is_none());
/// ```
pub fn output_metas(name: &str, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    match name {
        "array_api::add" | "array_api::subtract" | "array_api::multiply" => {
            let (a, b) = match stack {
                [IValue::Tensor(a), IValue::Tensor(b), ..] => (a.meta()?, b.meta()?),
                _ => return None,
            };
            if a.dtype != b.dtype {
                return None;
            }
            let shape = broadcast(&a.shape, &b.shape)?;
            Some(vec![TensorMeta {
                dtype: a.dtype,
                shape,
            }])
        }
        _ => None,
    }
}

/// The broadcast of two shapes (NumPy's rule), `None` where they do not broadcast.
fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        let pad = n - s.len();
        if i < pad {
            1
        } else {
            s[i - pad]
        }
    };
    (0..n)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect()
}
