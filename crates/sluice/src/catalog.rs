//! Tables (Spark's session catalog of file tables under `spark.sql.warehouse.dir`).
//!
//! `write_stream().to_table("events")` (PySpark's `toTable`) creates the table `events` on its
//! first run: a folder `<warehouse>/events/` (default `./spark-warehouse`, as Spark) holding
//! the file sink's output and `_sluice_table.json`, the table's entry: its format (provider),
//! schema, partition columns and location. The folder is the catalog: a server restart, or a
//! second session, finds the table again (Spark's default in-memory catalog forgets it and
//! then refuses to re-create it over the existing folder). Reads (`session.table`, SQL
//! `FROM events`, `spark.table`) go through the file sink's manifest at each scan, so they
//! see every committed batch and nothing else.
//!
//! Temporary views and memory-sink tables shadow a warehouse table of the same name, as
//! Spark's temp views do. Names are case-insensitive (stored lower-case); `default.` and
//! `spark_catalog.default.` qualifiers name the same tables.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{MemorySchemaProvider, SchemaProvider, Session as DfSession};
use datafusion::datasource::{MemTable, TableProvider, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::Expr;
use serde::{Deserialize, Serialize};

use crate::error::{class, Fault, Result, SluiceError};

/// The conf key of the warehouse folder (Spark's static `spark.sql.warehouse.dir`).
pub const WAREHOUSE_DIR: &str = "spark.sql.warehouse.dir";
/// The default warehouse folder, relative to the working directory (as Spark).
pub const DEFAULT_WAREHOUSE_DIR: &str = "spark-warehouse";
/// The table entry's file name inside a table's folder (hidden from readers by its `_`).
pub const TABLE_FILE: &str = "_sluice_table.json";

/// A table's entry (`<warehouse>/<name>/_sluice_table.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogTable {
    /// The table's name, lower-case.
    pub name: String,
    /// The data source provider: `parquet`, `json` or `csv`.
    pub provider: String,
    /// The table's schema, as Spark DDL (data columns, then partition columns).
    pub schema: String,
    /// The partition columns, in folder order.
    #[serde(default)]
    pub partition_columns: Vec<String>,
    /// Where the data lives: the table's folder (managed), or the `path` it was created with.
    pub location: String,
    /// The format options the data was written with (CSV `header`, `sep`): reads use them.
    #[serde(default)]
    pub options: HashMap<String, String>,
}

impl CatalogTable {
    /// The schema as Arrow.
    pub fn arrow_schema(&self) -> Result<SchemaRef> {
        crate::schema::parse_ddl_schema(&self.schema)
    }
}

/// The format options a table keeps for its reads.
const KEPT_OPTIONS: &[&str] = &["header", "sep", "delimiter", "compression", "codec"];

/// The warehouse: the folder of the session's tables.
#[derive(Debug, Clone)]
pub struct Warehouse {
    dir: PathBuf,
}

impl Warehouse {
    /// The warehouse in `dir` (made absolute against the working directory now).
    pub fn new(dir: impl AsRef<Path>) -> Result<Warehouse> {
        let dir = std::path::absolute(dir.as_ref()).map_err(|e| {
            SluiceError::io(
                Fault::Query,
                format!("resolving the warehouse {}", dir.as_ref().display()),
                e,
            )
        })?;
        Ok(Warehouse { dir })
    }

    /// The warehouse folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The table name in `written` (`t`, `default.t`, `spark_catalog.default.t`), lower-case.
    pub fn table_name(written: &str) -> Result<String> {
        let parts: Vec<String> = written
            .split('.')
            .map(|p| p.trim().trim_matches('`').to_ascii_lowercase())
            .collect();
        let name = match parts.as_slice() {
            [t] => t,
            [db, t] if db == "default" => t,
            [c, db, t] if c == "spark_catalog" && db == "default" => t,
            _ => {
                return Err(SluiceError::not_supported_yet(format!(
                    "the table name {written:?}: Sluice has one database, `default`; name the \
                     table without a database or as default.<name>"
                )))
            }
        };
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && !name.starts_with(['_', '.', '-']);
        if !valid {
            return Err(SluiceError::query(
                class::INVALID_TABLE_NAME,
                format!(
                    "{written:?} is not a valid table name: use letters, digits and '_' \
                     (not first)"
                ),
            ));
        }
        Ok(name.clone())
    }

    fn folder(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The entry of table `name` (already normalised), if it exists.
    pub fn get(&self, name: &str) -> Result<Option<CatalogTable>> {
        let file = self.folder(name).join(TABLE_FILE);
        let text = match crate::storage::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(SluiceError::io(
                    Fault::Query,
                    format!("reading the table entry {}", file.display()),
                    e,
                ))
            }
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            SluiceError::query(
                class::CORRUPT_TABLE_ENTRY,
                format!(
                    "the table entry {} is not valid ({e}): restore it, or remove the file to \
                     drop the table (its data files stay)",
                    file.display()
                ),
            )
        })
    }

    /// The names of the tables in the warehouse, sorted.
    pub fn names(&self) -> Vec<String> {
        let Ok(rd) = crate::storage::list_dir(&self.dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = rd
            .into_iter()
            .filter(|e| crate::storage::is_file(e.path.join(TABLE_FILE)))
            .map(|e| e.name)
            .collect();
        names.sort();
        names
    }

    /// The table a streaming write to `name` goes to: the existing one, checked against the
    /// write (format, schema, partition columns), or a new one created with them. `path` is the
    /// location of a new external table (Spark's `.option("path", ..)` with `toTable`).
    pub fn table_for_write(
        &self,
        written: &str,
        format: &str,
        schema: &Schema,
        partition_by: &[String],
        options: &HashMap<String, String>,
    ) -> Result<CatalogTable> {
        let name = Self::table_name(written)?;
        let format = format.to_ascii_lowercase();
        crate::sink::file::FileFormat::parse(&format).map_err(|_| {
            SluiceError::query(
                class::UNSUPPORTED_DATA_SOURCE,
                format!(
                    "toTable({written:?}) writes a file table: format {format:?} has no table; \
                     use parquet (the default), json or csv, or start(path) for other sinks"
                ),
            )
        })?;
        let nullable = Schema::new(
            schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        );
        if let Some(table) = self.get(&name)? {
            if table.provider != format {
                return Err(SluiceError::query(
                    class::TABLE_PROVIDER_MISMATCH,
                    format!(
                        "The input source ({format}) is different from the table {name}'s data \
                         source provider ({}): write with .format(\"{}\")",
                        table.provider, table.provider
                    ),
                ));
            }
            let theirs = table.arrow_schema()?;
            if crate::schema::schema_to_ddl(&theirs) != crate::schema::schema_to_ddl(&nullable)
                && crate::schema::schema_to_ddl(&reordered(&nullable, &table.partition_columns))
                    != crate::schema::schema_to_ddl(&theirs)
            {
                return Err(SluiceError::query(
                    class::TABLE_SCHEMA_MISMATCH,
                    format!(
                        "the query's columns ({}) are not the table {name}'s ({}): select the \
                         table's columns, or write to a new table",
                        crate::schema::schema_to_ddl(&nullable),
                        table.schema
                    ),
                ));
            }
            if !partition_by.is_empty()
                && !partition_by.iter().map(|c| c.to_ascii_lowercase()).eq(table
                    .partition_columns
                    .iter()
                    .map(|c| c.to_ascii_lowercase()))
            {
                return Err(SluiceError::query(
                    class::TABLE_PARTITIONING_MISMATCH,
                    format!(
                        "partitionBy({}) is not the table {name}'s partitioning ({}): leave \
                         partitionBy out to write the table as it is partitioned",
                        partition_by.join(", "),
                        table.partition_columns.join(", ")
                    ),
                ));
            }
            return Ok(table);
        }
        let folder = self.folder(&name);
        let external = crate::conf::option(options, "path");
        if external.is_none() && crate::storage::exists(&folder) && !is_empty_dir(&folder) {
            return Err(SluiceError::query(
                class::LOCATION_ALREADY_EXISTS,
                format!(
                    "Cannot name the managed table as `spark_catalog`.`default`.`{name}`, as its \
                     associated location {} already exists and is not a table. Pick a different \
                     table name, or remove the existing location first.",
                    folder.display()
                ),
            ));
        }
        // Resolved as the file sink resolves them (errors name the column).
        let partitions = crate::sink::file::PartitionColumns::resolve(&nullable, partition_by)?;
        let location = match external {
            Some(p) => std::path::absolute(p)
                .map_err(|e| SluiceError::io(Fault::Query, format!("resolving {p}"), e))?,
            None => folder.clone(),
        };
        let table = CatalogTable {
            name: name.clone(),
            provider: format,
            schema: crate::schema::schema_to_ddl(&reordered(&nullable, partition_by)),
            partition_columns: partitions.names(&nullable),
            location: location.to_string_lossy().into_owned(),
            options: options
                .iter()
                .filter(|(k, _)| KEPT_OPTIONS.iter().any(|o| k.eq_ignore_ascii_case(o)))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        crate::storage::create_dir_all(&folder).map_err(|e| {
            SluiceError::io(
                Fault::Query,
                format!("creating the table folder {}", folder.display()),
                e,
            )
        })?;
        let file = folder.join(TABLE_FILE);
        let text = serde_json::to_string_pretty(&table)
            .map_err(|e| SluiceError::internal(format!("serialising a table entry: {e}")))?;
        if !crate::checkpoint::write_atomic_new_as(Fault::Query, &file, text.as_bytes())? {
            // Another writer created the table first: check this write against its entry.
            return self.table_for_write(written, &table.provider, schema, partition_by, options);
        }
        Ok(table)
    }
}

/// `schema` with the `partition_by` columns moved last (the order a read gives them back).
fn reordered(schema: &Schema, partition_by: &[String]) -> Schema {
    let is_part = |n: &str| partition_by.iter().any(|p| p.eq_ignore_ascii_case(n));
    let mut fields: Vec<_> = schema
        .fields()
        .iter()
        .filter(|f| !is_part(f.name()))
        .cloned()
        .collect();
    for p in partition_by {
        if let Some(f) = schema
            .fields()
            .iter()
            .find(|f| f.name().eq_ignore_ascii_case(p))
        {
            fields.push(f.clone());
        }
    }
    Schema::new(fields)
}

fn is_empty_dir(dir: &Path) -> bool {
    crate::storage::list_dir(dir).is_ok_and(|rd| rd.is_empty())
}

/// The session's default schema: its registered views and tables (temp views, memory sinks),
/// then the warehouse's tables.
#[derive(Debug)]
pub(crate) struct WarehouseSchema {
    registered: Arc<dyn SchemaProvider>,
    warehouse: Warehouse,
}

impl WarehouseSchema {
    pub(crate) fn new(registered: Option<Arc<dyn SchemaProvider>>, warehouse: Warehouse) -> Self {
        Self {
            registered: registered.unwrap_or_else(|| Arc::new(MemorySchemaProvider::new())),
            warehouse,
        }
    }

    fn warehouse_table(&self, name: &str) -> Option<String> {
        Warehouse::table_name(name).ok()
    }
}

#[async_trait]
impl SchemaProvider for WarehouseSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.registered.table_names();
        for n in self.warehouse.names() {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names
    }

    async fn table(&self, name: &str) -> datafusion::error::Result<Option<Arc<dyn TableProvider>>> {
        if let Some(t) = self.registered.table(name).await? {
            return Ok(Some(t));
        }
        let Some(name) = self.warehouse_table(name) else {
            return Ok(None);
        };
        let Some(table) = self.warehouse.get(&name).map_err(external)? else {
            return Ok(None);
        };
        let schema = table.arrow_schema().map_err(external)?;
        Ok(Some(Arc::new(FileTable { table, schema })))
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> datafusion::error::Result<Option<Arc<dyn TableProvider>>> {
        self.registered.register_table(name, table)
    }

    fn deregister_table(
        &self,
        name: &str,
    ) -> datafusion::error::Result<Option<Arc<dyn TableProvider>>> {
        self.registered.deregister_table(name)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.registered.table_exist(name)
            || self.warehouse_table(name).is_some_and(|n| {
                crate::storage::is_file(self.warehouse.folder(&n).join(TABLE_FILE))
            })
    }
}

fn external(e: SluiceError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(e))
}

/// A warehouse table as a DataFusion table: each scan reads the committed files.
#[derive(Debug)]
struct FileTable {
    table: CatalogTable,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for FileTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    async fn scan(
        &self,
        state: &dyn DfSession,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let location = PathBuf::from(&self.table.location);
        let batches = if crate::storage::is_dir(&location) {
            crate::sink::file::read::read_output(
                &location,
                &self.table.provider,
                Some(self.schema.clone()),
                &self.table.options,
            )
            .map_err(|e| external(e.context(format!("table {}", self.table.name))))?
            .1
        } else {
            Vec::new()
        };
        let batches = batches
            .into_iter()
            .map(|b| arrow::array::RecordBatch::try_new(self.schema.clone(), b.columns().to_vec()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        MemTable::try_new(self.schema.clone(), vec![batches])?
            .scan(state, projection, filters, limit)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field};
    use std::fs;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("user", DataType::Utf8, true),
            Field::new("n", DataType::Int64, false),
        ])
    }

    #[test]
    fn names_are_case_insensitive_in_one_database() {
        assert_eq!(Warehouse::table_name("Events").unwrap(), "events");
        assert_eq!(Warehouse::table_name("default.events").unwrap(), "events");
        assert_eq!(
            Warehouse::table_name("spark_catalog.default.`events`").unwrap(),
            "events"
        );
        assert!(Warehouse::table_name("other.events")
            .unwrap_err()
            .is(class::SLUICE_NOT_SUPPORTED_YET));
        assert!(Warehouse::table_name("a/b")
            .unwrap_err()
            .is(class::INVALID_TABLE_NAME));
    }

    #[test]
    fn a_table_is_created_once_then_checked_against_each_write() {
        let tmp = tempfile::tempdir().unwrap();
        let w = Warehouse::new(tmp.path()).unwrap();
        let none = HashMap::new();
        let t = w
            .table_for_write("Counts", "parquet", &schema(), &["user".into()], &none)
            .unwrap();
        assert_eq!(t.location, tmp.path().join("counts").to_string_lossy());
        // partition columns last, every column nullable
        assert_eq!(t.schema, "n BIGINT, user STRING");
        assert_eq!(w.names(), ["counts"]);
        assert_eq!(w.get("counts").unwrap(), Some(t.clone()));
        // the same write again finds it; a different one is refused
        assert_eq!(
            w.table_for_write("counts", "parquet", &schema(), &[], &none)
                .unwrap(),
            t
        );
        let err = w
            .table_for_write("counts", "json", &schema(), &[], &none)
            .unwrap_err();
        assert!(err.is(class::TABLE_PROVIDER_MISMATCH), "{err}");
        let other = Schema::new(vec![Field::new("x", DataType::Int32, true)]);
        let err = w
            .table_for_write("counts", "parquet", &other, &[], &none)
            .unwrap_err();
        assert!(err.is(class::TABLE_SCHEMA_MISMATCH), "{err}");
        let err = w
            .table_for_write("counts", "parquet", &schema(), &["n".into()], &none)
            .unwrap_err();
        assert!(err.is(class::TABLE_PARTITIONING_MISMATCH), "{err}");
        // a folder that is not a table is not taken over
        fs::create_dir_all(tmp.path().join("busy")).unwrap();
        fs::write(tmp.path().join("busy/data.parquet"), b"x").unwrap();
        let err = w
            .table_for_write("busy", "parquet", &schema(), &[], &none)
            .unwrap_err();
        assert!(err.is(class::LOCATION_ALREADY_EXISTS), "{err}");
        // a memory sink format has no table
        let err = w
            .table_for_write("m", "memory", &schema(), &[], &none)
            .unwrap_err();
        assert!(err.is(class::UNSUPPORTED_DATA_SOURCE), "{err}");
    }

    #[test]
    fn a_damaged_entry_names_its_file_and_the_way_out() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("t")).unwrap();
        fs::write(tmp.path().join("t").join(TABLE_FILE), b"{").unwrap();
        let err = Warehouse::new(tmp.path()).unwrap().get("t").unwrap_err();
        assert!(err.is(class::CORRUPT_TABLE_ENTRY), "{err}");
        assert!(err.to_string().contains(TABLE_FILE), "{err}");
    }
}
