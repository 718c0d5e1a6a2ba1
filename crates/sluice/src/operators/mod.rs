//! Stateful operators and event time.
//!
//! - [`stateful`]: the framework every stateful operator is written against (the
//!   [`stateful::StatefulOperator`] trait, its state info and batch context,
//!   the partitioned stores it is handed, event-time columns);
//! - the operators: streaming aggregation ([`aggregate`]), deduplication ([`dedup`]),
//!   stream-stream joins ([`join`]) and arbitrary stateful processing
//!   ([`flat_map_groups_with_state`]), built from their logical node by [`create_operator`];
//! - event time: watermarks ([`watermark`]) and windows ([`window`]);
//! - [`analysis`]: what the streaming analysis asks of an aggregation before it is built.

pub(crate) mod aggregate;
pub(crate) mod analysis;
pub(crate) mod dedup;
pub(crate) mod flat_map_groups_with_state;
pub(crate) mod join;
pub(crate) mod stateful;
pub(crate) mod watermark;
pub(crate) mod window;

#[cfg(test)]
mod golden_tests;

use datafusion::logical_expr::{Aggregate, Join, LogicalPlan};

use self::aggregate::StreamingAggregate;
use self::dedup::{Deduplicate, StreamingDeduplicate};
use self::flat_map_groups_with_state::{FlatMapGroupsWithState, StreamingFlatMapGroupsWithState};
use self::join::StreamingJoin;
use self::stateful::{OperatorRunner, StateInfo, StatefulOperator};
use crate::error::Result;
use crate::types::OutputMode;

/// A stateful node of a logical plan: what [`create_operator`] builds an operator for.
#[derive(Debug, Clone)]
pub(crate) enum StatefulNode {
    /// A streaming aggregation.
    Aggregate(Aggregate),
    /// `drop_duplicates`, `drop_duplicates_within_watermark` or `SELECT DISTINCT`.
    Deduplicate(Deduplicate),
    /// A stream-stream join.
    Join(Join),
    /// `flat_map_groups_with_state` / `map_groups_with_state`.
    FlatMapGroupsWithState(FlatMapGroupsWithState),
}

impl StatefulNode {
    /// The node's inputs, one plan per child of the operator (a join's left, then right).
    /// `flatMapGroupsWithState` takes its input sorted by key (as Spark's
    /// `FlatMapGroupsWithStateExec` requires), so it holds one key's rows at a time; the sort
    /// spills past the memory budget.
    pub(crate) fn input_plans(&self) -> Result<Vec<LogicalPlan>> {
        Ok(match self {
            StatefulNode::Aggregate(agg) => vec![agg.input.as_ref().clone()],
            StatefulNode::Join(j) => vec![j.left.as_ref().clone(), j.right.as_ref().clone()],
            StatefulNode::FlatMapGroupsWithState(f) if f.keys.is_empty() => vec![f.input.clone()],
            StatefulNode::FlatMapGroupsWithState(f) => {
                let schema = f.input.schema();
                let by_key = f
                    .keys
                    .iter()
                    .map(|k| {
                        let (qualifier, field) = schema.qualified_field_with_unqualified_name(k)?;
                        let column =
                            datafusion::common::Column::new(qualifier.cloned(), field.name());
                        Ok(datafusion::logical_expr::Expr::Column(column).sort(true, true))
                    })
                    .collect::<Result<Vec<_>>>()?;
                vec![
                    datafusion::logical_expr::LogicalPlanBuilder::from(f.input.clone())
                        .sort(by_key)?
                        .build()?,
                ]
            }
            StatefulNode::Deduplicate(d) => vec![d.input.clone()],
        })
    }
}

/// Builds the operator for `node`, writing in output mode `mode`, with its state where `info`
/// says: the framework checks (or records) the operator's state schema and opens its stores. A
/// state that does not fit the checkpoint fails with a class
/// `crate::state::schema::is_state_schema_error` recognises.
pub(crate) fn create_operator(
    node: &StatefulNode,
    mode: OutputMode,
    info: &StateInfo,
) -> Result<OperatorRunner> {
    let operator: Box<dyn StatefulOperator> = match node {
        StatefulNode::Aggregate(agg) => Box::new(StreamingAggregate::try_new(agg, mode, info)?),
        StatefulNode::Join(j) => Box::new(StreamingJoin::try_new(j, info)?),
        StatefulNode::FlatMapGroupsWithState(f) => {
            Box::new(StreamingFlatMapGroupsWithState::try_new(f, info)?)
        }
        StatefulNode::Deduplicate(d) => Box::new(StreamingDeduplicate::try_new(d, info)?),
    };
    OperatorRunner::try_new(operator, info)
}
