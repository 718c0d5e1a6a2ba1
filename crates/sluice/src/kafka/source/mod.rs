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

use crate::error::{Result, SluiceError};
use crate::kafka::log::{within, Failure, KafkaLogContext, Logged};
use crate::source::{
    ContinuousReader, Offset, ReadLimit, Source, SourceBatch, SourceContext, SourceProvider,
};

mod continuous;
mod read;
pub(crate) mod remote;
mod rows;
pub(crate) mod spec;
mod stream;

use continuous::KafkaContinuousReader;
use stream::{get, KafkaSource};

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
    client: crate::kafka::conf::Settings,
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
        let client = crate::kafka::conf::client_settings(&client)?;
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

#[cfg(test)]
mod tests;
