//! Spark's `mode`, `percentile_approx`, `percentile`, `median`, `hll_sketch_agg`, `try_avg`,
//! `first_value`/`last_value` and `max_by` in a streaming aggregation: their accumulator state
//! (counts per value, the GK summary, the HLL sketch) is stored after each micro-batch and
//! reloaded after a restart, and the final result is Spark's over all rows (PySpark 3.5.7,
//! one batch query over the same rows).

use std::sync::{Arc, Mutex};

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use sluice::{OutputMode, Trigger};

use crate::support::{add_file, dirs, session};

const SCHEMA: &str = "k STRING, x INT, d DOUBLE";

const AGGREGATES: &str = "mode(x) AS m, percentile_approx(d, 0.5) AS pa_d, \
    percentile_approx(x, 0.25, 100) AS pa_lo, percentile_approx(x, 0.75, 100) AS pa_hi, \
    percentile(x, 0.5) AS p, median(d) AS med, hll_sketch_estimate(hll_sketch_agg(x)) AS hll, \
    try_avg(x) AS avg_x, first_value(x, true) AS first_x, last_value(x, true) AS last_x, \
    max_by(x, d) AS x_at_max_d";

fn rows(b: &RecordBatch) -> Vec<String> {
    let mut out: Vec<String> = (0..b.num_rows())
        .map(|i| {
            b.columns()
                .iter()
                .map(|c| {
                    let t = arrow::compute::cast(c, &DataType::Utf8).unwrap();
                    let t = t
                        .as_any()
                        .downcast_ref::<arrow::array::StringArray>()
                        .unwrap();
                    if t.is_null(i) {
                        "null".to_string()
                    } else {
                        t.value(i).to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    out.sort();
    out
}

#[test]
fn mode_and_percentile_approx_keep_state_across_batches_and_a_restart() {
    let d = dirs();
    let s = session();
    let files = [
        concat!(
            "{\"k\": \"a\", \"x\": null, \"d\": 1.5}\n",
            "{\"k\": \"a\", \"x\": 3, \"d\": 2.5}\n",
            "{\"k\": \"b\", \"x\": 7, \"d\": -1.0}\n",
            "{\"k\": \"a\", \"x\": 5, \"d\": null}\n",
        ),
        concat!(
            "{\"k\": \"b\", \"x\": 2, \"d\": 4.0}\n",
            "{\"k\": \"a\", \"x\": 3, \"d\": 0.25}\n",
            "{\"k\": \"c\", \"x\": 6, \"d\": 2.0}\n",
        ),
        concat!(
            "{\"k\": \"b\", \"x\": 9, \"d\": 3.5}\n",
            "{\"k\": \"a\", \"x\": 4, \"d\": 8.0}\n",
            "{\"k\": \"a\", \"x\": null, \"d\": 1.0}\n",
            "{\"k\": \"b\", \"x\": 7, \"d\": 3.5}\n",
        ),
    ];
    let last: Arc<Mutex<Option<RecordBatch>>> = Arc::default();
    // Run 1 reads the first two files (two micro-batches), run 2 restarts on the checkpoint
    // and reads the third.
    for (run, range) in [(0, 0..2), (1, 2..3)] {
        for i in range {
            add_file(&d.input, &format!("{i}.json"), files[i], i as u64);
        }
        let sink = last.clone();
        s.read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .option("maxFilesPerTrigger", 1)
            .load(d.input.display().to_string())
            .unwrap()
            .create_or_replace_temp_view("events")
            .unwrap();
        let q = s
            .sql(&format!("SELECT k, {AGGREGATES} FROM events GROUP BY k"))
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Complete)
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .foreach_batch(move |data, _id| {
                *sink.lock().unwrap() = Some(data.concat()?);
                Ok(())
            })
            .start()
            .unwrap();
        q.await_termination().unwrap();
        assert_eq!(
            q.last_progress().unwrap().batch_id,
            if run == 0 { 1 } else { 2 }
        );
    }
    let streamed = last.lock().unwrap().clone().unwrap();
    // PySpark 3.5.7 over all eleven rows (k | mode | percentile_approx(d, .5) | (x, .25, 100)
    // | (x, .75, 100) | percentile(x, .5) | median(d) | hll estimate | try_avg | first | last
    // | max_by(x, d)).
    assert_eq!(
        rows(&streamed),
        vec![
            "a|3|1.5|3|4|3.5|1.5|3|3.75|3|4|4",
            "b|7|3.5|2|7|7.0|3.5|3|6.25|7|7|2",
            "c|6|2.0|6|6|6.0|2.0|1|6.0|6|6|6",
        ]
    );
}
