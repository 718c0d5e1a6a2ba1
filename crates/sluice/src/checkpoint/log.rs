//! `MetadataLog<T>`: Spark's `HDFSMetadataLog`, one file per batch id in a directory.

use crate::error::class;
use std::fmt;
use std::io::ErrorKind;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use super::atomic::write_atomic_new;
use crate::error::{Fault, Result, SluiceError};
use crate::storage;

/// What a [`MetadataLog`] stores per batch: how it becomes bytes and back.
pub trait LogEntry: Sized {
    /// The exact bytes of the file (Spark's format; no trailing newline for Spark's logs).
    fn to_bytes(&self) -> Vec<u8>;
    /// Parses a file's bytes. `file` is only for error messages; errors SHOULD be
    /// [`corrupt_log`] or [`unsupported_version`] errors naming it.
    fn from_bytes(bytes: &[u8], file: &Path) -> Result<Self>;
}

/// Raw text, for logs whose format lives elsewhere (e.g. a source's own log).
impl LogEntry for String {
    fn to_bytes(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
    fn from_bytes(bytes: &[u8], file: &Path) -> Result<Self> {
        Ok(log_text(bytes, file)?.to_string())
    }
}

/// A log of one file per batch id (`<dir>/<id>`, decimal, no padding), like Spark's
/// `HDFSMetadataLog`.
///
/// Contracts: [`add`](Self::add) is atomic (temp file, fsync, link) and NEVER overwrites: it
/// returns `false` if the id exists. Names that are not decimal numbers (temp files, Hadoop
/// `.crc` files, `N.compact`) are ignored. A file that exists but cannot be parsed is an error
/// of class `CHECKPOINT_CORRUPT_LOG` naming the file, never silently skipped.
pub struct MetadataLog<T> {
    dir: PathBuf,
    _entry: PhantomData<fn() -> T>,
}

impl<T> Clone for MetadataLog<T> {
    fn clone(&self) -> Self {
        Self::new(self.dir.clone())
    }
}

impl<T> fmt::Debug for MetadataLog<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetadataLog")
            .field("dir", &self.dir)
            .finish()
    }
}

impl<T> MetadataLog<T> {
    /// A log over `dir`. Nothing is touched until the first `add`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            _entry: PhantomData,
        }
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of batch `id`.
    pub fn path_of(&self, id: u64) -> PathBuf {
        self.dir.join(id.to_string())
    }

    /// All batch ids present, ascending. A missing directory is an empty log.
    pub fn batch_ids(&self) -> Result<Vec<u64>> {
        let mut ids = list_numeric_names(&self.dir)?;
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// The highest batch id present.
    pub fn latest_id(&self) -> Result<Option<u64>> {
        Ok(self.batch_ids()?.last().copied())
    }

    /// Removes every batch with id < `threshold`. Returns how many files were removed.
    pub fn purge(&self, threshold: u64) -> Result<usize> {
        let mut removed = 0;
        for id in self.batch_ids()? {
            if id >= threshold {
                break;
            }
            let p = self.path_of(id);
            match storage::remove_file(&p) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(SluiceError::io(
                        Fault::Checkpoint,
                        format!("purging {}", p.display()),
                        e,
                    ))
                }
            }
        }
        Ok(removed)
    }
}

impl<T: LogEntry> MetadataLog<T> {
    /// Writes batch `id` atomically. Returns `false` (and writes nothing) if it already exists.
    pub fn add(&self, id: u64, entry: &T) -> Result<bool> {
        write_atomic_new(&self.path_of(id), &entry.to_bytes())
    }

    /// Reads batch `id`; `None` if there is no such file.
    pub fn get(&self, id: u64) -> Result<Option<T>> {
        let p = self.path_of(id);
        match storage::read(&p) {
            Ok(bytes) => T::from_bytes(&bytes, &p).map(Some),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SluiceError::io(
                Fault::Checkpoint,
                format!("reading {}", p.display()),
                e,
            )),
        }
    }

    /// The batch with the highest id and its content.
    pub fn get_latest(&self) -> Result<Option<(u64, T)>> {
        // Newest first; a file that vanished between listing and reading (a concurrent purge)
        // is skipped, a corrupt one is an error.
        for id in self.batch_ids()?.into_iter().rev() {
            if let Some(v) = self.get(id)? {
                return Ok(Some((id, v)));
            }
        }
        Ok(None)
    }
}

/// The decimal file names in `dir` (others ignored). A missing directory has none.
pub(crate) fn list_numeric_names(dir: &Path) -> Result<Vec<u64>> {
    let rd = match storage::list_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(SluiceError::io(
                Fault::Checkpoint,
                format!("listing {}", dir.display()),
                e,
            ))
        }
    };
    let mut ids = Vec::new();
    for ent in rd {
        if let Some(id) = parse_batch_id(&ent.name) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// `"12"` -> 12; anything but ASCII digits -> None.
pub(crate) fn parse_batch_id(name: &str) -> Option<u64> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// What is wrong with a log file, kept as the [`corrupt_log`] error's source so that a caller
/// with a better fix than the generic one can say its own (the file sink's manifest, the file
/// source's log).
#[derive(Debug)]
pub(crate) struct LogDefect(pub String);

impl fmt::Display for LogDefect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LogDefect {}

/// The defect a [`corrupt_log`] error describes, if `e` is one.
pub fn log_defect(e: &SluiceError) -> Option<String> {
    use std::error::Error as _;
    e.source()
        .and_then(|s| s.downcast_ref::<LogDefect>())
        .map(|d| d.0.clone())
}

/// The error for a log file that exists but cannot be read as a log entry.
pub fn corrupt_log(file: &Path, detail: impl fmt::Display) -> SluiceError {
    let defect = LogDefect(detail.to_string());
    SluiceError::checkpoint(
        class::CHECKPOINT_CORRUPT_LOG,
        format!(
            "the checkpoint log file {} is corrupt ({detail}). If it is the newest file of its \
             log, a crash probably left it half-written: delete the partial file {} and restart \
             the query; otherwise start with a new checkpoint location",
            file.display(),
            file.display()
        ),
    )
    .with_source(defect)
}

/// The error for a log written by a newer format version than this build reads.
pub fn unsupported_version(file: &Path, found: u32, max_supported: u32) -> SluiceError {
    SluiceError::checkpoint(
        class::CHECKPOINT_UNSUPPORTED_VERSION,
        format!(
            "the checkpoint log file {} has format version v{found}, but this build reads up to \
             v{max_supported}: it was written by a newer engine. Run the query with that engine, \
             or start with a new checkpoint location",
            file.display()
        ),
    )
}

/// The bytes of a log file as text: non-empty UTF-8, else a corrupt-log error.
pub fn log_text<'a>(bytes: &'a [u8], file: &Path) -> Result<&'a str> {
    if bytes.is_empty() {
        return Err(corrupt_log(file, "the file is empty"));
    }
    std::str::from_utf8(bytes).map_err(|e| corrupt_log(file, format!("not UTF-8 text: {e}")))
}

/// Splits a log file in lines (`\n`, tolerating `\r\n`), dropping one trailing empty line.
pub fn log_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    if lines.len() > 1 && lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// Checks a version line `v<N>` with `1 <= N <= max_supported`; returns N.
pub fn parse_version_line(line: Option<&str>, max_supported: u32, file: &Path) -> Result<u32> {
    let line = line.unwrap_or("").trim();
    let version = line
        .strip_prefix('v')
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u32>().ok())
        .ok_or_else(|| {
            corrupt_log(
                file,
                format!("the first line should be a version like `v1`, found {line:?}"),
            )
        })?;
    if version == 0 {
        return Err(corrupt_log(file, "version v0 does not exist"));
    }
    if version > max_supported {
        return Err(unsupported_version(file, version, max_supported));
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn add_get_latest_purge() {
        let dir = tempfile::tempdir().unwrap();
        let log: MetadataLog<String> = MetadataLog::new(dir.path().join("log"));
        assert_eq!(log.get_latest().unwrap(), None);
        assert_eq!(log.batch_ids().unwrap(), Vec::<u64>::new());
        for i in 0..12u64 {
            assert!(log.add(i, &format!("v1\n{i}")).unwrap());
        }
        assert!(!log.add(3, &"other".to_string()).unwrap());
        assert_eq!(log.get(3).unwrap().as_deref(), Some("v1\n3"));
        assert_eq!(log.get(99).unwrap(), None);
        // Non-numeric names are ignored.
        fs::write(dir.path().join("log/.12.abc.tmp"), b"x").unwrap();
        fs::write(dir.path().join("log/.3.crc"), b"x").unwrap();
        fs::write(dir.path().join("log/20.compact"), b"x").unwrap();
        assert_eq!(log.get_latest().unwrap(), Some((11, "v1\n11".to_string())));
        assert_eq!(log.purge(10).unwrap(), 10);
        assert_eq!(log.batch_ids().unwrap(), vec![10, 11]);
    }

    #[test]
    fn empty_file_is_corrupt_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let log: MetadataLog<String> = MetadataLog::new(dir.path());
        fs::write(dir.path().join("4"), b"").unwrap();
        let err = log.get_latest().unwrap_err();
        assert_eq!(err.class(), "CHECKPOINT_CORRUPT_LOG");
        assert_eq!(err.fault(), Fault::Checkpoint);
        assert!(err
            .message()
            .contains(&dir.path().join("4").display().to_string()));
        assert!(err.message().contains("delete the partial file"));
    }

    #[test]
    fn version_lines() {
        let f = Path::new("/c/offsets/3");
        assert_eq!(parse_version_line(Some("v1"), 1, f).unwrap(), 1);
        let e = parse_version_line(Some("v9"), 1, f).unwrap_err();
        assert_eq!(e.class(), "CHECKPOINT_UNSUPPORTED_VERSION");
        assert!(e.message().contains("/c/offsets/3"));
        for bad in ["", "1", "v", "vx", "{}"] {
            let e = parse_version_line(Some(bad), 1, f).unwrap_err();
            assert_eq!(e.class(), "CHECKPOINT_CORRUPT_LOG", "{bad}");
        }
    }

    #[test]
    fn lines() {
        assert_eq!(log_lines("v1\na\nb"), vec!["v1", "a", "b"]);
        assert_eq!(log_lines("v1\r\na\n"), vec!["v1", "a"]);
        assert_eq!(log_lines("v1"), vec!["v1"]);
    }
}
