//! Every query's recorded progress (the last [`HISTORY`] documents, and the latest figures and
//! totals), rendered as `/api/progress` JSON and as `/metrics` Prometheus text.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use sluice::StreamingQueryProgress;

use super::HISTORY;

/// Batch phases of `durationMs`, in the order Spark's UI stacks them.
const PHASES: [&str; 6] = [
    "latestOffset",
    "getBatch",
    "walCommit",
    "queryPlanning",
    "addBatch",
    "commitOffsets",
];

/// Every query's recorded progress, in order of first appearance.
#[derive(Default)]
pub(super) struct History {
    queries: Vec<QueryHistory>,
    /// Number of progress documents recorded so far (each document's `seq` is its number).
    seq: u64,
}

#[derive(Default)]
struct QueryHistory {
    id: String,
    run_id: String,
    name: Option<String>,
    active: bool,
    exception: Option<String>,
    /// `(seq, compact JSON)`, the last [`HISTORY`].
    progress: VecDeque<(u64, Arc<str>)>,
    latest: Option<Latest>,
    batches_total: u64,
    input_rows_total: u64,
    dropped_by_watermark_total: u64,
    /// Tasks run per worker (a query on a cluster), summed over every micro-batch.
    worker_tasks_total: BTreeMap<String, u64>,
}

/// The figures of a query's last progress that `/metrics` shows.
struct Latest {
    batch_id: i64,
    num_input_rows: i64,
    input_rows_per_second: f64,
    processed_rows_per_second: f64,
    batch_duration_ms: i64,
    phases: Vec<(&'static str, i64)>,
    /// `(rows, memory bytes)` summed over the stateful operators, when there are any.
    state: Option<(i64, i64)>,
    watermark_ms: Option<i64>,
    event_time_max_ms: Option<i64>,
    /// `(worker, tasks, task milliseconds)` of a query on a cluster.
    workers: Vec<(String, u64, u64)>,
}

/// One sample per worker: its `worker` label and `value`.
fn worker_values(
    workers: &[(String, u64, u64)],
    value: impl Fn(&(String, u64, u64)) -> f64,
) -> Vec<(Option<String>, f64)> {
    workers
        .iter()
        .map(|w| (Some(format!("worker=\"{}\"", label_value(&w.0))), value(w)))
        .collect()
}

/// ISO-8601 (`2026-09-15T12:10:00.000Z`) to epoch milliseconds.
fn epoch_ms(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}

impl History {
    fn query(&mut self, id: &str) -> &mut QueryHistory {
        let i = match self.queries.iter().position(|q| q.id == id) {
            Some(i) => i,
            None => {
                self.queries.push(QueryHistory {
                    id: id.to_string(),
                    active: true,
                    ..Default::default()
                });
                self.queries.len() - 1
            }
        };
        &mut self.queries[i]
    }

    pub(super) fn started(&mut self, id: &str, run_id: &str, name: Option<&str>) {
        let q = self.query(id);
        q.run_id = run_id.to_string();
        q.name = name.map(str::to_string);
        q.active = true;
        q.exception = None;
    }

    pub(super) fn terminated(&mut self, id: &str, exception: Option<&str>) {
        let q = self.query(id);
        q.active = false;
        q.exception = exception.map(str::to_string);
    }

    pub(super) fn record(&mut self, p: &StreamingQueryProgress) {
        self.seq += 1;
        let seq = self.seq;
        let q = self.query(&p.id);
        q.run_id = p.run_id.clone();
        if p.name.is_some() {
            q.name = p.name.clone();
        }
        q.progress.push_back((seq, Arc::from(p.compact_json())));
        while q.progress.len() > HISTORY {
            q.progress.pop_front();
        }
        let dropped: i64 = p
            .state_operators
            .iter()
            .map(|s| s.num_rows_dropped_by_watermark)
            .sum();
        q.batches_total += 1;
        q.input_rows_total += p.num_input_rows.max(0) as u64;
        q.dropped_by_watermark_total += dropped.max(0) as u64;
        for w in &p.workers {
            *q.worker_tasks_total.entry(w.address.clone()).or_default() += w.num_tasks;
        }
        q.latest = Some(Latest {
            batch_id: p.batch_id,
            num_input_rows: p.num_input_rows,
            input_rows_per_second: p.input_rows_per_second,
            processed_rows_per_second: p.processed_rows_per_second,
            batch_duration_ms: p
                .duration_ms
                .get("triggerExecution")
                .copied()
                .unwrap_or(p.batch_duration),
            phases: PHASES
                .iter()
                .filter_map(|&k| p.duration_ms.get(k).map(|&v| (k, v)))
                .collect(),
            state: (!p.state_operators.is_empty()).then(|| {
                (
                    p.state_operators.iter().map(|s| s.num_rows_total).sum(),
                    p.state_operators.iter().map(|s| s.memory_used_bytes).sum(),
                )
            }),
            watermark_ms: p.event_time.get("watermark").and_then(|s| epoch_ms(s)),
            event_time_max_ms: p.event_time.get("max").and_then(|s| epoch_ms(s)),
            workers: p
                .workers
                .iter()
                .map(|w| (w.address.clone(), w.num_tasks, w.task_duration_ms))
                .collect(),
        });
    }

    /// `/api/progress?since=SEQ`.
    pub(super) fn progress_json(&self, since: u64) -> String {
        let mut out = format!("{{\"seq\":{},\"queries\":[", self.seq);
        for (i, q) in self.queries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let status = match (q.active, &q.exception) {
                (true, _) => "active",
                (false, None) => "terminated",
                (false, Some(_)) => "failed",
            };
            let head = serde_json::json!({
                "id": q.id,
                "name": q.name,
                "runId": q.run_id,
                "status": status,
                "exception": q.exception,
            })
            .to_string();
            // The head object without its closing brace, then the progress documents as they
            // were serialized when recorded.
            out.push_str(&head[..head.len() - 1]);
            out.push_str(",\"progress\":[");
            let mut first = true;
            for (_, json) in q.progress.iter().filter(|(seq, _)| *seq > since) {
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(json);
            }
            out.push_str("]}");
        }
        out.push_str("]}");
        out
    }

    /// `/metrics`: Prometheus text exposition format 0.0.4.
    pub(super) fn metrics(&self) -> String {
        type Value = Box<dyn Fn(&QueryHistory) -> Vec<(Option<String>, f64)>>;
        fn latest(f: impl Fn(&Latest) -> Option<f64> + 'static) -> Value {
            Box::new(move |q| {
                q.latest
                    .as_ref()
                    .and_then(&f)
                    .map(|v| vec![(None, v)])
                    .unwrap_or_default()
            })
        }
        fn total(f: impl Fn(&QueryHistory) -> f64 + 'static) -> Value {
            Box::new(move |q| vec![(None, f(q))])
        }
        let families: Vec<(&str, &str, &str, Value)> = vec![
            (
                "sluice_query_active",
                "gauge",
                "1 while the query runs, 0 once it has stopped or failed.",
                total(|q| if q.active { 1.0 } else { 0.0 }),
            ),
            (
                "sluice_batch_id",
                "gauge",
                "Id of the query's last micro-batch.",
                latest(|l| Some(l.batch_id as f64)),
            ),
            (
                "sluice_input_rows",
                "gauge",
                "Rows read by the query's last micro-batch (numInputRows).",
                latest(|l| Some(l.num_input_rows as f64)),
            ),
            (
                "sluice_input_rows_per_second",
                "gauge",
                "Rate at which rows arrived for the last micro-batch (inputRowsPerSecond).",
                latest(|l| Some(l.input_rows_per_second)),
            ),
            (
                "sluice_processed_rows_per_second",
                "gauge",
                "Rate at which the last micro-batch processed its rows (processedRowsPerSecond).",
                latest(|l| Some(l.processed_rows_per_second)),
            ),
            (
                "sluice_batch_duration_ms",
                "gauge",
                "Duration of the last micro-batch in milliseconds (durationMs.triggerExecution).",
                latest(|l| Some(l.batch_duration_ms as f64)),
            ),
            (
                "sluice_batch_phase_duration_ms",
                "gauge",
                "Duration of each phase of the last micro-batch in milliseconds (durationMs).",
                Box::new(|q| {
                    q.latest
                        .as_ref()
                        .map(|l| {
                            l.phases
                                .iter()
                                .map(|(k, v)| (Some(format!("phase=\"{k}\"")), *v as f64))
                                .collect()
                        })
                        .unwrap_or_default()
                }),
            ),
            (
                "sluice_state_rows",
                "gauge",
                "Rows held in state by the query's stateful operators (numRowsTotal, summed).",
                latest(|l| l.state.map(|(rows, _)| rows as f64)),
            ),
            (
                "sluice_state_memory_bytes",
                "gauge",
                "Memory used by the query's state stores in bytes (memoryUsedBytes, summed).",
                latest(|l| l.state.map(|(_, mem)| mem as f64)),
            ),
            (
                "sluice_watermark_ms",
                "gauge",
                "The query's event-time watermark in milliseconds since the epoch.",
                latest(|l| l.watermark_ms.map(|v| v as f64)),
            ),
            (
                "sluice_event_time_lag_ms",
                "gauge",
                "Max event time of the last micro-batch minus the watermark, in milliseconds.",
                latest(|l| match (l.event_time_max_ms, l.watermark_ms) {
                    (Some(max), Some(w)) => Some((max - w) as f64),
                    _ => None,
                }),
            ),
            (
                "sluice_worker_tasks",
                "gauge",
                "Tasks each worker ran for the last micro-batch (a query on a cluster).",
                Box::new(|q| {
                    q.latest
                        .as_ref()
                        .map(|l| worker_values(&l.workers, |(_, n, _)| *n as f64))
                        .unwrap_or_default()
                }),
            ),
            (
                "sluice_worker_task_duration_ms",
                "gauge",
                "Each worker's task durations for the last micro-batch, added up, in milliseconds.",
                Box::new(|q| {
                    q.latest
                        .as_ref()
                        .map(|l| worker_values(&l.workers, |(_, _, ms)| *ms as f64))
                        .unwrap_or_default()
                }),
            ),
            (
                "sluice_worker_tasks_total",
                "counter",
                "Tasks each worker ran, summed over every micro-batch.",
                Box::new(|q| {
                    q.worker_tasks_total
                        .iter()
                        .map(|(w, n)| (Some(format!("worker=\"{}\"", label_value(w))), *n as f64))
                        .collect()
                }),
            ),
            (
                "sluice_batches_total",
                "counter",
                "Micro-batches that reported progress.",
                total(|q| q.batches_total as f64),
            ),
            (
                "sluice_input_rows_total",
                "counter",
                "Rows read, summed over every micro-batch.",
                total(|q| q.input_rows_total as f64),
            ),
            (
                "sluice_rows_dropped_by_watermark_total",
                "counter",
                "Rows dropped as late (behind the watermark), summed over every micro-batch.",
                total(|q| q.dropped_by_watermark_total as f64),
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in &families {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for q in &self.queries {
                let labels = format!(
                    "query=\"{}\",id=\"{}\"",
                    label_value(q.name.as_deref().unwrap_or(&q.id)),
                    label_value(&q.id)
                );
                for (extra, v) in value(q) {
                    let labels = match extra {
                        Some(extra) => format!("{labels},{extra}"),
                        None => labels.clone(),
                    };
                    let _ = writeln!(out, "{name}{{{labels}}} {}", sample(v));
                }
            }
        }
        out
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value as Prometheus spells it.
pub(super) fn sample(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}
