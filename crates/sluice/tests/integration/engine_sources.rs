//! Rate-micro-batch, memory stream, malformed input.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::Trigger;

use crate::support::{add_file, committed_rows, dirs, run_file_to_parquet, session, BATCH1};

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
    assert_eq!(committed_rows(&d.output, &["user", "amount"]).len(), 3);
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
        .add_batch(RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![3]))]).unwrap())
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

/// Compressed input files are read by extension, as Spark reads them through Hadoop's codecs:
/// a gzip and a zstd file next to a plain one, in a stream and in a batch read; a damaged one
/// fails the query naming the file.
#[test]
fn gzip_and_zstd_input_files_are_read_by_their_extension() {
    use std::io::Write;
    let d = dirs();
    let gz = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(BATCH1.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    let zst = zstd::stream::encode_all(BATCH1.as_bytes(), 3).unwrap();
    std::fs::write(d.input.join("a.json.gz"), &gz).unwrap();
    std::fs::write(d.input.join("b.json.zst"), &zst).unwrap();
    add_file(&d.input, "c.json", BATCH1, 3);
    let s = session();
    let run = |name: &str| {
        s.read_stream()
            .format("json")
            .schema(crate::support::SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .format("memory")
            .query_name(name)
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap()
            .await_termination()
    };
    run("compressed").unwrap();
    let n = |sql: &str| -> usize {
        s.sql(sql)
            .unwrap()
            .collect()
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum()
    };
    assert_eq!(n("SELECT * FROM compressed"), 9);
    assert_eq!(n("SELECT * FROM compressed WHERE user = 'alice'"), 6);
    let batch: usize = s
        .read()
        .format("json")
        .schema(crate::support::SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .collect()
        .unwrap()
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(batch, 9);
    // A truncated gzip file stops the query with the file's name and what to do.
    std::fs::write(d.input.join("d.json.gz"), &gz[..gz.len() / 2]).unwrap();
    let err = run("damaged").unwrap_err();
    assert!(err.is(sluice::error::class::FAILED_READ_FILE), "{err}");
    assert!(err.to_string().contains("d.json.gz"), "{err}");
}

/// The rows of each batch a `foreach_batch` sink saw, as sorted `col|col` strings.
type Seen = Arc<Mutex<Vec<(u64, Vec<String>)>>>;

fn socket_word_count(
    port: u16,
    checkpoint: &std::path::Path,
    seen: &Seen,
) -> sluice::Result<sluice::StreamingQuery> {
    let s = session();
    s.read_stream()
        .format("socket")
        .option("host", "127.0.0.1")
        .option("port", port)
        .load_source()?
        .create_or_replace_temp_view("lines")?;
    let sink = seen.clone();
    s.sql(
        "SELECT word, count(*) AS n FROM lines \
         LATERAL VIEW explode(split(value, ' ')) t AS word GROUP BY word",
    )?
    .write_stream()
    .output_mode(sluice::OutputMode::Complete)
    .trigger(Trigger::ProcessingTime(Duration::from_millis(20)))
    .option("checkpointLocation", checkpoint.display())
    .foreach_batch(move |data, id| {
        let b = data.concat()?;
        let words = crate::support::strings(b.column(0));
        let counts = crate::support::longs(b.column(1));
        let mut rows: Vec<String> = words
            .iter()
            .zip(&counts)
            .map(|(w, n)| format!("{w}|{n}"))
            .collect();
        rows.sort();
        sink.lock().unwrap().push((id, rows));
        Ok(())
    })
    .start()
}

fn last_seen(seen: &Seen) -> Option<(u64, Vec<String>)> {
    seen.lock().unwrap().last().cloned()
}

#[test]
fn socket_word_count_counts_lines_as_they_arrive_and_goes_on_after_a_restart() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let d = dirs();
    let seen: Seen = Arc::default();
    let q = socket_word_count(port, &d.checkpoint, &seen).unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    conn.write_all(b"a b a\nc\r\n").unwrap();
    let want = |rows: &[&str]| rows.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    crate::support::wait_until("the first lines counted", Duration::from_secs(30), || {
        last_seen(&seen).is_some_and(|(_, r)| r == want(&["a|2", "b|1", "c|1"]))
    });
    conn.write_all("b é\n".as_bytes()).unwrap();
    crate::support::wait_until("the next line counted", Duration::from_secs(30), || {
        last_seen(&seen).is_some_and(|(_, r)| r == want(&["a|2", "b|2", "c|1", "é|1"]))
    });
    // Nothing new: no more batches (each batch had new lines).
    let batches = seen.lock().unwrap().len();
    assert_eq!(batches, 2, "{:?}", seen.lock().unwrap());
    q.stop();
    drop(conn);

    // A restart reads the new connection's lines after the committed ones; state goes on.
    let q = socket_word_count(port, &d.checkpoint, &seen).unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    conn.write_all(b"a\n").unwrap();
    crate::support::wait_until("a line after the restart", Duration::from_secs(30), || {
        last_seen(&seen).is_some_and(|(_, r)| r == want(&["a|3", "b|2", "c|1", "é|1"]))
    });
    assert_eq!(last_seen(&seen).unwrap().0, 2);
    // The progress of a batch comes after its sink returned.
    crate::support::wait_until("the progress of batch 2", Duration::from_secs(30), || {
        q.last_progress().is_some_and(|p| p.batch_id == 2)
    });
    let p = q.last_progress().unwrap();
    assert_eq!(
        p.sources[0].description,
        format!("TextSocketV2[host: 127.0.0.1, port: {port}]")
    );
    assert_eq!(p.sources[0].end_offset, Some(serde_json::json!(3)));
    // The server closes the connection: the query keeps running, as in Spark.
    drop(conn);
    std::thread::sleep(Duration::from_millis(200));
    assert!(q.is_active());
    q.stop();

    // A batch logged but not committed cannot be re-run from a socket: refused, not guessed.
    std::fs::remove_file(d.checkpoint.join("commits/2")).unwrap();
    let q = socket_word_count(port, &d.checkpoint, &seen).unwrap();
    let _conn = listener.accept().unwrap();
    let e = q.await_termination().unwrap_err();
    assert!(e.is(sluice::error::class::SOCKET_DATA_LOST), "{e}");
    assert!(e.message().contains("lines 3..=3"), "{e}");
    assert!(e.message().contains("new checkpointLocation"), "{e}");
}

#[test]
fn socket_lines_with_include_timestamp_carry_their_arrival_time() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let s = session();
    let frame = s
        .read_stream()
        .format("socket")
        .option("host", "localhost")
        .option("port", port)
        .option("includeTimestamp", "true")
        .load_source()
        .unwrap();
    let q = frame
        .write_stream()
        .format("memory")
        .query_name("socket_lines")
        .start()
        .unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    let before = chrono::Utc::now().naive_utc();
    conn.write_all(b"one\ntwo\n").unwrap();
    conn.flush().unwrap();
    crate::support::wait_until("two lines", Duration::from_secs(30), || {
        q.process_all_available().unwrap();
        let b = s
            .sql("SELECT value FROM socket_lines")
            .unwrap()
            .collect()
            .unwrap();
        b.iter().map(|b| b.num_rows()).sum::<usize>() == 2
    });
    let rows = s
        .sql("SELECT value, CAST(timestamp AS STRING) FROM socket_lines ORDER BY value")
        .unwrap()
        .collect()
        .unwrap();
    let b = arrow::compute::concat_batches(&rows[0].schema(), &rows).unwrap();
    assert_eq!(crate::support::strings(b.column(0)), ["one", "two"]);
    for t in crate::support::strings(b.column(1)) {
        let t = chrono::NaiveDateTime::parse_from_str(&t, "%Y-%m-%d %H:%M:%S%.f").unwrap();
        let age = (t - before).num_milliseconds();
        assert!((-1000..30_000).contains(&age), "{t} vs {before}");
    }
    q.stop();
    let e = s.read().format("socket").load_source().unwrap_err();
    assert!(e.message().contains("does not support batch reads"), "{e}");
}
