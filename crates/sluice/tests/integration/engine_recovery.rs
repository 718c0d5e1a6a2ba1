//! Crash between sink and commit, replay with the same id, exactly-once file sink.

use std::sync::{Arc, Mutex};

use sluice::{col, OutputMode, Trigger};

use crate::support::{
    add_file, committed_rows, dirs, run_file_to_parquet, session, BATCH1, BATCH2, SCHEMA,
};

#[test]
fn crash_after_sink_before_commit_reruns_the_batch_with_the_same_id_and_rows_once() {
    let d = dirs();
    add_file(&d.input, "batch1.json", BATCH1, 1);
    add_file(&d.input, "batch2.json", BATCH2, 2);
    let s = session();
    s.set_conf("sluice.testing.crashPoint", "afterSink:1");
    let err = run_file_to_parquet(&s, &d).unwrap_err();
    assert_eq!(err.class(), "SLUICE_INJECTED_CRASH");
    assert!(d.checkpoint.join("offsets/1").exists());
    assert!(!d.checkpoint.join("commits/1").exists());

    let q = run_file_to_parquet(&session(), &d).unwrap();
    let p = q.recent_progress();
    assert_eq!(
        p[0].batch_id, 1,
        "the uncommitted batch is re-run under its id"
    );
    assert_eq!(p[0].num_input_rows, 2, "with the same offsets");
    assert_eq!(
        committed_rows(&d.output, &["user", "amount"]).len(),
        3,
        "the file sink holds batch 1's rows once"
    );
}

#[test]
fn a_crash_in_the_middle_of_a_state_commit_is_replayed_from_the_last_version() {
    let d = dirs();
    add_file(
        &d.input,
        "1.json",
        "{\"user\": \"a\"}\n{\"user\": \"b\"}\n{\"user\": \"c\"}\n{\"user\": \"a\"}\n",
        1,
    );
    let seen: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
    for crash in [true, false] {
        let s = session();
        if crash {
            s.set_conf("sluice.testing.crashPoint", "inStateCommit:0");
        }
        let sink = seen.clone();
        let q = s
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
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .foreach_batch(move |data, id| {
                sink.lock().unwrap().push((id, data.num_rows()));
                Ok(())
            })
            .start()
            .unwrap();
        let r = q.await_termination();
        if crash {
            assert_eq!(r.unwrap_err().class(), "SLUICE_INJECTED_CRASH");
            assert!(
                d.checkpoint.join("state/0/0/1.delta").is_file(),
                "partition 0 committed"
            );
            assert!(
                !d.checkpoint.join("state/0/1/1.delta").exists(),
                "partition 1 did not"
            );
        } else {
            r.unwrap();
            assert_eq!(
                q.last_progress().unwrap().state_operators[0].num_rows_total,
                3
            );
        }
    }
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(0, 3)],
        "the sink sees batch 0 once, after the replay"
    );
}

#[test]
fn crash_after_offsets_replays_the_planned_files() {
    let d = dirs();
    add_file(&d.input, "batch1.json", BATCH1, 1);
    let s = session();
    s.set_conf("sluice.testing.crashPoint", "afterOffsets:0");
    assert!(run_file_to_parquet(&s, &d).is_err());
    add_file(&d.input, "batch2.json", BATCH2, 2);
    let q = run_file_to_parquet(&session(), &d).unwrap();
    let p = q.recent_progress();
    assert_eq!(p.len(), 2);
    assert_eq!((p[0].batch_id, p[0].num_input_rows), (0, 3));
    assert_eq!((p[1].batch_id, p[1].num_input_rows), (1, 2));
}

#[test]
fn foreach_batch_sees_a_replayed_batch_with_the_same_id_and_rows() {
    let d = dirs();
    add_file(&d.input, "batch1.json", BATCH1, 1);
    let seen: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
    for crash in [true, false] {
        let s = session();
        if crash {
            s.set_conf("sluice.testing.crashPoint", "afterSink:0");
        }
        let sink = seen.clone();
        let q = s
            .read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .foreach_batch(move |data, id| {
                sink.lock().unwrap().push((id, data.num_rows()));
                Ok(())
            })
            .start()
            .unwrap();
        assert_eq!(q.await_termination().is_err(), crash);
    }
    assert_eq!(*seen.lock().unwrap(), vec![(0, 3), (0, 3)]);
}

/// A run that logged its next batch's files (`sources/0/N`) and died before `offsets/N`: the
/// restart runs that entry as batch N, still one file under `maxFilesPerTrigger=1` (Spark lists
/// again and adds the next file to the same batch). Every row once, one file per batch.
#[test]
fn a_source_log_entry_ahead_of_the_offsets_is_the_next_batch_as_cut() {
    let d = dirs();
    let run = |d: &crate::support::Dirs| {
        let seen: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
        let sink = seen.clone();
        let q = session()
            .read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .option("maxFilesPerTrigger", 1)
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .foreach_batch(move |data, id| {
                sink.lock().unwrap().push((id, data.num_rows()));
                Ok(())
            })
            .start()
            .unwrap();
        q.await_termination().unwrap();
        let seen = seen.lock().unwrap().clone();
        seen
    };
    add_file(&d.input, "1.json", BATCH1, 1);
    add_file(&d.input, "2.json", BATCH2, 2);
    assert_eq!(run(&d), vec![(0, 3), (1, 2)]);
    // As if the run had died between `sources/0/1` and `offsets/1`.
    for log in ["offsets/1", "commits/1"] {
        std::fs::remove_file(d.checkpoint.join(log)).unwrap();
    }
    assert!(d.checkpoint.join("sources/0/1").exists());
    add_file(&d.input, "3.json", BATCH1, 3);
    assert_eq!(
        run(&d),
        vec![(1, 2), (2, 3)],
        "batch 1 is the logged file alone, then the new file"
    );
}
