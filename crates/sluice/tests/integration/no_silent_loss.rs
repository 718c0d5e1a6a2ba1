//! Paths where Spark loses rows without a word, each refused or made whole (issue 18).

use sluice::error::class;

use crate::support::{
    add_file, committed_rows, dirs, run_file_to_parquet, session, BATCH1, BATCH2, BATCH3,
};

const COLUMNS: [&str; 2] = ["user", "amount"];

/// The seed query with an extra sink option, on the given checkpoint.
fn run_with(
    d: &crate::support::Dirs,
    checkpoint: &std::path::Path,
    options: &[(&str, &str)],
) -> sluice::Result<()> {
    let s = session();
    let mut w = s
        .read_stream()
        .format("json")
        .schema(crate::support::SCHEMA)?
        .option("maxFilesPerTrigger", "1")
        .load(d.input.display().to_string())?
        .select(["event_time", "user", "amount"])?
        .write_stream()
        .format("parquet")
        .option("path", d.output.display())
        .option("checkpointLocation", checkpoint.display())
        .trigger(sluice::Trigger::AvailableNow);
    for (k, v) in options {
        w = w.option(*k, *v);
    }
    w.start()?.await_termination()
}

fn seed_files(d: &crate::support::Dirs) {
    add_file(&d.input, "1.json", BATCH1, 1);
    add_file(&d.input, "2.json", BATCH2, 2);
}

#[test]
fn a_new_checkpoint_on_a_written_folder_is_refused_and_the_option_writes_every_row() {
    let d = dirs();
    seed_files(&d);
    run_with(&d, &d.checkpoint, &[]).unwrap();
    assert_eq!(committed_rows(&d.output, &COLUMNS).len(), 5);

    // A second query (its own checkpoint) on the same folder: Spark skips its batches 0 and 1
    // because the manifest has them, writing none of its rows.
    let other = d.checkpoint.with_file_name("other-checkpoint");
    let e = run_with(&d, &other, &[]).unwrap_err();
    assert!(e.is(class::FILE_SINK_FOREIGN_OUTPUT), "{e}");
    assert!(e.message().contains("batches 0..=1"), "{e}");
    assert!(e.message().contains("appendToExistingOutput"), "{e}");
    // The fix the message gives: every row of the second query is written after the first's.
    run_with(&d, &other, &[("appendToExistingOutput", "true")]).unwrap();
    assert_eq!(committed_rows(&d.output, &COLUMNS).len(), 10);
    // It goes on from there on a restart, without the option.
    add_file(&d.input, "3.json", BATCH3, 3);
    run_with(&d, &other, &[]).unwrap();
    assert_eq!(committed_rows(&d.output, &COLUMNS).len(), 11);
    // And the first query, restarted, finds a manifest ahead of its checkpoint.
    let e = run_with(&d, &d.checkpoint, &[]).unwrap_err();
    assert!(e.is(class::FILE_SINK_MANIFEST_AHEAD), "{e}");
}

#[test]
fn a_checkpoint_whose_logs_were_deleted_does_not_skip_its_new_rows() {
    let d = dirs();
    seed_files(&d);
    run_file_to_parquet(&session(), &d).unwrap();
    let before = committed_rows(&d.output, &COLUMNS);
    std::fs::remove_dir_all(d.checkpoint.join("offsets")).unwrap();
    std::fs::remove_dir_all(d.checkpoint.join("commits")).unwrap();
    std::fs::remove_dir_all(d.checkpoint.join("sources")).unwrap();
    let e = run_with(&d, &d.checkpoint, &[]).unwrap_err();
    assert!(e.is(class::FILE_SINK_MANIFEST_AHEAD), "{e}");
    assert!(
        e.message()
            .contains("has planned no batch (no offsets/ files)"),
        "{e}"
    );
    assert_eq!(committed_rows(&d.output, &COLUMNS), before);
    // Following the message: the re-read files are written again, after the old batches.
    run_with(&d, &d.checkpoint, &[("appendToExistingOutput", "true")]).unwrap();
    assert_eq!(committed_rows(&d.output, &COLUMNS).len(), before.len() + 5);
}

#[test]
fn a_checkpoint_without_a_record_adopts_the_manifest_it_planned_and_a_format_change_is_refused() {
    let d = dirs();
    seed_files(&d);
    run_with(&d, &d.checkpoint, &[]).unwrap();
    // A checkpoint written by Spark (or an earlier Sluice) has no record of the folder: its
    // planned batches cover the manifest, so it goes on as Spark would.
    std::fs::remove_file(d.checkpoint.join("sluice/file-sink.json")).unwrap();
    add_file(&d.input, "3.json", BATCH3, 3);
    run_with(&d, &d.checkpoint, &[]).unwrap();
    assert_eq!(committed_rows(&d.output, &COLUMNS).len(), 6);
    assert!(d.checkpoint.join("sluice/file-sink.json").is_file());

    add_file(&d.input, "4.json", BATCH3, 4);
    let s = session();
    let e = s
        .read_stream()
        .format("json")
        .schema(crate::support::SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .format("json")
        .option("path", d.output.display())
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(sluice::Trigger::AvailableNow)
        .start()
        .and_then(|q| q.await_termination())
        .unwrap_err();
    assert!(e.is(class::FILE_SINK_FORMAT_CHANGED), "{e}");
    assert!(e.message().contains("Keep format(\"parquet\")"), "{e}");
}

#[test]
fn a_sink_or_checkpoint_writing_into_the_source_folder_is_refused_at_start() {
    let d = dirs();
    seed_files(&d);
    let run = |out: &std::path::Path, checkpoint: &std::path::Path| {
        session()
            .read_stream()
            .format("json")
            .schema(crate::support::SCHEMA)?
            .load(d.input.display().to_string())?
            .write_stream()
            .format("json")
            .option("path", out.display())
            .option("checkpointLocation", checkpoint.display())
            .trigger(sluice::Trigger::AvailableNow)
            .start()?
            .await_termination()
    };
    // Spark reads its own output again, batch after batch.
    let e = run(&d.input, &d.checkpoint).unwrap_err();
    assert!(e.is(class::SINK_WRITES_INTO_SOURCE), "{e}");
    assert!(e.message().contains("stream_in-out"), "{e}");
    // The same folder written another way (a trailing `/.`) is still the same folder.
    let e = run(&d.input.join("."), &d.checkpoint).unwrap_err();
    assert!(e.is(class::SINK_WRITES_INTO_SOURCE), "{e}");
    let e = run(&d.output, &d.input).unwrap_err();
    assert!(e.is(class::CHECKPOINT_IN_SOURCE), "{e}");
    // Nothing was written into the source folder: still its two files.
    assert_eq!(std::fs::read_dir(&d.input).unwrap().count(), 2);
    // The fix the message gives works.
    run(&d.input.with_file_name("stream_in-out"), &d.checkpoint).unwrap();
}

#[test]
fn a_missing_source_log_or_manifest_file_is_refused_and_restoring_it_goes_on() {
    let d = dirs();
    seed_files(&d);
    add_file(&d.input, "3.json", BATCH3, 3);
    run_with(&d, &d.checkpoint, &[]).unwrap();
    let rows = committed_rows(&d.output, &COLUMNS);
    assert_eq!(rows.len(), 6);
    add_file(&d.input, "4.json", BATCH3, 4);

    // sources/0/1 lost: Spark reads 2.json again.
    let log = d.checkpoint.join("sources/0/1");
    let saved = std::fs::read(&log).unwrap();
    std::fs::remove_file(&log).unwrap();
    let e = run_with(&d, &d.checkpoint, &[]).unwrap_err();
    assert!(e.is(class::CHECKPOINT_MISSING_SOURCE_LOG), "{e}");
    assert!(e.message().contains("sources/0/1"), "{e}");
    std::fs::write(&log, &saved).unwrap();

    // _spark_metadata/1 lost: its files would drop out of every read.
    let manifest = d.output.join("_spark_metadata/1");
    let saved = std::fs::read(&manifest).unwrap();
    std::fs::remove_file(&manifest).unwrap();
    let e = run_with(&d, &d.checkpoint, &[]).unwrap_err();
    assert!(e.is(class::FILE_SINK_MANIFEST_GAP), "{e}");
    assert!(e.message().contains("_spark_metadata/1"), "{e}");
    // The fix both messages give: restore the file; the query goes on, each row once.
    std::fs::write(&manifest, &saved).unwrap();
    run_with(&d, &d.checkpoint, &[]).unwrap();
    let after = committed_rows(&d.output, &COLUMNS);
    assert_eq!(after.len(), 7, "{after:?}");
}

fn log_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort_by_key(|n| {
        n.trim_end_matches(".compact")
            .parse::<u64>()
            .unwrap_or(u64::MAX)
    });
    names
}

/// Issue 18 part 4: the file sink's manifest and the file source's log kept every file and
/// every compaction (quadratic growth). As Spark, files a retained compaction supersedes are
/// deleted once older than the cleanup delay; every row stays readable and a restart goes on.
#[test]
fn compacted_logs_delete_superseded_files_and_lose_nothing() {
    let d = dirs();
    let n = 45u64;
    for i in 0..n {
        add_file(&d.input, &format!("{i:03}.json"), BATCH3, i);
    }
    let build = |delay: &str| {
        sluice::Session::builder()
            .config("spark.sql.streaming.minBatchesToRetain", 5)
            .config("spark.sql.streaming.fileSink.log.cleanupDelay", delay)
            .config("spark.sql.streaming.fileSource.log.cleanupDelay", delay)
            .build()
            .unwrap()
    };
    run_file_to_parquet(&build("0"), &d).unwrap();
    assert_eq!(committed_rows(&d.output, &COLUMNS).len(), n as usize);
    // Batch 44 retains 40..=44: the compaction 39 and the files after it.
    let expected = ["39.compact", "40", "41", "42", "43", "44"];
    assert_eq!(log_files(&d.output.join("_spark_metadata")), expected);
    assert_eq!(log_files(&d.checkpoint.join("sources/0")), expected);

    // A restart reads on from the compaction; nothing is read twice or skipped.
    add_file(&d.input, "zzz.json", BATCH1, n + 1);
    run_file_to_parquet(&build("0"), &d).unwrap();
    assert_eq!(committed_rows(&d.output, &COLUMNS).len(), n as usize + 2);

    // Within Spark's default delay (10 minutes) nothing more is deleted.
    for i in 0..12u64 {
        add_file(&d.input, &format!("zz{i:02}.json"), BATCH3, n + 2 + i);
    }
    run_file_to_parquet(&build("10m"), &d).unwrap();
    assert_eq!(committed_rows(&d.output, &COLUMNS).len(), n as usize + 14);
    assert_eq!(
        log_files(&d.output.join("_spark_metadata")).len(),
        expected.len() + 13
    );
}

/// Issue 18 part 2: a garbled manifest or source log file was noticed batches later (at the next
/// compaction), and the fix the message gave (delete it) dropped rows. Both are checked at
/// start, named, and each fix the messages give is followed here.
#[test]
fn a_garbled_manifest_or_source_log_is_named_at_start_and_each_fix_works() {
    let d = dirs();
    seed_files(&d);
    run_with(&d, &d.checkpoint, &[]).unwrap();
    assert_eq!(committed_rows(&d.output, &COLUMNS).len(), 5);
    add_file(&d.input, "3.json", BATCH3, 3);

    // The newest manifest file, whose batch is committed: restore it (deleting would lose rows).
    let manifest = d.output.join("_spark_metadata/1");
    let saved = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, "v1\n{\"path\":\"file:///x\",\"si").unwrap();
    let e = run_with(&d, &d.checkpoint, &[]).unwrap_err();
    assert!(e.is(class::FILE_SINK_MANIFEST_CORRUPT), "{e}");
    assert!(e.message().contains("_spark_metadata/1"), "{e}");
    assert!(e.message().contains("Restore it from a backup"), "{e}");
    assert!(e.message().contains("has no commits/1"), "{e}");
    std::fs::write(&manifest, &saved).unwrap();
    run_with(&d, &d.checkpoint, &[]).unwrap();
    assert_eq!(committed_rows(&d.output, &COLUMNS).len(), 6);

    // The newest manifest file of a batch the checkpoint did not commit: deleting it is safe,
    // the batch runs again and writes its files anew.
    add_file(&d.input, "4.json", BATCH3, 4);
    run_with(&d, &d.checkpoint, &[]).unwrap();
    std::fs::remove_file(d.checkpoint.join("commits/3")).unwrap();
    let manifest = d.output.join("_spark_metadata/3");
    std::fs::write(&manifest, "garbage").unwrap();
    let e = run_with(&d, &d.checkpoint, &[]).unwrap_err();
    assert!(e.is(class::FILE_SINK_MANIFEST_CORRUPT), "{e}");
    std::fs::remove_file(&manifest).unwrap();
    run_with(&d, &d.checkpoint, &[]).unwrap();
    assert_eq!(
        committed_rows(&d.output, &COLUMNS).len(),
        7,
        "batch 3 written once"
    );

    // A garbled file source log file: restore it (deleting it would read its files again).
    let log = d.checkpoint.join("sources/0/2");
    let saved = std::fs::read(&log).unwrap();
    std::fs::write(&log, "v1\nnot json").unwrap();
    let e = run_with(&d, &d.checkpoint, &[]).unwrap_err();
    assert!(e.is(class::CHECKPOINT_CORRUPT_LOG), "{e}");
    assert!(e.message().contains("sources/0/2"), "{e}");
    assert!(e.message().contains("Restore it from a backup"), "{e}");
    std::fs::write(&log, &saved).unwrap();
    add_file(&d.input, "5.json", BATCH3, 5);
    run_with(&d, &d.checkpoint, &[]).unwrap();
    assert_eq!(
        committed_rows(&d.output, &COLUMNS).len(),
        8,
        "each row once"
    );
}

/// Issue 18 part 6: a window size or type changed on restart was accepted (the state of
/// 10-minute windows merged into 5-minute ones: wrong rows out). It is refused at the first
/// batch, naming both; the same windows restart as before.
#[test]
fn a_window_changed_on_restart_is_refused_and_the_same_window_goes_on() {
    let d = dirs();
    add_file(&d.input, "1.json", BATCH1, 1);
    let run = |window: sluice::Expr| -> sluice::Result<()> {
        session()
            .read_stream()
            .format("json")
            .schema(crate::support::SCHEMA)?
            .load(d.input.display().to_string())?
            .with_watermark("event_time", "1 minute")?
            .group_by([window, sluice::col("user")])
            .agg([datafusion::functions_aggregate::expr_fn::count(sluice::lit(1)).alias("n")])?
            .write_stream()
            .output_mode(sluice::OutputMode::Append)
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(sluice::Trigger::AvailableNow)
            .start()?
            .await_termination()
    };
    let ten = || sluice::window(sluice::col("event_time"), "10 minutes");
    run(ten()).unwrap();
    add_file(&d.input, "2.json", BATCH2, 2);
    let e = run(sluice::window(sluice::col("event_time"), "5 minutes")).unwrap_err();
    assert!(e.is(class::STATE_SCHEMA_INCOMPATIBLE), "{e}");
    assert!(e.message().contains("size 10 minutes"), "{e}");
    assert!(e.message().contains("size 5 minutes"), "{e}");
    let e = run(sluice::session_window(
        sluice::col("event_time"),
        "10 minutes",
    ))
    .unwrap_err();
    assert!(e.is(class::STATE_SCHEMA_INCOMPATIBLE), "{e}");
    run(ten()).unwrap();
}

/// Issue 18 part 7: a file appended to after it was listed lost the appended rows silently.
/// The listed size and modification time are in the source log; a later listing that finds
/// them changed warns and counts it (`numFilesChanged`), or fails with `failOnFileChange`.
#[test]
fn a_file_changed_after_it_was_read_is_counted_or_fails_the_query() {
    let d = dirs();
    add_file(&d.input, "1.json", BATCH1, 1);
    let run = |options: &[(&str, &str)]| -> sluice::Result<sluice::StreamingQuery> {
        let mut r = session()
            .read_stream()
            .format("json")
            .schema(crate::support::SCHEMA)?;
        for (k, v) in options {
            r = r.option(*k, *v);
        }
        let q = r
            .load(d.input.display().to_string())?
            .write_stream()
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(sluice::Trigger::AvailableNow)
            .start()?;
        q.await_termination()?;
        Ok(q)
    };
    run(&[]).unwrap();
    let logged = std::fs::read_to_string(d.checkpoint.join("sources/0/0")).unwrap();
    assert!(
        logged.contains(&format!("\"size\":{}", BATCH1.len())),
        "{logged}"
    );
    // Appended to in place, with a later modification time.
    let mut text = BATCH1.to_string();
    text.push_str(BATCH3);
    add_file(&d.input, "1.json", &text, 10);
    add_file(&d.input, "2.json", BATCH2, 11);
    let q = run(&[]).unwrap();
    let p = q.recent_progress();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].num_input_rows, 2, "2.json only: 1.json is read once");
    assert_eq!(
        p[0].sources[0]
            .metrics
            .get("numFilesChanged")
            .map(String::as_str),
        Some("1")
    );
    add_file(&d.input, "3.json", BATCH3, 12);
    let e = run(&[("failOnFileChange", "true")]).unwrap_err();
    assert!(e.is(class::FILE_CHANGED_AFTER_READ), "{e}");
    assert!(e.message().contains("1.json"), "{e}");
    assert!(e.message().contains("new name"), "{e}");
}
