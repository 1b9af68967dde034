//! The registry: one global mutex over every definition, kernel and fallback; each change
//! recomputes the affected tables (`compute_table`, the one table rule) and publishes them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crossbeam_utils::CachePadded;

use crate::error::{Error, Result};
use crate::kernel::{
    DispatchTable, KernelFunction, OperatorEntry, OperatorHandle, Source, TableEntry,
};
use crate::key::{DispatchKey, KeyKind, NUM_KEYS};
use crate::metrics::{OpMetrics, OpStats};
use crate::rcu::{self, RcuCell};
use crate::schema::{FunctionSchema, OpSchema};

/// Identifies one registration, so its library can undo exactly it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RegId(u64);

pub(super) struct Registered<T> {
    pub(super) id: RegId,
    pub(super) value: T,
    pub(super) by: String,
}

pub(super) struct OpState {
    pub(super) handle: OperatorHandle,
    pub(super) def: Option<Registered<Arc<OpSchema>>>,
    pub(super) kernels: Vec<Vec<Registered<KernelFunction>>>,
}

/// What a registration change replaced; dropped only once the registry lock is released, with
/// the replaced tables no call can see any more.
#[derive(Default)]
struct Garbage {
    kernels: Vec<KernelFunction>,
    /// Entries removed from the registry (their tables hold kernels too).
    entries: Vec<OperatorHandle>,
}

impl Drop for Garbage {
    fn drop(&mut self) {
        drop(rcu::collect());
    }
}

pub(super) struct Registry {
    /// The operators with a definition or a kernel; an entry that loses its last one leaves.
    pub(super) ops: HashMap<String, OpState>,
    /// For each `ns::op`, the names of its defined overloads, in definition order (so that
    /// `overloads` is one look-up, whatever else was ever defined).
    pub(super) overloads: HashMap<String, Vec<String>>,
    /// Entries removed while a handle still held them (a Python `OpOverload` object, a typed
    /// handle): a new definition of the name takes the same entry back, so those handles see
    /// it. Dead ones are swept out as the map grows.
    pub(super) orphans: HashMap<String, std::sync::Weak<OperatorEntry>>,
    /// What removed entries had counted since the last reset, so that the metrics still report
    /// operators whose library was closed (a few words a name, where the entry is kilobytes).
    pub(super) retired_stats: HashMap<String, OpStats>,
    pub(super) fallbacks: Vec<Vec<Registered<KernelFunction>>>,
    pub(super) def_libraries: HashMap<String, String>,
    pub(super) next_id: u64,
}

impl Registry {
    fn id(&mut self) -> RegId {
        self.next_id += 1;
        RegId(self.next_id)
    }

    fn state(&mut self, name: &str) -> &mut OpState {
        let orphan = if self.ops.contains_key(name) {
            None
        } else {
            self.orphans.remove(name).and_then(|w| w.upgrade())
        };
        self.ops.entry(name.to_string()).or_insert_with(|| OpState {
            handle: OperatorHandle(orphan.unwrap_or_else(|| {
                Arc::new(OperatorEntry {
                    name: name.to_string(),
                    table: RcuCell::new(DispatchTable::empty()),
                    metrics: CachePadded::new(OpMetrics::default()),
                    policy: AtomicU8::new(0),
                    tags: AtomicU8::new(0),
                    by_name: std::sync::OnceLock::new(),
                })
            })),
            def: None,
            kernels: (0..NUM_KEYS).map(|_| Vec::new()).collect(),
        })
    }

    /// Removes the entry of `name` if nothing is registered for it any more (and it has no
    /// operator policy of its own, which the user set by name and expects to stay). Its table
    /// was published empty already; what it counted moves to `retired_stats`.
    fn remove_if_unused(&mut self, name: &str, garbage: &mut Garbage) {
        let unused = self.ops.get(name).is_some_and(|s| {
            s.def.is_none()
                && s.kernels.iter().all(Vec::is_empty)
                && s.handle.0.policy.load(Ordering::Relaxed) == 0
        });
        if !unused {
            return;
        }
        let Some(state) = self.ops.remove(name) else {
            return;
        };
        let entry = state.handle.0.clone();
        garbage.entries.push(state.handle);
        let counted = entry.metrics.snapshot();
        if counted.fallbacks > 0 {
            // The entry may come back (an orphan): its own counts then start from zero.
            entry.metrics.reset();
            self.retired_stats
                .entry(name.to_string())
                .or_default()
                .add(&counted);
        }
        // Held here and by `garbage`: any other count is a handle outside the registry.
        if Arc::strong_count(&entry) > 2 {
            if self.orphans.len() >= 64 && self.orphans.len().is_power_of_two() {
                self.orphans.retain(|_, w| w.strong_count() > 0);
            }
            self.orphans
                .insert(name.to_string(), Arc::downgrade(&entry));
        }
    }

    /// Publishes the recomputed table of `name`; the old table goes to `garbage`, to be dropped
    /// after the registry lock is released (dropping a kernel may run Python code, which may
    /// register or deregister in turn).
    fn publish(&self, name: &str, _garbage: &mut Garbage) {
        if let Some(state) = self.ops.get(name) {
            state
                .handle
                .0
                .table
                .replace(compute_table(state, &self.fallbacks));
        }
    }

    fn publish_all(&self, _garbage: &mut Garbage) {
        for state in self.ops.values() {
            state
                .handle
                .0
                .table
                .replace(compute_table(state, &self.fallbacks));
        }
    }

    /// The entry of a defined operator.
    pub(super) fn defined(&self, name: &str) -> Option<&OpState> {
        self.ops.get(name).filter(|s| s.def.is_some())
    }

    pub(super) fn defined_names(&self) -> impl Iterator<Item = &String> {
        self.ops
            .iter()
            .filter(|(_, s)| s.def.is_some())
            .map(|(n, _)| n)
    }
}

/// c10's order for every key: the operator's own kernel; for a backend key, the operator's
/// CompositeImplicit kernel; the key's backend fallback; missing. Fallthroughs leave the mask.
/// Then each entry is published ([`TableEntry::publish`]): its [`Route`] decided and its calls
/// bound, a CPU fallback entry's to the kernel that serves the CPU key. This is the one table
/// rule (c10's `computeDispatchTableEntryWithDebug`): a call runs what it bound.
fn compute_table(state: &OpState, fallbacks: &[Vec<Registered<KernelFunction>>]) -> DispatchTable {
    let mut table = DispatchTable::empty();
    table.schema = state.def.as_ref().map(|d| d.value.clone());
    let composite = state.kernels[0].last().map(|r| r.value.clone());
    for (i, (own, fallback)) in state.kernels.iter().zip(fallbacks).enumerate() {
        let key = DispatchKey::from_index(i).unwrap_or(DispatchKey::CPU);
        let (kernel, source) = if let Some(own) = own.last() {
            let source = if own.value.is_fallthrough() {
                Source::Fallthrough
            } else {
                Source::Kernel
            };
            (Some(own.value.clone()), source)
        } else if let (true, Some(c)) = (key.is_backend(), &composite) {
            (Some(c.clone()), Source::CompositeKernel)
        } else if let Some(fb) = fallback.last() {
            let source = if fb.value.is_fallthrough() {
                Source::Fallthrough
            } else {
                Source::BackendFallback
            };
            (Some(fb.value.clone()), source)
        } else {
            (None, Source::Missing)
        };
        if source == Source::Fallthrough {
            table.mask &= !(1u64 << i);
        }
        table.entries[i] = TableEntry {
            kernel,
            source,
            ..TableEntry::missing()
        };
    }
    // Each entry published once the mask is known: the CPU kernel a CPU fallback runs is the
    // one a call on the CPU key reaches.
    let cpu = table
        .masked(DispatchKey::CPU.set())
        .highest()
        .and_then(|k| table.entries[k.index()].kernel.clone());
    for (i, e) in table.entries.iter_mut().enumerate() {
        let key = DispatchKey::from_index(i).unwrap_or(DispatchKey::CPU);
        *e = TableEntry::publish(key, e.kernel.take(), e.source, cpu.as_ref());
    }
    table.cpu = cpu;
    // A kernel that reads the table may run any kernel below its key (the CPU fallback runs
    // the CPU kernel): it counts as long if one of those does. Slot 0 (CompositeImplicit) is
    // reached only through the backend keys it serves.
    let mut own_long = 0u64;
    for (i, e) in table.entries.iter().enumerate() {
        if let Some(k) = &e.kernel {
            if k.runs_long() {
                own_long |= 1u64 << i;
            }
            let below = ((1u64 << i) - 1) & !1;
            if k.runs_long() || (k.reads_table() && own_long & below != 0) {
                table.long |= 1u64 << i;
            }
        }
    }
    table
}

pub(super) fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            Mutex::new(Registry {
                ops: HashMap::new(),
                overloads: HashMap::new(),
                orphans: HashMap::new(),
                retired_stats: HashMap::new(),
                fallbacks: (0..NUM_KEYS).map(|_| Vec::new()).collect(),
                def_libraries: HashMap::new(),
                next_id: 0,
            })
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// What a registration was, so that it can be undone.
#[derive(Debug)]
pub(crate) enum Registration {
    Def(String, RegId),
    Impl(String, DispatchKey, RegId),
    Fallback(DispatchKey, RegId),
    DefLibrary(String),
}

/// The process-wide registry of operators, kernels and fallbacks.
///
/// ```
/// assert!(boxfall::Dispatcher::lookup("nobody::nothing").is_none());
/// ```
pub struct Dispatcher;

/// `Dispatcher::definitions_version`: moved, under the registry's lock, by every definition
/// that comes or goes.
pub(super) static DEFINITIONS: AtomicU64 = AtomicU64::new(0);

impl Dispatcher {
    pub(crate) fn claim_def_namespace(ns: &str, by: &str) -> Result<Registration> {
        let mut reg = registry();
        if let Some(other) = reg.def_libraries.get(ns) {
            return Err(Error::Registration(format!(
                "{by}: namespace '{ns}' already has a DEF library ({other}); use a \"FRAGMENT\" library to add definitions"
            )));
        }
        reg.def_libraries.insert(ns.to_string(), by.to_string());
        Ok(Registration::DefLibrary(ns.to_string()))
    }

    pub(crate) fn define(
        schema: FunctionSchema,
        by: &str,
    ) -> Result<(OperatorHandle, Registration)> {
        let name = schema.operator_name();
        let mut reg = registry();
        if let Some(Some(d)) = reg.ops.get(&name).map(|s| s.def.as_ref()) {
            return Err(Error::Registration(format!(
                "{by}: operator '{name}' is already defined by {}:\n  {}",
                d.by, d.value.text
            )));
        }
        let id = reg.id();
        let op = Arc::new(OpSchema::new(schema));
        let base = op.schema.name.clone();
        let state = reg.state(&name);
        state.def = Some(Registered {
            id,
            value: op,
            by: by.to_string(),
        });
        let handle = state.handle.clone();
        reg.overloads.entry(base).or_default().push(name.clone());
        let mut garbage = Garbage::default();
        reg.publish(&name, &mut garbage);
        DEFINITIONS.fetch_add(1, Ordering::Release);
        drop(reg);
        drop(garbage);
        Ok((handle, Registration::Def(name, id)))
    }

    pub(crate) fn register_impl(
        name: &str,
        key: DispatchKey,
        kernel: KernelFunction,
        allow_override: bool,
        by: &str,
    ) -> Result<Registration> {
        let mut reg = registry();
        if reg.ops.get(name).is_none_or(|s| s.def.is_none()) {
            return Err(Error::UnknownOperator {
                name: name.to_string(),
                suggestions: closest(name, reg.defined_names()),
            });
        }
        let id = reg.id();
        let state = reg.state(name);
        if let (false, Some(prev)) = (allow_override, state.kernels[key.index()].last()) {
            return Err(Error::Registration(format!(
                "{by}: operator '{name}' already has a kernel for '{key}', registered by {}; pass allow_override=True to replace it",
                prev.by
            )));
        }
        state.kernels[key.index()].push(Registered {
            id,
            value: kernel,
            by: by.to_string(),
        });
        let mut garbage = Garbage::default();
        reg.publish(name, &mut garbage);
        drop(reg);
        drop(garbage);
        Ok(Registration::Impl(name.to_string(), key, id))
    }

    pub(crate) fn register_fallback(
        key: DispatchKey,
        kernel: KernelFunction,
        by: &str,
    ) -> Result<Registration> {
        if key.kind() == KeyKind::Alias {
            return Err(Error::Registration(format!(
                "{by}: '{key}' cannot have a backend fallback"
            )));
        }
        let mut reg = registry();
        if let Some(prev) = reg.fallbacks[key.index()].last() {
            return Err(Error::Registration(format!(
                "{by}: key '{key}' already has a fallback, registered by {}",
                prev.by
            )));
        }
        let id = reg.id();
        reg.fallbacks[key.index()].push(Registered {
            id,
            value: kernel,
            by: by.to_string(),
        });
        let mut garbage = Garbage::default();
        reg.publish_all(&mut garbage);
        drop(reg);
        drop(garbage);
        Ok(Registration::Fallback(key, id))
    }

    pub(crate) fn deregister(r: &Registration) {
        let mut garbage = Garbage::default();
        let mut reg = registry();
        match r {
            Registration::Def(name, id) => {
                let mut base = None;
                if let Some(s) = reg.ops.get_mut(name) {
                    if s.def.as_ref().is_some_and(|d| d.id == *id) {
                        base = s.def.take().map(|d| d.value.schema.name.clone());
                    }
                }
                let undefined = base.is_some();
                if let Some(base) = base {
                    if let Some(names) = reg.overloads.get_mut(&base) {
                        names.retain(|n| n != name);
                        if names.is_empty() {
                            reg.overloads.remove(&base);
                        }
                    }
                }
                reg.publish(name, &mut garbage);
                reg.remove_if_unused(name, &mut garbage);
                if undefined {
                    DEFINITIONS.fetch_add(1, Ordering::Release);
                }
            }
            Registration::Impl(name, key, id) => {
                if let Some(s) = reg.ops.get_mut(name) {
                    take_registration(&mut s.kernels[key.index()], *id, &mut garbage);
                }
                reg.publish(name, &mut garbage);
                reg.remove_if_unused(name, &mut garbage);
            }
            Registration::Fallback(key, id) => {
                take_registration(&mut reg.fallbacks[key.index()], *id, &mut garbage);
                reg.publish_all(&mut garbage);
            }
            Registration::DefLibrary(ns) => {
                reg.def_libraries.remove(ns);
            }
        }
        drop(reg);
        drop(garbage);
    }
}

fn take_registration(list: &mut Vec<Registered<KernelFunction>>, id: RegId, garbage: &mut Garbage) {
    if let Some(i) = list.iter().position(|k| k.id == id) {
        garbage.kernels.push(list.remove(i).value);
    }
}

/// The defined names closest to `name`: every overload of the operator it names (`ns::op`
/// for `ns::op` or `ns::op.typo`, up to eight), then up to three by edit distance.
pub(super) fn closest<'a>(name: &str, names: impl Iterator<Item = &'a String>) -> Vec<String> {
    fn base(n: &str) -> &str {
        n.split_once('.').map_or(n, |(b, _)| b)
    }
    let mut same: Vec<&String> = Vec::new();
    let mut scored: Vec<(usize, &String)> = Vec::new();
    for n in names {
        if base(n) == base(name) {
            same.push(n);
        } else {
            let d = edit_distance(name, n);
            if d <= (n.len().max(name.len()) / 4).max(2) {
                scored.push((d, n));
            }
        }
    }
    same.sort();
    scored.sort();
    let near = scored.into_iter().take(3).map(|(_, n)| n);
    same.into_iter().take(8).chain(near).cloned().collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The operator `name`, if defined, looked up by name only until first found: a call that
/// asks at every use (graph mode's recorded view reads and in-place writes) then looks nothing
/// up. The handle stays right when the operator is defined again (its library closed and
/// opened again): the registry gives a name defined again the entry a handle still holds, and
/// one that is not defined now has no schema.
pub(crate) fn defined(cell: &OnceLock<OperatorHandle>, name: &str) -> Option<OperatorHandle> {
    match cell.get() {
        Some(op) => op.schema().is_ok().then(|| op.clone()),
        None => {
            let op = Dispatcher::lookup(name)?;
            Some(cell.get_or_init(|| op).clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ivalue::IValue;

    /// What publication binds (`TableEntry::publish`): a typed call runs an unboxed kernel
    /// straight away only if it is not counted (a counted one is the entry's counted typed
    /// function), the CPU fallback's typed call is its wrapper, and an entry with no kernel
    /// has no call.
    #[test]
    fn publication_decides_what_a_call_tests_first() {
        crate::native::install_fallback().expect("the Native fallback");
        let mut lib = crate::Library::new("dispatcher_entry_run", crate::LibraryKind::Def)
            .expect("a namespace of its own");
        let unboxed = || KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x));
        let f = lib.define("f(int x) -> int").expect("defines");
        lib.impl_kernel("f", DispatchKey::CPU, unboxed(), false)
            .expect("registers");
        let g = lib.define("g(int x) -> int").expect("defines");
        lib.impl_kernel("g", DispatchKey::NATIVE, unboxed(), false)
            .expect("registers");
        let boxed = KernelFunction::from_boxed(|_, _, _| Ok(()));
        lib.impl_kernel("g", DispatchKey::CPU, boxed, false)
            .expect("registers");
        let h = lib.define("h(int x) -> int").expect("defines");
        let reads = KernelFunction::from_boxed_in_table(|_, _, _, _| Ok(()));
        lib.impl_kernel("h", DispatchKey::CPU, reads, false)
            .expect("registers");
        let decided = |op: &OperatorHandle, key: DispatchKey| {
            let guard = rcu::read();
            let table = op.0.table.load(&guard);
            let fast = table.fast_unboxed::<(i64,), i64>(key.set()).is_some();
            let other_signature = table.fast_unboxed::<(f64,), f64>(key.set()).is_some();
            assert!(
                !other_signature,
                "{op:?} {key}: a typed call of another signature"
            );
            let e = &table.entries[key.index()];
            let counted = e.counted_typed.get::<(i64,), i64>().is_some();
            (fast, counted, e.wrapper.is_some(), e.boxed.is_some())
        };
        // A CPU kernel of the signature: the typed function, nothing else.
        assert_eq!(decided(&f, DispatchKey::CPU), (true, false, false, true));
        // The CPU fallback: its steps compiled with the CPU kernel's signature, as a wrapper.
        assert_eq!(decided(&f, DispatchKey::NATIVE), (false, false, true, true));
        // Native's own kernel is counted: its typed function is the counted one.
        assert_eq!(decided(&g, DispatchKey::NATIVE), (false, true, false, true));
        assert_eq!(decided(&g, DispatchKey::CPU), (false, false, false, true)); // boxed
                                                                                // A boxed kernel that reads the table: its boxed call only.
        assert_eq!(decided(&h, DispatchKey::CPU), (false, false, false, true));
        // No kernel: no call at all.
        assert_eq!(
            decided(&h, DispatchKey::COMPOSITE_IMPLICIT),
            (false, false, false, false)
        );
    }

    /// Runs `call` on another thread while its long-running kernel waits, and meanwhile makes
    /// `cycles` registrations that each retire a table; returns how many retired objects were
    /// still waiting for readers at the end.
    fn retired_while_a_long_call_runs(
        churn_ns: &str,
        cycles: usize,
        call: impl FnOnce(std::sync::mpsc::Receiver<()>) + Send + 'static,
    ) -> usize {
        use std::sync::mpsc::channel;
        let (entered_tx, entered_rx) = channel::<()>();
        let (release_tx, release_rx) = channel::<()>();
        let runner = std::thread::spawn(move || {
            let _ = entered_tx.send(());
            call(release_rx)
        });
        entered_rx.recv().expect("the caller started");
        // The kernel blocks on `release_rx` once it runs; give it a moment to get there.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut lib =
            crate::Library::new(churn_ns, crate::LibraryKind::Def).expect("a namespace of its own");
        lib.define("f(int x) -> int").expect("defines");
        let kernel = KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x));
        for _ in 0..cycles {
            let mut imp =
                crate::Library::new(churn_ns, crate::LibraryKind::Impl).expect("an impl library");
            imp.impl_kernel("f", DispatchKey::CPU, kernel.clone(), false)
                .expect("registers");
        }
        let held = rcu::retired_count();
        release_tx.send(()).expect("the kernel waits");
        runner.join().expect("the long call");
        held
    }

    fn waiting_kernel(release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>) -> KernelFunction {
        KernelFunction::from_boxed(move |_, _, stack| {
            let _ = release.lock().map(|r| r.recv());
            stack.clear();
            stack.push(IValue::Int(7));
            Ok(())
        })
        .long_running()
    }

    /// A library of `ns` defining `schema`, whose CPU kernel waits for `release`.
    fn slow_op(
        ns: &str,
        schema: &str,
        release: std::sync::mpsc::Receiver<()>,
    ) -> (crate::Library, OperatorHandle) {
        let mut lib = crate::Library::new(ns, crate::LibraryKind::Def).expect("a namespace");
        let op = lib.define(schema).expect("defines");
        let kernel = waiting_kernel(std::sync::Mutex::new(release));
        lib.impl_kernel("slow", DispatchKey::CPU, kernel, false)
            .expect("registers");
        (lib, op)
    }

    #[test]
    fn a_long_running_kernel_holds_back_no_replaced_table() {
        let held = retired_while_a_long_call_runs("rcu_churn_a", 2000, |release| {
            let (_lib, op) = slow_op("rcu_long_kernel", "slow(int x) -> int", release);
            let mut stack = vec![IValue::Int(1)];
            op.call_boxed(&mut stack).expect("the call");
            assert_eq!(stack[0].to_int(), Some(7));
        });
        // Other tests of this binary hold a reader for moments, never for 2000 registrations.
        assert!(
            held < 200,
            "{held} retired tables held back by one long call"
        );
    }

    #[test]
    fn a_cpu_fallback_whose_cpu_kernel_runs_long_holds_back_no_replaced_table() {
        let held = retired_while_a_long_call_runs("rcu_churn_b", 2000, |release| {
            crate::native::install_fallback().expect("Native's fallback");
            let (_lib, op) = slow_op("rcu_long_fallback", "slow(Tensor x) -> int", release);
            let x = crate::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
            let typed = op.typed::<(crate::Tensor,), i64>().expect("typed");
            assert_eq!(typed.call((x,)).expect("the call"), 7);
        });
        assert!(
            held < 200,
            "{held} retired tables held back by one long call"
        );
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("demo::add", "demo::add"), 0);
        assert_eq!(edit_distance("demo::ad", "demo::add"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn closest_names_are_near_ones() {
        let names = [
            "demo::add".to_string(),
            "demo::mul".to_string(),
            "zzz::q".to_string(),
        ];
        assert_eq!(
            closest("demo::ad", names.iter()),
            vec!["demo::add".to_string()]
        );
    }
}
