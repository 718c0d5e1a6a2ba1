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

use std::sync::Arc;

use datafusion::common::{DFSchemaRef, JoinType, NullEquality};
use datafusion::logical_expr::{Aggregate, EmptyRelation, Expr, Join, JoinConstraint, LogicalPlan};

use self::aggregate::StreamingAggregate;
use self::dedup::{Deduplicate, StreamingDeduplicate};
use self::flat_map_groups_with_state::{FlatMapGroupsWithState, StreamingFlatMapGroupsWithState};
use self::join::StreamingJoin;
use self::stateful::{OperatorRunner, StateInfo, StatefulOperator};
use crate::error::{Result, SluiceError};
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
                        Ok(Expr::Column(column).sort(true, true))
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
    OperatorRunner::try_new(build_operator(node, mode, info)?, info)
}

/// The operator for `node` (not yet driven: [`OperatorRunner`] drives it).
pub(crate) fn build_operator(
    node: &StatefulNode,
    mode: OutputMode,
    info: &StateInfo,
) -> Result<Box<dyn StatefulOperator>> {
    Ok(match node {
        StatefulNode::Aggregate(agg) => Box::new(StreamingAggregate::try_new(agg, mode, info)?),
        StatefulNode::Join(j) => Box::new(StreamingJoin::try_new(j, info)?),
        StatefulNode::FlatMapGroupsWithState(f) => {
            Box::new(StreamingFlatMapGroupsWithState::try_new(f, info)?)
        }
        StatefulNode::Deduplicate(d) => Box::new(StreamingDeduplicate::try_new(d, info)?),
    })
}

/// Which operator a node is, for a worker to build it ([`StatefulNode::to_parts`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum NodeSpec {
    /// An aggregation: schemas `[input, output]`, expressions `[keys, aggregates]`.
    Aggregate,
    /// A deduplication: schemas `[input]`.
    Deduplicate {
        keys: Vec<String>,
        within_watermark: bool,
    },
    /// `flatMapGroupsWithState` of a function registered by name: schemas `[input, output]`.
    FlatMapGroupsWithState {
        function: String,
        keys: Vec<String>,
        mode: String,
        timeout: flat_map_groups_with_state::GroupStateTimeout,
    },
    /// A stream-stream join: schemas `[left, right]`, expressions `[left keys, right keys,
    /// filter (none or one)]`.
    Join {
        join_type: String,
        using: bool,
        nulls_equal: bool,
        null_aware: bool,
    },
}

impl NodeSpec {
    /// How many inputs the operator takes.
    pub(crate) fn inputs(&self) -> usize {
        match self {
            NodeSpec::Join { .. } => 2,
            NodeSpec::Aggregate
            | NodeSpec::Deduplicate { .. }
            | NodeSpec::FlatMapGroupsWithState { .. } => 1,
        }
    }
}

/// A join type by its name in DataFusion's `Display`, and back.
fn join_type_named(name: &str) -> Result<JoinType> {
    [
        JoinType::Inner,
        JoinType::Left,
        JoinType::Right,
        JoinType::Full,
        JoinType::LeftSemi,
        JoinType::RightSemi,
        JoinType::LeftAnti,
        JoinType::RightAnti,
        JoinType::LeftMark,
        JoinType::RightMark,
    ]
    .into_iter()
    .find(|t| t.to_string() == name)
    .ok_or_else(|| SluiceError::internal(format!("a join of type {name:?} from the driver")))
}

impl StatefulNode {
    /// The node as parts a cluster carries to a worker: which operator, its logical schemas and
    /// expressions (its inputs are not carried: the worker is handed their rows). `None` for
    /// a `flatMapGroupsWithState` whose function was not registered by name: it is Rust code
    /// of the driver's process, which a worker has only under a registered name.
    pub(crate) fn to_parts(&self) -> Option<(NodeSpec, Vec<DFSchemaRef>, Vec<Vec<Expr>>)> {
        match self {
            StatefulNode::Aggregate(agg) => Some((
                NodeSpec::Aggregate,
                vec![Arc::clone(agg.input.schema()), Arc::clone(&agg.schema)],
                vec![agg.group_expr.clone(), agg.aggr_expr.clone()],
            )),
            StatefulNode::Deduplicate(d) => Some((
                NodeSpec::Deduplicate {
                    keys: d.keys.clone(),
                    within_watermark: d.within_watermark,
                },
                vec![Arc::clone(d.input.schema())],
                vec![],
            )),
            StatefulNode::Join(j) => Some((
                NodeSpec::Join {
                    join_type: j.join_type.to_string(),
                    using: j.join_constraint == JoinConstraint::Using,
                    nulls_equal: j.null_equality == NullEquality::NullEqualsNull,
                    null_aware: j.null_aware,
                },
                vec![Arc::clone(j.left.schema()), Arc::clone(j.right.schema())],
                vec![
                    j.on.iter().map(|(l, _)| l.clone()).collect(),
                    j.on.iter().map(|(_, r)| r.clone()).collect(),
                    j.filter.iter().cloned().collect(),
                ],
            )),
            StatefulNode::FlatMapGroupsWithState(f) => Some((
                NodeSpec::FlatMapGroupsWithState {
                    function: f.function_name.clone()?,
                    keys: f.keys.clone(),
                    mode: f.mode.as_str().to_string(),
                    timeout: f.timeout,
                },
                vec![Arc::clone(f.input.schema()), Arc::clone(&f.output_schema)],
                vec![],
            )),
        }
    }

    /// The node of [`Self::to_parts`]'s parts, its inputs empty relations of their schemas.
    pub(crate) fn from_parts(
        spec: &NodeSpec,
        schemas: &[DFSchemaRef],
        exprs: &[Vec<Expr>],
    ) -> Result<StatefulNode> {
        let empty = |schema: &DFSchemaRef| {
            Arc::new(LogicalPlan::EmptyRelation(EmptyRelation {
                produce_one_row: false,
                schema: Arc::clone(schema),
            }))
        };
        let missing = || SluiceError::internal("a stateful node's parts are missing some");
        Ok(match spec {
            NodeSpec::Aggregate => {
                let (Some(input), Some(output), Some(keys), Some(aggs)) =
                    (schemas.first(), schemas.get(1), exprs.first(), exprs.get(1))
                else {
                    return Err(missing());
                };
                StatefulNode::Aggregate(Aggregate::try_new_with_schema(
                    empty(input),
                    keys.clone(),
                    aggs.clone(),
                    Arc::clone(output),
                )?)
            }
            NodeSpec::Deduplicate {
                keys,
                within_watermark,
            } => {
                let input = schemas.first().ok_or_else(missing)?;
                StatefulNode::Deduplicate(Deduplicate::try_new(
                    empty(input).as_ref().clone(),
                    keys.clone(),
                    *within_watermark,
                )?)
            }
            NodeSpec::FlatMapGroupsWithState {
                function,
                keys,
                mode,
                timeout,
            } => {
                let (Some(input), Some(output)) = (schemas.first(), schemas.get(1)) else {
                    return Err(missing());
                };
                StatefulNode::FlatMapGroupsWithState(FlatMapGroupsWithState::of_function(
                    empty(input).as_ref().clone(),
                    keys.clone(),
                    Arc::new(output.as_arrow().clone()),
                    mode.parse()?,
                    *timeout,
                    flat_map_groups_with_state::registered_function(function)?,
                    Some(function.clone()),
                )?)
            }
            NodeSpec::Join {
                join_type,
                using,
                nulls_equal,
                null_aware,
            } => {
                let (Some(left), Some(right), Some(lk), Some(rk), Some(filter)) = (
                    schemas.first(),
                    schemas.get(1),
                    exprs.first(),
                    exprs.get(1),
                    exprs.get(2),
                ) else {
                    return Err(missing());
                };
                StatefulNode::Join(Join::try_new(
                    empty(left),
                    empty(right),
                    lk.iter().cloned().zip(rk.iter().cloned()).collect(),
                    filter.first().cloned(),
                    join_type_named(join_type)?,
                    if *using {
                        JoinConstraint::Using
                    } else {
                        JoinConstraint::On
                    },
                    if *nulls_equal {
                        NullEquality::NullEqualsNull
                    } else {
                        NullEquality::NullEqualsNothing
                    },
                    *null_aware,
                )?)
            }
        })
    }
}
