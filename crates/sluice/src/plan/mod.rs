//! Planning: the only code that talks to DataFusion's planner.
//!
//! - [`relation`]: how a stream appears in a logical plan (`StreamingRelation`).
//! - [`analysis`]: which streaming plans may run, in which output mode.
//! - [`incremental`]: per-batch planning: bind each stream to this batch's rows, optimise,
//!   execute (Spark's `IncrementalExecution`).
//! - [`ansi`]: Spark's casts, overflow and division, non-ANSI and ANSI (`spark.sql.ansi.enabled`).
//! - [`spark`]: Spark SQL semantics DataFusion lacks (registered into every session); [`sql`]:
//!   Spark's SQL front end (`window.start`, `max_by`/`min_by`, then planning); [`names`]: Spark's
//!   rules for matching names (`spark.sql.caseSensitive`), used by [`sql_names`] (the resolver
//!   over the SQL AST) and the DataFrame API; [`intervals`]: Spark's interval literals;
//!   [`json`]: `from_json`/`to_json`/`schema_of_json`; [`field_access`]: `s.field`
//!   (case-insensitive), `arr[i]` (0-based).
//! - `stateful_nodes`: which plan nodes are stateful (one decision, for the analysis and the
//!   staged plan).
//! - `staged`: how a query's plan runs per batch (`StagedPlan`: stateful stages bottom-up, then
//!   DataFusion over the last operator's rows).
//! - `continuous`: the plan of a continuous query, built once, fed slice by slice.
//! - [`functions`]: Spark's built-in function library beyond `datafusion-spark` (and its
//!   generated status table, `FUNCTIONS.md`).
//! - [`planner`]: the session's query planner (the watermark node's physical planning).
//! - [`generate`]: Spark's generators (`explode`, `LATERAL VIEW`, ..) as `Generate` nodes.

pub(crate) mod analysis;
// Spark's SQL semantics (functions, casts, JSON, field access) live in `sluice-spark`.
pub(crate) use sluice_spark::{ansi, field_access, fixes, functions, json, promote_strings};
pub(crate) mod continuous;
pub(crate) mod generate;
pub(crate) mod incremental;
pub(crate) mod input_file;
pub(crate) mod intervals;
pub(crate) mod literals;
pub(crate) mod names;
pub(crate) mod planner;
pub(crate) mod relation;
pub(crate) mod sql;
pub(crate) mod sql_names;
pub(crate) mod sql_syntax;
pub(crate) mod staged;
pub(crate) mod stateful_nodes;

pub(crate) use analysis::check_streaming_plan;
pub(crate) use incremental::IncrementalExecution;
pub(crate) use relation::{is_streaming, relation_uses, streaming_relations, StreamingRelation};
