//! The parser's own result: a schema as byte ranges into its text plus a few flat vectors (a
//! [`Syntax`] head and its [`Body`]), with no heap value per name, type or alias set.
//! [`FunctionSchema`] is built from it ([`Body::take_schema`]); the Python binding's check
//! (`Syntax::check`) keeps only the head.
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

/// An argument or a return; an unnamed return has an empty name. Plain data, so that clearing
/// a vector of them for the next parse costs nothing: the default is an index into
/// [`Body::defaults`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item {
    pub(crate) name: Span,
    pub(crate) ty: TyRef,
    pub(crate) default: Option<u32>,
    pub(crate) kwarg_only: bool,
    pub(crate) alias: Option<u32>,
}

/// A parsed schema's head: the names, as spans into the text it was parsed from, and the
/// flags. Its arguments, returns, types and annotations are in the [`Body`] it was parsed
/// with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Syntax {
    /// `ns::op`.
    pub(crate) name: Span,
    /// Empty for the default overload.
    pub(crate) overload: Span,
    /// How many of the body's items are arguments; the rest are returns.
    pub(crate) n_args: usize,
    pub(crate) is_vararg: bool,
    pub(crate) is_varret: bool,
}

/// The vectors a parse fills: the arguments then the returns, the type nodes, alias annotations
/// and alias sets, and the defaults. They are kept per thread and reused from one parse to the
/// next, so that a parse allocates nothing once they have grown to a schema's size.
#[derive(Debug, Default)]
pub(crate) struct Body {
    pub(crate) items: Vec<Item>,
    pub(crate) parts: Vec<Part>,
    pub(crate) defaults: Vec<DefaultAt>,
}

/// Bodies larger than this (in elements of any vector) are not kept for the next parse, so
/// that one huge schema does not pin its memory.
const KEEP_CAPACITY: usize = 256;

impl Body {
    /// An empty body, without allocating (a `const` thread-local's initial value).
    pub(crate) const fn new() -> Body {
        Body {
            items: Vec::new(),
            parts: Vec::new(),
            defaults: Vec::new(),
        }
    }

    /// Empties the vectors for the next parse, or drops them if they grew large.
    pub(crate) fn reset(&mut self) {
        let keep = |n: usize| n <= KEEP_CAPACITY;
        if keep(self.items.capacity())
            && keep(self.parts.capacity())
            && keep(self.defaults.capacity())
        {
            self.items.clear();
            self.parts.clear();
            self.defaults.clear();
        } else {
            *self = Body::new();
        }
    }

    fn node(&self, i: u32) -> Option<&Node> {
        match self.parts.get(i as usize) {
            Some(Part::Node(node)) => Some(node),
            _ => None,
        }
    }

    /// The owned schema of `syntax`, which was parsed from `src` into this body.
    pub(crate) fn take_schema(&mut self, syntax: &Syntax, src: &str) -> FunctionSchema {
        let n_args = syntax.n_args.min(self.items.len());
        let (arguments, returns) = self.items.split_at(n_args);
        // Collected from slices: one allocation of the exact size each, and every argument is
        // built where it is stored rather than moved there.
        let owned_args = arguments
            .iter()
            .map(|item| self.take_argument(src, item))
            .collect();
        let owned_rets = returns
            .iter()
            .map(|item| self.take_argument(src, item))
            .collect();
        FunctionSchema {
            name: syntax.name.of(src).to_owned(),
            overload_name: syntax.overload.of(src).to_owned(),
            arguments: owned_args,
            returns: owned_rets,
            is_vararg: syntax.is_vararg,
            is_varret: syntax.is_varret,
        }
    }

    #[inline(always)]
    fn take_argument(&self, src: &str, item: &Item) -> Argument {
        Argument {
            name: item.name.of(src).to_owned(),
            // Most types are leaves: built here, without the call.
            ty: match item.ty {
                TyRef::Leaf(i) => Type::leaf_owned(i),
                node => self.ty(src, node),
            },
            default: item.default.map(|d| self.default(src, d)),
            kwarg_only: item.kwarg_only,
            alias: item.alias.map(|a| self.alias(src, a)),
        }
    }

    fn default(&self, src: &str, i: u32) -> DefaultValue {
        match self.defaults.get(i as usize) {
            Some(d) => DefaultValue {
                text: d.text.of(src).to_owned(),
                value: d.value.clone(),
            },
            None => DefaultValue {
                text: String::new(),
                value: Literal::None,
            },
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
