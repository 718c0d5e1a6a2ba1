//! Streaming reads and what PySpark builds over them: watermarks, deduplication, windowed
//! aggregates, stream-static joins, SQL over stream views, and a planned stream that runs.

use super::*;

fn json_stream(dir: &str, schema: &str) -> proto::Relation {
    rel(
        1,
        RelType::Read(proto::Read {
            is_streaming: true,
            read_type: Some(proto::read::ReadType::DataSource(proto::read::DataSource {
                format: Some("json".into()),
                schema: Some(schema.into()),
                options: [("maxFilesPerTrigger".to_string(), "1".to_string())].into(),
                paths: vec![dir.into()],
                predicates: vec![],
                source_name: None,
            })),
        }),
    )
}

fn watermark(id: i64, input: proto::Relation, column: &str, delay: &str) -> proto::Relation {
    rel(
        id,
        RelType::WithWatermark(Box::new(proto::WithWatermark {
            input: Some(Box::new(input)),
            event_time: column.into(),
            delay_threshold: delay.into(),
        })),
    )
}

/// `spark.readStream.schema(..).json(dir).withWatermark("ts", "10 minutes")
///  .groupBy(F.window("ts", "5 minutes")).count()`
#[test]
fn windowed_count_over_a_streaming_json_read() {
    let s = session();
    let dir = tempfile::tempdir().unwrap();
    let read = json_stream(dir.path().to_str().unwrap(), "ts TIMESTAMP, user STRING");
    let read_frame = frame(&s, &read).unwrap();
    assert!(read_frame.is_streaming());
    assert_eq!(names(&read_frame), ["ts", "user"]);
    let plan = rel(
        3,
        RelType::Aggregate(Box::new(proto::Aggregate {
            input: Some(Box::new(watermark(2, read, "ts", "10 minutes"))),
            group_type: proto::aggregate::GroupType::Groupby as i32,
            grouping_expressions: vec![call("window", vec![col("ts"), string("5 minutes")])],
            aggregate_expressions: vec![alias(call("count", vec![int(1)]), "count")],
            pivot: None,
            grouping_sets: vec![],
        })),
    );
    let f = frame(&s, &plan).unwrap();
    assert!(f.is_streaming());
    assert_eq!(names(&f), ["window", "count"]);
    let schema = f.schema();
    match schema.field(0).data_type() {
        DataType::Struct(fs) => {
            let n: Vec<&str> = fs.iter().map(|f| f.name().as_str()).collect();
            assert_eq!(n, ["start", "end"]);
        }
        other => panic!("window is {other}"),
    }
    assert_eq!(schema.field(1).data_type(), &DataType::Int64);
    // sum over a key with Spark's name for the unaliased aggregate.
    let plan = rel(
        4,
        RelType::Aggregate(Box::new(proto::Aggregate {
            input: Some(Box::new(json_stream(
                dir.path().to_str().unwrap(),
                "k STRING, x INT",
            ))),
            group_type: proto::aggregate::GroupType::Groupby as i32,
            grouping_expressions: vec![col("k")],
            aggregate_expressions: vec![call("sum", vec![col("x")])],
            pivot: None,
            grouping_sets: vec![],
        })),
    );
    assert_eq!(names(&frame(&s, &plan).unwrap()), ["k", "sum(x)"]);
}

#[test]
fn watermark_then_drop_duplicates_on_a_stream() {
    let s = session();
    let dir = tempfile::tempdir().unwrap();
    // readStream.schema(StructType.json()): the schema as Spark's JSON.
    let schema_json = r#"{"type":"struct","fields":[{"name":"id","type":"string","nullable":true,"metadata":{}},{"name":"ts","type":"timestamp","nullable":true,"metadata":{}}]}"#;
    let read = json_stream(dir.path().to_str().unwrap(), schema_json);
    for within in [false, true] {
        let plan = rel(
            3,
            RelType::Deduplicate(Box::new(proto::Deduplicate {
                input: Some(Box::new(watermark(2, read.clone(), "ts", "10 minutes"))),
                column_names: vec!["id".into(), "ts".into()],
                all_columns_as_keys: None,
                within_watermark: Some(within),
            })),
        );
        let f = frame(&s, &plan).unwrap();
        assert!(f.is_streaming());
        assert_eq!(names(&f), ["id", "ts"]);
        assert_eq!(
            f.schema().field(1).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, None)
        );
    }
}

/// The scenario path: readStream → withWatermark → dropDuplicates → createOrReplaceTempView
/// → spark.sql(query).
#[test]
fn spark_sql_over_a_watermarked_deduplicated_stream_view() {
    let s = session();
    let dir = tempfile::tempdir().unwrap();
    let read = json_stream(
        dir.path().to_str().unwrap(),
        "ts TIMESTAMP, user STRING, id STRING",
    );
    let dedup = rel(
        3,
        RelType::Deduplicate(Box::new(proto::Deduplicate {
            input: Some(Box::new(watermark(2, read, "ts", "10 minutes"))),
            column_names: vec!["id".into()],
            all_columns_as_keys: None,
            within_watermark: Some(true),
        })),
    );
    create_temp_view(&s, "events", &dedup, true).unwrap();
    let q = rel(
        4,
        RelType::Sql(proto::Sql {
            query: "SELECT window.start AS start, window.end AS end, count(*) AS count FROM \
                    events GROUP BY window(ts, '5 minutes')"
                .into(),
            ..Default::default()
        }),
    );
    let f = frame(&s, &q).unwrap();
    assert!(f.is_streaming());
    assert_eq!(names(&f), ["start", "end", "count"]);
}

/// `events.join(users, "user")` and `events.join(users, events.user == users.user, "left")`
/// for a stream and a static DataFrame.
#[test]
fn stream_static_joins() {
    let s = session();
    let dir = tempfile::tempdir().unwrap();
    let events = json_stream(dir.path().to_str().unwrap(), "ts TIMESTAMP, user STRING");
    let users = {
        let schema = Arc::new(Schema::new(vec![
            Field::new("user", DataType::Utf8, true),
            Field::new("country", DataType::Utf8, true),
        ]));
        let b = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a"])),
                Arc::new(StringArray::from(vec!["UK"])),
            ],
        )
        .unwrap();
        local(5, &b)
    };
    let using = rel(
        6,
        RelType::Join(Box::new(proto::Join {
            left: Some(Box::new(events.clone())),
            right: Some(Box::new(users.clone())),
            join_condition: None,
            join_type: proto::join::JoinType::Inner as i32,
            using_columns: vec!["user".into()],
            join_data_type: None,
        })),
    );
    let f = frame(&s, &using).unwrap();
    assert!(f.is_streaming());
    assert_eq!(names(&f), ["user", "ts", "country"]);
    let on = rel(
        7,
        RelType::Join(Box::new(proto::Join {
            left: Some(Box::new(events)),
            right: Some(Box::new(users)),
            join_condition: Some(call("==", vec![col_of("user", 1), col_of("user", 5)])),
            join_type: proto::join::JoinType::LeftOuter as i32,
            using_columns: vec![],
            join_data_type: None,
        })),
    );
    let f = frame(
        &s,
        &project(
            8,
            on,
            vec![col_of("ts", 1), col_of("user", 1), col("country")],
        ),
    )
    .unwrap();
    assert!(f.is_streaming());
    assert_eq!(names(&f), ["ts", "user", "country"]);
}

/// Names resolve ignoring case, as Spark's do by default; `session_window` keys a stream.
#[test]
fn names_ignore_case_and_session_windows_plan() {
    let s = session();
    let plan = project(2, people(1), vec![col("ID"), col("Name")]);
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["ID", "Name"]);
    assert_eq!(rows(&f), ["1|a", "2|b", "3|c"]);
    let dir = tempfile::tempdir().unwrap();
    let read = json_stream(dir.path().to_str().unwrap(), "ts TIMESTAMP, user STRING");
    let plan = agg(
        3,
        watermark(2, read, "ts", "10 minutes"),
        vec![
            call("session_window", vec![col("ts"), string("5 minutes")]),
            col("user"),
        ],
        vec![alias(call("count", vec![int(1)]), "count")],
    );
    let f = frame(&s, &plan).unwrap();
    assert!(f.is_streaming());
    assert_eq!(names(&f), ["session_window", "user", "count"]);
}

/// A planned stream runs after the planner's views are gone: `readStream.json(dir)
/// .withWatermark(..).groupBy(F.window(..), "user").count()` into a foreachBatch, update mode.
#[test]
fn a_planned_windowed_stream_runs() {
    let s = session();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(
        data.join("1.json"),
        "{\"ts\": \"2026-09-15T12:01:00Z\", \"user\": \"a\"}\n\
         {\"ts\": \"2026-09-15T12:02:00Z\", \"user\": \"a\"}\n\
         {\"ts\": \"2026-09-15T12:07:00Z\", \"user\": \"b\"}\n",
    )
    .unwrap();
    let read = json_stream(data.to_str().unwrap(), "ts TIMESTAMP, user STRING");
    let counted = agg(
        3,
        watermark(2, read, "ts", "10 minutes"),
        vec![
            call("window", vec![col_of("ts", 2), string("5 minutes")]),
            col("user"),
        ],
        vec![alias(call("count", vec![int(1)]), "count")],
    );
    let plan = project(
        4,
        counted,
        vec![
            alias(col("window.start"), "start"),
            col("user"),
            col("count"),
        ],
    );
    let f = frame(&s, &plan).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = seen.clone();
    let q = f
        .write_stream()
        .output_mode(sluice::OutputMode::Update)
        .option(
            "checkpointLocation",
            dir.path().join("ckpt").to_str().unwrap(),
        )
        .trigger(sluice::Trigger::AvailableNow)
        .foreach_batch(move |batch, _id| {
            let opts = FormatOptions::default();
            for b in batch.batches() {
                let fmts: Vec<_> = b
                    .columns()
                    .iter()
                    .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
                    .collect();
                for i in 0..b.num_rows() {
                    let row: Vec<String> = fmts.iter().map(|f| f.value(i).to_string()).collect();
                    sink.lock().unwrap().push(row.join("|"));
                }
            }
            Ok(())
        })
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let mut got = seen.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, ["2026-09-15T12:00:00|a|2", "2026-09-15T12:05:00|b|1"]);
}

fn aliased(id: i64, input: proto::Relation, name: &str) -> proto::Relation {
    rel(
        id,
        RelType::SubqueryAlias(Box::new(proto::SubqueryAlias {
            input: Some(Box::new(input)),
            alias: name.into(),
            qualifier: vec![],
        })),
    )
}

/// `imps.alias("i").join(clicks.alias("c"), F.expr("i.ad_id = c.ad_id AND c.click_time >=
/// i.imp_time AND c.click_time <= i.imp_time + INTERVAL 15 MINUTES"), "leftOuter")
/// .select(F.col("i.ad_id"), "imp_time", F.col("c.click_time"), "user")`.
#[test]
fn stream_stream_join_of_aliased_watermarked_streams() {
    let s = session();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let read = |id: i64, dir: &tempfile::TempDir, schema: &str| {
        let mut r = json_stream(dir.path().to_str().unwrap(), schema);
        r.common.as_mut().unwrap().plan_id = Some(id);
        r
    };
    let imps = watermark(
        2,
        read(1, &d1, "ad_id STRING, imp_time TIMESTAMP"),
        "imp_time",
        "10 minutes",
    );
    let clicks = watermark(
        12,
        read(11, &d2, "ad_id STRING, click_time TIMESTAMP, user STRING"),
        "click_time",
        "20 minutes",
    );
    let cond = e(ExprType::ExpressionString(pe::ExpressionString {
        expression: "i.ad_id = c.ad_id AND c.click_time >= i.imp_time AND c.click_time <= \
                     i.imp_time + INTERVAL 15 MINUTES"
            .into(),
    }));
    let join = rel(
        30,
        RelType::Join(Box::new(proto::Join {
            left: Some(Box::new(aliased(3, imps, "i"))),
            right: Some(Box::new(aliased(13, clicks, "c"))),
            join_condition: Some(cond),
            join_type: proto::join::JoinType::LeftOuter as i32,
            using_columns: vec![],
            join_data_type: None,
        })),
    );
    let plan = project(
        31,
        join,
        vec![
            col("i.ad_id"),
            col("imp_time"),
            col_of("click_time", 13),
            col("user"),
        ],
    );
    let f = frame(&s, &plan).unwrap();
    assert!(f.is_streaming());
    assert_eq!(names(&f), ["ad_id", "imp_time", "click_time", "user"]);
}
