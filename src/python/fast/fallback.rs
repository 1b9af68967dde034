//! The CPU fallback around a Python CPU kernel, run without a stack (`run_with_maps`).

use pyo3::prelude::*;

use crate::dispatcher::{OpSchema, OperatorHandle, Routed};
use crate::key::DispatchKey;
use crate::python::array_kernel::ArrayKernel;
use crate::python::convert::{is_exact_ndarray, Passed};
use crate::python::errors::IntoPy;
use crate::python::ffi::vectorcall;
use crate::python::kernel::kernel_error;
use crate::python::overload::PyOpOverload;
use crate::python::plan::{Body, Kind, Plan, MAX};
use crate::python::py_kernel::PyKernel;
use crate::python::tensor::{as_tensor, cpu_tensor_to_numpy, kernel_array, lent_array, wrap};

use super::objs::Objs;
use super::returns::ret_error;

/// What `run_fallback` needs of the table, taken out of it in `Found::of`'s read section (the
/// function is a Python reference): the backend's key, and the CPU kernel's Python function
/// and whether it takes arrays.
pub(super) struct FallbackKernel<'py> {
    pub(super) key: DispatchKey,
    pub(super) func: Bound<'py, PyAny>,
    pub(super) array: bool,
}

impl<'py> FallbackKernel<'py> {
    /// The Python CPU kernel of a call that the CPU fallback serves (None: none there, or a
    /// boxed one, which the boxed way runs).
    #[inline(always)]
    pub(super) fn of(py: Python<'py>, r: &Routed<'_>) -> Option<FallbackKernel<'py>> {
        let key = r.keys().highest()?;
        let kernel = r.cpu_foreign::<PyKernel>().filter(|k| !k.boxed)?;
        Some(FallbackKernel {
            key,
            func: kernel.func(py)?,
            array: kernel.array,
        })
    }
}

/// A call of backend tensors that the CPU fallback serves with a Python CPU kernel, run
/// without a stack: the caller's tensors go through the fallback's maps (`run_with_maps`: the
/// moves, checks, policy and counters of the typed fallback) straight to the kernel's NumPy
/// arguments, and its NumPy result straight to the device. The boxed way built a stack of the
/// arguments, walked it by the schema, built the kernel's arguments from it, wrapped the result
/// as a CPU tensor holding the array object and copied that into the device: two thirds of a
/// one-element call's time outside NumPy.
///
/// `None` before anything ran where the boxed way must serve: another kernel, a boxed or
/// collected Python kernel, keyword-only arguments, a NumPy array among the tensors, a return
/// that is not one Tensor, or an operator or backend the typed fallback does not serve. Once
/// the kernel ran, every outcome is the boxed way's: the same conversions and the same errors,
/// noted the same way. Not inlined into `run`, whose other calls (a Python kernel's) it would
/// slow with its frame.
#[inline(never)]
pub(super) fn run_fallback<'py>(
    slf: &Bound<'py, PyOpOverload>,
    plan: &Plan,
    body: &Body,
    found: FallbackKernel<'py>,
    given: &[Bound<'py, PyAny>],
    kernel: &[Bound<'py, PyAny>],
) -> Option<PyResult<Bound<'py, PyAny>>> {
    if body.kwonly || body.rets.len() != 1 {
        return None;
    }
    let ret = &body.rets[0];
    if ret.kind != Kind::Tensor || ret.optional {
        return None;
    }
    let py = slf.py();
    let op = &slf.get().handle;
    // The tensors of the call, by argument (the general path's stack holds the same ones).
    // Borrowed from the caller's objects, which outlive the call: no tensor handle is cloned.
    let mut tensors: [Option<&crate::tensor::Tensor>; MAX] = [None; MAX];
    for ((a, g), slot) in body.args.iter().zip(given.iter()).zip(tensors.iter_mut()) {
        if a.kind != Kind::Tensor {
            continue;
        }
        match as_tensor(g) {
            Some(t) => *slot = Some(&t.get().inner),
            None if g.is_none() => {}
            None => return None,
        }
    }
    let n = body.args.len();
    // The Python kernel runs outside the table's read section, with no count of it held.
    let FallbackKernel { key, func, array } = found;
    let result = crate::fallback::run_with_maps(op, &plan.schema.info, key, |maps| {
        kernel_in_fallback(
            py,
            &func,
            array,
            op,
            &plan.schema,
            key,
            (given, kernel),
            &tensors[..n],
            maps,
        )
    })?
    .py(py);
    Some(result.and_then(|t| {
        // As `returns_to_py` gives it: an argument's tensor as the caller's object.
        for g in given {
            if let Some(gt) = as_tensor(g) {
                if gt.get().inner.same(&t) {
                    return Ok(g.clone());
                }
            }
        }
        if t.key() == DispatchKey::CPU {
            cpu_tensor_to_numpy(py, &t, true)
        } else {
            wrap(py, t)
        }
    }))
}

/// The fallback's steps 1-3 around the Python kernel `func` (see `run_fallback`): the result's
/// tensor on the device.
#[allow(clippy::too_many_arguments)]
pub(super) fn kernel_in_fallback<'py>(
    py: Python<'py>,
    func: &Bound<'py, PyAny>,
    array: bool,
    op: &OperatorHandle,
    schema: &OpSchema,
    key: DispatchKey,
    (objs_given, objs_kernel): (&[Bound<'py, PyAny>], &[Bound<'py, PyAny>]),
    given: &[Option<&crate::tensor::Tensor>],
    maps: &mut crate::fallback::Moves<'_>,
) -> crate::Result<crate::tensor::Tensor> {
    use crate::kernel::TensorMaps;
    let cpu_keys = DispatchKey::CPU.set();
    // 1. The backend's tensors to the CPU: the kernel's tensor of argument i is its CPU tensor
    // if it moved, else the caller's own.
    let n = given.len();
    let mut lent: [Option<&crate::tensor::Tensor>; MAX] = [None; MAX];
    lent[..n].copy_from_slice(given);
    let mut moved: [Option<crate::tensor::Tensor>; MAX] = Default::default();
    maps.args_lent(&mut lent[..n], &mut moved[..n])?;
    let mut tensors: [Option<&crate::tensor::Tensor>; MAX] = [None; MAX];
    for ((t, m), l) in tensors.iter_mut().zip(moved.iter()).zip(lent.iter()) {
        *t = m.as_ref().or(*l);
    }
    let tensors = &tensors[..n];
    // 2. The kernel, with CPU tensors as NumPy arrays (one object a tensor) and the other
    // arguments as the fast bind made them.
    let kernel_err = |maps: &mut crate::fallback::Moves<'_>, e: PyErr| {
        maps.kernel_error(kernel_error(py, e, op, cpu_keys))
    };
    let mut objs = Objs::new();
    for (i, (t, k)) in tensors.iter().zip(objs_kernel.iter()).enumerate() {
        let Some(t) = *t else {
            objs.push(k.clone());
            continue;
        };
        let earlier = tensors[..i]
            .iter()
            .zip(objs.iter())
            .find_map(|(e, o)| e.as_ref().filter(|e| e.same(t)).map(|_| o.clone()));
        let obj = match earlier {
            Some(o) => Ok(o),
            None if t.key() == DispatchKey::CPU => match objs_given.get(i) {
                Some(g) => lent_array(g, t),
                None => kernel_array(py, t, false),
            },
            None => wrap(py, t.clone()),
        };
        match obj {
            Ok(o) => objs.push(o),
            Err(e) => return Err(kernel_err(maps, e)),
        }
    }
    let wrapper = array.then(|| func.cast::<ArrayKernel>().ok()).flatten();
    let out = match wrapper {
        Some(w) => {
            vectorcall(w.get().kernel.bind(py), objs.as_slice()).and_then(|out| w.get().finish(out))
        }
        None => vectorcall(func, objs.as_slice()),
    };
    let out = match out {
        Ok(o) => o,
        Err(e) => return Err(kernel_err(maps, e)),
    };
    // 3. The result to the device, timed from here: for Native, its copy into host memory just
    // below is that step's move.
    maps.kernel_done();
    // The return as the kernel wrapper converts it: an argument's array is that argument's
    // tensor; a new NumPy array, for Native, goes into host memory at once (the one copy
    // `from_cpu` would make of it; if it cannot, `from_cpu` says why).
    let passed = tensors
        .iter()
        .zip(objs.iter())
        .find_map(|(t, o)| t.filter(|_| o.is(&out)).cloned());
    let plain = match passed {
        // SAFETY: an object whose type is exactly `ndarray` is a NumPy array (told by its
        // type pointer, without PyO3's look-up of the class). Exercised by every Native
        // fallback to a NumPy kernel (test_native.py, test_fast_fallback.py).
        None if key == DispatchKey::NATIVE && is_exact_ndarray(&out) => {
            Some(unsafe { out.cast_unchecked::<numpy::PyUntypedArray>() })
        }
        _ => None,
    };
    let cpu = match (passed, plain) {
        (Some(t), _) => t,
        (None, Some(arr)) => match crate::python::tensor::plain_numpy_to_cpu(arr) {
            Ok(t) => t,
            Err(_) => crate::python::tensor::numpy_tensor(&out),
        },
        (None, None) => match crate::python::convert::to_tensor(&out, &mut Passed::default()) {
            Ok(t) => t,
            Err(m) => {
                return Err(maps.kernel_error(ret_error(op, schema, cpu_keys, 0, m)));
            }
        },
    };
    maps.ret(cpu)
}
