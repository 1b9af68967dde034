//! A cursor over the schema's bytes and the token-level scanners the parser builds on.
//!
//! Schemas are ASCII apart from string literals, so the cursor works on bytes and only ever
//! stops on ASCII bytes or at the start of a character; that keeps every slice it hands out on a
//! character boundary without decoding UTF-8 on the hot path.

use std::borrow::Cow;

use crate::error::SchemaError;

/// A parse failure before it is dressed up as a [`SchemaError`]. Boxed, so that every
/// `PResult` on the success path is small: a `PResult<TyRef>` comes back in two registers
/// instead of through memory.
#[derive(Debug)]
pub(crate) struct Fault(Box<FaultAt>);

#[derive(Debug)]
struct FaultAt {
    pos: usize,
    message: Cow<'static, str>,
}

pub(crate) type PResult<T> = Result<T, Fault>;

#[cold]
pub(crate) fn fault(pos: usize, message: impl Into<Cow<'static, str>>) -> Fault {
    Fault(Box::new(FaultAt {
        pos,
        message: message.into(),
    }))
}

impl Fault {
    pub(crate) fn into_error(self, src: &str) -> SchemaError {
        let FaultAt { pos, message } = *self.0;
        SchemaError {
            message: message.into_owned(),
            column: column(src, pos),
            text: src.to_owned(),
        }
    }
}

/// The 1-based column, in characters, of byte offset `pos`.
pub(crate) fn column(src: &str, pos: usize) -> usize {
    let mut pos = pos.min(src.len());
    while !src.is_char_boundary(pos) {
        pos -= 1;
    }
    src[..pos].chars().count() + 1
}

/// Identifier bytes by table: names make up most of a schema, and a lookup beats the range
/// tests on every byte. Bit 0: may start an identifier; bit 1: may continue one.
const IDENT_CLASS: [u8; 256] = {
    let mut table = [0; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphabetic() || c == b'_' {
            table[b] = START | CONTINUE;
        } else if c.is_ascii_digit() {
            table[b] = CONTINUE;
        }
        b += 1;
    }
    table
};
const START: u8 = 1;
const CONTINUE: u8 = 2;

#[inline]
pub(crate) fn is_ident_start(b: u8) -> bool {
    IDENT_CLASS[b as usize] & START != 0
}

#[inline]
pub(crate) fn is_ident_continue(b: u8) -> bool {
    IDENT_CLASS[b as usize] & CONTINUE != 0
}

/// A number's text and whether it is written as a float.
pub(crate) struct NumberToken<'a> {
    pub(crate) text: &'a str,
    pub(crate) is_float: bool,
}

pub(crate) struct Cursor<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(src: &'a str) -> Self {
        Cursor {
            src,
            bytes: src.as_bytes(),
            pos: 0,
        }
    }

    /// The whole text.
    pub(crate) fn src(&self) -> &'a str {
        self.src
    }

    #[inline]
    pub(crate) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    pub(crate) fn slice(&self, start: usize, end: usize) -> &'a str {
        &self.src[start..end]
    }

    pub(crate) fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    pub(crate) fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    #[inline]
    pub(crate) fn eat_str(&mut self, s: &str) -> bool {
        if self.looking_at(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    #[inline]
    pub(crate) fn looking_at(&self, s: &str) -> bool {
        // Most probes fail on the first byte; checking it alone avoids a memcmp call.
        let want = s.as_bytes();
        self.peek() == want.first().copied() && self.rest().starts_with(want)
    }

    fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }

    /// `[A-Za-z_][A-Za-z0-9_]*`.
    pub(crate) fn ident(&mut self) -> Option<&'a str> {
        let start = self.pos;
        self.ident_bytes()?;
        Some(self.slice(start, self.pos))
    }

    /// [`ident`](Self::ident) as bytes: the parser's hot paths only compare names or keep
    /// their spans, and a byte slice needs none of the character-boundary checks of a `&str`.
    #[inline]
    pub(crate) fn ident_bytes(&mut self) -> Option<&'a [u8]> {
        let start = self.pos;
        let bytes = self.bytes;
        match bytes.get(start) {
            Some(&b) if is_ident_start(b) => {}
            _ => return None,
        }
        let mut end = start + 1;
        while let Some(&b) = bytes.get(end) {
            if !is_ident_continue(b) {
                break;
            }
            end += 1;
        }
        self.pos = end;
        bytes.get(start..end)
    }

    /// An identifier with dotted continuations, as class types are written
    /// (`__torch__.torch.classes.quantized.Conv2dPackedParamsBase`).
    #[inline]
    pub(crate) fn qualified_ident(&mut self) -> Option<&'a [u8]> {
        let start = self.pos;
        self.ident_bytes()?;
        while self.peek() == Some(b'.')
            && self
                .bytes
                .get(self.pos + 1)
                .is_some_and(|&b| is_ident_start(b))
        {
            self.pos += 1;
            self.ident_bytes();
        }
        self.bytes.get(start..self.pos)
    }

    /// What sits at the cursor, for messages: `'x'` or `end of input`.
    pub(crate) fn found(&self) -> String {
        match self
            .src
            .get(self.pos..)
            .and_then(|rest| rest.chars().next())
        {
            Some(c) => format!("'{c}'"),
            None => "end of input".to_owned(),
        }
    }

    /// `-? (digits (. digits*)? | . digits) ([eE] [+-]? digits)?`, as PyTorch prints numbers
    /// (`1`, `-1`, `1.`, `0.5`, `1e-08`).
    pub(crate) fn number(&mut self) -> PResult<NumberToken<'a>> {
        let start = self.pos;
        self.eat(b'-');
        let int_digits = self.digits();
        let mut is_float = false;
        let mut frac_digits = 0;
        if self.eat(b'.') {
            is_float = true;
            frac_digits = self.digits();
        }
        if int_digits + frac_digits == 0 {
            return Err(fault(start, "bad number: expected a digit"));
        }
        if let Some(b'e' | b'E') = self.peek() {
            is_float = true;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(fault(
                    self.pos,
                    "bad number: expected the exponent's digits",
                ));
            }
        }
        if self
            .peek()
            .is_some_and(|b| is_ident_continue(b) || b == b'.')
        {
            return Err(fault(start, "bad number"));
        }
        Ok(NumberToken {
            text: &self.src[start..self.pos],
            is_float,
        })
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// A string literal in `'` or `"` quotes; returns its value with escapes resolved. The
    /// cursor must be on the opening quote.
    pub(crate) fn string(&mut self) -> PResult<Cow<'a, str>> {
        let open = self.pos;
        let Some(quote @ (b'"' | b'\'')) = self.peek() else {
            return Err(fault(open, "expected a string literal"));
        };
        self.pos += 1;
        let body = self.pos;
        // Most strings have no escape, and then the value is a slice of the input.
        loop {
            match self.peek() {
                None => return Err(fault(open, "unterminated string literal")),
                Some(b) if b == quote => {
                    self.pos += 1;
                    return Ok(Cow::Borrowed(&self.src[body..self.pos - 1]));
                }
                Some(b'\\') => break,
                Some(_) => self.pos += 1,
            }
        }
        let mut value = String::from(&self.src[body..self.pos]);
        loop {
            let Some(b) = self.peek() else {
                return Err(fault(open, "unterminated string literal"));
            };
            if b == quote {
                self.pos += 1;
                return Ok(Cow::Owned(value));
            }
            if b == b'\\' {
                let escape = self.pos;
                self.pos += 1;
                // Up to three octal digits, as C (and c10's printer, for unprintable bytes).
                let digits = self.src.as_bytes()[self.pos..]
                    .iter()
                    .take(3)
                    .take_while(|d| (b'0'..=b'7').contains(d))
                    .count();
                if digits > 0 {
                    let code =
                        u32::from_str_radix(&self.src[self.pos..self.pos + digits], 8).unwrap_or(0);
                    self.pos += digits;
                    value.push(char::from_u32(code).unwrap_or('\0'));
                    continue;
                }
                let resolved = match self.peek() {
                    Some(b'n') => '\n',
                    Some(b't') => '\t',
                    Some(b'r') => '\r',
                    Some(b'f') => '\x0c',
                    Some(b'v') => '\x0b',
                    Some(b'a') => '\x07',
                    Some(b'b') => '\x08',
                    Some(b'\\') => '\\',
                    Some(b'\'') => '\'',
                    Some(b'"') => '"',
                    None => return Err(fault(open, "unterminated string literal")),
                    Some(_) => {
                        self.pos = escape + 1;
                        return Err(fault(
                            escape,
                            format!("unknown escape '\\{}' in string", self.found_char()),
                        ));
                    }
                };
                self.pos += 1;
                value.push(resolved);
            } else {
                // Copy the whole run up to the next quote or backslash, which keeps
                // multi-byte characters intact.
                let run = self.pos;
                while self.peek().is_some_and(|c| c != quote && c != b'\\') {
                    self.pos += 1;
                }
                value.push_str(&self.src[run..self.pos]);
            }
        }
    }

    fn found_char(&self) -> char {
        self.src
            .get(self.pos..)
            .and_then(|rest| rest.chars().next())
            .unwrap_or(' ')
    }
}

/// Finds the first unbalanced bracket, outside string literals. Only run once a parse has
/// failed, to replace a confusing "expected ..." with the likelier cause; a successful parse
/// never pays for it.
pub(crate) fn unbalanced_bracket(src: &str) -> Option<Fault> {
    let bytes = src.as_bytes();
    let mut open: Vec<(u8, usize)> = Vec::new();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' | b'\'' => {
                let mut j = i + 1;
                loop {
                    match bytes.get(j) {
                        // An unterminated string is its own error; the parser reports it.
                        None => return None,
                        Some(b'\\') => j += 2,
                        Some(&c) if c == b => break,
                        Some(_) => j += 1,
                    }
                }
                i = j;
            }
            b'(' | b'[' => open.push((b, i)),
            b')' | b']' => {
                let want = if b == b')' { b'(' } else { b'[' };
                match open.pop() {
                    Some((o, _)) if o == want => {}
                    Some((o, at)) => {
                        return Some(fault(
                            i,
                            format!(
                                "unbalanced brackets: '{}' does not close the '{}' at column {}",
                                b as char,
                                o as char,
                                column(src, at)
                            ),
                        ))
                    }
                    None => {
                        return Some(fault(
                            i,
                            format!("unbalanced brackets: '{}' closes nothing", b as char),
                        ))
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    open.pop().map(|(o, at)| {
        fault(
            at,
            format!("unbalanced brackets: '{}' is never closed", o as char),
        )
    })
}
