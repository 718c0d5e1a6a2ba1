//! What a query checkpoint holds, read without touching it (`sluice checkpoint describe`): the
//! query id, the batches planned and committed and what a restart would do, each source's
//! offsets of the latest batch, the watermark, the pinned conf, and every stateful operator's
//! recorded schema, partitions and state versions on disk.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::probe;
use super::ranges::{format_ranges, to_ranges, IdRange};
use crate::checkpoint::{shape::QueryShape, CheckpointDir, RecoveryPlan, StreamMetadata};
use crate::error::Result;
use crate::state::files::FileIndex;
use crate::state::schema::StateField;
use crate::state::StateStoreId;
use crate::types::OperatorId;

/// Everything `sluice checkpoint describe` shows. Serializes to the `--json` document.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointDescription {
    /// The directory described.
    pub checkpoint: String,
    /// The query id from `metadata` (`None` when the file is missing).
    pub query_id: Option<String>,
    /// The batches in the offsets and commit logs, and what a restart does.
    pub batches: BatchesDescription,
    /// The latest batch's `batchTimestampMs`.
    pub batch_timestamp_ms: Option<i64>,
    /// The watermark of the latest batch and of the next one.
    pub watermark: WatermarkDescription,
    /// One entry per source, in source order.
    pub sources: Vec<SourceDescription>,
    /// The sink recorded in `sluice/query.json`.
    pub sink: Option<SinkDescription>,
    /// The latest batch's pinned conf (offsets metadata `conf`).
    pub conf: BTreeMap<String, String>,
    /// Every stateful operator under `state/`, by id.
    pub operators: Vec<OperatorDescription>,
}

/// The offsets and commit logs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchesDescription {
    /// The oldest `offsets/N` (older ones are purged).
    pub first_offsets: Option<u64>,
    /// The newest `offsets/N`.
    pub last_offsets: Option<u64>,
    /// The oldest `commits/N`.
    pub first_committed: Option<u64>,
    /// The newest `commits/N`: the last committed batch.
    pub last_committed: Option<u64>,
    /// The newest batch when it is planned but not committed: a restart runs it again with the
    /// same offsets.
    pub uncommitted: Option<u64>,
    /// What a restart does, in words (from [`crate::checkpoint::plan_recovery`]).
    pub restart: String,
}

/// The watermark of the latest batch and the one the next batch runs with.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatermarkDescription {
    /// `batchWatermarkMs` of the latest `offsets/N` (0 = no watermark yet).
    pub batch_watermark_ms: Option<i64>,
    /// `nextBatchWatermarkMs` of the latest `commits/N`.
    pub next_batch_watermark_ms: Option<i64>,
}

/// One source: its offset in the latest batch and what `sluice/query.json` says of it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceDescription {
    /// The source's position in the query (its offset's position in `offsets/N`).
    pub index: usize,
    /// The source's kind recorded in `sluice/query.json` (`file`, `kafka`, ...).
    pub kind: Option<String>,
    /// The source's description recorded in `sluice/query.json`.
    pub description: Option<String>,
    /// The end offset of the latest batch (`null` = the source has no offset yet).
    pub offset: Option<Value>,
}

/// The sink recorded in `sluice/query.json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SinkDescription {
    /// The sink's kind (`file`, `kafka`, ...).
    pub kind: String,
    /// The sink's description (`FileSink[/out]`, ...).
    pub description: String,
}

/// One stateful operator under `state/<id>/`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorDescription {
    /// The operator id (the directory name under `state/`).
    pub id: u32,
    /// The operator's name from its schema (`stateStoreSave`, `dedupe`, ...).
    pub name: Option<String>,
    /// The schema's `operator` as recorded (`0 (stateStoreSave)`).
    pub recorded_operator: Option<String>,
    /// The recorded key fields (empty when the schema could not be read).
    pub key_schema: Vec<StateField>,
    /// The recorded value fields (empty when the schema could not be read).
    pub value_schema: Vec<StateField>,
    /// Why the schema could not be read, if it could not.
    pub schema_error: Option<String>,
    /// The state files of each partition (`state/<id>/<partition>/`), by partition id.
    pub partitions: Vec<PartitionDescription>,
    /// The committed batches whose state `sluice state read` can read.
    pub readable_batches: Vec<IdRange>,
}

/// The state files of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionDescription {
    /// The partition id.
    pub id: u32,
    /// The versions with a `<v>.delta` file.
    pub deltas: Vec<IdRange>,
    /// The versions with a `<v>.snapshot` file, ascending.
    pub snapshots: Vec<u64>,
    /// The newest version with a file (0 when there is none).
    pub latest_version: u64,
}

/// Describes the checkpoint at `dir`, reading only. Fails with `CHECKPOINT_NOT_FOUND` when
/// `dir` is not a checkpoint, and with the logs' own errors when a log file is corrupt.
pub fn describe_checkpoint(dir: &Path) -> Result<CheckpointDescription> {
    probe::check_is_checkpoint(dir)?;
    let ck = CheckpointDir::new(dir);
    let query_id = StreamMetadata::read(&ck.metadata_file())?.map(|m| m.id);
    let offsets = ck.offset_log();
    let commits = ck.commit_log();
    let offset_ids = offsets.batch_ids()?;
    let commit_ids = commits.batch_ids()?;
    let latest = offsets.get_latest()?;
    let latest_commit = commits.get_latest()?;
    let restart = match ck.recovery_plan() {
        Ok(RecoveryPlan::Fresh) => "a start runs batch 0".to_string(),
        Ok(RecoveryPlan::ResumeAfter { next_batch_id, .. }) => format!(
            "batch {} is committed; a restart plans batch {next_batch_id}",
            next_batch_id - 1
        ),
        Ok(RecoveryPlan::Replay { batch_id, .. }) => format!(
            "batch {batch_id} is planned but not committed; a restart runs it again with the \
             same offsets"
        ),
        Err(e) => format!("a restart fails: {e}"),
    };
    let last_offsets = offset_ids.last().copied();
    let last_committed = commit_ids.last().copied();
    let uncommitted = match (last_offsets, last_committed) {
        (Some(o), Some(c)) if o > c => Some(o),
        (Some(o), None) => Some(o),
        _ => None,
    };
    let shape: Option<QueryShape> = crate::storage::read(ck.query_shape_file())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let n_sources = latest
        .as_ref()
        .map(|(_, o)| o.offsets.len())
        .or_else(|| shape.as_ref().map(|s| s.sources.len()))
        .unwrap_or(0);
    let sources = (0..n_sources)
        .map(|i| {
            let recorded = shape.as_ref().and_then(|s| s.sources.get(i));
            SourceDescription {
                index: i,
                kind: recorded.map(|(k, _)| k.clone()),
                // A checkpoint written before secrets were redacted may hold one.
                description: recorded.map(|(_, d)| crate::redact::redacted(d.clone())),
                offset: latest
                    .as_ref()
                    .and_then(|(_, o)| o.offsets.get(i).cloned().flatten()),
            }
        })
        .collect();
    let mut operators = Vec::new();
    for id in probe::list_operators(dir)? {
        operators.push(describe_operator(dir, id, last_committed)?);
    }
    Ok(CheckpointDescription {
        checkpoint: dir.display().to_string(),
        query_id,
        batches: BatchesDescription {
            first_offsets: offset_ids.first().copied(),
            last_offsets,
            first_committed: commit_ids.first().copied(),
            last_committed,
            uncommitted,
            restart,
        },
        batch_timestamp_ms: latest.as_ref().map(|(_, o)| o.metadata.batch_timestamp_ms),
        watermark: WatermarkDescription {
            batch_watermark_ms: latest.as_ref().map(|(_, o)| o.metadata.batch_watermark_ms),
            next_batch_watermark_ms: latest_commit.map(|(_, c)| c.next_batch_watermark_ms),
        },
        sources,
        sink: shape.map(|s| SinkDescription {
            kind: s.sink_kind,
            description: crate::redact::redacted(s.sink_description),
        }),
        conf: latest.map(|(_, o)| o.metadata.conf).unwrap_or_default(),
        operators,
    })
}

fn describe_operator(
    dir: &Path,
    id: u32,
    last_committed: Option<u64>,
) -> Result<OperatorDescription> {
    let (schema, schema_error) = match probe::read_state_schema(dir, id) {
        Ok(Some(s)) => (Some(s), None),
        Ok(None) => (
            None,
            Some(format!(
                "no schema file at {}",
                CheckpointDir::new(dir)
                    .state_schema_file(OperatorId(id))
                    .display()
            )),
        ),
        Err(e) => (None, Some(e.to_string())),
    };
    let mut partitions = Vec::new();
    for p in probe::list_partitions(dir, id)? {
        let files = FileIndex::list(&StateStoreId::new(dir, id, p).dir())?;
        partitions.push(PartitionDescription {
            id: p,
            deltas: to_ranges(files.deltas.iter().copied()),
            snapshots: files.snapshots.iter().copied().collect(),
            latest_version: files.latest(),
        });
    }
    Ok(OperatorDescription {
        id,
        name: schema.as_ref().map(|s| probe::operator_name(s).to_string()),
        recorded_operator: schema.as_ref().map(|s| s.operator.clone()),
        key_schema: schema
            .as_ref()
            .map(|s| s.key_schema.clone())
            .unwrap_or_default(),
        value_schema: schema
            .as_ref()
            .map(|s| s.value_schema.clone())
            .unwrap_or_default(),
        schema_error,
        partitions,
        readable_batches: probe::readable_batches(dir, id, last_committed)?,
    })
}

/// `2026-09-15T12:10:00.000Z` for epoch milliseconds.
fn format_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

fn format_watermark(ms: Option<i64>) -> String {
    match ms {
        None => "-".into(),
        Some(0) => "none (0)".into(),
        Some(ms) => format!("{} ({ms})", format_ms(ms)),
    }
}

fn format_fields(fields: &[StateField]) -> String {
    if fields.is_empty() {
        return "(none)".into();
    }
    fields
        .iter()
        .map(|f| {
            format!(
                "{} {}{}",
                f.name,
                f.data_type,
                if f.nullable { "" } else { " NOT NULL" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

impl CheckpointDescription {
    /// The JSON document (`--json`).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The human-readable text.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let b = &self.batches;
        let _ = writeln!(s, "checkpoint      {}", self.checkpoint);
        let _ = writeln!(
            s,
            "query id        {}",
            self.query_id.as_deref().unwrap_or("- (no metadata file)")
        );
        let range = |first: Option<u64>, last: Option<u64>| match (first, last) {
            (Some(f), Some(l)) if f == l => f.to_string(),
            (Some(f), Some(l)) => format!("{f}-{l}"),
            _ => "none".into(),
        };
        let _ = writeln!(
            s,
            "batches         offsets {}, commits {}",
            range(b.first_offsets, b.last_offsets),
            range(b.first_committed, b.last_committed)
        );
        let _ = writeln!(s, "last committed  {}", opt(b.last_committed));
        if let Some(u) = b.uncommitted {
            let _ = writeln!(
                s,
                "uncommitted     batch {u} (planned, not committed: replayed on restart)"
            );
        }
        let _ = writeln!(s, "restart         {}", b.restart);
        if let Some(t) = self.batch_timestamp_ms {
            let _ = writeln!(s, "batch time      {} ({t})", format_ms(t));
        }
        let _ = writeln!(
            s,
            "watermark       latest batch ran with {}; next batch runs with {}",
            format_watermark(self.watermark.batch_watermark_ms),
            format_watermark(self.watermark.next_batch_watermark_ms)
        );
        match self.batches.last_offsets {
            Some(n) => {
                let _ = writeln!(s, "sources         (end offsets of batch {n})");
            }
            None => {
                let _ = writeln!(s, "sources");
            }
        }
        if self.sources.is_empty() {
            let _ = writeln!(s, "  (none recorded)");
        }
        for src in &self.sources {
            let _ = writeln!(
                s,
                "  {}  {}  {}  {}",
                src.index,
                src.kind.as_deref().unwrap_or("-"),
                src.description.as_deref().unwrap_or("-"),
                src.offset
                    .as_ref()
                    .map_or_else(|| "-".to_string(), |o| o.to_string())
            );
        }
        if let Some(sink) = &self.sink {
            let _ = writeln!(s, "sink            {}  {}", sink.kind, sink.description);
        }
        let _ = writeln!(s, "conf");
        if self.conf.is_empty() {
            let _ = writeln!(s, "  (none)");
        }
        for (k, v) in &self.conf {
            let _ = writeln!(s, "  {k} = {v}");
        }
        let _ = writeln!(s, "state operators");
        if self.operators.is_empty() {
            let _ = writeln!(s, "  (none: the query keeps no state)");
        }
        for op in &self.operators {
            let _ = writeln!(s, "  {}  {}", op.id, op.name.as_deref().unwrap_or("?"));
            if let Some(e) = &op.schema_error {
                let _ = writeln!(s, "     schema     {e}");
            } else {
                let _ = writeln!(s, "     key        {}", format_fields(&op.key_schema));
                let _ = writeln!(s, "     value      {}", format_fields(&op.value_schema));
            }
            let _ = writeln!(s, "     partitions {}", op.partitions.len());
            // Partitions with the same files are shown together.
            let mut groups: Vec<(Vec<u32>, &PartitionDescription)> = Vec::new();
            for p in &op.partitions {
                match groups
                    .iter_mut()
                    .find(|(_, g)| g.deltas == p.deltas && g.snapshots == p.snapshots)
                {
                    Some((ids, _)) => ids.push(p.id),
                    None => groups.push((vec![p.id], p)),
                }
            }
            for (ids, p) in groups {
                let ids = format_ranges(&to_ranges(ids.iter().map(|i| *i as u64)));
                let snapshots = if p.snapshots.is_empty() {
                    "none".to_string()
                } else {
                    p.snapshots
                        .iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let _ = writeln!(
                    s,
                    "       {ids}: deltas {}; snapshots {snapshots}",
                    format_ranges(&p.deltas)
                );
            }
            let _ = writeln!(
                s,
                "     readable   batches {} (state version = batch + 1)",
                format_ranges(&op.readable_batches)
            );
        }
        s
    }
}
