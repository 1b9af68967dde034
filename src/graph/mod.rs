//! Graph mode: operators on a backend that compiles are recorded, not run,
//! and their results are pending until a sync point computes them in one compiled program.
//!
//! A graph backend's tensors carry the `Graph` functionality key (`key::carry_key`), whose
//! boxed fallback is the recorder (`record.rs`): a call records a node, with its outputs'
//! dtypes and shapes from the shape rules (`rules`), and returns pending tensors
//! (`pending.rs`); a call it cannot record is a counted graph break, which computes its
//! inputs and runs below the key as in eager mode. A sync (`sync.rs`) builds the graph
//! (`program.rs`), compiles it or finds it in the backend's cache by its structure, runs it
//! and commits its outputs once the whole program succeeded. `metrics.rs` counts.
//!
//! One file a concern, from the bottom: `rules/`, `metrics.rs`, `constants.rs` (opaque
//! constants made comparable), `sites.rs` (where graphs compile), `hooks.rs` (how a thread
//! waits for another's sync, how narrowing is warned) and `keys.rs` (the `Graph` key) name
//! none of the others; `program.rs` (the graph a compiler gets); `state.rs` (graph
//! backends, and the recordings per (backend, thread)); `pending.rs`; `ahead.rs` (a repeated
//! graph's program launched while it is still recorded); `sync.rs`; `inplace.rs`
//! (in-place calls recorded functionally); `views.rs` (views read and written as nodes on their
//! base); `donate.rs` (which inputs a program may consume); `limit.rs` (each backend's size
//! limit); `record.rs` (the recorder, and `register_graph_backend`, which installs it).

mod ahead;
mod constants;
mod donate;
mod guess;
mod hooks;
mod inplace;
mod keys;
mod limit;
mod metrics;
mod pending;
mod program;
mod record;
pub mod rules;
mod sites;
mod state;
mod sync;
mod views;

#[cfg(feature = "python")]
pub(crate) use constants::described_stack;
pub use constants::{describe_object, set_object_describer, ObjectDescriber};
pub use hooks::{set_narrowing_warner, NarrowingWarner};
pub use keys::graph_keys;
pub use limit::{graph_limit, set_graph_limit, DEFAULT_GRAPH_LIMIT};
pub use metrics::{
    compiled_in_run, graph_metrics, reset_graph_metrics, GraphFigures, KEPT_REASONS,
};
pub use pending::{is_pending, pending_meta, set_error_copier, ErrorCopier, Pending};
pub use program::{Arg, CompiledGraph, Graph, GraphCompiler, Node};
pub use record::register_graph_backend;
pub use sites::{set_site_finder, SiteFinder, SITE_GRAPHS};
pub use sync::{compute, computed, pending_graphs, sync};
