//! What every operator counted, gathered by name: the registry's view of the counters.

use super::OpStats;

/// What every operator counted since the last reset, by name, as the registry gathered it
/// (`Dispatcher::metrics`): the live entries' counters plus what
/// freed entries (every registration gone) had counted. Only operators that fell back are in it.
///
/// ```
/// use boxfall::{metrics::{Figures, OpStats, Snapshot}, DispatchKey};
/// let one = OpStats::from_backends(vec![(DispatchKey::NATIVE, Figures { fallbacks: 2, ..Figures::default() })]);
/// let s = Snapshot::from_counts([("d::f".to_string(), one.clone()), ("d::f".to_string(), one), ("d::g".to_string(), OpStats::default())]);
/// assert_eq!(s.counters(), [("d::f".to_string(), 4)]);
/// assert_eq!(s.get("d::f").map(|s| s.fallbacks), Some(4));
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// By fallback time, most first, then by name.
    stats: Vec<(String, OpStats)>,
}

impl Snapshot {
    /// Gathers counts by name: those of one name add up; operators that never fell back are
    /// left out.
    ///
    /// ```
    /// assert!(boxfall::metrics::Snapshot::from_counts([]).all_stats().is_empty());
    /// ```
    pub fn from_counts(counts: impl IntoIterator<Item = (String, OpStats)>) -> Snapshot {
        let mut by_name: std::collections::HashMap<String, OpStats> =
            std::collections::HashMap::new();
        for (name, s) in counts {
            if s.fallbacks > 0 || s.kernel_calls > 0 {
                by_name.entry(name).or_default().add(&s);
            }
        }
        let mut stats: Vec<(String, OpStats)> = by_name.into_iter().collect();
        stats.sort_by(|a, b| b.1.fallback_ns.cmp(&a.1.fallback_ns).then(a.0.cmp(&b.0)));
        Snapshot { stats }
    }

    /// Every operator counted, with its full counters, by fallback time.
    ///
    /// ```
    /// let all = boxfall::Dispatcher::metrics();
    /// assert!(all.all_stats().windows(2).all(|w| w[0].1.fallback_ns >= w[1].1.fallback_ns));
    /// ```
    pub fn all_stats(&self) -> &[(String, OpStats)] {
        &self.stats
    }

    /// Every operator counted, with its count, sorted by name.
    ///
    /// ```
    /// let c = boxfall::Dispatcher::metrics().counters();
    /// assert!(c.iter().all(|(_, n)| *n > 0));
    /// ```
    pub fn counters(&self) -> Vec<(String, u64)> {
        let mut v: Vec<_> = self
            .stats
            .iter()
            .filter(|(_, s)| s.fallbacks > 0)
            .map(|(name, s)| (name.clone(), s.fallbacks))
            .collect();
        v.sort();
        v
    }

    /// The counters of one operator, if it was counted.
    ///
    /// ```
    /// assert!(boxfall::Dispatcher::metrics().get("nobody::nothing").is_none());
    /// ```
    pub fn get(&self, name: &str) -> Option<&OpStats> {
        self.stats.iter().find(|(n, _)| n == name).map(|(_, s)| s)
    }
}
