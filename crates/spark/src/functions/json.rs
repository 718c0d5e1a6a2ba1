//! Spark's functions on JSON text, computed row by row: `json_array_length`,
//! `json_object_keys` (in document order) and `get_json_object` (`$`, `.name`, `['name']`,
//! `[index]` paths). `from_json`, `to_json` and `schema_of_json` are [`crate::json`].

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::ScalarUDF;

use super::rowwise::{all, r_i32, r_str, r_str_list, spark_err, text, usage, RowFn};

fn c_str1(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        1 => Ok(vec![DataType::Utf8]),
        _ => Err(usage(name, "one STRING")),
    }
}
fn c_str2(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        2 => Ok(all(DataType::Utf8, 2)),
        _ => Err(usage(name, "two STRINGs")),
    }
}

fn json_array_length(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let n = text(&a[0])
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .and_then(|v| v.as_array().map(|a| a.len() as i32));
    Ok(ScalarValue::Int32(n))
}

/// The keys of a JSON object in document order (`serde_json`'s maps are sorted).
struct Keys(Option<Vec<String>>);

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Keys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut m: M) -> Result<Keys, M::Error> {
                let mut keys = Vec::new();
                while let Some(k) = m.next_key::<String>()? {
                    m.next_value::<serde::de::IgnoredAny>()?;
                    keys.push(k);
                }
                Ok(Keys(Some(keys)))
            }
            fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut s: S) -> Result<Keys, S::Error> {
                while s.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Keys(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Keys, E> {
                Ok(Keys(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Keys, E> {
                Ok(Keys(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Keys, E> {
                Ok(Keys(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Keys, E> {
                Ok(Keys(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Keys, E> {
                Ok(Keys(None))
            }
            fn visit_unit<E>(self) -> Result<Keys, E> {
                Ok(Keys(None))
            }
        }
        d.deserialize_any(V)
    }
}

fn json_object_keys(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let keys = text(&a[0])
        .and_then(|s| serde_json::from_str::<Keys>(s).ok())
        .and_then(|k| k.0);
    let Some(keys) = keys else {
        return ScalarValue::try_from(ret);
    };
    let vals: Vec<ScalarValue> = keys
        .into_iter()
        .map(|k| ScalarValue::Utf8(Some(k)))
        .collect();
    Ok(ScalarValue::List(ScalarValue::new_list_nullable(
        &vals,
        &DataType::Utf8,
    )))
}

/// A JSON path of Spark's `get_json_object`: `$`, `.name`, `['name']`, `[index]`.
fn json_path(p: &str) -> Option<Vec<Result<String, usize>>> {
    let mut rest = p.strip_prefix('$')?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']")?;
            out.push(Ok(r[..end].to_string()));
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            out.push(Err(r[..end].trim().parse().ok()?));
            rest = &r[end + 1..];
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return None;
            }
            out.push(Ok(r[..end].to_string()));
            rest = &r[end..];
        } else {
            return None;
        }
    }
    Some(out)
}

/// Whether serializing `v` keeps Spark's text: `serde_json` sorts object keys, so only objects
/// of at most one key (at any depth) are unambiguous.
fn order_safe(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(m) => m.len() <= 1 && m.values().all(order_safe),
        serde_json::Value::Array(a) => a.iter().all(order_safe),
        _ => true,
    }
}

fn get_json_object(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let (Some(doc), Some(path)) = (text(&a[0]), text(&a[1])) else {
        return Ok(ScalarValue::Utf8(None));
    };
    let (Some(path), Ok(mut v)) = (
        json_path(path),
        serde_json::from_str::<serde_json::Value>(doc),
    ) else {
        return Ok(ScalarValue::Utf8(None));
    };
    for step in path {
        let next = match step {
            Ok(name) => v.get_mut(&name).map(serde_json::Value::take),
            Err(i) => v.get_mut(i).map(serde_json::Value::take),
        };
        match next {
            Some(n) => v = n,
            None => return Ok(ScalarValue::Utf8(None)),
        }
    }
    Ok(ScalarValue::Utf8(match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s),
        other if order_safe(&other) => Some(other.to_string()),
        _ => {
            return Err(spark_err(
                crate::error::class::SLUICE_NOT_SUPPORTED_YET,
                "get_json_object: a result holding a JSON object of several keys is not \
                 supported yet (Sluice would reorder its keys); select a field of it instead"
                    .into(),
            ))
        }
    }))
}

/// The functions of this file.
pub(super) fn udfs() -> Vec<ScalarUDF> {
    vec![
        RowFn::new("json_array_length", c_str1, r_i32, json_array_length).udf(),
        RowFn::new("json_object_keys", c_str1, r_str_list, json_object_keys).udf(),
        RowFn::new("get_json_object", c_str2, r_str, get_json_object).udf(),
    ]
}
