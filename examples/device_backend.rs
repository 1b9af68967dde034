//! A backend with one kernel of its own and the CPU fallback for everything else.
//! `cargo run --example device_backend`

use std::any::Any;
use std::sync::Arc;

use boxfall::backend::{register_backend, Backend};
use boxfall::tensor::{HostArray, Payload};
use boxfall::{
    cpu_fallback, Device, DispatchKey, Dispatcher, KernelFunction, Library, LibraryKind, Tensor,
};
use ndarray::ArrayD;

/// "Device memory": here just a vector the device owns.
struct DeviceBuffer(ArrayD<f64>);

impl Payload for DeviceBuffer {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn nbytes(&self) -> usize {
        self.0.len() * 8
    }
}

fn buffer(t: &Tensor) -> boxfall::Result<ArrayD<f64>> {
    t.payload()
        .and_then(|p| {
            p.as_any()
                .downcast_ref::<DeviceBuffer>()
                .map(|b| b.0.clone())
        })
        .ok_or_else(|| boxfall::Error::Fallback(format!("{t:?} holds no device buffer")))
}

fn f64s(t: &Tensor) -> boxfall::Result<ArrayD<f64>> {
    t.to_host()?
        .as_f64()
        .cloned()
        .ok_or_else(|| boxfall::Error::Fallback("float64 only".into()))
}

struct Accel;

impl Backend for Accel {
    fn to_cpu(&self, t: &Tensor, _for_write: bool) -> boxfall::Result<Tensor> {
        Ok(Tensor::from_array(buffer(t)?))
    }
    fn from_cpu(&self, cpu: &Tensor, device: Device) -> boxfall::Result<Tensor> {
        Ok(Tensor::foreign(device, Arc::new(DeviceBuffer(f64s(cpu)?))))
    }
    fn copy_from_cpu(&self, dst: &Tensor, src: &Tensor) -> boxfall::Result<()> {
        dst.set_data(boxfall::tensor::TensorData::Foreign(Arc::new(
            DeviceBuffer(f64s(src)?),
        )));
        Ok(())
    }
}

fn main() -> boxfall::Result<()> {
    let accel = register_backend("Accel", Arc::new(Accel))?;
    let mut lib = Library::new("dev", LibraryKind::Def)?;
    let mul = lib.define("mul(Tensor self, Tensor other) -> Tensor")?;
    let exp = lib.define("exp(Tensor self) -> Tensor")?;
    lib.impl_kernel(
        "mul",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(|_, (a, b)| {
            Ok(Tensor::from_array(f64s(&a)? * f64s(&b)?))
        }),
        false,
    )?;
    lib.impl_kernel(
        "exp",
        DispatchKey::CPU,
        KernelFunction::from_unboxed::<(Tensor,), Tensor>(|_, (a,)| {
            Ok(Tensor::from_array(f64s(&a)?.mapv(f64::exp)))
        }),
        false,
    )?;
    // Accel implements mul itself...
    lib.impl_kernel(
        "mul",
        accel,
        KernelFunction::from_unboxed::<(Tensor, Tensor), Tensor>(|_, (a, b)| {
            let out = buffer(&a)? * buffer(&b)?;
            Ok(Tensor::foreign(a.device(), Arc::new(DeviceBuffer(out))))
        }),
        false,
    )?;
    // ...and every other operator goes through the one boxed CPU fallback.
    let mut fallbacks = Library::new("_", LibraryKind::Impl)?;
    fallbacks.fallback(accel, cpu_fallback())?;

    let x = Accel.from_cpu(
        &Tensor::host(
            Device::CPU,
            HostArray::from(ndarray::arr1(&[0.0, 1.0, 2.0]).into_dyn()),
        ),
        Device::new(accel, 0),
    )?;
    let y = exp.typed::<(Tensor,), Tensor>()?.call((x.clone(),))?;
    let z = mul.typed::<(Tensor, Tensor), Tensor>()?.call((y, x))?;
    println!("x * exp(x) on {} = {}", z.device(), buffer(&z)?);
    println!("{}", Dispatcher::metrics().report());
    Ok(())
}
