//! Spark's types for SQL number literals.
//!
//! Spark types an integer literal as INT when it fits (`1`, `2147483647`), as BIGINT when it fits
//! a long, and as DECIMAL(p, 0) beyond; a literal with a fraction as DECIMAL (`1.5` is
//! DECIMAL(2,1)); one with an exponent as DOUBLE (`1e3`). Suffixes type it explicitly: `1Y`
//! TINYINT, `1S` SMALLINT, `1L` BIGINT, `1.5F` FLOAT, `1.5D` DOUBLE, `1.5BD` DECIMAL. DataFusion
//! types every integer literal BIGINT and every fraction DOUBLE, so without this `2147483647 + 1`
//! is 2147483648 (Spark: -2147483648, INT arithmetic wraps) and `typeof(1.5)` is double.
//!
//! Three steps, each where DataFusion leaves room for it:
//! - the parser ([`super::sql_syntax::SparkDialect`]'s prefix hook) reads the suffixes and the
//!   forms DataFusion would mistype, into casts ([`suffixed_number`]);
//! - the session parses fractions as decimals (`datafusion.sql_parser.parse_float_as_decimal`);
//! - [`spark_literal_types`] narrows, in a planned statement, every BIGINT literal that fits an
//!   INT to INT (before type coercion, which then types the expressions around it as Spark does),
//!   keeping every output column's name. Literals that are arguments of an aggregate function
//!   stay as they are (`count(1)`, `count(*)`: the result type does not depend on them), as do
//!   `LIMIT`/`OFFSET` counts.
//!
//! Checked on PySpark 3.5.7 (`typeof` of each form).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Union, Values};
use datafusion::sql::sqlparser::ast::{
    CastKind, DataType as SqlType, ExactNumberInfo, Expr as SqlExpr, Value,
};

use crate::error::Result;

/// The SQL for a number token `text` followed directly (no space) by the word `suffix`, when
/// that is one of Spark's typed number literals (`1L`, `2S`, `3Y`, `1.5D`, `1.5F`, `1.5BD`):
/// a cast of the number (an integer) or of its text (a fraction, so a DOUBLE is the nearest double
/// to what was written) to its type. `None` when `suffix` is not a number suffix.
pub(crate) fn suffixed_number(text: &str, suffix: &str) -> Option<SqlExpr> {
    let integral = text.chars().all(|c| c.is_ascii_digit());
    let int = |ty| {
        Some(SqlExpr::Cast {
            kind: CastKind::Cast,
            expr: Box::new(SqlExpr::value(Value::Number(text.to_string(), false))),
            data_type: ty,
            array: false,
            format: None,
        })
    };
    let ty = match suffix.to_ascii_uppercase().as_str() {
        "L" if integral => return int(SqlType::BigInt(None)),
        "S" if integral => return int(SqlType::SmallInt(None)),
        "Y" if integral => return int(SqlType::TinyInt(None)),
        "D" => SqlType::Double(ExactNumberInfo::None),
        "F" => SqlType::Float(ExactNumberInfo::None),
        "BD" => {
            let (p, s) = decimal_precision_scale(text)?;
            SqlType::Decimal(ExactNumberInfo::PrecisionAndScale(p, s))
        }
        _ => return None,
    };
    Some(cast_text(text, ty))
}

/// The SQL for a number token DataFusion would type differently from Spark: one with an
/// exponent (Spark: DOUBLE; DataFusion with decimal parsing: DECIMAL), or an integer beyond a
/// long (Spark: DECIMAL(p, 0); DataFusion: UBIGINT or DOUBLE). `None` for every other number.
pub(crate) fn unsuffixed_number(text: &str) -> Option<SqlExpr> {
    if text.contains(['e', 'E']) {
        return Some(cast_text(text, SqlType::Double(ExactNumberInfo::None)));
    }
    if text.chars().all(|c| c.is_ascii_digit()) && text.parse::<i64>().is_err() {
        let (p, s) = decimal_precision_scale(text)?;
        return Some(cast_text(
            text,
            SqlType::Decimal(ExactNumberInfo::PrecisionAndScale(p, s)),
        ));
    }
    None
}

/// Spark's precision and scale of a decimal literal's digits (`1.50` is (3, 2), `0.5` (1, 1)).
fn decimal_precision_scale(text: &str) -> Option<(u64, i64)> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    if !digits(int) || !digits(frac) {
        return None;
    }
    let int = int.trim_start_matches('0');
    let (p, s) = ((int.len() + frac.len()).max(1) as u64, frac.len() as u64);
    (p <= 38).then_some((p.max(s), s as i64))
}

/// `CAST('text' AS ty)`: from the text, so a DOUBLE is the nearest double to what was written.
fn cast_text(text: &str, ty: SqlType) -> SqlExpr {
    SqlExpr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(SqlExpr::value(Value::SingleQuotedString(text.to_string()))),
        data_type: ty,
        array: false,
        format: None,
    }
}

/// A planned statement with Spark's INT type for every integer literal that fits one (see the
/// module doc); output column names stay as planned.
pub(crate) fn spark_literal_types(plan: LogicalPlan) -> Result<LogicalPlan> {
    Ok(plan.transform_up_with_subqueries(narrow_node)?.data)
}

/// A DataFrame API expression with Spark's literal types; with `keep_name` (a select item) its
/// output name stays the one it was planned with.
pub(crate) fn spark_literal_types_in_expr(e: Expr, keep_name: bool) -> Result<Expr> {
    let saved = NamePreserver::new_for_projection().save(&e);
    let t = narrow(e)?;
    Ok(if keep_name && t.transformed {
        saved.restore(t.data)
    } else {
        t.data
    })
}

fn narrow_node(node: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    match node {
        // The counts must stay BIGINT literals (DataFusion reads them as such).
        LogicalPlan::Limit(_) => Ok(Transformed::no(node)),
        LogicalPlan::Values(Values { schema, values }) => {
            let mut changed = false;
            let values = values
                .into_iter()
                .map(|row| {
                    row.into_iter()
                        .map(|e| {
                            // The planner typed a NULL by the other rows (a BIGINT null):
                            // untyped again, it takes the column's type.
                            let e = match e {
                                Expr::Literal(ScalarValue::Int64(None), meta) => {
                                    changed = true;
                                    Expr::Literal(ScalarValue::Null, meta)
                                }
                                e => e,
                            };
                            let t = narrow(e)?;
                            changed |= t.transformed;
                            Ok(t.data)
                        })
                        .collect::<DfResult<Vec<_>>>()
                })
                .collect::<DfResult<Vec<_>>>()?;
            // Spark's wider type of a DOUBLE or FLOAT and a DECIMAL is DOUBLE; DataFusion's is
            // a DECIMAL.
            let (values, mixed) = doubles_over_decimals(values, &schema)?;
            if !changed && !mixed {
                return Ok(Transformed::no(LogicalPlan::Values(Values {
                    schema,
                    values,
                })));
            }
            // The column types follow from the values again; the names stay.
            let built = LogicalPlanBuilder::values(values)?.build()?;
            let LogicalPlan::Values(Values {
                schema: typed,
                values,
            }) = built
            else {
                unreachable!("LogicalPlanBuilder::values builds a Values plan")
            };
            let fields = schema
                .iter()
                .zip(typed.fields())
                .map(|((q, old), new)| {
                    (
                        q.cloned(),
                        Arc::new(
                            old.as_ref()
                                .clone()
                                .with_data_type(new.data_type().clone())
                                .with_nullable(old.is_nullable() || new.is_nullable()),
                        ),
                    )
                })
                .collect::<Vec<_>>();
            let schema =
                datafusion::common::DFSchema::new_with_metadata(fields, schema.metadata().clone())?;
            Ok(Transformed::yes(LogicalPlan::Values(Values {
                schema: Arc::new(schema),
                values,
            })))
        }
        LogicalPlan::Union(Union { inputs, schema }) => {
            // Union keeps its schema when its inputs keep their width: derive it again (loosely,
            // as the SQL planner does; type coercion then unifies the inputs).
            let retyped = Union::try_new_with_loose_types(inputs)?;
            let same = retyped
                .schema
                .fields()
                .iter()
                .zip(schema.fields())
                .all(|(a, b)| a == b);
            Ok(Transformed::new_transformed(
                LogicalPlan::Union(retyped),
                !same,
            ))
        }
        node => {
            let preserver = NamePreserver::new(&node);
            let t = node.map_expressions(|e| {
                let saved = preserver.save(&e);
                let t = narrow(e)?;
                Ok(if t.transformed {
                    Transformed::yes(saved.restore(t.data))
                } else {
                    t
                })
            })?;
            // The expressions' types changed or an input's schema did: recompute this node's.
            let plan = t.data.recompute_schema()?;
            Ok(Transformed::yes(plan))
        }
    }
}

/// `VALUES` rows with every value of a column that mixes floating point and DECIMAL values
/// cast to DOUBLE (Spark's `findWiderTypeForTwo`); true when there was such a column. The
/// planner already cast each value to the column's type: the value's own type is the one under
/// that cast.
fn doubles_over_decimals(
    mut values: Vec<Vec<Expr>>,
    schema: &datafusion::common::DFSchema,
) -> DfResult<(Vec<Vec<Expr>>, bool)> {
    use arrow::datatypes::DataType;
    use datafusion::logical_expr::ExprSchemable;
    let mut mixed = false;
    let columns = values.first().map_or(0, Vec::len);
    let empty = datafusion::common::DFSchema::empty();
    for j in 0..columns {
        let column = schema.field(j).data_type();
        let own = |e: &Expr| match e {
            Expr::Cast(c) if c.field.data_type() == column => c.expr.get_type(&empty),
            e => e.get_type(&empty),
        };
        let types = values
            .iter()
            .map(|row| own(&row[j]))
            .collect::<DfResult<Vec<_>>>()?;
        let float = types.iter().any(|t| t.is_floating());
        let decimal = types
            .iter()
            .any(|t| matches!(t, DataType::Decimal128(_, _) | DataType::Decimal256(_, _)));
        if float && decimal {
            mixed = true;
            for row in &mut values {
                let e = match std::mem::take(&mut row[j]) {
                    Expr::Cast(c) if c.field.data_type() == column => *c.expr,
                    e => e,
                };
                row[j] = datafusion::logical_expr::cast(e, DataType::Float64);
            }
        }
    }
    Ok((values, mixed))
}

/// Every BIGINT literal in `e` that fits an INT, as an INT, except inside aggregate functions.
fn narrow(e: Expr) -> DfResult<Transformed<Expr>> {
    e.transform_down(|e| match e {
        Expr::AggregateFunction(_) => Ok(Transformed::new(e, false, TreeNodeRecursion::Jump)),
        Expr::Literal(ScalarValue::Int64(Some(v)), meta) => match i32::try_from(v) {
            Ok(v) => Ok(Transformed::yes(Expr::Literal(
                ScalarValue::Int32(Some(v)),
                meta,
            ))),
            Err(_) => Ok(Transformed::no(Expr::Literal(
                ScalarValue::Int64(Some(v)),
                meta,
            ))),
        },
        e => Ok(Transformed::no(e)),
    })
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::{DataType, Int32Type};

    fn run(sql: &str) -> Vec<arrow::array::RecordBatch> {
        let s = crate::Session::builder().build().unwrap();
        s.sql(sql).unwrap().collect().unwrap()
    }

    #[test]
    fn number_literals_have_sparks_types() {
        // PySpark 3.5.7: typeof of each literal.
        let b = run(
            "SELECT 1 AS a, 1.5 AS b, 1e3 AS c, 1L AS d, 1S AS e, 1Y AS f, 1.5D AS g, \
             1.5F AS h, 1.5BD AS i, 9223372036854775808 AS j, -2147483648 AS k, \
             2147483648 AS l, X'1010' AS m, X '1010' AS n, 10l AS o, 0.50 AS p",
        );
        let types: Vec<DataType> = b[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        assert_eq!(
            types,
            vec![
                DataType::Int32,
                DataType::Decimal128(2, 1),
                DataType::Float64,
                DataType::Int64,
                DataType::Int16,
                DataType::Int8,
                DataType::Float64,
                DataType::Float32,
                DataType::Decimal128(2, 1),
                DataType::Decimal128(19, 0),
                DataType::Int32,
                DataType::Int64,
                DataType::Binary,
                DataType::Binary,
                DataType::Int64,
                DataType::Decimal128(2, 2),
            ]
        );
    }

    #[test]
    fn int_arithmetic_on_literals_wraps_as_in_spark() {
        // Spark 3.5.7 (non-ANSI): 2147483647 + 1 = -2147483648, an INT.
        let b = run("SELECT 2147483647 + 1 AS v, 1 + 1");
        assert_eq!(b[0].schema().field(0).data_type(), &DataType::Int32);
        assert_eq!(
            b[0].column(0).as_primitive::<Int32Type>().value(0),
            i32::MIN
        );
        // The output name of an unaliased expression stays the one DataFusion planned.
        assert_eq!(b[0].schema().field(1).name(), "Int64(1) + Int64(1)");
    }

    #[test]
    fn values_unions_and_subqueries_are_retyped() {
        let b = run("SELECT x FROM (VALUES (1), (2)) AS t(x) UNION ALL SELECT 3");
        assert_eq!(b[0].schema().field(0).data_type(), &DataType::Int32);
        // Spark: the wider type of a DOUBLE and a DECIMAL is DOUBLE.
        let b = run("SELECT x FROM (VALUES (CAST(1.5 AS DOUBLE)), (2.5)) AS t(x)");
        assert_eq!(b[0].schema().field(0).data_type(), &DataType::Float64);
        let b = run("SELECT x FROM (VALUES (1), (3000000000)) AS t(x)");
        assert_eq!(b[0].schema().field(0).data_type(), &DataType::Int64);
        let b = run("SELECT count(*), max(1) FROM (VALUES (1)) AS t(x) WHERE x IN (SELECT 1)");
        assert_eq!(b[0].num_rows(), 1);
        let b = run("SELECT x FROM (VALUES (1), (2), (3)) AS t(x) ORDER BY x DESC LIMIT 2");
        assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
    }

    #[test]
    fn a_suffix_after_a_space_is_an_alias() {
        // `SELECT 1 L` names the column L; `SELECT 1L` is a BIGINT.
        let b = run("SELECT 1 L, 2 d");
        assert_eq!(b[0].schema().field(0).name(), "L");
        assert_eq!(b[0].schema().field(0).data_type(), &DataType::Int32);
        assert_eq!(b[0].schema().field(1).name(), "d");
    }
}
