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
use datafusion::logical_expr::{Aggregate, Distinct, Join, LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::Expr;

use crate::error::{Result, SluiceError};
use crate::operators::aggregate::StreamingAggregate;
use crate::operators::dedup::{Deduplicate, StreamingDeduplicate};
use crate::operators::flat_map_groups_with_state::{
    FlatMapGroupsWithState, FlatMapGroupsWithStateExec,
};
use crate::operators::join::StreamingJoin;
use crate::operators::stateful::{StatefulOperator, ALLOW_KEY_RENAME_CONF};
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
    Stateful(Box<StatefulStage>),
    /// The checkpoint's state does not fit this query. As in Spark, the query fails in its first
    /// batch, after `offsets/N` was written, so a later restart replays that batch as planned.
    Incompatible(SluiceError),
}

/// DataFusion below a stateful operator (one plan per input), the operator, DataFusion above it.
pub(crate) struct StatefulStage {
    inputs: Vec<IncrementalExecution>,
    operator: Box<dyn StatefulOperator>,
    above: IncrementalExecution,
    placeholder: u64,
    placeholder_schema: SchemaRef,
}

/// The watermark statistics a planned batch collected.
fn observed(planned: &PlannedBatch) -> Vec<(i64, EventTimeStats)> {
    planned
        .watermarks
        .iter()
        .map(|(d, h)| (*d, *h.lock().unwrap_or_else(|p| p.into_inner())))
        .collect()
}

/// The stateful node found in a plan.
enum StatefulNode {
    Aggregate(Aggregate),
    Deduplicate(Deduplicate),
    Join(Join),
    FlatMapGroupsWithState(FlatMapGroupsWithState),
}

impl StatefulNode {
    fn of(node: &LogicalPlan) -> Result<Option<StatefulNode>> {
        Ok(match node {
            LogicalPlan::Aggregate(agg) if is_streaming(&agg.input) => {
                Some(StatefulNode::Aggregate(agg.clone()))
            }
            LogicalPlan::Join(j) if is_streaming(&j.left) && is_streaming(&j.right) => {
                Some(StatefulNode::Join(j.clone()))
            }
            LogicalPlan::Distinct(Distinct::All(input)) if is_streaming(input) => {
                let keys = input
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
                Some(StatefulNode::Deduplicate(Deduplicate::try_new(
                    input.as_ref().clone(),
                    keys,
                    false,
                )?))
            }
            other => match (Deduplicate::of(other), FlatMapGroupsWithState::of(other)) {
                (Some(d), _) => Some(StatefulNode::Deduplicate(d.clone())),
                (_, Some(f)) => Some(StatefulNode::FlatMapGroupsWithState(f.clone())),
                _ => None,
            },
        })
    }
}

/// Splits `plan` at its stateful operator: (the node, the plan above it with the node replaced
/// by a placeholder scan, the placeholder's id and schema).
fn split_stateful(
    plan: &LogicalPlan,
) -> Result<Option<(StatefulNode, LogicalPlan, u64, SchemaRef)>> {
    let mut found: Option<(StatefulNode, u64, SchemaRef)> = None;
    let mut error: Option<SluiceError> = None;
    let rewritten = plan
        .clone()
        .transform_down(|node| {
            if found.is_some() || error.is_some() {
                return Ok(Transformed::no(node));
            }
            let stateful = match StatefulNode::of(&node) {
                Ok(Some(s)) => s,
                Ok(None) => return Ok(Transformed::no(node)),
                Err(e) => {
                    error = Some(e);
                    return Ok(Transformed::no(node));
                }
            };
            let out_schema = node.schema();
            // Internal column names (no clash with the names the projection gives back); nullable,
            // as operator rows may hold nulls where the planner declared a field non-null; field
            // metadata (event time) kept.
            let fields: Vec<arrow::datatypes::Field> = out_schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    arrow::datatypes::Field::new(format!("__c{i}"), f.data_type().clone(), true)
                        .with_metadata(f.metadata().clone())
                })
                .collect();
            let schema = Arc::new(arrow::datatypes::Schema::new(fields));
            let rel = StreamingRelation::placeholder(schema.clone());
            let id = rel.id();
            let table = format!("__sluice_stateful_{id}");
            let scan =
                LogicalPlanBuilder::scan(table.as_str(), provider_as_source(Arc::new(rel)), None)?
                    .build()?;
            let exprs: Vec<Expr> = out_schema
                .iter()
                .enumerate()
                .map(|(i, (q, f))| {
                    Expr::Column(Column::new(Some(table.as_str()), format!("__c{i}")))
                        .alias_qualified(q.cloned(), f.name())
                })
                .collect();
            let projected = LogicalPlanBuilder::from(scan).project(exprs)?.build()?;
            found = Some((stateful, id, schema));
            Ok(Transformed::new(projected, true, TreeNodeRecursion::Jump))
        })
        .map_err(SluiceError::from)?;
    if let Some(e) = error {
        return Err(e);
    }
    Ok(found.map(|(node, id, schema)| (node, rewritten.data, id, schema)))
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
        let Some((node, above, placeholder, placeholder_schema)) = split_stateful(&plan)? else {
            return Ok(Pipeline::Stateless(Box::new(IncrementalExecution::new(
                state, plan, partitions,
            ))));
        };
        let allow_rename = session
            .conf(ALLOW_KEY_RENAME_CONF)
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
        let built: Result<(Box<dyn StatefulOperator>, Vec<LogicalPlan>)> = match &node {
            StatefulNode::Aggregate(agg) => StreamingAggregate::try_new(
                agg,
                0,
                mode,
                checkpoint_root,
                partitions,
                allow_rename,
                store_conf,
            )
            .map(|op| {
                (
                    Box::new(op) as Box<dyn StatefulOperator>,
                    vec![agg.input.as_ref().clone()],
                )
            }),
            StatefulNode::Join(j) => {
                StreamingJoin::try_new(j, 0, checkpoint_root, partitions, allow_rename, store_conf)
                    .map(|op| {
                        (
                            Box::new(op) as Box<dyn StatefulOperator>,
                            vec![j.left.as_ref().clone(), j.right.as_ref().clone()],
                        )
                    })
            }
            StatefulNode::FlatMapGroupsWithState(f) => FlatMapGroupsWithStateExec::try_new(
                f,
                0,
                checkpoint_root,
                partitions,
                allow_rename,
                store_conf,
            )
            .map(|op| {
                (
                    Box::new(op) as Box<dyn StatefulOperator>,
                    vec![f.input.clone()],
                )
            }),
            StatefulNode::Deduplicate(d) => StreamingDeduplicate::try_new(
                d,
                0,
                checkpoint_root,
                partitions,
                allow_rename,
                store_conf,
            )
            .map(|op| {
                (
                    Box::new(op) as Box<dyn StatefulOperator>,
                    vec![d.input.clone()],
                )
            }),
        };
        let (operator, input_plans) = match built {
            Ok(b) => b,
            Err(e) if e.class().starts_with("STATE_SCHEMA") => {
                return Ok(Pipeline::Incompatible(e))
            }
            Err(e) => return Err(e),
        };
        Ok(Pipeline::Stateful(Box::new(StatefulStage {
            inputs: input_plans
                .into_iter()
                .map(|p| IncrementalExecution::new(state.clone(), p, partitions))
                .collect(),
            operator,
            above: IncrementalExecution::new(state, above, partitions),
            placeholder,
            placeholder_schema,
        })))
    }

    /// True when the plan defines a watermark (progress then reports `eventTime.watermark`).
    pub fn has_watermark(&self) -> bool {
        match self {
            Pipeline::Stateless(e) => !watermark_nodes(e.logical_plan()).is_empty(),
            Pipeline::Stateful(s) => s
                .inputs
                .iter()
                .any(|e| !watermark_nodes(e.logical_plan()).is_empty()),
            Pipeline::Incompatible(_) => false,
        }
    }

    /// Spark's `shouldRunAnotherBatch`: would a no-data batch emit or evict?
    pub fn should_run_another_batch(
        &self,
        batch_watermark_ms: i64,
        next_watermark_ms: i64,
    ) -> bool {
        match self {
            Pipeline::Stateless(_) | Pipeline::Incompatible(_) => false,
            Pipeline::Stateful(s) => s
                .operator
                .should_run_another_batch(batch_watermark_ms, next_watermark_ms),
        }
    }

    pub async fn explain(&self) -> Result<String> {
        match self {
            Pipeline::Stateless(e) => e.explain().await,
            Pipeline::Incompatible(e) => Ok(format!("(cannot run: {e})")),
            Pipeline::Stateful(s) => {
                let mut out = format!(
                    "== Above the stateful operator ==\n{}\n",
                    s.above.explain().await?
                );
                for (i, e) in s.inputs.iter().enumerate() {
                    out.push_str(&format!(
                        "\n== Stateful operator input {i} ==\n{}\n",
                        e.explain().await?
                    ));
                }
                Ok(out)
            }
        }
    }

    /// Runs one batch over `inputs`.
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
            Pipeline::Stateful(stage) => {
                let mut planning_ms = 0i64;
                let mut watermarks = Vec::new();
                let mut operator_inputs = Vec::with_capacity(stage.inputs.len());
                for exec in &stage.inputs {
                    let t = std::time::Instant::now();
                    let planned =
                        session.block_on(exec.physical_plan(inputs, batch_timestamp_ms))?;
                    planning_ms += t.elapsed().as_millis() as i64;
                    let data = session.block_on(IncrementalExecution::execute(&planned))?;
                    watermarks.extend(observed(&planned));
                    operator_inputs.push(data.batches().cloned().collect::<Vec<_>>());
                }
                stage.operator.set_batch_timestamp(batch_timestamp_ms);
                let (rows, progress) = stage.operator.process(
                    operator_inputs,
                    late_watermark_ms,
                    eviction_watermark_ms,
                    batch_id,
                )?;
                let mut above_inputs = BatchInputs::new();
                let rows = RecordBatch::try_new(
                    stage.placeholder_schema.clone(),
                    rows.columns().to_vec(),
                )?;
                above_inputs.insert(stage.placeholder, vec![rows]);
                let t2 = std::time::Instant::now();
                let planned_above = session
                    .block_on(stage.above.physical_plan(&above_inputs, batch_timestamp_ms))?;
                planning_ms += t2.elapsed().as_millis() as i64;
                let data = session.block_on(IncrementalExecution::execute(&planned_above))?;
                let _ = t;
                Ok(PipelineOutput {
                    data,
                    watermarks,
                    state_operators: vec![progress],
                    planning_ms,
                })
            }
        }
    }
}
