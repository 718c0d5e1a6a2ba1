//! Canonical values (FORMAT.md "Canonical values") and row comparison, nested values included
//! (`crates/conformance/scenarios/README.md`): a struct is a JSON object, a list (List,
//! LargeList, FixedSizeList) a JSON array, a map a JSON object keyed by the canonical key value
//! rendered as a string. Objects compare key by key, arrays in order, numbers with the tolerance.

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
        DataType::Struct(_) => any
            .downcast_ref::<StructArray>()
            .map(|x| {
                let fields = x.fields().iter().zip(x.columns());
                Value::Object(
                    fields
                        .map(|(f, c)| (f.name().clone(), cell(c, i)))
                        .collect(),
                )
            })
            .unwrap_or(Value::Null),
        DataType::List(_) => any
            .downcast_ref::<ListArray>()
            .map(|x| list(&x.value(i)))
            .unwrap_or(Value::Null),
        DataType::LargeList(_) => any
            .downcast_ref::<LargeListArray>()
            .map(|x| list(&x.value(i)))
            .unwrap_or(Value::Null),
        DataType::FixedSizeList(_, _) => any
            .downcast_ref::<FixedSizeListArray>()
            .map(|x| list(&x.value(i)))
            .unwrap_or(Value::Null),
        DataType::Map(_, _) => any
            .downcast_ref::<MapArray>()
            .map(|x| {
                let entries = x.value(i);
                let (keys, values) = (entries.column(0), entries.column(1));
                Value::Object(
                    (0..entries.len())
                        .map(|j| (map_key(&cell(keys, j)), cell(values, j)))
                        .collect(),
                )
            })
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

/// Every element of a list value, canonical.
fn list(values: &ArrayRef) -> Value {
    Value::Array((0..values.len()).map(|j| cell(values, j)).collect())
}

/// A map key as a JSON object key: a string as it is, anything else as its JSON text (ints
/// as decimal), as the recorder renders it.
fn map_key(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        other => other.to_string(),
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

/// Equal up to the float tolerance (integers and floats compare by value), recursively: objects
/// key by key, arrays element by element in order.
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| values_equal(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| values_equal(v, w))
        }
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

    fn cells(a: ArrayRef) -> Vec<Value> {
        (0..a.len()).map(|i| cell(&a, i)).collect()
    }

    #[test]
    fn a_struct_is_an_object_with_canonical_timestamps_inside() {
        use arrow::array::{Int64Array, StringArray, StructArray, TimestampMicrosecondArray};
        use arrow::datatypes::Field;
        use std::sync::Arc;
        let ts = TimestampMicrosecondArray::from(vec![Some(1_789_473_600_500_000), None])
            .with_timezone("UTC");
        let s = StructArray::from(vec![
            (
                Arc::new(Field::new("userId", DataType::Utf8, true)),
                Arc::new(StringArray::from(vec![Some("u1"), None])) as ArrayRef,
            ),
            (
                Arc::new(Field::new(
                    "at",
                    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                    true,
                )),
                Arc::new(ts) as ArrayRef,
            ),
            (
                Arc::new(Field::new("n", DataType::Int64, true)),
                Arc::new(Int64Array::from(vec![7, 8])) as ArrayRef,
            ),
        ]);
        assert_eq!(
            cells(Arc::new(s)),
            vec![
                json!({"userId": "u1", "at": "2026-09-15T12:00:00.5", "n": 7}),
                json!({"userId": null, "at": null, "n": 8}),
            ]
        );
    }

    #[test]
    fn lists_of_every_arrow_kind_are_arrays_and_a_null_list_is_null() {
        use arrow::array::{FixedSizeListArray, LargeListArray, ListArray};
        use arrow::datatypes::Int32Type;
        use std::sync::Arc;
        let data = vec![Some(vec![Some(1), None, Some(3)]), None, Some(vec![])];
        let want = vec![json!([1, null, 3]), Value::Null, json!([])];
        let l = ListArray::from_iter_primitive::<Int32Type, _, _>(data.clone());
        assert_eq!(cells(Arc::new(l)), want);
        let l = LargeListArray::from_iter_primitive::<Int32Type, _, _>(data);
        assert_eq!(cells(Arc::new(l)), want);
        let f = FixedSizeListArray::from_iter_primitive::<Int32Type, _, _>(
            vec![Some(vec![Some(1), Some(2)]), None],
            2,
        );
        assert_eq!(cells(Arc::new(f)), vec![json!([1, 2]), Value::Null]);
    }

    #[test]
    fn a_map_is_an_object_keyed_by_the_key_text() {
        use arrow::array::{Int32Builder, MapBuilder, StringBuilder};
        use std::sync::Arc;
        let mut b = MapBuilder::new(None, Int32Builder::new(), StringBuilder::new());
        b.keys().append_value(1);
        b.values().append_value("one");
        b.keys().append_value(20);
        b.values().append_null();
        b.append(true).unwrap();
        b.append(false).unwrap();
        b.append(true).unwrap();
        assert_eq!(
            cells(Arc::new(b.finish())),
            vec![json!({"1": "one", "20": null}), Value::Null, json!({})]
        );
        let mut b = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
        b.keys().append_value("clicks");
        b.values().append_value(3);
        b.append(true).unwrap();
        assert_eq!(cells(Arc::new(b.finish())), vec![json!({"clicks": 3})]);
    }

    #[test]
    fn nested_values_compare_recursively() {
        let e = row(json!({"s": {"a": 1, "b": [1.0, {"x": 0.1 + 0.2}]}, "m": {"k": null}}));
        // object key order does not matter; ints and floats compare by value, with tolerance
        let same = row(json!({"m": {"k": null}, "s": {"b": [1, {"x": 0.3}], "a": 1.0}}));
        assert!(compare_rows(std::slice::from_ref(&e), &[same], true).is_ok());
        // array order matters
        let swapped = row(json!({"s": {"a": 1, "b": [{"x": 0.3}, 1]}, "m": {"k": null}}));
        assert!(compare_rows(std::slice::from_ref(&e), &[swapped], true).is_err());
        // a missing field, an extra field, a different leaf value
        for other in [
            json!({"s": {"a": 1}, "m": {"k": null}}),
            json!({"s": {"a": 1, "b": [1, {"x": 0.3}], "c": 2}, "m": {"k": null}}),
            json!({"s": {"a": 1, "b": [1, {"x": 0.3}]}, "m": {"k": 0}}),
            json!({"s": {"a": 1, "b": [1, {"x": 0.3}, 2]}, "m": {"k": null}}),
        ] {
            assert!(
                compare_rows(std::slice::from_ref(&e), &[row(other.clone())], true).is_err(),
                "{other}"
            );
        }
    }
}
