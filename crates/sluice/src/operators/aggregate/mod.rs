//! Streaming aggregation (Spark's `StateStoreRestoreExec` + `StateStoreSaveExec`) on DataFusion's
//! accumulators.
//!
//! No per-function code: every aggregate DataFusion has streams through its
//! `GroupsAccumulator` (or an `Accumulator` behind `GroupsAccumulatorAdapter`). The state of a
//! key is the accumulator's intermediate state (`state_fields`), kept in the state store. Each
//! batch, vectorised: the input rows are grouped (arrow row format keys), the stored states of
//! the touched keys are merged (`merge_batch`) with the batch's rows (`update_batch`), the new
//! states are written back, and the final values come from `evaluate`.
//!
//! Keys are hash-partitioned into `spark.sql.shuffle.partitions` state stores
//! (`state/<op>/<partition>/`). Windows: `window(ts, size[, slide])` assigns each row to its
//! window instance(s) here (sliding windows expand a row into several). Late rows (window end, or
//! event time, at or before the watermark for late events) are dropped and counted, except in
//! complete mode. Append mode emits a key once the eviction watermark passes its window end and
//! evicts it; update mode emits changed keys and evicts expired ones; complete mode emits all.
//!
//! The operator is cut by concept, as DataFusion's `aggregates/`: `keys` (grouping keys,
//! window assignment, the late-row filter), `partition` (merge, update, emit and evict per
//! state partition, on threads), `session` (session windows) and `output` (final values and
//! progress). Keys in state are indexed by their event time (`crate::state::indexed`), so
//! eviction touches only expired keys.

mod keys;
mod live;
mod output;
mod partition;
mod session;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions};
use arrow::compute::concat_batches;
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::DFSchema;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Aggregate, EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{GroupsAccumulatorAdapter, PhysicalExpr};
#[allow(deprecated)]
use datafusion::physical_planner::create_aggregate_expr_and_maybe_filter;

use self::keys::{key_event_times, plan_keys, EventTimeKey, KeyPart};
use self::live::LiveAggregation;
use self::partition::{PartitionOutput, TouchedKeys};
use self::session::SessionIndex;
use super::stateful::context::StateLocation;
use super::stateful::event_time::key_event_time_index;
use super::stateful::{
    partitions_of_keys, BatchContext, OperatorOutput, PartitionedStores, Routed, StageInput,
    StateInfo, StatefulOperator,
};
use crate::error::{class, Result, SluiceError};
use crate::state::layout::aggregate::AggregateLayout;
use crate::state::schema::{state_fields, StateSchema};
use crate::state::{KeyGroups, PairTimes};
use crate::types::{OperatorId, OutputMode, WatermarkMs};

/// The schema metadata key that marks routed rows as partial states
/// ([`StreamingAggregate::partial_schema`]).
const PARTIAL_STATES: &str = "sluice.partialStates";

/// Whether routed rows of `schema` are partial states.
fn is_partial(schema: &Schema) -> bool {
    schema.metadata().contains_key(PARTIAL_STATES)
}

pub(super) struct AggFn {
    pub expr: Arc<AggregateFunctionExpr>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    pub n_state: usize,
}

impl AggFn {
    pub(super) fn accumulator(&self) -> Result<Box<dyn GroupsAccumulator>> {
        if self.expr.groups_accumulator_supported() {
            Ok(self.expr.create_groups_accumulator()?)
        } else {
            let e = self.expr.clone();
            Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
                e.create_accumulator()
            })))
        }
    }

    /// The FILTER over `rows`, when the aggregate has one.
    pub(super) fn filter(&self, rows: &RecordBatch) -> Result<Option<BooleanArray>> {
        let Some(f) = &self.filter else {
            return Ok(None);
        };
        Ok(Some(
            f.evaluate(rows)?
                .into_array(rows.num_rows())?
                .as_any()
                .downcast_ref::<BooleanArray>()
                .cloned()
                .ok_or_else(|| SluiceError::internal("filter"))?,
        ))
    }

    /// The arguments over `rows`, then the ORDER BY expressions of an ordered aggregate (what
    /// DataFusion's aggregate execution passes to `update_batch`).
    pub(super) fn update_args(&self, rows: &RecordBatch) -> Result<Vec<ArrayRef>> {
        let n = rows.num_rows();
        let exprs = self.expr.all_expressions();
        exprs
            .args
            .iter()
            .chain(exprs.order_by_exprs.iter())
            .map(|e| -> Result<ArrayRef> { Ok(e.evaluate(rows)?.into_array(n)?) })
            .collect()
    }

    /// The state of one group that saw no row (an empty filter makes the accumulator track
    /// it as such), one row per state field: what merging it into a group changes nothing.
    /// `rows` gives the input schema (none of its rows are read).
    pub(super) fn empty_state(&self, rows: &RecordBatch) -> Result<Vec<ArrayRef>> {
        let mut acc = self.accumulator()?;
        let args = self.update_args(&rows.slice(0, 0))?;
        acc.update_batch(&args, &[], Some(&BooleanArray::from(Vec::<bool>::new())), 1)?;
        Ok(acc.state(EmitTo::All)?)
    }
}

/// See [`StreamingAggregate::slim_schema`].
fn slim_schema(input: &SchemaRef, aggs: &[AggFn]) -> SchemaRef {
    let mut used = vec![false; input.fields().len()];
    for a in aggs {
        let exprs = a.expr.all_expressions();
        for e in exprs
            .args
            .iter()
            .chain(exprs.order_by_exprs.iter())
            .chain(a.filter.iter())
        {
            for c in datafusion::physical_expr::utils::collect_columns(e) {
                if let Some(u) = used.get_mut(c.index()) {
                    *u = true;
                }
            }
        }
    }
    Arc::new(Schema::new(
        input
            .fields()
            .iter()
            .zip(used)
            .map(|(f, u)| {
                if u {
                    f.clone()
                } else {
                    Arc::new(Field::new(f.name(), arrow::datatypes::DataType::Null, true))
                }
            })
            .collect::<Vec<_>>(),
    ))
}

/// One streaming aggregation operator.
pub(crate) struct StreamingAggregate {
    operator_id: OperatorId,
    keys: Vec<KeyPart>,
    key_fields: Vec<Arc<Field>>,
    /// Every aggregate's intermediate state fields, in order: the state value.
    value_fields: Vec<Arc<Field>>,
    aggs: Vec<AggFn>,
    /// The state's layout: the grouping key (none for a global aggregation) and the
    /// accumulators' state fields.
    layout: AggregateLayout,
    /// Where the state is, for errors.
    location: StateLocation,
    output_schema: SchemaRef,
    input_schema: SchemaRef,
    /// The input schema with the columns no aggregate reads turned into `Null` columns: row
    /// instances (a row per window it falls in) copy only what the aggregates need.
    slim_schema: SchemaRef,
    event_time_key: Option<EventTimeKey>,
    mode: OutputMode,
    partitions: usize,
    /// Session windows: how a session's other grouping keys are encoded and grouped.
    sessions: Option<SessionIndex>,
    /// The late-row side output is on: this batch's input rows dropped as late.
    late_rows: Option<Vec<RecordBatch>>,
    /// The state held by the operator between batches (`live`), when its aggregates allow it;
    /// else the state is kept in the stores and read and written back every batch.
    live: Option<LiveAggregation>,
    /// On a worker: the input is the driver's row instances and their keys
    /// ([`Self::routed_schema`]), late ones already dropped.
    routed_in: bool,
}

impl std::fmt::Debug for StreamingAggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "StreamingAggregate(op={}, keys={})",
            self.operator_id,
            self.key_fields.len()
        )
    }
}

impl StreamingAggregate {
    /// Builds the operator for the logical `Aggregate` node, with its state described by `info`.
    pub(crate) fn try_new(agg: &Aggregate, mode: OutputMode, info: &StateInfo) -> Result<Self> {
        let input_schema: &DFSchema = agg.input.schema();
        let props = ExecutionProps::new();
        let planning = PhysicalPlanningContext::default();
        let out_schema = agg.schema.as_arrow().clone();
        let n_keys = agg.group_expr.len();
        let (keys, event_time_key) = plan_keys(agg, &props, &planning)?;
        let key_fields: Vec<Arc<Field>> = out_schema.fields()[..n_keys].to_vec();
        let physical_input = Arc::new(input_schema.as_arrow().clone());
        let mut aggs = Vec::new();
        let mut value_fields: Vec<Arc<Field>> = Vec::new();
        for e in &agg.aggr_expr {
            #[allow(deprecated)]
            let (expr, filter, ordering) =
                create_aggregate_expr_and_maybe_filter(e, input_schema, &physical_input, &props)?;
            // `first_value(x ORDER BY y)` and kin keep the ordering values in their state and compare them themselves; an
            // aggregate that needs its input sorted (`array_agg(x ORDER BY y)`) cannot run on
            // increments.
            if !ordering.is_empty()
                && expr.order_sensitivity()
                    != datafusion::logical_expr::utils::AggregateOrderSensitivity::Beneficial
            {
                return Err(SluiceError::not_supported_yet(
                    "ordered aggregates (WITHIN GROUP / ORDER BY in an aggregate) in a stream",
                ));
            }
            if expr.is_distinct() {
                return Err(SluiceError::query(
                    class::UNSUPPORTED_STREAMING_OPERATION,
                    "Distinct aggregations are not supported on streaming DataFrames/Datasets. Consider using approx_distinct() instead.",
                ));
            }
            let fields = expr.state_fields()?;
            value_fields.extend(fields.iter().cloned());
            aggs.push(AggFn {
                n_state: fields.len(),
                expr,
                filter,
            });
        }
        let types = |fields: &[Arc<Field>]| -> Vec<_> {
            fields.iter().map(|f| f.data_type().clone()).collect()
        };
        let layout = AggregateLayout::new(&types(&key_fields), &types(&value_fields))?;
        let slim_schema = slim_schema(&physical_input, &aggs);
        Self {
            operator_id: info.operator_id,
            keys,
            key_fields,
            value_fields,
            aggs,
            layout,
            location: info.location(),
            output_schema: Arc::new(out_schema),
            slim_schema,
            input_schema: physical_input.clone(),
            event_time_key,
            mode,
            partitions: info.partitions,
            sessions: None,
            late_rows: None,
            live: None,
            routed_in: false,
        }
        .with_session_index()?
        .with_live_state(info)
    }

    /// Holds the state in the operator ([`live`]) when every aggregate's state can be merged
    /// in place, the aggregation has grouping keys and is not by session, the output mode
    /// evicts or emits changes (append, update) and the stores are in memory.
    fn with_live_state(mut self, info: &StateInfo) -> Result<Self> {
        let eligible = self.sessions.is_none()
            && self.layout.key().rows().is_some()
            && matches!(self.mode, OutputMode::Append | OutputMode::Update)
            && info.store_conf.kind == crate::state::StateStoreKind::InMemory;
        if eligible {
            let none = RecordBatch::new_empty(self.slim_schema.clone());
            self.live = LiveAggregation::for_aggregates(&self.aggs, &none)?;
        }
        Ok(self)
    }

    /// Runs one batch over `input` with the stores open, chunk by chunk. A batch whose input
    /// fits one chunk runs in one pass: update, emit, evict. A larger one updates the state
    /// chunk by chunk, remembering the keys it touched, then emits and evicts once, from the
    /// state (`finish_partitions`): the same rows as one pass, a chunk of input at a time.
    fn run(
        &mut self,
        stores: &mut [&mut dyn crate::state::StateStore],
        input: StageInput,
        ctx: &BatchContext,
    ) -> Result<OperatorOutput> {
        let late_us = ctx.late_watermark.as_micros().0;
        let evict_us = ctx.eviction_watermark.as_micros().0;
        if self.sessions.is_some() {
            // Sessions merge across the batch's rows in memory: not cut into chunks yet.
            let batch = concat_batches(&self.input_schema, &input.collect_all()?)?;
            return self.process_sessions(stores, &batch, late_us, evict_us);
        }
        if let Some(mut live) = self.live.take() {
            let result = self.run_live(&mut live, stores, input, late_us, evict_us);
            self.live = Some(live);
            return result;
        }
        let mut totals = PartitionOutput::default();
        let mut dropped = 0u64;
        let mut outputs = Vec::new();
        // The keys each partition's chunks touched, once the batch has more than one chunk.
        let mut touched: Option<Vec<TouchedKeys>> = None;
        input.for_each_chunk(|chunk, last| {
            let batch = concat_batches(&self.chunk_schema(), &chunk)?;
            drop(chunk);
            if !last && touched.is_none() {
                touched = Some(vec![TouchedKeys::default(); self.partitions]);
            }
            let (rows, key_arrays) = self.chunk_instances(batch, late_us, &mut dropped)?;
            let results =
                self.run_partitions(stores, &rows, &key_arrays, evict_us, touched.as_deref_mut())?;
            for r in results {
                totals.add(r, &mut outputs);
            }
            Ok(())
        })?;
        if let Some(touched) = touched {
            for r in self.finish_partitions(stores, touched, evict_us)? {
                totals.add(r, &mut outputs);
            }
        }
        let rows = match self.mode {
            OutputMode::Complete => self.all_rows(stores)?,
            _ => concat_batches(&self.output_schema, &outputs)?,
        };
        Ok(self.report(
            rows,
            (totals.updated, totals.removed, dropped),
            (totals.updates_ms, totals.removals_ms),
        ))
    }
}

impl StreamingAggregate {
    /// A chunk's row instances (which input row feeds which key: a row per window it falls
    /// in), with only the columns the aggregates read, and their key columns; late instances
    /// are counted in `dropped` and kept for the late-row output when it is on.
    fn chunk_instances(
        &mut self,
        batch: RecordBatch,
        late_us: i64,
        dropped: &mut u64,
    ) -> Result<(RecordBatch, Vec<ArrayRef>)> {
        if self.routed_in {
            let n = self.slim_schema.fields().len();
            let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
            let rows = RecordBatch::try_new_with_options(
                self.slim_schema.clone(),
                batch.columns()[..n].to_vec(),
                &options,
            )?;
            return Ok((rows, batch.columns()[n..].to_vec()));
        }
        let mut instances = self.assign_instances(&batch, late_us)?;
        self.keep_late(&batch, std::mem::take(&mut instances.late_rows))?;
        *dropped += instances.dropped;
        let key_arrays = self.instance_keys(&batch, &mut instances)?;
        let rows = arrow::compute::take_record_batch(&self.slim(&batch)?, &instances.take_idx)?;
        Ok((rows, key_arrays))
    }

    /// [`Self::run`] with the state held by the operator: the held state made the stores'
    /// version, updated chunk by chunk, then emitted, evicted and staged once. The held state
    /// is at no version while the batch runs, so a batch that fails part-way rebuilds it.
    fn run_live(
        &mut self,
        live: &mut LiveAggregation,
        stores: &mut [&mut dyn crate::state::StateStore],
        input: StageInput,
        late_us: i64,
        evict_us: i64,
    ) -> Result<OperatorOutput> {
        self.live_open(live, stores)?;
        let version = live.version.begin();
        let mut dropped = 0u64;
        let mut updates_ms = 0i64;
        input.for_each_chunk(|chunk, _| {
            if self.routed_in && chunk.first().is_some_and(|b| is_partial(&b.schema())) {
                // Partial states routed from where the rows were read: merged in place.
                let batch = concat_batches(&self.partial_schema()?, &chunk)?;
                drop(chunk);
                let n_states: usize = self.aggs.iter().map(|a| a.n_state).sum();
                let (states, keys) = batch.columns().split_at(n_states);
                updates_ms += self.live_merge(live, states, keys)?;
                return Ok(());
            }
            let batch = concat_batches(&self.chunk_schema(), &chunk)?;
            drop(chunk);
            let (rows, key_arrays) = self.chunk_instances(batch, late_us, &mut dropped)?;
            updates_ms += self.live_update(live, &rows, &key_arrays)?;
            Ok(())
        })?;
        let mut totals = PartitionOutput::default();
        let mut outputs = Vec::new();
        for r in self.live_finish(live, stores, evict_us)? {
            totals.add(r, &mut outputs);
        }
        live.version.ran(version);
        let rows = concat_batches(&self.output_schema, &outputs)?;
        Ok(self.report(
            rows,
            (totals.updated, totals.removed, dropped),
            (updates_ms, totals.removals_ms),
        ))
    }
}

impl StreamingAggregate {
    /// The schema of a chunk of this operator's input: its input rows', or on a worker the
    /// routed instances'.
    fn chunk_schema(&self) -> SchemaRef {
        if self.routed_in {
            self.routed_schema()
        } else {
            self.input_schema.clone()
        }
    }

    /// The rows a worker is handed ([`StatefulOperator::route`]): each row instance's columns
    /// the aggregates read, then its key columns.
    fn routed_schema(&self) -> SchemaRef {
        let mut fields: Vec<Arc<Field>> = self.slim_schema.fields().iter().cloned().collect();
        fields.extend(
            self.key_fields.iter().enumerate().map(|(i, f)| {
                Arc::new(Field::new(format!("#key{i}"), f.data_type().clone(), true))
            }),
        );
        Arc::new(Schema::new(fields))
    }

    /// The rows a worker is handed when the state is held by the operator ([`live`]): each
    /// group's partial state (every aggregate's state fields, over the routed chunk's instances
    /// of the group), then its key columns; marked as such in the schema's metadata.
    fn partial_schema(&self) -> Result<SchemaRef> {
        let mut fields: Vec<Arc<Field>> = Vec::new();
        for a in &self.aggs {
            fields.extend(a.expr.state_fields()?);
        }
        fields.extend(
            self.key_fields.iter().enumerate().map(|(i, f)| {
                Arc::new(Field::new(format!("#key{i}"), f.data_type().clone(), true))
            }),
        );
        let marked = std::collections::HashMap::from([(PARTIAL_STATES.to_string(), "1".into())]);
        Ok(Arc::new(Schema::new_with_metadata(fields, marked)))
    }

    /// The state partition of each of `n` instances, by their keys.
    fn instance_partitions(&self, n: usize, key_arrays: &[ArrayRef]) -> Result<Vec<usize>> {
        Ok(partitions_of_keys(
            self.layout.key().encode(key_arrays)?.as_ref(),
            n,
            self.partitions,
        ))
    }
}

impl StatefulOperator for StreamingAggregate {
    fn name(&self) -> &str {
        if self.sessions.is_some() {
            "sessionWindowStateStoreSaveExec"
        } else {
            "stateStoreSave"
        }
    }

    /// Keys by the event time in them (a window's or session's end, or the watermarked
    /// column), so eviction reads only the expired keys; not in complete mode (nothing is
    /// evicted).
    fn state_times(&self) -> Result<Option<PairTimes>> {
        let (Some(et), Some(_), false, None) = (
            self.event_time_key,
            self.layout.key().rows(),
            self.mode == OutputMode::Complete,
            &self.live,
        ) else {
            return Ok(None);
        };
        key_event_time_index(
            &self.key_fields,
            &self.location,
            "an aggregation key",
            move |arrays| key_event_times(arrays, et),
        )
        .map(Some)
    }

    /// Session windows: a session's group is its other grouping keys, to merge with.
    fn state_key_groups(&self) -> Option<KeyGroups> {
        self.session_key_groups()
    }

    /// The held state (`live`): the stores keep no pairs.
    fn state_held_by_operator(&self) -> bool {
        self.live.is_some()
    }

    fn state_schema(&self) -> StateSchema {
        let mut schema = StateSchema::new(
            self.operator_id,
            "stateStoreSave",
            state_fields(&self.key_fields),
            state_fields(&self.value_fields),
        );
        schema.windows = self.keys.iter().filter_map(KeyPart::window_text).collect();
        schema
    }

    fn process(
        &mut self,
        mut inputs: Vec<StageInput>,
        stores: &mut PartitionedStores<'_>,
        ctx: &BatchContext,
    ) -> Result<OperatorOutput> {
        let input = inputs
            .pop()
            .ok_or_else(|| SluiceError::internal("an aggregation without its input"))?;
        if let Some(kept) = &mut self.late_rows {
            kept.clear();
        }
        self.run(stores.all_mut(), input, ctx)
    }

    /// Session windows drop late rows on the worker: the late-row output keeps them here.
    fn routes(&self) -> bool {
        self.sessions.is_none() || self.late_rows.is_none()
    }

    /// The driver assigns each row its instances (a row per window it falls in), drops the late
    /// ones (kept for the late-row output when it is on) and routes each instance by its key;
    /// by session window, each row by its other keys.
    fn route(
        &mut self,
        mut inputs: Vec<StageInput>,
        ctx: &BatchContext,
        routed: &mut Routed,
    ) -> Result<()> {
        let input = inputs
            .pop()
            .ok_or_else(|| SluiceError::internal("an aggregation without its input"))?;
        if let Some(kept) = &mut self.late_rows {
            kept.clear();
        }
        let late_us = ctx.late_watermark.as_micros().0;
        if self.sessions.is_some() {
            // A session merges rows of one key group (the other keys): each row goes whole to
            // its group's partition, and the worker drops the late ones.
            input.for_each_chunk(|chunk, _| {
                let batch = concat_batches(&self.input_schema, &chunk)?;
                drop(chunk);
                let partitions = self.session_partitions(&batch)?;
                routed.push(0, &batch, &partitions)
            })?;
            return Ok(());
        }
        // With the state held by the operator, each chunk's instances are aggregated here
        // first (Spark's partial aggregation before its shuffle): a group's partial state
        // crosses the wire, not its rows.
        let partial = self.live.is_some();
        let schema = if partial {
            self.partial_schema()?
        } else {
            self.routed_schema()
        };
        let mut dropped = 0u64;
        input.for_each_chunk(|chunk, _| {
            let batch = concat_batches(&self.input_schema, &chunk)?;
            drop(chunk);
            let (rows, key_arrays) = self.chunk_instances(batch, late_us, &mut dropped)?;
            if rows.num_rows() == 0 {
                // Every row late, or none: nothing for the owners.
                return Ok(());
            }
            let (mut columns, key_arrays) = if partial {
                self.partials(&rows, &key_arrays)?
            } else {
                (rows.columns().to_vec(), key_arrays)
            };
            let n = key_arrays.first().map_or(rows.num_rows(), |k| k.len());
            let partitions = self.instance_partitions(n, &key_arrays)?;
            columns.extend(key_arrays);
            let options = RecordBatchOptions::new().with_row_count(Some(n));
            let batch = RecordBatch::try_new_with_options(schema.clone(), columns, &options)?;
            routed.push(0, &batch, &partitions)
        })?;
        routed.dropped_by_watermark = dropped as i64;
        Ok(())
    }

    /// Late rows kept for the late-row output are the driver's.
    fn routes_where_read(&self) -> bool {
        self.late_rows.is_none()
    }

    fn on_worker(&mut self) {
        self.routed_in = true;
    }

    /// A no-data batch emits or evicts when the watermark moved and bounds the state (not in
    /// complete mode, which keeps every key).
    fn should_run_another_batch(
        &self,
        batch_watermark: WatermarkMs,
        next_watermark: WatermarkMs,
    ) -> bool {
        self.event_time_key.is_some()
            && self.mode != OutputMode::Complete
            && next_watermark > batch_watermark
    }

    fn keep_late_rows(&mut self) -> Result<SchemaRef> {
        self.late_rows = Some(Vec::new());
        Ok(self.input_schema.clone())
    }

    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        self.late_rows
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }
}
