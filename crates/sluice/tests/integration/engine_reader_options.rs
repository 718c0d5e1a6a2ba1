//! The JSON and CSV readers' datetime options (`timestampFormat`, `dateFormat`,
//! `timestampNTZFormat`, `enableDateTimeParsingFallback`) in streaming reads, batch reads and
//! pipeline files, and the documented options Sluice refuses. Expected values from PySpark 3.5.7.

use sluice::{error::class, Pipeline, Session, Trigger};

use crate::support::{add_file, dirs, strings};

const JSON: &str = "{\"t\": \"14/02/2026 10:05\", \"d\": \"14.02.2026\"}
{\"t\": \"2026-02-14T10:05:00\", \"d\": \"2026-02-14\"}
{\"t\": \"garbage\", \"d\": \"garbage\"}
{\"t\": \"14/02/2026 10:05:30.25+02:00\", \"d\": \"1.2.2026\"}
";

const CSV: &str = "t,d
14/02/2026 10:05,14.02.2026
2026-02-14T10:05:00,2026-02-14
garbage,garbage
";

fn session() -> Session {
    Session::builder().shuffle_partitions(1).build().unwrap()
}

/// The rows of `sql` as `t|d` text (Spark's CAST AS STRING), in input order of `t`.
fn text_rows(s: &Session, sql: &str) -> Vec<String> {
    let batches = s.sql(sql).unwrap().collect().unwrap();
    let mut out = Vec::new();
    for b in &batches {
        let cols: Vec<Vec<String>> = b
            .columns()
            .iter()
            .map(|c| {
                let t = strings(c);
                (0..c.len())
                    .map(|i| {
                        if c.is_null(i) {
                            "null".into()
                        } else {
                            t[i].clone()
                        }
                    })
                    .collect()
            })
            .collect();
        for i in 0..b.num_rows() {
            out.push(
                cols.iter()
                    .map(|c| c[i].as_str())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    out
}

#[test]
fn a_streaming_json_read_takes_sparks_pattern_letters() {
    let d = dirs();
    add_file(&d.input, "a.json", JSON, 1);
    let s = session();
    let q = s
        .read_stream()
        .format("json")
        .schema("t TIMESTAMP, d DATE")
        .unwrap()
        .option("timestampFormat", "dd/MM/yyyy HH:mm[:ss[.SS]][XXX]")
        .option("dateFormat", "d.M.yyyy")
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("parsed")
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    assert_eq!(
        text_rows(
            &s,
            "SELECT CAST(t AS STRING), CAST(d AS STRING) FROM parsed"
        ),
        [
            "2026-02-14 10:05:00|2026-02-14",
            "null|null",
            "null|null",
            "2026-02-14 08:05:30.25|2026-02-01"
        ]
    );
}

#[test]
fn a_batch_csv_read_takes_the_patterns_and_falls_back_only_when_asked() {
    let d = dirs();
    add_file(&d.input, "a.csv", CSV, 1);
    let s = session();
    let read = |fallback: Option<&str>| {
        let mut r = s
            .read()
            .format("csv")
            .schema("t TIMESTAMP, d DATE")
            .unwrap()
            .option("header", "true")
            .option("timestampFormat", "dd/MM/yyyy HH:mm")
            .option("dateFormat", "dd.MM.yyyy");
        if let Some(f) = fallback {
            r = r.option("enableDateTimeParsingFallback", f);
        }
        r.load(d.input.display().to_string())
            .unwrap()
            .create_or_replace_temp_view("csv_rows")
            .unwrap();
        text_rows(
            &s,
            "SELECT CAST(t AS STRING), CAST(d AS STRING) FROM csv_rows",
        )
    };
    assert_eq!(
        read(None),
        ["2026-02-14 10:05:00|2026-02-14", "null|null", "null|null"]
    );
    assert_eq!(
        read(Some("true")),
        [
            "2026-02-14 10:05:00|2026-02-14",
            "2026-02-14 10:05:00|2026-02-14",
            "null|null"
        ]
    );
}

#[test]
fn a_pipeline_file_passes_the_patterns_and_the_ansi_switch() {
    let d = dirs();
    add_file(&d.input, "a.json", JSON, 1);
    let mut p = Pipeline::parse(
        "CREATE TABLE events (t TIMESTAMP, d DATE)
WITH (connector = 'filesystem', path = '${input}', format = 'json',
      'timestampFormat' = 'dd/MM/yyyy HH:mm[:ss[.SS]][XXX]', 'dateFormat' = 'd.M.yyyy');
CREATE SINK out WITH (connector = 'memory', trigger = 'available-now') AS
SELECT CAST(t AS STRING) AS t, CAST(d AS STRING) AS d FROM events WHERE t IS NOT NULL;",
        "p.sql",
    )
    .unwrap();
    p.set_variable("input", d.input.display().to_string());
    let s = session();
    let queries = p.start(&s).unwrap();
    p.await_termination(&queries, || false).unwrap();
    let mut rows = text_rows(&s, "SELECT t, d FROM out");
    rows.sort();
    assert_eq!(
        rows,
        [
            "2026-02-14 08:05:30.25|2026-02-01",
            "2026-02-14 10:05:00|2026-02-14"
        ]
    );

    // SET 'spark.sql.ansi.enabled' = 'true' turns a bad cast into Spark's error.
    let d = dirs();
    add_file(&d.input, "a.json", JSON, 1);
    let mut p = Pipeline::parse(
        "SET 'spark.sql.ansi.enabled' = 'true';
CREATE TABLE events (t STRING, d STRING)
WITH (connector = 'filesystem', path = '${input}', format = 'json');
CREATE SINK out2 WITH (connector = 'memory', trigger = 'available-now') AS
SELECT CAST(d AS DATE) AS d FROM events;",
        "p.sql",
    )
    .unwrap();
    p.set_variable("input", d.input.display().to_string());
    let s = session();
    let res = p
        .start(&s)
        .and_then(|queries| p.await_termination(&queries, || false));
    let e = res.expect_err("ANSI: '14.02.2026' is no DATE");
    assert!(e.is(class::CAST_INVALID_INPUT), "{e}");
    assert!(e.message().contains("'14.02.2026'"), "{e}");
}

#[test]
fn documented_options_sluice_does_not_implement_are_refused_unknown_ones_ignored() {
    let d = dirs();
    add_file(&d.input, "a.json", JSON, 1);
    let s = session();
    let load = |format: &str, key: &str, value: &str| {
        s.read_stream()
            .format(format)
            .schema("t STRING, d STRING")
            .unwrap()
            .option(key, value)
            .load(d.input.display().to_string())
    };
    for (format, key, value) in [
        ("json", "timeZone", "America/New_York"),
        ("json", "locale", "fr-FR"),
        ("json", "timestampFormat", "yyyy-MM-dd QQQ"),
        ("csv", "inferSchema", "true"),
        ("csv", "maxColumns", "10"),
        ("csv", "maxCharsPerColumn", "100"),
        ("csv", "timeZone", "Europe/Paris"),
    ] {
        let e = load(format, key, value).expect_err(key);
        assert!(e.is(class::SLUICE_NOT_SUPPORTED_YET), "{key}: {e}");
        assert!(e.message().contains(key), "{key}: {e}");
    }
    // Spark's defaults and options that only matter without a schema are accepted.
    for (format, key, value) in [
        ("json", "timeZone", "UTC"),
        ("json", "primitivesAsString", "true"),
        ("json", "noSuchOption", "x"),
        ("csv", "maxColumns", "20480"),
        ("csv", "enforceSchema", "true"),
        ("csv", "inferSchema", "false"),
    ] {
        load(format, key, value).unwrap_or_else(|e| panic!("{key}: {e}"));
    }
}
