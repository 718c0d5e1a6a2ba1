//! `spark.conf` over Spark Connect: set, get (with Spark's defaults for the keys PySpark asks
//! for), unset, getAll, isModifiable. Values live in the session's Sluice conf, so a query
//! started after `spark.conf.set("spark.sql.shuffle.partitions", "2")` runs with it and pins it
//! into its checkpoint as Spark does.

use std::sync::Arc;

use crate::error::{ConnectError, Result};
use crate::proto;
use crate::proto::config_request::operation::OpType;
use crate::session::ConnectSession;

/// Spark's defaults for the keys a client reads without setting them. The engine's own keys
/// take Sluice's defaults, which are Spark 3.5's (ANSI off, session time zone UTC).
const DEFAULTS: &[(&str, &str)] = &[
    ("spark.sql.session.timeZone", "UTC"),
    ("spark.sql.ansi.enabled", "false"),
    ("spark.sql.caseSensitive", "false"),
    ("spark.sql.timestampType", "TIMESTAMP_LTZ"),
    ("spark.sql.streaming.multipleWatermarkPolicy", "min"),
    ("spark.sql.streaming.minBatchesToRetain", "100"),
    ("spark.sql.streaming.stateStore.minDeltasForSnapshot", "10"),
    (
        "spark.sql.streaming.statefulOperator.checkCorrectness.enabled",
        "true",
    ),
    ("spark.sql.parser.escapedStringLiterals", "false"),
    ("spark.sql.sources.default", "parquet"),
    // The client compresses plans above this size unless told not to (-1): Sluice reads
    // uncompressed plans.
    ("spark.connect.session.planCompression.threshold", "-1"),
    (
        "spark.connect.session.planCompression.defaultAlgorithm",
        "NONE",
    ),
    (
        "spark.sql.execution.arrow.pyspark.selfDestruct.enabled",
        "false",
    ),
    (
        "spark.sql.execution.pandas.convertToArrowArraySafely",
        "false",
    ),
    ("spark.sql.execution.pandas.inferPandasDictAsMap", "false"),
    ("spark.sql.execution.pandas.structHandlingMode", "legacy"),
    ("spark.sql.pyspark.inferNestedDictAsStruct.enabled", "false"),
    (
        "spark.sql.pyspark.legacy.inferArrayTypeFromFirstElement.enabled",
        "false",
    ),
    (
        "spark.sql.pyspark.legacy.inferMapTypeFromFirstPair.enabled",
        "false",
    ),
    ("spark.sql.repl.eagerEval.enabled", "false"),
    ("spark.sql.repl.eagerEval.maxNumRows", "20"),
    ("spark.sql.repl.eagerEval.truncate", "20"),
    // Local relations (createDataFrame) are sent inline, never as cached artifacts.
    (
        "spark.sql.session.localRelationCacheThreshold",
        "9223372036854775807",
    ),
    ("spark.sql.session.localRelationChunkSizeBytes", "16777216"),
    ("spark.sql.session.localRelationChunkSizeRows", "10000"),
    (
        "spark.sql.session.localRelationBatchOfChunksSizeBytes",
        "134217728",
    ),
    (
        "spark.sql.session.localRelationSizeLimit",
        "9223372036854775807",
    ),
    ("spark.sql.execution.arrow.useLargeVarTypes", "false"),
    ("spark.sql.execution.arrow.pyspark.enabled", "true"),
    ("spark.sql.execution.arrow.pyspark.fallback.enabled", "true"),
    ("spark.sql.execution.arrow.maxRecordsPerBatch", "10000"),
    (
        "spark.sql.execution.arrow.pyspark.validateSchema.enabled",
        "true",
    ),
    ("spark.sql.execution.pythonUDF.arrow.enabled", "false"),
    ("spark.sql.execution.pandas.udf.buffer.size", "65536"),
    (
        "spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName",
        "true",
    ),
    ("spark.sql.pyspark.jvmStacktrace.enabled", "false"),
    ("spark.sql.streaming.numRecentProgressUpdates", "100"),
    ("spark.sql.streaming.noDataMicroBatches.enabled", "true"),
    ("spark.sql.streaming.stopTimeout", "0"),
    ("spark.sql.streaming.pollingDelay", "10ms"),
    ("spark.sql.adaptive.enabled", "false"),
    ("spark.sql.warehouse.dir", "spark-warehouse"),
    ("spark.app.name", "sluice"),
    ("spark.master", "local[*]"),
];

/// Keys a client sets that mean something to the client only, and that the server keeps without
/// a warning: PySpark 3.5's `SparkSession.builder.remote(url).getOrCreate()` sets every builder
/// option as a conf, the server's URL `spark.remote` included (4.x leaves it out).
const CLIENT_SIDE_KEYS: &[&str] = &["spark.remote"];

/// Zone names that mean UTC, the one session time zone the engine computes in.
const UTC_NAMES: &[&str] = &["UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "+00:00", "Zulu"];

/// The session's value of `key`: set, else the engine's shuffle partitions, else Spark's
/// default.
fn value(session: &ConnectSession, key: &str) -> Option<String> {
    if let Some(v) = session.sluice.conf(key) {
        return Some(v);
    }
    if key == sluice::conf::SHUFFLE_PARTITIONS {
        return Some(session.sluice.shuffle_partitions().to_string());
    }
    DEFAULTS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

fn pair(key: &str, value: Option<String>) -> proto::KeyValue {
    proto::KeyValue {
        key: key.to_string(),
        value,
    }
}

/// Runs one config operation: the pairs and warnings of the response.
pub(crate) fn run(
    session: &Arc<ConnectSession>,
    op: OpType,
) -> Result<(Vec<proto::KeyValue>, Vec<String>)> {
    let mut warnings = Vec::new();
    let pairs = match op {
        OpType::Set(set) => {
            for kv in set.pairs {
                let Some(v) = kv.value else {
                    return Err(ConnectError::illegal_argument(format!(
                        "spark.conf.set({:?}) without a value",
                        kv.key
                    )));
                };
                if kv.key == "spark.sql.session.timeZone"
                    && !UTC_NAMES.iter().any(|z| z.eq_ignore_ascii_case(v.trim()))
                {
                    // Computing in UTC while the client asked for another zone would be
                    // silently wrong (hour(), casts to and from strings, windows by day).
                    return Err(ConnectError::not_supported(format!(
                        "the session time zone {v:?}: Sluice computes timestamps in UTC \
                         (spark.sql.session.timeZone=UTC); convert with \
                         from_utc_timestamp(ts, {v:?}) where a local time is needed"
                    )));
                }
                if kv.key == sluice::conf::SHUFFLE_PARTITIONS {
                    sluice::conf::parse_partitions(&v)
                        .map_err(|e| ConnectError::illegal_argument(e.message().to_string()))?;
                }
                if kv.key.starts_with("spark.")
                    && !CLIENT_SIDE_KEYS.contains(&kv.key.as_str())
                    && value(session, &kv.key).is_none()
                {
                    warnings.push(format!(
                        "Sluice does not read the conf {}; it is kept for spark.conf.get",
                        kv.key
                    ));
                }
                session.sluice.set_conf(kv.key, v);
            }
            Vec::new()
        }
        OpType::Get(get) => get
            .keys
            .iter()
            .map(|k| match value(session, k) {
                Some(v) => Ok(pair(k, Some(v))),
                None => Err(ConnectError::new(
                    crate::error::java::INTERNAL,
                    sluice::error::class::SQL_CONF_NOT_FOUND,
                    format!(
                        "The SQL config \"{k}\" cannot be found. Please verify that the config \
                         exists."
                    ),
                )),
            })
            .collect::<Result<_>>()?,
        OpType::GetWithDefault(g) => g
            .pairs
            .into_iter()
            .map(|kv| {
                let v = session.sluice.conf(&kv.key).or(kv.value);
                pair(&kv.key, v)
            })
            .collect(),
        OpType::GetOption(g) => g.keys.iter().map(|k| pair(k, value(session, k))).collect(),
        OpType::GetAll(g) => {
            let prefix = g.prefix.unwrap_or_default();
            let mut keys: Vec<String> = DEFAULTS.iter().map(|(k, _)| k.to_string()).collect();
            keys.push(sluice::conf::SHUFFLE_PARTITIONS.to_string());
            keys.extend(session.sluice.conf_keys());
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .filter(|k| k.starts_with(&prefix))
                .map(|k| {
                    let v = value(session, &k);
                    pair(&k, v)
                })
                .collect()
        }
        OpType::Unset(u) => {
            for k in u.keys {
                session.sluice.unset_conf(&k);
            }
            Vec::new()
        }
        OpType::IsModifiable(m) => m
            .keys
            .iter()
            .map(|k| pair(k, Some((!k.starts_with("spark.connect.")).to_string())))
            .collect(),
    };
    Ok((pairs, warnings))
}
