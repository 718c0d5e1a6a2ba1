//! The staged plan: how a query's plan is executed each batch. A stateless query is one
//! DataFusion plan; a stateful one is cut at each stateful operator (`plan::stateful_nodes`),
//! bottom-up, into stages: DataFusion computes an operator's inputs, the operator turns them into
//! rows bound to a placeholder relation, and DataFusion runs the rest of the plan over them.

use crate::error::class;
use crate::sync::MutexExt;
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::logical_expr::LogicalPlan;

use crate::checkpoint::CheckpointDir;
use crate::conf::{PinnedConf, StreamingConf};
use crate::error::{Result, SluiceError};
use crate::operators::create_operator;
use crate::operators::stateful::remote::{OnWorkers, Remote};
use crate::operators::stateful::{BatchContext, Chunking, OperatorRunner, StageInput, StateInfo};
use crate::operators::watermark::{watermark_nodes, EventTimeStats};
use crate::plan::incremental::{BatchInputs, PlannedBatch};
use crate::plan::stateful_nodes::split_stateful;
use crate::plan::IncrementalExecution;
use crate::progress::StateOperatorProgress;
use crate::session::Session;
use crate::sink::BatchStreams;
use crate::state::schema::is_state_schema_error;
use crate::testing::TestHooks;
use crate::types::OutputMode;
use crate::types::{OperatorId, WatermarkMs};

/// What one batch produced: the stateful stages ran; the plan above them is planned, and runs
/// as the sink pulls its rows ([`StagedOutput::streams`]).
pub(crate) struct StagedOutput {
    /// The plan that computes the batch's result rows.
    last: PlannedBatch,
    /// Per watermark node of the stateful stages' inputs (post-order): delay and the batch's
    /// event-time statistics. The last plan's follow once it ran ([`StagedOutput::watermarks`]).
    stage_watermarks: Vec<(i64, EventTimeStats)>,
    /// Each stateful operator's figures, bottom-up.
    pub state_operators: Vec<StateOperatorProgress>,
    /// Time DataFusion spent planning the batch's plans.
    pub planning_ms: i64,
    /// Input rows the stateful operator dropped as late (with the late-row side output on).
    pub late_rows: Vec<RecordBatch>,
}

/// The query's plan as a chain: stateful stages bottom-up, then DataFusion over the last
/// operator's rows (or the whole plan, for a stateless query).
pub(crate) struct StagedPlan {
    stages: Vec<StatefulStage>,
    last: IncrementalExecution,
    /// The checkpoint's state does not fit this query. As in Spark, the query fails in its first
    /// batch, after `offsets/N` was written, so a later restart replays that batch as planned.
    incompatible: Option<SluiceError>,
    /// How the stateful operators' inputs are cut into chunks (from the memory budget).
    chunking: Chunking,
    /// The cluster the batches run on (`sluice.distributed.workers`), if any.
    cluster: Option<Arc<dyn crate::distributed::Cluster>>,
    /// The tasks the batches ran on the cluster's workers.
    worker_tasks: Option<Arc<dyn crate::distributed::WorkerTasks>>,
}

/// One stateful operator: DataFusion computes its inputs (one plan per child, reading sources
/// and earlier operators' rows), the operator turns them into rows bound to its placeholder.
pub(crate) struct StatefulStage {
    inputs: Vec<IncrementalExecution>,
    operator: OperatorRunner,
    placeholder: u64,
    placeholder_schema: SchemaRef,
    /// How many times the plans above scan the placeholder (a spilled output is read once).
    placeholder_uses: usize,
}

impl StagedOutput {
    /// The batch's result rows, run as they are pulled.
    pub(crate) fn streams(&self, session: &Session) -> Result<BatchStreams> {
        let parts = IncrementalExecution::execute_streams(&self.last, session.runtime_handle())?;
        Ok(BatchStreams::new(self.last.plan.schema(), parts))
    }

    /// Per watermark node (post-order): delay and the batch's event-time statistics. Complete
    /// once the result rows were run to their end.
    pub(crate) fn watermarks(&self) -> Vec<(i64, EventTimeStats)> {
        let mut all = self.stage_watermarks.clone();
        all.extend(observed(&self.last));
        all
    }
}

/// The watermark statistics a planned batch collected.
fn observed(planned: &PlannedBatch) -> Vec<(i64, EventTimeStats)> {
    planned
        .watermarks
        .iter()
        .map(|(d, h)| (*d, *h.lock_unpoisoned()))
        .collect()
}

impl StagedPlan {
    /// Cuts `plan` at its stateful operators, bottom-up (operator `i` keeps its state in
    /// `state/<i>` of `checkpoint_root`, in the `pinned` number of partitions, held as the
    /// pinned provider class says), and builds each operator with
    /// the state store conf of `query_conf` and the query's test `hooks`. A checkpoint whose state does not fit is not an error
    /// here: the first batch fails with it (see `incompatible`).
    pub(crate) fn try_new(
        session: &Session,
        plan: LogicalPlan,
        mode: OutputMode,
        checkpoint_root: &Path,
        pinned: &PinnedConf,
        query_conf: &StreamingConf,
        hooks: TestHooks,
    ) -> Result<Self> {
        let cluster = crate::distributed::for_workers(&query_conf.distributed_workers)?;
        let (state, worker_tasks) = match &cluster {
            Some(c) => {
                let on = c.batch_state(session.df_state(), &query_conf.distributed_workers)?;
                (on.state, Some(on.tasks))
            }
            None => (session.df_state(), None),
        };
        let partitions = pinned.shuffle_partitions;
        let allow_rename = query_conf.allow_key_rename;
        let store_conf = crate::state::StateStoreConf {
            min_versions_to_retain: query_conf.min_batches_to_retain,
            min_deltas_for_snapshot: query_conf.min_deltas_for_snapshot,
            kind: pinned.state_store,
            local_cache: query_conf.local_cache,
            ..Default::default()
        };
        if cluster.is_some() {
            crate::distributed::check_shared(
                checkpoint_root,
                &query_conf.distributed_workers,
                "the checkpoint",
            )?;
        }
        let on_workers = cluster.as_ref().map(|c| OnWorkers {
            cluster: Arc::clone(c),
            workers: query_conf.distributed_workers.clone(),
            log: worker_tasks.clone(),
            plan: uuid::Uuid::new_v4().to_string(),
            storage: session.storage_conf(),
            chunk_bytes: query_conf.memory.stateful_chunk_bytes(),
        });
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
                Ok(mut op) => {
                    let remote = on_workers
                        .as_ref()
                        .and_then(|on| Remote::for_node(&node, mode, &info, on));
                    if let Some(remote) = remote {
                        op.on_workers(remote);
                    }
                    op
                }
                Err(e) if is_state_schema_error(&e) => {
                    incompatible = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            };
            stages.push(StatefulStage {
                inputs: node
                    .input_plans()?
                    .into_iter()
                    .map(|p| IncrementalExecution::new(state.clone(), p, partitions))
                    .collect(),
                operator,
                placeholder_uses: crate::plan::relation_uses(&above, placeholder),
                placeholder,
                placeholder_schema,
            });
            rest = above;
        }
        Ok(StagedPlan {
            stages,
            last: IncrementalExecution::new(state, rest, partitions),
            incompatible,
            cluster,
            worker_tasks,
            chunking: Chunking {
                bytes: query_conf.memory.stateful_chunk_bytes(),
                rows: hooks.stateful_input_chunk_rows(),
            },
        })
    }

    /// The cluster the batches run on (`sluice.distributed.workers`), if any.
    pub(crate) fn cluster(&self) -> Option<&Arc<dyn crate::distributed::Cluster>> {
        self.cluster.as_ref()
    }

    /// The query's record of the tasks its workers run (none for a query in one process).
    pub(crate) fn worker_tasks(&self) -> Option<&Arc<dyn crate::distributed::WorkerTasks>> {
        self.worker_tasks.as_ref()
    }

    /// The tasks each worker ran since the last call (none for a query in one process).
    pub(crate) fn take_worker_tasks(&self) -> Vec<crate::progress::WorkerProgress> {
        self.worker_tasks
            .as_ref()
            .map(|t| t.take())
            .unwrap_or_default()
    }

    /// True when the plan defines a watermark (progress then reports `eventTime.watermark`).
    pub(crate) fn has_watermark(&self) -> bool {
        !watermark_nodes(self.last.logical_plan()).is_empty()
            || self
                .stages
                .iter()
                .flat_map(|s| &s.inputs)
                .any(|e| !watermark_nodes(e.logical_plan()).is_empty())
    }

    /// Spark's `shouldRunAnotherBatch`: would a no-data batch emit or evict?
    pub(crate) fn should_run_another_batch(
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

    /// Each stage's plans as `explain()` shows them (or why the plan cannot run).
    pub(crate) async fn explain(&self) -> Result<String> {
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
    pub(crate) fn keep_late_rows(&mut self) -> Result<SchemaRef> {
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
    pub(crate) fn run(
        &mut self,
        session: &Session,
        inputs: &BatchInputs,
        ctx: &BatchContext,
    ) -> Result<StagedOutput> {
        let batch_timestamp_ms = ctx.batch_timestamp_ms;
        if let Some(e) = &self.incompatible {
            return Err(e.clone());
        }
        let mut bound = inputs.clone();
        let mut planning_ms = 0i64;
        let mut watermarks = Vec::new();
        let mut state_operators = Vec::new();
        let mut late_rows = Vec::new();
        for stage in &mut self.stages {
            // Each input's plan runs as the operator pulls its rows, chunk by chunk.
            let mut operator_inputs = Vec::with_capacity(stage.inputs.len());
            let mut planned_inputs = Vec::with_capacity(stage.inputs.len());
            for exec in &stage.inputs {
                let t = std::time::Instant::now();
                let planned = session.block_on(exec.physical_plan(&bound, batch_timestamp_ms))?;
                planning_ms += t.elapsed().as_millis() as i64;
                planned_inputs.push(planned);
            }
            // On a cluster the reads may route their rows to the state's owners themselves:
            // decided before they start.
            let plans: Vec<_> = planned_inputs.iter().map(|p| p.plan.clone()).collect();
            stage.operator.route_from_reads(&plans, ctx)?;
            for planned in &planned_inputs {
                let rows = IncrementalExecution::execute_interleaved(
                    planned,
                    session.runtime_handle(),
                    self.chunking.bytes,
                )?;
                operator_inputs.push(StageInput::new(rows, self.chunking));
            }
            let out = stage.operator.process(operator_inputs, ctx)?;
            // The operator ran every input to its end: their event-time statistics are complete.
            for planned in &planned_inputs {
                watermarks.extend(observed(planned));
            }
            let (rows, progress) = (out.rows, out.progress);
            bound.insert(
                stage.placeholder,
                rows.into_stage_rows(&stage.placeholder_schema, stage.placeholder_uses)?
                    .into(),
            );
            state_operators.push(progress);
            late_rows.extend(stage.operator.take_late_rows());
        }
        let t = std::time::Instant::now();
        let last = session.block_on(self.last.physical_plan(&bound, batch_timestamp_ms))?;
        planning_ms += t.elapsed().as_millis() as i64;
        Ok(StagedOutput {
            last,
            stage_watermarks: watermarks,
            state_operators,
            planning_ms,
            late_rows,
        })
    }
}
