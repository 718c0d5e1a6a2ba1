//! [`SluiceCodec`]: how Sluice's physical nodes cross the wire to the workers: a batch's rows
//! (`BatchRowsExec`, as Arrow IPC), Spark's generators (`GenerateExec`: its generator, its
//! arguments as DataFusion's physical expressions, its kept and generated columns), watermark
//! nodes (their column and delay) and the leaf of a plan over a read (`ReadRowsExec`: its
//! schema), each after a byte that says which.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::from_proto::parse_physical_expr;
use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use datafusion_proto::protobuf;
use prost::Message;
use sluice::distributed::GenerateParts;
use sluice::source::remote::ReadRowsExec;
use sluice::{generate_exec, generate_parts, watermark_exec, watermark_parts};

use crate::rows::BatchRowsExec;

const BATCH_ROWS: u8 = 0;
const GENERATE: u8 = 1;
const READ_ROWS: u8 = 2;
const WATERMARK: u8 = 3;

/// A watermark node on the wire: its event-time column and its delay.
#[derive(Clone, PartialEq, Message)]
struct WatermarkProto {
    #[prost(uint64, tag = "1")]
    column: u64,
    #[prost(int64, tag = "2")]
    delay_ms: i64,
}

/// Carries Sluice's nodes to the workers (registered on the driver's and the workers' sessions).
#[derive(Debug, Default)]
pub struct SluiceCodec;

/// A `GenerateExec` on the wire.
#[derive(Clone, PartialEq, Message)]
struct GenerateProto {
    #[prost(string, tag = "1")]
    generator: String,
    #[prost(uint64, tag = "2")]
    stack_rows: u64,
    #[prost(bool, tag = "3")]
    outer: bool,
    #[prost(message, repeated, tag = "4")]
    args: Vec<protobuf::PhysicalExprNode>,
    #[prost(uint64, repeated, tag = "5")]
    kept: Vec<u64>,
    /// The generated columns, as a schema's fields.
    #[prost(message, optional, tag = "6")]
    generated: Option<protobuf::Schema>,
}

fn wire_error(e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Internal(format!("a Sluice node off the wire: {e}"))
}

impl PhysicalExtensionCodec for SluiceCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match (buf.first(), inputs) {
            (Some(&BATCH_ROWS), []) => Ok(Arc::new(BatchRowsExec::decode(&buf[1..])?)),
            (Some(&READ_ROWS), []) => {
                let schema = protobuf::Schema::decode(&buf[1..]).map_err(wire_error)?;
                let schema: Schema = (&schema).try_into()?;
                Ok(Arc::new(ReadRowsExec::new(Arc::new(schema))))
            }
            (Some(&WATERMARK), [input]) => {
                let w = WatermarkProto::decode(&buf[1..]).map_err(wire_error)?;
                Ok(watermark_exec(
                    Arc::clone(input),
                    w.column as usize,
                    w.delay_ms,
                ))
            }
            (Some(&GENERATE), [input]) => {
                let g = GenerateProto::decode(&buf[1..]).map_err(wire_error)?;
                let schema = input.schema();
                let args = g
                    .args
                    .iter()
                    .map(|a| parse_physical_expr(a, ctx, &schema, self))
                    .collect::<Result<Vec<_>>>()?;
                let generated: Schema = g
                    .generated
                    .as_ref()
                    .ok_or_else(|| wire_error("a generator without its columns"))?
                    .try_into()?;
                let parts = GenerateParts {
                    generator: g.generator,
                    stack_rows: g.stack_rows as usize,
                    outer: g.outer,
                    args,
                    kept: g.kept.iter().map(|&k| k as usize).collect(),
                    generated: generated.fields().iter().map(|f| Field::clone(f)).collect(),
                };
                generate_exec(Arc::clone(input), parts)
                    .map_err(|e| DataFusionError::External(Box::new(e)))
            }
            (kind, _) => internal_err!(
                "Sluice's codec cannot decode a node of kind {kind:?} over {} inputs",
                inputs.len()
            ),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(rows) = node.downcast_ref::<BatchRowsExec>() {
            buf.push(BATCH_ROWS);
            return rows.encode(buf);
        }
        if node.is::<ReadRowsExec>() {
            buf.push(READ_ROWS);
            let schema: protobuf::Schema = node.schema().as_ref().try_into()?;
            return schema.encode(buf).map_err(wire_error);
        }
        if let Some((column, delay_ms)) = watermark_parts(&node) {
            buf.push(WATERMARK);
            let proto = WatermarkProto {
                column: column as u64,
                delay_ms,
            };
            return proto.encode(buf).map_err(wire_error);
        }
        let Some(g) = generate_parts(&node) else {
            return internal_err!("Sluice's codec cannot encode {}", node.name());
        };
        let generated = Schema::new(g.generated);
        let proto = GenerateProto {
            generator: g.generator,
            stack_rows: g.stack_rows as u64,
            outer: g.outer,
            args: g
                .args
                .iter()
                .map(|a| serialize_physical_expr(a, self))
                .collect::<Result<Vec<_>>>()?,
            kept: g.kept.iter().map(|&k| k as u64).collect(),
            generated: Some((&generated).try_into()?),
        };
        buf.push(GENERATE);
        proto.encode(buf).map_err(wire_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, ListArray, RecordBatch};
    use arrow::datatypes::{DataType, Int64Type};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_plan::collect;
    use datafusion_proto::physical_plan::DefaultPhysicalProtoConverter;

    /// `explode_outer(items)` keeping `id`, encoded and decoded, gives the rows it gave before.
    #[tokio::test]
    async fn a_generator_crosses_the_wire_and_generates_the_same_rows() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new_list("items", Field::new_list_field(DataType::Int64, true), true),
        ]));
        let items = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            Some(vec![]),
            None,
            Some(vec![Some(3)]),
        ]);
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![10, 20, 30, 40])),
                Arc::new(items),
            ],
        )
        .unwrap();
        let input: Arc<dyn ExecutionPlan> =
            Arc::new(BatchRowsExec::from_parts(schema.clone(), vec![vec![batch]]));
        let parts = GenerateParts {
            generator: "explode".into(),
            stack_rows: 0,
            outer: true,
            args: vec![col("items", &schema).unwrap()],
            kept: vec![0],
            generated: vec![Field::new("col", DataType::Int64, true)],
        };
        let node = generate_exec(Arc::clone(&input), parts).unwrap();
        let (codec, converter) = (SluiceCodec, DefaultPhysicalProtoConverter {});
        let mut buf = Vec::new();
        codec
            .try_encode(Arc::clone(&node), &mut buf, &converter)
            .unwrap();
        let ctx = Arc::new(TaskContext::default());
        let back = codec.try_decode(&buf, &[input], &ctx, &converter).unwrap();
        let before = collect(node, Arc::clone(&ctx)).await.unwrap();
        let after = collect(back, ctx).await.unwrap();
        assert_eq!(after, before);
        let rows: usize = after.iter().map(|b| b.num_rows()).sum();
        // 1, 2 for id 10; one null row each for the empty and the null list; 3 for id 40
        assert_eq!(rows, 5);
        // a node the codec does not know is refused, not sent empty
        let mut buf = Vec::new();
        let empty = Arc::new(datafusion::physical_plan::empty::EmptyExec::new(schema));
        assert!(codec.try_encode(empty, &mut buf, &converter).is_err());
    }
}
