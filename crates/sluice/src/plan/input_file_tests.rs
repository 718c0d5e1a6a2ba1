//! Spark's values (PySpark 3.5.7) for `input_file_name()`, `input_file_block_start()` and
//! `input_file_block_length()` (beside the rule they test, which reads the engine's plans).

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;

use crate::Session;

fn session() -> Session {
    Session::builder().build().unwrap()
}

/// The single row of `sql`: each column's type and value.
fn row(s: &Session, sql: &str) -> Vec<(DataType, ScalarValue)> {
    let batches = s
        .sql(sql)
        .and_then(|f| f.collect())
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let b = batches.iter().find(|b| b.num_rows() > 0).expect("one row");
    b.columns()
        .iter()
        .map(|c| {
            (
                c.data_type().clone(),
                ScalarValue::try_from_array(c, 0).unwrap(),
            )
        })
        .collect()
}

fn error(s: &Session, sql: &str) -> String {
    match s.sql(sql).and_then(|f| f.collect()) {
        Ok(_) => panic!("{sql} should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn input_file_functions_are_sparks_constants_where_no_row_comes_from_a_file() {
    let s = session();
    let r = row(
        &s,
        "SELECT input_file_name(), input_file_block_start(), input_file_block_length()",
    );
    assert_eq!(r[0].1, ScalarValue::Utf8(Some(String::new())));
    assert_eq!(r[1].1, ScalarValue::Int64(Some(-1)));
    assert_eq!(r[2].1, ScalarValue::Int64(Some(-1)));
    // A rate stream: no file, the constants (and the column keeps its name).
    let rate = s.read_stream().format("rate").load_source().unwrap();
    let q = rate
        .select_sql([
            "value",
            "input_file_name() AS f",
            "input_file_block_start()",
        ])
        .unwrap();
    let plan = s.analyze(q.logical_plan().clone()).unwrap();
    let shown = format!("{}", plan.display_indent());
    assert!(!shown.contains("input_file_name()"), "{shown}");
    assert_eq!(plan.schema().field(1).name(), "f");
    assert_eq!(plan.schema().field(2).name(), "input_file_block_start()");
}

#[test]
fn input_file_functions_over_files_are_not_supported_yet() {
    let s = session();
    let dir = tempfile::tempdir().unwrap();
    let files = s
        .read_stream()
        .format("json")
        .schema("a INT")
        .unwrap()
        .load(dir.path().to_str().unwrap())
        .unwrap();
    let q = files.select_sql(["a", "input_file_name()"]).unwrap();
    let e = s.analyze(q.logical_plan().clone()).unwrap_err();
    assert!(e.is(crate::error::class::SLUICE_NOT_SUPPORTED_YET), "{e}");
    assert!(
        e.message().contains("input_file_name()") && e.message().contains("file source"),
        "{e}"
    );
    // A batch table may hold rows read from files: not supported yet either.
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("x", DataType::Int64, true),
    ]));
    let batch = arrow::record_batch::RecordBatch::try_new(
        schema.clone(),
        vec![std::sync::Arc::new(arrow::array::Int64Array::from(vec![1]))],
    )
    .unwrap();
    s.register_batches("t", schema, vec![batch]).unwrap();
    let e = error(&s, "SELECT x, input_file_block_length() FROM t");
    assert!(e.contains("not supported yet") && e.contains("`t`"), "{e}");
    // VALUES reads no table: the constant.
    let r = row(&s, "SELECT input_file_name() FROM (VALUES (1)) v(x)");
    assert_eq!(r[0].1, ScalarValue::Utf8(Some(String::new())));
}
