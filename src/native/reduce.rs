//! The array API's reductions `sum`, `prod`, `mean`, `max` and `min` on Native, with `axis`,
//! `keepdims` and (`sum`, `prod`) `dtype`, for every dtype the standard defines them on, in
//! NumPy's accumulation dtypes (int64 for bools and signed integers, uint64 for unsigned ones;
//! `mean` of integers is float64). Sums over contiguous memory are NumPy's pairwise sum (eight
//! accumulators in blocks of 128, four complex ones in blocks of 64: the same rounding, and it
//! vectorizes); along an outer axis, rows are added one after another, as NumPy does. What is
//! not covered goes to the CPU fallback: an empty `mean`, `max` or `min` (NumPy warns or
//! raises), `max`/`min` of complex numbers, a `dtype` that is not a safe cast, `axis=()`.

use ndarray::{ArrayD, ArrayView1, ArrayViewD, Axis, Ix2, Zip};
use num_complex::Complex;

use super::alloc::{try_copy, try_lanes, try_map};
use super::cast::{cast_host, Cast};
use super::elem::{with_elem, HostElem};
use super::promote::{accumulation, safe};
use super::support::{fall_back, kernel_error, native_host, reduce_dims, result_of, run_blocking};
use crate::dispatcher::OperatorHandle;
use crate::error::Result;
use crate::ivalue::{IValue, Stack};
use crate::key::DispatchKeySet;
use crate::tensor::{DType, HostArray, Kind, Tensor};

/// The reductions (the kernels' const parameter).
pub(super) const SUM: u8 = 0;
pub(super) const PROD: u8 = 1;
pub(super) const MEAN: u8 = 2;
pub(super) const MAX: u8 = 3;
pub(super) const MIN: u8 = 4;

/// Defines `$name(a) -> T` twice, for the baseline and for AVX2 (chosen at run time, as NumPy
/// chooses its loops): `$body` with `$self_` the variant itself, for the recursion.
macro_rules! simd_twice {
    ($(#[$doc:meta])* fn $name:ident<T>($a:ident: &[T] $(, $p:ident: $pt:ty)*) -> T as $self_:ident $body:block) => {
        $(#[$doc])*
        fn $name<T: HostElem>($a: &[T] $(, $p: $pt)*) -> T {
            #[inline(always)]
            fn base<T: HostElem>($a: &[T] $(, $p: $pt)*) -> T {
                #[allow(unused)]
                use base as $self_;
                $body
            }
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                fn avx2<T: HostElem>($a: &[T] $(, $p: $pt)*) -> T {
                    #[allow(unused)]
                    use avx2 as $self_;
                    $body
                }
                if $a.len() >= 64 && std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2 (checked at run time just above), the one
                    // requirement of calling a function compiled with it. Exercised by the
                    // reduction tests (tests/python/test_native_array_api_kernels.py, this
                    // module's tests) on any AVX2 machine.
                    return unsafe { avx2($a $(, $p)*) };
                }
            }
            base($a $(, $p)*)
        }
    };
}

simd_twice! {
    /// NumPy's pairwise sum of real numbers (`pairwise_sum` of its loops): the same additions
    /// in the same order.
    fn pairwise_real<T>(a: &[T]) -> T as this {
        let n = a.len();
        if n < 8 {
            a.iter().fold(T::ZERO, |s, &v| s.add(v))
        } else if n <= 128 {
            let mut r = [a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]];
            let body = n - n % 8;
            for c in a[8..body].chunks_exact(8) {
                for j in 0..8 {
                    r[j] = r[j].add(c[j]);
                }
            }
            let mut res = (r[0].add(r[1]).add(r[2].add(r[3])))
                .add(r[4].add(r[5]).add(r[6].add(r[7])));
            for &v in &a[body..] {
                res = res.add(v);
            }
            res
        } else {
            let mut n2 = n / 2;
            n2 -= n2 % 8;
            let (l, r) = a.split_at(n2);
            if l.len() <= 128 && r.len() <= 128 {
                // Two last blocks: summed side by side, each exactly as alone (two chains of
                // additions instead of one, so the adds do not wait on each other).
                let (x, y) = leaf_pair(l, r);
                return x.add(y);
            }
            this(l).add(this(r))
        }
    }
}

/// The pairwise sums of two blocks of 8 to 128 elements, each as `pairwise_real` sums one:
/// eight accumulators, combined as NumPy combines them, then the rest one by one.
#[inline(always)]
fn leaf_pair<T: HostElem>(l: &[T], r: &[T]) -> (T, T) {
    #[inline(always)]
    fn start<T: HostElem>(a: &[T]) -> [T; 8] {
        [a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]
    }
    #[inline(always)]
    fn step<T: HostElem>(acc: &mut [T; 8], c: &[T]) {
        for j in 0..8 {
            acc[j] = acc[j].add(c[j]);
        }
    }
    #[inline(always)]
    fn finish<T: HostElem>(r: [T; 8], rest: &[T]) -> T {
        let res = (r[0].add(r[1]).add(r[2].add(r[3]))).add(r[4].add(r[5]).add(r[6].add(r[7])));
        rest.iter().fold(res, |s, &v| s.add(v))
    }
    let (lb, rb) = (l.len() - l.len() % 8, r.len() - r.len() % 8);
    let (mut x, mut y) = (start(l), start(r));
    let (lc, rc) = (l[8..lb].chunks_exact(8), r[8..rb].chunks_exact(8));
    let common = lc.len().min(rc.len());
    for (p, q) in lc.clone().zip(rc.clone()) {
        step(&mut x, p);
        step(&mut y, q);
    }
    for p in lc.skip(common) {
        step(&mut x, p);
    }
    for q in rc.skip(common) {
        step(&mut y, q);
    }
    (finish(x, &l[lb..]), finish(y, &r[rb..]))
}

simd_twice! {
    /// NumPy's pairwise sum of complex numbers, which it runs over the interleaved real and
    /// imaginary parts: four complex accumulators in blocks of 64.
    fn pairwise_complex<T>(a: &[T]) -> T as this {
        let n = a.len();
        if n < 4 {
            a.iter().fold(T::ZERO, |s, &v| s.add(v))
        } else if n <= 64 {
            let mut r = [a[0], a[1], a[2], a[3]];
            let body = n - n % 4;
            for c in a[4..body].chunks_exact(4) {
                for j in 0..4 {
                    r[j] = r[j].add(c[j]);
                }
            }
            let mut res = r[0].add(r[1]).add(r[2].add(r[3]));
            for &v in &a[body..] {
                res = res.add(v);
            }
            res
        } else {
            let k = (n - n % 8) / 2;
            this(&a[..k]).add(this(&a[k..]))
        }
    }
}

/// The sum of a contiguous run, as NumPy's `add.reduce` gives it (its identity plus the
/// pairwise sum).
fn sum_slice<T: HostElem>(a: &[T]) -> T {
    let s = if T::DTYPE.kind() == Kind::Complex {
        pairwise_complex(a)
    } else {
        pairwise_real(a)
    };
    T::ZERO.add(s)
}

/// How one reduction reduces: a lane at once, and a row into the running result.
pub(super) trait Reducer<T: HostElem>: Sync {
    fn lane(&self, lane: ArrayView1<'_, T>) -> T;
    fn fold(&self, acc: T, v: T) -> T;
}

pub(super) struct Sum;
impl<T: HostElem> Reducer<T> for Sum {
    fn lane(&self, lane: ArrayView1<'_, T>) -> T {
        match lane.as_slice() {
            Some(s) => sum_slice(s),
            None => lane.fold(T::ZERO, |s, &v| s.add(v)),
        }
    }
    fn fold(&self, acc: T, v: T) -> T {
        acc.add(v)
    }
}

/// Products multiply one after another, as NumPy's `multiply.reduce` does.
struct Prod;
impl<T: HostElem> Reducer<T> for Prod {
    fn lane(&self, lane: ArrayView1<'_, T>) -> T {
        lane.fold(T::ONE, |s, &v| s.mul(v))
    }
    fn fold(&self, acc: T, v: T) -> T {
        acc.mul(v)
    }
}

simd_twice! {
    /// The extreme of a contiguous run: eight running extremes compared without branches
    /// (which vectorizes), and whether a NaN was seen (`v != v`), which then is the result.
    fn extreme_slice<T>(s: &[T], max: bool) -> T as this {
        let Some(&first) = s.first() else {
            return T::ZERO;
        };
        let mut m = [first; 8];
        let mut nan = [false; 8];
        let chunks = s.chunks_exact(8);
        let rest = chunks.remainder();
        for c in chunks {
            for j in 0..8 {
                let v = c[j];
                let better = if max { T::less(m[j], v) } else { T::less(v, m[j]) };
                m[j] = if better { v } else { m[j] };
                #[allow(clippy::eq_op)]
                let is_nan = v != v;
                nan[j] |= is_nan;
            }
        }
        #[allow(clippy::eq_op)]
        if nan.iter().any(|&n| n) {
            return s.iter().copied().find(|&v| v != v).unwrap_or(first);
        }
        let f = if max { T::max } else { T::min };
        let folded = m.iter().fold(first, |a, &v| f(a, v));
        rest.iter().fold(folded, |a, &v| f(a, v))
    }
}

/// NaN-propagating extremes (never empty: empty ones are the CPU kernel's error).
struct Extreme(bool);
impl<T: HostElem> Reducer<T> for Extreme {
    fn lane(&self, lane: ArrayView1<'_, T>) -> T {
        let first = lane.first().copied().unwrap_or(T::ZERO);
        let f = if self.0 { T::max } else { T::min };
        match lane.as_slice() {
            Some(s) => extreme_slice(s, self.0),
            None => lane.fold(first, |m, &v| f(m, v)),
        }
    }
    fn fold(&self, acc: T, v: T) -> T {
        if self.0 {
            T::max(acc, v)
        } else {
            T::min(acc, v)
        }
    }
}

/// The reduction along one axis (also the sum of the PyTorch-style kernels' `sum.dim`).
pub(super) fn along<T: HostElem>(
    x: &ArrayViewD<'_, T>,
    axis: Axis,
    r: &dyn Reducer<T>,
    what: &(dyn Fn() -> String + Sync),
) -> Result<ArrayD<T>> {
    let n = x.len_of(axis);
    if n > 1 && x.ndim() > 1 && x.stride_of(axis) != 1 {
        // Row by row, so the inner loops run along memory (NumPy's order, too).
        let mut out = try_copy(&x.index_axis(axis, 0), what)?;
        for i in 1..n {
            Zip::from(&mut out)
                .and(&x.index_axis(axis, i))
                .for_each(|o, &v| *o = r.fold(*o, v));
        }
        return Ok(out);
    }
    try_lanes(x, axis, what, |lane| r.lane(lane))
}

/// The reduction of `x` over `dims` (sorted high to low).
fn reduce_typed<T: HostElem>(
    x: &ArrayD<T>,
    dims: &[usize],
    keepdims: bool,
    r: &dyn Reducer<T>,
    what: &(dyn Fn() -> String + Sync),
) -> Result<ArrayD<T>> {
    let ndim = x.ndim();
    let trailing = dims.iter().enumerate().all(|(i, &d)| d == ndim - 1 - i);
    let mut out = if trailing && x.is_standard_layout() && !dims.is_empty() {
        // The reduced axes are the last ones of C-ordered memory: one contiguous run per
        // result, as NumPy's iterator coalesces them.
        let inner: usize = x.shape()[ndim - dims.len()..].iter().product();
        let outer_shape = x.shape()[..ndim - dims.len()].to_vec();
        let outer: usize = outer_shape.iter().product();
        let flat = x
            .view()
            .into_shape_with_order((outer, inner))
            .map_err(|e| crate::error::Error::Kernel {
                context: what(),
                message: e.to_string(),
            })?
            .into_dimensionality::<Ix2>()
            .map_err(|e| crate::error::Error::Kernel {
                context: what(),
                message: e.to_string(),
            })?;
        let rows = try_lanes(&flat.into_dyn(), Axis(1), what, |lane| r.lane(lane))?;
        rows.into_shape_with_order(outer_shape)
            .map_err(|e| crate::error::Error::Kernel {
                context: what(),
                message: e.to_string(),
            })?
    } else {
        let mut r_: Option<ArrayD<T>> = None;
        for &d in dims {
            let src = r_.as_ref().map_or_else(|| x.view(), |a| a.view());
            r_ = Some(along(&src, Axis(d), r, what)?);
        }
        match r_ {
            Some(a) => a,
            None => try_copy(&x.view(), what)?,
        }
    };
    if keepdims {
        let mut sorted = dims.to_vec();
        sorted.sort_unstable();
        for d in sorted {
            out.insert_axis_inplace(Axis(d));
        }
    }
    Ok(out)
}

/// The reduction `R` of `h` (already in the dtype it reduces in).
fn reduce_host<const R: u8>(
    h: &HostArray,
    dims: &[usize],
    keepdims: bool,
    what: &(dyn Fn() -> String + Sync),
) -> Result<HostArray> {
    with_elem!(h.dtype(), T => {
        let x = T::of(h).ok_or_else(|| crate::error::Error::Kernel {
            context: what(),
            message: "the array is not of its own dtype".into(),
        })?;
        let r: &dyn Reducer<T> = match R {
            PROD => &Prod,
            MAX => &Extreme(true),
            MIN => &Extreme(false),
            _ => &Sum,
        };
        Ok(T::wrap(reduce_typed(x, dims, keepdims, r, what)?))
    })
}

/// `sum / count` as NumPy's `mean` divides: in float64 (complex128) by the count, then cast
/// back to `out`.
fn divide(h: &HostArray, count: usize, out: DType, what: &dyn Fn() -> String) -> Result<HostArray> {
    let n = count as f64;
    let q = match cast_host(
        h,
        if out.kind() == Kind::Complex {
            DType::C128
        } else {
            DType::F64
        },
        what,
    )? {
        HostArray::F64(a) => HostArray::F64(try_map(&a.view(), what, |v| v / n)?),
        HostArray::C128(a) => HostArray::C128(try_map(&a.view(), what, |v| {
            super::elem::Elem::div(v, Complex::new(n, 0.0))
        })?),
        other => other,
    };
    if q.dtype() == out {
        Ok(q)
    } else {
        cast_host(&q, out, what)
    }
}

/// The sum of a contiguous run of `T` in the wider integer `A`, each element cast as it is
/// read (no copy); integer sums wrap, so any order gives NumPy's result.
fn sum_widened<T: HostElem + Cast<A>, A: HostElem>(s: &[T]) -> A {
    let mut acc = [A::ZERO; 8];
    let chunks = s.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..8 {
            acc[j] = acc[j].add(c[j].cast());
        }
    }
    let total = acc.iter().fold(A::ZERO, |t, &v| t.add(v));
    rest.iter().fold(total, |t, &v| t.add(v.cast()))
}

/// `sum` of a bool or integer array into int64/uint64 over its last axes (all of them, or
/// `axis=-1`...) of C-ordered memory, without a widened copy; `None` for other layouts.
fn integer_sum(
    a: &HostArray,
    acc: DType,
    dims: &[usize],
    keepdims: bool,
    what: &(dyn Fn() -> String + Sync),
) -> Result<Option<HostArray>> {
    let ndim = a.shape().len();
    let trailing = dims.iter().enumerate().all(|(i, &d)| d == ndim - 1 - i);
    let inner: usize = a.shape()[ndim - dims.len().min(ndim)..].iter().product();
    if !trailing || dims.is_empty() || inner == 0 {
        return Ok(None);
    }
    let mut shape = a.shape()[..ndim - dims.len()].to_vec();
    let out = with_elem!(a.dtype(), T => {
        let Some(s) = T::of(a).and_then(|x| x.as_slice()) else {
            return Ok(None);
        };
        run_blocking(s.len(), || -> Result<HostArray> {
            let starts: Vec<usize> = (0..s.len() / inner).collect();
            Ok(match acc {
                DType::U64 => HostArray::U64(super::alloc::try_map_slice(&shape, &starts, what, |r| {
                    sum_widened::<T, u64>(&s[r * inner..(r + 1) * inner])
                })?),
                // `reduction` calls this for int64 and uint64 only.
                _ => HostArray::I64(super::alloc::try_map_slice(&shape, &starts, what, |r| {
                    sum_widened::<T, i64>(&s[r * inner..(r + 1) * inner])
                })?),
            })
        })?
    });
    let mut out = out;
    if keepdims {
        shape.extend(std::iter::repeat_n(1, dims.len()));
        out = crate::tensor::host_map!(out, x => x.into_shape_with_order(shape.clone()).map_err(|e| {
            crate::error::Error::Kernel { context: what(), message: e.to_string() }
        })?);
    }
    Ok(Some(out))
}

/// The result of reduction `R`; `None`: not covered here.
fn reduction<const R: u8>(op: &OperatorHandle, stack: &Stack) -> Result<Option<Tensor>> {
    let Some((a, device)) = native_host(stack.first()) else {
        return Ok(None);
    };
    let with_dtype = R == SUM || R == PROD;
    let (dtype_arg, keep_arg) = if with_dtype {
        (stack.get(2), stack.get(3))
    } else {
        (None, stack.get(2))
    };
    let keepdims = matches!(keep_arg, Some(IValue::Bool(true)));
    let axis_arg = stack.get(1);
    if matches!(axis_arg, Some(IValue::IntList(v)) if v.is_empty()) {
        return Ok(None); // `axis=()`: nothing reduced, a cast copy; the CPU kernel's.
    }
    let dims = reduce_dims(axis_arg, a.shape().len()).map_err(|m| kernel_error(op, m))?;
    let count: usize = dims.iter().map(|&d| a.shape()[d]).product();
    let d = a.dtype();
    let (reduce_in, out) = match R {
        SUM | PROD => {
            let acc = match dtype_arg {
                None | Some(IValue::None) => accumulation(d),
                Some(IValue::Str(name)) => match DType::from_name(name) {
                    Some(acc) if safe(d, acc) => acc,
                    _ => return Ok(None),
                },
                _ => return Ok(None),
            };
            (acc, acc)
        }
        MEAN => match d.kind() {
            _ if count == 0 => return Ok(None),
            Kind::Float | Kind::Complex => (d, d),
            _ => (DType::F64, DType::F64),
        },
        _ if count == 0 || d.kind() == Kind::Complex => return Ok(None),
        _ => (d, d),
    };
    let what = result_of(op);
    let widens = matches!(reduce_in, DType::I64 | DType::U64) && reduce_in != d;
    if R == SUM && widens && matches!(d.kind(), Kind::Bool | Kind::Signed | Kind::Unsigned) {
        if let Some(out) = integer_sum(&a, reduce_in, &dims, keepdims, &what)? {
            return Ok(Some(Tensor::host(device, out)));
        }
    }
    let out = run_blocking(a.shape().iter().product(), || -> Result<HostArray> {
        let cast;
        let x: &HostArray = if reduce_in == d {
            &a
        } else {
            cast = cast_host(&a, reduce_in, &what)?;
            &cast
        };
        let r = reduce_host::<R>(x, &dims, keepdims, &what)?;
        if R == MEAN {
            divide(&r, count, out, &what)
        } else {
            Ok(r)
        }
    })?;
    Ok(Some(Tensor::host(device, out)))
}

/// The kernel of reduction `R`.
pub(super) fn kernel<const R: u8>(
    op: &OperatorHandle,
    _keys: DispatchKeySet,
    stack: &mut Stack,
) -> Result<()> {
    match reduction::<R>(op, stack)? {
        Some(t) => {
            // The stack keeps its memory: the arguments go, the result takes their place.
            stack.clear();
            stack.push(IValue::Tensor(t));
            Ok(())
        }
        None if R == SUM || R == PROD => fall_back::<(Tensor, IValue, IValue, bool)>(op, stack),
        None => fall_back::<(Tensor, IValue, bool)>(op, stack),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairwise_sums_add_every_element() {
        for n in [0usize, 1, 7, 8, 9, 127, 128, 129, 1000, 4099] {
            let v: Vec<f64> = (0..n).map(|i| i as f64).collect();
            assert_eq!(sum_slice(&v), (n * n.saturating_sub(1) / 2) as f64, "{n}");
            let c: Vec<Complex<f64>> = (0..n).map(|i| Complex::new(i as f64, 1.0)).collect();
            let s = sum_slice(&c);
            assert_eq!(
                (s.re, s.im),
                ((n * n.saturating_sub(1) / 2) as f64, n as f64),
                "{n}"
            );
            let i: Vec<i64> = (0..n as i64).collect();
            assert_eq!(sum_slice(&i), (n * n.saturating_sub(1) / 2) as i64);
        }
    }

    #[test]
    fn extremes_propagate_nan() {
        let x = ndarray::arr1(&[1.0, f64::NAN, 3.0]);
        assert!(Reducer::<f64>::lane(&Extreme(true), x.view()).is_nan());
        let y = ndarray::arr1(&[2i8, -5, 7]);
        assert_eq!(Reducer::<i8>::lane(&Extreme(false), y.view()), -5);
    }
}
