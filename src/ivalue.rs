//! `IValue`, the type-erased value a boxed kernel reads off a `Stack`, and the conversions
//! between Rust types and `IValue`s that the boxing adapters use.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::key::DispatchKeySet;
use crate::tensor::{DType, Device, Tensor};

/// One boxed value.
///
/// ```
/// use boxfall::IValue;
/// let v = IValue::from(3_i64);
/// assert_eq!(v.to_int(), Some(3));
/// assert_eq!(v.type_name(), "int");
/// ```
#[derive(Clone)]
pub enum IValue {
    /// `None`
    None,
    /// `bool`
    Bool(bool),
    /// `int` / `SymInt`
    Int(i64),
    /// `float`
    Double(f64),
    /// `str`
    Str(Arc<str>),
    /// `Device`
    Device(Device),
    /// `ScalarType`
    ScalarType(DType),
    /// `Tensor`
    Tensor(Tensor),
    /// `Tensor[]`
    TensorList(Vec<Tensor>),
    /// `Tensor?[]`
    OptionalTensorList(Vec<Option<Tensor>>),
    /// `int[]`
    IntList(Vec<i64>),
    /// `float[]`
    DoubleList(Vec<f64>),
    /// `bool[]`
    BoolList(Vec<bool>),
    /// any other list
    List(Vec<IValue>),
    /// a tuple
    Tuple(Vec<IValue>),
    /// a value the core does not look into (a Python object for an `Any` argument)
    Object(Arc<dyn Any + Send + Sync>),
}

/// The boxed calling convention: a kernel finds exactly its arguments on the stack (defaults
/// filled) and leaves exactly its returns there.
///
/// ```
/// let stack: boxfall::Stack = vec![boxfall::IValue::Int(1)];
/// assert_eq!(stack.len(), 1);
/// ```
pub type Stack = Vec<IValue>;

impl IValue {
    /// The name of the value's kind, for error messages.
    ///
    /// ```
    /// use boxfall::IValue;
    /// assert_eq!(IValue::Double(1.0).type_name(), "float");
    /// assert_eq!(IValue::IntList(vec![1, 2]).type_name(), "int[]");
    /// ```
    pub fn type_name(&self) -> &'static str {
        match self {
            IValue::None => "None",
            IValue::Bool(_) => "bool",
            IValue::Int(_) => "int",
            IValue::Double(_) => "float",
            IValue::Str(_) => "str",
            IValue::Device(_) => "Device",
            IValue::ScalarType(_) => "ScalarType",
            IValue::Tensor(_) => "Tensor",
            IValue::TensorList(_) => "Tensor[]",
            IValue::OptionalTensorList(_) => "Tensor?[]",
            IValue::IntList(_) => "int[]",
            IValue::DoubleList(_) => "float[]",
            IValue::BoolList(_) => "bool[]",
            IValue::List(_) => "list",
            IValue::Tuple(_) => "tuple",
            IValue::Object(_) => "object",
        }
    }

    /// The keys of the tensors this value holds (a tensor, or tensors in a list).
    ///
    /// ```
    /// use boxfall::{IValue, Tensor, DispatchKey};
    /// let t = Tensor::from_array(ndarray::ArrayD::<f64>::zeros(vec![1]));
    /// assert_eq!(IValue::TensorList(vec![t]).key_set(), DispatchKey::CPU.set());
    /// ```
    #[inline]
    pub fn key_set(&self) -> DispatchKeySet {
        match self {
            IValue::Tensor(t) => t.key().set(),
            IValue::TensorList(ts) => ts.iter().fold(DispatchKeySet::EMPTY, |s, t| s | t.key()),
            IValue::OptionalTensorList(ts) => ts
                .iter()
                .flatten()
                .fold(DispatchKeySet::EMPTY, |s, t| s | t.key()),
            _ => DispatchKeySet::EMPTY,
        }
    }

    /// The int, if this is one.
    ///
    /// ```
    /// use boxfall::IValue;
    /// assert_eq!(IValue::Int(7).to_int(), Some(7));
    /// assert_eq!(IValue::Double(7.0).to_int(), None); // no float-to-int conversion
    /// ```
    pub fn to_int(&self) -> Option<i64> {
        match self {
            IValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The number as a float, if this is an int or a float.
    ///
    /// ```
    /// assert_eq!(boxfall::IValue::Int(2).to_double(), Some(2.0));
    /// ```
    pub fn to_double(&self) -> Option<f64> {
        match self {
            IValue::Double(d) => Some(*d),
            IValue::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// The tensor, if this is one.
    ///
    /// ```
    /// use boxfall::{IValue, Tensor};
    /// let t = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
    /// assert!(IValue::from(t.clone()).as_tensor().unwrap().same(&t));
    /// assert!(IValue::None.as_tensor().is_none());
    /// ```
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            IValue::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

impl fmt::Debug for IValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IValue::None => f.write_str("None"),
            IValue::Bool(b) => write!(f, "{b}"),
            IValue::Int(i) => write!(f, "{i}"),
            IValue::Double(d) => write!(f, "{d}"),
            IValue::Str(s) => write!(f, "{s:?}"),
            IValue::Device(d) => write!(f, "{d}"),
            IValue::ScalarType(d) => write!(f, "{}", d.name()),
            IValue::Tensor(t) => write!(f, "{t:?}"),
            IValue::TensorList(ts) => f.debug_list().entries(ts).finish(),
            IValue::OptionalTensorList(ts) => f.debug_list().entries(ts).finish(),
            IValue::IntList(v) => write!(f, "{v:?}"),
            IValue::DoubleList(v) => write!(f, "{v:?}"),
            IValue::BoolList(v) => write!(f, "{v:?}"),
            IValue::List(v) => f.debug_list().entries(v).finish(),
            IValue::Tuple(v) => {
                let mut t = f.debug_tuple("");
                for x in v {
                    t.field(x);
                }
                t.finish()
            }
            IValue::Object(_) => f.write_str("<object>"),
        }
    }
}

/// What `map_tensors` does to each tensor of a typed call's values (the typed CPU fallback
/// moves them to the CPU and back with it); every `FnMut(Tensor) -> Result<Tensor>` is one.
///
/// ```
/// use boxfall::{ivalue::CallArgs, Tensor};
/// let t = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// let mut seen = 0;
/// let (_, k) = (t, 3_i64).map_tensors(&mut |t: Tensor| { seen += 1; Ok(t) }).unwrap();
/// assert_eq!((seen, k), (1, 3)); // the tensor was mapped, the int passed as it is
/// ```
pub trait TensorMap {
    /// The tensor that takes `t`'s place.
    fn map(&mut self, t: Tensor) -> Result<Tensor>;
}

impl<F: FnMut(Tensor) -> Result<Tensor>> TensorMap for F {
    #[inline]
    fn map(&mut self, t: Tensor) -> Result<Tensor> {
        self(t)
    }
}

/// A Rust type that a typed call can pass as one argument or get back as one return.
///
/// ```
/// use boxfall::{ivalue::ArgValue, IValue};
/// assert_eq!(f64::from_ivalue(IValue::Double(1.5)).unwrap(), 1.5);
/// assert!(bool::from_ivalue(IValue::Int(1)).is_err());
/// ```
pub trait ArgValue: Sized {
    /// The keys this argument contributes to dispatch.
    #[inline]
    fn key_set(&self) -> DispatchKeySet {
        DispatchKeySet::EMPTY
    }
    /// The key of a `Device` argument, which decides a call without tensors.
    #[inline]
    fn device_key_set(&self) -> DispatchKeySet {
        DispatchKeySet::EMPTY
    }
    /// Boxes the value.
    fn into_ivalue(self) -> IValue;
    /// Unboxes the value.
    fn from_ivalue(v: IValue) -> Result<Self>;
    /// `from_ivalue` of a value in a stack slot that the caller has given up (an unboxing
    /// adapter taking its arguments off the stack), reading only what the value needs.
    ///
    /// # Safety
    /// `p` points to an initialized value that the caller owns and neither uses nor drops
    /// again.
    #[doc(hidden)]
    #[inline(always)]
    unsafe fn read_from(p: *const IValue) -> Result<Self> {
        // SAFETY: the caller gives up the value at `p`, which is read once.
        Self::from_ivalue(unsafe { std::ptr::read(p) })
    }
    /// Whether the CPU fallback of a typed call can take this value without boxing it: a value
    /// without tensors as it is, a tensor (or tensors) through `map_tensors`. `false` (the
    /// default) sends a typed call with such a value down the boxed fallback.
    const TYPED_FALLBACK: bool = false;
    /// The value with each of its tensors replaced by `f`'s result (a value without tensors
    /// as it is); the typed CPU fallback moves the tensors to the CPU and back with it.
    #[inline]
    fn map_tensors(self, f: &mut impl TensorMap) -> Result<Self> {
        let _ = f;
        Ok(self)
    }
    /// Gives each of the value's tensors, in order, to `f`, which may replace it in place (a
    /// value without tensors gives none); stops at `f`'s first error. A typed wrapper's
    /// arguments reach it so (`kernel::TensorMaps::args`).
    #[inline]
    fn for_each_tensor_mut<'a>(
        &'a mut self,
        f: &mut impl FnMut(&'a mut Tensor) -> Result<()>,
    ) -> Result<()> {
        let _ = f;
        Ok(())
    }
}

#[cold]
#[inline(never)]
fn mismatch<T>(expected: &str, got: IValue) -> Result<T> {
    Err(Error::Kernel {
        context: "unboxing".into(),
        message: format!("expected {expected}, got {}", got.type_name()),
    })
}

macro_rules! arg_value {
    ($t:ty, $name:literal, $var:ident) => {
        impl ArgValue for $t {
            const TYPED_FALLBACK: bool = true;
            #[inline]
            fn into_ivalue(self) -> IValue {
                IValue::$var(self.into())
            }
            #[inline]
            fn from_ivalue(v: IValue) -> Result<Self> {
                match v {
                    IValue::$var(x) => Ok(x.into()),
                    other => mismatch($name, other),
                }
            }
        }
        impl From<$t> for IValue {
            #[inline]
            fn from(x: $t) -> IValue {
                x.into_ivalue()
            }
        }
    };
}
arg_value!(bool, "bool", Bool);
arg_value!(i64, "int", Int);
arg_value!(DType, "ScalarType", ScalarType);
arg_value!(Vec<i64>, "int[]", IntList);
arg_value!(Vec<f64>, "float[]", DoubleList);
arg_value!(Vec<bool>, "bool[]", BoolList);

impl ArgValue for Device {
    #[inline]
    fn device_key_set(&self) -> DispatchKeySet {
        self.key.set()
    }
    fn into_ivalue(self) -> IValue {
        IValue::Device(self)
    }
    fn from_ivalue(v: IValue) -> Result<Self> {
        match v {
            IValue::Device(d) => Ok(d),
            other => mismatch("Device", other),
        }
    }
}

impl From<Device> for IValue {
    fn from(d: Device) -> IValue {
        IValue::Device(d)
    }
}

impl ArgValue for f64 {
    const TYPED_FALLBACK: bool = true;
    #[inline]
    fn into_ivalue(self) -> IValue {
        IValue::Double(self)
    }
    fn from_ivalue(v: IValue) -> Result<Self> {
        match v {
            IValue::Double(x) => Ok(x),
            IValue::Int(i) => Ok(i as f64),
            other => mismatch("float", other),
        }
    }
}

impl From<f64> for IValue {
    fn from(x: f64) -> IValue {
        IValue::Double(x)
    }
}

impl ArgValue for String {
    const TYPED_FALLBACK: bool = true;
    fn into_ivalue(self) -> IValue {
        IValue::Str(self.into())
    }
    fn from_ivalue(v: IValue) -> Result<Self> {
        match v {
            IValue::Str(s) => Ok(s.to_string()),
            other => mismatch("str", other),
        }
    }
}

impl ArgValue for Tensor {
    const TYPED_FALLBACK: bool = true;
    #[inline(always)]
    fn map_tensors(self, f: &mut impl TensorMap) -> Result<Self> {
        f.map(self)
    }
    #[inline(always)]
    fn for_each_tensor_mut<'a>(
        &'a mut self,
        f: &mut impl FnMut(&'a mut Tensor) -> Result<()>,
    ) -> Result<()> {
        f(self)
    }
    #[inline]
    fn key_set(&self) -> DispatchKeySet {
        self.key().set()
    }
    #[inline]
    fn into_ivalue(self) -> IValue {
        IValue::Tensor(self)
    }
    #[inline]
    fn from_ivalue(v: IValue) -> Result<Self> {
        match v {
            IValue::Tensor(t) => Ok(t),
            other => mismatch("Tensor", other),
        }
    }
    /// Reads the tag and the tensor's pointer only. The whole 32-byte value, moved, is read
    /// with wide loads; when the slot was just written by narrower stores (the CPU fallback
    /// puts each CPU tensor in its device tensor's place), those loads cannot be forwarded
    /// from the stores and stall until they reach the cache.
    #[inline(always)]
    unsafe fn read_from(p: *const IValue) -> Result<Self> {
        // SAFETY: the caller gives up the initialized value at `p`. An `IValue::Tensor` owns
        // nothing but its tensor, which is read out once here; any other value is read whole,
        // once, and dropped by `from_ivalue`.
        match unsafe { &*p } {
            IValue::Tensor(t) => Ok(unsafe { std::ptr::read(t) }),
            _ => Self::from_ivalue(unsafe { std::ptr::read(p) }),
        }
    }
}

impl From<Tensor> for IValue {
    fn from(t: Tensor) -> IValue {
        IValue::Tensor(t)
    }
}

impl ArgValue for Option<Tensor> {
    const TYPED_FALLBACK: bool = true;
    #[inline]
    fn map_tensors(self, f: &mut impl TensorMap) -> Result<Self> {
        self.map(|t| f.map(t)).transpose()
    }
    #[inline]
    fn for_each_tensor_mut<'a>(
        &'a mut self,
        f: &mut impl FnMut(&'a mut Tensor) -> Result<()>,
    ) -> Result<()> {
        self.as_mut().map_or(Ok(()), f)
    }
    #[inline]
    fn key_set(&self) -> DispatchKeySet {
        self.as_ref()
            .map_or(DispatchKeySet::EMPTY, |t| t.key().set())
    }
    fn into_ivalue(self) -> IValue {
        self.map_or(IValue::None, IValue::Tensor)
    }
    fn from_ivalue(v: IValue) -> Result<Self> {
        match v {
            IValue::None => Ok(None),
            IValue::Tensor(t) => Ok(Some(t)),
            other => mismatch("Tensor?", other),
        }
    }
}

impl ArgValue for Vec<Tensor> {
    const TYPED_FALLBACK: bool = true;
    fn map_tensors(self, f: &mut impl TensorMap) -> Result<Self> {
        // Collected in place: the list's buffer is reused.
        self.into_iter().map(|t| f.map(t)).collect()
    }
    fn for_each_tensor_mut<'a>(
        &'a mut self,
        f: &mut impl FnMut(&'a mut Tensor) -> Result<()>,
    ) -> Result<()> {
        self.iter_mut().try_for_each(f)
    }
    fn key_set(&self) -> DispatchKeySet {
        self.iter().fold(DispatchKeySet::EMPTY, |s, t| s | t.key())
    }
    fn into_ivalue(self) -> IValue {
        IValue::TensorList(self)
    }
    fn from_ivalue(v: IValue) -> Result<Self> {
        match v {
            IValue::TensorList(t) => Ok(t),
            other => mismatch("Tensor[]", other),
        }
    }
}

impl ArgValue for IValue {
    fn key_set(&self) -> DispatchKeySet {
        IValue::key_set(self)
    }
    fn device_key_set(&self) -> DispatchKeySet {
        match self {
            IValue::Device(d) => d.key.set(),
            _ => DispatchKeySet::EMPTY,
        }
    }
    fn into_ivalue(self) -> IValue {
        self
    }
    fn from_ivalue(v: IValue) -> Result<Self> {
        Ok(v)
    }
}

/// The arguments of a typed call: a tuple of `ArgValue`s.
///
/// ```
/// use boxfall::ivalue::CallArgs;
/// let mut stack = vec![];
/// (1_i64, 2.0_f64).push_onto(&mut stack);
/// assert_eq!(stack.len(), 2);
/// let back = <(i64, f64)>::pop_from(&mut stack).unwrap();
/// assert_eq!(back, (1, 2.0));
/// ```
pub trait CallArgs: Sized {
    /// How many values.
    const LEN: usize;
    /// The union of the arguments' tensor keys.
    fn key_set(&self) -> DispatchKeySet;
    /// The union of the `Device` arguments' keys.
    fn device_keys(&self) -> DispatchKeySet;
    /// The keys a call dispatches on: its tensors', else its `Device` argument's, else CPU.
    #[inline]
    fn dispatch_keys(&self) -> DispatchKeySet {
        let k = self.key_set();
        if !k.is_empty() {
            return k;
        }
        let d = self.device_keys();
        if d.is_empty() {
            crate::key::DispatchKey::CPU.set()
        } else {
            d
        }
    }
    /// Pushes every value onto the stack, in order.
    fn push_onto(self, stack: &mut Stack);
    /// Takes exactly `LEN` values off the stack.
    fn pop_from(stack: &mut Stack) -> Result<Self>;
    /// Whether the CPU fallback can take these arguments without boxing them (every value's
    /// `ArgValue::TYPED_FALLBACK`).
    const TYPED_FALLBACK: bool = false;
    /// The arguments with each tensor replaced by `f`'s result, in order.
    #[inline]
    fn map_tensors(self, f: &mut impl TensorMap) -> Result<Self> {
        let _ = f;
        Ok(self)
    }
    /// Gives each tensor of the arguments, in order, to `f` (`ArgValue::for_each_tensor_mut`).
    #[inline]
    fn for_each_tensor_mut<'a>(
        &'a mut self,
        f: &mut impl FnMut(&'a mut Tensor) -> Result<()>,
    ) -> Result<()> {
        let _ = f;
        Ok(())
    }
}

/// The returns of a typed call: `()`, one `ArgValue`, or a tuple of them.
///
/// ```
/// use boxfall::ivalue::CallReturns;
/// let mut stack = vec![boxfall::IValue::Int(4)];
/// assert_eq!(<i64 as CallReturns>::pop_from(&mut stack).unwrap(), 4);
/// ```
pub trait CallReturns: Sized {
    /// Pushes the returns onto the stack.
    fn push_onto(self, stack: &mut Stack);
    /// Takes the returns off the stack.
    fn pop_from(stack: &mut Stack) -> Result<Self>;
    /// Whether the CPU fallback can give these returns back without boxing them.
    const TYPED_FALLBACK: bool = false;
    /// The returns with each tensor replaced by `f`'s result.
    #[inline]
    fn map_tensors(self, f: &mut impl TensorMap) -> Result<Self> {
        let _ = f;
        Ok(self)
    }
}

/// Pushes the value `build` makes, built straight in the stack's memory: a value built on the
/// machine stack and then pushed is copied with wide loads that stall on its narrow stores,
/// a few ns a call here.
#[inline(always)]
fn push_in_place(stack: &mut Stack, build: impl FnOnce() -> IValue) {
    stack.reserve(1);
    let len = stack.len();
    if let Some(slot) = stack.spare_capacity_mut().first_mut() {
        slot.write(build());
        // SAFETY: the slot at `len` was initialized just above (`reserve` made room for it).
        unsafe { stack.set_len(len + 1) }
    }
}

fn wrong_count(expected: usize, got: usize) -> Error {
    Error::Kernel {
        context: "unboxing".into(),
        message: format!("expected {expected} values on the stack, found {got}"),
    }
}

impl CallReturns for () {
    const TYPED_FALLBACK: bool = true;
    fn push_onto(self, _stack: &mut Stack) {}
    fn pop_from(stack: &mut Stack) -> Result<Self> {
        stack.clear();
        Ok(())
    }
}

impl<T: ArgValue> CallReturns for T {
    const TYPED_FALLBACK: bool = T::TYPED_FALLBACK;
    #[inline(always)]
    fn map_tensors(self, f: &mut impl TensorMap) -> Result<Self> {
        ArgValue::map_tensors(self, f)
    }
    #[inline]
    fn push_onto(self, stack: &mut Stack) {
        push_in_place(stack, || self.into_ivalue());
    }
    // Always inlined: a typed call of a boxed kernel pops its return here, and out of line
    // it is a frame of its own on every such call.
    #[inline(always)]
    fn pop_from(stack: &mut Stack) -> Result<Self> {
        if stack.len() != 1 {
            return Err(wrong_count(1, stack.len()));
        }
        let v = stack.pop().ok_or_else(|| wrong_count(1, 0))?;
        T::from_ivalue(v)
    }
}

macro_rules! tuple_impls {
    ($len:literal; $($name:ident),+) => {
        impl<$($name: ArgValue),+> CallArgs for ($($name,)+) {
            const LEN: usize = $len;
            const TYPED_FALLBACK: bool = $($name::TYPED_FALLBACK)&&+;
            #[inline(always)]
            #[allow(non_snake_case)]
            fn map_tensors(self, f: &mut impl TensorMap) -> Result<Self> {
                let ($($name,)+) = self;
                Ok(($($name.map_tensors(f)?,)+))
            }
            #[inline(always)]
            #[allow(non_snake_case)]
            fn for_each_tensor_mut<'a>(
                &'a mut self,
                f: &mut impl FnMut(&'a mut Tensor) -> Result<()>,
            ) -> Result<()> {
                let ($($name,)+) = self;
                $($name.for_each_tensor_mut(f)?;)+
                Ok(())
            }
            #[inline]
            #[allow(non_snake_case)]
            fn key_set(&self) -> DispatchKeySet {
                let ($($name,)+) = self;
                DispatchKeySet::EMPTY $(| $name.key_set())+
            }
            #[inline]
            #[allow(non_snake_case)]
            fn device_keys(&self) -> DispatchKeySet {
                let ($($name,)+) = self;
                DispatchKeySet::EMPTY $(| $name.device_key_set())+
            }
            #[allow(non_snake_case)]
            #[inline(always)]
            fn push_onto(self, stack: &mut Stack) {
                let ($($name,)+) = self;
                stack.reserve($len);
                $(push_in_place(stack, || $name.into_ivalue());)+
            }
            #[inline]
            #[allow(non_snake_case)]
            fn pop_from(stack: &mut Stack) -> Result<Self> {
                if stack.len() < $len {
                    return Err(wrong_count($len, stack.len()));
                }
                // Moved out by reads, in order: a `drain` (or swapping Nones in and cutting
                // them off) costs a guard and a drop loop, a few ns of a boxed hop.
                let start = stack.len() - $len;
                // SAFETY: the `$len` values from `start` are initialized (`start + $len` is the
                // length). Shortening the Vec first hands their ownership to the reads below,
                // which take each exactly once; the Vec neither drops nor exposes them again.
                let mut p = unsafe {
                    stack.set_len(start);
                    stack.as_ptr().add(start)
                };
                $(
                    // SAFETY: `p` walks the `$len` values just given up by the Vec, in bounds;
                    // each is read (and so owned) by exactly one `read_from`.
                    let $name = unsafe { $name::read_from(p) };
                    p = p.wrapping_add(1);
                )+
                let _ = p;
                Ok(($($name?,)+))
            }
        }
    };
}
tuple_impls!(1; A);
tuple_impls!(2; A, B);
tuple_impls!(3; A, B, C);
tuple_impls!(4; A, B, C, D);
tuple_impls!(5; A, B, C, D, E);
tuple_impls!(6; A, B, C, D, E, F);

/// Several returns: `Multi((a, b))` pushes `a` then `b`.
///
/// ```
/// use boxfall::ivalue::{CallReturns, Multi};
/// let mut s = vec![];
/// Multi((1_i64, 2_i64)).push_onto(&mut s);
/// assert_eq!(<Multi<(i64, i64)>>::pop_from(&mut s).unwrap().0, (1, 2));
/// ```
pub struct Multi<T>(pub T);

impl<T: CallArgs> CallReturns for Multi<T> {
    const TYPED_FALLBACK: bool = T::TYPED_FALLBACK;
    #[inline]
    fn map_tensors(self, f: &mut impl TensorMap) -> Result<Self> {
        self.0.map_tensors(f).map(Multi)
    }
    fn push_onto(self, stack: &mut Stack) {
        self.0.push_onto(stack)
    }
    fn pop_from(stack: &mut Stack) -> Result<Self> {
        if stack.len() != T::LEN {
            return Err(wrong_count(T::LEN, stack.len()));
        }
        T::pop_from(stack).map(Multi)
    }
}

mod tensors;
#[cfg(test)]
mod tests;

pub use tensors::Tensors;
