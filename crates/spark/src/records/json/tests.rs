//! The JSON reader's cases (each recorded from Spark's `JacksonParser` where it says so).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef, TimeUnit};
use serde_json::{json, Value};

use super::super::test_util::rows;
use super::super::{Assembler, ParseOptions};
use super::*;
use crate::error::Fault;
use crate::records::options::Options;

fn opts(schema: &str, extra: &[(&str, &str)]) -> ParseOptions {
    let schema: SchemaRef = crate::schema::parse_ddl_schema(schema).unwrap();
    let m: HashMap<String, String> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ParseOptions::new("json", &schema, &Options::new(&m)).unwrap()
}

fn parse(o: &ParseOptions, lines: &[&str]) -> Result<(Vec<Vec<Value>>, u64, u64)> {
    let mut asm = Assembler::new(o)?;
    let text = lines.join("\n");
    let super::super::FormatKind::Json(j) = &o.kind else {
        unreachable!()
    };
    read(&text, "file:///t/1.json", j, &mut asm)?;
    let out = asm.finish()?;
    Ok((rows(&out.batches), out.malformed, out.dropped))
}

fn ts(s: &str) -> Value {
    json!(crate::records::datetime::parse_timestamp_micros(s).unwrap())
}

/// Spark 3.5.7's PERMISSIVE results for nested columns (recorded with
/// `spark.read.schema(..).json(..)`): a struct keeps its other fields when one does not
/// fit, an array or map with one element that does not fit is null, an array of structs
/// keeps a partly converted struct; every such record is partial (`_corrupt_record` set).
#[test]
fn nested_values_follow_sparks_partial_results() {
    let o = opts(
        "id INT, s STRUCT<a: INT, b: STRING>, arr ARRAY<INT>, m MAP<STRING, BIGINT>, \
         _corrupt_record STRING",
        &[],
    );
    let lines = [
        r#"{"id":1,"s":{"a":1,"b":"x"},"arr":[1,2],"m":{"k":1}}"#,
        r#"{"id":2,"s":{"a":"bad","b":"x"},"arr":[1,"x"],"m":{"k":"v"}}"#,
        r#"{"id":3,"s":[1,2],"arr":{"a":1},"m":[1]}"#,
        r#"{"id":4,"s":{"b":"y"}}"#,
        r#"{"id":5,"s":null,"arr":[null,3],"m":{"k":null}}"#,
        r#"{"id":6,"arr":5,"s":7,"m":"x"}"#,
        r#"{"id":7,"s":{"a":1,"b":{"q":1}},"arr":[[1]],"m":{"k":[1]}}"#,
        r#"{"id":8,"s":{"a":1.5},"arr":[1.5, 2],"m":{"k":2.5, "j":3}}"#,
        r#"{"id":9,"arr":[],"m":{},"s":{}}"#,
        r#"{"id":10,"s":{"a":1,"b":"x"},"arr":[1,2], "m":{"k":1}, "extra": {"z":[1,{"a":2}]}}"#,
    ];
    let (rows, _, _) = parse(&o, &lines).unwrap();
    let n = Value::Null;
    let c = |i: usize| json!(lines[i]);
    let expected = vec![
        vec![
            json!(1),
            json!({"a":1,"b":"x"}),
            json!([1, 2]),
            json!({"k":1}),
            n.clone(),
        ],
        vec![
            json!(2),
            json!({"a":null,"b":"x"}),
            n.clone(),
            n.clone(),
            c(1),
        ],
        vec![json!(3), n.clone(), n.clone(), n.clone(), c(2)],
        vec![
            json!(4),
            json!({"a":null,"b":"y"}),
            n.clone(),
            n.clone(),
            n.clone(),
        ],
        vec![
            json!(5),
            n.clone(),
            json!([null, 3]),
            json!({"k":null}),
            n.clone(),
        ],
        vec![json!(6), n.clone(), n.clone(), n.clone(), c(5)],
        vec![
            json!(7),
            json!({"a":1,"b":"{\"q\":1}"}),
            n.clone(),
            n.clone(),
            c(6),
        ],
        vec![
            json!(8),
            json!({"a":null,"b":null}),
            n.clone(),
            n.clone(),
            c(7),
        ],
        vec![
            json!(9),
            json!({"a":null,"b":null}),
            json!([]),
            json!({}),
            n.clone(),
        ],
        vec![
            json!(10),
            json!({"a":1,"b":"x"}),
            json!([1, 2]),
            json!({"k":1}),
            n.clone(),
        ],
    ];
    assert_eq!(rows, expected);

    // DROPMALFORMED drops the partial records, as Spark: ids 1, 4, 5, 9, 10 remain.
    let o = opts(
        "id INT, s STRUCT<a: INT, b: STRING>, arr ARRAY<INT>, m MAP<STRING, BIGINT>",
        &[("mode", "DROPMALFORMED")],
    );
    let (rows, _, dropped) = parse(&o, &lines).unwrap();
    let ids: Vec<Value> = rows.iter().map(|r| r[0].clone()).collect();
    assert_eq!(ids, vec![json!(1), json!(4), json!(5), json!(9), json!(10)]);
    assert_eq!(dropped, 5);
    // FAILFAST stops at the first partial record.
    let o = opts(
        "id INT, s STRUCT<a: INT, b: STRING>",
        &[("mode", "FAILFAST")],
    );
    assert!(parse(&o, &lines).is_err());

    // An array of structs keeps a partly converted struct; nested timestamps and dates.
    let o = opts(
        "a ARRAY<STRUCT<x: INT, y: INT>>, t STRUCT<ts: TIMESTAMP, d: DATE>, \
         _corrupt_record STRING",
        &[],
    );
    let line = r#"{"a":[{"x":1},{"x":"q"},null,{"y":2}], "t":{"ts":"2024-01-01T00:00:00Z","d":"2024-02-03"}}"#;
    let (rows, _, _) = parse(&o, &[line]).unwrap();
    assert_eq!(
        rows,
        vec![vec![
            json!([{"x":1,"y":null},{"x":null,"y":null},null,{"x":null,"y":2}]),
            json!({"ts": ts("2024-01-01T00:00:00Z"), "d": 19756}),
            json!(line),
        ]]
    );
}

/// Spark refuses a JSON schema with a map whose key is not a string.
#[test]
fn json_maps_need_string_keys() {
    let schema: SchemaRef =
        crate::schema::parse_ddl_schema("m MAP<INT,STRING>, _corrupt_record STRING").unwrap();
    let err = ParseOptions::new("json", &schema, &Options::new(&HashMap::new()))
        .err()
        .unwrap();
    assert_eq!(
        err.class(),
        crate::error::class::INVALID_JSON_SCHEMA_MAP_TYPE
    );
    assert_eq!(
        err.message(),
        "Input schema \"STRUCT<m: MAP<INT, STRING>, _corrupt_record: STRING>\" can only \
         contain STRING as a key type for a MAP."
    );
    // CSV refuses nested columns with Spark's class and message.
    let schema: SchemaRef = crate::schema::parse_ddl_schema("s STRUCT<x: INT>").unwrap();
    let err = ParseOptions::new("csv", &schema, &Options::new(&HashMap::new()))
        .err()
        .unwrap();
    assert_eq!(
        err.message(),
        "The CSV datasource doesn't support the column `s` of the type \"STRUCT<x: INT>\"."
    );
}

#[test]
fn scenario_json_nulls_and_malformed_run_1() {
    let o = opts("id INT, user STRING, amount DOUBLE, ts TIMESTAMP", &[]);
    let (rows, malformed, dropped) = parse(
        &o,
        &[
            r#"{"id": 1, "user": "alice", "amount": 10.5, "ts": "2026-05-01T10:00:00Z"}"#,
            r#"{"id": 2, "user": "bob"}"#,
            r#"{"id": 3, "user": null, "amount": null, "ts": null}"#,
            r#"{"id": 4, "user": "dave", "amount": "#,
            r#"this is not json"#,
            r#"{"id": 5, "user": "erin", "amount": "abc", "ts": "2026-05-01T10:05:00Z"}"#,
            r#""#,
            r#"{"id": "6", "user": "frank", "amount": 7, "ts": "2026-05-01T10:06:00Z"}"#,
        ],
    )
    .unwrap();
    let n = Value::Null;
    assert_eq!(
        rows,
        vec![
            vec![
                json!(1),
                json!("alice"),
                json!(10.5),
                ts("2026-05-01T10:00:00")
            ],
            vec![json!(2), json!("bob"), n.clone(), n.clone()],
            vec![json!(3), n.clone(), n.clone(), n.clone()],
            vec![n.clone(), n.clone(), n.clone(), n.clone()],
            vec![n.clone(), n.clone(), n.clone(), n.clone()],
            vec![
                json!(5),
                json!("erin"),
                n.clone(),
                ts("2026-05-01T10:05:00")
            ],
            vec![
                n.clone(),
                json!("frank"),
                json!(7.0),
                ts("2026-05-01T10:06:00")
            ],
        ]
    );
    assert_eq!((malformed, dropped), (4, 0));
}

#[test]
fn scenario_json_nulls_and_malformed_run_2() {
    let o = opts("id INT, user STRING, amount DOUBLE, ts TIMESTAMP", &[]);
    let (rows, malformed, _) = parse(
        &o,
        &[
            r#"{"id": 7, "user": "grace", "amount": 100.0, "ts": "2026-05-01T10:07:00Z", "extra": true}"#,
            r#"{"id": 8.9, "user": 42, "amount": "12.5", "ts": 1777629000}"#,
            r#"[1, 2, 3]"#,
            r#"{}"#,
            r#"{"id": 9, "user": "ivy", "amount": 3.25, "ts": "yesterday"}"#,
            r#"{"ID": 10, "User": "jack", "amount": 1.5}"#,
        ],
    )
    .unwrap();
    let n = Value::Null;
    assert_eq!(
        rows,
        vec![
            vec![
                json!(7),
                json!("grace"),
                json!(100.0),
                ts("2026-05-01T10:07:00")
            ],
            vec![n.clone(), json!("42"), n.clone(), ts("2026-05-01T09:50:00")],
            vec![n.clone(), n.clone(), n.clone(), n.clone()],
            vec![n.clone(), n.clone(), n.clone(), n.clone()],
            vec![json!(9), json!("ivy"), json!(3.25), n.clone()],
            vec![n.clone(), n.clone(), json!(1.5), n.clone()],
        ]
    );
    // `[1, 2, 3]` and the two records with wrongly typed values are malformed; `{}` is not.
    assert_eq!(malformed, 3);
}

#[test]
fn scenario_json_timestamp_parsing() {
    let o = opts("id INT, ts TIMESTAMP", &[]);
    let (got, _, _) = parse(
        &o,
        &[
            r#"{"id": 1, "ts": "2026-03-14T09:26:53Z"}"#,
            r#"{"id": 2, "ts": "2026-03-14T09:26:53"}"#,
            r#"{"id": 3, "ts": "2026-03-14T09:26:53.250Z"}"#,
            r#"{"id": 4, "ts": "2026-03-14T11:26:53+02:00"}"#,
            r#"{"id": 5, "ts": "2026-03-14T09:26:53.5"}"#,
            r#"{"id": 6, "ts": "2026-03-14 09:26:53"}"#,
            r#"{"id": 7, "ts": "2026-12-31T23:59:59.999Z"}"#,
            r#"{"id": 8, "ts": "14/03/2026 09:26"}"#,
            r#"{"id": 9, "ts": null}"#,
            r#"{"id": 10}"#,
            r#"{"id": 11, "ts": "2026-03-14T09:26:53.123456Z"}"#,
            r#"{"id": 12, "ts": "2026-03-14"}"#,
            r#"{"id": 13, "ts": "2026-03-14T23:30:00-03:00"}"#,
        ],
    )
    .unwrap();
    let base = 1_773_480_413_000_000i64;
    let want: Vec<Value> = vec![
        json!(base),
        json!(base),
        json!(base + 250_000),
        json!(base),
        json!(base + 500_000),
        json!(base),
        json!(1_798_761_599_999_000i64),
        Value::Null,
        Value::Null,
        Value::Null,
        json!(base + 123_456),
        json!(1_773_446_400_000_000i64),
        json!(1_773_541_800_000_000i64),
    ];
    let got_ts: Vec<Value> = got.iter().map(|r| r[1].clone()).collect();
    assert_eq!(got_ts, want);
    assert_eq!(got.len(), 13);
}

#[test]
fn json_value_rules() {
    let o = opts(
        "s STRING, b BOOLEAN, t TINYINT, l BIGINT, f FLOAT, d DOUBLE, dec DECIMAL(5,2), dt DATE",
        &[],
    );
    let (got, malformed, _) = parse(
        &o,
        &[
            r#"{"s": {"a": [1, 2.50, "x\n"], "b": null}, "b": true, "t": 255, "l": 9007199254740993, "f": 1.5, "d": "NaN", "dec": 123.456, "dt": "2026-03-14"}"#,
            r#"{"s": 1e10, "b": "true", "t": 256, "l": 1.0, "f": "1.5", "d": -Infinity, "dec": "1,234.5", "dt": "123"}"#,
            r#"{'s': 'single', "b": false, "d": 3, "dec": 1234.5}"#,
            r#"   {"s": -0}  trailing garbage is ignored"#,
            r#"  "#,
            r#"null"#,
            r#"{"s": tru}"#,
            r#"[{"s": "x"}, {"s": "y", "t": "bad"}]"#,
            r#"[]"#,
        ],
    )
    .unwrap();
    let n = Value::Null;
    assert_eq!(
        got,
        vec![
            vec![
                json!(r#"{"a":[1,2.5,"x\n"],"b":null}"#),
                json!(true),
                json!(-1),
                json!(9007199254740993i64),
                json!(1.5),
                json!("NaN"),
                json!("12346"),
                json!(20526)
            ],
            vec![
                json!("1.0E10"),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone(),
                json!("-Infinity"),
                n.clone(),
                json!(123)
            ],
            vec![
                json!("single"),
                json!(false),
                n.clone(),
                n.clone(),
                n.clone(),
                json!(3.0),
                n.clone(),
                n.clone()
            ],
            vec![
                json!("0"),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone()
            ],
            vec![n.clone(); 8],
            vec![n.clone(); 8],
            vec![
                json!("x"),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone()
            ],
            vec![
                json!("y"),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone(),
                n.clone()
            ],
        ]
    );
    // `null` and `{"s": tru}` are malformed.
    assert_eq!(malformed, 5);
}

#[test]
fn modes_and_corrupt_column() {
    let lines = [
        r#"{"a": 1, "b": "x"}"#,
        r#"{"a": "oops", "b": "y"}"#,
        r#"not json"#,
        r#"{"a": 4}"#,
    ];
    // PERMISSIVE with a corrupt-record column (anywhere in the schema).
    let o = opts("_corrupt_record STRING, a INT, b STRING", &[]);
    let (got, malformed, dropped) = parse(&o, &lines).unwrap();
    let n = Value::Null;
    assert_eq!(
        got,
        vec![
            vec![n.clone(), json!(1), json!("x")],
            vec![json!(lines[1]), n.clone(), json!("y")],
            vec![json!(lines[2]), n.clone(), n.clone()],
            vec![n.clone(), json!(4), n.clone()],
        ]
    );
    assert_eq!((malformed, dropped), (2, 0));

    // A renamed corrupt column.
    let o = opts("a INT, bad STRING", &[("columnNameOfCorruptRecord", "bad")]);
    let (got, _, _) = parse(&o, &lines).unwrap();
    assert_eq!(got[2], vec![n.clone(), json!(lines[2])]);

    // DROPMALFORMED drops malformed and partial records, and counts them.
    let o = opts("a INT, b STRING", &[("mode", "dropmalformed")]);
    let (got, malformed, dropped) = parse(&o, &lines).unwrap();
    assert_eq!(
        got,
        vec![vec![json!(1), json!("x")], vec![json!(4), n.clone()]]
    );
    assert_eq!((malformed, dropped), (2, 2));

    // FAILFAST stops at the first bad record, naming the file and line.
    let o = opts("a INT, b STRING", &[("mode", "FAILFAST")]);
    let err = parse(&o, &lines).unwrap_err();
    assert_eq!(
        err.class(),
        "MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION"
    );
    assert_eq!(err.fault(), Fault::Input);
    let msg = err.message();
    assert!(msg.contains("line 2 of file:///t/1.json"), "{msg}");
    assert!(
        msg.contains("PERMISSIVE") && msg.contains("DROPMALFORMED"),
        "{msg}"
    );
    let (got, _, _) = parse(&o, &lines[..1]).unwrap();
    assert_eq!(got.len(), 1);
}

#[test]
fn bad_corrupt_column_type_and_binary() {
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("_corrupt_record", DataType::Int32, true),
    ]));
    let err = ParseOptions::new("json", &schema, &Options::default()).unwrap_err();
    assert_eq!(err.class(), "INVALID_CORRUPT_RECORD_TYPE");
    let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("a", DataType::Binary, true)]));
    let err = ParseOptions::new("json", &schema, &Options::default()).unwrap_err();
    assert_eq!(err.fault(), Fault::NotSupportedYet);
    let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new(
        "a",
        DataType::Timestamp(TimeUnit::Microsecond, None),
        false,
    )]));
    let o = ParseOptions::new("json", &schema, &Options::default()).unwrap();
    assert!(o.schema.field(0).is_nullable());
}

#[test]
fn multi_line_and_options() {
    let o = opts("a INT, b STRING", &[("multiLine", "true")]);
    let (got, _, _) = parse(
        &o,
        &["[", r#"{"a": 1,"#, r#" "b": "x"},"#, r#"{"a": 2}"#, "]"],
    )
    .unwrap();
    assert_eq!(
        got,
        vec![vec![json!(1), json!("x")], vec![json!(2), Value::Null]]
    );

    let o = opts("a INT, b STRING", &[("allowSingleQuotes", "false")]);
    let (got, malformed, _) = parse(&o, &[r#"{'a': 1}"#]).unwrap();
    assert_eq!((got.len(), malformed), (1, 1));

    let o = opts(
        "a INT, b STRING",
        &[
            ("allowComments", "true"),
            ("allowUnquotedFieldNames", "true"),
        ],
    );
    let (got, malformed, _) = parse(&o, &[r#"/* c */ {a: 1, // x"#]).unwrap();
    assert_eq!(malformed, 1, "{got:?}");
    let (got, malformed, _) = parse(&o, &[r#"/* c */ {a: 1, b: "z"}"#]).unwrap();
    assert_eq!((got, malformed), (vec![vec![json!(1), json!("z")]], 0));
}

/// The fast path for short decimals gives `str::parse`'s value bit for bit whenever it
/// answers, and answers for the usual amounts and prices.
#[test]
fn short_decimals_read_as_str_parse_reads_them() {
    let mut texts: Vec<String> = [
        "0",
        "-0",
        "0.0",
        "-0.0",
        "22.32",
        "0.1",
        "0.3",
        "-7.5",
        "00.5",
        "5e3",
        "1.5E-3",
        "123456789012345",
        "1234567890123456",
        "99999999999999.9",
        "999999999999999.9",
        "1.000000000000001",
        "0.000000000000001",
        "9007199254740993",
        "-",
        "",
        ".",
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    // Pseudo-random digit strings with a point anywhere (xorshift, fixed seed).
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let len = 1 + (next() % 18) as usize;
        let mut t: String = (0..len)
            .map(|_| char::from(b'0' + (next() % 10) as u8))
            .collect();
        let point = (next() % (len as u64 + 1)) as usize;
        if point > 0 && point < len {
            t.insert(point, '.');
        }
        if next() % 3 == 0 {
            t.insert(0, '-');
        }
        texts.push(t);
    }
    let mut answered = 0;
    for t in &texts {
        if let Some(v) = short_decimal(t) {
            let expected: f64 = t.parse().unwrap();
            assert_eq!(v.to_bits(), expected.to_bits(), "{t}");
            answered += 1;
        }
    }
    assert!(answered > texts.len() / 2, "{answered} of {}", texts.len());
    for t in ["22.32", "-0.0", "0.1", "123456789012345", "00.5"] {
        assert!(short_decimal(t).is_some(), "{t}");
    }
    for t in ["1234567890123456", "5e3", "1.5E-3", "-", "", "."] {
        assert_eq!(short_decimal(t), None, "{t}");
    }
}

/// The word-at-a-time scan stops where a byte-by-byte scan stops: at the first `"`, `\\`
/// or control character, wherever it is in a word and whatever surrounds it.
#[test]
fn plain_runs_end_where_a_byte_scan_ends() {
    let stops = [b'"', b'\\', 0x00, 0x1f, b'\n', b'\t'];
    let fillers = [
        b'a', b' ', b'!', b'#', b'[', b'\'', 0x20, 0x7f, 0x80, 0xe2, 0xff,
    ];
    let naive = |b: &[u8], mut pos: usize| {
        while pos < b.len() && !(b[pos] == b'"' || b[pos] == b'\\' || b[pos] < 0x20) {
            pos += 1;
        }
        pos
    };
    for len in 0..40 {
        for &fill in &fillers {
            let plain = vec![fill; len];
            for start in 0..=len {
                assert_eq!(plain_run_end(&plain, start), len, "{len} {fill}");
            }
            for at in 0..len {
                for &stop in &stops {
                    let mut b = plain.clone();
                    b[at] = stop;
                    // A second stop later must not move the first.
                    if at + 3 < len {
                        b[at + 3] = b'"';
                    }
                    for start in 0..=len {
                        assert_eq!(
                            plain_run_end(&b, start),
                            naive(&b, start),
                            "len {len} fill {fill} stop {stop} at {at} start {start}"
                        );
                    }
                }
            }
        }
    }
}
