//! The Delta source (Spark's `DeltaSource`): `read_stream().format("delta").load(path)` follows
//! a table's versions as offsets.
//!
//! Without `startingVersion`/`startingTimestamp` the first batches read the table as it is at
//! the query's first run (its snapshot, files ordered by modification time, then path), then
//! every later commit's added files, in log order. With them, the commits from that version on.
//! An offset is Spark's `{"sourceVersion":1,"reservoirId":<table id>,"reservoirVersion":v,
//! "index":i,"isStartingVersion":b}`: everything up to file `i` of version `v` (of its snapshot
//! when `isStartingVersion`) is read; `i = -1` is "nothing of `v` yet". The log is immutable,
//! so a replayed range reads the same files.
//!
//! Options: `maxFilesPerTrigger` (default 1000), `maxBytesPerTrigger`, `ignoreDeletes`
//! (commits that only remove files are skipped), `skipChangeCommits` (commits that remove files
//! are skipped whole); otherwise a commit that removes data stops the query, as in Spark. A
//! schema change in the table stops the query too (restart it to read the new schema).
//!
//! A batch's data files are read as the batch's plan pulls their rows (a file at a time, as its
//! Parquet reader gives them), so a batch never has to fit in memory; on a cluster
//! (`sluice.distributed.workers`) the workers read them, each a contiguous run of the batch's
//! files ([`read_on_worker`], registered as the read kind `delta`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Schema, SchemaRef, TimeUnit};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use serde_json::{json, Value};
use sluice::distributed::{ReadCounts, ReadItem, ReadItems, ReadOnWorkers};
use sluice::error::class;
use sluice::source::registry::SourceFactory;
use sluice::source::{
    LazyRows, Offset, ReadLimit, RowIter, Source, SourceBatch, SourceContext, SourceProvider,
};
use sluice::{Result, SluiceError};

use super::{bool_option, option, run, table_url};

/// One data file of the table, as the stream reads it.
#[derive(Debug, Clone)]
struct DataFile {
    /// Relative to the table folder (decoded), or absolute.
    path: String,
    size: u64,
    partition_values: HashMap<String, Option<String>>,
}

/// A position in the stream: through file `index` of `version` (its snapshot when `starting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    version: i64,
    index: i64,
    starting: bool,
}

#[derive(Debug)]
pub(crate) struct DeltaSourceFactory;

impl SourceFactory for DeltaSourceFactory {
    fn create(
        &self,
        path: &str,
        schema: Option<SchemaRef>,
        options: &HashMap<String, String>,
    ) -> Result<Arc<dyn SourceProvider>> {
        let path = if path.trim().is_empty() {
            option(options, "path").unwrap_or("")
        } else {
            path
        };
        let url = table_url(path)?;
        let dir = super::table_dir(&url);
        let (table_schema, table_id, partition_columns) = {
            let url = url.clone();
            run(async move {
                let table = super::open_table(&url, None).await.map_err(|e| {
                    SluiceError::query(
                        class::DELTA_TABLE_INVALID,
                        format!(
                            "{url} is not a Delta table ({e}): stream from a folder with a \
                             _delta_log, written by a Delta writer first"
                        ),
                    )
                })?;
                let state = table
                    .snapshot()
                    .map_err(|e| super::delta_error("reading", &url, e))?;
                let metadata = state.metadata();
                Ok::<_, SluiceError>((
                    sluice_schema(&state.snapshot().arrow_schema()),
                    metadata.id().to_string(),
                    metadata.partition_columns().to_vec(),
                ))
            })??
        };
        if let Some(user) = &schema {
            let theirs = sluice::schema::schema_to_ddl(&table_schema);
            if sluice::schema::schema_to_ddl(user) != theirs {
                return Err(SluiceError::query(
                    class::DELTA_TABLE_INVALID,
                    format!(
                        "a Delta table has its own schema ({theirs}); the reader's schema differs: \
                         leave .schema(..) out"
                    ),
                ));
            }
        }
        let max_files = match option(options, "maxFilesPerTrigger") {
            None => Some(1000),
            Some(v) => Some(positive(v, "maxFilesPerTrigger")? as usize),
        };
        let max_bytes = option(options, "maxBytesPerTrigger")
            .map(|v| positive(v, "maxBytesPerTrigger"))
            .transpose()?;
        let starting_version = match option(options, "startingVersion") {
            None => None,
            Some(v) if v.trim().eq_ignore_ascii_case("latest") => Some(Start::Latest),
            Some(v) => Some(Start::Version(v.trim().parse::<i64>().map_err(|_| {
                SluiceError::query(
                    class::INVALID_OPTION_VALUE,
                    format!("startingVersion must be a version number or latest, got {v:?}"),
                )
            })?)),
        };
        let starting_timestamp = option(options, "startingTimestamp")
            .map(|t| parse_timestamp_ms(t.trim()))
            .transpose()?;
        if starting_version.is_some() && starting_timestamp.is_some() {
            return Err(SluiceError::query(
                class::INVALID_OPTION_VALUE,
                "give startingVersion or startingTimestamp, not both",
            ));
        }
        Ok(Arc::new(DeltaSourceProvider {
            dir,
            url: url.to_string(),
            schema: table_schema,
            table_id,
            partition_columns,
            max_files,
            max_bytes,
            start: match (starting_version, starting_timestamp) {
                (Some(s), _) => Some(s),
                (_, Some(ms)) => Some(Start::Timestamp(ms)),
                _ => None,
            },
            ignore_deletes: bool_option(options, "ignoreDeletes")?,
            skip_change_commits: bool_option(options, "skipChangeCommits")?
                || bool_option(options, "ignoreChanges")?,
        }))
    }
}

fn positive(v: &str, key: &str) -> Result<u64> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            SluiceError::query(
                class::INVALID_OPTION_VALUE,
                format!("option {key} must be a positive whole number, got {v:?}"),
            )
        })
}

/// `2026-02-14`, `2026-02-14 10:00:00` or `2026-02-14T10:00:00Z` (UTC) in milliseconds.
fn parse_timestamp_ms(s: &str) -> Result<i64> {
    let bad = || {
        SluiceError::query(
            class::INVALID_OPTION_VALUE,
            format!("startingTimestamp {s:?} is not a timestamp: write 2026-02-14 10:00:00"),
        )
    };
    let t = s.trim_end_matches('Z').replace('T', " ");
    for f in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(d) = chrono::NaiveDateTime::parse_from_str(&t, f) {
            return Ok(d.and_utc().timestamp_millis());
        }
    }
    chrono::NaiveDate::parse_from_str(&t, "%Y-%m-%d")
        .map(|d| {
            d.and_hms_opt(0, 0, 0)
                .map(|x| x.and_utc().timestamp_millis())
        })
        .ok()
        .flatten()
        .ok_or_else(bad)
}

/// The table's schema in Sluice's types: timestamps (Delta `timestamp` and `timestamp_ntz`)
/// as UTC microseconds without a zone, as Sluice's `TIMESTAMP`.
fn sluice_schema(schema: &SchemaRef) -> SchemaRef {
    fn t(d: &DataType) -> DataType {
        match d {
            DataType::Timestamp(_, _) => DataType::Timestamp(TimeUnit::Microsecond, None),
            DataType::Struct(fs) => DataType::Struct(
                fs.iter()
                    .map(|f| f.as_ref().clone().with_data_type(t(f.data_type())))
                    .collect(),
            ),
            DataType::List(f) => DataType::List(Arc::new(
                f.as_ref().clone().with_data_type(t(f.data_type())),
            )),
            other => other.clone(),
        }
    }
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_data_type(t(f.data_type())))
            .collect::<Vec<_>>(),
    ))
}

/// Where a new query starts.
#[derive(Debug, Clone, Copy)]
enum Start {
    Version(i64),
    Latest,
    Timestamp(i64),
}

/// The Delta source's definition.
#[derive(Debug)]
pub struct DeltaSourceProvider {
    dir: PathBuf,
    url: String,
    schema: SchemaRef,
    table_id: String,
    partition_columns: Vec<String>,
    max_files: Option<usize>,
    max_bytes: Option<u64>,
    start: Option<Start>,
    ignore_deletes: bool,
    skip_change_commits: bool,
}

impl SourceProvider for DeltaSourceProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn description(&self) -> String {
        format!("DeltaSource[{}]", self.url)
    }
    fn kind(&self) -> &'static str {
        "delta"
    }
    fn format_name(&self) -> String {
        "delta".into()
    }
    fn create_source(&self, _ctx: &SourceContext) -> Result<Box<dyn Source>> {
        Ok(Box::new(DeltaSource {
            def: DeltaSourceProvider {
                dir: self.dir.clone(),
                url: self.url.clone(),
                schema: self.schema.clone(),
                table_id: self.table_id.clone(),
                partition_columns: self.partition_columns.clone(),
                max_files: self.max_files,
                max_bytes: self.max_bytes,
                start: self.start,
                ignore_deletes: self.ignore_deletes,
                skip_change_commits: self.skip_change_commits,
            },
            snapshots: HashMap::new(),
            available_now: None,
            on_workers: None,
        }))
    }
}

/// A running Delta source.
struct DeltaSource {
    def: DeltaSourceProvider,
    /// Snapshot file lists by version (the starting snapshot is read once).
    snapshots: HashMap<i64, Arc<Vec<DataFile>>>,
    /// Trigger.AvailableNow: the newest version when it was prepared.
    available_now: Option<i64>,
    /// The cluster whose workers read the batches' files (`sluice.distributed.workers`).
    on_workers: Option<ReadOnWorkers>,
}

impl DeltaSource {
    fn log_file(&self, version: i64) -> PathBuf {
        self.def
            .dir
            .join("_delta_log")
            .join(format!("{version:020}.json"))
    }

    /// The newest committed version (the highest `N.json` in `_delta_log`).
    fn latest_version(&self) -> Result<i64> {
        let log = self.def.dir.join("_delta_log");
        let rd = sluice::storage::list_dir(&log).map_err(|e| {
            SluiceError::io(
                sluice::Fault::Input,
                format!("listing {}", log.display()),
                e,
            )
        })?;
        let mut latest = -1;
        for e in rd {
            if let Some(v) = e
                .name
                .strip_suffix(".json")
                .filter(|n| n.len() == 20)
                .and_then(|n| n.parse::<i64>().ok())
            {
                latest = latest.max(v);
            }
        }
        Ok(latest)
    }

    /// The data files a commit adds (in log order); none when the commit is skipped.
    fn commit_files(&self, version: i64) -> Result<Vec<DataFile>> {
        let file = self.log_file(version);
        let text = sluice::storage::read_to_string(&file).map_err(|e| {
            SluiceError::io(
                sluice::Fault::Input,
                format!("reading the Delta commit {}", file.display()),
                e,
            )
        })?;
        let (mut adds, mut removes, mut schema_change) = (Vec::new(), 0usize, false);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let action: Value = serde_json::from_str(line).map_err(|e| {
                SluiceError::input(
                    class::DELTA_TABLE_INVALID,
                    format!(
                        "the Delta commit {} is not valid JSON ({e})",
                        file.display()
                    ),
                )
            })?;
            if let Some(add) = action.get("add") {
                if add
                    .get("dataChange")
                    .and_then(Value::as_bool)
                    .unwrap_or(true)
                {
                    adds.push(data_file(add));
                }
            } else if let Some(rm) = action.get("remove") {
                if rm
                    .get("dataChange")
                    .and_then(Value::as_bool)
                    .unwrap_or(true)
                {
                    removes += 1;
                }
            } else if let Some(md) = action.get("metaData") {
                let schema = md.get("schemaString").and_then(Value::as_str).unwrap_or("");
                schema_change |= version > 0 && !schema.is_empty() && !self.same_schema(schema);
            }
        }
        if schema_change {
            return Err(SluiceError::input(
                class::DELTA_TABLE_INVALID,
                format!(
                    "the Delta table {} changed its schema at version {version}: restart the \
                     query to read the new schema (the checkpoint keeps its position)",
                    self.def.url
                ),
            ));
        }
        if removes > 0 {
            if self.def.skip_change_commits || (self.def.ignore_deletes && adds.is_empty()) {
                return Ok(Vec::new());
            }
            return Err(SluiceError::input(
                class::DELTA_TABLE_INVALID,
                format!(
                    "Detected {} data (removed files) in the Delta source {} at version \
                     {version}; a stream reads only appends. Set .option(\"ignoreDeletes\", \
                     \"true\") to skip commits that only delete, or \
                     .option(\"skipChangeCommits\", \"true\") to skip every commit that removes \
                     files",
                    if adds.is_empty() {
                        "deleted"
                    } else {
                        "updated"
                    },
                    self.def.url
                ),
            ));
        }
        Ok(adds)
    }

    fn same_schema(&self, schema_string: &str) -> bool {
        // The field names and types of the table's first schema, compared as JSON.
        let Ok(v) = serde_json::from_str::<Value>(schema_string) else {
            return false;
        };
        let names: Vec<&str> = v
            .get("fields")
            .and_then(Value::as_array)
            .map(|f| f.iter().filter_map(|x| x.get("name")?.as_str()).collect())
            .unwrap_or_default();
        names.len() == self.def.schema.fields().len()
            && names
                .iter()
                .zip(self.def.schema.fields())
                .all(|(a, b)| a == b.name())
    }

    /// The snapshot of `version`: every live data file, by modification time then path.
    fn snapshot(&mut self, version: i64) -> Result<Arc<Vec<DataFile>>> {
        if let Some(s) = self.snapshots.get(&version) {
            return Ok(s.clone());
        }
        let url = url::Url::parse(&self.def.url)
            .map_err(|e| SluiceError::internal(format!("the table URL {}: {e}", self.def.url)))?;
        let partition_columns = self.def.partition_columns.clone();
        let files = run(async move {
            let table = super::open_table(&url, Some(version as u64))
                .await
                .map_err(|e| super::delta_error("reading", &url, e))?;
            let state = table
                .snapshot()
                .map_err(|e| super::delta_error("reading", &url, e))?;
            let adds = state
                .add_actions_table(true)
                .map_err(|e| super::delta_error("reading", &url, e))?;
            let col = |name: &str| -> Option<ArrayRef> { adds.column_by_name(name).cloned() };
            let text = |a: &ArrayRef| -> Result<StringArray> {
                let c = arrow::compute::cast(a, &DataType::Utf8)
                    .map_err(|e| SluiceError::internal(format!("Delta add actions: {e}")))?;
                Ok(c.as_any()
                    .downcast_ref::<StringArray>()
                    .cloned()
                    .unwrap_or_else(|| StringArray::from(Vec::<Option<&str>>::new())))
            };
            let paths = text(&col("path").ok_or_else(|| {
                SluiceError::internal("Delta add actions without a path column")
            })?)?;
            let sizes = col("size_bytes").map(|c| text(&c)).transpose()?;
            let mtimes = col("modification_time").map(|c| text(&c)).transpose()?;
            let parts: Vec<(String, StringArray)> = partition_columns
                .iter()
                .filter_map(|p| col(&format!("partition.{p}")).map(|c| (p.clone(), c)))
                .map(|(p, c)| text(&c).map(|t| (p, t)))
                .collect::<Result<_>>()?;
            let mut files: Vec<(String, DataFile)> = (0..paths.len())
                .map(|i| {
                    let partition_values = parts
                        .iter()
                        .map(|(p, c)| (p.clone(), (!c.is_null(i)).then(|| c.value(i).to_string())))
                        .collect();
                    let mtime = mtimes
                        .as_ref()
                        .filter(|m| !m.is_null(i))
                        .map(|m| m.value(i).to_string())
                        .unwrap_or_default();
                    (
                        mtime,
                        DataFile {
                            path: paths.value(i).to_string(),
                            size: sizes
                                .as_ref()
                                .and_then(|s| s.value(i).parse().ok())
                                .unwrap_or(0),
                            partition_values,
                        },
                    )
                })
                .collect();
            files.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.path.cmp(&b.1.path)));
            Ok::<_, SluiceError>(files.into_iter().map(|(_, f)| f).collect::<Vec<_>>())
        })??;
        let files = Arc::new(files);
        self.snapshots.insert(version, files.clone());
        Ok(files)
    }

    /// The files of `pos`'s version (snapshot or commit).
    fn files_of(&mut self, version: i64, starting: bool) -> Result<Arc<Vec<DataFile>>> {
        if starting {
            self.snapshot(version)
        } else {
            Ok(Arc::new(self.commit_files(version)?))
        }
    }

    /// The position a new query starts before.
    fn initial(&self) -> Result<Position> {
        let latest = self.latest_version()?;
        Ok(match self.def.start {
            None => Position {
                version: latest,
                index: -1,
                starting: true,
            },
            Some(Start::Latest) => Position {
                version: latest + 1,
                index: -1,
                starting: false,
            },
            Some(Start::Version(v)) => {
                if v > latest {
                    return Err(SluiceError::query(
                        class::INVALID_OPTION_VALUE,
                        format!(
                            "startingVersion {v} is after the Delta table's latest version \
                             {latest}: use a version up to {latest}, or latest"
                        ),
                    ));
                }
                Position {
                    version: v,
                    index: -1,
                    starting: false,
                }
            }
            Some(Start::Timestamp(ms)) => {
                let mut first = latest + 1;
                for v in 0..=latest {
                    let t = sluice::storage::metadata(self.log_file(v))
                        .map(|m| m.modified_ms)
                        .unwrap_or(0);
                    if t >= ms {
                        first = v;
                        break;
                    }
                }
                Position {
                    version: first,
                    index: -1,
                    starting: false,
                }
            }
        })
    }

    fn offset(&self, p: Position) -> Offset {
        json!({
            "sourceVersion": 1,
            "reservoirId": self.def.table_id,
            "reservoirVersion": p.version,
            "index": p.index,
            "isStartingVersion": p.starting,
        })
    }

    fn position(&self, o: &Offset) -> Result<Position> {
        let bad = || {
            SluiceError::checkpoint(
                class::CHECKPOINT_INVALID_SOURCE_OFFSET,
                format!("{o} is not a Delta source offset"),
            )
        };
        if let Some(id) = o.get("reservoirId").and_then(Value::as_str) {
            if id != self.def.table_id {
                return Err(SluiceError::checkpoint(
                    class::CHECKPOINT_INVALID_SOURCE_OFFSET,
                    format!(
                        "the checkpoint's Delta offsets are for table {id}, but {} is table {}: \
                         the table was re-created; start the query on a new checkpoint",
                        self.def.url, self.def.table_id
                    ),
                ));
            }
        }
        Ok(Position {
            version: o
                .get("reservoirVersion")
                .and_then(Value::as_i64)
                .ok_or_else(bad)?,
            index: o.get("index").and_then(Value::as_i64).ok_or_else(bad)?,
            starting: o
                .get("isStartingVersion")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// The files after `from`, through version `newest`, within the limits, and the position
    /// after the last one taken (walking from a snapshot into the later commits).
    fn files_after(
        &mut self,
        from: Position,
        newest: i64,
        max_files: Option<usize>,
        max_bytes: Option<u64>,
    ) -> Result<(Vec<DataFile>, Position)> {
        let mut out: Vec<DataFile> = Vec::new();
        let mut bytes = 0u64;
        let mut pos = from;
        loop {
            if pos.version > newest {
                return Ok((out, pos));
            }
            let files = self.files_of(pos.version, pos.starting)?;
            for i in (pos.index + 1) as usize..files.len() {
                let f = &files[i];
                let full = max_files.is_some_and(|m| out.len() >= m)
                    || max_bytes.is_some_and(|m| !out.is_empty() && bytes + f.size > m);
                if full {
                    return Ok((out, pos));
                }
                bytes += f.size;
                out.push(f.clone());
                pos.index = i as i64;
            }
            // This version is read whole: on to the next commit, if there is one.
            if pos.version >= newest {
                return Ok((out, pos));
            }
            pos = Position {
                version: pos.version + 1,
                index: -1,
                starting: false,
            };
        }
    }

    /// The files in `(from, end]`.
    fn files_between(&mut self, from: Position, end: Position) -> Result<Vec<DataFile>> {
        let mut out = Vec::new();
        let mut pos = from;
        loop {
            let at_end = pos.version == end.version && pos.starting == end.starting;
            if pos.version > end.version || (pos.version == end.version && !at_end) {
                return Err(SluiceError::checkpoint(
                    class::CHECKPOINT_INVALID_SOURCE_OFFSET,
                    format!(
                        "the Delta source cannot reach version {} index {} from version {} \
                         index {} of {}: the checkpoint's offsets do not follow each other; \
                         start the query on a new checkpoint",
                        end.version, end.index, from.version, from.index, self.def.url
                    ),
                ));
            }
            let files = self.files_of(pos.version, pos.starting)?;
            let last = if at_end {
                end.index
            } else {
                files.len() as i64 - 1
            };
            if last >= files.len() as i64 {
                return Err(SluiceError::checkpoint(
                    class::CHECKPOINT_INVALID_SOURCE_OFFSET,
                    format!(
                        "the checkpoint's Delta offset names file {last} of version {} of {}, \
                         which has {} files: the table's log changed under the checkpoint; \
                         start the query on a new checkpoint",
                        pos.version,
                        self.def.url,
                        files.len()
                    ),
                ));
            }
            for i in (pos.index + 1)..=last {
                out.push(files[i as usize].clone());
            }
            if at_end {
                return Ok(out);
            }
            pos = Position {
                version: pos.version + 1,
                index: -1,
                starting: false,
            };
        }
    }
}

/// A table's data files as rows: what the driver's source reads, or a worker its run of them.
#[derive(Debug, Clone)]
struct TableFiles {
    dir: PathBuf,
    url: String,
    schema: SchemaRef,
}

/// What a read of data files counted.
#[derive(Debug, Default)]
struct ReadCounted {
    rows: AtomicU64,
    files: AtomicU64,
}

impl TableFiles {
    /// The rows of `files`, in order, a file at a time (each as its Parquet reader gives its
    /// batches, so a batch of files never has to fit in memory), counted in `counted`. A file
    /// that fails ends the rows with its error.
    fn rows(self, files: Vec<DataFile>, counted: Arc<ReadCounted>) -> RowIter {
        let mut files = files.into_iter();
        let mut open: Option<(ParquetRecordBatchReader, DataFile, PathBuf)> = None;
        let mut failed = false;
        Box::new(std::iter::from_fn(move || loop {
            if failed {
                return None;
            }
            let result = match &mut open {
                None => match files.next() {
                    None => return None,
                    Some(f) => self.open(&f).map(|(reader, path)| {
                        counted.files.fetch_add(1, Ordering::Relaxed);
                        open = Some((reader, f, path));
                        None
                    }),
                },
                Some((reader, f, path)) => match reader.next() {
                    None => {
                        open = None;
                        Ok(None)
                    }
                    Some(b) => b
                        .map_err(|e| read_err(path, e))
                        .and_then(|b| self.conform(&b, f))
                        .map(Some),
                },
            };
            match result {
                Ok(None) => continue,
                Ok(Some(b)) => {
                    counted
                        .rows
                        .fetch_add(b.num_rows() as u64, Ordering::Relaxed);
                    return Some(Ok(b));
                }
                Err(e) => {
                    failed = true;
                    return Some(Err(e));
                }
            }
        }))
    }

    /// A data file's reader and its path.
    fn open(&self, f: &DataFile) -> Result<(ParquetRecordBatchReader, PathBuf)> {
        let decoded = percent_decode(&f.path);
        let path = if Path::new(&decoded).is_absolute() || decoded.contains("://") {
            PathBuf::from(&decoded)
        } else {
            self.dir.join(&decoded)
        };
        let file = sluice::storage::open(&path).map_err(|e| {
            SluiceError::io(
                sluice::Fault::Input,
                format!(
                    "opening {} of the Delta table {} (a file the log lists was removed: \
                     restore it, or run VACUUM only past what the stream has read)",
                    path.display(),
                    self.url
                ),
                e,
            )
        })?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.build())
            .map_err(|e| read_err(&path, e))?;
        Ok((reader, path))
    }

    /// A data file's batch with the table's columns: partition values added, types cast.
    fn conform(&self, b: &RecordBatch, f: &DataFile) -> Result<RecordBatch> {
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for field in self.schema.fields() {
            let col = match b.column_by_name(field.name()) {
                Some(c) => c.clone(),
                None => match f.partition_values.get(field.name()) {
                    Some(Some(v)) => {
                        let text: ArrayRef =
                            Arc::new(StringArray::from(vec![v.as_str(); b.num_rows()]));
                        text
                    }
                    _ => new_null_array(field.data_type(), b.num_rows()),
                },
            };
            let col = if col.data_type() == field.data_type() {
                col
            } else {
                arrow::compute::cast(&col, field.data_type()).map_err(|e| {
                    SluiceError::input(
                        class::DELTA_TABLE_INVALID,
                        format!(
                            "column {} of {} does not cast to the table's type: {e}",
                            field.name(),
                            f.path
                        ),
                    )
                })?
            };
            columns.push(col);
        }
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| {
            SluiceError::input(
                class::DELTA_TABLE_INVALID,
                format!("{} does not fit the table's schema: {e}", f.path),
            )
        })
    }
}

/// The kind of a Delta read on a worker (`sluice::source::remote::register_read`).
pub(crate) const READ_KIND: &str = "delta";

/// A worker's read of `files` of `table`, with the session's object store options `storage`.
fn worker_spec(table: &TableFiles, files: &[DataFile], storage: &[(String, String)]) -> Value {
    json!({
        "dir": table.dir.to_string_lossy(),
        "url": table.url,
        "files": files.iter().map(|f| json!({
            "path": f.path,
            "size": f.size,
            "partitionValues": f.partition_values,
        })).collect::<Vec<_>>(),
        "storage": storage,
    })
}

/// Runs a Delta read on this worker (registered as [`READ_KIND`]): its data files read as the
/// driver's source reads them, with the table's `schema`; the rows as they come, then the
/// counts.
pub(crate) fn read_on_worker(spec: &str, schema: SchemaRef) -> Result<ReadItems> {
    let bad = |what: &str| SluiceError::internal(format!("a Delta read's spec: {what}"));
    let v: Value = serde_json::from_str(spec).map_err(|e| bad(&e.to_string()))?;
    let text = |key: &str| v[key].as_str().map(String::from).ok_or_else(|| bad(key));
    let storage: Vec<(String, String)> =
        serde_json::from_value(v["storage"].clone()).map_err(|e| bad(&e.to_string()))?;
    if !storage.is_empty() {
        sluice::storage::configure(storage.iter().map(|(k, v)| (k, v)));
    }
    let files = v["files"]
        .as_array()
        .ok_or_else(|| bad("files"))?
        .iter()
        .map(|f| {
            Ok(DataFile {
                path: f["path"].as_str().ok_or_else(|| bad("path"))?.to_string(),
                size: f["size"].as_u64().unwrap_or(0),
                partition_values: serde_json::from_value(f["partitionValues"].clone())
                    .map_err(|e| bad(&e.to_string()))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let table = TableFiles {
        dir: PathBuf::from(text("dir")?),
        url: text("url")?,
        schema,
    };
    let counted = Arc::new(ReadCounted::default());
    let rows = table.rows(files, Arc::clone(&counted));
    let counts = std::iter::once_with(move || {
        Ok(ReadItem::Counts(ReadCounts {
            rows: counted.rows.load(Ordering::Relaxed),
            files_read: counted.files.load(Ordering::Relaxed),
            ..Default::default()
        }))
    });
    Ok(Box::new(rows.map(|r| r.map(ReadItem::Rows)).chain(counts)))
}

fn read_err(path: &Path, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::input(
        class::FAILED_READ_FILE,
        format!("reading {}: {e}", path.display()),
    )
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn data_file(add: &Value) -> DataFile {
    DataFile {
        path: add
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        size: add.get("size").and_then(Value::as_u64).unwrap_or(0),
        partition_values: add
            .get("partitionValues")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

impl Source for DeltaSource {
    fn default_read_limit(&self) -> ReadLimit {
        match (self.def.max_files, self.def.max_bytes) {
            (_, Some(b)) => ReadLimit::MaxBytes(b),
            (Some(f), None) => ReadLimit::MaxFiles(f),
            (None, None) => ReadLimit::AllAvailable,
        }
    }

    fn latest_offset(
        &mut self,
        start: Option<&Offset>,
        limit: ReadLimit,
    ) -> Result<Option<Offset>> {
        let from = match start {
            Some(o) => self.position(o)?,
            None => self.initial()?,
        };
        let newest = match self.available_now {
            Some(v) => v,
            None => self.latest_version()?,
        };
        let (max_files, max_bytes) = match limit {
            ReadLimit::AllAvailable => (None, None),
            ReadLimit::MaxFiles(n) => (Some(n), None),
            ReadLimit::MaxBytes(b) => (None, Some(b)),
            ReadLimit::MaxRows(_) => (self.def.max_files, None),
        };
        let (_, end) = self.files_after(from, newest, max_files, max_bytes)?;
        if start.is_some() && end == from {
            return Ok(start.cloned());
        }
        if start.is_none() && end == from {
            // Nothing to read yet: no offset until the table has data for this query.
            return Ok(None);
        }
        Ok(Some(self.offset(end)))
    }

    fn prepare_for_trigger_available_now(&mut self) -> Result<()> {
        self.available_now = Some(self.latest_version()?);
        Ok(())
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<SourceBatch> {
        let from = match start {
            Some(o) => self.position(o)?,
            None => self.initial_for(end)?,
        };
        let end = self.position(end)?;
        let files = self.files_between(from, end)?;
        let table = self.table();
        let counted = Arc::new(ReadCounted::default());
        let on_workers = match &self.on_workers {
            Some(on) => Some(self.read_by_workers(on, &files, &counted)?),
            None => None,
        };
        let local = counted.clone();
        let report = Box::new(move || {
            (
                counted.rows.load(Ordering::Relaxed) as usize,
                Default::default(),
            )
        });
        let schema = self.def.schema.clone();
        let lazy = match on_workers {
            Some(reads) => LazyRows::on_workers(schema, reads, report),
            None => LazyRows::new(schema, vec![table.rows(files.clone(), local)], report),
        };
        let mut batch = SourceBatch {
            lazy: Some(lazy),
            ..Default::default()
        };
        batch
            .metrics
            .insert("numFilesRead".into(), files.len().to_string());
        Ok(batch)
    }

    fn read_on_workers(&mut self, on: &ReadOnWorkers) {
        self.on_workers = Some(on.clone());
    }
}

impl DeltaSource {
    /// How the table's data files are read.
    fn table(&self) -> TableFiles {
        TableFiles {
            dir: self.def.dir.clone(),
            url: self.def.url.clone(),
            schema: self.def.schema.clone(),
        }
    }

    /// The rows of `files` read by the workers of `on`: a contiguous run of them each, read
    /// there as here ([`read_on_worker`]), counted in `counted`.
    fn read_by_workers(
        &self,
        on: &ReadOnWorkers,
        files: &[DataFile],
        counted: &Arc<ReadCounted>,
    ) -> Result<Arc<sluice::source::remote::WorkerReads>> {
        sluice::distributed::check_shared(
            &self.def.dir,
            &on.workers,
            &format!("the Delta table {}", self.def.url),
        )?;
        let counted = Arc::clone(counted);
        let counts = move |c: ReadCounts| {
            counted.rows.fetch_add(c.rows, Ordering::Relaxed);
            counted.files.fetch_add(c.files_read, Ordering::Relaxed);
        };
        let (table, storage) = (self.table(), on.storage.clone());
        sluice::source::remote::read_registered_in_runs(
            READ_KIND,
            on,
            files,
            &self.def.schema,
            |run| Ok(worker_spec(&table, run, &storage).to_string()),
            Arc::new(counts),
        )
    }

    /// The start of a first batch that ends at `end` (a replay of batch 0 after a restart):
    /// the beginning of `end`'s snapshot, or of the configured start.
    fn initial_for(&self, end: &Offset) -> Result<Position> {
        let end = self.position(end)?;
        if end.starting {
            return Ok(Position {
                version: end.version,
                index: -1,
                starting: true,
            });
        }
        match self.def.start {
            Some(Start::Version(v)) => Ok(Position {
                version: v,
                index: -1,
                starting: false,
            }),
            _ => self.initial(),
        }
    }
}
