//! Tests of the DDL and type-name grammar.

use super::*;
use crate::error::Fault;
use arrow::datatypes::TimeUnit;

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, None)
}

#[test]
fn parses_the_usual_schema() {
    let s = parse_ddl_schema("event_time TIMESTAMP, user STRING, action STRING, amount DOUBLE")
        .unwrap();
    assert_eq!(s.fields().len(), 4);
    assert_eq!(s.field(0).name(), "event_time");
    assert_eq!(s.field(0).data_type(), &ts());
    assert_eq!(s.field(1).data_type(), &DataType::Utf8);
    assert_eq!(s.field(3).data_type(), &DataType::Float64);
    assert!(s.fields().iter().all(|f| f.is_nullable()));
}

#[test]
fn all_types_case_insensitive() {
    let s = parse_ddl_schema(
        "a string, b varchar(10), c Char(3), d boolean, e tinyint, f byte, g smallint, \
         h short, i int, j integer, k bigint, l long, m float, n real, o double, \
         p decimal, q decimal(12), r DECIMAL( 5 , 2 ), s date, t timestamp, \
         u timestamp_ntz, v binary, w numeric(38,38)",
    )
    .unwrap();
    let types: Vec<DataType> = s.fields().iter().map(|f| f.data_type().clone()).collect();
    assert_eq!(
        types,
        vec![
            DataType::Utf8,
            DataType::Utf8,
            DataType::Utf8,
            DataType::Boolean,
            DataType::Int8,
            DataType::Int8,
            DataType::Int16,
            DataType::Int16,
            DataType::Int32,
            DataType::Int32,
            DataType::Int64,
            DataType::Int64,
            DataType::Float32,
            DataType::Float32,
            DataType::Float64,
            DataType::Decimal128(10, 0),
            DataType::Decimal128(12, 0),
            DataType::Decimal128(5, 2),
            DataType::Date32,
            ts(),
            ts(),
            DataType::Binary,
            DataType::Decimal128(38, 38),
        ]
    );
}

#[test]
fn backquotes_not_null_and_comments() {
    let s = parse_ddl_schema(
        "`my col` INT NOT NULL COMMENT 'the id', `we``ird` STRING COMMENT \"x, y\", z DATE",
    )
    .unwrap();
    assert_eq!(s.field(0).name(), "my col");
    assert!(!s.field(0).is_nullable());
    assert_eq!(s.field(1).name(), "we`ird");
    assert!(s.field(1).is_nullable());
    assert_eq!(s.field(2).data_type(), &DataType::Date32);
}

#[test]
fn bad_strings_name_the_bad_part() {
    for (ddl, needle) in [
        ("a INT, b FOO", "FOO"),
        ("a", "no type"),
        ("a INT,", "trailing"),
        ("a INT b STRING", "b STRING"),
        ("a DECIMAL(40,2)", "precision 40"),
        ("a DECIMAL(5,6)", "scale"),
        ("a INT, a STRING", "twice"),
        ("", "empty"),
        ("`a INT", "not closed"),
        ("a INT NOT", "NULL"),
        ("a VARCHAR", "length"),
    ] {
        let err = parse_ddl_schema(ddl).unwrap_err();
        assert_eq!(err.class(), "INVALID_SCHEMA", "{ddl}");
        assert_eq!(err.fault(), Fault::Query);
        assert!(err.message().contains(needle), "{ddl}: {}", err.message());
    }
}

/// Nested DDL as Spark 3.5 reads it; the expected strings are Spark's
/// `StructType.fromDDL(ddl).sql()` (struct fields lose `NOT NULL` and comments there).
#[test]
fn nested_ddl_schemas_parse_as_spark_reads_them() {
    for (ddl, spark_sql) in [
        (
            "a STRUCT<x: INT, y: ARRAY<STRING>>, m MAP<STRING,BIGINT>",
            "STRUCT<a: STRUCT<x: INT, y: ARRAY<STRING>>, m: MAP<STRING, BIGINT>>",
        ),
        ("a struct<x int>", "STRUCT<a: STRUCT<x: INT>>"),
        (
            "a STRUCT<x: INT NOT NULL COMMENT 'c', `y z`: STRING>",
            "STRUCT<a: STRUCT<x: INT, `y z`: STRING>>",
        ),
        (
            "a ARRAY<STRUCT<x: INT>>",
            "STRUCT<a: ARRAY<STRUCT<x: INT>>>",
        ),
        (
            "a ARRAY<ARRAY<MAP<STRING,ARRAY<INT>>>>",
            "STRUCT<a: ARRAY<ARRAY<MAP<STRING, ARRAY<INT>>>>>",
        ),
        (
            "a MAP<STRUCT<x:INT>, INT>",
            "STRUCT<a: MAP<STRUCT<x: INT>, INT>>",
        ),
        ("a STRUCT<>", "STRUCT<a: STRUCT<>>"),
        (
            "a STRUCT<x INT, X INT>",
            "STRUCT<a: STRUCT<x: INT, X: INT>>",
        ),
    ] {
        let s = parse_ddl_schema(ddl).unwrap_or_else(|e| panic!("{ddl}: {e}"));
        let t = DataType::Struct(s.fields().clone());
        assert_eq!(spark_type_name(&t), spark_sql, "{ddl}");
        // What the DDL printer writes parses back to the same types.
        let back = parse_ddl_schema(&schema_to_ddl(&s)).unwrap();
        assert_eq!(
            spark_type_name(&DataType::Struct(back.fields().clone())),
            spark_sql,
            "{ddl}"
        );
    }
    let s = parse_ddl_schema("a STRUCT<x: INT NOT NULL, y INT> NOT NULL").unwrap();
    let DataType::Struct(fs) = s.field(0).data_type() else {
        panic!("not a struct")
    };
    assert!(!s.field(0).is_nullable());
    assert!(!fs[0].is_nullable());
    assert!(fs[1].is_nullable());
    // Spark refuses these too.
    for bad in ["a ARRAY<INT NOT NULL>", "a ARRAY<INT", "a MAP<INT>"] {
        let err = parse_ddl_schema(bad).unwrap_err();
        assert_eq!(err.class(), class::INVALID_SCHEMA, "{bad}: {err}");
    }
}

#[test]
fn type_names_round_trip() {
    let ddl = "a STRING, b BOOLEAN, c TINYINT, d SMALLINT, e INT, f BIGINT, g FLOAT, \
               h DOUBLE, i DECIMAL(7,3), j DATE, k TIMESTAMP, l BINARY NOT NULL, `m n` INT";
    let s = parse_ddl_schema(ddl).unwrap();
    assert_eq!(
        schema_to_ddl(&s),
        ddl.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    assert_eq!(spark_type_name(&DataType::Int32), "INT");
    assert_eq!(
        spark_type_name(&DataType::Decimal128(10, 2)),
        "DECIMAL(10,2)"
    );
    assert_eq!(
        spark_type_name(&DataType::List(Arc::new(Field::new(
            "item",
            DataType::Utf8,
            true
        )))),
        "ARRAY<STRING>"
    );
}

#[test]
fn type_names_and_ddl_parse_nested_types() {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
    let window = DataType::Struct(
        vec![
            Field::new("start", ts.clone(), true),
            Field::new("end", ts.clone(), true),
        ]
        .into(),
    );
    let map = |k: DataType, v: DataType| {
        DataType::Map(
            Arc::new(Field::new_struct(
                "entries",
                vec![Field::new("key", k, false), Field::new("value", v, true)],
                false,
            )),
            false,
        )
    };
    for (name, t) in [
        ("STRUCT<start: TIMESTAMP, end: TIMESTAMP>", window.clone()),
        (
            " array < struct<start:timestamp,end:timestamp> > ",
            DataType::new_list(window.clone(), true),
        ),
        (
            "MAP<STRING, ARRAY<BIGINT>>",
            map(DataType::Utf8, DataType::new_list(DataType::Int64, true)),
        ),
        ("STRUCT<>", DataType::Struct(Vec::<Field>::new().into())),
        (
            "STRUCT<`a``b`: INT, ``: VOID>",
            DataType::Struct(
                vec![
                    Field::new("a`b", DataType::Int32, true),
                    Field::new("", DataType::Null, true),
                ]
                .into(),
            ),
        ),
        ("TINYINT UNSIGNED", DataType::UInt8),
        ("smallint unsigned", DataType::UInt16),
        ("INT UNSIGNED", DataType::UInt32),
        ("DECIMAL(38, 10)", DataType::Decimal128(38, 10)),
    ] {
        assert_eq!(parse_spark_type_name(name).unwrap(), t, "{name}");
        // What spark_type_name writes parses back to the same type.
        assert_eq!(
            parse_spark_type_name(&spark_type_name(&t)).unwrap(),
            t,
            "{name}"
        );
    }
    // The DDL entry point reads nested types too (and keeps refusing VOID, UNSIGNED).
    for (ddl, t) in [
        ("a ARRAY<INT>", DataType::new_list(DataType::Int32, true)),
        ("a STRUCT<start: TIMESTAMP, end: TIMESTAMP>", window.clone()),
    ] {
        assert_eq!(parse_ddl_schema(ddl).unwrap().field(0).data_type(), &t);
    }
    assert_eq!(
        parse_ddl_schema("a VOID").unwrap_err().fault(),
        Fault::NotSupportedYet
    );
    assert_eq!(
        parse_ddl_schema("a INT UNSIGNED").unwrap_err().class(),
        "INVALID_SCHEMA"
    );
    // Errors name the type name and the bad part.
    for (name, needle) in [
        ("ARRAY<INT", "expected `>`"),
        ("STRUCT<a INT>", "expected `:`"),
        ("MAP<INT>", "expected `,`"),
        (
            "STRUCT<a: NOPE>",
            "struct field `a` has the unknown type `NOPE`",
        ),
        ("DECIMAL(40, 2)", "precision 40"),
        ("INT INT", "unexpected `INT`"),
        ("", "expected a type"),
    ] {
        let err = parse_spark_type_name(name).unwrap_err();
        assert_eq!(err.class(), "INVALID_SCHEMA", "{name}");
        assert!(err.message().contains(needle), "{name}: {err}");
        assert!(
            err.message().contains(&format!("{name:?}")),
            "{name}: {err}"
        );
    }
}

#[test]
fn spark_type_names_rebuild_arrow_types() {
    use arrow::datatypes::Fields;
    let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
    assert_eq!(parse_spark_type_name("BIGINT").unwrap(), DataType::Int64);
    assert_eq!(
        parse_spark_type_name("BIGINT UNSIGNED").unwrap(),
        DataType::UInt64
    );
    assert_eq!(parse_spark_type_name("string").unwrap(), DataType::Utf8);
    assert_eq!(
        parse_spark_type_name("DECIMAL(10,2)").unwrap(),
        DataType::Decimal128(10, 2)
    );
    assert_eq!(
        parse_spark_type_name("STRUCT<start: TIMESTAMP, `the end`: TIMESTAMP>").unwrap(),
        DataType::Struct(Fields::from(vec![
            Field::new("start", ts.clone(), true),
            Field::new("the end", ts, true),
        ]))
    );
    assert_eq!(
        parse_spark_type_name("ARRAY<INT>").unwrap(),
        DataType::new_list(DataType::Int32, true)
    );
    // Every name the engine writes for the supported types parses back to a type that
    // spark_type_name names the same way.
    for t in [
        DataType::Int8,
        DataType::UInt32,
        DataType::Float64,
        DataType::Boolean,
        DataType::Date32,
        DataType::Binary,
        DataType::Decimal128(7, 3),
    ] {
        let name = spark_type_name(&t);
        assert_eq!(
            spark_type_name(&parse_spark_type_name(&name).unwrap()),
            name
        );
    }
    for bad in ["", "STRUCT<a INT>", "INT INT", "NOPE", "ARRAY<INT"] {
        assert!(parse_spark_type_name(bad).is_err(), "{bad}");
    }
}
