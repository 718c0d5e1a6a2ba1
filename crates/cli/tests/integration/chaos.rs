//! Process-level chaos: a real `sluice run` process is killed with SIGKILL at random moments,
//! many times, while input keeps arriving; after each kill it is restarted on the same
//! checkpoint. At the end the output must hold every expected row exactly once, and the
//! windowed counts must equal a batch computation. The seed is printed; replay a failure with
//! `SLUICE_CHAOS_SEED=<seed>`. `SLUICE_CHAOS_KILLS` sets the number of kills (default 50).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use arrow::array::{Array, Int64Array, StringArray, TimestampMicrosecondArray};

use crate::support::{add_file, Rng};

const BASE_S: i64 = 1_789_473_600; // 2026-09-15T12:00:00Z

fn iso(s: i64) -> String {
    chrono::DateTime::from_timestamp(s, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `{"id": .., "ts": .., "user": ..}` lines, one per `(id, ts seconds, user)`.
fn json_rows(rows: &[(i64, i64, String)]) -> String {
    rows.iter()
        .map(|(id, ts, user)| {
            format!(
                "{{\"id\": {id}, \"ts\": \"{}\", \"user\": \"{user}\"}}\n",
                iso(*ts)
            )
        })
        .collect()
}

/// The built-in pipeline `pipeline` over `root`; a name ending in `+on-disk` runs it with the
/// on-disk state store provider (Spark's RocksDB provider class).
fn sluice(pipeline: &str, root: &Path, available_now: bool) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    let (pipeline, on_disk) = match pipeline.strip_suffix("+on-disk") {
        Some(p) => (p, true),
        None => (pipeline, false),
    };
    c.args(["run", "--pipeline", pipeline]);
    if on_disk {
        c.args([
            "--conf",
            "spark.sql.streaming.stateStore.providerClass=\
             org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        ]);
    }
    c.arg("--input").arg(root.join("in"));
    c.arg("--output").arg(root.join("out"));
    c.arg("--checkpoint").arg(root.join("ckpt"));
    if available_now {
        c.arg("--available-now");
    }
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c
}

/// Runs the chaos loop; returns the rows written (id, ts seconds, user).
fn chaos(pipeline: &str, root: &Path, seed: u64, kills: usize) -> Vec<(i64, i64, String)> {
    let mut rng = Rng(seed.max(1));
    let mut rows = Vec::new();
    let (mut id, mut ts) = (0i64, BASE_S);
    for k in 0..kills {
        for f in 0..(1 + rng.next() % 2) {
            let mut file = Vec::new();
            for _ in 0..20 {
                file.push((id, ts, format!("u{}", rng.next() % 5)));
                id += 1;
                ts += 1 + (rng.next() % 3) as i64;
            }
            add_file(
                &root.join("in"),
                &format!("{k:04}-{f}.json"),
                &json_rows(&file),
                None,
            );
            rows.extend(file);
        }
        let mut child = sluice(pipeline, root, false).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(30 + rng.next() % 300));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    if pipeline.starts_with("windowed-count") {
        // A far-future event moves the watermark past every window (it is not checked itself).
        add_file(
            &root.join("in"),
            "zzzz-flush.json",
            &json_rows(&[(-1, ts + 86_400, "flush".into())]),
            None,
        );
    }
    // The killed processes did real work: batches were committed between the kills.
    let committed = std::fs::read_dir(root.join("ckpt").join("commits"))
        .map(|d| d.count())
        .unwrap_or(0);
    println!("{pipeline}: {kills} kills, {committed} batches committed by the killed processes");
    assert!(
        committed > 0,
        "no killed process committed a batch: the kills came too early to test anything"
    );
    let status = sluice(pipeline, root, true).status().unwrap();
    assert!(status.success(), "the final available-now run failed");
    rows
}

fn seed() -> u64 {
    crate::support::chaos_seed()
}

fn kills() -> usize {
    std::env::var("SLUICE_CHAOS_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50)
}

#[test]
fn chaos_file_to_parquet_keeps_every_row_exactly_once_across_sigkills() {
    let seed = seed();
    println!("chaos seed {seed} (replay with SLUICE_CHAOS_SEED={seed})");
    let dir = tempfile::tempdir().unwrap();
    let rows = chaos("file-to-parquet", dir.path(), seed, kills());
    let out =
        sluice::sink::file::read_sink_output(&dir.path().join("out"), "parquet", None).unwrap();
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for b in &out {
        let ids = b
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        for i in 0..ids.len() {
            *seen.entry(ids.value(i)).or_default() += 1;
        }
    }
    let dupes: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dupes.is_empty(), "seed {seed}: duplicated ids {dupes:?}");
    let missing: Vec<i64> = rows
        .iter()
        .map(|r| r.0)
        .filter(|id| !seen.contains_key(id))
        .collect();
    assert!(missing.is_empty(), "seed {seed}: missing ids {missing:?}");
    assert_eq!(seen.len(), rows.len(), "seed {seed}");
}

#[test]
fn chaos_windowed_count_equals_a_batch_computation_across_sigkills() {
    windowed_count_chaos("windowed-count", kills());
}

/// The same on the on-disk state store provider: its local cache dies with each process, and
/// every restart rebuilds it from the checkpoint.
#[test]
fn chaos_windowed_count_on_the_on_disk_state_store_across_sigkills() {
    windowed_count_chaos("windowed-count+on-disk", kills().div_ceil(2));
}

fn windowed_count_chaos(pipeline: &str, kills: usize) {
    let seed = seed();
    println!("chaos seed {seed} (replay with SLUICE_CHAOS_SEED={seed})");
    let dir = tempfile::tempdir().unwrap();
    let rows = chaos(pipeline, dir.path(), seed, kills);
    let mut expected: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for (_, ts, user) in &rows {
        *expected
            .entry((ts - ts.rem_euclid(60), user.clone()))
            .or_default() += 1;
    }
    let out =
        sluice::sink::file::read_sink_output(&dir.path().join("out"), "parquet", None).unwrap();
    let mut got: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for b in &out {
        let w = b
            .column_by_name("window_start")
            .unwrap()
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        let u = b
            .column_by_name("user")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let c = b
            .column_by_name("count")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        for i in 0..b.num_rows() {
            let key = (w.value(i) / 1_000_000, u.value(i).to_string());
            assert!(
                got.insert(key.clone(), c.value(i)).is_none(),
                "seed {seed}: window {key:?} emitted twice"
            );
        }
    }
    assert_eq!(got, expected, "seed {seed}");
}
