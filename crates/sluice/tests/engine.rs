//! Integration tests of the engine spine, one binary. Modules:
//! - `seed`: the seed documents' file example (checkpoint layout, restart, filter).
//! - `recovery`: crash between sink and commit, replay with the same id, exactly-once file sink.
//! - `errors`: output-mode rules, concurrent checkpoint use, missing schema.
//! - `sinks`: memory, foreach, foreach_batch, SQL over stream views.
//! - `sources`: rate-micro-batch, memory stream, malformed input.
//! - `handle`: triggers, process_all_available, listeners, stop.
//! - `aggregation`: the seed's windowed count, SQL = DataFrame API, restart after every batch,
//!   a random reference model against one DataFusion batch query, output-mode rules.
//! - `dedup_and_joins`: deduplication state bounded by the watermark (and unbounded without),
//!   SELECT DISTINCT, stream-static joins and the join types Spark refuses.
//! - `stateful_processing`: the sessionization example (GroupState, event-time timeouts),
//!   with a restart mid-session; processing-time timeouts; output-mode rules.
//! - `soak`: (ignored; run by `benches/soak_state.sh`) a million events, state bounded by the
//!   watermark.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sluice::{col, lit, OutputMode, Session, Trigger};

const SCHEMA: &str = "event_time TIMESTAMP, user STRING, action STRING, amount DOUBLE";

const BATCH1: &str = r#"{"event_time": "2026-02-14T10:00:05", "user": "alice", "action": "buy",  "amount": 250.0}
{"event_time": "2026-02-14T10:00:12", "user": "bob",   "action": "buy",  "amount": 5.0}
{"event_time": "2026-02-14T10:00:31", "user": "alice", "action": "buy",  "amount": 120.0}
"#;
const BATCH2: &str = r#"{"event_time": "2026-02-14T10:01:02", "user": "carol", "action": "cart", "amount": 42.5}
{"event_time": "2026-02-14T10:01:09", "user": "dave",  "action": "view", "amount": 0.0}
"#;
const BATCH3: &str = r#"{"event_time": "2026-02-14T10:02:40", "user": "bob", "action": "buy", "amount": 18.0}
"#;

/// Writes a file via rename, with a modification time `seq` seconds after a fixed base.
fn add_file(dir: &Path, name: &str, body: &str, seq: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let tmp = dir.parent().unwrap().join(format!(".staging-{name}"));
    std::fs::write(&tmp, body).unwrap();
    let t = SystemTime::now() - Duration::from_secs(3600) + Duration::from_secs(seq);
    std::fs::File::options()
        .write(true)
        .open(&tmp)
        .unwrap()
        .set_modified(t)
        .unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

struct Dirs {
    _tmp: tempfile::TempDir,
    input: PathBuf,
    output: PathBuf,
    checkpoint: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let d = Dirs {
        input: root.join("stream_in"),
        output: root.join("stream_out"),
        checkpoint: root.join("checkpoint"),
        _tmp: tmp,
    };
    std::fs::create_dir_all(&d.input).unwrap();
    d
}

fn session() -> Session {
    Session::builder().shuffle_partitions(2).build().unwrap()
}

/// The issue's example query, file source to parquet, available-now.
fn run_file_to_parquet(session: &Session, d: &Dirs) -> sluice::Result<sluice::StreamingQuery> {
    let events = session
        .read_stream()
        .format("json")
        .schema(SCHEMA)?
        .option("maxFilesPerTrigger", "1")
        .load(d.input.display().to_string())?;
    let q = events
        .filter(col("amount").gt(lit(10.0)))?
        .select(["event_time", "user", "amount"])?
        .write_stream()
        .output_mode(OutputMode::Append)
        .format("parquet")
        .option("path", d.output.display())
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()?;
    q.await_termination()?;
    Ok(q)
}

fn committed_rows(d: &Dirs) -> Vec<(String, f64)> {
    let batches = sluice::sink::file::read_sink_output(&d.output, "parquet", None).unwrap();
    let mut rows = Vec::new();
    for b in &batches {
        let users = b.column_by_name("user").unwrap();
        let users = users
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .unwrap();
        let amounts = b.column_by_name("amount").unwrap();
        let amounts = amounts
            .as_any()
            .downcast_ref::<arrow::array::Float64Array>()
            .unwrap();
        for i in 0..b.num_rows() {
            rows.push((users.value(i).to_string(), amounts.value(i)));
        }
    }
    rows.sort_by(|a, b| a.partial_cmp(b).unwrap());
    rows
}

mod seed {
    use super::*;

    #[test]
    fn two_batches_leave_sparks_checkpoint_layout_and_drop_the_five_pound_row() {
        let d = dirs();
        add_file(&d.input, "batch1.json", BATCH1, 1);
        add_file(&d.input, "batch2.json", BATCH2, 2);
        let s = session();
        let q = run_file_to_parquet(&s, &d).unwrap();
        for f in [
            "metadata",
            "offsets/0",
            "offsets/1",
            "commits/0",
            "commits/1",
            "sources/0/0",
            "sources/0/1",
        ] {
            assert!(d.checkpoint.join(f).is_file(), "missing {f}");
        }
        assert!(!d.checkpoint.join("offsets/2").exists());
        assert_eq!(
            committed_rows(&d),
            vec![
                ("alice".into(), 120.0),
                ("alice".into(), 250.0),
                ("carol".into(), 42.5)
            ]
        );
        let progress = q.recent_progress();
        assert_eq!(progress.len(), 2);
        assert_eq!(progress[0].num_input_rows, 3);
        assert_eq!(
            progress[0].sink.num_output_rows, 2,
            "bob's £5 row is filtered out"
        );
        assert_eq!(progress[1].num_input_rows, 2);
        let offsets = std::fs::read_to_string(d.checkpoint.join("offsets/1")).unwrap();
        assert!(
            offsets.starts_with("v1\n{\"batchWatermarkMs\":0,"),
            "{offsets}"
        );
        assert!(offsets.ends_with("\n{\"logOffset\":1}"), "{offsets}");
    }

    #[test]
    fn restart_reads_nothing_twice_and_a_new_file_exactly_once() {
        let d = dirs();
        add_file(&d.input, "batch1.json", BATCH1, 1);
        add_file(&d.input, "batch2.json", BATCH2, 2);
        let id = run_file_to_parquet(&session(), &d)
            .unwrap()
            .id()
            .to_string();

        let q = run_file_to_parquet(&session(), &d).unwrap();
        assert!(
            q.recent_progress().is_empty(),
            "a restart without new files runs no batch"
        );
        assert_eq!(q.id(), id, "the query id survives restarts");

        add_file(&d.input, "batch3.json", BATCH3, 3);
        let q = run_file_to_parquet(&session(), &d).unwrap();
        let p = q.recent_progress();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].batch_id, 2);
        assert_eq!(p[0].num_input_rows, 1);
        assert_eq!(committed_rows(&d).len(), 4);
    }
}

mod recovery {
    use super::*;

    #[test]
    fn crash_after_sink_before_commit_reruns_the_batch_with_the_same_id_and_rows_once() {
        let d = dirs();
        add_file(&d.input, "batch1.json", BATCH1, 1);
        add_file(&d.input, "batch2.json", BATCH2, 2);
        let s = session();
        s.set_conf("sluice.testing.crashPoint", "afterSink:1");
        let err = run_file_to_parquet(&s, &d).unwrap_err();
        assert_eq!(err.class(), "SLUICE_INJECTED_CRASH");
        assert!(d.checkpoint.join("offsets/1").exists());
        assert!(!d.checkpoint.join("commits/1").exists());

        let q = run_file_to_parquet(&session(), &d).unwrap();
        let p = q.recent_progress();
        assert_eq!(
            p[0].batch_id, 1,
            "the uncommitted batch is re-run under its id"
        );
        assert_eq!(p[0].num_input_rows, 2, "with the same offsets");
        assert_eq!(
            committed_rows(&d).len(),
            3,
            "the file sink holds batch 1's rows once"
        );
    }

    #[test]
    fn a_crash_in_the_middle_of_a_state_commit_is_replayed_from_the_last_version() {
        let d = dirs();
        add_file(
            &d.input,
            "1.json",
            "{\"user\": \"a\"}\n{\"user\": \"b\"}\n{\"user\": \"c\"}\n{\"user\": \"a\"}\n",
            1,
        );
        let seen: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
        for crash in [true, false] {
            let s = session();
            if crash {
                s.set_conf("sluice.testing.crashPoint", "inStateCommit:0");
            }
            let sink = seen.clone();
            let q = s
                .read_stream()
                .format("json")
                .schema("user STRING")
                .unwrap()
                .load(d.input.display().to_string())
                .unwrap()
                .group_by([col("user")])
                .count()
                .unwrap()
                .write_stream()
                .output_mode(OutputMode::Update)
                .option("checkpointLocation", d.checkpoint.display())
                .trigger(Trigger::AvailableNow)
                .foreach_batch(move |data, id| {
                    sink.lock().unwrap().push((id, data.num_rows()));
                    Ok(())
                })
                .start()
                .unwrap();
            let r = q.await_termination();
            if crash {
                assert_eq!(r.unwrap_err().class(), "SLUICE_INJECTED_CRASH");
                assert!(
                    d.checkpoint.join("state/0/0/1.delta").is_file(),
                    "partition 0 committed"
                );
                assert!(
                    !d.checkpoint.join("state/0/1/1.delta").exists(),
                    "partition 1 did not"
                );
            } else {
                r.unwrap();
                assert_eq!(
                    q.last_progress().unwrap().state_operators[0].num_rows_total,
                    3
                );
            }
        }
        assert_eq!(
            *seen.lock().unwrap(),
            vec![(0, 3)],
            "the sink sees batch 0 once, after the replay"
        );
    }

    #[test]
    fn crash_after_offsets_replays_the_planned_files() {
        let d = dirs();
        add_file(&d.input, "batch1.json", BATCH1, 1);
        let s = session();
        s.set_conf("sluice.testing.crashPoint", "afterOffsets:0");
        assert!(run_file_to_parquet(&s, &d).is_err());
        add_file(&d.input, "batch2.json", BATCH2, 2);
        let q = run_file_to_parquet(&session(), &d).unwrap();
        let p = q.recent_progress();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].batch_id, p[0].num_input_rows), (0, 3));
        assert_eq!((p[1].batch_id, p[1].num_input_rows), (1, 2));
    }

    #[test]
    fn foreach_batch_sees_a_replayed_batch_with_the_same_id_and_rows() {
        let d = dirs();
        add_file(&d.input, "batch1.json", BATCH1, 1);
        let seen: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
        for crash in [true, false] {
            let s = session();
            if crash {
                s.set_conf("sluice.testing.crashPoint", "afterSink:0");
            }
            let sink = seen.clone();
            let q = s
                .read_stream()
                .format("json")
                .schema(SCHEMA)
                .unwrap()
                .load(d.input.display().to_string())
                .unwrap()
                .write_stream()
                .option("checkpointLocation", d.checkpoint.display())
                .trigger(Trigger::AvailableNow)
                .foreach_batch(move |data, id| {
                    sink.lock().unwrap().push((id, data.num_rows()));
                    Ok(())
                })
                .start()
                .unwrap();
            assert_eq!(q.await_termination().is_err(), crash);
        }
        assert_eq!(*seen.lock().unwrap(), vec![(0, 3), (0, 3)]);
    }
}

mod errors {
    use super::*;

    #[test]
    fn complete_mode_without_aggregation_fails_at_start_with_sparks_meaning() {
        let d = dirs();
        let s = session();
        let err = s
            .read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Complete)
            .format("console")
            .start()
            .unwrap_err();
        assert_eq!(err.class(), "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION");
        assert!(err.message().contains(
            "Complete output mode not supported when there are no streaming aggregations"
        ));
    }

    #[test]
    fn a_stream_without_schema_fails_at_definition() {
        let d = dirs();
        let err = session()
            .read_stream()
            .format("json")
            .load(d.input.display().to_string())
            .unwrap_err();
        assert!(err.message().to_lowercase().contains("schema"), "{err}");
    }

    #[test]
    fn a_second_query_on_a_checkpoint_in_use_is_refused() {
        let d = dirs();
        let s = session();
        let start = || {
            s.read_stream()
                .format("json")
                .schema(SCHEMA)
                .unwrap()
                .load(d.input.display().to_string())
                .unwrap()
                .write_stream()
                .format("parquet")
                .option("path", d.output.display())
                .option("checkpointLocation", d.checkpoint.display())
                .start()
        };
        let first = start().unwrap();
        let err = start().unwrap_err();
        assert_eq!(err.class(), "CONCURRENT_QUERY", "{err}");
        first.stop();
        assert!(first.exception().is_none());
        start().unwrap().stop();
    }

    #[test]
    fn the_file_sink_refuses_update_mode() {
        let d = dirs();
        let err = session()
            .read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Update)
            .format("parquet")
            .option("path", d.output.display())
            .option("checkpointLocation", d.checkpoint.display())
            .start()
            .unwrap_err();
        assert!(err.message().contains("does not support"), "{err}");
    }
}

mod sinks {
    use super::*;
    use sluice::sink::foreach::{ForeachWriter, Row};
    use sluice::SluiceError;

    #[test]
    fn sql_over_a_stream_view_is_a_stream_and_the_memory_sink_is_queryable() {
        let d = dirs();
        add_file(&d.input, "batch1.json", BATCH1, 1);
        let s = session();
        s.read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .create_or_replace_temp_view("events")
            .unwrap();
        let big = s
            .sql("SELECT user, amount * 2 AS doubled FROM events WHERE amount > 10")
            .unwrap();
        assert!(big.is_streaming());
        assert!(big.collect().is_err(), "a stream cannot be collected");
        let q = big
            .write_stream()
            .format("memory")
            .query_name("big")
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        q.await_termination().unwrap();
        let total = s.sql("SELECT sum(doubled) AS t FROM big").unwrap();
        assert!(!total.is_streaming());
        let b = total.collect().unwrap();
        let t = b[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Float64Array>()
            .unwrap();
        assert_eq!(t.value(0), 740.0);
    }

    struct Recorder(Arc<Mutex<Vec<String>>>);
    impl ForeachWriter for Recorder {
        fn open(&mut self, partition_id: usize, epoch_id: u64) -> sluice::Result<bool> {
            self.0
                .lock()
                .unwrap()
                .push(format!("open {partition_id} {epoch_id}"));
            Ok(true)
        }
        fn process(&mut self, row: Row<'_>) -> sluice::Result<()> {
            self.0
                .lock()
                .unwrap()
                .push(format!("row {}", row.get("user")?));
            Ok(())
        }
        fn close(&mut self, error: Option<&SluiceError>) {
            self.0
                .lock()
                .unwrap()
                .push(format!("close {}", error.is_some()));
        }
    }

    #[test]
    fn foreach_opens_processes_and_closes_per_partition() {
        let d = dirs();
        add_file(&d.input, "batch1.json", BATCH1, 1);
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let l = log.clone();
        let q = session()
            .read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .foreach(move || Box::new(Recorder(l.clone())))
            .start()
            .unwrap();
        q.await_termination().unwrap();
        let log = log.lock().unwrap();
        let rows = log.iter().filter(|l| l.starts_with("row ")).count();
        assert_eq!(rows, 3);
        let opens = log.iter().filter(|l| l.starts_with("open ")).count();
        let closes = log.iter().filter(|l| *l == "close false").count();
        assert!(opens >= 1);
        assert_eq!(opens, closes);
        assert!(log.iter().any(|l| l == "row alice"));
    }
}

mod sources {
    use super::*;

    #[test]
    fn rate_micro_batch_is_deterministic() {
        let s = session();
        let frame = s
            .read_stream()
            .format("rate-micro-batch")
            .option("rowsPerBatch", "10")
            .load_source()
            .unwrap();
        let seen: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
        let sink = seen.clone();
        let q = frame
            .filter_sql("value % 2 = 0")
            .unwrap()
            .write_stream()
            .trigger(Trigger::ProcessingTime(Duration::from_millis(10)))
            .foreach_batch(move |data, id| {
                sink.lock().unwrap().push((id, data.num_rows()));
                Ok(())
            })
            .option(
                "checkpointLocation",
                tempfile::tempdir().unwrap().keep().display(),
            )
            .start()
            .unwrap();
        while seen.lock().unwrap().len() < 3 {
            std::thread::sleep(Duration::from_millis(5));
        }
        q.stop();
        let seen = seen.lock().unwrap();
        assert_eq!(&seen[..3], &[(0, 5), (1, 5), (2, 5)]);
    }

    #[test]
    fn a_half_written_file_never_stops_a_permissive_query_and_is_counted() {
        let d = dirs();
        add_file(&d.input, "batch1.json", BATCH1, 1);
        add_file(&d.input, "half.json", "{\"event_time\": \"2026-02-14T10:05:00\", \"user\": \"x\", \"amount\": 30.0}\n{\"event_time\": \"2026-02-14T1", 2);
        let s = session();
        let q = run_file_to_parquet(&s, &d).unwrap();
        let p = q.recent_progress();
        assert_eq!(p.len(), 2);
        assert_eq!(
            p[1].num_input_rows, 2,
            "the malformed line is a row of nulls, not lost"
        );
        assert_eq!(
            p[1].sources[0]
                .metrics
                .get("numMalformedRecords")
                .map(String::as_str),
            Some("1")
        );
        assert_eq!(committed_rows(&d).len(), 3);
    }

    #[test]
    fn memory_stream_rows_flow_through_process_all_available() {
        use arrow::array::{Int64Array, RecordBatch};
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let stream = sluice::source::memory::MemoryStream::new(schema.clone());
        let s = session();
        let q = stream
            .to_frame(&s)
            .unwrap()
            .select_sql(["v * 10 AS v10"])
            .unwrap()
            .write_stream()
            .format("memory")
            .query_name("out")
            .start()
            .unwrap();
        stream
            .add_batch(
                RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1, 2]))])
                    .unwrap(),
            )
            .unwrap();
        q.process_all_available().unwrap();
        stream
            .add_batch(
                RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![3]))]).unwrap(),
            )
            .unwrap();
        q.process_all_available().unwrap();
        assert_eq!(s.sql("SELECT * FROM out").unwrap().count().unwrap(), 3);
        assert!(q.is_active());
        assert_eq!(q.status().message, "Waiting for data to arrive");
        q.stop();
        assert!(!q.is_active());
        let last = q.last_progress().unwrap();
        assert_eq!(last.num_input_rows, 1);
        let json: serde_json::Value = serde_json::from_str(&last.json()).unwrap();
        for k in [
            "latestOffset",
            "getBatch",
            "queryPlanning",
            "walCommit",
            "addBatch",
            "commitOffsets",
            "triggerExecution",
        ] {
            assert!(json["durationMs"].get(k).is_some(), "durationMs.{k}");
        }
    }
}

mod handle {
    use super::*;
    use sluice::progress::{QueryStartedEvent, QueryTerminatedEvent};
    use sluice::{StreamingQueryListener, StreamingQueryProgress};

    #[derive(Default)]
    struct Events(Mutex<Vec<String>>);
    impl StreamingQueryListener for Events {
        fn on_query_started(&self, _e: &QueryStartedEvent) {
            self.0.lock().unwrap().push("started".into());
        }
        fn on_query_progress(&self, p: &StreamingQueryProgress) {
            self.0
                .lock()
                .unwrap()
                .push(format!("progress {}", p.batch_id));
        }
        fn on_query_terminated(&self, e: &QueryTerminatedEvent) {
            self.0
                .lock()
                .unwrap()
                .push(format!("terminated {}", e.exception.is_some()));
        }
    }

    #[test]
    fn listener_sees_start_progress_and_termination_and_once_runs_one_batch() {
        let d = dirs();
        add_file(&d.input, "batch1.json", BATCH1, 1);
        add_file(&d.input, "batch2.json", BATCH2, 2);
        let s = session();
        let events = Arc::new(Events::default());
        s.add_listener(events.clone());
        let q = s
            .read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .option("maxFilesPerTrigger", "1")
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .format("noop")
            .trigger(Trigger::Once)
            .start()
            .unwrap();
        assert!(q
            .await_termination_timeout(Duration::from_secs(30))
            .unwrap());
        assert_eq!(
            q.recent_progress().len(),
            1,
            "Once ignores maxFilesPerTrigger and runs one batch"
        );
        assert_eq!(q.last_progress().unwrap().num_input_rows, 5);
        assert_eq!(
            *events.0.lock().unwrap(),
            vec!["started", "progress 0", "terminated false"]
        );
        assert!(q.explain().contains("Physical Plan"));
    }

    #[test]
    fn old_log_entries_are_purged_behind_min_batches_to_retain() {
        let d = dirs();
        for i in 0..4 {
            add_file(&d.input, &format!("{i}.json"), BATCH3, i);
        }
        let s = Session::builder()
            .shuffle_partitions(2)
            .config("spark.sql.streaming.minBatchesToRetain", 2)
            .build()
            .unwrap();
        run_file_to_parquet(&s, &d).unwrap();
        let mut offsets: Vec<String> = std::fs::read_dir(d.checkpoint.join("offsets"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        offsets.sort();
        assert_eq!(
            offsets,
            vec!["1", "2", "3"],
            "Spark keeps minBatchesToRetain batches before the current one"
        );
        assert_eq!(committed_rows(&d).len(), 4);
    }
}

mod aggregation {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use std::collections::BTreeMap;

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
                sluice::schema::parse_ddl_schema("ts TIMESTAMP, user STRING, amount DOUBLE")
                    .unwrap();
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
            assert_eq!(*finals.lock().unwrap(), expected, "seed {seed}");
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
}

mod dedup_and_joins {
    use super::*;

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
        let q = run("SELECT e.user, u.country FROM events e LEFT JOIN users u ON e.user = u.user")
            .unwrap();
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
}

#[path = "../examples/sessionization.rs"]
mod sessionization;

mod stateful_processing {
    use super::sessionization::{add_file, example_files, run_once, ClosedSession};
    use super::*;

    fn minute(m: i64) -> i64 {
        (1_777_629_600 + m * 60) * 1_000_000 // 2026-05-01T10:00:00Z + m minutes, µs
    }

    fn sorted(mut v: Vec<ClosedSession>) -> Vec<ClosedSession> {
        v.sort();
        v
    }

    #[test]
    fn sessions_close_by_event_time_timeout_across_restarts() {
        let d = dirs();
        let files = example_files();
        // Restart after every file: the open sessions survive in the checkpoint.
        let mut restarted = Vec::new();
        for (i, body) in files.iter().enumerate() {
            add_file(&d.input, &format!("{i}.json"), body, i as u64).unwrap();
            let closed = run_once(&d.input, &d.checkpoint).unwrap();
            if i < 2 {
                assert!(
                    closed.is_empty(),
                    "no session closes before the watermark passes its gap"
                );
            }
            restarted.extend(closed);
        }
        let expected = vec![
            ("alice".to_string(), minute(0), minute(8), 3),
            ("bob".to_string(), minute(1), minute(1), 1),
            ("carol".to_string(), minute(9), minute(9), 1),
        ];
        assert_eq!(sorted(restarted), expected);

        // The same events in one run give the same sessions.
        let d2 = dirs();
        for (i, body) in files.iter().enumerate() {
            add_file(&d2.input, &format!("{i}.json"), body, i as u64).unwrap();
        }
        assert_eq!(
            sorted(run_once(&d2.input, &d2.checkpoint).unwrap()),
            expected
        );
    }

    #[test]
    fn event_time_timeouts_need_a_watermark_and_modes_must_agree() {
        use sluice::{GroupState, GroupStateTimeout};
        let d = dirs();
        let s = session();
        let frame = s
            .read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING")
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap();
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("n", arrow::datatypes::DataType::Int64, true),
        ]));
        let err = frame
            .group_by_key(["user"])
            .flat_map_groups_with_state(
                schema.clone(),
                OutputMode::Append,
                GroupStateTimeout::EventTimeTimeout,
                |_, _, _: &mut GroupState<i64>| Ok(vec![]),
            )
            .unwrap_err();
        assert!(
            err.message().contains("Watermark must be specified"),
            "{err}"
        );
        let q = frame
            .group_by_key(["user"])
            .flat_map_groups_with_state(
                schema,
                OutputMode::Update,
                GroupStateTimeout::NoTimeout,
                |_, _, _: &mut GroupState<i64>| Ok(vec![]),
            )
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Append)
            .format("console")
            .start()
            .unwrap_err();
        assert_eq!(q.class(), "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION");
    }

    #[test]
    fn processing_time_timeouts_fire_in_a_later_no_data_batch() {
        use sluice::{GroupState, GroupStateTimeout};
        let d = dirs();
        super::add_file(
            &d.input,
            "1.json",
            "{\"ts\": \"2026-05-01T10:00:00Z\", \"user\": \"a\"}\n",
            1,
        );
        let s = session();
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("user", arrow::datatypes::DataType::Utf8, true),
            arrow::datatypes::Field::new("timed_out", arrow::datatypes::DataType::Boolean, true),
        ]));
        let out_schema = schema.clone();
        let seen: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
        let sink = seen.clone();
        let q = s
            .read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING")
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .group_by_key(["user"])
            .map_groups_with_state(
                schema,
                GroupStateTimeout::ProcessingTimeTimeout,
                move |key, _rows, st: &mut GroupState<i64>| {
                    let timed_out = st.has_timed_out();
                    if timed_out {
                        st.remove();
                    } else {
                        st.update(st.get().copied().unwrap_or(0) + 1);
                        st.set_timeout_duration(Duration::from_millis(50))?;
                    }
                    Ok(arrow::array::RecordBatch::try_new(
                        out_schema.clone(),
                        vec![
                            Arc::new(arrow::array::StringArray::from(vec![key[0].to_string()])),
                            Arc::new(arrow::array::BooleanArray::from(vec![timed_out])),
                        ],
                    )?)
                },
            )
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Update)
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::ProcessingTime(Duration::from_millis(20)))
            .foreach_batch(move |data, id| {
                sink.lock().unwrap().push((id, data.num_rows()));
                Ok(())
            })
            .start()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while seen.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        q.stop();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.first(), Some(&(0, 1)), "the key's first call");
        assert_eq!(
            seen.get(1),
            Some(&(1, 1)),
            "its timeout, in a no-data batch: {seen:?}"
        );
        let p = q.recent_progress();
        assert_eq!(p[1].num_input_rows, 0);
        assert_eq!(
            p[1].state_operators[0].num_rows_total, 0,
            "the timed-out state was removed"
        );
    }
}

mod join_state {
    use super::*;

    /// numRowsTotal after every batch of a stream-stream join of two file streams, fed pairs of
    /// files one trigger at a time.
    fn join_state(kind: &str, with_range: bool) -> Vec<i64> {
        let d = dirs();
        let (imp, clk) = (d.input.join("imp"), d.input.join("clk"));
        let s = session();
        for (name, dir, schema, col) in [
            ("i", &imp, "ad STRING, it TIMESTAMP", "it"),
            ("c", &clk, "ad STRING, ct TIMESTAMP", "ct"),
        ] {
            std::fs::create_dir_all(dir).unwrap();
            let mut f = s
                .read_stream()
                .format("json")
                .schema(schema)
                .unwrap()
                .load(dir.display().to_string())
                .unwrap();
            if with_range {
                f = f.with_watermark(col, "5 minutes").unwrap();
            }
            f.create_or_replace_temp_view(name).unwrap();
        }
        let cond = if with_range {
            " AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES"
        } else {
            ""
        };
        let q = s
            .sql(&format!(
                "SELECT i.ad, i.it, c.ct FROM i {kind} JOIN c ON i.ad = c.ad{cond}"
            ))
            .unwrap()
            .write_stream()
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .start()
            .unwrap();
        for k in 0..6i64 {
            let t = |m: i64| format!("2026-11-03T{:02}:{:02}:00Z", 12 + m / 60, m % 60);
            add_file(
                &imp,
                &format!("{k}.json"),
                &format!(
                    "{{\"ad\": \"a{k}\", \"it\": \"{}\"}}\n{{\"ad\": \"b{k}\", \"it\": \"{}\"}}\n",
                    t(k * 20),
                    t(k * 20 + 1)
                ),
                2 * k as u64,
            );
            add_file(
                &clk,
                &format!("{k}.json"),
                &format!("{{\"ad\": \"a{k}\", \"ct\": \"{}\"}}\n", t(k * 20 + 3)),
                2 * k as u64 + 1,
            );
            q.process_all_available().unwrap();
        }
        q.stop();
        q.recent_progress()
            .iter()
            .map(|p| p.state_operators[0].num_rows_total)
            .collect()
    }

    #[test]
    fn join_state_rises_and_falls_with_the_watermark_for_each_join_type() {
        for kind in ["INNER", "LEFT OUTER", "RIGHT OUTER", "FULL OUTER"] {
            let totals = join_state(kind, true);
            assert!(totals.iter().max() >= Some(&3), "{kind}: {totals:?}");
            assert!(
                totals.windows(2).any(|w| w[1] < w[0]),
                "{kind}: state falls as the watermark passes: {totals:?}"
            );
            assert!(*totals.last().unwrap() <= 6, "{kind}: bounded: {totals:?}");
        }
    }

    #[test]
    fn a_left_semi_join_emits_each_left_row_once_on_its_first_match() {
        let d = dirs();
        let (imp, clk) = (d.input.join("imp"), d.input.join("clk"));
        let s = session();
        for (name, dir, schema, col) in [
            ("i", &imp, "ad STRING, it TIMESTAMP", "it"),
            ("c", &clk, "ad STRING, ct TIMESTAMP", "ct"),
        ] {
            std::fs::create_dir_all(dir).unwrap();
            s.read_stream()
                .format("json")
                .schema(schema)
                .unwrap()
                .load(dir.display().to_string())
                .unwrap()
                .with_watermark(col, "5 minutes")
                .unwrap()
                .create_or_replace_temp_view(name)
                .unwrap();
        }
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = seen.clone();
        let q = s
            .sql("SELECT i.ad FROM i LEFT SEMI JOIN c ON i.ad = c.ad AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES")
            .unwrap()
            .write_stream()
            .option("checkpointLocation", d.checkpoint.display())
            .foreach_batch(move |data, _| {
                for b in data.batches() {
                    for i in 0..b.num_rows() {
                        sink.lock().unwrap().push(sluice::sink::console::format_cell(b.column(0), i)?);
                    }
                }
                Ok(())
            })
            .start()
            .unwrap();
        add_file(&imp, "1.json", "{\"ad\": \"a\", \"it\": \"2026-11-03T12:00:00Z\"}\n{\"ad\": \"b\", \"it\": \"2026-11-03T12:01:00Z\"}\n", 1);
        add_file(&clk, "1.json", "{\"ad\": \"a\", \"ct\": \"2026-11-03T12:03:00Z\"}\n{\"ad\": \"b\", \"ct\": \"2026-11-03T12:30:00Z\"}\n", 2);
        q.process_all_available().unwrap();
        add_file(
            &clk,
            "2.json",
            "{\"ad\": \"a\", \"ct\": \"2026-11-03T12:05:00Z\"}\n",
            3,
        );
        q.process_all_available().unwrap();
        q.stop();
        assert_eq!(
            *seen.lock().unwrap(),
            vec!["a"],
            "a matched twice but is emitted once; b's click is out of range"
        );
    }

    #[test]
    fn equal_windows_as_join_keys_bound_the_state_and_a_count_can_follow_the_join() {
        let d = dirs();
        let (imp, clk) = (d.input.join("imp"), d.input.join("clk"));
        let s = session();
        for (name, dir, schema, col) in [
            ("i", &imp, "ad STRING, it TIMESTAMP", "it"),
            ("c", &clk, "ad STRING, ct TIMESTAMP", "ct"),
        ] {
            std::fs::create_dir_all(dir).unwrap();
            s.read_stream()
                .format("json")
                .schema(schema)
                .unwrap()
                .load(dir.display().to_string())
                .unwrap()
                .with_watermark(col, "5 minutes")
                .unwrap()
                .create_or_replace_temp_view(name)
                .unwrap();
        }
        // A left outer join needs a bound: equal 10-minute windows give one.
        let q = s
            .sql("SELECT i.ad, i.it FROM i LEFT JOIN c ON i.ad = c.ad AND window(i.it, '10 minutes') = window(c.ct, '10 minutes')")
            .unwrap()
            .write_stream()
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .start()
            .unwrap();
        for k in 0..5i64 {
            let t = |m: i64| format!("2026-11-03T{:02}:{:02}:00Z", 12 + m / 60, m % 60);
            add_file(
                &imp,
                &format!("{k}.json"),
                &format!("{{\"ad\": \"a{k}\", \"it\": \"{}\"}}\n", t(k * 20 + 1)),
                2 * k as u64,
            );
            add_file(
                &clk,
                &format!("{k}.json"),
                &format!("{{\"ad\": \"a{k}\", \"ct\": \"{}\"}}\n", t(k * 20 + 3)),
                2 * k as u64 + 1,
            );
            q.process_all_available().unwrap();
        }
        q.stop();
        let totals: Vec<i64> = q
            .recent_progress()
            .iter()
            .map(|p| p.state_operators[0].num_rows_total)
            .collect();
        assert!(
            totals.windows(2).any(|w| w[1] < w[0]) && *totals.last().unwrap() <= 4,
            "{totals:?}"
        );

        // An aggregation after a join, in append mode: chained stateful operators.
        let d2 = dirs();
        let q = s
            .sql("SELECT window.start AS ws, count(*) AS n FROM (SELECT i.it AS it FROM i JOIN c ON i.ad = c.ad AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES) GROUP BY window(it, '1 hour')")
            .unwrap()
            .write_stream()
            .format("noop")
            .option("checkpointLocation", d2.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        q.await_termination().unwrap();
        let last = q.last_progress().unwrap();
        let names: Vec<&str> = last
            .state_operators
            .iter()
            .map(|o| o.operator_name.as_str())
            .collect();
        assert_eq!(names, vec!["symmetricHashJoin", "stateStoreSave"]);
    }

    #[test]
    fn changing_the_join_type_on_restart_is_refused() {
        let d = dirs();
        let (imp, clk) = (d.input.join("imp"), d.input.join("clk"));
        let run = |kind: &str| {
            let s = session();
            for (name, dir, schema, col) in [
                ("i", &imp, "ad STRING, it TIMESTAMP", "it"),
                ("c", &clk, "ad STRING, ct TIMESTAMP", "ct"),
            ] {
                std::fs::create_dir_all(dir).unwrap();
                s.read_stream()
                    .format("json")
                    .schema(schema)
                    .unwrap()
                    .load(dir.display().to_string())
                    .unwrap()
                    .with_watermark(col, "5 minutes")
                    .unwrap()
                    .create_or_replace_temp_view(name)
                    .unwrap();
            }
            let q = s
                .sql(&format!("SELECT i.ad, i.it, c.ct FROM i {kind} JOIN c ON i.ad = c.ad AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES"))
                .unwrap()
                .write_stream()
                .format("noop")
                .option("checkpointLocation", d.checkpoint.display())
                .trigger(Trigger::AvailableNow)
                .start()
                .unwrap();
            q.await_termination()
        };
        add_file(
            &imp,
            "1.json",
            "{\"ad\": \"a\", \"it\": \"2026-11-03T12:00:00Z\"}\n",
            1,
        );
        add_file(
            &clk,
            "1.json",
            "{\"ad\": \"a\", \"ct\": \"2026-11-03T12:03:00Z\"}\n",
            2,
        );
        run("INNER").unwrap();
        add_file(
            &imp,
            "2.json",
            "{\"ad\": \"b\", \"it\": \"2026-11-03T12:10:00Z\"}\n",
            3,
        );
        let err = run("LEFT OUTER").unwrap_err();
        assert_eq!(err.class(), "STATE_SCHEMA_INCOMPATIBLE", "{err}");
        assert!(err.message().contains("symmetricHashJoin"), "{err}");
    }

    #[test]
    fn an_inner_join_without_watermarks_keeps_every_row_and_outer_joins_are_refused() {
        let totals = join_state("INNER", false);
        assert_eq!(
            totals.last(),
            Some(&18),
            "unbounded: every row of both sides stays: {totals:?}"
        );
        let d = dirs();
        let s = session();
        for (name, schema) in [
            ("i", "ad STRING, it TIMESTAMP"),
            ("c", "ad STRING, ct TIMESTAMP"),
        ] {
            let dir = d.input.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            s.read_stream()
                .format("json")
                .schema(schema)
                .unwrap()
                .load(dir.display().to_string())
                .unwrap()
                .create_or_replace_temp_view(name)
                .unwrap();
        }
        let err = s
            .sql("SELECT * FROM i LEFT JOIN c ON i.ad = c.ad")
            .unwrap()
            .write_stream()
            .format("noop")
            .start()
            .unwrap_err();
        assert!(err.message().contains("Stream-stream LeftOuter join between two streaming DataFrame/Datasets is not supported without a watermark"), "{err}");
        let err = s
            .sql("SELECT * FROM i JOIN c ON i.ad = c.ad")
            .unwrap()
            .write_stream()
            .format("noop")
            .output_mode(OutputMode::Update)
            .start()
            .unwrap_err();
        assert!(
            err.message().contains("only in Append output mode"),
            "{err}"
        );
    }
}

mod bad_checkpoints {
    use super::*;

    fn two_batches() -> Dirs {
        let d = dirs();
        add_file(&d.input, "batch1.json", BATCH1, 1);
        add_file(&d.input, "batch2.json", BATCH2, 2);
        run_file_to_parquet(&session(), &d).unwrap();
        d
    }

    #[test]
    fn a_torn_last_offsets_file_is_set_aside_and_its_batch_planned_again() {
        let d = two_batches();
        // A crash while writing offsets/2 left half a file (and no commits/2).
        std::fs::write(
            d.checkpoint.join("offsets/2"),
            "v1\n{\"batchWatermarkMs\":0,\"batchTi",
        )
        .unwrap();
        add_file(&d.input, "batch3.json", BATCH3, 3);
        let q = run_file_to_parquet(&session(), &d).unwrap();
        assert_eq!(q.recent_progress()[0].batch_id, 2);
        assert_eq!(committed_rows(&d).len(), 4, "nothing lost, nothing twice");
        let aside = std::fs::read_dir(d.checkpoint.join("offsets"))
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().starts_with(".2.torn-"));
        assert!(aside, "the torn file is kept for inspection");
    }

    #[test]
    fn damaged_logs_fail_with_the_file_named_and_the_way_out() {
        // A garbled committed offsets file is not a torn tail: it is an error naming the file.
        let d = two_batches();
        std::fs::write(d.checkpoint.join("offsets/1"), "v1\nnot json\n{}").unwrap();
        let err = run_file_to_parquet(&session(), &d).unwrap_err();
        assert_eq!(err.class(), "CHECKPOINT_CORRUPT_LOG", "{err}");
        assert!(
            err.message().contains("offsets/1") || err.message().contains("offsets\\1"),
            "{err}"
        );

        // A gap: commits/1 lost while offsets/2 exists.
        let d = two_batches();
        std::fs::copy(
            d.checkpoint.join("offsets/1"),
            d.checkpoint.join("offsets/2"),
        )
        .unwrap();
        std::fs::remove_file(d.checkpoint.join("commits/1")).unwrap();
        let err = run_file_to_parquet(&session(), &d).unwrap_err();
        assert_eq!(err.class(), "CHECKPOINT_INCONSISTENT", "{err}");

        // A log written by a newer version.
        let d = two_batches();
        let text = std::fs::read_to_string(d.checkpoint.join("offsets/1"))
            .unwrap()
            .replacen("v1", "v9", 1);
        std::fs::write(d.checkpoint.join("offsets/1"), text).unwrap();
        let err = run_file_to_parquet(&session(), &d).unwrap_err();
        assert_eq!(err.class(), "CHECKPOINT_UNSUPPORTED_VERSION", "{err}");

        // The metadata file lost while the logs remain.
        let d = two_batches();
        std::fs::remove_file(d.checkpoint.join("metadata")).unwrap();
        let err = run_file_to_parquet(&session(), &d).unwrap_err();
        assert_eq!(
            err.class(),
            "STREAMING_CHECKPOINT_MISSING_METADATA_FILE",
            "{err}"
        );
    }

    #[test]
    fn a_missing_state_delta_names_the_version_and_directory() {
        let d = dirs();
        let run = || {
            let q = session()
                .read_stream()
                .format("json")
                .schema("user STRING")
                .unwrap()
                .load(d.input.display().to_string())
                .unwrap()
                .group_by([col("user")])
                .count()
                .unwrap()
                .write_stream()
                .output_mode(OutputMode::Update)
                .format("noop")
                .option("checkpointLocation", d.checkpoint.display())
                .trigger(Trigger::AvailableNow)
                .start()
                .unwrap();
            q.await_termination()
        };
        add_file(&d.input, "1.json", "{\"user\": \"a\"}\n", 1);
        run().unwrap();
        std::fs::remove_file(d.checkpoint.join("state/0/0/1.delta")).unwrap();
        add_file(
            &d.input,
            "2.json",
            "{\"user\": \"a\"}\n{\"user\": \"b\"}\n",
            2,
        );
        let err = run().unwrap_err();
        assert_eq!(err.class(), "STATE_STORE_VERSION_MISSING", "{err}");
        assert!(err.message().contains("state"), "{err}");
    }

    #[test]
    fn changing_the_source_type_or_the_file_sink_path_is_refused_at_start() {
        let d = two_batches();
        let err = session()
            .read_stream()
            .format("rate-micro-batch")
            .option("rowsPerBatch", "1")
            .load_source()
            .unwrap()
            .write_stream()
            .format("parquet")
            .option("path", d.output.display())
            .option("checkpointLocation", d.checkpoint.display())
            .start()
            .unwrap_err();
        assert_eq!(err.class(), "STREAMING_QUERY_SOURCES_CHANGED", "{err}");
        let err = session()
            .read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .format("parquet")
            .option("path", d.output.join("elsewhere").display())
            .option("checkpointLocation", d.checkpoint.display())
            .start()
            .unwrap_err();
        assert_eq!(err.class(), "STREAMING_QUERY_SINK_CHANGED", "{err}");
    }
}

mod bad_input {
    use super::*;

    #[test]
    fn invalid_utf8_and_empty_files_are_read_and_counted() {
        let d = dirs();
        add_file(&d.input, "0-empty.json", "", 1);
        std::fs::write(
            d.input.join("1-bad.json.tmp"),
            b"{\"user\": \"\xff\xfe\", \"amount\": 20.0}\n\xc3\x28\n",
        )
        .unwrap();
        std::fs::rename(d.input.join("1-bad.json.tmp"), d.input.join("1-bad.json")).unwrap();
        let q = run_file_to_parquet(&session(), &d).unwrap();
        let p = q.recent_progress();
        let rows: i64 = p.iter().map(|p| p.num_input_rows).sum();
        assert_eq!(
            rows, 2,
            "the empty file gives nothing; the invalid UTF-8 lines are read (one is malformed)"
        );
        let malformed: i64 = p
            .iter()
            .filter_map(|p| p.sources[0].metrics.get("numMalformedRecords"))
            .map(|v| v.parse::<i64>().unwrap())
            .sum();
        assert_eq!(malformed, 1, "counted, not lost");
    }

    #[test]
    fn a_source_directory_that_disappears_while_running_is_waited_for() {
        let d = dirs();
        add_file(&d.input, "1.json", BATCH1, 1);
        let q = session()
            .read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        std::fs::remove_dir_all(&d.input).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            q.is_active() && q.exception().is_none(),
            "{:?}",
            q.exception()
        );
        add_file(&d.input, "2.json", BATCH2, 2);
        q.process_all_available().unwrap();
        q.stop();
        let rows: i64 = q.recent_progress().iter().map(|p| p.num_input_rows).sum();
        assert_eq!(
            rows, 5,
            "the files before and after the directory came back"
        );
    }
}

mod chained {
    use super::*;

    #[test]
    fn dedup_then_a_windowed_count_in_append_mode_and_state_per_operator() {
        let d = dirs();
        let ev =
            |id: i64, m: i64| format!("{{\"id\": {id}, \"ts\": \"2026-07-07T10:{m:02}:00Z\"}}\n");
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
}

mod soak {
    use super::*;

    /// A million events through a windowed aggregation, with and without a watermark; prints
    /// the state size and memory after every tenth batch. Run by `benches/soak_state.sh`.
    #[test]
    #[ignore = "soak: a million events; run by benches/soak_state.sh"]
    fn state_stays_bounded_with_a_watermark_and_grows_without() {
        use arrow::array::{Float64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
        use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
        let batches = 100usize;
        let per_batch = 10_000usize;
        let schema = Arc::new(Schema::new(vec![
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new("user", DataType::Utf8, true),
            Field::new("amount", DataType::Float64, true),
        ]));
        let mut figures = Vec::new();
        for watermark in [true, false] {
            let stream = sluice::source::memory::MemoryStream::new(schema.clone());
            let s = session();
            let mut frame = stream.to_frame(&s).unwrap();
            if watermark {
                frame = frame.with_watermark("ts", "1 minute").unwrap();
            }
            let q = frame
                .group_by([sluice::window(col("ts"), "1 minute"), col("user")])
                .agg([datafusion::functions_aggregate::expr_fn::sum(col("amount")).alias("total")])
                .unwrap()
                .write_stream()
                .output_mode(OutputMode::Update)
                .format("noop")
                .start()
                .unwrap();
            let start = std::time::Instant::now();
            let mut last = (0i64, 0i64);
            for b in 0..batches {
                // 1,000 events per second of event time, 1,000 users.
                let base = (b * per_batch) as i64 * 1_000;
                let ts: Vec<i64> = (0..per_batch as i64).map(|i| base + i * 1_000).collect();
                let users: Vec<String> = (0..per_batch).map(|i| format!("u{}", i % 1000)).collect();
                let amounts: Vec<f64> = (0..per_batch).map(|i| i as f64).collect();
                stream
                    .add_batch(
                        RecordBatch::try_new(
                            schema.clone(),
                            vec![
                                Arc::new(TimestampMicrosecondArray::from(ts)),
                                Arc::new(StringArray::from(users)),
                                Arc::new(Float64Array::from(amounts)),
                            ],
                        )
                        .unwrap(),
                    )
                    .unwrap();
                q.process_all_available().unwrap();
                let p = q.last_progress().unwrap();
                last = (
                    p.state_operators[0].num_rows_total,
                    p.state_operators[0].memory_used_bytes,
                );
                if b % 10 == 9 {
                    println!(
                        "watermark={watermark} batch={b} events={} numRowsTotal={} memoryUsedBytes={}",
                        (b + 1) * per_batch,
                        last.0,
                        last.1
                    );
                }
            }
            q.stop();
            let secs = start.elapsed().as_secs_f64();
            println!(
                "watermark={watermark}: {} events in {secs:.1}s ({:.0} events/s, debug build), final numRowsTotal={} memoryUsedBytes={}",
                batches * per_batch,
                (batches * per_batch) as f64 / secs,
                last.0,
                last.1
            );
            figures.push(last);
        }
        let (with_wm, without_wm) = (figures[0], figures[1]);
        assert!(
            with_wm.0 <= 3 * 1000,
            "with a watermark, at most ~3 open minutes x 1000 users stay in state: {}",
            with_wm.0
        );
        // 1,000,000 events at 1,000/s of event time span ~17 minutes: 17 windows x 1,000 users.
        assert!(
            without_wm.0 >= 16_000,
            "without a watermark every (minute, user) stays: {}",
            without_wm.0
        );
    }
}

mod join_state_incremental {
    //! Stream-stream joins write only each batch's changes to state and evict through a time
    //! index; equal windows as join keys (Nexmark q8) bound the state.
    use super::*;
    use std::collections::BTreeMap;

    type Output = Arc<Mutex<BTreeMap<u64, Vec<String>>>>;

    fn cells(b: &arrow::array::RecordBatch, i: usize) -> String {
        (0..b.num_columns())
            .map(|c| sluice::sink::console::format_cell(b.column(c), i).unwrap())
            .collect::<Vec<_>>()
            .join("|")
    }

    /// Runs `query` available-now on `checkpoint`; each batch's rows (sorted) go to `out` by
    /// batch id, so a replayed batch replaces its earlier attempt.
    fn run(
        s: &Session,
        query: &str,
        checkpoint: &Path,
        out: &Output,
    ) -> (sluice::Result<()>, Vec<sluice::StreamingQueryProgress>) {
        let sink = out.clone();
        let q = s
            .sql(query)
            .unwrap()
            .write_stream()
            .option("checkpointLocation", checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .foreach_batch(move |data, id| {
                let mut rows: Vec<String> = data
                    .batches()
                    .flat_map(|b| (0..b.num_rows()).map(move |i| cells(b, i)))
                    .collect();
                rows.sort();
                sink.lock().unwrap().insert(id, rows);
                Ok(())
            })
            .start()
            .unwrap();
        let r = q.await_termination();
        (r, q.recent_progress())
    }

    /// A session with person and auction views over the nexmark source (1,000 events per
    /// second of event time, so a 10 s window holds 200 persons and 600 auctions).
    fn nexmark_session(num_events: u64, per_trigger: u64, conf: &[(&str, String)]) -> Session {
        let mut b = Session::builder().shuffle_partitions(2);
        for (k, v) in conf {
            b = b.config(*k, v);
        }
        let s = b.build().unwrap();
        for table in ["person", "auction"] {
            s.read_stream()
                .format("nexmark")
                .option("table", table)
                .option("numEvents", num_events)
                .option("maxEventsPerTrigger", per_trigger)
                .option("eventsPerSecond", 1_000)
                .load_source()
                .unwrap()
                .with_watermark("date_time", "1 second")
                .unwrap()
                .create_or_replace_temp_view(table)
                .unwrap();
        }
        s
    }

    /// `query` as a batch query over all `num_events` of the nexmark input, rows sorted.
    fn batch_rows(query: &str, num_events: u64) -> Vec<String> {
        let s = session();
        for table in ["person", "auction"] {
            let opts: std::collections::HashMap<String, String> = [
                ("table", table.to_string()),
                ("numEvents", num_events.to_string()),
                ("eventsPerSecond", "1000".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let p = sluice::source::nexmark::NexmarkSourceProvider::try_new(&opts).unwrap();
            let batches = p.generate(0, num_events).unwrap();
            s.register_batches(table, batches[0].schema(), batches)
                .unwrap();
        }
        let mut out: Vec<String> = s
            .sql(query)
            .unwrap()
            .collect()
            .unwrap()
            .iter()
            .flat_map(|b| (0..b.num_rows()).map(move |i| cells(b, i)))
            .collect();
        out.sort();
        out
    }

    fn all_rows(out: &Output) -> Vec<String> {
        let mut v: Vec<String> = out.lock().unwrap().values().flatten().cloned().collect();
        v.sort();
        v
    }

    const Q8: &str = "SELECT p.id, p.name, p.w.start AS starttime FROM \
        (SELECT id, name, window(date_time, '10 seconds') AS w FROM person) p JOIN \
        (SELECT seller, window(date_time, '10 seconds') AS w FROM auction) a \
        ON p.id = a.seller AND p.w = a.w";

    /// Checks the join's state over a run: bounded far below the rows seen, falling as windows
    /// close, and every row eventually accounted for.
    fn assert_bounded(progress: &[sluice::StreamingQueryProgress], seen: i64) {
        let join = |p: &sluice::StreamingQueryProgress| p.state_operators[0].clone();
        let totals: Vec<i64> = progress.iter().map(|p| join(p).num_rows_total).collect();
        let updated: i64 = progress.iter().map(|p| join(p).num_rows_updated).sum();
        let removed: i64 = progress.iter().map(|p| join(p).num_rows_removed).sum();
        assert_eq!(updated, seen, "every input row is stored once: {totals:?}");
        assert_eq!(
            removed + totals.last().unwrap(),
            seen,
            "what is not in state was evicted"
        );
        // 7 s batches over 10 s windows: at most the open windows (two) and a batch stay.
        let max = *totals.iter().max().unwrap();
        assert!(max <= 2 * 800 + 560, "bounded: {totals:?}");
        assert!(max * 5 < seen, "far below the {seen} rows seen: {totals:?}");
        assert!(
            totals.windows(2).filter(|w| w[1] < w[0]).count() >= 5,
            "state falls as windows close: {totals:?}"
        );
    }

    #[test]
    fn nexmark_q8_equal_window_join_keeps_only_open_windows_and_matches_a_batch_join() {
        let d = dirs();
        // 200,000 events = 200 s of event time: 4,000 persons and 12,000 auctions, 7 s per
        // batch so windows straddle batches.
        let s = nexmark_session(200_000, 7_000, &[]);
        let out: Output = Arc::default();
        let (r, progress) = run(&s, Q8, &d.checkpoint, &out);
        r.unwrap();
        assert_bounded(&progress, 16_000);
        let streamed = all_rows(&out);
        let reference = batch_rows(Q8, 200_000);
        assert!(reference.len() > 1000, "{}", reference.len());
        assert_eq!(streamed.len(), reference.len());
        assert!(
            streamed == reference,
            "the streamed join equals the batch join"
        );
    }

    #[test]
    fn a_window_computed_in_the_join_condition_bounds_the_state_too() {
        // The person side's window is an expression of its event time, compared with the
        // auction side's window column (Nexmark q7's shape).
        let query = "SELECT p.id, p.name, a.w.start AS starttime FROM person p JOIN \
            (SELECT seller, window(date_time, '10 seconds') AS w FROM auction) a \
            ON p.id = a.seller AND window(p.date_time, '10 seconds') = a.w";
        let d = dirs();
        let s = nexmark_session(200_000, 7_000, &[]);
        let out: Output = Arc::default();
        let (r, progress) = run(&s, query, &d.checkpoint, &out);
        r.unwrap();
        assert_bounded(&progress, 16_000);
        assert!(all_rows(&out) == batch_rows(Q8, 200_000));
    }

    /// A full outer q8: unmatched persons and auctions are emitted as their windows close.
    const FULL_Q8: &str = "SELECT p.id, p.w.start AS pw, a.seller, a.w.start AS aw FROM \
        (SELECT id, window(date_time, '10 seconds') AS w FROM person) p FULL OUTER JOIN \
        (SELECT seller, window(date_time, '10 seconds') AS w FROM auction) a \
        ON p.id = a.seller AND p.w = a.w";

    #[test]
    fn an_outer_join_restarted_every_two_batches_or_crashing_in_state_commits_gives_the_uninterrupted_output(
    ) {
        let (events, per_trigger) = (60_000, 7_000);
        let uninterrupted: Output = Arc::default();
        let d = dirs();
        let (r, progress) = run(
            &nexmark_session(events, per_trigger, &[]),
            FULL_Q8,
            &d.checkpoint,
            &uninterrupted,
        );
        r.unwrap();
        let reference = uninterrupted.lock().unwrap().clone();
        assert!(progress.len() >= 10, "{}", progress.len());
        let rows: Vec<String> = reference.values().flatten().cloned().collect();
        assert!(
            rows.iter().any(|r| r.starts_with("null|")),
            "unmatched auctions"
        );
        assert!(
            rows.iter().any(|r| r.contains("|null|null")),
            "unmatched persons"
        );
        // Matched pairs equal the inner batch join's; every input row shows up.
        let matched: Vec<String> = rows
            .iter()
            .filter(|r| !r.contains("null"))
            .cloned()
            .collect();
        let inner = batch_rows(&FULL_Q8.replace("FULL OUTER JOIN", "JOIN"), events);
        let mut m = matched.clone();
        m.sort();
        assert!(m == inner, "the matches are the inner join's");

        // Restart after every two batches.
        let restarted: Output = Arc::default();
        let d = dirs();
        for attempt in 0.. {
            assert!(attempt < 100, "did not finish");
            let before = restarted.lock().unwrap().len();
            let s = nexmark_session(
                events,
                per_trigger,
                &[(sluice::testing::MAX_BATCHES_PER_RUN, "2".to_string())],
            );
            run(&s, FULL_Q8, &d.checkpoint, &restarted).0.unwrap();
            if restarted.lock().unwrap().len() == before {
                break;
            }
        }
        assert!(
            *restarted.lock().unwrap() == reference,
            "restarts change nothing"
        );

        // A crash in the middle of a state commit (one partition committed) of batches 2, 5
        // and 8; each restart replays the batch from the state before it.
        let crashed: Output = Arc::default();
        let d = dirs();
        for n in [2, 5, 8] {
            let s = nexmark_session(
                events,
                per_trigger,
                &[(sluice::testing::CRASH_POINT, format!("inStateCommit:{n}"))],
            );
            let err = run(&s, FULL_Q8, &d.checkpoint, &crashed).0.unwrap_err();
            assert_eq!(
                err.class(),
                sluice::error::class::SLUICE_INJECTED_CRASH,
                "{err}"
            );
        }
        run(
            &nexmark_session(events, per_trigger, &[]),
            FULL_Q8,
            &d.checkpoint,
            &crashed,
        )
        .0
        .unwrap();
        assert!(
            *crashed.lock().unwrap() == reference,
            "crashes change nothing"
        );
    }
}
