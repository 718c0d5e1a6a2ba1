//! DataFrames combined: joins (plan-id-qualified conditions, aliases, using columns, three
//! ways) and set operations (union by position and by name).

use super::*;

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

/// `a.join(b, a.id == b.id).join(c, a.id == c.id)` and `a.join(b.join(c, ..), ..)`.
#[test]
fn three_way_joins_resolve_every_side() {
    let s = session();
    let j = |id: i64, l: proto::Relation, r: proto::Relation, cond: proto::Expression| {
        rel(
            id,
            RelType::Join(Box::new(proto::Join {
                left: Some(Box::new(l)),
                right: Some(Box::new(r)),
                join_condition: Some(cond),
                join_type: proto::join::JoinType::Inner as i32,
                using_columns: vec![],
                join_data_type: None,
            })),
        )
    };
    let eq = |a: i64, b: i64| call("==", vec![col_of("id", a), col_of("id", b)]);
    let left_deep = j(
        11,
        j(10, people(1), people(2), eq(1, 2)),
        people(3),
        eq(1, 3),
    );
    let plan = project(
        12,
        left_deep,
        vec![col_of("id", 1), col_of("name", 2), col_of("name", 3)],
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(rows(&f), ["1|a|a", "2|b|b", "3|c|c"]);
    let right_deep = j(
        21,
        people(1),
        j(20, people(2), people(3), eq(2, 3)),
        eq(1, 3),
    );
    let plan = project(22, right_deep, vec![col_of("id", 1), col_of("name", 3)]);
    assert_eq!(rows(&frame(&s, &plan).unwrap()), ["1|a", "2|b", "3|c"]);
}

/// `df1.join(df2, df1.id == df2.id).drop(df2.id)`: only the right side's `id` goes.
#[test]
fn drop_a_plan_id_qualified_join_column() {
    let s = session();
    let join = rel(
        10,
        RelType::Join(Box::new(proto::Join {
            left: Some(Box::new(people(1))),
            right: Some(Box::new(project(
                3,
                people(2),
                vec![col("id"), alias(call("upper", vec![col("name")]), "up")],
            ))),
            join_condition: Some(call("==", vec![col_of("id", 1), col_of("id", 3)])),
            join_type: proto::join::JoinType::Inner as i32,
            using_columns: vec![],
            join_data_type: None,
        })),
    );
    let plan = rel(
        11,
        RelType::Drop(Box::new(proto::Drop {
            input: Some(Box::new(join)),
            columns: vec![col_of("id", 3)],
            column_names: vec![],
        })),
    );
    let f = frame(&s, &plan).unwrap();
    assert_eq!(names(&f), ["id", "name", "up"]);
    assert_eq!(rows(&f), ["1|a|A", "2|b|B", "3|c|C"]);
}

/// `df.alias("t").filter(..).join(other.alias("o"), F.col("t.id") == F.col("o.id"))`.
#[test]
fn a_filtered_alias_keeps_its_name_in_a_join() {
    let s = session();
    let aliased = |id: i64, input: proto::Relation, name: &str| {
        rel(
            id,
            RelType::SubqueryAlias(Box::new(proto::SubqueryAlias {
                input: Some(Box::new(input)),
                alias: name.into(),
                qualifier: vec![],
            })),
        )
    };
    let t = filter(
        3,
        aliased(2, people(1), "t"),
        call(">", vec![col("t.id"), int(1)]),
    );
    let o = aliased(5, people(4), "o");
    let join = rel(
        6,
        RelType::Join(Box::new(proto::Join {
            left: Some(Box::new(t)),
            right: Some(Box::new(o)),
            join_condition: Some(call("==", vec![col("t.id"), col("o.id")])),
            join_type: proto::join::JoinType::Inner as i32,
            using_columns: vec![],
            join_data_type: None,
        })),
    );
    let plan = project(7, join, vec![col("t.id"), col("o.name")]);
    assert_eq!(rows(&frame(&s, &plan).unwrap()), ["2|b", "3|c"]);
}

/// `a.crossJoin(b)` and `a.join(b, cond, "cross")`.
#[test]
fn cross_joins() {
    let s = session();
    let cross = |cond: Option<proto::Expression>| {
        rel(
            3,
            RelType::Join(Box::new(proto::Join {
                left: Some(Box::new(people(1))),
                right: Some(Box::new(people(2))),
                join_condition: cond,
                join_type: proto::join::JoinType::Cross as i32,
                using_columns: vec![],
                join_data_type: None,
            })),
        )
    };
    assert_eq!(rows(&frame(&s, &cross(None)).unwrap()).len(), 9);
    let cond = call("<", vec![col_of("id", 1), col_of("id", 2)]);
    assert_eq!(rows(&frame(&s, &cross(Some(cond))).unwrap()).len(), 3);
}
