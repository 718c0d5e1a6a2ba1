//! Spark's text record parsers: JSON and CSV records (and text lines) into Arrow rows, with
//! Spark's rules: the parse modes (`PERMISSIVE`/`DROPMALFORMED`/`FAILFAST`), the corrupt-record
//! column, Spark's datetime patterns and Java's number forms. The file source reads files
//! through them (the engine's `source::file`), and so do `from_json`, `from_csv` and the
//! string-to-date/timestamp casts.
//!
//! A reader turns each record into one [`Cell`] per data column, plus whether the record was
//! bad: *malformed* (it could not be parsed at all: a row of nulls in PERMISSIVE mode) or
//! *partial* (some fields could not be converted to their type: those fields are null, the
//! rest of the row stays in PERMISSIVE mode). In DROPMALFORMED mode both kinds are dropped and
//! in FAILFAST mode both fail the query, as in Spark's `FailureSafeParser`. An [`Assembler`]
//! collects the cells into record batches.

pub mod csv;
pub mod datetime;
pub mod json;
pub mod nested;
pub mod options;

use crate::error::class;

use std::borrow::Cow;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, AsArray, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder,
    Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder, Int8Builder,
    RecordBatch, RecordBatchOptions, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use self::options::Options;
use crate::error::{Result, SluiceError};
use crate::schema::spark_type_name;

/// Rows per record batch produced by the readers.
pub const BATCH_ROWS: usize = 8192;

/// How bad records are handled (Spark's `mode` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseMode {
    /// `PERMISSIVE` (the default): a bad record is a row of nulls (or its bad fields null), counted.
    Permissive,
    /// `DROPMALFORMED`: a bad record is dropped, counted.
    DropMalformed,
    /// `FAILFAST`: a bad record fails the query, naming its file and line.
    FailFast,
}

/// JSON reader options (Spark's `JSONOptions` that matter when a schema is given).
#[derive(Debug, Clone)]
pub struct JsonOptions {
    /// `multiLine`: a file is one document (or an array of them), not JSON lines.
    pub multi_line: bool,
    /// `allowSingleQuotes` (default true).
    pub allow_single_quotes: bool,
    /// `allowNonNumericNumbers`: `NaN`, `Infinity`, `-Infinity` (default true).
    pub allow_non_numeric_numbers: bool,
    /// `allowComments`: Java/C++ comments.
    pub allow_comments: bool,
    /// `allowUnquotedFieldNames`.
    pub allow_unquoted_field_names: bool,
    /// `allowNumericLeadingZeros`.
    pub allow_numeric_leading_zeros: bool,
    /// `allowUnquotedControlChars`.
    pub allow_unquoted_control_chars: bool,
    /// `allowBackslashEscapingAnyCharacter`.
    pub allow_backslash_escaping_any_character: bool,
    /// `lineSep`: the record separator (none: `\n`, `\r\n` or `\r`).
    pub line_sep: Option<String>,
    /// `timestampFormat`, `dateFormat`, `timestampNTZFormat`, `enableDateTimeParsingFallback`.
    pub datetime: datetime::DatetimeFormats,
}

/// CSV reader options (Spark's `CSVOptions`).
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// `header`: the first line of each file names the columns.
    pub header: bool,
    /// `sep` / `delimiter` (default `,`).
    pub sep: u8,
    /// 0: no quoting.
    pub quote: u8,
    /// 0: no escape character.
    pub escape: u8,
    /// 0: none.
    pub escape_escape: u8,
    /// `comment`: lines starting with this character are skipped.
    pub comment: Option<u8>,
    /// `nullValue`: the text of a null (default empty).
    pub null_value: String,
    /// `emptyValue`: the text of an empty string.
    pub empty_value: String,
    /// `nanValue` (default `NaN`).
    pub nan_value: String,
    /// `positiveInf` (default `Inf`).
    pub positive_inf: String,
    /// `negativeInf` (default `-Inf`).
    pub negative_inf: String,
    /// `ignoreLeadingWhiteSpace`.
    pub ignore_leading_ws: bool,
    /// `ignoreTrailingWhiteSpace`.
    pub ignore_trailing_ws: bool,
    /// `enforceSchema=false`: each file's header must name the schema's columns, by position,
    /// ignoring case (Spark's `CSVHeaderChecker`).
    pub check_header: bool,
    /// `lineSep`: the record separator (none: `\n`, `\r\n` or `\r`).
    pub line_sep: Option<String>,
    /// `multiLine`: a quoted value may span lines (records are split outside quotes only).
    pub multi_line: bool,
    /// `timestampFormat`, `dateFormat`, `timestampNTZFormat`, `enableDateTimeParsingFallback`.
    pub datetime: datetime::DatetimeFormats,
}

#[derive(Debug, Clone)]
/// Text reader options (Spark's `TextOptions`).
pub struct TextOptions {
    /// `wholetext`: a file is one row.
    pub whole_text: bool,
    /// `lineSep`: the line separator (none: `\n`, `\r\n` or `\r`).
    pub line_sep: Option<String>,
}

#[derive(Debug, Clone)]
/// The record format and its options.
pub enum FormatKind {
    /// JSON lines or (`multiLine`) JSON documents.
    Json(JsonOptions),
    /// CSV.
    Csv(CsvOptions),
    /// Text: one `value` column per line (or file).
    Text(TextOptions),
    /// Parquet: batches come decoded; only the schema is adapted.
    Parquet,
}

/// Everything a reader needs: the format options, the output schema and the parse mode.
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// The format and its options.
    pub kind: FormatKind,
    /// The output schema: the given schema with every field nullable.
    pub schema: SchemaRef,
    /// What a bad record does (`mode`).
    pub mode: ParseMode,
    /// The column that receives the raw text of bad records (json/csv), if the schema has it.
    pub corrupt_idx: Option<usize>,
    /// The schema columns filled from the data, in order (all but the corrupt-record column).
    pub data_fields: Vec<usize>,
    /// `ignoreMissingFiles`: a listed file that vanished is skipped.
    pub ignore_missing_files: bool,
    /// `ignoreCorruptFiles`: a file that cannot be read or decoded is skipped.
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
pub fn text_schema() -> SchemaRef {
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
    pub fn new(format: &str, schema: &SchemaRef, opts: &Options) -> Result<Self> {
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
        let datetime = options::datetime_formats(opts)?;
        options::check_documented(format, opts)?;
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
pub fn unsupported_for_datasource(format: &str, f: &Field) -> SluiceError {
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
pub enum Cell<'a> {
    /// A null.
    Null,
    /// A BOOLEAN.
    Bool(bool),
    /// Any integer type (range-checked when built).
    Int(i64),
    /// A FLOAT.
    F32(f32),
    /// A DOUBLE.
    F64(f64),
    /// A DECIMAL's unscaled value.
    Dec(i128),
    /// A DATE: days since the epoch.
    Date(i32),
    /// A TIMESTAMP: microseconds since the epoch.
    Ts(i64),
    /// A STRING.
    Str(Cow<'a, str>),
    /// A struct, array or map value (JSON only).
    Nested(Box<nested::Nested>),
}

/// Why a record is bad.
#[derive(Debug, Clone)]
pub enum Bad {
    /// Some fields could not be converted (they are null; the rest of the row is kept in
    /// PERMISSIVE mode).
    Partial(String),
    /// The record could not be parsed at all (a row of nulls in PERMISSIVE mode).
    Malformed(String),
}

/// Where a record comes from, for the corrupt-record column and error messages.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// The file (URI) the record was read from.
    pub file: &'a str,
    /// 1-based line number of the record's first line.
    pub line: usize,
    /// The record's raw text.
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
pub struct Assembler<'o> {
    /// The options the records are parsed with.
    pub opts: &'o ParseOptions,
    builders: Vec<ColBuilder>,
    pending: usize,
    batches: Vec<RecordBatch>,
    /// Bad records counted: malformed ones in PERMISSIVE mode, dropped ones in DROPMALFORMED.
    pub malformed: u64,
    /// Bad records dropped (DROPMALFORMED).
    pub dropped: u64,
    /// Files read into this assembler.
    pub files_read: u64,
}

impl<'o> Assembler<'o> {
    /// An assembler of rows in `opts`' schema.
    pub fn new(opts: &'o ParseOptions) -> Result<Self> {
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
    pub fn record(
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
    pub fn text_row(&mut self, value: &str) -> Result<()> {
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
    pub fn absorb(&mut self, other: AssembledRows) -> Result<()> {
        self.flush()?;
        self.batches
            .extend(other.batches.into_iter().filter(|b| b.num_rows() > 0));
        self.malformed += other.malformed;
        self.dropped += other.dropped;
        self.files_read += other.files_read;
        Ok(())
    }

    /// Adds a ready batch (of the output schema) after the pending rows.
    pub fn push_batch(&mut self, batch: RecordBatch) -> Result<()> {
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

    /// The rows and counts read, the pending rows flushed.
    pub fn finish(mut self) -> Result<AssembledRows> {
        self.flush()?;
        Ok(AssembledRows {
            batches: self.batches,
            malformed: self.malformed,
            dropped: self.dropped,
            files_read: self.files_read,
        })
    }
}

/// What an [`Assembler`] read: record batches in its schema and its counts.
pub struct AssembledRows {
    /// The rows, in record order.
    pub batches: Vec<RecordBatch>,
    /// Malformed records (PERMISSIVE: rows of nulls).
    pub malformed: u64,
    /// Bad records dropped (DROPMALFORMED).
    pub dropped: u64,
    /// Files read.
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
pub fn for_each_line<'t>(
    text: &'t str,
    line_sep: Option<&str>,
    f: impl FnMut(usize, &'t str) -> Result<()>,
) -> Result<()> {
    for_each_line_from(text, line_sep, 0, f).map(|_| ())
}

/// [`for_each_line`] for a piece of a file that starts after its line `before`: the first
/// line of `text` is line `before + 1`. Returns the number of the last line (`before` for an
/// empty text).
pub fn for_each_line_from<'t>(
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
pub fn count_lines(text: &[u8], line_sep: Option<&[u8]>) -> usize {
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
pub struct PieceState {
    /// Lines of the file before the piece (its first line is line `lines_before + 1`).
    pub lines_before: usize,
    /// CSV `header=true`: the file's header line has not been seen yet.
    pub header_pending: bool,
}

impl PieceState {
    /// The state at a file's start (`header`: CSV `header=true`).
    pub fn file_start(header: bool) -> Self {
        PieceState {
            lines_before: 0,
            header_pending: header,
        }
    }
}

/// The text of `bytes`, each invalid UTF-8 sequence replaced by U+FFFD (as
/// `String::from_utf8_lossy`), validated with SIMD first: nearly all input is valid.
pub fn utf8_lossy(bytes: &[u8]) -> Cow<'_, str> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Parses text of `asm`'s (text) format: a piece of a file or a whole file.
pub fn parse_piece(
    text: &str,
    uri: &str,
    asm: &mut Assembler<'_>,
    at: &mut PieceState,
) -> Result<()> {
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

// ---------------------------------------------------------------------------------------------
// Value conversions shared by the JSON and CSV readers.

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

/// Rows as JSON values, for the tests of the readers here and in the engine.
#[doc(hidden)]
pub mod test_util {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{
        Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
        Int8Type, TimestampMicrosecondType,
    };
    use serde_json::{json, Value};

    use super::*;

    /// The rows of batches as JSON values (timestamps as micros, dates as days).
    pub fn rows(batches: &[RecordBatch]) -> Vec<Vec<Value>> {
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
pub fn parse_json_values(
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
pub fn fuzz_text(format: &str, text: &str, schema: &SchemaRef) -> Result<RecordBatch> {
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
