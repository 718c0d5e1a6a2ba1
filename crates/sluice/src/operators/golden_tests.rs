//! The operators write the golden state (`crate::state::layout::golden`): each golden query, run
//! again on one batch with two shuffle partitions, leaves exactly the recorded schema file and
//! stored pairs. The layout tests pin that the codecs read and write these bytes; these pin that
//! the operators write them (through the codecs), so a change that moves bytes on disk fails
//! here too.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::functions_aggregate::expr_fn::{count, sum};

use crate::checkpoint::CheckpointDir;
use crate::state::layout::golden::{
    Golden, AGGREGATE, DEDUP, DEDUP_WITHIN, GLOBAL, GROUP_STATE, JOIN,
};
use crate::state::layout::group_state::GroupStateValue;
use crate::state::{DefaultStateStoreProvider, StateStoreConf, StateStoreId, StateStoreProvider};
use crate::types::OperatorId;
use crate::{
    col, window, GroupState, GroupStateTimeout, OutputMode, Session, StreamFrame, Trigger,
};

/// One stored pair: (partition, key hex, value hex).
type Pair = (u32, String, String);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A query's input and checkpoint directories.
struct Dirs {
    tmp: tempfile::TempDir,
}

impl Dirs {
    /// Writes `lines` as `<dir>/1.json` under the input directory; returns the directory.
    fn input(&self, dir: &str, lines: &[&str]) -> String {
        let d = self.tmp.path().join("in").join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("1.json"), lines.join("\n") + "\n").unwrap();
        d.display().to_string()
    }

    fn checkpoint(&self) -> std::path::PathBuf {
        self.tmp.path().join("checkpoint")
    }

    /// Runs `frame` to its end (available-now, a no-op sink).
    fn run(&self, frame: StreamFrame, mode: OutputMode) {
        frame
            .write_stream()
            .output_mode(mode)
            .format("noop")
            .option("checkpointLocation", self.checkpoint().display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap()
            .await_termination()
            .unwrap();
    }

    /// Operator 0's schema file and its pairs at the newest version, partition by partition
    /// in store order.
    fn state(&self) -> (String, Vec<Pair>) {
        let root = self.checkpoint();
        let file = CheckpointDir::new(&root).state_schema_file(OperatorId(0));
        let schema = std::fs::read_to_string(file).unwrap();
        let mut pairs = Vec::new();
        for p in 0..2 {
            let mut provider = DefaultStateStoreProvider::open_read_only(
                StateStoreId::new(&root, 0, p),
                StateStoreConf::default(),
            )
            .unwrap();
            let version = provider.latest_version_on_disk();
            let store = provider.get_store(version).unwrap();
            pairs.extend(store.iter().map(|(k, v)| (p, hex(k), hex(v))));
        }
        (schema, pairs)
    }

    /// The state is `golden`'s: the pairs byte for byte, the schema file field for field.
    fn assert_state(&self, golden: &Golden) {
        let (schema, pairs) = self.state();
        assert_eq!(pairs, golden_pairs(golden));
        assert_schema(&schema, golden);
    }
}

/// The schema file holds `golden`'s schema (pretty-printed; the source alias of an aggregate's
/// argument, `stream_<n>`, numbered by the session as the golden query's was `stream_1`).
fn assert_schema(written: &str, golden: &Golden) {
    let mut text = String::new();
    let mut rest = written;
    while let Some(at) = rest.find("stream_") {
        text.push_str(&rest[..at]);
        text.push_str("stream_1");
        rest = rest[at + "stream_".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    text.push_str(rest);
    let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
    assert_eq!(parse(&text), parse(golden.schema), "{written}");
}

fn dirs() -> Dirs {
    Dirs {
        tmp: tempfile::tempdir().unwrap(),
    }
}

fn session() -> Session {
    Session::builder().shuffle_partitions(2).build().unwrap()
}

fn golden_pairs(g: &Golden) -> Vec<Pair> {
    g.pairs
        .iter()
        .map(|(p, k, v)| (*p, k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_windowed_aggregation_writes_the_golden_state() {
    let d = dirs();
    let input = d.input(
        "",
        &[
            r#"{"ts": "2026-09-15T12:00:00Z", "user": "alice", "x": 3}"#,
            r#"{"ts": "2026-09-15T12:07:00Z", "user": "bob", "x": null}"#,
            r#"{"ts": "2026-09-15T12:02:00Z", "user": null, "x": 5}"#,
        ],
    );
    let frame = session()
        .read_stream()
        .format("json")
        .schema("ts TIMESTAMP, user STRING, x BIGINT")
        .unwrap()
        .load(input)
        .unwrap()
        .with_watermark("ts", "10 minutes")
        .unwrap()
        .group_by([window(col("ts"), "5 minutes"), col("user")])
        .agg([count(col("x")), sum(col("x"))])
        .unwrap();
    d.run(frame, OutputMode::Update);
    d.assert_state(&AGGREGATE);
}

#[test]
fn a_global_aggregation_writes_the_golden_state() {
    let d = dirs();
    let input = d.input("", &[r#"{"user": "a"}"#, r#"{"user": "b"}"#]);
    let frame = session()
        .read_stream()
        .format("json")
        .schema("user STRING")
        .unwrap()
        .load(input)
        .unwrap()
        .group_by(Vec::new())
        .count()
        .unwrap();
    d.run(frame, OutputMode::Complete);
    d.assert_state(&GLOBAL);
}

#[test]
fn both_deduplications_write_the_golden_state() {
    for (within, golden) in [(false, &DEDUP), (true, &DEDUP_WITHIN)] {
        let d = dirs();
        let input = d.input(
            "",
            &[
                r#"{"id": 1, "ts": "2026-07-07T10:00:00Z"}"#,
                r#"{"id": 2, "ts": "2026-07-07T10:05:00Z"}"#,
                r#"{"id": -7, "ts": null}"#,
            ],
        );
        let frame = session()
            .read_stream()
            .format("json")
            .schema("id INT, ts TIMESTAMP")
            .unwrap()
            .load(input)
            .unwrap()
            .with_watermark("ts", "10 minutes")
            .unwrap();
        let frame = if within {
            frame.drop_duplicates_within_watermark(["id"]).unwrap()
        } else {
            frame.drop_duplicates(["id", "ts"]).unwrap()
        };
        d.run(frame, OutputMode::Append);
        d.assert_state(golden);
    }
}

#[test]
fn map_groups_with_state_writes_the_golden_state() {
    let d = dirs();
    let input = d.input(
        "",
        &[
            r#"{"user": "alice"}"#,
            r#"{"user": "bob"}"#,
            r#"{"user": "alice"}"#,
        ],
    );
    let out = Arc::new(Schema::new(vec![Field::new("user", DataType::Utf8, true)]));
    let schema = out.clone();
    let frame = session()
        .read_stream()
        .format("json")
        .schema("user STRING")
        .unwrap()
        .load(input)
        .unwrap()
        .group_by_key(["user"])
        .map_groups_with_state(
            out,
            GroupStateTimeout::ProcessingTimeTimeout,
            move |key, rows, st: &mut GroupState<i64>| {
                st.update(st.get().copied().unwrap_or(0) + rows.num_rows() as i64);
                let user = key[0].to_string();
                if user == "alice" {
                    st.set_timeout_duration(Duration::from_secs(3600))?;
                }
                Ok(RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(StringArray::from(vec![user]))],
                )?)
            },
        )
        .unwrap();
    let now_ms = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let before = now_ms();
    d.run(frame, OutputMode::Update);
    let after = now_ms();
    let (schema, pairs) = d.state();
    assert_schema(&schema, &GROUP_STATE);
    // Alice's timeout is this run's processing time plus an hour, the rest is the golden bytes.
    let golden = golden_pairs(&GROUP_STATE);
    assert_eq!(pairs.len(), golden.len());
    let (alice, want) = (&pairs[0], &golden[0]);
    assert_eq!((alice.0, &alice.1), (want.0, &want.1));
    let value = crate::state::layout::golden::unhex(&alice.2);
    let value = GroupStateValue::decode(&value).unwrap();
    assert_eq!(value.state_json, b"2");
    let timeout = value.timeout_ms.unwrap();
    assert!(
        (before + 3_600_000..=after + 3_600_000).contains(&timeout),
        "{timeout}"
    );
    assert_eq!(&alice.2[16..], &want.2[16..]);
    assert_eq!(pairs[1], golden[1]);
}

#[test]
fn a_stream_stream_join_writes_the_golden_state() {
    let d = dirs();
    let s = session();
    let sides = [
        (
            "i",
            "ad STRING, it TIMESTAMP, n INT",
            "it",
            d.input(
                "i",
                &[
                    r#"{"ad": "a", "it": "2026-11-03T10:00:00Z", "n": 1}"#,
                    r#"{"ad": "b", "it": "2026-11-03T10:01:00Z", "n": 2}"#,
                ],
            ),
        ),
        (
            "c",
            "ad STRING, ct TIMESTAMP, price DOUBLE",
            "ct",
            d.input(
                "c",
                &[r#"{"ad": "a", "ct": "2026-11-03T10:03:00Z", "price": 2.5}"#],
            ),
        ),
    ];
    for (name, schema, ts, input) in sides {
        s.read_stream()
            .format("json")
            .schema(schema)
            .unwrap()
            .load(input)
            .unwrap()
            .with_watermark(ts, "5 minutes")
            .unwrap()
            .create_or_replace_temp_view(name)
            .unwrap();
    }
    let frame = s
        .sql(
            "SELECT * FROM i JOIN c ON i.ad = c.ad \
             AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES",
        )
        .unwrap();
    d.run(frame, OutputMode::Append);
    d.assert_state(&JOIN);
}
