//! Per-batch planning (Spark's `IncrementalExecution`): each micro-batch is planned and
//! executed by DataFusion over exactly that batch's rows.
//!
//! The query's logical plan holds `TableScan`s over [`StreamingRelation`]s. For batch N, every
//! such scan is replaced by an in-memory table with the rows of the source's `(start, end]`
//! range; the bound plan is optimised and executed by DataFusion. `now()` /
//! `current_timestamp()` evaluate to the batch timestamp logged in `offsets/N`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use chrono::{DateTime, Utc};
use datafusion::common::tree_node::Transformed;
use datafusion::datasource::{provider_as_source, MemTable};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{LogicalPlan, TableScanBuilder};
use datafusion::physical_plan::{collect_partitioned, displayable, ExecutionPlan};

use super::relation::StreamingRelation;
use crate::error::{Result, SluiceError};
use crate::operators::watermark::{EventTimeWatermark, StatsHandle};
use crate::types::BatchData;

/// Plans and runs one streaming query's batches.
#[derive(Debug)]
pub(crate) struct IncrementalExecution {
    state: SessionState,
    /// The analysed plan (views inlined), with streaming scans still unbound.
    plan: LogicalPlan,
    partitions: usize,
}

/// The rows of each stream for one batch, by `StreamingRelation::id`.
pub(crate) type BatchInputs = HashMap<u64, Vec<RecordBatch>>;

/// A watermark node's delay (ms) and the handle its exec fills during the batch.
pub(crate) type WatermarkObservation = (i64, StatsHandle);

/// One batch's physical plan, ready to run.
pub(crate) struct PlannedBatch {
    pub plan: Arc<dyn ExecutionPlan>,
    pub task_ctx: Arc<datafusion::execution::TaskContext>,
    /// One entry per watermark node, in post-order (stable across batches).
    pub watermarks: Vec<WatermarkObservation>,
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
                let rows = inputs.get(&rel.id()).cloned().unwrap_or_default();
                let table = MemTable::try_new(schema, split(rows, partitions))?;
                let new_scan = TableScanBuilder::new(
                    scan.table_name.clone(),
                    provider_as_source(Arc::new(table)),
                )
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

    /// Runs a planned batch and materialises its result partitions.
    pub(crate) async fn execute(planned: &PlannedBatch) -> Result<BatchData> {
        let schema = planned.plan.schema();
        let partitions =
            collect_partitioned(planned.plan.clone(), planned.task_ctx.clone()).await?;
        Ok(BatchData { schema, partitions })
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
