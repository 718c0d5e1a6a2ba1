//! Nested types (`STRUCT`, `ARRAY`, `MAP`) end to end: DDL schemas, the JSON source, the JSON
//! functions, field access, aggregations that build nested values, every sink and the state of
//! stateful operators across restarts. Expected values are Spark 3.5.7's (recorded with small
//! PySpark snippets, noted beside each case).

use arrow::array::RecordBatch;
use sluice::sink::console::format_cell;
use sluice::{OutputMode, Session, Trigger};

use crate::support::{add_file, dirs, session};

/// Every row of `batches` as `show()` cells joined by ` | `.
fn rows(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| format_cell(c, i).unwrap())
                .collect();
            out.push(cells.join(" | "));
        }
    }
    out
}

fn sql_rows(s: &Session, q: &str) -> Vec<String> {
    let f = s.sql(q).unwrap_or_else(|e| panic!("{q}: {e}"));
    rows(&f.collect().unwrap_or_else(|e| panic!("{q}: {e}")))
}

fn one(s: &Session, expr: &str) -> String {
    let r = sql_rows(s, &format!("SELECT {expr}"));
    assert_eq!(r.len(), 1, "{expr}");
    r[0].clone()
}

#[test]
fn json_functions_give_sparks_values() {
    let s = session();
    // from_json with a DDL schema, a type, schema_of_json, and Spark's PERMISSIVE nulls.
    for (expr, spark) in [
        (
            r#"from_json('{"a":1,"b":["x","y"]}', 'a INT, b ARRAY<STRING>')"#,
            "{1, [x, y]}",
        ),
        (
            r#"from_json('{"a":1,"b":["x","y"]}', schema_of_json('{"a":1,"b":["x","y"]}'))"#,
            "{1, [x, y]}",
        ),
        (r#"from_json('{"a":1}', 'STRUCT<a: INT>')"#, "{1}"),
        ("from_json('[1,2]', 'ARRAY<INT>')", "[1, 2]"),
        ("from_json('bad', 'ARRAY<INT>')", "null"),
        (r#"from_json('{"a":1}', 'ARRAY<STRUCT<a: INT>>')"#, "[{1}]"),
        (r#"from_json('{"k":1}', 'MAP<STRING,INT>')"#, "{k -> 1}"),
        (r#"from_json('{"k":"x"}', 'MAP<STRING,INT>')"#, "null"),
        (r#"from_json('{"a":"x"}', 'a INT')"#, "{NULL}"),
        ("from_json('bad', 'a INT')", "{NULL}"),
        (
            r#"from_json('{"s":{"a":"bad","b":"x"},"l":[{"x":1},{"x":"q"}]}', 's STRUCT<a: INT, b: STRING>, l ARRAY<STRUCT<x: INT>>')"#,
            "{{NULL, x}, [{1}, {NULL}]}",
        ),
    ] {
        assert_eq!(one(&s, expr), spark, "{expr}");
    }
    for (doc, spark) in [
        (
            r#"{"a":1,"b":["x"],"c":{"d":1.5,"e":null},"f":[],"g":true,"h":[1,2.5],"i":"2024-01-01"}"#,
            "STRUCT<a: BIGINT, b: ARRAY<STRING>, c: STRUCT<d: DOUBLE, e: STRING>, f: ARRAY<STRING>, g: BOOLEAN, h: ARRAY<DOUBLE>, i: STRING>",
        ),
        (r#"[{"a":1}]"#, "ARRAY<STRUCT<a: BIGINT>>"),
        (r#"{"a":[1,"x"]}"#, "STRUCT<a: ARRAY<STRING>>"),
        (r#"{"A":1,"a":2}"#, "STRUCT<A: BIGINT, a: BIGINT>"),
        (
            r#"{"b":1,"a":{"d":1,"c":2}}"#,
            "STRUCT<a: STRUCT<c: BIGINT, d: BIGINT>, b: BIGINT>",
        ),
        ("1", "BIGINT"),
        (r#"{"a":12345678901234567890}"#, "STRUCT<a: DECIMAL(20,0)>"),
        (
            r#"{"a":[{"x":1},{"y":"s"}]}"#,
            "STRUCT<a: ARRAY<STRUCT<x: BIGINT, y: STRING>>>",
        ),
        (r#"{"a":[1,{"x":1}]}"#, "STRUCT<a: ARRAY<STRING>>"),
        (r#"{"a b":1, "`c":2}"#, "STRUCT<```c`: BIGINT, `a b`: BIGINT>"),
        ("[]", "ARRAY<STRING>"),
        ("{}", "STRUCT<>"),
        (r#"{"a":[[1],[2.5]]}"#, "STRUCT<a: ARRAY<ARRAY<DOUBLE>>>"),
    ] {
        assert_eq!(
            one(&s, &format!("schema_of_json('{}')", doc.replace('\'', "''"))),
            spark,
            "{doc}"
        );
        assert_eq!(sluice::schema_of_json(doc).unwrap(), spark, "{doc}");
    }
    for (expr, spark) in [
        (
            "to_json(named_struct('a', 1, 'b', make_array(1, 2), 'd', CAST(NULL AS INT), \
             'e', named_struct('x', CAST(NULL AS STRING)), 'f', make_array(CAST(NULL AS INT)), \
             't', CAST('2024-01-01 00:00:00' AS TIMESTAMP), 'dt', CAST('2024-01-02' AS DATE), \
             'fl', CAST(1.0 AS DOUBLE)))",
            r#"{"a":1,"b":[1,2],"e":{},"f":[null],"t":"2024-01-01T00:00:00.000Z","dt":"2024-01-02","fl":1.0}"#,
        ),
        ("to_json(make_array(1, 2))", "[1,2]"),
        ("to_json(make_array(named_struct('a', 1)))", r#"[{"a":1}]"#),
        ("to_json(map(['a'], [1]))", r#"{"a":1}"#),
        ("to_json(map([1], ['a']))", r#"{"1":"a"}"#),
        (
            "to_json(map(['a'], [named_struct('x', 1)]))",
            r#"{"a":{"x":1}}"#,
        ),
        ("to_json(map(['a'], [CAST(NULL AS INT)]))", r#"{"a":null}"#),
    ] {
        assert_eq!(one(&s, expr), spark, "{expr}");
    }
    // Spark: [DATATYPE_MISMATCH.INVALID_JSON_SCHEMA] ... must be a struct, an array or a map.
    let err = s.sql("SELECT to_json(1)").err().unwrap();
    assert!(
        err.to_string()
            .contains("must be a struct, an array or a map"),
        "{err}"
    );
    // Spark: INVALID_JSON_MAP_KEY_TYPE, and no DROPMALFORMED in from_json.
    let err = s
        .sql(r#"SELECT from_json('{"m":{"1":2}}', 'm MAP<INT,INT>')"#)
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("can only contain STRING as a key type for a MAP"),
        "{err}"
    );
}

#[test]
fn field_access_follows_sparks_non_ansi_rules() {
    let s = session();
    s.sql(
        "SELECT named_struct('a', 1, 'Bc', 2) AS s, make_array(1, 2) AS arr, \
         map(['k'], [1]) AS m",
    )
    .unwrap()
    .create_or_replace_temp_view("t")
    .unwrap();
    // Spark 3.5.7: (1, 2, 2, 1, 2, None, None, 1, None, None, 2, 1, 1)
    assert_eq!(
        sql_rows(
            &s,
            "SELECT s.a, s.Bc, get_field(s, 'bC') AS bc2, arr[0], arr[1], arr[5], arr[-1], m['k'], \
             m['z'], m['K'], element_at(arr, -1), element_at(m, 'k'), s['a'] AS sa FROM t"
        ),
        vec!["1 | 2 | 2 | 1 | 2 | null | null | 1 | null | null | 2 | 1 | 1"]
    );
    // Spark: element_at(array(1,2,3), 5), (.., -1), (.., 1) = None, 3, 1; get(array(1,2), 5),
    // get(array(1,2), 0) = None, 1; element_at(.., 0) is INVALID_INDEX_OF_ZERO.
    assert_eq!(
        sql_rows(
            &s,
            "SELECT element_at(make_array(1, 2, 3), 5) AS a, element_at(make_array(1, 2, 3), -1) AS b, \
             element_at(make_array(1, 2, 3), 1) AS c, get(make_array(1, 2), 5) AS d, \
             get(make_array(1, 2), 0) AS e, element_at(map(['a'], [1]), 'b') AS f"
        ),
        vec!["null | 3 | 1 | null | 1 | null"]
    );
    let err = s
        .sql("SELECT element_at(make_array(1, 2, 3), 0)")
        .and_then(|f| f.collect().map(|_| ()))
        .err()
        .unwrap();
    assert!(err.to_string().contains("INVALID_INDEX_OF_ZERO"), "{err}");
    // Spark: [FIELD_NOT_FOUND] No such struct field `z` in `a`, `Bc`.
    let err = s
        .sql("SELECT s.z FROM t")
        .and_then(|f| f.collect().map(|_| ()))
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("No such struct field `z` in `a`, `Bc`."),
        "{err}"
    );
}

const NESTED_SCHEMA: &str =
    "id INT, s STRUCT<a: INT, b: STRING>, arr ARRAY<INT>, m MAP<STRING, BIGINT>, \
     tags ARRAY<STRUCT<k: STRING, n: BIGINT>>";

fn nested_lines(ids: std::ops::Range<i32>) -> String {
    ids.map(|i| {
        format!(
            "{{\"id\":{i},\"s\":{{\"a\":{i},\"b\":\"x{i}\"}},\"arr\":[{i},null],\"m\":{{\"k\":{i}}},\
             \"tags\":[{{\"k\":\"t{}\",\"n\":{i}}}]}}\n",
            i % 2
        )
    })
    .collect()
}

#[test]
fn nested_json_stream_to_parquet_and_json_sinks_across_restarts() {
    for format in ["parquet", "json"] {
        let d = dirs();
        let run = |s: &Session| {
            let q = s
                .read_stream()
                .format("json")
                .schema(NESTED_SCHEMA)
                .unwrap()
                .load(d.input.display().to_string())
                .unwrap()
                .write_stream()
                .format(format)
                .option("path", d.output.display())
                .option("checkpointLocation", d.checkpoint.display())
                .trigger(Trigger::AvailableNow)
                .start()
                .unwrap();
            q.await_termination().unwrap();
        };
        add_file(&d.input, "1.json", &nested_lines(0..2), 1);
        run(&session());
        add_file(&d.input, "2.json", &nested_lines(2..3), 2);
        run(&session());
        let s = session();
        let read = s
            .read()
            .format(format)
            .schema(NESTED_SCHEMA)
            .unwrap()
            .load(d.output.display().to_string())
            .unwrap()
            .collect()
            .unwrap();
        let schema = read[0].schema();
        assert_eq!(
            sluice::schema::spark_type_name(&arrow::datatypes::DataType::Struct(
                schema.fields().clone()
            )),
            "STRUCT<id: INT, s: STRUCT<a: INT, b: STRING>, arr: ARRAY<INT>, \
             m: MAP<STRING, BIGINT>, tags: ARRAY<STRUCT<k: STRING, n: BIGINT>>>",
            "{format}"
        );
        let mut got = rows(&read);
        got.sort();
        assert_eq!(
            got,
            vec![
                "0 | {0, x0} | [0, NULL] | {k -> 0} | [{t0, 0}]",
                "1 | {1, x1} | [1, NULL] | {k -> 1} | [{t1, 1}]",
                "2 | {2, x2} | [2, NULL] | {k -> 2} | [{t0, 2}]",
            ],
            "{format}"
        );
        if format == "parquet" {
            assert!(
                pyarrow_available(),
                "pyarrow is missing: scripts/test installs it (pip install pyarrow)"
            );
            // pyarrow reads the nested types intact.
            let file = std::fs::read_dir(&d.output)
                .unwrap()
                .filter_map(|e| e.ok())
                .find(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
                .unwrap()
                .path();
            let out = std::process::Command::new("python3")
                .arg("-c")
                .arg("import sys, pyarrow.parquet as pq; print(pq.read_table(sys.argv[1]).schema)")
                .arg(&file)
                .output()
                .unwrap();
            let schema = String::from_utf8_lossy(&out.stdout);
            for want in [
                "id: int32",
                "s: struct<a: int32, b: string>",
                "arr: list<item: int32>",
                "m: map<string, int64",
                "tags: list<item: struct<k: string, n: int64>>",
            ] {
                assert!(schema.contains(want), "{want} not in {schema}");
            }
        }
        if format == "json" {
            // Spark's JSON writer: the same line as the input (nested nulls in arrays kept).
            let mut lines: Vec<String> = std::fs::read_dir(&d.output)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                .flat_map(|e| {
                    std::fs::read_to_string(e.path())
                        .unwrap()
                        .lines()
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .collect();
            lines.sort();
            let mut want: Vec<String> = nested_lines(0..3).lines().map(str::to_string).collect();
            want.sort();
            assert_eq!(lines, want);
        }
    }
}

fn pyarrow_available() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import pyarrow.parquet"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn the_csv_sink_refuses_nested_columns_as_spark() {
    let d = dirs();
    add_file(&d.input, "1.json", &nested_lines(0..1), 1);
    let q = session()
        .read_stream()
        .format("json")
        .schema(NESTED_SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .select(["id", "s"])
        .unwrap()
        .write_stream()
        .format("csv")
        .option("path", d.output.display())
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    let err = q.await_termination().err().unwrap();
    assert!(
        err.is(sluice::error::class::UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE),
        "{err}"
    );
    assert!(
        err.to_string().contains(
            "The CSV datasource doesn't support the column `s` of the type \"STRUCT<a: INT, b: STRING>\"."
        ),
        "{err}"
    );
}

/// An aggregation whose buffers hold lists and whose key is a struct, in update and complete
/// mode, restarted between batches: the results equal one run over all rows.
#[test]
fn aggregations_build_nested_values_in_state_across_restarts() {
    for mode in [OutputMode::Complete, OutputMode::Update] {
        let d = dirs();
        let run = || {
            let s = session();
            s.read_stream()
                .format("json")
                .schema(NESTED_SCHEMA)
                .unwrap()
                .load(d.input.display().to_string())
                .unwrap()
                .create_or_replace_temp_view("events")
                .unwrap();
            let q = s
                .sql(
                    "SELECT named_struct('parity', id % 2) AS key, \
                     array_sort(collect_list(s.b)) AS bs, array_sort(collect_set(arr[0])) AS firsts, \
                     count(*) AS n FROM events GROUP BY named_struct('parity', id % 2)",
                )
                .unwrap()
                .write_stream()
                .format("memory")
                .query_name("agg")
                .output_mode(mode)
                .option("checkpointLocation", d.checkpoint.display())
                .trigger(Trigger::AvailableNow)
                .start()
                .unwrap();
            q.await_termination().unwrap();
            let mut r = sql_rows(&s, "SELECT * FROM agg");
            r.sort();
            r
        };
        add_file(&d.input, "1.json", &nested_lines(0..3), 1);
        assert_eq!(
            run(),
            vec!["{0} | [x0, x2] | [0, 2] | 2", "{1} | [x1] | [1] | 1"],
            "{mode:?}"
        );
        add_file(&d.input, "2.json", &nested_lines(3..5), 2);
        let want: Vec<&str> = match mode {
            OutputMode::Complete => vec![
                "{0} | [x0, x2, x4] | [0, 2, 4] | 3",
                "{1} | [x1, x3] | [1, 3] | 2",
            ],
            _ => vec![
                "{0} | [x0, x2, x4] | [0, 2, 4] | 3",
                "{1} | [x1, x3] | [1, 3] | 2",
            ],
        };
        assert_eq!(run(), want, "{mode:?}");
    }
}

/// Deduplication keyed by a struct and a map-free nested column keeps its state across a
/// restart: a replayed duplicate is dropped.
#[test]
fn dedup_by_nested_columns_across_restarts() {
    let d = dirs();
    let run = || {
        let s = session();
        let q = s
            .read_stream()
            .format("json")
            .schema(NESTED_SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .drop_duplicates(["s", "tags"])
            .unwrap()
            .select(["id"])
            .unwrap()
            .write_stream()
            .format("memory")
            .query_name("dedup")
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        q.await_termination().unwrap();
        let mut r = sql_rows(&s, "SELECT * FROM dedup");
        r.sort();
        r
    };
    add_file(&d.input, "1.json", &nested_lines(0..2), 1);
    assert_eq!(run(), vec!["0", "1"]);
    // id 1 again (same s and tags) and a new id 2.
    add_file(
        &d.input,
        "2.json",
        &format!("{}{}", nested_lines(1..2), nested_lines(2..3)),
        2,
    );
    assert_eq!(run(), vec!["2"]);
}

#[test]
fn struct_names_its_fields_as_spark() {
    let s = session();
    s.sql("SELECT 1 AS x, 'a' AS y")
        .unwrap()
        .create_or_replace_temp_view("v")
        .unwrap();
    // Spark 3.5.7: struct(x, y) -> Row(x=1, y='a'), struct(x AS q) -> Row(q=1),
    // struct(1, 'a') -> Row(col1=1, col2='a').
    assert_eq!(
        sql_rows(
            &s,
            "SELECT to_json(struct(x, y)) AS a, to_json(struct(x AS q)) AS b, \
             to_json(struct(1, 'a')) AS c FROM v"
        ),
        vec![r#"{"x":1,"y":"a"} | {"q":1} | {"col1":1,"col2":"a"}"#]
    );
}

#[test]
fn grouping_by_a_map_is_refused_as_spark() {
    let s = session();
    // Spark 3.5.7: [GROUP_EXPRESSION_TYPE_IS_NOT_ORDERABLE] The expression "attributes" cannot
    // be used as a grouping expression because its data type "MAP<STRING, STRING>" is not an
    // orderable data type.
    s.sql("SELECT map(['k'], ['v']) AS attributes, 1 AS n")
        .unwrap()
        .create_or_replace_temp_view("m")
        .unwrap();
    let err = s
        .sql("SELECT attributes, count(*) FROM m GROUP BY attributes")
        .err()
        .unwrap();
    assert!(
        err.is(sluice::error::class::GROUP_EXPRESSION_TYPE_IS_NOT_ORDERABLE),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("data type \"MAP<STRING, STRING>\" is not an orderable data type"),
        "{err}"
    );
}

#[test]
fn the_console_layout_prints_nested_values_as_show() {
    let s = session();
    // Spark 3.5.7 show(): {1, a} | {1, [1, 2]} | {a -> 1, b -> 2} | [{1, x}] | [NULL, 1] | {a -> NULL}
    assert_eq!(
        sql_rows(
            &s,
            "SELECT named_struct('c1', 1, 'c2', 'a'), named_struct('x', 1, 'y', make_array(1, 2)), \
             map(['a', 'b'], [1, 2]), make_array(named_struct('a', 1, 'b', 'x')), \
             make_array(CAST(NULL AS INT), 1), map(['a'], [CAST(NULL AS INT)])"
        ),
        vec!["{1, a} | {1, [1, 2]} | {a -> 1, b -> 2} | [{1, x}] | [NULL, 1] | {a -> NULL}"]
    );
}

/// A restart whose aggregation key changes a nested field's type is refused with the state
/// schema error; the state of nested keys and list buffers reads back through `inspect`.
#[test]
fn nested_state_schema_changes_are_refused_and_nested_state_is_inspectable() {
    let d = dirs();
    let run = |key: &str| {
        let s = session();
        s.read_stream()
            .format("json")
            .schema(NESTED_SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .create_or_replace_temp_view("events")
            .unwrap();
        let q = s
            .sql(&format!(
                "SELECT {key} AS key, collect_list(s) AS ss, count(*) AS n FROM events GROUP BY {key}"
            ))
            .unwrap()
            .write_stream()
            .format("memory")
            .query_name("agg")
            .output_mode(OutputMode::Complete)
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        q.await_termination()
    };
    add_file(&d.input, "1.json", &nested_lines(0..3), 1);
    run("named_struct('parity', id % 2)").unwrap();
    let state = sluice::inspect::read_state(&d.checkpoint, 0, None).unwrap();
    assert_eq!(state.rows.num_rows(), 2);
    let table = state.to_table().unwrap();
    assert!(table.contains("parity"), "{table}");
    add_file(&d.input, "2.json", &nested_lines(3..4), 2);
    let err = run("named_struct('parity', CAST(id % 2 AS STRING))")
        .err()
        .unwrap();
    assert!(
        err.is(sluice::error::class::STATE_SCHEMA_INCOMPATIBLE),
        "{err}"
    );
}
