//! Progress reporting: `StreamingQueryProgress` and friends, with Spark's JSON keys, and the
//! `StreamingQueryListener` that receives query events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Progress of one trigger (Spark's `StreamingQueryProgress`). `json()` gives Spark's layout.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StreamingQueryProgress {
    /// The query id, stable across restarts (stored in the checkpoint's `metadata`).
    pub id: String,
    /// A new id for every start of the query.
    pub run_id: String,
    pub name: Option<String>,
    /// When the trigger started, ISO-8601 UTC (`2026-11-29T10:00:00.000Z`).
    pub timestamp: String,
    pub batch_id: i64,
    pub batch_duration: i64,
    pub num_input_rows: i64,
    pub input_rows_per_second: f64,
    pub processed_rows_per_second: f64,
    /// `latestOffset`, `getBatch`, `queryPlanning`, `walCommit`, `addBatch`, `commitOffsets`,
    /// `triggerExecution` in milliseconds.
    pub duration_ms: BTreeMap<String, i64>,
    /// `avg`, `max`, `min`, `watermark` of the event-time column (ISO-8601), when there is one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub event_time: BTreeMap<String, String>,
    pub state_operators: Vec<StateOperatorProgress>,
    pub sources: Vec<SourceProgress>,
    pub sink: SinkProgress,
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
    pub operator_name: String,
    pub num_rows_total: i64,
    pub num_rows_updated: i64,
    pub num_rows_removed: i64,
    pub all_updates_time_ms: i64,
    pub all_removals_time_ms: i64,
    pub commit_time_ms: i64,
    pub num_rows_dropped_by_watermark: i64,
    pub memory_used_bytes: i64,
    pub num_shuffle_partitions: i64,
    pub num_state_store_instances: i64,
    #[serde(default)]
    pub custom_metrics: BTreeMap<String, i64>,
}

/// One source's figures (Spark's `SourceProgress`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SourceProgress {
    pub description: String,
    pub start_offset: Option<serde_json::Value>,
    pub end_offset: Option<serde_json::Value>,
    pub latest_offset: Option<serde_json::Value>,
    pub num_input_rows: i64,
    pub input_rows_per_second: f64,
    pub processed_rows_per_second: f64,
    #[serde(default)]
    pub metrics: BTreeMap<String, String>,
}

/// The sink's figures (Spark's `SinkProgress`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SinkProgress {
    pub description: String,
    pub num_output_rows: i64,
    #[serde(default)]
    pub metrics: BTreeMap<String, String>,
}

/// `onQueryStarted`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryStartedEvent {
    pub id: String,
    pub run_id: String,
    pub name: Option<String>,
    pub timestamp: String,
}

/// `onQueryIdle`: a trigger found no new data (at most every 10 s per query, as Spark).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryIdleEvent {
    pub id: String,
    pub run_id: String,
    pub timestamp: String,
}

/// `onQueryTerminated`: `exception` is set when the query failed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryTerminatedEvent {
    pub id: String,
    pub run_id: String,
    pub exception: Option<String>,
    pub error_class_on_exception: Option<String>,
}

/// Receives the events of every query of a session (Spark's `StreamingQueryListener`).
/// Methods are called on the query's own thread; keep them quick.
pub trait StreamingQueryListener: Send + Sync {
    fn on_query_started(&self, _event: &QueryStartedEvent) {}
    fn on_query_progress(&self, _progress: &StreamingQueryProgress) {}
    fn on_query_idle(&self, _event: &QueryIdleEvent) {}
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
