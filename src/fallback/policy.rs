//! The fallback policy (allow, warn or error; process-wide, from `BOXFALL_FALLBACK`, and per
//! operator) and the fallback's warnings.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::dispatcher::{policy_of, OperatorHandle};
use crate::error::{Error, Result};
use crate::key::DispatchKey;

/// Whether CPU fallbacks run, however they are reached: a backend fallback registration, an
/// explicit `call_fallback` or `CpuFallback::call` in a backend's own kernel, or the CPU
/// fallback registered as one operator's kernel. An operator's own policy exempts it. Its names are
/// "allow", "warn" and "error", in any case.
///
/// ```
/// use boxfall::FallbackPolicy;
/// assert_eq!("warn".parse::<FallbackPolicy>().unwrap(), FallbackPolicy::Warn);
/// assert_eq!("Warn".parse::<FallbackPolicy>().unwrap(), FallbackPolicy::Warn);
/// let e = "bogus".parse::<FallbackPolicy>().unwrap_err().to_string();
/// assert!(e.contains("\"allow\", \"warn\" or \"error\"") && e.contains("bogus"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FallbackPolicy {
    /// Run silently.
    Allow = 1,
    /// Run, warning once per (operator, backend).
    Warn = 2,
    /// Refuse with a `Fallback` error.
    Error = 3,
}

impl std::str::FromStr for FallbackPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "allow" => Ok(FallbackPolicy::Allow),
            "warn" => Ok(FallbackPolicy::Warn),
            "error" => Ok(FallbackPolicy::Error),
            _ => Err(Error::Fallback(format!(
                "a fallback policy is \"allow\", \"warn\" or \"error\" (in any case), not {s:?}"
            ))),
        }
    }
}

impl FallbackPolicy {
    fn from_u8(v: u8) -> Option<FallbackPolicy> {
        match v {
            1 => Some(FallbackPolicy::Allow),
            2 => Some(FallbackPolicy::Warn),
            3 => Some(FallbackPolicy::Error),
            _ => None,
        }
    }

    /// The policy's name.
    ///
    /// ```
    /// use boxfall::FallbackPolicy;
    /// assert_eq!(FallbackPolicy::Warn.as_str(), "warn");
    /// for p in [FallbackPolicy::Allow, FallbackPolicy::Warn, FallbackPolicy::Error] {
    ///     assert_eq!(p.as_str().parse::<FallbackPolicy>().unwrap(), p);
    /// }
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackPolicy::Allow => "allow",
            FallbackPolicy::Warn => "warn",
            FallbackPolicy::Error => "error",
        }
    }
}

static POLICY: AtomicU8 = AtomicU8::new(0);

/// The process-wide policy: as set, else `BOXFALL_FALLBACK` from the environment, else allow.
///
/// ```
/// let _ = boxfall::fallback::fallback_policy();
/// ```
#[inline]
pub fn fallback_policy() -> FallbackPolicy {
    match FallbackPolicy::from_u8(POLICY.load(Ordering::Relaxed)) {
        Some(p) => p,
        None => policy_from_env(),
    }
}

/// The first read of the policy: `BOXFALL_FALLBACK`, else allow (also when it names no
/// policy: [`fallback_policy_from_env`] says so).
#[cold]
fn policy_from_env() -> FallbackPolicy {
    let p = fallback_policy_from_env()
        .ok()
        .flatten()
        .unwrap_or(FallbackPolicy::Allow);
    let _ = POLICY.compare_exchange(0, p as u8, Ordering::Relaxed, Ordering::Relaxed);
    p
}

/// `BOXFALL_FALLBACK` as a policy (surrounding spaces and case ignored): `None` when it is
/// unset or empty, an error naming the valid values when it is something else (the policy is
/// then "allow"; the Python package warns at import).
///
/// ```
/// // This process's BOXFALL_FALLBACK, whatever it is, reads without panicking.
/// let _ = boxfall::fallback::fallback_policy_from_env();
/// ```
pub fn fallback_policy_from_env() -> Result<Option<FallbackPolicy>> {
    let value = match std::env::var("BOXFALL_FALLBACK") {
        Err(std::env::VarError::NotPresent) => return Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => v.to_string_lossy().into_owned(),
        Ok(v) if v.trim().is_empty() => return Ok(None),
        Ok(v) => v,
    };
    value.trim().parse().map(Some).map_err(|_| {
        Error::Fallback(format!(
            "BOXFALL_FALLBACK={value:?} is no fallback policy: use \"allow\", \"warn\" or \"error\" (in any case); the policy is \"allow\""
        ))
    })
}

/// Sets the process-wide policy.
///
/// ```
/// use boxfall::{fallback::{fallback_policy, set_fallback_policy}, FallbackPolicy};
/// let before = fallback_policy();
/// set_fallback_policy(FallbackPolicy::Warn);
/// assert_eq!(fallback_policy(), FallbackPolicy::Warn);
/// set_fallback_policy(before);
/// ```
pub fn set_fallback_policy(p: FallbackPolicy) {
    POLICY.store(p as u8, Ordering::Relaxed);
}

/// Sets (or with `None` clears) one operator's own policy, which wins over the process-wide one.
///
/// ```
/// use boxfall::{fallback::set_operator_policy, native, *};
/// native::install_fallback().unwrap();
/// let mut lib = Library::new("doc_op_policy", LibraryKind::Def).unwrap();
/// let op = lib.define("id(Tensor x) -> Tensor").unwrap();
/// lib.impl_kernel("id", DispatchKey::CPU, KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (x,)| Ok(x)), false).unwrap();
/// let id = op.typed::<(Tensor,), Tensor>().unwrap();
/// set_operator_policy(&op, Some(FallbackPolicy::Error));
/// assert!(matches!(id.call((native::tensor(ndarray::arr1(&[1.0]).into_dyn()),)), Err(Error::Fallback(_))));
/// set_operator_policy(&op, Some(FallbackPolicy::Allow));
/// assert!(id.call((native::tensor(ndarray::arr1(&[1.0]).into_dyn()),)).is_ok());
/// ```
pub fn set_operator_policy(op: &OperatorHandle, p: Option<FallbackPolicy>) {
    op.policy_cell()
        .store(p.map_or(0, |p| p as u8), Ordering::Relaxed);
}

/// One operator's own policy, `None` when it follows the process-wide one.
///
/// ```
/// use boxfall::{fallback::{operator_policy, set_operator_policy}, *};
/// let mut lib = Library::new("doc_operator_policy", LibraryKind::Def).unwrap();
/// let op = lib.define("id(Tensor x) -> Tensor").unwrap();
/// assert_eq!(operator_policy(&op), None);
/// set_operator_policy(&op, Some(FallbackPolicy::Warn));
/// assert_eq!(operator_policy(&op), Some(FallbackPolicy::Warn));
/// set_operator_policy(&op, None);
/// assert_eq!(operator_policy(&op), None);
/// ```
pub fn operator_policy(op: &OperatorHandle) -> Option<FallbackPolicy> {
    FallbackPolicy::from_u8(policy_of(op))
}

/// What a warning is about.
///
/// ```
/// assert_ne!(boxfall::fallback::WarningKind::Fallback, boxfall::fallback::WarningKind::ViewCopy);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarningKind {
    /// An operator fell back (policy "warn").
    Fallback,
    /// A view operator was copied.
    ViewCopy,
}

/// Receives the fallback's warnings; an error it returns fails the call (a Python warning
/// filter set to "error").
///
/// ```
/// use boxfall::fallback::{WarningHandler, WarningKind};
/// let h: WarningHandler = |kind, _message| match kind {
///     WarningKind::ViewCopy => Err(boxfall::Error::Fallback("no view copies".into())),
///     WarningKind::Fallback => Ok(()),
/// };
/// assert!(h(WarningKind::Fallback, "falls back").is_ok());
/// assert!(h(WarningKind::ViewCopy, "copies").is_err());
/// ```
pub type WarningHandler = fn(WarningKind, &str) -> Result<()>;

static WARNING_HANDLER: OnceLock<WarningHandler> = OnceLock::new();

/// Installs the warning handler (once; the Python bindings turn warnings into
/// `bf.FallbackWarning`). Without one, warnings go to the `log` crate.
///
/// ```
/// use boxfall::fallback::{set_warning_handler, WarningKind};
/// fn quiet(_: WarningKind, _: &str) -> boxfall::Result<()> { Ok(()) }
/// assert!(set_warning_handler(quiet));
/// assert!(!set_warning_handler(quiet)); // only the first handler is installed
/// ```
pub fn set_warning_handler(h: WarningHandler) -> bool {
    WARNING_HANDLER.set(h).is_ok()
}

pub(crate) fn warn(kind: WarningKind, message: &str) -> Result<()> {
    match WARNING_HANDLER.get() {
        Some(h) => h(kind, message),
        None => {
            log::warn!(target: "boxfall", "{message}");
            Ok(())
        }
    }
}

/// Whether the policy lets this fallback run (an operator's own policy, else the process's).
#[inline(always)]
pub(crate) fn check_policy(op: &OperatorHandle, key: DispatchKey) -> Result<()> {
    // The cell itself rather than `policy_of`, a call of its own where this is compiled into
    // another crate's typed fallback.
    let own = op.policy_cell().load(Ordering::Relaxed);
    let p = if own != 0 {
        own
    } else {
        POLICY.load(Ordering::Relaxed)
    };
    if p == FallbackPolicy::Allow as u8 {
        return Ok(());
    }
    check_policy_slow(op, key)
}

/// A refused fallback (policy "error", or a "warn" warning that the user made an error) is
/// counted as a fallback that failed, so that the report lists what was refused (README,
/// "Metrics: where the fallback time goes").
#[cold]
fn check_policy_slow(op: &OperatorHandle, key: DispatchKey) -> Result<()> {
    let verdict = policy_verdict(op, key);
    if let Err(e) = &verdict {
        super::steps::count_refusal(op, key, e);
    }
    verdict
}

fn policy_verdict(op: &OperatorHandle, key: DispatchKey) -> Result<()> {
    let policy = FallbackPolicy::from_u8(policy_of(op)).unwrap_or_else(fallback_policy);
    match policy {
        FallbackPolicy::Allow => Ok(()),
        FallbackPolicy::Warn => {
            if op.metrics().first_warning(key) {
                warn(
                    WarningKind::Fallback,
                    &format!(
                        "'{}' falls back to the CPU on the '{key}' backend (its tensors are copied to the CPU and back); implement it for '{key}' to keep it on the device, or give it the operator policy \"allow\"",
                        op.name()
                    ),
                )?;
            }
            Ok(())
        }
        FallbackPolicy::Error => Err(Error::Fallback(format!(
            "'{}' falls back to the CPU on the '{key}' backend, and the fallback policy \"error\" forbids the CPU fallback: implement it for '{key}', or give it the operator policy \"allow\"",
            op.name()
        ))),
    }
}
