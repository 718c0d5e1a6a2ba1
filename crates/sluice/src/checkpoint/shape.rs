//! `<checkpoint>/sluice/query.json` (Sluice only): the kinds of the query's sources and sink, so
//! that a restart with a change Spark forbids fails at start with a clear error instead of
//! reading or writing the wrong data (Spark's "Recovery Semantics after Changes").

use crate::error::class;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Result, SluiceError};

/// What the checkpoint records of a query's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryShape {
    /// `(kind, description)` per source, in source order.
    pub sources: Vec<(String, String)>,
    /// The sink's kind (`SinkProvider::kind`: `file`, `kafka` or `other`).
    pub sink_kind: String,
    /// The sink's description (`sink.description`), e.g. `FileSink[/out]` for a file sink.
    pub sink_description: String,
}

/// Checks `shape` against the one recorded in `checkpoint` (recording it on the first run).
pub fn check_or_record(checkpoint: &Path, shape: &QueryShape) -> Result<()> {
    let file = super::CheckpointDir::new(checkpoint).query_shape_file();
    let old: QueryShape = match crate::storage::read(&file) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            SluiceError::checkpoint(
                class::CHECKPOINT_CORRUPT_LOG,
                format!("{} is not a Sluice query shape ({e}); restore it or delete it to record the current query", file.display()),
            )
        })?,
        Err(_) => {
            if let Some(dir) = file.parent() {
                crate::storage::create_dir_all(dir).map_err(|e| SluiceError::io(crate::error::Fault::Checkpoint, dir.display(), e))?;
            }
            let bytes = serde_json::to_vec_pretty(shape).map_err(|e| SluiceError::internal(e.to_string()))?;
            super::write_atomic_new(&file, &bytes)?;
            return Ok(());
        }
    };
    if old.sources.len() != shape.sources.len() {
        return Err(SluiceError::checkpoint(
            class::STREAMING_QUERY_SOURCES_CHANGED,
            format!(
                "The query reads {} source(s) but the checkpoint {} was written by a query with {}. \
                 Changing the number of sources is not allowed; start with a new checkpointLocation.",
                shape.sources.len(),
                checkpoint.display(),
                old.sources.len()
            ),
        ));
    }
    for (i, ((ok, od), (nk, nd))) in old.sources.iter().zip(&shape.sources).enumerate() {
        if ok != nk {
            return Err(SluiceError::checkpoint(
                class::STREAMING_QUERY_SOURCES_CHANGED,
                format!(
                    "Source {i} was {od} ({ok}) when the checkpoint was written and is now {nd} ({nk}). \
                     Changing the type of a source is not allowed: its offsets in offsets/ mean nothing \
                     to the new one. Start with a new checkpointLocation."
                ),
            ));
        }
        if od != nd {
            log::warn!("source {i} changed from {od} to {nd}; its offsets carry over (Spark allows this for some sources)");
        }
    }
    let file_path_changed = old.sink_kind == "file"
        && shape.sink_kind == "file"
        && old.sink_description != shape.sink_description;
    let kafka_to_file = old.sink_kind == "kafka" && shape.sink_kind == "file";
    if file_path_changed || kafka_to_file {
        return Err(SluiceError::checkpoint(
            class::STREAMING_QUERY_SINK_CHANGED,
            format!(
                "The sink was {} and is now {}. {} Start with a new checkpointLocation, or go back to the previous sink.",
                old.sink_description,
                shape.sink_description,
                if file_path_changed {
                    "Changing the output directory of a file sink is not allowed: the new directory's \
                     _spark_metadata would miss every batch before this restart."
                } else {
                    "A Kafka sink cannot be replaced by a file sink: the file sink would start at this batch."
                }
            ),
        ));
    }
    if old != *shape {
        // Allowed changes (a new foreach_batch function, a file sink replaced by Kafka, ...)
        // become the recorded shape.
        let bytes =
            serde_json::to_vec_pretty(shape).map_err(|e| SluiceError::internal(e.to_string()))?;
        crate::storage::write(&file, &bytes)
            .map_err(|e| SluiceError::io(crate::error::Fault::Checkpoint, file.display(), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(kind: &str, sink: &str, sink_kind: &str) -> QueryShape {
        QueryShape {
            sources: vec![(kind.into(), format!("{kind}-source"))],
            sink_kind: sink_kind.into(),
            sink_description: sink.into(),
        }
    }

    #[test]
    fn forbidden_changes_are_refused_and_allowed_ones_recorded() {
        let d = tempfile::tempdir().unwrap();
        check_or_record(d.path(), &shape("file", "FileSink[/a]", "file")).unwrap();
        check_or_record(d.path(), &shape("file", "FileSink[/a]", "file")).unwrap();
        assert_eq!(
            check_or_record(d.path(), &shape("kafka", "FileSink[/a]", "file"))
                .unwrap_err()
                .class(),
            class::STREAMING_QUERY_SOURCES_CHANGED
        );
        assert_eq!(
            check_or_record(d.path(), &shape("file", "FileSink[/b]", "file"))
                .unwrap_err()
                .class(),
            class::STREAMING_QUERY_SINK_CHANGED
        );
        check_or_record(d.path(), &shape("file", "KafkaSink[t]", "kafka")).unwrap();
        assert_eq!(
            check_or_record(d.path(), &shape("file", "FileSink[/a]", "file"))
                .unwrap_err()
                .class(),
            class::STREAMING_QUERY_SINK_CHANGED
        );
        check_or_record(d.path(), &shape("file", "ForeachBatchSink", "other")).unwrap();
    }
}
