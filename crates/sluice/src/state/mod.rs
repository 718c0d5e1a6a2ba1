//! The versioned state store: Spark's `StateStore` / `StateStoreProvider` /
//! `HDFSBackedStateStoreProvider`, with Sluice's own file format.
//!
//! A stateful operator keeps, for each of its partitions, a map from opaque key bytes to opaque
//! value bytes (the operator encodes both with its layout, e.g. arrow's row format). This
//! module knows store ids, versions and layouts, never queries. Every path is built by
//! [`CheckpointDir`].
//!
//! # Versions
//!
//! Version 0 is the empty map. Version `N + 1` = version `N` + the changes of one batch:
//! batch `b` reads version `b` and commits version `b + 1` (Spark: batch 0 writes `1.delta`).
//! [`StateStoreProvider::get_store`] gives the store at any retained version; the
//! [`StateStore`] then stages puts and removes (its reads see them), and
//! [`StateStore::commit`] makes them version `N + 1`, or [`StateStore::abort`] drops them.
//! Loading a version other than the one in memory (a restart, or the replay of a batch whose
//! commit did not complete) reloads from disk. A replayed batch rewrites its version: the
//! replay is the truth, the old file is replaced and every file of the abandoned future
//! (snapshots at or after that version, deltas after it) is deleted in the same step.
//!
//! # Layout
//!
//! ```text
//! <checkpoint>/state/<operatorId>/<partitionId>/
//!   1.delta 2.delta ... N.delta      the changes of each version (one per commit, even empty)
//!   10.snapshot 20.snapshot ...      every live pair at that version (written by maintenance)
//!   .<name>.<uuid>.tmp               a file being written (removed on open after a crash)
//! ```
//!
//! Version `v` is loaded from the newest snapshot at or below `v` and every delta after it;
//! without such a snapshot, from `1.delta` on. A missing delta gives
//! `STATE_STORE_VERSION_MISSING` naming the version and the directory.
//!
//! # File format (format version 2; deltas and snapshots alike)
//!
//! ```text
//! header   "SLUICEST" | format version u8 = 2 | kind u8 ('D' delta, 'S' snapshot)
//!          | flags u16 = 0 | state version u64 LE
//!          | operator id u32 LE | partition id u32 LE                   (28 bytes)
//! chunk*   codec u8 (0 raw, 1 lz4 block) | raw len u32 LE (1..=1 MiB)
//!          | stored len u32 LE | crc32 of the stored bytes u32 LE | stored bytes
//! 0xFF     end of chunks
//! trailer  crc32 of every byte before the trailer u32 LE | "SLND"
//! ```
//!
//! The concatenated raw chunk bytes are the records (a record may span chunks):
//!
//! ```text
//! put      0x01 | key len u32 LE | key | value len u32 LE | value
//! remove   0x02 | key len u32 LE | key                 (deltas only: a tombstone)
//! end      0x00 | number of records u64 LE              (exactly once, last)
//! ```
//!
//! Keys are strictly increasing within a file. Chunks are cut every 64 KiB of raw bytes and
//! compressed with lz4 when that makes them smaller. The reader checks the magic, the kind, the
//! version against the file name, every chunk's checksum before decompressing it, key order,
//! the record count, the whole-file checksum, the end magic and that nothing follows it; any
//! failure — including a truncated file — is `STATE_STORE_CORRUPT` naming the file and the fix
//! (restore the file or start with a new checkpoint location). A newer format version gives
//! `STATE_STORE_UNSUPPORTED_FORMAT`. A file whose header names another store (copied between
//! partitions) is `STATE_STORE_CORRUPT` saying so. Format 1 files (20-byte header, no store)
//! are still read. An empty delta is 59 bytes.
//!
//! Every file is written to a temporary name, fsynced, renamed over its final name (replacing a
//! file from a crashed attempt of the same batch) and the directory fsynced, so a reader never
//! sees a partial file.
//!
//! # Cost model
//!
//! - `get`/`put`/`remove`: O(1) expected, on in-memory hash maps (the committed map, and the
//!   staged changes of the open version); a batch touches many keys, and ordered maps spent
//!   most of their time comparing them.
//! - `iter`: O(n log n): the live pairs are sorted, as [`StateStore::iter`] yields them in key
//!   order.
//! - `commit`: sorts the staged changes (puts and tombstones), writes only them to
//!   `<v>.delta`, then applies them to the committed map: O(k log k) for k changed keys,
//!   independent of the total state.
//! - Loading a version from disk: O(state + changes since the snapshot), once per restart or
//!   replay.
//! - Maintenance: O(state) I/O, off the commit path (see below).
//!
//! # Maintenance (snapshot and purge)
//!
//! A maintenance run writes `<L>.snapshot` for the latest version `L` on disk when at least
//! [`StateStoreConf::min_deltas_for_snapshot`] deltas were written since the newest snapshot,
//! then deletes what is no longer needed to load any of the last
//! [`StateStoreConf::min_versions_to_retain`] versions: with `oldest = L - retain + 1` and
//! `base` the newest snapshot at or below `oldest`, every older snapshot and every delta at or
//! below `base` (nothing while there is no such snapshot).
//!
//! **The snapshot is built from the files, not from memory.** Deltas and snapshots are
//! immutable once written, and each holds its keys in order, so the snapshot of `L` is a
//! streaming k-way merge of the newest snapshot and the deltas after it (newest record per key
//! wins; a tombstone drops the key). That "immutable copy" costs nothing to obtain: no clone of
//! the map, no lock held while it is read, no copy-on-write structure taxing every commit, and
//! the merge needs one record per input file of memory. It also re-verifies every file it
//! reads. A commit that rewrites history (a replay) bumps an epoch; a snapshot built across
//! such a change is discarded instead of published.
//!
//! Runs happen in three ways:
//! - [`StateStoreProvider::do_maintenance`]: an explicit, synchronous run; done when it returns
//!   (O(state) on the caller's thread when a snapshot is due: meant for tests and shutdown).
//! - [`DefaultStateStoreProvider::maintain_in_background`]: the same run on a background
//!   thread, started only when a snapshot is due; returns at once (cheap after every batch).
//! - Automatically: after a commit, when a snapshot is due and at least
//!   [`StateStoreConf::maintenance_interval`] has passed since the provider was created or last
//!   maintained, the provider starts a short-lived thread for one run (never more than one at a
//!   time). Background errors are logged, never fatal: the next run retries.
//!
//! Only the rename of a finished snapshot and the purge's deletions hold the directory lock
//! that commits and loads also take, so a commit never waits for a snapshot to be written.
//! Runs are serialized; dropping the provider stops a running merge and joins the thread.
//!
//! # What the bytes mean
//!
//! Each stateful operator's key and value layout (encode and decode) is in `layout`: one codec
//! per operator, shared by the operator that writes the state and by the inspection that
//! reads it.
//!
//! # Reading from outside the query
//!
//! [`crate::inspect`] reads a checkpoint's state without the query (`sluice state read`):
//! stores opened with [`DefaultStateStoreProvider::open_read_only`] (no temp-file cleanup,
//! commits and maintenance refused), pairs decoded into Arrow through the layouts, from the
//! operator's recorded schema. Nothing here depends on it.

mod disk;
pub(crate) mod files;
mod format;
pub(crate) mod layout;
mod provider;
pub(crate) mod schema;

/// The store contract's tests, once per kind of committed version.
#[cfg(test)]
mod tests {
    const KIND: StateStoreKind = StateStoreKind::InMemory;
    include!("tests/contract.rs");
    include!("tests/scans.rs");
}
#[cfg(test)]
mod tests_on_disk {
    const KIND: StateStoreKind = StateStoreKind::OnDisk;
    include!("tests/contract.rs");
    include!("tests/scans.rs");
}

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::checkpoint::CheckpointDir;
pub use crate::conf::{LocalCacheMemory, StateStoreKind};
use crate::error::Result;
use crate::types::OperatorId;

pub use provider::DefaultStateStoreProvider;

/// How a store orders its pairs by time, for its time index
/// ([`DefaultStateStoreProvider::with_time_index`], [`StateStore::scan_by_time`]): an
/// operator's event time (a window's end, a deduplication's expiry, a group's timeout), read
/// back from the pair's bytes.
#[derive(Clone)]
pub struct PairTimes {
    /// `times(partition, keys, values)`: one time (µs, or ms for timeouts: the operator's
    /// unit) per pair of the store of `partition`; `None` for a pair that is not indexed (it
    /// never expires). An error names what failed to decode and where (the state is corrupt).
    #[allow(clippy::type_complexity)]
    pub times: Arc<dyn Fn(usize, &[&[u8]], &[&[u8]]) -> Result<Vec<Option<i64>>> + Send + Sync>,
    /// The time is read from the key alone, so a key keeps its time as long as it lives: an
    /// update of a live key leaves the index alone.
    pub from_key: bool,
}

impl std::fmt::Debug for PairTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairTimes")
            .field("from_key", &self.from_key)
            .finish_non_exhaustive()
    }
}

/// How a store groups its keys, for [`StateStore::scan_group`]
/// ([`DefaultStateStoreProvider::with_key_groups`]); a key may be in no group.
///
/// - [`KeyGroups::by_prefix`]: a key's group is its first bytes (a join's side and join key
///   before the row's sequence number). The on-disk provider reads a group as a range of its
///   sorted keys.
/// - [`KeyGroups::by`]: a key's group is bytes read from anywhere in it (a session's other
///   grouping keys, wherever the session column is). The on-disk provider keeps an index of
///   its own, `group | key`, next to the pairs.
///
/// The in-memory provider keeps each group's keys in a set of its own either way.
#[derive(Clone)]
pub struct KeyGroups {
    of: GroupOf,
}

#[derive(Clone)]
#[allow(clippy::type_complexity)]
enum GroupOf {
    Prefix(Arc<dyn Fn(&[u8]) -> Option<usize> + Send + Sync>),
    Derived(Arc<dyn Fn(&[u8]) -> Result<Option<Vec<u8>>> + Send + Sync>),
}

impl KeyGroups {
    /// Groups by a prefix: `prefix_len(key)` is the length of `key`'s group prefix.
    pub fn by_prefix(prefix_len: impl Fn(&[u8]) -> Option<usize> + Send + Sync + 'static) -> Self {
        Self {
            of: GroupOf::Prefix(Arc::new(prefix_len)),
        }
    }

    /// Groups by bytes read from the key: `group(key)` is `key`'s group; an error (a key
    /// that does not decode) fails the commit that stages or loads the key.
    pub fn by(group: impl Fn(&[u8]) -> Result<Option<Vec<u8>>> + Send + Sync + 'static) -> Self {
        Self {
            of: GroupOf::Derived(Arc::new(group)),
        }
    }

    /// `key`'s group.
    pub fn group_of<'k>(&self, key: &'k [u8]) -> Result<Option<std::borrow::Cow<'k, [u8]>>> {
        Ok(match &self.of {
            GroupOf::Prefix(len) => len(key)
                .and_then(|n| key.get(..n))
                .map(std::borrow::Cow::Borrowed),
            GroupOf::Derived(group) => group(key)?.map(std::borrow::Cow::Owned),
        })
    }

    /// A group is a range of the sorted keys.
    pub(crate) fn is_prefix(&self) -> bool {
        matches!(self.of, GroupOf::Prefix(_))
    }
}

impl std::fmt::Debug for KeyGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyGroups")
            .field("prefix", &self.is_prefix())
            .finish_non_exhaustive()
    }
}

/// A live pair found by its time ([`StateStore::scan_by_time`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedPair {
    /// The pair's time, as [`PairTimes`] reads it.
    pub time: i64,
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
}

/// Spark's `spark.sql.streaming.stateStore.maintenanceInterval`.
pub const DEFAULT_MAINTENANCE_INTERVAL: Duration = Duration::from_secs(60);

/// Which store: one partition of one stateful operator of one query.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StateStoreId {
    /// The query's checkpoint location.
    pub checkpoint_root: PathBuf,
    /// The stateful operator's id within the query (its `state/<op>` directory).
    pub operator_id: u32,
    /// The partition (one store per shuffle partition).
    pub partition_id: u32,
}

impl StateStoreId {
    /// The store of `partition_id` of operator `operator_id` under `checkpoint_root`.
    pub fn new(checkpoint_root: impl Into<PathBuf>, operator_id: u32, partition_id: u32) -> Self {
        Self {
            checkpoint_root: checkpoint_root.into(),
            operator_id,
            partition_id,
        }
    }

    /// `<checkpoint_root>/state/<operator_id>/<partition_id>`
    /// ([`CheckpointDir::state_partition_dir`]).
    pub fn dir(&self) -> PathBuf {
        CheckpointDir::new(&self.checkpoint_root)
            .state_partition_dir(OperatorId(self.operator_id), self.partition_id as usize)
    }
}

/// Store settings (Spark's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateStoreConf {
    /// A snapshot is written once at least this many deltas were written since the last one.
    pub min_deltas_for_snapshot: u64,
    /// Maintenance keeps every file needed to load the last this-many versions (at least 1).
    pub min_versions_to_retain: u64,
    /// Minimum time between background maintenance runs (the first one comes this long after
    /// the provider is created). Explicit [`StateStoreProvider::do_maintenance`] calls are not
    /// limited by it.
    pub maintenance_interval: Duration,
    /// Where the committed version is held (the query's pinned provider class).
    pub kind: StateStoreKind,
    /// The local cache's memory, for [`StateStoreKind::OnDisk`].
    pub local_cache: LocalCacheMemory,
}

impl Default for StateStoreConf {
    fn default() -> Self {
        Self {
            min_deltas_for_snapshot: crate::conf::DEFAULT_MIN_DELTAS_FOR_SNAPSHOT,
            min_versions_to_retain: crate::conf::DEFAULT_MIN_BATCHES_TO_RETAIN,
            maintenance_interval: DEFAULT_MAINTENANCE_INTERVAL,
            kind: StateStoreKind::InMemory,
            local_cache: LocalCacheMemory::default(),
        }
    }
}

/// Numbers for `StateOperatorProgress`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateStoreMetrics {
    /// Live keys, staged changes included.
    pub num_keys: u64,
    /// Estimate: key and value bytes plus a per-entry overhead, committed and staged.
    pub memory_used_bytes: u64,
    /// `put` calls in the open version, or in the last commit once committed.
    pub num_updated: u64,
    /// `remove` calls in the open version, or in the last commit once committed.
    pub num_removed: u64,
    /// Time the last commit took.
    pub commit_time_ms: u64,
    /// The provider's own numbers under Spark's names (the on-disk provider's `rocksdb*`
    /// metrics, where they have a meaning), for `StateOperatorProgress.customMetrics`; summed
    /// over an operator's partitions, as Spark sums them.
    pub custom_metrics: std::collections::BTreeMap<&'static str, u64>,
}

/// One version of a store being read and updated by one batch.
///
/// Reads see this batch's own puts and removes. Nothing reaches disk before
/// [`commit`](StateStore::commit). Keys and values are opaque bytes; keys are ordered
/// bytewise and [`iter`](StateStore::iter) yields them in that order.
pub trait StateStore: Send {
    /// The version this store holds: the version it was loaded at, and after a successful
    /// [`commit`](StateStore::commit) the version it committed.
    fn version(&self) -> u64;
    /// The value of `key`, staged changes included.
    fn get(&self, key: &[u8]) -> Option<&[u8]>;
    /// Stages `key = value`.
    fn put(&mut self, key: &[u8], value: &[u8]);
    /// Stages the removal of `key` (a no-op if it is not there).
    fn remove(&mut self, key: &[u8]);
    /// Stages `key = value` (`Some`), or the removal of `key` (`None`), when the caller knows
    /// whether the committed version has `key` (`committed`): no lookup in the committed
    /// version. How an operator that holds its state itself stages its changes
    /// ([`DefaultStateStoreProvider::held_by_operator`]).
    fn stage_known(&mut self, key: &[u8], value: Option<&[u8]>, committed: bool);
    /// Every pair of the committed version the store was opened at (staged changes left out),
    /// read from the checkpoint's files, in key order: how an operator that holds its state
    /// itself rebuilds it. An error names the file that failed.
    fn load_committed(&self, each: &mut dyn FnMut(Vec<u8>, Vec<u8>) -> Result<()>) -> Result<()>;
    /// Every live pair, staged changes included, in key order.
    fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_>;
    /// The live pairs whose time (the provider's [`PairTimes`]) is before `time`, or at it
    /// when `inclusive`, staged changes included, in time order and then key order. A range
    /// scan of the store's time index: only those pairs are read, plus this version's staged
    /// puts, never the whole state. Fails on a store without a time index.
    fn scan_by_time(&self, time: i64, inclusive: bool) -> Result<Vec<TimedPair>>;
    /// The earliest time of a live pair, staged changes included (`None` when no pair has a
    /// time). Fails on a store without a time index.
    fn first_time(&self) -> Result<Option<i64>>;
    /// The live pairs of the key group `group` (the provider's [`KeyGroups`]), staged changes
    /// included, in key order. Reads only the group. Fails on a store without key groups.
    fn scan_group(&self, group: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// The number of live keys, staged changes included.
    fn num_keys(&self) -> u64;
    /// Writes `<version + 1>.delta` (only the changed keys; MUST be atomic and MUST replace a
    /// delta left by an earlier attempt of the same batch), makes it the current version and
    /// returns `version + 1`. On error nothing changes in memory and the staged changes stay.
    fn commit(&mut self) -> Result<u64>;
    /// Drops the staged changes.
    fn abort(&mut self);
    /// Size and activity numbers.
    fn metrics(&self) -> StateStoreMetrics;
    /// The partition's state is on another worker of a cluster: this store stands for it, has
    /// no pairs and takes no changes. False for every store that holds state.
    fn is_elsewhere(&self) -> bool {
        false
    }
}

/// Owns the state of one store id and hands out its versions.
pub trait StateStoreProvider: Send {
    /// The store at `version` (0 = empty), with nothing staged. Reuses the in-memory state when
    /// it is at that version (dropping uncommitted changes), otherwise loads from disk: the
    /// newest snapshot at or below `version`, then the deltas after it. Any retained version can
    /// be loaded (restart, replay).
    fn get_store(&mut self, version: u64) -> Result<&mut dyn StateStore>;
    /// One synchronous maintenance run: writes a snapshot of the latest version if one is due,
    /// then purges files no longer needed; done when it returns.
    fn do_maintenance(&mut self) -> Result<()>;
}

/// Reads `bytes` as a delta and as a snapshot file to the end (fuzzing entry point).
#[doc(hidden)]
pub fn fuzz_read(bytes: &[u8]) {
    for kind in [format::FileKind::Delta, format::FileKind::Snapshot] {
        let version = bytes
            .get(12..20)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(1);
        if let Ok(mut r) =
            format::StateFileReader::open(bytes, std::path::Path::new("fuzz"), kind, version, None)
        {
            for _ in 0..1_000_000 {
                match r.next_record() {
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
        }
    }
}
