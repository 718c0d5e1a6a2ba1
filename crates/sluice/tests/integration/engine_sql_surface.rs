//! Issue 14's acceptance path, end to end: a stream of camelCase JSON with nested values (a
//! struct holding an array, a map), an array exploded, then a windowed aggregation producing
//! nested outputs (an array, a struct) — from the Rust API (reader, watermark and query, with a
//! restart on the same checkpoint) and from a pipeline file — written as parquet that pyarrow
//! reads back with the nested types intact. Expected rows were checked on PySpark 3.5.7 with the
//! same input and query.

use std::path::Path;
use std::process::Command;

use sluice::{OutputMode, Trigger};

use crate::support::{add_file, dirs, session};

const SCHEMA: &str = "eventId STRING, eventTime TIMESTAMP, \
    device STRUCT<deviceId: STRING, tags: ARRAY<STRING>>, readings MAP<STRING, DOUBLE>";

/// Names written in other cases than the schema's (`EventId`, `eventtime`, `DEVICE.Tags`), as
/// Spark resolves them.
const QUERY: &str = "SELECT window.start AS windowStart, tag, count(*) AS events, \
    array_sort(collect_list(EventId)) AS eventIds, max(readings['temp']) AS maxTemp, \
    named_struct('first', min(eventtime), 'last', max(eventTime)) AS span \
    FROM (SELECT eventTime, eventId, readings, explode(DEVICE.Tags) AS tag FROM Events) \
    GROUP BY window(eventtime, '10 minutes'), tag";

fn first_file() -> String {
    [
        r#"{"eventId": "e1", "eventTime": "2026-09-15T12:01:00Z", "device": {"deviceId": "d1", "tags": ["red", "blue"]}, "readings": {"temp": 20.5, "hum": 40.0}}"#,
        r#"{"eventId": "e2", "eventTime": "2026-09-15T12:03:00Z", "device": {"deviceId": "d2", "tags": ["red"]}, "readings": {"temp": 22.0}}"#,
        r#"{"eventId": "e3", "eventTime": "2026-09-15T12:07:00Z", "device": {"deviceId": "d1", "tags": ["blue"]}, "readings": {"temp": 19.0}}"#,
    ]
    .join("\n")
        + "\n"
}

/// Moves the watermark to 12:15: the 12:00 window closes (append mode emits it).
fn second_file() -> String {
    r#"{"eventId": "e4", "eventTime": "2026-09-15T12:25:00Z", "device": {"deviceId": "d3", "tags": ["green"]}, "readings": {"temp": 30.0}}"#
        .to_string()
        + "\n"
}

/// The parquet output read by pyarrow: its schema and its rows sorted, one per line.
fn read_with_pyarrow(dir: &Path) -> (String, Vec<String>) {
    let script = r#"
import sys, glob, os, pyarrow.parquet as pq, pyarrow as pa
files = sorted(f for f in glob.glob(os.path.join(sys.argv[1], "*.parquet")))
t = pa.concat_tables([pq.read_table(f) for f in files])
print(t.schema)
print("---")
for r in sorted(t.to_pylist(), key=lambda r: r["tag"]):
    print(r["windowStart"].isoformat(), r["tag"], r["events"], r["eventIds"], r["maxTemp"],
          r["span"]["first"].isoformat(), r["span"]["last"].isoformat())
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(dir)
        .output()
        .expect("python3 runs (scripts/test installs pyarrow)");
    assert!(
        out.status.success(),
        "pyarrow could not read {}: {} (scripts/test installs pyarrow: pip install pyarrow)",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (schema, rows) = text.split_once("---\n").unwrap();
    (
        schema.to_string(),
        rows.lines().map(str::to_string).collect(),
    )
}

fn check_output(dir: &Path) {
    let (schema, rows) = read_with_pyarrow(dir);
    for want in [
        "windowStart: timestamp[us",
        "tag: string",
        "events: int64",
        "eventIds: list<",
        "maxTemp: double",
        "span: struct<first: timestamp[us",
    ] {
        assert!(schema.contains(want), "{want} not in {schema}");
    }
    assert_eq!(
        rows,
        [
            "2026-09-15T12:00:00 blue 2 ['e1', 'e3'] 20.5 2026-09-15T12:01:00 2026-09-15T12:07:00",
            "2026-09-15T12:00:00 red 2 ['e1', 'e2'] 22.0 2026-09-15T12:01:00 2026-09-15T12:03:00",
        ]
    );
}

#[test]
fn camel_case_nested_json_exploded_and_windowed_to_parquet_from_the_rust_api_with_a_restart() {
    let d = dirs();
    let run = || {
        let s = session();
        s.read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .with_watermark("EVENTTIME", "10 minutes")
            .unwrap()
            .create_or_replace_temp_view("events")
            .unwrap();
        let q = s
            .sql(QUERY)
            .unwrap()
            .write_stream()
            .format("parquet")
            .output_mode(OutputMode::Append)
            .option("path", d.output.display())
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        q.await_termination().unwrap();
        q.recent_progress()
    };
    add_file(&d.input, "1.json", &first_file(), 1);
    let first = run();
    assert_eq!(first[0].num_input_rows, 3);
    // A new query on the same checkpoint: only the new file is read, the state comes back.
    add_file(&d.input, "2.json", &second_file(), 2);
    let second = run();
    assert_eq!(second[0].batch_id, first.last().unwrap().batch_id + 1);
    assert_eq!(second[0].num_input_rows, 1);
    check_output(&d.output);
}

#[test]
fn the_same_job_as_a_pipeline_file() {
    let d = dirs();
    let text = format!(
        "CREATE TABLE Events (
  eventId STRING,
  eventTime TIMESTAMP,
  device STRUCT<deviceId: STRING, tags: ARRAY<STRING>>,
  readings MAP<STRING, DOUBLE>,
  WATERMARK FOR EventTime AS EventTime - INTERVAL '10' MINUTE
) WITH (connector = 'filesystem', path = '${{input}}', format = 'json');
CREATE SINK windows WITH (
  connector = 'filesystem', format = 'parquet', path = '${{output}}',
  checkpoint = '${{checkpoint}}', 'outputMode' = 'append', trigger = 'available-now'
) AS {QUERY};"
    );
    let run = || {
        let mut p = sluice::Pipeline::parse(&text, "windows.sql").unwrap_or_else(|e| panic!("{e}"));
        p.set_variable("input", d.input.display().to_string())
            .set_variable("output", d.output.display().to_string())
            .set_variable("checkpoint", d.checkpoint.display().to_string());
        let s = session();
        let queries = p.start(&s).unwrap_or_else(|e| panic!("{e}"));
        p.await_termination(&queries, || false)
            .unwrap_or_else(|e| panic!("{e}"));
    };
    add_file(&d.input, "1.json", &first_file(), 1);
    run();
    add_file(&d.input, "2.json", &second_file(), 2);
    run();
    check_output(&d.output);
}
