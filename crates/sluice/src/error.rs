//! One error type for the engine, by who is at fault.
//!
//! Every user-facing error carries a stable *error class* (in Spark's style, e.g.
//! `STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION`) and a message that names the file, batch or
//! column involved and says what to do. Classes are stable: tests and the conformance runner
//! match on them, never on message text.

use std::fmt;

/// Who is at fault for an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The query as written: an unsupported operation, a bad option, a wrong output mode.
    Query,
    /// The input data: a malformed record under `FAILFAST`, an unreadable file.
    Input,
    /// The checkpoint: a missing or corrupt file, an incompatible change, a concurrent query.
    Checkpoint,
    /// A source or sink: I/O failure, broker error.
    Connector,
    /// A feature Sluice does not have yet. Always says so plainly.
    NotSupportedYet,
    /// A bug in Sluice.
    Internal,
}

/// The engine's error.
#[derive(Debug)]
pub struct SluiceError {
    fault: Fault,
    class: &'static str,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

pub type Result<T, E = SluiceError> = std::result::Result<T, E>;

impl SluiceError {
    pub fn new(fault: Fault, class: &'static str, message: impl Into<String>) -> Self {
        Self {
            fault,
            class,
            message: message.into(),
            source: None,
        }
    }
    /// The query is at fault (unsupported operation, bad option, wrong output mode).
    pub fn query(class: &'static str, message: impl Into<String>) -> Self {
        Self::new(Fault::Query, class, message)
    }
    /// The input data is at fault.
    pub fn input(class: &'static str, message: impl Into<String>) -> Self {
        Self::new(Fault::Input, class, message)
    }
    /// The checkpoint is at fault.
    pub fn checkpoint(class: &'static str, message: impl Into<String>) -> Self {
        Self::new(Fault::Checkpoint, class, message)
    }
    /// A source or sink failed.
    pub fn connector(class: &'static str, message: impl Into<String>) -> Self {
        Self::new(Fault::Connector, class, message)
    }
    /// A feature that is not built yet; the message names it.
    pub fn not_supported_yet(message: impl Into<String>) -> Self {
        Self::new(
            Fault::NotSupportedYet,
            "SLUICE_NOT_SUPPORTED_YET",
            message.into(),
        )
    }
    /// A bug in Sluice.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Fault::Internal, "INTERNAL_ERROR", message)
    }
    /// I/O on a named path failed; `what` says what was being done.
    pub fn io(fault: Fault, what: impl fmt::Display, err: std::io::Error) -> Self {
        Self::new(fault, "IO_ERROR", format!("{what}: {err}")).with_source(err)
    }
    pub fn with_source(mut self, err: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(err));
        self
    }
    /// Adds context in front of the message (e.g. "batch 3: ").
    pub fn context(mut self, ctx: impl fmt::Display) -> Self {
        self.message = format!("{ctx}: {}", self.message);
        self
    }
    pub fn fault(&self) -> Fault {
        self.fault
    }
    /// The stable error class, e.g. `STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION`.
    pub fn class(&self) -> &'static str {
        self.class
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl Clone for SluiceError {
    /// A copy with the same fault, class and message (the underlying source is not kept).
    fn clone(&self) -> Self {
        SluiceError::new(self.fault, self.class, self.message.clone())
    }
}

impl fmt::Display for SluiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.class, self.message)
    }
}

impl std::error::Error for SluiceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e.as_ref() as &(dyn std::error::Error + 'static))
    }
}

impl From<datafusion::error::DataFusionError> for SluiceError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        use datafusion::error::DataFusionError as D;
        let (fault, class) = match &e {
            D::SQL(..) => (Fault::Query, "PARSE_SYNTAX_ERROR"),
            D::Plan(..) | D::SchemaError(..) => (Fault::Query, "ANALYSIS_ERROR"),
            D::NotImplemented(..) => (Fault::NotSupportedYet, "SLUICE_NOT_SUPPORTED_YET"),
            D::External(inner) => {
                if let Some(s) = inner.downcast_ref::<SluiceError>() {
                    return SluiceError::new(s.fault, s.class, s.message.clone());
                }
                (Fault::Internal, "DATAFUSION_ERROR")
            }
            _ => (Fault::Internal, "DATAFUSION_ERROR"),
        };
        let msg = e.to_string();
        SluiceError::new(fault, class, msg).with_source(e)
    }
}

impl From<arrow::error::ArrowError> for SluiceError {
    fn from(e: arrow::error::ArrowError) -> Self {
        SluiceError::new(Fault::Internal, "ARROW_ERROR", e.to_string()).with_source(e)
    }
}

/// Builds a query-fault error with `format!` arguments.
#[macro_export]
macro_rules! query_err {
    ($class:expr, $($arg:tt)*) => { $crate::error::SluiceError::query($class, format!($($arg)*)) };
}

/// Builds an internal error with `format!` arguments.
#[macro_export]
macro_rules! internal_err {
    ($($arg:tt)*) => { $crate::error::SluiceError::internal(format!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_class_and_message() {
        let e = SluiceError::query("X.Y", "do this");
        assert_eq!(e.to_string(), "[X.Y] do this");
        assert_eq!(e.fault(), Fault::Query);
        assert_eq!(e.context("batch 3").message(), "batch 3: do this");
    }

    #[test]
    fn sluice_error_survives_a_trip_through_datafusion() {
        let inner = SluiceError::input("MALFORMED_RECORD", "bad line 3 of f.json");
        let df = datafusion::error::DataFusionError::External(Box::new(inner));
        let back: SluiceError = df.into();
        assert_eq!(back.class(), "MALFORMED_RECORD");
        assert_eq!(back.fault(), Fault::Input);
    }
}
