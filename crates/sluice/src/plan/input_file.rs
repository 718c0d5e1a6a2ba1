//! `input_file_name()`, `input_file_block_start()` and `input_file_block_length()`.
//!
//! Spark gives the path of the file a row was read from (and the byte range of its split),
//! or `''`, `-1`, `-1` for a row not read from a file. Sluice's file source (and the batch
//! `session.read()`) reads the files of a batch into record batches without each row's path,
//! so [`InputFileRule`], an analyzer rule, decides per plan:
//! - no table at all, or only streams whose sources are not files (rate, Kafka, memory,
//!   nexmark): the calls become Spark's constants `''`, `-1`, `-1`;
//! - a file source, or a table Sluice cannot trace to its origin (a batch read of files, an
//!   in-memory table): not supported yet, with the reason.
//!
//! The functions themselves ([`udfs`]) only exist so the planner resolves the names; the rule
//! replaces every call before execution.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    lit, ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::plan::relation::{streaming_relations, StreamingRelation};

const NAMES: [&str; 3] = [
    "input_file_name",
    "input_file_block_start",
    "input_file_block_length",
];

/// Spark's value for a row not read from a file.
fn constant(name: &str) -> ScalarValue {
    if name == "input_file_name" {
        ScalarValue::Utf8(Some(String::new()))
    } else {
        ScalarValue::Int64(Some(-1))
    }
}

fn is_call(e: &Expr) -> Option<&'static str> {
    match e {
        Expr::ScalarFunction(f) => NAMES.into_iter().find(|n| *n == f.func.name()),
        _ => None,
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct InputFile {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for InputFile {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(constant(self.name).data_type())
    }
    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Err(DataFusionError::NotImplemented(format!(
            "{}() was not resolved by Sluice's analysis (its plan was executed without the \
             session's analyzer); run the query through the session.",
            self.name
        )))
    }
}

/// The three functions, taking no arguments.
pub(crate) fn udfs() -> Vec<ScalarUDF> {
    NAMES
        .into_iter()
        .map(|name| {
            ScalarUDF::new_from_impl(InputFile {
                name,
                signature: Signature::nullary(Volatility::Volatile),
            })
        })
        .collect()
}

/// Why rows of `plan` may come from files Sluice does not track, if they may.
fn file_rows(plan: &LogicalPlan) -> DfResult<Option<String>> {
    if let Some((_, p)) = streaming_relations(plan)
        .into_iter()
        .find(|(_, p)| p.kind() == "file")
    {
        return Ok(Some(format!(
            "the query reads the file source {} and Sluice does not keep the file each row \
             was read from",
            p.description()
        )));
    }
    let mut other = None;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            if StreamingRelation::of_scan(scan).is_none() {
                other = Some(scan.table_name.to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(other.map(|t| {
        format!(
            "the query reads the table `{t}`, whose rows may come from files (a batch read) \
             and Sluice does not keep the file each row was read from"
        )
    }))
}

/// Replaces `input_file_*()` by Spark's constants where no row comes from a file; refuses the
/// plan where rows may.
#[derive(Debug, Default)]
pub(crate) struct InputFileRule;

impl AnalyzerRule for InputFileRule {
    fn name(&self) -> &str {
        "sluice_input_file"
    }
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> DfResult<LogicalPlan> {
        let mut called = None;
        plan.apply_with_subqueries(|node| {
            node.apply_expressions(|e| {
                e.apply(|e| {
                    if let Some(n) = is_call(e) {
                        called = Some(n);
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })
        })?;
        let Some(name) = called else {
            return Ok(plan);
        };
        if let Some(why) = file_rows(&plan)? {
            return Err(DataFusionError::External(Box::new(
                crate::error::SluiceError::not_supported_yet(format!(
                    "{name}() is not supported yet here: {why}. It is supported (as Spark's '' / \
                     -1 for rows not read from a file) over no table or over streams whose \
                     sources are not files (rate, Kafka, memory)."
                )),
            )));
        }
        plan.transform_up_with_subqueries(|node| {
            let names = datafusion::logical_expr::expr_rewriter::NamePreserver::new(&node);
            node.map_expressions(|e| {
                let saved = names.save(&e);
                e.transform_up(|e| match is_call(&e) {
                    Some(n) => Ok(Transformed::yes(lit(constant(n)))),
                    None => Ok(Transformed::no(e)),
                })
                .map(|t| t.update_data(|e| saved.restore(e)))
            })
        })
        .map(|t| t.data)
    }
}

/// The rule, for the session's analyzer.
pub(crate) fn rule() -> Arc<dyn AnalyzerRule + Send + Sync> {
    Arc::new(InputFileRule)
}

#[cfg(test)]
#[path = "input_file_tests.rs"]
mod tests;
