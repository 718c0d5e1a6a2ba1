//! The seed documents' file example: checkpoint layout, restart, filter.

use crate::support::{
    add_file, committed_rows, dirs, run_file_to_parquet, session, BATCH1, BATCH2, BATCH3,
};

#[test]
fn two_batches_leave_sparks_checkpoint_layout_and_drop_the_five_pound_row() {
    let d = dirs();
    add_file(&d.input, "batch1.json", BATCH1, 1);
    add_file(&d.input, "batch2.json", BATCH2, 2);
    let s = session();
    let q = run_file_to_parquet(&s, &d).unwrap();
    for f in [
        "metadata",
        "offsets/0",
        "offsets/1",
        "commits/0",
        "commits/1",
        "sources/0/0",
        "sources/0/1",
    ] {
        assert!(d.checkpoint.join(f).is_file(), "missing {f}");
    }
    assert!(!d.checkpoint.join("offsets/2").exists());
    assert_eq!(
        committed_rows(&d.output, &["user", "amount"]),
        vec!["alice 120.0", "alice 250.0", "carol 42.5"]
    );
    let progress = q.recent_progress();
    assert_eq!(progress.len(), 2);
    assert_eq!(progress[0].num_input_rows, 3);
    assert_eq!(
        progress[0].sink.num_output_rows, 2,
        "bob's £5 row is filtered out"
    );
    assert_eq!(progress[1].num_input_rows, 2);
    let offsets = std::fs::read_to_string(d.checkpoint.join("offsets/1")).unwrap();
    assert!(
        offsets.starts_with("v1\n{\"batchWatermarkMs\":0,"),
        "{offsets}"
    );
    assert!(offsets.ends_with("\n{\"logOffset\":1}"), "{offsets}");
}

#[test]
fn restart_reads_nothing_twice_and_a_new_file_exactly_once() {
    let d = dirs();
    add_file(&d.input, "batch1.json", BATCH1, 1);
    add_file(&d.input, "batch2.json", BATCH2, 2);
    let id = run_file_to_parquet(&session(), &d)
        .unwrap()
        .id()
        .to_string();

    let q = run_file_to_parquet(&session(), &d).unwrap();
    assert!(
        q.recent_progress().is_empty(),
        "a restart without new files runs no batch"
    );
    assert_eq!(q.id(), id, "the query id survives restarts");

    add_file(&d.input, "batch3.json", BATCH3, 3);
    let q = run_file_to_parquet(&session(), &d).unwrap();
    let p = q.recent_progress();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].batch_id, 2);
    assert_eq!(p[0].num_input_rows, 1);
    assert_eq!(committed_rows(&d.output, &["user", "amount"]).len(), 4);
}
