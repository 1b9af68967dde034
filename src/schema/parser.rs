//! The schema parser: a recursive-descent reader over [`Cursor`] that builds a [`Syntax`] (spans
//! into the text, types and alias annotations in flat vectors) in one pass, without a token
//! vector; [`FunctionSchema::parse`] then builds the owned schema from it.
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
use std::cell::RefCell;
use std::str::FromStr;

use super::lexer::{fault, unbalanced_bracket, Cursor, PResult};
use super::syntax::{Alias, Body, DefaultAt, Item, Node, Part, Span, Syntax, TyRef};
use super::types::{FunctionSchema, Literal, Type};
use crate::error::SchemaError;
use names::{enum_default, SeenNames};

mod coerce;
mod names;

/// How deep types and default lists may nest. Real schemas stay below 5; the cap keeps
/// recursion (and the recursive drop of the result) far from the stack's end on hostile input.
const MAX_DEPTH: usize = 64;

/// How many elements an int broadcast to a fixed-size list (`int[2] k=1`) may expand to, so
/// that a hostile `int[999999999] k=1` cannot allocate gigabytes.
const MAX_BROADCAST: usize = 64;

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
        parse_into_scratch(text, |syntax, body| body.take_schema(syntax, text))
    }
}

thread_local! {
    /// The body every parse on this thread fills, emptied after each.
    static SCRATCH: RefCell<Body> = const { RefCell::new(Body::new()) };
}

/// Parses `text` into this thread's reused [`Body`] and hands the result to `build`; the body
/// is emptied afterwards for the next parse.
fn parse_into_scratch<R>(
    text: &str,
    build: impl FnOnce(&Syntax, &mut Body) -> R,
) -> Result<R, SchemaError> {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut body) => parse_into(text, &mut body, build),
        // Only if `build` parsed again, which none does: a body of its own then.
        Err(_) => parse_into(text, &mut Body::new(), build),
    })
}

fn parse_into<R>(
    text: &str,
    body: &mut Body,
    build: impl FnOnce(&Syntax, &mut Body) -> R,
) -> Result<R, SchemaError> {
    let parsed = Parser {
        c: Cursor::new(text),
        b: body,
    }
    .schema();
    let result = match parsed {
        Ok(syntax) => Ok(build(&syntax, body)),
        Err(fault) => Err(unbalanced_bracket(text).unwrap_or(fault).into_error(text)),
    };
    body.reset();
    result
}

impl Syntax {
    /// Checks a schema as [`FunctionSchema::parse`] does, with the same errors, but keeps only
    /// the head: the names' spans and the flags. The body goes into this thread's reused
    /// vectors, so that a successful check allocates nothing. The Python binding's
    /// `bf.parse_schema` uses it.
    #[cfg(feature = "python")]
    pub(crate) fn check(text: &str) -> Result<Syntax, SchemaError> {
        parse_into_scratch(text, |syntax, _| *syntax)
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

struct Parser<'a, 'b> {
    c: Cursor<'a>,
    b: &'b mut Body,
}

impl<'a> Parser<'a, '_> {
    fn fail<T>(&self, message: impl Into<Cow<'static, str>>) -> PResult<T> {
        Err(fault(self.c.pos, message))
    }

    fn schema(&mut self) -> PResult<Syntax> {
        self.c.skip_ws();
        if self.c.at_end() {
            return Err(fault(0, "empty schema"));
        }
        let (name, overload) = self.name()?;
        self.c.skip_ws();
        if !self.c.eat(b'(') {
            return self.fail(format!(
                "expected '(' after the operator name, found {}",
                self.c.found()
            ));
        }
        // Out of the body while the arguments are read, so that each can be checked against
        // the ones before it while the parser pushes types.
        let mut items = std::mem::take(&mut self.b.items);
        let is_vararg = self.arguments(&mut items)?;
        let n_args = items.len();
        self.c.skip_ws();
        if !self.c.eat_str("->") {
            return self.fail(format!(
                "missing '->': expected '->' and the returns after the arguments, found {}",
                self.c.found()
            ));
        }
        self.c.skip_ws();
        let is_varret = self.returns(&mut items)?;
        self.c.skip_ws();
        if !self.c.at_end() {
            return self.fail(format!(
                "unexpected text after the returns: {}",
                self.c.found()
            ));
        }
        self.b.items = items;
        Ok(Syntax {
            name,
            overload,
            n_args,
            is_vararg,
            is_varret,
        })
    }

    fn span_from(&self, start: usize) -> Span {
        Span {
            start,
            end: self.c.pos,
        }
    }

    fn name(&mut self) -> PResult<(Span, Span)> {
        let start = self.c.pos;
        if self.c.looking_at("::") {
            return self.fail("missing namespace: expected 'namespace::name'");
        }
        if self.c.ident_bytes().is_none() {
            return self.fail(format!(
                "expected an operator name 'namespace::name', found {}",
                self.c.found()
            ));
        };
        let ns = self.c.slice(start, self.c.pos);
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
        if self.c.ident_bytes().is_none() {
            return self.fail(format!(
                "expected the operator's name after '::', found {}",
                self.c.found()
            ));
        }
        let name = self.span_from(start);
        let overload = if self.c.eat(b'.') {
            let at = self.c.pos;
            match self.c.ident_bytes() {
                Some(_) => self.span_from(at),
                None => {
                    return self.fail(format!(
                        "expected an overload name after '.', found {}",
                        self.c.found()
                    ))
                }
            }
        } else {
            Span::default()
        };
        Ok((name, overload))
    }

    /// After the opening `(`, through the closing `)`; whether they end with `...`.
    fn arguments(&mut self, args: &mut Vec<Item>) -> PResult<bool> {
        let mut seen = SeenNames::default();
        let mut kwarg_only = false;
        self.c.skip_ws();
        if self.c.eat(b')') {
            return Ok(false);
        }
        loop {
            self.c.skip_ws();
            if self.c.eat_str("...") {
                self.c.skip_ws();
                if !self.c.eat(b')') {
                    return self.fail("'...' must be the last argument");
                }
                return Ok(true);
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
            self.argument(kwarg_only, args, &mut seen)?;
            self.c.skip_ws();
            if self.c.eat(b')') {
                return Ok(false);
            }
            if !self.c.eat(b',') {
                return self.fail(format!(
                    "expected ',' or ')' after an argument, found {}",
                    self.c.found()
                ));
            }
        }
    }

    /// One argument, onto `args` (the ones before it).
    fn argument(
        &mut self,
        kwarg_only: bool,
        args: &mut Vec<Item>,
        seen: &mut SeenNames<'a>,
    ) -> PResult<()> {
        let mut alias = None;
        let ty = self.ty(0, true, &mut alias)?;
        self.c.skip_ws();
        let name_pos = self.c.pos;
        let Some(name) = self.c.ident_bytes() else {
            return self.fail(format!(
                "expected an argument name, found {}",
                self.c.found()
            ));
        };
        if seen.contains_or_add(name, args, self.c.src().as_bytes()) {
            let name = self.c.slice(name_pos, self.c.pos);
            return Err(fault(name_pos, format!("duplicate argument name '{name}'")));
        }
        let name = self.span_from(name_pos);
        self.c.skip_ws();
        let default = if self.c.eat(b'=') {
            self.c.skip_ws();
            let default = self.default_value(ty)?;
            let i = u32::try_from(self.b.defaults.len()).unwrap_or(u32::MAX);
            self.b.defaults.push(default);
            Some(i)
        } else {
            None
        };
        args.push(Item {
            name,
            ty,
            default,
            kwarg_only,
            alias,
        });
        Ok(())
    }

    /// The returns, onto `returns`; whether they end with `...`.
    fn returns(&mut self, returns: &mut Vec<Item>) -> PResult<bool> {
        if self.c.eat_str("...") {
            return Ok(true);
        }
        if !self.c.eat(b'(') {
            if self.c.at_end() {
                return self.fail("expected the returns after '->'");
            }
            self.ret(returns)?;
            return Ok(false);
        }
        self.c.skip_ws();
        if self.c.eat(b')') {
            return Ok(false);
        }
        loop {
            self.c.skip_ws();
            if self.c.eat_str("...") {
                self.c.skip_ws();
                if !self.c.eat(b')') {
                    return self.fail("'...' must be the last return");
                }
                return Ok(true);
            }
            self.ret(returns)?;
            self.c.skip_ws();
            if self.c.eat(b')') {
                return Ok(false);
            }
            if !self.c.eat(b',') {
                return self.fail(format!(
                    "expected ',' or ')' after a return, found {}",
                    self.c.found()
                ));
            }
        }
    }

    /// One return, onto `returns`.
    fn ret(&mut self, returns: &mut Vec<Item>) -> PResult<()> {
        let mut alias = None;
        let ty = self.ty(0, true, &mut alias)?;
        self.c.skip_ws();
        let at = self.c.pos;
        let name = match self.c.ident_bytes() {
            Some(_) => self.span_from(at),
            None => Span::default(),
        };
        returns.push(Item {
            name,
            ty,
            default: None,
            kwarg_only: false,
            alias,
        });
        Ok(())
    }

    fn node(&mut self, node: Node) -> TyRef {
        let i = self.next_part();
        self.push_part(Part::Node(node));
        TyRef::Node(i)
    }

    /// Pushes a part. The first push makes room for eight: a schema rarely has more, and
    /// growing from the four a vector starts with cost a reallocation in a third of them.
    fn push_part(&mut self, part: Part) {
        if self.b.parts.capacity() == 0 {
            self.b.parts.reserve_exact(8);
        }
        self.b.parts.push(part);
    }

    fn next_part(&self) -> u32 {
        u32::try_from(self.b.parts.len()).unwrap_or(u32::MAX)
    }

    fn push_alias(&mut self, alias: Alias) -> u32 {
        let i = self.next_part();
        self.push_part(Part::Alias(alias));
        i
    }

    /// A type with its suffixes; with `with_alias`, also its alias annotations, into `alias`.
    /// They fold as c10 folds them: an annotation written before a list suffix belongs to the
    /// elements, and the list's own annotation contains it.
    fn ty(&mut self, depth: usize, with_alias: bool, alias: &mut Option<u32>) -> PResult<TyRef> {
        let mut depth = depth + 1;
        if depth > MAX_DEPTH {
            return self.too_deep();
        }
        let mut ty = self.core_type(depth)?;
        self.c.skip_ws();
        if with_alias && self.c.peek() == Some(b'(') {
            *alias = Some(self.alias()?);
        }
        loop {
            self.c.skip_ws();
            match self.c.peek() {
                Some(b'?') => {
                    self.c.pos += 1;
                    ty = self.node(Node::Optional(ty));
                }
                Some(b'[') => {
                    self.c.pos += 1;
                    let size = self.list_size()?;
                    ty = self.node(Node::List { elem: ty, size });
                    self.c.skip_ws();
                    let own = if with_alias && self.c.peek() == Some(b'(') {
                        Some(self.alias()?)
                    } else {
                        None
                    };
                    *alias = match (alias.take(), own) {
                        (None, own) => own,
                        (Some(elem), Some(own)) => {
                            if let Some(Part::Alias(own)) = self.b.parts.get_mut(own as usize) {
                                own.contained = Some(elem);
                            }
                            Some(own)
                        }
                        (Some(elem), None) => {
                            let is_write = matches!(self.b.parts.get(elem as usize), Some(Part::Alias(e)) if e.is_write);
                            let empty = (0, 0);
                            Some(self.push_alias(Alias {
                                before: empty,
                                after: empty,
                                is_write,
                                contained: Some(elem),
                            }))
                        }
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
        Ok(ty)
    }

    fn too_deep<T>(&self) -> PResult<T> {
        self.fail(format!(
            "type is nested too deeply (more than {MAX_DEPTH} levels)"
        ))
    }

    /// A type that takes no alias annotation, e.g. a tuple's element.
    fn inner_type(&mut self, depth: usize) -> PResult<TyRef> {
        let mut no_alias = None;
        self.ty(depth, false, &mut no_alias)
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

    fn core_type(&mut self, depth: usize) -> PResult<TyRef> {
        let start = self.c.pos;
        if self.c.eat(b'(') {
            let mut elems = Vec::new();
            self.c.skip_ws();
            if !self.c.eat(b')') {
                loop {
                    self.c.skip_ws();
                    elems.push(self.inner_type(depth)?);
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
            // The elements' own nodes are in place; their references follow in a run.
            let first = self.next_part();
            let len = u32::try_from(elems.len()).unwrap_or(u32::MAX);
            for elem in elems {
                self.push_part(Part::Node(Node::Elem(elem)));
            }
            return Ok(self.node(Node::Tuple { start: first, len }));
        }
        let Some(name) = self.c.qualified_ident() else {
            return self.fail(format!("expected a type, found {}", self.c.found()));
        };
        if let Some(leaf) = Type::leaf_index(name) {
            return Ok(TyRef::Leaf(leaf));
        }
        let written = self.c.slice(start, self.c.pos);
        let node = match written {
            "Dict" => {
                let [key, value] = self.type_params::<2>(written, depth)?;
                Node::Dict(key, value)
            }
            "Future" | "Await" | "RRef" => {
                let [inner] = self.type_params::<1>(written, depth)?;
                match written {
                    "Future" => Node::Future(inner),
                    "Await" => Node::Await(inner),
                    _ => Node::RRef(inner),
                }
            }
            _ if name.contains(&b'.') => Node::Class(self.span_from(start)),
            _ if name.first().is_some_and(|b| b.is_ascii_lowercase()) => {
                Node::Var(self.span_from(start))
            }
            _ => return Err(fault(start, format!("unknown type '{written}'"))),
        };
        Ok(self.node(node))
    }

    /// `(T1, ..., TN)` after a parameterised type's name.
    fn type_params<const N: usize>(&mut self, name: &str, depth: usize) -> PResult<[TyRef; N]> {
        self.c.skip_ws();
        if !self.c.eat(b'(') {
            return self.fail(format!(
                "expected '(' after '{name}', found {}",
                self.c.found()
            ));
        }
        let mut params = [TyRef::Leaf(0); N];
        for (i, param) in params.iter_mut().enumerate() {
            self.c.skip_ws();
            *param = self.inner_type(depth)?;
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
    fn alias(&mut self) -> PResult<u32> {
        self.c.pos += 1;
        let before = self.alias_sets()?;
        self.c.skip_ws();
        let is_write = self.c.eat(b'!');
        self.c.skip_ws();
        let after = if self.c.eat_str("->") {
            self.alias_sets()?
        } else {
            before
        };
        self.c.skip_ws();
        if !self.c.eat(b')') {
            return self.fail(format!(
                "bad alias annotation: expected '|', '!', '->' or ')', found {}",
                self.c.found()
            ));
        }
        Ok(self.push_alias(Alias {
            before,
            after,
            is_write,
            contained: None,
        }))
    }

    /// The sets, as the run `(start, len)` of parts they were pushed to.
    fn alias_sets(&mut self) -> PResult<(u32, u32)> {
        let first = self.b.parts.len();
        loop {
            self.c.skip_ws();
            let at = self.c.pos;
            if self.c.eat(b'*') || self.c.ident_bytes().is_some() {
                let set = self.span_from(at);
                self.push_part(Part::Set(set));
            } else {
                return self.fail(format!(
                    "bad alias annotation: expected an alias set name or '*', found {}",
                    self.c.found()
                ));
            }
            self.c.skip_ws();
            if !self.c.eat(b'|') {
                let start = u32::try_from(first).unwrap_or(u32::MAX);
                let len = u32::try_from(self.b.parts.len() - first).unwrap_or(u32::MAX);
                return Ok((start, len));
            }
        }
    }

    fn default_value(&mut self, ty: TyRef) -> PResult<DefaultAt> {
        let start = self.c.pos;
        let literal = self.literal(0, self.takes_dtype_names(ty))?;
        let text = self.c.slice(start, self.c.pos);
        match self.coerce(ty, literal) {
            Ok(value) => Ok(DefaultAt {
                text: self.span_from(start),
                value,
            }),
            Err(Mismatch::Type) => Err(fault(
                start,
                format!(
                    "default value {text} does not fit type '{}'",
                    self.owned_type(ty)
                ),
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

enum Mismatch {
    Type,
    TooLong(usize),
}
