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

fn cast_text(values: &[Option<&str>], to: DataType) -> Vec<String> {
    let a: ArrayRef = Arc::new(arrow::array::StringArray::from(values.to_vec()));
    let out = spark_cast(&a, &to, Mode::Legacy, "test").unwrap();
    let s = arrow::compute::cast(&out, &DataType::Utf8).unwrap();
    let s = s.as_string::<i32>();
    (0..s.len())
        .map(|i| {
            if s.is_null(i) {
                "null".into()
            } else {
                s.value(i).to_string()
            }
        })
        .collect()
}

#[test]
fn string_casts_to_decimals_round_half_up_and_null_on_overflow() {
    assert_eq!(
        cast_text(
            &[
                Some(" 1.005 "),
                Some("1e2"),
                Some("123.456"),
                Some("123456789.1"),
                Some("abc"),
                None
            ],
            DataType::Decimal128(10, 2)
        ),
        ["1.01", "100.00", "123.46", "null", "null", "null"]
    );
}

#[test]
fn doubles_narrow_as_java_does_and_ansi_names_the_value() {
    let a: ArrayRef = Arc::new(arrow::array::Float64Array::from(vec![
        1e20,
        -1e20,
        f64::NAN,
        300.7,
        -2.9,
    ]));
    let int = spark_cast(&a, &DataType::Int32, Mode::Legacy, "t").unwrap();
    assert_eq!(
        int.as_primitive::<Int32Type>().values().to_vec(),
        [i32::MAX, i32::MIN, 0, 300, -2]
    );
    let tiny = spark_cast(&a, &DataType::Int8, Mode::Legacy, "t").unwrap();
    assert_eq!(
        tiny.as_primitive::<Int8Type>().values().to_vec(),
        [-1, 0, 0, 44, -2]
    );
    let e = spark_cast(&a, &DataType::Int32, Mode::Ansi, "CAST(d AS INT)").unwrap_err();
    let e = SluiceError::from(e);
    assert!(e.is(class::CAST_OVERFLOW), "{e}");
    assert!(
        e.message().contains("1.0E20D") && e.message().contains("CAST(d AS INT)"),
        "{e}"
    );
    let t = spark_cast(&a, &DataType::Int32, Mode::Try, "t").unwrap();
    assert_eq!(t.null_count(), 3);
}
