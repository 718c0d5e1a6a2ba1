//! The recorded key/value schema of a stateful operator's state
//! (`state/<op>/_metadata/schema`, Spark's `StateSchemaCompatibilityChecker`) and its restart
//! check.
//!
//! The first run of an operator records the schema it declares; every later run compares its
//! declared schema with the recorded one before it opens a store, so a query whose state does not
//! fit the checkpoint fails clearly instead of decoding another layout. Only the operator and the
//! Spark type names are compared; the Arrow types and the join's `leftFields` are recorded for
//! inspection (`crate::inspect`) and never compared.

use std::sync::Arc;

use arrow::datatypes::Field;
use serde::{Deserialize, Serialize};

use crate::checkpoint::CheckpointDir;
use crate::error::{class, Result, SluiceError};
use crate::types::OperatorId;

/// The recorded key/value schema of an operator's state (`state/<op>/_metadata/schema`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StateSchema {
    /// The operator, as `<id> (<kind>)`, e.g. `0 (stateStoreSave)`: a different operator cannot
    /// reuse the state.
    pub operator: String,
    /// The fields of a state key.
    pub key_schema: Vec<StateField>,
    /// The fields of a state value.
    pub value_schema: Vec<StateField>,
    /// Stream-stream joins: how many of the value fields are the left side's (the value
    /// schema is the left fields followed by the right fields), so that `crate::inspect`
    /// can decode each side's rows. Absent for other operators and in join schema files
    /// written before it was recorded; never compared on restart.
    #[serde(
        rename = "leftFields",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub left_fields: Option<usize>,
    /// Aggregations: the `window` / `session_window` of each windowed grouping key, e.g.
    /// `window(size 10 minutes, slide 10 minutes, start 0 seconds)`. Spark records nothing of
    /// them and silently reuses the state of 10-minute windows for 5-minute ones; compared on
    /// restart when both the file and the query have them (absent in older files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<String>,
}

impl StateSchema {
    /// The schema of operator `operator_id`'s state; `kind` is how Spark names the operator in
    /// the schema file (`stateStoreSave`, `dedupe`, `symmetricHashJoin Inner`, ...).
    pub(crate) fn new(
        operator_id: OperatorId,
        kind: &str,
        key_schema: Vec<StateField>,
        value_schema: Vec<StateField>,
    ) -> Self {
        Self {
            operator: format!("{operator_id} ({kind})"),
            key_schema,
            value_schema,
            left_fields: None,
            windows: Vec::new(),
        }
    }
}

/// One field of a state key or value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateField {
    /// The column name (a renamed key column is refused on restart unless allowed).
    pub name: String,
    /// The Spark SQL type name: what the restart check compares.
    #[serde(rename = "type")]
    pub data_type: String,
    /// Whether the field may be null.
    pub nullable: bool,
    /// The exact Arrow type (`DataType`'s `Display` form, read back with its `FromStr`), so
    /// that state can be decoded without the query (`crate::inspect`). Absent in schema
    /// files written before it was recorded, and for values that are not Arrow data; never
    /// compared on restart.
    #[serde(rename = "arrowType", default, skip_serializing_if = "Option::is_none")]
    pub arrow_type: Option<String>,
}

/// The state fields of Arrow fields: name, Spark type name, nullability and exact Arrow type.
pub(crate) fn state_fields(fields: &[Arc<Field>]) -> Vec<StateField> {
    fields
        .iter()
        .map(|f| StateField {
            name: f.name().clone(),
            data_type: crate::schema::spark_type_name(f.data_type()),
            nullable: f.is_nullable(),
            arrow_type: Some(f.data_type().to_string()),
        })
        .collect()
}

fn describe(fields: &[StateField]) -> String {
    fields
        .iter()
        .map(|f| format!("{} {}", f.name, f.data_type))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `e` says that the checkpoint's state does not fit the query (the classes
/// [`check_state_schema`] fails with). As in Spark, such a query fails in its first batch, not
/// at start.
pub(crate) fn is_state_schema_error(e: &SluiceError) -> bool {
    e.is(class::STATE_SCHEMA_INCOMPATIBLE) || e.is(class::STATE_SCHEMA_KEY_RENAMED)
}

/// Checks (or records, on the first run) the state schema of operator `operator_id` in
/// `checkpoint`. `allow_rename` accepts renamed key columns of the same types
/// ([`crate::conf::ALLOW_KEY_RENAME`]).
pub(crate) fn check_state_schema(
    checkpoint: &CheckpointDir,
    operator_id: OperatorId,
    schema: &StateSchema,
    allow_rename: bool,
) -> Result<()> {
    let dir = checkpoint.state_operator_dir(operator_id);
    let file = checkpoint.state_schema_file(operator_id);
    match crate::storage::read(&file) {
        Ok(bytes) => {
            let old: StateSchema = serde_json::from_slice(&bytes).map_err(|e| {
                SluiceError::checkpoint(
                    class::CHECKPOINT_CORRUPT_LOG,
                    format!("{} is not a state schema ({e}); restore it or start with a new checkpoint location", file.display()),
                )
            })?;
            // Only the operator and the Spark type names are compared: `arrowType` and
            // `leftFields` (recorded for inspection, absent in older files) never are, and the
            // file is not rewritten, so an old file keeps its contents.
            let types =
                |v: &[StateField]| v.iter().map(|f| f.data_type.clone()).collect::<Vec<_>>();
            if old.operator != schema.operator {
                return Err(SluiceError::checkpoint(
                    class::STATE_SCHEMA_INCOMPATIBLE,
                    format!(
                        "The stateful operator whose state is in {} was {} and is now {}: a different \
                         operator (or join type) cannot reuse this state. Start with a new \
                         checkpointLocation, or restore the previous query.",
                        dir.display(),
                        old.operator,
                        schema.operator
                    ),
                ));
            }
            if types(&old.key_schema) != types(&schema.key_schema)
                || types(&old.value_schema) != types(&schema.value_schema)
            {
                return Err(SluiceError::checkpoint(
                    class::STATE_SCHEMA_INCOMPATIBLE,
                    format!(
                        "Provided schema doesn't match to the schema for existing state of operator {} in {}: \
                         the checkpoint holds keys ({}) with values ({}), this query has keys ({}) with values ({}). \
                         Grouping keys and aggregate functions cannot change on restart: start with a new \
                         checkpointLocation, or restore the previous query.",
                        old.operator,
                        dir.display(),
                        describe(&old.key_schema),
                        describe(&old.value_schema),
                        describe(&schema.key_schema),
                        describe(&schema.value_schema)
                    ),
                ));
            }
            if !old.windows.is_empty()
                && !schema.windows.is_empty()
                && old.windows != schema.windows
            {
                return Err(SluiceError::checkpoint(
                    class::STATE_SCHEMA_INCOMPATIBLE,
                    format!(
                        "The windows of operator {} in {} were {} and are now {}: the state holds \
                         aggregates of the old windows, which the new ones would silently merge \
                         into (Spark accepts this and gives wrong results). Start with a new \
                         checkpointLocation, or restore the previous windows.",
                        old.operator,
                        dir.display(),
                        old.windows.join(", "),
                        schema.windows.join(", ")
                    ),
                ));
            }
            let renamed: Vec<String> = old
                .key_schema
                .iter()
                .zip(&schema.key_schema)
                .filter(|(a, b)| a.name != b.name)
                .map(|(a, b)| format!("{} -> {}", a.name, b.name))
                .collect();
            if !renamed.is_empty() && !allow_rename {
                return Err(SluiceError::checkpoint(
                    class::STATE_SCHEMA_KEY_RENAMED,
                    format!(
                        "The grouping key of operator {} changed from ({}) to ({}) ({}). The types match, so \
                         Spark would silently reuse the old state under the new key and give wrong results. \
                         Start with a new checkpointLocation; or, if the column was only renamed and means \
                         the same thing, set {}=true.",
                        old.operator,
                        describe(&old.key_schema),
                        describe(&schema.key_schema),
                        renamed.join(", "),
                        crate::conf::ALLOW_KEY_RENAME,
                    ),
                ));
            }
            if !renamed.is_empty() {
                log::warn!(
                    "state of operator {}: accepting renamed keys {}",
                    old.operator,
                    renamed.join(", ")
                );
            }
            Ok(())
        }
        Err(_) => {
            let bytes = serde_json::to_vec_pretty(schema)
                .map_err(|e| SluiceError::internal(e.to_string()))?;
            crate::checkpoint::write_atomic_new(&file, &bytes)?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, TimeUnit};

    fn join_schema(left_fields: Option<usize>, arrow_types: bool) -> StateSchema {
        let f = |n: &str| {
            Arc::new(Field::new(
                n,
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ))
        };
        let strip = |mut v: Vec<StateField>| {
            if !arrow_types {
                v.iter_mut().for_each(|f| f.arrow_type = None);
            }
            v
        };
        StateSchema {
            operator: "0 (symmetricHashJoin Inner)".into(),
            key_schema: strip(state_fields(&[f("k")])),
            value_schema: strip(state_fields(&[f("k"), f("a"), f("k"), f("b")])),
            left_fields,
            windows: Vec::new(),
        }
    }

    #[test]
    fn left_fields_and_arrow_types_take_no_part_in_the_restart_check() {
        let op = OperatorId(0);
        for (old, new) in [
            (join_schema(None, false), join_schema(Some(2), true)),
            (join_schema(Some(2), true), join_schema(None, false)),
            (join_schema(Some(1), true), join_schema(Some(3), true)),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let checkpoint = CheckpointDir::new(tmp.path());
            check_state_schema(&checkpoint, op, &old, false).unwrap();
            let file = checkpoint.state_schema_file(op);
            let written = std::fs::read(&file).unwrap();
            let text = String::from_utf8(written.clone()).unwrap();
            assert_eq!(text.contains("leftFields"), old.left_fields.is_some());
            check_state_schema(&checkpoint, op, &new, false).unwrap();
            assert_eq!(std::fs::read(&file).unwrap(), written, "not rewritten");
            let back: StateSchema = serde_json::from_slice(&written).unwrap();
            assert_eq!(back, old);
        }
        // The types still are.
        let tmp = tempfile::tempdir().unwrap();
        let checkpoint = CheckpointDir::new(tmp.path());
        check_state_schema(&checkpoint, op, &join_schema(Some(2), true), false).unwrap();
        let mut other = join_schema(Some(2), true);
        other.value_schema[1].data_type = "INT".into();
        assert_eq!(
            check_state_schema(&checkpoint, op, &other, false)
                .unwrap_err()
                .class(),
            class::STATE_SCHEMA_INCOMPATIBLE
        );
    }
}
