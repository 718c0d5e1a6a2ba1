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
//! With the in-memory store kind the operator holds the state between batches (`held`: each
//! side's rows as Arrow chunks indexed by join key and by bound time). With the on-disk kind
//! the state stays in the stores: a batch reads the rows of each join key it sees (a key group
//! of the store, `StateStore::scan_group`) and the rows its watermark expires (the stores' time
//! index, `StateStore::scan_by_time`), never the whole state. Either way a batch writes what it
//! changed: the rows it added, the rows whose `matched` flag it set, and the rows it evicted.
//!
//! `bounds` finds the state bounds in the condition.

mod bounds;
mod held;

use std::collections::{HashMap, HashSet};
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
use self::held::HeldJoin;
use super::stateful::context::StateLocation;
use super::stateful::event_time::{event_time_column, window_end_micros};
use super::stateful::{
    nullable, partition_of, BatchContext, OperatorOutput, PartitionedStores, Routed, StageInput,
    StateInfo, StatefulOperator,
};
use crate::error::{Result, SluiceError};
use crate::progress::StateOperatorProgress;
use crate::state::layout::join::{JoinLayout, JoinSide, JoinStateKey, JoinStateValue};
use crate::state::layout::RowLayout;
use crate::state::schema::{state_fields, StateSchema};
use crate::state::{KeyGroups, PairTimes, StateStore};
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
    /// The state held by the operator between batches (`held`; with the in-memory store
    /// kind); else it is read from and written back to the stores every batch.
    held: Option<HeldJoin>,
}

/// One stored row of either side, as a batch read or wrote it.
struct StateRow {
    /// The partition of its join key.
    partition: usize,
    /// Its state key ([`JoinStateKey`]).
    key: Vec<u8>,
    matched: bool,
    /// The row, in the row layout of its side.
    row: Box<[u8]>,
}

/// What eviction took out: how many rows, and each side's evicted rows that never matched
/// (when that side is outer).
struct Evicted {
    removed: i64,
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
            held: (info.store_conf.kind == crate::state::StateStoreKind::InMemory)
                .then(HeldJoin::default),
        })
    }

    /// Runs one batch on the stores: the new left rows are stored and join the right rows in
    /// state, then the new right rows are stored and join the left rows in state (the new ones
    /// included), so every pair is found once; each lookup reads one join key's rows (a key
    /// group of the store). Then the rows behind the state bounds are evicted through the
    /// stores' time index (unmatched rows of an outer side emitted with nulls).
    fn run(
        &mut self,
        stores: &mut PartitionedStores<'_>,
        left: RecordBatch,
        right: RecordBatch,
        late_us: i64,
        evict_us: i64,
    ) -> Result<OperatorOutput> {
        let mut dropped = 0i64;
        let left = self.drop_late(left, self.left_event_time, late_us, &mut dropped)?;
        let right = self.drop_late(right, self.right_event_time, late_us, &mut dropped)?;
        if let Some(mut held) = self.held.take() {
            let result = self.run_held(&mut held, stores, (&left, &right), evict_us);
            self.held = Some(held);
            let (rows, removed) = result?;
            return Ok(self.report(rows, (&left, &right), removed, dropped));
        }
        // Sequence numbers: the batch's in the high half, its rows' in the low one, so a
        // replayed batch writes the same keys. (State written before this scheme counted from
        // 0, below every batch's range.)
        let mut seq = (stores.version() + 1) << 32;
        let mut outputs = Vec::new();
        for (side, batch) in [(JoinSide::Left, &left), (JoinSide::Right, &right)] {
            self.join_pass(stores, side, batch, &mut seq, &mut outputs)?;
        }
        let evicted = self.evict(stores.all_mut(), evict_us)?;
        for side in JoinSide::BOTH {
            let rows = &evicted.unmatched[side.index()];
            if !rows.is_empty() {
                outputs.push(self.with_nulls(side, rows)?);
            }
        }
        let rows = self.concat_outputs(&outputs)?;
        Ok(self.report(rows, (&left, &right), evicted.removed, dropped))
    }

    fn concat_outputs(&self, outputs: &[RecordBatch]) -> Result<RecordBatch> {
        Ok(if outputs.is_empty() {
            RecordBatch::new_empty(self.output_schema.clone())
        } else {
            concat_batches(&self.output_schema, outputs)?
        })
    }

    /// The batch's output and progress.
    fn report(
        &self,
        rows: RecordBatch,
        (left, right): (&RecordBatch, &RecordBatch),
        removed: i64,
        dropped: i64,
    ) -> OperatorOutput {
        OperatorOutput {
            rows: rows.into(),
            progress: StateOperatorProgress {
                num_rows_updated: (left.num_rows() + right.num_rows()) as i64,
                num_rows_removed: removed,
                num_rows_dropped_by_watermark: dropped,
                ..Default::default()
            },
        }
    }

    /// [`Self::run`] with the state held by the operator (`held`): the same passes and
    /// eviction over the held rows, then only the changes staged. The held state is at no
    /// version while the batch runs, so a batch that fails part-way rebuilds it. Returns the
    /// rows and how many stored rows were evicted.
    fn run_held(
        &self,
        held: &mut HeldJoin,
        stores: &mut PartitionedStores<'_>,
        (left, right): (&RecordBatch, &RecordBatch),
        evict_us: i64,
    ) -> Result<(RecordBatch, i64)> {
        let mut seq = (stores.version() + 1) << 32;
        self.held_open(held, stores.all_mut())?;
        let version = held.version.begin();
        let semi = self.join_type == JoinType::LeftSemi;
        let mut outputs = Vec::new();
        for (side, batch) in [(JoinSide::Left, left), (JoinSide::Right, right)] {
            let (placed, candidates) = self.held_add_and_probe(held, side, batch, &mut seq)?;
            if candidates.is_empty() {
                continue;
            }
            let cols = self.held_pairs(held, side, &placed, &candidates)?;
            let joined = RecordBatch::try_new(self.pair_schema.clone(), cols)?;
            let accepted = self.accepted(&joined)?;
            let mut first_matches = Vec::new();
            for i in &accepted {
                let (n, p, stored) = candidates[*i as usize];
                let new = placed[n];
                let (l, r) = match side {
                    JoinSide::Left => (new, (p, stored)),
                    JoinSide::Right => ((p, stored), new),
                };
                if Self::held_match(held, l.0, JoinSide::Left, l.1)? && semi {
                    first_matches.push(*i);
                }
                Self::held_match(held, r.0, JoinSide::Right, r.1)?;
            }
            outputs.push(self.matched_output(joined, accepted, first_matches)?);
        }
        let mut removed = 0;
        if self.left_bound.is_some() || self.right_bound.is_some() {
            let (n, unmatched) = self.held_evict(held, evict_us, self.outer_sides())?;
            removed = n;
            for side in JoinSide::BOTH {
                for cols in &unmatched[side.index()] {
                    outputs.push(self.with_nulls_columns(side, cols.clone())?);
                }
            }
        }
        self.held_stage(held, stores.all_mut())?;
        held.version.ran(version);
        Ok((self.concat_outputs(&outputs)?, removed))
    }

    /// One side's new rows: stores them, then pairs them with the other side's rows of the
    /// same join key in state, keeps the pairs the condition accepts and marks both rows
    /// matched (stored again, once).
    fn join_pass(
        &self,
        stores: &mut PartitionedStores<'_>,
        side: JoinSide,
        batch: &RecordBatch,
        seq: &mut u64,
        outputs: &mut Vec<RecordBatch>,
    ) -> Result<()> {
        let exprs = match side {
            JoinSide::Left => &self.left_keys,
            JoinSide::Right => &self.right_keys,
        };
        let (keys, valid) = self.keys(batch, exprs)?;
        let rows = self.layout.side(side).encode(batch.columns())?;
        let other = side.other();
        // The new rows as stored, and the rows of each valid join key.
        let mut new_rows: Vec<StateRow> = Vec::with_capacity(batch.num_rows());
        let mut by_key: HashMap<&[u8], Vec<usize>, foldhash::fast::RandomState> =
            HashMap::default();
        let mut value = Vec::new();
        for (i, &valid) in valid.iter().enumerate() {
            let key: &[u8] = if valid { keys.row(i).data() } else { &[] };
            let state_key = JoinStateKey {
                side,
                key,
                seq: *seq,
            }
            .encode();
            *seq += 1;
            let row = rows.row(i).data();
            JoinStateValue {
                matched: false,
                row,
            }
            .encode_into(&mut value);
            let p = partition_of(key, self.partitions);
            stores[p].put(&state_key, &value);
            if valid {
                by_key.entry(key).or_default().push(i);
            }
            new_rows.push(StateRow {
                partition: p,
                key: state_key,
                matched: false,
                row: row.into(),
            });
        }
        // Candidate pairs: (new row, stored row of the other side), key by key.
        let mut stored: Vec<StateRow> = Vec::new();
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        for (key, news) in &by_key {
            let p = partition_of(key, self.partitions);
            let group = JoinStateKey {
                side: other,
                key,
                seq: 0,
            }
            .encode();
            let group = &group[..group.len() - 8];
            for (k, v) in stores[p].scan_group(group)? {
                let value = JoinStateValue::decode(&v).map_err(|e| {
                    self.location
                        .corrupt(Some(p), "a stream-stream join state value", e)
                })?;
                let o = stored.len();
                stored.push(StateRow {
                    partition: p,
                    matched: value.matched,
                    row: value.row.into(),
                    key: k,
                });
                pairs.extend(news.iter().map(|n| (*n, o)));
            }
        }
        if pairs.is_empty() {
            return Ok(());
        }
        // (left row, right row) of each pair.
        let (lrows, rrows): (Vec<&StateRow>, Vec<&StateRow>) = pairs
            .iter()
            .map(|(n, o)| match side {
                JoinSide::Left => (&new_rows[*n], &stored[*o]),
                JoinSide::Right => (&stored[*o], &new_rows[*n]),
            })
            .unzip();
        let joined = {
            let lbytes: Vec<&[u8]> = lrows.iter().map(|r| &*r.row).collect();
            let rbytes: Vec<&[u8]> = rrows.iter().map(|r| &*r.row).collect();
            let mut cols = self.decode_rows(JoinSide::Left, &lbytes)?;
            cols.extend(self.decode_rows(JoinSide::Right, &rbytes)?);
            RecordBatch::try_new(self.pair_schema.clone(), cols)?
        };
        let accepted = self.accepted(&joined)?;
        // Rows matched for the first time, stored again once; a left semi join emits a left
        // row on its first match only.
        let semi = self.join_type == JoinType::LeftSemi;
        let mut first: HashSet<&[u8], foldhash::fast::RandomState> = HashSet::default();
        let mut first_matches: Vec<u32> = Vec::new();
        for i in &accepted {
            for (row, is_left) in [(lrows[*i as usize], true), (rrows[*i as usize], false)] {
                if !row.matched && first.insert(&row.key) {
                    if semi && is_left {
                        first_matches.push(*i);
                    }
                    JoinStateValue {
                        matched: true,
                        row: &row.row,
                    }
                    .encode_into(&mut value);
                    stores[row.partition].put(&row.key, &value);
                }
            }
        }
        outputs.push(self.matched_output(joined, accepted, first_matches)?);
        Ok(())
    }

    /// The pairs the join condition accepts, by position in `joined`.
    fn accepted(&self, joined: &RecordBatch) -> Result<Vec<u32>> {
        Ok(match &self.filter {
            Some(f) => {
                let v = f.evaluate(joined)?.into_array(joined.num_rows())?;
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
        })
    }

    /// The output of one pass: the `accepted` pairs, or for a left semi join the left rows of
    /// `first_matches` (pairs whose left row matched for the first time).
    fn matched_output(
        &self,
        joined: RecordBatch,
        accepted: Vec<u32>,
        first_matches: Vec<u32>,
    ) -> Result<RecordBatch> {
        Ok(if self.join_type == JoinType::LeftSemi {
            let left_cols = joined.columns()[..self.left_schema.fields().len()].to_vec();
            let left_only = RecordBatch::try_new(self.output_schema.clone(), left_cols)?;
            arrow::compute::take_record_batch(&left_only, &UInt32Array::from(first_matches))?
        } else if accepted.len() == joined.num_rows() {
            joined
        } else {
            arrow::compute::take_record_batch(&joined, &UInt32Array::from(accepted))?
        })
    }

    /// Which sides are outer: their evicted rows that never matched are emitted with nulls.
    fn outer_sides(&self) -> [bool; 2] {
        [
            matches!(self.join_type, JoinType::Left | JoinType::Full),
            matches!(self.join_type, JoinType::Right | JoinType::Full),
        ]
    }

    /// Evicts the rows behind the state bounds through each store's time index (a range scan:
    /// only the expired rows are read); unmatched rows of an outer side are kept to be emitted
    /// now.
    fn evict(&self, stores: &mut [&mut dyn StateStore], evict_us: i64) -> Result<Evicted> {
        let emit = self.outer_sides();
        let mut out = Evicted {
            removed: 0,
            unmatched: [Vec::new(), Vec::new()],
        };
        if self.left_bound.is_none() && self.right_bound.is_none() {
            return Ok(out);
        }
        for (p, store) in stores.iter_mut().enumerate() {
            // Times are stored relative to each side's bound: a row is behind it when its
            // time is before the eviction watermark.
            for pair in store.scan_by_time(evict_us, false)? {
                let key = JoinStateKey::decode(&pair.key).map_err(|e| {
                    self.location
                        .corrupt(Some(p), "a stream-stream join state key", e)
                })?;
                let value = JoinStateValue::decode(&pair.value).map_err(|e| {
                    self.location
                        .corrupt(Some(p), "a stream-stream join state value", e)
                })?;
                out.removed += 1;
                if emit[key.side.index()] && !value.matched {
                    out.unmatched[key.side.index()].push(value.row.into());
                }
                store.remove(&pair.key);
            }
        }
        Ok(out)
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
        self.with_nulls_columns(side, self.decode_rows(side, rows)?)
    }

    /// Columns of one side's rows with nulls for the other side, in the output schema.
    fn with_nulls_columns(&self, side: JoinSide, cols: Vec<ArrayRef>) -> Result<RecordBatch> {
        let other = match side {
            JoinSide::Left => &self.right_schema,
            JoinSide::Right => &self.left_schema,
        };
        let n = cols.first().map_or(0, |c| c.len());
        let nulls: Vec<ArrayRef> = other
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), n))
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

    /// Rows by the time their side's state bound judges, relative to the bound (the bound's
    /// time minus its offset, one less when the bound is inclusive), so one scan up to the
    /// eviction watermark finds both sides' expired rows.
    fn state_times(&self) -> Result<Option<PairTimes>> {
        if (self.left_bound.is_none() && self.right_bound.is_none()) || self.held.is_some() {
            return Ok(None);
        }
        let types = |s: &SchemaRef| -> Vec<_> {
            s.fields().iter().map(|f| f.data_type().clone()).collect()
        };
        let sides = [
            RowLayout::new(&types(&self.left_schema))?,
            RowLayout::new(&types(&self.right_schema))?,
        ];
        let bounds = [self.left_bound, self.right_bound];
        let location = self.location.clone();
        Ok(Some(PairTimes {
            times: Arc::new(move |p, keys: &[&[u8]], values: &[&[u8]]| {
                let mut out = vec![None; keys.len()];
                for side in JoinSide::BOTH {
                    let Some(b) = bounds[side.index()] else {
                        continue;
                    };
                    let mut at = Vec::new();
                    let mut rows = Vec::new();
                    for (i, (k, v)) in keys.iter().zip(values).enumerate() {
                        let key = JoinStateKey::decode(k).map_err(|e| {
                            location.corrupt(Some(p), "a stream-stream join state key", e)
                        })?;
                        if key.side == side {
                            let value = JoinStateValue::decode(v).map_err(|e| {
                                location.corrupt(Some(p), "a stream-stream join state value", e)
                            })?;
                            at.push(i);
                            rows.push(value.row);
                        }
                    }
                    if rows.is_empty() {
                        continue;
                    }
                    let cols = sides[side.index()]
                        .decode_trusted(&rows)
                        .map_err(|e| location.corrupt(Some(p), "a stream-stream join row", e))?;
                    let col = cols
                        .get(b.term.column)
                        .ok_or_else(|| SluiceError::internal("join state bound column"))?;
                    let shift = b.offset.saturating_add(i64::from(b.inclusive));
                    for (i, t) in at.into_iter().zip(term_times(b.term, col)?) {
                        out[i] = t.map(|t| t.saturating_sub(shift));
                    }
                }
                Ok(out)
            }),
            from_key: false,
        }))
    }

    /// A join key's rows of one side are a group: the side and join key before the sequence.
    fn state_key_groups(&self) -> Option<KeyGroups> {
        if self.held.is_some() {
            return None;
        }
        Some(KeyGroups::by_prefix(|k: &[u8]| {
            JoinStateKey::decode(k).ok().map(|key| 5 + key.key.len())
        }))
    }

    /// The held state (`held`): the stores keep no rows.
    fn state_held_by_operator(&self) -> bool {
        self.held.is_some()
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

    /// The inputs are taken whole: all left rows join the state before any right row does.
    fn process(
        &mut self,
        inputs: Vec<StageInput>,
        stores: &mut PartitionedStores<'_>,
        ctx: &BatchContext,
    ) -> Result<OperatorOutput> {
        // Left first: a worker's rows come input by input.
        let mut inputs = inputs.into_iter();
        let mut whole = || {
            inputs
                .next()
                .map_or(Ok(Vec::new()), StageInput::collect_all)
        };
        let left = whole()?;
        let right = whole()?;
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

    /// Each side's rows go to the owner of their join key's partition (a row without a valid
    /// key to the partition of the empty key, where this process keeps it too).
    fn routes(&self) -> bool {
        true
    }

    fn routes_where_read(&self) -> bool {
        true
    }

    fn route(
        &mut self,
        mut inputs: Vec<StageInput>,
        _ctx: &BatchContext,
        routed: &mut Routed,
    ) -> Result<()> {
        let right = inputs.pop();
        let left = inputs.pop();
        let (Some(left), Some(right)) = (left, right) else {
            return Err(SluiceError::internal(
                "a stream-stream join without its two inputs",
            ));
        };
        let this = &*self;
        let partitions_n = routed.partitions();
        for (i, input, exprs, schema) in [
            (0, left, &this.left_keys, &this.left_schema),
            (1, right, &this.right_keys, &this.right_schema),
        ] {
            input.for_each_chunk(|chunk, _| {
                let batch = concat_batches(schema, &chunk)?;
                drop(chunk);
                let (keys, valid) = this.keys(&batch, exprs)?;
                let partitions: Vec<usize> = valid
                    .iter()
                    .enumerate()
                    .map(|(r, ok)| {
                        let key: &[u8] = if *ok { keys.row(r).data() } else { &[] };
                        partition_of(key, partitions_n)
                    })
                    .collect();
                routed.push(i, &batch, &partitions)
            })?;
        }
        Ok(())
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
