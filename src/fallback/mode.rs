//! How a CPU fallback kernel is configured: its view policy, packed for its calls.

/// What the fallback does with a view operator (a return that aliases an input without
/// writing it), whose storage cannot be shared across devices.
///
/// ```
/// assert_eq!(boxfall::fallback::ViewPolicy::default(), boxfall::fallback::ViewPolicy::Refuse);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ViewPolicy {
    /// A `Fallback` error naming the operator.
    #[default]
    Refuse,
    /// Return a copy, with a warning.
    Copy,
}

/// How one CPU fallback kernel runs: its view policy. The fallback policy applies to every
/// one, however it is reached (README, "A backend's own fallback"). One byte, so that with the
/// call's other arguments it is passed in registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FallbackMode(u8);

impl FallbackMode {
    const COPY_VIEWS: u8 = 2;

    pub(crate) fn new(views: ViewPolicy) -> FallbackMode {
        FallbackMode(match views {
            ViewPolicy::Refuse => 0,
            ViewPolicy::Copy => FallbackMode::COPY_VIEWS,
        })
    }

    pub(super) fn views(self) -> ViewPolicy {
        if self.0 & FallbackMode::COPY_VIEWS != 0 {
            ViewPolicy::Copy
        } else {
            ViewPolicy::Refuse
        }
    }
}
