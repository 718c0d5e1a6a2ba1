//! Spark scalar functions DataFusion has with other semantics, or not at all:
//!
//! - `regexp_replace(str, regexp, rep[, position])`: every match is replaced (DataFusion's
//!   replaces the first unless given the `g` flag), from the 1-based `position` on; `rep` is a
//!   Java replacement (`$1`, `${name}`, `\$` for a literal `$`).
//! - `sign`/`signum`, `abs` and `try_divide(interval, number)` on intervals ([`OnIntervals`]).
//! - `typeof(x)`: Spark's `DataType.simpleString` of the argument's type as Sluice maps types
//!   ([`crate::schema::spark_simple_string`]).
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

use std::cell::RefCell;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, IntervalMonthDayNano, IntervalUnit, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::rowwise::{spark_err, RowFn};

const MICROS_PER_DAY: i64 = 86_400_000_000;

// ---------------------------------------------------------------------------------------------
// regexp_replace

fn c_regexp_replace(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        3 => Ok(vec![DataType::Utf8; 3]),
        4 => Ok(vec![
            DataType::Utf8,
            DataType::Utf8,
            DataType::Utf8,
            DataType::Int32,
        ]),
        n => Err(spark_err(
            "WRONG_NUM_ARGS.WITHOUT_SUGGESTION",
            format!(
                "The `{name}` requires [3, 4] parameters but the actual number is {n}: \
                 {name}(str, regexp, rep[, position])"
            ),
        )),
    }
}

fn r_utf8(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Utf8)
}

fn utf8(v: &ScalarValue) -> Option<&str> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s),
        _ => None,
    }
}

thread_local! {
    /// The last pattern compiled on this thread (patterns are almost always one literal).
    static LAST_REGEX: RefCell<Option<(String, regex::Regex)>> = const { RefCell::new(None) };
}

fn with_regex<T>(pattern: &str, f: impl FnOnce(&regex::Regex) -> DfResult<T>) -> DfResult<T> {
    LAST_REGEX.with(|cell| {
        let mut cache = cell.borrow_mut();
        if cache.as_ref().is_none_or(|(p, _)| p != pattern) {
            let re = regex::Regex::new(pattern).map_err(|e| {
                spark_err(
                    "INVALID_PARAMETER_VALUE.PATTERN",
                    format!(
                        "The value of parameter(s) `regexp` in `regexp_replace` is invalid: \
                         '{pattern}' ({e}). Fix the regular expression."
                    ),
                )
            })?;
            *cache = Some((pattern.to_string(), re));
        }
        match cache.as_ref() {
            Some((_, re)) => f(re),
            None => Err(DataFusionError::Internal("regex cache is empty".into())),
        }
    })
}

/// Appends Java's `Matcher.appendReplacement` expansion of `rep` for one match.
fn append_replacement(
    re: &regex::Regex,
    caps: &regex::Captures,
    rep: &str,
    out: &mut String,
) -> DfResult<()> {
    let bad = |what: String| {
        DataFusionError::Execution(format!(
            "regexp_replace: the replacement {rep:?} {what}. Write `\\$` for a literal `$` and \
             `\\\\` for a literal backslash."
        ))
    };
    let groups = caps.len() - 1;
    let mut chars = rep.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) => out.push(e),
                None => return Err(bad("ends with a lone `\\`".into())),
            },
            '$' => {
                if chars.peek() == Some(&'{') {
                    chars.next();
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(ch) if ch.is_ascii_alphanumeric() => name.push(ch),
                            _ => return Err(bad("has an unclosed or invalid `${name}`".into())),
                        }
                    }
                    if !re.capture_names().any(|n| n == Some(name.as_str())) {
                        return Err(bad(format!("names no group `{name}` of the regexp")));
                    }
                    // A group that did not take part in the match adds nothing (Java's too).
                    if let Some(m) = caps.name(&name) {
                        out.push_str(m.as_str());
                    }
                    continue;
                }
                let Some(first) = chars.peek().and_then(|c| c.to_digit(10)) else {
                    return Err(bad(
                        "has a `$` not followed by a group number or `{name}`".into()
                    ));
                };
                chars.next();
                let mut group = first as usize;
                // Java takes more digits while the group number stays a group.
                while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                    let next = group * 10 + d as usize;
                    if next > groups {
                        break;
                    }
                    group = next;
                    chars.next();
                }
                if group > groups {
                    return Err(bad(format!(
                        "refers to group {group}, but the regexp has {groups} group(s)"
                    )));
                }
                if let Some(m) = caps.get(group) {
                    out.push_str(m.as_str());
                }
            }
            other => out.push(other),
        }
    }
    Ok(())
}

/// Spark's `RegExpReplace`: every match of `re` in `s` from the character `position` (1-based)
/// on replaced by `rep`; the text before `position` is kept. Matching sees only the text from
/// `position` (Java's region with anchoring bounds: `^` matches there).
fn regexp_replace_str(s: &str, re: &regex::Regex, rep: &str, position: i32) -> DfResult<String> {
    let start = match s.char_indices().nth((position - 1) as usize) {
        Some((b, _)) => b,
        None => return Ok(s.to_string()),
    };
    let region = &s[start..];
    let mut out = String::with_capacity(s.len());
    out.push_str(&s[..start]);
    let mut last = 0;
    let mut at = 0;
    while at <= region.len() {
        let Some(caps) = re.captures_at(region, at) else {
            break;
        };
        let Some(m) = caps.get(0) else { break };
        out.push_str(&region[last..m.start()]);
        append_replacement(re, &caps, rep, &mut out)?;
        last = m.end();
        at = if m.end() > m.start() {
            m.end()
        } else {
            match region[m.end()..].chars().next() {
                Some(c) => m.end() + c.len_utf8(),
                None => break,
            }
        };
    }
    out.push_str(&region[last..]);
    Ok(out)
}

fn regexp_replace(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let position = match a.get(3) {
        None => 1,
        Some(ScalarValue::Int32(Some(p))) => *p,
        Some(_) => return Ok(ScalarValue::Utf8(None)),
    };
    if position <= 0 {
        return Err(spark_err(
            "DATATYPE_MISMATCH.VALUE_OUT_OF_RANGE",
            format!(
                "Cannot resolve \"regexp_replace\" due to data type mismatch: The position must \
                 be between (0, 2147483647] (current value = {position}). Positions count from 1."
            ),
        ));
    }
    let (Some(s), Some(p), Some(rep)) = (utf8(&a[0]), utf8(&a[1]), utf8(&a[2])) else {
        return Ok(ScalarValue::Utf8(None));
    };
    with_regex(p, |re| {
        regexp_replace_str(s, re, rep, position).map(|s| ScalarValue::Utf8(Some(s)))
    })
}

// ---------------------------------------------------------------------------------------------
// Intervals: sign / signum, abs, try_divide

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
            "DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE",
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
                    "DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE",
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
                            "ARITHMETIC_OVERFLOW",
                            "abs of the smallest day-time interval overflows".into(),
                        )
                    })?),
                };
                match to_interval(a, ret)? {
                    Some(s) => Ok(s),
                    None => Err(spark_err(
                        "ARITHMETIC_OVERFLOW",
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
                "DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES",
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

// ---------------------------------------------------------------------------------------------
// typeof

/// `typeof(x)`: the name of `x`'s type; never null.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TypeOf {
    signature: Signature,
}

impl ScalarUDFImpl for TypeOf {
    fn name(&self) -> &str {
        "typeof"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if arg_types.len() != 1 {
            return Err(spark_err(
                "WRONG_NUM_ARGS.WITHOUT_SUGGESTION",
                format!(
                    "The `typeof` requires 1 parameters but the actual number is {}: typeof(expr)",
                    arg_types.len()
                ),
            ));
        }
        Ok(arg_types.to_vec())
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, _: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(Arc::new(Field::new("typeof", DataType::Utf8, false)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let name = args
            .arg_fields
            .first()
            .map(|f| crate::schema::spark_simple_string(f.data_type()))
            .unwrap_or_default();
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// The functions of this file; `existing` finds the registered functions some of them wrap.
pub(super) fn udfs(existing: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let mut out = vec![
        RowFn::new("regexp_replace", c_regexp_replace, r_utf8, regexp_replace).udf(),
        ScalarUDF::new_from_impl(TypeOf {
            signature: Signature::user_defined(Volatility::Immutable),
        }),
    ];
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
#[path = "scalars_more_tests.rs"]
mod tests;
