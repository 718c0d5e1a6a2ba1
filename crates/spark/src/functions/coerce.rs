//! Spark's implicit casts for functions that take dates and timestamps, and the functions that
//! are a cast or a constant in Spark.
//!
//! - [`StringArgsAs`] wraps a registered function (from `datafusion-spark` or DataFusion) so
//!   that a string argument where Spark expects a DATE or TIMESTAMP is cast first, as Spark's
//!   analyser does (`date_add('2016-07-30', 1)`, `hour('2009-07-30 12:58:59')`).
//! - The cast functions `int(x)`, `date(x)`, ... are `CAST(x AS <type>)` with Spark's non-ANSI
//!   result for a value that does not convert (null).
//! - Constants and rewrites (`e()`, `positive`, `isnull`, `equal_null`, `current_database`, ...)
//!   simplify to the expression Spark means.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Float64Array, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, FieldRef, Float64Type, Int64Type, TimeUnit};
use datafusion::common::{exec_err, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::expr::{BinaryExpr, TryCast};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    lit, ColumnarValue, Expr, Operator, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};

const TS_US: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

fn is_string_or_null(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

/// A registered function whose string arguments at some positions are first cast to a DATE or
/// TIMESTAMP (Spark's implicit cast); everything else is the wrapped function's.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct StringArgsAs {
    inner: Arc<ScalarUDF>,
    targets: Vec<Option<DataType>>,
    signature: Signature,
}

impl ScalarUDFImpl for StringArgsAs {
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
        let types = arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| match self.targets.get(i) {
                // Spark's INT arguments take any integer (literals are BIGINT here).
                Some(Some(DataType::Int32)) if t.is_integer() => DataType::Int32,
                Some(Some(target)) if is_string_or_null(t) => target.clone(),
                _ => t.clone(),
            });
        super::coerced_by(&self.inner, types)
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }
}

/// `(function, the types its string arguments are cast to)`: Spark's date and timestamp
/// functions whose `datafusion-spark` or DataFusion implementation takes no strings.
fn string_targets() -> Vec<(&'static str, Vec<Option<DataType>>)> {
    let d = || Some(DataType::Date32);
    let t = || Some(TS_US);
    vec![
        ("add_months", vec![d(), Some(DataType::Int32)]),
        ("date_add", vec![d(), Some(DataType::Int32)]),
        ("dateadd", vec![d(), Some(DataType::Int32)]),
        ("date_sub", vec![d(), Some(DataType::Int32)]),
        ("last_day", vec![d()]),
        ("next_day", vec![d(), None]),
        ("weekday", vec![d()]),
        ("datediff", vec![d(), d()]),
        ("date_diff", vec![d(), d()]),
        ("unix_date", vec![d()]),
        ("trunc", vec![d(), None]),
        ("hour", vec![t()]),
        ("minute", vec![t()]),
        ("second", vec![t()]),
        ("unix_seconds", vec![t()]),
        ("unix_millis", vec![t()]),
        ("unix_micros", vec![t()]),
        ("date_trunc", vec![None, t()]),
        ("to_utc_timestamp", vec![t(), None]),
        ("from_utc_timestamp", vec![t(), None]),
        ("factorial", vec![Some(DataType::Int32)]),
        ("space", vec![Some(DataType::Int32)]),
    ]
}

/// The wrapped date/time functions, for those the session has.
pub(super) fn string_arg_wrappers(
    existing: impl Fn(&str) -> Option<Arc<ScalarUDF>>,
) -> Vec<ScalarUDF> {
    string_targets()
        .into_iter()
        .filter_map(|(name, targets)| {
            let inner = existing(name)?;
            Some(ScalarUDF::new_from_impl(StringArgsAs {
                inner,
                targets,
                signature: Signature::user_defined(Volatility::Immutable),
            }))
        })
        .collect()
}

/// What a [`Rewrite`] function means.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Meaning {
    /// `int(x)`, `date(x)`, ...: `CAST(x AS type)`, null where the value does not convert.
    Cast(DataType),
    /// A constant.
    Constant(ScalarValue),
    /// `positive(x)`: `x`.
    Identity,
    IsNull,
    IsNotNull,
    /// `equal_null(a, b)`: `a <=> b`.
    EqualNull,
    /// `date_from_unix_date(days)`.
    DateFromUnixDate,
}

/// A Spark function that is another expression (it always simplifies away).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Rewrite {
    name: &'static str,
    meaning: Meaning,
    signature: Signature,
}

impl ScalarUDFImpl for Rewrite {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(match &self.meaning {
            Meaning::Cast(t) => t.clone(),
            Meaning::Constant(v) => v.data_type(),
            Meaning::Identity => arg_types[0].clone(),
            Meaning::IsNull | Meaning::IsNotNull | Meaning::EqualNull => DataType::Boolean,
            Meaning::DateFromUnixDate => DataType::Date32,
        })
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        // Only `equal_null` has a user-defined signature: both sides to one comparable type.
        match arg_types {
            [a, b] => {
                let t = match (a, b) {
                    (DataType::Null, t) | (t, DataType::Null) => t.clone(),
                    (a, b) => {
                        datafusion::logical_expr::type_coercion::binary::comparison_coercion(a, b)
                            .unwrap_or_else(|| a.clone())
                    }
                };
                Ok(vec![t.clone(), t])
            }
            _ => exec_err!("{} takes two arguments", self.name),
        }
    }
    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        exec_err!("{} is rewritten before it runs", self.name)
    }
    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        let mut args = args.into_iter();
        let a0 = args.next().unwrap_or_else(|| lit(ScalarValue::Null));
        let a1 = args.next().unwrap_or_else(|| lit(ScalarValue::Null));
        let first = || a0.clone();
        Ok(ExprSimplifyResult::Simplified(match &self.meaning {
            Meaning::Cast(t) => Expr::TryCast(TryCast::new(Box::new(first()), t.clone())),
            Meaning::Constant(v) => lit(v.clone()),
            Meaning::Identity => first(),
            Meaning::IsNull => first().is_null(),
            Meaning::IsNotNull => first().is_not_null(),
            Meaning::EqualNull => {
                let b = a1.clone();
                Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(first()),
                    Operator::IsNotDistinctFrom,
                    Box::new(b),
                ))
            }
            Meaning::DateFromUnixDate => Expr::TryCast(TryCast::new(
                Box::new(Expr::TryCast(TryCast::new(
                    Box::new(first()),
                    DataType::Int32,
                ))),
                DataType::Date32,
            )),
        }))
    }
}

/// `timestamp_seconds` / `timestamp_millis` / `timestamp_micros`: a TIMESTAMP from a count of
/// units since the epoch.
#[derive(Debug, PartialEq, Eq, Hash)]
struct EpochTimestamp {
    name: &'static str,
    micros_per_unit: i64,
    signature: Signature,
}

impl ScalarUDFImpl for EpochTimestamp {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [t] if t.is_integer() || t.is_null() => Ok(vec![DataType::Int64]),
            [t] if t.is_numeric() && self.micros_per_unit == 1_000_000 => {
                Ok(vec![DataType::Float64])
            }
            _ => exec_err!(
                "{} takes one {} argument",
                self.name,
                if self.micros_per_unit == 1_000_000 {
                    "numeric"
                } else {
                    "integral"
                }
            ),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(TS_US)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let a = args.args[0].to_array(args.number_rows)?;
        let k = self.micros_per_unit;
        let out: TimestampMicrosecondArray = match a.data_type() {
            DataType::Float64 => a
                .as_primitive::<Float64Type>()
                .iter()
                .map(|v| v.map(|v| (v * k as f64).round() as i64))
                .collect(),
            _ => a
                .as_primitive::<Int64Type>()
                .iter()
                .map(|v| v.and_then(|v| v.checked_mul(k)))
                .collect(),
        };
        let out: ArrayRef = Arc::new(out);
        super::columnar(out, scalar)
    }
}

/// `log1p(x)`: ln(1 + x), exact near 0.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Log1p {
    signature: Signature,
}

impl ScalarUDFImpl for Log1p {
    fn name(&self) -> &str {
        "log1p"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let a = args.args[0].to_array(args.number_rows)?;
        let a = arrow::compute::cast(&a, &DataType::Float64)?;
        let out: Float64Array = a
            .as_primitive::<Float64Type>()
            .iter()
            // Spark: null for x <= -1 (a log of a non-positive number).
            .map(|v| v.and_then(|v| (v > -1.0).then(|| v.ln_1p())))
            .collect();
        let out: ArrayRef = Arc::new(out);
        super::columnar(out, scalar)
    }
}

/// The functions of this file that stand alone.
pub(super) fn udfs() -> Vec<ScalarUDF> {
    let one = || Signature::any(1, Volatility::Immutable);
    let mut out = Vec::new();
    let casts = [
        ("bigint", DataType::Int64),
        ("binary", DataType::Binary),
        ("boolean", DataType::Boolean),
        ("date", DataType::Date32),
        ("decimal", DataType::Decimal128(10, 0)),
        ("double", DataType::Float64),
        ("float", DataType::Float32),
        ("int", DataType::Int32),
        ("smallint", DataType::Int16),
        ("string", DataType::Utf8),
        ("timestamp", TS_US),
        ("tinyint", DataType::Int8),
    ];
    for (name, t) in casts {
        out.push(Rewrite {
            name,
            meaning: Meaning::Cast(t),
            signature: one(),
        });
    }
    let text = |s: &str| ScalarValue::Utf8(Some(s.to_string()));
    let user = std::env::var("USER").unwrap_or_else(|_| "sluice".to_string());
    for (name, v) in [
        ("e", ScalarValue::Float64(Some(std::f64::consts::E))),
        ("current_database", text("default")),
        ("current_schema", text("default")),
        ("current_catalog", text("spark_catalog")),
        // Sluice's timestamps are UTC (the session time zone Spark's tests run with).
        ("current_timezone", text("UTC")),
        ("current_user", text(&user)),
        ("user", text(&user)),
        ("session_user", text(&user)),
    ] {
        out.push(Rewrite {
            name,
            meaning: Meaning::Constant(v),
            signature: Signature::nullary(Volatility::Stable),
        });
    }
    for (name, meaning) in [
        ("positive", Meaning::Identity),
        ("isnull", Meaning::IsNull),
        ("isnotnull", Meaning::IsNotNull),
        ("date_from_unix_date", Meaning::DateFromUnixDate),
    ] {
        out.push(Rewrite {
            name,
            meaning,
            signature: one(),
        });
    }
    out.push(Rewrite {
        name: "equal_null",
        meaning: Meaning::EqualNull,
        signature: Signature::user_defined(Volatility::Immutable),
    });
    let mut out: Vec<ScalarUDF> = out.into_iter().map(ScalarUDF::new_from_impl).collect();
    for (name, micros_per_unit) in [
        ("timestamp_seconds", 1_000_000),
        ("timestamp_millis", 1_000),
        ("timestamp_micros", 1),
    ] {
        out.push(ScalarUDF::new_from_impl(EpochTimestamp {
            name,
            micros_per_unit,
            signature: Signature::user_defined(Volatility::Immutable),
        }));
    }
    out.push(ScalarUDF::new_from_impl(Log1p {
        signature: Signature::uniform(1, vec![DataType::Float64], Volatility::Immutable),
    }));
    out
}

/// `to_date(s, fmt)` / `to_timestamp(s, fmt)` with Spark's pattern letters: the pattern is
/// translated for DataFusion's chrono-based parser (as `date_format` does); without a
/// pattern, or with a pattern that is not a constant, the wrapped function runs unchanged.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct SparkPattern {
    inner: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for SparkPattern {
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
        self.inner.coerce_types(arg_types)
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if let Some(ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(p))
            | ScalarValue::LargeUtf8(Some(p))
            | ScalarValue::Utf8View(Some(p)),
        )) = args.args.get(1)
        {
            let translated = crate::fixes::spark_pattern_to_chrono(p)
                .map_err(datafusion::error::DataFusionError::Execution)?;
            args.args[1] = ColumnarValue::Scalar(ScalarValue::Utf8(Some(translated)));
        }
        self.inner.invoke_with_args(args)
    }
}

/// `to_date` and `to_timestamp` reading Spark's pattern letters.
pub(super) fn pattern_wrappers(
    existing: impl Fn(&str) -> Option<Arc<ScalarUDF>>,
) -> Vec<ScalarUDF> {
    ["to_date", "to_timestamp"]
        .into_iter()
        .filter_map(existing)
        .map(|inner| ScalarUDF::new_from_impl(SparkPattern { inner }))
        .collect()
}
