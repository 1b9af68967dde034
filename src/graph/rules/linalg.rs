//! Linear algebra: `matmul`, `tensordot`, `vecdot` and the `linalg_*` operators whose
//! outputs the shapes decide (factorizations, inverses, determinants, norms). NumPy's
//! `linalg` computes bools and integers in float64.

use super::args::{self, broadcast, reduced, reduction_mask, Meta, Weak};
use super::promote::{linalg, promote, real};
use crate::ivalue::IValue;
use crate::tensor::{DType, Kind, TensorMeta};

/// The batch dimensions and the matrix `(rows, columns)` of a stack of matrices.
fn matrices(x: &Meta) -> Option<(&[usize], usize, usize)> {
    match x.shape.as_slice() {
        [batch @ .., m, n] => Some((batch, *m, *n)),
        _ => None,
    }
}

/// A stack of square matrices: the batch and the order.
fn square(x: &Meta) -> Option<(&[usize], usize)> {
    let (batch, m, n) = matrices(x)?;
    (m == n).then_some((batch, m))
}

/// `matmul(x1, x2)`: NumPy's rule (a 1-d operand is a vector, its dimension dropped from the
/// result), the batches broadcast; the promoted dtype.
pub(super) fn matmul(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (a, b) = (args::tensor(stack, 0)?, args::tensor(stack, 1)?);
    let dtype = promote(a.dtype, b.dtype);
    let shape = match (a.shape.as_slice(), b.shape.as_slice()) {
        ([], _) | (_, []) => return None,
        ([k], [l]) => (k == l).then(Vec::new)?,
        ([k], [batch @ .., l, n]) => (k == l).then(|| [batch, &[*n]].concat())?,
        ([batch @ .., m, k], [l]) => (k == l).then(|| [batch, &[*m]].concat())?,
        ([ba @ .., m, k], [bb @ .., l, n]) => {
            if k != l {
                return None;
            }
            let mut s = broadcast(ba, bb)?;
            s.extend([*m, *n]);
            s
        }
    };
    Some(vec![args::out(dtype, shape)])
}

/// `tensordot(x1, x2, *, axes)` (an int: the last `axes` of `x1` with the first of `x2`) and
/// `tensordot.axes` (two lists of axes): the dimensions left of each, in order; the promoted
/// dtype.
pub(super) fn tensordot(overload: &str, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (a, b) = (args::tensor(stack, 0)?, args::tensor(stack, 1)?);
    let (left, right) = match overload {
        "" => {
            let k = usize::try_from(args::int(stack, 2)?).ok()?;
            if k > a.ndim() || k > b.ndim() {
                return None;
            }
            let left: Vec<usize> = (a.ndim() - k..a.ndim()).collect();
            let right: Vec<usize> = (0..k).collect();
            (left, right)
        }
        "axes" => {
            let IValue::List(pair) = stack.get(2)? else {
                return None;
            };
            let [IValue::IntList(l), IValue::IntList(r)] = pair.as_slice() else {
                return None;
            };
            if l.len() != r.len() {
                return None;
            }
            args::axes_mask(l, a.ndim())?;
            args::axes_mask(r, b.ndim())?;
            let norm = |v: &[i64], n: usize| {
                v.iter()
                    .map(|&i| args::axis(i, n))
                    .collect::<Option<Vec<_>>>()
            };
            (norm(l, a.ndim())?, norm(r, b.ndim())?)
        }
        _ => return None,
    };
    for (&i, &j) in left.iter().zip(&right) {
        if a.shape.get(i)? != b.shape.get(j)? {
            return None;
        }
    }
    let keep = |m: &Meta, gone: &[usize]| {
        m.shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !gone.contains(i))
            .map(|(_, &n)| n)
            .collect::<Vec<_>>()
    };
    let shape = [keep(&a, &left), keep(&b, &right)].concat();
    Some(vec![args::out(promote(a.dtype, b.dtype), shape)])
}

/// `vecdot(x1, x2, *, axis)`: the broadcast shape without `axis`, where both sizes along
/// `axis` (of each operand's own dimensions) are equal; the dtype of `conj(x1) * x2`.
pub(super) fn vecdot(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (a, b) = (args::tensor(stack, 0)?, args::tensor(stack, 1)?);
    let axis = args::int(stack, 2)?;
    let size_a = a.shape.get(args::axis(axis, a.ndim())?)?;
    let size_b = b.shape.get(args::axis(axis, b.ndim())?)?;
    if size_a != size_b {
        return None;
    }
    let mut shape = broadcast(&a.shape, &b.shape)?;
    shape.remove(args::axis(axis, shape.len())?);
    // `conj` of a bool array is int8.
    let conj = if a.dtype == DType::Bool {
        DType::I8
    } else {
        a.dtype
    };
    Some(vec![args::out(promote(conj, b.dtype), shape)])
}

/// What a `linalg_*` operator of one stack of matrices gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Linalg {
    /// `cholesky`, `inv`: the matrices' shape (square).
    Square,
    /// `det`: one value per square matrix.
    Det,
    /// `slogdet`: sign (the computing dtype) and log of the absolute value (real).
    Slogdet,
    /// `eigh`: eigenvalues (real) and eigenvectors of square matrices.
    Eigh,
    /// `eigvalsh`: the eigenvalues (real).
    Eigvalsh,
    /// `svd`: `U`, `S` (real), `Vh`, full or reduced.
    Svd,
    /// `svdvals`: `S` (real).
    Svdvals,
    /// `qr`: `Q` and `R`, reduced or complete.
    Qr,
    /// `pinv` with a scalar or no `rtol`: the transposed shape.
    Pinv,
    /// `matrix_rank` with a scalar or no `rtol`: int64, one per matrix.
    Rank,
}

/// `linalg_<name>(x, ...)` of the class `kind`.
pub(super) fn decomposition(kind: Linalg, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let (batch, m, n) = matrices(&x)?;
    let (d, r) = (linalg(x.dtype), real(linalg(x.dtype)));
    let with = |tail: &[usize]| [batch, tail].concat();
    let k = m.min(n);
    Some(match kind {
        Linalg::Square => {
            square(&x)?;
            vec![args::out(d, x.shape.clone())]
        }
        Linalg::Det => {
            square(&x)?;
            vec![args::out(d, batch.to_vec())]
        }
        Linalg::Slogdet => {
            square(&x)?;
            vec![args::out(d, batch.to_vec()), args::out(r, batch.to_vec())]
        }
        Linalg::Eigh => {
            square(&x)?;
            vec![args::out(r, with(&[m])), args::out(d, x.shape.clone())]
        }
        Linalg::Eigvalsh => {
            square(&x)?;
            vec![args::out(r, with(&[m]))]
        }
        Linalg::Svd => {
            let full = args::boolean(stack, 1)?;
            let (u, v) = if full { (m, n) } else { (k, k) };
            vec![
                args::out(d, with(&[m, u])),
                args::out(r, with(&[k])),
                args::out(d, with(&[v, n])),
            ]
        }
        Linalg::Svdvals => vec![args::out(r, with(&[k]))],
        Linalg::Qr => {
            let q = match args::string(stack, 1)? {
                "reduced" => k,
                "complete" => m,
                _ => return None,
            };
            vec![args::out(d, with(&[m, q])), args::out(d, with(&[q, n]))]
        }
        Linalg::Pinv => {
            default_rtol(x.dtype, args::opt_scalar(stack, 1)?)?;
            vec![args::out(pinv_dtype(&x), with(&[n, m]))]
        }
        Linalg::Rank => {
            // The largest singular value of an empty matrix is NumPy's ValueError.
            if k == 0 {
                return None;
            }
            default_rtol(x.dtype, args::opt_scalar(stack, 1)?)?;
            vec![args::out(DType::I64, batch.to_vec())]
        }
    })
}

/// Whether the matrices are empty (a dimension of 0 in the last two; an empty batch of
/// non-empty matrices is not, for NumPy).
fn empty_matrices(x: &Meta) -> bool {
    matrices(x).is_some_and(|(_, m, n)| m == 0 || n == 0)
}

/// `pinv`'s dtype: NumPy answers empty matrices with an empty array of the input's dtype,
/// before computing anything.
fn pinv_dtype(x: &Meta) -> DType {
    if empty_matrices(x) {
        x.dtype
    } else {
        linalg(x.dtype)
    }
}

/// `linalg_pinv.Tensor(x, *, rtol)`: as `pinv`, where `rtol` broadcasts to the batch (NumPy
/// divides in place in the singular values' array) or the matrices are empty.
pub(super) fn pinv_tensor(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let rtol = args::tensor(stack, 1)?;
    let (batch, m, n) = matrices(&x)?;
    // An empty stack is answered before `rtol` is read.
    if !empty_matrices(&x) && !args::broadcasts_to(&rtol.shape, batch) {
        return None;
    }
    let shape = [batch, &[n, m]].concat();
    Some(vec![args::out(pinv_dtype(&x), shape)])
}

/// `linalg_matrix_rank.Tensor(x, *, rtol)`: int64 ranks in the shape the batch and `rtol`
/// broadcast to.
pub(super) fn rank_tensor(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let rtol = args::tensor(stack, 1)?;
    let (batch, m, n) = matrices(&x)?;
    if m.min(n) == 0 {
        return None;
    }
    Some(vec![args::out(DType::I64, broadcast(batch, &rtol.shape)?)])
}

/// Whether `rtol` is usable: the default (None) is the machine epsilon of `d`, which only a
/// floating dtype has (NumPy's `finfo` of an integer is a ValueError).
fn default_rtol(d: DType, rtol: Option<Weak>) -> Option<()> {
    (rtol.is_some() || matches!(d.kind(), Kind::Float | Kind::Complex)).then_some(())
}

/// `linalg_solve(x1, x2)`: `x2` a vector (1-d) or a stack of matrices whose batch broadcasts
/// with `x1`'s; the computing dtype of both.
pub(super) fn solve(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (a, b) = (args::tensor(stack, 0)?, args::tensor(stack, 1)?);
    let (batch, m) = square(&a)?;
    // NumPy's common type of the two: each in its computing dtype, then promoted.
    let dtype = promote(linalg(a.dtype), linalg(b.dtype));
    let shape = match b.shape.as_slice() {
        [l] => (*l == m).then(|| [batch, &[m]].concat())?,
        [bb @ .., l, k] => {
            if *l != m {
                return None;
            }
            let mut s = broadcast(batch, bb)?;
            s.extend([m, *k]);
            s
        }
        [] => return None,
    };
    Some(vec![args::out(dtype, shape)])
}

/// `linalg_matrix_power(x, n)`: square matrices; the dtype for `n >= 0`, the inverse's
/// computing dtype for `n < 0`.
pub(super) fn matrix_power(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    square(&x)?;
    let n = args::int(stack, 1)?;
    let dtype = if n < 0 { linalg(x.dtype) } else { x.dtype };
    Some(vec![args::out(dtype, x.shape)])
}

/// `linalg_diagonal(x, *, offset)`: the batch and the diagonal's length.
pub(super) fn diagonal(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let (batch, m, n) = matrices(&x)?;
    let k = args::int(stack, 1)?;
    let (m, n) = (i128::try_from(m).ok()?, i128::try_from(n).ok()?);
    let k = i128::from(k);
    let len = if k >= 0 { m.min(n - k) } else { (m + k).min(n) }.max(0);
    let shape = [batch, &[usize::try_from(len).ok()?]].concat();
    Some(vec![args::out(x.dtype, shape)])
}

/// `linalg_trace(x, *, offset, dtype)`: one value per matrix; `dtype=`, else integers widened
/// to 64 bits of their kind and bools summed as int64.
pub(super) fn trace(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let (batch, _, _) = matrices(&x)?;
    args::int(stack, 1)?;
    let dtype = match args::opt_dtype(stack, 2)? {
        Some(d) => d,
        None => match x.dtype.kind() {
            Kind::Bool | Kind::Signed => DType::I64,
            Kind::Unsigned => DType::U64,
            _ => x.dtype,
        },
    };
    Some(vec![args::out(dtype, batch.to_vec())])
}

/// `linalg_outer(x1, x2)`: the flattened sizes of both; the promoted dtype.
pub(super) fn outer(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (a, b) = (args::tensor(stack, 0)?, args::tensor(stack, 1)?);
    let shape = vec![args::size(&a.shape)?, args::size(&b.shape)?];
    Some(vec![args::out(promote(a.dtype, b.dtype), shape)])
}

/// `linalg_cross(x1, x2, *, axis)`: 3-vectors along `axis` of each; the other dimensions
/// broadcast, the vectors' dimension put back at `axis`; the promoted dtype (bools have no
/// subtraction).
pub(super) fn cross(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let (a, b) = (args::tensor(stack, 0)?, args::tensor(stack, 1)?);
    let axis = args::int(stack, 2)?;
    let dtype = promote(a.dtype, b.dtype);
    if dtype == DType::Bool {
        return None;
    }
    let rest = |m: &Meta| -> Option<Vec<usize>> {
        let i = args::axis(axis, m.ndim())?;
        (*m.shape.get(i)? == 3).then(|| {
            let mut s = m.shape.clone();
            s.remove(i);
            s
        })
    };
    let mut shape = broadcast(&rest(&a)?, &rest(&b)?)?;
    let at = args::axis(axis, shape.len() + 1)?;
    shape.insert(at, 3);
    Some(vec![args::out(dtype, shape)])
}

/// `linalg_matrix_norm(x, *, keepdims, ord)` (`ord` a string, or a number for `.Scalar`):
/// one real value per matrix (kept as a 1x1 matrix with `keepdims`).
pub(super) fn matrix_norm(overload: &str, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let (batch, m, n) = matrices(&x)?;
    let keepdims = args::boolean(stack, 1)?;
    let ord = match overload {
        "" => match args::string(stack, 2)? {
            "fro" | "nuc" => None,
            _ => return None,
        },
        "Scalar" => {
            let ord = match args::scalar(stack, 2)? {
                Weak::Int(i) => i as f64,
                Weak::Float(f) => f,
                Weak::Bool(_) => return None,
            };
            if ![1.0, -1.0, 2.0, -2.0, f64::INFINITY, f64::NEG_INFINITY].contains(&ord) {
                return None;
            }
            Some(ord)
        }
        _ => return None,
    };
    // The negative orders take a minimum: of nothing for an empty matrix (-1 over its
    // columns' sums, -inf over its rows', -2 over its singular values).
    let no_minimum = ord.is_some_and(|o| {
        (o == -1.0 && n == 0)
            || (o == f64::NEG_INFINITY && m == 0)
            || (o == -2.0 && (m == 0 || n == 0))
    });
    if no_minimum {
        return None;
    }
    let mut shape = batch.to_vec();
    if keepdims {
        shape.extend([1, 1]);
    }
    Some(vec![args::out(real(linalg(x.dtype)), shape)])
}

/// `linalg_vector_norm(x, *, axis, keepdims, ord)`: the real value over `axis` (every
/// dimension for None). The order -inf takes a minimum: none of nothing.
pub(super) fn vector_norm(stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let axes = args::opt_ints(stack, 1)?;
    let mask = match axes {
        Some([]) => vec![false; x.ndim()],
        // The kernel takes several axes modulo the dimensions (Python's `%`), unchecked.
        Some(a) if a.len() != 1 => {
            let n = i64::try_from(x.ndim()).ok().filter(|&n| n > 0)?;
            let wrapped: Vec<i64> = a.iter().map(|&i| i.rem_euclid(n)).collect();
            args::axes_mask(&wrapped, x.ndim())?
        }
        a => reduction_mask(a, x.ndim())?,
    };
    let keepdims = args::boolean(stack, 2)?;
    let ord = match args::scalar(stack, 3)? {
        Weak::Int(i) => i as f64,
        Weak::Float(f) => f,
        Weak::Bool(_) => return None,
    };
    let empty = x.shape.iter().zip(&mask).any(|(&n, &r)| r && n == 0);
    if ord == f64::NEG_INFINITY && empty {
        return None;
    }
    // The kernel flattens the axes of any number but one into the last dimension (reshape
    // with -1), which an empty array whose other dimensions hold nothing cannot infer.
    if let Some(axes) = axes {
        let mut kept = x.shape.iter().zip(&mask).filter(|(_, &r)| !r).peekable();
        let kept_empty = kept.peek().is_some() && kept.any(|(&n, _)| n == 0);
        if axes.len() != 1 && kept_empty {
            return None;
        }
    }
    let shape = reduced(&x.shape, &mask, keepdims);
    Some(vec![args::out(real(linalg(x.dtype)), shape)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn t(shape: &[usize]) -> IValue {
        IValue::Tensor(Tensor::from_array(ndarray::ArrayD::<f32>::zeros(
            shape.to_vec(),
        )))
    }

    fn shapes(v: Option<Vec<TensorMeta>>) -> Option<Vec<Vec<usize>>> {
        v.map(|m| m.into_iter().map(|m| m.shape).collect())
    }

    #[test]
    fn matmul_follows_numpys_vector_rules() {
        let mm = |a: &[usize], b: &[usize]| shapes(matmul(&[t(a), t(b)]));
        assert_eq!(mm(&[2, 3], &[3, 4]), Some(vec![vec![2, 4]]));
        assert_eq!(mm(&[3], &[3]), Some(vec![vec![]]));
        assert_eq!(mm(&[3], &[5, 3, 4]), Some(vec![vec![5, 4]]));
        assert_eq!(mm(&[5, 2, 3], &[3]), Some(vec![vec![5, 2]]));
        assert_eq!(mm(&[5, 1, 2, 3], &[4, 3, 2]), Some(vec![vec![5, 4, 2, 2]]));
        assert_eq!(mm(&[2, 3], &[4, 2]), None);
        assert_eq!(mm(&[], &[2]), None);
    }

    #[test]
    fn contractions() {
        let td = tensordot("", &[t(&[2, 3, 4]), t(&[3, 4, 5]), IValue::Int(2)]);
        assert_eq!(shapes(td), Some(vec![vec![2, 5]]));
        let axes = IValue::List(vec![IValue::IntList(vec![0]), IValue::IntList(vec![-1])]);
        let td = tensordot("axes", &[t(&[2, 3]), t(&[4, 2]), axes]);
        assert_eq!(shapes(td), Some(vec![vec![3, 4]]));
        let vd = vecdot(&[t(&[2, 3]), t(&[3]), IValue::Int(-1)]);
        assert_eq!(shapes(vd), Some(vec![vec![2]]));
        assert!(vecdot(&[t(&[2, 3]), t(&[2]), IValue::Int(-1)]).is_none());
    }

    #[test]
    fn factorizations() {
        let svd = decomposition(Linalg::Svd, &[t(&[4, 2, 3]), IValue::Bool(false)]);
        assert_eq!(
            shapes(svd),
            Some(vec![vec![4, 2, 2], vec![4, 2], vec![4, 2, 3]])
        );
        let qr = decomposition(Linalg::Qr, &[t(&[5, 3]), IValue::Str("complete".into())]);
        assert_eq!(shapes(qr), Some(vec![vec![5, 5], vec![5, 3]]));
        assert!(decomposition(Linalg::Det, &[t(&[2, 3])]).is_none());
        let s = solve(&[t(&[2, 3, 3]), t(&[3])]);
        assert_eq!(shapes(s), Some(vec![vec![2, 3]]));
        let d = diagonal(&[t(&[3, 5]), IValue::Int(3)]);
        assert_eq!(shapes(d), Some(vec![vec![2]]));
        let d = diagonal(&[t(&[3, 5]), IValue::Int(-7)]);
        assert_eq!(shapes(d), Some(vec![vec![0]]));
    }
}
