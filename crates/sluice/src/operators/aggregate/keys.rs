//! Grouping keys: how each key column is computed ([`KeyPart`]), where a key's event time is
//! ([`EventTimeKey`]), window assignment (a row per window it falls in) and the late-row filter.

use std::sync::Arc;

use arrow::array::UInt32Array;
use arrow::array::{Array, ArrayRef, RecordBatch, StructArray, TimestampMicrosecondArray};
use arrow::compute::take;
use datafusion::common::DFSchema;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Aggregate, Expr};
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};

use super::StreamingAggregate;
use crate::error::{Result, SluiceError};
use crate::operators::stateful::event_time::{is_event_time_expr, to_micros};
use crate::operators::window::{last_window_start, window_array, WindowSpec};

/// How one grouping column is computed.
pub(super) enum KeyPart {
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

impl KeyPart {
    /// How a windowed key part is recorded in the state schema (`StateSchema::windows`).
    pub(super) fn window_text(&self) -> Option<String> {
        let d = crate::time_text::describe_micros;
        match self {
            KeyPart::Window {
                size, slide, start, ..
            } => Some(format!(
                "window(size {}, slide {}, start {})",
                d(*size),
                d(*slide),
                d(*start)
            )),
            KeyPart::Session { gap, .. } => Some(format!("session_window(gap {})", d(*gap))),
            KeyPart::Expr(_) => None,
        }
    }
}

/// Where a key's event time is, for late rows and eviction.
#[derive(Debug, Clone, Copy)]
pub(super) enum EventTimeKey {
    /// The `end` of the window struct at this key position.
    WindowEnd(usize),
    /// A watermarked timestamp column at this key position.
    Column(usize),
}

/// The grouping keys of `agg` as physical expressions, and where the event time is among them.
pub(super) fn plan_keys(
    agg: &Aggregate,
    props: &ExecutionProps,
    planning: &PhysicalPlanningContext,
) -> Result<(Vec<KeyPart>, Option<EventTimeKey>)> {
    let input_schema: &DFSchema = agg.input.schema();
    let mut keys = Vec::new();
    let mut event_time_key = None;
    for (i, g) in agg.group_expr.iter().enumerate() {
        match WindowSpec::of(g)? {
            Some(WindowSpec::Time {
                time,
                size,
                slide,
                start,
            }) => {
                if is_event_time_expr(&time, input_schema) {
                    event_time_key = Some(EventTimeKey::WindowEnd(i));
                }
                keys.push(KeyPart::Window {
                    time: create_physical_expr(&time, input_schema, props, planning)?,
                    size,
                    slide,
                    start,
                });
            }
            Some(WindowSpec::Session { time, gap }) => {
                if is_event_time_expr(&time, input_schema) {
                    event_time_key = Some(EventTimeKey::WindowEnd(i));
                }
                keys.push(KeyPart::Session {
                    time: create_physical_expr(&time, input_schema, props, planning)?,
                    gap,
                });
            }
            None => {
                if is_event_time_expr(g, input_schema) {
                    event_time_key = Some(EventTimeKey::Column(i));
                }
                keys.push(KeyPart::Expr(create_physical_expr(
                    &simplified(g, input_schema)?,
                    input_schema,
                    props,
                    planning,
                )?));
            }
        }
    }
    Ok((keys, event_time_key))
}

/// `e` simplified as DataFusion's optimizer simplifies the expressions it sees: the aggregate is
/// planned from inside its stateful node, which the optimizer does not rewrite, and some
/// functions exist only until simplified (`datafusion-spark`'s `date_trunc` becomes DataFusion's
/// own there, and fails if it runs as it is).
fn simplified(e: &Expr, schema: &DFSchema) -> Result<Expr> {
    use datafusion::logical_expr::simplify::SimplifyContext;
    use datafusion::optimizer::simplify_expressions::ExprSimplifier;
    let info = SimplifyContext::builder()
        .with_schema(Arc::new(schema.clone()))
        .build();
    Ok(ExprSimplifier::new(info).simplify(e.clone())?)
}

/// Event time (µs) of each key row.
pub(super) fn key_event_times(
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

/// Which input row feeds which key: a row per window instance it falls in (sliding windows
/// repeat rows), late instances left out.
pub(super) struct Instances {
    /// The input row of each instance.
    pub take_idx: UInt32Array,
    /// The window key's position and each instance's window (start, end), when grouping by
    /// `window(..)`.
    pub window: Option<(usize, Vec<i64>, Vec<i64>)>,
    /// Late instances dropped.
    pub dropped: u64,
    /// Input rows that reach no window at all (every instance late): the late-row output.
    pub late_rows: Vec<u32>,
}

impl StreamingAggregate {
    /// Assigns `batch`'s rows to their key instances, dropping instances late for `late_us`
    /// (when the operator drops late rows).
    pub(super) fn assign_instances(&self, batch: &RecordBatch, late_us: i64) -> Result<Instances> {
        let drop_late = self.drops_late_rows();
        let n = batch.num_rows();
        let mut take_idx: Vec<u32> = Vec::with_capacity(n);
        let mut window = None;
        let mut dropped = 0u64;
        let mut late_rows: Vec<u32> = Vec::new();
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
            let ts = to_micros(&time.evaluate(batch)?.into_array(n)?)?;
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
                    late_rows.push(i as u32);
                }
            }
            window = Some((pos, starts, ends));
        } else {
            let late_col = match (&self.event_time_key, drop_late) {
                (Some(EventTimeKey::Column(p)), true) => match &self.keys[*p] {
                    KeyPart::Expr(e) => Some(to_micros(&e.evaluate(batch)?.into_array(n)?)?),
                    KeyPart::Window { .. } | KeyPart::Session { .. } => None,
                },
                _ => None,
            };
            for i in 0..n {
                if let Some(ts) = &late_col {
                    if ts.is_valid(i) && ts.value(i) <= late_us {
                        dropped += 1;
                        late_rows.push(i as u32);
                        continue;
                    }
                }
                take_idx.push(i as u32);
            }
        }
        Ok(Instances {
            take_idx: UInt32Array::from(take_idx),
            window,
            dropped,
            late_rows,
        })
    }

    /// The key columns of every instance (`window` is taken from the instances).
    pub(super) fn instance_keys(
        &self,
        batch: &RecordBatch,
        instances: &mut Instances,
    ) -> Result<Vec<ArrayRef>> {
        let n = batch.num_rows();
        let mut key_arrays: Vec<ArrayRef> = Vec::with_capacity(self.keys.len());
        for (i, k) in self.keys.iter().enumerate() {
            match k {
                KeyPart::Expr(e) => {
                    let a = e.evaluate(batch)?.into_array(n)?;
                    key_arrays.push(take(&a, &instances.take_idx, None)?);
                }
                KeyPart::Window { .. } => {
                    let (_, starts, ends) = instances
                        .window
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
        Ok(key_arrays)
    }

    /// Whether late rows are dropped: with an event-time key, except in complete mode.
    pub(super) fn drops_late_rows(&self) -> bool {
        self.event_time_key.is_some() && self.mode != crate::types::OutputMode::Complete
    }

    /// Keeps `batch`'s rows `idx` for the late-row side output, when it is on.
    pub(super) fn keep_late(&mut self, batch: &RecordBatch, idx: Vec<u32>) -> Result<()> {
        if let (Some(kept), false) = (&mut self.late_rows, idx.is_empty()) {
            kept.push(arrow::compute::take_record_batch(
                batch,
                &UInt32Array::from(idx),
            )?);
        }
        Ok(())
    }

    /// `batch` with the columns no aggregate reads replaced by `Null` columns (no copying).
    pub(super) fn slim(&self, batch: &RecordBatch) -> Result<RecordBatch> {
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
}
