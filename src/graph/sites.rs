//! Where graphs compile: each compile is counted at its call site (the
//! Python frame where the sync happened, found by a function the bindings install; the
//! backend alone without them), and a site that compiles more than [`SITE_GRAPHS`] distinct
//! graphs is warned about once, naming the last reason: a recompile at every call is
//! torch_xla users' first complaint, and a count alone does not say where to look.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::key::DispatchKey;

/// How many distinct graphs one site compiles before it is warned about.
///
/// ```
/// assert_eq!(boxfall::graph::SITE_GRAPHS, 8);
/// ```
pub const SITE_GRAPHS: usize = 8;

/// Finds the site of a compile: the caller's place in words (`"fit.py:42"`), if known.
pub type SiteFinder = fn() -> Option<String>;

static FINDER: OnceLock<SiteFinder> = OnceLock::new();

/// Per (backend, site): the graphs compiled there, and whether the site was warned about.
type Sites = HashMap<(DispatchKey, String), (usize, bool)>;

static SITES: Mutex<Option<Sites>> = Mutex::new(None);

/// Installs the function that names a compile's call site (the Python bindings install one
/// that gives the first frame outside boxfall). The first installed stays; returns whether
/// this one was.
///
/// ```
/// fn nowhere() -> Option<String> { None }
/// let _ = boxfall::graph::set_site_finder(nowhere);
/// ```
pub fn set_site_finder(finder: SiteFinder) -> bool {
    FINDER.set(finder).is_ok()
}

/// The site of a compile happening now, of a graph that is `part` (1, 2, ...) of a run of
/// calls cut at the size limit (`limit.rs`) if it is one: each part is counted apart, as the
/// parts of one run are different graphs whose count says nothing of recompiles. Parts past
/// [`SITE_GRAPHS`] are counted together: a run of calls that reads no value is cut at a new
/// place of its loop each time, a new graph each, which is then warned about.
pub(crate) fn site(part: Option<usize>) -> Option<String> {
    let site = FINDER.get().and_then(|find| find());
    let Some(n) = part else {
        return site;
    };
    let at = site.as_deref().unwrap_or("(no Python frame)");
    Some(if n <= SITE_GRAPHS {
        format!("{at} (part {n} of a graph cut at the size limit)")
    } else {
        format!(
            "{at} (part {} or later of a graph cut at the size limit)",
            SITE_GRAPHS + 1
        )
    })
}

/// Counts a compile of `backend` at `site`; past [`SITE_GRAPHS`] graphs there, warns once
/// (a `log` warning, which the Python bindings route to `logging`), with `reason`, the last
/// recompile's; `part` is the site's part of a run of cut calls ([`site`]), where the advice
/// differs. Returns whether it warned.
pub(crate) fn compiled_at(
    backend: DispatchKey,
    site: Option<&str>,
    part: Option<usize>,
    reason: Option<&str>,
) -> bool {
    let place = site.unwrap_or("(no Python frame)").to_string();
    let mut sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
    let entry = sites
        .get_or_insert_with(HashMap::new)
        .entry((backend, place.clone()))
        .or_insert((0, false));
    entry.0 += 1;
    if entry.0 <= SITE_GRAPHS || entry.1 {
        return false;
    }
    entry.1 = true;
    let advice = if part.is_some_and(|n| n > SITE_GRAPHS) {
        "A run of calls that reads no value is cut at the size limit at a new place of its \
         loop each time, a new graph each: read a value or call `bf.sync()` at each step"
    } else {
        "A value that changes each call (a shape, a dtype, a constant) makes a new graph: \
         keep it fixed, or run that part in `with bf.eager():`"
    };
    let warning = format!(
        "graph backend '{backend}' compiled {} distinct graphs at {place}; the last one because \
         {}. {advice}",
        entry.0,
        reason.unwrap_or("of a first compile")
    );
    log::warn!("{warning}");
    true
}

#[cfg(test)]
mod tests {
    use super::{compiled_at, SITE_GRAPHS};
    use crate::key::DispatchKey;

    #[test]
    fn a_site_is_warned_about_once_past_the_limit() {
        let warned: Vec<bool> = (0..SITE_GRAPHS + 3)
            .map(|_| compiled_at(DispatchKey::CPU, Some("sites-test.py:1"), None, Some("x")))
            .collect();
        assert_eq!(warned.iter().filter(|w| **w).count(), 1);
        assert!(warned[SITE_GRAPHS]);
        assert!(!compiled_at(
            DispatchKey::CPU,
            Some("sites-test.py:2"),
            None,
            None
        ));
    }
}
