//! Event-time windows: `window(ts, size[, slide[, start]])` and `session_window(ts, gap)`, with
//! the `{start, end}` struct Spark users know.
//!
//! Both are DataFusion scalar functions (so they work in SQL and the DataFrame API), named
//! `window` / `session_window` in the output like Spark's columns. A tumbling window is computed
//! by the function itself; sliding windows (one row in several windows) and session windows
//! (windows that merge) are assigned by the streaming aggregation, which recognises these calls
//! with [`WindowSpec::of`].

use crate::error::class;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StructArray, TimestampMicrosecondArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, TimeUnit};
use datafusion::common::{exec_err, plan_err, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::prelude::{lit, Expr};

use crate::error::{Result, SluiceError};

pub(crate) use crate::time_text::parse_interval_micros;

/// The `{start, end}` struct type of windows.
pub(crate) fn window_fields() -> Fields {
    Fields::from(vec![
        Field::new(
            "start",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
        Field::new(
            "end",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
    ])
}

/// The type of a window column: `struct<start: timestamp, end: timestamp>`.
pub(crate) fn window_type() -> DataType {
    DataType::Struct(window_fields())
}

/// Builds the window struct array from starts/ends (null where `valid` is false).
pub(crate) fn window_array(
    starts: Vec<i64>,
    ends: Vec<i64>,
    nulls: Option<NullBuffer>,
) -> ArrayRef {
    let s: ArrayRef = Arc::new(TimestampMicrosecondArray::new(starts.into(), nulls.clone()));
    let e: ArrayRef = Arc::new(TimestampMicrosecondArray::new(ends.into(), nulls.clone()));
    Arc::new(StructArray::new(window_fields(), vec![s, e], nulls))
}

/// Start of the latest window (of `slide` with offset `start`) that contains `ts` (Spark's
/// `lastStart`).
pub(crate) fn last_window_start(ts: i64, slide: i64, start: i64) -> i64 {
    ts - (ts - start).rem_euclid(slide)
}

/// What a `window`/`session_window` call in a grouping means.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WindowSpec {
    /// `window(ts, size, slide, start)`; tumbling when `slide == size`.
    Time {
        /// The time column.
        time: Expr,
        /// The window length (µs).
        size: i64,
        /// How far apart windows start (µs).
        slide: i64,
        /// The offset of window starts from the epoch (µs).
        start: i64,
    },
    /// `session_window(ts, gap)`.
    Session {
        /// The time column.
        time: Expr,
        /// The gap that closes a session (µs).
        gap: i64,
    },
}

fn literal_str(e: &Expr) -> Option<String> {
    match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
            _,
        ) => Some(s.clone()),
        Expr::Cast(c) => literal_str(&c.expr),
        Expr::Alias(a) => literal_str(&a.expr),
        _ => None,
    }
}

impl WindowSpec {
    /// Recognises `window(..)` / `session_window(..)` (possibly aliased).
    pub(crate) fn of(expr: &Expr) -> Result<Option<WindowSpec>> {
        let e = match expr {
            Expr::Alias(a) => a.expr.as_ref(),
            e => e,
        };
        let Expr::ScalarFunction(f) = e else {
            return Ok(None);
        };
        let args = &f.args;
        let dur = |i: usize| -> Result<Option<i64>> {
            match args.get(i) {
                None => Ok(None),
                Some(a) => literal_str(a)
                    .map(|s| parse_interval_micros(&s))
                    .transpose()?
                    .map(Some)
                    .ok_or_else(|| {
                        SluiceError::query(
                            class::INVALID_WINDOW,
                            "window durations must be string literals such as '5 minutes'",
                        )
                    }),
            }
        };
        match f.func.name() {
            "window" => {
                let size = dur(1)?.ok_or_else(|| {
                    SluiceError::query(class::INVALID_WINDOW, "window(ts, size) needs a size")
                })?;
                let slide = dur(2)?.unwrap_or(size);
                let start = dur(3)?.unwrap_or(0);
                if size <= 0 || slide <= 0 {
                    return Err(SluiceError::query(
                        class::INVALID_WINDOW,
                        "window size and slide must be positive",
                    ));
                }
                if slide > size {
                    return Err(SluiceError::query(
                        class::INVALID_WINDOW,
                        "The slide duration must be less than or equal to the windowDuration",
                    ));
                }
                Ok(Some(WindowSpec::Time {
                    time: args[0].clone(),
                    size,
                    slide,
                    start,
                }))
            }
            "session_window" => {
                if args.get(1).is_some_and(|a| literal_str(a).is_none()) {
                    return Err(SluiceError::not_supported_yet(format!(
                        "session_window with a gap computed per row (Spark's dynamic gap, here \
                         `{}`) is not supported yet: use a constant gap such as '5 minutes'",
                        args[1]
                    )));
                }
                let gap = dur(1)?.ok_or_else(|| {
                    SluiceError::query(class::INVALID_WINDOW, "session_window(ts, gap) needs a gap")
                })?;
                if gap <= 0 {
                    return Err(SluiceError::query(
                        class::INVALID_WINDOW,
                        "the session gap must be positive",
                    ));
                }
                Ok(Some(WindowSpec::Session {
                    time: args[0].clone(),
                    gap,
                }))
            }
            _ => Ok(None),
        }
    }
}

/// `window(ts, size[, slide[, start]])` as a function. Evaluated directly it gives the window
/// that starts last before `ts` (the tumbling window); a streaming aggregation expands sliding
/// windows itself.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct WindowUdf {
    signature: Signature,
}

impl Default for WindowUdf {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

fn coerce_time_args(name: &str, arg_types: &[DataType], max: usize) -> DfResult<Vec<DataType>> {
    if arg_types.len() < 2 || arg_types.len() > max {
        return plan_err!(
            "{name} takes a time column and {} duration string(s)",
            max - 1
        );
    }
    let mut out = vec![DataType::Timestamp(TimeUnit::Microsecond, None)];
    out.extend(std::iter::repeat_n(DataType::Utf8, arg_types.len() - 1));
    Ok(out)
}

fn scalar_duration(name: &str, v: &ColumnarValue) -> DfResult<i64> {
    match v {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
        ) => parse_interval_micros(s).or_else(|e| exec_err!("{name}: {}", e.message())),
        _ => exec_err!("{name}: durations must be constant strings such as '5 minutes'"),
    }
}

/// The window column keeps its time column's watermark marker, as Spark's does: a window over
/// the event time is itself an event-time column (its `end` is compared with the watermark),
/// which is what lets a second aggregation or a join group by it.
fn window_field(args: &ReturnFieldArgs) -> FieldRef {
    let mut field = Field::new("window", window_type(), true);
    if let Some(marker) = args
        .arg_fields
        .first()
        .and_then(|f| super::stateful::event_time::marker_of(f))
    {
        field = field.with_metadata(marker);
    }
    Arc::new(field)
}

fn time_array(v: &ColumnarValue, rows: usize) -> DfResult<TimestampMicrosecondArray> {
    let a = v.to_array(rows)?;
    let a = arrow::compute::cast(&a, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    Ok(a.as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .cloned()
        .unwrap_or_else(|| TimestampMicrosecondArray::from(vec![None::<i64>; rows])))
}

impl ScalarUDFImpl for WindowUdf {
    fn name(&self) -> &str {
        "window"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        coerce_time_args("window", arg_types, 4)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(window_type())
    }
    fn schema_name(&self, _args: &[Expr]) -> DfResult<String> {
        Ok("window".into())
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(window_field(&args))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let size = scalar_duration("window", &args.args[1])?;
        let slide = match args.args.get(2) {
            Some(v) => scalar_duration("window", v)?,
            None => size,
        };
        let start = match args.args.get(3) {
            Some(v) => scalar_duration("window", v)?,
            None => 0,
        };
        if size <= 0 || slide <= 0 {
            return exec_err!("window: size and slide must be positive");
        }
        let ts = time_array(&args.args[0], args.number_rows)?;
        let mut starts = Vec::with_capacity(ts.len());
        let mut ends = Vec::with_capacity(ts.len());
        for i in 0..ts.len() {
            let s = last_window_start(ts.value(i), slide, start);
            starts.push(s);
            ends.push(s + size);
        }
        Ok(ColumnarValue::Array(window_array(
            starts,
            ends,
            ts.nulls().cloned(),
        )))
    }
}

/// `session_window(ts, gap)`: per row `[ts, ts + gap)`; the streaming aggregation merges
/// overlapping sessions of a key.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct SessionWindowUdf {
    signature: Signature,
}

impl Default for SessionWindowUdf {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SessionWindowUdf {
    fn name(&self) -> &str {
        "session_window"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        coerce_time_args("session_window", arg_types, 2)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(window_type())
    }
    fn schema_name(&self, _args: &[Expr]) -> DfResult<String> {
        Ok("session_window".into())
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(window_field(&args))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let gap = scalar_duration("session_window", &args.args[1])?;
        let ts = time_array(&args.args[0], args.number_rows)?;
        let starts: Vec<i64> = ts.values().to_vec();
        let ends: Vec<i64> = starts.iter().map(|s| s + gap).collect();
        Ok(ColumnarValue::Array(window_array(
            starts,
            ends,
            ts.nulls().cloned(),
        )))
    }
}

/// The functions to register in a session.
pub(crate) fn window_udfs() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(WindowUdf::default()),
        ScalarUDF::new_from_impl(SessionWindowUdf::default()),
    ]
}

/// `window(col("ts"), "5 minutes")`: a tumbling window.
pub fn window(time: Expr, size: &str) -> Expr {
    ScalarUDF::new_from_impl(WindowUdf::default()).call(vec![time, lit(size)])
}

/// `window(col("ts"), "10 minutes", "5 minutes")`: a sliding window.
pub fn sliding_window(time: Expr, size: &str, slide: &str) -> Expr {
    ScalarUDF::new_from_impl(WindowUdf::default()).call(vec![time, lit(size), lit(slide)])
}

/// `session_window(col("ts"), "5 minutes")`.
pub fn session_window(time: Expr, gap: &str) -> Expr {
    ScalarUDF::new_from_impl(SessionWindowUdf::default()).call(vec![time, lit(gap)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse_like_spark() {
        assert_eq!(parse_interval_micros("10 minutes").unwrap(), 600_000_000);
        assert_eq!(
            parse_interval_micros("1 hour 30 seconds").unwrap(),
            3_630_000_000
        );
        assert_eq!(
            parse_interval_micros("interval 5 second").unwrap(),
            5_000_000
        );
        assert_eq!(parse_interval_micros("1 day").unwrap(), 86_400_000_000);
        assert!(parse_interval_micros("1 month").is_err());
        assert!(parse_interval_micros("ten minutes").is_err());
    }

    #[test]
    fn window_start_is_the_floor_to_the_slide() {
        let m = 60_000_000;
        assert_eq!(last_window_start(7 * m, 5 * m, 0), 5 * m);
        assert_eq!(last_window_start(5 * m, 5 * m, 0), 5 * m);
        assert_eq!(last_window_start(-m, 5 * m, 0), -5 * m);
        assert_eq!(last_window_start(7 * m, 5 * m, 3 * m), 3 * m);
    }
}
