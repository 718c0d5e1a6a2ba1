//! The sessionization example (GroupState, event-time timeouts), with a restart
//! mid-session; processing-time timeouts; output-mode rules.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::{OutputMode, Trigger};

use crate::support::{dirs, session};

// The example itself (`cargo run -p sluice --example sessionization`), with its own `add_file`
// (which returns an io::Result).
#[path = "../../examples/sessionization.rs"]
mod sessionization;
use sessionization::{add_file, example_files, run_once, ClosedSession};

fn minute(m: i64) -> i64 {
    (1_777_629_600 + m * 60) * 1_000_000 // 2026-05-01T10:00:00Z + m minutes, µs
}

fn sorted(mut v: Vec<ClosedSession>) -> Vec<ClosedSession> {
    v.sort();
    v
}

#[test]
fn sessions_close_by_event_time_timeout_across_restarts() {
    let d = dirs();
    let files = example_files();
    // Restart after every file: the open sessions survive in the checkpoint.
    let mut restarted = Vec::new();
    for (i, body) in files.iter().enumerate() {
        add_file(&d.input, &format!("{i}.json"), body, i as u64).unwrap();
        let closed = run_once(&d.input, &d.checkpoint).unwrap();
        if i < 2 {
            assert!(
                closed.is_empty(),
                "no session closes before the watermark passes its gap"
            );
        }
        restarted.extend(closed);
    }
    let expected = vec![
        ("alice".to_string(), minute(0), minute(8), 3),
        ("bob".to_string(), minute(1), minute(1), 1),
        ("carol".to_string(), minute(9), minute(9), 1),
    ];
    assert_eq!(sorted(restarted), expected);

    // The same events in one run give the same sessions.
    let d2 = dirs();
    for (i, body) in files.iter().enumerate() {
        add_file(&d2.input, &format!("{i}.json"), body, i as u64).unwrap();
    }
    assert_eq!(
        sorted(run_once(&d2.input, &d2.checkpoint).unwrap()),
        expected
    );
}

#[test]
fn event_time_timeouts_need_a_watermark_and_modes_must_agree() {
    use sluice::{GroupState, GroupStateTimeout};
    let d = dirs();
    let s = session();
    let frame = s
        .read_stream()
        .format("json")
        .schema("ts TIMESTAMP, user STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap();
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("n", arrow::datatypes::DataType::Int64, true),
    ]));
    let err = frame
        .group_by_key(["user"])
        .flat_map_groups_with_state(
            schema.clone(),
            OutputMode::Append,
            GroupStateTimeout::EventTimeTimeout,
            |_, _, _: &mut GroupState<i64>| Ok(vec![]),
        )
        .unwrap_err();
    assert!(
        err.message().contains("Watermark must be specified"),
        "{err}"
    );
    let q = frame
        .group_by_key(["user"])
        .flat_map_groups_with_state(
            schema,
            OutputMode::Update,
            GroupStateTimeout::NoTimeout,
            |_, _, _: &mut GroupState<i64>| Ok(vec![]),
        )
        .unwrap()
        .write_stream()
        .output_mode(OutputMode::Append)
        .format("console")
        .start()
        .unwrap_err();
    assert_eq!(q.class(), "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION");
}

#[test]
fn processing_time_timeouts_fire_in_a_later_no_data_batch() {
    use sluice::{GroupState, GroupStateTimeout};
    let d = dirs();
    crate::support::add_file(
        &d.input,
        "1.json",
        "{\"ts\": \"2026-05-01T10:00:00Z\", \"user\": \"a\"}\n",
        1,
    );
    let s = session();
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("user", arrow::datatypes::DataType::Utf8, true),
        arrow::datatypes::Field::new("timed_out", arrow::datatypes::DataType::Boolean, true),
    ]));
    let out_schema = schema.clone();
    let seen: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
    let sink = seen.clone();
    let q = s
        .read_stream()
        .format("json")
        .schema("ts TIMESTAMP, user STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .group_by_key(["user"])
        .map_groups_with_state(
            schema,
            GroupStateTimeout::ProcessingTimeTimeout,
            move |key, _rows, st: &mut GroupState<i64>| {
                let timed_out = st.has_timed_out();
                if timed_out {
                    st.remove();
                } else {
                    st.update(st.get().copied().unwrap_or(0) + 1);
                    st.set_timeout_duration(Duration::from_millis(50))?;
                }
                Ok(arrow::array::RecordBatch::try_new(
                    out_schema.clone(),
                    vec![
                        Arc::new(arrow::array::StringArray::from(vec![key[0].to_string()])),
                        Arc::new(arrow::array::BooleanArray::from(vec![timed_out])),
                    ],
                )?)
            },
        )
        .unwrap()
        .write_stream()
        .output_mode(OutputMode::Update)
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::ProcessingTime(Duration::from_millis(20)))
        .foreach_batch(move |data, id| {
            sink.lock().unwrap().push((id, data.num_rows()));
            Ok(())
        })
        .start()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    q.stop();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.first(), Some(&(0, 1)), "the key's first call");
    assert_eq!(
        seen.get(1),
        Some(&(1, 1)),
        "its timeout, in a no-data batch: {seen:?}"
    );
    let p = q.recent_progress();
    assert_eq!(p[1].num_input_rows, 0);
    assert_eq!(
        p[1].state_operators[0].num_rows_total, 0,
        "the timed-out state was removed"
    );
}

/// A key's rows reach the function in one call per batch however the input is cut: the
/// operator takes its input sorted by key, chunk by chunk (the test hook cuts chunks of 1 and
/// 3 rows; a batch larger than the memory budget's chunk is cut the same way), and holds a key's
/// rows until its last one came. Calls, rows and state are those of the whole input at once.
#[test]
fn flat_map_groups_with_state_gets_each_key_once_per_batch_whatever_the_chunks() {
    use sluice::{GroupState, GroupStateTimeout};
    type Call = (u64, String, i64, i64, i64);
    let run = |chunk_rows: Option<&str>| -> Vec<Call> {
        let d = dirs();
        // Keys interleaved within and across files (two files: two input partitions).
        let line = |u: &str, v: i64| format!("{{\"user\": \"{u}\", \"v\": {v}}}\n");
        let file = |users: &str, base: i64| -> String {
            users
                .chars()
                .enumerate()
                .map(|(i, u)| line(&u.to_string(), base + i as i64))
                .collect()
        };
        let mut builder = sluice::Session::builder().shuffle_partitions(2);
        if let Some(n) = chunk_rows {
            builder = builder.config(sluice::testing::STATEFUL_INPUT_CHUNK_ROWS, n);
        }
        let s = builder.build().unwrap();
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("user", arrow::datatypes::DataType::Utf8, true),
            arrow::datatypes::Field::new("rows", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new("total", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new("before", arrow::datatypes::DataType::Int64, true),
        ]));
        let seen: Arc<Mutex<Vec<Call>>> = Arc::default();
        for (batch, files) in [
            vec![
                ("1.json", file("abacabcaab", 0)),
                ("2.json", file("cbbad", 100)),
            ],
            vec![("3.json", file("dddaxa", 200))],
        ]
        .into_iter()
        .enumerate()
        {
            for (i, (name, body)) in files.iter().enumerate() {
                crate::support::add_file(&d.input, name, body, (batch * 10 + i) as u64);
            }
            let out_schema = schema.clone();
            let sink = seen.clone();
            let q = s
                .read_stream()
                .format("json")
                .schema("user STRING, v BIGINT")
                .unwrap()
                .load(d.input.display().to_string())
                .unwrap()
                .group_by_key(["user"])
                .flat_map_groups_with_state(
                    schema.clone(),
                    OutputMode::Update,
                    GroupStateTimeout::NoTimeout,
                    move |key, rows, st: &mut GroupState<i64>| {
                        let v = rows
                            .column_by_name("v")
                            .unwrap()
                            .as_any()
                            .downcast_ref::<arrow::array::Int64Array>()
                            .unwrap();
                        let before = st.get().copied().unwrap_or(0);
                        st.update(before + rows.num_rows() as i64);
                        Ok(vec![arrow::array::RecordBatch::try_new(
                            out_schema.clone(),
                            vec![
                                Arc::new(arrow::array::StringArray::from(vec![key[0].to_string()])),
                                Arc::new(arrow::array::Int64Array::from(vec![
                                    rows.num_rows() as i64
                                ])),
                                Arc::new(arrow::array::Int64Array::from(vec![v
                                    .values()
                                    .iter()
                                    .sum::<i64>()])),
                                Arc::new(arrow::array::Int64Array::from(vec![before])),
                            ],
                        )?])
                    },
                )
                .unwrap()
                .write_stream()
                .output_mode(OutputMode::Update)
                .option("checkpointLocation", d.checkpoint.display())
                .trigger(Trigger::AvailableNow)
                .foreach_batch(move |data, id| {
                    let data = data.concat()?;
                    let col = |i: usize| data.column(i).clone();
                    let users = col(0);
                    let users = users
                        .as_any()
                        .downcast_ref::<arrow::array::StringArray>()
                        .unwrap();
                    let num = |i: usize, r: usize| {
                        col(i)
                            .as_any()
                            .downcast_ref::<arrow::array::Int64Array>()
                            .unwrap()
                            .value(r)
                    };
                    for r in 0..data.num_rows() {
                        sink.lock().unwrap().push((
                            id,
                            users.value(r).to_string(),
                            num(1, r),
                            num(2, r),
                            num(3, r),
                        ));
                    }
                    Ok(())
                })
                .start()
                .unwrap();
            q.await_termination().unwrap();
        }
        let mut calls = seen.lock().unwrap().clone();
        calls.sort();
        calls
    };
    let whole = run(None);
    // Each key once per batch: a 6 (5 + 1), b 5 (3 + 2), c 3, d 1, then a 2, d 3, x 1.
    let rows: Vec<(u64, &str, i64, i64)> = whole
        .iter()
        .map(|(b, u, n, _, before)| (*b, u.as_str(), *n, *before))
        .collect();
    assert_eq!(
        rows,
        vec![
            (0, "a", 6, 0),
            (0, "b", 5, 0),
            (0, "c", 3, 0),
            (0, "d", 1, 0),
            (1, "a", 2, 6),
            (1, "d", 3, 1),
            (1, "x", 1, 0),
        ]
    );
    for chunk_rows in ["1", "3"] {
        assert_eq!(run(Some(chunk_rows)), whole, "chunks of {chunk_rows} rows");
    }
}
