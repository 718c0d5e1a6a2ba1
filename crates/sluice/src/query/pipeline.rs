//! How a query's plan is executed each batch: stateless (one DataFusion plan) or with a
//! streaming aggregation in the middle (DataFusion below it, the stateful operator, DataFusion
//! above it over the operator's output).

use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Column;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{Aggregate, LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::Expr;

use crate::error::{Result, SluiceError};
use crate::operators::aggregate::StreamingAggregate;
use crate::operators::watermark::{watermark_nodes, EventTimeStats};
use crate::plan::incremental::{BatchInputs, PlannedBatch};
use crate::plan::{is_streaming, IncrementalExecution, StreamingRelation};
use crate::progress::StateOperatorProgress;
use crate::session::Session;
use crate::sink::BatchData;
use crate::OutputMode;

/// What one batch produced.
pub(crate) struct PipelineOutput {
    pub data: BatchData,
    /// Per watermark node (post-order): delay and the batch's event-time statistics.
    pub watermarks: Vec<(i64, EventTimeStats)>,
    pub state_operators: Vec<StateOperatorProgress>,
    pub planning_ms: i64,
}

pub(crate) enum Pipeline {
    Stateless(Box<IncrementalExecution>),
    Aggregate(Box<AggregateStage>),
    /// The checkpoint's state does not fit this query. As in Spark, the query fails in its first
    /// batch, after `offsets/N` was written, so a later restart replays that batch as planned.
    Incompatible(SluiceError),
}

/// DataFusion below a streaming aggregation, the operator, DataFusion above it.
pub(crate) struct AggregateStage {
    below: IncrementalExecution,
    operator: StreamingAggregate,
    above: IncrementalExecution,
    placeholder: u64,
    placeholder_schema: SchemaRef,
    below_schema: SchemaRef,
}

/// The watermark statistics a planned batch collected.
fn observed(planned: &PlannedBatch) -> Vec<(i64, EventTimeStats)> {
    planned
        .watermarks
        .iter()
        .map(|(d, h)| (*d, *h.lock().unwrap_or_else(|p| p.into_inner())))
        .collect()
}

/// Splits `plan` at its streaming aggregation: (the Aggregate node, the plan above it with the
/// aggregation replaced by a placeholder scan, the placeholder's id).
fn split_aggregate(plan: &LogicalPlan) -> Result<Option<(Aggregate, LogicalPlan, u64, SchemaRef)>> {
    let mut found: Option<(Aggregate, u64, SchemaRef)> = None;
    let rewritten = plan
        .clone()
        .transform_down(|node| {
            if found.is_some() {
                return Ok(Transformed::no(node));
            }
            let LogicalPlan::Aggregate(agg) = &node else {
                return Ok(Transformed::no(node));
            };
            if !is_streaming(&agg.input) {
                return Ok(Transformed::no(node));
            }
            // Internal column names (no clash with the names the projection gives back); nullable,
            // as the operator's rows may hold nulls where the planner declared a field non-null.
            let fields: Vec<arrow::datatypes::Field> = agg
                .schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    arrow::datatypes::Field::new(format!("__c{i}"), f.data_type().clone(), true)
                })
                .collect();
            let schema = Arc::new(arrow::datatypes::Schema::new(fields));
            let rel = StreamingRelation::placeholder(schema.clone());
            let id = rel.id();
            let table = format!("__sluice_aggregate_{id}");
            let scan =
                LogicalPlanBuilder::scan(table.as_str(), provider_as_source(Arc::new(rel)), None)?
                    .build()?;
            let exprs: Vec<Expr> = agg
                .schema
                .iter()
                .enumerate()
                .map(|(i, (q, f))| {
                    Expr::Column(Column::new(Some(table.as_str()), format!("__c{i}")))
                        .alias_qualified(q.cloned(), f.name())
                })
                .collect();
            let projected = LogicalPlanBuilder::from(scan).project(exprs)?.build()?;
            found = Some((agg.clone(), id, schema));
            Ok(Transformed::new(projected, true, TreeNodeRecursion::Jump))
        })
        .map_err(SluiceError::from)?;
    Ok(found.map(|(agg, id, schema)| (agg, rewritten.data, id, schema)))
}

impl Pipeline {
    pub fn try_new(
        session: &Session,
        plan: LogicalPlan,
        mode: OutputMode,
        checkpoint_root: &Path,
        partitions: usize,
    ) -> Result<Self> {
        let state = session.df_state();
        match split_aggregate(&plan)? {
            None => Ok(Pipeline::Stateless(Box::new(IncrementalExecution::new(
                state, plan, partitions,
            )))),
            Some((agg, above, placeholder, placeholder_schema)) => {
                let allow_rename = session
                    .conf(crate::operators::aggregate::ALLOW_KEY_RENAME_CONF)
                    .is_some_and(|v| v.eq_ignore_ascii_case("true"));
                let mut store_conf = crate::state::StateStoreConf::default();
                if let Some(v) = session
                    .conf(super::microbatch::MIN_BATCHES_TO_RETAIN)
                    .and_then(|v| v.parse().ok())
                {
                    store_conf.min_versions_to_retain = v;
                }
                if let Some(v) = session
                    .conf("spark.sql.streaming.stateStore.minDeltasForSnapshot")
                    .and_then(|v| v.parse().ok())
                {
                    store_conf.min_deltas_for_snapshot = v;
                }
                let operator = match StreamingAggregate::try_new(
                    &agg,
                    0,
                    mode,
                    checkpoint_root,
                    partitions,
                    allow_rename,
                    store_conf,
                ) {
                    Ok(op) => op,
                    Err(e) if e.class().starts_with("STATE_SCHEMA") => {
                        return Ok(Pipeline::Incompatible(e))
                    }
                    Err(e) => return Err(e),
                };
                let below_plan = agg.input.as_ref().clone();
                let below_schema = Arc::new(below_plan.schema().as_arrow().clone());
                Ok(Pipeline::Aggregate(Box::new(AggregateStage {
                    below: IncrementalExecution::new(state.clone(), below_plan, partitions),
                    operator,
                    above: IncrementalExecution::new(state, above, partitions),
                    placeholder,
                    placeholder_schema,
                    below_schema,
                })))
            }
        }
    }

    /// True when the plan defines a watermark (progress then reports `eventTime.watermark`).
    pub fn has_watermark(&self) -> bool {
        let plan = match self {
            Pipeline::Stateless(e) => e.logical_plan(),
            Pipeline::Aggregate(a) => a.below.logical_plan(),
            Pipeline::Incompatible(_) => return false,
        };
        !watermark_nodes(plan).is_empty()
    }

    /// Spark's `shouldRunAnotherBatch`: would a no-data batch emit or evict?
    pub fn should_run_another_batch(
        &self,
        batch_watermark_ms: i64,
        next_watermark_ms: i64,
    ) -> bool {
        match self {
            Pipeline::Stateless(_) | Pipeline::Incompatible(_) => false,
            Pipeline::Aggregate(a) => a
                .operator
                .should_run_another_batch(batch_watermark_ms, next_watermark_ms),
        }
    }

    pub async fn explain(&self) -> Result<String> {
        match self {
            Pipeline::Stateless(e) => e.explain().await,
            Pipeline::Incompatible(e) => Ok(format!("(cannot run: {e})")),
            Pipeline::Aggregate(a) => Ok(format!(
                "== Above the streaming aggregation ==\n{}\n\n== StreamingAggregate (stateStoreSave) ==\n\n== Below the streaming aggregation ==\n{}",
                a.above.explain().await?,
                a.below.explain().await?
            )),
        }
    }

    /// Runs one batch over `inputs`.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        session: &Session,
        inputs: &BatchInputs,
        batch_timestamp_ms: i64,
        late_watermark_ms: i64,
        eviction_watermark_ms: i64,
        batch_id: u64,
    ) -> Result<PipelineOutput> {
        let t = std::time::Instant::now();
        match self {
            Pipeline::Stateless(exec) => {
                let planned = session.block_on(exec.physical_plan(inputs, batch_timestamp_ms))?;
                let planning_ms = t.elapsed().as_millis() as i64;
                let data = session.block_on(IncrementalExecution::execute(&planned))?;
                Ok(PipelineOutput {
                    data,
                    watermarks: observed(&planned),
                    state_operators: vec![],
                    planning_ms,
                })
            }
            Pipeline::Incompatible(e) => Err(e.clone()),
            Pipeline::Aggregate(stage) => {
                let AggregateStage {
                    below,
                    operator,
                    above,
                    placeholder,
                    placeholder_schema,
                    below_schema,
                } = stage.as_mut();
                let planned = session.block_on(below.physical_plan(inputs, batch_timestamp_ms))?;
                let mut planning_ms = t.elapsed().as_millis() as i64;
                let input = session.block_on(IncrementalExecution::execute(&planned))?;
                let batches: Vec<_> = input.batches().cloned().collect();
                let out = operator.process(
                    &batches,
                    below_schema,
                    late_watermark_ms,
                    eviction_watermark_ms,
                    batch_id,
                )?;
                let mut above_inputs = BatchInputs::new();
                let rows =
                    RecordBatch::try_new(placeholder_schema.clone(), out.rows.columns().to_vec())?;
                above_inputs.insert(*placeholder, vec![rows]);
                let t2 = std::time::Instant::now();
                let planned_above =
                    session.block_on(above.physical_plan(&above_inputs, batch_timestamp_ms))?;
                planning_ms += t2.elapsed().as_millis() as i64;
                let data = session.block_on(IncrementalExecution::execute(&planned_above))?;
                Ok(PipelineOutput {
                    data,
                    watermarks: observed(&planned),
                    state_operators: vec![out.progress],
                    planning_ms,
                })
            }
        }
    }
}
