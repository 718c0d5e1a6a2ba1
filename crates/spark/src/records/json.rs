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

/// A position in one record's text.
struct Cursor<'a> {
    s: &'a str,
    b: &'a [u8],
    pos: usize,
    j: &'a JsonOptions,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a str, j: &'a JsonOptions) -> Self {
        Self {
            s,
            b: s.as_bytes(),
            pos: 0,
            j,
        }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn unexpected(&self, expected: &str) -> JErr {
        match self.s.get(self.pos..).and_then(|r| r.chars().next()) {
            None => JErr(format!("unexpected end of input, expected {expected}")),
            Some(c) => JErr(format!(
                "unexpected character {c:?} at column {}, expected {expected}",
                self.s[..self.pos].chars().count() + 1
            )),
        }
    }

    #[inline]
    fn expect(&mut self, c: u8) -> JResult<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected_char(c))
        }
    }

    #[cold]
    fn expected_char(&self, c: u8) -> JErr {
        self.unexpected(&format!("`{}`", c as char))
    }

    /// Skips whitespace (and comments, when allowed). Records usually have none or one space
    /// between tokens: that is decided here, inline; the rest goes to [`Self::skip_ws_rest`].
    #[inline]
    fn skip_ws(&mut self) -> JResult<()> {
        if self.peek() == Some(b' ') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b' ' | b'\t' | b'\n' | b'\r' | b'/') => self.skip_ws_rest(),
            _ => Ok(()),
        }
    }

    #[inline(never)]
    fn skip_ws_rest(&mut self) -> JResult<()> {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.pos += 1,
                Some(b'/') if self.j.allow_comments => match self.b.get(self.pos + 1) {
                    Some(b'/') => {
                        while let Some(c) = self.peek() {
                            if c == b'\n' || c == b'\r' {
                                break;
                            }
                            self.pos += 1;
                        }
                    }
                    Some(b'*') => {
                        self.pos += 2;
                        loop {
                            match self.peek() {
                                None => return Err(JErr("unterminated comment".into())),
                                Some(b'*') if self.b.get(self.pos + 1) == Some(&b'/') => {
                                    self.pos += 2;
                                    break;
                                }
                                Some(_) => self.pos += 1,
                            }
                        }
                    }
                    _ => return Ok(()),
                },
                _ => return Ok(()),
            }
        }
    }

    /// A literal word such as `true`, which must not run into identifier characters.
    fn literal(&mut self, word: &str) -> JResult<()> {
        let end = self.pos + word.len();
        if self.b.get(self.pos..end) == Some(word.as_bytes())
            && !self
                .b
                .get(end)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'$')
        {
            self.pos = end;
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{word}`")))
        }
    }

    fn boolean(&mut self) -> JResult<bool> {
        if self.peek() == Some(b't') {
            self.literal("true")?;
            Ok(true)
        } else {
            self.literal("false")?;
            Ok(false)
        }
    }

    fn starts_with(&self, w: &str) -> bool {
        self.b
            .get(self.pos..self.pos + w.len())
            .is_some_and(|s| s == w.as_bytes())
    }

    /// A number token (or `NaN`/`Infinity`/`-INF`... when allowed).
    fn number(&mut self) -> JResult<Num<'a>> {
        let start = self.pos;
        let mut neg = false;
        let mut signed = false;
        match self.peek() {
            Some(b'-') => {
                neg = true;
                signed = true;
                self.pos += 1;
            }
            Some(b'+') => {
                signed = true;
                self.pos += 1;
            }
            _ => {}
        }
        let nn = self.j.allow_non_numeric_numbers;
        if nn && self.starts_with("NaN") && !signed {
            self.literal("NaN")?;
            return Ok(Num::Special(f64::NAN));
        }
        if nn && self.peek() == Some(b'I') {
            let word = if self.starts_with("Infinity") {
                "Infinity"
            } else if signed && self.starts_with("INF") {
                "INF"
            } else {
                return Err(self.unexpected("a value"));
            };
            self.literal(word)?;
            return Ok(Num::Special(if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }));
        }
        if signed && !neg {
            return Err(JErr("a leading `+` is not allowed in a JSON number".into()));
        }
        let digit = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_digit());
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if digit(self.peek()) {
                    if !self.j.allow_numeric_leading_zeros {
                        return Err(JErr(
                            "leading zeros are not allowed in a JSON number (option \
                             allowNumericLeadingZeros)"
                                .into(),
                        ));
                    }
                    while digit(self.peek()) {
                        self.pos += 1;
                    }
                }
            }
            Some(b'1'..=b'9') => {
                while digit(self.peek()) {
                    self.pos += 1;
                }
            }
            _ => {
                self.pos = start;
                return Err(self.unexpected("a value"));
            }
        }
        let mut int = true;
        if self.peek() == Some(b'.') {
            int = false;
            self.pos += 1;
            if !digit(self.peek()) {
                return Err(JErr("a decimal point must be followed by a digit".into()));
            }
            while digit(self.peek()) {
                self.pos += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            int = false;
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !digit(self.peek()) {
                return Err(JErr("an exponent must have digits".into()));
            }
            while digit(self.peek()) {
                self.pos += 1;
            }
        }
        let text = &self.s[start..self.pos];
        Ok(if int {
            Num::Int(text)
        } else {
            Num::Float(text)
        })
    }

    /// A quoted string (the cursor is on the opening quote).
    fn string(&mut self) -> JResult<Cow<'a, str>> {
        let q = match self.peek() {
            Some(b'"') => b'"',
            Some(b'\'') if self.j.allow_single_quotes => b'\'',
            _ => return Err(self.unexpected("a string")),
        };
        self.pos += 1;
        let start = self.pos;
        let allow_ctrl = self.j.allow_unquoted_control_chars;
        if q == b'"' && !allow_ctrl {
            // Eight bytes at a time to the first quote, backslash or control character.
            self.pos = plain_run_end(self.b, self.pos);
        }
        loop {
            match self.peek() {
                None => return Err(JErr("unexpected end of input inside a string".into())),
                Some(c) if c == q => {
                    let s = &self.s[start..self.pos];
                    self.pos += 1;
                    return Ok(Cow::Borrowed(s));
                }
                Some(b'\\') => break,
                Some(c) if c < 0x20 && !allow_ctrl => {
                    return Err(JErr(format!(
                        "an unescaped control character (code {c}) in a string"
                    )))
                }
                Some(_) => self.pos += 1,
            }
        }
        let mut out = String::from(&self.s[start..self.pos]);
        loop {
            match self.peek() {
                None => return Err(JErr("unexpected end of input inside a string".into())),
                Some(c) if c == q => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                Some(c) if c < 0x20 && !allow_ctrl => {
                    return Err(JErr(format!(
                        "an unescaped control character (code {c}) in a string"
                    )))
                }
                Some(_) => {
                    let run_start = self.pos;
                    while let Some(c) = self.peek() {
                        if c == q || c == b'\\' || (c < 0x20 && !allow_ctrl) {
                            break;
                        }
                        self.pos += 1;
                    }
                    out.push_str(&self.s[run_start..self.pos]);
                }
            }
        }
    }

    /// One escape sequence after a backslash.
    fn escape(&mut self, out: &mut String) -> JResult<()> {
        let Some(c) = self.peek() else {
            return Err(JErr("unexpected end of input in an escape sequence".into()));
        };
        self.pos += 1;
        match c {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let hi = self.hex4()?;
                let ch = if (0xD800..0xDC00).contains(&hi) && self.starts_with("\\u") {
                    let save = self.pos;
                    self.pos += 2;
                    let lo = self.hex4()?;
                    if (0xDC00..0xE000).contains(&lo) {
                        char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                    } else {
                        self.pos = save;
                        None
                    }
                } else {
                    char::from_u32(hi)
                };
                out.push(ch.unwrap_or('\u{FFFD}'));
            }
            b'\''
                if self.j.allow_single_quotes || self.j.allow_backslash_escaping_any_character =>
            {
                out.push('\'')
            }
            _ if self.j.allow_backslash_escaping_any_character => {
                // Take the whole (possibly multi-byte) character.
                self.pos -= 1;
                let ch = self.s[self.pos..].chars().next().unwrap_or('\u{FFFD}');
                self.pos += ch.len_utf8();
                out.push(ch);
            }
            _ => {
                return Err(JErr(format!(
                    "unrecognized escape sequence `\\{}`",
                    self.s[self.pos - 1..].chars().next().unwrap_or('?')
                )))
            }
        }
        Ok(())
    }

    fn hex4(&mut self) -> JResult<u32> {
        let h = self
            .s
            .get(self.pos..self.pos + 4)
            .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
            .ok_or_else(|| JErr("a \\u escape needs 4 hex digits".into()))?;
        let v = u32::from_str_radix(h, 16).map_err(|_| JErr("a bad \\u escape".into()))?;
        self.pos += 4;
        Ok(v)
    }

    /// A field name: a string, or an identifier with `allowUnquotedFieldNames`.
    fn key(&mut self) -> JResult<Cow<'a, str>> {
        match self.peek() {
            Some(b'"') | Some(b'\'') => self.string(),
            Some(c)
                if self.j.allow_unquoted_field_names
                    && (c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80) =>
            {
                let start = self.pos;
                while let Some(c) = self.peek() {
                    if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                Ok(Cow::Borrowed(&self.s[start..self.pos]))
            }
            _ => Err(self.unexpected("a field name in double quotes")),
        }
    }

    fn skip_value(&mut self, depth: usize) -> JResult<()> {
        self.walk_value(None, depth)
    }

    /// Copies a value as compact JSON text, normalized as Jackson's `copyCurrentStructure`.
    fn copy_value(&mut self, out: &mut String, depth: usize) -> JResult<()> {
        self.walk_value(Some(out), depth)
    }

    /// Reads one value at nesting `depth`, copying it to `out` when given. Iterative, with the
    /// open containers on a heap stack: a value nested as deep as [`MAX_DEPTH`] (Jackson's
    /// limit, past which the record is malformed) costs no call stack, so no input can
    /// overflow the thread's stack.
    fn walk_value(&mut self, mut out: Option<&mut String>, depth: usize) -> JResult<()> {
        fn push(out: &mut Option<&mut String>, c: char) {
            if let Some(o) = out.as_deref_mut() {
                o.push(c);
            }
        }
        // The closing byte of each open container, innermost last.
        let mut open: Vec<u8> = Vec::new();
        loop {
            // One value at depth `depth + open.len()`.
            if depth + open.len() > MAX_DEPTH {
                return Err(JErr(format!("nesting deeper than {MAX_DEPTH} levels")));
            }
            match self.peek() {
                Some(c @ (b'{' | b'[')) => {
                    self.pos += 1;
                    push(&mut out, c as char);
                    self.skip_ws()?;
                    let close = if c == b'{' { b'}' } else { b']' };
                    if self.eat(close) {
                        push(&mut out, close as char);
                    } else {
                        open.push(close);
                        if close == b'}' {
                            self.member_name(&mut out)?;
                        }
                        continue;
                    }
                }
                Some(b'"' | b'\'') => {
                    let s = self.string()?;
                    if let Some(o) = out.as_deref_mut() {
                        write_json_string(o, &s);
                    }
                }
                Some(b't' | b'f') => {
                    let v = self.boolean()?;
                    if let Some(o) = out.as_deref_mut() {
                        o.push_str(if v { "true" } else { "false" });
                    }
                }
                Some(b'n') => {
                    self.literal("null")?;
                    if let Some(o) = out.as_deref_mut() {
                        o.push_str("null");
                    }
                }
                None => return Err(self.unexpected("a value")),
                Some(_) => {
                    let n = self.number()?;
                    if let Some(o) = out.as_deref_mut() {
                        match n {
                            Num::Int(t) => o.push_str(&canonical_int(t)),
                            Num::Float(t) => {
                                let v = t.parse::<f64>().unwrap_or(f64::NAN);
                                if v.is_finite() {
                                    o.push_str(&java_double_to_string(v));
                                } else {
                                    write_json_string(o, &java_double_to_string(v));
                                }
                            }
                            Num::Special(v) => write_json_string(o, &java_double_to_string(v)),
                        }
                    }
                }
            }
            // A value ended: close the containers it ends, or go on to the next element.
            loop {
                let Some(&close) = open.last() else {
                    return Ok(());
                };
                self.skip_ws()?;
                if self.eat(b',') {
                    push(&mut out, ',');
                    if close == b'}' {
                        self.member_name(&mut out)?;
                    } else {
                        self.skip_ws()?;
                    }
                    break;
                }
                if self.eat(close) {
                    push(&mut out, close as char);
                    open.pop();
                    continue;
                }
                return Err(self.unexpected(if close == b'}' {
                    "`,` or `}`"
                } else {
                    "`,` or `]`"
                }));
            }
        }
    }

    /// Reads `"name" :` of an object member (copied to `out` when given), up to its value.
    fn member_name(&mut self, out: &mut Option<&mut String>) -> JResult<()> {
        self.skip_ws()?;
        let k = self.key()?;
        if let Some(o) = out.as_deref_mut() {
            write_json_string(o, &k);
        }
        self.skip_ws()?;
        self.expect(b':')?;
        if let Some(o) = out.as_deref_mut() {
            o.push(':');
        }
        self.skip_ws()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow::datatypes::{Field, Schema, SchemaRef, TimeUnit};
    use serde_json::{json, Value};

    use super::super::test_util::rows;
    use super::super::{Assembler, ParseOptions};
    use super::*;
    use crate::error::Fault;
    use crate::records::options::Options;

    fn opts(schema: &str, extra: &[(&str, &str)]) -> ParseOptions {
        let schema: SchemaRef = crate::schema::parse_ddl_schema(schema).unwrap();
        let m: HashMap<String, String> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ParseOptions::new("json", &schema, &Options::new(&m)).unwrap()
    }

    fn parse(o: &ParseOptions, lines: &[&str]) -> Result<(Vec<Vec<Value>>, u64, u64)> {
        let mut asm = Assembler::new(o)?;
        let text = lines.join("\n");
        let super::super::FormatKind::Json(j) = &o.kind else {
            unreachable!()
        };
        read(&text, "file:///t/1.json", j, &mut asm)?;
        let out = asm.finish()?;
        Ok((rows(&out.batches), out.malformed, out.dropped))
    }

    fn ts(s: &str) -> Value {
        json!(crate::records::datetime::parse_timestamp_micros(s).unwrap())
    }

    /// Spark 3.5.7's PERMISSIVE results for nested columns (recorded with
    /// `spark.read.schema(..).json(..)`): a struct keeps its other fields when one does not
    /// fit, an array or map with one element that does not fit is null, an array of structs
    /// keeps a partly converted struct; every such record is partial (`_corrupt_record` set).
    #[test]
    fn nested_values_follow_sparks_partial_results() {
        let o = opts(
            "id INT, s STRUCT<a: INT, b: STRING>, arr ARRAY<INT>, m MAP<STRING, BIGINT>, \
             _corrupt_record STRING",
            &[],
        );
        let lines = [
            r#"{"id":1,"s":{"a":1,"b":"x"},"arr":[1,2],"m":{"k":1}}"#,
            r#"{"id":2,"s":{"a":"bad","b":"x"},"arr":[1,"x"],"m":{"k":"v"}}"#,
            r#"{"id":3,"s":[1,2],"arr":{"a":1},"m":[1]}"#,
            r#"{"id":4,"s":{"b":"y"}}"#,
            r#"{"id":5,"s":null,"arr":[null,3],"m":{"k":null}}"#,
            r#"{"id":6,"arr":5,"s":7,"m":"x"}"#,
            r#"{"id":7,"s":{"a":1,"b":{"q":1}},"arr":[[1]],"m":{"k":[1]}}"#,
            r#"{"id":8,"s":{"a":1.5},"arr":[1.5, 2],"m":{"k":2.5, "j":3}}"#,
            r#"{"id":9,"arr":[],"m":{},"s":{}}"#,
            r#"{"id":10,"s":{"a":1,"b":"x"},"arr":[1,2], "m":{"k":1}, "extra": {"z":[1,{"a":2}]}}"#,
        ];
        let (rows, _, _) = parse(&o, &lines).unwrap();
        let n = Value::Null;
        let c = |i: usize| json!(lines[i]);
        let expected = vec![
            vec![
                json!(1),
                json!({"a":1,"b":"x"}),
                json!([1, 2]),
                json!({"k":1}),
                n.clone(),
            ],
            vec![
                json!(2),
                json!({"a":null,"b":"x"}),
                n.clone(),
                n.clone(),
                c(1),
            ],
            vec![json!(3), n.clone(), n.clone(), n.clone(), c(2)],
            vec![
                json!(4),
                json!({"a":null,"b":"y"}),
                n.clone(),
                n.clone(),
                n.clone(),
            ],
            vec![
                json!(5),
                n.clone(),
                json!([null, 3]),
                json!({"k":null}),
                n.clone(),
            ],
            vec![json!(6), n.clone(), n.clone(), n.clone(), c(5)],
            vec![
                json!(7),
                json!({"a":1,"b":"{\"q\":1}"}),
                n.clone(),
                n.clone(),
                c(6),
            ],
            vec![
                json!(8),
                json!({"a":null,"b":null}),
                n.clone(),
                n.clone(),
                c(7),
            ],
            vec![
                json!(9),
                json!({"a":null,"b":null}),
                json!([]),
                json!({}),
                n.clone(),
            ],
            vec![
                json!(10),
                json!({"a":1,"b":"x"}),
                json!([1, 2]),
                json!({"k":1}),
                n.clone(),
            ],
        ];
        assert_eq!(rows, expected);

        // DROPMALFORMED drops the partial records, as Spark: ids 1, 4, 5, 9, 10 remain.
        let o = opts(
            "id INT, s STRUCT<a: INT, b: STRING>, arr ARRAY<INT>, m MAP<STRING, BIGINT>",
            &[("mode", "DROPMALFORMED")],
        );
        let (rows, _, dropped) = parse(&o, &lines).unwrap();
        let ids: Vec<Value> = rows.iter().map(|r| r[0].clone()).collect();
        assert_eq!(ids, vec![json!(1), json!(4), json!(5), json!(9), json!(10)]);
        assert_eq!(dropped, 5);
        // FAILFAST stops at the first partial record.
        let o = opts(
            "id INT, s STRUCT<a: INT, b: STRING>",
            &[("mode", "FAILFAST")],
        );
        assert!(parse(&o, &lines).is_err());

        // An array of structs keeps a partly converted struct; nested timestamps and dates.
        let o = opts(
            "a ARRAY<STRUCT<x: INT, y: INT>>, t STRUCT<ts: TIMESTAMP, d: DATE>, \
             _corrupt_record STRING",
            &[],
        );
        let line = r#"{"a":[{"x":1},{"x":"q"},null,{"y":2}], "t":{"ts":"2024-01-01T00:00:00Z","d":"2024-02-03"}}"#;
        let (rows, _, _) = parse(&o, &[line]).unwrap();
        assert_eq!(
            rows,
            vec![vec![
                json!([{"x":1,"y":null},{"x":null,"y":null},null,{"x":null,"y":2}]),
                json!({"ts": ts("2024-01-01T00:00:00Z"), "d": 19756}),
                json!(line),
            ]]
        );
    }

    /// Spark refuses a JSON schema with a map whose key is not a string.
    #[test]
    fn json_maps_need_string_keys() {
        let schema: SchemaRef =
            crate::schema::parse_ddl_schema("m MAP<INT,STRING>, _corrupt_record STRING").unwrap();
        let err = ParseOptions::new("json", &schema, &Options::new(&HashMap::new()))
            .err()
            .unwrap();
        assert_eq!(
            err.class(),
            crate::error::class::INVALID_JSON_SCHEMA_MAP_TYPE
        );
        assert_eq!(
            err.message(),
            "Input schema \"STRUCT<m: MAP<INT, STRING>, _corrupt_record: STRING>\" can only \
             contain STRING as a key type for a MAP."
        );
        // CSV refuses nested columns with Spark's class and message.
        let schema: SchemaRef = crate::schema::parse_ddl_schema("s STRUCT<x: INT>").unwrap();
        let err = ParseOptions::new("csv", &schema, &Options::new(&HashMap::new()))
            .err()
            .unwrap();
        assert_eq!(
            err.message(),
            "The CSV datasource doesn't support the column `s` of the type \"STRUCT<x: INT>\"."
        );
    }

    #[test]
    fn scenario_json_nulls_and_malformed_run_1() {
        let o = opts("id INT, user STRING, amount DOUBLE, ts TIMESTAMP", &[]);
        let (rows, malformed, dropped) = parse(
            &o,
            &[
                r#"{"id": 1, "user": "alice", "amount": 10.5, "ts": "2026-05-01T10:00:00Z"}"#,
                r#"{"id": 2, "user": "bob"}"#,
                r#"{"id": 3, "user": null, "amount": null, "ts": null}"#,
                r#"{"id": 4, "user": "dave", "amount": "#,
                r#"this is not json"#,
                r#"{"id": 5, "user": "erin", "amount": "abc", "ts": "2026-05-01T10:05:00Z"}"#,
                r#""#,
                r#"{"id": "6", "user": "frank", "amount": 7, "ts": "2026-05-01T10:06:00Z"}"#,
            ],
        )
        .unwrap();
        let n = Value::Null;
        assert_eq!(
            rows,
            vec![
                vec![
                    json!(1),
                    json!("alice"),
                    json!(10.5),
                    ts("2026-05-01T10:00:00")
                ],
                vec![json!(2), json!("bob"), n.clone(), n.clone()],
                vec![json!(3), n.clone(), n.clone(), n.clone()],
                vec![n.clone(), n.clone(), n.clone(), n.clone()],
                vec![n.clone(), n.clone(), n.clone(), n.clone()],
                vec![
                    json!(5),
                    json!("erin"),
                    n.clone(),
                    ts("2026-05-01T10:05:00")
                ],
                vec![
                    n.clone(),
                    json!("frank"),
                    json!(7.0),
                    ts("2026-05-01T10:06:00")
                ],
            ]
        );
        assert_eq!((malformed, dropped), (4, 0));
    }

    #[test]
    fn scenario_json_nulls_and_malformed_run_2() {
        let o = opts("id INT, user STRING, amount DOUBLE, ts TIMESTAMP", &[]);
        let (rows, malformed, _) = parse(
            &o,
            &[
                r#"{"id": 7, "user": "grace", "amount": 100.0, "ts": "2026-05-01T10:07:00Z", "extra": true}"#,
                r#"{"id": 8.9, "user": 42, "amount": "12.5", "ts": 1777629000}"#,
                r#"[1, 2, 3]"#,
                r#"{}"#,
                r#"{"id": 9, "user": "ivy", "amount": 3.25, "ts": "yesterday"}"#,
                r#"{"ID": 10, "User": "jack", "amount": 1.5}"#,
            ],
        )
        .unwrap();
        let n = Value::Null;
        assert_eq!(
            rows,
            vec![
                vec![
                    json!(7),
                    json!("grace"),
                    json!(100.0),
                    ts("2026-05-01T10:07:00")
                ],
                vec![n.clone(), json!("42"), n.clone(), ts("2026-05-01T09:50:00")],
                vec![n.clone(), n.clone(), n.clone(), n.clone()],
                vec![n.clone(), n.clone(), n.clone(), n.clone()],
                vec![json!(9), json!("ivy"), json!(3.25), n.clone()],
                vec![n.clone(), n.clone(), json!(1.5), n.clone()],
            ]
        );
        // `[1, 2, 3]` and the two records with wrongly typed values are malformed; `{}` is not.
        assert_eq!(malformed, 3);
    }

    #[test]
    fn scenario_json_timestamp_parsing() {
        let o = opts("id INT, ts TIMESTAMP", &[]);
        let (got, _, _) = parse(
            &o,
            &[
                r#"{"id": 1, "ts": "2026-03-14T09:26:53Z"}"#,
                r#"{"id": 2, "ts": "2026-03-14T09:26:53"}"#,
                r#"{"id": 3, "ts": "2026-03-14T09:26:53.250Z"}"#,
                r#"{"id": 4, "ts": "2026-03-14T11:26:53+02:00"}"#,
                r#"{"id": 5, "ts": "2026-03-14T09:26:53.5"}"#,
                r#"{"id": 6, "ts": "2026-03-14 09:26:53"}"#,
                r#"{"id": 7, "ts": "2026-12-31T23:59:59.999Z"}"#,
                r#"{"id": 8, "ts": "14/03/2026 09:26"}"#,
                r#"{"id": 9, "ts": null}"#,
                r#"{"id": 10}"#,
                r#"{"id": 11, "ts": "2026-03-14T09:26:53.123456Z"}"#,
                r#"{"id": 12, "ts": "2026-03-14"}"#,
                r#"{"id": 13, "ts": "2026-03-14T23:30:00-03:00"}"#,
            ],
        )
        .unwrap();
        let base = 1_773_480_413_000_000i64;
        let want: Vec<Value> = vec![
            json!(base),
            json!(base),
            json!(base + 250_000),
            json!(base),
            json!(base + 500_000),
            json!(base),
            json!(1_798_761_599_999_000i64),
            Value::Null,
            Value::Null,
            Value::Null,
            json!(base + 123_456),
            json!(1_773_446_400_000_000i64),
            json!(1_773_541_800_000_000i64),
        ];
        let got_ts: Vec<Value> = got.iter().map(|r| r[1].clone()).collect();
        assert_eq!(got_ts, want);
        assert_eq!(got.len(), 13);
    }

    #[test]
    fn json_value_rules() {
        let o = opts(
            "s STRING, b BOOLEAN, t TINYINT, l BIGINT, f FLOAT, d DOUBLE, dec DECIMAL(5,2), dt DATE",
            &[],
        );
        let (got, malformed, _) = parse(
            &o,
            &[
                r#"{"s": {"a": [1, 2.50, "x\n"], "b": null}, "b": true, "t": 255, "l": 9007199254740993, "f": 1.5, "d": "NaN", "dec": 123.456, "dt": "2026-03-14"}"#,
                r#"{"s": 1e10, "b": "true", "t": 256, "l": 1.0, "f": "1.5", "d": -Infinity, "dec": "1,234.5", "dt": "123"}"#,
                r#"{'s': 'single', "b": false, "d": 3, "dec": 1234.5}"#,
                r#"   {"s": -0}  trailing garbage is ignored"#,
                r#"  "#,
                r#"null"#,
                r#"{"s": tru}"#,
                r#"[{"s": "x"}, {"s": "y", "t": "bad"}]"#,
                r#"[]"#,
            ],
        )
        .unwrap();
        let n = Value::Null;
        assert_eq!(
            got,
            vec![
                vec![
                    json!(r#"{"a":[1,2.5,"x\n"],"b":null}"#),
                    json!(true),
                    json!(-1),
                    json!(9007199254740993i64),
                    json!(1.5),
                    json!("NaN"),
                    json!("12346"),
                    json!(20526)
                ],
                vec![
                    json!("1.0E10"),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    json!("-Infinity"),
                    n.clone(),
                    json!(123)
                ],
                vec![
                    json!("single"),
                    json!(false),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    json!(3.0),
                    n.clone(),
                    n.clone()
                ],
                vec![
                    json!("0"),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone()
                ],
                vec![n.clone(); 8],
                vec![n.clone(); 8],
                vec![
                    json!("x"),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone()
                ],
                vec![
                    json!("y"),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    n.clone()
                ],
            ]
        );
        // `null` and `{"s": tru}` are malformed.
        assert_eq!(malformed, 5);
    }

    #[test]
    fn modes_and_corrupt_column() {
        let lines = [
            r#"{"a": 1, "b": "x"}"#,
            r#"{"a": "oops", "b": "y"}"#,
            r#"not json"#,
            r#"{"a": 4}"#,
        ];
        // PERMISSIVE with a corrupt-record column (anywhere in the schema).
        let o = opts("_corrupt_record STRING, a INT, b STRING", &[]);
        let (got, malformed, dropped) = parse(&o, &lines).unwrap();
        let n = Value::Null;
        assert_eq!(
            got,
            vec![
                vec![n.clone(), json!(1), json!("x")],
                vec![json!(lines[1]), n.clone(), json!("y")],
                vec![json!(lines[2]), n.clone(), n.clone()],
                vec![n.clone(), json!(4), n.clone()],
            ]
        );
        assert_eq!((malformed, dropped), (2, 0));

        // A renamed corrupt column.
        let o = opts("a INT, bad STRING", &[("columnNameOfCorruptRecord", "bad")]);
        let (got, _, _) = parse(&o, &lines).unwrap();
        assert_eq!(got[2], vec![n.clone(), json!(lines[2])]);

        // DROPMALFORMED drops malformed and partial records, and counts them.
        let o = opts("a INT, b STRING", &[("mode", "dropmalformed")]);
        let (got, malformed, dropped) = parse(&o, &lines).unwrap();
        assert_eq!(
            got,
            vec![vec![json!(1), json!("x")], vec![json!(4), n.clone()]]
        );
        assert_eq!((malformed, dropped), (2, 2));

        // FAILFAST stops at the first bad record, naming the file and line.
        let o = opts("a INT, b STRING", &[("mode", "FAILFAST")]);
        let err = parse(&o, &lines).unwrap_err();
        assert_eq!(
            err.class(),
            "MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION"
        );
        assert_eq!(err.fault(), Fault::Input);
        let msg = err.message();
        assert!(msg.contains("line 2 of file:///t/1.json"), "{msg}");
        assert!(
            msg.contains("PERMISSIVE") && msg.contains("DROPMALFORMED"),
            "{msg}"
        );
        let (got, _, _) = parse(&o, &lines[..1]).unwrap();
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn bad_corrupt_column_type_and_binary() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("_corrupt_record", DataType::Int32, true),
        ]));
        let err = ParseOptions::new("json", &schema, &Options::default()).unwrap_err();
        assert_eq!(err.class(), "INVALID_CORRUPT_RECORD_TYPE");
        let schema: SchemaRef =
            Arc::new(Schema::new(vec![Field::new("a", DataType::Binary, true)]));
        let err = ParseOptions::new("json", &schema, &Options::default()).unwrap_err();
        assert_eq!(err.fault(), Fault::NotSupportedYet);
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new(
            "a",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        )]));
        let o = ParseOptions::new("json", &schema, &Options::default()).unwrap();
        assert!(o.schema.field(0).is_nullable());
    }

    #[test]
    fn multi_line_and_options() {
        let o = opts("a INT, b STRING", &[("multiLine", "true")]);
        let (got, _, _) = parse(
            &o,
            &["[", r#"{"a": 1,"#, r#" "b": "x"},"#, r#"{"a": 2}"#, "]"],
        )
        .unwrap();
        assert_eq!(
            got,
            vec![vec![json!(1), json!("x")], vec![json!(2), Value::Null]]
        );

        let o = opts("a INT, b STRING", &[("allowSingleQuotes", "false")]);
        let (got, malformed, _) = parse(&o, &[r#"{'a': 1}"#]).unwrap();
        assert_eq!((got.len(), malformed), (1, 1));

        let o = opts(
            "a INT, b STRING",
            &[
                ("allowComments", "true"),
                ("allowUnquotedFieldNames", "true"),
            ],
        );
        let (got, malformed, _) = parse(&o, &[r#"/* c */ {a: 1, // x"#]).unwrap();
        assert_eq!(malformed, 1, "{got:?}");
        let (got, malformed, _) = parse(&o, &[r#"/* c */ {a: 1, b: "z"}"#]).unwrap();
        assert_eq!((got, malformed), (vec![vec![json!(1), json!("z")]], 0));
    }

    /// The fast path for short decimals gives `str::parse`'s value bit for bit whenever it
    /// answers, and answers for the usual amounts and prices.
    #[test]
    fn short_decimals_read_as_str_parse_reads_them() {
        let mut texts: Vec<String> = [
            "0",
            "-0",
            "0.0",
            "-0.0",
            "22.32",
            "0.1",
            "0.3",
            "-7.5",
            "00.5",
            "5e3",
            "1.5E-3",
            "123456789012345",
            "1234567890123456",
            "99999999999999.9",
            "999999999999999.9",
            "1.000000000000001",
            "0.000000000000001",
            "9007199254740993",
            "-",
            "",
            ".",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        // Pseudo-random digit strings with a point anywhere (xorshift, fixed seed).
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = 1 + (next() % 18) as usize;
            let mut t: String = (0..len)
                .map(|_| char::from(b'0' + (next() % 10) as u8))
                .collect();
            let point = (next() % (len as u64 + 1)) as usize;
            if point > 0 && point < len {
                t.insert(point, '.');
            }
            if next() % 3 == 0 {
                t.insert(0, '-');
            }
            texts.push(t);
        }
        let mut answered = 0;
        for t in &texts {
            if let Some(v) = short_decimal(t) {
                let expected: f64 = t.parse().unwrap();
                assert_eq!(v.to_bits(), expected.to_bits(), "{t}");
                answered += 1;
            }
        }
        assert!(answered > texts.len() / 2, "{answered} of {}", texts.len());
        for t in ["22.32", "-0.0", "0.1", "123456789012345", "00.5"] {
            assert!(short_decimal(t).is_some(), "{t}");
        }
        for t in ["1234567890123456", "5e3", "1.5E-3", "-", "", "."] {
            assert_eq!(short_decimal(t), None, "{t}");
        }
    }

    /// The word-at-a-time scan stops where a byte-by-byte scan stops: at the first `"`, `\\`
    /// or control character, wherever it is in a word and whatever surrounds it.
    #[test]
    fn plain_runs_end_where_a_byte_scan_ends() {
        let stops = [b'"', b'\\', 0x00, 0x1f, b'\n', b'\t'];
        let fillers = [
            b'a', b' ', b'!', b'#', b'[', b'\'', 0x20, 0x7f, 0x80, 0xe2, 0xff,
        ];
        let naive = |b: &[u8], mut pos: usize| {
            while pos < b.len() && !(b[pos] == b'"' || b[pos] == b'\\' || b[pos] < 0x20) {
                pos += 1;
            }
            pos
        };
        for len in 0..40 {
            for &fill in &fillers {
                let plain = vec![fill; len];
                for start in 0..=len {
                    assert_eq!(plain_run_end(&plain, start), len, "{len} {fill}");
                }
                for at in 0..len {
                    for &stop in &stops {
                        let mut b = plain.clone();
                        b[at] = stop;
                        // A second stop later must not move the first.
                        if at + 3 < len {
                            b[at + 3] = b'"';
                        }
                        for start in 0..=len {
                            assert_eq!(
                                plain_run_end(&b, start),
                                naive(&b, start),
                                "len {len} fill {fill} stop {stop} at {at} start {start}"
                            );
                        }
                    }
                }
            }
        }
    }
}
