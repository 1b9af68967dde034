//! The one error type of the core. The Python bindings map each variant onto one exception of
//! the `bf.BoxfallError` tree (see `src/python/errors.rs`).

use std::fmt;

/// A schema that does not parse: what is wrong, where, and the text with a caret under the spot.
///
/// ```
/// let err = boxfall::FunctionSchema::parse("demo::f(Tensr x) -> Tensor").unwrap_err();
/// assert_eq!(err.column, 9);
/// assert!(err.to_string().contains("unknown type 'Tensr'"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// What is wrong, in words.
    pub message: String,
    /// The 1-based column (in characters) of the offending spot.
    pub column: usize,
    /// The schema text as given.
    pub text: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pad = " ".repeat(self.column.saturating_sub(1));
        write!(
            f,
            "{} at column {}:\n  {}\n  {}^",
            self.message, self.column, self.text, pad
        )
    }
}

impl std::error::Error for SchemaError {}

/// Every failure the core reports. Cloned where one failure is raised again at each read (a
/// pending tensor whose node failed in graph mode).
///
/// ```
/// let e = boxfall::Error::UnknownOperator { name: "demo::nope".into(), suggestions: vec![] };
/// assert!(e.to_string().contains("demo::nope"));
/// ```
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A schema did not parse.
    #[error("{0}")]
    Schema(#[from] SchemaError),
    /// A definition, kernel or fallback could not be registered.
    #[error("{0}")]
    Registration(String),
    /// A name that is no operator.
    #[error("unknown operator '{name}'{}", suggest(.suggestions))]
    UnknownOperator {
        /// The name asked for.
        name: String,
        /// The closest defined names.
        suggestions: Vec<String>,
    },
    /// A namespace in which no operator is defined (`bf.coverage(.., namespace=)`,
    /// `Dispatcher::coverage`).
    ///
    /// ```
    /// let e = boxfall::Error::UnknownNamespace { name: "zz".into(), known: vec!["demo".into()] };
    /// assert_eq!(e.to_string(), "no operator is defined in namespace 'zz'; namespaces with operators: [demo]");
    /// ```
    #[error("no operator is defined in namespace '{name}'; namespaces with operators: [{}]", .known.join(", "))]
    UnknownNamespace {
        /// The namespace asked for.
        name: String,
        /// The namespaces that hold a defined operator now.
        known: Vec<String>,
    },
    /// A name that is no dispatch key.
    #[error("unknown dispatch key '{name}'; known keys: [{}]", .known.join(", "))]
    UnknownKey {
        /// The name asked for.
        name: String,
        /// Every key known now.
        known: Vec<String>,
    },
    /// No kernel serves the call's highest key.
    ///
    /// ```
    /// let e = boxfall::Error::NoKernel {
    ///     op: "demo::f".into(),
    ///     key: "CPU".into(),
    ///     available: vec!["CPU".into()],
    ///     excluded: vec!["CPU".into()],
    /// };
    /// assert_eq!(
    ///     e.to_string(),
    ///     "Could not run 'demo::f' with arguments from the 'CPU' backend, which is excluded on this thread (bf.exclude_keys: [CPU]). 'demo::f' is only available for these backends: [CPU]."
    /// );
    /// ```
    #[error("{}", no_kernel_text(.op, .key, .available, .excluded))]
    NoKernel {
        /// The operator's name.
        op: String,
        /// The key that had nothing (for a call whose every key is excluded, the highest of
        /// its arguments' keys).
        key: String,
        /// The keys that do have a kernel of the operator's own, lowest priority first.
        available: Vec<String>,
        /// The keys the calling thread excluded (`exclude_keys`), lowest priority first.
        excluded: Vec<String>,
    },
    /// Arguments that do not bind to the operator's schema.
    #[error("{op}(): {message}\n  schema: {schema}")]
    Argument {
        /// The operator's name.
        op: String,
        /// What is wrong.
        message: String,
        /// The schema, as printed.
        schema: String,
    },
    /// The fallback refused the call or one of its steps failed.
    #[error("{0}")]
    Fallback(String),
    /// A kernel reported an error; `context` names the operator and key.
    #[error("{context}: {message}")]
    Kernel {
        /// Which operator and key ran.
        context: String,
        /// The kernel's own message.
        message: String,
    },
    /// Memory for a tensor's data could not be allocated, or its size does not fit in the
    /// address space. Nothing was changed (the bindings raise `MemoryError`).
    ///
    /// ```
    /// let e = boxfall::Error::OutOfMemory { what: "the result of 'demo::add'".into(), bytes: Some(1 << 40) };
    /// assert_eq!(e.to_string(), "out of memory: the result of 'demo::add' needs 1099511627776 bytes, which cannot be allocated");
    /// ```
    #[error("out of memory: {what} needs {}, which cannot be allocated", bytes_text(*.bytes))]
    OutOfMemory {
        /// What the memory was for (names the operator where there is one).
        what: String,
        /// The bytes asked for; `None` when the count overflows.
        bytes: Option<usize>,
    },
    /// An element type that host memory cannot hold (the bindings raise `bf.DTypeError`, a
    /// `TypeError`).
    ///
    /// ```
    /// let e = boxfall::Error::DType {
    ///     dtype: "float16".into(),
    ///     context: "a Native tensor".into(),
    ///     supported: boxfall::DType::supported_names(),
    /// };
    /// assert!(e.to_string().contains("float16"));
    /// assert!(e.to_string().contains("bool, int8, uint8, int16"));
    /// ```
    #[error("{context} cannot hold dtype {dtype}; the supported dtypes are {supported}")]
    DType {
        /// The element type asked for, as its library names it (NumPy's `dtype.str` or name).
        dtype: String,
        /// What was to hold it.
        context: String,
        /// The dtypes it can hold, as the message lists them (`DType::supported_names`): the
        /// error carries the text it prints, so this module stands below the tensor types.
        supported: String,
    },
    /// A result of a dtype that a backend's device does not hold (a backend registered with
    /// the dtypes its device holds): raised before the result is moved to the device. The
    /// bindings raise `bf.DTypeError`, a `TypeError`.
    ///
    /// ```
    /// let e = boxfall::Error::DeviceDType {
    ///     dtype: "float64".into(),
    ///     backend: "Accel".into(),
    ///     held: vec!["float32".into()],
    ///     op: Some("demo::f".into()),
    /// };
    /// let text = e.to_string();
    /// assert!(text.contains("'demo::f'") && text.contains("float64") && text.contains("'Accel'"));
    /// ```
    #[error(
        "{}a {dtype} result, and backend '{backend}' holds no {dtype} (its dtypes: {}); cast to a dtype it holds first",
        op.as_ref().map(|o| format!("'{o}' gives ")).unwrap_or_default(),
        held.join(", ")
    )]
    DeviceDType {
        /// The result's dtype, as NumPy names it.
        dtype: String,
        /// The backend whose device was to hold it.
        backend: String,
        /// The dtypes the backend holds.
        held: Vec<String>,
        /// The operator that gave it, where known.
        op: Option<String>,
    },
    /// An error raised by a foreign (e.g. Python) kernel, carried through the core unchanged.
    #[error("{message}")]
    Foreign {
        /// A short description for Rust callers.
        message: String,
        /// The foreign error object itself, for the bindings to re-raise.
        payload: ForeignError,
    },
}

fn bytes_text(bytes: Option<usize>) -> String {
    match bytes {
        Some(n) => format!("{n} bytes"),
        None => "more bytes than the address space holds".into(),
    }
}

/// c10's text, and what the thread excluded: whether the key itself was, or which others were.
fn no_kernel_text(op: &str, key: &str, available: &[String], excluded: &[String]) -> String {
    let list = excluded.join(", ");
    let (why, after) = if excluded.iter().any(|k| k == key) {
        (
            format!(", which is excluded on this thread (bf.exclude_keys: [{list}])"),
            String::new(),
        )
    } else if excluded.is_empty() {
        (String::new(), String::new())
    } else {
        (
            String::new(),
            format!(" Excluded on this thread (bf.exclude_keys): [{list}]."),
        )
    };
    format!(
        "Could not run '{op}' with arguments from the '{key}' backend{why}. '{op}' is only available for these backends: [{}].{after}",
        available.join(", ")
    )
}

fn suggest(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!("; did you mean: {}?", names.join(", "))
    }
}

/// An opaque foreign error (a Python exception) that travels through the core, with the notes
/// the core added on the way (which step, operator and backend it came through), for the
/// bindings to attach to the original exception.
///
/// ```
/// let e = boxfall::ForeignError::new(42_u32);
/// assert_eq!(e.downcast_ref::<u32>(), Some(&42));
/// assert!(e.notes().is_empty());
/// ```
#[derive(Clone)]
pub struct ForeignError {
    value: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    notes: Vec<String>,
}

impl ForeignError {
    /// Wraps any value.
    ///
    /// ```
    /// let e = boxfall::ForeignError::new(String::from("boom"));
    /// assert_eq!(e.downcast_ref::<String>().map(String::as_str), Some("boom"));
    /// ```
    pub fn new<T: std::any::Any + Send + Sync>(value: T) -> Self {
        ForeignError {
            value: std::sync::Arc::new(value),
            notes: Vec::new(),
        }
    }
    /// The value, if it is a `T`.
    ///
    /// ```
    /// let e = boxfall::ForeignError::new(7_i32);
    /// assert_eq!(e.downcast_ref::<i32>(), Some(&7));
    /// assert!(e.downcast_ref::<u32>().is_none());
    /// ```
    pub fn downcast_ref<T: std::any::Any>(&self) -> Option<&T> {
        self.value.downcast_ref::<T>()
    }
    /// The notes the core added, oldest first.
    ///
    /// ```
    /// let mut e = boxfall::ForeignError::new(());
    /// e.add_note("while running 'demo::f' through the CPU fallback for 'Accel'".into());
    /// assert_eq!(e.notes().len(), 1);
    /// ```
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
    /// Adds a note (once: a note it already has is not added again).
    ///
    /// ```
    /// let mut e = boxfall::ForeignError::new(());
    /// e.add_note("n".into());
    /// e.add_note("n".into());
    /// assert_eq!(e.notes(), ["n"]);
    /// ```
    pub fn add_note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }
}

impl Error {
    /// The error with `note` added: a foreign error keeps its own object and carries the note
    /// (its text gets it too); any other error is returned as it is (its own text says where).
    ///
    /// ```
    /// let e = boxfall::Error::Foreign { message: "OSError: broke".into(), payload: boxfall::ForeignError::new(()) };
    /// let e = e.with_foreign_note("while running 'demo::f'".into());
    /// assert_eq!(e.to_string(), "OSError: broke (while running 'demo::f')");
    /// ```
    pub fn with_foreign_note(self, note: String) -> Error {
        match self {
            Error::Foreign {
                message,
                mut payload,
            } => {
                let message = format!("{message} ({note})");
                payload.add_note(note);
                Error::Foreign { message, payload }
            }
            other => other,
        }
    }
}

impl fmt::Debug for ForeignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ForeignError(..)")
    }
}

/// The core's result type.
///
/// ```
/// fn f() -> boxfall::Result<i32> { Ok(1) }
/// assert_eq!(f().unwrap(), 1);
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
