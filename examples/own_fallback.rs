//! The seed's pattern (torch_xla's `xla_cpu_fallback`): a backend registers a boxed fallback
//! of its own that logs which operator ran and on which devices, counts, then calls the CPU
//! fallback; and a kernel of the backend's own hands the cases it does not cover to the
//! fallback with the typed `call_fallback` (c10's `call_fallback_fn`).
//! `cargo run --example own_fallback`; `cargo test` runs it too (Cargo.toml: `test = true`),
//! and tests/own_fallback.rs checks that the README shows this code as it is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use boxfall::backend::register_backend;
use boxfall::ivalue::CallArgs;
use boxfall::native::NativeBackend;
use boxfall::tensor::HostArray;
use boxfall::{CpuFallback, Device, DispatchKey, Dispatcher, IValue, KernelFunction};
use boxfall::{Library, LibraryKind, Tensor};

/// How many calls the backend's fallback saw.
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// The backend's own fallback: logs and counts, then hands the call to the CPU fallback, whose
/// policy, counters and atomicity are those of a plain `cpu_fallback()` registration.
fn accel_fallback() -> KernelFunction {
    let cpu = CpuFallback::default();
    KernelFunction::from_boxed(move |op, keys, stack| {
        let devices: Vec<String> = stack
            .iter()
            .flat_map(IValue::tensors)
            .map(|t| t.device().to_string())
            .collect();
        println!("fallback: {} on [{}]", op.name(), devices.join(", "));
        FALLBACKS.fetch_add(1, Ordering::Relaxed);
        cpu.call(op, keys, stack)
    })
}

fn f64s(t: &Tensor) -> Option<ndarray::ArrayD<f64>> {
    t.host_array().and_then(|a| a.as_f64().cloned())
}

fn main() -> boxfall::Result<()> {
    // A backend whose tensors hold host memory (it borrows Native's transfer hooks).
    let accel = register_backend("OwnFallbackAccel", Arc::new(NativeBackend))?;
    let mut lib = Library::new("own_fallback_example", LibraryKind::Def)?;
    let add = lib.define("add(Tensor self, Tensor other, float alpha) -> Tensor")?;
    let neg = lib.define("neg(Tensor self) -> Tensor")?;
    lib.impl_kernel(
        "add",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor, f64), Tensor>(|_, (a, b, alpha)| {
            match (&*a.to_host()?, &*b.to_host()?) {
                (HostArray::F64(x), HostArray::F64(y)) => Ok(Tensor::from_array(x + y * alpha)),
                (HostArray::I64(x), HostArray::I64(y)) => {
                    Ok(Tensor::from_array(x + y * alpha as i64))
                }
                _ => Err(boxfall::Error::Fallback("float64 or int64 only".into())),
            }
        }),
        false,
    )?;
    lib.impl_kernel(
        "neg",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (a,)| {
            Ok(Tensor::from_array(-f64s(&a).unwrap_or_default()))
        }),
        false,
    )?;
    // Accel's own add computes float64 itself and hands every other case to the fallback.
    let fb = accel_fallback();
    lib.impl_kernel(
        "add",
        accel,
        KernelFunction::from_boxed(move |op, _keys, stack| {
            let (a, b, alpha) = <(Tensor, Tensor, f64)>::pop_from(stack)?;
            let out = match (f64s(&a), f64s(&b)) {
                (Some(x), Some(y)) => Tensor::host(a.device(), HostArray::from(x + y * alpha)),
                _ => op
                    .typed::<(Tensor, Tensor, f64), Tensor>()?
                    .call_fallback(&fb, (a, b, alpha))?,
            };
            stack.push(IValue::Tensor(out));
            Ok(())
        }),
        false,
    )?;
    let mut fallbacks = Library::new("_", LibraryKind::Impl)?;
    fallbacks.fallback(accel, accel_fallback())?;

    let typed_add = add.typed::<(Tensor, Tensor, f64), Tensor>()?;
    let on_accel = |a: HostArray| Tensor::host(Device::new(accel, 0), a);
    let x = on_accel(HostArray::from(ndarray::arr1(&[1.0, 2.0]).into_dyn()));
    let n = on_accel(HostArray::from(ndarray::arr1(&[1_i64, 2]).into_dyn()));
    let y = neg.typed::<(Tensor,), Tensor>()?.call((x.clone(),))?; // no kernel: the fallback
    let z = typed_add.call((x.clone(), y, 2.0))?; // Accel's own kernel
    let w = typed_add.call((n.clone(), n, 1.0))?; // int64: handed to the fallback
    println!("z = {} on {}", f64s(&z).unwrap_or_default(), z.device());
    println!("w = {} on {}", w.describe(), w.device());
    println!("{} calls fell back", FALLBACKS.load(Ordering::Relaxed));
    println!("{}", Dispatcher::metrics().report());
    Ok(())
}

#[test]
fn the_example_runs() {
    main().unwrap();
}
