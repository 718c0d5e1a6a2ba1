//! Spark's names for DataFusion's built-ins whose semantics are Spark's.

use std::sync::Arc;

use datafusion::execution::{FunctionRegistry, SessionState};

use crate::error::Result;

/// `(Spark name, registered name)`: scalar functions that DataFusion (or `datafusion-spark`)
/// implements with Spark's semantics under another name.
const SCALAR_ALIASES: &[(&str, &str)] = &[
    ("lcase", "lower"),
    ("ucase", "upper"),
    ("sign", "signum"),
    ("startswith", "starts_with"),
    ("endswith", "ends_with"),
    ("curdate", "current_date"),
    ("localtimestamp", "now"),
    ("regexp", "regexp_like"),
    ("rlike", "regexp_like"),
    ("nvl", "coalesce"),
    ("ifnull", "coalesce"),
    ("to_timestamp_ntz", "to_timestamp"),
    ("to_timestamp_ltz", "to_timestamp"),
    ("cardinality", "size"),
];

/// `(Spark name, registered name)` for aggregate functions.
const AGGREGATE_ALIASES: &[(&str, &str)] = &[
    ("every", "bool_and"),
    ("some", "bool_or"),
    ("any", "bool_or"),
    ("std", "stddev"),
    ("variance", "var_samp"),
    // Spark's array_agg is collect_list (nulls skipped); DataFusion's keeps nulls.
    ("array_agg", "collect_list"),
    ("mean", "avg"),
];

/// Registers every alias whose target exists in the session.
pub(super) fn register(state: &mut SessionState) -> Result<()> {
    for (spark, target) in SCALAR_ALIASES {
        if let Some(f) = state.scalar_functions().get(*target).cloned() {
            let f = f.as_ref().clone().with_aliases([*spark]);
            state.register_udf(Arc::new(f))?;
        }
    }
    for (spark, target) in AGGREGATE_ALIASES {
        if let Some(f) = state.aggregate_functions().get(*target).cloned() {
            let f = f.as_ref().clone().with_aliases([*spark]);
            state.register_udaf(Arc::new(f))?;
        }
    }
    Ok(())
}
