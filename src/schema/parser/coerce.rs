//! A default checked against its argument's type and converted to the value the type holds.

use super::{Mismatch, Parser, MAX_BROADCAST};
use crate::schema::syntax::{Node, Part, TyRef};
use crate::schema::types::{Literal, Type};

/// What [`Parser::coerce`] needs to know of a type.
enum Shape<'t> {
    Leaf(&'t Type),
    Optional(TyRef),
    List(TyRef, Option<usize>),
    Var,
    Other,
}

impl Parser<'_, '_> {
    fn shape(&self, ty: TyRef) -> Shape<'static> {
        match ty {
            TyRef::Leaf(i) => Shape::Leaf(Type::leaf(i)),
            TyRef::Node(n) => match self.b.parts.get(n as usize) {
                Some(Part::Node(Node::Optional(inner))) => Shape::Optional(*inner),
                Some(Part::Node(Node::List { elem, size })) => Shape::List(*elem, *size),
                Some(Part::Node(Node::Var(_))) => Shape::Var,
                _ => Shape::Other,
            },
        }
    }

    /// The owned type, for messages.
    pub(super) fn owned_type(&self, ty: TyRef) -> Type {
        self.b.ty(self.c.src(), ty)
    }

    /// Whether a default of this type may be a dtype name (`ScalarType`, optional or not).
    pub(super) fn takes_dtype_names(&self, ty: TyRef) -> bool {
        match self.shape(ty) {
            Shape::Optional(inner) => self.takes_dtype_names(inner),
            Shape::Leaf(t) => *t == Type::ScalarType,
            _ => false,
        }
    }

    fn is_leaf(&self, ty: TyRef, pred: impl Fn(&Type) -> bool) -> bool {
        matches!(self.shape(ty), Shape::Leaf(t) if pred(t))
    }

    /// Checks a default against its argument's type and converts it to the value the type
    /// holds, as c10 does when it reads a schema: ints widen to floats, an int fills a sized
    /// int list.
    pub(super) fn coerce(&self, ty: TyRef, literal: Literal) -> Result<Literal, Mismatch> {
        use Literal as L;
        match (self.shape(ty), literal) {
            (Shape::Optional(_) | Shape::Leaf(Type::NoneType), L::None) => Ok(L::None),
            // c10 reads an optional's number as written: `float? x=1` holds the int 1.
            (Shape::Optional(inner), literal @ L::Int(_))
                if self.is_leaf(inner, |t| {
                    matches!(t, Type::Float | Type::SymFloat | Type::Complex)
                }) =>
            {
                Ok(literal)
            }
            (Shape::Optional(inner), literal) => self.coerce(inner, literal),
            (Shape::Leaf(Type::Any) | Shape::Var, literal) => Ok(literal),
            (Shape::Leaf(Type::Bool | Type::SymBool), literal @ L::Bool(_)) => Ok(literal),
            (
                Shape::Leaf(
                    Type::Int
                    | Type::SymInt
                    | Type::ScalarType
                    | Type::Layout
                    | Type::MemoryFormat
                    | Type::QScheme,
                ),
                literal @ L::Int(_),
            ) => Ok(literal),
            (Shape::Leaf(Type::Float | Type::SymFloat | Type::Complex), L::Int(i)) => {
                Ok(L::Float(i as f64))
            }
            (Shape::Leaf(Type::Float | Type::SymFloat | Type::Complex), literal @ L::Float(_)) => {
                Ok(literal)
            }
            (Shape::Leaf(Type::Scalar), literal @ (L::Bool(_) | L::Int(_) | L::Float(_))) => {
                Ok(literal)
            }
            (Shape::Leaf(Type::Str | Type::Device | Type::Dimname), literal @ L::Str(_)) => {
                Ok(literal)
            }
            (Shape::List(elem, _), L::List(items)) => items
                .into_iter()
                .map(|item| self.coerce(elem, item))
                .collect::<Result<Vec<_>, _>>()
                .map(L::List),
            (Shape::List(elem, Some(n)), L::Int(i))
                if self.is_leaf(elem, |t| matches!(t, Type::Int | Type::SymInt)) =>
            {
                if n > MAX_BROADCAST {
                    Err(Mismatch::TooLong(n))
                } else {
                    Ok(L::List(vec![L::Int(i); n]))
                }
            }
            _ => Err(Mismatch::Type),
        }
    }
}
