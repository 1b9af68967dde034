//! The functions of `boxfall.array_api`'s namespaces, as objects that hand a call to its
//! operator with no Python frame of their own in the common case (an array argument, scalars
//! that bind as they are), and to the Python function that handles every other case.
//!
//! On a device whose own call is long (a TPU's host, ~120 us to launch one JAX program), the
//! Python frame of a namespace function ran with the processor's caches cold after each launch
//! and cost several microseconds: `python benches/jax_device.py --costs` shows the share.

use std::sync::atomic::AtomicBool;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString, PyTuple};

use super::convert::is_exact_ndarray;
use super::ffi::{self, Entry, Return, VectorArgs, Vectorcall};
use super::tensor::as_tensor;
use super::view_function::ViewRoute;

/// A `bf.Tensor` or a NumPy `ndarray`, by exact type (a subclass takes the Python function).
fn is_array(obj: &Bound<'_, PyAny>) -> bool {
    as_tensor(obj).is_some() || is_exact_ndarray(obj)
}

/// A Python `bool`, `float`, or `int` within int64, by exact type: what a `Scalar` argument
/// binds as it is (a wider int, a complex or a NumPy scalar takes the Python function).
fn is_plain_scalar(obj: &Bound<'_, PyAny>) -> bool {
    if obj.is_exact_instance_of::<PyFloat>() || obj.is_exact_instance_of::<PyBool>() {
        return true;
    }
    obj.is_exact_instance_of::<PyInt>() && obj.extract::<i64>().is_ok()
}

/// What a namespace function says of itself (`__name__`, `__wrapped__`: the Python function,
/// whose signature `inspect.signature` reads through it).
struct Described {
    name: Py<PyString>,
    general: Py<PyAny>,
}

impl Described {
    fn new(general: &Bound<'_, PyAny>) -> PyResult<Described> {
        Ok(Described {
            name: general
                .getattr("__name__")?
                .cast_into::<PyString>()?
                .unbind(),
            general: general.clone().unbind(),
        })
    }
}

/// Which calls a namespace function hands to its operator directly, and to which overload.
enum FunctionRoute {
    /// A binary function of the standard (`add`, `equal`, ...): two arrays go to the operator
    /// `both`, an array and a plain scalar to `right` (`Tensor_Scalar`), a plain scalar and an
    /// array to `left` (`Scalar_Tensor`); any other call (keywords, NumPy scalars, complex or
    /// wide ints, other types) to the Python function, which handles (or refuses) it.
    Binary {
        both: Py<PyAny>,
        right: Py<PyAny>,
        left: Py<PyAny>,
    },
    /// Any other function of the standard that is one operator: a call whose first argument
    /// is not a NumPy scalar and that asks for no `dtype` (by position `dtype_at`, or by
    /// keyword) goes to the operator `op` as it is; any other to the Python function, which
    /// turns NumPy scalars into arrays and a requested dtype into what the device holds.
    Operator {
        op: Py<PyAny>,
        dtype_at: Option<usize>,
    },
    /// `expand_dims` or `matrix_transpose`: a view whose layout it knows is made in Rust
    /// (`view_function.rs`); any other call goes to the Python function, whose view's layout
    /// it then keeps.
    View(ViewRoute),
}

impl FunctionRoute {
    /// The overload that takes this call directly, if one does (with the keywords it gets):
    /// `positional` the call's positional arguments, `keywords` whether it passed any, and
    /// `dtype_asked` whether it passed a `dtype` other than None by keyword (asked only where
    /// it decides).
    #[inline(always)]
    fn direct<'a, 'py>(
        &'a self,
        positional: &[Bound<'py, PyAny>],
        keywords: bool,
        dtype_asked: impl FnOnce() -> bool,
    ) -> Option<&'a Py<PyAny>> {
        match self {
            FunctionRoute::Binary { both, right, left } => {
                let [x1, x2] = positional else {
                    return None;
                };
                if keywords {
                    return None;
                }
                match (is_array(x1), is_array(x2)) {
                    (true, true) => Some(both),
                    (true, false) if is_plain_scalar(x2) => Some(right),
                    (false, true) if is_plain_scalar(x1) => Some(left),
                    _ => None,
                }
            }
            FunctionRoute::Operator { op, dtype_at } => {
                operator_takes(*dtype_at, positional, keywords && dtype_asked()).then_some(op)
            }
            // Its own call (`ViewRoute::call`): never an operator directly.
            FunctionRoute::View(_) => None,
        }
    }
}

/// Whether an operator function's operator takes the call as it is: an array first, and no
/// dtype asked (by position `dtype_at`, or by keyword: `dtype_by_keyword`).
fn operator_takes(
    dtype_at: Option<usize>,
    positional: &[Bound<'_, PyAny>],
    dtype_by_keyword: bool,
) -> bool {
    if !positional.first().is_some_and(is_array) {
        return false;
    }
    let Some(at) = dtype_at else {
        return true;
    };
    positional.len() <= at && !dtype_by_keyword
}

/// Whether a keyword value asks for a dtype (None asks for none).
fn asks(value: Option<&Bound<'_, PyAny>>) -> bool {
    value.is_some_and(|d| !d.is_none())
}

/// A function of `boxfall.array_api`'s namespaces: the calls its route takes go to an
/// operator's overload with no Python frame; every other call to the Python function it
/// wraps, whose name, documentation and signature it shows.
#[pyclass(frozen, dict, module = "boxfall._boxfall", name = "NamespaceFunction")]
pub struct NamespaceFunction {
    /// Where a call from Python enters, read by the interpreter at the offset the class names
    /// (see `ffi/entry.rs`): a call the route takes goes on to its operator, and any other to
    /// the Python function, with the caller's own arguments, where `__call__` had the
    /// interpreter make a tuple and a dict of them, and the operator's entry unpack them again
    /// (about 0.2 us of a namespace function's call on the x86 VM).
    vectorcall: Entry,
    route: FunctionRoute,
    about: Described,
}

/// Whether the class was switched over to vectorcall.
static INSTALLED: AtomicBool = AtomicBool::new(false);

impl NamespaceFunction {
    fn new<'py>(
        route: FunctionRoute,
        general: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, NamespaceFunction>> {
        let made = Bound::new(
            general.py(),
            NamespaceFunction {
                vectorcall: ffi::entry::<NamespaceFunction>(),
                route,
                about: Described::new(general)?,
            },
        )?;
        described_as(made.as_any(), general)?;
        Ok(made)
    }

    /// A call by tuple and dict (the first ones, before the class takes vectorcalls, and the
    /// view route's).
    fn call_with<'py>(
        &self,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = args.py();
        let general = self.about.general.bind(py);
        if let FunctionRoute::View(view) = &self.route {
            return view.call(general, args, kwargs);
        }
        let keywords = kwargs.is_some_and(|k| !k.is_empty());
        let dtype = || kwargs.is_some_and(|k| asks(k.get_item("dtype").ok().flatten().as_ref()));
        match self.route.direct(args.as_slice(), keywords, dtype) {
            Some(op) => op.bind(py).call(args, kwargs),
            None => general.call(args, kwargs),
        }
    }
}

/// A call the route takes is its operator's call, and any other the Python function's, each
/// with the caller's own arguments (no frame of ours on the way); the view route's goes by
/// `call_with`, in PyO3's trampoline.
impl Vectorcall for NamespaceFunction {
    #[inline(always)]
    fn vectorcall<'a, 'py>(slf: &Borrowed<'a, 'py, Self>, args: VectorArgs<'a, 'py>) -> Return {
        let py = slf.py();
        let this = slf.get();
        if let FunctionRoute::View(_) = &this.route {
            return args.general(slf);
        }
        let dtype = || asks(args.keyword(pyo3::intern!(py, "dtype")));
        match this
            .route
            .direct(args.positional(), args.has_keywords(), dtype)
        {
            Some(op) => args.forward(op.bind(py)),
            None => args.forward(this.about.general.bind(py)),
        }
    }

    fn call<'py>(
        slf: &Bound<'py, Self>,
        positional: &[Bound<'py, PyAny>],
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = PyTuple::new(slf.py(), positional)?;
        slf.get().call_with(&args, kwargs)
    }
}

#[pymethods]
impl NamespaceFunction {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ffi::install_vectorcall(&INSTALLED, slf, &slf.get().vectorcall);
        slf.get().call_with(args, kwargs)
    }

    /// The function's name in the namespace.
    #[getter]
    fn __name__(&self, py: Python<'_>) -> Py<PyString> {
        self.about.name.clone_ref(py)
    }

    /// The function's name in the namespace.
    #[getter]
    fn __qualname__(&self, py: Python<'_>) -> Py<PyString> {
        self.about.name.clone_ref(py)
    }

    /// The Python function that serves every call the operators do not take directly.
    #[getter]
    fn __wrapped__(&self, py: Python<'_>) -> Py<PyAny> {
        self.about.general.clone_ref(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<function boxfall.array_api.{}>", self.about.name.bind(py))
    }

    /// As a Python function does: bound to the instance it is read from as a class attribute
    /// (a method), itself when read from the class.
    fn __get__<'py>(
        slf: &Bound<'py, Self>,
        instance: Option<&Bound<'py, PyAny>>,
        _owner: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        bound_to(slf.as_any(), instance)
    }
}

/// `binary_function(both, right, left, general)`: a [`NamespaceFunction`] of the binary route.
#[pyfunction]
pub fn binary_function<'py>(
    both: Py<PyAny>,
    right: Py<PyAny>,
    left: Py<PyAny>,
    general: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, NamespaceFunction>> {
    NamespaceFunction::new(FunctionRoute::Binary { both, right, left }, general)
}

/// `operator_function(op, general, dtype_at)`: a [`NamespaceFunction`] of the operator route.
#[pyfunction]
#[pyo3(signature = (op, general, dtype_at=None))]
pub fn operator_function<'py>(
    op: Py<PyAny>,
    general: &Bound<'py, PyAny>,
    dtype_at: Option<usize>,
) -> PyResult<Bound<'py, NamespaceFunction>> {
    NamespaceFunction::new(FunctionRoute::Operator { op, dtype_at }, general)
}

/// `function` bound to `instance` (`types.MethodType`), or itself where there is none.
fn bound_to<'py>(
    function: &Bound<'py, PyAny>,
    instance: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    match instance {
        Some(obj) if !obj.is_none() => function
            .py()
            .import(pyo3::intern!(function.py(), "types"))?
            .getattr(pyo3::intern!(function.py(), "MethodType"))?
            .call1((function, obj)),
        _ => Ok(function.clone()),
    }
}

/// The function's `__doc__` and `__module__` in its own `__dict__`, which an instance's lookup
/// finds before the class's (a getter could not: the class's docstring takes its place).
fn described_as(made: &Bound<'_, PyAny>, general: &Bound<'_, PyAny>) -> PyResult<()> {
    for name in ["__doc__", "__module__"] {
        made.setattr(name, general.getattr(name)?)?;
    }
    Ok(())
}

/// `view_function(general)`: a [`NamespaceFunction`] of the view route, for the namespace's
/// `expand_dims` or `matrix_transpose` (by `general.__name__`).
#[pyfunction]
pub fn view_function<'py>(general: &Bound<'py, PyAny>) -> PyResult<Bound<'py, NamespaceFunction>> {
    let name: String = general.getattr("__name__")?.extract()?;
    NamespaceFunction::new(FunctionRoute::View(ViewRoute::of(&name)?), general)
}
