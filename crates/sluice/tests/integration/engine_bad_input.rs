//! Bad input: invalid UTF-8 and empty files are read and counted, a source directory that
//! disappears is waited for.

use std::time::Duration;

use crate::support::{add_file, dirs, run_file_to_parquet, session, BATCH1, BATCH2, SCHEMA};

#[test]
fn invalid_utf8_and_empty_files_are_read_and_counted() {
    let d = dirs();
    add_file(&d.input, "0-empty.json", "", 1);
    std::fs::write(
        d.input.join("1-bad.json.tmp"),
        b"{\"user\": \"\xff\xfe\", \"amount\": 20.0}\n\xc3\x28\n",
    )
    .unwrap();
    std::fs::rename(d.input.join("1-bad.json.tmp"), d.input.join("1-bad.json")).unwrap();
    let q = run_file_to_parquet(&session(), &d).unwrap();
    let p = q.recent_progress();
    let rows: i64 = p.iter().map(|p| p.num_input_rows).sum();
    assert_eq!(
        rows, 2,
        "the empty file gives nothing; the invalid UTF-8 lines are read (one is malformed)"
    );
    let malformed: i64 = p
        .iter()
        .filter_map(|p| p.sources[0].metrics.get("numMalformedRecords"))
        .map(|v| v.parse::<i64>().unwrap())
        .sum();
    assert_eq!(malformed, 1, "counted, not lost");
}

#[test]
fn a_source_directory_that_disappears_while_running_is_waited_for() {
    let d = dirs();
    add_file(&d.input, "1.json", BATCH1, 1);
    let q = session()
        .read_stream()
        .format("json")
        .schema(SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .format("noop")
        .option("checkpointLocation", d.checkpoint.display())
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    std::fs::remove_dir_all(&d.input).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        q.is_active() && q.exception().is_none(),
        "{:?}",
        q.exception()
    );
    add_file(&d.input, "2.json", BATCH2, 2);
    q.process_all_available().unwrap();
    q.stop();
    let rows: i64 = q.recent_progress().iter().map(|p| p.num_input_rows).sum();
    assert_eq!(
        rows, 5,
        "the files before and after the directory came back"
    );
}
