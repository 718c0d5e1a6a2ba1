//! A batch many times `sluice.memory.limit` runs within it (issue 18 part 8): one batch of
//! ~170 MB of JSON to parquet through `sluice run`, its peak RSS read from `/proc` while it
//! runs, for a stateless query and a windowed aggregation. Before the batch streamed from the
//! files through the plan into the sink, the process held the whole input (412 MiB peak for the
//! stateless query, debug build); before a stateful operator took its input chunk by chunk, the
//! aggregation held it all too.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// 24 files of 40,000 lines (~170 MB): `id`, a user of 1,000, a 100-character payload and an
/// event time `ts` (file `f` in minute `f` of 2026-01-01).
pub(crate) fn write_input(dir: &Path) -> u64 {
    std::fs::create_dir_all(dir).unwrap();
    let pad = "x".repeat(100);
    let mut n = 0u64;
    for f in 0..24 {
        let mut body = String::with_capacity(40_000 * 190);
        for i in 0..40_000 {
            body.push_str(&format!(
                "{{\"id\": {n}, \"user\": \"user-{}\", \"payload\": \"{pad}-{n}\", \
                 \"ts\": \"2026-01-01 00:{f:02}:{:02}\"}}\n",
                n % 1000,
                i % 60
            ));
            n += 1;
        }
        std::fs::write(dir.join(format!("part-{f:03}.json")), body).unwrap();
    }
    n
}

/// `key` (e.g. `VmHWM`) of `/proc/<pid>/status`, in bytes.
fn proc_status_bytes(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs `pipeline` with `sluice run` to its end; returns its peak RSS and peak anonymous memory
/// (bytes), read from `/proc` while it runs.
fn run_measured(pipeline: &Path) -> (u64, u64) {
    let (measured, _) = run_measured_beside(pipeline, &[]);
    measured
}

/// The allocator setting of every measured process: mimalloc returns freed memory to the OS at
/// once. The binary's default keeps freed pages for 10 ms, which at a batch's rate of churn is
/// 10–30 MiB more or less by the scheduler's whim (release: 114–117 MiB peak against 82–90 with
/// this setting); the tests measure what the batch holds, not when the allocator returns it.
pub(crate) const MEASURED_ALLOCATOR: (&str, &str) = ("MIMALLOC_PURGE_DELAY", "0");

/// [`run_measured`], and the peak anonymous memory of each process of `others` meanwhile.
/// One measured run at a time: two batches of 169 MiB at once on 2 cores (the cluster's and
/// one process's) change each other's peaks.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn run_measured_beside(pipeline: &Path, others: &[u32]) -> ((u64, u64), Vec<u64>) {
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", pipeline.to_str().unwrap(), "--progress", "none"])
        .env(MEASURED_ALLOCATOR.0, MEASURED_ALLOCATOR.1)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // VmHWM only grows: the last reading before the process ends is its peak so far. Anonymous
    // memory (RssAnon) is what the batch holds; the debug binary's own pages are file-backed.
    let (mut peak, mut anon_peak) = (0u64, 0u64);
    let mut others_peak = vec![0u64; others.len()];
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        peak = proc_status_bytes(child.id(), "VmHWM")
            .unwrap_or(0)
            .max(peak);
        anon_peak = proc_status_bytes(child.id(), "RssAnon")
            .unwrap_or(0)
            .max(anon_peak);
        for (pid, peak) in others.iter().zip(&mut others_peak) {
            *peak = proc_status_bytes(*pid, "RssAnon").unwrap_or(0).max(*peak);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert!(status.success(), "{stderr}");
    ((peak, anon_peak), others_peak)
}

pub(crate) fn mib(b: u64) -> u64 {
    b >> 20
}

/// The batch's data stays within a small multiple of the 32 MiB budget, far below the input
/// (the reading of the whole input alone took more than the input's size before).
pub(crate) fn assert_within_budget(what: &str, input: &Path, (peak, anon_peak): (u64, u64)) {
    let input_bytes: u64 = std::fs::read_dir(input)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    eprintln!(
        "{what}: input {} MiB: peak RSS {} MiB, peak anonymous {} MiB",
        mib(input_bytes),
        mib(peak),
        mib(anon_peak)
    );
    assert!(
        anon_peak < 112 << 20,
        "{what}: the batch held {} MiB of anonymous memory under a 32 MiB budget for {} MiB of \
         input",
        mib(anon_peak),
        mib(input_bytes)
    );
}

#[test]
fn a_batch_many_times_the_memory_limit_is_written_within_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, output) = (tmp.path().join("in"), tmp.path().join("out"));
    let rows = write_input(&input);
    let pipeline = tmp.path().join("p.sql");
    std::fs::write(
        &pipeline,
        format!(
            "SET sluice.memory.limit = '32m';\n\
             CREATE TABLE events (id BIGINT, user STRING, payload STRING) WITH (\n\
               connector = 'filesystem', path = '{}', format = 'json');\n\
             CREATE SINK out FROM events WITH (\n\
               connector = 'filesystem', format = 'parquet', path = '{}',\n\
               checkpoint = '{}', 'trigger' = 'once');\n",
            input.display(),
            output.display(),
            tmp.path().join("ck").display()
        ),
    )
    .unwrap();
    let measured = run_measured(&pipeline);
    // Every row is in the output, in one batch.
    let written = sluice::sink::file::read_sink_output(&output, "parquet", None).unwrap();
    let n: usize = written.iter().map(|b| b.num_rows()).sum();
    assert_eq!(n as u64, rows);
    assert_within_budget("file to parquet", &input, measured);
}

/// A windowed aggregation over one batch many times the budget: its operator takes the input a
/// chunk (a sixteenth of the budget) at a time, and every row is counted once.
#[test]
fn a_windowed_aggregation_over_a_batch_many_times_the_memory_limit_runs_within_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (pipeline, rows) = windowed_pipeline(tmp.path(), "");
    let measured = run_measured(&pipeline);
    check_windowed(tmp.path(), rows);
    assert_within_budget("windowed aggregation", &tmp.path().join("in"), measured);
}

/// The windowed aggregation's pipeline over one batch many times a 32 MiB budget, in `tmp`
/// (input `in`, output `out`), with the settings `set` (`SET` lines) first; and its input rows.
pub(crate) fn windowed_pipeline(tmp: &Path, set: &str) -> (std::path::PathBuf, u64) {
    let (input, output) = (tmp.join("in"), tmp.join("out"));
    let rows = write_input(&input);
    // A late file far ahead moves the watermark past every window of the batch, so the
    // available-now run's no-data batch emits them all.
    std::fs::write(
        input.join("zz-late.json"),
        "{\"id\": -1, \"user\": \"later\", \"payload\": \"\", \"ts\": \"2026-01-02 00:00:00\"}\n",
    )
    .unwrap();
    let pipeline = tmp.join("p.sql");
    std::fs::write(
        &pipeline,
        format!(
            "{set}SET sluice.memory.limit = '32m';\n\
             CREATE TABLE events (id BIGINT, user STRING, payload STRING, ts TIMESTAMP,\n\
               WATERMARK FOR ts AS ts - INTERVAL '1' MINUTE) WITH (\n\
               connector = 'filesystem', path = '{}', format = 'json');\n\
             CREATE SINK out WITH (\n\
               connector = 'filesystem', format = 'parquet', path = '{}',\n\
               checkpoint = '{}', 'outputMode' = 'append', 'trigger' = 'available-now') AS\n\
             SELECT window.start AS `start`, user, count(*) AS events, max(length(payload)) AS widest\n\
             FROM events GROUP BY window(ts, '1 minute'), user;\n",
            input.display(),
            output.display(),
            tmp.join("ck").display()
        ),
    )
    .unwrap();
    (pipeline, rows)
}

/// The windowed aggregation of [`windowed_pipeline`] wrote a group per minute and user, each row
/// counted once.
pub(crate) fn check_windowed(tmp: &Path, rows: u64) {
    let written = sluice::sink::file::read_sink_output(&tmp.join("out"), "parquet", None).unwrap();
    let (mut groups, mut counted) = (0usize, 0i64);
    for b in &written {
        groups += b.num_rows();
        let events = b
            .column_by_name("events")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        counted += events.values().iter().sum::<i64>();
    }
    // 24 minutes x 1,000 users, each row counted once (the late file's window stays open).
    assert_eq!(groups, 24 * 1000);
    assert_eq!(counted as u64, rows);
}
