//! Parsing files into Arrow record batches with Spark's rules: the parse modes
//! (`PERMISSIVE`/`DROPMALFORMED`/`FAILFAST`), the corrupt-record column, and the per-format
//! readers (JSON lines, CSV, text, Parquet).
//!
//! A reader turns each record into one [`Cell`] per data column, plus whether the record was
//! bad: *malformed* (it could not be parsed at all: a row of nulls in PERMISSIVE mode) or
//! *partial* (some fields could not be converted to their type: those fields are null, the
//! rest of the row stays in PERMISSIVE mode). In DROPMALFORMED mode both kinds are dropped and
//! in FAILFAST mode both fail the query, as in Spark's `FailureSafeParser`.
//!
//! Files are read a piece at a time ([`read_files_lazy`]; [`read_file`] the same way into one
//! [`Assembler`]): line-based text (JSON lines, CSV and text without `multiLine`/`wholetext`)
//! through the file's (decompressing) stream, about `chunk_bytes` of whole lines at a time,
//! the line count and the CSV header state carried from piece to piece; a file parsed as one
//! document (`multiLine`, `wholetext`) whole; Parquet as the reader decodes its batches.

pub(crate) mod csv;
pub(crate) mod json;
pub(crate) mod nested;
pub(crate) mod parquet;

use crate::error::class;
use crate::sync::{on_threads, MutexExt};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, AsArray, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder,
    Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder, Int8Builder,
    RecordBatch, RecordBatchOptions, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::options::Options;
use crate::error::{Fault, Result, SluiceError};
use crate::schema::spark_type_name;

/// Rows per record batch produced by the readers.
pub(crate) const BATCH_ROWS: usize = 8192;

/// How bad records are handled (Spark's `mode` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParseMode {
    Permissive,
    DropMalformed,
    FailFast,
}

/// JSON reader options (Spark's `JSONOptions` that matter when a schema is given).
#[derive(Debug, Clone)]
pub(crate) struct JsonOptions {
    pub multi_line: bool,
    pub allow_single_quotes: bool,
    pub allow_non_numeric_numbers: bool,
    pub allow_comments: bool,
    pub allow_unquoted_field_names: bool,
    pub allow_numeric_leading_zeros: bool,
    pub allow_unquoted_control_chars: bool,
    pub allow_backslash_escaping_any_character: bool,
    pub line_sep: Option<String>,
    /// `timestampFormat`, `dateFormat`, `timestampNTZFormat`, `enableDateTimeParsingFallback`.
    pub datetime: super::datetime::DatetimeFormats,
}

/// CSV reader options (Spark's `CSVOptions`).
#[derive(Debug, Clone)]
pub(crate) struct CsvOptions {
    pub header: bool,
    pub sep: u8,
    /// 0: no quoting.
    pub quote: u8,
    /// 0: no escape character.
    pub escape: u8,
    /// 0: none.
    pub escape_escape: u8,
    pub comment: Option<u8>,
    pub null_value: String,
    pub empty_value: String,
    pub nan_value: String,
    pub positive_inf: String,
    pub negative_inf: String,
    pub ignore_leading_ws: bool,
    pub ignore_trailing_ws: bool,
    /// `enforceSchema=false`: each file's header must name the schema's columns, by position,
    /// ignoring case (Spark's `CSVHeaderChecker`).
    pub check_header: bool,
    pub line_sep: Option<String>,
    /// `multiLine`: a quoted value may span lines (records are split outside quotes only).
    pub multi_line: bool,
    /// `timestampFormat`, `dateFormat`, `timestampNTZFormat`, `enableDateTimeParsingFallback`.
    pub datetime: super::datetime::DatetimeFormats,
}

#[derive(Debug, Clone)]
pub(crate) struct TextOptions {
    pub whole_text: bool,
    pub line_sep: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum FormatKind {
    Json(JsonOptions),
    Csv(CsvOptions),
    Text(TextOptions),
    Parquet,
}

/// Everything a reader needs: the format options, the output schema and the parse mode.
#[derive(Debug, Clone)]
pub(crate) struct ParseOptions {
    pub kind: FormatKind,
    /// The output schema: the given schema with every field nullable.
    pub schema: SchemaRef,
    pub mode: ParseMode,
    /// The column that receives the raw text of bad records (json/csv), if the schema has it.
    pub corrupt_idx: Option<usize>,
    /// The schema columns filled from the data, in order (all but the corrupt-record column).
    pub data_fields: Vec<usize>,
    pub ignore_missing_files: bool,
    pub ignore_corrupt_files: bool,
}

/// The schema with every field nullable, inside nested types too (the readers' output
/// schema, Spark's `asNullable`).
pub fn nullable_schema(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| nested::nullable_field(f))
        .collect();
    if fields
        .iter()
        .zip(schema.fields().iter())
        .all(|(a, b)| a == b.as_ref())
    {
        return schema.clone();
    }
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The schema of the `text` format.
pub(crate) fn text_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("value", DataType::Utf8, true)]))
}

fn opt_char_ascii(key: &str, c: char) -> Result<u8> {
    if c == '\0' {
        return Ok(0);
    }
    if !c.is_ascii() {
        return Err(SluiceError::not_supported_yet(format!(
            "the option '{key}' = {c:?}: only ASCII characters are supported yet"
        )));
    }
    Ok(c as u8)
}

/// Spark's `CSVExprUtils.toChar` for `sep`: one character or an escape such as `\t`.
fn parse_sep(v: &str) -> Result<u8> {
    let c = match v {
        "" => {
            return Err(Options::invalid(
                "sep",
                v,
                "the delimiter cannot be an empty string",
            ))
        }
        "\\t" => '\t',
        "\\r" => '\r',
        "\\b" => '\u{8}',
        "\\f" => '\u{c}',
        "\\\"" => '"',
        "\\'" => '\'',
        "\\n" => '\n',
        "\\\\" => '\\',
        "\\" => {
            return Err(Options::invalid(
                "sep",
                v,
                "a single backslash is not allowed; use two backslashes for the backslash \
                 character",
            ))
        }
        s if s.chars().count() == 1 => s.chars().next().unwrap_or(','),
        s => {
            return Err(SluiceError::not_supported_yet(format!(
                "the CSV delimiter {s:?} has more than one character; multi-character \
                 delimiters are not supported yet"
            )))
        }
    };
    if !c.is_ascii() {
        return Err(SluiceError::not_supported_yet(format!(
            "the CSV delimiter {c:?} is not ASCII; only ASCII delimiters are supported yet"
        )));
    }
    Ok(c as u8)
}

impl ParseOptions {
    /// Validates the options of `format` against `schema` (the given, not yet nullable one).
    pub(super) fn new(format: &str, schema: &SchemaRef, opts: &Options) -> Result<Self> {
        let schema = nullable_schema(schema);
        let mode = match opts.get("mode") {
            None => ParseMode::Permissive,
            Some(m) => match m.trim().to_ascii_uppercase().as_str() {
                "PERMISSIVE" => ParseMode::Permissive,
                "DROPMALFORMED" => ParseMode::DropMalformed,
                "FAILFAST" => ParseMode::FailFast,
                _ => {
                    return Err(Options::invalid(
                        "mode",
                        m,
                        "expected PERMISSIVE, DROPMALFORMED or FAILFAST",
                    ))
                }
            },
        };
        let datetime = super::options::datetime_formats(opts)?;
        super::options::check_documented(format, opts)?;
        for key in ["encoding", "charset"] {
            if let Some(v) = opts.get(key) {
                let norm = v.trim().to_ascii_lowercase().replace(['-', '_'], "");
                if norm != "utf8" {
                    return Err(SluiceError::not_supported_yet(format!(
                        "the option '{key}' = {v:?}: only UTF-8 files are supported yet"
                    )));
                }
            }
        }
        let line_sep = match opts.get("lineSep") {
            Some("") => return Err(Options::invalid("lineSep", "", "it cannot be empty")),
            Some(s) => Some(s.to_string()),
            None => None,
        };
        let ignore_missing_files = opts.bool("ignoreMissingFiles", false)?;
        let ignore_corrupt_files = opts.bool("ignoreCorruptFiles", false)?;
        let kind = match format {
            "json" => {
                if opts.bool("multiLine", false)? && line_sep.is_some() {
                    return Err(Options::invalid(
                        "lineSep",
                        opts.get("lineSep").unwrap_or(""),
                        "it cannot be combined with multiLine=true",
                    ));
                }
                FormatKind::Json(JsonOptions {
                    multi_line: opts.bool("multiLine", false)?,
                    allow_single_quotes: opts.bool("allowSingleQuotes", true)?,
                    allow_non_numeric_numbers: opts.bool("allowNonNumericNumbers", true)?,
                    allow_comments: opts.bool("allowComments", false)?,
                    allow_unquoted_field_names: opts.bool("allowUnquotedFieldNames", false)?,
                    allow_numeric_leading_zeros: opts.bool("allowNumericLeadingZeros", false)?,
                    allow_unquoted_control_chars: opts.bool("allowUnquotedControlChars", false)?,
                    allow_backslash_escaping_any_character: opts
                        .bool("allowBackslashEscapingAnyCharacter", false)?,
                    line_sep,
                    datetime,
                })
            }
            "csv" => {
                let sep = match opts.get("sep").or_else(|| opts.get("delimiter")) {
                    None => b',',
                    Some(v) => parse_sep(v)?,
                };
                let quote_c = opts.char_or("quote", '"')?;
                let quote = opt_char_ascii("quote", quote_c)?;
                let escape_c = opts.char_or("escape", '\\')?;
                let escape = opt_char_ascii("escape", escape_c)?;
                let escape_escape = match opts.get("charToEscapeQuoteEscaping") {
                    Some(_) => {
                        let c = opts.char_or("charToEscapeQuoteEscaping", '\0')?;
                        opt_char_ascii("charToEscapeQuoteEscaping", c)?
                    }
                    // univocity: the escape character itself, unless it equals the quote.
                    None if quote == escape => 0,
                    None => escape,
                };
                let comment = match opts.get("comment") {
                    None | Some("") => None,
                    Some(_) => {
                        let c = opts.char_or("comment", '#')?;
                        if c == '\0' {
                            None
                        } else {
                            Some(opt_char_ascii("comment", c)?)
                        }
                    }
                };
                if let Some(h) = opts.get("unescapedQuoteHandling") {
                    if !h.eq_ignore_ascii_case("STOP_AT_DELIMITER") {
                        return Err(SluiceError::not_supported_yet(format!(
                            "the CSV option unescapedQuoteHandling={h}: only STOP_AT_DELIMITER \
                             (the default) is supported yet"
                        )));
                    }
                }
                if let Some(ls) = &line_sep {
                    if ls.chars().count() != 1 {
                        return Err(Options::invalid(
                            "lineSep",
                            ls,
                            "the CSV line separator must be a single character",
                        ));
                    }
                }
                FormatKind::Csv(CsvOptions {
                    header: opts.bool("header", false)?,
                    sep,
                    quote,
                    escape,
                    escape_escape,
                    comment,
                    null_value: opts.get("nullValue").unwrap_or("").to_string(),
                    empty_value: opts.get("emptyValue").unwrap_or("").to_string(),
                    nan_value: opts.get("nanValue").unwrap_or("NaN").to_string(),
                    positive_inf: opts.get("positiveInf").unwrap_or("Inf").to_string(),
                    negative_inf: opts.get("negativeInf").unwrap_or("-Inf").to_string(),
                    ignore_leading_ws: opts.bool("ignoreLeadingWhiteSpace", false)?,
                    ignore_trailing_ws: opts.bool("ignoreTrailingWhiteSpace", false)?,
                    check_header: !opts.bool("enforceSchema", true)?,
                    multi_line: opts.bool("multiLine", false)?,
                    line_sep,
                    datetime,
                })
            }
            "text" => FormatKind::Text(TextOptions {
                whole_text: opts.bool("wholetext", false)?,
                line_sep,
            }),
            "parquet" => FormatKind::Parquet,
            other => {
                return Err(SluiceError::query(
                    class::UNSUPPORTED_DATA_SOURCE,
                    format!("{other} is not a file format; use json, csv, parquet or text"),
                ))
            }
        };

        let mut corrupt_idx = None;
        if matches!(kind, FormatKind::Json(_))
            && schema
                .fields()
                .iter()
                .any(|f| nested::non_string_map_key(f.data_type()))
        {
            return Err(SluiceError::query(
                class::INVALID_JSON_SCHEMA_MAP_TYPE,
                format!(
                    "Input schema \"{}\" can only contain STRING as a key type for a MAP.",
                    spark_type_name(&DataType::Struct(schema.fields().clone()))
                ),
            ));
        }
        match &kind {
            FormatKind::Json(_) | FormatKind::Csv(_) => {
                let corrupt_name = opts
                    .get("columnNameOfCorruptRecord")
                    .unwrap_or("_corrupt_record");
                for (i, f) in schema.fields().iter().enumerate() {
                    if f.name() == corrupt_name {
                        if f.data_type() != &DataType::Utf8 {
                            return Err(SluiceError::query(
                                class::INVALID_CORRUPT_RECORD_TYPE,
                                format!(
                                    "the column `{corrupt_name}` for corrupt records must have \
                                     the nullable STRING type, but got {}",
                                    spark_type_name(f.data_type())
                                ),
                            ));
                        }
                        corrupt_idx = Some(i);
                        continue;
                    }
                    check_parsable_type(format, f)?;
                }
            }
            FormatKind::Text(_) => {
                if schema.fields().len() != 1 || schema.field(0).data_type() != &DataType::Utf8 {
                    return Err(SluiceError::query(
                        class::INVALID_SCHEMA,
                        format!(
                            "the text format reads a single STRING column (value STRING), but \
                             the schema is {}",
                            crate::schema::schema_to_ddl(&schema)
                        ),
                    ));
                }
            }
            FormatKind::Parquet => {}
        }
        let data_fields = (0..schema.fields().len())
            .filter(|i| Some(*i) != corrupt_idx)
            .collect();
        Ok(Self {
            kind,
            schema,
            mode,
            corrupt_idx,
            data_fields,
            ignore_missing_files,
            ignore_corrupt_files,
        })
    }
}

fn check_parsable_type(format: &str, f: &Field) -> Result<()> {
    if nested::is_nested(f.data_type()) {
        if format != "json" {
            // Spark 3.5: the CSV (and text) data sources refuse nested columns.
            return Err(unsupported_for_datasource(format, f));
        }
        if nested::readable(f.data_type()) {
            return Ok(());
        }
    }
    match f.data_type() {
        DataType::Utf8
        | DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal128(_, _)
        | DataType::Date32
        | DataType::Timestamp(TimeUnit::Microsecond, _) => Ok(()),
        other => Err(SluiceError::not_supported_yet(format!(
            "column `{}` has the type {} ({other}), which the {format} reader does not \
             support yet",
            f.name(),
            spark_type_name(other)
        ))),
    }
}

/// Spark's `UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE` for column `f` of a `format` source or sink.
pub(crate) fn unsupported_for_datasource(format: &str, f: &Field) -> SluiceError {
    SluiceError::query(
        class::UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE,
        format!(
            "The {} datasource doesn't support the column `{}` of the type \"{}\".",
            format.to_ascii_uppercase(),
            f.name(),
            spark_type_name(f.data_type())
        ),
    )
}

/// One parsed value, already of its column's type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell<'a> {
    Null,
    Bool(bool),
    Int(i64),
    F32(f32),
    F64(f64),
    Dec(i128),
    Date(i32),
    Ts(i64),
    Str(Cow<'a, str>),
    /// A struct, array or map value (JSON only).
    Nested(Box<nested::Nested>),
}

/// Why a record is bad.
#[derive(Debug, Clone)]
pub(crate) enum Bad {
    /// Some fields could not be converted (they are null; the rest of the row is kept in
    /// PERMISSIVE mode).
    Partial(String),
    /// The record could not be parsed at all (a row of nulls in PERMISSIVE mode).
    Malformed(String),
}

/// Where a record comes from, for the corrupt-record column and error messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordRef<'a> {
    pub file: &'a str,
    /// 1-based line number of the record's first line.
    pub line: usize,
    pub text: &'a str,
}

enum ColBuilder {
    Utf8(StringBuilder),
    Bool(BooleanBuilder),
    I8(Int8Builder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Dec(Decimal128Builder),
    Date(Date32Builder),
    Ts(TimestampMicrosecondBuilder),
    Binary(BinaryBuilder),
    /// A struct, array or map column: the values of the pending rows, built at `finish`.
    Nested(DataType, Vec<nested::Nested>),
}

impl ColBuilder {
    /// A builder for `f`'s column with room for `rows` values (and `bytes` of string data):
    /// sized as the batch before, a batch's builders do not grow by doubling.
    fn new(f: &Field, rows: usize, bytes: usize) -> Result<Self> {
        Ok(match f.data_type() {
            DataType::Utf8 => ColBuilder::Utf8(StringBuilder::with_capacity(rows, bytes)),
            DataType::Boolean => ColBuilder::Bool(BooleanBuilder::with_capacity(rows)),
            DataType::Int8 => ColBuilder::I8(Int8Builder::with_capacity(rows)),
            DataType::Int16 => ColBuilder::I16(Int16Builder::with_capacity(rows)),
            DataType::Int32 => ColBuilder::I32(Int32Builder::with_capacity(rows)),
            DataType::Int64 => ColBuilder::I64(Int64Builder::with_capacity(rows)),
            DataType::Float32 => ColBuilder::F32(Float32Builder::with_capacity(rows)),
            DataType::Float64 => ColBuilder::F64(Float64Builder::with_capacity(rows)),
            DataType::Decimal128(p, s) => ColBuilder::Dec(
                Decimal128Builder::with_capacity(rows).with_precision_and_scale(*p, *s)?,
            ),
            DataType::Date32 => ColBuilder::Date(Date32Builder::with_capacity(rows)),
            DataType::Timestamp(TimeUnit::Microsecond, tz) => ColBuilder::Ts(
                TimestampMicrosecondBuilder::with_capacity(rows).with_timezone_opt(tz.clone()),
            ),
            DataType::Binary => ColBuilder::Binary(BinaryBuilder::with_capacity(rows, bytes)),
            dt if nested::is_nested(dt) => ColBuilder::Nested(dt.clone(), Vec::new()),
            other => {
                return Err(SluiceError::not_supported_yet(format!(
                    "column `{}` has the type {}, which the file readers do not support yet",
                    f.name(),
                    spark_type_name(other)
                )))
            }
        })
    }

    fn append_null(&mut self) {
        match self {
            ColBuilder::Utf8(b) => b.append_null(),
            ColBuilder::Bool(b) => b.append_null(),
            ColBuilder::I8(b) => b.append_null(),
            ColBuilder::I16(b) => b.append_null(),
            ColBuilder::I32(b) => b.append_null(),
            ColBuilder::I64(b) => b.append_null(),
            ColBuilder::F32(b) => b.append_null(),
            ColBuilder::F64(b) => b.append_null(),
            ColBuilder::Dec(b) => b.append_null(),
            ColBuilder::Date(b) => b.append_null(),
            ColBuilder::Ts(b) => b.append_null(),
            ColBuilder::Binary(b) => b.append_null(),
            ColBuilder::Nested(_, v) => v.push(nested::Nested::Null),
        }
    }

    fn append_str(&mut self, s: &str) {
        match self {
            ColBuilder::Utf8(b) => b.append_value(s),
            other => other.append_null(),
        }
    }

    /// Appends a cell; a cell of the wrong kind (a bug in a reader) appends null.
    fn append(&mut self, cell: &Cell<'_>) {
        match (self, cell) {
            (b, Cell::Null) => b.append_null(),
            (ColBuilder::Utf8(b), Cell::Str(s)) => b.append_value(s),
            (ColBuilder::Bool(b), Cell::Bool(v)) => b.append_value(*v),
            (ColBuilder::I8(b), Cell::Int(v)) => b.append_option(i8::try_from(*v).ok()),
            (ColBuilder::I16(b), Cell::Int(v)) => b.append_option(i16::try_from(*v).ok()),
            (ColBuilder::I32(b), Cell::Int(v)) => b.append_option(i32::try_from(*v).ok()),
            (ColBuilder::I64(b), Cell::Int(v)) => b.append_value(*v),
            (ColBuilder::F32(b), Cell::F32(v)) => b.append_value(*v),
            (ColBuilder::F64(b), Cell::F64(v)) => b.append_value(*v),
            (ColBuilder::Dec(b), Cell::Dec(v)) => b.append_value(*v),
            (ColBuilder::Date(b), Cell::Date(v)) => b.append_value(*v),
            (ColBuilder::Ts(b), Cell::Ts(v)) => b.append_value(*v),
            (ColBuilder::Nested(_, v), Cell::Nested(n)) => v.push(n.as_ref().clone()),
            (b, _) => b.append_null(),
        }
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        Ok(match self {
            ColBuilder::Utf8(b) => Arc::new(b.finish()),
            ColBuilder::Bool(b) => Arc::new(b.finish()),
            ColBuilder::I8(b) => Arc::new(b.finish()),
            ColBuilder::I16(b) => Arc::new(b.finish()),
            ColBuilder::I32(b) => Arc::new(b.finish()),
            ColBuilder::I64(b) => Arc::new(b.finish()),
            ColBuilder::F32(b) => Arc::new(b.finish()),
            ColBuilder::F64(b) => Arc::new(b.finish()),
            ColBuilder::Dec(b) => Arc::new(b.finish()),
            ColBuilder::Date(b) => Arc::new(b.finish()),
            ColBuilder::Ts(b) => Arc::new(b.finish()),
            ColBuilder::Binary(b) => Arc::new(b.finish()),
            ColBuilder::Nested(dt, v) => {
                let refs: Vec<&nested::Nested> = v.iter().collect();
                let a = nested::build(dt, &refs)?;
                v.clear();
                a
            }
        })
    }
}

/// Collects rows into record batches of the output schema and applies the parse mode.
pub(crate) struct Assembler<'o> {
    opts: &'o ParseOptions,
    builders: Vec<ColBuilder>,
    pending: usize,
    batches: Vec<RecordBatch>,
    /// Bad records counted: malformed ones in PERMISSIVE mode, dropped ones in DROPMALFORMED.
    pub malformed: u64,
    pub dropped: u64,
    pub files_read: u64,
}

impl<'o> Assembler<'o> {
    pub(super) fn new(opts: &'o ParseOptions) -> Result<Self> {
        let builders = match opts.kind {
            // Parquet batches are adapted whole; no row builders needed.
            FormatKind::Parquet => Vec::new(),
            _ => opts
                .schema
                .fields()
                .iter()
                .map(|f| ColBuilder::new(f, 0, 0))
                .collect::<Result<Vec<_>>>()?,
        };
        Ok(Self {
            opts,
            builders,
            pending: 0,
            batches: Vec::new(),
            malformed: 0,
            dropped: 0,
            files_read: 0,
        })
    }

    /// Adds one record. `cells` has one cell per data column (missing ones are null).
    pub(super) fn record(
        &mut self,
        cells: &[Cell<'_>],
        bad: Option<Bad>,
        rec: RecordRef<'_>,
    ) -> Result<()> {
        let (keep_cells, corrupt) = match bad {
            None => (true, false),
            // A record with a value that does not parse as its column's type: Spark keeps
            // the values that parsed and the record in the corrupt column; it is malformed.
            Some(Bad::Partial(reason)) => match self.opts.mode {
                ParseMode::Permissive => {
                    self.malformed += 1;
                    (true, true)
                }
                ParseMode::DropMalformed => {
                    self.malformed += 1;
                    self.dropped += 1;
                    return Ok(());
                }
                ParseMode::FailFast => return Err(failfast_error(rec, &reason)),
            },
            Some(Bad::Malformed(reason)) => match self.opts.mode {
                ParseMode::Permissive => {
                    self.malformed += 1;
                    (false, true)
                }
                ParseMode::DropMalformed => {
                    self.malformed += 1;
                    self.dropped += 1;
                    return Ok(());
                }
                ParseMode::FailFast => return Err(failfast_error(rec, &reason)),
            },
        };
        for (k, &col) in self.opts.data_fields.iter().enumerate() {
            let Some(b) = self.builders.get_mut(col) else {
                continue;
            };
            match cells.get(k) {
                Some(c) if keep_cells => b.append(c),
                _ => b.append_null(),
            }
        }
        if let Some(ci) = self.opts.corrupt_idx {
            if let Some(b) = self.builders.get_mut(ci) {
                if corrupt {
                    b.append_str(rec.text);
                } else {
                    b.append_null();
                }
            }
        }
        self.row_done()
    }

    /// Adds a one-string row (the text format).
    pub(super) fn text_row(&mut self, value: &str) -> Result<()> {
        if let Some(b) = self.builders.first_mut() {
            b.append_str(value);
        }
        self.row_done()
    }

    fn row_done(&mut self) -> Result<()> {
        self.pending += 1;
        if self.pending >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Adds what another assembler of the same options read, after the pending rows.
    fn absorb(&mut self, other: AssembledRows) -> Result<()> {
        self.flush()?;
        self.batches
            .extend(other.batches.into_iter().filter(|b| b.num_rows() > 0));
        self.malformed += other.malformed;
        self.dropped += other.dropped;
        self.files_read += other.files_read;
        Ok(())
    }

    /// Adds a ready batch (of the output schema) after the pending rows.
    pub(super) fn push_batch(&mut self, batch: RecordBatch) -> Result<()> {
        self.flush()?;
        if batch.num_rows() > 0 {
            self.batches.push(batch);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.pending == 0 {
            return Ok(());
        }
        let rows = self.pending;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.builders.len());
        for (b, f) in self.builders.iter_mut().zip(self.opts.schema.fields()) {
            let column = b.finish()?;
            let bytes = match column.data_type() {
                DataType::Utf8 => column.as_string::<i32>().value_data().len(),
                DataType::Binary => column.as_binary::<i32>().value_data().len(),
                _ => 0,
            };
            // The next batch's builder, sized as this one.
            *b = ColBuilder::new(f, rows, bytes)?;
            columns.push(column);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(self.pending));
        let batch = RecordBatch::try_new_with_options(self.opts.schema.clone(), columns, &options)?;
        self.batches.push(batch);
        self.pending = 0;
        Ok(())
    }

    pub(super) fn finish(mut self) -> Result<AssembledRows> {
        self.flush()?;
        Ok(AssembledRows {
            batches: self.batches,
            malformed: self.malformed,
            dropped: self.dropped,
            files_read: self.files_read,
        })
    }
}

pub(crate) struct AssembledRows {
    pub batches: Vec<RecordBatch>,
    pub malformed: u64,
    pub dropped: u64,
    pub files_read: u64,
}

fn excerpt(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}...")
    }
}

fn failfast_error(rec: RecordRef<'_>, reason: &str) -> SluiceError {
    SluiceError::input(
        class::MALFORMED_RECORD_IN_PARSING_WITHOUT_SUGGESTION,
        format!(
            "Malformed records are detected in record parsing: line {} of {}: {reason}. Record: {:?}. The parse mode is \
             FAILFAST, which stops the query at the first malformed record; set the source \
             option mode to PERMISSIVE (malformed records become rows of nulls, with the raw \
             text in the `_corrupt_record` column if the schema has one) or DROPMALFORMED \
             (malformed records are dropped)",
            rec.line,
            rec.file,
            excerpt(rec.text, 200)
        ),
    )
}

/// Splits text in lines as Hadoop's `LineRecordReader` does: at `\n`, `\r\n` or `\r` (or at a
/// custom separator); a final terminator does not start an extra empty line. Calls
/// `f(line_number, line)`.
#[cfg(test)]
pub(crate) fn for_each_line<'t>(
    text: &'t str,
    line_sep: Option<&str>,
    f: impl FnMut(usize, &'t str) -> Result<()>,
) -> Result<()> {
    for_each_line_from(text, line_sep, 0, f).map(|_| ())
}

/// [`for_each_line`] for a piece of a file that starts after its line `before`: the first
/// line of `text` is line `before + 1`. Returns the number of the last line (`before` for an
/// empty text).
pub(crate) fn for_each_line_from<'t>(
    text: &'t str,
    line_sep: Option<&str>,
    before: usize,
    mut f: impl FnMut(usize, &'t str) -> Result<()>,
) -> Result<usize> {
    let mut n = before;
    for (start, end) in LineEnds::new(text.as_bytes(), line_sep.map(str::as_bytes)) {
        n += 1;
        f(n, &text[start..end])?;
    }
    Ok(n)
}

/// The number of lines [`for_each_line_from`] finds in `text` (the bytes of a piece), counted
/// without parsing them: a piece's first line number is the one after the pieces before it.
pub(crate) fn count_lines(text: &[u8], line_sep: Option<&[u8]>) -> usize {
    LineEnds::new(text, line_sep).count()
}

/// The lines of a text as Hadoop's `LineRecordReader` cuts them, as byte ranges (terminators
/// left out): at `\n`, `\r\n` or `\r`, or at a custom separator; a final terminator does not
/// start an extra empty line.
struct LineEnds<'t> {
    text: &'t [u8],
    sep: Option<&'t [u8]>,
    pos: usize,
}

impl<'t> LineEnds<'t> {
    fn new(text: &'t [u8], sep: Option<&'t [u8]>) -> Self {
        // An empty separator would match everywhere: Hadoop's line ends instead.
        let sep = sep.filter(|s| !s.is_empty());
        LineEnds { text, sep, pos: 0 }
    }
}

impl Iterator for LineEnds<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let (b, start) = (self.text, self.pos);
        if start >= b.len() {
            return None;
        }
        let (end, next) = match self.sep {
            Some(sep) => match memchr::memmem::find(&b[start..], sep) {
                Some(k) => (start + k, start + k + sep.len()),
                None => (b.len(), b.len()),
            },
            None => match memchr::memchr2(b'\n', b'\r', &b[start..]) {
                Some(k) => {
                    let end = start + k;
                    let crlf = b[end] == b'\r' && b.get(end + 1) == Some(&b'\n');
                    (end, end + 1 + usize::from(crlf))
                }
                None => (b.len(), b.len()),
            },
        };
        self.pos = next;
        Some((start, end))
    }
}

/// Where a piece of a file's text stands in its file, and the state a reader carries from one
/// piece of the file to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PieceState {
    /// Lines of the file before the piece (its first line is line `lines_before + 1`).
    pub lines_before: usize,
    /// CSV `header=true`: the file's header line has not been seen yet.
    pub header_pending: bool,
}

impl PieceState {
    pub(crate) fn file_start(header: bool) -> Self {
        PieceState {
            lines_before: 0,
            header_pending: header,
        }
    }
}

/// What to say when a file listed for reading has vanished.
pub(crate) fn file_not_found(uri: &str, context: &str) -> SluiceError {
    SluiceError::input(
        class::FILE_NOT_FOUND,
        format!(
            "the file {uri} does not exist any more, but it is part of {context}. Files must \
             not be deleted or moved out of a streaming source directory before the query has \
             processed them: restore the file, set the option ignoreMissingFiles=true to skip \
             missing files, or restart the query with a new checkpoint location"
        ),
    )
}

/// Reads `files` (URIs, in order) into rows, decoding on up to `available_parallelism` threads:
/// each thread takes a contiguous run of files with its own [`Assembler`], and the results are
/// put back together in file order, so the rows (and the first error, for FAILFAST) are the
/// same as reading the files one after another.
pub(crate) fn read_files_parallel(
    opts: &ParseOptions,
    files: &[&str],
    context: &str,
    to_path: impl Fn(&str) -> PathBuf + Sync,
) -> Result<AssembledRows> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(files.len()).max(1);
    // Fewer files than cores: each file's pieces are parsed on the cores left over.
    let fan_out = (cores / threads).max(1);
    let read_run = |run: &[&str]| -> Result<AssembledRows> {
        let mut asm = Assembler::new(opts)?;
        for uri in run {
            read_file_into(&to_path(uri), uri, context, &mut asm, fan_out)?;
        }
        asm.finish()
    };
    if threads == 1 {
        return read_run(files);
    }
    // Contiguous runs of about equal size.
    let per = files.len().div_ceil(threads);
    let panicked = format!("a file decoding thread panicked while reading {context}");
    let results = on_threads(files.chunks(per), &panicked, |_, run| read_run(run));
    let mut all = AssembledRows {
        batches: Vec::new(),
        malformed: 0,
        dropped: 0,
        files_read: 0,
    };
    for r in results {
        let r = r?;
        all.batches.extend(r.batches);
        all.malformed += r.malformed;
        all.dropped += r.dropped;
        all.files_read += r.files_read;
    }
    Ok(all)
}

/// Reads one file into `asm`. `uri` names the file in messages; `context` says what the file
/// is part of (e.g. "batch range (2, 3] of FileStreamSource[file:/in]").
#[cfg(test)]
pub(crate) fn read_file(
    path: &Path,
    uri: &str,
    context: &str,
    asm: &mut Assembler<'_>,
) -> Result<()> {
    read_file_into(path, uri, context, asm, 1)
}

/// Reads one file into `asm` (`uri` names it in messages, `context` says what it is part of),
/// `fan_out` pieces at a time.
fn read_file_into(
    path: &Path,
    uri: &str,
    context: &str,
    asm: &mut Assembler<'_>,
    fan_out: usize,
) -> Result<()> {
    if let Some(mut file) = FileReader::open(asm.opts, path, uri, context, CHUNK_BYTES) {
        while file.step(asm, fan_out)? {}
    }
    Ok(())
}

/// How much file text a read holds at a time (a longer record is held whole).
pub(crate) const CHUNK_BYTES: usize = 8 << 20;

/// Counters a lazy read fills in as it produces batches (read them after the iterator ended).
#[derive(Debug, Default)]
pub(crate) struct ReadCounters {
    /// Rows in the batches returned.
    pub rows: AtomicU64,
    /// As [`AssembledRows::malformed`].
    pub malformed: AtomicU64,
    /// As [`AssembledRows::dropped`].
    pub dropped: AtomicU64,
    /// As [`AssembledRows::files_read`].
    pub files_read: AtomicU64,
}

/// Reads `files` (URIs, in order) lazily: the same rows, in the same order, with the same
/// errors, bad-record counts and `ignoreMissingFiles` / `ignoreCorruptFiles` behaviour as
/// [`read_file`] over each file in turn, but holding about `chunk_bytes` of file text at a time
/// (a record longer than that is held whole; the formats that parse a file as one document,
/// JSON and CSV with `multiLine`, text with `wholetext`, hold one file). Parquet files give
/// their batches as the reader decodes them. Each batch has at most [`BATCH_ROWS`] rows and
/// comes from one piece of one file. After an error the iterator ends.
pub(crate) fn read_files_lazy(
    opts: Arc<ParseOptions>,
    files: Vec<String>,
    context: String,
    to_path: fn(&str) -> PathBuf,
    chunk_bytes: usize,
    fan_out: usize,
    counters: Arc<ReadCounters>,
) -> Box<dyn Iterator<Item = Result<RecordBatch>> + Send> {
    Box::new(LazyRead {
        opts,
        files: files.into_iter(),
        context,
        to_path,
        chunk_bytes,
        fan_out,
        counters,
        current: None,
        ready: VecDeque::new(),
        ended: false,
    })
}

struct LazyRead {
    opts: Arc<ParseOptions>,
    files: std::vec::IntoIter<String>,
    context: String,
    to_path: fn(&str) -> PathBuf,
    chunk_bytes: usize,
    /// How many pieces of a line-based file are parsed at a time (on threads of their own).
    fan_out: usize,
    counters: Arc<ReadCounters>,
    /// The file being read.
    current: Option<FileReader>,
    /// Batches of the last piece read, not returned yet.
    ready: VecDeque<RecordBatch>,
    /// All files read, or an error returned.
    ended: bool,
}

impl LazyRead {
    /// Reads the next piece of the current file (or opens the next file) into `ready`; false
    /// when every file was read.
    fn advance(&mut self) -> Result<bool> {
        let opts = self.opts.clone();
        let mut asm = Assembler::new(&opts)?;
        match &mut self.current {
            Some(file) => {
                if !file.step(&mut asm, self.fan_out)? {
                    self.current = None;
                }
            }
            None => {
                let Some(uri) = self.files.next() else {
                    return Ok(false);
                };
                let path = (self.to_path)(&uri);
                self.current =
                    FileReader::open(&opts, &path, &uri, &self.context, self.chunk_bytes);
            }
        }
        let out = asm.finish()?;
        let c = &self.counters;
        c.malformed.fetch_add(out.malformed, Ordering::Relaxed);
        c.dropped.fetch_add(out.dropped, Ordering::Relaxed);
        c.files_read.fetch_add(out.files_read, Ordering::Relaxed);
        self.ready.extend(out.batches);
        Ok(true)
    }
}

impl Iterator for LazyRead {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                self.counters
                    .rows
                    .fetch_add(b.num_rows() as u64, Ordering::Relaxed);
                return Some(Ok(b));
            }
            if self.ended {
                return None;
            }
            match self.advance() {
                Ok(true) => {}
                Ok(false) => {
                    self.ended = true;
                    return None;
                }
                Err(e) => {
                    self.ended = true;
                    self.current = None;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// One file being read, a piece at a time.
struct FileReader {
    uri: String,
    context: String,
    kind: FileKind,
}

enum FileKind {
    /// Lines, a piece of about `chunk_bytes` at a time.
    Lines(Box<LineReader>),
    /// A file parsed as one document (JSON and CSV with `multiLine`, text with `wholetext`).
    Whole(TextSource),
    /// Parquet batches, and whether the file was counted as read.
    Parquet(Box<parquet::ParquetFile>, bool),
    /// A file that could not be opened: the error, at the first step.
    Failed(SluiceError),
    Done,
}

/// What opening a file failed with: a missing file, or another error.
fn open_failed(opts: &ParseOptions, uri: &str, context: &str, e: std::io::Error) -> Result<()> {
    if e.kind() == ErrorKind::NotFound {
        if opts.ignore_missing_files {
            log::warn!("skipping the missing file {uri} (ignoreMissingFiles=true)");
            return Ok(());
        }
        return Err(file_not_found(uri, context));
    }
    unreadable(opts, uri, context, e)
}

/// A file that could not be read (not a decoding error): skipped with `ignoreCorruptFiles`.
fn unreadable(opts: &ParseOptions, uri: &str, context: &str, e: std::io::Error) -> Result<()> {
    if opts.ignore_corrupt_files {
        log::warn!("skipping the unreadable file {uri}: {e} (ignoreCorruptFiles=true)");
        return Ok(());
    }
    Err(SluiceError::io(
        Fault::Connector,
        format!(
            "reading {uri}, part of {context} (make the file readable, or set the option \
             ignoreCorruptFiles=true to skip files that cannot be read)"
        ),
        e,
    ))
}

impl FileReader {
    /// Opens a file of `opts`'s format. A file that cannot be opened gives a reader that fails
    /// at its first step (or, when the options skip such files, that reads nothing).
    fn open(
        opts: &ParseOptions,
        path: &Path,
        uri: &str,
        context: &str,
        chunk_bytes: usize,
    ) -> Option<FileReader> {
        let kind = match &opts.kind {
            FormatKind::Parquet => match parquet::open(opts, path, uri, context) {
                Ok(Some(f)) => FileKind::Parquet(Box::new(f), false),
                Ok(None) => return None,
                Err(e) => FileKind::Failed(e),
            },
            _ => match TextSource::open(path) {
                Ok(src) => {
                    let whole = match &opts.kind {
                        FormatKind::Json(j) => j.multi_line,
                        FormatKind::Csv(c) => c.multi_line,
                        FormatKind::Text(t) => t.whole_text,
                        FormatKind::Parquet => true,
                    };
                    if whole {
                        FileKind::Whole(src)
                    } else {
                        FileKind::Lines(Box::new(LineReader::new(opts, src, chunk_bytes)))
                    }
                }
                Err(e) => match open_failed(opts, uri, context, e) {
                    Ok(()) => return None,
                    Err(e) => FileKind::Failed(e),
                },
            },
        };
        Some(FileReader {
            uri: uri.to_string(),
            context: context.to_string(),
            kind,
        })
    }

    /// Reads the next piece of the file into `asm`; false once the file has been read (its
    /// last piece may have been read by this call).
    /// With `fan_out` > 1, a line-based file parses that many pieces at a time.
    fn step(&mut self, asm: &mut Assembler<'_>, fan_out: usize) -> Result<bool> {
        let opts = asm.opts;
        let (uri, context) = (self.uri.as_str(), self.context.as_str());
        match std::mem::replace(&mut self.kind, FileKind::Done) {
            FileKind::Done => Ok(false),
            FileKind::Failed(e) => Err(e),
            FileKind::Parquet(mut f, counted) => {
                if !counted {
                    asm.files_read += 1;
                }
                match f.next_batch()? {
                    Some(batch) => {
                        asm.push_batch(batch)?;
                        self.kind = FileKind::Parquet(f, true);
                        Ok(true)
                    }
                    None => Ok(false),
                }
            }
            FileKind::Whole(mut src) => {
                let mut bytes = Vec::new();
                if let Err(e) = src.reader.read_to_end(&mut bytes) {
                    if !src.is_damage() {
                        unreadable(opts, uri, context, e)?;
                        return Ok(false);
                    }
                    src.keep_damaged(opts, uri, &e)?;
                    // Nothing of a document before its damaged part is kept.
                    bytes.clear();
                }
                asm.files_read += 1;
                let bytes = bytes.strip_prefix(BOM).unwrap_or(&bytes);
                let text = utf8_lossy(bytes);
                // A CSV file parsed whole (multiLine) still starts with its header.
                let header = matches!(&opts.kind, FormatKind::Csv(c) if c.header);
                parse_piece(&text, uri, asm, &mut PieceState::file_start(header))?;
                Ok(false)
            }
            FileKind::Lines(mut lines) => {
                let more = lines.step(uri, context, asm, fan_out)?;
                if more {
                    self.kind = FileKind::Lines(lines);
                }
                Ok(more)
            }
        }
    }
}

/// The text of `bytes`, each invalid UTF-8 sequence replaced by U+FFFD (as
/// `String::from_utf8_lossy`), validated with SIMD first: nearly all input is valid.
pub(crate) fn utf8_lossy(bytes: &[u8]) -> Cow<'_, str> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Parses text of `asm`'s (text) format: a piece of a file or a whole file.
fn parse_piece(text: &str, uri: &str, asm: &mut Assembler<'_>, at: &mut PieceState) -> Result<()> {
    let opts = asm.opts;
    match &opts.kind {
        FormatKind::Json(j) => json::read_piece(text, uri, j, asm, at),
        FormatKind::Csv(c) => csv::read_piece(text, uri, c, asm, at),
        FormatKind::Text(t) if t.whole_text => asm.text_row(text),
        FormatKind::Text(t) => {
            at.lines_before =
                for_each_line_from(text, t.line_sep.as_deref(), at.lines_before, |_, line| {
                    asm.text_row(line)
                })?;
            Ok(())
        }
        FormatKind::Parquet => Ok(()),
    }
}

/// The UTF-8 byte order mark, dropped at the start of a file.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// A file's bytes, decompressed when its extension names a codec.
struct TextSource {
    reader: Box<dyn Read + Send>,
    codec: Option<super::compression::Codec>,
    /// Set when reading the file itself failed (rather than decoding it).
    file_failed: Arc<AtomicBool>,
}

/// A reader that notes its failures (to tell a file that cannot be read from a damaged one).
struct NoteFailure<R> {
    inner: R,
    failed: Arc<AtomicBool>,
}

impl<R: Read> Read for NoteFailure<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let r = self.inner.read(buf);
        if matches!(&r, Err(e) if e.kind() != ErrorKind::Interrupted) {
            self.failed.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl TextSource {
    fn open(path: &Path) -> std::io::Result<TextSource> {
        let file = crate::storage::open(path)?;
        let file_failed = Arc::new(AtomicBool::new(false));
        let raw = NoteFailure {
            inner: file,
            failed: file_failed.clone(),
        };
        // gzip, bzip2, zstd, .. by the file's extension, as Hadoop's codec factory picks them.
        let codec = super::compression::Codec::of(path);
        let reader: Box<dyn Read + Send> = match codec {
            Some(c) => c.reader(Box::new(raw)),
            None => Box::new(raw),
        };
        Ok(TextSource {
            reader,
            codec,
            file_failed,
        })
    }

    /// Whether the error reading failed with was the decoder's (a damaged compressed file),
    /// not the file's own.
    fn is_damage(&self) -> bool {
        self.codec.is_some() && !self.file_failed.load(Ordering::Relaxed)
    }

    /// Decoding failed with `e`: the error, or with `ignoreCorruptFiles` a warning (the records
    /// before the damaged part are kept, as Spark keeps them, and the rest of the file skipped).
    fn keep_damaged(&self, opts: &ParseOptions, uri: &str, e: &std::io::Error) -> Result<()> {
        let Some(codec) = self.codec else {
            return Err(SluiceError::internal(format!(
                "{uri}: a decoding error without a codec"
            )));
        };
        let err = codec.damaged(uri, e);
        if !opts.ignore_corrupt_files {
            return Err(err);
        }
        log::warn!(
            "{} (ignoreCorruptFiles=true: keeping the records before the damaged part)",
            err.message()
        );
        Ok(())
    }
}

/// Text buffers of line-based reads that ended, for the next reads: a buffer used again is not
/// faulted in and zeroed by the kernel again (that was a tenth of a read's time). At most two
/// per core (a reader holds its piece and the next), each about a piece of the memory budget.
static TEXT_BUFFERS: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// An empty text buffer, one used before if there is one.
fn text_buffer() -> Vec<u8> {
    TEXT_BUFFERS.lock_unpoisoned().pop().unwrap_or_default()
}

/// The largest text buffer kept: twice the largest piece (a buffer grown for a record longer
/// than that is given back to the allocator).
const MAX_KEPT_TEXT_BUFFER: usize = 128 << 20;

/// Keeps `buf` for a later read, if fewer than two per core are kept.
fn keep_text_buffer(mut buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > MAX_KEPT_TEXT_BUFFER {
        return;
    }
    buf.clear();
    let most = 2 * std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut kept = TEXT_BUFFERS.lock_unpoisoned();
    if kept.len() < most {
        kept.push(buf);
    }
}

impl Drop for LineReader {
    fn drop(&mut self) {
        keep_text_buffer(std::mem::take(&mut self.buf));
        keep_text_buffer(std::mem::take(&mut self.spare));
    }
}

/// A line-based file read a piece at a time: the bytes are read into a buffer of about
/// `chunk_bytes`, and the whole lines in it are parsed while the rest (a line cut off) waits for
/// the next piece. Pieces end right after a line terminator, so they split neither a `\r\n`,
/// nor a custom `lineSep`, nor a UTF-8 character.
struct LineReader {
    src: TextSource,
    /// A custom line separator (`lineSep`), else Hadoop's `\n`, `\r\n` and `\r`.
    sep: Option<Vec<u8>>,
    chunk_bytes: usize,
    /// How many bytes to read before cutting a piece (more when a line is longer).
    target: usize,
    buf: Vec<u8>,
    /// An empty buffer to read the next piece into (the last piece's, once parsed).
    spare: Vec<u8>,
    /// How much of `buf` was searched for line ends.
    scanned: usize,
    /// The end of the last whole line found in `buf` (0: none).
    cut: usize,
    /// The byte order mark was dealt with.
    started: bool,
    eof: bool,
    /// Some of the file was parsed already.
    parsed: bool,
    at: PieceState,
}

impl LineReader {
    fn new(opts: &ParseOptions, src: TextSource, chunk_bytes: usize) -> Self {
        let (sep, header) = match &opts.kind {
            FormatKind::Json(j) => (j.line_sep.clone(), false),
            FormatKind::Csv(c) => (c.line_sep.clone(), c.header),
            FormatKind::Text(t) => (t.line_sep.clone(), false),
            FormatKind::Parquet => (None, false),
        };
        let chunk_bytes = chunk_bytes.max(1);
        LineReader {
            src,
            sep: sep.map(String::into_bytes),
            chunk_bytes,
            target: chunk_bytes,
            buf: text_buffer(),
            spare: Vec::new(),
            scanned: 0,
            cut: 0,
            started: false,
            eof: false,
            parsed: false,
            at: PieceState::file_start(header),
        }
    }

    /// Reads and parses the next piece; false once the file has ended.
    /// Reads and parses the next piece, or (`fan_out` > 1) up to `fan_out` pieces at the same
    /// time on threads of their own, each from the line the one before it ends at (counted
    /// before parsing: [`count_lines`]); false once the file has ended. The rows, counts and
    /// first error are those of parsing the pieces one after another.
    fn step(
        &mut self,
        uri: &str,
        context: &str,
        asm: &mut Assembler<'_>,
        fan_out: usize,
    ) -> Result<bool> {
        // A CSV header still to come is found by parsing: pieces after it may fan out.
        if fan_out <= 1 || self.at.header_pending || self.sep.as_ref().is_some_and(Vec::is_empty) {
            return match self.next_piece(uri, context, asm)? {
                Some((piece, more)) => {
                    self.parse(piece, uri, asm)?;
                    Ok(more)
                }
                None => Ok(false),
            };
        }
        let mut pieces: Vec<(Vec<u8>, PieceState)> = Vec::with_capacity(fan_out);
        let mut more = true;
        let mut cut_error = None;
        while more && pieces.len() < fan_out {
            match self.next_piece(uri, context, asm) {
                Ok(Some((piece, m))) => {
                    let at = self.at;
                    self.at.lines_before += count_lines(&piece, self.sep.as_deref());
                    pieces.push((piece, at));
                    more = m;
                }
                Ok(None) => more = false,
                Err(e) => {
                    // The pieces cut before the error are parsed first (their errors come
                    // first, as they would one piece at a time).
                    cut_error = Some(e);
                    more = false;
                }
            }
        }
        let opts = asm.opts;
        let parse_one = |piece: &[u8], mut at: PieceState| -> Result<(AssembledRows, usize)> {
            let mut part = Assembler::new(opts)?;
            parse_piece(&utf8_lossy(piece), uri, &mut part, &mut at)?;
            Ok((part.finish()?, at.lines_before))
        };
        let panicked = format!("a thread parsing a piece of {uri} panicked");
        let parsed = on_threads(pieces.iter(), &panicked, |_, (p, at)| parse_one(p, *at));
        for (i, result) in parsed.into_iter().enumerate() {
            let (rows, lines_after) = result?;
            let expected = match pieces.get(i + 1) {
                Some((_, next)) => next.lines_before,
                None => self.at.lines_before,
            };
            if lines_after != expected {
                return Err(SluiceError::internal(format!(
                    "{uri}: a piece parsed to line {lines_after}, but {expected} lines were \
                     counted in it"
                )));
            }
            asm.absorb(rows)?;
        }
        let mut buffers = pieces.into_iter().map(|(buf, _)| buf);
        if let Some(mut buf) = buffers.next() {
            buf.clear();
            self.spare = buf;
        }
        buffers.for_each(keep_text_buffer);
        match cut_error {
            Some(e) => Err(e),
            None => Ok(more),
        }
    }

    /// Cuts the next piece off the file: the piece and whether the file goes on after it, or
    /// None when the file ended without another piece (an unreadable part skipped).
    fn next_piece(
        &mut self,
        uri: &str,
        context: &str,
        asm: &mut Assembler<'_>,
    ) -> Result<Option<(Vec<u8>, bool)>> {
        loop {
            if self.cut > 0 && self.buf.len() >= self.target && !self.eof {
                // The cut-off line starts the next piece's buffer (of its full size, read into
                // without moving).
                let mut rest = std::mem::take(&mut self.spare);
                if rest.capacity() == 0 {
                    rest = text_buffer();
                }
                rest.reserve(self.chunk_bytes.max(self.buf.len() - self.cut));
                rest.extend_from_slice(&self.buf[self.cut..]);
                self.buf.truncate(self.cut);
                let piece = std::mem::replace(&mut self.buf, rest);
                self.scanned -= self.cut;
                self.cut = 0;
                self.target = self.chunk_bytes;
                self.parsed = true;
                return Ok(Some((piece, true)));
            }
            if self.eof {
                // The last piece: the rest of the file.
                let piece = std::mem::take(&mut self.buf);
                asm.files_read += 1;
                self.parsed = true;
                return Ok(Some((piece, false)));
            }
            if self.buf.len() >= self.target {
                // No whole line yet: a record longer than a piece is read whole.
                self.target = self.buf.len() + self.chunk_bytes;
            }
            if let Err(e) = self.fill() {
                self.begin(true);
                let opts = asm.opts;
                if !self.src.is_damage() {
                    if self.parsed && opts.ignore_corrupt_files {
                        // What was parsed stays (rows may be out already).
                        log::warn!(
                            "stopping at an unreadable part of {uri}: {e} \
                             (ignoreCorruptFiles=true: keeping the records read before it)"
                        );
                        asm.files_read += 1;
                        return Ok(None);
                    }
                    // A file that cannot be read is skipped whole, or an error.
                    unreadable(opts, uri, context, e)?;
                    return Ok(None);
                }
                self.src.keep_damaged(opts, uri, &e)?;
                // The whole lines before the damaged part. (The whole-file reader kept the text
                // up to the last `\n`: the same lines, unless lines end with a lone `\r` or a
                // custom `lineSep` after the last `\n`, which are now kept too, as Spark does.)
                self.buf.truncate(self.cut);
                let piece = std::mem::take(&mut self.buf);
                asm.files_read += 1;
                self.parsed = true;
                return Ok(Some((piece, false)));
            }
            self.begin(false);
        }
    }

    /// Parses a piece, then keeps its buffer for the next one.
    fn parse(&mut self, mut piece: Vec<u8>, uri: &str, asm: &mut Assembler<'_>) -> Result<()> {
        let parsed = parse_piece(&utf8_lossy(&piece), uri, asm, &mut self.at);
        piece.clear();
        self.spare = piece;
        parsed
    }

    /// Reads into `buf` until it holds `target` bytes or the file ends (`eof`). On an error,
    /// the bytes read before it are in `buf`.
    fn fill(&mut self) -> std::io::Result<()> {
        let want = self.target.saturating_sub(self.buf.len()).max(1);
        let n = (&mut self.src.reader)
            .take(want as u64)
            .read_to_end(&mut self.buf)?;
        if n < want {
            self.eof = true;
        }
        Ok(())
    }

    /// Drops the byte order mark once the file's first bytes are in (or all of them, `all_in`),
    /// then finds line ends.
    fn begin(&mut self, all_in: bool) {
        if !self.started {
            if self.buf.len() < BOM.len() && !self.eof && !all_in {
                return;
            }
            self.started = true;
            if self.buf.starts_with(BOM) {
                self.buf.drain(..BOM.len());
            }
        }
        self.scan();
    }

    /// Finds the end of the last whole line in `buf` (past what was searched before).
    fn scan(&mut self) {
        let b = &self.buf;
        match &self.sep {
            // Separators are found left to right, as `for_each_line` splits: the search goes on
            // from the end of the last one found.
            Some(sep) => {
                let Some(&first) = sep.first() else {
                    return;
                };
                let mut i = self.scanned;
                while i + sep.len() <= b.len() {
                    match b[i..=b.len() - sep.len()].iter().position(|&c| c == first) {
                        None => {
                            i = b.len() + 1 - sep.len();
                            break;
                        }
                        Some(k) => {
                            let at = i + k;
                            if b[at..].starts_with(sep) {
                                self.cut = at + sep.len();
                                i = self.cut;
                            } else {
                                i = at + 1;
                            }
                        }
                    }
                }
                self.scanned = self.scanned.max(i.min(b.len()));
            }
            // `\n`, `\r\n` or `\r`: the last one ends the last whole line, but a `\r` at the
            // end may be the start of a `\r\n`.
            None => {
                let end = if b.last() == Some(&b'\r') {
                    b.len() - 1
                } else {
                    b.len()
                };
                if let Some(k) = b[self.scanned.min(end)..end]
                    .iter()
                    .rposition(|&c| c == b'\n' || c == b'\r')
                {
                    self.cut = self.scanned.min(end) + k + 1;
                }
                self.scanned = end;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Value conversions shared by the JSON and CSV readers.

/// `new java.math.BigDecimal(s)` then `setScale(scale, HALF_UP)` and a precision check, as
/// Spark's `Decimal(bigDecimal, precision, scale)`: the unscaled value, or None.
pub(crate) fn parse_decimal(s: &str, precision: u8, scale: i8) -> Option<i128> {
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
pub(crate) fn parse_java_double(s: &str) -> Option<f64> {
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
pub(crate) fn parse_java_float(s: &str) -> Option<f32> {
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

pub(crate) use crate::value_text::java_double_to_string;

/// The value of a JSON/CSV string for DATE/TIMESTAMP/DECIMAL columns (shared rules).
pub(crate) fn convert_temporal_or_decimal<'a>(
    s: &str,
    dt: &DataType,
    datetime: &super::datetime::DatetimeFormats,
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

#[cfg(test)]
mod lazy_tests;

#[cfg(test)]
pub(crate) mod test_util {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{
        Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
        Int8Type, TimestampMicrosecondType,
    };
    use serde_json::{json, Value};

    use super::*;

    /// The rows of batches as JSON values (timestamps as micros, dates as days).
    pub(crate) fn rows(batches: &[RecordBatch]) -> Vec<Vec<Value>> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_round_half_up_and_check_precision() {
        assert_eq!(parse_decimal("12.345", 10, 2), Some(1235));
        assert_eq!(parse_decimal("-12.345", 10, 2), Some(-1235));
        assert_eq!(parse_decimal("12.344", 10, 2), Some(1234));
        assert_eq!(parse_decimal("2.675", 10, 2), Some(268));
        assert_eq!(parse_decimal("1e3", 10, 2), Some(100_000));
        assert_eq!(parse_decimal("0.004", 10, 2), Some(0));
        assert_eq!(parse_decimal("0.005", 10, 2), Some(1));
        assert_eq!(parse_decimal(".5", 3, 0), Some(1));
        assert_eq!(parse_decimal("5.", 3, 0), Some(5));
        assert_eq!(parse_decimal("000123", 3, 0), Some(123));
        assert_eq!(parse_decimal("1234", 3, 0), None);
        assert_eq!(parse_decimal("999.995", 5, 2), None);
        assert!(parse_decimal("99999999999999999999999999999999999999", 38, 0).is_some());
        assert_eq!(parse_decimal("1e400", 38, 0), None);
        assert_eq!(parse_decimal("1e-400", 38, 2), Some(0));
        for bad in ["", "-", "1.2.3", "abc", " 1", "1e", "0x10"] {
            assert_eq!(parse_decimal(bad, 10, 2), None, "{bad}");
        }
    }

    #[test]
    fn java_number_text() {
        assert_eq!(java_double_to_string(1.5), "1.5");
        assert_eq!(java_double_to_string(100.0), "100.0");
        assert_eq!(java_double_to_string(1e10), "1.0E10");
        assert_eq!(java_double_to_string(1.25e-5), "1.25E-5");
        assert_eq!(java_double_to_string(1234567.0), "1234567.0");
        assert_eq!(java_double_to_string(0.001), "0.001");
        assert_eq!(parse_java_double(" 1.5d "), Some(1.5));
        assert_eq!(parse_java_double("-Infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_java_double("1e3"), Some(1000.0));
        assert_eq!(parse_java_double("abc"), None);
        assert_eq!(parse_java_double("inf"), None);
        assert_eq!(parse_java_double(""), None);
        assert_eq!(parse_java_float("2.5f"), Some(2.5));
    }

    #[test]
    fn lines_split_like_hadoop() {
        let mut got = Vec::new();
        for_each_line("a\r\nb\rc\n\nd", None, |n, l| {
            got.push((n, l.to_string()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            got,
            vec![
                (1, "a".into()),
                (2, "b".into()),
                (3, "c".into()),
                (4, "".into()),
                (5, "d".into())
            ]
        );
        let mut got = Vec::new();
        for_each_line("a\nb\n", None, |_, l| {
            got.push(l.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!(got, vec!["a", "b"]);
        let mut got = Vec::new();
        for_each_line("a||b||", Some("||"), |_, l| {
            got.push(l.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!(got, vec!["a", "b"]);
    }
}

/// Parses one JSON document per element with Spark's `from_json` rules (PERMISSIVE: a malformed
/// document or a wrongly typed field gives nulls, never an error). `None` gives a null row.
/// Returns the rows in the nullable `schema`, one per document.
pub fn parse_json_documents(docs: &[Option<&str>], schema: &SchemaRef) -> Result<RecordBatch> {
    let dt = DataType::Struct(schema.fields().clone());
    let arr = parse_json_values(docs, &dt, &std::collections::HashMap::new())?;
    let s = arr.as_struct();
    Ok(RecordBatch::try_new_with_options(
        nullable_schema(schema),
        s.columns().to_vec(),
        &RecordBatchOptions::new().with_row_count(Some(docs.len())),
    )?)
}

/// Parses one JSON document per element into a value of type `dt` (a struct, array, map or
/// scalar), as Spark's `from_json(doc, type, options)`: the reader's `options` (`mode`,
/// `allowSingleQuotes`, datetime patterns, ...) apply; in PERMISSIVE mode a malformed document
/// gives a struct of nulls (a null for other types). A struct never comes out null for a
/// non-null document: the caller sets the nulls of `None` documents.
pub(crate) fn parse_json_values(
    docs: &[Option<&str>],
    dt: &DataType,
    options: &std::collections::HashMap<String, String>,
) -> Result<ArrayRef> {
    let mut o = options.clone();
    o.insert("multiLine".to_string(), "true".to_string());
    let (schema, wrap) = match dt {
        DataType::Struct(fs) => (Arc::new(Schema::new(fs.clone())), false),
        other => (
            Arc::new(Schema::new(vec![Field::new("value", other.clone(), true)])),
            true,
        ),
    };
    let opts = ParseOptions::new("json", &schema, &Options::new(&o))?;
    let FormatKind::Json(j) = &opts.kind else {
        return Err(SluiceError::internal("from_json options"));
    };
    let j = j.clone();
    let mut asm = Assembler::new(&opts)?;
    let mut wrapped = String::new();
    for d in docs {
        // An empty document is malformed: a row of nulls, like a null input. A struct is read
        // from an object only (an array of objects is one row per object in files).
        let text = d
            .map(str::trim)
            .filter(|s| !s.is_empty() && (wrap || !s.starts_with('[')))
            .unwrap_or("null");
        if wrap {
            // One field holding the value: `{"value": <doc>}`; for an array of structs, one
            // object is an array of one (Spark's `from_json`).
            let one_object = text.starts_with('{')
                && matches!(dt, DataType::List(f) if matches!(f.data_type(), DataType::Struct(_)));
            wrapped.clear();
            wrapped.push_str(if one_object {
                "{\"value\":["
            } else {
                "{\"value\":"
            });
            wrapped.push_str(text);
            wrapped.push_str(if one_object { "\n]}" } else { "\n}" });
            json::read(&wrapped, "from_json", &j, &mut asm)?;
        } else {
            json::read(text, "from_json", &j, &mut asm)?;
        }
    }
    let rows = asm.finish()?;
    let batch = arrow::compute::concat_batches(&opts.schema, &rows.batches)?;
    if batch.num_rows() != docs.len() {
        return Err(SluiceError::internal(format!(
            "from_json read {} rows from {} documents",
            batch.num_rows(),
            docs.len()
        )));
    }
    Ok(if wrap {
        batch.column(0).clone()
    } else {
        let fields = match nested::nullable_type(dt) {
            DataType::Struct(fs) => fs,
            _ => schema.fields().clone(),
        };
        Arc::new(arrow::array::StructArray::try_new(
            fields,
            batch.columns().to_vec(),
            None,
        )?)
    })
}

/// Parses `text` as one file of `format` (`json` lines or `csv` with a header) in PERMISSIVE
/// mode (fuzzing entry point).
pub(crate) fn fuzz_text(format: &str, text: &str, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut o = std::collections::HashMap::new();
    if format == "csv" {
        o.insert("header".to_string(), "true".to_string());
    }
    let opts = ParseOptions::new(format, schema, &Options::new(&o))?;
    let mut asm = Assembler::new(&opts)?;
    match &opts.kind {
        FormatKind::Json(j) => json::read(text, "fuzz", &j.clone(), &mut asm)?,
        FormatKind::Csv(c) => csv::read(text, "fuzz", &c.clone(), &mut asm)?,
        _ => {}
    }
    let rows = asm.finish()?;
    Ok(arrow::compute::concat_batches(&opts.schema, &rows.batches)?)
}
