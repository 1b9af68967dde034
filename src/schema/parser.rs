//! The schema parser: a recursive-descent reader over [`Cursor`] that builds a
//! [`FunctionSchema`] in one pass, without a token vector.
//!
//! Grammar, as PyTorch writes schemas:
//! ```text
//! schema    := name '(' args ')' '->' returns
//! name      := ident '::' ident ('.' ident)?
//! args      := (arg | '*' | '...') joined by ','         ('...' last, '*' at most once)
//! arg       := type ident ('=' literal)?
//! returns   := '(' (ret | '...') joined by ',' ')' | '...' | ret
//! ret       := type ident?
//! type      := core alias? ( '?' | '[' int? ']' alias? )*
//! core      := named | ident.ident... | tvar | '(' type, ... ')' | Dict(type, type)
//!            | Future(type) | Await(type) | RRef(type)
//! alias     := '(' sets '!'? ('->' sets)? ')'     sets := (ident | '*') joined by '|'
//! ```
//! Alias annotations only go on an argument's own type or its list elements, never inside a
//! tuple, dict or future; that is where c10 keeps them too.

use std::borrow::Cow;
use std::collections::HashSet;
use std::str::FromStr;

use super::lexer::{fault, unbalanced_bracket, Cursor, PResult};
use super::types::{AliasInfo, Argument, DefaultValue, FunctionSchema, Literal, Type};
use crate::error::SchemaError;

/// How deep types and default lists may nest. Real schemas stay below 5; the cap keeps
/// recursion (and the recursive drop of the result) far from the stack's end on hostile input.
const MAX_DEPTH: usize = 64;

/// How many elements an int broadcast to a fixed-size list (`int[2] k=1`) may expand to, so
/// that a hostile `int[999999999] k=1` cannot allocate gigabytes.
const MAX_BROADCAST: usize = 64;

/// What an argument is pushed as before it is parsed in place.
const EMPTY_ARGUMENT: Argument = Argument {
    name: String::new(),
    ty: Type::NoneType,
    default: None,
    kwarg_only: false,
    alias: None,
};

/// Up to this many arguments, duplicates are found by scanning the ones already parsed.
const SCAN_LIMIT: usize = 16;

impl FunctionSchema {
    /// Parses a schema as PyTorch prints it. The namespace and `->` are required.
    ///
    /// ```
    /// use boxfall::FunctionSchema;
    /// let s = FunctionSchema::parse("aten::topk.values(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True, *, Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!) values, Tensor(b!) indices)")?;
    /// assert_eq!(s.returns[1].name, "indices");
    /// assert!(s.is_mutable());
    ///
    /// let err = FunctionSchema::parse("add(Tensor self) -> Tensor").unwrap_err();
    /// assert!(err.message.contains("missing namespace"));
    /// # Ok::<(), boxfall::SchemaError>(())
    /// ```
    pub fn parse(text: &str) -> Result<FunctionSchema, SchemaError> {
        let mut parser = Parser {
            c: Cursor::new(text),
        };
        parser
            .schema()
            .map_err(|fault| unbalanced_bracket(text).unwrap_or(fault).into_error(text))
    }
}

/// The same as [`FunctionSchema::parse`].
///
/// ```
/// let s: boxfall::FunctionSchema = "aten::relu(Tensor self) -> Tensor".parse()?;
/// assert_eq!(s.operator_name(), "aten::relu");
/// # Ok::<(), boxfall::SchemaError>(())
/// ```
impl FromStr for FunctionSchema {
    type Err = SchemaError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        FunctionSchema::parse(text)
    }
}

struct Parser<'a> {
    c: Cursor<'a>,
}

impl<'a> Parser<'a> {
    fn fail<T>(&self, message: impl Into<Cow<'static, str>>) -> PResult<T> {
        Err(fault(self.c.pos, message))
    }

    fn schema(&mut self) -> PResult<FunctionSchema> {
        self.c.skip_ws();
        if self.c.at_end() {
            return Err(fault(0, "empty schema"));
        }
        let (name, overload_name) = self.name()?;
        self.c.skip_ws();
        if !self.c.eat(b'(') {
            return self.fail(format!(
                "expected '(' after the operator name, found {}",
                self.c.found()
            ));
        }
        let (arguments, is_vararg) = self.arguments()?;
        self.c.skip_ws();
        if !self.c.eat_str("->") {
            return self.fail(format!(
                "missing '->': expected '->' and the returns after the arguments, found {}",
                self.c.found()
            ));
        }
        self.c.skip_ws();
        let (returns, is_varret) = self.returns()?;
        self.c.skip_ws();
        if !self.c.at_end() {
            return self.fail(format!(
                "unexpected text after the returns: {}",
                self.c.found()
            ));
        }
        Ok(FunctionSchema {
            name,
            overload_name,
            arguments,
            returns,
            is_vararg,
            is_varret,
        })
    }

    fn name(&mut self) -> PResult<(String, String)> {
        let start = self.c.pos;
        if self.c.looking_at("::") {
            return self.fail("missing namespace: expected 'namespace::name'");
        }
        let Some(ns) = self.c.ident() else {
            return self.fail(format!(
                "expected an operator name 'namespace::name', found {}",
                self.c.found()
            ));
        };
        if !self.c.eat_str("::") {
            return match self.c.peek() {
                None | Some(b'(' | b'.' | b' ' | b'\t' | b'\n' | b'\r') => Err(fault(
                    start,
                    format!("missing namespace: expected 'namespace::{ns}'"),
                )),
                Some(_) => self.fail(format!(
                    "unexpected {} in the operator name",
                    self.c.found()
                )),
            };
        }
        if self.c.ident().is_none() {
            return self.fail(format!(
                "expected the operator's name after '::', found {}",
                self.c.found()
            ));
        }
        let name = self.c.slice(start, self.c.pos).to_owned();
        let overload = if self.c.eat(b'.') {
            match self.c.ident() {
                Some(overload) => overload.to_owned(),
                None => {
                    return self.fail(format!(
                        "expected an overload name after '.', found {}",
                        self.c.found()
                    ))
                }
            }
        } else {
            String::new()
        };
        Ok((name, overload))
    }

    /// After the opening `(`, through the closing `)`.
    fn arguments(&mut self) -> PResult<(Vec<Argument>, bool)> {
        let mut args = Vec::new();
        let mut seen = SeenNames::default();
        let mut kwarg_only = false;
        self.c.skip_ws();
        if self.c.eat(b')') {
            return Ok((args, false));
        }
        loop {
            self.c.skip_ws();
            if self.c.eat_str("...") {
                self.c.skip_ws();
                if !self.c.eat(b')') {
                    return self.fail("'...' must be the last argument");
                }
                return Ok((args, true));
            }
            if self.c.peek() == Some(b'*') {
                if kwarg_only {
                    return self.fail("'*' may appear only once");
                }
                self.c.pos += 1;
                kwarg_only = true;
                self.c.skip_ws();
                let comma = self.c.eat(b',');
                self.c.skip_ws();
                if self.c.at_end() || self.c.peek() == Some(b')') || self.c.looking_at("...") {
                    return self.fail("expected a keyword-only argument after '*'");
                }
                if !comma {
                    return self.fail(format!("expected ',' after '*', found {}", self.c.found()));
                }
                continue;
            }
            self.argument(kwarg_only, &mut args, &mut seen)?;
            self.c.skip_ws();
            if self.c.eat(b')') {
                return Ok((args, false));
            }
            if !self.c.eat(b',') {
                return self.fail(format!(
                    "expected ',' or ')' after an argument, found {}",
                    self.c.found()
                ));
            }
        }
    }

    /// Parses one argument onto `args`. The argument is pushed first and filled in place:
    /// moving freshly built 200-byte values through `Result`s cost more than the parsing
    /// itself (store-to-load forwarding stalls on every move).
    fn argument(
        &mut self,
        kwarg_only: bool,
        args: &mut Vec<Argument>,
        seen: &mut SeenNames,
    ) -> PResult<()> {
        args.push(EMPTY_ARGUMENT);
        let result = match args.split_last_mut() {
            Some((arg, previous)) => {
                arg.kwarg_only = kwarg_only;
                self.fill_argument(arg, previous, seen)
            }
            None => Ok(()),
        };
        if result.is_err() {
            args.pop();
        }
        result
    }

    fn fill_argument(
        &mut self,
        arg: &mut Argument,
        previous: &[Argument],
        seen: &mut SeenNames,
    ) -> PResult<()> {
        self.ty_into(0, true, &mut arg.ty, &mut arg.alias)?;
        self.c.skip_ws();
        let name_pos = self.c.pos;
        let Some(name) = self.c.ident() else {
            return self.fail(format!(
                "expected an argument name, found {}",
                self.c.found()
            ));
        };
        if seen.contains_or_add(name, previous) {
            return Err(fault(name_pos, format!("duplicate argument name '{name}'")));
        }
        arg.name = name.to_owned();
        self.c.skip_ws();
        if self.c.eat(b'=') {
            self.c.skip_ws();
            arg.default = Some(self.default_value(&arg.ty)?);
        }
        Ok(())
    }

    fn returns(&mut self) -> PResult<(Vec<Argument>, bool)> {
        if self.c.eat_str("...") {
            return Ok((Vec::new(), true));
        }
        if !self.c.eat(b'(') {
            if self.c.at_end() {
                return self.fail("expected the returns after '->'");
            }
            let mut returns = Vec::with_capacity(1);
            self.ret(&mut returns)?;
            return Ok((returns, false));
        }
        self.c.skip_ws();
        if self.c.eat(b')') {
            return Ok((Vec::new(), false));
        }
        let mut returns = Vec::new();
        loop {
            self.c.skip_ws();
            if self.c.eat_str("...") {
                self.c.skip_ws();
                if !self.c.eat(b')') {
                    return self.fail("'...' must be the last return");
                }
                return Ok((returns, true));
            }
            self.ret(&mut returns)?;
            self.c.skip_ws();
            if self.c.eat(b')') {
                return Ok((returns, false));
            }
            if !self.c.eat(b',') {
                return self.fail(format!(
                    "expected ',' or ')' after a return, found {}",
                    self.c.found()
                ));
            }
        }
    }

    fn ret(&mut self, returns: &mut Vec<Argument>) -> PResult<()> {
        returns.push(EMPTY_ARGUMENT);
        let result = match returns.last_mut() {
            Some(ret) => self.fill_return(ret),
            None => Ok(()),
        };
        if result.is_err() {
            returns.pop();
        }
        result
    }

    fn fill_return(&mut self, ret: &mut Argument) -> PResult<()> {
        self.ty_into(0, true, &mut ret.ty, &mut ret.alias)?;
        self.c.skip_ws();
        if let Some(name) = self.c.ident() {
            ret.name = name.to_owned();
        }
        Ok(())
    }

    /// A type with its suffixes, written into `ty`; with `with_alias`, also its alias
    /// annotations, into `alias`. They fold as c10 folds them: an annotation written before a
    /// list suffix belongs to the elements, and the list's own annotation contains it.
    fn ty_into(
        &mut self,
        depth: usize,
        with_alias: bool,
        ty: &mut Type,
        alias: &mut Option<AliasInfo>,
    ) -> PResult<()> {
        let mut depth = depth + 1;
        if depth > MAX_DEPTH {
            return self.too_deep();
        }
        self.core_type_into(depth, ty)?;
        self.c.skip_ws();
        if with_alias && self.c.peek() == Some(b'(') {
            *alias = Some(self.alias()?);
        }
        loop {
            self.c.skip_ws();
            match self.c.peek() {
                Some(b'?') => {
                    self.c.pos += 1;
                    wrap(ty, Type::Optional);
                }
                Some(b'[') => {
                    self.c.pos += 1;
                    let size = self.list_size()?;
                    wrap(ty, |elem| Type::List { elem, size });
                    self.c.skip_ws();
                    let own = if with_alias && self.c.peek() == Some(b'(') {
                        Some(self.alias()?)
                    } else {
                        None
                    };
                    *alias = match (alias.take(), own) {
                        (None, own) => own,
                        (Some(elem), Some(mut own)) => {
                            own.contained.push(elem);
                            Some(own)
                        }
                        (Some(elem), None) => Some(AliasInfo {
                            before: Vec::new(),
                            after: Vec::new(),
                            is_write: elem.is_write,
                            contained: vec![elem],
                        }),
                    };
                }
                _ => break,
            }
            depth += 1;
            if depth > MAX_DEPTH {
                return self.too_deep();
            }
        }
        if self.c.peek() == Some(b'(') {
            return self.fail(if with_alias {
                "bad alias annotation: it goes right after the type or a list's '[]', before '?'"
            } else {
                "bad alias annotation: only an argument's own type or its list elements can carry one"
            });
        }
        Ok(())
    }

    fn too_deep<T>(&self) -> PResult<T> {
        self.fail(format!(
            "type is nested too deeply (more than {MAX_DEPTH} levels)"
        ))
    }

    /// A type that takes no alias annotation, e.g. a tuple's element.
    fn inner_type_into(&mut self, depth: usize, ty: &mut Type) -> PResult<()> {
        let mut no_alias = None;
        self.ty_into(depth, false, ty, &mut no_alias)
    }

    /// After `[`: an optional size, then `]`.
    fn list_size(&mut self) -> PResult<Option<usize>> {
        self.c.skip_ws();
        let start = self.c.pos;
        while self.c.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.c.pos += 1;
        }
        let size = if self.c.pos > start {
            match self.c.slice(start, self.c.pos).parse::<usize>() {
                Ok(n) => Some(n),
                Err(_) => return Err(fault(start, "list size is too large")),
            }
        } else {
            None
        };
        self.c.skip_ws();
        if !self.c.eat(b']') {
            return self.fail(format!(
                "expected ']' or a list size after '[', found {}",
                self.c.found()
            ));
        }
        Ok(size)
    }

    fn core_type_into(&mut self, depth: usize, ty: &mut Type) -> PResult<()> {
        let start = self.c.pos;
        if self.c.eat(b'(') {
            let mut elems = Vec::new();
            self.c.skip_ws();
            if !self.c.eat(b')') {
                loop {
                    self.c.skip_ws();
                    elems.push(Type::NoneType);
                    if let Some(elem) = elems.last_mut() {
                        self.inner_type_into(depth, elem)?;
                    }
                    self.c.skip_ws();
                    if self.c.eat(b')') {
                        break;
                    }
                    if !self.c.eat(b',') {
                        return self.fail(format!(
                            "expected ',' or ')' in a tuple type, found {}",
                            self.c.found()
                        ));
                    }
                }
            }
            *ty = Type::Tuple(elems);
            return Ok(());
        }
        let Some(name) = self.c.qualified_ident() else {
            return self.fail(format!("expected a type, found {}", self.c.found()));
        };
        if Type::set_from_name(name, ty) {
            return Ok(());
        }
        *ty = match name {
            "Dict" => {
                let [key, value] = self.type_params::<2>(name, depth)?;
                Type::Dict(Box::new(key), Box::new(value))
            }
            "Future" | "Await" | "RRef" => {
                let [inner] = self.type_params::<1>(name, depth)?;
                let inner = Box::new(inner);
                match name {
                    "Future" => Type::Future(inner),
                    "Await" => Type::Await(inner),
                    _ => Type::RRef(inner),
                }
            }
            _ if name.contains('.') => Type::Class(name.to_owned()),
            _ if name.bytes().next().is_some_and(|b| b.is_ascii_lowercase()) => {
                Type::Var(name.to_owned())
            }
            _ => return Err(fault(start, format!("unknown type '{name}'"))),
        };
        Ok(())
    }

    /// `(T1, ..., TN)` after a parameterised type's name.
    fn type_params<const N: usize>(&mut self, name: &str, depth: usize) -> PResult<[Type; N]> {
        self.c.skip_ws();
        if !self.c.eat(b'(') {
            return self.fail(format!(
                "expected '(' after '{name}', found {}",
                self.c.found()
            ));
        }
        let mut params: [Type; N] = std::array::from_fn(|_| Type::NoneType);
        for (i, param) in params.iter_mut().enumerate() {
            self.c.skip_ws();
            self.inner_type_into(depth, param)?;
            self.c.skip_ws();
            let (sep, what) = if i + 1 == N {
                (b')', "')'")
            } else {
                (b',', "','")
            };
            if !self.c.eat(sep) {
                return self.fail(format!(
                    "expected {what} in '{name}(...)' ({N} type parameter{}), found {}",
                    if N == 1 { "" } else { "s" },
                    self.c.found()
                ));
            }
        }
        Ok(params)
    }

    /// `(a)`, `(a!)`, `(a|b)`, `(a -> *)`, `(*)`; the cursor is on `(`.
    fn alias(&mut self) -> PResult<AliasInfo> {
        self.c.pos += 1;
        let before = self.alias_sets()?;
        self.c.skip_ws();
        let is_write = self.c.eat(b'!');
        self.c.skip_ws();
        let after = if self.c.eat_str("->") {
            self.alias_sets()?
        } else {
            before.iter().map(|set| set.as_str().to_owned()).collect()
        };
        self.c.skip_ws();
        if !self.c.eat(b')') {
            return self.fail(format!(
                "bad alias annotation: expected '|', '!', '->' or ')', found {}",
                self.c.found()
            ));
        }
        Ok(AliasInfo {
            before,
            after,
            is_write,
            contained: Vec::new(),
        })
    }

    fn alias_sets(&mut self) -> PResult<Vec<String>> {
        let mut sets = Vec::with_capacity(1);
        loop {
            self.c.skip_ws();
            if self.c.eat(b'*') {
                sets.push("*".to_owned());
            } else if let Some(set) = self.c.ident() {
                sets.push(set.to_owned());
            } else {
                return self.fail(format!(
                    "bad alias annotation: expected an alias set name or '*', found {}",
                    self.c.found()
                ));
            }
            self.c.skip_ws();
            if !self.c.eat(b'|') {
                return Ok(sets);
            }
        }
    }

    fn default_value(&mut self, ty: &Type) -> PResult<DefaultValue> {
        let start = self.c.pos;
        let literal = self.literal(0, takes_dtype_names(ty))?;
        let text = self.c.slice(start, self.c.pos);
        match coerce(ty, literal) {
            Ok(value) => Ok(DefaultValue {
                text: text.to_owned(),
                value,
            }),
            Err(Mismatch::Type) => Err(fault(
                start,
                format!("default value {text} does not fit type '{ty}'"),
            )),
            Err(Mismatch::TooLong(n)) => Err(fault(
                start,
                format!(
                    "default value {text} would expand to {n} elements (at most {MAX_BROADCAST}); write the list out"
                ),
            )),
        }
    }

    /// A default value. `dtypes`: the argument is a `ScalarType`, whose defaults may also be
    /// dtype names (`float32`, `int64`), as PyTorch's parser reads them.
    fn literal(&mut self, depth: usize, dtypes: bool) -> PResult<Literal> {
        if depth >= MAX_DEPTH {
            return self.fail(format!(
                "default value is nested too deeply (more than {MAX_DEPTH} levels)"
            ));
        }
        match self.c.peek() {
            Some(b'"' | b'\'') => Ok(Literal::Str(self.c.string()?.into_owned())),
            Some(b'[') => {
                self.c.pos += 1;
                let mut items = Vec::new();
                self.c.skip_ws();
                if self.c.eat(b']') {
                    return Ok(Literal::List(items));
                }
                loop {
                    self.c.skip_ws();
                    items.push(self.literal(depth + 1, dtypes)?);
                    self.c.skip_ws();
                    if self.c.eat(b']') {
                        return Ok(Literal::List(items));
                    }
                    if !self.c.eat(b',') {
                        return self.fail(format!(
                            "expected ',' or ']' in a list, found {}",
                            self.c.found()
                        ));
                    }
                }
            }
            Some(b'-') if self.c.looking_at("-inf") => {
                self.word_literal("-inf", Literal::Float(f64::NEG_INFINITY))
            }
            Some(b'-' | b'.' | b'0'..=b'9') => {
                let start = self.c.pos;
                let number = self.c.number()?;
                if number.is_float {
                    match number.text.parse::<f64>() {
                        Ok(f) => Ok(Literal::Float(f)),
                        Err(_) => Err(fault(start, "bad number")),
                    }
                } else {
                    match number.text.parse::<i64>() {
                        Ok(i) => Ok(Literal::Int(i)),
                        Err(_) => Err(fault(
                            start,
                            format!("integer {} does not fit in 64 bits", number.text),
                        )),
                    }
                }
            }
            _ => {
                let start = self.c.pos;
                let value = match self.c.ident() {
                    Some("None") => Literal::None,
                    Some("True") => Literal::Bool(true),
                    Some("False") => Literal::Bool(false),
                    Some("inf") => Literal::Float(f64::INFINITY),
                    Some("nan") => Literal::Float(f64::NAN),
                    Some(word) => match enum_default(word, dtypes) {
                        Some(code) => Literal::Int(code),
                        None => {
                            return Err(fault(
                                start,
                                format!(
                                    "bad default value '{word}': expected a number, a string, a list, True, False, None{}",
                                    if dtypes {
                                        ", or a dtype name such as float32 or long"
                                    } else {
                                        ", or one of the enum names PyTorch's sources use (Mean, long, float, complex, strided, contiguous_format)"
                                    }
                                ),
                            ))
                        }
                    },
                    None => {
                        return self.fail(format!(
                            "expected a default value, found {}",
                            self.c.found()
                        ))
                    }
                };
                Ok(value)
            }
        }
    }

    fn word_literal(&mut self, word: &str, value: Literal) -> PResult<Literal> {
        let start = self.c.pos;
        self.c.pos += word.len();
        if self
            .c
            .peek()
            .is_some_and(|b| super::lexer::is_ident_continue(b) || b == b'.')
        {
            return Err(fault(start, "bad number"));
        }
        Ok(value)
    }
}

/// Whether a default of this type may be a dtype name (`ScalarType`, optional or not).
fn takes_dtype_names(ty: &Type) -> bool {
    match ty {
        Type::Optional(inner) => takes_dtype_names(inner),
        t => *t == Type::ScalarType,
    }
}

/// The enum names that native_functions.yaml writes as defaults, as the integers PyTorch's
/// parser turns them into (`function_schema_parser.cpp`): a few names for any type, and for a
/// `ScalarType` every dtype name of `c10::getStringToDtypeMap`.
fn enum_default(word: &str, dtypes: bool) -> Option<i64> {
    let any = match word {
        "float" => Some(6),   // at::kFloat
        "complex" => Some(9), // at::kComplexFloat
        "long" => Some(4),    // at::kLong
        "strided" => Some(0), // at::kStrided
        "Mean" => Some(1),    // at::Reduction::Mean
        "contiguous_format" => Some(0),
        _ => None,
    };
    if any.is_some() || !dtypes {
        return any;
    }
    // c10::ScalarType's numbering.
    Some(match word {
        "uint8" => 0,
        "int8" => 1,
        "int16" | "short" => 2,
        "int32" | "int" => 3,
        "int64" => 4,
        "float16" | "half" => 5,
        "float32" => 6,
        "float64" | "double" => 7,
        "complex32" | "chalf" => 8,
        "complex64" | "cfloat" => 9,
        "complex128" | "cdouble" => 10,
        "bool" => 11,
        "qint8" => 12,
        "quint8" => 13,
        "qint32" => 14,
        "bfloat16" => 15,
        "quint4x2" => 16,
        "quint2x4" => 17,
        "float8_e5m2" => 23,
        "float8_e4m3fn" => 24,
        "float8_e5m2fnuz" => 25,
        "float8_e4m3fnuz" => 26,
        "uint16" => 27,
        "uint32" => 28,
        "uint64" => 29,
        _ => return None,
    })
}

/// The argument names seen so far. Schemas have a handful of arguments, and scanning them
/// beats hashing; past [`SCAN_LIMIT`] a set takes over, so that a hostile schema with
/// thousands of arguments is not checked in quadratic time.
#[derive(Default)]
struct SeenNames {
    set: Option<HashSet<String>>,
}

impl SeenNames {
    /// Whether `name` is among `previous` (the arguments before it); remembers it if not.
    fn contains_or_add(&mut self, name: &str, previous: &[Argument]) -> bool {
        if let Some(set) = &mut self.set {
            return !set.insert(name.to_owned());
        }
        // Comparing lengths and last bytes first skips most calls to memcmp.
        let last = name.as_bytes().last();
        let found = previous.iter().any(|a| {
            a.name.len() == name.len() && a.name.as_bytes().last() == last && a.name == name
        });
        if !found && previous.len() >= SCAN_LIMIT {
            let names = previous.iter().map(|a| a.name.clone());
            self.set = Some(names.chain([name.to_owned()]).collect());
        }
        found
    }
}

/// Wraps the type in place (`T` becomes `T?` or `T[]`).
fn wrap(ty: &mut Type, make: impl FnOnce(Box<Type>) -> Type) {
    let inner = std::mem::replace(ty, Type::NoneType);
    *ty = make(Box::new(inner));
}

enum Mismatch {
    Type,
    TooLong(usize),
}

/// Checks a default against its argument's type and converts it to the value the type holds,
/// as c10 does when it reads a schema: ints widen to floats, an int fills a sized int list.
fn coerce(ty: &Type, literal: Literal) -> Result<Literal, Mismatch> {
    use Literal as L;
    match (ty, literal) {
        (Type::Optional(_) | Type::NoneType, L::None) => Ok(L::None),
        // c10 reads an optional's number as written: `float? x=1` holds the int 1.
        (Type::Optional(inner), literal @ L::Int(_))
            if matches!(**inner, Type::Float | Type::SymFloat | Type::Complex) =>
        {
            Ok(literal)
        }
        (Type::Optional(inner), literal) => coerce(inner, literal),
        (Type::Any | Type::Var(_), literal) => Ok(literal),
        (Type::Bool | Type::SymBool, literal @ L::Bool(_)) => Ok(literal),
        (
            Type::Int
            | Type::SymInt
            | Type::ScalarType
            | Type::Layout
            | Type::MemoryFormat
            | Type::QScheme,
            literal @ L::Int(_),
        ) => Ok(literal),
        (Type::Float | Type::SymFloat | Type::Complex, L::Int(i)) => Ok(L::Float(i as f64)),
        (Type::Float | Type::SymFloat | Type::Complex, literal @ L::Float(_)) => Ok(literal),
        (Type::Scalar, literal @ (L::Bool(_) | L::Int(_) | L::Float(_))) => Ok(literal),
        (Type::Str | Type::Device | Type::Dimname, literal @ L::Str(_)) => Ok(literal),
        (Type::List { elem, .. }, L::List(items)) => items
            .into_iter()
            .map(|item| coerce(elem, item))
            .collect::<Result<Vec<_>, _>>()
            .map(L::List),
        (
            Type::List {
                elem,
                size: Some(n),
            },
            L::Int(i),
        ) if matches!(**elem, Type::Int | Type::SymInt) => {
            if *n > MAX_BROADCAST {
                Err(Mismatch::TooLong(*n))
            } else {
                Ok(L::List(vec![L::Int(i); *n]))
            }
        }
        _ => Err(Mismatch::Type),
    }
}
