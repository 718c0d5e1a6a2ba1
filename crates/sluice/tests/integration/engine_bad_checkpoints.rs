//! Damaged checkpoints: a torn last offsets file is set aside, damaged logs and a missing
//! state delta fail naming the file and the way out, a changed source type or file sink path is
//! refused at start.

use sluice::{col, OutputMode, Trigger};

use crate::support::{
    add_file, committed_rows, dirs, run_file_to_parquet, session, Dirs, BATCH1, BATCH2, BATCH3,
    SCHEMA,
};

fn two_batches() -> Dirs {
    let d = dirs();
    add_file(&d.input, "batch1.json", BATCH1, 1);
    add_file(&d.input, "batch2.json", BATCH2, 2);
    run_file_to_parquet(&session(), &d).unwrap();
    d
}

#[test]
fn a_torn_last_offsets_file_is_set_aside_and_its_batch_planned_again() {
    let d = two_batches();
    // A crash while writing offsets/2 left half a file (and no commits/2).
    std::fs::write(
        d.checkpoint.join("offsets/2"),
        "v1\n{\"batchWatermarkMs\":0,\"batchTi",
    )
    .unwrap();
    add_file(&d.input, "batch3.json", BATCH3, 3);
    let q = run_file_to_parquet(&session(), &d).unwrap();
    assert_eq!(q.recent_progress()[0].batch_id, 2);
    assert_eq!(
        committed_rows(&d.output, &["user", "amount"]).len(),
        4,
        "nothing lost, nothing twice"
    );
    let aside = std::fs::read_dir(d.checkpoint.join("offsets"))
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with(".2.torn-"));
    assert!(aside, "the torn file is kept for inspection");
}

#[test]
fn damaged_logs_fail_with_the_file_named_and_the_way_out() {
    // A garbled committed offsets file is not a torn tail: it is an error naming the file.
    let d = two_batches();
    std::fs::write(d.checkpoint.join("offsets/1"), "v1\nnot json\n{}").unwrap();
    let err = run_file_to_parquet(&session(), &d).unwrap_err();
    assert_eq!(err.class(), "CHECKPOINT_CORRUPT_LOG", "{err}");
    assert!(
        err.message().contains("offsets/1") || err.message().contains("offsets\\1"),
        "{err}"
    );

    // A gap: commits/1 lost while offsets/2 exists.
    let d = two_batches();
    std::fs::copy(
        d.checkpoint.join("offsets/1"),
        d.checkpoint.join("offsets/2"),
    )
    .unwrap();
    std::fs::remove_file(d.checkpoint.join("commits/1")).unwrap();
    let err = run_file_to_parquet(&session(), &d).unwrap_err();
    assert_eq!(err.class(), "CHECKPOINT_INCONSISTENT", "{err}");

    // A log written by a newer version.
    let d = two_batches();
    let text = std::fs::read_to_string(d.checkpoint.join("offsets/1"))
        .unwrap()
        .replacen("v1", "v9", 1);
    std::fs::write(d.checkpoint.join("offsets/1"), text).unwrap();
    let err = run_file_to_parquet(&session(), &d).unwrap_err();
    assert_eq!(err.class(), "CHECKPOINT_UNSUPPORTED_VERSION", "{err}");

    // The metadata file lost while the logs remain.
    let d = two_batches();
    std::fs::remove_file(d.checkpoint.join("metadata")).unwrap();
    let err = run_file_to_parquet(&session(), &d).unwrap_err();
    assert_eq!(
        err.class(),
        "STREAMING_CHECKPOINT_MISSING_METADATA_FILE",
        "{err}"
    );
}

#[test]
fn a_missing_state_delta_names_the_version_and_directory() {
    let d = dirs();
    let run = || {
        let q = session()
            .read_stream()
            .format("json")
            .schema("user STRING")
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .group_by([col("user")])
            .count()
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Update)
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        q.await_termination()
    };
    add_file(&d.input, "1.json", "{\"user\": \"a\"}\n", 1);
    run().unwrap();
    std::fs::remove_file(d.checkpoint.join("state/0/0/1.delta")).unwrap();
    add_file(
        &d.input,
        "2.json",
        "{\"user\": \"a\"}\n{\"user\": \"b\"}\n",
        2,
    );
    let err = run().unwrap_err();
    assert_eq!(err.class(), "STATE_STORE_VERSION_MISSING", "{err}");
    assert!(err.message().contains("state"), "{err}");
}

#[test]
fn changing_the_source_type_or_the_file_sink_path_is_refused_at_start() {
    let d = two_batches();
    let err = session()
        .read_stream()
        .format("rate-micro-batch")
        .option("rowsPerBatch", "1")
        .load_source()
        .unwrap()
        .write_stream()
        .format("parquet")
        .option("path", d.output.display())
        .option("checkpointLocation", d.checkpoint.display())
        .start()
        .unwrap_err();
    assert_eq!(err.class(), "STREAMING_QUERY_SOURCES_CHANGED", "{err}");
    let err = session()
        .read_stream()
        .format("json")
        .schema(SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .format("parquet")
        .option("path", d.output.join("elsewhere").display())
        .option("checkpointLocation", d.checkpoint.display())
        .start()
        .unwrap_err();
    assert_eq!(err.class(), "STREAMING_QUERY_SINK_CHANGED", "{err}");
}
