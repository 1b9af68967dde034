//! What a backend's hooks return, checked against what they were given (shape, dtype, a
//! view's place).

use pyo3::prelude::*;

use crate::error::{Error, Result};

/// `from_cpu`'s payload for `arr` must have its shape and dtype (where the payload tells them:
/// one without `shape` or `dtype` is not checked): a payload of another shape would give every
/// later reader of the tensor wrong results, so the call fails instead, naming `hook`.
pub(super) fn check_payload(
    backend: &str,
    hook: &str,
    arr: &Bound<'_, PyAny>,
    payload: &Bound<'_, PyAny>,
) -> Result<()> {
    let py = arr.py();
    let (Ok(shape), Ok(dtype)) = (
        payload.getattr(pyo3::intern!(py, "shape")),
        payload.getattr(pyo3::intern!(py, "dtype")),
    ) else {
        return Ok(());
    };
    let (Ok(want_shape), Ok(want_dtype)) = (
        arr.getattr(pyo3::intern!(py, "shape")),
        arr.getattr(pyo3::intern!(py, "dtype")),
    ) else {
        return Ok(());
    };
    let shape_ok = match (
        shape.extract::<Vec<usize>>(),
        want_shape.extract::<Vec<usize>>(),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => true,
    };
    let dtype_ok = want_dtype.eq(&dtype).unwrap_or(false);
    if shape_ok && dtype_ok {
        return Ok(());
    }
    let show = |o: &Bound<'_, PyAny>| o.str().map(|s| s.to_string()).unwrap_or_default();
    Err(Error::Kernel {
        context: format!("the '{hook}' hook of backend '{backend}'"),
        message: format!(
            "it returned a payload of shape {} and dtype {} for a CPU result of shape {} and dtype {}; a payload must have its CPU result's shape and dtype, and nothing was written",
            show(&shape),
            show(&dtype),
            show(&want_shape),
            show(&want_dtype),
        ),
    })
}

/// The payload a `view` hook made of `base` must have the view's `shape` and the base's dtype
/// (where the payloads tell them), as `from_cpu`'s must: a view of another shape would give
/// the kernel reading it wrong results.
pub(super) fn check_view(
    backend: &str,
    base: &Bound<'_, PyAny>,
    shape: &[usize],
    made: &Bound<'_, PyAny>,
) -> Result<()> {
    let py = base.py();
    let got_shape = made
        .getattr(pyo3::intern!(py, "shape"))
        .and_then(|s| s.extract::<Vec<usize>>())
        .ok();
    let (want_dtype, got_dtype) = (
        base.getattr(pyo3::intern!(py, "dtype")).ok(),
        made.getattr(pyo3::intern!(py, "dtype")).ok(),
    );
    let shape_ok = got_shape.as_deref().is_none_or(|s| s == shape);
    let dtype_ok = match (&want_dtype, &got_dtype) {
        (Some(w), Some(g)) => w.eq(g).unwrap_or(false),
        _ => true,
    };
    if shape_ok && dtype_ok {
        return Ok(());
    }
    let show = |o: &Option<Bound<'_, PyAny>>| {
        o.as_ref()
            .and_then(|o| o.str().ok())
            .map(|s| s.to_string())
            .unwrap_or_else(|| "?".into())
    };
    let tuple = |s: &[usize]| match s {
        [one] => format!("({one},)"),
        s => format!(
            "({})",
            s.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let got = got_shape.map_or_else(|| "?".into(), |s| tuple(&s));
    let shape = tuple(shape);
    Err(Error::Kernel {
        context: format!("the 'view' hook of backend '{backend}'"),
        message: format!(
            "it returned a payload of shape {got} and dtype {} for a view of shape {shape} and dtype {}; a view's payload must have the view's shape and its base's dtype, and the kernel did not run",
            show(&got_dtype),
            show(&want_dtype),
        ),
    })
}
