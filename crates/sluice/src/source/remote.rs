//! A source's read on a cluster's worker ([`run_read_task`]): a [`ReadTask`]'s spec names the
//! source kind (`file`: a run of a batch's files; `kafka`: partitions' offset ranges) and what
//! that source's reader needs; the worker reads with the engine's readers and gives the rows as
//! they come, then the read's counts.

use serde::{Deserialize, Serialize};

use crate::distributed::{ReadItems, ReadTask};
use crate::error::{Result, SluiceError};

/// A [`ReadTask`]'s spec, by source kind.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "camelCase")]
pub(crate) enum ReadSpec {
    /// A contiguous run of a file source's batch.
    File(super::file::remote::FileRead),
    /// Kafka partitions' offset ranges.
    #[cfg(feature = "kafka")]
    Kafka(super::kafka::remote::KafkaRead),
}

impl ReadSpec {
    /// The spec as a [`ReadTask`]'s text.
    pub(crate) fn to_text(&self) -> Result<String> {
        serde_json::to_string(self)
            .map_err(|e| SluiceError::internal(format!("a read task's spec: {e}")))
    }
}

/// Runs a [`ReadTask`] on this worker: its rows as they are read, then its counts. A worker of
/// a build without the source kind (Kafka without the feature `kafka`) refuses it by name.
pub fn run_read_task(task: ReadTask) -> Result<ReadItems> {
    let spec: ReadSpec = serde_json::from_str(&task.spec).map_err(|e| {
        SluiceError::not_supported_yet(format!(
            "a read this worker cannot run ({e}): start the workers from the same build as the \
             driver"
        ))
    })?;
    match spec {
        ReadSpec::File(f) => super::file::remote::run(f, task.schema),
        #[cfg(feature = "kafka")]
        ReadSpec::Kafka(k) => super::kafka::remote::run(k),
    }
}
