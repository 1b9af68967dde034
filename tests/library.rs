//! Libraries: registrations undone on drop, DEF/FRAGMENT/IMPL rules, overrides, fallbacks,
//! refused registrations, and a property test of registration order.
//!
//! Fallbacks and keys are process-wide, and other tests here register them concurrently, so
//! tables are compared only on the keys a test owns (`table_of`).

mod common;

use std::sync::OnceLock;

use boxfall::{
    DispatchKey, Dispatcher, Error, IValue, KernelFunction, Library, LibraryKind, OperatorHandle,
    Tensor,
};
use common::*;
use proptest::prelude::*;

fn call_which(op: &OperatorHandle, x: Tensor) -> boxfall::Result<i64> {
    op.typed::<(Tensor,), i64>()?.call((x,))
}

#[test]
fn dropping_a_library_undoes_its_definitions_and_kernels() {
    let (ns, mut lib) = def_lib("lib");
    let op = define_which(&mut lib, "which");
    lib.impl_kernel("which", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    let name = format!("{ns}::which");
    assert!(Dispatcher::lookup(&name).is_some());
    assert!(Dispatcher::operator_names().contains(&name));
    assert_eq!(call_which(&op, cpu(&[1.0])).unwrap(), 1);
    assert!(lib.is_open());

    drop(lib);
    assert!(Dispatcher::lookup(&name).is_none());
    assert!(!Dispatcher::operator_names().contains(&name));
    assert!(matches!(op.schema(), Err(Error::UnknownOperator { .. })));
    let mut stack = vec![IValue::Tensor(cpu(&[1.0]))];
    assert!(matches!(
        op.call_boxed(&mut stack),
        Err(Error::UnknownOperator { .. })
    ));
    assert_eq!(source_of(&op, DispatchKey::CPU), "missing");

    // The namespace and the name are free again.
    let mut again = Library::new(&ns, LibraryKind::Def).unwrap();
    let op2 = define_which(&mut again, "which");
    assert_eq!(
        op2, op,
        "one handle per operator name for the life of the process"
    );
    assert_eq!(source_of(&op2, DispatchKey::CPU), "missing");
}

#[test]
fn close_undoes_registrations_and_an_impl_library_undoes_only_its_own() {
    let (ns, mut lib) = def_lib("lib");
    let op = define_which(&mut lib, "which");
    let native = {
        let mut imp = impl_lib(&ns);
        imp.impl_kernel("which", DispatchKey::NATIVE, returns_id(2), false)
            .unwrap();
        assert_eq!(source_of(&op, DispatchKey::NATIVE), "kernel");
        imp
    };
    lib.impl_kernel("which", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    drop(native);
    assert_eq!(source_of(&op, DispatchKey::NATIVE), "missing");
    assert_eq!(source_of(&op, DispatchKey::CPU), "kernel");
    lib.close();
    assert!(!lib.is_open());
    assert!(Dispatcher::lookup(&format!("{ns}::which")).is_none());
}

#[test]
fn a_second_def_library_for_a_namespace_is_an_error_and_fragment_is_fine() {
    let (ns, mut lib) = def_lib("lib");
    define_which(&mut lib, "a");
    let err = Library::new(&ns, LibraryKind::Def).unwrap_err();
    assert!(matches!(err, Error::Registration(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&ns) && text.contains("FRAGMENT"), "{text}");

    let mut frag = Library::new(&ns, LibraryKind::Fragment).unwrap();
    let b = define_which(&mut frag, "b");
    let mut frag2 = Library::new(&ns, LibraryKind::Fragment).unwrap();
    define_which(&mut frag2, "c");
    assert_eq!(b.name(), format!("{ns}::b"));
    assert!(Dispatcher::lookup(&format!("{ns}::c")).is_some());

    // An IMPL library cannot define; a library cannot define outside its namespace.
    let mut imp = impl_lib(&ns);
    assert!(matches!(
        imp.define("d(Tensor x) -> int"),
        Err(Error::Registration(_))
    ));
    assert!(matches!(
        frag.define("elsewhere::d(Tensor x) -> int"),
        Err(Error::Registration(_))
    ));

    drop(lib);
    Library::new(&ns, LibraryKind::Def)
        .expect("the namespace is free once its DEF library is gone");
}

#[test]
fn redefining_an_operator_is_an_error_naming_both_registrations() {
    let (ns, mut lib) = def_lib("lib");
    define_which(&mut lib, "which");
    let mut frag = Library::new(&ns, LibraryKind::Fragment).unwrap();
    let err = frag.define("which(Tensor y) -> int").unwrap_err();
    assert!(matches!(err, Error::Registration(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("Library(\"{ns}\", \"FRAGMENT\")")),
        "{text}"
    );
    assert!(
        text.contains(&format!("Library(\"{ns}\", \"DEF\")")),
        "{text}"
    );
    assert!(text.contains(&format!("{ns}::which")), "{text}");
    // The same library cannot define it twice either.
    assert!(lib.define("which(Tensor x) -> int").is_err());
    // The first definition stands.
    let op = Dispatcher::find(&format!("{ns}::which")).unwrap();
    assert_eq!(op.schema().unwrap().schema.arguments[0].name, "x");
}

#[test]
fn a_second_impl_needs_allow_override_and_dropping_the_newer_restores_the_older() {
    let (ns, mut lib) = def_lib("lib");
    let op = define_which(&mut lib, "which");
    lib.impl_kernel("which", DispatchKey::CPU, returns_id(1), false)
        .unwrap();

    let mut second = impl_lib(&ns);
    let err = second
        .impl_kernel("which", DispatchKey::CPU, returns_id(2), false)
        .unwrap_err();
    assert!(matches!(err, Error::Registration(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("{ns}::which")) && text.contains("CPU"),
        "{text}"
    );
    assert!(
        text.contains(&format!("Library(\"{ns}\", \"DEF\")")),
        "names the first: {text}"
    );
    assert_eq!(call_which(&op, cpu(&[1.0])).unwrap(), 1);

    second
        .impl_kernel("which", DispatchKey::CPU, returns_id(2), true)
        .unwrap();
    assert_eq!(call_which(&op, cpu(&[1.0])).unwrap(), 2, "the newer wins");
    let mut third = impl_lib(&ns);
    third
        .impl_kernel("which", DispatchKey::CPU, returns_id(3), true)
        .unwrap();
    assert_eq!(call_which(&op, cpu(&[1.0])).unwrap(), 3);

    // Dropping a middle registration keeps the newest.
    drop(second);
    assert_eq!(call_which(&op, cpu(&[1.0])).unwrap(), 3);
    drop(third);
    assert_eq!(
        call_which(&op, cpu(&[1.0])).unwrap(),
        1,
        "the older is back"
    );
}

#[test]
fn fallbacks_register_only_in_namespace_underscore() {
    let (ns, mut lib) = def_lib("lib");
    define_which(&mut lib, "which");
    let key = backend_key("LibFbNs");
    assert!(matches!(
        lib.fallback(key, returns_id(1)),
        Err(Error::Registration(_))
    ));
    let mut imp = impl_lib(&ns);
    assert!(matches!(
        imp.fallback(key, returns_id(1)),
        Err(Error::Registration(_))
    ));
    // "_" takes IMPL only, and no operator kernels.
    assert!(Library::new("_", LibraryKind::Def).is_err());
    assert!(Library::new("_", LibraryKind::Fragment).is_err());
    let mut fb = fallback_lib();
    assert!(matches!(
        fb.impl_kernel(
            &format!("{ns}::which"),
            DispatchKey::CPU,
            returns_id(1),
            false
        ),
        Err(Error::Registration(_))
    ));
    // CompositeImplicit cannot have a fallback.
    assert!(fb
        .fallback(DispatchKey::COMPOSITE_IMPLICIT, returns_id(1))
        .is_err());
    fb.fallback(key, returns_id(1)).unwrap();
}

#[test]
fn a_second_fallback_for_one_key_is_an_error() {
    let key = backend_key("LibFb2");
    let mut first = fallback_lib();
    first.fallback(key, returns_id(1)).unwrap();
    let mut second = fallback_lib();
    let err = second.fallback(key, returns_id(2)).unwrap_err();
    assert!(matches!(err, Error::Registration(_)), "{err:?}");
    assert!(err.to_string().contains(&key.name()), "{err}");
    assert!(first.fallback(key, KernelFunction::fallthrough()).is_err());

    let (_, mut lib) = def_lib("lib");
    let op = define_which(&mut lib, "which");
    assert_eq!(call_which(&op, on_key(key, &[1.0])).unwrap(), 1);
    drop(first);
    assert_eq!(source_of(&op, key), "missing");
    second.fallback(key, returns_id(2)).unwrap();
    assert_eq!(call_which(&op, on_key(key, &[1.0])).unwrap(), 2);
}

#[test]
fn an_impl_for_an_unknown_operator_names_the_closest_defined_names() {
    let (ns, mut lib) = def_lib("lib");
    define_which(&mut lib, "add");
    define_which(&mut lib, "addmm");
    define_which(&mut lib, "completely_different");
    let err = lib
        .impl_kernel("ad", DispatchKey::CPU, returns_id(1), false)
        .unwrap_err();
    match &err {
        Error::UnknownOperator { name, suggestions } => {
            assert_eq!(name, &format!("{ns}::ad"));
            assert_eq!(suggestions.first(), Some(&format!("{ns}::add")));
            assert!(!suggestions.contains(&format!("{ns}::completely_different")));
        }
        other => panic!("expected UnknownOperator, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&format!("unknown operator '{ns}::ad'")),
        "{text}"
    );
    assert!(text.contains(&format!("did you mean: {ns}::add")), "{text}");
    let err = Dispatcher::find(&format!("{ns}::addm")).unwrap_err();
    assert!(err.to_string().contains(&format!("{ns}::addmm")), "{err}");
}

#[test]
fn a_fallback_registered_before_an_operator_is_defined_serves_it() {
    let key = backend_key("LibFbFirst");
    let mut fb = fallback_lib();
    fb.fallback(key, returns_id(42)).unwrap();
    let (_, mut lib) = def_lib("lib");
    let op = define_which(&mut lib, "later");
    assert_eq!(source_of(&op, key), "backend fallback");
    assert_eq!(call_which(&op, on_key(key, &[1.0])).unwrap(), 42);
    let mut stack = vec![IValue::Tensor(on_key(key, &[1.0]))];
    op.call_boxed(&mut stack).unwrap();
    assert_eq!(stack[0].to_int(), Some(42));
}

#[test]
fn a_refused_registration_leaves_the_dispatch_table_as_it_was() {
    let (ns, mut lib) = def_lib("lib");
    let key = backend_key("LibRefused");
    let f = functionality_key("LibRefusedF");
    let keys = [
        DispatchKey::COMPOSITE_IMPLICIT,
        DispatchKey::CPU,
        DispatchKey::NATIVE,
        key,
        f,
    ];
    let op = define_which(&mut lib, "which");
    lib.impl_kernel("which", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    lib.impl_kernel("which", f, KernelFunction::fallthrough(), false)
        .unwrap();
    let mut fb = fallback_lib();
    fb.fallback(key, returns_id(5)).unwrap();
    let before = table_of(&op, &keys);

    let mut other = impl_lib(&ns);
    assert!(other
        .impl_kernel("which", DispatchKey::CPU, returns_id(2), false)
        .is_err());
    assert!(other.impl_kernel("which", f, returns_id(2), false).is_err());
    assert!(other
        .impl_kernel("whitch", key, returns_id(2), false)
        .is_err());
    let mut fb2 = fallback_lib();
    assert!(fb2.fallback(key, returns_id(6)).is_err());
    let mut frag = Library::new(&ns, LibraryKind::Fragment).unwrap();
    assert!(frag.define("which(Tensor x, Tensor y) -> int").is_err());
    assert!(Library::new(&ns, LibraryKind::Def).is_err());

    assert_eq!(table_of(&op, &keys), before);
    assert!(!other.is_open() && !fb2.is_open() && !frag.is_open());
    assert_eq!(call_which(&op, cpu(&[1.0])).unwrap(), 1);
    assert_eq!(call_which(&op, on_key(key, &[1.0])).unwrap(), 5);
    assert_eq!(op.schema().unwrap().schema.arguments.len(), 1);

    // Dropping the refused libraries changes nothing either.
    drop((other, fb2, frag));
    assert_eq!(table_of(&op, &keys), before);
}

// ---------------------------------------------------------------------------- proptest

/// Keys only the property test registers fallbacks for.
struct PropKeys {
    a: DispatchKey,
    b: DispatchKey,
    f: DispatchKey,
    g: DispatchKey,
}

fn prop_keys() -> &'static PropKeys {
    static KEYS: OnceLock<PropKeys> = OnceLock::new();
    KEYS.get_or_init(|| PropKeys {
        a: backend_key("PropA"),
        b: backend_key("PropB"),
        f: functionality_key("PropF"),
        g: functionality_key("PropG"),
    })
}

/// The fixed set of registrations, each made by its own library.
const REGISTRATIONS: usize = 10;

fn register(which: usize, ns: &str) -> Library {
    let k = prop_keys();
    let name = format!("{ns}::which");
    let imp = |key: DispatchKey, kernel: KernelFunction| {
        let mut lib = impl_lib(ns);
        lib.impl_kernel(&name, key, kernel, true).unwrap();
        lib
    };
    let fallback = |key: DispatchKey, kernel: KernelFunction| {
        let mut lib = fallback_lib();
        lib.fallback(key, kernel).unwrap();
        lib
    };
    match which {
        0 => imp(DispatchKey::CPU, returns_id(1)),
        1 => imp(DispatchKey::CPU, returns_id(2)),
        2 => imp(DispatchKey::NATIVE, returns_id(3)),
        3 => imp(k.a, returns_id(4)),
        4 => imp(DispatchKey::COMPOSITE_IMPLICIT, returns_id(5)),
        5 => fallback(k.a, returns_id(6)),
        6 => fallback(k.b, returns_id(7)),
        7 => fallback(k.f, KernelFunction::fallthrough()),
        8 => imp(k.g, KernelFunction::fallthrough()),
        9 => imp(k.f, returns_id(8)),
        _ => unreachable!(),
    }
}

/// What the table must say for a set of surviving registrations (c10's order).
fn model(alive: &[bool]) -> Vec<(String, String)> {
    let k = prop_keys();
    let s = |x: &str| x.to_string();
    let pick = |options: &[(bool, &str)]| {
        options
            .iter()
            .find(|(on, _)| *on)
            .map_or(s("missing"), |(_, src)| s(src))
    };
    let composite = alive[4];
    let mut t = Vec::new();
    if composite {
        t.push((s("CompositeImplicit"), s("kernel")));
    }
    t.push((
        s("CPU"),
        pick(&[
            (alive[0] || alive[1], "kernel"),
            (composite, "composite kernel"),
        ]),
    ));
    t.push((
        s("Native"),
        pick(&[(alive[2], "kernel"), (composite, "composite kernel")]),
    ));
    t.push((
        k.a.name(),
        pick(&[
            (alive[3], "kernel"),
            (composite, "composite kernel"),
            (alive[5], "backend fallback"),
        ]),
    ));
    t.push((
        k.b.name(),
        pick(&[
            (composite, "composite kernel"),
            (alive[6], "backend fallback"),
        ]),
    ));
    t.push((
        k.f.name(),
        pick(&[(alive[9], "kernel"), (alive[7], "fallthrough")]),
    ));
    t.push((k.g.name(), pick(&[(alive[8], "fallthrough")])));
    t
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_table_depends_on_the_surviving_registrations_not_their_order(
        order in Just((0..REGISTRATIONS).collect::<Vec<_>>()).prop_shuffle(),
        dropped in proptest::collection::vec(any::<bool>(), REGISTRATIONS),
    ) {
        let k = prop_keys();
        let keys = [DispatchKey::COMPOSITE_IMPLICIT, DispatchKey::CPU, DispatchKey::NATIVE, k.a, k.b, k.f, k.g];
        let (ns, mut lib) = def_lib("prop");
        let op = define_which(&mut lib, "which");
        let empty = table_of(&op, &keys);

        // Register in the random order, then drop the chosen subset.
        let mut libs: Vec<(usize, Library)> = order.iter().map(|&i| (i, register(i, &ns))).collect();
        libs.retain(|(i, _)| !dropped[*i]);
        let permuted = table_of(&op, &keys);
        let alive: Vec<bool> = dropped.iter().map(|d| !d).collect();
        prop_assert_eq!(&permuted, &model(&alive));
        drop(libs);
        prop_assert_eq!(table_of(&op, &keys), empty.clone());

        // The survivors alone, in canonical order.
        let canonical: Vec<Library> = (0..REGISTRATIONS).filter(|&i| !dropped[i]).map(|i| register(i, &ns)).collect();
        prop_assert_eq!(table_of(&op, &keys), permuted);
        drop(canonical);
        prop_assert_eq!(table_of(&op, &keys), empty);
    }
}

#[test]
fn an_operator_with_nothing_registered_left_leaves_the_registry() {
    let (ns, mut lib) = def_lib("gone");
    let names: Vec<String> = (0..200)
        .map(|i| {
            let op = define_which(&mut lib, &format!("f{i}"));
            op.name().to_string()
        })
        .collect();
    let listed = |n: &String| Dispatcher::all_operators().iter().any(|op| op.name() == n);
    assert!(names.iter().all(listed));
    // A kernel of an IMPL library keeps the entry after its definition goes.
    let mut imp = impl_lib(&ns);
    imp.impl_kernel("f0", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    lib.close();
    assert!(listed(&names[0]), "a kernel is still registered for it");
    assert!(!names[1..].iter().any(listed), "nothing left: freed");
    imp.close();
    assert!(!listed(&names[0]));
    assert!(Dispatcher::overloads(&format!("{ns}::f0")).is_empty());
}

#[test]
fn define_and_close_cycles_with_fresh_names_leave_nothing_behind() {
    let prefix = ns("cycle");
    for i in 0..2000 {
        let mut lib = Library::new(&format!("{prefix}_{i}"), LibraryKind::Def).unwrap();
        define_which(&mut lib, "f");
        lib.impl_kernel("f", DispatchKey::CPU, returns_id(1), false)
            .unwrap();
    }
    let left: Vec<String> = Dispatcher::all_operators()
        .iter()
        .map(|op| op.name().to_string())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "entries left: {}", left.len());
}

#[test]
fn a_handle_kept_across_a_close_sees_the_next_definition_of_its_name() {
    let (ns, mut lib) = def_lib("kept");
    let op = define_which(&mut lib, "which");
    lib.impl_kernel("which", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    lib.close();
    let mut again = Library::new(&ns, LibraryKind::Def).unwrap();
    define_which(&mut again, "which");
    again
        .impl_kernel("which", DispatchKey::CPU, returns_id(2), false)
        .unwrap();
    assert_eq!(call_which(&op, cpu(&[1.0])).unwrap(), 2);
}

#[test]
fn overloads_are_listed_in_definition_order_and_leave_with_their_definition() {
    let (ns, mut lib) = def_lib("ovl");
    let mut frag = Library::new(&ns, LibraryKind::Fragment).unwrap();
    lib.define("g.b(Tensor x) -> Tensor").unwrap();
    frag.define("g(Tensor x) -> Tensor").unwrap();
    lib.define("g.a(Tensor x) -> Tensor").unwrap();
    let names = |ns: &str| -> Vec<String> {
        Dispatcher::overloads(&format!("{ns}::g"))
            .iter()
            .map(|o| o.name().to_string())
            .collect()
    };
    assert_eq!(
        names(&ns),
        [
            format!("{ns}::g.b"),
            format!("{ns}::g"),
            format!("{ns}::g.a")
        ]
    );
    frag.close();
    assert_eq!(names(&ns), [format!("{ns}::g.b"), format!("{ns}::g.a")]);
}

#[test]
fn a_library_registers_kernels_only_for_its_own_namespace() {
    let (ns, mut lib) = def_lib("libown");
    let op = define_which(&mut lib, "which");
    let (other_ns, _other) = def_lib("libother");
    for kind in [LibraryKind::Impl, LibraryKind::Fragment] {
        let mut elsewhere = Library::new(&other_ns, kind).unwrap();
        let err = elsewhere
            .impl_kernel(
                &format!("{ns}::which"),
                DispatchKey::CPU,
                returns_id(1),
                false,
            )
            .unwrap_err();
        assert!(matches!(err, Error::Registration(_)), "{err:?}");
        let text = err.to_string();
        // Which library, which namespace it has, and what to write instead.
        assert!(text.contains(&format!("Library(\"{other_ns}\"")), "{text}");
        assert!(text.contains(&format!("'{ns}::which'")), "{text}");
        assert!(
            text.contains(&format!("Library(\"{ns}\", \"IMPL\")")),
            "{text}"
        );
    }
    assert_eq!(source_of(&op, DispatchKey::CPU), "missing");
    // Its own namespace, qualified or not, is fine.
    let mut own = impl_lib(&ns);
    own.impl_kernel(
        &format!("{ns}::which"),
        DispatchKey::CPU,
        returns_id(3),
        false,
    )
    .unwrap();
    assert_eq!(call_which(&op, cpu(&[1.0])).unwrap(), 3);
}

#[test]
fn coverage_lists_what_serves_each_operator_on_a_key() {
    use boxfall::dispatcher::Source;
    let (ns, mut lib) = def_lib("libcov");
    for name in ["own", "comp", "fb", "thru", "none"] {
        define_which(&mut lib, name);
    }
    let key = backend_key("LibCov");
    lib.impl_kernel("own", key, returns_id(1), false).unwrap();
    lib.impl_kernel(
        "comp",
        DispatchKey::COMPOSITE_IMPLICIT,
        returns_id(2),
        false,
    )
    .unwrap();
    lib.impl_kernel("thru", key, KernelFunction::fallthrough(), false)
        .unwrap();
    let none_before = Dispatcher::coverage(key, Some(&ns)).unwrap();
    let mut fb = fallback_lib();
    fb.fallback(key, returns_id(3)).unwrap();
    let q = |n: &str| format!("{ns}::{n}");
    let expected = vec![
        (q("comp"), Source::CompositeKernel),
        (q("fb"), Source::BackendFallback),
        (q("none"), Source::BackendFallback),
        (q("own"), Source::Kernel),
        (q("thru"), Source::Fallthrough),
    ];
    assert_eq!(Dispatcher::coverage(key, Some(&ns)).unwrap(), expected);
    assert_eq!(none_before[1], (q("fb"), Source::Missing));
    // Without a namespace: every defined operator, this namespace's among them, sorted.
    let all = Dispatcher::coverage(key, None).unwrap();
    assert!(all.windows(2).all(|w| w[0].0 <= w[1].0));
    assert!(expected.iter().all(|e| all.contains(e)));
    // An empty namespace names those that have operators.
    match Dispatcher::coverage(key, Some("libcov_nobody")) {
        Err(Error::UnknownNamespace { name, known }) => {
            assert_eq!(name, "libcov_nobody");
            assert!(known.contains(&ns), "{known:?}");
        }
        other => panic!("expected UnknownNamespace, got {other:?}"),
    }
    assert!(Dispatcher::namespaces().contains(&ns));
    assert_eq!(
        Dispatcher::operators_in(&ns),
        ["comp", "fb", "none", "own", "thru"]
    );
}
