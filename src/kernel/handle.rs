//! The operator's handle: its name, schema, table, metrics and tags.

use std::sync::atomic::AtomicU8;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::key::DispatchKeySet;
use crate::metrics::OpMetrics;
use crate::rcu::{self, leave_holding};
use crate::schema::OpSchema;

use super::types::{DispatchTable, OperatorEntry, OperatorHandle};

/// What an operator says of itself beyond its schema, as c10's `at::Tag`s do; read where a
/// generic part of the dispatcher (a backend's handling of the fallback's results) needs it.
///
/// ```
/// use boxfall::{kernel::Tag, Library, LibraryKind};
/// let mut lib = Library::new("doc_tag", LibraryKind::Def).unwrap();
/// let op = lib.define("argmax(Tensor x) -> Tensor").unwrap();
/// assert!(!op.has_tag(Tag::DefaultDtypes));
/// op.set_tag(Tag::DefaultDtypes, true);
/// assert!(op.has_tag(Tag::DefaultDtypes));
/// assert_eq!(Tag::from_name("default_dtypes"), Some(Tag::DefaultDtypes));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    /// The dtypes of its tensor results are the library's choice where the array API standard
    /// lets it choose (indices, counts: the default indexing dtype), not the caller's: on a
    /// device that lacks the dtype its CPU kernel made, a backend may give the device's
    /// default dtype of that kind instead of refusing the result.
    DefaultDtypes = 1,
}

impl Tag {
    /// Every tag.
    pub const ALL: [Tag; 1] = [Tag::DefaultDtypes];

    /// The tag's name (`"default_dtypes"`), as Python's `Library.define(tags=)` takes it.
    pub const fn name(self) -> &'static str {
        match self {
            Tag::DefaultDtypes => "default_dtypes",
        }
    }

    /// The tag of `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Tag> {
        Tag::ALL.into_iter().find(|t| t.name() == name)
    }
}

// An operator names the results it made, for an error raised when their payload is made.
impl crate::tensor::Origin for OperatorEntry {
    fn name(&self) -> String {
        self.name.clone()
    }
}

impl OperatorHandle {
    /// The operator as the [`Origin`](crate::tensor::Origin) of its results: a reference
    /// count, no allocation.
    ///
    /// ```
    /// let mut lib = boxfall::Library::new("doc_origin", boxfall::LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert_eq!(op.origin().name(), "doc_origin::f");
    /// ```
    pub fn origin(&self) -> std::sync::Arc<dyn crate::tensor::Origin> {
        self.0.clone()
    }
}

impl OperatorHandle {
    /// `ns::op` or `ns::op.overload`.
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_name", LibraryKind::Def).unwrap();
    /// let op = lib.define("f.overload(Tensor x) -> Tensor").unwrap();
    /// assert_eq!(op.name(), "doc_op_name::f.overload");
    /// ```
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The schema, if the operator is defined now.
    ///
    /// ```
    /// use boxfall::{Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_schema", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert_eq!(op.schema().unwrap().text, "doc_op_schema::f(Tensor x) -> Tensor");
    /// lib.close();
    /// assert!(op.schema().is_err()); // no longer defined
    /// ```
    pub fn schema(&self) -> Result<Arc<OpSchema>> {
        let g = rcu::read();
        self.0
            .table
            .load(&g)
            .schema
            .clone()
            .ok_or_else(|| self.undefined())
    }

    /// Runs `f` on the operator's table as a call on `keys` would see it, as a kernel that
    /// reads the table does when it is called boxed, not dispatched. If a kernel at or below
    /// the highest of `keys` runs long, `f` runs outside the dispatcher's read section, on the
    /// table held by a count.
    ///
    /// ```
    /// use boxfall::{DispatchKey, Library, LibraryKind};
    /// let mut lib = Library::new("doc_with_table", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(int x) -> int").unwrap();
    /// assert!(op.with_table(DispatchKey::CPU.set(), |t| t.kernel(DispatchKey::CPU.set()).is_none()));
    /// ```
    #[inline]
    pub fn with_table<T>(&self, keys: DispatchKeySet, f: impl FnOnce(&DispatchTable) -> T) -> T {
        let g = rcu::read();
        let table = self.0.table.load(&g);
        let reach = keys.highest().map_or(0, |h| u64::MAX >> (63 - h.index()));
        if table.long & reach != 0 {
            let owned = leave_holding!(g, table);
            return f(&owned);
        }
        f(table)
    }

    pub(crate) fn undefined(&self) -> Error {
        Error::UnknownOperator {
            name: self.0.name.clone(),
            suggestions: vec![],
        }
    }

    /// The operator's fallback counters.
    ///
    /// ```
    /// use boxfall::{metrics::OpStats, Library, LibraryKind};
    /// let mut lib = Library::new("doc_op_metrics", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert_eq!(op.metrics().snapshot(), OpStats::default()); // never fell back
    /// ```
    pub fn metrics(&self) -> &OpMetrics {
        &self.0.metrics
    }

    pub(crate) fn policy_cell(&self) -> &AtomicU8 {
        &self.0.policy
    }

    /// Whether the operator has `tag` ([`Tag`]).
    #[inline]
    pub fn has_tag(&self, tag: Tag) -> bool {
        self.0.tags.load(std::sync::atomic::Ordering::Relaxed) & tag as u8 != 0
    }

    /// Gives the operator `tag`, or takes it away (see [`Tag`] for an example).
    pub fn set_tag(&self, tag: Tag, on: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        if on {
            self.0.tags.fetch_or(tag as u8, Relaxed);
        } else {
            self.0.tags.fetch_and(!(tag as u8), Relaxed);
        }
    }

    /// What a backend moving a result of the operator is told of it
    /// ([`Backend::from_cpu_result`](crate::backend::Backend::from_cpu_result); see
    /// [`crate::backend::ResultOf`] for an example).
    #[inline(always)]
    pub fn result_of(&self) -> crate::backend::ResultOf<'_> {
        crate::backend::ResultOf {
            op: &self.0.name,
            default_dtypes: self.has_tag(Tag::DefaultDtypes),
            metrics: &self.0.metrics,
        }
    }

    /// The operator's tags.
    ///
    /// ```
    /// use boxfall::{kernel::Tag, Library, LibraryKind};
    /// let mut lib = Library::new("doc_tags", LibraryKind::Def).unwrap();
    /// let op = lib.define("f(Tensor x) -> Tensor").unwrap();
    /// assert!(op.tags().is_empty());
    /// ```
    pub fn tags(&self) -> Vec<Tag> {
        Tag::ALL.into_iter().filter(|t| self.has_tag(*t)).collect()
    }
}
