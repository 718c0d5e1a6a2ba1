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

use crate::error::class;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, BooleanArray, RecordBatch, StructArray,
    TimestampMicrosecondArray, UInt32Array,
};
use arrow::buffer::NullBuffer;
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::{Column, DFSchema, ScalarValue};
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
use super::window::{last_window_start, WindowSpec};
use crate::error::{Result, SluiceError};
use crate::progress::StateOperatorProgress;
use crate::state::{DefaultStateStoreProvider, StateStore, StateStoreConf};

const LEFT: u8 = 0;
const RIGHT: u8 = 1;

/// How a row's time (µs) is read from one column of its side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimeOf {
    /// The column's value: a timestamp, or the `end` of a window struct.
    Value,
    /// The `end` of the window the `window(column, size, slide, start)` function gives (the
    /// window that starts last before the column's time).
    WindowEnd { size: i64, slide: i64, start: i64 },
}

/// A time of one side's rows: one of its columns, read as [`TimeOf`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Term {
    column: usize,
    of: TimeOf,
}

impl Term {
    fn value(column: usize) -> Self {
        Term {
            column,
            of: TimeOf::Value,
        }
    }
}

/// `L - R op c` between a time of the left rows and a time of the right rows (µs).
#[derive(Debug, Clone, Copy)]
struct Constraint {
    left: Term,
    right: Term,
    op: Operator,
    c: i64,
}

/// How old a stored row of one side may be: rows whose `term` is `< watermark + offset` (or
/// `<=` when `inclusive`) can never match again.
#[derive(Debug, Clone, Copy)]
struct StateBound {
    term: Term,
    offset: i64,
    inclusive: bool,
}

/// One stored row of either side.
#[derive(Debug)]
struct Slot {
    side: u8,
    /// The encoded join key (empty for a null key: such rows never match).
    key: Arc<[u8]>,
    /// The state key suffix; rows of a key are kept in sequence order.
    seq: u64,
    /// The row, encoded by the side's row converter.
    row: Box<[u8]>,
    matched: bool,
    /// Whether the state store holds this row (false for rows added by the running batch).
    persisted: bool,
}

/// One side's rows.
#[derive(Debug, Default)]
struct SideIndex {
    /// Slots of each join key, in sequence order. All live rows of a key share its `Arc`.
    by_key: HashMap<Arc<[u8]>, Vec<usize>, foldhash::fast::RandomState>,
    /// Slots by (the time the side's state bound judges (µs), sequence number); rows without
    /// one (no bound, or a null time) are never evicted and are not here.
    by_time: BTreeMap<(i64, u64), usize>,
}

/// Both sides' state in memory: the store's rows, read once per run and then kept in step with
/// it batch by batch.
#[derive(Debug, Default)]
struct JoinIndex {
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    sides: [SideIndex; 2],
}

impl JoinIndex {
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &mut self,
        side: u8,
        key: &[u8],
        seq: u64,
        row: Box<[u8]>,
        matched: bool,
        persisted: bool,
        time: Option<i64>,
    ) -> usize {
        let s = &mut self.sides[side as usize];
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let key: Arc<[u8]> = match s.by_key.get_mut(key) {
            Some(list) => {
                let shared = list
                    .first()
                    .and_then(|first| self.slots[*first].as_ref())
                    .map(|first| first.key.clone());
                list.push(id);
                shared.unwrap_or_else(|| Arc::from(key))
            }
            None => {
                let k: Arc<[u8]> = Arc::from(key);
                s.by_key.insert(k.clone(), vec![id]);
                k
            }
        };
        self.slots[id] = Some(Slot {
            side,
            key,
            seq,
            row,
            matched,
            persisted,
        });
        if let Some(t) = time {
            s.by_time.insert((t, seq), id);
        }
        id
    }

    fn slot(&self, id: usize) -> Result<&Slot> {
        self.slots
            .get(id)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| SluiceError::internal("join state slot"))
    }

    fn slot_mut(&mut self, id: usize) -> Result<&mut Slot> {
        self.slots
            .get_mut(id)
            .and_then(|s| s.as_mut())
            .ok_or_else(|| SluiceError::internal("join state slot"))
    }

    /// Takes out a side's rows whose time is before `threshold` (or at it, when `inclusive`),
    /// in time order. Only the expired range of the time index is touched.
    fn evict(&mut self, side: u8, threshold: i64, inclusive: bool) -> Vec<Slot> {
        let s = &mut self.sides[side as usize];
        let expired = match if inclusive {
            threshold.checked_add(1)
        } else {
            Some(threshold)
        } {
            Some(at) => {
                let keep = s.by_time.split_off(&(at, 0));
                std::mem::replace(&mut s.by_time, keep)
            }
            None => std::mem::take(&mut s.by_time),
        };
        let mut out = Vec::with_capacity(expired.len());
        for id in expired.into_values() {
            if let Some(slot) = self.slots.get_mut(id).and_then(|s| s.take()) {
                self.free.push(id);
                out.push(slot);
            }
        }
        // Drop the taken slots from their keys' lists, once per key (a key's rows share its
        // `Arc`, so the pointer identifies the key).
        let mut keys: Vec<&Arc<[u8]>> = out.iter().map(|s| &s.key).collect();
        keys.sort_unstable_by_key(|k| Arc::as_ptr(k) as *const u8 as usize);
        keys.dedup_by_key(|k| Arc::as_ptr(k) as *const u8 as usize);
        for key in keys {
            if let Some(list) = s.by_key.get_mut(&**key) {
                list.retain(|id| self.slots[*id].is_some());
                if list.is_empty() {
                    s.by_key.remove(&**key);
                }
            }
        }
        out
    }
}

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
    /// Both sides' state in memory; read from the stores by the first batch of a run (and
    /// again after a failed batch).
    index: Option<JoinIndex>,
    /// The state version `index` holds: the version the next batch must open.
    index_version: u64,
    next_seq: u64,
}

fn event_time_column(schema: &DFSchema) -> Option<usize> {
    schema
        .fields()
        .iter()
        .position(|f| f.metadata().contains_key(WATERMARK_DELAY_KEY))
}

/// `{start, end}` of `window(..)` / `session_window(..)`.
fn is_window_struct(t: &DataType) -> bool {
    matches!(t, DataType::Struct(f) if f.len() == 2
        && f[0].name() == "start"
        && f[1].name() == "end"
        && matches!(f[1].data_type(), DataType::Timestamp(_, _)))
}

/// Times (µs) of a time column: a timestamp (or what casts to one), or a window struct's
/// `end`; null where the value is null.
fn time_values(a: &ArrayRef) -> Result<TimestampMicrosecondArray> {
    if let Some(s) = a.as_any().downcast_ref::<StructArray>() {
        if s.num_columns() != 2 {
            return Err(SluiceError::internal(
                "an event-time struct is not a {start, end} window",
            ));
        }
        let end = to_micros(s.column(1))?;
        let nulls = NullBuffer::union(s.nulls(), end.nulls());
        return Ok(TimestampMicrosecondArray::new(end.values().clone(), nulls));
    }
    to_micros(a)
}

/// The times a term gives a column's rows.
fn term_times(term: Term, a: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let ts = time_values(a)?;
    Ok((0..ts.len())
        .map(|i| {
            ts.is_valid(i).then(|| {
                let t = ts.value(i);
                match term.of {
                    TimeOf::Value => t,
                    TimeOf::WindowEnd { size, slide, start } => {
                        last_window_start(t, slide, start).saturating_add(size)
                    }
                }
            })
        })
        .collect())
}

/// `col`, `col + interval`, `col - interval` -> (column expr, µs offset).
fn column_plus(e: &Expr) -> Option<(&Column, i64)> {
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

/// Which side a column is of, its index there and its type.
fn locate<'a>(
    c: &Column,
    left: &'a DFSchema,
    right: &'a DFSchema,
) -> Option<(u8, usize, &'a DataType)> {
    if let Ok(i) = left.index_of_column(c) {
        return Some((LEFT, i, left.field(i).data_type()));
    }
    let i = right.index_of_column(c).ok()?;
    Some((RIGHT, i, right.field(i).data_type()))
}

/// A window of one side's rows, as a time (its `end`): a window struct column, or `window(..)`
/// / `session_window(..)` over one of the side's columns.
fn window_term(e: &Expr, left: &DFSchema, right: &DFSchema) -> Option<(u8, Term)> {
    let e = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    if let Expr::Column(c) = e {
        let (side, i, t) = locate(c, left, right)?;
        return is_window_struct(t).then_some((side, Term::value(i)));
    }
    let (time, of) = match WindowSpec::of(e).ok()?? {
        WindowSpec::Time {
            time,
            size,
            slide,
            start,
        } => (time, TimeOf::WindowEnd { size, slide, start }),
        // `session_window(ts, gap)` evaluated per row is `[ts, ts + gap)`.
        WindowSpec::Session { time, gap } => (
            time,
            TimeOf::WindowEnd {
                size: gap,
                slide: 1,
                start: 0,
            },
        ),
    };
    let mut time = &time;
    while let Expr::Cast(c) = time {
        time = &c.expr;
    }
    let Expr::Column(c) = time else { return None };
    let (side, i, t) = locate(c, left, right)?;
    matches!(
        t,
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64
    )
    .then_some((side, Term { column: i, of }))
}

/// Splits a condition into `L - R op c` constraints between left and right times.
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
        // Equal windows (window columns, or windows computed here): equal ends (Spark's
        // key-based state eviction for window join keys).
        Expr::BinaryExpr(BinaryExpr {
            left: a,
            op: Operator::Eq,
            right: b,
        }) if window_term(a, left, right).is_some() || window_term(b, left, right).is_some() => {
            if let (Some((sa, ta)), Some((sb, tb))) =
                (window_term(a, left, right), window_term(b, left, right))
            {
                let (l, r) = match (sa, sb) {
                    (LEFT, RIGHT) => (ta, tb),
                    (RIGHT, LEFT) => (tb, ta),
                    _ => return,
                };
                out.push(Constraint {
                    left: l,
                    right: r,
                    op: Operator::Eq,
                    c: 0,
                });
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
            let (Some((sa, ia, ta)), Some((sb, ib, tb))) =
                (locate(ca, left, right), locate(cb, left, right))
            else {
                return;
            };
            // Structs (windows) are only compared for equality, above.
            if matches!(ta, DataType::Struct(_)) || matches!(tb, DataType::Struct(_)) {
                return;
            }
            // L + ka op R + kb  <=>  L - R op kb - ka
            let (op, l, ka, r, kb) = match (sa, sb) {
                (LEFT, RIGHT) => (*op, ia, ka, ib, kb),
                (RIGHT, LEFT) => (flip(*op), ib, kb, ia, ka),
                _ => return,
            };
            out.push(Constraint {
                left: Term::value(l),
                right: Term::value(r),
                op,
                c: kb - ka,
            });
        }
        _ => {}
    }
}

/// Keeps the bound that evicts more: a later offset on the same kind of time (the first found
/// otherwise, as bounds on different times do not compare).
fn keep_better(slot: &mut Option<StateBound>, b: StateBound) {
    let better = match slot {
        None => true,
        Some(x) => {
            let comparable =
                x.term == b.term || (x.term.of == TimeOf::Value && b.term.of == TimeOf::Value);
            comparable
                && (b.offset > x.offset || (b.offset == x.offset && b.inclusive && !x.inclusive))
        }
    };
    if better {
        *slot = Some(b);
    }
}

/// State bounds from the constraints, given both sides' schemas.
fn state_bounds(
    cs: &[Constraint],
    left: &DFSchema,
    right: &DFSchema,
) -> (Option<StateBound>, Option<StateBound>) {
    let (left_et, right_et) = (event_time_column(left), event_time_column(right));
    let watermarked =
        |s: &DFSchema, i: usize| s.field(i).metadata().contains_key(WATERMARK_DELAY_KEY);
    // Only times can bound a side: timestamps, dates and windows.
    let is_time = |s: &DFSchema, t: Term| match t.of {
        TimeOf::WindowEnd { .. } => true,
        TimeOf::Value => {
            let dt = s.field(t.column).data_type();
            is_window_struct(dt)
                || matches!(
                    dt,
                    DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64
                )
        }
    };
    let mut lb: Option<StateBound> = None;
    let mut rb: Option<StateBound> = None;
    for c in cs {
        if !is_time(left, c.left) || !is_time(right, c.right) {
            continue;
        }
        if c.op == Operator::Eq {
            // L = R + c with a watermarked R: a future R row is after the watermark W (its event
            // time is, and so is its window's end), so L > W + c; rows with L <= W + c are done.
            if watermarked(right, c.right.column) {
                keep_better(
                    &mut lb,
                    StateBound {
                        term: c.left,
                        offset: c.c,
                        inclusive: true,
                    },
                );
            }
            if watermarked(left, c.left.column) {
                keep_better(
                    &mut rb,
                    StateBound {
                        term: c.right,
                        offset: -c.c,
                        inclusive: true,
                    },
                );
            }
            continue;
        }
        // Left rows: L - R >= c with future R >= W  =>  L >= W + c.
        if Some(c.right) == right_et.map(Term::value)
            && matches!(c.op, Operator::GtEq | Operator::Gt)
        {
            keep_better(
                &mut lb,
                StateBound {
                    term: c.left,
                    offset: c.c,
                    inclusive: c.op == Operator::Gt,
                },
            );
        }
        // Right rows: L - R <= c with future L >= W  =>  R >= W - c.
        if Some(c.left) == left_et.map(Term::value) && matches!(c.op, Operator::LtEq | Operator::Lt)
        {
            keep_better(
                &mut rb,
                StateBound {
                    term: c.right,
                    offset: -c.c,
                    inclusive: c.op == Operator::Lt,
                },
            );
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
    state_bounds(&cs, left, right)
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
            class::UNSUPPORTED_STREAMING_OPERATION,
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
                left_fields: Some(ls.fields().len()),
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
            index_version: 0,
            next_seq: 0,
        })
    }

    fn state_key(side: u8, key: &[u8], seq: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(key.len() + 13);
        Self::write_state_key(&mut k, side, key, seq);
        k
    }

    fn write_state_key(k: &mut Vec<u8>, side: u8, key: &[u8], seq: u64) {
        k.clear();
        k.push(side);
        k.extend_from_slice(&(key.len() as u32).to_le_bytes());
        k.extend_from_slice(key);
        k.extend_from_slice(&seq.to_be_bytes());
    }

    fn parse_state_key(k: &[u8]) -> Option<(u8, Vec<u8>, u64)> {
        let side = *k.first()?;
        let len = u32::from_le_bytes(k.get(1..5)?.try_into().ok()?) as usize;
        let key = k.get(5..5 + len)?.to_vec();
        let seq = u64::from_be_bytes(k.get(5 + len..13 + len)?.try_into().ok()?);
        Some((side, key, seq))
    }

    fn bound(&self, side: u8) -> Option<StateBound> {
        if side == LEFT {
            self.left_bound
        } else {
            self.right_bound
        }
    }

    fn converter(&self, side: u8) -> &RowConverter {
        if side == LEFT {
            &self.left_rows
        } else {
            &self.right_rows
        }
    }

    /// Reads both sides' state from the stores into memory, unless the index already holds the
    /// version the stores were opened at.
    fn build_index(&mut self, stores: &[&mut dyn StateStore]) -> Result<()> {
        let version = stores.first().map(|s| s.version()).unwrap_or(0);
        if self.index.is_some() && self.index_version == version {
            return Ok(());
        }
        self.index = None;
        let corrupt = |what: &str| {
            SluiceError::checkpoint(
                class::STATE_STORE_CORRUPT,
                format!("{what}; use a new checkpoint location"),
            )
        };
        // (seq, side, key, matched, row)
        type Entry<'a> = (u64, u8, Vec<u8>, bool, &'a [u8]);
        let mut entries: Vec<Entry> = Vec::new();
        for store in stores {
            for (k, v) in store.iter() {
                let (side, key, seq) = Self::parse_state_key(k)
                    .filter(|(side, _, _)| *side <= RIGHT)
                    .ok_or_else(|| corrupt("a stream-stream join state key is malformed"))?;
                let (matched, row) = v
                    .split_first()
                    .ok_or_else(|| corrupt("a stream-stream join state value is empty"))?;
                entries.push((seq, side, key, *matched == 1, row));
            }
        }
        entries.sort_unstable_by_key(|e| e.0);
        // Each side's bound times, decoding its rows once.
        let mut times: [Vec<Option<i64>>; 2] = [Vec::new(), Vec::new()];
        for side in [LEFT, RIGHT] {
            let Some(b) = self.bound(side) else { continue };
            let conv = self.converter(side);
            let parser = conv.parser();
            let rows: Vec<&[u8]> = entries
                .iter()
                .filter(|e| e.1 == side)
                .map(|e| e.4)
                .collect();
            if rows.is_empty() {
                continue;
            }
            let cols = conv.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
            times[side as usize] = term_times(b.term, &cols[b.term.column])?;
        }
        let mut index = JoinIndex::default();
        let mut nth = [0usize; 2];
        let mut next_seq = 0u64;
        for (seq, side, key, matched, row) in entries {
            let n = &mut nth[side as usize];
            let time = times[side as usize].get(*n).copied().flatten();
            *n += 1;
            index.insert(side, &key, seq, row.into(), matched, true, time);
            next_seq = next_seq.max(seq + 1);
        }
        self.next_seq = next_seq;
        self.index = Some(index);
        self.index_version = version;
        Ok(())
    }

    fn write_value(v: &mut Vec<u8>, matched: bool, row: &[u8]) {
        v.clear();
        v.push(matched as u8);
        v.extend_from_slice(row);
    }

    /// The times a side's state bound judges, per row of its batch (empty without a bound).
    fn bound_times(&self, side: u8, batch: &RecordBatch) -> Result<Vec<Option<i64>>> {
        match self.bound(side) {
            Some(b) => term_times(b.term, batch.column(b.term.column)),
            None => Ok(Vec::new()),
        }
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
        let (lkeys, lvalid) = self.keys(&left, &self.left_keys)?;
        let (rkeys, rvalid) = self.keys(&right, &self.right_keys)?;
        let lrows = self.left_rows.convert_columns(left.columns())?;
        let rrows = self.right_rows.convert_columns(right.columns())?;
        let ltimes = self.bound_times(LEFT, &left)?;
        let rtimes = self.bound_times(RIGHT, &right)?;

        let index = self
            .index
            .as_mut()
            .ok_or_else(|| SluiceError::internal("join index"))?;
        // Rows this batch adds (to put), candidate pairs as (left slot, right slot).
        let mut added: Vec<usize> = Vec::with_capacity(left.num_rows() + right.num_rows());
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        let mut next_seq = self.next_seq;
        // New left rows join the right state, then join the state.
        for (i, &valid) in lvalid.iter().enumerate() {
            let key = if valid { lkeys.row(i).data() } else { &[] };
            let id = index.insert(
                LEFT,
                key,
                next_seq,
                lrows.row(i).data().into(),
                false,
                false,
                ltimes.get(i).copied().flatten(),
            );
            next_seq += 1;
            added.push(id);
            if valid {
                if let Some(others) = index.sides[RIGHT as usize].by_key.get(key) {
                    pairs.extend(others.iter().map(|&o| (id, o)));
                }
            }
        }
        // New right rows join the left state (new left rows included), then join the state.
        for (i, &valid) in rvalid.iter().enumerate() {
            let key = if valid { rkeys.row(i).data() } else { &[] };
            let id = index.insert(
                RIGHT,
                key,
                next_seq,
                rrows.row(i).data().into(),
                false,
                false,
                rtimes.get(i).copied().flatten(),
            );
            next_seq += 1;
            added.push(id);
            if valid {
                if let Some(others) = index.sides[LEFT as usize].by_key.get(key) {
                    pairs.extend(others.iter().map(|&o| (o, id)));
                }
            }
        }
        self.next_seq = next_seq;

        // Keep the pairs the condition accepts; mark both rows matched.
        let mut outputs: Vec<RecordBatch> = Vec::new();
        // Stored rows whose matched flag this batch set (to put again).
        let mut changed: Vec<usize> = Vec::new();
        if !pairs.is_empty() {
            let joined = {
                let view: &JoinIndex = index;
                let lbytes: Vec<&[u8]> = pairs
                    .iter()
                    .map(|(l, _)| view.slot(*l).map(|s| &*s.row))
                    .collect::<Result<_>>()?;
                let rbytes: Vec<&[u8]> = pairs
                    .iter()
                    .map(|(_, r)| view.slot(*r).map(|s| &*s.row))
                    .collect::<Result<_>>()?;
                let lparser = self.left_rows.parser();
                let rparser = self.right_rows.parser();
                let mut cols = self
                    .left_rows
                    .convert_rows(lbytes.iter().map(|b| lparser.parse(b)))?;
                cols.extend(
                    self.right_rows
                        .convert_rows(rbytes.iter().map(|b| rparser.parse(b)))?,
                );
                RecordBatch::try_new(self.pair_schema.clone(), cols)?
            };
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
                for (side, id) in [(LEFT, l), (RIGHT, r)] {
                    let slot = index.slot_mut(id)?;
                    if !slot.matched {
                        // Left semi: a left row is emitted once, on its first match.
                        if semi && side == LEFT {
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
        }

        // Evict behind the state bounds (only the expired range of each side's time index);
        // unmatched rows of an outer side are emitted now.
        let emit_left = matches!(self.join_type, JoinType::Left | JoinType::Full);
        let emit_right = matches!(self.join_type, JoinType::Right | JoinType::Full);
        let mut removed = 0i64;
        // State keys (with their partition) of evicted rows the store holds.
        let mut removals: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut unmatched: [Vec<Box<[u8]>>; 2] = [Vec::new(), Vec::new()];
        for (side, bound, emit) in [
            (LEFT, self.left_bound, emit_left),
            (RIGHT, self.right_bound, emit_right),
        ] {
            let Some(b) = bound else { continue };
            let threshold = evict_us.saturating_add(b.offset);
            for slot in index.evict(side, threshold, b.inclusive) {
                removed += 1;
                if slot.persisted {
                    removals.push((
                        partition_of(&slot.key, self.partitions),
                        Self::state_key(side, &slot.key, slot.seq),
                    ));
                }
                if emit && !slot.matched {
                    unmatched[side as usize].push(slot.row);
                }
            }
        }

        // Persist this batch's changes only: evicted rows go, added rows and rows that matched
        // for the first time are (re)written.
        for (p, k) in &removals {
            stores[*p].remove(k);
        }
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for &id in added.iter().chain(&changed) {
            // Rows added and evicted in this batch are gone already: nothing to write.
            let Some(slot) = index.slots.get_mut(id).and_then(|s| s.as_mut()) else {
                continue;
            };
            Self::write_state_key(&mut k, slot.side, &slot.key, slot.seq);
            Self::write_value(&mut v, slot.matched, &slot.row);
            stores[partition_of(&slot.key, self.partitions)].put(&k, &v);
            slot.persisted = true;
        }
        for side in [LEFT, RIGHT] {
            let rows = &unmatched[side as usize];
            if !rows.is_empty() {
                outputs.push(self.with_nulls(side, rows)?);
            }
        }
        let t = std::time::Instant::now();
        let (total, memory) = super::stateful::commit_stores(stores)?;
        self.index_version = stores.first().map(|s| s.version()).unwrap_or(0);
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
                num_rows_updated: added.len() as i64,
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
        // A window event-time column is late when its end is.
        let ts = time_values(batch.column(c))?;
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

    /// Encoded join keys per row, and whether each is valid (a null key never matches).
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
        let rows = self.key_converter.convert_columns(&arrays)?;
        let valid = (0..n)
            .map(|i| arrays.iter().all(|a| !a.is_null(i)))
            .collect();
        Ok((rows, valid))
    }

    /// Rows of one side with nulls for the other side, in the output schema.
    fn with_nulls(&self, side: u8, rows: &[Box<[u8]>]) -> Result<RecordBatch> {
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
            // The in-memory index may hold this failed batch's rows: rebuild it from the store
            // (`build_index` also rebuilds it when the stores open at another version).
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
