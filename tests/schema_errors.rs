//! Each kind of bad schema: the message says what is wrong and the column points at it.

use boxfall::{FunctionSchema, SchemaError};

#[track_caller]
fn fails(text: &str, column: usize, message: &str) -> SchemaError {
    let err = match FunctionSchema::parse(text) {
        Ok(s) => panic!("{text:?} parsed, as {s}"),
        Err(e) => e,
    };
    assert!(
        err.message.contains(message),
        "{text:?}: message {:?} lacks {message:?}",
        err.message
    );
    assert_eq!(err.column, column, "{text:?}: {err}");
    assert_eq!(err.text, text);
    err
}

#[test]
fn empty_input() {
    fails("", 1, "empty schema");
    fails("   \t", 1, "empty schema");
}

#[test]
fn missing_namespace() {
    fails(
        "f(Tensor x) -> Tensor",
        1,
        "missing namespace: expected 'namespace::f'",
    );
    fails("add.Tensor(Tensor x) -> Tensor", 1, "missing namespace");
    fails("::f(Tensor x) -> Tensor", 1, "missing namespace");
    fails(
        "demo:f(Tensor x) -> Tensor",
        5,
        "unexpected ':' in the operator name",
    );
    fails(
        "demo::(Tensor x) -> Tensor",
        7,
        "expected the operator's name after '::'",
    );
    fails(
        "demo::f.(Tensor x) -> Tensor",
        9,
        "expected an overload name after '.'",
    );
}

#[test]
fn missing_arrow() {
    fails("demo::f(Tensor x)", 18, "missing '->'");
    fails("demo::f(Tensor x) Tensor", 19, "missing '->'");
    fails("demo::f(Tensor x) => Tensor", 19, "missing '->'");
    fails(
        "demo::f(Tensor x) ->",
        21,
        "expected the returns after '->'",
    );
}

#[test]
fn unbalanced_brackets() {
    fails(
        "demo::f(Tensor x -> Tensor",
        8,
        "unbalanced brackets: '(' is never closed",
    );
    fails(
        "demo::f(Tensor x)) -> Tensor",
        18,
        "unbalanced brackets: ')' closes nothing",
    );
    fails(
        "demo::f(Tensor[ x) -> Tensor",
        18,
        "unbalanced brackets: ')' does not close the '[' at column 15",
    );
    // The annotation's "(" is closed by the one meant for the argument list.
    fails("demo::f(Tensor(a! x) -> Tensor", 8, "unbalanced brackets");
    fails(
        "demo::f(Tensor x) -> (Tensor, Tensor",
        22,
        "unbalanced brackets",
    );
    // Brackets inside a string default do not count.
    assert!(FunctionSchema::parse("demo::f(str s=\"(]\") -> ()").is_ok());
}

#[test]
fn duplicate_argument_names() {
    fails(
        "demo::f(Tensor x, Tensor x) -> Tensor",
        26,
        "duplicate argument name 'x'",
    );
    fails(
        "demo::f(Tensor self, *, int dim, Tensor(a!) self) -> Tensor",
        45,
        "duplicate argument name 'self'",
    );
}

#[test]
fn duplicates_among_many_arguments() {
    // Up to 64 arguments a filter and a scan on its hits find them, past that a set; both must
    // catch them (40 names fill the filter's 64 bits enough for hits without duplicates too).
    let names: Vec<String> = (0..100).map(|i| format!("int a{i}")).collect();
    let ok = format!("demo::f({}) -> ()", names.join(", "));
    assert_eq!(FunctionSchema::parse(&ok).unwrap().arguments.len(), 100);
    for dup in [3, 17, 30, 63, 64, 99] {
        let mut names = names[..40.max(dup + 1).min(names.len())].to_vec();
        names.push(format!("int a{dup}"));
        let text = format!("demo::f({}) -> ()", names.join(", "));
        let column = text.rfind(&format!("a{dup}")).unwrap() + 1;
        fails(&text, column, &format!("duplicate argument name 'a{dup}'"));
    }
    for dup in [3, 17, 30, 70] {
        let mut names = names.clone();
        names.push(format!("int a{dup}"));
        let text = format!("demo::f({}) -> ()", names.join(", "));
        let column = text.rfind(&format!("a{dup}")).unwrap() + 1;
        fails(&text, column, &format!("duplicate argument name 'a{dup}'"));
    }
    // Thousands of arguments parse in linear time.
    let many: Vec<String> = (0..20_000).map(|i| format!("int a{i}")).collect();
    let text = format!("demo::f({}) -> ()", many.join(", "));
    assert_eq!(
        FunctionSchema::parse(&text).unwrap().arguments.len(),
        20_000
    );
}

#[test]
fn unknown_capitalised_types() {
    let err = fails("demo::f(Tensr x) -> Tensor", 9, "unknown type 'Tensr'");
    assert!(err.to_string().contains("unknown type 'Tensr'"));
    fails("demo::f(Tensor x) -> Tensr", 22, "unknown type 'Tensr'");
    fails("demo::f(Dict(str, Foo) x) -> ()", 19, "unknown type 'Foo'");
    fails("demo::f(int x, _t y) -> ()", 16, "unknown type '_t'");
    // A lowercase unknown name is a type variable, a dotted one a class.
    let s = FunctionSchema::parse("demo::f(tVal x, __torch__.a.B y) -> t").unwrap();
    assert_eq!(s.arguments[0].type_str(), "tVal");
    assert_eq!(s.arguments[1].type_str(), "__torch__.a.B");
}

#[test]
fn bad_alias_annotations() {
    fails(
        "demo::f(Tensor(!) x) -> Tensor",
        16,
        "bad alias annotation: expected an alias set name or '*'",
    );
    fails(
        "demo::f(Tensor() x) -> Tensor",
        16,
        "bad alias annotation: expected an alias set name",
    );
    fails(
        "demo::f(Tensor(a?) x) -> Tensor",
        17,
        "bad alias annotation: expected '|', '!', '->' or ')'",
    );
    fails(
        "demo::f(Tensor(a|) x) -> Tensor",
        18,
        "bad alias annotation: expected an alias set name",
    );
    fails(
        "demo::f(Tensor(a -> ) x) -> Tensor",
        21,
        "bad alias annotation: expected an alias set name",
    );
    fails(
        "demo::f(Tensor(a!!) x) -> Tensor",
        18,
        "bad alias annotation",
    );
    fails(
        "demo::f(Tensor?(a) x) -> Tensor",
        16,
        "bad alias annotation: it goes right after the type",
    );
    fails(
        "demo::f(Tensor(a)(b) x) -> Tensor",
        18,
        "bad alias annotation",
    );
    fails(
        "demo::f(Dict(str, Tensor(a)) x) -> Tensor",
        25,
        "bad alias annotation: only an argument's own type or its list elements",
    );
    fails(
        "demo::f((Tensor(a), int) x) -> Tensor",
        16,
        "bad alias annotation: only",
    );
}

#[test]
fn defaults_of_the_wrong_type() {
    fails(
        "demo::f(int x=\"a\") -> int",
        15,
        "default value \"a\" does not fit type 'int'",
    );
    fails(
        "demo::f(bool b=3) -> int",
        16,
        "default value 3 does not fit type 'bool'",
    );
    fails(
        "demo::f(int x=None) -> ()",
        15,
        "default value None does not fit type 'int'",
    );
    fails(
        "demo::f(int x=1.5) -> ()",
        15,
        "default value 1.5 does not fit type 'int'",
    );
    fails(
        "demo::f(float x=True) -> ()",
        17,
        "does not fit type 'float'",
    );
    fails(
        "demo::f(Tensor x=1) -> ()",
        18,
        "does not fit type 'Tensor'",
    );
    fails(
        "demo::f(int[] x=[1, \"a\"]) -> ()",
        17,
        "does not fit type 'int[]'",
    );
    fails("demo::f(int[] x=1) -> ()", 17, "does not fit type 'int[]'");
    fails("demo::f(str s=1) -> ()", 15, "does not fit type 'str'");
    fails(
        "demo::f(int[99999] k=1) -> ()",
        22,
        "would expand to 99999 elements",
    );
}

#[test]
fn bad_default_literals() {
    fails("demo::f(int x=abc) -> ()", 15, "bad default value 'abc'");
    fails(
        "demo::f(int x=) -> ()",
        15,
        "expected a default value, found ')'",
    );
    fails("demo::f(int x=1.5.5) -> ()", 15, "bad number");
    fails(
        "demo::f(float x=1e) -> ()",
        19,
        "bad number: expected the exponent's digits",
    );
    fails(
        "demo::f(int x=99999999999999999999) -> ()",
        15,
        "does not fit in 64 bits",
    );
    fails("demo::f(str s=\"a\\q\") -> ()", 17, "unknown escape '\\q'");
    fails(
        "demo::f(str s=\"abc) -> ()",
        15,
        "unterminated string literal",
    );
    fails(
        "demo::f(int[] x=[1 2]) -> ()",
        20,
        "expected ',' or ']' in a list",
    );
}

#[test]
fn trailing_text() {
    fails(
        "demo::f(Tensor x) -> Tensor foo bar",
        33,
        "unexpected text after the returns: 'b'",
    );
    fails("demo::f() -> () x", 17, "unexpected text after the returns");
    fails(
        "demo::f() -> Tensor=1",
        20,
        "unexpected text after the returns: '='",
    );
}

#[test]
fn argument_list_structure() {
    fails(
        "demo::f(*) -> ()",
        10,
        "expected a keyword-only argument after '*'",
    );
    fails(
        "demo::f(*, ...) -> ()",
        12,
        "expected a keyword-only argument after '*'",
    );
    fails(
        "demo::f(*, int a, *, int b) -> ()",
        19,
        "'*' may appear only once",
    );
    fails(
        "demo::f(..., Tensor x) -> ()",
        12,
        "'...' must be the last argument",
    );
    fails(
        "demo::f(Tensor) -> ()",
        15,
        "expected an argument name, found ')'",
    );
    fails("demo::f(Tensor x,) -> ()", 18, "expected a type, found ')'");
    fails(
        "demo::f(Tensor x y) -> ()",
        18,
        "expected ',' or ')' after an argument",
    );
    fails(
        "demo::f() -> (..., Tensor)",
        18,
        "'...' must be the last return",
    );
    fails(
        "demo::f(Dict(str) x) -> ()",
        17,
        "expected ',' in 'Dict(...)' (2 type parameters)",
    );
    fails(
        "demo::f(int[x] y) -> ()",
        13,
        "expected ']' or a list size after '['",
    );
}

#[test]
fn nesting_is_capped() {
    let deep_list = format!("demo::f(Tensor{} x) -> ()", "[]".repeat(100));
    fails(
        &deep_list,
        "demo::f(Tensor".len() + 2 * 64 + 1,
        "nested too deeply",
    );
    let deep_tuple = format!("demo::f({}int{} x) -> ()", "(".repeat(100), ")".repeat(100));
    fails(&deep_tuple, "demo::f(".len() + 65, "nested too deeply");
    let deep_literal = format!(
        "demo::f(int[] x={}) -> ()",
        "[".repeat(100) + &"]".repeat(100)
    );
    fails(
        &deep_literal,
        "demo::f(int[] x=".len() + 65,
        "nested too deeply",
    );
    // Sixty-four levels are fine.
    let ok = format!("demo::f(Tensor{} x) -> ()", "[]".repeat(63));
    assert!(FunctionSchema::parse(&ok).is_ok());
}

#[test]
fn columns_count_characters_not_bytes() {
    fails(
        "demo::f(str s=\"é\", Tensr x) -> ()",
        20,
        "unknown type 'Tensr'",
    );
    fails("demo::f(é x) -> ()", 9, "expected a type, found 'é'");
    fails(
        "démo::f(Tensor x) -> ()",
        2,
        "unexpected 'é' in the operator name",
    );
}

#[test]
fn display_shows_message_column_and_caret() {
    let err = FunctionSchema::parse("demo::f(Tensr x) -> Tensor").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown type 'Tensr' at column 9:\n  demo::f(Tensr x) -> Tensor\n          ^"
    );
}
