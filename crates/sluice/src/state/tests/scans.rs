// State store tests of the indexed reads: scans by time and by key group, against a model, and
// the providers' metrics. Included after `contract.rs` (its helpers), once per `KIND`.

/// Times for the time-index tests: from the value (its first 8 bytes, little-endian; a value
/// starting with `n` has none), or from the key (`k<time>-<n>`).
fn test_times(from_key: bool) -> PairTimes {
    PairTimes {
        times: Arc::new(move |_, keys: &[&[u8]], values: &[&[u8]]| {
            Ok(keys
                .iter()
                .zip(values)
                .map(|(k, v)| test_time(from_key, k, v))
                .collect())
        }),
        from_key,
    }
}

fn test_time(from_key: bool, k: &[u8], v: &[u8]) -> Option<i64> {
    if from_key {
        let text = std::str::from_utf8(k).ok()?;
        text.strip_prefix('k')?.split('-').next()?.parse().ok()
    } else if v.first() == Some(&b'n') {
        None
    } else {
        Some(i64::from_le_bytes(v.get(..8)?.try_into().ok()?))
    }
}

/// What `scan_by_time` must give for `model`.
fn model_scan(
    from_key: bool,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    time: i64,
    inclusive: bool,
) -> Vec<TimedPair> {
    let mut out: Vec<TimedPair> = model
        .iter()
        .filter_map(|(k, v)| {
            let t = test_time(from_key, k, v)?;
            (if inclusive { t <= time } else { t < time }).then(|| TimedPair {
                time: t,
                key: k.clone(),
                value: v.clone(),
            })
        })
        .collect();
    out.sort_by(|a, b| (a.time, &a.key).cmp(&(b.time, &b.key)));
    out
}

#[test]
fn a_store_without_a_time_index_refuses_a_scan_by_time() {
    let root = tempfile::tempdir().unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 10));
    let s = p.get_store(0).unwrap();
    let e = s.scan_by_time(0, true).unwrap_err();
    assert!(e.to_string().contains("keeps no time index"), "{e}");
    assert!(s.first_time().is_err());
}

#[test]
fn a_scan_by_time_reads_the_range_in_time_then_key_order_staged_changes_included() {
    let root = tempfile::tempdir().unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 10)).with_time_index(test_times(false));
    let at = |t: i64, tag: &str| [&t.to_le_bytes()[..], tag.as_bytes()].concat();
    let s = p.get_store(0).unwrap();
    s.put(b"b", &at(20, ""));
    s.put(b"a", &at(20, ""));
    s.put(b"c", &at(10, ""));
    s.put(b"never", b"n");
    let keys = |pairs: Vec<TimedPair>| -> Vec<(i64, String)> {
        pairs
            .into_iter()
            .map(|p| (p.time, String::from_utf8(p.key).unwrap()))
            .collect()
    };
    assert_eq!(
        keys(s.scan_by_time(20, true).unwrap()),
        [(10, "c".into()), (20, "a".into()), (20, "b".into())]
    );
    assert_eq!(keys(s.scan_by_time(20, false).unwrap()), [(10, "c".into())]);
    s.commit().unwrap();
    let s = p.get_store(1).unwrap();
    assert_eq!(s.first_time().unwrap(), Some(10));
    // A key moved to a later time leaves a stale entry behind; the scan skips it.
    s.put(b"c", &at(30, "moved"));
    s.remove(b"a");
    assert_eq!(keys(s.scan_by_time(25, true).unwrap()), [(20, "b".into())]);
    assert_eq!(s.first_time().unwrap(), Some(20));
    s.commit().unwrap();
    let s = p.get_store(2).unwrap();
    assert_eq!(keys(s.scan_by_time(25, true).unwrap()), [(20, "b".into())]);
    let all = s.scan_by_time(i64::MAX, true).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].value, at(30, "moved"));
    // Aborted changes leave the index as it was.
    s.put(b"d", &at(1, ""));
    s.remove(b"b");
    s.abort();
    assert_eq!(s.first_time().unwrap(), Some(20));
    // A restart rebuilds the index from the checkpoint's files.
    drop(p);
    let mut p = provider(root.path(), quiet_conf(10, 10)).with_time_index(test_times(false));
    let s = p.get_store(2).unwrap();
    assert_eq!(
        keys(s.scan_by_time(i64::MAX, true).unwrap()),
        [(20, "b".into()), (30, "c".into())]
    );
    // And so does an older version (a replay).
    let s = p.get_store(1).unwrap();
    assert_eq!(
        keys(s.scan_by_time(i64::MAX, true).unwrap()),
        [(10, "c".into()), (20, "a".into()), (20, "b".into())]
    );
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// 50 random batches on the provider `open` gives (mostly the next version, sometimes a replay
/// of the one before, sometimes aborted; maintenance and restarts in between): `batch` changes
/// each version's store and its model alike, checking what it likes. Returns the store at the
/// last version and its model.
fn random_history(
    seed: u64,
    open: impl Fn(&StateStoreConf) -> DefaultStateStoreProvider,
    mut batch: impl FnMut(&mut Rng, u64, &mut dyn StateStore, &mut Model),
    last: impl FnOnce(&mut dyn StateStore, &Model),
) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let conf = quiet_conf(1 + rng.below(4), 4);
    let mut p = open(&conf);
    let mut versions: Vec<Model> = vec![BTreeMap::new()];
    for step in 0..50 {
        let latest = versions.len() as u64 - 1;
        let base = if latest > 0 && rng.below(6) == 0 {
            latest - 1
        } else {
            latest
        };
        let s = p.get_store(base).unwrap();
        let mut model = versions[base as usize].clone();
        batch(&mut rng, step, s, &mut model);
        if rng.below(6) == 0 {
            s.abort();
            continue;
        }
        let v = s.commit().unwrap();
        versions.truncate(v as usize);
        versions.push(model);
        if rng.below(3) == 0 {
            p.do_maintenance().unwrap();
        }
        if rng.below(7) == 0 {
            drop(p);
            p = open(&conf);
        }
    }
    let latest = versions.len() as u64 - 1;
    last(p.get_store(latest).unwrap(), &versions[latest as usize]);
}

/// Random batches, replays and restarts, with scans by time checked against a model, for
/// times read from values and from keys.
#[test]
fn random_scans_by_time_match_a_model() {
    for from_key in [false, true] {
        for seed in 1..=6u64 {
            let root = tempfile::tempdir().unwrap();
            let open = |conf: &StateStoreConf| {
                provider(root.path(), conf.clone()).with_time_index(test_times(from_key))
            };
            let at = |step: u64| format!("from_key {from_key} seed {seed} step {step}");
            random_history(
                seed,
                open,
                |rng, step, s, model| {
                    for _ in 0..rng.below(12) {
                        let t = rng.below(30) as i64;
                        let key = if from_key {
                            format!("k{t}-{}", rng.below(4)).into_bytes()
                        } else {
                            format!("key{}", rng.below(25)).into_bytes()
                        };
                        match rng.below(5) {
                            0 => {
                                s.remove(&key);
                                model.remove(&key);
                            }
                            1 if !from_key => {
                                s.put(&key, b"none");
                                model.insert(key, b"none".to_vec());
                            }
                            _ => {
                                let value =
                                    [&t.to_le_bytes()[..], &step.to_string().into_bytes()].concat();
                                s.put(&key, &value);
                                model.insert(key, value);
                            }
                        }
                        if rng.below(3) == 0 {
                            let (bound, inclusive) = (rng.below(32) as i64, rng.below(2) == 0);
                            assert_eq!(
                                s.scan_by_time(bound, inclusive).unwrap(),
                                model_scan(from_key, model, bound, inclusive),
                                "{}: scan to {bound}",
                                at(step)
                            );
                        }
                    }
                    assert_eq!(
                        s.first_time().unwrap(),
                        model_scan(from_key, model, i64::MAX, true)
                            .first()
                            .map(|p| p.time),
                        "{}: first time",
                        at(step)
                    );
                    // Evict what is due, as an operator would.
                    if rng.below(2) == 0 {
                        let bound = rng.below(30) as i64;
                        for pair in s.scan_by_time(bound, true).unwrap() {
                            s.remove(&pair.key);
                            model.remove(&pair.key);
                        }
                    }
                },
                |s, model| {
                    assert_eq!(
                        s.scan_by_time(i64::MAX, true).unwrap(),
                        model_scan(from_key, model, i64::MAX, true),
                        "from_key {from_key} seed {seed}: final"
                    );
                },
            );
        }
    }
}

/// Key groups for the tests: a key's group is its text up to and including `|`.
fn test_groups() -> KeyGroups {
    KeyGroups::by_prefix(|k: &[u8]| k.iter().position(|b| *b == b'|').map(|i| i + 1))
}

#[test]
fn a_store_without_key_groups_refuses_a_group_scan() {
    let root = tempfile::tempdir().unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 10));
    let e = p.get_store(0).unwrap().scan_group(b"g|").unwrap_err();
    assert!(e.to_string().contains("keeps no key groups"), "{e}");
}

/// Key groups read from anywhere in the key: a key's group is its text after `|` (so group
/// `1` is a byte prefix of group `11`, and a key `g1` is in no group); a key with `bad` in it
/// does not decode.
fn derived_test_groups() -> KeyGroups {
    KeyGroups::by(|k: &[u8]| {
        if k.windows(3).any(|w| w == b"bad") {
            return Err(crate::error::SluiceError::internal("an undecodable test key"));
        }
        Ok(k.iter().position(|b| *b == b'|').map(|i| k[i + 1..].to_vec()))
    })
}

/// Random batches, replays and restarts, with group scans checked against a model, for
/// groups by prefix and groups read from the key.
#[test]
fn random_group_scans_match_a_model() {
    for prefix in [true, false] {
        let groups = || if prefix { test_groups() } else { derived_test_groups() };
        // A key of group `n`, and the group's name.
        let key = move |n: u64, i: u64| match prefix {
            true => format!("g{n}|{i}").into_bytes(),
            false => format!("g{i}|{n}").into_bytes(),
        };
        let name = move |n: u64| match prefix {
            true => format!("g{n}|").into_bytes(),
            false => n.to_string().into_bytes(),
        };
        let group_of = |model: &Model, g: &[u8]| -> Vec<(Vec<u8>, Vec<u8>)> {
            model
                .iter()
                .filter(|(k, _)| groups().group_of(k).unwrap().as_deref() == Some(g))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        for seed in 1..=6u64 {
            let root = tempfile::tempdir().unwrap();
            let open =
                |conf: &StateStoreConf| provider(root.path(), conf.clone()).with_key_groups(groups());
            random_history(
                seed,
                open,
                |rng, step, s, model| {
                    for _ in 0..rng.below(12) {
                        // Groups 1 .. 12, and keys `g0` .. `g2` in no group (a byte prefix of
                        // the others' keys).
                        let key = match rng.below(9) {
                            0 => format!("g{}", rng.below(3)).into_bytes(),
                            _ => key(1 + rng.below(12), rng.below(5)),
                        };
                        if rng.below(3) == 0 {
                            s.remove(&key);
                            model.remove(&key);
                        } else {
                            let value = format!("v{step}-{}", rng.below(100)).into_bytes();
                            s.put(&key, &value);
                            model.insert(key, value);
                        }
                        let g = name(1 + rng.below(12));
                        assert_eq!(
                            s.scan_group(&g).unwrap(),
                            group_of(model, &g),
                            "prefix {prefix} seed {seed} step {step}: group {}",
                            String::from_utf8_lossy(&g)
                        );
                    }
                },
                |s, model| {
                    for g in 1..=12 {
                        let g = name(g);
                        assert_eq!(
                            s.scan_group(&g).unwrap(),
                            group_of(model, &g),
                            "prefix {prefix} seed {seed}: final"
                        );
                    }
                },
            );
        }
    }
}

/// A key whose group cannot be read fails the commit that stages it, with the reason; the
/// version stays as it was.
#[test]
fn a_key_whose_group_cannot_be_read_fails_the_commit() {
    let root = tempfile::tempdir().unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 10)).with_key_groups(derived_test_groups());
    let s = p.get_store(0).unwrap();
    s.put(b"a|1", b"x");
    s.put(b"bad|1", b"y");
    let e = s.commit().unwrap_err();
    assert!(e.to_string().contains("an undecodable test key"), "{e}");
    s.abort();
    s.put(b"a|1", b"x");
    assert_eq!(s.commit().unwrap(), 1);
    let s = p.get_store(1).unwrap();
    assert_eq!(s.scan_group(b"1").unwrap(), vec![(b"a|1".to_vec(), b"x".to_vec())]);
}

#[test]
fn the_on_disk_provider_reports_sparks_rocksdb_metrics_and_the_in_memory_one_none() {
    let root = tempfile::tempdir().unwrap();
    let mut p = provider(root.path(), quiet_conf(10, 10));
    let s = p.get_store(0).unwrap();
    s.put(b"a", b"12345");
    s.put(b"b", b"x");
    s.commit().unwrap();
    let s = p.get_store(1).unwrap();
    assert_eq!(s.get(b"a"), Some(&b"12345"[..]));
    assert_eq!(s.get(b"zz"), None);
    s.put(b"a", b"6");
    s.commit().unwrap();
    let m = s.metrics().custom_metrics;
    if KIND == StateStoreKind::InMemory {
        assert!(m.is_empty(), "{m:?}");
        return;
    }
    // Two reads (the put of a read key reads nothing more), five bytes read, one pair written.
    assert_eq!(m["rocksdbGetCount"], 2, "{m:?}");
    assert_eq!(m["rocksdbTotalBytesRead"], 5, "{m:?}");
    assert_eq!(m["rocksdbPutCount"], 1, "{m:?}");
    assert_eq!(m["rocksdbTotalBytesWritten"], 8 + 1 + 1, "{m:?}");
    for name in [
        "rocksdbGetLatency",
        "rocksdbCommitWriteBatchLatency",
        "rocksdbCommitFileSyncLatencyMs",
        "rocksdbSstFileSize",
        "rocksdbTotalBytesReadThroughIterator",
    ] {
        assert!(m.contains_key(name), "{name} missing from {m:?}");
    }
    // A new version starts counting again.
    let s = p.get_store(2).unwrap();
    assert_eq!(s.metrics().custom_metrics["rocksdbGetCount"], 0);
}
