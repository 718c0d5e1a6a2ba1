//! The stateful-operator framework: the [`StatefulOperator`] trait every stateful operator
//! implements, and the [`OperatorRunner`] that drives one batch by batch.
//!
//! An operator *declares* its state ([`StatefulOperator::state_schema`], the equivalent of
//! Arroyo's `tables()`); the framework records that schema on the first run and checks it on
//! every restart (`crate::state::schema`), opens one state store per partition at the batch's
//! version, hands the operator the batch ([`BatchContext`]) and the open stores
//! ([`PartitionedStores`]), commits every store when the operator is done, and reports the
//! store-level progress (keys in state, memory, commit time, partitions). What an operator
//! writes is its own business; where, when and how it is committed is the framework's.
//!
//! - [`context`]: [`StateInfo`] (where the state lives, Spark's `StatefulOperatorStateInfo`) and
//!   [`BatchContext`] (which batch runs, with its two watermarks by name);
//! - [`input`]: [`StageInput`], an input's rows pulled chunk by chunk as its plan runs;
//! - [`output`]: [`OutputRows`], the output rows, spilled to a file past a share of the budget;
//! - [`stores`]: [`PartitionedStores`], key partitioning and the partition fan-out on threads;
//! - [`event_time`]: which column is event time, and event times as microseconds.

pub(crate) mod context;
pub(crate) mod event_time;
pub(crate) mod input;
pub(crate) mod output;
pub(crate) mod remote;
pub(crate) mod stores;

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::error::{Result, SluiceError};
use crate::progress::StateOperatorProgress;
use crate::state::schema::{check_state_schema, StateSchema};
use crate::state::{DefaultStateStoreProvider, KeyGroups, PairTimes};
use crate::types::WatermarkMs;

pub(crate) use context::{BatchContext, StateInfo};
pub(crate) use input::{Chunking, StageInput};
pub(crate) use output::OutputRows;
pub(crate) use remote::Routed;
pub(crate) use stores::{partition_of, partitions_of_keys, HeldVersion, PartitionedStores};

/// What one batch of an operator produced: its output rows and its progress.
///
/// The operator fills the progress fields only it knows (rows updated, removed and dropped by
/// the watermark, update and removal times, custom metrics); the framework fills the rest
/// (`operatorName` from [`StatefulOperator::name`], keys in state, memory, commit time, partitions).
#[derive(Debug)]
pub(crate) struct OperatorOutput {
    /// The batch's output rows, in the operator's output schema.
    pub rows: OutputRows,
    /// The batch's progress.
    pub progress: StateOperatorProgress,
}

/// A stateful operator, driven once per batch by an [`OperatorRunner`].
///
/// The framework owns the state stores: an implementation declares the schema of its state
/// ([`state_schema`](Self::state_schema)) and reads and updates the stores it is handed in
/// [`process`](Self::process); it never opens, commits or finds the files of a store itself.
///
/// # Contract
///
/// - `process` for batch N is handed every partition's store at version N. It MUST stage in
///   them every change the batch makes to its state and MUST NOT commit them: the framework
///   commits version N + 1 of every partition once `process` returns `Ok`.
/// - A key MUST be staged in the store of the partition [`PartitionedStores::partition_of`]
///   gives it (or, for keys grouped under another key, the partition of that key, always the
///   same one), so that a restart finds it there.
/// - `process` sees each batch once, except on replay after a failure, when its stores are
///   handed to it at version N again. Whatever the operator keeps in memory about its state
///   (an index, a sequence number) MUST be rebuilt from the stores when their version is not
///   the one it describes; better, keep nothing and ask the stores (their time index and key
///   groups: [`Self::state_times`], [`Self::state_key_groups`]).
/// - An input arrives as its plan runs ([`StageInput`]). An operator whose work is per row
///   SHOULD take it chunk by chunk ([`StageInput::for_each_chunk`]), staging each chunk's
///   changes before the next, so a batch larger than memory passes through a chunk at a time;
///   its output MUST be the same as for the whole input at once.
/// - [`state_schema`](Self::state_schema) MUST describe the stored key and value layout and
///   MUST NOT change between runs of the same query: it is compared with the recorded schema on
///   restart, and a different schema refuses the old state.
/// - A row late for this batch (at or before [`BatchContext::late_watermark`]) MUST NOT reach
///   the state; it is dropped and counted in `numRowsDroppedByWatermark`. State is emitted and
///   evicted by [`BatchContext::eviction_watermark`], never by the other.
///
/// # Implementation example
///
/// A count of rows per batch, kept under one key:
///
/// ```ignore
/// struct CountRows { schema: SchemaRef, op: OperatorId }
///
/// impl StatefulOperator for CountRows {
///     fn name(&self) -> &str {
///         "countRows"
///     }
///     fn state_schema(&self) -> StateSchema {
///         StateSchema::new(self.op, "countRows", vec![], state_fields(&[count_field()]))
///     }
///     fn process(
///         &mut self,
///         inputs: Vec<StageInput>,
///         stores: &mut PartitionedStores<'_>,
///         _ctx: &BatchContext,
///     ) -> Result<OperatorOutput> {
///         let mut n = 0u64;
///         for input in inputs {
///             input.for_each_chunk(|chunk, _| {
///                 n += chunk.iter().map(|b| b.num_rows() as u64).sum::<u64>();
///                 Ok(())
///             })?;
///         }
///         let p = stores.partition_of(&[]);
///         let old = stores[p].get(&[]).map_or(Ok(0), decode_count)?;
///         stores[p].put(&[], &(old + n).to_le_bytes());
///         Ok(OperatorOutput {
///             rows: count_batch(&self.schema, old + n)?.into(),
///             progress: StateOperatorProgress { num_rows_updated: 1, ..Default::default() },
///         })
///     }
/// }
/// ```
pub(crate) trait StatefulOperator: Send {
    /// The operator's name in progress reports (`StateOperatorProgress.operatorName`), as Spark
    /// names it: `stateStoreSave`, `symmetricHashJoin`, `dedupe`, `flatMapGroupsWithState`, ...
    fn name(&self) -> &str;

    /// The key and value layout of the operator's state, recorded on the first run and checked
    /// on every restart before a store is opened.
    fn state_schema(&self) -> StateSchema;

    /// How the operator's state is ordered by time (event time to evict by, timeouts to fire),
    /// when it is: its stores then keep a time index, and [`StateStore::scan_by_time`] reads a
    /// range of it instead of the whole state. The default keeps none.
    ///
    /// [`StateStore::scan_by_time`]: crate::state::StateStore::scan_by_time
    fn state_times(&self) -> Result<Option<PairTimes>> {
        Ok(None)
    }

    /// How the operator's state keys group (a join key's rows), when they do: its stores then
    /// read a group alone ([`StateStore::scan_group`]). The default keeps none.
    ///
    /// [`StateStore::scan_group`]: crate::state::StateStore::scan_group
    fn state_key_groups(&self) -> Option<KeyGroups> {
        None
    }

    /// The operator holds its committed state itself, in memory, between batches: its stores
    /// keep none of their pairs, only write what it stages with `stage_known` and hand the
    /// committed version back through `load_committed` when the operator must rebuild
    /// ([`DefaultStateStoreProvider::held_by_operator`]). Asked once, when the stores open; only
    /// with the in-memory store kind. The default holds nothing.
    fn state_held_by_operator(&self) -> bool {
        false
    }

    /// Runs one batch: `inputs` holds the rows of each input (one entry per child of the
    /// operator, read as its plan runs), `stores` every partition's store at the batch's
    /// version, `ctx` the batch.
    /// Returns the output rows and the operator's part of the progress.
    fn process(
        &mut self,
        inputs: Vec<StageInput>,
        stores: &mut PartitionedStores<'_>,
        ctx: &BatchContext,
    ) -> Result<OperatorOutput>;

    /// Spark's `shouldRunAnotherBatch`: would a no-data batch at `next_watermark` (after a batch
    /// at `batch_watermark`) emit or evict? The default never asks for one.
    fn should_run_another_batch(
        &self,
        _batch_watermark: WatermarkMs,
        _next_watermark: WatermarkMs,
    ) -> bool {
        false
    }

    /// Opt-in late-row side output: from now on, keep each batch's input rows that are dropped
    /// as late (they reach no state) for [`Self::take_late_rows`]. Returns their schema. The
    /// default refuses.
    fn keep_late_rows(&mut self) -> Result<SchemaRef> {
        Err(SluiceError::not_supported_yet(
            "a late-row side output for this stateful operator (it is supported for streaming \
             aggregations and deduplication)",
        ))
    }

    /// The input rows the last `process` dropped as late, when kept (see `keep_late_rows`).
    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        Vec::new()
    }

    /// The operator can run on a cluster's workers ([`remote`]): [`Self::route`] splits its
    /// input by state partition. The default cannot.
    fn routes(&self) -> bool {
        false
    }

    /// On the driver of a cluster, or on the worker that read the input
    /// ([`remote::route_read`]): splits `inputs` by the state partition of each row's key
    /// (what each row changes in the state: Spark's shuffle by key) into `routed`, whose tasks
    /// send each its rows as they come, every row of input 0 before any of input 1; what a
    /// worker's operator is handed after [`Self::on_worker`]. The rows of one key go to one
    /// task, so the workers' outputs together are this process's.
    fn route(
        &mut self,
        _inputs: Vec<StageInput>,
        _ctx: &BatchContext,
        _routed: &mut Routed,
    ) -> Result<()> {
        Err(SluiceError::internal(format!(
            "{} does not run on workers",
            self.name()
        )))
    }

    /// On a worker: when the earliest timeout in the state of the partitions it owns fires
    /// (`flatMapGroupsWithState`), for the driver to know whether a no-data batch would fire
    /// one. The default has none.
    fn next_timeout_ms(&self) -> Option<i64> {
        None
    }

    /// On the driver of a cluster: the earliest timeout in the state, over every worker's
    /// partitions ([`Self::next_timeout_ms`]). The default ignores it.
    fn set_next_timeout_ms(&mut self, _at: Option<i64>) {}

    /// [`Self::route`] may run on the workers that read the input, not only on the driver: it
    /// keeps nothing on the driver (no late rows kept for a side output). The default cannot.
    fn routes_where_read(&self) -> bool {
        false
    }

    /// The operator runs on a worker: its inputs are what [`Self::route`] gave. The default
    /// changes nothing (an operator whose routed rows are its input rows).
    fn on_worker(&mut self) {}
}

/// Drives one [`StatefulOperator`]: checks (or records) its state schema and opens its stores
/// when built, then runs it batch by batch (stores opened at the batch's version, committed
/// after the operator, background maintenance after a successful batch).
pub(crate) struct OperatorRunner {
    operator: Box<dyn StatefulOperator>,
    providers: Vec<DefaultStateStoreProvider>,
    info: StateInfo,
    /// The partitions whose stores this process holds (all of them, but on a worker).
    owned: Range<usize>,
    /// The operator runs on a cluster's workers.
    remote: Option<remote::Remote>,
}

impl std::fmt::Debug for OperatorRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OperatorRunner({} #{}, {} partitions)",
            self.operator.name(),
            self.info.operator_id,
            self.info.partitions
        )
    }
}

impl OperatorRunner {
    /// Checks (or records, on the first run) `operator`'s declared state schema under
    /// `info.checkpoint`, then opens its stores. A schema that does not fit the checkpoint fails
    /// with a class `crate::state::schema::is_state_schema_error` recognises.
    pub(crate) fn try_new(operator: Box<dyn StatefulOperator>, info: &StateInfo) -> Result<Self> {
        Self::owning(operator, info, 0..info.partitions)
    }

    /// [`Self::try_new`] with the stores of the partitions `owned` only (a worker's).
    pub(crate) fn owning(
        operator: Box<dyn StatefulOperator>,
        info: &StateInfo,
        owned: Range<usize>,
    ) -> Result<Self> {
        check_state_schema(
            &info.checkpoint,
            info.operator_id,
            &operator.state_schema(),
            info.allow_key_rename,
        )?;
        Ok(Self {
            providers: open_providers(operator.as_ref(), info, owned.clone())?,
            operator,
            info: info.clone(),
            owned,
            remote: None,
        })
    }

    /// Runs the operator's batches on a cluster's workers (`remote`) when it can route its
    /// input there (session windows stay): this process then keeps no store of it.
    pub(crate) fn on_workers(&mut self, remote: remote::Remote) {
        if !self.operator.routes() {
            log::info!(
                "stateful operator {} ({}) runs on the driver: it does not run on workers yet",
                self.info.operator_id,
                self.operator.name()
            );
            return;
        }
        self.providers.clear();
        self.owned = 0..0;
        self.remote = Some(remote);
    }

    /// On a cluster, before batch `ctx.batch_id` runs: when every input (`inputs`, each input's
    /// plan as planned, not yet run) is reads on the workers with only partitioning between
    /// them and the operator, the workers that read the rows route them to the owners of their
    /// state partitions themselves (they cross the wire once), and the driver's plan gets only
    /// the reads' counts. Otherwise the driver routes them, as its plan gives them.
    pub(crate) fn route_from_reads(
        &mut self,
        inputs: &[Arc<dyn datafusion::physical_plan::ExecutionPlan>],
        ctx: &BatchContext,
    ) -> Result<()> {
        let Some(remote) = &self.remote else {
            return Ok(());
        };
        if !self.operator.routes_where_read() {
            return Ok(());
        }
        let reads: Option<Vec<_>> = inputs
            .iter()
            .map(crate::source::remote::reads_under)
            .collect();
        match reads {
            Some(reads) => remote.route_from_reads(&reads, ctx),
            None => {
                log::debug!(
                    "stateful operator {}: the driver routes the rows (an input is not only \
                     reads on the workers)",
                    self.info.operator_id
                );
                Ok(())
            }
        }
    }

    /// Runs batch `ctx.batch_id`: opens every store at that version, runs the operator, commits
    /// version `batch_id + 1` of every store and completes the progress.
    pub(crate) fn process(
        &mut self,
        inputs: Vec<StageInput>,
        ctx: &BatchContext,
    ) -> Result<OperatorOutput> {
        if let Some(remote) = self.remote.take() {
            let out = if self.operator.routes() {
                remote.process(self, inputs, ctx)
            } else {
                Err(SluiceError::internal(format!(
                    "{} on workers cannot route its input",
                    self.operator.name()
                )))
            };
            self.remote = Some(remote);
            return out;
        }
        let result = {
            let mut elsewhere: Vec<stores::ElsewhereStore> = (self.owned.len()
                ..self.info.partitions)
                .map(|_| Default::default())
                .collect();
            let mut stores = PartitionedStores::open(
                &mut self.providers,
                &mut elsewhere,
                self.owned.clone(),
                ctx.batch_id.state_version(),
            )?;
            self.operator
                .process(inputs, &mut stores, ctx)
                .and_then(|mut out| {
                    let t = Instant::now();
                    let m = stores.commit(&self.info.hooks, ctx.batch_id)?;
                    let p = &mut out.progress;
                    p.commit_time_ms = t.elapsed().as_millis() as i64;
                    p.operator_name = self.operator.name().to_string();
                    p.num_rows_total = m.num_keys as i64;
                    p.memory_used_bytes = m.memory_used_bytes as i64;
                    for (name, n) in m.custom_metrics {
                        p.custom_metrics.insert(name.to_string(), n as i64);
                    }
                    p.num_shuffle_partitions = self.info.partitions as i64;
                    p.num_state_store_instances = self.owned.len() as i64;
                    Ok(out)
                })
        };
        if result.is_ok() {
            // Snapshots and purges run in the background, so commits never wait for them.
            for p in self.providers.iter_mut() {
                p.maintain_in_background();
            }
        }
        result
    }

    /// See [`StatefulOperator::should_run_another_batch`].
    pub(crate) fn should_run_another_batch(
        &self,
        batch_watermark: WatermarkMs,
        next_watermark: WatermarkMs,
    ) -> bool {
        self.operator
            .should_run_another_batch(batch_watermark, next_watermark)
    }

    /// See [`StatefulOperator::keep_late_rows`].
    /// An operator that cannot route its input with the late rows kept runs in this process.
    pub(crate) fn keep_late_rows(&mut self) -> Result<SchemaRef> {
        let schema = self.operator.keep_late_rows()?;
        if self.remote.is_some() && !self.operator.routes() {
            log::info!(
                "stateful operator {} runs on the driver: its late rows are kept",
                self.info.operator_id
            );
            self.remote = None;
            self.owned = 0..self.info.partitions;
            self.providers =
                open_providers(self.operator.as_ref(), &self.info, self.owned.clone())?;
        }
        Ok(schema)
    }

    /// See [`StatefulOperator::take_late_rows`].
    pub(crate) fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        self.operator.take_late_rows()
    }
}

/// The store providers of `operator`'s partitions `owned`, kept as it declares (time index, key
/// groups, held by the operator).
fn open_providers(
    operator: &dyn StatefulOperator,
    info: &StateInfo,
    owned: Range<usize>,
) -> Result<Vec<DefaultStateStoreProvider>> {
    stores::open_stores(
        info,
        owned,
        operator.state_times()?,
        operator.state_key_groups(),
        operator.state_held_by_operator(),
    )
}

/// The schema of an operator's output rows, with every field nullable.
pub(crate) fn nullable(schema: &SchemaRef) -> SchemaRef {
    Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}
