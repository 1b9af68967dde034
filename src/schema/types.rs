//! The data model of a schema: plain values with public fields, built by the parser and read by
//! the printer, the dispatcher and the bindings.

/// One operator's signature: name, overload, arguments and returns.
///
/// ```
/// use boxfall::FunctionSchema;
/// let s = FunctionSchema::parse("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")?;
/// assert_eq!(s.name, "aten::add");
/// assert_eq!(s.overload_name, "Tensor");
/// assert_eq!(s.arguments.len(), 3);
/// assert!(s.arguments[2].kwarg_only);
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionSchema {
    /// `ns::op` without the overload, e.g. `aten::add`.
    pub name: String,
    /// The overload, e.g. `Tensor`; empty for the default overload.
    pub overload_name: String,
    /// The arguments in order. Keyword-only ones (after `*`) come last.
    pub arguments: Vec<Argument>,
    /// The returns in order; an unnamed return has the name `""`.
    pub returns: Vec<Argument>,
    /// The arguments end with `...`.
    pub is_vararg: bool,
    /// The returns end with `...`.
    pub is_varret: bool,
}

impl FunctionSchema {
    /// The namespace: the part of [`name`](Self::name) before `::`.
    ///
    /// ```
    /// let s: boxfall::FunctionSchema = "aten::add.Tensor(Tensor self) -> Tensor".parse()?;
    /// assert_eq!(s.namespace(), "aten");
    /// # Ok::<(), boxfall::SchemaError>(())
    /// ```
    pub fn namespace(&self) -> &str {
        self.name.split_once("::").map_or("", |(ns, _)| ns)
    }

    /// The operator's name without namespace and overload.
    ///
    /// ```
    /// let s: boxfall::FunctionSchema = "aten::add.Tensor(Tensor self) -> Tensor".parse()?;
    /// assert_eq!(s.base_name(), "add");
    /// # Ok::<(), boxfall::SchemaError>(())
    /// ```
    pub fn base_name(&self) -> &str {
        self.name
            .split_once("::")
            .map_or(&self.name, |(_, base)| base)
    }

    /// The name counters, errors and `op.name` use: `ns::op`, or `ns::op.overload`.
    ///
    /// ```
    /// let s: boxfall::FunctionSchema = "aten::add.Tensor(Tensor self) -> Tensor".parse()?;
    /// assert_eq!(s.operator_name(), "aten::add.Tensor");
    /// let s: boxfall::FunctionSchema = "aten::relu(Tensor self) -> Tensor".parse()?;
    /// assert_eq!(s.operator_name(), "aten::relu");
    /// # Ok::<(), boxfall::SchemaError>(())
    /// ```
    pub fn operator_name(&self) -> String {
        if self.overload_name.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.name, self.overload_name)
        }
    }

    /// Whether some argument is written to, counting writes to a list's elements.
    ///
    /// ```
    /// let s: boxfall::FunctionSchema = "aten::_foreach_abs_(Tensor(a!)[] self) -> ()".parse()?;
    /// assert!(s.is_mutable());
    /// let s: boxfall::FunctionSchema = "aten::abs(Tensor self) -> Tensor".parse()?;
    /// assert!(!s.is_mutable());
    /// # Ok::<(), boxfall::SchemaError>(())
    /// ```
    pub fn is_mutable(&self) -> bool {
        self.arguments.iter().any(Argument::is_write)
    }
}

/// One argument or return.
///
/// ```
/// let s: boxfall::FunctionSchema = "aten::abs_(Tensor(a!) self) -> Tensor(a!)".parse()?;
/// let a = &s.arguments[0];
/// assert_eq!(a.name, "self");
/// assert_eq!(a.ty, boxfall::schema::Type::Tensor);
/// assert!(a.is_write());
/// assert_eq!(s.returns[0].name, "");
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Argument {
    /// The name; `""` for an unnamed return.
    pub name: String,
    /// The type without alias annotations: `Tensor[]` for `Tensor(a!)[]`.
    pub ty: Type,
    /// The default value, if one is written.
    pub default: Option<DefaultValue>,
    /// Written after `*`: it can only be passed by keyword.
    pub kwarg_only: bool,
    /// The alias annotation. For an annotated list element (`Tensor(a!)[]`) this is an
    /// annotation with empty sets that contains the element's, and is a write if that is, as
    /// PyTorch reads it.
    pub alias: Option<AliasInfo>,
}

impl Argument {
    /// Whether the argument (or, for a list, one of its elements) is written to.
    ///
    /// ```
    /// let s: boxfall::FunctionSchema =
    ///     "aten::f(Tensor(a!)[] xs, Tensor(b) y, Tensor z) -> ()".parse()?;
    /// let w: Vec<bool> = s.arguments.iter().map(|a| a.is_write()).collect();
    /// assert_eq!(w, [true, false, false]);
    /// # Ok::<(), boxfall::SchemaError>(())
    /// ```
    pub fn is_write(&self) -> bool {
        self.alias.as_ref().is_some_and(AliasInfo::writes)
    }

    /// The type as written, without alias annotations.
    ///
    /// ```
    /// let s: boxfall::FunctionSchema = "aten::f(Tensor(a!)[] xs, int[2] k=1) -> ()".parse()?;
    /// assert_eq!(s.arguments[0].type_str(), "Tensor[]");
    /// assert_eq!(s.arguments[1].type_str(), "int[2]");
    /// # Ok::<(), boxfall::SchemaError>(())
    /// ```
    pub fn type_str(&self) -> String {
        self.ty.to_string()
    }
}

/// A default value: the text as written and the value it denotes.
///
/// ```
/// use boxfall::schema::Literal;
/// let s: boxfall::FunctionSchema = "aten::f(float eps=1e-05, int[2] k=1) -> ()".parse()?;
/// let eps = s.arguments[0].default.as_ref().unwrap();
/// assert_eq!(eps.text, "1e-05");
/// assert_eq!(eps.value, Literal::Float(1e-05));
/// // An int default of a sized int list stands for the whole list, as in c10.
/// let k = s.arguments[1].default.as_ref().unwrap();
/// assert_eq!(k.value, Literal::List(vec![Literal::Int(1), Literal::Int(1)]));
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
#[derive(Clone, Debug)]
pub struct DefaultValue {
    /// Exactly as written: `1e-05`, `[0,1]`, `"mean"`, `Mean`. The schema printer writes the
    /// value instead, as PyTorch prints it (`1.0000000000000001e-05`, `[0, 1]`, `"mean"`, `1`).
    pub text: String,
    /// The value, converted to the argument's type: `float x=1` holds `Float(1.0)`, and
    /// `int[2] k=1` holds `List([Int(1), Int(1)])`.
    pub value: Literal,
}

/// Two defaults are equal when their values are: how a default was written (`1e-05` or
/// `0.00001`, `'a'` or `"a"`) is presentation, as in c10, which keeps only the value.
impl PartialEq for DefaultValue {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

/// A default's value.
///
/// Equality compares floats by their bits, so that a schema with a `nan` default still equals
/// its own re-parse (printing and re-parsing must give an equal schema).
///
/// ```
/// use boxfall::schema::Literal;
/// assert_eq!(Literal::Float(f64::NAN), Literal::Float(f64::NAN));
/// assert_ne!(Literal::Int(1), Literal::Float(1.0));
/// ```
#[derive(Clone, Debug)]
pub enum Literal {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An integer, e.g. `-1`.
    Int(i64),
    /// A floating-point number, e.g. `1.`, `1e-05`, `-inf`.
    Float(f64),
    /// A string, with its escapes resolved.
    Str(String),
    /// A list, e.g. `[0, 1]`.
    List(Vec<Literal>),
}

impl PartialEq for Literal {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Literal::None, Literal::None) => true,
            (Literal::Bool(a), Literal::Bool(b)) => a == b,
            (Literal::Int(a), Literal::Int(b)) => a == b,
            (Literal::Float(a), Literal::Float(b)) => a.to_bits() == b.to_bits(),
            (Literal::Str(a), Literal::Str(b)) => a == b,
            (Literal::List(a), Literal::List(b)) => a == b,
            _ => false,
        }
    }
}

/// An alias annotation such as `(a)`, `(a!)`, `(a|b)`, `(a -> *)` or `(*)`.
///
/// Sets are kept in written order, so `(b|a)` prints back as `(b|a)`.
///
/// ```
/// let s: boxfall::FunctionSchema = "aten::chunk(Tensor(a -> *) self) -> Tensor(a)[]".parse()?;
/// let a = s.arguments[0].alias.as_ref().unwrap();
/// assert_eq!(a.before, ["a"]);
/// assert_eq!(a.after, ["*"]);
/// assert!(!a.is_write);
/// // The return's annotation is on the list's elements.
/// let r = s.returns[0].alias.as_ref().unwrap();
/// assert!(r.before.is_empty());
/// assert_eq!(r.contained[0].before, ["a"]);
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AliasInfo {
    /// The alias sets before the call, e.g. `["a"]`, or `["*"]` for the wildcard.
    pub before: Vec<String>,
    /// The alias sets after the call; equal to `before` unless `->` is written.
    pub after: Vec<String>,
    /// Marked `!`: the value is written to.
    pub is_write: bool,
    /// For a list, the annotation of its elements (at most one entry).
    pub contained: Vec<AliasInfo>,
}

impl AliasInfo {
    /// Whether this annotation or one it contains is a write.
    pub(crate) fn writes(&self) -> bool {
        self.is_write || self.contained.iter().any(AliasInfo::writes)
    }

    /// The first named set, looking into a list's element annotation when the list itself has
    /// none.
    pub(crate) fn first_set(&self) -> Option<&str> {
        match self.before.first() {
            Some(set) => Some(set),
            None => self.contained.first().and_then(AliasInfo::first_set),
        }
    }

    /// Whether the two annotations name a common set other than the wildcard.
    pub(crate) fn shares_set_with(&self, other: &AliasInfo) -> bool {
        let mut shared = false;
        self.for_each_set(&mut |mine| {
            other.for_each_set(&mut |theirs| shared |= mine == theirs);
        });
        shared
    }

    fn for_each_set<'s>(&'s self, f: &mut dyn FnMut(&'s str)) {
        for set in &self.before {
            if set != "*" {
                f(set);
            }
        }
        for inner in &self.contained {
            inner.for_each_set(f);
        }
    }
}

/// A type, as written but without alias annotations.
///
/// ```
/// use boxfall::schema::Type;
/// let s: boxfall::FunctionSchema =
///     "aten::f(Tensor?[] a, int[2] b, Dict(str, t) c, (int, t)[] d) -> ()".parse()?;
/// assert_eq!(s.arguments[0].ty, Type::List { elem: Box::new(Type::Optional(Box::new(Type::Tensor))), size: None });
/// assert_eq!(s.arguments[1].ty, Type::List { elem: Box::new(Type::Int), size: Some(2) });
/// assert_eq!(s.arguments[2].ty.to_string(), "Dict(str, t)");
/// assert_eq!(s.arguments[3].ty.to_string(), "(int, t)[]");
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// `Tensor`.
    Tensor,
    /// `int`.
    Int,
    /// `float`.
    Float,
    /// `bool`.
    Bool,
    /// `str`.
    Str,
    /// `complex`.
    Complex,
    /// `Scalar`: an int, float, bool or complex number.
    Scalar,
    /// `SymInt`.
    SymInt,
    /// `SymFloat`.
    SymFloat,
    /// `SymBool`.
    SymBool,
    /// `ScalarType` (a dtype).
    ScalarType,
    /// `Layout`.
    Layout,
    /// `Device`.
    Device,
    /// `MemoryFormat`.
    MemoryFormat,
    /// `Generator`.
    Generator,
    /// `Storage`.
    Storage,
    /// `Stream`.
    Stream,
    /// `Dimname`.
    Dimname,
    /// `QScheme`.
    QScheme,
    /// `Any`.
    Any,
    /// `AnyClassType`.
    AnyClassType,
    /// `AnyEnumType`.
    AnyEnumType,
    /// `NoneType`.
    NoneType,
    /// A type variable: a lowercase name that is no known type, e.g. `t` or `tVal`.
    Var(String),
    /// A class by its qualified name, e.g. `__torch__.torch.classes.quantized.Conv2dPackedParamsBase`.
    Class(String),
    /// `T?`.
    Optional(Box<Type>),
    /// `T[]`, or `T[N]` with a fixed size.
    List {
        /// The element type.
        elem: Box<Type>,
        /// `N` of `T[N]`.
        size: Option<usize>,
    },
    /// `(T1, T2, ...)`.
    Tuple(Vec<Type>),
    /// `Dict(K, V)`.
    Dict(Box<Type>, Box<Type>),
    /// `Future(T)`.
    Future(Box<Type>),
    /// `Await(T)`.
    Await(Box<Type>),
    /// `RRef(T)`.
    RRef(Box<Type>),
}

impl Type {
    /// `Tensor`.
    ///
    /// ```
    /// use boxfall::schema::Type;
    /// assert!(Type::Tensor.is_tensor());
    /// assert!(!Type::Optional(Box::new(Type::Tensor)).is_tensor());
    /// ```
    pub fn is_tensor(&self) -> bool {
        matches!(self, Type::Tensor)
    }

    /// `Tensor?`.
    ///
    /// ```
    /// use boxfall::schema::Type;
    /// assert!(Type::Optional(Box::new(Type::Tensor)).is_optional_tensor());
    /// assert!(!Type::Tensor.is_optional_tensor());
    /// ```
    pub fn is_optional_tensor(&self) -> bool {
        matches!(self, Type::Optional(inner) if inner.is_tensor())
    }

    /// `Tensor[]` or `Tensor[N]`.
    ///
    /// ```
    /// use boxfall::schema::Type;
    /// let fixed = Type::List { elem: Box::new(Type::Tensor), size: Some(2) };
    /// assert!(fixed.is_tensor_list());
    /// assert_eq!(fixed.to_string(), "Tensor[2]");
    /// ```
    pub fn is_tensor_list(&self) -> bool {
        matches!(self, Type::List { elem, .. } if elem.is_tensor())
    }

    /// `Tensor?[]`: a list whose elements may be `None`.
    ///
    /// ```
    /// use boxfall::schema::Type;
    /// let t = Type::List { elem: Box::new(Type::Optional(Box::new(Type::Tensor))), size: None };
    /// assert!(t.is_optional_tensor_list());
    /// assert!(!t.is_tensor_list());
    /// ```
    pub fn is_optional_tensor_list(&self) -> bool {
        matches!(self, Type::List { elem, .. } if elem.is_optional_tensor())
    }

    /// The index in [`LEAVES`] of the type a parameterless name denotes, if it is a known one.
    /// The parser keeps such types as this index: they need no heap and no per-argument value.
    #[inline]
    pub(crate) fn leaf_index(name: &[u8]) -> Option<u8> {
        // By length and first byte first: then one comparison with a name of known length,
        // which compiles to a load or two, instead of one per candidate.
        Some(match (name.len(), *name.first()?) {
            (6, b'T') if name == b"Tensor" => 0,
            (3, b'i') if name == b"int" => 1,
            // native_functions.yaml's name for a device index; PyTorch reads it as an int.
            (11, b'D') if name == b"DeviceIndex" => 1,
            (5, b'f') if name == b"float" => 2,
            (4, b'b') if name == b"bool" => 3,
            (3, b's') if name == b"str" => 4,
            (7, b'c') if name == b"complex" => 5,
            (6, b'S') if name == b"Scalar" => 6,
            (6, b'S') if name == b"SymInt" => 7,
            (8, b'S') if name == b"SymFloat" => 8,
            (7, b'S') if name == b"SymBool" => 9,
            (10, b'S') if name == b"ScalarType" => 10,
            (6, b'L') if name == b"Layout" => 11,
            (6, b'D') if name == b"Device" => 12,
            (12, b'M') if name == b"MemoryFormat" => 13,
            (9, b'G') if name == b"Generator" => 14,
            (7, b'S') if name == b"Storage" => 15,
            (6, b'S') if name == b"Stream" => 16,
            (7, b'D') if name == b"Dimname" => 17,
            (7, b'Q') if name == b"QScheme" => 18,
            (3, b'A') if name == b"Any" => 19,
            (12, b'A') if name == b"AnyClassType" => 20,
            (11, b'A') if name == b"AnyEnumType" => 21,
            (8, b'N') if name == b"NoneType" => 22,
            _ => return None,
        })
    }

    /// The parameterless type at [`leaf_index`](Self::leaf_index) `i`.
    #[inline]
    pub(crate) fn leaf(i: u8) -> &'static Type {
        LEAVES.get(usize::from(i)).unwrap_or(&Type::Any)
    }

    /// [`leaf`](Self::leaf) as an owned value, built directly: cheaper than cloning through
    /// the reference, which goes through `Clone` for every variant.
    #[inline]
    pub(crate) fn leaf_owned(i: u8) -> Type {
        match i {
            0 => Type::Tensor,
            1 => Type::Int,
            2 => Type::Float,
            3 => Type::Bool,
            4 => Type::Str,
            5 => Type::Complex,
            6 => Type::Scalar,
            7 => Type::SymInt,
            8 => Type::SymFloat,
            9 => Type::SymBool,
            10 => Type::ScalarType,
            11 => Type::Layout,
            12 => Type::Device,
            13 => Type::MemoryFormat,
            14 => Type::Generator,
            15 => Type::Storage,
            16 => Type::Stream,
            17 => Type::Dimname,
            18 => Type::QScheme,
            19 => Type::Any,
            20 => Type::AnyClassType,
            21 => Type::AnyEnumType,
            22 => Type::NoneType,
            _ => Type::Any,
        }
    }

    /// The written name of a type that takes no parameters.
    pub(crate) fn simple_name(&self) -> Option<&str> {
        Some(match self {
            Type::Tensor => "Tensor",
            Type::Int => "int",
            Type::Float => "float",
            Type::Bool => "bool",
            Type::Str => "str",
            Type::Complex => "complex",
            Type::Scalar => "Scalar",
            Type::SymInt => "SymInt",
            Type::SymFloat => "SymFloat",
            Type::SymBool => "SymBool",
            Type::ScalarType => "ScalarType",
            Type::Layout => "Layout",
            Type::Device => "Device",
            Type::MemoryFormat => "MemoryFormat",
            Type::Generator => "Generator",
            Type::Storage => "Storage",
            Type::Stream => "Stream",
            Type::Dimname => "Dimname",
            Type::QScheme => "QScheme",
            Type::Any => "Any",
            Type::AnyClassType => "AnyClassType",
            Type::AnyEnumType => "AnyEnumType",
            Type::NoneType => "NoneType",
            Type::Var(name) | Type::Class(name) => name,
            _ => return None,
        })
    }
}

/// The types that take no parameters, in [`Type::leaf_index`] order.
static LEAVES: [Type; 23] = [
    Type::Tensor,
    Type::Int,
    Type::Float,
    Type::Bool,
    Type::Str,
    Type::Complex,
    Type::Scalar,
    Type::SymInt,
    Type::SymFloat,
    Type::SymBool,
    Type::ScalarType,
    Type::Layout,
    Type::Device,
    Type::MemoryFormat,
    Type::Generator,
    Type::Storage,
    Type::Stream,
    Type::Dimname,
    Type::QScheme,
    Type::Any,
    Type::AnyClassType,
    Type::AnyEnumType,
    Type::NoneType,
];

#[cfg(test)]
mod tests {
    use super::Type;

    #[test]
    fn leaf_owned_is_the_leaf() {
        for i in 0..=u8::MAX {
            assert_eq!(&Type::leaf_owned(i), Type::leaf(i), "leaf {i}");
        }
    }

    #[test]
    fn names_and_types_agree() {
        for name in [
            "Tensor",
            "int",
            "float",
            "bool",
            "str",
            "complex",
            "Scalar",
            "SymInt",
            "SymFloat",
            "SymBool",
            "ScalarType",
            "Layout",
            "Device",
            "MemoryFormat",
            "Generator",
            "Storage",
            "Stream",
            "Dimname",
            "QScheme",
            "Any",
            "AnyClassType",
            "AnyEnumType",
            "NoneType",
        ] {
            let i =
                Type::leaf_index(name.as_bytes()).unwrap_or_else(|| panic!("{name} is no leaf"));
            assert_eq!(Type::leaf(i).simple_name(), Some(name));
        }
    }

    #[test]
    fn device_index_is_an_int_and_near_misses_are_no_leaf() {
        assert_eq!(
            Type::leaf_index(b"DeviceIndex").map(Type::leaf),
            Some(&Type::Int)
        );
        for name in [
            "",
            "T",
            "tensor",
            "Tensorx",
            "Tensot",
            "Dimnam",
            "SymFloa",
            "SymFloatx",
            "Scalars",
            "Stor",
            "AnyType",
            "Dict",
            "Future",
            "t",
            "tVal",
            "ScalarTypo",
            "int8",
        ] {
            assert_eq!(Type::leaf_index(name.as_bytes()), None, "{name}");
        }
    }
}
