//! Entry points for the `cargo fuzz` targets in `fuzz/` (every parser of untrusted bytes). Each
//! takes arbitrary bytes and must return (an error is fine) without panicking.

use std::path::Path;

use crate::checkpoint::{CommitMetadata, LogEntry, OffsetSeq, StreamMetadata};

/// Checkpoint logs: `offsets/N`, `commits/N`, `metadata`, file source and file sink logs.
pub fn checkpoint_logs(bytes: &[u8]) {
    let p = Path::new("fuzz");
    let _ = OffsetSeq::from_bytes(bytes, p);
    let _ = CommitMetadata::from_bytes(bytes, p);
    let _ = StreamMetadata::from_bytes(bytes, p);
    let _ = crate::checkpoint::deserialize_entries::<serde_json::Value>(bytes, p);
    if let Ok(text) = std::str::from_utf8(bytes) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
            let _ = crate::checkpoint::plan_recovery(
                Some((
                    1,
                    OffsetSeq {
                        metadata: Default::default(),
                        offsets: vec![Some(v)],
                    },
                )),
                None,
                None,
            );
        }
    }
}

/// State store delta and snapshot files.
pub fn state_file(bytes: &[u8]) {
    crate::state::fuzz_read(bytes);
}

/// Source records: JSON lines and CSV with Spark's PERMISSIVE rules, and `from_json` documents.
pub fn source_records(bytes: &[u8]) {
    crate::source::file::fuzz_parse(bytes);
}

/// Pipeline files (`sluice run FILE.sql`): tokenizing, the hand-written DDL parser (`CREATE
/// TABLE ... WATERMARK FOR ... WITH (...)`, `CREATE SINK`, `INSERT INTO`, `SET`, variables) and
/// the checks that point at `file:line:column`. Errors are fine; panics are not.
pub fn pipeline_sql(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Ok(mut p) = crate::pipeline::Pipeline::parse(&text, "fuzz.sql") {
        // Variables are resolved when the session is built from the file's SET statements.
        p.set_variable("x", "1");
        let _ = p.session_builder();
        let _ = p.query_names();
    }
}
