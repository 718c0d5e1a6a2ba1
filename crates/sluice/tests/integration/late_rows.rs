//! The late-row side output (`lateRows.*` writer options): rows a stateful operator drops as
//! late go to a sink of their own, exactly once per batch, and are counted in progress.

use std::path::Path;
use std::sync::{Arc, Mutex};

use sluice::{col, OutputMode, Session};

use crate::support::{add_file, committed_rows, events, session};

/// The seed's windowed count with a side output for late rows; with `restart_every_batch`
/// the query stops and restarts on the same checkpoint after each file (exactly once).
fn run(dir: &Path, restart_every_batch: bool) -> (Vec<String>, Vec<i64>, Vec<Option<String>>) {
    let input = dir.join("in");
    let late = dir.join("late");
    let ckpt = dir.join("ckpt");
    let batches: [&[(&str, &str)]; 4] = [
        &[("12:01", "a"), ("12:02", "b"), ("12:07", "a")],
        &[("12:20", "a"), ("12:03", "c")],
        &[("12:04", "late1"), ("12:21", "b"), ("11:50", "late2")],
        &[("12:09", "late3")],
    ];
    std::fs::create_dir_all(&input).unwrap();
    let mut dropped = Vec::new();
    let mut written = Vec::new();
    let session = session();
    let start = |session: &Session| {
        let counts = session
            .read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING")
            .unwrap()
            .option("maxFilesPerTrigger", 1)
            .load(input.display().to_string())
            .unwrap()
            .with_watermark("ts", "10 minutes")
            .unwrap()
            .group_by([sluice::window(col("ts"), "5 minutes")])
            .count()
            .unwrap();
        let seen = Arc::new(Mutex::new(0usize));
        counts
            .write_stream()
            .output_mode(OutputMode::Update)
            .option("checkpointLocation", ckpt.display())
            .option("lateRows.format", "parquet")
            .option("lateRows.path", late.display())
            .foreach_batch(move |data, _| {
                *seen.lock().unwrap() += data.num_rows();
                Ok(())
            })
            .start()
            .unwrap()
    };
    let mut q = start(&session);
    for (i, b) in batches.iter().enumerate() {
        add_file(&input, &format!("{i}.json"), &events(b), i as u64);
        q.process_all_available().unwrap();
        if restart_every_batch {
            let p = q.recent_progress();
            dropped.extend(
                p.iter()
                    .filter(|p| p.num_input_rows > 0)
                    .map(|p| p.state_operators[0].num_rows_dropped_by_watermark),
            );
            written.extend(
                p.iter()
                    .filter(|p| p.num_input_rows > 0)
                    .map(|p| p.sink.metrics.get("numLateRowsWritten").cloned()),
            );
            q.stop();
            q = start(&session);
        }
    }
    if !restart_every_batch {
        let p = q.recent_progress();
        dropped = p
            .iter()
            .filter(|p| p.num_input_rows > 0)
            .map(|p| p.state_operators[0].num_rows_dropped_by_watermark)
            .collect();
        written = p
            .iter()
            .filter(|p| p.num_input_rows > 0)
            .map(|p| p.sink.metrics.get("numLateRowsWritten").cloned())
            .collect();
    }
    q.stop();
    (committed_rows(&late, &["ts", "user"]), dropped, written)
}

#[test]
fn rows_dropped_as_late_reach_their_own_sink_once_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (late, dropped, written) = run(dir.path(), false);
    // Batch 2: the watermark is 12:10 (12:20 - 10 min): 12:04 and 11:50 fall in windows that
    // ended by then; batch 3: watermark 12:11, so 12:09's window [12:05, 12:10) is late too.
    assert_eq!(
        late,
        vec![
            "2026-09-15 11:50:00 late2".to_string(),
            "2026-09-15 12:04:00 late1".to_string(),
            "2026-09-15 12:09:00 late3".to_string(),
        ]
    );
    assert_eq!(
        dropped,
        vec![0, 0, 2, 1],
        "numRowsDroppedByWatermark per batch"
    );
    assert_eq!(
        written,
        vec![
            Some("0".to_string()),
            Some("0".to_string()),
            Some("2".to_string()),
            Some("1".to_string())
        ],
        "numLateRowsWritten in the sink metrics of progress"
    );
}

#[test]
fn restarting_after_every_batch_writes_each_late_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let (late, dropped, _) = run(dir.path(), true);
    assert_eq!(
        late,
        vec![
            "2026-09-15 11:50:00 late2".to_string(),
            "2026-09-15 12:04:00 late1".to_string(),
            "2026-09-15 12:09:00 late3".to_string(),
        ]
    );
    assert_eq!(dropped, vec![0, 0, 2, 1]);
}

#[test]
fn late_row_options_are_checked_at_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("in")).unwrap();
    let session = Session::builder().build().unwrap();
    let stream = || {
        session
            .read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING")
            .unwrap()
            .load(dir.path().join("in").display().to_string())
            .unwrap()
    };
    // A stateless query drops nothing as late.
    let err = stream()
        .write_stream()
        .format("console")
        .option("lateRows.format", "console")
        .start()
        .expect_err("a stateless query with lateRows options is refused");
    assert!(err.to_string().contains("LATE_ROWS_WITHOUT_STATE"), "{err}");
    // lateRows.format is required and must be a late-row sink.
    let agg = || {
        stream()
            .with_watermark("ts", "1 minute")
            .unwrap()
            .group_by([sluice::window(col("ts"), "1 minute")])
            .count()
            .unwrap()
    };
    let err = agg()
        .write_stream()
        .format("console")
        .output_mode(OutputMode::Update)
        .option("lateRows.path", dir.path().join("late").display())
        .start()
        .expect_err("lateRows.* without lateRows.format is refused");
    assert!(
        err.to_string().contains("LATE_ROWS_FORMAT_MISSING"),
        "{err}"
    );
    let err = agg()
        .write_stream()
        .format("console")
        .output_mode(OutputMode::Update)
        .option("lateRows.format", "memory")
        .start()
        .expect_err("memory is not a late-row sink");
    assert!(
        err.to_string().contains("LATE_ROWS_FORMAT_UNSUPPORTED"),
        "{err}"
    );
}

#[test]
fn a_crash_after_the_sinks_replays_the_batch_without_duplicating_late_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (input, late, ckpt) = (
        dir.path().join("in"),
        dir.path().join("late"),
        dir.path().join("ckpt"),
    );
    std::fs::create_dir_all(&input).unwrap();
    add_file(&input, "0.json", &events(&[("12:20", "a")]), 0);
    add_file(&input, "1.json", &events(&[("12:21", "b")]), 1);
    add_file(&input, "2.json", &events(&[("12:04", "late1")]), 2);
    let start = |session: &Session| {
        session
            .read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING")
            .unwrap()
            .option("maxFilesPerTrigger", 1)
            .load(input.display().to_string())
            .unwrap()
            .with_watermark("ts", "10 minutes")
            .unwrap()
            .group_by([sluice::window(col("ts"), "5 minutes")])
            .count()
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Update)
            .format("noop")
            .option("checkpointLocation", ckpt.display())
            .option("lateRows.format", "parquet")
            .option("lateRows.path", late.display())
            .start()
            .unwrap()
    };
    // Batch 2 (late rows are judged by the previous batch's watermark, 12:10) writes the late
    // row, then the process "crashes" before commits/2.
    let crashing = Session::builder()
        .config("sluice.testing.crashPoint", "afterSink:2")
        .build()
        .unwrap();
    let q = start(&crashing);
    assert!(
        q.process_all_available().is_err(),
        "the injected crash ends the run"
    );
    q.stop();
    assert!(!ckpt.join("commits/2").exists(), "batch 2 is not committed");
    assert_eq!(
        committed_rows(&late, &["ts", "user"]).len(),
        1,
        "written before the crash"
    );
    // The restart replays batch 2 with the same offsets: the late row is not written twice.
    let session = Session::builder().build().unwrap();
    let q = start(&session);
    q.process_all_available().unwrap();
    q.stop();
    assert!(ckpt.join("commits/2").exists());
    assert_eq!(
        committed_rows(&late, &["ts", "user"]),
        vec!["2026-09-15 12:04:00 late1".to_string()]
    );
}
