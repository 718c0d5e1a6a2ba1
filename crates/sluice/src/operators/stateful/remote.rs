//! A stateful operator on a cluster's workers (`sluice.distributed.workers`), as Spark runs a
//! stateful operator's partition `p` in a task on an executor.
//!
//! The driver keeps the operator's plan and routing: each batch it shares the state partitions
//! out among the workers that answer (worker `t` of `T` owns the partitions `p` with
//! `p * T / P == t`, a contiguous range), splits the operator's input by the partition of each
//! row's state key ([`StatefulOperator::route`]: Spark's shuffle by the key) and sends each
//! worker its rows with what it needs to build the operator ([`StateTask`]). A worker
//! ([`run_state_task`]) builds the operator as the driver did, opens the stores of its
//! partitions at the batch's version from the shared checkpoint, runs the batch and commits
//! version N + 1 of them, and sends back its output rows and progress; the driver concatenates
//! them in partition order and sums the progress, as Spark sums its tasks'. When the
//! operator's inputs are reads on the workers, the driver starts the tasks first and the
//! reading workers route the rows themselves ([`route_read`]), so they cross the wire once;
//! an aggregation whose state the operator holds routes partial states. A worker keeps its
//! operator and open stores between batches while it owns the same partitions of the same
//! query; when the workers change (one lost, one added), every partition's new owner loads it
//! from the checkpoint.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use serde::{Deserialize, Serialize};

use super::{
    BatchContext, Chunking, OperatorOutput, OperatorRunner, OutputRows, StageInput, StateInfo,
};
use crate::checkpoint::CheckpointDir;
use crate::distributed::{
    Cluster, ReadCounts, ReadItem, ReadItems, ReadRoute, StateTask, StateTaskRows, StateTaskRun,
    WorkerTasks,
};
use crate::error::{Result, SluiceError};
use crate::operators::{NodeSpec, StatefulNode};
use crate::progress::StateOperatorProgress;
use crate::source::remote::WorkerReads;
use crate::state::{LocalCacheMemory, StateStoreConf, StateStoreKind};
use crate::sync::MutexExt;
use crate::testing::TestHooks;
use crate::types::{BatchId, OperatorId, OutputMode, WatermarkMs};

/// How one batch's state partitions are shared out: `tasks` workers, `partitions` partitions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Routing {
    pub partitions: usize,
    pub tasks: usize,
}

impl Routing {
    /// The task (worker) that owns partition `p`.
    pub(crate) fn task_of(&self, p: usize) -> usize {
        p * self.tasks / self.partitions
    }

    /// The partitions task `t` owns.
    fn owned(&self, t: usize) -> Range<usize> {
        let start = (0..self.partitions)
            .find(|p| self.task_of(*p) >= t)
            .unwrap_or(self.partitions);
        let end = (start..self.partitions)
            .find(|p| self.task_of(*p) > t)
            .unwrap_or(self.partitions);
        start..end
    }
}

/// An operator's input split by task as it is routed ([`StatefulOperator::route`]): each
/// task's rows go to its worker as they come.
///
/// [`StatefulOperator::route`]: super::StatefulOperator::route
pub(crate) struct Routed {
    routing: Routing,
    /// Per task, its run on a worker.
    tasks: Vec<Box<dyn StateTaskRun>>,
    /// The task whose send failed (its worker says why).
    failed: Option<usize>,
    /// Rows the driver dropped as late while routing (`numRowsDroppedByWatermark`).
    pub dropped_by_watermark: i64,
}

impl std::fmt::Debug for Routed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Routed({:?})", self.routing)
    }
}

impl Routed {
    /// Routes to `tasks`, one per task of `routing`.
    fn new(routing: Routing, tasks: Vec<Box<dyn StateTaskRun>>) -> Self {
        Self {
            routing,
            tasks,
            failed: None,
            dropped_by_watermark: 0,
        }
    }

    /// The number of state partitions.
    pub(crate) fn partitions(&self) -> usize {
        self.routing.partitions
    }

    /// Routes the rows of `batch` (of input `input`), row `i` to the owner of `partitions[i]`.
    pub(crate) fn push(
        &mut self,
        input: usize,
        batch: &RecordBatch,
        partitions: &[usize],
    ) -> Result<()> {
        let mut per_task: Vec<Vec<u32>> = vec![Vec::new(); self.routing.tasks];
        for (i, p) in partitions.iter().enumerate() {
            per_task[self.routing.task_of(*p)].push(i as u32);
        }
        for (t, rows) in per_task.into_iter().enumerate() {
            if !rows.is_empty() {
                let rows = take_record_batch(batch, &UInt32Array::from(rows))?;
                if let Err(e) = self.tasks[t].send(input, rows) {
                    self.failed = Some(t);
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

impl Routed {
    /// Routes every row of `input` (input 0, rows of `schema`) to the owner of its key's
    /// partition, the key being the columns `key_columns` as `key` encodes them.
    pub(crate) fn push_by_key(
        &mut self,
        input: StageInput,
        schema: &arrow::datatypes::SchemaRef,
        key_columns: &[usize],
        key: &crate::state::layout::KeyLayout,
    ) -> Result<()> {
        let partitions_n = self.partitions();
        input.for_each_chunk(|chunk, _| {
            let batch = arrow::compute::concat_batches(schema, &chunk)?;
            drop(chunk);
            let keys: Vec<arrow::array::ArrayRef> = key_columns
                .iter()
                .map(|c| batch.column(*c).clone())
                .collect();
            let partitions = super::stores::partitions_of_keys(
                key.encode(&keys)?.as_ref(),
                batch.num_rows(),
                partitions_n,
            );
            self.push(0, &batch, &partitions)
        })
    }
}

/// The driver's side of an operator on workers.
pub(crate) struct Remote {
    cluster: Arc<dyn Cluster>,
    workers: Vec<String>,
    log: Option<Arc<dyn WorkerTasks>>,
    spec: TaskSpec,
    schemas: Vec<datafusion::common::DFSchemaRef>,
    exprs: Vec<Vec<datafusion::logical_expr::Expr>>,
    /// The workers and batch of the last batch, and the routing's epoch ([`Epoch`]).
    epoch: Mutex<Epoch>,
    /// The batch's tasks, when the workers that read its input route the rows to them
    /// ([`Remote::route_from_reads`]).
    armed: Mutex<Option<Armed>>,
}

/// A batch's state tasks, started before its reads, whose rows come from the workers that read
/// them (each run of each read a sender of its input).
struct Armed {
    batch: u64,
    started: Started,
    /// Rows the reads' routes dropped as late.
    dropped: Arc<AtomicU64>,
}

/// A batch's state tasks as started: the workers, in task order, and each task's run.
struct Started {
    workers: Vec<String>,
    runs: Vec<Box<dyn StateTaskRun>>,
    at: Instant,
}

/// A worker keeps its operator between two batches only when nothing but it may have written its
/// partitions in between: the epoch moves on whenever the workers that answer change or a batch
/// runs again (after a failure, its partitions may have been written by an attempt whose rows
/// went elsewhere), and a worker builds its operator again from the checkpoint in a new epoch.
#[derive(Debug, Default)]
struct Epoch {
    workers: Vec<String>,
    last_batch: Option<u64>,
    epoch: u64,
}

impl Epoch {
    /// The epoch of batch `batch` on `workers`.
    fn of(&mut self, workers: &[String], batch: u64) -> u64 {
        if self.workers != workers || self.last_batch.is_some_and(|b| b >= batch) {
            self.epoch += 1;
            self.workers = workers.to_vec();
        }
        self.last_batch = Some(batch);
        self.epoch
    }
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({})", self.workers.join(","))
    }
}

/// What a query's stateful operators need to run on a cluster.
#[derive(Debug, Clone)]
pub(crate) struct OnWorkers {
    pub cluster: Arc<dyn Cluster>,
    pub workers: Vec<String>,
    pub log: Option<Arc<dyn WorkerTasks>>,
    /// The query's plan, named once (a worker keeps an operator per plan and operator id).
    pub plan: String,
    /// The session's object store options, for the workers to reach the checkpoint.
    pub storage: Vec<(String, String)>,
    /// How a worker cuts its input into chunks.
    pub chunk_bytes: usize,
}

impl Remote {
    /// How `node`'s operator (state as `info` says, output mode `mode`) runs on the workers, or
    /// `None` when it runs in this process: `flatMapGroupsWithState` stays (its function is this
    /// process's Rust code), and so does an operator whose expressions use a function that is
    /// not the same on a worker.
    pub(crate) fn for_node(
        node: &StatefulNode,
        mode: OutputMode,
        info: &StateInfo,
        on: &OnWorkers,
    ) -> Option<Remote> {
        let (node_spec, schemas, exprs) = node.to_parts()?;
        if !exprs.iter().all(|e| on.cluster.exprs_travel(e)) {
            log::info!(
                "stateful operator {} runs on the driver: a function of it is not the same on a \
                 worker",
                info.operator_id
            );
            return None;
        }
        let store = &info.store_conf;
        Some(Remote {
            cluster: Arc::clone(&on.cluster),
            workers: on.workers.clone(),
            log: on.log.clone(),
            spec: TaskSpec {
                node: node_spec,
                mode: mode.as_str().to_string(),
                plan: on.plan.clone(),
                checkpoint: info.checkpoint.root().to_string_lossy().into_owned(),
                operator_id: info.operator_id.0,
                partitions: info.partitions,
                owned: (0, 0),
                epoch: 0,
                store: StoreSpec {
                    min_deltas_for_snapshot: store.min_deltas_for_snapshot,
                    min_versions_to_retain: store.min_versions_to_retain,
                    on_disk: store.kind == StateStoreKind::OnDisk,
                    cache_bytes: store.local_cache.cache_bytes,
                    write_buffer_bytes: store.local_cache.write_buffer_bytes,
                },
                allow_key_rename: info.allow_key_rename,
                batch: BatchSpec::default(),
                storage: on.storage.clone(),
                chunk_bytes: on.chunk_bytes,
            },
            schemas,
            exprs,
            epoch: Mutex::default(),
            armed: Mutex::default(),
        })
    }

    /// Starts the batch's state tasks on the workers that answer, one per worker (at most one
    /// per partition); with `senders` (per input, how many workers route their reads' rows to
    /// the tasks), the tasks take their rows from those, named by `exchange` and their number.
    fn start_tasks(&self, ctx: &BatchContext, direct: Option<(&str, &[usize])>) -> Result<Started> {
        let workers = self.cluster.answering(&self.workers)?;
        let routing = Routing {
            partitions: self.spec.partitions,
            tasks: workers.len().min(self.spec.partitions).max(1),
        };
        let epoch = self.epoch.lock_unpoisoned().of(&workers, ctx.batch_id.0);
        let at = Instant::now();
        let runs = (0..routing.tasks)
            .map(|t| {
                let owned = routing.owned(t);
                let mut spec = self.spec.clone();
                spec.owned = (owned.start, owned.end);
                spec.epoch = epoch;
                spec.batch = BatchSpec::of(ctx);
                let task = match direct {
                    Some((exchange, senders)) => {
                        self.task(&spec, task_exchange(exchange, t), senders.to_vec())?
                    }
                    None => self.task(&spec, String::new(), Vec::new())?,
                };
                self.cluster.start_state_task(&workers[t], task)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Started {
            workers: workers[..routing.tasks].to_vec(),
            runs,
            at,
        })
    }

    /// The operator's task as `spec` says, taking its rows from `senders` under `exchange`
    /// (none: from the driver).
    fn task(&self, spec: &TaskSpec, exchange: String, senders: Vec<usize>) -> Result<StateTask> {
        Ok(StateTask {
            spec: serde_json::to_string(spec)
                .map_err(|e| SluiceError::internal(format!("a state task's spec: {e}")))?,
            schemas: self.schemas.clone(),
            exprs: self.exprs.clone(),
            exchange,
            senders,
        })
    }

    /// Has the workers that read the operator's input (`reads`: per input, its reads on the
    /// workers, which have not started) route its rows to the owners of their state partitions
    /// themselves, Spark's map side of the shuffle: the batch's tasks start now, each told how
    /// many runs send it rows of each input, and each read's runs are given the route.
    pub(crate) fn route_from_reads(
        &self,
        reads: &[Vec<Arc<WorkerReads>>],
        ctx: &BatchContext,
    ) -> Result<()> {
        static EXCHANGES: AtomicU64 = AtomicU64::new(0);
        let exchange = format!(
            "{}-{}-{}-op{}-b{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
            EXCHANGES.fetch_add(1, Ordering::Relaxed),
            self.spec.operator_id,
            ctx.batch_id.0
        );
        let senders: Vec<usize> = reads
            .iter()
            .map(|input| input.iter().map(|r| r.runs()).sum())
            .collect();
        let started = self.start_tasks(ctx, Some((&exchange, &senders)))?;
        let owners: Vec<(String, String)> = started
            .workers
            .iter()
            .enumerate()
            .map(|(t, w)| (w.clone(), task_exchange(&exchange, t)))
            .collect();
        // The readers build the operator from it; which partitions and exchange are the tasks'.
        let mut spec = self.spec.clone();
        spec.batch = BatchSpec::of(ctx);
        let task = self.task(&spec, String::new(), Vec::new())?;
        let dropped = Arc::new(AtomicU64::new(0));
        for (input, reads) in reads.iter().enumerate() {
            let route = ReadRoute {
                task: task.clone(),
                input,
                owners: owners.clone(),
            };
            for r in reads {
                r.route_to(route.clone(), Arc::clone(&dropped));
            }
        }
        log::info!(
            "stateful operator {}: batch {}'s rows go from the workers that read them to the \
             owners of their state partitions ({:?} senders per input)",
            self.spec.operator_id,
            ctx.batch_id.0,
            senders
        );
        *self.armed.lock_unpoisoned() = Some(Armed {
            batch: ctx.batch_id.0,
            started,
            dropped,
        });
        Ok(())
    }

    /// Runs one batch of `runner`'s operator on the workers that answer.
    pub(crate) fn process(
        &self,
        runner: &mut OperatorRunner,
        inputs: Vec<StageInput>,
        ctx: &BatchContext,
    ) -> Result<OperatorOutput> {
        let armed = self
            .armed
            .lock_unpoisoned()
            .take()
            .filter(|a| a.batch == ctx.batch_id.0);
        if let Some(armed) = armed {
            // The reads route their rows themselves: running the inputs' plans to their ends
            // runs the reads, and only their counts come back.
            for input in inputs {
                input.for_each_chunk(|chunk, _| {
                    if chunk.iter().any(|b| b.num_rows() > 0) {
                        return Err(SluiceError::internal(
                            "rows came back to the driver from a read that routes them",
                        ));
                    }
                    Ok(())
                })?;
            }
            let dropped = armed.dropped.load(Ordering::Relaxed) as i64;
            return self.finish(runner, armed.started, dropped);
        }
        let started = self.start_tasks(ctx, None)?;
        let routing = Routing {
            partitions: self.spec.partitions,
            tasks: started.runs.len(),
        };
        let Started { workers, runs, at } = started;
        let mut routed = Routed::new(routing, runs);
        let result = runner.operator.route(inputs, ctx, &mut routed);
        let dropped = routed.dropped_by_watermark;
        let runs = routed.ended(result)?;
        self.finish(runner, Started { workers, runs, at }, dropped)
    }

    /// Ends the tasks' input and takes their output rows in partition order (spilled past a
    /// chunk's share, as in one process) and their progress, summed; each worker ran its task
    /// while the driver took the others'. `runner`'s operator learns the earliest timeout in
    /// the state of them all.
    fn finish(
        &self,
        runner: &mut OperatorRunner,
        started: Started,
        dropped: i64,
    ) -> Result<OperatorOutput> {
        let Started { workers, runs, at } = started;
        let mut runs = runs;
        for run in &mut runs {
            run.end_input();
        }
        let mut output: Option<OutputRows> = None;
        let mut progress = StateOperatorProgress::default();
        let mut next_timeout: Option<i64> = None;
        for (t, run) in runs.into_iter().enumerate() {
            let answer = run.finish(&mut |batch| {
                output
                    .get_or_insert_with(|| {
                        OutputRows::spilling(batch.schema(), self.spec.chunk_bytes)
                    })
                    .push(batch)
            })?;
            if let Some(log) = &self.log {
                log.ran(&workers[t], at.elapsed());
            }
            let answer: TaskAnswer = serde_json::from_str(&answer).map_err(|e| {
                SluiceError::internal(format!("a worker's state progress does not parse: {e}"))
            })?;
            add_progress(&mut progress, answer.progress);
            next_timeout = match (next_timeout, answer.next_timeout_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        runner.operator.set_next_timeout_ms(next_timeout);
        progress.num_rows_dropped_by_watermark += dropped;
        progress.num_shuffle_partitions = self.spec.partitions as i64;
        let rows = output
            .ok_or_else(|| SluiceError::internal("a state task without its output's schema"))?;
        Ok(OperatorOutput { rows, progress })
    }
}

impl Routed {
    /// The tasks once the routing ended with `result`: when it failed, the error of the task
    /// that failed (its worker says why), and the others end without their end, so that their
    /// workers commit nothing.
    fn ended(self, result: Result<()>) -> Result<Vec<Box<dyn StateTaskRun>>> {
        let mut runs = self.tasks;
        match result {
            Ok(()) => Ok(runs),
            Err(e) => Err(match self.failed {
                Some(t) => runs
                    .swap_remove(t)
                    .finish(&mut |_| Ok(()))
                    .err()
                    .unwrap_or(e),
                None => e,
            }),
        }
    }
}

/// Routes a read's `items` (its rows, then its counts) on the worker that read them, as
/// `route` says: builds the operator of `route`'s task, splits the rows by state partition as
/// the driver would (the operator's `route`), sends each task's rows to its owner through
/// `connect(t)` and ends them there. Returns the read's counts, with the rows the route dropped
/// as late. Blocking.
pub fn route_read(
    items: ReadItems,
    route: &ReadRoute,
    connect: &mut dyn FnMut(usize) -> Result<Box<dyn StateTaskRun>>,
) -> Result<ReadCounts> {
    let spec: TaskSpec = serde_json::from_str(&route.task.spec)
        .map_err(|e| SluiceError::internal(format!("a read's route does not parse: {e}")))?;
    let node = StatefulNode::from_parts(&spec.node, &route.task.schemas, &route.task.exprs)?;
    let mut operator = crate::operators::build_operator(&node, spec.mode.parse()?, &spec.info())?;
    let routing = Routing {
        partitions: spec.partitions,
        tasks: route.owners.len(),
    };
    let runs = (0..routing.tasks)
        .map(&mut *connect)
        .collect::<Result<Vec<_>>>()?;
    let counts: Arc<Mutex<Option<ReadCounts>>> = Arc::default();
    let counted = Arc::clone(&counts);
    let mut rows: Option<crate::types::RowIter> =
        Some(Box::new(items.filter_map(move |item| match item {
            Ok(ReadItem::Rows(rows)) => Some(Ok(rows)),
            Ok(ReadItem::Counts(c)) => {
                *counted.lock_unpoisoned() = Some(c);
                None
            }
            Err(e) => Some(Err(e)),
        })));
    let chunking = Chunking {
        bytes: spec.chunk_bytes,
        rows: None,
    };
    let inputs = (0..spec.node.inputs())
        .map(|i| {
            let rows = match rows.take_if(|_| i == route.input) {
                Some(r) => r,
                None => Box::new(std::iter::empty()),
            };
            StageInput::new(rows, chunking)
        })
        .collect();
    let mut routed = Routed::new(routing, runs);
    let result = operator.route(inputs, &spec.batch.context(), &mut routed);
    let dropped = routed.dropped_by_watermark;
    for run in routed.ended(result)? {
        run.finish(&mut |_| {
            Err(SluiceError::internal(
                "a state task sent rows back to a worker that routed rows to it",
            ))
        })?;
    }
    let mut counts = counts
        .lock_unpoisoned()
        .take()
        .ok_or_else(|| SluiceError::internal("a routed read ended without its counts"))?;
    counts.dropped_by_watermark += dropped.max(0) as u64;
    Ok(counts)
}

/// The name of task `t` of the batch's exchange `exchange`.
fn task_exchange(exchange: &str, t: usize) -> String {
    format!("{exchange}/{t}")
}

/// Adds one task's progress to the operator's (Spark sums its tasks' figures).
fn add_progress(sum: &mut StateOperatorProgress, p: StateOperatorProgress) {
    if sum.operator_name.is_empty() {
        sum.operator_name = p.operator_name;
    }
    sum.num_rows_total += p.num_rows_total;
    sum.num_rows_updated += p.num_rows_updated;
    sum.num_rows_removed += p.num_rows_removed;
    sum.all_updates_time_ms += p.all_updates_time_ms;
    sum.all_removals_time_ms += p.all_removals_time_ms;
    sum.commit_time_ms += p.commit_time_ms;
    sum.num_rows_dropped_by_watermark += p.num_rows_dropped_by_watermark;
    sum.memory_used_bytes += p.memory_used_bytes;
    sum.num_state_store_instances += p.num_state_store_instances;
    for (k, v) in p.custom_metrics {
        *sum.custom_metrics.entry(k).or_default() += v;
    }
}

/// What a [`StateTask`] answers once it ran: its progress, and the earliest timeout in the
/// state of its partitions ([`super::StatefulOperator::next_timeout_ms`]).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskAnswer {
    progress: StateOperatorProgress,
    next_timeout_ms: Option<i64>,
}

/// A [`StateTask`]'s spec: the operator, its state, the partitions the worker owns, the batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskSpec {
    node: NodeSpec,
    mode: String,
    plan: String,
    checkpoint: String,
    operator_id: u32,
    partitions: usize,
    owned: (usize, usize),
    epoch: u64,
    store: StoreSpec,
    allow_key_rename: bool,
    batch: BatchSpec,
    storage: Vec<(String, String)>,
    chunk_bytes: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoreSpec {
    min_deltas_for_snapshot: u64,
    min_versions_to_retain: u64,
    on_disk: bool,
    cache_bytes: u64,
    write_buffer_bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BatchSpec {
    id: u64,
    timestamp_ms: i64,
    late_watermark_ms: i64,
    eviction_watermark_ms: i64,
}

impl BatchSpec {
    /// The batch as the operator sees it.
    fn context(&self) -> BatchContext {
        BatchContext {
            batch_id: BatchId(self.id),
            batch_timestamp_ms: self.timestamp_ms,
            late_watermark: WatermarkMs(self.late_watermark_ms),
            eviction_watermark: WatermarkMs(self.eviction_watermark_ms),
        }
    }

    fn of(ctx: &BatchContext) -> Self {
        Self {
            id: ctx.batch_id.0,
            timestamp_ms: ctx.batch_timestamp_ms,
            late_watermark_ms: ctx.late_watermark.0,
            eviction_watermark_ms: ctx.eviction_watermark.0,
        }
    }
}

/// A worker's operators, by plan and operator id, with the partitions their stores hold, the
/// routing epoch and the last batch they ran.
type Held = HashMap<(String, u32), (Range<usize>, u64, u64, OperatorRunner)>;

/// At most this many operators are kept on a worker between batches (the oldest plan's go).
const HELD_OPERATORS: usize = 64;

fn held() -> &'static Mutex<Held> {
    static HELD: OnceLock<Mutex<Held>> = OnceLock::new();
    HELD.get_or_init(Default::default)
}

/// Runs a [`StateTask`] on this worker: the operator it names (kept from the last batch when
/// this worker owned the same partitions of it), its partitions' stores at the batch's version,
/// its `rows` taken as the operator pulls them, version N + 1 committed on the checkpoint once
/// they ended; each output row handed to `output` (at least one batch, which carries their
/// schema). Returns the task's answer (its `StateOperatorProgress` and the earliest timeout in
/// its partitions' state) as JSON, for the driver. Blocking.
pub fn run_state_task(
    task: StateTask,
    rows: StateTaskRows,
    output: &mut dyn FnMut(RecordBatch) -> Result<()>,
) -> Result<String> {
    let spec: TaskSpec = serde_json::from_str(&task.spec)
        .map_err(|e| SluiceError::internal(format!("a state task's spec does not parse: {e}")))?;
    if !spec.storage.is_empty() {
        crate::storage::configure(spec.storage.iter().map(|(k, v)| (k, v)));
    }
    let owned = spec.owned.0..spec.owned.1;
    let key = (spec.plan.clone(), spec.operator_id);
    let kept = held().lock_unpoisoned().remove(&key);
    // The operator of the last batch is kept for the next one in the same epoch, when it owns
    // the same partitions: else another worker may have committed them since, and they are
    // loaded from the checkpoint.
    let batch = spec.batch.id;
    let mut runner = match kept {
        Some((range, epoch, last, runner))
            if range == owned && epoch == spec.epoch && last + 1 == batch =>
        {
            runner
        }
        _ => build_runner(&spec, &task, owned.clone())?,
    };
    let chunking = Chunking {
        bytes: spec.chunk_bytes,
        rows: None,
    };
    let inputs = TaskInputs::split(rows, spec.node.inputs())
        .into_iter()
        .map(|rows| StageInput::new(rows, chunking))
        .collect();
    let ctx = spec.batch.context();
    // A batch that fails leaves no operator behind: the next attempt loads from the checkpoint.
    let out = runner.process(inputs, &ctx)?;
    let answer = TaskAnswer {
        progress: out.progress,
        next_timeout_ms: runner.operator.next_timeout_ms(),
    };
    let progress = serde_json::to_string(&answer)
        .map_err(|e| SluiceError::internal(format!("a state task's progress: {e}")))?;
    let schema = out.rows.schema();
    let mut sent = false;
    for rows in out.rows.into_rows()? {
        output(rows?)?;
        sent = true;
    }
    if !sent {
        output(RecordBatch::new_empty(schema))?;
    }
    let mut kept = held().lock_unpoisoned();
    if kept.len() >= HELD_OPERATORS {
        let old: Vec<_> = kept.keys().filter(|k| k.0 != spec.plan).cloned().collect();
        for k in old {
            kept.remove(&k);
        }
    }
    kept.insert(key, (owned, spec.epoch, batch, runner));
    Ok(progress)
}

/// A stateful task's rows, split into its inputs: rows come input by input (every row of
/// input 0, then of input 1), so an input ends when rows of a later one come. An operator that
/// takes a later input first gets it, the earlier rows held until it takes them.
struct TaskInputs {
    rows: StateTaskRows,
    /// Per input, rows that came while the operator took another.
    held: Vec<std::collections::VecDeque<RecordBatch>>,
    /// The latest input rows came for (the inputs before it ended).
    at: usize,
    /// The rows ended.
    ended: bool,
}

impl TaskInputs {
    /// The `n` inputs of `rows`.
    fn split(rows: StateTaskRows, n: usize) -> Vec<crate::types::RowIter> {
        let shared = Arc::new(Mutex::new(TaskInputs {
            rows,
            held: vec![Default::default(); n],
            at: 0,
            ended: false,
        }));
        (0..n)
            .map(|i| {
                let shared = Arc::clone(&shared);
                Box::new(std::iter::from_fn(move || {
                    shared.lock_unpoisoned().next_of(i)
                })) as crate::types::RowIter
            })
            .collect()
    }

    /// The next rows of input `input`.
    fn next_of(&mut self, input: usize) -> Option<Result<RecordBatch>> {
        if let Some(rows) = self.held.get_mut(input)?.pop_front() {
            return Some(Ok(rows));
        }
        while !self.ended && self.at <= input {
            match self.rows.next() {
                None => self.ended = true,
                Some(Err(e)) => {
                    self.ended = true;
                    return Some(Err(e));
                }
                Some(Ok((i, rows))) => {
                    let Some(held) = self.held.get_mut(i).filter(|_| i >= self.at) else {
                        self.ended = true;
                        return Some(Err(SluiceError::internal(format!(
                            "a state task's rows of input {i} came after input {} (of {})",
                            self.at,
                            self.held.len()
                        ))));
                    };
                    self.at = i;
                    if i == input {
                        return Some(Ok(rows));
                    }
                    held.push_back(rows);
                }
            }
        }
        None
    }
}

/// Builds the operator of `task` over the partitions `owned`, as the driver built it.
fn build_runner(spec: &TaskSpec, task: &StateTask, owned: Range<usize>) -> Result<OperatorRunner> {
    let node = StatefulNode::from_parts(&spec.node, &task.schemas, &task.exprs)?;
    let mode: OutputMode = spec.mode.parse()?;
    let info = spec.info();
    let mut operator = crate::operators::build_operator(&node, mode, &info)?;
    operator.on_worker();
    OperatorRunner::owning(operator, &info, owned)
}

impl TaskSpec {
    /// The operator's state, as the driver's.
    fn info(&self) -> StateInfo {
        StateInfo {
            checkpoint: CheckpointDir::new(std::path::Path::new(&self.checkpoint)),
            operator_id: OperatorId(self.operator_id),
            partitions: self.partitions,
            store_conf: StateStoreConf {
                min_deltas_for_snapshot: self.store.min_deltas_for_snapshot,
                min_versions_to_retain: self.store.min_versions_to_retain,
                kind: if self.store.on_disk {
                    StateStoreKind::OnDisk
                } else {
                    StateStoreKind::InMemory
                },
                local_cache: LocalCacheMemory {
                    cache_bytes: self.store.cache_bytes,
                    write_buffer_bytes: self.store.write_buffer_bytes,
                },
                ..Default::default()
            },
            allow_key_rename: self.allow_key_rename,
            hooks: TestHooks::default(),
        }
    }
}

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;
