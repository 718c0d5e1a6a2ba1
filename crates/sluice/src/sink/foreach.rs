//! `foreach_batch`, `foreach` and `noop` sinks.

use crate::error::class;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::ScalarValue;

use super::{BatchData, Sink, SinkContext, SinkProvider};
use crate::error::{Result, SluiceError};

/// The user function of `foreach_batch`: the batch's rows and its id.
pub type ForeachBatchFn = Arc<dyn Fn(&BatchData, u64) -> Result<()> + Send + Sync>;

/// Calls a user function with every batch (Spark's `foreachBatch`). At-least-once: a replayed
/// batch is passed again with the same id and rows, so the function can dedupe by id.
pub struct ForeachBatchSinkProvider {
    f: ForeachBatchFn,
}

impl ForeachBatchSinkProvider {
    /// A sink that calls `f` with each batch's rows and id.
    pub fn new(f: ForeachBatchFn) -> Self {
        Self { f }
    }
}

impl std::fmt::Debug for ForeachBatchSinkProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ForeachBatchSink")
    }
}

impl SinkProvider for ForeachBatchSinkProvider {
    fn description(&self) -> String {
        "ForeachBatchSink".into()
    }
    fn create_sink(&self, _ctx: &SinkContext) -> Result<Box<dyn Sink>> {
        Ok(Box::new(ForeachBatchSink { f: self.f.clone() }))
    }
}

struct ForeachBatchSink {
    f: ForeachBatchFn,
}

impl Sink for ForeachBatchSink {
    fn add_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()> {
        (self.f)(data, batch_id)
    }
}

/// One row handed to a [`ForeachWriter`].
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    batch: &'a RecordBatch,
    index: usize,
}

impl<'a> Row<'a> {
    /// Row `index` of `batch`.
    pub fn new(batch: &'a RecordBatch, index: usize) -> Self {
        Self { batch, index }
    }
    /// The value of a column by name (a typed `ScalarValue`, null included).
    pub fn get(&self, column: &str) -> Result<ScalarValue> {
        let i = self.batch.schema().index_of(column).map_err(|_| {
            SluiceError::query(
                class::UNRESOLVED_COLUMN,
                format!("the row has no column {column:?}"),
            )
        })?;
        self.get_index(i)
    }
    /// The value of a column by position.
    pub fn get_index(&self, i: usize) -> Result<ScalarValue> {
        Ok(ScalarValue::try_from_array(
            self.batch.column(i),
            self.index,
        )?)
    }
    /// Column names, in order.
    pub fn columns(&self) -> Vec<String> {
        self.batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }
}

/// Per-row output (Spark's `ForeachWriter`). For every partition of every batch (epoch):
/// `open(partition, epoch)`; if it returns true, `process` for each row; `close` is always called
/// after a successful `open`, with the error if processing failed.
pub trait ForeachWriter: Send {
    /// Starts partition `partition_id` of batch (epoch) `epoch_id`; `false` skips its rows.
    fn open(&mut self, partition_id: usize, epoch_id: u64) -> Result<bool>;
    /// Writes one row; an error stops the partition and fails the batch.
    fn process(&mut self, row: Row<'_>) -> Result<()>;
    /// Ends the partition (always, once `open` returned `Ok`), with the error if `process` failed.
    fn close(&mut self, error: Option<&SluiceError>);
}

/// Makes one writer per partition and epoch.
pub type ForeachWriterFactory = Arc<dyn Fn() -> Box<dyn ForeachWriter> + Send + Sync>;

/// The `foreach` sink.
pub struct ForeachSinkProvider {
    factory: ForeachWriterFactory,
}

impl ForeachSinkProvider {
    /// A sink that writes each partition of each batch with a new writer from `factory`.
    pub fn new(factory: ForeachWriterFactory) -> Self {
        Self { factory }
    }
}

impl std::fmt::Debug for ForeachSinkProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ForeachSink")
    }
}

impl SinkProvider for ForeachSinkProvider {
    fn description(&self) -> String {
        "ForeachSink".into()
    }
    fn create_sink(&self, _ctx: &SinkContext) -> Result<Box<dyn Sink>> {
        Ok(Box::new(ForeachSink {
            factory: self.factory.clone(),
            open: None,
        }))
    }
    fn supports_continuous(&self) -> bool {
        true
    }
}

struct ForeachSink {
    factory: ForeachWriterFactory,
    /// Continuous processing: the writer of the current epoch (partition 0), whether its `open`
    /// accepted the epoch; closed when the epoch commits.
    open: Option<(u64, Box<dyn ForeachWriter>, bool)>,
}

impl Sink for ForeachSink {
    fn add_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()> {
        for (partition_id, batches) in data.partitions.iter().enumerate() {
            let mut writer = (self.factory)();
            if !writer.open(partition_id, batch_id)? {
                writer.close(None);
                continue;
            }
            let mut result = Ok(());
            'rows: for b in batches {
                for i in 0..b.num_rows() {
                    if let Err(e) = writer.process(Row::new(b, i)) {
                        result = Err(e);
                        break 'rows;
                    }
                }
            }
            writer.close(result.as_ref().err());
            result?;
        }
        Ok(())
    }

    fn write_continuous(&mut self, epoch: u64, data: &BatchData) -> Result<()> {
        if self.open.as_ref().is_some_and(|(e, _, _)| *e != epoch) {
            self.commit_epoch(epoch.saturating_sub(1))?;
        }
        if self.open.is_none() {
            let mut writer = (self.factory)();
            let accepted = writer.open(0, epoch)?;
            self.open = Some((epoch, writer, accepted));
        }
        let Some((_, writer, accepted)) = self.open.as_mut() else {
            return Ok(());
        };
        if !*accepted {
            return Ok(());
        }
        for b in data.batches() {
            for i in 0..b.num_rows() {
                if let Err(e) = writer.process(Row::new(b, i)) {
                    if let Some((_, mut w, _)) = self.open.take() {
                        w.close(Some(&e));
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn commit_epoch(&mut self, _epoch: u64) -> Result<()> {
        if let Some((_, mut w, _)) = self.open.take() {
            w.close(None);
        }
        Ok(())
    }
}

/// Discards every batch (Spark's `noop` format; for benchmarks).
#[derive(Debug)]
pub struct NoopSinkProvider;

impl SinkProvider for NoopSinkProvider {
    fn description(&self) -> String {
        "NoopSink".into()
    }
    fn create_sink(&self, _ctx: &SinkContext) -> Result<Box<dyn Sink>> {
        Ok(Box::new(NoopSink))
    }
}

struct NoopSink;

impl Sink for NoopSink {
    fn add_batch(&mut self, _batch_id: u64, _data: &BatchData) -> Result<()> {
        Ok(())
    }

    /// Runs the batch's plan to its end, holding a piece at a time.
    fn add_batch_streams(&mut self, _batch_id: u64, rows: super::BatchStreams) -> Result<()> {
        rows.discard()
    }
}
