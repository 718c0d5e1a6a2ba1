//! Spark's values (PySpark 3.5.7) for the functions of `scalars_more.rs` and `syntax.rs`
//! (`input_file_name()` and friends: the engine's `plan/input_file_tests.rs`).

use arrow::array::Array;
use arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit};
use arrow::util::display::array_value_to_string;
use datafusion::common::ScalarValue;

use sluice::Session;

fn session() -> Session {
    Session::builder().build().unwrap()
}

/// The single row of `sql`: each column's type and value.
fn row(s: &Session, sql: &str) -> Vec<(DataType, ScalarValue)> {
    let batches = s
        .sql(sql)
        .and_then(|f| f.collect())
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let b = batches.iter().find(|b| b.num_rows() > 0).expect("one row");
    b.columns()
        .iter()
        .map(|c| {
            (
                c.data_type().clone(),
                ScalarValue::try_from_array(c, 0).unwrap(),
            )
        })
        .collect()
}

/// The single row of `sql` as text (nulls as `NULL`).
fn text(s: &Session, sql: &str) -> Vec<String> {
    let batches = s
        .sql(sql)
        .and_then(|f| f.collect())
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let b = batches.iter().find(|b| b.num_rows() > 0).expect("one row");
    b.columns()
        .iter()
        .map(|c| {
            if c.is_null(0) {
                "NULL".into()
            } else {
                array_value_to_string(c, 0).unwrap()
            }
        })
        .collect()
}

fn error(s: &Session, sql: &str) -> String {
    match s.sql(sql).and_then(|f| f.collect()) {
        Ok(_) => panic!("{sql} should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn regexp_replace_replaces_every_match_from_position() {
    let s = session();
    assert_eq!(
        text(
            &s,
            r"SELECT regexp_replace('100-200', '(\\d+)', 'num'),
                     regexp_replace('100-200', '(\\d+)', 'num', 3),
                     regexp_replace('100-200', '(\\d+)', 'num', 1),
                     regexp_replace('100-200', '(\\d+)', '<$1>'),
                     regexp_replace('abc', 'b', 'x', 10),
                     regexp_replace('aaa', 'a', '\\$1'),
                     regexp_replace('abc', '', '-'),
                     regexp_replace('abc', '^.', 'X', 2)"
        ),
        [
            "num-num",
            "10num-num",
            "num-num",
            "<100>-<200>",
            "abc",
            "$1$1$1",
            "-a-b-c-",
            "aXc"
        ]
    );
    // Any null argument: null.
    assert_eq!(
        text(
            &s,
            "SELECT regexp_replace(NULL, 'a', 'b'), regexp_replace('abc', NULL, 'b'),
                    regexp_replace('abc', 'b', NULL), regexp_replace('abc', 'b', 'x', NULL)"
        ),
        ["NULL"; 4]
    );
}

#[test]
fn regexp_replace_refuses_bad_arguments() {
    let s = session();
    let e = error(&s, "SELECT regexp_replace('abc', 'b', 'x', 0)");
    assert!(
        e.contains("VALUE_OUT_OF_RANGE") && e.contains("position"),
        "{e}"
    );
    let e = error(&s, "SELECT regexp_replace('abc', '(', 'x')");
    assert!(
        e.contains("INVALID_PARAMETER_VALUE.PATTERN") && e.contains("regexp_replace"),
        "{e}"
    );
    let e = error(&s, "SELECT regexp_replace('abc', 'b', '$2')");
    assert!(e.contains("regexp_replace") && e.contains("group 2"), "{e}");
    let e = error(&s, "SELECT regexp_replace('abc', 'b')");
    assert!(e.contains("regexp_replace"), "{e}");
}

#[test]
fn sign_and_abs_of_intervals() {
    let s = session();
    let r = row(
        &s,
        "SELECT sign(INTERVAL -'100' YEAR), signum(INTERVAL 0 DAY),
                sign(INTERVAL '-1 02:00:00' DAY TO SECOND), sign(40),
                abs(INTERVAL -'1-1' YEAR TO MONTH), abs(INTERVAL '-1 02:00:00' DAY TO SECOND)",
    );
    assert_eq!(r[0].1, ScalarValue::Float64(Some(-1.0)));
    assert_eq!(r[1].1, ScalarValue::Float64(Some(0.0)));
    assert_eq!(r[2].1, ScalarValue::Float64(Some(-1.0)));
    assert_eq!(r[3].1, ScalarValue::Float64(Some(1.0)));
    // Interval literals are Interval(MonthDayNano) in Sluice; the result keeps the type.
    let mdn =
        |m, d, ns| ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(m, d, ns)));
    assert_eq!(r[4].1, mdn(13, 0, 0));
    assert_eq!(r[5].1, mdn(0, 1, 7_200_000_000_000));
    // Spark's own interval types stay: abs of a year-month interval is one.
    let r = row(
        &s,
        "SELECT abs(make_ym_interval(-1, -1)), sign(make_ym_interval(0, -3)),
                abs(make_ym_interval(NULL, 1)), sign(make_ym_interval(NULL, 1))",
    );
    assert_eq!(r[0].0, DataType::Interval(IntervalUnit::YearMonth));
    assert_eq!(r[0].1, ScalarValue::IntervalYearMonth(Some(13)));
    assert_eq!(r[1].1, ScalarValue::Float64(Some(-1.0)));
    assert_eq!(r[2].1, ScalarValue::IntervalYearMonth(None));
    assert_eq!(r[3].1, ScalarValue::Float64(None));
    // Months and days together are Spark's CalendarInterval, which abs does not take.
    let e = error(&s, "SELECT abs(INTERVAL 1 MONTH + INTERVAL 2 DAYS)");
    assert!(e.contains("CalendarInterval"), "{e}");
}

#[test]
fn try_divide_of_intervals_rounds_half_up_and_is_null_on_zero() {
    let s = session();
    let r = row(
        &s,
        "SELECT try_divide(interval 2 month, 2), try_divide(interval 3 month, 2),
                try_divide(interval 5 month, 2.5), try_divide(interval '1' day, 3),
                try_divide(interval 1 day, 0), try_divide(interval 1 month, NULL),
                try_divide(3, 2)",
    );
    let mdn =
        |m, d, ns| ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(m, d, ns)));
    assert_eq!(r[0].1, mdn(1, 0, 0));
    assert_eq!(r[1].1, mdn(2, 0, 0));
    assert_eq!(r[2].1, mdn(2, 0, 0));
    assert_eq!(r[3].1, mdn(0, 0, 28_800_000_000_000));
    assert_eq!(r[4].1, ScalarValue::IntervalMonthDayNano(None));
    assert!(r[5].1.is_null());
    assert_eq!(r[6].1, ScalarValue::Float64(Some(1.5)));
    // A year-month interval stays one.
    let r = row(
        &s,
        "SELECT try_divide(make_ym_interval(0, 5), 2), try_divide(make_ym_interval(0, -5), 2)",
    );
    assert_eq!(r[0].1, ScalarValue::IntervalYearMonth(Some(3)));
    assert_eq!(r[1].1, ScalarValue::IntervalYearMonth(Some(-3)));
    let e = error(&s, "SELECT try_divide(2, interval 1 month)");
    assert!(e.contains("BINARY_OP_DIFF_TYPES"), "{e}");
    let e = error(&s, "SELECT try_divide(interval 1 month, 'x')");
    assert!(
        e.contains("UNEXPECTED_INPUT_TYPE") && e.contains("try_divide"),
        "{e}"
    );
}

#[test]
fn typeof_names_sparks_types() {
    let s = session();
    assert_eq!(
        text(
            &s,
            "SELECT typeof('a'), typeof(CAST(1.5 AS DOUBLE)), typeof(named_struct('a', 'x')),
                    typeof(map('a', true)), typeof(DATE'2020-01-01'),
                    typeof(TIMESTAMP'2020-01-01 00:00:00'), typeof(NULL),
                    typeof(CAST(1 AS TINYINT)) AS t1, typeof(CAST(1 AS INT)) AS t2, typeof(X'01'),
                    typeof(array(CAST(1 AS INT))), typeof(CAST(NULL AS STRING)) AS t3"
        ),
        [
            "string",
            "double",
            "struct<a:string>",
            "map<string,boolean>",
            "date",
            "timestamp",
            "void",
            "tinyint",
            "int",
            "binary",
            "array<int>",
            "string"
        ]
    );
    let e = error(&s, "SELECT typeof(1, 2)");
    assert!(e.contains("typeof"), "{e}");
}

#[test]
fn extract_substring_and_overlay_syntax_use_sparks_functions() {
    let s = session();
    let r = row(
        &s,
        "SELECT extract(SECONDS FROM timestamp'2019-10-01 00:00:01.000001'),
                extract(seconds FROM interval 5 hours 30 seconds 1 milliseconds 1 microseconds),
                extract(YEAR FROM TIMESTAMP '2019-08-12 01:00:00.123456')",
    );
    assert_eq!(r[0].1, ScalarValue::Decimal128(Some(1_000_001), 8, 6));
    assert_eq!(r[1].1, ScalarValue::Decimal128(Some(30_001_001), 8, 6));
    assert_eq!(r[2].1.to_string(), "2019");
    assert_eq!(
        text(
            &s,
            "SELECT substring('Spark SQL', 0, 2), substring(NULL, 1, 2),
                    substring('Spark SQL' FROM 5 FOR 1), substring('abc', NULL)"
        ),
        ["Sp", "NULL", "k", "NULL"]
    );
    let r = row(
        &s,
        "SELECT overlay(encode('Spark SQL', 'utf-8') PLACING encode('_', 'utf-8') FROM 6),
                overlay('Spark SQL' PLACING 'tructured' FROM 2 FOR 4)",
    );
    assert_eq!(r[0].1, ScalarValue::Binary(Some(b"Spark_SQL".to_vec())));
    assert_eq!(r[1].1.to_string(), "Structured SQL");
}

#[test]
fn timestamp_ntz_is_a_sql_type() {
    let s = session();
    assert_eq!(
        text(
            &s,
            "SELECT CAST('2021-01-01 10:00:00' AS TIMESTAMP_NTZ),
                    convert_timezone('Europe/Brussels', 'America/Los_Angeles',
                                     timestamp_ntz'2021-12-06 00:00:00'),
                    convert_timezone('UTC', 'Asia/Tokyo', NULL)"
        ),
        ["2021-01-01T10:00:00", "2021-12-05T15:00:00", "NULL"]
    );
    let e = error(
        &s,
        "SELECT convert_timezone('Nowhere/Else', timestamp_ntz'2021-12-05 15:00:00')",
    );
    assert!(
        e.contains("convert_timezone") || e.contains("Nowhere"),
        "{e}"
    );
}
