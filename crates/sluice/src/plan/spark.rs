//! Spark SQL semantics on top of DataFusion.
//!
//! Functions come from DataFusion and the `datafusion-spark` crate (registered by
//! `SessionStateBuilderSpark::with_spark_features`). This module holds only what neither gets
//! right for Spark's non-ANSI mode, each item pinned by a conformance scenario:
//!
//! - `round(double, s)`: Spark rounds the double's shortest decimal form HALF_UP
//!   (`round(2.675, 2)` = 2.68; a binary-float round gives 2.67).
//! - `CAST(timestamp AS BIGINT/INT)`: Spark gives epoch *seconds*; Arrow gives the raw unit.

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

/// Rewrites `CAST(<timestamp> AS <integer>)` to Spark's epoch seconds.
#[derive(Debug, Default)]
pub struct SparkCastRule;

impl AnalyzerRule for SparkCastRule {
    fn name(&self) -> &str {
        "sluice_spark_cast"
    }
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let inputs = node.inputs();
            if inputs.len() != 1 {
                return Ok(Transformed::no(node));
            }
            let schema: Arc<DFSchema> = inputs[0].schema().clone();
            node.map_expressions(|e| e.transform_up(|e| rewrite_cast(e, &schema)))
        })
        .map(|t| t.data)
    }
}

fn rewrite_cast(e: Expr, schema: &DFSchema) -> DfResult<Transformed<Expr>> {
    if let Expr::Cast(Cast { expr, field }) = &e {
        let data_type = field.data_type();
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
    fn round_is_half_up_on_the_decimal_form() {
        assert_eq!(spark_round_f64(2.675, 2), 2.68);
        assert_eq!(spark_round_f64(-2.5, 0), -3.0);
        assert_eq!(spark_round_f64(1.005, 2), 1.01);
        assert_eq!(spark_round_f64(125.0, -1), 130.0);
        assert!(spark_round_f64(f64::NAN, 2).is_nan());
    }
}
