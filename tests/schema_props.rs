//! Properties of the parser and printer, and the precomputed facts on hand-written schemas.

mod schema_support;

use std::sync::OnceLock;

use boxfall::schema::{
    AliasInfo, ArgKind, Argument, DefaultValue, FunctionSchema, Literal, ReturnFacts, Type,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// (a) No input makes the parser panic.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_strings_never_panic(text in any::<String>()) {
        let _ = FunctionSchema::parse(&text);
    }

    /// Random text over the schema alphabet reaches far deeper into the parser than random
    /// Unicode does.
    #[test]
    fn schema_like_strings_never_panic(
        text in "[a-zA-Z_0-9:().,\\[\\]?!*|>= \"'\\\\-]{0,80}",
        prefix in prop::sample::select(vec!["", "demo::f(", "demo::f(Tensor", "demo::f() -> ", "aten::x.y(int a="]),
    ) {
        let text = format!("{prefix}{text}");
        if let Ok(schema) = FunctionSchema::parse(&text) {
            let printed = schema.to_string();
            let reparsed = FunctionSchema::parse(&printed);
            prop_assert_eq!(reparsed.as_ref(), Ok(&schema), "printed as {}", printed);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (b) Printing then parsing gives the schema back.

fn leaf_type() -> impl Strategy<Value = Type> {
    let named = vec![
        Type::Tensor,
        Type::Int,
        Type::Float,
        Type::Bool,
        Type::Str,
        Type::Complex,
        Type::Scalar,
        Type::SymInt,
        Type::SymFloat,
        Type::SymBool,
        Type::ScalarType,
        Type::Layout,
        Type::Device,
        Type::MemoryFormat,
        Type::Generator,
        Type::Storage,
        Type::Stream,
        Type::Dimname,
        Type::QScheme,
        Type::Any,
        Type::AnyClassType,
        Type::AnyEnumType,
        Type::NoneType,
        Type::Var("t".into()),
        Type::Var("tVal".into()),
        Type::Class("__torch__.torch.classes.quantized.Conv2dPackedParamsBase".into()),
        Type::Class("__torch__.a.B".into()),
    ];
    prop::sample::select(named)
}

fn any_type() -> impl Strategy<Value = Type> {
    leaf_type().prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|t| Type::Optional(Box::new(t))),
            (inner.clone(), prop::option::of(0usize..5)).prop_map(|(t, size)| Type::List {
                elem: Box::new(t),
                size
            }),
            prop::collection::vec(inner.clone(), 0..3).prop_map(Type::Tuple),
            (inner.clone(), inner.clone()).prop_map(|(k, v)| Type::Dict(Box::new(k), Box::new(v))),
            inner.clone().prop_map(|t| Type::Future(Box::new(t))),
            inner.clone().prop_map(|t| Type::Await(Box::new(t))),
            inner.prop_map(|t| Type::RRef(Box::new(t))),
        ]
    })
}

fn alias_sets() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop::sample::select(vec!["a", "b", "c", "*"]).prop_map(String::from),
        1..3,
    )
}

fn alias() -> impl Strategy<Value = AliasInfo> {
    (alias_sets(), any::<bool>(), prop::option::of(alias_sets())).prop_map(
        |(before, is_write, after)| AliasInfo {
            after: after.unwrap_or_else(|| before.clone()),
            before,
            is_write,
            contained: vec![],
        },
    )
}

#[derive(Clone, Debug)]
enum Suffix {
    Optional,
    List(Option<usize>, Option<AliasInfo>),
}

/// A type with annotations where the grammar allows them, folded the way the contract says:
/// an annotation before a list suffix belongs to the elements, and the list's annotation
/// (empty if none is written, a write if the element's is) contains it.
fn annotated_type() -> impl Strategy<Value = (Type, Option<AliasInfo>)> {
    let suffix = prop_oneof![
        Just(Suffix::Optional),
        (prop::option::of(0usize..4), prop::option::of(alias()))
            .prop_map(|(size, own)| Suffix::List(size, own)),
    ];
    (
        any_type(),
        prop::option::of(alias()),
        prop::collection::vec(suffix, 0..3),
    )
        .prop_map(|(core, base_alias, suffixes)| {
            let mut ty = core;
            let mut alias = base_alias;
            for s in suffixes {
                match s {
                    Suffix::Optional => ty = Type::Optional(Box::new(ty)),
                    Suffix::List(size, own) => {
                        ty = Type::List {
                            elem: Box::new(ty),
                            size,
                        };
                        alias = match (alias, own) {
                            (None, own) => own,
                            (Some(elem), Some(mut own)) => {
                                own.contained.push(elem);
                                Some(own)
                            }
                            (Some(elem), None) => Some(AliasInfo {
                                before: vec![],
                                after: vec![],
                                is_write: elem.is_write,
                                contained: vec![elem],
                            }),
                        };
                    }
                }
            }
            (ty, alias)
        })
}

fn quoted(raw: &str, quote: char) -> String {
    let mut text = String::from(quote);
    for c in raw.chars() {
        match c {
            '\\' => text.push_str("\\\\"),
            '\n' => text.push_str("\\n"),
            '\t' => text.push_str("\\t"),
            c if c == quote => {
                text.push('\\');
                text.push(c);
            }
            c => text.push(c),
        }
    }
    text.push(quote);
    text
}

type Lit = (String, Literal);

fn int_literal() -> BoxedStrategy<Lit> {
    any::<i64>()
        .prop_map(|i| (i.to_string(), Literal::Int(i)))
        .boxed()
}

fn float_literal() -> BoxedStrategy<Lit> {
    prop_oneof![
        any::<i32>().prop_map(|i| (i.to_string(), Literal::Float(f64::from(i)))),
        (prop::num::f64::NORMAL | prop::num::f64::ZERO | prop::num::f64::SUBNORMAL)
            .prop_map(|f| (format!("{f:?}"), Literal::Float(f))),
        Just(("inf".to_owned(), Literal::Float(f64::INFINITY))),
        Just(("-inf".to_owned(), Literal::Float(f64::NEG_INFINITY))),
        Just(("1.".to_owned(), Literal::Float(1.0))),
        Just(("1e-05".to_owned(), Literal::Float(1e-05))),
    ]
    .boxed()
}

fn bool_literal() -> BoxedStrategy<Lit> {
    any::<bool>()
        .prop_map(|b| {
            let text = if b { "True" } else { "False" };
            (text.to_owned(), Literal::Bool(b))
        })
        .boxed()
}

fn str_literal() -> BoxedStrategy<Lit> {
    (
        "[a-z \"'\\\\\n\té(\\[]{0,6}",
        prop::sample::select(vec!['"', '\'']),
    )
        .prop_map(|(raw, q)| (quoted(&raw, q), Literal::Str(raw)))
        .boxed()
}

/// A default that fits `ty` and the value the parser gives it, or `None` for a type that
/// takes no default.
fn literal_for(ty: &Type) -> Option<BoxedStrategy<Lit>> {
    Some(match ty {
        Type::Optional(inner) => {
            let none = Just(("None".to_owned(), Literal::None));
            match literal_for(inner) {
                Some(inner) => prop_oneof![none, inner].boxed(),
                None => none.boxed(),
            }
        }
        Type::NoneType => Just(("None".to_owned(), Literal::None)).boxed(),
        Type::Int
        | Type::SymInt
        | Type::ScalarType
        | Type::Layout
        | Type::MemoryFormat
        | Type::QScheme => int_literal(),
        Type::Float | Type::SymFloat | Type::Complex => float_literal(),
        Type::Bool | Type::SymBool => bool_literal(),
        Type::Scalar => prop_oneof![
            int_literal(),
            float_literal().prop_filter("ints print as ints", |(t, _)| {
                t.contains(['.', 'e', 'i'])
            }),
            bool_literal()
        ]
        .boxed(),
        Type::Str | Type::Device | Type::Dimname => str_literal(),
        Type::Any | Type::Var(_) => prop_oneof![
            Just(("None".to_owned(), Literal::None)),
            int_literal(),
            str_literal()
        ]
        .boxed(),
        Type::List { elem, size } => {
            let empty = Just(("[]".to_owned(), Literal::List(vec![])));
            let mut options = vec![empty.boxed()];
            if let Some(item) = literal_for(elem) {
                let items = (
                    prop::collection::vec(item, 1..4),
                    prop::sample::select(vec![", ", ","]),
                )
                    .prop_map(|(items, sep)| {
                        let texts: Vec<&str> = items.iter().map(|(t, _)| t.as_str()).collect();
                        let text = format!("[{}]", texts.join(sep));
                        (
                            text,
                            Literal::List(items.into_iter().map(|(_, v)| v).collect()),
                        )
                    });
                options.push(items.boxed());
            }
            if let (Type::Int | Type::SymInt, Some(n)) = (&**elem, size) {
                let n = *n;
                options.push(
                    any::<i64>()
                        .prop_map(move |i| (i.to_string(), Literal::List(vec![Literal::Int(i); n])))
                        .boxed(),
                );
            }
            prop::strategy::Union::new(options).boxed()
        }
        _ => return None,
    })
}

fn argument(kwarg_only: bool) -> impl Strategy<Value = Argument> {
    (annotated_type(), "[a-z][a-z0-9_]{0,5}").prop_flat_map(move |((ty, alias), name)| {
        let default = match literal_for(&ty) {
            Some(lit) => prop::option::of(lit).boxed(),
            None => Just(None).boxed(),
        };
        default.prop_map(move |default| Argument {
            name: name.clone(),
            ty: ty.clone(),
            default: default.map(|(text, value)| DefaultValue { text, value }),
            kwarg_only,
            alias: alias.clone(),
        })
    })
}

fn ret() -> impl Strategy<Value = Argument> {
    (annotated_type(), prop::option::of("[a-z][a-z0-9_]{0,5}")).prop_map(|((ty, alias), name)| {
        Argument {
            name: name.unwrap_or_default(),
            ty,
            default: None,
            kwarg_only: false,
            alias,
        }
    })
}

fn schema() -> impl Strategy<Value = FunctionSchema> {
    (
        prop::sample::select(vec!["aten", "demo", "_c10d_functional", "prim"]),
        "[a-z_][a-z0-9_]{0,8}",
        prop::option::of("[A-Za-z_][A-Za-z0-9_]{0,6}"),
        prop::collection::vec(argument(false), 0..5),
        prop::collection::vec(argument(true), 0..3),
        prop::collection::vec(ret(), 0..3),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(ns, base, overload, positional, kwarg_only, returns, is_vararg, is_varret)| {
                let mut arguments: Vec<Argument> =
                    positional.into_iter().chain(kwarg_only).collect();
                // Argument names must differ; a numeric suffix keeps the generated ones apart.
                for (i, arg) in arguments.iter_mut().enumerate() {
                    arg.name = format!("{}_{i}", arg.name);
                }
                FunctionSchema {
                    name: format!("{ns}::{base}"),
                    overload_name: overload.unwrap_or_default(),
                    arguments,
                    returns,
                    is_vararg,
                    is_varret,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn printed_schemas_parse_back_equal(s in schema()) {
        let text = s.to_string();
        let parsed = FunctionSchema::parse(&text);
        prop_assert_eq!(parsed.as_ref(), Ok(&s), "printed as {}", text);
        prop_assert_eq!(parsed.map(|p| p.to_string()).ok(), Some(text));
    }
}

fn data_lines() -> &'static [String] {
    static LINES: OnceLock<Vec<String>> = OnceLock::new();
    LINES.get_or_init(schema_support::schema_lines)
}

#[derive(Clone, Debug)]
enum Edit {
    Delete(usize),
    Insert(usize, char),
    Duplicate(usize, usize),
    Swap(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let c = prop::sample::select(vec![
        '(', ')', '[', ']', ',', '?', '!', '*', '|', '=', ' ', '"', '\'', '\\', '.', '-', '>', ':',
        'a', 'T', '1', 'é',
    ]);
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        (any::<usize>(), c).prop_map(|(i, c)| Edit::Insert(i, c)),
        (any::<usize>(), 1usize..12).prop_map(|(i, n)| Edit::Duplicate(i, n)),
        any::<usize>().prop_map(Edit::Swap),
    ]
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return String::new();
    }
    let at = |i: usize| i % chars.len();
    match *edit {
        Edit::Delete(i) => {
            chars.remove(at(i));
        }
        Edit::Insert(i, c) => chars.insert(at(i), c),
        Edit::Duplicate(i, n) => {
            let start = at(i);
            let end = (start + n).min(chars.len());
            let copy: Vec<char> = chars[start..end].to_vec();
            chars.splice(end..end, copy);
        }
        Edit::Swap(i) => {
            let i = at(i);
            if i + 1 < chars.len() {
                chars.swap(i, i + 1);
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Real schemas with a few random edits: never a panic, and whatever still parses prints
    /// to text that parses to the same schema.
    #[test]
    fn mutated_torch_schemas_never_panic_and_round_trip(
        index in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let lines = data_lines();
        let mut text = index.get(lines).clone();
        for e in &edits {
            text = apply(&text, e);
        }
        if let Ok(schema) = FunctionSchema::parse(&text) {
            let printed = schema.to_string();
            let reparsed = FunctionSchema::parse(&printed);
            prop_assert_eq!(reparsed.as_ref(), Ok(&schema), "{} printed as {}", text, printed);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (c) The facts the dispatcher and the fallback read.

fn info(text: &str) -> boxfall::schema::SchemaInfo {
    FunctionSchema::parse(text)
        .unwrap_or_else(|e| panic!("{e}"))
        .info()
}

#[test]
fn in_place_operator() {
    let i =
        info("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)");
    let kinds: Vec<ArgKind> = i.args.iter().map(|a| a.kind).collect();
    assert_eq!(kinds, [ArgKind::Tensor, ArgKind::Tensor, ArgKind::Other]);
    let writes: Vec<bool> = i.args.iter().map(|a| a.is_write).collect();
    assert_eq!(writes, [true, false, false]);
    assert_eq!(i.args[0].alias_set.as_deref(), Some("a"));
    assert_eq!(i.args[1].alias_set, None);
    assert_eq!(
        i.returns,
        [ReturnFacts {
            kind: ArgKind::Tensor,
            is_write: true,
            aliases_arg: Some(0)
        }]
    );
    assert_eq!(i.tensor_args, [0, 1]);
    assert_eq!(i.device_arg, None);
    assert!(i.is_mutable);
    assert!(!i.has_view_returns);
}

#[test]
fn out_variant_with_two_outputs() {
    let i = info("aten::sort.values_stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False, Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!) values, Tensor(b!) indices)");
    assert_eq!(i.tensor_args, [0, 4, 5]);
    let writes: Vec<bool> = i.args.iter().map(|a| a.is_write).collect();
    assert_eq!(writes, [false, false, false, false, true, true]);
    assert_eq!(i.args[4].alias_set.as_deref(), Some("a"));
    assert_eq!(i.args[5].alias_set.as_deref(), Some("b"));
    let aliased: Vec<Option<usize>> = i.returns.iter().map(|r| r.aliases_arg).collect();
    assert_eq!(aliased, [Some(4), Some(5)]);
    assert!(i
        .returns
        .iter()
        .all(|r| r.is_write && r.kind == ArgKind::Tensor));
    assert!(i.is_mutable);
    assert!(!i.has_view_returns);
}

#[test]
fn view_operator() {
    let i = info("aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)");
    assert!(!i.is_mutable);
    assert!(i.has_view_returns);
    assert_eq!(i.returns[0].aliases_arg, Some(0));
    assert!(!i.returns[0].is_write);
    assert_eq!(i.args[1].kind, ArgKind::Other);

    // A view returned as a list's elements, from an argument whose set goes to the wildcard.
    let i = info("aten::chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]");
    assert_eq!(i.returns[0].kind, ArgKind::TensorList);
    assert_eq!(i.returns[0].aliases_arg, Some(0));
    assert!(i.has_view_returns);

    // The wildcard names no particular argument.
    let i = info("aten::__getitem__.Dict_str(Dict(str, t) self, str key) -> t(*)");
    assert_eq!(i.returns[0].aliases_arg, None);
    assert!(!i.has_view_returns);
}

#[test]
fn optional_tensor_lists() {
    let i = info("aten::index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor(a!)");
    let kinds: Vec<ArgKind> = i.args.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        [
            ArgKind::Tensor,
            ArgKind::OptionalTensorList,
            ArgKind::Tensor,
            ArgKind::Other
        ]
    );
    assert_eq!(i.tensor_args, [0, 1, 2]);

    // Optional lists keep the kind of their list.
    let i = info("demo::f(Tensor[]? a, Tensor?[]? b, Tensor[2] c, Tensor? d) -> ()");
    let kinds: Vec<ArgKind> = i.args.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        [
            ArgKind::TensorList,
            ArgKind::OptionalTensorList,
            ArgKind::TensorList,
            ArgKind::OptionalTensor
        ]
    );
    assert_eq!(i.tensor_args, [0, 1, 2, 3]);
}

#[test]
fn mutable_tensor_list_elements() {
    let i = info("aten::_foreach_add_.Scalar(Tensor(a!)[] self, Scalar scalar) -> ()");
    assert_eq!(i.args[0].kind, ArgKind::TensorList);
    assert!(i.args[0].is_write);
    assert_eq!(i.args[0].alias_set.as_deref(), Some("a"));
    assert!(i.returns.is_empty());
    assert!(i.is_mutable);
}

#[test]
fn device_argument() {
    let i = info("aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor");
    assert!(i.tensor_args.is_empty());
    assert_eq!(i.device_arg, Some(3));
    assert_eq!(i.args[3].kind, ArgKind::OptionalDevice);
    let i = info("demo::make(int n, Device device, Device? other=None) -> Tensor");
    assert_eq!(i.device_arg, Some(1));
    assert_eq!(i.args[1].kind, ArgKind::Device);
}

#[test]
fn every_written_torch_return_aliases_a_written_argument() {
    for line in data_lines() {
        let s = FunctionSchema::parse(line).unwrap_or_else(|e| panic!("{e}"));
        let i = s.info();
        assert_eq!(i.is_mutable, s.is_mutable(), "{line}");
        for r in &i.returns {
            if r.is_write {
                let arg = r.aliases_arg.unwrap_or_else(|| panic!("{line}"));
                assert!(i.args[arg].is_write, "{line}");
            }
        }
        for (n, a) in i.args.iter().enumerate() {
            assert_eq!(a.kind.holds_tensors(), i.tensor_args.contains(&n), "{line}");
        }
    }
}
