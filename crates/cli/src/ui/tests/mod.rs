//! The dashboard's tests: its progress history and metrics here (with the helpers the other
//! test files share: a progress document, plain HTTP requests), its HTTP server under faults in
//! `server.rs`, and its page drawn in headless Chromium in `browser.rs`.

mod browser;
mod server;

use super::history::sample;
use super::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn progress(id: &str, batch: i64, dropped: i64) -> StreamingQueryProgress {
    serde_json::from_value(serde_json::json!({
        "id": id, "runId": "r", "name": "q \"one\"", "timestamp": "2026-09-15T12:10:00.000Z",
        "batchId": batch, "batchDuration": 12, "numInputRows": 100,
        "inputRowsPerSecond": 1000.0, "processedRowsPerSecond": 2500.5,
        "durationMs": {"triggerExecution": 40, "addBatch": 30, "walCommit": 5},
        "eventTime": {"watermark": "2026-09-15T12:10:00.000Z",
                      "max": "2026-09-15T12:10:03.500Z"},
        "stateOperators": [{
            "operatorName": "stateStoreSave", "numRowsTotal": 10, "numRowsUpdated": 1,
            "numRowsRemoved": 0, "allUpdatesTimeMs": 0, "allRemovalsTimeMs": 0,
            "commitTimeMs": 0, "numRowsDroppedByWatermark": dropped,
            "memoryUsedBytes": 2048, "numShufflePartitions": 2,
            "numStateStoreInstances": 2, "customMetrics": {}
        }],
        "sources": [],
        "sink": {"description": "noop", "numOutputRows": 0, "metrics": {}},
        "workers": [{"address": "10.0.0.5:7078", "numTasks": 3, "taskDurationMs": 25}]
    }))
    .expect("a progress document")
}

#[test]
fn history_keeps_the_last_documents_and_answers_what_is_new() {
    let mut h = History::default();
    h.started("a", "r", Some("q1"));
    for b in 0..(HISTORY as i64 + 5) {
        h.record(&progress("a", b, 0));
    }
    h.record(&progress("b", 0, 0));
    let all: serde_json::Value = serde_json::from_str(&h.progress_json(0)).unwrap();
    assert_eq!(all["seq"], HISTORY as u64 + 6);
    let qs = all["queries"].as_array().unwrap();
    assert_eq!(qs.len(), 2);
    assert_eq!(qs[0]["id"], "a");
    assert_eq!(qs[0]["status"], "active");
    let p = qs[0]["progress"].as_array().unwrap();
    assert_eq!(p.len(), HISTORY);
    assert_eq!(p[0]["batchId"], 5, "the oldest documents are dropped");
    assert_eq!(p[HISTORY - 1]["durationMs"]["addBatch"], 30);
    assert_eq!(p[0]["stateOperators"][0]["memoryUsedBytes"], 2048);

    let new: serde_json::Value =
        serde_json::from_str(&h.progress_json(HISTORY as u64 + 4)).unwrap();
    let a = new["queries"][0]["progress"].as_array().unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["batchId"], HISTORY as i64 + 4);
    assert_eq!(new["queries"][1]["progress"].as_array().unwrap().len(), 1);

    h.terminated("a", Some("boom"));
    let v: serde_json::Value = serde_json::from_str(&h.progress_json(u64::MAX)).unwrap();
    assert_eq!(v["queries"][0]["status"], "failed");
    assert_eq!(v["queries"][0]["exception"], "boom");
    assert_eq!(v["queries"][0]["progress"].as_array().unwrap().len(), 0);
}

#[test]
fn metrics_are_prometheus_text_with_escaped_labels_and_counters_over_every_batch() {
    let mut h = History::default();
    h.record(&progress("a", 0, 3));
    h.record(&progress("a", 1, 4));
    let m = h.metrics();
    let labels = "query=\"q \\\"one\\\"\",id=\"a\"";
    for line in [
        "# TYPE sluice_input_rows_per_second gauge".to_string(),
        "# TYPE sluice_rows_dropped_by_watermark_total counter".to_string(),
        format!("sluice_batch_id{{{labels}}} 1"),
        format!("sluice_input_rows_per_second{{{labels}}} 1000"),
        format!("sluice_processed_rows_per_second{{{labels}}} 2500.5"),
        format!("sluice_batch_duration_ms{{{labels}}} 40"),
        format!("sluice_batch_phase_duration_ms{{{labels},phase=\"addBatch\"}} 30"),
        format!("sluice_state_rows{{{labels}}} 10"),
        format!("sluice_state_memory_bytes{{{labels}}} 2048"),
        format!("sluice_rows_dropped_by_watermark_total{{{labels}}} 7"),
        format!("sluice_input_rows_total{{{labels}}} 200"),
        format!("sluice_watermark_ms{{{labels}}} {}", 1_789_474_200_000i64),
        format!("sluice_event_time_lag_ms{{{labels}}} 3500"),
        format!("sluice_worker_tasks{{{labels},worker=\"10.0.0.5:7078\"}} 3"),
        format!("sluice_worker_task_duration_ms{{{labels},worker=\"10.0.0.5:7078\"}} 25"),
        format!("sluice_worker_tasks_total{{{labels},worker=\"10.0.0.5:7078\"}} 6"),
    ] {
        assert!(m.lines().any(|l| l == line), "no line {line:?} in\n{m}");
    }
    // Every sample line belongs to a family announced by HELP and TYPE.
    for l in m.lines().filter(|l| !l.starts_with('#')) {
        let name = &l[..l.find('{').unwrap()];
        assert!(m.contains(&format!("# TYPE {name} ")), "{l}");
        assert!(m.contains(&format!("# HELP {name} ")), "{l}");
    }
    assert_eq!(sample(f64::INFINITY), "+Inf");
    assert_eq!(sample(f64::NAN), "NaN");
}

/// `HOST:PORT` of a dashboard's URL.
fn host(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// Sends `raw` on a new connection and reads the answer until the server closes it (within
/// `wait`): the response text, or the error.
fn exchange(host: &str, raw: &str, wait: Duration) -> std::io::Result<String> {
    let mut s = TcpStream::connect(host)?;
    s.set_read_timeout(Some(wait))?;
    s.write_all(raw.as_bytes())?;
    let mut out = Vec::new();
    // A connection closed with unread bytes may end in a reset after the answer.
    if let Err(e) = s.read_to_end(&mut out) {
        if out.is_empty() {
            return Err(e);
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `GET path` with `Connection: close` and extra header lines, answered within `wait`.
fn get_within(host: &str, path: &str, headers: &str, wait: Duration) -> String {
    let started = Instant::now();
    let response = exchange(
        host,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n"),
        wait,
    )
    .unwrap_or_else(|e| panic!("GET {path}: no answer within {wait:?}: {e}"));
    assert!(
        started.elapsed() <= wait,
        "GET {path} took {:?}",
        started.elapsed()
    );
    response
}

fn host_of(dash: &Dashboard) -> String {
    host(dash.url())
}
