//! Plans built as PySpark 4.2 builds them (`pyspark/sql/connect/plan.py`, `column.py`,
//! `functions/builtin.py`), planned into frames: schemas, `is_streaming`, and rows.

use std::sync::Arc;

use arrow::array::{Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};

use super::*;
use crate::proto::expression::{self as pe, literal::LiteralType, ExprType};
use crate::session::{ConnectSession, SessionSettings};

fn session() -> Arc<ConnectSession> {
    ConnectSession::new("s", "u", SessionSettings::default()).unwrap()
}

fn rel(id: i64, rt: RelType) -> proto::Relation {
    proto::Relation {
        common: Some(proto::RelationCommon {
            plan_id: Some(id),
            ..Default::default()
        }),
        rel_type: Some(rt),
    }
}

fn e(t: ExprType) -> proto::Expression {
    proto::Expression {
        common: None,
        expr_type: Some(t),
    }
}

fn col(name: &str) -> proto::Expression {
    e(ExprType::UnresolvedAttribute(pe::UnresolvedAttribute {
        unparsed_identifier: name.into(),
        plan_id: None,
        is_metadata_column: None,
    }))
}

fn col_of(name: &str, plan_id: i64) -> proto::Expression {
    e(ExprType::UnresolvedAttribute(pe::UnresolvedAttribute {
        unparsed_identifier: name.into(),
        plan_id: Some(plan_id),
        is_metadata_column: None,
    }))
}

fn lit(v: LiteralType) -> proto::Expression {
    e(ExprType::Literal(pe::Literal {
        data_type: None,
        literal_type: Some(v),
    }))
}

fn int(v: i32) -> proto::Expression {
    lit(LiteralType::Integer(v))
}

fn string(v: &str) -> proto::Expression {
    lit(LiteralType::String(v.into()))
}

fn call(name: &str, args: Vec<proto::Expression>) -> proto::Expression {
    e(ExprType::UnresolvedFunction(pe::UnresolvedFunction {
        function_name: name.into(),
        arguments: args,
        is_distinct: false,
        is_user_defined_function: false,
        is_internal: None,
    }))
}

fn alias(x: proto::Expression, name: &str) -> proto::Expression {
    e(ExprType::Alias(Box::new(pe::Alias {
        expr: Some(Box::new(x)),
        name: vec![name.into()],
        metadata: None,
    })))
}

fn local(id: i64, batch: &RecordBatch) -> proto::Relation {
    rel(
        id,
        RelType::LocalRelation(proto::LocalRelation {
            data: Some(crate::ipc::write_batch(batch).unwrap().into()),
            schema: None,
        }),
    )
}

/// `createDataFrame([(1, "a"), (2, "b"), (3, "c")], ["id", "name"])` (ids `id`, names given).
fn people(id: i64) -> proto::Relation {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from(vec![1, 2, 3])),
            Arc::new(StringArray::from(vec!["a", "b", "c"])),
        ],
    )
    .unwrap();
    local(id, &batch)
}

fn project(id: i64, input: proto::Relation, exprs: Vec<proto::Expression>) -> proto::Relation {
    rel(
        id,
        RelType::Project(Box::new(proto::Project {
            input: Some(Box::new(input)),
            expressions: exprs,
        })),
    )
}

fn filter(id: i64, input: proto::Relation, cond: proto::Expression) -> proto::Relation {
    rel(
        id,
        RelType::Filter(Box::new(proto::Filter {
            input: Some(Box::new(input)),
            condition: Some(cond),
        })),
    )
}

fn names(f: &StreamFrame) -> Vec<String> {
    f.schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

/// The rows as `a|b` strings, sorted.
fn rows(f: &StreamFrame) -> Vec<String> {
    let opts = FormatOptions::default().with_null("null");
    let mut out = Vec::new();
    for b in f.collect().unwrap() {
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for i in 0..b.num_rows() {
            out.push(
                fmts.iter()
                    .map(|f| f.value(i).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    out.sort();
    out
}

#[test]
fn select_filter_with_spark_names() {
    let s = session();
    // df.select("id", F.col("id") + 1, F.upper("name")).filter(F.col("id") > 1)
    let plan = filter(
        3,
        project(
            2,
            people(1),
            vec![
                col("id"),
                call("+", vec![col("id"), int(1)]),
                call("upper", vec![col("name")]),
            ],
        ),
        call(">", vec![col("id"), int(1)]),
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["id", "(id + 1)", "upper(name)"]);
    assert!(!f.is_streaming());
    assert_eq!(rows(&f), ["2|3|B", "3|4|C"]);
}

#[test]
fn with_columns_replaces_in_place_and_appends() {
    let s = session();
    let plan = rel(
        2,
        RelType::WithColumns(Box::new(proto::WithColumns {
            input: Some(Box::new(people(1))),
            aliases: vec![
                pe::Alias {
                    expr: Some(Box::new(call("*", vec![col("id"), int(10)]))),
                    name: vec!["ID".into()],
                    metadata: None,
                },
                pe::Alias {
                    expr: Some(Box::new(call("lower", vec![col("name")]))),
                    name: vec!["low".into()],
                    metadata: None,
                },
            ],
        })),
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["ID", "name", "low"]);
    assert_eq!(rows(&f), ["10|a|a", "20|b|b", "30|c|c"]);
}

#[test]
fn drop_and_rename_both_forms() {
    let s = session();
    let renamed = rel(
        2,
        RelType::WithColumnsRenamed(Box::new(proto::WithColumnsRenamed {
            input: Some(Box::new(people(1))),
            rename_columns_map: Default::default(),
            renames: vec![proto::with_columns_renamed::Rename {
                col_name: "name".into(),
                new_col_name: "who".into(),
            }],
        })),
    );
    let f = frame(&s, &renamed).unwrap();
    assert_eq!(names(&f), ["id", "who"]);
    let mut map = HashMap::new();
    map.insert("id".to_string(), "key".to_string());
    let by_map = rel(
        3,
        RelType::WithColumnsRenamed(Box::new(proto::WithColumnsRenamed {
            input: Some(Box::new(renamed)),
            rename_columns_map: map,
            renames: vec![],
        })),
    );
    assert_eq!(names(&frame(&s, &by_map).unwrap()), ["key", "who"]);
    let dropped = rel(
        4,
        RelType::Drop(Box::new(proto::Drop {
            input: Some(Box::new(by_map)),
            columns: vec![],
            column_names: vec!["KEY".into()],
        })),
    );
    let f = frame(&s, &dropped).unwrap();
    assert_eq!(names(&f), ["who"]);
    assert_eq!(rows(&f), ["a", "b", "c"]);
}

/// `df1.join(df2, df1.id == df2.id).select(df1.id, df2.score)`: plan ids pick the sides.
#[test]
fn join_with_plan_id_qualified_condition() {
    let s = session();
    let scores = {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("score", DataType::Int32, true),
        ]));
        let b = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(vec![2, 3, 4])),
                Arc::new(Int32Array::from(vec![20, 30, 40])),
            ],
        )
        .unwrap();
        local(10, &b)
    };
    let join = |jt: proto::join::JoinType| {
        rel(
            20,
            RelType::Join(Box::new(proto::Join {
                left: Some(Box::new(people(1))),
                right: Some(Box::new(scores.clone())),
                join_condition: Some(call("==", vec![col_of("id", 1), col_of("id", 10)])),
                join_type: jt as i32,
                using_columns: vec![],
                join_data_type: None,
            })),
        )
    };
    let j = frame(&s, &join(proto::join::JoinType::Inner)).unwrap();
    assert_eq!(names(&j), ["id", "name", "id", "score"]);
    let plan = project(
        21,
        join(proto::join::JoinType::Inner),
        vec![col_of("id", 1), col_of("score", 10), col("name")],
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["id", "score", "name"]);
    assert_eq!(rows(&f), ["2|20|b", "3|30|c"]);
    // A filter over the join keeps the sides apart for the projection after it.
    let plan = project(
        22,
        filter(
            23,
            join(proto::join::JoinType::LeftOuter),
            call(">", vec![col_of("id", 1), int(1)]),
        ),
        vec![col_of("id", 1), col_of("id", 10)],
    );
    assert_eq!(rows(&frame(&s, &plan).unwrap()), ["2|2", "3|3"]);
    // left anti: the left rows without a match.
    let f = frame(&s, &join(proto::join::JoinType::LeftAnti)).unwrap();
    assert_eq!(rows(&f), ["1|a"]);
    // using columns: the key once, first.
    let using = rel(
        30,
        RelType::Join(Box::new(proto::Join {
            left: Some(Box::new(people(1))),
            right: Some(Box::new(scores.clone())),
            join_condition: None,
            join_type: proto::join::JoinType::FullOuter as i32,
            using_columns: vec!["id".into()],
            join_data_type: None,
        })),
    );
    let f = frame(&s, &using).unwrap();
    assert_eq!(names(&f), ["id", "name", "score"]);
    assert_eq!(rows(&f), ["1|a|null", "2|b|20", "3|c|30", "4|null|40"]);
}

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

#[test]
fn union_by_position_and_by_name() {
    let s = session();
    let u = |by_name: bool, allow: bool, right: proto::Relation| {
        rel(
            9,
            RelType::SetOp(Box::new(proto::SetOperation {
                left_input: Some(Box::new(people(1))),
                right_input: Some(Box::new(right)),
                set_op_type: proto::set_operation::SetOpType::Union as i32,
                is_all: Some(true),
                by_name: Some(by_name),
                allow_missing_columns: Some(allow),
            })),
        )
    };
    let f = frame(&s, &u(false, false, people(2))).unwrap();
    assert_eq!(rows(&f).len(), 6);
    // unionByName: the right side's columns in the left side's order.
    let swapped = project(3, people(2), vec![col("name"), col("id")]);
    let f = frame(&s, &u(true, false, swapped)).unwrap();
    assert_eq!(names(&f), ["id", "name"]);
    assert_eq!(rows(&f), ["1|a", "1|a", "2|b", "2|b", "3|c", "3|c"]);
    let only_id = project(4, people(2), vec![col("id"), alias(string("x"), "extra")]);
    let f = frame(&s, &u(true, true, only_id)).unwrap();
    assert_eq!(names(&f), ["id", "name", "extra"]);
    assert!(rows(&f).contains(&"1|null|x".to_string()));
    assert!(rows(&f).contains(&"1|a|null".to_string()));
}

#[test]
fn sql_over_a_temp_view_of_a_dataframe() {
    let s = session();
    create_temp_view(&s, "people", &people(1), false).unwrap();
    let err = create_temp_view(&s, "people", &people(1), false).unwrap_err();
    assert!(err.message.contains("already exists"), "{}", err.message);
    create_temp_view(&s, "people", &people(1), true).unwrap();
    let mut args = HashMap::new();
    args.insert(
        "min".to_string(),
        pe::Literal {
            data_type: None,
            literal_type: Some(LiteralType::Integer(2)),
        },
    );
    let plan = rel(
        2,
        RelType::Sql(proto::Sql {
            query: "SELECT name, id * 2 AS twice FROM people WHERE id >= :min AND name <> ':min'"
                .into(),
            args,
            ..Default::default()
        }),
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["name", "twice"]);
    assert_eq!(rows(&f), ["b|4", "c|6"]);
    // Positional arguments as expressions (PySpark 4.2 sends `pos_arguments`).
    let plan = rel(
        3,
        RelType::Sql(proto::Sql {
            query: "SELECT count(*) AS n FROM people WHERE name = ?".into(),
            pos_arguments: vec![string("a")],
            ..Default::default()
        }),
    );
    assert_eq!(rows(&frame(&s, &plan).unwrap()), ["1"]);
    // The planner's own views are gone afterwards; the user's view stays.
    let ctx = s.sluice.context();
    let names = ctx
        .catalog("datafusion")
        .unwrap()
        .schema("public")
        .unwrap()
        .table_names();
    assert!(
        names.iter().all(|n| !n.starts_with("__sluice")),
        "{names:?}"
    );
    assert!(names.contains(&"people".to_string()));
}

#[test]
fn group_by_agg_on_batch_rows_and_range() {
    let s = session();
    // spark.range(0, 10, 3)
    let range = rel(
        1,
        RelType::Range(proto::Range {
            start: Some(0),
            end: 10,
            step: 3,
            num_partitions: None,
        }),
    );
    let f = frame(&s, &range).unwrap();
    assert_eq!(names(&f), ["id"]);
    assert_eq!(rows(&f), ["0", "3", "6", "9"]);
    // spark.range(..).groupBy((col("id") % 2).alias("odd")).agg(F.sum("id"), F.count("*"))
    let star = e(ExprType::UnresolvedStar(pe::UnresolvedStar {
        unparsed_target: None,
        plan_id: None,
    }));
    let agg = rel(
        2,
        RelType::Aggregate(Box::new(proto::Aggregate {
            input: Some(Box::new(range)),
            group_type: proto::aggregate::GroupType::Groupby as i32,
            grouping_expressions: vec![alias(call("%", vec![col("id"), int(2)]), "odd")],
            aggregate_expressions: vec![call("sum", vec![col("id")]), call("count", vec![star])],
            pivot: None,
            grouping_sets: vec![],
        })),
    );
    let f = frame(&s, &agg).unwrap();
    assert_eq!(names(&f), ["odd", "sum(id)", "count(1)"]);
    assert_eq!(rows(&f), ["0|6|2", "1|12|2"]);
}

#[test]
fn show_string_is_one_row_of_text() {
    let s = session();
    let plan = rel(
        2,
        RelType::ShowString(Box::new(proto::ShowString {
            input: Some(Box::new(people(1))),
            num_rows: 2,
            truncate: 20,
            vertical: false,
        })),
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["show_string"]);
    let batches = f.collect().unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let text = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap()
        .value(0)
        .to_string();
    assert!(text.contains("| id|name|"), "{text}");
    assert!(text.contains("only showing top 2 rows"), "{text}");
}

#[test]
fn not_supported_relations_name_themselves() {
    let s = session();
    let plan = rel(
        2,
        RelType::Sample(Box::new(proto::Sample {
            input: Some(Box::new(people(1))),
            lower_bound: 0.0,
            upper_bound: 0.5,
            with_replacement: None,
            seed: None,
            deterministic_order: false,
        })),
    );
    let err = frame(&s, &plan).unwrap_err();
    assert_eq!(err.java_class, crate::error::java::UNSUPPORTED);
    assert!(
        err.message.contains("the Sample relation"),
        "{}",
        err.message
    );
}

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

#[test]
fn operators_and_functions_become_spark_sql() {
    let s = session();
    let when = call(
        "when",
        vec![
            call(">", vec![col("id"), int(1)]),
            string("big"),
            string("small"),
        ],
    );
    let cast = e(ExprType::Cast(Box::new(pe::Cast {
        expr: Some(Box::new(col("id"))),
        eval_mode: 0,
        cast_to_type: Some(pe::cast::CastToType::TypeStr("string".into())),
    })));
    let plan = project(
        2,
        people(1),
        vec![
            when,
            call("not", vec![call("==", vec![col("id"), int(2)])]),
            call("isNull", vec![col("name")]),
            call("in", vec![col("id"), int(1), int(3)]),
            cast,
            alias(call("startsWith", vec![col("name"), string("a")]), "sw"),
        ],
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(
        names(&f),
        [
            "CASE WHEN (id > 1) THEN big ELSE small END",
            "(NOT (id = 2))",
            "(name IS NULL)",
            "(id IN (1, 3))",
            "CAST(id AS STRING)",
            "sw"
        ]
    );
    assert_eq!(
        rows(&f),
        [
            "big|false|false|false|2|false",
            "big|true|false|true|3|false",
            "small|true|false|true|1|true"
        ]
    );
}

fn agg(
    id: i64,
    input: proto::Relation,
    keys: Vec<proto::Expression>,
    aggs: Vec<proto::Expression>,
) -> proto::Relation {
    rel(
        id,
        RelType::Aggregate(Box::new(proto::Aggregate {
            input: Some(Box::new(input)),
            group_type: proto::aggregate::GroupType::Groupby as i32,
            grouping_expressions: keys,
            aggregate_expressions: aggs,
            pivot: None,
            grouping_sets: vec![],
        })),
    )
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

fn micros(text: &str) -> i64 {
    let (d, t) = text.split_once(' ').unwrap();
    let days = {
        let mut it = d.split('-').map(|x| x.parse::<i64>().unwrap());
        let (y, m, dd) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        // days from civil (Howard Hinnant)
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + dd - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146097 + doe - 719468
    };
    let mut it = t.split(':').map(|x| x.parse::<i64>().unwrap());
    let (h, mi, se) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
    ((days * 24 + h) * 60 + mi) * 60_000_000 + se * 1_000_000
}

/// A batch windowed count, then `select(F.col("window.start"), ..)` and a struct extract.
#[test]
fn window_columns_on_batch_rows() {
    let s = session();
    let schema = Arc::new(Schema::new(vec![Field::new(
        "ts",
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        true,
    )]));
    let ts = arrow::array::TimestampMicrosecondArray::from(vec![
        micros("2026-09-15 12:01:00"),
        micros("2026-09-15 12:03:00"),
        micros("2026-09-15 12:07:00"),
    ])
    .with_timezone("UTC");
    let b = RecordBatch::try_new(schema, vec![Arc::new(ts)]).unwrap();
    let counted = agg(
        2,
        local(1, &b),
        vec![call("window", vec![col("ts"), string("5 minutes")])],
        vec![alias(call("count", vec![int(1)]), "count")],
    );
    let extract = e(ExprType::UnresolvedExtractValue(Box::new(
        pe::UnresolvedExtractValue {
            child: Some(Box::new(col("window"))),
            extraction: Some(Box::new(string("end"))),
        },
    )));
    let plan = project(3, counted, vec![col("window.start"), extract, col("count")]);
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["start", "window.end", "count"]);
    assert_eq!(
        rows(&f),
        [
            "2026-09-15T12:00:00|2026-09-15T12:05:00|2",
            "2026-09-15T12:05:00|2026-09-15T12:10:00|1"
        ]
    );
}

#[test]
fn sort_limit_offset_tail() {
    let s = session();
    let sorted = rel(
        2,
        RelType::Sort(Box::new(proto::Sort {
            input: Some(Box::new(people(1))),
            order: vec![pe::SortOrder {
                child: Some(Box::new(col("id"))),
                direction: pe::sort_order::SortDirection::Descending as i32,
                null_ordering: pe::sort_order::NullOrdering::SortNullsLast as i32,
            }],
            is_global: Some(true),
        })),
    );
    let limited = rel(
        3,
        RelType::Limit(Box::new(proto::Limit {
            input: Some(Box::new(sorted.clone())),
            limit: 2,
        })),
    );
    let f = frame(&s, &limited).unwrap();
    let collected: Vec<String> = {
        let opts = FormatOptions::default();
        f.collect()
            .unwrap()
            .iter()
            .flat_map(|b| {
                let c = ArrayFormatter::try_new(b.column(0).as_ref(), &opts).unwrap();
                (0..b.num_rows())
                    .map(|i| c.value(i).to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    assert_eq!(collected, ["3", "2"]);
    let offset = rel(
        4,
        RelType::Offset(Box::new(proto::Offset {
            input: Some(Box::new(sorted.clone())),
            offset: 2,
        })),
    );
    assert_eq!(rows(&frame(&s, &offset).unwrap()), ["1|a"]);
    let tail = rel(
        5,
        RelType::Tail(Box::new(proto::Tail {
            input: Some(Box::new(sorted)),
            limit: 1,
        })),
    );
    assert_eq!(rows(&frame(&s, &tail).unwrap()), ["1|a"]);
}

#[test]
fn literals_of_every_kind() {
    let s = session();
    let typed_null = e(ExprType::Literal(pe::Literal {
        data_type: None,
        literal_type: Some(LiteralType::Null(proto::DataType {
            kind: Some(proto::data_type::Kind::Integer(Default::default())),
        })),
    }));
    let plan = project(
        2,
        people(1),
        vec![
            lit(LiteralType::Long(5_000_000_000)),
            lit(LiteralType::Double(1.5)),
            lit(LiteralType::Date(20_000)),
            lit(LiteralType::Timestamp(micros("2026-09-15 12:01:00"))),
            lit(LiteralType::Decimal(pe::literal::Decimal {
                value: "12.345".into(),
                precision: Some(5),
                scale: Some(3),
            })),
            typed_null,
            string("it's"),
            lit(LiteralType::Boolean(true)),
        ],
    );
    let plan = filter(3, plan, call("==", vec![col_of("id", 1), int(1)]));
    let f = frame(&s, &plan);
    // The filter after the projection names a column the projection dropped: Spark resolves
    // it through the plan id only when it is still there; here it is not.
    assert!(f.is_err());
    let plan = project(
        2,
        filter(3, people(1), call("==", vec![col("id"), int(1)])),
        vec![
            lit(LiteralType::Long(5_000_000_000)),
            lit(LiteralType::Double(1.5)),
            lit(LiteralType::Date(20_000)),
            lit(LiteralType::Timestamp(micros("2026-09-15 12:01:00"))),
            lit(LiteralType::Decimal(pe::literal::Decimal {
                value: "12.345".into(),
                precision: Some(5),
                scale: Some(3),
            })),
            string("it's"),
            lit(LiteralType::Boolean(true)),
        ],
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(
        names(&f),
        [
            "5000000000",
            "1.5",
            "DATE '2024-10-04'",
            "TIMESTAMP '2026-09-15 12:01:00'",
            "12.345",
            "it's",
            "true"
        ]
    );
    let types: Vec<DataType> = f
        .schema()
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    assert_eq!(
        types,
        [
            DataType::Int64,
            DataType::Float64,
            DataType::Date32,
            DataType::Timestamp(TimeUnit::Microsecond, None),
            DataType::Decimal128(5, 3),
            DataType::Utf8,
            DataType::Boolean
        ]
    );
    assert_eq!(
        rows(&f),
        ["5000000000|1.5|2024-10-04|2026-09-15T12:01:00|12.345|it's|true"]
    );
}

/// `F.transform(F.array(F.lit(1), F.lit(2)), lambda x: x + 1)` and
/// `F.row_number().over(Window.partitionBy("k").orderBy("id"))`.
#[test]
fn lambdas_and_window_functions() {
    let s = session();
    let x = || {
        e(ExprType::UnresolvedNamedLambdaVariable(
            pe::UnresolvedNamedLambdaVariable {
                name_parts: vec!["x_0".into()],
            },
        ))
    };
    let lambda = e(ExprType::LambdaFunction(Box::new(pe::LambdaFunction {
        function: Some(Box::new(call("+", vec![x(), int(1)]))),
        arguments: vec![pe::UnresolvedNamedLambdaVariable {
            name_parts: vec!["x_0".into()],
        }],
    })));
    let transformed = call(
        "transform",
        vec![call("array", vec![int(1), int(2)]), lambda],
    );
    let over = e(ExprType::Window(Box::new(pe::Window {
        window_function: Some(Box::new(call("row_number", vec![]))),
        partition_spec: vec![call("%", vec![col("id"), int(2)])],
        order_spec: vec![pe::SortOrder {
            child: Some(Box::new(col("id"))),
            direction: pe::sort_order::SortDirection::Ascending as i32,
            null_ordering: 0,
        }],
        frame_spec: None,
    })));
    let plan = project(
        2,
        people(1),
        vec![col("id"), alias(transformed, "t"), alias(over, "rn")],
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["id", "t", "rn"]);
    assert_eq!(rows(&f), ["1|[2, 3]|1", "2|[2, 3]|1", "3|[2, 3]|2"]);
}

/// A foreachBatch batch (`CachedRemoteRelation`), `df.alias("t").select("t.*")`, and
/// `F.expr(..)`.
#[test]
fn cached_batches_aliases_and_expression_strings() {
    let s = session();
    let f = frame(&s, &people(1)).unwrap();
    s.cache_frame("batch-1", f);
    let cached = rel(
        2,
        RelType::CachedRemoteRelation(proto::CachedRemoteRelation {
            relation_id: "batch-1".into(),
        }),
    );
    let aliased = rel(
        3,
        RelType::SubqueryAlias(Box::new(proto::SubqueryAlias {
            input: Some(Box::new(cached)),
            alias: "t".into(),
            qualifier: vec![],
        })),
    );
    let star = e(ExprType::UnresolvedStar(pe::UnresolvedStar {
        unparsed_target: Some("t.*".into()),
        plan_id: None,
    }));
    let expr_string = e(ExprType::ExpressionString(pe::ExpressionString {
        expression: "t.id * 100 AS hundred".into(),
    }));
    let upper = call("upper", vec![col("t.name")]);
    let plan = project(4, aliased, vec![star, upper, expr_string]);
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["id", "name", "upper(name)", "hundred"]);
    assert_eq!(rows(&f), ["1|a|A|100", "2|b|B|200", "3|c|C|300"]);
    let gone = rel(
        5,
        RelType::CachedRemoteRelation(proto::CachedRemoteRelation {
            relation_id: "nope".into(),
        }),
    );
    assert!(frame(&s, &gone).unwrap_err().message.contains("nope"));
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

#[test]
fn struct_of_star_and_expression_strings_in_aggregates() {
    let s = session();
    let star = e(ExprType::UnresolvedStar(pe::UnresolvedStar {
        unparsed_target: None,
        plan_id: None,
    }));
    let plan = project(
        2,
        people(1),
        vec![call("to_json", vec![call("struct", vec![star])])],
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(rows(&f)[0], r#"{"id":1,"name":"a"}"#);
    // F.hash("*") on an aliased frame: the star stands for the alias's columns.
    let aliased = rel(
        3,
        RelType::SubqueryAlias(Box::new(proto::SubqueryAlias {
            input: Some(Box::new(people(1))),
            alias: "t".into(),
            qualifier: vec![],
        })),
    );
    let t_star = e(ExprType::UnresolvedStar(pe::UnresolvedStar {
        unparsed_target: Some("t.*".into()),
        plan_id: None,
    }));
    let plan = project(
        4,
        aliased,
        vec![call("concat_ws", vec![string("-"), t_star])],
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["concat_ws(-, id, name)"]);
    assert_eq!(rows(&f), ["1-a", "2-b", "3-c"]);
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
            call("window", vec![col("ts"), string("5 minutes")]),
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

/// `F.count("id").over(Window.orderBy("id").rowsBetween(-1, Window.currentRow))`.
#[test]
fn window_frames_with_offsets() {
    use pe::window::window_frame::{frame_boundary::Boundary, FrameBoundary, FrameType};
    let s = session();
    let over = e(ExprType::Window(Box::new(pe::Window {
        window_function: Some(Box::new(call("count", vec![col("id")]))),
        partition_spec: vec![],
        order_spec: vec![pe::SortOrder {
            child: Some(Box::new(col("id"))),
            direction: pe::sort_order::SortDirection::Ascending as i32,
            null_ordering: pe::sort_order::NullOrdering::SortNullsFirst as i32,
        }],
        frame_spec: Some(Box::new(pe::window::WindowFrame {
            frame_type: FrameType::Row as i32,
            lower: Some(Box::new(FrameBoundary {
                boundary: Some(Boundary::Value(Box::new(lit(LiteralType::Integer(-1))))),
            })),
            upper: Some(Box::new(FrameBoundary {
                boundary: Some(Boundary::CurrentRow(true)),
            })),
        })),
    })));
    let plan = project(2, people(1), vec![col("id"), over]);
    let f = frame(&s, &plan).unwrap();
    assert_eq!(
        names(&f)[1],
        "count(id) OVER (ORDER BY id ASC NULLS FIRST ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)"
    );
    assert_eq!(rows(&f), ["1|1", "2|2", "3|2"]);
}
