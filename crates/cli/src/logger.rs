//! The binary's logger: the engine's `log` lines (and librdkafka's, through
//! `sluice::kafka::log`) on stderr, filtered by `RUST_LOG` in env_logger's syntax
//! (`RUST_LOG=info`, `RUST_LOG=warn,sluice::state=debug`, `RUST_LOG=off`); without it, the
//! subcommand's default: warnings and errors ([`DEFAULT_FILTER`]), and for `sluice connect` the
//! server's own info lines too ([`CONNECT_FILTER`]: sessions opened and released, queries
//! started, stopped and failed). Each line is printed through the status console
//! (`status::print_line`), so on a terminal it lands above the live status lines instead of
//! through them. Secrets are never printed (`sluice::redact`), whatever a library logs.
//!
//! Every line starts with the time in UTC, RFC 3339 with milliseconds. Two formats
//! (`--log-format text|json`, else `SLUICE_LOG_FORMAT`, else text):
//! - text: `2026-12-07T18:30:01.123Z warning: TEXT` and `... error: TEXT` (as the status
//!   board's own warnings), and `... info TARGET: TEXT` / `debug TARGET: TEXT` /
//!   `trace TARGET: TEXT` below that;
//! - json: one object per line, `{"ts":"2026-12-07T18:30:01.123Z","level":"info",
//!   "target":"sluice_connect::observe","message":"query started: query_id=... name=counts",
//!   "fields":{"query_id":"...","name":"counts"}}`. `fields` holds the `key=value` pairs a
//!   message ends with (logfmt: a value with spaces, quotes or `=` is double-quoted, `\"`, `\\`,
//!   `\n`, `\t`, `\r` escaped), as the Connect server writes its session and query lines; it is
//!   left out when there are none.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use log::{Level, Log, Metadata, Record};

/// The filter when `RUST_LOG` is not set.
pub const DEFAULT_FILTER: &str = "warn";

/// `sluice connect`'s filter when `RUST_LOG` is not set: warnings, and the server's info lines
/// (sessions and queries coming and going).
pub const CONNECT_FILTER: &str = "warn,sluice_connect=info";

/// The environment variable naming the format when `--log-format` is not given.
pub const FORMAT_ENV: &str = "SLUICE_LOG_FORMAT";

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// `TIME LEVEL TARGET: MESSAGE`, as the status board prints
    #[default]
    Text,
    /// One JSON object per line: ts, level, target, message, fields
    Json,
}

impl LogFormat {
    /// The flag, else `SLUICE_LOG_FORMAT` (`text` or `json`, any case), else text.
    pub fn resolve(flag: Option<LogFormat>) -> Result<LogFormat, String> {
        Self::resolve_with(flag, std::env::var(FORMAT_ENV).ok())
    }

    /// [`LogFormat::resolve`] with `env` as the value of `SLUICE_LOG_FORMAT`.
    fn resolve_with(flag: Option<LogFormat>, env: Option<String>) -> Result<LogFormat, String> {
        if let Some(f) = flag {
            return Ok(f);
        }
        match env {
            None => Ok(LogFormat::Text),
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "" | "text" => Ok(LogFormat::Text),
                "json" => Ok(LogFormat::Json),
                _ => Err(format!("{FORMAT_ENV}={v}: write text or json")),
            },
        }
    }
}

struct Logger {
    filter: env_logger::Logger,
    format: LogFormat,
}

/// `now` as the lines print it: `2026-12-07T18:30:01.123Z`.
fn timestamp(now: DateTime<Utc>) -> String {
    now.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// One record as printed at `now`, secrets redacted.
fn line(record: &Record<'_>, now: DateTime<Utc>, format: LogFormat) -> String {
    let ts = timestamp(now);
    let message = record.args().to_string();
    match format {
        LogFormat::Text => {
            let text = match record.level() {
                Level::Error => format!("{ts} error: {message}"),
                Level::Warn => format!("{ts} warning: {message}"),
                level => format!(
                    "{ts} {} {}: {message}",
                    level.as_str().to_ascii_lowercase(),
                    record.target(),
                ),
            };
            sluice::redact::redacted(text)
        }
        LogFormat::Json => {
            let message = sluice::redact::redacted(message);
            let mut out = String::with_capacity(message.len() + 96);
            let _ = write!(
                out,
                "{{\"ts\":\"{ts}\",\"level\":\"{}\",\"target\":{},\"message\":{}",
                record.level().as_str().to_ascii_lowercase(),
                json_string(record.target()),
                json_string(&message),
            );
            let fields = trailing_fields(&message);
            if !fields.is_empty() {
                out.push_str(",\"fields\":{");
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    // A field named like a secret (password=...) is hidden by its name too.
                    let v = sluice::redact::redact_value(k, v);
                    let _ = write!(out, "{}:{}", json_string(k), json_string(&v));
                }
                out.push('}');
            }
            out.push('}');
            out
        }
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// The `key=value` pairs `message` ends with (logfmt; see the module documentation), in order.
/// A pair followed by other words is text, not a field.
fn trailing_fields(message: &str) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    let mut rest = message;
    loop {
        rest = rest.trim_start_matches(' ');
        if rest.is_empty() {
            return fields;
        }
        match pair(rest) {
            Some((k, v, after)) if after.is_empty() || after.starts_with(' ') => {
                fields.push((k, v));
                rest = after;
            }
            _ => {
                // Not a pair: what came before is text, and so is this word.
                fields.clear();
                rest = skip_word(rest);
            }
        }
    }
}

/// The rest of `s` after its first word: up to a space, a quoted part kept whole.
fn skip_word(s: &str) -> &str {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ' ' if !quoted => return &s[i..],
            _ => {}
        }
    }
    ""
}

/// `key=value` at the start of `s`: the key, the value (unquoted) and what follows.
fn pair(s: &str) -> Option<(String, String, &str)> {
    let eq = s.find('=')?;
    let key = &s[..eq];
    let mut chars = key.chars();
    let first = chars.next()?;
    if !(first.is_ascii_alphabetic() || first == '_')
        || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
    {
        return None;
    }
    let value = &s[eq + 1..];
    if let Some(quoted) = value.strip_prefix('"') {
        let mut out = String::new();
        let mut escaped = false;
        for (i, c) in quoted.char_indices() {
            if escaped {
                out.push(match c {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    c => c,
                });
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                return Some((key.to_string(), out, &quoted[i + 1..]));
            } else {
                out.push(c);
            }
        }
        None
    } else {
        let end = value.find(' ').unwrap_or(value.len());
        let v = &value[..end];
        if v.contains('"') {
            return None;
        }
        Some((key.to_string(), v.to_string(), &value[end..]))
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if self.filter.matches(record) {
            crate::status::print_line(&line(record, Utc::now(), self.format));
        }
    }

    fn flush(&self) {}
}

/// Installs the logger (once, at the start of `main`): `RUST_LOG`, else `default_filter`.
pub fn install(default_filter: &str, format: LogFormat) {
    let filter =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_filter))
            .build();
    let max = filter.filter();
    if log::set_boxed_logger(Box::new(Logger { filter, format })).is_ok() {
        log::set_max_level(max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> DateTime<Utc> {
        // 2026-12-07T18:30:01.123Z
        DateTime::from_timestamp_millis(1_796_668_201_123).unwrap()
    }

    #[test]
    fn warnings_and_errors_read_as_the_status_board_s_and_the_rest_names_its_module() {
        let args = format_args!("disk almost full");
        let record = Record::builder()
            .level(Level::Warn)
            .target("sluice::state")
            .args(args)
            .build();
        assert_eq!(
            line(&record, at(), LogFormat::Text),
            "2026-12-07T18:30:01.123Z warning: disk almost full"
        );
        let args = format_args!("wrote snapshot 4");
        let record = Record::builder()
            .level(Level::Debug)
            .target("sluice::state::provider")
            .args(args)
            .build();
        assert_eq!(
            line(&record, at(), LogFormat::Text),
            "2026-12-07T18:30:01.123Z debug sluice::state::provider: wrote snapshot 4"
        );
    }

    #[test]
    fn every_line_starts_with_the_time_in_utc_with_milliseconds() {
        let args = format_args!("session opened");
        let record = Record::builder()
            .level(Level::Info)
            .target("sluice_connect::server")
            .args(args)
            .build();
        let before = Utc::now();
        let text = line(&record, Utc::now(), LogFormat::Text);
        let (ts, rest) = text.split_once(' ').unwrap();
        assert_eq!(rest, "info sluice_connect::server: session opened");
        // RFC 3339, UTC (`Z`, not an offset), three digits of milliseconds.
        assert_eq!(ts.len(), "2026-12-07T18:30:01.123Z".len(), "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[19] == b'.', "{ts}");
        let parsed = DateTime::parse_from_rfc3339(ts).unwrap();
        assert_eq!(parsed.offset().local_minus_utc(), 0);
        let parsed = parsed.with_timezone(&Utc);
        // Now, not the local time of some other zone (to the millisecond it was cut to).
        assert!(parsed >= before - chrono::Duration::milliseconds(1), "{ts}");
        assert!(parsed <= Utc::now(), "{ts}");
    }

    #[test]
    fn a_json_line_is_one_object_with_the_time_level_target_message_and_fields() {
        let args = format_args!(
            "query failed: query_id=7f0c run_id=9a1b name=counts \
             error=\"[DIVIDE_BY_ZERO] Division by zero. \\\"x\\\" = 0\" password=hunter22"
        );
        let record = Record::builder()
            .level(Level::Info)
            .target("sluice_connect::observe")
            .args(args)
            .build();
        let text = line(&record, at(), LogFormat::Json);
        assert!(!text.contains('\n'), "{text}");
        assert!(!text.contains("hunter22"), "a secret printed: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["ts"], "2026-12-07T18:30:01.123Z");
        assert_eq!(v["level"], "info");
        assert_eq!(v["target"], "sluice_connect::observe");
        let message = v["message"].as_str().unwrap();
        assert!(
            message.starts_with("query failed: query_id=7f0c "),
            "{message}"
        );
        let fields = v["fields"].as_object().unwrap();
        let names: Vec<&str> = fields.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["error", "name", "password", "query_id", "run_id"],
            "{text}"
        );
        assert_eq!(fields["query_id"], "7f0c");
        assert_eq!(fields["run_id"], "9a1b");
        assert_eq!(fields["name"], "counts");
        assert_eq!(
            fields["error"],
            "[DIVIDE_BY_ZERO] Division by zero. \"x\" = 0"
        );
        assert_eq!(fields["password"], sluice::redact::REDACTED);

        // A warning with no pairs at its end has no fields; pairs inside the text are text.
        let args = format_args!("a=1 was dropped \"quoted\"\n(two lines)");
        let record = Record::builder()
            .level(Level::Warn)
            .target("sluice::state")
            .args(args)
            .build();
        let v: serde_json::Value =
            serde_json::from_str(&line(&record, at(), LogFormat::Json)).unwrap();
        assert_eq!(v["level"], "warn");
        assert_eq!(v["message"], "a=1 was dropped \"quoted\"\n(two lines)");
        assert!(v.get("fields").is_none(), "{v}");
    }

    #[test]
    fn the_format_is_the_flag_else_the_environment() {
        let env = |v: &str| Some(v.to_string());
        assert_eq!(
            LogFormat::resolve_with(None, env("JSON")),
            Ok(LogFormat::Json)
        );
        assert_eq!(
            LogFormat::resolve_with(Some(LogFormat::Text), env("json")),
            Ok(LogFormat::Text)
        );
        assert!(LogFormat::resolve_with(None, env("yaml"))
            .unwrap_err()
            .contains("text or json"));
        assert_eq!(LogFormat::resolve_with(None, None), Ok(LogFormat::Text));
    }
}
