//! Spark's CSV functions in a streaming query: `from_csv` parses the `value` column of a text
//! source (PERMISSIVE: a field that does not fit is null, a short line's missing fields null),
//! `to_csv` writes the struct back. The expectations were recorded on Spark 3.5.7 with the same
//! files, `maxFilesPerTrigger=1` and `Trigger.AvailableNow`.

use std::sync::{Arc, Mutex};

use arrow::util::display::{ArrayFormatter, FormatOptions};
use sluice::{OutputMode, Trigger};

use crate::support::{add_file, dirs, session};

/// Each batch's id and rows.
type Recorded = Arc<Mutex<Vec<(u64, Vec<String>)>>>;

#[test]
fn from_csv_parses_a_text_stream_and_to_csv_writes_it_back() {
    let d = dirs();
    add_file(
        &d.input,
        "1.txt",
        "alice,3,2026-09-15 00:00:05\nbob,x,2026-09-15 00:00:07\n\"carol, jr\",5,\n",
        1,
    );
    add_file(&d.input, "2.txt", "dave\nerin,7,2026-09-15T00:01:00Z\n", 2);
    let s = session();
    s.read_stream()
        .format("text")
        .option("maxFilesPerTrigger", 1)
        .load(d.input.display().to_string())
        .unwrap()
        .create_or_replace_temp_view("lines")
        .unwrap();
    let frame = s
        .sql(
            "SELECT r.user, r.amount, r.ts, to_csv(r) AS again FROM \
             (SELECT from_csv(value, 'user STRING, amount INT, ts TIMESTAMP') AS r FROM lines)",
        )
        .unwrap();
    let out: Recorded = Arc::default();
    let sink = out.clone();
    let q = frame
        .write_stream()
        .output_mode(OutputMode::Append)
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .foreach_batch(move |data, id| {
            let opts = FormatOptions::default()
                .with_null("null")
                .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S"));
            let mut rows = Vec::new();
            for b in data.batches() {
                let cols: Vec<ArrayFormatter> = b
                    .columns()
                    .iter()
                    .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
                    .collect();
                for r in 0..b.num_rows() {
                    let cells: Vec<String> = cols.iter().map(|c| c.value(r).to_string()).collect();
                    rows.push(cells.join("|"));
                }
            }
            sink.lock().unwrap().push((id, rows));
            Ok(())
        })
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let got = out.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![
            (
                0,
                vec![
                    "alice|3|2026-09-15 00:00:05|alice,3,2026-09-15T00:00:05.000Z".to_string(),
                    "bob|null|2026-09-15 00:00:07|bob,,2026-09-15T00:00:07.000Z".to_string(),
                    "carol, jr|5|null|\"carol, jr\",5,".to_string(),
                ]
            ),
            (
                1,
                vec![
                    "dave|null|null|dave,,".to_string(),
                    "erin|7|2026-09-15 00:01:00|erin,7,2026-09-15T00:01:00.000Z".to_string(),
                ]
            ),
        ]
    );
    let inputs: Vec<(i64, i64)> = q
        .recent_progress()
        .iter()
        .map(|p| (p.batch_id, p.num_input_rows))
        .collect();
    assert_eq!(inputs, [(0, 3), (1, 2)]);
}
