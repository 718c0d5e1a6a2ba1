//! The generator syntax DataFusion's SQL planner lacks, rewritten before it plans:
//!
//! - `gen(..) AS (a, b)` in a SELECT list becomes one item per output column,
//!   `__sluice_generator_column('gen', false, 0, ..) AS a, .. (.., 1, ..) AS b`;
//! - `FROM r LATERAL VIEW [OUTER] gen(..) t [AS a, b]` becomes
//!   `FROM r CROSS JOIN LATERAL (SELECT __sluice_generator_column('gen', outer, 0, ..) AS a, ..) AS t`,
//!   which DataFusion plans with `r`'s columns as outer references. Without column names, the
//!   generator's arguments are typed first (a probe query over the same FROM) to find Spark's
//!   default names.
//!
//! - a bare generator item (`SELECT inline(xs) FROM t`) becomes its columns' markers named as
//!   Spark names them (typed by a probe), so an outer query can read `col`, `pos`, `key` or a
//!   struct's fields by name.
//!
//! - a generator in FROM (`SELECT * FROM posexplode(xs) AS t`) becomes the derived table
//!   `(SELECT posexplode(xs)) AS t`, whose bare item is named as above;
//! - named arguments of a generator (`explode(collection => xs)`) become positional.
//!
//! `rewrite.rs` turns all of them into `Generate` nodes.

use std::ops::ControlFlow;

use arrow::datatypes::FieldRef;
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, Join, JoinConstraint,
    JoinOperator, ObjectNamePart, Select, SelectItem, SetExpr, Statement, TableFactor, VisitMut,
    VisitorMut, With,
};
use datafusion::sql::sqlparser::dialect::SparkSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::{output_fields, GENERATORS, GENERATOR_COLUMN};
use crate::error::{class, Result, SluiceError};

/// Types the arguments of a probe query `SELECT args FROM ..`: each output field, and its value
/// when it is a literal.
pub(crate) type Probe<'a> = dyn FnMut(&str) -> Result<ProbeTypes> + 'a;

/// What a probe query gives: each output field, and its value when it is a literal.
pub(crate) type ProbeTypes = (Vec<FieldRef>, Vec<Option<ScalarValue>>);

/// Rewrites multi-aliases and LATERAL VIEWs of `sql`; returns it unchanged when it has none
/// (the text form of [`rewrite_generator_statement`], which `plan_sql` runs on the parsed AST).
#[cfg(test)]
pub(crate) fn rewrite_generator_syntax(sql: &str, probe: &mut Probe<'_>) -> Result<String> {
    if !mentions_generator_syntax(sql) {
        return Ok(sql.to_string());
    }
    let dialect = SparkSqlDialect {};
    let mut statements = Parser::parse_sql(&dialect, sql)
        .map_err(|e| SluiceError::query(class::PARSE_SYNTAX_ERROR, format!("{e} in {sql:?}")))?;
    let mut changed = false;
    for st in &mut statements {
        changed |= rewrite_generator_statement(st, probe)?;
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

/// Rewrites the multi-aliases and LATERAL VIEWs of one parsed statement; true if it changed.
pub(crate) fn rewrite_generator_statement(
    st: &mut Statement,
    probe: &mut Probe<'_>,
) -> Result<bool> {
    let with = match st {
        Statement::Query(q) => q.with.clone(),
        _ => None,
    };
    let mut v = Rewriter {
        probe,
        with,
        changed: false,
        error: None,
    };
    let _ = st.visit(&mut v);
    match v.error {
        Some(e) => Err(e),
        None => Ok(v.changed),
    }
}

/// True when `sql` may hold a generator, `LATERAL` or `AS (..)` (a cheap test before parsing).
#[cfg(test)]
fn mentions_generator_syntax(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    if ["lateral", "explode", "inline", "stack"]
        .iter()
        .any(|w| lower.contains(w))
    {
        return true;
    }
    lower
        .match_indices("as")
        .any(|(i, _)| lower[i + 2..].trim_start().starts_with('('))
}

struct Rewriter<'a, 'b> {
    probe: &'a mut Probe<'b>,
    /// The statement's WITH clause, for probe queries.
    with: Option<With>,
    changed: bool,
    error: Option<SluiceError>,
}

impl VisitorMut for Rewriter<'_, '_> {
    type Break = ();
    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        match self.rewrite_select(select) {
            Ok(c) => {
                self.changed |= c;
                ControlFlow::Continue(())
            }
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

/// A generator call in SQL: its Spark name (lower case) and arguments (named arguments
/// included; [`positional_generator_args`] checks their names).
fn generator_call(e: &SqlExpr) -> Option<(&'static str, Vec<&SqlExpr>)> {
    let SqlExpr::Function(f) = e else {
        return None;
    };
    let [ObjectNamePart::Identifier(id)] = f.name.0.as_slice() else {
        return None;
    };
    let name = generator_name(&id.value)?;
    let args = match &f.args {
        FunctionArguments::List(list) => list.args.iter().filter_map(arg_expr).collect(),
        _ => Vec::new(),
    };
    Some((name, args))
}

/// Spark's name of the generator called `written`, if it is one.
fn generator_name(written: &str) -> Option<&'static str> {
    GENERATORS
        .iter()
        .map(|(n, _, _)| *n)
        .find(|n| written.eq_ignore_ascii_case(n))
}

fn arg_expr(a: &FunctionArg) -> Option<&SqlExpr> {
    match a {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(x))
        | FunctionArg::Named {
            arg: FunctionArgExpr::Expr(x),
            ..
        }
        | FunctionArg::ExprNamed {
            arg: FunctionArgExpr::Expr(x),
            ..
        } => Some(x),
        _ => None,
    }
}

/// Spark's named arguments of a generator (`explode(collection => xs)`) made positional,
/// so that DataFusion plans the call; a name Spark does not know for it is refused with
/// Spark's `UNRECOGNIZED_PARAMETER_NAME`.
fn positional_args(name: &str, args: &mut [FunctionArg]) -> Result<()> {
    let kind = super::kind_of(name);
    for a in args.iter_mut() {
        let (written, arg) = match a {
            FunctionArg::Named { name: n, arg, .. } => (n.value.clone(), arg.clone()),
            FunctionArg::ExprNamed { name: n, arg, .. } => (n.to_string(), arg.clone()),
            FunctionArg::Unnamed(_) => continue,
        };
        match super::parameter_name(kind) {
            Some(p) if p.eq_ignore_ascii_case(&written) => *a = FunctionArg::Unnamed(arg),
            known => {
                return Err(SluiceError::query(
                    class::UNRECOGNIZED_PARAMETER_NAME,
                    format!(
                        "Cannot invoke function `{name}` because the \
                         function call included a named argument reference for the argument \
                         named `{written}`, but this function does not include any signature \
                         containing an argument with this name. {}",
                        match known {
                            Some(p) => format!("Did you mean one of the following? [`{p}`]."),
                            None => "Pass the arguments by position.".to_string(),
                        }
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// [`positional_args`] on a generator call at the top of `e` (a SELECT item).
fn positional_generator_args(e: &mut SqlExpr) -> Result<bool> {
    let SqlExpr::Function(f) = e else {
        return Ok(false);
    };
    let [ObjectNamePart::Identifier(id)] = f.name.0.as_slice() else {
        return Ok(false);
    };
    let Some(name) = generator_name(&id.value) else {
        return Ok(false);
    };
    let FunctionArguments::List(list) = &mut f.args else {
        return Ok(false);
    };
    if list
        .args
        .iter()
        .all(|a| matches!(a, FunctionArg::Unnamed(_)))
    {
        return Ok(false);
    }
    positional_args(name, &mut list.args)?;
    Ok(true)
}

/// `FROM gen(args) [AS t]` (a generator as a table function, Spark's table-valued generators)
/// as `FROM (SELECT gen(args)) [AS t]`, whose bare generator item is then named as Spark names
/// its columns.
fn table_function_generators(select: &mut Select) -> Result<bool> {
    let mut changed = false;
    for twj in &mut select.from {
        let factors =
            std::iter::once(&mut twj.relation).chain(twj.joins.iter_mut().map(|j| &mut j.relation));
        for tf in factors {
            let TableFactor::Table {
                name,
                alias,
                args: Some(args),
                ..
            } = tf
            else {
                continue;
            };
            let [ObjectNamePart::Identifier(id)] = name.0.as_slice() else {
                continue;
            };
            let Some(gen) = generator_name(&id.value) else {
                continue;
            };
            let mut fargs = args.args.clone();
            positional_args(gen, &mut fargs)?;
            let list = fargs
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let alias = alias
                .as_ref()
                .map(|a| format!(" AS {a}"))
                .unwrap_or_default();
            let text = format!("SELECT * FROM (SELECT {gen}({list})){alias}");
            let dialect = SparkSqlDialect {};
            let derived = Parser::parse_sql(&dialect, &text)
                .ok()
                .and_then(|st| match st.into_iter().next() {
                    Some(Statement::Query(q)) => match *q.body {
                        SetExpr::Select(mut s) => s.from.pop().map(|t| t.relation),
                        _ => None,
                    },
                    _ => None,
                })
                .ok_or_else(|| {
                    SluiceError::internal(format!(
                        "table function rewrite produced bad SQL {text:?}"
                    ))
                })?;
            *tf = derived;
            changed = true;
        }
    }
    Ok(changed)
}

fn parse_expr(text: &str) -> Result<SqlExpr> {
    let dialect = SparkSqlDialect {};
    Parser::new(&dialect)
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| {
            SluiceError::internal(format!("generator rewrite produced bad SQL {text:?}: {e}"))
        })
}

/// `__sluice_generator_column('name', outer, j, args..)`.
fn column_marker(name: &str, outer: bool, j: usize, args: &[&SqlExpr]) -> Result<SqlExpr> {
    let mut text = format!("{GENERATOR_COLUMN}('{name}', {outer}, {j}");
    for a in args {
        text.push_str(&format!(", {a}"));
    }
    text.push(')');
    parse_expr(&text)
}

fn not_a_generator(e: &SqlExpr, place: &str) -> SluiceError {
    SluiceError::query(
        class::UNSUPPORTED_GENERATOR_NOT_GENERATOR,
        format!(
            "The generator is not supported: {e} in {place} is not a generator. Use explode, \
             explode_outer, posexplode, posexplode_outer, inline, inline_outer, stack or \
             json_tuple there."
        ),
    )
}

impl Rewriter<'_, '_> {
    fn rewrite_select(&mut self, select: &mut Select) -> Result<bool> {
        let mut changed = table_function_generators(select)?;
        for item in &mut select.projection {
            if let SelectItem::UnnamedExpr(e)
            | SelectItem::ExprWithAlias { expr: e, .. }
            | SelectItem::ExprWithAliases { expr: e, .. } = item
            {
                changed |= positional_generator_args(e)?;
            }
        }
        for lv in &mut select.lateral_views {
            changed |= positional_generator_args(&mut lv.lateral_view)?;
        }
        // LATERAL VIEWs first: the SELECT list may read their columns.
        changed |= self.rewrite_lateral_views(select)?;
        changed |= rewrite_multi_aliases(select)?;
        changed |= self.name_bare_generators(select);
        Ok(changed)
    }

    /// A bare multi-column generator (`SELECT inline(xs) FROM ..`) or a bare `explode` gets
    /// Spark's column names here, so that an outer query can read them (`SELECT sku FROM
    /// (SELECT inline(lines) FROM orders)`): its arguments are typed by a probe query. When the
    /// probe cannot be planned (a correlated subquery), the item stays as it is; the plan
    /// rewrite still names it, for queries that do not read it by name.
    fn name_bare_generators(&mut self, select: &mut Select) -> bool {
        let mut changed = false;
        let mut items = Vec::with_capacity(select.projection.len());
        for item in std::mem::take(&mut select.projection) {
            let SelectItem::UnnamedExpr(expr) = &item else {
                items.push(item);
                continue;
            };
            let Some((name, args)) = generator_call(expr) else {
                items.push(item);
                continue;
            };
            let markers = self.default_names(select, name, &args).and_then(|names| {
                names
                    .into_iter()
                    .enumerate()
                    .map(|(j, n)| {
                        let mut alias = Ident::new(n);
                        alias.quote_style = Some('`');
                        Ok(SelectItem::ExprWithAlias {
                            expr: column_marker(name, false, j, &args)?,
                            alias,
                        })
                    })
                    .collect::<Result<Vec<_>>>()
            });
            match markers {
                Ok(m) => {
                    items.extend(m);
                    changed = true;
                }
                Err(_) => items.push(item),
            }
        }
        select.projection = items;
        changed
    }

    fn rewrite_lateral_views(&mut self, select: &mut Select) -> Result<bool> {
        if select.lateral_views.is_empty() {
            return Ok(false);
        }
        if select.from.is_empty() {
            return Err(SluiceError::query(
                class::PARSE_SYNTAX_ERROR,
                "LATERAL VIEW needs a FROM clause: SELECT .. FROM t LATERAL VIEW explode(..) v AS c",
            ));
        }
        fold_from_items(select);
        for lv in std::mem::take(&mut select.lateral_views) {
            let (name, args) = generator_call(&lv.lateral_view)
                .ok_or_else(|| not_a_generator(&lv.lateral_view, "LATERAL VIEW"))?;
            let names: Vec<Ident> = if lv.lateral_col_alias.is_empty() {
                self.default_names(select, name, &args)
                    .map_err(|e| {
                        SluiceError::query(
                            e.class(),
                            format!(
                                "LATERAL VIEW {}: {}. If it reads columns of an outer query, \
                                 name its columns: LATERAL VIEW {} v AS c1, c2",
                                lv.lateral_view,
                                e.message(),
                                lv.lateral_view
                            ),
                        )
                    })?
                    .into_iter()
                    .map(Ident::new)
                    .map(|mut i| {
                        i.quote_style = Some('`');
                        i
                    })
                    .collect()
            } else {
                lv.lateral_col_alias.clone()
            };
            let items = names
                .iter()
                .enumerate()
                .map(|(j, n)| {
                    Ok(format!(
                        "{} AS {n}",
                        column_marker(name, lv.outer, j, &args)?
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            let join_sql = format!(
                "SELECT * FROM __sluice_left CROSS JOIN LATERAL (SELECT {}) AS {}",
                items.join(", "),
                lv.lateral_view_name
            );
            let dialect = SparkSqlDialect {};
            let parsed = Parser::parse_sql(&dialect, &join_sql).map_err(|e| {
                SluiceError::internal(format!(
                    "LATERAL VIEW rewrite produced bad SQL {join_sql:?}: {e}"
                ))
            })?;
            let join = match parsed.into_iter().next() {
                Some(Statement::Query(q)) => match *q.body {
                    SetExpr::Select(mut s) => s.from.pop().and_then(|mut t| t.joins.pop()),
                    _ => None,
                },
                _ => None,
            };
            let Some(join) = join else {
                return Err(SluiceError::internal(format!(
                    "LATERAL VIEW rewrite lost its join in {join_sql:?}"
                )));
            };
            debug_assert!(matches!(
                join.relation,
                TableFactor::Derived { lateral: true, .. }
            ));
            if let Some(last) = select.from.last_mut() {
                last.joins.push(join);
            }
        }
        Ok(true)
    }

    /// Spark's default names of `name(args)`'s columns over the select's FROM (LATERAL VIEW
    /// without `AS ..`): the arguments are typed by a probe query.
    fn default_names(
        &mut self,
        select: &Select,
        name: &str,
        args: &[&SqlExpr],
    ) -> Result<Vec<String>> {
        let kind = GENERATORS
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, k, _)| *k)
            .unwrap_or(super::GeneratorKind::Explode);
        let from = select
            .from
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let with = self
            .with
            .as_ref()
            .map(|w| format!("{w} "))
            .unwrap_or_default();
        let list = if args.is_empty() {
            "1".to_string()
        } else {
            args.iter()
                .enumerate()
                .map(|(i, a)| format!("{a} AS __sluice_arg{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let probe_sql = if from.is_empty() {
            format!("{with}SELECT {list}")
        } else {
            format!("{with}SELECT {list} FROM {from}")
        };
        let (fields, scalars) = (self.probe)(&probe_sql)?;
        let fields = if args.is_empty() { Vec::new() } else { fields };
        let scalars: Vec<Option<&ScalarValue>> = scalars.iter().map(|s| s.as_ref()).collect();
        Ok(output_fields(name, kind, &fields, &scalars)?
            .into_iter()
            .map(|f| f.name().clone())
            .collect())
    }
}

/// `gen(..) AS (a, b)`: one generator column marker per name.
fn rewrite_multi_aliases(select: &mut Select) -> Result<bool> {
    let mut changed = false;
    if select
        .projection
        .iter()
        .any(|i| matches!(i, SelectItem::ExprWithAliases { .. }))
    {
        let mut items = Vec::with_capacity(select.projection.len());
        for item in std::mem::take(&mut select.projection) {
            match item {
                SelectItem::ExprWithAliases { expr, aliases } => {
                    let (name, args) = generator_call(&expr)
                        .ok_or_else(|| not_a_generator(&expr, "SELECT .. AS (..)"))?;
                    for (j, alias) in aliases.into_iter().enumerate() {
                        items.push(SelectItem::ExprWithAlias {
                            expr: column_marker(name, false, j, &args)?,
                            alias,
                        });
                    }
                }
                other => items.push(other),
            }
        }
        select.projection = items;
        changed = true;
    }
    Ok(changed)
}

/// The probe of a session: plans (never runs) the probe query and reads its output fields.
pub(crate) fn session_probe(
    session: &crate::session::Session,
) -> impl FnMut(&str) -> Result<ProbeTypes> + '_ {
    move |probe_sql: &str| {
        // Planned as any SQL is (names resolved as Spark resolves them), never run.
        let plan = crate::plan::sql::plan_sql_with(session, probe_sql, false)?;
        let fields = plan.schema().fields().iter().cloned().collect();
        let scalars = match &plan {
            datafusion::logical_expr::LogicalPlan::Projection(p) => p
                .expr
                .iter()
                .map(|e| match e {
                    datafusion::prelude::Expr::Literal(v, _) => Some(v.clone()),
                    datafusion::prelude::Expr::Alias(a) => match a.expr.as_ref() {
                        datafusion::prelude::Expr::Literal(v, _) => Some(v.clone()),
                        _ => None,
                    },
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok((fields, scalars))
    }
}

/// `FROM a, b JOIN c` as `FROM a CROSS JOIN (b JOIN c)`: one join chain, so a LATERAL VIEW
/// appended to it sees every relation of the FROM clause (Spark's lateral views follow them all).
fn fold_from_items(select: &mut Select) {
    if select.from.len() < 2 {
        return;
    }
    let mut items = std::mem::take(&mut select.from).into_iter();
    let Some(mut first) = items.next() else {
        return;
    };
    for twj in items {
        let relation = if twj.joins.is_empty() {
            twj.relation
        } else {
            TableFactor::NestedJoin {
                table_with_joins: Box::new(twj),
                alias: None,
            }
        };
        first.joins.push(Join {
            relation,
            global: false,
            join_operator: JoinOperator::CrossJoin(JoinConstraint::None),
        });
    }
    select.from = vec![first];
}

/// A probe that fails: for rewrites without a session (tests of named views only).
#[cfg(test)]
pub(crate) fn no_probe(_: &str) -> Result<ProbeTypes> {
    Err(SluiceError::internal("no probe"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateral_views_become_lateral_subqueries() {
        let out = rewrite_generator_syntax(
            "SELECT id, w FROM t LATERAL VIEW OUTER explode(split(line, ' ')) x AS w WHERE id > 1",
            &mut no_probe,
        )
        .unwrap();
        assert!(
            out.contains(
                "CROSS JOIN LATERAL (SELECT __sluice_generator_column('explode', true, 0, split(line, ' ')) AS w) AS x"
            ),
            "{out}"
        );
        assert!(out.contains("WHERE id > 1"), "{out}");
    }

    #[test]
    fn multi_aliases_become_one_item_per_column() {
        let out =
            rewrite_generator_syntax("SELECT id, posexplode(arr) AS (p, c) FROM t", &mut no_probe)
                .unwrap();
        assert!(
            out.contains("__sluice_generator_column('posexplode', false, 0, arr) AS p, __sluice_generator_column('posexplode', false, 1, arr) AS c"),
            "{out}"
        );
    }

    #[test]
    fn only_generators_take_several_aliases() {
        let e = rewrite_generator_syntax("SELECT upper(x) AS (a, b) FROM t", &mut no_probe)
            .unwrap_err();
        assert!(e.is(class::UNSUPPORTED_GENERATOR_NOT_GENERATOR), "{e}");
    }

    #[test]
    fn multi_aliases_are_found_across_whitespace() {
        let out = rewrite_generator_syntax(
            "SELECT stack(2, 1, 2, 3, 4) AS\n  (a, b) FROM t",
            &mut no_probe,
        )
        .unwrap();
        assert!(
            out.contains("__sluice_generator_column('stack', false, 1, 2, 1, 2, 3, 4) AS b"),
            "{out}"
        );
    }

    #[test]
    fn sql_without_generator_syntax_is_untouched() {
        let q = "SELECT explode(arr) AS w FROM t";
        assert_eq!(rewrite_generator_syntax(q, &mut no_probe).unwrap(), q);
        let q = "SELECT a FROM t";
        assert_eq!(rewrite_generator_syntax(q, &mut no_probe).unwrap(), q);
    }
}
