//! A store whose operator holds its state: staged changes, commits and reloads.

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
