//! Spark's implicit casts of a string operand in arithmetic and comparisons (`PromoteStrings`),
//! which DataFusion's planner refuses (`Cannot coerce arithmetic expression Utf8 + Int64`) or
//! does differently (it compares a string with a number as strings).
//!
//! - Arithmetic (`+ - * / %`) with a string and a number: non-ANSI, the string is cast to
//!   DOUBLE (`'5' + 1` is 6.0, `'x1' + 1` null); under `spark.sql.ansi.enabled` it is cast to
//!   BIGINT next to an integer (`'2.5' + 1` fails with `CAST_INVALID_INPUT`) and to DOUBLE
//!   otherwise.
//! - Comparisons (`= <> < <= > >= <=>`) with a string and a number or a boolean: the string is
//!   cast to the other side's type (`'5' > 5` is false, `' 7 ' > 5` true), a DECIMAL side makes
//!   both DOUBLE (Spark's `findCommonTypeForBinaryComparison`).
//!
//! The casts are Spark's ([`super::ansi`] rewrites them: null for a string that does not
//! convert, or the ANSI error). Checked on PySpark 3.5.7 (scenarios
//! `ansi_off_string_arithmetic_coercion`, `ansi_on_string_arithmetic_coercion`).

use arrow::datatypes::DataType;
use datafusion::common::DFSchema;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{cast, Expr, ExprSchemable};
use datafusion::sql::sqlparser::ast::BinaryOperator;

/// The planner hook; `ansi` is the session's `spark.sql.ansi.enabled`.
#[derive(Debug)]
pub struct PromoteStrings {
    ansi: bool,
}

impl PromoteStrings {
    /// The promotion of ANSI mode (`ansi`) or of Spark's default mode.
    pub fn new(ansi: bool) -> Self {
        Self { ansi }
    }

    /// The type a string operand becomes next to an operand of type `other`, or `None` when
    /// Spark casts nothing.
    fn target(&self, op: &BinaryOperator, other: &DataType) -> Option<DataType> {
        use BinaryOperator as B;
        let arithmetic = matches!(op, B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo);
        let comparison = matches!(
            op,
            B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq | B::Spaceship
        );
        if arithmetic && other.is_numeric() {
            return Some(if self.ansi && other.is_integer() {
                DataType::Int64
            } else {
                DataType::Float64
            });
        }
        if comparison {
            if matches!(
                other,
                DataType::Decimal128(_, _) | DataType::Decimal256(_, _)
            ) {
                return Some(DataType::Float64);
            }
            if other.is_numeric() || other == &DataType::Boolean {
                return Some(other.clone());
            }
        }
        None
    }
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

impl ExprPlanner for PromoteStrings {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> DfResult<PlannerResult<RawBinaryExpr>> {
        let (Ok(l), Ok(r)) = (expr.left.get_type(schema), expr.right.get_type(schema)) else {
            return Ok(PlannerResult::Original(expr));
        };
        let string_left = match (is_string(&l), is_string(&r)) {
            (true, false) => true,
            (false, true) => false,
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let other = if string_left { &r } else { &l };
        let Some(t) = self.target(&expr.op, other) else {
            return Ok(PlannerResult::Original(expr));
        };
        // A DECIMAL next to the string compares as a DOUBLE too.
        let other_as = |e: Expr| {
            if t == DataType::Float64 && matches!(other, DataType::Decimal128(_, _)) {
                cast(e, DataType::Float64)
            } else {
                e
            }
        };
        let (left, right) = if string_left {
            (cast(expr.left, t.clone()), other_as(expr.right))
        } else {
            (other_as(expr.left), cast(expr.right, t.clone()))
        };
        Ok(PlannerResult::Original(RawBinaryExpr {
            op: expr.op,
            left,
            right,
        }))
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, Float64Type};

    #[test]
    fn a_string_in_arithmetic_is_a_double_and_compares_as_the_other_side() {
        // PySpark 3.5.7 (non-ANSI): '5' + 1 = 6.0, 'x1' + 1 is null, ' 2.5 ' > 5 is false,
        // '10' > 9 is true (a number comparison, not a string one).
        let s = sluice::Session::builder().build().unwrap();
        let b = s
            .sql(
                "SELECT s + 1 AS p, s > 5 AS g, s > 9 AS g9 FROM \
                 (VALUES ('5'), ('x1'), (' 2.5 '), ('10')) AS t(s)",
            )
            .unwrap()
            .collect()
            .unwrap();
        let b = &b[0];
        assert_eq!(b.schema().field(0).data_type(), &DataType::Float64);
        let p = b.column(0).as_primitive::<Float64Type>();
        assert_eq!(p.value(0), 6.0);
        assert!(p.is_null(1));
        assert_eq!(p.value(2), 3.5);
        let g9 = b.column(2).as_boolean();
        assert!(g9.value(3));
        assert!(!b.column(1).as_boolean().value(2));
    }

    #[test]
    fn under_ansi_a_string_next_to_an_integer_is_a_bigint() {
        let s = sluice::Session::builder()
            .config("spark.sql.ansi.enabled", "true")
            .build()
            .unwrap();
        let b = s.sql("SELECT '7' + 1 AS p").unwrap().collect().unwrap();
        assert_eq!(b[0].schema().field(0).data_type(), &DataType::Int64);
        let e = s.sql("SELECT '2.5' + 1 AS p").and_then(|d| d.collect());
        let e = e.unwrap_err();
        assert!(e.is(crate::error::class::CAST_INVALID_INPUT), "{e}");
        assert!(e.message().contains("cannot be cast to \"BIGINT\""), "{e}");
    }
}
