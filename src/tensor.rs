//! Tensors: a device, and either host memory (an `ndarray` owned by Rust) or a backend's opaque
//! payload (a Python object, a remote handle...).
//!
//! A `Tensor` is a cheap handle (`Arc`); clones share the tensor, and identity is the handle's.
//! Host data sits behind its own `Arc` so a CPU view of a host-accessible tensor can be lent
//! without a copy; writing replaces that `Arc` (copy-on-write), so a lent view never dangles.
//! Memory exported to a foreign runtime ([`Tensor::export_host`], NumPy's `np.asarray`) is
//! instead written where it is, so that both sides see each other's writes.
//!
//! A view ([`Tensor::view_of`], NumPy's views of a device tensor) is its base and a
//! description ([`ViewOps`]): its own slot is made from the base when read after the base's
//! `data_version` moved, and a write of the view goes into the base.

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use ndarray::ArrayD;
use num_complex::Complex;

use crate::error::{Error, Result};
use crate::key::DispatchKey;
use crate::shared::Shared;

/// The element types host memory holds: every dtype of the array API standard.
///
/// ```
/// assert_eq!(boxfall::DType::F64.size(), 8);
/// assert_eq!(boxfall::DType::F32.name(), "float32");
/// assert_eq!(boxfall::DType::C64.size(), 8);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// `bool`
    Bool,
    /// `int8`
    I8,
    /// `int16`
    I16,
    /// `int32`
    I32,
    /// `int64`
    I64,
    /// `uint8`
    U8,
    /// `uint16`
    U16,
    /// `uint32`
    U32,
    /// `uint64`
    U64,
    /// `float32`
    F32,
    /// `float64`
    F64,
    /// `complex64` (two float32)
    C64,
    /// `complex128` (two float64)
    C128,
}

/// The kind of an element type, as the array API standard groups them for type promotion.
///
/// ```
/// use boxfall::{tensor::Kind, DType};
/// assert_eq!(DType::U16.kind(), Kind::Unsigned);
/// assert_eq!(DType::C64.kind(), Kind::Complex);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `bool`
    Bool,
    /// `int8` to `int64`
    Signed,
    /// `uint8` to `uint64`
    Unsigned,
    /// `float32`, `float64`
    Float,
    /// `complex64`, `complex128`
    Complex,
}

impl DType {
    /// Bytes per element.
    ///
    /// ```
    /// use boxfall::DType;
    /// assert_eq!(DType::Bool.size(), 1);
    /// assert_eq!(DType::I32.size(), 4);
    /// assert_eq!(DType::C128.size(), 16);
    /// ```
    pub const fn size(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// The kind (bool, signed or unsigned integer, real or complex floating point).
    ///
    /// ```
    /// use boxfall::{tensor::Kind, DType};
    /// assert_eq!(DType::I8.kind(), Kind::Signed);
    /// assert_eq!(DType::F64.kind(), Kind::Float);
    /// ```
    pub const fn kind(self) -> Kind {
        match self {
            DType::Bool => Kind::Bool,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => Kind::Signed,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => Kind::Unsigned,
            DType::F32 | DType::F64 => Kind::Float,
            DType::C64 | DType::C128 => Kind::Complex,
        }
    }

    /// Every element type host memory holds, in NumPy's order of type numbers.
    ///
    /// ```
    /// assert_eq!(boxfall::DType::ALL.len(), 13);
    /// ```
    pub const ALL: [DType; 13] = [
        DType::Bool,
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
        DType::F32,
        DType::F64,
        DType::C64,
        DType::C128,
    ];

    /// The names of [`DType::ALL`], for error messages.
    ///
    /// ```
    /// let names = boxfall::DType::supported_names();
    /// assert!(names.starts_with("bool, int8, uint8, int16"));
    /// assert!(names.ends_with("float32, float64, complex64, complex128"));
    /// ```
    pub fn supported_names() -> String {
        DType::ALL.map(DType::name).join(", ")
    }

    /// NumPy's name for it.
    ///
    /// ```
    /// use boxfall::DType;
    /// assert_eq!(DType::I64.name(), "int64");
    /// assert_eq!(DType::Bool.name(), "bool");
    /// assert_eq!(DType::C64.name(), "complex64");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
        }
    }

    /// The element type NumPy names `name`, if host memory holds it.
    ///
    /// ```
    /// use boxfall::DType;
    /// assert_eq!(DType::from_name("uint16"), Some(DType::U16));
    /// assert_eq!(DType::from_name("float16"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// Host memory of one of the supported element types.
///
/// ```
/// use boxfall::{tensor::HostArray, DType};
/// let a = HostArray::from(ndarray::arr1(&[1.0f32, 2.0]).into_dyn());
/// assert_eq!(a.dtype(), DType::F32);
/// assert_eq!(a.nbytes(), 8);
/// let c = HostArray::from(ndarray::arr1(&[num_complex::Complex::new(1.0f64, 2.0)]).into_dyn());
/// assert_eq!(c.dtype(), DType::C128);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum HostArray {
    /// bool elements
    Bool(ArrayD<bool>),
    /// int8 elements
    I8(ArrayD<i8>),
    /// int16 elements
    I16(ArrayD<i16>),
    /// int32 elements
    I32(ArrayD<i32>),
    /// int64 elements
    I64(ArrayD<i64>),
    /// uint8 elements
    U8(ArrayD<u8>),
    /// uint16 elements
    U16(ArrayD<u16>),
    /// uint32 elements
    U32(ArrayD<u32>),
    /// uint64 elements
    U64(ArrayD<u64>),
    /// float32 elements
    F32(ArrayD<f32>),
    /// float64 elements
    F64(ArrayD<f64>),
    /// complex64 elements
    C64(ArrayD<Complex<f32>>),
    /// complex128 elements
    C128(ArrayD<Complex<f64>>),
}

/// `$body` for the array inside a `HostArray`, bound to `$a` (whose element type differs from
/// arm to arm).
macro_rules! host_match {
    ($h:expr, $a:ident => $body:expr) => {
        match $h {
            $crate::tensor::HostArray::Bool($a) => $body,
            $crate::tensor::HostArray::I8($a) => $body,
            $crate::tensor::HostArray::I16($a) => $body,
            $crate::tensor::HostArray::I32($a) => $body,
            $crate::tensor::HostArray::I64($a) => $body,
            $crate::tensor::HostArray::U8($a) => $body,
            $crate::tensor::HostArray::U16($a) => $body,
            $crate::tensor::HostArray::U32($a) => $body,
            $crate::tensor::HostArray::U64($a) => $body,
            $crate::tensor::HostArray::F32($a) => $body,
            $crate::tensor::HostArray::F64($a) => $body,
            $crate::tensor::HostArray::C64($a) => $body,
            $crate::tensor::HostArray::C128($a) => $body,
        }
    };
}
pub(crate) use host_match;

/// Like `host_match!`, with `$body` (an `ArrayD` of the same element type) put back in the
/// same variant.
macro_rules! host_map {
    ($h:expr, $a:ident => $body:expr) => {
        match $h {
            $crate::tensor::HostArray::Bool($a) => $crate::tensor::HostArray::Bool($body),
            $crate::tensor::HostArray::I8($a) => $crate::tensor::HostArray::I8($body),
            $crate::tensor::HostArray::I16($a) => $crate::tensor::HostArray::I16($body),
            $crate::tensor::HostArray::I32($a) => $crate::tensor::HostArray::I32($body),
            $crate::tensor::HostArray::I64($a) => $crate::tensor::HostArray::I64($body),
            $crate::tensor::HostArray::U8($a) => $crate::tensor::HostArray::U8($body),
            $crate::tensor::HostArray::U16($a) => $crate::tensor::HostArray::U16($body),
            $crate::tensor::HostArray::U32($a) => $crate::tensor::HostArray::U32($body),
            $crate::tensor::HostArray::U64($a) => $crate::tensor::HostArray::U64($body),
            $crate::tensor::HostArray::F32($a) => $crate::tensor::HostArray::F32($body),
            $crate::tensor::HostArray::F64($a) => $crate::tensor::HostArray::F64($body),
            $crate::tensor::HostArray::C64($a) => $crate::tensor::HostArray::C64($body),
            $crate::tensor::HostArray::C128($a) => $crate::tensor::HostArray::C128($body),
        }
    };
}
pub(crate) use host_map;

macro_rules! host_from {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(
            impl From<ArrayD<$t>> for HostArray {
                fn from(a: ArrayD<$t>) -> Self {
                    HostArray::$v(a)
                }
            }
        )*
    };
}
host_from!(
    bool => Bool,
    i8 => I8,
    i16 => I16,
    i32 => I32,
    i64 => I64,
    u8 => U8,
    u16 => U16,
    u32 => U32,
    u64 => U64,
    f32 => F32,
    f64 => F64,
    Complex<f32> => C64,
    Complex<f64> => C128,
);

impl HostArray {
    /// The element type.
    ///
    /// ```
    /// use boxfall::{tensor::HostArray, DType};
    /// assert_eq!(HostArray::from(ndarray::ArrayD::<i32>::zeros(vec![2])).dtype(), DType::I32);
    /// assert_eq!(HostArray::from(ndarray::ArrayD::<u8>::zeros(vec![2])).dtype(), DType::U8);
    /// ```
    pub fn dtype(&self) -> DType {
        match self {
            HostArray::Bool(_) => DType::Bool,
            HostArray::I8(_) => DType::I8,
            HostArray::I16(_) => DType::I16,
            HostArray::I32(_) => DType::I32,
            HostArray::I64(_) => DType::I64,
            HostArray::U8(_) => DType::U8,
            HostArray::U16(_) => DType::U16,
            HostArray::U32(_) => DType::U32,
            HostArray::U64(_) => DType::U64,
            HostArray::F32(_) => DType::F32,
            HostArray::F64(_) => DType::F64,
            HostArray::C64(_) => DType::C64,
            HostArray::C128(_) => DType::C128,
        }
    }

    /// The shape.
    ///
    /// ```
    /// let a = boxfall::tensor::HostArray::from(ndarray::ArrayD::<f64>::zeros(vec![2, 3]));
    /// assert_eq!(a.shape(), &[2, 3]);
    /// ```
    pub fn shape(&self) -> &[usize] {
        host_match!(self, a => a.shape())
    }

    /// Element count times element size.
    ///
    /// ```
    /// let a = boxfall::tensor::HostArray::from(ndarray::ArrayD::<i64>::zeros(vec![2, 3]));
    /// assert_eq!(a.nbytes(), 6 * 8);
    /// let c = boxfall::tensor::HostArray::from(ndarray::ArrayD::<num_complex::Complex<f32>>::zeros(vec![3]));
    /// assert_eq!(c.nbytes(), 3 * 8);
    /// ```
    pub fn nbytes(&self) -> usize {
        self.shape().iter().product::<usize>() * self.dtype().size()
    }

    /// A C-ordered copy; `Error::OutOfMemory` where the memory cannot be allocated (`clone`
    /// would abort the process).
    ///
    /// ```
    /// use boxfall::tensor::HostArray;
    /// let a = HostArray::from(ndarray::arr2(&[[1, 2], [3, 4]]).reversed_axes().into_dyn());
    /// let b = a.try_clone().unwrap();
    /// assert_eq!(a, b);
    /// assert!(matches!(&b, HostArray::I32(x) if x.is_standard_layout()));
    /// ```
    pub fn try_clone(&self) -> Result<HostArray> {
        let what = || {
            format!(
                "a copy of a {}{:?} array",
                self.dtype().name(),
                self.shape()
            )
        };
        Ok(host_map!(self, a => crate::native::alloc::try_copy(&a.view(), &what)?))
    }

    /// The float64 array, if that is what this is.
    ///
    /// ```
    /// let a = boxfall::tensor::HostArray::from(ndarray::ArrayD::<f64>::zeros(vec![1]));
    /// assert!(a.as_f64().is_some());
    /// ```
    pub fn as_f64(&self) -> Option<&ArrayD<f64>> {
        match self {
            HostArray::F64(a) => Some(a),
            _ => None,
        }
    }
}

/// A tensor's element type (by NumPy's name) and shape: what an in-place write must keep.
///
/// ```
/// use boxfall::{tensor::TensorMeta, Tensor};
/// let t = Tensor::from_array(ndarray::ArrayD::<f32>::zeros(vec![2, 3]));
/// let meta = t.meta().unwrap();
/// assert_eq!(meta, TensorMeta { dtype: "float32".into(), shape: vec![2, 3] });
/// assert_eq!(meta.to_string(), "float32[2, 3]");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMeta {
    /// The element type, as NumPy names it (`"float64"`).
    pub dtype: String,
    /// The shape.
    pub shape: Vec<usize>,
}

impl TensorMeta {
    /// The element type and shape of host memory.
    ///
    /// ```
    /// use boxfall::tensor::{HostArray, TensorMeta};
    /// let a = HostArray::from(ndarray::ArrayD::<i64>::zeros(vec![4]));
    /// assert_eq!(TensorMeta::of_host(&a).to_string(), "int64[4]");
    /// ```
    pub fn of_host(a: &HostArray) -> TensorMeta {
        TensorMeta {
            dtype: a.dtype().name().to_owned(),
            shape: a.shape().to_vec(),
        }
    }
}

impl fmt::Display for TensorMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

/// A backend's opaque tensor payload (or a foreign CPU array, such as a NumPy array).
///
/// ```
/// use boxfall::tensor::Payload;
/// struct Remote(u64);
/// impl Payload for Remote {
///     fn as_any(&self) -> &dyn std::any::Any { self }
/// }
/// let p: std::sync::Arc<dyn Payload> = std::sync::Arc::new(Remote(7));
/// assert_eq!(p.nbytes(), 0);
/// ```
pub trait Payload: Send + Sync + 'static {
    /// The payload itself, to downcast.
    fn as_any(&self) -> &dyn Any;
    /// Bytes held, for the fallback's byte counters.
    fn nbytes(&self) -> usize {
        0
    }
    /// The byte count, if it can never change: a tensor made with this payload then keeps it
    /// and answers `nbytes` without asking again (a NumPy array's size is fixed while it is
    /// referenced).
    fn fixed_nbytes(&self) -> Option<usize> {
        None
    }
    /// A copy in host memory, for Rust code that reads a foreign CPU tensor.
    fn to_host(&self) -> Result<HostArray> {
        Err(Error::Fallback(
            "this tensor's payload cannot be read as host memory".into(),
        ))
    }
    /// Dtype and shape for logs (`"float64[2, 3]"`).
    fn describe(&self) -> String {
        "?".into()
    }
    /// Dtype and shape, if the payload knows them: the fallback checks with them that an
    /// in-place kernel kept its argument's (`None`: not checked).
    fn meta(&self) -> Option<TensorMeta> {
        None
    }
    /// A copy that can be written without changing this payload, for a CPU payload (a NumPy
    /// array) that a kernel reached through the fallback writes: the kernel writes the copy,
    /// which is written into this payload only once the kernel has succeeded. `None`: the
    /// payload cannot be copied, and the kernel writes it as it is.
    fn duplicate(&self) -> Option<Result<Arc<dyn Payload>>> {
        None
    }
    /// Writes `src`'s values into this payload in place (a CPU payload written by the
    /// fallback). `None`: it cannot be written in place, and the tensor takes `src`'s data.
    fn assign(&self, _src: &Tensor) -> Option<Result<()>> {
        None
    }
}

/// What a tensor holds.
///
/// ```
/// use boxfall::{Tensor, tensor::TensorData};
/// let t = Tensor::from_array(ndarray::ArrayD::<f64>::zeros(vec![2]));
/// assert!(matches!(t.data(), TensorData::Host(_)));
/// ```
#[derive(Clone)]
pub enum TensorData {
    /// Rust-owned host memory.
    Host(Arc<HostArray>),
    /// A backend's payload.
    Foreign(Arc<dyn Payload>),
}

/// A device: a backend key and an index.
///
/// ```
/// use boxfall::{Device, DispatchKey};
/// let d = Device::new(DispatchKey::NATIVE, 1);
/// assert_eq!(d.to_string(), "Native:1");
/// assert_eq!(Device::parse("native:1").unwrap(), d);
/// assert_eq!(Device::parse("cpu").unwrap(), Device::CPU);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Device {
    /// The backend key.
    pub key: DispatchKey,
    /// The device index within the backend.
    pub index: u16,
}

impl Device {
    /// The host CPU.
    ///
    /// ```
    /// use boxfall::{Device, DispatchKey};
    /// assert_eq!(Device::CPU.key, DispatchKey::CPU);
    /// assert_eq!(Device::CPU.to_string(), "CPU:0");
    /// ```
    pub const CPU: Device = Device {
        key: DispatchKey::CPU,
        index: 0,
    };

    /// A device of a backend key.
    ///
    /// ```
    /// use boxfall::{Device, DispatchKey};
    /// let d = Device::new(DispatchKey::NATIVE, 3);
    /// assert_eq!((d.key, d.index), (DispatchKey::NATIVE, 3));
    /// ```
    pub const fn new(key: DispatchKey, index: u16) -> Device {
        Device { key, index }
    }

    /// Reads `"Backend:index"`, or the backend name alone, ignoring case.
    ///
    /// ```
    /// use boxfall::{Device, DispatchKey};
    /// assert_eq!(Device::parse("NATIVE:2").unwrap(), Device::new(DispatchKey::NATIVE, 2));
    /// assert!(Device::parse("cpu:x").is_err()); // bad index
    /// assert!(Device::parse("CompositeImplicit").is_err()); // not a backend
    /// ```
    pub fn parse(text: &str) -> Result<Device> {
        let (name, index) = match text.rsplit_once(':') {
            Some((n, i)) => {
                let index = i.parse::<u16>().map_err(|_| {
                    Error::Fallback(format!("'{text}' is not a device: bad index '{i}'"))
                })?;
                (n, index)
            }
            None => (text, 0),
        };
        let key = DispatchKey::from_name_ignore_case(name)
            .filter(|k| k.is_backend())
            .ok_or_else(|| Error::UnknownKey {
                name: name.to_string(),
                known: crate::key::registered_keys()
                    .into_iter()
                    .filter(|k| k.is_backend())
                    .map(|k| k.name())
                    .collect(),
            })?;
        Ok(Device { key, index })
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.key, self.index)
    }
}

struct TensorInner {
    device: Device,
    data: RwLock<Slot>,
    /// The data's byte count, with `FOREIGN` set for a payload, or `ASK_PAYLOAD` for a
    /// payload whose count may change. Kept beside the data, stored under the write lock, so
    /// the fallback's byte counters read it without locking.
    nbytes: AtomicUsize,
    /// Set by `set_data`, cleared when the tensor this one is the loan of writes its data in:
    /// a loan a kernel wrote into (against its schema) is put right before it is lent again.
    replaced: AtomicBool,
    /// This tensor's CPU loan (`host_loan`): made once, then kept holding this tensor's data
    /// by `set_data`, so that lending it takes no lock.
    loan: OnceLock<Tensor>,
    /// How many times the data was replaced (`data_version`): written under the write lock,
    /// read without any.
    version: AtomicU64,
    /// What a view sees of its base (`Tensor::view_of`); `None` for every other tensor.
    view: Option<Box<ViewLink>>,
    /// `EXPORTED` (and `EXPORTED_BOOL` for bool elements) once the host memory was exported
    /// ([`Tensor::export_host`]): written under the write lock, read without any.
    exported: AtomicU8,
    /// A device tensor's host copy and the `version` it holds the values of (residency, see
    /// `Tensor::host_copy`); never set for a tensor of host memory.
    kept: Mutex<Option<(u64, Tensor)>>,
}

/// `TensorInner::exported`: the memory is exported, and written in place from then on.
const EXPORTED: u8 = 1;
/// `TensorInner::exported`: exported bool elements, which NumPy may have written as bytes other
/// than 0 and 1 (put right before boxfall reads them).
const EXPORTED_BOOL: u8 = 2;
/// `TensorInner::exported` of a device tensor: its values are the exported host memory of the
/// CPU tensor its `kept` slot holds (`Tensor::export_device_values`), which is authoritative.
const HOST_EXPORTED: u8 = 4;

/// What the lock guards: the data, and a foreign runtime's view of it (`host_view`).
struct Slot {
    data: TensorData,
    view: Option<HostView>,
}

/// A foreign runtime's object that sees a tensor's host memory (see [`Tensor::host_view`]).
///
/// ```
/// let view: boxfall::tensor::HostView = std::sync::Arc::new(());
/// assert!(view.downcast_ref::<()>().is_some());
/// ```
pub type HostView = Arc<dyn Any + Send + Sync>;

const FOREIGN: usize = 1 << (usize::BITS - 1);
const ASK_PAYLOAD: usize = usize::MAX;

fn nbytes_of(data: &TensorData) -> usize {
    match data {
        TensorData::Host(a) => a.nbytes() & !FOREIGN,
        TensorData::Foreign(p) => p.fixed_nbytes().map_or(ASK_PAYLOAD, |n| FOREIGN | n),
    }
}

/// A tensor handle. Cloning shares the tensor.
///
/// ```
/// use boxfall::{Device, Tensor};
/// let t = Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
/// assert_eq!(t.device(), Device::CPU);
/// assert!(t.same(&t.clone()));
/// ```
#[derive(Clone)]
pub struct Tensor(Shared<TensorInner>);

impl Tensor {
    /// A tensor on `device` holding `data`.
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let t = Tensor::new(native::DEVICE, cpu.data()); // same data, another device
    /// assert_eq!(t.device(), native::DEVICE);
    /// assert_eq!(t.describe(), "float64[2]");
    /// ```
    // Inlined: the data (an `Arc` for host memory) then goes from its maker's registers into
    // the allocation, not through this call's frame (a copy the processor stalls on).
    #[inline]
    pub fn new(device: Device, data: TensorData) -> Tensor {
        let nbytes = nbytes_of(&data);
        // Written where it is allocated (`Shared::new_with`), not built on the stack and
        // copied over.
        Tensor(Shared::new_with(|| TensorInner {
            device,
            nbytes: AtomicUsize::new(nbytes),
            data: RwLock::new(Slot { data, view: None }),
            replaced: AtomicBool::new(false),
            loan: OnceLock::new(),
            version: AtomicU64::new(0),
            view: None,
            exported: AtomicU8::new(0),
            kept: Mutex::new(None),
        }))
    }

    /// A CPU tensor owning `array`.
    ///
    /// ```
    /// use boxfall::{Device, Tensor};
    /// let t = Tensor::from_array(ndarray::ArrayD::<i32>::zeros(vec![4]));
    /// assert_eq!(t.device(), Device::CPU);
    /// assert_eq!(t.describe(), "int32[4]");
    /// ```
    pub fn from_array(array: impl Into<HostArray>) -> Tensor {
        Tensor::host(Device::CPU, array.into())
    }

    /// A tensor on `device` holding host memory.
    ///
    /// ```
    /// use boxfall::{Device, DispatchKey, Tensor, tensor::HostArray};
    /// let t = Tensor::host(Device::new(DispatchKey::NATIVE, 0), HostArray::from(ndarray::ArrayD::<i64>::zeros(vec![3])));
    /// assert_eq!(t.host_array().unwrap().shape(), &[3]);
    /// ```
    // Inlined: the array (120 bytes) is then moved once, from where its maker built it into
    // the allocation, rather than copied into this call's frame first.
    #[inline]
    pub fn host(device: Device, array: HostArray) -> Tensor {
        Tensor::new(device, TensorData::Host(Arc::new(array)))
    }

    /// A tensor on `device` holding a backend payload.
    ///
    /// ```
    /// use boxfall::{native, tensor::Payload, Tensor};
    /// struct Handle;
    /// impl Payload for Handle {
    ///     fn as_any(&self) -> &dyn std::any::Any { self }
    ///     fn nbytes(&self) -> usize { 128 }
    /// }
    /// let t = Tensor::foreign(native::DEVICE, std::sync::Arc::new(Handle));
    /// assert!(t.host_array().is_none());
    /// assert_eq!(t.nbytes(), 128);
    /// ```
    pub fn foreign(device: Device, payload: Arc<dyn Payload>) -> Tensor {
        Tensor::new(device, TensorData::Foreign(payload))
    }

    /// The device.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert_eq!(t.device(), boxfall::native::DEVICE);
    /// assert_eq!(t.device().index, 0);
    /// ```
    #[inline]
    pub fn device(&self) -> Device {
        self.0.device
    }

    /// The device's dispatch key.
    ///
    /// ```
    /// use boxfall::{native, DispatchKey, Tensor};
    /// assert_eq!(native::tensor(ndarray::arr1(&[1.0]).into_dyn()).key(), DispatchKey::NATIVE);
    /// assert_eq!(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()).key(), DispatchKey::CPU);
    /// ```
    #[inline]
    pub fn key(&self) -> DispatchKey {
        self.0.device.key
    }

    /// Whether two handles are the same tensor.
    ///
    /// ```
    /// use boxfall::Tensor;
    /// let a = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let b = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(a.same(&a.clone()));
    /// assert!(!a.same(&b)); // equal values, different tensors
    /// ```
    #[inline]
    pub fn same(&self, other: &Tensor) -> bool {
        Shared::ptr_eq(&self.0, &other.0)
    }

    /// What the tensor holds now (a cheap clone of an `Arc`).
    ///
    /// ```
    /// use boxfall::{Device, Tensor};
    /// let t = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let view = Tensor::new(Device::CPU, t.data());
    /// assert!(std::sync::Arc::ptr_eq(&view.host_array().unwrap(), &t.host_array().unwrap())); // shared, not copied
    /// ```
    pub fn data(&self) -> TensorData {
        self.sync_view();
        self.0
            .data
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .data
            .clone()
    }

    /// A CPU tensor sharing this tensor's host memory, for a kernel that only reads it (the
    /// fallback's loan of a read-only argument). It is one handle for the tensor's whole life,
    /// holding the tensor's data as it is now (`set_data` writes the loan too), so lending a
    /// tensor again takes no lock and allocates nothing. `None` for a tensor without host
    /// memory.
    ///
    /// ```
    /// use boxfall::{native, Device, tensor::TensorData};
    /// let t = native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let loan = t.host_loan().unwrap();
    /// assert_eq!(loan.device(), Device::CPU);
    /// assert!(std::sync::Arc::ptr_eq(&loan.host_array().unwrap(), &t.host_array().unwrap()));
    /// assert!(t.host_loan().unwrap().same(&loan)); // lent again: the same handle
    /// t.set_data(TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[3.0]).into_dyn().into())));
    /// assert_eq!(loan.describe(), "float64[1]"); // the loan holds the tensor's data as it is
    /// loan.set_data(TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[9.0]).into_dyn().into())));
    /// assert_eq!(t.host_array().unwrap().as_f64().unwrap()[[0]], 3.0); // the tensor is not written
    /// assert!(std::sync::Arc::ptr_eq(&t.host_loan().unwrap().host_array().unwrap(), &t.host_array().unwrap()));
    /// ```
    pub fn host_loan(&self) -> Option<Tensor> {
        if !self.is_host() {
            return None;
        }
        self.sync_view();
        // A view whose values cannot be made is lent to no kernel (`view_failure` says why).
        if self.is_view() && self.view_failed() {
            return None;
        }
        if let Some(loan) = self.0.loan.get() {
            if loan.unchanged() {
                return Some(loan.clone());
            }
        }
        // The first loan, or one a kernel wrote into: made or put right under the read lock,
        // which `set_data` (taking the write lock) waits for, so no write is missed.
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        if !matches!(slot.data, TensorData::Host(_)) {
            return None;
        }
        let loan = self
            .0
            .loan
            .get_or_init(|| Tensor::new(Device::CPU, slot.data.clone()));
        let stale = (!loan.unchanged()).then(|| loan.hold(slot.data.clone()));
        let lent = loan.clone();
        drop(slot);
        drop(stale);
        Some(lent)
    }

    /// The tensor's loan ([`Tensor::host_loan`]) borrowed rather than counted, where it holds
    /// the tensor's data as it is now (the case of every loan but the first and one made after
    /// a write, which `host_loan` makes or puts right). It takes no lock and no count: a
    /// caller lending it for a call it holds the tensor through needs no handle of its own.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(t.kept_loan().is_none()); // never lent yet
    /// let loan = t.host_loan().unwrap();
    /// assert!(t.kept_loan().is_some_and(|l| l.same(&loan)));
    /// let two = boxfall::tensor::TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[2.0]).into_dyn().into()));
    /// t.set_data(two.clone());
    /// assert!(t.kept_loan().is_some_and(|l| l.same(&loan))); // the loan follows the tensor
    /// loan.set_data(two); // a write into the loan itself: `host_loan` puts it right first
    /// assert!(t.kept_loan().is_none());
    /// ```
    #[inline]
    pub fn kept_loan(&self) -> Option<&Tensor> {
        if !self.is_host() || self.view_is_stale() || self.has_exported_bools() {
            return None;
        }
        self.0.loan.get().filter(|l| l.unchanged())
    }

    /// Writes `data` in as this loan's tensor's data (its `set_data`); hands back what to drop
    /// once every lock is released.
    fn hold(&self, data: TensorData) -> (TensorData, Option<HostView>) {
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        self.0.replaced.store(false, Ordering::Relaxed);
        self.bump_version();
        let view = slot.view.take();
        (std::mem::replace(&mut slot.data, data), view)
    }

    /// The view a foreign runtime keeps of this tensor's host memory, if one was set: the
    /// Python bindings keep their read-only NumPy view of a loan here, so a tensor lent again
    /// reaches a Python kernel without a new array. Gone once the data is replaced.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(t.host_view().is_none());
    /// t.set_host_view(Arc::new("a view"));
    /// assert_eq!(t.host_view().unwrap().downcast_ref::<&str>(), Some(&"a view"));
    /// t.set_data(t.data()); // a write: the view may no longer match
    /// assert!(t.host_view().is_none());
    /// ```
    pub fn host_view(&self) -> Option<HostView> {
        self.sync_view();
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        slot.view.clone()
    }

    /// `f` of the view [`Tensor::host_view`] gives, borrowed under the tensor's read lock
    /// rather than cloned out of it: no reference count is taken and dropped (two atomic
    /// operations, which the Python bindings' loan of a one-element tensor felt). `f` must be
    /// brief, and must not write this tensor (the lock is held while it runs).
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(t.with_host_view(|v| v.is_none()));
    /// t.set_host_view(std::sync::Arc::new(7_u32));
    /// assert_eq!(t.with_host_view(|v| v.and_then(|v| v.downcast_ref::<u32>()).copied()), Some(7));
    /// ```
    pub fn with_host_view<R>(&self, f: impl FnOnce(Option<&HostView>) -> R) -> R {
        self.sync_view();
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        f(slot.view.as_ref())
    }

    /// Keeps `view` with the tensor until its data is replaced (see [`Tensor::host_view`]).
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// t.set_host_view(std::sync::Arc::new(7_u32));
    /// assert_eq!(t.host_view().unwrap().downcast_ref::<u32>(), Some(&7));
    /// ```
    pub fn set_host_view(&self, view: HostView) {
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        let old = slot.view.replace(view);
        drop(slot);
        // A foreign object's drop may run foreign code: not under the lock.
        drop(old);
    }

    /// Counts a replacement of the data (the caller holds the write lock, which orders the
    /// writers: a plain load and store, no locked instruction).
    fn bump_version(&self) {
        let v = self.0.version.load(Ordering::Relaxed);
        self.0.version.store(v.wrapping_add(1), Ordering::Release);
    }

    /// How many times the data was replaced (by `set_data`, or, for a loan, by a write of the
    /// tensor it is the loan of), read without a lock: a foreign runtime that keeps its own
    /// view of a tensor's data (as [`Tensor::host_view`] does, but outside the tensor) knows by
    /// it whether the view still sees the tensor's data.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let (v, loan) = (t.data_version(), t.host_loan().unwrap());
    /// let lent = loan.data_version();
    /// t.set_data(t.data());
    /// assert_ne!(t.data_version(), v);
    /// assert_ne!(loan.data_version(), lent); // the loan holds the new data too
    /// ```
    #[inline]
    pub fn data_version(&self) -> u64 {
        self.0.version.load(Ordering::Acquire)
    }

    /// Whether `loan` is this tensor's loan ([`Tensor::host_loan`]), read without a lock.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!t.has_loan(&t));
    /// let loan = t.host_loan().unwrap();
    /// assert!(t.has_loan(&loan));
    /// ```
    #[inline]
    pub fn has_loan(&self, loan: &Tensor) -> bool {
        self.0.loan.get().is_some_and(|l| l.same(loan))
    }

    /// Whether the data is still what the tensor was made with.
    fn unchanged(&self) -> bool {
        !self.0.replaced.load(Ordering::Relaxed)
    }

    /// Replaces what the tensor holds (an in-place write).
    ///
    /// ```
    /// use boxfall::{tensor::TensorData, Tensor};
    /// let t = Tensor::from_array(ndarray::ArrayD::<f64>::zeros(vec![2]));
    /// let alias = t.clone();
    /// t.set_data(TensorData::Host(std::sync::Arc::new(ndarray::ArrayD::<f64>::ones(vec![3]).into())));
    /// assert_eq!(alias.describe(), "float64[3]"); // every handle sees the write
    /// ```
    pub fn set_data(&self, data: TensorData) {
        if self.0.view.is_some() {
            return self.set_view_data(data);
        }
        self.replace_data(data);
    }

    /// What `set_data` does to a tensor that is no view: its slot takes `data`.
    fn replace_data(&self, data: TensorData) {
        let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        self.replace_locked(slot, data);
    }

    /// `set_data` of a view: its values written into its base (an error, which `set_data` cannot
    /// return, is logged; the fallback writes views with [`Tensor::write_view`], which returns it).
    #[cold]
    fn set_view_data(&self, data: TensorData) {
        let src = Tensor::new(self.device(), data);
        if let Err(e) = self.write_view(&src) {
            log::error!(target: "boxfall", "a write through a view of {:?} was lost: {e}", self.0.view.as_ref().map(|v| &v.base));
        }
    }

    /// `set_data`, if the data was not replaced since [`data_version`](Self::data_version)
    /// read `version`: the check and the write under one lock, so a read-modify-write that
    /// read the data at `version` loses no other writer's update (false: someone wrote
    /// meanwhile, nothing was written; read again and redo). A view is written through its
    /// base by [`set_data`](Self::set_data), not here.
    ///
    /// ```
    /// use boxfall::tensor::TensorData;
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let v = t.data_version();
    /// assert!(t.set_data_if(v, t.data()));
    /// assert!(!t.set_data_if(v, t.data())); // the first write moved the version on
    /// ```
    pub fn set_data_if(&self, version: u64, data: TensorData) -> bool {
        let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        if self.0.version.load(Ordering::Relaxed) != version {
            return false;
        }
        self.replace_locked(slot, data);
        true
    }

    fn replace_locked(&self, mut slot: std::sync::RwLockWriteGuard<'_, Slot>, data: TensorData) {
        // Exported memory is written where it is, so that NumPy's arrays of it see the write.
        let data = if self.0.exported.load(Ordering::Relaxed) != 0 {
            self.write_exported(&slot.data, data)
        } else {
            data
        };
        // Stored before the lock is released: whoever reads the new data after taking the
        // lock also sees its byte count.
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        self.0.replaced.store(true, Ordering::Relaxed);
        self.bump_version();
        let old_view = slot.view.take();
        // The loan follows under this tensor's lock (always taken before the loan's).
        let old_lent = self.0.loan.get().map(|loan| loan.hold(data.clone()));
        let old = std::mem::replace(&mut slot.data, data);
        drop(slot);
        // Dropped after the lock is released: the old data may be a foreign payload whose drop
        // runs foreign code (a Python object's finalizer) that could read this tensor.
        drop((old, old_view, old_lent));
    }

    /// The same data on `device`. When this handle is the tensor's only one, the tensor itself
    /// moves (nobody else can see it change, and nothing is allocated); otherwise a new tensor
    /// shares the data.
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let kept = cpu.clone();
    /// let shared = cpu.into_device(native::DEVICE); // `kept` still sees a CPU tensor
    /// assert_eq!((shared.device(), kept.device()), (native::DEVICE, boxfall::Device::CPU));
    /// let alone = Tensor::from_array(ndarray::arr1(&[3.0]).into_dyn()).into_device(native::DEVICE);
    /// assert_eq!(alone.device(), native::DEVICE);
    /// ```
    pub fn into_device(mut self, device: Device) -> Tensor {
        // One load, where `Arc::get_mut` took a locked compare-exchange (see `Shared`).
        match self.0.get_mut() {
            Some(inner) => {
                inner.device = device;
                self
            }
            None => Tensor::new(device, self.data()),
        }
    }

    /// Whether the tensor holds host memory (read without taking the tensor's lock).
    ///
    /// ```
    /// use boxfall::{native, tensor::Payload, Tensor};
    /// struct Remote;
    /// impl Payload for Remote { fn as_any(&self) -> &dyn std::any::Any { self } }
    /// assert!(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()).is_host());
    /// assert!(!Tensor::foreign(native::DEVICE, std::sync::Arc::new(Remote)).is_host());
    /// ```
    #[inline]
    pub fn is_host(&self) -> bool {
        self.0.nbytes.load(Ordering::Relaxed) & FOREIGN == 0
    }

    /// The host memory, if the tensor holds host memory.
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// assert_eq!(t.host_array().unwrap().as_f64().unwrap().sum(), 3.0);
    /// ```
    pub fn host_array(&self) -> Option<Arc<HostArray>> {
        if self.is_view() && self.view_failure().is_some() {
            return None;
        }
        match self.data() {
            TensorData::Host(a) => Some(a),
            TensorData::Foreign(_) => None,
        }
    }

    /// The host memory, or a host copy of a foreign payload that can give one.
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::ArrayD::<f64>::ones(vec![2]));
    /// assert_eq!(t.to_host().unwrap().nbytes(), 16);
    /// ```
    pub fn to_host(&self) -> Result<Arc<HostArray>> {
        if let Some(e) = self.view_failure() {
            return Err(e);
        }
        match self.data() {
            TensorData::Host(a) => Ok(a),
            TensorData::Foreign(p) => Ok(Arc::new(p.to_host()?)),
        }
    }

    /// The payload, if the tensor holds one.
    ///
    /// ```
    /// use boxfall::{native, tensor::Payload, Tensor};
    /// struct Remote(u64);
    /// impl Payload for Remote {
    ///     fn as_any(&self) -> &dyn std::any::Any { self }
    /// }
    /// let t = Tensor::foreign(native::DEVICE, std::sync::Arc::new(Remote(7)));
    /// assert_eq!(t.payload().unwrap().as_any().downcast_ref::<Remote>().unwrap().0, 7);
    /// assert!(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()).payload().is_none());
    /// ```
    pub fn payload(&self) -> Option<Arc<dyn Payload>> {
        match self.data() {
            TensorData::Host(_) => None,
            TensorData::Foreign(p) => Some(p),
        }
    }

    /// Bytes held.
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::ArrayD::<f32>::zeros(vec![3]));
    /// assert_eq!(t.nbytes(), 3 * 4);
    /// ```
    #[inline]
    pub fn nbytes(&self) -> usize {
        match self.0.nbytes.load(Ordering::Relaxed) {
            ASK_PAYLOAD => self.payload_nbytes(),
            known => known & !FOREIGN,
        }
    }

    /// `nbytes` of a payload whose size may change, asked each time.
    #[cold]
    fn payload_nbytes(&self) -> usize {
        // A payload may need a foreign runtime's lock (Python's GIL): `data` clones it, so it
        // is never asked while this tensor's lock is held.
        match self.data() {
            TensorData::Host(a) => a.nbytes(),
            TensorData::Foreign(p) => p.nbytes(),
        }
    }

    /// Dtype and shape, where they are known (host memory, or a payload that gives them).
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::ArrayD::<f64>::ones(vec![2, 3]));
    /// assert_eq!(t.meta().unwrap().shape, vec![2, 3]);
    /// ```
    pub fn meta(&self) -> Option<TensorMeta> {
        match self.data() {
            TensorData::Host(a) => Some(TensorMeta::of_host(&a)),
            TensorData::Foreign(p) => p.meta(),
        }
    }

    /// Dtype and shape, for logs.
    ///
    /// ```
    /// let t = boxfall::Tensor::from_array(ndarray::ArrayD::<f64>::ones(vec![2, 3]));
    /// assert_eq!(t.describe(), "float64[2, 3]");
    /// ```
    pub fn describe(&self) -> String {
        match self.data() {
            TensorData::Host(a) => format!("{}{:?}", a.dtype().name(), a.shape()),
            TensorData::Foreign(p) => p.describe(),
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}, {})", self.device(), self.describe())
    }
}

/// How a view's values follow from its base's, and how a write through the view reaches the
/// base: what [`Tensor::view_of`] keeps. The Python bindings implement it with NumPy's basic
/// indexing and reshaping functions applied to the base's host copy.
///
/// ```
/// use std::sync::Arc;
/// use boxfall::{tensor::{TensorData, ViewOps}, Device, Result, Tensor};
/// /// The first element of a float64 vector.
/// struct First;
/// impl ViewOps for First {
///     fn as_any(&self) -> &dyn std::any::Any { self }
///     fn materialize(&self, base: &Tensor, _device: Device) -> Result<TensorData> {
///         let a = base.to_host()?.as_f64().unwrap().slice(ndarray::s![0..1]).to_owned().into_dyn();
///         Ok(TensorData::Host(Arc::new(a.into())))
///     }
///     fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> {
///         let mut a = base.to_host()?.as_f64().unwrap().clone();
///         a[[0]] = src.to_host()?.as_f64().unwrap()[[0]];
///         base.set_data(TensorData::Host(Arc::new(a.into())));
///         Ok(())
///     }
/// }
/// let base = boxfall::native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
/// let v = Tensor::view_of(&base, Arc::new(First), 8).unwrap();
/// base.set_data(TensorData::Host(Arc::new(ndarray::arr1(&[5.0, 2.0]).into_dyn().into())));
/// assert_eq!(v.to_host().unwrap().as_f64().unwrap()[[0]], 5.0); // the base's write is seen
/// v.set_data(TensorData::Host(Arc::new(ndarray::arr1(&[7.0]).into_dyn().into())));
/// assert_eq!(base.to_host().unwrap().as_f64().unwrap().iter().copied().collect::<Vec<_>>(), vec![7.0, 2.0]); // and the view's
/// ```
pub trait ViewOps: Send + Sync + 'static {
    /// The description itself, to downcast.
    fn as_any(&self) -> &dyn Any;
    /// The view's values as `base` holds them now, as the data of a tensor on `device` (the
    /// view's, which is the base's).
    fn materialize(&self, base: &Tensor, device: Device) -> Result<TensorData>;
    /// Writes `src` (the view's new values, a tensor on the CPU or on the view's device) into
    /// the part of `base` the view sees, all or nothing.
    fn write(&self, base: &Tensor, src: &Tensor) -> Result<()>;
    /// The view made on the device from `base`'s payload (the backend's
    /// [`view`](crate::backend::Backend::view) hook), where the backend makes one: nothing
    /// crosses to make it. A backend kernel that writes it writes `base` where it shares
    /// `base`'s memory; a copy's write is written into `base` after the kernel
    /// ([`resident::settle`](crate::resident::settle)). `None` (the default) where it makes
    /// none: the view's values are then made from `base`'s host values
    /// ([`materialize`](Self::materialize)).
    fn on_device(&self, base: &Tensor, device: Device) -> Result<Option<DeviceView>> {
        let _ = (base, device);
        Ok(None)
    }

    /// Writes `values` (the view's new values, a payload on `base`'s device that a kernel of
    /// the backend wrote as a copy) into the part of `base` the view sees, on the device (the
    /// backend's [`view_write`](crate::backend::Backend::view_write) hook), where the backend
    /// does: nothing crosses to the host. [`ViewWrite::Declined`] (the default) where it does
    /// not: boxfall then writes the values into `base` through the host
    /// ([`resident::settle`](crate::resident::settle)).
    fn write_on_device(&self, base: &Tensor, values: &Tensor) -> Result<ViewWrite> {
        let _ = (base, values);
        Ok(ViewWrite::Declined)
    }

    /// The view in words, for errors (the operators that made it); "a view" by default.
    fn describe(&self) -> String {
        "a view".into()
    }
}

/// What a backend did with a view's values written into its base on the device
/// ([`ViewOps::write_on_device`], the backend's
/// [`view_write`](crate::backend::Backend::view_write) hook).
///
/// ```
/// use boxfall::tensor::ViewWrite;
/// assert!(matches!(ViewWrite::Declined, ViewWrite::Declined));
/// ```
pub enum ViewWrite {
    /// The backend writes no view on the device: boxfall writes it through the host.
    Declined,
    /// The base's payload was written where it is.
    InPlace,
    /// The base's new data (a device whose memory is immutable made a new payload): put in
    /// the base's place as a write of it.
    Replaced(TensorData),
}

/// A view made on the device from its base's payload ([`ViewOps::on_device`], the backend's
/// [`view`](crate::backend::Backend::view) hook): its data, and whether that shares the base's
/// device memory (a reshape of the whole buffer, a slice at an offset) or is a copy (a gather
/// into a new buffer).
///
/// ```
/// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
/// let v = boxfall::tensor::DeviceView { data: t.data(), shares: false };
/// assert!(!v.shares);
/// ```
pub struct DeviceView {
    /// The view's data: a payload on the base's device.
    pub data: TensorData,
    /// Whether the payload shares the base's device memory, so that a kernel's write of it is
    /// a write of the base. A copy's write reaches the base only through boxfall, which writes
    /// the copy's values into the base after the kernel.
    pub shares: bool,
}

/// A view's base and description, and the base's `data_version` its slot was made from.
struct ViewLink {
    base: Tensor,
    ops: Arc<dyn ViewOps>,
    synced: AtomicU64,
    /// What the view's slot is ([`ViewOps::on_device`]): made from the base's values
    /// ([`MADE_ON_HOST`]), a device view sharing the base's payload ([`SHARES_BASE`], whose
    /// write is a write of the base) or a device copy of it ([`COPIES_BASE`]).
    on_device: AtomicU8,
    /// A device copy's payload written by a backend kernel ([`Tensor::note_write`]) and not yet
    /// written into the base ([`crate::resident::settle`] does).
    unsaved: AtomicBool,
    /// How many backend kernels now running hold the slot as their payload of a view of a base
    /// whose host memory is exported ([`Tensor::pin_view_payload`]): while any does, the slot
    /// is not made again at each read (as NumPy's writes of the memory otherwise ask).
    pins: AtomicU32,
    /// Why the slot could not be made from the base at its last try (`refresh_view`), while
    /// it could not: reads that can fail raise it rather than read a stale slot.
    failure: Mutex<Option<String>>,
}

/// `ViewLink::on_device`: the slot was made from the base's values.
const MADE_ON_HOST: u8 = 0;
/// `ViewLink::on_device`: the slot is a device view sharing the base's payload.
const SHARES_BASE: u8 = 1;
/// `ViewLink::on_device`: the slot is a device copy of the view's part of the base's payload.
const COPIES_BASE: u8 = 2;

impl ViewLink {
    fn made_on_device(&self, shares: bool) {
        let state = if shares { SHARES_BASE } else { COPIES_BASE };
        self.unsaved.store(false, Ordering::Release);
        self.on_device.store(state, Ordering::Release);
    }
}

/// `ViewLink::synced` of a slot made from no version of the base.
const NEVER_SYNCED: u64 = u64::MAX;

impl Tensor {
    /// A view of `base` (which is no view itself: a view of a view is described from the
    /// first base): a tensor on `base`'s device whose values are what `ops` makes of
    /// `base`'s, now and after any write of `base`, and whose writes `ops` writes into
    /// `base`. Nothing is moved or copied to make it: the values are made when first read
    /// (again after a write of the base). `nbytes` is the view's byte count.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use boxfall::{tensor::{TensorData, ViewOps}, Device, Result, Tensor};
    /// # struct Same;
    /// # impl ViewOps for Same {
    /// #     fn as_any(&self) -> &dyn std::any::Any { self }
    /// #     fn materialize(&self, base: &Tensor, _: Device) -> Result<TensorData> { Ok(TensorData::Host(base.to_host()?)) }
    /// #     fn write(&self, base: &Tensor, src: &Tensor) -> Result<()> { base.set_data(TensorData::Host(src.to_host()?)); Ok(()) }
    /// # }
    /// let base = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let v = Tensor::view_of(&base, Arc::new(Same), 8).unwrap();
    /// assert!(v.is_view() && v.view_base().unwrap().same(&base) && v.nbytes() == 8);
    /// assert!(Tensor::view_of(&v, Arc::new(Same), 8).is_err()); // described from `base` instead
    /// ```
    pub fn view_of(base: &Tensor, ops: Arc<dyn ViewOps>, nbytes: usize) -> Result<Tensor> {
        if base.is_view() {
            return Err(Error::Fallback(
                "a view is made of its base's base (the description starts from it)".into(),
            ));
        }
        let flag = if base.is_host() { 0 } else { FOREIGN };
        let data = base
            .0
            .data
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .data
            .clone();
        Ok(Tensor(Shared::new_with(|| TensorInner {
            device: base.device(),
            nbytes: AtomicUsize::new((nbytes & !FOREIGN) | flag),
            // A stand-in of the right kind (host memory or a payload), never read: the slot is
            // made from the base before any read (`sync_view`).
            data: RwLock::new(Slot { data, view: None }),
            replaced: AtomicBool::new(false),
            loan: OnceLock::new(),
            version: AtomicU64::new(0),
            view: Some(Box::new(ViewLink {
                base: base.clone(),
                ops,
                synced: AtomicU64::new(NEVER_SYNCED),
                on_device: AtomicU8::new(MADE_ON_HOST),
                unsaved: AtomicBool::new(false),
                pins: AtomicU32::new(0),
                failure: Mutex::new(None),
            })),
            exported: AtomicU8::new(0),
            kept: Mutex::new(None),
        })))
    }

    /// Why this view's values cannot be made from its base now (its base was resized, the
    /// memory to make them is not there), after trying again: an error naming the view's
    /// operators, which the reads that can fail raise ([`Tensor::to_host`], Native's loans)
    /// rather than read stale values. `None` for a view that could be made and for a tensor
    /// that is no view.
    ///
    /// ```
    /// assert!(boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).view_failure().is_none());
    /// ```
    pub fn view_failure(&self) -> Option<Error> {
        let v = self.0.view.as_ref()?;
        self.sync_view();
        // Cleared by the next slot made: set only while the view cannot be made.
        let failure = v.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure.as_ref().map(|m| Error::Fallback(m.clone()))
    }

    /// Whether this view's slot could not be made at its last try (`view_failure` says why).
    #[cold]
    fn view_failed(&self) -> bool {
        self.0.view.as_ref().is_some_and(|v| {
            v.failure
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some()
        })
    }

    /// Whether the tensor is a view ([`Tensor::view_of`]).
    ///
    /// ```
    /// assert!(!boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).is_view());
    /// ```
    #[inline]
    pub fn is_view(&self) -> bool {
        self.0.view.is_some()
    }

    /// The base of a view.
    ///
    /// ```
    /// assert!(boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).view_base().is_none());
    /// ```
    pub fn view_base(&self) -> Option<&Tensor> {
        self.0.view.as_ref().map(|v| &v.base)
    }

    /// The description of a view.
    ///
    /// ```
    /// assert!(boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).view_ops().is_none());
    /// ```
    pub fn view_ops(&self) -> Option<&Arc<dyn ViewOps>> {
        self.0.view.as_ref().map(|v| &v.ops)
    }

    /// Writes `src`'s values (a tensor on the CPU or on this view's device, of the view's
    /// shape and dtype) through this view into its base, which every view of the base then
    /// sees. An error leaves the base as it was (the description's `write` is all or nothing).
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(t.write_view(&t).is_err()); // no view
    /// ```
    pub fn write_view(&self, src: &Tensor) -> Result<()> {
        let Some(v) = self.0.view.as_ref() else {
            return Err(Error::Fallback(format!(
                "a tensor on {} that is no view was written as one",
                self.device()
            )));
        };
        v.ops.write(&v.base, src)?;
        // The view holds what was written, where that is host memory as its own slot is: it
        // need not be made again from the base.
        if self.is_host() && src.is_host() {
            let version = v.base.data_version();
            self.replace_data(src.data());
            v.synced.store(version, Ordering::Release);
        } else {
            v.synced.store(NEVER_SYNCED, Ordering::Release);
        }
        Ok(())
    }

    /// Counts a write that changed the tensor's values where they are (a backend's hook that
    /// writes a payload in place), so that its views make their values again.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let v = t.data_version();
    /// t.note_write();
    /// assert_ne!(t.data_version(), v);
    /// ```
    pub fn note_write(&self) {
        let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        self.bump_version();
        // A view whose slot is a device payload made of its values on the host (`from_cpu`:
        // the backend has no `view` hook, or it declined) holds a copy of its part of the
        // base, as a gathered copy does: read from the slot itself, which a read through
        // `data` would make again from the base, losing the write.
        let host_made_payload = matches!(&slot.data, TensorData::Foreign(p) if p.as_any().downcast_ref::<HostOnly>().is_none());
        drop(slot);
        if let Some(v) = self.0.view.as_ref() {
            match v.on_device.load(Ordering::Acquire) {
                // A device view shares its base's payload: the base was written, its host
                // copy is stale, and its other views make their values again.
                SHARES_BASE => v.base.note_write(),
                // A device copy: the base does not hold the write yet, and its host copy is
                // still its values, from which `resident::settle` writes the copy's into it.
                COPIES_BASE => v.unsaved.store(true, Ordering::Release),
                _ if host_made_payload => v.unsaved.store(true, Ordering::Release),
                _ => {}
            }
        }
    }

    /// Puts `data`, the new device data a backend's kernel or hook made for this tensor
    /// instead of writing its payload where it is (a device whose memory is immutable, as a
    /// `jax.Array` is), in the tensor's place as a write of it: the data version moves on,
    /// so its host copy is stale and its views make their values again. A view's slot takes
    /// it as a device copy of its part of the base not yet written there
    /// ([`crate::resident::settle`] writes it into the base after the kernel). A tensor
    /// whose host memory is exported keeps it as the payload made for the running kernel,
    /// which `settle` copies into that memory.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// let v = t.data_version();
    /// t.put_written(boxfall::native::tensor(ndarray::arr1(&[2.0]).into_dyn()).data());
    /// assert_ne!(t.data_version(), v);
    /// assert_eq!(t.to_host().unwrap().as_f64().unwrap()[[0]], 2.0);
    /// ```
    pub fn put_written(&self, data: TensorData) {
        if let Some(v) = self.0.view.as_ref() {
            self.replace_data(data);
            v.on_device.store(COPIES_BASE, Ordering::Release);
            v.unsaved.store(true, Ordering::Release);
            return;
        }
        if self.host_exported().is_some() && self.install_exported_payload(data.clone()) {
            let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
            self.bump_version();
            drop(slot);
            return;
        }
        self.set_data(data);
    }

    /// Whether this view's values are a device copy of its part of its base's payload
    /// ([`DeviceView::shares`] false): a backend kernel's write of it reaches the base only
    /// when [`crate::resident::settle`] writes it there. False for a tensor that is no view.
    ///
    /// ```
    /// assert!(!boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).is_device_copy());
    /// ```
    pub fn is_device_copy(&self) -> bool {
        self.0
            .view
            .as_ref()
            .is_some_and(|v| v.on_device.load(Ordering::Acquire) == COPIES_BASE)
    }

    /// The payload of a view that is a device copy of its base's, if a backend kernel wrote it
    /// ([`Tensor::note_write`]) since it was made and nobody took it since: what is to be
    /// written into the base. The slot's data as it is, not made again from the base (whose
    /// version has not moved for the write).
    pub(crate) fn take_unsaved_view(&self) -> Option<TensorData> {
        let v = self.0.view.as_ref()?;
        if !v.unsaved.swap(false, Ordering::AcqRel) {
            return None;
        }
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        Some(slot.data.clone())
    }

    /// Marks a view's slot as made from no version of its base, so that it is made again at
    /// its next read: a device copy whose write could not be written into the base is
    /// dropped, as the base is left, rather than seen through the view alone.
    pub(crate) fn forget_view_slot(&self) {
        if let Some(v) = self.0.view.as_ref() {
            v.synced.store(NEVER_SYNCED, Ordering::Release);
        }
    }

    /// Puts `data` (a payload made now of this view's values, whose base's host memory is
    /// exported) in the view's slot for a backend kernel about to run, and keeps it there until
    /// [`Tensor::unpin_view_payload`]: a view of such a base is otherwise made again at every
    /// read (NumPy may write the memory at any time), so the kernel would find its payload gone.
    /// A kernel's write of it is written into the base by [`crate::resident::settle`]. False
    /// (nothing done) for a tensor that is no view.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!t.pin_view_payload(t.data())); // no view
    /// ```
    pub fn pin_view_payload(&self, data: TensorData) -> bool {
        let Some(v) = self.0.view.as_ref() else {
            return false;
        };
        let version = v.base.data_version();
        v.pins.fetch_add(1, Ordering::AcqRel);
        self.replace_data(data);
        v.on_device.store(MADE_ON_HOST, Ordering::Release);
        v.synced.store(version, Ordering::Release);
        true
    }

    /// Ends one pin of [`Tensor::pin_view_payload`] (a kernel ended); true where there was one.
    /// The last one leaves the slot to be made again from the base at its next read.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!t.unpin_view_payload());
    /// ```
    pub fn unpin_view_payload(&self) -> bool {
        let Some(v) = self.0.view.as_ref() else {
            return false;
        };
        let unpinned = v
            .pins
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if unpinned {
            v.synced.store(NEVER_SYNCED, Ordering::Release);
        }
        unpinned
    }

    /// Whether this view's slot is pinned for a running kernel ([`Tensor::pin_view_payload`]).
    ///
    /// ```
    /// assert!(!boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).is_pinned_view());
    /// ```
    pub fn is_pinned_view(&self) -> bool {
        self.0
            .view
            .as_ref()
            .is_some_and(|v| v.pins.load(Ordering::Acquire) != 0)
    }

    /// Whether this view's values are a device view of its base's payload
    /// ([`ViewOps::on_device`]), sharing it or a copy; false for a tensor that is no view.
    ///
    /// ```
    /// assert!(!boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).is_device_view());
    /// ```
    pub fn is_device_view(&self) -> bool {
        self.0
            .view
            .as_ref()
            .is_some_and(|v| v.on_device.load(Ordering::Acquire) != MADE_ON_HOST)
    }

    /// Makes a stale view's slot again as a device view of its base's payload
    /// ([`ViewOps::on_device`]), where the base's values are on the device only (no host
    /// memory, no current host copy) and its backend makes one: what a kernel of the backend
    /// reading the view needs, with nothing crossing. True where it did; false (nothing done)
    /// for a tensor that is no view, a view that is current, a base with host values (the
    /// view's are made from them when read) and a backend that makes no device view. The
    /// backend's error (a view of the wrong shape) is returned, and the view stays stale.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!t.sync_device_view().unwrap()); // no view
    /// ```
    pub fn sync_device_view(&self) -> Result<bool> {
        let Some(v) = self.0.view.as_ref() else {
            return Ok(false);
        };
        let base = &v.base;
        if !self.view_is_stale() || base.is_host() || base.is_exported() {
            return Ok(false);
        }
        // Read first: a write of the base meanwhile leaves the view stale, to be made again.
        let version = base.data_version();
        if base.host_copy().is_some() {
            return Ok(false);
        }
        let Some(made) = v.ops.on_device(base, self.device())? else {
            return Ok(false);
        };
        self.replace_data(made.data);
        v.made_on_device(made.shares);
        v.synced.store(version, Ordering::Release);
        Ok(true)
    }

    /// Puts `made`, a device view of this view's base made from the base's payload
    /// ([`ViewOps::on_device`]), in place of the host-only payload `was` (the same values),
    /// if the view still holds it: as [`Tensor::install_payload`], and the view is marked as
    /// sharing its base's payload or copying it ([`DeviceView::shares`]). False (nothing done)
    /// for a tensor that is no view, or was made again since.
    ///
    /// ```
    /// use boxfall::tensor::DeviceView;
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu.clone(), boxfall::native::DEVICE);
    /// let was = t.payload().unwrap();
    /// assert!(!t.install_device_view(&was, DeviceView { data: t.data(), shares: true })); // no view
    /// ```
    pub fn install_device_view(&self, was: &Arc<dyn Payload>, made: DeviceView) -> bool {
        let Some(v) = self.0.view.as_ref() else {
            return false;
        };
        if !self.install_payload(was, made.data) {
            return false;
        }
        v.made_on_device(made.shares);
        true
    }

    /// Whether this view's slot was made from an older version of its base (false for a
    /// tensor that is no view).
    #[inline(always)]
    fn view_is_stale(&self) -> bool {
        match &self.0.view {
            None => false,
            // NumPy writes an exported base where it is, moving no version: every read makes
            // the view again.
            Some(v) => {
                v.synced.load(Ordering::Acquire) != v.base.data_version()
                    || (v.base.is_exported() && v.pins.load(Ordering::Acquire) == 0)
            }
        }
    }

    /// Makes a view's slot from its base again if the base was written since (and puts right
    /// exported bool memory that NumPy may have written, before it is read).
    #[inline(always)]
    fn sync_view(&self) {
        if self.view_is_stale() {
            self.refresh_view();
        }
        if self.has_exported_bools() {
            self.normalize_exported_bools();
        }
    }

    #[cold]
    #[inline(never)]
    fn refresh_view(&self) {
        let Some(v) = self.0.view.as_ref() else {
            return;
        };
        // Read first: a write of the base meanwhile leaves the view stale, to be made again.
        let version = v.base.data_version();
        match v.ops.materialize(&v.base, self.device()) {
            Ok(data) => {
                self.replace_data(data);
                v.on_device.store(MADE_ON_HOST, Ordering::Release);
                v.synced.store(version, Ordering::Release);
                v.failure.lock().unwrap_or_else(|e| e.into_inner()).take();
            }
            // The slot is stale (it holds older values, or a stand-in): the failure is kept,
            // and every read that can fail raises it (`view_failure`).
            Err(e) => {
                let what = format!(
                    "{} of a tensor on {} ({}) cannot be made from its base: {e}",
                    v.ops.describe(),
                    self.device(),
                    v.base.describe()
                );
                *v.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(what);
            }
        }
    }
}

impl Tensor {
    /// The host memory, exported: memory that a foreign runtime (NumPy, through `np.asarray`)
    /// may read and write where it is, shared with nobody but this tensor and its loan. From
    /// the first export on, every write of the tensor (`set_data`, the fallback's write-back, a
    /// write through a view) copies the values into this memory rather than replacing it, so
    /// the foreign runtime sees boxfall's writes and boxfall sees its (a view of the tensor
    /// makes its values again at every read). Data of another shape or dtype (an `out=`
    /// argument resized) replaces the memory as for any tensor: the exported memory then stays
    /// with whoever holds it, no longer the tensor's, and the tensor is no longer exported.
    ///
    /// Memory that another tensor shares (one made from this tensor's data), or that is not in
    /// C order, is first copied, so that no other tensor sees the writes. An error for a view
    /// (its memory is its base's: export the base) and for a tensor without host memory.
    ///
    /// ```
    /// use boxfall::{native, tensor::TensorData};
    /// let t = native::tensor(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let memory = t.export_host().unwrap();
    /// assert!(t.is_exported());
    /// t.set_data(TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[5.0, 6.0]).into_dyn().into())));
    /// assert_eq!(memory.as_f64().unwrap().iter().copied().collect::<Vec<_>>(), vec![5.0, 6.0]); // written where it is
    /// assert!(std::sync::Arc::ptr_eq(&t.export_host().unwrap(), &memory)); // the same memory again
    /// ```
    pub fn export_host(&self) -> Result<Arc<HostArray>> {
        if self.is_view() {
            return Err(Error::Fallback(format!(
                "a view on {} has no memory of its own to export (its base's is)",
                self.device()
            )));
        }
        self.sync_view();
        loop {
            let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
            let TensorData::Host(host) = &slot.data else {
                return Err(Error::Fallback(format!(
                    "a tensor on {} holds no host memory to export",
                    self.device()
                )));
            };
            if self.is_exported() {
                return Ok(Arc::clone(host));
            }
            // Handles this tensor holds itself: its slot's, and its loan's (read under the
            // loan's lock, which is always taken after this tensor's).
            let lent = self.0.loan.get().is_some_and(|l| {
                let loan = l.0.data.read().unwrap_or_else(|e| e.into_inner());
                matches!(&loan.data, TensorData::Host(h) if Arc::ptr_eq(h, host))
            });
            let ordered = host_match!(&**host, a => a.is_standard_layout());
            if ordered && Arc::strong_count(host) <= 1 + usize::from(lent) {
                let bools = if host.dtype() == DType::Bool {
                    EXPORTED_BOOL
                } else {
                    0
                };
                self.0.exported.store(EXPORTED | bools, Ordering::Relaxed);
                return Ok(Arc::clone(host));
            }
            // Shared (or in another order): this tensor takes a copy of its own, and the
            // loop checks it again (a write meanwhile may have replaced it).
            let copy = TensorData::Host(Arc::new(host.try_clone()?));
            self.replace_locked(slot, copy);
        }
    }

    /// Whether the host memory was exported ([`Tensor::export_host`]) and is still the
    /// tensor's: writes then copy values into it.
    ///
    /// ```
    /// let t = boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(!t.is_exported());
    /// t.export_host().unwrap();
    /// assert!(t.is_exported());
    /// t.set_data(boxfall::tensor::TensorData::Host(std::sync::Arc::new(ndarray::arr1(&[1.0, 2.0]).into_dyn().into())));
    /// assert!(!t.is_exported()); // another shape: replaced, no longer the exported memory
    /// ```
    #[inline]
    pub fn is_exported(&self) -> bool {
        self.0.exported.load(Ordering::Relaxed) != 0
    }

    /// Whether the tensor holds exported bool memory, which NumPy may have written as bytes
    /// other than 0 and 1.
    #[inline(always)]
    fn has_exported_bools(&self) -> bool {
        self.0.exported.load(Ordering::Relaxed) & EXPORTED_BOOL != 0
    }

    /// Puts exported bool memory right before a read (`host_memory::normalize_bools`), under
    /// the write lock, so that no other boxfall write of the memory runs meanwhile.
    #[cold]
    #[inline(never)]
    fn normalize_exported_bools(&self) {
        let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        if let TensorData::Host(h) = &slot.data {
            if let HostArray::Bool(a) = &**h {
                crate::host_memory::normalize_bools(a);
            }
        }
    }

    /// `data` written into exported memory `current` where it is (then `current` is what the
    /// slot keeps), or, for data of another shape or dtype, `data` itself, and the tensor is
    /// no longer exported. The caller holds the write lock.
    #[cold]
    #[inline(never)]
    fn write_exported(&self, current: &TensorData, data: TensorData) -> TensorData {
        if self.0.exported.load(Ordering::Relaxed) & HOST_EXPORTED != 0 {
            // A device tensor whose host memory is exported stays so while its data is that
            // memory's host-only payload (or a device payload made of it, put in place by
            // `install_exported_payload`, not here): other data ends the export.
            let kept = self.0.kept.lock().unwrap_or_else(|e| e.into_inner());
            let same = match (&data, &*kept) {
                (TensorData::Foreign(p), Some((_, cpu))) => p
                    .as_any()
                    .downcast_ref::<HostOnly>()
                    .is_some_and(|h| h.cpu.same(cpu)),
                _ => false,
            };
            drop(kept);
            if !same {
                self.0.exported.store(0, Ordering::Relaxed);
            }
            return data;
        }
        if let (TensorData::Host(cur), TensorData::Host(new)) = (current, &data) {
            if Arc::ptr_eq(cur, new) || write_host_into(cur, new) {
                return current.clone();
            }
        }
        self.0.exported.store(0, Ordering::Relaxed);
        data
    }
}

/// `src`'s values written into `dst`'s memory where it is (`host_memory::write_into`); false
/// where the dtypes or shapes differ.
fn write_host_into(dst: &HostArray, src: &HostArray) -> bool {
    use crate::host_memory::write_into;
    macro_rules! pairs {
        ($($v:ident),*) => {
            match (dst, src) {
                $((HostArray::$v(d), HostArray::$v(s)) => write_into(d, s),)*
                _ => false,
            }
        };
    }
    pairs!(Bool, I8, I16, I32, I64, U8, U16, U32, U64, F32, F64, C64, C128)
}

/// The payload of a device tensor whose values are on the host only (residency): a result the
/// CPU fallback left on the host side, whose device payload the backend's `from_cpu` makes
/// when the device first needs it ([`Tensor::host_only`]). It answers for its values (byte
/// count, dtype and shape, a host copy) from the CPU tensor it holds.
///
/// ```
/// use boxfall::{native, tensor::HostOnly, Tensor};
/// let cpu = Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
/// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
/// let p = t.payload().unwrap();
/// assert!(p.as_any().downcast_ref::<HostOnly>().unwrap().cpu().same(&cpu));
/// assert_eq!((p.nbytes(), p.describe()), (16, "float64[2]".to_string()));
/// ```
pub struct HostOnly {
    cpu: Tensor,
    /// The operator whose result it is (`Tensor::note_made_by`), named by an error when its
    /// payload cannot be made later.
    made_by: OnceLock<Arc<dyn Origin>>,
}

/// What made a tensor (the operator whose result it is), named by an error raised far from
/// the call (the payload of a result kept on the host, made when the device needs it). The
/// dispatcher's operator entries are one, so that keeping one takes a reference count and no
/// allocation.
///
/// ```
/// struct Named;
/// impl boxfall::tensor::Origin for Named {
///     fn name(&self) -> String { "demo::f".into() }
/// }
/// assert_eq!(boxfall::tensor::Origin::name(&Named), "demo::f");
/// ```
pub trait Origin: Send + Sync + 'static {
    /// The operator's name.
    fn name(&self) -> String;
}

impl HostOnly {
    /// The CPU tensor holding the values.
    ///
    /// ```
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu.clone(), boxfall::native::DEVICE);
    /// let p = t.payload().unwrap();
    /// assert!(p.as_any().downcast_ref::<boxfall::tensor::HostOnly>().unwrap().cpu().same(&cpu));
    /// ```
    pub fn cpu(&self) -> &Tensor {
        &self.cpu
    }
}

impl Payload for HostOnly {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn nbytes(&self) -> usize {
        self.cpu.nbytes()
    }
    // The CPU tensor is never written (it is a host copy), so its size is fixed.
    fn fixed_nbytes(&self) -> Option<usize> {
        Some(self.cpu.nbytes())
    }
    fn to_host(&self) -> Result<HostArray> {
        self.cpu.to_host()?.try_clone()
    }
    fn describe(&self) -> String {
        self.cpu.describe()
    }
    fn meta(&self) -> Option<TensorMeta> {
        self.cpu.meta()
    }
}

/// Where a tensor's values are.
///
/// ```
/// use boxfall::{native, tensor::Residency, Tensor};
/// assert_eq!(native::tensor(ndarray::arr1(&[1.0]).into_dyn()).residency(), Residency::Memory);
/// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// assert_eq!(Tensor::host_only(cpu, native::DEVICE).residency(), Residency::Host);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// Host memory the tensor owns (a CPU or Native tensor): no payload, nothing to move.
    Memory,
    /// A device payload, and no current host copy.
    Device,
    /// The host only: no payload yet ([`Tensor::host_only`]).
    Host,
    /// A device payload and a host copy of the same values.
    Both,
}

// Residency: a device tensor's host copy, kept beside its payload and tagged with the data
// version it holds the values of, and a device tensor whose values are on the host only.
// Kept apart from the host-memory code above: a tensor of host memory never has either.
impl Tensor {
    /// A tensor on `device` whose values are `cpu`'s and stay on the host until the device
    /// needs them (a [`HostOnly`] payload): what a lazy backend's `from_cpu_owned` gives for
    /// the CPU fallback's results. The backend's `from_cpu` makes its device payload when it
    /// is asked for (`boxfall::resident::materialize`).
    ///
    /// ```
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0, 2.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu.clone(), boxfall::native::DEVICE);
    /// assert!(t.is_host_only() && !t.is_host() && t.nbytes() == 16);
    /// assert!(t.host_copy().unwrap().same(&cpu));
    /// ```
    pub fn host_only(cpu: Tensor, device: Device) -> Tensor {
        Tensor::foreign(
            device,
            Arc::new(HostOnly {
                cpu,
                made_by: OnceLock::new(),
            }),
        )
    }

    /// Records `origin` (the operator whose result this is) on a tensor whose values are on
    /// the host only, for the error of a payload that cannot be made later
    /// ([`Tensor::made_by`]); nothing for any other tensor.
    ///
    /// ```
    /// use std::sync::Arc;
    /// struct Named;
    /// impl boxfall::tensor::Origin for Named { fn name(&self) -> String { "demo::f".into() } }
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu, boxfall::native::DEVICE);
    /// t.note_made_by(Arc::new(Named));
    /// assert_eq!(t.made_by().as_deref(), Some("demo::f"));
    /// ```
    pub fn note_made_by(&self, origin: Arc<dyn Origin>) {
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        if let TensorData::Foreign(p) = &slot.data {
            if let Some(h) = p.as_any().downcast_ref::<HostOnly>() {
                let _ = h.made_by.set(origin);
            }
        }
    }

    /// The name of the operator whose result this host-only tensor is, where it was recorded
    /// ([`Tensor::note_made_by`]).
    ///
    /// ```
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(boxfall::Tensor::host_only(cpu, boxfall::native::DEVICE).made_by().is_none());
    /// ```
    pub fn made_by(&self) -> Option<String> {
        let slot = self.0.data.read().unwrap_or_else(|e| e.into_inner());
        match &slot.data {
            TensorData::Foreign(p) => p
                .as_any()
                .downcast_ref::<HostOnly>()
                .and_then(|h| h.made_by.get().map(|o| o.name())),
            TensorData::Host(_) => None,
        }
    }

    /// Whether the tensor's values are on the host only ([`Tensor::host_only`]).
    ///
    /// ```
    /// assert!(!boxfall::native::tensor(ndarray::arr1(&[1.0]).into_dyn()).is_host_only());
    /// ```
    #[inline]
    pub fn is_host_only(&self) -> bool {
        !self.is_host() && self.host_only_values().is_some()
    }

    /// The CPU tensor of a tensor whose values are on the host only.
    ///
    /// ```
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu.clone(), boxfall::native::DEVICE);
    /// assert!(t.host_only_values().unwrap().same(&cpu));
    /// ```
    pub fn host_only_values(&self) -> Option<Tensor> {
        match self.data() {
            TensorData::Foreign(p) => p.as_any().downcast_ref::<HostOnly>().map(|h| h.cpu.clone()),
            TensorData::Host(_) => None,
        }
    }

    /// The tensor's current values on the host, where it has them without asking its backend:
    /// the values of a host-only tensor, or the host copy kept beside its payload while its data
    /// version is still the one the copy was made at. `None` for a tensor of host memory (which
    /// is its own host copy) and for a device tensor without a current copy.
    ///
    /// ```
    /// use boxfall::{native, tensor::Payload, Tensor};
    /// struct Remote;
    /// impl Payload for Remote { fn as_any(&self) -> &dyn std::any::Any { self } }
    /// let t = Tensor::foreign(native::DEVICE, std::sync::Arc::new(Remote));
    /// assert!(t.host_copy().is_none());
    /// let copy = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// t.keep_host_copy(t.data_version(), copy.clone());
    /// assert!(t.host_copy().unwrap().same(&copy));
    /// t.note_write(); // a write: the copy is stale
    /// assert!(t.host_copy().is_none());
    /// ```
    pub fn host_copy(&self) -> Option<Tensor> {
        if self.is_host() {
            return None;
        }
        if let Some(cpu) = self.host_exported() {
            return Some(cpu);
        }
        // Read first: it brings a view's slot up to date with its base.
        if let Some(cpu) = self.host_only_values() {
            return Some(cpu);
        }
        let kept = self.0.kept.lock().unwrap_or_else(|e| e.into_inner());
        match &*kept {
            Some((v, cpu)) if *v == self.data_version() => Some(cpu.clone()),
            _ => None,
        }
    }

    /// Keeps `cpu` (a CPU tensor nobody writes) as the host copy of this device tensor's
    /// values at data version `version`, read before the values were: kept only while the
    /// version is still that (a write since, which the copy may have missed, keeps nothing).
    /// A tensor of host memory keeps nothing.
    ///
    /// ```
    /// use boxfall::{native, tensor::Payload, Tensor};
    /// struct Remote;
    /// impl Payload for Remote { fn as_any(&self) -> &dyn std::any::Any { self } }
    /// let t = Tensor::foreign(native::DEVICE, std::sync::Arc::new(Remote));
    /// let v = t.data_version();
    /// t.note_write();
    /// t.keep_host_copy(v, Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()));
    /// assert!(t.host_copy().is_none()); // read before the write: not kept
    /// ```
    pub fn keep_host_copy(&self, version: u64, cpu: Tensor) {
        // Exported host memory is the values themselves, kept in the same slot.
        if self.is_host() || self.host_exported().is_some() {
            return;
        }
        let mut kept = self.0.kept.lock().unwrap_or_else(|e| e.into_inner());
        let old = if self.data_version() == version {
            kept.replace((version, cpu))
        } else {
            kept.take()
        };
        drop(kept);
        // A foreign object's drop may run foreign code: not under the lock.
        drop(old);
    }

    /// Where the tensor's values are: host memory of its own, a device payload, the host only,
    /// or both a payload and a current host copy.
    ///
    /// ```
    /// use boxfall::{native, tensor::{Payload, Residency}, Tensor};
    /// struct Remote;
    /// impl Payload for Remote { fn as_any(&self) -> &dyn std::any::Any { self } }
    /// let t = Tensor::foreign(native::DEVICE, std::sync::Arc::new(Remote));
    /// assert_eq!(t.residency(), Residency::Device);
    /// t.keep_host_copy(t.data_version(), Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()));
    /// assert_eq!(t.residency(), Residency::Both);
    /// ```
    pub fn residency(&self) -> Residency {
        if self.is_host() {
            Residency::Memory
        } else if self.is_host_only() {
            Residency::Host
        } else if self.host_copy().is_some() {
            Residency::Both
        } else {
            Residency::Device
        }
    }

    /// Puts `data` (the device payload made of a host-only tensor's values) in place of the
    /// host-only payload `was`, if the tensor still holds it: the values are the same, so the
    /// data version stays and the tensor's views stay as they are. False (nothing done) where
    /// the tensor was written since.
    ///
    /// ```
    /// use boxfall::{native, tensor::TensorData, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
    /// let (was, v) = (t.payload().unwrap(), t.data_version());
    /// let made = Tensor::host_only(cpu, native::DEVICE); // stands in for a device payload
    /// assert!(t.install_payload(&was, made.data()));
    /// assert_eq!(t.data_version(), v);
    /// assert!(!t.install_payload(&was, made.data())); // `was` is gone
    /// ```
    pub fn install_payload(&self, was: &Arc<dyn Payload>, data: TensorData) -> bool {
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        let same = matches!(&slot.data, TensorData::Foreign(p) if std::ptr::addr_eq(Arc::as_ptr(p), Arc::as_ptr(was)));
        if !same {
            return false;
        }
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        let old = std::mem::replace(&mut slot.data, data);
        drop(slot);
        drop(old);
        true
    }

    /// The CPU tensor whose exported memory holds this device tensor's values
    /// ([`Tensor::export_device_values`]), while it does: `None` for any other tensor.
    ///
    /// ```
    /// let cpu = boxfall::Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = boxfall::Tensor::host_only(cpu.clone(), boxfall::native::DEVICE);
    /// assert!(t.host_exported().is_none());
    /// assert!(t.export_device_values(t.data_version(), cpu.clone()).unwrap().is_some());
    /// assert!(t.host_exported().unwrap().same(&cpu));
    /// ```
    pub fn host_exported(&self) -> Option<Tensor> {
        if self.0.exported.load(Ordering::Relaxed) & HOST_EXPORTED == 0 {
            return None;
        }
        let kept = self.0.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.as_ref().map(|(_, cpu)| cpu.clone())
    }

    /// Makes the host authoritative for this device tensor (no view, not of host memory): `cpu`
    /// (a CPU tensor of host memory holding its values as of data version `version`) has its
    /// memory exported (`export_host`), and the tensor becomes host-only over it, its device
    /// payload dropped, its data version unchanged (the values are the same). From then on the
    /// tensor's writes through boxfall are written into that memory where it is
    /// (`resident::write`), and its device payload is made from it again each time the device
    /// needs one (`resident::materialize`). `Ok(None)` where the tensor was written since
    /// `version` or is exported already (nothing done; read again), else the exported memory.
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let t = Tensor::host_only(Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn()), native::DEVICE);
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let memory = t.export_device_values(t.data_version(), cpu.clone()).unwrap().unwrap();
    /// assert!(t.is_host_only() && cpu.is_exported() && t.is_exported());
    /// assert!(std::sync::Arc::ptr_eq(&memory, &cpu.host_array().unwrap()));
    /// ```
    pub fn export_device_values(
        &self,
        version: u64,
        cpu: Tensor,
    ) -> Result<Option<Arc<HostArray>>> {
        if self.is_host() || self.is_view() || !cpu.is_host() || cpu.key() != DispatchKey::CPU {
            return Err(Error::Fallback(format!(
                "the values of a tensor on {} cannot be exported as host memory it stands on",
                self.device()
            )));
        }
        let memory = cpu.export_host()?;
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        // Another thread's export meanwhile holds the values now (its NumPy array must stay
        // the tensor's): the caller takes that memory instead.
        let exported = self.0.exported.load(Ordering::Relaxed) & HOST_EXPORTED != 0;
        if exported || self.0.version.load(Ordering::Relaxed) != version {
            return Ok(None);
        }
        let data = TensorData::Foreign(Arc::new(HostOnly {
            cpu: cpu.clone(),
            made_by: OnceLock::new(),
        }));
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        let old = std::mem::replace(&mut slot.data, data);
        let old_kept = self
            .0
            .kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace((version, cpu));
        self.0.exported.store(HOST_EXPORTED, Ordering::Relaxed);
        drop(slot);
        // Foreign objects' drops may run foreign code: not under the lock.
        drop((old, old_kept));
        Ok(Some(memory))
    }

    /// Ends the export of this device tensor's host memory ([`Tensor::host_exported`]): what
    /// a write of another shape or dtype does, after which the memory is no longer the
    /// tensor's values (NumPy's arrays of it keep the old ones).
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
    /// t.export_device_values(t.data_version(), cpu).unwrap();
    /// t.end_host_export();
    /// assert!(t.host_exported().is_none() && !t.is_exported());
    /// ```
    pub fn end_host_export(&self) {
        let slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        self.0.exported.fetch_and(!HOST_EXPORTED, Ordering::Relaxed);
        drop(slot);
    }

    /// Puts `data` (a device payload made of the exported host values) in place while the
    /// tensor's host memory is still exported ([`Tensor::host_exported`]), without moving the
    /// data version; false (nothing done) otherwise.
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
    /// assert!(!t.install_exported_payload(native::tensor(ndarray::arr1(&[1.0]).into_dyn()).data()));
    /// t.export_device_values(t.data_version(), cpu).unwrap();
    /// assert!(t.install_exported_payload(native::tensor(ndarray::arr1(&[1.0]).into_dyn()).data()));
    /// assert!(!t.is_host_only() && t.host_exported().is_some());
    /// ```
    pub fn install_exported_payload(&self, data: TensorData) -> bool {
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        if self.0.exported.load(Ordering::Relaxed) & HOST_EXPORTED == 0 {
            return false;
        }
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        let old = std::mem::replace(&mut slot.data, data);
        drop(slot);
        drop(old);
        true
    }

    /// Drops the device payload of a tensor whose host memory is exported, which becomes
    /// host-only over that memory again (without moving the data version), and gives the payload
    /// back (`None`: the tensor held none, or its memory is not exported).
    ///
    /// ```
    /// use boxfall::{native, Tensor};
    /// let cpu = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// let t = Tensor::host_only(cpu.clone(), native::DEVICE);
    /// t.export_device_values(t.data_version(), cpu).unwrap();
    /// assert!(t.release_exported_payload().is_none()); // host-only already
    /// t.install_exported_payload(native::tensor(ndarray::arr1(&[1.0]).into_dyn()).data());
    /// assert!(t.release_exported_payload().is_some() && t.is_host_only());
    /// ```
    pub fn release_exported_payload(&self) -> Option<TensorData> {
        let cpu = self.host_exported()?;
        let mut slot = self.0.data.write().unwrap_or_else(|e| e.into_inner());
        if self.0.exported.load(Ordering::Relaxed) & HOST_EXPORTED == 0 {
            return None;
        }
        if let TensorData::Foreign(p) = &slot.data {
            if p.as_any().downcast_ref::<HostOnly>().is_some() {
                return None;
            }
        }
        let data = TensorData::Foreign(Arc::new(HostOnly {
            cpu,
            made_by: OnceLock::new(),
        }));
        self.0.nbytes.store(nbytes_of(&data), Ordering::Relaxed);
        let old = std::mem::replace(&mut slot.data, data);
        drop(slot);
        Some(old)
    }
}
