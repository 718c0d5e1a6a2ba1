//! `sluice checkpoint describe` and `sluice state read` on a checkpoint made by a test query
//! (the seed's windowed count per user), through the built binary.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use sluice::{col, OutputMode, Trigger};

use crate::support::{add_file, session};

/// Two runs of the windowed count; returns the checkpoint's last committed batch.
fn windowed_count_checkpoint(input: &Path, checkpoint: &Path) -> u64 {
    std::fs::create_dir_all(input).unwrap();
    let files = [
        "{\"ts\": \"2026-09-15T12:01:00Z\", \"user\": \"alice\"}\n\
         {\"ts\": \"2026-09-15T12:02:00Z\", \"user\": \"alice\"}\n\
         {\"ts\": \"2026-09-15T12:07:00Z\", \"user\": \"bob\"}\n",
        "{\"ts\": \"2026-09-15T12:03:00Z\", \"user\": \"alice\"}\n\
         {\"ts\": \"2026-09-15T12:06:00Z\", \"user\": \"bob\"}\n",
    ];
    for (i, body) in files.iter().enumerate() {
        add_file(input, &format!("{i}.json"), body, i as u64);
        let s = session();
        s.read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING")
            .unwrap()
            .load(input.display().to_string())
            .unwrap()
            .with_watermark("ts", "10 minutes")
            .unwrap()
            .group_by([sluice::window(col("ts"), "5 minutes"), col("user")])
            .count()
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Update)
            .format("noop")
            .option("checkpointLocation", checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap()
            .await_termination()
            .unwrap();
    }
    sluice::checkpoint::CheckpointDir::new(checkpoint)
        .commit_log()
        .latest_id()
        .unwrap()
        .unwrap()
}

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}, stderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn describe_and_read_a_windowed_count_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let ck = tmp.path().join("checkpoint");
    let last = windowed_count_checkpoint(&tmp.path().join("in"), &ck);
    let ck_arg = ck.to_str().unwrap();
    let query_id = std::fs::read_to_string(ck.join("metadata")).unwrap();

    let text = stdout(&sluice(&["checkpoint", "describe", ck_arg]));
    for needle in [
        format!("last committed  {last}"),
        "stateStoreSave".to_string(),
        "window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, user STRING".to_string(),
        "spark.sql.shuffle.partitions = 2".to_string(),
        // Max event time 12:07, delay 10 minutes.
        "next batch runs with 2026-09-15T11:57:00.000Z".to_string(),
    ] {
        assert!(text.contains(&needle), "{needle:?} in\n{text}");
    }
    assert!(query_id.contains(
        text.lines()
            .find_map(|l| l.strip_prefix("query id"))
            .unwrap()
            .trim()
    ));

    let json: serde_json::Value = serde_json::from_str(&stdout(&sluice(&[
        "checkpoint",
        "describe",
        ck_arg,
        "--json",
    ])))
    .unwrap();
    assert_eq!(json["batches"]["lastCommitted"], serde_json::json!(last));
    assert_eq!(json["batches"]["uncommitted"], serde_json::Value::Null);
    assert_eq!(json["operators"][0]["name"], "stateStoreSave");
    assert_eq!(
        json["operators"][0]["partitions"].as_array().unwrap().len(),
        2
    );
    assert_eq!(json["sources"][0]["kind"], "file");

    // The table: every window of every user with its count as of the last batch.
    let table = stdout(&sluice(&["state", "read", ck_arg]));
    assert!(
        table.starts_with(&format!(
            "state of operator 0 (stateStoreSave) as of batch {last} (state version {}), 2 \
             partition(s), 2 row(s)\n",
            last + 1
        )),
        "{table}"
    );
    let header = table.lines().nth(2).unwrap();
    let cells: Vec<&str> = header.split('|').map(str::trim).collect();
    assert_eq!(&cells[1..4], ["partition", "window", "user"], "{table}");
    let mut rows: Vec<String> = table
        .lines()
        .skip(4)
        .filter(|l| l.starts_with("| "))
        .map(|l| {
            let c: Vec<&str> = l.split('|').map(str::trim).collect();
            format!("{} {} {}", c[2], c[3], c[4])
        })
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            "{start: 2026-09-15T12:00:00, end: 2026-09-15T12:05:00} alice 3",
            "{start: 2026-09-15T12:05:00, end: 2026-09-15T12:10:00} bob 2",
        ],
        "{table}"
    );

    // JSON lines of an earlier batch: batch 0 counted the first file only.
    let lines = stdout(&sluice(&[
        "state", "read", ck_arg, "--batch", "0", "--json",
    ]));
    let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
    for line in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        // The count accumulator's state column: the one that is not partition, window, user.
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), 4, "{line}");
        let n = obj
            .iter()
            .find(|(k, _)| !["partition", "window", "user"].contains(&k.as_str()))
            .and_then(|(_, n)| n.as_i64())
            .unwrap();
        counts.insert(
            (
                v["window"]["start"].as_str().unwrap().to_string(),
                v["user"].as_str().unwrap().to_string(),
            ),
            n,
        );
        assert!(v["partition"].as_u64().unwrap() < 2);
    }
    assert_eq!(
        counts,
        BTreeMap::from([
            (("2026-09-15T12:00:00".into(), "alice".into()), 2),
            (("2026-09-15T12:05:00".into(), "bob".into()), 1),
        ])
    );

    println!("{text}\n{table}\n{lines}");

    // Errors: exit code 2, the class and the fix on stderr, nothing on stdout.
    for (args, class) in [
        (
            vec!["state", "read", ck_arg, "--operator", "4"],
            "STATE_OPERATOR_NOT_FOUND",
        ),
        (
            vec!["state", "read", ck_arg, "--batch", "99"],
            "STATE_BATCH_NOT_COMMITTED",
        ),
        (
            vec!["checkpoint", "describe", tmp.path().to_str().unwrap()],
            "CHECKPOINT_NOT_FOUND",
        ),
        (vec!["state", "read", ck_arg, "--batch", "x"], "--batch"),
    ] {
        let o = sluice(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(o.stdout.is_empty());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(class), "{args:?}: {err}");
    }
}
