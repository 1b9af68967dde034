//! `Library`: a set of registrations (definitions, kernels, fallbacks) that are undone together
//! when the library is closed or dropped, as torch.library's `Library` does.

use crate::dispatcher::{Dispatcher, OperatorHandle, Registration};
use crate::error::{Error, Result};
use crate::graph::rules::array_api_shape_rule;
use crate::kernel::KernelFunction;
use crate::key::DispatchKey;
use crate::schema::FunctionSchema;

/// What a library may do.
///
/// ```
/// assert_eq!("FRAGMENT".parse::<boxfall::LibraryKind>().unwrap(), boxfall::LibraryKind::Fragment);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LibraryKind {
    /// The one library that defines a namespace (define and impl).
    Def,
    /// Kernels and fallbacks only.
    Impl,
    /// More definitions for a namespace (define and impl).
    Fragment,
}

impl std::str::FromStr for LibraryKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "DEF" => Ok(LibraryKind::Def),
            "IMPL" => Ok(LibraryKind::Impl),
            "FRAGMENT" => Ok(LibraryKind::Fragment),
            other => Err(Error::Registration(format!(
                "library kind must be \"DEF\", \"IMPL\" or \"FRAGMENT\", not {other:?}"
            ))),
        }
    }
}

impl LibraryKind {
    fn as_str(self) -> &'static str {
        match self {
            LibraryKind::Def => "DEF",
            LibraryKind::Impl => "IMPL",
            LibraryKind::Fragment => "FRAGMENT",
        }
    }
}

/// Registrations of one namespace, undone when closed or dropped.
///
/// ```
/// use boxfall::{Dispatcher, Library, LibraryKind};
/// {
///     let mut lib = Library::new("doc_lib", LibraryKind::Def).unwrap();
///     lib.define("f(Tensor x) -> Tensor").unwrap();
///     assert!(Dispatcher::lookup("doc_lib::f").is_some());
/// }
/// assert!(Dispatcher::lookup("doc_lib::f").is_none());
/// ```
#[derive(Debug)]
pub struct Library {
    ns: String,
    kind: LibraryKind,
    description: String,
    registrations: Vec<Registration>,
    /// Its shape rules' registrations (graph mode's, `graph::rules`), undone at its close.
    shape_rules: Vec<crate::graph::rules::ShapeRuleRegistration>,
}

impl Library {
    /// Opens a library. A second `Def` library of one namespace is an error; namespace `_` is
    /// for fallbacks and takes only `Impl`.
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let _def = Library::new("doc_library_new", LibraryKind::Def).unwrap();
    /// assert!(Library::new("doc_library_new", LibraryKind::Def).is_err()); // one DEF per namespace
    /// assert!(Library::new("doc_library_new", LibraryKind::Fragment).is_ok());
    /// assert!(Library::new("_", LibraryKind::Def).is_err());
    /// assert!(Library::new("not-a-name", LibraryKind::Impl).is_err());
    /// ```
    pub fn new(ns: &str, kind: LibraryKind) -> Result<Library> {
        let description = format!("Library(\"{ns}\", \"{}\")", kind.as_str());
        if ns.is_empty() || !ns.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(Error::Registration(format!(
                "{description}: '{ns}' is not a valid namespace (letters, digits and '_')"
            )));
        }
        if ns == "_" && kind != LibraryKind::Impl {
            return Err(Error::Registration(format!(
                "{description}: namespace '_' holds fallbacks only; open it as \"IMPL\""
            )));
        }
        let mut registrations = Vec::new();
        if kind == LibraryKind::Def {
            registrations.push(Dispatcher::claim_def_namespace(ns, &description)?);
        }
        Ok(Library {
            ns: ns.to_string(),
            kind,
            description,
            registrations,
            shape_rules: Vec::new(),
        })
    }

    /// The namespace.
    ///
    /// ```
    /// let lib = boxfall::Library::new("doc_namespace", boxfall::LibraryKind::Impl).unwrap();
    /// assert_eq!(lib.namespace(), "doc_namespace");
    /// ```
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// The kind.
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let lib = Library::new("doc_kind", LibraryKind::Fragment).unwrap();
    /// assert_eq!(lib.kind(), LibraryKind::Fragment);
    /// ```
    pub fn kind(&self) -> LibraryKind {
        self.kind
    }

    /// Defines an operator from its schema, with or without the namespace
    /// (`"add.Tensor(Tensor self, Tensor other) -> Tensor"`).
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let mut lib = Library::new("doc_define", LibraryKind::Def).unwrap();
    /// let op = lib.define("add.Tensor(Tensor self, Tensor other) -> Tensor").unwrap();
    /// assert_eq!(op.name(), "doc_define::add.Tensor");
    /// assert!(lib.define("doc_define::neg(Tensor x) -> Tensor").is_ok());
    /// assert!(lib.define("elsewhere::f(Tensor x) -> Tensor").is_err()); // outside the namespace
    /// ```
    pub fn define(&mut self, schema: &str) -> Result<OperatorHandle> {
        if self.kind == LibraryKind::Impl {
            return Err(Error::Registration(format!(
                "{}: an IMPL library cannot define operators; use \"DEF\" or \"FRAGMENT\"",
                self.description
            )));
        }
        let parsed = match FunctionSchema::parse(schema) {
            Ok(s) => s,
            Err(e) if !schema.contains("::") => {
                let qualified = format!("{}::{schema}", self.ns);
                FunctionSchema::parse(&qualified).map_err(|mut q| {
                    // Report the column in the text the user wrote.
                    let shift = self.ns.len() + 2;
                    if q.column > shift {
                        q.column -= shift;
                        q.text = schema.to_string();
                        q
                    } else {
                        e
                    }
                })?
            }
            Err(e) => return Err(e.into()),
        };
        if parsed.namespace() != self.ns {
            return Err(Error::Registration(format!(
                "{}: cannot define '{}' outside namespace '{}'",
                self.description,
                parsed.operator_name(),
                self.ns
            )));
        }
        let (handle, reg) = Dispatcher::define(parsed, &self.description)?;
        self.registrations.push(reg);
        Ok(handle)
    }

    /// The full operator name for `name` (`"add.Tensor"` or `"demo::add.Tensor"`).
    ///
    /// ```
    /// let lib = boxfall::Library::new("doc_qualify", boxfall::LibraryKind::Impl).unwrap();
    /// assert_eq!(lib.qualify("add.Tensor"), "doc_qualify::add.Tensor");
    /// assert_eq!(lib.qualify("other::add"), "other::add");
    /// ```
    pub fn qualify(&self, name: &str) -> String {
        if name.contains("::") {
            name.to_string()
        } else {
            format!("{}::{name}", self.ns)
        }
    }

    /// Registers `kernel` for operator `name` at `key`. A second kernel for the same operator
    /// and key needs `allow_override`; closing the newer library brings the older one back.
    /// The operator must be in the library's own namespace (`Library("zz", ..)` registers
    /// nothing for `rs::relu`), and namespace `_` registers fallbacks only.
    ///
    /// ```
    /// use boxfall::{DispatchKey, KernelFunction as K, Library, LibraryKind};
    /// let mut lib = Library::new("doc_impl_kernel", LibraryKind::Def).unwrap();
    /// let f = lib.define("f(int x) -> int").unwrap().typed::<(i64,), i64>().unwrap();
    /// lib.impl_kernel("f", DispatchKey::CPU, K::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 1)), false).unwrap();
    /// let mut over = Library::new("doc_impl_kernel", LibraryKind::Impl).unwrap();
    /// assert!(over.impl_kernel("f", DispatchKey::CPU, K::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 2)), false).is_err());
    /// over.impl_kernel("f", DispatchKey::CPU, K::from_unboxed::<(i64,), i64>(|_, (x,)| Ok(x + 2)), true).unwrap();
    /// assert_eq!(f.call((0,)).unwrap(), 2);
    /// over.close();
    /// assert_eq!(f.call((0,)).unwrap(), 1); // the older kernel is back
    /// let mut elsewhere = Library::new("doc_impl_kernel_zz", LibraryKind::Impl).unwrap();
    /// assert!(elsewhere.impl_kernel("doc_impl_kernel::f", DispatchKey::CPU, K::fallthrough(), false).is_err());
    /// ```
    pub fn impl_kernel(
        &mut self,
        name: &str,
        key: DispatchKey,
        kernel: KernelFunction,
        allow_override: bool,
    ) -> Result<()> {
        let full = self.qualify(name);
        if self.ns == "_" {
            return Err(Error::Registration(format!(
                "{}: namespace '_' holds fallbacks only; register '{full}' in its own namespace",
                self.description
            )));
        }
        // As c10's TORCH_LIBRARY_IMPL blocks: a library's kernels are for its own namespace's
        // operators, so that closing a library undoes what its namespace says it did.
        let op_ns = full.split_once("::").map_or("", |(ns, _)| ns);
        if op_ns != self.ns {
            return Err(Error::Registration(format!(
                "{}: cannot register a kernel for '{full}', which is in namespace '{op_ns}', not \
                 this library's '{}'; register it from a library of its own namespace \
                 (Library(\"{op_ns}\", \"IMPL\")), or with @bf.impl(\"{full}\", ...)",
                self.description, self.ns
            )));
        }
        let reg = Dispatcher::register_impl(&full, key, kernel, allow_override, &self.description)?;
        self.registrations.push(reg);
        Ok(())
    }

    /// Registers `kernel` as `key`'s backend fallback, serving every operator without a kernel
    /// for `key` (only in namespace `_`).
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind, KernelFunction, key::register_functionality_key};
    /// let key = register_functionality_key("DocFallbackKey").unwrap();
    /// let mut fb = Library::new("_", LibraryKind::Impl).unwrap();
    /// fb.fallback(key, KernelFunction::fallthrough()).unwrap();
    /// assert!(fb.fallback(key, KernelFunction::fallthrough()).is_err());
    /// ```
    pub fn fallback(&mut self, key: DispatchKey, kernel: KernelFunction) -> Result<()> {
        if self.ns != "_" {
            return Err(Error::Registration(format!(
                "{}: fallbacks register only in namespace '_' (bf.Library(\"_\", \"IMPL\"))",
                self.description
            )));
        }
        let reg = Dispatcher::register_fallback(key, kernel, &self.description)?;
        self.registrations.push(reg);
        Ok(())
    }

    /// Undoes every registration of this library, newest first.
    ///
    /// ```
    /// use boxfall::{Dispatcher, Library, LibraryKind};
    /// let mut lib = Library::new("doc_close", LibraryKind::Def).unwrap();
    /// lib.define("f(Tensor x) -> Tensor").unwrap();
    /// lib.close();
    /// assert!(Dispatcher::lookup("doc_close::f").is_none());
    /// assert!(Library::new("doc_close", LibraryKind::Def).is_ok()); // the namespace is free again
    /// ```
    pub fn close(&mut self) {
        while let Some(r) = self.shape_rules.pop() {
            drop(r);
        }
        while let Some(r) = self.registrations.pop() {
            Dispatcher::deregister(&r);
        }
    }

    /// Whether the library still holds registrations.
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let mut lib = Library::new("doc_is_open", LibraryKind::Def).unwrap();
    /// assert!(lib.is_open()); // it holds the namespace
    /// lib.close();
    /// assert!(!lib.is_open());
    /// ```
    pub fn is_open(&self) -> bool {
        !self.registrations.is_empty() || !self.shape_rules.is_empty()
    }

    /// Registers `rule` as the shape rule of operator `name` (of this library's namespace, as a
    /// kernel is), which graph mode asks for the outputs of a call it records, as
    /// `torch.library.register_fake` registers a fake kernel: the newest registration serves
    /// until its library closes. The operator must be defined.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use boxfall::graph::rules::{array_api_shape_rule, has_shape_rule};
    /// use boxfall::{Library, LibraryKind};
    /// let mut lib = Library::new("doc_shape_rule", LibraryKind::Def).unwrap();
    /// let op = lib.define("add(Tensor x1, Tensor x2) -> Tensor").unwrap();
    /// // Any rule: here the array API's `add`'s.
    /// lib.register_shape_rule("add", array_api_shape_rule("array_api::add").unwrap()).unwrap();
    /// assert!(has_shape_rule(&op));
    /// assert!(lib.register_shape_rule("missing", array_api_shape_rule("array_api::add").unwrap()).is_err());
    /// ```
    pub fn register_shape_rule(
        &mut self,
        name: &str,
        rule: std::sync::Arc<dyn crate::graph::rules::ShapeRule>,
    ) -> Result<()> {
        let full = self.qualify(name);
        let op_ns = full.split_once("::").map_or("", |(ns, _)| ns);
        if op_ns != self.ns {
            return Err(Error::Registration(format!(
                "{}: cannot register a shape rule for '{full}', which is in namespace '{op_ns}', \
                 not this library's '{}'; register it from a library of its own namespace",
                self.description, self.ns
            )));
        }
        let op = Dispatcher::lookup(&full)
            .filter(|op| op.schema().is_ok())
            .ok_or_else(|| {
                Error::Registration(format!(
                    "{}: cannot register a shape rule for '{full}', which is not defined",
                    self.description
                ))
            })?;
        self.shape_rules
            .push(crate::graph::rules::register_shape_rule(&op, rule));
        Ok(())
    }

    /// Registers the array API's shape rules (`graph::rules`' table, the rules of
    /// `boxfall.array_api`'s operators) for this library's operators that have one; returns
    /// their names.
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let mut lib = Library::new("doc_api_rules", LibraryKind::Def).unwrap();
    /// lib.define("add(Tensor x1, Tensor x2) -> Tensor").unwrap();
    /// lib.define("nonzero(Tensor x) -> Tensor[]").unwrap();
    /// // Registered by the operators' names in the library's namespace, as the array API's.
    /// assert_eq!(lib.register_array_api_shape_rules().unwrap(), vec!["doc_api_rules::add"]);
    /// ```
    pub fn register_array_api_shape_rules(&mut self) -> Result<Vec<String>> {
        let mut done = Vec::new();
        for base in Dispatcher::operators_in(&self.ns) {
            for op in Dispatcher::overloads(&format!("{}::{base}", self.ns)) {
                let full = op.name().to_string();
                let Some((_, name)) = full.split_once("::") else {
                    continue;
                };
                let Some(rule) = array_api_shape_rule(&format!("array_api::{name}")) else {
                    continue;
                };
                self.register_shape_rule(&full, rule)?;
                done.push(full);
            }
        }
        Ok(done)
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        self.close();
    }
}
