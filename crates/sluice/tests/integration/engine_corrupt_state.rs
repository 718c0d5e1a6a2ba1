//! State that does not decode with its operator's layout (`crate::state::layout`), as if the
//! files had been changed outside the query: the next batch fails with `STATE_STORE_CORRUPT`
//! naming the store, never a panic, for every stateful operator. Among them the two ways the
//! join's own parse used to accept bytes its layout does not write: a state key with a byte
//! after the sequence number, and a matched flag above 1.

use std::path::Path;
use std::sync::Arc;

use sluice::state::{DefaultStateStoreProvider, StateStoreConf, StateStoreId, StateStoreProvider};
use sluice::{col, window, GroupState, GroupStateTimeout, OutputMode, Session, Trigger};

use crate::support::{add_file, dirs, session, Dirs};

/// Adds `pairs` to the newest version of operator 0's partition-0 store, as a valid state file
/// (only the pairs' bytes are wrong): that version's delta file is written again, from the
/// version before it.
fn plant(checkpoint: &Path, pairs: &[(&[u8], &[u8])]) {
    let dir = checkpoint.join("state").join("0").join("0");
    let newest = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".delta")?.parse::<u64>().ok()
        })
        .max()
        .unwrap();
    let mut provider = DefaultStateStoreProvider::new(
        StateStoreId::new(checkpoint, 0, 0),
        StateStoreConf::default(),
    )
    .unwrap();
    let store = provider.get_store(newest - 1).unwrap();
    for (k, v) in pairs {
        store.put(k, v);
    }
    assert_eq!(store.commit().unwrap(), newest);
}

/// Runs the query `start` builds over `first` (batch 0), plants `pairs` in its state, then runs
/// it again over `second`: the error of the second run.
fn corrupt_run(
    start: impl Fn(&Session, &Dirs) -> sluice::Result<sluice::StreamingQuery>,
    files: [(&str, &str); 2],
    pairs: &[(&[u8], &[u8])],
) -> (Dirs, sluice::SluiceError) {
    let d = dirs();
    let run = || start(&session(), &d)?.await_termination();
    let write = |(name, body): (&str, &str), seq| {
        let (dir, file) = name.split_once('/').unwrap_or((".", name));
        add_file(&d.input.join(dir), file, body, seq);
    };
    write(files[0], 1);
    run().unwrap();
    plant(&d.checkpoint, pairs);
    write(files[1], 2);
    let err = run().unwrap_err();
    (d, err)
}

/// The error is `STATE_STORE_CORRUPT`, names partition 0's store and says what to do.
fn assert_names_the_store(d: &Dirs, err: &sluice::SluiceError) {
    assert_eq!(err.class(), "STATE_STORE_CORRUPT", "{err}");
    let store = d.checkpoint.join("state").join("0").join("0");
    assert!(
        err.message().contains(&store.display().to_string()),
        "{err}"
    );
    assert!(err.message().contains("new checkpoint location"), "{err}");
}

fn join_query(s: &Session, d: &Dirs) -> sluice::Result<sluice::StreamingQuery> {
    for (name, schema, ts) in [
        ("i", "ad STRING, it TIMESTAMP", "it"),
        ("c", "ad STRING, ct TIMESTAMP", "ct"),
    ] {
        let dir = d.input.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        s.read_stream()
            .format("json")
            .schema(schema)?
            .load(dir.display().to_string())?
            .with_watermark(ts, "5 minutes")?
            .create_or_replace_temp_view(name)?;
    }
    s.sql(
        "SELECT i.ad, i.it, c.ct FROM i JOIN c ON i.ad = c.ad \
         AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES",
    )?
    .write_stream()
    .format("noop")
    .option("checkpointLocation", d.checkpoint.display())
    .trigger(Trigger::AvailableNow)
    .start()
}

/// A join state key as the layout writes it: side, join-key length (u32 LE), join key,
/// sequence (u64 BE).
fn join_key(side: u8, key: &[u8], seq: u64) -> Vec<u8> {
    let mut k = vec![side];
    k.extend_from_slice(&(key.len() as u32).to_le_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

#[test]
fn join_state_that_its_layout_does_not_write_is_corrupt() {
    let files = [
        (
            "i/1.json",
            "{\"ad\": \"a\", \"it\": \"2026-11-03T10:00:00Z\"}\n",
        ),
        (
            "i/2.json",
            "{\"ad\": \"b\", \"it\": \"2026-11-03T10:01:00Z\"}\n",
        ),
    ];
    // The join key `"a"` in the row format of a string.
    let key = [0x02, b'a', 0, 0, 0, 0, 0, 0, 0, 1];
    let mut trailing = join_key(0, &key, 0);
    trailing.push(0);
    let good = join_key(0, &key, 0);
    for (what, k, v) in [
        (
            "a byte after the sequence number",
            &trailing[..],
            &[0u8][..],
        ),
        ("matched flag 2", &good[..], &[2u8][..]),
        ("an empty value", &good[..], &[][..]),
        ("side 2", &join_key(2, &key, 0)[..], &[0u8][..]),
    ] {
        let (d, err) = corrupt_run(join_query, files, &[(k, v)]);
        assert_names_the_store(&d, &err);
        assert!(err.message().contains("join state"), "{what}: {err}");
    }
}

#[test]
fn a_truncated_group_state_value_is_corrupt() {
    let start = |s: &Session, d: &Dirs| {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("user", arrow::datatypes::DataType::Utf8, true),
        ]));
        let out = schema.clone();
        s.read_stream()
            .format("json")
            .schema("user STRING")?
            .load(d.input.display().to_string())?
            .group_by_key(["user"])
            .map_groups_with_state(
                schema,
                GroupStateTimeout::ProcessingTimeTimeout,
                move |key, _rows, st: &mut GroupState<i64>| {
                    st.update(st.get().copied().unwrap_or(0) + 1);
                    st.set_timeout_duration(std::time::Duration::from_secs(3600))?;
                    Ok(arrow::array::RecordBatch::try_new(
                        out.clone(),
                        vec![Arc::new(arrow::array::StringArray::from(vec![
                            key[0].to_string()
                        ]))],
                    )?)
                },
            )?
            .write_stream()
            .output_mode(OutputMode::Update)
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
    };
    let files = [
        ("1.json", "{\"user\": \"a\"}\n"),
        ("2.json", "{\"user\": \"b\"}\n"),
    ];
    // The timeout scan reads every stored value: 3 bytes are not a timeout (8) + JSON.
    let (d, err) = corrupt_run(start, files, &[(b"k", &[1, 2, 3])]);
    assert_names_the_store(&d, &err);
    assert!(err.message().contains("group state value"), "{err}");
}

#[test]
fn a_short_deduplication_expiry_is_corrupt() {
    let start = |s: &Session, d: &Dirs| {
        s.read_stream()
            .format("json")
            .schema("id INT, ts TIMESTAMP")?
            .load(d.input.display().to_string())?
            .with_watermark("ts", "10 minutes")?
            .drop_duplicates_within_watermark(["id"])?
            .write_stream()
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
    };
    let files = [
        ("1.json", "{\"id\": 1, \"ts\": \"2026-07-07T10:00:00Z\"}\n"),
        ("2.json", "{\"id\": 2, \"ts\": \"2026-07-07T10:05:00Z\"}\n"),
    ];
    // The expiry index is read from every stored value: 3 bytes are not an i64.
    let (d, err) = corrupt_run(start, files, &[(&[1, 0x80, 0, 0, 9], &[1, 2, 3])]);
    assert_names_the_store(&d, &err);
    assert!(err.message().contains("deduplication expiry"), "{err}");
}

#[test]
fn an_aggregation_key_arrow_cannot_decode_is_corrupt_not_a_panic() {
    let start = |s: &Session, d: &Dirs| {
        s.read_stream()
            .format("json")
            .schema("ts TIMESTAMP, user STRING")?
            .load(d.input.display().to_string())?
            .with_watermark("ts", "10 minutes")?
            .group_by([window(col("ts"), "5 minutes"), col("user")])
            .count()?
            .write_stream()
            .output_mode(OutputMode::Update)
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
    };
    let files = [
        (
            "1.json",
            "{\"ts\": \"2026-09-15T12:00:00Z\", \"user\": \"a\"}\n",
        ),
        (
            "2.json",
            "{\"ts\": \"2026-09-15T12:01:00Z\", \"user\": \"b\"}\n",
        ),
    ];
    // The event-time index decodes every stored key: an empty key is no (window, user) row
    // (arrow's decoder panics on it; the operator must give an error instead).
    let (d, err) = corrupt_run(start, files, &[(b"", &[1, 0x80, 0, 0, 0, 0, 0, 0, 1])]);
    assert_names_the_store(&d, &err);
    assert!(err.message().contains("aggregation key"), "{err}");
}
