//! In-place operators recorded functionally: a call that writes one tensor argument (`x += y`
//! is `array_api::add_`, `x[k] = v` is `array_api::setitem`) records its functional
//! counterpart (`add`, `setitem_functional`), whose result then becomes the written tensor's
//! data (a pending payload, the tensor's version moved on as by an eager write). The graph
//! reads the tensor's old data as it read it before (an input, or an earlier node's result),
//! so a failed sync, which leaves the graph as it was, loses neither the old values nor the
//! write. A base whose views were made is written so too: the write moves its version on, so
//! its views read the new data next (`views.rs`). A view is written through its base
//! (`views.rs`: the recorder writes the values it read, then them into the base); a tensor
//! whose memory NumPy holds is not written so: eager mode writes it, a counted graph break.

use std::sync::OnceLock;

use crate::dispatcher::{defined, OperatorHandle};
use crate::error::{Error, Result};
use crate::ivalue::{IValue, Stack};
use crate::tensor::{Tensor, TensorMeta};

use super::pending::pending_meta;
use super::rules::op_rule;
use super::state::{lock, recording, wait_settled};

/// An in-place call to record as its functional counterpart.
pub(super) struct Write {
    /// The functional operator.
    pub(super) op: OperatorHandle,
    /// The written tensor.
    pub(super) target: Tensor,
    /// Whether the in-place operator returns the written tensor (`add_`), or nothing
    /// (`setitem`).
    pub(super) returns_target: bool,
    /// Where the functional result has another dtype than the target (`float32 += float64`,
    /// which NumPy computes in float64 and casts back by `same_kind`): `astype` and the
    /// target's meta, recorded after the functional node.
    pub(super) cast: Option<(OperatorHandle, TensorMeta)>,
}

/// The functional form of the in-place call `op` on `stack`, where it can be recorded so: one
/// written argument, a tensor of `backend` that no view can see, and a functional counterpart
/// that takes the same arguments. `None`: the call breaks the graph.
pub(super) fn functional(
    op: &OperatorHandle,
    backend: crate::key::DispatchKey,
    stack: &Stack,
) -> Result<Option<Write>> {
    let schema = op.schema()?;
    let info = &schema.info;
    let mut written = info.args.iter().enumerate().filter(|(_, a)| a.is_write);
    let (Some((at, _)), None) = (written.next(), written.next()) else {
        return Ok(None);
    };
    let returns_target = match info.returns.as_slice() {
        [] => false,
        [r] if r.aliases_arg == Some(at) => true,
        _ => return Ok(None),
    };
    let Some(IValue::Tensor(target)) = stack.get(at) else {
        return Ok(None);
    };
    // A write NumPy's arrays of exported memory see must reach that memory: eager mode does
    // that. A view is written through its base (`record.rs`), not here.
    if target.key() != backend || target.is_view() || target.is_exported() {
        return Ok(None);
    }
    let Some((name, found)) = &op_rule(op).functional else {
        return Ok(None);
    };
    let Some(f) = defined(found, name) else {
        return Ok(None);
    };
    if f.schema()?.info.args.len() != info.args.len() {
        return Ok(None);
    }
    Ok(Some(Write {
        op: f,
        target: target.clone(),
        returns_target,
        cast: None,
    }))
}

/// `w` where the functional result (`out`, from the shape rules) can become the target's
/// data: of the target's dtype and shape, as an eager write keeps them, or of its shape in
/// another dtype that the in-place operator `op`'s own rule says the write casts to the
/// target's (then `w.cast` is set). `None`: the call breaks the graph.
pub(super) fn fitted(
    mut w: Write,
    op: &OperatorHandle,
    stack: &Stack,
    out: &[TensorMeta],
) -> Option<Write> {
    let meta = pending_meta(&w.target).or_else(|| w.target.meta())?;
    let [o] = out else {
        return None;
    };
    if *o == meta {
        return Some(w);
    }
    // The in-place operator's rule holds NumPy's casting of the result into the target.
    let written = op_rule(op).known(op, stack)?;
    if o.shape != meta.shape || written.as_slice() != [meta.clone()] {
        return None;
    }
    static ASTYPE: OnceLock<OperatorHandle> = OnceLock::new();
    w.cast = Some((defined(&ASTYPE, "array_api::astype")?, meta));
    Some(w)
}

/// After the functional node was recorded (its pending result alone on `stack`), where the
/// write casts it: `stack` becomes `astype`'s arguments (the result, the target's dtype), and
/// the operator and its output are given to record next.
pub(super) fn cast_call(w: &Write, stack: &mut Stack) -> Option<(OperatorHandle, TensorMeta)> {
    let (astype, meta) = w.cast.clone()?;
    let result = stack.pop()?;
    stack.extend([
        result,
        IValue::Str(meta.dtype.as_ref().into()),
        IValue::Bool(true),
        IValue::None,
    ]);
    Some((astype, meta))
}

/// After the functional node was recorded (its pending result alone on `stack`): the target
/// takes the result as its data, and is the graph's handle of it (the one committed at the
/// sync); the target's earlier pending results, which no tensor holds now, stop being outputs.
/// `stack` ends as the in-place operator's returns.
pub(super) fn rebind(w: Write, backend: crate::key::DispatchKey, stack: &mut Stack) -> Result<()> {
    let Some(IValue::Tensor(result)) = stack.pop() else {
        return Err(Error::Fallback(format!(
            "'{}' recorded no tensor for the write of its argument",
            w.op.name()
        )));
    };
    take_result(backend, &w.target, result)?;
    if w.returns_target {
        stack.push(IValue::Tensor(w.target));
    }
    Ok(())
}

/// `target` (no view) takes the pending `result` of a recorded write as its data, and is the
/// graph's handle of it (the one committed at the sync); the target's earlier pending results,
/// which no tensor holds now, stop being outputs.
pub(super) fn take_result(
    backend: crate::key::DispatchKey,
    target: &Tensor,
    result: Tensor,
) -> Result<()> {
    let rec = recording(backend);
    {
        let mut r = lock(&rec);
        // A sync under way on another thread took the graph out: its commit (of the target's
        // old pending value too) comes first, then the target takes the result.
        while r.computing.is_some() {
            drop(r);
            wait_settled(&rec, &|| {
                format!("a write of a tensor of backend '{backend}' was recorded")
            })?;
            r = lock(&rec);
        }
        let pending = &mut r.state.pending;
        pending.retain(|(t, _, _)| !t.same(target));
        if let Some(entry) = pending.iter_mut().find(|(t, _, _)| t.same(&result)) {
            entry.0 = target.clone();
        }
        // Under the recording's lock: a sync (another thread reading a pending tensor of this
        // graph) commits the result either into the target or not at all.
        target.set_data(result.data());
    }
    drop(result);
    Ok(())
}
