//! A functionality key whose boxed fallback traces every call and passes it on.
//! `cargo run --example tracing_key`

use std::sync::Mutex;

use boxfall::key::{register_functionality_key, LocalKeysGuard};
use boxfall::{DispatchKey, KernelFunction, Library, LibraryKind};

static TRACE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn main() -> boxfall::Result<()> {
    let mut lib = Library::new("traced", LibraryKind::Def)?;
    let inc = lib.define("inc(int x) -> int")?;
    let twice = lib.define("twice(int x) -> int")?;
    lib.impl_kernel(
        "inc",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 1)),
        false,
    )?;
    lib.impl_kernel(
        "twice",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x * 2)),
        false,
    )?;

    // One boxed kernel for every operator: it reads the stack without knowing the types.
    let trace = register_functionality_key("Trace")?;
    let mut fallbacks = Library::new("_", LibraryKind::Impl)?;
    fallbacks.fallback(
        trace,
        KernelFunction::from_boxed(|op, keys, stack| {
            let args = format!("{stack:?}");
            op.redispatch_boxed(keys, stack)?;
            let line = format!("{}{args} -> {stack:?}", op.name());
            TRACE.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            Ok(())
        }),
    )?;

    let (inc, twice) = (inc.typed::<(i64,), i64>()?, twice.typed::<(i64,), i64>()?);
    let untraced = twice.call((inc.call((1,))?,))?;
    let traced = {
        let _on = LocalKeysGuard::include(trace.set());
        twice.call((inc.call((1,))?,))?
    };
    assert_eq!(untraced, traced);
    for line in TRACE.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("trace: {line}");
    }
    Ok(())
}
