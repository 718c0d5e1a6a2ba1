//! Atomic "create if absent" writes, the primitive under every log.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::Path;

use crate::error::{Fault, Result, SluiceError};

/// Writes `bytes` to `path` atomically, only if `path` does not exist yet.
///
/// The bytes go to a temporary file in the same directory (`.<name>.<uuid>.tmp`), which is
/// fsynced and then hard-linked to `path`; the link fails if `path` already exists, so two
/// writers racing for the same name cannot both win and a reader NEVER sees a partial file.
/// The temporary file is then removed and the directory fsynced, so the new name is durable.
///
/// Returns `Ok(true)` if this call created `path`, `Ok(false)` if `path` already existed (its
/// content is left untouched). Creates the parent directory if it is missing. I/O errors are
/// reported as checkpoint faults; see [`write_atomic_new_as`] to choose the fault.
pub fn write_atomic_new(path: &Path, bytes: &[u8]) -> Result<bool> {
    write_atomic_new_as(Fault::Checkpoint, path, bytes)
}

/// [`write_atomic_new`], reporting I/O errors with the given fault (sinks use
/// [`Fault::Connector`]).
pub fn write_atomic_new_as(fault: Fault, path: &Path, bytes: &[u8]) -> Result<bool> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| SluiceError::internal(format!("not a file path: {}", path.display())))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    fs::create_dir_all(&dir)
        .map_err(|e| SluiceError::io(fault, format!("creating directory {}", dir.display()), e))?;
    if path.exists() {
        return Ok(false);
    }
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4()));
    let result = write_then_link(fault, &tmp, path, bytes);
    // Whatever happened, the temporary name must not stay behind.
    let _ = fs::remove_file(&tmp);
    let created = result?;
    if created {
        sync_dir(fault, &dir)?;
    }
    Ok(created)
}

fn write_then_link(fault: Fault, tmp: &Path, path: &Path, bytes: &[u8]) -> Result<bool> {
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)
            .map_err(|e| SluiceError::io(fault, format!("creating {}", tmp.display()), e))?;
        f.write_all(bytes)
            .map_err(|e| SluiceError::io(fault, format!("writing {}", tmp.display()), e))?;
        f.sync_all()
            .map_err(|e| SluiceError::io(fault, format!("syncing {}", tmp.display()), e))?;
    }
    match fs::hard_link(tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        // File systems without hard links: fall back to check-then-rename (not race-free
        // between two writers, but still never exposes a partial file).
        Err(e) if e.kind() == ErrorKind::Unsupported || e.kind() == ErrorKind::PermissionDenied => {
            if path.exists() {
                return Ok(false);
            }
            fs::rename(tmp, path).map_err(|e| {
                SluiceError::io(fault, format!("renaming to {}", path.display()), e)
            })?;
            Ok(true)
        }
        Err(e) => Err(SluiceError::io(
            fault,
            format!("linking {} to {}", tmp.display(), path.display()),
            e,
        )),
    }
}

/// Fsyncs a directory so that names created in it survive a crash.
pub(crate) fn sync_dir(fault: Fault, dir: &Path) -> Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        // Some file systems (and platforms) refuse fsync on a directory; nothing more to do.
        Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported) => Ok(()),
        Err(e) if e.raw_os_error() == Some(22) => Ok(()),
        Err(e) => Err(SluiceError::io(
            fault,
            format!("syncing directory {}", dir.display()),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_once_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub").join("0");
        assert!(write_atomic_new(&p, b"first").unwrap());
        assert!(!write_atomic_new(&p, b"second").unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"first");
        let names: Vec<_> = fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["0".to_string()]);
    }

    #[test]
    fn racing_writers_have_exactly_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("7");
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let p = p.clone();
                std::thread::spawn(move || {
                    write_atomic_new(&p, format!("w{i}").as_bytes()).unwrap()
                })
            })
            .collect();
        let wins = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|w| *w)
            .count();
        assert_eq!(wins, 1);
    }
}
