//! A batch's rows on their way to the workers: [`BatchRowsExec`], the leaf that takes the place of
//! a source's in-memory rows in a batch's plan, split into one slice per task (each task's rows
//! travel with its plan, as Arrow IPC), and [`SluiceCodec`], which carries it over the wire.

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
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

/// A batch's rows (one source's, projected as its scan reads them) in `partitions` partitions.
/// Before the plan is split over the workers it holds every row; each task's variant holds that
/// task's slice ([`scale_up`]).
#[derive(Debug, Clone)]
pub(crate) struct BatchRowsExec {
    parts: Vec<Vec<RecordBatch>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl BatchRowsExec {
    /// `rows` dealt into `partitions` partitions of about as many rows each (batches are sliced,
    /// not copied).
    pub(crate) fn new(schema: SchemaRef, rows: &[RecordBatch], partitions: usize) -> Self {
        Self::from_parts(schema.clone(), deal(rows, partitions.max(1)))
    }

    fn from_parts(schema: SchemaRef, parts: Vec<Vec<RecordBatch>>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(parts.len()),
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

/// `rows` cut into `n` runs of about as many rows each, in order.
fn deal(rows: &[RecordBatch], n: usize) -> Vec<Vec<RecordBatch>> {
    let total: usize = rows.iter().map(|b| b.num_rows()).sum();
    let per = total.div_ceil(n).max(1);
    let mut parts = vec![Vec::new(); n];
    let (mut part, mut filled) = (0, 0);
    for batch in rows {
        let mut offset = 0;
        while offset < batch.num_rows() {
            if filled == per && part + 1 < n {
                part += 1;
                filled = 0;
            }
            let take = (per - filled).min(batch.num_rows() - offset);
            let take = if part + 1 == n {
                batch.num_rows() - offset
            } else {
                take
            };
            parts[part].push(batch.slice(offset, take));
            offset += take;
            filled += take;
        }
    }
    parts
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

/// How many tasks a batch's rows run on: one per worker, at most one per row.
pub(crate) fn desired_tasks(
    event: DesiredTaskCountEvent,
) -> Option<Result<DesiredTaskCountEventResponse>> {
    let rows = event.plan.downcast_ref::<BatchRowsExec>()?;
    Some(Ok(DesiredTaskCountEventResponse::desired(
        rows.num_rows().max(1),
    )))
}

/// The rows split into one variant per task, each with the same number of partitions.
pub(crate) fn scale_up(
    event: ScaleUpLeafNodeEvent,
) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let rows = event.plan.downcast_ref::<BatchRowsExec>()?;
    let partitions = rows.parts.len();
    let all: Vec<RecordBatch> = rows.parts.iter().flatten().cloned().collect();
    let variants = deal(&all, event.task_count.max(1))
        .into_iter()
        .map(|task_rows| {
            Arc::new(BatchRowsExec::new(
                rows.schema.clone(),
                &task_rows,
                partitions,
            )) as Arc<dyn ExecutionPlan>
        })
        .collect::<Vec<_>>();
    Some(
        DistributedLeafExec::try_new(Arc::clone(event.plan), variants)
            .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
    )
}

/// Carries Sluice's nodes to the workers: a [`BatchRowsExec`] as its partition count, then each
/// partition's rows as an Arrow IPC stream (length first).
#[derive(Debug, Default)]
pub struct SluiceCodec;

impl PhysicalExtensionCodec for SluiceCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !inputs.is_empty() {
            return internal_err!("BatchRowsExec has no inputs, got {}", inputs.len());
        }
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
        Ok(Arc::new(BatchRowsExec::from_parts(schema, parts)))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(rows) = node.downcast_ref::<BatchRowsExec>() else {
            return internal_err!("Sluice's codec cannot encode {}", node.name());
        };
        buf.extend_from_slice(&(rows.parts.len() as u32).to_le_bytes());
        for part in &rows.parts {
            let mut ipc = Vec::new();
            let mut writer = StreamWriter::try_new(&mut ipc, &rows.schema)?;
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
    fn rows_are_dealt_in_order_into_runs_of_about_as_many_rows() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let rows = vec![
            batch(&schema, 0, 4),
            batch(&schema, 4, 3),
            batch(&schema, 7, 3),
        ];
        let parts = deal(&rows, 3);
        assert_eq!(
            values(&parts),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]
        );
        // more parts than rows: the first rows one each, the rest empty; nothing lost
        let parts = deal(&rows[1..2], 5);
        assert_eq!(
            values(&parts),
            vec![vec![4], vec![5], vec![6], vec![], vec![]]
        );
        assert_eq!(values(&deal(&[], 2)), vec![Vec::<i64>::new(), vec![]]);
    }

    #[test]
    fn the_codec_carries_every_partition_and_row() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let exec = BatchRowsExec::new(schema.clone(), &[batch(&schema, 0, 10)], 3);
        let (codec, converter) = (
            SluiceCodec,
            datafusion_proto::physical_plan::DefaultPhysicalProtoConverter {},
        );
        let mut buf = Vec::new();
        codec
            .try_encode(Arc::new(exec.clone()), &mut buf, &converter)
            .unwrap();
        let ctx = TaskContext::default();
        let back = codec.try_decode(&buf, &[], &ctx, &converter).unwrap();
        let back = back.downcast_ref::<BatchRowsExec>().unwrap();
        assert_eq!(back.schema, schema);
        assert_eq!(values(&back.parts), values(&exec.parts));
        assert_eq!(back.properties.partitioning.partition_count(), 3);
    }
}
