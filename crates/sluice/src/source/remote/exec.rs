//! A batch's read on the workers as the leaf of its plan ([`WorkerReadExec`]), and the stateless
//! plan above it that runs on the worker with the read: a cluster's placement hands the read the
//! nodes over it that work row by row (projections, filters, generators, watermark nodes), each
//! run's worker decodes them over its rows ([`ReadRowsExec`]) and sends their output instead of
//! the rows it read ([`run_read_task_under`]), the event-time statistics of the watermark nodes
//! with the read's counts. The rows then cross the wire once, filtered and projected.

use std::fmt;
use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session as CatalogSession;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    Boundedness, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};

use super::WorkerReads;
use crate::distributed::{ReadItem, ReadItems, ReadTask};
use crate::error::{Result, SluiceError};
use crate::operators::watermark::{watermark_handles, watermark_stats};
use crate::sync::MutexExt;
use crate::types::RowIter;
use sluice_common::rows::{blocking_rows, failed_stream, row_stream};

/// A stream's rows read on the workers, as the batch's logical plan scans them.
#[derive(Debug)]
pub(crate) struct WorkerReadTable {
    pub(crate) reads: Arc<WorkerReads>,
    /// The relation's schema.
    pub(crate) schema: SchemaRef,
}

#[async_trait]
impl TableProvider for WorkerReadTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Temporary
    }
    async fn scan(
        &self,
        _state: &dyn CatalogSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let scanned = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        Ok(Arc::new(WorkerReadExec::new(
            Arc::clone(&self.reads),
            projection.cloned(),
            scanned,
        )))
    }
}

/// The plan's leaf over a batch's read on the workers: a partition per run, each run started on
/// its worker when its partition is pulled, with the columns the plan scans and the stateless
/// plan that [`WorkerReadExec::with_above`] put over them.
#[derive(Debug)]
pub struct WorkerReadExec {
    reads: Arc<WorkerReads>,
    projection: Option<Vec<usize>>,
    /// The scanned rows (the relation's columns the scan keeps).
    scanned: SchemaRef,
    /// The plan that runs over the scanned rows on the worker (its leaf a [`ReadRowsExec`]), and
    /// its bytes as the wire carries it.
    above: Option<Above>,
    properties: Arc<PlanProperties>,
}

/// A plan over a read, and its bytes.
type Above = (Arc<dyn ExecutionPlan>, Arc<Vec<u8>>);

impl WorkerReadExec {
    fn new(reads: Arc<WorkerReads>, projection: Option<Vec<usize>>, scanned: SchemaRef) -> Self {
        let properties = properties(scanned.clone(), reads.runs());
        Self {
            reads,
            projection,
            scanned,
            above: None,
            properties,
        }
    }

    /// The plan that runs over the read on the worker, if any.
    pub fn above(&self) -> Option<&Arc<dyn ExecutionPlan>> {
        self.above.as_ref().map(|(plan, _)| plan)
    }

    /// Where the scanned rows enter the plan that runs over them: the leaf to build it on.
    pub fn leaf(&self) -> Arc<dyn ExecutionPlan> {
        Arc::new(ReadRowsExec::new(self.scanned.clone()))
    }

    /// This read with `above` (built on [`WorkerReadExec::leaf`] or on the last
    /// [`WorkerReadExec::above`]) run over its rows on the workers; `encoded` is `above` as the
    /// wire carries it. Its output is `above`'s, a partition per run.
    pub fn with_above(&self, above: Arc<dyn ExecutionPlan>, encoded: Vec<u8>) -> Result<Self> {
        let partitions = above.output_partitioning().partition_count();
        if partitions != 1 {
            return Err(SluiceError::internal(format!(
                "a plan over a read on the workers has {partitions} partitions, not one"
            )));
        }
        Ok(Self {
            reads: Arc::clone(&self.reads),
            projection: self.projection.clone(),
            scanned: self.scanned.clone(),
            properties: properties(above.schema(), self.reads.runs()),
            above: Some((above, Arc::new(encoded))),
        })
    }
}

fn properties(schema: SchemaRef, partitions: usize) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema),
        Partitioning::UnknownPartitioning(partitions),
        EmissionType::Incremental,
        Boundedness::Bounded,
    ))
}

impl DisplayAs for WorkerReadExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "WorkerReadExec: runs={}", self.reads.runs())?;
        if let Some(p) = &self.projection {
            write!(f, ", projection={p:?}")?;
        }
        if let Some(above) = self.above() {
            let mut names = Vec::new();
            let _ = above.apply(|n| {
                names.push(n.name().to_string());
                Ok(TreeNodeRecursion::Continue)
            });
            names.pop(); // the leaf
            write!(f, ", on the workers: {}", names.join(" <- "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for WorkerReadExec {
    fn name(&self) -> &str {
        "WorkerReadExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let (above, watermarks) = match &self.above {
            Some((plan, bytes)) => (bytes.as_ref().clone(), watermark_handles(plan)),
            None => (Vec::new(), Vec::new()),
        };
        let rows = self
            .reads
            .start(partition, self.projection.clone(), above, watermarks)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        Ok(row_stream(rows, self.schema()))
    }
}

/// The reads on the workers `plan` consists of, when nothing but partitioning lies between
/// them and its output (repartitions, coalesces, unions: the rows are the reads' rows, as the
/// plans over them on the workers give them); `None` otherwise.
pub(crate) fn reads_under(plan: &Arc<dyn ExecutionPlan>) -> Option<Vec<Arc<WorkerReads>>> {
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::repartition::RepartitionExec;
    use datafusion::physical_plan::union::UnionExec;
    if let Some(read) = plan.downcast_ref::<WorkerReadExec>() {
        return Some(vec![Arc::clone(&read.reads)]);
    }
    let passes = plan.downcast_ref::<RepartitionExec>().is_some()
        || plan.downcast_ref::<CoalescePartitionsExec>().is_some()
        || plan.downcast_ref::<UnionExec>().is_some()
        || plan.name() == "CoalesceBatchesExec";
    if !passes || plan.children().is_empty() {
        return None;
    }
    let mut reads = Vec::new();
    for child in plan.children() {
        reads.extend(reads_under(child)?);
    }
    Some(reads)
}

/// Where a read's rows enter the plan that runs over them on a worker: on the driver the leaf
/// the plan is built on and sent with; on the worker, the rows the read gives.
pub struct ReadRowsExec {
    schema: SchemaRef,
    rows: Mutex<Option<RowIter>>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for ReadRowsExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReadRowsExec")
    }
}

impl ReadRowsExec {
    /// The leaf of rows of `schema` (a read's scanned columns), before a read gives them.
    pub fn new(schema: SchemaRef) -> Self {
        Self {
            properties: properties(schema.clone(), 1),
            schema,
            rows: Mutex::new(None),
        }
    }
}

impl DisplayAs for ReadRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ReadRowsExec")
    }
}

impl ExecutionPlan for ReadRowsExec {
    fn name(&self) -> &str {
        "ReadRowsExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        match self.rows.lock_unpoisoned().take() {
            Some(rows) => Ok(row_stream(rows, self.schema.clone())),
            None => Ok(failed_stream(
                self.schema.clone(),
                SluiceError::internal(
                    "the rows of a read were scanned twice, or not given to the plan over them",
                ),
            )),
        }
    }
}

/// Runs a [`ReadTask`] whose rows go through `above` (the task's plan, decoded: its leaf a
/// [`ReadRowsExec`]) on this worker, in `ctx`: `above`'s output rows as they come, then the
/// read's counts with what `above`'s watermark nodes saw. Call it on a thread of a tokio
/// runtime's blocking pool (the plan's streams are polled from it).
pub fn run_read_task_under(
    task: ReadTask,
    above: Arc<dyn ExecutionPlan>,
    ctx: Arc<TaskContext>,
) -> Result<ReadItems> {
    let items = super::run_read_task(ReadTask {
        above: Vec::new(),
        route: None,
        ..task
    })?;
    let counts: Arc<Mutex<Option<crate::distributed::ReadCounts>>> = Arc::default();
    let counted = Arc::clone(&counts);
    let rows: RowIter = Box::new(items.filter_map(move |item| match item {
        Ok(ReadItem::Rows(rows)) => Some(Ok(rows)),
        Ok(ReadItem::Counts(c)) => {
            *counted.lock_unpoisoned() = Some(c);
            None
        }
        Err(e) => Some(Err(e)),
    }));
    let mut rows = Some(rows);
    let plan = above
        .transform_up(|node| {
            let Some(leaf) = node.downcast_ref::<ReadRowsExec>() else {
                return Ok(Transformed::no(node));
            };
            let fed = ReadRowsExec::new(leaf.schema.clone());
            *fed.rows.lock_unpoisoned() = rows.take();
            Ok(Transformed::yes(Arc::new(fed) as Arc<dyn ExecutionPlan>))
        })
        .map_err(SluiceError::from)?
        .data;
    if rows.is_some() {
        return Err(SluiceError::internal(
            "a plan over a read on a worker has no leaf for the read's rows",
        ));
    }
    let handle = tokio::runtime::Handle::current();
    let stream = {
        let _runtime = handle.enter();
        plan.execute(0, ctx)?
    };
    let mut output = blocking_rows(stream, handle);
    let mut ended = false;
    Ok(Box::new(std::iter::from_fn(move || {
        if ended {
            return None;
        }
        match output.next() {
            Some(Ok(rows)) => Some(Ok(ReadItem::Rows(rows))),
            Some(Err(e)) => {
                ended = true;
                Some(Err(e))
            }
            None => {
                ended = true;
                let mut c = counts.lock_unpoisoned().take().unwrap_or_default();
                c.event_times = watermark_stats(&plan);
                Some(Ok(ReadItem::Counts(c)))
            }
        }
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::{EventTimeStats, ReadCounts};
    use crate::source::remote::{register_read, ReadSpec};
    use arrow::array::{Int64Array, RecordBatch, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{binary, col, lit};
    use datafusion::physical_plan::filter::FilterExec;

    fn numbers_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                false,
            ),
            Field::new("pad", DataType::Int64, false),
        ]))
    }

    /// A read of `0..spec` in batches of 4: `n`, `ts` = `n` seconds, `pad`.
    fn numbers(spec: &str, schema: SchemaRef) -> Result<ReadItems> {
        let n: i64 = spec.parse().map_err(|_| SluiceError::internal("a count"))?;
        let batches: Vec<Result<ReadItem>> = (0..n)
            .step_by(4)
            .map(|s| {
                let ns: Vec<i64> = (s..(s + 4).min(n)).collect();
                Ok(ReadItem::Rows(RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int64Array::from(ns.clone())),
                        Arc::new(TimestampMicrosecondArray::from(
                            ns.iter().map(|n| n * 1_000_000).collect::<Vec<_>>(),
                        )),
                        Arc::new(Int64Array::from(vec![0; ns.len()])),
                    ],
                )?))
            })
            .collect();
        let counts = ReadCounts {
            rows: n as u64,
            ..Default::default()
        };
        Ok(Box::new(
            batches
                .into_iter()
                .chain(std::iter::once(Ok(ReadItem::Counts(counts)))),
        ))
    }

    /// The driver's plan over a read (a filter, then a watermark node, over the scanned columns
    /// `n` and `ts`) runs over the rows on the worker: only the filter's rows come back, then
    /// the read's counts (every row read) with what the watermark node saw.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_runs_the_plan_over_it_and_sends_its_watermark_statistics() {
        register_read("test-numbers", numbers);
        let scanned = Arc::new(numbers_schema().project(&[0, 1]).unwrap());
        let leaf: Arc<dyn ExecutionPlan> = Arc::new(ReadRowsExec::new(scanned.clone()));
        let n = col("n", &scanned).unwrap();
        let at_least_5 = binary(n, Operator::GtEq, lit(5i64), &scanned).unwrap();
        let filter = Arc::new(FilterExec::try_new(at_least_5, leaf).unwrap());
        let plan = crate::watermark_exec(filter, 1, 0);
        let task = ReadTask {
            spec: ReadSpec::Registered {
                kind: "test-numbers".into(),
                spec: "10".into(),
            }
            .to_text()
            .unwrap(),
            schema: numbers_schema(),
            projection: Some(vec![0, 1]),
            above: Vec::new(),
            route: None,
        };
        let items = tokio::task::spawn_blocking(move || {
            let ctx = Arc::new(TaskContext::default());
            run_read_task_under(task, plan, ctx)
                .unwrap()
                .collect::<Result<Vec<_>>>()
                .unwrap()
        })
        .await
        .unwrap();
        let (mut kept, mut counts) = (Vec::new(), Vec::new());
        for item in items {
            match item {
                ReadItem::Rows(b) => {
                    assert_eq!(b.num_columns(), 2, "the scanned columns only");
                    let ns = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                    kept.extend(ns.values().iter().copied());
                }
                ReadItem::Counts(c) => counts.push(c),
            }
        }
        assert_eq!(kept, vec![5, 6, 7, 8, 9]);
        let expected = ReadCounts {
            rows: 10,
            event_times: vec![EventTimeStats {
                max: 9_000,
                min: 5_000,
                sum: 35_000.0,
                count: 5,
            }],
            ..Default::default()
        };
        assert_eq!(counts, vec![expected], "the counts come last, once");
    }
}
