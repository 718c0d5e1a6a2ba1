//! What the streaming analysis (`plan::analysis`) asks of an aggregation before any operator is
//! built: whether its state is bounded by the watermark and whether it groups by a session.

use datafusion::logical_expr::Aggregate;

use super::stateful::event_time::is_event_time_expr;
use super::window::WindowSpec;

/// True when the aggregation groups by a watermarked column or a window over one (Spark's
/// condition for append mode, late-row dropping and eviction).
pub(crate) fn has_event_time_key(agg: &Aggregate) -> bool {
    let schema = agg.input.schema();
    agg.group_expr.iter().any(|g| match WindowSpec::of(g) {
        Ok(Some(WindowSpec::Time { time, .. })) | Ok(Some(WindowSpec::Session { time, .. })) => {
            is_event_time_expr(&time, schema)
        }
        _ => is_event_time_expr(g, schema),
    })
}

/// True when the aggregation groups by `session_window(..)`.
pub(crate) fn has_session_window(agg: &Aggregate) -> bool {
    agg.group_expr
        .iter()
        .any(|g| matches!(WindowSpec::of(g), Ok(Some(WindowSpec::Session { .. }))))
}

/// The first grouping `window(..)` / `session_window(..)` the engine cannot run (a duration that
/// is not a literal, a per-row session gap), as its error; checked before the output-mode rules
/// so the user sees the real cause.
pub(crate) fn check_windows(agg: &Aggregate) -> crate::error::Result<()> {
    for g in &agg.group_expr {
        WindowSpec::of(g)?;
    }
    Ok(())
}
