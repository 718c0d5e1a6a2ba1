//! The checkpoint directory and its logs, byte-compatible with Spark's.
//!
//! ```text
//! <checkpoint>/
//!   metadata            {"id":"<query uuid>"}                      StreamMetadata
//!   .lock               OS lock held by the running query           CheckpointLock (Sluice only)
//!   offsets/<N>         v1 \n {OffsetSeqMetadata} \n <offset per source>   OffsetSeqLog (WAL)
//!   commits/<N>         v1 \n {"nextBatchWatermarkMs":..}           CommitLog
//!   sources/<i>/        each source's own log (written by the source)
//!   state/<op>/<p>/     the state store of each stateful operator and partition (`state/`)
//!   state/<op>/_metadata/schema   the operator's recorded key/value schema
//!   sluice/query.json   the kinds of the sources and the sink (Sluice only)    QueryShape
//! ```
//!
//! Every path under the checkpoint is built by [`CheckpointDir`]; this module owns every byte
//! of `metadata`, `offsets/` and `commits/`. All log files are written with
//! [`write_atomic_new`]: a reader never sees a partial file, and a batch id is never written
//! twice. `offsets/N` is written before batch N runs, `commits/N` after its sink write; the
//! restart decision is the pure function [`plan_recovery`].

mod atomic;
mod commits;
mod compactible;
mod lease;
mod lock;
mod log;
mod metadata;
mod offsets;
mod recovery;
pub mod shape;

use crate::error::class;
use std::path::{Path, PathBuf};

pub use atomic::{write_atomic_new, write_atomic_new_as};
pub use commits::{CommitLog, CommitMetadata, COMMIT_LOG_VERSION};
pub use compactible::{
    deserialize_entries, serialize_entries, CompactibleLog, COMPACTIBLE_LOG_VERSION,
    DEFAULT_COMPACT_INTERVAL,
};
pub use lock::CheckpointLock;
pub use log::{
    corrupt_log, log_lines, log_text, parse_version_line, unsupported_version, LogEntry,
    MetadataLog,
};
pub use metadata::StreamMetadata;
pub use offsets::{OffsetSeq, OffsetSeqLog, OffsetSeqMetadata, OFFSET_LOG_VERSION};
pub use recovery::{plan_recovery, RecoveryPlan};

use crate::error::{Fault, Result, SluiceError};

/// A query's checkpoint location; builds every path under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointDir {
    root: PathBuf,
}

impl AsRef<Path> for CheckpointDir {
    fn as_ref(&self) -> &Path {
        &self.root
    }
}

impl CheckpointDir {
    /// The checkpoint location `root` (nothing is created).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The checkpoint location.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/metadata`.
    pub fn metadata_file(&self) -> PathBuf {
        self.root.join("metadata")
    }

    /// `<root>/offsets`.
    pub fn offsets_dir(&self) -> PathBuf {
        self.root.join("offsets")
    }

    /// `<root>/commits`.
    pub fn commits_dir(&self) -> PathBuf {
        self.root.join("commits")
    }

    /// `<root>/sources`.
    pub fn sources_dir(&self) -> PathBuf {
        self.root.join("sources")
    }

    /// `<root>/sources/<i>`: source `i`'s own metadata directory.
    pub fn source_dir(&self, i: usize) -> PathBuf {
        self.sources_dir().join(i.to_string())
    }

    /// `<root>/state`.
    pub fn state_dir(&self) -> PathBuf {
        self.root.join("state")
    }

    /// `<root>/state/<op>`: one stateful operator's state (Spark's `StateStoreId.storeCheckpointLocation`
    /// without the partition).
    pub fn state_operator_dir(&self, operator_id: crate::types::OperatorId) -> PathBuf {
        self.state_dir().join(operator_id.0.to_string())
    }

    /// `<root>/state/<op>/<partition>`: one state store's delta and snapshot files.
    pub fn state_partition_dir(
        &self,
        operator_id: crate::types::OperatorId,
        partition: usize,
    ) -> PathBuf {
        self.state_operator_dir(operator_id)
            .join(partition.to_string())
    }

    /// `<root>/state/<op>/_metadata/schema`: the operator's recorded key/value schema.
    pub fn state_schema_file(&self, operator_id: crate::types::OperatorId) -> PathBuf {
        self.state_operator_dir(operator_id)
            .join("_metadata")
            .join("schema")
    }

    /// `<root>/sluice/query.json`: the kinds of the query's sources and sink (Sluice only, see
    /// [`shape`]).
    pub fn query_shape_file(&self) -> PathBuf {
        self.root.join("sluice").join("query.json")
    }

    /// `<root>/sluice/file-sink.json`: the output folder a file sink writes and the offset of
    /// its batch ids in the folder's manifest (Sluice only, see `sink/file/ownership.rs`).
    pub fn file_sink_file(&self) -> PathBuf {
        self.root.join("sluice").join("file-sink.json")
    }

    /// `<root>/lateRows`: the late-row sink's own checkpoint (Sluice only: its `metadata` id, and
    /// what the sink keeps there, e.g. a Kafka transaction marker).
    pub fn late_rows_dir(&self) -> CheckpointDir {
        CheckpointDir::new(self.root.join("lateRows"))
    }

    /// `<root>/.lock`.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join(".lock")
    }

    /// Creates `<root>`, `offsets/` and `commits/` (as Spark does at query start).
    pub fn create_dirs(&self) -> Result<()> {
        for d in [self.root.clone(), self.offsets_dir(), self.commits_dir()] {
            crate::storage::create_dir_all(&d).map_err(|e| {
                SluiceError::io(Fault::Checkpoint, format!("creating {}", d.display()), e)
            })?;
        }
        Ok(())
    }

    /// The offsets log (`offsets/`, the write-ahead log).
    pub fn offset_log(&self) -> OffsetSeqLog {
        OffsetSeqLog::new(self.offsets_dir())
    }

    /// The commit log (`commits/`).
    pub fn commit_log(&self) -> CommitLog {
        CommitLog::new(self.commits_dir())
    }

    /// Takes the checkpoint's exclusive lock ([`CheckpointLock::acquire`]).
    pub fn lock(&self) -> Result<CheckpointLock> {
        CheckpointLock::acquire(self)
    }

    /// [`StreamMetadata::read_or_create`].
    pub fn read_or_create_metadata(&self) -> Result<StreamMetadata> {
        StreamMetadata::read_or_create(self)
    }

    /// Reads the logs and decides where to resume ([`plan_recovery`]).
    pub fn recovery_plan(&self) -> Result<RecoveryPlan> {
        let offsets = self.offset_log();
        let latest = offsets.get_latest()?;
        let previous = match &latest {
            Some((n, _)) if *n > 0 => offsets.get(n - 1)?,
            _ => None,
        };
        let commit = self.commit_log().get_latest()?;
        plan_recovery(latest, previous, commit)
    }

    /// Retention after writing `offsets/<current_batch_id>`: removes the offsets and commits of
    /// batches below `current_batch_id - min_batches_to_retain`, exactly like Spark (so
    /// `min_batches_to_retain + 1` offsets files stay, and a replay of the current batch
    /// always finds the offsets of the one before). `min_batches_to_retain` must be >= 1.
    pub fn purge_logs(&self, current_batch_id: u64, min_batches_to_retain: u64) -> Result<()> {
        if min_batches_to_retain == 0 {
            return Err(SluiceError::query(
                class::INVALID_CONF_VALUE,
                format!("{} must be at least 1", crate::conf::MIN_BATCHES_TO_RETAIN),
            ));
        }
        if min_batches_to_retain < current_batch_id {
            let threshold = current_batch_id - min_batches_to_retain;
            self.offset_log().purge(threshold)?;
            self.commit_log().purge(threshold)?;
        }
        Ok(())
    }
}

/// A crash while a log file was being written cannot leave a partial file behind (writes are
/// atomic), but a disk that filled up or a copy that was cut short can. If the newest
/// `offsets/N` or `commits/N` does not parse and nothing was built on it (no later entry, and for
/// `offsets/N` no `commits/N`), it is treated as the crash it was: the file is moved aside to
/// `.N.torn-<time>` (kept for inspection) with a warning, and batch N is planned or re-run
/// again. Returns the files moved aside.
pub fn recover_torn_tail(dir: &CheckpointDir) -> Result<Vec<PathBuf>> {
    remove_leftover_temp_files(dir)?;
    let mut moved = Vec::new();
    let commits = dir.commit_log();
    let offsets = dir.offset_log();
    // Only an unreadable file is torn; one from a newer Sluice (a version from the future) is not.
    let torn = |r: Result<()>| matches!(r, Err(e) if e.is(class::CHECKPOINT_CORRUPT_LOG));
    if let Some(n) = commits.latest_id()? {
        if torn(commits.get(n).map(|_| ())) {
            moved.push(set_aside(&commits.path_of(n))?);
        }
    }
    if let Some(n) = offsets.latest_id()? {
        if torn(offsets.get(n).map(|_| ())) && !crate::storage::exists(commits.path_of(n)) {
            moved.push(set_aside(&offsets.path_of(n))?);
        }
    }
    Ok(moved)
}

/// The temporary files (`.<name>.<uuid>.tmp`) of log writes a crash interrupted, in `offsets/`,
/// `commits/` and `sources/<i>/`: never part of the log, removed at start (the query holds the
/// checkpoint's lock, so no writer of this checkpoint is using them). Returns how many.
pub fn remove_leftover_temp_files(dir: &CheckpointDir) -> Result<usize> {
    let mut dirs = vec![dir.offsets_dir(), dir.commits_dir()];
    if let Ok(sources) = crate::storage::list_dir(dir.sources_dir()) {
        dirs.extend(sources.into_iter().filter(|e| e.is_dir).map(|e| e.path));
    }
    let mut removed = 0;
    for d in dirs {
        let Ok(entries) = crate::storage::list_dir(&d) else {
            continue;
        };
        for e in entries {
            if !e.is_dir && e.name.starts_with('.') && e.name.ends_with(".tmp") {
                crate::storage::remove_file(&e.path)
                    .map_err(|err| SluiceError::io(Fault::Checkpoint, e.path.display(), err))?;
                ::log::info!("removed {}, left by an interrupted write", e.path.display());
                removed += 1;
            }
        }
    }
    Ok(removed)
}

fn set_aside(file: &Path) -> Result<PathBuf> {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("log");
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let to = file.with_file_name(format!(".{name}.torn-{stamp}"));
    crate::storage::rename(file, &to)
        .map_err(|e| SluiceError::io(Fault::Checkpoint, file.display(), e))?;
    ::log::warn!(
        "{} was incomplete (a write cut short); it is set aside as {} and its batch runs again",
        file.display(),
        to.display()
    );
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftover_temp_files_of_interrupted_log_writes_are_removed_at_start() {
        let tmp = tempfile::tempdir().unwrap();
        let d = CheckpointDir::new(tmp.path());
        let files = [
            d.offsets_dir().join(".3.6f1c.tmp"),
            d.commits_dir().join(".2.aa.tmp"),
            d.source_dir(0).join(".7.b.tmp"),
        ];
        let kept = [
            d.offsets_dir().join("3"),
            d.offsets_dir().join(".2.torn-20260101T000000"),
            d.source_dir(0).join("notes.tmp"),
        ];
        for f in files.iter().chain(&kept) {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, "x").unwrap();
        }
        assert_eq!(remove_leftover_temp_files(&d).unwrap(), 3);
        assert!(files.iter().all(|f| !f.exists()));
        assert!(kept.iter().all(|f| f.exists()));
        assert_eq!(remove_leftover_temp_files(&d).unwrap(), 0);
    }

    #[test]
    fn paths() {
        let d = CheckpointDir::new("/ck");
        assert_eq!(d.root(), Path::new("/ck"));
        assert_eq!(d.metadata_file(), PathBuf::from("/ck/metadata"));
        assert_eq!(d.offsets_dir(), PathBuf::from("/ck/offsets"));
        assert_eq!(d.commits_dir(), PathBuf::from("/ck/commits"));
        assert_eq!(d.source_dir(2), PathBuf::from("/ck/sources/2"));
        assert_eq!(d.state_dir(), PathBuf::from("/ck/state"));
        assert_eq!(d.lock_file(), PathBuf::from("/ck/.lock"));
        assert_eq!(d.query_shape_file(), PathBuf::from("/ck/sluice/query.json"));
        let op = crate::types::OperatorId(3);
        assert_eq!(d.state_operator_dir(op), PathBuf::from("/ck/state/3"));
        assert_eq!(d.state_partition_dir(op, 1), PathBuf::from("/ck/state/3/1"));
        assert_eq!(
            d.state_schema_file(op),
            PathBuf::from("/ck/state/3/_metadata/schema")
        );
    }

    fn seq(n: i64) -> OffsetSeq {
        OffsetSeq::new(
            OffsetSeqMetadata::default(),
            vec![Some(serde_json::json!({ "logOffset": n }))],
        )
    }

    #[test]
    fn logs_on_disk_drive_recovery() {
        let tmp = tempfile::tempdir().unwrap();
        let d = CheckpointDir::new(tmp.path().join("ck"));
        d.create_dirs().unwrap();
        assert_eq!(d.recovery_plan().unwrap(), RecoveryPlan::Fresh);
        let (offsets, commits) = (d.offset_log(), d.commit_log());
        assert!(offsets.add(0, &seq(0)).unwrap());
        assert!(!offsets.add(0, &seq(9)).unwrap());
        assert_eq!(offsets.get(0).unwrap(), Some(seq(0)));
        assert!(matches!(
            d.recovery_plan().unwrap(),
            RecoveryPlan::Replay { batch_id: 0, .. }
        ));
        assert!(commits.add(0, &CommitMetadata::new(7)).unwrap());
        assert_eq!(
            d.recovery_plan().unwrap(),
            RecoveryPlan::ResumeAfter {
                next_batch_id: 1,
                start_offsets: seq(0),
                watermark_ms: 7
            }
        );
        assert!(offsets.add(1, &seq(1)).unwrap());
        assert_eq!(
            d.recovery_plan().unwrap(),
            RecoveryPlan::Replay {
                batch_id: 1,
                offsets: seq(1),
                start_offsets: Some(seq(0)),
                watermark_ms: 0
            }
        );
        // Exact bytes on disk.
        assert_eq!(
            std::fs::read(d.commits_dir().join("0")).unwrap(),
            b"v1\n{\"nextBatchWatermarkMs\":7}"
        );
        // A truncated newest offsets file: the message says what to do.
        std::fs::write(d.offsets_dir().join("2"), b"v1\n{\"batchWat").unwrap();
        let e = d.recovery_plan().unwrap_err();
        assert_eq!(e.class(), "CHECKPOINT_CORRUPT_LOG");
        assert!(e.message().contains("offsets/2") || e.message().contains("offsets\\2"));
    }

    #[test]
    fn purge_keeps_min_batches_plus_current() {
        let tmp = tempfile::tempdir().unwrap();
        let d = CheckpointDir::new(tmp.path());
        for n in 0..10u64 {
            d.offset_log().add(n, &seq(n as i64)).unwrap();
            d.commit_log().add(n, &CommitMetadata::new(0)).unwrap();
        }
        d.offset_log().add(10, &seq(10)).unwrap();
        // Nothing to purge while current <= min.
        d.purge_logs(10, 10).unwrap();
        assert_eq!(d.offset_log().batch_ids().unwrap().len(), 11);
        d.purge_logs(10, 3).unwrap();
        assert_eq!(d.offset_log().batch_ids().unwrap(), vec![7, 8, 9, 10]);
        assert_eq!(d.commit_log().batch_ids().unwrap(), vec![7, 8, 9]);
        // A replay of batch 10 still finds offsets/9.
        assert!(matches!(
            d.recovery_plan().unwrap(),
            RecoveryPlan::Replay { batch_id: 10, .. }
        ));
        d.purge_logs(10, 1).unwrap();
        assert_eq!(d.offset_log().batch_ids().unwrap(), vec![9, 10]);
        assert!(matches!(
            d.recovery_plan().unwrap(),
            RecoveryPlan::Replay { batch_id: 10, .. }
        ));
        assert_eq!(
            d.purge_logs(10, 0).unwrap_err().class(),
            "INVALID_CONF_VALUE"
        );
    }
}
