//! `GenerateExec` (Spark's `GenerateExec`): per input batch, the generator's rows. Stateless, so
//! it runs inside any micro-batch plan and below stateful operators.

use std::fmt;
use std::sync::Arc;

use arrow::array::{
    make_array, new_null_array, Array, ArrayRef, AsArray, Int32Builder, RecordBatch,
    RecordBatchOptions, UInt32Builder, UInt64Builder,
};
use arrow::buffer::NullBuffer;
use arrow::compute::{cast, interleave, take};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session as DfSession;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    Boundedness, ChildrenPropertiesMode, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use datafusion::prelude::Expr;
use futures::StreamExt;

use super::node::Generate;
use super::GeneratorKind;

/// What the exec generates (the kind, with `stack`'s row count).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum GenFn {
    /// `explode` / `posexplode` (`pos` first when `with_pos`).
    Explode { with_pos: bool },
    /// `inline`.
    Inline,
    /// `stack(rows, ..)`.
    Stack { rows: usize },
    /// `json_tuple(json, fields..)`.
    JsonTuple,
}

/// `json_tuple`'s columns: per row, each field's value of the JSON object `args[0]` (a string
/// as it is, another value as compact JSON text, null when missing, JSON null, or when the
/// document is null, malformed or not an object), as Spark's `JsonTuple`.
fn json_tuple_columns(args: &[ArrayRef], num_rows: usize) -> DfResult<Vec<ArrayRef>> {
    let strings = args
        .iter()
        .map(|a| cast(a, &DataType::Utf8))
        .collect::<DfResult<Vec<_>, _>>()?;
    let docs = strings[0].as_string::<i32>();
    let mut builders: Vec<arrow::array::StringBuilder> = (1..strings.len())
        .map(|_| arrow::array::StringBuilder::new())
        .collect();
    for i in 0..num_rows {
        let object = if docs.is_valid(i) {
            match serde_json::from_str::<serde_json::Value>(docs.value(i)) {
                Ok(serde_json::Value::Object(m)) => Some(m),
                _ => None,
            }
        } else {
            None
        };
        for (j, b) in builders.iter_mut().enumerate() {
            let names = strings[j + 1].as_string::<i32>();
            let value = match (&object, names.is_valid(i)) {
                (Some(m), true) => m.get(names.value(i)),
                _ => None,
            };
            match value {
                None | Some(serde_json::Value::Null) => b.append_null(),
                Some(serde_json::Value::String(s)) => b.append_value(s),
                Some(other) => b.append_value(other.to_string()),
            }
        }
    }
    Ok(builders
        .into_iter()
        .map(|mut b| Arc::new(b.finish()) as ArrayRef)
        .collect())
}

/// The rows generated from one batch: for each output row its input row, and the generated
/// columns.
pub(crate) struct Generated {
    pub(crate) input_rows: arrow::array::UInt32Array,
    pub(crate) columns: Vec<ArrayRef>,
}

/// For each input row: the range of its elements in `values` (empty for a null row).
fn element_spans(a: &ArrayRef) -> DfResult<(ArrayRef, Vec<(usize, usize)>)> {
    fn spans<O: arrow::array::OffsetSizeTrait>(
        offsets: &arrow::buffer::OffsetBuffer<O>,
        nulls: Option<&NullBuffer>,
    ) -> Vec<(usize, usize)> {
        offsets
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                if nulls.is_some_and(|n| n.is_null(i)) {
                    (0, 0)
                } else {
                    (w[0].as_usize(), w[1].as_usize() - w[0].as_usize())
                }
            })
            .collect()
    }
    Ok(match a.data_type() {
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            (l.values().clone(), spans(l.offsets(), l.nulls()))
        }
        DataType::LargeList(_) => {
            let l = a.as_list::<i64>();
            (l.values().clone(), spans(l.offsets(), l.nulls()))
        }
        DataType::Map(_, _) => {
            let m = a.as_map();
            let entries: ArrayRef = Arc::new(m.entries().clone());
            (entries, spans(m.offsets(), m.nulls()))
        }
        DataType::FixedSizeList(_, size) => {
            let l = a.as_fixed_size_list();
            let size = *size as usize;
            let s = (0..l.len())
                .map(|i| {
                    if l.is_null(i) {
                        (0, 0)
                    } else {
                        (i * size, size)
                    }
                })
                .collect();
            (l.values().clone(), s)
        }
        other => {
            return Err(DataFusionError::Execution(format!(
                "a generator over {other} (an array or a map was planned)"
            )))
        }
    })
}

/// The element indices of each output row (null for an outer row of nulls), its input row and
/// its position.
fn element_rows(
    spans: &[(usize, usize)],
    outer: bool,
) -> (
    arrow::array::UInt32Array,
    arrow::array::UInt64Array,
    arrow::array::Int32Array,
) {
    let total: usize = spans
        .iter()
        .map(|(_, n)| (*n).max(usize::from(outer)))
        .sum();
    let mut rows = UInt32Builder::with_capacity(total);
    let mut elems = UInt64Builder::with_capacity(total);
    let mut pos = Int32Builder::with_capacity(total);
    for (i, (start, n)) in spans.iter().enumerate() {
        if *n == 0 {
            if outer {
                rows.append_value(i as u32);
                elems.append_null();
                pos.append_null();
            }
            continue;
        }
        for k in 0..*n {
            rows.append_value(i as u32);
            elems.append_value((start + k) as u64);
            pos.append_value(k as i32);
        }
    }
    (rows.finish(), elems.finish(), pos.finish())
}

/// `child` with the nulls of its parent struct added (a null struct gives null fields).
fn with_parent_nulls(child: &ArrayRef, parent: Option<&NullBuffer>) -> DfResult<ArrayRef> {
    let Some(parent) = parent else {
        return Ok(child.clone());
    };
    let nulls = NullBuffer::union(Some(parent), child.nulls());
    let data = child.to_data().into_builder().nulls(nulls).build()?;
    Ok(make_array(data))
}

/// Runs generator `f` over the evaluated arguments `args` of a batch of `num_rows` rows;
/// `types` are the generated columns' types.
pub(crate) fn generate(
    f: GenFn,
    outer: bool,
    args: &[ArrayRef],
    num_rows: usize,
    types: &[DataType],
) -> DfResult<Generated> {
    match f {
        GenFn::JsonTuple => Ok(Generated {
            input_rows: (0..num_rows as u32).collect(),
            columns: json_tuple_columns(args, num_rows)?,
        }),
        GenFn::Explode { with_pos } => {
            let (values, spans) = element_spans(&args[0])?;
            let (input_rows, elems, pos) = element_rows(&spans, outer);
            let mut columns: Vec<ArrayRef> = Vec::new();
            if with_pos {
                columns.push(Arc::new(pos));
            }
            let taken = take(values.as_ref(), &elems, None)?;
            if matches!(args[0].data_type(), DataType::Map(_, _)) {
                let entries = taken.as_struct();
                let nulls = entries.nulls();
                for c in entries.columns() {
                    columns.push(with_parent_nulls(c, nulls)?);
                }
            } else {
                columns.push(taken);
            }
            Ok(Generated {
                input_rows,
                columns,
            })
        }
        GenFn::Inline => {
            let (values, spans) = element_spans(&args[0])?;
            let (input_rows, elems, _) = element_rows(&spans, outer);
            let taken = take(values.as_ref(), &elems, None)?;
            let structs = taken.as_struct_opt().ok_or_else(|| {
                DataFusionError::Execution("inline over an array of non-structs".into())
            })?;
            let nulls = structs.nulls();
            let columns = structs
                .columns()
                .iter()
                .map(|c| with_parent_nulls(c, nulls))
                .collect::<DfResult<_>>()?;
            Ok(Generated {
                input_rows,
                columns,
            })
        }
        GenFn::Stack { rows } => {
            let values = &args[1..];
            let columns_n = types.len();
            let mut input_rows = UInt32Builder::with_capacity(num_rows * rows);
            for i in 0..num_rows {
                for _ in 0..rows {
                    input_rows.append_value(i as u32);
                }
            }
            let mut columns = Vec::with_capacity(columns_n);
            for (j, t) in types.iter().enumerate() {
                // sources: the values of column j, row by row, then one null
                let mut sources: Vec<ArrayRef> = Vec::with_capacity(rows + 1);
                for r in 0..rows {
                    if let Some(v) = values.get(r * columns_n + j) {
                        sources.push(cast(v, t)?);
                    }
                }
                let null_source = sources.len();
                sources.push(new_null_array(t, 1));
                let mut indices = Vec::with_capacity(num_rows * rows);
                for i in 0..num_rows {
                    for r in 0..rows {
                        if r < null_source {
                            indices.push((r, i));
                        } else {
                            indices.push((null_source, 0));
                        }
                    }
                }
                let refs: Vec<&dyn Array> = sources.iter().map(|a| a.as_ref()).collect();
                columns.push(interleave(&refs, &indices)?);
            }
            Ok(Generated {
                input_rows: input_rows.finish(),
                columns,
            })
        }
    }
}

/// The physical `Generate`.
#[derive(Debug)]
pub(crate) struct GenerateExec {
    input: Arc<dyn ExecutionPlan>,
    f: GenFn,
    outer: bool,
    args: Vec<Arc<dyn PhysicalExpr>>,
    /// Input column indices kept in the output.
    kept: Vec<usize>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl GenerateExec {
    fn new(
        input: Arc<dyn ExecutionPlan>,
        f: GenFn,
        outer: bool,
        args: Vec<Arc<dyn PhysicalExpr>>,
        kept: Vec<usize>,
        generated: Vec<Field>,
    ) -> Self {
        let in_schema = input.schema();
        let mut fields: Vec<Field> = kept.iter().map(|&i| in_schema.field(i).clone()).collect();
        fields.extend(generated);
        let schema = Arc::new(Schema::new_with_metadata(
            fields,
            in_schema.metadata().clone(),
        ));
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            input.output_partitioning().clone(),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Self {
            input,
            f,
            outer,
            args,
            kept,
            schema,
            properties,
        }
    }

    fn generated_types(&self) -> Vec<DataType> {
        self.schema.fields()[self.kept.len()..]
            .iter()
            .map(|f| f.data_type().clone())
            .collect()
    }

    fn process(&self, batch: &RecordBatch) -> DfResult<RecordBatch> {
        let n = batch.num_rows();
        let args = self
            .args
            .iter()
            .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
            .collect::<DfResult<Vec<_>>>()?;
        let out = generate(self.f, self.outer, &args, n, &self.generated_types())?;
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for &i in &self.kept {
            columns.push(take(batch.column(i).as_ref(), &out.input_rows, None)?);
        }
        columns.extend(out.columns);
        let options = RecordBatchOptions::new().with_row_count(Some(out.input_rows.len()));
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &options,
        )?)
    }
}

impl GenerateExec {
    /// The node as parts another crate can carry (`crate::distributed::generate_parts`).
    pub(crate) fn parts(&self) -> crate::distributed::GenerateParts {
        let (generator, stack_rows) = match self.f {
            GenFn::Explode { with_pos: false } => ("explode", 0),
            GenFn::Explode { with_pos: true } => ("posexplode", 0),
            GenFn::Inline => ("inline", 0),
            GenFn::Stack { rows } => ("stack", rows),
            GenFn::JsonTuple => ("json_tuple", 0),
        };
        crate::distributed::GenerateParts {
            generator: generator.to_string(),
            stack_rows,
            outer: self.outer,
            args: self.args.clone(),
            kept: self.kept.clone(),
            generated: self.schema.fields()[self.kept.len()..]
                .iter()
                .map(|f| f.as_ref().clone())
                .collect(),
        }
    }

    /// The node over `input` from its parts; `None` for a generator it does not know.
    pub(crate) fn from_parts(
        input: Arc<dyn ExecutionPlan>,
        parts: crate::distributed::GenerateParts,
    ) -> Option<Self> {
        let f = match parts.generator.as_str() {
            "explode" => GenFn::Explode { with_pos: false },
            "posexplode" => GenFn::Explode { with_pos: true },
            "inline" => GenFn::Inline,
            "stack" => GenFn::Stack {
                rows: parts.stack_rows,
            },
            "json_tuple" => GenFn::JsonTuple,
            _ => return None,
        };
        if parts
            .kept
            .iter()
            .any(|&i| i >= input.schema().fields().len())
        {
            return None;
        }
        Some(Self::new(
            input,
            f,
            parts.outer,
            parts.args,
            parts.kept,
            parts.generated,
        ))
    }
}

/// `plan`'s parts when it is a `GenerateExec` (for a [`crate::distributed::Cluster`] to carry
/// it to its workers).
pub fn generate_parts(plan: &Arc<dyn ExecutionPlan>) -> Option<crate::distributed::GenerateParts> {
    plan.downcast_ref::<GenerateExec>().map(GenerateExec::parts)
}

/// The `GenerateExec` of `parts` over `input`; an error for parts that do not make one (an
/// unknown generator, a kept column `input` does not have).
pub fn generate_exec(
    input: Arc<dyn ExecutionPlan>,
    parts: crate::distributed::GenerateParts,
) -> crate::error::Result<Arc<dyn ExecutionPlan>> {
    let what = format!(
        "{} over {} columns",
        parts.generator,
        input.schema().fields().len()
    );
    match GenerateExec::from_parts(input, parts) {
        Some(exec) => Ok(Arc::new(exec)),
        None => Err(crate::error::SluiceError::internal(format!(
            "a generator node that does not fit its input: {what}"
        ))),
    }
}

impl DisplayAs for GenerateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "GenerateExec: {:?}, outer={}, kept={:?}",
            self.f, self.outer, self.kept
        )
    }
}

impl ExecutionPlan for GenerateExec {
    fn name(&self) -> &str {
        "GenerateExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        for e in &self.args {
            if f(e)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }
    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = children.pop().unwrap_or_else(|| self.input.clone());
        let generated = self.schema.fields()[self.kept.len()..]
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        Ok(Arc::new(GenerateExec::new(
            input,
            self.f,
            self.outer,
            self.args.clone(),
            self.kept.clone(),
            generated,
        )))
    }
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }
    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let this = GenerateExec::new(
            self.input.clone(),
            self.f,
            self.outer,
            self.args.clone(),
            self.kept.clone(),
            self.schema.fields()[self.kept.len()..]
                .iter()
                .map(|f| f.as_ref().clone())
                .collect(),
        );
        let schema = self.schema.clone();
        let stream = input.map(move |b| b.and_then(|batch| this.process(&batch)));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// Plans [`Generate`] nodes.
#[derive(Debug, Default)]
pub(crate) struct GenerateExtensionPlanner;

#[async_trait]
impl ExtensionPlanner for GenerateExtensionPlanner {
    async fn plan_extension(
        &self,
        planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn DfSession,
        ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(g) = node.as_any().downcast_ref::<Generate>() else {
            return Ok(None);
        };
        let in_schema = logical_inputs[0].schema();
        let args = g
            .args()
            .iter()
            .map(|a| planner.create_physical_expr(a, in_schema, session, ctx))
            .collect::<DfResult<Vec<_>>>()?;
        let kept = g
            .kept
            .iter()
            .map(|c| in_schema.index_of_column(c))
            .collect::<DfResult<Vec<_>>>()?;
        let f = match g.kind() {
            GeneratorKind::Explode => GenFn::Explode { with_pos: false },
            GeneratorKind::PosExplode => GenFn::Explode { with_pos: true },
            GeneratorKind::Inline => GenFn::Inline,
            GeneratorKind::JsonTuple => GenFn::JsonTuple,
            GeneratorKind::Stack => GenFn::Stack {
                rows: stack_rows_of(g.args().first())?,
            },
        };
        let generated = g.schema().fields()[g.kept.len()..]
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        Ok(Some(Arc::new(GenerateExec::new(
            physical_inputs[0].clone(),
            f,
            g.outer,
            args,
            kept,
            generated,
        ))))
    }
}

fn stack_rows_of(n: Option<&Expr>) -> DfResult<usize> {
    match n {
        Some(Expr::Literal(v, _)) => match v.cast_to(&DataType::Int64)? {
            ScalarValue::Int64(Some(n)) if n > 0 => Ok(n as usize),
            other => Err(DataFusionError::Plan(format!(
                "stack: the number of rows must be above 0, got {other}"
            ))),
        },
        other => Err(DataFusionError::Plan(format!(
            "stack: the number of rows must be an integer literal, got {other:?}"
        ))),
    }
}
