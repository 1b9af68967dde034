//! Operator schemas: the data model, a parser and the canonical printer for PyTorch's schema
//! language, and the per-operator facts the dispatcher and the CPU fallback read.
//!
//! ```
//! use boxfall::schema::{ArgKind, FunctionSchema};
//! let text = "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)";
//! let s = FunctionSchema::parse(text)?;
//! assert_eq!(s.operator_name(), "aten::add_.Tensor");
//! assert_eq!(s.to_string(), text);
//! let info = s.info();
//! assert_eq!(info.args[0].kind, ArgKind::Tensor);
//! assert_eq!(info.returns[0].aliases_arg, Some(0));
//! # Ok::<(), boxfall::SchemaError>(())
//! ```
//!
//! Files: `types.rs` the data model, `lexer.rs` and `parser.rs` the reader, `syntax.rs` what the
//! reader produces (spans into the text) and how the data model is built from it, `printer.rs`
//! the writer, `info.rs` the precomputed facts.
#![warn(missing_docs)]

mod info;
mod lexer;
mod parser;
mod printer;
mod syntax;
mod types;

pub use info::{ArgFacts, ArgKind, OpSchema, ReturnFacts, SchemaInfo};
#[cfg(feature = "python")]
pub(crate) use syntax::Syntax;
pub use types::{AliasInfo, Argument, DefaultValue, FunctionSchema, Literal, Type};
