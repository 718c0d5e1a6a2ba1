//! Spark SQL semantics on top of DataFusion.
//!
//! Functions come from DataFusion and the `datafusion-spark` crate (registered by
//! `SessionStateBuilderSpark::with_spark_features`). This module holds only what neither gets
//! right for Spark's non-ANSI mode, each item pinned by a conformance scenario:
//!
//! - `round(double, s)`: Spark rounds the double's shortest decimal form HALF_UP
//!   (`round(2.675, 2)` = 2.68; a binary-float round gives 2.67).
//! - `CAST(timestamp AS BIGINT/INT)`: Spark gives epoch *seconds*; Arrow gives the raw unit.
//! - `CAST(timestamp AS STRING)`: Spark writes `2026-02-14 10:00:00` (a space, fractional
//!   seconds only when not zero, trailing zeros trimmed: `10:00:00.12`); Arrow writes
//!   `2026-02-14T10:00:00`. Timestamps without a zone are UTC in Sluice.
//! - casts, overflow and division (non-ANSI and `spark.sql.ansi.enabled`) are `ansi.rs`'s;
//!   [`SparkCastRule`] applies them after type coercion.
//! - `date_format(ts, 'HH:mm')`: Spark's datetime pattern letters; DataFusion's `date_format`
//!   (`to_char`) reads chrono's `%H:%M` and would print `HH:mm` literally. The pattern is
//!   translated and DataFusion formats; letters without a translation are an error that says
//!   so, never a silently wrong string.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array};
use arrow::datatypes::{DataType, TimeUnit};
use bigdecimal::{BigDecimal, RoundingMode};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::expr::Cast;
use datafusion::logical_expr::{
    ColumnarValue, ExprSchemable, LogicalPlan, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::Expr;

/// Spark's `round`: HALF_UP on the decimal form for doubles, `datafusion-spark`'s otherwise.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SparkRound {
    inner: Arc<ScalarUDF>,
}

impl SparkRound {
    /// Wraps the registered `round` (from `datafusion-spark`).
    pub fn new(inner: Arc<ScalarUDF>) -> Self {
        Self { inner }
    }
}

/// Spark's rounding of one double: `BigDecimal(d.toString).setScale(s, HALF_UP).toDouble`.
pub fn spark_round_f64(v: f64, scale: i64) -> f64 {
    if !v.is_finite() {
        return v;
    }
    match format!("{v}").parse::<BigDecimal>() {
        Ok(d) => d
            .with_scale_round(scale, RoundingMode::HalfUp)
            .to_string()
            .parse::<f64>()
            .unwrap_or(v),
        Err(_) => v,
    }
}

impl ScalarUDFImpl for SparkRound {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(
        &self,
        args: ReturnFieldArgs,
    ) -> DfResult<arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scale = match args.args.get(1) {
            None => Some(0i64),
            Some(ColumnarValue::Scalar(s)) => match s {
                ScalarValue::Int8(Some(v)) => Some(*v as i64),
                ScalarValue::Int16(Some(v)) => Some(*v as i64),
                ScalarValue::Int32(Some(v)) => Some(*v as i64),
                ScalarValue::Int64(Some(v)) => Some(*v),
                _ => None,
            },
            _ => None,
        };
        match (args.args.first(), scale) {
            (Some(ColumnarValue::Array(a)), Some(s)) if a.data_type() == &DataType::Float64 => {
                let a = a
                    .as_any()
                    .downcast_ref::<Float64Array>()
                    .ok_or_else(|| datafusion::error::DataFusionError::Internal("round".into()))?;
                let out: Float64Array =
                    a.iter().map(|v| v.map(|v| spark_round_f64(v, s))).collect();
                Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
            }
            (Some(ColumnarValue::Scalar(ScalarValue::Float64(v))), Some(s)) => Ok(
                ColumnarValue::Scalar(ScalarValue::Float64(v.map(|v| spark_round_f64(v, s)))),
            ),
            _ => self.inner.invoke_with_args(args),
        }
    }
}

pub use crate::time_text::spark_timestamp_text;

/// `CAST(<timestamp> AS STRING)` as Spark writes it (see [`spark_timestamp_text`]).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SparkTimestampString {
    signature: Signature,
}

impl Default for SparkTimestampString {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, datafusion::logical_expr::Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SparkTimestampString {
    fn name(&self) -> &str {
        "sluice_timestamp_string"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arg = args.args.first().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("timestamp string: no argument".into())
        })?;
        let a = arg.to_array(args.number_rows)?;
        let a = arrow::compute::cast(&a, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
        let ts = a
            .as_any()
            .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
            .ok_or_else(|| {
                datafusion::error::DataFusionError::Internal("timestamp string".into())
            })?;
        let out: arrow::array::StringArray = ts
            .iter()
            .map(|v| v.and_then(spark_timestamp_text))
            .collect();
        Ok(match arg {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(out) as ArrayRef),
        })
    }
}

/// Translates a Spark datetime pattern (`yyyy-MM-dd HH:mm:ss.SSS`, `'quoted'` text) into a
/// chrono format string; an error names a letter Sluice cannot translate yet.
pub fn spark_pattern_to_chrono(pattern: &str) -> Result<String, String> {
    use crate::time_text::{pattern_pieces, push_chrono_literal, PatternPiece};
    let mut out = String::new();
    for piece in pattern_pieces(pattern) {
        let (c, n) = match piece {
            PatternPiece::Literal { c, .. } => {
                push_chrono_literal(&mut out, c);
                continue;
            }
            PatternPiece::Letters(c, n) => (c, n),
        };
        let spec = match (c, n) {
            ('y', 2) => "%y",
            ('y', _) => "%Y",
            ('M', 1) => "%-m",
            ('M', 2) => "%m",
            ('M', 3) => "%b",
            ('M', _) => "%B",
            ('d', 1) => "%-d",
            ('d', _) => "%d",
            ('D', _) => "%j",
            ('H', 1) => "%-H",
            ('H', _) => "%H",
            ('h', 1) => "%-I",
            ('h', _) => "%I",
            ('m', 1) => "%-M",
            ('m', _) => "%M",
            ('s', 1) => "%-S",
            ('s', _) => "%S",
            ('S', 3) => "%3f",
            ('S', 6) => "%6f",
            ('S', 9) => "%9f",
            ('a', _) => "%p",
            ('E', 4..) => "%A",
            ('E', _) => "%a",
            _ => {
                return Err(format!(
                    "date_format: the pattern letter{} '{}' is not supported yet (supported: \
                     y, M, d, D, H, h, m, s, S/SSS/SSSSSS/SSSSSSSSS, a, E, and 'quoted' text)",
                    if n > 1 { "s" } else { "" },
                    c.to_string().repeat(n)
                ))
            }
        };
        out.push_str(spec);
    }
    Ok(out)
}

/// Spark's `date_format(ts, pattern)`: the pattern translated by [`spark_pattern_to_chrono`],
/// the formatting done by DataFusion's `to_char`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SparkDateFormat {
    inner: Arc<ScalarUDF>,
}

impl SparkDateFormat {
    /// Wraps DataFusion's `to_char`.
    pub fn new(inner: Arc<ScalarUDF>) -> Self {
        Self { inner }
    }
}

impl ScalarUDFImpl for SparkDateFormat {
    fn name(&self) -> &str {
        "date_format"
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(
        &self,
        args: ReturnFieldArgs,
    ) -> DfResult<arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let translated = match args.args.get(1) {
            Some(ColumnarValue::Scalar(
                ScalarValue::Utf8(Some(p))
                | ScalarValue::LargeUtf8(Some(p))
                | ScalarValue::Utf8View(Some(p)),
            )) => {
                spark_pattern_to_chrono(p).map_err(datafusion::error::DataFusionError::Execution)?
            }
            Some(ColumnarValue::Scalar(_)) | None => return self.inner.invoke_with_args(args),
            Some(ColumnarValue::Array(_)) => {
                return Err(datafusion::error::DataFusionError::Execution(
                    "date_format: the pattern must be a constant string, such as 'HH:mm'".into(),
                ))
            }
        };
        args.args[1] = ColumnarValue::Scalar(ScalarValue::Utf8(Some(translated)));
        self.inner.invoke_with_args(args)
    }
}

/// Rewrites `CAST(<timestamp> AS <integer>)` to Spark's epoch seconds, `CAST(<timestamp> AS
/// STRING)` to Spark's text, and every other cast Arrow does not do as Spark does to
/// `plan::ansi`'s (with ANSI's checked integer `+ - *` when `spark.sql.ansi.enabled`).
#[derive(Debug, Default)]
pub struct SparkCastRule;

impl AnalyzerRule for SparkCastRule {
    fn name(&self) -> &str {
        "sluice_spark_cast"
    }
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> DfResult<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let inputs = node.inputs();
            if inputs.len() != 1 {
                return Ok(Transformed::no(node));
            }
            let schema: Arc<DFSchema> = inputs[0].schema().clone();
            // Keep each top-level expression's name: parents refer to columns by name.
            let names = datafusion::logical_expr::expr_rewriter::NamePreserver::new(&node);
            node.map_expressions(|e| {
                let saved = names.save(&e);
                e.transform_up(|e| {
                    let t = rewrite_cast(e, &schema)?;
                    if t.transformed {
                        return Ok(t);
                    }
                    // Spark's casts and ANSI's checked arithmetic (ansi.rs).
                    super::ansi::rewrite_after_coercion(t.data, &schema, config)
                })
                .map(|t| t.update_data(|e| saved.restore(e)))
            })
        })
        .map(|t| t.data)
    }
}

fn rewrite_cast(e: Expr, schema: &DFSchema) -> DfResult<Transformed<Expr>> {
    if let Expr::Cast(Cast { expr, field }) = &e {
        let data_type = field.data_type();
        if matches!(
            data_type,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) {
            if let Ok(DataType::Timestamp(_, None)) = expr.get_type(schema) {
                let formatted = ScalarUDF::new_from_impl(SparkTimestampString::default())
                    .call(vec![expr.as_ref().clone()]);
                return Ok(Transformed::yes(if data_type == &DataType::Utf8 {
                    formatted
                } else {
                    Expr::Cast(Cast::new(Box::new(formatted), data_type.clone()))
                }));
            }
        }
        if data_type.is_integer() {
            if let Ok(DataType::Timestamp(unit, tz)) = expr.get_type(schema) {
                if unit != TimeUnit::Second {
                    let seconds = Expr::Cast(Cast::new(
                        expr.clone(),
                        DataType::Timestamp(TimeUnit::Second, tz),
                    ));
                    return Ok(Transformed::yes(Expr::Cast(Cast::new(
                        Box::new(seconds),
                        data_type.clone(),
                    ))));
                }
            }
        }
    }
    Ok(Transformed::no(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spark_datetime_patterns_translate_to_chrono() {
        assert_eq!(spark_pattern_to_chrono("HH:mm").as_deref(), Ok("%H:%M"));
        assert_eq!(
            spark_pattern_to_chrono("yyyy-MM-dd HH:mm:ss.SSS").as_deref(),
            Ok("%Y-%m-%d %H:%M:%S.%3f")
        );
        assert_eq!(
            spark_pattern_to_chrono("EEE, d MMM yy 'at' h a").as_deref(),
            Ok("%a, %-d %b %y at %-I %p")
        );
        assert_eq!(spark_pattern_to_chrono("'100%'").as_deref(), Ok("100%%"));
        let err = spark_pattern_to_chrono("yyyy QQ").unwrap_err();
        assert!(err.contains("'QQ' is not supported yet"), "{err}");
    }

    #[test]
    fn date_format_in_sql_uses_sparks_letters() {
        let s = sluice::Session::builder().build().unwrap();
        let rows = s
            .sql(
                "SELECT date_format(CAST('2026-02-14 09:05:07.250' AS TIMESTAMP), 'HH:mm') AS a, \
                 date_format(CAST('2026-02-14 09:05:07.250' AS TIMESTAMP), 'yyyy/MM/dd H:m:ss.SSS') AS b",
            )
            .unwrap()
            .collect()
            .unwrap();
        let col = |i: usize| {
            arrow::compute::cast(rows[0].column(i), &DataType::Utf8)
                .unwrap()
                .as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .unwrap()
                .value(0)
                .to_string()
        };
        assert_eq!(col(0), "09:05");
        assert_eq!(col(1), "2026/02/14 9:5:07.250");
    }

    #[test]
    fn timestamps_cast_to_string_as_spark_writes_them() {
        // 2026-02-14T10:00:00Z
        let t = 1_771_063_200_000_000i64;
        assert_eq!(
            spark_timestamp_text(t).as_deref(),
            Some("2026-02-14 10:00:00")
        );
        assert_eq!(
            spark_timestamp_text(t + 120_000).as_deref(),
            Some("2026-02-14 10:00:00.12")
        );
        assert_eq!(
            spark_timestamp_text(t + 1).as_deref(),
            Some("2026-02-14 10:00:00.000001")
        );
        assert_eq!(
            spark_timestamp_text(-1).as_deref(),
            Some("1969-12-31 23:59:59.999999")
        );
    }

    #[test]
    fn round_is_half_up_on_the_decimal_form() {
        assert_eq!(spark_round_f64(2.675, 2), 2.68);
        assert_eq!(spark_round_f64(-2.5, 0), -3.0);
        assert_eq!(spark_round_f64(1.005, 2), 1.01);
        assert_eq!(spark_round_f64(125.0, -1), 130.0);
        assert!(spark_round_f64(f64::NAN, 2).is_nan());
    }
}
