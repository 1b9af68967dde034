//! Shared by the schema tests: the reference data and a JSON reader just big enough for
//! torch_schemas.jsonl (the crate takes no serde_json dependency for one test).
#![allow(dead_code)]

use std::collections::BTreeMap;

pub const SCHEMAS_TXT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/python/boxfall/data/torch_schemas.txt"
);
pub const SCHEMAS_JSONL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/torch_schemas.jsonl"
);

pub const NATIVE_FUNCTIONS_JSONL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/native_functions.jsonl"
);

/// The schema lines of torch_schemas.txt, comments left out.
pub fn schema_lines() -> Vec<String> {
    let text = std::fs::read_to_string(SCHEMAS_TXT)
        .unwrap_or_else(|e| panic!("cannot read {SCHEMAS_TXT}: {e}"));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(f64),
    Str(String),
    Array(Vec<Json>),
    Object(BTreeMap<String, Json>),
}

impl Json {
    pub fn get(&self, key: &str) -> &Json {
        match self {
            Json::Object(map) => map
                .get(key)
                .unwrap_or_else(|| panic!("no key {key:?} in {self:?}")),
            _ => panic!("not an object: {self:?}"),
        }
    }

    pub fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            _ => panic!("not a string: {self:?}"),
        }
    }

    pub fn bool(&self) -> bool {
        match self {
            Json::Bool(b) => *b,
            _ => panic!("not a bool: {self:?}"),
        }
    }

    pub fn array(&self) -> &[Json] {
        match self {
            Json::Array(items) => items,
            _ => panic!("not an array: {self:?}"),
        }
    }

    pub fn strings(&self) -> Vec<String> {
        self.array().iter().map(|j| j.str().to_owned()).collect()
    }
}

/// Parses one JSON document; panics with the offset on malformed input (test data only).
pub fn parse_json(text: &str) -> Json {
    let mut r = Reader {
        chars: text.chars().collect(),
        pos: 0,
    };
    let value = r.value();
    r.ws();
    assert_eq!(r.pos, r.chars.len(), "trailing data in JSON");
    value
}

struct Reader {
    chars: Vec<char>,
    pos: usize,
}

impl Reader {
    fn peek(&self) -> char {
        *self.chars.get(self.pos).expect("unexpected end of JSON")
    }

    fn next(&mut self) -> char {
        let c = self.peek();
        self.pos += 1;
        c
    }

    fn ws(&mut self) {
        while self.chars.get(self.pos).is_some_and(|c| c.is_whitespace()) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, word: &str) {
        for want in word.chars() {
            assert_eq!(self.next(), want, "bad JSON at {}", self.pos);
        }
    }

    fn value(&mut self) -> Json {
        self.ws();
        match self.peek() {
            '{' => {
                self.pos += 1;
                let mut map = BTreeMap::new();
                self.ws();
                if self.peek() == '}' {
                    self.pos += 1;
                    return Json::Object(map);
                }
                loop {
                    self.ws();
                    let key = self.string();
                    self.ws();
                    self.expect(":");
                    let value = self.value();
                    map.insert(key, value);
                    self.ws();
                    match self.next() {
                        ',' => continue,
                        '}' => return Json::Object(map),
                        c => panic!("bad JSON object at {}: {c:?}", self.pos),
                    }
                }
            }
            '[' => {
                self.pos += 1;
                let mut items = Vec::new();
                self.ws();
                if self.peek() == ']' {
                    self.pos += 1;
                    return Json::Array(items);
                }
                loop {
                    items.push(self.value());
                    self.ws();
                    match self.next() {
                        ',' => continue,
                        ']' => return Json::Array(items),
                        c => panic!("bad JSON array at {}: {c:?}", self.pos),
                    }
                }
            }
            '"' => Json::Str(self.string()),
            't' => {
                self.expect("true");
                Json::Bool(true)
            }
            'f' => {
                self.expect("false");
                Json::Bool(false)
            }
            'n' => {
                self.expect("null");
                Json::Null
            }
            _ => {
                let start = self.pos;
                while self
                    .chars
                    .get(self.pos)
                    .is_some_and(|c| c.is_ascii_digit() || "+-.eE".contains(*c))
                {
                    self.pos += 1;
                }
                let text: String = self.chars[start..self.pos].iter().collect();
                Json::Number(
                    text.parse()
                        .unwrap_or_else(|_| panic!("bad number {text:?}")),
                )
            }
        }
    }

    fn string(&mut self) -> String {
        self.expect("\"");
        let mut out = String::new();
        loop {
            match self.next() {
                '"' => return out,
                '\\' => match self.next() {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'u' => {
                        let hex: String = (0..4).map(|_| self.next()).collect();
                        let unit = u32::from_str_radix(&hex, 16).expect("bad \\u escape");
                        // The data is ASCII; a surrogate pair would need joining, which it
                        // never does.
                        out.push(char::from_u32(unit).expect("surrogate in \\u escape"));
                    }
                    c => out.push(c),
                },
                c => out.push(c),
            }
        }
    }
}
