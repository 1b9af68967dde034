//! The CPU kernel `boxfall.array_api` registers for each function of the standard
//! ([`ArrayKernel`]), which the fast path recognises and calls without its own frame.

use pyo3::prelude::*;

use super::convert::is_numpy_array;

/// The CPU kernel `boxfall.array_api` registers for a function of the standard
/// (`array_kernel`): a call gives the function's result as `as_arrays(result)` does (NumPy
/// returns NumPy scalars for 0-d results, where an operator returns arrays); a NumPy array, the
/// result of nearly every call, comes back as it is without calling `as_arrays`. The fast path
/// calls `kernel` itself with the caller's argument array and then `finish` (`PyKernel::array`),
/// sparing the argument tuple a call of this object makes.
#[pyclass(frozen, module = "boxfall._boxfall", name = "ArrayKernel")]
pub struct ArrayKernel {
    /// The function of the standard's CPU kernel.
    pub kernel: Py<PyAny>,
    as_arrays: Py<PyAny>,
}

impl ArrayKernel {
    /// `out`, the kernel's result, as the operator returns it.
    #[inline]
    pub fn finish<'py>(&self, out: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if is_numpy_array(&out) {
            return Ok(out);
        }
        self.as_arrays.bind(out.py()).call1((out,))
    }
}

#[pymethods]
impl ArrayKernel {
    /// `as_arrays(kernel(*args, **kwargs))`, NumPy arrays as they are.
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        args: &Bound<'py, pyo3::types::PyTuple>,
        kwargs: Option<&Bound<'py, pyo3::types::PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.finish(self.kernel.bind(args.py()).call(args, kwargs)?)
    }

    /// The function it calls.
    #[getter]
    fn __wrapped__(&self, py: Python<'_>) -> Py<PyAny> {
        self.kernel.clone_ref(py)
    }
}

/// `array_kernel(kernel, as_arrays)`: the CPU kernel `boxfall.array_api` registers for
/// `kernel` (an [`ArrayKernel`]). A Python function around each kernel was two more Python
/// frames on every call of every operator of the standard, a quarter of `x + y` on one element
/// through the CPU fallback.
#[pyfunction]
pub fn array_kernel(kernel: Py<PyAny>, as_arrays: Py<PyAny>) -> ArrayKernel {
    ArrayKernel { kernel, as_arrays }
}
