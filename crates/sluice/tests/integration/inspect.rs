//! Checkpoint and state inspection (`sluice checkpoint describe`, `sluice state read`): the
//! state read back from a checkpoint equals what the query had counted, batch by batch; the
//! description of a checkpoint; deduplication and group state; the error cases; and that
//! reading never writes into the checkpoint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray, StructArray};
use arrow::datatypes::{DataType, TimeUnit};
use sluice::checkpoint::CheckpointDir;
use sluice::error::class::{
    CHECKPOINT_NOT_FOUND, STATE_BATCH_NOT_COMMITTED, STATE_OPERATOR_NOT_FOUND,
    STATE_VERSION_NOT_AVAILABLE,
};
use sluice::inspect::{describe_checkpoint, read_state};
use sluice::{col, OutputMode, Session, Trigger};

use crate::support::{add_file, dirs, events, longs, session, strings, Dirs};

/// µs of 2026-09-15T<hh:mm>:00Z.
fn at(hhmm: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(&format!("2026-09-15T{hhmm}:00Z"))
        .unwrap()
        .timestamp_micros()
}

/// Window start µs of each row of a `window` struct column.
fn window_starts(a: &ArrayRef) -> Vec<i64> {
    let s = a.as_any().downcast_ref::<StructArray>().unwrap();
    let start = arrow::compute::cast(
        s.column_by_name("start").unwrap(),
        &DataType::Timestamp(TimeUnit::Microsecond, None),
    )
    .unwrap();
    longs(&arrow::compute::cast(&start, &DataType::Int64).unwrap())
}

type Counts = BTreeMap<(i64, String), i64>;

/// `(window start, user) -> count` of the query's output rows or of the state rows (whose
/// value column, the count accumulator's state, is the last one).
fn counts(b: &RecordBatch, count_column: &str) -> Counts {
    let starts = window_starts(b.column_by_name("window").unwrap());
    let users = strings(b.column_by_name("user").unwrap());
    let n = match b.column_by_name(count_column) {
        Some(c) => longs(c),
        None => longs(b.column(b.num_columns() - 1)),
    };
    starts.into_iter().zip(users).zip(n).collect()
}

const FIVE_MIN_US: i64 = 5 * 60 * 1_000_000;

/// The seed's windowed count (per user), update mode, one new query per file (available-now).
/// Returns the query's output per batch id.
struct WindowedCount {
    d: Dirs,
    out: Arc<Mutex<Vec<(u64, RecordBatch)>>>,
    files: usize,
    query_id: Option<String>,
    /// Runs with the on-disk state store provider (Spark's RocksDB provider class).
    on_disk: bool,
}

impl WindowedCount {
    fn new() -> Self {
        Self {
            d: dirs(),
            out: Arc::default(),
            files: 0,
            query_id: None,
            on_disk: false,
        }
    }

    fn start(&self, s: &Session) -> sluice::Result<sluice::StreamingQuery> {
        let sink = self.out.clone();
        s.read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING")?
            .load(self.d.input.display().to_string())?
            .with_watermark("ts", "10 minutes")?
            .group_by([sluice::window(col("ts"), "5 minutes"), col("user")])
            .count()?
            .write_stream()
            .output_mode(OutputMode::Update)
            .option("checkpointLocation", self.d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .foreach_batch(move |data, id| {
                sink.lock().unwrap().push((id, data.concat()?));
                Ok(())
            })
            .start()
    }

    /// Adds a file and runs a query until it has caught up.
    fn run(&mut self, rows: &[(&str, &str)]) {
        add_file(
            &self.d.input,
            &format!("{}.json", self.files),
            &events(rows),
            self.files as u64,
        );
        self.files += 1;
        let s = session();
        if self.on_disk {
            s.set_conf(
                "spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
            );
        }
        let q = self.start(&s).unwrap();
        q.await_termination().unwrap();
        self.query_id = Some(q.id().to_string());
    }

    /// What the query had counted up to batch `b`: the newest count each key was emitted
    /// with, for the keys the batch's eviction watermark (`batchWatermarkMs` of `offsets/b`)
    /// keeps in state (window end after it).
    fn expected_after(&self, b: u64) -> Counts {
        let mut latest = Counts::new();
        for (id, rows) in self.out.lock().unwrap().iter() {
            if *id <= b && rows.num_rows() > 0 {
                latest.extend(counts(rows, "count"));
            }
        }
        let wm_us = CheckpointDir::new(&self.d.checkpoint)
            .offset_log()
            .get(b)
            .unwrap()
            .unwrap()
            .metadata
            .batch_watermark_ms
            * 1000;
        latest.retain(|(start, _), _| start + FIVE_MIN_US > wm_us);
        latest
    }

    fn last_committed(&self) -> u64 {
        CheckpointDir::new(&self.d.checkpoint)
            .commit_log()
            .latest_id()
            .unwrap()
            .unwrap()
    }
}

/// A recursive listing of every file with its size and modification time.
fn tree(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path(), m.len(), m.modified().unwrap()));
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

const FILES: [&[(&str, &str)]; 4] = [
    &[
        ("12:01", "alice"),
        ("12:02", "bob"),
        ("12:07", "alice"),
        ("12:03", "alice"),
    ],
    // 12:04 is in time (watermark 11:57); 12:20 moves the watermark to 12:10, so a no-data
    // batch evicts the 12:00 and 12:05 windows.
    &[("12:20", "bob"), ("12:04", "alice"), ("12:06", "bob")],
    // 12:04 is late now and dropped.
    &[("12:04", "alice"), ("12:22", "carol"), ("12:21", "bob")],
    // The watermark moves to 12:30: the 12:20 windows go.
    &[("12:40", "alice")],
];

#[test]
fn state_read_reproduces_the_windowed_counts_after_every_batch_of_every_run() {
    let mut w = WindowedCount::new();
    let mut checked = 0;
    let mut sizes = Vec::new();
    for rows in FILES {
        w.run(rows);
        // After each run, the state as of every committed batch so far.
        for b in 0..=w.last_committed() {
            let state = read_state(&w.d.checkpoint, 0, Some(b)).unwrap();
            assert_eq!(state.batch_id, b);
            assert_eq!(state.version, b + 1, "batch b commits state version b + 1");
            assert_eq!(state.operator_name, "stateStoreSave");
            assert_eq!(state.partitions, 2);
            let names: Vec<&str> = state
                .rows
                .schema_ref()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect();
            assert_eq!(names.len(), 4, "partition, window, user, count: {names:?}");
            assert_eq!(&names[..3], ["partition", "window", "user"]);
            let got = counts(&state.rows, "");
            assert_eq!(got, w.expected_after(b), "state as of batch {b}");
            checked += 1;
            sizes.push(got.len());
        }
    }
    assert!(checked >= 10, "{checked} states checked");
    // The model above is not vacuous: pin the first batch and the evictions.
    let first = counts(&read_state(&w.d.checkpoint, 0, Some(0)).unwrap().rows, "");
    assert_eq!(
        first,
        Counts::from([
            ((at("12:00"), "alice".into()), 2),
            ((at("12:00"), "bob".into()), 1),
            ((at("12:05"), "alice".into()), 1),
        ])
    );
    let last = counts(&read_state(&w.d.checkpoint, 0, None).unwrap().rows, "");
    assert_eq!(
        last,
        Counts::from([((at("12:40"), "alice".into()), 1)]),
        "after the watermark passed 12:30 only the 12:40 window is left"
    );
    assert!(
        sizes.windows(2).any(|p| p[1] < p[0]),
        "state shrinks when the watermark evicts: {sizes:?}"
    );
}

/// `sluice state read` reads a checkpoint the on-disk provider wrote: both providers write the
/// same files (the on-disk one keeps only a cache beside them), and the class is pinned.
#[test]
fn state_read_reads_a_checkpoint_of_the_on_disk_provider() {
    let mut w = WindowedCount::new();
    w.on_disk = true;
    for rows in FILES {
        w.run(rows);
    }
    let last = w.last_committed();
    let state = read_state(&w.d.checkpoint, 0, Some(last)).unwrap();
    assert_eq!(counts(&state.rows, ""), w.expected_after(last));
    let offsets = std::fs::read_to_string(w.d.checkpoint.join(format!("offsets/{last}"))).unwrap();
    assert!(
        offsets.contains(
            "\"spark.sql.streaming.stateStore.providerClass\":\"org.apache.spark.sql.execution.\
             streaming.state.RocksDBStateStoreProvider\""
        ),
        "{offsets}"
    );
}

#[test]
fn describe_shows_batches_watermark_sources_conf_and_operators() {
    let mut w = WindowedCount::new();
    for rows in &FILES[..2] {
        w.run(rows);
    }
    let before = tree(&w.d.checkpoint);
    let desc = describe_checkpoint(&w.d.checkpoint).unwrap();
    assert_eq!(tree(&w.d.checkpoint), before, "describe writes nothing");
    let last = w.last_committed();
    assert_eq!(desc.query_id.as_deref(), w.query_id.as_deref());
    assert_eq!(desc.batches.first_offsets, Some(0));
    assert_eq!(desc.batches.last_offsets, Some(last));
    assert_eq!(desc.batches.last_committed, Some(last));
    assert_eq!(desc.batches.uncommitted, None);
    assert!(
        desc.batches
            .restart
            .contains(&format!("plans batch {}", last + 1)),
        "{}",
        desc.batches.restart
    );
    // Max event time 12:20, delay 10 minutes.
    let wm_1210 = at("12:10") / 1000;
    assert_eq!(desc.watermark.next_batch_watermark_ms, Some(wm_1210));
    assert_eq!(desc.watermark.batch_watermark_ms, Some(wm_1210));
    assert_eq!(desc.sources.len(), 1);
    assert_eq!(desc.sources[0].kind.as_deref(), Some("file"));
    assert_eq!(
        desc.sources[0].offset,
        Some(serde_json::json!({ "logOffset": 1 })),
        "the second file is the file source's log entry 1"
    );
    assert_eq!(
        desc.conf
            .get("spark.sql.shuffle.partitions")
            .map(String::as_str),
        Some("2")
    );
    assert_eq!(desc.operators.len(), 1);
    let op = &desc.operators[0];
    assert_eq!(op.id, 0);
    assert_eq!(op.name.as_deref(), Some("stateStoreSave"));
    let keys: Vec<(&str, &str)> = op
        .key_schema
        .iter()
        .map(|f| (f.name.as_str(), f.data_type.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("window", "STRUCT<start: TIMESTAMP, end: TIMESTAMP>"),
            ("user", "STRING")
        ]
    );
    assert_eq!(op.value_schema.len(), 1);
    assert_eq!(op.value_schema[0].data_type, "BIGINT");
    assert!(op.key_schema.iter().all(|f| f.arrow_type.is_some()));
    assert_eq!(op.partitions.len(), 2);
    for p in &op.partitions {
        assert_eq!(p.latest_version, last + 1);
        assert_eq!(p.deltas.len(), 1);
        assert_eq!((p.deltas[0].first, p.deltas[0].last), (1, last + 1));
        assert!(p.snapshots.is_empty());
    }
    assert_eq!(op.readable_batches.len(), 1);
    assert_eq!(
        (op.readable_batches[0].first, op.readable_batches[0].last),
        (0, last)
    );

    let json = desc.to_json();
    assert_eq!(json["batches"]["lastCommitted"], serde_json::json!(last));
    assert_eq!(
        json["operators"][0]["keySchema"][1]["type"],
        serde_json::json!("STRING")
    );
    assert_eq!(
        json["watermark"]["nextBatchWatermarkMs"],
        serde_json::json!(wm_1210)
    );
    let text = desc.to_text();
    for needle in [
        format!("query id        {}", w.query_id.as_deref().unwrap()),
        format!("last committed  {last}"),
        "2026-09-15T12:10:00.000Z".to_string(),
        "{\"logOffset\":1}".to_string(),
        "spark.sql.shuffle.partitions = 2".to_string(),
        "stateStoreSave".to_string(),
        "window STRUCT<start: TIMESTAMP, end: TIMESTAMP>".to_string(),
        format!("0-1: deltas 1-{}; snapshots none", last + 1),
        format!("readable   batches 0-{last}"),
    ] {
        assert!(text.contains(&needle), "{needle:?} in\n{text}");
    }
}

#[test]
fn an_uncommitted_batch_is_described_and_its_state_refused_and_nothing_is_written() {
    let mut w = WindowedCount::new();
    w.run(FILES[0]);
    let committed = w.last_committed();
    let crashed = committed + 1;
    add_file(&w.d.input, "1.json", &events(FILES[1]), 1);
    let s = session();
    s.set_conf("sluice.testing.crashPoint", format!("afterSink:{crashed}"));
    let err = w.start(&s).unwrap().await_termination().unwrap_err();
    assert_eq!(err.class(), "SLUICE_INJECTED_CRASH");

    // A temporary file a crashed commit could leave: a writing provider would delete it.
    let stale = w.d.checkpoint.join("state/0/0/.9.delta.0f3c.tmp");
    std::fs::write(&stale, b"partial").unwrap();
    let before = tree(&w.d.checkpoint);

    let desc = describe_checkpoint(&w.d.checkpoint).unwrap();
    assert_eq!(desc.batches.last_offsets, Some(crashed));
    assert_eq!(desc.batches.last_committed, Some(committed));
    assert_eq!(desc.batches.uncommitted, Some(crashed));
    assert!(desc.batches.restart.contains("runs it again"));
    assert!(desc
        .to_text()
        .contains(&format!("uncommitted     batch {crashed}")));
    // The crashed batch's state version is on disk, but the batch is not committed.
    assert_eq!(desc.operators[0].partitions[0].latest_version, crashed + 1);
    let readable = &desc.operators[0].readable_batches;
    assert_eq!(readable.len(), 1);
    assert_eq!((readable[0].first, readable[0].last), (0, committed));
    let e = read_state(&w.d.checkpoint, 0, Some(crashed)).unwrap_err();
    assert_eq!(e.class(), STATE_BATCH_NOT_COMMITTED);
    assert!(
        e.message()
            .contains(&format!("the last committed batch is {committed}"))
            && e.message().contains("as of batches 0")
            && e.message().contains(&w.d.checkpoint.display().to_string()),
        "{e}"
    );
    // The default is the last committed batch.
    let state = read_state(&w.d.checkpoint, 0, None).unwrap();
    assert_eq!(state.batch_id, committed);
    assert_eq!(counts(&state.rows, ""), w.expected_after(committed));
    assert_eq!(tree(&w.d.checkpoint), before, "reading wrote nothing");
    assert!(stale.exists());
}

#[test]
fn error_cases_name_the_path_and_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    for dir in [tmp.path().to_path_buf(), tmp.path().join("missing")] {
        let e = read_state(&dir, 0, None).unwrap_err();
        assert_eq!(e.class(), CHECKPOINT_NOT_FOUND);
        assert!(e.message().contains(&dir.display().to_string()), "{e}");
        assert!(e.message().contains("checkpointLocation"), "{e}");
        assert_eq!(
            describe_checkpoint(&dir).unwrap_err().class(),
            CHECKPOINT_NOT_FOUND
        );
    }

    let mut w = WindowedCount::new();
    for rows in &FILES[..2] {
        w.run(rows);
    }
    let last = w.last_committed();
    let e = read_state(&w.d.checkpoint, 3, None).unwrap_err();
    assert_eq!(e.class(), STATE_OPERATOR_NOT_FOUND);
    assert!(e.message().contains("its operators are 0"), "{e}");
    let e = read_state(&w.d.checkpoint, 0, Some(last + 5)).unwrap_err();
    assert_eq!(e.class(), STATE_BATCH_NOT_COMMITTED);
    assert!(
        e.message()
            .contains(&format!("the last committed batch is {last}")),
        "{e}"
    );

    // Versions 1 and 2 purged (a snapshot at 3 carries the state on): batches 0 and 1 are
    // gone, 2.. can be read.
    let ck = w.d._tmp.path().join("purged");
    copy_dir(&w.d.checkpoint, &ck);
    for p in 0..2 {
        let dir = ck.join(format!("state/0/{p}"));
        let mut provider = sluice::state::DefaultStateStoreProvider::new(
            sluice::state::StateStoreId::new(&ck, 0, p),
            sluice::state::StateStoreConf {
                min_deltas_for_snapshot: 1,
                min_versions_to_retain: 1,
                ..Default::default()
            },
        )
        .unwrap();
        sluice::state::StateStoreProvider::do_maintenance(&mut provider).unwrap();
        drop(provider);
        assert!(!dir.join("1.delta").exists(), "purged");
    }
    let e = read_state(&ck, 0, Some(0)).unwrap_err();
    assert_eq!(e.class(), STATE_VERSION_NOT_AVAILABLE);
    assert!(
        e.message().contains(&format!("as of batches {last}"))
            && e.message()
                .contains(&ck.join("state/0").display().to_string()),
        "{e}"
    );
    assert_eq!(
        counts(&read_state(&ck, 0, Some(last)).unwrap().rows, ""),
        w.expected_after(last),
        "the state is read from the snapshot"
    );

    // A stateless query's checkpoint.
    let d = dirs();
    add_file(&d.input, "0.json", &events(&[("12:00", "a")]), 0);
    let s = session();
    let q = s
        .read_stream()
        .format("json")
        .schema("ts TIMESTAMP, user STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .format("noop")
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let e = read_state(&d.checkpoint, 0, None).unwrap_err();
    assert_eq!(e.class(), STATE_OPERATOR_NOT_FOUND);
    assert!(e.message().contains("keeps no state"), "{e}");
    let desc = describe_checkpoint(&d.checkpoint).unwrap();
    assert!(desc.operators.is_empty());
    assert!(desc.to_text().contains("(none: the query keeps no state)"));
}

#[test]
fn a_schema_file_without_arrow_types_decodes_from_the_spark_type_names() {
    let mut w = WindowedCount::new();
    for rows in &FILES[..2] {
        w.run(rows);
    }
    let file = w.d.checkpoint.join("state/0/_metadata/schema");
    let mut schema: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    for part in ["keySchema", "valueSchema"] {
        for f in schema[part].as_array_mut().unwrap() {
            assert!(f.as_object_mut().unwrap().remove("arrowType").is_some());
        }
    }
    std::fs::write(&file, serde_json::to_vec_pretty(&schema).unwrap()).unwrap();
    for b in 0..=w.last_committed() {
        let state = read_state(&w.d.checkpoint, 0, Some(b)).unwrap();
        assert_eq!(counts(&state.rows, ""), w.expected_after(b), "batch {b}");
    }
    // A query restarted on such a checkpoint still accepts it.
    w.run(FILES[2]);
    let last = w.last_committed();
    assert_eq!(
        counts(&read_state(&w.d.checkpoint, 0, None).unwrap().rows, ""),
        w.expected_after(last)
    );
}

/// A dedup query over `{"id": N, "ts": ..}` files, one run per file.
fn dedup_checkpoint(within: bool, files: &[&[(i64, &str)]]) -> Dirs {
    let d = dirs();
    for (k, rows) in files.iter().enumerate() {
        let body: String = rows
            .iter()
            .map(|(id, t)| format!("{{\"id\": {id}, \"ts\": \"2026-07-07T{t}:00Z\"}}\n"))
            .collect();
        add_file(&d.input, &format!("{k}.json"), &body, k as u64);
        let frame = session()
            .read_stream()
            .format("json")
            .schema("id INT, ts TIMESTAMP")
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .with_watermark("ts", "10 minutes")
            .unwrap();
        let frame = if within {
            frame.drop_duplicates_within_watermark(["id"]).unwrap()
        } else {
            frame.drop_duplicates(["id", "ts"]).unwrap()
        };
        frame
            .write_stream()
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap()
            .await_termination()
            .unwrap();
    }
    d
}

fn ts_us(t: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(&format!("2026-07-07T{t}:00Z"))
        .unwrap()
        .timestamp_micros()
}

#[test]
fn dedup_state_is_the_keys_kept_within_the_watermark() {
    let files: [&[(i64, &str)]; 3] = [
        &[(1, "10:00"), (2, "10:05"), (1, "10:00")],
        &[(3, "10:30"), (2, "10:05")],
        &[(4, "10:50")],
    ];
    let d = dedup_checkpoint(false, &files);
    let keys = |b: Option<u64>| {
        let s = read_state(&d.checkpoint, 0, b).unwrap();
        assert_eq!(s.operator_name, "dedupe");
        let names: Vec<String> = s
            .rows
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["partition", "id", "ts"], "keys only, no value");
        let ids = longs(s.rows.column(1));
        let ts = longs(&arrow::compute::cast(s.rows.column(2), &DataType::Int64).unwrap());
        let mut pairs: Vec<(i64, i64)> = ids.into_iter().zip(ts).collect();
        pairs.sort();
        pairs
    };
    assert_eq!(
        keys(Some(0)),
        [(1, ts_us("10:00")), (2, ts_us("10:05"))],
        "the copy of 1 is not a new key"
    );
    let desc = describe_checkpoint(&d.checkpoint).unwrap();
    let last = desc.batches.last_committed.unwrap();
    // After 10:50 the watermark is 10:40: only id 4 is left.
    assert_eq!(keys(None), [(4, ts_us("10:50"))]);
    assert_eq!(keys(Some(last)), keys(None));
    assert!(
        (0..=last).any(|b| keys(Some(b)).contains(&(3, ts_us("10:30")))),
        "id 3 lived in some batch"
    );

    // Within the watermark: the value is the first occurrence's time + the delay.
    let d = dedup_checkpoint(true, &files[..1]);
    let s = read_state(&d.checkpoint, 0, None).unwrap();
    assert_eq!(s.operator_name, "dedupeWithinWatermark");
    let names: Vec<String> = s
        .rows
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["partition", "id", "expiresAtMicros"]);
    let mut pairs: Vec<(i64, i64)> = longs(s.rows.column(1))
        .into_iter()
        .zip(longs(s.rows.column(2)))
        .collect();
    pairs.sort();
    let delay = 10 * 60 * 1_000_000;
    assert_eq!(
        pairs,
        [(1, ts_us("10:00") + delay), (2, ts_us("10:05") + delay)]
    );
}

/// `2026-11-03T<hh:mm>:00Z`.
fn nov3(hhmm: &str) -> String {
    format!("2026-11-03T{hhmm}:00Z")
}

/// One available-now run of an inner stream-stream join with watermarks (5 minutes on both
/// sides) and an event-time range, over impressions `i` (`ad, it, n`) and clicks `c`
/// (`ad, ct, price`), after adding one file to each side (`(ad, hh:mm, value)` rows).
/// Returns the join's numRowsTotal after the run's last batch.
fn join_run(d: &Dirs, run: usize, imps: &[(&str, &str, i32)], clicks: &[(&str, &str, f64)]) -> i64 {
    let s = session();
    let (imp, clk) = (d.input.join("imp"), d.input.join("clk"));
    let body = |rows: Vec<String>| rows.concat();
    add_file(
        &imp,
        &format!("{run}.json"),
        &body(
            imps.iter()
                .map(|(ad, t, n)| {
                    format!(
                        "{{\"ad\": \"{ad}\", \"it\": \"{}\", \"n\": {n}}}\n",
                        nov3(t)
                    )
                })
                .collect(),
        ),
        2 * run as u64,
    );
    add_file(
        &clk,
        &format!("{run}.json"),
        &body(
            clicks
                .iter()
                .map(|(ad, t, p)| {
                    format!(
                        "{{\"ad\": \"{ad}\", \"ct\": \"{}\", \"price\": {p}}}\n",
                        nov3(t)
                    )
                })
                .collect(),
        ),
        2 * run as u64 + 1,
    );
    for (name, dir, schema, col) in [
        ("i", &imp, "ad STRING, it TIMESTAMP, n INT", "it"),
        ("c", &clk, "ad STRING, ct TIMESTAMP, price DOUBLE", "ct"),
    ] {
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
        .sql(
            "SELECT i.ad, i.it, i.n, c.ct, c.price FROM i JOIN c ON i.ad = c.ad \
             AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES",
        )
        .unwrap()
        .write_stream()
        .format("noop")
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    q.recent_progress()
        .last()
        .map_or(0, |p| p.state_operators[0].num_rows_total)
}

/// One stored join row as read back: (side, key, matched, the row's own values as text).
type JoinRow = (String, String, bool, String);

/// The join state's rows, sorted, checking the layout: the other side's columns are null.
fn join_rows(d: &Dirs, batch: Option<u64>) -> Vec<JoinRow> {
    let s = read_state(&d.checkpoint, 0, batch).unwrap();
    assert_eq!(s.operator_name, "symmetricHashJoin Inner");
    let b = &s.rows;
    let names: Vec<String> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
        [
            "partition",
            "side",
            "i.ad",
            "seq",
            "matched",
            "ad",
            "it",
            "n",
            "ad#8",
            "ct",
            "price"
        ]
    );
    // Exact types from the recorded arrowType.
    let types: Vec<DataType> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
    assert_eq!(
        types,
        [
            DataType::UInt32,
            DataType::Utf8,
            DataType::Utf8,
            DataType::UInt64,
            DataType::Boolean,
            DataType::Utf8,
            ts.clone(),
            DataType::Int32,
            DataType::Utf8,
            ts,
            DataType::Float64
        ]
    );
    let cell = |c: usize, i: usize| sluice::sink::console::format_cell(b.column(c), i).unwrap();
    let matched = b
        .column(4)
        .as_any()
        .downcast_ref::<arrow::array::BooleanArray>()
        .unwrap();
    let mut seqs = BTreeMap::new();
    let mut rows: Vec<JoinRow> = (0..b.num_rows())
        .map(|i| {
            let side = cell(1, i);
            let (own, other) = if side == "left" {
                (5..8, 8..11)
            } else {
                (8..11, 5..8)
            };
            for c in other {
                assert!(
                    b.column(c).is_null(i),
                    "row {i}: column {c} of the other side"
                );
            }
            for c in own.clone() {
                assert!(!b.column(c).is_null(i), "row {i}: column {c} of its side");
            }
            // The row's own key column equals the join key.
            assert_eq!(cell(own.start, i), cell(2, i));
            *seqs.entry(cell(3, i)).or_insert(0) += 1;
            let values = own.map(|c| cell(c, i)).collect::<Vec<_>>().join("|");
            (side, cell(2, i), matched.value(i), values)
        })
        .collect();
    assert!(
        seqs.values().all(|n| *n == 1),
        "sequence numbers are unique: {seqs:?}"
    );
    rows.sort();
    rows
}

fn join_row(side: &str, key: &str, matched: bool, values: &str) -> JoinRow {
    (side.into(), key.into(), matched, values.into())
}

#[test]
fn stream_stream_join_state_is_the_rows_of_both_sides_not_yet_evicted() {
    let d = dirs();
    // Run 1: a matches a (12:03 is within 10 minutes after 12:00), b has no click. The
    // watermark ends at min(12:01, 12:03) - 5 minutes = 11:56: nothing is evicted.
    let total = join_run(
        &d,
        0,
        &[("a", "12:00", 1), ("b", "12:01", 2)],
        &[("a", "12:03", 0.5)],
    );
    let first = vec![
        join_row("left", "a", true, "a|2026-11-03 12:00:00|1"),
        join_row("left", "b", false, "b|2026-11-03 12:01:00|2"),
        join_row("right", "a", true, "a|2026-11-03 12:03:00|0.5"),
    ];
    let after_first = describe_checkpoint(&d.checkpoint)
        .unwrap()
        .batches
        .last_committed
        .unwrap();
    assert_eq!(join_rows(&d, None), first);
    assert_eq!(total, 3, "numRowsTotal agrees");

    // Run 2 moves the watermark to min(13:00, 13:04) - 5 minutes = 12:55, past everything of
    // run 1 (an impression is kept until its time + 10 minutes, a click until its time).
    join_run(
        &d,
        1,
        &[("c", "13:00", 3)],
        &[("c", "13:02", 1.25), ("z", "13:04", 2.0)],
    );
    // Run 3 reads with that watermark, so run 1's rows are gone; its rows stay (the watermark
    // becomes min(13:01, 13:04) - 5 minutes = 12:56). The new impression of c matches the
    // stored click of c.
    let total = join_run(&d, 2, &[("c", "13:01", 4)], &[]);
    let rows = join_rows(&d, None);
    assert_eq!(
        rows,
        vec![
            join_row("left", "c", true, "c|2026-11-03 13:00:00|3"),
            join_row("left", "c", true, "c|2026-11-03 13:01:00|4"),
            join_row("right", "c", true, "c|2026-11-03 13:02:00|1.25"),
            join_row("right", "z", false, "z|2026-11-03 13:04:00|2.0"),
        ]
    );
    assert_eq!(total, 4, "numRowsTotal agrees");
    // An earlier committed batch still reads as it was.
    assert_eq!(join_rows(&d, Some(after_first)), first);
}

#[test]
fn a_join_schema_without_left_fields_is_not_supported_and_still_accepted_on_restart() {
    let d = dirs();
    join_run(&d, 0, &[("a", "12:00", 1)], &[("a", "12:03", 0.5)]);
    let file = d.checkpoint.join("state/0/_metadata/schema");
    let mut schema: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(schema["leftFields"], 3, "{schema}");
    // As written before the split was recorded.
    schema.as_object_mut().unwrap().remove("leftFields");
    let old = serde_json::to_vec_pretty(&schema).unwrap();
    std::fs::write(&file, &old).unwrap();
    let check = || {
        let e = read_state(&d.checkpoint, 0, None).unwrap_err();
        assert_eq!(e.class(), "SLUICE_NOT_SUPPORTED_YET");
        for part in [
            "symmetricHashJoin",
            "leftFields",
            "new checkpoint location",
            "does not rewrite",
        ] {
            assert!(e.message().contains(part), "{part}: {e}");
        }
    };
    check();
    // A restart accepts the old schema file and leaves it as it is.
    join_run(&d, 1, &[("b", "12:10", 2)], &[("b", "12:12", 1.0)]);
    assert_eq!(std::fs::read(&file).unwrap(), old);
    check();
    let desc = describe_checkpoint(&d.checkpoint).unwrap();
    assert_eq!(desc.sources.len(), 2);
    assert_eq!(
        desc.operators[0].name.as_deref(),
        Some("symmetricHashJoin Inner")
    );
}

#[test]
fn group_state_reads_as_json_with_its_timeout() {
    use sluice::{GroupState, GroupStateTimeout};
    let d = dirs();
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("user", DataType::Utf8, true),
        arrow::datatypes::Field::new("n", DataType::Int64, true),
    ]));
    let out_schema = schema.clone();
    add_file(
        &d.input,
        "0.json",
        &events(&[("12:00", "alice"), ("12:01", "bob"), ("12:02", "alice")]),
        0,
    );
    let started_ms = chrono::Utc::now().timestamp_millis();
    session()
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
            move |key, rows, st: &mut GroupState<i64>| {
                let n = st.get().copied().unwrap_or(0) + rows.num_rows() as i64;
                st.update(n);
                st.set_timeout_duration(Duration::from_secs(3600))?;
                Ok(RecordBatch::try_new(
                    out_schema.clone(),
                    vec![
                        Arc::new(StringArray::from(vec![key[0].to_string()])),
                        Arc::new(Int64Array::from(vec![n])),
                    ],
                )?)
            },
        )
        .unwrap()
        .write_stream()
        .output_mode(OutputMode::Update)
        .format("noop")
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap()
        .await_termination()
        .unwrap();
    let s = read_state(&d.checkpoint, 0, None).unwrap();
    assert_eq!(s.operator_name, "flatMapGroupsWithState");
    let names: Vec<String> = s
        .rows
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
        ["partition", "user", "timeoutTimestampMs", "groupState"]
    );
    let users = strings(s.rows.column(1));
    let timeouts = longs(s.rows.column(2));
    let states = strings(s.rows.column(3));
    let mut got: Vec<(String, String)> = users.into_iter().zip(states).collect();
    got.sort();
    assert_eq!(
        got,
        [("alice".into(), "2".into()), ("bob".into(), "1".into())],
        "the user's state, as JSON"
    );
    let hour = 3_600_000;
    assert!(
        timeouts.iter().all(|t| *t >= started_ms + hour - 1000
            && *t <= chrono::Utc::now().timestamp_millis() + hour),
        "processing-time timeouts an hour after the batch: {timeouts:?}"
    );
}

#[test]
fn session_window_state_reads_the_open_sessions() {
    let d = dirs();
    add_file(
        &d.input,
        "0.json",
        &events(&[("12:00", "alice"), ("12:01", "bob"), ("12:02", "alice")]),
        0,
    );
    session()
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
        .output_mode(OutputMode::Append)
        .format("noop")
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap()
        .await_termination()
        .unwrap();
    let s = read_state(&d.checkpoint, 0, None).unwrap();
    assert_eq!(s.operator_name, "stateStoreSave");
    let b = &s.rows;
    assert_eq!(b.num_columns(), 4, "partition, user, session, count");
    let users = strings(b.column(1));
    let sessions = b.column(2).as_any().downcast_ref::<StructArray>().unwrap();
    let bound =
        |i: usize| longs(&arrow::compute::cast(sessions.column(i), &DataType::Int64).unwrap());
    let (starts, ends) = (bound(0), bound(1));
    let n = longs(b.column(3));
    let mut got: Vec<(String, i64, i64, i64)> = (0..b.num_rows())
        .map(|i| (users[i].clone(), starts[i], ends[i], n[i]))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("alice".into(), at("12:00"), at("12:07"), 2),
            ("bob".into(), at("12:01"), at("12:06"), 1),
        ]
    );
}
