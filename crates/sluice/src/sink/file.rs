//! The file sink (Spark's `FileStreamSink`): parquet, JSON lines or CSV files, exactly once
//! through a manifest log.
//!
//! ```text
//! <path>/
//!   part-00000-<uuid>-c000.snappy.parquet     data files, written in place (never renamed)
//!   _spark_metadata/<N>                        v1 + one JSON line per file of batch N
//!   _spark_metadata/<N>.compact                every 10th batch: all files so far
//! ```
//!
//! Contract: `add_batch(N)` writes batch N's data files, then atomically creates
//! `_spark_metadata/N` listing them. A batch is *committed* to the output exactly when its
//! manifest file exists, so:
//! - a replay of a batch whose manifest exists (`N <= latest`) writes nothing;
//! - files left by a crashed attempt are never listed, and readers that use the manifest
//!   ([`committed_files`], [`read_sink_output`], Spark's `spark.read`) never see them.

use crate::error::class;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use arrow::array::{
    Array, ArrayRef, AsArray, LargeListArray, ListArray, RecordBatch, StringArray, StructArray,
};
use arrow::datatypes::{
    DataType, Field, Fields, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

use super::{BatchData, Sink, SinkContext, SinkProvider};
use crate::checkpoint::{CompactibleLog, DEFAULT_COMPACT_INTERVAL};
use crate::error::{Fault, Result, SluiceError};
use crate::types::OutputMode;

/// The manifest directory under the sink's path.
pub const MANIFEST_DIR: &str = "_spark_metadata";

/// The block size Hadoop's local file system reports, written in every manifest entry.
const LOCAL_BLOCK_SIZE: i64 = 33_554_432;

/// A data file format of the file sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// Apache Parquet (snappy-compressed by default).
    Parquet,
    /// JSON lines, one object per row.
    Json,
    /// Comma-separated values.
    Csv,
}

impl FileFormat {
    /// `parquet`, `json` or `csv` (any case).
    pub fn parse(format: &str) -> Result<FileFormat> {
        match format.trim().to_ascii_lowercase().as_str() {
            "parquet" => Ok(FileFormat::Parquet),
            "json" => Ok(FileFormat::Json),
            "csv" => Ok(FileFormat::Csv),
            "orc" | "text" | "avro" => Err(SluiceError::not_supported_yet(format!(
                "the {format} file format is not supported yet: use parquet, json or csv"
            ))),
            _ => Err(SluiceError::query(
                class::UNSUPPORTED_DATA_SOURCE,
                format!(
                    "unknown file format {format:?} for the file sink: use parquet, json or csv"
                ),
            )),
        }
    }

    /// The format's name: `parquet`, `json` or `csv`.
    pub fn name(&self) -> &'static str {
        match self {
            FileFormat::Parquet => "parquet",
            FileFormat::Json => "json",
            FileFormat::Csv => "csv",
        }
    }
}

/// Format options of the sink and of [`read_sink_output_with_options`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileOptions {
    format: FileFormat,
    /// Parquet only: snappy (default) or uncompressed.
    snappy: bool,
    /// CSV: write/read a header line (`header`, default false).
    csv_header: bool,
    /// CSV: the field separator (`sep` or `delimiter`, default `,`).
    csv_sep: u8,
}

impl FileOptions {
    fn parse(format: FileFormat, options: &HashMap<String, String>) -> Result<Self> {
        let opt = |key: &str| -> Option<&str> {
            options
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.as_str())
        };
        let compression = opt("compression").or_else(|| opt("codec"));
        let snappy = match (format, compression.map(|c| c.trim().to_ascii_lowercase())) {
            (FileFormat::Parquet, None) => true,
            (FileFormat::Parquet, Some(c)) if c == "snappy" => true,
            (_, None) => false,
            (_, Some(c)) if c == "none" || c == "uncompressed" => false,
            (_, Some(c)) => {
                return Err(SluiceError::not_supported_yet(format!(
                    "compression {c:?} for the {} file sink is not supported yet (supported: {})",
                    format.name(),
                    if format == FileFormat::Parquet {
                        "snappy, none"
                    } else {
                        "none"
                    }
                )))
            }
        };
        let csv_header = match opt("header").map(|h| h.trim().to_ascii_lowercase()) {
            None => false,
            Some(h) if h == "true" => true,
            Some(h) if h == "false" => false,
            Some(h) => {
                return Err(SluiceError::query(
                    class::INVALID_OPTION_VALUE,
                    format!("option header must be true or false, got {h:?}"),
                ))
            }
        };
        let csv_sep = match opt("sep").or_else(|| opt("delimiter")) {
            None => b',',
            Some("\\t") => b'\t',
            Some(s) if s.len() == 1 && s.is_ascii() => s.as_bytes()[0],
            Some(s) => {
                return Err(SluiceError::query(
                    class::INVALID_DELIMITER_VALUE,
                    format!(
                        "the CSV separator must be a single ASCII character (or \\t), got {s:?}"
                    ),
                ))
            }
        };
        Ok(Self {
            format,
            snappy,
            csv_header,
            csv_sep,
        })
    }

    /// The data file extension, after `c000`.
    fn extension(&self) -> &'static str {
        match (self.format, self.snappy) {
            (FileFormat::Parquet, true) => "snappy.parquet",
            (FileFormat::Parquet, false) => "parquet",
            (FileFormat::Json, _) => "json",
            (FileFormat::Csv, _) => "csv",
        }
    }
}

/// One line of `_spark_metadata/N` (Spark's `SinkFileStatus`), fields in Spark's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SinkFileStatus {
    /// A `file://` URI, percent-encoded.
    pub path: String,
    /// The file's length in bytes.
    #[serde(default)]
    pub size: i64,
    /// Whether the path is a directory (always false for the files Sluice writes).
    #[serde(default)]
    pub is_dir: bool,
    /// The file's modification time, in milliseconds since the epoch.
    #[serde(default)]
    pub modification_time: i64,
    /// The file system's replication factor (1 on a local file system).
    #[serde(default = "one")]
    pub block_replication: i64,
    /// The file system's block size in bytes (Hadoop's local default, 32 MiB).
    #[serde(default = "block_size")]
    pub block_size: i64,
    /// `add` (or `delete`, which Spark writes only when compacting with retention).
    #[serde(default = "add")]
    pub action: String,
}

fn one() -> i64 {
    1
}
fn block_size() -> i64 {
    LOCAL_BLOCK_SIZE
}
fn add() -> String {
    "add".to_string()
}

/// The file sink definition: `write_stream().format("parquet").option("path", ..)`.
#[derive(Debug, Clone)]
pub struct FileSinkProvider {
    path: PathBuf,
    options: FileOptions,
    compact_interval: u64,
}

impl FileSinkProvider {
    /// A file sink writing `format` (`parquet`, `json`, `csv`) files under `path` (a directory;
    /// a `file://` URI is accepted; when empty, the `path` option is used). Options: parquet
    /// `compression` (`snappy` default, `none`); csv `header` (false) and `sep` (`,`).
    pub fn try_new(
        format: &str,
        path: &str,
        options: &HashMap<String, String>,
    ) -> Result<FileSinkProvider> {
        let format = FileFormat::parse(format)?;
        let path = if path.trim().is_empty() {
            options
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("path"))
                .map(|(_, v)| v.as_str())
                .unwrap_or("")
        } else {
            path
        };
        if path.trim().is_empty() {
            return Err(SluiceError::query(
                class::PATH_NOT_SPECIFIED,
                format!(
                    "'path' is not specified for the {} file sink: add .option(\"path\", DIR)",
                    format.name()
                ),
            ));
        }
        if options
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("partitionBy") && !v.trim().is_empty())
        {
            return Err(SluiceError::not_supported_yet(
                "partitionBy for the file sink is not supported yet",
            ));
        }
        let local = local_path(path);
        let abs = std::path::absolute(&local)
            .map_err(|e| SluiceError::io(Fault::Query, format!("resolving sink path {path}"), e))?;
        Ok(FileSinkProvider {
            path: abs,
            options: FileOptions::parse(format, options)?,
            compact_interval: DEFAULT_COMPACT_INTERVAL,
        })
    }

    /// Spark's `spark.sql.streaming.fileSink.log.compactInterval` (default 10).
    pub fn with_compact_interval(mut self, interval: u64) -> Self {
        self.compact_interval = interval.max(1);
        self
    }

    /// The absolute output directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The data file format.
    pub fn format(&self) -> FileFormat {
        self.options.format
    }
}

impl SinkProvider for FileSinkProvider {
    fn kind(&self) -> &'static str {
        "file"
    }
    fn description(&self) -> String {
        format!("FileSink[{}]", self.path.display())
    }

    /// The file sink is append-only, as in Spark.
    fn supports_output_mode(&self, mode: OutputMode) -> bool {
        mode == OutputMode::Append
    }

    fn create_sink(&self, ctx: &SinkContext) -> Result<Box<dyn Sink>> {
        if ctx.output_mode != OutputMode::Append {
            return Err(SluiceError::query(
                class::STREAMING_OUTPUT_MODE_UNSUPPORTED_DATASOURCE,
                format!(
                    "data source {} does not support {:?} output mode: the file sink only \
                     supports Append",
                    self.options.format.name(),
                    ctx.output_mode
                ),
            ));
        }
        Ok(Box::new(self.open_sink()?))
    }
}

impl FileSinkProvider {
    /// Creates the output and manifest directories and the running sink.
    fn open_sink(&self) -> Result<FileSink> {
        let log_dir = self.path.join(MANIFEST_DIR);
        fs::create_dir_all(&log_dir).map_err(|e| {
            SluiceError::io(
                Fault::Connector,
                format!("creating the file sink directory {}", log_dir.display()),
                e,
            )
        })?;
        Ok(FileSink {
            path: self.path.clone(),
            options: self.options.clone(),
            log: manifest_log(&self.path, self.compact_interval),
            metrics: BTreeMap::new(),
        })
    }
}

fn manifest_log(path: &Path, compact_interval: u64) -> CompactibleLog<SinkFileStatus> {
    CompactibleLog::new(path.join(MANIFEST_DIR), compact_interval, Fault::Connector)
}

/// A running file sink.
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    options: FileOptions,
    log: CompactibleLog<SinkFileStatus>,
    metrics: BTreeMap<String, String>,
}

impl Sink for FileSink {
    fn add_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()> {
        if let Some(latest) = self.log.latest_batch_id()? {
            if batch_id <= latest {
                log::info!(
                    "Skipping already committed batch {batch_id} (file sink {})",
                    self.path.display()
                );
                self.set_metrics(0, 0);
                return Ok(());
            }
        }
        self.write_batch(batch_id, data)
    }

    fn metrics(&self) -> BTreeMap<String, String> {
        self.metrics.clone()
    }
}

impl FileSink {
    /// Writes batch `batch_id`'s data files, then its manifest. If the manifest appears in
    /// between (another writer on the same path), fails with `FILE_SINK_RACE` and removes this
    /// attempt's files.
    fn write_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()> {
        let job = uuid::Uuid::new_v4();
        let mut written: Vec<PathBuf> = Vec::new();
        let mut entries = Vec::new();
        let mut rows = 0usize;
        let result = (|| -> Result<()> {
            // One data file per non-empty partition, written at the same time (Spark's tasks).
            let parts: Vec<(PathBuf, &Vec<RecordBatch>, usize)> = data
                .partitions
                .iter()
                .enumerate()
                .map(|(i, part)| (i, part, part.iter().map(|b| b.num_rows()).sum::<usize>()))
                .filter(|(_, _, n)| *n > 0)
                .map(|(i, part, n)| {
                    let file = self.path.join(format!(
                        "part-{i:05}-{job}-c000.{}",
                        self.options.extension()
                    ));
                    (file, part, n)
                })
                .collect();
            written.extend(parts.iter().map(|(f, _, _)| f.clone()));
            let (options, schema) = (&self.options, &data.schema);
            let results: Vec<Result<()>> = std::thread::scope(|scope| {
                // The first file on this thread, the others on threads of their own.
                let handles: Vec<_> = parts
                    .iter()
                    .skip(1)
                    .map(|(file, part, _)| {
                        scope.spawn(move || write_data_file(file, options, schema, part))
                    })
                    .collect();
                let first = parts
                    .first()
                    .map(|(file, part, _)| write_data_file(file, options, schema, part));
                first
                    .into_iter()
                    .chain(handles.into_iter().map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(SluiceError::internal("a file sink writer thread panicked"))
                        })
                    }))
                    .collect()
            });
            for ((file, _, n), r) in parts.iter().zip(results) {
                r.map_err(|e| e.context(format!("file sink batch {batch_id}")))?;
                entries.push(file_status(file)?);
                rows += n;
            }
            if !self.log.add(batch_id, entries.clone())? {
                return Err(SluiceError::connector(
                    class::FILE_SINK_RACE,
                    format!(
                        "Race while writing batch {batch_id}: {} already exists. Another query \
                         is writing to the same output path {}",
                        self.log.path_of(batch_id).display(),
                        self.path.display()
                    ),
                ));
            }
            Ok(())
        })();
        if let Err(e) = result {
            // Best effort, like Spark's job abort: the files are invisible anyway.
            for f in written {
                let _ = fs::remove_file(f);
            }
            return Err(e);
        }
        self.set_metrics(entries.len(), rows);
        Ok(())
    }

    fn set_metrics(&mut self, files: usize, rows: usize) {
        self.metrics
            .insert("numFiles".to_string(), files.to_string());
        self.metrics
            .insert("numOutputRows".to_string(), rows.to_string());
    }
}

fn write_err(file: &Path, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::connector(
        class::FILE_SINK_WRITE_FAILED,
        format!("writing {}: {e}", file.display()),
    )
}

/// Writes one data file (created new; fsynced before it is listed in the manifest).
fn write_data_file(
    file: &Path,
    options: &FileOptions,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<()> {
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file)
        .map_err(|e| {
            SluiceError::io(Fault::Connector, format!("creating {}", file.display()), e)
        })?;
    let batches: Vec<RecordBatch> = batches
        .iter()
        .filter(|b| b.num_rows() > 0)
        .map(|b| conform_schema(b, schema))
        .collect::<Result<_>>()?;
    let f = match options.format {
        FileFormat::Parquet => {
            let props = WriterProperties::builder()
                .set_compression(if options.snappy {
                    Compression::SNAPPY
                } else {
                    Compression::UNCOMPRESSED
                })
                .build();
            let mut w = ArrowWriter::try_new(BufWriter::new(f), schema.clone(), Some(props))
                .map_err(|e| write_err(file, e))?;
            for b in &batches {
                w.write(b).map_err(|e| write_err(file, e))?;
            }
            let buf = w.into_inner().map_err(|e| write_err(file, e))?;
            buf.into_inner().map_err(|e| write_err(file, e.error()))?
        }
        FileFormat::Json => {
            let mut w = arrow::json::LineDelimitedWriter::new(BufWriter::new(f));
            for b in &batches {
                w.write(&timestamps_as_text(b)?)
                    .map_err(|e| write_err(file, e))?;
            }
            w.finish().map_err(|e| write_err(file, e))?;
            w.into_inner()
                .into_inner()
                .map_err(|e| write_err(file, e.error()))?
        }
        FileFormat::Csv => {
            let mut w = BufWriter::new(f);
            write_csv(&mut w, schema, &batches, options).map_err(|e| e.context(file.display()))?;
            w.into_inner().map_err(|e| write_err(file, e.error()))?
        }
    };
    f.sync_all()
        .map_err(|e| SluiceError::io(Fault::Connector, format!("syncing {}", file.display()), e))
}

/// The batch with `schema` (same columns; field names/metadata/nullability from `schema`).
fn conform_schema(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().as_ref() == schema.as_ref() {
        return Ok(batch.clone());
    }
    RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).map_err(|e| {
        SluiceError::internal(format!(
            "a batch for the file sink does not match the query's schema: {e}"
        ))
    })
}

/// The manifest entry of a written file.
fn file_status(file: &Path) -> Result<SinkFileStatus> {
    let md = fs::metadata(file)
        .map_err(|e| SluiceError::io(Fault::Connector, format!("stat {}", file.display()), e))?;
    let mtime = md
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    Ok(SinkFileStatus {
        path: path_to_uri(file),
        size: md.len() as i64,
        is_dir: false,
        modification_time: mtime,
        block_replication: 1,
        block_size: LOCAL_BLOCK_SIZE,
        action: "add".to_string(),
    })
}

// ---------------------------------------------------------------------------------------------
// Spark's text formatting for JSON and CSV.

/// Replaces every timestamp column (also inside structs and lists) by its Spark text.
fn timestamps_as_text(batch: &RecordBatch) -> Result<RecordBatch> {
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| has_timestamp(f.data_type()))
    {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        let c = array_timestamps_as_text(c)?;
        fields.push(Field::new(f.name(), c.data_type().clone(), f.is_nullable()));
        columns.push(c);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

fn has_timestamp(t: &DataType) -> bool {
    match t {
        DataType::Timestamp(..) => true,
        DataType::Struct(fs) => fs.iter().any(|f| has_timestamp(f.data_type())),
        DataType::List(f) | DataType::LargeList(f) => has_timestamp(f.data_type()),
        _ => false,
    }
}

fn array_timestamps_as_text(a: &ArrayRef) -> Result<ArrayRef> {
    if !has_timestamp(a.data_type()) {
        return Ok(a.clone());
    }
    Ok(match a.data_type() {
        DataType::Timestamp(unit, _) => {
            let unit = *unit;
            let values: Vec<Option<i64>> = match unit {
                TimeUnit::Second => a.as_primitive::<TimestampSecondType>().iter().collect(),
                TimeUnit::Millisecond => a
                    .as_primitive::<TimestampMillisecondType>()
                    .iter()
                    .collect(),
                TimeUnit::Microsecond => a
                    .as_primitive::<TimestampMicrosecondType>()
                    .iter()
                    .collect(),
                TimeUnit::Nanosecond => {
                    a.as_primitive::<TimestampNanosecondType>().iter().collect()
                }
            };
            let strings: StringArray = values
                .into_iter()
                .map(|v| v.and_then(|v| crate::time_text::iso_timestamp(v, unit)))
                .collect();
            Arc::new(strings)
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let mut new_fields = Vec::with_capacity(fields.len());
            let mut children = Vec::with_capacity(fields.len());
            for (f, c) in fields.iter().zip(s.columns()) {
                let c = array_timestamps_as_text(c)?;
                new_fields.push(Field::new(f.name(), c.data_type().clone(), f.is_nullable()));
                children.push(c);
            }
            Arc::new(StructArray::try_new(
                Fields::from(new_fields),
                children,
                s.nulls().cloned(),
            )?)
        }
        DataType::List(f) => {
            let l = a.as_list::<i32>();
            let values = array_timestamps_as_text(l.values())?;
            let field = Arc::new(Field::new(
                f.name(),
                values.data_type().clone(),
                f.is_nullable(),
            ));
            Arc::new(ListArray::try_new(
                field,
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )?)
        }
        DataType::LargeList(f) => {
            let l = a.as_list::<i64>();
            let values = array_timestamps_as_text(l.values())?;
            let field = Arc::new(Field::new(
                f.name(),
                values.data_type().clone(),
                f.is_nullable(),
            ));
            Arc::new(LargeListArray::try_new(
                field,
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )?)
        }
        _ => a.clone(),
    })
}

/// CSV like Spark's writer (univocity): null -> empty field, empty string -> `""`, leading and
/// trailing white space trimmed, quoted when the value holds the separator, a quote or a line
/// break, with `"` escaped as `\"`; optional header line per file.
fn write_csv<W: Write>(
    w: &mut W,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    options: &FileOptions,
) -> Result<()> {
    let sep = options.csv_sep as char;
    let io = |e: std::io::Error| SluiceError::io(Fault::Connector, "writing CSV", e);
    if options.csv_header {
        let names: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| csv_field(f.name(), sep))
            .collect();
        writeln!(w, "{}", names.join(&sep.to_string())).map_err(io)?;
    }
    let fmt_opts = FormatOptions::default();
    for b in batches {
        let b = timestamps_as_text(b)?;
        let formatters: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &fmt_opts))
            .collect::<std::result::Result<_, _>>()?;
        let mut line = String::new();
        for row in 0..b.num_rows() {
            line.clear();
            for (i, (c, f)) in b.columns().iter().zip(&formatters).enumerate() {
                if i > 0 {
                    line.push(sep);
                }
                if c.is_null(row) {
                    continue;
                }
                line.push_str(&csv_field(&f.value(row).to_string(), sep));
            }
            line.push('\n');
            w.write_all(line.as_bytes()).map_err(io)?;
        }
    }
    Ok(())
}

fn csv_field(value: &str, sep: char) -> String {
    let v = value.trim();
    if v.is_empty() {
        return "\"\"".to_string();
    }
    if v.contains(sep) || v.contains('"') || v.contains('\n') || v.contains('\r') {
        let mut s = String::with_capacity(v.len() + 2);
        s.push('"');
        for ch in v.chars() {
            if ch == '"' {
                s.push('\\');
            }
            s.push(ch);
        }
        s.push('"');
        return s;
    }
    v.to_string()
}

// ---------------------------------------------------------------------------------------------
// Paths and URIs.

/// A `file://` URI or a plain path -> a local path.
fn local_path(s: &str) -> PathBuf {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix("file://") {
        // file:///abs or file://localhost/abs
        let rest = rest.strip_prefix("localhost").unwrap_or(rest);
        return PathBuf::from(percent_decode(rest));
    }
    if let Some(rest) = s.strip_prefix("file:") {
        return PathBuf::from(percent_decode(rest));
    }
    PathBuf::from(s)
}

/// `/data/out/a b.parquet` -> `file:///data/out/a%20b.parquet`, as Hadoop's `Path.toUri`.
fn path_to_uri(p: &Path) -> String {
    let s = p.to_string_lossy().replace('\\', "/");
    let mut out = String::from("file://");
    if !s.starts_with('/') {
        out.push('/');
    }
    for ch in s.chars() {
        let keep =
            ch.is_ascii_alphanumeric() || "-._~/!$&'()*+,;=:@".contains(ch) || !ch.is_ascii();
        if keep {
            out.push(ch);
        } else {
            let mut buf = [0u8; 4];
            for b in ch.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(b) = hex {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A manifest entry's path -> a local path (relative entries are taken under `base`).
fn entry_path(uri: &str, base: &Path) -> PathBuf {
    let p = local_path(uri);
    if p.is_absolute() {
        p
    } else {
        base.join(p)
    }
}

// ---------------------------------------------------------------------------------------------
// Readers.

/// The data files committed to the file sink output `path`, in commit order: the `add` entries
/// of `<path>/_spark_metadata` minus `delete` entries. `None` if `path` has no manifest
/// directory (it was not written by a file sink: a reader then lists the directory).
pub fn committed_files(path: &Path) -> Result<Option<Vec<PathBuf>>> {
    let log_dir = path.join(MANIFEST_DIR);
    if !log_dir.is_dir() {
        return Ok(None);
    }
    let entries = manifest_log(path, DEFAULT_COMPACT_INTERVAL).all_entries()?;
    let deleted: HashSet<&str> = entries
        .iter()
        .filter(|e| e.action == "delete")
        .map(|e| e.path.as_str())
        .collect();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for e in &entries {
        if e.action != "add" || e.is_dir || deleted.contains(e.path.as_str()) {
            continue;
        }
        if seen.insert(e.path.as_str()) {
            files.push(entry_path(&e.path, path));
        }
    }
    Ok(Some(files))
}

/// Reads the committed output of a file sink (or, without a manifest, every visible data file
/// under `path`; or the single file `path`). JSON and CSV are read with `schema`, inferred
/// when `None`; parquet files are read with their own schema, conformed to `schema` when given
/// (columns by name, cast). CSV uses the defaults (no header, `,`); see
/// [`read_sink_output_with_options`].
pub fn read_sink_output(
    path: &Path,
    format: &str,
    schema: Option<SchemaRef>,
) -> Result<Vec<RecordBatch>> {
    read_sink_output_with_options(path, format, schema, &HashMap::new())
}

/// [`read_sink_output`] with format options (`header`, `sep` for CSV).
pub fn read_sink_output_with_options(
    path: &Path,
    format: &str,
    schema: Option<SchemaRef>,
    options: &HashMap<String, String>,
) -> Result<Vec<RecordBatch>> {
    let options = FileOptions::parse(FileFormat::parse(format)?, options)?;
    let files = if path.is_file() {
        vec![path.to_path_buf()]
    } else {
        match committed_files(path)? {
            Some(files) => files,
            None => list_data_files(path)?,
        }
    };
    if files.is_empty() {
        return Ok(Vec::new());
    }
    match options.format {
        FileFormat::Parquet => {
            let mut out = Vec::new();
            for f in &files {
                let reader = ParquetRecordBatchReaderBuilder::try_new(open(f)?)
                    .and_then(|b| b.build())
                    .map_err(|e| read_err(f, e))?;
                for b in reader {
                    let b = b.map_err(|e| read_err(f, e))?;
                    out.push(match &schema {
                        Some(s) => conform_by_name(&b, s).map_err(|e| e.context(f.display()))?,
                        None => b,
                    });
                }
            }
            Ok(out)
        }
        FileFormat::Json => {
            let schema = match schema {
                Some(s) => s,
                None => {
                    let mut schemas = Vec::new();
                    for f in &files {
                        let (s, _) = arrow::json::reader::infer_json_schema_from_seekable(
                            BufReader::new(open(f)?),
                            None,
                        )
                        .map_err(|e| read_err(f, e))?;
                        schemas.push(s);
                    }
                    Arc::new(Schema::try_merge(schemas)?)
                }
            };
            let mut out = Vec::new();
            for f in &files {
                let reader = arrow::json::ReaderBuilder::new(schema.clone())
                    .build(BufReader::new(open(f)?))
                    .map_err(|e| read_err(f, e))?;
                for b in reader {
                    out.push(b.map_err(|e| read_err(f, e))?);
                }
            }
            Ok(out)
        }
        FileFormat::Csv => {
            let schema = match schema {
                Some(s) => s,
                None => {
                    let fmt = arrow::csv::reader::Format::default()
                        .with_header(options.csv_header)
                        .with_delimiter(options.csv_sep)
                        .with_escape(b'\\');
                    let mut schemas = Vec::new();
                    for f in &files {
                        let (s, _) = fmt
                            .infer_schema(open(f)?, None)
                            .map_err(|e| read_err(f, e))?;
                        schemas.push(s);
                    }
                    Arc::new(Schema::try_merge(schemas)?)
                }
            };
            let mut out = Vec::new();
            for f in &files {
                let reader = arrow::csv::ReaderBuilder::new(schema.clone())
                    .with_header(options.csv_header)
                    .with_delimiter(options.csv_sep)
                    .with_escape(b'\\')
                    .build(open(f)?)
                    .map_err(|e| read_err(f, e))?;
                for b in reader {
                    out.push(b.map_err(|e| read_err(f, e))?);
                }
            }
            Ok(out)
        }
    }
}

fn open(f: &Path) -> Result<File> {
    File::open(f).map_err(|e| SluiceError::io(Fault::Input, format!("opening {}", f.display()), e))
}

fn read_err(f: &Path, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::input(
        class::FAILED_READ_FILE,
        format!("reading {}: {e}", f.display()),
    )
}

/// Every data file under `dir` (recursively), skipping hidden names (`_*`, `.*`), sorted.
fn list_data_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = match fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && d == dir => {
                return Err(SluiceError::input(
                    class::PATH_NOT_FOUND,
                    format!("path does not exist: {}", dir.display()),
                ))
            }
            Err(e) => {
                return Err(SluiceError::io(
                    Fault::Input,
                    format!("listing {}", d.display()),
                    e,
                ))
            }
        };
        for ent in rd {
            let ent = ent.map_err(|e| {
                SluiceError::io(Fault::Input, format!("listing {}", d.display()), e)
            })?;
            let name = ent.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('_') || name.starts_with('.') {
                continue;
            }
            let p = ent.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `batch` reshaped to `schema`: columns matched by name (exact, then case-insensitive), cast
/// when the type differs, all-null when missing.
fn conform_by_name(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().as_ref() == schema.as_ref() {
        return Ok(batch.clone());
    }
    let bs = batch.schema();
    let mut columns = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let idx = bs.index_of(f.name()).ok().or_else(|| {
            bs.fields()
                .iter()
                .position(|g| g.name().eq_ignore_ascii_case(f.name()))
        });
        let col = match idx {
            Some(i) => {
                let c = batch.column(i);
                if c.data_type() == f.data_type() {
                    c.clone()
                } else {
                    arrow::compute::cast(c, f.data_type())?
                }
            }
            None => arrow::array::new_null_array(f.data_type(), batch.num_rows()),
        };
        columns.push(col);
    }
    // Keep the given schema unless a non-nullable field received nulls.
    let nullable: Vec<Field> = schema
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| {
            f.as_ref()
                .clone()
                .with_nullable(f.is_nullable() || c.null_count() > 0)
        })
        .collect();
    let target = if nullable
        .iter()
        .zip(schema.fields())
        .all(|(a, b)| a.is_nullable() == b.is_nullable())
    {
        schema.clone()
    } else {
        Arc::new(Schema::new_with_metadata(
            nullable,
            schema.metadata().clone(),
        ))
    };
    Ok(RecordBatch::try_new(target, columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int64Array, TimestampMicrosecondArray};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("user", DataType::Utf8, true),
            Field::new("amount", DataType::Float64, true),
        ]))
    }

    /// `n` rows starting at `start`, split in `parts` partitions (round robin by row).
    fn data(start: i64, n: i64, parts: usize) -> BatchData {
        let s = schema();
        let mut partitions = vec![Vec::new(); parts];
        for i in start..start + n {
            let b = RecordBatch::try_new(
                s.clone(),
                vec![
                    Arc::new(
                        TimestampMicrosecondArray::from(vec![Some(
                            1_789_473_660_000_000 + i * 60_000_000,
                        )])
                        .with_timezone("UTC"),
                    ),
                    Arc::new(StringArray::from(vec![if i % 3 == 0 {
                        None
                    } else {
                        Some(format!("u{i}"))
                    }])),
                    Arc::new(Float64Array::from(vec![Some(i as f64 * 1.5)])),
                ],
            )
            .unwrap();
            partitions[(i as usize) % parts].push(b);
        }
        BatchData {
            schema: s,
            partitions,
        }
    }

    fn sink(dir: &Path, format: &str, opts: &[(&str, &str)]) -> (FileSinkProvider, Box<dyn Sink>) {
        let options: HashMap<String, String> = opts
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let p = FileSinkProvider::try_new(format, dir.to_str().unwrap(), &options).unwrap();
        let ctx = SinkContext {
            checkpoint_dir: dir.join("_ck"),
            output_mode: OutputMode::Append,
            query_name: None,
            query_id: "test-query".into(),
        };
        let s = p.create_sink(&ctx).unwrap();
        (p, s)
    }

    fn amounts(batches: &[RecordBatch]) -> Vec<f64> {
        let mut v: Vec<f64> = batches
            .iter()
            .flat_map(|b| {
                let idx = b.schema().index_of("amount").unwrap();
                let c = arrow::compute::cast(b.column(idx), &DataType::Float64).unwrap();
                c.as_primitive::<arrow::datatypes::Float64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    }

    fn count_data_files(dir: &Path) -> usize {
        fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("part-")
            })
            .count()
    }

    #[test]
    fn two_batches_then_replay_adds_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let (p, mut s) = sink(&out, "parquet", &[]);
        assert_eq!(p.description(), format!("FileSink[{}]", out.display()));
        s.add_batch(0, &data(0, 3, 2)).unwrap();
        assert_eq!(s.metrics().get("numFiles").map(String::as_str), Some("2"));
        assert_eq!(
            s.metrics().get("numOutputRows").map(String::as_str),
            Some("3")
        );
        s.add_batch(1, &data(3, 1, 2)).unwrap();
        assert_eq!(s.metrics().get("numFiles").map(String::as_str), Some("1"));

        // Manifest files in Spark's format.
        let m0 = fs::read_to_string(out.join("_spark_metadata/0")).unwrap();
        let lines: Vec<&str> = m0.split('\n').collect();
        assert_eq!(lines[0], "v1");
        assert_eq!(lines.len(), 3);
        assert!(!m0.ends_with('\n'));
        let first: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        let keys: Vec<&str> = first
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(keys.len(), 7);
        let line = lines[1];
        let prefix = format!("{{\"path\":\"file://{}/part-00000-", out.display());
        assert!(line.starts_with(&prefix), "{line}");
        assert!(line.contains("-c000.snappy.parquet\",\"size\":"), "{line}");
        assert!(
            line.ends_with(",\"blockReplication\":1,\"blockSize\":33554432,\"action\":\"add\"}"),
            "{line}"
        );
        assert!(line.contains(",\"isDir\":false,\"modificationTime\":"));
        let size = first["size"].as_i64().unwrap();
        let file = committed_files(&out).unwrap().unwrap()[0].clone();
        assert_eq!(fs::metadata(&file).unwrap().len() as i64, size);

        let rows = read_sink_output(&out, "parquet", None).unwrap();
        assert_eq!(amounts(&rows), vec![0.0, 1.5, 3.0, 4.5]);
        assert_eq!(
            rows[0].schema().field(0).data_type(),
            schema().field(0).data_type()
        );

        // Replaying batch 1 (and 0) adds nothing.
        let files_before = count_data_files(&out);
        s.add_batch(1, &data(3, 1, 2)).unwrap();
        s.add_batch(0, &data(0, 3, 2)).unwrap();
        assert_eq!(s.metrics().get("numFiles").map(String::as_str), Some("0"));
        assert_eq!(count_data_files(&out), files_before);
        assert_eq!(
            amounts(&read_sink_output(&out, "parquet", None).unwrap()),
            vec![0.0, 1.5, 3.0, 4.5]
        );

        // A new sink on the same path (a restart) also skips.
        let (_, mut s2) = sink(&out, "parquet", &[]);
        s2.add_batch(1, &data(3, 1, 2)).unwrap();
        assert_eq!(count_data_files(&out), files_before);
    }

    #[test]
    fn empty_batch_writes_an_empty_manifest() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, mut s) = sink(tmp.path(), "json", &[]);
        s.add_batch(0, &data(0, 0, 2)).unwrap();
        assert_eq!(
            fs::read_to_string(tmp.path().join("_spark_metadata/0")).unwrap(),
            "v1"
        );
        assert_eq!(committed_files(tmp.path()).unwrap(), Some(vec![]));
        assert!(read_sink_output(tmp.path(), "json", Some(schema()))
            .unwrap()
            .is_empty());
        // Replay is skipped: the batch is known to be done.
        s.add_batch(0, &data(0, 5, 2)).unwrap();
        assert_eq!(count_data_files(tmp.path()), 0);
    }

    #[test]
    fn orphan_files_are_invisible() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        let (_, mut s) = sink(out, "json", &[]);
        s.add_batch(0, &data(0, 2, 1)).unwrap();
        // A crashed attempt of batch 1 left a data file but no manifest.
        fs::write(
            out.join("part-00000-0c1f6fb5-6a5f-4a4c-8d5e-2d7f1f8a9b00-c000.json"),
            "{\"amount\":99.0}\n",
        )
        .unwrap();
        let files = committed_files(out).unwrap().unwrap();
        assert_eq!(files.len(), 1);
        assert!(files
            .iter()
            .all(|f| !f.to_string_lossy().contains("0c1f6fb5")));
        assert_eq!(
            amounts(&read_sink_output(out, "json", Some(schema())).unwrap()),
            vec![0.0, 1.5]
        );
        // Without a manifest a reader lists the directory and sees everything.
        fs::remove_dir_all(out.join("_spark_metadata")).unwrap();
        assert_eq!(committed_files(out).unwrap(), None);
        assert_eq!(
            amounts(&read_sink_output(out, "json", Some(schema())).unwrap()),
            vec![0.0, 1.5, 99.0]
        );
    }

    #[test]
    fn compaction_at_batch_9() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        let (_, mut s) = sink(out, "parquet", &[]);
        let mut expected = Vec::new();
        for b in 0..12i64 {
            s.add_batch(b as u64, &data(b * 2, 2, 1)).unwrap();
            expected.extend([(b * 2) as f64 * 1.5, (b * 2 + 1) as f64 * 1.5]);
        }
        let meta = out.join("_spark_metadata");
        assert!(meta.join("9.compact").exists());
        assert!(!meta.join("9").exists());
        assert!(meta.join("10").exists());
        let compact = fs::read_to_string(meta.join("9.compact")).unwrap();
        assert_eq!(compact.split('\n').count(), 11); // v1 + 10 files
        assert_eq!(committed_files(out).unwrap().unwrap().len(), 12);
        expected.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert_eq!(
            amounts(&read_sink_output(out, "parquet", None).unwrap()),
            expected
        );
        // Readers are also right once the files before the compaction are gone.
        for b in 0..9 {
            fs::remove_file(meta.join(b.to_string())).unwrap();
        }
        assert_eq!(committed_files(out).unwrap().unwrap().len(), 12);
        // And the sink still knows what was committed.
        s.add_batch(5, &data(100, 1, 1)).unwrap();
        assert_eq!(committed_files(out).unwrap().unwrap().len(), 12);
    }

    #[test]
    fn append_only_and_option_errors() {
        let p = FileSinkProvider::try_new("parquet", "/tmp/x", &HashMap::new()).unwrap();
        assert!(p.supports_output_mode(OutputMode::Append));
        assert!(!p.supports_output_mode(OutputMode::Update));
        assert!(!p.supports_output_mode(OutputMode::Complete));
        let ctx = SinkContext {
            checkpoint_dir: PathBuf::from("/tmp/ck"),
            output_mode: OutputMode::Complete,
            query_name: None,
            query_id: "test-query".into(),
        };
        assert_eq!(p.create_sink(&ctx).err().unwrap().fault(), Fault::Query);

        let e = FileSinkProvider::try_new("xml", "/tmp/x", &HashMap::new()).unwrap_err();
        assert_eq!(e.class(), "UNSUPPORTED_DATA_SOURCE");
        let e = FileSinkProvider::try_new("json", "", &HashMap::new()).unwrap_err();
        assert_eq!(e.class(), "PATH_NOT_SPECIFIED");
        let mut o = HashMap::new();
        o.insert("path".to_string(), "/tmp/y".to_string());
        assert_eq!(
            FileSinkProvider::try_new("JSON", "", &o).unwrap().path(),
            Path::new("/tmp/y")
        );
        o.insert("sep".to_string(), "ab".to_string());
        assert_eq!(
            FileSinkProvider::try_new("csv", "", &o)
                .unwrap_err()
                .class(),
            "INVALID_DELIMITER_VALUE"
        );
        let u = FileSinkProvider::try_new("parquet", "file:///tmp/a%20b", &HashMap::new()).unwrap();
        assert_eq!(u.path(), Path::new("/tmp/a b"));
    }

    #[test]
    fn race_on_the_manifest_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let p = FileSinkProvider::try_new("json", tmp.path().to_str().unwrap(), &HashMap::new())
            .unwrap();
        let mut a = p.open_sink().unwrap();
        a.add_batch(0, &data(0, 1, 1)).unwrap();
        let before = count_data_files(tmp.path());
        // Another writer committed batch 0 between this sink's check and its manifest write.
        let e = a.write_batch(0, &data(5, 2, 1)).unwrap_err();
        assert_eq!(e.fault(), Fault::Connector);
        assert_eq!(e.class(), "FILE_SINK_RACE");
        assert!(
            e.message().contains("Race while writing batch 0"),
            "{}",
            e.message()
        );
        // Its data files were cleaned up, and readers never saw them anyway.
        assert_eq!(count_data_files(tmp.path()), before);
        assert_eq!(committed_files(tmp.path()).unwrap().unwrap().len(), 1);
    }

    #[test]
    fn json_and_csv_text_like_spark() {
        let tmp = tempfile::tempdir().unwrap();
        let jdir = tmp.path().join("j");
        let (_, mut j) = sink(&jdir, "json", &[]);
        j.add_batch(0, &data(0, 2, 1)).unwrap();
        let f = &committed_files(&jdir).unwrap().unwrap()[0];
        assert!(f.to_string_lossy().ends_with("-c000.json"));
        assert_eq!(
            fs::read_to_string(f).unwrap(),
            "{\"ts\":\"2026-09-15T12:01:00.000Z\",\"amount\":0.0}\n{\"ts\":\"2026-09-15T12:02:00.000Z\",\"user\":\"u1\",\"amount\":1.5}\n"
        );
        let back = read_sink_output(&jdir, "json", Some(schema())).unwrap();
        let back = arrow::compute::concat_batches(&schema(), &back).unwrap();
        assert_eq!(back, data(0, 2, 1).concat().unwrap());

        let cdir = tmp.path().join("c");
        let (_, mut c) = sink(&cdir, "csv", &[("header", "true"), ("sep", ";")]);
        let s = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let b = RecordBatch::try_new(
            s.clone(),
            vec![
                Arc::new(StringArray::from(vec![
                    Some("a;b"),
                    Some(""),
                    None,
                    Some("say \"hi\""),
                    Some(" x "),
                ])),
                Arc::new(Int64Array::from(vec![
                    Some(1),
                    None,
                    Some(3),
                    Some(4),
                    Some(5),
                ])),
            ],
        )
        .unwrap();
        c.add_batch(
            0,
            &BatchData {
                schema: s.clone(),
                partitions: vec![vec![b]],
            },
        )
        .unwrap();
        let f = &committed_files(&cdir).unwrap().unwrap()[0];
        assert!(f.to_string_lossy().ends_with("-c000.csv"));
        assert_eq!(
            fs::read_to_string(f).unwrap(),
            "s;n\n\"a;b\";1\n\"\";\n;3\n\"say \\\"hi\\\"\";4\nx;5\n"
        );
        let mut o = HashMap::new();
        o.insert("header".to_string(), "true".to_string());
        o.insert("sep".to_string(), ";".to_string());
        let back = read_sink_output_with_options(&cdir, "csv", Some(s.clone()), &o).unwrap();
        let back = arrow::compute::concat_batches(&s, &back).unwrap();
        assert_eq!(back.num_rows(), 5);
        assert_eq!(
            back.column(1)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(4),
            5
        );
        assert_eq!(back.column(0).as_string::<i32>().value(0), "a;b");
    }

    #[test]
    fn uris() {
        assert_eq!(
            path_to_uri(Path::new("/data/out/a b%.parquet")),
            "file:///data/out/a%20b%25.parquet"
        );
        assert_eq!(
            local_path("file:///data/out/a%20b%25.parquet"),
            PathBuf::from("/data/out/a b%.parquet")
        );
        assert_eq!(local_path("file:/data/x"), PathBuf::from("/data/x"));
        assert_eq!(
            entry_path("part-0.json", Path::new("/o")),
            PathBuf::from("/o/part-0.json")
        );
    }
}
