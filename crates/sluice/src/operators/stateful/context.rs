//! What the framework hands a stateful operator: where its state lives ([`StateInfo`], once, at
//! construction) and which batch it runs ([`BatchContext`], every batch).

use crate::checkpoint::CheckpointDir;
use crate::error::{class, SluiceError};
use crate::state::layout::DecodeError;
use crate::state::StateStoreConf;
use crate::testing::TestHooks;
use crate::types::{BatchId, OperatorId, WatermarkMs};

/// Where one stateful operator keeps its state (Spark's `StatefulOperatorStateInfo`): the
/// checkpoint, the operator's id in it, how many partitions (state stores) it has and how the
/// stores are kept.
#[derive(Debug, Clone)]
pub(crate) struct StateInfo {
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

impl StateInfo {
    /// Where this operator's state is, for the operator to name it in errors.
    pub(crate) fn location(&self) -> StateLocation {
        StateLocation {
            checkpoint: self.checkpoint.clone(),
            operator_id: self.operator_id,
        }
    }
}

/// Where one operator's state is ([`StateInfo::location`]), to name a store in errors.
#[derive(Debug, Clone)]
pub(crate) struct StateLocation {
    checkpoint: CheckpointDir,
    operator_id: OperatorId,
}

impl StateLocation {
    /// `STATE_STORE_CORRUPT`: `what` (e.g. "a join state key"), read from the store of
    /// `partition` (`None`: from one of the operator's stores), does not decode with the
    /// operator's state layout. The operator only writes bytes that decode, so the state files
    /// were changed or damaged outside the query.
    pub(crate) fn corrupt(
        &self,
        partition: Option<usize>,
        what: &str,
        e: DecodeError,
    ) -> SluiceError {
        let store = match partition {
            Some(p) => format!(
                "the state store {}",
                self.checkpoint
                    .state_partition_dir(self.operator_id, p)
                    .display()
            ),
            None => format!(
                "a state store under {}",
                self.checkpoint
                    .state_operator_dir(self.operator_id)
                    .display()
            ),
        };
        SluiceError::checkpoint(
            class::STATE_STORE_CORRUPT,
            format!(
                "{store} holds {what} that does not decode with the operator's state layout \
                 ({e}): restore the checkpoint, or start the query with a new checkpoint location"
            ),
        )
    }
}

/// The batch an operator runs: its id (the state version it reads), its processing time and the
/// two watermarks, by name so they cannot be swapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchContext {
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
