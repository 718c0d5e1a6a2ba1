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
mod lines;
pub mod nested;
mod numbers;
pub mod options;
#[doc(hidden)]
pub mod test_util;
#[cfg(test)]
mod tests;

pub use lines::{count_lines, for_each_line, for_each_line_from, PieceState};
pub use numbers::{
    convert_temporal_or_decimal, java_double_to_string, parse_decimal, parse_java_double,
    parse_java_float,
};
pub use options::{
    nullable_schema, text_schema, unsupported_for_datasource, CsvOptions, FormatKind, JsonOptions,
    ParseMode, ParseOptions, TextOptions,
};

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
