//! Spark SQL name resolution that DataFusion's SQL planner lacks.
//!
//! In Spark, `SELECT window.start, count(*) FROM events GROUP BY window(ts, '5 minutes')`
//! resolves `window` to the grouping expression `window(ts, '5 minutes')` (its output column is
//! named `window`). DataFusion resolves `window.start` against the FROM clause and fails. Before
//! planning, this pass rewrites, inside each SELECT that groups by `window(..)` or
//! `session_window(..)`, the references `window` / `window.<field>` in the select list, HAVING
//! and ORDER BY into the grouping expression itself (`get_field(window(..), '<field>')`), which
//! DataFusion then matches against the GROUP BY.

use crate::error::class;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr as SqlExpr, GroupByExpr, ObjectNamePart, Query, SetExpr, Statement,
    TableFactor,
};
use datafusion::sql::sqlparser::dialect::SparkSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::error::{Result, SluiceError};

const WINDOW_FUNCTIONS: [&str; 2] = ["window", "session_window"];

/// Rewrites window references; returns the SQL unchanged when there are none.
pub(crate) fn rewrite_window_references(sql: &str) -> Result<String> {
    let dialect = SparkSqlDialect {};
    let mut statements = Parser::parse_sql(&dialect, sql)
        .map_err(|e| SluiceError::query(class::PARSE_SYNTAX_ERROR, format!("{e} in {sql:?}")))?;
    let mut changed = false;
    for st in &mut statements {
        if let Statement::Query(q) = st {
            changed |= rewrite_query(q)?;
        }
        changed |= rewrite_max_min_by(st)?;
    }
    if !changed {
        return Ok(sql.to_string());
    }
    Ok(statements
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(";\n"))
}

/// Spark's `max_by(x, y)` / `min_by(x, y)` (the `x` of the row with the largest / smallest
/// `y`, rows with a null `y` ignored) as DataFusion's
/// `first_value(x ORDER BY y DESC|ASC) FILTER (WHERE y IS NOT NULL)`.
fn rewrite_max_min_by(st: &mut Statement) -> Result<bool> {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    let mut changed = false;
    let mut error = None;
    let _ = visit_expressions_mut(st, |e: &mut SqlExpr| {
        let SqlExpr::Function(f) = &*e else {
            return ControlFlow::Continue(());
        };
        let Some(ObjectNamePart::Identifier(id)) = f.name.0.last() else {
            return ControlFlow::Continue(());
        };
        let order = match id.value.to_ascii_lowercase().as_str() {
            "max_by" => "DESC",
            "min_by" => "ASC",
            _ => return ControlFlow::Continue(()),
        };
        let args: Vec<&SqlExpr> = match &f.args {
            FunctionArguments::List(list) => list
                .args
                .iter()
                .filter_map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => Some(x),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        if args.len() != 2 || f.filter.is_some() || f.over.is_some() {
            error = Some(SluiceError::query(
                class::WRONG_NUM_ARGS,
                format!(
                    "{}(x, y) takes two arguments, without FILTER or OVER: {e}",
                    id.value
                ),
            ));
            return ControlFlow::Break(());
        }
        let (x, y) = (args[0], args[1]);
        match parse_expr(&format!(
            "first_value({x} ORDER BY {y} {order}) FILTER (WHERE ({y}) IS NOT NULL)"
        )) {
            Ok(r) => {
                *e = r;
                changed = true;
            }
            Err(err) => {
                error = Some(err);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    match error {
        Some(e) => Err(e),
        None => Ok(changed),
    }
}

fn function_name(e: &SqlExpr) -> Option<String> {
    if let SqlExpr::Function(f) = e {
        if let Some(ObjectNamePart::Identifier(id)) = f.name.0.last() {
            let n = id.value.to_ascii_lowercase();
            if WINDOW_FUNCTIONS.contains(&n.as_str()) {
                return Some(n);
            }
        }
    }
    None
}

fn parse_expr(text: &str) -> Result<SqlExpr> {
    let dialect = SparkSqlDialect {};
    Parser::new(&dialect)
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| {
            SluiceError::internal(format!("window rewrite produced bad SQL {text:?}: {e}"))
        })
}

fn rewrite_query(q: &mut Query) -> Result<bool> {
    let mut windows: Vec<(String, SqlExpr)> = Vec::new();
    let changed = rewrite_set_expr(&mut q.body, &mut windows)?;
    if !windows.is_empty() {
        if let Some(order_by) = &mut q.order_by {
            rewrite_exprs(order_by, &windows)?;
        }
    }
    Ok(changed)
}

fn rewrite_set_expr(body: &mut SetExpr, windows_out: &mut Vec<(String, SqlExpr)>) -> Result<bool> {
    match body {
        SetExpr::Select(select) => {
            let mut changed = false;
            for twj in &mut select.from {
                if let TableFactor::Derived { subquery, .. } = &mut twj.relation {
                    changed |= rewrite_query(subquery)?;
                }
            }
            let GroupByExpr::Expressions(exprs, _) = &select.group_by else {
                return Ok(changed);
            };
            let windows: Vec<(String, SqlExpr)> = exprs
                .iter()
                .filter_map(|e| function_name(e).map(|n| (n, e.clone())))
                .collect();
            if windows.is_empty() {
                return Ok(changed);
            }
            for item in &mut select.projection {
                rewrite_exprs(item, &windows)?;
            }
            if let Some(h) = &mut select.having {
                rewrite_exprs(h, &windows)?;
            }
            *windows_out = windows;
            Ok(true)
        }
        SetExpr::Query(q) => rewrite_query(q),
        SetExpr::SetOperation { left, right, .. } => {
            let mut ignored = Vec::new();
            Ok(rewrite_set_expr(left, &mut ignored)? | rewrite_set_expr(right, &mut ignored)?)
        }
        _ => Ok(false),
    }
}

fn rewrite_exprs<V>(node: &mut V, windows: &[(String, SqlExpr)]) -> Result<()>
where
    V: datafusion::sql::sqlparser::ast::VisitMut,
{
    let mut error = None;
    let _ = visit_expressions_mut(node, |e: &mut SqlExpr| {
        let replacement = match &*e {
            SqlExpr::Identifier(id) => windows
                .iter()
                .find(|(n, _)| id.value.eq_ignore_ascii_case(n))
                .map(|(_, w)| Ok(w.clone())),
            SqlExpr::CompoundIdentifier(parts) if parts.len() == 2 => windows
                .iter()
                .find(|(n, _)| parts[0].value.eq_ignore_ascii_case(n))
                .map(|(_, w)| parse_expr(&format!("get_field({w}, '{}')", parts[1].value))),
            _ => None,
        };
        match replacement {
            Some(Ok(r)) => *e = r,
            Some(Err(err)) => {
                error = Some(err);
                return ControlFlow::Break(());
            }
            None => {}
        }
        ControlFlow::Continue(())
    });
    match error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_fields_resolve_to_the_grouping_expression() {
        let out = rewrite_window_references(
            "SELECT window.start AS start, window.end AS end, count(*) AS count FROM events GROUP BY window(ts, '5 minutes')",
        )
        .unwrap();
        assert!(
            out.contains("get_field(window(ts, '5 minutes'), 'start') AS start"),
            "{out}"
        );
        assert!(
            out.contains("get_field(window(ts, '5 minutes'), 'end') AS end"),
            "{out}"
        );
    }

    #[test]
    fn queries_without_windows_are_untouched() {
        let q = "SELECT user, count(*) FROM events GROUP BY user";
        assert_eq!(rewrite_window_references(q).unwrap(), q);
    }
}
