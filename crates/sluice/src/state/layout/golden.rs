//! Golden state: the schema file and the stored pairs that today's operators wrote for small
//! queries (captured by running each query on one batch, two shuffle partitions, and listing
//! every store). The layout tests decode and re-encode these bytes; the inspection tests read
//! them as `sluice state read` does. They pin the checkpoint format: if one of these tests
//! fails, a change moved bytes on disk.

/// One operator's recorded schema file and its stored (partition, key hex, value hex) pairs,
/// in store order.
pub(crate) struct Golden {
    /// `state/<op>/_metadata/schema` as the operator wrote it.
    pub(crate) schema: &'static str,
    /// (partition, key, value), the bytes as lowercase hex.
    pub(crate) pairs: &'static [(u32, &'static str, &'static str)],
}

impl Golden {
    /// The partition of each pair.
    pub(crate) fn partitions(&self) -> Vec<u32> {
        self.pairs.iter().map(|p| p.0).collect()
    }

    /// The stored keys.
    pub(crate) fn keys(&self) -> Vec<Box<[u8]>> {
        self.pairs.iter().map(|p| unhex(p.1).into()).collect()
    }

    /// The stored values.
    pub(crate) fn values(&self) -> Vec<Box<[u8]>> {
        self.pairs.iter().map(|p| unhex(p.2).into()).collect()
    }
}

/// Decodes lowercase hex.
pub(crate) fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// `groupBy(window(ts, "5 minutes"), user).agg(count(x), sum(x))` (update mode, 10 minutes
/// watermark) over (12:00, alice, 3), (12:07, bob, null), (12:02, null, 5) on 2026-09-15.
pub(crate) const AGGREGATE: Golden = Golden {
    schema: r#"{"operator":"0 (stateStoreSave)","keySchema":[{"name":"window","type":"STRUCT<start: TIMESTAMP, end: TIMESTAMP>","nullable":true,"arrowType":"Struct(\"start\": Timestamp(µs), \"end\": Timestamp(µs))"},{"name":"user","type":"STRING","nullable":true,"arrowType":"Utf8"}],"valueSchema":[{"name":"count(stream_1.x)[count]","type":"BIGINT","nullable":false,"arrowType":"Int64"},{"name":"sum(stream_1.x)[sum]","type":"BIGINT","nullable":true,"arrowType":"Int64"}],"windows":["window(size 5 minutes, slide 5 minutes, start 0 seconds)"]}"#,
    pairs: &[
        (
            0,
            "010180065b844a4350000180065b845c24f30000",
            "018000000000000001018000000000000005",
        ),
        (
            1,
            "010180065b844a4350000180065b845c24f30002616c69636500000005",
            "018000000000000001018000000000000003",
        ),
        (
            1,
            "010180065b845c24f3000180065b846e06960002626f62000000000003",
            "018000000000000000000000000000000000",
        ),
    ],
};

/// `groupBy().count()` (complete mode) over two rows.
pub(crate) const GLOBAL: Golden = Golden {
    schema: r#"{"operator":"0 (stateStoreSave)","keySchema":[],"valueSchema":[{"name":"count[count]","type":"BIGINT","nullable":false,"arrowType":"Int64"}]}"#,
    pairs: &[(1, "", "018000000000000002")],
};

/// `dropDuplicates(id, ts)` (10 minutes watermark) over (1, 10:00), (2, 10:05), (-7, null) on
/// 2026-07-07.
pub(crate) const DEDUP: Golden = Golden {
    schema: r#"{"operator":"0 (dedupe)","keySchema":[{"name":"id","type":"INT","nullable":true,"arrowType":"Int32"},{"name":"ts","type":"TIMESTAMP","nullable":true,"arrowType":"Timestamp(µs)"}],"valueSchema":[]}"#,
    pairs: &[
        (0, "017ffffff9000000000000000000", ""),
        (1, "018000000101800656027437c800", ""),
        (1, "0180000002018006560286196b00", ""),
    ],
};

/// `dropDuplicatesWithinWatermark(id)` (10 minutes watermark) over the same rows as [`DEDUP`].
pub(crate) const DEDUP_WITHIN: Golden = Golden {
    schema: r#"{"operator":"0 (dedupeWithinWatermark)","keySchema":[{"name":"id","type":"INT","nullable":true,"arrowType":"Int32"}],"valueSchema":[{"name":"expiresAtMicros","type":"BIGINT","nullable":false,"arrowType":"Int64"}]}"#,
    pairs: &[
        (0, "017ffffff9", "ffffffffffffff7f"),
        (0, "0180000002", "00b1dca902560600"),
        (1, "0180000001", "000efb9702560600"),
    ],
};

/// `groupByKey(user).mapGroupsWithState(ProcessingTimeTimeout)` counting rows (alice twice,
/// bob once), with a one-hour timeout set for alice only.
pub(crate) const GROUP_STATE: Golden = Golden {
    schema: r#"{"operator":"0 (flatMapGroupsWithState)","keySchema":[{"name":"user","type":"STRING","nullable":true,"arrowType":"Utf8"}],"valueSchema":[{"name":"groupState","type":"i64","nullable":true}]}"#,
    pairs: &[
        (0, "02616c69636500000005", "15ca7631a201000032"),
        (1, "02626f62000000000003", "000000000000008031"),
    ],
};

/// `i JOIN c ON i.ad = c.ad AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES` (5 minutes
/// watermarks) over impressions (a, 10:00, 1), (b, 10:01, 2) and the click (a, 10:03, 2.5) on
/// 2026-11-03. Sequence numbers are `(batch + 1) << 32 | row` (batch 0: `00000001 000000nn`);
/// state written before counted from 0, and still loads.
pub(crate) const JOIN: Golden = Golden {
    schema: r#"{"operator":"0 (symmetricHashJoin Inner)","keySchema":[{"name":"i.ad","type":"STRING","nullable":true,"arrowType":"Utf8"}],"valueSchema":[{"name":"ad","type":"STRING","nullable":true,"arrowType":"Utf8"},{"name":"it","type":"TIMESTAMP","nullable":true,"arrowType":"Timestamp(µs)"},{"name":"n","type":"INT","nullable":true,"arrowType":"Int32"},{"name":"ad","type":"STRING","nullable":true,"arrowType":"Utf8"},{"name":"ct","type":"TIMESTAMP","nullable":true,"arrowType":"Timestamp(µs)"},{"name":"price","type":"DOUBLE","nullable":true,"arrowType":"Float64"}],"leftFields":3}"#,
    pairs: &[
        (
            0,
            "000a000000026200000000000000010000000100000001",
            "00026200000000000000010180065f5c56e8ef000180000002",
        ),
        (
            1,
            "000a000000026100000000000000010000000100000000",
            "01026100000000000000010180065f5c535568000180000001",
        ),
        (
            1,
            "010a000000026100000000000000010000000100000002",
            "01026100000000000000010180065f5c5e0ffd0001c004000000000000",
        ),
    ],
};
