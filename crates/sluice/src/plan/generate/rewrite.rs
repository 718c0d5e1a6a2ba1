//! Generators in a logical plan become `Generate` nodes (Spark's `ExtractGenerator`), in two
//! passes: lateral joins first (the LATERAL VIEW rewrite of `sql.rs`), then projections. What
//! is left is refused with Spark's classes.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Column;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Aggregate, Filter, Join, JoinType, LogicalPlan, Projection};
use datafusion::prelude::Expr;

use super::node::{as_generator, generated_fields, Generate};
use super::{as_generator_column, generator_call, MultiAlias, SparkGenerator};
use crate::error::{class, Result, SluiceError};

fn df(e: SluiceError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// True when `e` is, or holds, a generator or one of the rewrite's markers.
fn holds_generator(e: &Expr) -> bool {
    e.exists(|x| {
        Ok(match x {
            Expr::ScalarFunction(f) => {
                let udf = f.func.inner();
                udf.downcast_ref::<SparkGenerator>().is_some()
                    || udf.downcast_ref::<super::GeneratorColumn>().is_some()
                    || udf.downcast_ref::<MultiAlias>().is_some()
            }
            _ => false,
        })
    })
    .unwrap_or(false)
}

fn plan_holds_generator(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|p| {
        if p.expressions().iter().any(holds_generator) {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Plans the generators of `plan` as `Generate` nodes; refuses generators where Spark does.
pub(crate) fn plan_generators(plan: LogicalPlan) -> Result<LogicalPlan> {
    if !plan_holds_generator(&plan) {
        return Ok(plan);
    }
    let laterals = plan
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::Join(j) => rewrite_lateral(j).map_err(df),
            other => Ok(Transformed::no(other)),
        })
        .map_err(SluiceError::from)?;
    let (plan, lateral) = (laterals.data, laterals.transformed);
    let plan = plan
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::Projection(p) => rewrite_projection(p).map_err(df),
            other => Ok(Transformed::no(other)),
        })
        .map_err(SluiceError::from)?
        .data;
    check_no_generator_left(&plan)?;
    if lateral {
        return prune_kept_columns(plan, None);
    }
    Ok(plan)
}

/// Drops from each LATERAL VIEW's `Generate` the input columns nothing above reads (Spark's
/// `unrequiredChildIndex`), so `value` is not repeated per word in
/// `SELECT word, count(*) FROM lines LATERAL VIEW explode(split(value, ' ')) t AS word GROUP BY word`.
/// `required` is what the parent reads of `plan`'s columns (`None`: unknown, keep everything).
fn prune_kept_columns(plan: LogicalPlan, required: Option<Vec<Column>>) -> Result<LogicalPlan> {
    let refs_of = |exprs: &[Expr]| -> Vec<Column> {
        exprs
            .iter()
            .flat_map(|e| e.column_refs().into_iter().cloned())
            .collect()
    };
    match plan {
        LogicalPlan::Projection(p) => {
            let needed = refs_of(&p.expr);
            let input = prune_kept_columns(p.input.as_ref().clone(), Some(needed))?;
            Ok(LogicalPlan::Projection(Projection::try_new(
                p.expr,
                Arc::new(input),
            )?))
        }
        LogicalPlan::Aggregate(a) => {
            let mut needed = refs_of(&a.group_expr);
            needed.extend(refs_of(&a.aggr_expr));
            let input = prune_kept_columns(a.input.as_ref().clone(), Some(needed))?;
            Ok(LogicalPlan::Aggregate(Aggregate::try_new(
                Arc::new(input),
                a.group_expr,
                a.aggr_expr,
            )?))
        }
        LogicalPlan::Filter(f) => {
            let needed = required.map(|mut r| {
                r.extend(f.predicate.column_refs().into_iter().cloned());
                r
            });
            let input = prune_kept_columns(f.input.as_ref().clone(), needed)?;
            Ok(LogicalPlan::Filter(Filter::try_new(
                f.predicate,
                Arc::new(input),
            )?))
        }
        other => match (Generate::of(&other), required) {
            (Some(g), Some(required)) if g.qualifier.is_some() => {
                let kept: Vec<Column> = g
                    .kept
                    .iter()
                    .filter(|c| is_referenced(c, &required))
                    .cloned()
                    .collect();
                let mut needed = kept.clone();
                needed.extend(refs_of(g.args()));
                let input = prune_kept_columns(g.input.clone(), Some(needed))?;
                Ok(Generate::try_new(
                    input,
                    g.generator.clone(),
                    g.outer,
                    Some(kept),
                    g.qualifier.clone(),
                    Some(g.names.clone()),
                )?
                .into_plan())
            }
            (Some(g), _) => {
                // The columns this Generate passes on are all its parent may read.
                let mut needed = g.kept.clone();
                needed.extend(refs_of(g.args()));
                let input = prune_kept_columns(g.input.clone(), Some(needed))?;
                Ok(Generate::try_new(
                    input,
                    g.generator.clone(),
                    g.outer,
                    Some(g.kept.clone()),
                    g.qualifier.clone(),
                    Some(g.names.clone()),
                )?
                .into_plan())
            }
            _ => Ok(other
                .map_children(|c| {
                    prune_kept_columns(c, None)
                        .map(Transformed::yes)
                        .map_err(df)
                })
                .map_err(SluiceError::from)?
                .data),
        },
    }
}

/// A generator item of a SELECT list: the call, outer, and the names given (if any).
struct GeneratorItem {
    call: Expr,
    outer: bool,
    names: Option<Vec<String>>,
}

/// The generator items of a projection, in order, with the other expressions between them.
enum Item {
    Plain(Expr),
    Generator(GeneratorItem),
}

fn strip_alias(e: &Expr) -> (&Expr, Option<&str>) {
    match e {
        Expr::Alias(a) => (a.expr.as_ref(), Some(a.name.as_str())),
        other => (other, None),
    }
}

/// Groups a projection's expressions: bare generators (maybe aliased), and runs of
/// `__sluice_generator_column` markers of one call numbered 0, 1, .. (named by their aliases).
fn items(exprs: &[Expr], schema_names: &[String]) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::new();
    let mut last_marker: Option<(&'static str, bool, usize, Vec<Expr>)> = None;
    for (e, output_name) in exprs.iter().zip(schema_names) {
        let (inner, alias) = strip_alias(e);
        if let Some((name, outer, j, args)) = as_generator_column(inner) {
            let continues = matches!(&last_marker, Some((n, o, pj, a))
                if *n == name && *o == outer && *pj + 1 == j && a.as_slice() == args);
            if continues {
                if let Some(Item::Generator(g)) = out.last_mut() {
                    if let Some(names) = &mut g.names {
                        names.push(output_name.clone());
                    }
                }
            } else {
                out.push(Item::Generator(GeneratorItem {
                    call: generator_call(name, args.to_vec()),
                    outer,
                    names: Some(vec![output_name.clone()]),
                }));
            }
            last_marker = Some((name, outer, j, args.to_vec()));
            continue;
        }
        last_marker = None;
        if as_generator(inner).is_some() {
            out.push(Item::Generator(GeneratorItem {
                call: inner.clone(),
                outer: false,
                names: alias.map(|a| vec![a.to_string()]),
            }));
        } else {
            out.push(Item::Plain(e.clone()));
        }
    }
    out
}

fn has_outer_reference(e: &Expr) -> bool {
    e.exists(|x| Ok(matches!(x, Expr::OuterReferenceColumn(..))))
        .unwrap_or(false)
}

/// Spark's `UDTF_ALIAS_NUMBER_MISMATCH`, when `names` are given and their count is not the
/// generator's.
pub(crate) fn check_alias_count(call: &Expr, outputs: usize, names: &[String]) -> Result<()> {
    if names.len() == outputs {
        return Ok(());
    }
    Err(SluiceError::query(
        class::UDTF_ALIAS_NUMBER_MISMATCH,
        format!(
            "The number of aliases supplied in the AS clause does not match the number of columns \
             output by the UDTF. Expected {outputs} aliases, but got {}. Please ensure that the \
             number of aliases provided matches the number of columns output by the UDTF \
             ({call}).",
            names.join(",")
        ),
    ))
}

fn is_over_aggregate(input: &LogicalPlan) -> bool {
    match input {
        LogicalPlan::Aggregate(_) => true,
        LogicalPlan::Filter(f) => matches!(f.input.as_ref(), LogicalPlan::Aggregate(_)),
        _ => false,
    }
}

/// True when schema column `c` is one of `refs` (an unqualified reference matches any
/// qualifier).
fn is_referenced(c: &Column, refs: &[Column]) -> bool {
    refs.iter()
        .any(|r| r.name == c.name && (r.relation.is_none() || r.relation == c.relation))
}

fn rewrite_projection(p: Projection) -> Result<Transformed<LogicalPlan>> {
    let names: Vec<String> = p.schema.fields().iter().map(|f| f.name().clone()).collect();
    let items = items(&p.expr, &names);
    let generators: Vec<&GeneratorItem> = items
        .iter()
        .filter_map(|i| match i {
            Item::Generator(g) => Some(g),
            Item::Plain(_) => None,
        })
        .collect();
    if generators.is_empty()
        || (matches!(p.input.as_ref(), LogicalPlan::EmptyRelation(_))
            && p.expr.iter().any(has_outer_reference))
    {
        return Ok(Transformed::no(LogicalPlan::Projection(p)));
    }
    if generators.len() > 1 && is_over_aggregate(&p.input) {
        return Err(SluiceError::query(
            class::UNSUPPORTED_GENERATOR_MULTI_GENERATOR,
            format!(
                "The generator is not supported: only one generator allowed per SELECT clause but \
                 found {}: {}. Explode in a subquery and aggregate over it, or generate from the \
                 aggregation's result in an outer query.",
                generators.len(),
                generators
                    .iter()
                    .map(|g| format!("\"{}\"", g.call))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    // The input columns the projection and the later generators read; only they are repeated.
    let mut plain_refs: Vec<Column> = Vec::new();
    let mut generator_refs: Vec<Vec<Column>> = Vec::new();
    for i in &items {
        match i {
            Item::Plain(e) => plain_refs.extend(e.column_refs().into_iter().cloned()),
            Item::Generator(g) => {
                generator_refs.push(g.call.column_refs().into_iter().cloned().collect())
            }
        }
    }
    let base = p
        .input
        .schema()
        .fields()
        .iter()
        .filter(|f| f.name().starts_with("__sluice_gen"))
        .count();
    let mut input = p.input.as_ref().clone();
    let mut generated: Vec<Column> = Vec::new();
    let mut exprs: Vec<Expr> = Vec::with_capacity(p.expr.len());
    let mut k = base;
    for item in items {
        let g = match item {
            Item::Plain(e) => {
                exprs.push(e);
                continue;
            }
            Item::Generator(g) => g,
        };
        let call = as_generator(&g.call)
            .ok_or_else(|| SluiceError::internal("a generator item without a generator"))?;
        let fields = generated_fields(&call, input.schema())?;
        let final_names: Vec<String> = match g.names {
            Some(n) => {
                check_alias_count(&g.call, fields.len(), &n)?;
                n
            }
            None => fields.iter().map(|f| f.name().clone()).collect(),
        };
        let internal: Vec<String> = (0..fields.len())
            .map(|j| format!("__sluice_gen{k}_{j}"))
            .collect();
        k += 1;
        let mut refs = plain_refs.clone();
        refs.extend(generator_refs.iter().skip(k - base).flatten().cloned());
        let kept: Vec<Column> = input
            .schema()
            .columns()
            .into_iter()
            .filter(|c| is_referenced(c, &refs) || generated.contains(c))
            .collect();
        input = Generate::try_new(
            input,
            g.call.clone(),
            g.outer,
            Some(kept),
            None,
            Some(internal.clone()),
        )?
        .into_plan();
        for (i, n) in internal.iter().zip(final_names) {
            let c = Column::new_unqualified(i);
            exprs.push(Expr::Column(c.clone()).alias(n));
            generated.push(c);
        }
    }
    let projection = Projection::try_new(exprs, Arc::new(input))?;
    Ok(Transformed::yes(LogicalPlan::Projection(projection)))
}

/// `left CROSS JOIN LATERAL (SELECT markers..) AS v` (a LATERAL VIEW) as `Generate` over `left`.
fn rewrite_lateral(j: Join) -> Result<Transformed<LogicalPlan>> {
    let shape = (|| {
        if j.join_type != JoinType::Inner || !j.on.is_empty() || j.filter.is_some() {
            return None;
        }
        let LogicalPlan::SubqueryAlias(sa) = j.right.as_ref() else {
            return None;
        };
        let inner = match sa.input.as_ref() {
            LogicalPlan::Subquery(sq) => sq.subquery.as_ref(),
            other => other,
        };
        let LogicalPlan::Projection(p) = inner else {
            return None;
        };
        if !matches!(p.input.as_ref(), LogicalPlan::EmptyRelation(_)) {
            return None;
        }
        let names: Vec<String> = p.schema.fields().iter().map(|f| f.name().clone()).collect();
        match items(&p.expr, &names).as_slice() {
            [Item::Generator(g)]
                if p.expr
                    .iter()
                    .all(|e| as_generator_column(strip_alias(e).0).is_some()) =>
            {
                Some((sa.alias.clone(), g.call.clone(), g.outer, g.names.clone()))
            }
            _ => None,
        }
    })();
    let Some((alias, call, outer, names)) = shape else {
        return Ok(Transformed::no(LogicalPlan::Join(j)));
    };
    // The lateral subquery read the left side's columns as outer references.
    let call = call
        .transform(|e| match e {
            Expr::OuterReferenceColumn(_, c) => Ok(Transformed::yes(Expr::Column(c))),
            other => Ok(Transformed::no(other)),
        })?
        .data;
    let left = j.left.as_ref().clone();
    let generate = Generate::try_new(left, call, outer, None, Some(alias), names)?;
    Ok(Transformed::yes(generate.into_plan()))
}

/// Refuses the generators the rewrite did not plan: nested in an expression, or outside a
/// SELECT list.
fn check_no_generator_left(plan: &LogicalPlan) -> Result<()> {
    let mut error: Option<SluiceError> = None;
    let _ = plan.apply_with_subqueries(|node| {
        let exprs: Vec<Expr> = match Generate::of(node) {
            Some(g) => g.args().to_vec(),
            None => node.expressions(),
        };
        let Some(bad) = exprs.iter().find(|e| holds_generator(e)) else {
            return Ok(TreeNodeRecursion::Continue);
        };
        error = Some(match node {
            LogicalPlan::Projection(_) | LogicalPlan::Extension(_) => SluiceError::query(
                class::UNSUPPORTED_GENERATOR_NESTED_IN_EXPRESSIONS,
                format!(
                    "The generator is not supported: nested in expressions \"{bad}\". Generate \
                     in a subquery (SELECT explode(..) AS c FROM ..) and use c outside it."
                ),
            ),
            LogicalPlan::Aggregate(_) => SluiceError::query(
                class::UNSUPPORTED_EXPR_FOR_OPERATOR,
                format!(
                    "A query operator contains one or more unsupported expressions: a generator \
                     in GROUP BY or an aggregate ({bad}). Generate in a subquery and group by its \
                     column."
                ),
            ),
            other => SluiceError::query(
                class::UNSUPPORTED_GENERATOR_OUTSIDE_SELECT,
                format!(
                    "The generator is not supported: outside the SELECT clause, found: {}. Move \
                     the generator into the SELECT list of a subquery.",
                    other.display()
                ),
            ),
        });
        Ok(TreeNodeRecursion::Stop)
    });
    match error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
