//! What the framework hands a stateful operator: where its state lives ([`StateInfo`], once, at
//! construction) and which batch it runs ([`BatchContext`], every batch).

use crate::checkpoint::CheckpointDir;
use crate::state::StateStoreConf;
use crate::testing::TestHooks;
use crate::types::{BatchId, OperatorId, WatermarkMs};

/// Where one stateful operator keeps its state (Spark's `StatefulOperatorStateInfo`): the
/// checkpoint, the operator's id in it, how many partitions (state stores) it has and how the
/// stores are kept.
#[derive(Debug, Clone)]
pub struct StateInfo {
    /// The query's checkpoint location: the state is under `state/<operator_id>/`.
    pub checkpoint: CheckpointDir,
    /// The operator's id, counted bottom-up in the plan (`state/0` is the first operator).
    pub operator_id: OperatorId,
    /// The number of state partitions (`spark.sql.shuffle.partitions`, pinned by the checkpoint).
    pub partitions: usize,
    /// How the stores are kept (snapshots, retention).
    pub store_conf: StateStoreConf,
    /// Accept renamed key columns of the same types on restart
    /// ([`crate::conf::ALLOW_KEY_RENAME`]).
    pub allow_key_rename: bool,
    /// The query's test hooks (an injected crash in the middle of a state commit); empty without
    /// the `testing` feature.
    pub hooks: TestHooks,
}

/// The batch an operator runs: its id (the state version it reads), its processing time and the
/// two watermarks, by name so they cannot be swapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchContext {
    /// The batch: the operator reads state version `batch_id` and the framework commits
    /// `batch_id + 1`.
    pub batch_id: BatchId,
    /// The batch's processing time (`batchTimestampMs` of `offsets/N`), for processing-time
    /// timeouts.
    pub batch_timestamp_ms: i64,
    /// The watermark that judges this batch's input rows: a row at or before it is late (Spark's
    /// `eventTimeWatermarkForLateEvents`).
    pub late_watermark: WatermarkMs,
    /// The watermark that emits and evicts state (Spark's `eventTimeWatermarkForEviction`, the
    /// batch watermark of `offsets/N`).
    pub eviction_watermark: WatermarkMs,
}
