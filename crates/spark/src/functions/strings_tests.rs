//! The string functions' tests: the helpers on their own, and Spark's values (PySpark 3.5.7)
//! for `regexp_replace`.

use super::*;
use crate::functions::testing::{error, session, text};

#[test]
fn conv_format_number_and_split_follow_spark() {
    assert_eq!(conv("100", 2, 10).as_deref(), Some("4"));
    assert_eq!(conv("-10", 16, -10).as_deref(), Some("-16"));
    assert_eq!(
        format_number(12332.123456, 4).as_deref(),
        Some("12,332.1235")
    );
    assert_eq!(format_number(-1234567.5, 0).as_deref(), Some("-1,234,568"));
    let re = regex::Regex::new("[ABC]").unwrap();
    assert_eq!(
        split("oneAtwoBthreeC", &re, -1),
        ["one", "two", "three", ""]
    );
    assert_eq!(split("oneAtwoBthreeC", &re, 2), ["one", "twoBthreeC"]);
    assert_eq!(bround(2.5, 0), 2.0);
    assert_eq!(bround(3.5, 0), 4.0);
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
