//! `commits/N`: the log of completed batches (Spark's `CommitLog`).

use std::path::Path;

use serde_json::Value;

use super::log::{corrupt_log, log_lines, log_text, parse_version_line, LogEntry, MetadataLog};
use crate::error::Result;

/// The commit log: `<checkpoint>/commits/<batchId>`.
pub type CommitLog = MetadataLog<CommitMetadata>;

/// The format version Sluice writes and the highest it reads.
pub const COMMIT_LOG_VERSION: u32 = 1;

/// The content of `commits/N`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitMetadata {
    /// The watermark computed after batch N: what batch N+1 runs with (0 = none yet).
    pub next_batch_watermark_ms: i64,
}

impl CommitMetadata {
    /// The commit of a batch after which the watermark is `next_batch_watermark_ms`.
    pub fn new(next_batch_watermark_ms: i64) -> Self {
        Self {
            next_batch_watermark_ms,
        }
    }
}

impl LogEntry for CommitMetadata {
    /// `v1\n{"nextBatchWatermarkMs":N}`, no trailing newline.
    fn to_bytes(&self) -> Vec<u8> {
        format!(
            "v{COMMIT_LOG_VERSION}\n{{\"nextBatchWatermarkMs\":{}}}",
            self.next_batch_watermark_ms
        )
        .into_bytes()
    }

    fn from_bytes(bytes: &[u8], file: &Path) -> Result<Self> {
        let text = log_text(bytes, file)?;
        let lines = log_lines(text);
        parse_version_line(lines.first().copied(), COMMIT_LOG_VERSION, file)?;
        // Spark reads a missing line 2 as `{}`.
        let line = match lines.get(1) {
            None => return Ok(Self::default()),
            Some(l) if l.trim().is_empty() => return Ok(Self::default()),
            Some(l) => *l,
        };
        let v: Value = serde_json::from_str(line)
            .map_err(|e| corrupt_log(file, format!("line 2 is not valid JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| corrupt_log(file, "line 2 should be a JSON object"))?;
        let next = match obj.get("nextBatchWatermarkMs") {
            None | Some(Value::Null) => 0,
            Some(x) => x
                .as_i64()
                .ok_or_else(|| corrupt_log(file, "nextBatchWatermarkMs should be an integer"))?,
        };
        Ok(Self::new(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spark_bytes() {
        // commits/0 of scenarios A and B in spark-checkpoint-format.md.
        assert_eq!(
            CommitMetadata::new(0).to_bytes(),
            b"v1\n{\"nextBatchWatermarkMs\":0}"
        );
        assert_eq!(CommitMetadata::new(0).to_bytes().len(), 29);
        let b = CommitMetadata::new(1789473420000).to_bytes();
        assert_eq!(b, b"v1\n{\"nextBatchWatermarkMs\":1789473420000}");
        assert_eq!(b.len(), 41);
        let f = Path::new("/ck/commits/1");
        assert_eq!(
            CommitMetadata::from_bytes(&b, f).unwrap(),
            CommitMetadata::new(1789473420000)
        );
        assert_eq!(
            CommitMetadata::from_bytes(b"v1", f).unwrap(),
            CommitMetadata::new(0)
        );
        assert_eq!(
            CommitMetadata::from_bytes(b"v1\n{}", f).unwrap(),
            CommitMetadata::new(0)
        );
    }

    #[test]
    fn bad_files() {
        let f = Path::new("/ck/commits/1");
        assert_eq!(
            CommitMetadata::from_bytes(b"v9\n{}", f)
                .unwrap_err()
                .class(),
            "CHECKPOINT_UNSUPPORTED_VERSION"
        );
        for bad in [
            &b""[..],
            b"{\"nextBatchWatermarkMs\":0}",
            b"v1\n{\"next",
            b"v1\n{\"nextBatchWatermarkMs\":\"x\"}",
        ] {
            let e = CommitMetadata::from_bytes(bad, f).unwrap_err();
            assert_eq!(e.class(), "CHECKPOINT_CORRUPT_LOG");
            assert!(e.message().contains("/ck/commits/1"));
        }
    }
}
