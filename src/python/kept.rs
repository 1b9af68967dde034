//! What `bf.ops` keeps for one definitions version (a namespace's packets, a packet's
//! overloads), let go of once the definitions change.
//!
//! A namespace or packet notices a change only at its own next look-up, and a namespace used
//! once (a library's own, closed after) has none: what it kept would stay, with the closed
//! operators' entries behind it (about 14 KB a namespace). So each keeper is noted here when
//! it fills, and the first keeper to fill at a newer version lets go of everything kept at an
//! older one: one generation at most outlives its definitions.

use pyo3::prelude::*;

use super::gil_cell::GilCell;

/// How a keeper lets go of what it kept (it then looks up afresh at its next use).
pub type LetGo = fn(&Bound<'_, PyAny>);

/// The keepers that filled at one definitions version, each with its way of letting go.
type Keepers = Vec<(Py<PyAny>, LetGo)>;

/// The definitions version, and the keepers that filled while it held.
static KEPT: GilCell<(u64, Keepers)> = GilCell::new((0, Vec::new()));

/// Notes `keeper`, about to keep what it looked up at definitions version `version`; first
/// lets go of everything kept at an older version (`keeper` included, so it fills after).
pub fn note(keeper: &Bound<'_, PyAny>, version: u64, let_go: LetGo) {
    let py = keeper.py();
    let_go_before(py, version);
    // Where the drops above ran Python code that defined an operator, the cell is at a newer
    // version: the keeper then goes at the next sweep with the rest, which only costs it a
    // fresh look-up.
    let (at, mut keepers) = KEPT.take(py);
    keepers.push((keeper.clone().unbind(), let_go));
    let empty = KEPT.replace(py, (at, keepers));
    drop(empty);
}

fn let_go_before(py: Python<'_>, version: u64) {
    // SAFETY: the GIL is held (`py`), and the reference ends before any Python code runs.
    if unsafe { KEPT.peek() }.0 == version {
        return;
    }
    let (_, stale) = KEPT.replace(py, (version, Vec::new()));
    // The cell is whole again before any keeper lets go: a drop may run Python code, which
    // may look something up and note its keeper.
    for (keeper, let_go) in stale {
        let_go(keeper.bind(py));
    }
}
