//! Spark's text of Arrow values, scalars and nested (`STRUCT`, `ARRAY`, `MAP`) alike:
//!
//! - [`write_json`]: JSON as Spark's `JacksonGenerator` writes it, for `to_json` and the JSON
//!   file sink: struct fields that are null are left out (`ignoreNullFields`), array elements
//!   and map values that are null are `null`, map keys are their string text, doubles as Java
//!   prints them (`1.0`, `1.0E10`, `"NaN"`), decimals with their scale (`1.50`), dates
//!   `"2024-01-02"`, timestamps `"2024-01-01T00:00:00.000Z"` (UTC, milliseconds).
//! - [`write_show`]: the text `Dataset.show()` prints for a value (Spark's `ToPrettyString`):
//!   structs `{1, a}`, arrays `[1, 2]`, maps `{a -> 1}`, nulls inside them `NULL`, timestamps
//!   `2024-01-01 00:00:00`.
//!
//! A leaf module: it depends only on `time_text` and `error`.

use std::fmt::Write as _;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Float16Type, Float32Type, Float64Type,
    Int16Type, Int32Type, Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};

use crate::error::{Result, SluiceError};

/// A double as Java's `Double.toString` writes it (`1.0`, `1.5E10`, `1.0E-4`, `NaN`).
pub fn java_double_to_string(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    java_text(
        (1e-3..1e7).contains(&d.abs()),
        format!("{d}"),
        format!("{d:e}"),
    )
}

/// A float as Java's `Float.toString` writes it.
fn java_float_to_string(f: f32) -> String {
    if !f.is_finite() || f == 0.0 {
        return java_double_to_string(f as f64);
    }
    java_text(
        (1e-3..1e7).contains(&f.abs()),
        format!("{f}"),
        format!("{f:e}"),
    )
}

fn java_text(plain: bool, decimal: String, sci: String) -> String {
    if plain {
        if decimal.contains('.') {
            decimal
        } else {
            format!("{decimal}.0")
        }
    } else {
        match sci.split_once('e') {
            Some((m, e)) if m.contains('.') => format!("{m}E{e}"),
            Some((m, e)) => format!("{m}.0E{e}"),
            None => sci,
        }
    }
}

/// A string as a JSON string literal, escaped as Jackson does.
pub fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn unsupported(dt: &DataType) -> SluiceError {
    SluiceError::not_supported_yet(format!(
        "writing values of the type {} as text is not supported yet",
        crate::schema::spark_type_name(dt)
    ))
}

/// The text of a scalar that JSON and `show()` share (numbers, booleans), or `None` for the
/// kinds that differ.
fn number_text(a: &dyn Array, i: usize) -> Option<String> {
    Some(match a.data_type() {
        DataType::Boolean => a.as_boolean().value(i).to_string(),
        DataType::Int8 => a.as_primitive::<Int8Type>().value(i).to_string(),
        DataType::Int16 => a.as_primitive::<Int16Type>().value(i).to_string(),
        DataType::Int32 => a.as_primitive::<Int32Type>().value(i).to_string(),
        DataType::Int64 => a.as_primitive::<Int64Type>().value(i).to_string(),
        DataType::UInt8 => a.as_primitive::<UInt8Type>().value(i).to_string(),
        DataType::UInt16 => a.as_primitive::<UInt16Type>().value(i).to_string(),
        DataType::UInt32 => a.as_primitive::<UInt32Type>().value(i).to_string(),
        DataType::UInt64 => a.as_primitive::<UInt64Type>().value(i).to_string(),
        DataType::Float16 => {
            java_float_to_string(a.as_primitive::<Float16Type>().value(i).to_f32())
        }
        DataType::Float32 => java_float_to_string(a.as_primitive::<Float32Type>().value(i)),
        DataType::Float64 => java_double_to_string(a.as_primitive::<Float64Type>().value(i)),
        DataType::Decimal128(_, s) => {
            <Decimal128Type as arrow::datatypes::DecimalType>::format_decimal(
                a.as_primitive::<Decimal128Type>().value(i),
                38,
                *s,
            )
        }
        _ => return None,
    })
}

fn date_text(a: &dyn Array, i: usize) -> Option<String> {
    let days = match a.data_type() {
        DataType::Date32 => a.as_primitive::<Date32Type>().value(i) as i64,
        DataType::Date64 => a
            .as_primitive::<Date64Type>()
            .value(i)
            .div_euclid(86_400_000),
        _ => return None,
    };
    let d = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?
        .checked_add_signed(chrono::Duration::days(days))?;
    Some(d.format("%Y-%m-%d").to_string())
}

fn timestamp_value(a: &dyn Array, i: usize) -> Option<(i64, TimeUnit)> {
    let DataType::Timestamp(unit, _) = a.data_type() else {
        return None;
    };
    Some(match unit {
        TimeUnit::Second => (a.as_primitive::<TimestampSecondType>().value(i), *unit),
        TimeUnit::Millisecond => (a.as_primitive::<TimestampMillisecondType>().value(i), *unit),
        TimeUnit::Microsecond => (a.as_primitive::<TimestampMicrosecondType>().value(i), *unit),
        TimeUnit::Nanosecond => (a.as_primitive::<TimestampNanosecondType>().value(i), *unit),
    })
}

/// The string form of a map key or a `STRING`-like value (no quotes).
fn plain_text(a: &dyn Array, i: usize) -> Result<String> {
    let mut s = String::new();
    write_show(&mut s, a, i)?;
    Ok(s)
}

/// Writes value `i` of `a` as Spark's JSON (`null` when it is null).
pub fn write_json(out: &mut String, a: &dyn Array, i: usize) -> Result<()> {
    if a.is_null(i) {
        out.push_str("null");
        return Ok(());
    }
    if let Some(t) = number_text(a, i) {
        match a.data_type() {
            // Jackson writes non-finite numbers quoted.
            DataType::Float16 | DataType::Float32 | DataType::Float64
                if t.ends_with("NaN") || t.ends_with("Infinity") =>
            {
                write_json_string(out, &t)
            }
            _ => out.push_str(&t),
        }
        return Ok(());
    }
    if let Some(t) = date_text(a, i) {
        write_json_string(out, &t);
        return Ok(());
    }
    if let Some((v, unit)) = timestamp_value(a, i) {
        let t = crate::time_text::iso_timestamp(v, unit).unwrap_or_else(|| v.to_string());
        write_json_string(out, &t);
        return Ok(());
    }
    match a.data_type() {
        DataType::Utf8 => write_json_string(out, a.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => write_json_string(out, a.as_string::<i64>().value(i)),
        DataType::Utf8View => write_json_string(out, a.as_string_view().value(i)),
        DataType::Struct(fields) => {
            let s = a.as_struct();
            out.push('{');
            let mut first = true;
            for (f, c) in fields.iter().zip(s.columns()) {
                if c.is_null(i) {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                write_json_string(out, f.name());
                out.push(':');
                write_json(out, c.as_ref(), i)?;
            }
            out.push('}');
        }
        DataType::List(_) | DataType::LargeList(_) => {
            let l = list_value(a, i)?;
            out.push('[');
            for j in 0..l.len() {
                if j > 0 {
                    out.push(',');
                }
                write_json(out, l.as_ref(), j)?;
            }
            out.push(']');
        }
        DataType::Map(_, _) => {
            let e = a.as_map().value(i);
            out.push('{');
            for j in 0..e.len() {
                if j > 0 {
                    out.push(',');
                }
                write_json_string(out, &plain_text(e.column(0).as_ref(), j)?);
                out.push(':');
                write_json(out, e.column(1).as_ref(), j)?;
            }
            out.push('}');
        }
        DataType::Null => out.push_str("null"),
        other => return Err(unsupported(other)),
    }
    Ok(())
}

fn list_value(a: &dyn Array, i: usize) -> Result<arrow::array::ArrayRef> {
    Ok(match a.data_type() {
        DataType::List(_) => a.as_list::<i32>().value(i),
        DataType::LargeList(_) => a.as_list::<i64>().value(i),
        other => return Err(unsupported(other)),
    })
}

/// Writes value `i` of `a` as `Dataset.show()` prints it (`NULL` when it is null).
pub fn write_show(out: &mut String, a: &dyn Array, i: usize) -> Result<()> {
    if a.is_null(i) {
        out.push_str("NULL");
        return Ok(());
    }
    if let Some(t) = number_text(a, i).or_else(|| date_text(a, i)) {
        out.push_str(&t);
        return Ok(());
    }
    if let Some((v, unit)) = timestamp_value(a, i) {
        let micros = match unit {
            TimeUnit::Second => v.saturating_mul(1_000_000),
            TimeUnit::Millisecond => v.saturating_mul(1_000),
            TimeUnit::Microsecond => v,
            TimeUnit::Nanosecond => v.div_euclid(1_000),
        };
        let t = crate::time_text::spark_timestamp_text(micros).unwrap_or_else(|| v.to_string());
        out.push_str(&t);
        return Ok(());
    }
    match a.data_type() {
        DataType::Utf8 => out.push_str(a.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => out.push_str(a.as_string::<i64>().value(i)),
        DataType::Utf8View => out.push_str(a.as_string_view().value(i)),
        DataType::Binary => {
            let b = a.as_binary::<i32>().value(i);
            out.push('[');
            for (j, x) in b.iter().enumerate() {
                if j > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{x:02X}");
            }
            out.push(']');
        }
        DataType::Struct(_) => {
            let s = a.as_struct();
            out.push('{');
            for (j, c) in s.columns().iter().enumerate() {
                if j > 0 {
                    out.push_str(", ");
                }
                write_show(out, c.as_ref(), i)?;
            }
            out.push('}');
        }
        DataType::List(_) | DataType::LargeList(_) => {
            let l = list_value(a, i)?;
            out.push('[');
            for j in 0..l.len() {
                if j > 0 {
                    out.push_str(", ");
                }
                write_show(out, l.as_ref(), j)?;
            }
            out.push(']');
        }
        DataType::Map(_, _) => {
            let e = a.as_map().value(i);
            out.push('{');
            for j in 0..e.len() {
                if j > 0 {
                    out.push_str(", ");
                }
                write_show(out, e.column(0).as_ref(), j)?;
                out.push_str(" -> ");
                write_show(out, e.column(1).as_ref(), j)?;
            }
            out.push('}');
        }
        DataType::Null => out.push_str("NULL"),
        other => {
            let opts = arrow::util::display::FormatOptions::default().with_null("NULL");
            let f = arrow::util::display::ArrayFormatter::try_new(a, &opts)
                .map_err(|_| unsupported(other))?;
            let _ = write!(out, "{}", f.value(i));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, RecordBatch, StringArray};

    /// Evaluates one SQL expression in a plain DataFusion context.
    fn eval(sql: &str) -> ArrayRef {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let ctx = datafusion::prelude::SessionContext::new();
            let b: Vec<RecordBatch> = ctx
                .sql(&format!("SELECT {sql} AS v"))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            b[0].column(0).clone()
        })
    }

    #[test]
    fn json_and_show_text_of_nested_values_as_spark() {
        // Expected values from Spark 3.5.7 (`to_json(..)` and `show()`).
        let cases = [
            (
                "named_struct('a', 1, 'b', make_array(1, 2), 'd', CAST(NULL AS INT), \
                 'e', named_struct('x', CAST(NULL AS STRING)), 'f', make_array(CAST(NULL AS INT)), \
                 'fl', 1.0, 'dec', CAST(1.50 AS DECIMAL(3,2)))",
                r#"{"a":1,"b":[1,2],"e":{},"f":[null],"fl":1.0,"dec":1.50}"#,
                "{1, [1, 2], NULL, {NULL}, [NULL], 1.0, 1.50}",
            ),
            ("make_array(1, 2)", "[1,2]", "[1, 2]"),
            (
                "map(['a', 'b'], [1, 2])",
                r#"{"a":1,"b":2}"#,
                "{a -> 1, b -> 2}",
            ),
            ("map([1], ['a'])", r#"{"1":"a"}"#, "{1 -> a}"),
            (
                "make_array(named_struct('a', 1, 'b', 'x'))",
                r#"[{"a":1,"b":"x"}]"#,
                "[{1, x}]",
            ),
            (
                "make_array(CAST('2024-01-01 00:00:00' AS TIMESTAMP))",
                r#"["2024-01-01T00:00:00.000Z"]"#,
                "[2024-01-01 00:00:00]",
            ),
            (
                "make_array(CAST('2024-01-01' AS DATE))",
                r#"["2024-01-01"]"#,
                "[2024-01-01]",
            ),
            ("make_array('x y', '')", r#"["x y",""]"#, "[x y, ]"),
        ];
        for (sql, json, show) in cases {
            let a = eval(sql);
            let mut j = String::new();
            write_json(&mut j, a.as_ref(), 0).unwrap();
            assert_eq!(j, json, "{sql}");
            let mut s = String::new();
            write_show(&mut s, a.as_ref(), 0).unwrap();
            assert_eq!(s, show, "{sql}");
        }
        let s: ArrayRef = Arc::new(StringArray::from(vec!["a\"b\n"]));
        let mut j = String::new();
        write_json(&mut j, s.as_ref(), 0).unwrap();
        assert_eq!(j, r#""a\"b\n""#);
        assert_eq!(java_double_to_string(1e10), "1.0E10");
        assert_eq!(java_float_to_string(1.5), "1.5");
    }
}
