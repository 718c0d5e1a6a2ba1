//! Sinks: where each batch's result rows go.
//!
//! A *sink provider* is the definition built by `write_stream()`; at query start it creates a
//! [`Sink`]. The loop calls [`Sink::add_batch`] once per batch, after `offsets/N` and before
//! `commits/N`.

pub mod console;
pub mod file;
pub mod foreach;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod memory;
pub mod registry;

use std::fmt::Debug;
use std::path::PathBuf;

use crate::error::Result;
use crate::types::OutputMode;

pub use crate::types::BatchData;

/// What a sink is given when a query starts.
#[derive(Debug, Clone)]
pub struct SinkContext {
    /// The query's checkpoint directory.
    pub checkpoint_dir: PathBuf,
    /// The query's output mode (`outputMode`).
    pub output_mode: OutputMode,
    /// The query's name (`queryName`), if any.
    pub query_name: Option<String>,
    /// The query's id (the checkpoint's `metadata`), stable across restarts.
    pub query_id: String,
    /// The newest batch the checkpoint planned (`offsets/N`) when the query started: the run
    /// re-runs it if it has no `commits/N`, else plans `N + 1`. None for a new query.
    pub last_planned: Option<u64>,
}

/// The definition of a sink, built by `write_stream()`.
pub trait SinkProvider: Debug + Send + Sync {
    /// A short description for progress (`sink.description`), e.g. `FileSink[/data/out]`.
    fn description(&self) -> String;
    /// The kind of sink for restart checks: `file`, `kafka`, or `other`.
    fn kind(&self) -> &'static str {
        "other"
    }
    /// Output modes this sink accepts (Spark: the file sink is append-only).
    fn supports_output_mode(&self, _mode: OutputMode) -> bool {
        true
    }
    /// Creates the running sink, once per query start (and once per side output).
    fn create_sink(&self, ctx: &SinkContext) -> Result<Box<dyn Sink>>;
    /// The directory the sink writes files into (file sinks), checked against the sources'.
    fn output_dir(&self) -> Option<PathBuf> {
        None
    }
    /// Whether the sink can run under `Trigger::Continuous` (memory, console, foreach, kafka).
    fn supports_continuous(&self) -> bool {
        false
    }
}

/// A running sink.
///
/// Contract: `add_batch(batch_id, ..)` MUST add a batch's rows once, even when called again with
/// the same id after a crash (the file sink checks its manifest log; `foreach_batch` passes the
/// id to the user, who can dedupe by it).
pub trait Sink: Send {
    /// Writes the rows of batch `batch_id`. It MUST add them once, even when called
    /// again with the same id after a crash.
    fn add_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()>;
    /// Sink metrics for progress (`sink.metrics`).
    fn metrics(&self) -> std::collections::BTreeMap<String, String> {
        Default::default()
    }
    /// Continuous processing: writes rows of epoch `epoch` right away. Called many times per
    /// epoch, once per slice of input; rows are never deduplicated (at-least-once).
    fn write_continuous(&mut self, epoch: u64, _data: &BatchData) -> Result<()> {
        Err(crate::error::SluiceError::not_supported_yet(format!(
            "this sink cannot take continuous rows (epoch {epoch})"
        )))
    }
    /// Continuous processing: epoch `epoch` ends; every row written for it must be durable
    /// (flushed) when this returns, before `commits/E` is written.
    fn commit_epoch(&mut self, _epoch: u64) -> Result<()> {
        Ok(())
    }
}
