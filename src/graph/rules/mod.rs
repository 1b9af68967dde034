//! Shape rules: an operator's output dtypes and shapes from its arguments, computed without
//! running it. A rule is registered per operator (`registry.rs`: it hangs off the operator's
//! entry, as its kernels do, so a recorded call matches no name); an operator without one, or
//! whose outputs depend on its values (`nonzero`, `unique_*`, a boolean mask), breaks a graph.
//!
//! The rest is the array API's table, registered through the same form
//! (`Library::register_array_api_shape_rules`): the rules of `boxfall.array_api`'s operators,
//! as their NumPy CPU kernels make the results (type promotion included:
//! `tests/python/test_graph_rules.py` compares every rule with the eager result). One file a
//! family: `elementwise.rs` (unary, binary, in-place, `clip`, `where`), `reduce.rs`
//! (reductions and scans), `manipulation.rs`, `linalg.rs`, `creation.rs` (and `astype`),
//! `select.rs` (sorting, searching, `take`), `index.rs` (basic indexing), `fft.rs`; `args.rs`
//! reads the stack and does the shape arithmetic they share, `promote.rs` the dtype arithmetic.

mod args;
mod creation;
mod elementwise;
mod fft;
mod index;
mod linalg;
mod manipulation;
mod promote;
mod reduce;
mod registry;
mod select;

use std::sync::Arc;

use crate::ivalue::IValue;
use crate::kernel::OperatorHandle;
use crate::tensor::TensorMeta;
use elementwise::{Binary as B, Unary as U};
use fft::Transform as T;
use linalg::Linalg as L;
use reduce::Reduction as R;
pub(crate) use registry::{checked, op_rule};
pub use registry::{
    has_shape_rule, refusal, refuse, register_shape_rule, shape_rule_metas, ShapeRule,
    ShapeRuleRegistration,
};

/// The outputs' dtypes and shapes that the array API's rule of operator `name` (`ns::op` or
/// `ns::op.overload`, as [`OperatorHandle::name`](crate::dispatcher::OperatorHandle::name)
/// gives it; the table's, registered or not: a recorded call uses its operator's registered
/// rule, [`shape_rule_metas`]) gives for
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
    let (rule, overload) = rule_of(name)?;
    rule(overload, stack)
}

/// The array API's rule of operator `name` (`ns::op` or `ns::op.overload`), as
/// [`Library::register_array_api_shape_rules`](crate::Library::register_array_api_shape_rules)
/// registers it: `None` where the table has none.
///
/// ```
/// assert!(boxfall::graph::rules::array_api_shape_rule("array_api::add.Tensor_Scalar").is_some_and(|r| r.scalar_inputs()));
/// assert!(boxfall::graph::rules::array_api_shape_rule("array_api::nonzero").is_none());
/// ```
pub fn array_api_shape_rule(name: &str) -> Option<Arc<dyn ShapeRule>> {
    let (rule, overload) = rule_of(name)?;
    Some(Arc::new(ArrayApiRule {
        rule,
        overload: overload.into(),
        scalar_inputs: name.ends_with(".Tensor_Scalar") || name.ends_with(".Scalar_Tensor"),
    }))
}

/// A rule of the array API's table (`rule_of`): its function and the overload's
/// name it is given.
struct ArrayApiRule {
    rule: Rule,
    overload: Box<str>,
    scalar_inputs: bool,
}

impl ShapeRule for ArrayApiRule {
    fn metas(
        &self,
        _: &OperatorHandle,
        stack: &[IValue],
    ) -> crate::Result<Option<Vec<TensorMeta>>> {
        Ok((self.rule)(&self.overload, stack))
    }

    fn scalar_inputs(&self) -> bool {
        self.scalar_inputs
    }
}

/// A shape rule: the outputs of an operator from its overload's name (`""` for none) and its
/// arguments, as [`output_metas`] gives them.
pub(crate) type Rule = fn(&str, &[IValue]) -> Option<Vec<TensorMeta>>;

/// The rule of operator `name` and its overload's name, from the array API's table: read once
/// per operator, when its rule is registered, never by a recorded call.
fn rule_of(name: &str) -> Option<(Rule, &str)> {
    let op = name.strip_prefix("array_api::")?;
    let (base, overload) = op.split_once('.').unwrap_or((op, ""));
    let rule: Rule = match base {
        // Element-wise, unary.
        "abs" => |_, s| elementwise::unary(U::Abs, s),
        "ceil" | "floor" | "trunc" => |_, s| elementwise::unary(U::Rounding, s),
        "round" => |_, s| elementwise::unary(U::Round, s),
        "bitwise_invert" => |_, s| elementwise::unary(U::Invert, s),
        "negative" | "positive" | "sign" => |_, s| elementwise::unary(U::NoBool, s),
        "conj" | "reciprocal" | "square" => |_, s| elementwise::unary(U::BoolAsInt8, s),
        "real" | "imag" => |_, s| elementwise::unary(U::RealPart, s),
        "acos" | "acosh" | "asin" | "asinh" | "atan" | "atanh" | "cos" | "cosh" | "exp"
        | "expm1" | "log" | "log1p" | "log2" | "log10" | "sin" | "sinh" | "sqrt" | "tan"
        | "tanh" => |_, s| elementwise::unary(U::Inexact, s),
        "isfinite" | "isinf" | "isnan" | "logical_not" => {
            |_, s| elementwise::unary(U::Predicate, s)
        }
        "signbit" => |_, s| elementwise::unary(U::Signbit, s),
        // Element-wise, binary.
        "add" | "multiply" | "maximum" | "minimum" => {
            |overload, s| elementwise::binary(B::Same, overload, s)
        }
        "subtract" => |overload, s| elementwise::binary(B::Subtract, overload, s),
        "divide" => |overload, s| elementwise::binary(B::Divide, overload, s),
        "floor_divide" | "remainder" => |overload, s| elementwise::binary(B::Floor, overload, s),
        "pow" => |overload, s| elementwise::binary(B::Pow, overload, s),
        "bitwise_and" | "bitwise_or" | "bitwise_xor" => {
            |overload, s| elementwise::binary(B::Bitwise, overload, s)
        }
        "bitwise_left_shift" | "bitwise_right_shift" => {
            |overload, s| elementwise::binary(B::Shift, overload, s)
        }
        "equal" | "not_equal" | "less" | "less_equal" | "greater" | "greater_equal"
        | "logical_and" | "logical_or" | "logical_xor" => {
            |overload, s| elementwise::binary(B::Predicate, overload, s)
        }
        "atan2" | "copysign" | "hypot" | "logaddexp" | "nextafter" => {
            |overload, s| elementwise::binary(B::Float, overload, s)
        }
        // Element-wise, in place (the array object's `x += y`).
        "add_" | "multiply_" => |overload, s| elementwise::in_place(B::Same, overload, s),
        "subtract_" => |overload, s| elementwise::in_place(B::Subtract, overload, s),
        "divide_" => |overload, s| elementwise::in_place(B::Divide, overload, s),
        "floor_divide_" | "remainder_" => {
            |overload, s| elementwise::in_place(B::Floor, overload, s)
        }
        "pow_" => |overload, s| elementwise::in_place(B::Pow, overload, s),
        "bitwise_and_" | "bitwise_or_" | "bitwise_xor_" => {
            |overload, s| elementwise::in_place(B::Bitwise, overload, s)
        }
        "bitwise_left_shift_" | "bitwise_right_shift_" => {
            |overload, s| elementwise::in_place(B::Shift, overload, s)
        }
        "clip" => |overload, s| elementwise::clip(overload, s),
        "where" => |overload, s| elementwise::where_(overload, s),
        // Reductions and scans.
        "sum" | "prod" => |_, s| reduce::reduction(R::Accumulate, s),
        "mean" => |_, s| reduce::reduction(R::Mean, s),
        "max" | "min" => |_, s| reduce::reduction(R::Extreme, s),
        "std" | "var" => |_, s| reduce::reduction(R::Spread, s),
        "all" | "any" => |_, s| reduce::reduction(R::Truth, s),
        "count_nonzero" => |_, s| reduce::reduction(R::Count, s),
        "argmax" | "argmin" => |_, s| reduce::arg_extreme(s),
        "cumulative_sum" | "cumulative_prod" => |_, s| reduce::cumulative(s),
        "diff" => |_, s| reduce::diff(s),
        // Linear algebra.
        "matmul" => |_, s| linalg::matmul(s),
        "tensordot" => |overload, s| linalg::tensordot(overload, s),
        "vecdot" => |_, s| linalg::vecdot(s),
        "matrix_transpose" => |_, s| manipulation::matrix_transpose(s),
        "linalg_cholesky" | "linalg_inv" => |_, s| linalg::decomposition(L::Square, s),
        "linalg_det" => |_, s| linalg::decomposition(L::Det, s),
        "linalg_slogdet" => |_, s| linalg::decomposition(L::Slogdet, s),
        "linalg_eigh" => |_, s| linalg::decomposition(L::Eigh, s),
        "linalg_eigvalsh" => |_, s| linalg::decomposition(L::Eigvalsh, s),
        "linalg_svd" => |_, s| linalg::decomposition(L::Svd, s),
        "linalg_svdvals" => |_, s| linalg::decomposition(L::Svdvals, s),
        "linalg_qr" => |_, s| linalg::decomposition(L::Qr, s),
        "linalg_pinv" if overload.is_empty() => |_, s| linalg::decomposition(L::Pinv, s),
        "linalg_pinv" => |_, s| linalg::pinv_tensor(s),
        "linalg_matrix_rank" if overload.is_empty() => |_, s| linalg::decomposition(L::Rank, s),
        "linalg_matrix_rank" => |_, s| linalg::rank_tensor(s),
        "linalg_solve" => |_, s| linalg::solve(s),
        "linalg_matrix_power" => |_, s| linalg::matrix_power(s),
        "linalg_diagonal" => |_, s| linalg::diagonal(s),
        "linalg_trace" => |_, s| linalg::trace(s),
        "linalg_outer" => |_, s| linalg::outer(s),
        "linalg_cross" => |_, s| linalg::cross(s),
        "linalg_matrix_norm" => |overload, s| linalg::matrix_norm(overload, s),
        "linalg_vector_norm" => |_, s| linalg::vector_norm(s),
        // Manipulation.
        "broadcast_to" => |_, s| manipulation::broadcast_to(s),
        "broadcast_arrays" => |_, s| manipulation::broadcast_arrays(s),
        "concat" => |_, s| manipulation::concat(s),
        "stack" => |_, s| manipulation::stack(s),
        "unstack" => |_, s| manipulation::unstack(s),
        "expand_dims" => |_, s| manipulation::expand_dims(s),
        "squeeze" => |_, s| manipulation::squeeze(s),
        "permute_dims" => |_, s| manipulation::permute_dims(s),
        "moveaxis" => |_, s| manipulation::moveaxis(s),
        "reshape" => |_, s| manipulation::reshape(s),
        "tile" => |_, s| manipulation::tile(s),
        "repeat" if overload.is_empty() => |_, s| manipulation::repeat(s),
        "flip" => |_, s| manipulation::same_with_axes(s),
        // The fft extension.
        "fft_fftshift" | "fft_ifftshift" => |_, s| manipulation::fftshift(s),
        "fft_fft" | "fft_ifft" => |_, s| fft::one(T::Complex, s),
        "fft_rfft" | "fft_ihfft" => |_, s| fft::one(T::RealToComplex, s),
        "fft_irfft" | "fft_hfft" => |_, s| fft::one(T::ComplexToReal, s),
        "fft_fftn" | "fft_ifftn" => |_, s| fft::many(T::Complex, s),
        "fft_rfftn" => |_, s| fft::many(T::RealToComplex, s),
        "fft_irfftn" => |_, s| fft::many(T::ComplexToReal, s),
        "fft_fftfreq" => |_, s| fft::freq(false, s),
        "fft_rfftfreq" => |_, s| fft::freq(true, s),
        "roll" => |_, s| manipulation::roll(s),
        "tril" | "triu" => |_, s| manipulation::triangle(s),
        "meshgrid" => |_, s| manipulation::meshgrid(s),
        // Creation and conversion.
        "zeros" | "ones" | "empty" => |_, s| creation::filled(s),
        "full" => |_, s| creation::full(s),
        "zeros_like" | "ones_like" | "empty_like" => |_, s| creation::like(s),
        "full_like" => |_, s| creation::full_like(s),
        "arange" => |_, s| creation::arange(s),
        "linspace" => |_, s| creation::linspace(s),
        "eye" => |_, s| creation::eye(s),
        "asarray" => |_, s| creation::asarray(s),
        "astype" => |_, s| creation::astype(s),
        // Sorting, searching, indexing by arrays.
        "sort" => |_, s| select::sort(false, s),
        "argsort" => |_, s| select::sort(true, s),
        "searchsorted" => |_, s| select::searchsorted(s),
        "take" => |_, s| select::take(s),
        "take_along_axis" => |_, s| select::take_along_axis(s),
        // Basic indexing (a key of ints, slices, None and `...`).
        "getitem" => |_, s| index::getitem(s),
        "setitem_functional" => |overload, s| index::setitem_functional(overload, s),
        // Graph mode's reads and writes of views (`graph/views.rs`).
        "_strided_view" => |_, s| index::strided_view(s),
        "_strided_view_write" => |_, s| index::strided_view_write(s),
        _ => return None,
    };
    Some((rule, overload))
}
