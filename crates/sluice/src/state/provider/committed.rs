//! Where a store's committed version is held between batches ([`Committed`]): [`InMemory`]
//! (hash maps, Spark's HDFS-backed provider) or [`HeldByOperator`] (the operator keeps it), and
//! the time index both keep.

use super::*;

/// Where a store keeps its committed version: in memory ([`InMemory`], Spark's
/// `HDFSBackedStateStoreProvider`) or in a local on-disk cache (`super::disk`, Spark's
/// `RocksDBStateStoreProvider`). Either way the checkpoint's files are the truth: a commit
/// writes its delta before it reaches the committed version, and a version other than the one
/// held is rebuilt from the files.
pub(in crate::state) trait Committed: Send {
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
pub(in crate::state) struct Indexing {
    pub times: Option<PairTimes>,
    pub groups: Option<KeyGroups>,
}

/// Changes to a committed version's time index: the removals first, then the inserts.
#[derive(Debug, Default)]
pub(in crate::state) struct IndexChanges {
    /// Entries no longer true (their key gone, or at another time).
    pub remove: Vec<(i64, Box<[u8]>)>,
    /// New entries.
    pub insert: Vec<(i64, Box<[u8]>)>,
}

/// The times of `pairs` by `times`, checked to be one per pair.
pub(in crate::state) fn times_of(
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
pub(in crate::state) const INDEX_CHUNK: usize = 4096;

/// The committed version in memory: one hash map, and its time index as a B-tree of times,
/// each with the set of its keys.
#[derive(Default)]
pub(in crate::state) struct InMemory {
    map: Map,
    bytes: u64,
    index: std::collections::BTreeMap<i64, std::collections::HashSet<Box<[u8]>, Hasher>>,
    index_bytes: u64,
    /// Each key group's keys, in order (with key groups).
    groups: Groups<std::collections::BTreeSet<Box<[u8]>>>,
}

impl InMemory {
    pub(super) fn index_insert(&mut self, time: i64, key: Box<[u8]>) {
        let len = key.len() as u64;
        if self.index.entry(time).or_default().insert(key) {
            self.index_bytes += len + INDEX_ENTRY_OVERHEAD;
        }
    }

    pub(super) fn group_insert(&mut self, groups: &KeyGroups, key: &[u8]) -> Result<()> {
        if let Some(g) = groups.group_of(key)? {
            self.index_bytes += key.len() as u64 + INDEX_ENTRY_OVERHEAD;
            self.groups.entry(g.into()).or_default().insert(key.into());
        }
        Ok(())
    }

    pub(super) fn group_remove(&mut self, groups: &KeyGroups, key: &[u8]) -> Result<()> {
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

    pub(super) fn index_remove(&mut self, time: i64, key: &[u8]) {
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
pub(super) const INDEX_ENTRY_OVERHEAD: u64 = 32;

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
pub(in crate::state) struct HeldByOperator {
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
