//! Delta Lake tables for Sluice, on the `deltalake` crate (delta-rs).
//!
//! - **The streaming sink** `write_stream().format("delta").option("path", ..)` (and a
//!   pipeline's `connector = 'delta'`), once [`register`] has added the format: append and
//!   complete output modes as Spark's Delta sink has them, `partitionBy`, `mergeSchema`.
//!   Exactly once as Spark's Delta sink does it: each batch's commit carries a transaction
//!   action (`txn`) with the query id as `appId` and the batch id as `version`, so a replayed
//!   batch whose commit is in the table is skipped.
//! - **The streaming source** `read_stream().format("delta").load(path)`: the table's versions
//!   as offsets (`startingVersion`, `startingTimestamp`, `maxFilesPerTrigger`,
//!   `maxBytesPerTrigger`, `ignoreDeletes`, `skipChangeCommits`), so one query's table feeds
//!   another (see `source/`).
//! - **The batch writer** [`write_batch`] for `foreach_batch`: the seed document's
//!   `batch.write.format("delta").option("txnAppId", ..).option("txnVersion", batch_id)` pattern,
//!   which skips a batch the table already has.
//!
//! Local paths, `file://` URIs and object stores (`s3://`, `gs://`, `abfss://`: the engine's
//! stores, with its credentials from `spark.hadoop.*` and its retries, handed to delta-rs).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use deltalake::kernel::transaction::CommitProperties;
use deltalake::kernel::Transaction;
use deltalake::operations::write::SchemaMode;
use deltalake::protocol::SaveMode;
use deltalake::DeltaTable;
use sluice::error::class;
use sluice::formats::sink::SinkFactory;
use sluice::sink::{Sink, SinkContext, SinkProvider};
use sluice::types::{BatchData, OutputMode};
use sluice::{Result, SluiceError};

/// Adds the `delta` sink format to every session of the process.
pub fn register() {
    sluice::formats::sink::register_format("delta", Arc::new(DeltaSinkFactory));
    sluice::formats::source::register_format("delta", Arc::new(source::DeltaSourceFactory));
    // A query on workers reads a Delta source's files there.
    sluice::source::remote::register_read(source::READ_KIND, source::read_on_worker);
}

mod source;
pub use source::DeltaSourceProvider;

fn option<'a>(options: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.as_str())
}

fn bool_option(options: &HashMap<String, String>, key: &str) -> Result<bool> {
    match option(options, key).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) if v == "true" => Ok(true),
        Some(v) if v == "false" => Ok(false),
        Some(v) => Err(SluiceError::query(
            class::INVALID_OPTION_VALUE,
            format!("option {key} must be true or false, got {v:?}"),
        )),
    }
}

/// The table location of `path` (a local path or a `file://` URI) as a URL.
fn table_url(path: &str) -> Result<url::Url> {
    let path = path.trim();
    if path.is_empty() {
        return Err(SluiceError::query(
            class::PATH_NOT_SPECIFIED,
            "'path' is not specified for the delta sink: add .option(\"path\", TABLE_DIR)",
        ));
    }
    if let Some(loc) = sluice::storage::object_location(path)
        .map_err(|e| SluiceError::io(sluice::Fault::Query, format!("the Delta table {path}"), e))?
    {
        // The store's own spelling (`s3a://` is `s3://`), with a slash at the end: a folder.
        let text = format!("{}/{}/", loc.root_url, loc.key.as_ref());
        return url::Url::parse(&text).map_err(|e| {
            SluiceError::query(
                class::INVALID_OPTION_VALUE,
                format!("the Delta table path {path} is not a URL: {e}"),
            )
        });
    }
    if let Ok(url) = url::Url::parse(path) {
        if url.scheme() == "file" {
            return Ok(url);
        }
        if url.scheme().len() > 1 {
            return Err(SluiceError::not_supported_yet(format!(
                "the Delta table {path}: the {}:// scheme is not an object store Sluice knows \
                 (s3://, s3a://, gs://, abfss://, az://, memory://, or a local path)",
                url.scheme()
            )));
        }
    }
    let abs = std::path::absolute(path)
        .map_err(|e| SluiceError::io(sluice::Fault::Query, format!("resolving {path}"), e))?;
    std::fs::create_dir_all(&abs).map_err(|e| {
        SluiceError::io(
            sluice::Fault::Connector,
            format!("creating the Delta table folder {}", abs.display()),
            e,
        )
    })?;
    url::Url::from_directory_path(&abs).map_err(|_| {
        SluiceError::query(
            class::INVALID_OPTION_VALUE,
            format!("the Delta table path {path} is not a folder path"),
        )
    })
}

/// The folder of a table URL as the engine's storage names it: a local path, or the URL text
/// for an object store.
fn table_dir(url: &url::Url) -> std::path::PathBuf {
    match url.to_file_path() {
        Ok(p) if url.scheme() == "file" => p,
        _ => std::path::PathBuf::from(url.as_str().trim_end_matches('/')),
    }
}

/// A table builder on the engine's object store for `s3://`, `gs://`, ... tables (Sluice's
/// credentials, retries and counters; delta-rs commits with conditional creates there), on
/// delta-rs's own file store for local ones.
fn table_builder(url: &url::Url) -> deltalake::DeltaResult<deltalake::DeltaTableBuilder> {
    register_log_stores();
    let builder = deltalake::DeltaTableBuilder::from_url(url.clone())?;
    if url.scheme() == "file" {
        return Ok(builder);
    }
    match sluice::storage::object_location(table_dir(url)) {
        Ok(Some(loc)) => Ok(builder.with_storage_backend(loc.store, url.clone())),
        Ok(None) => Ok(builder),
        Err(e) => Err(deltalake::DeltaTableError::Generic(e.to_string())),
    }
}

/// Opens a table (its newest version, or `version`).
async fn open_table(url: &url::Url, version: Option<u64>) -> deltalake::DeltaResult<DeltaTable> {
    let builder = table_builder(url)?;
    match version {
        Some(v) => builder.with_version(v as _).load().await,
        None => builder.load().await,
    }
}

/// Opens a table that may not exist yet (a first write creates it).
async fn try_open_table(url: &url::Url) -> deltalake::DeltaResult<DeltaTable> {
    let mut table = table_builder(url)?.build()?;
    match table.load().await {
        Ok(()) => Ok(table),
        Err(deltalake::DeltaTableError::NotATable(_)) => Ok(table),
        Err(e) => Err(e),
    }
}

/// delta-rs's default log store (commits with `PutMode::Create`, which Sluice's stores do as
/// conditional creates) for the object store schemes, once.
fn register_log_stores() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let registry = deltalake::logstore::logstore_factories();
        let Some(default) = url::Url::parse("memory://")
            .ok()
            .and_then(|u| registry.get(&u).map(|f| f.value().clone()))
        else {
            return;
        };
        for scheme in ["s3", "s3a", "gs", "abfss", "abfs", "az"] {
            if let Ok(u) = url::Url::parse(&format!("{scheme}://")) {
                registry.entry(u).or_insert_with(|| default.clone());
            }
        }
    });
}

fn delta_error(what: &str, url: &url::Url, e: deltalake::DeltaTableError) -> SluiceError {
    let hint = match &e {
        deltalake::DeltaTableError::SchemaMismatch { .. } => {
            " The rows' columns differ from the table's: select the table's columns, or set \
             .option(\"mergeSchema\", \"true\") to add the new ones"
        }
        _ => "",
    };
    SluiceError::connector(
        class::DELTA_WRITE_FAILED,
        format!("{what} the Delta table {url}: {e}.{hint}"),
    )
}

/// Runs `fut` to completion on a runtime of its own, on a thread of its own (a sink is called
/// from the query's thread, which may already be inside the session's runtime).
fn run<T: Send>(fut: impl std::future::Future<Output = T> + Send) -> Result<T> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map(|rt| rt.block_on(fut))
                    .map_err(|e| {
                        SluiceError::internal(format!("cannot start a runtime for Delta: {e}"))
                    })
            })
            .join()
            .unwrap_or_else(|_| Err(SluiceError::internal("a Delta write thread panicked")))
    })
}

/// Spark's types as Delta has them: every column nullable (a NOT NULL column would be a Delta
/// invariant), Sluice's timestamps (UTC microseconds, no zone: Spark's `TIMESTAMP`) as Delta
/// `timestamp` (Arrow's UTC-zoned timestamps; a zone-less one would be `timestamp_ntz`).
fn delta_type(t: &DataType) -> DataType {
    match t {
        DataType::Timestamp(_, _) => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| {
                    Field::new(f.name(), delta_type(f.data_type()), true)
                        .with_metadata(f.metadata().clone())
                })
                .collect(),
        ),
        DataType::List(f) => DataType::List(Arc::new(Field::new(
            f.name(),
            delta_type(f.data_type()),
            true,
        ))),
        other => other.clone(),
    }
}

fn delta_schema(schema: &SchemaRef) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), delta_type(f.data_type()), true))
            .collect::<Vec<_>>(),
    ))
}

/// `batch` in the table's types ([`delta_schema`]).
fn to_delta(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else {
                arrow::compute::cast(c, f.data_type())
            }
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| SluiceError::internal(format!("a batch to Delta's types: {e}")))?;
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| SluiceError::internal(format!("a batch to Delta's types: {e}")))
}

/// How one write goes to a table.
#[derive(Debug, Clone)]
struct WriteSpec {
    url: url::Url,
    partition_by: Vec<String>,
    merge_schema: bool,
}

/// Writes `batches` (of `schema`) as one commit carrying the transaction `(app_id, version)`,
/// unless the table already has that application at `version` or later. Returns whether it
/// wrote.
async fn write_once(
    spec: &WriteSpec,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    mode: SaveMode,
    txn: Option<(&str, i64)>,
) -> Result<bool> {
    let table = try_open_table(&spec.url)
        .await
        .map_err(|e| delta_error("opening", &spec.url, e))?;
    if let (Some((app_id, version)), Some(_)) = (txn, table.version()) {
        let state = table
            .snapshot()
            .map_err(|e| delta_error("reading", &spec.url, e))?;
        let done = state
            .transaction_version(table.log_store().as_ref(), app_id)
            .await
            .map_err(|e| delta_error("reading", &spec.url, e))?;
        if done.is_some_and(|v| v >= version) {
            log::info!(
                "Skipping already committed transaction {app_id} version {version} (Delta table \
                 {})",
                spec.url
            );
            return Ok(false);
        }
    }
    if let (false, Some(_)) = (spec.merge_schema, table.version()) {
        let state = table
            .snapshot()
            .map_err(|e| delta_error("reading", &spec.url, e))?;
        let theirs: Vec<String> = state
            .schema()
            .fields()
            .map(|f| f.name().to_ascii_lowercase())
            .collect();
        let new: Vec<&str> = schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .filter(|n| !theirs.contains(&n.to_ascii_lowercase()))
            .collect();
        if !new.is_empty() {
            return Err(SluiceError::connector(
                class::DELTA_WRITE_FAILED,
                format!(
                    "A schema mismatch detected when writing to the Delta table {}: the rows \
                     have columns the table has not ({}). Select the table's columns, or set \
                     .option(\"mergeSchema\", \"true\") to add them to the table",
                    spec.url,
                    new.join(", ")
                ),
            ));
        }
    }
    let schema = delta_schema(schema);
    let batches: Vec<RecordBatch> = if batches.is_empty() {
        vec![RecordBatch::new_empty(schema.clone())]
    } else {
        batches
            .iter()
            .map(|b| to_delta(b, &schema))
            .collect::<Result<_>>()?
    };
    let mut commit = CommitProperties::default();
    if let Some((app_id, version)) = txn {
        commit = commit.with_application_transaction(Transaction::new(app_id, version));
    }
    let mut write = table
        .write(batches)
        .with_save_mode(mode)
        .with_commit_properties(commit);
    if !spec.partition_by.is_empty() {
        write = write.with_partition_columns(spec.partition_by.clone());
    }
    if spec.merge_schema {
        write = write.with_schema_mode(SchemaMode::Merge);
    }
    write
        .await
        .map_err(|e| delta_error("writing to", &spec.url, e))?;
    Ok(true)
}

fn write_spec(options: &HashMap<String, String>, schema: &SchemaRef) -> Result<WriteSpec> {
    let url = table_url(option(options, "path").unwrap_or(""))?;
    // Resolved and checked as the file sink checks them (Spark's validatePartitionColumn).
    let names = sluice::sink::file::partition_by_option(options)?;
    let partition_by = sluice::sink::file::resolve_partition_columns(schema, &names)?;
    Ok(WriteSpec {
        url,
        partition_by,
        merge_schema: bool_option(options, "mergeSchema")?,
    })
}

/// A batch write to the Delta table at `options["path"]` (Spark's
/// `df.write.format("delta")`): `mode` `append` (default) or `overwrite`, `partitionBy`,
/// `mergeSchema`, and Delta's idempotent writes: with `txnAppId` and `txnVersion` the commit
/// records them, and a write whose version the table already has for that app id is skipped
/// (what `foreach_batch` needs: pass the batch id as `txnVersion`). Returns whether it wrote.
pub fn write_batch(data: &BatchData, options: &HashMap<String, String>) -> Result<bool> {
    let spec = write_spec(options, &data.schema)?;
    let mode = match option(options, "mode").map(|m| m.trim().to_ascii_lowercase()) {
        None => SaveMode::Append,
        Some(m) if m == "append" => SaveMode::Append,
        Some(m) if m == "overwrite" => SaveMode::Overwrite,
        Some(m) => {
            return Err(SluiceError::query(
                class::INVALID_OPTION_VALUE,
                format!("mode {m:?} for a Delta write: use append or overwrite"),
            ))
        }
    };
    let txn = match (option(options, "txnAppId"), option(options, "txnVersion")) {
        (None, None) => None,
        (Some(app), Some(v)) => Some((
            app.to_string(),
            v.trim().parse::<i64>().map_err(|_| {
                SluiceError::query(
                    class::INVALID_OPTION_VALUE,
                    format!("txnVersion must be a whole number (the batch id), got {v:?}"),
                )
            })?,
        )),
        _ => {
            return Err(SluiceError::query(
                class::INVALID_OPTION_VALUE,
                "txnAppId and txnVersion go together: set both (the query's id and the batch \
                 id) or neither",
            ))
        }
    };
    let batches: Vec<RecordBatch> = data.batches().cloned().collect();
    run(write_once(
        &spec,
        &data.schema,
        batches,
        mode,
        txn.as_ref().map(|(a, v)| (a.as_str(), *v)),
    ))?
}

#[derive(Debug)]
struct DeltaSinkFactory;

impl SinkFactory for DeltaSinkFactory {
    fn create(
        &self,
        options: &HashMap<String, String>,
        schema: SchemaRef,
        _query_name: Option<&str>,
    ) -> Result<Arc<dyn SinkProvider>> {
        Ok(Arc::new(DeltaSinkProvider {
            spec: write_spec(options, &schema)?,
            schema,
        }))
    }
}

/// The streaming Delta sink's definition.
#[derive(Debug)]
pub struct DeltaSinkProvider {
    spec: WriteSpec,
    schema: SchemaRef,
}

impl SinkProvider for DeltaSinkProvider {
    fn description(&self) -> String {
        format!("DeltaSink[{}]", self.spec.url)
    }
    fn kind(&self) -> &'static str {
        "other"
    }
    /// Append and complete, as Spark's Delta sink (update needs a MERGE in foreachBatch).
    fn supports_output_mode(&self, mode: OutputMode) -> bool {
        matches!(mode, OutputMode::Append | OutputMode::Complete)
    }
    fn create_sink(&self, ctx: &SinkContext) -> Result<Box<dyn Sink>> {
        Ok(Box::new(DeltaSink {
            spec: self.spec.clone(),
            schema: self.schema.clone(),
            app_id: ctx.query_id.clone(),
            mode: if ctx.output_mode == OutputMode::Complete {
                SaveMode::Overwrite
            } else {
                SaveMode::Append
            },
            metrics: BTreeMap::new(),
        }))
    }
}

/// A running Delta sink: one commit per batch, keyed by (query id, batch id).
#[derive(Debug)]
struct DeltaSink {
    spec: WriteSpec,
    schema: SchemaRef,
    app_id: String,
    mode: SaveMode,
    metrics: BTreeMap<String, String>,
}

impl Sink for DeltaSink {
    fn add_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()> {
        let rows = data.num_rows();
        let batches: Vec<RecordBatch> = data
            .batches()
            .filter(|b| b.num_rows() > 0)
            .cloned()
            .collect();
        let wrote = run(write_once(
            &self.spec,
            &self.schema,
            batches,
            self.mode,
            Some((&self.app_id, batch_id as i64)),
        ))?
        .map_err(|e| e.context(format!("Delta sink batch {batch_id}")))?;
        self.metrics.insert(
            "numOutputRows".into(),
            if wrote { rows } else { 0 }.to_string(),
        );
        Ok(())
    }
    fn metrics(&self) -> BTreeMap<String, String> {
        self.metrics.clone()
    }
}

#[cfg(test)]
mod tests;
