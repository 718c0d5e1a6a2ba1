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

use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr as SqlExpr, GroupByExpr, ObjectNamePart, Query, SetExpr, Statement,
    TableFactor,
};
use datafusion::sql::sqlparser::dialect::SparkSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::sql_syntax::SparkDialect;

use crate::error::{Result, SluiceError};
use crate::session::Session;

const WINDOW_FUNCTIONS: [&str; 2] = ["window", "session_window"];

/// Plans Spark SQL text: Spark's interval literals ([`super::intervals`]), `window.start`
/// references, `max_by`/`min_by`, then Spark's name resolution ([`super::sql_names`]); then
/// DataFusion plans the statement (DDL such as `CREATE VIEW` runs, as in `SessionContext::sql`).
pub(crate) fn plan_sql(session: &Session, sql: &str) -> Result<LogicalPlan> {
    plan_sql_with(session, sql, true)
}

/// [`plan_sql`]; without `generators` the multi-aliases and LATERAL VIEWs stay as written (the
/// generators' own probe queries, which must not probe again).
pub(crate) fn plan_sql_with(session: &Session, sql: &str, generators: bool) -> Result<LogicalPlan> {
    let escaped = super::sql_syntax::escaped_string_literals(session)?;
    let mut statements = parse_statements(sql, escaped)?;
    if statements.len() != 1 {
        return Err(SluiceError::query(
            class::PARSE_SYNTAX_ERROR,
            format!(
                "sql() runs one statement, got {}: run each statement with its own sql() call",
                statements.len()
            ),
        ));
    }
    let mut st = statements.remove(0);
    rewrite_statement(&mut st)?;
    // Generators: multi-aliases and LATERAL VIEWs (their arguments typed by probe queries).
    if generators {
        super::generate::sql::rewrite_generator_statement(
            &mut st,
            &mut super::generate::sql::session_probe(session),
        )?;
    }
    let rules = super::names::NameRules::of(session)?;
    super::sql_names::resolve_statement(&mut st, rules, session)?;
    let state = session.df_state();
    let plan = session.block_on(state.statement_to_plan(DFStatement::Statement(Box::new(st))))?;
    let plan = super::literals::spark_literal_types(plan)?;
    let df = session.block_on(session.context().execute_logical_plan(plan))?;
    Ok(df.logical_plan().clone())
}

/// Parses SQL with Spark's dialect and string literals ([`super::sql_syntax`]), multi-unit
/// intervals merged first.
fn parse_statements(sql: &str, escaped_literals: bool) -> Result<Vec<Statement>> {
    let text = super::intervals::merge_multi_unit_intervals(sql);
    let mut statements = Parser::new(&SparkDialect)
        .with_options(super::sql_syntax::parser_options())
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| SluiceError::query(class::PARSE_SYNTAX_ERROR, format!("{e} in {sql:?}")))?;
    for st in &mut statements {
        super::sql_syntax::rewrite_syntax(st, escaped_literals)?;
    }
    Ok(statements)
}

/// The rewrites that need no catalog: intervals, window references.
fn rewrite_statement(st: &mut Statement) -> Result<bool> {
    let mut changed = super::intervals::rewrite_intervals(st)?;
    if let Statement::Query(q) = st {
        changed |= rewrite_query(q)?;
    }
    changed |= super::functions::lambda::rewrite_lambdas(st)?;
    Ok(changed)
}

/// A SQL expression of the DataFrame API (`select_sql`, `filter_sql`) over `schema`, resolved
/// as Spark resolves it and returned as SQL text for DataFusion's expression parser. With
/// `alias_allowed`, the text may end in `AS name`.
pub(crate) fn resolve_sql_expr(
    session: &Session,
    schema: &datafusion::common::DFSchema,
    text: &str,
    alias_allowed: bool,
) -> Result<String> {
    use datafusion::sql::sqlparser::ast::SelectItem;
    let escaped = super::sql_syntax::escaped_string_literals(session)?;
    let merged = super::intervals::merge_multi_unit_intervals(text);
    let bad = |e: datafusion::sql::sqlparser::parser::ParserError| {
        SluiceError::query(class::PARSE_SYNTAX_ERROR, format!("{e} in {text:?}"))
    };
    let mut parser = Parser::new(&SparkDialect)
        .with_options(super::sql_syntax::parser_options())
        .try_with_sql(&merged)
        .map_err(bad)?;
    let (mut expr, mut alias) = if alias_allowed {
        match parser.parse_select_item().map_err(bad)? {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias)),
            other => {
                return Err(SluiceError::query(
                    class::PARSE_SYNTAX_ERROR,
                    format!("expected an expression, got {other} in {text:?}"),
                ))
            }
        }
    } else {
        (parser.parse_expr().map_err(bad)?, None)
    };
    parser
        .expect_token(&datafusion::sql::sqlparser::tokenizer::Token::EOF)
        .map_err(bad)?;
    super::sql_syntax::rewrite_syntax(&mut expr, escaped)?;
    super::intervals::rewrite_intervals_in_expr(&mut expr)?;
    super::functions::lambda::rewrite_lambdas(&mut expr)?;
    let columns: Vec<(Option<String>, String, arrow::datatypes::DataType)> = schema
        .iter()
        .map(|(q, f)| {
            (
                q.map(|q| q.table().to_string()),
                f.name().clone(),
                f.data_type().clone(),
            )
        })
        .collect();
    let rules = super::names::NameRules::of(session)?;
    let implied = super::sql_names::resolve_standalone_expr(&mut expr, &columns, rules, session)?;
    if let Some(a) = &mut alias {
        *a = datafusion::sql::sqlparser::ast::Ident::with_quote('`', a.value.clone());
    }
    Ok(match alias.or(if alias_allowed { implied } else { None }) {
        Some(a) => format!("{expr} AS {a}"),
        None => expr.to_string(),
    })
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

    fn rewrite_window_references(sql: &str) -> Result<String> {
        let mut st = parse_statements(sql, false)?.remove(0);
        Ok(if rewrite_statement(&mut st)? {
            st.to_string()
        } else {
            sql.to_string()
        })
    }

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
