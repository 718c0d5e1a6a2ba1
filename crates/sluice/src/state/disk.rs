//! The on-disk committed version ([`LocalCache`]): Spark's `RocksDBStateStoreProvider` on
//! fjall, a pure-Rust LSM (chosen over redb, a B-tree, for 1.5x the random updates and 2-4x
//! fewer bytes on disk: `benches/state_store_candidates.sh`, BENCHMARKS.md).
//!
//! As in Spark's RocksDB provider with changelog checkpointing, the local store is a cache
//! and the checkpoint is the truth: every commit writes its delta file first (the changelog,
//! the same file the in-memory provider writes), then applies the changes to the cache in one
//! write batch; maintenance writes snapshots from the files, not from the cache. A version the
//! cache does not hold (a restart, a replay, another machine) is rebuilt from the newest
//! snapshot and the deltas after it, ingested in key order. So the checkpoint of either
//! provider loads into the other.
//!
//! One fjall database per process, in `$TMPDIR/sluice-state-<pid>` (removed at start when its
//! process is gone), with one keyspace: each store's pairs are under a prefix of its own, a
//! new one whenever it loads another version (fjall's keyspaces are costly to create and drop,
//! more so the more there were). A store's old prefixes are deleted as it moves on and when it
//! is dropped: the tables holding nothing else are dropped whole, the rest deleted key by key
//! (`delete_version`). The journal is not synced (the cache need not survive a crash). Memory is
//! bounded by fjall's block cache and write buffers (Spark's `boundedMemoryUsage` settings,
//! `LocalCacheMemory`; the first store of the process sizes them), not by the state.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::provider::{times_of, Committed, IndexChanges, Indexing, Inner, Staged, INDEX_CHUNK};
use super::{KeyGroups, LocalCacheMemory};
use crate::error::{class, Result, SluiceError};

/// Deletions per write batch while a prefix is dropped.
const INGEST_BATCH: usize = 10_000;

fn cache_error(what: &str, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::new(
        crate::error::Fault::Connector,
        class::IO_ERROR,
        format!(
            "the on-disk state store's local cache in {} failed to {what}: {e}. The checkpoint \
             is intact; the batch runs again from it. If this repeats, free space there or point \
             TMPDIR at a local disk with room",
            database_dir().display()
        ),
    )
}

fn database_dir() -> PathBuf {
    std::env::temp_dir().join(format!("sluice-state-{}", std::process::id()))
}

/// The process's database and its one keyspace, opened on first use with `memory`.
fn database(memory: LocalCacheMemory) -> Result<(fjall::Database, fjall::Keyspace)> {
    static DB: OnceLock<Mutex<Option<(fjall::Database, fjall::Keyspace)>>> = OnceLock::new();
    let slot = DB.get_or_init(|| Mutex::new(None));
    let mut db = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(db) = db.as_ref() {
        return Ok(db.clone());
    }
    remove_dead_processes_caches();
    let dir = database_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let opened = fjall::Database::builder(&dir)
        .cache_size(memory.cache_bytes)
        // The journal only bounds what memtables hold before they are flushed (the cache need
        // not survive a crash): fjall's smallest, not its 512 MiB.
        .max_journaling_size((2 * memory.write_buffer_bytes).max(64 << 20))
        .manual_journal_persist(true)
        .open()
        .map_err(|e| cache_error("open", e))?;
    let keyspace = opened
        .keyspace("state", || {
            fjall::KeyspaceCreateOptions::default()
                .max_memtable_size(memory.write_buffer_bytes.max(1 << 20))
        })
        .map_err(|e| cache_error("open", e))?;
    *db = Some((opened.clone(), keyspace.clone()));
    Ok((opened, keyspace))
}

/// Prefixes per version: its pairs, its time index, its group index.
const PREFIXES: u64 = 3;

/// Adjacent prefixes no store of this process used before: a version's pairs, its time index
/// and its group index, one key range together (so the cache's tables that hold a version's
/// entries and nothing else can be dropped whole).
fn new_prefixes() -> Prefixes {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let first = NEXT.fetch_add(PREFIXES, Ordering::Relaxed);
    Prefixes {
        pairs: first.to_be_bytes(),
        times: (first + 1).to_be_bytes(),
        groups: (first + 2).to_be_bytes(),
    }
}

/// The prefixes of a version's entries in the process's keyspace.
#[derive(Clone, Copy)]
struct Prefixes {
    /// `pairs | key` -> value.
    pairs: [u8; 8],
    /// `times | time | key` -> nothing.
    times: [u8; 8],
    /// `groups | group | key` -> nothing, for key groups that are not a prefix of the key.
    groups: [u8; 8],
}

/// Removes `sluice-state-<pid>` directories of processes that are gone (Linux: no
/// `/proc/<pid>`).
fn remove_dead_processes_caches() {
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("sluice-state-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Live keys held by every store of the process's cache: a store's share of the cache's disk
/// space is its share of them.
static KEYS_IN_CACHE: AtomicU64 = AtomicU64::new(0);

/// What one version did to the cache, for Spark's `rocksdb*` custom metrics (reset when a
/// version opens; the commit's numbers stay until the next one).
#[derive(Default)]
struct CacheStats {
    gets: Cell<u64>,
    get_micros: Cell<u64>,
    bytes_read: Cell<u64>,
    bytes_read_by_iterator: Cell<u64>,
    puts: u64,
    bytes_written: u64,
    write_batch_ms: u64,
}

impl CacheStats {
    fn add(cell: &Cell<u64>, n: u64) {
        cell.set(cell.get() + n);
    }

    /// Counts one read of the cache that started at `start` and gave `bytes`.
    fn read(&self, start: Instant, bytes: usize) {
        Self::add(&self.gets, 1);
        Self::add(&self.get_micros, start.elapsed().as_micros() as u64);
        Self::add(&self.bytes_read, bytes as u64);
    }
}

/// A time as the index orders it: big-endian, sign bit flipped.
fn time_bytes(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

fn time_of_bytes(b: &[u8]) -> Option<i64> {
    Some((u64::from_be_bytes(b.get(..8)?.try_into().ok()?) ^ (1 << 63)) as i64)
}

/// One store's committed version, under a prefix of the process's keyspace; its time index
/// under a second prefix (`time | key`, no value), so a scan by time reads only the range it
/// asks for.
pub(super) struct LocalCache {
    db: fjall::Database,
    keyspace: fjall::Keyspace,
    /// The prefixes of the held version.
    prefixes: Prefixes,
    len: u64,
    /// The keys the open version found in the cache: an update reads a key (`get`) and then
    /// stages it (`contains_key`), one read of the cache, not two. (A key not found is asked
    /// again: its filter answers without reading a block, and the set stays small.)
    found: Mutex<HashSet<Box<[u8]>, foldhash::fast::RandomState>>,
    /// Bytes per write batch: a commit's changes go in batches of this size, so memtables
    /// rotate at the write buffer's size and wait for their flush (fjall holds writes back
    /// while four are queued) whatever the size of the commit.
    batch_bytes: u64,
    stats: CacheStats,
    /// Copies of the values read in the open version (the contract lends `&[u8]`; the cache
    /// hands out owned values). Dropped when the next version opens.
    reads: typed_arena::Arena<u8>,
    /// The first read error of the open version (see [`Committed::take_error`]).
    error: Mutex<Option<SluiceError>>,
}

impl LocalCache {
    /// An empty cache (version 0); the process's database is opened with `memory` if it is
    /// not open yet.
    pub(super) fn create(memory: LocalCacheMemory) -> Result<Self> {
        let (db, keyspace) = database(memory)?;
        Ok(Self::on(db, keyspace, memory))
    }

    /// An empty cache in `keyspace` of `db`.
    fn on(db: fjall::Database, keyspace: fjall::Keyspace, memory: LocalCacheMemory) -> Self {
        Self {
            db,
            keyspace,
            prefixes: new_prefixes(),
            len: 0,
            found: Mutex::new(HashSet::default()),
            batch_bytes: (memory.write_buffer_bytes / 4).max(1 << 20),
            stats: CacheStats::default(),
            reads: typed_arena::Arena::new(),
            error: Mutex::new(None),
        }
    }

    fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(8 + key.len());
        k.extend_from_slice(&self.prefixes.pairs);
        k.extend_from_slice(key);
        k
    }

    fn group_key(&self, group: &[u8], key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(8 + group.len() + key.len());
        k.extend_from_slice(&self.prefixes.groups);
        k.extend_from_slice(group);
        k.extend_from_slice(key);
        k
    }

    fn index_key(&self, time: i64, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(16 + key.len());
        k.extend_from_slice(&self.prefixes.times);
        k.extend_from_slice(&time_bytes(time));
        k.extend_from_slice(key);
        k
    }

    fn remember(&self, key: &[u8]) {
        self.found
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.into());
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(cache_error(what, e));
        }
    }

    /// Sets the number of live keys, keeping the process's count in step.
    fn set_len(&mut self, len: u64) {
        KEYS_IN_CACHE.fetch_add(len, Ordering::Relaxed);
        KEYS_IN_CACHE.fetch_sub(self.len, Ordering::Relaxed);
        self.len = len;
    }

    /// Moves to new, empty prefixes and deletes the pairs and index under the old ones.
    fn fresh_prefix(&mut self) -> Result<()> {
        let old = std::mem::replace(&mut self.prefixes, new_prefixes());
        self.set_len(0);
        self.found.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.delete_version(old)
    }

    /// Deletes a version's pairs and indexes (see [`new_prefixes`]): the cache's tables that
    /// hold nothing else are
    /// dropped whole, without reading them (lsm-tree's `drop_range`); what is left (entries
    /// still in memtables, tables shared with other prefixes) is deleted key by key, in write
    /// batches each read by a fresh iterator, so no iterator pins the memtables the
    /// deletions fill. (One iterator over 20 M keys while their tombstones were written took
    /// 1 GB in the soak.)
    fn delete_version(&self, prefixes: Prefixes) -> Result<()> {
        use fjall::AbstractTree;
        let prefix = prefixes.pairs;
        let end = (u64::from_be_bytes(prefix) + PREFIXES).to_be_bytes();
        self.keyspace
            .tree
            .drop_range(prefix..end)
            .map_err(|e| cache_error("drop a store's tables", e))?;
        let mut from = std::ops::Bound::Included(prefix.to_vec());
        loop {
            let mut batch = self.db.batch();
            let mut last = None;
            for guard in self
                .keyspace
                .range::<Vec<u8>, _>((from.clone(), std::ops::Bound::Excluded(end.to_vec())))
                .take(INGEST_BATCH)
            {
                let key = guard.key().map_err(|e| cache_error("read", e))?;
                batch.remove(&self.keyspace, key.clone());
                last = Some(key);
            }
            let Some(last) = last else {
                return Ok(());
            };
            batch.commit().map_err(|e| cache_error("write", e))?;
            from = std::ops::Bound::Excluded(last.to_vec());
        }
    }
}

impl Drop for LocalCache {
    fn drop(&mut self) {
        self.set_len(0);
        if let Err(e) = self.delete_version(self.prefixes) {
            log::warn!("the on-disk state store's local cache kept a store's pairs: {e}");
        }
    }
}

impl Committed for LocalCache {
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let start = Instant::now();
        let got = self.keyspace.get(self.key(key));
        self.stats.read(
            start,
            got.as_ref()
                .map_or(0, |v| v.as_ref().map_or(0, |v| v.len())),
        );
        match got {
            Ok(Some(v)) => {
                self.remember(key);
                Some(self.reads.alloc_extend(v.iter().copied()))
            }
            Ok(None) => None,
            Err(e) => {
                self.failed("read", e);
                None
            }
        }
    }

    fn contains_key(&self, key: &[u8]) -> bool {
        if self
            .found
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
        {
            return true;
        }
        let start = Instant::now();
        let found = self.keyspace.contains_key(self.key(key));
        self.stats.read(start, 0);
        match found {
            Ok(found) => {
                if found {
                    self.remember(key);
                }
                found
            }
            Err(e) => {
                self.failed("read", e);
                false
            }
        }
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn memory_bytes(&self) -> u64 {
        // Bounded by the database's cache and write buffers, shared by every store.
        0
    }

    fn apply(
        &mut self,
        staged: &mut Staged,
        key_delta: i64,
        index: IndexChanges,
        ix: &Indexing,
    ) -> Result<()> {
        // Groups that are not a prefix of the key have an index of their own.
        let derived = ix.groups.as_ref().filter(|g| !g.is_prefix());
        let start = Instant::now();
        let (mut puts, mut bytes) = (0u64, 0u64);
        // Not one batch: the cache need not change atomically (a failed write marks the store
        // to be rebuilt from the checkpoint), and a batch is held in memory whole.
        let mut batch = self.db.batch();
        let mut pending = 0u64;
        let mut write =
            |batch: &mut fjall::OwnedWriteBatch, key: Vec<u8>, value: Option<Vec<u8>>| {
                let n = key.len() + value.as_ref().map_or(0, Vec::len);
                bytes += n as u64;
                pending += n as u64;
                match value {
                    Some(v) => {
                        puts += 1;
                        batch.insert(&self.keyspace, key, v);
                    }
                    None => batch.remove(&self.keyspace, key),
                }
                if pending >= self.batch_bytes {
                    pending = 0;
                    std::mem::replace(batch, self.db.batch())
                        .commit()
                        .map_err(|e| cache_error("write", e))?;
                }
                Ok::<(), SluiceError>(())
            };
        for (k, slot) in staged.drain() {
            if let Some(g) = derived.map(|g| g.group_of(&k)).transpose()?.flatten() {
                write(
                    &mut batch,
                    self.group_key(&g, &k),
                    slot.as_ref().map(|_| Vec::new()),
                )?;
            }
            write(&mut batch, self.key(&k), slot.map(Into::into))?;
        }
        for (t, k) in index.remove {
            write(&mut batch, self.index_key(t, &k), None)?;
        }
        for (t, k) in index.insert {
            write(&mut batch, self.index_key(t, &k), Some(Vec::new()))?;
        }
        batch.commit().map_err(|e| cache_error("write", e))?;
        self.set_len((self.len as i64 + key_delta).max(0) as u64);
        self.stats.puts = puts;
        self.stats.bytes_written = bytes;
        self.stats.write_batch_ms = start.elapsed().as_millis() as u64;
        Ok(())
    }

    fn custom_metrics(&self, delta_write_ms: u64) -> BTreeMap<&'static str, u64> {
        let s = &self.stats;
        let all_keys = KEYS_IN_CACHE.load(Ordering::Relaxed).max(self.len).max(1);
        let disk = self.keyspace.disk_space();
        let share = |bytes: u64| (bytes as u128 * self.len as u128 / all_keys as u128) as u64;
        BTreeMap::from([
            ("rocksdbGetCount", s.gets.get()),
            ("rocksdbGetLatency", s.get_micros.get() / 1000),
            ("rocksdbPutCount", s.puts),
            ("rocksdbTotalBytesRead", s.bytes_read.get()),
            (
                "rocksdbTotalBytesReadThroughIterator",
                s.bytes_read_by_iterator.get(),
            ),
            ("rocksdbTotalBytesWritten", s.bytes_written),
            ("rocksdbCommitWriteBatchLatency", s.write_batch_ms),
            ("rocksdbCommitFileSyncLatencyMs", delta_write_ms),
            ("rocksdbSstFileSize", share(disk)),
        ])
    }

    /// A prefix group's keys are a range of the sorted keys: a prefix scan. Another group's
    /// keys are a range of the group index, each pair then read by its key.
    fn group_scan(
        &self,
        group: &[u8],
        groups: &KeyGroups,
        each: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<()> {
        if !groups.is_prefix() {
            let start = 8 + group.len();
            for guard in self.keyspace.prefix(self.group_key(group, &[])) {
                let entry = guard.key().map_err(|e| cache_error("read", e))?;
                CacheStats::add(&self.stats.bytes_read_by_iterator, entry.len() as u64);
                let key = &entry[start..];
                // A longer group may start with this one's bytes.
                if groups.group_of(key)?.as_deref() != Some(group) {
                    continue;
                }
                let t = Instant::now();
                let value = self
                    .keyspace
                    .get(self.key(key))
                    .map_err(|e| cache_error("read", e))?;
                self.stats.read(t, value.as_ref().map_or(0, |v| v.len()));
                if let Some(v) = value {
                    each(key, &v);
                }
            }
            return Ok(());
        }
        for guard in self.keyspace.prefix(self.key(group)) {
            let (k, v) = guard.into_inner().map_err(|e| cache_error("read", e))?;
            CacheStats::add(
                &self.stats.bytes_read_by_iterator,
                (k.len() + v.len()) as u64,
            );
            let key = &k[8..];
            if groups.group_of(key)?.as_deref() == Some(group) {
                each(key, &v);
            }
        }
        Ok(())
    }

    fn index_scan(&self, each: &mut dyn FnMut(i64, &[u8]) -> Result<bool>) -> Result<()> {
        for guard in self.keyspace.prefix(self.prefixes.times) {
            let entry = guard.key().map_err(|e| cache_error("read", e))?;
            CacheStats::add(&self.stats.bytes_read_by_iterator, entry.len() as u64);
            let rest = &entry[8..];
            let time = time_of_bytes(rest)
                .ok_or_else(|| cache_error("read", "an index entry without its time"))?;
            if !each(time, &rest[8..])? {
                break;
            }
        }
        Ok(())
    }

    fn pairs(&self) -> Vec<(&[u8], &[u8])> {
        let mut out = Vec::new();
        for guard in self.keyspace.prefix(self.prefixes.pairs) {
            match guard.into_inner() {
                Ok((k, v)) => {
                    CacheStats::add(
                        &self.stats.bytes_read_by_iterator,
                        (k.len() + v.len()) as u64,
                    );
                    out.push((
                        &*self.reads.alloc_extend(k.iter().skip(8).copied()),
                        &*self.reads.alloc_extend(v.iter().copied()),
                    ))
                }
                Err(e) => {
                    self.failed("read", e);
                    break;
                }
            }
        }
        out
    }

    fn clear(&mut self) -> Result<()> {
        self.fresh_prefix()
    }

    fn reload(&mut self, inner: &Inner, version: u64, ix: &Indexing) -> Result<()> {
        let times = ix.times.as_ref();
        let derived = ix.groups.as_ref().filter(|g| !g.is_prefix());
        self.fresh_prefix()?;
        let mut len = 0u64;
        let mut pending: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(INDEX_CHUNK);
        let ingest = |pending: &mut Vec<(Vec<u8>, Vec<u8>)>| -> Result<()> {
            let mut batch = self.db.batch();
            if let Some(times) = times {
                let (keys, values): (Vec<&[u8]>, Vec<&[u8]>) =
                    pending.iter().map(|(k, v)| (&k[..], &v[..])).unzip();
                for (k, t) in
                    keys.iter()
                        .zip(times_of(times, inner.id.partition_id, &keys, &values)?)
                {
                    if let Some(t) = t {
                        batch.insert(&self.keyspace, self.index_key(t, k), []);
                    }
                }
            }
            for (k, v) in pending.drain(..) {
                if let Some(g) = derived.map(|g| g.group_of(&k)).transpose()?.flatten() {
                    batch.insert(&self.keyspace, self.group_key(&g, &k), []);
                }
                batch.insert(&self.keyspace, self.key(&k), v);
            }
            batch.commit().map_err(|e| cache_error("write", e))
        };
        inner.load_pairs(version, |k, v| {
            len += 1;
            pending.push((k, v));
            if pending.len() == INDEX_CHUNK {
                ingest(&mut pending)?;
            }
            Ok(())
        })?;
        ingest(&mut pending)?;
        self.set_len(len);
        Ok(())
    }

    fn open_version(&mut self) {
        self.reads = typed_arena::Arena::new();
        self.stats = CacheStats::default();
        self.found.lock().unwrap_or_else(|p| p.into_inner()).clear();
        *self.error.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn take_error(&mut self) -> Option<SluiceError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_under(cache: &LocalCache, prefix: [u8; 8]) -> usize {
        cache.keyspace.prefix(prefix).count()
    }

    /// A dropped store leaves nothing under its prefixes, whether its pairs were in tables of
    /// their own (dropped whole), in tables shared with another store, or still in memtables;
    /// the other store keeps every pair.
    #[test]
    fn dropping_a_store_deletes_its_pairs_and_no_others() {
        // A database of the test's own: the process's one is shared by tests running at the
        // same time, whose writes would land in the tables this test counts.
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let keyspace = db
            .keyspace("state", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        let memory = LocalCacheMemory::default();
        let gone = LocalCache::on(db.clone(), keyspace.clone(), memory);
        let kept = LocalCache::on(db, keyspace, memory);
        let put = |cache: &LocalCache, range: std::ops::Range<u32>| {
            let mut batch = cache.db.batch();
            for i in range {
                batch.insert(&cache.keyspace, cache.key(&i.to_be_bytes()), [7u8; 100]);
                batch.insert(&cache.keyspace, cache.index_key(i64::from(i), b"k"), []);
            }
            batch.commit().unwrap();
        };
        // Tables of the dropped store alone, then tables shared by both, then memtables.
        put(&gone, 0..30_000);
        gone.keyspace.rotate_memtable_and_wait().unwrap();
        put(&gone, 30_000..40_000);
        put(&kept, 0..10_000);
        kept.keyspace.rotate_memtable_and_wait().unwrap();
        put(&gone, 40_000..45_000);
        put(&kept, 10_000..12_000);
        let (prefix, index_prefix) = (gone.prefixes.pairs, gone.prefixes.times);
        assert_eq!(keys_under(&gone, prefix), 45_000);
        let tables = kept.keyspace.table_count();
        drop(gone);
        // The first table held the dropped store's pairs only: it went without a tombstone.
        assert!(kept.keyspace.table_count() < tables);
        assert_eq!(keys_under(&kept, prefix), 0);
        assert_eq!(keys_under(&kept, index_prefix), 0);
        assert_eq!(keys_under(&kept, kept.prefixes.pairs), 12_000);
        assert_eq!(keys_under(&kept, kept.prefixes.times), 12_000);
    }
}
