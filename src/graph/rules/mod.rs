//! Shape rules: an operator's output dtypes and shapes from its arguments, computed without
//! running it. An operator without a rule, or whose outputs depend on its values (`nonzero`,
//! `unique_*`, a boolean mask), has none, and breaks a graph.
//!
//! The rules are those of `boxfall.array_api`'s operators, as their NumPy CPU kernels make
//! the results (type promotion included: `tests/python/test_graph_rules.py` compares every
//! rule with the eager result). One file a family: `elementwise.rs` (unary, binary, in-place,
//! `clip`, `where`), `reduce.rs` (reductions and scans), `manipulation.rs`, `linalg.rs`,
//! `creation.rs` (and `astype`), `select.rs` (sorting, searching, `take`), `index.rs` (basic indexing), `fft.rs`; `args.rs` reads
//! the stack and does the shape arithmetic they share, `promote.rs` the dtype arithmetic.

mod args;
mod creation;
mod elementwise;
mod fft;
mod index;
mod linalg;
mod manipulation;
mod promote;
mod reduce;
mod select;

use crate::ivalue::IValue;
use crate::tensor::TensorMeta;
use elementwise::{Binary as B, Unary as U};
use fft::Transform as T;
use linalg::Linalg as L;
use reduce::Reduction as R;

/// The outputs' dtypes and shapes of operator `name` (`ns::op` or `ns::op.overload`, as
/// [`OperatorHandle::name`](crate::dispatcher::OperatorHandle::name) gives it) called with
/// `stack` (its arguments in the schema's order, defaults filled), as its CPU kernel would
/// make them; `None` where no rule says (data-dependent, unknown, or arguments the kernel would
/// refuse: the eager call then reports what was wrong).
///
/// A result NumPy would make in a dtype outside the standard (`sin` of an int8 array is
/// float16) has no rule either.
///
/// ```
/// use boxfall::{IValue, Tensor};
/// use boxfall::graph::rules::output_metas;
/// let x = Tensor::from_array(ndarray::ArrayD::<f32>::zeros(vec![2, 1]));
/// let y = Tensor::from_array(ndarray::ArrayD::<f32>::zeros(vec![3]));
/// let out = output_metas("array_api::add", &[IValue::Tensor(x.clone()), IValue::Tensor(y)]).unwrap();
/// assert_eq!(out[0].to_string(), "float32[2, 3]");
/// // A Python int keeps the array's dtype; a comparison is bool.
/// let s = [IValue::Tensor(x), IValue::Int(2)];
/// assert_eq!(output_metas("array_api::multiply.Tensor_Scalar", &s).unwrap()[0].to_string(), "float32[2, 1]");
/// assert_eq!(output_metas("array_api::less.Tensor_Scalar", &s).unwrap()[0].dtype, "bool");
/// assert!(output_metas("array_api::nonzero", &[]).is_none());
/// ```
pub fn output_metas(name: &str, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let op = name.strip_prefix("array_api::")?;
    let (base, overload) = op.split_once('.').unwrap_or((op, ""));
    match base {
        // Element-wise, unary.
        "abs" => elementwise::unary(U::Abs, stack),
        "ceil" | "floor" | "trunc" => elementwise::unary(U::Rounding, stack),
        "round" => elementwise::unary(U::Round, stack),
        "bitwise_invert" => elementwise::unary(U::Invert, stack),
        "negative" | "positive" | "sign" => elementwise::unary(U::NoBool, stack),
        "conj" | "reciprocal" | "square" => elementwise::unary(U::BoolAsInt8, stack),
        "real" | "imag" => elementwise::unary(U::RealPart, stack),
        "acos" | "acosh" | "asin" | "asinh" | "atan" | "atanh" | "cos" | "cosh" | "exp"
        | "expm1" | "log" | "log1p" | "log2" | "log10" | "sin" | "sinh" | "sqrt" | "tan"
        | "tanh" => elementwise::unary(U::Inexact, stack),
        "isfinite" | "isinf" | "isnan" | "logical_not" => elementwise::unary(U::Predicate, stack),
        "signbit" => elementwise::unary(U::Signbit, stack),
        // Element-wise, binary.
        "add" | "multiply" | "maximum" | "minimum" => elementwise::binary(B::Same, overload, stack),
        "subtract" => elementwise::binary(B::Subtract, overload, stack),
        "divide" => elementwise::binary(B::Divide, overload, stack),
        "floor_divide" | "remainder" => elementwise::binary(B::Floor, overload, stack),
        "pow" => elementwise::binary(B::Pow, overload, stack),
        "bitwise_and" | "bitwise_or" | "bitwise_xor" => {
            elementwise::binary(B::Bitwise, overload, stack)
        }
        "bitwise_left_shift" | "bitwise_right_shift" => {
            elementwise::binary(B::Shift, overload, stack)
        }
        "equal" | "not_equal" | "less" | "less_equal" | "greater" | "greater_equal"
        | "logical_and" | "logical_or" | "logical_xor" => {
            elementwise::binary(B::Predicate, overload, stack)
        }
        "atan2" | "copysign" | "hypot" | "logaddexp" | "nextafter" => {
            elementwise::binary(B::Float, overload, stack)
        }
        // Element-wise, in place (the array object's `x += y`).
        "add_" | "multiply_" => elementwise::in_place(B::Same, overload, stack),
        "subtract_" => elementwise::in_place(B::Subtract, overload, stack),
        "divide_" => elementwise::in_place(B::Divide, overload, stack),
        "floor_divide_" | "remainder_" => elementwise::in_place(B::Floor, overload, stack),
        "pow_" => elementwise::in_place(B::Pow, overload, stack),
        "bitwise_and_" | "bitwise_or_" | "bitwise_xor_" => {
            elementwise::in_place(B::Bitwise, overload, stack)
        }
        "bitwise_left_shift_" | "bitwise_right_shift_" => {
            elementwise::in_place(B::Shift, overload, stack)
        }
        "clip" => elementwise::clip(overload, stack),
        "where" => elementwise::where_(overload, stack),
        // Reductions and scans.
        "sum" | "prod" => reduce::reduction(R::Accumulate, stack),
        "mean" => reduce::reduction(R::Mean, stack),
        "max" | "min" => reduce::reduction(R::Extreme, stack),
        "std" | "var" => reduce::reduction(R::Spread, stack),
        "all" | "any" => reduce::reduction(R::Truth, stack),
        "count_nonzero" => reduce::reduction(R::Count, stack),
        "argmax" | "argmin" => reduce::arg_extreme(stack),
        "cumulative_sum" | "cumulative_prod" => reduce::cumulative(stack),
        "diff" => reduce::diff(stack),
        // Linear algebra.
        "matmul" => linalg::matmul(stack),
        "tensordot" => linalg::tensordot(overload, stack),
        "vecdot" => linalg::vecdot(stack),
        "matrix_transpose" => manipulation::matrix_transpose(stack),
        "linalg_cholesky" | "linalg_inv" => linalg::decomposition(L::Square, stack),
        "linalg_det" => linalg::decomposition(L::Det, stack),
        "linalg_slogdet" => linalg::decomposition(L::Slogdet, stack),
        "linalg_eigh" => linalg::decomposition(L::Eigh, stack),
        "linalg_eigvalsh" => linalg::decomposition(L::Eigvalsh, stack),
        "linalg_svd" => linalg::decomposition(L::Svd, stack),
        "linalg_svdvals" => linalg::decomposition(L::Svdvals, stack),
        "linalg_qr" => linalg::decomposition(L::Qr, stack),
        "linalg_pinv" if overload.is_empty() => linalg::decomposition(L::Pinv, stack),
        "linalg_pinv" => linalg::pinv_tensor(stack),
        "linalg_matrix_rank" if overload.is_empty() => linalg::decomposition(L::Rank, stack),
        "linalg_matrix_rank" => linalg::rank_tensor(stack),
        "linalg_solve" => linalg::solve(stack),
        "linalg_matrix_power" => linalg::matrix_power(stack),
        "linalg_diagonal" => linalg::diagonal(stack),
        "linalg_trace" => linalg::trace(stack),
        "linalg_outer" => linalg::outer(stack),
        "linalg_cross" => linalg::cross(stack),
        "linalg_matrix_norm" => linalg::matrix_norm(overload, stack),
        "linalg_vector_norm" => linalg::vector_norm(stack),
        // Manipulation.
        "broadcast_to" => manipulation::broadcast_to(stack),
        "broadcast_arrays" => manipulation::broadcast_arrays(stack),
        "concat" => manipulation::concat(stack),
        "stack" => manipulation::stack(stack),
        "unstack" => manipulation::unstack(stack),
        "expand_dims" => manipulation::expand_dims(stack),
        "squeeze" => manipulation::squeeze(stack),
        "permute_dims" => manipulation::permute_dims(stack),
        "moveaxis" => manipulation::moveaxis(stack),
        "reshape" => manipulation::reshape(stack),
        "tile" => manipulation::tile(stack),
        "repeat" if overload.is_empty() => manipulation::repeat(stack),
        "flip" => manipulation::same_with_axes(stack),
        // The fft extension.
        "fft_fftshift" | "fft_ifftshift" => manipulation::fftshift(stack),
        "fft_fft" | "fft_ifft" => fft::one(T::Complex, stack),
        "fft_rfft" | "fft_ihfft" => fft::one(T::RealToComplex, stack),
        "fft_irfft" | "fft_hfft" => fft::one(T::ComplexToReal, stack),
        "fft_fftn" | "fft_ifftn" => fft::many(T::Complex, stack),
        "fft_rfftn" => fft::many(T::RealToComplex, stack),
        "fft_irfftn" => fft::many(T::ComplexToReal, stack),
        "fft_fftfreq" => fft::freq(false, stack),
        "fft_rfftfreq" => fft::freq(true, stack),
        "roll" => manipulation::roll(stack),
        "tril" | "triu" => manipulation::triangle(stack),
        "meshgrid" => manipulation::meshgrid(stack),
        // Creation and conversion.
        "zeros" | "ones" | "empty" => creation::filled(stack),
        "full" => creation::full(stack),
        "zeros_like" | "ones_like" | "empty_like" => creation::like(stack),
        "full_like" => creation::full_like(stack),
        "arange" => creation::arange(stack),
        "linspace" => creation::linspace(stack),
        "eye" => creation::eye(stack),
        "asarray" => creation::asarray(stack),
        "astype" => creation::astype(stack),
        // Sorting, searching, indexing by arrays.
        "sort" => select::sort(false, stack),
        "argsort" => select::sort(true, stack),
        "searchsorted" => select::searchsorted(stack),
        "take" => select::take(stack),
        "take_along_axis" => select::take_along_axis(stack),
        // Basic indexing (a key of ints, slices, None and `...`).
        "getitem" => index::getitem(stack),
        "setitem_functional" => index::setitem_functional(overload, stack),
        // Graph mode's reads and writes of views (`graph/views.rs`).
        "_strided_view" => index::strided_view(stack),
        "_strided_view_write" => index::strided_view_write(stack),
        _ => None,
    }
}
