//! Embedded store candidates for Sluice's on-disk state store provider (issue 19): the access
//! pattern of a streaming aggregation's state. Per batch: for each of B keys, get the old value
//! then put a new one; one commit per batch. Keys are 24 bytes in hash order, values 40 bytes.
use std::time::Instant;

const KEY: usize = 24;
const VALUE: usize = 40;

fn key(i: u64) -> [u8; KEY] {
    let mut k = [0u8; KEY];
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ i;
    k[..8].copy_from_slice(&h.to_be_bytes());
    k[8..16].copy_from_slice(&i.to_be_bytes());
    k
}

fn value(i: u64, round: u64) -> [u8; VALUE] {
    let mut v = [0u8; VALUE];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v[8..16].copy_from_slice(&round.to_le_bytes());
    v
}

fn rss_mib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("VmHWM")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
}

fn dir_size(p: &std::path::Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        n += if m.is_dir() { dir_size(&e.path()) } else { m.len() };
    }
    n
}

trait Store {
    /// One batch: get + put of every key in `keys`, one commit. Returns how many gets found a value.
    fn batch(&mut self, keys: &[u64], round: u64) -> u64;
    fn get(&self, i: u64) -> bool;
}

#[cfg(feature = "fjall")]
mod fj {
    use super::*;
    pub struct F {
        pub db: fjall::Database,
        pub ks: fjall::Keyspace,
    }
    impl F {
        pub fn open(path: &std::path::Path, cache: u64) -> Self {
            let mut b = fjall::Database::builder(path)
                .cache_size(cache)
                .manual_journal_persist(true);
            if let Ok(wb) = std::env::var("FJ_WB") {
                b = b.max_write_buffer_size(Some(wb.parse().unwrap()));
            }
            let db = b.open().unwrap();
            let ks = db
                .keyspace("state", fjall::KeyspaceCreateOptions::default)
                .unwrap();
            F { db, ks }
        }
    }
    impl Store for F {
        fn batch(&mut self, keys: &[u64], round: u64) -> u64 {
            let mut found = 0;
            let mut b = self.db.batch();
            for &i in keys {
                if self.ks.get(key(i)).unwrap().is_some() {
                    found += 1;
                }
                b.insert(&self.ks, key(i), value(i, round));
            }
            b.commit().unwrap();
            found
        }
        fn get(&self, i: u64) -> bool {
            self.ks.get(key(i)).unwrap().is_some()
        }
    }
}

#[cfg(feature = "redb")]
mod rd {
    use super::*;
    use redb::{ReadableDatabase, ReadableTable, TableDefinition};
    const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("state");
    pub struct R {
        pub db: redb::Database,
        pub n: u64,
    }
    impl R {
        pub fn open(path: &std::path::Path, cache: u64) -> Self {
            let db = redb::Database::builder()
                .set_cache_size(cache as usize)
                .create(path.join("state.redb"))
                .unwrap();
            R { db, n: 0 }
        }
    }
    impl Store for R {
        fn batch(&mut self, keys: &[u64], round: u64) -> u64 {
            let mut found = 0;
            let mut tx = self.db.begin_write().unwrap();
            self.n += 1;
            // The checkpoint's delta files are the truth: the local store need not sync every
            // commit (an Immediate one every 10 batches lets redb reclaim pages).
            if self.n % 10 != 0 && std::env::var("REDB_IMMEDIATE").is_err() {
                tx.set_durability(redb::Durability::None).unwrap();
            }
            {
                let mut t = tx.open_table(T).unwrap();
                for &i in keys {
                    let k = key(i);
                    if t.get(&k[..]).unwrap().is_some() {
                        found += 1;
                    }
                    t.insert(&k[..], &value(i, round)[..]).unwrap();
                }
            }
            tx.commit().unwrap();
            found
        }
        fn get(&self, i: u64) -> bool {
            let tx = self.db.begin_read().unwrap();
            let t = tx.open_table(T).unwrap();
            let found = t.get(&key(i)[..]).unwrap().is_some();
            found
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let engine = args.get(1).map(String::as_str).unwrap_or("fjall");
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5_000_000);
    let batch: u64 = 100_000;
    let cache: u64 = 256 << 20;
    let dir = std::path::PathBuf::from(format!("/var/tmp/state-store-candidates-data/{engine}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut s: Box<dyn Store> = match engine {
        #[cfg(feature = "fjall")]
        "fjall" => Box::new(fj::F::open(&dir, cache)),
        #[cfg(feature = "redb")]
        "redb" => Box::new(rd::R::open(&dir, cache)),
        e => panic!("not built with {e}"),
    };
    // Load: n new keys, batch by batch.
    let t = Instant::now();
    let mut commit_ms = Vec::new();
    for b in 0..n / batch {
        let keys: Vec<u64> = (b * batch..(b + 1) * batch).collect();
        let tb = Instant::now();
        s.batch(&keys, 0);
        commit_ms.push(tb.elapsed().as_secs_f64() * 1e3);
    }
    let load = t.elapsed().as_secs_f64();
    // Update: 20 batches of keys spread over the whole key space (get + put each).
    let t = Instant::now();
    let mut found = 0;
    for r in 1..=20u64 {
        let keys: Vec<u64> = (0..batch).map(|j| (j * 7_919 + r * 104_729) % n).collect();
        found += s.batch(&keys, r);
    }
    let update = t.elapsed().as_secs_f64();
    assert_eq!(found, 20 * batch);
    // Point gets.
    let t = Instant::now();
    let mut hits = 0;
    for j in 0..200_000u64 {
        hits += s.get((j * 15_485_863) % n) as u64;
    }
    let gets = t.elapsed().as_secs_f64();
    assert_eq!(hits, 200_000);
    drop(s);
    commit_ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{engine}: {n} keys: load {:.0} K keys/s (batch p50 {:.0} ms, p99 {:.0} ms), update {:.0} K get+put/s, get {:.0} K/s, disk {} MiB, peak RSS {} MiB",
        n as f64 / load / 1e3,
        commit_ms[commit_ms.len() / 2],
        commit_ms[commit_ms.len() * 99 / 100],
        20.0 * batch as f64 / update / 1e3,
        200_000.0 / gets / 1e3,
        dir_size(&dir) >> 20,
        rss_mib()
    );
}
