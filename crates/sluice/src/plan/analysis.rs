//! Streaming analysis: which plans may run as streams, in which output mode (Spark's
//! `UnsupportedOperationChecker`). Runs once, when a query starts, before anything is written.

use datafusion::logical_expr::{JoinType, LogicalPlan};

use super::relation::is_streaming;
use crate::error::{Result, SluiceError};
use crate::OutputMode;

/// Error class of output-mode violations (Spark's meaning, Sluice's class name).
pub const OUTPUT_MODE_CLASS: &str = "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION";
/// Error class of operations a stream cannot run at all.
pub const UNSUPPORTED_OPERATION_CLASS: &str = "UNSUPPORTED_STREAMING_OPERATION";

/// What the analysis learned about a streaming plan.
#[derive(Debug, Clone, Default)]
pub struct StreamingPlanInfo {
    /// Number of streaming aggregations.
    pub aggregations: usize,
}

/// Checks that `plan` can run as a streaming query in `mode`. Errors carry Spark's meaning.
pub fn check_streaming_plan(plan: &LogicalPlan, mode: OutputMode) -> Result<StreamingPlanInfo> {
    let mut info = StreamingPlanInfo::default();
    visit(plan, &mut info)?;
    if info.aggregations == 0 && mode == OutputMode::Complete {
        return Err(SluiceError::query(
            OUTPUT_MODE_CLASS,
            "Complete output mode not supported when there are no streaming aggregations on \
             streaming DataFrames/Datasets. Use output mode append or update, or add an \
             aggregation (group_by) to the query.",
        ));
    }
    if info.aggregations > 0 {
        // Spark rejects append mode on an aggregation without a watermark; say so even before
        // streaming aggregation itself is available.
        if mode == OutputMode::Append {
            return Err(SluiceError::query(
                OUTPUT_MODE_CLASS,
                "Append output mode not supported when there are streaming aggregations on \
                 streaming DataFrames/DataSets without watermark. Add with_watermark(..) on the \
                 event-time column used by the aggregation, or use update/complete mode.",
            ));
        }
        return Err(SluiceError::not_supported_yet(
            "streaming aggregation (GROUP BY / group_by / DISTINCT) is not supported yet: it \
             arrives with the state store (issue 3). Stateless queries run today.",
        ));
    }
    Ok(info)
}

fn visit(plan: &LogicalPlan, info: &mut StreamingPlanInfo) -> Result<()> {
    let streaming = is_streaming(plan);
    if streaming {
        match plan {
            LogicalPlan::Aggregate(_) | LogicalPlan::Distinct(_) => info.aggregations += 1,
            LogicalPlan::Sort(_) => {
                return Err(SluiceError::query(
                    UNSUPPORTED_OPERATION_CLASS,
                    "Sorting is not supported on streaming DataFrames/Datasets, unless it is on \
                     aggregated DataFrame/Dataset in Complete output mode. Remove the ORDER BY, \
                     or sort inside foreach_batch.",
                ))
            }
            LogicalPlan::Limit(_) => {
                return Err(SluiceError::not_supported_yet(
                    "LIMIT on a streaming query is not supported yet; use foreach_batch to take \
                     rows from each batch",
                ))
            }
            LogicalPlan::Window(_) => {
                return Err(SluiceError::query(
                    UNSUPPORTED_OPERATION_CLASS,
                    "Non-time-based windows are not supported on streaming DataFrames/Datasets. \
                     Use a time window (window(ts, '5 minutes')) in GROUP BY instead of OVER (..).",
                ))
            }
            LogicalPlan::Join(j) => {
                let _kind: JoinType = j.join_type;
                return Err(SluiceError::not_supported_yet(
                    "joins with a streaming side are not supported yet (issue 4: stream-static \
                     and stream-stream joins)",
                ));
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
        visit(input, info)?;
    }
    Ok(())
}
