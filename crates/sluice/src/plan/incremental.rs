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
use crate::sink::BatchData;

/// Plans and runs one streaming query's batches.
#[derive(Debug)]
pub struct IncrementalExecution {
    state: SessionState,
    /// The analysed plan (views inlined), with streaming scans still unbound.
    plan: LogicalPlan,
    partitions: usize,
}

/// The rows of each stream for one batch, by `StreamingRelation::id`.
pub type BatchInputs = HashMap<u64, Vec<RecordBatch>>;

impl IncrementalExecution {
    /// `plan` must already be analysed (see `Session::analyze`).
    pub fn new(state: SessionState, plan: LogicalPlan, partitions: usize) -> Self {
        Self {
            state,
            plan,
            partitions: partitions.max(1),
        }
    }

    pub fn logical_plan(&self) -> &LogicalPlan {
        &self.plan
    }

    /// The plan with every stream bound to this batch's rows.
    pub fn bind(&self, inputs: &BatchInputs) -> Result<LogicalPlan> {
        let partitions = self.partitions;
        let bound = self
            .plan
            .clone()
            .transform_up_with_subqueries(|node| {
                let LogicalPlan::TableScan(scan) = &node else {
                    return Ok(Transformed::no(node));
                };
                let Some(rel) = StreamingRelation::of_scan(scan) else {
                    return Ok(Transformed::no(node));
                };
                let schema = rel.provider().schema();
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
        Ok(bound.data)
    }

    fn state_at(&self, batch_timestamp_ms: i64) -> SessionState {
        let mut state = self.state.clone();
        state.execution_props_mut().query_execution_start_time =
            DateTime::<Utc>::from_timestamp_millis(batch_timestamp_ms);
        state
    }

    /// Binds, optimises and plans one batch.
    pub async fn physical_plan(
        &self,
        inputs: &BatchInputs,
        batch_timestamp_ms: i64,
    ) -> Result<(
        Arc<dyn ExecutionPlan>,
        Arc<datafusion::execution::TaskContext>,
    )> {
        let bound = self.bind(inputs)?;
        let state = self.state_at(batch_timestamp_ms);
        let physical = state.create_physical_plan(&bound).await?;
        Ok((physical, state.task_ctx()))
    }

    /// Runs a planned batch and materialises its result partitions.
    pub async fn execute(
        plan: Arc<dyn ExecutionPlan>,
        task_ctx: Arc<datafusion::execution::TaskContext>,
    ) -> Result<BatchData> {
        let schema = plan.schema();
        let partitions = collect_partitioned(plan, task_ctx).await?;
        Ok(BatchData { schema, partitions })
    }

    /// The logical and physical plans of a batch with no rows (Spark's `explain`).
    pub async fn explain(&self) -> Result<String> {
        let (physical, _) = self.physical_plan(&HashMap::new(), 0).await?;
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
