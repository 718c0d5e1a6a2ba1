//! Spark's statistical aggregates DataFusion lacks or computes differently: `mode` (with
//! Spark's tie rule: the first of the most frequent values in Spark's hash-map order),
//! `try_avg` (null instead of an overflow error for intervals), and `regr_intercept` (Spark's
//! `CovPopulation` / `VariancePop` arithmetic).
//!
//! Every accumulator keeps its whole state in `state()` fields (lists for `mode`'s counts per
//! distinct value, as Spark's `OpenHashMap` buffer), so a streaming aggregation stores and
//! merges it across micro-batches and restarts.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type, IntervalUnit, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

use super::aggregates::{agg_err, as_int64, state_field, wrong_args};

fn bad_type(name: &str, what: &str, t: &DataType) -> DataFusionError {
    agg_err(
        crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
        format!("`{name}` takes {what}, not {t}"),
    )
}

fn list_of(t: &DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(t.clone(), true)))
}

// ---------------------------------------------------------------------------------------------
// mode

/// The Java `hashCode` Spark's `OpenHashMap` buffer sees for a value (boxed catalyst values),
/// where Sluice knows it.
fn java_hash(v: &ScalarValue) -> Option<i32> {
    fn long(x: i64) -> i32 {
        (x ^ ((x as u64) >> 32) as i64) as i32
    }
    Some(match v {
        ScalarValue::Boolean(Some(b)) => {
            if *b {
                1231
            } else {
                1237
            }
        }
        ScalarValue::Int8(Some(x)) => *x as i32,
        ScalarValue::Int16(Some(x)) => *x as i32,
        ScalarValue::Int32(Some(x))
        | ScalarValue::Date32(Some(x))
        | ScalarValue::IntervalYearMonth(Some(x)) => *x,
        ScalarValue::Int64(Some(x))
        | ScalarValue::TimestampMicrosecond(Some(x), _)
        | ScalarValue::DurationMicrosecond(Some(x)) => long(*x),
        ScalarValue::Float64(Some(x)) => {
            let x = if x.is_nan() { f64::NAN } else { *x };
            long(x.to_bits() as i64)
        }
        ScalarValue::Float32(Some(x)) => {
            let x = if x.is_nan() { f32::NAN } else { *x };
            x.to_bits() as i32
        }
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => murmur3_spark_bytes(s.as_bytes(), 42),
        _ => return None,
    })
}

fn mix_k1(k1: i32) -> i32 {
    let k1 = k1.wrapping_mul(0xcc9e2d51u32 as i32);
    let k1 = k1.rotate_left(15);
    k1.wrapping_mul(0x1b873593)
}

fn mix_h1(h1: i32, k1: i32) -> i32 {
    let h1 = (h1 ^ k1).rotate_left(13);
    h1.wrapping_mul(5).wrapping_add(0xe6546b64u32 as i32)
}

fn fmix(h1: i32, len: i32) -> i32 {
    let mut h = (h1 ^ len) as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85ebca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2ae35);
    h ^= h >> 16;
    h as i32
}

/// Spark's `Murmur3_x86_32.hashUnsafeBytes` (the `UTF8String.hashCode`, seed 42): trailing
/// bytes are mixed one by one, sign-extended.
fn murmur3_spark_bytes(b: &[u8], seed: i32) -> i32 {
    let aligned = b.len() - b.len() % 4;
    let mut h1 = seed;
    for w in b[..aligned].chunks_exact(4) {
        h1 = mix_h1(h1, mix_k1(i32::from_le_bytes([w[0], w[1], w[2], w[3]])));
    }
    for &x in &b[aligned..] {
        h1 = mix_h1(h1, mix_k1(x as i8 as i32));
    }
    fmix(h1, b.len() as i32)
}

/// Guava's `murmur3_32().hashInt(h)`, Spark's `OpenHashSet.hashcode`.
fn guava_hash_int(h: i32) -> i32 {
    fmix(mix_h1(0, mix_k1(h)), 4)
}

/// The order in which Spark's `OpenHashMap` (an `OpenHashSet` of capacity 64, load factor 0.7,
/// quadratic probing, doubled and rehashed when full) iterates `keys` inserted in this order:
/// `mode` returns the first of the most frequent values in that order. `None` when a key's
/// hash is unknown.
fn open_hash_order(keys: &[ScalarValue]) -> Option<Vec<usize>> {
    let hashes: Vec<i32> = keys
        .iter()
        .map(|k| java_hash(k).map(guava_hash_int))
        .collect::<Option<_>>()?;
    let mut capacity = 64usize;
    let place = |table: &mut Vec<Option<usize>>, i: usize| {
        let mask = table.len() - 1;
        let mut pos = (hashes[i] as u32 as usize) & mask;
        let mut delta = 1;
        while table[pos].is_some() {
            pos = (pos + delta) & mask;
            delta += 1;
        }
        table[pos] = Some(i);
    };
    let mut table: Vec<Option<usize>> = vec![None; capacity];
    let mut size = 0;
    for i in 0..keys.len() {
        place(&mut table, i);
        size += 1;
        if size > (0.7 * capacity as f64) as usize {
            capacity *= 2;
            let old = std::mem::replace(&mut table, vec![None; capacity]);
            for j in old.into_iter().flatten() {
                place(&mut table, j);
            }
        }
    }
    Some(table.into_iter().flatten().collect())
}

#[derive(Debug)]
struct ModeAcc {
    data_type: DataType,
    /// Distinct values in first-seen order, and their counts.
    keys: Vec<ScalarValue>,
    index: HashMap<ScalarValue, usize>,
    counts: Vec<i64>,
}

impl ModeAcc {
    fn add(&mut self, v: ScalarValue, n: i64) {
        match self.index.get(&v) {
            Some(&i) => self.counts[i] += n,
            None => {
                self.index.insert(v.clone(), self.keys.len());
                self.keys.push(v);
                self.counts.push(n);
            }
        }
    }
}

impl Accumulator for ModeAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let a = &values[0];
        for i in 0..a.len() {
            if a.is_valid(i) {
                self.add(ScalarValue::try_from_array(a, i)?, 1);
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
            let c = c.as_primitive::<Int64Type>();
            for i in 0..k.len() {
                self.add(ScalarValue::try_from_array(&k, i)?, c.value(i));
            }
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let counts: Vec<ScalarValue> = self
            .counts
            .iter()
            .map(|c| ScalarValue::Int64(Some(*c)))
            .collect();
        Ok(vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&self.keys, &self.data_type)),
            ScalarValue::List(ScalarValue::new_list_nullable(&counts, &DataType::Int64)),
        ])
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let Some(&max) = self.counts.iter().max() else {
            return ScalarValue::try_from(&self.data_type);
        };
        let tied: Vec<usize> = (0..self.keys.len())
            .filter(|&i| self.counts[i] == max)
            .collect();
        let pick = if tied.len() == 1 {
            tied[0]
        } else {
            match open_hash_order(&self.keys) {
                Some(order) => *order
                    .iter()
                    .find(|i| self.counts[**i] == max)
                    .unwrap_or(&tied[0]),
                None => tied[0],
            }
        };
        Ok(self.keys[pick].clone())
    }
    fn size(&self) -> usize {
        size_of_val(self)
            + self.keys.iter().map(|k| k.size()).sum::<usize>() * 2
            + self.counts.len() * 8
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Mode {
    signature: Signature,
}

impl AggregateUDFImpl for Mode {
    fn name(&self) -> &str {
        "mode"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [DataType::Duration(_)] => Ok(vec![DataType::Duration(TimeUnit::Microsecond)]),
            [DataType::Utf8View | DataType::LargeUtf8] => Ok(vec![DataType::Utf8]),
            [t] => Ok(vec![t.clone()]),
            _ => Err(wrong_args("mode", "one argument", arg_types.len())),
        }
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types[0].clone())
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(ModeAcc {
            data_type: args.expr_fields[0].data_type().clone(),
            keys: Vec::new(),
            index: HashMap::new(),
            counts: Vec::new(),
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        let t = args.input_fields[0].data_type().clone();
        Ok(vec![
            state_field(&args, "values", list_of(&t)),
            state_field(&args, "counts", list_of(&DataType::Int64)),
        ])
    }
}

// ---------------------------------------------------------------------------------------------
// try_avg

/// `try_avg` over year-month or day-time intervals: Spark's `Average` with a checked sum that
/// makes the result null on overflow; the mean rounds half up as Spark's interval division.
#[derive(Debug)]
struct IntervalAvgAcc {
    months: bool,
    /// Sluice's calendar interval (month-day-nano): the months in `sum`, the rest here.
    calendar: bool,
    micros: Option<i64>,
    sum: i64,
    count: i64,
    overflow: bool,
}

impl Accumulator for IntervalAvgAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        if self.calendar {
            // Sluice's interval literals: months only (Spark's year-month intervals) or no
            // months (day-time, summed in microseconds).
            let a = values[0].as_primitive::<arrow::datatypes::IntervalMonthDayNanoType>();
            for v in a.iter().flatten() {
                let micros = v.days as i64 * 86_400_000_000 + v.nanoseconds / 1000;
                let months =
                    match (v.months, micros) {
                        (m, 0) if m != 0 => true,
                        (0, _) => false,
                        _ => return Err(agg_err(
                            crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                            "`try_avg` takes year-month or day-time intervals, not an interval \
                             of months and days",
                        )),
                    };
                self.count += 1;
                if months {
                    self.months = true;
                    self.add(v.months as i64);
                } else {
                    self.micros = self.micros.and_then(|m| m.checked_add(micros));
                }
            }
            return Ok(());
        }
        let a = as_int64(&values[0])?;
        for v in a.as_primitive::<Int64Type>().iter().flatten() {
            self.count += 1;
            self.add(v);
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let s = states[0].as_primitive::<Int64Type>();
        let c = states[1].as_primitive::<Int64Type>();
        let o = states[2].as_boolean();
        let m = states[3].as_primitive::<Int64Type>();
        for i in 0..s.len() {
            if c.is_null(i) {
                continue;
            }
            self.count += c.value(i);
            self.overflow |= o.value(i);
            self.add(s.value(i));
            self.micros = match (self.micros, m.is_valid(i)) {
                (Some(a), true) => a.checked_add(m.value(i)),
                _ => None,
            };
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Int64(Some(self.sum)),
            ScalarValue::Int64(Some(self.count)),
            ScalarValue::Boolean(Some(self.overflow)),
            ScalarValue::Int64(self.micros),
        ])
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        if self.calendar {
            let (Some(micros), false, true) = (self.micros, self.overflow, self.count > 0) else {
                return Ok(ScalarValue::IntervalMonthDayNano(None));
            };
            let (months, micros) = if self.sum != 0 {
                (half_up(self.sum, self.count) as i32, 0)
            } else {
                (0, half_up(micros, self.count))
            };
            return Ok(ScalarValue::new_interval_mdn(months, 0, micros * 1000));
        }
        let none = || {
            if self.months {
                ScalarValue::IntervalYearMonth(None)
            } else {
                ScalarValue::DurationMicrosecond(None)
            }
        };
        if self.overflow || self.count == 0 {
            return Ok(none());
        }
        let q = half_up(self.sum, self.count);
        Ok(if self.months {
            ScalarValue::IntervalYearMonth(Some(q as i32))
        } else {
            ScalarValue::DurationMicrosecond(Some(q))
        })
    }
    fn size(&self) -> usize {
        size_of_val(self)
    }
}

/// `sum / count` rounded half up (away from zero), as Guava's `LongMath.divide(.., HALF_UP)`
/// in Spark's interval division.
fn half_up(sum: i64, count: i64) -> i64 {
    let (q, r) = (sum / count, sum % count);
    if 2 * r.unsigned_abs() >= count.unsigned_abs() {
        q + sum.signum()
    } else {
        q
    }
}

impl IntervalAvgAcc {
    fn add(&mut self, v: i64) {
        match self.sum.checked_add(v) {
            Some(s) if !self.months || i32::try_from(s).is_ok() => self.sum = s,
            _ => self.overflow = true,
        }
    }
}

/// `try_avg(x)`: Spark's `avg` for numbers (a DOUBLE mean, which cannot overflow; strings read
/// as doubles), and a null result instead of an overflow error for intervals.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TryAvg {
    avg: Arc<AggregateUDF>,
    signature: Signature,
}

fn is_interval(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Interval(IntervalUnit::YearMonth | IntervalUnit::MonthDayNano)
            | DataType::Duration(_)
    )
}

impl AggregateUDFImpl for TryAvg {
    fn name(&self) -> &str {
        "try_avg"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [DataType::Duration(_)] => Ok(vec![DataType::Duration(TimeUnit::Microsecond)]),
            [t] if is_interval(t) => Ok(vec![t.clone()]),
            [_] => self.avg.coerce_types(arg_types),
            _ => Err(wrong_args("try_avg", "one argument", arg_types.len())),
        }
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        if is_interval(&arg_types[0]) {
            return Ok(arg_types[0].clone());
        }
        self.avg.return_type(arg_types)
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let t = args.expr_fields[0].data_type();
        if is_interval(t) {
            return Ok(Box::new(IntervalAvgAcc {
                months: matches!(t, DataType::Interval(IntervalUnit::YearMonth)),
                calendar: matches!(t, DataType::Interval(IntervalUnit::MonthDayNano)),
                micros: Some(0),
                sum: 0,
                count: 0,
                overflow: false,
            }));
        }
        self.avg.accumulator(args)
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        if is_interval(args.input_fields[0].data_type()) {
            return Ok(vec![
                state_field(&args, "sum", DataType::Int64),
                state_field(&args, "count", DataType::Int64),
                state_field(&args, "overflow", DataType::Boolean),
                state_field(&args, "micros", DataType::Int64),
            ]);
        }
        self.avg.state_fields(args)
    }
}

// ---------------------------------------------------------------------------------------------
// regr_intercept

/// Spark's `RegrIntercept` buffer: `CovPopulation(x, y)` (n, xAvg, yAvg, ck) and
/// `VariancePop(x)` (n, avg, m2), over the rows where both are non-null.
#[derive(Debug, Default, Clone, Copy)]
struct Regr {
    n: f64,
    x_avg: f64,
    y_avg: f64,
    ck: f64,
    vn: f64,
    v_avg: f64,
    m2: f64,
}

impl Regr {
    fn add(&mut self, y: f64, x: f64) {
        let n = self.n + 1.0;
        let dx = x - self.x_avg;
        let dy = y - self.y_avg;
        let x_avg = self.x_avg + dx / n;
        let y_avg = self.y_avg + dy / n;
        self.ck += dx * (y - y_avg);
        self.n = n;
        self.x_avg = x_avg;
        self.y_avg = y_avg;
        let vn = self.vn + 1.0;
        let delta = x - self.v_avg;
        let delta_n = delta / vn;
        self.v_avg += delta_n;
        self.m2 += delta * (delta - delta_n);
        self.vn = vn;
    }
    fn merge(&mut self, o: &Regr) {
        let (n1, n2) = (self.n, o.n);
        let n = n1 + n2;
        let dx = o.x_avg - self.x_avg;
        let dx_n = if n == 0.0 { 0.0 } else { dx / n };
        let dy = o.y_avg - self.y_avg;
        let dy_n = if n == 0.0 { 0.0 } else { dy / n };
        self.x_avg += dx_n * n2;
        self.y_avg += dy_n * n2;
        self.ck = self.ck + o.ck + dx * dy_n * n1 * n2;
        self.n = n;
        let (v1, v2) = (self.vn, o.vn);
        let vn = v1 + v2;
        let delta = o.v_avg - self.v_avg;
        let delta_n = if vn == 0.0 { 0.0 } else { delta / vn };
        self.v_avg += delta_n * v2;
        self.m2 = self.m2 + o.m2 + delta * delta_n * v1 * v2;
        self.vn = vn;
    }
    fn fields(&self) -> [f64; 7] {
        [
            self.n, self.x_avg, self.y_avg, self.ck, self.vn, self.v_avg, self.m2,
        ]
    }
}

#[derive(Debug, Default)]
struct RegrInterceptAcc {
    r: Regr,
}

impl Accumulator for RegrInterceptAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let y = arrow::compute::cast(&values[0], &DataType::Float64)?;
        let x = arrow::compute::cast(&values[1], &DataType::Float64)?;
        let (y, x) = (
            y.as_primitive::<Float64Type>(),
            x.as_primitive::<Float64Type>(),
        );
        for i in 0..y.len() {
            if y.is_valid(i) && x.is_valid(i) {
                self.r.add(y.value(i), x.value(i));
            }
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let c: Vec<_> = states
            .iter()
            .map(|s| s.as_primitive::<Float64Type>())
            .collect();
        for i in 0..c[0].len() {
            if c[0].is_null(i) {
                continue;
            }
            let v = |k: usize| c[k].value(i);
            self.r.merge(&Regr {
                n: v(0),
                x_avg: v(1),
                y_avg: v(2),
                ck: v(3),
                vn: v(4),
                v_avg: v(5),
                m2: v(6),
            });
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(self
            .r
            .fields()
            .into_iter()
            .map(|v| ScalarValue::Float64(Some(v)))
            .collect())
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let r = &self.r;
        // Spark: If(varPop.m2 === 0.0, null, covarPop.yAvg - covarPop.ck / varPop.m2 * covarPop.xAvg)
        if r.m2 == 0.0 {
            return Ok(ScalarValue::Float64(None));
        }
        Ok(ScalarValue::Float64(Some(r.y_avg - r.ck / r.m2 * r.x_avg)))
    }
    fn size(&self) -> usize {
        size_of_val(self)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct RegrIntercept {
    signature: Signature,
}

impl AggregateUDFImpl for RegrIntercept {
    fn name(&self) -> &str {
        "regr_intercept"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [y, x] => {
                for t in [y, x] {
                    if !(t.is_numeric() || t.is_null() || matches!(t, DataType::Utf8)) {
                        return Err(bad_type("regr_intercept", "numeric (y, x)", t));
                    }
                }
                Ok(vec![DataType::Float64, DataType::Float64])
            }
            _ => Err(wrong_args(
                "regr_intercept",
                "two arguments (y, x)",
                arg_types.len(),
            )),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }
    fn accumulator(&self, _args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::<RegrInterceptAcc>::default())
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(["n", "xAvg", "yAvg", "ck", "varN", "varAvg", "m2"]
            .iter()
            .map(|f| state_field(&args, f, DataType::Float64))
            .collect())
    }
}

/// `mode(x)`.
pub(super) fn mode() -> AggregateUDF {
    AggregateUDF::new_from_impl(Mode {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

/// `regr_intercept(y, x)`.
pub(super) fn regr_intercept() -> AggregateUDF {
    AggregateUDF::new_from_impl(RegrIntercept {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

/// `try_avg(x)`, over the session's `avg` (`existing` looks it up); none without one.
pub(super) fn try_avg(
    existing: impl Fn(&str) -> Option<Arc<AggregateUDF>>,
) -> Option<AggregateUDF> {
    let avg = existing("avg")?;
    Some(AggregateUDF::new_from_impl(TryAvg {
        avg,
        signature: Signature::user_defined(Volatility::Immutable),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::functions::testing::{one, session};

    #[test]
    fn mode_is_the_most_frequent_value_ignoring_nulls() {
        let s = session();
        let v = one(
            &s,
            "SELECT mode(c) FROM VALUES (0), (10), (10), (NULL), (NULL), (NULL) t(c)",
        );
        assert_eq!(v, ScalarValue::Int32(Some(10)));
        let v = one(&s, "SELECT mode(c) FROM VALUES ('a'), ('b'), ('b') t(c)");
        assert_eq!(v, ScalarValue::Utf8(Some("b".into())));
        // Only nulls, or no rows: null.
        let v = one(&s, "SELECT mode(c) FROM VALUES (CAST(NULL AS INT)) t(c)");
        assert_eq!(v, ScalarValue::Int32(None));
        // More ties, as Spark 3.5.7 breaks them.
        let v = one(
            &s,
            "SELECT mode(c) FROM VALUES (5), (3), (9), (1), (70) t(c)",
        );
        assert_eq!(v, ScalarValue::Int32(Some(1)));
        let v = one(
            &s,
            "SELECT mode(c) FROM VALUES ('x'), ('y'), ('z'), ('w') t(c)",
        );
        assert_eq!(v, ScalarValue::Utf8(Some("z".into())));
        let v = one(&s, "SELECT mode(c) FROM VALUES (true), (false) t(c)");
        assert_eq!(v, ScalarValue::Boolean(Some(false)));
        let v = one(&s, "SELECT mode(c) FROM VALUES (1) t(c) WHERE c > 5");
        assert!(v.is_null());
        // Ties: the first in Spark's hash-map order (Spark 3.5.7 returns 1.5 here).
        let v = one(
            &s,
            "SELECT mode(c) FROM VALUES (CAST(1.5 AS DOUBLE)), (2.5), (-1.0), (4.0) t(c)",
        );
        assert_eq!(v, ScalarValue::Float64(Some(1.5)));
        let e = s
            .sql("SELECT mode(c, c) FROM VALUES (1) t(c)")
            .and_then(|f| f.collect());
        let e = e.unwrap_err();
        assert!(e.to_string().contains("mode"), "{e}");
    }

    #[test]
    fn mode_state_merges_counts() {
        let mut a = ModeAcc {
            data_type: DataType::Int32,
            keys: vec![],
            index: HashMap::new(),
            counts: vec![],
        };
        let batch: ArrayRef =
            Arc::new(arrow::array::Int32Array::from(vec![Some(1), Some(2), None]));
        a.update_batch(&[batch]).unwrap();
        let st: Vec<ArrayRef> = a
            .state()
            .unwrap()
            .iter()
            .map(|v| v.to_array().unwrap())
            .collect();
        let mut b = ModeAcc {
            data_type: DataType::Int32,
            keys: vec![],
            index: HashMap::new(),
            counts: vec![],
        };
        let batch: ArrayRef = Arc::new(arrow::array::Int32Array::from(vec![2, 3]));
        b.update_batch(&[batch]).unwrap();
        b.merge_batch(&st).unwrap();
        assert_eq!(b.evaluate().unwrap(), ScalarValue::Int32(Some(2)));
    }

    #[test]
    fn try_avg_is_null_on_interval_overflow() {
        let s = session();
        let v = one(&s, "SELECT try_avg(c) FROM VALUES (1), (2), (NULL) t(c)");
        assert_eq!(v, ScalarValue::Float64(Some(1.5)));
        let v = one(
            &s,
            "SELECT try_avg(c) FROM VALUES (make_ym_interval(0, 2147483647)), (make_ym_interval(0, 1)) t(c)",
        );
        assert!(v.is_null(), "{v:?}");
        let v = one(
            &s,
            "SELECT try_avg(c) FROM VALUES (INTERVAL '1' MONTH), (INTERVAL '2' MONTH) t(c)",
        );
        assert_eq!(v, ScalarValue::new_interval_mdn(2, 0, 0));
        let v = one(
            &s,
            "SELECT try_avg(c) FROM VALUES (INTERVAL '-1' MONTH), (INTERVAL '-2' MONTH) t(c)",
        );
        assert_eq!(v, ScalarValue::new_interval_mdn(-2, 0, 0));
        let v = one(
            &s,
            "SELECT try_avg(c) FROM VALUES (INTERVAL '1' SECOND), (INTERVAL '2' SECOND) t(c)",
        );
        assert_eq!(v, ScalarValue::new_interval_mdn(0, 0, 1_500_000_000));
    }

    #[test]
    fn regr_intercept_follows_spark_arithmetic() {
        let s = session();
        let rows =
            "VALUES (1, CAST(1.5 AS DOUBLE)), (NULL, NULL), (3, 2.5), (3, -1.0), (7, 4.0) t(i, d)";
        let v = one(&s, &format!("SELECT regr_intercept(d, i) FROM {rows}"));
        assert_eq!(v, ScalarValue::Float64(Some(0.0)));
        let v = one(&s, &format!("SELECT regr_intercept(i, d) FROM {rows}"));
        assert_eq!(v, ScalarValue::Float64(Some(2.2452830188679247)));
        let v = one(
            &s,
            "SELECT regr_intercept(y, x) FROM VALUES (1, CAST(NULL AS INT)) t(y, x)",
        );
        assert!(v.is_null());
    }

    #[test]
    fn spark_string_hash_matches_utf8string() {
        // Spark 3.5.7: hash(''), hash('a'), hash('abcde') (Murmur3 seed 42, UTF8String.hashCode).
        assert_eq!(murmur3_spark_bytes(b"", 42), 142593372);
        assert_eq!(murmur3_spark_bytes(b"a", 42), 1485273170);
        assert_eq!(murmur3_spark_bytes(b"abcde", 42), 814637928);
    }
}
