//! Continuous processing (`Trigger::Continuous`, issue 9): rows flow into the sink as they
//! arrive, an epoch is committed every checkpoint interval, restrictions are Spark's
//! `checkForContinuous`, a restart resumes from the last committed epoch (at-least-once).
//! Kafka -> Kafka kill-and-restart is in the `kafka` module (needs the broker).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::Int64Array;
use sluice::progress::{QueryStartedEvent, QueryTerminatedEvent};
use sluice::sink::foreach::{ForeachWriter, Row};
use sluice::{
    col, lit, OutputMode, Session, SluiceError, StreamingQueryListener, StreamingQueryProgress,
    Trigger,
};

use crate::support::{session, wait_until};

fn continuous() -> Trigger {
    Trigger::Continuous(Duration::from_millis(300))
}

/// Rate source (`rowsPerSecond`) with `value % 2 = 0`, as a memory table named `name`.
fn start_even_rate(
    s: &Session,
    name: &str,
    checkpoint: &Path,
    trigger: Trigger,
) -> sluice::Result<sluice::StreamingQuery> {
    s.read_stream()
        .format("rate")
        .option("rowsPerSecond", 200)
        .load_source()?
        .filter((col("value") % lit(2i64)).eq(lit(0i64)))?
        .select(["value", "timestamp"])?
        .write_stream()
        .format("memory")
        .query_name(name)
        .option("checkpointLocation", checkpoint.display())
        .trigger(trigger)
        .start()
}

fn values(s: &Session, table: &str) -> Vec<i64> {
    let batches = s
        .sql(&format!("SELECT value FROM {table} ORDER BY value"))
        .unwrap()
        .collect()
        .unwrap();
    batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect()
}

fn log_ids(dir: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

#[test]
fn a_rate_filter_into_memory_runs_continuously_and_rows_arrive() {
    let tmp = tempfile::tempdir().unwrap();
    let s = session();
    let q = start_even_rate(
        &s,
        "evens",
        &tmp.path().join("cp"),
        Trigger::Continuous(Duration::from_secs(1)),
    )
    .unwrap();
    assert_eq!(q.trigger(), Trigger::Continuous(Duration::from_secs(1)));
    // Rows arrive well before the first epoch ends: they are written as they are due.
    wait_until("rows in the memory table", Duration::from_secs(5), || {
        values(&s, "evens").len() >= 10
    });
    q.process_all_available().unwrap();
    let v = values(&s, "evens");
    assert!(v.iter().all(|x| x % 2 == 0), "the filter ran: {v:?}");
    // Consecutive even values from 0, no gap, no duplicate.
    let expected: Vec<i64> = (0..v.len() as i64).map(|i| i * 2).collect();
    assert_eq!(v, expected);
    assert!(q.explain().contains("continuous"), "{}", q.explain());
    q.stop();
    assert!(!q.is_active());
    assert!(q.exception().is_none());
}

#[test]
fn an_aggregation_is_refused_at_start_with_sparks_message() {
    let tmp = tempfile::tempdir().unwrap();
    let s = session();
    s.read_stream()
        .format("rate")
        .load_source()
        .unwrap()
        .create_or_replace_temp_view("r")
        .unwrap();
    let err = s
        .sql("SELECT value % 3 AS k, count(*) AS n FROM r GROUP BY value % 3")
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("agg")
        .output_mode(OutputMode::Update)
        .option("checkpointLocation", tmp.path().join("cp").display())
        .trigger(continuous())
        .start()
        .unwrap_err();
    assert_eq!(err.class(), "UNSUPPORTED_STREAMING_OPERATION", "{err}");
    assert!(
        err.message()
            .contains("Continuous processing does not support Aggregate operations"),
        "{err}"
    );
    // Nothing was written: the check runs before the checkpoint is touched.
    assert!(!tmp.path().join("cp").join("offsets").exists());

    for (sql, op) in [
        ("SELECT * FROM r ORDER BY value", "Sort"),
        ("SELECT DISTINCT value FROM r", "Deduplicate"),
        ("SELECT * FROM r LIMIT 3", "GlobalLimit"),
        (
            "SELECT value, row_number() OVER (ORDER BY value) AS n FROM r",
            "Window",
        ),
    ] {
        let err = s
            .sql(sql)
            .unwrap()
            .write_stream()
            .format("memory")
            .query_name("x")
            .trigger(continuous())
            .start()
            .unwrap_err();
        assert!(
            err.message().contains(&format!(
                "Continuous processing does not support {op} operations"
            )),
            "{sql}: {err}"
        );
    }
    let err = s
        .sql("SELECT value, current_timestamp() AS t FROM r")
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("x")
        .trigger(continuous())
        .start()
        .unwrap_err();
    assert!(
        err.message()
            .contains("Continuous processing does not support current time operations"),
        "{err}"
    );
}

#[test]
fn a_file_source_and_a_file_sink_and_complete_mode_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("in")).unwrap();
    let s = session();
    let err = s
        .read_stream()
        .format("json")
        .schema("a BIGINT")
        .unwrap()
        .load(tmp.path().join("in").display().to_string())
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("files")
        .trigger(continuous())
        .start()
        .unwrap_err();
    assert_eq!(err.class(), "UNSUPPORTED_STREAMING_OPERATION", "{err}");
    assert!(
        err.message()
            .contains("Data source json does not support continuous processing."),
        "{err}"
    );

    let err = s
        .read_stream()
        .format("rate")
        .load_source()
        .unwrap()
        .write_stream()
        .format("parquet")
        .option("path", tmp.path().join("out").display())
        .option("checkpointLocation", tmp.path().join("cp").display())
        .trigger(continuous())
        .start()
        .unwrap_err();
    assert!(
        err.message()
            .contains("Data source parquet does not support continuous processing"),
        "{err}"
    );

    let err = s
        .read_stream()
        .format("rate")
        .load_source()
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("m")
        .output_mode(OutputMode::Update)
        .trigger(continuous())
        .start()
        .unwrap_err();
    assert!(err.message().contains("append mode only"), "{err}");
}

#[test]
fn foreach_batch_is_refused_and_foreach_gets_rows_per_epoch() {
    let s = session();
    let err = s
        .read_stream()
        .format("rate")
        .load_source()
        .unwrap()
        .write_stream()
        .foreach_batch(|_, _| Ok(()))
        .trigger(continuous())
        .start()
        .unwrap_err();
    assert!(
        err.message()
            .contains("'foreachBatch' is not supported with continuous trigger"),
        "{err}"
    );

    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<(u64, i64)>>>, Arc<Mutex<Vec<u64>>>);
    struct W(Seen, u64);
    impl ForeachWriter for W {
        fn open(&mut self, _p: usize, epoch: u64) -> sluice::Result<bool> {
            self.1 = epoch;
            Ok(true)
        }
        fn process(&mut self, row: Row<'_>) -> sluice::Result<()> {
            let v = match row.get("value")? {
                datafusion::common::ScalarValue::Int64(Some(v)) => v,
                other => panic!("{other:?}"),
            };
            self.0 .0.lock().unwrap().push((self.1, v));
            Ok(())
        }
        fn close(&mut self, error: Option<&SluiceError>) {
            assert!(error.is_none());
            self.0 .1.lock().unwrap().push(self.1);
        }
    }
    let seen = Seen::default();
    let f = seen.clone();
    let tmp = tempfile::tempdir().unwrap();
    let q = s
        .read_stream()
        .format("rate")
        .option("rowsPerSecond", 100)
        .load_source()
        .unwrap()
        .write_stream()
        .foreach(move || Box::new(W(f.clone(), 0)))
        .option("checkpointLocation", tmp.path().join("cp").display())
        .trigger(Trigger::Continuous(Duration::from_millis(200)))
        .start()
        .unwrap();
    wait_until("two closed epochs", Duration::from_secs(10), || {
        seen.1.lock().unwrap().len() >= 2
    });
    q.stop();
    let rows = seen.0.lock().unwrap().clone();
    let values: Vec<i64> = rows.iter().map(|(_, v)| *v).collect();
    assert_eq!(values, (0..values.len() as i64).collect::<Vec<_>>());
    let closed = seen.1.lock().unwrap().clone();
    assert_eq!(
        closed[..2],
        [0, 1],
        "one writer per epoch, closed at its end"
    );
}

#[derive(Default)]
struct Events(Mutex<Vec<StreamingQueryProgress>>, Mutex<Vec<String>>);
impl StreamingQueryListener for Events {
    fn on_query_started(&self, _e: &QueryStartedEvent) {
        self.1.lock().unwrap().push("started".into());
    }
    fn on_query_progress(&self, p: &StreamingQueryProgress) {
        self.0.lock().unwrap().push(p.clone());
    }
    fn on_query_terminated(&self, e: &QueryTerminatedEvent) {
        self.1
            .lock()
            .unwrap()
            .push(format!("terminated {}", e.exception.is_some()));
    }
}

#[test]
fn progress_is_reported_per_epoch_and_a_restart_resumes_after_the_last_committed_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let cp = tmp.path().join("cp");
    let s = session();
    let events = Arc::new(Events::default());
    s.add_listener(events.clone());
    let q = start_even_rate(&s, "evens1", &cp, continuous()).unwrap();
    wait_until("three epochs", Duration::from_secs(10), || {
        q.recent_progress().len() >= 3
    });
    q.stop();
    let progress = q.recent_progress();
    assert_eq!(
        *events.0.lock().unwrap(),
        progress,
        "listeners see the same"
    );
    assert_eq!(
        *events.1.lock().unwrap(),
        ["started".to_string(), "terminated false".to_string()]
    );
    for (i, p) in progress.iter().enumerate() {
        assert_eq!(p.batch_id, i as i64, "batchId is the epoch");
        for k in ["walCommit", "commitOffsets", "triggerExecution", "addBatch"] {
            assert!(p.duration_ms.contains_key(k), "{k} in {:?}", p.duration_ms);
        }
        assert_eq!(p.sources.len(), 1);
        assert!(p.sources[0].description.starts_with("RateStreamV2"));
        if i > 0 {
            assert_eq!(
                p.sources[0].start_offset,
                progress[i - 1].sources[0].end_offset
            );
        }
    }
    let total: i64 = progress.iter().map(|p| p.num_input_rows).sum();
    let last_value = progress.last().unwrap().sources[0]
        .end_offset
        .as_ref()
        .unwrap()["0"]["value"]
        .as_i64()
        .unwrap();
    assert_eq!(total, last_value + 1, "numInputRows add up to the offsets");
    assert!(progress.iter().any(|p| p.num_input_rows > 0));
    let first_run = values(&s, "evens1");
    assert_eq!(*first_run.last().unwrap(), last_value - last_value % 2);

    // Spark's logs: offsets/E and commits/E for every epoch.
    let offsets = log_ids(&cp.join("offsets"));
    let commits = log_ids(&cp.join("commits"));
    assert_eq!(offsets, commits);
    assert_eq!(offsets.len(), progress.len());
    let text = std::fs::read_to_string(cp.join("offsets").join("0")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "v1");
    assert!(lines[1].contains("batchTimestampMs"), "{text}");
    assert!(
        lines[2].starts_with("{\"0\":{") && lines[2].contains("runTimeMs"),
        "{text}"
    );

    // Restart: epochs continue, values continue right after the last committed one.
    let q = start_even_rate(&s, "evens2", &cp, continuous()).unwrap();
    wait_until("an epoch after restart", Duration::from_secs(10), || {
        !q.recent_progress().is_empty()
    });
    q.stop();
    let p = &q.recent_progress()[0];
    assert_eq!(
        p.batch_id,
        progress.len() as i64,
        "the epoch after the last"
    );
    assert_eq!(
        p.sources[0].start_offset,
        progress.last().unwrap().sources[0].end_offset
    );
    let second = values(&s, "evens2");
    let next_even = last_value + 1 + (last_value + 1) % 2;
    assert_eq!(second[0], next_even, "resumes after the committed offset");
}

#[test]
fn a_stop_without_commit_replays_the_uncommitted_rows_at_least_once() {
    let tmp = tempfile::tempdir().unwrap();
    let cp = tmp.path().join("cp");
    let s = session();
    s.set_conf(sluice::testing::STOP_WITHOUT_COMMIT, "true");
    let q = start_even_rate(
        &s,
        "crash1",
        &cp,
        Trigger::Continuous(Duration::from_secs(1)),
    )
    .unwrap();
    wait_until("one epoch", Duration::from_secs(10), || {
        !q.recent_progress().is_empty()
    });
    // Let rows of the second epoch be written, then stop as a crash would.
    std::thread::sleep(Duration::from_millis(300));
    q.stop();
    let first = values(&s, "crash1");
    let committed = q.recent_progress().last().unwrap().sources[0]
        .end_offset
        .clone()
        .unwrap();
    let committed_value = committed["0"]["value"].as_i64().unwrap();
    assert!(
        *first.last().unwrap() > committed_value,
        "rows after the last commit were written: {committed_value} vs {:?}",
        first.last()
    );
    let q = start_even_rate(&s, "crash2", &cp, continuous()).unwrap();
    wait_until("an epoch after restart", Duration::from_secs(10), || {
        !q.recent_progress().is_empty()
    });
    q.stop();
    let second = values(&s, "crash2");
    // Replayed: the restart starts right after the committed offset, so rows written before
    // the crash appear again (at-least-once), and none is missing.
    let replayed: Vec<&i64> = second.iter().filter(|v| first.contains(v)).collect();
    assert!(!replayed.is_empty(), "uncommitted rows are replayed");
    assert_eq!(second[0], committed_value + 1 + (committed_value + 1) % 2);
    let mut all = first.clone();
    all.extend(&second);
    all.sort();
    all.dedup();
    assert_eq!(
        all,
        (0..all.len() as i64).map(|i| i * 2).collect::<Vec<_>>()
    );
}
