//! The driver's side of the wire: [`InOrderExec`] gives the workers' output back in the
//! partitions the plan has in one process, and [`ConcatExec`] makes one partition of the driver's
//! part (datafusion-distributed runs one), the partitions one after another, in order.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_distributed::{NetworkBoundaryExt, Stage};
use futures::StreamExt;

use crate::tasks::TaskLog;

/// The partitions of `input` (a `NetworkCoalesceExec` whose tasks each ran a contiguous run of
/// pieces, `pieces` per partition of the plan in one process) put back together, with the
/// properties the plan has in one process: partition `i` is pieces `i * pieces ..` in order.
#[derive(Debug)]
pub(crate) struct InOrderExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    pieces: usize,
    log: Arc<TaskLog>,
}

impl InOrderExec {
    pub(crate) fn new(
        input: Arc<dyn ExecutionPlan>,
        properties: Arc<PlanProperties>,
        pieces: usize,
        log: Arc<TaskLog>,
    ) -> Self {
        Self {
            input,
            properties,
            pieces: pieces.max(1),
            log,
        }
    }

    /// When a piece's rows are all read: its task's worker and how long it took are recorded
    /// (once the plan runs, the input's stage knows its workers: task `t` runs on the `t`-th).
    fn recorder(&self) -> Option<OnEnd> {
        let nb = self.input.as_network_boundary()?;
        let Stage::Remote(stage) = nb.input_stage() else {
            return None;
        };
        let tasks = stage.workers.len().max(1);
        let per_task = (self.input.properties().partitioning.partition_count() / tasks).max(1);
        let key = format!("{}/{}", stage.query_id, stage.num);
        let workers: Vec<String> = stage
            .workers
            .iter()
            .map(|u| match (u.host_str(), u.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                _ => u.to_string(),
            })
            .collect();
        let log = Arc::clone(&self.log);
        Some(Arc::new(move |piece: usize, took: Duration| {
            let task = piece / per_task;
            if let Some(w) = workers.get(task) {
                log.record(&key, task, w.clone(), took);
            }
        }))
    }
}

/// Called with a partition's index and how long its rows took, once they are all read.
type OnEnd = Arc<dyn Fn(usize, Duration) + Send + Sync>;

impl DisplayAs for InOrderExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "InOrderExec: partitions={}",
            self.properties.partitioning.partition_count()
        )
    }
}

impl ExecutionPlan for InOrderExec {
    fn name(&self) -> &str {
        "InOrderExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (Some(input), true) = (children.pop(), children.is_empty()) else {
            return internal_err!("InOrderExec has one child");
        };
        Ok(Arc::new(Self::new(
            input,
            Arc::clone(&self.properties),
            self.pieces,
            Arc::clone(&self.log),
        )))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let first = partition * self.pieces;
        in_order(
            &self.input,
            first..first + self.pieces,
            context,
            self.recorder(),
        )
    }
}

/// Every partition of `input` as one partition: each partition runs at once on a task of its
/// own, a few batches ahead, and their rows come out partition after partition, in order (as
/// `collect_partitioned` gives them in one process).
#[derive(Debug)]
pub(crate) struct ConcatExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

/// How many batches each partition runs ahead of the one being read.
const AHEAD: usize = 4;

impl ConcatExec {
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            input.properties().emission_type,
            input.properties().boundedness,
        ));
        Self { input, properties }
    }
}

impl DisplayAs for ConcatExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ConcatExec")
    }
}

impl ExecutionPlan for ConcatExec {
    fn name(&self) -> &str {
        "ConcatExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (Some(input), true) = (children.pop(), children.is_empty()) else {
            return internal_err!("ConcatExec has one child");
        };
        Ok(Arc::new(Self::new(input)))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return internal_err!("ConcatExec has one partition, {partition} was asked for");
        }
        let count = self.input.properties().partitioning.partition_count();
        in_order(&self.input, 0..count, context, None)
    }
}

/// The partitions `range` of `input` one after another, each run at once on a task of its own,
/// a few batches ahead of its reader; `on_end` is told when each has given its last row.
fn in_order(
    input: &Arc<dyn ExecutionPlan>,
    range: std::ops::Range<usize>,
    context: Arc<TaskContext>,
    on_end: Option<OnEnd>,
) -> Result<SendableRecordBatchStream> {
    let mut streams = Vec::with_capacity(range.len());
    for i in range {
        let mut builder = RecordBatchReceiverStream::builder(input.schema(), AHEAD);
        let (tx, input, ctx) = (builder.tx(), Arc::clone(input), Arc::clone(&context));
        let on_end = on_end.clone();
        builder.spawn(async move {
            let start = Instant::now();
            let mut rows = input.execute(i, ctx)?;
            while let Some(batch) = rows.next().await {
                let failed = batch.is_err();
                if tx.send(batch).await.is_err() || failed {
                    return Ok(());
                }
            }
            if let Some(on_end) = on_end {
                on_end(i, start.elapsed());
            }
            Ok(())
        });
        streams.push(builder.build());
    }
    Ok(Box::pin(
        datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
            input.schema(),
            futures::stream::iter(streams).flatten(),
        ),
    ))
}
