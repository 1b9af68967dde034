//! `bf.Tensor`'s binary operators (`x + y`, `1 + x`, `x += y`, `x == y`, `x @ y`) straight to
//! their operators. The methods of `boxfall.array_api._array_methods` decide which operator an
//! operand goes to and call the public function, which decides again: three Python frames, two
//! `isinstance` chains and a dictionary look-up before the dispatcher, more than the
//! dispatcher and the kernel of a one-element add together. Here the operands that
//! decide the operator by their type alone (another `bf.Tensor`, a NumPy array, a plain
//! `bool`, `int` or `float`) call the operator's `OpOverload` directly, as those functions
//! would; every other operand (a NumPy scalar, a complex, a subclass of `int` or `float`, an
//! object that is no operand) takes the Python methods, which handle it their way (a 0-d
//! array, NotImplemented, ...). The results, errors and counters are the operator's, as they
//! were.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt};

use super::array_ops::BinaryOperators;
use super::convert::is_numpy_array;
use super::ops::PyOpOverload;
use super::tensor::PyTensor;
use crate::dispatcher::Dispatcher;

/// The functions of the standard with an operator method, in the order of `SLOTS`.
const FUNCTIONS: [&str; 19] = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "floor_divide",
    "remainder",
    "pow",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_left_shift",
    "bitwise_right_shift",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "matmul",
];

/// How a method calls its function.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Form {
    /// `x.__add__(y)`: `add(x, y)`.
    Forward,
    /// `x.__radd__(y)`: `add(y, x)`.
    Reflected,
    /// `x.__iadd__(y)`: `add_(x, y)`, written into `x`.
    InPlace,
}

/// The function (an index of `FUNCTIONS`) and the form of an operator method; `None` for a
/// method this module does not take.
fn method(name: &str) -> Option<(usize, Form)> {
    use Form::{Forward as F, InPlace as I, Reflected as R};
    Some(match name {
        "__add__" => (0, F),
        "__radd__" => (0, R),
        "__iadd__" => (0, I),
        "__sub__" => (1, F),
        "__rsub__" => (1, R),
        "__isub__" => (1, I),
        "__mul__" => (2, F),
        "__rmul__" => (2, R),
        "__imul__" => (2, I),
        "__truediv__" => (3, F),
        "__rtruediv__" => (3, R),
        "__itruediv__" => (3, I),
        "__floordiv__" => (4, F),
        "__rfloordiv__" => (4, R),
        "__ifloordiv__" => (4, I),
        "__mod__" => (5, F),
        "__rmod__" => (5, R),
        "__imod__" => (5, I),
        "__pow__" => (6, F),
        "__rpow__" => (6, R),
        "__ipow__" => (6, I),
        "__and__" => (7, F),
        "__rand__" => (7, R),
        "__iand__" => (7, I),
        "__or__" => (8, F),
        "__ror__" => (8, R),
        "__ior__" => (8, I),
        "__xor__" => (9, F),
        "__rxor__" => (9, R),
        "__ixor__" => (9, I),
        "__lshift__" => (10, F),
        "__rlshift__" => (10, R),
        "__ilshift__" => (10, I),
        "__rshift__" => (11, F),
        "__rrshift__" => (11, R),
        "__irshift__" => (11, I),
        "__eq__" => (12, F),
        "__ne__" => (13, F),
        "__lt__" => (14, F),
        "__le__" => (15, F),
        "__gt__" => (16, F),
        "__ge__" => (17, F),
        "__matmul__" => (18, F),
        "__rmatmul__" => (18, R),
        _ => return None,
    })
}

/// The operators a function's methods call: for `Forward`/`Reflected`, `f` (two arrays),
/// `f.Tensor_Scalar` (array, scalar) and `f.Scalar_Tensor` (scalar, array); for `InPlace`,
/// `f_` (array) and `f_.Scalar` (scalar) in `both` and `right`. A missing overload (`matmul`
/// has no scalar ones) leaves its operands to the Python methods.
struct Ops {
    both: Py<PyOpOverload>,
    right: Option<Py<PyOpOverload>>,
    left: Option<Py<PyOpOverload>>,
}

impl Ops {
    fn find(py: Python<'_>, function: &str, in_place: bool) -> Option<Ops> {
        // Importing the methods' module defines the standard's operators.
        py.import("boxfall.array_api._array_methods").ok()?;
        let op = |name: String| {
            Dispatcher::find(&format!("array_api::{name}"))
                .ok()
                .and_then(|h| PyOpOverload::new_bound(py, h).ok().map(Bound::unbind))
        };
        Some(if in_place {
            Ops {
                both: op(format!("{function}_"))?,
                right: op(format!("{function}_.Scalar")),
                left: None,
            }
        } else {
            Ops {
                both: op(function.to_string())?,
                right: op(format!("{function}.Tensor_Scalar")),
                left: op(format!("{function}.Scalar_Tensor")),
            }
        })
    }
}

/// Each function's operators, found at the first call (`None`: not defined, so the Python
/// methods serve): two slots a function, the out-of-place and the in-place operators.
static SLOTS: [PyOnceLock<Option<Ops>>; 2 * FUNCTIONS.len()] =
    [const { PyOnceLock::new() }; 2 * FUNCTIONS.len()];

fn ops(py: Python<'_>, function: usize, form: Form) -> Option<&'static Ops> {
    let in_place = form == Form::InPlace;
    let slot = SLOTS.get(2 * function + usize::from(in_place))?;
    slot.get_or_init(py, || Ops::find(py, FUNCTIONS[function], in_place))
        .as_ref()
}

/// What an operand is, as the Python methods tell it by its type (`ARRAY_TYPES`,
/// `SCALAR_TYPES`); `None` for an operand they convert first or refuse.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Operand {
    Array,
    Scalar,
}

fn operand(obj: &Bound<'_, PyAny>) -> Option<Operand> {
    if obj.is_exact_instance_of::<PyTensor>() || is_numpy_array(obj) {
        Some(Operand::Array)
    } else if obj.is_exact_instance_of::<PyFloat>() || obj.is_exact_instance_of::<PyBool>() {
        Some(Operand::Scalar)
    } else if obj.is_exact_instance_of::<PyInt>() {
        // An int past 64 bits (`uint64_array + 2**63`) is no `Scalar`: the Python methods
        // compute it as NumPy does.
        obj.extract::<i64>().is_ok().then_some(Operand::Scalar)
    } else {
        None
    }
}

/// `slf.<name>(other)` by the operator, or `None` where the Python method must serve (an
/// operand it converts or refuses, a method or operator not known here).
fn binary(
    slf: &Bound<'_, PyTensor>,
    name: &str,
    other: &Bound<'_, PyAny>,
) -> Option<PyResult<Py<PyAny>>> {
    let py = slf.py();
    let (function, form) = method(name)?;
    let kind = operand(other)?;
    let ops = ops(py, function, form)?;
    let op = match (form, kind) {
        (_, Operand::Array) => &ops.both,
        (Form::Forward | Form::InPlace, Operand::Scalar) => ops.right.as_ref()?,
        (Form::Reflected, Operand::Scalar) => ops.left.as_ref()?,
    };
    let this = slf.as_any().clone();
    let args = match form {
        Form::Reflected => [other.clone(), this],
        Form::Forward | Form::InPlace => [this, other.clone()],
    };
    Some(PyOpOverload::call_with(op.bind(py), &args, None, None).map(Bound::unbind))
}

impl BinaryOperators for PyTensor {
    #[inline]
    fn binary(
        slf: &Bound<'_, Self>,
        name: &str,
        other: &Bound<'_, PyAny>,
    ) -> Option<PyResult<Py<PyAny>>> {
        binary(slf, name, other)
    }
}
