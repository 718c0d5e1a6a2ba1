//! Types both ways, schema strings (DDL and `StructType.json()`), local data under a schema.

use super::*;

#[test]
fn types_round_trip() {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
    let all = vec![
        DataType::Utf8,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Float32,
        DataType::Float64,
        DataType::Boolean,
        DataType::Binary,
        DataType::Date32,
        DataType::Null,
        ts.clone(),
        DataType::Decimal128(12, 3),
        DataType::new_list(DataType::Int32, true),
        DataType::Struct(vec![Field::new("a", DataType::Utf8, false)].into()),
        DataType::Map(
            Arc::new(Field::new_struct(
                "entries",
                vec![
                    Field::new("key", DataType::Utf8, false),
                    Field::new("value", DataType::Int64, true),
                ],
                false,
            )),
            false,
        ),
        DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano),
        DataType::Interval(arrow::datatypes::IntervalUnit::YearMonth),
        DataType::Duration(TimeUnit::Microsecond),
    ];
    for t in all {
        let p = types::to_proto(&t).unwrap();
        assert_eq!(types::from_proto(&p).unwrap(), t, "{t} as {p:?}");
    }
    // A zoned timestamp is Spark's `timestamp`, as Sluice's one timestamp type.
    let zoned = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    assert!(matches!(
        types::to_proto(&zoned).unwrap().kind,
        Some(proto::data_type::Kind::Timestamp(_))
    ));
    let schema = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
    match types::schema_to_proto(&schema).unwrap().kind {
        Some(proto::data_type::Kind::Struct(s)) => {
            assert_eq!(s.fields[0].name, "x");
            assert!(s.fields[0].nullable);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn schemas_parse_from_ddl_and_json() {
    let ddl = types::parse_schema("ts TIMESTAMP, user STRING, amount DECIMAL(10,2)").unwrap();
    let json = types::parse_schema(
        r#"{"type":"struct","fields":[
            {"name":"ts","type":"timestamp","nullable":true,"metadata":{}},
            {"name":"user","type":"string","nullable":true,"metadata":{}},
            {"name":"amount","type":"decimal(10,2)","nullable":true,"metadata":{}}]}"#,
    )
    .unwrap();
    assert_eq!(ddl, json);
    let nested = types::parse_schema(
        r#"{"type":"struct","fields":[{"name":"tags","type":{"type":"array","elementType":"string","containsNull":false},"nullable":false,"metadata":{}},
        {"name":"m","type":{"type":"map","keyType":"string","valueType":"long","valueContainsNull":true},"nullable":true,"metadata":{}}]}"#,
    )
    .unwrap();
    assert_eq!(
        nested.field(0).data_type(),
        &DataType::new_list(DataType::Utf8, false)
    );
    assert!(!nested.field(0).is_nullable());
    assert!(matches!(nested.field(1).data_type(), DataType::Map(_, _)));
    let err = types::parse_schema(r#"{"type":"struct","fields":[{"name":"a","type":"nonsense"}]}"#)
        .unwrap_err();
    assert!(err.message.contains("nonsense"), "{}", err.message);
    assert!(types::parse_schema("a INT,,").is_err());
}

#[test]
fn local_relation_takes_the_schema_the_client_gave() {
    let s = session();
    // createDataFrame(rows, "id long, name string"): the table is built as inferred, then
    // renamed and cast on the server.
    let schema = Arc::new(Schema::new(vec![
        Field::new("_1", DataType::Int32, true),
        Field::new("_2", DataType::Utf8, true),
    ]));
    let b = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from(vec![7])),
            Arc::new(StringArray::from(vec!["z"])),
        ],
    )
    .unwrap();
    let plan = rel(
        1,
        RelType::LocalRelation(proto::LocalRelation {
            data: Some(crate::ipc::write_batch(&b).unwrap().into()),
            schema: Some(
                r#"{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},{"name":"name","type":"string","nullable":true,"metadata":{}}]}"#
                    .into(),
            ),
        }),
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["id", "name"]);
    assert_eq!(f.schema().field(0).data_type(), &DataType::Int64);
    assert_eq!(rows(&f), ["7|z"]);
    // Only a schema: an empty frame.
    let empty = rel(
        2,
        RelType::LocalRelation(proto::LocalRelation {
            data: None,
            schema: Some("a INT".into()),
        }),
    );
    let f = frame(&s, &empty).unwrap();
    assert_eq!(names(&f), ["a"]);
    assert!(rows(&f).is_empty());
}

/// `printSchema()` as Spark prints it (the Kafka source's schema in the seed document, and
/// nested types).
#[test]
fn tree_strings_as_print_schema_prints_them() {
    let kafka = Schema::new(vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("topic", DataType::Utf8, true),
        Field::new("partition", DataType::Int32, true),
        Field::new("offset", DataType::Int64, true),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
        Field::new("timestampType", DataType::Int32, true),
    ]);
    assert_eq!(
        types::tree_string(&kafka, None),
        "root\n |-- key: binary (nullable = true)\n |-- value: binary (nullable = true)\n \
         |-- topic: string (nullable = true)\n |-- partition: integer (nullable = true)\n \
         |-- offset: long (nullable = true)\n |-- timestamp: timestamp (nullable = true)\n \
         |-- timestampType: integer (nullable = true)\n"
    );
    let nested = types::parse_schema(
        "window STRUCT<start: TIMESTAMP, end: TIMESTAMP> NOT NULL, xs ARRAY<INT>, m MAP<STRING, BIGINT>",
    )
    .unwrap();
    assert_eq!(
        types::tree_string(&nested, None),
        "root\n |-- window: struct (nullable = false)\n |    |-- start: timestamp (nullable = true)\n \
         |    |-- end: timestamp (nullable = true)\n |-- xs: array (nullable = true)\n \
         |    |-- element: integer (containsNull = true)\n |-- m: map (nullable = true)\n \
         |    |-- key: string\n |    |-- value: long (valueContainsNull = true)\n"
    );
    assert_eq!(
        types::tree_string(&nested, Some(1)),
        "root\n |-- window: struct (nullable = false)\n |-- xs: array (nullable = true)\n \
         |-- m: map (nullable = true)\n"
    );
}
