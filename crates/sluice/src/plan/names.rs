//! Spark's rules for matching a name to the columns, fields and relations in scope: the one
//! place that decides what `leftkey` means.
//!
//! - With `spark.sql.caseSensitive=false` (the default) a name matches every candidate equal to
//!   it ignoring ASCII case; more than one distinct candidate is `AMBIGUOUS_REFERENCE` (a schema
//!   with `a` and `A`).
//! - With `spark.sql.caseSensitive=true` only the exact spelling matches; a name that matches
//!   only ignoring case is `UNRESOLVED_COLUMN.WITH_SUGGESTION`, naming the candidates.
//! - The resolved name is the schema's spelling. Where Spark names an output column (an
//!   unaliased reference in a projection) it keeps the user's spelling; callers add that alias.
//!
//! Used by the SQL front end (`plan/sql_names.rs`, over the sqlparser AST) and by the DataFrame
//! API (`frame.rs`: column names of `select`, `with_watermark`, `drop_duplicates`, ..., and
//! DataFusion `Expr` column references).

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema};
use datafusion::prelude::Expr;

use crate::error::{class, Result, SluiceError};
use crate::session::Session;

/// `spark.sql.caseSensitive`.
pub(crate) const CASE_SENSITIVE: &str = "spark.sql.caseSensitive";

/// How names match (`spark.sql.caseSensitive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NameRules {
    pub case_sensitive: bool,
}

impl NameRules {
    /// The session's rules; a value other than `true`/`false` is `INVALID_CONF_VALUE`.
    pub(crate) fn of(session: &Session) -> Result<Self> {
        let case_sensitive = match session.conf(CASE_SENSITIVE) {
            None => false,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(SluiceError::query(
                        class::INVALID_CONF_VALUE,
                        format!("{CASE_SENSITIVE} must be true or false, got {v:?}"),
                    ))
                }
            },
        };
        Ok(Self { case_sensitive })
    }

    /// Whether `written` names `candidate`.
    pub(crate) fn matches(&self, written: &str, candidate: &str) -> bool {
        if self.case_sensitive {
            written == candidate
        } else {
            written.eq_ignore_ascii_case(candidate)
        }
    }

    /// The one candidate `written` names: `Ok(None)` when none does (the caller decides whether
    /// that is an error), `AMBIGUOUS_REFERENCE` when several distinct spellings do, and in
    /// case-sensitive mode `UNRESOLVED_COLUMN.WITH_SUGGESTION` when only a differently-cased
    /// one does. `what` names the kind of thing for messages (`column`, `field`).
    pub(crate) fn pick<'a>(
        &self,
        written: &str,
        candidates: impl IntoIterator<Item = &'a str> + Clone,
        what: &str,
    ) -> Result<Option<&'a str>> {
        let mut found: Vec<&str> = Vec::new();
        for c in candidates.clone() {
            if self.matches(written, c) {
                found.push(c);
            }
        }
        match found.len() {
            1 => Ok(Some(found[0])),
            0 => {
                if self.case_sensitive {
                    let near: Vec<&str> = candidates
                        .into_iter()
                        .filter(|c| c.eq_ignore_ascii_case(written))
                        .collect();
                    if !near.is_empty() {
                        return Err(unresolved(written, what, &near));
                    }
                }
                Ok(None)
            }
            _ => {
                let mut distinct = found.clone();
                distinct.sort_unstable();
                distinct.dedup();
                if distinct.len() == 1 {
                    return Ok(Some(found[0]));
                }
                Err(ambiguous(written, &found))
            }
        }
    }
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Spark's `AMBIGUOUS_REFERENCE`.
pub(crate) fn ambiguous(written: &str, found: &[&str]) -> SluiceError {
    SluiceError::query(
        class::AMBIGUOUS_REFERENCE,
        format!(
            "[AMBIGUOUS_REFERENCE] Reference `{written}` is ambiguous, could be: [{}]. Names \
             match ignoring case (spark.sql.caseSensitive=false): rename one of the columns, or \
             set spark.sql.caseSensitive=true and write the exact spelling.",
            quoted(found)
        ),
    )
}

/// Spark's `UNRESOLVED_COLUMN.WITH_SUGGESTION`.
pub(crate) fn unresolved(written: &str, what: &str, candidates: &[&str]) -> SluiceError {
    SluiceError::query(
        class::UNRESOLVED_COLUMN_WITH_SUGGESTION,
        format!(
            "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A {what} with name `{written}` cannot be \
             resolved. Did you mean one of the following? [{}]. Names match exactly \
             (spark.sql.caseSensitive=true): write the spelling of the schema.",
            quoted(candidates)
        ),
    )
}

/// Spark's `COLUMN_ALREADY_EXISTS`: two columns of a source schema whose names match under
/// `rules` (`userId` and `userid` while `spark.sql.caseSensitive=false`).
pub(crate) fn check_duplicate_columns(
    rules: NameRules,
    schema: &arrow::datatypes::Schema,
) -> Result<()> {
    let fields = schema.fields();
    for (i, f) in fields.iter().enumerate() {
        if fields[..i]
            .iter()
            .any(|p| rules.matches(f.name(), p.name()))
        {
            let n = f.name().to_ascii_lowercase();
            return Err(SluiceError::query(
                class::COLUMN_ALREADY_EXISTS,
                format!(
                    "[COLUMN_ALREADY_EXISTS] The column `{n}` already exists. Choose another \
                     name or rename the existing column (names match ignoring case unless \
                     spark.sql.caseSensitive=true)."
                ),
            ));
        }
    }
    Ok(())
}

/// The schema's spelling of the column `written` (a name, not a qualified path), or
/// `UNRESOLVED_COLUMN.WITH_SUGGESTION` listing the columns.
pub(crate) fn resolve_column_name(
    rules: NameRules,
    schema: &DFSchema,
    written: &str,
) -> Result<String> {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    if let Some(n) = rules.pick(written, names.iter().copied(), "column")? {
        return Ok(n.to_string());
    }
    Err(unresolved(written, "column", &names))
}

/// Rewrites the column references of `expr` that do not name a column of `schema` exactly to
/// the column they name under `rules` (`col("leftkey")` reads `leftKey`). References that name
/// nothing are left for DataFusion to report.
pub(crate) fn resolve_expr(rules: NameRules, schema: &DFSchema, expr: Expr) -> Result<Expr> {
    let mut error = None;
    let out = expr
        .transform_up(|e| {
            let Expr::Column(c) = &e else {
                return Ok(Transformed::no(e));
            };
            match resolve_column(rules, schema, c) {
                Ok(Some(r)) if &r != c => Ok(Transformed::yes(Expr::Column(r))),
                Ok(_) => Ok(Transformed::no(e)),
                Err(err) => {
                    error = Some(err);
                    Ok(Transformed::no(e))
                }
            }
        })?
        .data;
    match error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The column of `schema` that `c` names, if any.
fn resolve_column(rules: NameRules, schema: &DFSchema, c: &Column) -> Result<Option<Column>> {
    let fields: Vec<(Option<String>, &str)> = schema
        .iter()
        .map(|(q, f)| (q.map(|q| q.table().to_string()), f.name().as_str()))
        .collect();
    let candidates: Vec<&(Option<String>, &str)> = fields
        .iter()
        .filter(|(q, _)| match (&c.relation, q) {
            (None, _) => true,
            (Some(r), Some(q)) => rules.matches(r.table(), q),
            (Some(_), None) => false,
        })
        .collect();
    let Some(name) = rules.pick(&c.name, candidates.iter().map(|(_, n)| *n), "column")? else {
        return Ok(None);
    };
    let quals: Vec<&Option<String>> = candidates
        .iter()
        .filter(|(_, n)| *n == name)
        .map(|(q, _)| q)
        .collect();
    // The qualifier as the schema spells it when one relation has the column; otherwise keep
    // the reference's (DataFusion reports an ambiguous unqualified name itself).
    let relation = match (&c.relation, quals.as_slice()) {
        (Some(_), [Some(q)]) => schema
            .iter()
            .find_map(|(r, f)| (f.name() == name && r.is_some_and(|r| r.table() == q)).then_some(r))
            .flatten()
            .cloned(),
        _ => c.relation.clone(),
    };
    Ok(Some(Column::new(relation, name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::col;

    fn schema(names: &[&str]) -> DFSchema {
        let s = Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::Int64, true))
                .collect::<Vec<_>>(),
        );
        DFSchema::try_from_qualified_schema("t", &s).unwrap()
    }
    const INSENSITIVE: NameRules = NameRules {
        case_sensitive: false,
    };
    const SENSITIVE: NameRules = NameRules {
        case_sensitive: true,
    };

    #[test]
    fn names_match_ignoring_case_and_keep_the_schema_spelling() {
        let s = schema(&["leftKey", "Val"]);
        assert_eq!(
            resolve_column_name(INSENSITIVE, &s, "LEFTKEY").unwrap(),
            "leftKey"
        );
        let e = resolve_expr(INSENSITIVE, &s, col("leftkey").eq(col("t.VAL"))).unwrap();
        assert_eq!(e.to_string(), "leftKey = t.Val");
    }

    #[test]
    fn two_columns_differing_by_case_are_ambiguous_unless_case_sensitive() {
        let s = schema(&["a", "A"]);
        let e = resolve_column_name(INSENSITIVE, &s, "a").unwrap_err();
        assert!(e.is(class::AMBIGUOUS_REFERENCE), "{e}");
        assert_eq!(resolve_column_name(SENSITIVE, &s, "A").unwrap(), "A");
    }

    #[test]
    fn a_near_miss_in_case_sensitive_mode_names_the_candidates() {
        let s = schema(&["leftKey"]);
        let e = resolve_column_name(SENSITIVE, &s, "leftkey").unwrap_err();
        assert!(e.is(class::UNRESOLVED_COLUMN_WITH_SUGGESTION), "{e}");
        assert!(e.message().contains("[`leftKey`]"), "{e}");
        let e = resolve_expr(SENSITIVE, &s, col("LEFTKEY")).unwrap_err();
        assert!(e.is(class::UNRESOLVED_COLUMN_WITH_SUGGESTION), "{e}");
        // a name matching nothing is left for DataFusion's own error
        assert_eq!(
            resolve_expr(SENSITIVE, &s, col("other")).unwrap(),
            col("other")
        );
    }
}
