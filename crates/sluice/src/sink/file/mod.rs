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
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, LargeListArray, ListArray, RecordBatch, StringArray, StructArray,
};
use arrow::datatypes::{
    DataType, Field, Fields, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

use super::{BatchData, BatchStreams, Sink, SinkContext, SinkProvider};
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
    /// `partitionBy`: rows go to `col=value/` folders by these columns.
    partition_by: Vec<String>,
    /// `appendToExistingOutput`: write after batches another query left in the folder.
    append_to_existing: bool,
}

impl FileSinkProvider {
    /// A file sink writing `format` (`parquet`, `json`, `csv`) files under `path` (a directory;
    /// a `file://` URI is accepted; when empty, the `path` option is used). Options: parquet
    /// `compression` (`snappy` default, `none`); csv `header` (false) and `sep` (`,`);
    /// `partitionBy` (column names separated by commas: Hive-style `col=value/` folders).
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
        let partition_by = partition_by_option(options)?;
        let append_to_existing = match crate::conf::option(options, ownership::APPEND_TO_EXISTING) {
            None => false,
            Some(v) => v.trim().parse::<bool>().map_err(|_| {
                SluiceError::query(
                    class::INVALID_OPTION,
                    format!(
                        "{} must be true or false, got {v:?}",
                        ownership::APPEND_TO_EXISTING
                    ),
                )
            })?,
        };
        let local = local_path(path);
        let abs = if crate::storage::is_remote(&local) {
            local
        } else {
            std::path::absolute(&local).map_err(|e| {
                SluiceError::io(Fault::Query, format!("resolving sink path {path}"), e)
            })?
        };
        Ok(FileSinkProvider {
            path: abs,
            options: FileOptions::parse(format, options)?,
            compact_interval: DEFAULT_COMPACT_INTERVAL,
            partition_by,
            append_to_existing,
        })
    }

    /// Checks the `partitionBy` columns against the written rows' schema (they exist, are
    /// atomic, and leave a column for the data files), so a bad name fails at start.
    pub fn check_schema(&self, schema: &Schema) -> Result<()> {
        PartitionColumns::resolve(schema, &self.partition_by).map(|_| ())
    }

    /// The `partitionBy` columns, in folder order.
    pub fn partition_by(&self) -> &[String] {
        &self.partition_by
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
    fn output_dir(&self) -> Option<PathBuf> {
        Some(self.path.clone())
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
        Ok(Box::new(self.open_sink(ctx)?))
    }
}

impl FileSinkProvider {
    /// Creates the output and manifest directories and the running sink, after checking that
    /// the folder's manifest holds only what this query wrote ([`ownership`]).
    fn open_sink(&self, ctx: &SinkContext) -> Result<FileSink> {
        let log_dir = self.path.join(MANIFEST_DIR);
        crate::storage::create_dir_all(&log_dir).map_err(|e| {
            SluiceError::io(
                Fault::Connector,
                format!("creating the file sink directory {}", log_dir.display()),
                e,
            )
        })?;
        let log = manifest_log(&self.path, self.compact_interval).with_cleanup(ctx.log_cleanup);
        if let Some(id) = log.missing_ids()?.first().copied() {
            let file = log.path_of(id);
            return Err(SluiceError::connector(
                class::FILE_SINK_MANIFEST_GAP,
                format!(
                    "the manifest {} of the output folder {} has no file for batch {id} ({}) but \
                     has later ones: Spark's readers, and the next compaction for good, would \
                     leave out the files batch {id} wrote. Restore {} from a backup",
                    log.dir().display(),
                    self.path.display(),
                    file.display(),
                    file.display()
                ),
            ));
        }
        let manifest_offset = ownership::manifest_offset(
            ctx,
            &self.path,
            self.options.format.name(),
            &log,
            self.append_to_existing,
        )?;
        // Every live manifest file parses, checked now rather than when a compaction or a
        // reader next reads it.
        if let Some((id, file, defect)) = log.first_unreadable()? {
            let newest = log.latest_batch_id()? == Some(id);
            let batch = id.saturating_sub(manifest_offset);
            return Err(SluiceError::connector(
                class::FILE_SINK_MANIFEST_CORRUPT,
                format!(
                    "the manifest file {} of the output folder {} cannot be read ({defect}): \
                     every reader of the folder, Spark's too, fails on it, and so would the next \
                     compaction. Restore it from a backup. {}",
                    file.display(),
                    self.path.display(),
                    if newest {
                        format!(
                            "If {} has no commits/{batch}, deleting it is safe too: the batch \
                             runs again and writes its files anew; if it has, deleting it drops \
                             the batch's files from every read",
                            ctx.checkpoint_dir.display()
                        )
                    } else {
                        "Deleting it would drop the files of that batch from every read of the \
                         folder"
                            .to_string()
                    }
                ),
            ));
        }
        Ok(FileSink {
            path: self.path.clone(),
            options: self.options.clone(),
            log,
            metrics: BTreeMap::new(),
            partition_by: self.partition_by.clone(),
            manifest_offset,
            memory: ctx.memory,
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
    partition_by: Vec<String>,
    /// The manifest id of this query's batch 0 ([`ownership`]).
    manifest_offset: u64,
    /// The query's memory budget: what the writing tasks may buffer together.
    memory: crate::conf::MemoryBudget,
}

impl Sink for FileSink {
    fn add_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()> {
        self.add_batch_streams(batch_id, BatchStreams::from_data(data.clone()))
    }

    fn add_batch_streams(&mut self, batch_id: u64, rows: BatchStreams) -> Result<()> {
        let id = batch_id + self.manifest_offset;
        // Checked at start: every manifest entry at or below the newest planned batch is this
        // query's, so an existing entry is this batch, written before a crash.
        if let Some(latest) = self.log.latest_batch_id()? {
            if id <= latest {
                log::info!(
                    "Skipping already committed batch {batch_id} (file sink {}, manifest entry \
                     {id})",
                    self.path.display()
                );
                self.set_metrics(0, 0);
                return rows.discard();
            }
        }
        self.write_batch(id, rows)
    }

    fn metrics(&self) -> BTreeMap<String, String> {
        self.metrics.clone()
    }
}

impl FileSink {
    /// Writes manifest entry `batch_id`'s data files, then its manifest. If the manifest appears in
    /// between (another writer on the same path), fails with `FILE_SINK_RACE` and removes this
    /// attempt's files.
    fn write_batch(&mut self, batch_id: u64, input: BatchStreams) -> Result<()> {
        let partitioning = PartitionColumns::resolve(input.schema(), &self.partition_by)?;
        if self.options.format == FileFormat::Csv {
            check_csv_columns(partitioning.data_schema())?;
        }
        let mut written: Vec<PathBuf> = Vec::new();
        let mut entries = Vec::new();
        let mut rows = 0usize;
        let result = (|| -> Result<()> {
            let files = writer::write_files(
                &self.path,
                &self.options,
                &partitioning,
                input,
                self.memory,
                &mut written,
            )
            .map_err(|e| e.context(format!("file sink batch {batch_id}")))?;
            for (file, n) in &files {
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
                let _ = crate::storage::remove_file(f);
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
    let md = crate::storage::metadata(file)
        .map_err(|e| SluiceError::io(Fault::Connector, format!("stat {}", file.display()), e))?;
    Ok(SinkFileStatus {
        path: path_to_uri(file),
        size: md.size as i64,
        is_dir: false,
        modification_time: md.modified_ms.max(0),
        block_replication: 1,
        block_size: LOCAL_BLOCK_SIZE,
        action: "add".to_string(),
    })
}

// ---------------------------------------------------------------------------------------------
// Spark's text formatting for JSON and CSV.

/// Spark refuses nested columns in CSV (`UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE`, checked before
/// any file is written).
fn check_csv_columns(schema: &SchemaRef) -> Result<()> {
    for f in schema.fields() {
        if matches!(
            f.data_type(),
            DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) | DataType::Map(..)
        ) {
            return Err(SluiceError::query(
                class::UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE,
                format!(
                    "The CSV datasource doesn't support the column `{}` of the type \"{}\". \
                     Write it as JSON text with to_json(..), or use the json or parquet format",
                    f.name(),
                    crate::schema::spark_type_name(f.data_type())
                ),
            ));
        }
    }
    Ok(())
}

/// One row as a line of Spark's JSON: an object of the non-null columns, nested values as
/// `to_json` writes them.
fn json_line(out: &mut String, b: &RecordBatch, row: usize) -> Result<()> {
    out.push('{');
    let mut first = true;
    for (f, c) in b.schema().fields().iter().zip(b.columns()) {
        if c.is_null(row) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        crate::value_text::write_json_string(out, f.name());
        out.push(':');
        crate::value_text::write_json(out, c.as_ref(), row)?;
    }
    out.push_str("}\n");
    Ok(())
}

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
    header: bool,
) -> Result<()> {
    let sep = options.csv_sep as char;
    let io = |e: std::io::Error| SluiceError::io(Fault::Connector, "writing CSV", e);
    if header {
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

/// A `file://` URI or a plain path -> a local path (an object store URL is kept as it is).
fn local_path(s: &str) -> PathBuf {
    let s = s.trim();
    if crate::storage::is_remote(Path::new(s)) {
        return PathBuf::from(s.trim_end_matches('/'));
    }
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

/// `/data/out/a b.parquet` -> `file:///data/out/a%20b.parquet`, as Hadoop's `Path.toUri`; an
/// object store URL is already one.
fn path_to_uri(p: &Path) -> String {
    if crate::storage::is_remote(p) {
        return p.to_string_lossy().into_owned();
    }
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
    if p.is_absolute() || crate::storage::is_remote(&p) {
        p
    } else {
        base.join(p)
    }
}

mod ownership;
mod partition;
pub(crate) use partition::PartitionColumns;
pub use partition::DEFAULT_PARTITION_NAME;
pub use partition::{partition_by_option, resolve_partition_columns};
pub(crate) mod read;
pub use read::{committed_files, read_sink_output, read_sink_output_with_options};
mod save;
mod writer;
pub use save::{save_files, SaveMode};

#[cfg(test)]
mod tests;
