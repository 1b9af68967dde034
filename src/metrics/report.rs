//! The fallback report: a table for people, one row per (operator, backend), in units that fit
//! the numbers, and a last line that says which operators to implement natively first.

use std::fmt::Write as _;

use super::{Figures, Snapshot};
use crate::error::{Error, Result};
use crate::key::DispatchKey;

/// How the report orders its rows.
///
/// ```
/// use boxfall::metrics::ReportSort;
/// assert_eq!("bytes".parse::<ReportSort>().unwrap(), ReportSort::Bytes);
/// assert_eq!(ReportSort::default(), ReportSort::Time);
/// let e = "speed".parse::<ReportSort>().unwrap_err().to_string();
/// assert!(e.contains("\"time\", \"count\", \"bytes\" or \"name\"") && e.contains("speed"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReportSort {
    /// Most fallback time first.
    #[default]
    Time,
    /// Most fallbacks first.
    Count,
    /// Most bytes moved (both ways) first.
    Bytes,
    /// By operator name, then backend name.
    Name,
}

impl std::str::FromStr for ReportSort {
    type Err = Error;
    fn from_str(s: &str) -> Result<ReportSort> {
        match s {
            "time" => Ok(ReportSort::Time),
            "count" => Ok(ReportSort::Count),
            "bytes" => Ok(ReportSort::Bytes),
            "name" => Ok(ReportSort::Name),
            _ => Err(Error::Fallback(format!(
                "the report sorts by \"time\", \"count\", \"bytes\" or \"name\", not {s:?}"
            ))),
        }
    }
}

/// What [`Snapshot::report_with`] shows.
///
/// ```
/// use boxfall::metrics::{ReportOptions, ReportSort};
/// let o = ReportOptions { sort: ReportSort::Count, top: Some(5), ..ReportOptions::default() };
/// assert_eq!(o.backend, None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportOptions {
    /// Only this backend's rows (all backends if `None`).
    pub backend: Option<DispatchKey>,
    /// The rows' order.
    pub sort: ReportSort,
    /// Only the first rows, this many (the total still sums every row).
    pub top: Option<usize>,
}

/// How many operators the last line ranks.
const RANKED: usize = 5;

impl Snapshot {
    /// The report of every backend, rows by fallback time ([`report_with`](Self::report_with)).
    ///
    /// ```
    /// let r = boxfall::Dispatcher::metrics().report();
    /// assert!(r.starts_with("operator"));
    /// ```
    pub fn report(&self) -> String {
        self.report_with(&ReportOptions::default())
    }

    /// A table for people: one row per (operator, backend) that fell back, with calls,
    /// failures, the whole fallback's time, its mean, its split into moving to the CPU, the CPU
    /// kernel and moving back, its share of all the fallback time shown, and the bytes moved
    /// each way; a total row; and a last line ranking the operators to implement natively
    /// first, by the fallback time they cost. Times are in us, ms or s and sizes in B, KB, MB
    /// or GB (1 KB = 1024 B), whichever fits each number.
    ///
    /// ```
    /// use boxfall::metrics::{ReportOptions, ReportSort};
    /// use boxfall::{DispatchKey, Dispatcher};
    /// let r = Dispatcher::metrics().report_with(&ReportOptions { backend: Some(DispatchKey::NATIVE), sort: ReportSort::Name, top: Some(3) });
    /// let header = r.lines().next().unwrap();
    /// for col in ["operator", "backend", "calls", "failed", "to CPU", "kernel", "from CPU", "bytes to CPU"] {
    ///     assert!(header.contains(col), "{r}");
    /// }
    /// ```
    pub fn report_with(&self, opts: &ReportOptions) -> String {
        report_of(self.all_stats(), opts)
    }
}

fn report_of(stats: &[(String, super::OpStats)], opts: &ReportOptions) -> String {
    let rows: Vec<(String, DispatchKey, Figures)> = stats
        .iter()
        .flat_map(|(name, s)| {
            s.per_backend
                .iter()
                .filter(|(k, f)| f.fallbacks > 0 && opts.backend.is_none_or(|b| b == *k))
                .map(move |(k, f)| (name.clone(), *k, *f))
        })
        .collect();
    let mut kernels = kernel_lines(stats, opts.backend);
    kernels.push_str(&narrowed_lines(stats, opts.backend));
    let names: Vec<String> = rows.iter().map(|(_, k, _)| k.name()).collect();
    let mut order: Vec<usize> = (0..rows.len()).collect();
    let by_name = |a: usize, b: usize| rows[a].0.cmp(&rows[b].0).then(names[a].cmp(&names[b]));
    order.sort_by(|&a, &b| {
        let (fa, fb) = (&rows[a].2, &rows[b].2);
        let first = match opts.sort {
            ReportSort::Time => fb.fallback_ns.cmp(&fa.fallback_ns),
            ReportSort::Count => fb.fallbacks.cmp(&fa.fallbacks),
            ReportSort::Bytes => bytes(fb).cmp(&bytes(fa)),
            ReportSort::Name => std::cmp::Ordering::Equal,
        };
        first.then_with(|| by_name(a, b))
    });

    let mut total = Figures::default();
    for (_, _, f) in &rows {
        total.add(f);
    }
    let shown = opts.top.unwrap_or(usize::MAX).min(order.len());
    let mut table: Vec<[String; COLUMNS]> = vec![HEADER.map(String::from)];
    for &i in &order[..shown] {
        table.push(cells(&rows[i].0, &names[i], &rows[i].2, total.fallback_ns));
    }
    let operators = {
        let mut ops: Vec<&str> = rows.iter().map(|(n, _, _)| n.as_str()).collect();
        ops.sort_unstable();
        ops.dedup();
        ops.len()
    };
    let total_label = format!(
        "total ({operators} operator{}, {} row{})",
        plural(operators),
        rows.len(),
        plural(rows.len())
    );
    let backend_label = opts.backend.map(|k| k.name()).unwrap_or_default();
    if !rows.is_empty() {
        table.push(cells(
            &total_label,
            &backend_label,
            &total,
            total.fallback_ns,
        ));
    }

    let widths: [usize; COLUMNS] =
        std::array::from_fn(|c| table.iter().map(|r| r[c].len()).max().unwrap_or(0));
    let line = |cells: &[String; COLUMNS]| {
        let mut s = String::new();
        for (c, cell) in cells.iter().enumerate() {
            if c > 0 {
                s.push_str("  ");
            }
            let w = widths[c];
            if c < LEFT_ALIGNED {
                let _ = write!(s, "{cell:<w$}");
            } else {
                let _ = write!(s, "{cell:>w$}");
            }
        }
        s
    };
    let width = widths.iter().sum::<usize>() + 2 * (COLUMNS - 1);
    let mut out = String::new();
    let _ = writeln!(out, "{}", line(&table[0]));
    let _ = writeln!(out, "{}", "-".repeat(width));
    if rows.is_empty() {
        let _ = writeln!(out, "(no operator fell back)");
        out.push_str(&kernels);
        return out;
    }
    for r in &table[1..table.len() - 1] {
        let _ = writeln!(out, "{}", line(r));
    }
    let _ = writeln!(out, "{}", "-".repeat(width));
    if let Some(last) = table.last() {
        let _ = writeln!(out, "{}", line(last));
    }
    if shown < rows.len() {
        let _ = writeln!(
            out,
            "({} more row{} not shown; the total counts them)",
            rows.len() - shown,
            plural(rows.len() - shown)
        );
    }
    let _ = writeln!(out, "{}", ranking(&rows, total.fallback_ns, opts.backend));
    out.push_str(&kernels);
    out
}

/// The backends' own kernels, beside the fallback: a line per (operator, backend) whose
/// kernel was called, with its calls and, where they were timed (`profile`), its mean time
/// and the fallback's mean for the same pair, so that one sees whether the kernel beats it.
fn kernel_lines(stats: &[(String, super::OpStats)], backend: Option<DispatchKey>) -> String {
    let mut lines: Vec<(u64, String)> = Vec::new();
    for (name, s) in stats {
        for (k, f) in &s.per_backend {
            if f.kernel_calls == 0 || backend.is_some_and(|b| b != *k) {
                continue;
            }
            let mut line = format!(
                "  {}'s {name}: {} call{}",
                k.name(),
                f.kernel_calls,
                plural(usize::try_from(f.kernel_calls).unwrap_or(usize::MAX))
            );
            if f.kernel_call_ns > 0 {
                let _ = write!(
                    line,
                    ", {} mean",
                    duration(f.kernel_call_ns / f.kernel_calls)
                );
                if let Some(mean) = f.fallback_ns.checked_div(f.fallbacks) {
                    let _ = write!(line, " (the fallback: {} mean)", duration(mean));
                }
            }
            lines.push((f.kernel_call_ns, line));
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    lines.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out = String::from(
        "backend kernels (the backends' own, not the fallback; timed under bf.metrics.profile()):\n",
    );
    for (_, l) in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// The results narrowed (`register_backend(narrow=True)`: a 64-bit dtype the device lacks
/// given as the 32-bit one of its kind), a line per (operator, backend) that narrowed any,
/// so that a run that lost precision says where.
fn narrowed_lines(stats: &[(String, super::OpStats)], backend: Option<DispatchKey>) -> String {
    let mut lines: Vec<String> = stats
        .iter()
        .flat_map(|(name, s)| {
            s.per_backend
                .iter()
                .filter(|(k, f)| f.narrowed > 0 && backend.is_none_or(|b| b == *k))
                .map(move |(k, f)| {
                    format!(
                        "  {}'s {name}: {} result{}\n",
                        k.name(),
                        f.narrowed,
                        plural(usize::try_from(f.narrowed).unwrap_or(usize::MAX))
                    )
                })
        })
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    lines.sort();
    let mut out =
        String::from("narrowed to 32 bits (a 64-bit dtype the device lacks; narrow=True):\n");
    out.extend(lines);
    out
}

const COLUMNS: usize = 12;
/// The operator and backend columns read left to right; the numbers align on the right.
const LEFT_ALIGNED: usize = 2;
const HEADER: [&str; COLUMNS] = [
    "operator",
    "backend",
    "calls",
    "failed",
    "total time",
    "mean",
    "to CPU",
    "kernel",
    "from CPU",
    "share",
    "bytes to CPU",
    "bytes from CPU",
];

fn cells(name: &str, backend: &str, f: &Figures, all_ns: u64) -> [String; COLUMNS] {
    [
        name.to_string(),
        backend.to_string(),
        f.fallbacks.to_string(),
        f.failures.to_string(),
        duration(f.fallback_ns),
        duration(f.fallback_ns / f.fallbacks.max(1)),
        duration(f.to_cpu_ns),
        duration(f.kernel_ns),
        duration(f.from_cpu_ns),
        share(f.fallback_ns, all_ns),
        size(f.bytes_to_cpu),
        size(f.bytes_from_cpu),
    ]
}

/// The last line: operators (summed over the backends shown) by the fallback time they cost.
fn ranking(
    rows: &[(String, DispatchKey, Figures)],
    all_ns: u64,
    backend: Option<DispatchKey>,
) -> String {
    let mut by_op: Vec<(&str, u64)> = Vec::new();
    for (name, _, f) in rows {
        match by_op.iter_mut().find(|(n, _)| n == name) {
            Some((_, ns)) => *ns += f.fallback_ns,
            None => by_op.push((name, f.fallback_ns)),
        }
    }
    by_op.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let ranked: Vec<String> = by_op
        .iter()
        .take(RANKED)
        .enumerate()
        .map(|(i, (name, ns))| {
            format!(
                "{}. {name} ({}, {})",
                i + 1,
                duration(*ns),
                share(*ns, all_ns)
            )
        })
        .collect();
    let more = by_op.len().saturating_sub(RANKED);
    format!(
        "implement natively first{} (most fallback time): {}{}",
        backend.map(|k| format!(" on {k}")).unwrap_or_default(),
        ranked.join(", "),
        if more > 0 {
            format!(", and {more} more")
        } else {
            String::new()
        }
    )
}

fn bytes(f: &Figures) -> u64 {
    f.bytes_to_cpu.saturating_add(f.bytes_from_cpu)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Three significant digits or so: `3.14`, `31.4`, `314`.
fn scaled(v: f64, unit: &str) -> String {
    if v < 9.995 {
        format!("{v:.2} {unit}")
    } else if v < 99.95 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

/// A time in us, ms or s, whichever fits.
fn duration(ns: u64) -> String {
    let ns = ns as f64;
    if ns < 999_500.0 {
        scaled(ns / 1e3, "us")
    } else if ns < 999_500_000.0 {
        scaled(ns / 1e6, "ms")
    } else {
        scaled(ns / 1e9, "s")
    }
}

/// A size in B, KB, MB or GB (1 KB = 1024 B), whichever fits.
fn size(b: u64) -> String {
    const K: f64 = 1024.0;
    let v = b as f64;
    if b < 1024 {
        format!("{b} B")
    } else if v < 999.5 * K {
        scaled(v / K, "KB")
    } else if v < 999.5 * K * K {
        scaled(v / (K * K), "MB")
    } else {
        scaled(v / (K * K * K), "GB")
    }
}

fn share(ns: u64, all: u64) -> String {
    if all == 0 {
        return "-".to_string();
    }
    format!("{:.1}%", ns as f64 * 100.0 / all as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_fit_the_numbers() {
        assert_eq!(duration(0), "0.00 us");
        assert_eq!(duration(1_500), "1.50 us");
        assert_eq!(duration(45_100), "45.1 us");
        assert_eq!(duration(456_000), "456 us");
        assert_eq!(duration(999_400), "999 us");
        assert_eq!(duration(999_600), "1.00 ms");
        assert_eq!(duration(12_345_678), "12.3 ms");
        assert_eq!(duration(2_500_000_000), "2.50 s");
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1024), "1.00 KB");
        assert_eq!(size(150 * 1024), "150 KB");
        assert_eq!(size(3 * 1024 * 1024 + 512 * 1024), "3.50 MB");
        assert_eq!(size(5 << 30), "5.00 GB");
        assert_eq!(share(1, 4), "25.0%");
        assert_eq!(share(0, 0), "-");
    }

    #[test]
    fn narrowed_results_are_listed_per_operator_and_backend() {
        let key = DispatchKey::NATIVE;
        let figures = |narrowed| Figures {
            fallbacks: 3,
            narrowed,
            ..Figures::default()
        };
        let stats = vec![
            (
                "ns::zeros".to_string(),
                super::super::OpStats::from_backends(vec![(key, figures(2))]),
            ),
            (
                "ns::add".to_string(),
                super::super::OpStats::from_backends(vec![(key, figures(0))]),
            ),
            (
                "ns::astype".to_string(),
                super::super::OpStats::from_backends(vec![(key, figures(1))]),
            ),
        ];
        let text = narrowed_lines(&stats, None);
        assert_eq!(
            text,
            "narrowed to 32 bits (a 64-bit dtype the device lacks; narrow=True):\n  Native's ns::astype: 1 result\n  Native's ns::zeros: 2 results\n"
        );
        assert_eq!(narrowed_lines(&stats[1..2], None), "");
        assert_eq!(narrowed_lines(&stats, Some(DispatchKey::CPU)), "");
    }
}
