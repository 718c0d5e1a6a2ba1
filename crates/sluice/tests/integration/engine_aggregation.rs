//! The seed's windowed count, SQL = DataFrame API, restart after every batch, a random
//! reference model against one DataFusion batch query, output-mode rules.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arrow::array::{Int64Array, RecordBatch};
use sluice::{col, lit, OutputMode, Session, Trigger};

use crate::support::{add_file, dirs, session};

/// Collects `(batch id, rows as "start|...=count")` from foreach_batch.
type Seen = Arc<Mutex<Vec<(u64, Vec<String>)>>>;

fn describe_rows(b: &RecordBatch) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..b.num_rows() {
        let mut cells = Vec::new();
        for c in b.columns() {
            cells.push(sluice::sink::console::format_cell(c, i).unwrap());
        }
        out.push(cells.join("|"));
    }
    out.sort();
    out
}

fn ts_file(times: &[&str]) -> String {
    times
        .iter()
        .map(|t| format!("{{\"ts\": \"2026-09-15T{t}:00Z\"}}\n"))
        .collect()
}

fn seed_run(use_sql: bool) -> (Vec<(u64, Vec<String>)>, Vec<sluice::StreamingQueryProgress>) {
    let d = dirs();
    let s = session();
    let events = s
        .read_stream()
        .format("json")
        .schema("ts TIMESTAMP")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .with_watermark("ts", "10 minutes")
        .unwrap();
    let counts = if use_sql {
        events.create_or_replace_temp_view("events").unwrap();
        s.sql("SELECT window.start AS start, window.end AS end, count(*) AS count FROM events GROUP BY window(ts, '5 minutes')")
            .unwrap()
    } else {
        events
            .group_by([sluice::window(col("ts"), "5 minutes")])
            .count()
            .unwrap()
            .select_sql(["window.start AS start", "window.end AS end", "count"])
            .unwrap()
    };
    let seen: Seen = Arc::default();
    let sink = seen.clone();
    let q = counts
        .write_stream()
        .output_mode(OutputMode::Update)
        .option("checkpointLocation", d.checkpoint.display())
        .foreach_batch(move |data, id| {
            sink.lock()
                .unwrap()
                .push((id, describe_rows(&data.concat()?)));
            Ok(())
        })
        .start()
        .unwrap();
    for (i, times) in [
        &["12:01", "12:02", "12:07"][..],
        &["12:20", "12:03"][..],
        &["12:04"][..],
    ]
    .iter()
    .enumerate()
    {
        add_file(&d.input, &format!("{i}.json"), &ts_file(times), i as u64);
        q.process_all_available().unwrap();
    }
    q.stop();
    let p = q.recent_progress();
    assert!(
        d.checkpoint.join("state/0/0/1.delta").is_file(),
        "state deltas live under state/<op>/<partition>/"
    );
    let seen = seen.lock().unwrap().clone();
    (seen, p)
}

#[test]
fn the_seed_windowed_count_counts_a_late_row_in_time_and_drops_one_too_late() {
    let (seen, progress) = seed_run(false);
    let data: Vec<&(u64, Vec<String>)> = seen.iter().filter(|(_, r)| !r.is_empty()).collect();
    assert_eq!(
        data[0].1,
        vec![
            "2026-09-15 12:00:00|2026-09-15 12:05:00|2",
            "2026-09-15 12:05:00|2026-09-15 12:10:00|1"
        ]
    );
    assert_eq!(
        data[1].1,
        vec![
            "2026-09-15 12:00:00|2026-09-15 12:05:00|3",
            "2026-09-15 12:20:00|2026-09-15 12:25:00|1"
        ],
        "12:03 is still counted: the 12:00 window becomes 3"
    );
    assert_eq!(
        data.len(),
        2,
        "12:04 arrives after the watermark passed 12:05 and changes nothing"
    );
    let wm = |p: &sluice::StreamingQueryProgress| {
        p.event_time.get("watermark").cloned().unwrap_or_default()
    };
    assert!(progress.iter().any(|p| wm(p) == "2026-09-15T11:57:00.000Z"));
    let last = progress.last().unwrap();
    assert_eq!(wm(last), "2026-09-15T12:10:00.000Z");
    assert_eq!(last.num_input_rows, 1);
    assert_eq!(last.state_operators[0].num_rows_dropped_by_watermark, 1);
    assert_eq!(last.state_operators[0].operator_name, "stateStoreSave");
    assert_eq!(
        last.event_time.get("max").map(String::as_str),
        Some("2026-09-15T12:04:00.000Z")
    );
}

#[test]
fn sql_and_the_dataframe_api_give_the_same_batches() {
    assert_eq!(seed_run(true).0, seed_run(false).0);
}

/// Runs a windowed sum over the given files, one file per trigger. With
/// `restart_each_batch`, every file is processed by a new query on the same checkpoint
/// (available-now: its data batch and the no-data batch the watermark calls for); else one
/// query runs throughout and processes each file as it arrives.
fn windowed(files: &[String], restart_each_batch: bool) -> Vec<(u64, Vec<String>)> {
    let d = dirs();
    let seen: Seen = Arc::default();
    let start = |s: &Session, trigger: Trigger| {
        let frame = s
            .read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING, amount DOUBLE")
            .unwrap()
            .option("maxFilesPerTrigger", "1")
            .load(d.input.display().to_string())
            .unwrap()
            .with_watermark("ts", "5 minutes")
            .unwrap();
        let sink = seen.clone();
        frame
            .group_by([sluice::window(col("ts"), "10 minutes"), col("user")])
            .agg([
                datafusion::functions_aggregate::expr_fn::sum(col("amount")).alias("total"),
                datafusion::functions_aggregate::expr_fn::avg(col("amount")).alias("mean"),
                datafusion::functions_aggregate::expr_fn::count(lit(1)).alias("n"),
            ])
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Append)
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(trigger)
            .foreach_batch(move |data, id| {
                sink.lock()
                    .unwrap()
                    .push((id, describe_rows(&data.concat()?)));
                Ok(())
            })
            .start()
            .unwrap()
    };
    if restart_each_batch {
        for (i, f) in files.iter().enumerate() {
            add_file(&d.input, &format!("{i:03}.json"), f, i as u64);
            start(&session(), Trigger::AvailableNow)
                .await_termination()
                .unwrap();
        }
    } else {
        let q = start(&session(), Trigger::default());
        for (i, f) in files.iter().enumerate() {
            add_file(&d.input, &format!("{i:03}.json"), f, i as u64);
            q.process_all_available().unwrap();
        }
        q.stop();
    }
    let out = seen.lock().unwrap().clone();
    out
}

fn random_files(seed: u64, files: usize, rows: usize, max_delay_s: i64) -> Vec<String> {
    let mut x = seed.max(1);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let base = 1_789_473_600i64; // 2026-09-15T12:00:00Z
    let mut t = 0i64;
    let mut out = Vec::new();
    for _ in 0..files {
        let mut f = String::new();
        for _ in 0..rows {
            t += (next() % 20) as i64;
            let delay = (next() % (max_delay_s as u64 + 1)) as i64;
            let ts = base + t - delay;
            let user = ["a", "b", "c"][(next() % 3) as usize];
            let amount = (next() % 1000) as f64 / 10.0;
            f.push_str(&format!(
                "{{\"ts\": {ts}, \"user\": \"{user}\", \"amount\": {amount}}}\n"
            ));
        }
        out.push(f);
    }
    out
}

#[test]
fn a_restart_after_every_batch_gives_the_uninterrupted_output() {
    for seed in [7u64, 42] {
        let files = random_files(seed, 8, 25, 600);
        let whole = windowed(&files, false);
        let restarted = windowed(&files, true);
        assert!(
            whole.iter().any(|(_, r)| !r.is_empty()),
            "seed {seed}: some windows were emitted"
        );
        assert_eq!(whole, restarted, "seed {seed}");
    }
}

/// The reference model: event time rules applied by hand, then one DataFusion batch query.
#[test]
fn random_streams_match_a_batch_query_over_the_rows_that_were_not_late() {
    let mut late_rows_seen = 0usize;
    for seed in [3u64, 11, 2026] {
        let files = random_files(seed, 10, 30, 900);
        let delay_s = 300i64;
        let size_s = 600i64;
        // Late rows: window end <= the watermark when the batch ran (the global watermark
        // after the previous batch; no-data batches run whenever it moves).
        let mut wm = 0i64;
        let mut kept: Vec<String> = Vec::new();
        for f in &files {
            let mut max_t = i64::MIN;
            for line in f.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let t = v["ts"].as_i64().unwrap();
                max_t = max_t.max(t);
                let end = t - t.rem_euclid(size_s) + size_s;
                if end > wm {
                    kept.push(line.to_string());
                }
            }
            wm = wm.max(max_t - delay_s);
        }
        // The stream, one file per trigger as the files arrive; update mode, last value per key.
        let d = dirs();
        let s = session();
        let frame = s
            .read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING, amount DOUBLE")
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .with_watermark("ts", "5 minutes")
            .unwrap();
        frame.create_or_replace_temp_view("ev").unwrap();
        let finals: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
        let sink = finals.clone();
        let q = s
            .sql("SELECT window.start AS ws, user, sum(amount) AS total, count(*) AS n, max(amount) AS hi FROM ev GROUP BY window(ts, '10 minutes'), user")
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Update)
            .option("checkpointLocation", d.checkpoint.display())
            .foreach_batch(move |data, _| {
                for r in describe_rows(&data.concat()?) {
                    let mut parts = r.splitn(3, '|');
                    let key = format!("{}|{}", parts.next().unwrap(), parts.next().unwrap());
                    sink.lock().unwrap().insert(key, parts.next().unwrap().to_string());
                }
                Ok(())
            })
            .start()
            .unwrap();
        for (i, f) in files.iter().enumerate() {
            add_file(&d.input, &format!("{i:03}.json"), f, i as u64);
            q.process_all_available().unwrap();
        }
        q.stop();
        let dropped: i64 = q
            .recent_progress()
            .iter()
            .map(|p| {
                p.state_operators
                    .iter()
                    .map(|o| o.num_rows_dropped_by_watermark)
                    .sum::<i64>()
            })
            .sum();
        let total_rows: usize = files.iter().map(|f| f.lines().count()).sum();
        assert_eq!(
            dropped as usize,
            total_rows - kept.len(),
            "seed {seed}: every late row is counted"
        );
        late_rows_seen += dropped as usize;

        // The same aggregation as one batch query over the kept rows.
        let ref_dir = d.input.parent().unwrap().join("reference");
        std::fs::create_dir_all(&ref_dir).unwrap();
        std::fs::write(ref_dir.join("kept.json"), kept.join("\n")).unwrap();
        let schema =
            sluice::schema::parse_ddl_schema("ts TIMESTAMP, user STRING, amount DOUBLE").unwrap();
        let batch = sluice::source::file::read_files(
            "json",
            &[ref_dir.join("kept.json")],
            &schema,
            &Default::default(),
        )
        .unwrap();
        s.register_batches(
            "kept",
            sluice::source::file::nullable_schema(&schema),
            batch.batches,
        )
        .unwrap();
        let reference = s
            .sql("SELECT window.start AS ws, user, sum(amount) AS total, count(*) AS n, max(amount) AS hi FROM kept GROUP BY window(ts, '10 minutes'), user")
            .unwrap()
            .collect()
            .unwrap();
        let mut expected: BTreeMap<String, String> = BTreeMap::new();
        for b in &reference {
            for r in describe_rows(b) {
                let mut parts = r.splitn(3, '|');
                let key = format!("{}|{}", parts.next().unwrap(), parts.next().unwrap());
                expected.insert(key, parts.next().unwrap().to_string());
            }
        }
        assert!(!expected.is_empty());
        // Sums of doubles are compared with FORMAT.md's relative tolerance (1e-9): the stream
        // adds a window's amounts batch by batch, the reference in one pass.
        let close = |a: &str, b: &str| {
            a.split('|').zip(b.split('|')).all(|(x, y)| {
                match (x.parse::<f64>(), y.parse::<f64>()) {
                    (Ok(x), Ok(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
                    _ => x == y,
                }
            }) && a.split('|').count() == b.split('|').count()
        };
        let got = finals.lock().unwrap().clone();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "seed {seed}"
        );
        for (k, v) in &expected {
            assert!(close(&got[k], v), "seed {seed}, {k}: {} vs {v}", got[k]);
        }
    }
    assert!(
        late_rows_seen > 0,
        "the random streams must include late rows"
    );
}

#[test]
fn update_mode_with_session_windows_is_refused_at_start() {
    let d = dirs();
    let err = session()
        .read_stream()
        .format("json")
        .schema("ts TIMESTAMP, user STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .with_watermark("ts", "10 minutes")
        .unwrap()
        .group_by([col("user"), sluice::session_window(col("ts"), "5 minutes")])
        .count()
        .unwrap()
        .write_stream()
        .output_mode(OutputMode::Update)
        .format("console")
        .start()
        .unwrap_err();
    assert_eq!(err.class(), "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION");
    assert!(err
        .message()
        .contains("Update output mode not supported for session window"));
}

#[test]
fn any_datafusion_aggregate_streams_without_per_function_code() {
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Int64, true),
        arrow::datatypes::Field::new("v", arrow::datatypes::DataType::Int64, true),
    ]));
    let stream = sluice::source::memory::MemoryStream::new(schema.clone());
    let s = session();
    stream
        .to_frame(&s)
        .unwrap()
        .create_or_replace_temp_view("t")
        .unwrap();
    let q = s
        .sql("SELECT k, stddev(v) AS sd, approx_distinct(v) AS ad, median(v) AS med, bool_and(v > 0) AS pos FROM t GROUP BY k")
        .unwrap()
        .write_stream()
        .format("memory")
        .output_mode(OutputMode::Complete)
        .query_name("stats")
        .start()
        .unwrap();
    let batch = |k: Vec<i64>, v: Vec<i64>| {
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(k)), Arc::new(Int64Array::from(v))],
        )
        .unwrap()
    };
    stream
        .add_batch(batch(vec![1, 1, 2], vec![2, 4, 5]))
        .unwrap();
    q.process_all_available().unwrap();
    stream.add_batch(batch(vec![1, 2], vec![6, 5])).unwrap();
    q.process_all_available().unwrap();
    let streamed = s
        .sql("SELECT * FROM stats ORDER BY k")
        .unwrap()
        .collect()
        .unwrap();
    q.stop();
    // Complete mode: the table is the last batch; it must equal the batch query over all rows.
    let all = batch(vec![1, 1, 2, 1, 2], vec![2, 4, 5, 6, 5]);
    s.register_batches("all_rows", schema.clone(), vec![all])
        .unwrap();
    let reference = s
        .sql("SELECT k, stddev(v) AS sd, approx_distinct(v) AS ad, median(v) AS med, bool_and(v > 0) AS pos FROM all_rows GROUP BY k ORDER BY k")
        .unwrap()
        .collect()
        .unwrap();
    let flat = |b: &[RecordBatch]| b.iter().flat_map(describe_rows).collect::<Vec<_>>();
    assert_eq!(flat(&streamed), flat(&reference));
}
