//! How a query's plan is executed each batch: stateless (one DataFusion plan) or with a
//! streaming aggregation in the middle (DataFusion below it, the stateful operator, DataFusion
//! above it over the operator's output).

use crate::error::class;
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Column;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{Distinct, LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::Expr;

use crate::checkpoint::CheckpointDir;
use crate::error::{Result, SluiceError};
use crate::operators::dedup::Deduplicate;
use crate::operators::flat_map_groups_with_state::FlatMapGroupsWithState;
use crate::operators::stateful::{BatchContext, OperatorRunner, StateInfo};
use crate::operators::watermark::{watermark_nodes, EventTimeStats};
use crate::operators::{create_operator, StatefulNode};
use crate::plan::incremental::{BatchInputs, PlannedBatch};
use crate::plan::relation::reads_stream_or_operator;
use crate::plan::{IncrementalExecution, StreamingRelation};
use crate::progress::StateOperatorProgress;
use crate::session::Session;
use crate::state::schema::is_state_schema_error;
use crate::testing::TestHooks;
use crate::types::BatchData;
use crate::types::OutputMode;
use crate::types::{BatchId, OperatorId, WatermarkMs};

/// What one batch produced.
pub(crate) struct PipelineOutput {
    pub data: BatchData,
    /// Per watermark node (post-order): delay and the batch's event-time statistics.
    pub watermarks: Vec<(i64, EventTimeStats)>,
    pub state_operators: Vec<StateOperatorProgress>,
    pub planning_ms: i64,
    /// Input rows the stateful operator dropped as late (with the late-row side output on).
    pub late_rows: Vec<RecordBatch>,
}

/// The query's plan as a chain: stateful stages bottom-up, then DataFusion over the last
/// operator's rows (or the whole plan, for a stateless query).
pub(crate) struct Pipeline {
    stages: Vec<StatefulStage>,
    last: IncrementalExecution,
    /// The checkpoint's state does not fit this query. As in Spark, the query fails in its first
    /// batch, after `offsets/N` was written, so a later restart replays that batch as planned.
    incompatible: Option<SluiceError>,
}

/// One stateful operator: DataFusion computes its inputs (one plan per child, reading sources
/// and earlier operators' rows), the operator turns them into rows bound to its placeholder.
pub(crate) struct StatefulStage {
    inputs: Vec<IncrementalExecution>,
    operator: OperatorRunner,
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

impl StatefulNode {
    fn of(node: &LogicalPlan) -> Result<Option<StatefulNode>> {
        Ok(match node {
            LogicalPlan::Aggregate(agg) if reads_stream_or_operator(&agg.input) => {
                Some(StatefulNode::Aggregate(agg.clone()))
            }
            LogicalPlan::Join(j)
                if reads_stream_or_operator(&j.left) && reads_stream_or_operator(&j.right) =>
            {
                Some(StatefulNode::Join(j.clone()))
            }
            LogicalPlan::Distinct(Distinct::All(input)) if reads_stream_or_operator(input) => {
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
        .transform_up(|node| {
            // Post-order: the first stateful node met has no stateful node below it.
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
            Ok(Transformed::yes(projected))
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
        let allow_rename = session
            .conf(crate::conf::ALLOW_KEY_RENAME)
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
        let hooks = TestHooks::from_session(session);
        let mut stages = Vec::new();
        let mut rest = plan;
        let mut incompatible = None;
        // Operator ids follow the chain bottom-up: state/0 is the first stateful operator.
        while let Some((node, above, placeholder, placeholder_schema)) = split_stateful(&rest)? {
            let info = StateInfo {
                checkpoint: CheckpointDir::new(checkpoint_root),
                operator_id: OperatorId(stages.len() as u32),
                partitions,
                store_conf: store_conf.clone(),
                allow_key_rename: allow_rename,
                hooks,
            };
            let operator = match create_operator(&node, mode, &info) {
                Ok(op) => op,
                Err(e) if is_state_schema_error(&e) => {
                    incompatible = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            };
            stages.push(StatefulStage {
                inputs: node
                    .input_plans()
                    .into_iter()
                    .map(|p| IncrementalExecution::new(state.clone(), p, partitions))
                    .collect(),
                operator,
                placeholder,
                placeholder_schema,
            });
            rest = above;
        }
        Ok(Pipeline {
            stages,
            last: IncrementalExecution::new(state, rest, partitions),
            incompatible,
        })
    }

    /// True when the plan defines a watermark (progress then reports `eventTime.watermark`).
    pub fn has_watermark(&self) -> bool {
        !watermark_nodes(self.last.logical_plan()).is_empty()
            || self
                .stages
                .iter()
                .flat_map(|s| &s.inputs)
                .any(|e| !watermark_nodes(e.logical_plan()).is_empty())
    }

    /// Spark's `shouldRunAnotherBatch`: would a no-data batch emit or evict?
    pub fn should_run_another_batch(
        &self,
        batch_watermark_ms: i64,
        next_watermark_ms: i64,
    ) -> bool {
        self.incompatible.is_none()
            && self.stages.iter().any(|s| {
                s.operator.should_run_another_batch(
                    WatermarkMs(batch_watermark_ms),
                    WatermarkMs(next_watermark_ms),
                )
            })
    }

    pub async fn explain(&self) -> Result<String> {
        if let Some(e) = &self.incompatible {
            return Ok(format!("(cannot run: {e})"));
        }
        let mut out = String::new();
        for (k, s) in self.stages.iter().enumerate() {
            for (i, e) in s.inputs.iter().enumerate() {
                out.push_str(&format!(
                    "== Stateful operator {k}, input {i} ==\n{}\n\n",
                    e.explain().await?
                ));
            }
        }
        out.push_str(&self.last.explain().await?);
        Ok(out)
    }

    /// Turns on the late-row side output: the query's stateful operator keeps the input rows it
    /// drops as late. Returns their schema (the operator's input).
    pub fn keep_late_rows(&mut self) -> Result<SchemaRef> {
        match self.stages.as_mut_slice() {
            [] => Err(SluiceError::query(
                class::LATE_ROWS_WITHOUT_STATE,
                "lateRows.* options need a stateful query: only streaming aggregations and \
                 deduplication with a watermark drop late rows. Remove the lateRows options.",
            )),
            [stage] => stage.operator.keep_late_rows(),
            _ => Err(SluiceError::not_supported_yet(
                "a late-row side output for a query with several stateful operators",
            )),
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
        if let Some(e) = &self.incompatible {
            return Err(e.clone());
        }
        let mut bound = inputs.clone();
        let mut planning_ms = 0i64;
        let mut watermarks = Vec::new();
        let mut state_operators = Vec::new();
        let mut late_rows = Vec::new();
        for stage in &mut self.stages {
            let mut operator_inputs = Vec::with_capacity(stage.inputs.len());
            for exec in &stage.inputs {
                let t = std::time::Instant::now();
                let planned = session.block_on(exec.physical_plan(&bound, batch_timestamp_ms))?;
                planning_ms += t.elapsed().as_millis() as i64;
                let data = session.block_on(IncrementalExecution::execute(&planned))?;
                watermarks.extend(observed(&planned));
                operator_inputs.push(data.batches().cloned().collect::<Vec<_>>());
            }
            let out = stage.operator.process(
                operator_inputs,
                &BatchContext {
                    batch_id: BatchId(batch_id),
                    batch_timestamp_ms,
                    late_watermark: WatermarkMs(late_watermark_ms),
                    eviction_watermark: WatermarkMs(eviction_watermark_ms),
                },
            )?;
            let (rows, progress) = (out.rows, out.progress);
            let rows =
                RecordBatch::try_new(stage.placeholder_schema.clone(), rows.columns().to_vec())?;
            bound.insert(stage.placeholder, vec![rows]);
            state_operators.push(progress);
            late_rows.extend(stage.operator.take_late_rows());
        }
        let t = std::time::Instant::now();
        let planned = session.block_on(self.last.physical_plan(&bound, batch_timestamp_ms))?;
        planning_ms += t.elapsed().as_millis() as i64;
        let data = session.block_on(IncrementalExecution::execute(&planned))?;
        watermarks.extend(observed(&planned));
        Ok(PipelineOutput {
            data,
            watermarks,
            state_operators,
            planning_ms,
            late_rows,
        })
    }
}
