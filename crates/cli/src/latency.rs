//! `sluice bench --workload latency --mode continuous|microbatch [--source rate|kafka]
//! [--seconds N] [--rows-per-second N] [--bootstrap HOST:PORT]`: end-to-end latency of a
//! stateless query, continuous processing against the default micro-batch trigger.
//!
//! - `rate` (`--sink memory`, the default): rate source -> memory sink. A watcher thread holds
//!   the memory table's buffer and spins on it; latency = the time a row's batch is visible in
//!   the table minus the row's `timestamp` (when the rate source made it due).
//! - `rate --sink foreach`: rate source -> `foreach` writer; latency = the time the writer sees
//!   a row minus its `timestamp`.
//! - `kafka`: a producer thread writes records (payload = its send time in µs) to an input
//!   topic, the query copies `key`, `value` to an output topic, a consumer thread measures
//!   arrival time minus the payload's send time.
//!
//! Rows of the first second are warm-up and not counted. Prints one JSON line:
//! `{"workload":"latency","mode",..,"source",..,"rows",..,"p50_ms","p99_ms","max_ms"}`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use sluice::kafka::log::KafkaLogContext;
use sluice::sink::foreach::{ForeachWriter, Row};
use sluice::{Session, SluiceError, Trigger};

fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

type Samples = Arc<Mutex<Vec<i64>>>;

/// Records `now - timestamp` (µs) for every row whose timestamp is after `from_us`.
struct LatencyWriter {
    samples: Samples,
    from_us: i64,
}

impl ForeachWriter for LatencyWriter {
    fn open(&mut self, _partition: usize, _epoch: u64) -> sluice::Result<bool> {
        Ok(true)
    }
    fn process(&mut self, row: Row<'_>) -> sluice::Result<()> {
        let now = now_us();
        if let datafusion::common::ScalarValue::TimestampMicrosecond(Some(ts), _) =
            row.get_index(0)?
        {
            if ts >= self.from_us {
                self.samples
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(now - ts);
            }
        }
        Ok(())
    }
    fn close(&mut self, _error: Option<&SluiceError>) {}
}

pub fn run(args: &crate::bench_args::BenchArgs) -> Result<(), String> {
    let (source, seconds, rps) = (args.source.clone(), args.seconds, args.rows_per_second);
    let (bootstrap, sink) = (args.bootstrap.clone(), args.sink.clone());
    let mode = args
        .mode
        .clone()
        .ok_or("--workload latency needs --mode continuous|microbatch")?;
    let trigger = match mode.as_str() {
        "continuous" => Trigger::Continuous(Duration::from_secs(1)),
        "microbatch" => Trigger::default(),
        other => return Err(format!("--mode {other:?}: use continuous or microbatch")),
    };
    let workdir = std::env::temp_dir().join(format!("sluice-latency-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&workdir);
    let session = Session::builder()
        .shuffle_partitions(2)
        .build()
        .map_err(|e| e.to_string())?;
    let samples: Samples = Arc::default();
    let warmup_until = now_us() + 1_000_000;
    match source.as_str() {
        "rate" if sink == "memory" => rate_to_memory(
            &session,
            trigger,
            seconds,
            rps,
            &workdir,
            &samples,
            warmup_until,
        )?,
        "rate" if sink != "foreach" => {
            return Err(format!("--sink {sink:?}: use memory or foreach"));
        }
        "rate" => {
            let s = samples.clone();
            let q = session
                .read_stream()
                .format("rate")
                .option("rowsPerSecond", rps)
                .load_source()
                .and_then(|f| f.select(["timestamp", "value"]))
                .and_then(|f| {
                    f.write_stream()
                        .foreach(move || {
                            Box::new(LatencyWriter {
                                samples: s.clone(),
                                from_us: warmup_until,
                            })
                        })
                        .option("checkpointLocation", workdir.join("cp").display())
                        .trigger(trigger)
                        .start()
                })
                .map_err(|e| e.to_string())?;
            std::thread::sleep(Duration::from_secs(seconds + 1));
            q.stop();
            if let Some(e) = q.exception() {
                return Err(e.to_string());
            }
        }
        "kafka" => kafka(
            &session, &bootstrap, trigger, seconds, rps, &workdir, &samples,
        )?,
        other => return Err(format!("--source {other:?}: use rate or kafka")),
    }
    let _ = std::fs::remove_dir_all(&workdir);
    let mut v = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if v.is_empty() {
        return Err("no rows reached the sink".into());
    }
    v.sort_unstable();
    let pct = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
    println!(
        "{}",
        serde_json::json!({
            "workload": "latency",
            "mode": mode,
            "source": source,
            "sink": if source == "rate" { sink.as_str() } else { "kafka" },
            "rows_per_second": rps,
            "seconds": seconds,
            "rows": v.len(),
            "p50_ms": pct(0.5),
            "p99_ms": pct(0.99),
            "max_ms": *v.last().unwrap_or(&0) as f64 / 1000.0,
        })
    );
    Ok(())
}

/// Rate source -> memory sink; a watcher spins on the memory table's buffer and stamps each
/// newly visible batch's rows.
fn rate_to_memory(
    session: &Session,
    trigger: Trigger,
    seconds: u64,
    rps: i64,
    workdir: &std::path::Path,
    samples: &Samples,
    from_us: i64,
) -> Result<(), String> {
    use datafusion::arrow::array::{Array, TimestampMicrosecondArray};
    let q = session
        .read_stream()
        .format("rate")
        .option("rowsPerSecond", rps)
        .load_source()
        .and_then(|f| f.select(["timestamp", "value"]))
        .and_then(|f| {
            f.write_stream()
                .format("memory")
                .query_name("latency_out")
                .option("checkpointLocation", workdir.join("cp").display())
                .trigger(trigger)
                .start()
        })
        .map_err(|e| e.to_string())?;
    // The memory sink's table: its one partition is the buffer the sink appends to.
    let provider = session
        .block_on(session.context().table_provider("latency_out"))
        .map_err(|e| e.to_string())?;
    let table = provider
        .downcast_ref::<datafusion::datasource::MemTable>()
        .ok_or("the memory sink's table is not a MemTable")?;
    let buffer = table.batches[0].clone();
    let stop = Arc::new(AtomicBool::new(false));
    let (watch_stop, watch_samples) = (stop.clone(), samples.clone());
    let watcher = std::thread::spawn(move || {
        let mut seen = 0usize;
        while !watch_stop.load(Ordering::Relaxed) {
            let fresh: Vec<RecordBatch> = {
                let rows = buffer.blocking_read();
                if rows.len() == seen {
                    Vec::new()
                } else {
                    let f = rows[seen..].to_vec();
                    seen = rows.len();
                    f
                }
            };
            if fresh.is_empty() {
                std::hint::spin_loop();
                continue;
            }
            let now = now_us();
            let mut out = watch_samples.lock().unwrap_or_else(|p| p.into_inner());
            for b in fresh {
                if let Some(ts) = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<TimestampMicrosecondArray>()
                {
                    for i in 0..ts.len() {
                        if ts.is_valid(i) && ts.value(i) >= from_us {
                            out.push(now - ts.value(i));
                        }
                    }
                }
            }
        }
    });
    std::thread::sleep(Duration::from_secs(seconds + 1));
    q.stop();
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    if let Some(e) = q.exception() {
        return Err(e.to_string());
    }
    Ok(())
}

fn kafka(
    session: &Session,
    bootstrap: &str,
    trigger: Trigger,
    seconds: u64,
    rps: i64,
    workdir: &std::path::Path,
    samples: &Samples,
) -> Result<(), String> {
    let tag = &uuid_like()[..8];
    let (src, dst) = (format!("latency-in-{tag}"), format!("latency-out-{tag}"));
    let producer: ThreadedProducer<KafkaLogContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "0")
        .create_with_context(KafkaLogContext::default())
        .map_err(|e| format!("Kafka producer: {e}"))?;
    let admin: AdminClient<KafkaLogContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create_with_context(KafkaLogContext::default())
        .map_err(|e| format!("Kafka admin client: {e}"))?;
    let created = session
        .block_on(admin.create_topics(
            &[
                NewTopic::new(&src, 1, TopicReplication::Fixed(1)),
                NewTopic::new(&dst, 1, TopicReplication::Fixed(1)),
            ],
            &AdminOptions::new(),
        ))
        .map_err(|e| format!("create topics: {e}"))?;
    for r in created {
        r.map_err(|(t, e)| format!("create topic {t}: {e}"))?;
    }
    let q = session
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", &src)
        .option("startingOffsets", "latest")
        .load_source()
        .and_then(|f| f.select(["key", "value"]))
        .and_then(|f| {
            f.write_stream()
                .format("kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("kafka.linger.ms", "0")
                .option("topic", &dst)
                .option("checkpointLocation", workdir.join("cp").display())
                .trigger(trigger)
                .start()
        })
        .map_err(|e| e.to_string())?;
    let consumer: BaseConsumer<KafkaLogContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("sluice-latency-{tag}"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "1")
        .create_with_context(KafkaLogContext::default())
        .map_err(|e| format!("Kafka consumer: {e}"))?;
    consumer
        .subscribe(&[dst.as_str()])
        .map_err(|e| format!("subscribe: {e}"))?;
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (done, samples) = (done.clone(), samples.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
                    let now = now_us();
                    let sent = m
                        .payload()
                        .and_then(|p| std::str::from_utf8(p).ok())
                        .and_then(|s| s.parse::<i64>().ok());
                    if let Some(sent) = sent {
                        samples
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(now - sent);
                    }
                }
            }
        })
    };
    // Give the query and the consumer a second to start; those records are not sent.
    std::thread::sleep(Duration::from_secs(1));
    let interval_us = 1_000_000 / rps.max(1);
    let start = now_us();
    let total = rps * seconds as i64;
    for i in 0..total {
        let due = start + i * interval_us;
        let wait = due - now_us();
        if wait > 0 {
            std::thread::sleep(Duration::from_micros(wait as u64));
        }
        let payload = now_us().to_string();
        let key = i.to_string();
        producer
            .send(BaseRecord::to(&src).key(&key).payload(&payload))
            .map_err(|(e, _)| format!("produce: {e}"))?;
    }
    let _ = producer.flush(Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    q.stop();
    done.store(true, Ordering::SeqCst);
    let _ = reader.join();
    if let Some(e) = q.exception() {
        return Err(e.to_string());
    }
    Ok(())
}

fn uuid_like() -> String {
    format!("{:016x}", now_us() ^ ((std::process::id() as i64) << 32))
}
