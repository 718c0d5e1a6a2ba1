//! The Kafka sink (Spark's `KafkaSink`), on librdkafka.
//!
//! Rows need a `value` column (string or binary); `key`, `topic` and `partition` columns are
//! optional, and the `topic` option overrides the column. Spark's Kafka sink is at-least-once:
//! a batch replayed after a crash is written again. Sluice does the same by default.
//!
//! **Exactly-once** (`exactlyOnce=true`): each batch is written in one Kafka transaction with a
//! stable `transactional.id` (`sluice-<query id>`), so a crashed attempt is aborted and never
//! visible to `read_committed` consumers. In the same transaction the sink commits the batch id
//! as the offset of partition 0 of the (first) output topic for the private consumer group
//! `sluice-sink-<query id>` (`send_offsets_to_transaction`). A replayed batch N first reads that
//! group's committed offset: if it is already N+1 or more, batch N was committed and is skipped.
//! A restart's `init_transactions` fences a killed attempt's producer and aborts its open
//! transaction.
//!
//! The producer is idempotent by default (`enable.idempotence`, as the Java client since Kafka
//! 3.0, unless `kafka.acks` or `kafka.retries` rule it out), so its own retries write no
//! duplicates. While the broker is away, a batch waits for its records' delivery up to
//! `kafka.delivery.timeout.ms` (librdkafka's `message.timeout.ms`, 300 s by default); a record
//! that is still not delivered then fails the batch, which is not committed and is written
//! again by the restart, never dropped.

use crate::error::class;
use std::collections::HashMap;
use std::time::Duration;

use arrow::array::{
    Array, ArrayRef, BinaryArray, Int32Array, LargeBinaryArray, LargeStringArray, StringArray,
    StringViewArray,
};
use arrow::datatypes::DataType;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset as KOffset, TopicPartitionList};

use crate::error::{Result, SluiceError};
use crate::kafka::log::{within, Failure, KafkaLogContext, Logged};
use crate::sink::{BatchData, Sink, SinkContext, SinkProvider};

const TIMEOUT: Duration = Duration::from_secs(30);

/// The definition of a Kafka sink.
#[derive(Debug, Clone)]
pub struct KafkaSinkProvider {
    client: crate::kafka::conf::Settings,
    topic: Option<String>,
    exactly_once: bool,
    /// How long a batch waits for its records' delivery.
    delivery_timeout: Duration,
    /// Test hook: sleep this long in each transaction, after the records were sent.
    #[cfg(feature = "testing")]
    pause_in_transaction: Option<Duration>,
}

/// Sink option of the `testing` feature: an exactly-once batch sleeps this many milliseconds
/// in its transaction after sending its records (so a test can kill the process there).
#[cfg(feature = "testing")]
pub const PAUSE_IN_TRANSACTION: &str = "sluice.testing.pauseInTransactionMs";

impl KafkaSinkProvider {
    /// A Kafka sink from its options: `kafka.bootstrap.servers` (required), other `kafka.*`
    /// client settings, `topic` and `exactlyOnce` (default false).
    pub fn try_new(options: &HashMap<String, String>) -> Result<Self> {
        let get = |k: &str| {
            options
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.clone())
        };
        let bootstrap = get("kafka.bootstrap.servers").ok_or_else(|| {
            SluiceError::query(
                class::KAFKA_INVALID_OPTION,
                "Option 'kafka.bootstrap.servers' must be specified for the Kafka sink",
            )
        })?;
        let mut client = vec![("bootstrap.servers".to_string(), bootstrap)];
        for (k, v) in options {
            if let Some(key) = k.to_ascii_lowercase().strip_prefix("kafka.") {
                if key != "bootstrap.servers" {
                    client.push((key.to_string(), v.clone()));
                }
            }
        }
        let mut client = crate::kafka::conf::client_settings(&client)?;
        let given = client.clone();
        let set = |k: &str| {
            given
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let acks_all = set("acks")
            .or_else(|| set("request.required.acks"))
            .is_none_or(|a| a == "all" || a == "-1");
        let retries = set("retries").or_else(|| set("message.send.max.retries"));
        if set("enable.idempotence").is_none() && acks_all && retries.as_deref() != Some("0") {
            client.push(("enable.idempotence".into(), "true".into()));
        }
        let delivery_timeout = set("message.timeout.ms")
            .or_else(|| set("delivery.timeout.ms"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_secs(300));
        let exactly_once = match get("exactlyOnce") {
            Some(v) => v.trim().parse::<bool>().map_err(|_| {
                SluiceError::query(
                    class::KAFKA_INVALID_OPTION,
                    format!("exactlyOnce must be true or false, got {v:?}"),
                )
            })?,
            None => false,
        };
        #[cfg(feature = "testing")]
        let pause_in_transaction = get(PAUSE_IN_TRANSACTION)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_millis);
        Ok(Self {
            client,
            topic: get("topic"),
            exactly_once,
            delivery_timeout,
            #[cfg(feature = "testing")]
            pause_in_transaction,
        })
    }

    fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        for (k, v) in &self.client {
            c.set(k, v);
        }
        c
    }
}

impl SinkProvider for KafkaSinkProvider {
    fn kind(&self) -> &'static str {
        "kafka"
    }
    fn description(&self) -> String {
        format!(
            "KafkaSink[{}]",
            self.topic.clone().unwrap_or_else(|| "topic column".into())
        )
    }
    fn create_sink(&self, ctx: &SinkContext) -> Result<Box<dyn Sink>> {
        let query_id = &ctx.query_id;
        let mut pc = self.config();
        if self.exactly_once {
            pc.set("transactional.id", format!("sluice-{query_id}"));
            pc.set("enable.idempotence", "true");
        }
        let producer: ThreadedProducer<KafkaLogContext> = pc
            .create_with_context(KafkaLogContext::default())
            .map_err(|e| {
                SluiceError::connector(
                    class::KAFKA_CLIENT,
                    format!("cannot create a Kafka producer: {e}"),
                )
            })?;
        let mut marker = None;
        if self.exactly_once {
            // A retriable refusal (the broker still aborting a killed attempt's transaction:
            // CONCURRENT_TRANSACTIONS) is asked again until the whole timeout is spent, not
            // only the one-second slice `within` calls with.
            let deadline = std::time::Instant::now() + TIMEOUT;
            within(producer.context(), TIMEOUT, |t| {
                retrying(deadline, || producer.init_transactions(t))
            })
            .map_err(|f| {
                failure(&self.client, f, |e| {
                    SluiceError::connector(
                        class::KAFKA_TRANSACTION,
                        format!("cannot initialise Kafka transactions: {e}"),
                    )
                })
            })?;
            let mut cc = self.config();
            cc.set("group.id", format!("sluice-sink-{query_id}"));
            cc.set("enable.auto.commit", "false");
            let consumer: BaseConsumer<KafkaLogContext> = cc
                .create_with_context(KafkaLogContext::default())
                .map_err(|e| {
                    SluiceError::connector(
                        class::KAFKA_CLIENT,
                        format!("cannot create a Kafka consumer: {e}"),
                    )
                })?;
            marker = Some(Logged::new(consumer));
        }
        Ok(Box::new(KafkaSink {
            producer,
            client: self.client.clone(),
            delivery_timeout: self.delivery_timeout,
            #[cfg(feature = "testing")]
            pause_in_transaction: self.pause_in_transaction,
            marker,
            topic: self.topic.clone(),
            written: 0,
        }))
    }
    fn supports_continuous(&self) -> bool {
        // Transactions per epoch are not implemented: continuous is at-least-once.
        !self.exactly_once
    }
}

/// Runs a transaction call again while it fails with an error Kafka calls retriable (the
/// broker still aborting a fenced producer's transaction: `CONCURRENT_TRANSACTIONS`), until
/// `deadline`.
fn retrying(
    deadline: std::time::Instant,
    mut call: impl FnMut() -> rdkafka::error::KafkaResult<()>,
) -> rdkafka::error::KafkaResult<()> {
    loop {
        match call() {
            Err(rdkafka::error::KafkaError::Transaction(e))
                if e.is_retriable() && std::time::Instant::now() < deadline =>
            {
                log::debug!("Kafka transactions: {e}; trying again");
                std::thread::sleep(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// A failed client call's error: a refused login names the broker and the mechanism, anything
/// else is `other`'s.
fn failure(
    client: &[(String, String)],
    f: Failure,
    other: impl FnOnce(rdkafka::error::KafkaError) -> SluiceError,
) -> SluiceError {
    match f {
        Failure::Refused(text) => crate::kafka::conf::refused(&text, client),
        Failure::Kafka(e) => other(e),
    }
}

struct KafkaSink {
    producer: ThreadedProducer<KafkaLogContext>,
    /// The librdkafka settings (for error messages).
    client: crate::kafka::conf::Settings,
    delivery_timeout: Duration,
    #[cfg(feature = "testing")]
    pause_in_transaction: Option<Duration>,
    /// Exactly-once: the consumer of the private group whose offsets record committed batches.
    marker: Option<Logged<BaseConsumer<KafkaLogContext>>>,
    topic: Option<String>,
    written: u64,
}

fn bytes_at(a: &ArrayRef, i: usize) -> Option<Vec<u8>> {
    if a.is_null(i) {
        return None;
    }
    let any = a.as_any();
    if let Some(s) = any.downcast_ref::<StringArray>() {
        return Some(s.value(i).as_bytes().to_vec());
    }
    if let Some(s) = any.downcast_ref::<LargeStringArray>() {
        return Some(s.value(i).as_bytes().to_vec());
    }
    if let Some(s) = any.downcast_ref::<StringViewArray>() {
        return Some(s.value(i).as_bytes().to_vec());
    }
    if let Some(b) = any.downcast_ref::<BinaryArray>() {
        return Some(b.value(i).to_vec());
    }
    any.downcast_ref::<LargeBinaryArray>()
        .map(|b| b.value(i).to_vec())
}

/// The `headers` cell (`array<struct<key: string, value: binary>>`) as Kafka headers.
fn headers_at(a: &ArrayRef, i: usize) -> Result<Option<rdkafka::message::OwnedHeaders>> {
    let Some(list) = a.as_any().downcast_ref::<arrow::array::ListArray>() else {
        return Err(SluiceError::query(
            class::KAFKA_INVALID_COLUMN,
            "headers must be array<struct<key: string, value: binary>>",
        ));
    };
    if list.is_null(i) {
        return Ok(None);
    }
    let entries = list.value(i);
    let s = entries
        .as_any()
        .downcast_ref::<arrow::array::StructArray>()
        .ok_or_else(|| {
            SluiceError::query(
                class::KAFKA_INVALID_COLUMN,
                "headers must be array<struct<key, value>>",
            )
        })?;
    let mut out = rdkafka::message::OwnedHeaders::new();
    for j in 0..s.len() {
        let key = bytes_at(s.column(0), j)
            .map(|k| String::from_utf8_lossy(&k).into_owned())
            .unwrap_or_default();
        let value = bytes_at(s.column(1), j);
        out = out.insert(rdkafka::message::Header {
            key: &key,
            value: value.as_deref(),
        });
    }
    Ok(Some(out))
}

fn check_type(name: &str, a: &ArrayRef) -> Result<()> {
    match a.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Binary | DataType::LargeBinary => Ok(()),
        other => Err(SluiceError::query(
            class::KAFKA_INVALID_COLUMN,
            format!("{name} attribute type must be a string or binary, got {other}; cast it (e.g. CAST({name} AS STRING) or to_json(..))"),
        )),
    }
}

impl KafkaSink {
    /// Sends every row of `data` (no flush); returns how many.
    fn send_rows(
        &mut self,
        data: &BatchData,
        value_idx: usize,
        key_idx: Option<usize>,
        topic_idx: Option<usize>,
        part_idx: Option<usize>,
        headers_idx: Option<usize>,
    ) -> Result<u64> {
        let mut n = 0u64;
        for b in data.batches() {
            check_type("value", b.column(value_idx))?;
            if let Some(k) = key_idx {
                check_type("key", b.column(k))?;
            }
            let parts =
                part_idx.and_then(|p| b.column(p).as_any().downcast_ref::<Int32Array>().cloned());
            for i in 0..b.num_rows() {
                let value = bytes_at(b.column(value_idx), i);
                let key = key_idx.and_then(|k| bytes_at(b.column(k), i));
                let topic = match &self.topic {
                    Some(t) => t.clone(),
                    None => topic_idx
                        .and_then(|t| bytes_at(b.column(t), i))
                        .map(|v| String::from_utf8_lossy(&v).into_owned())
                        .ok_or_else(|| {
                            SluiceError::input(
                                class::KAFKA_INVALID_COLUMN,
                                "a row has a null topic",
                            )
                        })?,
                };
                let mut rec: BaseRecord<'_, Vec<u8>, Vec<u8>> = BaseRecord::to(&topic);
                if let Some(v) = &value {
                    rec = rec.payload(v);
                }
                if let Some(k) = &key {
                    rec = rec.key(k);
                }
                if let Some(p) = parts.as_ref().filter(|p| p.is_valid(i)) {
                    rec = rec.partition(p.value(i));
                }
                if let Some(h) = headers_idx {
                    if let Some(hs) = headers_at(b.column(h), i)? {
                        rec = rec.headers(hs);
                    }
                }
                let mut rec = rec;
                loop {
                    match self.producer.send(rec) {
                        Ok(()) => break,
                        Err((
                            rdkafka::error::KafkaError::MessageProduction(
                                rdkafka::types::RDKafkaErrorCode::QueueFull,
                            ),
                            r,
                        )) => {
                            rec = r;
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err((e, _)) => {
                            return Err(SluiceError::connector(
                                class::KAFKA_PRODUCE,
                                format!("cannot send to {topic}: {e}"),
                            ));
                        }
                    }
                }
                n += 1;
            }
        }
        Ok(n)
    }

    /// The column positions of `value`, `key`, `topic`, `partition`, `headers`.
    #[allow(clippy::type_complexity)]
    fn columns(
        &self,
        data: &BatchData,
    ) -> Result<(
        usize,
        Option<usize>,
        Option<usize>,
        Option<usize>,
        Option<usize>,
    )> {
        let schema = data.schema.clone();
        let value_idx = schema.index_of("value").map_err(|_| {
            SluiceError::query(
                class::KAFKA_INVALID_COLUMN,
                "Required attribute 'value' not found: select a value column (string or binary)",
            )
        })?;
        let topic_idx = schema.index_of("topic").ok();
        if self.topic.is_none() && topic_idx.is_none() {
            return Err(SluiceError::query(
                class::KAFKA_INVALID_COLUMN,
                "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic.",
            ));
        }
        Ok((
            value_idx,
            schema.index_of("key").ok(),
            topic_idx,
            schema.index_of("partition").ok(),
            schema.index_of("headers").ok(),
        ))
    }

    /// Waits until every record sent is acknowledged.
    /// Waits until every record sent is delivered (up to the delivery timeout, a little more),
    /// and fails when one could not be: `flush` alone succeeds once none is pending.
    fn flush(&self, what: &str) -> Result<()> {
        let total = self.delivery_timeout + Duration::from_secs(5);
        within(self.producer.context(), total, |t| self.producer.flush(t)).map_err(|f| {
            failure(&self.client, f, |e| {
                SluiceError::connector(class::KAFKA_PRODUCE, format!("{what}: {e}"))
            })
        })?;
        self.check_delivered(what)
    }

    fn check_delivered(&self, what: &str) -> Result<()> {
        match self.producer.context().take_undelivered() {
            (0, _) => Ok(()),
            (n, first) => Err(SluiceError::connector(
                class::KAFKA_PRODUCE,
                format!(
                    "{what}: {n} records could not be delivered to the broker at {} (first: \
                     {}); the batch is not committed, and a restart writes it again",
                    self.client[0].1,
                    first.unwrap_or_default()
                ),
            )),
        }
    }

    fn committed_batch(&self, topic: &str) -> Result<Option<i64>> {
        let Some(c) = &self.marker else {
            return Ok(None);
        };
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, 0);
        let got = within(c.context(), TIMEOUT, |t| {
            c.committed_offsets(tpl.clone(), t)
        })
        .map_err(|f| {
            failure(&self.client, f, |e| {
                SluiceError::connector(
                    class::KAFKA_TRANSACTION,
                    format!("cannot read the sink's committed batches: {e}"),
                )
            })
        })?;
        Ok(got.elements().first().and_then(|e| match e.offset() {
            KOffset::Offset(o) => Some(o - 1),
            _ => None,
        }))
    }
}

impl Sink for KafkaSink {
    fn add_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()> {
        let schema = data.schema.clone();
        let value_idx = schema.index_of("value").map_err(|_| {
            SluiceError::query(
                class::KAFKA_INVALID_COLUMN,
                "Required attribute 'value' not found: select a value column (string or binary)",
            )
        })?;
        let key_idx = schema.index_of("key").ok();
        let topic_idx = schema.index_of("topic").ok();
        let part_idx = schema.index_of("partition").ok();
        let headers_idx = schema.index_of("headers").ok();
        if self.topic.is_none() && topic_idx.is_none() {
            return Err(SluiceError::query(
                class::KAFKA_INVALID_COLUMN,
                "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic.",
            ));
        }
        let first_topic: Option<String> = self.topic.clone().or_else(|| {
            data.batches().find(|b| b.num_rows() > 0).and_then(|b| {
                topic_idx
                    .and_then(|t| bytes_at(b.column(t), 0))
                    .map(|v| String::from_utf8_lossy(&v).into_owned())
            })
        });
        if let (Some(_), Some(t)) = (&self.marker, &first_topic) {
            if let Some(done) = self.committed_batch(t)? {
                if done >= batch_id as i64 {
                    log::info!("Kafka sink: batch {batch_id} was already committed (exactly-once); skipping");
                    return Ok(());
                }
            }
        }
        if self.marker.is_some() {
            self.producer.begin_transaction().map_err(|e| {
                SluiceError::connector(class::KAFKA_TRANSACTION, format!("begin transaction: {e}"))
            })?;
        }
        let n = self.send_rows(data, value_idx, key_idx, topic_idx, part_idx, headers_idx)?;
        #[cfg(feature = "testing")]
        if let (Some(d), Some(_)) = (self.pause_in_transaction, &self.marker) {
            let _ = self.producer.flush(d);
            std::thread::sleep(d);
        }
        match (&self.marker, &first_topic) {
            (Some(c), Some(t)) => {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition_offset(t, 0, KOffset::Offset(batch_id as i64 + 1))
                    .map_err(|e| SluiceError::connector(class::KAFKA_TRANSACTION, e.to_string()))?;
                let meta = c.group_metadata().ok_or_else(|| {
                    SluiceError::connector(class::KAFKA_TRANSACTION, "no consumer group metadata")
                })?;
                self.producer
                    .send_offsets_to_transaction(&tpl, &meta, TIMEOUT)
                    .map_err(|e| {
                        SluiceError::connector(
                            class::KAFKA_TRANSACTION,
                            format!("record batch {batch_id} in the transaction: {e}"),
                        )
                    })?;
                self.producer.commit_transaction(TIMEOUT).map_err(|e| {
                    SluiceError::connector(
                        class::KAFKA_TRANSACTION,
                        format!("commit batch {batch_id}: {e}"),
                    )
                })?;
            }
            (Some(_), None) => {
                // An empty batch: nothing to write, nothing to record.
                self.producer.abort_transaction(TIMEOUT).map_err(|e| {
                    SluiceError::connector(
                        class::KAFKA_TRANSACTION,
                        format!("abort an empty transaction: {e}"),
                    )
                })?;
            }
            _ => {
                self.flush(&format!("flush batch {batch_id}"))?;
            }
        }
        self.written = n;
        Ok(())
    }

    fn write_continuous(&mut self, _epoch: u64, data: &BatchData) -> Result<()> {
        if data.num_rows() == 0 {
            return Ok(());
        }
        let (v, k, t, p, h) = self.columns(data)?;
        let n = self.send_rows(data, v, k, t, p, h)?;
        self.written += n;
        Ok(())
    }

    fn commit_epoch(&mut self, epoch: u64) -> Result<()> {
        self.flush(&format!("flush epoch {epoch}"))
    }

    fn metrics(&self) -> std::collections::BTreeMap<String, String> {
        [("numRecordsWritten".to_string(), self.written.to_string())]
            .into_iter()
            .collect()
    }
}
