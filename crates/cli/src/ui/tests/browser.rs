//! The dashboard's page in headless Chromium: it sends its token with its requests, and draws
//! running queries' charts (beside the JSON history and the metrics over plain HTTP).

use super::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sluice::{col, window, OutputMode, Session, Trigger};

#[test]
fn the_page_opened_with_its_token_sends_it_with_its_requests() {
    let chromium = Path::new("/usr/bin/chromium");
    assert!(
        chromium.exists(),
        "/usr/bin/chromium is missing: run `apt-get install -y chromium`"
    );
    let dash = start("127.0.0.1:0", Some("page-token")).unwrap();
    for b in 0..20 {
        dash.on_query_progress(&progress("a", b, 0));
    }
    // The progress is only for requests with the token: the page can only draw it if its
    // own requests carry it.
    let r = get_within(&host_of(&dash), "/api/progress", "", Duration::from_secs(5));
    assert!(r.starts_with("HTTP/1.1 401 "), "{r}");
    let dom = headless(
        chromium,
        &["--dump-dom", &format!("{}?token=page-token", dash.url())],
    );
    let html = String::from_utf8_lossy(&dom.stdout).to_string();
    let body_tag = &html[html.find("<body").expect("a body")..];
    let body_tag = &body_tag[..body_tag.find('>').unwrap()];
    assert_eq!(
        attr_values(body_tag, "data-points").first().copied(),
        Some(20),
        "the page did not get the progress with its token: {body_tag}"
    );
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
    let dash = start("127.0.0.1:0", None).unwrap();
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
