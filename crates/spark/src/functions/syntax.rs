//! Spark's meaning for the SQL forms DataFusion's planner sends to fixed built-ins, and Spark's
//! SQL type names DataFusion does not know.
//!
//! - `EXTRACT(field FROM x)`, `SUBSTRING(s FROM p FOR l)` / `SUBSTRING(s, p, l)` and
//!   `OVERLAY(s PLACING r FROM p FOR l)` are planned by DataFusion's (and `datafusion-spark`'s)
//!   expression planners straight into their own `date_part`, `substring` and `overlay`, not
//!   through the session's registry, so Sluice's Spark versions of those functions (seconds as
//!   DECIMAL(8,6), a NULL argument, BINARY inputs) were skipped. [`SyntaxPlanner`] runs first
//!   and plans them to the functions registered under those names.
//! - `TIMESTAMP_NTZ` (in `CAST(x AS TIMESTAMP_NTZ)` and the typed literal
//!   `TIMESTAMP_NTZ'2021-12-06 00:00:00'`) is Sluice's one timestamp type,
//!   `Timestamp(Microsecond, None)`, as `TIMESTAMP` is ([`SparkTypePlanner`]; see the type
//!   table in `schema/mod.rs`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use datafusion::error::Result as DfResult;
use datafusion::execution::SessionState;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, TypePlanner};
use datafusion::logical_expr::{Expr, ScalarUDF};
use datafusion::sql::sqlparser::ast::DataType as SqlType;

/// The functions the syntax forms plan to, by name.
const TARGETS: [&str; 3] = ["date_part", "substring", "overlay"];

/// Plans `EXTRACT`, `SUBSTRING` and `OVERLAY` to the session's registered functions. It is
/// inserted before DataFusion's planners when the session state is built, and bound to the
/// registered functions once they are ([`SyntaxPlanner::bind`]); unbound, it leaves the forms
/// to the next planner.
#[derive(Debug, Default, Clone)]
pub struct SyntaxPlanner {
    registered: Arc<OnceLock<HashMap<&'static str, Arc<ScalarUDF>>>>,
}

impl SyntaxPlanner {
    /// Takes the functions the forms plan to from `state`'s registry.
    pub fn bind(&self, state: &SessionState) {
        let found = TARGETS
            .into_iter()
            .filter_map(|n| state.scalar_functions().get(n).cloned().map(|f| (n, f)))
            .collect();
        let _ = self.registered.set(found);
    }

    fn call(&self, name: &str, args: Vec<Expr>) -> PlannerResult<Vec<Expr>> {
        match self.registered.get().and_then(|m| m.get(name)) {
            Some(f) => PlannerResult::Planned(Expr::ScalarFunction(ScalarFunction::new_udf(
                Arc::clone(f),
                args,
            ))),
            None => PlannerResult::Original(args),
        }
    }
}

impl ExprPlanner for SyntaxPlanner {
    fn plan_extract(&self, args: Vec<Expr>) -> DfResult<PlannerResult<Vec<Expr>>> {
        Ok(self.call("date_part", args))
    }
    fn plan_substring(&self, args: Vec<Expr>) -> DfResult<PlannerResult<Vec<Expr>>> {
        Ok(self.call("substring", args))
    }
    fn plan_overlay(&self, args: Vec<Expr>) -> DfResult<PlannerResult<Vec<Expr>>> {
        Ok(self.call("overlay", args))
    }
}

/// Spark's SQL types DataFusion's planner refuses: `TIMESTAMP_NTZ`.
#[derive(Debug, Default)]
pub struct SparkTypePlanner;

impl TypePlanner for SparkTypePlanner {
    fn plan_type_field(&self, sql_type: &SqlType) -> DfResult<Option<FieldRef>> {
        Ok(match sql_type {
            SqlType::TimestampNtz(_) => Some(Arc::new(Field::new(
                "",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ))),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    //! Spark's values (PySpark 3.5.7) for the syntax forms and `TIMESTAMP_NTZ`
    //! (`input_file_name()` and friends: the engine's `plan/input_file_tests.rs`).

    use datafusion::common::ScalarValue;

    use crate::functions::testing::{error, row, session, text};

    #[test]
    fn extract_substring_and_overlay_syntax_use_sparks_functions() {
        let s = session();
        let r = row(
            &s,
            "SELECT extract(SECONDS FROM timestamp'2019-10-01 00:00:01.000001'),
                    extract(seconds FROM interval 5 hours 30 seconds 1 milliseconds 1 microseconds),
                    extract(YEAR FROM TIMESTAMP '2019-08-12 01:00:00.123456')",
        );
        assert_eq!(r[0].1, ScalarValue::Decimal128(Some(1_000_001), 8, 6));
        assert_eq!(r[1].1, ScalarValue::Decimal128(Some(30_001_001), 8, 6));
        assert_eq!(r[2].1.to_string(), "2019");
        assert_eq!(
            text(
                &s,
                "SELECT substring('Spark SQL', 0, 2), substring(NULL, 1, 2),
                        substring('Spark SQL' FROM 5 FOR 1), substring('abc', NULL)"
            ),
            ["Sp", "NULL", "k", "NULL"]
        );
        let r = row(
            &s,
            "SELECT overlay(encode('Spark SQL', 'utf-8') PLACING encode('_', 'utf-8') FROM 6),
                    overlay('Spark SQL' PLACING 'tructured' FROM 2 FOR 4)",
        );
        assert_eq!(r[0].1, ScalarValue::Binary(Some(b"Spark_SQL".to_vec())));
        assert_eq!(r[1].1.to_string(), "Structured SQL");
    }

    #[test]
    fn timestamp_ntz_is_a_sql_type() {
        let s = session();
        assert_eq!(
            text(
                &s,
                "SELECT CAST('2021-01-01 10:00:00' AS TIMESTAMP_NTZ),
                        convert_timezone('Europe/Brussels', 'America/Los_Angeles',
                                         timestamp_ntz'2021-12-06 00:00:00'),
                        convert_timezone('UTC', 'Asia/Tokyo', NULL)"
            ),
            ["2021-01-01T10:00:00", "2021-12-05T15:00:00", "NULL"]
        );
        let e = error(
            &s,
            "SELECT convert_timezone('Nowhere/Else', timestamp_ntz'2021-12-05 15:00:00')",
        );
        assert!(
            e.contains("convert_timezone") || e.contains("Nowhere"),
            "{e}"
        );
    }
}
