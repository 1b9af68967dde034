//! The facts about a schema that the dispatcher and the CPU fallback need on every call,
//! computed once when an operator is defined so that a call never walks types or alias sets.

use super::types::{AliasInfo, Argument, FunctionSchema, Type};

/// What an argument holds, as far as dispatch and the fallback care.
///
/// An optional list (`Tensor[]?`, `Tensor?[]?`) has the kind of its list: its tensors take part
/// in dispatch and move with the fallback, and its value may also be `None`.
///
/// ```
/// use boxfall::schema::ArgKind;
/// let s: boxfall::FunctionSchema =
///     "aten::f(Tensor a, Tensor? b, Tensor[] c, Tensor?[] d, Device e, Device? f, int g) -> ()".parse()?;
/// let kinds: Vec<ArgKind> = s.info().args.iter().map(|a| a.kind).collect();
/// assert_eq!(kinds, [ArgKind::Tensor, ArgKind::OptionalTensor, ArgKind::TensorList,
///     ArgKind::OptionalTensorList, ArgKind::Device, ArgKind::OptionalDevice, ArgKind::Other]);
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// `Tensor`.
    Tensor,
    /// `Tensor?`.
    OptionalTensor,
    /// `Tensor[]`, `Tensor[N]`, or `Tensor[]?`.
    TensorList,
    /// `Tensor?[]`, or `Tensor?[]?`.
    OptionalTensorList,
    /// `Device`.
    Device,
    /// `Device?`.
    OptionalDevice,
    /// Anything else.
    Other,
}

impl ArgKind {
    /// The kind of a value of type `ty`.
    ///
    /// ```
    /// use boxfall::schema::{ArgKind, Type};
    /// assert_eq!(ArgKind::of(&Type::Tensor), ArgKind::Tensor);
    /// assert_eq!(ArgKind::of(&Type::Int), ArgKind::Other);
    /// ```
    pub fn of(ty: &Type) -> ArgKind {
        let list_kind = |ty: &Type| match ty {
            Type::List { elem, .. } if elem.is_tensor() => Some(ArgKind::TensorList),
            Type::List { elem, .. } if elem.is_optional_tensor() => {
                Some(ArgKind::OptionalTensorList)
            }
            _ => None,
        };
        match ty {
            Type::Tensor => ArgKind::Tensor,
            Type::Device => ArgKind::Device,
            Type::Optional(inner) => match &**inner {
                Type::Tensor => ArgKind::OptionalTensor,
                Type::Device => ArgKind::OptionalDevice,
                inner => list_kind(inner).unwrap_or(ArgKind::Other),
            },
            ty => list_kind(ty).unwrap_or(ArgKind::Other),
        }
    }

    /// One of the four kinds that hold tensors.
    ///
    /// ```
    /// use boxfall::schema::ArgKind;
    /// assert!(ArgKind::OptionalTensorList.holds_tensors());
    /// assert!(!ArgKind::Device.holds_tensors());
    /// ```
    pub fn holds_tensors(self) -> bool {
        matches!(
            self,
            ArgKind::Tensor
                | ArgKind::OptionalTensor
                | ArgKind::TensorList
                | ArgKind::OptionalTensorList
        )
    }
}

/// The facts about one argument.
///
/// ```
/// let s: boxfall::FunctionSchema = "aten::add_(Tensor(a!) self, Tensor other) -> Tensor(a!)".parse()?;
/// let info = s.info();
/// assert!(info.args[0].is_write);
/// assert_eq!(info.args[0].alias_set.as_deref(), Some("a"));
/// assert_eq!(info.args[1].alias_set, None);
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgFacts {
    /// What the argument holds.
    pub kind: ArgKind,
    /// It, or one of its list elements, is written to.
    pub is_write: bool,
    /// The first alias set it names, looking into a list's element annotation (`a` for
    /// `Tensor(a!)[]`).
    pub alias_set: Option<String>,
}

/// The facts about one return.
///
/// ```
/// let s: boxfall::FunctionSchema =
///     "aten::add.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)".parse()?;
/// let r = &s.info().returns[0];
/// assert!(r.is_write);
/// assert_eq!(r.aliases_arg, Some(2));
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReturnFacts {
    /// What the return holds.
    pub kind: ArgKind,
    /// Its annotation (or its elements') is a write.
    pub is_write: bool,
    /// The first argument with which it shares a named alias set (the wildcard `*` names none).
    pub aliases_arg: Option<usize>,
}

/// What the dispatcher and the CPU fallback need from a schema, computed once at definition.
///
/// ```
/// let s: boxfall::FunctionSchema =
///     "aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)".parse()?;
/// let info = s.info();
/// assert_eq!(info.tensor_args, [0]);
/// assert!(info.has_view_returns);
/// assert!(!info.is_mutable);
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaInfo {
    /// One entry per argument.
    pub args: Vec<ArgFacts>,
    /// One entry per return.
    pub returns: Vec<ReturnFacts>,
    /// The arguments that hold tensors (the four tensor kinds), in order.
    pub tensor_args: Vec<usize>,
    /// The first `Device` or `Device?` argument.
    pub device_arg: Option<usize>,
    /// Some argument is written to.
    pub is_mutable: bool,
    /// Some return aliases an argument without being a write: a view (`Tensor(a)`).
    pub has_view_returns: bool,
}

impl FunctionSchema {
    /// Computes the facts the dispatcher and the fallback need.
    ///
    /// ```
    /// let s: boxfall::FunctionSchema = "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor".parse()?;
    /// let info = s.info();
    /// assert!(info.tensor_args.is_empty());
    /// assert_eq!(info.device_arg, Some(3));
    /// # Ok::<(), boxfall::SchemaError>(())
    /// ```
    pub fn info(&self) -> SchemaInfo {
        let args: Vec<ArgFacts> = self
            .arguments
            .iter()
            .map(|arg| ArgFacts {
                kind: ArgKind::of(&arg.ty),
                is_write: arg.is_write(),
                alias_set: arg
                    .alias
                    .as_ref()
                    .and_then(AliasInfo::first_set)
                    .map(str::to_owned),
            })
            .collect();
        let returns: Vec<ReturnFacts> = self
            .returns
            .iter()
            .map(|ret| ReturnFacts {
                kind: ArgKind::of(&ret.ty),
                is_write: ret.is_write(),
                aliases_arg: aliased_argument(ret, &self.arguments),
            })
            .collect();
        let tensor_args = args
            .iter()
            .enumerate()
            .filter(|(_, a)| a.kind.holds_tensors())
            .map(|(i, _)| i)
            .collect();
        let device_arg = args
            .iter()
            .position(|a| matches!(a.kind, ArgKind::Device | ArgKind::OptionalDevice));
        let is_mutable = args.iter().any(|a| a.is_write);
        let has_view_returns = returns
            .iter()
            .any(|r| r.aliases_arg.is_some() && !r.is_write);
        SchemaInfo {
            args,
            returns,
            tensor_args,
            device_arg,
            is_mutable,
            has_view_returns,
        }
    }
}

fn aliased_argument(ret: &Argument, arguments: &[Argument]) -> Option<usize> {
    let ret_alias = ret.alias.as_ref()?;
    arguments.iter().position(|arg| {
        arg.alias
            .as_ref()
            .is_some_and(|a| a.shares_set_with(ret_alias))
    })
}

/// A defined operator's schema with the facts dispatch and the fallback need, computed once.
///
/// ```
/// let s = boxfall::dispatcher::OpSchema::new(boxfall::FunctionSchema::parse("d::f(Tensor x) -> Tensor").unwrap());
/// assert_eq!(s.info.tensor_args, vec![0]);
/// ```
#[derive(Debug)]
pub struct OpSchema {
    /// The schema.
    pub schema: FunctionSchema,
    /// Its precomputed facts.
    pub info: SchemaInfo,
    /// Its canonical text.
    pub text: String,
}

impl OpSchema {
    /// Computes the facts of `schema`.
    ///
    /// ```
    /// use boxfall::{dispatcher::OpSchema, FunctionSchema};
    /// let s = OpSchema::new(FunctionSchema::parse("doc_opschema::f(int n, Tensor x) -> Tensor").unwrap());
    /// assert_eq!(s.text, "doc_opschema::f(int n, Tensor x) -> Tensor");
    /// assert_eq!(s.info.tensor_args, vec![1]);
    /// ```
    pub fn new(schema: FunctionSchema) -> OpSchema {
        let info = schema.info();
        let text = schema.to_string();
        OpSchema { schema, info, text }
    }
}
