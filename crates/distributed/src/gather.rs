//! The driver's side of the wire: [`GatherExec`] reads its input's partitions in order, in
//! groups. Over the workers' output ([`GatherExec::in_order`]) it gives back the partitions the
//! plan has in one process; at the head of the driver's part ([`GatherExec::concat`]) it makes
//! one partition (datafusion-distributed runs one), the partitions one after another.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::stream::{RecordBatchReceiverStream, RecordBatchStreamAdapter};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_distributed::{NetworkBoundaryExt, Stage};
use futures::StreamExt;

use crate::tasks::TaskLog;

/// Output partition `i` is the input partitions `i * group .. (i + 1) * group`, one after
/// another; each input partition runs at once on a task of its own, a few batches ahead of its
/// reader.
#[derive(Debug)]
pub(crate) struct GatherExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    group: usize,
    /// Where the tasks read are recorded, when the input is the workers' output.
    log: Option<Arc<TaskLog>>,
}

/// How many batches each input partition runs ahead of the one being read.
const AHEAD: usize = 4;

impl GatherExec {
    /// `input`, a `NetworkCoalesceExec` whose tasks each ran a contiguous run of pieces,
    /// `pieces` per partition of the plan in one process, put back into those partitions, with
    /// `properties`, the plan's in one process. The tasks read are recorded in `log`.
    pub(crate) fn in_order(
        input: Arc<dyn ExecutionPlan>,
        properties: Arc<PlanProperties>,
        pieces: usize,
        log: Arc<TaskLog>,
    ) -> Self {
        Self {
            input,
            properties,
            group: pieces.max(1),
            log: Some(log),
        }
    }

    /// Every partition of `input` as one partition, in partition order (as
    /// `collect_partitioned` gives them in one process).
    pub(crate) fn concat(input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            input.properties().emission_type,
            input.properties().boundedness,
        ));
        let group = input.properties().partitioning.partition_count().max(1);
        Self {
            input,
            properties,
            group,
            log: None,
        }
    }

    /// When a piece's rows are all read: its task's worker and how long it took are recorded
    /// (once the plan runs, the input's stage knows its workers: task `t` runs on the `t`-th).
    fn recorder(&self) -> Option<OnEnd> {
        let log = Arc::clone(self.log.as_ref()?);
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
        Some(Arc::new(move |piece: usize, took: Duration| {
            let task = piece / per_task;
            if let Some(w) = workers.get(task) {
                log.record(&key, task, w.clone(), took);
            }
        }))
    }
}

/// Called with an input partition's index and how long its rows took, once all are read.
type OnEnd = Arc<dyn Fn(usize, Duration) + Send + Sync>;

impl DisplayAs for GatherExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "GatherExec: partitions={}, {} input partitions each",
            self.properties.partitioning.partition_count(),
            self.group
        )
    }
}

impl ExecutionPlan for GatherExec {
    fn name(&self) -> &str {
        "GatherExec"
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
            return internal_err!("GatherExec has one child");
        };
        Ok(Arc::new(Self {
            input,
            properties: Arc::clone(&self.properties),
            group: self.group,
            log: self.log.clone(),
        }))
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
        if partition >= self.properties.partitioning.partition_count() {
            return internal_err!("GatherExec has no partition {partition}");
        }
        let first = partition * self.group;
        let inputs = self.input.properties().partitioning.partition_count();
        let range = first.min(inputs)..(first + self.group).min(inputs);
        in_order(&self.input, range, context, self.recorder())
    }
}

/// The partitions `range` of `input` one after another, each run at once on a task of its own,
/// a few batches ahead of its reader; `on_end` is told when each has given its last row.
fn in_order(
    input: &Arc<dyn ExecutionPlan>,
    range: Range<usize>,
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
    Ok(Box::pin(RecordBatchStreamAdapter::new(
        input.schema(),
        futures::stream::iter(streams).flatten(),
    )))
}
