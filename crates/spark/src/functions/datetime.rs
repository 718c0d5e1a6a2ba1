//! Spark's date and time functions that neither DataFusion nor `datafusion-spark` has:
//! the fields of a date (`year`, `month`, `dayofweek`, `weekofyear`, `quarter`, ...),
//! `window_time`, `months_between`, and `make_timestamp` / `make_timestamp_ltz` /
//! `make_timestamp_ntz` (computed row by row).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, TimestampMicrosecondArray};
use arrow::compute::{date_part, DatePart};
use arrow::datatypes::{DataType, Int32Type, TimeUnit, TimestampMicrosecondType};
use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeZone, Timelike};
use datafusion::common::{exec_err, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::rowwise::{all, spark_err, text, usage, RowFn};

const TS_US: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

/// A field of a date, as Spark numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Field {
    Year,
    Month,
    Day,
    /// 1 = Sunday ... 7 = Saturday.
    DayOfWeek,
    DayOfYear,
    /// The ISO-8601 week (weeks start on Monday; week 1 has more than three days).
    WeekOfYear,
    Quarter,
}

/// `year(d)`, `dayofweek(d)`, ...: an INT from a DATE, a TIMESTAMP or a date string (cast as
/// Spark casts it; an unparseable string is null).
#[derive(Debug, PartialEq, Eq, Hash)]
struct DateField {
    name: &'static str,
    field: Field,
    signature: Signature,
}

impl DateField {
    fn new(name: &'static str, field: Field) -> Self {
        Self {
            name,
            field,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

/// Dates and timestamps stay; anything else is read as a date (Spark's implicit cast).
fn coerce_to_date(t: &DataType) -> DataType {
    match t {
        DataType::Date32 | DataType::Timestamp(_, _) => t.clone(),
        _ => DataType::Date32,
    }
}

impl ScalarUDFImpl for DateField {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Int32)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [t] => Ok(vec![coerce_to_date(t)]),
            _ => exec_err!("{} takes one argument (a date or timestamp)", self.name),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let a = args.args[0].to_array(args.number_rows)?;
        let part = match self.field {
            Field::Year => DatePart::Year,
            Field::Month => DatePart::Month,
            Field::Day => DatePart::Day,
            Field::DayOfWeek => DatePart::DayOfWeekSunday0,
            Field::DayOfYear => DatePart::DayOfYear,
            Field::WeekOfYear => DatePart::Week,
            Field::Quarter => DatePart::Quarter,
        };
        let mut out: ArrayRef = date_part(&a, part)?;
        if self.field == Field::DayOfWeek {
            let days = out.as_primitive::<Int32Type>();
            out = Arc::new(arrow::compute::kernels::arity::unary::<_, _, Int32Type>(
                days,
                |d| d + 1,
            ));
        }
        super::columnar(out, scalar)
    }
}

/// `window_time(window)`: the event time of a time window, its end minus one microsecond.
#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowTime {
    signature: Signature,
}

impl ScalarUDFImpl for WindowTime {
    fn name(&self) -> &str {
        "window_time"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types {
            [DataType::Struct(f)] if f.iter().any(|f| f.name() == "end") => Ok(TS_US),
            _ => exec_err!(
                "window_time takes the window column of a time window aggregation (a struct \
                 with `start` and `end`), such as window_time(window)"
            ),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let a = args.args[0].to_array(args.number_rows)?;
        let s = a.as_struct();
        let Some(end) = s.column_by_name("end") else {
            return exec_err!("window_time: the window has no `end` field");
        };
        let end = arrow::compute::cast(end, &TS_US)?;
        let end = end.as_primitive::<TimestampMicrosecondType>();
        let out: TimestampMicrosecondArray = (0..s.len())
            .map(|i| (s.is_valid(i) && end.is_valid(i)).then(|| end.value(i) - 1))
            .collect();
        let out: ArrayRef = Arc::new(out);
        super::columnar(out, scalar)
    }
}

/// `months_between(t1, t2[, roundOff])`, Spark's `DateTimeUtils.monthsBetween`: whole months
/// when both days of month are equal or both are month ends, else the month difference plus the
/// remaining time over 31 days; rounded to 8 digits unless `roundOff` is false.
#[derive(Debug, PartialEq, Eq, Hash)]
struct MonthsBetween {
    signature: Signature,
}

fn is_last_day(t: &NaiveDateTime) -> bool {
    t.date().succ_opt().is_some_and(|n| n.month() != t.month())
}

pub(super) fn months_between(t1: i64, t2: i64, round_off: bool) -> Option<f64> {
    let a = chrono::DateTime::from_timestamp_micros(t1)?.naive_utc();
    let b = chrono::DateTime::from_timestamp_micros(t2)?.naive_utc();
    let month_diff = (a.year() * 12 + a.month() as i32) - (b.year() * 12 + b.month() as i32);
    if a.day() == b.day() || (is_last_day(&a) && is_last_day(&b)) {
        return Some(month_diff as f64);
    }
    let secs_in_day = |t: &NaiveDateTime| t.num_seconds_from_midnight() as i64;
    let seconds_diff =
        (a.day() as i64 - b.day() as i64) * 86_400 + secs_in_day(&a) - secs_in_day(&b);
    let diff = month_diff as f64 + seconds_diff as f64 / (31.0 * 86_400.0);
    Some(if round_off {
        (diff * 1e8).round() / 1e8
    } else {
        diff
    })
}

impl ScalarUDFImpl for MonthsBetween {
    fn name(&self) -> &str {
        "months_between"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types.len() {
            2 => Ok(vec![TS_US, TS_US]),
            3 => Ok(vec![TS_US, TS_US, DataType::Boolean]),
            _ => exec_err!("months_between takes (timestamp1, timestamp2[, roundOff])"),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = args.number_rows;
        let a = args.args[0].to_array(n)?;
        let b = args.args[1].to_array(n)?;
        let a = a.as_primitive::<TimestampMicrosecondType>();
        let b = b.as_primitive::<TimestampMicrosecondType>();
        let round = match args.args.get(2) {
            Some(r) => Some(r.to_array(n)?),
            None => None,
        };
        let out: Float64Array = (0..a.len())
            .map(|i| {
                if a.is_null(i) || b.is_null(i) {
                    return None;
                }
                let round_off = match &round {
                    Some(r) if r.is_null(i) => return None,
                    Some(r) => r.as_boolean().value(i),
                    None => true,
                };
                months_between(a.value(i), b.value(i), round_off)
            })
            .collect();
        let out: ArrayRef = Arc::new(out);
        Ok(if all_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// The functions of this file.
pub(super) fn udfs() -> Vec<ScalarUDF> {
    let fields = [
        ("year", Field::Year),
        ("month", Field::Month),
        ("day", Field::Day),
        ("dayofmonth", Field::Day),
        ("dayofweek", Field::DayOfWeek),
        ("dayofyear", Field::DayOfYear),
        ("weekofyear", Field::WeekOfYear),
        ("quarter", Field::Quarter),
    ];
    let mut out: Vec<ScalarUDF> = fields
        .into_iter()
        .map(|(n, f)| ScalarUDF::new_from_impl(DateField::new(n, f)))
        .collect();
    out.push(ScalarUDF::new_from_impl(WindowTime {
        signature: Signature::any(1, Volatility::Immutable),
    }));
    out.push(ScalarUDF::new_from_impl(MonthsBetween {
        signature: Signature::user_defined(Volatility::Immutable),
    }));
    out
}

/// `date_trunc(unit, ts)` with Spark's answer for a unit it does not know: null (`datafusion-spark`'s
/// fails the query with "Unsupported date_trunc granularity"). Spark's units: YEAR, YYYY, YY,
/// QUARTER, MONTH, MM, MON, WEEK, DAY, DD, HOUR, MINUTE, SECOND, MILLISECOND, MICROSECOND (any
/// case); the rest is the wrapped function's.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DateTruncUnits {
    inner: Arc<ScalarUDF>,
}

const DATE_TRUNC_UNITS: [&str; 15] = [
    "year",
    "yyyy",
    "yy",
    "quarter",
    "month",
    "mm",
    "mon",
    "week",
    "day",
    "dd",
    "hour",
    "minute",
    "second",
    "millisecond",
    "microsecond",
];

impl ScalarUDFImpl for DateTruncUnits {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        super::coerced_by(&self.inner, arg_types.iter().cloned())
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }
    fn simplify(
        &self,
        args: Vec<datafusion::logical_expr::Expr>,
        info: &datafusion::logical_expr::simplify::SimplifyContext,
    ) -> DfResult<datafusion::logical_expr::simplify::ExprSimplifyResult> {
        use datafusion::logical_expr::simplify::ExprSimplifyResult;
        use datafusion::logical_expr::Expr;
        let unit = match args.first() {
            Some(Expr::Literal(v, _)) => v.try_as_str().flatten().map(str::to_ascii_lowercase),
            _ => None,
        };
        if let Some(unit) = unit {
            if !DATE_TRUNC_UNITS.contains(&unit.as_str()) {
                let types = args
                    .iter()
                    .map(|a| info.get_data_type(a))
                    .collect::<DfResult<Vec<_>>>()?;
                let fields: Vec<arrow::datatypes::FieldRef> =
                    super::coerced_by(&self.inner, types)?
                        .into_iter()
                        .enumerate()
                        .map(|(i, t)| {
                            Arc::new(arrow::datatypes::Field::new(format!("arg{i}"), t, true))
                        })
                        .collect();
                let scalars: Vec<Option<&ScalarValue>> = args
                    .iter()
                    .map(|a| match a {
                        Expr::Literal(v, _) => Some(v),
                        _ => None,
                    })
                    .collect();
                let out = self.inner.return_field_from_args(
                    datafusion::logical_expr::ReturnFieldArgs {
                        arg_fields: &fields,
                        scalar_arguments: &scalars,
                    },
                )?;
                return Ok(ExprSimplifyResult::Simplified(Expr::Literal(
                    ScalarValue::try_from(out.data_type())?,
                    None,
                )));
            }
        }
        self.inner.simplify(args, info)
    }
}

/// [`DateTruncUnits`] over the registered `date_trunc`.
pub(super) fn date_trunc_udf(
    registered: impl Fn(&str) -> Option<Arc<ScalarUDF>>,
) -> Option<ScalarUDF> {
    registered("date_trunc").map(|inner| ScalarUDF::new_from_impl(DateTruncUnits { inner }))
}

fn r_ts(_: &[DataType]) -> DfResult<DataType> {
    Ok(TS_US)
}

// ---- make_timestamp ----

fn c_make_ts(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    let tz = name != "make_timestamp_ntz";
    match t.len() {
        6 => {}
        7 if tz => {}
        _ => {
            return Err(usage(
                name,
                if tz {
                    "(year, month, day, hour, min, sec[, timezone])"
                } else {
                    "(year, month, day, hour, min, sec)"
                },
            ))
        }
    }
    let mut out = all(DataType::Int32, 5);
    out.push(DataType::Float64);
    if t.len() == 7 {
        out.push(DataType::Utf8);
    }
    Ok(out)
}

fn make_ts(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let null = Ok(ScalarValue::TimestampMicrosecond(None, None));
    let mut f = [0i32; 5];
    for (i, x) in f.iter_mut().enumerate() {
        match &a[i] {
            ScalarValue::Int32(Some(v)) => *x = *v,
            _ => return null,
        }
    }
    let ScalarValue::Float64(Some(sec)) = a[5] else {
        return null;
    };
    let micros = (sec * 1e6).round() as i64;
    if !(0..=60_000_000).contains(&micros) {
        return null;
    }
    let Some(date) = NaiveDate::from_ymd_opt(f[0], f[1] as u32, f[2] as u32) else {
        return null;
    };
    let Some(base) = date.and_hms_opt(f[3] as u32, f[4] as u32, 0) else {
        return null;
    };
    let local = base + chrono::Duration::microseconds(micros);
    let utc = match a.get(6) {
        None => local,
        Some(v) => {
            let Some(name) = text(v) else { return null };
            let tz: arrow::array::timezone::Tz = name.parse().map_err(|_| {
                spark_err(
                    crate::error::class::INVALID_TIMEZONE,
                    format!("make_timestamp: the time zone {name:?} is not known"),
                )
            })?;
            match tz.from_local_datetime(&local).earliest() {
                Some(t) => t.naive_utc(),
                None => match tz
                    .from_local_datetime(&(local + chrono::Duration::hours(1)))
                    .earliest()
                {
                    Some(t) => t.naive_utc(),
                    None => return null,
                },
            }
        }
    };
    Ok(ScalarValue::TimestampMicrosecond(
        Some(utc.and_utc().timestamp_micros()),
        None,
    ))
}

/// `make_timestamp`, `make_timestamp_ltz` and `make_timestamp_ntz`.
pub(super) fn make_timestamp_udfs() -> Vec<ScalarUDF> {
    vec![
        RowFn::new("make_timestamp", c_make_ts, r_ts, make_ts).udf(),
        RowFn::new("make_timestamp_ltz", c_make_ts, r_ts, make_ts).udf(),
        RowFn::new("make_timestamp_ntz", c_make_ts, r_ts, make_ts).udf(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_between_follows_sparks_rule() {
        let t = |s: &str| {
            NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
                .unwrap()
                .and_utc()
                .timestamp_micros()
        };
        // Spark: months_between('1997-02-28 10:30:00', '1996-10-30') = 3.94959677
        assert_eq!(
            months_between(t("1997-02-28 10:30:00"), t("1996-10-30 00:00:00"), true),
            Some(3.94959677)
        );
        // Both month ends: whole months.
        assert_eq!(
            months_between(t("2026-02-28 00:00:00"), t("2026-01-31 00:00:00"), true),
            Some(1.0)
        );
    }

    #[test]
    fn date_trunc_of_an_unknown_unit_is_null() {
        // Spark 3.5.7: date_trunc('fortnight', ts) is null; 'mm' is MONTH.
        let s = sluice::Session::builder().build().unwrap();
        let b = s
            .sql(
                "SELECT date_trunc('fortnight', ts) AS bad, date_trunc('mm', ts) AS m FROM \
                 (VALUES (TIMESTAMP '2024-12-31 23:59:59')) AS t(ts)",
            )
            .unwrap()
            .collect()
            .unwrap();
        assert!(b[0].column(0).is_null(0));
        let m = arrow::compute::cast(b[0].column(1), &DataType::Utf8).unwrap();
        assert!(
            m.as_string::<i32>()
                .value(0)
                .starts_with("2024-12-01T00:00:00"),
            "{m:?}"
        );
    }
}
