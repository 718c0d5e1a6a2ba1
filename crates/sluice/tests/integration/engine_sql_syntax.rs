//! Spark SQL syntax as Spark users write it: `a div b`, `!`, `~`, `&`, `||`, `<=>`, string
//! literals with Spark's backslash escapes (and `spark.sql.parser.escapedStringLiterals`),
//! legacy multi-unit interval literals. Every expected value was read from PySpark 3.5.7.

use arrow::array::{Array, RecordBatch};
use sluice::{Session, Trigger};

use crate::support::{add_file, dirs, strings};

fn session_with(confs: &[(&str, &str)]) -> Session {
    let mut b = Session::builder().shuffle_partitions(1);
    for (k, v) in confs {
        b = b.config(*k, *v);
    }
    b.build().unwrap()
}

/// Rows as text (`|`-joined cells, `null` for nulls), in order.
fn rows(out: &[RecordBatch]) -> Vec<String> {
    let mut rows = Vec::new();
    for b in out {
        let cols: Vec<(Vec<String>, &dyn Array)> = b
            .columns()
            .iter()
            .map(|c| (strings(c), c.as_ref()))
            .collect();
        for i in 0..b.num_rows() {
            let cells: Vec<String> = cols
                .iter()
                .map(|(t, c)| {
                    if c.is_null(i) {
                        "null".into()
                    } else {
                        t[i].clone()
                    }
                })
                .collect();
            rows.push(cells.join("|"));
        }
    }
    rows
}

fn batch(s: &Session, sql: &str) -> sluice::Result<Vec<String>> {
    Ok(rows(&s.sql(sql)?.collect()?))
}

/// `select` over the JSON stream `body` (view `events`, schema `schema`), available-now into
/// the memory sink: the rows as text, sorted.
fn run_stream(s: &Session, schema: &str, body: &str, select: &str) -> sluice::Result<Vec<String>> {
    let d = dirs();
    add_file(&d.input, "a.json", body, 1);
    s.read_stream()
        .format("json")
        .schema(schema)?
        .load(d.input.display().to_string())?
        .create_or_replace_temp_view("events")?;
    let q = s
        .sql(select)?
        .write_stream()
        .format("memory")
        .query_name("syntax_out")
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()?;
    q.await_termination()?;
    let mut out = rows(&s.sql("SELECT * FROM syntax_out")?.collect()?);
    out.sort();
    Ok(out)
}

#[test]
fn div_is_sparks_integral_division() {
    let s = session_with(&[]);
    // Spark: 3, -3, NULL, 4, 7 (DIV binds like `*`), 3 on decimals, BIGINT
    assert_eq!(
        batch(
            &s,
            "SELECT 7 div 2 AS a, -7 div 2 AS b, 7 div 0 AS c, 10 div 3 + 1 AS d, 2 * 7 div 2 AS e, \
             7.5 div 2 AS f, CAST(null AS INT) div 2 AS g, div(7, 2) AS h"
        )
        .unwrap(),
        ["3|-3|null|4|7|3|null|3"]
    );
    // Spark: -13 (months), 2 (day-time)
    assert_eq!(
        batch(
            &s,
            "SELECT INTERVAL '1-1' YEAR TO MONTH div INTERVAL '-1' MONTH AS a, \
             INTERVAL '5' HOUR div INTERVAL '2' HOUR AS b"
        )
        .unwrap(),
        ["-13|2"]
    );
    let df = s.sql("SELECT 7 div 2 AS q").unwrap();
    assert_eq!(
        df.schema().field(0).data_type(),
        &arrow::datatypes::DataType::Int64
    );
    // Spark refuses DOUBLE operands (DATATYPE_MISMATCH.BINARY_OP_WRONG_TYPE).
    let e = s
        .sql("SELECT CAST(7 AS DOUBLE) div CAST(2 AS DOUBLE)")
        .and_then(|df| df.collect())
        .unwrap_err();
    assert!(e.is("DATATYPE_MISMATCH.BINARY_OP_WRONG_TYPE"), "{e}");
    // In a stream over columns, a zero divisor is null without ANSI.
    let body = "{\"a\": 7, \"b\": 2}\n{\"a\": -7, \"b\": 0}\n{\"a\": 9, \"b\": null}\n";
    assert_eq!(
        run_stream(
            &s,
            "a INT, b INT",
            body,
            "SELECT a, a div b AS q FROM events"
        )
        .unwrap(),
        ["-7|null", "7|3", "9|null"]
    );
}

#[test]
fn div_by_zero_under_ansi_is_divide_by_zero() {
    let s = session_with(&[("spark.sql.ansi.enabled", "true")]);
    assert_eq!(batch(&s, "SELECT 7 div 2").unwrap(), ["3"]);
    let body = "{\"a\": 7, \"b\": 0}\n";
    let e = run_stream(&s, "a INT, b INT", body, "SELECT a div b AS q FROM events").unwrap_err();
    assert!(e.is("DIVIDE_BY_ZERO"), "{e}");
}

#[test]
fn bang_tilde_and_the_other_operators_spark_users_write() {
    let s = session_with(&[]);
    // Spark: false, true, true (`! 1 = 2` is NOT (1 = 2)), -6, -6, 1, 7, 6
    assert_eq!(
        batch(
            &s,
            "SELECT ! true AS a, !false AS b, ! 1 = 2 AS c, ~ 5 AS d, ~CAST(5 AS TINYINT) AS e, \
             5 & 3 AS f, 5 | 3 AS g, 5 ^ 3 AS h"
        )
        .unwrap(),
        ["false|true|true|-6|-6|1|7|6"]
    );
    // Spark: ab, a1, null; true, false, true
    assert_eq!(
        batch(
            &s,
            "SELECT 'a' || 'b' AS a, 'a' || 1 AS b, 'a' || null AS c, 1 <=> 1 AS d, null <=> 1 AS e, \
             null <=> null AS f"
        )
        .unwrap(),
        ["ab|a1|null|true|false|true"]
    );
    // Spark: [1, 2, 3]
    assert_eq!(
        batch(&s, "SELECT CAST(array(1, 2) || array(3) AS STRING)").unwrap(),
        ["[1, 2, 3]"]
    );
    // In a stream: NOT and bitwise NOT over columns.
    let body = "{\"f\": true, \"n\": 5}\n{\"f\": null, \"n\": null}\n";
    assert_eq!(
        run_stream(
            &s,
            "f BOOLEAN, n INT",
            body,
            "SELECT !f AS nf, ~n AS bn FROM events"
        )
        .unwrap(),
        ["false|-6", "null|null"]
    );
}

#[test]
fn string_literals_are_unescaped_as_spark_does() {
    let s = session_with(&[]);
    // Spark: regexp_extract('ab123', '(\\d+)', 1) = 123, length('a\tb') = 3, '\'' = ',
    // '\u0041' = A, '\101' = A, '\x' = x, '\%' keeps its backslash, 'it''s' = its
    assert_eq!(
        batch(
            &s,
            r"SELECT regexp_extract('ab123', '(\\d+)', 1) AS a, length('a\tb') AS b, '\'' AS c, '\u0041' AS d, '\101' AS e, '\x' AS f, '\%' AS g, 'it''s' AS h, 'a' 'b' AS i"
        )
        .unwrap(),
        [r"123|3|'|A|A|x|\%|its|ab"]
    );
    // Spark: 'a_' LIKE 'a\_' is true, 'ab' LIKE 'a\_' false
    assert_eq!(
        batch(&s, r"SELECT 'ab' LIKE 'a\_' AS a, 'a_' LIKE 'a\_' AS b").unwrap(),
        ["false|true"]
    );
    // The DataFrame API's SQL expressions follow the same rules.
    let body = "{\"v\": \"id-42\"}\n";
    let d = dirs();
    add_file(&d.input, "a.json", body, 1);
    let out = s
        .read_stream()
        .format("json")
        .schema("v STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .filter_sql(r"v RLIKE '\\d+'")
        .unwrap()
        .select_sql([r"regexp_extract(v, '(\\d+)', 1) AS n"])
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("syntax_api")
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    out.await_termination().unwrap();
    assert_eq!(
        rows(
            &s.sql("SELECT * FROM syntax_api")
                .unwrap()
                .collect()
                .unwrap()
        ),
        ["42"]
    );
}

#[test]
fn escaped_string_literals_conf_keeps_backslashes() {
    let s = session_with(&[("spark.sql.parser.escapedStringLiterals", "true")]);
    // Spark: \\d+, a\tb (4 characters), \u0041
    assert_eq!(
        batch(
            &s,
            r"SELECT '\\d+' AS a, length('a\tb') AS b, '\u0041' AS c"
        )
        .unwrap(),
        [r"\\d+|4|\u0041"]
    );
}

#[test]
fn legacy_multi_unit_interval_literals() {
    let s = session_with(&[]);
    // Spark: 2024-01-02 02:00:00, 2024-01-02 02:03:00, 2024-01-01 01:30:10, 2024-01-10 00:00:00
    assert_eq!(
        batch(
            &s,
            "SELECT CAST(TIMESTAMP'2024-01-01 00:00:00' + INTERVAL 1 DAY 2 HOURS AS STRING), \
             CAST(TIMESTAMP'2024-01-01 00:00:00' + INTERVAL '1' DAY '2' HOURS '3' MINUTES AS STRING), \
             CAST(TIMESTAMP'2024-01-01 00:00:00' + INTERVAL 1 HOUR 30 MINUTES 10 SECONDS AS STRING), \
             CAST(TIMESTAMP'2024-01-01 00:00:00' + INTERVAL 2 DAYS 1 WEEK AS STRING)"
        )
        .unwrap(),
        ["2024-01-02 02:00:00|2024-01-02 02:03:00|2024-01-01 01:30:10|2024-01-10 00:00:00"]
    );
}

#[test]
fn a_field_of_a_subscript_or_a_call_result_is_read_by_name() {
    // Spark reads `arr[0].f` and `f(x).a.b` as fields, case-insensitively by default;
    // `[]` on an array is 0-based.
    let s = session_with(&[]);
    assert_eq!(
        batch(
            &s,
            "SELECT array(named_struct('k', 'a', 'v', 1), named_struct('k', 'b', 'v', 2))[1].v, \
             named_struct('x', named_struct('y', 5)).x.y, \
             filter(array(named_struct('k', 'a', 'v', 1)), h -> h.k = 'a')[0].V"
        )
        .unwrap(),
        vec!["2|5|1"]
    );
}

#[test]
fn cast_as_binary_is_sparks_utf8_bytes() {
    let s = session_with(&[]);
    assert_eq!(
        batch(
            &s,
            "SELECT length(CAST('héllo' AS BINARY)), CAST(CAST('abc' AS BINARY) AS STRING), \
             hex(CAST('AB' AS BINARY))"
        )
        .unwrap(),
        vec!["6|abc|4142"]
    );
}
