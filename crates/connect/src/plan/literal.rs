//! Spark Connect literals to Spark SQL literals, typed as the client typed them (`F.lit(1)` is
//! an `INT`, a Python int beyond 32 bits a `BIGINT`, a typed null `CAST(NULL AS T)`), with
//! Spark's names for them (`1`, `x` for the string `'x'`, `NULL`).

use crate::error::{ConnectError, Result};
use crate::proto::expression::literal::{self as pl, LiteralType};
use crate::proto::expression::Literal;

use super::expr::Sql;

/// A string as a Spark SQL string literal (backslashes escaped, as Spark's default parser
/// reads them).
pub(crate) fn string_sql(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

fn typed(value: String, sql_type: &str, shown: String) -> Sql {
    Sql {
        text: format!("CAST({value} AS {sql_type})"),
        name: Some(shown),
        item: None,
        star: None,
    }
}

fn plain(text: String, shown: String) -> Sql {
    Sql {
        text,
        name: Some(shown),
        item: None,
        star: None,
    }
}

fn float_text(v: f64) -> (String, String) {
    if v.is_nan() {
        ("'NaN'".into(), "NaN".into())
    } else if v.is_infinite() {
        let s = if v > 0.0 { "Infinity" } else { "-Infinity" };
        (format!("'{s}'"), s.into())
    } else {
        let t = format!("{v:?}");
        (t.clone(), t)
    }
}

fn date_text(days: i32) -> Result<String> {
    arrow::temporal_conversions::date32_to_datetime(days)
        .map(|d| d.date().to_string())
        .ok_or_else(|| ConnectError::illegal_argument(format!("the date {days} is out of range")))
}

fn timestamp_text(micros: i64) -> Result<String> {
    sluice::time_text::spark_timestamp_text(micros).ok_or_else(|| {
        ConnectError::illegal_argument(format!("the timestamp {micros} is out of range"))
    })
}

/// The SQL of a literal (the element types of empty collections from the literal's
/// `data_type`, or the fields older clients send).
#[allow(deprecated)]
pub(crate) fn literal(l: &Literal) -> Result<Sql> {
    let lt = l
        .literal_type
        .as_ref()
        .ok_or_else(|| ConnectError::illegal_argument("a literal without its value"))?;
    Ok(match lt {
        LiteralType::Null(t) => {
            let t = match (&t.kind, &l.data_type) {
                (None, Some(dt)) => super::types::from_proto(dt)?,
                (None, None) => arrow::datatypes::DataType::Null,
                _ => super::types::from_proto(t)?,
            };
            if t == arrow::datatypes::DataType::Null {
                plain("NULL".into(), "NULL".into())
            } else {
                typed(
                    "NULL".into(),
                    &super::types::sql_type_text(&t)?,
                    "NULL".into(),
                )
            }
        }
        LiteralType::Binary(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02X}")).collect();
            plain(format!("X'{hex}'"), format!("X'{hex}'"))
        }
        LiteralType::Boolean(b) => plain(b.to_string(), b.to_string()),
        LiteralType::Byte(v) => typed(v.to_string(), "TINYINT", v.to_string()),
        LiteralType::Short(v) => typed(v.to_string(), "SMALLINT", v.to_string()),
        LiteralType::Integer(v) => {
            if *v < 0 {
                plain(format!("({v})"), v.to_string())
            } else {
                plain(v.to_string(), v.to_string())
            }
        }
        LiteralType::Long(v) => typed(v.to_string(), "BIGINT", v.to_string()),
        LiteralType::Float(v) => {
            let (t, s) = float_text(f64::from(*v));
            typed(t, "FLOAT", s)
        }
        LiteralType::Double(v) => {
            let (t, s) = float_text(*v);
            typed(t, "DOUBLE", s)
        }
        LiteralType::Decimal(d) => {
            let value = d.value.trim();
            if !value
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'))
            {
                return Err(ConnectError::illegal_argument(format!(
                    "{value:?} is not a decimal literal"
                )));
            }
            let (digits, frac) = {
                let unsigned = value.trim_start_matches(['-', '+']);
                let mut it = unsigned.splitn(2, '.');
                let int = it.next().unwrap_or("").trim_start_matches('0');
                let frac = it.next().unwrap_or("");
                (int.len() + frac.len(), frac.len())
            };
            let scale = d.scale.unwrap_or(frac as i32);
            let precision = d
                .precision
                .unwrap_or((digits.max(1)) as i32)
                .max(scale)
                .max(1);
            typed(
                string_sql(value),
                &format!("DECIMAL({precision},{scale})"),
                value.to_string(),
            )
        }
        LiteralType::String(s) => plain(string_sql(s), s.clone()),
        LiteralType::Date(d) => {
            let t = format!("DATE '{}'", date_text(*d)?);
            plain(t.clone(), t)
        }
        LiteralType::Timestamp(us) | LiteralType::TimestampNtz(us) => {
            // Sluice's one timestamp type (microseconds), as a cast gives it.
            let t = timestamp_text(*us)?;
            typed(
                format!("'{t}'"),
                "TIMESTAMP_NTZ",
                format!("TIMESTAMP '{t}'"),
            )
        }
        LiteralType::CalendarInterval(i) => {
            let t = format!(
                "INTERVAL '{} months {} days {} microseconds'",
                i.months, i.days, i.microseconds
            );
            plain(t.clone(), t)
        }
        LiteralType::YearMonthInterval(months) => {
            let t = format!("INTERVAL '{months}' MONTH");
            plain(t.clone(), t)
        }
        LiteralType::DayTimeInterval(us) => {
            let sign = if *us < 0 { "-" } else { "" };
            let a = us.unsigned_abs();
            let t = format!(
                "INTERVAL '{sign}{}.{:06}' SECOND",
                a / 1_000_000,
                a % 1_000_000
            );
            plain(t.clone(), t)
        }
        LiteralType::Array(a) => {
            let items = a.elements.iter().map(literal).collect::<Result<Vec<_>>>()?;
            {
                let from_type = match l.data_type.as_ref().and_then(|t| t.kind.as_ref()) {
                    Some(crate::proto::data_type::Kind::Array(at)) => {
                        at.element_type.as_deref().cloned()
                    }
                    _ => None,
                };
                collection(
                    "array",
                    &items,
                    from_type.as_ref().or(a.element_type.as_ref()),
                    None,
                )?
            }
        }
        LiteralType::SpecializedArray(sa) => {
            use pl::specialized_array::ValueType;
            let items: Vec<Sql> = match sa.value_type.as_ref() {
                Some(ValueType::Bools(v)) => v
                    .values
                    .iter()
                    .map(|b| plain(b.to_string(), b.to_string()))
                    .collect(),
                Some(ValueType::Ints(v)) => v
                    .values
                    .iter()
                    .map(|x| plain(format!("({x})"), x.to_string()))
                    .collect(),
                Some(ValueType::Longs(v)) => v
                    .values
                    .iter()
                    .map(|x| typed(x.to_string(), "BIGINT", x.to_string()))
                    .collect(),
                Some(ValueType::Floats(v)) => v
                    .values
                    .iter()
                    .map(|x| {
                        let (t, s) = float_text(f64::from(*x));
                        typed(t, "FLOAT", s)
                    })
                    .collect(),
                Some(ValueType::Doubles(v)) => v
                    .values
                    .iter()
                    .map(|x| {
                        let (t, s) = float_text(*x);
                        typed(t, "DOUBLE", s)
                    })
                    .collect(),
                Some(ValueType::Strings(v)) => v
                    .values
                    .iter()
                    .map(|x| plain(string_sql(x), x.clone()))
                    .collect(),
                None => Vec::new(),
            };
            collection("array", &items, None, None)?
        }
        LiteralType::Map(m) => {
            if m.keys.len() != m.values.len() {
                return Err(ConnectError::illegal_argument(
                    "a map literal with different numbers of keys and values",
                ));
            }
            let mut items = Vec::new();
            for (k, v) in m.keys.iter().zip(&m.values) {
                items.push(literal(k)?);
                items.push(literal(v)?);
            }
            {
                let (k, v) = match l.data_type.as_ref().and_then(|t| t.kind.as_ref()) {
                    Some(crate::proto::data_type::Kind::Map(mt)) => (
                        mt.key_type.as_deref().cloned(),
                        mt.value_type.as_deref().cloned(),
                    ),
                    _ => (None, None),
                };
                collection(
                    "map",
                    &items,
                    k.as_ref().or(m.key_type.as_ref()),
                    v.as_ref().or(m.value_type.as_ref()),
                )?
            }
        }
        LiteralType::Struct(s) => {
            let names: Vec<String> = match s
                .struct_type
                .as_ref()
                .or(l.data_type.as_ref())
                .and_then(|t| t.kind.as_ref())
            {
                Some(crate::proto::data_type::Kind::Struct(st)) => {
                    st.fields.iter().map(|f| f.name.clone()).collect()
                }
                _ => (1..=s.elements.len()).map(|i| format!("col{i}")).collect(),
            };
            let items = s.elements.iter().map(literal).collect::<Result<Vec<_>>>()?;
            let text: Vec<String> = names
                .iter()
                .zip(&items)
                .map(|(n, v)| format!("{}, {}", string_sql(n), v.text))
                .collect();
            let shown: Vec<String> = items.iter().map(Sql::shown).collect();
            plain(
                format!("named_struct({})", text.join(", ")),
                format!("struct({})", shown.join(", ")),
            )
        }
        LiteralType::Time(_) => return Err(ConnectError::not_supported("TIME literals")),
        LiteralType::TimestampNtzNanos(_) | LiteralType::TimestampLtzNanos(_) => {
            return Err(ConnectError::not_supported("nanosecond timestamp literals"))
        }
    })
}

fn collection(
    f: &str,
    items: &[Sql],
    t1: Option<&crate::proto::DataType>,
    t2: Option<&crate::proto::DataType>,
) -> Result<Sql> {
    let texts: Vec<String> = items.iter().map(|i| i.text.clone()).collect();
    let shown: Vec<String> = items.iter().map(Sql::shown).collect();
    let text = format!("{f}({})", texts.join(", "));
    let shown = format!("{f}({})", shown.join(", "));
    if !items.is_empty() {
        return Ok(plain(text, shown));
    }
    // An empty collection keeps the element type the client gave.
    let ty = match (f, t1, t2) {
        ("array", Some(e), _) => Some(format!(
            "ARRAY<{}>",
            super::types::sql_type_text(&super::types::from_proto(e)?)?
        )),
        ("map", Some(k), Some(v)) => Some(format!(
            "MAP<{}, {}>",
            super::types::sql_type_text(&super::types::from_proto(k)?)?,
            super::types::sql_type_text(&super::types::from_proto(v)?)?
        )),
        _ => None,
    };
    Ok(match ty {
        Some(t) => typed(text, &t, shown),
        None => plain(text, shown),
    })
}
