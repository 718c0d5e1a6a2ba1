//! The sink registry: Spark's format names (`DataStreamWriter.format`) to sink providers. A new
//! sink is a file under `sink/` and a line here; a sink in a crate of its own (`delta`) is a
//! [`SinkFactory`] added with [`register_format`].

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::prelude::SessionContext;

use crate::conf::option as opt;
use crate::error::{class, Result, SluiceError};
use crate::sink::console::ConsoleSinkProvider;
use crate::sink::file::FileSinkProvider;
use crate::sink::foreach::NoopSinkProvider;
use crate::sink::memory::MemorySinkProvider;
use crate::sink::SinkProvider;

/// A sink format that lives outside the engine (e.g. `delta` in the `sluice-delta` crate),
/// registered for the process with [`register_format`] (as Spark finds data sources through
/// `DataSourceRegister`): it builds the provider of `write_stream().format(name)` (and of a
/// pipeline's `connector = 'name'`) from the writer's options.
pub trait SinkFactory: std::fmt::Debug + Send + Sync {
    /// The sink for rows of `schema` with the writer's `options` (keys as the user wrote them;
    /// match them case-insensitively).
    fn create(
        &self,
        options: &HashMap<String, String>,
        schema: SchemaRef,
        query_name: Option<&str>,
    ) -> Result<Arc<dyn SinkProvider>>;
}

type Formats = std::sync::RwLock<HashMap<String, Arc<dyn SinkFactory>>>;

fn formats() -> &'static Formats {
    static FORMATS: std::sync::OnceLock<Formats> = std::sync::OnceLock::new();
    FORMATS.get_or_init(Default::default)
}

/// Adds the sink format `name` (case-insensitive) for every session of the process; a
/// registered name comes before a built-in one. `sluice_delta::register()` adds `delta`.
pub fn register_format(name: &str, factory: Arc<dyn SinkFactory>) {
    use crate::sync::RwLockExt;
    formats()
        .write_unpoisoned()
        .insert(name.trim().to_ascii_lowercase(), factory);
}

/// The sink format registered as `name`, if any.
pub(crate) fn registered_format(name: &str) -> Option<Arc<dyn SinkFactory>> {
    use crate::sync::RwLockExt;
    formats()
        .read_unpoisoned()
        .get(&name.trim().to_ascii_lowercase())
        .cloned()
}

/// A streaming sink format, by Spark's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SinkFormat {
    /// `parquet` files (the default format, as in Spark).
    Parquet,
    /// `json` files.
    Json,
    /// `csv` files.
    Csv,
    /// `console`: each batch printed as a table.
    Console,
    /// `memory`: a table named by `queryName`.
    Memory,
    /// `kafka` (feature `kafka`).
    Kafka,
    /// `noop`: rows are computed and dropped.
    Noop,
    /// `foreach`: a user writer per partition (set with `DataStreamWriter::foreach`).
    Foreach,
    /// `foreachBatch`: a user function per batch (set with `DataStreamWriter::foreach_batch`).
    ForeachBatch,
}

const SINKS: &[(&str, SinkFormat)] = &[
    ("parquet", SinkFormat::Parquet),
    ("json", SinkFormat::Json),
    ("csv", SinkFormat::Csv),
    ("console", SinkFormat::Console),
    ("memory", SinkFormat::Memory),
    ("kafka", SinkFormat::Kafka),
    ("noop", SinkFormat::Noop),
    ("foreach", SinkFormat::Foreach),
    ("foreachBatch", SinkFormat::ForeachBatch),
];

impl SinkFormat {
    /// The format named `name` (Spark's names, any case).
    pub fn parse(name: &str) -> Result<Self> {
        SINKS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.trim()))
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                SluiceError::query(
                    class::UNSUPPORTED_DATA_SOURCE,
                    format!(
                        "Data source {name} does not exist as a streaming sink. Use parquet, \
                         json, csv, console, memory, kafka, noop, foreach or foreach_batch{}.",
                        if name.trim().eq_ignore_ascii_case("delta") {
                            " (delta is the sluice-delta crate: the `sluice` binary has it unless built \
                             without default features; a Rust program calls sluice_delta::register())"
                        } else {
                            ""
                        }
                    ),
                )
            })
    }
    /// Spark's name of the format.
    pub fn as_str(self) -> &'static str {
        SINKS
            .iter()
            .find(|(_, f)| *f == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }
    /// Whether the sink writes files under `path` (with the `_spark_metadata` manifest).
    pub fn is_file(self) -> bool {
        matches!(self, Self::Parquet | Self::Json | Self::Csv)
    }
    /// Whether a query may run on a temporary checkpoint with this sink (Spark allows it for
    /// console, memory and noop).
    pub fn allows_temporary_checkpoint(self) -> bool {
        matches!(self, Self::Console | Self::Memory | Self::Noop)
    }
}

/// The provider of `format` with `options` for rows of `schema`. `catalog` is where a memory
/// sink registers its table; `query_name` names it. `foreach`/`foreachBatch` take a user
/// function and are built by the writer, not here.
pub fn sink_provider(
    catalog: &SessionContext,
    format: SinkFormat,
    options: &HashMap<String, String>,
    schema: SchemaRef,
    query_name: Option<&str>,
) -> Result<Arc<dyn SinkProvider>> {
    Ok(match format {
        SinkFormat::Parquet | SinkFormat::Json | SinkFormat::Csv => {
            let name = format.as_str();
            let path = opt(options, "path").ok_or_else(|| {
                SluiceError::query(
                    class::PATH_NOT_SPECIFIED,
                    format!(
                        "'path' is not specified for the {name} file sink: add \
                         .option(\"path\", DIR)"
                    ),
                )
            })?;
            let provider = FileSinkProvider::try_new(name, path, options)?;
            provider.check_schema(&schema)?;
            Arc::new(provider)
        }
        SinkFormat::Console => Arc::new(ConsoleSinkProvider::from_options(options)?),
        SinkFormat::Memory => {
            let name = query_name.ok_or_else(|| {
                SluiceError::query(
                    class::QUERY_NAME_NOT_SPECIFIED,
                    "queryName must be specified for memory sink: add .query_name(\"table\")",
                )
            })?;
            Arc::new(MemorySinkProvider::new(catalog, name.to_string(), schema)?)
        }
        #[cfg(feature = "kafka")]
        SinkFormat::Kafka => Arc::new(crate::kafka::sink::KafkaSinkProvider::try_new(options)?),
        #[cfg(not(feature = "kafka"))]
        SinkFormat::Kafka => {
            return Err(SluiceError::not_supported_yet(
                "the kafka sink needs Sluice built with the `kafka` feature",
            ))
        }
        SinkFormat::Noop => Arc::new(NoopSinkProvider),
        SinkFormat::Foreach | SinkFormat::ForeachBatch => {
            return Err(SluiceError::query(
                class::INVALID_OPTION,
                format!(
                    "the {} sink takes a function: use DataStreamWriter::{}",
                    format.as_str(),
                    if format == SinkFormat::Foreach {
                        "foreach"
                    } else {
                        "foreach_batch"
                    }
                ),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_and_unknown_names_are_refused() {
        for (name, f) in SINKS {
            assert_eq!(SinkFormat::parse(&name.to_uppercase()).unwrap(), *f);
            assert_eq!(f.as_str(), *name);
        }
        let e = SinkFormat::parse("delta").unwrap_err();
        assert!(e.is(class::UNSUPPORTED_DATA_SOURCE), "{e}");
        assert!(SinkFormat::Memory.allows_temporary_checkpoint());
        assert!(!SinkFormat::Kafka.allows_temporary_checkpoint());
        assert!(SinkFormat::Csv.is_file() && !SinkFormat::Console.is_file());
    }
}
