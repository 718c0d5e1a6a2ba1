//! What every stateful operator shares: the `StatefulOperator` trait the query pipeline drives,
//! the recorded state schema (`state/<op>/_metadata/schema`) and its restart check, stable key
//! partitioning, and opening one state store per partition for a batch.

use crate::error::class;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, TimestampMicrosecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

use crate::error::{Result, SluiceError};
use crate::progress::StateOperatorProgress;
use crate::state::{DefaultStateStoreProvider, StateStoreConf, StateStoreId};

/// Error class: the restarted query's state does not fit the checkpoint's.
/// Error class: a grouping key was renamed (Spark would silently reuse the state).
/// Conf that accepts a renamed grouping key on restart.
pub const ALLOW_KEY_RENAME_CONF: &str = "sluice.streaming.stateSchema.allowKeyRename";

/// A stateful operator, driven once per batch by `query::pipeline`.
///
/// Contract: `process` for batch N reads state version N and commits version N+1 of every
/// partition's store before returning; it never sees a batch twice except on replay after a
/// failure, when it is loaded at version N again.
pub trait StatefulOperator: Send {
    /// Rows of each input (one entry per child of the operator) for this batch.
    /// `late_watermark_ms` judges late input rows; `eviction_watermark_ms` emits and evicts.
    fn process(
        &mut self,
        inputs: Vec<Vec<RecordBatch>>,
        late_watermark_ms: i64,
        eviction_watermark_ms: i64,
        batch_id: u64,
    ) -> Result<(RecordBatch, StateOperatorProgress)>;
    /// Spark's `shouldRunAnotherBatch`: would a no-data batch at `next_watermark_ms` emit or evict?
    fn should_run_another_batch(&self, batch_watermark_ms: i64, next_watermark_ms: i64) -> bool;
    /// The processing time of the batch about to run (`batchTimestampMs`); for timeouts.
    fn set_batch_timestamp(&mut self, _ms: i64) {}
    /// Opt-in late-row side output: from now on, keep each batch's input rows that are dropped
    /// as late (they reach no state) for [`Self::take_late_rows`]. Returns their schema.
    fn keep_late_rows(&mut self) -> Result<SchemaRef> {
        Err(SluiceError::not_supported_yet(
            "a late-row side output for this stateful operator (it is supported for streaming \
             aggregations and deduplication)",
        ))
    }
    /// The input rows the last `process` dropped as late, when kept (see `keep_late_rows`).
    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        Vec::new()
    }
}

thread_local! {
    /// Test-only fault injection (`sluice.testing.crashPoint=inStateCommit:N`): the next
    /// `commit_stores` on this thread fails after the first partition committed, as a crash in
    /// the middle of a state commit would.
    static CRASH_IN_STATE_COMMIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Arms (or disarms) the injected crash of [`commit_stores`] for the current thread.
pub fn inject_crash_in_state_commit(on: bool) {
    CRASH_IN_STATE_COMMIT.with(|c| c.set(on));
}

/// Commits every partition's store; returns (keys in state, memory bytes).
pub fn commit_stores(stores: &mut [&mut dyn crate::state::StateStore]) -> Result<(u64, u64)> {
    let (mut total, mut memory) = (0u64, 0u64);
    if stores.len() > 1 && !stores_len_gt_one_and_armed() {
        // Each partition writes and syncs its own delta file: in parallel.
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let (first, rest) = stores.split_at_mut(1);
            let handles: Vec<_> = rest
                .iter_mut()
                .map(|s| scope.spawn(move || s.commit().map(|_| ())))
                .collect();
            let mut results = vec![first[0].commit().map(|_| ())];
            results.extend(handles.into_iter().map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(SluiceError::internal(
                        "a state store commit thread panicked",
                    ))
                })
            }));
            results
        });
        for r in results {
            r?;
        }
        for s in stores.iter() {
            let m = s.metrics();
            total += m.num_keys;
            memory += m.memory_used_bytes;
        }
        return Ok((total, memory));
    }
    for (i, s) in stores.iter_mut().enumerate() {
        s.commit()?;
        if i == 0 && stores_len_gt_one_and_armed() {
            CRASH_IN_STATE_COMMIT.with(|c| c.set(false));
            return Err(SluiceError::new(
                crate::error::Fault::Internal,
                class::SLUICE_INJECTED_CRASH,
                "injected crash in the middle of a state store commit (sluice.testing.crashPoint)",
            ));
        }
        let m = s.metrics();
        total += m.num_keys;
        memory += m.memory_used_bytes;
    }
    Ok((total, memory))
}

fn stores_len_gt_one_and_armed() -> bool {
    CRASH_IN_STATE_COMMIT.with(|c| c.get())
}

/// Runs `f` with every partition's store open at `version` (each opened once for the whole
/// batch); after a successful batch, starts background maintenance (snapshots, purge) so commits
/// never wait for it.
pub fn with_stores<T>(
    providers: &mut [DefaultStateStoreProvider],
    version: u64,
    f: impl FnOnce(&mut [&mut dyn crate::state::StateStore]) -> Result<T>,
) -> Result<T> {
    use crate::state::StateStoreProvider;
    let result = {
        let mut stores: Vec<&mut dyn crate::state::StateStore> = providers
            .iter_mut()
            .map(|p| p.get_store(version))
            .collect::<Result<_>>()?;
        f(&mut stores)
    };
    if result.is_ok() {
        for p in providers.iter_mut() {
            p.maintain_in_background();
        }
    }
    result
}

/// Opens one store per partition under `<checkpoint>/state/<operator_id>/<p>/`.
pub fn open_stores(
    checkpoint_root: &Path,
    operator_id: u32,
    partitions: usize,
    conf: &StateStoreConf,
) -> Result<Vec<DefaultStateStoreProvider>> {
    (0..partitions)
        .map(|p| {
            DefaultStateStoreProvider::new(
                StateStoreId {
                    checkpoint_root: checkpoint_root.to_path_buf(),
                    operator_id,
                    partition_id: p as u32,
                },
                conf.clone(),
            )
        })
        .collect()
}

/// The schema of an operator's output rows, with every field nullable.
pub fn nullable(schema: &SchemaRef) -> SchemaRef {
    Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// The recorded key/value schema of an operator's state (`state/<op>/_metadata/schema`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateSchema {
    pub operator: String,
    pub key_schema: Vec<StateField>,
    pub value_schema: Vec<StateField>,
    /// Stream-stream joins: how many of the value fields are the left side's (the value
    /// schema is the left fields followed by the right fields), so that `crate::state::reader`
    /// can decode each side's rows. Absent for other operators and in join schema files
    /// written before it was recorded; never compared on restart.
    #[serde(
        rename = "leftFields",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub left_fields: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateField {
    pub name: String,
    /// The Spark SQL type name: what the restart check compares.
    #[serde(rename = "type")]
    pub data_type: String,
    pub nullable: bool,
    /// The exact Arrow type (`DataType`'s `Display` form, read back with its `FromStr`), so
    /// that state can be decoded without the query (`crate::state::reader`). Absent in schema
    /// files written before it was recorded, and for values that are not Arrow data; never
    /// compared on restart.
    #[serde(rename = "arrowType", default, skip_serializing_if = "Option::is_none")]
    pub arrow_type: Option<String>,
}

pub fn state_fields(fields: &[Arc<Field>]) -> Vec<StateField> {
    fields
        .iter()
        .map(|f| StateField {
            name: f.name().clone(),
            data_type: crate::schema::spark_type_name(f.data_type()),
            nullable: f.is_nullable(),
            arrow_type: Some(f.data_type().to_string()),
        })
        .collect()
}

fn describe(fields: &[StateField]) -> String {
    fields
        .iter()
        .map(|f| format!("{} {}", f.name, f.data_type))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks (or records, on the first run) the operator's state schema.
pub fn check_state_schema(dir: &Path, schema: &StateSchema, allow_rename: bool) -> Result<()> {
    let file = dir.join("_metadata").join("schema");
    match std::fs::read(&file) {
        Ok(bytes) => {
            let old: StateSchema = serde_json::from_slice(&bytes).map_err(|e| {
                SluiceError::checkpoint(
                    class::CHECKPOINT_CORRUPT_LOG,
                    format!("{} is not a state schema ({e}); restore it or start with a new checkpoint location", file.display()),
                )
            })?;
            // Only the operator and the Spark type names are compared: `arrowType` and
            // `leftFields` (recorded for inspection, absent in older files) never are, and the
            // file is not rewritten, so an old file keeps its contents.
            let types =
                |v: &[StateField]| v.iter().map(|f| f.data_type.clone()).collect::<Vec<_>>();
            if old.operator != schema.operator {
                return Err(SluiceError::checkpoint(
                    class::STATE_SCHEMA_INCOMPATIBLE,
                    format!(
                        "The stateful operator whose state is in {} was {} and is now {}: a different \
                         operator (or join type) cannot reuse this state. Start with a new \
                         checkpointLocation, or restore the previous query.",
                        dir.display(),
                        old.operator,
                        schema.operator
                    ),
                ));
            }
            if types(&old.key_schema) != types(&schema.key_schema)
                || types(&old.value_schema) != types(&schema.value_schema)
            {
                return Err(SluiceError::checkpoint(
                    class::STATE_SCHEMA_INCOMPATIBLE,
                    format!(
                        "Provided schema doesn't match to the schema for existing state of operator {} in {}: \
                         the checkpoint holds keys ({}) with values ({}), this query has keys ({}) with values ({}). \
                         Grouping keys and aggregate functions cannot change on restart: start with a new \
                         checkpointLocation, or restore the previous query.",
                        old.operator,
                        dir.display(),
                        describe(&old.key_schema),
                        describe(&old.value_schema),
                        describe(&schema.key_schema),
                        describe(&schema.value_schema)
                    ),
                ));
            }
            let renamed: Vec<String> = old
                .key_schema
                .iter()
                .zip(&schema.key_schema)
                .filter(|(a, b)| a.name != b.name)
                .map(|(a, b)| format!("{} -> {}", a.name, b.name))
                .collect();
            if !renamed.is_empty() && !allow_rename {
                return Err(SluiceError::checkpoint(
                    class::STATE_SCHEMA_KEY_RENAMED,
                    format!(
                        "The grouping key of operator {} changed from ({}) to ({}) ({}). The types match, so \
                         Spark would silently reuse the old state under the new key and give wrong results. \
                         Start with a new checkpointLocation; or, if the column was only renamed and means \
                         the same thing, set {ALLOW_KEY_RENAME_CONF}=true.",
                        old.operator,
                        describe(&old.key_schema),
                        describe(&schema.key_schema),
                        renamed.join(", ")
                    ),
                ));
            }
            if !renamed.is_empty() {
                log::warn!(
                    "state of operator {}: accepting renamed keys {}",
                    old.operator,
                    renamed.join(", ")
                );
            }
            Ok(())
        }
        Err(_) => {
            let bytes = serde_json::to_vec_pretty(schema)
                .map_err(|e| SluiceError::internal(e.to_string()))?;
            crate::checkpoint::write_atomic_new(&file, &bytes)?;
            Ok(())
        }
    }
}

/// FNV-1a: a partitioning hash that stays the same across builds and restarts.
pub fn partition_of(key: &[u8], partitions: usize) -> usize {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in key {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    (h % partitions as u64) as usize
}

/// Event times (µs) of a time column. A window struct (`window(..)`, `session_window(..)`)
/// stands for its `end`, as Spark compares a window event-time column with the watermark.
pub fn to_micros(a: &ArrayRef) -> Result<TimestampMicrosecondArray> {
    if let Some(s) = a.as_any().downcast_ref::<arrow::array::StructArray>() {
        let end = s
            .column_by_name("end")
            .ok_or_else(|| SluiceError::internal("an event-time struct without an end field"))?;
        return to_micros(end);
    }
    let c = cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    c.as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .cloned()
        .ok_or_else(|| SluiceError::internal("timestamp cast"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join_schema(left_fields: Option<usize>, arrow_types: bool) -> StateSchema {
        let f = |n: &str| {
            Arc::new(Field::new(
                n,
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ))
        };
        let strip = |mut v: Vec<StateField>| {
            if !arrow_types {
                v.iter_mut().for_each(|f| f.arrow_type = None);
            }
            v
        };
        StateSchema {
            operator: "0 (symmetricHashJoin Inner)".into(),
            key_schema: strip(state_fields(&[f("k")])),
            value_schema: strip(state_fields(&[f("k"), f("a"), f("k"), f("b")])),
            left_fields,
        }
    }

    #[test]
    fn left_fields_and_arrow_types_take_no_part_in_the_restart_check() {
        for (old, new) in [
            (join_schema(None, false), join_schema(Some(2), true)),
            (join_schema(Some(2), true), join_schema(None, false)),
            (join_schema(Some(1), true), join_schema(Some(3), true)),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            check_state_schema(tmp.path(), &old, false).unwrap();
            let file = tmp.path().join("_metadata").join("schema");
            let written = std::fs::read(&file).unwrap();
            let text = String::from_utf8(written.clone()).unwrap();
            assert_eq!(text.contains("leftFields"), old.left_fields.is_some());
            check_state_schema(tmp.path(), &new, false).unwrap();
            assert_eq!(std::fs::read(&file).unwrap(), written, "not rewritten");
            let back: StateSchema = serde_json::from_slice(&written).unwrap();
            assert_eq!(back, old);
        }
        // The types still are.
        let tmp = tempfile::tempdir().unwrap();
        check_state_schema(tmp.path(), &join_schema(Some(2), true), false).unwrap();
        let mut other = join_schema(Some(2), true);
        other.value_schema[1].data_type = "INT".into();
        assert_eq!(
            check_state_schema(tmp.path(), &other, false)
                .unwrap_err()
                .class(),
            class::STATE_SCHEMA_INCOMPATIBLE
        );
    }
}
