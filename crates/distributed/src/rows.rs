//! A batch's rows on their way to the workers: [`BatchRowsExec`], the leaf that takes the place of
//! a source's in-memory rows in a batch's plan, split into one slice per task (each task's rows
//! travel with its plan, as Arrow IPC).

use std::fmt;
use std::io::Cursor;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedLeafExec,
    ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
};

/// A batch's rows (one source's, or an operator's output, projected as its scan reads them), in
/// the scan's partitions. Before the plan is split over the workers it holds every partition;
/// task `t`'s variant holds a contiguous run of them ([`scale_up`]), so the tasks' partitions,
/// in task order, are the scan's partitions in order (then empty ones).
#[derive(Debug, Clone)]
pub(crate) struct BatchRowsExec {
    parts: Vec<Vec<RecordBatch>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl BatchRowsExec {
    /// The rows of each partition.
    pub(crate) fn from_parts(schema: SchemaRef, parts: Vec<Vec<RecordBatch>>) -> Self {
        let n = parts.len();
        Self::declaring(schema, parts, n)
    }

    /// Every partition cut into `tasks` pieces of about as many rows each (partition `i`'s are
    /// pieces `i * tasks ..`, in order), to be split over `tasks` tasks ([`scale_up`]): it
    /// declares the partitions of one task's variant, and runs only once split.
    pub(crate) fn for_tasks(schema: SchemaRef, parts: Vec<Vec<RecordBatch>>, tasks: usize) -> Self {
        let tasks = tasks.max(1);
        let per_task = parts.len().max(1);
        let pieces = parts.iter().flat_map(|p| pieces(p, tasks)).collect();
        Self::declaring(schema, pieces, per_task)
    }

    fn declaring(schema: SchemaRef, parts: Vec<Vec<RecordBatch>>, partitions: usize) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Self {
            parts,
            schema,
            properties,
        }
    }

    /// Every row this node holds.
    pub(crate) fn num_rows(&self) -> usize {
        self.parts.iter().flatten().map(|b| b.num_rows()).sum()
    }
}

/// `rows` cut into `n` runs of about as many rows each, in order (batches sliced, not copied).
fn pieces(rows: &[RecordBatch], n: usize) -> Vec<Vec<RecordBatch>> {
    let total: usize = rows.iter().map(|b| b.num_rows()).sum();
    let per = total.div_ceil(n).max(1);
    let mut out = vec![Vec::new(); n];
    let (mut piece, mut filled) = (0, 0);
    for batch in rows {
        let mut offset = 0;
        while offset < batch.num_rows() {
            if filled == per && piece + 1 < n {
                piece += 1;
                filled = 0;
            }
            let take = match piece + 1 == n {
                true => batch.num_rows() - offset,
                false => (per - filled).min(batch.num_rows() - offset),
            };
            out[piece].push(batch.slice(offset, take));
            offset += take;
            filled += take;
        }
    }
    out
}

/// `parts` in `tasks` contiguous runs of `ceil(parts / tasks)` partitions each, the last ones
/// filled up with empty partitions.
fn runs(parts: &[Vec<RecordBatch>], tasks: usize) -> Vec<Vec<Vec<RecordBatch>>> {
    let per = parts.len().div_ceil(tasks.max(1)).max(1);
    (0..tasks.max(1))
        .map(|t| {
            (t * per..(t + 1) * per)
                .map(|i| parts.get(i).cloned().unwrap_or_default())
                .collect()
        })
        .collect()
}

impl BatchRowsExec {
    /// The partition count, then each partition's rows as an Arrow IPC stream (length first).
    pub(crate) fn encode(&self, buf: &mut Vec<u8>) -> Result<()> {
        buf.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        for part in &self.parts {
            let mut ipc = Vec::new();
            let mut writer = StreamWriter::try_new(&mut ipc, &self.schema)?;
            for batch in part {
                writer.write(batch)?;
            }
            writer.finish()?;
            drop(writer);
            buf.extend_from_slice(&(ipc.len() as u64).to_le_bytes());
            buf.extend_from_slice(&ipc);
        }
        Ok(())
    }

    /// What [`Self::encode`] wrote.
    pub(crate) fn decode(buf: &[u8]) -> Result<Self> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let out = buf
                .get(at..at + n)
                .ok_or_else(|| DataFusionError::Internal("a truncated BatchRowsExec".into()))?;
            at += n;
            Ok(out)
        };
        let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        let mut schema = None;
        let mut parts = Vec::with_capacity(count);
        for _ in 0..count {
            let len = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes")) as usize;
            let reader = StreamReader::try_new(Cursor::new(take(len)?), None)?;
            schema.get_or_insert_with(|| reader.schema());
            parts.push(reader.collect::<Result<Vec<_>, _>>()?);
        }
        let Some(schema) = schema else {
            return internal_err!("a BatchRowsExec without partitions");
        };
        Ok(Self::from_parts(schema, parts))
    }
}

impl DisplayAs for BatchRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "BatchRowsExec: rows={}, partitions={}",
            self.num_rows(),
            self.parts.len()
        )
    }
}

impl ExecutionPlan for BatchRowsExec {
    fn name(&self) -> &str {
        "BatchRowsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !children.is_empty() {
            return internal_err!("BatchRowsExec has no children");
        }
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if self.parts.len() != self.properties.partitioning.partition_count() {
            return internal_err!("BatchRowsExec runs once split over its tasks");
        }
        let Some(rows) = self.parts.get(partition) else {
            return internal_err!(
                "BatchRowsExec has {} partitions, partition {partition} was asked for",
                self.parts.len()
            );
        };
        let rows = rows.clone();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(rows.into_iter().map(Ok)),
        )))
    }
}

/// How many tasks a leaf runs on when datafusion-distributed places the network boundaries
/// itself (a plan where [`crate::boundary::OnWorkers`] placed none): one, so such a plan stays on
/// the driver (the planner would otherwise send Sluice's nodes, which only the driver can run).
/// The rows `OnWorkers` ships are split by the task counts of the boundaries it places.
pub(crate) fn desired_tasks(
    _event: DesiredTaskCountEvent,
) -> Option<Result<DesiredTaskCountEventResponse>> {
    Some(Ok(DesiredTaskCountEventResponse::maximum(1)))
}

/// The partitions split into one variant per task, contiguous runs of as many partitions each.
pub(crate) fn scale_up(
    event: ScaleUpLeafNodeEvent,
) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let rows = event.plan.downcast_ref::<BatchRowsExec>()?;
    let declared = rows.properties.partitioning.partition_count();
    if rows.parts.len().div_ceil(event.task_count.max(1)).max(1) != declared {
        return Some(internal_err!(
            "BatchRowsExec of {} partitions planned as {declared} per task, split over {} tasks",
            rows.parts.len(),
            event.task_count
        ));
    }
    let variants = runs(&rows.parts, event.task_count)
        .into_iter()
        .map(|parts| {
            Arc::new(BatchRowsExec::from_parts(rows.schema.clone(), parts))
                as Arc<dyn ExecutionPlan>
        })
        .collect::<Vec<_>>();
    Some(
        DistributedLeafExec::try_new(Arc::clone(event.plan), variants)
            .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(schema: &SchemaRef, from: i64, n: i64) -> RecordBatch {
        let values = Int64Array::from_iter_values(from..from + n);
        RecordBatch::try_new(schema.clone(), vec![Arc::new(values)]).unwrap()
    }

    fn values(parts: &[Vec<RecordBatch>]) -> Vec<Vec<i64>> {
        parts
            .iter()
            .map(|p| {
                p.iter()
                    .flat_map(|b| {
                        b.column(0)
                            .as_any()
                            .downcast_ref::<Int64Array>()
                            .unwrap()
                            .values()
                            .to_vec()
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_partition_is_cut_in_order_into_pieces_of_about_as_many_rows() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let rows = vec![
            batch(&schema, 0, 4),
            batch(&schema, 4, 3),
            batch(&schema, 7, 3),
        ];
        assert_eq!(
            values(&pieces(&rows, 3)),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]
        );
        let few = pieces(&rows[1..2], 5);
        assert_eq!(
            values(&few),
            vec![vec![4], vec![5], vec![6], vec![], vec![]]
        );
        assert_eq!(values(&pieces(&[], 2)), vec![Vec::<i64>::new(), vec![]]);
    }

    #[test]
    fn tasks_take_contiguous_runs_of_partitions_in_order() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let parts: Vec<Vec<RecordBatch>> =
            (0..5).map(|p| vec![batch(&schema, p * 10, 2)]).collect();
        let tasks = runs(&parts, 2);
        assert_eq!(
            values(&tasks[0]),
            vec![vec![0, 1], vec![10, 11], vec![20, 21]]
        );
        assert_eq!(values(&tasks[1]), vec![vec![30, 31], vec![40, 41], vec![]]);
        // the tasks' partitions in task order are the partitions in order
        let flat: Vec<Vec<RecordBatch>> = tasks.into_iter().flatten().collect();
        assert_eq!(values(&flat[..5]), values(&parts));
        assert_eq!(
            runs(&parts, 5).iter().map(Vec::len).collect::<Vec<_>>(),
            vec![1; 5]
        );
    }

    #[test]
    fn encoded_rows_come_back_with_every_partition_and_row() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let parts = vec![
            vec![batch(&schema, 0, 4)],
            vec![],
            vec![batch(&schema, 4, 6)],
        ];
        let exec = BatchRowsExec::from_parts(schema.clone(), parts);
        let mut buf = Vec::new();
        exec.encode(&mut buf).unwrap();
        let back = BatchRowsExec::decode(&buf).unwrap();
        assert_eq!(back.schema, schema);
        assert_eq!(values(&back.parts), values(&exec.parts));
        assert_eq!(back.properties.partitioning.partition_count(), 3);
    }
}
