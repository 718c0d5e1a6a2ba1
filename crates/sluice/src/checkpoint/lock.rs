//! `<checkpoint>/.lock`: one running query per checkpoint.

use crate::error::class;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::CheckpointDir;
use crate::error::{Fault, Result, SluiceError};

/// An exclusive OS lock (`flock` on Unix, `LockFileEx` on Windows) on `<checkpoint>/.lock`,
/// held while a query runs. A second query on the same checkpoint, in this process or another,
/// is refused with `CONCURRENT_QUERY`. The lock is released when this value is dropped (or the
/// process dies: the OS releases it, so a crash never leaves a stale lock behind).
///
/// The lock file itself is never deleted (deleting it would let two processes lock two
/// different inodes); it holds the id of the process that last took the lock, for messages.
///
/// On an object store (an `s3://`, `gs://`, ... checkpoint) there is no OS lock: the lock is a
/// lease (`lease.rs`, `<checkpoint>/sluice/lease/<generation>`), taken with a conditional create
/// and kept alive by a heartbeat.
#[derive(Debug)]
pub struct CheckpointLock {
    held: Held,
}

#[derive(Debug)]
enum Held {
    File { file: File, path: PathBuf },
    Lease(super::lease::Lease),
}

impl CheckpointLock {
    /// Takes the lock of the checkpoint at `root` (a [`CheckpointDir`] or its root path),
    /// creating the checkpoint directory if needed. Never blocks.
    pub fn acquire(root: impl AsRef<Path>) -> Result<CheckpointLock> {
        let dir = CheckpointDir::new(root.as_ref());
        let root = dir.root();
        if crate::storage::is_remote(root) {
            let timeout = crate::storage::option(super::lease::LEASE_TIMEOUT_KEY)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(std::time::Duration::from_millis);
            return Ok(CheckpointLock {
                held: Held::Lease(super::lease::Lease::acquire(root, timeout)?),
            });
        }
        crate::storage::create_dir_all(root).map_err(|e| {
            SluiceError::io(
                Fault::Checkpoint,
                format!("creating checkpoint directory {}", root.display()),
                e,
            )
        })?;
        let path = dir.lock_file();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| {
                SluiceError::io(Fault::Checkpoint, format!("opening {}", path.display()), e)
            })?;
        // flock semantics: the lock belongs to this open file description, so a second open of
        // the same file, even in this process, conflicts with it.
        let locked = fs4::fs_std::FileExt::try_lock_exclusive(&file).map_err(|e| {
            SluiceError::io(Fault::Checkpoint, format!("locking {}", path.display()), e)
        })?;
        if !locked {
            let holder = read_holder(&mut file);
            return Err(concurrent_query(root, &path, holder.as_deref()));
        }
        // Record who holds it (best effort: only used in messages).
        let _ = file
            .set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| write!(file, "pid {}", std::process::id()))
            .and_then(|_| file.flush());
        Ok(CheckpointLock {
            held: Held::File { file, path },
        })
    }

    /// The lock file (the lease object on an object store).
    pub fn path(&self) -> &Path {
        match &self.held {
            Held::File { path, .. } => path,
            Held::Lease(l) => l.path(),
        }
    }

    /// Fails when the lock is no longer this query's: on an object store, another query took
    /// the lease over after this one's heartbeats stopped (`CONCURRENT_QUERY`); on a local disk,
    /// the lock file was deleted or replaced, so a second query could lock the new file
    /// (`CHECKPOINT_LOCK_LOST`). Checked before each batch's offsets are logged.
    pub fn check(&self) -> Result<()> {
        match &self.held {
            Held::File { file, path } => check_same_file(file, path),
            Held::Lease(l) => l.check(),
        }
    }
}

impl Drop for CheckpointLock {
    fn drop(&mut self) {
        // Closing the file releases the lock anyway; unlocking first makes it immediate.
        if let Held::File { file, .. } = &self.held {
            let _ = fs4::fs_std::FileExt::unlock(file);
        }
    }
}

/// Whether `path` is still the file this query locked (same device and inode).
#[cfg(unix)]
fn check_same_file(file: &File, path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata().map_err(|e| {
        SluiceError::io(Fault::Checkpoint, format!("checking {}", path.display()), e)
    })?;
    let same = std::fs::metadata(path)
        .map(|m| m.dev() == held.dev() && m.ino() == held.ino())
        .unwrap_or(false);
    if same {
        return Ok(());
    }
    Err(SluiceError::checkpoint(
        class::CHECKPOINT_LOCK_LOST,
        format!(
            "the lock file {} was deleted or replaced while this query ran on the checkpoint: \
             another query may lock the new file and write the same batches. This query stops \
             before its next batch. Make sure no other query uses this checkpoint (stop it), \
             never delete the lock file of a running query, then restart this one",
            path.display()
        ),
    ))
}

#[cfg(not(unix))]
fn check_same_file(_file: &File, _path: &Path) -> Result<()> {
    Ok(())
}

fn read_holder(file: &mut File) -> Option<String> {
    let mut s = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(128).read_to_string(&mut s).ok()?;
    let s = s.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn concurrent_query(root: &Path, lock: &Path, holder: Option<&str>) -> SluiceError {
    let by = holder.map(|h| format!(", held by {h}")).unwrap_or_default();
    SluiceError::checkpoint(
        class::CONCURRENT_QUERY,
        format!(
            "another query is already running on the checkpoint {} (lock {}{by}). Stop that \
             query first, or give this query another checkpointLocation",
            root.display(),
            lock.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_conflicts_until_release() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = CheckpointDir::new(tmp.path().join("ck"));
        let first = CheckpointLock::acquire(&dir).unwrap();
        let err = CheckpointLock::acquire(&dir).unwrap_err();
        assert_eq!(err.class(), "CONCURRENT_QUERY");
        assert_eq!(err.fault(), Fault::Checkpoint);
        assert!(err.message().contains("another query"), "{}", err.message());
        assert!(err.message().contains("checkpointLocation"));
        assert!(err
            .message()
            .contains(&format!("pid {}", std::process::id())));
        // Also from another thread.
        let d2 = dir.clone();
        let e2 = std::thread::spawn(move || CheckpointLock::acquire(&d2).map(|_| ()))
            .join()
            .unwrap()
            .unwrap_err();
        assert_eq!(e2.class(), "CONCURRENT_QUERY");
        drop(first);
        let again = CheckpointLock::acquire(&dir).unwrap();
        assert!(again.path().ends_with(".lock"));
    }

    #[cfg(unix)]
    #[test]
    fn a_deleted_lock_file_is_noticed_by_its_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = CheckpointDir::new(tmp.path().join("ck"));
        let first = CheckpointLock::acquire(&dir).unwrap();
        first.check().unwrap();
        std::fs::remove_file(first.path()).unwrap();
        let e = first.check().unwrap_err();
        assert_eq!(e.class(), "CHECKPOINT_LOCK_LOST");
        // A second query can now lock a new file: the first must not go on.
        let _second = CheckpointLock::acquire(&dir).unwrap();
        assert_eq!(first.check().unwrap_err().class(), "CHECKPOINT_LOCK_LOST");
    }

    #[test]
    fn different_checkpoints_do_not_conflict() {
        let tmp = tempfile::tempdir().unwrap();
        let _a = CheckpointLock::acquire(CheckpointDir::new(tmp.path().join("a"))).unwrap();
        let _b = CheckpointLock::acquire(CheckpointDir::new(tmp.path().join("b"))).unwrap();
    }
}
