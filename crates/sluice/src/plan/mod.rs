//! Planning: the only code that talks to DataFusion's planner.
//!
//! - [`relation`]: how a stream appears in a logical plan (`StreamingRelation`).
//! - [`analysis`]: which streaming plans may run, in which output mode.
//! - [`incremental`]: per-batch planning: bind each stream to this batch's rows, optimise,
//!   execute (Spark's `IncrementalExecution`).
//! - [`spark`]: Spark SQL semantics DataFusion lacks (registered into every session).

pub mod analysis;
pub(crate) mod continuous;
pub mod incremental;
pub mod json;
pub mod planner;
pub mod relation;
pub mod spark;
pub mod sql;
pub(crate) mod staged;
pub(crate) mod stateful_nodes;

pub use analysis::check_streaming_plan;
pub use incremental::IncrementalExecution;
pub use relation::{is_streaming, streaming_relations, StreamingRelation};
