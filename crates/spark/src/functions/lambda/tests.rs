//! Spark's values for the higher-order functions (each expected value checked on PySpark 3.5.7).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, ListArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow::util::display::array_value_to_string;

use crate::error::class;
use sluice::Session;

fn session() -> Session {
    Session::builder().shuffle_partitions(1).build().unwrap()
}

/// Every row of the query's first column (or of each column), rendered.
fn rows(s: &Session, sql: &str) -> Vec<Vec<String>> {
    let batches = s
        .sql(sql)
        .and_then(|f| f.collect())
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut out = Vec::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            out.push(b.columns().iter().map(|c| cell(c, i)).collect::<Vec<_>>());
        }
    }
    out
}

fn cell(c: &ArrayRef, i: usize) -> String {
    if c.is_null(i) {
        "null".into()
    } else {
        array_value_to_string(c, i).unwrap()
    }
}

fn column(s: &Session, sql: &str) -> Vec<String> {
    rows(s, sql).into_iter().map(|r| r[0].clone()).collect()
}

fn error(s: &Session, sql: &str) -> crate::error::SluiceError {
    match s.sql(sql).and_then(|f| f.collect()) {
        Ok(b) => panic!("{sql} should fail, got {b:?}"),
        Err(e) => e,
    }
}

#[test]
fn transform_closes_over_a_column_and_passes_nulls() {
    let s = session();
    assert_eq!(
        column(
            &s,
            "SELECT transform(xs, x -> x * k) AS r FROM VALUES (array(1, 2), 10), (null, 1), \
             (array(3, null), 2) AS t(xs, k)"
        ),
        ["[10, 20]", "null", "[6, ]"]
    );
    assert_eq!(
        column(&s, "SELECT transform(array(1, 2, 3), (x, i) -> x + i)"),
        ["[1, 3, 5]"]
    );
    // Parameters resolve case-insensitively, as Spark's.
    assert_eq!(
        column(&s, "SELECT transform(array(1, 2), X -> x + 1)"),
        ["[2, 3]"]
    );
}

#[test]
fn filter_keeps_true_and_uses_the_index() {
    let s = session();
    assert_eq!(
        column(
            &s,
            "SELECT filter(xs, (x, i) -> x > k OR i = 0) AS r FROM VALUES (array(5, 1, 7), 4), \
             (array(), 0) AS t(xs, k)"
        ),
        ["[5, 7]", "[]"]
    );
    // A null condition drops the element.
    assert_eq!(
        column(&s, "SELECT filter(array(1, null, 3), x -> x > 1)"),
        ["[3]"]
    );
}

#[test]
fn exists_and_forall_are_three_valued() {
    let s = session();
    assert_eq!(
        rows(
            &s,
            "SELECT exists(xs, x -> x > k), forall(xs, x -> x > k) FROM VALUES \
             (array(1, null), 0), (array(1, null), 5), (array(1, 2), 1), (null, 1) AS t(xs, k)"
        ),
        [
            ["true", "null"],
            ["null", "false"],
            ["true", "false"],
            ["null", "null"]
        ]
    );
    assert_eq!(column(&s, "SELECT forall(array(), x -> x > 1)"), ["true"]);
    // `NOT exists(..)` too.
    assert_eq!(
        rows(
            &s,
            "SELECT NOT exists(array(1, 2), x -> x > 1), NOT exists(array(1), x -> x > 1) AND true"
        ),
        [["false", "true"]]
    );
    // `exists(..)` is the function, `EXISTS (SELECT ..)` still the predicate.
    assert_eq!(
        column(
            &s,
            "SELECT a FROM VALUES (1), (2) AS t(a) WHERE EXISTS (SELECT 1) AND exists(array(a), x -> x > 1)"
        ),
        ["2"]
    );
}

#[test]
fn aggregate_folds_with_and_without_finish() {
    let s = session();
    assert_eq!(
        column(
            &s,
            "SELECT aggregate(xs, 0L, (acc, x) -> acc + x * k, acc -> acc + 1) AS r FROM VALUES \
             (array(1, 2, 3), 2), (array(), 1), (null, 1) AS t(xs, k)"
        ),
        ["13", "1", "null"]
    );
    assert_eq!(
        column(
            &s,
            "SELECT reduce(array('a', 'b', 'c'), '', (acc, x) -> concat(acc, x))"
        ),
        ["abc"]
    );
    // The merge must return the zero's type (Spark: DATATYPE_MISMATCH).
    let e = error(
        &s,
        "SELECT aggregate(array(1.5, 2.5), 0, (acc, x) -> acc + x)",
    );
    assert!(e.is(class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE), "{e}");
    assert!(e.message().contains("`aggregate`"), "{e}");
}

#[test]
fn struct_parameters_and_qualified_columns() {
    let s = session();
    assert_eq!(
        column(
            &s,
            "SELECT transform(array(named_struct('a', 1), named_struct('a', 2)), x -> x.a + t.k) \
             FROM VALUES (10) AS t(k)"
        ),
        ["[11, 12]"]
    );
    // Outer columns resolve as Spark resolves them (case-insensitively).
    assert_eq!(
        column(
            &s,
            "SELECT filter(xs, x -> x > LIMIT_) FROM VALUES (array(1, 5), 2) AS t(xs, limit_)"
        ),
        ["[5]"]
    );
}

#[test]
fn nested_lambdas_see_the_outer_parameters_and_columns() {
    let s = session();
    assert_eq!(
        column(
            &s,
            "SELECT transform(xss, xs -> aggregate(xs, 0, (a, x) -> a + x + size(xss))) AS r \
             FROM VALUES (array(array(1, 2), array(3))) AS t(xss)"
        ),
        ["[7, 5]"]
    );
    assert_eq!(
        column(
            &s,
            "SELECT transform(array(array(1, 2), array(3)), x -> transform(x, y -> y + size(x)))"
        ),
        ["[[3, 4], [4]]"]
    );
}

#[test]
fn array_sort_with_a_comparator_is_stable_and_refuses_null() {
    let s = session();
    assert_eq!(
        column(&s, "SELECT array_sort(array(3, 1, 2, 1), (a, b) -> b - a)"),
        ["[3, 2, 1, 1]"]
    );
    assert_eq!(
        column(
            &s,
            "SELECT array_sort(array('bb', 'a', 'ccc', 'dd'), (a, b) -> length(a) - length(b))"
        ),
        ["[a, bb, dd, ccc]"]
    );
    // The plain form: ascending, nulls last.
    assert_eq!(
        column(&s, "SELECT array_sort(array('b', null, 'a'))"),
        ["[a, b, ]"]
    );
    let e = error(
        &s,
        "SELECT array_sort(array(2, 1), (a, b) -> cast(null as int))",
    );
    assert!(e.is(class::COMPARATOR_RETURNS_NULL), "{e}");
}

#[test]
fn zip_with_pads_the_shorter_array_and_names_struct_fields() {
    let s = session();
    assert_eq!(
        column(
            &s,
            "SELECT zip_with(array(1, 2, 3), array(10), (x, y) -> x + y)"
        ),
        ["[11, , ]"]
    );
    let b = s
        .sql("SELECT zip_with(array(1), array('a'), (x, y) -> (y, x + 1)) AS r")
        .and_then(|f| f.collect())
        .unwrap();
    let DataType::List(item) = b[0].schema().field(0).data_type().clone() else {
        panic!("{:?}", b[0].schema())
    };
    let DataType::Struct(fields) = item.data_type() else {
        panic!("{item:?}")
    };
    let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["y", "col2"]);
}

#[test]
fn map_functions() {
    let s = session();
    assert_eq!(
        column(
            &s,
            "SELECT map_zip_with(map(1, 'a', 2, 'b'), map(2, 'x', 3, 'y'), \
             (k, v1, v2) -> concat(coalesce(v1, '-'), coalesce(v2, '-')))"
        ),
        ["{1: a-, 2: bx, 3: -y}"]
    );
    assert_eq!(
        column(
            &s,
            "SELECT transform_values(map('a', 1, 'b', null), (k, v) -> v IS NULL)"
        ),
        ["{a: false, b: true}"]
    );
    assert_eq!(
        column(
            &s,
            "SELECT map_filter(map('a', 1, 'b', null), (k, v) -> v > 0)"
        ),
        ["{a: 1}"]
    );
    assert_eq!(
        column(
            &s,
            "SELECT transform_keys(map(1, 'a', 2, 'b'), (k, v) -> concat(v, k))"
        ),
        ["{a1: a, b2: b}"]
    );
    let e = error(
        &s,
        "SELECT transform_keys(map(1, 'a', 2, 'b'), (k, v) -> cast(null as int))",
    );
    assert!(e.is(class::NULL_MAP_KEY), "{e}");
    let e = error(
        &s,
        "SELECT transform_keys(map(1, 'a', 2, 'b'), (k, v) -> 0)",
    );
    assert!(e.is(class::DUPLICATED_MAP_KEY), "{e}");
}

#[test]
fn bad_lambdas_name_the_function() {
    let s = session();
    let e = error(&s, "SELECT transform(array(1, 2), (x, i, j) -> x)");
    assert!(
        e.is(class::INVALID_LAMBDA_FUNCTION_CALL_NUM_ARGS_MISMATCH),
        "{e}"
    );
    assert!(e.message().contains("`transform`"), "{e}");
    let e = error(&s, "SELECT filter(array(1, 2), x -> x + 1)");
    assert!(e.is(class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE), "{e}");
    assert!(e.message().contains("`filter`"), "{e}");
    let e = error(&s, "SELECT transform(array(1, 2), x -> no_such_fn(x))");
    assert!(e.is(class::UNRESOLVED_ROUTINE), "{e}");
    assert!(
        e.message()
            .contains("lambda function `x -> no_such_fn(x)` of `transform`"),
        "{e}"
    );
    let e = error(&s, "SELECT abs(x -> x)");
    assert!(
        e.is(class::INVALID_LAMBDA_FUNCTION_CALL_NON_HIGHER_ORDER_FUNCTION),
        "{e}"
    );
    let e = error(&s, "SELECT zip_with(array(1), (x, y) -> x)");
    assert!(e.is(class::WRONG_NUM_ARGS), "{e}");
    assert!(e.message().contains("`zip_with`"), "{e}");
    let e = error(&s, "SELECT zip_with(array(1), array(2), (x, X) -> x)");
    assert!(
        e.is(class::INVALID_LAMBDA_FUNCTION_CALL_DUPLICATE_ARG_NAMES),
        "{e}"
    );
}

fn list_batch(schema: &Arc<Schema>, xs: Vec<Option<Vec<Option<i64>>>>, k: Vec<i64>) -> RecordBatch {
    let list = ListArray::from_iter_primitive::<Int64Type, _, _>(xs);
    RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(list), Arc::new(Int64Array::from(k))],
    )
    .unwrap()
}

fn list_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new(
            "xs",
            DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))),
            true,
        ),
        Field::new("k", DataType::Int64, true),
    ]))
}

#[test]
fn the_dataframe_api_takes_lambdas() {
    let s = session();
    let schema = list_schema();
    s.register_batches(
        "t",
        schema.clone(),
        vec![list_batch(
            &schema,
            vec![Some(vec![Some(1), Some(5)]), None],
            vec![2, 3],
        )],
    )
    .unwrap();
    let out = s
        .table("t")
        .unwrap()
        .filter_sql("exists(xs, x -> x > k)")
        .unwrap()
        .select_sql(["transform(xs, x -> x + k) AS ys"])
        .unwrap()
        .collect()
        .unwrap();
    let col = out[0].column(0);
    assert_eq!(out[0].num_rows(), 1);
    assert_eq!(cell(col, 0), "[3, 7]");
}

#[test]
fn a_lambda_in_a_streaming_select() {
    use sluice::OutputMode;
    let s = session();
    let schema = list_schema();
    let stream = sluice::source::memory::MemoryStream::new(schema.clone());
    stream
        .to_frame(&s)
        .unwrap()
        .create_or_replace_temp_view("events")
        .unwrap();
    let q = s
        .sql("SELECT k, transform(filter(xs, x -> x % 2 = 1), x -> x * k) AS odd FROM events")
        .unwrap()
        .write_stream()
        .format("memory")
        .output_mode(OutputMode::Append)
        .query_name("lambda_out")
        .start()
        .unwrap();
    stream
        .add_batch(list_batch(
            &schema,
            vec![Some(vec![Some(1), Some(2), Some(3)]), None],
            vec![10, 1],
        ))
        .unwrap();
    q.process_all_available().unwrap();
    stream
        .add_batch(list_batch(
            &schema,
            vec![Some(vec![Some(5), None])],
            vec![2],
        ))
        .unwrap();
    q.process_all_available().unwrap();
    let got = rows(&s, "SELECT k, odd FROM lambda_out ORDER BY k");
    q.stop();
    assert_eq!(got, [["1", "null"], ["2", "[10]"], ["10", "[10, 30]"]]);
}
