//! Chained stateful operators: dedup then a windowed count in append mode with state per
//! operator, and Spark's correctness check for an aggregation after an update-mode one.

use std::sync::{Arc, Mutex};

use sluice::OutputMode;

use crate::support::{add_file, dirs, session};

#[test]
fn dedup_then_a_windowed_count_in_append_mode_and_state_per_operator() {
    let d = dirs();
    let ev = |id: i64, m: i64| format!("{{\"id\": {id}, \"ts\": \"2026-07-07T10:{m:02}:00Z\"}}\n");
    let s = session();
    s.read_stream()
        .format("json")
        .schema("id INT, ts TIMESTAMP")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .with_watermark("ts", "5 minutes")
        .unwrap()
        .drop_duplicates(["id", "ts"])
        .unwrap()
        .create_or_replace_temp_view("uniq")
        .unwrap();
    let rows: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = rows.clone();
    let q = s
        .sql("SELECT window.start AS ws, count(*) AS n FROM uniq GROUP BY window(ts, '10 minutes')")
        .unwrap()
        .write_stream()
        .output_mode(OutputMode::Append)
        .option("checkpointLocation", d.checkpoint.display())
        .foreach_batch(move |data, _| {
            for b in data.batches() {
                for i in 0..b.num_rows() {
                    sink.lock().unwrap().push(format!(
                        "{}={}",
                        sluice::sink::console::format_cell(b.column(0), i)?,
                        sluice::sink::console::format_cell(b.column(1), i)?
                    ));
                }
            }
            Ok(())
        })
        .start()
        .unwrap();
    add_file(
        &d.input,
        "1.json",
        &(ev(1, 1) + &ev(1, 1) + &ev(2, 4) + &ev(3, 12)),
        1,
    );
    q.process_all_available().unwrap();
    add_file(&d.input, "2.json", &(ev(2, 4) + &ev(4, 31)), 2);
    q.process_all_available().unwrap();
    q.stop();
    let p = q.last_progress().unwrap();
    let names: Vec<&str> = p
        .state_operators
        .iter()
        .map(|o| o.operator_name.as_str())
        .collect();
    assert_eq!(names, vec!["dedupe", "stateStoreSave"]);
    assert!(
        d.checkpoint.join("state/0/0/1.delta").is_file()
            && d.checkpoint.join("state/1/0/1.delta").is_file()
    );
    assert_eq!(
        *rows.lock().unwrap(),
        vec!["2026-07-07 10:00:00=2", "2026-07-07 10:10:00=1"],
        "the duplicate 10:01 row counts once; windows close as the watermark passes them"
    );
}

#[test]
fn an_aggregation_after_an_update_mode_aggregation_fails_the_correctness_check() {
    let d = dirs();
    let s = session();
    s.read_stream()
        .format("json")
        .schema("user STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .create_or_replace_temp_view("e")
        .unwrap();
    let frame = s.sql("SELECT n, count(*) AS users FROM (SELECT user, count(*) AS n FROM e GROUP BY user) GROUP BY n").unwrap();
    let err = frame
        .write_stream()
        .output_mode(OutputMode::Update)
        .format("console")
        .start()
        .unwrap_err();
    assert_eq!(err.class(), "STREAMING_STATEFUL_OPERATOR_CORRECTNESS");
    assert!(err.message().contains("checkCorrectness.enabled"));
}
