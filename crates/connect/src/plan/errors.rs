//! The engine's planning errors as a PySpark user reads them: an unknown column is Spark's
//! `UNRESOLVED_COLUMN.WITH_SUGGESTION` `AnalysisException`, and no message names the views the
//! planner registers for itself (`__sluice_view_3.id` reads `id`).

use crate::error::{java, ConnectError};

/// The error without the server's own view names, unknown columns in Spark's words.
pub(crate) fn in_spark_words(mut e: ConnectError) -> ConnectError {
    e.message = scrub(&e.message);
    if let Some((name, valid)) = unknown_column(&e.message) {
        e.java_class = java::ANALYSIS;
        e.error_class = sluice::error::class::UNRESOLVED_COLUMN_WITH_SUGGESTION.to_string();
        e.message = format!(
            "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with \
             name `{name}` cannot be resolved. Did you mean one of the following? [{}].",
            valid
                .iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    e
}

/// `text` without `__sluice_<what>_<n>.` qualifiers (bare or backquoted).
pub(crate) fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("__sluice_") {
        let (before, after) = rest.split_at(i);
        let quoted = before.ends_with('`');
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let tail = &after[end..];
        let tail = if quoted {
            tail.strip_prefix('`').unwrap_or(tail)
        } else {
            tail
        };
        match tail.strip_prefix('.') {
            Some(t) => {
                out.push_str(if quoted {
                    &before[..before.len() - 1]
                } else {
                    before
                });
                rest = t;
            }
            None => {
                out.push_str(before);
                out.push_str(&after[..end]);
                rest = &after[end..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// DataFusion's `No field named x. .. Valid fields are a, b.`: the name and the valid names.
fn unknown_column(message: &str) -> Option<(String, Vec<String>)> {
    let start = message.find("No field named ")? + "No field named ".len();
    let rest = &message[start..];
    let end = rest
        .find(". ")
        .or_else(|| rest.rfind('.'))
        .unwrap_or(rest.len());
    let name = rest[..end]
        .trim_matches(|c| c == '"' || c == '`')
        .to_string();
    let valid = message
        .find("Valid fields are ")
        .map(|i| {
            let list = &message[i + "Valid fields are ".len()..];
            let list = list.trim_end().trim_end_matches('.');
            list.split(", ")
                .map(|v| {
                    let v = v.trim_matches(|c| c == '"' || c == '`');
                    v.rsplit('.')
                        .next()
                        .unwrap_or(v)
                        .trim_matches('"')
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default();
    Some((name, valid))
}

#[cfg(test)]
mod tests {
    use super::scrub;

    #[test]
    fn the_servers_view_names_are_scrubbed() {
        assert_eq!(
            scrub("__sluice_view_1.id and `__sluice_view_2`.x"),
            "id and x"
        );
        assert_eq!(
            scrub("view __sluice_view_1 alone"),
            "view __sluice_view_1 alone"
        );
    }
}
