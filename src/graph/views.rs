//! Views in graph mode (DESIGN section 13: views behave as in eager mode, and are recorded). A
//! view ([`Tensor::view_of`]) of a graph backend's tensor keeps its base and its place among the
//! base's elements ([`ViewLayout`]); where a recorded call reads it, the recorder reads
//! `array_api::_strided_view(base, shape, strides, offset)` of the base's current data (pending
//! or computed) instead, a node like any other, so no backend hook runs while recording and a
//! later write of the base is seen. A write through the view records the write on those values
//! (`inplace.rs`), then `array_api::_strided_view_write(base, values, shape, strides,
//! offset)`, whose result becomes the base's data: the base's version moves on, so every view
//! of it reads the written values next, as in eager mode. This file says which calls those
//! are; `record.rs` records them.

use crate::dispatcher::{Dispatcher, OperatorHandle};
use crate::ivalue::{IValue, Stack};
use crate::tensor::{Tensor, ViewLayout};

/// The operator that reads a view of its base.
const READ: &str = "array_api::_strided_view";
/// The operator that writes a view's values into its base.
const WRITE: &str = "array_api::_strided_view_write";

/// The base and layout of `t` where graph mode records its reads: a view whose description
/// says its layout, of a base whose memory NumPy does not hold (NumPy may write exported
/// memory at any time, so eager mode remakes such a view at every read).
fn recordable(t: &Tensor) -> Option<(&Tensor, ViewLayout)> {
    let base = t.view_base()?;
    if base.is_exported() || t.is_exported() {
        return None;
    }
    Some((base, t.view_ops()?.layout()?))
}

/// The layout's numbers as constant arguments: `shape, strides, offset`.
fn layout_args(l: ViewLayout) -> [IValue; 3] {
    let shape = l.shape.iter().map(|&n| n as i64).collect();
    [
        IValue::IntList(shape),
        IValue::IntList(l.strides),
        IValue::Int(l.offset),
    ]
}

/// The call that reads the view `t` from its base: the operator and its arguments. `None`
/// where `t` is no view graph mode records (see [`recordable`]) or the operator is not defined
/// (`boxfall.array_api` defines it).
pub(super) fn read_call(t: &Tensor) -> Option<(OperatorHandle, Stack)> {
    let (base, layout) = recordable(t)?;
    let op = Dispatcher::lookup(READ)?;
    let mut stack = Vec::with_capacity(4);
    stack.push(IValue::Tensor(base.clone()));
    stack.extend(layout_args(layout));
    Some((op, stack))
}

/// Whether a write through the view `t` can be recorded: its reads can, it may be written,
/// and the operator that writes it is defined.
pub(super) fn writable(t: &Tensor) -> bool {
    recordable(t).is_some_and(|(_, l)| l.writable) && Dispatcher::lookup(WRITE).is_some()
}

/// The call that writes `values` (the view's new values, of its shape and dtype) through the
/// view `t` into its base, whose result is the base's new data; with the base. `None` where
/// the write cannot be recorded ([`writable`]).
pub(super) fn write_call(t: &Tensor, values: Tensor) -> Option<(OperatorHandle, Stack, Tensor)> {
    let (base, layout) = recordable(t)?;
    if !layout.writable {
        return None;
    }
    let op = Dispatcher::lookup(WRITE)?;
    let mut stack = Vec::with_capacity(5);
    stack.push(IValue::Tensor(base.clone()));
    stack.push(IValue::Tensor(values));
    stack.extend(layout_args(layout));
    Some((op, stack, base.clone()))
}
