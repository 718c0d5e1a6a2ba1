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
//! match a future row of the other side (future rows are at or after the watermark). Rows behind
//! that bound are evicted; in an outer join, evicted rows that never matched are emitted with
//! nulls for the other side — so they appear only once the watermark guarantees no match can
//! come. An equality of the two event-time columns bounds both sides the same way. A side without
//! such a bound keeps its rows forever (allowed for inner joins, as in Spark).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::concat_batches;
use arrow::datatypes::{Field, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{BinaryExpr, Join, JoinType, Operator};
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};
use datafusion::prelude::Expr;

use super::stateful::{
    check_state_schema, nullable, open_stores, partition_of, state_fields, to_micros, StateSchema,
    StatefulOperator,
};
use super::watermark::WATERMARK_DELAY_KEY;
use crate::error::{Result, SluiceError};
use crate::progress::StateOperatorProgress;
use crate::state::{DefaultStateStoreProvider, StateStore, StateStoreConf};

const LEFT: u8 = 0;
const RIGHT: u8 = 1;

/// `L - R op c` between a left column and a right column (µs).
#[derive(Debug, Clone, Copy)]
struct Constraint {
    left_col: usize,
    right_col: usize,
    op: Operator,
    c: i64,
}

/// How old a stored row of one side may be: rows with `column < watermark + offset` (or `<=`
/// when `inclusive`) can never match again.
#[derive(Debug, Clone, Copy)]
struct StateBound {
    column: usize,
    offset: i64,
    inclusive: bool,
}

/// A stored row: its sequence number (state key suffix), the encoded row, whether it matched.
#[derive(Debug, Clone)]
struct Stored {
    seq: u64,
    row: Vec<u8>,
    matched: bool,
}

/// Both sides' stored rows by (side, encoded join key).
type JoinIndex = HashMap<(u8, Vec<u8>), Vec<Stored>>;

/// The stream-stream join operator.
pub struct StreamingJoin {
    join_type: JoinType,
    left_keys: Vec<Arc<dyn PhysicalExpr>>,
    right_keys: Vec<Arc<dyn PhysicalExpr>>,
    key_converter: RowConverter,
    left_rows: RowConverter,
    right_rows: RowConverter,
    filter: Option<Arc<dyn PhysicalExpr>>,
    left_schema: SchemaRef,
    right_schema: SchemaRef,
    /// Left fields then right fields: what the join condition is evaluated on.
    pair_schema: SchemaRef,
    output_schema: SchemaRef,
    left_event_time: Option<usize>,
    right_event_time: Option<usize>,
    left_bound: Option<StateBound>,
    right_bound: Option<StateBound>,
    partitions: usize,
    stores: Vec<DefaultStateStoreProvider>,
    /// In-memory index of both sides' state: (side, key bytes) -> rows. Built on the first batch.
    index: Option<JoinIndex>,
    next_seq: u64,
}

fn event_time_column(schema: &DFSchema) -> Option<usize> {
    schema
        .fields()
        .iter()
        .position(|f| f.metadata().contains_key(WATERMARK_DELAY_KEY))
}

/// `window(time, size)` (tumbling) -> (time expr, size µs).
fn window_of(e: &Expr) -> Option<(Expr, i64)> {
    match super::window::WindowSpec::of(e).ok()?? {
        super::window::WindowSpec::Time {
            time, size, slide, ..
        } if size == slide => Some((time, size)),
        _ => None,
    }
}

fn interval(us: i64) -> Expr {
    Expr::Literal(
        ScalarValue::IntervalMonthDayNano(Some(arrow::datatypes::IntervalMonthDayNano::new(
            0,
            0,
            us * 1000,
        ))),
        None,
    )
}

/// `col`, `col + interval`, `col - interval` -> (column expr, µs offset).
fn column_plus(e: &Expr) -> Option<(&datafusion::common::Column, i64)> {
    match e {
        Expr::Column(c) => Some((c, 0)),
        Expr::Cast(c) => column_plus(&c.expr),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (c, base) = column_plus(left)?;
            let k = interval_micros(right)?;
            match op {
                Operator::Plus => Some((c, base + k)),
                Operator::Minus => Some((c, base - k)),
                _ => None,
            }
        }
        _ => None,
    }
}

fn interval_micros(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
            Some(v.days as i64 * 86_400_000_000 + v.nanoseconds / 1000)
        }
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => {
            Some(v.days as i64 * 86_400_000_000 + v.milliseconds as i64 * 1000)
        }
        Expr::Literal(ScalarValue::DurationMicrosecond(Some(v)), _) => Some(*v),
        Expr::Cast(c) => interval_micros(&c.expr),
        _ => None,
    }
}

fn flip(op: Operator) -> Operator {
    match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        o => o,
    }
}

/// Splits a condition into `L - R op c` constraints between left and right columns.
fn constraints(e: &Expr, left: &DFSchema, right: &DFSchema, out: &mut Vec<Constraint>) {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left: a,
            op: Operator::And,
            right: b,
        }) => {
            constraints(a, left, right, out);
            constraints(b, left, right, out);
        }
        Expr::Between(b) if !b.negated => {
            constraints(
                &Expr::BinaryExpr(BinaryExpr::new(
                    b.expr.clone(),
                    Operator::GtEq,
                    b.low.clone(),
                )),
                left,
                right,
                out,
            );
            constraints(
                &Expr::BinaryExpr(BinaryExpr::new(
                    b.expr.clone(),
                    Operator::LtEq,
                    b.high.clone(),
                )),
                left,
                right,
                out,
            );
        }
        // Equal windows over the two event times: both times fall in one window, so they are
        // less than its size apart (Spark's key-based state eviction for window join keys).
        Expr::BinaryExpr(BinaryExpr {
            left: a,
            op: Operator::Eq,
            right: b,
        }) if window_of(a).is_some() && window_of(b).is_some() => {
            if let (Some((ta, sa)), Some((tb, sb))) = (window_of(a), window_of(b)) {
                if sa == sb {
                    let size = sa;
                    let lt = Expr::BinaryExpr(BinaryExpr::new(
                        Box::new(ta.clone()),
                        Operator::Lt,
                        Box::new(tb.clone() + interval(size)),
                    ));
                    let gt = Expr::BinaryExpr(BinaryExpr::new(
                        Box::new(ta),
                        Operator::Gt,
                        Box::new(tb - interval(size)),
                    ));
                    constraints(&lt, left, right, out);
                    constraints(&gt, left, right, out);
                }
            }
        }
        Expr::BinaryExpr(BinaryExpr {
            left: a,
            op,
            right: b,
        }) if matches!(
            op,
            Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq | Operator::Eq
        ) =>
        {
            let (Some((ca, ka)), Some((cb, kb))) = (column_plus(a), column_plus(b)) else {
                return;
            };
            let side = |c: &datafusion::common::Column| {
                (left.index_of_column(c).ok(), right.index_of_column(c).ok())
            };
            let (ops, pairs) = match (side(ca), side(cb)) {
                ((Some(l), _), (None, Some(r))) => (*op, (l, ka, r, kb)),
                ((None, Some(r)), (Some(l), _)) => (flip(*op), (l, kb, r, ka)),
                _ => return,
            };
            // L + ka op R + kb  <=>  L - R op kb - ka
            let (l, ka, r, kb) = pairs;
            let c = kb - ka;
            if ops == Operator::Eq {
                out.push(Constraint {
                    left_col: l,
                    right_col: r,
                    op: Operator::GtEq,
                    c,
                });
                out.push(Constraint {
                    left_col: l,
                    right_col: r,
                    op: Operator::LtEq,
                    c,
                });
            } else {
                out.push(Constraint {
                    left_col: l,
                    right_col: r,
                    op: ops,
                    c,
                });
            }
        }
        _ => {}
    }
}

/// State bounds from the constraints, given each side's event-time column.
fn state_bounds(
    cs: &[Constraint],
    left_et: Option<usize>,
    right_et: Option<usize>,
) -> (Option<StateBound>, Option<StateBound>) {
    let mut lb: Option<StateBound> = None;
    let mut rb: Option<StateBound> = None;
    for c in cs {
        // Left rows: L - R >= c with future R >= W  =>  L >= W + c.
        if Some(c.right_col) == right_et && matches!(c.op, Operator::GtEq | Operator::Gt) {
            let b = StateBound {
                column: c.left_col,
                offset: c.c,
                inclusive: c.op == Operator::Gt,
            };
            if lb.is_none_or(|x| b.offset > x.offset) {
                lb = Some(b);
            }
        }
        // Right rows: L - R <= c with future L >= W  =>  R >= W - c.
        if Some(c.left_col) == left_et && matches!(c.op, Operator::LtEq | Operator::Lt) {
            let b = StateBound {
                column: c.right_col,
                offset: -c.c,
                inclusive: c.op == Operator::Lt,
            };
            if rb.is_none_or(|x| b.offset > x.offset) {
                rb = Some(b);
            }
        }
    }
    (lb, rb)
}

/// The state bounds of both sides, from the equi-join keys and the join condition.
fn join_state_bounds(join: &Join) -> (Option<StateBound>, Option<StateBound>) {
    let (left, right): (&DFSchema, &DFSchema) = (join.left.schema(), join.right.schema());
    let mut cs = Vec::new();
    for (l, r) in &join.on {
        let eq = Expr::BinaryExpr(BinaryExpr::new(
            Box::new(l.clone()),
            Operator::Eq,
            Box::new(r.clone()),
        ));
        constraints(&eq, left, right, &mut cs);
    }
    if let Some(f) = &join.filter {
        constraints(f, left, right, &mut cs);
    }
    state_bounds(&cs, event_time_column(left), event_time_column(right))
}

/// Whether a stream-stream join of this kind can bound the state it must keep (Spark's rules).
pub fn check_stream_stream_join(join: &Join) -> Result<()> {
    let (lb, rb) = join_state_bounds(join);
    let kind = match join.join_type {
        JoinType::Inner => return Ok(()),
        JoinType::Left => ("LeftOuter", lb.is_some()),
        JoinType::Right => ("RightOuter", rb.is_some()),
        JoinType::Full => ("FullOuter", lb.is_some() && rb.is_some()),
        JoinType::LeftSemi => ("LeftSemi", lb.is_some()),
        other => {
            return Err(SluiceError::not_supported_yet(format!(
                "stream-stream {other} joins are not supported yet; inner, left/right/full outer and left semi are"
            )))
        }
    };
    if kind.1 {
        Ok(())
    } else {
        Err(SluiceError::query(
            crate::plan::analysis::UNSUPPORTED_OPERATION_CLASS,
            format!(
                "Stream-stream {} join between two streaming DataFrame/Datasets is not supported \
                 without a watermark in the join keys, or a watermark on the nullable side and an \
                 appropriate range condition. Add with_watermark(..) to both streams and a condition \
                 such as right.ts BETWEEN left.ts AND left.ts + INTERVAL 1 HOUR.",
                kind.0
            ),
        ))
    }
}

/// The join with equalities between a left-only and a right-only expression moved from the
/// condition into the equi-join keys (the analysed plan keeps the whole ON clause as a filter).
fn with_equi_keys(join: &Join) -> Join {
    let mut j = join.clone();
    let Some(filter) = join.filter.clone() else {
        return j;
    };
    let (left, right) = (join.left.schema(), join.right.schema());
    let only = |e: &Expr, s: &DFSchema| {
        let refs = e.column_refs();
        !refs.is_empty() && refs.iter().all(|c| s.index_of_column(c).is_ok())
    };
    let mut rest = Vec::new();
    for c in datafusion::logical_expr::utils::split_conjunction(&filter) {
        match c {
            Expr::BinaryExpr(BinaryExpr {
                left: a,
                op: Operator::Eq,
                right: b,
            }) if only(a, left) && only(b, right) => {
                j.on.push((a.as_ref().clone(), b.as_ref().clone()))
            }
            Expr::BinaryExpr(BinaryExpr {
                left: a,
                op: Operator::Eq,
                right: b,
            }) if only(b, left) && only(a, right) => {
                j.on.push((b.as_ref().clone(), a.as_ref().clone()))
            }
            other => rest.push(other.clone()),
        }
    }
    j.filter = datafusion::logical_expr::utils::conjunction(rest);
    j
}

impl StreamingJoin {
    pub fn try_new(
        join: &Join,
        operator_id: u32,
        checkpoint_root: &Path,
        partitions: usize,
        allow_rename: bool,
        store_conf: StateStoreConf,
    ) -> Result<Self> {
        check_stream_stream_join(join)?;
        let join = &with_equi_keys(join);
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
        let mut key_fields = Vec::new();
        for (l, r) in &join.on {
            left_keys.push(create_physical_expr(l, left, &props, &planning)?);
            right_keys.push(create_physical_expr(r, right, &props, &planning)?);
            key_fields.push(SortField::new(
                datafusion::logical_expr::ExprSchemable::get_type(l, left)?,
            ));
        }
        let key_converter = RowConverter::new(key_fields)?;
        let ls: SchemaRef = Arc::new(left.as_arrow().clone());
        let rs: SchemaRef = Arc::new(right.as_arrow().clone());
        let conv = |s: &SchemaRef| {
            RowConverter::new(
                s.fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )
        };
        let filter = match &join.filter {
            Some(f) => {
                let joined = left.join(right)?;
                Some(create_physical_expr(f, &joined, &props, &planning)?)
            }
            None => None,
        };
        let (le, re) = (event_time_column(left), event_time_column(right));
        let (left_bound, right_bound) = join_state_bounds(join);
        let dir = checkpoint_root.join("state").join(operator_id.to_string());
        let fields = |s: &SchemaRef| s.fields().iter().cloned().collect::<Vec<_>>();
        let mut value = fields(&ls);
        value.extend(fields(&rs));
        check_state_schema(
            &dir,
            &StateSchema {
                operator: format!("{operator_id} (symmetricHashJoin {})", join.join_type),
                key_schema: state_fields(
                    &join
                        .on
                        .iter()
                        .map(|(l, _)| {
                            Ok(Arc::new(Field::new(
                                l.schema_name().to_string(),
                                datafusion::logical_expr::ExprSchemable::get_type(l, left)?,
                                true,
                            )))
                        })
                        .collect::<Result<Vec<_>>>()?,
                ),
                value_schema: state_fields(&value),
            },
            allow_rename,
        )?;
        Ok(Self {
            join_type: join.join_type,
            left_keys,
            right_keys,
            key_converter,
            left_rows: conv(&ls)?,
            right_rows: conv(&rs)?,
            filter,
            pair_schema: nullable(&Arc::new(arrow::datatypes::Schema::new(
                ls.fields()
                    .iter()
                    .chain(rs.fields().iter())
                    .cloned()
                    .collect::<Vec<_>>(),
            ))),
            output_schema: nullable(&Arc::new(join.schema.as_arrow().clone())),
            left_schema: ls,
            right_schema: rs,
            left_event_time: le,
            right_event_time: re,
            left_bound,
            right_bound,
            partitions,
            stores: open_stores(checkpoint_root, operator_id, partitions, &store_conf)?,
            index: None,
            next_seq: 0,
        })
    }

    fn state_key(side: u8, key: &[u8], seq: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(key.len() + 13);
        k.push(side);
        k.extend_from_slice(&(key.len() as u32).to_le_bytes());
        k.extend_from_slice(key);
        k.extend_from_slice(&seq.to_be_bytes());
        k
    }

    fn parse_state_key(k: &[u8]) -> Option<(u8, Vec<u8>, u64)> {
        let side = *k.first()?;
        let len = u32::from_le_bytes(k.get(1..5)?.try_into().ok()?) as usize;
        let key = k.get(5..5 + len)?.to_vec();
        let seq = u64::from_be_bytes(k.get(5 + len..13 + len)?.try_into().ok()?);
        Some((side, key, seq))
    }

    fn build_index(&mut self, stores: &[&mut dyn StateStore]) -> Result<()> {
        if self.index.is_some() {
            return Ok(());
        }
        let mut index: JoinIndex = HashMap::new();
        for store in stores {
            for (k, v) in store.iter() {
                let (side, key, seq) = Self::parse_state_key(k)
                    .ok_or_else(|| SluiceError::checkpoint("STATE_STORE_CORRUPT", "a stream-stream join state key is malformed; use a new checkpoint location"))?;
                let (matched, row) = v.split_first().ok_or_else(|| {
                    SluiceError::checkpoint("STATE_STORE_CORRUPT", "empty join state value")
                })?;
                self.next_seq = self.next_seq.max(seq + 1);
                index.entry((side, key)).or_default().push(Stored {
                    seq,
                    row: row.to_vec(),
                    matched: *matched == 1,
                });
            }
        }
        for rows in index.values_mut() {
            rows.sort_by_key(|r| r.seq);
        }
        self.index = Some(index);
        Ok(())
    }

    fn encode_value(matched: bool, row: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(row.len() + 1);
        v.push(matched as u8);
        v.extend_from_slice(row);
        v
    }

    fn run(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        left: RecordBatch,
        right: RecordBatch,
        late_us: i64,
        evict_us: i64,
    ) -> Result<(RecordBatch, StateOperatorProgress)> {
        self.build_index(stores)?;
        let mut dropped = 0i64;
        let left = self.drop_late(left, self.left_event_time, late_us, &mut dropped)?;
        let right = self.drop_late(right, self.right_event_time, late_us, &mut dropped)?;
        let lkeys = self.keys(&left, &self.left_keys.clone())?;
        let rkeys = self.keys(&right, &self.right_keys.clone())?;
        let lrows = self.left_rows.convert_columns(left.columns())?;
        let rrows = self.right_rows.convert_columns(right.columns())?;

        // Candidate pairs as (left row bytes, right row bytes, left ref, right ref), where a ref
        // is (side, key, seq) of the stored row, to mark it matched.
        type Ref = (Vec<u8>, u64);
        let mut pairs_l: Vec<Vec<u8>> = Vec::new();
        let mut pairs_r: Vec<Vec<u8>> = Vec::new();
        let mut refs: Vec<(Ref, Ref)> = Vec::new();
        let mut added = 0i64;
        let index = self
            .index
            .as_mut()
            .ok_or_else(|| SluiceError::internal("join index"))?;
        // New left rows join the right state, then join the store.
        for (i, lkey) in lkeys.iter().enumerate() {
            let seq = self.next_seq;
            self.next_seq += 1;
            if let Some(k) = lkey {
                if let Some(others) = index.get(&(RIGHT, k.clone())) {
                    for o in others {
                        pairs_l.push(lrows.row(i).data().to_vec());
                        pairs_r.push(o.row.clone());
                        refs.push(((k.clone(), seq), (k.clone(), o.seq)));
                    }
                }
            }
            let key = lkey.clone().unwrap_or_default();
            index.entry((LEFT, key)).or_default().push(Stored {
                seq,
                row: lrows.row(i).data().to_vec(),
                matched: false,
            });
            added += 1;
        }
        // New right rows join the left state (new left rows included), then join the store.
        for (i, rkey) in rkeys.iter().enumerate() {
            let seq = self.next_seq;
            self.next_seq += 1;
            if let Some(k) = rkey {
                if let Some(others) = index.get(&(LEFT, k.clone())) {
                    for o in others {
                        pairs_l.push(o.row.clone());
                        pairs_r.push(rrows.row(i).data().to_vec());
                        refs.push(((k.clone(), o.seq), (k.clone(), seq)));
                    }
                }
            }
            let key = rkey.clone().unwrap_or_default();
            index.entry((RIGHT, key)).or_default().push(Stored {
                seq,
                row: rrows.row(i).data().to_vec(),
                matched: false,
            });
            added += 1;
        }
        // Keep the pairs the condition accepts; mark both rows matched.
        let lparser = self.left_rows.parser();
        let rparser = self.right_rows.parser();
        let lcols = if pairs_l.is_empty() {
            vec![]
        } else {
            self.left_rows
                .convert_rows(pairs_l.iter().map(|b| lparser.parse(b)))?
        };
        let rcols = if pairs_r.is_empty() {
            vec![]
        } else {
            self.right_rows
                .convert_rows(pairs_r.iter().map(|b| rparser.parse(b)))?
        };
        let mut outputs: Vec<RecordBatch> = Vec::new();
        if !refs.is_empty() {
            let mut cols = lcols.clone();
            cols.extend(rcols.clone());
            let joined = RecordBatch::try_new(self.pair_schema.clone(), cols)?;
            let keep: Vec<bool> = match &self.filter {
                Some(f) => {
                    let v = f.evaluate(&joined)?.into_array(joined.num_rows())?;
                    let b = v
                        .as_any()
                        .downcast_ref::<BooleanArray>()
                        .ok_or_else(|| SluiceError::internal("join filter"))?;
                    (0..b.len()).map(|i| b.is_valid(i) && b.value(i)).collect()
                }
                None => vec![true; joined.num_rows()],
            };
            let idx: Vec<u32> = keep
                .iter()
                .enumerate()
                .filter(|(_, k)| **k)
                .map(|(i, _)| i as u32)
                .collect();
            let semi = self.join_type == JoinType::LeftSemi;
            let mut first_matches: Vec<u32> = Vec::new();
            let index = self
                .index
                .as_mut()
                .ok_or_else(|| SluiceError::internal("join index"))?;
            for i in &idx {
                let ((lk, ls), (rk, rs)) = &refs[*i as usize];
                for (side, k, s) in [(LEFT, lk, ls), (RIGHT, rk, rs)] {
                    if let Some(rows) = index.get_mut(&(side, k.clone())) {
                        if let Some(r) = rows.iter_mut().find(|r| r.seq == *s) {
                            // Left semi: a left row is emitted once, on its first match.
                            if semi && side == LEFT && !r.matched {
                                first_matches.push(*i);
                            }
                            r.matched = true;
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
            } else {
                outputs.push(arrow::compute::take_record_batch(
                    &joined,
                    &UInt32Array::from(idx),
                )?);
            }
        }

        // Evict behind the state bounds; unmatched rows of an outer side are emitted now.
        let emit_left = matches!(self.join_type, JoinType::Left | JoinType::Full);
        let emit_right = matches!(self.join_type, JoinType::Right | JoinType::Full);
        let mut removed = 0i64;
        for (side, bound, emit) in [
            (LEFT, self.left_bound, emit_left),
            (RIGHT, self.right_bound, emit_right),
        ] {
            let Some(b) = bound else { continue };
            let threshold = evict_us.saturating_add(b.offset);
            let (evicted, n) = self.evict_side(side, b.column, threshold, b.inclusive)?;
            removed += n;
            if emit && !evicted.is_empty() {
                outputs.push(self.with_nulls(side, &evicted)?);
            }
        }

        // Persist: rewrite every stored row of the touched keys (matched flags change) and
        // remove the evicted ones. The index is the truth; the store mirrors it per key.
        for store in stores.iter_mut() {
            let existing: Vec<Vec<u8>> = store.iter().map(|(k, _)| k.to_vec()).collect();
            for k in existing {
                if let Some((side, key, seq)) = Self::parse_state_key(&k) {
                    let alive = self
                        .index
                        .as_ref()
                        .and_then(|ix| ix.get(&(side, key)))
                        .is_some_and(|rows| rows.iter().any(|r| r.seq == seq));
                    if !alive {
                        store.remove(&k);
                    }
                }
            }
        }
        let index = self
            .index
            .as_ref()
            .ok_or_else(|| SluiceError::internal("join index"))?;
        for ((side, key), rows) in index {
            let p = partition_of(key, self.partitions);
            for r in rows {
                let k = Self::state_key(*side, key, r.seq);
                let v = Self::encode_value(r.matched, &r.row);
                if stores[p].get(&k) != Some(v.as_slice()) {
                    stores[p].put(&k, &v);
                }
            }
        }
        let t = std::time::Instant::now();
        let (total, memory) = super::stateful::commit_stores(stores)?;
        let rows = if outputs.is_empty() {
            RecordBatch::new_empty(self.output_schema.clone())
        } else {
            concat_batches(&self.output_schema, &outputs)?
        };
        Ok((
            rows,
            StateOperatorProgress {
                operator_name: "symmetricHashJoin".into(),
                num_rows_total: total as i64,
                num_rows_updated: added,
                num_rows_removed: removed,
                commit_time_ms: t.elapsed().as_millis() as i64,
                num_rows_dropped_by_watermark: dropped,
                memory_used_bytes: memory as i64,
                num_shuffle_partitions: self.partitions as i64,
                num_state_store_instances: self.partitions as i64,
                ..Default::default()
            },
        ))
    }

    fn drop_late(
        &self,
        batch: RecordBatch,
        et: Option<usize>,
        late_us: i64,
        dropped: &mut i64,
    ) -> Result<RecordBatch> {
        let Some(c) = et else { return Ok(batch) };
        let ts = to_micros(batch.column(c))?;
        let keep: Vec<u32> = (0..batch.num_rows())
            .filter(|i| !(ts.is_valid(*i) && ts.value(*i) <= late_us))
            .map(|i| i as u32)
            .collect();
        *dropped += (batch.num_rows() - keep.len()) as i64;
        Ok(arrow::compute::take_record_batch(
            &batch,
            &UInt32Array::from(keep),
        )?)
    }

    /// Encoded join keys per row; None where a key is null (it never matches).
    fn keys(
        &self,
        batch: &RecordBatch,
        exprs: &[Arc<dyn PhysicalExpr>],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let n = batch.num_rows();
        let arrays: Vec<ArrayRef> = exprs
            .iter()
            .map(|e| e.evaluate(batch)?.into_array(n))
            .collect::<Result<_, _>>()?;
        let rows = self.key_converter.convert_columns(&arrays)?;
        Ok((0..n)
            .map(|i| {
                if arrays.iter().any(|a| a.is_null(i)) {
                    None
                } else {
                    Some(rows.row(i).data().to_vec())
                }
            })
            .collect())
    }

    /// Removes a side's rows whose `column` is before `threshold` (µs); returns the unmatched ones.
    fn evict_side(
        &mut self,
        side: u8,
        column: usize,
        threshold: i64,
        inclusive: bool,
    ) -> Result<(Vec<Vec<u8>>, i64)> {
        let conv = if side == LEFT {
            &self.left_rows
        } else {
            &self.right_rows
        };
        let parser = conv.parser();
        let index = self
            .index
            .as_mut()
            .ok_or_else(|| SluiceError::internal("join index"))?;
        let mut unmatched = Vec::new();
        let mut removed = 0i64;
        for ((s, _), rows) in index.iter_mut() {
            if *s != side || rows.is_empty() {
                continue;
            }
            let cols = conv.convert_rows(rows.iter().map(|r| parser.parse(&r.row)))?;
            let ts = to_micros(&cols[column])?;
            let mut i = 0;
            rows.retain(|r| {
                let t = ts.value(i);
                let valid = ts.is_valid(i);
                i += 1;
                let gone = valid && (t < threshold || (inclusive && t == threshold));
                if gone {
                    removed += 1;
                    if !r.matched {
                        unmatched.push(r.row.clone());
                    }
                }
                !gone
            });
        }
        index.retain(|_, rows| !rows.is_empty());
        Ok((unmatched, removed))
    }

    /// Rows of one side with nulls for the other side, in the output schema.
    fn with_nulls(&self, side: u8, rows: &[Vec<u8>]) -> Result<RecordBatch> {
        let (conv, other) = if side == LEFT {
            (&self.left_rows, &self.right_schema)
        } else {
            (&self.right_rows, &self.left_schema)
        };
        let parser = conv.parser();
        let cols = conv.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        let nulls: Vec<ArrayRef> = other
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), rows.len()))
            .collect();
        let all = if side == LEFT {
            [cols, nulls].concat()
        } else {
            [nulls, cols].concat()
        };
        Ok(RecordBatch::try_new(self.output_schema.clone(), all)?)
    }
}

impl StatefulOperator for StreamingJoin {
    fn process(
        &mut self,
        mut inputs: Vec<Vec<RecordBatch>>,
        late_watermark_ms: i64,
        eviction_watermark_ms: i64,
        batch_id: u64,
    ) -> Result<(RecordBatch, StateOperatorProgress)> {
        let right = inputs.pop().unwrap_or_default();
        let left = inputs.pop().unwrap_or_default();
        let left = concat_batches(&self.left_schema, &left)?;
        let right = concat_batches(&self.right_schema, &right)?;
        let mut providers = std::mem::take(&mut self.stores);
        let result = super::stateful::with_stores(&mut providers, batch_id, |stores| {
            self.run(
                stores,
                left,
                right,
                late_watermark_ms.saturating_mul(1000),
                eviction_watermark_ms.saturating_mul(1000),
            )
        });
        if result.is_err() {
            // The in-memory index may hold this failed batch's rows: rebuild it from the store.
            self.index = None;
        }
        self.stores = providers;
        result
    }

    fn should_run_another_batch(&self, batch_watermark_ms: i64, next_watermark_ms: i64) -> bool {
        (self.left_bound.is_some() || self.right_bound.is_some())
            && next_watermark_ms > batch_watermark_ms
    }
}
