//! # Sluice
//!
//! Spark Structured Streaming's semantics as a native Rust library: a stream is an input table
//! that only grows, and a query written like a batch query is kept up to date by a loop of
//! micro-batches, exactly once, on Arrow and DataFusion.
//!
//! ## Architecture map (one concept, one home)
//!
//! | module | concept |
//! |---|---|
//! | [`session`] | `Session`: configuration, `read_stream()`, `sql()`, the catalog of views |
//! | [`frame`] | `StreamFrame`: the streaming DataFrame (`filter`, `select`, ...) -> a DataFusion `LogicalPlan` |
//! | [`query`] | `StreamingQuery` handle, the writer, the execution core and its micro-batch and continuous loops |
//! | [`checkpoint`] | the checkpoint directory and its logs: `metadata`, `offsets/`, `commits/` |
//! | [`source`] | `Source` trait; file (json/csv/parquet/text), rate, rate-micro-batch, memory |
//! | [`sink`] | `Sink` trait; file (+ `_spark_metadata` manifest), console, memory, foreach(_batch) |
//! | [`plan`] | streaming analysis (output-mode rules), the staged per-batch plan and the continuous plan on DataFusion, the session's query planner, Spark SQL semantics |
//! | [`operators`] | watermarks, windows, streaming aggregation |
//! | [`state`] | the versioned state store under `state/<op>/<partition>/` |
//! | [`inspect`] | a checkpoint read from outside the query: `sluice checkpoint describe`, `sluice state read` |
//! | [`progress`] | `StreamingQueryProgress` with Spark's JSON keys, the listener |
//! | [`error`] | `SluiceError`: fault, stable class, message with the fix |
//! | [`pipeline`] | pipelines in SQL (`sluice run FILE.sql`): Flink-style `CREATE TABLE` sources, `CREATE SINK .. AS SELECT` queries |
//!
//! The life of one micro-batch (see `ARCHITECTURE.md`): construct (latest offsets) -> write
//! `offsets/N` -> plan on DataFusion over exactly this batch's rows -> `sink.add_batch(N)` ->
//! write `commits/N` -> report progress.

#![warn(missing_docs)]

pub mod checkpoint;
pub mod conf;
pub mod error;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod inspect;
#[cfg(feature = "kafka")]
mod kafka_log;
pub(crate) mod operators;
pub mod pipeline;
pub(crate) mod plan;
pub mod progress;
pub mod query;
pub mod schema;
pub mod session;
pub mod sink;
pub mod source;
pub mod state;
mod sync;
pub mod testing;
pub mod time_text;
pub mod types;

pub use datafusion::prelude::{col, lit, Expr};
pub use error::{Fault, Result, SluiceError};
pub use frame::{GroupedFrame, KeyedFrame, StreamFrame};
pub use operators::flat_map_groups_with_state::{GroupState, GroupStateTimeout};
pub use operators::window::{session_window, sliding_window, window};
pub use pipeline::Pipeline;
pub use plan::json::{from_json, to_json};
pub use progress::{StreamingQueryListener, StreamingQueryProgress};
pub use query::StreamingQuery;
pub use session::{Session, SessionBuilder};
pub use types::{BatchData, OutputMode, Trigger};
