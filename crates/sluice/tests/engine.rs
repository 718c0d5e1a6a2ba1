//! Integration tests of the engine spine, one binary. Modules:
//! - `seed`: the seed documents' file example (checkpoint layout, restart, filter).
//! - `recovery`: crash between sink and commit, replay with the same id, exactly-once file sink.
//! - `errors`: output-mode rules, concurrent checkpoint use, missing schema.
//! - `sinks`: memory, foreach, foreach_batch, SQL over stream views.
//! - `sources`: rate-micro-batch, memory stream, malformed input.
//! - `handle`: triggers, process_all_available, listeners, stop.

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
