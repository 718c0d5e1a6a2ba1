//! Atomic "create if absent" writes, the primitive under every log.

use std::path::Path;

use crate::error::{Fault, Result, SluiceError};
use crate::storage;

/// Writes `bytes` to `path` atomically, only if `path` does not exist yet.
///
/// Locally the bytes go to a temporary file in the same directory (`.<name>.<uuid>.tmp`), which
/// is fsynced and then hard-linked to `path`; the link fails if `path` already exists, so two
/// writers racing for the same name cannot both win and a reader NEVER sees a partial file.
/// The temporary file is then removed and the directory fsynced, so the new name is durable.
/// On an object store it is one conditional create (`PutMode::Create`), with the same outcome
/// ([`storage::create_new`]).
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
    storage::create_new(path, bytes)
        .map_err(|e| SluiceError::io(fault, format!("writing {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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
