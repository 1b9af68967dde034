//! The unit tests of `ivalue.rs`: the stack conventions of arguments and returns.

use super::*;
use std::sync::Arc;

fn object(o: &Arc<dyn Any + Send + Sync>) -> IValue {
    IValue::Object(o.clone())
}

#[test]
fn a_tuple_goes_onto_the_stack_and_back_in_order_above_what_was_there() {
    let mut stack = vec![IValue::Str("below".into())];
    (1_i64, 2.5_f64, String::from("s")).push_onto(&mut stack);
    assert_eq!(stack.len(), 4);
    let (a, b, c) = <(i64, f64, String)>::pop_from(&mut stack).unwrap();
    assert_eq!((a, b, c.as_str()), (1, 2.5, "s"));
    assert_eq!(stack.len(), 1);
    assert!(matches!(&stack[0], IValue::Str(s) if &**s == "below"));
}

#[test]
fn a_value_of_the_wrong_kind_mid_tuple_drops_every_value_exactly_once() {
    let o: Arc<dyn Any + Send + Sync> = Arc::new(7_u8);
    let mut stack = vec![object(&o), IValue::Int(1), object(&o), object(&o)];
    // (IValue, i64, i64): the third value is an object, not an int.
    let err = <(IValue, i64, i64)>::pop_from(&mut stack).err().unwrap();
    assert!(err.to_string().contains("expected int"), "{err}");
    assert_eq!(
        stack.len(),
        1,
        "the three values are gone, the one below stays"
    );
    assert_eq!(
        Arc::strong_count(&o),
        2,
        "the popped objects were dropped, once each"
    );
    drop(stack);
    assert_eq!(Arc::strong_count(&o), 1);
}

#[test]
fn tensors_are_read_out_of_their_slots_and_other_values_in_tensor_slots_dropped_once() {
    let o: Arc<dyn Any + Send + Sync> = Arc::new(3_u8);
    let t = Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    let mut stack = vec![IValue::Tensor(t.clone()), IValue::Tensor(t.clone())];
    let (a, b) = <(Tensor, Tensor)>::pop_from(&mut stack).unwrap();
    assert!(stack.is_empty());
    assert!(
        a.same(&t) && b.same(&t),
        "the tensors themselves, not copies"
    );
    drop((a, b));
    // A tensor slot holding something else: an error, and the value dropped once; the
    // tensor before it is read out and dropped with the error, once.
    let mut stack = vec![IValue::Tensor(t.clone()), object(&o), object(&o)];
    let err = <(Tensor, Tensor, Tensor)>::pop_from(&mut stack)
        .err()
        .unwrap();
    assert!(err.to_string().contains("expected Tensor"), "{err}");
    assert!(stack.is_empty());
    assert_eq!(Arc::strong_count(&o), 1, "each object dropped exactly once");
    // The tensor is still whole: its data reads back as before.
    assert_eq!(
        t.to_host().unwrap().as_f64().unwrap().as_slice().unwrap(),
        &[1.0, 2.0]
    );
}

#[test]
fn too_few_values_is_an_error_that_leaves_the_stack_alone() {
    let mut stack = vec![IValue::Int(1)];
    assert!(<(i64, i64)>::pop_from(&mut stack).is_err());
    assert_eq!(stack.len(), 1);
}

#[test]
fn returns_are_pushed_in_place_and_popped_back() {
    let o: Arc<dyn Any + Send + Sync> = Arc::new(1_u8);
    let mut stack = Vec::new();
    for _ in 0..100 {
        object(&o).push_onto(&mut stack); // growing past the first capacity
    }
    assert_eq!(stack.len(), 100);
    assert_eq!(Arc::strong_count(&o), 101);
    stack.truncate(1);
    let v = <IValue as CallReturns>::pop_from(&mut stack).unwrap();
    assert!(matches!(v, IValue::Object(_)));
    drop(v);
    assert_eq!(Arc::strong_count(&o), 1);
}
