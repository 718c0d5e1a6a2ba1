//! JSON lines with Spark's `JacksonParser` rules, decoded straight into typed cells.
//!
//! - One record per line (or per file with `multiLine=true`); blank lines are skipped.
//! - A line that is not valid JSON, or whose top-level value is not an object, is *malformed*
//!   (a row of nulls in PERMISSIVE mode). A top-level array of objects gives one row per object.
//! - `{}` is a valid row of nulls. Field names are case-sensitive; unknown fields are ignored.
//! - A value that does not fit its column's type makes that field null and the record
//!   *partial* (the rest of the row stays in PERMISSIVE mode): `"6"` or `8.9` for INT, `"12.5"`
//!   for DOUBLE, `"yesterday"` for TIMESTAMP, an object for INT...
//! - Any JSON value fits a STRING column: strings as is, other values as their compact JSON
//!   text (numbers as Jackson writes them, e.g. `42`, `1.5`, `1.0E10`).
//! - Jackson's defaults as Spark sets them: single-quoted strings and `NaN`/`Infinity` are
//!   allowed, comments, unquoted field names and leading zeros are not (each has an option).
//! - Text after the first top-level value of a line is ignored, as with Jackson.

use std::borrow::Cow;
use std::collections::HashMap;

use arrow::datatypes::DataType;

use super::nested::{is_nested, Nested};
use super::{
    convert_temporal_or_decimal, for_each_line_from, java_double_to_string, parse_decimal,
    Assembler, Bad, Cell, JsonOptions, PieceState, RecordRef,
};
use crate::error::Result;
use crate::schema::spark_type_name;

mod cursor;
use cursor::Cursor;

/// Jackson's default maximum nesting depth.
const MAX_DEPTH: usize = 1000;

/// Reads the JSON text of one file into `asm`.
pub fn read(text: &str, uri: &str, j: &JsonOptions, asm: &mut Assembler<'_>) -> Result<()> {
    read_piece(text, uri, j, asm, &mut PieceState::file_start(false))
}

/// Reads a piece of the JSON text of one file into `asm`: whole lines (or the whole file with
/// `multiLine`), the first of them line `at.lines_before + 1` of the file; `at` then counts
/// the piece's lines too.
pub fn read_piece(
    text: &str,
    uri: &str,
    j: &JsonOptions,
    asm: &mut Assembler<'_>,
    at: &mut PieceState,
) -> Result<()> {
    let opts = asm.opts;
    let mut fields: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<&str> = Vec::with_capacity(opts.data_fields.len());
    let mut types: Vec<&DataType> = Vec::with_capacity(opts.data_fields.len());
    for (k, &col) in opts.data_fields.iter().enumerate() {
        let f = opts.schema.field(col);
        fields.insert(f.name().as_str(), k);
        names.push(f.name().as_str());
        types.push(f.data_type());
    }
    let quoted = names
        .iter()
        .map(|n| {
            let plain = n.bytes().all(|c| c != b'"' && c != b'\\' && c >= 0x20);
            plain.then(|| format!("\"{n}\"").into_bytes())
        })
        .collect();
    let reader = JsonReader {
        j,
        fields,
        names,
        quoted,
        types,
    };
    // One row's cells, used again for each record.
    let mut cells: Vec<Cell<'_>> = Vec::with_capacity(reader.types.len());
    if j.multi_line {
        reader.record(text, at.lines_before + 1, uri, asm, &mut cells)
    } else {
        at.lines_before =
            for_each_line_from(text, j.line_sep.as_deref(), at.lines_before, |n, line| {
                reader.record(line, n, uri, asm, &mut cells)
            })?;
        Ok(())
    }
}

struct JsonReader<'o> {
    j: &'o JsonOptions,
    /// Field name -> position among the data columns.
    fields: HashMap<&'o str, usize>,
    /// Position -> the field name in double quotes, as a record has it when it lists the field
    /// in schema order (none for a name that would be escaped in JSON).
    quoted: Vec<Option<Vec<u8>>>,
    /// Position -> field name: records usually list their fields in schema order, so the field
    /// after the previous one is tried before the map.
    names: Vec<&'o str>,
    types: Vec<&'o DataType>,
}

/// A syntax error: the record is malformed.
#[derive(Debug)]
struct JErr(String);

type JResult<T> = std::result::Result<T, JErr>;

/// The outcome of converting one value: a cell, or why it does not fit (a partial record).
type Conv<'a> = std::result::Result<Cell<'a>, String>;

enum Num<'a> {
    Int(&'a str),
    Float(&'a str),
    Special(f64),
}

impl<'o> JsonReader<'o> {
    /// Parses one record (a line, or a whole file with `multiLine`) into `asm`; `cells` is
    /// scratch space for a row's cells.
    fn record<'a>(
        &self,
        rec: &'a str,
        line: usize,
        uri: &str,
        asm: &mut Assembler<'_>,
        cells: &mut Vec<Cell<'a>>,
    ) -> Result<()>
    where
        'o: 'a,
    {
        let rr = RecordRef {
            file: uri,
            line,
            text: rec,
        };
        let mut cur = Cursor::new(rec, self.j);
        if let Err(e) = cur.skip_ws() {
            return asm.record(&[], Some(Bad::Malformed(e.0)), rr);
        }
        if cur.at_end() {
            // A blank line is no record at all.
            return Ok(());
        }
        match cur.peek() {
            Some(b'{') => {
                if cells.len() == self.types.len() {
                    cells.fill(Cell::Null);
                } else {
                    cells.clear();
                    cells.resize(self.types.len(), Cell::Null);
                }
                match self.object(&mut cur, cells) {
                    Ok(partial) => asm.record(cells, partial.map(Bad::Partial), rr),
                    Err(e) => asm.record(&[], Some(Bad::Malformed(e.0)), rr),
                }
            }
            Some(b'[') => match self.array_of_objects(&mut cur) {
                Ok(rows) => {
                    for (cells, partial) in rows {
                        asm.record(&cells, partial.map(Bad::Partial), rr)?;
                    }
                    Ok(())
                }
                Err(e) => asm.record(&[], Some(Bad::Malformed(e.0)), rr),
            },
            _ => {
                // Distinguish invalid JSON from a valid non-object value in the message.
                let msg = match cur.skip_value(0) {
                    Ok(()) => "the record is not a JSON object".to_string(),
                    Err(e) => e.0,
                };
                asm.record(&[], Some(Bad::Malformed(msg)), rr)
            }
        }
    }

    /// `[{..}, {..}]`: one row per object; anything else in the array makes it malformed.
    #[allow(clippy::type_complexity)]
    fn array_of_objects<'a>(
        &self,
        cur: &mut Cursor<'a>,
    ) -> JResult<Vec<(Vec<Cell<'a>>, Option<String>)>> {
        cur.expect(b'[')?;
        let mut rows = Vec::new();
        cur.skip_ws()?;
        if cur.eat(b']') {
            return Ok(rows);
        }
        loop {
            cur.skip_ws()?;
            if cur.peek() != Some(b'{') {
                return Err(JErr(
                    "the record is an array whose elements are not all JSON objects".into(),
                ));
            }
            let mut cells = vec![Cell::Null; self.types.len()];
            let partial = self.object(cur, &mut cells)?;
            rows.push((cells, partial));
            cur.skip_ws()?;
            if cur.eat(b',') {
                continue;
            }
            if cur.eat(b']') {
                return Ok(rows);
            }
            return Err(cur.unexpected("`,` or `]`"));
        }
    }

    /// Parses an object into `cells`; returns the reason of the first field that did not fit.
    fn object<'a>(&self, cur: &mut Cursor<'a>, cells: &mut [Cell<'a>]) -> JResult<Option<String>> {
        cur.expect(b'{')?;
        let mut partial: Option<String> = None;
        cur.skip_ws()?;
        if cur.eat(b'}') {
            return Ok(None);
        }
        let mut next = 0usize;
        loop {
            cur.skip_ws()?;
            // The field after the previous one, as its quoted name's bytes; else any key.
            let expected = self.quoted.get(next).and_then(Option::as_deref);
            let (key, found): (Cow<'_, str>, _) = match expected {
                Some(q) if cur.b[cur.pos..].starts_with(q) => {
                    cur.pos += q.len();
                    (Cow::Borrowed(self.names[next]), Some(next))
                }
                _ => {
                    let key = cur.key()?;
                    let found = match self.names.get(next) {
                        Some(n) if *n == key.as_ref() => Some(next),
                        _ => self.fields.get(key.as_ref()).copied(),
                    };
                    (key, found)
                }
            };
            cur.skip_ws()?;
            cur.expect(b':')?;
            cur.skip_ws()?;
            match found {
                Some(k) => {
                    next = k + 1;
                    let dt = self.types[k];
                    match self.typed(cur, dt, &mut partial)? {
                        Ok(cell) => {
                            if let Some(slot) = cells.get_mut(k) {
                                *slot = cell;
                            }
                        }
                        Err(reason) => {
                            if partial.is_none() {
                                partial = Some(format!("field `{key}`: {reason}"));
                            }
                        }
                    }
                }
                None => cur.skip_value(1)?,
            }
            cur.skip_ws()?;
            if cur.eat(b',') {
                continue;
            }
            if cur.eat(b'}') {
                return Ok(partial);
            }
            return Err(cur.unexpected("`,` or `}`"));
        }
    }

    /// Parses one value for a column of type `dt`; a nested value that is only partly
    /// converted sets `partial`.
    fn typed<'a>(
        &self,
        cur: &mut Cursor<'a>,
        dt: &DataType,
        partial: &mut Option<String>,
    ) -> JResult<Conv<'a>> {
        if is_nested(dt) {
            return Ok(self
                .nested(cur, dt, partial)?
                .map(|n| Cell::Nested(Box::new(n))));
        }
        let Some(c) = cur.peek() else {
            return Err(JErr("unexpected end of input, expected a value".into()));
        };
        Ok(match c {
            b'"' | b'\'' => {
                let s = cur.string()?;
                convert_string(s, dt, self.j)
            }
            b'{' | b'[' => {
                if *dt == DataType::Utf8 {
                    let mut out = String::new();
                    cur.copy_value(&mut out, 1)?;
                    Ok(Cell::Str(Cow::Owned(out)))
                } else {
                    cur.skip_value(1)?;
                    Err(format!(
                        "cannot convert a JSON {} to {}",
                        if c == b'{' { "object" } else { "array" },
                        spark_type_name(dt)
                    ))
                }
            }
            b't' | b'f' => {
                let v = cur.boolean()?;
                match dt {
                    DataType::Boolean => Ok(Cell::Bool(v)),
                    DataType::Utf8 => {
                        Ok(Cell::Str(Cow::Borrowed(if v { "true" } else { "false" })))
                    }
                    _ => Err(format!(
                        "cannot convert the JSON value {v} to {}",
                        spark_type_name(dt)
                    )),
                }
            }
            b'n' => {
                cur.literal("null")?;
                Ok(Cell::Null)
            }
            _ => {
                let n = cur.number()?;
                convert_number(n, dt)
            }
        })
    }
}

impl JsonReader<'_> {
    /// Parses one value of type `dt` (nested or not) as Spark's `JacksonParser` with partial
    /// results: a struct field that does not fit is null and the struct is kept (`partial`
    /// names the field); an array element or map value that does not fit makes the whole array
    /// or map not fit, unless it is itself a partly converted struct, array or map (then it is
    /// kept, and so is its container). `null` fits every type; a value of another JSON kind
    /// than the type (an object for an array, a number for a struct) does not fit.
    fn nested(
        &self,
        cur: &mut Cursor<'_>,
        dt: &DataType,
        partial: &mut Option<String>,
    ) -> JResult<std::result::Result<Nested, String>> {
        let Some(c) = cur.peek() else {
            return Err(JErr("unexpected end of input, expected a value".into()));
        };
        match (c, dt) {
            (b'n', _) => {
                cur.literal("null")?;
                Ok(Ok(Nested::Null))
            }
            (b'{', DataType::Struct(fields)) => {
                cur.expect(b'{')?;
                let mut vals = vec![Nested::Null; fields.len()];
                cur.skip_ws()?;
                if cur.eat(b'}') {
                    return Ok(Ok(Nested::Struct(vals)));
                }
                loop {
                    cur.skip_ws()?;
                    let key = cur.key()?;
                    cur.skip_ws()?;
                    cur.expect(b':')?;
                    cur.skip_ws()?;
                    match fields.iter().position(|f| f.name() == key.as_ref()) {
                        Some(i) => match self.nested(cur, fields[i].data_type(), partial)? {
                            Ok(v) => vals[i] = v,
                            Err(reason) => {
                                vals[i] = Nested::Null;
                                partial.get_or_insert(format!("field `{key}`: {reason}"));
                            }
                        },
                        None => cur.skip_value(1)?,
                    }
                    cur.skip_ws()?;
                    if cur.eat(b',') {
                        continue;
                    }
                    if cur.eat(b'}') {
                        return Ok(Ok(Nested::Struct(vals)));
                    }
                    return Err(cur.unexpected("`,` or `}`"));
                }
            }
            (b'[', DataType::List(item) | DataType::LargeList(item)) => {
                cur.expect(b'[')?;
                let mut vals = Vec::new();
                let mut failed: Option<String> = None;
                cur.skip_ws()?;
                if cur.eat(b']') {
                    return Ok(Ok(Nested::List(vals)));
                }
                loop {
                    cur.skip_ws()?;
                    match self.nested(cur, item.data_type(), partial)? {
                        Ok(v) => vals.push(v),
                        Err(reason) => {
                            failed.get_or_insert(format!("an array element: {reason}"));
                        }
                    }
                    cur.skip_ws()?;
                    if cur.eat(b',') {
                        continue;
                    }
                    if cur.eat(b']') {
                        return Ok(match failed {
                            Some(r) => Err(r),
                            None => Ok(Nested::List(vals)),
                        });
                    }
                    return Err(cur.unexpected("`,` or `]`"));
                }
            }
            (b'{', DataType::Map(entries, _)) => {
                let DataType::Struct(kv) = entries.data_type() else {
                    cur.skip_value(1)?;
                    return Ok(Err("the map type has no key and value".into()));
                };
                let value_type = kv[1].data_type();
                cur.expect(b'{')?;
                let mut vals = Vec::new();
                let mut failed: Option<String> = None;
                cur.skip_ws()?;
                if cur.eat(b'}') {
                    return Ok(Ok(Nested::Map(vals)));
                }
                loop {
                    cur.skip_ws()?;
                    let key = cur.key()?;
                    cur.skip_ws()?;
                    cur.expect(b':')?;
                    cur.skip_ws()?;
                    match self.nested(cur, value_type, partial)? {
                        Ok(v) => vals.push((key.into_owned(), v)),
                        Err(reason) => {
                            failed.get_or_insert(format!("the map value of `{key}`: {reason}"));
                        }
                    }
                    cur.skip_ws()?;
                    if cur.eat(b',') {
                        continue;
                    }
                    if cur.eat(b'}') {
                        return Ok(match failed {
                            Some(r) => Err(r),
                            None => Ok(Nested::Map(vals)),
                        });
                    }
                    return Err(cur.unexpected("`,` or `}`"));
                }
            }
            (_, dt) if is_nested(dt) => {
                let kind = match c {
                    b'{' => "an object",
                    b'[' => "an array",
                    b'"' | b'\'' => "a string",
                    b't' | b'f' => "a boolean",
                    _ => "a number",
                };
                cur.skip_value(1)?;
                Ok(Err(format!(
                    "cannot convert {kind} to {}",
                    spark_type_name(dt)
                )))
            }
            _ => Ok(self.typed(cur, dt, partial)?.map(Nested::from_cell)),
        }
    }
}

fn convert_string<'a>(s: Cow<'a, str>, dt: &DataType, j: &JsonOptions) -> Conv<'a> {
    let fail = |s: &str| {
        Err(format!(
            "cannot convert the JSON string {:?} to {}",
            super::excerpt(s, 60),
            spark_type_name(dt)
        ))
    };
    match dt {
        DataType::Utf8 => Ok(Cell::Str(s)),
        DataType::Float32 | DataType::Float64 => {
            let v = match s.as_ref() {
                "NaN" if j.allow_non_numeric_numbers => f64::NAN,
                "+INF" | "+Infinity" | "Infinity" if j.allow_non_numeric_numbers => f64::INFINITY,
                "-INF" | "-Infinity" if j.allow_non_numeric_numbers => f64::NEG_INFINITY,
                _ => return fail(&s),
            };
            Ok(if *dt == DataType::Float32 {
                Cell::F32(v as f32)
            } else {
                Cell::F64(v)
            })
        }
        DataType::Date32 if !s.is_empty() => {
            match convert_temporal_or_decimal(&s, dt, &j.datetime) {
                Some(c) => Ok(c),
                // Spark 1.5 wrote dates as a number of days in a string.
                None => match s.parse::<i32>() {
                    Ok(days) => Ok(Cell::Date(days)),
                    Err(_) => fail(&s),
                },
            }
        }
        DataType::Timestamp(_, _) | DataType::Decimal128(_, _) if !s.is_empty() => {
            match convert_temporal_or_decimal(&s, dt, &j.datetime) {
                Some(c) => Ok(c),
                None => fail(&s),
            }
        }
        _ => fail(&s),
    }
}

fn convert_number<'a>(n: Num<'a>, dt: &DataType) -> Conv<'a> {
    // Built only on failure: no allocation per successfully converted number.
    let fail = || {
        let text = match &n {
            Num::Int(t) | Num::Float(t) => super::excerpt(t, 60),
            Num::Special(v) => java_double_to_string(*v),
        };
        Err(format!(
            "cannot convert the JSON number {text} to {}",
            spark_type_name(dt)
        ))
    };
    match (dt, &n) {
        (DataType::Utf8, Num::Int(t)) => Ok(Cell::Str(Cow::Owned(canonical_int(t)))),
        (DataType::Utf8, Num::Float(t)) => match t.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Cell::Str(Cow::Owned(java_double_to_string(v)))),
            Ok(v) => Ok(Cell::Str(Cow::Owned(format!(
                "\"{}\"",
                java_double_to_string(v)
            )))),
            Err(_) => fail(),
        },
        // Jackson writes non-finite numbers as strings.
        (DataType::Utf8, Num::Special(v)) => Ok(Cell::Str(Cow::Owned(format!(
            "\"{}\"",
            java_double_to_string(*v)
        )))),
        (DataType::Int8, Num::Int(t)) => match t.parse::<i64>() {
            // Jackson's getByteValue accepts -128..=255 (unsigned bytes wrap).
            Ok(v) if (-128..=255).contains(&v) => Ok(Cell::Int(v as u8 as i8 as i64)),
            _ => fail(),
        },
        (DataType::Int16, Num::Int(t)) => match t.parse::<i16>() {
            Ok(v) => Ok(Cell::Int(v as i64)),
            Err(_) => fail(),
        },
        (DataType::Int32, Num::Int(t)) => match t.parse::<i32>() {
            Ok(v) => Ok(Cell::Int(v as i64)),
            Err(_) => fail(),
        },
        (DataType::Int64, Num::Int(t)) => match t.parse::<i64>() {
            Ok(v) => Ok(Cell::Int(v)),
            Err(_) => fail(),
        },
        (DataType::Float32, Num::Int(t) | Num::Float(t)) => match t.parse::<f32>() {
            Ok(v) => Ok(Cell::F32(v)),
            Err(_) => fail(),
        },
        (DataType::Float64, Num::Int(t) | Num::Float(t)) => {
            match short_decimal(t).or_else(|| t.parse::<f64>().ok()) {
                Some(v) => Ok(Cell::F64(v)),
                None => fail(),
            }
        }
        (DataType::Float32, Num::Special(v)) => Ok(Cell::F32(*v as f32)),
        (DataType::Float64, Num::Special(v)) => Ok(Cell::F64(*v)),
        (DataType::Decimal128(p, s), Num::Int(t) | Num::Float(t)) => match parse_decimal(t, *p, *s)
        {
            Some(v) => Ok(Cell::Dec(v)),
            None => fail(),
        },
        // A number in a TIMESTAMP column is seconds since the epoch.
        (DataType::Timestamp(_, _), Num::Int(t)) => {
            match t.parse::<i64>().ok().and_then(|s| s.checked_mul(1_000_000)) {
                Some(v) => Ok(Cell::Ts(v)),
                None => fail(),
            }
        }
        // Spark's JacksonParser takes only integral numbers as epoch seconds; 1.5 is null.
        _ => fail(),
    }
}

/// An integer as Jackson writes it back: no leading zeros, no `-0`.
fn canonical_int(t: &str) -> String {
    let (neg, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t),
    };
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        "0".to_string()
    } else if neg {
        format!("-{digits}")
    } else {
        digits.to_string()
    }
}

/// Writes a string as Jackson does: `"` and `\` escaped, control characters as `\n`, `\t`,
/// ... or `\u00XX`; everything else as is.
fn write_json_string(out: &mut String, s: &str) {
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
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The position of the first `"`, `\\` or control character (below 0x20) in `b` at or after
/// `pos` (`b.len()` if none), found eight bytes at a time: a byte equal to one of them is
/// flagged in the word's high bits, and the lowest flag is exact (carries only go upwards).
fn plain_run_end(b: &[u8], mut pos: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    while let Some(chunk) = b.get(pos..pos + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let hits = zero_byte(w ^ (ONES * u64::from(b'"')))
            | zero_byte(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGH);
        if hits != 0 {
            return pos + (hits.trailing_zeros() / 8) as usize;
        }
        pos += 8;
    }
    while let Some(&c) = b.get(pos) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        pos += 1;
    }
    pos
}

/// A decimal number text of at most 15 digits and no exponent, read exactly as `str::parse`
/// reads it (Clinger's fast path): its digits as an integer (exact in an `f64`) divided by a
/// power of ten up to 1e15 (exact too) is one correctly rounded operation on exact values.
/// None for any other text (the caller parses it in full).
fn short_decimal(t: &str) -> Option<f64> {
    const POW10: [f64; 16] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    ];
    let b = t.as_bytes();
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let mut mantissa = 0u64;
    let mut count = 0usize;
    let mut point = None;
    for (i, &c) in digits.iter().enumerate() {
        match c {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + u64::from(c - b'0');
                count += 1;
            }
            b'.' if point.is_none() => point = Some(digits.len() - i - 1),
            _ => return None,
        }
    }
    if count == 0 || count > 15 {
        return None;
    }
    let v = mantissa as f64 / POW10[point.unwrap_or(0)];
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests;
