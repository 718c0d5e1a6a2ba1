//! Batch DataFrames: projections, filters, columns, joins, set operations, aggregates, sorts,
//! literals, lambdas, window functions, `show`, and the not-supported relations.

use super::*;

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
        RelType::Describe(Box::new(proto::StatDescribe {
            input: Some(Box::new(people(1))),
            cols: vec![],
        })),
    );
    let err = frame(&s, &plan).unwrap_err();
    assert_eq!(err.java_class, crate::error::java::UNSUPPORTED);
    assert!(
        err.message.contains("the Describe relation"),
        "{}",
        err.message
    );
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

/// `df.selectExpr("id + 1", "count(*) OVER ()")` and `df.agg(F.expr("count(*)"))`: Spark's
/// names for the unaliased expression strings.
#[test]
fn expression_strings_take_spark_names() {
    let s = session();
    let x = |t: &str| {
        e(ExprType::ExpressionString(pe::ExpressionString {
            expression: t.into(),
        }))
    };
    let f = frame(
        &s,
        &project(2, people(1), vec![x("id + 1"), x("upper(name)")]),
    )
    .unwrap();
    assert_eq!(names(&f), ["(id + 1)", "upper(name)"]);
    assert_eq!(rows(&f), ["2|A", "3|B", "4|C"]);
    let f = frame(&s, &agg(3, people(1), vec![], vec![x("count(*)")])).unwrap();
    assert_eq!(names(&f), ["count(1)"]);
    assert_eq!(rows(&f), ["3"]);
}

/// `F.col("s").cast("timestamp")`, `ts + F.lit(timedelta(minutes=15))`,
/// `ts + F.expr("INTERVAL 15 MINUTES")`, `F.col("ts").cast("long")`.
#[test]
fn timestamp_casts_and_intervals() {
    let s = session();
    let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
    let b = RecordBatch::try_new(
        schema,
        vec![Arc::new(StringArray::from(vec!["2026-09-15T12:01:00Z"]))],
    )
    .unwrap();
    let cast = |x: proto::Expression, t: &str| {
        e(ExprType::Cast(Box::new(pe::Cast {
            expr: Some(Box::new(x)),
            eval_mode: 0,
            cast_to_type: Some(pe::cast::CastToType::TypeStr(t.into())),
        })))
    };
    let ts = || cast(col("s"), "timestamp");
    let plan = project(
        2,
        local(1, &b),
        vec![
            alias(ts(), "ts"),
            alias(
                call(
                    "+",
                    vec![ts(), lit(LiteralType::DayTimeInterval(15 * 60 * 1_000_000))],
                ),
                "later",
            ),
            alias(
                call(
                    "+",
                    vec![
                        ts(),
                        e(ExprType::ExpressionString(pe::ExpressionString {
                            expression: "INTERVAL 15 MINUTES".into(),
                        })),
                    ],
                ),
                "later2",
            ),
            alias(cast(ts(), "long"), "epoch"),
        ],
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(
        f.schema().field(0).data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, None)
    );
    assert_eq!(
        rows(&f),
        ["2026-09-15T12:01:00|2026-09-15T12:16:00|2026-09-15T12:16:00|1789473660"]
    );
}

/// `F.from_json("j", StructType(..))`: the schema arrives as Spark's JSON.
#[test]
fn from_json_with_a_struct_type_schema() {
    let s = session();
    let schema = Arc::new(Schema::new(vec![Field::new("j", DataType::Utf8, true)]));
    let b = RecordBatch::try_new(
        schema,
        vec![Arc::new(StringArray::from(vec![r#"{"a": 1, "b": "x"}"#]))],
    )
    .unwrap();
    let json_schema = r#"{"type":"struct","fields":[{"name":"a","type":"integer","nullable":true,"metadata":{}},{"name":"b","type":"string","nullable":true,"metadata":{}}]}"#;
    let parsed = alias(call("from_json", vec![col("j"), string(json_schema)]), "p");
    let plan = project(
        3,
        project(2, local(1, &b), vec![parsed]),
        vec![col("p.a"), col("p.b")],
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["a", "b"]);
    assert_eq!(f.schema().field(0).data_type(), &DataType::Int32);
    assert_eq!(rows(&f), ["1|x"]);
}

/// `F.explode(..)` names its column `col`; `F.posexplode(..).alias("p", "v")` names two.
#[test]
fn generators_in_selects() {
    let s = session();
    let arr = || call("array", vec![string("x"), string("y")]);
    let f = frame(
        &s,
        &project(2, people(1), vec![col("id"), call("explode", vec![arr()])]),
    )
    .unwrap();
    assert_eq!(names(&f), ["id", "col"]);
    assert_eq!(rows(&f).len(), 6);
    let two = e(ExprType::Alias(Box::new(pe::Alias {
        expr: Some(Box::new(call("posexplode", vec![arr()]))),
        name: vec!["p".into(), "v".into()],
        metadata: None,
    })));
    let f = frame(&s, &project(3, people(1), vec![col("id"), two])).unwrap();
    assert_eq!(names(&f), ["id", "p", "v"]);
    assert!(rows(&f).contains(&"1|1|y".to_string()));
}

/// An unknown column is Spark's `UNRESOLVED_COLUMN` analysis error, naming the columns there
/// are, without the server's view names.
#[test]
fn unknown_columns_are_analysis_errors_in_spark_words() {
    let s = session();
    let err = frame(&s, &project(2, people(1), vec![col("nope")])).unwrap_err();
    assert_eq!(err.java_class, crate::error::java::ANALYSIS);
    assert_eq!(err.error_class, "UNRESOLVED_COLUMN.WITH_SUGGESTION");
    assert!(err.message.contains("`nope`"), "{}", err.message);
    assert!(err.message.contains("`id`, `name`"), "{}", err.message);
    assert!(!err.message.contains("__sluice"), "{}", err.message);
}

/// `F.lit([1, 2])`, `F.lit({"k": 1})`, a struct literal, an empty typed array, a typed null.
#[test]
fn collection_literals() {
    let s = session();
    let lits = |v: Vec<i32>| -> Vec<pe::Literal> {
        v.into_iter()
            .map(|x| pe::Literal {
                data_type: None,
                literal_type: Some(LiteralType::Integer(x)),
            })
            .collect()
    };
    let int_type = || proto::DataType {
        kind: Some(proto::data_type::Kind::Integer(Default::default())),
    };
    #[allow(deprecated)]
    let array = |v: Vec<i32>| {
        lit(LiteralType::Array(pe::literal::Array {
            element_type: Some(int_type()),
            elements: lits(v),
        }))
    };
    #[allow(deprecated)]
    let map = lit(LiteralType::Map(pe::literal::Map {
        key_type: None,
        value_type: None,
        keys: vec![pe::Literal {
            data_type: None,
            literal_type: Some(LiteralType::String("k".into())),
        }],
        values: lits(vec![1]),
    }));
    #[allow(deprecated)]
    let strukt = lit(LiteralType::Struct(pe::literal::Struct {
        struct_type: Some(
            types::schema_to_proto(&Schema::new(vec![
                Field::new("a", DataType::Int32, true),
                Field::new("b", DataType::Int32, true),
            ]))
            .unwrap(),
        ),
        elements: lits(vec![1, 2]),
    }));
    let null_string = lit(LiteralType::Null(proto::DataType {
        kind: Some(proto::data_type::Kind::String(Default::default())),
    }));
    let plan = project(
        2,
        filter(3, people(1), call("==", vec![col("id"), int(1)])),
        vec![
            alias(array(vec![1, 2]), "arr"),
            alias(array(vec![]), "empty"),
            alias(map, "m"),
            alias(strukt, "st"),
            alias(null_string, "n"),
        ],
    );
    let f = frame(&s, &plan).unwrap();
    let schema = f.schema();
    assert_eq!(
        schema.field(1).data_type(),
        &DataType::new_list(DataType::Int32, true)
    );
    assert!(matches!(schema.field(2).data_type(), DataType::Map(_, _)));
    // DataFusion's SQL casts to STRING as Utf8View: Spark's `string` either way.
    assert!(matches!(
        types::to_proto(schema.field(4).data_type()).unwrap().kind,
        Some(proto::data_type::Kind::String(_))
    ));
    assert_eq!(rows(&f), ["[1, 2]|[]|{k: 1}|{a: 1, b: 2}|null"]);
}

/// `df.select(F.from_json(..).alias("data")).select("data.*")`: a struct's fields.
#[test]
fn struct_stars_expand_to_fields() {
    let s = session();
    let schema = Arc::new(Schema::new(vec![Field::new("j", DataType::Utf8, true)]));
    let b = RecordBatch::try_new(
        schema,
        vec![Arc::new(StringArray::from(vec![r#"{"a": 1, "b": "x"}"#]))],
    )
    .unwrap();
    let parsed = alias(
        call("from_json", vec![col("j"), string("a INT, b STRING")]),
        "data",
    );
    let star = e(ExprType::UnresolvedStar(pe::UnresolvedStar {
        unparsed_target: Some("data.*".into()),
        plan_id: None,
    }));
    let plan = project(
        3,
        project(2, local(1, &b), vec![col("j"), parsed]),
        vec![col("j"), star],
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["j", "a", "b"]);
    assert_eq!(rows(&f), [r#"{"a": 1, "b": "x"}|1|x"#]);
}

/// `df.orderBy(F.desc("id")).select("name")` keeps the order.
#[test]
fn a_projection_over_a_sort_keeps_the_order() {
    let s = session();
    let sorted = rel(
        2,
        RelType::Sort(Box::new(proto::Sort {
            input: Some(Box::new(people(1))),
            order: vec![pe::SortOrder {
                child: Some(Box::new(col("id"))),
                direction: pe::sort_order::SortDirection::Descending as i32,
                null_ordering: 0,
            }],
            is_global: Some(true),
        })),
    );
    let f = frame(&s, &project(3, sorted, vec![col("name")])).unwrap();
    let got: Vec<String> = f
        .collect()
        .unwrap()
        .iter()
        .flat_map(|b| {
            let a = b
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .clone();
            (0..b.num_rows()).map(move |i| a.value(i).to_string())
        })
        .collect();
    assert_eq!(got, ["c", "b", "a"]);
}

/// `spark.sql("SELECT count(*) AS n FROM {df}", df=df)`: the DataFrame as a view while planned.
#[test]
fn sql_over_dataframe_arguments() {
    let s = session();
    let root = rel(
        3,
        RelType::Sql(proto::Sql {
            query: "SELECT count(*) AS n FROM _pyspark_abc WHERE id > 1".into(),
            ..Default::default()
        }),
    );
    let plan = rel(
        4,
        RelType::WithRelations(Box::new(proto::WithRelations {
            root: Some(Box::new(root)),
            references: vec![rel(
                2,
                RelType::SubqueryAlias(Box::new(proto::SubqueryAlias {
                    input: Some(Box::new(people(1))),
                    alias: "_pyspark_abc".into(),
                    qualifier: vec![],
                })),
            )],
        })),
    );
    assert_eq!(rows(&frame(&s, &plan).unwrap()), ["2"]);
    assert!(!s.sluice.context().table_exist("_pyspark_abc").unwrap());
}
