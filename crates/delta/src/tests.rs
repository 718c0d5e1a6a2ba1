//! The Delta sink and batch writer against real tables (read back through the table's log).

use super::*;
use arrow::array::{Array, AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use sluice::source::memory::MemoryStream;
use sluice::{Session, Trigger};

/// The rows of the table at `dir` as it is now: `(id, user)` pairs, sorted; and its version.
fn table_rows(dir: &std::path::Path) -> (Vec<(i64, String)>, i64) {
    let url = url::Url::from_directory_path(dir).unwrap();
    let dir = dir.to_path_buf();
    run(async move {
        let table = deltalake::open_table(url).await.unwrap();
        let version = table.version().unwrap() as i64;
        let mut rows = Vec::new();
        for uri in table.get_file_uris().unwrap() {
            let path = match url::Url::parse(&uri) {
                Ok(u) => u.to_file_path().unwrap(),
                Err(_) => dir.join(&uri),
            };
            // the partition value lives in the folder name (user=..)
            let user_dir = path
                .parent()
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let file = std::fs::File::open(&path).unwrap();
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .unwrap()
                    .build()
                    .unwrap();
            for b in reader {
                let b = b.unwrap();
                let ids = b
                    .column_by_name("id")
                    .unwrap()
                    .as_primitive::<Int64Type>()
                    .clone();
                let users: Vec<String> = match b.column_by_name("user") {
                    Some(c) => {
                        let c = arrow::compute::cast(c, &DataType::Utf8).unwrap();
                        let c = c.as_string::<i32>().clone();
                        (0..c.len()).map(|i| c.value(i).to_string()).collect()
                    }
                    None => vec![user_dir.trim_start_matches("user=").to_string(); b.num_rows()],
                };
                rows.extend(ids.values().iter().copied().zip(users));
            }
        }
        rows.sort();
        (rows, version)
    })
    .unwrap()
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("user", DataType::Utf8, true),
    ]))
}

fn batch(ids: &[i64]) -> RecordBatch {
    let users: Vec<String> = ids.iter().map(|i| format!("u{}", i % 2)).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(users)),
        ],
    )
    .unwrap()
}

fn opts(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_stream_appends_one_commit_per_batch_and_a_replayed_batch_is_skipped() {
    register();
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("t");
    let ckpt = tmp.path().join("ckpt");
    let input = MemoryStream::new(schema());
    let start = |crash: Option<&str>| {
        let session = Session::builder().shuffle_partitions(2).build().unwrap();
        if let Some(c) = crash {
            session.set_conf("sluice.testing.crashPoint", c);
        }
        input
            .to_frame(&session)
            .unwrap()
            .write_stream()
            .format("delta")
            .partition_by(["user"])
            .option("path", table.display())
            .option("checkpointLocation", ckpt.display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap()
    };
    input.add_batch(batch(&[1, 2, 3])).unwrap();
    start(None).await_termination().unwrap();
    let (rows, v0) = table_rows(&table);
    assert_eq!(rows.len(), 3);
    assert!(
        table.join("user=u1").is_dir(),
        "partitionBy makes Hive folders"
    );
    // Batch 1 reaches the table, then the query dies before its commit: the restart replays
    // batch 1 with the same id, and the table's txn action makes the sink skip it.
    input.add_batch(batch(&[4, 5])).unwrap();
    let crashed = start(Some("afterSink:1")).await_termination();
    assert!(crashed.is_err(), "the injected crash stops the query");
    let (after_crash, v1) = table_rows(&table);
    assert_eq!(after_crash.len(), 5);
    start(None).await_termination().unwrap();
    let (rows, v2) = table_rows(&table);
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5],
        "each row once"
    );
    assert_eq!(v1, v0 + 1);
    assert_eq!(v2, v1, "the replayed batch wrote no commit");
}

#[test]
fn complete_mode_overwrites_the_table_each_batch() {
    register();
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("t");
    let session = Session::builder().shuffle_partitions(1).build().unwrap();
    let input = MemoryStream::new(schema());
    input.add_batch(batch(&[1, 2, 3])).unwrap();
    let counts = input
        .to_frame(&session)
        .unwrap()
        .group_by([sluice::col("user")])
        .count()
        .unwrap()
        .select_exprs(vec![sluice::col("count").alias("id"), sluice::col("user")])
        .unwrap();
    let q = counts
        .write_stream()
        .format("delta")
        .output_mode(OutputMode::Complete)
        .option("path", table.display())
        .option("checkpointLocation", tmp.path().join("c").display())
        .trigger(Trigger::ProcessingTime(std::time::Duration::ZERO))
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    input.add_batch(batch(&[4])).unwrap();
    q.process_all_available().unwrap();
    q.stop();
    let (rows, _) = table_rows(&table);
    // u0: ids 2, 4; u1: ids 1, 3 -- the latest full result only
    assert_eq!(rows, [(2, "u0".to_string()), (2, "u1".to_string())]);
}

#[test]
fn write_batch_is_idempotent_by_txn_app_id_and_version() {
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("t");
    let data = BatchData {
        schema: schema(),
        partitions: vec![vec![batch(&[1, 2])]],
    };
    let path = table.display().to_string();
    let o = opts(&[("path", &path), ("txnAppId", "job"), ("txnVersion", "7")]);
    assert!(write_batch(&data, &o).unwrap());
    assert!(
        !write_batch(&data, &o).unwrap(),
        "the same version again is skipped"
    );
    let older = opts(&[("path", &path), ("txnAppId", "job"), ("txnVersion", "3")]);
    assert!(
        !write_batch(&data, &older).unwrap(),
        "an older version is skipped too"
    );
    let next = opts(&[("path", &path), ("txnAppId", "job"), ("txnVersion", "8")]);
    assert!(write_batch(&data, &next).unwrap());
    assert_eq!(table_rows(&table).0.len(), 4);
    let bad = opts(&[("path", &path), ("txnAppId", "job")]);
    let err = write_batch(&data, &bad).unwrap_err();
    assert!(err.is(class::INVALID_OPTION_VALUE), "{err}");
    // a column the table does not have is refused, with the option that accepts it
    let wider = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("user", DataType::Utf8, true),
        Field::new("extra", DataType::Int64, true),
    ]));
    let wide = BatchData {
        schema: wider.clone(),
        partitions: vec![vec![RecordBatch::try_new(
            wider,
            vec![
                Arc::new(Int64Array::from(vec![9])),
                Arc::new(StringArray::from(vec!["u1"])),
                Arc::new(Int64Array::from(vec![1])),
            ],
        )
        .unwrap()]],
    };
    let err = write_batch(&wide, &opts(&[("path", &path)])).unwrap_err();
    assert!(err.is(class::DELTA_WRITE_FAILED), "{err}");
    assert!(err.to_string().contains("mergeSchema"), "{err}");
    assert!(write_batch(&wide, &opts(&[("path", &path), ("mergeSchema", "true")])).unwrap());
    assert_eq!(table_rows(&table).0.len(), 5);
}

/// Bronze -> silver: a stream reads table `a` (its snapshot, then each new commit once, across
/// restarts) into table `b`; `startingVersion` reads from a commit on; a commit that removes
/// data stops the stream unless `skipChangeCommits` says to skip it.
#[test]
fn a_delta_table_feeds_another_query_each_commit_once() {
    register();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let a_path = a.display().to_string();
    let append = |ids: &[i64]| {
        let data = BatchData {
            schema: schema(),
            partitions: vec![vec![batch(ids)]],
        };
        assert!(write_batch(&data, &opts(&[("path", &a_path), ("partitionBy", "user")])).unwrap());
    };
    append(&[1, 2, 3]); // version 0
    append(&[4, 5]); // version 1
    let run = |ckpt: &str, extra: &[(&str, &str)]| -> Result<Vec<sluice::StreamingQueryProgress>> {
        let session = Session::builder().shuffle_partitions(1).build().unwrap();
        let mut r = session
            .read_stream()
            .format("delta")
            .option("maxFilesPerTrigger", 1);
        for (k, v) in extra {
            r = r.option(*k, *v);
        }
        let q = r
            .load(&a_path)?
            .write_stream()
            .format("delta")
            .option("path", b.display())
            .option("checkpointLocation", tmp.path().join(ckpt).display())
            .trigger(Trigger::AvailableNow)
            .start()?;
        q.await_termination()?;
        Ok(q.recent_progress())
    };
    let progress = run("c1", &[]).unwrap();
    let ids = |t: &std::path::Path| table_rows(t).0.iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(ids(&b), [1, 2, 3, 4, 5]);
    // the snapshot's files one per batch (maxFilesPerTrigger=1)
    assert!(progress.len() >= 2, "{} batches", progress.len());
    let offset = progress[0].sources[0].end_offset.clone().unwrap();
    assert_eq!(
        offset["isStartingVersion"],
        serde_json::json!(true),
        "{offset}"
    );
    // a new commit: the restart reads exactly it
    append(&[6]); // version 2
    run("c1", &[]).unwrap();
    assert_eq!(ids(&b), [1, 2, 3, 4, 5, 6]);
    run("c1", &[]).unwrap();
    assert_eq!(ids(&b), [1, 2, 3, 4, 5, 6], "nothing new, nothing added");
    // from version 2 on, on a new checkpoint: only commit 2's row again
    run("c2", &[("startingVersion", "2")]).unwrap();
    assert_eq!(ids(&b), [1, 2, 3, 4, 5, 6, 6]);
    // an overwrite removes files: the stream stops, naming the way past it
    let data = BatchData {
        schema: schema(),
        partitions: vec![vec![batch(&[7])]],
    };
    assert!(write_batch(&data, &opts(&[("path", &a_path), ("mode", "overwrite")])).unwrap());
    let err = run("c1", &[]).unwrap_err();
    assert!(err.is(class::DELTA_TABLE_INVALID), "{err}");
    assert!(err.to_string().contains("skipChangeCommits"), "{err}");
    run("c1", &[("skipChangeCommits", "true")]).unwrap();
    assert_eq!(
        ids(&b),
        [1, 2, 3, 4, 5, 6, 6],
        "the change commit is skipped whole"
    );
}

/// A new bucket on the local S3 server (`scripts/s3-server start`, `$SLUICE_S3_ENDPOINT`), and
/// the conf that reaches it through S3A's keys.
fn s3_bucket() -> (String, Vec<(&'static str, String)>) {
    use std::io::{Read, Write};
    let ep = std::env::var("SLUICE_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9000".into());
    let addr = ep
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let Ok(mut s) = std::net::TcpStream::connect(&addr) else {
        panic!("no S3 server answers at {ep}: run `scripts/s3-server start` first (the README's test command does)");
    };
    let b = format!("delta-{}", &uuid_like()[..12]);
    write!(
        s,
        "PUT /{b} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let conf = vec![
        ("spark.hadoop.fs.s3a.endpoint", ep),
        ("spark.hadoop.fs.s3a.access.key", "test".to_string()),
        ("spark.hadoop.fs.s3a.secret.key", "test".to_string()),
        ("spark.hadoop.fs.s3a.path.style.access", "true".to_string()),
        (
            "spark.hadoop.fs.s3a.endpoint.region",
            "us-east-1".to_string(),
        ),
    ];
    (b, conf)
}

fn uuid_like() -> String {
    format!(
        "{:x}{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
    .chars()
    .rev()
    .collect()
}

/// The ids of an object-store table, read through delta-rs on the engine's store.
fn s3_table_ids(path: &str) -> Vec<i64> {
    let url = table_url(path).unwrap();
    run(async move {
        let table = open_table(&url, None).await.unwrap();
        let mut ids = Vec::new();
        for uri in table.get_file_uris().unwrap() {
            let file = sluice::storage::open(std::path::Path::new(&uri)).unwrap();
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .unwrap()
                    .build()
                    .unwrap();
            for b in reader {
                let b = b.unwrap();
                let c = b
                    .column_by_name("id")
                    .unwrap()
                    .as_primitive::<Int64Type>()
                    .clone();
                ids.extend(c.values().iter().copied());
            }
        }
        ids.sort_unstable();
        ids
    })
    .unwrap()
}

#[test]
fn s3_delta_sink_and_source_on_object_storage_exactly_once() {
    register();
    let (bucket, conf) = s3_bucket();
    let session = || {
        let mut b = Session::builder().shuffle_partitions(2);
        for (k, v) in &conf {
            b = b.config(*k, v);
        }
        b.build().unwrap()
    };
    let bronze = format!("s3a://{bucket}/bronze");
    let silver = format!("s3a://{bucket}/silver");
    let input = MemoryStream::new(schema());
    let write_bronze = |crash: Option<&str>| {
        let s = session();
        if let Some(c) = crash {
            s.set_conf("sluice.testing.crashPoint", c);
        }
        input
            .to_frame(&s)
            .unwrap()
            .write_stream()
            .format("delta")
            .partition_by(["user"])
            .option("path", &bronze)
            .option("checkpointLocation", format!("s3://{bucket}/ck/bronze"))
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap()
            .await_termination()
    };
    input.add_batch(batch(&[1, 2, 3])).unwrap();
    write_bronze(None).unwrap();
    input.add_batch(batch(&[4, 5])).unwrap();
    assert!(write_bronze(Some("afterSink:1")).is_err());
    write_bronze(None).unwrap();
    assert_eq!(
        s3_table_ids(&bronze),
        [1, 2, 3, 4, 5],
        "the replayed batch is skipped"
    );
    assert!(sluice::storage::is_dir(std::path::Path::new(&format!(
        "s3://{bucket}/bronze/user=u1"
    ))));
    assert!(sluice::storage::is_file(std::path::Path::new(&format!(
        "s3://{bucket}/bronze/_delta_log/00000000000000000001.json"
    ))));
    // bronze -> silver, both on S3, with a restart between commits.
    let to_silver = || {
        let s = session();
        let q = s
            .read_stream()
            .format("delta")
            .load(&bronze)
            .unwrap()
            .write_stream()
            .format("delta")
            .option("path", &silver)
            .option("checkpointLocation", format!("s3://{bucket}/ck/silver"))
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        q.await_termination().unwrap();
    };
    to_silver();
    assert_eq!(s3_table_ids(&silver), [1, 2, 3, 4, 5]);
    input.add_batch(batch(&[6])).unwrap();
    write_bronze(None).unwrap();
    to_silver();
    to_silver();
    assert_eq!(
        s3_table_ids(&silver),
        [1, 2, 3, 4, 5, 6],
        "each commit once"
    );
}
