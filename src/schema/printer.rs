//! The canonical printer: the form PyTorch's `str(FunctionSchema)` gives, which the parser reads
//! back to an equal schema.

use std::fmt::{self, Display, Formatter, Write};

use super::types::{AliasInfo, Argument, DefaultValue, FunctionSchema, Type};

/// Prints the schema as PyTorch does.
///
/// ```
/// let text = "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)";
/// let s: boxfall::FunctionSchema = text.parse()?;
/// assert_eq!(s.to_string(), text);
/// // Spacing is canonicalised.
/// let s: boxfall::FunctionSchema = "aten::f( Tensor(a!)x,*,int  k=1 )->(Tensor(a!))".parse()?;
/// assert_eq!(s.to_string(), "aten::f(Tensor(a!) x, *, int k=1) -> Tensor(a!)");
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
impl Display for FunctionSchema {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.overload_name.is_empty() {
            f.write_char('.')?;
            f.write_str(&self.overload_name)?;
        }
        f.write_char('(')?;
        let mut seen_kwarg_only = false;
        for (i, arg) in self.arguments.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if arg.kwarg_only && !seen_kwarg_only {
                f.write_str("*, ")?;
                seen_kwarg_only = true;
            }
            arg.fmt(f)?;
        }
        if self.is_vararg {
            if !self.arguments.is_empty() {
                f.write_str(", ")?;
            }
            f.write_str("...")?;
        }
        f.write_str(") -> ")?;

        // One return goes bare unless it starts with '(', which would read as a list of
        // returns; a bare `...` likewise needs none.
        let need_paren = match (self.returns.as_slice(), self.is_varret) {
            ([only], false) => starts_with_paren(&only.ty),
            ([], true) => false,
            _ => true,
        };
        if need_paren {
            f.write_char('(')?;
        }
        for (i, ret) in self.returns.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            ret.fmt(f)?;
        }
        if self.is_varret {
            if !self.returns.is_empty() {
                f.write_str(", ")?;
            }
            f.write_str("...")?;
        }
        if need_paren {
            f.write_char(')')?;
        }
        Ok(())
    }
}

fn starts_with_paren(ty: &Type) -> bool {
    match ty {
        Type::Tuple(_) => true,
        Type::Optional(inner) | Type::List { elem: inner, .. } => starts_with_paren(inner),
        _ => false,
    }
}

/// Prints the argument as it appears in a schema: type with alias annotations, name, default.
///
/// ```
/// let s: boxfall::FunctionSchema = "aten::f(Tensor(a!)[] out, int[2] k=1) -> ()".parse()?;
/// assert_eq!(s.arguments[0].to_string(), "Tensor(a!)[] out");
/// assert_eq!(s.arguments[1].to_string(), "int[2] k=1");
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
impl Display for Argument {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_annotated(f, &self.ty, self.alias.as_ref())?;
        if !self.name.is_empty() {
            f.write_char(' ')?;
            f.write_str(&self.name)?;
        }
        if let Some(default) = &self.default {
            f.write_char('=')?;
            f.write_str(&default.text)?;
        }
        Ok(())
    }
}

/// Writes a type with its annotations in the places the parser reads them from: an element's
/// annotation before the list's brackets, the list's own after them, and both before any `?`.
fn write_annotated(f: &mut Formatter<'_>, ty: &Type, alias: Option<&AliasInfo>) -> fmt::Result {
    let mut core = ty;
    let mut optionals = 0;
    while let Type::Optional(inner) = core {
        core = inner;
        optionals += 1;
    }
    if let Type::List { elem, size } = core {
        write_annotated(f, elem, alias.and_then(|a| a.contained.first()))?;
        write_list_suffix(f, *size)?;
    } else {
        core.fmt(f)?;
    }
    if let Some(alias) = alias.filter(|a| !a.before.is_empty()) {
        alias.fmt(f)?;
    }
    for _ in 0..optionals {
        f.write_char('?')?;
    }
    Ok(())
}

fn write_list_suffix(f: &mut Formatter<'_>, size: Option<usize>) -> fmt::Result {
    match size {
        Some(n) => write!(f, "[{n}]"),
        None => f.write_str("[]"),
    }
}

/// Prints the type as written, without alias annotations.
///
/// ```
/// use boxfall::schema::Type;
/// let t = Type::Optional(Box::new(Type::List { elem: Box::new(Type::Int), size: Some(1) }));
/// assert_eq!(t.to_string(), "int[1]?");
/// let d = Type::Dict(Box::new(Type::Str), Box::new(Type::Var("t".into())));
/// assert_eq!(d.to_string(), "Dict(str, t)");
/// ```
impl Display for Type {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if let Some(name) = self.simple_name() {
            return f.write_str(name);
        }
        match self {
            Type::Optional(inner) => {
                inner.fmt(f)?;
                f.write_char('?')
            }
            Type::List { elem, size } => {
                elem.fmt(f)?;
                write_list_suffix(f, *size)
            }
            Type::Tuple(elems) => {
                f.write_char('(')?;
                for (i, elem) in elems.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    elem.fmt(f)?;
                }
                f.write_char(')')
            }
            Type::Dict(key, value) => write!(f, "Dict({key}, {value})"),
            Type::Future(inner) => write!(f, "Future({inner})"),
            Type::Await(inner) => write!(f, "Await({inner})"),
            Type::RRef(inner) => write!(f, "RRef({inner})"),
            // Every other variant has a simple name, handled above.
            _ => Ok(()),
        }
    }
}

/// Prints the annotation as written: `(a!)`, `(b|a)`, `(a -> *)`.
///
/// ```
/// use boxfall::schema::AliasInfo;
/// let a = AliasInfo { before: vec!["a".into()], after: vec!["*".into()], is_write: false, contained: vec![] };
/// assert_eq!(a.to_string(), "(a -> *)");
/// ```
impl Display for AliasInfo {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_char('(')?;
        f.write_str(&self.before.join("|"))?;
        if self.is_write {
            f.write_char('!')?;
        }
        if self.after != self.before {
            f.write_str(" -> ")?;
            f.write_str(&self.after.join("|"))?;
        }
        f.write_char(')')
    }
}

/// Prints the default exactly as it was written.
///
/// ```
/// let s: boxfall::FunctionSchema = "aten::f(float eps=1e-05) -> ()".parse()?;
/// assert_eq!(s.arguments[0].default.as_ref().unwrap().to_string(), "1e-05");
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
impl Display for DefaultValue {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
