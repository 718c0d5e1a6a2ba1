//! Sinks: where each batch's result rows go.
//!
//! A *sink provider* is the definition built by `write_stream()`; at query start it creates a
//! [`Sink`]. The loop calls [`Sink::add_batch`] once per batch, after `offsets/N` and before
//! `commits/N`.

pub mod console;
pub mod file;
pub mod foreach;
pub mod memory;

use std::fmt::Debug;
use std::path::PathBuf;

use arrow::datatypes::SchemaRef;

use crate::error::{Result, SluiceError};
use crate::types::OutputMode;
use crate::types::RowIter;

pub use crate::types::BatchData;

/// A batch's result rows as the plan produces them: one partition per task, each an iterator
/// that runs the plan as it is pulled. A sink that writes rows as they come holds a piece of
/// the batch at a time, not the batch ([`Sink::add_batch_streams`]).
pub struct BatchStreams {
    schema: SchemaRef,
    partitions: Vec<RowIter>,
}

impl Debug for BatchStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BatchStreams({} partitions)", self.partitions.len())
    }
}

impl BatchStreams {
    /// The partitions of a batch whose rows all have `schema`.
    pub fn new(schema: SchemaRef, partitions: Vec<RowIter>) -> Self {
        Self { schema, partitions }
    }

    /// Rows already in memory, one partition per entry.
    pub fn from_data(data: BatchData) -> Self {
        let partitions = data
            .partitions
            .into_iter()
            .map(|p| Box::new(p.into_iter().map(Ok)) as RowIter)
            .collect();
        Self::new(data.schema, partitions)
    }

    /// The schema of every batch.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The partitions, to be pulled at the same time (one thread each): a plan's partitions
    /// may wait on one another.
    pub fn into_partitions(self) -> Vec<RowIter> {
        self.partitions
    }

    /// Runs every partition at once and keeps all their rows, in partition order.
    pub fn collect(self) -> Result<BatchData> {
        let schema = self.schema;
        let partitions = for_each_partition(self.partitions, |_, rows| rows.collect())?;
        Ok(BatchData { schema, partitions })
    }

    /// Runs every partition to its end and drops the rows (a batch a sink already holds: its
    /// plan still runs, so that what it observes, such as event times, is the same).
    pub fn discard(self) -> Result<()> {
        for_each_partition(self.partitions, |_, mut rows| {
            rows.try_for_each(|b| b.map(drop))
        })?;
        Ok(())
    }
}

/// Runs `f(index, partition)` for every partition at the same time, the first on this thread
/// and the others on threads of their own; the results in partition order.
pub fn for_each_partition<T: Send>(
    partitions: Vec<RowIter>,
    f: impl Fn(usize, RowIter) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let f = &f;
    std::thread::scope(|scope| {
        let mut parts = partitions.into_iter().enumerate();
        let first = parts.next();
        let handles: Vec<_> = parts.map(|(i, p)| scope.spawn(move || f(i, p))).collect();
        let first = first.map(|(i, p)| f(i, p));
        first
            .into_iter()
            .chain(handles.into_iter().map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(SluiceError::internal(
                        "a thread running a batch's partition panicked",
                    ))
                })
            }))
            .collect()
    })
}

/// What a sink is given when a query starts.
#[derive(Debug, Clone)]
pub struct SinkContext {
    /// The query's checkpoint directory.
    pub checkpoint_dir: PathBuf,
    /// The query's output mode (`outputMode`).
    pub output_mode: OutputMode,
    /// The query's name (`queryName`), if any.
    pub query_name: Option<String>,
    /// The query's id (the checkpoint's `metadata`), stable across restarts.
    pub query_id: String,
    /// The newest batch the checkpoint planned (`offsets/N`) when the query started: the run
    /// re-runs it if it has no `commits/N`, else plans `N + 1`. None for a new query.
    pub last_planned: Option<u64>,
    /// How a compactible sink log (the file sink's manifest) deletes superseded files
    /// (`spark.sql.streaming.fileSink.log.*`).
    pub log_cleanup: crate::checkpoint::LogCleanup,
    /// The query's memory budget (`sluice.memory.limit`): how much a sink buffers.
    pub memory: crate::conf::MemoryBudget,
}

/// The definition of a sink, built by `write_stream()`.
pub trait SinkProvider: Debug + Send + Sync {
    /// A short description for progress (`sink.description`), e.g. `FileSink[/data/out]`.
    fn description(&self) -> String;
    /// The kind of sink for restart checks: `file`, `kafka`, or `other`.
    fn kind(&self) -> &'static str {
        "other"
    }
    /// Output modes this sink accepts (Spark: the file sink is append-only).
    fn supports_output_mode(&self, _mode: OutputMode) -> bool {
        true
    }
    /// Creates the running sink, once per query start (and once per side output).
    fn create_sink(&self, ctx: &SinkContext) -> Result<Box<dyn Sink>>;
    /// The directory the sink writes files into (file sinks), checked against the sources'.
    fn output_dir(&self) -> Option<PathBuf> {
        None
    }
    /// Whether the sink can run under `Trigger::Continuous` (memory, console, foreach, kafka).
    fn supports_continuous(&self) -> bool {
        false
    }
}

/// A running sink.
///
/// Contract: `add_batch(batch_id, ..)` MUST add a batch's rows once, even when called again with
/// the same id after a crash (the file sink checks its manifest log; `foreach_batch` passes the
/// id to the user, who can dedupe by it).
pub trait Sink: Send {
    /// Writes the rows of batch `batch_id`. It MUST add them once, even when called
    /// again with the same id after a crash.
    fn add_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()>;
    /// Writes the rows of batch `batch_id` as the plan produces them. The same contract as
    /// [`Self::add_batch`], and every partition must be run to its end (or [`BatchStreams::discard`]ed):
    /// the batch is not done until the plan has run. The default collects the rows and calls
    /// `add_batch`; a sink that can write rows as they come (the file sink) holds less.
    fn add_batch_streams(&mut self, batch_id: u64, rows: BatchStreams) -> Result<()> {
        let data = rows.collect()?;
        self.add_batch(batch_id, &data)
    }
    /// Sink metrics for progress (`sink.metrics`).
    fn metrics(&self) -> std::collections::BTreeMap<String, String> {
        Default::default()
    }
    /// Continuous processing: writes rows of epoch `epoch` right away. Called many times per
    /// epoch, once per slice of input; rows are never deduplicated (at-least-once).
    fn write_continuous(&mut self, epoch: u64, _data: &BatchData) -> Result<()> {
        Err(SluiceError::not_supported_yet(format!(
            "this sink cannot take continuous rows (epoch {epoch})"
        )))
    }
    /// Continuous processing: epoch `epoch` ends; every row written for it must be durable
    /// (flushed) when this returns, before `commits/E` is written.
    fn commit_epoch(&mut self, _epoch: u64) -> Result<()> {
        Ok(())
    }
}
