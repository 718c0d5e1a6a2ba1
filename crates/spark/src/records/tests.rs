//! Java's number forms and Hadoop's line splitting.

use super::*;

#[test]
fn decimals_round_half_up_and_check_precision() {
    assert_eq!(parse_decimal("12.345", 10, 2), Some(1235));
    assert_eq!(parse_decimal("-12.345", 10, 2), Some(-1235));
    assert_eq!(parse_decimal("12.344", 10, 2), Some(1234));
    assert_eq!(parse_decimal("2.675", 10, 2), Some(268));
    assert_eq!(parse_decimal("1e3", 10, 2), Some(100_000));
    assert_eq!(parse_decimal("0.004", 10, 2), Some(0));
    assert_eq!(parse_decimal("0.005", 10, 2), Some(1));
    assert_eq!(parse_decimal(".5", 3, 0), Some(1));
    assert_eq!(parse_decimal("5.", 3, 0), Some(5));
    assert_eq!(parse_decimal("000123", 3, 0), Some(123));
    assert_eq!(parse_decimal("1234", 3, 0), None);
    assert_eq!(parse_decimal("999.995", 5, 2), None);
    assert!(parse_decimal("99999999999999999999999999999999999999", 38, 0).is_some());
    assert_eq!(parse_decimal("1e400", 38, 0), None);
    assert_eq!(parse_decimal("1e-400", 38, 2), Some(0));
    for bad in ["", "-", "1.2.3", "abc", " 1", "1e", "0x10"] {
        assert_eq!(parse_decimal(bad, 10, 2), None, "{bad}");
    }
}

#[test]
fn java_number_text() {
    assert_eq!(java_double_to_string(1.5), "1.5");
    assert_eq!(java_double_to_string(100.0), "100.0");
    assert_eq!(java_double_to_string(1e10), "1.0E10");
    assert_eq!(java_double_to_string(1.25e-5), "1.25E-5");
    assert_eq!(java_double_to_string(1234567.0), "1234567.0");
    assert_eq!(java_double_to_string(0.001), "0.001");
    assert_eq!(parse_java_double(" 1.5d "), Some(1.5));
    assert_eq!(parse_java_double("-Infinity"), Some(f64::NEG_INFINITY));
    assert_eq!(parse_java_double("1e3"), Some(1000.0));
    assert_eq!(parse_java_double("abc"), None);
    assert_eq!(parse_java_double("inf"), None);
    assert_eq!(parse_java_double(""), None);
    assert_eq!(parse_java_float("2.5f"), Some(2.5));
}

#[test]
fn lines_split_like_hadoop() {
    let mut got = Vec::new();
    for_each_line("a\r\nb\rc\n\nd", None, |n, l| {
        got.push((n, l.to_string()));
        Ok(())
    })
    .unwrap();
    assert_eq!(
        got,
        vec![
            (1, "a".into()),
            (2, "b".into()),
            (3, "c".into()),
            (4, "".into()),
            (5, "d".into())
        ]
    );
    let mut got = Vec::new();
    for_each_line("a\nb\n", None, |_, l| {
        got.push(l.to_string());
        Ok(())
    })
    .unwrap();
    assert_eq!(got, vec!["a", "b"]);
    let mut got = Vec::new();
    for_each_line("a||b||", Some("||"), |_, l| {
        got.push(l.to_string());
        Ok(())
    })
    .unwrap();
    assert_eq!(got, vec!["a", "b"]);
}
