//! Checkpoints, the file source and the file sink on S3, against a local S3-compatible server
//! (`scripts/s3-server start`: moto on 127.0.0.1:9000, `$SLUICE_S3_ENDPOINT`). Every test name
//! contains `s3`; without a server they fail and say how to start one (`-- --skip s3` runs the
//! rest). The sessions reach the server through Spark's Hadoop keys
//! (`spark.hadoop.fs.s3a.endpoint`, `access.key`, `secret.key`, `path.style.access`), as a
//! PySpark job configures S3A.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::storage::{self, faulty::FaultyStore};
use sluice::{col, lit, OutputMode, Session, Trigger};

fn endpoint() -> String {
    let ep = std::env::var("SLUICE_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9000".into());
    let addr = ep
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    if std::net::TcpStream::connect_timeout(
        &addr.parse().expect("a host:port S3 endpoint"),
        Duration::from_secs(2),
    )
    .is_err()
    {
        panic!("no S3 server answers at {ep}: run `scripts/s3-server start` first (the README's test command does)");
    }
    ep
}

/// A new bucket on the server (moto accepts an unsigned `PUT /bucket`). Builds an S3 session
/// first, so the test's own writes (before its first session) reach the server.
fn bucket(name: &str) -> String {
    drop(s3_session());
    let ep = endpoint();
    let addr = ep.trim_start_matches("http://").trim_end_matches('/');
    let b = format!(
        "{name}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "PUT /{b} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "creating bucket {b}: {answer}"
    );
    b
}

/// A session that reaches the server through S3A's keys.
fn s3_session() -> Session {
    Session::builder()
        .shuffle_partitions(2)
        .config("spark.hadoop.fs.s3a.endpoint", endpoint())
        .config("spark.hadoop.fs.s3a.access.key", "test")
        .config("spark.hadoop.fs.s3a.secret.key", "test")
        .config("spark.hadoop.fs.s3a.path.style.access", "true")
        .config("spark.hadoop.fs.s3a.endpoint.region", "us-east-1")
        .config("sluice.storage.retry.initialBackoffMs", "10")
        .build()
        .unwrap()
}

fn put(path: &str, body: &str) {
    storage::write(Path::new(path), body.as_bytes()).unwrap();
}

fn events(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("{{\"id\": {i}, \"user\": \"u{}\"}}\n", i % 3))
        .collect()
}

/// The file source on `input` to a parquet file sink on `output`, available-now.
fn file_to_parquet(
    s: &Session,
    input: &str,
    output: &str,
    checkpoint: &str,
) -> sluice::Result<sluice::StreamingQuery> {
    let q = s
        .read_stream()
        .format("json")
        .schema("id BIGINT, user STRING")?
        .option("maxFilesPerTrigger", "1")
        .load(input)?
        .filter(col("id").gt_eq(lit(0)))?
        .write_stream()
        .output_mode(OutputMode::Append)
        .format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .trigger(Trigger::AvailableNow)
        .start()?;
    q.await_termination()?;
    Ok(q)
}

fn ids(output: &str) -> Vec<i64> {
    let batches = sluice::sink::file::read_sink_output(Path::new(output), "parquet", None).unwrap();
    let mut out: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            let a = b
                .column_by_name("id")
                .unwrap()
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .unwrap()
                .clone();
            a.values().to_vec()
        })
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn s3_file_source_file_sink_and_checkpoint_restart_resumes_exactly() {
    let s = s3_session();
    let b = format!("s3a://{}", bucket("files"));
    let (input, output, ck) = (format!("{b}/in"), format!("{b}/out"), format!("{b}/ck"));
    put(&format!("{input}/1.json"), &events(0, 5));
    put(&format!("{input}/2.json"), &events(5, 5));
    let q = file_to_parquet(&s, &input, &output, &ck).unwrap();
    assert_eq!(q.recent_progress().len(), 2, "one file per batch");
    let store = q
        .last_progress()
        .unwrap()
        .object_store
        .expect("objectStore in progress");
    assert!(store.requests > 0, "{store:?}");
    assert_eq!(ids(&output), (0..10).collect::<Vec<_>>());
    // The checkpoint is Spark's layout, in the bucket.
    for f in [
        "metadata",
        "offsets/0",
        "offsets/1",
        "commits/1",
        "sources/0/1",
        "sluice/lease/1",
    ] {
        assert!(
            storage::is_file(Path::new(&format!("{ck}/{f}"))),
            "{ck}/{f}"
        );
    }
    assert!(storage::is_file(Path::new(&format!(
        "{output}/_spark_metadata/1"
    ))));
    let manifest =
        storage::read_to_string(Path::new(&format!("{output}/_spark_metadata/0"))).unwrap();
    assert!(
        manifest.contains(&format!("\"path\":\"{output}/part-")),
        "{manifest}"
    );

    // A restart takes only the new file; a crash between the sink and the commit replays the
    // batch, which the manifest already has.
    put(&format!("{input}/3.json"), &events(10, 5));
    let s2 = s3_session();
    s2.set_conf("sluice.testing.crashPoint", "afterSink:2");
    assert!(file_to_parquet(&s2, &input, &output, &ck).is_err());
    let q = file_to_parquet(&s3_session(), &input, &output, &ck).unwrap();
    assert_eq!(q.last_progress().unwrap().batch_id, 2);
    assert_eq!(ids(&output), (0..15).collect::<Vec<_>>(), "every row once");
}

#[test]
fn s3_state_files_are_written_once_and_a_crash_in_the_state_commit_replays() {
    let b = format!("s3://{}", bucket("state"));
    let (input, ck) = (format!("{b}/in"), format!("{b}/ck"));
    put(&format!("{input}/1.json"), &events(0, 9));
    let seen: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
    let run = |s: &Session| {
        let sink = seen.clone();
        let q = s
            .read_stream()
            .format("json")
            .schema("id BIGINT, user STRING")
            .unwrap()
            .load(&input)
            .unwrap()
            .group_by([col("user")])
            .count()
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Update)
            .option("checkpointLocation", &ck)
            .trigger(Trigger::AvailableNow)
            .foreach_batch(move |data, id| {
                sink.lock().unwrap().push((id, data.num_rows()));
                Ok(())
            })
            .start()
            .unwrap();
        let r = q.await_termination();
        (q, r)
    };
    let crashing = s3_session();
    crashing.set_conf("sluice.testing.crashPoint", "inStateCommit:0");
    let (_, r) = run(&crashing);
    assert_eq!(r.unwrap_err().class(), "SLUICE_INJECTED_CRASH");
    let (q, r) = run(&s3_session());
    r.unwrap();
    assert_eq!(
        q.last_progress().unwrap().state_operators[0].num_rows_total,
        3
    );
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(0, 3)],
        "batch 0 reaches the sink once"
    );
    let parts: Vec<PathBuf> = [0, 1]
        .iter()
        .map(|p| PathBuf::from(format!("{ck}/state/0/{p}/1.delta")))
        .collect();
    assert!(parts.iter().all(storage::is_file), "{parts:?}");
    assert!(storage::is_file(Path::new(&format!(
        "{ck}/state/0/_metadata/schema"
    ))));
    // A second batch reads the state back from the bucket.
    put(&format!("{input}/2.json"), &events(9, 3));
    let (q, r) = run(&s3_session());
    r.unwrap();
    assert_eq!(
        q.last_progress().unwrap().state_operators[0].num_rows_total,
        3
    );
    assert_eq!(seen.lock().unwrap().last(), Some(&(1, 3)));
}

#[test]
fn s3_a_second_query_on_one_checkpoint_is_refused_until_the_first_stops() {
    let b = format!("s3://{}", bucket("lease"));
    let (input, output, ck) = (format!("{b}/in"), format!("{b}/out"), format!("{b}/ck"));
    put(&format!("{input}/1.json"), &events(0, 3));
    let start = |s: &Session| {
        s.read_stream()
            .format("json")
            .schema("id BIGINT, user STRING")?
            .load(&input)?
            .write_stream()
            .format("parquet")
            .option("path", &output)
            .option("checkpointLocation", &ck)
            .trigger(Trigger::ProcessingTime(Duration::from_millis(200)))
            .start()
    };
    let first = start(&s3_session()).unwrap();
    first.process_all_available().unwrap();
    let second = start(&s3_session()).and_then(|q| {
        q.await_termination()?;
        Ok(q)
    });
    let Err(err) = second else {
        panic!("the second query is refused")
    };
    assert_eq!(err.class(), "CONCURRENT_QUERY", "{err}");
    assert!(
        err.message().contains(&format!("{ck}/sluice/lease/")),
        "{err}"
    );
    first.stop();
    // Released on stop: the next query takes the lease at once.
    let again = start(&s3_session()).unwrap();
    again.process_all_available().unwrap();
    again.stop();
    assert_eq!(ids(&output), vec![0, 1, 2]);
}

#[test]
fn s3_a_lease_left_by_a_killed_process_on_this_machine_is_taken_over() {
    let b = format!("s3://{}", bucket("stale"));
    let (input, output, ck) = (format!("{b}/in"), format!("{b}/out"), format!("{b}/ck"));
    put(&format!("{input}/1.json"), &events(0, 4));
    // What a SIGKILLed holder leaves: its lease, not released, naming a process that is gone.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    put(
        &format!("{ck}/sluice/lease/1"),
        &format!(
            "{{\"owner\":\"x\",\"host\":\"{host}\",\"pid\":4194303,\"processStart\":1,\
             \"heartbeatMs\":{},\"released\":false}}",
            chrono::Utc::now().timestamp_millis()
        ),
    );
    file_to_parquet(&s3_session(), &input, &output, &ck).unwrap();
    assert!(storage::is_file(Path::new(&format!("{ck}/sluice/lease/2"))));
    assert_eq!(ids(&output), vec![0, 1, 2, 3]);
}

#[test]
fn s3_transient_errors_are_retried_and_counted_permanent_ones_stop_with_the_path() {
    let name = bucket("faults");
    // The bucket's store, with a fault injector in front (registered under its URL).
    let real: Arc<dyn object_store::ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(endpoint())
            .with_bucket_name(&name)
            .with_region("us-east-1")
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .with_allow_http(true)
            .with_retry(object_store::RetryConfig {
                max_retries: 0,
                ..Default::default()
            })
            .build()
            .unwrap(),
    );
    let faulty = FaultyStore::new(real);
    storage::register_store(&format!("s3://{name}"), faulty.clone());
    let b = format!("s3://{name}");
    let (input, output, ck) = (format!("{b}/in"), format!("{b}/out"), format!("{b}/ck"));
    for i in 0..3 {
        put(&format!("{input}/{i}.json"), &events(i * 4, 4));
    }
    faulty.fail_every(4);
    let q = file_to_parquet(&s3_session(), &input, &output, &ck).unwrap();
    let retries: u64 = q
        .recent_progress()
        .iter()
        .map(|p| p.object_store.unwrap_or_default().retries)
        .sum();
    assert!(faulty.injected() > 0);
    assert!(retries > 0, "retries are counted in progress");
    faulty.fail_every(0);
    assert_eq!(ids(&output), (0..12).collect::<Vec<_>>());

    // A permanent error (access denied on the commit log) stops the query, naming the path.
    put(&format!("{input}/3.json"), &events(12, 4));
    faulty.deny(Some("ck/commits/3"));
    let err = file_to_parquet(&s3_session(), &input, &output, &ck).unwrap_err();
    assert!(err.message().contains(&format!("{ck}/commits/3")), "{err}");
    assert!(err.message().contains("credentials"), "{err}");
    // Once the store answers again, the batch is replayed and nothing is lost or doubled.
    faulty.deny(None);
    file_to_parquet(&s3_session(), &input, &output, &ck).unwrap();
    assert_eq!(ids(&output), (0..16).collect::<Vec<_>>());
}

#[test]
fn s3_late_rows_go_to_their_own_sink_in_the_bucket_and_batch_reads_list_the_bucket() {
    let b = format!("s3://{}", bucket("late"));
    let (input, late, ck) = (format!("{b}/in"), format!("{b}/late"), format!("{b}/ck"));
    let files = [
        "{\"ts\": \"2026-09-15T12:01:00Z\", \"user\": \"a\"}\n{\"ts\": \"2026-09-15T12:30:00Z\", \"user\": \"b\"}\n",
        "{\"ts\": \"2026-09-15T12:02:00Z\", \"user\": \"late\"}\n",
    ];
    let s = s3_session();
    let q = s
        .read_stream()
        .format("json")
        .schema("ts TIMESTAMP, user STRING")
        .unwrap()
        .option("maxFilesPerTrigger", 1)
        .load(&input)
        .unwrap()
        .with_watermark("ts", "10 minutes")
        .unwrap()
        .group_by([sluice::window(col("ts"), "5 minutes")])
        .count()
        .unwrap()
        .write_stream()
        .output_mode(OutputMode::Update)
        .option("checkpointLocation", &ck)
        .option("lateRows.format", "json")
        .option("lateRows.path", &late)
        .foreach_batch(|_, _| Ok(()))
        .start()
        .unwrap();
    for (i, f) in files.iter().enumerate() {
        put(&format!("{input}/{i}.json"), f);
        q.process_all_available().unwrap();
    }
    q.stop();
    let dropped: i64 = q
        .recent_progress()
        .iter()
        .map(|p| p.state_operators[0].num_rows_dropped_by_watermark)
        .sum();
    assert_eq!(dropped, 1);
    // The late row is in the late-row sink's committed files, read as a batch from the bucket.
    let rows = s
        .read()
        .format("json")
        .schema("ts TIMESTAMP, user STRING")
        .unwrap()
        .load(&late)
        .unwrap()
        .collect()
        .unwrap();
    let n: usize = rows.iter().map(|b| b.num_rows()).sum();
    assert_eq!(n, 1, "the late row once");
    assert!(storage::is_dir(Path::new(&format!(
        "{late}/_spark_metadata"
    ))));
    // A plain folder of the bucket (no manifest) reads as every visible file in it.
    let all = s
        .read()
        .format("json")
        .schema("ts TIMESTAMP, user STRING")
        .unwrap()
        .load(&input)
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(all.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
}

#[test]
fn s3_racing_log_writers_have_exactly_one_winner() {
    let b = format!("s3://{}", bucket("race"));
    let file = PathBuf::from(format!("{b}/ck/offsets/7"));
    let wins = (0..8)
        .map(|i| {
            let file = file.clone();
            std::thread::spawn(move || storage::create_new(&file, format!("w{i}")).unwrap())
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|won| *won)
        .count();
    assert_eq!(wins, 1, "a conditional create has one winner");
    let text = storage::read_to_string(&file).unwrap();
    assert!(text.starts_with('w'), "{text}");
}
