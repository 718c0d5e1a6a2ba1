//! Aggregation state held by the operator between batches (the in-memory provider, stores
//! `held_by_operator`) against the same aggregation with its state read from and written back
//! to the store every batch (the on-disk provider, which never holds it in the operator): the
//! same rows batch by batch, the same progress counts, and the same delta files byte for byte,
//! across restarts and in both output modes.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sluice::{OutputMode, Session, Trigger};

use crate::support::{add_file, dirs, impressions_and_clicks, Dirs};

const ROCKSDB: &str = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider";

/// Each batch: (batch id, its rows sorted), and its progress counts (keys in state, updated,
/// removed, dropped by the watermark).
type Batches = Vec<(u64, Vec<String>)>;
type Counts = Vec<(i64, i64, i64, i64, i64)>;

fn random_files(seed: u64, files: usize, rows: usize) -> Vec<String> {
    let mut next = xorshift(seed);
    let base = 1_789_473_600i64; // 2026-09-15T12:00:00Z
    let mut t = 0i64;
    (0..files)
        .map(|_| {
            let mut f = String::new();
            for _ in 0..rows {
                t += (next() % 30) as i64;
                // Some rows up to 15 minutes late: behind the watermark, or in open windows.
                let ts = base + t - (next() % 900) as i64;
                let user = ["a", "b", "c", "d", "e"][(next() % 5) as usize];
                let v = match next() % 7 {
                    0 => "null".to_string(),
                    n => format!("{}", (next() % 2000) as i64 - 1000 + n as i64),
                };
                let amount = (next() % 1000) as f64 / 4.0;
                f.push_str(&format!(
                    "{{\"ts\": {ts}, \"user\": \"{user}\", \"v\": {v}, \"amount\": {amount}}}\n"
                ));
            }
            f
        })
        .collect()
}

/// Runs the windowed aggregation by `user` (an expression of it) over `files` (one per
/// batch), the query restarted after files 3 and 6, with the state store `provider` (default:
/// in memory, held by the operator).
fn run(
    provider: Option<&str>,
    (mode, user): (OutputMode, &str),
    files: &[String],
    d: &Dirs,
) -> (Batches, Counts) {
    let (input, checkpoint) = (&d.input, &d.checkpoint);
    let seen: Arc<Mutex<Batches>> = Arc::default();
    let mut counts = Vec::new();
    let mut next = 0usize;
    for run in [&files[..3], &files[3..6], &files[6..]] {
        let s = session_on(provider);
        s.read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING, v BIGINT, amount DOUBLE")
            .unwrap()
            .load(input.display().to_string())
            .unwrap()
            .with_watermark("ts", "10 minutes")
            .unwrap()
            .create_or_replace_temp_view("ev")
            .unwrap();
        let writer = s
            .sql(&format!(
                "SELECT window, {user} AS u, count(*) AS n, count(v) AS nv, sum(v) AS total, \
                 min(v) AS lo, max(v) AS hi, avg(v) AS mean, sum(amount) AS amount, \
                 max(ts) AS last FROM ev GROUP BY window(ts, '5 minutes'), {user}"
            ))
            .unwrap()
            .write_stream()
            .output_mode(mode)
            .option("checkpointLocation", checkpoint.display())
            .trigger(Trigger::default());
        let q = start_capturing(writer, &seen);
        for f in run {
            add_file(input, &format!("{next:03}.json"), f, next as u64);
            next += 1;
            q.process_all_available().unwrap();
        }
        q.stop();
        counts.extend(state_counts(&q));
    }
    let out = seen.lock().unwrap().clone();
    (out, counts)
}

/// A session with three shuffle partitions and the state store `provider` (default: in
/// memory, the state held by the operator).
fn session_on(provider: Option<&str>) -> Session {
    let mut b = Session::builder().shuffle_partitions(3);
    if let Some(p) = provider {
        b = b.config("spark.sql.streaming.stateStore.providerClass", p);
    }
    b.build().unwrap()
}

/// Starts `writer`, each batch's rows captured into `seen`, sorted.
fn start_capturing(
    writer: sluice::query::DataStreamWriter,
    seen: &Arc<Mutex<Batches>>,
) -> sluice::StreamingQuery {
    let sink = seen.clone();
    writer
        .foreach_batch(move |data, id| {
            sink.lock()
                .unwrap()
                .push((id, sorted_rows(&data.concat()?)));
            Ok(())
        })
        .start()
        .unwrap()
}

/// A deterministic pseudo-random sequence (xorshift).
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.max(1);
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// A batch's rows as text, sorted.
fn sorted_rows(b: &arrow::array::RecordBatch) -> Vec<String> {
    let mut rows: Vec<String> = (0..b.num_rows())
        .map(|i| {
            b.columns()
                .iter()
                .map(|c| sluice::sink::console::format_cell(c, i).unwrap())
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    rows.sort();
    rows
}

/// The state counts of every progress of `q`.
fn state_counts(q: &sluice::StreamingQuery) -> Counts {
    q.recent_progress()
        .iter()
        .filter_map(|p| {
            let o = p.state_operators.first()?;
            Some((
                p.batch_id,
                o.num_rows_total,
                o.num_rows_updated,
                o.num_rows_removed,
                o.num_rows_dropped_by_watermark,
            ))
        })
        .collect()
}

/// Both checkpoints hold the same delta files (9 batches, 3 partitions), byte for byte.
fn assert_same_deltas(label: &str, held: &Dirs, stored: &Dirs) {
    let (a, b) = (deltas(&held.checkpoint), deltas(&stored.checkpoint));
    assert!(a.len() >= 3 * 9, "{label}: a delta per partition and batch");
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{label}: the same delta files"
    );
    for (name, bytes) in &a {
        assert!(bytes == &b[name], "{label}: {name} differs");
    }
}

/// Every delta file of operator 0, by partition and name, with its bytes.
fn deltas(checkpoint: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let state = checkpoint.join("state").join("0");
    for p in std::fs::read_dir(&state).unwrap() {
        let p = p.unwrap().path();
        if !p.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&p).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "delta") {
                let name = format!(
                    "{}/{}",
                    p.file_name().unwrap().to_string_lossy(),
                    f.file_name().unwrap().to_string_lossy()
                );
                out.insert(name, std::fs::read(&f).unwrap());
            }
        }
    }
    out
}

#[test]
fn held_aggregation_state_writes_what_the_store_held_state_writes() {
    // A key of a struct is grouped by its encoded bytes, the others first by DataFusion's
    // group values.
    for (seed, mode, user) in [
        (5u64, OutputMode::Update, "user"),
        (17, OutputMode::Append, "user"),
        (29, OutputMode::Update, "named_struct('name', user)"),
    ] {
        let files = random_files(seed, 9, 40);
        let (held_dir, stored_dir) = (dirs(), dirs());
        let held = run(None, (mode, user), &files, &held_dir);
        let stored = run(Some(ROCKSDB), (mode, user), &files, &stored_dir);
        assert!(
            held.0.iter().filter(|(_, rows)| !rows.is_empty()).count() >= 5,
            "seed {seed}: rows were emitted in most batches: {:?}",
            held.0
        );
        assert!(
            held.1.iter().any(|c| c.3 > 0) && held.1.iter().any(|c| c.4 > 0),
            "seed {seed}: groups were evicted and late rows dropped: {:?}",
            held.1
        );
        assert_eq!(held.0, stored.0, "seed {seed} {mode:?}: the rows");
        assert_eq!(
            held.1, stored.1,
            "seed {seed} {mode:?}: the progress counts"
        );
        assert_same_deltas(&format!("seed {seed}"), &held_dir, &stored_dir);
    }
}

/// Impressions and clicks of a few ads, a file of each per batch, some clicks late.
fn random_join_files(seed: u64, files: usize, rows: usize) -> Vec<(String, String)> {
    let mut next = xorshift(seed);
    let base = 1_793_707_200i64; // 2026-11-03T12:00:00Z
    let mut t = 0i64;
    (0..files)
        .map(|_| {
            let (mut imp, mut clk) = (String::new(), String::new());
            for _ in 0..rows {
                t += (next() % 40) as i64;
                let ad = format!("a{}", next() % 12);
                imp.push_str(&format!("{{\"ad\": \"{ad}\", \"it\": {}}}\n", base + t));
                // A click 0–20 minutes after some impression, or one with no ad.
                let ad = match next() % 9 {
                    0 => "null".to_string(),
                    _ => format!("\"a{}\"", next() % 12),
                };
                let ct = base + t + (next() % 1200) as i64 - 300;
                clk.push_str(&format!("{{\"ad\": {ad}, \"ct\": {ct}}}\n"));
            }
            (imp, clk)
        })
        .collect()
}

/// A stream-stream join of `kind` over `files` (a pair per batch), restarted after pairs 3 and
/// 6, with the state store `provider`. Each run's three pairs are in place before it starts and
/// it runs them available-now, one file of each side a batch: a running query could take an
/// impressions file in a batch before its clicks file was added, and batch differently.
fn run_join(
    provider: Option<&str>,
    kind: &str,
    files: &[(String, String)],
    d: &Dirs,
) -> (Batches, Counts) {
    let (imp, clk) = (d.input.join("imp"), d.input.join("clk"));
    let seen: Arc<Mutex<Batches>> = Arc::default();
    let mut counts = Vec::new();
    let mut next = 0usize;
    let select = if kind == "LEFT SEMI" {
        "i.ad, i.it"
    } else {
        "i.ad, i.it, c.ad AS cad, c.ct"
    };
    for run in [&files[..3], &files[3..6], &files[6..]] {
        let s = session_on(provider);
        impressions_and_clicks(&s, &imp, &clk, &[("maxFilesPerTrigger", "1")]);
        let writer = s
            .sql(&format!(
                "SELECT {select} FROM i {kind} JOIN c ON i.ad = c.ad \
                 AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES"
            ))
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Append)
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow);
        for (i, c) in run {
            add_file(&imp, &format!("{next:03}.json"), i, 2 * next as u64);
            add_file(&clk, &format!("{next:03}.json"), c, 2 * next as u64 + 1);
            next += 1;
        }
        let q = start_capturing(writer, &seen);
        q.await_termination().unwrap();
        counts.extend(state_counts(&q));
    }
    let out = seen.lock().unwrap().clone();
    (out, counts)
}

#[test]
fn held_join_state_writes_what_the_store_held_state_writes() {
    for (seed, kind) in [
        (3u64, "INNER"),
        (8, "LEFT OUTER"),
        (13, "FULL OUTER"),
        (21, "LEFT SEMI"),
    ] {
        let files = random_join_files(seed, 9, 30);
        let (held_dir, stored_dir) = (dirs(), dirs());
        let held = run_join(None, kind, &files, &held_dir);
        let stored = run_join(Some(ROCKSDB), kind, &files, &stored_dir);
        assert!(
            held.0.iter().map(|(_, r)| r.len()).sum::<usize>() >= 20,
            "{kind}: pairs were emitted: {:?}",
            held.0
        );
        assert!(
            held.1.iter().any(|c| c.3 > 0),
            "{kind}: rows were evicted: {:?}",
            held.1
        );
        if kind.contains("OUTER") {
            assert!(
                held.0
                    .iter()
                    .flat_map(|(_, r)| r)
                    .any(|r| r.ends_with("|null|null")),
                "{kind}: evicted impressions without a click were emitted with nulls"
            );
        }
        assert_eq!(held.0, stored.0, "{kind}: the rows");
        assert_eq!(held.1, stored.1, "{kind}: the progress counts");
        assert_same_deltas(kind, &held_dir, &stored_dir);
    }
}
