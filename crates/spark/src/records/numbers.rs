//! Value conversions shared by the JSON and CSV readers: Java's number forms
//! (`java.math.BigDecimal`, `Double.parseDouble`) and the DATE/TIMESTAMP/DECIMAL text rules.

use std::borrow::Cow;

use arrow::datatypes::DataType;

use super::{datetime, Cell};

/// `new java.math.BigDecimal(s)` then `setScale(scale, HALF_UP)` and a precision check, as
/// Spark's `Decimal(bigDecimal, precision, scale)`: the unscaled value, or None.
pub fn parse_decimal(s: &str, precision: u8, scale: i8) -> Option<i128> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut neg = false;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        neg = b[i] == b'-';
        i += 1;
    }
    let mut digits: Vec<u8> = Vec::with_capacity(b.len());
    let mut frac_len: i64 = 0;
    let mut seen_digit = false;
    while i < b.len() && b[i].is_ascii_digit() {
        digits.push(b[i] - b'0');
        seen_digit = true;
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            digits.push(b[i] - b'0');
            frac_len += 1;
            seen_digit = true;
            i += 1;
        }
    }
    if !seen_digit {
        return None;
    }
    let mut exp: i64 = 0;
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        let mut eneg = false;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            eneg = b[i] == b'-';
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            exp = exp.checked_mul(10)?.checked_add((b[i] - b'0') as i64)?;
            if exp > i32::MAX as i64 {
                return None;
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        if eneg {
            exp = -exp;
        }
    }
    if i != b.len() {
        return None;
    }
    // Drop leading zeros.
    let first = digits.iter().position(|d| *d != 0).unwrap_or(digits.len());
    let digits = &digits[first..];
    if digits.is_empty() {
        return Some(0);
    }
    let shift = exp - frac_len + scale as i64;
    let max_digits = precision as i64;
    let magnitude: i128 = if shift >= 0 {
        if digits.len() as i64 + shift > max_digits {
            return None;
        }
        let mut v: i128 = 0;
        for d in digits {
            v = v.checked_mul(10)?.checked_add(*d as i128)?;
        }
        for _ in 0..shift {
            v = v.checked_mul(10)?;
        }
        v
    } else {
        let keep = digits.len() as i64 + shift;
        if keep > max_digits + 1 {
            return None;
        }
        if keep < 0 {
            0
        } else {
            let keep = keep as usize;
            let mut v: i128 = 0;
            for d in &digits[..keep] {
                v = v.checked_mul(10)?.checked_add(*d as i128)?;
            }
            if digits.get(keep).is_some_and(|d| *d >= 5) {
                v = v.checked_add(1)?;
            }
            v
        }
    };
    let limit = 10i128.checked_pow(precision as u32)?;
    if magnitude >= limit {
        return None;
    }
    Some(if neg { -magnitude } else { magnitude })
}

/// Java's `Double.parseDouble` (used by Spark's CSV reader): surrounding whitespace, a
/// trailing `d`/`f`, `NaN` and `Infinity` allowed; no hexadecimal.
pub fn parse_java_double(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| c <= ' ');
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let v = match body {
        "NaN" => f64::NAN,
        "Infinity" => f64::INFINITY,
        _ => {
            let body = match body.as_bytes().last() {
                Some(b'd' | b'D' | b'f' | b'F') if body.len() > 1 => &body[..body.len() - 1],
                _ => body,
            };
            if !is_decimal_literal(body) {
                return None;
            }
            body.parse::<f64>().ok()?
        }
    };
    Some(if neg { -v } else { v })
}

/// Like [`parse_java_double`] for `Float.parseFloat`.
pub fn parse_java_float(s: &str) -> Option<f32> {
    let t = s.trim_matches(|c: char| c <= ' ');
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let v = match body {
        "NaN" => f32::NAN,
        "Infinity" => f32::INFINITY,
        _ => {
            let body = match body.as_bytes().last() {
                Some(b'd' | b'D' | b'f' | b'F') if body.len() > 1 => &body[..body.len() - 1],
                _ => body,
            };
            if !is_decimal_literal(body) {
                return None;
            }
            body.parse::<f32>().ok()?
        }
    };
    Some(if neg { -v } else { v })
}

/// `digits [. digits] [e [+-] digits]` with at least one mantissa digit (no sign).
fn is_decimal_literal(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let mut mantissa = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        mantissa += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            mantissa += 1;
        }
    }
    if mantissa == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    i == b.len()
}

pub use crate::value_text::java_double_to_string;

/// The value of a JSON/CSV string for DATE/TIMESTAMP/DECIMAL columns (shared rules).
pub fn convert_temporal_or_decimal<'a>(
    s: &str,
    dt: &DataType,
    datetime: &datetime::DatetimeFormats,
) -> Option<Cell<'a>> {
    match dt {
        DataType::Date32 => datetime.date(s).map(Cell::Date),
        DataType::Timestamp(_, _) => datetime.timestamp(s).map(Cell::Ts),
        DataType::Decimal128(p, sc) => {
            let cleaned: Cow<'_, str> = if s.contains(',') {
                Cow::Owned(s.replace(',', ""))
            } else {
                Cow::Borrowed(s)
            };
            parse_decimal(&cleaned, *p, *sc).map(Cell::Dec)
        }
        _ => None,
    }
}
