//! The element types host memory holds, and their kinds.

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
