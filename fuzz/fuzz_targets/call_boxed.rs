//! Random stacks through `call_boxed` (and the other boxed entry points) of random operators:
//! PyTorch's own schemas (`python/boxfall/data/torch_schemas.txt`, defined in namespace `fz`,
//! with Native's Rust kernels where they match) and schemas generated from the fuzz input by the
//! schema grammar. Every operator has a boxed CPU kernel whose behaviour the input picks (a
//! well-behaved kernel, one that fails, one that leaves garbage on the stack, one that writes
//! its arguments); tensors live on the CPU, on Native (which has `cpu_fallback`), on a copying
//! backend and on a faulty one whose hooks fail or return garbage as the input says.
//!
//! The property: nothing panics. Errors are fine, whatever they are.
#![no_main]

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use boxfall::backend::{register_backend, Backend};
use boxfall::fallback::{set_fallback_policy, set_operator_policy, ViewPolicy};
use boxfall::key::{register_functionality_key, LocalKeysGuard};
use boxfall::schema::Type;
use boxfall::tensor::{HostArray, Payload, TensorData};
use boxfall::{
    call_fallback, cpu_fallback, native, CpuFallback, DType, Device, DispatchKey, DispatchKeySet,
    Error, FallbackPolicy, IValue, KernelFunction, Library, LibraryKind, OperatorHandle, Result,
    Stack, Tensor,
};
use libfuzzer_sys::arbitrary::{Result as UResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use ndarray::{ArrayD, IxDyn};

/// How many generated operators are kept; past it, generated schemas map onto kept ones
/// (operator entries are never freed today, so fresh ones would grow without end).
const MAX_GENERATED: usize = 4096;

/// Tensors with more dimensions than NumPy's 32 (64 are allowed by NumPy 2). The Rust core
/// handles any count; NumPy's 32-dimension limit matters only in the Python bindings.
const MAX_DIMS: usize = 40;

// ---------------------------------------------------------------------------------------------
// The plan: bytes of the input that kernels and hooks read to decide how to behave.

thread_local! {
    static PLAN: RefCell<(Vec<u8>, usize)> = const { RefCell::new((Vec::new(), 0)) };
}

/// The next plan byte (0 when the plan is used up: the well-behaved choice).
fn plan() -> u8 {
    PLAN.with(|p| {
        let mut p = p.borrow_mut();
        let (bytes, at) = &mut *p;
        let b = bytes.get(*at).copied().unwrap_or(0);
        *at += 1;
        b
    })
}

fn set_plan(bytes: &[u8]) {
    PLAN.with(|p| *p.borrow_mut() = (bytes.to_vec(), 0));
}

/// A small array of the plan's making (for kernels and hooks, which have no `Unstructured`).
fn plan_array() -> HostArray {
    let ndim = usize::from(plan() % 4);
    let shape: Vec<usize> = (0..ndim).map(|_| usize::from(plan() % 4)).collect();
    let n: usize = shape.iter().product();
    let v = f64::from(plan());
    match plan() % 5 {
        0 => ArrayD::from_elem(IxDyn(&shape), v).into(),
        1 => ArrayD::from_elem(IxDyn(&shape), v as f32).into(),
        2 => ArrayD::from_elem(IxDyn(&shape), v as i64).into(),
        3 => ArrayD::from_elem(IxDyn(&shape), v as i32).into(),
        _ => ArrayD::from_elem(IxDyn(&shape), n.is_multiple_of(2)).into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Backends.

/// A backend whose tensors hold host memory and whose every transfer copies.
struct Copying;

impl Backend for Copying {
    fn to_cpu(&self, t: &Tensor, _for_write: bool) -> Result<Tensor> {
        Ok(Tensor::host(Device::CPU, (*t.to_host()?).clone()))
    }
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        Ok(Tensor::host(device, (*cpu.to_host()?).clone()))
    }
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        dst.set_data(TensorData::Host(Arc::new((*src.to_host()?).clone())));
        Ok(())
    }
}

fn hook_error(hook: &str) -> Error {
    Error::Fallback(format!("FzFaulty.{hook} failed (the fuzz plan said so)"))
}

/// A payload that is no host memory (and may or may not give a host copy).
struct Opaque(u8);

impl Payload for Opaque {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn nbytes(&self) -> usize {
        usize::from(self.0) * 1000
    }
    fn to_host(&self) -> Result<HostArray> {
        match self.0 % 3 {
            0 => Err(hook_error("payload.to_host")),
            1 => Ok(ArrayD::<f64>::zeros(IxDyn(&[usize::from(self.0 % 5)])).into()),
            _ => Ok(plan_array()),
        }
    }
    fn describe(&self) -> String {
        format!("Opaque({})", self.0)
    }
}

/// A garbage tensor: on the wrong device, without host memory, or of another shape.
fn garbage(device: Device) -> Tensor {
    match plan() % 4 {
        0 => native::tensor(plan_array()),
        1 => Tensor::foreign(Device::CPU, Arc::new(Opaque(plan()))),
        2 => Tensor::foreign(device, Arc::new(Opaque(plan()))),
        _ => Tensor::host(Device::CPU, plan_array()),
    }
}

/// A batching backend whose hooks fail or return garbage as the plan says.
struct Faulty;

impl Backend for Faulty {
    fn to_cpu(&self, t: &Tensor, _for_write: bool) -> Result<Tensor> {
        match plan() % 8 {
            0..=4 => Ok(Tensor::host(Device::CPU, (*t.to_host()?).clone())),
            5 => Err(hook_error("to_cpu")),
            _ => Ok(garbage(Device::CPU)),
        }
    }
    fn batches_transfers(&self) -> bool {
        true
    }
    fn to_cpu_many(&self, tensors: &[(&Tensor, bool)]) -> Result<Vec<Tensor>> {
        let mut out: Vec<Tensor> = tensors
            .iter()
            .map(|(t, w)| self.to_cpu(t, *w))
            .collect::<Result<_>>()?;
        match plan() % 8 {
            6 => {
                out.pop();
            }
            7 => out.push(Tensor::host(Device::CPU, plan_array())),
            _ => {}
        }
        Ok(out)
    }
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> Result<Tensor> {
        match plan() % 8 {
            0..=4 => Ok(Tensor::host(device, (*cpu.to_host()?).clone())),
            5 => Err(hook_error("from_cpu")),
            _ => Ok(garbage(device)),
        }
    }
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        match plan() % 8 {
            0..=4 => {
                dst.set_data(TensorData::Host(src.to_host()?));
                Ok(())
            }
            5 => Err(hook_error("copy_from_cpu")),
            6 => {
                // Half a write, then a failure.
                dst.set_data(TensorData::Host(Arc::new(plan_array())));
                Err(hook_error("copy_from_cpu"))
            }
            _ => {
                dst.set_data(garbage(dst.device()).data());
                Ok(())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Kernels.

/// A value of type `ty` that a kernel returns (tensors on the CPU).
fn return_value(ty: &Type, args: &[IValue]) -> IValue {
    match ty {
        Type::Tensor => {
            // Often one of the arguments' tensors (as a view or an in-place kernel returns).
            if plan().is_multiple_of(3) {
                if let Some(t) = args.iter().flat_map(IValue::tensors).next() {
                    return IValue::Tensor(t.clone());
                }
            }
            IValue::Tensor(Tensor::host(Device::CPU, plan_array()))
        }
        Type::Int | Type::SymInt => IValue::Int(i64::from(plan())),
        Type::Float | Type::SymFloat => IValue::Double(f64::from(plan()) / 3.0),
        Type::Bool | Type::SymBool => IValue::Bool(plan().is_multiple_of(2)),
        Type::Scalar => IValue::Double(1.5),
        Type::Str => IValue::Str("r".into()),
        Type::ScalarType => IValue::ScalarType(DType::F32),
        Type::Device => IValue::Device(Device::CPU),
        Type::Optional(inner) => {
            if plan().is_multiple_of(2) {
                IValue::None
            } else {
                return_value(inner, args)
            }
        }
        Type::List { elem, .. } => {
            let n = usize::from(plan() % 3);
            match &**elem {
                Type::Tensor => IValue::TensorList(
                    (0..n)
                        .map(|_| Tensor::host(Device::CPU, plan_array()))
                        .collect(),
                ),
                Type::Int | Type::SymInt => IValue::IntList((0..n as i64).collect()),
                Type::Float => IValue::DoubleList(vec![0.5; n]),
                Type::Bool => IValue::BoolList(vec![true; n]),
                other => IValue::List((0..n).map(|_| return_value(other, args)).collect()),
            }
        }
        Type::Tuple(ts) => IValue::Tuple(ts.iter().map(|t| return_value(t, args)).collect()),
        _ => IValue::None,
    }
}

/// The CPU kernel of every operator here: what it does is the plan's choice.
fn cpu_kernel(op: &OperatorHandle, _keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    let schema = op.schema()?;
    match plan() % 10 {
        // Well-behaved: checks its arity, writes its written tensor arguments, returns values
        // of the return types.
        0..=5 => {
            if stack.len() != schema.schema.arguments.len() {
                return Err(Error::Kernel {
                    context: "fuzz CPU kernel".into(),
                    message: format!(
                        "{} arguments expected, {} given",
                        schema.schema.arguments.len(),
                        stack.len()
                    ),
                });
            }
            for (a, v) in schema.schema.arguments.iter().zip(stack.iter()) {
                if a.is_write() && plan().is_multiple_of(2) {
                    for t in v.tensors() {
                        t.set_data(TensorData::Host(Arc::new(plan_array())));
                    }
                }
            }
            let args = std::mem::take(stack);
            for r in &schema.schema.returns {
                let v = return_value(&r.ty, &args);
                stack.push(v);
            }
            Ok(())
        }
        6 => Err(Error::Kernel {
            context: "fuzz CPU kernel".into(),
            message: "failed, as the plan said".into(),
        }),
        // Garbage: any number of values of any kind.
        7 => {
            stack.clear();
            for _ in 0..plan() % 4 {
                let v = match plan() % 5 {
                    0 => IValue::Int(-1),
                    1 => IValue::Tensor(garbage(Device::CPU)),
                    2 => IValue::None,
                    3 => IValue::TensorList(vec![garbage(Device::CPU)]),
                    _ => IValue::Str("garbage".into()),
                };
                stack.push(v);
            }
            Ok(())
        }
        // Forgets to take its arguments off.
        8 => Ok(()),
        // Writes every tensor it was given, read-only or not, then succeeds.
        _ => {
            for t in stack.iter().flat_map(IValue::tensors) {
                t.set_data(TensorData::Host(Arc::new(plan_array())));
            }
            stack.truncate(schema.schema.returns.len());
            Ok(())
        }
    }
}

/// The fallback of the functionality key `FzTrace`: passes the call on, or fails.
fn trace_fallback(op: &OperatorHandle, keys: DispatchKeySet, stack: &mut Stack) -> Result<()> {
    match plan() % 6 {
        0 => Err(Error::Kernel {
            context: "FzTrace".into(),
            message: "refused".into(),
        }),
        1 => call_fallback(&cpu_fallback(), op, keys, stack),
        _ => op.redispatch_boxed(keys, stack),
    }
}

// ---------------------------------------------------------------------------------------------
// The world, built once.

struct World {
    torch: Vec<OperatorHandle>,
    /// Native's kernels' operators among `torch` (so that the fuzzer reaches them often).
    native: Vec<OperatorHandle>,
    generated: Mutex<Generated>,
    copying: DispatchKey,
    faulty: DispatchKey,
    trace: DispatchKey,
    /// Kept open for the process.
    _libs: Vec<Library>,
}

struct Generated {
    lib: Library,
    by_text: HashMap<String, OperatorHandle>,
    all: Vec<OperatorHandle>,
}

const TORCH_SCHEMAS: &str = include_str!("../../python/boxfall/data/torch_schemas.txt");

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        native::install_fallback().expect("Native's fallback");
        let copying = register_backend("FzCopy", Arc::new(Copying)).expect("FzCopy");
        let faulty = register_backend("FzFaulty", Arc::new(Faulty)).expect("FzFaulty");
        let trace = register_functionality_key("FzTrace").expect("FzTrace");
        let mut fb = Library::new("_", LibraryKind::Impl).expect("fallback library");
        fb.fallback(copying, cpu_fallback())
            .expect("FzCopy fallback");
        let views = CpuFallback {
            views: ViewPolicy::Copy,
        };
        fb.fallback(faulty, views.kernel())
            .expect("FzFaulty fallback");
        fb.fallback(trace, KernelFunction::from_boxed(trace_fallback))
            .expect("FzTrace fallback");

        // PyTorch's schemas, in namespace `fz`: aten's by their own names (so that Native's
        // kernels match them), the others' prefixed by their namespace.
        let mut lib = Library::new("fz", LibraryKind::Def).expect("fz library");
        let mut torch = Vec::new();
        for line in TORCH_SCHEMAS.lines() {
            let Some((ns, rest)) = line.split_once("::") else {
                continue;
            };
            if line.starts_with('#') {
                continue;
            }
            let text = if ns == "aten" {
                format!("fz::{rest}")
            } else {
                format!("fz::{ns}_{rest}")
            };
            let Ok(op) = lib.define(&text) else {
                continue;
            };
            if lib
                .impl_kernel(
                    op.name(),
                    DispatchKey::CPU,
                    KernelFunction::from_boxed(cpu_kernel),
                    false,
                )
                .is_ok()
            {
                torch.push(op);
            }
        }
        let native_names = native::register_kernels(&mut lib).expect("Native's kernels");
        let native = torch
            .iter()
            .filter(|op| native_names.iter().any(|n| n == op.name()))
            .cloned()
            .collect();
        let generated = Generated {
            lib: Library::new("fzg", LibraryKind::Def).expect("fzg library"),
            by_text: HashMap::new(),
            all: Vec::new(),
        };
        World {
            torch,
            native,
            generated: Mutex::new(generated),
            copying,
            faulty,
            trace,
            _libs: vec![fb, lib],
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Schemas from the input, by PyTorch's grammar.

const TYPES: &[&str] = &[
    "Tensor",
    "Tensor?",
    "Tensor[]",
    "Tensor?[]",
    "Tensor(a!)",
    "Tensor(b!)",
    "Tensor(a)",
    "Tensor(a!)[]",
    "Tensor(a -> *)",
    "int",
    "int[]",
    "int[2]",
    "int?",
    "int[1]?",
    "SymInt",
    "SymInt[]",
    "float",
    "float?",
    "float[]",
    "bool",
    "bool[]",
    "bool[3]",
    "Scalar",
    "Scalar?",
    "str",
    "str?",
    "Device",
    "Device?",
    "ScalarType",
    "ScalarType?",
    "Layout?",
    "MemoryFormat?",
    "Generator?",
    "Any",
    "t",
    "Dimname",
    "Dimname[]",
    "Scalar[]",
    "Tensor[]?",
    "(Tensor, int)",
    "Dict(str, Tensor)",
];

const DEFAULTS: &[&str] = &[
    "None",
    "1",
    "-1",
    "0",
    "[]",
    "[0,1]",
    "1.5",
    "-inf",
    "nan",
    "True",
    "False",
    "\"mean\"",
    "contiguous_format",
    "long",
    "9223372036854775807",
    "[1,2]",
    "1e-05",
];

const RETURNS: &[&str] = &[
    "()",
    "Tensor",
    "Tensor(a!)",
    "Tensor(a)",
    "(Tensor, Tensor)",
    "(Tensor a, Tensor b)",
    "(Tensor(a!), Tensor(b!))",
    "Tensor[]",
    "Tensor(a!)[]",
    "int",
    "float",
    "bool",
    "Scalar",
    "str",
    "ScalarType",
    "Tensor?",
    "int[]",
    "(Tensor, int, float)",
    "...",
];

fn schema_text(u: &mut Unstructured) -> UResult<String> {
    let n = u.int_in_range(0..=7)?;
    let kw_from = u.int_in_range(0..=n + 1)?;
    let mut args = Vec::new();
    for i in 0..n {
        if i == kw_from {
            args.push("*".to_string());
        }
        let ty = u.choose(TYPES)?;
        let mut a = format!("{ty} a{i}");
        if rare(u, 4)? {
            a.push('=');
            a.push_str(u.choose(DEFAULTS)?);
        }
        args.push(a);
    }
    if rare(u, 16)? {
        args.push("...".into());
    }
    let nret = u.int_in_range(1..=3)?;
    let rets: Vec<&str> = (0..nret)
        .map(|_| u.choose(RETURNS).copied())
        .collect::<UResult<_>>()?;
    let ret = if nret == 1 {
        rets[0].to_string()
    } else {
        format!("({})", rets.join(", "))
    };
    Ok(format!("({}) -> {ret}", args.join(", ")))
}

fn generated_op(u: &mut Unstructured, w: &World) -> UResult<Option<OperatorHandle>> {
    let text = schema_text(u)?;
    let mut g = w.generated.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(op) = g.by_text.get(&text) {
        return Ok(Some(op.clone()));
    }
    if g.all.len() >= MAX_GENERATED {
        let i = u.choose_index(g.all.len())?;
        return Ok(Some(g.all[i].clone()));
    }
    let name = format!("g{}", g.all.len());
    let Ok(op) = g.lib.define(&format!("{name}{text}")) else {
        return Ok(None);
    };
    let kernel = KernelFunction::from_boxed(cpu_kernel);
    if g.lib
        .impl_kernel(&name, DispatchKey::CPU, kernel, false)
        .is_err()
    {
        return Ok(None);
    }
    g.by_text.insert(text, op.clone());
    g.all.push(op.clone());
    Ok(Some(op))
}

// ---------------------------------------------------------------------------------------------
// Values from the input.

/// True one time in `n`; false once the input is used up (`ratio` is then always true).
fn rare(u: &mut Unstructured, n: u32) -> UResult<bool> {
    Ok(!u.ratio(n - 1, n)?)
}

fn device(u: &mut Unstructured, w: &World) -> UResult<Device> {
    let index = u.int_in_range(0..=1)?;
    Ok(match u.int_in_range(0..=6)? {
        0 | 1 => Device::CPU,
        2 | 3 => Device::new(DispatchKey::NATIVE, index),
        4 => Device::new(w.copying, index),
        5 => Device::new(w.faulty, index),
        // Keys that are no backend.
        _ => Device::new(*u.choose(&[w.trace, DispatchKey::COMPOSITE_IMPLICIT])?, 0),
    })
}

fn array(u: &mut Unstructured) -> UResult<HostArray> {
    let ndim = if rare(u, 32)? {
        u.int_in_range(5..=MAX_DIMS)?
    } else {
        u.int_in_range(0..=4)?
    };
    let mut shape = Vec::with_capacity(ndim);
    let mut total = 1usize;
    for _ in 0..ndim {
        // Sizes kept small: a huge output is an allocation failure, not a finding.
        let s = if total > 64 {
            1
        } else {
            u.int_in_range(0..=4)?
        };
        total = total.saturating_mul(s.max(1));
        shape.push(s);
    }
    let n: usize = shape.iter().product();
    macro_rules! fill {
        ($t:ty, $f:expr) => {{
            let mut v: Vec<$t> = Vec::with_capacity(n);
            for _ in 0..n {
                v.push($f(u)?);
            }
            let a = ArrayD::from_shape_vec(IxDyn(&shape), v).unwrap_or_default();
            // Non-standard layouts: axes reversed or one axis flipped.
            match u.int_in_range(0..=3)? {
                0 => a.reversed_axes(),
                1 if ndim > 0 => {
                    let mut a = a;
                    a.invert_axis(ndarray::Axis(0));
                    a
                }
                _ => a,
            }
        }};
    }
    let floats = |u: &mut Unstructured| -> UResult<f64> {
        Ok(match u.int_in_range(0..=7)? {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::MIN,
            3 => -0.0,
            _ => f64::from(u.arbitrary::<i16>()?) / 7.0,
        })
    };
    let ints = |u: &mut Unstructured| -> UResult<i64> {
        Ok(match u.int_in_range(0..=5)? {
            0 => i64::MAX,
            1 => i64::MIN,
            _ => i64::from(u.arbitrary::<i8>()?),
        })
    };
    Ok(match u.int_in_range(0..=4)? {
        0 => HostArray::F64(fill!(f64, floats)),
        1 => HostArray::F32(fill!(f32, |u| floats(u).map(|f| f as f32))),
        2 => HostArray::I64(fill!(i64, ints)),
        3 => HostArray::I32(fill!(i32, |u| ints(u).map(|i| i as i32))),
        _ => HostArray::Bool(fill!(bool, |u: &mut Unstructured| u.arbitrary::<bool>())),
    })
}

fn tensor(u: &mut Unstructured, w: &World) -> UResult<Tensor> {
    let d = device(u, w)?;
    if rare(u, 16)? {
        return Ok(Tensor::foreign(d, Arc::new(Opaque(u.arbitrary()?))));
    }
    Ok(Tensor::host(d, array(u)?))
}

fn int(u: &mut Unstructured) -> UResult<i64> {
    Ok(match u.int_in_range(0..=7)? {
        0 => i64::MAX,
        1 => i64::MIN,
        2 => -1,
        3 => u.arbitrary()?,
        _ => u.int_in_range(-4..=4)?,
    })
}

fn double(u: &mut Unstructured) -> UResult<f64> {
    Ok(match u.int_in_range(0..=5)? {
        0 => f64::NAN,
        1 => f64::NEG_INFINITY,
        2 => 1e308,
        _ => f64::from(u.int_in_range(-8..=8)?) / 2.0,
    })
}

fn dtype(u: &mut Unstructured) -> UResult<DType> {
    u.choose(&[DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool])
        .copied()
}

/// Any value, of any kind.
fn any_value(u: &mut Unstructured, w: &World, depth: u32) -> UResult<IValue> {
    let n = u.int_in_range(0..=3)?;
    Ok(match u.int_in_range(0..=15)? {
        0 => IValue::None,
        1 => IValue::Bool(u.arbitrary()?),
        2 => IValue::Int(int(u)?),
        3 => IValue::Double(double(u)?),
        4 => IValue::Str(String::from_utf8_lossy(u.bytes(n)?).into()),
        5 => IValue::Device(device(u, w)?),
        6 => IValue::ScalarType(dtype(u)?),
        7 | 8 => IValue::Tensor(tensor(u, w)?),
        9 => IValue::TensorList((0..n).map(|_| tensor(u, w)).collect::<UResult<_>>()?),
        10 => IValue::OptionalTensorList(
            (0..n)
                .map(|_| {
                    Ok(if u.arbitrary()? {
                        Some(tensor(u, w)?)
                    } else {
                        None
                    })
                })
                .collect::<UResult<_>>()?,
        ),
        11 => IValue::IntList((0..n).map(|_| int(u)).collect::<UResult<_>>()?),
        12 => IValue::DoubleList((0..n).map(|_| double(u)).collect::<UResult<_>>()?),
        13 => IValue::BoolList((0..n).map(|_| u.arbitrary()).collect::<UResult<_>>()?),
        14 if depth < 2 => IValue::List(
            (0..n)
                .map(|_| any_value(u, w, depth + 1))
                .collect::<UResult<_>>()?,
        ),
        14 => IValue::Tuple(vec![]),
        _ => IValue::Object(Arc::new(u.arbitrary::<u8>()?)),
    })
}

/// A value of type `ty`, mostly; sometimes anything.
fn value_for(u: &mut Unstructured, w: &World, ty: &Type) -> UResult<IValue> {
    if rare(u, 10)? {
        return any_value(u, w, 0);
    }
    Ok(match ty {
        Type::Tensor => IValue::Tensor(tensor(u, w)?),
        Type::Int | Type::SymInt => IValue::Int(int(u)?),
        Type::Float | Type::SymFloat => IValue::Double(double(u)?),
        Type::Bool | Type::SymBool => IValue::Bool(u.arbitrary()?),
        Type::Scalar => match u.int_in_range(0..=2)? {
            0 => IValue::Int(int(u)?),
            1 => IValue::Double(double(u)?),
            _ => IValue::Bool(u.arbitrary()?),
        },
        Type::Str => IValue::Str("mean".into()),
        Type::Device => IValue::Device(device(u, w)?),
        Type::ScalarType => IValue::ScalarType(dtype(u)?),
        Type::Optional(inner) => {
            if u.arbitrary()? {
                IValue::None
            } else {
                value_for(u, w, inner)?
            }
        }
        Type::List { elem, size } => {
            let n = match size {
                Some(s) if u.ratio(3, 4)? => *s,
                _ => u.int_in_range(0..=3)?,
            };
            match &**elem {
                Type::Tensor => {
                    IValue::TensorList((0..n).map(|_| tensor(u, w)).collect::<UResult<_>>()?)
                }
                Type::Optional(t) if t.is_tensor() => IValue::OptionalTensorList(
                    (0..n)
                        .map(|_| {
                            Ok(if u.arbitrary()? {
                                Some(tensor(u, w)?)
                            } else {
                                None
                            })
                        })
                        .collect::<UResult<_>>()?,
                ),
                Type::Int | Type::SymInt => {
                    IValue::IntList((0..n).map(|_| int(u)).collect::<UResult<_>>()?)
                }
                Type::Float => {
                    IValue::DoubleList((0..n).map(|_| double(u)).collect::<UResult<_>>()?)
                }
                Type::Bool => {
                    IValue::BoolList((0..n).map(|_| u.arbitrary()).collect::<UResult<_>>()?)
                }
                other => IValue::List(
                    (0..n)
                        .map(|_| value_for(u, w, other))
                        .collect::<UResult<_>>()?,
                ),
            }
        }
        Type::Tuple(ts) => IValue::Tuple(
            ts.iter()
                .map(|t| value_for(u, w, t))
                .collect::<UResult<_>>()?,
        ),
        _ => any_value(u, w, 0)?,
    })
}

// ---------------------------------------------------------------------------------------------
// One run.

fn keys(u: &mut Unstructured, w: &World) -> UResult<DispatchKeySet> {
    let mut k = DispatchKeySet::EMPTY;
    for key in [
        DispatchKey::CPU,
        DispatchKey::NATIVE,
        DispatchKey::COMPOSITE_IMPLICIT,
        w.copying,
        w.faulty,
        w.trace,
    ] {
        if rare(u, 3)? {
            k |= key;
        }
    }
    Ok(k)
}

fn run(u: &mut Unstructured) -> UResult<()> {
    let w = world();
    let plan_len = u.int_in_range(0..=48)?;
    set_plan(u.bytes(plan_len)?);
    set_fallback_policy(*u.choose(&[
        FallbackPolicy::Allow,
        FallbackPolicy::Allow,
        FallbackPolicy::Warn,
        FallbackPolicy::Error,
    ])?);
    let op = match u.int_in_range(0..=3)? {
        0 if !w.native.is_empty() => w.native[u.choose_index(w.native.len())?].clone(),
        1 => match generated_op(u, w)? {
            Some(op) => op,
            None => return Ok(()),
        },
        _ => w.torch[u.choose_index(w.torch.len())?].clone(),
    };
    if rare(u, 8)? {
        let p = *u.choose(&[
            None,
            Some(FallbackPolicy::Allow),
            Some(FallbackPolicy::Error),
        ])?;
        set_operator_policy(&op, p);
    }
    let Ok(schema) = op.schema() else {
        return Ok(());
    };
    let args = &schema.schema.arguments;
    let len = if u.ratio(7, 8)? {
        args.len()
    } else {
        u.int_in_range(0..=8)?
    };
    let mut stack = Stack::with_capacity(len);
    for i in 0..len {
        let v = match args.get(i) {
            Some(a) => value_for(u, w, &a.ty)?,
            None => any_value(u, w, 0)?,
        };
        stack.push(v);
    }
    let _include = if rare(u, 6)? {
        Some(LocalKeysGuard::include(keys(u, w)?))
    } else {
        None
    };
    let _exclude = if rare(u, 8)? {
        Some(LocalKeysGuard::exclude(keys(u, w)?))
    } else {
        None
    };
    let result = match u.int_in_range(0..=7)? {
        0 => op.redispatch_boxed(keys(u, w)?, &mut stack),
        1 => op.call_boxed_with_keys(keys(u, w)?, &mut stack),
        2 => {
            let k = keys(u, w)?;
            let fb = if u.arbitrary()? {
                cpu_fallback()
            } else {
                CpuFallback {
                    views: ViewPolicy::Copy,
                }
                .kernel()
            };
            call_fallback(&fb, &op, k, &mut stack)
        }
        _ => op.call_boxed(&mut stack),
    };
    // Whatever came back, and whatever the error says, can be printed.
    let _ = format!("{stack:?}");
    if let Err(e) = result {
        let _ = e.to_string();
    }
    // The report walks every operator (thousands here): now and then.
    if rare(u, 256)? {
        let _ = boxfall::Dispatcher::metrics().report();
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
