//! The file source: Spark's `FileStreamSource` over a directory of json, csv, parquet or text
//! files.
//!
//! Each micro-batch admits the files that appeared since the last one, in modification-time
//! order (ties by path), up to `maxFilesPerTrigger` files or `maxBytesPerTrigger` bytes. The
//! admitted files are written to the source log `sources/<i>/N` (see `source_log`) *before* the batch
//! runs, and the offset is `{"logOffset":N}`; `get_batch` reads files from the log, never from
//! the directory, so a replayed batch reads exactly the same files after a restart.
//!
//! Options (keys case-insensitive): `maxFilesPerTrigger`, `maxBytesPerTrigger` (mutually
//! exclusive), `latestFirst`, `fileNameOnly`, `maxFileAge` (default 7d, relative to the newest
//! file admitted so far), `pathGlobFilter`, `ignoreMissingFiles`, `ignoreCorruptFiles`,
//! `cleanSource` (only `off`), `failOnFileChange` (Sluice: fail, instead of warning, when a
//! file read before is listed with another size or modification time), plus the format's
//! parsing options (see [`format`]).
//!
//! Listing a local folder goes through a cache (`listing::ListingCache`): a trigger reads
//! the folder's names only when it changed and stats only new, replaced or recently modified
//! files, so its cost follows the new files rather than every file in the folder.

pub(crate) mod compression;
mod format;
pub use sluice_spark::records::parse_json_documents;
mod listing;
use sluice_spark::records::options;
pub(crate) mod remote;
mod source_log;

use crate::error::class;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use serde_json::json;

use self::format::ParseOptions;
use self::listing::{uri_file_name, uri_to_path, Glob, ListedFile, Location};
use self::options::Options;
use self::source_log::{FileEntry, SourceLog};
use crate::error::{Result, SluiceError};
use crate::source::read_ahead::{read_ahead, ReadGate};
use crate::source::{
    LazyRows, Offset, ReadLimit, Source, SourceBatch, SourceContext, SourceProvider,
};

pub use sluice_spark::records::nullable_schema;

/// Spark's default `maxFileAge`: 7 days.
const DEFAULT_MAX_FILE_AGE_MS: i64 = 7 * 24 * 3600 * 1000;

/// The options of the streaming part (Spark's `FileStreamOptions`).
#[derive(Debug, Clone)]
struct StreamOptions {
    max_files_per_trigger: Option<usize>,
    max_bytes_per_trigger: Option<u64>,
    latest_first: bool,
    file_name_only: bool,
    max_file_age_ms: i64,
    path_glob_filter: Option<Glob>,
    /// `failOnFileChange` (Sluice): fail instead of warning when a file already read changes.
    fail_on_file_change: bool,
}

impl StreamOptions {
    fn parse(opts: &Options) -> Result<Self> {
        let max_files = opts.positive("maxFilesPerTrigger")?;
        let max_bytes = opts.positive("maxBytesPerTrigger")?;
        if max_files.is_some() && max_bytes.is_some() {
            return Err(SluiceError::query(
                class::INVALID_OPTION,
                "the options 'maxFilesPerTrigger' and 'maxBytesPerTrigger' cannot be set at the \
                 same time; keep one of them",
            ));
        }
        let max_files_per_trigger = match max_files {
            Some(n) => Some(usize::try_from(n).map_err(|_| {
                Options::invalid(
                    "maxFilesPerTrigger",
                    &n.to_string(),
                    "the number is too large",
                )
            })?),
            None => None,
        };
        let latest_first = opts.bool("latestFirst", false)?;
        let file_name_only = opts.bool("fileNameOnly", false)?;
        let max_file_age_ms = opts
            .duration_ms("maxFileAge")?
            .unwrap_or(DEFAULT_MAX_FILE_AGE_MS);
        if let Some(v) = opts.get("cleanSource") {
            match v.trim().to_ascii_lowercase().as_str() {
                "off" => {}
                "archive" | "delete" => {
                    return Err(SluiceError::not_supported_yet(format!(
                        "the file source option cleanSource={v} is not supported yet; only \
                         cleanSource=off"
                    )))
                }
                _ => {
                    return Err(Options::invalid(
                        "cleanSource",
                        v,
                        "expected off, archive or delete",
                    ))
                }
            }
        }
        let path_glob_filter = match opts.get("pathGlobFilter") {
            None => None,
            Some(g) => Some(Glob::new(g).map_err(|e| {
                Options::invalid("pathGlobFilter", g, &format!("not a valid glob: {e}"))
            })?),
        };
        if opts.bool("recursiveFileLookup", false)? {
            return Err(SluiceError::not_supported_yet(
                "the file source option recursiveFileLookup=true is not supported yet; the \
                 source reads the files directly inside its directory",
            ));
        }
        Ok(Self {
            max_files_per_trigger,
            max_bytes_per_trigger: max_bytes,
            latest_first,
            file_name_only,
            max_file_age_ms,
            path_glob_filter,
            fail_on_file_change: opts.bool("failOnFileChange", false)?,
        })
    }

    fn default_read_limit(&self) -> ReadLimit {
        match (self.max_files_per_trigger, self.max_bytes_per_trigger) {
            (Some(n), _) => ReadLimit::MaxFiles(n),
            (None, Some(b)) => ReadLimit::MaxBytes(b),
            (None, None) => ReadLimit::AllAvailable,
        }
    }
}

/// A streaming file source definition (`read_stream().format("json").load(dir)`).
#[derive(Debug, Clone)]
pub struct FileSourceProvider {
    format: String,
    location: Location,
    schema: SchemaRef,
    stream: StreamOptions,
    parse: Arc<ParseOptions>,
    /// The reader options as given, for a worker to parse the same way.
    options: HashMap<String, String>,
}

impl FileSourceProvider {
    /// `format`: `json` | `csv` | `parquet` | `text`; `options`: Spark reader options (keys
    /// case-insensitive). A schema is required except for `text` (always `value STRING`):
    /// Spark does not infer schemas of streaming file sources.
    pub fn try_new(
        format: &str,
        path: &str,
        schema: Option<SchemaRef>,
        options: &HashMap<String, String>,
    ) -> Result<Self> {
        let format = format.trim().to_ascii_lowercase();
        if !matches!(format.as_str(), "json" | "csv" | "parquet" | "text") {
            return Err(SluiceError::query(
                class::UNSUPPORTED_DATA_SOURCE,
                format!("{format} is not a file format; use json, csv, parquet or text"),
            ));
        }
        let opts = Options::new(options);
        let schema = match schema {
            Some(s) => s,
            None if format == "text" => format::text_schema(),
            None => {
                return Err(SluiceError::query(
                    class::UNABLE_TO_INFER_SCHEMA,
                    format!(
                        "a streaming {format} source needs a schema: give it with \
                         .schema(\"col TYPE, ...\") before .load(). Spark does not infer the \
                         schema of streaming file sources (spark.sql.streaming.schemaInference \
                         is off)"
                    ),
                ))
            }
        };
        let location = Location::parse(path)?;
        // On an object store a folder exists only while objects are under it, so an empty
        // prefix is an empty folder there, not a missing one.
        if !location.is_glob() && !location.exists() && !crate::storage::is_remote(&location.dir) {
            return Err(SluiceError::query(
                class::PATH_NOT_FOUND,
                format!(
                    "Path does not exist: {}. Create the directory before starting the stream \
                     (a glob path such as dir/*.json may match nothing yet)",
                    location.qualified
                ),
            ));
        }
        let stream = StreamOptions::parse(&opts)?;
        let parse = ParseOptions::new(&format, &schema, &opts)?;
        Ok(Self {
            format,
            location,
            schema: parse.schema.clone(),
            stream,
            parse: Arc::new(parse),
            options: options.clone(),
        })
    }

    /// The format (`json`, `csv`, `parquet` or `text`).
    pub fn format(&self) -> &str {
        &self.format
    }
}

impl SourceProvider for FileSourceProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn description(&self) -> String {
        format!("FileStreamSource[{}]", self.location.qualified)
    }

    fn kind(&self) -> &'static str {
        "file"
    }
    fn format_name(&self) -> String {
        self.format.clone()
    }
    fn listed_dir(&self) -> Option<PathBuf> {
        Some(self.location.dir.clone())
    }

    fn create_source(&self, ctx: &SourceContext) -> Result<Box<dyn Source>> {
        Ok(Box::new(self.create_file_source(ctx)?))
    }
}

impl FileSourceProvider {
    /// [`SourceProvider::create_source`], as the file source itself.
    fn create_file_source(&self, ctx: &SourceContext) -> Result<FileSource> {
        let log = SourceLog::new(&ctx.metadata_dir, ctx.log_cleanup);
        crate::storage::create_dir_all(&ctx.metadata_dir).map_err(|e| {
            SluiceError::io(
                crate::error::Fault::Checkpoint,
                format!(
                    "creating the source log directory {}",
                    ctx.metadata_dir.display()
                ),
                e,
            )
        })?;
        log.check_complete()?;
        // Every live log file is read once here; only when one does not parse is it looked for
        // again, to name it with the fix that keeps rows.
        let entries = log.all_entries().or_else(|e| {
            log.check_readable()?;
            Err(e)
        })?;
        let current = match log.latest_id()? {
            Some(id) => i64::try_from(id).map_err(|_| {
                SluiceError::checkpoint(
                    class::CHECKPOINT_CORRUPT_LOG,
                    format!(
                        "the source log {} has an absurd batch id {id}",
                        log.dir().display()
                    ),
                )
            })?,
            None => -1,
        };
        let max_age = if self.stream.latest_first
            && (self.stream.max_files_per_trigger.is_some()
                || self.stream.max_bytes_per_trigger.is_some())
        {
            i64::MAX
        } else {
            self.stream.max_file_age_ms
        };
        let mut seen = SeenFiles::new(max_age, self.stream.file_name_only);
        for e in entries {
            seen.add(&e.path, e.timestamp, e.size);
        }
        seen.purge();
        Ok(FileSource {
            description: self.description(),
            location: self.location.clone(),
            stream: self.stream.clone(),
            parse: self.parse.clone(),
            log,
            seen,
            current,
            available_now: None,
            outstanding: (0, 0),
            cache: BTreeMap::new(),
            changed: (std::collections::HashSet::new(), 0),
            listing: listing::ListingCache::default(),
            memory: ctx.memory,
            next_files: None,
            read_ahead: None,
            format: self.format.clone(),
            options: self.options.clone(),
            on_workers: None,
        })
    }
}

/// Spark's `SeenFilesMap`: files admitted so far (by path, or by name with `fileNameOnly`),
/// forgetting those older than `maxFileAge` before the newest one; such old files are not new.
#[derive(Debug)]
struct SeenFiles {
    /// Key -> (modification time, size when listed: None in entries Spark wrote).
    map: HashMap<String, (i64, Option<u64>)>,
    /// The oldest modification time in `map` (None: unknown, or empty).
    oldest_ts: Option<i64>,
    latest_ts: i64,
    last_purge_ts: i64,
    max_age_ms: i64,
    file_name_only: bool,
}

impl SeenFiles {
    fn new(max_age_ms: i64, file_name_only: bool) -> Self {
        Self {
            map: HashMap::new(),
            oldest_ts: None,
            latest_ts: 0,
            last_purge_ts: i64::MIN,
            max_age_ms,
            file_name_only,
        }
    }

    fn key(&self, uri: &str) -> String {
        if self.file_name_only {
            uri_file_name(uri)
        } else {
            uri.to_string()
        }
    }

    fn add(&mut self, uri: &str, ts: i64, size: Option<u64>) {
        let k = self.key(uri);
        self.map.insert(k, (ts, size));
        if self.map.len() == 1 {
            self.oldest_ts = Some(ts);
        } else {
            self.oldest_ts = self.oldest_ts.map(|t| t.min(ts));
        }
        if ts > self.latest_ts {
            self.latest_ts = ts;
        }
    }

    fn is_new(&self, uri: &str, ts: i64) -> bool {
        ts >= self.last_purge_ts && !self.map.contains_key(&self.key(uri))
    }

    /// The recorded modification time and size of an admitted file that is listed now with
    /// another one (written to after it was listed). Not checked with `fileNameOnly`, where
    /// one name may stand for files of several folders.
    fn changed(&self, f: &ListedFile) -> Option<(i64, Option<u64>)> {
        if self.file_name_only {
            return None;
        }
        let &(ts, size) = self.map.get(&f.uri)?;
        (ts != f.mtime_ms || size.is_some_and(|s| s != f.size)).then_some((ts, size))
    }

    fn purge(&mut self) {
        self.last_purge_ts = self.latest_ts.saturating_sub(self.max_age_ms);
        let limit = self.last_purge_ts;
        // Nothing to forget (the usual case, with maxFileAge's 7 days): no pass over the map,
        // which would make each batch cost grow with every file ever read.
        if self.oldest_ts.is_some_and(|t| t >= limit) {
            return;
        }
        self.map.retain(|_, (ts, _)| *ts >= limit);
        self.oldest_ts = self.map.values().map(|(ts, _)| *ts).min();
    }
}

struct FileSource {
    description: String,
    location: Location,
    stream: StreamOptions,
    parse: Arc<ParseOptions>,
    log: SourceLog,
    seen: SeenFiles,
    /// The newest log offset written (-1: none).
    current: i64,
    /// Trigger.AvailableNow: the files present when the query started.
    available_now: Option<std::collections::HashSet<String>>,
    /// Entries of log offsets written by this run, until committed.
    cache: BTreeMap<i64, Vec<FileEntry>>,
    /// Files (and bytes) listed but not admitted by the last `latest_offset`: Spark's
    /// `numFilesOutstanding` / `numBytesOutstanding` source metrics.
    outstanding: (usize, u64),
    /// Admitted files found changed since they were listed (each reported once), and how many
    /// were found since the last batch (the `numFilesChanged` metric).
    changed: (std::collections::HashSet<String>, u64),
    /// The folder's files between listings ([`Location::list_cached`]).
    listing: listing::ListingCache,
    /// The query's memory budget: how much text a batch's read holds at once.
    memory: crate::conf::MemoryBudget,
    /// The files the next batch is expected to take (the last listing's next files under the
    /// read limit), to read ahead.
    next_files: Option<Vec<String>>,
    /// The next batch's rows, being read while the current batch runs.
    read_ahead: Option<ReadAheadBatch>,
    /// The format and the reader options as given (for a worker to read with).
    format: String,
    options: HashMap<String, String>,
    /// The query runs on a cluster: its workers read the batches' files.
    on_workers: Option<crate::distributed::ReadOnWorkers>,
}

/// A batch's rows read ahead: taken by the batch only if its range and files are these.
struct ReadAheadBatch {
    range: String,
    uris: Vec<String>,
    batch: SourceBatch,
}

/// The files a batch takes from `files` (listed in their order) under `limit`, and the rest.
fn select(mut files: Vec<ListedFile>, limit: ReadLimit) -> (Vec<ListedFile>, Vec<ListedFile>) {
    let take = match limit {
        ReadLimit::MaxFiles(n) => n.max(1),
        ReadLimit::MaxBytes(max) => {
            let mut total: u64 = 0;
            let mut n = 0;
            for f in &files {
                let next = total.saturating_add(f.size);
                if n > 0 && next > max {
                    break;
                }
                total = next;
                n += 1;
            }
            n
        }
        ReadLimit::AllAvailable | ReadLimit::MaxRows(_) => files.len(),
    };
    let rest = files.split_off(take.min(files.len()));
    (files, rest)
}

/// How a batch's range is named in its read errors.
fn range_text(start_id: i64, end_id: i64, description: &str) -> String {
    format!(
        "the batch range ({start_id}, {end_id}] (source log entries {}..={end_id}) of \
         {description}",
        start_id + 1
    )
}

fn parse_offset(o: &Offset, what: &str) -> Result<i64> {
    let v = match o {
        serde_json::Value::Object(m) => m.get("logOffset").and_then(|v| v.as_i64()),
        // Spark's legacy form: a bare number.
        serde_json::Value::Number(n) => n.as_i64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    v.filter(|n| *n >= -1).ok_or_else(|| {
        SluiceError::checkpoint(
            class::CHECKPOINT_INVALID_SOURCE_OFFSET,
            format!(
                "the {what} offset {o} is not a file source offset (expected \
                 {{\"logOffset\":N}}); the checkpoint was written for another source"
            ),
        )
    })
}

impl FileSource {
    fn list_candidates(&mut self) -> Result<Vec<ListedFile>> {
        let mut files = self
            .location
            .list_cached(self.stream.path_glob_filter.as_ref(), &mut self.listing)?;
        for f in &files {
            if let Some(was) = self.seen.changed(f) {
                self.file_changed(f, was)?;
            }
        }
        // Files admitted before are never new again (a file is read once): the listing cache
        // stops handing them back.
        let (seen, listing) = (&self.seen, &mut self.listing);
        files.retain(|f| {
            let new = seen.is_new(&f.uri, f.mtime_ms);
            if !new {
                listing.settle(f);
            }
            new
        });
        if let Some(snapshot) = &self.available_now {
            files.retain(|f| snapshot.contains(&f.uri));
        }
        if self.stream.latest_first {
            files.sort_by(|a, b| b.mtime_ms.cmp(&a.mtime_ms).then_with(|| a.uri.cmp(&b.uri)));
        } else {
            files.sort_by(|a, b| a.mtime_ms.cmp(&b.mtime_ms).then_with(|| a.uri.cmp(&b.uri)));
        }
        Ok(files)
    }

    /// A file read (or admitted) before is listed with another size or modification time:
    /// whatever was written to it after it was listed is never read (Spark says nothing). Warns
    /// once per file and counts it, or fails with `failOnFileChange=true`.
    fn file_changed(&mut self, f: &ListedFile, (ts, size): (i64, Option<u64>)) -> Result<()> {
        if self.changed.0.contains(&f.uri) {
            return Ok(());
        }
        let before = match size {
            Some(s) => format!("{s} bytes, modified at {ts} ms"),
            None => format!("modified at {ts} ms"),
        };
        let msg = format!(
            "the file {} of {} changed after the query listed it ({before}; now {} bytes, \
             modified at {} ms): what was written to it afterwards is not read, since a file \
             is read once. Write each file elsewhere and move it into the folder when complete; \
             to read the new content, put it in the folder under a new name",
            f.uri, self.description, f.size, f.mtime_ms
        );
        if self.stream.fail_on_file_change {
            return Err(SluiceError::input(
                class::FILE_CHANGED_AFTER_READ,
                format!("{msg} (failOnFileChange=true; set it to false to warn instead)"),
            ));
        }
        log::warn!("{msg}");
        self.changed.0.insert(f.uri.clone());
        self.changed.1 += 1;
        Ok(())
    }

    fn offset(&self) -> Option<Offset> {
        (self.current >= 0).then(|| json!({ "logOffset": self.current }))
    }

    fn entries_of(&self, id: i64) -> Result<Vec<FileEntry>> {
        if let Some(e) = self.cache.get(&id) {
            return Ok(e.clone());
        }
        let id = u64::try_from(id)
            .map_err(|_| SluiceError::internal(format!("negative file source log id {id}")))?;
        self.log.batch(id)
    }
}

impl FileSource {
    /// The rows of `files` (URIs, in order), read as the batch runs: contiguous runs of files,
    /// one per core, each read a piece of the memory budget at a time (Spark's tasks each read
    /// their split as they go).
    fn read_lazily(&self, files: Vec<String>, range: String) -> SourceBatch {
        if let Some(on) = &self.on_workers {
            return remote::read_on_workers(self, on, files, range);
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let partitions = threads.min(files.len()).max(1);
        // Fewer files than cores: each file's pieces are parsed on the cores left over (the
        // pieces in flight share the budget as partitions do).
        let fan_out = (threads / partitions).max(1);
        let chunk = self.memory.read_chunk_bytes(partitions * fan_out);
        let counters = Arc::new(format::ReadCounters::default());
        let per = files.len().div_ceil(partitions).max(1);
        let runs: Vec<Vec<String>> = files.chunks(per).map(<[String]>::to_vec).collect();
        let partitions = runs
            .into_iter()
            .map(|run| {
                format::read_files_lazy(
                    self.parse.clone(),
                    run,
                    range.clone(),
                    uri_to_path,
                    chunk,
                    fan_out,
                    counters.clone(),
                )
            })
            .collect();
        self.lazy_batch(partitions, None, counters)
    }

    /// A batch whose rows `partitions` (or the runs of `on_workers`) read as the plan pulls
    /// them, counted in `counters`.
    fn lazy_batch(
        &self,
        partitions: Vec<crate::types::RowIter>,
        on_workers: Option<Arc<crate::source::remote::WorkerReads>>,
        counters: Arc<format::ReadCounters>,
    ) -> SourceBatch {
        let report = move || {
            let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
            let mut metrics = BTreeMap::new();
            metrics.insert(
                "numFilesRead".to_string(),
                get(&counters.files_read).to_string(),
            );
            metrics.insert(
                "numMalformedRecords".to_string(),
                get(&counters.malformed).to_string(),
            );
            metrics.insert(
                "numDroppedMalformedRecords".to_string(),
                get(&counters.dropped).to_string(),
            );
            (get(&counters.rows) as usize, metrics)
        };
        SourceBatch {
            lazy: Some(LazyRows {
                schema: self.parse.schema.clone(),
                partitions,
                on_workers,
                report: Box::new(report),
            }),
            ..Default::default()
        }
    }
}

impl Source for FileSource {
    fn default_read_limit(&self) -> ReadLimit {
        self.stream.default_read_limit()
    }

    fn read_on_workers(&mut self, on: &crate::distributed::ReadOnWorkers) {
        self.on_workers = Some(on.clone());
    }

    fn latest_offset(
        &mut self,
        start: Option<&Offset>,
        limit: ReadLimit,
    ) -> Result<Option<Offset>> {
        let start_id = match start {
            Some(o) => parse_offset(o, "start")?,
            None => -1,
        };
        if start_id > self.current {
            return Err(SluiceError::checkpoint(
                class::CHECKPOINT_MISSING_SOURCE_LOG,
                format!(
                    "the query's offsets say {} reached log offset {start_id}, but its source \
                     log {} ends at {}: the source log was deleted or truncated. Restore it, or \
                     start the query with a new checkpoint location",
                    self.description,
                    self.log.dir().display(),
                    self.current
                ),
            ));
        }
        if start_id < self.current {
            // The source log is ahead of the query's offsets: a run logged the files of its
            // next batch and stopped before `offsets/N`. That entry is the batch, as it was
            // cut by the read limit (Spark lists again and adds the next files to the same
            // batch, so a restart can run two files under maxFilesPerTrigger=1).
            return Ok(Some(json!({ "logOffset": start_id + 1 })));
        }
        let files = self.list_candidates()?;
        let (all_files, all_bytes) = (files.len(), files.iter().map(|f| f.size).sum::<u64>());
        let (selected, rest) = select(files, limit);
        // The files the next batch takes if no other file comes first: read ahead while this
        // batch runs (see `get_batch`).
        self.next_files = (!selected.is_empty() && !rest.is_empty())
            .then(|| select(rest, limit).0.into_iter().map(|f| f.uri).collect());
        self.outstanding = (
            all_files - selected.len(),
            all_bytes.saturating_sub(selected.iter().map(|f| f.size).sum::<u64>()),
        );
        if !selected.is_empty() {
            let id = self.current + 1;
            let entries: Vec<FileEntry> = selected
                .iter()
                .map(|f| FileEntry {
                    path: f.uri.clone(),
                    timestamp: f.mtime_ms,
                    batch_id: id,
                    size: Some(f.size),
                })
                .collect();
            let uid = u64::try_from(id)
                .map_err(|_| SluiceError::internal(format!("negative file source log id {id}")))?;
            self.log.add(uid, entries.clone())?;
            for f in &selected {
                self.seen.add(&f.uri, f.mtime_ms, Some(f.size));
            }
            self.seen.purge();
            self.current = id;
            self.cache.insert(id, entries);
        }
        Ok(self.offset())
    }

    fn prepare_for_trigger_available_now(&mut self) -> Result<()> {
        // The files present now (Spark's snapshot of Trigger.AvailableNow), by URI: later
        // listings are cut to them.
        let listed = self
            .location
            .list_cached(self.stream.path_glob_filter.as_ref(), &mut self.listing)?;
        self.available_now = Some(listed.into_iter().map(|f| f.uri).collect());
        Ok(())
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<SourceBatch> {
        let start_id = match start {
            Some(o) => parse_offset(o, "start")?,
            None => -1,
        };
        let end_id = parse_offset(end, "end")?;
        if end_id < start_id {
            return Err(SluiceError::internal(format!(
                "{}: get_batch with end offset {end_id} before start offset {start_id}",
                self.description
            )));
        }
        let range = range_text(start_id, end_id, &self.description);
        let mut files = Vec::new();
        for id in start_id + 1..=end_id {
            files.extend(self.entries_of(id)?);
        }
        let uris: Vec<String> = files.into_iter().map(|f| f.path).collect();
        // The rows read ahead while the last batch ran, if this is the range read.
        let mut batch = match self.read_ahead.take() {
            Some(ahead) if ahead.range == range && ahead.uris == uris => ahead.batch,
            _ => self.read_lazily(uris, range),
        };
        // The next batch's files, read once this batch's read has ended.
        if let Some(lazy) = batch.lazy.as_mut() {
            let (gate, counted) = ReadGate::over(std::mem::take(&mut lazy.partitions));
            lazy.partitions = counted;
            match self.next_files.take() {
                Some(next) if end_id == self.current => {
                    let next_range = range_text(end_id, end_id + 1, &self.description);
                    let mut ahead = self.read_lazily(next.clone(), next_range.clone());
                    if let Some(next_lazy) = ahead.lazy.as_mut() {
                        let ahead_bytes = self.memory.read_chunk_bytes(next_lazy.partitions.len());
                        let partitions = std::mem::take(&mut next_lazy.partitions);
                        next_lazy.partitions = read_ahead(partitions, gate, ahead_bytes);
                    }
                    self.read_ahead = Some(ReadAheadBatch {
                        range: next_range,
                        uris: next,
                        batch: ahead,
                    });
                }
                _ => {}
            }
        }
        batch
            .metrics
            .insert("numFilesOutstanding".into(), self.outstanding.0.to_string());
        batch
            .metrics
            .insert("numBytesOutstanding".into(), self.outstanding.1.to_string());
        batch.metrics.insert(
            "numFilesChanged".into(),
            std::mem::take(&mut self.changed.1).to_string(),
        );
        Ok(batch)
    }

    fn commit(&mut self, end: &Offset) -> Result<()> {
        let end_id = parse_offset(end, "committed")?;
        self.cache.retain(|id, _| *id > end_id);
        Ok(())
    }
}

fn source_batch(out: format::AssembledRows) -> SourceBatch {
    let mut metrics = BTreeMap::new();
    metrics.insert("numFilesRead".to_string(), out.files_read.to_string());
    metrics.insert("numMalformedRecords".to_string(), out.malformed.to_string());
    metrics.insert(
        "numDroppedMalformedRecords".to_string(),
        out.dropped.to_string(),
    );
    SourceBatch {
        batches: out.batches,
        metrics,
        lazy: None,
    }
}

/// Batch (non-streaming) read of files with the same parsing rules as the file source; used for
/// static tables and batch reads. A directory among `paths` stands for its visible files (in
/// name order). The batches have the schema [`nullable_schema`]`(schema)`.
pub fn read_files(
    format: &str,
    paths: &[PathBuf],
    schema: &SchemaRef,
    options: &HashMap<String, String>,
) -> Result<SourceBatch> {
    let format = format.trim().to_ascii_lowercase();
    let opts = Options::new(options);
    let parse = ParseOptions::new(&format, schema, &opts)?;
    let mut files: Vec<PathBuf> = Vec::new();
    for p in paths {
        let abs = listing::absolute(p)?;
        if crate::storage::is_dir(&abs) {
            let loc = Location::parse(&abs.to_string_lossy())?;
            let mut listed = loc.list(None)?;
            listed.sort_by(|a, b| a.path.cmp(&b.path));
            files.extend(listed.into_iter().map(|f| f.path));
        } else {
            files.push(abs);
        }
    }
    let uris: Vec<String> = files.iter().map(|p| listing::path_to_uri(p)).collect();
    let refs: Vec<&str> = uris.iter().map(String::as_str).collect();
    let out = format::read_files_parallel(&parse, &refs, "a batch read", uri_to_path)?;
    Ok(source_batch(out))
}

#[cfg(test)]
mod tests;

/// Parses `bytes` as JSON lines, as CSV (with a header) and as one `from_json` document, with
/// a schema of every supported type (fuzzing entry point).
#[doc(hidden)]
pub fn fuzz_parse(bytes: &[u8]) {
    let Ok(schema) = crate::schema::parse_ddl_schema(
        "i INT, l BIGINT, d DOUBLE, f FLOAT, b BOOLEAN, s STRING, t TIMESTAMP, dt DATE, m DECIMAL(10,2), _corrupt_record STRING",
    ) else {
        return;
    };
    let text = String::from_utf8_lossy(bytes);
    let _ = parse_json_documents(&[Some(&text)], &schema);
    let _ = format::fuzz_text("json", &text, &schema);
    let _ = format::fuzz_text("csv", &text, &schema);
    if let Ok(s) = std::str::from_utf8(bytes) {
        let _ = crate::schema::parse_ddl_schema(s);
    }
}
