//! The source registry: Spark's format names (`DataStreamReader.format`) to source providers.
//! A new source is a file under `source/` and a line here; a source in a crate of its own
//! (`delta`) is a [`SourceFactory`] added with [`register_format`].

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use crate::error::{class, Result, SluiceError};
use crate::source::file::FileSourceProvider;
use crate::source::rate::{RatePerMicroBatchProvider, RateSourceProvider};
use crate::source::SourceProvider;

/// A source format that lives outside the engine (e.g. `delta` in the `sluice-delta` crate),
/// registered for the process with [`register_format`]: it builds the provider of
/// `read_stream().format(name).load(path)` from the reader's schema and options.
pub trait SourceFactory: std::fmt::Debug + Send + Sync {
    /// The source reading `path` (empty when not given), with the user's `schema` if any and
    /// the reader's `options` (keys as written; match them case-insensitively).
    fn create(
        &self,
        path: &str,
        schema: Option<SchemaRef>,
        options: &HashMap<String, String>,
    ) -> Result<Arc<dyn SourceProvider>>;
}

type Formats = std::sync::RwLock<HashMap<String, Arc<dyn SourceFactory>>>;

fn formats() -> &'static Formats {
    static FORMATS: std::sync::OnceLock<Formats> = std::sync::OnceLock::new();
    FORMATS.get_or_init(Default::default)
}

/// Adds the source format `name` (case-insensitive) for every session of the process; a
/// registered name comes before a built-in one. `sluice_delta::register()` adds `delta`.
pub fn register_format(name: &str, factory: Arc<dyn SourceFactory>) {
    use crate::sync::RwLockExt;
    formats()
        .write_unpoisoned()
        .insert(name.trim().to_ascii_lowercase(), factory);
}

/// The source format registered as `name`, if any.
pub(crate) fn registered_format(name: &str) -> Option<Arc<dyn SourceFactory>> {
    use crate::sync::RwLockExt;
    formats()
        .read_unpoisoned()
        .get(&name.trim().to_ascii_lowercase())
        .cloned()
}

/// A streaming source format, by Spark's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceFormat {
    /// `json` files.
    Json,
    /// `csv` files.
    Csv,
    /// `parquet` files (the default format, as in Spark).
    Parquet,
    /// `text` files: one `value` row per line.
    Text,
    /// `rate`: rows per second.
    Rate,
    /// `rate-micro-batch`: rows per micro-batch.
    RateMicroBatch,
    /// `kafka` (feature `kafka`).
    Kafka,
    /// `nexmark`: the Nexmark benchmark's generator.
    Nexmark,
    /// `socket`: lines from a TCP server (not fault-tolerant, as in Spark).
    Socket,
}

const SOURCES: &[(&str, SourceFormat)] = &[
    ("json", SourceFormat::Json),
    ("csv", SourceFormat::Csv),
    ("parquet", SourceFormat::Parquet),
    ("text", SourceFormat::Text),
    ("rate", SourceFormat::Rate),
    ("rate-micro-batch", SourceFormat::RateMicroBatch),
    ("kafka", SourceFormat::Kafka),
    ("nexmark", SourceFormat::Nexmark),
    ("socket", SourceFormat::Socket),
];

impl SourceFormat {
    /// The format named `name` (Spark's names, any case).
    pub fn parse(name: &str) -> Result<Self> {
        SOURCES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.trim()))
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                let names: Vec<&str> = SOURCES.iter().map(|(n, _)| *n).collect();
                SluiceError::query(
                    class::UNSUPPORTED_DATA_SOURCE,
                    format!(
                        "Data source {name} is not a streaming source. Use one of: {}.",
                        names.join(", ")
                    ),
                )
            })
    }
    /// Spark's name of the format.
    pub fn as_str(self) -> &'static str {
        SOURCES
            .iter()
            .find(|(_, f)| *f == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }
    /// Whether the format reads files of a directory.
    pub fn is_file(self) -> bool {
        matches!(self, Self::Json | Self::Csv | Self::Parquet | Self::Text)
    }
}

/// The provider of `format` reading `path` (file formats) with `schema` and `options`.
pub fn source_provider(
    format: SourceFormat,
    path: &str,
    schema: Option<SchemaRef>,
    options: &HashMap<String, String>,
) -> Result<Arc<dyn SourceProvider>> {
    Ok(match format {
        SourceFormat::Json | SourceFormat::Csv | SourceFormat::Parquet | SourceFormat::Text => {
            Arc::new(FileSourceProvider::try_new(
                format.as_str(),
                path,
                schema,
                options,
            )?)
        }
        SourceFormat::Rate => Arc::new(RateSourceProvider::try_new(options)?),
        SourceFormat::RateMicroBatch => Arc::new(RatePerMicroBatchProvider::try_new(options)?),
        #[cfg(feature = "kafka")]
        SourceFormat::Kafka => {
            Arc::new(crate::kafka::source::KafkaSourceProvider::try_new(options)?)
        }
        #[cfg(not(feature = "kafka"))]
        SourceFormat::Kafka => {
            return Err(SluiceError::not_supported_yet(
                "the kafka source needs Sluice built with the `kafka` feature",
            ))
        }
        SourceFormat::Nexmark => Arc::new(crate::source::nexmark::NexmarkSourceProvider::try_new(
            options,
        )?),
        SourceFormat::Socket => Arc::new(crate::source::socket::SocketSourceProvider::try_new(
            schema, options,
        )?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_and_unknown_names_list_the_known_ones() {
        for (name, f) in SOURCES {
            assert_eq!(SourceFormat::parse(&name.to_uppercase()).unwrap(), *f);
            assert_eq!(f.as_str(), *name);
        }
        let e = SourceFormat::parse("delta").unwrap_err();
        assert!(e.is(class::UNSUPPORTED_DATA_SOURCE), "{e}");
        assert!(e.message().contains("rate-micro-batch, kafka"), "{e}");
    }
}
