//! Graph mode's in-place calls without Python: `array_api::add_` (and `multiply_`) of a tensor
//! no view sees is recorded as `add` (`multiply`), whose pending result becomes the tensor's
//! data, a tensor a view was made of too (its views make their values from the write), and a
//! view whose layout is known is read and written as nodes on its base; and the old payload of
//! a tensor written in place that nothing else holds is offered to the program to consume
//! (donation), one held elsewhere never. The backend is host memory (or a payload holding it),
//! made a graph backend with a compiler that replays each graph.

mod common;

use common::graph::{read_f64, Counting};
use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use boxfall::backend::{register_backend, Backend};
use boxfall::graph::{self, pending_graphs, register_graph_backend, Graph};
use boxfall::native::NativeBackend;
use boxfall::tensor::{HostArray, Payload, TensorData, TensorMeta, ViewLayout, ViewOps};
use boxfall::{
    cpu_fallback, Device, DispatchKey, Error, IValue, KernelFunction, Library, LibraryKind,
    OperatorHandle, Result, Tensor,
};

fn host(values: Vec<f64>) -> TensorData {
    TensorData::Host(Arc::new(HostArray::from(
        ndarray::Array1::from(values).into_dyn(),
    )))
}

/// `f` of two float64 tensors (the second broadcast if it has one element), as a new tensor,
/// or (`in_place`) written into the first.
fn kernel(f: fn(f64, f64) -> f64, in_place: bool) -> KernelFunction {
    KernelFunction::from_boxed(move |_, _, stack| {
        let (a, b) = (read_f64(&stack[0])?, read_f64(&stack[1])?);
        let out: Vec<f64> = a
            .iter()
            .enumerate()
            .map(|(i, x)| f(*x, b[if b.len() == 1 { 0 } else { i }]))
            .collect();
        let result = match (in_place, &stack[0]) {
            (true, IValue::Tensor(t)) => {
                t.set_data(host(out));
                t.clone()
            }
            _ => Tensor::new(Device::CPU, host(out)),
        };
        stack.clear();
        stack.push(IValue::Tensor(result));
        Ok(())
    })
}

/// Registers the array API's shape rules of `names` (operators of `lib`'s namespace), as any
/// operator's rule is registered.
fn register_rules(lib: &mut Library, names: &[&str]) {
    for name in names {
        let rule = boxfall::graph::rules::array_api_shape_rule(&format!("array_api::{name}"))
            .expect("the array API has its rule");
        lib.register_shape_rule(name, rule).expect("rule");
    }
}

/// `array_api::add`, `add_`, `multiply` and `multiply_` (float64 only), defined once.
fn ops() -> &'static [OperatorHandle; 4] {
    static OPS: OnceLock<[OperatorHandle; 4]> = OnceLock::new();
    OPS.get_or_init(|| {
        let mut lib = Library::new("array_api", LibraryKind::Fragment).expect("fragment");
        let mut def = |schema: &str, name: &str, f: fn(f64, f64) -> f64, in_place: bool| {
            let op = lib.define(schema).expect("define");
            lib.impl_kernel(name, DispatchKey::CPU, kernel(f, in_place), false)
                .expect("kernel");
            op
        };
        let made = [
            def(
                "add(Tensor x1, Tensor x2) -> Tensor",
                "add",
                |x, y| x + y,
                false,
            ),
            def(
                "add_(Tensor(a!) x1, Tensor x2) -> Tensor(a!)",
                "add_",
                |x, y| x + y,
                true,
            ),
            def(
                "multiply(Tensor x1, Tensor x2) -> Tensor",
                "multiply",
                |x, y| x * y,
                false,
            ),
            def(
                "multiply_(Tensor(a!) x1, Tensor x2) -> Tensor(a!)",
                "multiply_",
                |x, y| x * y,
                true,
            ),
        ];
        register_rules(&mut lib, &["add", "add_", "multiply", "multiply_"]);
        std::mem::forget(lib);
        made
    })
}

/// A graph backend named `name` with its CPU fallback and compiler.
struct Setup {
    key: DispatchKey,
    compiler: Arc<Counting>,
    _fallback: Library,
}

fn setup(name: &str) -> Setup {
    setup_on(name, Arc::new(NativeBackend))
}

/// A graph backend named `name` whose tensors hold `Boxed` payloads.
fn setup_boxed(name: &str) -> Setup {
    setup_on(name, Arc::new(BoxedBackend))
}

fn setup_on(name: &str, backend: Arc<dyn Backend>) -> Setup {
    let key = register_backend(name, backend).expect("backend");
    let compiler = Arc::new(Counting::default());
    register_graph_backend(key, compiler.clone()).expect("graph backend");
    let mut fb = Library::new("_", LibraryKind::Impl).expect("library");
    fb.fallback(key, cpu_fallback()).expect("fallback");
    Setup {
        key,
        compiler,
        _fallback: fb,
    }
}

impl Setup {
    fn tensor(&self, values: &[f64]) -> Tensor {
        Tensor::new(Device::new(self.key, 0), host(values.to_vec()))
    }

    /// A tensor whose data is a payload (`Boxed`), which a program may be offered to consume
    /// (a backend of `setup_boxed`).
    fn payload(&self, values: &[f64]) -> Tensor {
        let a = HostArray::from(ndarray::Array1::from(values.to_vec()).into_dyn());
        Tensor::foreign(Device::new(self.key, 0), Arc::new(Boxed(a)))
    }

    /// The `donate` masks the programs were given so far.
    fn donations(&self) -> Vec<Vec<bool>> {
        self.compiler.donations.lock().expect("donations").clone()
    }

    fn graph(&self) -> Graph {
        pending_graphs()
            .into_iter()
            .find(|g| g.backend == self.key)
            .expect("a pending graph")
    }
}

fn call(op: &OperatorHandle, a: &Tensor, b: &Tensor) -> Tensor {
    let mut stack = vec![IValue::Tensor(a.clone()), IValue::Tensor(b.clone())];
    op.call_boxed(&mut stack).expect("call");
    match stack.pop() {
        Some(IValue::Tensor(t)) => t,
        _ => panic!("no tensor returned"),
    }
}

fn values(t: &Tensor) -> Vec<f64> {
    graph::compute(t, "numpy").expect("computed");
    read_f64(&IValue::Tensor(t.clone())).expect("float64")
}

#[test]
fn an_in_place_call_records_its_functional_node_and_rebinds_the_tensor() {
    let s = setup("InPlaceRecords");
    let [add, add_, ..] = ops();
    let x = s.tensor(&[1.0, 2.0]);
    let y = s.tensor(&[10.0, 20.0]);
    let before = x.data_version();
    let z = call(add, &x, &x); // reads x's old values
    let returned = call(add_, &x, &y);
    assert!(returned.same(&x)); // `Tensor(a!)`: the written tensor itself
    assert!(graph::is_pending(&x));
    assert_ne!(x.data_version(), before); // moved on, as an eager write moves it
    let g = s.graph();
    let names: Vec<&str> = g.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(names, ["array_api::add", "array_api::add"]);
    assert_eq!(values(&x), vec![11.0, 22.0]);
    assert_eq!(values(&z), vec![2.0, 4.0]);
    assert_eq!(s.compiler.compiles.load(Ordering::Relaxed), 1);
    assert!(!graph::graph_metrics()
        .breaks
        .contains_key("array_api::add_"));
}

#[test]
fn a_tensor_written_twice_is_one_output_of_its_last_value() {
    let s = setup("InPlaceTwice");
    let [_, add_, ..] = ops();
    let x = s.tensor(&[1.0]);
    let y = s.tensor(&[2.0]);
    call(add_, &x, &y);
    call(add_, &x, &y);
    let g = s.graph();
    assert_eq!(g.nodes.len(), 2);
    assert_eq!(g.outputs, vec![(1, 0)]); // the first write's result is no output
    assert_eq!(values(&x), vec![5.0]);
}

#[test]
fn a_failing_program_leaves_the_written_tensor_pending_on_its_old_values() {
    let s = setup("InPlaceFails");
    let [_, add_, ..] = ops();
    let x = s.tensor(&[1.0, 2.0]);
    let one = s.tensor(&[1.0]);
    call(add_, &x, &one);
    s.compiler.fail.store(true, Ordering::Relaxed);
    let e = graph::compute(&x, "numpy").expect_err("the program fails");
    assert!(e.to_string().contains("InPlaceFails"), "{e}");
    assert!(graph::is_pending(&x)); // nothing committed
    s.compiler.fail.store(false, Ordering::Relaxed);
    // The graph still reads x's old values: the write is computed once.
    assert_eq!(values(&x), vec![2.0, 3.0]);
}

/// A view that is its whole base.
struct Whole;

impl ViewOps for Whole {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn materialize(&self, base: &Tensor, _: Device) -> Result<TensorData> {
        Ok(TensorData::Host(base.to_host()?))
    }
    fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> {
        base.set_data(TensorData::Host(src.to_host()?));
        Ok(())
    }
}

#[test]
fn a_write_of_a_tensor_a_view_was_made_of_is_recorded_and_seen_by_the_view() {
    let s = setup("InPlaceViewed");
    let [.., multiply, multiply_] = ops();
    let x = s.tensor(&[1.0, 2.0]);
    let three = s.tensor(&[3.0]);
    let v = Tensor::view_of(&x, Arc::new(Whole), 16).expect("view");
    let z = call(multiply, &x, &x); // pending, reading x's old values
    call(multiply_, &x, &three);
    assert!(graph::is_pending(&x)); // recorded: the view makes its values from x's next
    assert!(graph::is_pending(&v)); // as its base is
    assert_eq!(values(&v), vec![3.0, 6.0]); // the view sees the write
    assert_eq!(values(&z), vec![1.0, 4.0]);
    assert!(!graph::graph_metrics()
        .breaks
        .contains_key("array_api::multiply_"));
    // A write through a view whose layout graph mode does not know is an eager break, and
    // reaches its base.
    call(multiply_, &v, &three);
    assert_eq!(values(&x), vec![9.0, 18.0]);
    assert_eq!(
        graph::graph_metrics().breaks.get("array_api::multiply_"),
        Some(&1)
    );
}

/// `x[start:start + len]` of a float64 vector, whose layout graph mode reads.
struct Slice {
    start: usize,
    len: usize,
}

impl ViewOps for Slice {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn materialize(&self, base: &Tensor, _: Device) -> Result<TensorData> {
        let all = read_f64(&IValue::Tensor(base.clone()))?;
        Ok(host(all[self.start..self.start + self.len].to_vec()))
    }
    fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> {
        let mut all = read_f64(&IValue::Tensor(base.clone()))?;
        let part = read_f64(&IValue::Tensor(src.clone()))?;
        all[self.start..self.start + self.len].copy_from_slice(&part);
        base.set_data(host(all));
        Ok(())
    }
    fn layout(&self) -> Option<ViewLayout> {
        Some(ViewLayout {
            shape: vec![self.len],
            strides: vec![1],
            offset: self.start as i64,
            writable: true,
        })
    }
}

/// The element indices of a one-dimensional strided view on the stack (`shape, strides,
/// offset` from `at`).
fn places(stack: &[IValue], at: usize) -> Result<Vec<usize>> {
    let (IValue::IntList(shape), IValue::IntList(strides), IValue::Int(offset)) =
        (&stack[at], &stack[at + 1], &stack[at + 2])
    else {
        return Err(Error::Fallback("not a layout".into()));
    };
    Ok((0..shape[0])
        .map(|i| (offset + i * strides[0]) as usize)
        .collect())
}

/// `array_api::_strided_view` and `_strided_view_write` of float64 vectors, defined once.
fn view_ops() {
    static DEFINED: OnceLock<()> = OnceLock::new();
    DEFINED.get_or_init(|| {
        let mut lib = Library::new("array_api", LibraryKind::Fragment).expect("fragment");
        lib.define("_strided_view(Tensor x, int[] shape, int[] strides, int offset) -> Tensor")
            .expect("define");
        lib.define(
            "_strided_view_write(Tensor x, Tensor values, int[] shape, int[] strides, int offset) -> Tensor",
        )
        .expect("define");
        let view = KernelFunction::from_boxed(|_, _, stack| {
            let x = read_f64(&stack[0])?;
            let out = places(stack, 1)?.into_iter().map(|i| x[i]).collect();
            stack.clear();
            stack.push(IValue::Tensor(Tensor::new(Device::CPU, host(out))));
            Ok(())
        });
        let write = KernelFunction::from_boxed(|_, _, stack| {
            let (mut x, values) = (read_f64(&stack[0])?, read_f64(&stack[1])?);
            for (i, v) in places(stack, 2)?.into_iter().zip(values) {
                x[i] = v;
            }
            stack.clear();
            stack.push(IValue::Tensor(Tensor::new(Device::CPU, host(x))));
            Ok(())
        });
        lib.impl_kernel("_strided_view", DispatchKey::CPU, view, false)
            .expect("kernel");
        lib.impl_kernel("_strided_view_write", DispatchKey::CPU, write, false)
            .expect("kernel");
        register_rules(&mut lib, &["_strided_view", "_strided_view_write"]);
        std::mem::forget(lib);
    });
}

#[test]
fn a_write_through_a_view_of_a_pending_tensor_is_recorded_into_its_base() {
    let s = setup("InPlaceThroughView");
    let [add, add_, ..] = ops();
    view_ops();
    let x0 = s.tensor(&[1.0, 2.0, 3.0, 4.0]);
    let x = call(add, &x0, &x0); // pending: [2, 4, 6, 8]
    let v = Tensor::view_of(&x, Arc::new(Slice { start: 1, len: 2 }), 16).expect("view");
    let before = call(add, &v, &v); // reads the view before the write
    let returned = call(add_, &v, &s.tensor(&[10.0]));
    assert!(returned.same(&v)); // the view itself, as eager mode returns it
    assert!(graph::is_pending(&x));
    let g = s.graph();
    let names: Vec<&str> = g.nodes.iter().map(|n| n.op.name()).collect();
    // The write reads the view as `before` did, from the same data of the base: one read.
    assert_eq!(
        names,
        [
            "array_api::add",
            "array_api::_strided_view",
            "array_api::add",
            "array_api::add",
            "array_api::_strided_view_write",
        ]
    );
    assert_eq!(values(&x), vec![2.0, 14.0, 16.0, 8.0]);
    assert_eq!(values(&v), vec![14.0, 16.0]);
    assert_eq!(values(&before), vec![8.0, 12.0]);
    assert!(!graph::graph_metrics()
        .breaks
        .contains_key("array_api::add_"));
}

/// A payload holding host memory: a device buffer a program may consume.
struct Boxed(HostArray);

impl Payload for Boxed {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn to_host(&self) -> Result<HostArray> {
        Ok(self.0.clone())
    }
    fn meta(&self) -> Option<TensorMeta> {
        Some(TensorMeta {
            dtype: "float64".into(),
            shape: self.0.shape().to_vec(),
        })
    }
}

/// Moves `Boxed` payloads to and from host memory.
struct BoxedBackend;

impl Backend for BoxedBackend {
    fn to_cpu(&self, t: &Tensor, _for_write: bool) -> Result<Tensor> {
        Ok(Tensor::new(Device::CPU, TensorData::Host(t.to_host()?)))
    }
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        Ok(Tensor::foreign(
            device,
            Arc::new(Boxed((*cpu.to_host()?).clone())),
        ))
    }
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        dst.set_data(self.from_cpu(src, dst.device())?.data());
        Ok(())
    }
}

#[test]
fn the_old_payload_of_a_tensor_written_in_place_that_nothing_holds_may_be_consumed() {
    let s = setup_boxed("InPlaceDonates");
    let [add, add_, ..] = ops();
    let x = s.payload(&[1.0, 2.0]);
    let y = s.payload(&[10.0, 20.0]);
    call(add_, &x, &y);
    assert_eq!(values(&x), vec![11.0, 22.0]);
    // Input 0 is x's old payload, which only the graph holds now; input 1 is y's, held by y.
    assert_eq!(s.donations(), vec![vec![true, false]]);

    // Read, not written: x holds its payload, so nothing is offered (the plain `run`).
    let x = s.payload(&[1.0, 2.0]);
    let z = call(add, &x, &y);
    assert_eq!(values(&z), vec![11.0, 22.0]);
    // Written, but its old payload held by another handle: not offered either.
    let held = x.payload();
    call(add_, &x, &y);
    assert_eq!(values(&x), vec![11.0, 22.0]);
    // Written, but a view was made of it (a view may share its base's buffer): not offered.
    let w = s.payload(&[1.0, 2.0]);
    let v = Tensor::view_of(&w, Arc::new(Whole), 16).expect("view");
    call(add_, &w, &y);
    assert_eq!(values(&v), vec![11.0, 22.0]);
    // Host memory is never offered.
    let h = s.tensor(&[1.0, 2.0]);
    call(add_, &h, &y);
    assert_eq!(values(&h), vec![11.0, 22.0]);
    assert_eq!(s.donations().len(), 1);
    drop(held);
}

#[test]
fn an_input_is_offered_only_for_an_output_of_its_dtype_and_shape() {
    let s = setup_boxed("InPlaceDonatesShapes");
    let [add, add_, ..] = ops();
    let x = s.payload(&[1.0, 2.0]);
    let one = s.payload(&[1.0]);
    call(add_, &x, &one);
    let first = x.clone();
    call(add_, &x, &one); // the first result is no output now: one output, float64[2]
    let sum = call(add, &x, &one);
    assert_eq!(values(&sum), vec![4.0, 5.0]);
    // x's old payload (float64[2]) fits an output; `one` (float64[1]) would fit none.
    assert_eq!(s.donations(), vec![vec![true, false]]);
    assert_eq!(values(&first), vec![3.0, 4.0]);
}

#[test]
fn a_failure_after_a_donation_loses_only_what_the_consumed_payload_computes() {
    let s = setup_boxed("InPlaceDonatesFails");
    let [add, add_, ..] = ops();
    let x = s.payload(&[1.0, 2.0]);
    let y = s.payload(&[10.0, 20.0]);
    call(add_, &x, &y);
    let other = call(add, &y, &y); // the same graph, reading no consumed payload
    s.compiler.fail.store(true, Ordering::Relaxed);
    let e = graph::compute(&x, "numpy").expect_err("the program fails");
    assert!(e.to_string().contains("consumed 1 input buffer"), "{e}");
    assert!(graph::is_pending(&x) && graph::is_pending(&other)); // nothing committed
    s.compiler.fail.store(false, Ordering::Relaxed);
    let runs = s.compiler.runs.load(Ordering::Relaxed);
    // x's old values are gone: computing x says so and runs nothing on them...
    let e = graph::compute(&x, "numpy").expect_err("x is lost");
    let e = e.to_string();
    assert!(
        e.contains("InPlaceDonatesFails") && e.contains("consumed (donated)"),
        "{e}"
    );
    // ...while the rest of its graph was computed by that sync, without the consumed input.
    assert_eq!(s.compiler.runs.load(Ordering::Relaxed), runs + 1);
    assert!(!graph::is_pending(&other));
    assert_eq!(values(&other), vec![20.0, 40.0]);
    // A call reading x later fails as it reads it, and breaks no later sync.
    let mut stack = vec![IValue::Tensor(x.clone()), IValue::Tensor(y.clone())];
    let e = add.call_boxed(&mut stack).expect_err("x is lost");
    assert!(e.to_string().contains("consumed (donated)"), "{e}");
    graph::sync("sync").expect("nothing left that fails");
}
