//! Spark's function that fails a query on purpose: `assert_true(condition[, message])` is null
//! when the condition is true and fails with `USER_RAISED_EXCEPTION` (the message, or Spark's
//! default one) otherwise.

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::ScalarUDF;

use super::rowwise::{spark_err, text, usage, RowFn};

fn r_null(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Null)
}

fn c_assert(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        1 => Ok(vec![DataType::Boolean]),
        2 => Ok(vec![DataType::Boolean, DataType::Utf8]),
        _ => Err(usage(name, "(condition[, message])")),
    }
}

fn assert_true(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    if let ScalarValue::Boolean(Some(true)) = a[0] {
        return Ok(ScalarValue::Null);
    }
    let msg = a
        .get(1)
        .and_then(text)
        .map(str::to_string)
        .unwrap_or_else(|| "assert_true: the condition is not true!".to_string());
    Err(spark_err(crate::error::class::USER_RAISED_EXCEPTION, msg))
}

/// `assert_true`, with a volatile signature.
pub(super) fn assert_true_udf() -> ScalarUDF {
    let mut assert = RowFn::new("assert_true", c_assert, r_null, assert_true);
    assert.signature = datafusion::logical_expr::Signature::user_defined(
        datafusion::logical_expr::Volatility::Volatile,
    );
    assert.udf()
}
