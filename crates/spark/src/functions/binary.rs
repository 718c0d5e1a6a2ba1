//! Spark's string functions on BINARY arguments (`substring`/`substr`, `left`, `overlay`,
//! `lpad`/`rpad` work on bytes; `btrim` reads the bytes as text, as Spark's implicit cast does;
//! `startswith` / `endswith` / `contains` / `bit_length` / `octet_length` of bytes),
//! `regexp_substr`, `convert_timezone`, `make_ym_interval`, `rand`/`random`/`randn` with a seed,
//! and `date_part`/`extract` of seconds as DECIMAL(8,6).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array};
use arrow::datatypes::{DataType, Field, FieldRef, IntervalUnit, TimeUnit};
use chrono::TimeZone;
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::rowwise::{all, r_i32, spark_err, Dispatch, RowFn};

const TS_US: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

fn usage(name: &str, what: &str) -> datafusion::error::DataFusionError {
    spark_err(
        crate::error::class::WRONG_NUM_ARGS_WITHOUT_SUGGESTION,
        format!("{name} takes {what}"),
    )
}

fn is_binary(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
    )
}

fn bytes(v: &ScalarValue) -> Option<&[u8]> {
    match v {
        ScalarValue::Binary(Some(b))
        | ScalarValue::LargeBinary(Some(b))
        | ScalarValue::BinaryView(Some(b))
        | ScalarValue::FixedSizeBinary(_, Some(b)) => Some(b),
        _ => None,
    }
}
fn text(v: &ScalarValue) -> Option<&str> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s),
        _ => None,
    }
}
fn int(v: Option<&ScalarValue>) -> Option<Option<i32>> {
    match v {
        None => Some(None),
        Some(ScalarValue::Int32(Some(i))) => Some(Some(*i)),
        _ => None,
    }
}

fn r_first(t: &[DataType]) -> DfResult<DataType> {
    Ok(if t[0].is_null() {
        DataType::Utf8
    } else {
        t[0].clone()
    })
}
fn r_str(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Utf8)
}

/// `(bin, INT...)`, and a null first argument read as a STRING.
fn c_bin_ints(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    if t.is_empty() || t.len() > 3 {
        return Err(usage(name, "(str, pos[, len])"));
    }
    let first = if t[0].is_null() {
        DataType::Utf8
    } else {
        DataType::Binary
    };
    Ok(std::iter::once(first)
        .chain(std::iter::repeat_n(DataType::Int32, t.len() - 1))
        .collect())
}

/// Spark's `substringSQL(pos, len)` as a byte range of `n` bytes.
fn substring_range(n: usize, pos: i32, len: Option<i32>) -> (usize, usize) {
    let n = n as i64;
    let start: i64 = match pos {
        p if p > 0 => p as i64 - 1,
        p if p < 0 => n + p as i64,
        _ => 0,
    };
    let end = match len {
        None => n,
        Some(l) => start + l as i64,
    };
    let start = start.max(0);
    let end = end.min(n);
    if start >= end {
        (0, 0)
    } else {
        (start as usize, end as usize)
    }
}

fn substring(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let (Some(Some(pos)), Some(len)) = (int(a.get(1)), int(a.get(2))) else {
        return ScalarValue::try_from(ret);
    };
    if let Some(t) = text(&a[0]) {
        let chars: Vec<char> = t.chars().collect();
        let (s, e) = substring_range(chars.len(), pos, len);
        return Ok(ScalarValue::Utf8(Some(chars[s..e].iter().collect())));
    }
    let Some(b) = bytes(&a[0]) else {
        return ScalarValue::try_from(ret);
    };
    let (s, e) = substring_range(b.len(), pos, len);
    Ok(ScalarValue::Binary(Some(b[s..e].to_vec())))
}

/// `substring(str|bin, pos[, len])`: a STRING counts characters, a BINARY bytes.
fn c_substring(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    if t.is_empty() || t.len() > 3 {
        return Err(usage(name, "(str, pos[, len])"));
    }
    let first = if is_binary(&t[0]) {
        DataType::Binary
    } else {
        DataType::Utf8
    };
    Ok(std::iter::once(first)
        .chain(std::iter::repeat_n(DataType::Int32, t.len() - 1))
        .collect())
}

fn any_type(_: &DataType) -> bool {
    true
}

fn left(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let (Some(b), Some(Some(n))) = (bytes(&a[0]), int(a.get(1))) else {
        return ScalarValue::try_from(ret);
    };
    let n = (n.max(0) as usize).min(b.len());
    Ok(ScalarValue::Binary(Some(b[..n].to_vec())))
}

fn c_overlay(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        3 => Ok(vec![DataType::Binary, DataType::Binary, DataType::Int32]),
        4 => Ok(vec![
            DataType::Binary,
            DataType::Binary,
            DataType::Int32,
            DataType::Int32,
        ]),
        _ => Err(usage(name, "(input PLACING replace FROM pos [FOR len])")),
    }
}

fn overlay(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let (Some(input), Some(repl), Some(Some(pos)), Some(len)) =
        (bytes(&a[0]), bytes(&a[1]), int(a.get(2)), int(a.get(3)))
    else {
        return ScalarValue::try_from(ret);
    };
    let len = match len {
        Some(l) if l >= 0 => l as usize,
        _ => repl.len(),
    };
    let p = ((pos.max(1) - 1) as usize).min(input.len());
    let rest = (p + len).min(input.len());
    let mut out = input[..p].to_vec();
    out.extend_from_slice(repl);
    out.extend_from_slice(&input[rest..]);
    Ok(ScalarValue::Binary(Some(out)))
}

fn c_pad(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        2 => Ok(vec![DataType::Binary, DataType::Int32]),
        3 => Ok(vec![DataType::Binary, DataType::Int32, DataType::Binary]),
        _ => Err(usage(name, "(bin, len[, pad])")),
    }
}

fn pad(a: &[ScalarValue], ret: &DataType, front: bool) -> DfResult<ScalarValue> {
    let (Some(b), Some(Some(len))) = (bytes(&a[0]), int(a.get(1))) else {
        return ScalarValue::try_from(ret);
    };
    let fill: &[u8] = match a.get(2) {
        None => &[0],
        Some(v) => match bytes(v) {
            Some(p) => p,
            None => return ScalarValue::try_from(ret),
        },
    };
    let len = len.max(0) as usize;
    if len <= b.len() || fill.is_empty() {
        return Ok(ScalarValue::Binary(Some(b[..len.min(b.len())].to_vec())));
    }
    let padding: Vec<u8> = fill.iter().copied().cycle().take(len - b.len()).collect();
    let out = if front {
        [padding.as_slice(), b].concat()
    } else {
        [b, padding.as_slice()].concat()
    };
    Ok(ScalarValue::Binary(Some(out)))
}
fn lpad(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    pad(a, ret, true)
}
fn rpad(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    pad(a, ret, false)
}

fn c_strs(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        1 | 2 => Ok(vec![DataType::Utf8; t.len()]),
        _ => Err(usage(name, "(str[, trimStr])")),
    }
}

fn btrim(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let Some(s) = text(&a[0]) else {
        return Ok(ScalarValue::Utf8(None));
    };
    let chars: Vec<char> = match a.get(1) {
        None => vec![' '],
        Some(v) => match text(v) {
            Some(t) => t.chars().collect(),
            None => return Ok(ScalarValue::Utf8(None)),
        },
    };
    Ok(ScalarValue::Utf8(Some(
        s.trim_matches(|c| chars.contains(&c)).to_string(),
    )))
}

fn c_str2(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        2 => Ok(vec![DataType::Utf8; 2]),
        _ => Err(usage(name, "(str, regexp)")),
    }
}

fn regexp_substr(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let (Some(s), Some(p)) = (text(&a[0]), text(&a[1])) else {
        return Ok(ScalarValue::Utf8(None));
    };
    let re = regex::Regex::new(p).map_err(|e| {
        spark_err(
            crate::error::class::INVALID_PARAMETER_VALUE_PATTERN,
            format!("regexp_substr: the regular expression {p:?} is invalid: {e}"),
        )
    })?;
    Ok(ScalarValue::Utf8(
        re.find(s).map(|m| m.as_str().to_string()),
    ))
}

fn c_convert_tz(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        2 => Ok(vec![DataType::Utf8, TS_US]),
        3 => Ok(vec![DataType::Utf8, DataType::Utf8, TS_US]),
        _ => Err(usage(name, "([sourceTz, ]targetTz, sourceTs)")),
    }
}
fn r_ts(_: &[DataType]) -> DfResult<DataType> {
    Ok(TS_US)
}

fn zone(name: &str) -> DfResult<arrow::array::timezone::Tz> {
    name.parse().map_err(|_| {
        spark_err(
            crate::error::class::INVALID_TIMEZONE,
            format!("convert_timezone: the time zone {name:?} is not known; use a region such as 'Europe/Brussels' or an offset such as '+01:00'"),
        )
    })
}

/// `convert_timezone([sourceTz, ]targetTz, ts)`: the wall-clock time `ts` in `sourceTz` (the
/// session time zone, UTC, when absent) as wall-clock time in `targetTz`.
fn convert_timezone(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let null = Ok(ScalarValue::TimestampMicrosecond(None, None));
    let (src, tgt, ts) = match a {
        [t, ts] => (Some("UTC"), text(t), ts),
        [s, t, ts] => (text(s), text(t), ts),
        _ => return null,
    };
    let (Some(src), Some(tgt), ScalarValue::TimestampMicrosecond(Some(us), _)) = (src, tgt, ts)
    else {
        return null;
    };
    let Some(local) = chrono::DateTime::from_timestamp_micros(*us).map(|t| t.naive_utc()) else {
        return null;
    };
    let (src, tgt) = (zone(src)?, zone(tgt)?);
    let Some(instant) = src.from_local_datetime(&local).earliest() else {
        return null;
    };
    let out = instant.with_timezone(&tgt).naive_local();
    Ok(ScalarValue::TimestampMicrosecond(
        Some(out.and_utc().timestamp_micros()),
        None,
    ))
}

fn c_ym(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        0..=2 => Ok(vec![DataType::Int32; t.len()]),
        _ => Err(usage(name, "([years[, months]])")),
    }
}
fn r_ym(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Interval(IntervalUnit::YearMonth))
}

fn make_ym_interval(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let (Some(y), Some(m)) = (int(a.first()), int(a.get(1))) else {
        return Ok(ScalarValue::IntervalYearMonth(None));
    };
    let months = (y.unwrap_or(0) as i64) * 12 + m.unwrap_or(0) as i64;
    let months = i32::try_from(months).map_err(|_| {
        spark_err(
            crate::error::class::ARITHMETIC_OVERFLOW,
            "make_ym_interval: the interval overflows INTERVAL YEAR TO MONTH".into(),
        )
    })?;
    Ok(ScalarValue::IntervalYearMonth(Some(months)))
}

/// `rand`/`random`/`randn` (`[seed]`): uniform in [0, 1) or standard normal. A seed gives the
/// same sequence on every evaluation of a batch (as Spark re-seeds each partition per batch);
/// without one each evaluation draws a fresh seed.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Rand {
    name: &'static str,
    normal: bool,
    signature: Signature,
}

static SEEDS: AtomicU64 = AtomicU64::new(0x5EED);

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(state: &mut u64) -> f64 {
    (splitmix(state) >> 11) as f64 / (1u64 << 53) as f64
}

impl ScalarUDFImpl for Rand {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [] => Ok(vec![]),
            [t] if t.is_integer() || t.is_null() => Ok(vec![DataType::Int64]),
            _ => Err(usage(self.name, "([seed]), the seed an integer constant")),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let mut state = match args.args.first() {
            None => {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0);
                t ^ SEEDS.fetch_add(0x9E37_79B9, Ordering::Relaxed)
            }
            Some(ColumnarValue::Scalar(ScalarValue::Int64(s))) => s.unwrap_or(0) as u64,
            Some(_) => return Err(usage(self.name, "an integer constant seed")),
        };
        let n = args.number_rows;
        let values: Vec<f64> = (0..n)
            .map(|_| {
                if self.normal {
                    let u1 = unit(&mut state).max(f64::MIN_POSITIVE);
                    let u2 = unit(&mut state);
                    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
                } else {
                    unit(&mut state)
                }
            })
            .collect();
        let array: ArrayRef = Arc::new(Float64Array::from(values));
        Ok(ColumnarValue::Array(array))
    }
}

/// `date_part` / `datepart` / `extract`: Spark's seconds are DECIMAL(8,6) with the fraction;
/// every other field is the wrapped function's.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DatePart {
    inner: Arc<ScalarUDF>,
    signature: Signature,
}

fn is_seconds(field: Option<&ScalarValue>) -> bool {
    matches!(
        field
            .and_then(text)
            .map(|f| f.to_ascii_uppercase())
            .as_deref(),
        Some("SECOND" | "SECONDS" | "S" | "SEC" | "SECS")
    )
}

const SECONDS: DataType = DataType::Decimal128(8, 6);

fn is_interval(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_) | DataType::Duration(_))
}

/// A field of an interval as (months, days, microseconds): Spark's YEAR, MONTH, DAY, HOUR and
/// MINUTE fields.
fn interval_field(field: &str, v: &ScalarValue) -> DfResult<Option<i32>> {
    let (months, days, micros): (i64, i64, i64) = match v {
        ScalarValue::IntervalYearMonth(Some(m)) => (*m as i64, 0, 0),
        ScalarValue::IntervalDayTime(Some(d)) => (0, d.days as i64, d.milliseconds as i64 * 1000),
        ScalarValue::IntervalMonthDayNano(Some(v)) => {
            (v.months as i64, v.days as i64, v.nanoseconds / 1000)
        }
        ScalarValue::DurationMicrosecond(Some(us)) => (0, us / 86_400_000_000, us % 86_400_000_000),
        ScalarValue::DurationNanosecond(Some(ns)) => {
            let us = ns / 1000;
            (0, us / 86_400_000_000, us % 86_400_000_000)
        }
        v if v.is_null() => return Ok(None),
        other => {
            return Err(usage(
                "date_part",
                &format!("an INTERVAL, not {}", other.data_type()),
            ))
        }
    };
    let out = match field.to_ascii_uppercase().as_str() {
        "YEAR" | "Y" | "YEARS" | "YR" | "YRS" => months / 12,
        "MONTH" | "MON" | "MONS" | "MONTHS" => months % 12,
        "DAY" | "D" | "DAYS" => days,
        "HOUR" | "H" | "HOURS" | "HR" | "HRS" => micros / 3_600_000_000,
        "MINUTE" | "M" | "MIN" | "MINS" | "MINUTES" => (micros / 60_000_000) % 60,
        other => {
            return Err(spark_err(
                crate::error::class::INVALID_EXTRACT_FIELD,
                format!("Cannot extract {other:?} from an interval; use YEAR, MONTH, DAY, HOUR, MINUTE or SECOND"),
            ))
        }
    };
    Ok(Some(out as i32))
}

impl ScalarUDFImpl for DatePart {
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
        if let [f, t] = arg_types {
            if is_interval(t) {
                return Ok(vec![
                    if f.is_null() {
                        DataType::Utf8
                    } else {
                        f.clone()
                    },
                    t.clone(),
                ]);
            }
        }
        super::coerced_by(&self.inner, arg_types.iter().cloned())
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        if is_seconds(args.scalar_arguments.first().copied().flatten()) {
            return Ok(Arc::new(Field::new(self.name(), SECONDS, true)));
        }
        if args
            .arg_fields
            .get(1)
            .is_some_and(|f| is_interval(f.data_type()))
        {
            return Ok(Arc::new(Field::new(self.name(), DataType::Int32, true)));
        }
        self.inner.return_field_from_args(args)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let field = match args.args.first() {
            Some(ColumnarValue::Scalar(s)) => Some(s.clone()),
            _ => None,
        };
        let interval = args
            .arg_fields
            .get(1)
            .is_some_and(|f| is_interval(f.data_type()));
        if interval && !is_seconds(field.as_ref()) {
            let name = field.as_ref().and_then(text).unwrap_or("").to_string();
            let Some(x) = args.args.get(1) else {
                return Err(usage("date_part", "(field, source)"));
            };
            let a = x.to_array(args.number_rows)?;
            let mut out = arrow::array::Int32Builder::with_capacity(a.len());
            for i in 0..a.len() {
                out.append_option(interval_field(&name, &ScalarValue::try_from_array(&a, i)?)?);
            }
            let array: ArrayRef = Arc::new(out.finish());
            return Ok(match x {
                ColumnarValue::Scalar(_) => {
                    ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
                }
                ColumnarValue::Array(_) => ColumnarValue::Array(array),
            });
        }
        if !is_seconds(field.as_ref()) {
            return self.inner.invoke_with_args(args);
        }
        let Some(x) = args.args.get(1) else {
            return Err(usage("date_part", "(field, source)"));
        };
        let rows = args.number_rows;
        let a = x.to_array(rows)?;
        let mut out = arrow::array::Decimal128Builder::with_capacity(a.len());
        for i in 0..a.len() {
            let v = ScalarValue::try_from_array(&a, i)?;
            let micros: Option<i64> = match v {
                ScalarValue::TimestampMicrosecond(Some(us), _) => Some(us.rem_euclid(60_000_000)),
                ScalarValue::TimestampNanosecond(Some(ns), _) => {
                    Some((ns / 1000).rem_euclid(60_000_000))
                }
                ScalarValue::TimestampMillisecond(Some(ms), _) => {
                    Some((ms * 1000).rem_euclid(60_000_000))
                }
                ScalarValue::TimestampSecond(Some(s), _) => Some(s.rem_euclid(60) * 1_000_000),
                ScalarValue::IntervalMonthDayNano(Some(v)) => {
                    Some((v.nanoseconds / 1000) % 60_000_000)
                }
                ScalarValue::DurationMicrosecond(Some(us)) => Some(us % 60_000_000),
                ScalarValue::DurationNanosecond(Some(ns)) => Some((ns / 1000) % 60_000_000),
                ScalarValue::IntervalDayTime(Some(v)) => {
                    Some((v.milliseconds as i64 * 1000) % 60_000_000)
                }
                v if v.is_null() => None,
                other => {
                    return Err(usage(
                        "date_part",
                        &format!(
                            "a TIMESTAMP or INTERVAL for SECOND, not {}",
                            other.data_type()
                        ),
                    ))
                }
            };
            out.append_option(micros.map(i128::from));
        }
        let array: ArrayRef = Arc::new(out.finish().with_precision_and_scale(8, 6)?);
        Ok(match x {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(array),
        })
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        let field = match args.first() {
            Some(Expr::Literal(v, _)) => Some(v.clone()),
            _ => None,
        };
        let interval = args
            .get(1)
            .and_then(|e| info.get_data_type(e).ok())
            .is_some_and(|t| is_interval(&t));
        if interval || is_seconds(field.as_ref()) {
            return Ok(ExprSimplifyResult::Original(args));
        }
        self.inner.simplify(args, info)
    }
}

fn r_bool(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Boolean)
}

// ---- binary variants of string functions ----

fn c_bin2(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        2 => Ok(all(DataType::Binary, 2)),
        _ => Err(usage(name, "two arguments")),
    }
}
fn c_bin1(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        1 => Ok(vec![DataType::Binary]),
        _ => Err(usage(name, "one argument")),
    }
}

fn bin_pair(a: &[ScalarValue], f: fn(&[u8], &[u8]) -> bool) -> ScalarValue {
    match (bytes(&a[0]), bytes(&a[1])) {
        (Some(x), Some(y)) => ScalarValue::Boolean(Some(f(x, y))),
        _ => ScalarValue::Boolean(None),
    }
}
fn bin_starts(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    Ok(bin_pair(a, |x, y| x.starts_with(y)))
}
fn bin_ends(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    Ok(bin_pair(a, |x, y| x.ends_with(y)))
}
fn bin_contains(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    Ok(bin_pair(a, |x, y| {
        y.is_empty() || x.windows(y.len()).any(|w| w == y)
    }))
}
fn bin_bits(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    Ok(ScalarValue::Int32(bytes(&a[0]).map(|b| b.len() as i32 * 8)))
}
fn bin_octets(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    Ok(ScalarValue::Int32(bytes(&a[0]).map(|b| b.len() as i32)))
}

/// The binary variants of the registered string functions `existing` finds: `starts_with`,
/// `ends_with`, `contains`, `bit_length`, `octet_length`.
pub(super) fn string_variants(existing: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let mut out = Vec::new();
    type Alt = (
        &'static str,
        super::rowwise::Coerce,
        super::rowwise::Returns,
        super::rowwise::Eval,
    );
    let binary: [Alt; 5] = [
        ("starts_with", c_bin2, r_bool, bin_starts),
        ("ends_with", c_bin2, r_bool, bin_ends),
        ("contains", c_bin2, r_bool, bin_contains),
        ("bit_length", c_bin1, r_i32, bin_bits),
        ("octet_length", c_bin1, r_i32, bin_octets),
    ];
    for (name, c, r, e) in binary {
        if let Some(inner) = existing(name) {
            out.push(Dispatch::udf(inner, RowFn::new(name, c, r, e), is_binary));
        }
    }
    out
}

/// The binary variants (wrapping the registered string functions `existing` finds) and the
/// other functions of this file.
pub(super) fn udfs(existing: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let mut out = vec![
        RowFn::new("regexp_substr", c_str2, r_str, regexp_substr).udf(),
        RowFn::new("convert_timezone", c_convert_tz, r_ts, convert_timezone).udf(),
        RowFn::new("make_ym_interval", c_ym, r_ym, make_ym_interval).udf(),
    ];
    for (name, normal) in [("rand", false), ("random", false), ("randn", true)] {
        out.push(ScalarUDF::new_from_impl(Rand {
            name,
            normal,
            signature: Signature::user_defined(Volatility::Volatile),
        }));
    }
    if let Some(inner) = existing("date_part") {
        out.push(ScalarUDF::new_from_impl(DatePart {
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
        }));
    }
    type Alt = (
        &'static str,
        super::rowwise::Coerce,
        super::rowwise::Returns,
        super::rowwise::Eval,
        fn(&DataType) -> bool,
    );
    let wrapped: [Alt; 7] = [
        ("substring", c_substring, r_first, substring, any_type),
        ("substr", c_substring, r_first, substring, any_type),
        ("left", c_bin_ints, r_first, left, is_binary),
        ("overlay", c_overlay, r_first, overlay, is_binary),
        ("lpad", c_pad, r_first, lpad, is_binary),
        ("rpad", c_pad, r_first, rpad, is_binary),
        ("btrim", c_strs, r_str, btrim, is_binary),
    ];
    for (name, c, r, e, takes) in wrapped {
        if let Some(inner) = existing(name) {
            out.push(Dispatch::udf(inner, RowFn::new(name, c, r, e), takes));
        }
    }
    out
}
