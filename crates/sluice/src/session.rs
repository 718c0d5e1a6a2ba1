//! `Session`: configuration, `read_stream()`, `sql()`, and the catalog of views and tables.
//!
//! A session owns one DataFusion `SessionContext` (with Spark's functions from
//! `datafusion-spark` and Sluice's Spark-semantics fixes) and one tokio runtime on which every
//! batch of every query of the session executes.

use crate::error::class;
use crate::sync::RwLockExt;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::datasource::{provider_as_source, MemTable};
use datafusion::execution::FunctionRegistry;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder, ScalarUDF};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_spark::SessionStateBuilderSpark;

use crate::conf::SHUFFLE_PARTITIONS;
use crate::error::{Result, SluiceError};
use crate::formats::source::{source_provider, SourceFormat};
use crate::frame::StreamFrame;
use crate::plan::fixes::{SparkCastRule, SparkRound};
use crate::plan::StreamingRelation;
use crate::progress::StreamingQueryListener;
use crate::source::memory::MemoryStream;
use crate::source::SourceProvider;

/// Builds a [`Session`].
#[derive(Debug, Clone)]
pub struct SessionBuilder {
    shuffle_partitions: usize,
    conf: HashMap<String, String>,
}

impl Default for SessionBuilder {
    fn default() -> Self {
        Self {
            shuffle_partitions: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            conf: HashMap::new(),
        }
    }
}

impl SessionBuilder {
    /// Number of partitions of shuffles and of state (`spark.sql.shuffle.partitions`). Sluice
    /// defaults to the number of cores, not Spark's 200. Pinned in a query's checkpoint at its
    /// first run.
    pub fn shuffle_partitions(mut self, n: usize) -> Self {
        self.shuffle_partitions = n.max(1);
        self
    }
    /// Any Spark-style conf (`spark.sql.streaming.minBatchesToRetain`, ...).
    pub fn config(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        let (key, value) = (key.into(), value.to_string());
        crate::redact::remember_option(&key, &value);
        self.conf.insert(key, value);
        self
    }
    /// Creates the session: its DataFusion context (Spark dialect and functions) and runtime.
    pub fn build(self) -> Result<Session> {
        if let Some(v) = self.conf.get(crate::redact::REDACTION_REGEX) {
            crate::redact::add_redaction_regex(v).map_err(|e| {
                SluiceError::query(
                    class::INVALID_CONF_VALUE,
                    format!(
                        "{} is not a regular expression: {e}",
                        crate::redact::REDACTION_REGEX
                    ),
                )
            })?;
            // Confs set before the regex: their keys may be secrets by it.
            for (k, v) in &self.conf {
                crate::redact::remember_option(k, v);
            }
        }
        let mut partitions = self.shuffle_partitions;
        if let Some(v) = self.conf.get(SHUFFLE_PARTITIONS) {
            partitions = crate::conf::parse_partitions(v)?;
        }
        // Spark's SQL dialect (LONG, backquoted names, ...); Spark's functions come below.
        let config = SessionConfig::new()
            .with_target_partitions(partitions.max(1))
            .set_str("datafusion.sql_parser.dialect", "spark")
            // Spark types `1.5` as DECIMAL(2,1) (plan/literals.rs).
            .set_bool("datafusion.sql_parser.parse_float_as_decimal", true)
            // spark.sql.ansi.enabled (sluice-spark ansi.rs).
            .with_enable_ansi_mode(ansi_conf(self.conf.get(crate::conf::ANSI_ENABLED))?);
        // sluice.memory.limit: DataFusion's operators that buffer (sorts, aggregations, join
        // build sides) spill to the temporary directory past their share of it.
        let memory = crate::conf::MemoryBudget::from_lookup(&|k: &str| self.conf.get(k).cloned())?;
        let runtime_env = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(
                datafusion::execution::memory_pool::FairSpillPool::new(memory.pool_bytes()),
            ))
            .build_arc()?;
        // An external sort reserves this much up front for merging its spilled runs; within
        // the pool (DataFusion's 10 MB default would not fit a small budget).
        let config = config.set_usize(
            "datafusion.execution.sort_spill_reservation_bytes",
            (memory.pool_bytes() / 8).min(10 << 20),
        );
        let mut builder = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime_env)
            .with_default_features()
            .with_spark_features()
            // Spark's division runs before type coercion (it changes types), casts after it.
            .with_analyzer_rules(
                std::iter::once(Arc::new(crate::plan::ansi::SparkArithmeticRule) as _)
                    .chain(datafusion::optimizer::Analyzer::new().rules)
                    .collect(),
            )
            .with_analyzer_rule(Arc::new(SparkCastRule))
            // input_file_name() and co. (helper scalars, plan/input_file.rs).
            .with_analyzer_rule(crate::plan::input_file::rule())
            .with_query_planner(Arc::new(crate::plan::planner::SluiceQueryPlanner));
        // Nested types (helper nested): Spark's `s.field` and 0-based `arr[i]` before
        // DataFusion's planner.
        let case_sensitive = self
            .conf
            .get("spark.sql.caseSensitive")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let ansi = ansi_conf(self.conf.get(crate::conf::ANSI_ENABLED))?;
        if let Some(planners) = builder.expr_planners() {
            planners.insert(
                0,
                Arc::new(crate::plan::field_access::SparkFieldAccessPlanner::new(
                    case_sensitive,
                )),
            );
            // Spark's casts of a string operand (plan/promote_strings.rs).
            planners.insert(
                0,
                Arc::new(crate::plan::promote_strings::PromoteStrings::new(ansi)),
            );
        }
        // Scalar functions (helper scalars): EXTRACT / SUBSTRING / OVERLAY syntax to Sluice's
        // functions, bound once they are registered; the SQL type TIMESTAMP_NTZ.
        let syntax = crate::plan::functions::SyntaxPlanner::default();
        if let Some(planners) = builder.expr_planners() {
            planners.insert(0, Arc::new(syntax.clone()));
        }
        builder = builder.with_type_planner(Arc::new(crate::plan::functions::SparkTypePlanner));
        let mut state = builder.build();
        for zero_based in [false, true] {
            state.register_udf(Arc::new(ScalarUDF::new_from_impl(
                crate::plan::field_access::SparkElementAt::new(zero_based),
            )))?;
        }
        if let Some(get_field) = state.scalar_functions().get("get_field").cloned() {
            state.register_udf(Arc::new(crate::plan::field_access::spark_get_field(
                get_field,
                case_sensitive,
            )))?;
        }
        if let Some(round) = state.scalar_functions().get("round").cloned() {
            state.register_udf(Arc::new(ScalarUDF::new_from_impl(SparkRound::new(round))))?;
        }
        if let Some(to_char) = state.scalar_functions().get("to_char").cloned() {
            state.register_udf(Arc::new(ScalarUDF::new_from_impl(
                crate::plan::fixes::SparkDateFormat::new(to_char),
            )))?;
        }
        for udf in crate::operators::window::window_udfs()
            .into_iter()
            .chain(crate::plan::json::json_udfs())
            .chain(crate::plan::ansi::try_udfs())
        {
            state.register_udf(Arc::new(udf))?;
        }
        // Spark's function library beyond datafusion-spark (sluice-spark functions/).
        crate::plan::functions::register(&mut state, crate::plan::input_file::udfs())?;
        syntax.bind(&state);
        // Spark's generators (explode, LATERAL VIEW, ..): placeholders that plan_generators plans.
        for udf in crate::plan::generate::generator_udfs() {
            state.register_udf(Arc::new(udf))?;
        }
        if !state.scalar_functions().contains_key("split") {
            state.register_udf(Arc::new(crate::plan::generate::split::split_udf()))?;
        }
        let ctx = SessionContext::new_with_state(state);
        // Tables: the registered views, then the warehouse's file tables (catalog.rs).
        let warehouse = crate::catalog::Warehouse::new(
            self.conf
                .get(crate::catalog::WAREHOUSE_DIR)
                .map(String::as_str)
                .unwrap_or(crate::catalog::DEFAULT_WAREHOUSE_DIR),
        )?;
        {
            let opts = ctx.state().config_options().catalog.clone();
            if let Some(catalog) = ctx.catalog(&opts.default_catalog) {
                let schema = Arc::new(crate::catalog::WarehouseSchema::new(
                    catalog.schema(&opts.default_schema),
                    warehouse.clone(),
                ));
                catalog.register_schema(&opts.default_schema, schema.clone())?;
                // `default.t`, as Spark's one database is called.
                catalog.register_schema("default", schema)?;
            }
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(2),
            )
            .thread_name("sluice-exec")
            .enable_all()
            .build()
            .map_err(|e| SluiceError::internal(format!("cannot start the tokio runtime: {e}")))?;
        configure_storage(&self.conf);
        Ok(Session {
            inner: Arc::new(SessionInner {
                ctx,
                shuffle_partitions: partitions.max(1),
                conf: RwLock::new(self.conf),
                warehouse,
                runtime,
                listeners: RwLock::new(Vec::new()),
            }),
        })
    }
}

/// The value of `spark.sql.ansi.enabled` (false when unset).
fn ansi_conf(v: Option<&String>) -> Result<bool> {
    Ok(crate::conf::parse_bool(&|_: &str| v.cloned(), crate::conf::ANSI_ENABLED)?.unwrap_or(false))
}

struct SessionInner {
    ctx: SessionContext,
    shuffle_partitions: usize,
    conf: RwLock<HashMap<String, String>>,
    warehouse: crate::catalog::Warehouse,
    runtime: tokio::runtime::Runtime,
    listeners: RwLock<Vec<Arc<dyn StreamingQueryListener>>>,
}

/// The entry point (Spark's `SparkSession`). Cheap to clone; clones share everything.
///
/// Its methods are blocking: call them from ordinary threads, not from inside an async runtime.
#[derive(Clone)]
pub struct Session {
    inner: Arc<SessionInner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("shuffle_partitions", &self.inner.shuffle_partitions)
            .finish()
    }
}

impl Session {
    /// A builder with the default settings (Spark's `SparkSession.builder`).
    pub fn builder() -> SessionBuilder {
        SessionBuilder::default()
    }
    /// The session's number of shuffle/state partitions.
    pub fn shuffle_partitions(&self) -> usize {
        self.inner.shuffle_partitions
    }
    /// A conf value set on the builder or with `set_conf`.
    pub fn conf(&self, key: &str) -> Option<String> {
        self.inner.conf.read_unpoisoned().get(key).cloned()
    }
    /// Sets a conf value (Spark's `spark.conf.set`); queries started afterwards see it.
    pub fn set_conf(&self, key: impl Into<String>, value: impl ToString) {
        let (key, value) = (key.into(), value.to_string());
        crate::redact::remember_option(&key, &value);
        if key == crate::conf::ANSI_ENABLED {
            // A bad value is refused when a query starts (`StreamingConf`).
            if let Ok(ansi) = ansi_conf(Some(&value)) {
                let state = self.inner.ctx.state_ref();
                state
                    .write()
                    .config_mut()
                    .options_mut()
                    .execution
                    .enable_ansi_mode = ansi;
            }
        }
        let storage = is_storage_key(&key);
        self.inner.conf.write_unpoisoned().insert(key, value);
        if storage {
            configure_storage(&self.inner.conf.read_unpoisoned());
        }
    }
    /// Removes a conf value set with `set_conf` (Spark's `spark.conf.unset`): the key reads its
    /// default again.
    pub fn unset_conf(&self, key: &str) {
        if key == crate::conf::ANSI_ENABLED {
            self.set_conf(key, "false");
        }
        self.inner.conf.write_unpoisoned().remove(key);
        if is_storage_key(key) {
            crate::storage::configure(self.inner.conf.read_unpoisoned().iter());
        }
    }
    /// The keys set on the builder or with `set_conf`.
    pub fn conf_keys(&self) -> Vec<String> {
        self.inner.conf.read_unpoisoned().keys().cloned().collect()
    }
    /// The session's warehouse: the folder of its tables (`spark.sql.warehouse.dir`, fixed
    /// when the session is built, as Spark's static conf).
    pub fn warehouse(&self) -> &crate::catalog::Warehouse {
        &self.inner.warehouse
    }
    /// The DataFusion context behind the session (functions, tables).
    pub fn context(&self) -> &SessionContext {
        &self.inner.ctx
    }
    pub(crate) fn df_state(&self) -> SessionState {
        self.inner.ctx.state()
    }
    /// Runs a future on the session's runtime and waits for it.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.inner.runtime.block_on(fut)
    }
    /// The session's runtime, for code that runs futures from ordinary threads.
    pub(crate) fn runtime_handle(&self) -> &tokio::runtime::Handle {
        self.inner.runtime.handle()
    }
    /// Adds a listener that receives the events of every query started afterwards.
    pub fn add_listener(&self, listener: Arc<dyn StreamingQueryListener>) {
        self.inner.listeners.write_unpoisoned().push(listener);
    }
    pub(crate) fn listeners(&self) -> Vec<Arc<dyn StreamingQueryListener>> {
        self.inner.listeners.read_unpoisoned().clone()
    }

    /// Defines a streaming source (Spark's `readStream`).
    pub fn read_stream(&self) -> DataStreamReader {
        DataStreamReader {
            session: self.clone(),
            format: None,
            schema: None,
            options: HashMap::new(),
        }
    }

    /// A streaming frame over any source provider (custom sources plug in here).
    pub fn stream(&self, provider: Arc<dyn SourceProvider>) -> Result<StreamFrame> {
        // Spark's COLUMN_ALREADY_EXISTS under the session's name rules (plan/names.rs).
        crate::plan::names::check_duplicate_columns(
            crate::plan::names::NameRules::of(self)?,
            &provider.schema(),
        )?;
        let relation = StreamingRelation::new(provider);
        let name = format!("stream_{}", relation.id());
        let plan = LogicalPlanBuilder::scan(name, provider_as_source(Arc::new(relation)), None)?
            .build()?;
        Ok(StreamFrame::new(self.clone(), plan))
    }

    /// Runs SQL over the session's views and tables. The result is a stream when the query
    /// reads one (`is_streaming()`), else a batch frame.
    pub fn sql(&self, query: &str) -> Result<StreamFrame> {
        // Nested types: schema_of_json('..') folded to its literal result.
        let query = crate::plan::json::fold_schema_of_json(query)?;
        let plan = crate::plan::sql::plan_sql(self, &query)
            .map_err(crate::plan::functions::unresolved_routine)?;
        // Generators: the placeholders of explode(..), LATERAL VIEW, .. become Generate nodes.
        let plan = crate::plan::generate::plan_generators(plan)?;
        let plan = self.analyze(plan)?;
        // Nested types: no GROUP BY on a map, as in Spark.
        crate::plan::field_access::check_grouping_types(&plan)?;
        Ok(StreamFrame::new(self.clone(), plan))
    }

    /// The frame of a registered view or table.
    pub fn table(&self, name: &str) -> Result<StreamFrame> {
        let df = self.block_on(self.inner.ctx.table(name))?;
        let plan = self.analyze(df.logical_plan().clone())?;
        Ok(StreamFrame::new(self.clone(), plan))
    }

    /// Runs DataFusion's analyser (inlines views, so streams inside views become visible).
    pub(crate) fn analyze(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        let state = self.df_state();
        Ok(state
            .analyzer()
            .execute_and_check(plan, state.config_options(), |_, _| {})?)
    }

    /// Registers (or replaces) a batch table with the given rows.
    pub fn register_batches(
        &self,
        name: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<()> {
        let table = MemTable::try_new(schema, vec![batches])?;
        let _ = self.inner.ctx.deregister_table(name)?;
        self.inner.ctx.register_table(name, Arc::new(table))?;
        Ok(())
    }

    /// Batch reads of files (Spark's `spark.read`). A directory written by Sluice's file sink
    /// is read through its `_spark_metadata` manifest, so only committed files are seen.
    pub fn read(&self) -> DataFrameReader {
        DataFrameReader {
            session: self.clone(),
            format: "parquet".into(),
            schema: None,
            options: HashMap::new(),
        }
    }
}

/// Defines a streaming source (Spark's `DataStreamReader`).
#[derive(Debug)]
pub struct DataStreamReader {
    session: Session,
    format: Option<String>,
    schema: Option<SchemaRef>,
    options: HashMap<String, String>,
}

impl DataStreamReader {
    /// `json`, `csv`, `parquet`, `text`, `rate`, `rate-micro-batch`.
    pub fn format(mut self, format: impl Into<String>) -> Self {
        self.format = Some(format.into().to_ascii_lowercase());
        self
    }
    /// The schema as a Spark DDL string, e.g. `"ts TIMESTAMP, user STRING, amount DOUBLE"`.
    pub fn schema(mut self, ddl: &str) -> Result<Self> {
        self.schema = Some(crate::schema::parse_ddl_schema(ddl)?);
        Ok(self)
    }
    /// The schema as an Arrow schema.
    pub fn schema_ref(mut self, schema: SchemaRef) -> Self {
        self.schema = Some(schema);
        self
    }
    /// A source option (`maxFilesPerTrigger`, `mode`, `header`, ...).
    pub fn option(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        let (key, value) = (key.into(), value.to_string());
        crate::redact::remember_option(&key, &value);
        self.options.insert(key, value);
        self
    }
    /// Several source options at once, as with [`DataStreamReader::option`].
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
    /// Defines the stream. File formats read the directory `path`; `rate` sources ignore it.
    pub fn load(self, path: impl AsRef<str>) -> Result<StreamFrame> {
        let name = self.format.as_deref().unwrap_or("parquet");
        if let Some(factory) = crate::formats::source::registered_format(name) {
            let provider = factory.create(path.as_ref(), self.schema.clone(), &self.options)?;
            return self.session.stream(provider);
        }
        let format = SourceFormat::parse(name)?;
        let provider = source_provider(format, path.as_ref(), self.schema.clone(), &self.options)?;
        self.session.stream(provider)
    }
    /// A stream without a path (`rate`, `rate-micro-batch`).
    pub fn load_source(self) -> Result<StreamFrame> {
        self.load("")
    }
    /// A JSON-lines file stream reading the directory `path` (`format("json").load(path)`).
    pub fn json(self, path: impl AsRef<str>) -> Result<StreamFrame> {
        self.format("json").load(path)
    }
    /// A CSV file stream reading the directory `path` (`format("csv").load(path)`).
    pub fn csv(self, path: impl AsRef<str>) -> Result<StreamFrame> {
        self.format("csv").load(path)
    }
    /// A Parquet file stream reading the directory `path` (`format("parquet").load(path)`).
    pub fn parquet(self, path: impl AsRef<str>) -> Result<StreamFrame> {
        self.format("parquet").load(path)
    }
    /// A text file stream reading the directory `path`, one `value` row per line
    /// (`format("text").load(path)`).
    pub fn text(self, path: impl AsRef<str>) -> Result<StreamFrame> {
        self.format("text").load(path)
    }
}

/// Batch reads of files (Spark's `DataFrameReader`).
#[derive(Debug)]
pub struct DataFrameReader {
    session: Session,
    format: String,
    schema: Option<SchemaRef>,
    options: HashMap<String, String>,
}

impl DataFrameReader {
    /// The format: `parquet` (default), `json`, `csv`, `text`, or `kafka` (read with
    /// [`DataFrameReader::load_source`]).
    pub fn format(mut self, format: impl Into<String>) -> Self {
        self.format = format.into().to_ascii_lowercase();
        self
    }
    /// The schema as a Spark DDL string; needed to read a directory with no committed files.
    pub fn schema(mut self, ddl: &str) -> Result<Self> {
        self.schema = Some(crate::schema::parse_ddl_schema(ddl)?);
        Ok(self)
    }
    /// A read option of the format (`header`, `sep` for CSV; Spark's reader options).
    pub fn option(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        let (key, value) = (key.into(), value.to_string());
        crate::redact::remember_option(&key, &value);
        self.options.insert(key, value);
        self
    }
    /// Reads a source that takes no path: `format("kafka")` with its options (Spark's `load()`;
    /// see [`crate::kafka::source::read_batch`]).
    pub fn load_source(self) -> Result<StreamFrame> {
        let (schema, batches) = match self.format.as_str() {
            #[cfg(feature = "kafka")]
            "kafka" => crate::kafka::source::read_batch(&self.options)?,
            other
                if SourceFormat::parse(other)
                    .is_ok_and(|f| !f.is_file() && f != SourceFormat::Kafka) =>
            {
                return Err(SluiceError::query(
                    class::UNSUPPORTED_DATA_SOURCE,
                    format!(
                        "Data source {other} does not support batch reads: it is a stream \
                         only; read it with read_stream().format({other:?})"
                    ),
                ))
            }
            other => {
                return Err(SluiceError::query(
                    class::UNABLE_TO_INFER_SCHEMA,
                    format!(
                        "Unable to infer schema for {other}: spark.read.format({other:?}).load() \
                         was given no path; give the file or folder to read"
                    ),
                ))
            }
        };
        let table = MemTable::try_new(schema, vec![batches])?;
        let plan = LogicalPlanBuilder::scan("kafka", provider_as_source(Arc::new(table)), None)?
            .build()?;
        Ok(StreamFrame::new(self.session.clone(), plan))
    }

    /// Reads every file of `path` (a file or a directory). For a directory written by a file
    /// sink, only the files its manifest lists. A source without paths (`kafka`) ignores it.
    pub fn load(self, path: impl AsRef<str>) -> Result<StreamFrame> {
        if self.format == "kafka" {
            return self.load_source();
        }
        let path = PathBuf::from(path.as_ref());
        let (schema, batches) = crate::sink::file::read::read_output(
            &path,
            &self.format,
            self.schema.clone(),
            &self.options,
        )?;
        let Some(schema) = schema else {
            return Err(SluiceError::query(
                class::UNABLE_TO_INFER_SCHEMA,
                format!(
                    "Unable to infer schema for {} at {}: it has no committed files. Give \
                     .schema(..) to read an empty directory.",
                    self.format,
                    path.display()
                ),
            ));
        };
        let table = MemTable::try_new(schema, vec![batches])?;
        let plan = LogicalPlanBuilder::scan("files", provider_as_source(Arc::new(table)), None)?
            .build()?;
        Ok(StreamFrame::new(self.session.clone(), plan))
    }
}

// Name resolution (plan/sql_names.rs) finds tables through the session's catalog.
impl crate::plan::sql_names::Tables for Session {
    fn table(
        &self,
        written: &str,
        rules: crate::plan::names::NameRules,
    ) -> Result<Option<(String, SchemaRef)>> {
        let state = self.df_state();
        let opts = &state.config_options().catalog;
        let Some(schema) = self
            .inner
            .ctx
            .catalog(&opts.default_catalog)
            .and_then(|c| c.schema(&opts.default_schema))
        else {
            return Ok(None);
        };
        let names = schema.table_names();
        let name = names
            .iter()
            .find(|n| n.as_str() == written)
            .or_else(|| names.iter().find(|n| rules.matches(written, n)));
        let Some(name) = name else {
            return Ok(None);
        };
        Ok(self
            .block_on(schema.table(name))?
            .map(|t| (name.clone(), t.schema())))
    }
}

impl MemoryStream {
    /// A streaming frame reading this stream.
    pub fn to_frame(&self, session: &Session) -> Result<StreamFrame> {
        session.stream(Arc::new(self.clone()))
    }
}

impl Session {
    /// The session's object store options (`spark.hadoop.*`, `sluice.storage.*`), for a
    /// cluster's workers to reach the same stores.
    pub(crate) fn storage_conf(&self) -> Vec<(String, String)> {
        self.conf_keys()
            .into_iter()
            .filter(|k| is_storage_key(k))
            .filter_map(|k| self.conf(&k).map(|v| (k, v)))
            .collect()
    }
}

/// Conf keys object stores are built from (`spark.hadoop.fs.s3a.endpoint`, ...).
fn is_storage_key(key: &str) -> bool {
    key.starts_with("spark.hadoop.") || key.starts_with("sluice.storage.")
}

/// Hands the session's object store options to [`crate::storage::configure`] when it has any:
/// the options are process-wide (Hadoop's `FileSystem` cache is too), and the last session
/// that set some decides; a session without any leaves them alone.
fn configure_storage(conf: &HashMap<String, String>) {
    if conf.keys().any(|k| is_storage_key(k)) {
        crate::storage::configure(conf.iter());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_reads_honour_reader_options() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("part-0.csv"), "a;b\n1;x\n2;y\n").unwrap();
        let session = Session::builder().shuffle_partitions(1).build().unwrap();
        let read = |header: bool| -> Result<usize> {
            let mut reader = session.read().format("csv").schema("a INT, b STRING")?;
            reader = reader.option("sep", ";");
            if header {
                reader = reader.option("header", "true");
            }
            let frame = reader.load(dir.path().to_str().unwrap_or_default())?;
            Ok(frame.collect()?.iter().map(|b| b.num_rows()).sum())
        };
        assert_eq!(read(true).unwrap(), 2, "the header line is not a row");
        // without header=true the line `a;b` is data, and `a` is no INT
        let e = read(false).unwrap_err();
        assert!(e.message().contains("'a' as type 'Int32'"), "{e}");
    }

    #[test]
    fn a_session_honours_a_user_set_redaction_regex() {
        assert!(!crate::redact::is_secret_key("my.vault.zzlocker"));
        // The secret conf first: the regex, set after it, still covers it.
        let s = Session::builder()
            .config("my.vault.zzlocker", "locker-value-81")
            .config(crate::redact::REDACTION_REGEX, "(?i)zzlocker")
            .build()
            .unwrap();
        assert!(crate::redact::is_secret_key("my.vault.zzlocker"));
        s.set_conf("other.zzlocker", "locker-value-82");
        let e = SluiceError::query("X", "got locker-value-81 and locker-value-82");
        let r = crate::redact::REDACTED;
        assert_eq!(e.message(), format!("got {r} and {r}"));
        let Err(bad) = Session::builder()
            .config(crate::redact::REDACTION_REGEX, "(unclosed")
            .build()
        else {
            panic!("a regex that does not compile is refused");
        };
        assert_eq!(bad.class(), "INVALID_CONF_VALUE", "{bad}");
    }
}
