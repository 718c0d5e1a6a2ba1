//! The Kafka source (Spark's `KafkaSource` / `KafkaMicroBatchStream`), on librdkafka.
//!
//! Options (Spark's names): exactly one of `subscribe` (comma-separated topics),
//! `subscribePattern` (a regex) or `assign` (`{"topic":[0,1]}`); `kafka.bootstrap.servers` and any
//! `kafka.*` client setting; `startingOffsets` = `latest` (default) | `earliest` | JSON
//! `{"topic":{"0":23,"1":-2}}` (-2 earliest, -1 latest; used for a new query only), or by time
//! with `startingTimestamp` / `startingOffsetsByTimestamp` and
//! `startingOffsetsByTimestampStrategy` (see `spec.rs`); `maxOffsetsPerTrigger` (split across
//! partitions in proportion to what each has); `minOffsetsPerTrigger` with `maxTriggerDelay`
//! (15m); `failOnDataLoss` (true); `minPartitions` (a batch's records are split into at least
//! that many pieces, which the batch's plan runs in parallel); `groupIdPrefix`
//! (`spark-kafka-source`) or `kafka.group.id` for the consumer's group (never committed to);
//! `kafkaConsumer.pollTimeoutMs` (120 s); `fetchOffset.numRetries` (3) and
//! `fetchOffset.retryIntervalMs` (10); `includeHeaders`. Batch reads ([`read_batch`]) also take
//! `endingOffsets`, `endingTimestamp` and `endingOffsetsByTimestamp`.
//!
//! Offsets are `{"topic":{"partition":next offset}}` in `offsets/N`; nothing is ever committed
//! to a consumer group. Partitions that appear later start at their earliest offset. Records
//! that aged out of the topic before they were read fail the query (naming the topic,
//! partition and lost range) unless `failOnDataLoss` is false, when they are skipped and logged.

use crate::conf::option as opt;
use crate::error::class;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset as KOffset, TopicPartitionList};

use super::{
    ContinuousReader, Offset, ReadLimit, Source, SourceBatch, SourceContext, SourceProvider,
};
use crate::error::{Result, SluiceError};
use crate::kafka_log::{within, Failure, KafkaLogContext, Logged};

mod read;
pub(crate) mod remote;
mod rows;
pub(crate) mod spec;

pub use read::read_batch;

use rows::KafkaRows;
use spec::{OffsetSpec, Ranges, Side};

const TIMEOUT: Duration = Duration::from_secs(30);

/// The `headers` column type: `array<struct<key: string, value: binary>>` (Spark's).
pub fn headers_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "element",
        DataType::Struct(header_fields()),
        true,
    )))
}

fn header_fields() -> arrow::datatypes::Fields {
    arrow::datatypes::Fields::from(vec![
        Field::new("key", DataType::Utf8, true),
        Field::new("value", DataType::Binary, true),
    ])
}

/// The schema of Kafka records (Spark's), with `headers` when `include_headers`.
pub fn kafka_schema_with(include_headers: bool) -> SchemaRef {
    let mut fields: Vec<Field> = kafka_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    if include_headers {
        fields.push(Field::new("headers", headers_type(), true));
    }
    Arc::new(Schema::new(fields))
}

/// The schema of Kafka records (Spark's).
pub fn kafka_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("topic", DataType::Utf8, true),
        Field::new("partition", DataType::Int32, true),
        Field::new("offset", DataType::Int64, true),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
        Field::new("timestampType", DataType::Int32, true),
    ]))
}

#[derive(Debug, Clone)]
enum Subscription {
    Topics(Vec<String>),
    Pattern(String),
    Assign(BTreeMap<String, Vec<i32>>),
}

/// The definition of a Kafka stream.
#[derive(Debug, Clone)]
pub struct KafkaSourceProvider {
    subscription: Subscription,
    client: crate::kafka_conf::Settings,
    starting: OffsetSpec,
    /// Batch reads: where they end.
    ending: OffsetSpec,
    latest_when_unmatched: bool,
    min_partitions: Option<usize>,
    /// `kafka.group.id`, else `<groupIdPrefix>-<uuid>`.
    group_id: Option<String>,
    group_prefix: String,
    poll_timeout: Duration,
    fetch_retries: u32,
    fetch_retry_interval: Duration,
    max_offsets: Option<u64>,
    min_offsets: Option<u64>,
    max_trigger_delay: Duration,
    fail_on_data_loss: bool,
    include_headers: bool,
    /// The options as given, for a worker to read with (`remote.rs`).
    options: GivenOptions,
}

/// A source's options as given (secrets among them): their `Debug` names none of the values.
#[derive(Clone)]
struct GivenOptions(HashMap<String, String>);

impl std::fmt::Debug for GivenOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GivenOptions({} options)", self.0.len())
    }
}

fn bad_option(msg: impl Into<String>) -> SluiceError {
    SluiceError::query(class::KAFKA_INVALID_OPTION, msg)
}

/// Per-topic, per-partition offsets.
pub type PartitionOffsets = BTreeMap<String, BTreeMap<i32, i64>>;

/// `{"topic":{"0":5}}` -> map; errors name the offset text.
pub fn parse_offsets(v: &Offset) -> Result<PartitionOffsets> {
    let mut out = PartitionOffsets::new();
    let obj = v.as_object().ok_or_else(|| {
        SluiceError::checkpoint(
            class::CHECKPOINT_CORRUPT_LOG,
            format!("a Kafka offset must be {{\"topic\":{{\"partition\":offset}}}}, got {v}"),
        )
    })?;
    for (topic, parts) in obj {
        let parts = parts.as_object().ok_or_else(|| {
            SluiceError::checkpoint(
                class::CHECKPOINT_CORRUPT_LOG,
                format!("bad Kafka offsets for {topic}: {parts}"),
            )
        })?;
        let m = out.entry(topic.clone()).or_default();
        for (p, o) in parts {
            let p: i32 = p.parse().map_err(|_| {
                SluiceError::checkpoint(
                    class::CHECKPOINT_CORRUPT_LOG,
                    format!("bad Kafka partition {p:?}"),
                )
            })?;
            let o = o.as_i64().ok_or_else(|| {
                SluiceError::checkpoint(
                    class::CHECKPOINT_CORRUPT_LOG,
                    format!("bad Kafka offset {o}"),
                )
            })?;
            m.insert(p, o);
        }
    }
    Ok(out)
}

/// Map -> `{"topic":{"0":5}}`.
pub fn offsets_json(o: &PartitionOffsets) -> Offset {
    let mut top = serde_json::Map::new();
    for (t, parts) in o {
        let mut m = serde_json::Map::new();
        for (p, off) in parts {
            m.insert(p.to_string(), serde_json::json!(off));
        }
        top.insert(t.clone(), serde_json::Value::Object(m));
    }
    serde_json::Value::Object(top)
}

impl KafkaSourceProvider {
    /// A Kafka source from its options: one of `subscribe`, `subscribePattern` or `assign`,
    /// `kafka.bootstrap.servers` (required), other `kafka.*` client settings,
    /// `startingOffsets`, `maxOffsetsPerTrigger`, `minOffsetsPerTrigger`, `maxTriggerDelay`,
    /// `failOnDataLoss`, `includeHeaders` and the others of the module doc.
    pub fn try_new(options: &HashMap<String, String>) -> Result<Self> {
        Self::parse(options, false)
    }

    /// The options of a streaming read (`batch` false: `ending*` options are refused) or of a
    /// batch read (starting at earliest by default, ending at latest).
    fn parse(options: &HashMap<String, String>, batch: bool) -> Result<Self> {
        let subs: Vec<(&str, &str)> = ["subscribe", "subscribePattern", "assign"]
            .iter()
            .filter_map(|k| opt(options, k).map(|v| (*k, v)))
            .collect();
        let subscription = match subs.as_slice() {
            [("subscribe", v)] => Subscription::Topics(v.split(',').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect()),
            [("subscribePattern", v)] => {
                regex_check(v)?;
                Subscription::Pattern(v.to_string())
            }
            [("assign", v)] => Subscription::Assign(serde_json::from_str(v).map_err(|e| {
                bad_option(format!("assign must be JSON like {{\"topicA\":[0,1]}}: {e}"))
            })?),
            _ => {
                return Err(bad_option(
                    "One of the options 'assign', 'subscribe' or 'subscribePattern' must be given, and only one",
                ))
            }
        };
        let bootstrap = opt(options, "kafka.bootstrap.servers").ok_or_else(|| {
            bad_option(
                "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer",
            )
        })?;
        let mut client = vec![("bootstrap.servers".to_string(), bootstrap.to_string())];
        for (k, v) in options {
            let lower = k.to_ascii_lowercase();
            if let Some(key) = lower.strip_prefix("kafka.") {
                if key == "bootstrap.servers" {
                    continue;
                }
                if key == "group.id" {
                    continue;
                }
                if [
                    "auto.offset.reset",
                    "key.deserializer",
                    "value.deserializer",
                    "enable.auto.commit",
                    "interceptor.classes",
                ]
                .contains(&key)
                {
                    return Err(bad_option(format!(
                        "Kafka option '{key}' is not supported: Sluice manages offsets in the \
                         checkpoint, never in a consumer group, and reads keys and values as \
                         bytes (use DataFrame operations to deserialize them)"
                    )));
                }
                client.push((key.to_string(), v.clone()));
            }
        }
        let client = crate::kafka_conf::client_settings(&client)?;
        let starting = spec::parse(options, Side::Starting)?.unwrap_or(if batch {
            OffsetSpec::Earliest
        } else {
            OffsetSpec::Latest
        });
        let ending = spec::parse(options, Side::Ending)?;
        if batch {
            spec::check_batch(&starting, Side::Starting)?;
            if let Some(e) = &ending {
                spec::check_batch(e, Side::Ending)?;
            }
        } else if let Some(e) = &ending {
            let what = if matches!(e, OffsetSpec::Timestamp(_) | OffsetSpec::ByTimestamp(_)) {
                "timestamp"
            } else {
                "offset"
            };
            return Err(bad_option(format!(
                "ending {what} not valid in streaming queries: endingOffsets, endingTimestamp \
                 and endingOffsetsByTimestamp are for batch reads (spark.read.format(\"kafka\"))"
            )));
        }
        let num = |k: &str| -> Result<Option<u64>> {
            opt(options, k)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|_| {
                        bad_option(format!("{k} must be a positive integer, got {v:?}"))
                    })
                })
                .transpose()
        };
        let max_trigger_delay = match opt(options, "maxTriggerDelay") {
            Some(v) => {
                Duration::from_micros(crate::time_text::parse_interval_micros(v)?.max(0) as u64)
            }
            None => Duration::from_secs(15 * 60),
        };
        let fail_on_data_loss = match opt(options, "failOnDataLoss") {
            Some(v) => v.trim().parse::<bool>().map_err(|_| {
                bad_option(format!("failOnDataLoss must be true or false, got {v:?}"))
            })?,
            None => true,
        };
        let include_headers = match opt(options, "includeHeaders") {
            Some(v) => v.trim().parse::<bool>().map_err(|_| {
                bad_option(format!("includeHeaders must be true or false, got {v:?}"))
            })?,
            None => false,
        };
        let min_partitions = match opt(options, "minPartitions") {
            Some(v) => Some(
                v.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        bad_option(format!(
                    "Invalid value '{v}' for option 'minPartitions', must be a positive integer"
                ))
                    })?,
            ),
            None => None,
        };
        let millis = |k: &str, default: u64| -> Result<Duration> {
            Ok(Duration::from_millis(num(k)?.unwrap_or(default)))
        };
        let group_id = opt(options, "kafka.group.id").map(str::to_string);
        Ok(Self {
            subscription,
            client,
            starting,
            ending: ending.unwrap_or(OffsetSpec::Latest),
            latest_when_unmatched: spec::latest_when_unmatched(options)?,
            min_partitions,
            group_id,
            group_prefix: opt(options, "groupIdPrefix")
                .map(str::to_string)
                .unwrap_or_else(|| {
                    if batch {
                        "spark-kafka-relation".into()
                    } else {
                        "spark-kafka-source".into()
                    }
                }),
            poll_timeout: millis("kafkaConsumer.pollTimeoutMs", 120_000)?,
            fetch_retries: num("fetchOffset.numRetries")?.unwrap_or(3) as u32,
            fetch_retry_interval: millis("fetchOffset.retryIntervalMs", 10)?,
            max_offsets: num("maxOffsetsPerTrigger")?,
            min_offsets: num("minOffsetsPerTrigger")?,
            max_trigger_delay,
            fail_on_data_loss,
            include_headers,
            options: GivenOptions(options.clone()),
        })
    }

    /// A consumer in the source's group; `fetching` for the one that reads records.
    fn consumer(&self, fetching: bool) -> Result<Logged<BaseConsumer<KafkaLogContext>>> {
        let mut c = ClientConfig::new();
        if fetching {
            // A range is read to its end offset and the partition unassigned; a fetch still
            // waiting at the broker for more data (librdkafka's 500 ms by default) would hold up
            // the next range's fetch on the same connection, every batch. The user's
            // `kafka.fetch.wait.max.ms` (or the Java name `fetch.max.wait.ms`) comes after.
            c.set("fetch.wait.max.ms", "10");
        }
        for (k, v) in &self.client {
            c.set(k, v);
        }
        let group = self
            .group_id
            .clone()
            .unwrap_or_else(|| format!("{}-{}", self.group_prefix, uuid::Uuid::new_v4()));
        c.set("group.id", group);
        c.set("enable.auto.commit", "false");
        // The end of a partition is reported, so a range whose last offsets hold no record (a
        // transaction marker, aborted or compacted records) ends there instead of waiting.
        c.set("enable.partition.eof", "true");
        // The Java client's default, so Spark's: records of open and aborted transactions are
        // read unless `kafka.isolation.level` is `read_committed` (librdkafka's default).
        if !self.client.iter().any(|(k, _)| k == "isolation.level") {
            c.set("isolation.level", "read_uncommitted");
        }
        c.create_with_context(KafkaLogContext::default())
            .map(Logged::new)
            .map_err(|e| {
                SluiceError::connector(
                    class::KAFKA_CLIENT,
                    format!("cannot create a Kafka consumer: {e}"),
                )
            })
    }
}

fn regex_check(p: &str) -> Result<()> {
    // A light validation: librdkafka-style patterns are plain regexes; refuse the empty one.
    if p.trim().is_empty() {
        return Err(bad_option("subscribePattern must not be empty"));
    }
    Ok(())
}

/// A tiny regex matcher for `subscribePattern`: `.*`, `.`, literal characters, `^`/`$` anchors.
fn pattern_matches(pattern: &str, text: &str) -> bool {
    fn m(p: &[char], t: &[char]) -> bool {
        match p {
            [] => t.is_empty(),
            ['.', '*', rest @ ..] => (0..=t.len()).any(|i| m(rest, &t[i..])),
            [c, '*', rest @ ..] => {
                let mut i = 0;
                loop {
                    if m(rest, &t[i..]) {
                        return true;
                    }
                    if i < t.len() && t[i] == *c {
                        i += 1;
                    } else {
                        return false;
                    }
                }
            }
            ['.', rest @ ..] => !t.is_empty() && m(rest, &t[1..]),
            ['\\', c, rest @ ..] => t.first() == Some(c) && m(rest, &t[1..]),
            [c, rest @ ..] => t.first() == Some(c) && m(rest, &t[1..]),
        }
    }
    let p: Vec<char> = pattern
        .trim_start_matches('^')
        .trim_end_matches('$')
        .chars()
        .collect();
    let t: Vec<char> = text.chars().collect();
    m(&p, &t)
}

impl SourceProvider for KafkaSourceProvider {
    fn schema(&self) -> SchemaRef {
        kafka_schema_with(self.include_headers)
    }
    fn description(&self) -> String {
        match &self.subscription {
            Subscription::Topics(t) => format!("KafkaV2[Subscribe[{}]]", t.join(",")),
            Subscription::Pattern(p) => format!("KafkaV2[SubscribePattern[{p}]]"),
            Subscription::Assign(a) => format!(
                "KafkaV2[Assign[{}]]",
                a.keys().cloned().collect::<Vec<_>>().join(",")
            ),
        }
    }
    fn kind(&self) -> &'static str {
        "kafka"
    }
    fn create_source(&self, ctx: &SourceContext) -> Result<Box<dyn Source>> {
        Ok(Box::new(self.make_source(ctx)?))
    }
    fn supports_continuous(&self) -> bool {
        true
    }
    fn create_continuous_reader(
        &self,
        ctx: &SourceContext,
        start: Option<&Offset>,
    ) -> Result<Box<dyn ContinuousReader>> {
        let mut src = self.make_source(ctx)?;
        // Resolves (and on a new query records) the starting offsets exactly as micro-batch does.
        let from = match start {
            Some(o) => parse_offsets(o)?,
            None => {
                src.latest_offset(None, ReadLimit::AllAvailable)?;
                src.initial.clone().unwrap_or_default()
            }
        };
        let mut next = PartitionOffsets::new();
        let mut tpl = TopicPartitionList::new();
        for ((t, p), (low, high)) in src.ranges()? {
            let mut s = get(&from, &t, p).unwrap_or(low);
            if s > high || s < low {
                let msg = format!(
                    "Partition {t}-{p}: offset {s} is outside the available range {low}..{high}; \
                     some data may have been missed. If you want your streaming query to \
                     continue, set the source option failOnDataLoss to false."
                );
                if self.fail_on_data_loss {
                    return Err(SluiceError::input(class::KAFKA_DATA_LOSS, msg));
                }
                log::warn!("{msg} Restarting {t}-{p} from offset {low} (failOnDataLoss=false).");
                s = low;
            }
            tpl.add_partition_offset(&t, p, KOffset::Offset(s))
                .map_err(|e| src.err("cannot assign", e))?;
            next.entry(t).or_default().insert(p, s);
        }
        src.fetcher
            .assign(&tpl)
            .map_err(|e| src.err("cannot assign", e))?;
        Ok(Box::new(KafkaContinuousReader { src, next }))
    }
}

impl KafkaSourceProvider {
    fn make_source(&self, ctx: &SourceContext) -> Result<KafkaSource> {
        // The starting offsets are resolved once, at the query's first start, and kept in
        // `sources/<i>/0` (as Spark does), so `latest` means the same after a restart.
        let initial_file = ctx.metadata_dir.join("0");
        let initial = match crate::storage::read_to_string(&initial_file) {
            Ok(text) => {
                let json = text.lines().nth(1).ok_or_else(|| {
                    SluiceError::checkpoint(
                        class::CHECKPOINT_CORRUPT_LOG,
                        format!("{} should hold v1 and the Kafka source's initial offsets; restore it or start with a new checkpoint location", initial_file.display()),
                    )
                })?;
                let v: Offset = serde_json::from_str(json).map_err(|e| {
                    SluiceError::checkpoint(
                        class::CHECKPOINT_CORRUPT_LOG,
                        format!("{}: {e}", initial_file.display()),
                    )
                })?;
                Some(parse_offsets(&v)?)
            }
            Err(_) => None,
        };
        self.source(initial, initial_file)
    }

    fn source(
        &self,
        initial: Option<PartitionOffsets>,
        initial_file: std::path::PathBuf,
    ) -> Result<KafkaSource> {
        Ok(KafkaSource {
            initial,
            initial_file,
            consumer: self.consumer(false)?,
            fetcher: self.consumer(true)?,
            p: self.clone(),
            available_now: None,
            reached: Default::default(),
            last_batch: Instant::now(),
            latest: PartitionOffsets::new(),
            on_workers: None,
        })
    }
}

struct KafkaSource {
    /// Where a new query starts, per partition (resolved once, see `create_source`).
    initial: Option<PartitionOffsets>,
    initial_file: std::path::PathBuf,
    p: KafkaSourceProvider,
    /// Metadata, watermarks and offsets by time.
    consumer: Logged<BaseConsumer<KafkaLogContext>>,
    /// Records (assign and poll), on a connection of its own: a broker answers a connection's
    /// requests in order, so a fetch waiting for data (`fetch.wait.max.ms`) would hold up the
    /// offset requests of the next trigger behind it.
    fetcher: Logged<BaseConsumer<KafkaLogContext>>,
    /// Whether the broker answered once (then an unreachable broker is waited for).
    reached: std::sync::atomic::AtomicBool,
    /// Available-now: the latest offsets when the query started.
    available_now: Option<PartitionOffsets>,
    last_batch: Instant,
    latest: PartitionOffsets,
    /// The query runs on a cluster: its workers read the batches' ranges (`remote.rs`).
    on_workers: Option<crate::distributed::ReadOnWorkers>,
}

impl KafkaSource {
    fn err(&self, what: &str, e: impl std::fmt::Display) -> SluiceError {
        SluiceError::connector(
            class::KAFKA_CLIENT,
            format!(
                "{what}: {e}. Is the broker at {} running{}?",
                self.p.client[0].1,
                crate::kafka_conf::security_context(&self.p.client)
            ),
        )
    }

    /// A failed client call's error: a refused login names the broker and the mechanism; a
    /// broker that answered before and now does not is `KAFKA_BROKER_UNAVAILABLE`, which the
    /// query waits out.
    fn fail(&self, what: &str, f: Failure) -> SluiceError {
        match f {
            Failure::Refused(text) => crate::kafka_conf::refused(&text, &self.p.client),
            Failure::Kafka(e) if self.was_reached() && crate::kafka_log::is_unreachable(&e) => {
                self.unavailable(what, e)
            }
            Failure::Kafka(e) => self.err(what, e),
        }
    }

    fn unavailable(&self, what: &str, e: impl std::fmt::Display) -> SluiceError {
        SluiceError::connector(
            class::KAFKA_BROKER_UNAVAILABLE,
            format!(
                "{what}: {e}: the Kafka broker at {} answered before and does not now",
                self.p.client[0].1
            ),
        )
    }

    fn was_reached(&self) -> bool {
        self.reached.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How long a metadata or offsets call waits: briefly once the broker was reached (the
    /// query then waits out an outage, saying so), else the full timeout.
    fn call_timeout(&self) -> Duration {
        if self.was_reached() {
            Duration::from_secs(5)
        } else {
            TIMEOUT
        }
    }

    fn partitions(&self) -> Result<Vec<(String, i32)>> {
        let md = within(self.consumer.context(), self.call_timeout(), |t| {
            self.consumer.fetch_metadata(None, t)
        })
        .map_err(|f| self.fail("cannot read Kafka metadata", f))?;
        let mut out = Vec::new();
        for t in md.topics() {
            let wanted = match &self.p.subscription {
                Subscription::Topics(ts) => ts.iter().any(|x| x == t.name()),
                Subscription::Pattern(p) => pattern_matches(p, t.name()),
                Subscription::Assign(a) => a.contains_key(t.name()),
            };
            if !wanted {
                continue;
            }
            for p in t.partitions() {
                if let Subscription::Assign(a) = &self.p.subscription {
                    if !a.get(t.name()).is_some_and(|ps| ps.contains(&p.id())) {
                        continue;
                    }
                }
                out.push((t.name().to_string(), p.id()));
            }
        }
        out.sort();
        Ok(out)
    }

    fn watermarks(&self, topic: &str, p: i32) -> Result<(i64, i64)> {
        within(self.consumer.context(), self.call_timeout(), |t| {
            self.consumer.fetch_watermarks(topic, p, t)
        })
        .map_err(|f| self.fail(&format!("cannot read the offsets of {topic}-{p}"), f))
    }

    /// The latest offsets now: (low, high) per partition; a failed fetch is tried again
    /// `fetchOffset.numRetries` times, `fetchOffset.retryIntervalMs` apart (not a refused login).
    fn ranges(&self) -> Result<Ranges> {
        let mut attempt = 0;
        loop {
            let got = self.partitions().and_then(|parts| {
                let mut out = Ranges::new();
                for (t, p) in parts {
                    let w = self.watermarks(&t, p)?;
                    out.insert((t, p), w);
                }
                Ok(out)
            });
            match got {
                Ok(r) => {
                    self.reached
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Ok(r);
                }
                Err(e)
                    if attempt < self.p.fetch_retries
                        && !e.is(class::KAFKA_AUTHENTICATION)
                        && !e.is_transient() =>
                {
                    attempt += 1;
                    log::warn!(
                        "{e} (attempt {attempt} of {}; fetchOffset.numRetries)",
                        self.p.fetch_retries + 1
                    );
                    std::thread::sleep(self.p.fetch_retry_interval);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The first offset at or after each (topic, partition, time in ms); None where no record
    /// is that recent.
    fn offsets_for_times(&self, wanted: &[(String, i32, i64)]) -> Result<Vec<Option<i64>>> {
        let mut tpl = TopicPartitionList::new();
        for (t, p, ts) in wanted {
            tpl.add_partition_offset(t, *p, KOffset::Offset(*ts))
                .map_err(|e| self.err("cannot look up offsets by time", e))?;
        }
        // A partition whose lookup failed (its leader moving, a request timing out under load)
        // comes back with an error and no offset: asked again, never taken as "no record that
        // recent", which would fail the query or, with the `latest` strategy, skip records.
        let deadline = Instant::now() + TIMEOUT;
        let got = loop {
            let got = within(self.consumer.context(), TIMEOUT, |t| {
                self.consumer.offsets_for_times(tpl.clone(), t)
            })
            .map_err(|f| self.fail("cannot look up offsets by time", f))?;
            let failed: Vec<String> = wanted
                .iter()
                .filter_map(|(t, p, _)| {
                    let e = got.find_partition(t, *p)?.error().err()?;
                    Some(format!("{t}-{p}: {e}"))
                })
                .collect();
            if failed.is_empty() {
                break got;
            }
            if Instant::now() >= deadline {
                return Err(self.err("cannot look up offsets by time", failed.join(", ")));
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        Ok(wanted
            .iter()
            .map(
                |(t, p, _)| match got.find_partition(t, *p).map(|e| e.offset()) {
                    Some(KOffset::Offset(o)) if o >= 0 => Some(o),
                    _ => None,
                },
            )
            .collect())
    }

    /// The offsets `spec` names for `ranges`' partitions (see [`spec::resolve`]).
    fn resolve(&self, spec: &OffsetSpec, side: Side, ranges: &Ranges) -> Result<PartitionOffsets> {
        spec::resolve(spec, side, ranges, self.p.latest_when_unmatched, |w| {
            self.offsets_for_times(w)
        })
    }
}

/// At most this many records per continuous slice.
const MAX_RECORDS_PER_SLICE: usize = 8192;

/// The Kafka source under continuous processing: one consumer assigned to every partition at
/// the epoch's start offsets, polled with a short timeout. Partitions added while the query
/// runs are picked up at the next restart (from their earliest offset).
struct KafkaContinuousReader {
    src: KafkaSource,
    /// Next offset per partition.
    next: PartitionOffsets,
}

impl ContinuousReader for KafkaContinuousReader {
    fn poll(&mut self, max_wait: Duration) -> Result<Vec<RecordBatch>> {
        let mut rows = KafkaRows::new(self.src.p.include_headers);
        let mut wait = max_wait;
        while rows.len() < MAX_RECORDS_PER_SLICE {
            let Some(msg) = self.src.fetcher.poll(wait) else {
                break;
            };
            if matches!(msg, Err(rdkafka::error::KafkaError::PartitionEOF(_))) {
                wait = Duration::ZERO;
                continue;
            }
            let msg = msg.map_err(|e| {
                let msg = format!("cannot read from Kafka: {e}");
                if matches!(
                    e.rdkafka_error_code(),
                    Some(rdkafka::types::RDKafkaErrorCode::OffsetOutOfRange)
                ) {
                    SluiceError::input(class::KAFKA_DATA_LOSS, format!("{msg}: some data may have been lost because they are not available in Kafka any more"))
                } else {
                    self.src.err("cannot read from Kafka", e)
                }
            })?;
            let slot = self
                .next
                .entry(msg.topic().to_string())
                .or_default()
                .entry(msg.partition())
                .or_insert(0);
            if msg.offset() < *slot {
                continue;
            }
            *slot = msg.offset() + 1;
            rows.push(&msg)?;
            wait = Duration::ZERO;
        }
        if rows.len() == 0 {
            return Ok(vec![]);
        }
        Ok(vec![rows.finish()?])
    }
    fn offset(&self) -> Offset {
        offsets_json(&self.next)
    }
    fn caught_up(&mut self) -> Result<bool> {
        for (t, parts) in &self.next {
            for (p, next) in parts {
                let (_, high) = self.src.watermarks(t, *p)?;
                if high > *next {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

fn get(o: &PartitionOffsets, t: &str, p: i32) -> Option<i64> {
    o.get(t).and_then(|m| m.get(&p)).copied()
}

impl Source for KafkaSource {
    fn read_on_workers(&mut self, on: &crate::distributed::ReadOnWorkers) {
        self.on_workers = Some(on.clone());
    }

    fn default_read_limit(&self) -> ReadLimit {
        match self.p.max_offsets {
            Some(n) => ReadLimit::MaxRows(n),
            None => ReadLimit::AllAvailable,
        }
    }

    fn prepare_for_trigger_available_now(&mut self) -> Result<()> {
        let mut snap = PartitionOffsets::new();
        for ((t, p), (_, high)) in self.ranges()? {
            snap.entry(t).or_default().insert(p, high);
        }
        self.available_now = Some(snap);
        Ok(())
    }

    fn latest_offset(
        &mut self,
        start: Option<&Offset>,
        limit: ReadLimit,
    ) -> Result<Option<Offset>> {
        let ranges = self.ranges()?;
        let start_map = start.map(parse_offsets).transpose()?;
        if start_map.is_none() && self.initial.is_none() {
            let init = self.resolve(&self.p.starting, Side::Starting, &ranges)?;
            if let Some(dir) = self.initial_file.parent() {
                crate::storage::create_dir_all(dir).map_err(|e| {
                    SluiceError::io(crate::error::Fault::Checkpoint, dir.display(), e)
                })?;
            }
            let text = format!("v1\n{}", offsets_json(&init));
            crate::checkpoint::write_atomic_new(&self.initial_file, text.as_bytes())?;
            self.initial = Some(init);
        }
        // Where each partition starts: the logged offset, else the starting offsets (new query),
        // else earliest (a partition added later).
        let mut from = PartitionOffsets::new();
        for ((t, p), (low, high)) in &ranges {
            let s = match (&start_map, &self.initial) {
                (Some(m), _) => get(m, t, *p).unwrap_or(*low),
                (None, Some(init)) => get(init, t, *p).unwrap_or(*low),
                (None, None) => *high,
            };
            from.entry(t.clone()).or_default().insert(*p, s);
        }
        // A logged offset past the end of its partition: the topic was deleted and recreated or
        // truncated. Spark treats it as data loss.
        for ((t, p), (low, high)) in &ranges {
            let f = get(&from, t, *p).unwrap_or(*low);
            if f > *high {
                let msg = format!(
                    "Partition {t}-{p}'s offset was changed from {f} to {high}, some data may have been \
                     missed: the topic was probably deleted and recreated. If you want your streaming \
                     query to continue, set the source option failOnDataLoss to false."
                );
                if self.p.fail_on_data_loss {
                    return Err(SluiceError::input(class::KAFKA_DATA_LOSS, msg));
                }
                log::warn!("{msg} Restarting {t}-{p} from offset {low} (failOnDataLoss=false).");
                from.entry(t.clone()).or_default().insert(*p, *low);
            }
        }
        // Up to: the latest (or the available-now snapshot).
        let mut until = PartitionOffsets::new();
        for ((t, p), (_, high)) in &ranges {
            let cap = self
                .available_now
                .as_ref()
                .and_then(|s| get(s, t, *p))
                .unwrap_or(*high);
            let f = get(&from, t, *p).unwrap_or(0);
            until
                .entry(t.clone())
                .or_default()
                .insert(*p, cap.min(*high).max(f));
        }
        self.latest = until.clone();
        let available: u64 = ranges
            .keys()
            .map(|(t, p)| {
                (get(&until, t, *p).unwrap_or(0) - get(&from, t, *p).unwrap_or(0)).max(0) as u64
            })
            .sum();
        // minOffsetsPerTrigger: wait for enough records, up to maxTriggerDelay.
        if let Some(min) = self.p.min_offsets {
            if available < min
                && self.last_batch.elapsed() < self.p.max_trigger_delay
                && start.is_some()
            {
                return Ok(start.cloned());
            }
        }
        let end = match limit {
            ReadLimit::MaxRows(max) if available > max => {
                // Split the limit across partitions in proportion to what each has.
                let mut end = PartitionOffsets::new();
                let mut given = 0u64;
                let parts: Vec<(String, i32, i64, u64)> = ranges
                    .keys()
                    .map(|(t, p)| {
                        let f = get(&from, t, *p).unwrap_or(0);
                        (
                            t.clone(),
                            *p,
                            f,
                            (get(&until, t, *p).unwrap_or(0) - f).max(0) as u64,
                        )
                    })
                    .collect();
                for (t, p, f, n) in &parts {
                    let share = ((*n as u128 * max as u128) / available as u128) as u64;
                    given += share;
                    end.entry(t.clone())
                        .or_default()
                        .insert(*p, f + share as i64);
                }
                // Hand the rounding remainder out one record at a time.
                let mut left = max - given;
                for (t, p, f, n) in &parts {
                    if left == 0 {
                        break;
                    }
                    let e = end.entry(t.clone()).or_default().entry(*p).or_insert(*f);
                    if ((*e - f) as u64) < *n {
                        *e += 1;
                        left -= 1;
                    }
                }
                end
            }
            _ => until,
        };
        let end_json = offsets_json(&end);
        if start == Some(&end_json) {
            return Ok(start.cloned());
        }
        if start.is_none() && available == 0 {
            // Nothing yet: log the starting position with the first batch that has data.
            return Ok(None);
        }
        self.last_batch = Instant::now();
        Ok(Some(end_json))
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<SourceBatch> {
        // A new query's first range starts at the initial offsets resolved at its first start.
        let start = match start {
            Some(s) => parse_offsets(s)?,
            None => self.initial.clone().unwrap_or_default(),
        };
        let end = parse_offsets(end)?;
        // On a cluster the workers read the ranges, streamed as the plan pulls them (a run of
        // ranges per worker: `minPartitions` does not apply there); else one batch per range.
        let (batches, lazy, lost) = match self.on_workers.clone() {
            Some(on) => {
                let (ranges, lost) = self.ranges_between(&start, &end)?;
                let rows = Arc::new(std::sync::atomic::AtomicU64::new(0));
                let reads = remote::read_on_workers(&self.p, &on, ranges, Arc::clone(&rows))?;
                let report = move || {
                    let n = rows.load(std::sync::atomic::Ordering::Relaxed) as usize;
                    (n, BTreeMap::new())
                };
                let lazy = crate::source::LazyRows::on_workers(
                    kafka_schema_with(self.p.include_headers),
                    reads,
                    Box::new(report),
                );
                (Vec::new(), Some(lazy), lost)
            }
            None => {
                let (batches, lost) = self.read(&start, &end)?;
                (batches, None, lost)
            }
        };
        let mut metrics = BTreeMap::new();
        if self.latest.is_empty() {
            // A replayed batch runs before any latest_offset call of this run.
            if let Ok(ranges) = self.ranges() {
                for ((t, p), (_, high)) in ranges {
                    self.latest.entry(t).or_default().insert(p, high);
                }
            }
        }
        let behind: Vec<i64> = self
            .latest
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |(p, l)| (t, p, l)))
            .map(|(t, p, l)| l - get(&end, t, *p).unwrap_or(*l))
            .collect();
        if !behind.is_empty() {
            metrics.insert(
                "avgOffsetsBehindLatest".into(),
                format!(
                    "{:.1}",
                    behind.iter().sum::<i64>() as f64 / behind.len() as f64
                ),
            );
            metrics.insert(
                "maxOffsetsBehindLatest".into(),
                behind.iter().max().copied().unwrap_or(0).to_string(),
            );
            metrics.insert(
                "minOffsetsBehindLatest".into(),
                behind.iter().min().copied().unwrap_or(0).to_string(),
            );
        }
        if lost > 0 {
            metrics.insert("numRecordsLost".into(), lost.to_string());
        }
        Ok(SourceBatch {
            batches,
            lazy,
            metrics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `ClientConfig`'s (and so the settings') `Debug` printed every value, the JAAS password
    /// and `kafka.ssl.key.password` among them.
    #[test]
    fn the_debug_of_a_kafka_source_and_sink_shows_no_secret() {
        let options: HashMap<String, String> = [
            ("subscribe", "t"),
            ("kafka.bootstrap.servers", "127.0.0.1:9092"),
            ("kafka.security.protocol", "SASL_SSL"),
            ("kafka.sasl.mechanism", "PLAIN"),
            (
                "kafka.sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="debug-pw-77";"#,
            ),
            ("kafka.ssl.key.password", "key-pw-78"),
            ("topic", "t"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let source = format!("{:?}", KafkaSourceProvider::try_new(&options).unwrap());
        let sink = format!(
            "{:?}",
            crate::sink::kafka::KafkaSinkProvider::try_new(&options).unwrap()
        );
        for text in [source, sink] {
            assert!(!text.contains("debug-pw-77"), "{text}");
            assert!(!text.contains("key-pw-78"), "{text}");
            assert!(text.contains(crate::redact::REDACTED), "{text}");
            assert!(text.contains("127.0.0.1:9092"), "{text}");
        }
    }

    #[test]
    fn offsets_round_trip_as_sparks_json() {
        let v: Offset = serde_json::from_str(r#"{"users_input":{"0":30,"1":2}}"#).unwrap();
        let m = parse_offsets(&v).unwrap();
        assert_eq!(m["users_input"][&0], 30);
        assert_eq!(offsets_json(&m), v);
    }

    #[test]
    fn subscribe_pattern_matches_like_a_regex() {
        assert!(pattern_matches("events-.*", "events-eu"));
        assert!(!pattern_matches("events-.*", "orders"));
        assert!(pattern_matches("^t.$", "t1"));
    }

    #[test]
    fn options_are_checked() {
        let o = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>()
        };
        assert!(KafkaSourceProvider::try_new(&o(&[("kafka.bootstrap.servers", "x")])).is_err());
        assert!(KafkaSourceProvider::try_new(&o(&[
            ("subscribe", "t"),
            ("assign", "{}"),
            ("kafka.bootstrap.servers", "x")
        ]))
        .is_err());
        let err = KafkaSourceProvider::try_new(&o(&[
            ("subscribe", "t"),
            ("kafka.bootstrap.servers", "x"),
            ("kafka.auto.offset.reset", "earliest"),
        ]))
        .unwrap_err();
        assert!(err.message().contains("auto.offset.reset"));
        // kafka.group.id is Spark's "use with caution" option, taken as given.
        let p = KafkaSourceProvider::try_new(&o(&[
            ("subscribe", "t"),
            ("kafka.bootstrap.servers", "x"),
            ("kafka.group.id", "g"),
        ]))
        .unwrap();
        assert_eq!(p.group_id.as_deref(), Some("g"));
        let err = KafkaSourceProvider::try_new(&o(&[
            ("subscribe", "t"),
            ("kafka.bootstrap.servers", "x"),
            ("endingOffsets", "latest"),
        ]))
        .unwrap_err();
        assert!(
            err.message().contains("not valid in streaming queries"),
            "{err}"
        );
        let err = KafkaSourceProvider::try_new(&o(&[
            ("subscribe", "t"),
            ("kafka.bootstrap.servers", "x"),
            ("minPartitions", "0"),
        ]))
        .unwrap_err();
        assert!(err.message().contains("minPartitions"), "{err}");
        assert!(KafkaSourceProvider::try_new(&o(&[
            ("subscribe", "t"),
            ("kafka.bootstrap.servers", "x")
        ]))
        .is_ok());
    }
}
