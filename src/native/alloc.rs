//! Fallible host allocation. ndarray's constructors and arithmetic abort the process when the
//! allocator refuses (`memory allocation of N bytes failed`); everything that allocates a
//! tensor's data here checks the size for overflow first, reserves with `try_reserve_exact`,
//! and reports a refusal as [`Error::OutOfMemory`], which the bindings raise as `MemoryError`
//! as NumPy does. Arrays are built from the reserved `Vec` (C order), so a failed call has
//! changed nothing.
//!
//! Native's loops (the vectorised map and zip the kernels run) live here too. The file stands
//! on the error type alone, so that the host storage of `tensor.rs` (a fallible clone) can use
//! it without reaching any other part of the Native backend.

use std::mem::MaybeUninit;

use ndarray::{ArrayD, ArrayView1, ArrayViewD, ArrayViewMutD, Axis, IxDyn, Zip};

use crate::error::{Error, Result};

/// The element count of `shape` if its bytes (at `size` bytes each) fit in `isize`, as every
/// allocation must.
pub(crate) fn element_count(shape: &[usize], size: usize) -> Option<usize> {
    let n = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?;
    let bytes = n.checked_mul(size.max(1))?;
    (bytes <= isize::MAX as usize).then_some(n)
}

fn out_of_memory(what: &dyn Fn() -> String, shape: &[usize], size: usize) -> Error {
    let bytes = shape
        .iter()
        .try_fold(size, |n, &d| n.checked_mul(d))
        .filter(|&b| b <= isize::MAX as usize);
    Error::OutOfMemory {
        what: format!("{} (shape {shape:?})", what()),
        bytes,
    }
}

/// An empty `Vec` with room for the elements of `shape`, and their count; or `OutOfMemory`.
pub(crate) fn try_vec_for<T>(
    shape: &[usize],
    what: &dyn Fn() -> String,
) -> Result<(Vec<T>, usize)> {
    let size = std::mem::size_of::<T>();
    let n = element_count(shape, size).ok_or_else(|| out_of_memory(what, shape, size))?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| out_of_memory(what, shape, size))?;
    advise_huge_pages(&mut v);
    Ok((v, n))
}

/// Asks the kernel to back a large new buffer (4 MiB or more) with huge pages, as NumPy does
/// for its arrays: a kernel that writes a fresh 8 MB result otherwise takes 2048 page faults,
/// which cost as much as the arithmetic. A hint; nothing changes if it is refused.
fn advise_huge_pages<T>(v: &mut Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let bytes = v.capacity() * std::mem::size_of::<T>();
        if bytes < 1 << 22 {
            return;
        }
        let start = v.as_mut_ptr() as usize;
        let offset = (PAGE - start % PAGE) % PAGE;
        // SAFETY: the range [start + offset, start + bytes) lies inside the allocation `v`
        // owns (its capacity is `bytes` bytes), and starts on a page boundary, as madvise(2)
        // requires; MADV_HUGEPAGE only changes how the kernel backs those pages, never their
        // contents, and its failure (an error return) is ignored. Exercised by every test
        // that makes a large Native array (tests/python/test_native_kernels.py's large-kernel
        // test, the 1M-element benchmarks).
        unsafe {
            libc::madvise(
                (start + offset) as *mut libc::c_void,
                bytes - offset,
                libc::MADV_HUGEPAGE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = v;
}

/// A C-ordered array of `shape` over `v` (which holds exactly its elements).
fn array_of<T>(shape: &[usize], v: Vec<T>, what: &dyn Fn() -> String) -> Result<ArrayD<T>> {
    // A 0-d or 1-d array is built with its fixed dimension first: the dynamic constructor
    // spends as long on strides and checks as a small kernel on its arithmetic.
    match *shape {
        [] if v.len() == 1 => {
            return ndarray::Array0::from_shape_vec((), v)
                .map(|a| a.into_dyn())
                .map_err(|e| shape_error(what, shape, e))
        }
        [n] if n == v.len() => return Ok(ndarray::Array1::from_vec(v).into_dyn()),
        _ => {}
    }
    ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| shape_error(what, shape, e))
}

fn shape_error(what: &dyn Fn() -> String, shape: &[usize], e: ndarray::ShapeError) -> Error {
    Error::Kernel {
        context: what(),
        message: format!("cannot make an array of shape {shape:?}: {e}"),
    }
}

/// An array of `shape` whose elements `fill` writes. `fill` gets a `Zip` whose first producer
/// is the output and must run its `for_each`, writing each element (every caller in this module
/// does, in one expression).
fn build<T: Copy>(
    shape: &[usize],
    what: &dyn Fn() -> String,
    fill: impl FnOnce(Zip<(ArrayViewMutD<'_, MaybeUninit<T>>,), IxDyn>),
) -> Result<ArrayD<T>> {
    let (mut v, n) = try_vec_for::<T>(shape, what)?;
    let out =
        ArrayViewMutD::from_shape(IxDyn(shape), &mut v.spare_capacity_mut()[..n]).map_err(|e| {
            Error::Kernel {
                context: what(),
                message: format!("cannot make an array of shape {shape:?}: {e}"),
            }
        })?;
    fill(Zip::from(out));
    // SAFETY: `out` covered the first `n` slots of `v`'s spare capacity (`from_shape` checked
    // that `shape` has exactly `n` elements over that slice), and `fill` ran `for_each` on a
    // Zip whose first producer is `out`, which visits each of its elements exactly once and
    // writes it; so all `n` are initialized. `T: Copy`: had `fill` panicked instead, the `Vec`,
    // still of length 0, would drop without reading them. Exercised by this module's tests and
    // every Native kernel test (tests/native_kernels.rs, tests/python/test_native_kernels.py).
    unsafe { v.set_len(n) };
    array_of(shape, v, what)
}

/// An error for slices whose lengths do not match the shape they are to fill.
fn wrong_length(what: &dyn Fn() -> String, shape: &[usize], len: usize) -> Error {
    Error::Kernel {
        context: what(),
        message: format!("{len} values do not fill the shape {shape:?}"),
    }
}

/// Whether the CPU has AVX-512F and BW (the loops of large results use them, as NumPy's do).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
}

/// Writes `f(x)` into each slot of `out` (as many as `xs` has: the callers pass equal lengths).
/// Compiled twice on x86-64: for the baseline and for AVX2, chosen at run time as NumPy chooses
/// its loops, so the flat loop vectorizes four or eight elements wide where the CPU can.
#[inline(always)]
fn map_into<A: Copy, T: Copy>(out: &mut [MaybeUninit<T>], xs: &[A], f: &impl Fn(A) -> T) {
    #[inline(always)]
    fn run<A: Copy, T: Copy>(out: &mut [MaybeUninit<T>], xs: &[A], f: &impl Fn(A) -> T) {
        for (o, &a) in out.iter_mut().zip(xs) {
            o.write(f(a));
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2<A: Copy, T: Copy>(out: &mut [MaybeUninit<T>], xs: &[A], f: &impl Fn(A) -> T) {
            run(out, xs, f)
        }
        #[target_feature(enable = "avx512f,avx512bw")]
        fn avx512<A: Copy, T: Copy>(out: &mut [MaybeUninit<T>], xs: &[A], f: &impl Fn(A) -> T) {
            run(out, xs, f)
        }
        if out.len() >= 4096 && has_avx512() {
            // SAFETY: the CPU has AVX-512F and BW (checked at run time just above), the one
            // requirement of calling a function compiled with them. Exercised by the large
            // Native kernel tests (tests/python/test_native_array_api_kernels.py) on such CPUs.
            unsafe { avx512(out, xs, f) };
            return;
        }
        if out.len() >= 64 && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked at run time just above), the one requirement
            // of calling a function compiled with it. Exercised by the Native kernel tests
            // (tests/python/test_native_array_api_kernels.py) on any AVX2 machine.
            unsafe { avx2(out, xs, f) };
            return;
        }
    }
    run(out, xs, f)
}

/// Writes `f(x, y)` into each slot of `out` (see `map_into`).
#[inline(always)]
fn zip_into<A: Copy, B: Copy, T: Copy>(
    out: &mut [MaybeUninit<T>],
    xs: &[A],
    ys: &[B],
    f: &impl Fn(A, B) -> T,
) {
    #[inline(always)]
    fn run<A: Copy, B: Copy, T: Copy>(
        out: &mut [MaybeUninit<T>],
        xs: &[A],
        ys: &[B],
        f: &impl Fn(A, B) -> T,
    ) {
        for ((o, &a), &b) in out.iter_mut().zip(xs).zip(ys) {
            o.write(f(a, b));
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2<A: Copy, B: Copy, T: Copy>(
            out: &mut [MaybeUninit<T>],
            xs: &[A],
            ys: &[B],
            f: &impl Fn(A, B) -> T,
        ) {
            run(out, xs, ys, f)
        }
        #[target_feature(enable = "avx512f,avx512bw")]
        fn avx512<A: Copy, B: Copy, T: Copy>(
            out: &mut [MaybeUninit<T>],
            xs: &[A],
            ys: &[B],
            f: &impl Fn(A, B) -> T,
        ) {
            run(out, xs, ys, f)
        }
        if out.len() >= 4096 && has_avx512() {
            // SAFETY: the CPU has AVX-512F and BW (checked at run time just above), the one
            // requirement of calling a function compiled with them. Exercised by the large
            // Native kernel tests (tests/python/test_native_array_api_kernels.py) on such CPUs.
            unsafe { avx512(out, xs, ys, f) };
            return;
        }
        if out.len() >= 64 && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked at run time just above), the one requirement
            // of calling a function compiled with it. Exercised by the Native kernel tests
            // (tests/python/test_native_array_api_kernels.py) on any AVX2 machine.
            unsafe { avx2(out, xs, ys, f) };
            return;
        }
    }
    run(out, xs, ys, f)
}

/// `f` of each element of the slice `xs` (C-ordered, of `shape`), as a new array: one flat
/// loop, which the compiler vectorizes.
pub(crate) fn try_map_slice<A: Copy, T: Copy>(
    shape: &[usize],
    xs: &[A],
    what: &dyn Fn() -> String,
    f: impl Fn(A) -> T,
) -> Result<ArrayD<T>> {
    let (mut v, n) = try_vec_for::<T>(shape, what)?;
    if xs.len() != n {
        return Err(wrong_length(what, shape, xs.len()));
    }
    map_into(&mut v.spare_capacity_mut()[..n], xs, &f);
    // SAFETY: `map_into` zipped the first `n` slots of `v`'s spare capacity with `xs`, which
    // has exactly `n` elements (checked above), and wrote each slot; so all `n` are initialized.
    // `T: Copy`: had `f` panicked, the `Vec`, still of length 0, would drop without reading
    // them. Exercised by this module's tests and every Native kernel test.
    unsafe { v.set_len(n) };
    array_of(shape, v, what)
}

/// `f` of each pair of the slices `xs` and `ys` (C-ordered, both of `shape`), as a new array:
/// one flat loop, which the compiler vectorizes.
pub(crate) fn try_zip_slices<A: Copy, B: Copy, T: Copy>(
    shape: &[usize],
    xs: &[A],
    ys: &[B],
    what: &dyn Fn() -> String,
    f: impl Fn(A, B) -> T,
) -> Result<ArrayD<T>> {
    let (mut v, n) = try_vec_for::<T>(shape, what)?;
    if xs.len() != n || ys.len() != n {
        return Err(wrong_length(what, shape, xs.len().min(ys.len())));
    }
    zip_into(&mut v.spare_capacity_mut()[..n], xs, ys, &f);
    // SAFETY: `zip_into` zipped the first `n` slots of `v`'s spare capacity with `xs` and `ys`,
    // which have exactly `n` elements each (checked above), and wrote each slot; so all `n` are
    // initialized. `T: Copy`: had `f` panicked, the `Vec`, still of length 0, would drop
    // without reading them. Exercised by this module's tests and every Native kernel test.
    unsafe { v.set_len(n) };
    array_of(shape, v, what)
}

/// `f` of each element of `x`, as a new C-ordered array.
pub(crate) fn try_map<A: Copy, T: Copy>(
    x: &ArrayViewD<'_, A>,
    what: &dyn Fn() -> String,
    f: impl Fn(A) -> T,
) -> Result<ArrayD<T>> {
    if let Some(xs) = x.as_slice() {
        return try_map_slice(x.shape(), xs, what, f);
    }
    build(x.shape(), what, |z| {
        z.and(x).for_each(|o, &a| {
            o.write(f(a));
        })
    })
}

/// A C-ordered copy of `x` (which may be any view: transposed, strided).
pub(crate) fn try_copy<A: Copy>(
    x: &ArrayViewD<'_, A>,
    what: &dyn Fn() -> String,
) -> Result<ArrayD<A>> {
    try_map(x, what, |a| a)
}

/// `f` of each pair of `x` and `y` broadcast to `shape` (which they must broadcast to).
pub(crate) fn try_zip<A: Copy, B: Copy, T: Copy>(
    shape: &[usize],
    x: &ArrayViewD<'_, A>,
    y: &ArrayViewD<'_, B>,
    what: &dyn Fn() -> String,
    f: impl Fn(A, B) -> T,
) -> Result<ArrayD<T>> {
    let not_broadcast = || Error::Kernel {
        context: what(),
        message: format!(
            "shapes {:?} and {:?} do not broadcast to {shape:?}",
            x.shape(),
            y.shape()
        ),
    };
    if x.shape() == shape && y.shape() == shape {
        if let (Some(xs), Some(ys)) = (x.as_slice(), y.as_slice()) {
            return try_zip_slices(shape, xs, ys, what, f);
        }
    }
    let xb = x.broadcast(IxDyn(shape)).ok_or_else(not_broadcast)?;
    let yb = y.broadcast(IxDyn(shape)).ok_or_else(not_broadcast)?;
    build(shape, what, |z| {
        z.and(&xb).and(&yb).for_each(|o, &a, &b| {
            o.write(f(a, b));
        })
    })
}

/// `f` of each lane of `x` along `axis`: an array of `x`'s shape without `axis`.
pub(crate) fn try_lanes<A: Copy, T: Copy>(
    x: &ArrayViewD<'_, A>,
    axis: Axis,
    what: &dyn Fn() -> String,
    f: impl Fn(ArrayView1<'_, A>) -> T,
) -> Result<ArrayD<T>> {
    let mut shape = x.shape().to_vec();
    shape.remove(axis.index());
    build(&shape, what, |z| {
        z.and(x.lanes(axis)).for_each(|o, lane| {
            o.write(f(lane));
        })
    })
}

/// An array of `shape` filled with `value`.
pub(crate) fn try_full<T: Copy>(
    shape: &[usize],
    value: T,
    what: &dyn Fn() -> String,
) -> Result<ArrayD<T>> {
    build(shape, what, |z| {
        z.for_each(|o| {
            o.write(value);
        })
    })
}

/// A copy of a slice, or `OutOfMemory` (the Python bindings copy NumPy arrays with it).
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub(crate) fn try_copy_slice<T: Copy>(s: &[T], what: &dyn Fn() -> String) -> Result<Vec<T>> {
    // Not through `try_vec_for`: a slice's length is a valid element count already, and its
    // `(Vec, count)` return went through memory, reloaded at once (a stall, at every
    // one-element copy of a result).
    let mut v = Vec::new();
    if v.try_reserve_exact(s.len()).is_err() {
        return Err(out_of_memory(what, &[s.len()], std::mem::size_of::<T>()));
    }
    advise_huge_pages(&mut v);
    v.extend_from_slice(s);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{arr2, ArrayD};

    fn what() -> String {
        "a test array".into()
    }

    #[test]
    fn flat_loops_fill_every_element_or_refuse_a_wrong_length() {
        let m = try_map_slice(&[2, 2], &[1, 2, 3, 4], &what, |v| v * 10).unwrap();
        assert_eq!(m, arr2(&[[10, 20], [30, 40]]).into_dyn());
        let z = try_zip_slices(&[3], &[1.0, 2.0, 3.0], &[0.5; 3], &what, |a, b| a - b).unwrap();
        assert_eq!(z.as_slice().unwrap(), &[0.5, 1.5, 2.5]);
        assert!(try_map_slice(&[3], &[1, 2], &what, |v| v).is_err());
        assert!(try_zip_slices(&[2], &[1, 2], &[1], &what, |a, b| a + b).is_err());
        let t = arr2(&[[1, 2], [3, 4]]).reversed_axes().into_dyn();
        assert_eq!(try_map(&t.view(), &what, |v| v).unwrap(), t); // strided: the Zip path
    }

    #[test]
    fn element_counts_overflow_to_none() {
        assert_eq!(element_count(&[2, 3], 8), Some(6));
        assert_eq!(element_count(&[], 8), Some(1));
        assert_eq!(element_count(&[0, usize::MAX], 8), Some(0));
        assert_eq!(element_count(&[1 << 32, 1 << 32], 1), None);
        assert_eq!(element_count(&[1 << 62], 8), None); // bytes overflow
        assert_eq!(element_count(&[1 << 61], 4), None); // bytes beyond isize::MAX
    }

    #[test]
    fn a_size_that_overflows_is_out_of_memory_not_an_abort() {
        let e = try_vec_for::<f64>(&[1 << 40, 1 << 40], &what)
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { bytes: None, .. }), "{e}");
        assert!(e.to_string().contains("a test array"), "{e}");
    }

    #[test]
    fn a_size_the_allocator_refuses_is_out_of_memory_not_an_abort() {
        // 2^52 bytes (4 PiB) fits in isize but in no address space of today's machines.
        let e = try_vec_for::<f64>(&[1 << 49], &what)
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(e, Error::OutOfMemory { bytes: Some(b), .. } if b == 1 << 52),
            "{e}"
        );
    }

    #[test]
    fn built_arrays_are_c_ordered_and_complete() {
        let x = arr2(&[[1, 2, 3], [4, 5, 6]]).into_dyn();
        let t = x.t().into_dyn();
        let copy = try_copy(&t.view(), &what).unwrap();
        assert_eq!(copy, x.t().to_owned().into_dyn());
        assert!(copy.is_standard_layout());
        let y = ndarray::arr1(&[10, 20, 30]).into_dyn();
        let sum = try_zip(&[2, 3], &x.view(), &y.view(), &what, |a, b| a + b).unwrap();
        assert_eq!(sum, arr2(&[[11, 22, 33], [14, 25, 36]]).into_dyn());
        let rows = try_lanes(&x.view(), Axis(1), &what, |l| l.sum()).unwrap();
        assert_eq!(rows, ndarray::arr1(&[6, 15]).into_dyn());
        let full = try_full(&[2, 0, 3], 1.5, &what).unwrap();
        assert_eq!(full.shape(), &[2, 0, 3]);
        assert_eq!(
            try_full(&[], 7, &what).unwrap(),
            ArrayD::from_elem(vec![], 7)
        );
        assert!(try_zip(&[2, 3], &x.view(), &x.t().into_dyn(), &what, |a, b| a + b).is_err());
    }

    #[test]
    fn copies_of_slices_are_equal() {
        assert_eq!(try_copy_slice(&[1.0, 2.0], &what).unwrap(), vec![1.0, 2.0]);
    }
}
