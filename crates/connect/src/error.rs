//! Errors as PySpark users catch them: a [`ConnectError`] becomes a gRPC status whose
//! `google.rpc.ErrorInfo` names the Java exception class PySpark maps to its own exception
//! (`AnalysisException`, `StreamingQueryException`, `IllegalArgumentException`, ...), with
//! Sluice's error class as `errorClass` and its message.

use std::collections::HashMap;

use sluice::{Fault, SluiceError};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The Java exception classes PySpark's `convert_exception` knows, by what they mean.
pub mod java {
    /// `pyspark.errors.AnalysisException`: the plan is wrong (unknown column, bad output mode).
    pub const ANALYSIS: &str = "org.apache.spark.sql.AnalysisException";
    /// `pyspark.errors.StreamingQueryException`: a running query failed.
    pub const STREAMING_QUERY: &str = "org.apache.spark.sql.streaming.StreamingQueryException";
    /// `pyspark.errors.IllegalArgumentException`: a bad argument (option, trigger, conf value).
    pub const ILLEGAL_ARGUMENT: &str = "java.lang.IllegalArgumentException";
    /// `pyspark.errors.SparkRuntimeException`: data or I/O went wrong while running.
    pub const RUNTIME: &str = "org.apache.spark.SparkRuntimeException";
    /// `pyspark.errors.UnsupportedOperationException`: not supported (yet).
    pub const UNSUPPORTED: &str = "java.lang.UnsupportedOperationException";
    /// `pyspark.errors.ArithmeticException` (ANSI overflow, division by zero).
    pub const ARITHMETIC: &str = "java.lang.ArithmeticException";
    /// `pyspark.errors.NumberFormatException` (ANSI casts).
    pub const NUMBER_FORMAT: &str = "java.lang.NumberFormatException";
    /// `pyspark.errors.DateTimeException` (ANSI date/time parsing).
    pub const DATE_TIME: &str = "java.time.DateTimeException";
    /// `pyspark.errors.SparkConnectGrpcException` (anything else).
    pub const INTERNAL: &str = "org.apache.spark.SparkException";
}

/// An error of the Spark Connect server, on its way to a PySpark client.
#[derive(Debug)]
pub struct ConnectError {
    /// The Java class PySpark maps to its exception (see [`java`]).
    pub java_class: &'static str,
    /// Sluice's (Spark's) error class, `errorClass` on the client.
    pub error_class: String,
    /// The message, with the fix where there is one.
    pub message: String,
    /// The gRPC status code.
    pub code: Code,
}

/// The server's result type.
pub type Result<T, E = ConnectError> = std::result::Result<T, E>;

impl ConnectError {
    /// An error of the given Java class and Sluice/Spark error class.
    pub fn new(java_class: &'static str, error_class: &str, message: impl Into<String>) -> Self {
        Self {
            java_class,
            error_class: error_class.to_string(),
            message: message.into(),
            code: Code::Internal,
        }
    }
    /// An `AnalysisException`.
    pub fn analysis(error_class: &str, message: impl Into<String>) -> Self {
        Self::new(java::ANALYSIS, error_class, message)
    }
    /// An `IllegalArgumentException` (gRPC `INVALID_ARGUMENT`).
    pub fn illegal_argument(message: impl Into<String>) -> Self {
        Self {
            code: Code::InvalidArgument,
            ..Self::new(
                java::ILLEGAL_ARGUMENT,
                sluice::error::class::INVALID_ARGUMENT,
                message,
            )
        }
    }
    /// A plan node, expression or call Sluice does not support yet, named.
    pub fn not_supported(what: impl std::fmt::Display) -> Self {
        Self {
            code: Code::Unimplemented,
            ..Self::new(
                java::UNSUPPORTED,
                sluice::error::class::SLUICE_NOT_SUPPORTED_YET,
                format!("Sluice's Spark Connect server does not support {what} yet"),
            )
        }
    }
    /// A `StreamingQueryException`: the query failed while running with `cause`.
    pub fn streaming_query(cause: &SluiceError) -> Self {
        Self::new(
            java::STREAMING_QUERY,
            cause.class(),
            format!("[{}] {}", cause.class(), cause.message()),
        )
    }

    /// The gRPC status PySpark turns back into this exception.
    pub fn into_status(self) -> Status {
        let mut metadata = HashMap::new();
        metadata.insert(
            "classes".to_string(),
            serde_json::json!([self.java_class]).to_string(),
        );
        metadata.insert("errorClass".to_string(), self.error_class.clone());
        metadata.insert("messageParameters".to_string(), "{}".to_string());
        let message = if self.message.starts_with('[') {
            self.message
        } else {
            format!("[{}] {}", self.error_class, self.message)
        };
        // Secrets are never printed (sluice::redact): the server's errors built from options.
        let message = sluice::redact::redacted(message);
        let details = ErrorDetails::with_error_info(self.java_class, "org.apache.spark", metadata);
        Status::with_error_details(self.code, message, details)
    }
}

impl From<SluiceError> for ConnectError {
    fn from(e: SluiceError) -> Self {
        let class = e.class();
        let java_class = match e.fault() {
            Fault::Query => match class {
                // Spark's option and conf checks throw IllegalArgumentException.
                sluice::error::class::INVALID_OPTION
                | sluice::error::class::INVALID_OPTION_VALUE
                | sluice::error::class::INVALID_CONF_VALUE
                | sluice::error::class::INVALID_DELIMITER_VALUE => java::ILLEGAL_ARGUMENT,
                c if c.starts_with("CAST_") => java::NUMBER_FORMAT,
                sluice::error::class::DIVIDE_BY_ZERO
                | sluice::error::class::ARITHMETIC_OVERFLOW
                | sluice::error::class::NUMERIC_VALUE_OUT_OF_RANGE => java::ARITHMETIC,
                _ => java::ANALYSIS,
            },
            Fault::Input | Fault::Checkpoint | Fault::Connector => java::RUNTIME,
            Fault::NotSupportedYet => java::UNSUPPORTED,
            Fault::Internal => java::INTERNAL,
        };
        let code = match e.fault() {
            Fault::NotSupportedYet => Code::Unimplemented,
            _ if java_class == java::ILLEGAL_ARGUMENT => Code::InvalidArgument,
            _ => Code::Internal,
        };
        Self {
            java_class,
            error_class: class.to_string(),
            message: format!("[{class}] {}", e.message()),
            code,
        }
    }
}

impl From<datafusion::error::DataFusionError> for ConnectError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        ConnectError::from(SluiceError::from(e))
    }
}

impl From<arrow::error::ArrowError> for ConnectError {
    fn from(e: arrow::error::ArrowError) -> Self {
        ConnectError::new(
            java::INTERNAL,
            sluice::error::class::INTERNAL_ERROR,
            e.to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error the server builds itself (not a `SluiceError`, whose message is redacted
    /// already) never shows a secret the session was given, nor a `secret-key=value`.
    #[test]
    fn the_status_a_client_sees_shows_no_secret() {
        sluice::redact::remember_option("kafka.sasl.jaas.config", "connect-jaas-secret-61");
        let e = ConnectError::illegal_argument(
            "cannot use connect-jaas-secret-61 with sasl.password=connect-pw-62",
        );
        let status = e.into_status();
        let message = status.message();
        assert!(!message.contains("connect-jaas-secret-61"), "{message}");
        assert!(!message.contains("connect-pw-62"), "{message}");
        assert!(message.contains(sluice::redact::REDACTED), "{message}");
    }
}
