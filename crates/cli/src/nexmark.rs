//! `sluice bench --workload nexmark --query q0|q1|q2|q5|q7|q8 [--events N] [--events-per-batch N]`:
//! the Nexmark queries on Sluice's `nexmark` source (Beam's generator proportions, person :
//! auction : bid = 1 : 3 : 46), written in Spark SQL as a Spark user would.
//!
//! Events of event time come 10,000 a second (100 µs apart), so 10,000,000 events span
//! 1,000 seconds. The figure is events of the whole generated stream (all three tables) per
//! second of wall time, and per core: divided by the cores the process may use, and by the CPU
//! seconds it actually used.
//!
//! | query | what | Sluice formulation |
//! |---|---|---|
//! | q0 | pass-through | projection of `bid` |
//! | q1 | currency conversion | `0.908 * price` |
//! | q2 | selection | `auction % 123 = 0` |
//! | q5 | hot items | bids per auction per sliding window (10 s, every 2 s), then per window the auction with the most bids: two chained aggregations (append mode) |
//! | q7 | highest bid | max price per tumbling 10 s window, joined back to the bids on (window, price) |
//! | q8 | new users | persons ⋈ auctions they opened in the same tumbling 10 s window |

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sluice::{OutputMode, Session, StreamFrame, Trigger};

pub struct NexmarkRun {
    pub query: String,
    pub events: u64,
    pub events_per_batch: u64,
    /// Events per second of event time (Nexmark's default: 10,000).
    pub events_per_second: u64,
    pub shuffle_partitions: usize,
    /// Read the `bid` table from parquet files written by [`export_bids`] (files of one
    /// export batch per trigger) instead of generating it: the input Spark reads too.
    pub bids_from: Option<std::path::PathBuf>,
}

/// A memory line of `/proc/self/status` (`VmHWM`, `VmRSS`), in bytes; 0 where unreadable.
fn proc_status_bytes(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.strip_prefix(key).is_some_and(|r| r.starts_with(':')))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// Peak resident set size of this process (Linux `VmHWM`), in bytes.
pub fn peak_rss_bytes() -> u64 {
    proc_status_bytes("VmHWM")
}

/// Resident set size of this process now (Linux `VmRSS`), in bytes.
pub fn rss_bytes() -> u64 {
    proc_status_bytes("VmRSS")
}

/// Resident memory after each batch, in MB, thinned to at most 12 evenly spaced samples
/// (first and last kept): flat when eviction keeps the state bounded.
pub fn rss_samples_mb(samples: &[u64]) -> Vec<u64> {
    let n = samples.len();
    if n <= 12 {
        return samples.iter().map(|b| b / 1_048_576).collect();
    }
    (0..12)
        .map(|i| samples[i * (n - 1) / 11] / 1_048_576)
        .collect()
}

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    // /proc/self/stat fields 14 and 15: utime, stime in clock ticks (100 per second on Linux).
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ut: f64 = f.get(11)?.parse().ok()?;
            let st: f64 = f.get(12)?.parse().ok()?;
            Some((ut + st) / 100.0)
        })
        .unwrap_or(f64::NAN)
}

fn table(session: &Session, name: &str, run: &NexmarkRun) -> sluice::Result<StreamFrame> {
    if let (Some(dir), "bid") = (&run.bids_from, name) {
        let ddl = "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, \
                   date_time TIMESTAMP, extra STRING";
        return session
            .read_stream()
            .format("parquet")
            .schema(ddl)?
            .option("maxFilesPerTrigger", run.shuffle_partitions)
            .load(dir.display().to_string())?
            .with_watermark("date_time", "1 second");
    }
    session
        .read_stream()
        .format("nexmark")
        .option("table", name)
        .option("numEvents", run.events)
        .option("maxEventsPerTrigger", run.events_per_batch)
        .option("eventsPerSecond", run.events_per_second)
        .load_source()?
        .with_watermark("date_time", "1 second")
}

/// The query's result stream and its output mode.
pub fn query(session: &Session, run: &NexmarkRun) -> sluice::Result<(StreamFrame, OutputMode)> {
    let q = run.query.as_str();
    match q {
        "q0" | "q1" | "q2" | "q5" | "q7" => {
            table(session, "bid", run)?.create_or_replace_temp_view("bid")?
        }
        "q8" => {
            table(session, "person", run)?.create_or_replace_temp_view("person")?;
            table(session, "auction", run)?.create_or_replace_temp_view("auction")?;
        }
        other => {
            return Err(sluice::SluiceError::query(
                sluice::error::class::UNKNOWN_WORKLOAD,
                format!("unknown Nexmark query {other:?}: use q0, q1, q2, q5, q7 or q8"),
            ))
        }
    }
    let (sql, mode) = match q {
        "q0" => (
            "SELECT auction, bidder, price, date_time, extra FROM bid",
            OutputMode::Append,
        ),
        "q1" => (
            "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
            OutputMode::Append,
        ),
        "q2" => (
            "SELECT auction, price FROM bid WHERE auction % 123 = 0",
            OutputMode::Append,
        ),
        "q5" => {
            session
                .sql(
                    "SELECT window(date_time, '10 seconds', '2 seconds') AS w, auction, \
                     count(*) AS num FROM bid GROUP BY window(date_time, '10 seconds', \
                     '2 seconds'), auction",
                )?
                .create_or_replace_temp_view("auction_bids")?;
            (
                "SELECT w, max_by(auction, num) AS auction, max(num) AS num \
                 FROM auction_bids GROUP BY w",
                OutputMode::Append,
            )
        }
        "q7" => {
            session
                .sql(
                    "SELECT window(date_time, '10 seconds') AS w, max(price) AS maxprice \
                     FROM bid GROUP BY window(date_time, '10 seconds')",
                )?
                .create_or_replace_temp_view("max_bids")?;
            (
                "SELECT b.auction, b.price, b.bidder, b.date_time, b.extra \
                 FROM bid b JOIN max_bids m \
                 ON window(b.date_time, '10 seconds') = m.w AND b.price = m.maxprice",
                OutputMode::Append,
            )
        }
        _ => (
            "SELECT p.id, p.name, p.w.start AS starttime FROM \
             (SELECT id, name, window(date_time, '10 seconds') AS w FROM person) p \
             JOIN (SELECT seller, window(date_time, '10 seconds') AS w FROM auction) a \
             ON p.id = a.seller AND p.w = a.w",
            OutputMode::Append,
        ),
    };
    Ok((session.sql(sql)?, mode))
}

/// Writes the generated `bid` table to parquet files under `out` (one file per partition per
/// batch of `events_per_batch` events), for running the same input through Spark.
pub fn export_bids(run: &NexmarkRun, out: &std::path::Path) -> sluice::Result<u64> {
    let session = Session::builder()
        .shuffle_partitions(run.shuffle_partitions)
        .build()?;
    let q = table(&session, "bid", run)?
        .write_stream()
        .format("parquet")
        .option("path", out.join("bid").display())
        .option("checkpointLocation", out.join("checkpoint").display())
        .trigger(Trigger::AvailableNow)
        .start()?;
    q.await_termination()?;
    Ok(q.recent_progress()
        .iter()
        .map(|p| p.num_input_rows as u64)
        .sum())
}

/// Runs one query over the whole stream; returns the JSON figures.
pub fn run(run: &NexmarkRun, workdir: &std::path::Path) -> sluice::Result<serde_json::Value> {
    let session = Session::builder()
        .shuffle_partitions(run.shuffle_partitions)
        .build()?;
    // Peak RSS of this query alone: reset the process's high-water mark (Linux clear_refs 5).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (frame, mode) = query(&session, run)?;
    let out_rows = Arc::new(AtomicU64::new(0));
    let counter = out_rows.clone();
    let rss = Arc::new(std::sync::Mutex::new(Vec::new()));
    let rss_in = rss.clone();
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let q = frame
        .write_stream()
        .output_mode(mode)
        .foreach_batch(move |data, _| {
            counter.fetch_add(data.num_rows() as u64, Ordering::Relaxed);
            if let Ok(mut v) = rss_in.lock() {
                v.push(rss_bytes());
            }
            Ok(())
        })
        .option("checkpointLocation", workdir.join("checkpoint").display())
        .trigger(Trigger::AvailableNow)
        .start()?;
    q.await_termination()?;
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let progress = q.recent_progress();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64;
    let mut durations: Vec<i64> = progress
        .iter()
        .filter(|p| p.num_input_rows > 0)
        .map(|p| p.duration_ms.get("triggerExecution").copied().unwrap_or(0))
        .collect();
    durations.sort();
    let median = durations.get(durations.len() / 2).copied().unwrap_or(0);
    let state_rows: Vec<i64> = progress
        .iter()
        .map(|p| p.state_operators.iter().map(|s| s.num_rows_total).sum())
        .collect();
    let eps = run.events as f64 / wall;
    Ok(serde_json::json!({
        "engine": "sluice",
        "workload": format!("nexmark-{}", run.query),
        "events": run.events,
        "output_rows": out_rows.load(Ordering::Relaxed),
        "batches": progress.len(),
        "wall_seconds": (wall * 1000.0).round() / 1000.0,
        "cpu_seconds": (cpu * 100.0).round() / 100.0,
        "events_per_second": eps.round(),
        "events_per_second_per_core": (eps / cores).round(),
        "events_per_cpu_second": (run.events as f64 / cpu).round(),
        "median_batch_ms": median,
        "state_rows_max": state_rows.iter().copied().max().unwrap_or(0),
        "state_rows_last": state_rows.last().copied().unwrap_or(0),
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_mb_by_batch": rss_samples_mb(&rss.lock().map(|v| v.clone()).unwrap_or_default()),
    }))
}

#[cfg(test)]
mod tests {
    //! The Nexmark queries against brute-force answers computed from the generator's rows.

    use std::collections::{BTreeMap, HashMap};
    use std::sync::Mutex;

    use arrow::array::{Array, AsArray, RecordBatch, StructArray};
    use arrow::datatypes::{Int64Type, TimestampMicrosecondType};
    use sluice::source::nexmark::NexmarkSourceProvider;

    use super::*;

    const EVENTS: u64 = 60_000;
    const PER_BATCH: u64 = 7_000;
    /// 30 s of event time: closed 10 s windows.
    const RATE: u64 = 2_000;

    fn run_query(q: &str) -> Vec<RecordBatch> {
        let dir = tempfile::tempdir().unwrap();
        let session = Session::builder().shuffle_partitions(2).build().unwrap();
        let run = NexmarkRun {
            query: q.into(),
            events: EVENTS,
            events_per_batch: PER_BATCH,
            events_per_second: RATE,
            shuffle_partitions: 2,
            bids_from: None,
        };
        let (frame, mode) = query(&session, &run).unwrap();
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let handle = frame
            .write_stream()
            .output_mode(mode)
            .foreach_batch(move |data, _| {
                sink.lock().unwrap().extend(data.batches().cloned());
                Ok(())
            })
            .option("checkpointLocation", dir.path().join("ckpt").display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        handle.await_termination().unwrap();
        let batches = out.lock().unwrap().clone();
        batches
    }

    /// All bids as (auction, bidder, price, date_time µs).
    fn bids() -> Vec<(i64, i64, i64, i64)> {
        let opts: HashMap<String, String> = [
            ("table".to_string(), "bid".to_string()),
            ("numEvents".to_string(), EVENTS.to_string()),
            ("eventsPerSecond".to_string(), RATE.to_string()),
        ]
        .into();
        let p = NexmarkSourceProvider::try_new(&opts).unwrap();
        let mut out = Vec::new();
        for b in p.generate(0, EVENTS).unwrap() {
            let s = b.schema();
            let c = |n: &str| b.column(s.index_of(n).unwrap()).clone();
            let (a, bi, pr) = (c("auction"), c("bidder"), c("price"));
            let t = c("date_time");
            let (a, bi, pr) = (
                a.as_primitive::<Int64Type>(),
                bi.as_primitive::<Int64Type>(),
                pr.as_primitive::<Int64Type>(),
            );
            let t = t.as_primitive::<TimestampMicrosecondType>();
            for i in 0..b.num_rows() {
                out.push((a.value(i), bi.value(i), pr.value(i), t.value(i)));
            }
        }
        out
    }

    fn window_ends(rows: &[RecordBatch], col: &str) -> Vec<(i64, i64)> {
        let mut v = Vec::new();
        for b in rows {
            let w = b.column(b.schema().index_of(col).unwrap());
            let w = w.as_any().downcast_ref::<StructArray>().unwrap();
            let (s, e) = (
                w.column(0).as_primitive::<TimestampMicrosecondType>(),
                w.column(1).as_primitive::<TimestampMicrosecondType>(),
            );
            for i in 0..w.len() {
                v.push((s.value(i), e.value(i)));
            }
        }
        v
    }

    #[test]
    fn q5_reports_the_hottest_auction_of_every_closed_sliding_window() {
        let bids = bids();
        let watermark = bids.iter().map(|b| b.3).max().unwrap() - 1_000_000;
        // Brute force: bids per (window, auction) over 10 s windows every 2 s.
        let mut counts: BTreeMap<(i64, i64), HashMap<i64, i64>> = BTreeMap::new();
        for (auction, _, _, t) in &bids {
            let last = t - t.rem_euclid(2_000_000);
            for k in 0..5 {
                let s = last - k * 2_000_000;
                *counts
                    .entry((s, s + 10_000_000))
                    .or_default()
                    .entry(*auction)
                    .or_default() += 1;
            }
        }
        counts.retain(|(_, e), _| *e <= watermark);
        let out = run_query("q5");
        let windows = window_ends(&out, "w");
        let mut got: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
        let mut i = 0;
        for b in &out {
            let a = b.column(1).as_primitive::<Int64Type>();
            let n = b.column(2).as_primitive::<Int64Type>();
            for r in 0..b.num_rows() {
                assert!(got.insert(windows[i], (a.value(r), n.value(r))).is_none());
                i += 1;
            }
        }
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            counts.keys().collect::<Vec<_>>(),
            "one row per closed window"
        );
        for (w, (auction, num)) in &got {
            let per = &counts[w];
            let max = *per.values().max().unwrap();
            assert_eq!(*num, max, "max count of window {w:?}");
            assert_eq!(
                per[auction], max,
                "auction {auction} is a hottest one of {w:?}"
            );
        }
    }

    #[test]
    fn q7_joins_each_closed_windows_highest_bids_back() {
        let bids = bids();
        let watermark = bids.iter().map(|b| b.3).max().unwrap() - 1_000_000;
        let mut max: BTreeMap<i64, i64> = BTreeMap::new();
        for (_, _, price, t) in &bids {
            let s = t - t.rem_euclid(10_000_000);
            let m = max.entry(s).or_insert(*price);
            *m = (*m).max(*price);
        }
        let mut expected: Vec<(i64, i64, i64, i64)> = bids
            .iter()
            .copied()
            .filter(|(_, _, p, t)| {
                let s = t - t.rem_euclid(10_000_000);
                s + 10_000_000 <= watermark && max[&s] == *p
            })
            .collect();
        expected.sort();
        let out = run_query("q7");
        let mut got = Vec::new();
        for b in &out {
            let c = |i: usize| b.column(i).as_primitive::<Int64Type>().clone();
            let (a, p, bi) = (c(0), c(1), c(2));
            let t = b.column(3).as_primitive::<TimestampMicrosecondType>();
            for r in 0..b.num_rows() {
                got.push((a.value(r), bi.value(r), p.value(r), t.value(r)));
            }
        }
        got.sort();
        assert!(!expected.is_empty());
        assert_eq!(got, expected);
    }
}
