//! Spark's aggregate functions that DataFusion lacks or names and types differently:
//! `first`/`last` (with `ignoreNulls` as an argument or `IGNORE NULLS`), `count_if`,
//! `skewness`/`kurtosis` (Spark's central moments), `approx_count_distinct` (DataFusion's
//! `approx_distinct` with Spark's BIGINT result), and `max_by`/`min_by` (Spark's tie rule: the
//! last row among equal orderings). Also what the other aggregate files share: [`agg_err`],
//! [`as_int64`], the usage error and the state fields.
//!
//! Every accumulator here keeps its state in `state()` fields, so a streaming aggregation
//! stores and merges it across batches and restarts like any DataFusion aggregate.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type, IntervalUnit, TimeUnit};
use datafusion::common::{exec_err, ScalarValue};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use datafusion::physical_expr::expressions::Literal;

use crate::error::SluiceError;

// ---- what the aggregate files share ----

/// An execution error carrying Spark's error class `class` (kept through DataFusion).
pub(super) fn agg_err(class: &'static str, msg: impl Into<String>) -> DataFusionError {
    DataFusionError::External(Box::new(SluiceError::query(class, msg.into())))
}

/// Spark's error for a call with a number of arguments the aggregate does not take.
pub(super) fn wrong_args(name: &str, what: &str, n: usize) -> DataFusionError {
    agg_err(
        crate::error::class::WRONG_NUM_ARGS,
        format!("`{name}` takes {what}, not {n} arguments"),
    )
}

/// Year-month (months) or day-time (microseconds) interval values as BIGINT; other types cast.
pub(super) fn as_int64(a: &ArrayRef) -> DfResult<ArrayRef> {
    Ok(match a.data_type() {
        DataType::Interval(IntervalUnit::YearMonth) => Arc::new(
            a.as_primitive::<arrow::datatypes::IntervalYearMonthType>()
                .unary::<_, Int64Type>(|v| v as i64),
        ),
        DataType::Duration(_) => {
            let d = arrow::compute::cast(a, &DataType::Duration(TimeUnit::Microsecond))?;
            Arc::new(
                d.as_primitive::<arrow::datatypes::DurationMicrosecondType>()
                    .unary::<_, Int64Type>(|v| v),
            )
        }
        _ => arrow::compute::cast(a, &DataType::Int64)?,
    })
}

/// A state field of the aggregate `args` describes, named `<name>[what]`.
pub(super) fn state_field(args: &StateFieldsArgs, what: &str, t: DataType) -> FieldRef {
    Arc::new(Field::new(format!("{}[{what}]", args.name), t, true))
}

/// Spark's `first(x[, ignoreNulls])` / `last(x[, ignoreNulls])` over DataFusion's
/// `first_value` / `last_value`; `first(x) IGNORE NULLS` reaches the same accumulator.
#[derive(Debug, PartialEq, Eq, Hash)]
struct FirstLast {
    name: &'static str,
    inner: Arc<AggregateUDF>,
    signature: Signature,
}

/// The constant boolean second argument (`ignoreNulls`), if any.
fn ignore_nulls_argument(args: &AccumulatorArgs) -> DfResult<bool> {
    let Some(e) = args.exprs.get(1) else {
        return Ok(false);
    };
    match e.downcast_ref::<Literal>().map(|l| l.value()) {
        Some(ScalarValue::Boolean(Some(b))) => Ok(*b),
        _ => exec_err!(
            "The second argument in {} should be a boolean literal (ignoreNulls), such as true",
            args.name
        ),
    }
}

impl AggregateUDFImpl for FirstLast {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [t] => Ok(vec![t.clone()]),
            [t, _] => Ok(vec![t.clone(), DataType::Boolean]),
            _ => exec_err!("{} takes (expr[, ignoreNulls])", self.name),
        }
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types[0].clone())
    }
    fn supports_null_handling_clause(&self) -> bool {
        true
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let ignore_nulls = args.ignore_nulls || ignore_nulls_argument(&args)?;
        self.inner.accumulator(AccumulatorArgs {
            return_field: Arc::clone(&args.return_field),
            schema: args.schema,
            ignore_nulls,
            order_bys: args.order_bys,
            is_reversed: args.is_reversed,
            name: args.name,
            is_distinct: args.is_distinct,
            exprs: &args.exprs[..1],
            expr_fields: &args.expr_fields[..1],
        })
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        self.inner.state_fields(StateFieldsArgs {
            name: args.name,
            input_fields: &args.input_fields[..1],
            return_field: args.return_field,
            ordering_fields: args.ordering_fields,
            is_distinct: args.is_distinct,
        })
    }
}

/// `count_if(cond)`: the number of rows where `cond` is true (BIGINT, never null).
#[derive(Debug, Default)]
struct CountIfAccumulator {
    count: i64,
}

impl Accumulator for CountIfAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let b = values[0].as_boolean();
        self.count += b.iter().filter(|v| *v == Some(true)).count() as i64;
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let c = states[0].as_primitive::<Int64Type>();
        self.count += c.iter().flatten().sum::<i64>();
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Int64(Some(self.count))])
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        Ok(ScalarValue::Int64(Some(self.count)))
    }
    fn size(&self) -> usize {
        size_of_val(self)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CountIf {
    signature: Signature,
}

impl AggregateUDFImpl for CountIf {
    fn name(&self) -> &str {
        "count_if"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [DataType::Boolean | DataType::Null] => Ok(vec![DataType::Boolean]),
            [t] => exec_err!("count_if takes a BOOLEAN condition, not {t}"),
            _ => exec_err!("count_if takes one argument (a condition)"),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Int64)
    }
    fn is_nullable(&self) -> bool {
        false
    }
    fn default_value(&self, _data_type: &DataType) -> DfResult<ScalarValue> {
        Ok(ScalarValue::Int64(Some(0)))
    }
    fn accumulator(&self, _args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::<CountIfAccumulator>::default())
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[count]", args.name),
            DataType::Int64,
            false,
        ))])
    }
}

/// Spark's `CentralMomentAgg` state: count, mean and the 2nd..4th central moments' sums.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Moments {
    n: f64,
    avg: f64,
    m2: f64,
    m3: f64,
    m4: f64,
}

impl Moments {
    /// Spark's `updateExpressions`.
    fn add(&mut self, v: f64) {
        let n = self.n + 1.0;
        let delta = v - self.avg;
        let delta_n = delta / n;
        let m2 = self.m2 + delta * (delta - delta_n);
        let delta2 = delta * delta;
        let delta_n2 = delta_n * delta_n;
        let m3 = self.m3 - 3.0 * delta_n * m2 + delta * (delta2 - delta_n2);
        let m4 = self.m4 - 4.0 * delta_n * m3 - 6.0 * delta_n2 * m2
            + delta * (delta * delta2 - delta_n * delta_n2);
        *self = Moments {
            n,
            avg: self.avg + delta_n,
            m2,
            m3,
            m4,
        };
    }
    /// Spark's `mergeExpressions`.
    fn merge(&mut self, o: &Moments) {
        let (n1, n2) = (self.n, o.n);
        let n = n1 + n2;
        let delta = o.avg - self.avg;
        let delta_n = if n == 0.0 { 0.0 } else { delta / n };
        let m2 = self.m2 + o.m2 + delta * delta_n * n1 * n2;
        let m3 = self.m3
            + o.m3
            + delta_n * delta_n * delta * n1 * n2 * (n1 - n2)
            + 3.0 * delta_n * (n1 * o.m2 - n2 * self.m2);
        let m4 = self.m4
            + o.m4
            + delta_n * delta_n * delta_n * delta * n1 * n2 * (n1 * n1 - n1 * n2 + n2 * n2)
            + 6.0 * delta_n * delta_n * (n1 * n1 * o.m2 + n2 * n2 * self.m2)
            + 4.0 * delta_n * (n1 * o.m3 - n2 * self.m3);
        *self = Moments {
            n,
            avg: self.avg + delta_n * n2,
            m2,
            m3,
            m4,
        };
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Moment {
    Skewness,
    Kurtosis,
}

#[derive(Debug)]
struct MomentAccumulator {
    moment: Moment,
    m: Moments,
}

impl Accumulator for MomentAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let v = values[0].as_primitive::<Float64Type>();
        for x in v.iter().flatten() {
            self.m.add(x);
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let col = |i: usize| states[i].as_primitive::<Float64Type>();
        let (n, avg, m2, m3, m4) = (col(0), col(1), col(2), col(3), col(4));
        for i in 0..n.len() {
            if n.is_null(i) {
                continue;
            }
            self.m.merge(&Moments {
                n: n.value(i),
                avg: avg.value(i),
                m2: m2.value(i),
                m3: m3.value(i),
                m4: m4.value(i),
            });
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let m = self.m;
        Ok([m.n, m.avg, m.m2, m.m3, m.m4]
            .into_iter()
            .map(|v| ScalarValue::Float64(Some(v)))
            .collect())
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let m = self.m;
        // Spark: null without rows, and null when m2 is 0 (spark.sql.legacy.statisticalAggregate
        // is false by default).
        if m.n == 0.0 || m.m2 == 0.0 {
            return Ok(ScalarValue::Float64(None));
        }
        Ok(ScalarValue::Float64(Some(match self.moment {
            Moment::Skewness => m.n.sqrt() * m.m3 / (m.m2 * m.m2 * m.m2).sqrt(),
            Moment::Kurtosis => m.n * m.m4 / (m.m2 * m.m2) - 3.0,
        })))
    }
    fn size(&self) -> usize {
        size_of_val(self)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CentralMoment {
    moment: Moment,
    signature: Signature,
}

impl AggregateUDFImpl for CentralMoment {
    fn name(&self) -> &str {
        match self.moment {
            Moment::Skewness => "skewness",
            Moment::Kurtosis => "kurtosis",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [t] if t.is_numeric() || t.is_null() || matches!(t, DataType::Utf8) => {
                Ok(vec![DataType::Float64])
            }
            [t] => exec_err!("{} takes a numeric argument, not {t}", self.name()),
            _ => exec_err!("{} takes one argument", self.name()),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }
    fn accumulator(&self, _args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(MomentAccumulator {
            moment: self.moment,
            m: Moments::default(),
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(["n", "avg", "m2", "m3", "m4"]
            .iter()
            .map(|f| {
                Arc::new(Field::new(
                    format!("{}[{f}]", args.name),
                    DataType::Float64,
                    true,
                ))
            })
            .collect())
    }
}

/// An aggregate whose result is cast to Spark's type (e.g. `approx_count_distinct`: BIGINT,
/// where DataFusion's `approx_distinct` is UInt64); extra trailing arguments Spark allows
/// (`rsd`) are accepted and not passed on.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CastResult {
    name: &'static str,
    inner: Arc<AggregateUDF>,
    result: DataType,
    max_args: usize,
    /// How many leading arguments the wrapped aggregate takes.
    pass_args: usize,
    /// Float and boolean arguments are counted by their text (`approx_distinct` hashes strings
    /// and integers only).
    floats_as_text: bool,
    signature: Signature,
}

#[derive(Debug)]
struct CastAccumulator {
    inner: Box<dyn Accumulator>,
    result: DataType,
    pass_args: usize,
}

impl Accumulator for CastAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.inner.update_batch(&values[..self.pass_args])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        self.inner.merge_batch(states)
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        self.inner.state()
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        self.inner.evaluate()?.cast_to(&self.result)
    }
    fn size(&self) -> usize {
        self.inner.size() + size_of_val(self)
    }
}

impl CastResult {
    fn inner_return_field(&self, input: &[FieldRef]) -> DfResult<FieldRef> {
        let types: Vec<DataType> = input[..self.pass_args]
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let t = self.inner.return_type(&types)?;
        Ok(Arc::new(Field::new(self.name, t, true)))
    }
}

impl AggregateUDFImpl for CastResult {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if arg_types.len() < self.pass_args || arg_types.len() > self.max_args {
            return exec_err!(
                "{} takes {} to {} arguments",
                self.name,
                self.pass_args,
                self.max_args
            );
        }
        let mut types = arg_types.to_vec();
        if self.floats_as_text
            && matches!(
                types[0],
                DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Boolean
            )
        {
            types[0] = DataType::Utf8;
        }
        let head: Vec<FieldRef> = types[..self.pass_args]
            .iter()
            .map(|t| Arc::new(Field::new("a", t.clone(), true)))
            .collect();
        let coerced = fields_with_udf(&head, self.inner.as_ref())?;
        for (i, f) in coerced.iter().enumerate() {
            types[i] = f.data_type().clone();
        }
        Ok(types)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.result.clone())
    }
    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
    fn default_value(&self, data_type: &DataType) -> DfResult<ScalarValue> {
        self.inner.default_value(data_type)?.cast_to(&self.result)
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let return_field = self.inner_return_field(args.expr_fields)?;
        let inner = self.inner.accumulator(AccumulatorArgs {
            return_field,
            schema: args.schema,
            ignore_nulls: args.ignore_nulls,
            order_bys: args.order_bys,
            is_reversed: args.is_reversed,
            name: args.name,
            is_distinct: args.is_distinct,
            exprs: &args.exprs[..self.pass_args],
            expr_fields: &args.expr_fields[..self.pass_args],
        })?;
        Ok(Box::new(CastAccumulator {
            inner,
            result: self.result.clone(),
            pass_args: self.pass_args,
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        let return_field = self.inner_return_field(args.input_fields)?;
        self.inner.state_fields(StateFieldsArgs {
            name: args.name,
            input_fields: &args.input_fields[..self.pass_args],
            return_field,
            ordering_fields: args.ordering_fields,
            is_distinct: args.is_distinct,
        })
    }
}

/// The aggregates of this file; `existing` looks up the session's aggregates they build on.
pub(super) fn udafs(existing: impl Fn(&str) -> Option<Arc<AggregateUDF>>) -> Vec<AggregateUDF> {
    let mut out = Vec::new();
    for (name, inner) in [
        ("first", "first_value"),
        ("last", "last_value"),
        // Spark's first_value/last_value(x[, ignoreNulls]) are first/last.
        ("first_value", "first_value"),
        ("last_value", "last_value"),
    ] {
        if let Some(inner) = existing(inner) {
            out.push(AggregateUDF::new_from_impl(FirstLast {
                name,
                inner,
                signature: Signature::user_defined(Volatility::Immutable),
            }));
        }
    }
    out.push(AggregateUDF::new_from_impl(CountIf {
        signature: Signature::user_defined(Volatility::Immutable),
    }));
    for moment in [Moment::Skewness, Moment::Kurtosis] {
        out.push(AggregateUDF::new_from_impl(CentralMoment {
            moment,
            signature: Signature::user_defined(Volatility::Immutable),
        }));
    }
    // Spark's any_value(x[, ignoreNulls]) is first(x[, ignoreNulls]); DataFusion's skips nulls.
    if let Some(inner) = existing("first_value") {
        out.push(AggregateUDF::new_from_impl(FirstLast {
            name: "any_value",
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
        }));
    }
    for (name, inner, pass_args, max_args, floats_as_text) in [
        ("approx_count_distinct", "approx_distinct", 1, 2, true),
        ("regr_count", "regr_count", 2, 2, false),
    ] {
        if let Some(inner) = existing(inner) {
            out.push(AggregateUDF::new_from_impl(CastResult {
                name,
                inner,
                result: DataType::Int64,
                max_args,
                pass_args,
                floats_as_text,
                signature: Signature::user_defined(Volatility::Immutable),
            }));
        }
    }
    out
}

/// Spark's numeric aggregates read a string argument as a DOUBLE (null where it is not a
/// number): `avg('a')` is null, not an error. Wraps a registered aggregate so that string and
/// null-typed arguments are cast, without failing, before its accumulator sees them.
#[derive(Debug, PartialEq, Eq, Hash)]
struct NumericFromStrings {
    inner: Arc<AggregateUDF>,
    signature: Signature,
}

fn is_text_or_null(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

fn as_double_fields(fields: &[FieldRef]) -> Vec<FieldRef> {
    fields
        .iter()
        .map(|f| {
            if is_text_or_null(f.data_type()) {
                Arc::new(Field::new(f.name(), DataType::Float64, true))
            } else {
                Arc::clone(f)
            }
        })
        .collect()
}

#[derive(Debug)]
struct DoubleInputs {
    inner: Box<dyn Accumulator>,
}

fn doubles(values: &[ArrayRef]) -> DfResult<Vec<ArrayRef>> {
    values
        .iter()
        .map(|v| {
            if is_text_or_null(v.data_type()) {
                Ok(arrow::compute::cast(v, &DataType::Float64)?)
            } else {
                Ok(Arc::clone(v))
            }
        })
        .collect()
}

impl Accumulator for DoubleInputs {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.inner.update_batch(&doubles(values)?)
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        self.inner.merge_batch(states)
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        self.inner.state()
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        self.inner.evaluate()
    }
    fn size(&self) -> usize {
        self.inner.size() + size_of_val(self)
    }
}

impl AggregateUDFImpl for NumericFromStrings {
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
        let fields: Vec<FieldRef> = arg_types
            .iter()
            .map(|t| Arc::new(Field::new("a", t.clone(), true)))
            .collect();
        let coerced = fields_with_udf(&as_double_fields(&fields), self.inner.as_ref())?;
        Ok(arg_types
            .iter()
            .zip(coerced)
            .map(|(t, c)| {
                if is_text_or_null(t) {
                    t.clone()
                } else {
                    c.data_type().clone()
                }
            })
            .collect())
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        let t: Vec<DataType> = arg_types
            .iter()
            .map(|t| {
                if is_text_or_null(t) {
                    DataType::Float64
                } else {
                    t.clone()
                }
            })
            .collect();
        self.inner.return_type(&t)
    }
    fn return_field(&self, arg_fields: &[FieldRef]) -> DfResult<FieldRef> {
        self.inner.return_field(&as_double_fields(arg_fields))
    }
    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
    fn default_value(&self, data_type: &DataType) -> DfResult<ScalarValue> {
        self.inner.default_value(data_type)
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let fields = as_double_fields(args.expr_fields);
        // Inner accumulators that read their input type from the expressions see doubles too.
        let exprs: Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>> = args
            .exprs
            .iter()
            .zip(args.expr_fields)
            .map(|(e, f)| {
                if is_text_or_null(f.data_type()) {
                    Arc::new(datafusion::physical_expr::expressions::CastExpr::new(
                        Arc::clone(e),
                        DataType::Float64,
                        None,
                    )) as _
                } else {
                    Arc::clone(e)
                }
            })
            .collect();
        let inner = self.inner.accumulator(AccumulatorArgs {
            return_field: Arc::clone(&args.return_field),
            schema: args.schema,
            ignore_nulls: args.ignore_nulls,
            order_bys: args.order_bys,
            is_reversed: args.is_reversed,
            name: args.name,
            is_distinct: args.is_distinct,
            exprs: &exprs,
            expr_fields: &fields,
        })?;
        Ok(Box::new(DoubleInputs { inner }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        let fields = as_double_fields(args.input_fields);
        self.inner.state_fields(StateFieldsArgs {
            name: args.name,
            input_fields: &fields,
            return_field: args.return_field,
            ordering_fields: args.ordering_fields,
            is_distinct: args.is_distinct,
        })
    }
}

/// The numeric aggregates that read strings as doubles, wrapped (`existing` looks them up,
/// after [`udafs`] are registered).
pub(super) fn numeric_from_strings(
    existing: impl Fn(&str) -> Option<Arc<AggregateUDF>>,
) -> Vec<AggregateUDF> {
    [
        "avg",
        "sum",
        "try_sum",
        "stddev",
        "stddev_pop",
        "stddev_samp",
        "var_samp",
        "var_pop",
        "skewness",
        "kurtosis",
    ]
    .into_iter()
    .filter_map(|name| {
        let inner = existing(name)?;
        Some(AggregateUDF::new_from_impl(NumericFromStrings {
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
        }))
    })
    .collect()
}

/// Spark's ordering of two non-null values of one type: doubles with NaN largest and
/// `-0.0 == 0.0`, everything else as DataFusion orders scalars.
fn spark_cmp(a: &ScalarValue, b: &ScalarValue) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    fn dbl(x: f64, y: f64) -> Ordering {
        match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        }
    }
    match (a, b) {
        (ScalarValue::Float64(Some(x)), ScalarValue::Float64(Some(y))) => dbl(*x, *y),
        (ScalarValue::Float32(Some(x)), ScalarValue::Float32(Some(y))) => dbl(*x as f64, *y as f64),
        _ => a.partial_cmp(b).unwrap_or(Ordering::Equal),
    }
}

// ---------------------------------------------------------------------------------------------
// max_by / min_by

#[derive(Debug)]
struct ByAcc {
    max: bool,
    value: ScalarValue,
    ordering: ScalarValue,
}

impl ByAcc {
    /// Spark's `MaxMinBy` update/merge: the new side wins unless the old ordering is strictly
    /// better (so the last of equal orderings is kept); a null ordering never wins.
    fn offer(&mut self, value: ScalarValue, ordering: ScalarValue) {
        if ordering.is_null() {
            return;
        }
        let replace = self.ordering.is_null() || {
            let c = spark_cmp(&self.ordering, &ordering);
            if self.max {
                c != std::cmp::Ordering::Greater
            } else {
                c != std::cmp::Ordering::Less
            }
        };
        if replace {
            self.value = value;
            self.ordering = ordering;
        }
    }
    fn take(&mut self, values: &ArrayRef, orderings: &ArrayRef) -> DfResult<()> {
        for i in 0..orderings.len() {
            if orderings.is_valid(i) {
                self.offer(
                    ScalarValue::try_from_array(values, i)?,
                    ScalarValue::try_from_array(orderings, i)?,
                );
            }
        }
        Ok(())
    }
}

impl Accumulator for ByAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.take(&values[0], &values[1])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        self.take(&states[0], &states[1])
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![self.value.clone(), self.ordering.clone()])
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        Ok(self.value.clone())
    }
    fn size(&self) -> usize {
        size_of_val(self) + self.value.size() + self.ordering.size()
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct MaxMinBy {
    max: bool,
    signature: Signature,
}

impl AggregateUDFImpl for MaxMinBy {
    fn name(&self) -> &str {
        if self.max {
            "max_by"
        } else {
            "min_by"
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [x, y] => {
                let norm = |t: &DataType| match t {
                    DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
                    t => t.clone(),
                };
                if matches!(y, DataType::Map(..)) {
                    return Err(agg_err(
                        crate::error::class::DATATYPE_MISMATCH_INVALID_ORDERING_TYPE,
                        format!("`{}` cannot order by a MAP ({y})", self.name()),
                    ));
                }
                Ok(vec![norm(x), norm(y)])
            }
            _ => Err(wrong_args(
                self.name(),
                "two arguments (x, y)",
                arg_types.len(),
            )),
        }
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types[0].clone())
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(ByAcc {
            max: self.max,
            value: ScalarValue::try_from(args.expr_fields[0].data_type())?,
            ordering: ScalarValue::try_from(args.expr_fields[1].data_type())?,
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![
            state_field(&args, "value", args.input_fields[0].data_type().clone()),
            state_field(&args, "ordering", args.input_fields[1].data_type().clone()),
        ])
    }
}

/// `max_by(x, y)` and `min_by(x, y)`.
pub(super) fn max_min_by() -> Vec<AggregateUDF> {
    let sig = || Signature::user_defined(Volatility::Immutable);
    vec![
        AggregateUDF::new_from_impl(MaxMinBy {
            max: true,
            signature: sig(),
        }),
        AggregateUDF::new_from_impl(MaxMinBy {
            max: false,
            signature: sig(),
        }),
    ]
}

#[cfg(test)]
#[path = "aggregates_tests.rs"]
mod tests;
