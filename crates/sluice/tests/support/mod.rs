//! Helpers shared by the integration tests (`tests/integration/`): one copy each of the file
//! writer, temp directories, session, JSON event builders and readers of committed rows.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use arrow::array::{Array, ArrayRef, Int64Array, StringArray};
use arrow::datatypes::DataType;
use sluice::{col, lit, OutputMode, Session, Trigger};

/// Writes a file via rename, with a modification time `seq` seconds after a fixed base (an
/// hour ago), so files are ordered by `seq` whenever they were written.
pub fn add_file(dir: &Path, name: &str, body: &str, seq: u64) {
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

/// A temp directory with `stream_in/` (created), and `stream_out/` and `checkpoint/` (not yet).
pub struct Dirs {
    pub _tmp: tempfile::TempDir,
    pub input: PathBuf,
    pub output: PathBuf,
    pub checkpoint: PathBuf,
}

pub fn dirs() -> Dirs {
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

/// A session with two shuffle partitions (fewer state directories and tasks than Spark's 200).
pub fn session() -> Session {
    Session::builder().shuffle_partitions(2).build().unwrap()
}

/// Registers the views `i` (impressions `ad STRING, it TIMESTAMP`, JSON files in `imp`) and `c`
/// (clicks `ad STRING, ct TIMESTAMP` in `clk`) of the stream-stream join tests: file streams
/// with the reader `options`, each with a 5-minute watermark on its time.
pub fn impressions_and_clicks(s: &Session, imp: &Path, clk: &Path, options: &[(&str, &str)]) {
    for (name, dir, schema, time) in [
        ("i", imp, "ad STRING, it TIMESTAMP", "it"),
        ("c", clk, "ad STRING, ct TIMESTAMP", "ct"),
    ] {
        std::fs::create_dir_all(dir).unwrap();
        let mut reader = s.read_stream().format("json").schema(schema).unwrap();
        for (k, v) in options {
            reader = reader.option(*k, *v);
        }
        reader
            .load(dir.display().to_string())
            .unwrap()
            .with_watermark(time, "5 minutes")
            .unwrap()
            .create_or_replace_temp_view(name)
            .unwrap();
    }
}

/// `{"ts": "2026-09-15T<t>:00Z", "user": ..}` lines, one per `(hh:mm, user)`.
pub fn events(rows: &[(&str, &str)]) -> String {
    rows.iter()
        .map(|(t, u)| format!("{{\"ts\": \"2026-09-15T{t}:00Z\", \"user\": \"{u}\"}}\n"))
        .collect()
}

/// The values of a column as strings (cast to Utf8).
pub fn strings(a: &ArrayRef) -> Vec<String> {
    let a = arrow::compute::cast(a, &DataType::Utf8).unwrap();
    let a = a.as_any().downcast_ref::<StringArray>().unwrap();
    (0..a.len()).map(|i| a.value(i).to_string()).collect()
}

/// The values of a column as i64 (cast to Int64).
pub fn longs(a: &ArrayRef) -> Vec<i64> {
    let a = arrow::compute::cast(a, &DataType::Int64).unwrap();
    let a = a.as_any().downcast_ref::<Int64Array>().unwrap();
    (0..a.len()).map(|i| a.value(i)).collect()
}

/// The rows of the parquet files a file sink committed under `path` (read back through its
/// `_spark_metadata` manifest), each as its `columns` cast to strings (Spark's text, e.g.
/// `2026-09-15 12:04:00` for a timestamp, `42.5` for a double) joined by a space; sorted.
pub fn committed_rows(path: &Path, columns: &[&str]) -> Vec<String> {
    let batches = session()
        .read()
        .format("parquet")
        .load(path.display().to_string())
        .unwrap()
        .select_sql(
            columns
                .iter()
                .map(|c| format!("CAST({c} AS STRING) AS {c}")),
        )
        .unwrap()
        .collect()
        .unwrap();
    let mut rows = Vec::new();
    for b in &batches {
        let cells: Vec<Vec<String>> = b.columns().iter().map(strings).collect();
        for i in 0..b.num_rows() {
            let row: Vec<&str> = cells.iter().map(|c| c[i].as_str()).collect();
            rows.push(row.join(" "));
        }
    }
    rows.sort();
    rows
}

/// Polls `f` every 20 ms until it holds; panics after `timeout`, naming `what`.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The seed documents' file example: its input schema and three input files.
pub const SCHEMA: &str = "event_time TIMESTAMP, user STRING, action STRING, amount DOUBLE";

pub const BATCH1: &str = r#"{"event_time": "2026-02-14T10:00:05", "user": "alice", "action": "buy",  "amount": 250.0}
{"event_time": "2026-02-14T10:00:12", "user": "bob",   "action": "buy",  "amount": 5.0}
{"event_time": "2026-02-14T10:00:31", "user": "alice", "action": "buy",  "amount": 120.0}
"#;
pub const BATCH2: &str = r#"{"event_time": "2026-02-14T10:01:02", "user": "carol", "action": "cart", "amount": 42.5}
{"event_time": "2026-02-14T10:01:09", "user": "dave",  "action": "view", "amount": 0.0}
"#;
pub const BATCH3: &str = r#"{"event_time": "2026-02-14T10:02:40", "user": "bob", "action": "buy", "amount": 18.0}
"#;

/// The seed's example query, file source (`d.input`) to parquet (`d.output`), available-now.
pub fn run_file_to_parquet(session: &Session, d: &Dirs) -> sluice::Result<sluice::StreamingQuery> {
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
