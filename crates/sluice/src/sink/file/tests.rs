//! Tests of the file sink, its manifest and the reader of its output.

use super::*;
use arrow::array::{Float64Array, Int64Array, TimestampMicrosecondArray};
use std::fs;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("user", DataType::Utf8, true),
        Field::new("amount", DataType::Float64, true),
    ]))
}

/// `n` rows starting at `start`, split in `parts` partitions (round robin by row).
fn data(start: i64, n: i64, parts: usize) -> BatchData {
    let s = schema();
    let mut partitions = vec![Vec::new(); parts];
    for i in start..start + n {
        let b = RecordBatch::try_new(
            s.clone(),
            vec![
                Arc::new(
                    TimestampMicrosecondArray::from(vec![Some(
                        1_789_473_660_000_000 + i * 60_000_000,
                    )])
                    .with_timezone("UTC"),
                ),
                Arc::new(StringArray::from(vec![if i % 3 == 0 {
                    None
                } else {
                    Some(format!("u{i}"))
                }])),
                Arc::new(Float64Array::from(vec![Some(i as f64 * 1.5)])),
            ],
        )
        .unwrap();
        partitions[(i as usize) % parts].push(b);
    }
    BatchData {
        schema: s,
        partitions,
    }
}

fn sink(dir: &Path, format: &str, opts: &[(&str, &str)]) -> (FileSinkProvider, Box<dyn Sink>) {
    let options: HashMap<String, String> = opts
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let p = FileSinkProvider::try_new(format, dir.to_str().unwrap(), &options).unwrap();
    let s = p.create_sink(&test_ctx(dir)).unwrap();
    (p, s)
}

/// A new query's context, its checkpoint in `dir/_ck`.
fn test_ctx(dir: &Path) -> SinkContext {
    SinkContext {
        checkpoint_dir: dir.join("_ck"),
        output_mode: OutputMode::Append,
        query_name: None,
        query_id: "test-query".into(),
        last_planned: None,
        log_cleanup: Default::default(),
        memory: Default::default(),
    }
}

fn amounts(batches: &[RecordBatch]) -> Vec<f64> {
    let mut v: Vec<f64> = batches
        .iter()
        .flat_map(|b| {
            let idx = b.schema().index_of("amount").unwrap();
            let c = arrow::compute::cast(b.column(idx), &DataType::Float64).unwrap();
            c.as_primitive::<arrow::datatypes::Float64Type>()
                .values()
                .to_vec()
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

fn count_data_files(dir: &Path) -> usize {
    fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("part-")
        })
        .count()
}

#[test]
fn two_batches_then_replay_adds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (p, mut s) = sink(&out, "parquet", &[]);
    assert_eq!(p.description(), format!("FileSink[{}]", out.display()));
    s.add_batch(0, &data(0, 3, 2)).unwrap();
    assert_eq!(s.metrics().get("numFiles").map(String::as_str), Some("2"));
    assert_eq!(
        s.metrics().get("numOutputRows").map(String::as_str),
        Some("3")
    );
    s.add_batch(1, &data(3, 1, 2)).unwrap();
    assert_eq!(s.metrics().get("numFiles").map(String::as_str), Some("1"));

    // Manifest files in Spark's format.
    let m0 = fs::read_to_string(out.join("_spark_metadata/0")).unwrap();
    let lines: Vec<&str> = m0.split('\n').collect();
    assert_eq!(lines[0], "v1");
    assert_eq!(lines.len(), 3);
    assert!(!m0.ends_with('\n'));
    let first: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
    let keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(keys.len(), 7);
    let line = lines[1];
    let prefix = format!("{{\"path\":\"file://{}/part-00000-", out.display());
    assert!(line.starts_with(&prefix), "{line}");
    assert!(line.contains("-c000.snappy.parquet\",\"size\":"), "{line}");
    assert!(
        line.ends_with(",\"blockReplication\":1,\"blockSize\":33554432,\"action\":\"add\"}"),
        "{line}"
    );
    assert!(line.contains(",\"isDir\":false,\"modificationTime\":"));
    let size = first["size"].as_i64().unwrap();
    let file = committed_files(&out).unwrap().unwrap()[0].clone();
    assert_eq!(fs::metadata(&file).unwrap().len() as i64, size);

    let rows = read_sink_output(&out, "parquet", None).unwrap();
    assert_eq!(amounts(&rows), vec![0.0, 1.5, 3.0, 4.5]);
    assert_eq!(
        rows[0].schema().field(0).data_type(),
        schema().field(0).data_type()
    );

    // Replaying batch 1 (and 0) adds nothing.
    let files_before = count_data_files(&out);
    s.add_batch(1, &data(3, 1, 2)).unwrap();
    s.add_batch(0, &data(0, 3, 2)).unwrap();
    assert_eq!(s.metrics().get("numFiles").map(String::as_str), Some("0"));
    assert_eq!(count_data_files(&out), files_before);
    assert_eq!(
        amounts(&read_sink_output(&out, "parquet", None).unwrap()),
        vec![0.0, 1.5, 3.0, 4.5]
    );

    // A new sink on the same path (a restart that re-runs batch 1, which the checkpoint
    // planned) also skips.
    let restart = SinkContext {
        last_planned: Some(1),
        ..test_ctx(&out)
    };
    let mut s2 = p.create_sink(&restart).unwrap();
    s2.add_batch(1, &data(3, 1, 2)).unwrap();
    assert_eq!(count_data_files(&out), files_before);
    // A restart whose checkpoint planned nothing is refused: it did not write these batches.
    let e = p.create_sink(&test_ctx(&out)).err().unwrap();
    assert_eq!(e.class(), "FILE_SINK_MANIFEST_AHEAD");
    assert!(e.message().contains("has planned no batch"), "{e}");
}

#[test]
fn empty_batch_writes_an_empty_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, mut s) = sink(tmp.path(), "json", &[]);
    s.add_batch(0, &data(0, 0, 2)).unwrap();
    assert_eq!(
        fs::read_to_string(tmp.path().join("_spark_metadata/0")).unwrap(),
        "v1"
    );
    assert_eq!(committed_files(tmp.path()).unwrap(), Some(vec![]));
    assert!(read_sink_output(tmp.path(), "json", Some(schema()))
        .unwrap()
        .is_empty());
    // Replay is skipped: the batch is known to be done.
    s.add_batch(0, &data(0, 5, 2)).unwrap();
    assert_eq!(count_data_files(tmp.path()), 0);
}

#[test]
fn orphan_files_are_invisible() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    let (_, mut s) = sink(out, "json", &[]);
    s.add_batch(0, &data(0, 2, 1)).unwrap();
    // A crashed attempt of batch 1 left a data file but no manifest.
    fs::write(
        out.join("part-00000-0c1f6fb5-6a5f-4a4c-8d5e-2d7f1f8a9b00-c000.json"),
        "{\"amount\":99.0}\n",
    )
    .unwrap();
    let files = committed_files(out).unwrap().unwrap();
    assert_eq!(files.len(), 1);
    assert!(files
        .iter()
        .all(|f| !f.to_string_lossy().contains("0c1f6fb5")));
    assert_eq!(
        amounts(&read_sink_output(out, "json", Some(schema())).unwrap()),
        vec![0.0, 1.5]
    );
    // Without a manifest a reader lists the directory and sees everything.
    fs::remove_dir_all(out.join("_spark_metadata")).unwrap();
    assert_eq!(committed_files(out).unwrap(), None);
    assert_eq!(
        amounts(&read_sink_output(out, "json", Some(schema())).unwrap()),
        vec![0.0, 1.5, 99.0]
    );
}

#[test]
fn compaction_at_batch_9() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    let (_, mut s) = sink(out, "parquet", &[]);
    let mut expected = Vec::new();
    for b in 0..12i64 {
        s.add_batch(b as u64, &data(b * 2, 2, 1)).unwrap();
        expected.extend([(b * 2) as f64 * 1.5, (b * 2 + 1) as f64 * 1.5]);
    }
    let meta = out.join("_spark_metadata");
    assert!(meta.join("9.compact").exists());
    assert!(!meta.join("9").exists());
    assert!(meta.join("10").exists());
    let compact = fs::read_to_string(meta.join("9.compact")).unwrap();
    assert_eq!(compact.split('\n').count(), 11); // v1 + 10 files
    assert_eq!(committed_files(out).unwrap().unwrap().len(), 12);
    expected.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(
        amounts(&read_sink_output(out, "parquet", None).unwrap()),
        expected
    );
    // Readers are also right once the files before the compaction are gone.
    for b in 0..9 {
        fs::remove_file(meta.join(b.to_string())).unwrap();
    }
    assert_eq!(committed_files(out).unwrap().unwrap().len(), 12);
    // And the sink still knows what was committed.
    s.add_batch(5, &data(100, 1, 1)).unwrap();
    assert_eq!(committed_files(out).unwrap().unwrap().len(), 12);
}

#[test]
fn append_only_and_option_errors() {
    let p = FileSinkProvider::try_new("parquet", "/tmp/x", &HashMap::new()).unwrap();
    assert!(p.supports_output_mode(OutputMode::Append));
    assert!(!p.supports_output_mode(OutputMode::Update));
    assert!(!p.supports_output_mode(OutputMode::Complete));
    let ctx = SinkContext {
        checkpoint_dir: PathBuf::from("/tmp/ck"),
        output_mode: OutputMode::Complete,
        query_name: None,
        query_id: "test-query".into(),
        last_planned: None,
        log_cleanup: Default::default(),
        memory: Default::default(),
    };
    assert_eq!(p.create_sink(&ctx).err().unwrap().fault(), Fault::Query);

    let e = FileSinkProvider::try_new("xml", "/tmp/x", &HashMap::new()).unwrap_err();
    assert_eq!(e.class(), "UNSUPPORTED_DATA_SOURCE");
    let e = FileSinkProvider::try_new("json", "", &HashMap::new()).unwrap_err();
    assert_eq!(e.class(), "PATH_NOT_SPECIFIED");
    let mut o = HashMap::new();
    o.insert("path".to_string(), "/tmp/y".to_string());
    assert_eq!(
        FileSinkProvider::try_new("JSON", "", &o).unwrap().path(),
        Path::new("/tmp/y")
    );
    o.insert("sep".to_string(), "ab".to_string());
    assert_eq!(
        FileSinkProvider::try_new("csv", "", &o)
            .unwrap_err()
            .class(),
        "INVALID_DELIMITER_VALUE"
    );
    let u = FileSinkProvider::try_new("parquet", "file:///tmp/a%20b", &HashMap::new()).unwrap();
    assert_eq!(u.path(), Path::new("/tmp/a b"));
}

#[test]
fn race_on_the_manifest_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let p =
        FileSinkProvider::try_new("json", tmp.path().to_str().unwrap(), &HashMap::new()).unwrap();
    let mut a = p.open_sink(&test_ctx(tmp.path())).unwrap();
    a.add_batch(0, &data(0, 1, 1)).unwrap();
    let before = count_data_files(tmp.path());
    // Another writer committed batch 0 between this sink's check and its manifest write.
    let e = a
        .write_batch(0, BatchStreams::from_data(data(5, 2, 1)))
        .unwrap_err();
    assert_eq!(e.fault(), Fault::Connector);
    assert_eq!(e.class(), "FILE_SINK_RACE");
    assert!(
        e.message().contains("Race while writing batch 0"),
        "{}",
        e.message()
    );
    // Its data files were cleaned up, and readers never saw them anyway.
    assert_eq!(count_data_files(tmp.path()), before);
    assert_eq!(committed_files(tmp.path()).unwrap().unwrap().len(), 1);
}

#[test]
fn json_and_csv_text_like_spark() {
    let tmp = tempfile::tempdir().unwrap();
    let jdir = tmp.path().join("j");
    let (_, mut j) = sink(&jdir, "json", &[]);
    j.add_batch(0, &data(0, 2, 1)).unwrap();
    let f = &committed_files(&jdir).unwrap().unwrap()[0];
    assert!(f.to_string_lossy().ends_with("-c000.json"));
    assert_eq!(
        fs::read_to_string(f).unwrap(),
        "{\"ts\":\"2026-09-15T12:01:00.000Z\",\"amount\":0.0}\n{\"ts\":\"2026-09-15T12:02:00.000Z\",\"user\":\"u1\",\"amount\":1.5}\n"
    );
    let back = read_sink_output(&jdir, "json", Some(schema())).unwrap();
    let back = arrow::compute::concat_batches(&schema(), &back).unwrap();
    assert_eq!(back, data(0, 2, 1).concat().unwrap());

    let cdir = tmp.path().join("c");
    let (_, mut c) = sink(&cdir, "csv", &[("header", "true"), ("sep", ";")]);
    let s = Arc::new(Schema::new(vec![
        Field::new("s", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
    ]));
    let b = RecordBatch::try_new(
        s.clone(),
        vec![
            Arc::new(StringArray::from(vec![
                Some("a;b"),
                Some(""),
                None,
                Some("say \"hi\""),
                Some(" x "),
            ])),
            Arc::new(Int64Array::from(vec![
                Some(1),
                None,
                Some(3),
                Some(4),
                Some(5),
            ])),
        ],
    )
    .unwrap();
    c.add_batch(
        0,
        &BatchData {
            schema: s.clone(),
            partitions: vec![vec![b]],
        },
    )
    .unwrap();
    let f = &committed_files(&cdir).unwrap().unwrap()[0];
    assert!(f.to_string_lossy().ends_with("-c000.csv"));
    assert_eq!(
        fs::read_to_string(f).unwrap(),
        "s;n\n\"a;b\";1\n\"\";\n;3\n\"say \\\"hi\\\"\";4\nx;5\n"
    );
    let mut o = HashMap::new();
    o.insert("header".to_string(), "true".to_string());
    o.insert("sep".to_string(), ";".to_string());
    let back = read_sink_output_with_options(&cdir, "csv", Some(s.clone()), &o).unwrap();
    let back = arrow::compute::concat_batches(&s, &back).unwrap();
    assert_eq!(back.num_rows(), 5);
    assert_eq!(
        back.column(1)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .value(4),
        5
    );
    assert_eq!(back.column(0).as_string::<i32>().value(0), "a;b");
}

#[test]
fn uris() {
    assert_eq!(
        path_to_uri(Path::new("/data/out/a b%.parquet")),
        "file:///data/out/a%20b%25.parquet"
    );
    assert_eq!(
        local_path("file:///data/out/a%20b%25.parquet"),
        PathBuf::from("/data/out/a b%.parquet")
    );
    assert_eq!(local_path("file:/data/x"), PathBuf::from("/data/x"));
    assert_eq!(
        entry_path("part-0.json", Path::new("/o")),
        PathBuf::from("/o/part-0.json")
    );
}

/// The user of `data(..)` rows: `u<i>`, or null every third row.
fn users(batches: &[RecordBatch]) -> Vec<Option<String>> {
    let mut v: Vec<Option<String>> = batches
        .iter()
        .flat_map(|b| {
            let idx = b.schema().index_of("user").unwrap();
            let c = b.column(idx).as_string::<i32>().clone();
            c.iter().map(|x| x.map(str::to_string)).collect::<Vec<_>>()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn partition_by_writes_hive_folders_and_reads_them_back_as_columns() {
    for format in ["parquet", "json", "csv"] {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let (_, mut s) = sink(&out, format, &[("partitionBy", "user")]);
        s.add_batch(0, &data(0, 6, 2)).unwrap();
        // users u1 u2 u4 u5 and null (rows 0 and 3): one folder each, a file per task in each
        let mut dirs: Vec<String> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("user="))
            .collect();
        dirs.sort();
        assert_eq!(
            dirs,
            [
                "user=__HIVE_DEFAULT_PARTITION__",
                "user=u1",
                "user=u2",
                "user=u4",
                "user=u5"
            ],
            "{format}"
        );
        // rows 0 (task 0) and 3 (task 1) have no user: two files in the default folder
        assert_eq!(
            count_data_files(&out.join("user=__HIVE_DEFAULT_PARTITION__")),
            2
        );
        assert_eq!(s.metrics().get("numFiles").map(String::as_str), Some("6"));
        // the data files hold the other columns only
        let f = committed_files(&out).unwrap().unwrap();
        assert_eq!(f.len(), 6);
        let one = read_sink_output(&f[0], format, None).unwrap();
        assert!(one[0].schema().index_of("user").is_err(), "{format}");
        // read back (through the manifest): the partition column is last, typed as given
        let back = read_sink_output(&out, format, Some(schema())).unwrap();
        let names: Vec<String> = back[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["ts", "amount", "user"], "{format}");
        assert_eq!(
            users(&back),
            [
                None,
                None,
                Some("u1".into()),
                Some("u2".into()),
                Some("u4".into()),
                Some("u5".into())
            ]
        );
        assert_eq!(amounts(&back), [0.0, 1.5, 3.0, 4.5, 6.0, 7.5], "{format}");
    }
}

#[test]
fn partition_values_are_escaped_and_types_inferred_on_read() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (_, mut s) = sink(&out, "json", &[("partitionBy", "[\"ts\"]")]);
    s.add_batch(0, &data(0, 2, 1)).unwrap();
    // 2026-09-15 12:01:00 and 12:02:00 UTC: ':' is escaped as in Hive
    assert!(out.join("ts=2026-09-15 12%3A01%3A00").is_dir());
    assert!(out.join("ts=2026-09-15 12%3A02%3A00").is_dir());
    // the manifest's URIs encode the '%' of the folder names
    let m = fs::read_to_string(out.join("_spark_metadata/0")).unwrap();
    assert!(
        m.contains("/ts=2026-09-15%2012%253A01%253A00/part-00000-"),
        "{m}"
    );
    // without a schema, the folder values are inferred as timestamps (Spark's inference)
    let back = read_sink_output(&out, "json", None).unwrap();
    let ts = back[0].schema().field_with_name("ts").unwrap().clone();
    assert!(matches!(ts.data_type(), DataType::Timestamp(..)), "{ts:?}");
    let mut micros: Vec<i64> = back
        .iter()
        .flat_map(|b| {
            let c = arrow::compute::cast(
                b.column(b.schema().index_of("ts").unwrap()),
                &DataType::Timestamp(TimeUnit::Microsecond, None),
            )
            .unwrap();
            c.as_primitive::<TimestampMicrosecondType>()
                .values()
                .to_vec()
        })
        .collect();
    micros.sort();
    assert_eq!(micros, [1_789_473_660_000_000, 1_789_473_720_000_000]);
}

#[test]
fn partition_by_is_checked_at_start() {
    let options: HashMap<String, String> = [("partitionBy".to_string(), "nope".to_string())].into();
    let p = FileSinkProvider::try_new("parquet", "/tmp/x", &options).unwrap();
    let err = p.check_schema(&schema()).unwrap_err();
    assert!(err.is(class::PARTITION_COLUMN_NOT_FOUND_IN_SCHEMA), "{err}");
    assert!(err.to_string().contains("`nope`"), "{err}");
    let options: HashMap<String, String> =
        [("partitionBy".to_string(), "ts,user,amount".to_string())].into();
    let p = FileSinkProvider::try_new("parquet", "/tmp/x", &options).unwrap();
    let err = p.check_schema(&schema()).unwrap_err();
    assert!(err.is(class::ALL_PARTITION_COLUMNS_NOT_ALLOWED), "{err}");
}

#[test]
fn batch_save_with_partition_by() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("w");
    let options: HashMap<String, String> = [("partitionBy".to_string(), "user".to_string())].into();
    let files = save_files(
        &out,
        "parquet",
        &options,
        SaveMode::ErrorIfExists,
        &data(0, 3, 1),
    )
    .unwrap();
    assert_eq!(files.len(), 3);
    assert!(out.join("user=u1").is_dir() && out.join("_SUCCESS").is_file());
    // no manifest: the reader lists the folders and infers the (string) partition column
    let back = read_sink_output(&out, "parquet", None).unwrap();
    assert_eq!(users(&back), [None, Some("u1".into()), Some("u2".into())]);
}
