// State store tests: commits, reloads (deltas, snapshots, after purge), replay, maintenance,
// corruption, and a randomized model check. Included once per kind of committed version
// (`KIND`, see `state/mod.rs`): the contract is the same.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::*;

/// Background maintenance never runs in these tests unless they ask for it.
fn quiet_conf(min_deltas: u64, retain: u64) -> StateStoreConf {
    StateStoreConf {
        kind: KIND,
        local_cache: LocalCacheMemory::default(),
        min_deltas_for_snapshot: min_deltas,
        min_versions_to_retain: retain,
        maintenance_interval: Duration::from_secs(3600),
    }
}

fn provider(root: &Path, conf: StateStoreConf) -> DefaultStateStoreProvider {
    DefaultStateStoreProvider::new(StateStoreId::new(root, 0, 0), conf).unwrap()
}

fn pairs(store: &dyn StateStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    store
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

fn kv(items: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    items
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// File names in the store directory, ordered by version then name.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort_by_key(|n| {
        let v: u64 = n
            .split('.')
            .next()
            .unwrap_or("0")
            .parse()
            .unwrap_or(u64::MAX);
        (v, n.clone())
    });
    names
}

fn names(spec: &[(u64, &str)]) -> Vec<String> {
    spec.iter().map(|(v, ext)| format!("{v}.{ext}")).collect()
}

/// Commits versions `from..=to`, version v putting `k{v}` = `v{v}` (and nothing else).
fn commit_range(p: &mut DefaultStateStoreProvider, from: u64, to: u64) {
    for v in from..=to {
        let s = p.get_store(v - 1).unwrap();
        s.put(format!("k{v:03}").as_bytes(), format!("v{v}").as_bytes());
        assert_eq!(s.commit().unwrap(), v);
    }
}

/// The pairs of version `v` as written by [`commit_range`] from 1.
fn expected_range(v: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    (1..=v)
        .map(|i| {
            (
                format!("k{i:03}").into_bytes(),
                format!("v{i}").into_bytes(),
            )
        })
        .collect()
}

#[test]
fn store_id_dir_is_state_operator_partition() {
    let id = StateStoreId::new("/cp", 3, 7);
    assert_eq!(id.dir(), Path::new("/cp/state/3/7"));
    let d = StateStoreConf::default();
    assert_eq!(
        (
            d.min_deltas_for_snapshot,
            d.min_versions_to_retain,
            d.maintenance_interval
        ),
        (10, 100, Duration::from_secs(60))
    );
}

#[test]
fn commit_then_reload_in_a_new_provider_gives_the_same_pairs() {
    let root = tempfile::tempdir().unwrap();
    {
        let mut p = provider(root.path(), quiet_conf(10, 100));
        let s = p.get_store(0).unwrap();
        assert_eq!(s.version(), 0);
        s.put(b"b", b"2");
        s.put(b"a", b"1");
        assert_eq!(s.commit().unwrap(), 1);
        assert_eq!(s.version(), 1);
        let s = p.get_store(1).unwrap();
        s.put(b"c", b"3");
        s.put(b"a", b"10");
        assert_eq!(s.commit().unwrap(), 2);
    }
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    assert_eq!(files(&dir), names(&[(1, "delta"), (2, "delta")]));

    let mut p = provider(root.path(), quiet_conf(10, 100));
    let s = p.get_store(2).unwrap();
    assert_eq!(s.version(), 2);
    assert_eq!(pairs(s), kv(&[("a", "10"), ("b", "2"), ("c", "3")]));
    assert_eq!(s.num_keys(), 3);
    let s = p.get_store(1).unwrap();
    assert_eq!(pairs(s), kv(&[("a", "1"), ("b", "2")]));
    let s = p.get_store(0).unwrap();
    assert!(pairs(s).is_empty());
}

#[test]
fn remove_survives_reload() {
    let root = tempfile::tempdir().unwrap();
    {
        let mut p = provider(root.path(), quiet_conf(10, 100));
        let s = p.get_store(0).unwrap();
        s.put(b"a", b"1");
        s.put(b"b", b"2");
        s.commit().unwrap();
        let s = p.get_store(1).unwrap();
        s.remove(b"a");
        s.remove(b"never-there");
        s.commit().unwrap();
    }
    let mut p = provider(root.path(), quiet_conf(10, 100));
    let s = p.get_store(2).unwrap();
    assert_eq!(pairs(s), kv(&[("b", "2")]));
    assert_eq!(s.get(b"a"), None);
    assert_eq!(s.num_keys(), 1);
}

#[test]
fn every_version_loads_from_deltas_only() {
    let root = tempfile::tempdir().unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    commit_range(&mut p, 1, 7);
    drop(p);
    let mut p = provider(root.path(), quiet_conf(10, 100));
    // Newest first, so every load is a reload from disk.
    for v in (0..=7).rev() {
        let s = p.get_store(v).unwrap();
        assert_eq!(pairs(s), expected_range(v), "version {v}");
    }
}

#[test]
fn snapshot_then_deltas_and_purge_keep_exactly_what_is_needed() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let conf = quiet_conf(5, 3);
    let mut p = provider(root.path(), conf.clone());

    // Not due yet: 4 deltas < 5.
    commit_range(&mut p, 1, 4);
    p.do_maintenance().unwrap();
    assert_eq!(
        files(&dir),
        names(&[(1, "delta"), (2, "delta"), (3, "delta"), (4, "delta")])
    );

    // Due: snapshot of version 7; nothing purgeable (oldest retained = 5, no snapshot <= 5).
    commit_range(&mut p, 5, 7);
    p.do_maintenance().unwrap();
    let mut expect: Vec<(u64, &str)> = (1..=7).map(|v| (v, "delta")).collect();
    expect.push((7, "snapshot"));
    assert_eq!(files(&dir), names(&expect));

    // Not due again until 5 more deltas; at 12 a snapshot; oldest retained = 10 -> base 7.
    commit_range(&mut p, 8, 11);
    p.do_maintenance().unwrap();
    assert!(!dir.join("11.snapshot").exists());
    commit_range(&mut p, 12, 12);
    p.do_maintenance().unwrap();
    assert_eq!(
        files(&dir),
        names(&[
            (7, "snapshot"),
            (8, "delta"),
            (9, "delta"),
            (10, "delta"),
            (11, "delta"),
            (12, "delta"),
            (12, "snapshot"),
        ])
    );
    // A second run changes nothing.
    p.do_maintenance().unwrap();
    assert_eq!(files(&dir).len(), 7);
    drop(p);

    // Every retained version (10..=12) loads in a new provider; 7..=9 still can (files are
    // there); below the base snapshot nothing can.
    let mut p = provider(root.path(), conf);
    for v in [12, 11, 10, 9, 8, 7] {
        let s = p.get_store(v).unwrap();
        assert_eq!(pairs(s), expected_range(v), "version {v}");
    }
    let err = match p.get_store(6) {
        Err(e) => e,
        Ok(_) => panic!("version 6 must be gone"),
    };
    assert_eq!(err.class(), "STATE_STORE_VERSION_MISSING");
    assert!(err.message().contains("version 6"), "{err}");
    assert!(err.message().contains("1.delta is missing"), "{err}");
    // Version 0 is always the empty map.
    assert!(pairs(p.get_store(0).unwrap()).is_empty());
}

#[test]
fn a_version_loads_from_the_snapshot_alone() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let mut p = provider(root.path(), quiet_conf(3, 1));
    commit_range(&mut p, 1, 3);
    // Remove one key and overwrite another, so the snapshot must apply tombstones and updates.
    let s = p.get_store(3).unwrap();
    s.remove(b"k001");
    s.put(b"k002", b"new");
    s.commit().unwrap();
    p.do_maintenance().unwrap();
    // Keep 1 version: only 4.snapshot is needed.
    assert_eq!(files(&dir), names(&[(4, "snapshot")]));
    drop(p);
    let mut p = provider(root.path(), quiet_conf(3, 1));
    let s = p.get_store(4).unwrap();
    assert_eq!(pairs(s), kv(&[("k002", "new"), ("k003", "v3")]));
    // And commits continue on top of it.
    s.put(b"k005", b"v5");
    s.commit().unwrap();
    drop(p);
    let mut p = provider(root.path(), quiet_conf(3, 1));
    assert_eq!(
        pairs(p.get_store(5).unwrap()),
        kv(&[("k002", "new"), ("k003", "v3"), ("k005", "v5")])
    );
}

#[test]
fn commit_writes_only_the_changed_keys() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    let s = p.get_store(0).unwrap();
    for i in 0..10_000u32 {
        s.put(
            &i.to_be_bytes(),
            format!("value number {i} with some padding").as_bytes(),
        );
    }
    s.commit().unwrap();
    let big = fs::metadata(dir.join("1.delta")).unwrap().len();
    assert!(big > 50_000, "first delta holds all 10k keys: {big} bytes");

    let s = p.get_store(1).unwrap();
    s.put(&5u32.to_be_bytes(), b"changed");
    s.commit().unwrap();
    let small = fs::metadata(dir.join("2.delta")).unwrap().len();
    assert!(
        small < 100,
        "a one-key delta must stay small: {small} bytes"
    );

    let s = p.get_store(2).unwrap();
    s.remove(&6u32.to_be_bytes());
    s.commit().unwrap();
    let tombstone = fs::metadata(dir.join("3.delta")).unwrap().len();
    assert!(
        tombstone < 100,
        "a one-key removal must stay small: {tombstone} bytes"
    );

    // Every version exists, even one without changes: the empty delta is 59 bytes.
    let s = p.get_store(3).unwrap();
    assert_eq!(s.commit().unwrap(), 4);
    assert_eq!(fs::metadata(dir.join("4.delta")).unwrap().len(), 59);

    // The same one-key change on an empty state gives a delta of the same size.
    let root2 = tempfile::tempdir().unwrap();
    let mut q = provider(root2.path(), quiet_conf(10, 100));
    let s = q.get_store(0).unwrap();
    s.put(&5u32.to_be_bytes(), b"changed");
    s.commit().unwrap();
    let alone = fs::metadata(StateStoreId::new(root2.path(), 0, 0).dir().join("1.delta"))
        .unwrap()
        .len();
    assert_eq!(small, alone);

    drop(p);
    let mut p = provider(root.path(), quiet_conf(10, 100));
    let s = p.get_store(4).unwrap();
    assert_eq!(s.num_keys(), 9_999);
    assert_eq!(s.get(&5u32.to_be_bytes()), Some(&b"changed"[..]));
    assert_eq!(s.get(&6u32.to_be_bytes()), None);
}

#[test]
fn a_replayed_batch_overwrites_its_delta() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    {
        let mut p = provider(root.path(), quiet_conf(10, 100));
        let s = p.get_store(0).unwrap();
        s.put(b"a", b"1");
        s.commit().unwrap();
        let s = p.get_store(1).unwrap();
        s.put(b"b", b"first attempt");
        s.commit().unwrap();
        // The batch failed after its state commit (no commits/1): it is replayed from version
        // 1, in this provider (reload from disk, since memory is at 2) ...
        let s = p.get_store(1).unwrap();
        assert_eq!(pairs(s), kv(&[("a", "1")]));
        s.put(b"c", b"second attempt");
        assert_eq!(s.commit().unwrap(), 2);
        assert_eq!(pairs(s), kv(&[("a", "1"), ("c", "second attempt")]));
    }
    {
        // ... and again after a restart.
        let mut p = provider(root.path(), quiet_conf(10, 100));
        assert_eq!(
            pairs(p.get_store(2).unwrap()),
            kv(&[("a", "1"), ("c", "second attempt")])
        );
        let s = p.get_store(1).unwrap();
        s.put(b"d", b"third attempt");
        s.commit().unwrap();
    }
    let mut p = provider(root.path(), quiet_conf(10, 100));
    assert_eq!(
        pairs(p.get_store(2).unwrap()),
        kv(&[("a", "1"), ("d", "third attempt")])
    );
    assert_eq!(files(&dir), names(&[(1, "delta"), (2, "delta")]));
}

#[test]
fn rewriting_a_version_deletes_the_abandoned_future() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let mut p = provider(root.path(), quiet_conf(2, 100));
    commit_range(&mut p, 1, 5);
    p.do_maintenance().unwrap();
    assert!(dir.join("5.snapshot").exists());
    // Rewrite version 3: deltas 4, 5 and snapshot 5 belong to a history that no longer is.
    let s = p.get_store(2).unwrap();
    s.put(b"x", b"y");
    s.commit().unwrap();
    assert_eq!(
        files(&dir),
        names(&[(1, "delta"), (2, "delta"), (3, "delta")])
    );
    drop(p);
    let mut p = provider(root.path(), quiet_conf(2, 100));
    let mut expect = expected_range(2);
    expect.push((b"x".to_vec(), b"y".to_vec()));
    assert_eq!(pairs(p.get_store(3).unwrap()), expect);
    let err = p.get_store(4).err().map(|e| e.class());
    assert_eq!(err, Some("STATE_STORE_VERSION_MISSING"));
}

#[test]
fn a_truncated_or_corrupt_delta_is_state_store_corrupt_naming_the_file() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    commit_range(&mut p, 1, 3);
    drop(p);
    let path = dir.join("2.delta");
    let good = fs::read(&path).unwrap();

    fs::write(&path, &good[..good.len() - 3]).unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    let err = p.get_store(3).err().expect("truncated delta must fail");
    assert_eq!(err.class(), "STATE_STORE_CORRUPT");
    assert_eq!(err.fault(), crate::error::Fault::Checkpoint);
    assert!(err.message().contains(&path.display().to_string()), "{err}");
    assert!(err.message().contains("new checkpoint location"), "{err}");
    assert!(err.message().contains("truncated"), "{err}");

    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xFF;
    fs::write(&path, &bad).unwrap();
    let err = p.get_store(3).err().expect("corrupt delta must fail");
    assert_eq!(err.class(), "STATE_STORE_CORRUPT");
    assert!(err.message().contains("2.delta"), "{err}");

    fs::write(&path, b"").unwrap();
    let err = p.get_store(2).err().expect("empty delta must fail");
    assert_eq!(err.class(), "STATE_STORE_CORRUPT");

    // A delta renamed to another version is caught by its header.
    fs::write(&path, fs::read(dir.join("3.delta")).unwrap()).unwrap();
    let err = p.get_store(3).err().expect("misnamed delta must fail");
    assert_eq!(err.class(), "STATE_STORE_CORRUPT");
    assert!(err.message().contains("version 3, not 2"), "{err}");

    // Restored: loads again. The versions that do not need it never failed.
    fs::write(&path, &good).unwrap();
    assert_eq!(pairs(p.get_store(3).unwrap()), expected_range(3));
    assert_eq!(pairs(p.get_store(1).unwrap()), expected_range(1));
}

#[test]
fn a_corrupt_snapshot_is_reported_by_load_and_by_maintenance() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let mut p = provider(root.path(), quiet_conf(2, 100));
    commit_range(&mut p, 1, 4);
    p.do_maintenance().unwrap();
    let snap = dir.join("4.snapshot");
    let len = fs::metadata(&snap).unwrap().len();
    fs::write(&snap, &fs::read(&snap).unwrap()[..(len as usize) - 1]).unwrap();
    drop(p);
    let mut p = provider(root.path(), quiet_conf(2, 100));
    let err = p.get_store(4).err().expect("corrupt snapshot must fail");
    assert_eq!(err.class(), "STATE_STORE_CORRUPT");
    assert!(err.message().contains("4.snapshot"), "{err}");
    commit_range(&mut p, 1, 6); // versions 1..=3 load from deltas; 4 is rewritten
    assert!(
        !snap.exists(),
        "rewriting version 4 drops its stale snapshot"
    );
    p.do_maintenance().unwrap();
    assert_eq!(pairs(p.get_store(6).unwrap()), expected_range(6));
}

#[test]
fn a_missing_delta_is_state_store_version_missing() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    commit_range(&mut p, 1, 3);
    drop(p);
    fs::remove_file(dir.join("2.delta")).unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    let err = p.get_store(3).err().expect("missing delta must fail");
    assert_eq!(err.class(), "STATE_STORE_VERSION_MISSING");
    assert_eq!(err.fault(), crate::error::Fault::Checkpoint);
    assert!(err.message().contains("state version 3"), "{err}");
    assert!(err.message().contains("2.delta is missing"), "{err}");
    assert!(err.message().contains(&dir.display().to_string()), "{err}");
    // Version 1 does not need it.
    assert_eq!(pairs(p.get_store(1).unwrap()), expected_range(1));
    // A version that was never written.
    let err = p.get_store(9).err().expect("version 9 was never written");
    assert_eq!(err.class(), "STATE_STORE_VERSION_MISSING");
    assert!(err.message().contains("newest version there is 3"), "{err}");
}

#[test]
fn reads_see_staged_changes_and_abort_drops_them() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    let s = p.get_store(0).unwrap();
    s.put(b"a", b"1");
    s.put(b"c", b"3");
    s.commit().unwrap();

    let s = p.get_store(1).unwrap();
    s.put(b"b", b"2");
    s.put(b"a", b"10");
    s.remove(b"c");
    assert_eq!(s.get(b"a"), Some(&b"10"[..]));
    assert_eq!(s.get(b"b"), Some(&b"2"[..]));
    assert_eq!(s.get(b"c"), None);
    assert_eq!(s.num_keys(), 2);
    assert_eq!(pairs(s), kv(&[("a", "10"), ("b", "2")]));
    // Put again after a removal, and remove a key only put in this version.
    s.put(b"c", b"30");
    s.put(b"d", b"4");
    s.remove(b"d");
    assert_eq!(pairs(s), kv(&[("a", "10"), ("b", "2"), ("c", "30")]));
    assert_eq!(s.num_keys(), 3);

    s.abort();
    assert_eq!(s.version(), 1);
    assert_eq!(pairs(s), kv(&[("a", "1"), ("c", "3")]));
    assert_eq!(s.num_keys(), 2);
    assert_eq!(files(&dir), names(&[(1, "delta")]));

    // get_store on the same version also starts clean.
    let s = p.get_store(1).unwrap();
    s.put(b"z", b"26");
    let s = p.get_store(1).unwrap();
    assert_eq!(s.get(b"z"), None);
    assert_eq!(pairs(s), kv(&[("a", "1"), ("c", "3")]));
}

#[test]
fn metrics_count_the_last_commit() {
    let root = tempfile::tempdir().unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    let s = p.get_store(0).unwrap();
    s.put(b"a", b"1");
    s.put(b"b", b"2");
    s.put(b"a", b"11");
    let m = s.metrics();
    assert_eq!((m.num_keys, m.num_updated, m.num_removed), (2, 3, 0));
    s.commit().unwrap();
    let m = s.metrics();
    assert_eq!((m.num_keys, m.num_updated, m.num_removed), (2, 3, 0));
    // 2 entries: key + value bytes + overhead each, in memory; none on disk (the local
    // cache's memory is its block cache, shared by every store).
    let held = match KIND {
        StateStoreKind::InMemory => (1 + 2) + (1 + 1) + 2 * provider::ENTRY_OVERHEAD,
        StateStoreKind::OnDisk => 0,
    };
    assert_eq!(m.memory_used_bytes, held);

    let s = p.get_store(1).unwrap();
    assert_eq!(s.metrics().num_updated, 0);
    s.remove(b"a");
    s.remove(b"nope");
    s.put(b"c", b"3");
    s.commit().unwrap();
    let m = s.metrics();
    assert_eq!((m.num_keys, m.num_updated, m.num_removed), (2, 1, 2));
    if KIND == StateStoreKind::InMemory {
        assert_eq!(
            m.memory_used_bytes,
            (1 + 1) + (1 + 1) + 2 * provider::ENTRY_OVERHEAD
        );
    }

    let s = p.get_store(2).unwrap();
    s.put(b"d", b"4");
    s.abort();
    let m = s.metrics();
    assert_eq!((m.num_keys, m.num_updated, m.num_removed), (2, 0, 0));
}

#[test]
fn a_failed_commit_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    // The store directory's parent is a file: the delta cannot be written.
    fs::write(root.path().join("state"), b"not a directory").unwrap();
    let s = p.get_store(0).unwrap();
    s.put(b"a", b"1");
    let err = s.commit().unwrap_err();
    assert_eq!(err.class(), "IO_ERROR");
    assert!(
        err.message().contains("committing state version 1"),
        "{err}"
    );
    assert_eq!(s.version(), 0);
    assert_eq!(s.get(b"a"), Some(&b"1"[..]), "staged changes stay");
    fs::remove_file(root.path().join("state")).unwrap();
    assert_eq!(s.commit().unwrap(), 1);
}

#[test]
fn stale_temp_files_are_removed_on_open_and_ignored_by_loads() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    commit_range(&mut p, 1, 2);
    drop(p);
    fs::write(dir.join(".3.delta.1234.tmp"), b"partial").unwrap();
    fs::write(dir.join("notes.txt"), b"someone else's").unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 100));
    assert_eq!(pairs(p.get_store(2).unwrap()), expected_range(2));
    assert_eq!(
        files(&dir),
        vec![
            "1.delta".to_string(),
            "2.delta".to_string(),
            "notes.txt".to_string()
        ]
    );
}

#[test]
fn background_maintenance_snapshots_after_commits() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let conf = StateStoreConf {
        kind: KIND,
        local_cache: LocalCacheMemory::default(),
        min_deltas_for_snapshot: 3,
        min_versions_to_retain: 2,
        maintenance_interval: Duration::ZERO,
    };
    let mut p = provider(root.path(), conf.clone());
    commit_range(&mut p, 1, 2);
    p.wait_for_background_maintenance();
    assert!(!dir.join("2.snapshot").exists(), "not due after 2 deltas");
    commit_range(&mut p, 3, 3);
    p.wait_for_background_maintenance();
    assert!(dir.join("3.snapshot").exists());
    commit_range(&mut p, 4, 9);
    p.wait_for_background_maintenance();
    // Whatever the timing, every retained version loads.
    drop(p);
    let mut p = provider(root.path(), conf);
    for v in [9, 8] {
        assert_eq!(
            pairs(p.get_store(v).unwrap()),
            expected_range(v),
            "version {v}"
        );
    }
}

#[test]
fn background_maintenance_waits_for_the_interval() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let mut p = provider(root.path(), quiet_conf(1, 100));
    commit_range(&mut p, 1, 5);
    p.wait_for_background_maintenance();
    assert!(files(&dir).iter().all(|n| n.ends_with(".delta")));
}

#[test]
fn maintain_in_background_runs_when_due_without_blocking() {
    let root = tempfile::tempdir().unwrap();
    let dir = StateStoreId::new(root.path(), 0, 0).dir();
    let mut p = provider(root.path(), quiet_conf(3, 1));
    commit_range(&mut p, 1, 2);
    p.maintain_in_background();
    p.wait_for_background_maintenance();
    assert_eq!(files(&dir), names(&[(1, "delta"), (2, "delta")]));
    commit_range(&mut p, 3, 3);
    p.maintain_in_background();
    p.wait_for_background_maintenance();
    assert_eq!(files(&dir), names(&[(3, "snapshot")]));
    assert_eq!(pairs(p.get_store(3).unwrap()), expected_range(3));
}

/// A tiny deterministic generator (xorshift) for the model test.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random batches, replays, restarts and maintenance against a `BTreeMap` model of every
/// version.
#[test]
fn random_histories_match_a_model() {
    for seed in 1..=8u64 {
        let root = tempfile::tempdir().unwrap();
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let conf = quiet_conf(1 + rng.below(4), 2 + rng.below(5));
        let retain = conf.min_versions_to_retain;
        let mut p = provider(root.path(), conf.clone());
        // versions[v] = the model of version v.
        let mut versions: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = vec![BTreeMap::new()];
        // No version below this may be loadable any more (a purge ran with a later latest).
        let mut floor = 0u64;
        for step in 0..60 {
            let latest = versions.len() as u64 - 1;
            // Mostly the next batch; sometimes a replay of an older retained version.
            let lo = floor.max((latest + 1).saturating_sub(retain));
            let base = if latest > lo && rng.below(5) == 0 {
                lo + rng.below(latest - lo)
            } else {
                latest
            };
            let s = p.get_store(base).unwrap();
            let mut model = versions[base as usize].clone();
            assert_eq!(
                pairs(s),
                model.clone().into_iter().collect::<Vec<_>>(),
                "seed {seed} step {step}: version {base}"
            );
            for _ in 0..rng.below(8) {
                let key = format!("key{}", rng.below(20)).into_bytes();
                if rng.below(3) == 0 {
                    s.remove(&key);
                    model.remove(&key);
                } else {
                    let value = format!("v{}-{}", step, rng.below(1000)).into_bytes();
                    s.put(&key, &value);
                    model.insert(key, value);
                }
                assert_eq!(s.num_keys(), model.len() as u64);
            }
            if rng.below(5) == 0 {
                s.abort();
                continue;
            }
            let v = s.commit().unwrap();
            assert_eq!(v, base + 1);
            versions.truncate(v as usize);
            versions.push(model);
            if rng.below(3) == 0 {
                p.do_maintenance().unwrap();
                floor = floor.max((v + 1).saturating_sub(retain));
            }
            if rng.below(7) == 0 {
                drop(p);
                p = provider(root.path(), conf.clone());
            }
        }
        // Finally: every retained version loads correctly in a fresh provider.
        p.do_maintenance().unwrap();
        drop(p);
        let mut p = provider(root.path(), conf.clone());
        let latest = versions.len() as u64 - 1;
        for v in floor.max((latest + 1).saturating_sub(retain))..=latest {
            let s = p.get_store(v).unwrap();
            assert_eq!(
                pairs(s),
                versions[v as usize].clone().into_iter().collect::<Vec<_>>(),
                "seed {seed}: final version {v}"
            );
        }
    }
}

#[test]
fn a_read_only_provider_loads_but_never_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let id = StateStoreId::new(tmp.path(), 0, 0);
    let eager = StateStoreConf {
        kind: KIND,
        local_cache: LocalCacheMemory::default(),
        min_deltas_for_snapshot: 1,
        min_versions_to_retain: 1,
        ..Default::default()
    };
    {
        let mut p = DefaultStateStoreProvider::new(id.clone(), eager.clone()).unwrap();
        let s = p.get_store(0).unwrap();
        s.put(b"a", b"1");
        s.commit().unwrap();
    }
    let stale = id.dir().join(".2.delta.0f3c.tmp");
    fs::write(&stale, b"partial").unwrap();
    let mut ro = DefaultStateStoreProvider::open_read_only(id.clone(), eager.clone()).unwrap();
    assert!(ro.is_read_only());
    let s = ro.get_store(1).unwrap();
    assert_eq!(s.get(b"a"), Some(&b"1"[..]));
    s.put(b"b", b"2");
    assert_eq!(s.commit().unwrap_err().class(), "STATE_STORE_READ_ONLY");
    assert_eq!(
        ro.do_maintenance().unwrap_err().class(),
        "STATE_STORE_READ_ONLY"
    );
    ro.maintain_in_background();
    ro.wait_for_background_maintenance();
    drop(ro);
    assert!(stale.exists(), "temporary files are left alone");
    let files = files::FileIndex::list(&id.dir()).unwrap();
    assert_eq!(files.deltas, std::collections::BTreeSet::from([1]));
    assert!(files.snapshots.is_empty(), "no maintenance ran");
    // Nothing is created for a store that does not exist.
    let missing = StateStoreId::new(tmp.path().join("none"), 0, 0);
    let mut ro = DefaultStateStoreProvider::open_read_only(missing, eager).unwrap();
    assert_eq!(ro.get_store(0).unwrap().iter().count(), 0);
    assert!(!tmp.path().join("none").exists());
}

/// Issue 18 part 6: a state file copied from another partition's folder was read as this
/// partition's (its keys silently mixed in). The header names the store; the copy is refused,
/// naming both stores, and putting back the store's own file reads again.
#[test]
fn a_state_file_from_another_partition_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let mut stores = Vec::new();
    for partition in 0..2u32 {
        let id = StateStoreId::new(root.path(), 0, partition);
        let mut p = DefaultStateStoreProvider::new(id.clone(), quiet_conf(10, 100)).unwrap();
        let s = p.get_store(0).unwrap();
        s.put(format!("key-of-{partition}").as_bytes(), b"v");
        s.commit().unwrap();
        stores.push(id);
    }
    let own = stores[0].dir().join("1.delta");
    let saved = fs::read(&own).unwrap();
    fs::copy(stores[1].dir().join("1.delta"), &own).unwrap();
    let mut p = DefaultStateStoreProvider::new(stores[0].clone(), quiet_conf(10, 100)).unwrap();
    let e = p.get_store(1).err().unwrap();
    assert_eq!(e.class(), "STATE_STORE_CORRUPT", "{e}");
    assert!(e.message().contains("operator 0, partition 1"), "{e}");
    assert!(e.message().contains("partition 0"), "{e}");
    fs::write(&own, saved).unwrap();
    let mut p = DefaultStateStoreProvider::new(stores[0].clone(), quiet_conf(10, 100)).unwrap();
    let s = p.get_store(1).unwrap();
    assert_eq!(pairs(s), kv(&[("key-of-0", "v")]));
}
