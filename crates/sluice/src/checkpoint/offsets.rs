//! `offsets/N`: the write-ahead log of planned batches (Spark's `OffsetSeqLog`).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::log::{corrupt_log, log_lines, log_text, parse_version_line, LogEntry, MetadataLog};
use crate::error::Result;

/// The offset log: `<checkpoint>/offsets/<batchId>`.
pub type OffsetSeqLog = MetadataLog<OffsetSeq>;

/// The format version Sluice writes and the highest it reads.
pub const OFFSET_LOG_VERSION: u32 = 1;

/// What is written in `offsets/N` for the marker of a source without an offset yet.
const VOID_OFFSET: &str = "-";

/// The order in which Spark 3.5 writes its pinned confs: json4s walks a Scala `HashMap`, so the
/// order is the hash order of these keys (recorded from real checkpoints; dropping a key keeps
/// the others' relative order). Keys not listed follow, sorted. Readers do not care about the
/// order; writing it this way makes Sluice's files byte-identical to Spark's.
const SPARK_CONF_ORDER: &[&str] = &[
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.join.stateFormatVersion",
    "spark.sql.streaming.stateStore.compression.codec",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion",
    "spark.sql.streaming.statefulOperator.useStrictDistribution",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion",
    "spark.sql.streaming.multipleWatermarkPolicy",
    "spark.sql.streaming.aggregation.stateFormatVersion",
    "spark.sql.shuffle.partitions",
];

/// Line 2 of `offsets/N` (Spark's `OffsetSeqMetadata`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetSeqMetadata {
    /// The event-time watermark the batch runs with (ms since the epoch; 0 = none yet).
    pub batch_watermark_ms: i64,
    /// Wall-clock time when the batch was planned (ms); `current_timestamp()` in the batch.
    pub batch_timestamp_ms: i64,
    /// SQL confs pinned at the query's first start; on restart they override the session.
    pub conf: BTreeMap<String, String>,
}

impl OffsetSeqMetadata {
    /// Compact JSON exactly as Spark writes it:
    /// `{"batchWatermarkMs":..,"batchTimestampMs":..,"conf":{..}}`.
    pub fn to_json(&self) -> String {
        let mut s = format!(
            "{{\"batchWatermarkMs\":{},\"batchTimestampMs\":{},\"conf\":{{",
            self.batch_watermark_ms, self.batch_timestamp_ms
        );
        let known = SPARK_CONF_ORDER
            .iter()
            .filter_map(|k| self.conf.get_key_value(*k));
        let others = self
            .conf
            .iter()
            .filter(|(k, _)| !SPARK_CONF_ORDER.contains(&k.as_str()));
        for (i, (k, v)) in known.chain(others).enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(&json_string(k));
            s.push(':');
            s.push_str(&json_string(v));
        }
        s.push_str("}}");
        s
    }

    /// Parses line 2 of an offsets file. Missing fields take Spark's defaults (0, no conf).
    pub fn from_json(line: &str, file: &Path) -> Result<Self> {
        let v: Value = serde_json::from_str(line)
            .map_err(|e| corrupt_log(file, format!("line 2 is not valid JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| corrupt_log(file, "line 2 should be a JSON object"))?;
        let int = |key: &str| -> Result<i64> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(0),
                Some(x) => x
                    .as_i64()
                    .ok_or_else(|| corrupt_log(file, format!("{key} should be an integer"))),
            }
        };
        let mut conf = BTreeMap::new();
        match obj.get("conf") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        _ => {
                            return Err(corrupt_log(
                                file,
                                format!("conf value of {k} should be a string"),
                            ))
                        }
                    };
                    conf.insert(k.clone(), v);
                }
            }
            Some(_) => return Err(corrupt_log(file, "conf should be a JSON object")),
        }
        Ok(Self {
            batch_watermark_ms: int("batchWatermarkMs")?,
            batch_timestamp_ms: int("batchTimestampMs")?,
            conf,
        })
    }
}

/// The content of `offsets/N`: the batch's metadata and, per source in plan order, its end
/// offset for the batch (`None` = the source has no offset yet, written `-`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OffsetSeq {
    /// Line 2: the batch's watermark, timestamp and pinned conf.
    pub metadata: OffsetSeqMetadata,
    /// One end offset per source, in plan order (`None` = no offset yet).
    pub offsets: Vec<Option<Value>>,
}

impl OffsetSeq {
    /// An offsets entry from its metadata and per-source end offsets.
    pub fn new(metadata: OffsetSeqMetadata, offsets: Vec<Option<Value>>) -> Self {
        Self { metadata, offsets }
    }
}

impl LogEntry for OffsetSeq {
    /// `v1\n<metadata json>\n<offset json or ->...`, no trailing newline.
    fn to_bytes(&self) -> Vec<u8> {
        let mut s = format!("v{OFFSET_LOG_VERSION}\n{}", self.metadata.to_json());
        for o in &self.offsets {
            s.push('\n');
            match o {
                Some(v) => s.push_str(&v.to_string()),
                None => s.push_str(VOID_OFFSET),
            }
        }
        s.into_bytes()
    }

    fn from_bytes(bytes: &[u8], file: &Path) -> Result<Self> {
        let text = log_text(bytes, file)?;
        let lines = log_lines(text);
        parse_version_line(lines.first().copied(), OFFSET_LOG_VERSION, file)?;
        let metadata = match lines.get(1) {
            // Spark writes an empty line when a batch has no metadata.
            None => OffsetSeqMetadata::default(),
            Some(l) if l.trim().is_empty() => OffsetSeqMetadata::default(),
            Some(l) => OffsetSeqMetadata::from_json(l, file)?,
        };
        let mut offsets = Vec::new();
        for (i, line) in lines.iter().enumerate().skip(2) {
            if *line == VOID_OFFSET {
                offsets.push(None);
                continue;
            }
            let v: Value = serde_json::from_str(line).map_err(|e| {
                corrupt_log(
                    file,
                    format!(
                        "line {} (offset of source {}) is not valid JSON: {e}",
                        i + 1,
                        i - 2
                    ),
                )
            })?;
            offsets.push(Some(v));
        }
        Ok(Self { metadata, offsets })
    }
}

fn json_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::LogEntry;

    /// `offsets/0` of scenario A in spark-checkpoint-format.md, byte for byte.
    pub(crate) const SPARK_OFFSETS_0: &str = "v1\n{\"batchWatermarkMs\":0,\"batchTimestampMs\":1795942773456,\"conf\":{\"spark.sql.streaming.stateStore.providerClass\":\"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider\",\"spark.sql.streaming.join.stateFormatVersion\":\"2\",\"spark.sql.streaming.stateStore.compression.codec\":\"lz4\",\"spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan\":\"false\",\"spark.sql.streaming.stateStore.rocksdb.formatVersion\":\"5\",\"spark.sql.streaming.statefulOperator.useStrictDistribution\":\"true\",\"spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion\":\"2\",\"spark.sql.streaming.multipleWatermarkPolicy\":\"min\",\"spark.sql.streaming.aggregation.stateFormatVersion\":\"2\",\"spark.sql.shuffle.partitions\":\"2\"}}\n{\"logOffset\":0}";

    fn spark_conf() -> BTreeMap<String, String> {
        [
            (
                "spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
            ),
            ("spark.sql.streaming.join.stateFormatVersion", "2"),
            ("spark.sql.streaming.stateStore.compression.codec", "lz4"),
            (
                "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan",
                "false",
            ),
            ("spark.sql.streaming.stateStore.rocksdb.formatVersion", "5"),
            (
                "spark.sql.streaming.statefulOperator.useStrictDistribution",
                "true",
            ),
            (
                "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion",
                "2",
            ),
            ("spark.sql.streaming.multipleWatermarkPolicy", "min"),
            ("spark.sql.streaming.aggregation.stateFormatVersion", "2"),
            ("spark.sql.shuffle.partitions", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn writes_spark_bytes_exactly() {
        let seq = OffsetSeq::new(
            OffsetSeqMetadata {
                batch_watermark_ms: 0,
                batch_timestamp_ms: 1795942773456,
                conf: spark_conf(),
            },
            vec![Some(serde_json::json!({"logOffset": 0}))],
        );
        let bytes = seq.to_bytes();
        assert_eq!(bytes.len(), 721);
        assert_eq!(String::from_utf8(bytes).unwrap(), SPARK_OFFSETS_0);
    }

    #[test]
    fn reads_spark_file_and_round_trips() {
        let f = Path::new("/ck/offsets/0");
        let seq = OffsetSeq::from_bytes(SPARK_OFFSETS_0.as_bytes(), f).unwrap();
        assert_eq!(seq.metadata.batch_timestamp_ms, 1795942773456);
        assert_eq!(
            seq.metadata
                .conf
                .get("spark.sql.shuffle.partitions")
                .map(String::as_str),
            Some("2")
        );
        assert_eq!(seq.offsets, vec![Some(serde_json::json!({"logOffset": 0}))]);
        assert_eq!(seq.to_bytes(), SPARK_OFFSETS_0.as_bytes());
    }

    #[test]
    fn void_offsets_unknown_conf_and_no_sources() {
        let mut conf = BTreeMap::new();
        conf.insert("z.custom".to_string(), "a\"b".to_string());
        conf.insert("spark.sql.shuffle.partitions".to_string(), "5".to_string());
        conf.insert("a.custom".to_string(), "1".to_string());
        let seq = OffsetSeq::new(
            OffsetSeqMetadata {
                batch_watermark_ms: 1789473420000,
                batch_timestamp_ms: 7,
                conf,
            },
            vec![
                None,
                Some(serde_json::json!(12)),
                Some(serde_json::json!({"t": {"0": 30}})),
            ],
        );
        let text = String::from_utf8(seq.to_bytes()).unwrap();
        assert_eq!(
            text,
            "v1\n{\"batchWatermarkMs\":1789473420000,\"batchTimestampMs\":7,\"conf\":{\"spark.sql.shuffle.partitions\":\"5\",\"a.custom\":\"1\",\"z.custom\":\"a\\\"b\"}}\n-\n12\n{\"t\":{\"0\":30}}"
        );
        assert_eq!(
            OffsetSeq::from_bytes(text.as_bytes(), Path::new("x")).unwrap(),
            seq
        );

        let empty = OffsetSeq::default();
        let text = String::from_utf8(empty.to_bytes()).unwrap();
        assert_eq!(
            text,
            "v1\n{\"batchWatermarkMs\":0,\"batchTimestampMs\":0,\"conf\":{}}"
        );
        assert_eq!(
            OffsetSeq::from_bytes(text.as_bytes(), Path::new("x")).unwrap(),
            empty
        );
    }

    #[test]
    fn bad_files() {
        let f = Path::new("/ck/offsets/3");
        let e = OffsetSeq::from_bytes(b"v9\n{}\n{\"logOffset\":0}", f).unwrap_err();
        assert_eq!(e.class(), "CHECKPOINT_UNSUPPORTED_VERSION");
        assert!(e.message().contains("/ck/offsets/3"), "{}", e.message());
        let e = OffsetSeq::from_bytes(b"v1\n{\"batchWatermarkMs\":0", f).unwrap_err();
        assert_eq!(e.class(), "CHECKPOINT_CORRUPT_LOG");
        let e = OffsetSeq::from_bytes(b"v1\n{}\n{\"logOff", f).unwrap_err();
        assert_eq!(e.class(), "CHECKPOINT_CORRUPT_LOG");
        let e = OffsetSeq::from_bytes(b"", f).unwrap_err();
        assert_eq!(e.class(), "CHECKPOINT_CORRUPT_LOG");
        // An empty metadata line is Spark's "no metadata".
        let s = OffsetSeq::from_bytes(b"v1\n\n{\"logOffset\":1}", f).unwrap();
        assert_eq!(s.metadata, OffsetSeqMetadata::default());
        assert_eq!(s.offsets.len(), 1);
    }
}
