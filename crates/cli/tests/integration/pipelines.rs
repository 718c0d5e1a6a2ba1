//! `sluice run PIPELINE.sql`: every pipeline in the top-level `examples/` (the seed documents'
//! examples) run by the built binary on temp directories (`--set` variables), with their output
//! checked; Ctrl-C (SIGINT) stops a running pipeline cleanly; bad pipeline files fail with
//! `file:line:column`. The Kafka example needs the broker of `scripts/kafka-broker start`
//! (`$SLUICE_KAFKA_BOOTSTRAP`, default 127.0.0.1:9092); its test name contains `kafka`, and
//! without a broker it fails and says how to start one.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice::{Pipeline, Session};

use crate::support::{add_file, ts_events};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

fn sluice_run(pipeline: &Path, vars: &[(&str, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.arg("run").arg(pipeline);
    for (k, v) in vars {
        c.arg("--set").arg(format!("{k}={v}"));
    }
    c
}

/// Runs to the end (available-now / once pipelines); panics with its output if it fails.
fn run_to_end(pipeline: &Path, vars: &[(&str, String)]) -> String {
    let out = sluice_run(pipeline, vars).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sluice run {} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        pipeline.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A pipeline running in the background, its stdout collected as it comes.
struct Running {
    child: Child,
    stdout: Arc<Mutex<String>>,
}

impl Running {
    fn start(pipeline: &Path, vars: &[(&str, String)]) -> Running {
        let mut child = sluice_run(pipeline, vars)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stdout.take().unwrap();
        let sink = stdout.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Running { child, stdout }
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits until stdout satisfies `f` (60 s at most).
    fn wait_for(&mut self, what: &str, f: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !f(&self.stdout()) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "sluice ended ({status}) before {what}; stdout:\n{}\nstderr:\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("no {what} within 60 s; stdout:\n{}", self.stdout());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(e) = self.child.stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }

    /// Ctrl-C: the pipeline stops after its current batch and exits 0.
    fn interrupt(mut self) -> (String, String) {
        let ok = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("sluice did not stop within 60 s of SIGINT");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stderr = self.stderr();
        std::thread::sleep(Duration::from_millis(100)); // the reader thread drains stdout
        assert!(
            status.success(),
            "exit after SIGINT: {status}\nstderr:\n{stderr}"
        );
        (self.stdout(), stderr)
    }
}

/// The rows of a console table (`|a|b|` lines after the header), cells trimmed.
fn table_rows(block: &str) -> Vec<Vec<String>> {
    block
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(1)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// The console output of batch `n`.
fn batch(stdout: &str, n: usize) -> Option<String> {
    let start = stdout.find(&format!("Batch: {n}\n"))?;
    let rest = &stdout[start..];
    let end = rest[1..]
        .find("Batch: ")
        .map(|e| e + 1)
        .unwrap_or(rest.len());
    Some(rest[..end].to_string())
}

/// Rows of a parquet directory written by the file sink, as `a|b|c`, sorted.
fn parquet_rows(dir: &Path) -> Vec<String> {
    let session = Session::builder().shuffle_partitions(1).build().unwrap();
    let batches = session
        .read()
        .format("parquet")
        .load(dir.display().to_string())
        .unwrap()
        .collect()
        .unwrap();
    let opts = arrow::util::display::FormatOptions::default();
    let mut out = Vec::new();
    for b in &batches {
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            let cells: Vec<String> = fmts.iter().map(|f| f.value(r).to_string()).collect();
            out.push(cells.join("|"));
        }
    }
    out.sort();
    out
}

const BATCH1: &str = r#"{"event_time": "2026-02-14T10:00:05", "user": "alice", "action": "buy",  "amount": 250.0}
{"event_time": "2026-02-14T10:00:12", "user": "bob",   "action": "buy",  "amount": 5.0}
{"event_time": "2026-02-14T10:00:31", "user": "alice", "action": "buy",  "amount": 120.0}
"#;

#[test]
fn every_example_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "sql") {
            Pipeline::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 6, "examples/*.sql: found {n}");
}

/// The seed's first query: filter to the console every 5 s; Ctrl-C stops it after the batch.
#[test]
fn stream_to_console_prints_the_seed_table_and_stops_on_ctrl_c() {
    let root = tempfile::tempdir().unwrap();
    let input = root.path().join("stream_in");
    add_file(&input, "batch1.json", BATCH1, None);
    let mut run = Running::start(
        &example("stream_to_console.sql"),
        &[("input", input.display().to_string())],
    );
    run.wait_for("batch 0", |out| out.contains("120.0 |\n+---"));
    let (stdout, stderr) = run.interrupt();
    let expected = "\
-------------------------------------------
Batch: 0
-------------------------------------------
+-------------------+-----+------+
|event_time         |user |amount|
+-------------------+-----+------+
|2026-02-14 10:00:05|alice|250.0 |
|2026-02-14 10:00:31|alice|120.0 |
+-------------------+-----+------+
";
    assert!(stdout.starts_with(expected), "stdout:\n{stdout}");
    assert!(!stdout.contains("bob"), "bob's 5.0 is filtered out");
    assert!(
        stderr.contains("stopping after the current batch"),
        "{stderr}"
    );
}

/// Complete mode: the whole result table at every trigger, updated as files arrive.
#[test]
fn user_totals_rewrites_the_whole_table_as_files_arrive() {
    let root = tempfile::tempdir().unwrap();
    let input = root.path().join("stream_in");
    add_file(&input, "batch1.json", BATCH1, None);
    let mut run = Running::start(
        &example("user_totals.sql"),
        &[("input", input.display().to_string())],
    );
    run.wait_for("batch 0", |out| {
        batch(out, 0).is_some_and(|b| b.matches("\n+").count() >= 3)
    });
    add_file(
        &input,
        "batch2.json",
        r#"{"event_time": "2026-02-14T10:01:02", "user": "alice", "action": "buy", "amount": 50.0}
{"event_time": "2026-02-14T10:01:09", "user": "bob", "action": "buy", "amount": 30.0}
"#,
        None,
    );
    run.wait_for("batch 1", |out| {
        batch(out, 1).is_some_and(|b| b.matches("\n+").count() >= 3)
    });
    let (stdout, _) = run.interrupt();
    let sorted = |n| {
        let mut r = table_rows(&batch(&stdout, n).unwrap());
        r.sort();
        r
    };
    assert_eq!(
        sorted(0),
        [["alice", "370.0"], ["bob", "5.0"]],
        "stdout:\n{stdout}"
    );
    assert_eq!(
        sorted(1),
        [["alice", "420.0"], ["bob", "35.0"]],
        "stdout:\n{stdout}"
    );
}

/// Windows + watermark into parquet (append): a window is written once the watermark passes
/// its end; a late row is dropped; a restart goes on from the checkpoint's state.
#[test]
fn windowed_to_parquet_writes_closed_windows_and_resumes_from_its_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    let (input, output, checkpoint) = (
        root.path().join("stream_in"),
        root.path().join("stream_out"),
        root.path().join("checkpoint"),
    );
    add_file(&input, "batch1.json", BATCH1, None);
    add_file(
        &input,
        "batch2.json",
        r#"{"event_time": "2026-02-14T10:01:02", "user": "carol", "action": "cart", "amount": 42.5}
{"event_time": "2026-02-14T10:01:09", "user": "dave",  "action": "view", "amount": 0.0}
"#,
        None,
    );
    add_file(
        &input,
        "batch3.json",
        r#"{"event_time": "2026-02-14T10:03:30", "user": "erin", "action": "buy", "amount": 18.0}
"#,
        None,
    );
    let vars = [
        ("input", input.display().to_string()),
        ("output", output.display().to_string()),
        ("checkpoint", checkpoint.display().to_string()),
        ("trigger", "available-now".to_string()),
    ];
    let pipeline = example("windowed_to_parquet.sql");
    run_to_end(&pipeline, &vars);
    // The watermark is 10:03:30 - 2 min = 10:01:30: only the 10:00 window is closed.
    assert_eq!(
        parquet_rows(&output),
        [
            "2026-02-14T10:00:00|2026-02-14T10:01:00|alice|370.0|2",
            "2026-02-14T10:00:00|2026-02-14T10:01:00|bob|5.0|1",
        ]
    );
    for d in ["offsets", "commits", "sources", "state"] {
        assert!(checkpoint.join(d).is_dir(), "checkpoint/{d}");
    }
    // A row for the closed 10:00 window is dropped; 10:06 closes the 10:01 and 10:03 windows,
    // whose rows came before the restart (state from the checkpoint).
    add_file(
        &input,
        "late.json",
        r#"{"event_time": "2026-02-14T09:45:00", "user": "carol", "action": "buy", "amount": 999.0}
{"event_time": "2026-02-14T10:06:00", "user": "erin", "action": "buy", "amount": 1.0}
"#,
        None,
    );
    run_to_end(&pipeline, &vars);
    assert_eq!(
        parquet_rows(&output),
        [
            "2026-02-14T10:00:00|2026-02-14T10:01:00|alice|370.0|2",
            "2026-02-14T10:00:00|2026-02-14T10:01:00|bob|5.0|1",
            "2026-02-14T10:01:00|2026-02-14T10:02:00|carol|42.5|1",
            "2026-02-14T10:01:00|2026-02-14T10:02:00|dave|0.0|1",
            "2026-02-14T10:03:00|2026-02-14T10:04:00|erin|18.0|1",
        ]
    );
}

/// The seed's "Try it on a small dataset": three runs until caught up, three files.
#[test]
fn windowed_count_matches_the_seed_run() {
    let root = tempfile::tempdir().unwrap();
    let events = root.path().join("events");
    let vars = [
        ("events", events.display().to_string()),
        (
            "checkpoint",
            root.path().join("checkpoint").display().to_string(),
        ),
    ];
    let pipeline = example("windowed_count.sql");
    let rows = |stdout: &str| {
        let mut r: Vec<Vec<String>> = (0..10)
            .filter_map(|n| batch(stdout, n))
            .flat_map(|b| table_rows(&b))
            .collect();
        r.sort();
        r
    };
    add_file(
        &events,
        "1.json",
        &ts_events(&["12:01", "12:02", "12:07"]),
        None,
    );
    let out = run_to_end(&pipeline, &vars);
    assert_eq!(
        rows(&out),
        [["2026-09-15 12:00:00", "2"], ["2026-09-15 12:05:00", "1"]],
        "{out}"
    );
    add_file(&events, "2.json", &ts_events(&["12:20", "12:03"]), None);
    let out = run_to_end(&pipeline, &vars);
    assert_eq!(
        rows(&out),
        [["2026-09-15 12:00:00", "3"], ["2026-09-15 12:20:00", "1"]],
        "{out}"
    );
    // 12:04 is behind the 12:10 watermark: its window ended at 12:05; dropped.
    add_file(&events, "3.json", &ts_events(&["12:04"]), None);
    let out = run_to_end(&pipeline, &vars);
    assert!(out.contains("Batch: "), "{out}");
    assert!(rows(&out).is_empty(), "{out}");
}

/// What a person and a machine see while a pipeline runs: a status line per batch and warnings
/// in words (stderr, not a terminal here), or each progress as a JSON line on stdout.
#[test]
fn status_lines_warnings_and_json_progress() {
    let root = tempfile::tempdir().unwrap();
    let events = root.path().join("events");
    let vars = [
        ("events", events.display().to_string()),
        (
            "checkpoint",
            root.path().join("checkpoint").display().to_string(),
        ),
    ];
    let pipeline = example("windowed_count.sql");
    add_file(&events, "1.json", &ts_events(&["12:01", "12:20"]), None);
    let out = sluice_run(&pipeline, &vars).output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines().any(|l| l.starts_with("[counts] batch 0 | in ")
            && l.contains("state 2 rows")
            && l.contains("1/1 files (100%)")),
        "a status line per batch with state and the files done:\n{err}"
    );
    assert!(!err.contains("warning:"), "{err}");
    // 12:04 arrives behind the 12:10 watermark: dropped, and said so in words.
    add_file(&events, "2.json", &ts_events(&["12:04"]), None);
    let out = sluice_run(&pipeline, &vars).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: query counts: batch 2 dropped 1 row(s) that arrived behind the watermark (2026-09-15T12:10:00.000Z)")
            && err.contains("lateRows.format"),
        "{err}"
    );
    // --progress json: one StreamingQueryProgress per line on stdout, Spark's keys.
    add_file(&events, "3.json", &ts_events(&["12:30"]), None);
    let out = sluice_run(&pipeline, &vars)
        .args(["--progress", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let progress: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("each progress line is JSON"))
        .collect();
    assert!(!progress.is_empty(), "{stdout}");
    assert_eq!(progress[0]["batchId"], 3);
    assert_eq!(progress[0]["numInputRows"], 1);
    assert!(progress[0]["stateOperators"][0]["numRowsTotal"].is_i64());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("[counts] batch"));
}

/// Trigger once: each run takes exactly the files that arrived since the last one.
#[test]
fn file_to_parquet_takes_only_new_files_on_each_run() {
    let root = tempfile::tempdir().unwrap();
    let (input, output, checkpoint) = (
        root.path().join("in"),
        root.path().join("out"),
        root.path().join("ckpt"),
    );
    let vars = [
        ("input", input.display().to_string()),
        ("output", output.display().to_string()),
        ("checkpoint", checkpoint.display().to_string()),
    ];
    let pipeline = example("file_to_parquet.sql");
    add_file(&input, "batch1.json", BATCH1, None);
    run_to_end(&pipeline, &vars);
    assert_eq!(parquet_rows(&output).len(), 3);
    for f in ["metadata", "offsets/0", "commits/0", "sources/0/0"] {
        assert!(checkpoint.join(f).exists(), "checkpoint/{f}");
    }
    run_to_end(&pipeline, &vars);
    assert_eq!(parquet_rows(&output).len(), 3, "no new file, no new row");
    assert!(!checkpoint.join("offsets/1").exists());
    for i in 0..3 {
        add_file(
            &input,
            &format!("more{i}.json"),
            &format!(
                "{{\"event_time\": \"2026-02-14T11:00:0{i}\", \"user\": \"u{i}\", \"action\": \"buy\", \"amount\": {i}.5}}\n"
            ),
None,
        );
    }
    run_to_end(&pipeline, &vars);
    let rows = parquet_rows(&output);
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(
        rows.contains(&"2026-02-14T11:00:02|u2|buy|2.5".to_string()),
        "{rows:?}"
    );
    assert!(checkpoint.join("offsets/1").exists() && !checkpoint.join("offsets/2").exists());
}

/// The old flags still run the built-in pipelines.
#[test]
fn built_in_pipelines_still_run_with_flags() {
    let root = tempfile::tempdir().unwrap();
    add_file(
        &root.path().join("in"),
        "1.json",
        "{\"id\": 1, \"ts\": \"2026-09-15T12:00:00Z\", \"user\": \"a\"}\n",
        None,
    );
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--pipeline", "file-to-parquet", "--available-now"])
        .arg("--input")
        .arg(root.path().join("in"))
        .arg("--output")
        .arg(root.path().join("out"))
        .arg("--checkpoint")
        .arg(root.path().join("ckpt"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(parquet_rows(&root.path().join("out")).len(), 1);
}

// ---- bad pipeline files ----

fn run_bad(text: &str) -> (Output, String) {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("bad.sql");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(root.path())
        .args(["run", "bad.sql"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "stderr:\n{stderr}");
    (out, stderr)
}

const SOURCE: &str = "CREATE TABLE events (ts TIMESTAMP, user STRING, amount DOUBLE)
  WITH (connector = 'filesystem', path = '.', format = 'json');
";

#[test]
fn a_syntax_error_names_its_line_and_column() {
    let (_, stderr) = run_bad(&format!(
        "{SOURCE}CREATE SINK big WITH (connector = 'console') AS
SELECT user, amount
  FROM events WHERE amount > > 10;
"
    ));
    assert!(
        stderr.contains("[PIPELINE_SYNTAX_ERROR] bad.sql:5:30: syntax error in the query: Expected: an expression, found: >"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            " 5 |   FROM events WHERE amount > > 10;\n   |                              ^"
        ),
        "{stderr}"
    );
}

#[test]
fn an_unknown_connector_is_named_with_the_choices() {
    let (_, stderr) = run_bad(&format!(
        "{SOURCE}CREATE SINK big WITH (connector = 'parquet', path = 'out') AS SELECT * FROM events;"
    ));
    assert!(
        stderr.contains("[PIPELINE_UNKNOWN_CONNECTOR] bad.sql:3:35: unknown connector 'parquet': parquet is a format: write connector = 'filesystem', format = 'parquet'"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sinks are filesystem, kafka, delta, console, memory or noop"),
        "{stderr}"
    );
}

#[test]
fn a_query_reading_a_missing_table_points_at_it() {
    let (_, stderr) = run_bad(&format!(
        "{SOURCE}
CREATE SINK joined WITH (connector = 'console') AS
SELECT e.user, c.page
FROM events e JOIN clickz c ON e.user = c.user;
"
    ));
    assert!(
        stderr.contains("[PIPELINE_TABLE_NOT_FOUND] bad.sql:6:20: unknown table clickz"),
        "{stderr}"
    );
    assert!(stderr.contains("declared above: events"), "{stderr}");
}

#[test]
fn a_missing_variable_says_how_to_set_it() {
    let (_, stderr) = run_bad(
        "CREATE TABLE events (ts TIMESTAMP) WITH (connector = 'filesystem', path = '${in_dir}', format = 'json');
CREATE SINK s WITH (connector = 'console') AS SELECT * FROM events;",
    );
    assert!(
        stderr.contains("bad.sql:1:75: the variable in_dir is not set: pass --set in_dir=VALUE"),
        "{stderr}"
    );
}

pub(crate) mod kafka_helpers {
    use super::*;
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;

    pub fn bootstrap() -> String {
        let b = std::env::var("SLUICE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into());
        let addr = b.split(',').next().unwrap_or("127.0.0.1:9092").to_string();
        if std::net::TcpStream::connect_timeout(
            &addr.parse().expect("a host:port address"),
            Duration::from_secs(2),
        )
        .is_err()
        {
            panic!("no Kafka broker answers at {b}: run `scripts/kafka-broker start` first (the README's test command does)");
        }
        b
    }

    pub fn topic(name: &str) -> String {
        topic_with(name, 1)
    }

    /// A new topic of `partitions` partitions.
    pub fn topic_with(name: &str, partitions: i32) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let t = format!("{name}-{}-{nanos}", std::process::id());
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .create()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for r in rt
            .block_on(admin.create_topics(
                &[NewTopic::new(&t, partitions, TopicReplication::Fixed(1))],
                &AdminOptions::new(),
            ))
            .unwrap()
        {
            r.unwrap();
        }
        t
    }

    pub fn read_all(topic: &str, want: usize) -> Vec<(String, String)> {
        read_until(topic, |out| out.len() >= want)
    }

    /// Reads the topic from the beginning until `done` says so (60 s at most).
    pub fn read_until(
        topic: &str,
        done: impl Fn(&[(String, String)]) -> bool,
    ) -> Vec<(String, String)> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("group.id", format!("reader-{topic}"))
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
            .unwrap();
        c.assign(&tpl).unwrap();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(&out) && Instant::now() < deadline {
            if let Some(m) = c.poll(Duration::from_millis(200)) {
                let m = m.unwrap();
                let s =
                    |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
                out.push((s(m.key()), s(m.payload())));
            }
        }
        out
    }
}

// ---- Kafka ----

mod kafka {
    use super::kafka_helpers::*;
    use super::*;
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

    /// The seed's Kafka example: JSON events parsed with a schema, written back as JSON.
    #[test]
    fn kafka_enrich_pipeline_parses_events_into_another_topic() {
        let (input, output) = (topic("events"), topic("events-enriched"));
        let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .create()
            .unwrap();
        let users = ["alice", "bob", "carol"];
        for (i, user) in users.iter().enumerate() {
            let v = format!(
                "{{\"event_time\": \"2026-02-14T10:00:0{i}\", \"user\": \"{user}\", \"action\": \"buy\", \"amount\": {}.5}}",
                i * 100
            );
            let k = format!("k{i}");
            p.send(BaseRecord::to(&input).key(&k).payload(&v))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        p.flush(Duration::from_secs(30)).unwrap();
        let root = tempfile::tempdir().unwrap();
        let run = Running::start(
            &example("kafka_enrich.sql"),
            &[
                ("bootstrap", bootstrap()),
                ("input_topic", input.clone()),
                ("output_topic", output.clone()),
                ("starting_offsets", "earliest".into()),
                ("checkpoint", root.path().join("ckpt").display().to_string()),
            ],
        );
        let records = read_all(&output, users.len());
        run.interrupt();
        assert_eq!(records.len(), users.len(), "{records:?}");
        let mut records = records;
        records.sort();
        for (i, (key, value)) in records.iter().enumerate() {
            assert_eq!(key, &format!("k{i}"));
            let v: serde_json::Value = serde_json::from_str(value).unwrap();
            assert_eq!(v["user"], users[i], "{value}");
            assert_eq!(v["action"], "buy", "{value}");
            assert_eq!(v["amount"], i as f64 * 100.0 + 0.5, "{value}");
            // Spark's CAST(timestamp AS STRING): a space, no `T`.
            assert_eq!(v["event_time"], format!("2026-02-14 10:00:0{i}"), "{value}");
            assert!(v["timestamp"].is_string(), "{value}");
        }
    }
}

mod continuous_kafka {
    use super::kafka_helpers::*;
    use super::*;
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

    const PIPELINE: &str = "CREATE TABLE events WITH (connector = 'kafka', \
        'kafka.bootstrap.servers' = '${bootstrap}', subscribe = '${input}', \
        'startingOffsets' = 'earliest');\n\
        CREATE SINK copy WITH (connector = 'kafka', 'kafka.bootstrap.servers' = '${bootstrap}', \
        topic = '${output}', 'trigger' = 'continuous 1 second', checkpoint = '${checkpoint}') AS \
        SELECT CAST(key AS STRING) AS key, CAST(value AS STRING) AS value FROM events;\n";

    fn produce(topic: &str, range: std::ops::Range<u32>) {
        let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .create()
            .unwrap();
        for i in range {
            let k = format!("k{i:05}");
            p.send(BaseRecord::to(topic).key(&k).payload(&k))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        p.flush(Duration::from_secs(30)).unwrap();
    }

    /// `sluice run` with a continuous trigger, SIGKILLed while it copies records and started
    /// again on the same checkpoint: every record reaches the output at least once
    /// (continuous processing is at-least-once: duplicates are allowed and counted).
    #[test]
    fn a_sigkilled_continuous_pipeline_loses_no_record() {
        let (input, output) = (topic("cont-in"), topic("cont-out"));
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("copy.sql");
        std::fs::write(&file, PIPELINE).unwrap();
        let vars = [
            ("bootstrap", bootstrap()),
            ("input", input.clone()),
            ("output", output.clone()),
            ("checkpoint", root.path().join("ckpt").display().to_string()),
        ];
        produce(&input, 0..300);
        let mut first = sluice_run(&file, &vars)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill it once part of the input is through (the first epoch may not be committed).
        let seen = read_all(&output, 100);
        assert!(seen.len() >= 100, "the copy started: {}", seen.len());
        produce(&input, 300..400);
        first.kill().unwrap(); // SIGKILL
        first.wait().unwrap();
        produce(&input, 400..500);
        let second = Running::start(&file, &vars);
        let all = read_until(&output, |out| {
            out.iter()
                .map(|(k, _)| k)
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                >= 500
        });
        second.interrupt();
        let mut counts = std::collections::BTreeMap::new();
        for (k, v) in &all {
            assert_eq!(k, v);
            *counts.entry(k.clone()).or_insert(0u32) += 1;
        }
        let missing: Vec<String> = (0..500)
            .map(|i| format!("k{i:05}"))
            .filter(|k| !counts.contains_key(k))
            .collect();
        assert!(missing.is_empty(), "records lost: {missing:?}");
        let duplicates: u32 = counts.values().map(|n| n - 1).sum();
        eprintln!(
            "continuous kill and restart: 500 records in, {} out, {duplicates} duplicate(s)",
            all.len()
        );
    }
}

/// `--ui ADDR`: the dashboard of a running pipeline answers with its progress and metrics
/// (the page itself is drawn in headless Chromium by the tests of `src/ui/tests/browser.rs`).
#[test]
fn a_running_pipeline_serves_its_dashboard() {
    use std::io::{BufRead, BufReader, Write};
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("rate.sql");
    std::fs::write(
        &file,
        "CREATE TABLE ticks (timestamp TIMESTAMP, value BIGINT) \
         WITH (connector = 'rate-micro-batch', rowsPerBatch = '10');\n\
         CREATE SINK out WITH (connector = 'noop', 'trigger' = 'processing-time 100 milliseconds', \
         checkpoint = '${checkpoint}') AS SELECT value FROM ticks;\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", &file.display().to_string(), "--progress", "none"])
        .args(["--ui", "127.0.0.1:0"])
        .arg("--set")
        .arg(format!("checkpoint={}", root.path().join("ckpt").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("sluice ended before announcing its dashboard")
            .unwrap();
        if let Some(rest) = line.split("dashboard at ").nth(1) {
            break rest.trim().to_string();
        }
    };
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let get = |path: &str| -> String {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let metrics = loop {
        let m = get("/metrics");
        if m.contains("sluice_batch_id{") || Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(
        metrics.contains("# TYPE sluice_processed_rows_per_second gauge")
            && metrics.contains("query=\"out\""),
        "{metrics}"
    );
    assert!(get_ok(&metrics), "{metrics}");
    assert!(status.success(), "{status}");
}

fn get_ok(response: &str) -> bool {
    response.starts_with("HTTP/1.1 200")
}

/// Issue 18 part 6: a restart with another `spark.sql.shuffle.partitions` keeps the
/// checkpoint's (state is partitioned by it), and says so instead of ignoring the new value
/// silently.
#[test]
fn a_changed_shuffle_partitions_is_kept_from_the_checkpoint_with_a_warning() {
    let root = tempfile::tempdir().unwrap();
    let events = root.path().join("events");
    let vars = [
        ("events", events.display().to_string()),
        (
            "checkpoint",
            root.path().join("checkpoint").display().to_string(),
        ),
    ];
    add_file(&events, "1.json", &ts_events(&["12:01", "12:20"]), None);
    let out = sluice_run(&example("windowed_count.sql"), &vars)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("shuffle.partitions"));
    let text = std::fs::read_to_string(example("windowed_count.sql"))
        .unwrap()
        .replace(
            "SET 'spark.sql.shuffle.partitions' = '2';",
            "SET 'spark.sql.shuffle.partitions' = '5';",
        );
    let changed = root.path().join("changed.sql");
    std::fs::write(&changed, text).unwrap();
    add_file(&events, "2.json", &ts_events(&["12:30"]), None);
    let out = sluice_run(&changed, &vars).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("spark.sql.shuffle.partitions is 2 in the checkpoint")
            && err.contains("5 in the session"),
        "{err}"
    );
    assert!(
        !root.path().join("checkpoint/state/0/4").exists(),
        "still 2 partitions"
    );
}

/// Issue 18 part 10: `${VAR}`s whose names look secret, from the environment, never show in
/// `--progress json`, the log lines (`RUST_LOG=debug`), `sluice checkpoint describe` (text and
/// JSON) or an error, nor in `query.json`.
#[test]
fn secret_variables_never_show_in_progress_logs_describe_or_errors() {
    let root = tempfile::tempdir().unwrap();
    let token = "cli-dir-token-71";
    let s3_secret = "cli-s3-secret-72";
    let kafka_pw = "cli-kafka-pw-73";
    let events = root.path().join("events");
    add_file(&events.join(token), "1.json", &ts_events(&["12:01"]), None);
    let ck = root.path().join("ck");
    let file = root.path().join("secrets.sql");
    std::fs::write(
        &file,
        "SET 'spark.hadoop.fs.s3a.secret.key' = '${SLUICE_TEST_S3_SECRET}';
CREATE TABLE events (ts TIMESTAMP, user STRING)
  WITH (connector = 'filesystem', path = '${events}/${SLUICE_TEST_DIR_TOKEN}', format = 'json');
CREATE SINK out WITH (connector = 'noop', trigger = 'available-now', checkpoint = '${ck}') AS
SELECT user FROM events;",
    )
    .unwrap();
    let out = sluice_run(
        &file,
        &[
            ("events", events.display().to_string()),
            ("ck", ck.display().to_string()),
        ],
    )
    .env("SLUICE_TEST_DIR_TOKEN", token)
    .env("SLUICE_TEST_S3_SECRET", s3_secret)
    .env("RUST_LOG", "debug")
    .args(["--progress", "json"])
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let progress = stdout.lines().find(|l| l.starts_with('{')).unwrap_or("");
    assert!(
        progress.contains("FileStreamSource[") && progress.contains("*********(redacted)"),
        "the source's description, redacted: {stdout}"
    );
    let describe = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.args(["checkpoint", "describe"]).arg(&ck);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shape = std::fs::read_to_string(ck.join("sluice").join("query.json")).unwrap();
    for (what, text) in [
        ("stdout", stdout.clone()),
        ("stderr", stderr.clone()),
        ("describe", describe(false)),
        ("describe --json", describe(true)),
        ("query.json", shape),
    ] {
        assert!(!text.contains(token), "{what}: {text}");
        assert!(!text.contains(s3_secret), "{what}: {text}");
    }

    // An error: a JAAS text that starts with the password is refused, never shown.
    std::fs::write(
        &file,
        "CREATE TABLE k WITH (connector = 'kafka', 'kafka.bootstrap.servers' = '127.0.0.1:1',
  subscribe = 't', 'kafka.security.protocol' = 'SASL_SSL', 'kafka.sasl.mechanism' = 'PLAIN',
  'kafka.sasl.jaas.config' = '${SLUICE_TEST_KAFKA_JAAS}');
CREATE SINK out WITH (connector = 'noop', trigger = 'available-now') AS SELECT value FROM k;",
    )
    .unwrap();
    let out = sluice_run(&file, &[])
        .env(
            "SLUICE_TEST_KAFKA_JAAS",
            format!(r#"password="{kafka_pw}" username="u";"#),
        )
        .env("RUST_LOG", "debug")
        .output()
        .unwrap();
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("kafka.sasl.jaas.config"), "{all}");
    assert!(!all.contains(kafka_pw), "{all}");
}
