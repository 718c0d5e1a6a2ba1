use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arrow::util::display::{ArrayFormatter, FormatOptions};

use super::planner::parse_trigger;
use super::*;
use crate::types::Trigger;

fn parse(text: &str) -> Pipeline {
    Pipeline::parse(text, "p.sql").unwrap_or_else(|e| panic!("{e}"))
}

/// The error's class and its first line (`p.sql:L:C: ...`).
fn parse_err(text: &str) -> (&'static str, String) {
    let e = Pipeline::parse(text, "p.sql").expect_err("the pipeline should be refused");
    (e.class(), e.message().lines().next().unwrap().to_string())
}

const EVENTS: &str = "CREATE TABLE events (ts TIMESTAMP, user STRING, amount DOUBLE)
WITH (connector = 'filesystem', path = '/in', format = 'json');
";

#[test]
fn parses_tables_watermarks_options_sinks_views_inserts_and_set() {
    let p = parse(
        "-- a comment
SET 'spark.sql.shuffle.partitions' = '3';
CREATE TABLE events (
  ts TIMESTAMP,
  `user` STRING NOT NULL,
  amount DECIMAL(10, 2),
  WATERMARK FOR ts AS ts - INTERVAL '10' MINUTE
) WITH (
  connector = 'filesystem', path = '${input}', format = 'json',
  'maxFilesPerTrigger' = '1', kafka.bootstrap.servers = 'h:1', numbers = 5, flag = true
);
CREATE VIEW big AS SELECT * FROM events WHERE amount > 10;
CREATE SINK out WITH (connector = 'console', 'outputMode' = 'update') AS
  WITH b AS (SELECT user FROM big) SELECT user, count(*) AS n FROM b GROUP BY user;
CREATE TABLE archive (user STRING, n BIGINT)
  WITH (connector = 'filesystem', path = '/out', format = 'parquet', checkpoint = '/c');
INSERT INTO archive SELECT user, count(*) FROM big GROUP BY user;
",
    );
    let s = p.statements();
    assert_eq!(s.len(), 6);
    assert!(matches!(&s[0].kind, StatementKind::Set(set)
        if set.key == "spark.sql.shuffle.partitions" && set.value == "3"));
    assert_eq!(s[0].position, Position { line: 2, column: 1 });
    let StatementKind::CreateTable(t) = &s[1].kind else {
        panic!("{:?}", s[1])
    };
    assert_eq!(t.name.value, "events");
    assert_eq!(
        t.name.position,
        Position {
            line: 3,
            column: 14
        }
    );
    let ddl: Vec<&str> = t.columns.iter().map(|c| c.ddl.as_str()).collect();
    assert_eq!(
        ddl,
        [
            "ts TIMESTAMP",
            "`user` STRING NOT NULL",
            "amount DECIMAL(10, 2)"
        ]
    );
    assert_eq!(t.columns[1].name, "user");
    let w = t.watermark.as_ref().unwrap();
    assert_eq!((w.column.as_str(), w.delay.as_str()), ("ts", "10 minute"));
    assert_eq!(w.position, Position { line: 7, column: 3 });
    let opts: Vec<(&str, &str)> = t
        .options
        .iter()
        .map(|o| (o.key.as_str(), o.value.as_str()))
        .collect();
    assert_eq!(
        opts,
        [
            ("connector", "filesystem"),
            ("path", "${input}"),
            ("format", "json"),
            ("maxFilesPerTrigger", "1"),
            ("kafka.bootstrap.servers", "h:1"),
            ("numbers", "5"),
            ("flag", "true"),
        ]
    );
    assert_eq!(
        t.options[1].position,
        Position {
            line: 9,
            column: 36
        }
    );
    let StatementKind::CreateView(v) = &s[2].kind else {
        panic!()
    };
    assert_eq!(v.query.sql, "SELECT * FROM events WHERE amount > 10");
    assert_eq!(v.query.relations[0].value, "events");
    assert_eq!(
        v.query.relations[0].position,
        Position {
            line: 12,
            column: 34
        }
    );
    let StatementKind::CreateSink(k) = &s[3].kind else {
        panic!()
    };
    // The CTE `b` is not a table the query reads; `big` is.
    let reads: Vec<&str> = k.query.relations.iter().map(|r| r.value.as_str()).collect();
    assert_eq!(reads, ["big"]);
    assert!(k.query.sql.starts_with("WITH b AS"));
    assert!(matches!(&s[5].kind, StatementKind::Insert(i) if i.target.value == "archive"));
    assert_eq!(p.query_names(), ["out", "archive"]);
}

#[test]
fn sink_options_may_follow_the_query_and_from_may_replace_it() {
    let p = parse(&format!(
        "{EVENTS}CREATE SINK a AS SELECT user FROM events WHERE amount > 1 WITH (connector = 'noop');
CREATE SINK b FROM events WITH (connector = 'console');
CREATE SINK c WITH (connector = 'console') FROM events;
CREATE SINK d AS SELECT user FROM events GROUP BY window(ts, '5 minutes'), user WITH (connector = 'noop');"
    ));
    let sinks: Vec<&SinkDef> = p
        .statements()
        .iter()
        .filter_map(|s| match &s.kind {
            StatementKind::CreateSink(k) => Some(k),
            _ => None,
        })
        .collect();
    assert_eq!(
        sinks[0].query.sql,
        "SELECT user FROM events WHERE amount > 1"
    );
    assert_eq!(sinks[0].options[0].value, "noop");
    assert_eq!(sinks[1].query.sql, "SELECT * FROM events");
    assert_eq!(sinks[1].query.relations[0].position.line, 4);
    assert_eq!(sinks[2].options[0].value, "console");
    assert!(sinks[3].query.sql.ends_with("'5 minutes'), user"));
}

#[test]
fn syntax_errors_carry_the_line_and_column_in_the_file() {
    let (class, msg) = parse_err(&format!(
        "{EVENTS}CREATE SINK out WITH (connector = 'console') AS\nSELECT user, FROM events;"
    ));
    assert_eq!(class, "PIPELINE_SYNTAX_ERROR");
    assert!(
        msg.starts_with("p.sql:4:14: syntax error in the query: Expected"),
        "{msg}"
    );
    // A typo in a keyword: WHRE is taken as an alias, then `amount` cannot follow.
    let (_, msg) = parse_err(&format!(
        "{EVENTS}CREATE SINK out WITH (connector = 'console') AS\nSELECT user\n  FROM events WHRE amount > 10;"
    ));
    assert!(
        msg.starts_with("p.sql:5:20: unexpected `amount` after the query"),
        "{msg}"
    );

    // Unfinished query: at the end of the statement.
    let (_, msg) = parse_err(&format!(
        "{EVENTS}CREATE SINK out WITH (connector = 'console') AS SELECT user FROM"
    ));
    assert!(msg.starts_with("p.sql:3:65: "), "{msg}");
    assert!(msg.contains("found: the end of the statement"), "{msg}");

    // Something after the query.
    let (_, msg) = parse_err(&format!(
        "{EVENTS}CREATE SINK out WITH (connector = 'console') AS SELECT user FROM events e x"
    ));
    assert!(
        msg.starts_with("p.sql:3:75: unexpected `x` after the query"),
        "{msg}"
    );

    // DDL: a table without WITH, an unclosed string (the tokenizer), a bad column type.
    let (_, msg) = parse_err("CREATE TABLE t (a INT);\n");
    assert!(
        msg.starts_with("p.sql:1:23: expected WITH (...) after the table"),
        "{msg}"
    );
    let (_, msg) = parse_err("CREATE TABLE t (a INT)\n  WITH (connector = 'rate);");
    assert!(
        msg.starts_with("p.sql:2:21: Unterminated string literal"),
        "{msg}"
    );
    let (class, msg) = parse_err("CREATE TABLE t (a INT, b WIBBLE) WITH (connector = 'rate');");
    assert_eq!(class, "INVALID_SCHEMA");
    assert!(msg.starts_with("p.sql:1:26: the column b: "), "{msg}");
    let (_, msg) = parse_err("SELECT 1;");
    assert!(msg.starts_with("p.sql:1:1: expected CREATE TABLE"), "{msg}");
    assert!(msg.contains("CREATE SINK name"), "{msg}");
    let (_, msg) = parse_err("CREATE TABLE t (a INT) WITH (connector = 'rate', connector = 'x');");
    assert!(
        msg.starts_with("p.sql:1:50: the option connector is given twice"),
        "{msg}"
    );
}

#[test]
fn the_error_shows_the_line_with_a_caret() {
    let e = Pipeline::parse(
        "CREATE TABLE t (a INT)\n  WITH (connector = 'kafak');",
        "p.sql",
    )
    .unwrap_err();
    let lines: Vec<&str> = e.message().lines().collect();
    assert_eq!(lines[2], " 2 |   WITH (connector = 'kafak');");
    assert_eq!(lines[3], "   |                     ^");
}

#[test]
fn connectors_are_checked_by_name_and_by_role() {
    let (class, msg) = parse_err(
        "CREATE TABLE t WITH (connector = 'kafak', 'kafka.bootstrap.servers' = 'h:1');
CREATE SINK s WITH (connector = 'console') AS SELECT * FROM t;",
    );
    assert_eq!(class, "PIPELINE_UNKNOWN_CONNECTOR");
    assert!(
        msg.starts_with("p.sql:1:34: unknown connector 'kafak': did you mean 'kafka'?"),
        "{msg}"
    );

    let (class, msg) = parse_err("CREATE TABLE t (a INT) WITH (path = '/x');");
    assert_eq!(class, "PIPELINE_MISSING_OPTION");
    assert!(
        msg.starts_with("p.sql:1:14: the table t has no connector"),
        "{msg}"
    );

    let (class, msg) =
        parse_err("CREATE TABLE t (a INT) WITH (connector = 'filesystem', format = 'json');");
    assert_eq!(class, "PIPELINE_MISSING_OPTION");
    assert!(msg.contains("needs the option path"), "{msg}");

    // A source connector as a sink, a sink connector as a source.
    let (_, msg) = parse_err(&format!(
        "{EVENTS}CREATE SINK s WITH (connector = 'rate') AS SELECT * FROM events;"
    ));
    assert!(
        msg.starts_with("p.sql:3:33: rate is a source connector"),
        "{msg}"
    );
    let (_, msg) = parse_err(
        "CREATE TABLE out WITH (connector = 'print');
CREATE SINK s WITH (connector = 'noop') AS SELECT * FROM out;",
    );
    assert!(
        msg.starts_with("p.sql:2:58: out cannot be read: its connector console only writes"),
        "{msg}"
    );
    let (_, msg) = parse_err(&format!("{EVENTS}CREATE TABLE r WITH (connector = 'nexmark', table = 'bid');\nINSERT INTO r SELECT * FROM events;"));
    assert!(
        msg.starts_with("p.sql:4:13: INSERT INTO r: its connector nexmark only reads"),
        "{msg}"
    );
    let (_, msg) = parse_err(&format!(
        "{EVENTS}CREATE SINK s WITH (connector = 'filesystem', format = 'parquet') AS SELECT * FROM events;"
    ));
    assert!(msg.contains("the sink s needs the option path"), "{msg}");
}

#[test]
fn names_are_declared_once_and_above_their_readers() {
    let (class, msg) = parse_err(&format!(
        "CREATE SINK s WITH (connector = 'console') AS SELECT * FROM events;\n{EVENTS}"
    ));
    assert_eq!(class, "PIPELINE_TABLE_NOT_FOUND");
    assert!(
        msg.starts_with("p.sql:1:61: events is declared below this query (line 2)"),
        "{msg}"
    );

    let (class, msg) = parse_err(&format!("{EVENTS}{EVENTS}"));
    assert_eq!(class, "PIPELINE_DUPLICATE_NAME");
    assert!(
        msg.starts_with("p.sql:3:14: events is already declared as a table at line 1"),
        "{msg}"
    );

    let (_, msg) = parse_err(&format!(
        "{EVENTS}CREATE SINK s WITH (connector = 'console') AS SELECT * FROM events;
CREATE SINK t WITH (connector = 'console') AS SELECT * FROM s;"
    ));
    assert!(
        msg.contains("s is a sink, and a sink cannot be read"),
        "{msg}"
    );

    let (_, msg) = parse_err(&format!(
        "{EVENTS}CREATE TABLE o WITH (connector = 'console');
INSERT INTO o SELECT * FROM events;
INSERT INTO o SELECT * FROM events;"
    ));
    assert!(
        msg.starts_with("p.sql:5:13: a second INSERT INTO o"),
        "{msg}"
    );

    let (_, msg) = parse_err(&format!(
        "{EVENTS}INSERT INTO nowhere SELECT * FROM events;"
    ));
    assert!(
        msg.starts_with("p.sql:3:13: INSERT INTO nowhere: no CREATE TABLE declares nowhere"),
        "{msg}"
    );

    let (class, _) = parse_err(EVENTS);
    assert_eq!(class, "PIPELINE_NO_QUERY");
}

#[test]
fn watermark_forms() {
    let table = |w: &str| {
        let p = parse(&format!(
            "CREATE TABLE t (ts TIMESTAMP, {w}) WITH (connector = 'rate');
CREATE SINK s WITH (connector = 'noop') AS SELECT * FROM t;"
        ));
        match &p.statements()[0].kind {
            StatementKind::CreateTable(t) => t.watermark.clone().unwrap(),
            _ => unreachable!(),
        }
    };
    assert_eq!(table("WATERMARK FOR ts AS ts").delay, "0 seconds");
    assert_eq!(
        table("WATERMARK FOR ts AS ts - INTERVAL '1 hour 30 minutes'").delay,
        "1 hour 30 minutes"
    );
    assert_eq!(
        table("watermark for TS as ts - interval '5' second").delay,
        "5 second"
    );
    // Spark's interval forms (each accepted by Spark 3.5.7's withWatermark as this text).
    assert_eq!(
        table("WATERMARK FOR ts AS ts - INTERVAL '1:30' MINUTE TO SECOND").delay,
        "'1:30' minute to second"
    );
    assert_eq!(
        table("WATERMARK FOR ts AS ts - INTERVAL 1 HOUR 30 MINUTES").delay,
        "1 hour 30 minutes"
    );

    let bad = |w: &str| {
        parse_err(&format!(
            "CREATE TABLE t (ts TIMESTAMP, {w}) WITH (connector = 'rate');
CREATE SINK s WITH (connector = 'noop') AS SELECT * FROM t;"
        ))
        .1
    };
    let msg = bad("WATERMARK FOR ts AS other - INTERVAL '5' SECOND");
    assert!(
        msg.starts_with("p.sql:1:51: the watermark expression must be on the column ts"),
        "{msg}"
    );
    let msg = bad("WATERMARK FOR nope AS nope");
    assert!(
        msg.starts_with("p.sql:1:31: WATERMARK FOR nope: the table has no such column"),
        "{msg}"
    );
    let msg = bad("WATERMARK FOR ts AS ts - INTERVAL '1' MONTH");
    assert!(
        msg.contains("months and years have no fixed length"),
        "{msg}"
    );
    let msg = bad("WATERMARK FOR ts AS ts + INTERVAL '1' SECOND");
    assert!(
        msg.starts_with("p.sql:1:54: expected `-` INTERVAL"),
        "{msg}"
    );
    let msg = bad("WATERMARK FOR ts AS ts, WATERMARK FOR ts AS ts");
    assert!(msg.contains("a second WATERMARK clause"), "{msg}");
}

#[test]
fn unsupported_column_kinds_say_what_to_do() {
    let msg = parse_err(
        "CREATE TABLE t (a INT, b AS a + 1) WITH (connector = 'rate');
CREATE SINK s WITH (connector = 'noop') AS SELECT * FROM t;",
    )
    .1;
    assert!(
        msg.starts_with("p.sql:1:26: computed columns are not supported"),
        "{msg}"
    );
    let msg = parse_err(
        "CREATE TABLE t (a INT, PRIMARY KEY (a) NOT ENFORCED) WITH (connector = 'rate');
CREATE SINK s WITH (connector = 'noop') AS SELECT * FROM t;",
    )
    .1;
    assert!(
        msg.starts_with("p.sql:1:24: PRIMARY constraints are not supported"),
        "{msg}"
    );
    let msg = parse_err(
        "CREATE TABLE t (ts TIMESTAMP METADATA FROM 'timestamp') WITH (connector = 'rate');
CREATE SINK s WITH (connector = 'noop') AS SELECT * FROM t;",
    )
    .1;
    assert!(
        msg.starts_with("p.sql:1:30: METADATA columns are not supported"),
        "{msg}"
    );
}

#[test]
fn variables_come_from_set_variable_then_the_environment_then_the_default() {
    let mut p = parse(&format!(
        "{EVENTS}CREATE SINK s WITH (connector = 'console') AS SELECT * FROM events;"
    ));
    let at = Position { line: 1, column: 1 };
    p.set_variable("input", "/data/in");
    assert_eq!(p.substitute("${input}/x", at).unwrap(), "/data/in/x");
    assert_eq!(p.substitute("${ input :-d}", at).unwrap(), "/data/in");
    assert_eq!(
        p.substitute("${missing_var_x:-/tmp/d}", at).unwrap(),
        "/tmp/d"
    );
    assert_eq!(p.substitute("plain", at).unwrap(), "plain");
    // SAFETY: only this test reads or writes this variable.
    unsafe { std::env::set_var("SLUICE_PIPELINE_TEST_VAR", "from-env") };
    assert_eq!(
        p.substitute("${SLUICE_PIPELINE_TEST_VAR:-d}", at).unwrap(),
        "from-env"
    );
    let e = p.substitute("a ${missing_var_x} b", at).unwrap_err();
    assert_eq!(e.class(), "PIPELINE_UNDEFINED_VARIABLE");
    assert!(e.message().contains("--set missing_var_x=VALUE"), "{e}");
    assert!(p.substitute("${open", at).is_err());
}

#[test]
fn triggers() {
    assert_eq!(parse_trigger("available-now"), Ok(Trigger::AvailableNow));
    assert_eq!(parse_trigger("availableNow"), Ok(Trigger::AvailableNow));
    assert_eq!(parse_trigger("once"), Ok(Trigger::Once));
    assert_eq!(parse_trigger("default"), Ok(Trigger::default()));
    assert_eq!(
        parse_trigger("processing-time 10 seconds"),
        Ok(Trigger::ProcessingTime(Duration::from_secs(10)))
    );
    assert_eq!(
        parse_trigger("processingTime=1 minute"),
        Ok(Trigger::ProcessingTime(Duration::from_secs(60)))
    );
    assert!(parse_trigger("processing-time soon").is_err());
    assert!(parse_trigger("sometimes").is_err());
}

// ---- running pipelines ----

fn session() -> Session {
    Session::builder().shuffle_partitions(2).build().unwrap()
}

/// Rows of a SQL result as `a|b|c`, sorted.
fn rows(session: &Session, sql: &str) -> Vec<String> {
    let batches = session.sql(sql).unwrap().collect().unwrap();
    let opts = FormatOptions::default();
    let mut out = Vec::new();
    for b in &batches {
        let fmts: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            out.push(
                fmts.iter()
                    .map(|f| f.value(r).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    out.sort();
    out
}

fn write_events(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("1.json"),
        r#"{"ts": "2026-09-15T12:01:00Z", "user": "a", "amount": 5.0}
{"ts": "2026-09-15T12:02:00Z", "user": "b", "amount": 50.0}
{"ts": "2026-09-15T12:07:00Z", "user": "a", "amount": 20.0}
"#,
    )
    .unwrap();
}

fn run(p: &Pipeline, session: &Session) {
    let queries = p.start(session).unwrap_or_else(|e| panic!("{e}"));
    p.await_termination(&queries, || false)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_pipeline_runs_file_sources_views_watermarks_and_both_query_forms() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    write_events(&input);
    let mut p = parse(
        "CREATE TABLE events (ts TIMESTAMP, user STRING, amount DOUBLE,
  WATERMARK FOR ts AS ts - INTERVAL '10' MINUTE)
WITH (connector = 'filesystem', path = '${input}', format = 'json', 'maxFilesPerTrigger' = '1');
CREATE VIEW big AS SELECT * FROM events WHERE amount > 10;
CREATE SINK counts WITH (connector = 'memory', 'outputMode' = 'update', trigger = 'available-now') AS
SELECT window.start AS start, count(*) AS n FROM events GROUP BY window(ts, '5 minutes');
CREATE TABLE big_rows (who STRING, amount BIGINT) WITH (connector = 'memory', trigger = 'available-now');
INSERT INTO big_rows SELECT user, amount FROM big;",
    );
    p.set_variable("input", input.display().to_string());
    let s = session();
    run(&p, &s);
    assert_eq!(
        rows(&s, "SELECT * FROM counts"),
        ["2026-09-15T12:00:00|2", "2026-09-15T12:05:00|1"]
    );
    // INSERT INTO: by position, renamed and cast to the table's columns.
    assert_eq!(rows(&s, "SELECT * FROM big_rows"), ["a|20", "b|50"]);
    let batches = s.sql("SELECT * FROM big_rows").unwrap().collect().unwrap();
    let schema = batches[0].schema();
    assert_eq!(schema.field(0).name(), "who");
    assert_eq!(
        schema.field(1).data_type(),
        &arrow::datatypes::DataType::Int64
    );
}

#[test]
fn camel_case_columns_resolve_in_watermarks_and_queries_ignoring_case() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(
        input.join("1.json"),
        r#"{"eventTime": "2026-09-15T12:01:00Z", "userId": "a"}
{"eventTime": "2026-09-15T12:02:00Z", "userId": "a"}
{"eventTime": "2026-09-15T12:20:00Z", "userId": "b"}
"#,
    )
    .unwrap();
    let mut p = parse(
        "CREATE TABLE events (eventTime TIMESTAMP, userId STRING,
  WATERMARK FOR EVENTTIME AS eventtime - INTERVAL '1:30' MINUTE TO SECOND)
WITH (connector = 'filesystem', path = '${input}', format = 'json');
CREATE SINK counts WITH (connector = 'memory', 'outputMode' = 'append', trigger = 'available-now') AS
SELECT window.start AS start, USERID, count(*) AS n FROM events GROUP BY window(eventtime, '10 minutes'), userid;",
    );
    p.set_variable("input", input.display().to_string());
    let s = session();
    run(&p, &s);
    // the watermark 12:20:00 - 90 s closes the 12:00 window only
    assert_eq!(
        rows(&s, "SELECT * FROM counts"),
        ["2026-09-15T12:00:00|a|2"]
    );
    let batches = s.sql("SELECT * FROM counts").unwrap().collect().unwrap();
    assert_eq!(batches[0].schema().field(1).name(), "USERID");
}

#[test]
fn a_query_may_join_a_table_the_caller_registered_in_the_session() {
    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path());
    let s = session();
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("name", arrow::datatypes::DataType::Utf8, false),
        arrow::datatypes::Field::new("country", arrow::datatypes::DataType::Utf8, false),
    ]));
    let batch = arrow::array::RecordBatch::try_new(
        schema.clone(),
        vec![
            std::sync::Arc::new(arrow::array::StringArray::from(vec!["a", "b"])),
            std::sync::Arc::new(arrow::array::StringArray::from(vec!["IN", "FR"])),
        ],
    )
    .unwrap();
    s.register_batches("users", schema, vec![batch]).unwrap();
    let p = parse(&format!(
        "CREATE TABLE events (ts TIMESTAMP, user STRING, amount DOUBLE)
WITH (connector = 'filesystem', path = '{}', format = 'json');
CREATE SINK by_country WITH (connector = 'memory', trigger = 'available-now') AS
SELECT e.user, u.country, e.amount FROM events e JOIN users u ON e.user = u.name;",
        dir.path().display()
    ));
    run(&p, &s);
    assert_eq!(
        rows(&s, "SELECT * FROM by_country"),
        ["a|IN|20.0", "a|IN|5.0", "b|FR|50.0"]
    );
}

#[test]
fn fixed_schema_sources_take_a_column_subset() {
    let s = session();
    let p = parse(
        "CREATE TABLE bids (auction BIGINT, price BIGINT) WITH (connector = 'nexmark', table = 'bid', numEvents = 2000);
CREATE SINK out WITH (connector = 'memory', 'outputMode' = 'complete', trigger = 'available-now') AS
SELECT count(*) AS n, sum(CASE WHEN price > 0 THEN 1 ELSE 0 END) AS priced FROM bids;",
    );
    run(&p, &s);
    let r = rows(&s, "SELECT * FROM out");
    assert_eq!(r.len(), 1);
    let n: i64 = r[0].split('|').next().unwrap().parse().unwrap();
    assert!(n > 1000 && n < 2000, "{r:?}");

    let p = parse(
        "CREATE TABLE bids (auction STRING) WITH (connector = 'nexmark', table = 'bid', numEvents = 10);
CREATE SINK out2 WITH (connector = 'memory', trigger = 'available-now') AS SELECT * FROM bids;",
    );
    let e = p.start(&s).unwrap_err();
    assert_eq!(e.class(), "PIPELINE_INVALID_COLUMN");
    assert!(
        e.message().starts_with(
            "p.sql:1:20: the column auction of the nexmark source is BIGINT, not STRING"
        ),
        "{e}"
    );
    let p = parse(
        "CREATE TABLE r (nope BIGINT) WITH (connector = 'rate');
CREATE SINK out3 WITH (connector = 'noop') AS SELECT * FROM r;",
    );
    let e = p.start(&s).unwrap_err();
    assert!(
        e.message().contains("the rate source has no column nope"),
        "{e}"
    );
}

#[test]
fn start_reports_unknown_tables_and_query_errors_at_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let s = session();
    let text = format!(
        "CREATE TABLE events (ts TIMESTAMP, user STRING)
WITH (connector = 'filesystem', path = '{}', format = 'json');

CREATE SINK s WITH (connector = 'console') AS
  SELECT e.user FROM events e JOIN clicks c ON e.user = c.user;",
        dir.path().display()
    );
    let e = parse(&text).start(&s).unwrap_err();
    assert_eq!(e.class(), "PIPELINE_TABLE_NOT_FOUND");
    assert!(
        e.message().starts_with("p.sql:5:36: unknown table clicks:"),
        "{e}"
    );
    assert!(e.message().contains("declared above: events"), "{e}");

    let text = text.replace("JOIN clicks c ON e.user = c.user", "WHERE e.nosuch > 1");
    let e = parse(&text).start(&s).unwrap_err();
    assert!(e.message().starts_with("p.sql:5:3: in the query: "), "{e}");
    assert!(e.message().contains("nosuch"), "{e}");

    // The engine's own rule, at the sink's statement.
    let text = text.replace(
        "SELECT e.user FROM events e WHERE e.nosuch > 1",
        "SELECT user, count(*) FROM events GROUP BY user",
    );
    let e = parse(&text).start(&s).unwrap_err();
    assert_eq!(e.class(), "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION");
    assert!(
        e.message()
            .starts_with("p.sql:4:1: cannot start the sink s: Append output mode not supported"),
        "{e}"
    );

    // A file source needs columns; a file sink needs a checkpoint.
    let e = parse(&format!(
        "CREATE TABLE raw WITH (connector = 'filesystem', path = '{}', format = 'json');
CREATE SINK s WITH (connector = 'console') AS SELECT * FROM raw;",
        dir.path().display()
    ))
    .start(&s)
    .unwrap_err();
    assert_eq!(e.class(), "PIPELINE_MISSING_SCHEMA");
    let e = parse(&format!(
        "CREATE TABLE r WITH (connector = 'rate');
CREATE SINK s WITH (connector = 'filesystem', format = 'parquet', path = '{}') AS SELECT * FROM r;",
        dir.path().display()
    ))
    .start(&s)
    .unwrap_err();
    assert!(
        e.message()
            .starts_with("p.sql:2:13: the sink s needs checkpoint ="),
        "{e}"
    );

    let e = parse(
        "SET 'spark.sql.shuffle.partitions' = '7';
CREATE TABLE r WITH (connector = 'rate');
CREATE SINK s WITH (connector = 'noop') AS SELECT * FROM r;",
    )
    .start(&s)
    .unwrap_err();
    assert!(e.message().contains("Pipeline::session_builder()"), "{e}");
}

#[test]
fn session_builder_applies_set() {
    let p = parse(
        "SET 'spark.sql.shuffle.partitions' = '3';
SET spark.sql.streaming.minBatchesToRetain = 5;
CREATE TABLE r WITH (connector = 'rate');
CREATE SINK s WITH (connector = 'noop') AS SELECT * FROM r;",
    );
    let s = p.session_builder().unwrap().build().unwrap();
    assert_eq!(s.shuffle_partitions(), 3);
    assert_eq!(
        s.conf("spark.sql.streaming.minBatchesToRetain").as_deref(),
        Some("5")
    );
}

#[test]
fn a_stop_request_stops_every_query_and_a_failing_query_names_its_statement() {
    let s = session();
    let p = parse(
        "CREATE TABLE r WITH (connector = 'rate', rowsPerSecond = 10);
CREATE SINK a WITH (connector = 'noop', trigger = 'processing-time 100 milliseconds') AS SELECT * FROM r;
CREATE SINK b WITH (connector = 'noop') AS SELECT value FROM r;",
    );
    let queries = p.start(&s).unwrap();
    assert_eq!(queries.len(), 2);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            stop.store(true, Ordering::SeqCst);
        });
        p.await_termination(&queries, || stop.load(Ordering::SeqCst))
            .unwrap();
    });
    assert!(queries.iter().all(|q| !q.is_active()));

    // FAILFAST on a malformed record fails the query while it runs.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("1.json"), "{\"a\": 1}\n{not json\n").unwrap();
    let p = parse(&format!(
        "CREATE TABLE t (a BIGINT) WITH (connector = 'filesystem', path = '{}', format = 'json', mode = 'FAILFAST');

CREATE SINK out WITH (connector = 'noop', trigger = 'available-now') AS SELECT * FROM t;",
        dir.path().display()
    ));
    let queries = p.start(&s).unwrap();
    let e = p.await_termination(&queries, || false).unwrap_err();
    assert!(
        e.message()
            .starts_with("p.sql:3:1: the query of sink out failed: "),
        "{e}"
    );
}

#[test]
fn a_socket_table_counts_the_words_of_the_lines_a_server_sends() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let s = session();
    let p = parse(&format!(
        "CREATE TABLE lines (value STRING) WITH (connector = 'socket', host = '127.0.0.1', port = '{port}');
CREATE SINK words WITH (connector = 'memory', 'outputMode' = 'complete') AS
SELECT word, count(*) AS n FROM lines LATERAL VIEW explode(split(value, ' ')) t AS word GROUP BY word;"
    ));
    let queries = p.start(&s).unwrap_or_else(|e| panic!("{e}"));
    let (mut conn, _) = listener.accept().unwrap();
    conn.write_all(b"to be or\nnot to be\n").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        queries[0].process_all_available().unwrap();
        let mut r = rows(&s, "SELECT * FROM words");
        r.sort();
        if r == ["be|2", "not|1", "or|1", "to|2"] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{r:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    p.await_termination(&queries, || true).unwrap();
}

/// Issue 18 part 10: a variable whose name looks secret, substituted anywhere (here into a
/// source path, a `SET` of the S3 secret key and a Kafka JAAS option), never shows in
/// `query.json`, progress, `sluice checkpoint describe` or errors.
#[test]
fn secret_variables_are_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let token = "pipeline-dir-token-53";
    let s3_secret = "pipeline-s3-secret-54";
    let input = dir.path().join("in");
    write_events(&input.join(token));
    let ck = dir.path().join("ck");
    let text = "SET 'spark.hadoop.fs.s3a.secret.key' = '${S3_SECRET}';
CREATE TABLE events (ts TIMESTAMP, user STRING, amount DOUBLE)
WITH (connector = 'filesystem', path = '${input}/${DIR_TOKEN}', format = 'json');
CREATE SINK rows_out WITH (connector = 'memory', trigger = 'available-now', checkpoint = '${ck}') AS
SELECT user FROM events;";
    let mut p = parse(text);
    p.set_variable("input", input.display().to_string());
    p.set_variable("ck", ck.display().to_string());
    p.set_variable("DIR_TOKEN", token);
    p.set_variable("S3_SECRET", s3_secret);
    let s = p.session_builder().unwrap().build().unwrap();
    let queries = p.start(&s).unwrap_or_else(|e| panic!("{e}"));
    p.await_termination(&queries, || false)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows(&s, "SELECT * FROM rows_out"), ["a", "a", "b"]);
    let progress = queries[0].last_progress().unwrap().json();
    let shape = std::fs::read_to_string(ck.join("sluice").join("query.json")).unwrap();
    let described = crate::inspect::describe_checkpoint(&ck).unwrap();
    let description = format!(
        "{}\n{}",
        described.to_text(),
        serde_json::to_string(&described.to_json()).unwrap()
    );
    for (what, out) in [
        ("progress", &progress),
        ("query.json", &shape),
        ("describe", &description),
    ] {
        assert!(!out.contains(token), "{what}: {out}");
        assert!(!out.contains(s3_secret), "{what}: {out}");
        assert!(out.contains(crate::redact::REDACTED), "{what}: {out}");
    }

    // An error naming the secret path: a file sink into the source's folder.
    let mut p = parse(
        "CREATE TABLE events (ts TIMESTAMP, user STRING, amount DOUBLE)
WITH (connector = 'filesystem', path = '${input}/${DIR_TOKEN}', format = 'json');
CREATE SINK loop_out WITH (connector = 'filesystem', format = 'json', path = '${input}/${DIR_TOKEN}', trigger = 'available-now', checkpoint = '${ck}2') AS
SELECT user FROM events;",
    );
    p.set_variable("input", input.display().to_string());
    p.set_variable("ck", ck.display().to_string());
    p.set_variable("DIR_TOKEN", token);
    let e = match p.start(&session()) {
        Ok(q) => p.await_termination(&q, || false).unwrap_err(),
        Err(e) => e,
    };
    assert!(!format!("{e} {e:?}").contains(token), "{e}");
    assert!(e.to_string().contains(crate::redact::REDACTED), "{e}");
}

/// The JAAS text of a Kafka source from a secret variable, malformed so that it is refused:
/// the error never shows it (it started with the password, and was printed as the module).
#[cfg(feature = "kafka")]
#[test]
fn a_refused_jaas_variable_is_never_printed() {
    let mut p = parse(
        "CREATE TABLE k WITH (connector = 'kafka', 'kafka.bootstrap.servers' = '127.0.0.1:1',
  subscribe = 't', 'kafka.security.protocol' = 'SASL_SSL', 'kafka.sasl.mechanism' = 'PLAIN',
  'kafka.sasl.jaas.config' = '${KAFKA_JAAS}');
CREATE SINK out WITH (connector = 'memory', trigger = 'available-now') AS SELECT value FROM k;",
    );
    p.set_variable(
        "KAFKA_JAAS",
        r#"password="pipeline-kafka-pw-55" username="u";"#,
    );
    let e = p.start(&session()).unwrap_err();
    assert!(
        !format!("{e} {e:?}").contains("pipeline-kafka-pw-55"),
        "{e}"
    );
    assert!(e.to_string().contains("kafka.sasl.jaas.config"), "{e}");
}
