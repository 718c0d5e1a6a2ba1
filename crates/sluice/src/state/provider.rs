//! [`DefaultStateStoreProvider`]: the in-memory store, loading, commits and maintenance.

use crate::error::class;
use std::collections::HashMap;
use std::io::{self, BufReader, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use super::files::{
    delete_files, file_path, io_err, remove_stale_temp_files, write_pending, FileIndex, LoadPlan,
};
use super::format::{FileKind, MergedPairs, StateFileReader};
use super::{
    KeyGroups, PairTimes, StateStore, StateStoreConf, StateStoreId, StateStoreKind,
    StateStoreMetrics, StateStoreProvider, TimedPair,
};
use crate::error::{Result, SluiceError};

/// Estimated bytes per entry beyond its key and value: hash-table slots, two boxed-slice
/// headers, allocator rounding.
pub(super) const ENTRY_OVERHEAD: u64 = 64;

/// Hash maps: a batch touches tens of thousands of keys, and ordered maps spent most of their
/// time comparing keys. Order is made where it is needed: sorted deltas on commit, sorted
/// [`StateStore::iter`].
type Hasher = foldhash::fast::RandomState;
type Map = HashMap<Box<[u8]>, Box<[u8]>, Hasher>;
/// Staged changes: `Some(value)` = put, `None` = removal of a committed key.
pub(super) type Staged = HashMap<Box<[u8]>, Option<Box<[u8]>>, Hasher>;
/// Key groups: each group prefix with its keys (sorted in memory, listed as staged).
type Groups<K> = HashMap<Box<[u8]>, K, Hasher>;
/// A staged put with its time: (time, key, value).
type TimedRef<'a> = (i64, &'a [u8], &'a [u8]);
type Reader = StateFileReader<BufReader<crate::storage::ReadFile>>;

fn entry_size(key_len: usize, value_len: usize) -> u64 {
    key_len as u64 + value_len as u64 + ENTRY_OVERHEAD
}

/// Locks, recovering from poisoning (the guarded data is re-listed from disk when in doubt).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the provider knows of its directory. Guarded by `Inner::files`, which commits, loads,
/// snapshot publication and purges take (never while a snapshot is being written).
struct DirState {
    index: FileIndex,
    /// Bumped whenever a commit rewrites an existing version (a replay); a snapshot built
    /// across a bump is discarded.
    epoch: u64,
}

/// Background maintenance bookkeeping.
struct Sched {
    last_run: Instant,
    worker: Option<JoinHandle<()>>,
}

/// What the provider, its store and its maintenance thread share.
pub(super) struct Inner {
    pub(super) id: StateStoreId,
    dir: PathBuf,
    conf: StateStoreConf,
    files: Mutex<DirState>,
    /// Serializes maintenance runs (explicit and background).
    run_lock: Mutex<()>,
    sched: Mutex<Sched>,
    /// Set on drop: a running merge stops.
    stop: AtomicBool,
    /// Opened by [`DefaultStateStoreProvider::open_read_only`]: commits and maintenance are
    /// refused, nothing under the directory is created, changed or deleted.
    read_only: bool,
}

impl Inner {
    /// The (operator id, partition id) written into each state file's header.
    fn store_ident(&self) -> (u32, u32) {
        (self.id.operator_id, self.id.partition_id)
    }

    fn read_only_error(&self, what: &str) -> SluiceError {
        SluiceError::new(
            crate::error::Fault::Internal,
            class::STATE_STORE_READ_ONLY,
            format!(
                "{what} was asked of the state store of {} in {}, which was opened read-only \
                 (for inspection); open it with DefaultStateStoreProvider::new to write",
                self.describe(),
                self.dir.display()
            ),
        )
    }

    fn describe(&self) -> String {
        format!(
            "operator {}, partition {}",
            self.id.operator_id, self.id.partition_id
        )
    }

    fn version_missing(&self, version: u64, missing: u64, index: &FileIndex) -> SluiceError {
        let base = index.snapshot_at_or_below(version);
        let from = if base == 0 {
            "1.delta".to_string()
        } else {
            format!("{base}.snapshot")
        };
        SluiceError::checkpoint(
            class::STATE_STORE_VERSION_MISSING,
            format!(
                "cannot load state version {version} of {}: {missing}.delta is missing from {} \
                 (version {version} is rebuilt from {from} and the deltas after it; the newest \
                 version there is {}). Restore the missing file or start the query with a new \
                 checkpoint location",
                self.describe(),
                self.dir.display(),
                index.latest(),
            ),
        )
    }

    /// Opens the files of `plan` (to rebuild `version`), oldest first.
    fn open_readers(
        &self,
        version: u64,
        plan: &LoadPlan,
        index: &FileIndex,
    ) -> Result<Vec<Reader>> {
        let files = plan
            .snapshot
            .map(|s| (FileKind::Snapshot, s))
            .into_iter()
            .chain(plan.deltas.iter().map(|d| (FileKind::Delta, *d)));
        let mut readers = Vec::new();
        for (kind, v) in files {
            let path = file_path(&self.dir, kind, v);
            let file = match crate::storage::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::NotFound && kind == FileKind::Delta => {
                    return Err(self.version_missing(version, v, index))
                }
                Err(e) => return Err(io_err(format!("opening state file {}", path.display()), e)),
            };
            let input = BufReader::with_capacity(64 * 1024, file);
            readers.push(StateFileReader::open(
                input,
                &path,
                kind,
                v,
                Some((self.id.operator_id, self.id.partition_id)),
            )?);
        }
        Ok(readers)
    }

    /// Rebuilds `version` (>= 1) from disk, handing each live pair to `each` in key order.
    /// Holds the directory lock, so maintenance cannot delete a file being read.
    pub(super) fn load_pairs(
        &self,
        version: u64,
        mut each: impl FnMut(Vec<u8>, Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        let mut files = lock(&self.files);
        files.index = FileIndex::list(&self.dir)?;
        let plan = files
            .index
            .plan_load(version)
            .map_err(|missing| self.version_missing(version, missing, &files.index))?;
        let readers = self.open_readers(version, &plan, &files.index)?;
        let mut merged = MergedPairs::new(readers, None);
        while let Some((k, v)) = merged.next_pair()? {
            each(k, v)?;
        }
        Ok(())
    }

    /// Puts a written delta in place. A rewrite of an existing version (a replay) first
    /// deletes the abandoned future (snapshots at or after it, deltas after it) and bumps the
    /// epoch.
    fn publish_delta(&self, version: u64, pending: super::files::PendingFile) -> Result<()> {
        let mut files = lock(&self.files);
        let superseded = files.index.superseded_by(version);
        if files.index.deltas.contains(&version) || !superseded.is_empty() {
            files.epoch += 1;
        }
        if !superseded.is_empty() {
            log::info!(
                "state {}: version {version} is rewritten; deleting {} file(s) of the abandoned \
                 history in {}",
                self.describe(),
                superseded.len(),
                self.dir.display()
            );
            if let Err(e) = delete_files(&self.dir, &superseded) {
                pending.discard();
                files.index = FileIndex::list(&self.dir).unwrap_or_default();
                return Err(e);
            }
            for (kind, v) in superseded {
                files.index.remove(kind, v);
            }
        }
        pending.publish()?;
        files.index.insert(FileKind::Delta, version);
        Ok(())
    }

    /// The version a snapshot is due for, if any.
    fn snapshot_due(&self, index: &FileIndex) -> Option<u64> {
        let latest = index.latest();
        let newest_snapshot = index.snapshots.last().copied().unwrap_or(0);
        (latest > newest_snapshot && latest - newest_snapshot >= self.conf.min_deltas_for_snapshot)
            .then_some(latest)
    }

    /// One maintenance run: a snapshot if due, then the purge.
    fn run_maintenance(&self) -> Result<()> {
        let _run = lock(&self.run_lock);
        let due = {
            let mut files = lock(&self.files);
            files.index = FileIndex::list(&self.dir)?;
            match self.snapshot_due(&files.index) {
                None => None,
                Some(target) => {
                    let plan = files
                        .index
                        .plan_load(target)
                        .map_err(|missing| self.version_missing(target, missing, &files.index))?;
                    Some((target, plan, files.epoch, files.index.clone()))
                }
            }
        };
        if let Some((target, plan, epoch, index)) = due {
            self.write_snapshot(target, &plan, epoch, &index)?;
        }
        self.purge()
    }

    /// Writes `<target>.snapshot` by merging the files of `plan`, without holding the directory
    /// lock; publishes it only if no commit rewrote history meanwhile.
    fn write_snapshot(
        &self,
        target: u64,
        plan: &LoadPlan,
        epoch: u64,
        index: &FileIndex,
    ) -> Result<()> {
        let readers = match self.open_readers(target, plan, index) {
            Ok(r) => r,
            Err(e) => return self.unless_superseded(epoch, e),
        };
        let mut merged = MergedPairs::new(readers, Some(&self.stop));
        let mut merge_err: Option<SluiceError> = None;
        let path = file_path(&self.dir, FileKind::Snapshot, target);
        let written = write_pending(&path, FileKind::Snapshot, target, self.store_ident(), |w| {
            loop {
                match merged.next_pair() {
                    Ok(Some((k, v))) => w.put(&k, &v)?,
                    Ok(None) => return Ok(()),
                    Err(e) => {
                        merge_err = Some(e);
                        return Err(io::Error::other("reading the files to merge failed"));
                    }
                }
            }
        });
        let pending = match (written, merge_err) {
            (Ok(p), None) => p,
            (Ok(p), Some(e)) => {
                p.discard();
                return self.unless_superseded(epoch, e);
            }
            (Err(_), Some(e)) | (Err(e), None) => return self.unless_superseded(epoch, e),
        };
        let mut files = lock(&self.files);
        if files.epoch != epoch {
            pending.discard();
            log::debug!(
                "state {}: snapshot {target} discarded, history was rewritten meanwhile",
                self.describe()
            );
            return Ok(());
        }
        pending.publish()?;
        files.index.insert(FileKind::Snapshot, target);
        log::debug!("state {}: wrote snapshot {target}", self.describe());
        Ok(())
    }

    /// An error while building a snapshot is moot if history was rewritten meanwhile (files
    /// may have been replaced or deleted) or the provider is shutting down.
    fn unless_superseded(&self, epoch: u64, e: SluiceError) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) || lock(&self.files).epoch != epoch {
            return Ok(());
        }
        Err(e)
    }

    fn purge(&self) -> Result<()> {
        let mut files = lock(&self.files);
        files.index = FileIndex::list(&self.dir)?;
        let doomed = files.index.purgeable(self.conf.min_versions_to_retain);
        if doomed.is_empty() {
            return Ok(());
        }
        log::debug!(
            "state {}: purging {} file(s) from {}",
            self.describe(),
            doomed.len(),
            self.dir.display()
        );
        let result = delete_files(&self.dir, &doomed);
        for (kind, v) in doomed {
            files.index.remove(kind, v);
        }
        result
    }

    /// Starts one background run when a snapshot is due and none is running; after a commit
    /// (`respect_interval`) also only when `maintenance_interval` has passed since the last run.
    fn maybe_start_background(self: &Arc<Self>, respect_interval: bool) {
        if self.read_only {
            return;
        }
        let due = self.snapshot_due(&lock(&self.files).index).is_some();
        if !due || self.stop.load(Ordering::Relaxed) {
            return;
        }
        let mut sched = lock(&self.sched);
        if sched.worker.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        if let Some(done) = sched.worker.take() {
            if done.join().is_err() {
                log::error!("state {}: background maintenance panicked", self.describe());
            }
        }
        if respect_interval && sched.last_run.elapsed() < self.conf.maintenance_interval {
            return;
        }
        sched.last_run = Instant::now();
        let inner = Arc::clone(self);
        let name = format!(
            "sluice-state-{}-{}",
            self.id.operator_id, self.id.partition_id
        );
        match std::thread::Builder::new().name(name).spawn(move || {
            if let Err(e) = inner.run_maintenance() {
                log::warn!(
                    "state {}: background maintenance failed (will retry): {e}",
                    inner.describe()
                );
            }
        }) {
            Ok(handle) => sched.worker = Some(handle),
            Err(e) => log::warn!(
                "state {}: could not start background maintenance: {e}",
                self.describe()
            ),
        }
    }

    /// Waits for a running background run, if any.
    fn join_background(&self) {
        let handle = lock(&self.sched).worker.take();
        if let Some(h) = handle {
            if h.join().is_err() {
                log::error!("state {}: background maintenance panicked", self.describe());
            }
        }
    }
}

/// Where a store keeps its committed version: in memory ([`InMemory`], Spark's
/// `HDFSBackedStateStoreProvider`) or in a local on-disk cache (`super::disk`, Spark's
/// `RocksDBStateStoreProvider`). Either way the checkpoint's files are the truth: a commit
/// writes its delta before it reaches the committed version, and a version other than the one
/// held is rebuilt from the files.
pub(super) trait Committed: Send {
    /// The value of `key`.
    fn get(&self, key: &[u8]) -> Option<&[u8]>;
    /// Whether `key` has a value.
    fn contains_key(&self, key: &[u8]) -> bool;
    /// The number of keys.
    fn len(&self) -> u64;
    /// Bytes held in memory (estimate).
    fn memory_bytes(&self) -> u64;
    /// Makes `staged` (`Some` = put, `None` = removal) part of the committed version, which
    /// gains `key_delta` keys, and `index` part of its time index. Leaves `staged` empty.
    fn apply(
        &mut self,
        staged: &mut Staged,
        key_delta: i64,
        index: IndexChanges,
        ix: &Indexing,
    ) -> Result<()>;
    /// Every pair, in any order.
    fn pairs(&self) -> Vec<(&[u8], &[u8])>;
    /// The time index's entries in (time, key) order, until `each` returns false. An entry may
    /// be stale (its key gone, or at another time now): the caller checks.
    fn index_scan(&self, each: &mut dyn FnMut(i64, &[u8]) -> Result<bool>) -> Result<()>;
    /// The pairs of the key group `group`, in key order.
    fn group_scan(
        &self,
        group: &[u8],
        groups: &KeyGroups,
        each: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<()>;
    /// Becomes the empty version 0.
    fn clear(&mut self) -> Result<()>;
    /// Becomes `version` (>= 1) of the files `inner` manages, its pairs indexed as `ix` says.
    fn reload(&mut self, inner: &Inner, version: u64, ix: &Indexing) -> Result<()>;
    /// A version opens: what the last one read may be let go.
    fn open_version(&mut self) {}
    /// A commit of a held store put `puts` pairs of `bytes` key and value bytes (its changes
    /// are not in a staged map: [`KnownChanges`]).
    fn note_puts(&mut self, _puts: u64, _bytes: u64) {}
    /// An error the store met where its contract has no room for one (a failed read of an
    /// on-disk cache): the commit fails with it, so the batch runs again.
    fn take_error(&mut self) -> Option<SluiceError> {
        None
    }
    /// Numbers of the open version (or of the last commit), under Spark's names; the delta
    /// file of the last commit took `delta_write_ms` to write and sync.
    fn custom_metrics(
        &self,
        _delta_write_ms: u64,
    ) -> std::collections::BTreeMap<&'static str, u64> {
        Default::default()
    }
}

/// What a store keeps besides its pairs: a time index, key groups.
#[derive(Debug, Clone, Default)]
pub(super) struct Indexing {
    pub times: Option<PairTimes>,
    pub groups: Option<KeyGroups>,
}

/// Changes to a committed version's time index: the removals first, then the inserts.
#[derive(Debug, Default)]
pub(super) struct IndexChanges {
    /// Entries no longer true (their key gone, or at another time).
    pub remove: Vec<(i64, Box<[u8]>)>,
    /// New entries.
    pub insert: Vec<(i64, Box<[u8]>)>,
}

/// The times of `pairs` by `times`, checked to be one per pair.
pub(super) fn times_of(
    times: &PairTimes,
    partition: u32,
    keys: &[&[u8]],
    values: &[&[u8]],
) -> Result<Vec<Option<i64>>> {
    let out = (times.times)(partition as usize, keys, values)?;
    if out.len() != keys.len() {
        return Err(SluiceError::internal(format!(
            "a state time index gave {} times for {} pairs",
            out.len(),
            keys.len()
        )));
    }
    Ok(out)
}

/// Pairs per call of a [`PairTimes`] while a version is indexed.
pub(super) const INDEX_CHUNK: usize = 4096;

/// The committed version in memory: one hash map, and its time index as a B-tree of times,
/// each with the set of its keys.
#[derive(Default)]
pub(super) struct InMemory {
    map: Map,
    bytes: u64,
    index: std::collections::BTreeMap<i64, std::collections::HashSet<Box<[u8]>, Hasher>>,
    index_bytes: u64,
    /// Each key group's keys, in order (with key groups).
    groups: Groups<std::collections::BTreeSet<Box<[u8]>>>,
}

impl InMemory {
    fn index_insert(&mut self, time: i64, key: Box<[u8]>) {
        let len = key.len() as u64;
        if self.index.entry(time).or_default().insert(key) {
            self.index_bytes += len + INDEX_ENTRY_OVERHEAD;
        }
    }

    fn group_insert(&mut self, groups: &KeyGroups, key: &[u8]) -> Result<()> {
        if let Some(g) = groups.group_of(key)? {
            self.index_bytes += key.len() as u64 + INDEX_ENTRY_OVERHEAD;
            self.groups.entry(g.into()).or_default().insert(key.into());
        }
        Ok(())
    }

    fn group_remove(&mut self, groups: &KeyGroups, key: &[u8]) -> Result<()> {
        if let Some(g) = groups.group_of(key)? {
            if let Some(set) = self.groups.get_mut(&*g) {
                if set.remove(key) {
                    self.index_bytes = self
                        .index_bytes
                        .saturating_sub(key.len() as u64 + INDEX_ENTRY_OVERHEAD);
                }
                if set.is_empty() {
                    self.groups.remove(&*g);
                }
            }
        }
        Ok(())
    }

    fn index_remove(&mut self, time: i64, key: &[u8]) {
        if let std::collections::btree_map::Entry::Occupied(mut o) = self.index.entry(time) {
            if o.get_mut().remove(key) {
                self.index_bytes = self
                    .index_bytes
                    .saturating_sub(key.len() as u64 + INDEX_ENTRY_OVERHEAD);
            }
            if o.get().is_empty() {
                o.remove();
            }
        }
    }
}

/// Estimated bytes per time-index entry beyond its key.
const INDEX_ENTRY_OVERHEAD: u64 = 32;

impl Committed for InMemory {
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.map.get(key).map(|v| &**v)
    }

    fn contains_key(&self, key: &[u8]) -> bool {
        self.map.contains_key(key)
    }

    fn len(&self) -> u64 {
        self.map.len() as u64
    }

    fn memory_bytes(&self) -> u64 {
        self.bytes + self.index_bytes
    }

    fn apply(
        &mut self,
        staged: &mut Staged,
        _key_delta: i64,
        index: IndexChanges,
        ix: &Indexing,
    ) -> Result<()> {
        // Drained, not replaced: the staged map keeps its capacity for the next version.
        for (k, slot) in staged.drain() {
            match slot {
                Some(v) => {
                    let (klen, vlen) = (k.len(), v.len());
                    let group = ix.groups.as_ref().map(|g| (g, k.clone()));
                    match self.map.insert(k, v) {
                        Some(old) => {
                            self.bytes = self.bytes.saturating_sub(old.len() as u64) + vlen as u64;
                        }
                        None => {
                            self.bytes += entry_size(klen, vlen);
                            if let Some((groups, k)) = group {
                                self.group_insert(groups, &k)?;
                            }
                        }
                    }
                }
                None => {
                    if let Some(old) = self.map.remove(&k) {
                        self.bytes = self.bytes.saturating_sub(entry_size(k.len(), old.len()));
                        if let Some(groups) = &ix.groups {
                            self.group_remove(groups, &k)?;
                        }
                    }
                }
            }
        }
        for (t, k) in index.remove {
            self.index_remove(t, &k);
        }
        for (t, k) in index.insert {
            self.index_insert(t, k);
        }
        Ok(())
    }

    fn pairs(&self) -> Vec<(&[u8], &[u8])> {
        self.map.iter().map(|(k, v)| (&**k, &**v)).collect()
    }

    fn index_scan(&self, each: &mut dyn FnMut(i64, &[u8]) -> Result<bool>) -> Result<()> {
        for (t, keys) in &self.index {
            let mut keys: Vec<&[u8]> = keys.iter().map(|k| &**k).collect();
            keys.sort_unstable();
            for k in keys {
                if !each(*t, k)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn group_scan(
        &self,
        group: &[u8],
        _groups: &KeyGroups,
        each: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<()> {
        if let Some(keys) = self.groups.get(group) {
            for k in keys {
                if let Some(v) = self.map.get(k) {
                    each(k, v);
                }
            }
        }
        Ok(())
    }

    fn clear(&mut self) -> Result<()> {
        *self = Self::default();
        Ok(())
    }

    fn reload(&mut self, inner: &Inner, version: u64, ix: &Indexing) -> Result<()> {
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        inner.load_pairs(version, |k, v| {
            bytes += entry_size(k.len(), v.len());
            entries.push((k.into_boxed_slice(), v.into_boxed_slice()));
            Ok(())
        })?;
        *self = Self::default();
        if let Some(groups) = &ix.groups {
            for (k, _) in &entries {
                self.group_insert(groups, k)?;
            }
        }
        if let Some(times) = &ix.times {
            for chunk in entries.chunks(INDEX_CHUNK) {
                let (keys, values): (Vec<&[u8]>, Vec<&[u8]>) =
                    chunk.iter().map(|(k, v)| (&**k, &**v)).unzip();
                for (k, t) in
                    keys.iter()
                        .zip(times_of(times, inner.id.partition_id, &keys, &values)?)
                {
                    if let Some(t) = t {
                        self.index_insert(t, (*k).into());
                    }
                }
            }
        }
        // Sorted input: the map is bulk-built in linear time.
        self.map = entries.into_iter().collect();
        self.bytes = bytes;
        Ok(())
    }
}

/// The committed version of a store whose pairs its operator holds itself
/// ([`DefaultStateStoreProvider::held_by_operator`]): no pairs in memory, only how many keys
/// there are and roughly how many bytes they take. The checkpoint's files stay the truth: the
/// operator stages its changes with [`StateStore::stage_known`] (commits write them as deltas,
/// maintenance merges snapshots from the files) and rebuilds what it holds with
/// [`StateStore::load_committed`]. A held store answers no reads: its operator holds the pairs.
#[derive(Default)]
pub(super) struct HeldByOperator {
    len: u64,
    /// Key and value bytes of the pairs put so far and how many: the mean entry size, for the
    /// memory estimate.
    put_bytes: u64,
    puts: u64,
}

impl Committed for HeldByOperator {
    fn get(&self, _key: &[u8]) -> Option<&[u8]> {
        None
    }

    fn contains_key(&self, _key: &[u8]) -> bool {
        false
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn memory_bytes(&self) -> u64 {
        match self.puts {
            0 => 0,
            n => self.len * (self.put_bytes / n + ENTRY_OVERHEAD),
        }
    }

    fn apply(
        &mut self,
        staged: &mut Staged,
        key_delta: i64,
        _index: IndexChanges,
        _ix: &Indexing,
    ) -> Result<()> {
        staged.clear();
        self.len = (self.len as i64 + key_delta).max(0) as u64;
        Ok(())
    }

    fn note_puts(&mut self, puts: u64, bytes: u64) {
        self.puts += puts;
        self.put_bytes += bytes;
    }

    fn pairs(&self) -> Vec<(&[u8], &[u8])> {
        Vec::new()
    }

    fn index_scan(&self, _each: &mut dyn FnMut(i64, &[u8]) -> Result<bool>) -> Result<()> {
        Ok(())
    }

    fn group_scan(
        &self,
        _group: &[u8],
        _groups: &KeyGroups,
        _each: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<()> {
        Ok(())
    }

    fn clear(&mut self) -> Result<()> {
        *self = Self::default();
        Ok(())
    }

    /// Reads the version through (every file checked, as any load) to count its keys; the
    /// operator reads it again to hold it ([`StateStore::load_committed`]).
    fn reload(&mut self, inner: &Inner, version: u64, _ix: &Indexing) -> Result<()> {
        let (mut len, mut bytes) = (0u64, 0u64);
        inner.load_pairs(version, |k, v| {
            len += 1;
            bytes += (k.len() + v.len()) as u64;
            Ok(())
        })?;
        *self = Self {
            len,
            put_bytes: bytes,
            puts: len,
        };
        Ok(())
    }
}

/// Spark's `HDFSBackedStateStoreProvider`, with Sluice's file format: the state of one
/// [`StateStoreId`] in memory, deltas on every commit, snapshots and purges by maintenance.
/// See the [module doc](crate::state) for the layout, format and cost model.
///
/// One provider per store id and process; the checkpoint lock keeps other processes out.
///
/// With [`StateStoreKind::OnDisk`] (Spark's `RocksDBStateStoreProvider`) the committed version
/// is held in a local on-disk cache instead of memory (`super::disk`); the checkpoint files are
/// the same.
pub struct DefaultStateStoreProvider {
    inner: Arc<Inner>,
    store: MemStore,
}

impl std::fmt::Debug for DefaultStateStoreProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStoreProvider")
            .field("id", &self.inner.id)
            .field("version", &self.store.version)
            .finish_non_exhaustive()
    }
}

impl DefaultStateStoreProvider {
    /// A provider for `id`, holding the empty version 0 in memory. Lists the store directory
    /// (it need not exist yet) and removes temporary files a crash left there.
    /// The committed version is held as `conf.kind` says.
    pub fn new(id: StateStoreId, conf: StateStoreConf) -> Result<Self> {
        let dir = id.dir();
        remove_stale_temp_files(&dir)?;
        let kind = conf.kind;
        Self::with_mode(id, dir, conf, false, kind)
    }

    /// A provider that only reads (`sluice state read`, inspection of a checkpoint a query may
    /// be using): it lists the directory but leaves temporary files alone, and its store's
    /// [`commit`](StateStore::commit) and [`StateStoreProvider::do_maintenance`] fail with
    /// `STATE_STORE_READ_ONLY`; no background maintenance ever starts. Nothing under the
    /// checkpoint is created, changed or deleted. Staged puts and removes stay in memory.
    pub fn open_read_only(id: StateStoreId, conf: StateStoreConf) -> Result<Self> {
        let dir = id.dir();
        Self::with_mode(id, dir, conf, true, StateStoreKind::InMemory)
    }

    fn with_mode(
        id: StateStoreId,
        dir: PathBuf,
        conf: StateStoreConf,
        read_only: bool,
        kind: StateStoreKind,
    ) -> Result<Self> {
        let index = FileIndex::list(&dir)?;
        let inner = Arc::new(Inner {
            id,
            dir,
            conf,
            files: Mutex::new(DirState { index, epoch: 0 }),
            run_lock: Mutex::new(()),
            sched: Mutex::new(Sched {
                last_run: Instant::now(),
                worker: None,
            }),
            stop: AtomicBool::new(false),
            read_only,
        });
        let committed: Box<dyn Committed> = match kind {
            StateStoreKind::InMemory => Box::<InMemory>::default(),
            StateStoreKind::OnDisk => {
                Box::new(super::disk::LocalCache::create(inner.conf.local_cache)?)
            }
        };
        let store = MemStore::new(Arc::clone(&inner), committed);
        Ok(Self { inner, store })
    }

    /// True for a provider made by [`open_read_only`](Self::open_read_only).
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// Which store this provider serves: operator and partition of a query's checkpoint.
    pub fn id(&self) -> &StateStoreId {
        &self.inner.id
    }

    /// The store settings (snapshot interval, versions to retain, maintenance interval).
    pub fn conf(&self) -> &StateStoreConf {
        &self.inner.conf
    }

    /// `<checkpoint>/state/<operator>/<partition>`.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The newest version with a file in the store directory as this provider last saw it
    /// (0 when there is none).
    pub fn latest_version_on_disk(&self) -> u64 {
        lock(&self.inner.files).index.latest()
    }

    /// The non-blocking variant of [`StateStoreProvider::do_maintenance`]: if a snapshot is due
    /// and no run is in progress, starts one maintenance run (snapshot, then purge) on a
    /// background thread and returns at once, whatever `maintenance_interval` says. Cheap to
    /// call after every batch (O(1) when nothing is due). Errors of that run are logged.
    pub fn maintain_in_background(&mut self) {
        self.inner.maybe_start_background(false);
    }

    /// Keeps the store's pairs ordered by `times` too, for [`StateStore::scan_by_time`] and
    /// [`StateStore::first_time`]. The index is kept where the committed version is (in memory,
    /// or in the on-disk cache) and rebuilt with it from the checkpoint's files; it is never
    /// written to them. Set before the store is used: a version already held is reloaded.
    pub fn with_time_index(mut self, times: PairTimes) -> Self {
        self.store.times = Some(times);
        if self.store.version != 0 {
            self.store.broken = true;
        }
        self
    }

    /// Keeps the store's keys in the groups `groups` says, for [`StateStore::scan_group`]. As
    /// [`Self::with_time_index`]: set before the store is used.
    pub fn with_key_groups(mut self, groups: KeyGroups) -> Self {
        self.store.groups = Some(groups);
        if self.store.version != 0 {
            self.store.broken = true;
        }
        self
    }

    /// The store's operator holds the committed version itself (in its own structures, e.g.
    /// an aggregation's accumulators): the store keeps none of its pairs in memory, writes the
    /// changes staged with [`StateStore::stage_known`] as deltas and counts keys; the operator
    /// rebuilds what it holds with [`StateStore::load_committed`] whenever the store's version
    /// is not the one it holds. No time index or key groups. Set before the store is used.
    pub fn held_by_operator(mut self) -> Self {
        self.store.committed = Box::<HeldByOperator>::default();
        self.store.held = true;
        self.store.times = None;
        self.store.groups = None;
        if self.store.version != 0 {
            self.store.broken = true;
        }
        self
    }

    /// Waits until a background maintenance run (if one is running) has finished.
    pub fn wait_for_background_maintenance(&self) {
        self.inner.join_background();
    }
}

impl StateStoreProvider for DefaultStateStoreProvider {
    fn get_store(&mut self, version: u64) -> Result<&mut dyn StateStore> {
        if version != self.store.version || self.store.broken {
            // Marked as at no version while it changes: a failed reload is not reused.
            self.store.broken = true;
            if version == 0 {
                self.store.committed.clear()?;
            } else {
                self.store
                    .committed
                    .reload(&self.inner, version, &self.store.indexing())?;
            }
            self.store.version = version;
            self.store.broken = false;
        }
        self.store.open_version();
        Ok(&mut self.store)
    }

    fn do_maintenance(&mut self) -> Result<()> {
        if self.inner.read_only {
            return Err(self.inner.read_only_error("maintenance"));
        }
        lock(&self.inner.sched).last_run = Instant::now();
        self.inner.run_maintenance()
    }
}

impl Drop for DefaultStateStoreProvider {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        self.inner.join_background();
    }
}

/// The changes an operator holding its state stages ([`StateStore::stage_known`] on a store
/// [`DefaultStateStoreProvider::held_by_operator`]): each key at most once per version (a key
/// staged twice is two records, which the delta writer refuses as keys out of order), appended
/// to one buffer with no per-pair allocation or hashing, sorted once at commit.
#[derive(Default)]
struct KnownChanges {
    bytes: Vec<u8>,
    /// (key range in `bytes`, value range: `None` for a removal).
    entries: Vec<(std::ops::Range<usize>, Option<std::ops::Range<usize>>)>,
    put_bytes: u64,
    puts: u64,
}

impl KnownChanges {
    fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let k = self.bytes.len()..self.bytes.len() + key.len();
        self.bytes.extend_from_slice(key);
        let v = value.map(|v| {
            let at = self.bytes.len();
            self.bytes.extend_from_slice(v);
            self.put_bytes += (key.len() + v.len()) as u64;
            self.puts += 1;
            at..at + v.len()
        });
        self.entries.push((k, v));
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
        self.put_bytes = 0;
        self.puts = 0;
    }

    /// Writes the changes in key order.
    fn write(&mut self, w: &mut super::format::StateFileWriter<impl io::Write>) -> io::Result<()> {
        let bytes = &self.bytes;
        self.entries
            .sort_unstable_by(|a, b| bytes[a.0.clone()].cmp(&bytes[b.0.clone()]));
        for (k, v) in &self.entries {
            match v {
                Some(v) => w.put(&bytes[k.clone()], &bytes[v.clone()])?,
                None => w.remove(&bytes[k.clone()])?,
            }
        }
        Ok(())
    }
}

/// The store: the committed version `version` plus the staged changes.
struct MemStore {
    inner: Arc<Inner>,
    version: u64,
    committed: Box<dyn Committed>,
    /// The committed version failed to apply or load: it is rebuilt before it is used again.
    broken: bool,
    staged: Staged,
    staged_bytes: u64,
    /// Live keys gained (or lost, negative) by the staged changes.
    staged_key_delta: i64,
    /// The time index's times, when the store has one.
    times: Option<PairTimes>,
    /// The key groups, when the store has them.
    groups: Option<KeyGroups>,
    /// The keys staged in this version, by key group (with key groups; a key may be listed
    /// twice, and its staged slot decides).
    staged_groups: Groups<Vec<Box<[u8]>>>,
    /// A staged key whose group could not be read: the commit fails with it.
    group_error: Option<SluiceError>,
    /// Index entries the open version's scans met that the commit must remove: stale ones, and
    /// those of staged keys (see [`MemStore::index_changes`]).
    visited: Mutex<Vec<(i64, Box<[u8]>)>>,
    num_updated: u64,
    num_removed: u64,
    commit_time_ms: u64,
    /// Time the last commit took to write and sync its delta file.
    delta_write_ms: u64,
    /// The operator holds the committed version: its changes are [`KnownChanges`].
    held: bool,
    known: KnownChanges,
}

impl MemStore {
    fn new(inner: Arc<Inner>, committed: Box<dyn Committed>) -> Self {
        Self {
            inner,
            version: 0,
            committed,
            broken: false,
            staged: Staged::default(),
            staged_bytes: 0,
            staged_key_delta: 0,
            times: None,
            groups: None,
            staged_groups: HashMap::default(),
            group_error: None,
            visited: Mutex::new(Vec::new()),
            num_updated: 0,
            num_removed: 0,
            commit_time_ms: 0,
            delta_write_ms: 0,
            held: false,
            known: KnownChanges::default(),
        }
    }

    /// Starts a new version: nothing staged, counters at zero.
    fn open_version(&mut self) {
        self.abort();
        self.committed.open_version();
        self.commit_time_ms = 0;
        self.delta_write_ms = 0;
    }

    fn indexing(&self) -> Indexing {
        Indexing {
            times: self.times.clone(),
            groups: self.groups.clone(),
        }
    }

    /// Lists a key newly staged under its group.
    fn stage_in_group(&mut self, key: &[u8]) {
        let Some(groups) = &self.groups else {
            return;
        };
        match groups.group_of(key) {
            Ok(Some(g)) => self
                .staged_groups
                .entry(g.into())
                .or_default()
                .push(key.into()),
            Ok(None) => {}
            Err(e) => {
                self.group_error.get_or_insert(e);
            }
        }
    }

    fn time_index(&self) -> Result<&PairTimes> {
        self.times.as_ref().ok_or_else(|| {
            SluiceError::internal(format!(
                "a scan by time of state {}, which keeps no time index",
                self.inner.describe()
            ))
        })
    }

    /// This version's staged puts that have a time, with it; only those `wanted` accepts are
    /// read (the time is not computed for the others).
    fn staged_times(
        &self,
        times: &PairTimes,
        wanted: impl Fn(&[u8]) -> bool,
    ) -> Result<Vec<TimedRef<'_>>> {
        let (keys, values): (Vec<&[u8]>, Vec<&[u8]>) = self
            .staged
            .iter()
            .filter_map(|(k, slot)| slot.as_ref().map(|v| (&**k, &**v)))
            .filter(|(k, _)| wanted(k))
            .unzip();
        let mut out = Vec::new();
        for (i, chunk) in keys.chunks(INDEX_CHUNK).enumerate() {
            let at = i * INDEX_CHUNK;
            let vals = &values[at..at + chunk.len()];
            for ((k, v), t) in chunk.iter().zip(vals).zip(times_of(
                times,
                self.inner.id.partition_id,
                chunk,
                vals,
            )?) {
                if let Some(t) = t {
                    out.push((t, *k, *v));
                }
            }
        }
        Ok(out)
    }

    /// The committed index's entries in order while `due(time)`, checked against the committed
    /// version: `found(time, key, value)` gets each live one whose key has no staged change
    /// (the staged change decides for those) and returns false to stop. Entries that are
    /// stale, or whose key is staged, are remembered for the commit.
    fn scan_committed(
        &self,
        times: &PairTimes,
        due: &dyn Fn(i64) -> bool,
        found: &mut dyn FnMut(TimedRef<'_>) -> bool,
    ) -> Result<()> {
        let mut visited = lock(&self.visited);
        self.committed.index_scan(&mut |t, k| {
            if !due(t) {
                return Ok(false);
            }
            if self.staged.contains_key(k) {
                visited.push((t, k.into()));
                return Ok(true);
            }
            let live = match self.committed.get(k) {
                Some(v) if times.from_key => Some(v),
                Some(v) => (times_of(times, self.inner.id.partition_id, &[k], &[v])?[0] == Some(t))
                    .then_some(v),
                None => None,
            };
            Ok(match live {
                Some(v) => found((t, k, v)),
                None => {
                    visited.push((t, k.into()));
                    true
                }
            })
        })
    }

    /// The time index's changes of a commit: entries the version's scans found wrong go (the
    /// entry of a staged put whose time comes from its key stays: it is still true), then every
    /// staged put with a time goes in (only a new key when its time comes from its key: a live
    /// key's entry is there already).
    fn index_changes(&self) -> Result<IndexChanges> {
        let Some(times) = &self.times else {
            return Ok(IndexChanges::default());
        };
        let mut changes = IndexChanges::default();
        for (t, k) in std::mem::take(&mut *lock(&self.visited)) {
            let keeps = times.from_key && matches!(self.staged.get(&k), Some(Some(_)));
            if !keeps {
                changes.remove.push((t, k));
            }
        }
        // A live key whose time comes from its key has its entry: only new keys are read.
        let new_key = |k: &[u8]| !(times.from_key && self.committed.contains_key(k));
        for (t, k, _) in self.staged_times(times, new_key)? {
            changes.insert.push((t, k.into()));
        }
        Ok(changes)
    }

    fn slot_size(key: &[u8], slot: &Option<Box<[u8]>>) -> u64 {
        entry_size(key.len(), slot.as_ref().map_or(0, |v| v.len()))
    }

    /// Stages `slot` for `key`, keeping `staged_bytes` right.
    fn stage(&mut self, key: &[u8], slot: Option<Box<[u8]>>) {
        let size = Self::slot_size(key, &slot);
        match self.staged.get_mut(key) {
            Some(existing) => {
                self.staged_bytes = self
                    .staged_bytes
                    .saturating_sub(Self::slot_size(key, existing));
                *existing = slot;
            }
            None => {
                self.staged.insert(key.into(), slot);
                self.stage_in_group(key);
            }
        }
        self.staged_bytes += size;
    }
}

impl MemStore {
    /// Stages `value` for `key` (`None`: its removal); `in_committed` says whether the
    /// committed version has `key`, asked only when this version has not staged it yet.
    fn change(&mut self, key: &[u8], value: Option<&[u8]>, in_committed: impl Fn(&Self) -> bool) {
        let staged = self.staged.get(key).map(|slot| slot.is_some());
        let live_before = match staged {
            Some(live) => live,
            None => in_committed(self),
        };
        match value {
            Some(value) => {
                if !live_before {
                    self.staged_key_delta += 1;
                }
                self.stage(key, Some(value.into()));
                self.num_updated += 1;
            }
            None => {
                if live_before {
                    self.staged_key_delta -= 1;
                }
                // A removal is written only for a key the committed version has; one put and
                // removed within this version leaves nothing to write.
                let committed = match staged {
                    Some(_) => in_committed(self),
                    None => live_before,
                };
                if committed {
                    self.stage(key, None);
                } else if let Some(slot) = self.staged.remove(key) {
                    self.staged_bytes = self
                        .staged_bytes
                        .saturating_sub(Self::slot_size(key, &slot));
                }
                self.num_removed += 1;
            }
        }
    }
}

impl StateStore for MemStore {
    fn version(&self) -> u64 {
        self.version
    }

    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        if self.staged.is_empty() {
            return self.committed.get(key);
        }
        match self.staged.get(key) {
            Some(slot) => slot.as_deref(),
            None => self.committed.get(key),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.change(key, Some(value), |s| s.committed.contains_key(key));
    }

    fn remove(&mut self, key: &[u8]) {
        self.change(key, None, |s| s.committed.contains_key(key));
    }

    fn stage_known(&mut self, key: &[u8], value: Option<&[u8]>, committed: bool) {
        if !self.held {
            return self.change(key, value, |_| committed);
        }
        match value {
            Some(v) => {
                if !committed {
                    self.staged_key_delta += 1;
                }
                self.staged_bytes += entry_size(key.len(), v.len());
                self.num_updated += 1;
                self.known.push(key, value);
            }
            None => {
                self.num_removed += 1;
                if committed {
                    self.staged_key_delta -= 1;
                    self.known.push(key, None);
                }
            }
        }
    }

    fn load_committed(&self, each: &mut dyn FnMut(Vec<u8>, Vec<u8>) -> Result<()>) -> Result<()> {
        if self.version == 0 {
            return Ok(());
        }
        self.inner.load_pairs(self.version, each)
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        let mut pairs: Vec<(&[u8], &[u8])> = self.committed.pairs();
        if !self.staged.is_empty() {
            pairs.retain(|(k, _)| !self.staged.contains_key(*k));
        }
        pairs.extend(
            self.staged
                .iter()
                .filter_map(|(k, slot)| slot.as_ref().map(|v| (&**k, &**v))),
        );
        pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        Box::new(pairs.into_iter())
    }

    fn scan_by_time(&self, time: i64, inclusive: bool) -> Result<Vec<TimedPair>> {
        let times = self.time_index()?;
        let due = |t: i64| if inclusive { t <= time } else { t < time };
        let mut out = Vec::new();
        self.scan_committed(times, &due, &mut |(t, k, v)| {
            out.push(TimedPair {
                time: t,
                key: k.to_vec(),
                value: v.to_vec(),
            });
            true
        })?;
        for (t, k, v) in self.staged_times(times, |_| true)? {
            if due(t) {
                out.push(TimedPair {
                    time: t,
                    key: k.to_vec(),
                    value: v.to_vec(),
                });
            }
        }
        out.sort_unstable_by(|a, b| (a.time, &a.key).cmp(&(b.time, &b.key)));
        Ok(out)
    }

    fn scan_group(&self, group: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let groups = self.groups.as_ref().ok_or_else(|| {
            SluiceError::internal(format!(
                "a scan of a key group of state {}, which keeps no key groups",
                self.inner.describe()
            ))
        })?;
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        self.committed.group_scan(group, groups, &mut |k, v| {
            if !self.staged.contains_key(k) {
                out.push((k.to_vec(), v.to_vec()));
            }
        })?;
        if let Some(keys) = self.staged_groups.get(group) {
            for k in keys {
                if let Some(Some(v)) = self.staged.get(k) {
                    out.push((k.to_vec(), v.to_vec()));
                }
            }
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|a, b| a.0 == b.0);
        Ok(out)
    }

    fn first_time(&self) -> Result<Option<i64>> {
        let times = self.time_index()?;
        let mut first: Option<i64> = None;
        self.scan_committed(times, &|_| true, &mut |(t, _, _)| {
            first = Some(t);
            false
        })?;
        for (t, _, _) in self.staged_times(times, |_| true)? {
            first = Some(first.map_or(t, |f| f.min(t)));
        }
        Ok(first)
    }

    fn num_keys(&self) -> u64 {
        (self.committed.len() as i64 + self.staged_key_delta).max(0) as u64
    }

    fn commit(&mut self) -> Result<u64> {
        if self.inner.read_only {
            return Err(self.inner.read_only_error("a commit"));
        }
        let start = Instant::now();
        let new_version = self.version.checked_add(1).ok_or_else(|| {
            SluiceError::internal(format!("state version overflow at {}", self.version))
        })?;
        if let Some(e) = self.group_error.take() {
            return Err(e.context(format!("committing state version {new_version}")));
        }
        let index = self
            .index_changes()
            .map_err(|e| e.context(format!("committing state version {new_version}")))?;
        let write_start = Instant::now();
        let path = file_path(&self.inner.dir, FileKind::Delta, new_version);
        let mut staged: Vec<_> = self.staged.iter().collect();
        staged.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let known = &mut self.known;
        let pending = write_pending(
            &path,
            FileKind::Delta,
            new_version,
            self.inner.store_ident(),
            |w| {
                known.write(w)?;
                for (k, slot) in staged {
                    match slot {
                        Some(v) => w.put(k, v)?,
                        None => w.remove(k)?,
                    }
                }
                Ok(())
            },
        )
        .map_err(|e| e.context(format!("committing state version {new_version}")))?;
        self.inner
            .publish_delta(new_version, pending)
            .map_err(|e| e.context(format!("committing state version {new_version}")))?;
        self.delta_write_ms = write_start.elapsed().as_millis() as u64;

        if let Some(e) = self.committed.take_error() {
            // The delta is written (the truth); the held version is not: rebuild it.
            self.broken = true;
            return Err(e.context(format!("committing state version {new_version}")));
        }
        let indexing = self.indexing();
        if let Err(e) =
            self.committed
                .apply(&mut self.staged, self.staged_key_delta, index, &indexing)
        {
            self.broken = true;
            return Err(e.context(format!("committing state version {new_version}")));
        }
        self.committed
            .note_puts(self.known.puts, self.known.put_bytes);
        self.known.clear();
        self.staged_bytes = 0;
        self.staged_key_delta = 0;
        self.staged_groups.clear();
        self.version = new_version;
        self.commit_time_ms = start.elapsed().as_millis() as u64;
        self.inner.maybe_start_background(true);
        Ok(new_version)
    }

    fn abort(&mut self) {
        self.known.clear();
        lock(&self.visited).clear();
        self.staged_groups.clear();
        self.group_error = None;
        self.staged.clear();
        self.staged_bytes = 0;
        self.staged_key_delta = 0;
        self.num_updated = 0;
        self.num_removed = 0;
    }

    fn metrics(&self) -> StateStoreMetrics {
        StateStoreMetrics {
            num_keys: self.num_keys(),
            memory_used_bytes: self.committed.memory_bytes() + self.staged_bytes,
            num_updated: self.num_updated,
            num_removed: self.num_removed,
            commit_time_ms: self.commit_time_ms,
            custom_metrics: self.committed.custom_metrics(self.delta_write_ms),
        }
    }
}

#[cfg(test)]
mod held_tests {
    use super::*;
    use std::time::Duration;

    fn conf() -> StateStoreConf {
        StateStoreConf {
            maintenance_interval: Duration::from_secs(3600),
            ..StateStoreConf::default()
        }
    }

    fn committed(store: &dyn StateStore) -> Vec<(String, String)> {
        let mut out = Vec::new();
        store
            .load_committed(&mut |k, v| {
                out.push((String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()));
                Ok(())
            })
            .unwrap();
        out
    }

    #[test]
    fn a_held_store_writes_known_changes_as_deltas_any_provider_loads() {
        let tmp = tempfile::tempdir().unwrap();
        let id = StateStoreId::new(tmp.path(), 0, 0);
        let mut held = DefaultStateStoreProvider::new(id.clone(), conf())
            .unwrap()
            .held_by_operator();
        {
            let s = held.get_store(0).unwrap();
            // Staged out of order: written in key order.
            for k in ["c", "a", "b"] {
                s.stage_known(k.as_bytes(), Some(format!("{k}1").as_bytes()), false);
            }
            assert_eq!(s.num_keys(), 3);
            assert_eq!(s.get(b"a"), None, "a held store answers no reads");
            assert_eq!(s.commit().unwrap(), 1);
            assert_eq!(s.metrics().num_keys, 3);
            assert!(s.metrics().memory_used_bytes > 0);
        }
        {
            let s = held.get_store(1).unwrap();
            s.stage_known(b"a", None, true);
            s.stage_known(b"b", Some(b"b2"), true);
            s.stage_known(b"d", Some(b"d2"), false);
            // Added and removed within the version: nothing to write.
            s.stage_known(b"e", None, false);
            assert_eq!(s.num_keys(), 3);
            s.commit().unwrap();
        }
        // What the operator rebuilds from, and what a store-held provider loads: the files.
        let s = held.get_store(2).unwrap();
        let want = [("b", "b2"), ("c", "c1"), ("d", "d2")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .to_vec();
        assert_eq!(committed(s), want);
        let mut plain = DefaultStateStoreProvider::open_read_only(id.clone(), conf()).unwrap();
        let s = plain.get_store(2).unwrap();
        let pairs: Vec<(String, String)> = s
            .iter()
            .map(|(k, v)| {
                (
                    String::from_utf8(k.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                )
            })
            .collect();
        assert_eq!(pairs, want);
        // A restart counts the keys of the version it opens.
        let mut again = DefaultStateStoreProvider::new(id, conf())
            .unwrap()
            .held_by_operator();
        assert_eq!(again.get_store(2).unwrap().num_keys(), 3);
        assert_eq!(committed(again.get_store(1).unwrap()).len(), 3);
    }

    #[test]
    fn a_key_staged_twice_in_a_held_store_fails_the_commit_and_stays_staged() {
        let tmp = tempfile::tempdir().unwrap();
        let mut held = DefaultStateStoreProvider::new(StateStoreId::new(tmp.path(), 0, 0), conf())
            .unwrap()
            .held_by_operator();
        let s = held.get_store(0).unwrap();
        s.stage_known(b"k", Some(b"1"), false);
        s.stage_known(b"k", Some(b"2"), false);
        let err = s.commit().unwrap_err().to_string();
        assert!(err.contains("state version 1"), "{err}");
        assert_eq!(s.version(), 0, "nothing committed");
        assert_eq!(s.metrics().num_updated, 2, "the changes stay staged");
        assert!(s.commit().is_err(), "and fail again");
        assert_eq!(held.latest_version_on_disk(), 0);
    }
}
