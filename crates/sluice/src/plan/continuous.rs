//! The continuous binding (Spark's continuous processing): the query's physical plan, planned
//! once, whose streaming scans read the slice of rows the loop puts into their cell.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::provider_as_source;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{LogicalPlan, TableScanBuilder};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::{collect, displayable, ExecutionPlan};

use crate::error::{Result, SluiceError};
use crate::plan::StreamingRelation;
use crate::session::Session;
use crate::sync::MutexExt;

/// The rows of one slice, shared between the loop and the plan's leaf.
type Cell = Arc<Mutex<Vec<RecordBatch>>>;

/// The leaf of the continuous plan: each execution yields the rows put into its cell.
#[derive(Debug)]
struct SlicePartition {
    schema: SchemaRef,
    cell: Cell,
}

impl PartitionStream for SlicePartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }
    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let rows = std::mem::take(&mut *self.cell.lock_unpoisoned());
        match MemoryStream::try_new(rows, self.schema.clone(), None) {
            Ok(s) => Box::pin(s),
            Err(e) => Box::pin(
                datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                    self.schema.clone(),
                    futures::stream::once(async move { Err(e) }),
                ),
            ),
        }
    }
}

/// The query's physical plan, planned once; each slice is bound to the leaf cells and the plan
/// is executed again (it is stateless: projections and filters only).
pub(crate) struct ContinuousPlan {
    plan: Arc<dyn ExecutionPlan>,
    task_ctx: Arc<TaskContext>,
    /// Per streaming relation id, the cell its scan reads.
    cells: HashMap<u64, Cell>,
    session: Session,
}

impl ContinuousPlan {
    /// Plans `plan` once, each streaming scan bound to a cell of its own.
    pub(crate) fn try_new(session: &Session, plan: &LogicalPlan) -> Result<Self> {
        let mut cells: HashMap<u64, Cell> = HashMap::new();
        let bound = plan
            .clone()
            .transform_up(|node| {
                let LogicalPlan::TableScan(scan) = &node else {
                    return Ok(Transformed::no(node));
                };
                let Some(rel) = StreamingRelation::of_scan(scan) else {
                    return Ok(Transformed::no(node));
                };
                let schema = rel.relation_schema();
                let cell = cells.entry(rel.id()).or_default().clone();
                let table = StreamingTable::try_new(
                    schema.clone(),
                    vec![Arc::new(SlicePartition { schema, cell })],
                )?;
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
            .map_err(SluiceError::from)?
            .data;
        // One partition: a slice is small, and a plain chain of operators has the least latency.
        let mut state = session.df_state();
        state.config_mut().options_mut().execution.target_partitions = 1;
        let physical = session.block_on(state.create_physical_plan(&bound))?;
        Ok(Self {
            plan: physical,
            task_ctx: state.task_ctx(),
            cells,
            session: session.clone(),
        })
    }

    /// The schema of the rows the plan produces.
    pub(crate) fn schema(&self) -> SchemaRef {
        self.plan.schema()
    }

    /// The query's analysed plan (`logical`) and this physical plan, as `explain()` shows them.
    pub(crate) fn explain(&self, logical: &LogicalPlan) -> String {
        format!(
            "== Analyzed Logical Plan ==\n{}\n\n== Physical Plan (continuous, planned once) ==\n{}",
            logical.display_indent(),
            displayable(self.plan.as_ref()).indent(true)
        )
    }

    /// Executes the plan over `rows`, the new slice of relation `relation_id`.
    pub(crate) fn run(&self, relation_id: u64, rows: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        if let Some(cell) = self.cells.get(&relation_id) {
            *cell.lock_unpoisoned() = rows;
        }
        Ok(self
            .session
            .block_on(collect(self.plan.clone(), self.task_ctx.clone()))?)
    }
}
