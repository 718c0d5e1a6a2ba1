//! `sluice run --ui ADDR`: a live dashboard of the running queries, like Spark's Structured
//! Streaming tab, served over HTTP while the queries run (off unless asked for).
//!
//! - `/`: one self-contained page (`ui.html`, no external scripts) that polls `/api/progress`
//!   every second and draws, per query, on `<canvas>`: input vs processing rate, input rows,
//!   batch duration by phase, event-time max and watermark, event-time lag, state rows, state
//!   memory and rows dropped as late, with the batch id on the x axis.
//! - `/api/progress`: `{"seq":N,"queries":[{"id","name","runId","status","exception",
//!   "progress":[StreamingQueryProgress...]}]}`, the last [`HISTORY`] progress documents per
//!   query. `?since=N` returns only the documents recorded after `seq` N (the page asks for
//!   what is new each second instead of the whole history).
//! - `/metrics`: Prometheus text exposition of each query's latest figures (gauges) and totals
//!   over every batch seen (counters), labelled `query` (name, else id) and `id`.
//!
//! [`start`] binds the address and serves from background threads; the [`Dashboard`] it returns
//! is the `StreamingQueryListener` to register on the session (`Session::add_listener`).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use sluice::progress::{QueryStartedEvent, QueryTerminatedEvent, StreamingQueryListener};
use sluice::StreamingQueryProgress;

/// The page, self-contained.
const PAGE: &str = include_str!("ui.html");

/// Progress documents kept per query (the page's charts show at most this many batches).
pub const HISTORY: usize = 1000;

/// Threads answering requests (a slow client does not hold up the others).
const WORKERS: usize = 2;

/// Batch phases of `durationMs`, in the order Spark's UI stacks them.
const PHASES: [&str; 6] = [
    "latestOffset",
    "getBatch",
    "walCommit",
    "queryPlanning",
    "addBatch",
    "commitOffsets",
];

/// The dashboard: a listener recording every query's progress, and the HTTP server showing it.
pub struct Dashboard {
    url: String,
    history: Arc<Mutex<History>>,
    server: Arc<tiny_http::Server>,
}

impl Dashboard {
    /// The page's address, `http://HOST:PORT/` (with the port chosen when asked for port 0).
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        // Each call wakes one worker blocked waiting for a request; it then returns.
        for _ in 0..WORKERS {
            self.server.unblock();
        }
    }
}

/// Binds `addr` (`HOST:PORT`; a bare port means `127.0.0.1:PORT`; port 0 picks a free one),
/// serves the dashboard from background threads and prints `sluice: dashboard at URL` to
/// stderr. Register the returned dashboard with `Session::add_listener` before starting the
/// queries.
pub fn start(addr: &str) -> Result<Arc<Dashboard>, String> {
    let addr = addr.trim();
    let addr = if addr.parse::<u16>().is_ok() {
        format!("127.0.0.1:{addr}")
    } else {
        addr.to_string()
    };
    let server = tiny_http::Server::http(addr.as_str()).map_err(|e| {
        format!(
            "--ui {addr}: cannot serve the dashboard there: {e}. Is another program (or \
             another sluice) using that port? Give another HOST:PORT, or port 0 for any free one"
        )
    })?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| format!("--ui {addr}: the server is not listening on a TCP address"))?;
    let url = format!("http://{}/", browsable(bound));
    let server = Arc::new(server);
    let history = Arc::new(Mutex::new(History::default()));
    for i in 0..WORKERS {
        let (server, history) = (server.clone(), history.clone());
        std::thread::Builder::new()
            .name(format!("sluice-ui-{i}"))
            .spawn(move || {
                for request in server.incoming_requests() {
                    respond(request, &history);
                }
            })
            .map_err(|e| format!("--ui {addr}: cannot start the dashboard's thread: {e}"))?;
    }
    crate::status::print_line(&format!("sluice: dashboard at {url}"));
    Ok(Arc::new(Dashboard {
        url,
        history,
        server,
    }))
}

/// The address to open in a browser on this machine (a wildcard bind is reached by loopback).
fn browsable(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => format!("127.0.0.1:{}", a.port()),
        SocketAddr::V6(a) if a.ip().is_unspecified() => format!("[::1]:{}", a.port()),
        a => a.to_string(),
    }
}

fn lock(history: &Mutex<History>) -> MutexGuard<'_, History> {
    history.lock().unwrap_or_else(|p| p.into_inner())
}

fn respond(request: tiny_http::Request, history: &Mutex<History>) {
    let url = request.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let get = matches!(
        request.method(),
        tiny_http::Method::Get | tiny_http::Method::Head
    );
    let (status, content_type, body) = match path {
        _ if !get => (
            405,
            "text/plain; charset=utf-8",
            "only GET is served here\n".to_string(),
        ),
        "/" | "/index.html" => (200, "text/html; charset=utf-8", PAGE.to_string()),
        "/api/progress" => {
            let since = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("since="))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            (200, "application/json", lock(history).progress_json(since))
        }
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            lock(history).metrics(),
        ),
        _ => (
            404,
            "text/plain; charset=utf-8",
            "not found: the dashboard serves /, /api/progress and /metrics\n".to_string(),
        ),
    };
    let mut response = tiny_http::Response::from_string(body).with_status_code(status);
    for (name, value) in [
        ("Content-Type", content_type),
        ("Cache-Control", "no-store"),
    ] {
        if let Ok(h) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(h);
        }
    }
    // The client may have gone away; nothing to do about it.
    let _ = request.respond(response);
}

impl StreamingQueryListener for Dashboard {
    fn on_query_started(&self, e: &QueryStartedEvent) {
        lock(&self.history).started(&e.id, &e.run_id, e.name.as_deref());
    }
    fn on_query_progress(&self, p: &StreamingQueryProgress) {
        lock(&self.history).record(p);
    }
    fn on_query_terminated(&self, e: &QueryTerminatedEvent) {
        lock(&self.history).terminated(&e.id, e.exception.as_deref());
    }
}

/// Every query's recorded progress, in order of first appearance.
#[derive(Default)]
struct History {
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

    fn started(&mut self, id: &str, run_id: &str, name: Option<&str>) {
        let q = self.query(id);
        q.run_id = run_id.to_string();
        q.name = name.map(str::to_string);
        q.active = true;
        q.exception = None;
    }

    fn terminated(&mut self, id: &str, exception: Option<&str>) {
        let q = self.query(id);
        q.active = false;
        q.exception = exception.map(str::to_string);
    }

    fn record(&mut self, p: &StreamingQueryProgress) {
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
        });
    }

    /// `/api/progress?since=SEQ`.
    fn progress_json(&self, since: u64) -> String {
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
    fn metrics(&self) -> String {
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
fn sample(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::time::{Duration, Instant};

    use sluice::{col, window, OutputMode, Session, Trigger};

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
            "sink": {"description": "noop", "numOutputRows": 0, "metrics": {}}
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

    #[test]
    fn a_taken_port_is_an_error_naming_the_address() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let err = start(&addr).err().expect("the port is taken");
        assert!(err.contains(&format!("--ui {addr}")), "{err}");
        assert!(err.contains("port"), "{err}");
    }

    /// `GET path` over a plain TCP connection: (status line, body).
    fn get(base: &str, path: &str) -> (String, String) {
        let host = base
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let mut s = TcpStream::connect(&host).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head.lines().next().unwrap_or_default().to_string();
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        (status, if chunked { dechunk(body) } else { body.into() })
    }

    fn dechunk(mut body: &str) -> String {
        let mut out = String::new();
        while let Some((size, rest)) = body.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&rest[..n]);
            body = &rest[n + 2..];
        }
        out
    }

    /// The integer value of `attr="N"` at each of its occurrences in `html`.
    fn attr_values(html: &str, attr: &str) -> Vec<i64> {
        let pat = format!("{attr}=\"");
        html.match_indices(&pat)
            .filter_map(|(i, _)| {
                let rest = &html[i + pat.len()..];
                rest[..rest.find('"')?].parse().ok()
            })
            .collect()
    }

    /// `data-series-points` of the canvas `data-chart=KEY` of query section `name`.
    fn chart_points(dom: &str, name: &str, key: &str) -> i64 {
        let section = dom
            .split("<section")
            .find(|s| s.contains(&format!("data-query-name=\"{name}\"")))
            .unwrap_or_else(|| panic!("no section for query {name} in the DOM"));
        let canvas = section
            .split("<canvas")
            .find(|c| c.contains(&format!("data-chart=\"{key}\"")))
            .unwrap_or_else(|| panic!("no {key} chart for {name}"));
        let tag = &canvas[..canvas.find('>').unwrap()];
        *attr_values(tag, "data-series-points")
            .first()
            .unwrap_or_else(|| panic!("chart {key} of {name} has no data-series-points: {tag}"))
    }

    /// Headless Chromium with its own profile, 5 s of page time (the page polls every second),
    /// killed if it has not finished within two minutes.
    fn headless(chromium: &Path, args: &[&str]) -> std::process::Output {
        let profile = tempfile::tempdir().unwrap();
        Command::new("timeout")
            .args(["--kill-after=10", "120"])
            .arg(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--virtual-time-budget=5000",
                &format!("--user-data-dir={}", profile.path().display()),
            ])
            .args(args)
            .output()
            .unwrap()
    }

    fn screenshot_path() -> PathBuf {
        // target/ of the build (CARGO_TARGET_DIR or the workspace's).
        let exe = std::env::current_exe().unwrap();
        let target = exe
            .ancestors()
            .find(|p| p.join("debug").is_dir() || p.join("release").is_dir())
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        target.join("ui-dashboard.png")
    }

    #[test]
    fn the_dashboard_shows_running_queries_as_json_metrics_and_charts_in_a_browser() {
        let chromium = Path::new("/usr/bin/chromium");
        assert!(
            chromium.exists(),
            "/usr/bin/chromium is missing: this test draws the dashboard in headless Chromium. \
             Run `apt-get install -y chromium` (.ci/run installs it)"
        );
        let session = Session::builder().shuffle_partitions(2).build().unwrap();
        let dash = start("127.0.0.1:0").unwrap();
        assert!(
            dash.url().starts_with("http://127.0.0.1:"),
            "{}",
            dash.url()
        );
        assert!(!dash.url().ends_with(":0/"), "{}", dash.url());
        session.add_listener(dash.clone());
        let dir = tempfile::tempdir().unwrap();

        // 100 rows a batch, event time one second further each batch, each row up to 9 s
        // behind it: with a 3 s watermark some rows of every batch are late.
        let windowed = session
            .read_stream()
            .format("rate-micro-batch")
            .option("rowsPerBatch", 100)
            .option("startTimestamp", 1_789_474_200_000i64)
            .load_source()
            .unwrap()
            .select_sql([
                "timestamp - CASE value % 5 WHEN 0 THEN INTERVAL 0 SECONDS \
                 WHEN 1 THEN INTERVAL 2 SECONDS WHEN 2 THEN INTERVAL 4 SECONDS \
                 WHEN 3 THEN INTERVAL 6 SECONDS ELSE INTERVAL 9 SECONDS END AS ts",
                "value % 4 AS key",
            ])
            .unwrap()
            .with_watermark("ts", "3 seconds")
            .unwrap()
            .group_by([window(col("ts"), "5 seconds"), col("key")])
            .count()
            .unwrap()
            .write_stream()
            .query_name("windowed_counts")
            .output_mode(OutputMode::Update)
            .format("noop")
            .option("checkpointLocation", dir.path().join("windowed").display())
            .trigger(Trigger::ProcessingTime(Duration::from_millis(150)))
            .start()
            .unwrap();
        let filtered = session
            .read_stream()
            .format("rate-micro-batch")
            .option("rowsPerBatch", 50)
            .load_source()
            .unwrap()
            .filter_sql("value % 3 = 0")
            .unwrap()
            .write_stream()
            .query_name("filtered_rows")
            .format("noop")
            .option("checkpointLocation", dir.path().join("filtered").display())
            .trigger(Trigger::ProcessingTime(Duration::from_millis(300)))
            .start()
            .unwrap();

        let deadline = Instant::now() + Duration::from_secs(300);
        while windowed.recent_progress().len() < 12 || filtered.recent_progress().len() < 3 {
            assert!(windowed.is_active(), "{:?}", windowed.exception());
            assert!(filtered.is_active(), "{:?}", filtered.exception());
            assert!(
                Instant::now() < deadline,
                "the queries made too few batches"
            );
            std::thread::sleep(Duration::from_millis(50));
        }

        // (1) The JSON history and the metrics, over plain HTTP.
        let (status, body) = get(dash.url(), "/api/progress");
        assert!(status.contains("200"), "{status}");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        let queries = doc["queries"].as_array().unwrap();
        let q = queries
            .iter()
            .find(|q| q["name"] == "windowed_counts")
            .unwrap_or_else(|| panic!("no windowed_counts in {body}"));
        assert_eq!(q["id"], windowed.id());
        assert_eq!(q["status"], "active");
        let p = q["progress"].as_array().unwrap();
        assert!(p.len() >= 12, "{} progress documents", p.len());
        assert!(p.iter().all(|p| p["durationMs"]["addBatch"].is_i64()));
        assert!(p.iter().any(|p| p["numInputRows"] == 100));
        assert!(p.iter().any(|p| p["eventTime"]["watermark"].is_string()));
        assert!(
            p.iter()
                .any(|p| p["stateOperators"][0]["numRowsTotal"].as_i64() > Some(0)),
            "no state rows in {body}"
        );
        let dropped: i64 = p
            .iter()
            .filter_map(|p| p["stateOperators"][0]["numRowsDroppedByWatermark"].as_i64())
            .sum();
        assert!(dropped > 0, "no late rows in {body}");
        assert!(queries.iter().any(|q| q["name"] == "filtered_rows"));
        let last_seq = doc["seq"].as_u64().unwrap();
        let (_, newer) = get(dash.url(), &format!("/api/progress?since={last_seq}"));
        let newer: serde_json::Value = serde_json::from_str(&newer).unwrap();
        for q in newer["queries"].as_array().unwrap() {
            // Only what was recorded in between (a batch or two at most).
            assert!(q["progress"].as_array().unwrap().len() < 5, "{q}");
        }

        let (status, metrics) = get(dash.url(), "/metrics");
        assert!(status.contains("200"), "{status}");
        let label = format!("query=\"windowed_counts\",id=\"{}\"", windowed.id());
        for family in [
            "sluice_input_rows_per_second",
            "sluice_processed_rows_per_second",
            "sluice_batch_duration_ms",
            "sluice_batch_id",
            "sluice_state_rows",
            "sluice_state_memory_bytes",
            "sluice_rows_dropped_by_watermark_total",
            "sluice_watermark_ms",
        ] {
            assert!(metrics.contains(&format!("# HELP {family} ")), "{metrics}");
            assert!(metrics.contains(&format!("# TYPE {family} ")), "{metrics}");
            assert!(
                metrics.contains(&format!("{family}{{{label}}} ")),
                "no {family} for windowed_counts in\n{metrics}"
            );
        }
        let value = |family: &str| -> f64 {
            let prefix = format!("{family}{{{label}}} ");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap()
                .parse()
                .unwrap()
        };
        assert!(value("sluice_rows_dropped_by_watermark_total") >= dropped as f64);
        assert!(value("sluice_state_rows") > 0.0);
        assert!(value("sluice_watermark_ms") > 1_789_474_200_000.0);
        assert!(value("sluice_batch_id") >= 11.0);
        assert!(
            !metrics.contains("sluice_state_rows{query=\"filtered_rows\""),
            "a stateless query has no state gauge"
        );
        let (status, _) = get(dash.url(), "/nothing-here");
        assert!(status.contains("404"), "{status}");

        // (2) The page in a real browser: it fetches the JSON and draws every chart.
        let dom = headless(chromium, &["--dump-dom", dash.url()]);
        let html = String::from_utf8_lossy(&dom.stdout).to_string();
        assert!(
            dom.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&dom.stderr)
        );
        let body_tag = &html[html.find("<body").expect("a body")..];
        let body_tag = &body_tag[..body_tag.find('>').unwrap()];
        let points = attr_values(body_tag, "data-points");
        assert!(
            points.first().copied().unwrap_or(0) >= 15,
            "the page drew no progress points: {body_tag}\n{html}"
        );
        for key in [
            "rates",
            "input-rows",
            "duration",
            "event-time",
            "lag",
            "state-rows",
            "state-memory",
            "late",
        ] {
            let n = chart_points(&html, "windowed_counts", key);
            assert!(n >= 10, "chart {key} of windowed_counts drew {n} points");
        }
        assert!(chart_points(&html, "filtered_rows", "rates") >= 3);
        assert_eq!(
            chart_points(&html, "filtered_rows", "state-rows"),
            0,
            "a stateless query draws no state"
        );
        assert!(html.contains("Input rate vs processing rate"));

        // (3) A screenshot, larger than a blank page.
        let png = screenshot_path();
        let _ = std::fs::remove_file(&png);
        let shot = headless(
            chromium,
            &[
                "--hide-scrollbars",
                "--window-size=1280,1600",
                &format!("--screenshot={}", png.display()),
                dash.url(),
            ],
        );
        assert!(
            shot.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&shot.stderr)
        );
        let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        assert!(size > 20_000, "{} is {size} bytes", png.display());
        eprintln!("dashboard screenshot: {}", png.display());

        windowed.stop();
        filtered.stop();
        let (_, body) = get(dash.url(), "/api/progress?since=999999999");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(
            doc["queries"]
                .as_array()
                .unwrap()
                .iter()
                .all(|q| q["status"] == "terminated"),
            "{body}"
        );
    }
}
