//! Unit tests of the inspection module.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use arrow::row::{RowConverter, SortField};

use super::decode::{field_type, StateDecoder};
use super::ranges::{format_ranges, to_ranges};
use crate::error::class;
use crate::state::layout::group_state::NO_TIMEOUT;
use crate::state::schema::{StateField, StateSchema};
#[test]
fn ranges() {
    assert_eq!(format_ranges(&to_ranges([1, 2, 3, 5, 7, 8])), "1-3, 5, 7-8");
    assert_eq!(format_ranges(&[]), "none");
}

#[test]
fn recorded_arrow_types_round_trip() {
    let window = DataType::Struct(Fields::from(vec![
        Field::new(
            "start",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
        Field::new(
            "end",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
    ]));
    for t in [
        window,
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        DataType::Utf8View,
        DataType::Decimal128(38, 10),
        DataType::UInt64,
        DataType::new_list(DataType::Int32, true),
    ] {
        let f = crate::state::schema::state_fields(&[Arc::new(Field::new("x", t.clone(), true))]);
        assert_eq!(field_type(&f[0]).unwrap(), t);
    }
}

fn schema(op: &str, keys: Vec<StateField>, values: Vec<StateField>) -> StateSchema {
    StateSchema {
        operator: format!("0 ({op})"),
        key_schema: keys,
        value_schema: values,
        left_fields: None,
        windows: Vec::new(),
    }
}

fn field(name: &str, t: DataType, exact: bool) -> StateField {
    let mut f =
        crate::state::schema::state_fields(&[Arc::new(Field::new(name, t, true))]).remove(0);
    if !exact {
        f.arrow_type = None;
    }
    f
}

#[test]
fn aggregation_pairs_decode_and_a_wrong_type_is_an_error() {
    let key_t = DataType::Utf8;
    let keys = RowConverter::new(vec![SortField::new(key_t.clone())]).unwrap();
    let vals = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
    let k = keys
        .convert_columns(&[Arc::new(arrow::array::StringArray::from(vec!["a", "b"]))])
        .unwrap();
    let v = vals
        .convert_columns(&[Arc::new(arrow::array::Int64Array::from(vec![3, 4]))])
        .unwrap();
    let kb: Vec<Box<[u8]>> = (0..2).map(|i| k.row(i).data().into()).collect();
    let vb: Vec<Box<[u8]>> = (0..2).map(|i| v.row(i).data().into()).collect();
    for exact in [true, false] {
        let d = StateDecoder::new(&schema(
            "stateStoreSave",
            vec![field("user", key_t.clone(), exact)],
            vec![field("count[count]", DataType::Int64, exact)],
        ))
        .unwrap();
        let b = d.decode(&[0, 1], &kb, &vb).unwrap();
        assert_eq!(
            arrow::util::pretty::pretty_format_batches(&[b])
                .unwrap()
                .to_string(),
            "+-----------+------+--------------+\n\
             | partition | user | count[count] |\n\
             +-----------+------+--------------+\n\
             | 0         | a    | 3            |\n\
             | 1         | b    | 4            |\n\
             +-----------+------+--------------+"
        );
    }
    // Values recorded as INT (4 bytes) but stored as BIGINT (8 bytes).
    let d = StateDecoder::new(&schema(
        "stateStoreSave",
        vec![field("user", key_t, true)],
        vec![field("n", DataType::Int32, true)],
    ))
    .unwrap();
    assert_eq!(
        d.decode(&[0, 1], &kb, &vb).unwrap_err().class(),
        class::STATE_DECODE_FAILED
    );
}

#[test]
fn group_state_values_decode_and_joins_are_not_supported_yet() {
    let keys = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
    let k = keys
        .convert_columns(&[Arc::new(arrow::array::Int64Array::from(vec![7, 8]))])
        .unwrap();
    let kb: Vec<Box<[u8]>> = (0..2).map(|i| k.row(i).data().into()).collect();
    let mut v1 = 1234i64.to_le_bytes().to_vec();
    v1.extend_from_slice(b"{\"n\":1}");
    let v2 = NO_TIMEOUT.to_le_bytes().to_vec();
    let d = StateDecoder::new(&schema(
        "flatMapGroupsWithState",
        vec![field("id", DataType::Int64, true)],
        vec![],
    ))
    .unwrap();
    let b = d.decode(&[0, 0], &kb, &[v1.into(), v2.into()]).unwrap();
    assert_eq!(
        arrow::util::pretty::pretty_format_batches(&[b])
            .unwrap()
            .to_string(),
        "+-----------+----+--------------------+------------+\n\
         | partition | id | timeoutTimestampMs | groupState |\n\
         +-----------+----+--------------------+------------+\n\
         | 0         | 7  | 1234               | {\"n\":1}    |\n\
         | 0         | 8  |                    |            |\n\
         +-----------+----+--------------------+------------+"
    );
    let e = StateDecoder::new(&schema(
        "symmetricHashJoin Inner",
        vec![field("id", DataType::Int64, true)],
        vec![],
    ))
    .unwrap_err();
    assert_eq!(e.class(), "SLUICE_NOT_SUPPORTED_YET");
    assert!(e.message().contains("symmetricHashJoin Inner"));
    assert!(e.message().contains("leftFields"), "{e}");
}

/// A join state key and value as `StreamingJoin` writes them.
fn join_pair(side: u8, key: &[u8], seq: u64, matched: bool, row: &[u8]) -> (Box<[u8]>, Box<[u8]>) {
    let mut k = vec![side];
    k.extend_from_slice(&(key.len() as u32).to_le_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&seq.to_be_bytes());
    let mut v = vec![matched as u8];
    v.extend_from_slice(row);
    (k.into(), v.into())
}

#[test]
fn join_pairs_decode_by_side_and_a_wrong_split_is_an_error() {
    use arrow::array::{Float64Array, Int64Array, StringArray};
    let conv = |ts: Vec<DataType>| {
        RowConverter::new(ts.into_iter().map(SortField::new).collect()).unwrap()
    };
    let k = conv(vec![DataType::Utf8])
        .convert_columns(&[Arc::new(StringArray::from(vec!["x", "y"]))])
        .unwrap();
    let l = conv(vec![DataType::Utf8, DataType::Int64])
        .convert_columns(&[
            Arc::new(StringArray::from(vec!["x", "y"])),
            Arc::new(Int64Array::from(vec![Some(1), None])),
        ])
        .unwrap();
    let r = conv(vec![DataType::Utf8, DataType::Float64])
        .convert_columns(&[
            Arc::new(StringArray::from(vec!["x"])),
            Arc::new(Float64Array::from(vec![2.5])),
        ])
        .unwrap();
    let pairs = [
        join_pair(0, k.row(0).data(), 0, true, l.row(0).data()),
        join_pair(1, k.row(0).data(), 1, true, r.row(0).data()),
        join_pair(0, k.row(1).data(), 7, false, l.row(1).data()),
    ];
    let keys: Vec<Box<[u8]>> = pairs.iter().map(|p| p.0.clone()).collect();
    let values: Vec<Box<[u8]>> = pairs.iter().map(|p| p.1.clone()).collect();
    let join = |left: Option<usize>, exact: bool| StateSchema {
        left_fields: left,
        ..schema(
            "symmetricHashJoin Inner",
            vec![field("l.k", DataType::Utf8, exact)],
            vec![
                field("k", DataType::Utf8, exact),
                field("a", DataType::Int64, exact),
                field("k", DataType::Utf8, exact),
                field("b", DataType::Float64, exact),
            ],
        )
    };
    for exact in [true, false] {
        let d = StateDecoder::new(&join(Some(2), exact)).unwrap();
        let b = d.decode(&[0, 1, 1], &keys, &values).unwrap();
        assert_eq!(
            arrow::util::pretty::pretty_format_batches(&[b])
                .unwrap()
                .to_string(),
            "+-----------+-------+-----+-----+---------+---+---+-----+-----+\n\
             | partition | side  | l.k | seq | matched | k | a | k#7 | b   |\n\
             +-----------+-------+-----+-----+---------+---+---+-----+-----+\n\
             | 0         | left  | x   | 0   | true    | x | 1 |     |     |\n\
             | 1         | right | x   | 1   | true    |   |   | x   | 2.5 |\n\
             | 1         | left  | y   | 7   | false   | y |   |     |     |\n\
             +-----------+-------+-----+-----+---------+---+---+-----+-----+"
        );
    }
    // Every other split misreads the rows: refused, never wrong values.
    for left in [0, 1, 3, 4] {
        let d = StateDecoder::new(&join(Some(left), true)).unwrap();
        let e = d.decode(&[0, 1, 1], &keys, &values).unwrap_err();
        assert_eq!(
            e.class(),
            class::STATE_DECODE_FAILED,
            "leftFields {left}: {e}"
        );
    }
    assert_eq!(
        StateDecoder::new(&join(Some(5), true)).unwrap_err().class(),
        class::STATE_DECODE_FAILED
    );
    // Malformed keys and values.
    let d = StateDecoder::new(&join(Some(2), true)).unwrap();
    let mut bad_side = keys.clone();
    bad_side[0][0] = 2;
    let mut short = keys.clone();
    short[1] = short[1][..short[1].len() - 1].into();
    let mut flag = values.clone();
    flag[2][0] = 9;
    for (k, v) in [(&bad_side, &values), (&short, &values), (&keys, &flag)] {
        assert_eq!(
            d.decode(&[0, 1, 1], k, v).unwrap_err().class(),
            class::STATE_DECODE_FAILED
        );
    }
    // No pairs: an empty batch of the decoder's schema.
    assert_eq!(d.decode(&[], &[], &[]).unwrap().num_rows(), 0);
}

#[test]
fn golden_state_reads_as_sluice_state_read_shows_it() {
    use crate::state::layout::golden::{
        Golden, AGGREGATE, DEDUP, DEDUP_WITHIN, GLOBAL, GROUP_STATE, JOIN,
    };
    let table = |g: &Golden, arrow_types: bool| {
        let mut schema: StateSchema = serde_json::from_str(g.schema).unwrap();
        if !arrow_types {
            for f in schema.key_schema.iter_mut().chain(&mut schema.value_schema) {
                f.arrow_type = None;
            }
        }
        let b = StateDecoder::new(&schema)
            .unwrap()
            .decode(&g.partitions(), &g.keys(), &g.values())
            .unwrap();
        arrow::util::pretty::pretty_format_batches(&[b])
            .unwrap()
            .to_string()
    };
    // Every key and value column, decoded from the operators' own bytes (the other side's
    // columns of a join row are null; a repeated name gets its position).
    let expected: [(&Golden, &str); 6] = [
        (
            &AGGREGATE,
            "+-----------+--------------------------------------------------------+-------+--------------------------+----------------------+\n\
             | partition | window                                                 | user  | count(stream_1.x)[count] | sum(stream_1.x)[sum] |\n\
             +-----------+--------------------------------------------------------+-------+--------------------------+----------------------+\n\
             | 0         | {start: 2026-09-15T12:00:00, end: 2026-09-15T12:05:00} |       | 1                        | 5                    |\n\
             | 1         | {start: 2026-09-15T12:00:00, end: 2026-09-15T12:05:00} | alice | 1                        | 3                    |\n\
             | 1         | {start: 2026-09-15T12:05:00, end: 2026-09-15T12:10:00} | bob   | 0                        |                      |\n\
             +-----------+--------------------------------------------------------+-------+--------------------------+----------------------+",
        ),
        (
            &GLOBAL,
            "+-----------+--------------+\n\
             | partition | count[count] |\n\
             +-----------+--------------+\n\
             | 1         | 2            |\n\
             +-----------+--------------+",
        ),
        (
            &DEDUP,
            "+-----------+----+---------------------+\n\
             | partition | id | ts                  |\n\
             +-----------+----+---------------------+\n\
             | 0         | -7 |                     |\n\
             | 1         | 1  | 2026-07-07T10:00:00 |\n\
             | 1         | 2  | 2026-07-07T10:05:00 |\n\
             +-----------+----+---------------------+",
        ),
        (
            &DEDUP_WITHIN,
            "+-----------+----+---------------------+\n\
             | partition | id | expiresAtMicros     |\n\
             +-----------+----+---------------------+\n\
             | 0         | -7 | 9223372036854775807 |\n\
             | 0         | 2  | 1783419300000000    |\n\
             | 1         | 1  | 1783419000000000    |\n\
             +-----------+----+---------------------+",
        ),
        (
            &GROUP_STATE,
            "+-----------+-------+--------------------+------------+\n\
             | partition | user  | timeoutTimestampMs | groupState |\n\
             +-----------+-------+--------------------+------------+\n\
             | 0         | alice | 1796126198293      | 2          |\n\
             | 1         | bob   |                    | 1          |\n\
             +-----------+-------+--------------------+------------+",
        ),
        (
            &JOIN,
            "+-----------+-------+------+------------+---------+----+---------------------+---+------+---------------------+-------+\n\
             | partition | side  | i.ad | seq        | matched | ad | it                  | n | ad#8 | ct                  | price |\n\
             +-----------+-------+------+------------+---------+----+---------------------+---+------+---------------------+-------+\n\
             | 0         | left  | b    | 4294967297 | false   | b  | 2026-11-03T10:01:00 | 2 |      |                     |       |\n\
             | 1         | left  | a    | 4294967296 | true    | a  | 2026-11-03T10:00:00 | 1 |      |                     |       |\n\
             | 1         | right | a    | 4294967298 | true    |    |                     |   | a    | 2026-11-03T10:03:00 | 2.5   |\n\
             +-----------+-------+------+------------+---------+----+---------------------+---+------+---------------------+-------+",
        ),
    ];
    for (g, want) in expected {
        assert_eq!(table(g, true), want, "{}", g.schema);
        // Without recorded Arrow types, the Spark type names give the same rows.
        assert_eq!(table(g, false), want, "{}", g.schema);
    }
}
