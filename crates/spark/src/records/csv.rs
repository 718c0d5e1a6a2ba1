//! CSV with Spark's rules (univocity's parser as Spark configures it, one record per line).
//!
//! - Blank lines are skipped; with `header=true` the first other line of EACH file is skipped;
//!   lines starting with the `comment` character (when set) are skipped.
//! - Columns are matched by position. An unquoted empty field, or a field equal to `nullValue`
//!   (default: empty), is null, for strings too.
//! - A value that does not fit its type is null, and so are the trailing fields of a short line;
//!   extra fields are ignored. Such a record is *partial*: kept in PERMISSIVE mode, dropped in
//!   DROPMALFORMED mode, an error in FAILFAST mode (as Spark's `UnivocityParser`).
//! - Quoting follows univocity with Spark's defaults (quote `"`, escape `\`,
//!   `unescapedQuoteHandling=STOP_AT_DELIMITER`): `\"` inside quotes is a quote, but a quote
//!   that is not escaped ends the quoted mode and the field is then read *raw* up to the next
//!   delimiter, which is why `"Quoted ""name"""` stays `"Quoted ""name"""`. An unterminated
//!   quote takes the rest of the line. Tokenizing never fails.

use std::borrow::Cow;

use arrow::datatypes::DataType;

use super::{
    convert_temporal_or_decimal, excerpt, for_each_line_from, parse_java_double, parse_java_float,
    Assembler, Bad, Cell, CsvOptions, PieceState, RecordRef,
};
use crate::error::{class, Result, SluiceError};
use crate::schema::spark_type_name;

/// Reads the CSV text of one file into `asm`.
pub fn read(text: &str, uri: &str, c: &CsvOptions, asm: &mut Assembler<'_>) -> Result<()> {
    read_piece(text, uri, c, asm, &mut PieceState::file_start(c.header))
}

/// Reads a piece of the CSV text of one file into `asm`: whole lines (or the whole file with
/// `multiLine`), the first of them line `at.lines_before + 1` of the file. `at` carries the
/// file's state to the next piece: the lines read, and whether the header is still to come
/// (the first line that is neither blank nor a comment, in whichever piece it is).
pub fn read_piece(
    text: &str,
    uri: &str,
    c: &CsvOptions,
    asm: &mut Assembler<'_>,
    at: &mut PieceState,
) -> Result<()> {
    let opts = asm.opts;
    let fields: Vec<(&str, &DataType)> = opts
        .data_fields
        .iter()
        .map(|&col| {
            let f = opts.schema.field(col);
            (f.name().as_str(), f.data_type())
        })
        .collect();
    let n = fields.len();
    let tok = Tokenizer::new(c);
    let mut header_pending = at.header_pending;
    let mut tokens: Vec<Option<Cow<'_, str>>> = Vec::with_capacity(n);
    let mut cells: Vec<Cell<'_>> = Vec::with_capacity(n);
    let lines = for_each_record(text, c, at.lines_before, |line_no, line| {
        if line.trim_matches(|ch: char| ch <= ' ').is_empty() {
            return Ok(());
        }
        if let Some(cm) = c.comment {
            if line.as_bytes().first() == Some(&cm) {
                return Ok(());
            }
        }
        if header_pending {
            header_pending = false;
            if c.check_header {
                tok.tokenize(line, &mut tokens);
                check_header(&tokens, &fields, uri)?;
            }
            return Ok(());
        }
        tok.tokenize(line, &mut tokens);
        let mut partial: Option<String> = if tokens.len() != n {
            Some(format!("expected {n} fields, found {}", tokens.len()))
        } else {
            None
        };
        cells.clear();
        for (k, (name, dt)) in fields.iter().enumerate() {
            let token = tokens.get_mut(k).and_then(Option::take);
            let cell = match token {
                None => Cell::Null,
                Some(s) if s.as_ref() == c.null_value => Cell::Null,
                Some(s) => match convert(s, dt, c) {
                    Ok(cell) => cell,
                    Err(value) => {
                        if partial.is_none() {
                            partial = Some(format!(
                                "field `{name}`: cannot convert {:?} to {}",
                                excerpt(&value, 60),
                                spark_type_name(dt)
                            ));
                        }
                        Cell::Null
                    }
                },
            };
            cells.push(cell);
        }
        let rr = RecordRef {
            file: uri,
            line: line_no,
            text: line,
        };
        asm.record(&cells, partial.map(Bad::Partial), rr)
    })?;
    at.lines_before = lines;
    at.header_pending = header_pending;
    Ok(())
}

/// Calls `f` with each record of `text` and the number of the line it starts on: each line, or
/// with `multiLine`, the text up to a line break outside quotes (a quoted value may hold line
/// breaks, as univocity reads it for Spark). The first line of `text` is line `before + 1`;
/// returns the number of the last line.
fn for_each_record<'t>(
    text: &'t str,
    c: &CsvOptions,
    before: usize,
    mut f: impl FnMut(usize, &'t str) -> Result<()>,
) -> Result<usize> {
    if !c.multi_line || c.quote == 0 {
        return for_each_line_from(text, c.line_sep.as_deref(), before, f);
    }
    let b = text.as_bytes();
    let sep = c.line_sep.as_deref().map(str::as_bytes);
    // The length of the record separator at `i`, if one starts there.
    let break_at = |i: usize| -> Option<usize> {
        match sep {
            Some(s) => b[i..].starts_with(s).then_some(s.len()),
            None => match b[i] {
                b'\n' => Some(1),
                b'\r' if b.get(i + 1) == Some(&b'\n') => Some(2),
                b'\r' => Some(1),
                _ => None,
            },
        }
    };
    let (q, e, d) = (c.quote, c.escape, c.sep);
    let (mut start, mut i) = (0usize, 0usize);
    let (mut line, mut record_line) = (before + 1, before + 1);
    let mut quoted = false;
    // At the start of a field (only whitespace seen in it, when leading whitespace is ignored).
    let mut field_start = true;
    while i < b.len() {
        let ch = b[i];
        if quoted {
            if ch == b'\n' || (ch == b'\r' && b.get(i + 1) != Some(&b'\n')) {
                line += 1;
            }
            if e != 0 && e != q && ch == e && i + 1 < b.len() {
                i += 2;
                continue;
            }
            if ch == q {
                if b.get(i + 1) == Some(&q) {
                    i += 2;
                    continue;
                }
                quoted = false;
            }
            i += 1;
            continue;
        }
        if let Some(n) = break_at(i) {
            f(record_line, &text[start..i])?;
            i += n;
            start = i;
            line += 1;
            record_line = line;
            field_start = true;
            continue;
        }
        if ch == d {
            field_start = true;
        } else if field_start && ch == q {
            quoted = true;
            field_start = false;
        } else if !(field_start && c.ignore_leading_ws && ch <= b' ') {
            field_start = false;
        }
        i += 1;
    }
    if start < b.len() {
        f(record_line, &text[start..])?;
        return Ok(line);
    }
    Ok(line - 1)
}

/// `enforceSchema=false`: the header names the schema's columns, by position, ignoring case.
fn check_header(
    header: &[Option<Cow<'_, str>>],
    fields: &[(&str, &DataType)],
    uri: &str,
) -> Result<()> {
    let names: Vec<&str> = header.iter().map(|t| t.as_deref().unwrap_or("")).collect();
    let mismatch = if names.len() != fields.len() {
        Some(format!(
            "Number of columns in CSV header is not equal to number of fields in the schema: \
             {} header columns, {} schema fields",
            names.len(),
            fields.len()
        ))
    } else {
        names
            .iter()
            .zip(fields)
            .find(|(h, (f, _))| !h.trim().eq_ignore_ascii_case(f))
            .map(|(h, (f, _))| format!("Expected: {f} but found: {h}"))
    };
    match mismatch {
        None => Ok(()),
        Some(why) => Err(SluiceError::input(
            class::MALFORMED_RECORD,
            format!(
                "CSV header does not conform to the schema.\n Header: {}\n Schema: {}\n{why}\n\
                 CSV file: {uri}\nFix the header of that file, or read with \
                 enforceSchema=true (columns by position, the header ignored).",
                names.join(", "),
                fields
                    .iter()
                    .map(|(f, _)| *f)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// Converts a non-null field; on failure returns the text for the message.
fn convert<'a>(
    s: Cow<'a, str>,
    dt: &DataType,
    c: &CsvOptions,
) -> std::result::Result<Cell<'a>, String> {
    let out = match dt {
        DataType::Utf8 => return Ok(Cell::Str(s)),
        DataType::Boolean => {
            if s.eq_ignore_ascii_case("true") {
                Some(Cell::Bool(true))
            } else if s.eq_ignore_ascii_case("false") {
                Some(Cell::Bool(false))
            } else {
                None
            }
        }
        DataType::Int8 => s.parse::<i8>().ok().map(|v| Cell::Int(v as i64)),
        DataType::Int16 => s.parse::<i16>().ok().map(|v| Cell::Int(v as i64)),
        DataType::Int32 => s.parse::<i32>().ok().map(|v| Cell::Int(v as i64)),
        DataType::Int64 => s.parse::<i64>().ok().map(Cell::Int),
        DataType::Float32 => {
            if *s == *c.nan_value {
                Some(Cell::F32(f32::NAN))
            } else if *s == *c.negative_inf {
                Some(Cell::F32(f32::NEG_INFINITY))
            } else if *s == *c.positive_inf {
                Some(Cell::F32(f32::INFINITY))
            } else {
                parse_java_float(&s).map(Cell::F32)
            }
        }
        DataType::Float64 => {
            if *s == *c.nan_value {
                Some(Cell::F64(f64::NAN))
            } else if *s == *c.negative_inf {
                Some(Cell::F64(f64::NEG_INFINITY))
            } else if *s == *c.positive_inf {
                Some(Cell::F64(f64::INFINITY))
            } else {
                parse_java_double(&s).map(Cell::F64)
            }
        }
        other => convert_temporal_or_decimal(&s, other, &c.datetime),
    };
    out.ok_or_else(|| s.into_owned())
}

/// End of the line, as a character value.
const EOL: i32 = -1;

/// A one-line CSV tokenizer reproducing univocity's `CsvParser` with Spark's settings.
struct Tokenizer<'c> {
    d: i32,
    /// 0 when quoting is off.
    q: i32,
    e: i32,
    ee: i32,
    trim_leading: bool,
    trim_trailing: bool,
    empty_value: &'c str,
}

fn is_ws(c: i32) -> bool {
    (0..=32).contains(&c)
}

impl<'c> Tokenizer<'c> {
    fn new(c: &'c CsvOptions) -> Self {
        Self {
            d: c.sep as i32,
            q: c.quote as i32,
            e: c.escape as i32,
            ee: c.escape_escape as i32,
            trim_leading: c.ignore_leading_ws,
            trim_trailing: c.ignore_trailing_ws,
            empty_value: &c.empty_value,
        }
    }

    /// Splits `line` into fields: `None` for an unquoted empty field.
    fn tokenize<'a>(&self, line: &'a str, out: &mut Vec<Option<Cow<'a, str>>>) {
        out.clear();
        let b = line.as_bytes();
        let n = b.len();
        let d = self.d as u8;
        let mut pos = 0usize;
        loop {
            if self.trim_leading {
                while pos < n && b[pos] <= b' ' && b[pos] != d {
                    pos += 1;
                }
            }
            if pos >= n {
                out.push(None);
                return;
            }
            let c = b[pos];
            if c == d {
                out.push(None);
                pos += 1;
                if pos >= n {
                    out.push(None);
                    return;
                }
                continue;
            }
            if self.q != 0 && c as i32 == self.q {
                let (value, end) = self.quoted(line, pos);
                out.push(Some(value));
                pos = end;
            } else {
                let start = pos;
                while pos < n && b[pos] != d {
                    pos += 1;
                }
                let mut s = &line[start..pos];
                if self.trim_trailing {
                    s = s.trim_end_matches(|ch: char| ch <= ' ');
                }
                out.push(if s.is_empty() {
                    None
                } else {
                    Some(Cow::Borrowed(s))
                });
            }
            if pos >= n {
                return;
            }
            // b[pos] is the delimiter.
            pos += 1;
            if pos >= n {
                out.push(None);
                return;
            }
        }
    }

    /// A field starting with a quote at `start`. Returns the value and the position of the
    /// delimiter after it (or the line length).
    fn quoted<'a>(&self, line: &'a str, start: usize) -> (Cow<'a, str>, usize) {
        let b = line.as_bytes();
        let n = b.len();
        let (d, q, e, ee) = (self.d, self.q, self.e, self.ee);
        let mut pos = start + 1;
        let next = |pos: &mut usize| -> i32 {
            if *pos < n {
                let c = b[*pos] as i32;
                *pos += 1;
                c
            } else {
                EOL
            }
        };
        // Bytes are pushed one by one but only ASCII bytes are ever interpreted, so runs of a
        // multi-byte character are copied whole and the result stays valid UTF-8.
        let mut app: Vec<u8> = Vec::new();
        let mut prev: i32 = 0;
        let mut ch = next(&mut pos);
        if ch == EOL {
            // A lone quote at the end of the line is kept as a quote.
            return (Cow::Owned((q as u8 as char).to_string()), n);
        }
        // The value read raw up to the delimiter after an unescaped quote: quote, what was read
        // so far, quote, then the rest as is.
        let raw_rest = |app: Vec<u8>, extra: &[u8], pos: usize| -> (Cow<'a, str>, usize) {
            let mut v = Vec::with_capacity(app.len() + extra.len() + 2 + (n - pos));
            v.push(q as u8);
            v.extend_from_slice(&app);
            v.push(q as u8);
            v.extend_from_slice(extra);
            let mut end = pos;
            while end < n && b[end] as i32 != d {
                end += 1;
            }
            v.extend_from_slice(&b[pos..end]);
            (Cow::Owned(String::from_utf8_lossy(&v).into_owned()), end)
        };
        loop {
            if ch == EOL {
                return (self.finish(app), n);
            }
            if prev == q && (is_ws(ch) || ch == d) {
                break;
            }
            if ch != q && ch != e {
                if prev == q {
                    // An unescaped quote inside a quoted value.
                    return raw_rest(app, &[ch as u8], pos);
                }
                if prev == e && e != 0 {
                    app.push(e as u8);
                }
                // Append until a quote, an escape or the end of the line.
                while ch != EOL && ch != q && ch != e && !(ee != 0 && ch == ee) {
                    app.push(ch as u8);
                    ch = next(&mut pos);
                }
                if ch == EOL {
                    return (self.finish(app), n);
                }
                prev = ch;
                ch = next(&mut pos);
            } else {
                // univocity's processQuoteEscape.
                if ch == e && prev == ee && ee != 0 {
                    app.push(e as u8);
                    ch = 0;
                } else if prev == e && e != 0 {
                    if ch == q {
                        app.push(q as u8);
                        ch = 0;
                    } else {
                        app.push(prev as u8);
                    }
                } else if ch == q && prev == q {
                    app.push(q as u8);
                } else if prev == q {
                    // A quote followed by the escape character: read raw as well.
                    return raw_rest(app, &[ch as u8], pos);
                }
                prev = ch;
                ch = next(&mut pos);
            }
        }
        // After the closing quote: whitespace, then the delimiter or more content.
        if ch != d && is_ws(ch) {
            let ws_start = pos - 1;
            loop {
                ch = next(&mut pos);
                if ch == EOL {
                    return (self.finish(app), n);
                }
                if !is_ws(ch) {
                    break;
                }
            }
            if ch != d {
                let mut extra = b[ws_start..pos - 1].to_vec();
                extra.push(ch as u8);
                return raw_rest(app, &extra, pos);
            }
        }
        // `ch` is the delimiter, at pos - 1.
        (self.finish(app), pos - 1)
    }

    fn finish<'a>(&self, app: Vec<u8>) -> Cow<'a, str> {
        if app.is_empty() {
            return Cow::Owned(self.empty_value.to_string());
        }
        match String::from_utf8(app) {
            Ok(s) => Cow::Owned(s),
            Err(e) => Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()),
        }
    }
}

/// Parses one CSV record per element with the reader's rules and `options`, as Spark's
/// `from_csv(text, schema, options)`: `mode` PERMISSIVE (a field that does not fit its type is
/// null, the rest of the record kept; a blank text is a record of nulls) or FAILFAST (an error).
/// Only the first line of a text is read; `header` and `comment` do not apply. Returns a struct
/// array in the nullable `schema`, one row per text; the caller sets the nulls of `None` texts.
pub fn parse_csv_values(
    texts: &[Option<&str>],
    schema: &arrow::datatypes::SchemaRef,
    options: &std::collections::HashMap<String, String>,
) -> Result<arrow::array::ArrayRef> {
    let opts = super::ParseOptions::new("csv", schema, &super::Options::new(options))?;
    let super::FormatKind::Csv(c) = &opts.kind else {
        return Err(SluiceError::internal("from_csv options"));
    };
    let mut c = c.clone();
    c.header = false;
    c.check_header = false;
    c.comment = None;
    let n = opts.data_fields.len();
    let mut asm = Assembler::new(&opts)?;
    let nulls: Vec<Cell<'_>> = (0..n).map(|_| Cell::Null).collect();
    for t in texts {
        let line = t.unwrap_or("").split(['\n', '\r']).next().unwrap_or("");
        if line.trim_matches(|ch: char| ch <= ' ').is_empty() {
            let rr = RecordRef {
                file: "from_csv",
                line: 1,
                text: line,
            };
            asm.record(&nulls, None, rr)?;
        } else {
            read(line, "from_csv", &c, &mut asm)?;
        }
    }
    let rows = asm.finish()?;
    let batch = arrow::compute::concat_batches(&opts.schema, &rows.batches)?;
    if batch.num_rows() != texts.len() {
        return Err(SluiceError::internal(format!(
            "from_csv read {} rows from {} texts",
            batch.num_rows(),
            texts.len()
        )));
    }
    Ok(std::sync::Arc::new(arrow::array::StructArray::try_new(
        opts.schema.fields().clone(),
        batch.columns().to_vec(),
        None,
    )?))
}

/// Spark's `schema_of_csv(text, options)`: the type `CSVInferSchema` gives each field of the
/// first line of `text` (tokenized with the reader's rules and `options`), as
/// `STRUCT<_c0: INT, _c1: STRING>`. Per field, the first that fits: `INT`, `BIGINT`,
/// `DECIMAL(p, 0)` (integers beyond `BIGINT`), `DOUBLE`, `DATE` (`dateFormat`, default
/// `yyyy-MM-dd`), `TIMESTAMP`, `BOOLEAN`, else `STRING`; a null field is `STRING`.
pub fn infer_csv_schema(
    text: &str,
    options: &std::collections::HashMap<String, String>,
) -> Result<DataType> {
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::empty());
    let opts = super::ParseOptions::new("csv", &schema, &super::Options::new(options))?;
    let super::FormatKind::Csv(c) = &opts.kind else {
        return Err(SluiceError::internal("schema_of_csv options"));
    };
    let date_format_given = options.keys().any(|k| k.eq_ignore_ascii_case("dateFormat"));
    let line = text.split(['\n', '\r']).next().unwrap_or("");
    let tok = Tokenizer::new(c);
    let mut tokens = Vec::new();
    tok.tokenize(line, &mut tokens);
    let fields: Vec<arrow::datatypes::Field> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t = match t {
                Some(s) if s.as_ref() != c.null_value => infer_field(s, c, date_format_given),
                _ => DataType::Utf8,
            };
            arrow::datatypes::Field::new(format!("_c{i}"), t, true)
        })
        .collect();
    Ok(DataType::Struct(fields.into()))
}

fn infer_field(s: &str, c: &CsvOptions, date_format_given: bool) -> DataType {
    if s.parse::<i32>().is_ok() {
        return DataType::Int32;
    }
    if s.parse::<i64>().is_ok() {
        return DataType::Int64;
    }
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let p = digits.trim_start_matches('0').len().max(1);
        if p <= 38 {
            return DataType::Decimal128(p as u8, 0);
        }
    }
    if parse_java_double(s).is_some()
        || s == c.nan_value
        || s == c.positive_inf
        || s == c.negative_inf
    {
        return DataType::Float64;
    }
    let iso_date = {
        let b = s.as_bytes();
        b.len() == 10
            && b[4] == b'-'
            && b[7] == b'-'
            && b.iter()
                .enumerate()
                .all(|(i, ch)| i == 4 || i == 7 || ch.is_ascii_digit())
    };
    let is_date = if date_format_given {
        convert_temporal_or_decimal(s, &DataType::Date32, &c.datetime).is_some()
    } else {
        iso_date && convert_temporal_or_decimal(s, &DataType::Date32, &c.datetime).is_some()
    };
    if is_date {
        return DataType::Date32;
    }
    let ts = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None);
    if convert_temporal_or_decimal(s, &ts, &c.datetime).is_some() {
        return ts;
    }
    if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") {
        return DataType::Boolean;
    }
    DataType::Utf8
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::{json, Value};

    use super::super::test_util::rows;
    use super::super::{FormatKind, ParseOptions};
    use super::*;
    use crate::error::Fault;
    use crate::records::options::Options;

    fn csv_opts(extra: &[(&str, &str)]) -> CsvOptions {
        let o = opts("a STRING", extra);
        match o.kind {
            FormatKind::Csv(c) => c,
            _ => unreachable!(),
        }
    }

    fn opts(schema: &str, extra: &[(&str, &str)]) -> ParseOptions {
        let schema = crate::schema::parse_ddl_schema(schema).unwrap();
        let m: HashMap<String, String> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ParseOptions::new("csv", &schema, &Options::new(&m)).unwrap()
    }

    fn toks(line: &str, extra: &[(&str, &str)]) -> Vec<Option<String>> {
        let c = csv_opts(extra);
        let t = Tokenizer::new(&c);
        let mut out = Vec::new();
        t.tokenize(line, &mut out);
        out.into_iter().map(|o| o.map(|s| s.into_owned())).collect()
    }

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn tokenizer_like_univocity() {
        assert_eq!(toks("a,b", &[]), vec![s("a"), s("b")]);
        assert_eq!(toks("a,", &[]), vec![s("a"), None]);
        assert_eq!(toks(",", &[]), vec![None, None]);
        assert_eq!(toks(",a", &[]), vec![None, s("a")]);
        assert_eq!(
            toks("\"New York, NY\",x", &[]),
            vec![s("New York, NY"), s("x")]
        );
        // Doubled quotes are not an escape when the escape is a backslash: read raw.
        assert_eq!(
            toks("7,\"Quoted \"\"name\"\"\",1.5", &[]),
            vec![s("7"), s("\"Quoted \"\"name\"\"\""), s("1.5")]
        );
        assert_eq!(toks("\"a\\\"b\",c", &[]), vec![s("a\"b"), s("c")]);
        assert_eq!(toks("\"a\\\\\",c", &[]), vec![s("a\\"), s("c")]);
        assert_eq!(toks("\"a\\b\"", &[]), vec![s("a\\b")]);
        assert_eq!(toks("\"\",x", &[]), vec![s(""), s("x")]);
        assert_eq!(toks("\"abc", &[]), vec![s("abc")]);
        assert_eq!(toks("a,\"", &[]), vec![s("a"), s("\"")]);
        assert_eq!(toks("\"ab\"c,d", &[]), vec![s("\"ab\"c"), s("d")]);
        assert_eq!(toks("\"ab\"  ,d", &[]), vec![s("ab"), s("d")]);
        assert_eq!(toks("\"ab\" x,d", &[]), vec![s("\"ab\" x"), s("d")]);
        assert_eq!(toks(" \"a\" ,b", &[]), vec![s(" \"a\" "), s("b")]);
        assert_eq!(toks("ab\"c,d", &[]), vec![s("ab\"c"), s("d")]);
        assert_eq!(toks("é,\"ü,ß\"", &[]), vec![s("é"), s("ü,ß")]);
        // With the quote as its own escape, doubled quotes are unescaped.
        assert_eq!(
            toks("\"Quoted \"\"name\"\"\",1", &[("escape", "\"")]),
            vec![s("Quoted \"name\""), s("1")]
        );
        assert_eq!(toks("a;b,c", &[("sep", ";")]), vec![s("a"), s("b,c")]);
        assert_eq!(toks("a\tb", &[("sep", "\\t")]), vec![s("a"), s("b")]);
        assert_eq!(toks("'a,b',c", &[("quote", "'")]), vec![s("a,b"), s("c")]);
        assert_eq!(
            toks(
                " a , b ",
                &[
                    ("ignoreLeadingWhiteSpace", "true"),
                    ("ignoreTrailingWhiteSpace", "true")
                ]
            ),
            vec![s("a"), s("b")]
        );
    }

    fn parse(o: &ParseOptions, lines: &[&str]) -> Result<(Vec<Vec<Value>>, u64, u64)> {
        let mut asm = Assembler::new(o)?;
        let FormatKind::Csv(c) = &o.kind else {
            unreachable!()
        };
        read(&lines.join("\n"), "file:///t/1.csv", c, &mut asm)?;
        let out = asm.finish()?;
        Ok((rows(&out.batches), out.malformed, out.dropped))
    }

    #[test]
    fn multi_line_keeps_quoted_line_breaks_in_one_record() {
        let o = opts(
            "id INT, note STRING, n INT",
            &[("multiLine", "true"), ("header", "true")],
        );
        let lines = [
            "id,note,n",
            "1,\"first line",
            "second line\",7",
            "2,single,8",
            "3,\"a \"\"quoted\"\"\r\nthird\",9",
            "4,\"esc \\\" still\nin\",10",
        ];
        let (rows, malformed, _) = parse(&o, &lines).unwrap();
        assert_eq!(
            rows,
            vec![
                vec![json!(1), json!("first line\nsecond line"), json!(7)],
                vec![json!(2), json!("single"), json!(8)],
                // Doubled quotes with a backslash escape: read raw, as on one line.
                vec![json!(3), json!("\"a \"\"quoted\"\"\r\nthird\""), json!(9)],
                vec![json!(4), json!("esc \" still\nin"), json!(10)],
            ]
        );
        assert_eq!(malformed, 0);
        // Without multiLine each line is a record: the broken halves are counted as malformed.
        let o = opts("id INT, note STRING, n INT", &[("header", "true")]);
        let (rows, malformed, _) = parse(&o, &lines[..4]).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(malformed, 2);
    }

    fn ts(s: &str) -> Value {
        json!(crate::records::datetime::parse_timestamp_micros(s).unwrap())
    }

    #[test]
    fn scenario_csv_source_with_header() {
        let o = opts(
            "id INT, city STRING, temp DOUBLE, ts TIMESTAMP",
            &[("header", "true")],
        );
        let n = Value::Null;
        let (got, malformed, _) = parse(
            &o,
            &[
                "id,city,temp,ts",
                "1,London,12.5,2026-02-01T08:00:00Z",
                "2,\"New York, NY\",-3.25,2026-02-01T08:05:00Z",
                "3,Paris,,2026-02-01T08:10:00Z",
                "4,,20,2026-02-01 08:15:00",
                "5,Berlin,abc,2026-02-01T08:20:00Z",
            ],
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                vec![
                    json!(1),
                    json!("London"),
                    json!(12.5),
                    ts("2026-02-01T08:00:00")
                ],
                vec![
                    json!(2),
                    json!("New York, NY"),
                    json!(-3.25),
                    ts("2026-02-01T08:05:00")
                ],
                vec![
                    json!(3),
                    json!("Paris"),
                    n.clone(),
                    ts("2026-02-01T08:10:00")
                ],
                vec![json!(4), n.clone(), json!(20.0), ts("2026-02-01T08:15:00")],
                vec![
                    json!(5),
                    json!("Berlin"),
                    n.clone(),
                    ts("2026-02-01T08:20:00")
                ],
            ]
        );
        assert_eq!(malformed, 1);
        let (got, _, _) = parse(
            &o,
            &[
                "id,city,temp,ts",
                "6,Tokyo,30.1,2026-02-01T08:25:00",
                "7,\"Quoted \"\"name\"\"\",1.5,2026-02-01T08:30:00Z",
                "x,Rome,15,2026-02-01T08:35:00Z",
                "8,Madrid,22.5",
            ],
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                vec![
                    json!(6),
                    json!("Tokyo"),
                    json!(30.1),
                    ts("2026-02-01T08:25:00")
                ],
                vec![
                    json!(7),
                    json!("\"Quoted \"\"name\"\"\""),
                    json!(1.5),
                    ts("2026-02-01T08:30:00")
                ],
                vec![
                    n.clone(),
                    json!("Rome"),
                    json!(15.0),
                    ts("2026-02-01T08:35:00")
                ],
                vec![json!(8), json!("Madrid"), json!(22.5), n.clone()],
            ]
        );
    }

    #[test]
    fn csv_modes_null_value_and_extra_fields() {
        let lines = ["1,a", "2,b,extra", "x,c", "", "4", "5,NA"];
        let o = opts(
            "n INT, s STRING, _corrupt_record STRING",
            &[("nullValue", "NA")],
        );
        let (got, malformed, _) = parse(&o, &lines).unwrap();
        let n = Value::Null;
        assert_eq!(
            got,
            vec![
                vec![json!(1), json!("a"), n.clone()],
                vec![json!(2), json!("b"), json!("2,b,extra")],
                vec![n.clone(), json!("c"), json!("x,c")],
                vec![json!(4), n.clone(), json!("4")],
                vec![json!(5), n.clone(), n.clone()],
            ]
        );
        assert_eq!(malformed, 3, "a long row, a type error, a short row");
        let o = opts("n INT, s STRING", &[("mode", "DROPMALFORMED")]);
        let (got, malformed, dropped) = parse(&o, &lines).unwrap();
        assert_eq!(
            got,
            vec![vec![json!(1), json!("a")], vec![json!(5), json!("NA")]]
        );
        assert_eq!((malformed, dropped), (3, 3));
        let o = opts("n INT, s STRING", &[("mode", "FAILFAST")]);
        let err = parse(&o, &lines).unwrap_err();
        assert_eq!(
            (err.class(), err.fault()),
            (
                "MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION",
                Fault::Input
            )
        );
        assert!(
            err.message().contains("line 2 of file:///t/1.csv"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn csv_types() {
        let o = opts(
            "b BOOLEAN, t TINYINT, f FLOAT, d DOUBLE, dec DECIMAL(6,2), dt DATE, l BIGINT",
            &[("comment", "#")],
        );
        let (got, _, _) = parse(
            &o,
            &[
                "# a comment",
                "TRUE,-128, 2.5f ,NaN,\"1,234.567\",2026-03-14,+7",
                "maybe,128,x,-Inf,1e9,2026-13-01,1.0",
            ],
        )
        .unwrap();
        let n = Value::Null;
        assert_eq!(
            got,
            vec![
                vec![
                    json!(true),
                    json!(-128),
                    json!(2.5),
                    json!("NaN"),
                    json!("123457"),
                    json!(20526),
                    json!(7)
                ],
                vec![
                    n.clone(),
                    n.clone(),
                    n.clone(),
                    json!("-Infinity"),
                    n.clone(),
                    n.clone(),
                    n.clone()
                ],
            ]
        );
    }

    /// `enforceSchema=false` (PySpark 3.5.7): a header `ID,City` matches `id INT, city STRING`
    /// ignoring case and values are read by position; `ID,Town` fails the read with Spark's
    /// "CSV header does not conform to the schema", naming the file.
    #[test]
    fn enforce_schema_false_checks_the_header_by_position_ignoring_case() {
        let extra = [("header", "true"), ("enforceSchema", "false")];
        let o = opts("id INT, city STRING", &extra);
        let (got, _, _) = parse(&o, &["ID,City", "1,Oslo"]).unwrap();
        assert_eq!(got, vec![vec![json!(1), json!("Oslo")]]);
        let err = parse(&o, &["ID,Town", "1,Oslo"]).unwrap_err();
        assert_eq!(err.class(), "MALFORMED_RECORD");
        let msg = err.message();
        assert!(
            msg.contains("CSV header does not conform to the schema"),
            "{msg}"
        );
        assert!(msg.contains("Expected: city but found: Town"), "{msg}");
        assert!(msg.contains("file:///t/1.csv"), "{msg}");
        let short = parse(&o, &["ID", "1"]).unwrap_err();
        assert!(
            short.message().contains("Number of columns in CSV header"),
            "{short}"
        );
        let lenient = opts("id INT, city STRING", &[("header", "true")]);
        assert_eq!(parse(&lenient, &["ID,Town", "1,Oslo"]).unwrap().0.len(), 1);
    }
}
