//! Spark's non-ANSI rules (a bad value is null, never the end of a query) and the ANSI switch
//! (`spark.sql.ansi.enabled=true`: Spark's errors with Spark's classes), through streaming
//! queries. Every expected value was read from PySpark 3.5.7.

use sluice::{error::class, Session, Trigger};

use crate::support::{add_file, dirs, strings};

/// Runs `select` (SQL over the view `events` of the JSON lines `body`, schema `schema`) as a
/// streaming query into the memory sink, available-now; the rows as text, one `|`-joined line
/// each, or the query's error.
fn run_stream(
    session: &Session,
    schema: &str,
    body: &str,
    select: &str,
) -> sluice::Result<Vec<String>> {
    let d = dirs();
    add_file(&d.input, "a.json", body, 1);
    session
        .read_stream()
        .format("json")
        .schema(schema)?
        .load(d.input.display().to_string())?
        .create_or_replace_temp_view("events")?;
    let q = session
        .sql(select)?
        .write_stream()
        .format("memory")
        .query_name("ansi_out")
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()?;
    q.await_termination()?;
    let out = session.sql("SELECT * FROM ansi_out")?.collect()?;
    let mut rows = Vec::new();
    for b in &out {
        let cols: Vec<Vec<String>> = b
            .columns()
            .iter()
            .map(|c| {
                let texts = strings(c);
                (0..c.len())
                    .map(|i| {
                        if c.is_null(i) {
                            "null".into()
                        } else {
                            texts[i].clone()
                        }
                    })
                    .collect()
            })
            .collect();
        for i in 0..b.num_rows() {
            rows.push(
                cols.iter()
                    .map(|c| c[i].as_str())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    Ok(rows)
}

fn session() -> Session {
    Session::builder().shuffle_partitions(1).build().unwrap()
}

fn ansi_session() -> Session {
    Session::builder()
        .shuffle_partitions(1)
        .config("spark.sql.ansi.enabled", "true")
        .build()
        .unwrap()
}

#[test]
fn a_string_that_is_not_a_number_casts_to_null_and_the_query_goes_on() {
    let body =
        "{\"id\": 1, \"v\": \"12\"}\n{\"id\": 2, \"v\": \"x1\"}\n{\"id\": 3, \"v\": \" 7 \"}\n";
    let rows = run_stream(
        &session(),
        "id INT, v STRING",
        body,
        "SELECT id, CAST(v AS INT) AS n FROM events",
    )
    .unwrap();
    assert_eq!(rows, ["1|12", "2|null", "3|7"]);
}

/// One row of every kind of value; `v` a string column, `i` an INT, `z` zero, `d` a DOUBLE.
const ROW: &str =
    "{\"s\": \"x1\", \"i\": 2147483647, \"z\": 0, \"d\": 1e20, \"ds\": \"2023-02-30\"}\n";
const ROW_SCHEMA: &str = "s STRING, i INT, z INT, d DOUBLE, ds STRING";

/// `exprs` over [`ROW`] in a streaming query: each value as text (Spark's values in comments).
fn values(session: &Session, exprs: &[&str]) -> sluice::Result<Vec<String>> {
    let select = exprs
        .iter()
        .enumerate()
        .map(|(n, e)| format!("{e} AS c{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let rows = run_stream(
        session,
        ROW_SCHEMA,
        ROW,
        &format!("SELECT {select} FROM events"),
    )?;
    Ok(rows[0].split('|').map(str::to_string).collect())
}

#[test]
fn non_ansi_casts_of_strings_are_null_or_sparks_value() {
    let cases = [
        ("CAST(s AS INT)", "null"),
        ("CAST(' 12 ' AS INT)", "12"),
        ("CAST(concat('1.', '5') AS INT)", "1"),
        ("CAST(concat('-1', '.9') AS INT)", "-1"),
        ("CAST(concat('1e', '3') AS INT)", "null"),
        ("CAST(concat('2147483', '648') AS INT)", "null"),
        ("CAST(concat('2147483', '648') AS BIGINT)", "2147483648"),
        ("CAST(concat('30', '0') AS TINYINT)", "null"),
        ("CAST(concat('4000', '0') AS SMALLINT)", "null"),
        ("CAST(s AS DOUBLE)", "null"),
        ("CAST(concat(' 1.5', ' ') AS DOUBLE)", "1.5"),
        ("CAST(concat('1.5', 'd') AS DOUBLE)", "1.5"),
        ("CAST(s AS DECIMAL(10,2))", "null"),
        ("CAST(concat('123.', '456') AS DECIMAL(10,2))", "123.46"),
        ("CAST(concat('123456789', '.1') AS DECIMAL(10,2))", "null"),
        ("CAST(concat('ye', 's') AS BOOLEAN)", "true"),
        ("CAST(concat('of', 'f') AS BOOLEAN)", "null"),
        ("CAST(ds AS DATE)", "null"),
        ("CAST(concat('2023-2-', '3') AS DATE)", "2023-02-03"),
        ("CAST(s AS TIMESTAMP)", "null"),
        ("CAST(ds AS TIMESTAMP)", "null"),
        (
            "CAST(concat('2023-02-03 ', '1:2:3.5') AS TIMESTAMP)",
            "2023-02-03T01:02:03.500",
        ),
        ("try_cast(s AS INT)", "null"),
    ];
    let exprs: Vec<&str> = cases.iter().map(|c| c.0).collect();
    let got = values(&session(), &exprs).unwrap();
    for ((e, want), got) in cases.iter().zip(&got) {
        assert_eq!(got, want, "{e}");
    }
}

#[test]
fn invalid_dates_are_null_without_ansi() {
    let got = values(
        &session(),
        &[
            "make_date(2023, 2, 30)",
            "make_date(2023, 2, 28)",
            "to_date(ds)",
            "to_date(concat('2023-02-03 ', '10:00:00'))",
            "to_timestamp(s)",
            "to_timestamp(concat('2023-02-03 ', '10:00:00'))",
            "to_date(s)",
        ],
    )
    .unwrap();
    assert_eq!(
        got,
        [
            "null",
            "2023-02-28",
            "null",
            "2023-02-03",
            "null",
            "2023-02-03T10:00:00",
            "null"
        ]
    );
    let e = ansi_error("to_date(ds)");
    assert!(e.is(class::CAST_INVALID_INPUT), "{e}");
    let e = ansi_error("make_date(2023, 2, 30)");
    assert!(e.is(class::DATETIME_FIELD_OUT_OF_BOUNDS), "{e}");
}

#[test]
fn non_ansi_numbers_wrap_saturate_or_are_null() {
    let cases = [
        ("CAST(i + 1 AS TINYINT)", "0"), // INT arithmetic wraps to -2147483648, then to 0
        ("CAST(300 + z AS TINYINT)", "44"),
        ("CAST(-129 + z AS TINYINT)", "127"),
        ("CAST(40000 + z AS SMALLINT)", "-25536"),
        ("CAST(3000000000 + z AS INT)", "-1294967296"),
        ("CAST(d AS INT)", "2147483647"),
        ("CAST(d AS BIGINT)", "9223372036854775807"),
        ("CAST(-d AS INT)", "-2147483648"),
        ("CAST(d AS SMALLINT)", "-1"),
        ("CAST(d AS TINYINT)", "-1"),
        ("CAST(CAST('NaN' AS DOUBLE) + z AS INT)", "0"),
        ("CAST(CAST(-2.9 AS DOUBLE) + z AS INT)", "-2"),
        ("CAST(d AS DECIMAL(5,1))", "null"),
        ("CAST(CAST(123.456 AS DOUBLE) + z AS DECIMAL(5,1))", "123.5"),
        ("CAST(CAST(99999.9 AS DECIMAL(6,1)) AS SMALLINT)", "-31073"),
        ("i + 1", "-2147483648"),
        ("i * 2", "-2"),
        ("-i - 2", "2147483647"),
        ("i / 2", "1073741823.5"),
        ("i / z", "null"),
        ("CAST(1.5 AS DOUBLE) / z", "null"),
        ("i % z", "null"),
        ("try_add(i, 1)", "null"),
        ("try_subtract(-i, 2)", "null"),
        ("try_multiply(i, 2)", "null"),
        ("try_divide(i, z)", "null"),
        ("try_divide(7, 2)", "3.5"),
    ];
    let exprs: Vec<&str> = cases.iter().map(|c| c.0).collect();
    let got = values(&session(), &exprs).unwrap();
    for ((e, want), got) in cases.iter().zip(&got) {
        assert_eq!(got, want, "{e}");
    }
}

fn ansi_error(expr: &str) -> sluice::SluiceError {
    match values(&ansi_session(), &[expr]) {
        Ok(v) => panic!("{expr} gave {v:?} under ANSI, not an error"),
        Err(e) => e,
    }
}

#[test]
fn ansi_casts_fail_the_query_with_sparks_class_naming_the_value_and_the_fix() {
    for (expr, class, value) in [
        ("CAST(s AS INT)", class::CAST_INVALID_INPUT, "'x1'"),
        (
            "CAST(concat('1.', '5') AS INT)",
            class::CAST_INVALID_INPUT,
            "'1.5'",
        ),
        ("CAST(s AS DOUBLE)", class::CAST_INVALID_INPUT, "'x1'"),
        ("CAST(s AS BOOLEAN)", class::CAST_INVALID_INPUT, "'x1'"),
        (
            "CAST(s AS DECIMAL(10,2))",
            class::CAST_INVALID_INPUT,
            "'x1'",
        ),
        (
            "CAST(ds AS DATE)",
            class::CAST_INVALID_INPUT,
            "'2023-02-30'",
        ),
        (
            "CAST(ds AS TIMESTAMP)",
            class::CAST_INVALID_INPUT,
            "'2023-02-30'",
        ),
        ("CAST(i AS SMALLINT)", class::CAST_OVERFLOW, "2147483647"),
        ("CAST(d AS INT)", class::CAST_OVERFLOW, "1.0E20D"),
        (
            "CAST(d AS DECIMAL(5,1))",
            class::NUMERIC_VALUE_OUT_OF_RANGE,
            "100000000000000000000",
        ),
    ] {
        let e = ansi_error(expr);
        assert!(e.is(class), "{expr}: {e}");
        assert!(e.message().contains(value), "{expr}: {e}");
        assert!(
            e.message().contains("spark.sql.ansi.enabled"),
            "{expr}: {e}"
        );
    }
    let e = ansi_error("CAST(s AS INT)");
    assert!(e.message().contains("try_cast"), "{e}");
    assert!(
        e.message().contains("CAST(s AS INT)") || e.message().contains("AS INT)"),
        "{e}"
    );
}

#[test]
fn ansi_arithmetic_fails_with_arithmetic_overflow_and_divide_by_zero() {
    for (expr, class, fix) in [
        ("i + 1", class::ARITHMETIC_OVERFLOW, "try_add"),
        ("i * 2", class::ARITHMETIC_OVERFLOW, "try_multiply"),
        ("-i - 2", class::ARITHMETIC_OVERFLOW, "try_subtract"),
        ("i / z", class::DIVIDE_BY_ZERO, "try_divide"),
        ("i % z", class::DIVIDE_BY_ZERO, "try_divide"),
    ] {
        let e = ansi_error(expr);
        assert!(e.is(class), "{expr}: {e}");
        assert!(e.message().contains(fix), "{expr}: {e}");
    }
    // The try_ functions and try_cast stay null under ANSI; `/` is still DOUBLE division.
    let got = values(
        &ansi_session(),
        &[
            "try_cast(s AS INT)",
            "try_add(i, 1)",
            "try_divide(i, z)",
            "7 / 2",
            "CAST(' 12 ' AS INT)",
        ],
    )
    .unwrap();
    assert_eq!(got, ["null", "null", "null", "3.5", "12"]);
}

#[test]
fn the_ansi_switch_is_read_from_the_session_conf_and_a_bad_value_is_refused() {
    let s = session();
    s.set_conf("spark.sql.ansi.enabled", "true");
    assert!(ansi_error_in(&s, "CAST(s AS INT)").is(class::CAST_INVALID_INPUT));
    s.set_conf("spark.sql.ansi.enabled", "false");
    assert_eq!(values(&s, &["CAST(s AS INT)"]).unwrap(), ["null"]);
    s.set_conf("spark.sql.ansi.enabled", "maybe");
    let e = values(&s, &["CAST(s AS INT)"]).unwrap_err();
    assert!(e.is(class::INVALID_CONF_VALUE), "{e}");
    assert!(e.message().contains("spark.sql.ansi.enabled"), "{e}");
}

fn ansi_error_in(s: &Session, expr: &str) -> sluice::SluiceError {
    values(s, &[expr]).unwrap_err()
}

/// Spark writes a double as Java's `Double.toString` (PySpark 3.5.7: `Infinity`, `-Infinity`,
/// `1.0E20`, `100.0`, `0.1`, `1.0E-5`, null), where Arrow would write `inf` or `1e20`.
#[test]
fn doubles_cast_to_strings_as_java_writes_them() {
    let s = session();
    let batches = s
        .sql(
            "SELECT CAST(CAST('Infinity' AS DOUBLE) AS STRING), CAST(1e20 AS STRING), \
             CAST(CAST(100 AS DOUBLE) AS STRING), CAST(CAST(0.1 AS DOUBLE) AS STRING), CAST(CAST('-inf' AS DOUBLE) AS STRING), \
             CAST(1.0E-5 AS STRING), CAST(CAST(NULL AS DOUBLE) AS STRING) IS NULL",
        )
        .unwrap()
        .collect()
        .unwrap();
    let row: Vec<String> = batches[0]
        .columns()
        .iter()
        .map(|c| strings(c)[0].clone())
        .collect();
    assert_eq!(
        row,
        [
            "Infinity",
            "1.0E20",
            "100.0",
            "0.1",
            "-Infinity",
            "1.0E-5",
            "true"
        ]
    );
}
