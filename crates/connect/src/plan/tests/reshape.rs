//! Batch DataFrames aggregated and reshaped: `groupBy(..).agg(..)`, `pivot`, `unpivot`,
//! `na.fill`/`na.drop`, `sample`, `to(schema)`.

use super::*;

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

/// `df.unpivot("id", ["name", "up"], "k", "v")`.
#[test]
fn unpivot_turns_columns_into_rows() {
    let s = session();
    let wide = project(
        2,
        people(1),
        vec![
            col("id"),
            col("name"),
            alias(call("upper", vec![col("name")]), "up"),
        ],
    );
    let plan = rel(
        3,
        RelType::Unpivot(Box::new(proto::Unpivot {
            input: Some(Box::new(wide)),
            ids: vec![col("id")],
            values: None,
            variable_column_name: "k".into(),
            value_column_name: "v".into(),
        })),
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["id", "k", "v"]);
    let r = rows(&f);
    assert_eq!(r.len(), 6);
    assert!(r.contains(&"1|up|A".to_string()) && r.contains(&"3|name|c".to_string()));
}

/// `df.na.fill(0)`, `df.na.fill("?", ["name"])`, `df.na.drop()`, `df.sample(..)`, `df.to(..)`.
#[test]
fn na_fill_drop_sample_and_to_schema() {
    let s = session();
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Float64, true),
        Field::new("name", DataType::Utf8, true),
    ]));
    let b = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(arrow::array::Float64Array::from(vec![
                Some(1.0),
                None,
                Some(f64::NAN),
            ])),
            Arc::new(StringArray::from(vec![None, Some("b"), Some("c")])),
        ],
    )
    .unwrap();
    let data = local(1, &b);
    let fill = |values: Vec<LiteralType>, cols: Vec<&str>| {
        rel(
            2,
            RelType::FillNa(Box::new(proto::NaFill {
                input: Some(Box::new(data.clone())),
                cols: cols.into_iter().map(String::from).collect(),
                values: values
                    .into_iter()
                    .map(|v| pe::Literal {
                        data_type: None,
                        literal_type: Some(v),
                    })
                    .collect(),
            })),
        )
    };
    let f = frame(&s, &fill(vec![LiteralType::Long(0)], vec![])).unwrap();
    assert_eq!(rows(&f), ["0.0|b", "0.0|c", "1.0|null"]);
    let f = frame(
        &s,
        &fill(vec![LiteralType::String("?".into())], vec!["name"]),
    )
    .unwrap();
    assert_eq!(rows(&f), ["1.0|?", "NaN|c", "null|b"]);
    let drop = rel(
        3,
        RelType::DropNa(Box::new(proto::NaDrop {
            input: Some(Box::new(data.clone())),
            cols: vec![],
            min_non_nulls: None,
        })),
    );
    assert!(rows(&frame(&s, &drop).unwrap()).is_empty());
    let thresh = rel(
        3,
        RelType::DropNa(Box::new(proto::NaDrop {
            input: Some(Box::new(data.clone())),
            cols: vec![],
            min_non_nulls: Some(1),
        })),
    );
    assert_eq!(
        rows(&frame(&s, &thresh).unwrap()),
        ["1.0|null", "NaN|c", "null|b"]
    );
    let sample = |lower: f64, upper: f64| {
        rel(
            4,
            RelType::Sample(Box::new(proto::Sample {
                input: Some(Box::new(people(1))),
                lower_bound: lower,
                upper_bound: upper,
                with_replacement: None,
                seed: Some(7),
                deterministic_order: false,
            })),
        )
    };
    let all = frame(&s, &sample(0.0, 1.0)).unwrap();
    assert_eq!(names(&all), ["id", "name"]);
    assert_eq!(rows(&all).len(), 3);
    assert!(rows(&frame(&s, &sample(0.0, 0.0)).unwrap()).is_empty());
    let to = rel(
        5,
        RelType::ToSchema(Box::new(proto::ToSchema {
            input: Some(Box::new(people(1))),
            schema: Some(
                types::schema_to_proto(&Schema::new(vec![
                    Field::new("name", DataType::Utf8, true),
                    Field::new("id", DataType::Int64, true),
                ]))
                .unwrap(),
            ),
        })),
    );
    let f = frame(&s, &to).unwrap();
    assert_eq!(names(&f), ["name", "id"]);
    assert_eq!(f.schema().field(1).data_type(), &DataType::Int64);
}

/// `df.groupBy((F.col("id") % 2).alias("odd")).pivot("name", ["a", "b"]).agg(F.sum("id"))`,
/// and without values (the distinct ones, sorted), two aggregates.
#[test]
fn pivots() {
    let s = session();
    let piv = |values: Vec<&str>, aggs: Vec<proto::Expression>| {
        rel(
            2,
            RelType::Aggregate(Box::new(proto::Aggregate {
                input: Some(Box::new(people(1))),
                group_type: proto::aggregate::GroupType::Pivot as i32,
                grouping_expressions: vec![alias(call("%", vec![col("id"), int(2)]), "odd")],
                aggregate_expressions: aggs,
                pivot: Some(proto::aggregate::Pivot {
                    col: Some(col("name")),
                    values: values
                        .into_iter()
                        .map(|v| pe::Literal {
                            data_type: None,
                            literal_type: Some(LiteralType::String(v.into())),
                        })
                        .collect(),
                }),
                grouping_sets: vec![],
            })),
        )
    };
    let f = frame(&s, &piv(vec!["a", "b"], vec![call("sum", vec![col("id")])])).unwrap();
    assert_eq!(names(&f), ["odd", "a", "b"]);
    assert_eq!(rows(&f), ["0|null|2", "1|1|null"]);
    let f = frame(
        &s,
        &piv(
            vec![],
            vec![
                call("sum", vec![col("id")]),
                alias(call("count", vec![int(1)]), "n"),
            ],
        ),
    )
    .unwrap();
    assert_eq!(
        names(&f),
        [
            "odd",
            "a_sum(id)",
            "a_n",
            "b_sum(id)",
            "b_n",
            "c_sum(id)",
            "c_n"
        ]
    );
    assert_eq!(
        rows(&f),
        ["0|null|null|2|1|null|null", "1|1|1|null|null|3|1"]
    );
}
