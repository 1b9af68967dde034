//! `bf.Tensor`, Python payloads, and the NumPy <-> host memory conversions.

use std::any::Any;
use std::sync::Arc;

use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use super::errors::{from_pyerr, IntoPy};
use super::ffi::{array_over, contiguous_parts, new_copy, read_only_parts, KnownType};
use super::gil_cell::GilCell;
use crate::backend::backend;
use crate::error::{Error, Result};
use crate::key::DispatchKey;
use crate::tensor::{DType, HostArray, Payload, Residency, Tensor, TensorData, TensorMeta};

/// A Python object as a tensor payload: a backend's device payload, or a NumPy array on CPU.
pub struct PyPayload(pub Py<PyAny>, Option<usize>);

impl PyPayload {
    /// The payload of `obj`; a plain ndarray's byte count is read now, once.
    pub fn new(obj: &Bound<'_, PyAny>) -> PyPayload {
        let fixed = obj
            .cast_exact::<PyUntypedArray>()
            .ok()
            .map(|a| a.len() * a.dtype().itemsize());
        PyPayload(obj.clone().unbind(), fixed)
    }
}

impl Payload for PyPayload {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn fixed_nbytes(&self) -> Option<usize> {
        self.1
    }

    fn nbytes(&self) -> usize {
        if let Some(n) = self.1 {
            return n;
        }
        Python::attach(|py| {
            let o = self.0.bind(py);
            // A plain ndarray's `nbytes` is its size times its item size.
            if o.is_exact_instance_of::<PyUntypedArray>() {
                if let Ok(a) = o.cast::<PyUntypedArray>() {
                    return a.len() * a.dtype().itemsize();
                }
            }
            o.getattr("nbytes")
                .and_then(|n| n.extract::<usize>())
                .unwrap_or(0)
        })
    }

    fn to_host(&self) -> Result<HostArray> {
        Python::attach(|py| numpy_to_host(self.0.bind(py)))
    }

    fn meta(&self) -> Option<TensorMeta> {
        Python::attach(|py| {
            let o = self.0.bind(py);
            if let Ok(a) = o.cast::<PyUntypedArray>() {
                return Some(TensorMeta {
                    dtype: a.dtype().str().ok()?.to_string(),
                    shape: a.shape().to_vec(),
                });
            }
            Some(TensorMeta {
                dtype: o.getattr("dtype").ok()?.str().ok()?.to_string(),
                shape: o.getattr("shape").ok()?.extract().ok()?,
            })
        })
    }

    fn duplicate(&self) -> Option<Result<Arc<dyn Payload>>> {
        Python::attach(|py| {
            let a = self.0.bind(py).cast::<PyUntypedArray>().ok()?;
            let copy = a.call_method0("copy").map_err(from_pyerr);
            Some(copy.map(|c| Arc::new(PyPayload::new(&c)) as Arc<dyn Payload>))
        })
    }

    fn assign(&self, src: &Tensor) -> Option<Result<()>> {
        Python::attach(|py| {
            let dst = self.0.bind(py).cast::<PyUntypedArray>().ok()?;
            let write = || -> PyResult<()> {
                let src = cpu_tensor_to_numpy(py, src, false)?;
                py.import("numpy")?.getattr("copyto")?.call1((dst, src))?;
                Ok(())
            };
            Some(write().map_err(from_pyerr))
        })
    }

    fn describe(&self) -> String {
        Python::attach(|py| {
            let o = self.0.bind(py);
            let dtype = o
                .getattr("dtype")
                .map(|d| d.to_string())
                .unwrap_or_else(|_| "?".into());
            let shape = o
                .getattr("shape")
                .and_then(|s| s.extract::<Vec<usize>>())
                .map(|s| format!("{s:?}"))
                .unwrap_or_else(|_| "[?]".into());
            format!("{dtype}{shape}")
        })
    }
}

/// The Python object a tensor's payload is, if it is one.
pub fn payload_object<'py>(py: Python<'py>, t: &Tensor) -> Option<Bound<'py, PyAny>> {
    data_object(py, &t.data())
}

/// The Python object a tensor's data is, if it is a Python payload.
pub fn data_object<'py>(py: Python<'py>, data: &TensorData) -> Option<Bound<'py, PyAny>> {
    let TensorData::Foreign(p) = data else {
        return None;
    };
    p.as_any()
        .downcast_ref::<PyPayload>()
        .map(|p| p.0.bind(py).clone())
}

/// A tensor on `device` whose payload is the Python object itself (no copy).
pub fn object_tensor(device: crate::tensor::Device, obj: &Bound<'_, PyAny>) -> Tensor {
    Tensor::foreign(device, Arc::new(PyPayload::new(obj)))
}

/// A NumPy array as a CPU tensor that holds the array object itself (no copy).
pub fn numpy_tensor(obj: &Bound<'_, PyAny>) -> Tensor {
    object_tensor(crate::tensor::Device::CPU, obj)
}

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

/// Keeps host memory alive for as long as a NumPy array that borrows it.
#[pyclass(frozen, module = "boxfall._boxfall")]
struct HostOwner {
    _data: Arc<HostArray>,
}

/// Host memory as NumPy: a read-only array that borrows it (lent), or a writable copy, which
/// NumPy makes (so that memory it cannot allocate is its own `MemoryError`). Any rank NumPy
/// supports (64 dimensions in NumPy 2, 32 before); beyond, NumPy's `ValueError`.
pub fn host_to_numpy<'py>(
    py: Python<'py>,
    host: Arc<HostArray>,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    // The owner takes the `Arc` itself (no second count to take and drop).
    let owner = Bound::new(py, HostOwner { _data: host })?;
    let host: &HostArray = &owner.get()._data;
    let owner = owner.clone().into_any();
    let lent = crate::tensor::host_match!(host, a => borrow_read_only(a, owner))?;
    if !writable {
        return Ok(lent);
    }
    new_copy(&lent.cast_into::<PyUntypedArray>()?)
}

/// A read-only NumPy array over `a`'s memory, whose base object `owner` keeps that memory
/// alive. Built with dimensions and strides of `a`'s own rank (rust-numpy's
/// `borrow_from_array` holds them in 32-slot arrays and panics beyond).
fn borrow_read_only<'py, T: numpy::Element>(
    a: &ndarray::ArrayD<T>,
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let itemsize = std::mem::size_of::<T>() as isize;
    let mut dims: Vec<isize> = a.shape().iter().map(|&d| d as isize).collect();
    let mut strides: Vec<isize> = a.strides().iter().map(|&s| s * itemsize).collect();
    let data = a.as_ptr().cast_mut().cast();
    // SAFETY: the data pointer and strides are those of `a`, whose memory `owner` keeps alive
    // (it holds the `Arc` of the `HostArray` that `a` is in), and the array is read-only. A
    // write replaces a tensor's `Arc` (tensor.rs), except for exported memory, which NumPy and
    // boxfall write in place through its raw pointer (host_memory.rs): this array then reads
    // the values as they are now, as NumPy's own read-only views of a written array do.
    // Exercised by tests/python/test_native.py (the lent-memory tests) and
    // test_native_memory.py (33 and more dimensions).
    unsafe { array_over::<T>(owner, &mut dims, &mut strides, data, false) }
}

/// A read-only NumPy view kept with the tensor it sees (`Tensor::host_view`), and what it
/// looked like when made: a kernel may reshape or retype the array object in place
/// (`a.shape = ...`), and such a view is not handed out again.
struct LentView {
    array: Py<PyUntypedArray>,
    data: usize,
    descr: usize,
    dims: Box<[isize]>,
    strides: Box<[isize]>,
}

impl LentView {
    fn new(array: &Bound<'_, PyAny>) -> Option<LentView> {
        let array = array.cast::<PyUntypedArray>().ok()?;
        let (data, descr, dims, strides) = read_only_parts(array)?;
        Some(LentView {
            array: array.clone().unbind(),
            data,
            descr,
            dims: dims.into(),
            strides: strides.into(),
        })
    }

    /// The view, if it is still read-only and as it was made.
    fn intact<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        let array = self.array.bind(py);
        let (data, descr, dims, strides) = read_only_parts(array)?;
        let same = data == self.data
            && descr == self.descr
            && same_values(dims, &self.dims)
            && same_values(strides, &self.strides);
        same.then(|| array.clone().into_any())
    }
}

/// `a == b`, compared in place: a slice's `==` calls `memcmp`, which costs more than the one or
/// two values of most arrays' shapes.
#[inline]
fn same_values(a: &[isize], b: &[isize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A CPU tensor as the NumPy array a Python kernel receives: as `cpu_tensor_to_numpy`, except
/// that a read-only view of host memory is made once per tensor and data and kept with the
/// tensor (Native lends one tensor, its loan, for its whole life; a write drops the view), so a
/// tensor lent on every call costs one view. Only kernels get kept views: a caller's `x.numpy()` is a new array each
/// time, as NumPy users expect of a method that returns a view.
pub fn kernel_array<'py>(
    py: Python<'py>,
    t: &Tensor,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if writable || !t.is_host() {
        return cpu_tensor_to_numpy(py, t, writable);
    }
    // Read in place (no Python code runs meanwhile: `intact` only reads the array's fields).
    let kept = t.with_host_view(|v| {
        v.and_then(|v| v.downcast_ref::<LentView>())
            .and_then(|view| view.intact(py))
    });
    if let Some(array) = kept {
        return Ok(array);
    }
    let array = cpu_tensor_to_numpy(py, t, false)?;
    if let Some(view) = LentView::new(&array) {
        t.set_host_view(Arc::new(view));
    }
    Ok(array)
}

/// A CPU tensor as a NumPy array: the caller's own array, a read-only view of host memory, or
/// (for an argument the kernel writes) a writable copy.
pub fn cpu_tensor_to_numpy<'py>(
    py: Python<'py>,
    t: &Tensor,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    match t.data() {
        TensorData::Foreign(p) => p
            .as_any()
            .downcast_ref::<PyPayload>()
            .map(|p| p.0.bind(py).clone())
            .ok_or_else(|| {
                super::errors::new_err(
                    py,
                    "BoxfallError",
                    format!(
                        "a CPU tensor on {} holds a payload Python cannot read",
                        t.device()
                    ),
                )
            }),
        TensorData::Host(h) => host_to_numpy(py, h, writable),
    }
}

/// A boxfall tensor on a device: `.device`, `.dtype`, `.shape`, `.payload`, `.numpy()`.
// No `freelist`: PyO3's free list takes a mutex on every allocation and every free, which
// cost more than Python's own small-object allocator does (about 190 instructions and four
// atomic operations a one-element fallback's result).
#[pyclass(name = "Tensor", module = "boxfall", frozen)]
pub struct PyTensor {
    pub inner: Tensor,
    /// The read-only NumPy view of `inner`'s loan last lent to a Python kernel (`lent_array`),
    /// with the loan's `data_version` when it was made. Boxed: a `bf.Tensor` that is never
    /// lent stays small (Python zeroes every new object's memory).
    lent: GilCell<Option<Box<(u64, LentView)>>>,
}

impl PyTensor {
    /// The `bf.Tensor` of `inner`.
    fn new(inner: Tensor) -> PyTensor {
        PyTensor {
            inner,
            lent: GilCell::default(),
        }
    }
}

/// The largest loan whose view `lent_array` keeps in the `bf.Tensor`: a view kept there holds
/// the data it sees until the next loan, also after a write has replaced it, so only small ones
/// are kept (where the lock of the tensor's own kept view is a noticeable share of the call).
const KEEP_LENT_BYTES: usize = 4096;

/// `obj` as a `bf.Tensor`, told by its type pointer (kept from the first look-up): the class
/// has no subclasses (it is not declared `subclass`), so this is what `cast` finds, inline,
/// where `cast` (which asks the lazily made class object first) was a call of its own on the
/// path of every `bf.Tensor` argument.
#[inline(always)]
pub(crate) fn as_tensor<'a, 'py>(obj: &'a Bound<'py, PyAny>) -> Option<&'a Bound<'py, PyTensor>> {
    static TENSOR: KnownType = KnownType::new(<PyTensor as pyo3::PyTypeInfo>::type_object_raw);
    if !TENSOR.is_type_of(obj) {
        return None;
    }
    // SAFETY: the object's type is the `bf.Tensor` class itself (checked above).
    Some(unsafe { obj.cast_unchecked::<PyTensor>() })
}

/// `kernel_array(py, loan, false)` for `loan`, the loan of the tensor of `owner` (a
/// `bf.Tensor`; else, or for another tensor, the same as `kernel_array`). The view is kept in
/// `owner` with the loan's data version, so a tensor lent again reaches the kernel without
/// taking the loan's lock (its read and its release, two atomic operations) or a new array:
/// the GIL guards the `bf.Tensor`'s cell. A view the kernel reshaped or retyped in place, or
/// one of data replaced since (the version moved on), is not handed out again.
pub fn lent_array<'py>(owner: &Bound<'py, PyAny>, loan: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let py = owner.py();
    let owner = match as_tensor(owner) {
        Some(o) if loan.nbytes() <= KEEP_LENT_BYTES && o.get().inner.has_loan(loan) => o.get(),
        _ => return kernel_array(py, loan, false),
    };
    // Read before the view is made: a write meanwhile leaves the kept version behind, so the
    // view is made again next time.
    let version = loan.data_version();
    // SAFETY: the GIL is held (`py`), and while the reference lives no Python code runs and
    // nothing writes the cell: `intact` reads the view's array fields and takes a count of it
    // (a reference-count increment, which runs no code). Read in place rather than taken out
    // and put back (two writes of the cell, and the moves, each call).
    let kept = unsafe { owner.lent.peek() }
        .as_deref()
        .filter(|(v, _)| *v == version)
        .and_then(|(_, view)| view.intact(py));
    if let Some(array) = kept {
        return Ok(array);
    }
    let array = kernel_array(py, loan, false);
    // The stale view goes in any case (as before, when it was taken out to be checked).
    let view = array.as_ref().ok().and_then(LentView::new);
    let old = owner
        .lent
        .replace(py, view.map(|view| Box::new((version, view))));
    drop(old);
    array
}

#[pymethods]
impl PyTensor {
    /// `"<Backend>:<index>"`, e.g. `"Accel:0"`: a `str` equal to every spelling of the device
    /// (`"Native"`, `"native:0"`), one object a device (`boxfall._device.Device`).
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        device_object(py, self.inner.device())
    }

    /// The backend's name.
    #[getter]
    fn backend(&self) -> String {
        self.inner.key().name()
    }

    /// The device index.
    #[getter]
    fn index(&self) -> u16 {
        self.inner.device().index
    }

    /// The backend payload (None for host memory). A result whose values are on the host
    /// only (residency) gets its payload from the backend's `from_cpu` first; a tensor whose
    /// host memory NumPy holds (`np.asarray(t)` on a lazy backend) gives a payload made of
    /// that memory now, which the tensor does not keep.
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        // A tensor whose host memory NumPy holds (`np.asarray`) stays on the host: the payload
        // is made of it now, and not kept (NumPy may write the memory at any time).
        if self.inner.is_host() {
            return Ok(None);
        }
        // Made again where another thread's write left it on the host meanwhile: a kernel
        // reading its argument's payload never finds none.
        let data = crate::resident::device_data(&self.inner).py(py)?;
        Ok(data_object(py, &data))
    }

    /// Where the values are (residency): `"device"` (the payload only), `"host"` (a result
    /// kept on the host, no payload yet), `"both"` (the payload and a current host copy), or
    /// None for a tensor of host memory (Native).
    #[getter]
    fn residency(&self) -> Option<&'static str> {
        match self.inner.residency() {
            Residency::Memory => None,
            Residency::Device => Some("device"),
            Residency::Host => Some("host"),
            Residency::Both => Some("both"),
        }
    }

    /// Puts a result kept on the host (residency) on its device now, through the backend's
    /// `from_cpu`, and returns the tensor; nothing for a tensor that has its payload, or whose
    /// host memory NumPy holds (`np.asarray(t)`: its payload is made for each kernel).
    fn materialize(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        // A tensor whose host memory NumPy holds stays on the host (its payload is made for
        // each kernel).
        if slf.get().inner.host_exported().is_none() {
            crate::resident::materialize(&slf.get().inner).py(slf.py())?;
        }
        Ok(slf.clone().into_any().unbind())
    }

    /// The payload's `.dtype`, or the host memory's NumPy dtype.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(view) = super::view_desc::view_ops(&self.inner) {
            return Ok(view.dtype(py));
        }
        match self.inner.data() {
            TensorData::Host(h) => numpy_dtype(py, h.dtype().name()),
            TensorData::Foreign(_) => self.attr(py, "dtype"),
        }
    }

    /// The shape, a tuple of ints: the host memory's, or the payload's `.shape` (any sequence
    /// of ints the payload gives, as a tuple).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        // A view knows its shape without making its values.
        if let Some(view) = super::view_desc::view_ops(&self.inner) {
            return PyTuple::new(py, view.shape());
        }
        match self.inner.data() {
            TensorData::Host(h) => PyTuple::new(py, h.shape()),
            TensorData::Foreign(_) => {
                let dims: Vec<usize> = self.attr(py, "shape")?.extract()?;
                PyTuple::new(py, dims)
            }
        }
    }

    /// The number of dimensions, `len(shape)`.
    #[getter]
    fn ndim(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.shape(py)?.len())
    }

    /// The number of elements, the product of `shape`.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<usize> {
        let shape: Vec<usize> = self.shape(py)?.extract()?;
        Ok(shape.iter().product())
    }

    /// The values as a NumPy array: the backend's `to_cpu(payload)`; for Native, a read-only
    /// array sharing the tensor's memory; for a tensor with a current host copy (residency),
    /// that copy, read-only, and nothing crosses.
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.inner.key() == DispatchKey::CPU {
            return cpu_tensor_to_numpy(py, &self.inner, false);
        }
        let hooks = backend(self.inner.key()).ok_or_else(|| {
            super::errors::new_err(
                py,
                "FallbackError",
                format!("'{}' has no transfer hooks", self.inner.key()),
            )
        })?;
        // Residency: a current host copy (read-only, as every host copy is) is read, and
        // nothing crosses; without one, the array is `to_cpu`'s, as the hook gave it.
        if let Some(cpu) = self.inner.host_copy() {
            return cpu_tensor_to_numpy(py, &cpu, false);
        }
        let cpu = hooks.to_cpu(&self.inner, false).py(py)?;
        // Native lends its host memory: nothing crosses.
        if self.inner.key() != DispatchKey::NATIVE {
            crate::metrics::record_user_transfer(
                self.inner.key(),
                crate::metrics::Direction::ToHost,
                cpu.nbytes() as u64,
            );
        }
        cpu_tensor_to_numpy(py, &cpu, false)
    }

    // The array object of the array API standard (README, "The array API standard"): each
    // method is a call of the function of the same name in `boxfall.array_api._array_methods`,
    // which runs the method's operator through the dispatcher.

    /// `array_api::add` (`x + y`); the other operators likewise call their functions.
    fn __add__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__add__", other)
    }
    /// The reflected operator of `__add__`.
    fn __radd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__radd__", other)
    }
    /// The operator of `__sub__` (`boxfall.array_api._array_methods`).
    fn __sub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__sub__", other)
    }
    /// The reflected operator of `__sub__`.
    fn __rsub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rsub__", other)
    }
    /// The operator of `__mul__` (`boxfall.array_api._array_methods`).
    fn __mul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__mul__", other)
    }
    /// The reflected operator of `__mul__`.
    fn __rmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rmul__", other)
    }
    /// The operator of `__truediv__` (`boxfall.array_api._array_methods`).
    fn __truediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__truediv__", other)
    }
    /// The reflected operator of `__truediv__`.
    fn __rtruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rtruediv__", other)
    }
    /// The operator of `__floordiv__` (`boxfall.array_api._array_methods`).
    fn __floordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__floordiv__", other)
    }
    /// The reflected operator of `__floordiv__`.
    fn __rfloordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rfloordiv__", other)
    }
    /// The operator of `__mod__` (`boxfall.array_api._array_methods`).
    fn __mod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__mod__", other)
    }
    /// The reflected operator of `__mod__`.
    fn __rmod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rmod__", other)
    }
    /// The operator of `__and__` (`boxfall.array_api._array_methods`).
    fn __and__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__and__", other)
    }
    /// The reflected operator of `__and__`.
    fn __rand__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rand__", other)
    }
    /// The operator of `__or__` (`boxfall.array_api._array_methods`).
    fn __or__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__or__", other)
    }
    /// The reflected operator of `__or__`.
    fn __ror__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__ror__", other)
    }
    /// The operator of `__xor__` (`boxfall.array_api._array_methods`).
    fn __xor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__xor__", other)
    }
    /// The reflected operator of `__xor__`.
    fn __rxor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rxor__", other)
    }
    /// The operator of `__lshift__` (`boxfall.array_api._array_methods`).
    fn __lshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__lshift__", other)
    }
    /// The reflected operator of `__lshift__`.
    fn __rlshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rlshift__", other)
    }
    /// The operator of `__rshift__` (`boxfall.array_api._array_methods`).
    fn __rshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rshift__", other)
    }
    /// The reflected operator of `__rshift__`.
    fn __rrshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rrshift__", other)
    }
    /// The operator of `__matmul__` (`boxfall.array_api._array_methods`).
    fn __matmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__matmul__", other)
    }
    /// The reflected operator of `__matmul__`.
    fn __rmatmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__rmatmul__", other)
    }
    /// `array_api::pow` (`x ** y`; a modulo is refused).
    fn __pow__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        no_modulo(modulo)?;
        array_method(slf, "__pow__", other)
    }
    /// The reflected `x ** y`.
    fn __rpow__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        no_modulo(modulo)?;
        array_method(slf, "__rpow__", other)
    }
    /// The in-place `__add__`: `array_api::<name>_`, written into this tensor.
    fn __iadd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__iadd__", other).map(drop)
    }
    /// The in-place `__sub__`: `array_api::<name>_`, written into this tensor.
    fn __isub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__isub__", other).map(drop)
    }
    /// The in-place `__mul__`: `array_api::<name>_`, written into this tensor.
    fn __imul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__imul__", other).map(drop)
    }
    /// The in-place `__truediv__`: `array_api::<name>_`, written into this tensor.
    fn __itruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__itruediv__", other).map(drop)
    }
    /// The in-place `__floordiv__`: `array_api::<name>_`, written into this tensor.
    fn __ifloordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__ifloordiv__", other).map(drop)
    }
    /// The in-place `__mod__`: `array_api::<name>_`, written into this tensor.
    fn __imod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__imod__", other).map(drop)
    }
    /// The in-place `__and__`: `array_api::<name>_`, written into this tensor.
    fn __iand__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__iand__", other).map(drop)
    }
    /// The in-place `__or__`: `array_api::<name>_`, written into this tensor.
    fn __ior__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__ior__", other).map(drop)
    }
    /// The in-place `__xor__`: `array_api::<name>_`, written into this tensor.
    fn __ixor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__ixor__", other).map(drop)
    }
    /// The in-place `__lshift__`: `array_api::<name>_`, written into this tensor.
    fn __ilshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__ilshift__", other).map(drop)
    }
    /// The in-place `__rshift__`: `array_api::<name>_`, written into this tensor.
    fn __irshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        array_method(slf, "__irshift__", other).map(drop)
    }
    /// `x **= y`: `array_api::pow_`, written into this tensor (Python passes no modulo).
    fn __ipow__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        array_method(slf, "__ipow__", other).map(drop)
    }
    /// The comparison `__eq__`, an array of bools.
    fn __eq__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__eq__", other)
    }
    /// The comparison `__ne__`, an array of bools.
    fn __ne__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__ne__", other)
    }
    /// The comparison `__lt__`, an array of bools.
    fn __lt__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__lt__", other)
    }
    /// The comparison `__le__`, an array of bools.
    fn __le__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__le__", other)
    }
    /// The comparison `__gt__`, an array of bools.
    fn __gt__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__gt__", other)
    }
    /// The comparison `__ge__`, an array of bools.
    fn __ge__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__ge__", other)
    }
    /// Identity, as `object.__hash__`: a tensor stays usable as a dict key although `==` makes
    /// an array.
    fn __hash__(slf: &Bound<'_, Self>) -> isize {
        slf.as_ptr() as isize
    }
    /// The unary `__neg__`.
    fn __neg__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__neg__")
    }
    /// The unary `__pos__`.
    fn __pos__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__pos__")
    }
    /// The unary `__invert__`.
    fn __invert__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__invert__")
    }
    /// The unary `__abs__`.
    fn __abs__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__abs__")
    }
    /// A 0-d tensor as a Python `bool` (through a host copy).
    fn __bool__(slf: &Bound<'_, Self>) -> PyResult<bool> {
        array_call(slf, "__bool__")?.extract(slf.py())
    }
    /// A 0-d tensor as a Python `int` (through a host copy).
    fn __int__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__int__")
    }
    /// A 0-d tensor as a Python `float` (through a host copy).
    fn __float__(slf: &Bound<'_, Self>) -> PyResult<f64> {
        array_call(slf, "__float__")?.extract(slf.py())
    }
    /// A 0-d tensor as a Python `index` (through a host copy).
    fn __index__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__index__")
    }
    /// A 0-d tensor as a Python `complex` (through a host copy).
    fn __complex__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__complex__")
    }

    /// The values as a NumPy array (NumPy's `__array__` protocol, `np.asarray(t)`). A tensor
    /// of host memory (Native), or a view of one, gives an array over that memory itself,
    /// writable (unless the view is read-only), whose writes are the tensor's and which sees
    /// the tensor's later writes, unless `copy=True` or another `dtype` asks for a copy. A
    /// tensor of a lazy backend (or a view of one) does the same once its values move to host
    /// memory of its own, which becomes authoritative (its device payload is dropped, and made
    /// again from that memory for each of the backend's kernels). Any other tensor gives a
    /// host copy (`copy=False`: `ValueError`).
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__(
        slf: &Bound<'_, Self>,
        dtype: Option<&Bound<'_, PyAny>>,
        copy: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let copies = copy.map(|c| c.is_truthy()).transpose()?.unwrap_or(false);
        let same_dtype = match dtype {
            None => true,
            Some(d) => py
                .import("numpy")?
                .getattr("dtype")?
                .call1((d,))?
                .eq(slf.getattr("dtype")?)?,
        };
        if !copies && same_dtype {
            if let Some(a) = super::numpy_memory::shared_array(py, &slf.get().inner, true)? {
                return Ok(a.unbind());
            }
        }
        array_module(py)?
            .getattr("__array__")?
            .call1((slf, dtype, copy))
            .map(Bound::unbind)
    }

    /// NumPy's ufunc given tensors (`np.sqrt(t)`, `ndarray + t`): NumPy's values, the arrays
    /// on the tensors' device, each ufunc (method) an operator of the namespace `numpy`.
    #[pyo3(signature = (ufunc, method, *inputs, **kwargs))]
    fn __array_ufunc__(
        slf: &Bound<'_, Self>,
        ufunc: &Bound<'_, PyAny>,
        method: &Bound<'_, PyAny>,
        inputs: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let head = [slf.as_any().clone(), ufunc.clone(), method.clone()];
        let all: Vec<_> = head.into_iter().chain(inputs.iter()).collect();
        let args = PyTuple::new(slf.py(), all)?;
        array_module(slf.py())?
            .getattr("__array_ufunc__")?
            .call(args, kwargs)
            .map(Bound::unbind)
    }

    /// NumPy's function given tensors (`np.concatenate([t, u])`): NumPy's values, the arrays
    /// on the tensors' device, each function an operator of the namespace `numpy`.
    fn __array_function__(
        slf: &Bound<'_, Self>,
        func: &Bound<'_, PyAny>,
        types: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        kwargs: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        array_module(slf.py())?
            .getattr("__array_function__")?
            .call1((slf, func, types, args, kwargs))
            .map(Bound::unbind)
    }

    /// The rows, `x[0]`, `x[1]`, ... (a 0-d tensor is no iterable).
    fn __iter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__iter__")
    }

    /// `shape[0]`, as NumPy's `len` (a 0-d tensor has none: `TypeError`).
    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        array_call(slf, "__len__")?.extract(slf.py())
    }

    /// `format(x, spec)`: a 0-d tensor formats as its Python scalar (`f"{x:.3f}"`), as NumPy's
    /// 0-d arrays do; any other tensor only with an empty spec.
    fn __format__(slf: &Bound<'_, Self>, spec: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__format__", spec)
    }

    /// Pickling (and `copy.deepcopy`): the values through a host copy and the device, made
    /// again on that device when unpickled.
    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__reduce__")
    }

    /// `boxfall.array_api`, the namespace of the array API standard.
    #[pyo3(signature = (*, api_version=None))]
    fn __array_namespace__(
        slf: &Bound<'_, Self>,
        api_version: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let kwargs = pyo3::types::PyDict::new(slf.py());
        kwargs.set_item("api_version", api_version)?;
        array_module(slf.py())?
            .getattr("__array_namespace__")?
            .call((slf,), Some(&kwargs))
            .map(Bound::unbind)
    }

    /// The tensor on `device`: itself if it is there, else a copy (`"cpu"`: a NumPy array).
    #[pyo3(signature = (device, /, *, stream=None))]
    fn to_device(
        slf: &Bound<'_, Self>,
        device: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let kwargs = pyo3::types::PyDict::new(slf.py());
        kwargs.set_item("stream", stream)?;
        array_module(slf.py())?
            .getattr("to_device")?
            .call((slf, device), Some(&kwargs))
            .map(Bound::unbind)
    }

    /// A DLPack capsule of a host copy (the array API standard's `__dlpack__`): the device has
    /// no memory DLPack can name, so the capsule is always on the CPU.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<&Bound<'_, PyAny>>,
        copy: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let kwargs = pyo3::types::PyDict::new(slf.py());
        kwargs.set_item("stream", stream)?;
        kwargs.set_item("max_version", max_version)?;
        kwargs.set_item("dl_device", dl_device)?;
        kwargs.set_item("copy", copy)?;
        array_module(slf.py())?
            .getattr("__dlpack__")?
            .call((slf,), Some(&kwargs))
            .map(Bound::unbind)
    }

    /// `(device type, device id)` of the capsule `__dlpack__` exports: `(1, 0)`, kDLCPU.
    fn __dlpack_device__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__dlpack_device__")
    }

    /// The transpose of a 2-d tensor (`array_api::permute_dims`).
    #[getter(T)]
    fn transpose(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "T")
    }

    /// The last two axes swapped (`array_api::matrix_transpose`).
    #[getter(mT)]
    fn matrix_transpose(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "mT")
    }

    /// `x[key]`: `array_api::getitem`, a new tensor (the array API standard's indexing).
    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        array_method(slf, "__getitem__", key)
    }

    /// `x[key] = value`: `array_api::setitem`, written into this tensor.
    fn __setitem__(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        // The name interned once: each write otherwise made a new str to look it up.
        array_module(slf.py())?
            .getattr(pyo3::intern!(slf.py(), "__setitem__"))?
            .call1((slf, key, value))
            .map(drop)
    }

    /// The values, dtype and device, read through a host copy.
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        array_call(slf, "__repr__")
    }
}

impl PyTensor {
    fn attr<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        // A host-only tensor answers from its host values (the payload will have the same
        // shape and dtype), without being put on the device.
        if let Some(cpu) = self.inner.host_only_values() {
            return cpu_tensor_to_numpy(py, &cpu, false)?.getattr(name);
        }
        match payload_object(py, &self.inner) {
            Some(p) => p.getattr(name),
            None => Ok(py.None().into_bound(py)),
        }
    }
}

/// The `boxfall._device.Device` of each device asked for so far: a handful, so a short list
/// (a tensor's `.device` makes no new object).
static DEVICES: std::sync::Mutex<Vec<(crate::tensor::Device, Py<PyAny>)>> =
    std::sync::Mutex::new(Vec::new());

/// `t.device` of a tensor on `device`.
fn device_object(py: Python<'_>, device: crate::tensor::Device) -> PyResult<Py<PyAny>> {
    {
        let known = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, obj)) = known.iter().find(|(d, _)| *d == device) {
            return Ok(obj.clone_ref(py));
        }
    }
    // Made without the lock held: the class is Python code.
    let obj = py
        .import("boxfall._device")?
        .getattr("Device")?
        .call1((device.to_string(),))?
        .unbind();
    let mut known = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    known.push((device, obj.clone_ref(py)));
    Ok(obj)
}

/// `boxfall.array_api._array_methods`, imported once.
fn array_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || {
            py.import("boxfall.array_api._array_methods")
                .map(Bound::unbind)
        })
        .map(|m| m.bind(py))
}

/// `_array_methods.<name>(slf)`.
fn array_call(slf: &Bound<'_, PyTensor>, name: &str) -> PyResult<Py<PyAny>> {
    array_module(slf.py())?
        .getattr(name)?
        .call1((slf,))
        .map(Bound::unbind)
}

/// `_array_methods.<name>(slf, other)`: a binary operator method (its operator called
/// directly, where the operand's type alone decides it: `array_ops`).
fn array_method(
    slf: &Bound<'_, PyTensor>,
    name: &str,
    other: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    if let Some(r) = super::array_ops::binary(slf, name, other) {
        return r;
    }
    array_module(slf.py())?
        .getattr(name)?
        .call1((slf, other))
        .map(Bound::unbind)
}

/// `pow(x, y, z)`: the standard has no modular power.
fn no_modulo(modulo: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    match modulo {
        Some(m) if !m.is_none() => Err(pyo3::exceptions::PyTypeError::new_err(
            "pow() with a modulo is not defined for arrays",
        )),
        _ => Ok(()),
    }
}

/// `numpy.dtype(name)`.
pub fn numpy_dtype<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("numpy")?.getattr("dtype")?.call1((name,))
}

/// Wraps a core tensor for Python (a new `bf.Tensor` object).
pub fn wrap(py: Python<'_>, t: Tensor) -> PyResult<Bound<'_, PyAny>> {
    Ok(Bound::new(py, PyTensor::new(t))?.into_any())
}

/// A Python error from a hook as a core error.
pub fn hook_error(py: Python<'_>, e: PyErr, note: String) -> Error {
    from_pyerr(super::errors::with_note(py, e, note))
}
