//! [`MemStore`]: the store one batch reads and writes (the committed version under this batch's
//! staged changes), and the changes an operator that holds its state stages ([`KnownChanges`]).

use super::*;

/// The changes an operator holding its state stages ([`StateStore::stage_known`] on a store
/// [`DefaultStateStoreProvider::held_by_operator`]): each key at most once per version (a key
/// staged twice is two records, which the delta writer refuses as keys out of order), appended
/// to one buffer with no per-pair allocation or hashing, sorted once at commit.
#[derive(Default)]
pub(super) struct KnownChanges {
    pub(super) bytes: Vec<u8>,
    /// (key range in `bytes`, value range: `None` for a removal).
    pub(super) entries: Vec<(std::ops::Range<usize>, Option<std::ops::Range<usize>>)>,
    pub(super) put_bytes: u64,
    pub(super) puts: u64,
}

impl KnownChanges {
    pub(super) fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
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

    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
        self.put_bytes = 0;
        self.puts = 0;
    }

    /// Writes the changes in key order.
    pub(super) fn write(
        &mut self,
        w: &mut crate::state::format::StateFileWriter<impl io::Write>,
    ) -> io::Result<()> {
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
pub(super) struct MemStore {
    pub(super) inner: Arc<Inner>,
    pub(super) version: u64,
    pub(super) committed: Box<dyn Committed>,
    /// The committed version failed to apply or load: it is rebuilt before it is used again.
    pub(super) broken: bool,
    pub(super) staged: Staged,
    pub(super) staged_bytes: u64,
    /// Live keys gained (or lost, negative) by the staged changes.
    pub(super) staged_key_delta: i64,
    /// The time index's times, when the store has one.
    pub(super) times: Option<PairTimes>,
    /// The key groups, when the store has them.
    pub(super) groups: Option<KeyGroups>,
    /// The keys staged in this version, by key group (with key groups; a key may be listed
    /// twice, and its staged slot decides).
    pub(super) staged_groups: Groups<Vec<Box<[u8]>>>,
    /// A staged key whose group could not be read: the commit fails with it.
    pub(super) group_error: Option<SluiceError>,
    /// Index entries the open version's scans met that the commit must remove: stale ones, and
    /// those of staged keys (see [`MemStore::index_changes`]).
    pub(super) visited: Mutex<Vec<(i64, Box<[u8]>)>>,
    pub(super) num_updated: u64,
    pub(super) num_removed: u64,
    pub(super) commit_time_ms: u64,
    /// Time the last commit took to write and sync its delta file.
    pub(super) delta_write_ms: u64,
    /// The operator holds the committed version: its changes are [`KnownChanges`].
    pub(super) held: bool,
    pub(super) known: KnownChanges,
}

impl MemStore {
    pub(super) fn new(inner: Arc<Inner>, committed: Box<dyn Committed>) -> Self {
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
    pub(super) fn open_version(&mut self) {
        self.abort();
        self.committed.open_version();
        self.commit_time_ms = 0;
        self.delta_write_ms = 0;
    }

    pub(super) fn indexing(&self) -> Indexing {
        Indexing {
            times: self.times.clone(),
            groups: self.groups.clone(),
        }
    }

    /// Lists a key newly staged under its group.
    pub(super) fn stage_in_group(&mut self, key: &[u8]) {
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

    pub(super) fn time_index(&self) -> Result<&PairTimes> {
        self.times.as_ref().ok_or_else(|| {
            SluiceError::internal(format!(
                "a scan by time of state {}, which keeps no time index",
                self.inner.describe()
            ))
        })
    }

    /// This version's staged puts that have a time, with it; only those `wanted` accepts are
    /// read (the time is not computed for the others).
    pub(super) fn staged_times(
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
    pub(super) fn scan_committed(
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
    pub(super) fn index_changes(&self) -> Result<IndexChanges> {
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

    pub(super) fn slot_size(key: &[u8], slot: &Option<Box<[u8]>>) -> u64 {
        entry_size(key.len(), slot.as_ref().map_or(0, |v| v.len()))
    }

    /// Stages `slot` for `key`, keeping `staged_bytes` right.
    pub(super) fn stage(&mut self, key: &[u8], slot: Option<Box<[u8]>>) {
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
    pub(super) fn change(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        in_committed: impl Fn(&Self) -> bool,
    ) {
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
