//! Stream-stream joins (Spark's `StreamingSymmetricHashJoinExec`).
//!
//! Both sides keep their rows in state, keyed by the equi-join key. Each batch, new left rows
//! join the right side's state, then new right rows join the left side's state (which now holds
//! the new left rows), so every pair matches exactly once; the join's non-equi condition is
//! evaluated by DataFusion's physical expression over the candidate pairs.
//!
//! State is bounded by the watermark through the join condition (Spark's state watermarks): a
//! conjunct `L + a (>=|>|<=|<) R + b` between a left and a right column, where the column of the
//! *other* side is that side's event-time column, bounds how old a stored row can be and still
//! match a future row of the other side (future rows are after the watermark). Rows behind
//! that bound are evicted; in an outer join, evicted rows that never matched are emitted with
//! nulls for the other side — so they appear only once the watermark guarantees no match can
//! come. An equality with a watermarked column of the other side (Spark's watermark in the join
//! keys) bounds a side too: `L.ts = R.ts` evicts rows with `ts <= watermark`, and equal windows
//! (`p.w = a.w` of window columns, or `window(b.ts, ..) = m.w` computed in the condition) evict
//! rows whose window `end <= watermark`, as a future row's window ends after its event time. A
//! side without such a bound keeps its rows forever (allowed for inner joins, as in Spark).
//!
//! The state is read into memory once per run (`JoinIndex`: rows by join key, and by the time
//! their bound is judged on); each batch then writes only what it changed to the state stores:
//! the rows it added, the rows whose `matched` flag it set, and the rows it evicted.
//!
//! `bounds` finds the state bounds in the condition; `index` holds the state in memory.

mod bounds;
mod index;

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::concat_batches;
use arrow::datatypes::{Field, SchemaRef};
use arrow::row::Rows;
use datafusion::common::DFSchema;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Join, JoinType};
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};

pub(crate) use self::bounds::check_stream_stream_join;
use self::bounds::{join_state_bounds, term_times, with_equi_keys, StateBound};
use self::index::JoinIndex;
use super::stateful::context::StateLocation;
use super::stateful::event_time::{event_time_column, window_end_micros};
use super::stateful::{
    nullable, partition_of, BatchContext, OperatorOutput, PartitionedStores, StageInput, StateInfo,
    StatefulOperator,
};
use crate::error::{Result, SluiceError};
use crate::progress::StateOperatorProgress;
use crate::state::indexed::Versioned;
use crate::state::layout::join::{JoinLayout, JoinSide};
use crate::state::schema::{state_fields, StateSchema};
use crate::state::StateStore;
use crate::types::{OperatorId, WatermarkMs};

/// The stream-stream join operator.
pub(crate) struct StreamingJoin {
    operator_id: OperatorId,
    join_type: JoinType,
    left_keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Per key: null-safe (`<=>`), so a null key matches a null key.
    null_safe: Vec<bool>,
    right_keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The state's layout: the join key and each side's rows.
    layout: JoinLayout,
    /// Where the state is, for errors.
    location: StateLocation,
    filter: Option<Arc<dyn PhysicalExpr>>,
    left_schema: SchemaRef,
    right_schema: SchemaRef,
    /// Left fields then right fields: what the join condition is evaluated on.
    pair_schema: SchemaRef,
    output_schema: SchemaRef,
    /// The state key fields (the equi-join keys).
    key_fields: Vec<Arc<Field>>,
    left_event_time: Option<usize>,
    right_event_time: Option<usize>,
    left_bound: Option<StateBound>,
    right_bound: Option<StateBound>,
    partitions: usize,
    /// Both sides' state in memory; read from the stores by the first batch of a run (and
    /// again after a failed batch), with the state version it describes.
    index: Versioned<JoinIndex>,
}

/// What a batch's new rows did: the slots they were added as, and the candidate pairs
/// (left slot, right slot) they make with the state.
struct Added {
    slots: Vec<usize>,
    pairs: Vec<(usize, usize)>,
}

/// What eviction took out: how many rows, the state keys (with their partition) of the evicted
/// rows the store holds, and each side's evicted rows that never matched (when that side is
/// outer).
struct Evicted {
    removed: i64,
    removals: Vec<(usize, Vec<u8>)>,
    unmatched: [Vec<Box<[u8]>>; 2],
}

impl StreamingJoin {
    /// Builds the operator for the logical `Join` of two streams, with its state described by
    /// `info`.
    pub(crate) fn try_new(join: &Join, info: &StateInfo) -> Result<Self> {
        check_stream_stream_join(join)?;
        let (join, null_safe) = with_equi_keys(join);
        let join = &join;
        if join.on.is_empty() {
            return Err(SluiceError::not_supported_yet(
                "stream-stream joins without an equality between the two sides (a cross join with a \
                 condition); add an equi-join key such as l.id = r.id",
            ));
        }
        let left: &DFSchema = join.left.schema();
        let right: &DFSchema = join.right.schema();
        let props = ExecutionProps::new();
        let planning = PhysicalPlanningContext::default();
        let mut left_keys = Vec::new();
        let mut right_keys = Vec::new();
        let mut key_types = Vec::new();
        for (l, r) in &join.on {
            left_keys.push(create_physical_expr(l, left, &props, &planning)?);
            right_keys.push(create_physical_expr(r, right, &props, &planning)?);
            key_types.push(datafusion::logical_expr::ExprSchemable::get_type(l, left)?);
        }
        let ls: SchemaRef = Arc::new(left.as_arrow().clone());
        let rs: SchemaRef = Arc::new(right.as_arrow().clone());
        let types = |s: &SchemaRef| -> Vec<_> {
            s.fields().iter().map(|f| f.data_type().clone()).collect()
        };
        let layout = JoinLayout::new(&key_types, &types(&ls), &types(&rs))?;
        let filter = match &join.filter {
            Some(f) => {
                let joined = left.join(right)?;
                Some(create_physical_expr(f, &joined, &props, &planning)?)
            }
            None => None,
        };
        let (le, re) = (
            event_time_column(left).map(|(i, _)| i),
            event_time_column(right).map(|(i, _)| i),
        );
        let (left_bound, right_bound) = join_state_bounds(join);
        let key_fields = join
            .on
            .iter()
            .map(|(l, _)| {
                Ok(Arc::new(Field::new(
                    l.schema_name().to_string(),
                    datafusion::logical_expr::ExprSchemable::get_type(l, left)?,
                    true,
                )))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            operator_id: info.operator_id,
            join_type: join.join_type,
            left_keys,
            null_safe,
            right_keys,
            layout,
            location: info.location(),
            filter,
            pair_schema: nullable(&Arc::new(arrow::datatypes::Schema::new(
                ls.fields()
                    .iter()
                    .chain(rs.fields().iter())
                    .cloned()
                    .collect::<Vec<_>>(),
            ))),
            output_schema: nullable(&Arc::new(join.schema.as_arrow().clone())),
            key_fields,
            left_schema: ls,
            right_schema: rs,
            left_event_time: le,
            right_event_time: re,
            left_bound,
            right_bound,
            partitions: info.partitions,
            index: Versioned::default(),
        })
    }

    fn bound(&self, side: JoinSide) -> Option<StateBound> {
        match side {
            JoinSide::Left => self.left_bound,
            JoinSide::Right => self.right_bound,
        }
    }

    /// The times a side's state bound judges, per row of its batch (empty without a bound).
    fn bound_times(&self, side: JoinSide, batch: &RecordBatch) -> Result<Vec<Option<i64>>> {
        match self.bound(side) {
            Some(b) => term_times(b.term, batch.column(b.term.column)),
            None => Ok(Vec::new()),
        }
    }

    /// Runs one batch: new rows join the state, matched pairs are emitted, rows behind the
    /// state bounds are evicted (unmatched rows of an outer side emitted with nulls), and only
    /// what changed is written to the stores.
    fn run(
        &mut self,
        stores: &mut PartitionedStores<'_>,
        left: RecordBatch,
        right: RecordBatch,
        late_us: i64,
        evict_us: i64,
    ) -> Result<OperatorOutput> {
        let version = stores.version();
        if !self.index.begin(version) {
            *self.index.get_mut() = index::build(
                stores.all(),
                [self.left_bound, self.right_bound],
                &self.layout,
                &self.location,
            )?;
        }
        let mut dropped = 0i64;
        let left = self.drop_late(left, self.left_event_time, late_us, &mut dropped)?;
        let right = self.drop_late(right, self.right_event_time, late_us, &mut dropped)?;
        let added = self.add_rows(&left, &right)?;
        let (mut outputs, changed) = self.match_pairs(&added.pairs)?;
        let evicted = self.evict(evict_us);
        self.persist(stores.all_mut(), &evicted.removals, &added.slots, &changed);
        for side in JoinSide::BOTH {
            let rows = &evicted.unmatched[side.index()];
            if !rows.is_empty() {
                outputs.push(self.with_nulls(side, rows)?);
            }
        }
        let rows = if outputs.is_empty() {
            RecordBatch::new_empty(self.output_schema.clone())
        } else {
            concat_batches(&self.output_schema, &outputs)?
        };
        self.index.finish(version + 1);
        Ok(OperatorOutput {
            rows: rows.into(),
            progress: StateOperatorProgress {
                num_rows_updated: added.slots.len() as i64,
                num_rows_removed: evicted.removed,
                num_rows_dropped_by_watermark: dropped,
                ..Default::default()
            },
        })
    }

    /// Adds the batch's rows to the index: new left rows join the right state, then new right
    /// rows join the left state (new left rows included), so every pair is found once.
    fn add_rows(&mut self, left: &RecordBatch, right: &RecordBatch) -> Result<Added> {
        let (lkeys, lvalid) = self.keys(left, &self.left_keys)?;
        let (rkeys, rvalid) = self.keys(right, &self.right_keys)?;
        let lrows = self.layout.side(JoinSide::Left).encode(left.columns())?;
        let rrows = self.layout.side(JoinSide::Right).encode(right.columns())?;
        let ltimes = self.bound_times(JoinSide::Left, left)?;
        let rtimes = self.bound_times(JoinSide::Right, right)?;
        let index = self.index.get_mut();
        // Rows this batch adds (to put), candidate pairs as (left slot, right slot).
        let mut added = Added {
            slots: Vec::with_capacity(left.num_rows() + right.num_rows()),
            pairs: Vec::new(),
        };
        for (side, keys, valid, rows, times) in [
            (JoinSide::Left, &lkeys, &lvalid, &lrows, &ltimes),
            (JoinSide::Right, &rkeys, &rvalid, &rrows, &rtimes),
        ] {
            let other = match side {
                JoinSide::Left => JoinSide::Right,
                JoinSide::Right => JoinSide::Left,
            };
            for (i, &valid) in valid.iter().enumerate() {
                let key = if valid { keys.row(i).data() } else { &[] };
                let id = index.insert(
                    side,
                    key,
                    index.next_seq,
                    rows.row(i).data().into(),
                    false,
                    false,
                    times.get(i).copied().flatten(),
                );
                index.next_seq += 1;
                added.slots.push(id);
                if valid {
                    if let Some(others) = index.sides[other.index()].by_key.get(key) {
                        if side == JoinSide::Left {
                            added.pairs.extend(others.iter().map(|&o| (id, o)));
                        } else {
                            added.pairs.extend(others.iter().map(|&o| (o, id)));
                        }
                    }
                }
            }
        }
        Ok(added)
    }

    /// Keeps the candidate pairs the condition accepts and marks both rows matched. Returns the
    /// output rows and the stored rows whose matched flag this batch set (to put again).
    fn match_pairs(&mut self, pairs: &[(usize, usize)]) -> Result<(Vec<RecordBatch>, Vec<usize>)> {
        let mut outputs: Vec<RecordBatch> = Vec::new();
        let mut changed: Vec<usize> = Vec::new();
        if pairs.is_empty() {
            return Ok((outputs, changed));
        }
        let joined = {
            let view: &JoinIndex = self.index.get();
            let lbytes: Vec<&[u8]> = pairs
                .iter()
                .map(|(l, _)| view.slot(*l).map(|s| &*s.row))
                .collect::<Result<_>>()?;
            let rbytes: Vec<&[u8]> = pairs
                .iter()
                .map(|(_, r)| view.slot(*r).map(|s| &*s.row))
                .collect::<Result<_>>()?;
            let mut cols = self.decode_rows(JoinSide::Left, &lbytes)?;
            cols.extend(self.decode_rows(JoinSide::Right, &rbytes)?);
            RecordBatch::try_new(self.pair_schema.clone(), cols)?
        };
        let index = self.index.get_mut();
        let idx: Vec<u32> = match &self.filter {
            Some(f) => {
                let v = f.evaluate(&joined)?.into_array(joined.num_rows())?;
                let b = v
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| SluiceError::internal("join filter"))?;
                (0..b.len())
                    .filter(|i| b.is_valid(*i) && b.value(*i))
                    .map(|i| i as u32)
                    .collect()
            }
            None => (0..joined.num_rows() as u32).collect(),
        };
        let semi = self.join_type == JoinType::LeftSemi;
        let mut first_matches: Vec<u32> = Vec::new();
        for i in &idx {
            let (l, r) = pairs[*i as usize];
            for (side, id) in [(JoinSide::Left, l), (JoinSide::Right, r)] {
                let slot = index.slot_mut(id)?;
                if !slot.matched {
                    // Left semi: a left row is emitted once, on its first match.
                    if semi && side == JoinSide::Left {
                        first_matches.push(*i);
                    }
                    slot.matched = true;
                    if slot.persisted {
                        changed.push(id);
                    }
                }
            }
        }
        if semi {
            let left_cols = joined.columns()[..self.left_schema.fields().len()].to_vec();
            let left_only = RecordBatch::try_new(self.output_schema.clone(), left_cols)?;
            outputs.push(arrow::compute::take_record_batch(
                &left_only,
                &UInt32Array::from(first_matches),
            )?);
        } else if idx.len() == joined.num_rows() {
            outputs.push(joined);
        } else {
            outputs.push(arrow::compute::take_record_batch(
                &joined,
                &UInt32Array::from(idx),
            )?);
        }
        Ok((outputs, changed))
    }

    /// Evicts behind the state bounds (only the expired range of each side's time index);
    /// unmatched rows of an outer side are kept to be emitted now.
    fn evict(&mut self, evict_us: i64) -> Evicted {
        let emit_left = matches!(self.join_type, JoinType::Left | JoinType::Full);
        let emit_right = matches!(self.join_type, JoinType::Right | JoinType::Full);
        let mut out = Evicted {
            removed: 0,
            removals: Vec::new(),
            unmatched: [Vec::new(), Vec::new()],
        };
        let index = self.index.get_mut();
        for (side, bound, emit) in [
            (JoinSide::Left, self.left_bound, emit_left),
            (JoinSide::Right, self.right_bound, emit_right),
        ] {
            let Some(b) = bound else { continue };
            let threshold = evict_us.saturating_add(b.offset);
            for slot in index.evict(side, threshold, b.inclusive) {
                out.removed += 1;
                if slot.persisted {
                    out.removals.push((
                        partition_of(&slot.key, self.partitions),
                        slot.state_key().encode(),
                    ));
                }
                if emit && !slot.matched {
                    out.unmatched[side.index()].push(slot.row);
                }
            }
        }
        out
    }

    /// Persists this batch's changes only: evicted rows go, added rows and rows that matched
    /// for the first time are (re)written.
    fn persist(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        removals: &[(usize, Vec<u8>)],
        added: &[usize],
        changed: &[usize],
    ) {
        for (p, k) in removals {
            stores[*p].remove(k);
        }
        let index = self.index.get_mut();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for &id in added.iter().chain(changed) {
            // Rows added and evicted in this batch are gone already: nothing to write.
            let Some(slot) = index.slots.get_mut(id).and_then(|s| s.as_mut()) else {
                continue;
            };
            slot.state_key().encode_into(&mut k);
            slot.state_value().encode_into(&mut v);
            stores[partition_of(&slot.key, self.partitions)].put(&k, &v);
            slot.persisted = true;
        }
    }

    fn drop_late(
        &self,
        batch: RecordBatch,
        et: Option<usize>,
        late_us: i64,
        dropped: &mut i64,
    ) -> Result<RecordBatch> {
        let Some(c) = et else { return Ok(batch) };
        // A window event-time column is late when its end is.
        let ts = window_end_micros(batch.column(c))?;
        let keep: Vec<u32> = (0..batch.num_rows())
            .filter(|i| !(ts.is_valid(*i) && ts.value(*i) <= late_us))
            .map(|i| i as u32)
            .collect();
        if keep.len() == batch.num_rows() {
            return Ok(batch);
        }
        *dropped += (batch.num_rows() - keep.len()) as i64;
        Ok(arrow::compute::take_record_batch(
            &batch,
            &UInt32Array::from(keep),
        )?)
    }

    /// Encoded join keys per row, and whether each is valid (a null key never matches, unless
    /// the key is null-safe: `<=>`).
    fn keys(
        &self,
        batch: &RecordBatch,
        exprs: &[Arc<dyn PhysicalExpr>],
    ) -> Result<(Rows, Vec<bool>)> {
        let n = batch.num_rows();
        let arrays: Vec<ArrayRef> = exprs
            .iter()
            .map(|e| e.evaluate(batch)?.into_array(n))
            .collect::<Result<_, _>>()?;
        let rows = self
            .layout
            .key()
            .encode(&arrays)?
            .ok_or_else(|| SluiceError::internal("a stream-stream join without join keys"))?;
        let valid = (0..n)
            .map(|i| {
                arrays
                    .iter()
                    .zip(&self.null_safe)
                    .all(|(a, safe)| *safe || !a.is_null(i))
            })
            .collect();
        Ok((rows, valid))
    }

    /// Decodes rows of one side (held in memory: read from the state, or this batch's).
    fn decode_rows<B: AsRef<[u8]>>(&self, side: JoinSide, rows: &[B]) -> Result<Vec<ArrayRef>> {
        self.layout
            .side(side)
            .decode_trusted(rows)
            .map_err(|e| self.location.corrupt(None, "a stream-stream join row", e))
    }

    /// Rows of one side with nulls for the other side, in the output schema.
    fn with_nulls(&self, side: JoinSide, rows: &[Box<[u8]>]) -> Result<RecordBatch> {
        let other = match side {
            JoinSide::Left => &self.right_schema,
            JoinSide::Right => &self.left_schema,
        };
        let cols = self.decode_rows(side, rows)?;
        let nulls: Vec<ArrayRef> = other
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), rows.len()))
            .collect();
        let all = if side == JoinSide::Left {
            [cols, nulls].concat()
        } else {
            [nulls, cols].concat()
        };
        Ok(RecordBatch::try_new(self.output_schema.clone(), all)?)
    }
}

impl StatefulOperator for StreamingJoin {
    fn name(&self) -> &str {
        "symmetricHashJoin"
    }

    fn state_schema(&self) -> StateSchema {
        let fields = |s: &SchemaRef| s.fields().iter().cloned().collect::<Vec<_>>();
        let mut value = fields(&self.left_schema);
        value.extend(fields(&self.right_schema));
        let mut schema = StateSchema::new(
            self.operator_id,
            &format!("symmetricHashJoin {}", self.join_type),
            state_fields(&self.key_fields),
            state_fields(&value),
        );
        schema.left_fields = Some(self.left_schema.fields().len());
        schema
    }

    /// Every input row joins the in-memory index (the state) before it is matched, so the
    /// inputs are taken whole: chunks would not lower the peak.
    fn process(
        &mut self,
        mut inputs: Vec<StageInput>,
        stores: &mut PartitionedStores<'_>,
        ctx: &BatchContext,
    ) -> Result<OperatorOutput> {
        let mut whole = || inputs.pop().map_or(Ok(Vec::new()), StageInput::collect_all);
        let right = whole()?;
        let left = whole()?;
        let left = concat_batches(&self.left_schema, &left)?;
        let right = concat_batches(&self.right_schema, &right)?;
        self.run(
            stores,
            left,
            right,
            ctx.late_watermark.as_micros().0,
            ctx.eviction_watermark.as_micros().0,
        )
    }

    /// A no-data batch evicts when the watermark moved and a side is bounded.
    fn should_run_another_batch(
        &self,
        batch_watermark: WatermarkMs,
        next_watermark: WatermarkMs,
    ) -> bool {
        (self.left_bound.is_some() || self.right_bound.is_some())
            && next_watermark > batch_watermark
    }
}
