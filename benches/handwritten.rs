//! The crate's hand-written replacements of crates, each against the crate, in paired rounds:
//! `Shared` (src/shared.rs) against `triomphe::Arc` (and `std::sync::Arc`), `thread_slot`
//! (src/thread_slot.rs) against `thread_local::ThreadLocal`, and `clock::ticks`
//! (src/clock.rs) against `quanta` (and `std::time::Instant`).
//!
//! Each round times every contender over the same number of operations, one after another,
//! and the rounds alternate which goes first; a row gives each contender's median ns per
//! operation over the rounds, the spread (the interquartile range), and the median of the
//! per-round ratios to the hand-written one, so a machine that slows down mid-run moves both
//! sides of a ratio alike.
//!
//! `cargo bench --bench handwritten` (`-- --quick` for fewer rounds). The modules under test
//! are compiled in from `src/` (they are crate-private), so the figures are theirs as the
//! crate builds them.

use std::hint::black_box;
use std::time::Instant;

use crossbeam_utils::CachePadded;

#[allow(dead_code, unused_imports)]
#[path = "../src/shared.rs"]
mod shared;

#[allow(dead_code, unused_imports)]
#[path = "../src/thread_slot.rs"]
mod thread_slot;

/// A tensor-sized value: what a `Shared` holds in the crate (the tensor's state).
#[derive(Clone, Copy, Default)]
struct Value([u64; 8]);

/// One contender: a name and a run of `n` operations.
type Case<'a> = (&'a str, Box<dyn FnMut(u64) + 'a>);

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn quartiles(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.25), at(0.75))
}

/// Runs `cases` in `rounds` paired rounds of `n` operations each; the first case is the
/// hand-written one, the others' ratios are to it.
fn paired(title: &str, rounds: usize, n: u64, mut cases: Vec<Case<'_>>) {
    for (_, f) in cases.iter_mut() {
        f(n / 10); // warm up
    }
    let k = cases.len();
    let mut ns = vec![Vec::with_capacity(rounds); k];
    for r in 0..rounds {
        for j in 0..k {
            let i = (j + r) % k;
            let start = Instant::now();
            (cases[i].1)(n);
            ns[i].push(start.elapsed().as_nanos() as f64 / n as f64);
        }
    }
    println!("{title} ({rounds} paired rounds of {n} operations)");
    for i in 0..k {
        let mut ratios: Vec<f64> = ns[i].iter().zip(&ns[0]).map(|(a, b)| a / b).collect();
        let (lo, hi) = quartiles(&mut ns[i].clone());
        let (rlo, rhi) = quartiles(&mut ratios.clone());
        println!(
            "  {:<28} median {:>7.2} ns/op  IQR [{:.2}, {:.2}]  ratio to first {:.3} [{:.3}, {:.3}]",
            cases[i].0,
            median(&mut ns[i].clone()),
            lo,
            hi,
            median(&mut ratios),
            rlo,
            rhi
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this without it, as a
    // check that every contender runs, in a few rounds of a few operations.
    let args: Vec<String> = std::env::args().collect();
    let (rounds, n) = if !args.iter().any(|a| a == "--bench") {
        (3, 1_000)
    } else if args.iter().any(|a| a == "--quick") {
        (11, 200_000)
    } else {
        (41, 1_000_000)
    };

    // A tensor's life in a fallback: made, lent (a clone, dropped), written in place when it
    // is the only handle, dropped.
    paired(
        "shared: new, clone + drop, get_mut, drop",
        rounds,
        n,
        vec![
            (
                "boxfall Shared",
                Box::new(|n| {
                    for i in 0..n {
                        let mut a = shared::Shared::new_with(|| Value([i; 8]));
                        drop(black_box(a.clone()));
                        if let Some(v) = a.get_mut() {
                            v.0[0] += 1;
                        }
                        black_box(&a);
                    }
                }),
            ),
            (
                "triomphe::Arc",
                Box::new(|n| {
                    for i in 0..n {
                        let mut a = triomphe::Arc::new(Value([i; 8]));
                        drop(black_box(a.clone()));
                        if let Some(v) = triomphe::Arc::get_mut(&mut a) {
                            v.0[0] += 1;
                        }
                        black_box(&a);
                    }
                }),
            ),
            (
                "std::sync::Arc",
                Box::new(|n| {
                    for i in 0..n {
                        let mut a = std::sync::Arc::new(Value([i; 8]));
                        drop(black_box(a.clone()));
                        if let Some(v) = std::sync::Arc::get_mut(&mut a) {
                            v.0[0] += 1;
                        }
                        black_box(&a);
                    }
                }),
            ),
        ],
    );

    // A fallback's count: this thread's set of counters found, then added to with a plain
    // load and store (no other thread writes it), as metrics.rs does.
    let per_thread: Vec<CachePadded<[std::sync::atomic::AtomicU64; 8]>> = (0..thread_slot::SLOTS)
        .map(|_| CachePadded::default())
        .collect();
    let tl: thread_local::ThreadLocal<CachePadded<[std::sync::atomic::AtomicU64; 8]>> =
        thread_local::ThreadLocal::new();
    let add = |c: &[std::sync::atomic::AtomicU64; 8]| {
        use std::sync::atomic::Ordering::Relaxed;
        c[0].store(c[0].load(Relaxed).wrapping_add(1), Relaxed);
    };
    paired(
        "per-thread counters: find this thread's set, add one",
        rounds,
        n,
        vec![
            (
                "boxfall thread_slot",
                Box::new(|n| {
                    for _ in 0..n {
                        if let Some(i) = black_box(thread_slot::current()) {
                            add(&per_thread[i]);
                        }
                    }
                }),
            ),
            (
                "thread_local::ThreadLocal",
                Box::new(|n| {
                    for _ in 0..n {
                        add(black_box(&tl).get_or_default());
                    }
                }),
            ),
        ],
    );

    // Timing a step: two reads of the clock and their difference.
    let clock = quanta::Clock::new();
    paired(
        "clock: two reads and their difference",
        rounds,
        n,
        vec![
            (
                "boxfall clock::ticks",
                Box::new(|n| {
                    for _ in 0..n {
                        let a = boxfall::clock::ticks();
                        black_box(boxfall::clock::ticks().wrapping_sub(a));
                    }
                }),
            ),
            (
                "quanta::Clock::raw",
                Box::new(|n| {
                    for _ in 0..n {
                        let a = clock.raw();
                        black_box(clock.raw().wrapping_sub(a));
                    }
                }),
            ),
            (
                "quanta::Instant::now",
                Box::new(|n| {
                    for _ in 0..n {
                        let a = quanta::Instant::now();
                        black_box(quanta::Instant::now() - a);
                    }
                }),
            ),
            (
                "std::time::Instant::now",
                Box::new(|n| {
                    for _ in 0..n {
                        let a = Instant::now();
                        black_box(a.elapsed());
                    }
                }),
            ),
        ],
    );
}
