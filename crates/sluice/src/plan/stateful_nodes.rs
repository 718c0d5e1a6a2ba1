//! What a stateful node is (Spark's stateful operators: streaming aggregation, deduplication,
//! stream-stream join, flatMapGroupsWithState), decided once for the analysis
//! (`plan::analysis`, which checks chains of them) and for the staged plan (`plan::staged`, which
//! cuts the plan at each of them and runs an operator there).
//!
//! A node is stateful when it is one of those operators *over streaming input*: its input reads a
//! stream or the rows of an earlier stateful operator (a placeholder relation, which only the
//! staged plan's rewritten plans hold; in a query's own plan the two are the same thing).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Column;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{Aggregate, Distinct, Join, LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::Expr;

use crate::error::{Result, SluiceError};
use crate::operators::dedup::Deduplicate;
use crate::operators::flat_map_groups_with_state::FlatMapGroupsWithState;
pub(crate) use crate::operators::StatefulNode;
use crate::plan::relation::reads_stream_or_operator;
use crate::plan::StreamingRelation;

/// A stateful node, borrowed from the plan: the one place that says which nodes are stateful.
enum StatefulNodeRef<'a> {
    Aggregate(&'a Aggregate),
    /// `SELECT DISTINCT` over streaming input: a deduplication on every column.
    Distinct(&'a Arc<LogicalPlan>),
    Deduplicate(&'a Deduplicate),
    Join(&'a Join),
    FlatMapGroupsWithState(&'a FlatMapGroupsWithState),
}

impl<'a> StatefulNodeRef<'a> {
    fn of(node: &'a LogicalPlan) -> Option<Self> {
        match node {
            LogicalPlan::Aggregate(agg) if reads_stream_or_operator(&agg.input) => {
                Some(Self::Aggregate(agg))
            }
            LogicalPlan::Join(j)
                if reads_stream_or_operator(&j.left) && reads_stream_or_operator(&j.right) =>
            {
                Some(Self::Join(j))
            }
            LogicalPlan::Distinct(Distinct::All(input)) if reads_stream_or_operator(input) => {
                Some(Self::Distinct(input))
            }
            other => match (Deduplicate::of(other), FlatMapGroupsWithState::of(other)) {
                (Some(d), _) => Some(Self::Deduplicate(d)),
                (_, Some(f)) => Some(Self::FlatMapGroupsWithState(f)),
                _ => None,
            },
        }
    }
}

/// True when `node` is a stateful operator over streaming input.
pub(crate) fn is_stateful(node: &LogicalPlan) -> bool {
    StatefulNodeRef::of(node).is_some()
}

impl StatefulNode {
    /// The stateful node `node` is, if it is one; a `SELECT DISTINCT` becomes the deduplication
    /// on every column it means.
    fn of(node: &LogicalPlan) -> Result<Option<StatefulNode>> {
        Ok(match StatefulNodeRef::of(node) {
            None => None,
            Some(StatefulNodeRef::Aggregate(agg)) => Some(StatefulNode::Aggregate(agg.clone())),
            Some(StatefulNodeRef::Join(j)) => Some(StatefulNode::Join(j.clone())),
            Some(StatefulNodeRef::Distinct(input)) => {
                let keys = input
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
                Some(StatefulNode::Deduplicate(Deduplicate::try_new(
                    input.as_ref().clone(),
                    keys,
                    false,
                )?))
            }
            Some(StatefulNodeRef::Deduplicate(d)) => Some(StatefulNode::Deduplicate(d.clone())),
            Some(StatefulNodeRef::FlatMapGroupsWithState(f)) => {
                Some(StatefulNode::FlatMapGroupsWithState(f.clone()))
            }
        })
    }
}

/// Splits `plan` at its stateful operator: (the node, the plan above it with the node replaced
/// by a placeholder scan, the placeholder's id and schema).
pub(crate) fn split_stateful(
    plan: &LogicalPlan,
) -> Result<Option<(StatefulNode, LogicalPlan, u64, SchemaRef)>> {
    let mut found: Option<(StatefulNode, u64, SchemaRef)> = None;
    let mut error: Option<SluiceError> = None;
    let rewritten = plan
        .clone()
        .transform_up(|node| {
            // Post-order: the first stateful node met has no stateful node below it.
            if found.is_some() || error.is_some() {
                return Ok(Transformed::no(node));
            }
            let stateful = match StatefulNode::of(&node) {
                Ok(Some(s)) => s,
                Ok(None) => return Ok(Transformed::no(node)),
                Err(e) => {
                    error = Some(e);
                    return Ok(Transformed::no(node));
                }
            };
            let out_schema = node.schema();
            // Internal column names (no clash with the names the projection gives back); nullable,
            // as operator rows may hold nulls where the planner declared a field non-null; field
            // metadata (event time) kept.
            let fields: Vec<arrow::datatypes::Field> = out_schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    arrow::datatypes::Field::new(format!("__c{i}"), f.data_type().clone(), true)
                        .with_metadata(f.metadata().clone())
                })
                .collect();
            let schema = Arc::new(arrow::datatypes::Schema::new(fields));
            let rel = StreamingRelation::placeholder(schema.clone());
            let id = rel.id();
            let table = format!("__sluice_stateful_{id}");
            let scan =
                LogicalPlanBuilder::scan(table.as_str(), provider_as_source(Arc::new(rel)), None)?
                    .build()?;
            let exprs: Vec<Expr> = out_schema
                .iter()
                .enumerate()
                .map(|(i, (q, f))| {
                    Expr::Column(Column::new(Some(table.as_str()), format!("__c{i}")))
                        .alias_qualified(q.cloned(), f.name())
                })
                .collect();
            let projected = LogicalPlanBuilder::from(scan).project(exprs)?.build()?;
            found = Some((stateful, id, schema));
            Ok(Transformed::yes(projected))
        })
        .map_err(SluiceError::from)?;
    if let Some(e) = error {
        return Err(e);
    }
    Ok(found.map(|(node, id, schema)| (node, rewritten.data, id, schema)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::functions_aggregate::expr_fn::count;
    use datafusion::prelude::col;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]))
    }

    fn stream() -> LogicalPlanBuilder {
        let source = crate::source::memory::MemoryStream::new(schema());
        let rel = StreamingRelation::new(Arc::new(source));
        LogicalPlanBuilder::scan("s", provider_as_source(Arc::new(rel)), None).unwrap()
    }

    fn table() -> LogicalPlanBuilder {
        let t = MemTable::try_new(schema(), vec![vec![]]).unwrap();
        LogicalPlanBuilder::scan("t", provider_as_source(Arc::new(t)), None).unwrap()
    }

    fn count_by_k(input: LogicalPlanBuilder) -> LogicalPlanBuilder {
        input
            .aggregate(vec![col("k")], vec![count(col("v")).alias("n")])
            .unwrap()
    }

    #[test]
    fn only_operators_over_streaming_input_are_stateful() {
        assert!(is_stateful(&count_by_k(stream()).build().unwrap()));
        assert!(!is_stateful(&count_by_k(table()).build().unwrap()));
        let distinct = stream().distinct().unwrap().build().unwrap();
        assert!(is_stateful(&distinct));
        assert!(!is_stateful(&table().distinct().unwrap().build().unwrap()));
        let join = |right: LogicalPlanBuilder| {
            let right = right.alias("r").unwrap().build().unwrap();
            stream()
                .join_on(
                    right,
                    datafusion::logical_expr::JoinType::Inner,
                    vec![col("s.k").eq(col("r.k"))],
                )
                .unwrap()
                .build()
                .unwrap()
        };
        assert!(is_stateful(&join(stream())), "stream-stream join");
        assert!(!is_stateful(&join(table())), "stream-static join");
    }

    #[test]
    fn the_split_plan_reads_the_operator_and_the_next_operator_stays_stateful() {
        // count of counts: two stateful operators, the upper one over the lower one's output
        let plan = count_by_k(stream())
            .aggregate(vec![col("n")], vec![count(col("k")).alias("keys")])
            .unwrap()
            .build()
            .unwrap();
        let (node, above, placeholder, _) = split_stateful(&plan).unwrap().unwrap();
        assert!(matches!(node, StatefulNode::Aggregate(_)));
        assert!(is_stateful(&above), "it reads the placeholder: {above}");
        let (_, top, _, _) = split_stateful(&above).unwrap().unwrap();
        assert!(!is_stateful(&top));
        assert!(split_stateful(&top).unwrap().is_none());
        assert!(above
            .display_indent()
            .to_string()
            .contains(&format!("__sluice_stateful_{placeholder}")));
    }
}
