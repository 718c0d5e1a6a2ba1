//! The seed document's Kafka example: read `events` from Kafka, parse `value` as JSON with a
//! schema, enrich, and write JSON records to another topic.
//!
//! Run against a broker (`scripts/kafka-broker start`):
//! `cargo run -p sluice --example kafka_enrich -- 127.0.0.1:9092 events events-enriched`

use std::path::Path;

use sluice::{OutputMode, Session, Trigger};

/// Runs the enrichment once over what `input_topic` holds (available-now), exactly once into
/// `output_topic`. Returns the number of records written.
pub fn enrich(
    bootstrap: &str,
    input_topic: &str,
    output_topic: &str,
    checkpoint: &Path,
) -> sluice::Result<i64> {
    let session = Session::builder().shuffle_partitions(2).build()?;
    session
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", input_topic)
        .option("startingOffsets", "earliest")
        .load_source()?
        .create_or_replace_temp_view("kafka_events")?;
    // Parse the JSON value with a schema, keep the key, add a field, and write JSON back.
    let enriched = session.sql(
        "SELECT CAST(key AS STRING) AS key, \
                to_json(named_struct('user', data.user, 'amount', data.amount, \
                                     'big', data.amount > 100, 'ts', CAST(timestamp AS STRING))) AS value \
         FROM (SELECT key, timestamp, \
                      from_json(CAST(value AS STRING), 'user STRING, action STRING, amount DOUBLE') AS data \
               FROM kafka_events) \
         WHERE data.action = 'buy'",
    )?;
    let q = enriched
        .write_stream()
        .format("kafka")
        .output_mode(OutputMode::Append)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output_topic)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()?;
    q.await_termination()?;
    Ok(q.recent_progress()
        .iter()
        .map(|p| p.sink.num_output_rows)
        .sum())
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bootstrap = args
        .first()
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:9092".into());
    let input = args.get(1).cloned().unwrap_or_else(|| "events".into());
    let output = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| "events-enriched".into());
    let checkpoint = std::env::temp_dir().join("sluice-kafka-enrich-checkpoint");
    let n = enrich(&bootstrap, &input, &output, &checkpoint)?;
    println!(
        "wrote {n} enriched records to {output} (checkpoint {})",
        checkpoint.display()
    );
    Ok(())
}
