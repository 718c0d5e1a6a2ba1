//! Kafka source and sink against a real broker (`scripts/kafka-broker start`; the address is
//! `$SLUICE_KAFKA_BOOTSTRAP`, default 127.0.0.1:9092). Every test name contains `kafka`; without
//! a broker they fail and say how to start one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{Array, Int32Array, Int64Array, StringArray};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use sluice::{OutputMode, Session, Trigger};

use crate::support::session;

// The example itself (`cargo run -p sluice --example kafka_enrich`).
#[path = "../../examples/kafka_enrich.rs"]
mod kafka_enrich;

fn bootstrap() -> String {
    let b = std::env::var("SLUICE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let addr = b.split(',').next().unwrap_or("127.0.0.1:9092").to_string();
    if std::net::TcpStream::connect_timeout(
        &addr.parse().expect("a host:port address"),
        Duration::from_secs(2),
    )
    .is_err()
    {
        panic!("no Kafka broker answers at {b}: run `scripts/kafka-broker start` first (the README's test command does)");
    }
    b
}

fn topic(name: &str, partitions: i32) -> String {
    topic_on(&bootstrap(), name, partitions)
}

/// A new topic `<name>-<random>` on the broker at `bootstrap`.
fn topic_on(bootstrap: &str, name: &str, partitions: i32) -> String {
    let t = format!("{name}-{}", &uuid::Uuid::new_v4().to_string()[..8]);
    create_topic(bootstrap, &t, partitions);
    t
}

fn create_topic(bootstrap: &str, t: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let res = rt
        .block_on(admin.create_topics(
            &[NewTopic::new(t, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        ))
        .unwrap();
    for r in res {
        r.unwrap();
    }
}

fn produce(topic: &str, records: &[(Option<String>, String, i32)]) {
    produce_on(&bootstrap(), topic, records)
}

fn produce_on(bootstrap: &str, topic: &str, records: &[(Option<String>, String, i32)]) {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    for (k, v, part) in records {
        let mut r: BaseRecord<'_, String, String> =
            BaseRecord::to(topic).payload(v).partition(*part);
        if let Some(k) = k {
            r = r.key(k);
        }
        p.send(r).map_err(|(e, _)| e).unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// All values of a topic as a `read_committed` consumer sees them.
fn read_committed(topic: &str, partitions: i32) -> Vec<String> {
    read_on(&bootstrap(), topic, partitions, "read_committed")
}

/// All values of a topic on `bootstrap` as a consumer with `isolation` sees them.
fn read_on(bootstrap: &str, topic: &str, partitions: i32, isolation: &str) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{}", uuid::Uuid::new_v4()))
        .set("isolation.level", isolation)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let mut idle = 0;
    while idle < 15 {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                idle = 0;
                out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            }
            Some(Err(e)) => panic!("{e}"),
            None => idle += 1,
        }
    }
    out
}

fn records(n: usize, partitions: i32) -> Vec<(Option<String>, String, i32)> {
    (0..n)
        .map(|i| {
            let amount = (i * 37 % 250) as f64;
            let action = if i % 4 == 0 { "view" } else { "buy" };
            (
                Some(format!("k{i}")),
                format!("{{\"user\": \"u{}\", \"action\": \"{action}\", \"amount\": {amount}, \"id\": {i}}}", i % 7),
                (i as i32) % partitions,
            )
        })
        .collect()
}

#[test]
fn kafka_to_file_with_a_crash_between_sink_and_commit_keeps_each_record_once() {
    let t = topic("events", 3);
    produce(&t, &records(100, 3));
    let dir = tempfile::tempdir().unwrap();
    let (out, ckpt) = (dir.path().join("out"), dir.path().join("ckpt"));
    let run = |crash: bool| {
        let s = session();
        if crash {
            s.set_conf("sluice.testing.crashPoint", "afterSink:1");
        }
        let q = s
            .read_stream()
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap())
            .option("subscribe", &t)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "30")
            .load_source()
            .unwrap()
            .select_sql(["CAST(value AS STRING) AS value", "partition", "offset"])
            .unwrap()
            .write_stream()
            .format("parquet")
            .option("path", out.display())
            .option("checkpointLocation", ckpt.display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        (q.await_termination(), q.recent_progress())
    };
    let (first, _) = run(true);
    assert_eq!(first.unwrap_err().class(), "SLUICE_INJECTED_CRASH");
    let (second, progress) = run(false);
    second.unwrap();
    assert_eq!(
        progress[0].batch_id, 1,
        "the uncommitted batch is replayed under its id"
    );
    assert!(
        progress.iter().all(|p| p.num_input_rows <= 30),
        "maxOffsetsPerTrigger holds"
    );
    let m = &progress[0].sources[0].metrics;
    assert!(
        [
            "avgOffsetsBehindLatest",
            "maxOffsetsBehindLatest",
            "minOffsetsBehindLatest"
        ]
        .iter()
        .all(|k| m.contains_key(*k)),
        "progress reports offsets behind latest: {m:?}"
    );
    assert!(
        m["maxOffsetsBehindLatest"].parse::<i64>().unwrap() > 0,
        "the replayed batch 1 of 4 leaves records behind: {m:?}"
    );
    let offsets = std::fs::read_to_string(ckpt.join("offsets/1")).unwrap();
    assert!(
        offsets
            .lines()
            .last()
            .unwrap()
            .starts_with(&format!("{{\"{t}\":{{")),
        "{offsets}"
    );

    let batches = sluice::sink::file::read_sink_output(&out, "parquet", None).unwrap();
    let mut seen: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    for b in &batches {
        let p = b
            .column_by_name("partition")
            .unwrap()
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap()
            .clone();
        let o = b
            .column_by_name("offset")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .clone();
        for i in 0..b.num_rows() {
            *seen.entry((p.value(i), o.value(i))).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), 100, "every record");
    assert!(seen.values().all(|n| *n == 1), "exactly once");
}

/// Kafka `src` to Kafka `dst` with `exactlyOnce`, 20 records a batch from the earliest offsets;
/// `pause_ms` is the test hook's pause in each transaction.
fn exactly_once(
    s: &Session,
    src: &str,
    dst: &str,
    ckpt: &std::path::Path,
    trigger: Trigger,
    pause_ms: Option<&str>,
) -> sluice::StreamingQuery {
    let mut w = s
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20")
        .load_source()
        .unwrap()
        .select_sql(["key", "value"])
        .unwrap()
        .write_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("topic", dst)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", ckpt.display())
        .trigger(trigger);
    if let Some(ms) = pause_ms {
        w = w.option("sluice.testing.pauseInTransactionMs", ms);
    }
    w.start().unwrap()
}

#[test]
fn kafka_to_kafka_exactly_once_hides_the_crashed_attempt_from_read_committed_consumers() {
    let (src, dst) = (topic("in", 2), topic("out", 2));
    produce(&src, &records(60, 2));
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let run = |crash: bool| {
        let s = session();
        if crash {
            s.set_conf("sluice.testing.crashPoint", "afterSink:1");
        }
        exactly_once(&s, &src, &dst, &ckpt, Trigger::AvailableNow, None).await_termination()
    };
    assert!(run(true).is_err());
    run(false).unwrap();
    let values = read_committed(&dst, 2);
    assert_eq!(
        values.len(),
        60,
        "each record once for read_committed consumers"
    );
    let mut ids: Vec<String> = values.clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 60);

    // Sluice's own source reads the transactional topic, whose last offsets are commit markers
    // (no record): a batch read with read_committed gets each record once and does not wait
    // out kafkaConsumer.pollTimeoutMs; so does read_uncommitted (Spark's default).
    let started = std::time::Instant::now();
    let committed = batch_read(
        &dst,
        &[
            ("kafka.isolation.level", "read_committed".into()),
            ("startingOffsets", "earliest".into()),
        ],
    )
    .unwrap();
    assert_eq!(committed, ids);
    let mut uncommitted = batch_read(&dst, &[("startingOffsets", "earliest".into())]).unwrap();
    uncommitted.dedup();
    assert_eq!(uncommitted, ids);
    // And a stream of it, to the end of every partition.
    let s = session();
    let q = s
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", &dst)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load_source()
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("eos_out")
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let n: usize = s
        .sql("SELECT * FROM eos_out")
        .unwrap()
        .collect()
        .unwrap()
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(n, 60);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn kafka_data_loss_fails_or_skips_by_fail_on_data_loss() {
    let t = topic("loss", 1);
    produce(&t, &records(10, 1));
    for fail in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        // A checkpoint that read up to offset 50 of a partition that now ends at 10: the topic
        // was recreated, the records in between are gone.
        let seen: Arc<Mutex<usize>> = Arc::default();
        let run = |starting: &str| {
            let sink = seen.clone();
            let q = session()
                .read_stream()
                .format("kafka")
                .option("kafka.bootstrap.servers", bootstrap())
                .option("subscribe", &t)
                .option("startingOffsets", starting)
                .option("failOnDataLoss", fail.to_string())
                .load_source()
                .unwrap()
                .write_stream()
                .option("checkpointLocation", dir.path().display())
                .trigger(Trigger::AvailableNow)
                .foreach_batch(move |d, _| {
                    *sink.lock().unwrap() += d.num_rows();
                    Ok(())
                })
                .start()
                .unwrap();
            q.await_termination()
        };
        // Log offsets 50 as the end of batch 0 by hand, as a previous run on the old topic would.
        let off = format!("v1\n{{\"batchWatermarkMs\":0,\"batchTimestampMs\":0,\"conf\":{{}}}}\n{{\"{t}\":{{\"0\":50}}}}");
        std::fs::create_dir_all(dir.path().join("offsets")).unwrap();
        std::fs::create_dir_all(dir.path().join("commits")).unwrap();
        std::fs::write(dir.path().join("offsets/0"), off).unwrap();
        std::fs::write(
            dir.path().join("commits/0"),
            "v1\n{\"nextBatchWatermarkMs\":0}",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("metadata"),
            "{\"id\":\"5f1c2a8e-0000-4000-8000-000000000000\"}",
        )
        .unwrap();
        let result = run("earliest");
        if fail {
            let err = result.unwrap_err();
            assert_eq!(err.class(), "KAFKA_DATA_LOSS");
            assert!(
                err.message().contains(&t) && err.message().contains("failOnDataLoss"),
                "{err}"
            );
        } else {
            result.unwrap();
            assert_eq!(
                *seen.lock().unwrap(),
                10,
                "restarted from the partition's start, with a warning"
            );
        }
    }
}

#[test]
fn kafka_seed_example_parses_json_values_and_writes_enriched_records() {
    let (src, dst) = (topic("events", 2), topic("events-enriched", 1));
    produce(&src, &records(40, 2));
    let dir = tempfile::tempdir().unwrap();
    let n = kafka_enrich::enrich(&bootstrap(), &src, &dst, &dir.path().join("ckpt")).unwrap();
    assert_eq!(n, 30, "the 30 'buy' events");
    let values = read_committed(&dst, 1);
    assert_eq!(values.len(), 30);
    let v: serde_json::Value = serde_json::from_str(&values[0]).unwrap();
    assert!(v.get("user").is_some() && v.get("big").is_some(), "{v}");
    // The schema a Spark user expects from the Kafka source.
    let s = session();
    let f = s
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", &src)
        .load_source()
        .unwrap();
    let names: Vec<String> = f
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
        [
            "key",
            "value",
            "topic",
            "partition",
            "offset",
            "timestamp",
            "timestampType"
        ]
    );
    let _ = StringArray::from(vec!["unused"]).len();
    let _ = OutputMode::Append;
}

#[test]
fn kafka_headers_are_read_with_include_headers_and_written_by_the_sink() {
    use rdkafka::message::{Header, Headers, OwnedHeaders};
    let (src, dst) = (topic("hdr-in", 1), topic("hdr-out", 1));
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    for i in 0..3 {
        let v = format!("v{i}");
        let h = OwnedHeaders::new().insert(Header {
            key: "trace",
            value: Some(format!("t{i}").as_bytes()),
        });
        p.send(
            BaseRecord::<'_, String, String>::to(&src)
                .payload(&v)
                .headers(h),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let q = session()
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", &src)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load_source()
        .unwrap()
        .select_sql(["value", "headers"])
        .unwrap()
        .write_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("topic", &dst)
        .option("checkpointLocation", dir.path().display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", format!("reader-{}", uuid::Uuid::new_v4()))
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&dst, 0, rdkafka::Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut traces = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while traces.len() < 3 && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let h = m.headers().expect("headers were written");
            let first = h.iter().next().unwrap();
            traces.push((
                first.key.to_string(),
                String::from_utf8_lossy(first.value.unwrap()).into_owned(),
            ));
        }
    }
    traces.sort();
    assert_eq!(
        traces,
        vec![
            ("trace".into(), "t0".into()),
            ("trace".into(), "t1".into()),
            ("trace".into(), "t2".into())
        ]
    );
}

#[test]
fn kafka_subscribe_pattern_reads_every_matching_topic() {
    let tag = &uuid::Uuid::new_v4().to_string()[..8];
    let a = topic(&format!("pat{tag}-a"), 1);
    let b = topic(&format!("pat{tag}-b"), 2);
    let other = topic(&format!("other{tag}"), 1);
    produce(&a, &records(5, 1));
    produce(&b, &records(7, 2));
    produce(&other, &records(3, 1));
    let dir = tempfile::tempdir().unwrap();
    let q = session()
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribePattern", format!("pat{tag}-.*"))
        .option("startingOffsets", "earliest")
        .load_source()
        .unwrap()
        .write_stream()
        .format("noop")
        .option("checkpointLocation", dir.path().display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let rows: i64 = q.recent_progress().iter().map(|p| p.num_input_rows).sum();
    assert_eq!(
        rows, 12,
        "5 + 7 records of the matching topics, none of {other}"
    );
}

#[test]
fn kafka_min_offsets_per_trigger_waits_up_to_max_trigger_delay() {
    let t = topic("minoff", 1);
    produce(&t, &records(5, 1));
    let dir = tempfile::tempdir().unwrap();
    let q = session()
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", &t)
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "10")
        .option("maxTriggerDelay", "3 seconds")
        .load_source()
        .unwrap()
        .write_stream()
        .format("noop")
        .option("checkpointLocation", dir.path().display())
        .trigger(Trigger::ProcessingTime(Duration::from_millis(100)))
        .start()
        .unwrap();
    let batches = |q: &sluice::StreamingQuery| q.recent_progress().len();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while batches(&q) < 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(batches(&q), 1, "the first batch runs at once");
    produce(&t, &records(3, 1));
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(batches(&q), 1, "3 < minOffsetsPerTrigger: wait");
    while batches(&q) < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    q.stop();
    let p = q.recent_progress();
    assert_eq!(p.len(), 2, "after maxTriggerDelay the 3 records run anyway");
    assert_eq!(p[1].num_input_rows, 3);
}

#[test]
fn kafka_partitions_added_later_start_at_earliest() {
    use rdkafka::admin::NewPartitions;
    let t = topic("grow", 1);
    produce(&t, &records(4, 1));
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        let q = session()
            .read_stream()
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap())
            .option("subscribe", &t)
            .option("startingOffsets", "latest")
            .load_source()
            .unwrap()
            .write_stream()
            .format("noop")
            .option("checkpointLocation", dir.path().display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        q.await_termination().unwrap();
        q.recent_progress()
            .iter()
            .map(|p| p.num_input_rows)
            .sum::<i64>()
    };
    produce(&t, &records(2, 1));
    // A first run starting at latest: the query's position is logged once records arrive.
    let _ = run();
    produce(&t, &records(2, 1));
    assert_eq!(run(), 2, "only what arrived after the start position");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for r in rt
        .block_on(admin.create_partitions(&[NewPartitions::new(&t, 2)], &AdminOptions::new()))
        .unwrap()
    {
        r.unwrap();
    }
    produce(
        &t,
        &[
            (None, "p1-a".into(), 1),
            (None, "p1-b".into(), 1),
            (None, "p0".into(), 0),
        ],
    );
    assert_eq!(
        run(),
        3,
        "the new partition is read from its earliest offset"
    );
}

/// Continuous processing (issue 9), Kafka -> Kafka: the query is stopped mid-epoch without
/// committing it (as a crash would: `sluice.testing.continuous.stopWithoutCommit`), more records
/// are produced, the query restarts from the last committed epoch. Every input record is in the
/// output at least once; duplicates (the replayed tail) are allowed and reported.
#[test]
fn kafka_to_kafka_continuous_kill_and_restart_loses_no_record() {
    let (src, dst) = (topic("cin", 2), topic("cout", 2));
    let first: Vec<_> = records(200, 2);
    produce(&src, &first);
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let start = |s: &Session| {
        s.read_stream()
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap())
            .option("subscribe", &src)
            .option("startingOffsets", "earliest")
            .load_source()
            .unwrap()
            .select_sql(["key", "value"])
            .unwrap()
            .write_stream()
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap())
            .option("topic", &dst)
            .option("checkpointLocation", ckpt.display())
            // Long epochs: the second records must land in an epoch that has not ended when
            // the query stops (a real broker's fetches can take a good part of a second).
            .trigger(Trigger::Continuous(Duration::from_secs(3)))
            .start()
            .unwrap()
    };
    let s = session();
    s.set_conf("sluice.testing.continuous.stopWithoutCommit", "true");
    let q = start(&s);
    q.process_all_available().unwrap();
    // Wait for one committed epoch, then write more and "crash" before the next commit.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while q.recent_progress().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no epoch committed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second: Vec<_> = (200..300)
        .map(|i| (Some(format!("k{i}")), format!("{{\"id\": {i}}}"), i % 2))
        .collect();
    produce(&src, &second);
    // Not process_all_available, which waits for the epoch's commit: the records reach the
    // sink within milliseconds, and the query stops half way through the 3 s epoch.
    let committed = q.recent_progress().len();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        q.recent_progress().len(),
        committed,
        "no epoch ended in between"
    );
    q.stop();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    let third: Vec<_> = (300..400)
        .map(|i| (Some(format!("k{i}")), format!("{{\"id\": {i}}}"), i % 2))
        .collect();
    produce(&src, &third);

    let s = session();
    let q = start(&s);
    q.process_all_available().unwrap();
    q.stop();
    assert!(q.exception().is_none(), "{:?}", q.exception());

    let out = read_committed(&dst, 2);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for v in &out {
        *counts.entry(v.clone()).or_default() += 1;
    }
    let inputs: Vec<String> = first
        .iter()
        .chain(&second)
        .chain(&third)
        .map(|(_, v, _)| v.clone())
        .collect();
    let missing: Vec<&String> = inputs.iter().filter(|v| !counts.contains_key(*v)).collect();
    assert!(missing.is_empty(), "records lost: {missing:?}");
    let duplicates: usize = counts.values().map(|c| c - 1).sum();
    eprintln!(
        "continuous kafka->kafka kill-and-restart: {} inputs, {} outputs, {duplicates} duplicates \
         (at-least-once)",
        inputs.len(),
        out.len()
    );
    assert_eq!(out.len(), inputs.len() + duplicates);
    assert!(
        duplicates > 0,
        "the uncommitted epoch's records are replayed after the crash"
    );
}

/// The broker's SASL_SSL listener (`scripts/kafka-broker`: PLAIN and SCRAM for sluice /
/// sluice-secret, a CA the script made), as a Spark job would configure it.
fn sasl_ssl_options(mechanism: &str, password: &str) -> Vec<(String, String)> {
    let bootstrap = std::env::var("SLUICE_KAFKA_SASL_SSL_BOOTSTRAP")
        .unwrap_or_else(|_| "127.0.0.1:9094".into());
    let ca = std::env::var("SLUICE_KAFKA_CA")
        .unwrap_or_else(|_| "/tmp/sluice-kafka-broker/tls/ca.pem".into());
    let module = if mechanism == "PLAIN" {
        "org.apache.kafka.common.security.plain.PlainLoginModule"
    } else {
        "org.apache.kafka.common.security.scram.ScramLoginModule"
    };
    vec![
        ("kafka.bootstrap.servers".into(), bootstrap),
        ("kafka.security.protocol".into(), "SASL_SSL".into()),
        ("kafka.sasl.mechanism".into(), mechanism.into()),
        (
            "kafka.sasl.jaas.config".into(),
            format!("{module} required username=\"sluice\" password=\"{password}\";"),
        ),
        ("kafka.ssl.truststore.location".into(), ca),
        ("kafka.ssl.truststore.type".into(), "PEM".into()),
    ]
}

#[test]
fn kafka_sasl_ssl_source_with_scram_and_sink_with_plain() {
    let (src, dst) = (topic("secure-in", 1), topic("secure-out", 1));
    let input = records(20, 1);
    produce(&src, &input);
    let s = session();
    let mut reader = s.read_stream().format("kafka");
    for (k, v) in sasl_ssl_options("SCRAM-SHA-512", "sluice-secret") {
        reader = reader.option(k, v);
    }
    let mut writer = reader
        .option("subscribe", &src)
        .option("startingOffsets", "earliest")
        .load_source()
        .unwrap()
        .select_sql(["key", "value"])
        .unwrap()
        .write_stream()
        .format("kafka");
    for (k, v) in sasl_ssl_options("PLAIN", "sluice-secret") {
        writer = writer.option(k, v);
    }
    let dir = tempfile::tempdir().unwrap();
    let q = writer
        .option("topic", &dst)
        .option("checkpointLocation", dir.path().join("c").display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let mut out = read_committed(&dst, 1);
    out.sort();
    let mut want: Vec<String> = input.iter().map(|(_, v, _)| v.clone()).collect();
    want.sort();
    assert_eq!(out, want, "every record through TLS and SASL, once");
    let progress = q.last_progress().unwrap().json();
    assert!(
        !progress.contains("sluice-secret"),
        "no secret in progress: {progress}"
    );
}

#[test]
fn kafka_sasl_ssl_wrong_password_fails_in_seconds_naming_the_broker_and_mechanism() {
    let src = topic("secure-wrong", 1);
    let s = session();
    let mut reader = s.read_stream().format("kafka");
    for (k, v) in sasl_ssl_options("SCRAM-SHA-256", "not-the-password") {
        reader = reader.option(k, v);
    }
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let q = reader
        .option("subscribe", &src)
        .load_source()
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("wrong_password")
        .option("checkpointLocation", dir.path().join("c").display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    let err = q.await_termination().unwrap_err();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "failed after {took:?}: {err}"
    );
    assert_eq!(err.class(), "KAFKA_AUTHENTICATION", "{err}");
    let msg = err.to_string();
    assert!(msg.contains("9094"), "names the broker: {msg}");
    assert!(msg.contains("SCRAM-SHA-256"), "names the mechanism: {msg}");
    assert!(
        msg.contains("sasl.jaas.config"),
        "says what to check: {msg}"
    );
    assert!(!msg.contains("not-the-password"), "no secret: {msg}");

    // The sink: the same refusal, as fast.
    let started = std::time::Instant::now();
    produce(&src, &records(5, 1));
    let mut writer = s
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", &src)
        .option("startingOffsets", "earliest")
        .load_source()
        .unwrap()
        .select_sql(["value"])
        .unwrap()
        .write_stream()
        .format("kafka");
    for (k, v) in sasl_ssl_options("PLAIN", "not-the-password") {
        writer = writer.option(k, v);
    }
    let q = writer
        .option("topic", &src)
        .option("checkpointLocation", dir.path().join("sink").display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    let err = q.await_termination().unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(15), "{err}");
    assert_eq!(err.class(), "KAFKA_AUTHENTICATION", "{err}");
    assert!(err.to_string().contains("PLAIN"), "{err}");
    assert!(!err.to_string().contains("not-the-password"), "{err}");
}

/// Every log line of this test binary from the moment the first test asks for them (a logger
/// can be installed once per process; other tests' lines are kept too, which only makes the
/// "never printed" checks stricter).
fn captured_logs() -> Arc<Mutex<Vec<String>>> {
    struct Capture(Arc<Mutex<Vec<String>>>);
    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, record: &log::Record<'_>) {
            if let Ok(mut lines) = self.0.lock() {
                if lines.len() < 200_000 {
                    lines.push(format!(
                        "{} {}: {}",
                        record.level(),
                        record.target(),
                        record.args()
                    ));
                }
            }
        }
        fn flush(&self) {}
    }
    static LINES: std::sync::OnceLock<Arc<Mutex<Vec<String>>>> = std::sync::OnceLock::new();
    LINES
        .get_or_init(|| {
            let lines = Arc::new(Mutex::new(Vec::new()));
            log::set_logger(Box::leak(Box::new(Capture(lines.clone()))))
                .expect("no other logger in the integration tests");
            log::set_max_level(log::LevelFilter::Debug);
            lines
        })
        .clone()
}

/// Issue 18 part 10: a wrong password (with librdkafka's security and broker debug lines on),
/// and a secret option librdkafka does not know (its error printed the key and the value), fail
/// without the secret in the error or in any log line.
#[test]
fn kafka_secrets_are_never_printed_in_errors_or_client_logs() {
    let logs = captured_logs();
    let src = topic("secret-never-printed", 1);
    let s = session();
    let dir = tempfile::tempdir().unwrap();

    let password = "wrong-pw-never-printed-91";
    let mut reader = s.read_stream().format("kafka");
    for (k, v) in sasl_ssl_options("SCRAM-SHA-256", password) {
        reader = reader.option(k, v);
    }
    let q = reader
        .option("kafka.debug", "security,broker")
        .option("subscribe", &src)
        .load_source()
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("secret_wrong_password")
        .option("checkpointLocation", dir.path().join("c1").display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    let err = q.await_termination().unwrap_err();
    assert_eq!(err.class(), "KAFKA_AUTHENTICATION", "{err}");
    assert!(!format!("{err} {err:?}").contains(password), "{err}");

    // A secret-named option librdkafka refuses: its error showed `key value`.
    let unknown = "unknown-option-secret-92";
    let result = s
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("kafka.sasl.login.password", unknown)
        .option("subscribe", &src)
        .load_source()
        .and_then(|f| {
            f.write_stream()
                .format("memory")
                .query_name("secret_unknown_option")
                .option("checkpointLocation", dir.path().join("c2").display())
                .trigger(Trigger::AvailableNow)
                .start()
        })
        .and_then(|q| q.await_termination());
    let err = result.unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(
        text.contains("sasl.login.password"),
        "names the option: {text}"
    );
    assert!(!text.contains(unknown), "{text}");

    let lines = logs.lock().unwrap();
    assert!(
        lines.iter().any(|l| l.contains("librdkafka")),
        "librdkafka's lines are captured"
    );
    for line in lines.iter() {
        assert!(!line.contains(password), "a log line: {line}");
        assert!(!line.contains(unknown), "a log line: {line}");
    }
}

/// `scripts/kafka-broker ARGS` (the Apache Kafka Java client's `produce` and `codecs`): stdout.
fn broker_script(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/kafka-broker");
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .expect("scripts/kafka-broker runs");
    assert!(
        out.status.success(),
        "scripts/kafka-broker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every record of `topic` read by a Sluice query: (key, value, header `codec`).
fn read_all(topic: &str) -> Vec<(String, String, String)> {
    let rows: Arc<Mutex<Vec<(String, String, String)>>> = Arc::default();
    let sink = rows.clone();
    let dir = tempfile::tempdir().unwrap();
    session()
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load_source()
        .unwrap()
        .select_sql([
            "CAST(key AS STRING) AS k",
            "CAST(value AS STRING) AS v",
            "CAST(filter(headers, h -> h.key = 'codec')[0].value AS STRING) AS codec",
        ])
        .unwrap()
        .write_stream()
        .option("checkpointLocation", dir.path().display())
        .trigger(Trigger::AvailableNow)
        .foreach_batch(move |d, _| {
            for b in d.batches() {
                let col = |i: usize| crate::support::strings(b.column(i));
                let (k, v, c) = (col(0), col(1), col(2));
                for i in 0..b.num_rows() {
                    sink.lock()
                        .unwrap()
                        .push((k[i].clone(), v[i].clone(), c[i].clone()));
                }
            }
            Ok(())
        })
        .start()
        .unwrap()
        .await_termination()
        .unwrap();
    let mut out = rows.lock().unwrap().clone();
    out.sort();
    out
}

#[test]
fn kafka_topics_compressed_by_the_java_client_with_every_codec_are_read() {
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let t = topic(&format!("codec-{codec}"), 2);
        assert_eq!(broker_script(&["produce", &t, codec, "300"]).trim(), "300");
        assert_eq!(
            broker_script(&["codecs", &t]).trim(),
            codec,
            "the broker holds {codec} batches"
        );
        let got = read_all(&t);
        let mut want: Vec<(String, String, String)> = (0..300)
            .map(|i| (format!("k{i}"), format!("{codec}-{i}"), codec.to_string()))
            .collect();
        want.sort();
        assert_eq!(got, want, "every {codec} record once, with key and header");
    }
}

#[test]
fn kafka_sink_compression_type_writes_batches_in_that_codec() {
    let src = topic("codec-src", 1);
    produce(&src, &records(200, 1));
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let dst = topic(&format!("codec-out-{codec}"), 1);
        let dir = tempfile::tempdir().unwrap();
        session()
            .read_stream()
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap())
            .option("subscribe", &src)
            .option("startingOffsets", "earliest")
            .load_source()
            .unwrap()
            .select_sql(["key", "value"])
            .unwrap()
            .write_stream()
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap())
            .option("kafka.compression.type", codec)
            .option("kafka.compression.zstd.level", "3")
            .option("topic", &dst)
            .option("checkpointLocation", dir.path().display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap()
            .await_termination()
            .unwrap();
        assert_eq!(read_committed(&dst, 1).len(), 200, "{codec}");
        assert_eq!(broker_script(&["codecs", &dst]).trim(), codec);
    }
}

/// Records `v<p>-<i>` with create times `base + 1000 * i` ms, `n` per partition.
fn produce_timed(topic: &str, partitions: i32, n: i64, base: i64) {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    for part in 0..partitions {
        for i in 0..n {
            let v = format!("v{part}-{i}");
            let r: BaseRecord<'_, String, String> = BaseRecord::to(topic)
                .payload(&v)
                .partition(part)
                .timestamp(base + 1000 * i);
            p.send(r).map_err(|(e, _)| e).unwrap();
        }
    }
    p.flush(Duration::from_secs(30)).unwrap();
    // The producer's context drops delivery errors: check that every record is in the topic
    // before the test looks records up by time.
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    for part in 0..partitions {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (_, high) = c
                .fetch_watermarks(topic, part, Duration::from_secs(10))
                .unwrap();
            if high >= n {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{topic}-{part} holds {high} of the {n} records produced"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The values of a batch read of `topic` with `options`, sorted.
fn batch_read(topic: &str, options: &[(&str, String)]) -> sluice::Result<Vec<String>> {
    let mut r = session()
        .read()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", topic);
    for (k, v) in options {
        r = r.option(*k, v);
    }
    let out = r
        .load_source()?
        .select_sql(["CAST(value AS STRING) AS v"])?
        .collect()?;
    let mut vals: Vec<String> = out
        .iter()
        .flat_map(|b| crate::support::strings(b.column(0)))
        .collect();
    vals.sort();
    Ok(vals)
}

#[test]
fn kafka_batch_reads_take_starting_and_ending_offsets_and_timestamps() {
    let t = topic("batch", 2);
    let base = 1_700_000_000_000i64;
    produce_timed(&t, 2, 5, base);
    let all = batch_read(&t, &[]).unwrap();
    assert_eq!(all.len(), 10, "earliest to latest by default: {all:?}");
    let some = batch_read(
        &t,
        &[
            ("startingOffsets", format!(r#"{{"{t}":{{"0":1,"1":-2}}}}"#)),
            ("endingOffsets", format!(r#"{{"{t}":{{"0":3,"1":-1}}}}"#)),
        ],
    )
    .unwrap();
    assert_eq!(
        some,
        vec!["v0-1", "v0-2", "v1-0", "v1-1", "v1-2", "v1-3", "v1-4"]
    );
    // By time: records at base+2000 .. before base+4000 (the first offset at or after it).
    let timed = batch_read(
        &t,
        &[
            ("startingTimestamp", (base + 2000).to_string()),
            ("endingTimestamp", (base + 4000).to_string()),
        ],
    )
    .unwrap();
    assert_eq!(timed, vec!["v0-2", "v0-3", "v1-2", "v1-3"]);
    let by_part = batch_read(
        &t,
        &[(
            "startingOffsetsByTimestamp",
            format!(r#"{{"{t}":{{"0":{},"1":{}}}}}"#, base + 4000, base + 3500),
        )],
    )
    .unwrap();
    assert_eq!(by_part, vec!["v0-4", "v1-4"]);
    // Spark's rules: no record that late fails unless the strategy says latest; a batch read
    // cannot start at latest; every assigned partition must be named.
    let late = [("startingTimestamp", (base + 60_000).to_string())];
    let err = batch_read(&t, &late).unwrap_err();
    assert!(err.message().contains("No offset matched"), "{err}");
    let mut late_latest = late.to_vec();
    late_latest.push(("startingOffsetsByTimestampStrategy", "latest".into()));
    assert!(batch_read(&t, &late_latest).unwrap().is_empty());
    let err = batch_read(&t, &[("startingOffsets", "latest".into())]).unwrap_err();
    assert!(
        err.message().contains("can't be latest for batch queries"),
        "{err}"
    );
    let partial = [("startingOffsets", format!(r#"{{"{t}":{{"0":1}}}}"#))];
    let err = batch_read(&t, &partial).unwrap_err();
    assert!(
        err.message().contains("must specify all TopicPartitions"),
        "{err}"
    );
}

#[test]
fn kafka_min_partitions_splits_a_read_and_group_options_are_taken() {
    let t = topic("min-partitions", 1);
    produce(&t, &records(100, 1));
    let options: std::collections::HashMap<String, String> = [
        ("kafka.bootstrap.servers", bootstrap()),
        ("subscribe", t.clone()),
        ("minPartitions", "4".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let (_, batches) = sluice::kafka::source::read_batch(&options).unwrap();
    assert_eq!(batches.len(), 4, "one partition read in 4 pieces");
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 100);
    // groupIdPrefix and kafka.group.id name the consumer's group; the records are all read.
    for (k, v) in [
        ("groupIdPrefix", "team-a"),
        ("kafka.group.id", "team-a-fixed"),
    ] {
        assert_eq!(batch_read(&t, &[(k, v.into())]).unwrap().len(), 100, "{k}");
    }
}

#[test]
fn kafka_streaming_starts_by_timestamp_and_refuses_ending_offsets() {
    let t = topic("stream-ts", 2);
    let base = 1_700_000_000_000i64;
    produce_timed(&t, 2, 5, base);
    let dir = tempfile::tempdir().unwrap();
    let s = session();
    let q = s
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", &t)
        .option("startingTimestamp", (base + 3000).to_string())
        .load_source()
        .unwrap()
        .select_sql(["CAST(value AS STRING) AS v"])
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("kafka_by_time")
        .option("checkpointLocation", dir.path().display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let out = s
        .sql("SELECT v FROM kafka_by_time ORDER BY v")
        .unwrap()
        .collect()
        .unwrap();
    let vals: Vec<String> = out
        .iter()
        .flat_map(|b| crate::support::strings(b.column(0)))
        .collect();
    assert_eq!(vals, vec!["v0-3", "v0-4", "v1-3", "v1-4"]);
    let err = s
        .read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", &t)
        .option("endingOffsets", "latest")
        .load_source()
        .unwrap_err();
    assert!(
        err.message().contains("not valid in streaming queries"),
        "{err}"
    );
}

/// A broker of this test's own (`scripts/kafka-broker` on ports 19092-19094 with its own data
/// folder), for a test that stops and restarts it. Stopped when dropped.
struct PrivateBroker {
    data: tempfile::TempDir,
}

impl PrivateBroker {
    const BOOTSTRAP: &'static str = "127.0.0.1:19092";

    fn script(&self, cmd: &str) {
        let out = self.run(cmd);
        assert!(
            out.status.success(),
            "scripts/kafka-broker {cmd}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn run(&self, cmd: &str) -> std::process::Output {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/kafka-broker");
        std::process::Command::new(script)
            .arg(cmd)
            .env("SLUICE_KAFKA_PORT", "19092")
            .env("SLUICE_KAFKA_CONTROLLER_PORT", "19093")
            .env("SLUICE_KAFKA_SASL_SSL_PORT", "19094")
            .env("SLUICE_KAFKA_DATA", self.data.path())
            .output()
            .expect("scripts/kafka-broker runs")
    }

    fn start() -> Self {
        bootstrap(); // the shared broker is up, so the jars are fetched
        let b = PrivateBroker {
            data: tempfile::tempdir().unwrap(),
        };
        b.script("start");
        b
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        let _ = self.run("stop");
    }
}

/// Waits up to `secs` for `cond`, polling every 200 ms.
fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn kafka_to_kafka(
    s: &Session,
    from: (&str, &str),
    to: (&str, &str),
    ckpt: &std::path::Path,
) -> sluice::StreamingQuery {
    s.read_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", from.0)
        .option("subscribe", from.1)
        .option("startingOffsets", "earliest")
        .load_source()
        .unwrap()
        .select_sql(["key", "value"])
        .unwrap()
        .write_stream()
        .format("kafka")
        .option("kafka.bootstrap.servers", to.0)
        .option("topic", to.1)
        .option("checkpointLocation", ckpt.display())
        .trigger(Trigger::ProcessingTime(Duration::from_millis(200)))
        .start()
        .unwrap()
}

/// Values as a set, asserting there is no duplicate.
fn once_each(values: Vec<String>) -> std::collections::BTreeSet<String> {
    let n = values.len();
    let set: std::collections::BTreeSet<String> = values.into_iter().collect();
    assert_eq!(set.len(), n, "no record twice");
    set
}

#[test]
fn kafka_broker_stopped_and_restarted_while_queries_run_loses_and_duplicates_nothing() {
    let broker = PrivateBroker::start();
    let b = PrivateBroker::BOOTSTRAP;
    let main = bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let s = session();
    // The source's broker goes away: the query waits, says so, and resumes.
    let (src, dst) = (topic_on(b, "restart-in", 2), topic("restart-out", 1));
    let input = records(200, 2);
    produce_on(b, &src, &input[..100]);
    let q = kafka_to_kafka(&s, (b, &src), (&main, &dst), &dir.path().join("a"));
    wait_for(60, "the first 100 records", || {
        read_committed(&dst, 1).len() >= 100
    });
    broker.script("stop");
    wait_for(30, "a status saying the query waits", || {
        let st = q.status().message;
        eprintln!(
            "status: {st} active={} exc={:?}",
            q.is_active(),
            q.exception()
        );
        st.contains("Waiting for a source to come back")
    });
    assert!(q.is_active(), "the query waits instead of failing");
    let waiting = q.status().message;
    assert!(
        waiting.contains(b),
        "the status names the broker: {waiting}"
    );
    broker.script("start");
    produce_on(b, &src, &input[100..]);
    wait_for(90, "all 200 records", || {
        read_committed(&dst, 1).len() >= 200
    });
    let out = once_each(read_committed(&dst, 1));
    let want: std::collections::BTreeSet<String> =
        input.iter().map(|(_, v, _)| v.clone()).collect();
    assert_eq!(out, want, "every record once across the outage");
    q.stop();

    // The sink's broker goes away while a batch is written: the batch waits for delivery.
    let (src, dst) = (
        topic("restart-sink-in", 1),
        topic_on(b, "restart-sink-out", 1),
    );
    let input = records(100, 1);
    produce(&src, &input[..50]);
    let q = kafka_to_kafka(&s, (&main, &src), (b, &dst), &dir.path().join("b"));
    wait_for(60, "the first 50 records", || {
        read_on(b, &dst, 1, "read_committed").len() >= 50
    });
    broker.script("stop");
    produce(&src, &input[50..]);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        q.is_active(),
        "the sink waits instead of failing: {:?}",
        q.exception()
    );
    broker.script("start");
    wait_for(90, "all 100 records", || {
        read_on(b, &dst, 1, "read_committed").len() >= 100
    });
    std::thread::sleep(Duration::from_secs(1));
    let out = once_each(read_on(b, &dst, 1, "read_committed"));
    let want: std::collections::BTreeSet<String> =
        input.iter().map(|(_, v, _)| v.clone()).collect();
    assert_eq!(
        out, want,
        "every record once across the outage (idempotent producer)"
    );
    q.stop();
}

#[test]
fn kafka_topic_deleted_and_recreated_fails_or_restarts_by_fail_on_data_loss() {
    for fail in [true, false] {
        let t = topic("recreated", 1);
        produce(&t, &records(10, 1));
        let dir = tempfile::tempdir().unwrap();
        let seen: Arc<Mutex<usize>> = Arc::default();
        let run = || {
            let sink = seen.clone();
            session()
                .read_stream()
                .format("kafka")
                .option("kafka.bootstrap.servers", bootstrap())
                .option("subscribe", &t)
                .option("startingOffsets", "earliest")
                .option("failOnDataLoss", fail.to_string())
                .load_source()
                .unwrap()
                .write_stream()
                .option("checkpointLocation", dir.path().display())
                .trigger(Trigger::AvailableNow)
                .foreach_batch(move |d, _| {
                    *sink.lock().unwrap() += d.num_rows();
                    Ok(())
                })
                .start()
                .unwrap()
                .await_termination()
        };
        run().unwrap();
        assert_eq!(*seen.lock().unwrap(), 10);
        // Delete the topic, wait until it is gone, create it again with 3 records.
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .create()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for r in rt
            .block_on(admin.delete_topics(&[&t], &AdminOptions::new()))
            .unwrap()
        {
            r.unwrap();
        }
        wait_for(30, "the topic to be created again", || {
            let res = rt.block_on(admin.create_topics(
                &[NewTopic::new(&t, 1, TopicReplication::Fixed(1))],
                &AdminOptions::new(),
            ));
            matches!(res.as_deref(), Ok([Ok(_)]))
        });
        produce(&t, &records(3, 1));
        let result = run();
        if fail {
            let err = result.unwrap_err();
            assert_eq!(err.class(), "KAFKA_DATA_LOSS", "{err}");
            assert!(err.message().contains("failOnDataLoss"), "{err}");
            assert_eq!(*seen.lock().unwrap(), 10, "nothing read past the loss");
        } else {
            result.unwrap();
            assert_eq!(
                *seen.lock().unwrap(),
                13,
                "the new topic read from its start"
            );
        }
    }
}

const CHILD_ENV: &str = "SLUICE_KAFKA_TEST_CHILD";

#[test]
#[ignore = "a child process: kafka_exactly_once_sink_killed_mid_transaction_is_fenced_aborted_and_written_once starts it and kills it"]
fn kafka_exactly_once_child_process() {
    let spec = std::env::var(CHILD_ENV).expect("run by its parent test");
    let [src, dst, ckpt]: [&str; 3] = spec.split('|').collect::<Vec<_>>().try_into().unwrap();
    let q = exactly_once(
        &session(),
        src,
        dst,
        std::path::Path::new(ckpt),
        Trigger::ProcessingTime(Duration::ZERO),
        Some("60000"),
    );
    q.await_termination().unwrap();
}

#[test]
fn kafka_exactly_once_sink_killed_mid_transaction_is_fenced_aborted_and_written_once() {
    let (src, dst) = (topic("eos-kill-in", 1), topic("eos-kill-out", 1));
    let input = records(60, 1);
    produce(&src, &input);
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kafka::kafka_exactly_once_child_process",
            "--ignored",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{src}|{dst}|{}", ckpt.display()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Batch 0's 20 records are in the open transaction: uncommitted readers see them.
    wait_for(60, "records of the open transaction", || {
        read_on(&bootstrap(), &dst, 1, "read_uncommitted").len() >= 20
    });
    assert!(read_committed(&dst, 1).is_empty(), "nothing committed yet");
    child.kill().unwrap(); // SIGKILL, in the middle of the transaction
    child.wait().unwrap();
    // The restart: init_transactions fences the dead producer and aborts its transaction.
    exactly_once(&session(), &src, &dst, &ckpt, Trigger::AvailableNow, None)
        .await_termination()
        .unwrap();
    let out = once_each(read_committed(&dst, 1));
    let want: std::collections::BTreeSet<String> =
        input.iter().map(|(_, v, _)| v.clone()).collect();
    assert_eq!(out, want, "each record once for read_committed consumers");
    let all = read_on(&bootstrap(), &dst, 1, "read_uncommitted");
    assert_eq!(
        all.len(),
        80,
        "the 20 records of the aborted transaction are on the log, hidden"
    );
}
