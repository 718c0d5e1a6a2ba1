//! The on-disk state store provider (Spark's RocksDB provider class) under a windowed
//! aggregation and a session-window aggregation in append mode: the same rows as the in-memory
//! provider across a restart, eviction through the store's time index, sessions merged through
//! the store's key groups, and Spark's `rocksdb*` custom metrics in progress.

use std::sync::{Arc, Mutex};

use sluice::{col, OutputMode, Session};

use crate::support::{add_file, dirs, events};

const ROCKSDB: &str = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider";

type Seen = Arc<Mutex<Vec<String>>>;

/// How the count groups its rows.
#[derive(Clone, Copy)]
enum Windows {
    /// `window(ts, '10 minutes'), user`.
    Tumbling,
    /// `session_window(ts, '5 minutes'), user`: the session column before the other key.
    Sessions,
}

/// Runs the windowed count over `batches` (one file each), restarting the query after the
/// second; returns the rows written and every progress.
fn windowed_counts(
    provider: Option<&str>,
    windows: Windows,
    batches: &[&[(&str, &str)]],
) -> (Vec<String>, Vec<sluice::StreamingQueryProgress>) {
    let d = dirs();
    let seen: Seen = Arc::default();
    let mut progress = Vec::new();
    let mut next = 0usize;
    for run in [&batches[..2], &batches[2..]] {
        let mut b = Session::builder().shuffle_partitions(2);
        if let Some(p) = provider {
            b = b.config("spark.sql.streaming.stateStore.providerClass", p);
        }
        let s = b.build().unwrap();
        let sink = seen.clone();
        let q = s
            .read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING")
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .with_watermark("ts", "5 minutes")
            .unwrap()
            .group_by([
                match windows {
                    Windows::Tumbling => sluice::window(col("ts"), "10 minutes"),
                    Windows::Sessions => sluice::session_window(col("ts"), "5 minutes"),
                },
                col("user"),
            ])
            .count()
            .unwrap()
            .select_sql(match windows {
                Windows::Tumbling => vec!["CAST(window.start AS STRING) AS start", "user", "count"],
                Windows::Sessions => vec![
                    "CAST(session_window.start AS STRING) AS start",
                    "CAST(session_window.end AS STRING) AS end",
                    "user",
                    "count",
                ],
            })
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Append)
            .option("checkpointLocation", d.checkpoint.display())
            .foreach_batch(move |data, _| {
                let b = data.concat()?;
                for i in 0..b.num_rows() {
                    let cells: Vec<String> = b
                        .columns()
                        .iter()
                        .map(|c| sluice::sink::console::format_cell(c, i).unwrap())
                        .collect();
                    sink.lock().unwrap().push(cells.join("|"));
                }
                Ok(())
            })
            .start()
            .unwrap();
        for rows in run {
            add_file(
                &d.input,
                &format!("{next}.json"),
                &events(rows),
                next as u64,
            );
            next += 1;
            q.process_all_available().unwrap();
        }
        q.stop();
        progress.extend(q.recent_progress());
    }
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    (seen, progress)
}

#[test]
fn a_windowed_count_on_the_on_disk_provider_evicts_by_event_time_across_a_restart() {
    let batches: &[&[(&str, &str)]] = &[
        &[("12:01", "a"), ("12:02", "b"), ("12:04", "a")],
        &[("12:11", "a"), ("12:03", "b")],
        // 12:01 is behind the watermark (12:06) but its window (to 12:10) is open: counted.
        &[("12:26", "b"), ("12:12", "a"), ("12:01", "a")],
        &[("12:40", "c")],
    ];
    let (on_disk, progress) = windowed_counts(Some(ROCKSDB), Windows::Tumbling, batches);
    let (in_memory, memory_progress) = windowed_counts(None, Windows::Tumbling, batches);
    assert_eq!(
        on_disk,
        [
            "2026-09-15 12:00:00|a|3",
            "2026-09-15 12:00:00|b|2",
            "2026-09-15 12:10:00|a|2",
            "2026-09-15 12:20:00|b|1",
        ]
    );
    assert_eq!(on_disk, in_memory);
    // Every window closed by the watermark left the state: what is left is 12:40 c.
    let last = progress.last().unwrap();
    assert_eq!(last.state_operators[0].num_rows_total, 1);
    let removed: i64 = progress
        .iter()
        .map(|p| p.state_operators[0].num_rows_removed)
        .sum();
    assert_eq!(removed, 4);
    // Spark's RocksDB custom metrics, from the on-disk provider only.
    let with_data = progress
        .iter()
        .find(|p| p.num_input_rows == 3)
        .expect("a batch with data");
    let m = &with_data.state_operators[0].custom_metrics;
    for name in [
        "rocksdbGetCount",
        "rocksdbGetLatency",
        "rocksdbPutCount",
        "rocksdbTotalBytesRead",
        "rocksdbTotalBytesReadThroughIterator",
        "rocksdbTotalBytesWritten",
        "rocksdbCommitWriteBatchLatency",
        "rocksdbCommitFileSyncLatencyMs",
        "rocksdbSstFileSize",
    ] {
        assert!(m.contains_key(name), "{name} missing from {m:?}");
    }
    assert!(m["rocksdbGetCount"] >= 2, "{m:?}");
    assert!(m["rocksdbPutCount"] >= 2, "{m:?}");
    assert!(m["rocksdbTotalBytesWritten"] > 0, "{m:?}");
    assert!(memory_progress
        .iter()
        .flat_map(|p| p.state_operators.iter())
        .all(|o| !o.custom_metrics.keys().any(|k| k.starts_with("rocksdb"))));
}

/// Sessions merge with stored sessions of the same user found through the store's key groups
/// (the session column is not the last key, so a user's sessions are not a key range), across a
/// restart, and close by the watermark through the time index, on both providers alike.
#[test]
fn session_windows_on_the_on_disk_provider_merge_and_close_across_a_restart() {
    let batches: &[&[(&str, &str)]] = &[
        &[("12:01", "a"), ("12:02", "b"), ("12:04", "a")],
        // a: a second session (12:11 is after the first's end, 12:09); b: grows to 12:08.
        &[("12:11", "a"), ("12:03", "b")],
        // After the restart: 12:08 a joins a's two stored sessions into one (12:01-12:16);
        // 12:05 b is behind the watermark (12:06) but its session is not: merged. 12:26
        // moves the watermark to 12:21, closing both.
        &[("12:26", "b"), ("12:08", "a"), ("12:05", "b")],
        &[("12:40", "c")],
    ];
    let (on_disk, progress) = windowed_counts(Some(ROCKSDB), Windows::Sessions, batches);
    let (in_memory, _) = windowed_counts(None, Windows::Sessions, batches);
    assert_eq!(
        on_disk,
        [
            "2026-09-15 12:01:00|2026-09-15 12:16:00|a|4",
            "2026-09-15 12:02:00|2026-09-15 12:10:00|b|3",
            "2026-09-15 12:26:00|2026-09-15 12:31:00|b|1",
        ]
    );
    assert_eq!(on_disk, in_memory);
    // Only c's session is left.
    assert_eq!(
        progress.last().unwrap().state_operators[0].num_rows_total,
        1
    );
}
