//! Soaks for issue 18 parts 4 and 11, ignored in `cargo test` (minutes each) and run by
//! `benches/log_soak.sh` and `benches/listing_scale.sh`: the checkpoint and the manifest stay
//! proportional to their live entries over many one-row batches, and a trigger's listing cost
//! follows the new files, not all files.

use std::path::Path;
use std::time::Instant;

use crate::support::{committed_rows, dirs, session};

/// Bytes under `dir` (files only).
fn du(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let md = e.metadata().unwrap();
        total += if md.is_dir() { du(&e.path()) } else { md.len() };
    }
    total
}

fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// One-line JSON files numbered `range` in `dir`, oldest first (modified a day ago, a
/// millisecond apart).
fn one_row_files(dir: &Path, range: std::ops::Range<usize>) {
    let base = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    for i in range {
        let path = dir.join(format!("{i:07}.json"));
        std::fs::write(&path, format!("{{\"user\": \"u{i}\", \"amount\": 20.0}}\n")).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(base + std::time::Duration::from_millis(i as u64))
            .unwrap();
    }
}

/// `SLUICE_SOAK_BATCHES` one-row batches (100,000 by default) of one query, file source to
/// parquet, restarted after each tenth: after each, the checkpoint's size and the bytes per
/// entry of the source log and the manifest. Both logs list every file (all live: Spark keeps
/// them too), so they grow with the files, by a constant per entry; everything else in the
/// checkpoint stays flat. The cleanup delay is 0 so that files superseded during the soak are
/// deleted during it (Spark's default, 10 minutes, only postpones the same deletions).
#[test]
#[ignore = "a soak of minutes: benches/log_soak.sh"]
fn log_soak_one_row_batches_keep_checkpoint_and_manifest_proportional() {
    let batches: usize = std::env::var("SLUICE_SOAK_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let rounds = 10;
    let per_round = batches / rounds;
    let d = dirs();
    let s = sluice::Session::builder()
        .config("spark.sql.streaming.fileSink.log.cleanupDelay", "0")
        .config("spark.sql.streaming.fileSource.log.cleanupDelay", "0")
        .build()
        .unwrap();
    let mut rest_sizes = Vec::new();
    let mut source_per_entry = Vec::new();
    let mut manifest_per_entry = Vec::new();
    let started = Instant::now();
    for round in 1..=rounds {
        one_row_files(&d.input, (round - 1) * per_round..round * per_round);
        let q = s
            .read_stream()
            .format("json")
            .schema("user STRING, amount DOUBLE")
            .unwrap()
            .option("maxFilesPerTrigger", "1")
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .format("parquet")
            .option("path", d.output.display())
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(sluice::Trigger::AvailableNow)
            .start()
            .unwrap();
        q.await_termination().unwrap();
        let entries = (round * per_round) as f64;
        let (ck, sources) = (du(&d.checkpoint), du(&d.checkpoint.join("sources")));
        let manifest = d.output.join("_spark_metadata");
        println!(
            "{} batches ({:.0} s): checkpoint {} KB, of which sources/0 {} KB in {} files \
             ({:.0} B per entry) and the rest {} KB ({} offsets files); manifest {} KB in {} \
             files ({:.0} B per entry)",
            round * per_round,
            started.elapsed().as_secs_f64(),
            ck / 1024,
            sources / 1024,
            files_in(&d.checkpoint.join("sources/0")),
            sources as f64 / entries,
            (ck - sources) / 1024,
            files_in(&d.checkpoint.join("offsets")),
            du(&manifest) / 1024,
            files_in(&manifest),
            du(&manifest) as f64 / entries,
        );
        rest_sizes.push(ck - sources);
        source_per_entry.push(sources as f64 / entries);
        manifest_per_entry.push(du(&manifest) as f64 / entries);
    }
    let flat = |v: &[f64], what: &str| {
        assert!(v[v.len() - 1] <= v[1] * 1.5, "{what} grew: {v:?}");
    };
    flat(&source_per_entry, "the source log per entry");
    flat(&manifest_per_entry, "the manifest per entry");
    let rest: Vec<f64> = rest_sizes.iter().map(|v| *v as f64).collect();
    flat(&rest, "the rest of the checkpoint");
    assert_eq!(
        committed_rows(&d.output, &["user"]).len(),
        per_round * rounds
    );
}

/// A query over a folder of `SLUICE_LISTING_FILES` files (50,000 by default), one new file per
/// trigger: the median `latestOffset` time of 20 triggers.
#[test]
#[ignore = "creates 50,000 files: benches/listing_scale.sh"]
fn listing_scale_trigger_cost_follows_new_files() {
    let n: usize = std::env::var("SLUICE_LISTING_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let d = dirs();
    one_row_files(&d.input, 0..n);
    let s = session();
    let q = s
        .read_stream()
        .format("json")
        .schema("user STRING, amount DOUBLE")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .format("noop")
        .option("checkpointLocation", d.checkpoint.display())
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    let mut times = Vec::new();
    for i in 0..20 {
        let path = d.input.join(format!("new-{i:03}.json"));
        std::fs::write(d.input.join(".tmp"), "{\"user\": \"x\"}\n").unwrap();
        std::fs::rename(d.input.join(".tmp"), &path).unwrap();
        q.process_all_available().unwrap();
        let p = q.last_progress().unwrap();
        times.push(p.duration_ms.get("latestOffset").copied().unwrap_or(0));
    }
    q.stop();
    times.sort_unstable();
    println!(
        "{n} files: latestOffset per trigger median {} ms, max {} ms",
        times[times.len() / 2],
        times.last().unwrap()
    );
}
