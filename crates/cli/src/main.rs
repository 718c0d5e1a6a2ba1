//! The `sluice` command.
//!
//! - `sluice demo [--dir DIR]`: the seed documents' file example on embedded defaults: writes a
//!   few JSON files, streams them one file per trigger through a filter, prints each batch to the
//!   console, writes them to parquet and reads the result back.
//! - `sluice run PIPELINE.sql [--set name=value]...`: runs a pipeline file (`sql_pipeline.rs`).
//! - `sluice conformance [--json REPORT] PATH...`: runs conformance scenarios.

mod bench;
mod inspect;
mod latency;
mod nexmark;
mod sql_pipeline;
mod status;
mod ui;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use sluice::{col, lit, OutputMode, Session, Trigger};

const USAGE: &str = "\
usage:
  sluice demo [--dir DIR]                        run the file-stream example (local files, no servers)
  sluice run PIPELINE.sql [--set NAME=VALUE]... [--progress human|json|none] [--ui ADDR]
                                                 run a pipeline file (CREATE TABLE sources, CREATE SINK ... AS SELECT
                                                 queries) until stopped (Ctrl-C: after the current batch) or done;
                                                 --set gives ${NAME} in its options (else the environment)
  sluice run --pipeline file-to-parquet|windowed-count --input DIR --output DIR --checkpoint DIR [--available-now]
                                                 run a built-in pipeline until stopped (or until caught up)
  sluice bench --workload windowed|stateless|overhead|decode --input DIR [--workdir DIR] [--batches N]
                                                 the Sluice side of shared/bench/bench_spark.py
                                                 (decode: the same files to Arrow, nothing else)
  sluice bench --workload latency --mode continuous|microbatch [--source rate|kafka] [--seconds N] [--rows-per-second N]
                                                 end-to-end latency p50/p99/max (ms), one JSON line
  sluice bench --workload nexmark --query q0|q1|q2|q5|q7|q8 [--events N] [--events-per-batch N]
                                                 a Nexmark query over N generated events (10,000,000; 250,000 per batch)
                                                 [--export DIR: write the bids to DIR/bid as parquet instead;
                                                  --bids-from DIR/bid: read them from there, 2 files per batch]
  sluice conformance [--matrix] [--json REPORT] PATH...
                                                 run conformance scenarios (files or directories);
                                                 --matrix also runs each with restarts and crashes
  sluice checkpoint describe DIR [--json]        a query checkpoint: id, batches, offsets, watermark,
                                                 pinned conf, state operators (schema, versions)
  sluice state read DIR [--operator N] [--batch N] [--json]
                                                 the state of operator N (0) as of committed batch N
                                                 (the last one): a table, or JSON lines
";

/// mimalloc's `mi_option_purge_delay` (the 16th entry of `mi_option_e` in mimalloc.h, v2 and
/// v3; the Rust bindings do not name it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> ExitCode {
    // Keep freed memory committed instead of returning it to the OS 10 ms later: each batch
    // reuses the previous batch's buffers rather than faulting fresh zeroed pages in (windowed
    // benchmark: 0.38 s -> 0.12 s of system time, same peak RSS; BENCHMARKS.md).
    // SAFETY: sets a process-wide allocator option; no allocation invariants are involved.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") => demo(&args[1..]),
        Some("run") => run_pipeline(&args[1..]),
        Some("bench") => bench::bench(&args[1..]).map(|_| ExitCode::SUCCESS),
        Some("conformance") => conformance(&args[1..]),
        Some("checkpoint") => inspect::checkpoint(&args[1..]),
        Some("state") => inspect::state(&args[1..]),
        Some("-h" | "--help" | "help") | None => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => Err(format!("unknown command {other:?}\n{USAGE}")),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}

const DEMO_FILES: [(&str, &str); 3] = [
    (
        "batch1.json",
        r#"{"event_time": "2026-02-14T10:00:05", "user": "alice", "action": "buy",  "amount": 250.0}
{"event_time": "2026-02-14T10:00:12", "user": "bob",   "action": "buy",  "amount": 5.0}
{"event_time": "2026-02-14T10:00:31", "user": "alice", "action": "buy",  "amount": 120.0}
"#,
    ),
    (
        "batch2.json",
        r#"{"event_time": "2026-02-14T10:01:02", "user": "carol", "action": "cart", "amount": 42.5}
{"event_time": "2026-02-14T10:01:09", "user": "dave",  "action": "view", "amount": 0.0}
"#,
    ),
    (
        "batch3.json",
        r#"{"event_time": "2026-02-14T10:02:40", "user": "bob",   "action": "buy",  "amount": 18.0}
{"event_time": "2026-02-14T10:02:41", "user": "erin",  "action": "buy",  "amount": 
"#,
    ),
];

fn demo(args: &[String]) -> Result<ExitCode, String> {
    let dir = match args {
        [flag, d] if flag == "--dir" => PathBuf::from(d),
        [] => std::env::temp_dir().join(format!("sluice-demo-{}", std::process::id())),
        _ => return Err(format!("bad arguments for demo\n{USAGE}")),
    };
    let input = dir.join("stream_in");
    std::fs::create_dir_all(&input).map_err(|e| format!("{}: {e}", input.display()))?;
    for (i, (name, body)) in DEMO_FILES.iter().enumerate() {
        let path = input.join(name);
        std::fs::write(&path, body).map_err(|e| format!("{}: {e}", path.display()))?;
        // Distinct modification times keep the files in order.
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(60 - i as u64);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(t))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    println!(
        "input: {} (3 JSON files; the last one ends in a half-written line)",
        input.display()
    );

    let run = || -> sluice::Result<()> {
        let session = Session::builder().shuffle_partitions(2).build()?;
        let events = session
            .read_stream()
            .format("json")
            .schema("event_time TIMESTAMP, user STRING, action STRING, amount DOUBLE")?
            .option("maxFilesPerTrigger", "1")
            .load(input.display().to_string())?;
        let big =
            events
                .filter(col("amount").gt(lit(10.0)))?
                .select(["event_time", "user", "amount"])?;

        let console = big
            .write_stream()
            .output_mode(OutputMode::Append)
            .format("console")
            .option("truncate", "false")
            .trigger(Trigger::AvailableNow)
            .start()?;
        console.await_termination()?;

        let out = dir.join("stream_out");
        let checkpoint = dir.join("checkpoint");
        let parquet = big
            .write_stream()
            .format("parquet")
            .option("path", out.display())
            .option("checkpointLocation", checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()?;
        parquet.await_termination()?;
        let rows = session
            .read()
            .format("parquet")
            .load(out.display().to_string())?
            .count()?;
        println!(
            "parquet sink: {} holds {rows} committed rows; checkpoint: {}",
            out.display(),
            checkpoint.display()
        );
        if let Some(p) = parquet.last_progress() {
            println!("last progress:\n{}", p.json());
        }
        Ok(())
    };
    run().map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

fn conformance(args: &[String]) -> Result<ExitCode, String> {
    let mut json_out: Option<PathBuf> = None;
    let mut matrix = false;
    let mut paths = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--matrix" => matrix = true,
            "--json" => {
                json_out = Some(PathBuf::from(it.next().ok_or("--json needs a file name")?));
            }
            p => paths.push(PathBuf::from(p)),
        }
    }
    if paths.is_empty() {
        return Err(format!("conformance needs at least one PATH\n{USAGE}"));
    }
    let outcomes = if matrix {
        sluice_conformance::run_paths_matrix(&paths, true)?
    } else {
        sluice_conformance::run_paths(&paths, true)?
    };
    let summary = sluice_conformance::summary_line(&outcomes);
    if let Some(out) = json_out {
        let report = serde_json::json!({ "summary": summary, "scenarios": outcomes });
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    println!("{summary}");
    Ok(if outcomes.iter().all(|o| o.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `sluice run FILE.sql [--set k=v]...`: a pipeline file (`sql_pipeline.rs`). Otherwise
/// `sluice run --pipeline ...`: a built-in pipeline over JSON files `{"id": N, "ts": "...", "user": "..."}`,
/// running until killed (or, with `--available-now`, until it has caught up). Used by the
/// process-level chaos test, which kills it with SIGKILL at random moments.
fn run_pipeline(args: &[String]) -> Result<ExitCode, String> {
    if let Some(file) = args.first().filter(|a| a.ends_with(".sql")) {
        return sql_pipeline::run(file, &args[1..]);
    }
    let mut pipeline = None;
    let (mut input, mut output, mut checkpoint) = (None, None, None);
    let mut available_now = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--pipeline" => pipeline = Some(val()?),
            "--input" => input = Some(val()?),
            "--output" => output = Some(val()?),
            "--checkpoint" => checkpoint = Some(val()?),
            "--available-now" => available_now = true,
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let (Some(pipeline), Some(input), Some(output), Some(checkpoint)) =
        (pipeline, input, output, checkpoint)
    else {
        return Err(format!(
            "run needs --pipeline, --input, --output and --checkpoint\n{USAGE}"
        ));
    };
    let run = || -> sluice::Result<()> {
        let session = Session::builder().shuffle_partitions(2).build()?;
        let events = session
            .read_stream()
            .format("json")
            .schema("id BIGINT, ts TIMESTAMP, user STRING")?
            .option("maxFilesPerTrigger", "2")
            .load(&input)?;
        let frame = match pipeline.as_str() {
            "file-to-parquet" => events.select(["id", "ts", "user"])?,
            "windowed-count" => events
                .with_watermark("ts", "1 minute")?
                .group_by([sluice::window(col("ts"), "1 minute"), col("user")])
                .count()?
                .select_sql(["window.start AS window_start", "user", "count"])?,
            other => {
                return Err(sluice::SluiceError::query(
                    "UNKNOWN_PIPELINE",
                    format!("unknown pipeline {other:?}: use file-to-parquet or windowed-count"),
                ))
            }
        };
        let q = frame
            .write_stream()
            .output_mode(OutputMode::Append)
            .format("parquet")
            .option("path", &output)
            .option("checkpointLocation", &checkpoint)
            .trigger(if available_now {
                Trigger::AvailableNow
            } else {
                Trigger::default()
            })
            .start()?;
        q.await_termination()
    };
    run().map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
