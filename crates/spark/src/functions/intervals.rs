//! Spark's `sign`/`signum`, `abs` and `try_divide(interval, number)` on intervals
//! ([`OnIntervals`]): other arguments go to the registered functions.
//!
//! Intervals: Sluice's interval literals are Arrow `Interval(MonthDayNano)`, where Spark has
//! two ANSI interval types, `INTERVAL YEAR TO MONTH` (months) and `INTERVAL DAY TO SECOND`
//! (microseconds). A value with months only is read as a year-month interval, one without months
//! as a day-time interval (a day is 24 hours), and one with both (Spark's `CalendarInterval`,
//! which these functions do not take in Spark either) is an error. The result keeps the
//! argument's interval type: `Interval(YearMonth)` (e.g. `make_ym_interval`) and
//! `Duration(Microsecond)` are Spark's types, `Interval(MonthDayNano)` (every interval literal)
//! stays so, which differs from Spark's result type until the literals are typed as Spark types
//! them.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, IntervalMonthDayNano, IntervalUnit, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::rowwise::spark_err;

const MICROS_PER_DAY: i64 = 86_400_000_000;

fn is_interval(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_) | DataType::Duration(_))
}

/// One of Spark's ANSI interval values.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ansi {
    Months(i64),
    Micros(i64),
}

fn mdn_kind(v: &IntervalMonthDayNano) -> DfResult<Ansi> {
    let time = v.days as i64 * MICROS_PER_DAY + v.nanoseconds / 1000;
    match (v.months, time) {
        (m, 0) => Ok(Ansi::Months(m as i64)),
        (0, t) => Ok(Ansi::Micros(t)),
        _ => Err(spark_err(
            crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
            format!(
                "the interval {} months {} days {} ns mixes months with days or time (Spark's \
                 CalendarInterval); this function takes an INTERVAL YEAR TO MONTH or an \
                 INTERVAL DAY TO SECOND. Split it into a year-month and a day-time interval.",
                v.months, v.days, v.nanoseconds
            ),
        )),
    }
}

/// The ANSI interval in `v`, `None` for a null.
fn ansi_value(v: &ScalarValue) -> DfResult<Option<Ansi>> {
    Ok(match v {
        ScalarValue::IntervalYearMonth(Some(m)) => Some(Ansi::Months(*m as i64)),
        ScalarValue::IntervalDayTime(Some(d)) => Some(Ansi::Micros(
            d.days as i64 * MICROS_PER_DAY + d.milliseconds as i64 * 1000,
        )),
        ScalarValue::IntervalMonthDayNano(Some(v)) => Some(mdn_kind(v)?),
        ScalarValue::DurationSecond(Some(s)) => Some(Ansi::Micros(s.saturating_mul(1_000_000))),
        ScalarValue::DurationMillisecond(Some(s)) => Some(Ansi::Micros(s.saturating_mul(1000))),
        ScalarValue::DurationMicrosecond(Some(s)) => Some(Ansi::Micros(*s)),
        ScalarValue::DurationNanosecond(Some(s)) => Some(Ansi::Micros(s / 1000)),
        _ => None,
    })
}

/// The result type for an interval argument of type `t`: Spark's ANSI interval types stay
/// (`Interval(DayTime)` as `Duration(Microsecond)`), `Interval(MonthDayNano)` stays so. (A
/// literal's value cannot choose the type: the planner must type `-INTERVAL '1-1' YEAR TO
/// MONTH`, a sum of literals, before it folds it to one.)
fn interval_result_type(t: &DataType) -> DataType {
    match t {
        DataType::Interval(IntervalUnit::DayTime) | DataType::Duration(_) => {
            DataType::Duration(TimeUnit::Microsecond)
        }
        other => other.clone(),
    }
}

/// `v` as a value of the interval type `ret`; `None` when it does not fit.
fn to_interval(v: Ansi, ret: &DataType) -> DfResult<Option<ScalarValue>> {
    Ok(match (v, ret) {
        (Ansi::Months(m), DataType::Interval(IntervalUnit::YearMonth)) => i32::try_from(m)
            .ok()
            .map(|m| ScalarValue::IntervalYearMonth(Some(m))),
        (Ansi::Micros(us), DataType::Duration(TimeUnit::Microsecond)) => {
            Some(ScalarValue::DurationMicrosecond(Some(us)))
        }
        (Ansi::Months(m), DataType::Interval(IntervalUnit::MonthDayNano)) => i32::try_from(m)
            .ok()
            .map(|m| ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(m, 0, 0)))),
        (Ansi::Micros(us), DataType::Interval(IntervalUnit::MonthDayNano)) => {
            let days = i32::try_from(us / MICROS_PER_DAY).ok();
            let nanos = (us % MICROS_PER_DAY).checked_mul(1000);
            match (days, nanos) {
                (Some(d), Some(n)) => Some(ScalarValue::IntervalMonthDayNano(Some(
                    IntervalMonthDayNano::new(0, d, n),
                ))),
                _ => None,
            }
        }
        (v, t) => {
            return Err(DataFusionError::Internal(format!(
                "interval result {v:?} as {t}"
            )))
        }
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Sign,
    Abs,
    TryDivide,
}

/// A registered function (`signum`, `abs`, `try_divide`) with Spark's meaning on an interval
/// first argument; other calls go to the registered function unchanged.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct OnIntervals {
    op: Op,
    inner: Arc<ScalarUDF>,
    signature: Signature,
}

impl OnIntervals {
    fn udf(op: Op, inner: Arc<ScalarUDF>) -> ScalarUDF {
        ScalarUDF::new_from_impl(OnIntervals {
            op,
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
        })
    }

    fn divisor_type(t: &DataType) -> DfResult<DataType> {
        Ok(match t {
            DataType::Null
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32 => DataType::Int64,
            DataType::Decimal128(_, _) | DataType::Float32 | DataType::Float64 => DataType::Float64,
            other => {
                return Err(spark_err(
                    crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                    format!(
                        "Cannot resolve \"try_divide(interval, {})\" due to data type mismatch: \
                         the divisor of an interval must be a number (NUMERIC), not {}.",
                        crate::schema::spark_type_name(other),
                        crate::schema::spark_type_name(other)
                    ),
                ))
            }
        })
    }

    fn row(&self, args: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
        let Some(v) = ansi_value(&args[0])? else {
            return ScalarValue::try_from(ret);
        };
        match self.op {
            Op::Sign => {
                let x = match v {
                    Ansi::Months(m) => m.signum(),
                    Ansi::Micros(u) => u.signum(),
                };
                Ok(ScalarValue::Float64(Some(x as f64)))
            }
            Op::Abs => {
                let a = match v {
                    Ansi::Months(m) => Ansi::Months(m.abs()),
                    Ansi::Micros(u) => Ansi::Micros(u.checked_abs().ok_or_else(|| {
                        spark_err(
                            crate::error::class::ARITHMETIC_OVERFLOW,
                            "abs of the smallest day-time interval overflows".into(),
                        )
                    })?),
                };
                match to_interval(a, ret)? {
                    Some(s) => Ok(s),
                    None => Err(spark_err(
                        crate::error::class::ARITHMETIC_OVERFLOW,
                        format!("abs of the interval {v:?} overflows"),
                    )),
                }
            }
            Op::TryDivide => {
                // Spark rounds the quotient HALF_UP; a zero divisor or an overflow is null.
                let x = match v {
                    Ansi::Months(m) => m,
                    Ansi::Micros(u) => u,
                };
                let q = match &args[1] {
                    ScalarValue::Int64(Some(0)) => None,
                    ScalarValue::Int64(Some(d)) => {
                        let (x, d) = (x as i128, *d as i128);
                        let (q, r) = (x / d, x % d);
                        let q = if 2 * r.abs() >= d.abs() {
                            q + if (x < 0) == (d < 0) { 1 } else { -1 }
                        } else {
                            q
                        };
                        i64::try_from(q).ok()
                    }
                    ScalarValue::Float64(Some(d)) if *d == 0.0 => None,
                    ScalarValue::Float64(Some(d)) => {
                        let q = (x as f64 / d).round();
                        (q.is_finite() && q.abs() < i64::MAX as f64).then_some(q as i64)
                    }
                    _ => None,
                };
                let q = q.map(|q| match v {
                    Ansi::Months(_) => Ansi::Months(q),
                    Ansi::Micros(_) => Ansi::Micros(q),
                });
                match q {
                    Some(q) => Ok(to_interval(q, ret)?
                        .map(Ok)
                        .unwrap_or_else(|| ScalarValue::try_from(ret))?),
                    None => ScalarValue::try_from(ret),
                }
            }
        }
    }
}

impl ScalarUDFImpl for OnIntervals {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match (self.op, arg_types) {
            (Op::Sign | Op::Abs, [t]) if is_interval(t) => Ok(vec![t.clone()]),
            (Op::TryDivide, [t, d]) if is_interval(t) => {
                Ok(vec![t.clone(), Self::divisor_type(d)?])
            }
            (Op::TryDivide, [n, t]) if is_interval(t) && !is_interval(n) => Err(spark_err(
                crate::error::class::DATATYPE_MISMATCH_BINARY_OP_DIFF_TYPES,
                format!(
                    "Cannot resolve \"try_divide({}, interval)\" due to data type mismatch: a \
                     number cannot be divided by an interval; divide the interval by the number.",
                    crate::schema::spark_type_name(n)
                ),
            )),
            _ => super::coerced_by(&self.inner, arg_types.iter().cloned()),
        }
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types.first() {
            Some(t) if is_interval(t) => match self.op {
                Op::Sign => Ok(DataType::Float64),
                _ => Ok(interval_result_type(t)),
            },
            _ => self.inner.return_type(arg_types),
        }
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        match args.arg_fields.first().map(|f| f.data_type()) {
            Some(t) if is_interval(t) => {
                let ret = match self.op {
                    Op::Sign => DataType::Float64,
                    _ => interval_result_type(t),
                };
                Ok(Arc::new(Field::new(self.name(), ret, true)))
            }
            _ => self.inner.return_field_from_args(args),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if !args
            .arg_fields
            .first()
            .is_some_and(|f| is_interval(f.data_type()))
        {
            return self.inner.invoke_with_args(args);
        }
        let ret = args.return_field.data_type().clone();
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = if scalar { 1 } else { args.number_rows };
        let mut out = Vec::with_capacity(n);
        let mut row = Vec::with_capacity(args.args.len());
        for i in 0..n {
            row.clear();
            for a in &args.args {
                row.push(match a {
                    ColumnarValue::Scalar(s) => s.clone(),
                    ColumnarValue::Array(a) => ScalarValue::try_from_array(a, i)?,
                });
            }
            out.push(self.row(&row, &ret)?);
        }
        if scalar {
            return Ok(ColumnarValue::Scalar(
                out.pop()
                    .map(Ok)
                    .unwrap_or_else(|| ScalarValue::try_from(&ret))?,
            ));
        }
        if out.is_empty() {
            return Ok(ColumnarValue::Array(arrow::array::new_empty_array(&ret)));
        }
        Ok(ColumnarValue::Array(ScalarValue::iter_to_array(out)?))
    }
}

/// `signum`, `abs` and `try_divide` on intervals, wrapping the registered functions `existing`
/// finds.
pub(super) fn udfs(existing: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let mut out = Vec::new();
    for (name, op) in [
        ("signum", Op::Sign),
        ("abs", Op::Abs),
        ("try_divide", Op::TryDivide),
    ] {
        if let Some(inner) = existing(name) {
            out.push(OnIntervals::udf(op, inner));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! Spark's values (PySpark 3.5.7).

    use arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit};
    use datafusion::common::ScalarValue;

    use crate::functions::testing::{error, row, session};

    #[test]
    fn sign_and_abs_of_intervals() {
        let s = session();
        let r = row(
            &s,
            "SELECT sign(INTERVAL -'100' YEAR), signum(INTERVAL 0 DAY),
                    sign(INTERVAL '-1 02:00:00' DAY TO SECOND), sign(40),
                    abs(INTERVAL -'1-1' YEAR TO MONTH), abs(INTERVAL '-1 02:00:00' DAY TO SECOND)",
        );
        assert_eq!(r[0].1, ScalarValue::Float64(Some(-1.0)));
        assert_eq!(r[1].1, ScalarValue::Float64(Some(0.0)));
        assert_eq!(r[2].1, ScalarValue::Float64(Some(-1.0)));
        assert_eq!(r[3].1, ScalarValue::Float64(Some(1.0)));
        // Interval literals are Interval(MonthDayNano) in Sluice; the result keeps the type.
        let mdn =
            |m, d, ns| ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(m, d, ns)));
        assert_eq!(r[4].1, mdn(13, 0, 0));
        assert_eq!(r[5].1, mdn(0, 1, 7_200_000_000_000));
        // Spark's own interval types stay: abs of a year-month interval is one.
        let r = row(
            &s,
            "SELECT abs(make_ym_interval(-1, -1)), sign(make_ym_interval(0, -3)),
                    abs(make_ym_interval(NULL, 1)), sign(make_ym_interval(NULL, 1))",
        );
        assert_eq!(r[0].0, DataType::Interval(IntervalUnit::YearMonth));
        assert_eq!(r[0].1, ScalarValue::IntervalYearMonth(Some(13)));
        assert_eq!(r[1].1, ScalarValue::Float64(Some(-1.0)));
        assert_eq!(r[2].1, ScalarValue::IntervalYearMonth(None));
        assert_eq!(r[3].1, ScalarValue::Float64(None));
        // Months and days together are Spark's CalendarInterval, which abs does not take.
        let e = error(&s, "SELECT abs(INTERVAL 1 MONTH + INTERVAL 2 DAYS)");
        assert!(e.contains("CalendarInterval"), "{e}");
    }

    #[test]
    fn try_divide_of_intervals_rounds_half_up_and_is_null_on_zero() {
        let s = session();
        let r = row(
            &s,
            "SELECT try_divide(interval 2 month, 2), try_divide(interval 3 month, 2),
                    try_divide(interval 5 month, 2.5), try_divide(interval '1' day, 3),
                    try_divide(interval 1 day, 0), try_divide(interval 1 month, NULL),
                    try_divide(3, 2)",
        );
        let mdn =
            |m, d, ns| ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(m, d, ns)));
        assert_eq!(r[0].1, mdn(1, 0, 0));
        assert_eq!(r[1].1, mdn(2, 0, 0));
        assert_eq!(r[2].1, mdn(2, 0, 0));
        assert_eq!(r[3].1, mdn(0, 0, 28_800_000_000_000));
        assert_eq!(r[4].1, ScalarValue::IntervalMonthDayNano(None));
        assert!(r[5].1.is_null());
        assert_eq!(r[6].1, ScalarValue::Float64(Some(1.5)));
        // A year-month interval stays one.
        let r = row(
            &s,
            "SELECT try_divide(make_ym_interval(0, 5), 2), try_divide(make_ym_interval(0, -5), 2)",
        );
        assert_eq!(r[0].1, ScalarValue::IntervalYearMonth(Some(3)));
        assert_eq!(r[1].1, ScalarValue::IntervalYearMonth(Some(-3)));
        let e = error(&s, "SELECT try_divide(2, interval 1 month)");
        assert!(e.contains("BINARY_OP_DIFF_TYPES"), "{e}");
        let e = error(&s, "SELECT try_divide(interval 1 month, 'x')");
        assert!(
            e.contains("UNEXPECTED_INPUT_TYPE") && e.contains("try_divide"),
            "{e}"
        );
    }
}
