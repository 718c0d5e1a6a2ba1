//! What the SQL-level tests of the function modules share: a session, and a query's single
//! row (as values or as text), its single value, or its error.

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use arrow::util::display::array_value_to_string;
use datafusion::common::ScalarValue;

use sluice::Session;

/// A session with the default conf.
pub(super) fn session() -> Session {
    Session::builder().build().unwrap()
}

/// The single row of `sql`: each column's type and value.
pub(super) fn row(s: &Session, sql: &str) -> Vec<(DataType, ScalarValue)> {
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

/// The single row of `sql` as text (nulls as `NULL`).
pub(super) fn text(s: &Session, sql: &str) -> Vec<String> {
    let batches = s
        .sql(sql)
        .and_then(|f| f.collect())
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let b = batches.iter().find(|b| b.num_rows() > 0).expect("one row");
    b.columns()
        .iter()
        .map(|c| {
            if c.is_null(0) {
                "NULL".into()
            } else {
                array_value_to_string(c, 0).unwrap()
            }
        })
        .collect()
}

pub(super) fn error(s: &Session, sql: &str) -> String {
    match s.sql(sql).and_then(|f| f.collect()) {
        Ok(_) => panic!("{sql} should fail"),
        Err(e) => e.to_string(),
    }
}

/// The single value of `sql` (one non-empty batch, its first column).
pub(super) fn one(s: &Session, sql: &str) -> ScalarValue {
    let b: Vec<RecordBatch> = s.sql(sql).unwrap().collect().unwrap();
    let b: Vec<&RecordBatch> = b.iter().filter(|b| b.num_rows() > 0).collect();
    assert_eq!(b.len(), 1, "{sql}");
    ScalarValue::try_from_array(b[0].column(0), 0).unwrap()
}
