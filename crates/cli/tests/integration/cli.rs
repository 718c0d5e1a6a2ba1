//! The `sluice` command as a command: `--version`, `--help` for every subcommand, bad arguments
//! refused with exit code 2 and a message, and the engine's warnings on stderr (a Kafka broker
//! that does not answer, a checkpoint's pinned partition count, a torn log file set aside).
//! None of these needs a broker: the Kafka test points at 127.0.0.1:1, where nothing listens.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn version_prints_the_name_and_the_version() {
    let o = sluice(&["--version"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        text(&o.stdout),
        format!("sluice {}\n", env!("CARGO_PKG_VERSION"))
    );
}

const SUBCOMMANDS: [&str; 6] = ["demo", "run", "bench", "conformance", "checkpoint", "state"];

#[test]
fn help_lists_every_subcommand() {
    for args in [&["--help"][..], &["-h"], &["help"], &[]] {
        let o = sluice(args);
        assert!(o.status.success(), "{args:?}: {o:?}");
        let out = text(&o.stdout);
        assert!(out.contains("Usage: sluice"), "{args:?}:\n{out}");
        for sub in SUBCOMMANDS {
            assert!(
                out.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{sub} "))),
                "{args:?}: no {sub} in\n{out}"
            );
        }
    }
}

#[test]
fn every_subcommand_has_help_with_its_flags() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["demo"], &["--dir <DIR>"]),
        (
            &["run"],
            &[
                "sluice run PIPELINE.sql [--set NAME=VALUE]...",
                "sluice run --pipeline NAME --input DIR --output DIR --checkpoint DIR",
                "[PIPELINE.sql]",
                "--set <NAME=VALUE>",
                "--progress <MODE>",
                "--ui <ADDR>",
                "--ui-token <TOKEN>",
                "--pipeline <NAME>",
                "file-to-parquet",
                "--input <DIR>",
                "--output <DIR>",
                "--checkpoint <DIR>",
                "--available-now",
            ],
        ),
        (
            &["bench"],
            &[
                "--workload <WORKLOAD>",
                "--input <DIR>",
                "--workdir <DIR>",
                "--batches <N>",
                "--query <QUERY>",
                "--events <N>",
                "--events-per-batch <N>",
                "--export <DIR>",
                "--bids-from <DIR/bid>",
                "--mode <MODE>",
                "--source <SOURCE>",
                "--sink <SINK>",
                "--seconds <N>",
                "--rows-per-second <N>",
                "--bootstrap <HOST:PORT>",
            ],
        ),
        (
            &["conformance"],
            &["--matrix", "--json <REPORT>", "<PATH>..."],
        ),
        (&["checkpoint"], &["describe"]),
        (&["checkpoint", "describe"], &["<DIR>", "--json"]),
        (&["state"], &["read"]),
        (
            &["state", "read"],
            &["<DIR>", "--operator <N>", "--batch <N>", "--json"],
        ),
    ];
    for (sub, flags) in cases {
        let mut args = sub.to_vec();
        args.push("--help");
        let o = sluice(&args);
        assert!(o.status.success(), "{args:?}: {o:?}");
        let out = text(&o.stdout);
        assert!(
            out.contains(&format!("Usage: sluice {}", sub.join(" "))),
            "{args:?}:\n{out}"
        );
        for f in *flags {
            assert!(out.contains(f), "{args:?}: no {f} in\n{out}");
        }
        // `sluice help SUB` is the same text.
        let mut help = vec!["help"];
        help.extend_from_slice(sub);
        assert_eq!(text(&sluice(&help).stdout), out, "{help:?}");
    }
}

#[test]
fn bad_arguments_exit_2_with_a_message_and_the_usage() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["frobnicate"], &["unrecognized subcommand 'frobnicate'"]),
        (
            &["run", "p.sql", "--bogus"],
            &["unexpected argument '--bogus'", "Usage: sluice run"],
        ),
        (
            &["run", "--pipeline", "file-to-parquet"],
            &["--input <DIR>", "Usage: sluice run"],
        ),
        (
            &["run", "p.sql", "--progress", "xml"],
            &[
                "invalid value 'xml' for '--progress <MODE>'",
                "human, json, none",
            ],
        ),
        (
            &["run", "p.sql", "--set", "novalue"],
            &["write --set name=value"],
        ),
        (
            &["bench", "--workload", "nope"],
            &[
                "invalid value 'nope' for '--workload <WORKLOAD>'",
                "windowed",
            ],
        ),
        (&["conformance"], &["<PATH>..."]),
        (
            &["state", "read", "ckpt", "--batch", "x"],
            &["invalid value 'x' for '--batch <N>'"],
        ),
        (&["checkpoint", "describe"], &["<DIR>"]),
    ];
    for (args, wants) in cases {
        let o = sluice(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
        let err = text(&o.stderr);
        assert!(err.starts_with("error: "), "{args:?}:\n{err}");
        for w in *wants {
            assert!(err.contains(w), "{args:?}: no {w:?} in\n{err}");
        }
    }
}

/// Runs `sluice run` on `pipeline` with `env`, collecting stderr until `done` holds for it or
/// `within` passes; then kills it. Returns stderr.
fn stderr_until(
    pipeline: &Path,
    env: &[(&str, &str)],
    within: Duration,
    done: impl Fn(&str) -> bool,
) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.arg("run")
        .arg(pipeline)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let collected = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.stderr.take().unwrap();
    let sink = collected.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let deadline = Instant::now() + within;
    while Instant::now() < deadline && !done(&collected.lock().unwrap()) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    let out = collected.lock().unwrap().clone();
    out
}

/// A wrong bootstrap address is a warning within seconds (librdkafka's own connection error),
/// not 30 s of silence until the metadata request times out.
#[test]
fn a_kafka_broker_that_does_not_answer_is_warned_about_at_once() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("nobroker.sql");
    std::fs::write(
        &file,
        format!(
            "CREATE TABLE events WITH (connector = 'kafka', \
             'kafka.bootstrap.servers' = '127.0.0.1:1', subscribe = 'events');
             CREATE SINK copy WITH (connector = 'noop', checkpoint = '{}') AS
             SELECT CAST(value AS STRING) AS v FROM events;",
            root.path().join("ckpt").display()
        ),
    )
    .unwrap();
    let wanted = "Connect to ipv4#127.0.0.1:1 failed";
    let started = Instant::now();
    let err = stderr_until(
        &file,
        &[("RUST_LOG", "warn")],
        Duration::from_secs(10),
        |e| e.contains(wanted),
    );
    assert!(
        err.lines().any(|l| {
            // After the line's time (UTC, RFC 3339 with milliseconds).
            l.split_once(' ').is_some_and(|(ts, rest)| {
                ts.ends_with('Z') && rest.starts_with("warning: Kafka client: ")
            }) && l.contains(wanted)
        }),
        "no connection warning within 10 s:\n{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

const WINDOWED: &str = "SET 'spark.sql.shuffle.partitions' = '${partitions}';
CREATE TABLE events (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '10' MINUTE)
  WITH (connector = 'filesystem', path = '${events}', format = 'json');
CREATE SINK counts WITH (connector = 'noop', 'outputMode' = 'update',
  'trigger' = 'available-now', checkpoint = '${checkpoint}') AS
SELECT window.start AS `start`, count(*) AS count FROM events GROUP BY window(ts, '5 minutes');
";

fn run_windowed(root: &Path, partitions: &str, env: &[(&str, &str)]) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.arg("run")
        .arg(root.join("windowed.sql"))
        .arg("--set")
        .arg(format!("partitions={partitions}"))
        .arg("--set")
        .arg(format!("events={}", root.join("events").display()))
        .arg("--set")
        .arg(format!("checkpoint={}", root.join("ckpt").display()))
        .env_remove("RUST_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let err = text(&o.stderr);
    assert!(o.status.success(), "{o:?}\n{err}");
    err
}

/// Warnings are shown without RUST_LOG: the partition count pinned in the checkpoint wins over
/// the session's, and a torn offsets file is set aside; RUST_LOG=off hides them.
#[test]
fn pinned_partitions_and_torn_log_files_are_warned_about() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    std::fs::write(root.join("windowed.sql"), WINDOWED).unwrap();
    std::fs::create_dir_all(root.join("events")).unwrap();
    std::fs::write(
        root.join("events/1.json"),
        "{\"ts\": \"2026-09-15T12:01:00Z\"}\n",
    )
    .unwrap();
    let err = run_windowed(root, "2", &[]);
    assert!(!err.contains("warning:"), "{err}");
    assert!(root.join("ckpt/offsets/0").exists());

    let err = run_windowed(root, "3", &[]);
    let ckpt = root.join("ckpt");
    assert!(
        err.contains(&format!(
            "warning: spark.sql.shuffle.partitions is 2 in the checkpoint {} and 3 in the \
             session; the checkpoint's value is kept",
            ckpt.display()
        )),
        "{err}"
    );
    let err = run_windowed(root, "3", &[("RUST_LOG", "off")]);
    assert!(!err.contains("warning:"), "{err}");

    // A half-written offsets/N after the last batch (no commits/N): set aside, with a
    // warning, and batch N planned again.
    let next = std::fs::read_dir(ckpt.join("offsets"))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap()
        + 1;
    let torn = ckpt.join("offsets").join(next.to_string());
    std::fs::write(&torn, "v1\n{\"batchWatermarkMs\":").unwrap();
    let err = run_windowed(root, "2", &[]);
    assert!(
        err.contains(&format!(
            "warning: {} was incomplete (a write cut short); it is set aside as",
            torn.display()
        )),
        "{err}"
    );
    assert!(!torn.exists());
}

/// `sluice conformance --conf KEY=VALUE` sets the conf in every scenario's session: a valid
/// one keeps the scenario passing, an invalid budget fails it by the key's name, and an
/// argument without `=` is refused.
#[test]
fn conformance_runs_a_corpus_with_a_conf_applied() {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance/scenarios/dedup/dedup_without_watermark.json");
    let scenario = scenario.to_str().unwrap();
    let o = sluice(&["conformance", "--conf", "sluice.memory.limit=64m", scenario]);
    assert!(o.status.success(), "{o:?}");
    assert!(text(&o.stdout).contains("1 passed, 0 failed"), "{o:?}");
    let o = sluice(&["conformance", "--conf", "sluice.memory.limit=1k", scenario]);
    assert!(!o.status.success(), "{o:?}");
    let out = text(&o.stdout);
    assert!(
        out.contains("FAIL") && out.contains("sluice.memory.limit"),
        "{out}"
    );
    let o = sluice(&["conformance", "--conf", "no-equals-sign", scenario]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(text(&o.stderr).contains("--conf key=value"), "{o:?}");
}
