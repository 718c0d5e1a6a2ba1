//! The files of one store directory: names, listing, atomic replace, and the purge rule.

use std::collections::BTreeSet;
use std::io::{BufWriter, ErrorKind};
use std::path::{Path, PathBuf};

use super::format::{FileKind, StateFileWriter};
use crate::error::{Fault, Result, SluiceError};

/// `<dir>/<version>.<delta|snapshot>`.
pub(crate) fn file_path(dir: &Path, kind: FileKind, version: u64) -> PathBuf {
    dir.join(format!("{version}.{}", kind.extension()))
}

/// Parses a canonical state file name (`12.delta`, `20.snapshot`; no sign, no leading zeros).
pub(crate) fn parse_name(name: &str) -> Option<(FileKind, u64)> {
    let (num, ext) = name.split_once('.')?;
    let kind = match ext {
        "delta" => FileKind::Delta,
        "snapshot" => FileKind::Snapshot,
        _ => return None,
    };
    if num.is_empty()
        || !num.bytes().all(|b| b.is_ascii_digit())
        || (num.len() > 1 && num.starts_with('0'))
    {
        return None;
    }
    Some((kind, num.parse().ok()?))
}

/// Is `name` a temporary file left by [`write_pending`] (`.<state file name>.<uuid>.tmp`)?
fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let Some(rest) = rest.strip_suffix(".tmp") else {
        return false;
    };
    match rest.rsplit_once('.') {
        Some((file, _uuid)) => parse_name(file).is_some(),
        None => false,
    }
}

/// Which versions have a delta and which a snapshot in a store directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FileIndex {
    pub deltas: BTreeSet<u64>,
    pub snapshots: BTreeSet<u64>,
}

impl FileIndex {
    /// Lists `dir` (a missing directory is empty).
    pub(crate) fn list(dir: &Path) -> Result<Self> {
        let mut index = FileIndex::default();
        let entries = match crate::storage::list_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(index),
            Err(e) => {
                return Err(io_err(
                    format!("listing state directory {}", dir.display()),
                    e,
                ))
            }
        };
        for entry in entries {
            match parse_name(&entry.name) {
                Some((FileKind::Delta, v)) => {
                    index.deltas.insert(v);
                }
                Some((FileKind::Snapshot, v)) => {
                    index.snapshots.insert(v);
                }
                None => {}
            }
        }
        Ok(index)
    }

    /// The newest version with any file (0 when there is none).
    pub(crate) fn latest(&self) -> u64 {
        let d = self.deltas.last().copied().unwrap_or(0);
        let s = self.snapshots.last().copied().unwrap_or(0);
        d.max(s)
    }

    /// The versions (>= 1) that can be loaded from these files, ascending: those whose
    /// [`plan_load`](Self::plan_load) succeeds (the newest snapshot at or below the version,
    /// then every delta after it).
    pub(crate) fn loadable(&self) -> Vec<u64> {
        let mut ok = Vec::new();
        // loadable(v) = snapshot at v, or delta v and loadable(v - 1); version 0 is the empty map.
        let mut previous = true;
        for v in 1..=self.latest() {
            let now = self.snapshots.contains(&v) || (previous && self.deltas.contains(&v));
            if now {
                ok.push(v);
            }
            previous = now;
        }
        ok
    }

    /// The newest snapshot at or below `version` (0 = none: start from the empty version 0).
    pub(crate) fn snapshot_at_or_below(&self, version: u64) -> u64 {
        self.snapshots
            .range(..=version)
            .next_back()
            .copied()
            .unwrap_or(0)
    }

    /// The files to read to rebuild `version` (>= 1): the newest snapshot at or below it, then
    /// every delta after that snapshot. `Err(missing)` names the first delta that is absent.
    pub(crate) fn plan_load(&self, version: u64) -> std::result::Result<LoadPlan, u64> {
        let base = self.snapshot_at_or_below(version);
        for v in base + 1..=version {
            if !self.deltas.contains(&v) {
                return Err(v);
            }
        }
        Ok(LoadPlan {
            snapshot: (base > 0).then_some(base),
            deltas: (base + 1..=version).collect(),
        })
    }

    /// The files no longer needed to load any of the last `min_versions_to_retain` versions:
    /// with `oldest = latest - min_versions_to_retain + 1` and `base` the newest snapshot at or
    /// below `oldest`, every snapshot older than `base` and every delta at or below `base`.
    /// Nothing when there is no such snapshot.
    pub(crate) fn purgeable(&self, min_versions_to_retain: u64) -> Vec<(FileKind, u64)> {
        let latest = self.latest();
        let keep = min_versions_to_retain.max(1);
        let oldest = (latest + 1).saturating_sub(keep);
        let base = self.snapshot_at_or_below(oldest);
        if base == 0 {
            return Vec::new();
        }
        let mut out: Vec<(FileKind, u64)> = self
            .snapshots
            .range(..base)
            .map(|v| (FileKind::Snapshot, *v))
            .collect();
        out.extend(self.deltas.range(..=base).map(|v| (FileKind::Delta, *v)));
        out
    }

    /// Files of an abandoned history once `version` is (re)written: snapshots at or after it and
    /// deltas after it.
    pub(crate) fn superseded_by(&self, version: u64) -> Vec<(FileKind, u64)> {
        let mut out: Vec<(FileKind, u64)> = self
            .snapshots
            .range(version..)
            .map(|v| (FileKind::Snapshot, *v))
            .collect();
        out.extend(
            self.deltas
                .range(version.saturating_add(1)..)
                .map(|v| (FileKind::Delta, *v)),
        );
        out
    }

    pub(crate) fn insert(&mut self, kind: FileKind, version: u64) {
        match kind {
            FileKind::Delta => self.deltas.insert(version),
            FileKind::Snapshot => self.snapshots.insert(version),
        };
    }

    pub(crate) fn remove(&mut self, kind: FileKind, version: u64) {
        match kind {
            FileKind::Delta => self.deltas.remove(&version),
            FileKind::Snapshot => self.snapshots.remove(&version),
        };
    }
}

/// What to read to rebuild one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoadPlan {
    pub snapshot: Option<u64>,
    pub deltas: Vec<u64>,
}

/// A fully written state file waiting to take its final name (a fsynced temporary file
/// locally, the bytes in memory for an object store, which are put once under the final name).
pub(crate) struct PendingFile {
    file: crate::storage::PendingFile,
    pub path: PathBuf,
}

impl PendingFile {
    /// Puts the file under its final name (replacing it if present) and fsyncs the directory,
    /// so the new content is durable and a reader never sees a partial file.
    pub(crate) fn publish(self) -> Result<()> {
        let what = format!("publishing state file {}", self.path.display());
        self.file
            .publish(crate::storage::Publish::Replace)
            .map(|_| ())
            .map_err(|e| io_err(what, e))
    }

    /// Drops the temporary file.
    pub(crate) fn discard(self) {
        drop(self.file);
    }
}

/// Writes a state file to a temporary name next to `path` (`.<name>.<uuid>.tmp`; in memory for
/// an object store); `fill` writes the records. [`PendingFile::publish`] then puts it in place.
pub(crate) fn write_pending(
    path: &Path,
    kind: FileKind,
    version: u64,
    store: (u32, u32),
    fill: impl FnOnce(
        &mut StateFileWriter<BufWriter<crate::storage::PendingFile>>,
    ) -> std::io::Result<()>,
) -> Result<PendingFile> {
    let file = crate::storage::PendingFile::create(path)
        .map_err(|e| io_err(format!("creating state file {}", path.display()), e))?;
    let what = || format!("writing state file {}", path.display());
    let mut writer = StateFileWriter::new(
        BufWriter::with_capacity(64 * 1024, file),
        kind,
        version,
        store,
        true,
    )
    .map_err(|e| write_err(what(), e))?;
    fill(&mut writer).map_err(|e| write_err(what(), e))?;
    let buf = writer.finish().map_err(|e| write_err(what(), e))?;
    let file = buf
        .into_inner()
        .map_err(|e| io_err(what(), e.into_error()))?;
    Ok(PendingFile {
        file,
        path: path.to_path_buf(),
    })
}

/// Removes state files (a file already gone is fine) and fsyncs the directory.
pub(crate) fn delete_files(dir: &Path, files: &[(FileKind, u64)]) -> Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    for (kind, v) in files {
        let p = file_path(dir, *kind, *v);
        match crate::storage::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(format!("deleting state file {}", p.display()), e)),
        }
    }
    sync_dir(dir)
}

/// Removes temporary files left in `dir` by a crash (call only when nothing writes there).
pub(crate) fn remove_stale_temp_files(dir: &Path) -> Result<()> {
    let entries = match crate::storage::list_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(io_err(
                format!("listing state directory {}", dir.display()),
                e,
            ))
        }
    };
    for entry in entries {
        if is_temp_name(&entry.name) {
            let p = entry.path;
            if let Err(e) = crate::storage::remove_file(&p) {
                if e.kind() != ErrorKind::NotFound {
                    return Err(io_err(format!("deleting {}", p.display()), e));
                }
            }
        }
    }
    Ok(())
}

/// Fsyncs a directory so that renames and deletions in it survive a crash.
fn sync_dir(dir: &Path) -> Result<()> {
    crate::storage::sync_dir(dir)
        .map_err(|e| io_err(format!("syncing directory {}", dir.display()), e))
}

pub(crate) fn io_err(what: impl std::fmt::Display, e: std::io::Error) -> SluiceError {
    SluiceError::io(Fault::Checkpoint, what, e)
}

/// A writer error: `InvalidInput` is a Sluice bug (keys out of order), the rest is I/O.
fn write_err(what: String, e: std::io::Error) -> SluiceError {
    if e.kind() == ErrorKind::InvalidInput {
        SluiceError::internal(format!("{what}: {e}"))
    } else {
        io_err(what, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(deltas: &[u64], snapshots: &[u64]) -> FileIndex {
        FileIndex {
            deltas: deltas.iter().copied().collect(),
            snapshots: snapshots.iter().copied().collect(),
        }
    }

    #[test]
    fn parses_only_canonical_names() {
        assert_eq!(parse_name("12.delta"), Some((FileKind::Delta, 12)));
        assert_eq!(parse_name("0.snapshot"), Some((FileKind::Snapshot, 0)));
        for bad in [
            "012.delta",
            "+1.delta",
            ".delta",
            "1.delta.tmp",
            "1.crc",
            "a.delta",
            "99999999999999999999999.delta",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
        assert!(is_temp_name(".3.delta.0f3c.tmp"));
        assert!(!is_temp_name(".3.foo.0f3c.tmp"));
        assert!(!is_temp_name("3.delta"));
    }

    #[test]
    fn load_plan_uses_newest_snapshot_at_or_below() {
        let i = index(&[1, 2, 3, 4, 5, 6], &[3, 6]);
        assert_eq!(
            i.plan_load(5),
            Ok(LoadPlan {
                snapshot: Some(3),
                deltas: vec![4, 5]
            })
        );
        assert_eq!(
            i.plan_load(6),
            Ok(LoadPlan {
                snapshot: Some(6),
                deltas: vec![]
            })
        );
        assert_eq!(
            i.plan_load(2),
            Ok(LoadPlan {
                snapshot: None,
                deltas: vec![1, 2]
            })
        );
        assert_eq!(i.plan_load(8), Err(7));
        assert_eq!(index(&[2, 3], &[]).plan_load(3), Err(1));
    }

    #[test]
    fn loadable_versions_follow_the_engine_load_plan() {
        let v = index;
        assert_eq!(v(&[1, 2, 3], &[]).loadable(), vec![1, 2, 3]);
        // Purged up to the snapshot at 10: 10..=12 load from it.
        assert_eq!(v(&[11, 12], &[10]).loadable(), vec![10, 11, 12]);
        // A hole in the deltas: versions after it need a snapshot.
        assert_eq!(v(&[1, 2, 4, 5, 7], &[5]).loadable(), vec![1, 2, 5]);
        assert_eq!(v(&[], &[]).loadable(), Vec::<u64>::new());
        // Cross-check with the engine's own plan.
        let files = v(&[1, 2, 4, 5, 6, 8, 9], &[5, 8]);
        let expect: Vec<u64> = (1..=9).filter(|x| files.plan_load(*x).is_ok()).collect();
        assert_eq!(files.loadable(), expect);
    }

    #[test]
    fn purge_table() {
        // (deltas, snapshots, retain) -> purgeable
        type Row = (Vec<u64>, Vec<u64>, u64, Vec<(FileKind, u64)>);
        use FileKind::{Delta as D, Snapshot as S};
        let rows: Vec<Row> = vec![
            // no snapshot: nothing can go
            ((1..=30).collect(), vec![], 5, vec![]),
            // snapshot 10, latest 30, keep 5 -> oldest 26 -> base 10
            (
                (1..=30).collect(),
                vec![10],
                5,
                (1..=10).map(|v| (D, v)).collect(),
            ),
            // base must be <= oldest retained: snapshot 28 is too new to be the base
            (
                (1..=30).collect(),
                vec![10, 28],
                5,
                (1..=10).map(|v| (D, v)).collect(),
            ),
            // two snapshots below oldest: the older one goes too
            (
                (11..=30).collect(),
                vec![10, 20],
                5,
                std::iter::once((S, 10))
                    .chain((11..=20).map(|v| (D, v)))
                    .collect(),
            ),
            // retain more than exists
            ((1..=30).collect(), vec![10], 100, vec![]),
            // oldest retained exactly at the snapshot
            (
                (1..=12).collect(),
                vec![10],
                3,
                (1..=10).map(|v| (D, v)).collect(),
            ),
            // one version past it: the snapshot is still the base
            ((1..=12).collect(), vec![10], 4, vec![]),
        ];
        for (deltas, snaps, keep, expect) in rows {
            let i = index(&deltas, &snaps);
            assert_eq!(
                i.purgeable(keep),
                expect,
                "{deltas:?} {snaps:?} keep {keep}"
            );
        }
    }

    #[test]
    fn superseded_files_of_a_rewritten_version() {
        let i = index(&[1, 2, 3, 4, 5], &[3, 5]);
        assert_eq!(
            i.superseded_by(3),
            vec![
                (FileKind::Snapshot, 3),
                (FileKind::Snapshot, 5),
                (FileKind::Delta, 4),
                (FileKind::Delta, 5)
            ]
        );
        assert!(i.superseded_by(6).is_empty());
    }
}
