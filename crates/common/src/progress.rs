//! Progress reporting: `StreamingQueryProgress` and friends, with Spark's JSON keys, and the
//! `StreamingQueryListener` that receives query events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Progress of one trigger (Spark's `StreamingQueryProgress`). `json()` gives Spark's layout.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StreamingQueryProgress {
    /// `id`: the query id, stable across restarts (stored in the checkpoint's `metadata`).
    pub id: String,
    /// `runId`: a new id for every start of the query.
    pub run_id: String,
    /// `name`: the query's name (`queryName`), if it has one.
    pub name: Option<String>,
    /// `timestamp`: when the trigger started, ISO-8601 UTC (`2026-11-29T10:00:00.000Z`).
    pub timestamp: String,
    /// `batchId`: the micro-batch's id (the epoch in continuous processing).
    pub batch_id: i64,
    /// `batchDuration`: how long the whole trigger took, in milliseconds.
    pub batch_duration: i64,
    /// `numInputRows`: rows read from all sources in this trigger.
    pub num_input_rows: i64,
    /// `inputRowsPerSecond`: rows read over the time since the previous trigger started.
    pub input_rows_per_second: f64,
    /// `processedRowsPerSecond`: rows read over the time spent processing them.
    pub processed_rows_per_second: f64,
    /// `durationMs`: milliseconds per phase of the trigger (`latestOffset`, `getBatch`,
    /// `queryPlanning`, `walCommit`, `addBatch`, `commitOffsets`, `sinkCommit` in continuous
    /// processing, and `triggerExecution` for the whole); phases that did not run are left out.
    pub duration_ms: BTreeMap<String, i64>,
    /// `eventTime`: `avg`, `max`, `min`, `watermark` of the event-time column (ISO-8601), when
    /// there is one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub event_time: BTreeMap<String, String>,
    /// `stateOperators`: one entry per stateful operator of the query.
    pub state_operators: Vec<StateOperatorProgress>,
    /// `sources`: one entry per source, in the query's source order.
    pub sources: Vec<SourceProgress>,
    /// `sink`: what was written to the sink.
    pub sink: SinkProgress,
    /// `objectStore` (Sluice only): the object store requests of this trigger, when the process
    /// uses an object store (`s3://`, `gs://`, ... paths).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub object_store: Option<ObjectStoreProgress>,
    /// `workers` (Sluice only): for a query on a cluster (`sluice.distributed.workers`), the
    /// tasks of this trigger each worker ran, by address.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub workers: Vec<WorkerProgress>,
}

/// The tasks one worker ran for a trigger (Sluice only).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkerProgress {
    /// `address`: the worker's `host:port`.
    pub address: String,
    /// `numTasks`: the tasks it ran (a task re-run after a lost worker counts again).
    pub num_tasks: u64,
    /// `taskDurationMs`: its tasks' durations added up, each from the moment the driver asked
    /// for its rows to its last row.
    pub task_duration_ms: u64,
}

/// What a trigger asked of object stores (Sluice only; counted over the whole process, so two
/// queries running at once in one process count each other's requests too).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStoreProgress {
    /// `requests`: requests sent, retries included.
    pub requests: u64,
    /// `retries`: requests sent again after a transient failure (HTTP 5xx or 429, a timeout, a
    /// lost connection), with exponential backoff (`sluice.storage.retry.*`).
    pub retries: u64,
    /// `failures`: requests that failed for good (a permanent error, or retries used up).
    pub failures: u64,
}

impl StreamingQueryProgress {
    /// The progress as Spark's pretty JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
    /// The progress as one compact JSON line.
    pub fn compact_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// One stateful operator's figures (Spark's `StateOperatorProgress`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StateOperatorProgress {
    /// `operatorName`: the operator's name, e.g. `stateStoreSave` or `dedupe`.
    pub operator_name: String,
    /// `numRowsTotal`: rows (keys) in the operator's state after the batch.
    pub num_rows_total: i64,
    /// `numRowsUpdated`: state rows added or updated by the batch.
    pub num_rows_updated: i64,
    /// `numRowsRemoved`: state rows removed by the batch (e.g. evicted once behind the watermark).
    pub num_rows_removed: i64,
    /// `allUpdatesTimeMs`: time spent updating state, in milliseconds.
    pub all_updates_time_ms: i64,
    /// `allRemovalsTimeMs`: time spent removing state rows, in milliseconds.
    pub all_removals_time_ms: i64,
    /// `commitTimeMs`: time spent committing the state stores, in milliseconds.
    pub commit_time_ms: i64,
    /// `numRowsDroppedByWatermark`: input rows dropped as later than the watermark.
    pub num_rows_dropped_by_watermark: i64,
    /// `memoryUsedBytes`: memory used by the operator's state stores, in bytes.
    pub memory_used_bytes: i64,
    /// `numShufflePartitions`: the number of partitions the operator's state is split in.
    pub num_shuffle_partitions: i64,
    /// `numStateStoreInstances`: the number of state stores (one per partition).
    pub num_state_store_instances: i64,
    /// `customMetrics`: operator-specific figures, e.g. `numDroppedDuplicateRows`.
    #[serde(default)]
    pub custom_metrics: BTreeMap<String, i64>,
}

/// One source's figures (Spark's `SourceProgress`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SourceProgress {
    /// `description`: the source's description, e.g. `FileStreamSource[/data/in]`.
    pub description: String,
    /// `startOffset`: where the trigger started reading (the previous trigger's end offset).
    pub start_offset: Option<serde_json::Value>,
    /// `endOffset`: where the trigger stopped reading.
    pub end_offset: Option<serde_json::Value>,
    /// `latestOffset`: the latest offset the source had (Sluice reports the end offset).
    pub latest_offset: Option<serde_json::Value>,
    /// `numInputRows`: rows read from this source in the trigger.
    pub num_input_rows: i64,
    /// `inputRowsPerSecond`: this source's rows over the time since the previous trigger started.
    pub input_rows_per_second: f64,
    /// `processedRowsPerSecond`: this source's rows over the time spent processing them.
    pub processed_rows_per_second: f64,
    /// `metrics`: source-specific figures (e.g. Kafka's `avgOffsetsBehindLatest`).
    #[serde(default)]
    pub metrics: BTreeMap<String, String>,
}

/// The sink's figures (Spark's `SinkProgress`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SinkProgress {
    /// `description`: the sink's description.
    pub description: String,
    /// `numOutputRows`: rows written to the sink in the trigger.
    pub num_output_rows: i64,
    /// `metrics`: sink-specific figures.
    #[serde(default)]
    pub metrics: BTreeMap<String, String>,
}

/// `onQueryStarted` (Spark's `QueryStartedEvent`): the query's thread has started.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryStartedEvent {
    /// `id`: the query id, stable across restarts.
    pub id: String,
    /// `runId`: the id of this run of the query.
    pub run_id: String,
    /// `name`: the query's name (`queryName`), if it has one.
    pub name: Option<String>,
    /// `timestamp`: when the query started, ISO-8601 UTC.
    pub timestamp: String,
}

/// `onQueryIdle`: a trigger found no new data (at most every 10 s per query, as Spark).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryIdleEvent {
    /// `id`: the query id, stable across restarts.
    pub id: String,
    /// `runId`: the id of this run of the query.
    pub run_id: String,
    /// `timestamp`: when the idle trigger was reported, ISO-8601 UTC.
    pub timestamp: String,
}

/// `onQueryTerminated`: `exception` is set when the query failed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryTerminatedEvent {
    /// `id`: the query id, stable across restarts.
    pub id: String,
    /// `runId`: the id of this run of the query.
    pub run_id: String,
    /// `exception`: the error the query failed with (`[CLASS] message`), `None` after a clean stop.
    pub exception: Option<String>,
    /// `errorClassOnException`: the failing error's class, `None` after a clean stop.
    pub error_class_on_exception: Option<String>,
}

/// Receives the events of every query of a session (Spark's `StreamingQueryListener`).
/// Methods are called on the query's own thread; keep them quick.
pub trait StreamingQueryListener: Send + Sync {
    /// Called once when the query's thread starts, before its first trigger (`onQueryStarted`).
    fn on_query_started(&self, _event: &QueryStartedEvent) {}
    /// Called after every trigger that ran a batch or epoch, with its progress
    /// (`onQueryProgress`).
    fn on_query_progress(&self, _progress: &StreamingQueryProgress) {}
    /// Called when a trigger found no new data, at most every 10 s per query (`onQueryIdle`).
    fn on_query_idle(&self, _event: &QueryIdleEvent) {}
    /// Called once when the query stops, cleanly or with an error (`onQueryTerminated`).
    fn on_query_terminated(&self, _event: &QueryTerminatedEvent) {}
}

/// Progress timestamps: ISO-8601 with milliseconds, as Spark writes them.
pub use crate::time_text::iso_timestamp_ms as format_timestamp_ms;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_uses_sparks_camel_case_keys() {
        let p = StreamingQueryProgress {
            id: "a".into(),
            run_id: "b".into(),
            name: None,
            timestamp: format_timestamp_ms(0),
            batch_id: 3,
            batch_duration: 5,
            num_input_rows: 7,
            input_rows_per_second: 1.0,
            processed_rows_per_second: 2.0,
            duration_ms: [("walCommit".to_string(), 1)].into_iter().collect(),
            event_time: BTreeMap::new(),
            state_operators: vec![],
            sources: vec![],
            sink: SinkProgress {
                description: "s".into(),
                num_output_rows: 7,
                metrics: BTreeMap::new(),
            },
            object_store: None,
            workers: Vec::new(),
        };
        let v: serde_json::Value = serde_json::from_str(&p.json()).unwrap();
        for key in [
            "id",
            "runId",
            "batchId",
            "numInputRows",
            "inputRowsPerSecond",
            "processedRowsPerSecond",
            "durationMs",
            "stateOperators",
            "sources",
            "sink",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {v}");
        }
        assert_eq!(v["timestamp"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["durationMs"]["walCommit"], 1);
    }
}
