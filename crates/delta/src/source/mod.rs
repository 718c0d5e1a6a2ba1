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
//!
//! The files: `options.rs` (the `delta` format's factory: the options and the table's schema),
//! `delta_log.rs` (the table's log: versions, snapshots, commits, and offsets as positions in them),
//! `files.rs` (a batch's data files read as rows, here or on the workers); this one holds the
//! source and its provider.

mod delta_log;
mod files;
mod options;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use sluice::distributed::{ReadCounts, ReadOnWorkers};
use sluice::source::{
    LazyRows, Offset, ReadLimit, Source, SourceBatch, SourceContext, SourceProvider,
};
use sluice::Result;

pub(crate) use files::{read_on_worker, READ_KIND};
use files::{worker_spec, ReadCounted, TableFiles};
pub(crate) use options::DeltaSourceFactory;
use options::Start;

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
