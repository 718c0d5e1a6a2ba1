//! Streaming analysis: which plans may run as streams, in which output mode (Spark's
//! `UnsupportedOperationChecker`). Runs once, when a query starts, before anything is written.

use crate::error::class;
use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::{JoinType, LogicalPlan};

use super::relation::is_streaming;
use super::stateful_nodes::is_stateful;
use crate::error::{Result, SluiceError};
use crate::operators::analysis::{has_event_time_key, has_session_window};
use crate::types::OutputMode;

/// What the analysis learned about a streaming plan.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamingPlanInfo {
    /// Number of streaming aggregations.
    pub aggregations: usize,
    /// Number of stateful operators (aggregations, deduplications, stream-stream joins).
    pub stateful: usize,
}

/// Checks that `plan` can run as a streaming query in `mode`. Errors carry Spark's meaning.
///
/// `check_correctness` is Spark's `spark.sql.streaming.statefulOperator.checkCorrectness.enabled`
/// (default true): refuse chains of stateful operators that can emit rows older than the
/// watermark into a downstream stateful operator.
pub(crate) fn check_streaming_plan(
    plan: &LogicalPlan,
    mode: OutputMode,
    check_correctness: bool,
) -> Result<StreamingPlanInfo> {
    let mut info = StreamingPlanInfo::default();
    visit(plan, mode, &mut info)?;
    if info.aggregations == 0 && mode == OutputMode::Complete {
        return Err(SluiceError::query(
            class::STREAMING_OUTPUT_MODE_UNSUPPORTED_OPERATION,
            "Complete output mode not supported when there are no streaming aggregations on \
             streaming DataFrames/Datasets. Use output mode append or update, or add an \
             aggregation (group_by) to the query.",
        ));
    }
    if info.stateful > 1 && check_correctness {
        check_chained_stateful(plan, mode)?;
    }
    Ok(info)
}

fn visit(plan: &LogicalPlan, mode: OutputMode, info: &mut StreamingPlanInfo) -> Result<()> {
    let streaming = is_streaming(plan);
    if streaming {
        match plan {
            LogicalPlan::Aggregate(agg) => {
                info.aggregations += 1;
                info.stateful += 1;
                if agg
                    .group_expr
                    .iter()
                    .any(|g| matches!(g, datafusion::prelude::Expr::GroupingSet(_)))
                {
                    return Err(SluiceError::query(
                        class::UNSUPPORTED_STREAMING_OPERATION,
                        "Grouping Sets is not supported on streaming DataFrames/Datasets",
                    ));
                }
                crate::operators::analysis::check_windows(agg)?;
                if mode == OutputMode::Append && !has_event_time_key(agg) {
                    return Err(SluiceError::query(
                        class::STREAMING_OUTPUT_MODE_UNSUPPORTED_OPERATION,
                        "Append output mode not supported when there are streaming aggregations on \
                         streaming DataFrames/DataSets without watermark. Add with_watermark(..) on \
                         the event-time column and group by it or by a window over it, or use update \
                         or complete mode.",
                    ));
                }
                if mode == OutputMode::Update && has_session_window(agg) {
                    return Err(SluiceError::query(
                        class::STREAMING_OUTPUT_MODE_UNSUPPORTED_OPERATION,
                        "Update output mode not supported for session window on streaming \
                         DataFrames/Datasets. Use append or complete mode.",
                    ));
                }
            }
            LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(_)) => info.stateful += 1,
            LogicalPlan::Distinct(_) => {
                return Err(SluiceError::not_supported_yet(
                    "DISTINCT ON over a stream is not supported yet; use drop_duplicates(columns)",
                ))
            }
            LogicalPlan::Extension(e)
                if e.node.as_any().is::<crate::operators::dedup::Deduplicate>() =>
            {
                info.stateful += 1
            }
            LogicalPlan::Extension(e) => {
                if let Some(f) = e
                    .node
                    .as_any()
                    .downcast_ref::<crate::operators::flat_map_groups_with_state::FlatMapGroupsWithState>()
                {
                    info.stateful += 1;
                    if f.mode != mode {
                        return Err(SluiceError::query(
                            class::STREAMING_OUTPUT_MODE_UNSUPPORTED_OPERATION,
                            format!(
                                "flatMapGroupsWithState in {:?} mode is not supported with {mode:?} output mode \
                                 on a streaming DataFrame/Dataset; start the query in {:?} mode",
                                f.mode, f.mode
                            ),
                        ));
                    }
                }
            }
            LogicalPlan::Sort(_) => {
                let sort_after_aggregation = plan.inputs().iter().any(|i| contains_aggregate(i));
                if !(sort_after_aggregation && mode == OutputMode::Complete) {
                    return Err(SluiceError::query(
                        class::UNSUPPORTED_STREAMING_OPERATION,
                        "Sorting is not supported on streaming DataFrames/Datasets, unless it is on \
                         aggregated DataFrame/Dataset in Complete output mode. Remove the ORDER BY, \
                         or sort inside foreach_batch.",
                    ));
                }
            }
            // Spark: a limit over a complete-mode aggregation takes the top rows of each batch's
            // whole result (the state keeps every key); update mode refuses limits; append mode
            // needs Spark's stateful global limit, which Sluice does not have yet.
            LogicalPlan::Limit(l) if l.skip.is_some() => {
                return Err(SluiceError::query(
                    class::UNSUPPORTED_STREAMING_OPERATION,
                    "Offset is not supported on streaming DataFrames/Datasets. Remove the OFFSET, \
                     or skip rows inside foreach_batch.",
                ))
            }
            LogicalPlan::Limit(_) => match mode {
                OutputMode::Complete if plan.inputs().iter().any(|i| contains_aggregate(i)) => {}
                OutputMode::Update => {
                    return Err(SluiceError::query(
                        class::UNSUPPORTED_STREAMING_OPERATION,
                        "Limits are not supported on streaming DataFrames/Datasets in Update \
                         output mode. Use complete mode over an aggregation, or take rows inside \
                         foreach_batch.",
                    ))
                }
                _ => {
                    return Err(SluiceError::not_supported_yet(
                        "LIMIT on a streaming query outside a complete-mode aggregation (Spark's \
                         stateful global limit) is not supported yet; use foreach_batch to take \
                         rows from each batch",
                    ))
                }
            },
            LogicalPlan::Window(_) => {
                return Err(SluiceError::query(
                    class::NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING,
                    "Non-time-based windows are not supported on streaming DataFrames/Datasets. \
                     Use a time window (window(ts, '5 minutes')) in GROUP BY instead of OVER (..).",
                ))
            }
            LogicalPlan::Join(j) if is_streaming(&j.left) && is_streaming(&j.right) => {
                if mode != OutputMode::Append {
                    return Err(SluiceError::query(
                        class::STREAMING_OUTPUT_MODE_UNSUPPORTED_OPERATION,
                        format!(
                            "Join between two streaming DataFrames/Datasets is not supported in {mode:?} \
                             output mode, only in Append output mode"
                        ),
                    ));
                }
                crate::operators::join::check_stream_stream_join(j)?;
                info.stateful += 1;
            }
            LogicalPlan::Join(j) => {
                check_join(j.join_type, is_streaming(&j.left), is_streaming(&j.right))?
            }
            LogicalPlan::Subquery(_) => {
                return Err(SluiceError::not_supported_yet(
                    "subqueries over streams are not supported yet",
                ))
            }
            _ => {}
        }
    }
    for input in plan.inputs() {
        visit(input, mode, info)?;
    }
    Ok(())
}

fn contains_aggregate(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Aggregate(_)) || plan.inputs().iter().any(|i| contains_aggregate(i))
}

/// Spark's rules for joins with streams (`UnsupportedOperationChecker`).
fn check_join(kind: JoinType, left_stream: bool, right_stream: bool) -> Result<()> {
    let refuse = |msg: &str| {
        Err(SluiceError::query(
            class::UNSUPPORTED_STREAMING_OPERATION,
            msg.to_string(),
        ))
    };
    match (left_stream, right_stream) {
        (true, true) => Ok(()),
        (true, false) => match kind {
            JoinType::Inner
            | JoinType::Left
            | JoinType::LeftSemi
            | JoinType::LeftAnti
            | JoinType::LeftMark => Ok(()),
            JoinType::Full => refuse(
                "FullOuter joins with streaming DataFrames/Datasets on the left and a static \
                 DataFrame/Dataset on the right is not supported",
            ),
            _ => refuse(
                "RightOuter join with a streaming DataFrame/Dataset on the left and a static \
                 DataFrame/DataSet on the right not supported",
            ),
        },
        (false, true) => match kind {
            JoinType::Inner
            | JoinType::Right
            | JoinType::RightSemi
            | JoinType::RightAnti
            | JoinType::RightMark => Ok(()),
            JoinType::Full => refuse(
                "FullOuter joins with streaming DataFrames/Datasets on the right and a static \
                 DataFrame/Dataset on the left is not supported",
            ),
            JoinType::LeftAnti => refuse(
                "LeftAnti joins with a streaming DataFrame/Dataset on the right are not supported",
            ),
            _ => refuse(
                "LeftOuter/LeftSemi join with a streaming DataFrame/Dataset on the right and a \
                 static DataFrame/Dataset on the left is not supported",
            ),
        },
        (false, false) => Ok(()),
    }
}

/// Whether a stateful node can emit rows that a downstream stateful operator would see as late
/// (Spark 3.4+'s correctness check for chained stateful operators).
fn emits_late_rows(p: &LogicalPlan, mode: OutputMode) -> bool {
    match p {
        LogicalPlan::Aggregate(_) | LogicalPlan::Distinct(_) => mode != OutputMode::Append,
        LogicalPlan::Extension(e) => e
            .node
            .as_any()
            .downcast_ref::<crate::operators::flat_map_groups_with_state::FlatMapGroupsWithState>()
            .is_some_and(|f| f.timeout == crate::operators::flat_map_groups_with_state::GroupStateTimeout::EventTimeTimeout),
        _ => false,
    }
}

fn check_chained_stateful(plan: &LogicalPlan, mode: OutputMode) -> Result<()> {
    if is_stateful(plan) {
        let mut risky = false;
        for input in plan.inputs() {
            let _ = input.apply(|n| {
                if is_stateful(n) && emits_late_rows(n, mode) {
                    risky = true;
                    return Ok(datafusion::common::tree_node::TreeNodeRecursion::Stop);
                }
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            });
        }
        if risky {
            return Err(SluiceError::query(
                class::STREAMING_STATEFUL_OPERATOR_CORRECTNESS,
                "Detected pattern of possible 'correctness' issue due to global watermark. The query \
                 contains stateful operation which can emit rows older than the current watermark plus \
                 allowed late record delay, which are \"late rows\" in downstream stateful operations and \
                 these rows can be discarded. Please refer the programming guide doc for more details. \
                 If you understand the possible risk of correctness issue and still need to run the \
                 query, you can disable this check by setting the config \
                 `spark.sql.streaming.statefulOperator.checkCorrectness.enabled` to false.",
            ));
        }
    }
    for input in plan.inputs() {
        check_chained_stateful(input, mode)?;
    }
    Ok(())
}

/// Checks that `plan` can run under continuous processing (Spark's
/// `UnsupportedOperationChecker.checkForContinuous`): only projections and selections over
/// streams, no aggregate functions, no current-time functions. Runs before the micro-batch
/// checks so an aggregation gets the continuous message.
pub(crate) fn check_continuous_plan(plan: &LogicalPlan) -> Result<()> {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let mut error: Option<SluiceError> = None;
    let fail = |what: &str| {
        SluiceError::query(
            class::UNSUPPORTED_STREAMING_OPERATION,
            format!("Continuous processing does not support {what} operations."),
        )
    };
    let _ = plan.apply(|node| {
        let name: Option<String> = match node {
            LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::TableScan(_) => None,
            LogicalPlan::Aggregate(_) => Some("Aggregate".into()),
            LogicalPlan::Join(_) => Some("Join".into()),
            LogicalPlan::Distinct(_) => Some("Deduplicate".into()),
            LogicalPlan::Window(_) => Some("Window".into()),
            LogicalPlan::Sort(_) => Some("Sort".into()),
            LogicalPlan::Limit(_) => Some("GlobalLimit".into()),
            LogicalPlan::Union(_) => Some("Union".into()),
            LogicalPlan::Extension(e) => {
                let n = e.node.name().to_string();
                Some(match n.as_str() {
                    "Deduplicate" | "StreamingDeduplicate" => "Deduplicate".into(),
                    other => other.to_string(),
                })
            }
            other => Some(
                other
                    .display()
                    .to_string()
                    .split(':')
                    .next()
                    .unwrap_or("this")
                    .trim()
                    .to_string(),
            ),
        };
        if let Some(name) = name {
            error = Some(fail(&name));
            return Ok(TreeNodeRecursion::Stop);
        }
        for e in node.expressions() {
            let mut bad: Option<SluiceError> = None;
            let _ = e.apply(|x| {
                match x {
                    datafusion::prelude::Expr::AggregateFunction(_) => {
                        bad = Some(fail("Aggregate"));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    datafusion::prelude::Expr::WindowFunction(_) => {
                        bad = Some(fail("Window"));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    datafusion::prelude::Expr::ScalarFunction(f)
                        if matches!(
                            f.name(),
                            "now"
                                | "current_timestamp"
                                | "current_date"
                                | "localtimestamp"
                                | "current_time"
                                | "today"
                        ) =>
                    {
                        bad = Some(SluiceError::query(
                            class::UNSUPPORTED_STREAMING_OPERATION,
                            "Continuous processing does not support current time operations.",
                        ));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            });
            if bad.is_some() {
                error = bad;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    match error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
