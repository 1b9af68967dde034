//! [`IValue::tensors`]'s iterator: a concrete type rather than a boxed one, since the graph
//! recorder and the CPU fallback walk every argument of a call with it, and a box was an
//! allocation per tensor argument of every call. Only a list of values (`List`, `Tuple`),
//! which nests, still boxes its inner walk.

use std::iter::Flatten;
use std::slice::Iter;

use super::IValue;
use crate::tensor::Tensor;

/// The tensors an [`IValue`] holds, in order ([`IValue::tensors`]).
///
/// ```
/// use boxfall::IValue;
/// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// let v = IValue::TensorList(vec![t.clone(), t]);
/// assert_eq!(v.tensors().count(), 2);
/// ```
pub struct Tensors<'a>(Walk<'a>);

enum Walk<'a> {
    One(Option<&'a Tensor>),
    List(Iter<'a, Tensor>),
    Optional(Flatten<Iter<'a, Option<Tensor>>>),
    Nested(Box<dyn Iterator<Item = &'a Tensor> + 'a>),
}

impl IValue {
    /// Every tensor this value holds, in order.
    ///
    /// ```
    /// assert_eq!(boxfall::IValue::Int(1).tensors().count(), 0);
    /// ```
    pub fn tensors(&self) -> Tensors<'_> {
        Tensors(match self {
            IValue::Tensor(t) => Walk::One(Some(t)),
            IValue::TensorList(ts) => Walk::List(ts.iter()),
            IValue::OptionalTensorList(ts) => Walk::Optional(ts.iter().flatten()),
            IValue::List(vs) | IValue::Tuple(vs) => {
                Walk::Nested(Box::new(vs.iter().flat_map(IValue::tensors)))
            }
            _ => Walk::One(None),
        })
    }
}

impl<'a> Iterator for Tensors<'a> {
    type Item = &'a Tensor;

    #[inline]
    fn next(&mut self) -> Option<&'a Tensor> {
        match &mut self.0 {
            Walk::One(t) => t.take(),
            Walk::List(ts) => ts.next(),
            Walk::Optional(ts) => ts.next(),
            Walk::Nested(ts) => ts.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: f64) -> Tensor {
        Tensor::from_array(ndarray::arr1(&[v]).into_dyn())
    }

    fn firsts(v: &IValue) -> Vec<f64> {
        v.tensors()
            .map(|t| t.host_array().unwrap().as_f64().unwrap()[[0]])
            .collect()
    }

    #[test]
    fn every_kind_of_value_gives_its_tensors_in_order() {
        assert_eq!(firsts(&IValue::Tensor(t(1.0))), [1.0]);
        assert_eq!(
            firsts(&IValue::TensorList(vec![t(1.0), t(2.0)])),
            [1.0, 2.0]
        );
        let optional = IValue::OptionalTensorList(vec![Some(t(1.0)), None, Some(t(3.0))]);
        assert_eq!(firsts(&optional), [1.0, 3.0]);
        let nested = IValue::Tuple(vec![
            IValue::Int(0),
            IValue::Tensor(t(1.0)),
            IValue::List(vec![
                IValue::TensorList(vec![t(2.0)]),
                IValue::Tensor(t(3.0)),
            ]),
        ]);
        assert_eq!(firsts(&nested), [1.0, 2.0, 3.0]);
        assert_eq!(IValue::Int(1).tensors().count(), 0);
        assert_eq!(IValue::None.tensors().next().map(|_| ()), None);
    }
}
