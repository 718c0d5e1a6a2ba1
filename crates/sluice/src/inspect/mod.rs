//! Inspecting a query checkpoint from outside the query: [`describe_checkpoint`] (`sluice
//! checkpoint describe`) says what the checkpoint holds, [`read_state`] (`sluice state read`,
//! what Spark 4's state data source does) gives the live pairs of one stateful operator as of
//! a committed batch, decoded into an Arrow `RecordBatch`.
//!
//! Everything here only reads. Stores are opened read-only (no temporary-file cleanup, no
//! commits, no maintenance) and loaded with the engine's own loader, every path comes from
//! [`CheckpointDir`](crate::checkpoint::CheckpointDir), and the pairs are decoded with the
//! operators' own state layouts, so the file format and the byte layouts each live in one
//! place. This module sits above the engine: it depends on [`crate::checkpoint`] and
//! [`crate::state`], and nothing in the engine depends on it.
//!
//! # Versions and batches
//!
//! Batch `b` reads state version `b` and commits version `b + 1` (see the
//! [state module doc](crate::state)), so the state *as of committed batch `b`* is version
//! `b + 1`. A version can be read while its files are on disk: the newest snapshot at or below
//! it and every delta after that snapshot (maintenance purges older files).
//!
//! # The rows of a state snapshot
//!
//! The operator's recorded schema (`state/<op>/_metadata/schema`) names the operator and its
//! key and value fields. Each field's exact Arrow type is its `arrowType` (recorded since state
//! inspection exists); for schema files without it, the type is rebuilt from the Spark type
//! name (`BIGINT`, `STRUCT<start: TIMESTAMP, ..>`, with
//! [`parse_spark_type_name`](crate::schema::parse_spark_type_name)). Decoding is checked:
//! every decoded row is encoded again and compared with the stored bytes, so a type that does
//! not fit is an error, never wrong values.
//!
//! The columns are `partition`, then by operator:
//!
//! | operator (schema `operator`) | key | value |
//! |---|---|---|
//! | `stateStoreSave` (aggregation, windows and session windows included) | grouping columns (arrow row format) | the accumulators' state fields (arrow row format), e.g. `count[count]` |
//! | `dedupe` | the deduplication columns | none |
//! | `dedupeWithinWatermark` | the deduplication columns | `expiresAtMicros` |
//! | `flatMapGroupsWithState` | the grouping columns | `timeoutTimestampMs`, `groupState` (the user's state as JSON) |
//! | `symmetricHashJoin ..` (stream-stream join) | `side` (`left`/`right`), the join-key columns (arrow row format), `seq` (the row's sequence number) | `matched`, then the left side's fields and the right side's fields (arrow row format of the row's own side; the other side's columns are null) |
//!
//! A join's value schema is the left fields followed by the right fields; where the left ones
//! end is the schema's `leftFields`. Join schema files written before it was recorded are
//! refused with `SLUICE_NOT_SUPPORTED_YET` (the file is written once, when the operator first
//! runs, and is not rewritten on restart). A repeated column name gets its position appended
//! (`k#7`).
//!
//! # Files
//!
//! | file | what |
//! |---|---|
//! | `describe.rs` | [`describe_checkpoint`]: logs, watermark, sources, sink, conf, operators |
//! | `state_read.rs` | [`read_state`]: one operator's state as of a committed batch |
//! | `probe.rs` | is it a checkpoint, its operators, partitions, schemas, readable batches |
//! | `decode.rs` | `StateDecoder`: stored pairs to Arrow rows, through `state::layout` |
//! | `ranges.rs` | [`IdRange`] and the `1-4, 7` text |

#![warn(missing_docs)]

mod decode;
mod describe;
mod probe;
mod ranges;
mod state_read;

#[cfg(test)]
mod tests;

pub use describe::{
    describe_checkpoint, BatchesDescription, CheckpointDescription, OperatorDescription,
    PartitionDescription, SinkDescription, SourceDescription, WatermarkDescription,
};
pub use ranges::IdRange;
pub use state_read::{read_state, StateSnapshot};
