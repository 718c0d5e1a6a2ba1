//! A stateful operator's state stores, one per partition, as one batch sees them
//! ([`PartitionedStores`]); work is spread over partitions by [`crate::sync::on_threads`], each
//! partition on a thread of its own, as Spark runs one task per partition.

use std::ops::{Index, IndexMut, Range};

use crate::error::{Result, SluiceError};
use crate::state::{
    DefaultStateStoreProvider, KeyGroups, PairTimes, StateStore, StateStoreId, StateStoreMetrics,
    StateStoreProvider, TimedPair,
};
use crate::testing::TestHooks;
use crate::types::BatchId;
use sluice_common::threads::on_threads;

use super::context::StateInfo;

/// The partition of each of `n` rows by their encoded keys (`None`: no key columns, every
/// row's key the empty key).
pub(crate) fn partitions_of_keys(
    keys: Option<&arrow::row::Rows>,
    n: usize,
    partitions: usize,
) -> Vec<usize> {
    match keys {
        Some(rows) => (0..n)
            .map(|i| partition_of(rows.row(i).data(), partitions))
            .collect(),
        None => vec![partition_of(&[], partitions); n],
    }
}

/// FNV-1a: a partitioning hash that stays the same across builds and restarts.
pub(crate) fn partition_of(key: &[u8], partitions: usize) -> usize {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in key {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    (h % partitions as u64) as usize
}

/// Opens one store provider per partition of `owned` under `state/<op>/<p>/`, each with a time
/// index by `times` and key groups by `groups` when given, or its pairs held by the operator
/// (`held`, with the in-memory store kind only).
pub(crate) fn open_stores(
    info: &StateInfo,
    owned: Range<usize>,
    times: Option<PairTimes>,
    groups: Option<KeyGroups>,
    held: bool,
) -> Result<Vec<DefaultStateStoreProvider>> {
    if held && info.store_conf.kind != crate::state::StateStoreKind::InMemory {
        return Err(SluiceError::internal(
            "an operator holding its own state with the on-disk state store",
        ));
    }
    owned
        .map(|p| {
            let provider = DefaultStateStoreProvider::new(
                StateStoreId {
                    checkpoint_root: info.checkpoint.root().to_path_buf(),
                    operator_id: info.operator_id.0,
                    partition_id: p as u32,
                },
                info.store_conf.clone(),
            )?;
            let provider = match &times {
                Some(t) => provider.with_time_index(t.clone()),
                None => provider,
            };
            let provider = match &groups {
                Some(g) => provider.with_key_groups(g.clone()),
                None => provider,
            };
            Ok(if held {
                provider.held_by_operator()
            } else {
                provider
            })
        })
        .collect()
}

/// The store version an operator's held state is (`StatefulOperator::state_held_by_operator`):
/// none before it is built and while a batch changes it, so a batch that fails part-way leaves
/// it to be rebuilt from the stores.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldVersion(Option<u64>);

impl HeldVersion {
    /// Whether the held state, of `partitions` partitions, is the version `stores` are open at.
    pub(crate) fn is_current(&self, stores: &[&mut dyn StateStore], partitions: usize) -> bool {
        self.0.is_some()
            && self.0 == stores.first().map(|s| s.version())
            && partitions == stores.len()
    }

    /// The held state was built from `stores`: it is their version.
    pub(crate) fn built(&mut self, stores: &[&mut dyn StateStore]) {
        self.0 = stores.first().map(|s| s.version());
    }

    /// A batch starts changing the held state: no version is held until [`Self::ran`].
    pub(crate) fn begin(&mut self) -> Option<u64> {
        self.0.take()
    }

    /// The batch that began at `version` ran through: the held state is the next version.
    pub(crate) fn ran(&mut self, version: Option<u64>) {
        self.0 = version.map(|v| v + 1);
    }

    /// Nothing is held (the state is being rebuilt).
    pub(crate) fn clear(&mut self) {
        self.0 = None;
    }
}

/// Every partition's state store, open at the batch's version (each opened once for the whole
/// batch). Index it by partition (`stores[p]`); [`PartitionedStores::partition_of`] says which
/// partition a key belongs to. The operator reads and stages changes; the framework commits.
///
/// On a worker of a cluster only the partitions the worker owns have their store; the others are
/// [`ElsewhereStore`]s (empty, and a write to one fails the commit): the rows a worker is given
/// are those of its partitions, so an operator never reads or writes another's.
pub(crate) struct PartitionedStores<'a> {
    stores: Vec<&'a mut dyn StateStore>,
    owned: Range<usize>,
    version: u64,
}

impl<'a> PartitionedStores<'a> {
    /// Opens every provider's store at `version`: `providers` are the partitions `owned`, of
    /// `elsewhere.len() + owned.len()` in all, `elsewhere` stands for the others, in order.
    pub(crate) fn open(
        providers: &'a mut [DefaultStateStoreProvider],
        elsewhere: &'a mut [ElsewhereStore],
        owned: Range<usize>,
        version: u64,
    ) -> Result<Self> {
        let mut open = providers
            .iter_mut()
            .map(|p| p.get_store(version))
            .collect::<Result<Vec<_>>>()?
            .into_iter();
        let mut others = elsewhere.iter_mut();
        let total = open.len() + others.len();
        let mut stores: Vec<&'a mut dyn StateStore> = Vec::with_capacity(total);
        for p in 0..total {
            let store: Option<&'a mut dyn StateStore> = if owned.contains(&p) {
                open.next().map(|s| s as &mut dyn StateStore)
            } else {
                others.next().map(|s| {
                    s.version = version;
                    s as &mut dyn StateStore
                })
            };
            stores.push(store.ok_or_else(|| {
                SluiceError::internal("state stores opened for a partition range they miss")
            })?);
        }
        Ok(Self {
            stores,
            owned,
            version,
        })
    }

    /// The state version the stores were opened at (the batch id).
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// The partition `key` belongs to.
    pub(crate) fn partition_of(&self, key: &[u8]) -> usize {
        partition_of(key, self.stores.len())
    }

    /// Every partition's store, in partition order, to update (e.g. on
    /// `on_threads`).
    pub(crate) fn all_mut(&mut self) -> &mut [&'a mut dyn StateStore] {
        &mut self.stores
    }

    /// Commits every partition's store (each writes and syncs its own delta file, at the same
    /// time); returns their metrics summed. With the `testing` feature and a crash
    /// injected in this batch's state commit, the first partition commits and the others fail.
    pub(crate) fn commit(
        &mut self,
        hooks: &TestHooks,
        batch_id: BatchId,
    ) -> Result<StateStoreMetrics> {
        if let Some(p) = (0..self.stores.len())
            .filter(|p| !self.owned.contains(p))
            .find(|p| {
                let m = self.stores[*p].metrics();
                m.num_updated + m.num_removed > 0
            })
        {
            return Err(SluiceError::internal(format!(
                "a stateful operator changed state partition {p}, which another worker owns"
            )));
        }
        let owned = &mut self.stores[self.owned.clone()];
        #[cfg(feature = "testing")]
        if hooks.crashes_at(crate::testing::CrashPoint::InStateCommit, batch_id.0) {
            let mut failing: Vec<crash::CrashInCommit<'_>> = owned
                .iter_mut()
                .enumerate()
                .map(|(p, s)| crash::CrashInCommit::new(&mut **s, p == 0))
                .collect();
            let mut stores: Vec<&mut dyn StateStore> = failing
                .iter_mut()
                .map(|s| s as &mut dyn StateStore)
                .collect();
            return commit_all(&mut stores);
        }
        #[cfg(not(feature = "testing"))]
        let _ = (hooks, batch_id);
        commit_all(owned)
    }
}

/// The store of a partition another worker owns ([`PartitionedStores`]): no pairs, and what is
/// staged in it is counted, so that the commit refuses it instead of losing it.
#[derive(Debug, Default)]
pub(crate) struct ElsewhereStore {
    version: u64,
    staged: u64,
}

impl StateStore for ElsewhereStore {
    fn version(&self) -> u64 {
        self.version
    }
    fn get(&self, _key: &[u8]) -> Option<&[u8]> {
        None
    }
    fn put(&mut self, _key: &[u8], _value: &[u8]) {
        self.staged += 1;
    }
    fn remove(&mut self, _key: &[u8]) {
        self.staged += 1;
    }
    fn stage_known(&mut self, _key: &[u8], _value: Option<&[u8]>, _committed: bool) {
        self.staged += 1;
    }
    fn load_committed(&self, _each: &mut dyn FnMut(Vec<u8>, Vec<u8>) -> Result<()>) -> Result<()> {
        Ok(())
    }
    fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        Box::new(std::iter::empty())
    }
    fn scan_by_time(&self, _time: i64, _inclusive: bool) -> Result<Vec<TimedPair>> {
        Ok(Vec::new())
    }
    fn first_time(&self) -> Result<Option<i64>> {
        Ok(None)
    }
    fn scan_group(&self, _group: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(Vec::new())
    }
    fn num_keys(&self) -> u64 {
        0
    }
    fn commit(&mut self) -> Result<u64> {
        Err(SluiceError::internal(
            "a commit of a state partition another worker owns",
        ))
    }
    fn abort(&mut self) {
        self.staged = 0;
    }
    fn metrics(&self) -> StateStoreMetrics {
        StateStoreMetrics {
            num_updated: self.staged,
            ..Default::default()
        }
    }
    fn is_elsewhere(&self) -> bool {
        true
    }
}

impl<'a> Index<usize> for PartitionedStores<'a> {
    type Output = dyn StateStore + 'a;
    fn index(&self, p: usize) -> &Self::Output {
        &*self.stores[p]
    }
}

impl<'a> IndexMut<usize> for PartitionedStores<'a> {
    fn index_mut(&mut self, p: usize) -> &mut Self::Output {
        &mut *self.stores[p]
    }
}

/// Commits every store, in parallel; returns their metrics summed (keys in state, memory
/// bytes, custom metrics).
fn commit_all(stores: &mut [&mut dyn StateStore]) -> Result<StateStoreMetrics> {
    let results = on_threads(
        stores.iter_mut(),
        "a state store commit thread panicked",
        |_, s| s.commit().map(|_| ()),
    );
    for r in results {
        r?;
    }
    let mut sum = StateStoreMetrics::default();
    for s in stores.iter() {
        let m = s.metrics();
        sum.num_keys += m.num_keys;
        sum.memory_used_bytes += m.memory_used_bytes;
        for (name, n) in m.custom_metrics {
            *sum.custom_metrics.entry(name).or_default() += n;
        }
    }
    Ok(sum)
}

/// Test fake (feature `testing`): a store whose commit fails as a crash in the middle of a state
/// commit would.
#[cfg(feature = "testing")]
mod crash {
    use crate::error::Result;
    use crate::state::{StateStore, StateStoreMetrics, TimedPair};

    /// Wraps one partition's store for a batch that must crash in its state commit: the first
    /// partition commits and then fails, the others fail without committing.
    pub(super) struct CrashInCommit<'s> {
        inner: &'s mut dyn StateStore,
        commits: bool,
    }

    impl<'s> CrashInCommit<'s> {
        pub(super) fn new(inner: &'s mut dyn StateStore, commits: bool) -> Self {
            Self { inner, commits }
        }
    }

    impl StateStore for CrashInCommit<'_> {
        fn version(&self) -> u64 {
            self.inner.version()
        }
        fn get(&self, key: &[u8]) -> Option<&[u8]> {
            self.inner.get(key)
        }
        fn put(&mut self, key: &[u8], value: &[u8]) {
            self.inner.put(key, value)
        }
        fn remove(&mut self, key: &[u8]) {
            self.inner.remove(key)
        }
        fn stage_known(&mut self, key: &[u8], value: Option<&[u8]>, committed: bool) {
            self.inner.stage_known(key, value, committed)
        }
        fn load_committed(
            &self,
            each: &mut dyn FnMut(Vec<u8>, Vec<u8>) -> Result<()>,
        ) -> Result<()> {
            self.inner.load_committed(each)
        }
        fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
            self.inner.iter()
        }
        fn scan_by_time(&self, time: i64, inclusive: bool) -> Result<Vec<TimedPair>> {
            self.inner.scan_by_time(time, inclusive)
        }
        fn first_time(&self) -> Result<Option<i64>> {
            self.inner.first_time()
        }
        fn scan_group(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
            self.inner.scan_group(prefix)
        }
        fn num_keys(&self) -> u64 {
            self.inner.num_keys()
        }
        fn commit(&mut self) -> Result<u64> {
            if self.commits {
                self.inner.commit()?;
            }
            Err(crate::testing::injected_crash(
                "in the middle of a state store commit",
            ))
        }
        fn abort(&mut self) {
            self.inner.abort()
        }
        fn metrics(&self) -> StateStoreMetrics {
            self.inner.metrics()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::CheckpointDir;
    use crate::state::StateStoreConf;
    use crate::types::OperatorId;

    fn info(root: &std::path::Path, hooks: TestHooks) -> StateInfo {
        StateInfo {
            checkpoint: CheckpointDir::new(root),
            operator_id: OperatorId(0),
            partitions: 3,
            store_conf: StateStoreConf::default(),
            allow_key_rename: false,
            hooks,
        }
    }

    #[test]
    fn every_partition_commits_its_own_version() {
        let tmp = tempfile::tempdir().unwrap();
        let info = info(tmp.path(), TestHooks::default());
        let mut providers = open_stores(&info, 0..3, None, None, false).unwrap();
        {
            let mut stores = PartitionedStores::open(&mut providers, &mut [], 0..3, 0).unwrap();
            for k in [b"a", b"b", b"c", b"d"] {
                let p = stores.partition_of(k);
                stores[p].put(k, b"1");
            }
            let keys = stores.commit(&info.hooks, BatchId(0)).unwrap().num_keys;
            assert_eq!(keys, 4);
        }
        assert!(providers.iter().all(|p| p.latest_version_on_disk() == 1));
    }

    /// A worker's stores: its partitions' own, the others' standing in, empty; its commit
    /// writes its partitions only, and refuses a change staged in another's.
    #[test]
    fn a_worker_commits_its_own_partitions_and_refuses_another_s() {
        let tmp = tempfile::tempdir().unwrap();
        let info = info(tmp.path(), TestHooks::default());
        let mut all = open_stores(&info, 0..3, None, None, false).unwrap();
        {
            let mut stores = PartitionedStores::open(&mut all, &mut [], 0..3, 0).unwrap();
            for p in 0..3 {
                stores[p].put(b"k", b"v0");
            }
            stores.commit(&info.hooks, BatchId(0)).unwrap();
        }
        // the worker owning partition 1 loads version 1 from the checkpoint alone
        let mut mine = open_stores(&info, 1..2, None, None, false).unwrap();
        let mut others = vec![ElsewhereStore::default(), ElsewhereStore::default()];
        {
            let mut stores = PartitionedStores::open(&mut mine, &mut others, 1..2, 1).unwrap();
            assert_eq!(stores[1].get(b"k"), Some(&b"v0"[..]));
            assert!(stores[0].get(b"k").is_none() && stores[2].is_elsewhere());
            stores[1].put(b"k", b"v1");
            let m = stores.commit(&info.hooks, BatchId(1)).unwrap();
            assert_eq!(m.num_keys, 1);
        }
        assert_eq!(mine[0].latest_version_on_disk(), 2);
        assert_eq!(
            all[0].latest_version_on_disk(),
            1,
            "partition 0 is not the worker's"
        );
        {
            let mut stores = PartitionedStores::open(&mut mine, &mut others, 1..2, 2).unwrap();
            stores[2].put(b"x", b"y");
            let err = stores.commit(&info.hooks, BatchId(2)).unwrap_err();
            assert!(err.to_string().contains("partition 2"), "{err}");
        }
        assert_eq!(mine[0].latest_version_on_disk(), 2, "nothing committed");
    }

    #[cfg(feature = "testing")]
    #[test]
    fn an_injected_crash_commits_the_first_partition_only() {
        let tmp = tempfile::tempdir().unwrap();
        let session = crate::session::Session::builder()
            .config(crate::testing::CRASH_POINT, "inStateCommit:4")
            .build()
            .unwrap();
        let hooks = TestHooks::from_lookup(|k| session.conf(k));
        let info = info(tmp.path(), hooks);
        let mut providers = open_stores(&info, 0..3, None, None, false).unwrap();
        // Batch 3 reads version 0 and commits 1; batch 4 reads 1 and must crash committing 2.
        for (batch, version) in [(3, 0), (4, 1)] {
            let mut stores =
                PartitionedStores::open(&mut providers, &mut [], 0..3, version).unwrap();
            for p in 0..stores.all_mut().len() {
                stores[p].put(b"k", b"v");
            }
            let result = stores.commit(&info.hooks, BatchId(batch));
            if batch == 3 {
                result.unwrap();
                continue;
            }
            let err = result.unwrap_err();
            assert!(err.is(crate::error::class::SLUICE_INJECTED_CRASH), "{err}");
            assert!(
                err.to_string()
                    .contains("injected crash in the middle of a state store commit"),
                "{err}"
            );
        }
        let on_disk: Vec<u64> = providers
            .iter()
            .map(|p| p.latest_version_on_disk())
            .collect();
        assert_eq!(
            on_disk,
            [2, 1, 1],
            "batch 4 committed its first partition only"
        );
    }
}
