//! Rows as JSON values (timestamps as micros, dates as days, nested values as objects and
//! arrays), for the tests of the readers here and in the engine.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, TimestampMicrosecondType,
};
use serde_json::{json, Value};

use super::*;

/// The rows of batches as JSON values (timestamps as micros, dates as days).
pub fn rows(batches: &[RecordBatch]) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let mut row = Vec::new();
            for c in b.columns() {
                row.push(value(c.as_ref(), r));
            }
            out.push(row);
        }
    }
    out
}

fn value(a: &dyn Array, r: usize) -> Value {
    if a.is_null(r) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Utf8 => json!(a.as_string::<i32>().value(r)),
        DataType::Boolean => json!(a.as_boolean().value(r)),
        DataType::Int8 => json!(a.as_primitive::<Int8Type>().value(r)),
        DataType::Int16 => json!(a.as_primitive::<Int16Type>().value(r)),
        DataType::Int32 => json!(a.as_primitive::<Int32Type>().value(r)),
        DataType::Int64 => json!(a.as_primitive::<Int64Type>().value(r)),
        DataType::Float32 => json!(a.as_primitive::<Float32Type>().value(r)),
        DataType::Float64 => {
            let v = a.as_primitive::<Float64Type>().value(r);
            if v.is_nan() {
                json!("NaN")
            } else if v.is_infinite() {
                json!(if v > 0.0 { "Infinity" } else { "-Infinity" })
            } else {
                json!(v)
            }
        }
        DataType::Decimal128(_, _) => {
            json!(a.as_primitive::<Decimal128Type>().value(r).to_string())
        }
        DataType::Date32 => json!(a.as_primitive::<Date32Type>().value(r)),
        DataType::Timestamp(_, _) => {
            json!(a.as_primitive::<TimestampMicrosecondType>().value(r))
        }
        // Nested values as in the conformance corpus: a struct is an object in field
        // order, an array a list, a map an object.
        DataType::Struct(fs) => {
            let s = a.as_struct();
            let mut m = serde_json::Map::new();
            for (i, f) in fs.iter().enumerate() {
                m.insert(f.name().clone(), value(s.column(i).as_ref(), r));
            }
            Value::Object(m)
        }
        DataType::List(_) => {
            let l = a.as_list::<i32>().value(r);
            Value::Array((0..l.len()).map(|i| value(l.as_ref(), i)).collect())
        }
        DataType::Map(_, _) => {
            let e = a.as_map().value(r);
            let mut m = serde_json::Map::new();
            for i in 0..e.len() {
                let k = match value(e.column(0).as_ref(), i) {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                m.insert(k, value(e.column(1).as_ref(), i));
            }
            Value::Object(m)
        }
        other => json!(format!("<{other}>")),
    }
}
