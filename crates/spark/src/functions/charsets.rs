//! Spark's conversions between STRING and BINARY by charset or format, computed row by row:
//! `encode` / `decode` (the charsets `US-ASCII`, `ISO-8859-1`, `UTF-8`, `UTF-16BE`, `UTF-16LE`,
//! `UTF-16`; and `decode`'s CASE form, `decode(expr, search, result, ...[, default])`), and
//! `to_binary` / `try_to_binary` (`hex`, `utf-8`, `base64`).

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::type_coercion::binary::type_union_resolution;
use datafusion::logical_expr::ScalarUDF;

use super::rowwise::{all, spark_err, text, usage, RowFn};

fn bytes(v: &ScalarValue) -> Option<&[u8]> {
    match v {
        ScalarValue::Binary(Some(b))
        | ScalarValue::LargeBinary(Some(b))
        | ScalarValue::BinaryView(Some(b))
        | ScalarValue::FixedSizeBinary(_, Some(b)) => Some(b),
        _ => None,
    }
}

fn is_binary(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
    )
}

fn r_bin(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Binary)
}

fn charset_err(cs: &str) -> datafusion::error::DataFusionError {
    spark_err(
        crate::error::class::INVALID_PARAMETER_VALUE_CHARSET,
        format!(
            "the charset {cs:?} is not supported; use one of 'US-ASCII', 'ISO-8859-1', \
             'UTF-8', 'UTF-16BE', 'UTF-16LE', 'UTF-16'"
        ),
    )
}

fn encode_with(s: &str, cs: &str) -> DfResult<Vec<u8>> {
    Ok(match cs.to_ascii_uppercase().as_str() {
        "UTF-8" | "UTF8" => s.as_bytes().to_vec(),
        "US-ASCII" | "ASCII" => s
            .chars()
            .map(|c| if c.is_ascii() { c as u8 } else { b'?' })
            .collect(),
        "ISO-8859-1" | "LATIN1" => s
            .chars()
            .map(|c| u8::try_from(c as u32).unwrap_or(b'?'))
            .collect(),
        "UTF-16BE" => s.encode_utf16().flat_map(|u| u.to_be_bytes()).collect(),
        "UTF-16LE" => s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect(),
        "UTF-16" => [0xfe, 0xff]
            .into_iter()
            .chain(s.encode_utf16().flat_map(|u| u.to_be_bytes()))
            .collect(),
        _ => return Err(charset_err(cs)),
    })
}

fn decode_with(b: &[u8], cs: &str) -> DfResult<String> {
    let utf16 = |b: &[u8], be: bool| {
        let units: Vec<u16> = b
            .chunks(2)
            .map(|c| {
                let pair = [c[0], *c.get(1).unwrap_or(&0)];
                if be {
                    u16::from_be_bytes(pair)
                } else {
                    u16::from_le_bytes(pair)
                }
            })
            .collect();
        String::from_utf16_lossy(&units)
    };
    Ok(match cs.to_ascii_uppercase().as_str() {
        "UTF-8" | "UTF8" => String::from_utf8_lossy(b).into_owned(),
        "US-ASCII" | "ASCII" => b
            .iter()
            .map(|&x| if x < 128 { x as char } else { '\u{FFFD}' })
            .collect(),
        "ISO-8859-1" | "LATIN1" => b.iter().map(|&x| x as char).collect(),
        "UTF-16BE" => utf16(b, true),
        "UTF-16LE" => utf16(b, false),
        "UTF-16" => match b {
            [0xff, 0xfe, rest @ ..] => utf16(rest, false),
            [0xfe, 0xff, rest @ ..] => utf16(rest, true),
            _ => utf16(b, true),
        },
        _ => return Err(charset_err(cs)),
    })
}

fn c_encode(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        2 => Ok(all(DataType::Utf8, 2)),
        _ => Err(usage(name, "(str, charset)")),
    }
}

fn encode(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let (Some(s), Some(cs)) = (text(&a[0]), text(&a[1])) else {
        return Ok(ScalarValue::Binary(None));
    };
    Ok(ScalarValue::Binary(Some(encode_with(s, cs)?)))
}

/// `decode(bin, charset)`, or `decode(expr, search1, result1, ...[, default])`.
fn c_decode(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    if t.len() == 2 {
        let first = if is_binary(&t[0]) || t[0].is_null() {
            DataType::Binary
        } else {
            DataType::Utf8
        };
        return Ok(vec![first, DataType::Utf8]);
    }
    if t.len() < 3 {
        return Err(usage(
            name,
            "(bin, charset) or (expr, search, result[, search, result]...[, default])",
        ));
    }
    let mut keys = vec![t[0].clone()];
    let mut results = Vec::new();
    for (i, x) in t.iter().enumerate().skip(1) {
        if i % 2 == 1 && i + 1 < t.len() {
            keys.push(x.clone());
        } else {
            results.push(x.clone());
        }
    }
    let k = type_union_resolution(&keys)
        .ok_or_else(|| usage(name, "search values comparable with the expression"))?;
    let r = type_union_resolution(&results).ok_or_else(|| usage(name, "results of one type"))?;
    Ok(t.iter()
        .enumerate()
        .map(|(i, _)| {
            if i == 0 || (i % 2 == 1 && i + 1 < t.len()) {
                k.clone()
            } else {
                r.clone()
            }
        })
        .collect())
}

fn r_decode(t: &[DataType]) -> DfResult<DataType> {
    if t.len() == 2 {
        return Ok(DataType::Utf8);
    }
    Ok(t[2].clone())
}

fn decode(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    if a.len() == 2 {
        let b = match &a[0] {
            v if bytes(v).is_some() => bytes(v).map(<[u8]>::to_vec),
            v => text(v).map(|s| s.as_bytes().to_vec()),
        };
        let (Some(b), Some(cs)) = (b, text(&a[1])) else {
            return Ok(ScalarValue::Utf8(None));
        };
        return Ok(ScalarValue::Utf8(Some(decode_with(&b, cs)?)));
    }
    let mut i = 1;
    while i + 1 < a.len() {
        let hit = (a[0].is_null() && a[i].is_null()) || (!a[0].is_null() && a[0] == a[i]);
        if hit {
            return Ok(a[i + 1].clone());
        }
        i += 2;
    }
    if i < a.len() {
        return Ok(a[i].clone());
    }
    ScalarValue::try_from(ret)
}

fn c_to_binary(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        1 | 2 => Ok(all(DataType::Utf8, t.len())),
        _ => Err(usage(name, "(str[, fmt])")),
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = s
        .chars()
        .map(|c| c.to_digit(16).map(|d| d as u8))
        .collect::<Option<_>>()?;
    let mut out = Vec::with_capacity(digits.len().div_ceil(2));
    let mut it = digits.as_slice();
    if it.len() % 2 == 1 {
        out.push(it[0]);
        it = &it[1..];
    }
    for p in it.chunks(2) {
        out.push(p[0] << 4 | p[1]);
    }
    Some(out)
}

fn unbase64(s: &str) -> Option<Vec<u8>> {
    let mut bits: u32 = 0;
    let mut n = 0;
    let mut out = Vec::new();
    let body = s.trim_end_matches('=');
    if s.len() - body.len() > 2 {
        return None;
    }
    for c in body.chars().filter(|c| !c.is_whitespace()) {
        let v = match c {
            'A'..='Z' => c as u32 - 'A' as u32,
            'a'..='z' => c as u32 - 'a' as u32 + 26,
            '0'..='9' => c as u32 - '0' as u32 + 52,
            '+' => 62,
            '/' => 63,
            _ => return None,
        };
        bits = bits << 6 | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    if n >= 6 {
        return None;
    }
    Some(out)
}

fn to_binary_impl(a: &[ScalarValue], try_: bool) -> DfResult<ScalarValue> {
    let Some(s) = text(&a[0]) else {
        return Ok(ScalarValue::Binary(None));
    };
    let fmt = match a.get(1) {
        None => "hex".to_string(),
        Some(v) => match text(v) {
            Some(f) => f.to_ascii_lowercase(),
            None => return Ok(ScalarValue::Binary(None)),
        },
    };
    let out = match fmt.as_str() {
        "hex" => unhex(s),
        "utf-8" | "utf8" => Some(s.as_bytes().to_vec()),
        "base64" => unbase64(s),
        _ if try_ => return Ok(ScalarValue::Binary(None)),
        _ => {
            return Err(spark_err(
                crate::error::class::INVALID_PARAMETER_VALUE_BINARY_FORMAT,
                format!("to_binary: the format {fmt:?} is not one of 'hex', 'utf-8', 'base64'"),
            ))
        }
    };
    match out {
        Some(b) => Ok(ScalarValue::Binary(Some(b))),
        None if try_ => Ok(ScalarValue::Binary(None)),
        None => Err(spark_err(
            crate::error::class::CONVERSION_INVALID_INPUT,
            format!("The value {s:?} cannot be converted to BINARY with the format {fmt:?}; use try_to_binary to get NULL instead"),
        )),
    }
}

fn to_binary(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    to_binary_impl(a, false)
}
fn try_to_binary(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    to_binary_impl(a, true)
}

/// The functions of this file.
pub(super) fn udfs() -> Vec<ScalarUDF> {
    vec![
        RowFn::new("encode", c_encode, r_bin, encode).udf(),
        RowFn::new("decode", c_decode, r_decode, decode).udf(),
        RowFn::new("to_binary", c_to_binary, r_bin, to_binary).udf(),
        RowFn::new("try_to_binary", c_to_binary, r_bin, try_to_binary).udf(),
    ]
}
