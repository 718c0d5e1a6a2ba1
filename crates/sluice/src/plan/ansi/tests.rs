//! Unit tests of Spark's cast rules, each value read from PySpark 3.5.7.

use super::*;

#[test]
fn strings_to_integers_as_spark_reads_them() {
    assert_eq!(parse_spark_integer(" 12 ", true), Some(12));
    assert_eq!(parse_spark_integer("1.5", true), Some(1));
    assert_eq!(parse_spark_integer("-1.9", true), Some(-1));
    assert_eq!(parse_spark_integer("+7", true), Some(7));
    assert_eq!(parse_spark_integer("1.", true), Some(1));
    assert_eq!(parse_spark_integer(".5", true), Some(0));
    for bad in [
        "x1",
        "1e3",
        "",
        "12abc",
        "0x10",
        "1,000",
        "9223372036854775808",
    ] {
        assert_eq!(parse_spark_integer(bad, true), None, "{bad}");
    }
    assert_eq!(parse_spark_integer("2147483648", true), Some(2147483648));
}

#[test]
fn strings_to_doubles_and_booleans() {
    assert_eq!(parse_spark_double(" 1.5 "), Some(1.5));
    assert_eq!(parse_spark_double("1.5d"), Some(1.5));
    assert_eq!(parse_spark_double("1e400"), Some(f64::INFINITY));
    assert_eq!(parse_spark_double("-inf"), Some(f64::NEG_INFINITY));
    assert!(parse_spark_double("NaN").unwrap().is_nan());
    assert_eq!(parse_spark_double("abc"), None);
    for (s, b) in [
        ("yes", Some(true)),
        ("t", Some(true)),
        ("Y", Some(true)),
        ("0", Some(false)),
        ("n", Some(false)),
        (" true ", Some(true)),
        ("2", None),
        ("off", None),
    ] {
        assert_eq!(parse_spark_bool(s), b, "{s}");
    }
}

#[test]
fn java_doubles_print_as_java_does() {
    assert_eq!(java_double_text(1e20), "1.0E20");
    assert_eq!(java_double_text(1.5), "1.5");
    assert_eq!(java_double_text(3.0), "3.0");
    assert_eq!(java_double_text(f64::NAN), "NaN");
}
