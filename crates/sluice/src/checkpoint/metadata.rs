//! `<checkpoint>/metadata`: the query's stable id (Spark's `StreamMetadata`).

use crate::error::class;
use std::io::ErrorKind;
use std::path::Path;

use super::atomic::write_atomic_new;
use super::log::{corrupt_log, list_numeric_names};
use super::CheckpointDir;
use crate::error::{Fault, Result, SluiceError};

/// The content of `metadata`: `{"id":"<uuid>"}` (no version line, no trailing newline). The id
/// is the query's `id` in progress and stays the same across restarts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMetadata {
    /// The query's id, a UUID string.
    pub id: String,
}

impl StreamMetadata {
    /// The exact bytes of the file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let id = serde_json::Value::String(self.id.clone()).to_string();
        format!("{{\"id\":{id}}}").into_bytes()
    }

    /// Parses the file's bytes; `file` is for error messages.
    pub fn from_bytes(bytes: &[u8], file: &Path) -> Result<Self> {
        if bytes.is_empty() {
            return Err(corrupt_log(file, "the file is empty"));
        }
        let v: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| corrupt_log(file, format!("not valid JSON: {e}")))?;
        let id = v
            .get("id")
            .and_then(|id| id.as_str())
            .ok_or_else(|| corrupt_log(file, "expected {\"id\":\"<query id>\"}"))?;
        Ok(Self { id: id.to_string() })
    }

    /// Reads `metadata`, or writes a new one with a fresh random id for a new checkpoint.
    ///
    /// Like Spark 4.x, refuses a checkpoint whose `metadata` is missing while `offsets/` or
    /// `commits/` hold batches (`STREAMING_CHECKPOINT_MISSING_METADATA_FILE`): a new id would
    /// silently give the old query's state a new identity.
    ///
    /// `root` is a [`CheckpointDir`] or its root path.
    pub fn read_or_create(root: impl AsRef<Path>) -> Result<StreamMetadata> {
        let dir = CheckpointDir::new(root.as_ref());
        let file = dir.metadata_file();
        if let Some(m) = Self::read(&file)? {
            return Ok(m);
        }
        let has_offsets = !list_numeric_names(&dir.offsets_dir())?.is_empty();
        let has_commits = !list_numeric_names(&dir.commits_dir())?.is_empty();
        if has_offsets || has_commits {
            return Err(SluiceError::checkpoint(
                class::STREAMING_CHECKPOINT_MISSING_METADATA_FILE,
                format!(
                    "checkpoint location {} is in an inconsistent state: the metadata file {} is \
                     missing but the offset and/or commit logs contain data. Restore the \
                     metadata file, or start with a new checkpoint location",
                    dir.root().display(),
                    file.display()
                ),
            ));
        }
        let fresh = StreamMetadata {
            id: uuid::Uuid::new_v4().to_string(),
        };
        if write_atomic_new(&file, &fresh.to_bytes())? {
            return Ok(fresh);
        }
        // Someone else created it in between: theirs wins.
        Self::read(&file)?.ok_or_else(|| {
            SluiceError::internal(format!("{} vanished right after creation", file.display()))
        })
    }

    /// Reads `file`, `None` if it does not exist.
    pub fn read(file: &Path) -> Result<Option<StreamMetadata>> {
        match crate::storage::read(file) {
            Ok(bytes) => Self::from_bytes(&bytes, file).map(Some),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SluiceError::io(
                Fault::Checkpoint,
                format!("reading {}", file.display()),
                e,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn spark_bytes() {
        let m = StreamMetadata {
            id: "8c7817e7-07c9-4313-a3c2-1c8d999130ed".to_string(),
        };
        let b = m.to_bytes();
        assert_eq!(b, b"{\"id\":\"8c7817e7-07c9-4313-a3c2-1c8d999130ed\"}");
        assert_eq!(b.len(), 45);
        assert_eq!(StreamMetadata::from_bytes(&b, Path::new("m")).unwrap(), m);
    }

    #[test]
    fn read_or_create_is_stable() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = CheckpointDir::new(tmp.path().join("ck"));
        let a = StreamMetadata::read_or_create(&dir).unwrap();
        let b = StreamMetadata::read_or_create(&dir).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.id.len(), 36);
        assert_eq!(fs::read(dir.metadata_file()).unwrap(), a.to_bytes());
    }

    #[test]
    fn missing_metadata_with_offsets_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = CheckpointDir::new(tmp.path());
        fs::create_dir_all(dir.offsets_dir()).unwrap();
        fs::write(dir.offsets_dir().join("0"), b"v1\n{}").unwrap();
        let e = StreamMetadata::read_or_create(&dir).unwrap_err();
        assert_eq!(e.class(), "STREAMING_CHECKPOINT_MISSING_METADATA_FILE");
        assert_eq!(e.fault(), Fault::Checkpoint);
        assert!(!dir.metadata_file().exists());
    }

    #[test]
    fn corrupt_metadata() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = CheckpointDir::new(tmp.path());
        fs::write(dir.metadata_file(), b"{\"id\":").unwrap();
        let e = StreamMetadata::read_or_create(&dir).unwrap_err();
        assert_eq!(e.class(), "CHECKPOINT_CORRUPT_LOG");
        assert!(e.message().contains("metadata"));
    }
}
