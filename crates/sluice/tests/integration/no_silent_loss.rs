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
