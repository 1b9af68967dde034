//! Views in graph mode (views behave as in eager mode, and are recorded). A
//! view ([`Tensor::view_of`]) of a graph backend's tensor keeps its base and its place among the
//! base's elements ([`ViewLayout`]); where a recorded call reads it, the recorder reads
//! `array_api::_strided_view(base, shape, strides, offset)` of the base's current data (pending
//! or computed) instead, a node like any other, so no backend hook runs while recording and a
//! later write of the base is seen. A write through the view records the write on those values
//! (`inplace.rs`), then `array_api::_strided_view_write(base, values, shape, strides,
//! offset)`, whose result becomes the base's data: the base's version moves on, so every view
//! of it reads the written values next, as in eager mode. A view read again from the same
//! data of its base (`x.T` passed to three calls, a loop's `ids[None]`) reuses the first
//! read's node, so that it is one node, as one value. This file says which calls those are,
//! and finds a read to reuse; `record.rs` records them.

use std::sync::{Arc, OnceLock};

use crate::dispatcher::{defined, OperatorHandle};
use crate::ivalue::{IValue, Stack};
use crate::tensor::{Tensor, ViewLayout};

use super::pending::{as_pending, pending_of};
use super::program::Arg;
use super::state::{lock, Shared};

/// The operator that reads a view of its base.
const READ: &str = "array_api::_strided_view";
/// The operator that writes a view's values into its base.
const WRITE: &str = "array_api::_strided_view_write";

static READ_OP: OnceLock<OperatorHandle> = OnceLock::new();
static WRITE_OP: OnceLock<OperatorHandle> = OnceLock::new();

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

/// The call that reads the view `t` from its base: the operator, its arguments and the
/// view's layout. `None` where `t` is no view graph mode records (see [`recordable`]) or the
/// operator is not defined (`boxfall.array_api` defines it).
pub(super) fn read_call(t: &Tensor) -> Option<(OperatorHandle, Stack, ViewLayout)> {
    let (base, layout) = recordable(t)?;
    let op = defined(&READ_OP, READ)?;
    let mut stack = Vec::with_capacity(4);
    stack.push(IValue::Tensor(base.clone()));
    stack.extend(layout_args(layout.clone()));
    Some((op, stack, layout))
}

/// The values of an earlier read, in `rec`'s graph, of the view of `layout` from the data the
/// base (`read`'s first argument, [`read_call`]'s) has now; `None` if there is none. The read
/// node is checked against the base, not trusted to a key: its argument is the base's
/// pending result (a write since rebinds it to another node's) or its input at the base's
/// version now (an eager write moves the version on), so a write always makes the next read
/// a new node. Its values are the graph's handle of them, kept while anything can read them.
pub(super) fn recorded_read(
    rec: &Arc<Shared>,
    read: &Stack,
    layout: &ViewLayout,
) -> Option<Tensor> {
    let Some(IValue::Tensor(base)) = read.first() else {
        return None;
    };
    let r = lock(rec);
    if r.computing.is_some() || r.state.view_reads.is_empty() {
        return None;
    }
    let state = &r.state;
    // The base's data now: the node of this graph that makes it (a payload of another
    // thread's graph may have the same numbers), or its version.
    let data = base.data();
    let pending = pending_of(&data).map(|p| {
        let p = as_pending(&p);
        let ours = std::ptr::eq(p.recording.as_ptr(), Arc::as_ptr(rec));
        (ours && p.result.get().is_none() && p.generation == r.generation)
            .then_some((p.node, p.out))
    });
    let version = base.data_version();
    let reads_base = |node: usize| match state.nodes.get(node).and_then(|n| n.args.first()) {
        Some(Arg::Node(m, o)) => pending == Some(Some((*m, *o))),
        Some(Arg::Input(i)) => state
            .inputs
            .get(*i)
            .is_some_and(|i| i.tensor.same(base) && i.version == version),
        _ => false,
    };
    let &(_, node) = state
        .view_reads
        .iter()
        .rev()
        .find(|(l, n)| l == layout && reads_base(*n))?;
    state
        .pending
        .iter()
        .find(|(_, n, out)| (*n, *out) == (node, 0))
        .map(|(t, _, _)| t.clone())
}

/// How many reads [`note_read`] keeps: a view is read again soon after (a loop's `x.T`, the
/// same view passed to the next call), and the list is searched at each read.
const KEPT_READS: usize = 32;

/// Notes that `values` (pending, the result of a `_strided_view` node of `rec`'s graph) are
/// the view of `layout` read, for [`recorded_read`], which finds the latest first.
pub(super) fn note_read(rec: &Arc<Shared>, values: &Tensor, layout: ViewLayout) {
    let Some(p) = pending_of(&values.data()) else {
        return;
    };
    let p = as_pending(&p);
    let mut r = lock(rec);
    let ours = std::ptr::eq(p.recording.as_ptr(), Arc::as_ptr(rec));
    if !ours || p.generation != r.generation || r.computing.is_some() || p.out != 0 {
        return;
    }
    let reads = &mut r.state.view_reads;
    if reads.len() >= KEPT_READS {
        reads.remove(0);
    }
    reads.push((layout, p.node));
}

/// Whether a write through the view `t` can be recorded: its reads can, it may be written,
/// and the operator that writes it is defined.
pub(super) fn writable(t: &Tensor) -> bool {
    recordable(t).is_some_and(|(_, l)| l.writable) && defined(&WRITE_OP, WRITE).is_some()
}

/// The call that writes `values` (the view's new values, of its shape and dtype) through the
/// view `t` into its base, whose result is the base's new data; with the base. `None` where
/// the write cannot be recorded ([`writable`]).
pub(super) fn write_call(t: &Tensor, values: Tensor) -> Option<(OperatorHandle, Stack, Tensor)> {
    let (base, layout) = recordable(t)?;
    if !layout.writable {
        return None;
    }
    let op = defined(&WRITE_OP, WRITE)?;
    let mut stack = Vec::with_capacity(5);
    stack.push(IValue::Tensor(base.clone()));
    stack.push(IValue::Tensor(values));
    stack.extend(layout_args(layout));
    Some((op, stack, base.clone()))
}
