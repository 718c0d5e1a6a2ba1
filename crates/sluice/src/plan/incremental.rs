//! Per-batch planning (Spark's `IncrementalExecution`): each micro-batch is planned and
//! executed by DataFusion over exactly that batch's rows.
//!
//! The query's logical plan holds `TableScan`s over [`StreamingRelation`]s. For batch N, every
//! such scan is replaced by an in-memory table with the rows of the source's `(start, end]`
//! range; the bound plan is optimised and executed by DataFusion. `now()` /
//! `current_timestamp()` evaluate to the batch timestamp logged in `offsets/N`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use chrono::{DateTime, Utc};
use datafusion::catalog::streaming::StreamingTable;
use datafusion::common::tree_node::Transformed;
use datafusion::datasource::{provider_as_source, MemTable, TableProvider};
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, SessionState, TaskContext};
use datafusion::logical_expr::{LogicalPlan, TableScanBuilder};
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::{displayable, ExecutionPlan};
use futures::StreamExt;

use super::relation::StreamingRelation;
use crate::error::{Result, SluiceError};
use crate::operators::stateful::output::StageRows;
use crate::operators::watermark::{EventTimeWatermark, StatsHandle};
use crate::source::remote::{WorkerReadTable, WorkerReads};
use crate::sync::MutexExt;
use crate::types::RowIter;

/// Plans and runs one streaming query's batches.
#[derive(Debug)]
pub(crate) struct IncrementalExecution {
    state: SessionState,
    /// The analysed plan (views inlined), with streaming scans still unbound.
    plan: LogicalPlan,
    partitions: usize,
}

/// The rows of each stream for one batch, by `StreamingRelation::id`.
pub(crate) type BatchInputs = HashMap<u64, RelationRows>;

/// One stream's rows in a batch: in memory, or read as the plan runs.
#[derive(Clone, Debug)]
pub(crate) enum RelationRows {
    Batches(Vec<RecordBatch>),
    /// Partitions a source reads while the plan pulls them; each can run once.
    Lazy(Arc<LazyPartitions>),
    /// Partitions the workers read while the plan pulls them (a run each), scanned by a
    /// [`WorkerReadExec`](crate::source::remote::WorkerReadExec); each can run once.
    OnWorkers(Arc<WorkerReads>),
}

impl From<StageRows> for RelationRows {
    fn from(rows: StageRows) -> Self {
        match rows {
            StageRows::InMemory(batches) => RelationRows::Batches(batches),
            StageRows::Spilled(rows) => RelationRows::lazy(vec![rows]),
        }
    }
}

impl Default for RelationRows {
    fn default() -> Self {
        RelationRows::Batches(Vec::new())
    }
}

impl RelationRows {
    /// A source's lazy read (its partitions), to be scanned once by the batch's plan.
    pub(crate) fn lazy(partitions: Vec<RowIter>) -> Self {
        RelationRows::Lazy(Arc::new(LazyPartitions {
            partitions: Mutex::new(partitions.into_iter().map(Some).collect()),
        }))
    }
}

/// The partitions of a lazy read, taken by the scan that runs them.
pub(crate) struct LazyPartitions {
    partitions: Mutex<Vec<Option<RowIter>>>,
}

impl std::fmt::Debug for LazyPartitions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LazyPartitions")
    }
}

/// One partition of a lazy read as DataFusion's [`PartitionStream`]: the source's blocking
/// reads run on tokio's blocking pool, one piece at a time (so a batch holds a piece per
/// partition, not the whole input).
#[derive(Debug)]
struct LazyPartition {
    rows: Arc<LazyPartitions>,
    index: usize,
    /// The relation's schema (the batches are given its names and nullability).
    schema: SchemaRef,
}

impl PartitionStream for LazyPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let schema = self.schema.clone();
        let taken = self
            .rows
            .partitions
            .lock_unpoisoned()
            .get_mut(self.index)
            .and_then(Option::take);
        let Some(iter) = taken else {
            let err = SluiceError::internal(format!(
                "partition {} of a stream's rows was scanned twice in one batch",
                self.index
            ));
            return failed_stream(schema, err);
        };
        row_stream(iter, schema)
    }
}

use sluice_common::rows::{blocking_rows, failed_stream, row_stream};

/// A row batch a partition produced, with the room it takes in its partition's share.
type Produced = (
    std::result::Result<RecordBatch, DataFusionError>,
    tokio::sync::OwnedSemaphorePermit,
);

/// The partitions of a running plan, read a share at a time each
/// ([`IncrementalExecution::execute_interleaved`]). Dropping it stops the partitions still
/// running.
struct InterleavedPartitions {
    handle: tokio::runtime::Handle,
    partitions: Vec<(
        tokio::sync::mpsc::UnboundedReceiver<Produced>,
        tokio::task::JoinHandle<()>,
    )>,
    /// The partition being read, and the bytes taken from it since it became current.
    current: usize,
    taken: usize,
    share: usize,
}

impl Iterator for InterleavedPartitions {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.partitions.is_empty() {
                return None;
            }
            let (rx, _) = &mut self.partitions[self.current];
            match self.handle.block_on(rx.recv()) {
                Some((Ok(b), room)) => {
                    drop(room);
                    self.taken += b.get_array_memory_size();
                    if self.taken >= self.share {
                        self.current = (self.current + 1) % self.partitions.len();
                        self.taken = 0;
                    }
                    return Some(Ok(b));
                }
                Some((Err(e), _)) => {
                    self.stop();
                    return Some(Err(e.into()));
                }
                None => {
                    // The partition ended, or its task died (a panic): never a silent end.
                    let (_, task) = self.partitions.remove(self.current);
                    if let Err(e) = self.handle.block_on(task) {
                        self.stop();
                        return Some(Err(SluiceError::internal(format!(
                            "a partition of the batch's plan failed: {e}"
                        ))));
                    }
                    if self.current >= self.partitions.len() {
                        self.current = 0;
                    }
                    self.taken = 0;
                }
            }
        }
    }
}

impl InterleavedPartitions {
    fn stop(&mut self) {
        for (_, task) in self.partitions.drain(..) {
            task.abort();
        }
    }
}

impl Drop for InterleavedPartitions {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A watermark node's delay (ms) and the handle its exec fills during the batch.
pub(crate) type WatermarkObservation = (i64, StatsHandle);

/// One batch's physical plan, ready to run.
pub(crate) struct PlannedBatch {
    pub plan: Arc<dyn ExecutionPlan>,
    pub task_ctx: Arc<TaskContext>,
    /// One entry per watermark node, in post-order (stable across batches).
    pub watermarks: Vec<WatermarkObservation>,
}

impl PlannedBatch {
    /// The number of partitions the plan produces.
    fn partition_count(&self) -> usize {
        self.plan
            .properties()
            .output_partitioning()
            .partition_count()
    }
}

impl IncrementalExecution {
    /// `plan` must already be analysed (see `Session::analyze`).
    pub(crate) fn new(state: SessionState, plan: LogicalPlan, partitions: usize) -> Self {
        Self {
            state,
            plan,
            partitions: partitions.max(1),
        }
    }

    pub(crate) fn logical_plan(&self) -> &LogicalPlan {
        &self.plan
    }

    /// The plan with every stream bound to this batch's rows, and every watermark node given a
    /// fresh statistics handle (returned in post-order: delay, handle).
    pub(crate) fn bind(
        &self,
        inputs: &BatchInputs,
    ) -> Result<(LogicalPlan, Vec<WatermarkObservation>)> {
        let partitions = self.partitions;
        let mut observations: Vec<WatermarkObservation> = Vec::new();
        let bound = self
            .plan
            .clone()
            .transform_up_with_subqueries(|node| {
                if let Some(w) = EventTimeWatermark::of(&node) {
                    let mut w = w.clone();
                    let handle = StatsHandle::default();
                    w.stats = Some(handle.clone());
                    observations.push((w.delay_ms, handle));
                    return Ok(Transformed::yes(w.into_plan()));
                }
                let LogicalPlan::TableScan(scan) = &node else {
                    return Ok(Transformed::no(node));
                };
                let Some(rel) = StreamingRelation::of_scan(scan) else {
                    return Ok(Transformed::no(node));
                };
                let schema = rel.relation_schema();
                let table: Arc<dyn TableProvider> = match inputs.get(&rel.id()).cloned() {
                    Some(RelationRows::Lazy(rows)) => {
                        let count = rows.partitions.lock_unpoisoned().len();
                        let parts = (0..count)
                            .map(|index| {
                                Arc::new(LazyPartition {
                                    rows: rows.clone(),
                                    index,
                                    schema: schema.clone(),
                                }) as Arc<dyn PartitionStream>
                            })
                            .collect();
                        Arc::new(StreamingTable::try_new(schema, parts)?)
                    }
                    Some(RelationRows::OnWorkers(reads)) => Arc::new(WorkerReadTable {
                        reads,
                        schema: schema.clone(),
                    }),
                    Some(RelationRows::Batches(rows)) => {
                        Arc::new(MemTable::try_new(schema, split(rows, partitions))?)
                    }
                    None => Arc::new(MemTable::try_new(schema, vec![Vec::new()])?),
                };
                let new_scan =
                    TableScanBuilder::new(scan.table_name.clone(), provider_as_source(table))
                        .with_projection(scan.projection.clone())
                        .with_filters(scan.filters.clone())
                        .with_fetch(scan.fetch)
                        .build()?;
                Ok(Transformed::yes(LogicalPlan::TableScan(new_scan)))
            })
            .map_err(SluiceError::from)?;
        // Nodes are numbered in post-order (children first), the same every batch.
        Ok((bound.data, observations))
    }

    fn state_at(&self, batch_timestamp_ms: i64) -> SessionState {
        let mut state = self.state.clone();
        state.execution_props_mut().query_execution_start_time =
            DateTime::<Utc>::from_timestamp_millis(batch_timestamp_ms);
        state
    }

    /// Binds, optimises and plans one batch.
    pub(crate) async fn physical_plan(
        &self,
        inputs: &BatchInputs,
        batch_timestamp_ms: i64,
    ) -> Result<PlannedBatch> {
        let (bound, watermarks) = self.bind(inputs)?;
        let state = self.state_at(batch_timestamp_ms);
        let physical = state.create_physical_plan(&bound).await?;
        Ok(PlannedBatch {
            plan: physical,
            task_ctx: state.task_ctx(),
            watermarks,
        })
    }

    /// Runs a planned batch as its partitions, each pulled by whoever reads it (see
    /// [`crate::sink::BatchStreams`]).
    pub(crate) fn execute_streams(
        planned: &PlannedBatch,
        handle: &tokio::runtime::Handle,
    ) -> Result<Vec<RowIter>> {
        let _runtime = handle.enter();
        let count = planned.partition_count();
        (0..count)
            .map(|i| {
                let stream = planned.plan.execute(i, planned.task_ctx.clone())?;
                Ok(blocking_rows(stream, handle.clone()))
            })
            .collect()
    }

    /// Runs a planned batch as one blocking iterator over its partitions, for a stateful
    /// operator that takes its input chunk by chunk as the plan produces it. Every partition
    /// runs on the runtime at once, its share of `ahead` bytes of rows ahead of its reader; the
    /// reader takes a share from partition 0, then from partition 1, .., and round again. The
    /// order depends on the rows only, not on timing: a batch smaller than a share per partition
    /// comes in partition order, as `collect_partitioned` gives it.
    pub(crate) fn execute_interleaved(
        planned: &PlannedBatch,
        handle: &tokio::runtime::Handle,
        ahead: usize,
    ) -> Result<RowIter> {
        let _runtime = handle.enter();
        let count = planned.partition_count();
        let share = ahead / count.max(1);
        let share_kib = (share >> 10).clamp(1, u32::MAX as usize) as u32;
        let mut partitions = Vec::with_capacity(count);
        for i in 0..count {
            let mut stream = planned.plan.execute(i, planned.task_ctx.clone())?;
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let room = Arc::new(tokio::sync::Semaphore::new(share_kib as usize));
            let task = handle.spawn(async move {
                while let Some(item) = stream.next().await {
                    let kib = match &item {
                        Ok(b) => ((b.get_array_memory_size() >> 10) as u32).clamp(1, share_kib),
                        Err(_) => 1,
                    };
                    let Ok(permit) = room.clone().acquire_many_owned(kib).await else {
                        break;
                    };
                    let failed = item.is_err();
                    if tx.send((item, permit)).is_err() || failed {
                        break;
                    }
                }
            });
            partitions.push((rx, task));
        }
        Ok(Box::new(InterleavedPartitions {
            handle: handle.clone(),
            partitions,
            current: 0,
            taken: 0,
            share,
        }))
    }

    /// The logical and physical plans of a batch with no rows (Spark's `explain`).
    pub(crate) async fn explain(&self) -> Result<String> {
        let physical = self.physical_plan(&HashMap::new(), 0).await?.plan;
        Ok(format!(
            "== Analyzed Logical Plan ==\n{}\n\n== Physical Plan ==\n{}",
            self.plan.display_indent(),
            displayable(physical.as_ref()).indent(true)
        ))
    }
}

/// Splits a batch's rows round-robin into up to `n` partitions so DataFusion can use the cores.
fn split(rows: Vec<RecordBatch>, n: usize) -> Vec<Vec<RecordBatch>> {
    if rows.len() <= 1 || n <= 1 {
        return vec![rows];
    }
    let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new(); n.min(rows.len())];
    let len = parts.len();
    for (i, b) in rows.into_iter().enumerate() {
        parts[i % len].push(b);
    }
    parts
}
