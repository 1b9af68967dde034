//! The parser's own result: a schema as byte ranges into its text plus a few flat vectors, with
//! no heap value per name, type or alias set. [`FunctionSchema`] is built from it
//! ([`Syntax::take_schema`], which takes the defaults out of it); the Python binding's check
//! (`Syntax::check`) keeps only the names' spans and the flags.
//!
//! A schema of the PyTorch set holds on average five arguments and returns, five types and one
//! alias annotation; as owned values that is about fifteen allocations, here it is two to four.

use super::types::{AliasInfo, Argument, DefaultValue, FunctionSchema, Literal, Type};

/// A byte range of the schema's text. The parser only ever cuts at ASCII bytes, so every span
/// lies on character boundaries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl Span {
    pub(crate) fn of(self, src: &str) -> &str {
        src.get(self.start..self.end).unwrap_or_default()
    }

    pub(crate) fn bytes(self, src: &[u8]) -> &[u8] {
        src.get(self.start..self.end).unwrap_or_default()
    }
}

/// A type: a parameterless one by its index in [`Type::leaf`], any other by its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TyRef {
    Leaf(u8),
    Node(u32),
}

/// A type with parameters, or a name kept as written.
#[derive(Clone, Debug)]
pub(crate) enum Node {
    Optional(TyRef),
    List {
        elem: TyRef,
        size: Option<usize>,
    },
    /// The elements are the `Elem` nodes `start..start + len`.
    Tuple {
        start: u32,
        len: u32,
    },
    Elem(TyRef),
    Dict(TyRef, TyRef),
    Future(TyRef),
    Await(TyRef),
    RRef(TyRef),
    Var(Span),
    Class(Span),
}

/// A type node, an alias annotation or an alias set: one vector holds them all, so that a
/// schema's types and annotations cost one allocation.
#[derive(Clone, Debug)]
pub(crate) enum Part {
    Node(Node),
    Alias(Alias),
    /// An alias set's name; a `*` is the span of the `*`.
    Set(Span),
}

/// An alias annotation; its sets are the `Set` parts `start..start + len`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Alias {
    pub(crate) before: (u32, u32),
    pub(crate) after: (u32, u32),
    pub(crate) is_write: bool,
    /// For a list, the annotation of its elements.
    pub(crate) contained: Option<u32>,
}

/// A default: where it is written and the value, already converted to the argument's type.
#[derive(Clone, Debug)]
pub(crate) struct DefaultAt {
    pub(crate) text: Span,
    pub(crate) value: Literal,
}

/// An argument or a return; an unnamed return has an empty name.
#[derive(Clone, Debug)]
pub(crate) struct Item {
    pub(crate) name: Span,
    pub(crate) ty: TyRef,
    pub(crate) default: Option<DefaultAt>,
    pub(crate) kwarg_only: bool,
    pub(crate) alias: Option<u32>,
}

/// A parsed schema, as spans into the text it was parsed from.
#[derive(Clone, Debug)]
pub(crate) struct Syntax {
    /// `ns::op`.
    pub(crate) name: Span,
    /// Empty for the default overload.
    pub(crate) overload: Span,
    /// The arguments, then the returns.
    pub(crate) items: Vec<Item>,
    pub(crate) n_args: usize,
    pub(crate) parts: Vec<Part>,
    pub(crate) is_vararg: bool,
    pub(crate) is_varret: bool,
}

impl Syntax {
    fn node(&self, i: u32) -> Option<&Node> {
        match self.parts.get(i as usize) {
            Some(Part::Node(node)) => Some(node),
            _ => None,
        }
    }

    /// The owned schema, taking the items' defaults instead of copying them: the Rust path
    /// ([`FunctionSchema::parse`]) throws the Syntax away afterwards and keeps only its
    /// emptied vectors. `src` must be the text this was parsed from.
    pub(crate) fn take_schema(&mut self, src: &str) -> FunctionSchema {
        let mut items = std::mem::take(&mut self.items);
        let n_args = self.n_args.min(items.len());
        // Exact capacities: the counts are known, so neither vector grows.
        let mut arguments = Vec::with_capacity(n_args);
        let mut returns = Vec::with_capacity(items.len() - n_args);
        for (i, item) in items.drain(..).enumerate() {
            let a = self.take_argument(src, item);
            if i < n_args {
                arguments.push(a);
            } else {
                returns.push(a);
            }
        }
        self.items = items;
        FunctionSchema {
            name: self.name.of(src).to_owned(),
            overload_name: self.overload.of(src).to_owned(),
            arguments,
            returns,
            is_vararg: self.is_vararg,
            is_varret: self.is_varret,
        }
    }

    fn take_argument(&self, src: &str, item: Item) -> Argument {
        Argument {
            name: item.name.of(src).to_owned(),
            // Most types are leaves: built here, without the call.
            ty: match item.ty {
                TyRef::Leaf(i) => Type::leaf_owned(i),
                node => self.ty(src, node),
            },
            default: item.default.map(|d| DefaultValue {
                text: d.text.of(src).to_owned(),
                value: d.value,
            }),
            kwarg_only: item.kwarg_only,
            alias: item.alias.map(|a| self.alias(src, a)),
        }
    }

    /// The owned type.
    pub(crate) fn ty(&self, src: &str, ty: TyRef) -> Type {
        let n = match ty {
            TyRef::Leaf(i) => return Type::leaf_owned(i),
            TyRef::Node(n) => n,
        };
        let boxed = |t: &TyRef| Box::new(self.ty(src, *t));
        match self.node(n) {
            Some(Node::Optional(t)) => Type::Optional(boxed(t)),
            Some(Node::List { elem, size }) => Type::List {
                elem: boxed(elem),
                size: *size,
            },
            Some(Node::Tuple { start, len }) => Type::Tuple(
                (*start..start.saturating_add(*len))
                    .filter_map(|i| match self.node(i) {
                        Some(Node::Elem(t)) => Some(self.ty(src, *t)),
                        _ => None,
                    })
                    .collect(),
            ),
            Some(Node::Elem(t)) => self.ty(src, *t),
            Some(Node::Dict(k, v)) => Type::Dict(boxed(k), boxed(v)),
            Some(Node::Future(t)) => Type::Future(boxed(t)),
            Some(Node::Await(t)) => Type::Await(boxed(t)),
            Some(Node::RRef(t)) => Type::RRef(boxed(t)),
            Some(Node::Var(name)) => Type::Var(name.of(src).to_owned()),
            Some(Node::Class(name)) => Type::Class(name.of(src).to_owned()),
            None => Type::Any,
        }
    }

    fn sets<'s>(&'s self, src: &'s str, (start, len): (u32, u32)) -> impl Iterator<Item = &'s str> {
        let start = start as usize;
        self.parts
            .get(start..start.saturating_add(len as usize))
            .unwrap_or_default()
            .iter()
            .filter_map(move |part| match part {
                Part::Set(set) => Some(set.of(src)),
                _ => None,
            })
    }

    fn alias(&self, src: &str, i: u32) -> AliasInfo {
        let Some(Part::Alias(a)) = self.parts.get(i as usize) else {
            return AliasInfo {
                before: Vec::new(),
                after: Vec::new(),
                is_write: false,
                contained: Vec::new(),
            };
        };
        AliasInfo {
            before: self.sets(src, a.before).map(str::to_owned).collect(),
            after: self.sets(src, a.after).map(str::to_owned).collect(),
            is_write: a.is_write,
            contained: a
                .contained
                .map(|c| vec![self.alias(src, c)])
                .unwrap_or_default(),
        }
    }
}
