//! The canonical printer: the form PyTorch's `str(FunctionSchema)` gives, which the parser reads
//! back to an equal schema.

use std::fmt::{self, Display, Formatter, Write};

use super::types::{AliasInfo, Argument, DefaultValue, FunctionSchema, Literal, Type};

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
            match (&self.ty, &default.value) {
                // c10 prints an int list of one repeated value as that value (`int[2] stride=1`,
                // as native_functions.yaml writes it); SymInt lists and optional ones it does not.
                // c10 does it for unsized lists too, which its parser then refuses; those print
                // as lists here, so that every printed schema reads back.
                (
                    Type::List {
                        elem,
                        size: Some(n),
                    },
                    Literal::List(items),
                ) if **elem == Type::Int
                    && items.len() > 1
                    && items.len() == *n
                    && items.iter().all(|i| *i == items[0]) =>
                {
                    write_literal(f, &items[0])?
                }
                (_, value) => write_literal(f, value)?,
            }
        }
        Ok(())
    }
}

/// Writes a default's value as PyTorch's `IValue` printer does: `True`, `None`, `-1`, floats
/// by [`write_double`], strings in double quotes with C escapes, lists as `[a, b]`.
fn write_literal(f: &mut Formatter<'_>, value: &Literal) -> fmt::Result {
    match value {
        Literal::None => f.write_str("None"),
        Literal::Bool(true) => f.write_str("True"),
        Literal::Bool(false) => f.write_str("False"),
        Literal::Int(i) => write!(f, "{i}"),
        Literal::Float(d) => write_double(f, *d),
        Literal::Str(s) => write_quoted(f, s),
        Literal::List(items) => {
            f.write_char('[')?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write_literal(f, item)?;
            }
            f.write_char(']')
        }
    }
}

/// A double as c10 prints one: a whole number below 1e10 with a trailing dot (`2.`, `-0.`),
/// anything else with 17 significant digits in `%g` form (`1.0000000000000001e-05`, `inf`).
fn write_double(f: &mut Formatter<'_>, d: f64) -> fmt::Result {
    if d.is_nan() {
        return f.write_str("nan");
    }
    if d.is_infinite() {
        return f.write_str(if d < 0.0 { "-inf" } else { "inf" });
    }
    if (d.is_normal() || d == 0.0) && d.abs() < 1e10 {
        let i = d as i64;
        if i as f64 == d {
            let sign = if i == 0 && d.is_sign_negative() {
                "-"
            } else {
                ""
            };
            return write!(f, "{sign}{i}.");
        }
    }
    let text = format_g17(d);
    // An integral double of 1e10 or more that `%.17g` writes without a point or an exponent
    // (7085987130448018) would read back as an int: it gets the point the smaller ones get.
    if text.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
        return write!(f, "{text}.");
    }
    f.write_str(&text)
}

/// `printf("%.17g", d)` for a finite `d`.
fn format_g17(d: f64) -> String {
    const PRECISION: i32 = 17;
    let sci = format!("{:.*e}", (PRECISION - 1) as usize, d);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..PRECISION).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{:.*}", (PRECISION - 1 - exp) as usize, d))
    }
}

/// A string as c10's `printQuotedString` writes it: double quotes, C escapes, other
/// unprintable bytes in octal.
fn write_quoted(f: &mut Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '\\' => f.write_str("\\\\")?,
            '\'' => f.write_str("\\'")?,
            '"' => f.write_str("\\\"")?,
            '\x07' => f.write_str("\\a")?,
            '\x08' => f.write_str("\\b")?,
            '\x0c' => f.write_str("\\f")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            '\x0b' => f.write_str("\\v")?,
            c if c.is_ascii_control() => write!(f, "\\{:03o}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
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
