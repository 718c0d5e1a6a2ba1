//! (ignored; run by `benches/soak_state.sh`) a million events, state bounded by the
//! watermark.

use std::sync::Arc;

use sluice::{col, OutputMode};

use crate::support::session;

/// A million events through a windowed aggregation, with and without a watermark; prints
/// the state size and memory after every tenth batch. Run by `benches/soak_state.sh`.
#[test]
#[ignore = "soak: a million events; run by benches/soak_state.sh"]
fn state_stays_bounded_with_a_watermark_and_grows_without() {
    use arrow::array::{Float64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let batches = 100usize;
    let per_batch = 10_000usize;
    let schema = Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("user", DataType::Utf8, true),
        Field::new("amount", DataType::Float64, true),
    ]));
    let mut figures = Vec::new();
    for watermark in [true, false] {
        let stream = sluice::source::memory::MemoryStream::new(schema.clone());
        let s = session();
        let mut frame = stream.to_frame(&s).unwrap();
        if watermark {
            frame = frame.with_watermark("ts", "1 minute").unwrap();
        }
        let q = frame
            .group_by([sluice::window(col("ts"), "1 minute"), col("user")])
            .agg([datafusion::functions_aggregate::expr_fn::sum(col("amount")).alias("total")])
            .unwrap()
            .write_stream()
            .output_mode(OutputMode::Update)
            .format("noop")
            .start()
            .unwrap();
        let start = std::time::Instant::now();
        let mut last = (0i64, 0i64);
        for b in 0..batches {
            // 1,000 events per second of event time, 1,000 users.
            let base = (b * per_batch) as i64 * 1_000;
            let ts: Vec<i64> = (0..per_batch as i64).map(|i| base + i * 1_000).collect();
            let users: Vec<String> = (0..per_batch).map(|i| format!("u{}", i % 1000)).collect();
            let amounts: Vec<f64> = (0..per_batch).map(|i| i as f64).collect();
            stream
                .add_batch(
                    RecordBatch::try_new(
                        schema.clone(),
                        vec![
                            Arc::new(TimestampMicrosecondArray::from(ts)),
                            Arc::new(StringArray::from(users)),
                            Arc::new(Float64Array::from(amounts)),
                        ],
                    )
                    .unwrap(),
                )
                .unwrap();
            q.process_all_available().unwrap();
            let p = q.last_progress().unwrap();
            last = (
                p.state_operators[0].num_rows_total,
                p.state_operators[0].memory_used_bytes,
            );
            if b % 10 == 9 {
                println!(
                    "watermark={watermark} batch={b} events={} numRowsTotal={} memoryUsedBytes={}",
                    (b + 1) * per_batch,
                    last.0,
                    last.1
                );
            }
        }
        q.stop();
        let secs = start.elapsed().as_secs_f64();
        println!(
            "watermark={watermark}: {} events in {secs:.1}s ({:.0} events/s, debug build), final numRowsTotal={} memoryUsedBytes={}",
            batches * per_batch,
            (batches * per_batch) as f64 / secs,
            last.0,
            last.1
        );
        figures.push(last);
    }
    let (with_wm, without_wm) = (figures[0], figures[1]);
    assert!(
        with_wm.0 <= 3 * 1000,
        "with a watermark, at most ~3 open minutes x 1000 users stay in state: {}",
        with_wm.0
    );
    // 1,000,000 events at 1,000/s of event time span ~17 minutes: 17 windows x 1,000 users.
    assert!(
        without_wm.0 >= 16_000,
        "without a watermark every (minute, user) stays: {}",
        without_wm.0
    );
}
