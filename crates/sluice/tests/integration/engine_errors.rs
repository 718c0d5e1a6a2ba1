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

/// Spark's limit rules on streams (PySpark 3.5.7): `ORDER BY .. LIMIT` over a complete-mode
/// aggregation emits the top rows of the whole result each batch; update mode refuses limits;
/// an OFFSET is refused in every mode.
#[test]
fn limits_on_streams_follow_sparks_rules() {
    use std::sync::{Arc, Mutex};
    let d = dirs();
    let s = session();
    s.read_stream()
        .format("json")
        .schema("k STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .create_or_replace_temp_view("s")
        .unwrap();
    crate::support::add_file(
        &d.input,
        "1.json",
        "{\"k\": \"a\"}\n{\"k\": \"b\"}\n{\"k\": \"b\"}\n{\"k\": \"c\"}\n",
        1,
    );
    let start = |sql: &str, mode: OutputMode| {
        let rows: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = rows.clone();
        let q = s.sql(sql).and_then(|f| {
            f.write_stream()
                .output_mode(mode)
                .option(
                    "checkpointLocation",
                    d.checkpoint.join(format!("{mode:?}")).display(),
                )
                .trigger(sluice::Trigger::AvailableNow)
                .foreach_batch(move |data, _| {
                    let text = arrow::util::pretty::pretty_format_batches(
                        &data.batches().cloned().collect::<Vec<_>>(),
                    )
                    .unwrap()
                    .to_string();
                    sink.lock().unwrap().push(text);
                    Ok(())
                })
                .start()
        })?;
        q.await_termination()?;
        let p = q.recent_progress();
        let total = p[0].state_operators[0].num_rows_total;
        let out = rows.lock().unwrap().join("\n");
        Ok::<_, sluice::SluiceError>((out, total))
    };
    let (out, total) = start(
        "SELECT k, count(*) AS c FROM s GROUP BY k ORDER BY c DESC, k LIMIT 2",
        OutputMode::Complete,
    )
    .unwrap();
    assert!(
        out.contains("| b | 2 |") && out.contains("| a | 1 |"),
        "{out}"
    );
    assert!(!out.contains("| c | 1 |"), "only the top 2 rows: {out}");
    assert_eq!(total, 3, "the state keeps every key");
    let err = start(
        "SELECT k, count(*) AS c FROM s GROUP BY k LIMIT 1",
        OutputMode::Update,
    )
    .unwrap_err();
    assert_eq!(err.class(), "UNSUPPORTED_STREAMING_OPERATION", "{err}");
    assert!(
        err.message().contains(
            "Limits are not supported on streaming DataFrames/Datasets in Update output mode"
        ),
        "{err}"
    );
    let err = start(
        "SELECT k, count(*) AS c FROM s GROUP BY k ORDER BY k LIMIT 1 OFFSET 1",
        OutputMode::Complete,
    )
    .unwrap_err();
    assert!(
        err.message()
            .contains("Offset is not supported on streaming DataFrames/Datasets"),
        "{err}"
    );
}
