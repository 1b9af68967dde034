//! NumPy arrays copied into Rust host memory (a Native tensor's).

use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::error::{Error, Result};
use crate::python::errors::from_pyerr;
use crate::python::ffi::contiguous_parts;
use crate::tensor::{DType, HostArray, Tensor};

/// What Rust host memory (a Native tensor) cannot hold.
fn unsupported(dtype: &str) -> Error {
    Error::DType {
        dtype: dtype.to_string(),
        context: "a Native tensor (Rust host memory)".into(),
        supported: crate::tensor::DType::supported_names(),
    }
}

/// A C-ordered array of `shape` over `v`. Arrays of up to four dimensions are built with a
/// fixed dimension first: ndarray's dynamic-dimension constructor spends about 40 ns on
/// strides and checks, as long as a one-element copy takes.
fn array_from_vec<T>(shape: &[usize], v: Vec<T>) -> Option<ndarray::ArrayD<T>> {
    use ndarray::Array;
    match *shape {
        [] => Array::from_shape_vec((), v).ok().map(Array::into_dyn),
        [n] if n == v.len() => Some(Array::from_vec(v).into_dyn()),
        [a, b] => Array::from_shape_vec((a, b), v).ok().map(Array::into_dyn),
        [a, b, c] => Array::from_shape_vec((a, b, c), v)
            .ok()
            .map(Array::into_dyn),
        [a, b, c, d] => Array::from_shape_vec((a, b, c, d), v)
            .ok()
            .map(Array::into_dyn),
        _ => ndarray::ArrayD::from_shape_vec(shape, v).ok(),
    }
}

/// The element type of host memory a NumPy dtype is, by its kind and size (NumPy's `int64` is
/// `long` or `long long`, which are both `i8`); `None` for a dtype host memory does not hold.
fn host_dtype(kind: u8, size: usize) -> Option<DType> {
    Some(match (kind, size) {
        (b'b', 1) => DType::Bool,
        (b'i', 1) => DType::I8,
        (b'i', 2) => DType::I16,
        (b'i', 4) => DType::I32,
        (b'i', 8) => DType::I64,
        (b'u', 1) => DType::U8,
        (b'u', 2) => DType::U16,
        (b'u', 4) => DType::U32,
        (b'u', 8) => DType::U64,
        (b'f', 4) => DType::F32,
        (b'f', 8) => DType::F64,
        (b'c', 8) => DType::C64,
        (b'c', 16) => DType::C128,
        _ => return None,
    })
}

/// Element types with kept one-element arrays, of no dimension and of shape `[1]`, for
/// `plain_to_host` to clone: a one-element result (every scalar-sized call's) is then one
/// allocation and a copy of the kept shape and strides, where building an `ArrayD` from a
/// `Vec` spends more than that on ndarray's dynamic-dimension constructor (an `IxDyn` from a
/// slice zeroes four values, copies the slice over them and reads all back, a store-forwarding
/// stall, twice; and its checks).
trait OneElement: Sized + 'static {
    /// `[no dimension, [1]]`, each holding one zero.
    fn kept() -> &'static [ndarray::ArrayD<Self>; 2];
}

macro_rules! one_element {
    ($($t:ty),*) => {$(
        impl OneElement for $t {
            fn kept() -> &'static [ndarray::ArrayD<Self>; 2] {
                static KEPT: std::sync::LazyLock<[ndarray::ArrayD<$t>; 2]> =
                    std::sync::LazyLock::new(|| {
                        let zero = <$t>::default();
                        [
                            ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), zero),
                            ndarray::ArrayD::from_elem(ndarray::IxDyn(&[1]), zero),
                        ]
                    });
                &KEPT
            }
        }
    )*};
}
one_element!(bool, i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);
one_element!(numpy::Complex32, numpy::Complex64);

/// The copy of a NumPy array that is C-contiguous, aligned, and of a dtype host memory holds
/// in native byte order, read from the array object's own fields (a subclass's object has
/// them too), not through rust-numpy's typed cast, which tries the dtypes one by one (NumPy's
/// dtype comparison for each) and reads the shape twice. This is the copy of every NumPy
/// result a Python CPU kernel hands a Native tensor (a third of the fallback's own work on one
/// element went there). `None` for any other array.
///
/// `finish` takes the copy where it is made (`Tensor::host` for a result that becomes a tensor):
/// the array is moved once, into its final place, rather than handed back up through the
/// callers' `Option` and `Result` (each move of the 120-byte array reloads what was just
/// stored, which stalls the processor more than the copy of one element costs).
#[inline(always)]
fn plain_to_host<R>(
    arr: &Bound<'_, PyUntypedArray>,
    finish: impl FnOnce(HostArray) -> R,
) -> Option<Result<R>> {
    let descr = arr.dtype();
    if descr.is_native_byteorder() == Some(false) {
        return None;
    }
    let dtype = host_dtype(descr.kind(), descr.itemsize())?;
    let (data, shape) = contiguous_parts(arr)?;
    let n = crate::native::alloc::element_count(shape, dtype.size())?;
    macro_rules! copy_as {
        ($t:ty) => {{
            let ptr = data.cast::<$t>().cast_const();
            if n > 0 && (ptr.is_null() || !ptr.is_aligned()) {
                return None;
            }
            // SAFETY: a C-contiguous array of `n` elements of this dtype (its kind and size
            // are `$t`'s, in native byte order) holds them at `data`, aligned (checked above),
            // in memory the array keeps alive while we hold it, with the GIL held and no
            // Python code run until the copy is made (as rust-numpy's `as_slice` reads it).
            // NumPy's booleans are the bytes 0 and 1, as Rust's. An empty array reads no
            // memory. Exercised by tests/python/test_native_memory.py and every fallback
            // whose kernel returns a NumPy array to a Native tensor (test_native.py).
            if n == 1 && shape.len() <= 1 {
                // One element, of no dimension or of shape `[1]`: a clone of the kept array
                // of that shape, with the element written in.
                // SAFETY: as below, for the one element (`n` is 1: `ptr` is not null and is
                // aligned, checked above).
                let value = unsafe { ptr.read() };
                let mut a = <$t as OneElement>::kept()[shape.len()].clone();
                if let Some(x) = a.first_mut() {
                    *x = value;
                }
                return Some(Ok(finish(HostArray::from(a))));
            }
            let slice: &[$t] = if n == 0 {
                &[]
            } else {
                unsafe { std::slice::from_raw_parts(ptr, n) }
            };
            let what = || format!("a Native copy of a {} array", dtype.name());
            crate::native::alloc::try_copy_slice(slice, &what).and_then(|v| {
                match array_from_vec(shape, v) {
                    Some(a) => Ok(finish(HostArray::from(a))),
                    None => Err(Error::Kernel {
                        context: what(),
                        message: format!("{n} values do not fill the shape {shape:?}"),
                    }),
                }
            })
        }};
    }
    Some(match dtype {
        DType::Bool => copy_as!(bool),
        DType::I8 => copy_as!(i8),
        DType::I16 => copy_as!(i16),
        DType::I32 => copy_as!(i32),
        DType::I64 => copy_as!(i64),
        DType::U8 => copy_as!(u8),
        DType::U16 => copy_as!(u16),
        DType::U32 => copy_as!(u32),
        DType::U64 => copy_as!(u64),
        DType::F32 => copy_as!(f32),
        DType::F64 => copy_as!(f64),
        DType::C64 => copy_as!(numpy::Complex32),
        DType::C128 => copy_as!(numpy::Complex64),
    })
}

/// The copy of an array (an `ndarray` or a subclass, whose object has the same fields) that is
/// C-contiguous, aligned, and of a dtype Rust host memory holds in native byte order; `None`
/// for any other array or object.
fn contiguous_to_host(obj: &Bound<'_, PyAny>) -> Option<Result<HostArray>> {
    plain_to_host(obj.cast::<PyUntypedArray>().ok()?, |h| h)
}

/// Whether Rust host memory holds elements of `dtype`.
fn holds(dtype: &Bound<'_, PyArrayDescr>) -> bool {
    let py = dtype.py();
    dtype.is_equiv_to(&numpy::dtype::<f64>(py))
        || dtype.is_equiv_to(&numpy::dtype::<f32>(py))
        || dtype.is_equiv_to(&numpy::dtype::<i64>(py))
        || dtype.is_equiv_to(&numpy::dtype::<i32>(py))
        || dtype.is_equiv_to(&numpy::dtype::<bool>(py))
        || dtype.is_equiv_to(&numpy::dtype::<i8>(py))
        || dtype.is_equiv_to(&numpy::dtype::<i16>(py))
        || dtype.is_equiv_to(&numpy::dtype::<u8>(py))
        || dtype.is_equiv_to(&numpy::dtype::<u16>(py))
        || dtype.is_equiv_to(&numpy::dtype::<u32>(py))
        || dtype.is_equiv_to(&numpy::dtype::<u64>(py))
        || dtype.is_equiv_to(&numpy::dtype::<numpy::Complex32>(py))
        || dtype.is_equiv_to(&numpy::dtype::<numpy::Complex64>(py))
}

/// Copies a NumPy array into Rust host memory. An array that is C-contiguous, aligned and in
/// native byte order copies as one slice. Any other array of a dtype host memory holds
/// (strided, broadcast, unaligned, or byte-swapped: `>f8` on a little-endian machine) is first
/// made so by NumPy (`np.require(a, a.dtype.newbyteorder("="), "CA")`, the same values): a
/// big-endian array of a supported dtype is thus taken, converted, for the price of the one
/// copy a strided array costs too. Another dtype is an `Error::DType` naming it and the
/// supported ones; memory that cannot be allocated is an `Error::OutOfMemory` (or NumPy's own
/// `MemoryError`), never an abort.
pub fn numpy_to_host(obj: &Bound<'_, PyAny>) -> Result<HostArray> {
    if let Some(host) = contiguous_to_host(obj) {
        return host;
    }
    numpy_to_host_slow(obj)
}

/// `numpy_to_host` of a plain `numpy.ndarray` (the caller checked its type once), as a CPU
/// tensor made where the copy is (see `plain_to_host`).
pub fn plain_numpy_to_cpu(arr: &Bound<'_, PyUntypedArray>) -> Result<Tensor> {
    let cpu = |h| Tensor::host(crate::tensor::Device::CPU, h);
    match plain_to_host(arr, cpu) {
        Some(t) => t,
        None => numpy_to_host_slow(arr.as_any()).map(cpu),
    }
}

/// `numpy_to_host` of an array that is not C-contiguous, aligned and of a dtype host memory
/// holds in native byte order, or of another object.
fn numpy_to_host_slow(obj: &Bound<'_, PyAny>) -> Result<HostArray> {
    let Ok(arr) = obj.cast::<PyUntypedArray>() else {
        let type_name = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into());
        return Err(unsupported(&format!(
            "of a {type_name} (not a NumPy array)"
        )));
    };
    let dtype = arr.dtype();
    let native = dtype
        .call_method1("newbyteorder", ("=",))
        .and_then(|d| d.cast_into::<PyArrayDescr>().map_err(Into::into))
        .map_err(from_pyerr)?;
    if !holds(&native) {
        return Err(unsupported(&dtype.to_string()));
    }
    let c = obj
        .py()
        .import("numpy")
        .and_then(|np| np.getattr("require"))
        .and_then(|require| require.call1((obj, native, "CA")))
        .map_err(from_pyerr)?;
    contiguous_to_host(&c).unwrap_or_else(|| Err(unsupported(&dtype.to_string())))
}
