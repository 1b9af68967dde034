//! The table of Native's kernels for the array API's operators (`boxfall.array_api`, the
//! `array_api` namespace): the schemas' names and argument types, as `register_kernels` matches
//! them, beside the element-wise (`ewise`) and reduction (`reduce`) kernels.

use super::ewise::{self, ADD, DIV, EQ, GE, GT, LE, LT, MUL, NE, SUB};
use super::ewise::{SCALAR_TENSOR, TENSORS, TENSOR_SCALAR};
use super::reduce::{self, MAX, MEAN, MIN, PROD, SUM};
use super::support::NativeKernel;

/// The three overloads of a binary function of the standard.
macro_rules! binary {
    ($name:literal, $op:ident) => {
        [
            ($name, TT, ewise::kernel::<$op, TENSORS> as NativeKernel),
            (
                concat!($name, ".Tensor_Scalar"),
                TS,
                ewise::kernel::<$op, TENSOR_SCALAR>,
            ),
            (
                concat!($name, ".Scalar_Tensor"),
                ST,
                ewise::kernel::<$op, SCALAR_TENSOR>,
            ),
        ]
    };
}

const TT: &[&str] = &["Tensor", "Tensor"];
const TS: &[&str] = &["Tensor", "Scalar"];
const ST: &[&str] = &["Scalar", "Tensor"];

type Row = (&'static str, &'static [&'static str], NativeKernel);

const BINARY: [[Row; 3]; 10] = [
    binary!("add", ADD),
    binary!("subtract", SUB),
    binary!("multiply", MUL),
    binary!("divide", DIV),
    binary!("equal", EQ),
    binary!("not_equal", NE),
    binary!("less", LT),
    binary!("less_equal", LE),
    binary!("greater", GT),
    binary!("greater_equal", GE),
];

const WITH_DTYPE: &[&str] = &["Tensor", "int[1]?", "str?", "bool"];
const WITHOUT_DTYPE: &[&str] = &["Tensor", "int[1]?", "bool"];

const REDUCTIONS: [Row; 5] = [
    ("sum", WITH_DTYPE, reduce::kernel::<SUM>),
    ("prod", WITH_DTYPE, reduce::kernel::<PROD>),
    ("mean", WITHOUT_DTYPE, reduce::kernel::<MEAN>),
    ("max", WITHOUT_DTYPE, reduce::kernel::<MAX>),
    ("min", WITHOUT_DTYPE, reduce::kernel::<MIN>),
];

/// The typed entry of the two-array kernel of the function `name` (`add`, ...), if it has one.
pub(super) fn typed(name: &str) -> Option<super::NativeTensors> {
    let f = match name {
        "add" => ewise::typed_tensors::<ADD>,
        "subtract" => ewise::typed_tensors::<SUB>,
        "multiply" => ewise::typed_tensors::<MUL>,
        "divide" => ewise::typed_tensors::<DIV>,
        "equal" => ewise::typed_tensors::<EQ>,
        "not_equal" => ewise::typed_tensors::<NE>,
        "less" => ewise::typed_tensors::<LT>,
        "less_equal" => ewise::typed_tensors::<LE>,
        "greater" => ewise::typed_tensors::<GT>,
        "greater_equal" => ewise::typed_tensors::<GE>,
        _ => return None,
    };
    Some(super::NativeTensors(f))
}

/// Every row: the binary functions' overloads, then the reductions.
pub(super) fn rows() -> impl Iterator<Item = &'static Row> {
    BINARY.iter().flatten().chain(REDUCTIONS.iter())
}
