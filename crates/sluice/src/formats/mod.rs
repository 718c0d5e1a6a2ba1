//! A format name to its provider (Spark's `DataSource.lookupDataSource`): one registry per side,
//! [`source`] for `read_stream().format(..)` and [`sink`] for `write_stream().format(..)`. The
//! built-in formats are listed here, Kafka among them; a crate beside the engine adds its own
//! (`sluice-delta` registers `delta`). Above the connectors, so sources, sinks and Kafka never
//! import each other for it.

pub mod sink;
pub mod source;
