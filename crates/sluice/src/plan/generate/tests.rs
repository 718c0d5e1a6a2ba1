//! Generators over a batch table, each expectation recorded on Spark 3.5.7 over
//! `t(id, arr, m, line)` = (1, [1, 2], {a: 1, b: 2}, 'a b  c'), (2, [], {}, ''),
//! (3, null, null, null), (4, [3, null], {c: null}, ' x').

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Int32Array, Int32Builder, ListBuilder, MapBuilder, RecordBatch, StringArray,
    StringBuilder,
};
use arrow::datatypes::{Field, Schema};
use arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::error::class;
use crate::session::Session;
use crate::Result;

fn session() -> Session {
    let s = Session::builder().shuffle_partitions(1).build().unwrap();
    let mut arr = ListBuilder::new(Int32Builder::new());
    arr.values().append_slice(&[1, 2]);
    arr.append(true);
    arr.append(true);
    arr.append(false);
    arr.values().append_value(3);
    arr.values().append_null();
    arr.append(true);
    let mut m = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    m.keys().append_value("a");
    m.values().append_value(1);
    m.keys().append_value("b");
    m.values().append_value(2);
    m.append(true).unwrap();
    m.append(true).unwrap();
    m.append(false).unwrap();
    m.keys().append_value("c");
    m.values().append_null();
    m.append(true).unwrap();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(vec![1, 2, 3, 4])),
        Arc::new(arr.finish()),
        Arc::new(m.finish()),
        Arc::new(StringArray::from(vec![
            Some("a b  c"),
            Some(""),
            None,
            Some(" x"),
        ])),
    ];
    let fields: Vec<Field> = ["id", "arr", "m", "line"]
        .iter()
        .zip(&columns)
        .map(|(n, c)| Field::new(*n, c.data_type().clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    s.register_batches("t", schema, vec![batch]).unwrap();
    s
}

/// The column names and the rows (`a|b|..`, nulls as `null`) of `sql`.
fn run(s: &Session, sql: &str) -> Result<(Vec<String>, Vec<String>)> {
    let frame = s.sql(sql)?;
    let names = frame
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let opts = FormatOptions::default().with_null("null");
    let mut rows = Vec::new();
    for b in frame.collect()? {
        let fmts: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            rows.push(
                fmts.iter()
                    .map(|f| f.value(r).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    Ok((names, rows))
}

fn check(s: &Session, sql: &str, names: &[&str], rows: &[&str]) {
    let (n, r) = run(s, sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(n, names, "{sql}");
    assert_eq!(r, rows, "{sql}");
}

fn fails(s: &Session, sql: &str, class: &str) {
    match run(s, sql) {
        Ok(r) => panic!("{sql} ran: {r:?}"),
        Err(e) => assert!(e.is(class), "{sql}: {e}"),
    }
}

#[test]
fn explode_arrays_and_maps_with_spark_names() {
    let s = session();
    check(
        &s,
        "select id, explode(arr) from t",
        &["id", "col"],
        &["1|1", "1|2", "4|3", "4|null"],
    );
    check(
        &s,
        "select id, explode(arr) as w from t",
        &["id", "w"],
        &["1|1", "1|2", "4|3", "4|null"],
    );
    check(
        &s,
        "select id, explode_outer(arr) from t",
        &["id", "col"],
        &["1|1", "1|2", "2|null", "3|null", "4|3", "4|null"],
    );
    check(
        &s,
        "select id, explode(m) from t",
        &["id", "key", "value"],
        &["1|a|1", "1|b|2", "4|c|null"],
    );
    check(
        &s,
        "select id, explode_outer(m) from t",
        &["id", "key", "value"],
        &["1|a|1", "1|b|2", "2|null|null", "3|null|null", "4|c|null"],
    );
    check(
        &s,
        "select id, explode(m) as (k, v) from t",
        &["id", "k", "v"],
        &["1|a|1", "1|b|2", "4|c|null"],
    );
}

#[test]
fn posexplode_counts_from_zero() {
    let s = session();
    check(
        &s,
        "select id, posexplode(arr) from t",
        &["id", "pos", "col"],
        &["1|0|1", "1|1|2", "4|0|3", "4|1|null"],
    );
    check(
        &s,
        "select id, posexplode_outer(arr) from t",
        &["id", "pos", "col"],
        &[
            "1|0|1",
            "1|1|2",
            "2|null|null",
            "3|null|null",
            "4|0|3",
            "4|1|null",
        ],
    );
    check(
        &s,
        "select id, posexplode(m) from t",
        &["id", "pos", "key", "value"],
        &["1|0|a|1", "1|1|b|2", "4|0|c|null"],
    );
    check(
        &s,
        "select id, posexplode(arr) as (p, c) from t",
        &["id", "p", "c"],
        &["1|0|1", "1|1|2", "4|0|3", "4|1|null"],
    );
    check(
        &s,
        "select posexplode(m) as (p, k, v) from t",
        &["p", "k", "v"],
        &["0|a|1", "1|b|2", "0|c|null"],
    );
}

#[test]
fn alias_counts_must_match_the_generator() {
    let s = session();
    fails(
        &s,
        "select id, posexplode(arr) as p from t",
        class::UDTF_ALIAS_NUMBER_MISMATCH,
    );
    fails(
        &s,
        "select id, explode(arr) as (a, b) from t",
        class::UDTF_ALIAS_NUMBER_MISMATCH,
    );
    fails(
        &s,
        "select stack(2, 1, 2) as (a, b)",
        class::UDTF_ALIAS_NUMBER_MISMATCH,
    );
    fails(
        &s,
        "select * from t lateral view explode(arr) x as p, c",
        class::UDTF_ALIAS_NUMBER_MISMATCH,
    );
}

#[test]
fn words_split_from_lines() {
    let s = session();
    check(
        &s,
        "select id, explode(split(line, ' ')) from t",
        &["id", "col"],
        &["1|a", "1|b", "1|", "1|c", "2|", "4|", "4|x"],
    );
    check(
        &s,
        "select explode(split(line, ' ')) as word, id from t where id < 3",
        &["word", "id"],
        &["a|1", "b|1", "|1", "c|1", "|2"],
    );
}

#[test]
fn inline_and_stack() {
    let s = session();
    check(
        &s,
        "select inline(array(named_struct('a', 1, 'b', 'x'), named_struct('a', 2, 'b', null), null))",
        &["a", "b"],
        &["1|x", "2|null", "null|null"],
    );
    check(
        &s,
        "select inline(array(named_struct('a', 1, 'b', 2))) as (x, y)",
        &["x", "y"],
        &["1|2"],
    );
    fails(
        &s,
        "select inline(array(named_struct('a', 1, 'b', 2))) as x",
        class::UDTF_ALIAS_NUMBER_MISMATCH,
    );
    fails(
        &s,
        "select inline(arr) from t",
        class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
    );
    check(
        &s,
        "select stack(2, 1, 2, 3)",
        &["col0", "col1"],
        &["1|2", "3|null"],
    );
    check(
        &s,
        "select stack(2, 1, 'a', 2, 'b') as (n, s)",
        &["n", "s"],
        &["1|a", "2|b"],
    );
    check(
        &s,
        "select stack(2, 1, null, 3, 4)",
        &["col0", "col1"],
        &["1|null", "3|4"],
    );
    check(&s, "select stack(3, 1, 2)", &["col0"], &["1", "2", "null"]);
    fails(
        &s,
        "select stack(2, 1, 2.5)",
        class::DATATYPE_MISMATCH_STACK_COLUMN_DIFF_TYPES,
    );
    fails(
        &s,
        "select stack(0, 1, 2)",
        class::DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE,
    );
    fails(
        &s,
        "select stack(1.5, 1, 2)",
        class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
    );
    fails(
        &s,
        "select stack(id, 1, 2) from t",
        class::DATATYPE_MISMATCH_NON_FOLDABLE_INPUT,
    );
    fails(&s, "select stack(2)", class::WRONG_NUM_ARGS);
    fails(
        &s,
        "select stack(3, 'a', 1, 'b')",
        class::DATATYPE_MISMATCH_STACK_COLUMN_DIFF_TYPES,
    );
    check(
        &s,
        "select stack(2, array(1), array(2))",
        &["col0"],
        &["[1]", "[2]"],
    );
}

#[test]
fn several_generators_in_one_select_nest_left_to_right() {
    let s = session();
    check(
        &s,
        "select id, explode(arr) as e1, posexplode(arr) from t where id = 1",
        &["id", "e1", "pos", "col"],
        &["1|1|0|1", "1|1|1|2", "1|2|0|1", "1|2|1|2"],
    );
    check(
        &s,
        "select id, explode(arr) a, id + 1 as n, explode_outer(arr) b from t where id in (1, 2)",
        &["id", "a", "n", "b"],
        &["1|1|2|1", "1|1|2|2", "1|2|2|1", "1|2|2|2"],
    );
    check(
        &s,
        "select explode(collect_list(id)) from t",
        &["col"],
        &["1", "2", "3", "4"],
    );
    fails(
        &s,
        "select explode(collect_list(id)) a, posexplode(array(1)) from t",
        class::UNSUPPORTED_GENERATOR_MULTI_GENERATOR,
    );
}

#[test]
fn generators_outside_a_select_item_are_refused() {
    let s = session();
    fails(
        &s,
        "select id, upper(explode(split(line, ' '))) from t",
        class::UNSUPPORTED_GENERATOR_NESTED_IN_EXPRESSIONS,
    );
    fails(
        &s,
        "select explode(array(1, 2)) + 1",
        class::UNSUPPORTED_GENERATOR_NESTED_IN_EXPRESSIONS,
    );
    fails(
        &s,
        "select id from t where explode(arr) > 1",
        class::UNSUPPORTED_GENERATOR_OUTSIDE_SELECT,
    );
    fails(
        &s,
        "select id from t order by explode(arr)",
        class::UNSUPPORTED_GENERATOR_OUTSIDE_SELECT,
    );
    fails(
        &s,
        "select count(*) from t group by explode(arr)",
        class::UNSUPPORTED_EXPR_FOR_OPERATOR,
    );
    fails(
        &s,
        "select explode(id) from t",
        class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
    );
    fails(&s, "select explode(arr, arr) from t", class::WRONG_NUM_ARGS);
}

#[test]
fn lateral_views() {
    let s = session();
    check(
        &s,
        "select id, w from t lateral view explode(arr) x as w",
        &["id", "w"],
        &["1|1", "1|2", "4|3", "4|null"],
    );
    check(
        &s,
        "select id, x.w from t lateral view outer explode(arr) x as w",
        &["id", "w"],
        &["1|1", "1|2", "2|null", "3|null", "4|3", "4|null"],
    );
    check(
        &s,
        "select id, x.* from t lateral view posexplode(arr) x",
        &["id", "pos", "col"],
        &["1|0|1", "1|1|2", "4|0|3", "4|1|null"],
    );
    check(
        &s,
        "select x.key, x.value from t lateral view explode(m) x",
        &["key", "value"],
        &["a|1", "b|2", "c|null"],
    );
    check(
        &s,
        "select id, a, b from t lateral view explode(arr) x as a lateral view explode(array(a, a * 10)) y as b",
        &["id", "a", "b"],
        &["1|1|1", "1|1|10", "1|2|2", "1|2|20", "4|3|3", "4|3|30", "4|null|null", "4|null|null"],
    );
    check(
        &s,
        "select id, p, c from t lateral view outer posexplode(arr) x as p, c",
        &["id", "p", "c"],
        &[
            "1|0|1",
            "1|1|2",
            "2|null|null",
            "3|null|null",
            "4|0|3",
            "4|1|null",
        ],
    );
    check(
        &s,
        "select id, w from t lateral view outer explode_outer(arr) x as w where w > 1",
        &["id", "w"],
        &["1|2", "4|3"],
    );
    check(
        &s,
        "select w, count(*) from t lateral view explode(arr) x as w group by w order by w nulls first",
        &["w", "count(*)"],
        &["null|1", "1|1", "2|1", "3|1"],
    );
}

#[test]
fn lateral_views_after_joins() {
    let s = session();
    check(
        &s,
        "select t.id, w, u.n from t join (select 1 as id, 'one' as n) u on t.id = u.id lateral view explode(arr) x as w",
        &["id", "w", "n"],
        &["1|1|one", "1|2|one"],
    );
    check(
        &s,
        "select t.id, u.n, w from t, (select 'z' as n) u lateral view explode(arr) x as w",
        &["id", "n", "w"],
        &["1|z|1", "1|z|2", "4|z|3", "4|z|null"],
    );
}

#[test]
fn only_the_columns_read_above_are_repeated() {
    let s = session();
    let plan = |sql: &str| {
        s.sql(sql)
            .unwrap()
            .logical_plan()
            .display_indent()
            .to_string()
    };
    let p =
        plan("select w, count(*) from t lateral view explode(split(line, ' ')) x as w group by w");
    assert!(p.contains("output=[x.w], kept=[]"), "{p}");
    let p = plan("select id, w from t lateral view explode(arr) x as w where length(line) > 1");
    assert!(p.contains("output=[x.w], kept=[t.id, t.line]"), "{p}");
    let p = plan("select explode(split(line, ' ')) as word from t");
    assert!(p.contains("kept=[]"), "{p}");
    let p = plan("select * from t lateral view explode(arr) x as w");
    assert!(p.contains("kept=[t.id, t.arr, t.m, t.line]"), "{p}");
}

#[test]
fn outer_queries_read_a_bare_generator_by_spark_names() {
    let s = session();
    check(
        &s,
        "select sum(a) as a, max(b) as b from (select inline(array(named_struct('a', 1, 'b', 'x'), named_struct('a', 2, 'b', 'y'))))",
        &["a", "b"],
        &["3|y"],
    );
    check(
        &s,
        "select id, pos, key from (select id, posexplode(m) from t) where value is null",
        &["id", "pos", "key"],
        &["4|0|c"],
    );
    check(
        &s,
        "select col0 + col1 as s from (select stack(2, 1, 2, 3, 4))",
        &["s"],
        &["3", "7"],
    );
    check(
        &s,
        "with e as (select id, explode(arr) from t) select id, col from e where col > 1",
        &["id", "col"],
        &["1|2", "4|3"],
    );
}

#[test]
fn generators_in_from_are_table_functions() {
    let s = session();
    check(
        &s,
        "SELECT * FROM posexplode(array(10, 20))",
        &["pos", "col"],
        &["0|10", "1|20"],
    );
    check(
        &s,
        "SELECT t.pos, t.col FROM posexplode_outer(array(10, 20)) t",
        &["pos", "col"],
        &["0|10", "1|20"],
    );
    check(
        &s,
        "SELECT * FROM posexplode_outer(CAST(NULL AS ARRAY<INT>))",
        &["pos", "col"],
        &["null|null"],
    );
    check(
        &s,
        "SELECT * FROM explode(collection => map('a', 1))",
        &["key", "value"],
        &["a|1"],
    );
    check(
        &s,
        "SELECT * FROM stack(2, 1, 2, 3)",
        &["col0", "col1"],
        &["1|2", "3|null"],
    );
    check(
        &s,
        "SELECT * FROM inline(array(struct(1, 'a'), struct(2, 'b')))",
        &["col1", "col2"],
        &["1|a", "2|b"],
    );
}

#[test]
fn explode_takes_its_named_argument() {
    let s = session();
    check(
        &s,
        "SELECT explode(collection => array(10, 20))",
        &["col"],
        &["10", "20"],
    );
    check(
        &s,
        "SELECT explode(collection => array(1, 2)) AS x",
        &["x"],
        &["1", "2"],
    );
    fails(
        &s,
        "SELECT explode(arr => array(1, 2))",
        class::UNRECOGNIZED_PARAMETER_NAME,
    );
}

#[test]
fn json_tuple_is_a_generator_of_string_columns() {
    let s = session();
    check(
        &s,
        r#"SELECT json_tuple('{"a":1, "b":2}', 'a', 'b')"#,
        &["c0", "c1"],
        &["1|2"],
    );
    check(
        &s,
        r#"SELECT json_tuple('{"a":1, "b":{"c":[1,2]}, "d":null, "e":"x"}', 'a', 'b', 'd', 'e', 'zz')"#,
        &["c0", "c1", "c2", "c3", "c4"],
        &[r#"1|{"c":[1,2]}|null|x|null"#],
    );
    // A malformed document, or one that is not an object, gives one row of nulls.
    check(&s, "SELECT json_tuple('not json', 'a')", &["c0"], &["null"]);
    check(&s, "SELECT json_tuple('[1]', 'a')", &["c0"], &["null"]);
    check(
        &s,
        r#"SELECT * FROM json_tuple('{"a":1}', 'a')"#,
        &["c0"],
        &["1"],
    );
    check(
        &s,
        r#"SELECT id, x, y FROM VALUES (1, '{"a":"p","b":2}'), (2, CAST(NULL AS STRING)) AS v(id, j)
           LATERAL VIEW json_tuple(j, 'a', 'b') t AS x, y"#,
        &["id", "x", "y"],
        &["1|p|2", "2|null|null"],
    );
    fails(
        &s,
        r#"SELECT json_tuple('{"a":1}', 1)"#,
        class::DATATYPE_MISMATCH_NON_STRING_TYPE,
    );
    fails(
        &s,
        r#"SELECT json_tuple(NULL, 'a')"#,
        class::DATATYPE_MISMATCH_NON_STRING_TYPE,
    );
    fails(&s, r#"SELECT json_tuple('{"a":1}')"#, class::WRONG_NUM_ARGS);
}
