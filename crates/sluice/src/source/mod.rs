//! Sources: where a stream's rows come from.
//!
//! A *source provider* is the definition a user builds with `session.read_stream()`; at query
//! start it creates a [`Source`] bound to the query's checkpoint (`sources/<i>/`). The loop in
//! `query/` asks each source for its latest offset, logs the offsets in `offsets/N`, then asks
//! for the rows of the range `(start, end]`.

pub mod file;
pub mod memory;
pub mod nexmark;
pub mod rate;
pub(crate) mod read_ahead;
pub mod remote;
pub mod socket;

use crate::error::class;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::error::Result;

pub use crate::types::Offset;

/// How much a source may admit into one batch (Spark's `ReadLimit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadLimit {
    /// Everything available (Trigger::Once, or a source without a limit option).
    AllAvailable,
    /// At most this many files (`maxFilesPerTrigger`), always at least one.
    MaxFiles(usize),
    /// At most this many bytes (`maxBytesPerTrigger`), always at least one file.
    MaxBytes(u64),
    /// At most this many rows (`maxOffsetsPerTrigger`, `rowsPerBatch`).
    MaxRows(u64),
}

/// What a source is given when a query starts.
#[derive(Debug, Clone)]
pub struct SourceContext {
    /// The source's position among the query's sources (`i` in `sources/<i>/`).
    pub index: usize,
    /// `<checkpoint>/sources/<i>`: the source's own metadata directory. Not created yet.
    pub metadata_dir: PathBuf,
    /// How a compactible source log (the file source's) deletes superseded files
    /// (`spark.sql.streaming.fileSource.log.*`).
    pub log_cleanup: crate::checkpoint::LogCleanup,
    /// The query's memory budget (`sluice.memory.limit`): how much a source reads at once.
    pub memory: crate::conf::MemoryBudget,
}

/// Rows of one batch range plus per-batch metrics for progress (`sources[i].metrics`).
#[derive(Debug, Default)]
pub struct SourceBatch {
    /// The rows of the range, read before the batch runs.
    pub batches: Vec<RecordBatch>,
    /// Or the rows of the range read while the batch runs, piece by piece (as Spark's
    /// `getBatch` returns a DataFrame that reads when executed): a batch's input never has to
    /// fit in memory at once. `batches` is then empty.
    pub lazy: Option<LazyRows>,
    /// E.g. `numMalformedRecords`, `numFilesRead`. Values are strings, as in Spark's progress.
    pub metrics: BTreeMap<String, String>,
}

impl SourceBatch {
    /// The number of rows in `batches` (a lazy read counts its rows in [`LazyRows::report`]).
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// The batch with a lazy read read now: its rows in `batches`, its metrics merged.
    pub fn materialize(mut self) -> Result<SourceBatch> {
        if let Some(mut lazy) = self.lazy.take() {
            let partitions = lazy.take_partitions();
            let report = lazy.report;
            for part in partitions {
                for b in part {
                    self.batches.push(b?);
                }
            }
            self.metrics.extend(report().1);
        }
        Ok(self)
    }
}

pub use crate::types::RowIter;

/// A range's rows, read as the batch runs: partitions the plan reads in parallel (their
/// concatenation in order is the range's rows), and what the read counted.
pub struct LazyRows {
    /// The schema of every batch (the source's schema).
    pub schema: SchemaRef,
    /// The partitions, in order (none when the workers read them).
    pub partitions: Vec<RowIter>,
    /// Or the read on the workers whose runs are the partitions, in order: the batch's plan
    /// starts them, with the stateless plan over them that runs there too.
    pub on_workers: Option<Arc<remote::WorkerReads>>,
    /// The rows read and the metrics (`numFilesRead`, `numMalformedRecords`, ..) once the
    /// partitions have run out; merged over the metrics of the [`SourceBatch`].
    pub report: Box<dyn Fn() -> (usize, BTreeMap<String, String>) + Send + Sync>,
}

/// What a lazy read reports once it ran ([`LazyRows::report`]).
pub type ReadReport = Box<dyn Fn() -> (usize, BTreeMap<String, String>) + Send + Sync>;

impl LazyRows {
    /// A read of `partitions` here.
    pub fn new(schema: SchemaRef, partitions: Vec<RowIter>, report: ReadReport) -> Self {
        Self {
            schema,
            partitions,
            on_workers: None,
            report,
        }
    }

    /// A read on the workers.
    pub fn on_workers(
        schema: SchemaRef,
        reads: Arc<remote::WorkerReads>,
        report: ReadReport,
    ) -> Self {
        Self {
            schema,
            partitions: Vec::new(),
            on_workers: Some(reads),
            report,
        }
    }

    /// The partitions, in order (a read on the workers' runs each started, plainly, when
    /// first pulled).
    pub fn take_partitions(&mut self) -> Vec<RowIter> {
        match self.on_workers.take() {
            Some(reads) => reads.partitions(),
            None => std::mem::take(&mut self.partitions),
        }
    }
}

impl Debug for LazyRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.on_workers {
            Some(reads) => write!(f, "LazyRows({reads:?})"),
            None => write!(f, "LazyRows({} partitions)", self.partitions.len()),
        }
    }
}

/// The definition of a streaming source, built by `read_stream()`; cheap to clone/share.
pub trait SourceProvider: Debug + Send + Sync {
    /// The schema of the rows the source produces.
    fn schema(&self) -> SchemaRef;
    /// A short description for progress (`sources[i].description`), e.g. `FileStreamSource[file:/data/in]`.
    fn description(&self) -> String;
    /// Kind of source for compatibility checks on restart (`file`, `rate`, `memory`, ...).
    fn kind(&self) -> &'static str;
    /// Creates the running source for one query run.
    fn create_source(&self, ctx: &SourceContext) -> Result<Box<dyn Source>>;
    /// The name used in "Data source X does not support continuous processing." (the format).
    fn format_name(&self) -> String {
        self.kind().to_string()
    }
    /// The directory the source lists for new files (file sources), so a sink or checkpoint
    /// that would write into it can be refused at start.
    fn listed_dir(&self) -> Option<PathBuf> {
        None
    }
    /// Whether the source can run under `Trigger::Continuous` (Spark: rate and kafka only).
    fn supports_continuous(&self) -> bool {
        false
    }
    /// Continuous processing: a reader positioned after `start` (the offset logged in the last
    /// committed epoch's `offsets/E`; None for a new query).
    fn create_continuous_reader(
        &self,
        _ctx: &SourceContext,
        _start: Option<&Offset>,
    ) -> Result<Box<dyn ContinuousReader>> {
        Err(crate::error::SluiceError::query(
            class::UNSUPPORTED_STREAMING_OPERATION,
            format!(
                "Data source {} does not support continuous processing.",
                self.format_name()
            ),
        ))
    }
}

/// A running source under continuous processing (Spark's `ContinuousPartitionReader`): returns
/// whatever rows are available right now, one small slice at a time, and knows its position.
pub trait ContinuousReader: Send {
    /// The rows available now, waiting at most `max_wait` for the first one (empty if none).
    fn poll(&mut self, max_wait: std::time::Duration) -> Result<Vec<RecordBatch>>;
    /// The position after every row returned so far (what `offsets/E` logs).
    fn offset(&self) -> Offset;
    /// Whether every row available in the source right now has been returned by `poll`.
    fn caught_up(&mut self) -> Result<bool>;
}

/// A running source.
///
/// Contract: `get_batch(start, end)` MUST return the same rows for the same range, across
/// restarts. A source NEVER skips or repeats data between consecutive ranges.
pub trait Source: Send {
    /// The default read limit from the source's options (`maxFilesPerTrigger`, ...).
    fn default_read_limit(&self) -> ReadLimit {
        ReadLimit::AllAvailable
    }
    /// The end offset of the next batch, given the current `start` (None for a new query) and a
    /// read limit. Returns `start` unchanged (or None) when there is no new data.
    fn latest_offset(&mut self, start: Option<&Offset>, limit: ReadLimit)
        -> Result<Option<Offset>>;
    /// Trigger::AvailableNow: remember what is available now; later `latest_offset` calls never go
    /// past it (but still honour read limits, so it may take several batches).
    fn prepare_for_trigger_available_now(&mut self) -> Result<()> {
        Ok(())
    }
    /// The rows in `(start, end]`. MUST return the same rows for the same range every time,
    /// across restarts: a replayed batch is computed from exactly the rows it had.
    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<SourceBatch>;
    /// Everything up to `end` is committed and will never be asked for again.
    fn commit(&mut self, _end: &Offset) -> Result<()> {
        Ok(())
    }
    /// The query runs on a cluster: the source may have the workers read its batches (`on`).
    /// The default reads them here.
    fn read_on_workers(&mut self, _on: &crate::distributed::ReadOnWorkers) {}
}
