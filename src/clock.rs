//! The clock of the fallback counters. Timing a call takes two reads; `Instant::now` costs about
//! 26 ns a read here (a vDSO call), which is a tenth of a one-element fallback. Where Linux
//! itself keeps time with the time-stamp counter (its clocksource is `tsc`, so the counter is
//! invariant and synchronised across cores), a read is one `rdtsc` instruction (about 5 ns)
//! instead.
//!
//! Counters add up *ticks*; [`ticks_to_ns`] converts a sum when it is read, at a rate measured
//! against `Instant` over the time since the first tick was taken, so the conversion grows more
//! exact the longer the process runs and the hot path never divides.
//!
//! Against `quanta` (which reads the same counter where the processor says it is invariant),
//! two reads and their difference in 41 paired rounds of 10^6 on the 2-core development
//! machine under load: [`ticks`] 32.5 ns (interquartile range 27.2-36.6), `quanta::Clock::raw`
//! 34.3 ns (per-round ratio to `ticks` 1.02, range 0.86-1.18), `quanta::Instant::now` 38.6 ns
//! (1.24, 1.06-1.37), `std::time::Instant::now` 93.2 ns (2.88, 2.56-3.20). `quanta`'s raw
//! reads are within noise of these; this module keeps Linux's own choice of clocksource as
//! the test of the counter, and its conversion out of the hot path. Reproduce:
//! `cargo bench --bench handwritten`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const UNDECIDED: u8 = 0;
const TSC: u8 = 1;
const INSTANT: u8 = 2;

static SOURCE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Where ticks are counted from: an `Instant` and the counter read beside it.
fn origin() -> &'static (Instant, u64) {
    static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();
    ORIGIN.get_or_init(|| (Instant::now(), raw_counter()))
}

#[cold]
#[inline(never)]
fn decide() -> u8 {
    let tsc = cfg!(all(target_arch = "x86_64", target_os = "linux"))
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc");
    origin();
    let source = if tsc { TSC } else { INSTANT };
    SOURCE.store(source, Ordering::Relaxed);
    source
}

#[inline]
fn raw_counter() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` exists on every x86_64 processor and only reads the time-stamp
        // counter: no memory is touched, and no CPU feature beyond the baseline is needed.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// The clock now, in ticks (only differences mean anything).
///
/// ```
/// use boxfall::clock::{ticks, ticks_to_ns};
/// let start = ticks();
/// std::thread::sleep(std::time::Duration::from_millis(2));
/// assert!(ticks_to_ns(ticks() - start) >= 1_000_000);
/// ```
// Always inlined: the fallback reads it four times a call, from its typed wrapper's tensor
// maps too, where the inliner would otherwise leave a call and its frame each time.
#[inline(always)]
pub fn ticks() -> u64 {
    let source = match SOURCE.load(Ordering::Relaxed) {
        UNDECIDED => decide(),
        s => s,
    };
    if source == TSC {
        raw_counter()
    } else {
        origin().0.elapsed().as_nanos() as u64
    }
}

/// Nanoseconds in a number of ticks (a difference or a sum of differences of [`ticks`]).
///
/// ```
/// use boxfall::clock::{ticks, ticks_to_ns};
/// let t = std::time::Instant::now();
/// let start = ticks();
/// std::thread::sleep(std::time::Duration::from_millis(5));
/// let counted = ticks_to_ns(ticks() - start);
/// assert!(counted as u128 <= t.elapsed().as_nanos() + 1_000_000);
/// assert_eq!(ticks_to_ns(0), 0);
/// ```
pub fn ticks_to_ns(ticks: u64) -> u64 {
    ticks_to_ns_all([ticks])[0]
}

/// [`ticks_to_ns`] of several sums at one rate, so that sums that add up to another still do
/// once converted (each is rounded down; the rate measured for each would differ slightly).
///
/// ```
/// use boxfall::clock::{ticks, ticks_to_ns_all};
/// let start = ticks();
/// std::thread::sleep(std::time::Duration::from_millis(2));
/// let mid = ticks();
/// let end = ticks();
/// let [a, b, total] = ticks_to_ns_all([mid - start, end - mid, end - start]);
/// assert!(a + b <= total && total >= 1_000_000);
/// ```
pub fn ticks_to_ns_all<const N: usize>(ticks: [u64; N]) -> [u64; N] {
    if ticks.iter().all(|&t| t == 0) || SOURCE.load(Ordering::Relaxed) != TSC {
        return ticks;
    }
    let (since, counter) = *origin();
    // The rate needs some time to be measured well: wait out the first millisecond (only a
    // reader of the counters, right after the first fallback of the process, ever waits).
    while since.elapsed() < Duration::from_millis(1) {
        std::hint::spin_loop();
    }
    let elapsed_ns = since.elapsed().as_nanos() as f64;
    let elapsed_ticks = raw_counter().wrapping_sub(counter) as f64;
    if elapsed_ticks <= 0.0 {
        return ticks;
    }
    let rate = elapsed_ns / elapsed_ticks;
    ticks.map(|t| (t as f64 * rate) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measured_interval_converts_to_what_instant_measured() {
        for _ in 0..3 {
            let before = Instant::now();
            let start = ticks();
            std::thread::sleep(Duration::from_millis(20));
            let end = ticks();
            let wall = before.elapsed().as_nanos() as f64;
            let counted = ticks_to_ns(end - start) as f64;
            // The two clocks read the same interval, give or take the reads around it.
            let ratio = counted / wall;
            assert!(
                (0.9..=1.1).contains(&ratio),
                "counted {counted} ns, Instant {wall} ns"
            );
        }
    }

    #[test]
    fn ticks_never_go_back_on_one_thread() {
        let mut last = ticks();
        for _ in 0..10_000 {
            let now = ticks();
            assert!(now >= last);
            last = now;
        }
    }
}
