//! Watching a running server: the listeners the embedding program gives every session (the
//! `sluice connect --ui` dashboard, over every session's queries), and the server's own info
//! lines on sessions and queries coming and going, with their ids:
//!
//! - `session opened: session_id=.. user_id=.. client_type=..` (the first request of a session),
//! - `session released: session_id=.. user_id=.. queries_stopped=N` (`spark.stop()`),
//! - `session closed: session_id=.. user_id=.. reason="server shutdown"`,
//! - `query started: query_id=.. run_id=.. name=.. session_id=..`,
//! - `query stopped: ...` after a clean stop, `query failed: ... error_class=.. error=".."` (a
//!   warning) after an error.
//!
//! Each line ends with its `key=value` pairs in logfmt (a value with spaces, quotes or `=`
//! double-quoted), which `sluice --log-format json` turns into the line's `fields`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use sluice::progress::{QueryStartedEvent, QueryTerminatedEvent, StreamingQueryListener};

/// Listeners registered on every session's engine session when it is opened, so they see every
/// query any client starts (e.g. a dashboard).
#[derive(Clone, Default)]
pub struct Listeners(Vec<Arc<dyn StreamingQueryListener>>);

impl Listeners {
    /// Adds one.
    pub fn push(&mut self, listener: Arc<dyn StreamingQueryListener>) {
        self.0.push(listener);
    }
    /// Registers every one on `session`.
    pub(crate) fn register(&self, session: &sluice::Session) {
        for l in &self.0 {
            session.add_listener(l.clone());
        }
    }
}

impl std::fmt::Debug for Listeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listeners({})", self.0.len())
    }
}

/// `value` as a logfmt value: as it is, or double-quoted (`\"`, `\\`, `\n`, `\t`, `\r` escaped)
/// when it is empty or holds a space, a quote, a backslash, `=` or a control character.
pub fn logfmt(value: &str) -> String {
    let plain = !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\\' | '='));
    if plain {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Logs a session opened.
pub(crate) fn session_opened(session_id: &str, user_id: &str, client_type: Option<&str>) {
    log::info!(
        "session opened: session_id={} user_id={} client_type={}",
        logfmt(session_id),
        logfmt(user_id),
        logfmt(client_type.unwrap_or_default())
    );
}

/// Logs a session released by its client, and how many of its queries were still running.
pub(crate) fn session_released(session_id: &str, user_id: &str, queries_stopped: usize) {
    log::info!(
        "session released: session_id={} user_id={} queries_stopped={queries_stopped}",
        logfmt(session_id),
        logfmt(user_id),
    );
}

/// Logs a session closed because the server stops.
pub(crate) fn session_closed(session_id: &str, user_id: &str) {
    log::info!(
        "session closed: session_id={} user_id={} reason=\"server shutdown\"",
        logfmt(session_id),
        logfmt(user_id),
    );
}

/// The listener every session has: logs its queries started, stopped and failed.
pub(crate) struct QueryLog {
    session_id: String,
    /// Each running query's name, by run id (the terminated event has none).
    names: Mutex<HashMap<String, Option<String>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl QueryLog {
    pub(crate) fn new(session_id: &str) -> Self {
        Self {
            session_id: session_id.to_string(),
            names: Mutex::new(HashMap::new()),
        }
    }

    fn ids(&self, id: &str, run_id: &str, name: Option<&str>) -> String {
        format!(
            "query_id={} run_id={} name={} session_id={}",
            logfmt(id),
            logfmt(run_id),
            logfmt(name.unwrap_or_default()),
            logfmt(&self.session_id)
        )
    }
}

impl StreamingQueryListener for QueryLog {
    fn on_query_started(&self, e: &QueryStartedEvent) {
        lock(&self.names).insert(e.run_id.clone(), e.name.clone());
        log::info!(
            "query started: {}",
            self.ids(&e.id, &e.run_id, e.name.as_deref())
        );
    }

    fn on_query_terminated(&self, e: &QueryTerminatedEvent) {
        let name = lock(&self.names).remove(&e.run_id).flatten();
        let ids = self.ids(&e.id, &e.run_id, name.as_deref());
        match &e.exception {
            None => log::info!("query stopped: {ids}"),
            Some(error) => log::warn!(
                "query failed: {ids} error_class={} error={}",
                logfmt(e.error_class_on_exception.as_deref().unwrap_or_default()),
                logfmt(error)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_with_spaces_quotes_or_equals_are_quoted_and_escaped() {
        assert_eq!(logfmt("7f0c-11"), "7f0c-11");
        assert_eq!(logfmt(""), "\"\"");
        assert_eq!(
            logfmt("_SPARK_CONNECT_PYTHON spark/4.2.0"),
            "\"_SPARK_CONNECT_PYTHON spark/4.2.0\""
        );
        assert_eq!(
            logfmt("[X] \"a\" = b\\c\nd"),
            "\"[X] \\\"a\\\" = b\\\\c\\nd\""
        );
    }
}
