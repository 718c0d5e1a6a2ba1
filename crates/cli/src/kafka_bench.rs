//! `sluice bench --workload kafka-fill|kafka`: Kafka throughput, the Sluice side of
//! `benches/kafka_spark.py` (the same queries on Spark 3.5), run by `benches/kafka_compare.sh`.
//!
//! - `kafka-fill --input DIR --topic T`: writes every line of DIR's files (the JSON events of
//!   `shared/bench/gen_events.py`) to topic T as a record value, once, and prints the count.
//! - `kafka --topic T --sink parquet|kafka --max-offsets-per-trigger N`: reads T from the
//!   earliest offset with Trigger.AvailableNow in batches of N records, parses each value with
//!   `from_json`, and writes the events to parquet files, or re-encoded with `to_json` (amount in
//!   euros, key = user) to `--out-topic` with `exactlyOnce=true` (one Kafka transaction per
//!   batch). The last line printed is one JSON object: `rows_per_second`, `median_batch_ms`,
//!   `wall_seconds`, `peak_rss_bytes`, `batches`, `rows_out` (rows in the parquet output, or
//!   committed records in the output topic read with `isolation.level=read_committed`).

use std::path::Path;
use std::time::Instant;

use sluice::{Session, Trigger};

use crate::bench_args::BenchArgs;
use crate::nexmark::peak_rss_bytes;

/// The event schema of `shared/bench/gen_events.py`.
const SCHEMA: &str = "ts TIMESTAMP, user STRING, action STRING, amount DOUBLE";

/// The query both engines run over the topic (`events`: Kafka's columns).
fn query(sink: &str) -> String {
    let parsed = format!(
        "SELECT from_json(CAST(value AS STRING), '{SCHEMA}') AS e, partition, offset FROM events"
    );
    match sink {
        "parquet" => {
            format!("SELECT e.ts, e.user, e.action, e.amount, partition, offset FROM ({parsed}) p")
        }
        _ => format!(
            "SELECT e.user AS key, to_json(named_struct('ts', e.ts, 'user', e.user, 'action', \
             e.action, 'amount_eur', round(e.amount * 1.2, 2))) AS value FROM ({parsed}) p"
        ),
    }
}

fn session() -> Result<Session, String> {
    Session::builder()
        .shuffle_partitions(2)
        .build()
        .map_err(|e| e.to_string())
}

/// `--workload kafka-fill`.
pub fn fill(args: &BenchArgs, workdir: &Path) -> Result<(), String> {
    let input = args
        .input
        .as_ref()
        .ok_or("kafka-fill needs --input DIR (files from shared/bench/gen_events.py)")?;
    let topic = &args.topic;
    let s = session()?;
    let start = Instant::now();
    let q = s
        .read_stream()
        .format("text")
        .load(input.display().to_string())
        .and_then(|f| f.select(["value"]))
        .and_then(|f| {
            f.write_stream()
                .format("kafka")
                .option("kafka.bootstrap.servers", &args.bootstrap)
                .option("topic", topic)
                .option("kafka.linger.ms", 50)
                .option("checkpointLocation", workdir.join("fill-ckpt").display())
                .trigger(Trigger::AvailableNow)
                .start()
        })
        .map_err(|e| e.to_string())?;
    q.await_termination().map_err(|e| e.to_string())?;
    let n: i64 = q.recent_progress().iter().map(|p| p.num_input_rows).sum();
    eprintln!(
        "sluice bench kafka-fill: {n} records to {topic} in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    println!("{n}");
    Ok(())
}

/// `--workload kafka`.
pub fn run(args: &BenchArgs, workdir: &Path) -> Result<(), String> {
    let sink = args.sink.as_str();
    if !matches!(sink, "parquet" | "kafka") {
        return Err(format!(
            "--workload kafka needs --sink parquet or --sink kafka, not {sink}"
        ));
    }
    let per_batch = args
        .max_offsets_per_trigger
        .ok_or("--workload kafka needs --max-offsets-per-trigger N (records per batch)")?;
    let s = session()?;
    let err = |e: sluice::SluiceError| e.to_string();
    s.read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", &args.bootstrap)
        .option("subscribe", &args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_batch)
        .load_source()
        .and_then(|f| f.create_or_replace_temp_view("events"))
        .map_err(err)?;
    let out = workdir.join("out-parquet");
    let writer = s.sql(&query(sink)).map_err(err)?.write_stream();
    let writer = match sink {
        "parquet" => writer.format("parquet").option("path", out.display()),
        _ => writer
            .format("kafka")
            .option("kafka.bootstrap.servers", &args.bootstrap)
            .option("topic", &args.out_topic)
            .option("exactlyOnce", "true"),
    };
    let start = Instant::now();
    let q = writer
        .option("checkpointLocation", workdir.join("ckpt").display())
        .trigger(Trigger::AvailableNow)
        .start()
        .map_err(err)?;
    q.await_termination().map_err(err)?;
    let wall = start.elapsed().as_secs_f64();
    let progress = q.recent_progress();
    if std::env::var_os("SLUICE_BENCH_PROGRESS").is_some() {
        for p in &progress {
            eprintln!("{}", p.json());
        }
    }
    let rows: i64 = progress.iter().map(|p| p.num_input_rows).sum();
    let mut data_ms: Vec<i64> = progress
        .iter()
        .filter(|p| p.num_input_rows > 0)
        .map(|p| p.duration_ms.get("triggerExecution").copied().unwrap_or(0))
        .collect();
    data_ms.sort();
    let peak = peak_rss_bytes();
    let count = |f: sluice::StreamFrame| -> Result<usize, String> {
        Ok(f.collect().map_err(err)?.iter().map(|b| b.num_rows()).sum())
    };
    let rows_out = match sink {
        "parquet" => count(
            s.read()
                .format("parquet")
                .load(out.display().to_string())
                .map_err(err)?,
        )?,
        _ => count(
            s.read()
                .format("kafka")
                .option("kafka.bootstrap.servers", &args.bootstrap)
                .option("subscribe", &args.out_topic)
                .option("kafka.isolation.level", "read_committed")
                .load_source()
                .map_err(err)?,
        )?,
    };
    eprintln!(
        "sluice bench kafka -> {sink}: {rows} records in, {rows_out} out, wall {wall:.3}s, {} batches",
        data_ms.len()
    );
    println!(
        "{}",
        serde_json::json!({
            "engine": "sluice",
            "workload": format!("kafka-{sink}"),
            "rows_per_second": ((rows as f64 / wall) * 10.0).round() / 10.0,
            "median_batch_ms": data_ms.get(data_ms.len() / 2).copied(),
            "wall_seconds": (wall * 1000.0).round() / 1000.0,
            "peak_rss_bytes": peak,
            "batches": data_ms.len(),
            "rows_in": rows,
            "rows_out": rows_out,
        })
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_queries_plan_over_a_kafka_shaped_table() {
        let s = session().unwrap();
        s.sql(
            "SELECT '{\"ts\":\"2026-01-01T00:00:00Z\",\"user\":\"u1\",\"action\":\"buy\",\
             \"amount\":2.5}' AS value, 0 AS partition, CAST(7 AS BIGINT) AS offset",
        )
        .unwrap()
        .create_or_replace_temp_view("events")
        .unwrap();
        let b = s.sql(&query("parquet")).unwrap().collect().unwrap();
        assert_eq!(b[0].num_columns(), 6);
        assert_eq!(b[0].num_rows(), 1);
        let b = s.sql(&query("kafka")).unwrap().collect().unwrap();
        let names: Vec<_> = b[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["key", "value"]);
    }
}
