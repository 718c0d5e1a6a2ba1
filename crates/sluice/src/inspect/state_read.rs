//! [`read_state`]: the state of one operator as of a committed batch (`sluice state read`);
//! see the [module doc](crate::inspect) for versions and the rows' columns.

use std::path::Path;

use arrow::array::RecordBatch;

use super::decode::StateDecoder;
use super::probe::{
    check_is_checkpoint, list_operators, list_partitions, operator_name, read_state_schema,
    readable_batches,
};
use super::ranges::format_ranges;
use crate::checkpoint::CheckpointDir;
use crate::error::class;
use crate::error::{Result, SluiceError};
use crate::state::{DefaultStateStoreProvider, StateStoreConf, StateStoreId, StateStoreProvider};
use crate::types::OperatorId;

/// The state of one operator as of one committed batch.
#[derive(Debug, Clone)]
pub struct StateSnapshot {
    /// The operator read.
    pub operator_id: u32,
    /// The operator's name from its schema (`stateStoreSave`, `dedupe`, ...).
    pub operator_name: String,
    /// The committed batch the state is as of.
    pub batch_id: u64,
    /// The state version read (`batch_id + 1`).
    pub version: u64,
    /// The number of partitions (state stores) read.
    pub partitions: usize,
    /// `partition`, the key columns, the value columns; one row per live key, by partition and
    /// then in key order (a stream-stream join: one row per stored row of either side, see the
    /// [module doc](crate::inspect)).
    pub rows: RecordBatch,
}

impl StateSnapshot {
    /// A one-line header and the rows as an arrow pretty-printed table.
    pub fn to_table(&self) -> Result<String> {
        let table = arrow::util::pretty::pretty_format_batches(std::slice::from_ref(&self.rows))?;
        Ok(format!(
            "state of operator {} ({}) as of batch {} (state version {}), {} partition(s), {} \
             row(s)\n{table}\n",
            self.operator_id,
            self.operator_name,
            self.batch_id,
            self.version,
            self.partitions,
            self.rows.num_rows()
        ))
    }

    /// The rows as JSON lines (one object per row; timestamps as strings, a window as an
    /// object with `start` and `end`).
    pub fn to_json_lines(&self) -> Result<Vec<u8>> {
        let mut w = arrow::json::LineDelimitedWriter::new(Vec::new());
        w.write(&self.rows)?;
        w.finish()?;
        Ok(w.into_inner())
    }
}

/// Reads the state of operator `operator_id` as of committed batch `batch_id` (default: the
/// last committed batch) from the checkpoint at `checkpoint`, without writing anything there.
///
/// Errors (each names the path and what to do): `class::CHECKPOINT_NOT_FOUND` (not a checkpoint),
/// `class::STATE_OPERATOR_NOT_FOUND` (lists the operators there), `class::STATE_BATCH_NOT_COMMITTED` and
/// `class::STATE_VERSION_NOT_AVAILABLE` (list the batches whose state can be read),
/// `SLUICE_NOT_SUPPORTED_YET` for operators whose state cannot be decoded (unknown operators,
/// and stream-stream joins whose schema file has no `leftFields`), `class::STATE_DECODE_FAILED` when
/// the pairs do not decode with the recorded schema.
pub fn read_state(
    checkpoint: &Path,
    operator_id: u32,
    batch_id: Option<u64>,
) -> Result<StateSnapshot> {
    check_is_checkpoint(checkpoint)?;
    let operators = list_operators(checkpoint)?;
    let schema = match read_state_schema(checkpoint, operator_id)? {
        Some(s) if operators.contains(&operator_id) => s,
        _ => {
            let state = CheckpointDir::new(checkpoint).state_dir();
            return Err(SluiceError::checkpoint(
                class::STATE_OPERATOR_NOT_FOUND,
                if operators.is_empty() {
                    format!(
                        "the checkpoint {} has no stateful operator (no {}): its query keeps no \
                         state",
                        checkpoint.display(),
                        state.display()
                    )
                } else {
                    format!(
                        "the checkpoint {} has no stateful operator {operator_id} (no schema at \
                         {}); its operators are {}. Pass one of them with --operator",
                        checkpoint.display(),
                        CheckpointDir::new(checkpoint)
                            .state_schema_file(OperatorId(operator_id))
                            .display(),
                        operators
                            .iter()
                            .map(|o| o.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            ));
        }
    };
    let decoder = StateDecoder::new(&schema)?;
    let last_committed = CheckpointDir::new(checkpoint).commit_log().latest_id()?;
    let readable = readable_batches(checkpoint, operator_id, last_committed)?;
    let readable_text = || {
        if readable.is_empty() {
            "no batch's state can be read".to_string()
        } else {
            format!(
                "the state can be read as of batches {}",
                format_ranges(&readable)
            )
        }
    };
    let batch_id = match (batch_id, last_committed) {
        (_, None) => {
            return Err(SluiceError::checkpoint(
                class::STATE_BATCH_NOT_COMMITTED,
                format!(
                    "no batch of the checkpoint {} is committed yet (commits/ is empty): there is \
                     no state to read. Run the query until it commits a batch",
                    checkpoint.display()
                ),
            ))
        }
        (Some(b), Some(last)) if b > last => {
            return Err(SluiceError::checkpoint(
                class::STATE_BATCH_NOT_COMMITTED,
                format!(
                    "batch {b} of the checkpoint {} is not committed (the last committed batch is \
                     {last}); {}. Pass one of them with --batch",
                    checkpoint.display(),
                    readable_text()
                ),
            ))
        }
        (Some(b), Some(_)) => b,
        (None, Some(last)) => last,
    };
    let version = batch_id + 1;
    let partitions = list_partitions(checkpoint, operator_id)?;
    if !readable
        .iter()
        .any(|r| r.first <= batch_id && batch_id <= r.last)
    {
        return Err(SluiceError::checkpoint(
            class::STATE_VERSION_NOT_AVAILABLE,
            format!(
                "the state of operator {operator_id} as of batch {batch_id} (version {version}) \
                 is not on disk under {} (its files were purged by maintenance, or the operator \
                 did not run in that batch); {}. Pass one of them with --batch",
                CheckpointDir::new(checkpoint)
                    .state_operator_dir(OperatorId(operator_id))
                    .display(),
                readable_text()
            ),
        ));
    }
    let mut part_ids: Vec<u32> = Vec::new();
    let mut keys: Vec<Box<[u8]>> = Vec::new();
    let mut values: Vec<Box<[u8]>> = Vec::new();
    for p in &partitions {
        let mut provider = DefaultStateStoreProvider::open_read_only(
            StateStoreId::new(checkpoint, operator_id, *p),
            StateStoreConf::default(),
        )?;
        let store = provider.get_store(version)?;
        for (k, v) in store.iter() {
            part_ids.push(*p);
            keys.push(k.into());
            values.push(v.into());
        }
    }
    let rows = decoder.decode(&part_ids, &keys, &values).map_err(|e| {
        e.context(format!(
            "operator {operator_id} in {}",
            checkpoint.display()
        ))
    })?;
    Ok(StateSnapshot {
        operator_id,
        operator_name: operator_name(&schema).to_string(),
        batch_id,
        version,
        partitions: partitions.len(),
        rows,
    })
}
