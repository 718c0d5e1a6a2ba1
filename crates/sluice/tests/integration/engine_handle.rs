//! Triggers, process_all_available, listeners, stop.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::progress::{QueryStartedEvent, QueryTerminatedEvent};
use sluice::{Session, StreamingQueryListener, StreamingQueryProgress, Trigger};

use crate::support::{
    add_file, committed_rows, dirs, run_file_to_parquet, session, BATCH1, BATCH2, BATCH3, SCHEMA,
};

#[derive(Default)]
struct Events(Mutex<Vec<String>>);
impl StreamingQueryListener for Events {
    fn on_query_started(&self, _e: &QueryStartedEvent) {
        self.0.lock().unwrap().push("started".into());
    }
    fn on_query_progress(&self, p: &StreamingQueryProgress) {
        self.0
            .lock()
            .unwrap()
            .push(format!("progress {}", p.batch_id));
    }
    fn on_query_terminated(&self, e: &QueryTerminatedEvent) {
        self.0
            .lock()
            .unwrap()
            .push(format!("terminated {}", e.exception.is_some()));
    }
}

#[test]
fn listener_sees_start_progress_and_termination_and_once_runs_one_batch() {
    let d = dirs();
    add_file(&d.input, "batch1.json", BATCH1, 1);
    add_file(&d.input, "batch2.json", BATCH2, 2);
    let s = session();
    let events = Arc::new(Events::default());
    s.add_listener(events.clone());
    let q = s
        .read_stream()
        .format("json")
        .schema(SCHEMA)
        .unwrap()
        .option("maxFilesPerTrigger", "1")
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .format("noop")
        .trigger(Trigger::Once)
        .start()
        .unwrap();
    assert!(q
        .await_termination_timeout(Duration::from_secs(30))
        .unwrap());
    assert_eq!(
        q.recent_progress().len(),
        1,
        "Once ignores maxFilesPerTrigger and runs one batch"
    );
    assert_eq!(q.last_progress().unwrap().num_input_rows, 5);
    assert_eq!(
        *events.0.lock().unwrap(),
        vec!["started", "progress 0", "terminated false"]
    );
    assert!(q.explain().contains("Physical Plan"));
}

#[test]
fn old_log_entries_are_purged_behind_min_batches_to_retain() {
    let d = dirs();
    for i in 0..4 {
        add_file(&d.input, &format!("{i}.json"), BATCH3, i);
    }
    let s = Session::builder()
        .shuffle_partitions(2)
        .config("spark.sql.streaming.minBatchesToRetain", 2)
        .build()
        .unwrap();
    run_file_to_parquet(&s, &d).unwrap();
    let mut offsets: Vec<String> = std::fs::read_dir(d.checkpoint.join("offsets"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    offsets.sort();
    assert_eq!(
        offsets,
        vec!["1", "2", "3"],
        "Spark keeps minBatchesToRetain batches before the current one"
    );
    assert_eq!(committed_rows(&d.output, &["user", "amount"]).len(), 4);
}
