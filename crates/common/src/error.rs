//! One error type for the engine, by who is at fault.
//!
//! Every user-facing error carries a stable *error class* (in Spark's style, e.g.
//! `STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION`) and a message that names the file, batch or
//! column involved and says what to do. Classes are stable: tests and the conformance runner
//! match on them, never on message text.

use std::fmt;

/// Every error class the engine raises, in one list (Spark's `error-classes.json` in spirit).
///
/// Match errors with [`SluiceError::is`] and these constants, never with string literals or
/// class prefixes. A class is part of the API: renaming one is a breaking change. Each
/// constant's value is its own name (with `.` where the Rust name has `_` after a Spark class
/// prefix such as `STREAMING_OUTPUT_MODE`).
#[allow(missing_docs)]
pub mod class {
    pub const ALL_PARTITION_COLUMNS_NOT_ALLOWED: &str = "ALL_PARTITION_COLUMNS_NOT_ALLOWED";
    pub const AMBIGUOUS_REFERENCE: &str = "AMBIGUOUS_REFERENCE";
    pub const ANALYSIS_ERROR: &str = "ANALYSIS_ERROR";
    pub const ARITHMETIC_OVERFLOW: &str = "ARITHMETIC_OVERFLOW";
    pub const ARROW_ERROR: &str = "ARROW_ERROR";
    pub const CANNOT_READ_PARQUET_FILE: &str = "CANNOT_READ_PARQUET_FILE";
    pub const CAST_INVALID_INPUT: &str = "CAST_INVALID_INPUT";
    pub const CAST_OVERFLOW: &str = "CAST_OVERFLOW";
    pub const CHECKPOINT_CORRUPT_LOG: &str = "CHECKPOINT_CORRUPT_LOG";
    pub const CHECKPOINT_INCONSISTENT: &str = "CHECKPOINT_INCONSISTENT";
    pub const CHECKPOINT_IN_SOURCE: &str = "CHECKPOINT_IN_SOURCE";
    pub const CHECKPOINT_LOCK_LOST: &str = "CHECKPOINT_LOCK_LOST";
    pub const CHECKPOINT_INVALID_SOURCE_OFFSET: &str = "CHECKPOINT_INVALID_SOURCE_OFFSET";
    pub const CHECKPOINT_LOCATION_NOT_SPECIFIED: &str = "CHECKPOINT_LOCATION_NOT_SPECIFIED";
    pub const CHECKPOINT_MISSING_SOURCE_LOG: &str = "CHECKPOINT_MISSING_SOURCE_LOG";
    pub const CHECKPOINT_NOT_FOUND: &str = "CHECKPOINT_NOT_FOUND";
    pub const CHECKPOINT_UNSUPPORTED_VERSION: &str = "CHECKPOINT_UNSUPPORTED_VERSION";
    pub const COLUMN_ALREADY_EXISTS: &str = "COLUMN_ALREADY_EXISTS";
    pub const CONCURRENT_QUERY: &str = "CONCURRENT_QUERY";
    pub const CONCURRENT_STREAM_LOG_UPDATE: &str = "CONCURRENT_STREAM_LOG_UPDATE";
    pub const CONFLICTING_PARTITION_COLUMN_NAMES: &str = "CONFLICTING_PARTITION_COLUMN_NAMES";
    pub const CORRUPT_TABLE_ENTRY: &str = "CORRUPT_TABLE_ENTRY";
    pub const DATAFUSION_ERROR: &str = "DATAFUSION_ERROR";
    pub const DATATYPE_MISMATCH_BINARY_OP_WRONG_TYPE: &str =
        "DATATYPE_MISMATCH.BINARY_OP_WRONG_TYPE";
    pub const DATETIME_FIELD_OUT_OF_BOUNDS: &str = "DATETIME_FIELD_OUT_OF_BOUNDS";
    pub const DELTA_TABLE_INVALID: &str = "DELTA_TABLE_INVALID";
    pub const DELTA_WRITE_FAILED: &str = "DELTA_WRITE_FAILED";
    pub const DIVIDE_BY_ZERO: &str = "DIVIDE_BY_ZERO";
    pub const EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE: &str = "EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE";
    pub const FAILED_READ_FILE: &str = "FAILED_READ_FILE";
    pub const FILE_NOT_FOUND: &str = "FILE_NOT_FOUND";
    pub const FILE_CHANGED_AFTER_READ: &str = "FILE_CHANGED_AFTER_READ";
    pub const FILE_SOURCE_SYMLINK_LOOP: &str = "FILE_SOURCE_SYMLINK_LOOP";
    pub const FILE_SINK_FOREIGN_OUTPUT: &str = "FILE_SINK_FOREIGN_OUTPUT";
    pub const FILE_SINK_FORMAT_CHANGED: &str = "FILE_SINK_FORMAT_CHANGED";
    pub const FILE_SINK_MANIFEST_GAP: &str = "FILE_SINK_MANIFEST_GAP";
    pub const FILE_SINK_MANIFEST_CORRUPT: &str = "FILE_SINK_MANIFEST_CORRUPT";
    pub const FILE_SINK_MANIFEST_AHEAD: &str = "FILE_SINK_MANIFEST_AHEAD";
    pub const FILE_SINK_RACE: &str = "FILE_SINK_RACE";
    pub const FILE_SINK_WRITE_FAILED: &str = "FILE_SINK_WRITE_FAILED";
    /// A Python `foreachBatch` function (over Spark Connect) raised; the message has its traceback.
    pub const FOREACH_BATCH_USER_FUNCTION_ERROR: &str = "FOREACH_BATCH_USER_FUNCTION_ERROR";
    pub const GROUP_EXPRESSION_TYPE_IS_NOT_ORDERABLE: &str =
        "GROUP_EXPRESSION_TYPE_IS_NOT_ORDERABLE";
    pub const GROUP_FUNCTION_OUTPUT: &str = "GROUP_FUNCTION_OUTPUT";
    pub const GROUP_STATE_TIMEOUT: &str = "GROUP_STATE_TIMEOUT";
    pub const INTERNAL_ERROR: &str = "INTERNAL_ERROR";
    pub const INVALID_CONF_VALUE: &str = "INVALID_CONF_VALUE";
    pub const INVALID_CORRUPT_RECORD_TYPE: &str = "INVALID_CORRUPT_RECORD_TYPE";
    pub const INVALID_DELIMITER_VALUE: &str = "INVALID_DELIMITER_VALUE";
    pub const INVALID_INTERVAL: &str = "INVALID_INTERVAL";
    pub const INVALID_JSON_SCHEMA_MAP_TYPE: &str = "INVALID_JSON_SCHEMA_MAP_TYPE";
    pub const INVALID_OPTION: &str = "INVALID_OPTION";
    pub const INVALID_OPTION_VALUE: &str = "INVALID_OPTION_VALUE";
    pub const INVALID_PARTITION_COLUMN_DATA_TYPE: &str = "INVALID_PARTITION_COLUMN_DATA_TYPE";
    pub const INVALID_PATH_GLOB: &str = "INVALID_PATH_GLOB";
    pub const INVALID_SCHEMA: &str = "INVALID_SCHEMA";
    pub const INVALID_TABLE_NAME: &str = "INVALID_TABLE_NAME";
    pub const INVALID_WATERMARK_DELAY: &str = "INVALID_WATERMARK_DELAY";
    pub const INVALID_WINDOW: &str = "INVALID_WINDOW";
    pub const IO_ERROR: &str = "IO_ERROR";
    /// An operator that cannot spill needed more than its share of `sluice.memory.limit`.
    pub const MEMORY_LIMIT_EXCEEDED: &str = "MEMORY_LIMIT_EXCEEDED";
    pub const KAFKA_AUTHENTICATION: &str = "KAFKA_AUTHENTICATION";
    pub const KAFKA_BROKER_UNAVAILABLE: &str = "KAFKA_BROKER_UNAVAILABLE";
    pub const KAFKA_CLIENT: &str = "KAFKA_CLIENT";
    pub const KAFKA_DATA_LOSS: &str = "KAFKA_DATA_LOSS";
    pub const KAFKA_INVALID_COLUMN: &str = "KAFKA_INVALID_COLUMN";
    pub const KAFKA_INVALID_OPTION: &str = "KAFKA_INVALID_OPTION";
    pub const KAFKA_PRODUCE: &str = "KAFKA_PRODUCE";
    pub const KAFKA_TIMEOUT: &str = "KAFKA_TIMEOUT";
    pub const KAFKA_TRANSACTION: &str = "KAFKA_TRANSACTION";
    pub const LATE_ROWS_FORMAT_MISSING: &str = "LATE_ROWS_FORMAT_MISSING";
    pub const LATE_ROWS_FORMAT_UNSUPPORTED: &str = "LATE_ROWS_FORMAT_UNSUPPORTED";
    pub const LATE_ROWS_PATH_CLASH: &str = "LATE_ROWS_PATH_CLASH";
    pub const LATE_ROWS_WITHOUT_STATE: &str = "LATE_ROWS_WITHOUT_STATE";
    pub const LOCATION_ALREADY_EXISTS: &str = "LOCATION_ALREADY_EXISTS";
    pub const MALFORMED_RECORD: &str = "MALFORMED_RECORD";
    /// FAILFAST met a malformed record (Spark's class for it).
    pub const MALFORMED_RECORD_IN_PARSING_WITHOUT_SUGGESTION: &str =
        "MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION";
    pub const MEMORY_STREAM_DATA_LOST: &str = "MEMORY_STREAM_DATA_LOST";
    pub const MEMORY_STREAM_SCHEMA_MISMATCH: &str = "MEMORY_STREAM_SCHEMA_MISMATCH";
    pub const NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING: &str =
        "NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING";
    pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "NUMERIC_VALUE_OUT_OF_RANGE";
    pub const PARQUET_COLUMN_DATA_TYPE_MISMATCH: &str = "PARQUET_COLUMN_DATA_TYPE_MISMATCH";
    pub const PARSE_SYNTAX_ERROR: &str = "PARSE_SYNTAX_ERROR";
    pub const PARTITION_COLUMN_NOT_FOUND_IN_SCHEMA: &str = "PARTITION_COLUMN_NOT_FOUND_IN_SCHEMA";
    pub const PARTITION_VALUE_CAST_FAILED: &str = "PARTITION_VALUE_CAST_FAILED";
    pub const PATH_ALREADY_EXISTS: &str = "PATH_ALREADY_EXISTS";
    pub const PATH_NOT_FOUND: &str = "PATH_NOT_FOUND";
    pub const PATH_NOT_SPECIFIED: &str = "PATH_NOT_SPECIFIED";
    pub const PIPELINE_DUPLICATE_NAME: &str = "PIPELINE_DUPLICATE_NAME";
    pub const PIPELINE_INVALID_COLUMN: &str = "PIPELINE_INVALID_COLUMN";
    pub const PIPELINE_INVALID_OPTION: &str = "PIPELINE_INVALID_OPTION";
    pub const PIPELINE_INVALID_WATERMARK: &str = "PIPELINE_INVALID_WATERMARK";
    pub const PIPELINE_MISSING_OPTION: &str = "PIPELINE_MISSING_OPTION";
    pub const PIPELINE_MISSING_SCHEMA: &str = "PIPELINE_MISSING_SCHEMA";
    pub const PIPELINE_NO_QUERY: &str = "PIPELINE_NO_QUERY";
    pub const PIPELINE_SYNTAX_ERROR: &str = "PIPELINE_SYNTAX_ERROR";
    pub const PIPELINE_TABLE_NOT_FOUND: &str = "PIPELINE_TABLE_NOT_FOUND";
    pub const PIPELINE_UNDEFINED_VARIABLE: &str = "PIPELINE_UNDEFINED_VARIABLE";
    pub const PIPELINE_UNKNOWN_CONNECTOR: &str = "PIPELINE_UNKNOWN_CONNECTOR";
    pub const QUERY_NAME_NOT_SPECIFIED: &str = "QUERY_NAME_NOT_SPECIFIED";
    pub const SINK_WRITES_INTO_SOURCE: &str = "SINK_WRITES_INTO_SOURCE";
    pub const SLUICE_INJECTED_CRASH: &str = "SLUICE_INJECTED_CRASH";
    pub const SLUICE_NOT_SUPPORTED_YET: &str = "SLUICE_NOT_SUPPORTED_YET";
    pub const SOCKET_CONNECTION_FAILED: &str = "SOCKET_CONNECTION_FAILED";
    pub const SOCKET_DATA_LOST: &str = "SOCKET_DATA_LOST";
    pub const STATE_BATCH_NOT_COMMITTED: &str = "STATE_BATCH_NOT_COMMITTED";
    pub const STATE_DECODE_FAILED: &str = "STATE_DECODE_FAILED";
    pub const STATE_OPERATOR_NOT_FOUND: &str = "STATE_OPERATOR_NOT_FOUND";
    pub const STATE_SCHEMA_INCOMPATIBLE: &str = "STATE_SCHEMA_INCOMPATIBLE";
    pub const STATE_SCHEMA_KEY_RENAMED: &str = "STATE_SCHEMA_KEY_RENAMED";
    pub const STATE_STORE_CORRUPT: &str = "STATE_STORE_CORRUPT";
    pub const STATE_STORE_READ_ONLY: &str = "STATE_STORE_READ_ONLY";
    pub const STATE_STORE_UNSUPPORTED_FORMAT: &str = "STATE_STORE_UNSUPPORTED_FORMAT";
    pub const STATE_STORE_VERSION_MISSING: &str = "STATE_STORE_VERSION_MISSING";
    pub const STATE_VERSION_NOT_AVAILABLE: &str = "STATE_VERSION_NOT_AVAILABLE";
    pub const STREAMING_CHECKPOINT_MISSING_METADATA_FILE: &str =
        "STREAMING_CHECKPOINT_MISSING_METADATA_FILE";
    pub const STREAMING_OUTPUT_MODE_INVALID: &str = "STREAMING_OUTPUT_MODE.INVALID";
    pub const STREAMING_OUTPUT_MODE_UNSUPPORTED_DATASOURCE: &str =
        "STREAMING_OUTPUT_MODE.UNSUPPORTED_DATASOURCE";
    pub const STREAMING_OUTPUT_MODE_UNSUPPORTED_OPERATION: &str =
        "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION";
    pub const STREAMING_QUERY_SINK_CHANGED: &str = "STREAMING_QUERY_SINK_CHANGED";
    pub const STREAMING_QUERY_SOURCES_CHANGED: &str = "STREAMING_QUERY_SOURCES_CHANGED";
    pub const STREAMING_QUERY_WITHOUT_WRITE_STREAM: &str = "STREAMING_QUERY_WITHOUT_WRITE_STREAM";
    pub const STREAMING_STATEFUL_OPERATOR_CORRECTNESS: &str =
        "STREAMING_STATEFUL_OPERATOR_CORRECTNESS";
    pub const TABLE_PARTITIONING_MISMATCH: &str = "TABLE_PARTITIONING_MISMATCH";
    pub const TABLE_PROVIDER_MISMATCH: &str = "TABLE_PROVIDER_MISMATCH";
    pub const TABLE_SCHEMA_MISMATCH: &str = "TABLE_SCHEMA_MISMATCH";
    pub const UNABLE_TO_INFER_SCHEMA: &str = "UNABLE_TO_INFER_SCHEMA";
    pub const UNRESOLVED_COLUMN: &str = "UNRESOLVED_COLUMN";
    pub const UNRESOLVED_COLUMN_WITH_SUGGESTION: &str = "UNRESOLVED_COLUMN.WITH_SUGGESTION";
    pub const UNRESOLVED_ROUTINE: &str = "UNRESOLVED_ROUTINE";
    pub const UNSUPPORTED_DATA_SOURCE: &str = "UNSUPPORTED_DATA_SOURCE";
    pub const UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE: &str = "UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE";
    pub const UNSUPPORTED_STREAMING_OPERATION: &str = "UNSUPPORTED_STREAMING_OPERATION";
    pub const WRITE_STREAM_NOT_ALLOWED: &str = "WRITE_STREAM_NOT_ALLOWED";
    pub const WRONG_NUM_ARGS: &str = "WRONG_NUM_ARGS";
    // Generators (plan/generate/): Spark's classes.
    pub const DATATYPE_MISMATCH_NON_FOLDABLE_INPUT: &str = "DATATYPE_MISMATCH.NON_FOLDABLE_INPUT";
    pub const DATATYPE_MISMATCH_STACK_COLUMN_DIFF_TYPES: &str =
        "DATATYPE_MISMATCH.STACK_COLUMN_DIFF_TYPES";
    pub const DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE: &str =
        "DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE";
    pub const DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE: &str = "DATATYPE_MISMATCH.VALUE_OUT_OF_RANGE";
    pub const INVALID_PARAMETER_VALUE_PATTERN: &str = "INVALID_PARAMETER_VALUE.PATTERN";
    pub const UDTF_ALIAS_NUMBER_MISMATCH: &str = "UDTF_ALIAS_NUMBER_MISMATCH";
    pub const UNSUPPORTED_EXPR_FOR_OPERATOR: &str = "UNSUPPORTED_EXPR_FOR_OPERATOR";
    // Higher-order functions (sluice-spark functions/lambda.rs): Spark's classes.
    pub const COMPARATOR_RETURNS_NULL: &str = "COMPARATOR_RETURNS_NULL";
    pub const DATATYPE_MISMATCH_UNEXPECTED_RETURN_TYPE: &str =
        "DATATYPE_MISMATCH.UNEXPECTED_RETURN_TYPE";
    pub const DUPLICATED_MAP_KEY: &str = "DUPLICATED_MAP_KEY";
    pub const INVALID_LAMBDA_FUNCTION_CALL_DUPLICATE_ARG_NAMES: &str =
        "INVALID_LAMBDA_FUNCTION_CALL.DUPLICATE_ARG_NAMES";
    pub const INVALID_LAMBDA_FUNCTION_CALL_NON_HIGHER_ORDER_FUNCTION: &str =
        "INVALID_LAMBDA_FUNCTION_CALL.NON_HIGHER_ORDER_FUNCTION";
    pub const INVALID_LAMBDA_FUNCTION_CALL_NUM_ARGS_MISMATCH: &str =
        "INVALID_LAMBDA_FUNCTION_CALL.NUM_ARGS_MISMATCH";
    pub const NULL_MAP_KEY: &str = "NULL_MAP_KEY";
    pub const UNRECOGNIZED_PARAMETER_NAME: &str = "UNRECOGNIZED_PARAMETER_NAME";
    pub const DATATYPE_MISMATCH_NON_STRING_TYPE: &str = "DATATYPE_MISMATCH.NON_STRING_TYPE";
    // CSV functions (sluice-spark functions/csv.rs).
    pub const DATATYPE_MISMATCH_UNEXPECTED_NULL: &str = "DATATYPE_MISMATCH.UNEXPECTED_NULL";
    pub const INVALID_SCHEMA_NON_STRUCT_TYPE: &str = "INVALID_SCHEMA.NON_STRUCT_TYPE";
    pub const UNSUPPORTED_GENERATOR_MULTI_GENERATOR: &str = "UNSUPPORTED_GENERATOR.MULTI_GENERATOR";
    pub const UNSUPPORTED_GENERATOR_NESTED_IN_EXPRESSIONS: &str =
        "UNSUPPORTED_GENERATOR.NESTED_IN_EXPRESSIONS";
    pub const UNSUPPORTED_GENERATOR_NOT_GENERATOR: &str = "UNSUPPORTED_GENERATOR.NOT_GENERATOR";
    pub const UNSUPPORTED_GENERATOR_OUTSIDE_SELECT: &str = "UNSUPPORTED_GENERATOR.OUTSIDE_SELECT";
    // AES functions (sluice-spark functions/aes.rs): Spark's classes.
    pub const INVALID_PARAMETER_VALUE_AES_CRYPTO_ERROR: &str =
        "INVALID_PARAMETER_VALUE.AES_CRYPTO_ERROR";
    pub const INVALID_PARAMETER_VALUE_AES_IV_LENGTH: &str = "INVALID_PARAMETER_VALUE.AES_IV_LENGTH";
    pub const INVALID_PARAMETER_VALUE_AES_KEY_LENGTH: &str =
        "INVALID_PARAMETER_VALUE.AES_KEY_LENGTH";
    pub const UNSUPPORTED_FEATURE_AES_MODE: &str = "UNSUPPORTED_FEATURE.AES_MODE";
    pub const UNSUPPORTED_FEATURE_AES_MODE_AAD: &str = "UNSUPPORTED_FEATURE.AES_MODE_AAD";
    pub const UNSUPPORTED_FEATURE_AES_MODE_IV: &str = "UNSUPPORTED_FEATURE.AES_MODE_IV";
    // XPath functions (sluice-spark functions/xpath.rs). Spark 3.5 raises a plain RuntimeException
    // without a class for these, so the names are Sluice's.
    pub const XPATH_INVALID_PATH: &str = "XPATH_INVALID_PATH";
    pub const XPATH_INVALID_XML: &str = "XPATH_INVALID_XML";
    pub const XPATH_NOT_A_NODE_SET: &str = "XPATH_NOT_A_NODE_SET";
    // Aggregates (functions/: aggregates, statistics, percentile, bitmap, hll, histogram).
    pub const DATATYPE_MISMATCH_INVALID_ORDERING_TYPE: &str =
        "DATATYPE_MISMATCH.INVALID_ORDERING_TYPE";
    pub const HLL_INVALID_INPUT_SKETCH_BUFFER: &str = "HLL_INVALID_INPUT_SKETCH_BUFFER";
    pub const HLL_INVALID_LG_K: &str = "HLL_INVALID_LG_K";
    pub const HLL_UNION_DIFFERENT_LG_K: &str = "HLL_UNION_DIFFERENT_LG_K";
    pub const INVALID_BITMAP_POSITION: &str = "INVALID_BITMAP_POSITION";
    pub const INVALID_PARAMETER_VALUE: &str = "INVALID_PARAMETER_VALUE";
    // Scalar functions (functions/: binary, collections, numfmt, strings, ...): Spark's classes.
    /// An array would have more elements than Spark allows (`sequence`).
    pub const COLLECTION_SIZE_LIMIT_EXCEEDED_PARAMETER: &str =
        "COLLECTION_SIZE_LIMIT_EXCEEDED.PARAMETER";
    /// A value cannot be converted as asked (`to_binary('zz', 'hex')`).
    pub const CONVERSION_INVALID_INPUT: &str = "CONVERSION_INVALID_INPUT";
    /// The operands of a binary operator have types it cannot combine (`try_divide(1, interval)`).
    pub const DATATYPE_MISMATCH_BINARY_OP_DIFF_TYPES: &str =
        "DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES";
    /// `extract`/`date_part` names a field its source does not have.
    pub const INVALID_EXTRACT_FIELD: &str = "INVALID_EXTRACT_FIELD";
    /// A number format (`to_number`, `to_char`) is malformed.
    pub const INVALID_FORMAT: &str = "INVALID_FORMAT";
    /// The input does not match its number format (`to_number('12x', '999')`).
    pub const INVALID_FORMAT_MISMATCH_INPUT: &str = "INVALID_FORMAT.MISMATCH_INPUT";
    /// An element index of 0 (`element_at`, `array_insert`): indices count from 1 or from -1.
    pub const INVALID_INDEX_OF_ZERO: &str = "INVALID_INDEX_OF_ZERO";
    /// `to_binary`'s format is not `hex`, `utf-8` or `base64`.
    pub const INVALID_PARAMETER_VALUE_BINARY_FORMAT: &str = "INVALID_PARAMETER_VALUE.BINARY_FORMAT";
    /// `encode`/`decode` names a charset Spark does not support.
    pub const INVALID_PARAMETER_VALUE_CHARSET: &str = "INVALID_PARAMETER_VALUE.CHARSET";
    /// `sequence`'s step does not move from start towards stop.
    pub const INVALID_PARAMETER_VALUE_SEQUENCE_WRONG_INPUT_TYPES: &str =
        "INVALID_PARAMETER_VALUE.SEQUENCE_WRONG_INPUT_TYPES";
    /// A time zone name or offset is not known (`convert_timezone`, `make_timestamp`).
    pub const INVALID_TIMEZONE: &str = "INVALID_TIMEZONE";
    /// An argument that must be a constant is not (`to_number`'s format).
    pub const NON_FOLDABLE_ARGUMENT: &str = "NON_FOLDABLE_ARGUMENT";
    /// `raise_error` was called, or `assert_true` met a false condition.
    pub const USER_RAISED_EXCEPTION: &str = "USER_RAISED_EXCEPTION";
    /// A function was called with a number of arguments it does not take.
    pub const WRONG_NUM_ARGS_WITHOUT_SUGGESTION: &str = "WRONG_NUM_ARGS.WITHOUT_SUGGESTION";
    // The Spark Connect server (crates/connect): Spark's classes, and Sluice's limits.
    /// A server limit was reached: a message over `--max-message-size`.
    pub const CONNECT_LIMIT_EXCEEDED_MESSAGE_SIZE: &str = "CONNECT_LIMIT_EXCEEDED.MESSAGE_SIZE";
    /// A server limit was reached: a plan nested deeper than the server reads.
    pub const CONNECT_LIMIT_EXCEEDED_PLAN_DEPTH: &str = "CONNECT_LIMIT_EXCEEDED.PLAN_DEPTH";
    /// A server limit was reached: more sessions than the server keeps.
    pub const CONNECT_LIMIT_EXCEEDED_SESSIONS: &str = "CONNECT_LIMIT_EXCEEDED.SESSIONS";
    /// A server limit was reached: more streaming queries than the server runs.
    pub const CONNECT_LIMIT_EXCEEDED_STREAMING_QUERIES: &str =
        "CONNECT_LIMIT_EXCEEDED.STREAMING_QUERIES";
    /// A request argument is not valid (PySpark's `IllegalArgumentException`).
    pub const INVALID_ARGUMENT: &str = "INVALID_ARGUMENT";
    /// A handle the client holds is gone (a cached DataFrame whose `foreachBatch` call ended).
    pub const INVALID_HANDLE: &str = "INVALID_HANDLE";
    /// A client reattached an operation id that is already running.
    pub const INVALID_HANDLE_OPERATION_ALREADY_EXISTS: &str =
        "INVALID_HANDLE.OPERATION_ALREADY_EXISTS";
    /// A client named an operation the server does not know (released, or the server restarted).
    pub const INVALID_HANDLE_OPERATION_NOT_FOUND: &str = "INVALID_HANDLE.OPERATION_NOT_FOUND";
    /// A client's session was ended or the server restarted: its server-side state is gone.
    pub const INVALID_HANDLE_SESSION_CHANGED: &str = "INVALID_HANDLE.SESSION_CHANGED";
    /// `union`/`unionByName` of frames whose columns do not match.
    pub const NUM_COLUMNS_MISMATCH: &str = "NUM_COLUMNS_MISMATCH";
    /// `pivot` without values found more distinct values than Spark pivots on (10000).
    pub const PIVOT_VALUE_LIMIT_EXCEEDED: &str = "PIVOT_VALUE_LIMIT_EXCEEDED";
    /// A Python function (`foreachBatch`, a listener) raised; the message has its traceback.
    pub const PYTHON_EXCEPTION: &str = "PYTHON_EXCEPTION";
    /// The Python worker runs another Python version than the client.
    pub const PYTHON_VERSION_MISMATCH: &str = "PYTHON_VERSION_MISMATCH";
    /// The Python worker itself failed (it would not start, or its connection broke).
    pub const PYTHON_WORKER_FAILED: &str = "PYTHON_WORKER_FAILED";
    /// `spark.conf.get` of a key that is not set and has no default.
    pub const SQL_CONF_NOT_FOUND: &str = "SQL_CONF_NOT_FOUND";
    /// `createTempView` of a name that is taken.
    pub const TEMP_TABLE_OR_VIEW_ALREADY_EXISTS: &str = "TEMP_TABLE_OR_VIEW_ALREADY_EXISTS";
    /// A `?` or `:name` marker of `spark.sql(query, args)` has no argument.
    pub const UNBOUND_SQL_PARAMETER: &str = "UNBOUND_SQL_PARAMETER";
    /// `unpivot` given no value columns.
    pub const UNPIVOT_REQUIRES_VALUE_COLUMNS: &str = "UNPIVOT_REQUIRES_VALUE_COLUMNS";
    /// A join's `USING` column is not on one of its sides.
    pub const UNRESOLVED_USING_COLUMN_FOR_JOIN: &str = "UNRESOLVED_USING_COLUMN_FOR_JOIN";
    /// The plan asks for something Spark does not support (a frame with no columns).
    pub const UNSUPPORTED_FEATURE: &str = "UNSUPPORTED_FEATURE";
    // The command line (crates/cli).
    /// `sluice bench`/`sluice nexmark` was given a workload or query it does not have.
    pub const UNKNOWN_WORKLOAD: &str = "UNKNOWN_WORKLOAD";
}

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
pub struct SluiceError {
    fault: Fault,
    class: &'static str,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// The engine's `Result`, with [`SluiceError`] as the default error type.
pub type Result<T, E = SluiceError> = std::result::Result<T, E>;

impl SluiceError {
    /// An error with an explicit fault, class (one of the [`class`] constants) and message.
    pub fn new(fault: Fault, class: &'static str, message: impl Into<String>) -> Self {
        Self {
            fault,
            class,
            // Secrets are never printed (see `redact`).
            message: crate::redact::redact_text(&message.into()).into_owned(),
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
            class::SLUICE_NOT_SUPPORTED_YET,
            message.into(),
        )
    }
    /// A bug in Sluice.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Fault::Internal, class::INTERNAL_ERROR, message)
    }
    /// I/O on a named path failed; `what` says what was being done.
    pub fn io(fault: Fault, what: impl fmt::Display, err: std::io::Error) -> Self {
        Self::new(fault, class::IO_ERROR, format!("{what}: {err}")).with_source(err)
    }
    /// Attaches the underlying error, returned by [`std::error::Error::source`].
    pub fn with_source(mut self, err: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(err));
        self
    }
    /// Adds context in front of the message (e.g. "batch 3: ").
    pub fn context(mut self, ctx: impl fmt::Display) -> Self {
        self.message = crate::redact::redact_text(&format!("{ctx}: {}", self.message)).into_owned();
        self
    }
    /// Who is at fault for this error.
    pub fn fault(&self) -> Fault {
        self.fault
    }
    /// Whether the query should wait and try the step again rather than fail: a source's
    /// backend that answered before went away (a Kafka broker restarting).
    pub fn is_transient(&self) -> bool {
        self.class == class::KAFKA_BROKER_UNAVAILABLE
    }
    /// Whether this error is of `class` (one of the [`class`] constants).
    pub fn is(&self, class: &str) -> bool {
        self.class == class
    }
    /// The stable error class, e.g. `STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION`.
    pub fn class(&self) -> &'static str {
        self.class
    }
    /// The message, without the class (including any context added with [`SluiceError::context`]).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error as text for another process of a cluster (a worker's error, for its driver to
    /// fail with): its fault, class and message. [`SluiceError::from_wire`] reads it back.
    pub fn to_wire(&self) -> String {
        let fault = match self.fault {
            Fault::Query => "query",
            Fault::Input => "input",
            Fault::Checkpoint => "checkpoint",
            Fault::Connector => "connector",
            Fault::NotSupportedYet => "notSupportedYet",
            Fault::Internal => "internal",
        };
        serde_json::json!({"fault": fault, "class": self.class, "message": self.message})
            .to_string()
    }

    /// The error [`SluiceError::to_wire`] wrote, or `None` for other text.
    pub fn from_wire(text: &str) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let fault = match v.get("fault")?.as_str()? {
            "query" => Fault::Query,
            "input" => Fault::Input,
            "checkpoint" => Fault::Checkpoint,
            "connector" => Fault::Connector,
            "notSupportedYet" => Fault::NotSupportedYet,
            "internal" => Fault::Internal,
            _ => return None,
        };
        let class = intern_class(v.get("class")?.as_str()?);
        Some(Self::new(fault, class, v.get("message")?.as_str()?))
    }
}

/// A class named by another process, as the `&'static str` every class is (each distinct name
/// is kept once for the life of the process).
fn intern_class(name: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static CLASSES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut classes = CLASSES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(c) = classes.get(name) {
        return c;
    }
    let c: &'static str = Box::leak(name.to_string().into_boxed_str());
    classes.insert(c);
    c
}

impl Clone for SluiceError {
    /// A copy with the same fault, class and message (the underlying source is not kept).
    fn clone(&self) -> Self {
        SluiceError::new(self.fault, self.class, self.message.clone())
    }
}

impl fmt::Debug for SluiceError {
    /// As derived, with the underlying error's text redacted too (see `redact`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = self
            .source
            .as_ref()
            .map(|e| crate::redact::redacted(format!("{e:?}")));
        f.debug_struct("SluiceError")
            .field("fault", &self.fault)
            .field("class", &self.class)
            .field("message", &self.message)
            .field("source", &source)
            .finish()
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

/// `conf::MEMORY_LIMIT`, named here so `error` stays below `conf` (a test checks they agree).
const MEMORY_LIMIT: &str = "sluice.memory.limit";

impl From<datafusion::error::DataFusionError> for SluiceError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        use datafusion::error::DataFusionError as D;
        if let D::ResourcesExhausted(..) = e.find_root() {
            return SluiceError::new(
                Fault::Query,
                class::MEMORY_LIMIT_EXCEEDED,
                format!(
                    "{e}. An operator that keeps rows in memory needed more than its share (half) \
                     of {MEMORY_LIMIT}; raise it (for example SET {MEMORY_LIMIT} = '2g'), or make \
                     batches smaller (maxFilesPerTrigger, maxBytesPerTrigger, maxOffsetsPerTrigger)"
                ),
            )
            .with_source(e);
        }
        let (fault, class) = match &e {
            D::SQL(..) => (Fault::Query, class::PARSE_SYNTAX_ERROR),
            D::Plan(..) | D::SchemaError(..) => (Fault::Query, class::ANALYSIS_ERROR),
            D::NotImplemented(..) => (Fault::NotSupportedYet, class::SLUICE_NOT_SUPPORTED_YET),
            D::External(inner) => {
                if let Some(s) = inner.downcast_ref::<SluiceError>() {
                    return SluiceError::new(s.fault, s.class, s.message.clone());
                }
                (Fault::Internal, class::DATAFUSION_ERROR)
            }
            // An analyzer rule's error comes wrapped in the rule's name.
            D::Context(..) => {
                if let D::External(inner) = e.find_root() {
                    if let Some(s) = inner.downcast_ref::<SluiceError>() {
                        return SluiceError::new(s.fault, s.class, s.message.clone());
                    }
                }
                (Fault::Internal, class::DATAFUSION_ERROR)
            }
            _ => (Fault::Internal, class::DATAFUSION_ERROR),
        };
        let msg = e.to_string();
        SluiceError::new(fault, class, msg).with_source(e)
    }
}

impl From<arrow::error::ArrowError> for SluiceError {
    fn from(e: arrow::error::ArrowError) -> Self {
        SluiceError::new(Fault::Internal, class::ARROW_ERROR, e.to_string()).with_source(e)
    }
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
    fn the_memory_limit_key_is_confs() {
        assert_eq!(MEMORY_LIMIT, crate::conf::MEMORY_LIMIT);
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
