//! A batch many times `sluice.memory.limit` runs within it (issue 18 part 8): one batch of
//! ~140 MB of JSON to parquet through `sluice run`, its peak RSS read from `/proc` while it
//! runs. Before the batch streamed from the files through the plan into the sink, the process
//! held the whole input (412 MiB peak for this input, debug build).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// 24 files of 40,000 lines (~140 MB): `id`, a user of 1,000 and a 100-character payload.
fn write_input(dir: &Path) -> u64 {
    std::fs::create_dir_all(dir).unwrap();
    let pad = "x".repeat(100);
    let mut n = 0u64;
    for f in 0..24 {
        let mut body = String::with_capacity(40_000 * 160);
        for _ in 0..40_000 {
            body.push_str(&format!(
                "{{\"id\": {n}, \"user\": \"user-{}\", \"payload\": \"{pad}-{n}\"}}\n",
                n % 1000
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", pipeline.to_str().unwrap(), "--progress", "none"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // VmHWM only grows: the last reading before the process ends is its peak so far. Anonymous
    // memory (RssAnon) is what the batch holds; the debug binary's own pages are file-backed.
    let (mut peak, mut anon_peak) = (0u64, 0u64);
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
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert!(status.success(), "{stderr}");
    // Every row is in the output, in one batch.
    let written = sluice::sink::file::read_sink_output(&output, "parquet", None).unwrap();
    let n: usize = written.iter().map(|b| b.num_rows()).sum();
    assert_eq!(n as u64, rows);
    let input_bytes: u64 = std::fs::read_dir(&input)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let mib = |b: u64| b >> 20;
    eprintln!(
        "input {} MiB: peak RSS {} MiB, peak anonymous {} MiB",
        mib(input_bytes),
        mib(peak),
        mib(anon_peak)
    );
    // The batch's data stays within a small multiple of the 32 MiB budget, far below the input
    // (the reading of the whole input alone took more than the input's size before).
    assert!(
        anon_peak < 112 << 20,
        "the batch held {} MiB of anonymous memory under a 32 MiB budget for {} MiB of input",
        mib(anon_peak),
        mib(input_bytes)
    );
}
