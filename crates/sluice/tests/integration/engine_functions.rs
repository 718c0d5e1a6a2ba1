//! Spark's aggregate functions in a streaming aggregation (StreamingAggregationSuite style):
//! state kept across batches and across a restart gives what one batch query over all rows
//! gives. (Each function's batch result is checked against Spark by the recorded cases in
//! `spark-functions/cases.json`.) Every key has a non-null value in every column: a key whose
//! values are all null gives the aggregate's identity instead of null in a streaming
//! aggregation today (`min` -> INT max, `bool_and` -> true), an operator bug outside this file.

use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::DataType;
use sluice::{OutputMode, Trigger};

use crate::support::{add_file, dirs, session};

const SCHEMA: &str = "k STRING, x INT, d DOUBLE, b BOOLEAN";

const AGGREGATES: &str = "count(x) AS n, sum(x) AS total, avg(d) AS mean, min(x) AS lo, \
    max(d) AS hi, first(x, true) AS first_x, last(x) IGNORE NULLS AS last_x, \
    count_if(b) AS trues, bool_and(b) AS all_b, bool_or(b) AS any_b, every(b) AS every_b, \
    some(b) AS some_b, bit_and(x) AS band, bit_or(x) AS bor, bit_xor(x) AS bxor, \
    stddev(d) AS sd, stddev_pop(d) AS sdp, variance(d) AS var, var_pop(d) AS varp, \
    skewness(d) AS skew, kurtosis(d) AS kurt, corr(d, x) AS r, covar_pop(d, x) AS cp, \
    covar_samp(d, x) AS cs, approx_count_distinct(x) AS distinct_x, \
    max_by(x, d) AS x_at_max_d, min_by(x, d) AS x_at_min_d, regr_slope(d, x) AS slope";

fn rows_of(batch: &RecordBatch) -> Vec<Vec<(String, Option<f64>)>> {
    let mut out: Vec<Vec<(String, Option<f64>)>> = (0..batch.num_rows())
        .map(|i| {
            batch
                .columns()
                .iter()
                .map(|c: &ArrayRef| {
                    let text = arrow::compute::cast(c, &DataType::Utf8).unwrap();
                    let text = text
                        .as_any()
                        .downcast_ref::<arrow::array::StringArray>()
                        .unwrap();
                    let s = if text.is_null(i) {
                        "null".to_string()
                    } else {
                        text.value(i).to_string()
                    };
                    let f = matches!(c.data_type(), DataType::Float64)
                        .then(|| s.parse::<f64>().ok())
                        .flatten();
                    (s, f)
                })
                .collect()
        })
        .collect();
    out.sort_by(|a, b| a[0].0.cmp(&b[0].0));
    out
}

fn assert_same(streamed: &RecordBatch, reference: &RecordBatch) {
    // Names and types as the batch query's (the streamed columns are all nullable).
    let shape = |b: &RecordBatch| -> Vec<(String, DataType)> {
        b.schema()
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .collect()
    };
    assert_eq!(shape(streamed), shape(reference));
    let (a, b) = (rows_of(streamed), rows_of(reference));
    assert_eq!(a.len(), b.len());
    for (ra, rb) in a.iter().zip(&b) {
        for (j, ((sa, fa), (sb, fb))) in ra.iter().zip(rb).enumerate() {
            let name = streamed.schema().field(j).name().clone();
            match (fa, fb) {
                (Some(x), Some(y)) => assert!(
                    (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
                    "{name}: streamed {x}, batch {y}"
                ),
                _ => assert_eq!(sa, sb, "{name}"),
            }
        }
    }
}

#[test]
fn aggregate_functions_keep_state_across_batches_and_a_restart() {
    let d = dirs();
    let s = session();
    let files = [
        concat!(
            "{\"k\": \"a\", \"x\": null, \"d\": 1.5, \"b\": true}\n",
            "{\"k\": \"a\", \"x\": 3, \"d\": 2.5, \"b\": false}\n",
            "{\"k\": \"b\", \"x\": 7, \"d\": -1.0, \"b\": true}\n",
            "{\"k\": \"a\", \"x\": 5, \"d\": null, \"b\": null}\n",
        ),
        concat!(
            "{\"k\": \"b\", \"x\": 2, \"d\": 4.0, \"b\": true}\n",
            "{\"k\": \"a\", \"x\": 11, \"d\": 0.25, \"b\": true}\n",
            "{\"k\": \"c\", \"x\": 6, \"d\": 2.0, \"b\": true}\n",
        ),
        concat!(
            "{\"k\": \"b\", \"x\": 9, \"d\": 3.5, \"b\": false}\n",
            "{\"k\": \"a\", \"x\": 4, \"d\": 8.0, \"b\": true}\n",
            "{\"k\": \"a\", \"x\": null, \"d\": 1.0, \"b\": false}\n",
        ),
    ];
    let last: Arc<Mutex<Option<RecordBatch>>> = Arc::default();
    // Run 1 reads the first two files (two batches), run 2 restarts on the same checkpoint and
    // reads the third.
    for (run, range) in [(0, 0..2), (1, 2..3)] {
        for i in range {
            add_file(&d.input, &format!("{i}.json"), files[i], i as u64);
        }
        let sink = last.clone();
        let q = s
            .read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .option("maxFilesPerTrigger", 1)
            .load(d.input.display().to_string())
            .unwrap();
        q.create_or_replace_temp_view("events").unwrap();
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
    s.read()
        .format("json")
        .schema(SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .create_or_replace_temp_view("all_rows")
        .unwrap();
    let reference = s
        .sql(&format!("SELECT k, {AGGREGATES} FROM all_rows GROUP BY k"))
        .unwrap()
        .collect()
        .unwrap();
    let reference = arrow::compute::concat_batches(&reference[0].schema(), &reference).unwrap();
    assert_eq!(streamed.num_rows(), 3);
    assert_same(&streamed, &reference);
}
