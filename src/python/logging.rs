//! The core's `log` records into Python's `logging`, as pyo3-log forwards them (logger named by
//! the target with `::` as `.`, `makeRecord` then `handle`), but with a cheap level check: the
//! fallback asks `log_enabled!(Debug)` on every call, and most of the time DEBUG is off.
//!
//! The check reads what `logging.Logger.isEnabledFor` reads: the logger's `disabled` flag and
//! its `_cache` of answers, which `logging` itself clears whenever a level changes (`setLevel`,
//! `logging.disable`), so a user who turns on DEBUG for "boxfall" after import gets the records.
//! Where the cache has no answer (or the logger is not a plain `logging.Logger`), it calls
//! `isEnabledFor`, which fills the cache.
//!
//! Cheaper still, for the question asked on every fallback ("is DEBUG on for boxfall?"): the
//! logger's `_cache` is replaced by a `dict` subclass whose `clear` counts, so a "no" stays
//! good, with no Python call at all, until `logging` next clears the cache, which it does on
//! every `setLevel` of any logger and on `logging.disable`. Only "no"s that the levels alone
//! decide are kept (the `disabled` flag is read each time otherwise).
//!
//! What it saves: a one-element Native fallback (a NumPy ufunc as the CPU kernel) took a median
//! 1.32 µs with this cache and 1.56 µs with a build that leaves `_cache` alone (`tracked`
//! false, so every call asks the logger's cache through Python), a median per-round
//! difference of 0.27 µs over 31 paired rounds, each a fresh process per build, on the 2-core
//! development machine under load (range -0.65 to 2.1 µs; 0.17 µs in an earlier run of 11
//! rounds). Reproduce:
//! `python benches/logging_bridge.py DIR_A DIR_B 31` with the two builds (its docstring says
//! how). `_cache` is CPython's private attribute: tests/python/test_logging_bridge.py checks
//! the CPython version and that `logging` still reads and clears it as assumed here.

use std::sync::atomic::{AtomicU64, Ordering};

use log::{Level, LevelFilter, Metadata, Record};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyTuple};

/// How many times `logging` has cleared the boxfall logger's level cache.
static CLEARS: AtomicU64 = AtomicU64::new(0);

/// `CLEARS + 1` when the levels last said DEBUG is off for boxfall (0: not known).
static DEBUG_OFF_SINCE: AtomicU64 = AtomicU64::new(0);

/// The boxfall logger's `_cache`: a dict whose `clear` tells the bridge the levels changed.
#[pyclass(extends = PyDict, module = "boxfall._boxfall")]
#[derive(Default)]
pub struct LevelCache;

#[pymethods]
impl LevelCache {
    #[new]
    fn new() -> Self {
        LevelCache
    }

    /// Empties the cache, as `logging` does when a level changes.
    fn clear(slf: &Bound<'_, Self>) {
        // Counted first: a "DEBUG is off" stored after this was computed from the new levels.
        CLEARS.fetch_add(1, Ordering::AcqRel);
        // Whatever was known is stale: DEBUG records may be wanted again (see `debug_off`).
        log::set_max_level(LevelFilter::Debug);
        slf.as_super().clear();
    }
}

/// Lowers `log`'s maximum level below DEBUG while the levels say DEBUG is off for boxfall (the
/// core's only DEBUG records are boxfall's), so that the fallback's `log_enabled!(Debug)` on
/// every call is a compare rather than a call of this logger; `LevelCache::clear` raises it
/// again when a level changes. Only if no clear came between the levels' reading and now.
fn debug_off() {
    if debug_known_off() {
        log::set_max_level(LevelFilter::Info);
    }
}

fn debug_known_off() -> bool {
    let off = DEBUG_OFF_SINCE.load(Ordering::Acquire);
    off != 0 && off == CLEARS.load(Ordering::Acquire) + 1
}

struct PyLogging {
    logging: Py<PyModule>,
    /// The logger "boxfall" (the core's target).
    boxfall: Py<PyAny>,
    /// Its instance dict, when `isEnabledFor` is `logging.Logger`'s own (else None: call it).
    dict: Option<Py<PyDict>>,
    /// Whether its `_cache` is a [`LevelCache`], so "DEBUG is off" can be remembered.
    tracked: bool,
}

fn py_level(level: Level) -> usize {
    match level {
        Level::Error => 40,
        Level::Warn => 30,
        Level::Info => 20,
        Level::Debug => 10,
        Level::Trace => 5,
    }
}

impl PyLogging {
    fn logger<'py>(&self, py: Python<'py>, target: &str) -> PyResult<Bound<'py, PyAny>> {
        if target == "boxfall" {
            return Ok(self.boxfall.bind(py).clone());
        }
        self.logging
            .bind(py)
            .getattr("getLogger")?
            .call1((target.replace("::", "."),))
    }

    fn cached(&self, py: Python<'_>, target: &str, level: usize) -> Option<bool> {
        if target != "boxfall" {
            return None;
        }
        let d = self.dict.as_ref()?.bind(py);
        let disabled = d.get_item(pyo3::intern!(py, "disabled")).ok()??;
        if disabled.is_truthy().ok()? {
            return Some(false);
        }
        let cache = d.get_item(pyo3::intern!(py, "_cache")).ok()??;
        let cache = cache.cast::<PyDict>().ok()?;
        let v = cache.get_item(PyInt::new(py, level)).ok()??;
        v.is_truthy().ok()
    }

    /// Whether the levels alone (`logging.disable`, the effective level) turn DEBUG off.
    fn levels_say_debug_off(&self, py: Python<'_>) -> PyResult<bool> {
        let logger = self.boxfall.bind(py);
        let disable: usize = logger.getattr("manager")?.getattr("disable")?.extract()?;
        let effective: usize = logger.call_method0("getEffectiveLevel")?.extract()?;
        Ok(disable >= 10 || 10 < effective)
    }

    fn enabled_for(&self, py: Python<'_>, target: &str, level: Level) -> bool {
        if self.tracked && target == "boxfall" && level == Level::Debug {
            let clears = CLEARS.load(Ordering::Acquire);
            if self.levels_say_debug_off(py).unwrap_or(false) {
                DEBUG_OFF_SINCE.store(clears + 1, Ordering::Release);
                debug_off();
                return false;
            }
        }
        let level = py_level(level);
        if let Some(b) = self.cached(py, target, level) {
            return b;
        }
        self.logger(py, target)
            .and_then(|l| l.call_method1("isEnabledFor", (level,)))
            .and_then(|r| r.is_truthy())
            .unwrap_or(false)
    }

    fn emit(&self, py: Python<'_>, record: &Record) -> PyResult<()> {
        let target = record.target().replace("::", ".");
        let logger = self.logger(py, record.target())?;
        let none = py.None();
        let r = logger.call_method1(
            "makeRecord",
            (
                target,
                py_level(record.level()),
                record.file(),
                record.line().unwrap_or_default(),
                format!("{}", record.args()),
                PyTuple::empty(py),
                &none,
                &none,
                &none,
            ),
        )?;
        logger.call_method1("handle", (r,))?;
        Ok(())
    }
}

impl log::Log for PyLogging {
    fn enabled(&self, metadata: &Metadata) -> bool {
        if metadata.level() == Level::Debug && metadata.target() == "boxfall" && debug_known_off() {
            return false;
        }
        metadata.level() <= LevelFilter::Debug
            && Python::attach(|py| self.enabled_for(py, metadata.target(), metadata.level()))
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        Python::attach(|py| {
            // An exception pending before the record stays the one the caller sees.
            let pending = PyErr::take(py);
            if let Err(e) = self.emit(py, record) {
                e.restore(py);
            }
            if let Some(e) = pending {
                e.restore(py);
            }
        })
    }

    fn flush(&self) {}
}

/// Installs the forwarding logger (once per process; a second call does nothing).
pub fn install(py: Python<'_>) -> PyResult<()> {
    let logging = py.import("logging")?;
    let boxfall = logging.getattr("getLogger")?.call1(("boxfall",))?;
    let plain = boxfall
        .get_type()
        .getattr("isEnabledFor")?
        .is(&logging.getattr("Logger")?.getattr("isEnabledFor")?);
    let dict = if plain {
        boxfall
            .getattr("__dict__")?
            .cast_into::<PyDict>()
            .ok()
            .map(Bound::unbind)
    } else {
        None
    };
    // The level cache that tells when levels change; kept only where `isEnabledFor` is the
    // plain one (which reads `_cache` as a mapping, so a dict subclass serves it unchanged).
    let tracked = plain
        && boxfall
            .setattr("_cache", Bound::new(py, LevelCache)?)
            .is_ok();
    let logger = PyLogging {
        logging: logging.unbind(),
        boxfall: boxfall.unbind(),
        dict,
        tracked,
    };
    if log::set_boxed_logger(Box::new(logger)).is_ok() {
        log::set_max_level(LevelFilter::Debug);
    }
    Ok(())
}
