//! Generators in streaming queries: words exploded from lines (`split` + `explode`, `LATERAL
//! VIEW`), then a word count that restarts, windowed and session-window counts with a watermark,
//! deduplication, a stream-static join; the DataFrame API's generators; continuous mode refusing
//! them. Every expectation (rows per batch, progress figures, errors) was recorded on Spark 3.5.7
//! with the same files, `maxFilesPerTrigger=1` and `Trigger.AvailableNow`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, Int32Array, Int32Builder, ListBuilder, RecordBatch};
use arrow::datatypes::{Field, Schema};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use sluice::{
    col, explode, multi_alias, posexplode, BatchData, OutputMode, Session, StreamFrame, Trigger,
};

use crate::support::{add_file, dirs, session};

type Recorded = Arc<Mutex<Vec<(u64, Vec<String>)>>>;

/// A batch's rows, cells joined by `|` (nulls `null`, timestamps as Spark prints them).
fn rows_of(data: &BatchData, sort: bool) -> Vec<String> {
    let opts = FormatOptions::default()
        .with_null("null")
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S"));
    let mut rows = Vec::new();
    for b in data.batches() {
        let cols: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            let cells: Vec<String> = cols.iter().map(|c| c.value(r).to_string()).collect();
            rows.push(cells.join("|"));
        }
    }
    if sort {
        rows.sort();
    }
    rows
}

/// Runs `frame` to the end of its input (`AvailableNow`), recording every batch; returns each
/// batch's (id, input rows, rows dropped by the watermark per stateful operator).
fn run(
    frame: &StreamFrame,
    mode: OutputMode,
    checkpoint: &Path,
    out: &Recorded,
    sort: bool,
) -> Vec<(i64, i64, Vec<i64>)> {
    let sink = out.clone();
    let q = frame
        .write_stream()
        .output_mode(mode)
        .option("checkpointLocation", checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .foreach_batch(move |data, id| {
            sink.lock().unwrap().push((id, rows_of(data, sort)));
            Ok(())
        })
        .start()
        .unwrap();
    q.await_termination().unwrap();
    q.recent_progress()
        .iter()
        .map(|p| {
            (
                p.batch_id,
                p.num_input_rows,
                p.state_operators
                    .iter()
                    .map(|s| s.num_rows_dropped_by_watermark)
                    .collect(),
            )
        })
        .collect()
}

fn recorded(out: &Recorded) -> Vec<(u64, Vec<String>)> {
    out.lock().unwrap().clone()
}

fn batches(expected: &[(u64, &[&str])]) -> Vec<(u64, Vec<String>)> {
    expected
        .iter()
        .map(|(id, rows)| (*id, rows.iter().map(|r| r.to_string()).collect()))
        .collect()
}

fn text_lines(s: &Session, dir: &Path) -> StreamFrame {
    s.read_stream()
        .format("text")
        .option("maxFilesPerTrigger", 1)
        .load(dir.display().to_string())
        .unwrap()
}

/// `{"ts": "2026-09-15T00:00:<ss>", "line": ..}` lines.
fn lines_at(rows: &[(u32, &str)]) -> String {
    rows.iter()
        .map(|(t, l)| format!("{{\"ts\": \"2026-09-15T00:00:{t:02}\", \"line\": \"{l}\"}}\n"))
        .collect()
}

fn timed_lines(s: &Session, dir: &Path) -> StreamFrame {
    s.read_stream()
        .format("json")
        .schema("ts TIMESTAMP, line STRING")
        .unwrap()
        .option("maxFilesPerTrigger", 1)
        .load(dir.display().to_string())
        .unwrap()
        .with_watermark("ts", "10 seconds")
        .unwrap()
}

#[test]
fn a_word_count_over_exploded_lines_restarts_where_it_stopped() {
    let d = dirs();
    add_file(&d.input, "1.txt", "a b a\nc\n", 1);
    add_file(&d.input, "2.txt", "b  c\n", 2);
    let out: Recorded = Arc::default();
    let query = |s: &Session| {
        text_lines(s, &d.input)
            .create_or_replace_temp_view("lines")
            .unwrap();
        s.sql(
            "SELECT word, count(*) AS count FROM lines \
             LATERAL VIEW explode(split(value, ' ')) t AS word GROUP BY word",
        )
        .unwrap()
    };
    let p1 = run(
        &query(&session()),
        OutputMode::Complete,
        &d.checkpoint,
        &out,
        true,
    );
    add_file(&d.input, "3.txt", "d a\n", 3);
    let p2 = run(
        &query(&session()),
        OutputMode::Complete,
        &d.checkpoint,
        &out,
        true,
    );
    assert_eq!(
        recorded(&out),
        batches(&[
            (0, &["a|2", "b|1", "c|1"]),
            // "b  c" has an empty word between its two spaces
            (1, &["a|2", "b|2", "c|2", "|1"]),
            (2, &["a|3", "b|2", "c|2", "d|1", "|1"]),
        ])
    );
    let inputs: Vec<(i64, i64)> = p1.iter().chain(&p2).map(|p| (p.0, p.1)).collect();
    assert_eq!(inputs, [(0, 2), (1, 1), (2, 1)]);
}

const WINDOWED_FILES: [(&str, &[(u32, &str)]); 4] = [
    ("1.json", &[(1, "a b"), (5, "a")]),
    ("2.json", &[(26, "c")]),
    ("3.json", &[(27, "d")]),
    ("4.json", &[(4, "a z"), (28, "c")]),
];

#[test]
fn exploded_words_in_event_time_windows_drop_late_words() {
    let d = dirs();
    for (i, (name, rows)) in WINDOWED_FILES.iter().enumerate() {
        add_file(&d.input, name, &lines_at(rows), i as u64 + 1);
    }
    let s = session();
    timed_lines(&s, &d.input)
        .create_or_replace_temp_view("events")
        .unwrap();
    let frame = s
        .sql(
            "SELECT window.start AS start, word, count(*) AS count FROM events \
             LATERAL VIEW explode(split(line, ' ')) t AS word \
             GROUP BY window(ts, '10 seconds'), word",
        )
        .unwrap();
    let out: Recorded = Arc::default();
    let progress = run(&frame, OutputMode::Append, &d.checkpoint, &out, true);
    let emitted = ["2026-09-15 00:00:00|a|2", "2026-09-15 00:00:00|b|1"];
    assert_eq!(
        recorded(&out),
        batches(&[(0, &[]), (1, &[]), (2, &emitted), (3, &[]), (4, &[])])
    );
    // "a z" at 00:00:04 comes after the watermark passed 00:00:10: both words are dropped
    assert_eq!(
        progress,
        [
            (0, 2, vec![0]),
            (1, 1, vec![0]),
            (2, 1, vec![0]),
            (3, 2, vec![2]),
            (4, 0, vec![0])
        ]
    );
}

#[test]
fn exploded_words_deduplicated_then_counted_in_windows_with_the_dataframe_api() {
    let d = dirs();
    for (i, (name, rows)) in WINDOWED_FILES.iter().enumerate() {
        add_file(&d.input, name, &lines_at(rows), i as u64 + 1);
    }
    let s = session();
    let frame = timed_lines(&s, &d.input)
        .select_sql(["ts", "explode(split(line, ' ')) AS word"])
        .unwrap()
        .drop_duplicates(["word", "ts"])
        .unwrap()
        .group_by([sluice::window(col("ts"), "10 seconds"), col("word")])
        .count()
        .unwrap()
        .select_sql(["window.start AS start", "word", "count"])
        .unwrap();
    let out: Recorded = Arc::default();
    let progress = run(&frame, OutputMode::Append, &d.checkpoint, &out, true);
    let emitted = ["2026-09-15 00:00:00|a|2", "2026-09-15 00:00:00|b|1"];
    assert_eq!(
        recorded(&out),
        batches(&[(0, &[]), (1, &[]), (2, &emitted), (3, &[]), (4, &[])])
    );
    // Spark drops the two late words in the deduplication (it lists the aggregation first)
    let dropped: Vec<i64> = progress.iter().map(|p| p.2.iter().sum()).collect();
    assert_eq!(dropped, [0, 0, 0, 2, 0]);
}

#[test]
fn exploded_words_in_session_windows() {
    let d = dirs();
    add_file(&d.input, "1.json", &lines_at(&[(1, "a b"), (3, "a")]), 1);
    add_file(&d.input, "2.json", &lines_at(&[(20, "a")]), 2);
    add_file(&d.input, "3.json", &lines_at(&[(40, "b")]), 3);
    let s = session();
    timed_lines(&s, &d.input)
        .create_or_replace_temp_view("events")
        .unwrap();
    let frame = s
        .sql(
            "SELECT session_window.start AS start, session_window.end AS end, word, \
             count(*) AS count \
             FROM (SELECT ts, explode(split(line, ' ')) AS word FROM events) \
             GROUP BY session_window(ts, '5 seconds'), word",
        )
        .unwrap();
    let out: Recorded = Arc::default();
    run(&frame, OutputMode::Append, &d.checkpoint, &out, true);
    assert_eq!(
        recorded(&out),
        batches(&[
            (0, &[]),
            (1, &[]),
            (
                2,
                &[
                    "2026-09-15 00:00:01|2026-09-15 00:00:06|b|1",
                    "2026-09-15 00:00:01|2026-09-15 00:00:08|a|2",
                ]
            ),
            (3, &["2026-09-15 00:00:20|2026-09-15 00:00:25|a|1"]),
        ])
    );
}

#[test]
fn exploded_words_deduplicated_with_the_dataframe_api() {
    let d = dirs();
    add_file(&d.input, "1.txt", "a b a\n", 1);
    add_file(&d.input, "2.txt", "b c\n", 2);
    let s = session();
    let words = text_lines(&s, &d.input)
        .select_sql(["explode(split(value, ' ')) AS word"])
        .unwrap();
    assert_eq!(words.schema().field(0).name(), "word");
    let frame = words.drop_duplicates(["word"]).unwrap();
    let out: Recorded = Arc::default();
    run(&frame, OutputMode::Append, &d.checkpoint, &out, true);
    assert_eq!(recorded(&out), batches(&[(0, &["a", "b"]), (1, &["c"])]));
}

#[test]
fn exploded_words_joined_with_a_static_table() {
    let d = dirs();
    add_file(&d.input, "1.txt", "a b a\n", 1);
    add_file(&d.input, "2.txt", "b c\n", 2);
    let s = session();
    s.sql("SELECT * FROM (VALUES ('a', 'alpha'), ('c', 'gamma')) AS v(word, meaning)")
        .unwrap()
        .create_or_replace_temp_view("dict")
        .unwrap();
    text_lines(&s, &d.input)
        .create_or_replace_temp_view("lines")
        .unwrap();
    let frame = s
        .sql(
            "SELECT w.word, d.meaning \
             FROM (SELECT explode(split(value, ' ')) AS word FROM lines) w \
             JOIN dict d ON w.word = d.word",
        )
        .unwrap();
    let out: Recorded = Arc::default();
    run(&frame, OutputMode::Append, &d.checkpoint, &out, true);
    assert_eq!(
        recorded(&out),
        batches(&[(0, &["a|alpha", "a|alpha"]), (1, &["c|gamma"])])
    );
}

#[test]
fn lateral_view_outer_posexplode_keeps_the_order_of_elements() {
    let d = dirs();
    add_file(&d.input, "1.txt", "a,b\n\n", 1);
    let s = session();
    text_lines(&s, &d.input)
        .create_or_replace_temp_view("lines")
        .unwrap();
    let frame = s
        .sql("SELECT value, p, w FROM lines LATERAL VIEW OUTER posexplode(split(value, ',')) x AS p, w")
        .unwrap();
    let out: Recorded = Arc::default();
    run(&frame, OutputMode::Append, &d.checkpoint, &out, false);
    // an empty line splits into one empty string, so OUTER adds no null row
    assert_eq!(
        recorded(&out),
        batches(&[(0, &["a,b|0|a", "a,b|1|b", "|0|"])])
    );
}

#[test]
fn continuous_processing_refuses_generators() {
    let tmp = tempfile::tempdir().unwrap();
    let s = session();
    let err = s
        .read_stream()
        .format("rate")
        .load_source()
        .unwrap()
        .select_sql(["explode(array(value, value)) AS v"])
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("cont")
        .option("checkpointLocation", tmp.path().join("cp").display())
        .trigger(Trigger::Continuous(std::time::Duration::from_millis(300)))
        .start()
        .unwrap_err();
    assert_eq!(err.class(), "UNSUPPORTED_STREAMING_OPERATION", "{err}");
    assert!(
        err.message()
            .contains("Continuous processing does not support Generate operations"),
        "{err}"
    );
}

/// `t(id, arr)` = (1, [1, 2]), (2, []), (3, null), (4, [3, null]) as a batch frame.
fn arrays(s: &Session) -> StreamFrame {
    let mut arr = ListBuilder::new(Int32Builder::new());
    arr.values().append_slice(&[1, 2]);
    arr.append(true);
    arr.append(true);
    arr.append(false);
    arr.values().append_value(3);
    arr.values().append_null();
    arr.append(true);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(vec![1, 2, 3, 4])),
        Arc::new(arr.finish()),
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", columns[0].data_type().clone(), true),
        Field::new("arr", columns[1].data_type().clone(), true),
    ]));
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    s.register_batches("t", schema, vec![batch]).unwrap();
    s.table("t").unwrap()
}

fn collected(frame: &StreamFrame) -> (Vec<String>, Vec<String>) {
    let names = frame
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let batches = frame.collect().unwrap();
    let data = BatchData {
        schema: frame.schema(),
        partitions: vec![batches],
    };
    (names, rows_of(&data, false))
}

#[test]
fn the_dataframe_api_generates_with_sparks_names() {
    let s = session();
    let t = arrays(&s);
    let (names, rows) = collected(
        &t.select_exprs(vec![col("id"), explode(col("arr"))])
            .unwrap(),
    );
    assert_eq!(names, ["id", "col"]);
    assert_eq!(rows, ["1|1", "1|2", "4|3", "4|null"]);
    let (names, rows) = collected(
        &t.select_exprs(vec![
            col("id"),
            multi_alias(posexplode(col("arr")), ["p", "c"]),
        ])
        .unwrap(),
    );
    assert_eq!(names, ["id", "p", "c"]);
    assert_eq!(rows, ["1|0|1", "1|1|2", "4|0|3", "4|1|null"]);
    let (names, rows) = collected(
        &t.with_column("w", explode(col("arr")))
            .unwrap()
            .select(["id", "w"])
            .unwrap(),
    );
    assert_eq!(names, ["id", "w"]);
    assert_eq!(rows, ["1|1", "1|2", "4|3", "4|null"]);
    let err = t.with_column("w", posexplode(col("arr"))).unwrap_err();
    assert!(err.is("UDTF_ALIAS_NUMBER_MISMATCH"), "{err}");
    let err = t
        .filter(explode(col("arr")).gt(sluice::lit(1)))
        .unwrap_err();
    assert!(err.is("UNSUPPORTED_GENERATOR.OUTSIDE_SELECT"), "{err}");
}

#[test]
fn a_pipeline_file_counts_exploded_words_in_windows() {
    let d = dirs();
    for (i, (name, rows)) in WINDOWED_FILES.iter().enumerate() {
        add_file(&d.input, name, &lines_at(rows), i as u64 + 1);
    }
    let mut p = sluice::Pipeline::parse(
        "CREATE TABLE events (ts TIMESTAMP, line STRING,
  WATERMARK FOR ts AS ts - INTERVAL '10' SECOND)
WITH (connector = 'filesystem', path = '${input}', format = 'json', 'maxFilesPerTrigger' = '1');
CREATE SINK counts WITH (connector = 'memory', 'outputMode' = 'append', trigger = 'available-now') AS
SELECT window.start AS start, word, count(*) AS count FROM events
LATERAL VIEW explode(split(line, ' ')) t AS word GROUP BY window(ts, '10 seconds'), word;",
        "words.sql",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    p.set_variable("input", d.input.display().to_string());
    let s = session();
    let queries = p.start(&s).unwrap_or_else(|e| panic!("{e}"));
    p.await_termination(&queries, || false)
        .unwrap_or_else(|e| panic!("{e}"));
    let batches = s.sql("SELECT * FROM counts").unwrap().collect().unwrap();
    let data = BatchData {
        schema: batches[0].schema(),
        partitions: vec![batches],
    };
    assert_eq!(
        rows_of(&data, true),
        ["2026-09-15 00:00:00|a|2", "2026-09-15 00:00:00|b|1"]
    );
}
