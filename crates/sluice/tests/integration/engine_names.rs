//! Names resolved as Spark resolves them (`spark.sql.caseSensitive`), Spark's interval literals,
//! and the join shapes of Spark's join suites (null-safe keys, self-joins, three-stream
//! chains). Every expected value was taken from PySpark 3.5.7 running the same query.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, RecordBatch, StructArray};
use arrow::datatypes::{DataType, Field, Fields, Schema};
use sluice::{col, lit, Session, Trigger};

use crate::support::{add_file, dirs, session};

/// Column names and rows (cells cast to text, `null` for nulls, joined by `|`), rows sorted.
fn table(batches: &[RecordBatch]) -> (Vec<String>, Vec<String>) {
    let mut names = Vec::new();
    let mut rows = Vec::new();
    for b in batches {
        names = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let cells: Vec<ArrayRef> = b
            .columns()
            .iter()
            .map(|c| arrow::compute::cast(c, &DataType::Utf8).unwrap())
            .collect();
        for i in 0..b.num_rows() {
            let row: Vec<String> = cells
                .iter()
                .map(|c| {
                    let a = c
                        .as_any()
                        .downcast_ref::<arrow::array::StringArray>()
                        .unwrap();
                    if arrow::array::Array::is_null(a, i) {
                        "null".to_string()
                    } else {
                        a.value(i).to_string()
                    }
                })
                .collect();
            rows.push(row.join("|"));
        }
    }
    rows.sort();
    (names, rows)
}

/// Runs a streaming SQL query to the end of its input (available-now, memory sink `name`) and
/// returns the sink's table.
fn run_stream(s: &Session, sql: &str, name: &str) -> (Vec<String>, Vec<String>) {
    let q = s
        .sql(sql)
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name(name)
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    table(
        &s.sql(&format!("SELECT * FROM {name}"))
            .unwrap()
            .collect()
            .unwrap(),
    )
}

fn batch(s: &Session, sql: &str) -> sluice::Result<(Vec<String>, Vec<String>)> {
    Ok(table(&s.sql(sql)?.collect()?))
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A JSON stream with camelCase columns, registered as the view `MyTab` (stored `mytab`).
fn camel_stream(s: &Session, d: &crate::support::Dirs) {
    add_file(
        &d.input,
        "0.json",
        "{\"leftKey\": 1, \"Val\": \"x\"}\n{\"leftKey\": 2, \"Val\": \"y\"}\n",
        1,
    );
    s.read_stream()
        .format("json")
        .schema("leftKey INT, Val STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .create_or_replace_temp_view("MyTab")
        .unwrap();
}

#[test]
fn sql_names_match_ignoring_case_and_output_columns_keep_the_written_spelling() {
    let d = dirs();
    let s = session();
    camel_stream(&s, &d);
    // Spark: ['leftkey', 'MyAlias', 'val'] [Row(leftkey=1, MyAlias=1, val='x')]
    assert_eq!(
        run_stream(
            &s,
            "SELECT leftkey, LEFTKEY AS MyAlias, val FROM mytab",
            "q1"
        ),
        (
            strs(&["leftkey", "MyAlias", "val"]),
            strs(&["1|1|x", "2|2|y"])
        )
    );
    // Spark: ['LEFTKEY'] (a qualified reference, the table named in another case)
    assert_eq!(
        run_stream(&s, "SELECT m.LEFTKEY FROM MyTab m WHERE M.val = 'y'", "q2"),
        (strs(&["LEFTKEY"]), strs(&["2"]))
    );
    // Spark: a CTE and a derived table named in other cases: ['lk'], ['LK']
    assert_eq!(
        run_stream(
            &s,
            "WITH Cte AS (SELECT leftKey AS Lk FROM mytab) SELECT lk FROM cte",
            "q3"
        ),
        (strs(&["lk"]), strs(&["1", "2"]))
    );
    assert_eq!(
        run_stream(
            &s,
            "SELECT sub.LK FROM (SELECT leftKey AS Lk FROM mytab) Sub",
            "q4"
        ),
        (strs(&["LK"]), strs(&["1", "2"]))
    );
    // Spark: ['leftKey'] when written as the schema spells it
    assert_eq!(
        run_stream(&s, "SELECT `leftKey` FROM mytab WHERE leftkey > 1", "q5"),
        (strs(&["leftKey"]), strs(&["2"]))
    );
}

#[test]
fn aliases_group_by_order_by_and_struct_fields_resolve_ignoring_case() {
    let s = session();
    let inner = Fields::from(vec![
        Field::new("Inner", DataType::Int32, true),
        Field::new("b", DataType::Int32, true),
    ]);
    let schema = Arc::new(Schema::new(vec![
        Field::new("leftKey", DataType::Int32, true),
        Field::new("s", DataType::Struct(inner.clone()), true),
    ]));
    let st = StructArray::new(
        inner,
        vec![
            Arc::new(Int32Array::from(vec![5])) as ArrayRef,
            Arc::new(Int32Array::from(vec![6])),
        ],
        None,
    );
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int32Array::from(vec![1])), Arc::new(st)],
    )
    .unwrap();
    s.register_batches("mytab", schema, vec![b]).unwrap();
    // Spark: ['inner', 'INNER'] [Row(inner=5, INNER=5)]
    assert_eq!(
        batch(&s, "SELECT s.inner, S.INNER FROM mytab").unwrap(),
        (strs(&["inner", "INNER"]), strs(&["5|5"]))
    );
    // Spark: ['q'] [Row(q=5)]
    assert_eq!(
        batch(&s, "SELECT s.inner AS q FROM mytab").unwrap(),
        (strs(&["q"]), strs(&["5"]))
    );
    // Spark: ['k'] (ORDER BY an alias in another case)
    assert_eq!(
        batch(&s, "SELECT leftkey AS k FROM mytab ORDER BY K").unwrap(),
        (strs(&["k"]), strs(&["1"]))
    );
    // Spark: ['Kk', 'count(1)'] (GROUP BY an alias in another case)
    let (names, rows) = batch(&s, "SELECT leftkey AS Kk, count(*) FROM mytab GROUP BY kK").unwrap();
    assert_eq!((names[0].as_str(), rows), ("Kk", strs(&["1|1"])));
    // Function names ignore case too.
    let (_, rows) = batch(&s, "SELECT COUNT(*), Sum(LEFTKEY) FROM MYTAB").unwrap();
    assert_eq!(rows, strs(&["1|1"]));
}

#[test]
fn columns_differing_only_by_case_are_ambiguous_unless_case_sensitive() {
    let s = session();
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("A", DataType::Int32, true),
    ]));
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int32Array::from(vec![1])),
            Arc::new(Int32Array::from(vec![2])),
        ],
    )
    .unwrap();
    s.register_batches("dup", schema, vec![b]).unwrap();
    // Spark: [AMBIGUOUS_REFERENCE] Reference `a` is ambiguous, could be: [`dup`.`a`, `dup`.`A`]
    let e = batch(&s, "SELECT a FROM dup").unwrap_err();
    assert!(e.is("AMBIGUOUS_REFERENCE"), "{e}");
    let frame = s.table("dup").unwrap();
    let e = frame.select(["A"]).unwrap_err();
    assert!(e.is("AMBIGUOUS_REFERENCE"), "{e}");
    // Spark with spark.sql.caseSensitive=true: ['a', 'A'] [Row(a=1, A=2)]
    s.set_conf("spark.sql.caseSensitive", "true");
    assert_eq!(
        batch(&s, "SELECT a, A FROM dup").unwrap(),
        (strs(&["a", "A"]), strs(&["1|2"]))
    );
}

#[test]
fn case_sensitive_mode_refuses_a_near_miss_and_names_the_candidates() {
    let d = dirs();
    let s = session();
    camel_stream(&s, &d);
    s.set_conf("spark.sql.caseSensitive", "true");
    // Spark: [UNRESOLVED_COLUMN.WITH_SUGGESTION] ... `leftkey` ... [`leftKey`, `Val`]
    let e = s.sql("SELECT leftkey FROM mytab").unwrap_err();
    assert!(e.is("UNRESOLVED_COLUMN.WITH_SUGGESTION"), "{e}");
    assert!(e.message().contains("`leftKey`"), "{e}");
    let frame = s.table("mytab").unwrap();
    let e = frame.select(["leftkey"]).unwrap_err();
    assert!(e.is("UNRESOLVED_COLUMN.WITH_SUGGESTION"), "{e}");
    // Spark: ['leftKey'] [Row(leftKey=1)]
    assert_eq!(
        run_stream(&s, "SELECT leftKey FROM mytab", "exact"),
        (strs(&["leftKey"]), strs(&["1", "2"]))
    );
}

#[test]
fn the_dataframe_api_resolves_column_names_like_spark() {
    let d = dirs();
    let s = session();
    camel_stream(&s, &d);
    let f = s.table("mytab").unwrap();
    let names = |f: &sluice::StreamFrame| -> Vec<String> {
        f.schema()
            .fields()
            .iter()
            .map(|x| x.name().clone())
            .collect()
    };
    // Spark 3.5.7, df with columns leftKey, Val:
    // withColumn("LEFTKEY", lit(9)).columns == ['LEFTKEY', 'Val']
    assert_eq!(
        names(&f.with_column("LEFTKEY", lit(9)).unwrap()),
        strs(&["LEFTKEY", "Val"])
    );
    // withColumnRenamed("LEFTKEY", "z").columns == ['z', 'Val']
    assert_eq!(
        names(&f.with_column_renamed("LEFTKEY", "z").unwrap()),
        strs(&["z", "Val"])
    );
    // select("LEFTKEY", col("val")).columns == ['LEFTKEY', 'val']
    assert_eq!(
        names(&f.select_exprs(vec![col("LEFTKEY"), col("val")]).unwrap()),
        strs(&["LEFTKEY", "val"])
    );
    // dropDuplicates(["LEFTKEY"]).columns == ['leftKey', 'Val']
    let dd = f.drop_duplicates(["LEFTKEY"]).unwrap();
    assert_eq!(names(&dd), strs(&["leftKey", "Val"]));
    // A filter and an aggregation over differently cased names run.
    let q = f
        .filter(col("LeftKey").gt(lit(1)))
        .unwrap()
        .filter_sql("VAL = 'y'")
        .unwrap()
        .group_by([col("val")])
        .count()
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("agg")
        .output_mode(sluice::OutputMode::Complete)
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let (_, rows) = batch(&s, "SELECT * FROM agg").unwrap();
    assert_eq!(rows, strs(&["y|1"]));
}

#[test]
fn a_camel_case_event_time_column_drives_watermark_and_windows() {
    let d = dirs();
    let s = session();
    add_file(
        &d.input,
        "0.json",
        "{\"eventTime\": \"2026-01-01T00:00:10Z\", \"userId\": \"u1\"}\n\
         {\"eventTime\": \"2026-01-01T00:00:20Z\", \"userId\": \"u1\"}\n\
         {\"eventTime\": \"2026-01-01T00:20:00Z\", \"userId\": \"u2\"}\n",
        1,
    );
    s.read_stream()
        .format("json")
        .schema("eventTime TIMESTAMP, userId STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .with_watermark("EVENTTIME", "1 minute 30 seconds")
        .unwrap()
        .create_or_replace_temp_view("ev")
        .unwrap();
    // Append mode: only the window before the watermark (00:20:00 - 90 s) is final.
    let (names, rows) = run_stream(
        &s,
        "SELECT CAST(window.start AS STRING) AS ws, userid, count(*) AS n FROM EV \
         GROUP BY window(eventtime, '10 minutes'), USERID",
        "wins",
    );
    assert_eq!(names, strs(&["ws", "userid", "n"]));
    assert_eq!(rows, strs(&["2026-01-01 00:00:00|u1|2"]));
}

#[test]
fn spark_interval_literals_in_arithmetic() {
    let s = session();
    // Spark: a=2026-01-01 00:01:30, b=2023-10-01 00:00:00, c=2026-01-01 01:30:00
    let (_, rows) = batch(
        &s,
        "SELECT CAST(TIMESTAMP'2026-01-01 00:00:00' + INTERVAL '1:30' MINUTE TO SECOND AS STRING) AS a, \
         CAST(TIMESTAMP'2026-01-01 00:00:00' - INTERVAL '2-3' YEAR TO MONTH AS STRING) AS b, \
         CAST(TIMESTAMP'2026-01-01 00:00:00' + INTERVAL 1 HOUR 30 MINUTES AS STRING) AS c",
    )
    .unwrap();
    assert_eq!(
        rows,
        strs(&["2026-01-01 00:01:30|2023-10-01 00:00:00|2026-01-01 01:30:00"])
    );
    // Spark: 1 day 2:03:04 = 93784 s; -'1:30' = -90 s; '1:30.5' = 90.5 s; 3 weeks = 21 days
    let (_, rows) = batch(
        &s,
        "SELECT CAST(TIMESTAMP'2026-01-01 00:00:00' + INTERVAL '1 2:03:04' DAY TO SECOND AS STRING), \
         CAST(TIMESTAMP'2026-01-01 00:00:00' + INTERVAL '-1:30' MINUTE TO SECOND AS STRING), \
         CAST(TIMESTAMP'2026-01-01 00:00:00' + INTERVAL '1:30.5' MINUTE TO SECOND AS STRING), \
         CAST(TIMESTAMP'2026-01-01 00:00:00' + INTERVAL 3 WEEKS AS STRING), \
         CAST(TIMESTAMP'2026-01-01 00:00:00' + INTERVAL '10' MINUTE AS STRING)",
    )
    .unwrap();
    assert_eq!(
        rows,
        strs(&["2026-01-02 02:03:04|2025-12-31 23:58:30|2026-01-01 00:01:30.5|2026-01-22 00:00:00|2026-01-01 00:10:00"])
    );
    let e = s
        .sql("SELECT TIMESTAMP'2026-01-01 00:00:00' + INTERVAL '1:75' MINUTE TO SECOND")
        .unwrap_err();
    assert!(e.is("INVALID_INTERVAL"), "{e}");
}

/// Four JSON streams with watermarks (10 s), as in the PySpark run: views `A`, `B`, `C`
/// (`k INT, ts TIMESTAMP, <x>v STRING`) and `S` (`k, ts, v`), and the static table `T`.
fn join_inputs(s: &Session, d: &crate::support::Dirs) {
    let files = [
        (
            "A",
            "av",
            "{\"k\":1,\"ts\":\"2026-01-01T00:00:00Z\",\"av\":\"a1\"}\n{\"k\":null,\"ts\":\"2026-01-01T00:00:05Z\",\"av\":\"anull\"}\n{\"k\":2,\"ts\":\"2026-01-01T00:00:10Z\",\"av\":\"a2\"}\n",
        ),
        (
            "B",
            "bv",
            "{\"k\":1,\"ts\":\"2026-01-01T00:00:01Z\",\"bv\":\"b1\"}\n{\"k\":null,\"ts\":\"2026-01-01T00:00:06Z\",\"bv\":\"bnull\"}\n{\"k\":3,\"ts\":\"2026-01-01T00:00:11Z\",\"bv\":\"b3\"}\n",
        ),
        (
            "C",
            "cv",
            "{\"k\":1,\"ts\":\"2026-01-01T00:00:02Z\",\"cv\":\"c1\"}\n{\"k\":2,\"ts\":\"2026-01-01T00:00:12Z\",\"cv\":\"c2\"}\n",
        ),
        (
            "S",
            "v",
            "{\"k\":1,\"ts\":\"2026-01-01T00:00:00Z\",\"v\":\"x\"}\n{\"k\":1,\"ts\":\"2026-01-01T00:00:03Z\",\"v\":\"y\"}\n{\"k\":2,\"ts\":\"2026-01-01T00:00:04Z\",\"v\":\"z\"}\n",
        ),
    ];
    for (name, value, body) in files {
        let dir = d.input.join(name);
        add_file(&dir, "part-0.json", body, 1);
        s.read_stream()
            .format("json")
            .schema(&format!("k INT, ts TIMESTAMP, {value} STRING"))
            .unwrap()
            .load(dir.display().to_string())
            .unwrap()
            .with_watermark("ts", "10 seconds")
            .unwrap()
            .create_or_replace_temp_view(name)
            .unwrap();
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int32, true),
        Field::new("sv", DataType::Utf8, true),
    ]));
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int32Array::from(vec![Some(1), None])),
            Arc::new(arrow::array::StringArray::from(vec!["s1", "snull"])),
        ],
    )
    .unwrap();
    s.register_batches("T", schema, vec![b]).unwrap();
}

#[test]
fn null_safe_equality_is_a_join_key_and_null_keys_match_each_other() {
    let d = dirs();
    let s = session();
    join_inputs(&s, &d);
    let both = strs(&["a1|b1", "anull|bnull"]);
    // Spark: [('a1', 'b1'), ('anull', 'bnull')] for each of these
    let q = "SELECT A.av, B.bv FROM A JOIN B ON A.k <=> B.k AND B.ts BETWEEN A.ts - INTERVAL 5 SECONDS AND A.ts + INTERVAL 5 SECONDS";
    assert_eq!(run_stream(&s, q, "ns1").1, both);
    // the only key of a stream-stream join
    let q = "SELECT A.av, B.bv FROM A JOIN B ON A.k <=> B.k";
    assert_eq!(run_stream(&s, q, "ns2").1, both);
    let q = "SELECT A.av, B.bv FROM A LEFT JOIN B ON A.k <=> B.k AND B.ts BETWEEN A.ts - INTERVAL 5 SECONDS AND A.ts + INTERVAL 5 SECONDS";
    assert_eq!(run_stream(&s, q, "ns3").1, both);
    // stream-static: [('a1', 's1'), ('anull', 'snull')]
    let q = "SELECT A.av, T.sv FROM A JOIN T ON A.k <=> T.k";
    assert_eq!(run_stream(&s, q, "ns4").1, strs(&["a1|s1", "anull|snull"]));
    // plain equality: the null keys do not match
    let q = "SELECT A.av, B.bv FROM A JOIN B ON A.k = B.k";
    assert_eq!(run_stream(&s, q, "ns5").1, strs(&["a1|b1"]));
}

#[test]
fn a_stream_joined_with_itself_and_three_streams_in_a_chain() {
    let d = dirs();
    let s = session();
    join_inputs(&s, &d);
    // Spark: [('x','x'), ('x','y'), ('y','x'), ('y','y'), ('z','z')]
    let q = "SELECT l.v AS lv, r.v AS rv FROM S l JOIN S r ON l.k = r.k AND r.ts BETWEEN l.ts - INTERVAL 5 SECONDS AND l.ts + INTERVAL 5 SECONDS";
    assert_eq!(
        run_stream(&s, q, "self").1,
        strs(&["x|x", "x|y", "y|x", "y|y", "z|z"])
    );
    // Spark: [('a1', 'b1', 'c1')]
    let q = "SELECT A.av, B.bv, C.cv FROM A JOIN B ON A.k = B.k AND B.ts BETWEEN A.ts - INTERVAL 5 SECONDS AND A.ts + INTERVAL 5 SECONDS JOIN C ON B.k = C.k AND C.ts BETWEEN B.ts - INTERVAL 5 SECONDS AND B.ts + INTERVAL 5 SECONDS";
    assert_eq!(run_stream(&s, q, "chain").1, strs(&["a1|b1|c1"]));
    // Spark: a range bound with a MINUTE TO SECOND interval: [('a1', 'c1'), ('a2', 'c2')]
    let q = "SELECT A.av, C.cv FROM A JOIN C ON A.k = C.k AND C.ts BETWEEN A.ts - INTERVAL '0:05' MINUTE TO SECOND AND A.ts + INTERVAL '0:05' MINUTE TO SECOND";
    assert_eq!(run_stream(&s, q, "range").1, strs(&["a1|c1", "a2|c2"]));
}
