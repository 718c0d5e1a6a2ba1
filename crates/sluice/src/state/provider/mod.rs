//! [`DefaultStateStoreProvider`]: loading, commits and maintenance of versioned state files.
//! Where a committed version is held is `committed.rs` ([`Committed`]: in memory, or by the
//! operator; the on-disk cache is `state/disk.rs`); the store one batch writes is `store.rs`.

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

mod committed;
mod store;
pub(in crate::state) use committed::*;
use store::*;

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

#[cfg(test)]
mod held_tests;
