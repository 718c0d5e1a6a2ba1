//! `sources/<i>/`: Spark's `FileStreamSourceLog`. Batch `N` of the log lists the files admitted
//! by log offset `N`: `v1` then one line `{"path":"file:///..","timestamp":<mtime ms>,"batchId":N}`
//! per file, no trailing newline. Every 10th batch (`(N+1) % 10 == 0`) is written as
//! `N.compact` holding every entry so far (Spark's compaction); readers accept both forms.

use crate::error::class;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::checkpoint::{CompactibleLog, LogCleanup, DEFAULT_COMPACT_INTERVAL};
use crate::error::{Fault, Result, SluiceError};

/// One file of the log (Spark's `FileEntry`; keys in Spark's order). Sluice adds the file's
/// size when listed (`size`, which Spark's reader ignores), so that a file changed after it was
/// listed is noticed ([`super::FileSource`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileEntry {
    pub path: String,
    pub timestamp: i64,
    #[serde(rename = "batchId")]
    pub batch_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

#[derive(Debug, Clone)]
pub(crate) struct SourceLog {
    log: CompactibleLog<FileEntry>,
}

impl SourceLog {
    pub(super) fn new(dir: impl Into<PathBuf>, cleanup: LogCleanup) -> Self {
        Self {
            log: CompactibleLog::new(dir, DEFAULT_COMPACT_INTERVAL, Fault::Checkpoint)
                .with_cleanup(cleanup),
        }
    }

    pub(super) fn dir(&self) -> &Path {
        self.log.dir()
    }

    /// The newest log offset written, if any.
    pub(super) fn latest_id(&self) -> Result<Option<u64>> {
        self.log.latest_batch_id()
    }

    /// Every entry of the log (the newest compact file plus the batches after it).
    pub(super) fn all_entries(&self) -> Result<Vec<FileEntry>> {
        self.log.all_entries()
    }

    /// Writes log offset `id`. Fails if it exists already: another query is using the
    /// checkpoint.
    pub(super) fn add(&self, id: u64, entries: Vec<FileEntry>) -> Result<()> {
        if self.log.add(id, entries)? {
            Ok(())
        } else {
            Err(SluiceError::checkpoint(
                class::CONCURRENT_STREAM_LOG_UPDATE,
                format!(
                    "Concurrent update to the file source log {}: log offset {id} was written by \
                     someone else. Multiple streaming queries seem to use the same checkpoint \
                     location; make sure only one query runs on a checkpoint at a time",
                    self.log.dir().display()
                ),
            ))
        }
    }

    /// Refuses a log with a file missing before its newest one ([`CompactibleLog::missing_ids`]):
    /// the files of that batch would be read again.
    pub(super) fn check_complete(&self) -> Result<()> {
        let Some(id) = self.log.missing_ids()?.first().copied() else {
            return Ok(());
        };
        let file = self.log.path_of(id);
        Err(SluiceError::checkpoint(
            class::CHECKPOINT_MISSING_SOURCE_LOG,
            format!(
                "the file source log {} has no file for batch {id} ({}) but has later ones: the \
                 files batch {id} read would silently be read again. Restore {} from a backup \
                 of the checkpoint, or start with a new checkpointLocation (and a new output \
                 folder: every file is read again)",
                self.log.dir().display(),
                file.display(),
                file.display()
            ),
        ))
    }

    /// Refuses a live log file that does not parse, naming it, before any batch runs.
    pub(super) fn check_readable(&self) -> Result<()> {
        let Some((id, file, defect)) = self.log.first_unreadable()? else {
            return Ok(());
        };
        Err(SluiceError::checkpoint(
            class::CHECKPOINT_CORRUPT_LOG,
            format!(
                "the file source log file {} cannot be read ({defect}). Restore it from a backup \
                 of the checkpoint: deleting it would make the files of log offset {id} new \
                 again, read a second time. If no backup exists, start with a new \
                 checkpointLocation (and a new output folder: every file is read again)",
                file.display()
            ),
        ))
    }

    /// The files of log offset `id`, in log order.
    pub(super) fn batch(&self, id: u64) -> Result<Vec<FileEntry>> {
        let want = id as i64;
        if let Some(entries) = self.log.get(id)? {
            return Ok(entries.into_iter().filter(|e| e.batch_id == want).collect());
        }
        // The plain file may have been removed after a compaction (Spark deletes them): the
        // newest compact file holds every entry.
        if let Some(latest) = self.log.latest_batch_id()? {
            if latest >= id {
                let all = self.log.all_entries()?;
                let found: Vec<FileEntry> =
                    all.into_iter().filter(|e| e.batch_id == want).collect();
                if !found.is_empty() {
                    return Ok(found);
                }
            }
        }
        Err(SluiceError::checkpoint(
            class::CHECKPOINT_MISSING_SOURCE_LOG,
            format!(
                "the file source log {} has no entry for log offset {id}, which the query's \
                 offsets refer to: the source log was deleted or truncated. Restore it, or start \
                 the query with a new checkpoint location",
                self.log.dir().display()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(p: &str, ts: i64, b: i64) -> FileEntry {
        FileEntry {
            path: p.into(),
            timestamp: ts,
            batch_id: b,
            size: None,
        }
    }

    #[test]
    fn bytes_match_spark() {
        let dir = tempfile::tempdir().unwrap();
        let log = SourceLog::new(dir.path(), LogCleanup::default());
        log.add(
            0,
            vec![entry(
                "file:///data/example/A/input/1.json",
                1795941769000,
                0,
            )],
        )
        .unwrap();
        let bytes = std::fs::read(dir.path().join("0")).unwrap();
        assert_eq!(
            bytes,
            b"v1\n{\"path\":\"file:///data/example/A/input/1.json\",\"timestamp\":1795941769000,\"batchId\":0}"
        );
        let err = log.add(0, vec![entry("x", 1, 0)]).unwrap_err();
        assert_eq!(err.class(), "CONCURRENT_STREAM_LOG_UPDATE");
        assert_eq!(err.fault(), Fault::Checkpoint);
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["0".to_string()]);
    }

    #[test]
    fn compaction_and_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let log = SourceLog::new(dir.path(), LogCleanup::default());
        for id in 0..12u64 {
            log.add(
                id,
                vec![entry(&format!("file:///f{id}"), id as i64, id as i64)],
            )
            .unwrap();
        }
        assert!(dir.path().join("9.compact").exists());
        assert!(!dir.path().join("9").exists());
        assert_eq!(log.latest_id().unwrap(), Some(11));
        assert_eq!(log.batch(9).unwrap(), vec![entry("file:///f9", 9, 9)]);
        // A batch whose plain file was removed is found in the compact file.
        std::fs::remove_file(dir.path().join("3")).unwrap();
        assert_eq!(log.batch(3).unwrap(), vec![entry("file:///f3", 3, 3)]);
        assert_eq!(log.all_entries().unwrap().len(), 12);
        assert_eq!(log.batch(20).unwrap_err().fault(), Fault::Checkpoint);
    }
}
