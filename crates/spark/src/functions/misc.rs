//! Spark's string, binary, JSON-text and timestamp-construction functions computed row by row:
//! `levenshtein` (with a threshold), `mask`, `assert_true`, `encode` / `decode` (charsets, and
//! `decode`'s CASE form), `to_binary` / `try_to_binary`, binary `startswith` / `endswith` /
//! `contains` / `bit_length` / `octet_length`, `json_array_length`, `json_object_keys`,
//! `get_json_object`, `make_timestamp` / `make_timestamp_ltz` / `make_timestamp_ntz`.

use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};
use chrono::{NaiveDate, TimeZone};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::type_coercion::binary::type_union_resolution;
use datafusion::logical_expr::ScalarUDF;

use super::rowwise::{spark_err, Dispatch, RowFn};

const TS_US: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

fn usage(name: &str, what: &str) -> datafusion::error::DataFusionError {
    spark_err(
        "WRONG_NUM_ARGS.WITHOUT_SUGGESTION",
        format!("{name} takes {what}"),
    )
}

fn text(v: &ScalarValue) -> Option<&str> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s),
        _ => None,
    }
}

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

fn all(t: DataType, n: usize) -> Vec<DataType> {
    vec![t; n]
}

fn r_str(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Utf8)
}
fn r_i32(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Int32)
}
fn r_bool(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Boolean)
}
fn r_bin(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Binary)
}
fn r_null(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Null)
}
fn r_ts(_: &[DataType]) -> DfResult<DataType> {
    Ok(TS_US)
}
fn r_str_list(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::List(Arc::new(
        arrow::datatypes::Field::new_list_field(DataType::Utf8, true),
    )))
}

// ---- levenshtein ----

fn c_levenshtein(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        2 => Ok(all(DataType::Utf8, 2)),
        3 => Ok(vec![DataType::Utf8, DataType::Utf8, DataType::Int32]),
        _ => Err(usage(name, "(str1, str2[, threshold])")),
    }
}

fn levenshtein(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let (Some(x), Some(y)) = (text(&a[0]), text(&a[1])) else {
        return Ok(ScalarValue::Int32(None));
    };
    let x: Vec<char> = x.chars().collect();
    let y: Vec<char> = y.chars().collect();
    let mut prev: Vec<usize> = (0..=y.len()).collect();
    let mut cur = vec![0; y.len() + 1];
    for i in 1..=x.len() {
        cur[0] = i;
        for j in 1..=y.len() {
            let cost = usize::from(x[i - 1] != y[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    let d = prev[y.len()] as i32;
    Ok(ScalarValue::Int32(Some(match a.get(2) {
        Some(ScalarValue::Int32(Some(t))) if d > *t => -1,
        Some(ScalarValue::Int32(None)) => return Ok(ScalarValue::Int32(None)),
        _ => d,
    })))
}

// ---- mask ----

fn c_mask(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        1..=5 => Ok(all(DataType::Utf8, t.len())),
        _ => Err(usage(
            name,
            "(str[, upperChar[, lowerChar[, digitChar[, otherChar]]]])",
        )),
    }
}

fn mask(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let Some(s) = text(&a[0]) else {
        return Ok(ScalarValue::Utf8(None));
    };
    // Absent: Spark's defaults; NULL: keep the character.
    let repl = |i: usize, default: Option<char>| match a.get(i) {
        None => default,
        Some(v) => text(v).and_then(|t| t.chars().next()),
    };
    let (upper, lower, digit, other) = (
        repl(1, Some('X')),
        repl(2, Some('x')),
        repl(3, Some('n')),
        repl(4, None),
    );
    let out: String = s
        .chars()
        .map(|c| {
            let r = if c.is_uppercase() {
                upper
            } else if c.is_lowercase() {
                lower
            } else if c.is_ascii_digit() {
                digit
            } else {
                other
            };
            r.unwrap_or(c)
        })
        .collect();
    Ok(ScalarValue::Utf8(Some(out)))
}

// ---- assert_true ----

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
    Err(spark_err("USER_RAISED_EXCEPTION", msg))
}

// ---- charsets: encode, decode, to_binary ----

fn charset_err(cs: &str) -> datafusion::error::DataFusionError {
    spark_err(
        "INVALID_PARAMETER_VALUE.CHARSET",
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
                "INVALID_PARAMETER_VALUE.BINARY_FORMAT",
                format!("to_binary: the format {fmt:?} is not one of 'hex', 'utf-8', 'base64'"),
            ))
        }
    };
    match out {
        Some(b) => Ok(ScalarValue::Binary(Some(b))),
        None if try_ => Ok(ScalarValue::Binary(None)),
        None => Err(spark_err(
            "CONVERSION_INVALID_INPUT",
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

// ---- binary variants of string functions ----

fn c_bin2(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        2 => Ok(all(DataType::Binary, 2)),
        _ => Err(usage(name, "two arguments")),
    }
}
fn c_bin1(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        1 => Ok(vec![DataType::Binary]),
        _ => Err(usage(name, "one argument")),
    }
}

fn bin_pair(a: &[ScalarValue], f: fn(&[u8], &[u8]) -> bool) -> ScalarValue {
    match (bytes(&a[0]), bytes(&a[1])) {
        (Some(x), Some(y)) => ScalarValue::Boolean(Some(f(x, y))),
        _ => ScalarValue::Boolean(None),
    }
}
fn bin_starts(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    Ok(bin_pair(a, |x, y| x.starts_with(y)))
}
fn bin_ends(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    Ok(bin_pair(a, |x, y| x.ends_with(y)))
}
fn bin_contains(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    Ok(bin_pair(a, |x, y| {
        y.is_empty() || x.windows(y.len()).any(|w| w == y)
    }))
}
fn bin_bits(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    Ok(ScalarValue::Int32(bytes(&a[0]).map(|b| b.len() as i32 * 8)))
}
fn bin_octets(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    Ok(ScalarValue::Int32(bytes(&a[0]).map(|b| b.len() as i32)))
}

// ---- JSON text ----

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
                "SLUICE_NOT_SUPPORTED_YET",
                "get_json_object: a result holding a JSON object of several keys is not \
                 supported yet (Sluice would reorder its keys); select a field of it instead"
                    .into(),
            ))
        }
    }))
}

// ---- sentences ----

fn c_sentences(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        1..=3 => Ok(all(DataType::Utf8, t.len())),
        _ => Err(usage(name, "(str[, lang[, country]])")),
    }
}
fn r_sentences(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::List(Arc::new(
        arrow::datatypes::Field::new_list_field(r_str_list(&[])?, true),
    )))
}

/// Spark's `sentences`: sentences end at `.`, `!` or `?` followed by a space or the end; a word
/// is a run of letters and digits (an apostrophe inside a word kept), as Java's
/// `BreakIterator` finds them for English text. The locale arguments are accepted and ignored.
fn sentences(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let Some(s) = text(&a[0]) else {
        return ScalarValue::try_from(ret);
    };
    let chars: Vec<char> = s.chars().collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    for (i, c) in chars.iter().enumerate() {
        let inner_apostrophe =
            *c == '\'' && !word.is_empty() && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
        if c.is_alphanumeric() || inner_apostrophe {
            word.push(*c);
            continue;
        }
        if !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        let ends =
            matches!(c, '.' | '!' | '?') && chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        if ends && !words.is_empty() {
            out.push(std::mem::take(&mut words));
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    if !words.is_empty() {
        out.push(words);
    }
    let lists: Vec<ScalarValue> = out
        .into_iter()
        .map(|ws| {
            let vals: Vec<ScalarValue> =
                ws.into_iter().map(|w| ScalarValue::Utf8(Some(w))).collect();
            ScalarValue::List(ScalarValue::new_list_nullable(&vals, &DataType::Utf8))
        })
        .collect();
    Ok(ScalarValue::List(ScalarValue::new_list_nullable(
        &lists,
        &r_str_list(&[])?,
    )))
}

// ---- make_timestamp ----

fn c_make_ts(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    let tz = name != "make_timestamp_ntz";
    match t.len() {
        6 => {}
        7 if tz => {}
        _ => {
            return Err(usage(
                name,
                if tz {
                    "(year, month, day, hour, min, sec[, timezone])"
                } else {
                    "(year, month, day, hour, min, sec)"
                },
            ))
        }
    }
    let mut out = all(DataType::Int32, 5);
    out.push(DataType::Float64);
    if t.len() == 7 {
        out.push(DataType::Utf8);
    }
    Ok(out)
}

fn make_ts(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let null = Ok(ScalarValue::TimestampMicrosecond(None, None));
    let mut f = [0i32; 5];
    for (i, x) in f.iter_mut().enumerate() {
        match &a[i] {
            ScalarValue::Int32(Some(v)) => *x = *v,
            _ => return null,
        }
    }
    let ScalarValue::Float64(Some(sec)) = a[5] else {
        return null;
    };
    let micros = (sec * 1e6).round() as i64;
    if !(0..=60_000_000).contains(&micros) {
        return null;
    }
    let Some(date) = NaiveDate::from_ymd_opt(f[0], f[1] as u32, f[2] as u32) else {
        return null;
    };
    let Some(base) = date.and_hms_opt(f[3] as u32, f[4] as u32, 0) else {
        return null;
    };
    let local = base + chrono::Duration::microseconds(micros);
    let utc = match a.get(6) {
        None => local,
        Some(v) => {
            let Some(name) = text(v) else { return null };
            let tz: arrow::array::timezone::Tz = name.parse().map_err(|_| {
                spark_err(
                    "INVALID_TIMEZONE",
                    format!("make_timestamp: the time zone {name:?} is not known"),
                )
            })?;
            match tz.from_local_datetime(&local).earliest() {
                Some(t) => t.naive_utc(),
                None => match tz
                    .from_local_datetime(&(local + chrono::Duration::hours(1)))
                    .earliest()
                {
                    Some(t) => t.naive_utc(),
                    None => return null,
                },
            }
        }
    };
    Ok(ScalarValue::TimestampMicrosecond(
        Some(utc.and_utc().timestamp_micros()),
        None,
    ))
}

/// The row-wise functions, and the binary variants of registered string functions
/// (`existing` looks those up).
pub(super) fn udfs(existing: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let mut out = vec![
        RowFn::new("levenshtein", c_levenshtein, r_i32, levenshtein).udf(),
        RowFn::new("mask", c_mask, r_str, mask).udf(),
        RowFn::new("encode", c_encode, r_bin, encode).udf(),
        RowFn::new("decode", c_decode, r_decode, decode).udf(),
        RowFn::new("to_binary", c_to_binary, r_bin, to_binary).udf(),
        RowFn::new("try_to_binary", c_to_binary, r_bin, try_to_binary).udf(),
        RowFn::new("json_array_length", c_str1, r_i32, json_array_length).udf(),
        RowFn::new("json_object_keys", c_str1, r_str_list, json_object_keys).udf(),
        RowFn::new("get_json_object", c_str2, r_str, get_json_object).udf(),
        RowFn::new("sentences", c_sentences, r_sentences, sentences).udf(),
        RowFn::new("make_timestamp", c_make_ts, r_ts, make_ts).udf(),
        RowFn::new("make_timestamp_ltz", c_make_ts, r_ts, make_ts).udf(),
        RowFn::new("make_timestamp_ntz", c_make_ts, r_ts, make_ts).udf(),
    ];
    let mut assert = RowFn::new("assert_true", c_assert, r_null, assert_true);
    assert.signature = datafusion::logical_expr::Signature::user_defined(
        datafusion::logical_expr::Volatility::Volatile,
    );
    out.push(assert.udf());
    type Alt = (
        &'static str,
        super::rowwise::Coerce,
        super::rowwise::Returns,
        super::rowwise::Eval,
    );
    let binary: [Alt; 5] = [
        ("starts_with", c_bin2, r_bool, bin_starts),
        ("ends_with", c_bin2, r_bool, bin_ends),
        ("contains", c_bin2, r_bool, bin_contains),
        ("bit_length", c_bin1, r_i32, bin_bits),
        ("octet_length", c_bin1, r_i32, bin_octets),
    ];
    for (name, c, r, e) in binary {
        if let Some(inner) = existing(name) {
            out.push(Dispatch::udf(inner, RowFn::new(name, c, r, e), is_binary));
        }
    }
    out
}
