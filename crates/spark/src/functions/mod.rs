//! Spark's built-in function library on DataFusion.
//!
//! Spark 3.5's built-ins are recorded by `scripts/spark-functions` into
//! `crates/spark/spark-functions/` (`functions.json`: every built-in with its kind;
//! `cases.json`: probe queries with the values and types Spark returned). The table
//! `FUNCTIONS.md` at the repository root is computed from them by the test in `table_tests.rs`
//! (`SLUICE_BLESS=1` rewrites it; otherwise the test fails when the table disagrees with what the
//! code does).
//!
//! Where functions come from, in order of preference:
//! 1. `datafusion-spark` (registered by the session with `with_spark_features`);
//! 2. DataFusion's built-ins where their semantics are Spark's, registered under Spark's name
//!    (`aliases`);
//! 3. Sluice's own implementations (the other files here), with Spark's argument rules, null
//!    handling and result types.
//!
//! [`register`] installs 2 and 3 into a session. [`unresolved_routine`] turns DataFusion's
//! "Invalid function" into Spark's `UNRESOLVED_ROUTINE`, and says "not supported yet" for a
//! Spark built-in Sluice lacks.

mod aes;
mod aggregates;
mod aliases;
mod binary;
mod bitmap;
mod catalog;
mod charsets;
mod coerce;
mod collections;
mod csv;
mod datetime;
mod errors;
mod hash;
mod histogram;
mod hll;
mod intervals;
mod json;
pub mod lambda;
mod md5;
mod numfmt;
mod percentile;
mod rounding;
mod rowwise;
mod statistics;
mod strings;
mod syntax;
#[cfg(test)]
mod table_tests;
#[cfg(test)]
mod testing;
mod type_of;
mod unix_time;
mod xpath;

pub use syntax::{SparkTypePlanner, SyntaxPlanner};

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::execution::SessionState;
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF};

use crate::error::{class, Fault, Result, SluiceError};

/// Registers Sluice's functions (after `datafusion-spark`'s, so these win), with `extra`
/// (the engine's functions that know its plans, such as `input_file_name`) among them, before
/// the aliases and the higher-order functions that see them all.
pub fn register(
    state: &mut SessionState,
    extra: impl IntoIterator<Item = ScalarUDF>,
) -> Result<()> {
    use datafusion::execution::FunctionRegistry;
    let scalars = state.scalar_functions().clone();
    let mut wrapped = coerce::string_arg_wrappers(|name| scalars.get(name).cloned());
    wrapped.extend(coerce::pattern_wrappers(|name| scalars.get(name).cloned()));
    // The order matters where names repeat: a later registration replaces an earlier one.
    for udf in datetime::udfs()
        .into_iter()
        .chain(strings::udfs())
        .chain(coerce::udfs())
        .chain(csv::udfs())
        .chain([md5::udf()])
        .chain(hash::udfs())
        .chain(rounding::udfs(|name| scalars.get(name).cloned()))
        .chain(collections::udfs(|name| scalars.get(name).cloned()))
        .chain([strings::levenshtein_udf(), strings::mask_udf()])
        .chain(charsets::udfs())
        .chain(json::udfs())
        .chain([strings::sentences_udf()])
        .chain(datetime::make_timestamp_udfs())
        .chain([errors::assert_true_udf()])
        .chain(binary::string_variants(|name| scalars.get(name).cloned()))
        .chain(binary::udfs(|name| scalars.get(name).cloned()))
        .chain(bitmap::udfs().into_iter().chain(hll::udfs()))
        .chain([strings::regexp_replace_udf(), type_of::udf()])
        .chain(intervals::udfs(|name| scalars.get(name).cloned()))
        .chain(extra)
        .chain(wrapped)
        .chain(aes::udfs())
        .chain(xpath::udfs())
    {
        state.register_udf(Arc::new(udf))?;
    }
    // Rewrites into the functions registered above.
    let now = state.scalar_functions().clone();
    let mut null_on_error = Vec::new();
    for (name, target, always) in [
        ("to_timestamp", "to_timestamp", false),
        ("to_date", "to_date", false),
        ("try_to_timestamp", "to_timestamp", true),
    ] {
        if let Some(inner) = now.get(target).cloned() {
            null_on_error.push(rowwise::NullOnError::udf(name, inner, always));
        }
    }
    for udf in null_on_error {
        state.register_udf(Arc::new(udf))?;
    }
    let now = state.scalar_functions().clone();
    for udf in unix_time::udfs(|name| now.get(name).cloned())
        .into_iter()
        .chain(numfmt::udfs(|name| now.get(name).cloned()))
        .chain(datetime::date_trunc_udf(|name| now.get(name).cloned()))
    {
        state.register_udf(Arc::new(udf))?;
    }
    let existing = state.aggregate_functions().clone();
    for udaf in aggregates::udafs(|name| existing.get(name).cloned()) {
        state.register_udaf(Arc::new(udaf))?;
    }
    let existing = state.aggregate_functions().clone();
    for udaf in aggregates::numeric_from_strings(|name| existing.get(name).cloned()) {
        state.register_udaf(Arc::new(udaf))?;
    }
    let existing = state.aggregate_functions().clone();
    for udaf in [statistics::mode()]
        .into_iter()
        .chain(aggregates::max_min_by())
        .chain([statistics::regr_intercept()])
        .chain(statistics::try_avg(|name| existing.get(name).cloned()))
        .chain(percentile::udafs())
        .chain(bitmap::udafs())
        .chain(hll::udafs())
        .chain(histogram::udafs())
    {
        state.register_udaf(Arc::new(udaf))?;
    }
    // Aliases last, so they name the wrapped functions.
    aliases::register(state)?;
    // Higher-order functions last: their lambda bodies plan with everything above.
    lambda::register(state)?;
    Ok(())
}

/// Spark's `UNRESOLVED_ROUTINE` for a function the session does not have; other errors pass.
pub fn unresolved_routine(e: SluiceError) -> SluiceError {
    let msg = e.message();
    let Some(rest) = msg.split("Invalid function '").nth(1) else {
        return e;
    };
    let Some(name) = rest.split('\'').next() else {
        return e;
    };
    let name = name.to_ascii_lowercase();
    const SEARCH_PATH: &str = "on search path [`system`.`builtin`, `system`.`session`]";
    if let Some(f) = catalog::spark_function(&name) {
        let stream = match &f.why_not_in_stream {
            Some(why) if !f.stream => format!(" (in a stream it has no meaning: {why})"),
            _ => String::new(),
        };
        SluiceError::new(
            Fault::NotSupportedYet,
            class::UNRESOLVED_ROUTINE,
            format!(
                "Cannot resolve function `{name}` {SEARCH_PATH}: `{name}` is a Spark built-in \
                 {} function that Sluice does not support yet{stream}. FUNCTIONS.md lists every \
                 Spark function with Sluice's status; rewrite the query with a supported one.",
                f.kind
            ),
        )
    } else {
        SluiceError::new(
            Fault::Query,
            class::UNRESOLVED_ROUTINE,
            format!(
                "Cannot resolve function `{name}` {SEARCH_PATH}: it is neither a Spark built-in \
                 nor a registered function. Check the spelling (FUNCTIONS.md lists Spark's \
                 functions), or register a UDF on the session's context."
            ),
        )
    }
}

/// The argument types a wrapped function `inner` coerces `arg_types` to (DataFusion's rules), for
/// wrappers that change a function's behaviour but not its signature.
pub(super) fn coerced_by(
    inner: &ScalarUDF,
    arg_types: impl IntoIterator<Item = DataType>,
) -> DfResult<Vec<DataType>> {
    let fields: Vec<FieldRef> = arg_types
        .into_iter()
        .enumerate()
        .map(|(i, t)| Arc::new(Field::new(format!("arg{i}"), t, true)))
        .collect();
    Ok(fields_with_udf(&fields, inner)?
        .iter()
        .map(|f| f.data_type().clone())
        .collect())
}

/// A function's result `out` as the value its call returns: a scalar when every argument was.
pub(super) fn columnar(out: ArrayRef, scalar: bool) -> DfResult<ColumnarValue> {
    Ok(if scalar {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
    } else {
        ColumnarValue::Array(out)
    })
}

#[cfg(test)]
mod tests {
    use crate::error::class;

    #[test]
    fn an_unknown_function_is_unresolved_routine_naming_it() {
        let s = sluice::Session::builder().build().unwrap();
        let e = s.sql("SELECT no_such_fn(1)").unwrap_err();
        assert!(e.is(class::UNRESOLVED_ROUTINE), "{e}");
        assert!(
            e.message().contains("Cannot resolve function `no_such_fn`"),
            "{e}"
        );
        assert!(!e.message().contains("not support yet"), "{e}");
        // A Spark built-in Sluice lacks says so and points at the table.
        let e = s.sql("SELECT monotonically_increasing_id()").unwrap_err();
        assert!(e.is(class::UNRESOLVED_ROUTINE), "{e}");
        assert!(
            e.message()
                .contains("Cannot resolve function `monotonically_increasing_id`"),
            "{e}"
        );
        assert!(e.message().contains("does not support yet"), "{e}");
        assert!(e.message().contains("FUNCTIONS.md"), "{e}");
    }
}
