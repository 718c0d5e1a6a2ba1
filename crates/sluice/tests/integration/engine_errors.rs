//! Output-mode rules, concurrent checkpoint use, missing schema.

use sluice::OutputMode;

use crate::support::{dirs, session, SCHEMA};

#[test]
fn complete_mode_without_aggregation_fails_at_start_with_sparks_meaning() {
    let d = dirs();
    let s = session();
    let err = s
        .read_stream()
        .format("json")
        .schema(SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .output_mode(OutputMode::Complete)
        .format("console")
        .start()
        .unwrap_err();
    assert_eq!(err.class(), "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION");
    assert!(err
        .message()
        .contains("Complete output mode not supported when there are no streaming aggregations"));
}

#[test]
fn a_stream_without_schema_fails_at_definition() {
    let d = dirs();
    let err = session()
        .read_stream()
        .format("json")
        .load(d.input.display().to_string())
        .unwrap_err();
    assert!(err.message().to_lowercase().contains("schema"), "{err}");
}

#[test]
fn a_second_query_on_a_checkpoint_in_use_is_refused() {
    let d = dirs();
    let s = session();
    let start = || {
        s.read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .format("parquet")
            .option("path", d.output.display())
            .option("checkpointLocation", d.checkpoint.display())
            .start()
    };
    let first = start().unwrap();
    let err = start().unwrap_err();
    assert_eq!(err.class(), "CONCURRENT_QUERY", "{err}");
    first.stop();
    assert!(first.exception().is_none());
    start().unwrap().stop();
}

#[test]
fn the_file_sink_refuses_update_mode() {
    let d = dirs();
    let err = session()
        .read_stream()
        .format("json")
        .schema(SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .output_mode(OutputMode::Update)
        .format("parquet")
        .option("path", d.output.display())
        .option("checkpointLocation", d.checkpoint.display())
        .start()
        .unwrap_err();
    assert!(err.message().contains("does not support"), "{err}");
}
