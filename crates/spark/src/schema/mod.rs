//! Spark DDL schema strings (`"event_time TIMESTAMP, user STRING, amount DOUBLE"`) to Arrow
//! schemas, and Arrow types back to Spark SQL type names for messages.
//!
//! Type mapping (case-insensitive, as in Spark's `StructType.fromDDL`):
//!
//! | Spark | Arrow |
//! |---|---|
//! | `STRING`, `VARCHAR(n)`, `CHAR(n)` | `Utf8` |
//! | `BOOLEAN` | `Boolean` |
//! | `TINYINT`/`BYTE`, `SMALLINT`/`SHORT`, `INT`/`INTEGER`, `BIGINT`/`LONG` | `Int8`..`Int64` |
//! | `FLOAT`/`REAL`, `DOUBLE` | `Float32`, `Float64` |
//! | `DECIMAL`/`DEC`/`NUMERIC` `[(p[, s])]` | `Decimal128(p, s)` (default `(10, 0)`) |
//! | `DATE` | `Date32` |
//! | `TIMESTAMP`, `TIMESTAMP_LTZ`, `TIMESTAMP_NTZ` | `Timestamp(Microsecond, None)` (UTC micros) |
//! | `BINARY` | `Binary` |
//!
//! One grammar, two entry points: [`parse_ddl_schema`] reads a schema string, and
//! [`parse_spark_type_name`] reads one type name as [`spark_type_name`] writes it (the names
//! recorded in a state schema file). Both hold nested `ARRAY<t>` (`List`, items nullable),
//! `STRUCT<name: t, ..>` (`Struct`; in DDL also `name t`, `NOT NULL` and `COMMENT '..'`) and
//! `MAP<k, v>` (`Map` with `entries: {key, value}`, values nullable), to any depth. Type names
//! also hold `VOID` (`Null`) and `<int> UNSIGNED`. Intervals are not supported in either.

use crate::error::class;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::{Result, SluiceError};

mod grammar;
#[cfg(test)]
mod tests;

use grammar::{Dialect, TypeParser};

/// Spark's maximum decimal precision.
pub const MAX_DECIMAL_PRECISION: u8 = 38;

/// Parses a Spark DDL schema string such as
/// `"event_time TIMESTAMP, user STRING NOT NULL, amount DECIMAL(10,2) COMMENT 'in EUR'"`.
///
/// Column names may be backquoted (`` `my col` ``, with ``` `` ``` for a literal backquote).
/// Every field is nullable unless it says `NOT NULL`. A bad string fails with the query error
/// class `class::INVALID_SCHEMA` naming the bad part. Nested `ARRAY<..>`, `STRUCT<..>` and
/// `MAP<.., ..>` columns are read as Spark's `StructType.fromDDL` reads them.
pub fn parse_ddl_schema(ddl: &str) -> Result<SchemaRef> {
    let mut p = TypeParser::new(ddl, Dialect::Ddl);
    let mut fields: Vec<Field> = Vec::new();
    p.skip_ws();
    if p.at_end() {
        return Err(invalid(
            ddl,
            "the schema is empty; give at least one `name TYPE` column",
        ));
    }
    loop {
        let field = p.parse_field()?;
        // Names equal ignoring case are Spark's COLUMN_ALREADY_EXISTS only while
        // spark.sql.caseSensitive=false: the session checks that (plan/names.rs).
        if fields.iter().any(|f| f.name() == field.name()) {
            return Err(invalid(
                ddl,
                format!("the column name `{}` appears twice", field.name()),
            ));
        }
        fields.push(field);
        p.skip_ws();
        if p.at_end() {
            break;
        }
        if p.eat(',') {
            p.skip_ws();
            if p.at_end() {
                return Err(invalid(ddl, "a trailing `,` is not followed by a column"));
            }
            continue;
        }
        return Err(invalid(
            ddl,
            format!(
                "unexpected `{}` at position {}; columns are separated by `,`",
                p.rest_excerpt(),
                p.pos
            ),
        ));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// Spark's `DataType.simpleString` of an Arrow type as Sluice maps types (one timestamp type,
/// `timestamp`; `Interval(MonthDayNano)` is Spark's calendar `interval`).
pub fn spark_simple_string(dt: &DataType) -> String {
    match dt {
        DataType::Null => "void".into(),
        DataType::Boolean => "boolean".into(),
        DataType::Int8 | DataType::UInt8 => "tinyint".into(),
        DataType::Int16 | DataType::UInt16 => "smallint".into(),
        DataType::Int32 | DataType::UInt32 => "int".into(),
        DataType::Int64 | DataType::UInt64 => "bigint".into(),
        DataType::Float16 | DataType::Float32 => "float".into(),
        DataType::Float64 => "double".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "string".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "binary".into(),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Timestamp(_, _) => "timestamp".into(),
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => format!("decimal({p},{s})"),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _) => format!("array<{}>", spark_simple_string(f.data_type())),
        DataType::Struct(fields) => format!(
            "struct<{}>",
            fields
                .iter()
                .map(|f| format!("{}:{}", f.name(), spark_simple_string(f.data_type())))
                .collect::<Vec<_>>()
                .join(",")
        ),
        DataType::Map(f, _) => match f.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "map<{},{}>",
                spark_simple_string(kv[0].data_type()),
                spark_simple_string(kv[1].data_type())
            ),
            other => format!("map<{}>", spark_simple_string(other)),
        },
        DataType::Duration(_) | DataType::Interval(arrow::datatypes::IntervalUnit::DayTime) => {
            "interval day to second".into()
        }
        DataType::Interval(arrow::datatypes::IntervalUnit::YearMonth) => {
            "interval year to month".into()
        }
        DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano) => "interval".into(),
        DataType::Dictionary(_, v) => spark_simple_string(v),
        DataType::RunEndEncoded(_, v) => spark_simple_string(v.data_type()),
        other => other.to_string().to_ascii_lowercase(),
    }
}

/// The Spark SQL name of an Arrow type, for messages (`INT`, `STRING`, `DECIMAL(10,2)`, ...).
pub fn spark_type_name(dt: &DataType) -> String {
    match dt {
        DataType::Null => "VOID".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "TINYINT UNSIGNED".into(),
        DataType::UInt16 => "SMALLINT UNSIGNED".into(),
        DataType::UInt32 => "INT UNSIGNED".into(),
        DataType::UInt64 => "BIGINT UNSIGNED".into(),
        DataType::Float16 | DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "STRING".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "BINARY".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Timestamp(_, _) => "TIMESTAMP".into(),
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => format!("DECIMAL({p},{s})"),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("DECIMAL({p},{s})"),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _) => format!("ARRAY<{}>", spark_type_name(f.data_type())),
        DataType::Struct(fields) => {
            let inner: Vec<String> = fields
                .iter()
                .map(|f| {
                    format!(
                        "{}: {}",
                        quote_name(f.name()),
                        spark_type_name(f.data_type())
                    )
                })
                .collect();
            format!("STRUCT<{}>", inner.join(", "))
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "MAP<{}, {}>",
                spark_type_name(kv[0].data_type()),
                spark_type_name(kv[1].data_type())
            ),
            other => format!("MAP<{}>", spark_type_name(other)),
        },
        DataType::Interval(_) => "INTERVAL".into(),
        DataType::Duration(_) => "INTERVAL DAY TO SECOND".into(),
        DataType::Dictionary(_, v) => spark_type_name(v),
        other => other.to_string().to_ascii_uppercase(),
    }
}

/// The DDL string of a schema (`a INT, b STRING NOT NULL`), the inverse of [`parse_ddl_schema`]
/// for the supported types.
pub fn schema_to_ddl(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| {
            let mut s = format!(
                "{} {}",
                quote_name(f.name()),
                spark_type_name(f.data_type())
            );
            if !f.is_nullable() {
                s.push_str(" NOT NULL");
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A column name as written in DDL: bare if it is a simple identifier, else backquoted.
fn quote_name(name: &str) -> String {
    let simple = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if simple {
        name.to_string()
    } else {
        format!("`{}`", name.replace('`', "``"))
    }
}

fn invalid(ddl: &str, msg: impl std::fmt::Display) -> SluiceError {
    SluiceError::query(
        class::INVALID_SCHEMA,
        format!("cannot parse the schema string {ddl:?}: {msg}"),
    )
}

/// An Arrow type from a Spark type name as [`spark_type_name`] writes it (the names recorded in
/// a state schema file): scalars as in DDL, `<TINYINT|SMALLINT|INT|BIGINT> UNSIGNED`, `VOID`,
/// and the nested `ARRAY<t>`, `STRUCT<name: t, ..>` (names bare or backquoted) and
/// `MAP<k, v>`. Timestamps are microseconds without a time zone.
///
/// The same grammar as [`parse_ddl_schema`], which refuses what only type names may hold.
/// A bad name fails with `class::INVALID_SCHEMA` naming the bad part.
pub fn parse_spark_type_name(name: &str) -> Result<DataType> {
    let mut p = TypeParser::new(name, Dialect::TypeName);
    p.skip_ws();
    let t = p.parse_type("")?;
    p.skip_ws();
    if !p.at_end() {
        return Err(p.invalid(format!(
            "unexpected `{}` at position {} after the type",
            p.rest_excerpt(),
            p.pos
        )));
    }
    Ok(t)
}

/// A Spark DDL type string as `from_json` reads its schema argument (Spark's
/// `DataType.fromDDL`): one type (`ARRAY<INT>`, `MAP<STRING, INT>`, `STRUCT<a: INT>`), else a
/// schema string (`a INT, b STRING`), which is a `STRUCT` of its columns.
pub fn parse_ddl_type(ddl: &str) -> Result<DataType> {
    let mut p = TypeParser::new(ddl, Dialect::Ddl);
    p.skip_ws();
    if let Ok(t) = p.parse_type("") {
        p.skip_ws();
        if p.at_end() {
            return Ok(t);
        }
    }
    Ok(DataType::Struct(parse_ddl_schema(ddl)?.fields().clone()))
}
