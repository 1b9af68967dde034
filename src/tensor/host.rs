//! Host memory: an `ndarray` of any dtype (`HostArray`), the macros that match on it, and a
//! tensor's metadata.

use std::borrow::Cow;
use std::fmt;

use ndarray::ArrayD;
use num_complex::Complex;

use crate::error::Result;

use super::dtype::DType;

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
    /// The element type, as NumPy names it (`"float64"`): borrowed where it is a name boxfall
    /// knows ([`dtype_name`]), so that copying a meta (the graph recorder does, for every
    /// result of every call) allocates nothing for it.
    pub dtype: Cow<'static, str>,
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
            dtype: Cow::Borrowed(a.dtype().name()),
            shape: a.shape().to_vec(),
        }
    }
}

/// A dtype's name as [`TensorMeta::dtype`] keeps it: borrowed for the names of [`DType`] and
/// the other floating types devices use (`float16`, `bfloat16`), owned for any other.
///
/// ```
/// use std::borrow::Cow;
/// use boxfall::tensor::dtype_name;
/// assert!(matches!(dtype_name("float32"), Cow::Borrowed("float32")));
/// assert!(matches!(dtype_name("float8_e4m3fn"), Cow::Owned(_)));
/// ```
pub fn dtype_name(name: &str) -> Cow<'static, str> {
    const OTHERS: [&str; 2] = ["float16", "bfloat16"];
    match DType::from_name(name) {
        Some(d) => Cow::Borrowed(d.name()),
        None => match OTHERS.iter().find(|o| **o == name) {
            Some(o) => Cow::Borrowed(o),
            None => Cow::Owned(name.to_owned()),
        },
    }
}

impl fmt::Display for TensorMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

/// `src`'s values written into `dst`'s memory where it is (`host_memory::write_into`); false
/// where the dtypes or shapes differ.
pub(super) fn write_host_into(dst: &HostArray, src: &HostArray) -> bool {
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
