//! The binary's logger: the engine's `log` lines (and librdkafka's, through
//! `sluice::kafka_log`) on stderr, filtered by `RUST_LOG` in env_logger's syntax
//! (`RUST_LOG=info`, `RUST_LOG=warn,sluice::state=debug`, `RUST_LOG=off`); without it, warnings
//! and errors. Each line is printed through the status console (`status::print_line`), so on a
//! terminal it lands above the live status lines instead of through them.
//!
//! Lines: `warning: TEXT` and `error: TEXT` (as the status board's own warnings), and
//! `info TARGET: TEXT` / `debug TARGET: TEXT` / `trace TARGET: TEXT` below that.

use log::{Level, Log, Metadata, Record};

/// The filter when `RUST_LOG` is not set.
pub const DEFAULT_FILTER: &str = "warn";

struct Logger {
    filter: env_logger::Logger,
}

/// One record as printed.
fn line(record: &Record<'_>) -> String {
    match record.level() {
        Level::Error => format!("error: {}", record.args()),
        Level::Warn => format!("warning: {}", record.args()),
        level => format!(
            "{} {}: {}",
            level.as_str().to_ascii_lowercase(),
            record.target(),
            record.args()
        ),
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if self.filter.matches(record) {
            // Secrets are never printed (sluice::redact), whatever a library logs.
            crate::status::print_line(&sluice::redact::redact_text(&line(record)));
        }
    }

    fn flush(&self) {}
}

/// Installs the logger (once, at the start of `main`).
pub fn install() {
    let filter =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(DEFAULT_FILTER))
            .build();
    let max = filter.filter();
    if log::set_boxed_logger(Box::new(Logger { filter })).is_ok() {
        log::set_max_level(max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_and_errors_read_as_the_status_board_s_and_the_rest_names_its_module() {
        let args = format_args!("disk almost full");
        let record = Record::builder()
            .level(Level::Warn)
            .target("sluice::state")
            .args(args)
            .build();
        assert_eq!(line(&record), "warning: disk almost full");
        let args = format_args!("wrote snapshot 4");
        let record = Record::builder()
            .level(Level::Debug)
            .target("sluice::state::provider")
            .args(args)
            .build();
        assert_eq!(
            line(&record),
            "debug sluice::state::provider: wrote snapshot 4"
        );
    }
}
