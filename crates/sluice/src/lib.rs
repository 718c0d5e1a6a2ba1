//! # Sluice
//!
//! Spark Structured Streaming's semantics as a native Rust library: a stream is an input table
//! that only grows, and a query written like a batch query is kept up to date by a loop of
//! micro-batches, exactly once, on Arrow and DataFusion.
//!
//! ## Architecture map (one concept, one home)
//!
//! The engine sits on two crates: `sluice-common` (the vocabulary: [`types`], [`error`],
//! [`conf`], [`progress`], [`redact`], [`time_text`], [`testing`]) and `sluice-spark` (Spark's
//! SQL semantics: the function library, casts, [`schema`], the JSON/CSV record parsers). Their
//! modules are re-exported here at the paths users know.
//!
//! Public API (what a user of the library touches):
//!
//! | module | concept (Spark's name) |
//! |---|---|
//! | [`session`] | `Session` (SparkSession): configuration, `read_stream()` (DataStreamReader), `read()`, `sql()`, the catalog of views, listeners |
//! | [`frame`] | `StreamFrame` (a streaming DataFrame: `filter`, `select`, `with_watermark`, `group_by`, joins, ...) over a DataFusion `LogicalPlan` |
//! | [`query`] | `StreamingQuery` handle, `DataStreamWriter`, and the execution: one core (`StreamExecution`) with a micro-batch and a continuous driver |
//! | [`source`] | the `Source`/`SourceProvider` contract and the built-in sources (file json/csv/parquet/text, rate, rate-micro-batch, memory, nexmark) (their names in [`formats`]) |
//! | [`sink`] | the `Sink`/`SinkProvider` contract and the built-in sinks (file + `_spark_metadata` manifest + `partitionBy` folders, console, memory, foreach, foreachBatch, noop) (their names in [`formats`]) |
//! | [`kafka`] | (feature `kafka`) Apache Kafka in one place: the source, the sink, Spark's `kafka.*` client options, the librdkafka client context |
//! | [`formats`] | a format name to its provider, one registry per side (Spark's `DataSource.lookupDataSource`): the built-in sources and sinks, Kafka, and the formats other crates register (`delta`) |
//! | [`catalog`] | tables (Spark's session catalog of file tables under `spark.sql.warehouse.dir`): `to_table`, `session.table`, SQL `FROM t` |
//! | [`pipeline`] | pipelines in SQL (`sluice run FILE.sql`): Flink-style `CREATE TABLE` sources, `CREATE SINK .. AS SELECT` queries |
//! | [`inspect`] | a checkpoint read from outside its query: `sluice checkpoint describe`, `sluice state read` |
//! | [`checkpoint`] | the checkpoint directory (`CheckpointDir` builds every path) and its logs: `metadata`, `offsets/`, `commits/`, recovery |
//! | [`storage`] | every file call, on a local path or an object store (`s3://`, `gs://`, `abfss://`): Spark's `CheckpointFileManager` over Hadoop's `FileSystem`, with conditional creates, retries and counters |
//! | [`distributed`] | a query on a cluster (`sluice.distributed.workers`): the hook through which each batch's plan runs on workers while this process keeps the loop (Spark's driver) |
//! | [`state`] | the versioned state store contract (`StateStore`, `StateStoreProvider`) and the default provider under `state/<op>/<partition>/` |
//!
//! Inside the engine (crate-private): `plan` (the only code that talks to DataFusion's planner:
//! streaming analysis, the staged per-batch plan, the continuous plan, the session's query
//! planner, the SQL front end), `operators` (watermarks, windows, and the stateful operators
//! on one framework: aggregation, deduplication, stream-stream join, flatMapGroupsWithState).
//!
//! Dependencies run one way between crates (Cargo enforces it); inside this crate,
//! `scripts/module-cycles` counts the remaining module loops and CI fails on a new one. `state`
//! knows ids and versions, never queries; `checkpoint` owns every byte under `offsets/` and
//! `commits/`; `query` is the only code that knows the *order* of things; `inspect` sits above
//! `checkpoint` and `state`.
//!
//! The life of one micro-batch (see `ARCHITECTURE.md`): construct (latest offsets) -> write
//! `offsets/N` -> plan on DataFusion over exactly this batch's rows -> `sink.add_batch(N)` ->
//! write `commits/N` -> report progress.

#![warn(missing_docs, unreachable_pub)]

// The vocabulary lives in `sluice-common` (the bottom layer); its modules keep their paths here.
pub use sluice_common::conf;
pub use sluice_common::error;
pub use sluice_common::progress;
pub use sluice_common::redact;
use sluice_common::sync;
// Spark's SQL semantics live in `sluice-spark` (the layer above the vocabulary).
pub use sluice_common::testing;
pub use sluice_common::time_text;
pub use sluice_common::types;
pub use sluice_spark::schema;
use sluice_spark::value_text;

pub mod catalog;
pub mod checkpoint;
pub mod distributed;
pub mod formats;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod inspect;
#[cfg(feature = "kafka")]
pub mod kafka;
pub(crate) mod operators;
pub mod pipeline;
pub(crate) mod plan;
pub mod query;
pub mod session;
pub mod sink;
pub mod source;
pub mod state;
pub mod storage;

pub use datafusion::prelude::{lit, Expr};
pub use error::{Fault, Result, SluiceError};
pub use frame::col;
pub use frame::{GroupedFrame, KeyedFrame, StreamFrame};
pub use operators::flat_map_groups_with_state::{
    register_group_function, GroupState, GroupStateTimeout,
};
pub use operators::stateful::remote::{route_read, run_state_task};
pub use operators::watermark::{watermark_exec, watermark_parts};
pub use operators::window::{session_window, sliding_window, window};
pub use pipeline::Pipeline;
/// Spark's generator node as parts a cluster carries to its workers (`sluice-distributed`).
pub use plan::generate::exec::{generate_exec, generate_parts};
pub use plan::generate::{
    explode, explode_outer, inline, inline_outer, multi_alias, posexplode, posexplode_outer, stack,
};
pub use plan::json::{from_json, schema_of_json, to_json};
pub use progress::{StreamingQueryListener, StreamingQueryProgress};
pub use query::StreamingQuery;
pub use session::{Session, SessionBuilder};
pub use source::remote::run_read_task;
pub use types::{BatchData, OutputMode, Trigger};

#[cfg(test)]
mod tests {
    /// The map above and `ARCHITECTURE.md`'s module table name every module of this file.
    #[test]
    fn the_architecture_map_names_every_module() {
        let lib = include_str!("lib.rs");
        let architecture = include_str!("../../../ARCHITECTURE.md");
        let (map, code) = lib.split_at(lib.find("#![warn(").unwrap_or(0));
        let mut modules = Vec::new();
        for line in code.lines() {
            let line = line.trim();
            let Some(rest) = line.strip_suffix(';') else {
                continue;
            };
            let name = ["pub mod ", "pub(crate) mod ", "mod "]
                .iter()
                .find_map(|p| rest.strip_prefix(p));
            if let Some(name) = name {
                modules.push(name.to_string());
            }
        }
        assert!(modules.len() > 15, "{modules:?}");
        for name in modules {
            if name == "fuzzing" {
                continue; // hidden: the fuzz targets' entry points
            }
            let in_map = map.contains(&format!("`{name}`"));
            assert!(in_map, "the lib.rs map does not name module {name}");
            let row = ["/", ".rs"]
                .iter()
                .any(|end| architecture.contains(&format!("| `{name}{end}`")));
            assert!(
                row,
                "ARCHITECTURE.md's module table has no row `{name}/` or `{name}.rs`"
            );
        }
    }
}
