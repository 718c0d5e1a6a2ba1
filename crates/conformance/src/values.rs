//! Canonical values (FORMAT.md "Canonical values") and row comparison.

use std::collections::BTreeMap;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use serde_json::Value;

pub type Row = BTreeMap<String, Value>;

/// Relative tolerance for floating point comparisons.
pub const FLOAT_TOLERANCE: f64 = 1e-9;

fn micros(a: &ArrayRef, i: usize) -> Option<i64> {
    use arrow::array::*;
    let DataType::Timestamp(unit, _) = a.data_type() else {
        return None;
    };
    Some(match unit {
        TimeUnit::Second => a.as_any().downcast_ref::<TimestampSecondArray>()?.value(i) * 1_000_000,
        TimeUnit::Millisecond => {
            a.as_any()
                .downcast_ref::<TimestampMillisecondArray>()?
                .value(i)
                * 1000
        }
        TimeUnit::Microsecond => a
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()?
            .value(i),
        TimeUnit::Nanosecond => {
            a.as_any()
                .downcast_ref::<TimestampNanosecondArray>()?
                .value(i)
                / 1000
        }
    })
}

/// One cell as a canonical JSON value.
pub fn cell(a: &ArrayRef, i: usize) -> Value {
    use arrow::array::*;
    if a.is_null(i) {
        return Value::Null;
    }
    let any = a.as_any();
    match a.data_type() {
        DataType::Boolean => Value::Bool(
            any.downcast_ref::<BooleanArray>()
                .map(|x| x.value(i))
                .unwrap_or(false),
        ),
        DataType::Int8 => any
            .downcast_ref::<Int8Array>()
            .map(|x| Value::from(x.value(i)))
            .unwrap_or(Value::Null),
        DataType::Int16 => any
            .downcast_ref::<Int16Array>()
            .map(|x| Value::from(x.value(i)))
            .unwrap_or(Value::Null),
        DataType::Int32 => any
            .downcast_ref::<Int32Array>()
            .map(|x| Value::from(x.value(i)))
            .unwrap_or(Value::Null),
        DataType::Int64 => any
            .downcast_ref::<Int64Array>()
            .map(|x| Value::from(x.value(i)))
            .unwrap_or(Value::Null),
        DataType::UInt32 => any
            .downcast_ref::<UInt32Array>()
            .map(|x| Value::from(x.value(i)))
            .unwrap_or(Value::Null),
        DataType::UInt64 => any
            .downcast_ref::<UInt64Array>()
            .map(|x| Value::from(x.value(i)))
            .unwrap_or(Value::Null),
        DataType::Float32 => any
            .downcast_ref::<Float32Array>()
            .map(|x| float(x.value(i) as f64))
            .unwrap_or(Value::Null),
        DataType::Float64 => any
            .downcast_ref::<Float64Array>()
            .map(|x| float(x.value(i)))
            .unwrap_or(Value::Null),
        DataType::Timestamp(_, _) => micros(a, i)
            .map(|us| {
                // the recorded form: Spark's text with a `T` between date and time
                let text = sluice::time_text::spark_timestamp_text(us)
                    .map(|s| s.replacen(' ', "T", 1))
                    .unwrap_or_else(|| us.to_string());
                Value::String(text)
            })
            .unwrap_or(Value::Null),
        DataType::Date32 => any
            .downcast_ref::<Date32Array>()
            .and_then(|x| x.value_as_date(i))
            .map(|d| Value::String(d.format("%Y-%m-%d").to_string()))
            .unwrap_or(Value::Null),
        DataType::Decimal128(_, s) => any
            .downcast_ref::<Decimal128Array>()
            .map(|x| float(x.value(i) as f64 / 10f64.powi(*s as i32)))
            .unwrap_or(Value::Null),
        _ => {
            let opts = FormatOptions::default();
            match ArrayFormatter::try_new(a.as_ref(), &opts) {
                Ok(f) => Value::String(f.value(i).to_string()),
                Err(_) => Value::Null,
            }
        }
    }
}

fn float(v: f64) -> Value {
    serde_json::Number::from_f64(v)
        .map(Value::Number)
        .unwrap_or_else(|| Value::String(v.to_string()))
}

/// All rows of some record batches as canonical rows.
pub fn rows_of<'a>(batches: impl IntoIterator<Item = &'a RecordBatch>) -> Vec<Row> {
    let mut out = Vec::new();
    for b in batches {
        let schema = b.schema();
        for i in 0..b.num_rows() {
            let mut row = Row::new();
            for (f, c) in schema.fields().iter().zip(b.columns()) {
                row.insert(f.name().clone(), cell(c, i));
            }
            out.push(row);
        }
    }
    out
}

/// Equal up to the float tolerance (integers and floats compare by value).
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(p), Some(q)) => p == q,
            _ => {
                let (p, q) = (
                    x.as_f64().unwrap_or(f64::NAN),
                    y.as_f64().unwrap_or(f64::NAN),
                );
                p == q || (p - q).abs() <= FLOAT_TOLERANCE * p.abs().max(q.abs())
            }
        },
        _ => a == b,
    }
}

pub fn rows_equal(a: &Row, b: &Row) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| values_equal(v, w)))
}

/// Compares two row lists (in order, or as multisets). `Err` describes the first difference.
pub fn compare_rows(expected: &[Row], actual: &[Row], ordered: bool) -> Result<(), String> {
    if ordered {
        for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
            if !rows_equal(e, a) {
                return Err(format!("row {i}: expected {} got {}", show(e), show(a)));
            }
        }
        if expected.len() != actual.len() {
            return Err(format!(
                "expected {} rows, got {}",
                expected.len(),
                actual.len()
            ));
        }
        return Ok(());
    }
    let mut remaining: Vec<&Row> = actual.iter().collect();
    let mut missing = Vec::new();
    for e in expected {
        match remaining.iter().position(|a| rows_equal(e, a)) {
            Some(p) => {
                remaining.swap_remove(p);
            }
            None => missing.push(e),
        }
    }
    if missing.is_empty() && remaining.is_empty() {
        return Ok(());
    }
    let mut msg = format!("expected {} rows, got {}", expected.len(), actual.len());
    if let Some(m) = missing.first() {
        msg.push_str(&format!("; missing {}", show(m)));
    }
    if let Some(u) = remaining.first() {
        msg.push_str(&format!("; unexpected {}", show(u)));
    }
    Err(msg)
}

fn show(r: &Row) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Value) -> Row {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn multiset_comparison_ignores_order_and_int_float_form() {
        let e = vec![
            row(json!({"a": 1, "b": 2.0})),
            row(json!({"a": 2, "b": null})),
        ];
        let a = vec![
            row(json!({"a": 2, "b": null})),
            row(json!({"a": 1, "b": 2})),
        ];
        assert!(compare_rows(&e, &a, false).is_ok());
        assert!(compare_rows(&e, &a, true).is_err());
    }

    #[test]
    fn a_missing_or_extra_row_is_reported() {
        let e = vec![row(json!({"a": 1}))];
        let a = vec![row(json!({"a": 1})), row(json!({"a": 1}))];
        let err = compare_rows(&e, &a, false).unwrap_err();
        assert!(err.contains("unexpected"), "{err}");
        assert!(compare_rows(
            &[row(json!({"x": 0.1 + 0.2}))],
            &[row(json!({"x": 0.3}))],
            false
        )
        .is_ok());
    }
}
