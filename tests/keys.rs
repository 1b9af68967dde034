//! Dispatch keys: priorities, key sets, the key registry and the thread-local include/exclude
//! sets.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use boxfall::key::{
    local_keys, register_backend_key, register_functionality_key, registered_keys, LocalKeysGuard,
};
use boxfall::{DispatchKey, DispatchKeySet, Error, KeyKind};
use common::ns;

#[test]
fn functionality_ranks_above_later_backends_above_earlier_above_native_above_cpu() {
    let b1 = register_backend_key(&ns("PrioB")).unwrap();
    let b2 = register_backend_key(&ns("PrioB")).unwrap();
    let f1 = register_functionality_key(&ns("PrioF")).unwrap();
    let f2 = register_functionality_key(&ns("PrioF")).unwrap();
    let b3 = register_backend_key(&ns("PrioB")).unwrap();

    assert!(DispatchKey::NATIVE > DispatchKey::CPU);
    assert!(DispatchKey::CPU > DispatchKey::COMPOSITE_IMPLICIT);
    assert!(b1 > DispatchKey::NATIVE);
    assert!(b2 > b1);
    // A backend registered after a functionality key still ranks below it.
    assert!(b3 > b2);
    assert!(f1 > b3);
    assert!(f2 > f1);

    let all =
        DispatchKeySet::EMPTY | DispatchKey::CPU | DispatchKey::NATIVE | b1 | b2 | b3 | f1 | f2;
    assert_eq!(all.highest(), Some(f2));
    let order: Vec<DispatchKey> = all.iter().collect();
    assert_eq!(
        order,
        vec![f2, f1, b3, b2, b1, DispatchKey::NATIVE, DispatchKey::CPU]
    );
}

#[test]
fn key_kinds_and_names() {
    let b = register_backend_key(&ns("KindB")).unwrap();
    let f = register_functionality_key(&ns("KindF")).unwrap();
    assert_eq!(DispatchKey::CPU.kind(), KeyKind::Backend);
    assert_eq!(DispatchKey::NATIVE.kind(), KeyKind::Backend);
    assert_eq!(DispatchKey::COMPOSITE_IMPLICIT.kind(), KeyKind::Alias);
    assert_eq!(b.kind(), KeyKind::Backend);
    assert!(b.is_backend());
    assert_eq!(f.kind(), KeyKind::Functionality);
    assert!(!f.is_backend());
    assert_eq!(DispatchKey::CPU.name(), "CPU");
    assert_eq!(DispatchKey::NATIVE.name(), "Native");
    assert_eq!(DispatchKey::COMPOSITE_IMPLICIT.name(), "CompositeImplicit");
    assert_eq!(DispatchKey::from_name(&b.name()).unwrap(), b);
    assert_eq!(DispatchKey::from_name(&f.name()).unwrap(), f);
    assert_eq!(
        DispatchKey::from_name_ignore_case(&b.name().to_uppercase()),
        Some(b)
    );
    let keys = registered_keys();
    assert!(keys.contains(&b) && keys.contains(&f));
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "lowest first");
}

#[test]
fn key_set_highest_without_highest_and_iter() {
    let b = register_backend_key(&ns("SetB")).unwrap();
    let s = DispatchKeySet::EMPTY | DispatchKey::CPU | b | DispatchKey::NATIVE;
    assert_eq!(s.highest(), Some(b));
    assert!(s.contains(DispatchKey::CPU) && s.contains(DispatchKey::NATIVE) && s.contains(b));
    assert!(!s.contains(DispatchKey::COMPOSITE_IMPLICIT));

    let rest = s.without_highest();
    assert_eq!(rest.highest(), Some(DispatchKey::NATIVE));
    assert!(!rest.contains(b));
    assert_eq!(rest.without_highest(), DispatchKey::CPU.set());
    assert!(rest.without_highest().without_highest().is_empty());
    assert!(DispatchKeySet::EMPTY.without_highest().is_empty());
    assert_eq!(DispatchKeySet::EMPTY.highest(), None);
    assert_eq!(DispatchKeySet::EMPTY.iter().count(), 0);

    assert_eq!(
        s.iter().collect::<Vec<_>>(),
        vec![b, DispatchKey::NATIVE, DispatchKey::CPU]
    );
    assert_eq!(
        s.names(),
        vec![b.name(), "Native".to_string(), "CPU".to_string()]
    );
    assert_eq!(s.to_string(), format!("[{}, Native, CPU]", b.name()));
    let mut t = DispatchKeySet::EMPTY;
    t |= DispatchKey::CPU;
    assert_eq!(t, DispatchKey::CPU.set());
    assert_eq!(
        DispatchKey::CPU.set() | DispatchKey::NATIVE.set(),
        t | DispatchKey::NATIVE
    );
}

#[test]
fn registering_a_key_name_twice_is_an_error() {
    let name = ns("DupKey");
    register_backend_key(&name).unwrap();
    let again = register_backend_key(&name).unwrap_err();
    assert!(matches!(again, Error::Registration(_)), "{again:?}");
    assert!(again.to_string().contains(&name), "{again}");
    // Not as another kind either, nor in another case.
    assert!(register_functionality_key(&name).is_err());
    assert!(register_backend_key(&name.to_uppercase()).is_err());
    // The built-in keys are taken too.
    assert!(register_backend_key("CPU").is_err());
    assert!(register_functionality_key("Native").is_err());
    assert!(register_backend_key("CompositeImplicit").is_err());

    let f = ns("DupFunc");
    register_functionality_key(&f).unwrap();
    assert!(register_functionality_key(&f).is_err());
    assert!(register_backend_key(&f).is_err());
}

#[test]
fn invalid_key_names_are_refused() {
    for bad in ["", "has space", "dash-ed", "colon::key"] {
        assert!(register_backend_key(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn an_unknown_key_name_lists_the_known_keys() {
    let b = register_backend_key(&ns("KnownB")).unwrap();
    let f = register_functionality_key(&ns("KnownF")).unwrap();
    let err = DispatchKey::from_name("NoSuchKey").unwrap_err();
    match &err {
        Error::UnknownKey { name, known } => {
            assert_eq!(name, "NoSuchKey");
            for k in ["CompositeImplicit", "CPU", "Native"] {
                assert!(known.iter().any(|n| n == k), "{known:?} lacks {k}");
            }
            assert!(known.contains(&b.name()) && known.contains(&f.name()));
        }
        other => panic!("expected UnknownKey, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("NoSuchKey"), "{text}");
    assert!(text.contains("CPU") && text.contains("Native"), "{text}");
    assert!(
        text.contains(&b.name()) && text.contains(&f.name()),
        "{text}"
    );
}

#[test]
fn key_names_match_ignoring_case_and_take_pytorchs_alias_name() {
    let b = register_backend_key(&ns("CaseB")).unwrap();
    assert_eq!(DispatchKey::from_name("cpu").unwrap(), DispatchKey::CPU);
    assert_eq!(
        DispatchKey::from_name("NATIVE").unwrap(),
        DispatchKey::NATIVE
    );
    assert_eq!(DispatchKey::from_name(&b.name().to_lowercase()).unwrap(), b);
    for alias in ["CompositeImplicitAutograd", "compositeimplicitautograd"] {
        assert_eq!(
            DispatchKey::from_name(alias).unwrap(),
            DispatchKey::COMPOSITE_IMPLICIT
        );
    }
    // A name differing only in case from a registered one cannot be registered, so a name
    // never matches two keys; an unknown one still lists the known keys.
    assert!(register_backend_key(&b.name().to_uppercase()).is_err());
    match DispatchKey::from_name("cpux") {
        Err(Error::UnknownKey { name, known }) => {
            assert_eq!(name, "cpux");
            assert!(known.contains(&"CPU".to_string()), "{known:?}");
        }
        other => panic!("expected UnknownKey, got {other:?}"),
    }
}

#[test]
fn include_and_exclude_guards_nest_and_restore() {
    let f = register_functionality_key(&ns("GuardF")).unwrap();
    let g = register_functionality_key(&ns("GuardG")).unwrap();
    assert_eq!(local_keys(), (DispatchKeySet::EMPTY, DispatchKeySet::EMPTY));
    {
        let _a = LocalKeysGuard::include(f.set());
        assert_eq!(local_keys().0, f.set());
        {
            let _b = LocalKeysGuard::include(g.set());
            assert_eq!(local_keys().0, f.set() | g);
            {
                // Excluding takes the key out of the included set.
                let _c = LocalKeysGuard::exclude(f.set());
                let (inc, exc) = local_keys();
                assert_eq!(inc, g.set());
                assert_eq!(exc, f.set());
                {
                    // Including again takes it out of the excluded set.
                    let _d = LocalKeysGuard::include(f.set());
                    assert_eq!(local_keys(), (f.set() | g, DispatchKeySet::EMPTY));
                }
                assert_eq!(local_keys(), (g.set(), f.set()));
            }
            assert_eq!(local_keys(), (f.set() | g, DispatchKeySet::EMPTY));
        }
        assert_eq!(local_keys(), (f.set(), DispatchKeySet::EMPTY));
    }
    assert_eq!(local_keys(), (DispatchKeySet::EMPTY, DispatchKeySet::EMPTY));
}

#[test]
fn guards_restore_the_keys_when_a_panic_unwinds() {
    let f = register_functionality_key(&ns("PanicF")).unwrap();
    let g = register_functionality_key(&ns("PanicG")).unwrap();
    let _outer = LocalKeysGuard::include(f.set());
    let result = catch_unwind(AssertUnwindSafe(|| {
        let _inner = LocalKeysGuard::include(g.set());
        let _ex = LocalKeysGuard::exclude(f.set());
        assert_eq!(local_keys(), (g.set(), f.set()));
        panic!("unwinding through two guards");
    }));
    assert!(result.is_err());
    assert_eq!(local_keys(), (f.set(), DispatchKeySet::EMPTY));
}

#[test]
fn local_keys_are_per_thread() {
    let f = register_functionality_key(&ns("ThreadF")).unwrap();
    let _g = LocalKeysGuard::include(f.set());
    let _x = LocalKeysGuard::exclude(DispatchKey::NATIVE.set());
    let other = std::thread::spawn(move || {
        let before = local_keys();
        let _h = LocalKeysGuard::exclude(f.set());
        let during = local_keys();
        (before, during)
    })
    .join()
    .unwrap();
    assert_eq!(other.0, (DispatchKeySet::EMPTY, DispatchKeySet::EMPTY));
    assert_eq!(other.1, (DispatchKeySet::EMPTY, f.set()));
    // The other thread's guard did not touch this thread's sets.
    assert_eq!(local_keys(), (f.set(), DispatchKey::NATIVE.set()));
}

#[test]
fn set_local_keys_returns_the_previous_sets() {
    let f = register_functionality_key(&ns("SetLocalF")).unwrap();
    let prev = boxfall::key::set_local_keys(f.set(), DispatchKey::NATIVE.set());
    assert_eq!(prev, (DispatchKeySet::EMPTY, DispatchKeySet::EMPTY));
    assert_eq!(local_keys(), (f.set(), DispatchKey::NATIVE.set()));
    let back = boxfall::key::set_local_keys(prev.0, prev.1);
    assert_eq!(back, (f.set(), DispatchKey::NATIVE.set()));
    assert_eq!(local_keys(), (DispatchKeySet::EMPTY, DispatchKeySet::EMPTY));
}

#[test]
fn each_thread_sees_only_its_own_keys_whatever_the_others_hold() {
    use std::sync::{Arc, Barrier};
    let f = register_functionality_key(&ns("ThreadF")).unwrap();
    let g = register_functionality_key(&ns("ThreadG")).unwrap();
    let both_set = Arc::new(Barrier::new(2));
    let checked = Arc::new(Barrier::new(2));
    let other = {
        let (both_set, checked) = (both_set.clone(), checked.clone());
        std::thread::spawn(move || {
            let prev = boxfall::key::set_local_keys(g.set(), DispatchKeySet::EMPTY);
            both_set.wait();
            let seen = local_keys();
            checked.wait();
            boxfall::key::set_local_keys(prev.0, prev.1);
            // Keys set and cleared again; this thread's sets are empty.
            (seen, local_keys())
        })
    };
    {
        let _mine = LocalKeysGuard::exclude(f.set());
        both_set.wait();
        assert_eq!(local_keys(), (DispatchKeySet::EMPTY, f.set()));
        checked.wait();
    }
    // Another thread holding keys does not give them to this one.
    assert_eq!(local_keys(), (DispatchKeySet::EMPTY, DispatchKeySet::EMPTY));
    let (seen, after) = other.join().unwrap();
    assert_eq!(seen, (g.set(), DispatchKeySet::EMPTY));
    assert_eq!(after, (DispatchKeySet::EMPTY, DispatchKeySet::EMPTY));
}
