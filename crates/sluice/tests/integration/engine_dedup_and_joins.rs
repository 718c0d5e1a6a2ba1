//! Deduplication state bounded by the watermark (and unbounded without), SELECT DISTINCT,
//! stream-static joins and the join types Spark refuses.

use std::sync::{Arc, Mutex};

use sluice::Trigger;

use crate::support::{add_file, dirs, session};

fn events_file(rows: &[(i64, &str)]) -> String {
    rows.iter()
        .map(|(id, t)| format!("{{\"id\": {id}, \"ts\": \"2026-07-07T{t}:00Z\"}}\n"))
        .collect()
}

/// numRowsTotal after each batch of a dedup query fed one file per trigger.
fn dedup_state(with_watermark: bool, within: bool) -> (Vec<i64>, Vec<usize>) {
    let d = dirs();
    let s = session();
    let mut frame = s
        .read_stream()
        .format("json")
        .schema("id INT, ts TIMESTAMP")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap();
    if with_watermark {
        frame = frame.with_watermark("ts", "10 minutes").unwrap();
    }
    let frame = if within {
        frame.drop_duplicates_within_watermark(["id"]).unwrap()
    } else if with_watermark {
        frame.drop_duplicates(["id", "ts"]).unwrap()
    } else {
        frame.drop_duplicates(["id"]).unwrap()
    };
    let out: Arc<Mutex<Vec<usize>>> = Arc::default();
    let sink = out.clone();
    let q = frame
        .write_stream()
        .option("checkpointLocation", d.checkpoint.display())
        .foreach_batch(move |data, _| {
            sink.lock().unwrap().push(data.num_rows());
            Ok(())
        })
        .start()
        .unwrap();
    let mut totals = Vec::new();
    for k in 0..6i64 {
        // Each file: three new ids ten minutes apart in event time, plus a copy of the
        // previous file's first id.
        let base = k * 3;
        let minute = |m: i64| format!("{:02}:{:02}", 10 + m / 60, m % 60);
        let rows = [
            (base, minute(k * 30)),
            (base + 1, minute(k * 30 + 10)),
            (base + 2, minute(k * 30 + 20)),
            ((base - 3).max(0), minute((k - 1).max(0) * 30)),
        ];
        let rows: Vec<(i64, &str)> = rows.iter().map(|(i, t)| (*i, t.as_str())).collect();
        add_file(
            &d.input,
            &format!("{k}.json"),
            &events_file(&rows),
            k as u64,
        );
        q.process_all_available().unwrap();
    }
    q.stop();
    // numRowsTotal after every batch, data and no-data batches alike.
    for p in q.recent_progress() {
        totals.push(p.state_operators[0].num_rows_total);
    }
    let out = out.lock().unwrap().clone();
    (totals, out)
}

#[test]
fn dedup_state_rises_and_falls_with_the_watermark_and_grows_without_one() {
    let (bounded, _) = dedup_state(true, false);
    assert!(
        bounded.iter().all(|t| *t <= 6),
        "keys behind the watermark are evicted: {bounded:?}"
    );
    assert!(
        bounded.iter().max() >= Some(&3) && bounded.windows(2).any(|w| w[1] < w[0]),
        "state rises then falls: {bounded:?}"
    );
    let (within, _) = dedup_state(true, true);
    assert!(
        within.iter().all(|t| *t <= 6),
        "within-watermark keys expire: {within:?}"
    );
    assert!(
        within.windows(2).any(|w| w[1] < w[0]),
        "state rises then falls: {within:?}"
    );
    let (unbounded, rows) = dedup_state(false, false);
    assert_eq!(
        unbounded.last(),
        Some(&18),
        "without a watermark every id stays: {unbounded:?}"
    );
    assert!(unbounded.windows(2).all(|w| w[1] >= w[0]));
    assert_eq!(rows.iter().sum::<usize>(), 18, "each id passes once");
}

#[test]
fn select_distinct_on_a_stream_is_drop_duplicates_of_all_columns() {
    let d = dirs();
    add_file(
        &d.input,
        "1.json",
        "{\"a\": 1, \"b\": \"x\"}\n{\"a\": 1, \"b\": \"x\"}\n{\"a\": 1, \"b\": \"y\"}\n",
        1,
    );
    let s = session();
    s.read_stream()
        .format("json")
        .schema("a INT, b STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .create_or_replace_temp_view("t")
        .unwrap();
    let q = s
        .sql("SELECT DISTINCT a, b FROM t")
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("d")
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    assert_eq!(s.sql("SELECT * FROM d").unwrap().count().unwrap(), 2);
    add_file(
        &d.input,
        "2.json",
        "{\"a\": 1, \"b\": \"x\"}\n{\"a\": 2, \"b\": \"x\"}\n",
        2,
    );
    let p = q.last_progress().unwrap();
    assert_eq!(p.state_operators[0].operator_name, "dedupe");
    assert_eq!(
        p.state_operators[0]
            .custom_metrics
            .get("numDroppedDuplicateRows"),
        Some(&1)
    );
}

#[test]
fn within_watermark_without_a_watermark_is_refused() {
    let d = dirs();
    let err = session()
        .read_stream()
        .format("json")
        .schema("id INT, ts TIMESTAMP")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .drop_duplicates_within_watermark(["id"])
        .unwrap_err();
    assert!(err.message().contains("without watermark"), "{err}");
}

#[test]
fn stream_static_joins_run_and_the_wrong_side_outer_joins_are_refused() {
    let d = dirs();
    add_file(
        &d.input,
        "1.json",
        "{\"user\": \"a\", \"amount\": 1.0}\n{\"user\": \"z\", \"amount\": 2.0}\n",
        1,
    );
    let s = session();
    let schema = sluice::schema::parse_ddl_schema("user STRING, country STRING").unwrap();
    let users = arrow::array::RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(arrow::array::StringArray::from(vec!["a", "b"])),
            Arc::new(arrow::array::StringArray::from(vec!["UK", "US"])),
        ],
    )
    .unwrap();
    s.register_batches("users", schema, vec![users]).unwrap();
    s.read_stream()
        .format("json")
        .schema("user STRING, amount DOUBLE")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .create_or_replace_temp_view("events")
        .unwrap();
    let run = |sql: &str| {
        s.sql(sql)
            .unwrap()
            .write_stream()
            .format("noop")
            .trigger(Trigger::AvailableNow)
            .option(
                "checkpointLocation",
                tempfile::tempdir().unwrap().keep().display(),
            )
            .start()
    };
    let q =
        run("SELECT e.user, u.country FROM events e LEFT JOIN users u ON e.user = u.user").unwrap();
    q.await_termination().unwrap();
    assert_eq!(q.last_progress().unwrap().sink.num_output_rows, 2);
    assert_eq!(
        q.last_progress().unwrap().num_input_rows,
        2,
        "only stream rows are input rows"
    );
    for (sql, words) in [
        (
            "SELECT * FROM events e RIGHT JOIN users u ON e.user = u.user",
            "RightOuter join with a streaming DataFrame/Dataset on the left",
        ),
        (
            "SELECT * FROM events e FULL JOIN users u ON e.user = u.user",
            "FullOuter joins with streaming DataFrames/Datasets on the left",
        ),
        (
            "SELECT * FROM users u LEFT JOIN events e ON e.user = u.user",
            "on the right and a static DataFrame/Dataset on the left",
        ),
    ] {
        let err = run(sql).unwrap_err();
        assert!(err.message().contains(words), "{sql}: {err}");
        assert_eq!(err.class(), "UNSUPPORTED_STREAMING_OPERATION");
    }
}

/// Spark's `StreamingDeduplicationSuite` rule: `dropDuplicates("id")` over a watermarked input
/// whose event time is not a key still drops (and counts) rows at or before the watermark, keeps
/// every key forever, and runs a no-data batch whenever the watermark moves. Figures recorded on
/// PySpark 3.5.7 (`local[1]`, one shuffle partition): numRowsTotal 2, 2, 3, 3; one row dropped by
/// the watermark in batch 2; nothing removed.
#[test]
fn dedup_without_the_event_time_key_drops_late_rows_but_never_evicts() {
    let d = dirs();
    let s = session();
    let frame = s
        .read_stream()
        .format("json")
        .schema("id STRING, ts TIMESTAMP")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .with_watermark("ts", "10 minutes")
        .unwrap()
        .drop_duplicates(["id"])
        .unwrap();
    let out: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
    let sink = out.clone();
    let ckpt = d.checkpoint.display().to_string();
    let run = |frame: &sluice::StreamFrame| {
        let sink = sink.clone();
        let q = frame
            .write_stream()
            .option("checkpointLocation", &ckpt)
            .trigger(Trigger::AvailableNow)
            .foreach_batch(move |data, id| {
                sink.lock().unwrap().push((id, data.num_rows()));
                Ok(())
            })
            .start()
            .unwrap();
        q.await_termination().unwrap();
        q.recent_progress()
            .iter()
            .map(|p| {
                let op = &p.state_operators[0];
                (
                    p.batch_id,
                    p.num_input_rows,
                    op.num_rows_total,
                    op.num_rows_dropped_by_watermark,
                    op.num_rows_removed,
                )
            })
            .collect::<Vec<_>>()
    };
    let line = |id: &str, t: &str| format!("{{\"id\": \"{id}\", \"ts\": \"2026-01-01T{t}:00\"}}\n");
    add_file(
        &d.input,
        "1.json",
        &(line("a", "12:00") + &line("b", "12:30")),
        1,
    );
    let first = run(&frame);
    add_file(
        &d.input,
        "2.json",
        &(line("c", "12:05") + &line("a", "12:40") + &line("d", "12:41")),
        2,
    );
    let second = run(&frame);
    assert_eq!(first, vec![(0, 2, 2, 0, 0), (1, 0, 2, 0, 0)]);
    assert_eq!(second, vec![(2, 3, 3, 1, 0), (3, 0, 3, 0, 0)]);
    assert_eq!(*out.lock().unwrap(), vec![(0, 2), (1, 0), (2, 1), (3, 0)]);
}

/// Spark counts a source's input rows once per use: `SELECT k FROM s UNION ALL SELECT k FROM s`
/// over 3 rows reports numInputRows 6 (PySpark 3.5.7), for the query and for the source.
#[test]
fn a_source_used_twice_counts_its_rows_per_use() {
    let d = dirs();
    let s = session();
    s.read_stream()
        .format("json")
        .schema("k STRING, v INT")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .create_or_replace_temp_view("s")
        .unwrap();
    add_file(
        &d.input,
        "1.json",
        "{\"k\": \"a\", \"v\": 1}\n{\"k\": \"b\", \"v\": 2}\n{\"k\": \"a\", \"v\": 3}\n",
        1,
    );
    let rows: Arc<Mutex<usize>> = Arc::default();
    let sink = rows.clone();
    let q = s
        .sql("SELECT k FROM s UNION ALL SELECT k FROM s")
        .unwrap()
        .write_stream()
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .foreach_batch(move |data, _| {
            *sink.lock().unwrap() += data.num_rows();
            Ok(())
        })
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let p = q.recent_progress();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].num_input_rows, 6);
    assert_eq!(p[0].sources[0].num_input_rows, 6);
    assert_eq!(*rows.lock().unwrap(), 6);
}
