//! Python values <-> `IValue`s: binding a call's arguments to a schema, defaults, and returns.
//! The binding rules: a Tensor takes an ndarray or a `bf.Tensor`; int takes int and NumPy
//! integers, float takes int, float and NumPy floating (neither takes bool); bool takes bool and
//! `np.bool_`; Scalar takes int, float or bool.

use numpy::PyUntypedArray;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::ffi::KnownType;
use super::tensor::{cpu_tensor_to_numpy, kernel_array, numpy_tensor, wrap, PyTensor};
use crate::dispatcher::OpSchema;
use crate::ivalue::{IValue, Stack};
use crate::key::DispatchKey;
use crate::schema::{Argument, Literal, Type};
use crate::tensor::{DType, Device, Tensor};

/// The Python objects that went into a call, by identity, with the tensors they became: a
/// returned tensor that is one of them comes back as that same object. The first few live
/// inline (most calls pass one to three tensors), so a call allocates nothing for them.
#[derive(Default)]
pub struct Passed {
    inline: [Option<(usize, Tensor, Py<PyAny>)>; PASSED_INLINE],
    more: Vec<(usize, Tensor, Py<PyAny>)>,
    /// Nothing is noted any more: the last value of a call is being converted, and no later
    /// one can be the same object.
    sealed: bool,
}

const PASSED_INLINE: usize = 4;

impl Passed {
    fn items(&self) -> impl Iterator<Item = &(usize, Tensor, Py<PyAny>)> {
        self.inline
            .iter()
            .map_while(Option::as_ref)
            .chain(&self.more)
    }

    /// Remembers that `obj` stands for `t`.
    pub fn note(&mut self, obj: &Bound<'_, PyAny>, t: &Tensor) {
        if self.sealed {
            return;
        }
        let item = (obj.as_ptr() as usize, t.clone(), obj.clone().unbind());
        match self.inline.iter_mut().find(|s| s.is_none()) {
            Some(slot) => *slot = Some(item),
            None => self.more.push(item),
        }
    }

    /// Stops noting (see `sealed`); lookups still find what was noted.
    pub fn seal(&mut self) {
        self.sealed = true;
    }

    /// The object that became `t`.
    pub fn object_for<'py>(&self, py: Python<'py>, t: &Tensor) -> Option<Bound<'py, PyAny>> {
        self.items()
            .find(|(_, x, _)| x.same(t))
            .map(|(_, _, o)| o.bind(py).clone())
    }

    /// The tensor an object became.
    pub fn tensor_for(&self, obj: &Bound<'_, PyAny>) -> Option<Tensor> {
        let p = obj.as_ptr() as usize;
        self.items()
            .find(|(q, _, _)| *q == p)
            .map(|(_, t, _)| t.clone())
    }
}

pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// NumPy's `ndarray` class.
static NDARRAY: KnownType = KnownType::new(<PyUntypedArray as pyo3::PyTypeInfo>::type_object_raw);

/// Whether `obj`'s type is NumPy's `ndarray` itself (a subclass is not: `is_numpy_array`
/// tells those).
#[inline(always)]
pub(super) fn is_exact_ndarray(obj: &Bound<'_, PyAny>) -> bool {
    NDARRAY.is_type_of(obj)
}

/// Whether `obj` is a NumPy array (of `ndarray` or a subclass). A plain `ndarray`, nearly
/// every array a call sees, is told by its type pointer alone: the general check asks NumPy's
/// API table for the type on each call, a third of a fast-path argument's cost.
pub(super) fn is_numpy_array(obj: &Bound<'_, PyAny>) -> bool {
    is_exact_ndarray(obj) || obj.cast::<PyUntypedArray>().is_ok()
}

fn numpy_kind(obj: &Bound<'_, PyAny>) -> Option<char> {
    // NumPy scalars (np.int64(3), np.float32(1.5), np.bool_(True)) carry dtype.kind.
    let ty = obj.get_type();
    let module = ty.module().ok()?;
    if module.to_str().ok()? != "numpy" {
        return None;
    }
    let kind: String = obj
        .getattr("dtype")
        .ok()?
        .getattr("kind")
        .ok()?
        .extract()
        .ok()?;
    kind.chars().next()
}

/// A tensor argument: a NumPy array (kept as the object itself) or a `bf.Tensor`.
pub fn to_tensor(obj: &Bound<'_, PyAny>, passed: &mut Passed) -> Result<Tensor, String> {
    if let Some(t) = passed.tensor_for(obj) {
        return Ok(t);
    }
    let t = if let Ok(t) = obj.cast::<PyTensor>() {
        t.get().inner.clone()
    } else if is_numpy_array(obj) {
        numpy_tensor(obj)
    } else if numpy_kind(obj).is_some() {
        // A NumPy scalar (`np.float32(1.5)`, what indexing a NumPy array by integers gives) is
        // a 0-d array, as NumPy's own functions take it. Only reached when the argument is no
        // array, so the usual call pays nothing for it; not noted: a returned tensor is then
        // the 0-d array, never the (immutable) scalar.
        let array = obj
            .py()
            .import("numpy")
            .and_then(|np| np.getattr("asarray")?.call1((obj,)))
            .map_err(|e| e.to_string())?;
        return Ok(numpy_tensor(&array));
    } else {
        return Err(format!(
            "expected a Tensor (a NumPy array or a bf.Tensor), got {}",
            type_name(obj)
        ));
    };
    passed.note(obj, &t);
    Ok(t)
}

fn to_int(obj: &Bound<'_, PyAny>) -> Result<i64, String> {
    if obj.is_instance_of::<PyBool>() {
        return Err("expected int, got bool".into());
    }
    if obj.is_instance_of::<PyInt>() || numpy_kind(obj).is_some_and(|k| k == 'i' || k == 'u') {
        return obj
            .extract::<i64>()
            .map_err(|_| "the int does not fit in 64 bits".to_string());
    }
    Err(format!("expected int, got {}", type_name(obj)))
}

fn to_float(obj: &Bound<'_, PyAny>) -> Result<f64, String> {
    if obj.is_instance_of::<PyBool>() {
        return Err("expected float, got bool".into());
    }
    if obj.is_instance_of::<PyFloat>()
        || obj.is_instance_of::<PyInt>()
        || numpy_kind(obj).is_some_and(|k| k == 'f')
    {
        return obj.extract::<f64>().map_err(|e| e.to_string());
    }
    Err(format!("expected float, got {}", type_name(obj)))
}

fn to_bool(obj: &Bound<'_, PyAny>) -> Result<bool, String> {
    if obj.is_instance_of::<PyBool>() || numpy_kind(obj) == Some('b') {
        return obj.is_truthy().map_err(|e| e.to_string());
    }
    Err(format!("expected bool, got {}", type_name(obj)))
}

fn to_dtype(obj: &Bound<'_, PyAny>) -> Result<DType, String> {
    let name: String = obj
        .py()
        .import("numpy")
        .and_then(|np| {
            np.getattr("dtype")?
                .call1((obj,))?
                .getattr("name")?
                .extract()
        })
        .map_err(|_| format!("expected a dtype, got {}", type_name(obj)))?;
    DType::from_name(&name).ok_or_else(|| format!("dtype {name} is not supported"))
}

/// The items of a list or tuple; None for anything else (the caller says what it expected
/// only then: a message made on every call cost a setitem's key a tenth of its binding).
fn items<'py>(obj: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if let Ok(l) = obj.cast::<PyList>() {
        return Some(l.iter().collect());
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return Some(t.iter().collect());
    }
    None
}

fn not_a_sequence(obj: &Bound<'_, PyAny>, what: impl std::fmt::Display) -> String {
    format!("expected {what} (a list or tuple), got {}", type_name(obj))
}

/// One argument by its schema type.
pub fn to_ivalue(obj: &Bound<'_, PyAny>, ty: &Type, passed: &mut Passed) -> Result<IValue, String> {
    Ok(match ty {
        Type::Tensor => IValue::Tensor(to_tensor(obj, passed)?),
        Type::Optional(inner) => {
            if obj.is_none() {
                IValue::None
            } else {
                to_ivalue(obj, inner, passed)?
            }
        }
        Type::Int | Type::SymInt => IValue::Int(to_int(obj)?),
        Type::Float | Type::SymFloat => IValue::Double(to_float(obj)?),
        Type::Bool | Type::SymBool => IValue::Bool(to_bool(obj)?),
        Type::Scalar => {
            // Python's own scalars first: NumPy's kind is read (a look-up of the type's module)
            // only for an object that is none of them.
            if obj.is_instance_of::<PyBool>() {
                IValue::Bool(to_bool(obj)?)
            } else if obj.is_instance_of::<PyInt>() {
                IValue::Int(to_int(obj)?)
            } else if obj.is_instance_of::<PyFloat>() {
                IValue::Double(to_float(obj)?)
            } else {
                match numpy_kind(obj) {
                    Some('b') => IValue::Bool(to_bool(obj)?),
                    Some('i' | 'u') => IValue::Int(to_int(obj)?),
                    Some('f') => IValue::Double(to_float(obj)?),
                    _ => {
                        return Err(format!(
                            "expected a Scalar (int, float or bool), got {}",
                            type_name(obj)
                        ))
                    }
                }
            }
        }
        Type::Str => {
            let s = obj
                .cast::<PyString>()
                .map_err(|_| format!("expected str, got {}", type_name(obj)))?;
            IValue::Str(s.to_str().map_err(|e| e.to_string())?.into())
        }
        Type::Device => {
            let s: String = obj
                .extract()
                .map_err(|_| format!("expected a device string, got {}", type_name(obj)))?;
            IValue::Device(Device::parse(&s).map_err(|e| e.to_string())?)
        }
        Type::ScalarType => IValue::ScalarType(to_dtype(obj)?),
        Type::List { elem, size } => {
            // An int[N] argument also takes one int, repeated N times (as PyTorch does).
            if let (Some(n), Type::Int | Type::SymInt) = (size, &**elem) {
                match to_int(obj) {
                    Ok(i) => return Ok(IValue::IntList(vec![i; *n])),
                    // An int too large is no list either: say what is wrong with it.
                    Err(_) if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() => {
                        return Err(format!(
                            "the int {obj} fits no index: {ty} takes ints of 64 bits"
                        ));
                    }
                    Err(_) => {}
                }
            }
            // As in PyTorch, `[N]` only says how a single int broadcasts; a list may be longer
            // (`int[1] dim` takes `[0, 2]`).
            let xs = items(obj).ok_or_else(|| not_a_sequence(obj, ty))?;
            match &**elem {
                Type::Tensor => IValue::TensorList(
                    xs.iter()
                        .map(|x| to_tensor(x, passed))
                        .collect::<Result<_, _>>()?,
                ),
                Type::Optional(t) if t.is_tensor() => IValue::OptionalTensorList(
                    xs.iter()
                        .map(|x| {
                            if x.is_none() {
                                Ok(None)
                            } else {
                                to_tensor(x, passed).map(Some)
                            }
                        })
                        .collect::<Result<_, _>>()?,
                ),
                Type::Int | Type::SymInt => {
                    IValue::IntList(xs.iter().map(to_int).collect::<Result<_, _>>()?)
                }
                Type::Float => {
                    IValue::DoubleList(xs.iter().map(to_float).collect::<Result<_, _>>()?)
                }
                Type::Bool => IValue::BoolList(xs.iter().map(to_bool).collect::<Result<_, _>>()?),
                other => IValue::List(
                    xs.iter()
                        .map(|x| to_ivalue(x, other, passed))
                        .collect::<Result<_, _>>()?,
                ),
            }
        }
        Type::Tuple(tys) => {
            let xs = items(obj).ok_or_else(|| not_a_sequence(obj, "a tuple"))?;
            if xs.len() != tys.len() {
                return Err(format!(
                    "expected a tuple of {}, got {}",
                    tys.len(),
                    xs.len()
                ));
            }
            IValue::Tuple(
                xs.iter()
                    .zip(tys)
                    .map(|(x, t)| to_ivalue(x, t, passed))
                    .collect::<Result<_, _>>()?,
            )
        }
        _ => generic(obj, passed),
    })
}

/// Containers nested deeper than this inside a value of open type are passed on as the
/// Python object itself: converting a list that contains itself (`l.append(l)`) would recurse
/// until the stack overflows. The schema parser's limit on nesting is the same.
const MAX_GENERIC_DEPTH: usize = 64;

/// A value whose type the schema leaves open (`Any`, a type variable, a boxed stack slot).
pub fn generic(obj: &Bound<'_, PyAny>, passed: &mut Passed) -> IValue {
    generic_at(obj, passed, 0)
}

fn generic_at(obj: &Bound<'_, PyAny>, passed: &mut Passed, depth: usize) -> IValue {
    if obj.is_none() {
        IValue::None
    } else if obj.is_instance_of::<PyBool>() {
        IValue::Bool(obj.is_truthy().unwrap_or(false))
    } else if let (true, Ok(i)) = (obj.is_instance_of::<PyInt>(), obj.extract::<i64>()) {
        IValue::Int(i)
    } else if let (true, Ok(f)) = (obj.is_instance_of::<PyFloat>(), obj.extract::<f64>()) {
        IValue::Double(f)
    } else if let Ok(s) = obj.cast::<PyString>() {
        IValue::Str(s.to_string().into())
    } else if obj.cast::<PyTensor>().is_ok() || is_numpy_array(obj) {
        to_tensor(obj, passed).map_or(IValue::None, IValue::Tensor)
    } else if let Some(xs) = (depth < MAX_GENERIC_DEPTH).then(|| items(obj)).flatten() {
        let vals: Vec<IValue> = xs
            .iter()
            .map(|x| generic_at(x, passed, depth + 1))
            .collect();
        let all_tensors = !vals.is_empty() && vals.iter().all(|v| matches!(v, IValue::Tensor(_)));
        if all_tensors {
            IValue::TensorList(
                vals.into_iter()
                    .filter_map(|v| match v {
                        IValue::Tensor(t) => Some(t),
                        _ => None,
                    })
                    .collect(),
            )
        } else if obj.is_instance_of::<PyTuple>() {
            IValue::Tuple(vals)
        } else {
            IValue::List(vals)
        }
    } else {
        IValue::Object(std::sync::Arc::new(obj.clone().unbind()))
    }
}

/// A schema default as a value of the argument's type.
pub fn default_ivalue(lit: &Literal, ty: &Type) -> IValue {
    let inner = match ty {
        Type::Optional(t) => &**t,
        t => t,
    };
    match (lit, inner) {
        (Literal::None, _) => IValue::None,
        (Literal::Bool(b), _) => IValue::Bool(*b),
        (Literal::Int(i), Type::Float | Type::SymFloat) => IValue::Double(*i as f64),
        (Literal::Int(i), _) => IValue::Int(*i),
        (Literal::Float(f), _) => IValue::Double(*f),
        (Literal::Str(s), Type::Device) => Device::parse(s)
            .map(IValue::Device)
            .unwrap_or_else(|_| IValue::Str(s.as_str().into())),
        (Literal::Str(s), _) => IValue::Str(s.as_str().into()),
        (Literal::List(xs), Type::List { elem, .. }) => match &**elem {
            Type::Int | Type::SymInt => IValue::IntList(
                xs.iter()
                    .filter_map(|x| match x {
                        Literal::Int(i) => Some(*i),
                        _ => None,
                    })
                    .collect(),
            ),
            Type::Float => IValue::DoubleList(
                xs.iter()
                    .filter_map(|x| match x {
                        Literal::Float(f) => Some(*f),
                        Literal::Int(i) => Some(*i as f64),
                        _ => None,
                    })
                    .collect(),
            ),
            Type::Bool => IValue::BoolList(
                xs.iter()
                    .filter_map(|x| match x {
                        Literal::Bool(b) => Some(*b),
                        _ => None,
                    })
                    .collect(),
            ),
            Type::Tensor => IValue::TensorList(vec![]),
            e => IValue::List(xs.iter().map(|x| default_ivalue(x, e)).collect()),
        },
        (Literal::List(xs), _) => {
            IValue::List(xs.iter().map(|x| default_ivalue(x, inner)).collect())
        }
    }
}

/// Binds positional and keyword arguments to the schema: every argument, defaults filled.
pub fn bind(
    schema: &OpSchema,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
    passed: &mut Passed,
) -> Result<Stack, String> {
    let params: &[Argument] = &schema.schema.arguments;
    let positional = params.iter().take_while(|a| !a.kwarg_only).count();
    if args.len() > positional {
        let extra = if positional < params.len() {
            format!(
                " ('{}' and after are keyword-only)",
                params[positional].name
            )
        } else {
            String::new()
        };
        return Err(format!(
            "takes {positional} positional argument{} but {} were given{extra}",
            if positional == 1 { "" } else { "s" },
            args.len()
        ));
    }
    // The keywords, read in one pass over the dict into their parameters' places: looking
    // each parameter up by name made a Python string of it at every call (a tenth of a
    // recorded `sum(x, axis=1)`).
    let mut by_name: Vec<Option<Bound<'_, PyAny>>> = Vec::new();
    if let Some(kw) = kwargs.filter(|kw| !kw.is_empty()) {
        by_name.resize(params.len(), None);
        for (k, v) in kw.iter() {
            let k = k
                .cast::<PyString>()
                .map_err(|_| "keywords must be strings".to_string())?;
            let k = k.to_cow().map_err(|e| e.to_string())?;
            match params.iter().position(|a| a.name == *k) {
                None => return Err(format!("got an unexpected keyword argument '{k}'")),
                Some(i) if i < args.len() => {
                    return Err(format!("got multiple values for argument '{k}'"))
                }
                Some(i) => by_name[i] = Some(v),
            }
        }
    }
    let mut stack = Vec::with_capacity(params.len());
    for (i, p) in params.iter().enumerate() {
        let given = if i < args.len() {
            Some(args.get_item(i).map_err(|e| e.to_string())?)
        } else {
            by_name.get_mut(i).and_then(Option::take)
        };
        let v = match (given, &p.default) {
            (Some(obj), _) => to_ivalue(&obj, &p.ty, passed)
                .map_err(|m| format!("argument '{}' ({}): {m}", p.name, p.type_str()))?,
            (None, Some(d)) => default_ivalue(&d.value, &p.ty),
            (None, None) => {
                return Err(format!(
                    "missing required argument '{}' ({})",
                    p.name,
                    p.type_str()
                ))
            }
        };
        stack.push(v);
    }
    Ok(stack)
}

/// How tensors become Python objects.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TensorStyle {
    /// For a caller: device tensors as `bf.Tensor`, CPU ones as NumPy (copies of host memory).
    Caller,
    /// For a kernel: CPU tensors as NumPy, host memory lent read-only (or copied if written).
    Kernel { writable: bool },
}

/// A tensor as a Python object; inputs come back as the very objects that were passed.
pub fn tensor_to_py<'py>(
    py: Python<'py>,
    t: &Tensor,
    passed: &Passed,
    style: TensorStyle,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(o) = passed.object_for(py, t) {
        return Ok(o);
    }
    if t.key() == DispatchKey::CPU {
        return match style {
            TensorStyle::Caller => cpu_tensor_to_numpy(py, t, true),
            TensorStyle::Kernel { writable } => kernel_array(py, t, writable),
        };
    }
    wrap(py, t.clone())
}

/// A value as a Python object.
pub fn to_py<'py>(
    py: Python<'py>,
    v: &IValue,
    passed: &Passed,
    style: TensorStyle,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        IValue::None => py.None().into_bound(py),
        IValue::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        IValue::Int(i) => i.into_pyobject(py)?.into_any(),
        IValue::Double(d) => d.into_pyobject(py)?.into_any(),
        IValue::Str(s) => PyString::new(py, s).into_any(),
        IValue::Device(d) => {
            if d.key == DispatchKey::CPU {
                PyString::new(py, "cpu").into_any()
            } else {
                PyString::new(py, &d.to_string()).into_any()
            }
        }
        IValue::ScalarType(d) => super::tensor::numpy_dtype(py, d.name())?,
        IValue::Tensor(t) => tensor_to_py(py, t, passed, style)?,
        IValue::TensorList(ts) => PyList::new(
            py,
            ts.iter()
                .map(|t| tensor_to_py(py, t, passed, style))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
        IValue::OptionalTensorList(ts) => PyList::new(
            py,
            ts.iter()
                .map(|t| match t {
                    Some(t) => tensor_to_py(py, t, passed, style),
                    None => Ok(py.None().into_bound(py)),
                })
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
        IValue::IntList(v) => PyList::new(py, v)?.into_any(),
        IValue::DoubleList(v) => PyList::new(py, v)?.into_any(),
        IValue::BoolList(v) => PyList::new(py, v)?.into_any(),
        IValue::List(v) => PyList::new(
            py,
            v.iter()
                .map(|x| to_py(py, x, passed, style))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
        IValue::Tuple(v) => PyTuple::new(
            py,
            v.iter()
                .map(|x| to_py(py, x, passed, style))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
        IValue::Object(o) => match o.downcast_ref::<Py<PyAny>>() {
            Some(p) => p.bind(py).clone(),
            None => py.None().into_bound(py),
        },
    })
}

/// The returns as a caller sees them: None for `()`, one value, or a tuple.
pub fn returns_to_py<'py>(
    py: Python<'py>,
    stack: &Stack,
    passed: &Passed,
) -> PyResult<Bound<'py, PyAny>> {
    match stack.len() {
        0 => Ok(py.None().into_bound(py)),
        1 => to_py(py, &stack[0], passed, TensorStyle::Caller),
        _ => Ok(PyTuple::new(
            py,
            stack
                .iter()
                .map(|v| to_py(py, v, passed, TensorStyle::Caller))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any()),
    }
}
