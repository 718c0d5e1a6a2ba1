//! `CompactibleLog<E>`: Spark's `CompactibleFileStreamLog`, a log of JSON-line entries per batch
//! that is periodically rewritten whole as `<id>.compact`. Used by the file sink's
//! `_spark_metadata` (and fit for the file source's `sources/<i>/`).

use std::fmt;
use std::io::ErrorKind;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::atomic::write_atomic_new_as;
use super::log::{corrupt_log, log_lines, log_text, parse_batch_id, parse_version_line};
pub use crate::conf::LogCleanup;
use crate::error::{Fault, Result, SluiceError};
use crate::storage;

/// The format version written and the highest read (`FileStreamSinkLog.VERSION`,
/// `FileStreamSourceLog.VERSION`).
pub const COMPACTIBLE_LOG_VERSION: u32 = 1;

/// Spark's default `compactInterval` for both file sink and file source logs.
pub const DEFAULT_COMPACT_INTERVAL: u64 = 10;

const COMPACT_SUFFIX: &str = ".compact";

/// A log with one file per batch: `<dir>/<id>` holding `v1` then one compact JSON line per
/// entry of that batch (no trailing newline), except that every batch with
/// `(id + 1) % compact_interval == 0` is written as `<id>.compact` holding **all** entries so far.
///
/// Readers take the newest `.compact` file and the plain files after it, so they are correct
/// whether or not the plain files before a compaction still exist. With a [`LogCleanup`]
/// ([`with_cleanup`](Self::with_cleanup)), each add deletes the files a retained compaction
/// supersedes, as Spark does, so the log's size follows its live entries instead of growing
/// with every compaction ever written. Writes are atomic and never overwrite:
/// [`add`](Self::add) returns `false` if the batch exists in either form.
pub struct CompactibleLog<E> {
    dir: PathBuf,
    compact_interval: u64,
    fault: Fault,
    cleanup: Option<LogCleanup>,
    _entry: PhantomData<fn() -> E>,
}

impl<E> Clone for CompactibleLog<E> {
    fn clone(&self) -> Self {
        Self {
            dir: self.dir.clone(),
            compact_interval: self.compact_interval,
            fault: self.fault,
            cleanup: self.cleanup,
            _entry: PhantomData,
        }
    }
}

impl<E> fmt::Debug for CompactibleLog<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactibleLog")
            .field("dir", &self.dir)
            .field("compact_interval", &self.compact_interval)
            .finish()
    }
}

impl<E: Serialize + DeserializeOwned> CompactibleLog<E> {
    /// A log over `dir`, compacting every `compact_interval` batches (0 is taken as 1).
    /// I/O errors are reported with `fault` (checkpoint for source logs, connector for sinks).
    pub fn new(dir: impl Into<PathBuf>, compact_interval: u64, fault: Fault) -> Self {
        Self {
            dir: dir.into(),
            compact_interval: compact_interval.max(1),
            fault,
            cleanup: None,
            _entry: PhantomData,
        }
    }

    /// The same log, deleting superseded files after each add as `cleanup` says.
    pub fn with_cleanup(mut self, cleanup: LogCleanup) -> Self {
        self.cleanup = Some(cleanup);
        self
    }

    /// The log's directory (e.g. `<output>/_spark_metadata`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every how many batches the log is compacted (Spark's `compactInterval`; at least 1).
    pub fn compact_interval(&self) -> u64 {
        self.compact_interval
    }

    /// Whether batch `id` is written as `<id>.compact`.
    pub fn is_compaction_batch(&self, id: u64) -> bool {
        (id + 1).is_multiple_of(self.compact_interval)
    }

    /// The file batch `id` is written to.
    pub fn path_of(&self, id: u64) -> PathBuf {
        if self.is_compaction_batch(id) {
            self.dir.join(format!("{id}{COMPACT_SUFFIX}"))
        } else {
            self.dir.join(id.to_string())
        }
    }

    /// Batch ids present, ascending, each with whether it is a `.compact` file. When both
    /// `N` and `N.compact` exist, only the compact one is listed. A missing directory is empty.
    pub fn batch_ids(&self) -> Result<Vec<(u64, bool)>> {
        let rd = match storage::list_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io(format!("listing {}", self.dir.display()), e)),
        };
        let mut ids = Vec::new();
        for ent in rd {
            let name = ent.name.as_str();
            if let Some(id) = parse_batch_id(name) {
                ids.push((id, false));
            } else if let Some(id) = name.strip_suffix(COMPACT_SUFFIX).and_then(parse_batch_id) {
                ids.push((id, true));
            }
        }
        // Sort by id with compact first, then keep the first of each id.
        ids.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        ids.dedup_by_key(|x| x.0);
        Ok(ids)
    }

    /// The batch ids with no file although a later batch has one, after the newest compact
    /// file (whose predecessors it holds, and which may be cleaned up). A gap is a file deleted
    /// or lost: its entries would silently be missing from every read and compaction after.
    pub fn missing_ids(&self) -> Result<Vec<u64>> {
        let ids = self.batch_ids()?;
        let Some(&(latest, _)) = ids.last() else {
            return Ok(Vec::new());
        };
        let from = ids
            .iter()
            .rposition(|(_, compact)| *compact)
            .map_or(0, |i| ids[i].0 + 1);
        let present: std::collections::HashSet<u64> = ids.iter().map(|(id, _)| *id).collect();
        Ok((from..latest).filter(|id| !present.contains(id)).collect())
    }

    /// The first live file (the newest compaction and the files after it: what readers read)
    /// that does not parse, with its batch id and the error; None when every one parses. A
    /// query checks this at start, so a damaged file is named before any batch runs, not
    /// batches later when a compaction reads it.
    pub fn first_unreadable(&self) -> Result<Option<(u64, PathBuf, String)>> {
        let ids = self.batch_ids()?;
        let start = ids.iter().rposition(|(_, compact)| *compact).unwrap_or(0);
        for &(id, compact) in &ids[start..] {
            let path = if compact {
                self.dir.join(format!("{id}{COMPACT_SUFFIX}"))
            } else {
                self.dir.join(id.to_string())
            };
            match self.read_file(&path) {
                Ok(_) => {}
                Err(e) if e.is(crate::error::class::IO_ERROR) => return Err(e),
                Err(e) => {
                    let defect = super::log::log_defect(&e).unwrap_or_else(|| e.to_string());
                    return Ok(Some((id, path, defect)));
                }
            }
        }
        Ok(None)
    }

    /// The newest batch id, in either form.
    pub fn latest_batch_id(&self) -> Result<Option<u64>> {
        Ok(self.batch_ids()?.last().map(|x| x.0))
    }

    /// The entries of batch `id` as written (for a compaction batch: all entries up to it).
    pub fn get(&self, id: u64) -> Result<Option<Vec<E>>> {
        let compact = self.dir.join(format!("{id}{COMPACT_SUFFIX}"));
        if let Some(v) = self.read_file(&compact)? {
            return Ok(Some(v));
        }
        self.read_file(&self.dir.join(id.to_string()))
    }

    /// Writes batch `id` (as `<id>.compact` with all earlier entries when it is a compaction
    /// batch). Returns `false`, writing nothing, if batch `id` already exists.
    pub fn add(&self, id: u64, entries: Vec<E>) -> Result<bool> {
        let plain = self.dir.join(id.to_string());
        let compact = self.dir.join(format!("{id}{COMPACT_SUFFIX}"));
        if storage::is_file(&plain) || storage::is_file(&compact) {
            return Ok(false);
        }
        let (path, bytes) = if self.is_compaction_batch(id) {
            let mut text = self.entry_lines_up_to(id.checked_sub(1))?;
            text.extend_from_slice(
                &serialize_entries(&entries)?[COMPACTIBLE_LOG_VERSION_LINE.len()..],
            );
            (compact, text)
        } else {
            (plain, serialize_entries(&entries)?)
        };
        let added = write_atomic_new_as(self.fault, &path, &bytes)?;
        if added {
            self.delete_expired(id)?;
        }
        Ok(added)
    }

    /// Deletes the files before the newest compaction that keeps the last
    /// `min_batches_to_retain` batches readable, if older than the cleanup delay (Spark's
    /// `deleteExpiredLog`): with compaction every 10 batches and 100 retained, about 110 small
    /// files and two compactions stay, however long the query runs.
    fn delete_expired(&self, current: u64) -> Result<()> {
        let Some(c) = self.cleanup.filter(|c| c.enabled) else {
            return Ok(());
        };
        let interval = self.compact_interval;
        let retain = c.min_batches_to_retain.max(1);
        if current + 1 < retain + interval {
            return Ok(());
        }
        // The first batch to keep readable, and the compaction at or before it, which holds
        // every entry before it: files before that compaction are superseded.
        let min_batch = current + 1 - retain;
        let min_compaction = min_batch - (min_batch % interval) - 1;
        let expired_before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
            - c.delay_ms as i64;
        let listed = match storage::list_dir(&self.dir) {
            Ok(l) => l,
            Err(e) => return Err(self.io(format!("listing {}", self.dir.display()), e)),
        };
        for ent in listed {
            let name = ent.name.as_str();
            let Some(id) = parse_batch_id(name)
                .or_else(|| name.strip_suffix(COMPACT_SUFFIX).and_then(parse_batch_id))
            else {
                continue;
            };
            if id < min_compaction && ent.modified_ms <= expired_before {
                match storage::remove_file(&ent.path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(self.io(format!("deleting {}", ent.path.display()), e)),
                }
            }
        }
        Ok(())
    }

    /// Every entry of every batch, in batch order.
    pub fn all_entries(&self) -> Result<Vec<E>> {
        match self.latest_batch_id()? {
            Some(latest) => self.entries_up_to(Some(latest)),
            None => Ok(Vec::new()),
        }
    }

    /// All entries of batches `<= max` (none if `max` is None): the newest compact file at or
    /// below `max`, then the plain files after it.
    fn entries_up_to(&self, max: Option<u64>) -> Result<Vec<E>> {
        let mut out = Vec::new();
        for (id, _) in self.ids_from_newest_compaction(max)? {
            // A file listed a moment ago may vanish only if another process cleans up
            // superseded files; a batch that never had a file added nothing visible.
            match self.get(id)? {
                Some(entries) => out.extend(entries),
                None => log::warn!("{}: batch {id} vanished while reading", self.dir.display()),
            }
        }
        Ok(out)
    }

    /// The batches a reader of every entry up to `max` reads (none if `max` is None): the
    /// newest compaction at or below `max`, then the plain files after it; whether each is a
    /// compaction.
    fn ids_from_newest_compaction(&self, max: Option<u64>) -> Result<Vec<(u64, bool)>> {
        let Some(max) = max else {
            return Ok(Vec::new());
        };
        let mut ids: Vec<(u64, bool)> = self
            .batch_ids()?
            .into_iter()
            .filter(|(id, _)| *id <= max)
            .collect();
        let start = ids.iter().rposition(|(_, compact)| *compact).unwrap_or(0);
        ids.drain(..start);
        Ok(ids)
    }

    /// The file text of a compaction of every entry of batches `<= max`: the version line,
    /// then the newest compaction's entries carried over as written (not parsed: it was written
    /// atomically by this log, and every live file is checked when the log is opened), then
    /// the entries of the plain files after it (parsed, so a damaged one is refused). A
    /// compaction costs a copy of the bytes, not a parse and a print of every entry.
    fn entry_lines_up_to(&self, max: Option<u64>) -> Result<Vec<u8>> {
        let mut out = COMPACTIBLE_LOG_VERSION_LINE.as_bytes().to_vec();
        for (id, compact) in self.ids_from_newest_compaction(max)? {
            if compact {
                let path = self.dir.join(format!("{id}{COMPACT_SUFFIX}"));
                match storage::read(&path) {
                    Ok(bytes) => {
                        out.extend_from_slice(compacted_lines(&bytes, &path)?);
                        continue;
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(self.io(format!("reading {}", path.display()), e)),
                }
            }
            match self.get(id)? {
                Some(entries) => out.extend_from_slice(
                    &serialize_entries(&entries)?[COMPACTIBLE_LOG_VERSION_LINE.len()..],
                ),
                None => log::warn!("{}: batch {id} vanished while reading", self.dir.display()),
            }
        }
        Ok(out)
    }

    fn read_file(&self, path: &Path) -> Result<Option<Vec<E>>> {
        let bytes = match storage::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io(format!("reading {}", path.display()), e)),
        };
        deserialize_entries(&bytes, path).map(Some)
    }

    fn io(&self, what: String, e: std::io::Error) -> SluiceError {
        SluiceError::io(self.fault, what, e)
    }
}

/// The version line every compactible log file starts with.
const COMPACTIBLE_LOG_VERSION_LINE: &str = "v1";

/// The entry lines of a compaction file, each with the `\n` before it, as written (the
/// version line checked; the text must end with a whole entry).
fn compacted_lines<'a>(bytes: &'a [u8], file: &Path) -> Result<&'a [u8]> {
    let text = log_text(bytes, file)?;
    let (version, _) = text.split_once('\n').unwrap_or((text, ""));
    parse_version_line(Some(version), COMPACTIBLE_LOG_VERSION, file)?;
    let lines = &bytes[version.len()..];
    let lines = match lines.iter().rposition(|b| !b.is_ascii_whitespace()) {
        Some(last) => &lines[..=last],
        None => return Ok(&[]),
    };
    if lines.last() != Some(&b'}') {
        return Err(corrupt_log(file, "its last entry is cut short"));
    }
    Ok(lines)
}

/// `v1` then `\n<json>` per entry.
pub fn serialize_entries<E: Serialize>(entries: &[E]) -> Result<Vec<u8>> {
    let mut s = format!("v{COMPACTIBLE_LOG_VERSION}");
    for e in entries {
        s.push('\n');
        let line = serde_json::to_string(e)
            .map_err(|err| SluiceError::internal(format!("cannot serialize a log entry: {err}")))?;
        s.push_str(&line);
    }
    Ok(s.into_bytes())
}

/// Parses `v1` then one JSON entry per non-empty line.
pub fn deserialize_entries<E: DeserializeOwned>(bytes: &[u8], file: &Path) -> Result<Vec<E>> {
    let text = log_text(bytes, file)?;
    let lines = log_lines(text);
    parse_version_line(lines.first().copied(), COMPACTIBLE_LOG_VERSION, file)?;
    lines
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| corrupt_log(file, format!("line {} is not a valid entry: {e}", i + 1)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::fs;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Entry {
        path: String,
        #[serde(rename = "batchId")]
        batch_id: u64,
    }

    fn e(b: u64, i: u64) -> Entry {
        Entry {
            path: format!("f{b}_{i}"),
            batch_id: b,
        }
    }

    #[test]
    fn compacts_every_interval_and_reads_either_way() {
        let tmp = tempfile::tempdir().unwrap();
        let log: CompactibleLog<Entry> =
            CompactibleLog::new(tmp.path().join("log"), 3, Fault::Checkpoint);
        assert_eq!(log.latest_batch_id().unwrap(), None);
        assert!(log.all_entries().unwrap().is_empty());
        let mut expected = Vec::new();
        for b in 0..8u64 {
            let entries: Vec<Entry> = (0..(b % 3)).map(|i| e(b, i)).collect();
            expected.extend(entries.clone());
            assert!(log.add(b, entries).unwrap());
            assert!(!log.add(b, vec![e(b, 99)]).unwrap());
        }
        assert!(tmp.path().join("log/2.compact").exists());
        assert!(tmp.path().join("log/5.compact").exists());
        assert!(!tmp.path().join("log/5").exists());
        assert_eq!(log.latest_batch_id().unwrap(), Some(7));
        assert_eq!(log.all_entries().unwrap(), expected);
        // Batch 5's compact file holds all entries up to batch 5.
        let upto5: Vec<Entry> = expected
            .iter()
            .filter(|x| x.batch_id <= 5)
            .cloned()
            .collect();
        assert_eq!(log.get(5).unwrap().unwrap(), upto5);
        // Deleting the files superseded by a compaction changes nothing for readers.
        for b in [0u64, 1, 3, 4] {
            fs::remove_file(tmp.path().join(format!("log/{b}"))).unwrap();
        }
        fs::remove_file(tmp.path().join("log/2.compact")).unwrap();
        assert_eq!(log.all_entries().unwrap(), expected);
        let text = fs::read_to_string(tmp.path().join("log/7")).unwrap();
        assert_eq!(text, "v1\n{\"path\":\"f7_0\",\"batchId\":7}");
    }

    #[test]
    fn cleanup_keeps_the_retained_batches_and_one_compaction_before_them() {
        let tmp = tempfile::tempdir().unwrap();
        let cleanup = LogCleanup {
            enabled: true,
            delay_ms: 0,
            min_batches_to_retain: 5,
        };
        let log: CompactibleLog<Entry> =
            CompactibleLog::new(tmp.path().join("log"), 3, Fault::Connector).with_cleanup(cleanup);
        let mut expected = Vec::new();
        for b in 0..40u64 {
            expected.push(e(b, 0));
            assert!(log.add(b, vec![e(b, 0)]).unwrap());
            // Every entry stays readable, and so does each retained batch on its own.
            assert_eq!(log.all_entries().unwrap(), expected);
            for r in b.saturating_sub(4)..=b {
                assert!(log.get(r).unwrap().is_some(), "batch {r} after {b}");
            }
            assert!(log.missing_ids().unwrap().is_empty());
        }
        let mut names: Vec<String> = fs::read_dir(tmp.path().join("log"))
            .unwrap()
            .map(|d| d.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort_by_key(|n| n.trim_end_matches(".compact").parse::<u64>().unwrap());
        // Batch 39 retains 35..=39: the compaction 32 (holding up to 32) and the files after it.
        assert_eq!(
            names,
            [
                "32.compact",
                "33",
                "34",
                "35.compact",
                "36",
                "37",
                "38.compact",
                "39"
            ]
        );
        // Without cleanup (or within the delay) nothing is deleted.
        let keep = tempfile::tempdir().unwrap();
        let log: CompactibleLog<Entry> = CompactibleLog::new(keep.path(), 3, Fault::Connector)
            .with_cleanup(LogCleanup {
                delay_ms: 3_600_000,
                ..cleanup
            });
        for b in 0..20u64 {
            log.add(b, vec![e(b, 0)]).unwrap();
        }
        assert_eq!(fs::read_dir(keep.path()).unwrap().count(), 20);
    }

    #[test]
    fn corrupt_entry_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let log: CompactibleLog<Entry> = CompactibleLog::new(tmp.path(), 10, Fault::Connector);
        fs::write(tmp.path().join("0"), "v1\n{\"path\":").unwrap();
        let err = log.all_entries().unwrap_err();
        assert_eq!(err.class(), "CHECKPOINT_CORRUPT_LOG");
        assert!(err
            .message()
            .contains(&tmp.path().join("0").display().to_string()));
        fs::write(tmp.path().join("1"), "v2\n").unwrap();
        assert_eq!(
            log.get(1).unwrap_err().class(),
            "CHECKPOINT_UNSUPPORTED_VERSION"
        );
    }

    #[test]
    fn a_compaction_carries_the_previous_one_as_written_and_refuses_a_cut_one() {
        let tmp = tempfile::tempdir().unwrap();
        let log: CompactibleLog<Entry> =
            CompactibleLog::new(tmp.path().join("log"), 2, Fault::Checkpoint);
        // A compaction written by Spark (CRLF, a trailing newline) is carried into the next.
        fs::create_dir_all(tmp.path().join("log")).unwrap();
        fs::write(
            tmp.path().join("log/1.compact"),
            "v1\r\n{\"path\":\"f0_0\",\"batchId\":0}\r\n{\"path\":\"f1_0\",\"batchId\":1}\n",
        )
        .unwrap();
        assert!(log.add(2, vec![e(2, 0)]).unwrap());
        assert!(log.add(3, vec![e(3, 0), e(3, 1)]).unwrap());
        let all = vec![e(0, 0), e(1, 0), e(2, 0), e(3, 0), e(3, 1)];
        assert_eq!(log.get(3).unwrap().unwrap(), all);
        assert_eq!(log.all_entries().unwrap(), all);
        // A compaction whose last entry was cut short is named, not carried on.
        fs::write(
            tmp.path().join("log/5.compact"),
            "v1\n{\"path\":\"f0_0\",\"batchId\":0}\n{\"path\":\"f1_0\",",
        )
        .unwrap();
        assert!(log.add(6, vec![e(6, 0)]).unwrap());
        let err = log.add(7, vec![e(7, 0)]).unwrap_err();
        assert_eq!(err.class(), "CHECKPOINT_CORRUPT_LOG");
        assert!(err.message().contains("5.compact"), "{err}");
    }
}
