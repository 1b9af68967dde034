//! What the bindings install for graph mode: how a narrowed result is warned about (a
//! `bf.NarrowingWarning`). A thread waiting for another's sync waits through the crate's
//! blocking hook (`crate::blocking`: the Python bindings release the GIL meanwhile).

use std::sync::OnceLock;

use crate::error::Result;
use crate::kernel::{OperatorHandle, Tag};
use crate::key::DispatchKey;

/// Warns that a result was narrowed (see [`set_narrowing_warner`]); an error (a warning the
/// user's filters made one) fails the call that narrowed.
///
/// ```
/// fn strict(message: &str) -> boxfall::Result<()> {
///     Err(boxfall::Error::Fallback(message.to_string()))
/// }
/// let warner: boxfall::graph::NarrowingWarner = strict;
/// assert!(warner("float64 narrowed").is_err());
/// ```
pub type NarrowingWarner = fn(&str) -> Result<()>;

static WARNER: OnceLock<NarrowingWarner> = OnceLock::new();

/// Installs the function that warns of a result narrowed in graph mode (a 64-bit dtype the
/// device lacks, recorded as the 32-bit one of its kind), once per operator and backend as
/// eager mode warns; the Python bindings install one that issues `bf.NarrowingWarning`. The
/// first installed stays; returns whether this one was.
///
/// ```
/// fn quiet(_: &str) -> boxfall::Result<()> { Ok(()) }
/// let _ = boxfall::graph::set_narrowing_warner(quiet);
/// ```
pub fn set_narrowing_warner(warner: NarrowingWarner) -> bool {
    WARNER.set(warner).is_ok()
}

/// Counts a result of `op` recorded on graph backend `backend` as `to`, where its dtype is
/// `from`, which the device lacks, and warns the first time per operator and backend: eager
/// mode's count and warning (`op_stats(op)["narrowed"]`). An operator whose results have the
/// library's dtypes (tagged `default_dtypes`: indices, counts) is fitted silently, as in eager
/// mode. Called only where a result narrows: nothing is added to a call where none does.
pub(crate) fn narrowed(
    op: &OperatorHandle,
    backend: DispatchKey,
    from: &str,
    to: &str,
) -> Result<()> {
    if op.has_tag(Tag::DefaultDtypes) || !op.metrics().record_narrowed(backend) {
        return Ok(());
    }
    let message = format!(
        "'{}' on backend '{backend}' made a result of dtype {from}, which the device does not \
         hold: it is {to} (register_backend(narrow=True), JAX's rule without 64-bit types; \
         recorded in graph mode); warned once per operator and backend, counted in \
         bf.metrics.op_stats(op)['narrowed']",
        op.name()
    );
    match WARNER.get() {
        Some(warn) => warn(&message),
        None => {
            log::warn!("{message}");
            Ok(())
        }
    }
}
