//! `DataStreamWriter`: how a streaming frame becomes a running query (`write_stream().start()`).

use crate::conf::option as opt;
use crate::error::class;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Result, SluiceError};
use crate::formats::sink::{self as registry, SinkFormat};
use crate::frame::StreamFrame;
use crate::plan::{check_streaming_plan, is_streaming};
use crate::sink::foreach::{ForeachBatchSinkProvider, ForeachSinkProvider, ForeachWriter};
use crate::sink::SinkProvider;
use crate::types::BatchData;

use super::execution::continuous::{self, ContinuousExecution};
use super::execution::core::QuerySpec;
use super::execution::{MicroBatchExecution, MicroBatchTrigger};
use super::StreamingQuery;
use crate::conf::StreamingConf;
use crate::types::{OutputMode, Trigger};

/// Builds and starts a streaming query (Spark's `DataStreamWriter`).
pub struct DataStreamWriter {
    frame: StreamFrame,
    output_mode: OutputMode,
    format: String,
    options: HashMap<String, String>,
    trigger: Trigger,
    query_name: Option<String>,
    sink: Option<Arc<dyn SinkProvider>>,
}

impl DataStreamWriter {
    pub(crate) fn new(frame: StreamFrame) -> Self {
        Self {
            frame,
            output_mode: OutputMode::Append,
            format: "parquet".into(),
            options: HashMap::new(),
            trigger: Trigger::default(),
            query_name: None,
            sink: None,
        }
    }
    /// Append (default), update or complete.
    pub fn output_mode(mut self, mode: OutputMode) -> Self {
        self.output_mode = mode;
        self
    }
    /// The sink format: `parquet` (default), `json`, `csv`, `console`, `memory`, `noop`.
    pub fn format(mut self, format: impl Into<String>) -> Self {
        self.format = format.into().to_ascii_lowercase();
        self
    }
    /// A sink or query option (`path`, `checkpointLocation`, `numRows`, ...). Keys are
    /// case-insensitive, as in Spark.
    pub fn option(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        let (key, value) = (key.into(), value.to_string());
        crate::redact::remember_option(&key, &value);
        self.options.insert(key, value);
        self
    }
    /// Several options at once, as with [`DataStreamWriter::option`].
    pub fn options<K: Into<String>, V: ToString>(
        mut self,
        opts: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        for (k, v) in opts {
            let (k, v) = (k.into(), v.to_string());
            crate::redact::remember_option(&k, &v);
            self.options.insert(k, v);
        }
        self
    }
    /// Partitions a file sink's output by these columns (Spark's `partitionBy`): rows go to
    /// Hive-style `col=value/` folders, the data files hold the other columns, and batch reads
    /// of the output give the partition columns back, last.
    pub fn partition_by<S: AsRef<str>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
        let names: Vec<String> = columns
            .into_iter()
            .map(|c| c.as_ref().to_string())
            .collect();
        self.options.insert(
            "partitionBy".into(),
            serde_json::Value::from(names).to_string(),
        );
        self
    }
    /// When batches run (default: `ProcessingTime(0)`, as fast as possible).
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.trigger = trigger;
        self
    }
    /// The query's name (`queryName`); the memory sink's table name.
    pub fn query_name(mut self, name: impl Into<String>) -> Self {
        self.query_name = Some(name.into());
        self
    }
    /// Calls `f(batch, batch_id)` with every committed batch's rows, no-data batches included. A
    /// replayed batch carries the same id and rows; the batch is computed once however often `f`
    /// reads it.
    pub fn foreach_batch<F>(mut self, f: F) -> Self
    where
        F: Fn(&BatchData, u64) -> Result<()> + Send + Sync + 'static,
    {
        self.sink = Some(Arc::new(ForeachBatchSinkProvider::new(Arc::new(f))));
        self.format = SinkFormat::ForeachBatch.as_str().into();
        self
    }
    /// Calls a writer made by `factory` for every partition of every batch: `open`, `process`
    /// per row, `close`.
    pub fn foreach<F>(mut self, factory: F) -> Self
    where
        F: Fn() -> Box<dyn ForeachWriter> + Send + Sync + 'static,
    {
        self.sink = Some(Arc::new(ForeachSinkProvider::new(Arc::new(factory))));
        self.format = SinkFormat::Foreach.as_str().into();
        self
    }

    fn opt(&self, key: &str) -> Option<&str> {
        opt(&self.options, key)
    }

    /// Checks the query, prepares the checkpoint and starts its loop (micro-batch, or continuous
    /// under `Trigger::Continuous`) on its own thread. Errors in the query (output mode,
    /// unsupported operation, options, conf) and in the checkpoint (in use, corrupt) are returned
    /// here; errors while running end the query and are returned by `await_termination`.
    pub fn start(self) -> Result<StreamingQuery> {
        let session = self.frame.session().clone();
        let plan = self.frame.logical_plan().clone();
        if !is_streaming(&plan) {
            return Err(SluiceError::query(
                class::WRITE_STREAM_NOT_ALLOWED,
                "'write_stream' can be called only on a streaming frame; this one reads no \
                 stream. Read with session.read_stream(), or run it as a batch with collect().",
            ));
        }
        if let Trigger::Continuous(_) = self.trigger {
            // Spark's checkForContinuous runs first, so an aggregation gets its message.
            crate::plan::analysis::check_continuous_plan(&plan)?;
        }
        // The session's conf, parsed once for the query.
        let conf = StreamingConf::from_lookup(session.shuffle_partitions(), |k| session.conf(k))?;
        check_streaming_plan(&plan, self.output_mode, conf.check_correctness)?;
        let schema = Arc::new(plan.schema().as_arrow().clone());

        let (sink, temp_checkpoint_ok) = match &self.sink {
            Some(s) => (s.clone(), false),
            None => sink_provider(
                &session,
                &self.format,
                &self.options,
                schema.clone(),
                self.query_name.as_deref(),
            )?,
        };
        if !sink.supports_output_mode(self.output_mode) {
            return Err(SluiceError::query(
                class::STREAMING_OUTPUT_MODE_UNSUPPORTED_OPERATION,
                format!(
                    "Data source {} does not support {:?} output mode. Use append mode.",
                    self.format, self.output_mode
                ),
            ));
        }

        if let Trigger::Continuous(_) = self.trigger {
            continuous::check(&plan, self.output_mode, &self.format, sink.as_ref())?;
        }

        let (checkpoint, temporary) = match self.opt("checkpointLocation") {
            Some(p) => (PathBuf::from(p), false),
            None => match &conf.checkpoint_location {
                Some(root) => (
                    PathBuf::from(root).join(
                        self.query_name
                            .clone()
                            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                    ),
                    false,
                ),
                None if temp_checkpoint_ok => (
                    std::env::temp_dir()
                        .join(format!("sluice-checkpoint-{}", uuid::Uuid::new_v4())),
                    true,
                ),
                None => {
                    return Err(SluiceError::query(
                        class::CHECKPOINT_LOCATION_NOT_SPECIFIED,
                        "checkpointLocation must be specified either through \
                         .option(\"checkpointLocation\", DIR) or the session conf \
                         spark.sql.streaming.checkpointLocation",
                    ))
                }
            },
        };

        let late_rows = self.late_rows_spec()?;
        let spec = QuerySpec {
            session,
            plan,
            sink,
            output_mode: self.output_mode,
            checkpoint_root: checkpoint,
            temporary_checkpoint: temporary,
            name: self.query_name,
            conf,
        };
        let trigger = match self.trigger {
            Trigger::Continuous(interval) => {
                if late_rows.is_some() {
                    return Err(SluiceError::query(
                        class::UNSUPPORTED_STREAMING_OPERATION,
                        "lateRows.* options need a stateful operator; continuous processing runs \
                         stateless queries only",
                    ));
                }
                return ContinuousExecution::start(spec, interval);
            }
            Trigger::ProcessingTime(interval) => MicroBatchTrigger::ProcessingTime(interval),
            Trigger::Once => MicroBatchTrigger::Once,
            Trigger::AvailableNow => MicroBatchTrigger::AvailableNow,
        };
        MicroBatchExecution::start(spec, trigger, late_rows)
    }

    /// Starts the query writing to the table `name` (Spark's `toTable`): a file table in the
    /// session's warehouse (`spark.sql.warehouse.dir`), created on the first run with this
    /// write's format (parquet by default), schema and `partition_by` columns, or the existing
    /// table, whose format, columns and partitioning the write must match. With a `path`
    /// option, a new table's data lives there (Spark's external table). Read it with
    /// `session.table(name)` or SQL; see [`crate::catalog`].
    pub fn to_table(mut self, name: &str) -> Result<StreamingQuery> {
        if self.sink.is_some() {
            return Err(SluiceError::query(
                class::UNSUPPORTED_DATA_SOURCE,
                "foreach and foreachBatch write to their function, not to a table: use start()",
            ));
        }
        let plan = self.frame.logical_plan();
        if !is_streaming(plan) {
            return self.start();
        }
        let schema = plan.schema().as_arrow().clone();
        let partition_by = crate::sink::file::partition_by_option(&self.options)?;
        let table = self.frame.session().warehouse().table_for_write(
            name,
            &self.format,
            &schema,
            &partition_by,
            &self.options,
        )?;
        self.options.retain(|k, _| {
            !k.eq_ignore_ascii_case("path") && !k.eq_ignore_ascii_case("partitionBy")
        });
        self.options.insert("path".into(), table.location.clone());
        if !table.partition_columns.is_empty() {
            self = self.partition_by(&table.partition_columns);
        }
        self.start()
    }

    /// The late-row side output from the `lateRows.*` options: `lateRows.format` (parquet,
    /// json, csv, console or kafka) and that sink's options with the prefix (e.g.
    /// `lateRows.path`, `lateRows.topic`, `lateRows.kafka.bootstrap.servers`).
    fn late_rows_spec(&self) -> Result<Option<LateRowsSpec>> {
        const PREFIX: &str = "laterows.";
        let options: HashMap<String, String> = self
            .options
            .iter()
            .filter(|(k, _)| k.to_ascii_lowercase().starts_with(PREFIX))
            .map(|(k, v)| (k[PREFIX.len()..].to_string(), v.clone()))
            .collect();
        if options.is_empty() {
            return Ok(None);
        }
        let format = opt(&options, "format")
            .map(str::to_ascii_lowercase)
            .ok_or_else(|| {
                SluiceError::query(
                    class::LATE_ROWS_FORMAT_MISSING,
                    "lateRows.* options are set but lateRows.format is not: set it to parquet, \
                     json, csv, console or kafka",
                )
            })?;
        let late_sink = SinkFormat::parse(&format).ok();
        if !late_sink
            .is_some_and(|f| f.is_file() || matches!(f, SinkFormat::Console | SinkFormat::Kafka))
        {
            return Err(SluiceError::query(
                class::LATE_ROWS_FORMAT_UNSUPPORTED,
                format!(
                    "lateRows.format {format:?} is not a late-row sink: use parquet, json, csv, \
                     console or kafka"
                ),
            ));
        }
        if let (Some(main), Some(late)) = (self.opt("path"), opt(&options, "path")) {
            if std::path::Path::new(main) == std::path::Path::new(late) {
                return Err(SluiceError::query(
                    class::LATE_ROWS_PATH_CLASH,
                    format!(
                        "lateRows.path is the query's own output path {main}: late rows need a \
                         directory of their own"
                    ),
                ));
            }
        }
        Ok(Some(LateRowsSpec { format, options }))
    }
}

/// Where a query's late rows go (see `DataStreamWriter::late_rows_spec`).
pub(crate) struct LateRowsSpec {
    pub format: String,
    pub options: HashMap<String, String>,
}

/// The sink of `format` with `options` for rows of `schema` (through the sink registry); also
/// whether the sink may run on a temporary checkpoint (console, memory, noop), as in Spark.
pub(crate) fn sink_provider(
    session: &crate::session::Session,
    format: &str,
    options: &HashMap<String, String>,
    schema: arrow::datatypes::SchemaRef,
    query_name: Option<&str>,
) -> Result<(Arc<dyn SinkProvider>, bool)> {
    if let Some(factory) = registry::registered_format(format) {
        return Ok((factory.create(options, schema, query_name)?, false));
    }
    let format = SinkFormat::parse(format)?;
    let provider = registry::sink_provider(session.context(), format, options, schema, query_name)?;
    Ok((provider, format.allows_temporary_checkpoint()))
}
