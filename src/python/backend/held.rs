//! The dtypes a backend's device holds (`register_backend(dtypes=)`), and what a dtype it
//! lacks is narrowed to.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::tensor::DType;

/// The dtypes a backend's device holds (`register_backend(dtypes=)`): bit `i` stands for
/// `DType::ALL[i]`; `ext` names the extension dtypes NumPy knows beside them
/// (`ml_dtypes.bfloat16`, a TPU's own).
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Held {
    bits: u16,
    ext: Vec<String>,
}

/// Every dtype of the standard, as `Held` bits.
const ALL_BITS: u16 = (1 << DType::ALL.len()) - 1;

impl Held {
    /// Every dtype of the standard (`dtypes=None`): no result is checked.
    pub(super) fn all() -> Held {
        Held {
            bits: ALL_BITS,
            ext: Vec::new(),
        }
    }

    /// Whether no result is checked: every dtype of the standard and nothing else declared.
    pub(super) fn is_all(&self) -> bool {
        self.bits == ALL_BITS && self.ext.is_empty()
    }

    pub(super) fn of_names(
        py: Python<'_>,
        backend: &str,
        dtypes: &Bound<'_, PyAny>,
    ) -> PyResult<Held> {
        let np = py.import("numpy")?;
        let np_dtype = np.getattr("dtype")?;
        let void = np.getattr("void")?;
        let mut held = Held {
            bits: 0,
            ext: Vec::new(),
        };
        for d in dtypes.try_iter()? {
            let d = d?;
            let dtype = np_dtype.call1((&d,)).ok();
            let name = dtype
                .as_ref()
                .and_then(|t| t.getattr("name").ok())
                .and_then(|n| n.extract::<String>().ok());
            if let Some(i) = name
                .as_deref()
                .and_then(|n| DType::ALL.iter().position(|t| t.name() == n))
            {
                held.bits |= 1 << i;
                continue;
            }
            match (dtype, name) {
                (Some(t), Some(n)) if is_extension(&t, &void) => {
                    if !held.ext.contains(&n) {
                        held.ext.push(n);
                    }
                }
                _ => {
                    return Err(PyTypeError::new_err(format!(
                        "dtypes= of backend '{backend}' names {}, which is no dtype of the array API standard ({}) nor a numeric dtype NumPy knows (an extension dtype such as ml_dtypes.bfloat16); the backend was not registered",
                        d.repr()?,
                        DType::supported_names()
                    )))
                }
            }
        }
        if held.bits == 0 && held.ext.is_empty() {
            return Err(PyTypeError::new_err(format!(
                "dtypes= of backend '{backend}' names no dtype; the backend was not registered"
            )));
        }
        Ok(held)
    }

    pub(super) fn holds(&self, name: &str) -> bool {
        self.is_all()
            || DType::ALL
                .iter()
                .position(|t| t.name() == name)
                .map_or_else(
                    || self.ext.iter().any(|e| e == name),
                    |i| self.bits & (1 << i) != 0,
                )
    }

    /// The dtype a result of dtype `name` that the device lacks becomes where it is narrowed
    /// (JAX's rule without 64-bit types): the 32-bit one of its kind, where the device holds
    /// it. None for a dtype the device holds, or one with nothing to narrow to.
    pub(super) fn narrowed(&self, name: &str) -> Option<&'static str> {
        if self.holds(name) {
            return None;
        }
        let to = match name {
            "int64" => "int32",
            "uint64" => "uint32",
            "float64" => "float32",
            "complex128" => "complex64",
            _ => return None,
        };
        self.holds(to).then_some(to)
    }

    pub(super) fn names(&self) -> Vec<String> {
        DType::ALL
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bits & (1 << i) != 0)
            .map(|(_, t)| t.name().to_string())
            .chain(self.ext.iter().cloned())
            .collect()
    }
}

/// Whether a NumPy dtype outside the standard is an extension dtype a backend may declare: a
/// number NumPy knows (`float16`, or one registered with it, as `ml_dtypes`' are, whose kind
/// is `V` but whose scalar type is no `numpy.void`), not objects, strings, dates or records.
fn is_extension(dtype: &Bound<'_, PyAny>, void: &Bound<'_, PyAny>) -> bool {
    let kind = dtype
        .getattr("kind")
        .and_then(|k| k.extract::<String>())
        .unwrap_or_default();
    match kind.as_str() {
        "b" | "i" | "u" | "f" | "c" => true,
        "V" => dtype
            .getattr("type")
            .and_then(|t| {
                let t = t.cast_into::<pyo3::types::PyType>()?;
                let void = void.cast::<pyo3::types::PyType>()?;
                t.is_subclass(void)
            })
            .is_ok_and(|sub| !sub),
        _ => false,
    }
}
