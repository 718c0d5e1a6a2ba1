//! Spark's percentiles: exact `percentile(x, p[, frequency])` and `median(x)` (counts per
//! distinct value, as Spark's `Percentile` keeps them), and `percentile_approx` /
//! `approx_percentile(x, p[, accuracy])`: Spark's `ApproximatePercentile`, a Greenwald-Khanna
//! summary (`QuantileSummaries`, relative error `1 / accuracy`) whose results are input
//! values. The summary is Spark's algorithm step for step (head buffer of 50000, compression
//! threshold 10000, merge and query as Spark's), so results match Spark's, and its memory is
//! bounded by the accuracy.
//!
//! `p` is a constant in `[0, 1]` or an array of them (the result is then an array). Numbers
//! are read as doubles; year-month and day-time intervals give intervals back.
//!
//! State: `percentile` keeps two lists (distinct values as doubles, counts); the GK summary is
//! one binary field (its samples, compressed as Spark serialises them), so a streaming
//! aggregation stores and merges both across micro-batches.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{
    DataType, Field, FieldRef, Float64Type, Int64Type, IntervalUnit, Schema, TimeUnit,
};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Signature, Volatility,
};
use datafusion::physical_expr::PhysicalExpr;

use super::aggregates::agg_err;

/// The value of a constant argument expression (folded or not); `None` when it reads columns.
pub(super) fn constant(e: &Arc<dyn PhysicalExpr>) -> DfResult<Option<ScalarValue>> {
    if !datafusion::physical_expr::utils::collect_columns(e).is_empty() {
        return Ok(None);
    }
    let batch = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    Ok(Some(match e.evaluate(&batch)? {
        ColumnarValue::Scalar(s) => s,
        ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
    }))
}

fn non_foldable(name: &str, what: &str) -> DataFusionError {
    agg_err(
        crate::error::class::DATATYPE_MISMATCH_NON_FOLDABLE_INPUT,
        format!("the {what} of `{name}` must be a constant, not a column"),
    )
}

/// The percentages argument: its values and whether it was an array.
fn percentages(name: &str, args: &AccumulatorArgs, i: usize) -> DfResult<(Vec<f64>, bool)> {
    let Some(v) = constant(&args.exprs[i])? else {
        return Err(non_foldable(name, "percentage"));
    };
    let bad = || {
        agg_err(
            crate::error::class::DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE,
            format!(
                "the percentage of `{name}` must be between 0.0 and 1.0 (a constant or an array \
                 of constants), not {v}"
            ),
        )
    };
    let one = |s: &ScalarValue| -> DfResult<f64> {
        match s.cast_to(&DataType::Float64)? {
            ScalarValue::Float64(Some(p)) if (0.0..=1.0).contains(&p) => Ok(p),
            _ => Err(bad()),
        }
    };
    match &v {
        ScalarValue::List(l) => {
            if l.is_null(0) {
                return Err(bad());
            }
            let items = l.value(0);
            let ps = (0..items.len())
                .map(|k| one(&ScalarValue::try_from_array(&items, k)?))
                .collect::<DfResult<Vec<_>>>()?;
            Ok((ps, true))
        }
        s => Ok((vec![one(s)?], false)),
    }
}

/// What the input is read as, and what the result is converted back to.
fn value_type(name: &str, t: &DataType) -> DfResult<DataType> {
    Ok(match t {
        DataType::Interval(IntervalUnit::MonthDayNano) => return Err(calendar_interval(name)),
        DataType::Interval(IntervalUnit::YearMonth) => t.clone(),
        DataType::Duration(_) => DataType::Duration(TimeUnit::Microsecond),
        t if t.is_numeric() || t.is_null() || matches!(t, DataType::Utf8 | DataType::Utf8View) => {
            DataType::Float64
        }
        t => {
            return Err(agg_err(
                crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                format!("`{name}` takes a numeric or ANSI interval argument, not {t}"),
            ))
        }
    })
}

pub(super) fn as_doubles(a: &ArrayRef) -> DfResult<ArrayRef> {
    Ok(match a.data_type() {
        DataType::Interval(IntervalUnit::YearMonth) | DataType::Duration(_) => {
            arrow::compute::cast(&super::aggregates::as_int64(a)?, &DataType::Float64)?
        }
        DataType::Date32 => arrow::compute::cast(
            &arrow::compute::cast(a, &DataType::Int32)?,
            &DataType::Float64,
        )?,
        DataType::Timestamp(..) => arrow::compute::cast(
            &arrow::compute::cast(a, &DataType::Int64)?,
            &DataType::Float64,
        )?,
        _ => arrow::compute::cast(a, &DataType::Float64)?,
    })
}

/// A double result in the output type `t` (Spark: `toInt` / `toLong` for intervals).
pub(super) fn from_double(v: Option<f64>, t: &DataType) -> DfResult<ScalarValue> {
    Ok(match t {
        DataType::Interval(IntervalUnit::YearMonth) => {
            ScalarValue::IntervalYearMonth(v.map(|v| v as i32))
        }
        DataType::Duration(_) => ScalarValue::DurationMicrosecond(v.map(|v| v as i64)),
        DataType::Date32 => ScalarValue::Date32(v.map(|v| v as i32)),
        DataType::Timestamp(_, tz) => {
            ScalarValue::TimestampMicrosecond(v.map(|v| v as i64), tz.clone())
        }
        DataType::Float64 => ScalarValue::Float64(v),
        t => ScalarValue::Float64(v).cast_to(t)?,
    })
}

fn result(values: Option<Vec<f64>>, array: bool, t: &DataType) -> DfResult<ScalarValue> {
    let Some(values) = values.filter(|v| !v.is_empty()) else {
        return if array {
            ScalarValue::try_from(&list_of(t))
        } else {
            ScalarValue::try_from(t)
        };
    };
    if !array {
        return from_double(Some(values[0]), t);
    }
    let items = values
        .into_iter()
        .map(|v| from_double(Some(v), t))
        .collect::<DfResult<Vec<_>>>()?;
    Ok(ScalarValue::List(ScalarValue::new_list_nullable(&items, t)))
}

fn list_of(t: &DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(t.clone(), true)))
}

// ---------------------------------------------------------------------------------------------
// percentile / median

#[derive(Debug)]
struct PercentileAcc {
    percentages: Vec<f64>,
    array: bool,
    out: DataType,
    /// Which input column is the frequency (`percentile(x, p, frequency)`).
    frequency: Option<usize>,
    /// Count per distinct value (by its bits).
    counts: HashMap<u64, i64>,
}

impl PercentileAcc {
    fn add(&mut self, v: f64, n: i64) {
        *self.counts.entry(v.to_bits()).or_insert(0) += n;
    }

    /// Spark's `Percentile.getPercentile` over the accumulated counts.
    fn percentile(acc: &[(f64, i64)], position: f64) -> f64 {
        let lower = position.floor() as i64;
        let higher = position.ceil() as i64;
        let find = |target: i64| acc.partition_point(|(_, c)| *c < target).min(acc.len() - 1);
        let lower_key = acc[find(lower + 1)].0;
        if higher == lower {
            return lower_key;
        }
        let higher_key = acc[find(higher + 1)].0;
        if higher_key == lower_key {
            return lower_key;
        }
        (higher as f64 - position) * lower_key + (position - lower as f64) * higher_key
    }
}

impl Accumulator for PercentileAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let v = as_doubles(&values[0])?;
        let v = v.as_primitive::<Float64Type>();
        let freq = match self.frequency.and_then(|i| values.get(i)) {
            Some(f) => Some(arrow::compute::cast(f, &DataType::Int64)?),
            None => None,
        };
        let freq = freq.as_ref().map(|f| f.as_primitive::<Int64Type>());
        for i in 0..v.len() {
            if v.is_null(i) {
                continue;
            }
            let n = match freq {
                None => 1,
                Some(f) if f.is_null(i) => continue,
                Some(f) => f.value(i),
            };
            if n < 0 {
                return Err(agg_err(
                    crate::error::class::INVALID_PARAMETER_VALUE,
                    format!(
                        "the frequency of `percentile` must not be negative: {n} for value {}",
                        v.value(i)
                    ),
                ));
            }
            if n > 0 {
                self.add(v.value(i), n);
            }
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let (keys, counts) = (states[0].as_list::<i32>(), states[1].as_list::<i32>());
        for r in 0..keys.len() {
            if keys.is_null(r) {
                continue;
            }
            let k = keys.value(r);
            let c = counts.value(r);
            let (k, c) = (
                k.as_primitive::<Float64Type>(),
                c.as_primitive::<Int64Type>(),
            );
            for i in 0..k.len() {
                self.add(k.value(i), c.value(i));
            }
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let mut pairs: Vec<(f64, i64)> = self
            .counts
            .iter()
            .map(|(k, c)| (f64::from_bits(*k), *c))
            .collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let keys: Vec<ScalarValue> = pairs
            .iter()
            .map(|p| ScalarValue::Float64(Some(p.0)))
            .collect();
        let counts: Vec<ScalarValue> = pairs
            .iter()
            .map(|p| ScalarValue::Int64(Some(p.1)))
            .collect();
        Ok(vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&keys, &DataType::Float64)),
            ScalarValue::List(ScalarValue::new_list_nullable(&counts, &DataType::Int64)),
        ])
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        if self.counts.is_empty() {
            return result(None, self.array, &self.out);
        }
        let mut sorted: Vec<(f64, i64)> = self
            .counts
            .iter()
            .map(|(k, c)| (f64::from_bits(*k), *c))
            .collect();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut total = 0;
        for p in &mut sorted {
            total += p.1;
            p.1 = total;
        }
        let max_position = (total - 1) as f64;
        let values = self
            .percentages
            .iter()
            .map(|p| Self::percentile(&sorted, max_position * p))
            .collect();
        result(Some(values), self.array, &self.out)
    }
    fn size(&self) -> usize {
        size_of_val(self) + self.counts.capacity() * 24 + self.percentages.len() * 8
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Percentile {
    /// `median(x)` is `percentile(x, 0.5)`.
    median: bool,
    signature: Signature,
}

impl AggregateUDFImpl for Percentile {
    fn name(&self) -> &str {
        if self.median {
            "median"
        } else {
            "percentile"
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let name = self.name();
        let (min, max) = if self.median { (1, 1) } else { (2, 3) };
        if arg_types.len() < min || arg_types.len() > max {
            return Err(agg_err(
                crate::error::class::WRONG_NUM_ARGS,
                format!(
                    "`{name}` takes {}, not {} arguments",
                    if self.median {
                        "one argument"
                    } else {
                        "(x, percentage[, frequency])"
                    },
                    arg_types.len()
                ),
            ));
        }
        let mut out = vec![value_type(name, &arg_types[0])?];
        if let Some(p) = arg_types.get(1) {
            out.push(p.clone());
        }
        if let Some(f) = arg_types.get(2) {
            if !(f.is_integer() || f.is_null()) {
                return Err(agg_err(
                    crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                    format!("the frequency of `percentile` must be an integral number, not {f}"),
                ));
            }
            out.push(DataType::Int64);
        }
        Ok(out)
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        let t = arg_types[0].clone();
        Ok(match arg_types.get(1) {
            Some(DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)) => {
                list_of(&t)
            }
            _ => t,
        })
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let (percentages, array) = if self.median {
            (vec![0.5], false)
        } else {
            percentages(self.name(), &args, 1)?
        };
        Ok(Box::new(PercentileAcc {
            percentages,
            array,
            out: args.expr_fields[0].data_type().clone(),
            frequency: (!self.median).then_some(2),
            counts: HashMap::new(),
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[values]", args.name),
                list_of(&DataType::Float64),
                true,
            )),
            Arc::new(Field::new(
                format!("{}[counts]", args.name),
                list_of(&DataType::Int64),
                true,
            )),
        ])
    }
}

// ---------------------------------------------------------------------------------------------
// percentile_approx: Spark's QuantileSummaries

const COMPRESS_THRESHOLD: usize = 10_000;
const HEAD_SIZE: usize = 50_000;
/// Spark's `ApproximatePercentile.DEFAULT_PERCENTILE_ACCURACY`.
const DEFAULT_ACCURACY: i64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Stats {
    value: f64,
    g: i64,
    delta: i64,
}

/// Spark's `QuantileSummaries` (Greenwald-Khanna with a head buffer).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct QuantileSummaries {
    relative_error: f64,
    sampled: Vec<Stats>,
    count: i64,
    head: Vec<f64>,
}

impl QuantileSummaries {
    pub(super) fn new(relative_error: f64) -> Self {
        Self {
            relative_error,
            sampled: Vec::new(),
            count: 0,
            head: Vec::new(),
        }
    }

    pub(super) fn insert(&mut self, x: f64) {
        self.head.push(x);
        if self.head.len() >= HEAD_SIZE {
            self.with_head_inserted();
            if self.sampled.len() >= COMPRESS_THRESHOLD {
                self.compress();
            }
        }
    }

    fn with_head_inserted(&mut self) {
        if self.head.is_empty() {
            return;
        }
        let mut sorted = std::mem::take(&mut self.head);
        sorted.sort_by(f64::total_cmp);
        let mut current = self.count;
        let mut out = Vec::with_capacity(self.sampled.len() + sorted.len());
        let mut si = 0;
        let n = sorted.len();
        for (oi, &x) in sorted.iter().enumerate() {
            while si < self.sampled.len() && self.sampled[si].value <= x {
                out.push(self.sampled[si]);
                si += 1;
            }
            current += 1;
            let delta = if out.is_empty() || (si == self.sampled.len() && oi == n - 1) {
                0
            } else {
                (2.0 * self.relative_error * current as f64).floor() as i64
            };
            out.push(Stats {
                value: x,
                g: 1,
                delta,
            });
        }
        out.extend_from_slice(&self.sampled[si..]);
        self.sampled = out;
        self.count = current;
    }

    /// Spark's `compress()`: the head inserted, then the samples compressed.
    pub(super) fn compress(&mut self) {
        self.with_head_inserted();
        let threshold = 2.0 * self.relative_error * self.count as f64;
        self.sampled = compress_immut(&self.sampled, threshold);
    }

    /// Spark's `merge` of two compressed summaries.
    pub(super) fn merge(&mut self, other: &QuantileSummaries) {
        self.compress();
        let mut other = other.clone();
        other.compress();
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = other;
            return;
        }
        let eps = self.relative_error.max(other.relative_error);
        let count = self.count + other.count;
        let add_self = (2.0 * other.relative_error * other.count as f64).floor() as i64;
        let add_other = (2.0 * self.relative_error * self.count as f64).floor() as i64;
        let (a, b) = (&self.sampled, &other.sampled);
        let mut merged = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let (s, extra) = if a[i].value < b[j].value {
                i += 1;
                (a[i - 1], if j > 0 { add_self } else { 0 })
            } else {
                j += 1;
                (b[j - 1], if i > 0 { add_other } else { 0 })
            };
            merged.push(Stats {
                delta: s.delta + extra,
                ..s
            });
        }
        merged.extend_from_slice(&a[i..]);
        merged.extend_from_slice(&b[j..]);
        self.sampled = compress_immut(&merged, 2.0 * eps * count as f64);
        self.relative_error = eps;
        self.count = count;
    }

    /// Spark's `query(percentiles)`; `None` without values.
    pub(super) fn query(&mut self, percentiles: &[f64]) -> Option<Vec<f64>> {
        self.compress();
        let s = &self.sampled;
        if s.is_empty() {
            return None;
        }
        let target_error = (s.iter().map(|x| x.delta + x.g).max().unwrap_or(i64::MIN) / 2) as f64;
        let mut index = 0usize;
        let mut min_rank = s[0].g;
        let mut order: Vec<usize> = (0..percentiles.len()).collect();
        order.sort_by(|a, b| percentiles[*a].total_cmp(&percentiles[*b]));
        let mut out = vec![0.0; percentiles.len()];
        for pos in order {
            let p = percentiles[pos];
            if p <= self.relative_error {
                out[pos] = s[0].value;
            } else if p >= 1.0 - self.relative_error {
                out[pos] = s[s.len() - 1].value;
            } else {
                let rank = (p * self.count as f64).ceil() as i64;
                let mut i = index;
                let mut m = min_rank;
                let mut found = None;
                while i < s.len() - 1 {
                    let max_rank = m + s[i].delta;
                    if (max_rank as f64 - target_error) <= rank as f64
                        && rank as f64 <= m as f64 + target_error
                    {
                        found = Some((i, m, s[i].value));
                        break;
                    }
                    i += 1;
                    m += s[i].g;
                }
                let (ni, nm, v) = found.unwrap_or((s.len() - 1, 0, s[s.len() - 1].value));
                index = ni;
                min_rank = nm;
                out[pos] = v;
            }
        }
        Some(out)
    }

    /// The compressed summary as bytes: relative error, count, then (value, g, delta) each.
    pub(super) fn compressed_bytes(&mut self) -> Vec<u8> {
        self.compress();
        let mut b = Vec::with_capacity(20 + self.sampled.len() * 24);
        b.extend_from_slice(&self.relative_error.to_le_bytes());
        b.extend_from_slice(&self.count.to_le_bytes());
        b.extend_from_slice(&(self.sampled.len() as u32).to_le_bytes());
        for s in &self.sampled {
            b.extend_from_slice(&s.value.to_le_bytes());
            b.extend_from_slice(&s.g.to_le_bytes());
            b.extend_from_slice(&s.delta.to_le_bytes());
        }
        b
    }

    pub(super) fn from_bytes(b: &[u8]) -> DfResult<Self> {
        let bad = || {
            DataFusionError::Execution(format!(
                "a percentile_approx state of {} bytes is not a Sluice quantile summary",
                b.len()
            ))
        };
        let f = |at: usize| -> DfResult<[u8; 8]> {
            b.get(at..at + 8)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(bad)
        };
        let relative_error = f64::from_le_bytes(f(0)?);
        let count = i64::from_le_bytes(f(8)?);
        let n: [u8; 4] = b
            .get(16..20)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(bad)?;
        let n = u32::from_le_bytes(n) as usize;
        if b.len() != 20 + n * 24 {
            return Err(bad());
        }
        let sampled = (0..n)
            .map(|k| {
                let at = 20 + k * 24;
                Ok(Stats {
                    value: f64::from_le_bytes(f(at)?),
                    g: i64::from_le_bytes(f(at + 8)?),
                    delta: i64::from_le_bytes(f(at + 16)?),
                })
            })
            .collect::<DfResult<Vec<_>>>()?;
        Ok(Self {
            relative_error,
            sampled,
            count,
            head: Vec::new(),
        })
    }
}

/// Spark's `QuantileSummaries.compressImmut`.
fn compress_immut(samples: &[Stats], merge_threshold: f64) -> Vec<Stats> {
    if samples.is_empty() {
        return Vec::new();
    }
    let mut res = std::collections::VecDeque::new();
    let mut head = samples[samples.len() - 1];
    let mut i = samples.len() as isize - 2;
    while i >= 1 {
        let s = samples[i as usize];
        if ((s.g + head.g + head.delta) as f64) < merge_threshold {
            head.g += s.g;
        } else {
            res.push_front(head);
            head = s;
        }
        i -= 1;
    }
    res.push_front(head);
    if samples[0].value <= head.value && samples.len() > 1 {
        res.push_front(samples[0]);
    }
    res.into()
}

#[derive(Debug)]
struct ApproxAcc {
    percentages: Vec<f64>,
    array: bool,
    out: DataType,
    summary: QuantileSummaries,
}

impl Accumulator for ApproxAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let v = as_doubles(&values[0])?;
        for x in v.as_primitive::<Float64Type>().iter().flatten() {
            self.summary.insert(x);
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let b = states[0].as_binary::<i32>();
        for i in 0..b.len() {
            if b.is_valid(i) {
                let other = QuantileSummaries::from_bytes(b.value(i))?;
                self.summary.merge(&other);
            }
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Binary(Some(
            self.summary.compressed_bytes(),
        ))])
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let values = self.summary.query(&self.percentages);
        result(values, self.array, &self.out)
    }
    fn size(&self) -> usize {
        size_of_val(self) + self.summary.sampled.capacity() * 24 + self.summary.head.capacity() * 8
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ApproxPercentile {
    name: &'static str,
    signature: Signature,
}

/// Sluice's interval literals are calendar intervals (months, days and nanoseconds in one),
/// which have no order; Spark's percentiles take its year-month or day-time intervals.
fn calendar_interval(name: &str) -> DataFusionError {
    DataFusionError::External(Box::new(crate::error::SluiceError::not_supported_yet(
        format!(
            "`{name}` over an INTERVAL literal (Sluice types it as a calendar interval of months, \
         days and nanoseconds); use make_ym_interval(..) or make_dt_interval(..) for Spark's \
         year-month or day-time intervals"
        ),
    )))
}

pub(super) fn approx_input(name: &str, t: &DataType) -> DfResult<DataType> {
    Ok(match t {
        DataType::Interval(IntervalUnit::MonthDayNano) => return Err(calendar_interval(name)),
        DataType::Interval(IntervalUnit::YearMonth)
        | DataType::Date32
        | DataType::Timestamp(TimeUnit::Microsecond, _) => t.clone(),
        DataType::Duration(_) => DataType::Duration(TimeUnit::Microsecond),
        DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
        t if t.is_numeric() => t.clone(),
        DataType::Null | DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => {
            DataType::Float64
        }
        t => {
            return Err(agg_err(
                crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                format!(
                    "`{name}` takes a numeric, date, timestamp or ANSI interval argument, not {t}"
                ),
            ))
        }
    })
}

impl AggregateUDFImpl for ApproxPercentile {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if !(2..=3).contains(&arg_types.len()) {
            return Err(agg_err(
                crate::error::class::WRONG_NUM_ARGS,
                format!(
                    "`{}` takes (x, percentage[, accuracy]), not {} arguments",
                    self.name,
                    arg_types.len()
                ),
            ));
        }
        let mut out = vec![
            approx_input(self.name, &arg_types[0])?,
            arg_types[1].clone(),
        ];
        if let Some(a) = arg_types.get(2) {
            if !a.is_integer() {
                return Err(agg_err(
                    crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                    format!(
                        "the accuracy of `{}` must be an integral constant, not {a}",
                        self.name
                    ),
                ));
            }
            out.push(DataType::Int64);
        }
        Ok(out)
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        let t = arg_types[0].clone();
        Ok(match &arg_types[1] {
            DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => list_of(&t),
            _ => t,
        })
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let (percentages, array) = percentages(self.name, &args, 1)?;
        let accuracy = match args.exprs.get(2) {
            None => DEFAULT_ACCURACY,
            Some(e) => match constant(e)? {
                None => return Err(non_foldable(self.name, "accuracy")),
                Some(v) => match v.cast_to(&DataType::Int64)? {
                    ScalarValue::Int64(Some(a)) if a > 0 && a <= i32::MAX as i64 => a,
                    v => {
                        return Err(agg_err(
                            crate::error::class::DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE,
                            format!(
                                "the accuracy of `{}` must be between 1 and {} (got {v})",
                                self.name,
                                i32::MAX
                            ),
                        ))
                    }
                },
            },
        };
        Ok(Box::new(ApproxAcc {
            percentages,
            array,
            out: args.expr_fields[0].data_type().clone(),
            summary: QuantileSummaries::new(1.0 / accuracy as f64),
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[summary]", args.name),
            DataType::Binary,
            true,
        ))])
    }
}

/// The aggregates of this file.
pub(super) fn udafs() -> Vec<AggregateUDF> {
    let sig = || Signature::user_defined(Volatility::Immutable);
    vec![
        AggregateUDF::new_from_impl(Percentile {
            median: false,
            signature: sig(),
        }),
        AggregateUDF::new_from_impl(Percentile {
            median: true,
            signature: sig(),
        }),
        AggregateUDF::new_from_impl(ApproxPercentile {
            name: "percentile_approx",
            signature: sig(),
        }),
        AggregateUDF::new_from_impl(ApproxPercentile {
            name: "approx_percentile",
            signature: sig(),
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approx(values: &[f64], p: &[f64], accuracy: f64) -> Vec<f64> {
        let mut s = QuantileSummaries::new(1.0 / accuracy);
        values.iter().for_each(|v| s.insert(*v));
        s.query(p).unwrap()
    }

    #[test]
    fn gk_answers_are_input_values_as_spark_gives() {
        // Spark 3.5.7: percentile_approx(col, 0.5, 100) over 0, 6, 7, 9, 10 is 7.
        assert_eq!(
            approx(&[0.0, 6.0, 7.0, 9.0, 10.0], &[0.5], 100.0),
            vec![7.0]
        );
        assert_eq!(
            approx(&[0.0, 1.0, 2.0, 10.0], &[0.5, 0.4, 0.1], 100.0),
            vec![1.0, 1.0, 0.0]
        );
        let mut s = QuantileSummaries::new(0.01);
        assert_eq!(s.query(&[0.5]), None);
        // Spark 3.5.7: percentile_approx(id, 0.5, 2) over range(1000) is 0, and
        // percentile_approx(id, array(0.1, 0.5, 0.9), 10) over range(100000) is [0, 49999, 99999]
        // (past the head buffer of 50000: inserted, compressed).
        let r: Vec<f64> = (0..1000).map(|v| v as f64).collect();
        assert_eq!(approx(&r, &[0.5], 2.0), vec![0.0]);
        let r: Vec<f64> = (0..100_000).map(|v| v as f64).collect();
        assert_eq!(
            approx(&r, &[0.1, 0.5, 0.9], 10.0),
            vec![0.0, 49999.0, 99999.0]
        );
    }

    #[test]
    fn gk_state_round_trips_and_merges() {
        let mut a = QuantileSummaries::new(0.001);
        let mut b = QuantileSummaries::new(0.001);
        (0..500).for_each(|v| a.insert(v as f64));
        (500..1000).for_each(|v| b.insert(v as f64));
        let mut back = QuantileSummaries::from_bytes(&a.compressed_bytes()).unwrap();
        assert_eq!(back, a);
        back.merge(&b);
        let m = back.query(&[0.5]).unwrap()[0];
        assert!((m - 500.0).abs() <= 2.0, "{m}");
        assert!(QuantileSummaries::from_bytes(&[1, 2, 3]).is_err());
    }

    fn one(s: &sluice::Session, sql: &str) -> ScalarValue {
        let b: Vec<RecordBatch> = s.sql(sql).unwrap().collect().unwrap();
        let b: Vec<&RecordBatch> = b.iter().filter(|b| b.num_rows() > 0).collect();
        assert_eq!(b.len(), 1, "{sql}");
        ScalarValue::try_from_array(b[0].column(0), 0).unwrap()
    }

    fn err(s: &sluice::Session, sql: &str) -> crate::error::SluiceError {
        s.sql(sql).and_then(|f| f.collect()).unwrap_err()
    }

    fn doubles(v: &ScalarValue) -> Vec<Option<f64>> {
        let ScalarValue::List(l) = v else {
            panic!("{v:?}")
        };
        let a = l.value(0);
        a.as_primitive::<Float64Type>().iter().collect()
    }

    #[test]
    fn percentile_and_median_as_spark() {
        let s = sluice::Session::builder().build().unwrap();
        let rows =
            "VALUES (1, CAST(1.5 AS DOUBLE)), (NULL, NULL), (3, 2.5), (3, -1.0), (7, 4.0) t(i, d)";
        // Spark 3.5.7's values.
        assert_eq!(
            one(&s, &format!("SELECT median(d) FROM {rows}")),
            ScalarValue::Float64(Some(2.0))
        );
        assert_eq!(
            one(&s, &format!("SELECT median(i) FROM {rows}")),
            ScalarValue::Float64(Some(3.0))
        );
        let v = one(
            &s,
            "SELECT percentile(c, array(0.25, 0.75)) FROM VALUES (0), (10) t(c)",
        );
        assert_eq!(doubles(&v), vec![Some(2.5), Some(7.5)]);
        let v = one(
            &s,
            "SELECT percentile(c, 0.5, f) FROM VALUES (1, 2), (5, 1), (7, 0) t(c, f)",
        );
        assert_eq!(v, ScalarValue::Float64(Some(1.0)));
        // Strings read as doubles: not numbers, null.
        let v = one(&s, "SELECT median(c) FROM VALUES ('a'), ('b') t(c)");
        assert_eq!(v, ScalarValue::Float64(None));
        // No rows, or an empty percentage array: null.
        let v = one(
            &s,
            "SELECT percentile(c, 0.5) FROM VALUES (1) t(c) WHERE c > 4",
        );
        assert_eq!(v, ScalarValue::Float64(None));
        let v = one(&s, "SELECT percentile(c, array()) FROM VALUES (1) t(c)");
        assert!(v.is_null(), "{v:?}");
        // Year-month intervals: the result truncated to months (Spark: -1.5 -> -1).
        let v = one(
            &s,
            "SELECT median(c) FROM VALUES (make_ym_interval(0, -1)), (make_ym_interval(0, -2)) t(c)",
        );
        assert_eq!(v, ScalarValue::IntervalYearMonth(Some(-1)));
        // Bad arguments: Spark's error classes.
        let e = err(&s, "SELECT percentile(c, 1.5) FROM VALUES (1) t(c)");
        assert!(
            e.is(crate::error::class::DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE),
            "{e}"
        );
        let e = err(&s, "SELECT percentile(c, c) FROM VALUES (0.5) t(c)");
        assert!(
            e.is(crate::error::class::DATATYPE_MISMATCH_NON_FOLDABLE_INPUT),
            "{e}"
        );
        let e = err(&s, "SELECT percentile(c, 0.5, -1) FROM VALUES (1) t(c)");
        assert!(e.message().contains("negative"), "{e}");
        let e = err(&s, "SELECT median(c, 0.5) FROM VALUES (1) t(c)");
        assert!(e.message().contains("median"), "{e}");
    }

    #[test]
    fn percentile_approx_as_spark() {
        let s = sluice::Session::builder().build().unwrap();
        let rows =
            "VALUES (1, CAST(1.5 AS DOUBLE)), (NULL, NULL), (3, 2.5), (3, -1.0), (7, 4.0) t(i, d)";
        let v = one(&s, &format!("SELECT percentile_approx(d, 0.5) FROM {rows}"));
        assert_eq!(v, ScalarValue::Float64(Some(1.5)));
        // The input's type back (Spark: int).
        let v = one(
            &s,
            "SELECT approx_percentile(c, 0.5, 100) FROM VALUES (0), (6), (7), (9), (10) t(c)",
        );
        assert_eq!(v, ScalarValue::Int32(Some(7)));
        let v = one(
            &s,
            "SELECT percentile_approx(c, 0.5) FROM VALUES (1) t(c) WHERE c > 4",
        );
        assert!(v.is_null());
        let e = err(
            &s,
            "SELECT percentile_approx(c, 0.5, 0) FROM VALUES (1) t(c)",
        );
        assert!(
            e.is(crate::error::class::DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE),
            "{e}"
        );
        let e = err(&s, "SELECT percentile_approx(c, 2.0) FROM VALUES (1) t(c)");
        assert!(
            e.is(crate::error::class::DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE),
            "{e}"
        );
        let e = err(&s, "SELECT percentile_approx(c) FROM VALUES (1) t(c)");
        assert!(e.message().contains("percentile_approx"), "{e}");
    }

    #[test]
    fn exact_percentile_interpolates_as_spark() {
        let acc = [(0.0, 1), (10.0, 2)];
        assert_eq!(PercentileAcc::percentile(&acc, 0.3), 3.0);
        assert_eq!(PercentileAcc::percentile(&acc, 0.5), 5.0);
    }
}
