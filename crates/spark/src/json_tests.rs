//! `to_json` and `schema_of_json` with options, against Spark 3.5.7's results.

use crate::error::class;
use sluice::Session;

fn one(s: &Session, sql: &str) -> sluice::Result<String> {
    let b = s.sql(sql)?.collect()?;
    let c = b[0].column(0);
    Ok(c.as_string::<i32>().value(0).to_string())
}

use arrow::array::AsArray;

// Every expectation below was returned by Spark 3.5.7.

#[test]
fn to_json_formats_datetimes_with_its_options() {
    let s = Session::builder().shuffle_partitions(1).build().unwrap();
    let q = "SELECT to_json(named_struct('d', DATE'2020-01-02', 't', \
             TIMESTAMP'2020-01-02 03:04:05', 'n', CAST(NULL AS INT)), \
             map('dateFormat', 'dd.MM.yyyy', 'timestampFormat', 'yyyy/MM/dd HH:mm'))";
    assert_eq!(
        one(&s, q).unwrap(),
        r#"{"d":"02.01.2020","t":"2020/01/02 03:04"}"#
    );
    assert_eq!(
        one(
            &s,
            "SELECT to_json(array(DATE'2020-01-02'), map('dateFormat', 'yyyyMMdd'))"
        )
        .unwrap(),
        r#"["20200102"]"#
    );
    assert_eq!(
        one(
            &s,
            "SELECT to_json(named_struct('time', to_timestamp('2015-08-26', 'yyyy-MM-dd')), \
             map('timestampFormat', 'dd/MM/yyyy'))"
        )
        .unwrap(),
        r#"{"time":"26/08/2015"}"#
    );
    // Options Spark does not know are ignored.
    assert_eq!(
        one(
            &s,
            "SELECT to_json(named_struct('a', 1), map('foo', 'bar'))"
        )
        .unwrap(),
        r#"{"a":1}"#
    );
    assert_eq!(
        one(
            &s,
            "SELECT to_json(named_struct('a', 1), map('ignoreNullFields', 'true', 'pretty', 'false'))"
        )
        .unwrap(),
        r#"{"a":1}"#
    );
}

#[test]
fn to_json_writes_null_fields_and_pretty_json_on_request() {
    let s = Session::builder().shuffle_partitions(1).build().unwrap();
    let v = "named_struct('a', array(named_struct('b', 1, 'n', CAST(NULL AS INT))), \
             'e', array(), 'm', map('k', 'v'), 'z', named_struct('q', CAST(NULL AS INT)))";
    let q = |opts: &str| format!("SELECT to_json({v}, map({opts}))");
    assert_eq!(
        one(&s, &q("'pretty', 'true'")).unwrap(),
        "{\n  \"a\" : [ {\n    \"b\" : 1\n  } ],\n  \"e\" : [ ],\n  \"m\" : {\n    \"k\" : \"v\"\n  },\n  \"z\" : { }\n}"
    );
    assert_eq!(
        one(&s, &q("'ignoreNullFields', 'false'")).unwrap(),
        r#"{"a":[{"b":1,"n":null}],"e":[],"m":{"k":"v"},"z":{"q":null}}"#
    );
    assert_eq!(
        one(&s, &q("'ignoreNullFields', 'false', 'pretty', 'true'")).unwrap(),
        "{\n  \"a\" : [ {\n    \"b\" : 1,\n    \"n\" : null\n  } ],\n  \"e\" : [ ],\n  \"m\" : {\n    \"k\" : \"v\"\n  },\n  \"z\" : {\n    \"q\" : null\n  }\n}"
    );
    assert_eq!(
        one(
            &s,
            "SELECT to_json(array(array(1), array()), map('pretty', 'true'))"
        )
        .unwrap(),
        "[ [ 1 ], [ ] ]"
    );
    assert_eq!(
        one(
            &s,
            "SELECT to_json(map('a', CAST(NULL AS INT)), map('pretty', 'true'))"
        )
        .unwrap(),
        "{\n  \"a\" : null\n}"
    );
}

#[test]
fn to_json_writes_map_keys_as_spark_prints_them() {
    let s = Session::builder().shuffle_partitions(1).build().unwrap();
    for (value, json) in [
        ("map(named_struct('a', 1, 'b', 'x'), 1)", r#"{"[1,x]":1}"#),
        ("map(array(1, 2), 1)", r#"{"[1,2]":1}"#),
        (
            "map(named_struct('a', 1, 'b', CAST(NULL AS STRING)), 1)",
            r#"{"[1,null]":1}"#,
        ),
        (
            "map(named_struct('a', named_struct('c', 2)), 1)",
            r#"{"[[2]]":1}"#,
        ),
        ("map(DATE'2020-01-01', 1)", r#"{"18262":1}"#),
        ("map(1, 1, 2, 2)", r#"{"1":1,"2":2}"#),
        ("map(true, 1)", r#"{"true":1}"#),
        ("map('a', CAST(NULL AS INT))", r#"{"a":null}"#),
    ] {
        assert_eq!(
            one(&s, &format!("SELECT to_json({value})")).unwrap(),
            json,
            "{value}"
        );
    }
}

#[test]
fn to_json_refuses_the_options_it_cannot_honour() {
    let s = Session::builder().shuffle_partitions(1).build().unwrap();
    for (opt, value) in [
        ("writeNonAsciiCharacterAsCodePoint", "true"),
        ("timestampNTZFormat", "yyyy"),
        ("timeZone", "Europe/Paris"),
    ] {
        let e = one(
            &s,
            &format!("SELECT to_json(named_struct('a', 1), map('{opt}', '{value}'))"),
        )
        .unwrap_err();
        assert!(e.is(class::SLUICE_NOT_SUPPORTED_YET), "{opt}: {e}");
        assert!(e.to_string().contains(opt), "{opt}: {e}");
    }
    let e = one(
        &s,
        "SELECT to_json(named_struct('a', 1), map('ignoreNullFields', 'maybe'))",
    )
    .unwrap_err();
    assert!(e.is(class::INVALID_OPTION), "{e}");
}

#[test]
fn schema_of_json_reads_with_the_parser_options() {
    let s = Session::builder().shuffle_partitions(1).build().unwrap();
    assert_eq!(
        one(
            &s,
            r#"SELECT schema_of_json('[{"col":01}]', map('allowNumericLeadingZeros', 'true'))"#
        )
        .unwrap(),
        "ARRAY<STRUCT<col: BIGINT>>"
    );
    assert_eq!(
        one(
            &s,
            r#"SELECT schema_of_json('{"a":01, "b":[1.5]}', map('allowNumericLeadingZeros', 'true'))"#
        )
        .unwrap(),
        "STRUCT<a: BIGINT, b: ARRAY<DOUBLE>>"
    );
    assert_eq!(
        one(
            &s,
            "SELECT schema_of_json('{a:1}', map('allowUnquotedFieldNames', 'true'))"
        )
        .unwrap(),
        "STRUCT<a: BIGINT>"
    );
    assert_eq!(
        one(
            &s,
            r#"SELECT schema_of_json('{"a":1, "b":[true]}', map('primitivesAsString', 'true'))"#
        )
        .unwrap(),
        "STRUCT<a: STRING, b: ARRAY<STRING>>"
    );
    // Without the option, leading zeros are malformed, as in Spark.
    let e = one(
        &s,
        r#"SELECT schema_of_json('{"a":01}', map('allowSingleQuotes', 'true'))"#,
    )
    .unwrap_err();
    assert!(e.is(class::MALFORMED_RECORD), "{e}");
    let e = one(
        &s,
        r#"SELECT schema_of_json('{"a":1.5}', map('prefersDecimal', 'true'))"#,
    )
    .unwrap_err();
    assert!(e.is(class::SLUICE_NOT_SUPPORTED_YET), "{e}");
}
