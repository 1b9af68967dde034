//! Graph mode's core without Python: a backend of host memory made a graph backend with a
//! compiler that replays each graph and counts its compiles. Each test has a backend, an
//! operator namespace and a compiler of its own, since tests run on threads side by side and
//! graph mode's figures are the process's.

mod common;

use common::graph::{read_f64, Counting};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use boxfall::backend::register_backend;
use boxfall::graph::{self, pending_graphs, register_graph_backend, Arg};
use boxfall::native::NativeBackend;
use boxfall::tensor::HostArray;
use boxfall::{
    cpu_fallback, Device, DispatchKey, IValue, KernelFunction, Library, LibraryKind,
    OperatorHandle, Result, Tensor,
};

/// A graph backend named `name`, its CPU fallback, and `array_api::add` (with the array API's
/// shape rule registered) and `ns::neg` (without one).
struct Setup {
    key: DispatchKey,
    compiler: Arc<Counting>,
    add: OperatorHandle,
    neg: OperatorHandle,
    _libs: Vec<Library>,
}

fn f64_kernel(f: fn(&[f64], &[f64]) -> Vec<f64>, arity: usize) -> KernelFunction {
    KernelFunction::from_boxed(move |_, _, stack| {
        let a = read_f64(&stack[0])?;
        let b = if arity == 2 {
            read_f64(&stack[1])?
        } else {
            vec![]
        };
        let out = ndarray::Array1::from(f(&a, &b)).into_dyn();
        stack.clear();
        stack.push(IValue::Tensor(Tensor::from_array(out)));
        Ok(())
    })
}

fn setup(name: &str) -> Setup {
    let key = register_backend(name, Arc::new(NativeBackend)).expect("backend");
    let compiler = Arc::new(Counting::default());
    register_graph_backend(key, compiler.clone()).expect("graph backend");
    let mut fb = Library::new("_", LibraryKind::Impl).expect("library");
    fb.fallback(key, cpu_fallback()).expect("fallback");
    // `array_api::add` is defined once per process, in a fragment, with its rule; each test
    // defines its own `neg`.
    static ADD: std::sync::OnceLock<OperatorHandle> = std::sync::OnceLock::new();
    let add = ADD
        .get_or_init(|| {
            let mut lib = Library::new("array_api", LibraryKind::Fragment).expect("fragment");
            let op = lib
                .define("add(Tensor x1, Tensor x2) -> Tensor")
                .expect("define");
            lib.impl_kernel(
                "add",
                DispatchKey::CPU,
                f64_kernel(|a, b| a.iter().zip(b).map(|(x, y)| x + y).collect(), 2),
                false,
            )
            .expect("kernel");
            // The array API's rule of `add`, registered as any operator's rule is.
            let rule = boxfall::graph::rules::array_api_shape_rule("array_api::add").expect("rule");
            lib.register_shape_rule("add", rule).expect("rule");
            std::mem::forget(lib);
            op
        })
        .clone();
    let ns = name.to_lowercase();
    let mut lib = Library::new(&ns, LibraryKind::Def).expect("library");
    let neg = lib.define("neg(Tensor x) -> Tensor").expect("define");
    lib.impl_kernel(
        "neg",
        DispatchKey::CPU,
        f64_kernel(|a, _| a.iter().map(|x| -x).collect(), 1),
        false,
    )
    .expect("kernel");
    Setup {
        key,
        compiler,
        add,
        neg,
        _libs: vec![fb, lib],
    }
}

impl Setup {
    fn tensor(&self, values: &[f64]) -> Tensor {
        let a = ndarray::Array1::from(values.to_vec()).into_dyn();
        Tensor::host(Device::new(self.key, 0), HostArray::from(a))
    }

    fn call(&self, op: &OperatorHandle, args: &[&Tensor]) -> Tensor {
        call(op, args)
    }

    fn compiles(&self) -> usize {
        self.compiler.compiles.load(Ordering::Relaxed)
    }
}

fn call(op: &OperatorHandle, args: &[&Tensor]) -> Tensor {
    let mut stack: Vec<IValue> = args.iter().map(|t| IValue::Tensor((*t).clone())).collect();
    op.call_boxed(&mut stack).expect("call");
    match stack.pop() {
        Some(IValue::Tensor(t)) => t,
        _ => panic!("no tensor returned"),
    }
}

fn values(t: &Tensor) -> Vec<f64> {
    graph::compute(t, "numpy").expect("computed");
    t.to_host()
        .expect("host")
        .as_f64()
        .expect("float64")
        .iter()
        .copied()
        .collect()
}

#[test]
fn a_call_records_a_node_and_gives_a_pending_tensor_computed_at_a_read() {
    let s = setup("GraphRecords");
    let x = s.tensor(&[1.0, 2.0]);
    let y = s.tensor(&[10.0, 20.0]);
    let z = s.call(&s.add, &[&x, &y]);
    let w = s.call(&s.add, &[&z, &x]);
    assert!(graph::is_pending(&z) && graph::is_pending(&w));
    assert_eq!(
        graph::pending_meta(&w).expect("meta").to_string(),
        "float64[2]"
    );
    assert_eq!(s.compiles(), 0);
    let g = pending_graphs()
        .into_iter()
        .find(|g| g.backend == s.key)
        .expect("a pending graph");
    assert_eq!(g.nodes.len(), 2);
    assert_eq!(g.inputs.len(), 2);
    assert!(matches!(
        g.nodes[1].args[..],
        [Arg::Node(0, 0), Arg::Input(0)]
    ));
    assert_eq!(values(&w), vec![12.0, 24.0]);
    assert!(!graph::is_pending(&z)); // held: an output of the same program
    assert_eq!(values(&z), vec![11.0, 22.0]);
    assert_eq!(s.compiles(), 1);
}

#[test]
fn an_identical_graph_is_a_cache_hit_and_a_new_shape_compiles() {
    let s = setup("GraphCaches");
    let run = |n: usize| {
        let x = s.tensor(&vec![1.0; n]);
        let z = s.call(&s.add, &[&x, &x]);
        values(&z)
    };
    assert_eq!(run(3), vec![2.0; 3]);
    assert_eq!(run(3), vec![2.0; 3]);
    assert_eq!(s.compiles(), 1);
    assert_eq!(run(5), vec![2.0; 5]);
    assert_eq!(s.compiles(), 2);
}

#[test]
fn the_structural_key_tells_shapes_and_outputs_apart() {
    let s = setup("GraphKeys");
    let key_of = |n: usize, keep: bool| {
        let x = s.tensor(&vec![1.0; n]);
        let z = s.call(&s.add, &[&x, &x]);
        let w = s.call(&s.add, &[&z, &z]);
        // Only a held pending tensor is an output.
        let kept = keep.then_some(z);
        let g = pending_graphs()
            .into_iter()
            .find(|g| g.backend == s.key)
            .expect("a pending graph");
        assert_eq!(g.outputs.len(), 1 + usize::from(keep));
        drop((w, kept));
        graph::sync("sync").expect("sync");
        g.key()
    };
    assert_eq!(key_of(2, false), key_of(2, false));
    assert_ne!(key_of(2, false), key_of(3, false));
    assert_ne!(key_of(2, false), key_of(2, true));
}

#[test]
fn an_operator_without_a_shape_rule_breaks_the_graph() {
    let s = setup("GraphBreaks");
    let x = s.tensor(&[1.0, 2.0]);
    let z = s.call(&s.add, &[&x, &x]);
    let n = s.call(&s.neg, &[&z]);
    assert!(!graph::is_pending(&n) && !graph::is_pending(&z));
    assert_eq!(values(&n), vec![-2.0, -4.0]);
    let breaks = graph::graph_metrics().breaks;
    assert_eq!(breaks.get("graphbreaks::neg"), Some(&1));
}

#[test]
fn a_failing_program_commits_nothing() {
    let s = setup("GraphFails");
    let x = s.tensor(&[1.0]);
    let z = s.call(&s.add, &[&x, &x]);
    s.compiler.fail.store(true, Ordering::Relaxed);
    let e = graph::compute(&z, "numpy").expect_err("the program fails");
    assert!(e.to_string().contains("GraphFails"), "{e}");
    assert!(graph::is_pending(&z));
    s.compiler.fail.store(false, Ordering::Relaxed);
    assert_eq!(values(&z), vec![2.0]);
}

#[test]
fn an_excluded_graph_key_runs_calls_eagerly() {
    let s = setup("GraphEager");
    let x = s.tensor(&[3.0]);
    let z = {
        let _eager = boxfall::key::LocalKeysGuard::exclude(graph::graph_keys());
        s.call(&s.add, &[&x, &x])
    };
    assert!(!graph::is_pending(&z));
    assert_eq!(values(&z), vec![6.0]);
    assert_eq!(s.compiles(), 0);
}

#[test]
fn nodes_no_output_needs_are_left_out_of_the_graph() {
    let s = setup("GraphPrunes");
    let x = s.tensor(&[1.0, 2.0]);
    let y = s.tensor(&[5.0, 6.0]);
    let dead = s.call(&s.add, &[&y, &y]);
    let w = s.call(&s.add, &[&x, &x]);
    drop(dead);
    let g = pending_graphs()
        .into_iter()
        .find(|g| g.backend == s.key)
        .expect("a pending graph");
    assert_eq!((g.nodes.len(), g.inputs.len()), (1, 1));
    assert!(matches!(
        g.nodes[0].args[..],
        [Arg::Input(0), Arg::Input(0)]
    ));
    assert_eq!(g.outputs, vec![(0, 0)]);
    assert_eq!(values(&w), vec![2.0, 4.0]);
}

#[test]
fn a_graph_recorded_again_runs_its_cached_program_with_or_without_dead_nodes() {
    let s = setup("GraphHashed");
    // `dead` records a node whose result nothing holds: the graph compiled leaves it out, so
    // it is the graph recorded without it, found by its key rather than its recorded form.
    let run = |a: f64, dead: bool| {
        let x = s.tensor(&[a, 2.0 * a]);
        let z = s.call(&s.add, &[&x, &x]);
        if dead {
            drop(s.call(&s.add, &[&z, &z]));
        }
        let w = s.call(&s.add, &[&z, &x]);
        values(&w)
    };
    assert_eq!(run(1.0, false), vec![3.0, 6.0]);
    assert_eq!(s.compiles(), 1);
    assert_eq!(run(2.0, false), vec![6.0, 12.0]);
    assert_eq!(run(3.0, true), vec![9.0, 18.0]);
    assert_eq!(run(4.0, false), vec![12.0, 24.0]);
    assert_eq!(s.compiles(), 1);
}

#[test]
fn cached_programs_are_told_apart_by_outputs_inputs_and_operators() {
    let s = setup("GraphHashApart");
    let x = s.tensor(&[1.0]);
    let y = s.tensor(&[5.0]);
    // The same two nodes with one output, then two; one input read twice, then two inputs.
    let outputs = |keep: bool| {
        let z = s.call(&s.add, &[&x, &x]);
        let w = s.call(&s.add, &[&z, &x]);
        let kept = keep.then(|| z.clone());
        drop(z);
        graph::sync("sync").expect("sync");
        (values(&w), kept.map(|k| values(&k)))
    };
    let inputs = |other: &Tensor| values(&s.call(&s.add, &[&x, other]));
    for _ in 0..2 {
        assert_eq!(outputs(false), (vec![3.0], None));
        assert_eq!(outputs(true), (vec![3.0], Some(vec![2.0])));
        assert_eq!(inputs(&x), vec![2.0]);
        assert_eq!(inputs(&y), vec![6.0]);
    }
    assert_eq!(s.compiles(), 4);
}

#[test]
fn threads_reading_one_pending_tensor_get_its_value_from_one_run() {
    let s = setup("GraphReaders");
    let x = s.tensor(&[1.0, 2.0]);
    let z = s.call(&s.add, &[&x, &x]);
    let w = s.call(&s.add, &[&z, &x]);
    // Long enough that the readers after the first find the graph being computed.
    s.compiler.delay_ms.store(50, Ordering::Relaxed);
    let barrier = std::sync::Barrier::new(4);
    std::thread::scope(|sc| {
        let readers: Vec<_> = (0..4)
            .map(|_| {
                sc.spawn(|| {
                    barrier.wait();
                    values(&w)
                })
            })
            .collect();
        for r in readers {
            assert_eq!(r.join().expect("reader"), vec![3.0, 6.0]);
        }
    });
    assert_eq!(s.compiler.runs.load(Ordering::Relaxed), 1);
    assert_eq!(values(&z), vec![2.0, 4.0]);
}

#[test]
fn a_thread_records_on_while_another_computes_its_graph() {
    let s = setup("GraphRecordsOn");
    let x = s.tensor(&[1.0, 2.0]);
    let z = s.call(&s.add, &[&x, &x]);
    s.compiler.delay_ms.store(50, Ordering::Relaxed);
    std::thread::scope(|sc| {
        let reader = sc.spawn(|| values(&z));
        std::thread::sleep(std::time::Duration::from_millis(10));
        // Waits for the reader's sync where it is under way, then records the next graph,
        // with `z` computed or pending: the values are those of eager mode either way.
        let w = s.call(&s.add, &[&z, &x]);
        assert_eq!(reader.join().expect("reader"), vec![2.0, 4.0]);
        assert_eq!(values(&w), vec![3.0, 6.0]);
    });
}

#[test]
fn a_pending_tensor_of_a_thread_that_ended_is_computed_on_another() {
    let s = setup("GraphEnded");
    let (add, key) = (s.add.clone(), s.key);
    let w = std::thread::spawn(move || {
        let x = Tensor::host(
            Device::new(key, 0),
            HostArray::from(ndarray::Array1::from(vec![1.0, 2.0]).into_dyn()),
        );
        let z = call(&add, &[&x, &x]);
        call(&add, &[&z, &x])
    })
    .join()
    .expect("recording thread");
    assert!(graph::is_pending(&w));
    assert_eq!(values(&w), vec![3.0, 6.0]);
    assert_eq!(s.compiles(), 1);
}

#[test]
fn a_change_of_the_backends_settings_compiles_again_and_says_so() {
    let s = setup("GraphSettings");
    let run = || {
        let x = s.tensor(&[1.0, 2.0]);
        values(&s.call(&s.add, &[&x, &x]))
    };
    *s.compiler.settings.lock().expect("settings") = "precision=default".into();
    assert_eq!(run(), vec![2.0, 4.0]);
    assert_eq!(run(), vec![2.0, 4.0]);
    assert_eq!(s.compiles(), 1);
    *s.compiler.settings.lock().expect("settings") = "precision=highest".into();
    assert_eq!(run(), vec![2.0, 4.0]);
    assert_eq!(s.compiles(), 2);
    let reasons = graph::graph_metrics().recompiles;
    assert!(
        reasons.iter().any(|r| r.starts_with("GraphSettings")
            && r.contains("the backend's settings: 'settings: precision=highest' where the nearest compiled graph has 'settings: precision=default'")),
        "{reasons:?}"
    );
    // Back to the first settings: their program, cached, compiles nothing.
    *s.compiler.settings.lock().expect("settings") = "precision=default".into();
    assert_eq!(run(), vec![2.0, 4.0]);
    assert_eq!(s.compiles(), 2);
}

#[test]
fn a_result_narrowed_in_graph_mode_is_counted_and_warned_once() {
    static WARNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    fn warner(message: &str) -> Result<()> {
        WARNED.lock().expect("warned").push(message.to_string());
        Ok(())
    }
    let _ = graph::set_narrowing_warner(warner);
    let s = setup("GraphNarrows");
    s.compiler.narrows.store(true, Ordering::Relaxed);
    let x = s.tensor(&[1.0, 2.0]);
    let z = s.call(&s.add, &[&x, &x]);
    let w = s.call(&s.add, &[&z, &x]);
    assert_eq!(graph::pending_meta(&w).expect("meta").dtype, "float32");
    let narrowed = |op: &OperatorHandle| {
        op.metrics()
            .snapshot()
            .backend(s.key)
            .map_or(0, |f| f.narrowed)
    };
    assert_eq!(narrowed(&s.add), 2); // each result counted
    let mine: Vec<String> = WARNED
        .lock()
        .expect("warned")
        .iter()
        .filter(|m| m.contains("'GraphNarrows'"))
        .cloned()
        .collect();
    assert_eq!(mine.len(), 1, "{mine:?}"); // warned once per operator and backend
    assert!(mine[0]
        .contains("'array_api::add' on backend 'GraphNarrows' made a result of dtype float64"));
    assert!(mine[0].contains("float32"));
    drop((z, w));
    // Nothing narrows where the device holds the dtype: no count, no warning.
    s.compiler.narrows.store(false, Ordering::Relaxed);
    let v = s.call(&s.add, &[&x, &x]);
    assert_eq!(graph::pending_meta(&v).expect("meta").dtype, "float64");
    assert_eq!(narrowed(&s.add), 2);
}

#[test]
fn a_graph_past_its_backends_size_limit_is_cut_and_gives_the_same_values() {
    let s = setup("GraphLimited");
    assert_eq!(graph::graph_limit(s.key), graph::DEFAULT_GRAPH_LIMIT);
    graph::set_graph_limit(s.key, 2).expect("a limit");
    let x = s.tensor(&[1.0, 2.0]);
    let mut y = x.clone();
    for _ in 0..5 {
        y = s.call(&s.add, &[&y, &x]);
    }
    // Five calls in graphs of at most two nodes: the third and fifth calls cut the graph.
    assert!(graph::is_pending(&y));
    assert_eq!(values(&y), vec![6.0, 12.0]);
    // The first part reads `x` alone, the second the first's result as well, the third is one
    // node: three structures.
    assert_eq!(s.compiles(), 3);
    assert!(graph::set_graph_limit(s.key, 0).is_err());
    assert_eq!(graph::graph_limit(s.key), 2);
}
