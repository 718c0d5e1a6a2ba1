//! Spark Connect's `DataType` and Arrow's, both ways, and the schema strings a client sends
//! (`readStream.schema(..)`, `createDataFrame(.., schema)`): a Spark DDL string or Spark's
//! `StructType.json()`.
//!
//! Sluice has one timestamp type, `Timestamp(Microsecond, None)` holding UTC micros, which is
//! Spark's `timestamp` (what `TIMESTAMP` in DDL means); a zoned Arrow timestamp is `timestamp`
//! too, and Spark's `timestamp_ntz` reads as Sluice's one timestamp type.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, IntervalUnit, Schema, SchemaRef, TimeUnit};
use serde_json::Value;

use crate::error::{ConnectError, Result};
use crate::proto;
use crate::proto::data_type::{self as dt, Kind};

/// Spark's type of an Arrow type.
pub fn to_proto(t: &DataType) -> Result<proto::DataType> {
    let kind = match t {
        DataType::Null => Kind::Null(dt::Null::default()),
        DataType::Boolean => Kind::Boolean(dt::Boolean::default()),
        DataType::Int8 => Kind::Byte(dt::Byte::default()),
        DataType::Int16 | DataType::UInt8 => Kind::Short(dt::Short::default()),
        DataType::Int32 | DataType::UInt16 => Kind::Integer(dt::Integer::default()),
        DataType::Int64 | DataType::UInt32 => Kind::Long(dt::Long::default()),
        DataType::UInt64 => Kind::Decimal(dt::Decimal {
            precision: Some(20),
            scale: Some(0),
            type_variation_reference: 0,
        }),
        DataType::Float16 | DataType::Float32 => Kind::Float(dt::Float::default()),
        DataType::Float64 => Kind::Double(dt::Double::default()),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            Kind::String(dt::String::default())
        }
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => Kind::Binary(dt::Binary::default()),
        DataType::Date32 | DataType::Date64 => Kind::Date(dt::Date::default()),
        DataType::Timestamp(_, _) => Kind::Timestamp(dt::Timestamp::default()),
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => Kind::Decimal(dt::Decimal {
            precision: Some(i32::from(*p)),
            scale: Some(i32::from(*s)),
            type_variation_reference: 0,
        }),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _) => Kind::Array(Box::new(dt::Array {
            element_type: Some(Box::new(to_proto(f.data_type())?)),
            contains_null: f.is_nullable(),
            type_variation_reference: 0,
        })),
        DataType::Struct(fields) => Kind::Struct(struct_of(fields)?),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => Kind::Map(Box::new(dt::Map {
                key_type: Some(Box::new(to_proto(kv[0].data_type())?)),
                value_type: Some(Box::new(to_proto(kv[1].data_type())?)),
                value_contains_null: kv[1].is_nullable(),
                type_variation_reference: 0,
            })),
            other => {
                return Err(ConnectError::not_supported(format!(
                    "the Arrow map type with entries {other}"
                )))
            }
        },
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            Kind::CalendarInterval(dt::CalendarInterval::default())
        }
        DataType::Interval(IntervalUnit::YearMonth) => {
            Kind::YearMonthInterval(dt::YearMonthInterval {
                start_field: Some(0),
                end_field: Some(1),
                type_variation_reference: 0,
            })
        }
        DataType::Interval(IntervalUnit::DayTime) | DataType::Duration(_) => {
            Kind::DayTimeInterval(dt::DayTimeInterval {
                start_field: Some(0),
                end_field: Some(3),
                type_variation_reference: 0,
            })
        }
        DataType::Dictionary(_, v) => return to_proto(v),
        DataType::RunEndEncoded(_, v) => return to_proto(v.data_type()),
        other => {
            return Err(ConnectError::not_supported(format!(
                "the Arrow type {other} as a Spark type"
            )))
        }
    };
    Ok(proto::DataType { kind: Some(kind) })
}

fn struct_of(fields: &Fields) -> Result<dt::Struct> {
    Ok(dt::Struct {
        fields: fields
            .iter()
            .map(|f| {
                Ok(dt::StructField {
                    name: f.name().clone(),
                    data_type: Some(to_proto(f.data_type())?),
                    nullable: f.is_nullable(),
                    metadata: None,
                })
            })
            .collect::<Result<_>>()?,
        type_variation_reference: 0,
    })
}

/// A schema as Spark's `StructType` (what `AnalyzePlanResponse.schema` carries).
pub fn schema_to_proto(schema: &Schema) -> Result<proto::DataType> {
    Ok(proto::DataType {
        kind: Some(Kind::Struct(struct_of(schema.fields())?)),
    })
}

/// The Arrow type of a Spark type.
pub fn from_proto(t: &proto::DataType) -> Result<DataType> {
    let kind = t
        .kind
        .as_ref()
        .ok_or_else(|| ConnectError::illegal_argument("a DataType without its kind was sent"))?;
    Ok(match kind {
        Kind::Null(_) => DataType::Null,
        Kind::Binary(_) => DataType::Binary,
        Kind::Boolean(_) => DataType::Boolean,
        Kind::Byte(_) => DataType::Int8,
        Kind::Short(_) => DataType::Int16,
        Kind::Integer(_) => DataType::Int32,
        Kind::Long(_) => DataType::Int64,
        Kind::Float(_) => DataType::Float32,
        Kind::Double(_) => DataType::Float64,
        Kind::Decimal(d) => decimal(d.precision.unwrap_or(10), d.scale.unwrap_or(0))?,
        Kind::String(_) | Kind::Char(_) | Kind::VarChar(_) => DataType::Utf8,
        Kind::Date(_) => DataType::Date32,
        Kind::Timestamp(_) | Kind::TimestampNtz(_) => {
            DataType::Timestamp(TimeUnit::Microsecond, None)
        }
        Kind::CalendarInterval(_) => DataType::Interval(IntervalUnit::MonthDayNano),
        Kind::YearMonthInterval(_) => DataType::Interval(IntervalUnit::YearMonth),
        Kind::DayTimeInterval(_) => DataType::Duration(TimeUnit::Microsecond),
        Kind::Array(a) => {
            let e = a.element_type.as_deref().ok_or_else(|| {
                ConnectError::illegal_argument("an array type without its element type")
            })?;
            DataType::new_list(from_proto(e)?, a.contains_null)
        }
        Kind::Struct(s) => DataType::Struct(
            s.fields
                .iter()
                .map(|f| {
                    let t = f.data_type.as_ref().ok_or_else(|| {
                        ConnectError::illegal_argument(format!(
                            "the struct field {} has no type",
                            f.name
                        ))
                    })?;
                    Ok(Field::new(&f.name, from_proto(t)?, f.nullable))
                })
                .collect::<Result<Fields>>()?,
        ),
        Kind::Map(m) => {
            let (Some(k), Some(v)) = (m.key_type.as_deref(), m.value_type.as_deref()) else {
                return Err(ConnectError::illegal_argument(
                    "a map type without its key or value type",
                ));
            };
            map_type(from_proto(k)?, from_proto(v)?, m.value_contains_null)
        }
        Kind::Unparsed(u) => parse_type_text(&u.data_type_string)?,
        Kind::Udt(u) => match u.sql_type.as_deref() {
            Some(t) => from_proto(t)?,
            None => return Err(ConnectError::not_supported(format!("the UDT {}", u.r#type))),
        },
        Kind::Variant(_) => return Err(ConnectError::not_supported("the variant type")),
        Kind::Geometry(_) => return Err(ConnectError::not_supported("the geometry type")),
        Kind::Geography(_) => return Err(ConnectError::not_supported("the geography type")),
        Kind::Time(_) => return Err(ConnectError::not_supported("the time type")),
        Kind::TimestampNtzNanos(_) | Kind::TimestampLtzNanos(_) => {
            return Err(ConnectError::not_supported("nanosecond timestamp types"))
        }
    })
}

fn decimal(p: i32, s: i32) -> Result<DataType> {
    match (u8::try_from(p), i8::try_from(s)) {
        (Ok(p), Ok(s)) if (1..=38).contains(&p) && s >= 0 && i32::from(s) <= i32::from(p) => {
            Ok(DataType::Decimal128(p, s))
        }
        _ => Err(ConnectError::illegal_argument(format!(
            "decimal({p},{s}) is not a valid decimal type: the precision is 1 to 38 and the \
             scale 0 to the precision"
        ))),
    }
}

fn map_type(k: DataType, v: DataType, value_nullable: bool) -> DataType {
    DataType::Map(
        Arc::new(Field::new_struct(
            "entries",
            vec![
                Field::new("key", k, false),
                Field::new("value", v, value_nullable),
            ],
            false,
        )),
        false,
    )
}

/// A type as text: a DDL type (`int`, `array<string>`, `decimal(10,2)`) or Spark's type JSON.
pub fn parse_type_text(text: &str) -> Result<DataType> {
    let t = text.trim();
    if t.starts_with('{') || t.starts_with('"') {
        let v: Value = serde_json::from_str(t).map_err(|e| {
            ConnectError::illegal_argument(format!("the type JSON {t:?} is unreadable: {e}"))
        })?;
        return json_type(&v);
    }
    Ok(sluice::schema::parse_ddl_type(t)?)
}

/// A schema the client sent: a Spark DDL string (`"ts TIMESTAMP, user STRING"`) or Spark's
/// `StructType.json()` (`{"type":"struct","fields":[..]}`).
pub fn parse_schema(text: &str) -> Result<SchemaRef> {
    let t = text.trim();
    if t.starts_with('{') {
        let v: Value = serde_json::from_str(t).map_err(|e| {
            ConnectError::illegal_argument(format!("the schema JSON {t:?} is unreadable: {e}"))
        })?;
        return match json_type(&v)? {
            DataType::Struct(fields) => Ok(Arc::new(Schema::new(fields))),
            other => Err(ConnectError::illegal_argument(format!(
                "a schema must be a struct type, got {other} in {t:?}"
            ))),
        };
    }
    match sluice::schema::parse_ddl_schema(t) {
        Ok(s) => Ok(s),
        // `struct<a: int>` is a schema too, as Spark's `_parse_datatype_string` has it.
        Err(e) => match sluice::schema::parse_ddl_type(t) {
            Ok(DataType::Struct(fields)) => Ok(Arc::new(Schema::new(fields))),
            _ => Err(e.into()),
        },
    }
}

/// An Arrow type of Spark's type JSON (`DataType.jsonValue`).
fn json_type(v: &Value) -> Result<DataType> {
    let bad = |what: &str| {
        ConnectError::illegal_argument(format!("the type JSON {v} is not a Spark type: {what}"))
    };
    match v {
        Value::String(name) => simple_json_type(name),
        Value::Object(o) => {
            let ty = o
                .get("type")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("no \"type\""))?;
            match ty {
                "struct" => {
                    let fields = o
                        .get("fields")
                        .and_then(Value::as_array)
                        .ok_or_else(|| bad("a struct without \"fields\""))?;
                    let fields = fields
                        .iter()
                        .map(|f| {
                            let name = f
                                .get("name")
                                .and_then(Value::as_str)
                                .ok_or_else(|| bad("a field without \"name\""))?;
                            let t = json_type(
                                f.get("type")
                                    .ok_or_else(|| bad("a field without \"type\""))?,
                            )?;
                            let nullable =
                                f.get("nullable").and_then(Value::as_bool).unwrap_or(true);
                            Ok(Field::new(name, t, nullable))
                        })
                        .collect::<Result<Fields>>()?;
                    Ok(DataType::Struct(fields))
                }
                "array" => {
                    let e = json_type(
                        o.get("elementType")
                            .ok_or_else(|| bad("no \"elementType\""))?,
                    )?;
                    let n = o
                        .get("containsNull")
                        .and_then(Value::as_bool)
                        .unwrap_or(true);
                    Ok(DataType::new_list(e, n))
                }
                "map" => {
                    let k = json_type(o.get("keyType").ok_or_else(|| bad("no \"keyType\""))?)?;
                    let val =
                        json_type(o.get("valueType").ok_or_else(|| bad("no \"valueType\""))?)?;
                    let n = o
                        .get("valueContainsNull")
                        .and_then(Value::as_bool)
                        .unwrap_or(true);
                    Ok(map_type(k, val, n))
                }
                "udt" => match o.get("sqlType") {
                    Some(t) => json_type(t),
                    None => Err(bad("a UDT without \"sqlType\"")),
                },
                other => simple_json_type(other),
            }
        }
        _ => Err(bad("neither a name nor an object")),
    }
}

fn simple_json_type(name: &str) -> Result<DataType> {
    let n = name.trim().to_ascii_lowercase();
    Ok(match n.as_str() {
        "null" | "void" => DataType::Null,
        "string" => DataType::Utf8,
        "integer" => DataType::Int32,
        "long" => DataType::Int64,
        "short" => DataType::Int16,
        "byte" => DataType::Int8,
        "float" => DataType::Float32,
        "double" => DataType::Float64,
        "boolean" => DataType::Boolean,
        "binary" => DataType::Binary,
        "date" => DataType::Date32,
        "timestamp" | "timestamp_ntz" | "timestamp_ltz" => {
            DataType::Timestamp(TimeUnit::Microsecond, None)
        }
        "decimal" => DataType::Decimal128(10, 0),
        "interval" | "calendarinterval" => DataType::Interval(IntervalUnit::MonthDayNano),
        s if s.starts_with("interval year") || s.starts_with("interval month") => {
            DataType::Interval(IntervalUnit::YearMonth)
        }
        s if s.starts_with("interval ") => DataType::Duration(TimeUnit::Microsecond),
        s if s.starts_with("decimal(") && s.ends_with(')') => {
            let inner = &s["decimal(".len()..s.len() - 1];
            let mut parts = inner.split(',').map(|p| p.trim().parse::<i32>());
            match (parts.next(), parts.next(), parts.next()) {
                (Some(Ok(p)), Some(Ok(sc)), None) => decimal(p, sc)?,
                (Some(Ok(p)), None, None) => decimal(p, 0)?,
                _ => {
                    return Err(ConnectError::illegal_argument(format!(
                        "{name:?} is not a decimal type: write decimal(precision,scale)"
                    )))
                }
            }
        }
        s if (s.starts_with("char(") || s.starts_with("varchar(")) && s.ends_with(')') => {
            DataType::Utf8
        }
        _ => {
            return Err(ConnectError::illegal_argument(format!(
                "{name:?} is not a Spark type name (string, integer, long, double, timestamp, ..)"
            )))
        }
    })
}

/// The Spark SQL name of an Arrow type as Spark shows it (`INT`, `ARRAY<STRING>`), for names.
pub(crate) fn sql_type_name(t: &DataType) -> Result<String> {
    Ok(match t {
        DataType::Null => "VOID".into(),
        DataType::Interval(IntervalUnit::MonthDayNano) => "INTERVAL".into(),
        DataType::Interval(IntervalUnit::YearMonth) => "INTERVAL YEAR TO MONTH".into(),
        DataType::Duration(_) | DataType::Interval(IntervalUnit::DayTime) => {
            "INTERVAL DAY TO SECOND".into()
        }
        other => sluice::schema::spark_type_name(other),
    })
}

/// The SQL text of an Arrow type for `CAST(.. AS <type>)` in Sluice's SQL: its timestamps as
/// `TIMESTAMP_NTZ`, the spelling that plans to Sluice's one timestamp type (microseconds).
pub(crate) fn sql_type_text(t: &DataType) -> Result<String> {
    Ok(match t {
        DataType::Timestamp(_, _) => "TIMESTAMP_NTZ".into(),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("ARRAY<{}>", sql_type_text(f.data_type())?)
        }
        DataType::Struct(fields) => {
            let inner = fields
                .iter()
                .map(|f| {
                    Ok(format!(
                        "{}: {}",
                        super::expr::quote(f.name()),
                        sql_type_text(f.data_type())?
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            format!("STRUCT<{}>", inner.join(", "))
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "MAP<{}, {}>",
                sql_type_text(kv[0].data_type())?,
                sql_type_text(kv[1].data_type())?
            ),
            _ => sql_type_name(t)?,
        },
        other => sql_type_name(other)?,
    })
}

/// Spark's `DataType.typeName` (the names `printSchema` shows: `integer`, `long`, `struct`).
fn type_name(t: &DataType) -> String {
    match t {
        DataType::Null => "void".into(),
        DataType::Boolean => "boolean".into(),
        DataType::Int8 => "byte".into(),
        DataType::Int16 | DataType::UInt8 => "short".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 => "long".into(),
        DataType::UInt64 => "decimal(20,0)".into(),
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
        DataType::List(_)
        | DataType::LargeList(_)
        | DataType::ListView(_)
        | DataType::LargeListView(_)
        | DataType::FixedSizeList(_, _) => "array".into(),
        DataType::Struct(_) => "struct".into(),
        DataType::Map(_, _) => "map".into(),
        DataType::Interval(IntervalUnit::MonthDayNano) => "interval".into(),
        DataType::Interval(IntervalUnit::YearMonth) => "interval year to month".into(),
        DataType::Interval(IntervalUnit::DayTime) | DataType::Duration(_) => {
            "interval day to second".into()
        }
        DataType::Dictionary(_, v) => type_name(v),
        DataType::RunEndEncoded(_, v) => type_name(v.data_type()),
        other => other.to_string().to_ascii_lowercase(),
    }
}

/// Spark's `StructType.treeString(level)`, what `df.printSchema()` prints
/// (`AnalyzePlanRequest.TreeString`): `root`, then ` |-- name: type (nullable = true)` per
/// field, nested types indented below their field; `level` limits the depth.
pub fn tree_string(schema: &Schema, level: Option<usize>) -> String {
    let depth = level.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let mut out = String::from("root\n");
    for f in schema.fields() {
        field_tree(
            &mut out,
            " |",
            f.name(),
            f.data_type(),
            f.is_nullable(),
            depth,
        );
    }
    out
}

fn field_tree(
    out: &mut String,
    prefix: &str,
    name: &str,
    t: &DataType,
    nullable: bool,
    depth: usize,
) {
    if depth == 0 {
        return;
    }
    out.push_str(&format!(
        "{prefix}-- {}: {} (nullable = {nullable})\n",
        name.replace('\n', "\\n"),
        type_name(t)
    ));
    nested_tree(out, &format!("{prefix}    |"), t, depth);
}

fn nested_tree(out: &mut String, prefix: &str, t: &DataType, depth: usize) {
    let depth = depth - 1;
    if depth == 0 {
        return;
    }
    match t {
        DataType::Struct(fields) => {
            for f in fields {
                field_tree(out, prefix, f.name(), f.data_type(), f.is_nullable(), depth);
            }
        }
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            out.push_str(&format!(
                "{prefix}-- element: {} (containsNull = {})\n",
                type_name(f.data_type()),
                f.is_nullable()
            ));
            nested_tree(out, &format!("{prefix}    |"), f.data_type(), depth);
        }
        DataType::Map(entries, _) => {
            if let DataType::Struct(kv) = entries.data_type() {
                if kv.len() == 2 {
                    out.push_str(&format!(
                        "{prefix}-- key: {}\n",
                        type_name(kv[0].data_type())
                    ));
                    nested_tree(out, &format!("{prefix}    |"), kv[0].data_type(), depth);
                    out.push_str(&format!(
                        "{prefix}-- value: {} (valueContainsNull = {})\n",
                        type_name(kv[1].data_type()),
                        kv[1].is_nullable()
                    ));
                    nested_tree(out, &format!("{prefix}    |"), kv[1].data_type(), depth);
                }
            }
        }
        _ => {}
    }
}
