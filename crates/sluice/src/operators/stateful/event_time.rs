//! Which column carries event time, and event times as microseconds.
//!
//! `with_watermark(column, delay)` marks its column with the field metadata
//! [`WATERMARK_DELAY_KEY`] (`spark.watermarkDelayMs`, the delay in ms, as Spark does); a window
//! over a marked column is marked too (`window(..)`'s return field). Every operator asks this
//! module, never the metadata, which column is event time.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StructArray, TimestampMicrosecondArray};
use arrow::buffer::NullBuffer;
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::common::{DFSchema, ExprSchema};
use datafusion::prelude::Expr;

use crate::error::{Result, SluiceError};
use crate::operators::watermark::WATERMARK_DELAY_KEY;
use crate::state::layout::KeyLayout;
use crate::state::PairTimes;

use super::context::StateLocation;

/// The watermark delay (ms) of an event-time field; `None` for a field without the marker.
pub(crate) fn delay_ms(field: &Field) -> Option<i64> {
    field
        .metadata()
        .get(WATERMARK_DELAY_KEY)
        .and_then(|d| d.parse().ok())
}

/// Whether `field` carries event time (has the watermark marker).
pub(crate) fn is_event_time(field: &Field) -> bool {
    delay_ms(field).is_some()
}

/// The first event-time column of `schema`: its index and watermark delay (ms).
pub(crate) fn event_time_column(schema: &DFSchema) -> Option<(usize, i64)> {
    schema
        .fields()
        .iter()
        .enumerate()
        .find_map(|(i, f)| delay_ms(f).map(|d| (i, d)))
}

/// True when `expr` is an event-time column of `schema` (through aliases and casts).
pub(crate) fn is_event_time_expr(expr: &Expr, schema: &DFSchema) -> bool {
    let e = match expr {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    match e {
        Expr::Column(c) => schema
            .field_from_column(c)
            .map(|f| is_event_time(f))
            .unwrap_or(false),
        Expr::Cast(c) => is_event_time_expr(&c.expr, schema),
        _ => false,
    }
}

/// The marker metadata of `from`, when it carries event time, to put on a field derived from it
/// (a window over an event-time column is an event-time column, as in Spark).
pub(crate) fn marker_of(from: &Field) -> Option<HashMap<String, String>> {
    from.metadata()
        .get(WATERMARK_DELAY_KEY)
        .map(|delay| [(WATERMARK_DELAY_KEY.to_string(), delay.clone())].into())
}

/// Event times (µs) of a time column. A window struct (`window(..)`, `session_window(..)`)
/// stands for its `end`, as Spark compares a window event-time column with the watermark.
pub(crate) fn to_micros(a: &ArrayRef) -> Result<TimestampMicrosecondArray> {
    if let Some(s) = a.as_any().downcast_ref::<StructArray>() {
        let end = s
            .column_by_name("end")
            .ok_or_else(|| SluiceError::internal("an event-time struct without an end field"))?;
        return to_micros(end);
    }
    let c = cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    c.as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .cloned()
        .ok_or_else(|| SluiceError::internal("timestamp cast"))
}

/// Like [`to_micros`], but a window struct must be a `{start, end}` pair and a null window is a
/// null time (its `end` may hold a value under the struct's null): the times of a join side's
/// time column.
pub(crate) fn window_end_micros(a: &ArrayRef) -> Result<TimestampMicrosecondArray> {
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

/// A store's time index by an event time in the key: `pick` finds it among the decoded key
/// columns (fields `key_fields`); a key that does not decode is corrupt state (`what`, at
/// `location`).
pub(crate) fn key_event_time_index(
    key_fields: &[Arc<Field>],
    location: &StateLocation,
    what: &'static str,
    pick: impl Fn(&[ArrayRef]) -> Result<TimestampMicrosecondArray> + Send + Sync + 'static,
) -> Result<PairTimes> {
    let types: Vec<_> = key_fields.iter().map(|f| f.data_type().clone()).collect();
    let key = KeyLayout::new(&types)?;
    let location = location.clone();
    Ok(PairTimes {
        times: Arc::new(move |p, keys: &[&[u8]], _: &[&[u8]]| {
            let arrays = key
                .decode_trusted(keys)
                .map_err(|e| location.corrupt(Some(p), what, e))?;
            let ts = pick(&arrays)?;
            Ok((0..keys.len())
                .map(|i| ts.is_valid(i).then(|| ts.value(i)))
                .collect())
        }),
        from_key: true,
    })
}
