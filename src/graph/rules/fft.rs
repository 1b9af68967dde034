//! The `fft` extension: the transforms' lengths along their axes, and the dtypes the kernels
//! cast to (the complex or real dtype of the input's precision: single for float32 and
//! complex64, double for everything else), and `fftfreq`/`rfftfreq`.

use super::args::{self, sizes};
use crate::ivalue::IValue;
use crate::tensor::{DType, Kind, TensorMeta};

/// Which transform: what it takes and what it makes along its (last) axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Transform {
    /// `fft`, `ifft`, `fftn`, `ifftn`: complex to complex, `n` points.
    Complex,
    /// `rfft`, `ihfft`, `rfftn`: real input, `n // 2 + 1` complex points.
    RealToComplex,
    /// `irfft`, `hfft`, `irfftn`: `n` real points, by default `2 * (m - 1)` of `m`.
    ComplexToReal,
}

/// Whether `d` is single precision.
fn single(d: DType) -> bool {
    matches!(d, DType::F32 | DType::C64)
}

/// The output dtype of `t` for an input of dtype `d`; `None` for a complex input of a real
/// transform (NumPy's TypeError).
fn dtype_of(t: Transform, d: DType) -> Option<DType> {
    Some(match (t, single(d)) {
        (Transform::RealToComplex, _) if d.kind() == Kind::Complex => return None,
        (Transform::Complex | Transform::RealToComplex, true) => DType::C64,
        (Transform::Complex | Transform::RealToComplex, false) => DType::C128,
        (Transform::ComplexToReal, true) => DType::F32,
        (Transform::ComplexToReal, false) => DType::F64,
    })
}

/// The length along the last transformed axis, given `m` points there and `n` asked (None
/// for the default); `None` for no point to transform (NumPy's ValueError).
fn last_length(t: Transform, m: usize, n: Option<usize>) -> Option<usize> {
    let points = match (t, n) {
        (_, Some(n)) => n,
        (Transform::ComplexToReal, None) => m.checked_sub(1)?.checked_mul(2)?,
        (_, None) => m,
    };
    if points == 0 {
        return None;
    }
    Some(match t {
        Transform::RealToComplex => points / 2 + 1,
        _ => points,
    })
}

/// The norm argument: NumPy's three.
fn norm_ok(stack: &[IValue], i: usize) -> Option<()> {
    matches!(args::string(stack, i)?, "backward" | "ortho" | "forward").then_some(())
}

/// `fft_<name>(x, *, n, axis, norm)`: one axis transformed.
pub(super) fn one(t: Transform, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let n = args::opt_int(stack, 1)?
        .map(|n| usize::try_from(n).ok())
        .map_or(Some(None), |n| n.map(Some))?;
    let axis = args::axis(args::int(stack, 2)?, x.ndim())?;
    norm_ok(stack, 3)?;
    let dtype = dtype_of(t, x.dtype)?;
    let mut shape = x.shape;
    let m = shape.get_mut(axis)?;
    *m = last_length(t, *m, n)?;
    Some(vec![args::out(dtype, shape)])
}

/// `fft_<name>n(x, *, s, axes, norm)`: several axes transformed (every one, or the last
/// `len(s)`, where `axes` is None), the last of them as the real one of a real transform.
/// NumPy transforms one axis after another (the complex axes last to first, after the real
/// one for `rfftn`, before it for `irfftn`), each to its length in `s` (by default the
/// input's): an axis named twice ends at the length of its last transform.
pub(super) fn many(t: Transform, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let x = args::tensor(stack, 0)?;
    let s = args::opt_ints(stack, 1)?
        .map(sizes)
        .map_or(Some(None), |s| s.map(Some))?;
    let ndim = x.ndim();
    let axes: Vec<usize> = match (args::opt_ints(stack, 2)?, &s) {
        (Some(a), _) => a
            .iter()
            .map(|&i| args::axis(i, ndim))
            .collect::<Option<_>>()?,
        (None, Some(s)) => (ndim.checked_sub(s.len())?..ndim).collect(),
        (None, None) => (0..ndim).collect(),
    };
    let dtype = dtype_of(t, x.dtype)?;
    if axes.is_empty() {
        // No axis: NumPy's complex transforms give the input back (in the output dtype),
        // without a look at `norm`.
        return (t == Transform::Complex && s.as_ref().is_none_or(Vec::is_empty))
            .then(|| vec![args::out(dtype, x.shape)]);
    }
    norm_ok(stack, 3)?;
    // The lengths asked, by default the input's along each axis (the real output of
    // `irfftn` twice its last less one).
    let lengths = match s {
        Some(s) if s.len() == axes.len() => s,
        Some(_) => return None,
        None => {
            let mut l = axes
                .iter()
                .map(|&a| x.shape.get(a).copied())
                .collect::<Option<Vec<_>>>()?;
            if t == Transform::ComplexToReal {
                let last = l.last_mut()?;
                *last = last.checked_sub(1)?.checked_mul(2)?;
            }
            l
        }
    };
    let mut shape = x.shape;
    let mut apply = |t: Transform, k: usize, lengths: &[usize]| -> Option<()> {
        let m = shape.get_mut(*axes.get(k)?)?;
        *m = last_length(t, *m, Some(*lengths.get(k)?))?;
        Some(())
    };
    let last = axes.len() - 1;
    match t {
        Transform::Complex => (0..=last).rev().try_for_each(|k| apply(t, k, &lengths))?,
        Transform::RealToComplex => {
            apply(t, last, &lengths)?;
            (0..last)
                .rev()
                .try_for_each(|k| apply(Transform::Complex, k, &lengths))?;
        }
        Transform::ComplexToReal => {
            (0..last).try_for_each(|k| apply(Transform::Complex, k, &lengths))?;
            apply(t, last, &lengths)?;
        }
    }
    Some(vec![args::out(dtype, shape)])
}

/// `fft_fftfreq`, `fft_rfftfreq(n, *, d, dtype, device)`: `n` (or `n // 2 + 1`) frequencies,
/// float64 unless `dtype` names another real floating dtype.
pub(super) fn freq(real: bool, stack: &[IValue]) -> Option<Vec<TensorMeta>> {
    let n = args::int(stack, 0)?;
    match stack.get(1)? {
        IValue::Double(d) if *d != 0.0 => {}
        _ => return None,
    }
    let dtype = args::opt_dtype(stack, 2)?.unwrap_or(DType::F64);
    if dtype.kind() != Kind::Float {
        return None;
    }
    // Both divide by `n * d`; `rfftfreq` counts `n // 2 + 1` (Python's floor division: none
    // for a negative `n`), `fftfreq` allocates `n`.
    let len = match (real, n) {
        (_, 0) => return None,
        (true, n) => usize::try_from(n.div_euclid(2) + 1).unwrap_or(0),
        (false, n) => usize::try_from(n).ok()?,
    };
    Some(vec![args::out(dtype, vec![len])])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn one_meta(v: Option<Vec<TensorMeta>>) -> String {
        v.map(|m| m[0].to_string()).unwrap_or_else(|| "none".into())
    }

    #[test]
    fn transforms_change_the_length_and_the_dtype() {
        let x = IValue::Tensor(Tensor::from_array(ndarray::ArrayD::<f32>::zeros(vec![
            3, 8,
        ])));
        let norm = IValue::Str("backward".into());
        let call = |t: Transform, n: IValue| {
            one_meta(one(t, &[x.clone(), n, IValue::Int(-1), norm.clone()]))
        };
        assert_eq!(call(Transform::Complex, IValue::None), "complex64[3, 8]");
        assert_eq!(
            call(Transform::RealToComplex, IValue::None),
            "complex64[3, 5]"
        );
        assert_eq!(
            call(Transform::ComplexToReal, IValue::None),
            "float32[3, 14]"
        );
        assert_eq!(
            call(Transform::ComplexToReal, IValue::Int(5)),
            "float32[3, 5]"
        );
        assert_eq!(call(Transform::Complex, IValue::Int(0)), "none");
        let axes = IValue::IntList(vec![0, 1]);
        let s = IValue::IntList(vec![4, 6]);
        let r = many(
            Transform::RealToComplex,
            &[x.clone(), s, axes, norm.clone()],
        );
        assert_eq!(one_meta(r), "complex64[4, 4]");
        let f = freq(true, &[IValue::Int(9), IValue::Double(1.0), IValue::None]);
        assert_eq!(one_meta(f), "float64[5]");
    }
}
