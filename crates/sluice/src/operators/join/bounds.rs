//! State bounds of a stream-stream join (Spark's state watermarks): which conjuncts of the join
//! condition bound how old a stored row of each side can be and still match a future row of the
//! other side, and whether a join of its kind can bound the state it must keep.
//!
//! A conjunct `L + a (>=|>|<=|<) R + b` between a left and a right column, where the column of
//! the *other* side is that side's event-time column, bounds a side; so does an equality with a
//! watermarked column of the other side (`L.ts = R.ts`), or of equal windows (`p.w = a.w` of
//! window columns, or `window(b.ts, ..) = m.w` computed in the condition).

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::DataType;
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::logical_expr::{BinaryExpr, Join, JoinType, Operator};
use datafusion::prelude::Expr;

use crate::error::{class, Result, SluiceError};
use crate::operators::stateful::event_time::{event_time_column, is_event_time, window_end_micros};
use crate::operators::window::{last_window_start, WindowSpec};
use crate::state::layout::join::JoinSide;

/// How a row's time (µs) is read from one column of its side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimeOf {
    /// The column's value: a timestamp, or the `end` of a window struct.
    Value,
    /// The `end` of the window the `window(column, size, slide, start)` function gives (the
    /// window that starts last before the column's time).
    WindowEnd { size: i64, slide: i64, start: i64 },
}

/// A time of one side's rows: one of its columns, read as [`TimeOf`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Term {
    pub column: usize,
    pub of: TimeOf,
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
pub(super) struct StateBound {
    pub term: Term,
    pub offset: i64,
    pub inclusive: bool,
}

/// `{start, end}` of `window(..)` / `session_window(..)`.
fn is_window_struct(t: &DataType) -> bool {
    matches!(t, DataType::Struct(f) if f.len() == 2
        && f[0].name() == "start"
        && f[1].name() == "end"
        && matches!(f[1].data_type(), DataType::Timestamp(_, _)))
}

/// The times a term gives a column's rows.
pub(super) fn term_times(term: Term, a: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let ts = window_end_micros(a)?;
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
) -> Option<(JoinSide, usize, &'a DataType)> {
    if let Ok(i) = left.index_of_column(c) {
        return Some((JoinSide::Left, i, left.field(i).data_type()));
    }
    let i = right.index_of_column(c).ok()?;
    Some((JoinSide::Right, i, right.field(i).data_type()))
}

/// A window of one side's rows, as a time (its `end`): a window struct column, or `window(..)`
/// / `session_window(..)` over one of the side's columns.
fn window_term(e: &Expr, left: &DFSchema, right: &DFSchema) -> Option<(JoinSide, Term)> {
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
                    (JoinSide::Left, JoinSide::Right) => (ta, tb),
                    (JoinSide::Right, JoinSide::Left) => (tb, ta),
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
                (JoinSide::Left, JoinSide::Right) => (*op, ia, ka, ib, kb),
                (JoinSide::Right, JoinSide::Left) => (flip(*op), ib, kb, ia, ka),
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
    let (left_et, right_et) = (
        event_time_column(left).map(|(i, _)| i),
        event_time_column(right).map(|(i, _)| i),
    );
    let watermarked = |s: &DFSchema, i: usize| is_event_time(s.field(i));
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
pub(super) fn join_state_bounds(join: &Join) -> (Option<StateBound>, Option<StateBound>) {
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
pub(crate) fn check_stream_stream_join(join: &Join) -> Result<()> {
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
pub(super) fn with_equi_keys(join: &Join) -> (Join, Vec<bool>) {
    let mut j = join.clone();
    // Whether each key is null-safe (`<=>`, Spark's EqualNullSafe): null keys match each other.
    let mut null_safe =
        vec![join.null_equality == datafusion::common::NullEquality::NullEqualsNull; join.on.len()];
    let Some(filter) = join.filter.clone() else {
        return (j, null_safe);
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
                op: op @ (Operator::Eq | Operator::IsNotDistinctFrom),
                right: b,
            }) if only(a, left) && only(b, right) => {
                j.on.push((a.as_ref().clone(), b.as_ref().clone()));
                null_safe.push(*op == Operator::IsNotDistinctFrom);
            }
            Expr::BinaryExpr(BinaryExpr {
                left: a,
                op: op @ (Operator::Eq | Operator::IsNotDistinctFrom),
                right: b,
            }) if only(b, left) && only(a, right) => {
                j.on.push((b.as_ref().clone(), a.as_ref().clone()));
                null_safe.push(*op == Operator::IsNotDistinctFrom);
            }
            other => rest.push(other.clone()),
        }
    }
    j.filter = datafusion::logical_expr::utils::conjunction(rest);
    (j, null_safe)
}
