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

use crate::error::class;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, StructArray, TimestampMicrosecondArray, UInt32Array,
};
use arrow::compute::{cast, concat_batches, take};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::{DFSchema, ExprSchema};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Aggregate, EmitTo, Expr, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{create_physical_expr, GroupsAccumulatorAdapter, PhysicalExpr};
#[allow(deprecated)]
use datafusion::physical_planner::create_aggregate_expr_and_maybe_filter;

use super::watermark::WATERMARK_DELAY_KEY;
use super::window::{last_window_start, window_array, WindowSpec};
use crate::error::{Result, SluiceError};
use crate::progress::StateOperatorProgress;
use crate::state::{DefaultStateStoreProvider, StateStore, StateStoreConf};
use crate::types::OutputMode;

pub use super::stateful::ALLOW_KEY_RENAME_CONF;
use super::stateful::{
    check_state_schema, open_stores, partition_of, state_fields, to_micros, StateSchema,
    StatefulOperator,
};

/// How one grouping column is computed.
enum KeyPart {
    Expr(Arc<dyn PhysicalExpr>),
    /// `window(time, size, slide, start)`, in microseconds.
    Window {
        time: Arc<dyn PhysicalExpr>,
        size: i64,
        slide: i64,
        start: i64,
    },
    /// `session_window(time, gap)`, in microseconds.
    Session {
        time: Arc<dyn PhysicalExpr>,
        gap: i64,
    },
}

/// Where a key's event time is, for late rows and eviction.
#[derive(Debug, Clone, Copy)]
enum EventTimeKey {
    /// The `end` of the window struct at this key position.
    WindowEnd(usize),
    /// A watermarked timestamp column at this key position.
    Column(usize),
}

struct AggFn {
    expr: Arc<AggregateFunctionExpr>,
    filter: Option<Arc<dyn PhysicalExpr>>,
    n_state: usize,
}

impl AggFn {
    fn accumulator(&self) -> Result<Box<dyn GroupsAccumulator>> {
        if self.expr.groups_accumulator_supported() {
            Ok(self.expr.create_groups_accumulator()?)
        } else {
            let e = self.expr.clone();
            Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
                e.create_accumulator()
            })))
        }
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
pub struct StreamingAggregate {
    operator_id: u32,
    keys: Vec<KeyPart>,
    key_fields: Vec<Arc<Field>>,
    aggs: Vec<AggFn>,
    key_converter: Option<RowConverter>,
    state_converter: RowConverter,
    output_schema: SchemaRef,
    input_schema: SchemaRef,
    /// The input schema with the columns no aggregate reads turned into `Null` columns: row
    /// instances (a row per window it falls in) copy only what the aggregates need.
    slim_schema: SchemaRef,
    event_time_key: Option<EventTimeKey>,
    mode: OutputMode,
    partitions: usize,
    stores: Vec<DefaultStateStoreProvider>,
    /// A lower bound of the event times of keys in state (skips eviction scans of sessions).
    min_event_time_us: i64,
    /// Keys in state by event time (window end or the event-time column), so eviction touches
    /// only expired keys instead of scanning the state. Not used for session windows.
    time_index: TimeIndex,
    /// Session windows: the sessions in state per value of the other grouping keys.
    sessions: Option<SessionIndex>,
    /// The late-row side output is on: this batch's input rows dropped as late.
    late_rows: Option<Vec<RecordBatch>>,
}

/// The keys in state ordered by their event time. It describes one state version
/// (`version`); a batch that finds it describing another version (the first batch of a run, or
/// after a failed batch) rebuilds it with one scan of the state.
#[derive(Default)]
struct TimeIndex {
    version: Option<u64>,
    /// One map per state partition: event time µs -> keys.
    parts: Vec<BTreeMap<i64, Vec<Vec<u8>>>>,
}

/// What every partition of a batch reads: the row instances (a row per window it falls in),
/// their key columns and encoded keys, and their event times (for the index).
struct BatchInstances<'a> {
    rows: &'a RecordBatch,
    key_arrays: &'a [ArrayRef],
    key_rows: Option<&'a Rows>,
    times: Option<&'a TimestampMicrosecondArray>,
    evict_us: i64,
}

/// What one partition's share of a batch produced.
#[derive(Default)]
struct PartitionOutput {
    rows: Option<RecordBatch>,
    updated: u64,
    removed: u64,
    updates_ms: i64,
    removals_ms: i64,
}

/// Sessions of one value of the other keys: (start µs, end µs, full state key).
type SessionList = Vec<(i64, i64, Vec<u8>)>;

/// Sessions in state, by the encoded values of the grouping keys other than the session.
struct SessionIndex {
    /// Encodes the other grouping keys (None when the session is the only key).
    other_converter: Option<RowConverter>,
    /// Built from the state store on the first batch of a run.
    by_other: Option<HashMap<Vec<u8>, SessionList>>,
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

/// What one batch of the operator produced.
pub struct AggregateOutput {
    pub rows: RecordBatch,
    pub progress: StateOperatorProgress,
}

impl StreamingAggregate {
    /// Builds the operator for the logical `Aggregate` node, opening (or checking) its state under
    /// `<checkpoint>/state/<operator_id>/`.
    pub fn try_new(
        agg: &Aggregate,
        operator_id: u32,
        mode: OutputMode,
        checkpoint_root: &Path,
        partitions: usize,
        allow_key_rename: bool,
        store_conf: StateStoreConf,
    ) -> Result<Self> {
        let input_schema: &DFSchema = agg.input.schema();
        let props = ExecutionProps::new();
        let planning = PhysicalPlanningContext::default();
        let mut keys = Vec::new();
        let mut event_time_key = None;
        let out_schema = agg.schema.as_arrow().clone();
        let n_keys = agg.group_expr.len();
        for (i, g) in agg.group_expr.iter().enumerate() {
            match WindowSpec::of(g)? {
                Some(WindowSpec::Time {
                    time,
                    size,
                    slide,
                    start,
                }) => {
                    if is_watermarked(&time, input_schema) {
                        event_time_key = Some(EventTimeKey::WindowEnd(i));
                    }
                    keys.push(KeyPart::Window {
                        time: create_physical_expr(&time, input_schema, &props, &planning)?,
                        size,
                        slide,
                        start,
                    });
                }
                Some(WindowSpec::Session { time, gap }) => {
                    if is_watermarked(&time, input_schema) {
                        event_time_key = Some(EventTimeKey::WindowEnd(i));
                    }
                    keys.push(KeyPart::Session {
                        time: create_physical_expr(&time, input_schema, &props, &planning)?,
                        gap,
                    });
                }
                None => {
                    if is_watermarked(g, input_schema) {
                        event_time_key = Some(EventTimeKey::Column(i));
                    }
                    keys.push(KeyPart::Expr(create_physical_expr(
                        g,
                        input_schema,
                        &props,
                        &planning,
                    )?));
                }
            }
        }
        let key_fields: Vec<Arc<Field>> = out_schema.fields()[..n_keys].to_vec();
        let physical_input = Arc::new(input_schema.as_arrow().clone());
        let mut aggs = Vec::new();
        let mut state_field_list: Vec<Arc<Field>> = Vec::new();
        for e in &agg.aggr_expr {
            #[allow(deprecated)]
            let (expr, filter, ordering) =
                create_aggregate_expr_and_maybe_filter(e, input_schema, &physical_input, &props)?;
            // `first_value(x ORDER BY y)` and kin (and Spark's `max_by` / `min_by`, rewritten to
            // them) keep the ordering values in their state and compare them themselves; an
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
            state_field_list.extend(fields.iter().cloned());
            aggs.push(AggFn {
                n_state: fields.len(),
                expr,
                filter,
            });
        }
        let key_converter = if key_fields.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                key_fields
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )?)
        };
        let state_converter = RowConverter::new(
            state_field_list
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;

        let dir = checkpoint_root.join("state").join(operator_id.to_string());
        let schema = StateSchema {
            operator: format!("{operator_id} (stateStoreSave)"),
            key_schema: state_fields(&key_fields),
            value_schema: state_fields(&state_field_list),
            left_fields: None,
        };
        check_state_schema(&dir, &schema, allow_key_rename)?;
        let stores = open_stores(checkpoint_root, operator_id, partitions, &store_conf)?;
        let slim_schema = slim_schema(&physical_input, &aggs);
        Self {
            operator_id,
            keys,
            key_fields,
            aggs,
            key_converter,
            state_converter,
            output_schema: Arc::new(out_schema),
            slim_schema,
            input_schema: physical_input.clone(),
            event_time_key,
            mode,
            partitions,
            stores,
            min_event_time_us: i64::MIN,
            time_index: TimeIndex::default(),
            sessions: None,
            late_rows: None,
        }
        .with_session_index()
    }

    fn with_session_index(mut self) -> Result<Self> {
        let Some(pos) = self
            .keys
            .iter()
            .position(|k| matches!(k, KeyPart::Session { .. }))
        else {
            return Ok(self);
        };
        let others: Vec<SortField> = self
            .key_fields
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != pos)
            .map(|(_, f)| SortField::new(f.data_type().clone()))
            .collect();
        let other_converter = if others.is_empty() {
            None
        } else {
            Some(RowConverter::new(others)?)
        };
        self.sessions = Some(SessionIndex {
            other_converter,
            by_other: None,
        });
        Ok(self)
    }

    /// True when the watermark bounds this operator's state (append/update evict by it).
    pub fn has_event_time_key(&self) -> bool {
        self.event_time_key.is_some()
    }

    /// Spark's `shouldRunAnotherBatch`: a no-data batch would emit or evict.
    pub fn should_run_another_batch(
        &self,
        batch_watermark_ms: i64,
        next_watermark_ms: i64,
    ) -> bool {
        self.event_time_key.is_some()
            && self.mode != OutputMode::Complete
            && next_watermark_ms > batch_watermark_ms
    }

    pub fn output_schema(&self) -> SchemaRef {
        self.output_schema.clone()
    }

    /// Runs batch `batch_id`: reads state version `batch_id`, commits `batch_id + 1`.
    pub fn process(
        &mut self,
        input: &[RecordBatch],
        input_schema: &SchemaRef,
        late_watermark_ms: i64,
        eviction_watermark_ms: i64,
        batch_id: u64,
    ) -> Result<AggregateOutput> {
        // Open every partition's store at version `batch_id` once for the whole batch.
        let mut providers = std::mem::take(&mut self.stores);
        let indexed = self.time_index.version.take() == Some(batch_id);
        let result = super::stateful::with_stores(&mut providers, batch_id, |stores| {
            if !indexed {
                self.rebuild_time_index(stores)?;
            }
            self.process_with(
                stores,
                input,
                input_schema,
                late_watermark_ms,
                eviction_watermark_ms,
            )
        });
        self.stores = providers;
        if result.is_ok() {
            self.time_index.version = Some(batch_id + 1);
        }
        result
    }

    fn process_with(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        input: &[RecordBatch],
        input_schema: &SchemaRef,
        late_watermark_ms: i64,
        eviction_watermark_ms: i64,
    ) -> Result<AggregateOutput> {
        let batch = concat_batches(input_schema, input)?;
        if self.sessions.is_some() {
            return self.process_sessions(stores, &batch, late_watermark_ms, eviction_watermark_ms);
        }
        let drop_late = self.event_time_key.is_some() && self.mode != OutputMode::Complete;
        let late_us = late_watermark_ms.saturating_mul(1000);

        // 1. Row instances: which input row feeds which key (sliding windows repeat rows).
        let n = batch.num_rows();
        let mut take_idx: Vec<u32> = Vec::with_capacity(n);
        let mut win: Option<(usize, Vec<i64>, Vec<i64>)> = None;
        let mut dropped = 0u64;
        // Input rows that reach no window at all (every instance late): the late-row output.
        let mut late_idx: Vec<u32> = Vec::new();
        let window_pos = self
            .keys
            .iter()
            .position(|k| matches!(k, KeyPart::Window { .. }));
        if let Some(pos) = window_pos {
            let KeyPart::Window {
                time,
                size,
                slide,
                start,
            } = &self.keys[pos]
            else {
                return Err(SluiceError::internal("window key"));
            };
            let ts = to_micros(&time.evaluate(&batch)?.into_array(n)?)?;
            let (mut starts, mut ends) = (Vec::with_capacity(n), Vec::with_capacity(n));
            let per_row = ((size + slide - 1) / slide).max(1);
            for i in 0..n {
                if ts.is_null(i) {
                    continue;
                }
                let t = ts.value(i);
                let last = last_window_start(t, *slide, *start);
                let (mut kept, mut late) = (false, false);
                for k in 0..per_row {
                    let s = last - k * slide;
                    let e = s + size;
                    if e <= t {
                        continue;
                    }
                    if drop_late && e <= late_us {
                        dropped += 1;
                        late = true;
                        continue;
                    }
                    kept = true;
                    take_idx.push(i as u32);
                    starts.push(s);
                    ends.push(e);
                }
                if late && !kept {
                    late_idx.push(i as u32);
                }
            }
            win = Some((pos, starts, ends));
        } else {
            let late_col = match (&self.event_time_key, drop_late) {
                (Some(EventTimeKey::Column(p)), true) => match &self.keys[*p] {
                    KeyPart::Expr(e) => Some(to_micros(&e.evaluate(&batch)?.into_array(n)?)?),
                    KeyPart::Window { .. } | KeyPart::Session { .. } => None,
                },
                _ => None,
            };
            for i in 0..n {
                if let Some(ts) = &late_col {
                    if ts.is_valid(i) && ts.value(i) <= late_us {
                        dropped += 1;
                        late_idx.push(i as u32);
                        continue;
                    }
                }
                take_idx.push(i as u32);
            }
        }
        self.keep_late(&batch, late_idx)?;
        let take_idx = UInt32Array::from(take_idx);
        let rows_in = take_idx.len();

        // 2. Key columns for every row instance.
        let mut key_arrays: Vec<ArrayRef> = Vec::with_capacity(self.keys.len());
        for (i, k) in self.keys.iter().enumerate() {
            match k {
                KeyPart::Expr(e) => {
                    let a = e.evaluate(&batch)?.into_array(n)?;
                    key_arrays.push(take(&a, &take_idx, None)?);
                }
                KeyPart::Window { .. } => {
                    let (_, starts, ends) = win
                        .take()
                        .filter(|(p, _, _)| *p == i)
                        .ok_or_else(|| SluiceError::internal("window"))?;
                    key_arrays.push(window_array(starts, ends, None));
                }
                KeyPart::Session { .. } => {
                    return Err(SluiceError::internal("session key in the window path"))
                }
            }
        }

        // 3. Each row instance goes to its key's partition (Spark's shuffle); the partitions
        //    run at the same time, one thread each, as Spark's tasks do.
        let key_rows: Option<Rows> = match &self.key_converter {
            Some(c) => Some(c.convert_columns(&key_arrays)?),
            None => None,
        };
        let mut part_rows: Vec<Vec<u32>> = vec![Vec::new(); self.partitions];
        match &key_rows {
            Some(rows) => {
                for r in 0..rows_in {
                    part_rows[partition_of(rows.row(r).data(), self.partitions)].push(r as u32);
                }
            }
            None => part_rows[partition_of(&[], self.partitions)] = (0..rows_in as u32).collect(),
        }
        let instances = arrow::compute::take_record_batch(&self.slim(&batch)?, &take_idx)?;
        let times = match (self.event_time_key, self.mode) {
            (Some(et), OutputMode::Update | OutputMode::Append) => {
                Some(self.key_event_times(&key_arrays, et)?)
            }
            _ => None,
        };
        let evict_us = eviction_watermark_ms.saturating_mul(1000);
        let mut index = std::mem::take(&mut self.time_index.parts);
        index.resize_with(self.partitions, BTreeMap::new);
        let shared = BatchInstances {
            rows: &instances,
            key_arrays: &key_arrays,
            key_rows: key_rows.as_ref(),
            times: times.as_ref(),
            evict_us,
        };
        let this = &*self;
        let results: Vec<Result<PartitionOutput>> = if self.partitions == 1 {
            vec![this.process_partition(0, &mut *stores[0], &mut index[0], &shared, &part_rows[0])]
        } else {
            std::thread::scope(|scope| {
                let mut jobs = stores
                    .iter_mut()
                    .zip(index.iter_mut())
                    .zip(part_rows.iter())
                    .enumerate();
                let first = jobs.next();
                let shared = &shared;
                let handles: Vec<_> = jobs
                    .map(|(p, ((store, ix), rows))| {
                        scope.spawn(move || {
                            this.process_partition(p, &mut **store, ix, shared, rows)
                        })
                    })
                    .collect();
                let mut out = Vec::with_capacity(self.partitions);
                if let Some((p, ((store, ix), rows))) = first {
                    out.push(this.process_partition(p, &mut **store, ix, shared, rows));
                }
                out.extend(handles.into_iter().map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(SluiceError::internal(
                            "an aggregation partition thread panicked",
                        ))
                    })
                }));
                out
            })
        };
        self.time_index.parts = index;
        let (mut updated, mut removed, mut updates_ms, mut removals_ms) = (0, 0, 0, 0);
        let mut outputs = Vec::new();
        for r in results {
            let r = r?;
            updated += r.updated;
            removed += r.removed;
            updates_ms += r.updates_ms;
            removals_ms += r.removals_ms;
            outputs.extend(r.rows);
        }
        let rows = match self.mode {
            OutputMode::Complete => self.all_rows(stores)?,
            _ => concat_batches(&self.output_schema, &outputs)?,
        };

        // 4. Commit every partition's store (a delta per partition per batch).
        self.commit_all(
            stores,
            (updated, removed, dropped),
            (updates_ms, removals_ms),
            rows,
        )
    }

    /// Keeps `batch`'s rows `idx` for the late-row side output, when it is on.
    fn keep_late(&mut self, batch: &RecordBatch, idx: Vec<u32>) -> Result<()> {
        if let (Some(kept), false) = (&mut self.late_rows, idx.is_empty()) {
            kept.push(arrow::compute::take_record_batch(
                batch,
                &UInt32Array::from(idx),
            )?);
        }
        Ok(())
    }

    /// `batch` with the columns no aggregate reads replaced by `Null` columns (no copying).
    fn slim(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let n = batch.num_rows();
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .zip(self.slim_schema.fields())
            .map(|(c, f)| {
                if f.data_type() == &arrow::datatypes::DataType::Null {
                    Arc::new(arrow::array::NullArray::new(n)) as ArrayRef
                } else {
                    c.clone()
                }
            })
            .collect();
        Ok(RecordBatch::try_new_with_options(
            self.slim_schema.clone(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }

    /// One partition's share of a batch: reads the stored states of its touched keys, merges
    /// and updates them with its rows, writes them back, then emits and evicts by output mode.
    fn process_partition(
        &self,
        p: usize,
        store: &mut dyn StateStore,
        index: &mut BTreeMap<i64, Vec<Vec<u8>>>,
        batch: &BatchInstances<'_>,
        rows: &[u32],
    ) -> Result<PartitionOutput> {
        let t_updates = Instant::now();
        // Group this partition's row instances by key.
        let mut group_of: HashMap<&[u8], usize, foldhash::fast::RandomState> = HashMap::default();
        let mut group_indices: Vec<usize> = Vec::with_capacity(rows.len());
        let mut first_row: Vec<u32> = Vec::new();
        let mut group_keys: Vec<&[u8]> = Vec::new();
        match batch.key_rows {
            Some(key_rows) => {
                for r in rows {
                    let bytes: &[u8] = key_rows.row(*r as usize).data();
                    let next = group_keys.len();
                    let g = *group_of.entry(bytes).or_insert_with(|| {
                        first_row.push(*r);
                        group_keys.push(bytes);
                        next
                    });
                    group_indices.push(g);
                }
            }
            // Global aggregation: one key, present every batch (Spark emits it every batch).
            None if p == partition_of(&[], self.partitions) => {
                group_keys.push(&[]);
                group_indices.resize(rows.len(), 0);
            }
            None => {}
        }
        let n_groups = group_keys.len();
        let mut out = PartitionOutput {
            updated: n_groups as u64,
            ..Default::default()
        };
        let mut finals = Vec::new();
        let mut direct: Vec<u32> = Vec::new();
        if n_groups > 0 {
            // Stored states of the touched keys.
            let mut old_groups: Vec<usize> = Vec::new();
            let old_states: Vec<ArrayRef> = {
                let mut old: Vec<&[u8]> = Vec::new();
                for (g, k) in group_keys.iter().enumerate() {
                    if let Some(v) = store.get(k) {
                        old_groups.push(g);
                        old.push(v);
                    }
                }
                if old.is_empty() {
                    Vec::new()
                } else {
                    let parser = self.state_converter.parser();
                    self.state_converter
                        .convert_rows(old.iter().map(|b| parser.parse(b)))?
                }
            };
            // Merge stored states and update with this partition's rows.
            let sub =
                arrow::compute::take_record_batch(batch.rows, &UInt32Array::from(rows.to_vec()))?;
            let (new_states, f) =
                self.accumulate(&old_states, &old_groups, &sub, &group_indices, n_groups)?;
            finals = f;
            // A new key whose event time is already behind the eviction watermark would be
            // written and removed again in this batch: it is emitted straight away instead
            // (and counted as removed), never touching the store.
            let mut is_old = vec![false; n_groups];
            for g in &old_groups {
                is_old[*g] = true;
            }
            if let Some(times) = batch.times {
                for g in 0..n_groups {
                    let r = first_row[g] as usize;
                    if !is_old[g] && times.is_valid(r) && times.value(r) <= batch.evict_us {
                        direct.push(g as u32);
                    }
                }
            }
            let mut is_direct = vec![false; n_groups];
            for g in &direct {
                is_direct[*g as usize] = true;
            }
            // Write the new states; index the new keys by event time.
            let state_rows = self.state_converter.convert_columns(&new_states)?;
            for (g, k) in group_keys.iter().enumerate() {
                if !is_direct[g] {
                    store.put(k, state_rows.row(g).as_ref());
                }
            }
            if let Some(times) = batch.times {
                for (g, key) in group_keys.iter().enumerate() {
                    let r = first_row[g] as usize;
                    if !is_old[g] && !is_direct[g] && times.is_valid(r) {
                        index.entry(times.value(r)).or_default().push(key.to_vec());
                    }
                }
            }
        }
        out.updates_ms = t_updates.elapsed().as_millis() as i64;

        // Output and eviction, by output mode.
        let t_removals = Instant::now();
        match self.mode {
            OutputMode::Update => {
                if n_groups > 0 {
                    let keys: Vec<ArrayRef> = match batch.key_rows {
                        Some(_) => {
                            let first = UInt32Array::from(first_row);
                            batch
                                .key_arrays
                                .iter()
                                .map(|a| take(a, &first, None))
                                .collect::<Result<_, _>>()?
                        }
                        None => vec![],
                    };
                    out.rows = Some(self.output_batch(keys, finals)?);
                }
                if self.event_time_key.is_some() {
                    out.removed = self.evict_partition(store, index, batch.evict_us, false)?.1
                        + direct.len() as u64;
                }
            }
            OutputMode::Append => {
                let (rows, n) = self.evict_partition(store, index, batch.evict_us, true)?;
                out.removed = n + direct.len() as u64;
                out.rows = rows;
                if !direct.is_empty() {
                    let idx = UInt32Array::from(direct);
                    let first = take(&UInt32Array::from(first_row), &idx, None)?;
                    let keys: Vec<ArrayRef> = batch
                        .key_arrays
                        .iter()
                        .map(|a| take(a, &first, None))
                        .collect::<Result<_, _>>()?;
                    let fin: Vec<ArrayRef> = finals
                        .iter()
                        .map(|a| take(a, &idx, None))
                        .collect::<Result<_, _>>()?;
                    let now = self.output_batch(keys, fin)?;
                    out.rows = Some(match out.rows.take() {
                        Some(evicted) => concat_batches(&self.output_schema, &[evicted, now])?,
                        None => now,
                    });
                }
            }
            OutputMode::Complete => {}
        }
        out.removals_ms = t_removals.elapsed().as_millis() as i64;
        Ok(out)
    }

    /// For each aggregate: merges the stored states of `old_groups` and updates with the `rows`
    /// (row `i` belongs to group `group_of_row[i]`). Returns the new intermediate states (all
    /// aggregates' state fields, in order) and the final values, one per group.
    fn accumulate(
        &self,
        old_states: &[ArrayRef],
        old_groups: &[usize],
        rows: &RecordBatch,
        group_of_row: &[usize],
        n_groups: usize,
    ) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>)> {
        let n = rows.num_rows();
        if n_groups == 0 {
            // Nothing touched (some accumulators cannot emit zero groups).
            let mut states = Vec::new();
            let mut finals = Vec::new();
            for a in &self.aggs {
                for f in a.expr.state_fields()? {
                    states.push(arrow::array::new_empty_array(f.data_type()));
                }
                finals.push(arrow::array::new_empty_array(a.expr.field().data_type()));
            }
            return Ok((states, finals));
        }
        let ident: Vec<usize> = (0..n_groups).collect();
        let mut new_states: Vec<ArrayRef> = Vec::new();
        let mut finals: Vec<ArrayRef> = Vec::new();
        let mut offset = 0;
        for a in &self.aggs {
            let mut acc = a.accumulator()?;
            if !old_groups.is_empty() {
                acc.merge_batch(
                    &old_states[offset..offset + a.n_state],
                    old_groups,
                    n_groups,
                )?;
            }
            // Arguments, then the ORDER BY expressions of an ordered aggregate (what DataFusion's
            // aggregate execution passes to `update_batch`).
            let exprs = a.expr.all_expressions();
            let args: Vec<ArrayRef> = exprs
                .args
                .iter()
                .chain(exprs.order_by_exprs.iter())
                .map(|e| -> Result<ArrayRef> { Ok(e.evaluate(rows)?.into_array(n)?) })
                .collect::<Result<_>>()?;
            let filter: Option<BooleanArray> = match &a.filter {
                Some(f) => Some(
                    f.evaluate(rows)?
                        .into_array(n)?
                        .as_any()
                        .downcast_ref::<BooleanArray>()
                        .cloned()
                        .ok_or_else(|| SluiceError::internal("filter"))?,
                ),
                None => None,
            };
            acc.update_batch(&args, group_of_row, filter.as_ref(), n_groups)?;
            let st = acc.state(EmitTo::All)?;
            let mut fin = a.accumulator()?;
            fin.merge_batch(&st, &ident, n_groups)?;
            finals.push(fin.evaluate(EmitTo::All)?);
            new_states.extend(st);
            offset += a.n_state;
        }
        Ok((new_states, finals))
    }

    /// Event time (µs) of each key row.
    fn key_event_times(
        &self,
        key_arrays: &[ArrayRef],
        et: EventTimeKey,
    ) -> Result<TimestampMicrosecondArray> {
        match et {
            EventTimeKey::WindowEnd(p) => {
                let s = key_arrays[p]
                    .as_any()
                    .downcast_ref::<StructArray>()
                    .ok_or_else(|| SluiceError::internal("window key is not a struct"))?;
                to_micros(s.column(1))
            }
            EventTimeKey::Column(p) => to_micros(&key_arrays[p]),
        }
    }

    /// Rebuilds the event-time index from the state (one scan; the first batch of a run).
    fn rebuild_time_index(&mut self, stores: &[&mut dyn StateStore]) -> Result<()> {
        self.time_index.parts = vec![BTreeMap::new(); stores.len()];
        let (Some(et), Some(conv), None) =
            (self.event_time_key, &self.key_converter, &self.sessions)
        else {
            return Ok(());
        };
        if self.mode == OutputMode::Complete {
            return Ok(());
        }
        for (p, store) in stores.iter().enumerate() {
            let keys: Vec<Vec<u8>> = store.iter().map(|(k, _)| k.to_vec()).collect();
            if keys.is_empty() {
                continue;
            }
            let kparser = conv.parser();
            let key_arrays = conv.convert_rows(keys.iter().map(|k| kparser.parse(k)))?;
            let times = self.key_event_times(&key_arrays, et)?;
            for (i, key) in keys.into_iter().enumerate() {
                if times.is_valid(i) {
                    self.time_index.parts[p]
                        .entry(times.value(i))
                        .or_default()
                        .push(key);
                }
            }
        }
        Ok(())
    }

    /// Removes keys whose event time is at or before `evict_us`; with `emit`, returns them as rows.
    fn evict(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        evict_us: i64,
        emit: bool,
    ) -> Result<(Option<RecordBatch>, u64)> {
        let Some(et) = self.event_time_key else {
            return Ok((None, 0));
        };

        if evict_us < self.min_event_time_us {
            return Ok((None, 0));
        }
        let Some(conv) = &self.key_converter else {
            return Ok((None, 0));
        };
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut values: Vec<Vec<u8>> = Vec::new();
        for store in stores.iter() {
            for (k, v) in store.iter() {
                keys.push(k.to_vec());
                values.push(v.to_vec());
            }
        }
        if keys.is_empty() {
            self.min_event_time_us = i64::MAX;
            return Ok((None, 0));
        }
        let kparser = conv.parser();
        let key_arrays = conv.convert_rows(keys.iter().map(|k| kparser.parse(k)))?;
        let times = self.key_event_times(&key_arrays, et)?;
        let mut expired: Vec<u32> = Vec::new();
        let mut min_left = i64::MAX;
        for i in 0..keys.len() {
            if times.is_valid(i) && times.value(i) <= evict_us {
                expired.push(i as u32);
            } else if times.is_valid(i) {
                min_left = min_left.min(times.value(i));
            }
        }
        self.min_event_time_us = min_left;
        let session_others = self.session_other_keys(&key_arrays)?;
        for i in &expired {
            let k = &keys[*i as usize];
            let p = match &session_others {
                Some(others) => partition_of(&others[*i as usize], self.partitions),
                None => partition_of(k, self.partitions),
            };
            stores[p].remove(k);
            if let (
                Some(others),
                Some(SessionIndex {
                    by_other: Some(map),
                    ..
                }),
            ) = (&session_others, &mut self.sessions)
            {
                if let Some(list) = map.get_mut(&others[*i as usize]) {
                    list.retain(|(_, _, full)| full != k);
                    if list.is_empty() {
                        map.remove(&others[*i as usize]);
                    }
                }
            }
        }
        let n = expired.len() as u64;
        if !emit || expired.is_empty() {
            return Ok((None, n));
        }
        let idx = UInt32Array::from(expired);
        let keys_out: Vec<ArrayRef> = key_arrays
            .iter()
            .map(|a| take(a, &idx, None))
            .collect::<Result<_, _>>()?;
        let sparser = self.state_converter.parser();
        let chosen: Vec<&Vec<u8>> = idx.values().iter().map(|i| &values[*i as usize]).collect();
        let states = self
            .state_converter
            .convert_rows(chosen.iter().map(|b| sparser.parse(b)))?;
        let finals = self.evaluate_states(&states, chosen.len())?;
        Ok((Some(self.output_batch(keys_out, finals)?), n))
    }

    /// Evicts one partition's keys with event time at or before `evict_us` through its
    /// event-time index (only the expired keys are touched); with `emit`, returns them as rows.
    fn evict_partition(
        &self,
        store: &mut dyn StateStore,
        index: &mut BTreeMap<i64, Vec<Vec<u8>>>,
        evict_us: i64,
        emit: bool,
    ) -> Result<(Option<RecordBatch>, u64)> {
        let (Some(conv), Some(_)) = (&self.key_converter, self.event_time_key) else {
            return Ok((None, 0));
        };
        let kept = match evict_us.checked_add(1) {
            Some(next) => index.split_off(&next),
            None => BTreeMap::new(),
        };
        let expired_map = std::mem::replace(index, kept);
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut values: Vec<Vec<u8>> = Vec::new();
        for key in expired_map.into_values().flatten() {
            if emit {
                match store.get(&key) {
                    Some(v) => values.push(v.to_vec()),
                    None => continue,
                }
            }
            store.remove(&key);
            keys.push(key);
        }
        let n = keys.len() as u64;
        if !emit || keys.is_empty() {
            return Ok((None, n));
        }
        let kparser = conv.parser();
        let keys_out = conv.convert_rows(keys.iter().map(|k| kparser.parse(k)))?;
        let sparser = self.state_converter.parser();
        let states = self
            .state_converter
            .convert_rows(values.iter().map(|b| sparser.parse(b)))?;
        let finals = self.evaluate_states(&states, values.len())?;
        Ok((Some(self.output_batch(keys_out, finals)?), n))
    }

    /// For session windows: the encoded other-key bytes of each decoded key row.
    fn session_other_keys(&self, key_arrays: &[ArrayRef]) -> Result<Option<Vec<Vec<u8>>>> {
        let Some(idx) = &self.sessions else {
            return Ok(None);
        };
        let pos = self
            .keys
            .iter()
            .position(|k| matches!(k, KeyPart::Session { .. }))
            .unwrap_or(0);
        let n = key_arrays.first().map(|a| a.len()).unwrap_or(0);
        match &idx.other_converter {
            None => Ok(Some(vec![Vec::new(); n])),
            Some(conv) => {
                let cols: Vec<ArrayRef> = key_arrays
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != pos)
                    .map(|(_, a)| a.clone())
                    .collect();
                let rows = conv.convert_columns(&cols)?;
                Ok(Some((0..n).map(|i| rows.row(i).data().to_vec()).collect()))
            }
        }
    }

    /// Session windows (Spark's `SessionWindowStateStoreRestore/SaveExec`): each row opens a
    /// session `[ts, ts + gap)`; overlapping sessions of the same other keys merge, with the
    /// sessions already in state. A row next to a session that was already emitted (and
    /// evicted) starts a new session.
    fn process_sessions(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        batch: &RecordBatch,
        late_watermark_ms: i64,
        eviction_watermark_ms: i64,
    ) -> Result<AggregateOutput> {
        let n = batch.num_rows();
        let pos = self
            .keys
            .iter()
            .position(|k| matches!(k, KeyPart::Session { .. }))
            .ok_or_else(|| SluiceError::internal("session key"))?;
        let KeyPart::Session { time, gap } = &self.keys[pos] else {
            return Err(SluiceError::internal("session key"));
        };
        let gap = *gap;
        let ts = to_micros(&time.evaluate(batch)?.into_array(n)?)?;
        let drop_late = self.event_time_key.is_some() && self.mode != OutputMode::Complete;
        let late_us = late_watermark_ms.saturating_mul(1000);
        let mut keep: Vec<u32> = Vec::with_capacity(n);
        let mut dropped = 0u64;
        let mut late_idx: Vec<u32> = Vec::new();
        for i in 0..n {
            if ts.is_null(i) {
                continue;
            }
            if drop_late && ts.value(i) + gap <= late_us {
                dropped += 1;
                late_idx.push(i as u32);
                continue;
            }
            keep.push(i as u32);
        }
        self.keep_late(batch, late_idx)?;
        let keep = UInt32Array::from(keep);
        let m = keep.len();
        let row_ts: Vec<i64> = keep
            .values()
            .iter()
            .map(|i| ts.value(*i as usize))
            .collect();
        // Other key columns of the kept rows.
        let mut other_arrays: Vec<ArrayRef> = Vec::new();
        for (i, k) in self.keys.iter().enumerate() {
            if i == pos {
                continue;
            }
            let KeyPart::Expr(e) = k else {
                return Err(SluiceError::not_supported_yet(
                    "a session window together with another window",
                ));
            };
            other_arrays.push(take(&e.evaluate(batch)?.into_array(n)?, &keep, None)?);
        }
        let idx = self
            .sessions
            .as_ref()
            .ok_or_else(|| SluiceError::internal("session index"))?;
        let other_bytes: Vec<Vec<u8>> = match &idx.other_converter {
            None => vec![Vec::new(); m],
            Some(c) => {
                let rows = c.convert_columns(&other_arrays)?;
                (0..m).map(|i| rows.row(i).data().to_vec()).collect()
            }
        };
        // Build the index of sessions in state on the first batch of this run.
        if self.sessions.as_ref().is_some_and(|s| s.by_other.is_none()) {
            let mut keys: Vec<Vec<u8>> = Vec::new();
            for store in stores.iter() {
                for (k, _) in store.iter() {
                    keys.push(k.to_vec());
                }
            }
            let mut map: HashMap<Vec<u8>, SessionList> = HashMap::new();
            if let (Some(conv), false) = (&self.key_converter, keys.is_empty()) {
                let parser = conv.parser();
                let arrays = conv.convert_rows(keys.iter().map(|k| parser.parse(k)))?;
                let others = self.session_other_keys(&arrays)?.unwrap_or_default();
                let w = arrays[pos]
                    .as_any()
                    .downcast_ref::<StructArray>()
                    .ok_or_else(|| SluiceError::internal("session struct"))?;
                let (starts, ends) = (to_micros(w.column(0))?, to_micros(w.column(1))?);
                for (i, k) in keys.into_iter().enumerate() {
                    map.entry(others[i].clone()).or_default().push((
                        starts.value(i),
                        ends.value(i),
                        k,
                    ));
                }
            }
            if let Some(s) = &mut self.sessions {
                s.by_other = Some(map);
            }
        }
        // Rows per other key, then merge with the stored sessions.
        let mut rows_of: HashMap<&[u8], Vec<usize>> = HashMap::new();
        for (r, b) in other_bytes.iter().enumerate() {
            rows_of.entry(b.as_slice()).or_default().push(r);
        }
        struct Merged {
            start: i64,
            end: i64,
            rep_row: usize,
            rows: Vec<usize>,
            old: Vec<Vec<u8>>,
            other: Vec<u8>,
        }
        let mut merged: Vec<Merged> = Vec::new();
        let mut old_states: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut group_of_row: Vec<usize> = vec![0; m];
        let by_other = self
            .sessions
            .as_ref()
            .and_then(|s| s.by_other.as_ref())
            .ok_or_else(|| SluiceError::internal("session index"))?;
        let mut other_keys_sorted: Vec<&[u8]> = rows_of.keys().copied().collect();
        other_keys_sorted.sort();
        for other in other_keys_sorted {
            let rows = &rows_of[other];
            // (start, end, Some(row) | None for a stored session with its full key)
            #[allow(clippy::type_complexity)]
            let mut intervals: Vec<(i64, i64, Option<usize>, Option<&Vec<u8>>)> = rows
                .iter()
                .map(|r| (row_ts[*r], row_ts[*r] + gap, Some(*r), None))
                .collect();
            if let Some(existing) = by_other.get(other) {
                intervals.extend(existing.iter().map(|(s, e, k)| (*s, *e, None, Some(k))));
            }
            intervals.sort_by_key(|(s, e, _, _)| (*s, *e));
            let mut cur: Option<Merged> = None;
            for (s, e, row, old) in intervals {
                match &mut cur {
                    Some(c) if s < c.end => {
                        c.end = c.end.max(e);
                        if let Some(r) = row {
                            c.rows.push(r);
                        }
                        if let Some(k) = old {
                            c.old.push(k.clone());
                        }
                    }
                    _ => {
                        if let Some(c) = cur.take() {
                            merged.push(c);
                        }
                        cur = Some(Merged {
                            start: s,
                            end: e,
                            rep_row: row.unwrap_or(usize::MAX),
                            rows: row.into_iter().collect(),
                            old: old.into_iter().cloned().collect(),
                            other: other.to_vec(),
                        });
                    }
                }
            }
            if let Some(c) = cur.take() {
                merged.push(c);
            }
        }
        // Sessions without new rows are unchanged: leave them in state as they are.
        merged.retain(|g| !g.rows.is_empty());
        for g in &mut merged {
            if g.rep_row == usize::MAX {
                g.rep_row = g.rows[0];
            }
        }
        let n_groups = merged.len();
        for (gi, g) in merged.iter().enumerate() {
            for r in &g.rows {
                group_of_row[*r] = gi;
            }
            let p = partition_of(&g.other, self.partitions);
            for k in &g.old {
                if let Some(v) = stores[p].get(k) {
                    old_states.push((gi, v.to_vec()));
                }
            }
        }
        // Key arrays of the merged sessions.
        let rep = UInt32Array::from(merged.iter().map(|g| g.rep_row as u32).collect::<Vec<_>>());
        let mut key_arrays: Vec<ArrayRef> = Vec::new();
        let mut others_iter = other_arrays.iter();
        for i in 0..self.keys.len() {
            if i == pos {
                key_arrays.push(window_array(
                    merged.iter().map(|g| g.start).collect(),
                    merged.iter().map(|g| g.end).collect(),
                    None,
                ));
            } else if let Some(a) = others_iter.next() {
                key_arrays.push(take(a, &rep, None)?);
            }
        }
        // Accumulate: stored states of merged sessions + the rows.
        let old_groups: Vec<usize> = old_states.iter().map(|(g, _)| *g).collect();
        let parser = self.state_converter.parser();
        let old_arrays: Vec<ArrayRef> = if old_states.is_empty() {
            Vec::new()
        } else {
            self.state_converter
                .convert_rows(old_states.iter().map(|(_, b)| parser.parse(b)))?
        };
        let kept_batch = arrow::compute::take_record_batch(batch, &keep)?;
        let (new_states, finals) = self.accumulate(
            &old_arrays,
            &old_groups,
            &kept_batch,
            &group_of_row,
            n_groups,
        )?;
        // Replace the merged sessions in state.
        let conv = self
            .key_converter
            .as_ref()
            .ok_or_else(|| SluiceError::internal("session keys"))?;
        let full_keys = conv.convert_columns(&key_arrays)?;
        let state_rows = self.state_converter.convert_columns(&new_states)?;
        let index = self
            .sessions
            .as_mut()
            .and_then(|s| s.by_other.as_mut())
            .ok_or_else(|| SluiceError::internal("session index"))?;
        for (gi, g) in merged.iter().enumerate() {
            let p = partition_of(&g.other, self.partitions);
            let list = index.entry(g.other.clone()).or_default();
            for k in &g.old {
                stores[p].remove(k);
                list.retain(|(_, _, full)| full != k);
            }
            let full = full_keys.row(gi).data().to_vec();
            stores[p].put(&full, state_rows.row(gi).data());
            list.push((g.start, g.end, full));
            self.min_event_time_us = self.min_event_time_us.min(g.end);
        }
        let updated = n_groups as u64;
        let evict_us = eviction_watermark_ms.saturating_mul(1000);
        let t_removals = Instant::now();
        let (rows, removed) = match self.mode {
            OutputMode::Complete => (self.all_rows(stores)?, 0),
            _ => {
                let (out, removed) = self.evict(stores, evict_us, true)?;
                (
                    out.unwrap_or_else(|| RecordBatch::new_empty(self.output_schema.clone())),
                    removed,
                )
            }
        };
        let _ = finals;
        let removals_ms = t_removals.elapsed().as_millis() as i64;
        self.commit_all(stores, (updated, removed, dropped), (0, removals_ms), rows)
    }

    /// Commits every partition's store and reports: `counts` = (updated, removed, dropped by
    /// watermark), `timings` = (all updates ms, all removals ms).
    fn commit_all(
        &self,
        stores: &mut [&mut dyn StateStore],
        counts: (u64, u64, u64),
        timings: (i64, i64),
        rows: RecordBatch,
    ) -> Result<AggregateOutput> {
        let (updated, removed, dropped) = counts;
        let t = Instant::now();
        let (total, memory) = super::stateful::commit_stores(stores)?;
        let commit_ms = t.elapsed().as_millis() as i64;
        Ok(AggregateOutput {
            rows,
            progress: StateOperatorProgress {
                operator_name: if self.sessions.is_some() {
                    "sessionWindowStateStoreSaveExec".into()
                } else {
                    "stateStoreSave".into()
                },
                num_rows_total: total as i64,
                num_rows_updated: updated as i64,
                num_rows_removed: removed as i64,
                all_updates_time_ms: timings.0,
                all_removals_time_ms: timings.1,
                commit_time_ms: commit_ms,
                num_rows_dropped_by_watermark: dropped as i64,
                memory_used_bytes: memory as i64,
                num_shuffle_partitions: self.partitions as i64,
                num_state_store_instances: self.partitions as i64,
                custom_metrics: Default::default(),
            },
        })
    }

    /// Every key in state with its final values (complete mode).
    fn all_rows(&self, stores: &[&mut dyn StateStore]) -> Result<RecordBatch> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut values: Vec<Vec<u8>> = Vec::new();
        for store in stores {
            for (k, v) in store.iter() {
                keys.push(k.to_vec());
                values.push(v.to_vec());
            }
        }
        if keys.is_empty() {
            return Ok(RecordBatch::new_empty(self.output_schema.clone()));
        }
        let key_arrays = match &self.key_converter {
            Some(conv) => {
                let kparser = conv.parser();
                conv.convert_rows(keys.iter().map(|k| kparser.parse(k)))?
            }
            None => vec![],
        };
        let sparser = self.state_converter.parser();
        let states = self
            .state_converter
            .convert_rows(values.iter().map(|b| sparser.parse(b)))?;
        let finals = self.evaluate_states(&states, values.len())?;
        self.output_batch(key_arrays, finals)
    }

    fn evaluate_states(&self, states: &[ArrayRef], n: usize) -> Result<Vec<ArrayRef>> {
        let ident: Vec<usize> = (0..n).collect();
        let mut out = Vec::new();
        let mut offset = 0;
        for a in &self.aggs {
            let mut acc = a.accumulator()?;
            acc.merge_batch(&states[offset..offset + a.n_state], &ident, n)?;
            out.push(acc.evaluate(EmitTo::All)?);
            offset += a.n_state;
        }
        Ok(out)
    }

    fn output_batch(&self, keys: Vec<ArrayRef>, finals: Vec<ArrayRef>) -> Result<RecordBatch> {
        let mut cols = keys;
        cols.extend(finals);
        let fields = self.output_schema.fields();
        let cols: Vec<ArrayRef> = cols
            .into_iter()
            .zip(fields.iter())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    cast(&c, f.data_type())
                }
            })
            .collect::<Result<_, _>>()?;
        // Fields may be declared non-nullable by the planner while the batch has nulls; use the
        // arrays' own nullability.
        let schema = Arc::new(Schema::new(
            fields
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        Ok(RecordBatch::try_new(schema, cols)?)
    }

    /// The state directory of this operator.
    pub fn state_dir(checkpoint_root: &Path, operator_id: u32) -> PathBuf {
        checkpoint_root.join("state").join(operator_id.to_string())
    }
}

/// True when the aggregation groups by a watermarked column or a window over one (Spark's
/// condition for append mode, late-row dropping and eviction).
pub fn has_event_time_key(agg: &Aggregate) -> bool {
    let schema = agg.input.schema();
    agg.group_expr.iter().any(|g| match WindowSpec::of(g) {
        Ok(Some(WindowSpec::Time { time, .. })) | Ok(Some(WindowSpec::Session { time, .. })) => {
            is_watermarked(&time, schema)
        }
        _ => is_watermarked(g, schema),
    })
}

/// True when the aggregation groups by `session_window(..)`.
pub fn has_session_window(agg: &Aggregate) -> bool {
    agg.group_expr
        .iter()
        .any(|g| matches!(WindowSpec::of(g), Ok(Some(WindowSpec::Session { .. }))))
}

/// True when `expr` is a column carrying the watermark metadata (or a window over one).
fn is_watermarked(expr: &Expr, schema: &DFSchema) -> bool {
    let e = match expr {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    match e {
        Expr::Column(c) => schema
            .field_from_column(c)
            .map(|f| f.metadata().contains_key(WATERMARK_DELAY_KEY))
            .unwrap_or(false),
        Expr::Cast(c) => is_watermarked(&c.expr, schema),
        _ => false,
    }
}

impl StatefulOperator for StreamingAggregate {
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

    fn process(
        &mut self,
        mut inputs: Vec<Vec<RecordBatch>>,
        late_watermark_ms: i64,
        eviction_watermark_ms: i64,
        batch_id: u64,
    ) -> Result<(RecordBatch, StateOperatorProgress)> {
        let input = inputs.pop().unwrap_or_default();
        let schema = self.input_schema.clone();
        if let Some(kept) = &mut self.late_rows {
            kept.clear();
        }
        let out = StreamingAggregate::process(
            self,
            &input,
            &schema,
            late_watermark_ms,
            eviction_watermark_ms,
            batch_id,
        )?;
        Ok((out.rows, out.progress))
    }
    fn should_run_another_batch(&self, batch_watermark_ms: i64, next_watermark_ms: i64) -> bool {
        StreamingAggregate::should_run_another_batch(self, batch_watermark_ms, next_watermark_ms)
    }
}
