//! Calls while registrations come and go: 4 threads call an operator in a loop while one thread
//! registers and drops libraries (kernel overrides, fallbacks of another key, definitions of new
//! operators). Runs for `BOXFALL_STRESS_SECS` seconds (default 3).

mod common;

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use boxfall::fallback::set_fallback_policy;
use boxfall::Dispatcher;
use boxfall::{
    cpu_fallback, DispatchKey, DispatchKeySet, FallbackPolicy, IValue, KernelFunction, Library,
    LibraryKind, Result, Tensor,
};
use common::*;

fn stress_duration() -> Duration {
    let secs = std::env::var("BOXFALL_STRESS_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(secs)
}

/// The CPU kernel: id 0.
fn who_cpu(_keys: DispatchKeySet, (x,): (Tensor,)) -> Result<i64> {
    if x.key() != DispatchKey::CPU {
        return Err(kernel_error("the CPU kernel got a device tensor"));
    }
    Ok(0)
}

/// Ids of kernels whose closures were dropped.
static DROPPED: Mutex<Option<HashSet<i64>>> = Mutex::new(None);

fn was_dropped(id: i64) -> bool {
    DROPPED
        .lock()
        .unwrap()
        .as_ref()
        .is_some_and(|s| s.contains(&id))
}

/// Owned by a kernel's closure: records when the closure is dropped.
struct Token(i64);

impl Token {
    /// The id; a method, so that a closure using it captures the whole token (a closure
    /// reading only `token.0` would capture the `i64` and drop the token at once).
    fn id(&self) -> i64 {
        self.0
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        DROPPED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashSet::new)
            .insert(self.0);
    }
}

/// A device kernel returning its own id, which checks that it stays alive while it runs.
fn device_kernel(id: i64) -> KernelFunction {
    let token = Token(id);
    KernelFunction::from_boxed(move |_op, _keys, stack| {
        std::thread::yield_now();
        if was_dropped(token.id()) {
            return Err(kernel_error(format!(
                "kernel {} ran after it was dropped",
                token.id()
            )));
        }
        stack.clear();
        stack.push(IValue::Int(token.id()));
        Ok(())
    })
}

#[test]
fn calls_stay_correct_while_libraries_come_and_go() {
    set_fallback_policy(FallbackPolicy::Allow);
    let dev = Dev::with_cpu_fallback("StressDev");
    let other = Dev::new("StressOther");
    let (ns, mut lib) = def_lib("stress");
    let op = define_which(&mut lib, "who");
    lib.impl_kernel(
        "who",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), i64>(who_cpu),
        false,
    )
    .unwrap();
    let typed = op.typed::<(Tensor,), i64>().unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    // The highest id registered so far; stored before its kernel is registered.
    let last_id = Arc::new(AtomicI64::new(0));
    let deadline = Instant::now() + stress_duration();

    let mut callers = Vec::new();
    for t in 0..4 {
        let (typed, op, stop, last_id) = (typed.clone(), op.clone(), stop.clone(), last_id.clone());
        let x = dev.tensor(&[t as f64]);
        callers.push(std::thread::spawn(move || -> (u64, u64) {
            let (mut calls, mut fell_back) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                // Alternate typed and boxed calls; thread 3 also makes plain CPU calls.
                let v = if calls % 2 == 0 {
                    typed.call((x.clone(),)).expect("typed call")
                } else {
                    let mut stack = vec![IValue::Tensor(x.clone())];
                    op.call_boxed(&mut stack).expect("boxed call");
                    assert_eq!(stack.len(), 1);
                    stack[0].to_int().expect("an int")
                };
                let last = last_id.load(Ordering::SeqCst);
                assert!(
                    (0..=last).contains(&v),
                    "{v} was returned by no kernel registered so far (last id {last})"
                );
                if v == 0 {
                    fell_back += 1;
                }
                if t == 3 {
                    assert_eq!(typed.call((cpu(&[1.0]),)).expect("CPU call"), 0);
                }
                calls += 1;
            }
            (calls, fell_back)
        }));
    }

    let mutator = {
        let (ns, stop, last_id, key, other_key) = (
            ns.clone(),
            stop.clone(),
            last_id.clone(),
            dev.key,
            other.key,
        );
        std::thread::spawn(move || -> u64 {
            let mut kernels: VecDeque<Library> = VecDeque::new();
            let mut fallback: Option<Library> = None;
            let mut fragments: VecDeque<Library> = VecDeque::new();
            let mut i: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                // An override of the device kernel; keep 0 to 3 of them alive.
                let id = last_id.fetch_add(1, Ordering::SeqCst) + 1;
                let mut k = Library::new(&ns, LibraryKind::Impl).unwrap();
                k.impl_kernel("who", key, device_kernel(id), true).unwrap();
                kernels.push_back(k);
                while kernels.len() > (i % 4) as usize {
                    // Drop the oldest or the newest, in turn.
                    if i % 3 == 0 {
                        kernels.pop_back();
                    } else {
                        kernels.pop_front();
                    }
                }
                // A fallback for another key, on and off.
                fallback = match fallback.take() {
                    Some(_) => None,
                    None => {
                        let mut f = Library::new("_", LibraryKind::Impl).unwrap();
                        f.fallback(other_key, cpu_fallback()).unwrap();
                        Some(f)
                    }
                };
                // New operators in FRAGMENT libraries: 8 names, reused; the at most 4 live
                // fragments are from the last 4 iterations, so their names differ.
                let mut frag = Library::new(&ns, LibraryKind::Fragment).unwrap();
                frag.define(&format!("new_{}(Tensor x) -> int", i % 8))
                    .unwrap();
                fragments.push_back(frag);
                if fragments.len() > 4 {
                    fragments.pop_front();
                }
                if i % 5 == 0 {
                    fragments.clear();
                }
            }
            i
        })
    };

    // Run until the deadline; a thread still busy long after it is a deadlock.
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        if callers.iter().any(|h| h.is_finished()) || mutator.is_finished() {
            break; // a panic: join below reports it
        }
    }
    stop.store(true, Ordering::Relaxed);
    let grace = Instant::now() + Duration::from_secs(60);
    while !(callers.iter().all(|h| h.is_finished()) && mutator.is_finished()) {
        assert!(Instant::now() < grace, "threads did not stop: deadlock");
        std::thread::sleep(Duration::from_millis(10));
    }
    let iterations = mutator.join().expect("the mutator panicked");
    let mut total_calls = 0;
    let mut total_fallbacks = 0;
    for h in callers {
        let (calls, fell_back) = h.join().expect("a caller panicked");
        assert!(calls > 0);
        total_calls += calls;
        total_fallbacks += fell_back;
    }
    assert!(iterations > 0);

    // Every call that returned the CPU kernel's id took the fallback path, and only those.
    let s = Dispatcher::op_stats(op.name()).unwrap();
    assert_eq!(s.fallbacks, total_fallbacks, "of {total_calls} calls");
    assert_eq!(s.failures, 0);
    assert_eq!(s.bytes_to_cpu, total_fallbacks * 8);

    eprintln!(
        "{iterations} registration rounds, {total_calls} device calls, {total_fallbacks} through the fallback"
    );

    // Every kernel registered was freed once nothing could run it any more.
    let registered = last_id.load(Ordering::SeqCst);
    let dropped = DROPPED.lock().unwrap().as_ref().map_or(0, HashSet::len);
    assert_eq!(dropped as i64, registered);

    // Everything the mutator registered is gone again.
    assert_eq!(source_of(&op, dev.key), "backend fallback");
    assert_eq!(source_of(&op, other.key), "missing");
    assert_eq!(typed.call((dev.tensor(&[1.0]),)).unwrap(), 0);
    for j in 0..8 {
        assert!(boxfall::Dispatcher::lookup(&format!("{ns}::new_{j}")).is_none());
    }
}
