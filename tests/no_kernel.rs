//! The NoKernel error says what the thread excluded, and names every key by its name.

mod common;

use boxfall::key::LocalKeysGuard;
use boxfall::{DispatchKey, DispatchKeySet, Error, IValue, Tensor};
use common::*;

#[test]
fn a_call_whose_only_key_is_excluded_says_so() {
    let (ns, mut lib) = def_lib("nok");
    let op = lib.define("f(Tensor x) -> int").unwrap();
    lib.impl_kernel("f", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    let _g = LocalKeysGuard::exclude(DispatchKey::CPU.set());
    let expected = format!(
        "Could not run '{ns}::f' with arguments from the 'CPU' backend, which is excluded on this thread (bf.exclude_keys: [CPU]). '{ns}::f' is only available for these backends: [CPU]."
    );
    let typed = op.typed::<(Tensor,), i64>().unwrap();
    let err = typed.call((cpu(&[1.0]),)).unwrap_err();
    assert_eq!(err.to_string(), expected);
    let Error::NoKernel { excluded, .. } = &err else {
        panic!("expected NoKernel, got {err:?}");
    };
    assert_eq!(excluded, &vec!["CPU".to_string()]);
    let mut stack = vec![IValue::Tensor(cpu(&[1.0]))];
    assert_eq!(op.call_boxed(&mut stack).unwrap_err().to_string(), expected);
}

#[test]
fn other_excluded_keys_are_listed_after_the_text() {
    let (ns, mut lib) = def_lib("nok");
    let accel = backend_key("NokAccel");
    let trace = functionality_key("NokTrace");
    let op = lib.define("g(Tensor x) -> int").unwrap();
    lib.impl_kernel("g", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    let _g = LocalKeysGuard::exclude(trace.set());
    let err = op
        .typed::<(Tensor,), i64>()
        .unwrap()
        .call((on_key(accel, &[1.0]),))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Could not run '{ns}::g' with arguments from the '{}' backend. '{ns}::g' is only available for these backends: [CPU]. Excluded on this thread (bf.exclude_keys): [{}].",
            accel.name(),
            trace.name()
        )
    );
}

#[test]
fn without_exclusions_the_text_is_c10s() {
    let (ns, mut lib) = def_lib("nok");
    let accel = backend_key("NokPlain");
    let op = lib.define("h(Tensor x) -> int").unwrap();
    lib.impl_kernel("h", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    let err = op
        .typed::<(Tensor,), i64>()
        .unwrap()
        .call((on_key(accel, &[1.0]),))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Could not run '{ns}::h' with arguments from the '{}' backend. '{ns}::h' is only available for these backends: [CPU].",
            accel.name()
        )
    );
}

#[test]
fn a_key_nobody_registered_is_named_by_its_bit() {
    let (ns, mut lib) = def_lib("nok");
    let op = lib.define("k(Tensor x) -> int").unwrap();
    lib.impl_kernel("k", DispatchKey::CPU, returns_id(1), false)
        .unwrap();
    // The highest bit: a functionality key no test registers.
    let bit = DispatchKey::from_index(63).unwrap();
    assert!(!boxfall::key::registered_keys().contains(&bit));
    let _g = LocalKeysGuard::include(DispatchKeySet(1 << 63));
    let err = op
        .typed::<(Tensor,), i64>()
        .unwrap()
        .call((cpu(&[1.0]),))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("from the '<unregistered key 63>' backend"),
        "{text}"
    );
    assert!(!text.contains("'?'"), "{text}");
    assert!(text.contains(&format!("'{ns}::k'")), "{text}");
}
