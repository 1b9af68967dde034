//! An operator library with CPU kernels, called through typed and boxed handles.
//! `cargo run --example operator_library`

use boxfall::{DispatchKey, IValue, KernelFunction, Library, LibraryKind, Tensor};
use ndarray::ArrayD;

fn f64s(t: &Tensor) -> boxfall::Result<ArrayD<f64>> {
    t.to_host()?
        .as_f64()
        .cloned()
        .ok_or_else(|| boxfall::Error::Fallback("this example works in float64".into()))
}

fn main() -> boxfall::Result<()> {
    let mut lib = Library::new("example", LibraryKind::Def)?;
    let add = lib.define("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")?;
    let relu = lib.define("relu(Tensor self) -> Tensor")?;
    lib.impl_kernel(
        "add.Tensor",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor, f64), Tensor>(|_, (a, b, alpha)| {
            Ok(Tensor::from_array(f64s(&a)? + f64s(&b)? * alpha))
        }),
        false,
    )?;
    lib.impl_kernel(
        "relu",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (a,)| {
            Ok(Tensor::from_array(f64s(&a)?.mapv(|v| v.max(0.0))))
        }),
        false,
    )?;

    let x = Tensor::from_array(ndarray::arr1(&[-1.0, 2.0, -3.0]).into_dyn());
    // A typed call of an unboxed kernel: no boxing, no allocation in the dispatcher.
    let y = add
        .typed::<(Tensor, Tensor, f64), Tensor>()?
        .call((x.clone(), x.clone(), 0.5))?;
    println!("add(x, x, alpha=0.5) = {}", f64s(&y)?);
    // A boxed call: the stack holds every argument and gets the returns.
    let mut stack = vec![IValue::Tensor(y)];
    relu.call_boxed(&mut stack)?;
    println!(
        "relu(...)             = {}",
        f64s(stack[0].as_tensor().expect("a tensor"))?
    );
    println!(
        "dispatch table of {}: {:?}",
        relu.name(),
        relu.dispatch_table()
    );
    Ok(())
}
