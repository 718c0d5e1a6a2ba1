//! Nested values (`STRUCT`, `ARRAY`, `MAP`) of the text readers: one value tree per cell,
//! built into an Arrow array of the column's type when the batch is finished.
//!
//! The tree holds already converted scalars (the same kinds as [`Cell`]); a JSON map's keys
//! are strings (the JSON source admits only `MAP<STRING, ..>`, as Spark does). The column's
//! type decides the array built: a value of the wrong shape for its type (a bug in a reader)
//! becomes null rather than a panic.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array,
    Int16Array, Int32Array, Int64Array, Int8Array, ListArray, MapArray, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, Fields, TimeUnit};

use super::Cell;
use crate::error::{Result, SluiceError};
use crate::schema::spark_type_name;

/// One nested (or scalar, inside a nested) value.
#[derive(Debug, Clone, PartialEq)]
pub enum Nested {
    /// A null.
    Null,
    /// A BOOLEAN.
    Bool(bool),
    /// Any integer type.
    Int(i64),
    /// A FLOAT.
    F32(f32),
    /// A DOUBLE.
    F64(f64),
    /// A DECIMAL's unscaled value.
    Dec(i128),
    /// A DATE: days since the epoch.
    Date(i32),
    /// A TIMESTAMP: microseconds since the epoch.
    Ts(i64),
    /// A STRING.
    Str(String),
    /// An array's elements.
    List(Vec<Nested>),
    /// A struct's fields, in the struct type's order (missing ones `Null`).
    Struct(Vec<Nested>),
    /// A map's entries, in input order.
    Map(Vec<(String, Nested)>),
}

impl Nested {
    /// The tree value of a scalar cell.
    pub fn from_cell(c: Cell<'_>) -> Nested {
        match c {
            Cell::Null => Nested::Null,
            Cell::Bool(v) => Nested::Bool(v),
            Cell::Int(v) => Nested::Int(v),
            Cell::F32(v) => Nested::F32(v),
            Cell::F64(v) => Nested::F64(v),
            Cell::Dec(v) => Nested::Dec(v),
            Cell::Date(v) => Nested::Date(v),
            Cell::Ts(v) => Nested::Ts(v),
            Cell::Str(s) => Nested::Str(s.into_owned()),
            Cell::Nested(n) => *n,
        }
    }
}

/// Whether `dt` is a nested type (read into [`Nested`] trees).
pub fn is_nested(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) | DataType::Map(_, _)
    )
}

/// Whether every type inside `dt` can be read from text: scalars the readers convert, and
/// nested types of them.
pub fn readable(dt: &DataType) -> bool {
    match dt {
        DataType::Utf8
        | DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal128(_, _)
        | DataType::Date32
        | DataType::Timestamp(TimeUnit::Microsecond, _) => true,
        DataType::Struct(fs) => fs.iter().all(|f| readable(f.data_type())),
        DataType::List(f) => readable(f.data_type()),
        DataType::Map(e, _) => match e.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                readable(kv[0].data_type()) && readable(kv[1].data_type())
            }
            _ => false,
        },
        _ => false,
    }
}

/// The first `MAP` inside `dt` whose key is not `STRING`.
pub fn non_string_map_key(dt: &DataType) -> bool {
    match dt {
        DataType::Struct(fs) => fs.iter().any(|f| non_string_map_key(f.data_type())),
        DataType::List(f) | DataType::LargeList(f) => non_string_map_key(f.data_type()),
        DataType::Map(e, _) => match e.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                kv[0].data_type() != &DataType::Utf8 || non_string_map_key(kv[1].data_type())
            }
            _ => true,
        },
        _ => false,
    }
}

/// `dt` with every field, item and map value nullable (map keys stay non-null), as Spark's
/// `asNullable`.
pub fn nullable_type(dt: &DataType) -> DataType {
    match dt {
        DataType::Struct(fs) => DataType::Struct(
            fs.iter()
                .map(|f| nullable_field(f))
                .collect::<Vec<Field>>()
                .into(),
        ),
        DataType::List(f) => DataType::List(Arc::new(nullable_field(f))),
        DataType::LargeList(f) => DataType::LargeList(Arc::new(nullable_field(f))),
        DataType::Map(e, sorted) => match e.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                let entries = Field::new_struct(
                    e.name(),
                    vec![
                        kv[0].as_ref().clone().with_nullable(false),
                        nullable_field(&kv[1]),
                    ],
                    false,
                );
                DataType::Map(Arc::new(entries), *sorted)
            }
            _ => dt.clone(),
        },
        other => other.clone(),
    }
}

/// A field made nullable, with its type made nullable inside.
pub fn nullable_field(f: &Field) -> Field {
    f.clone()
        .with_data_type(nullable_type(f.data_type()))
        .with_nullable(true)
}

/// Builds the array of type `dt` from one value per row.
pub fn build(dt: &DataType, vals: &[&Nested]) -> Result<ArrayRef> {
    macro_rules! prim {
        ($arr:ty, $pat:pat => $v:expr) => {
            Arc::new(
                vals.iter()
                    .map(|n| match n {
                        $pat => $v,
                        _ => None,
                    })
                    .collect::<$arr>(),
            ) as ArrayRef
        };
    }
    Ok(match dt {
        DataType::Utf8 => prim!(StringArray, Nested::Str(s) => Some(s.as_str())),
        DataType::Boolean => prim!(BooleanArray, Nested::Bool(v) => Some(*v)),
        DataType::Int8 => prim!(Int8Array, Nested::Int(v) => i8::try_from(*v).ok()),
        DataType::Int16 => prim!(Int16Array, Nested::Int(v) => i16::try_from(*v).ok()),
        DataType::Int32 => prim!(Int32Array, Nested::Int(v) => i32::try_from(*v).ok()),
        DataType::Int64 => prim!(Int64Array, Nested::Int(v) => Some(*v)),
        DataType::Float32 => prim!(Float32Array, Nested::F32(v) => Some(*v)),
        DataType::Float64 => prim!(Float64Array, Nested::F64(v) => Some(*v)),
        DataType::Date32 => prim!(Date32Array, Nested::Date(v) => Some(*v)),
        DataType::Binary => prim!(BinaryArray, Nested::Str(s) => Some(s.as_bytes())),
        DataType::Decimal128(p, s) => {
            let a: Decimal128Array = vals
                .iter()
                .map(|n| match n {
                    Nested::Dec(v) => Some(*v),
                    _ => None,
                })
                .collect();
            Arc::new(a.with_precision_and_scale(*p, *s)?)
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let a: TimestampMicrosecondArray = vals
                .iter()
                .map(|n| match n {
                    Nested::Ts(v) => Some(*v),
                    _ => None,
                })
                .collect();
            Arc::new(a.with_timezone_opt(tz.clone()))
        }
        DataType::Struct(fields) => {
            let mut children = Vec::with_capacity(fields.len());
            for (i, f) in fields.iter().enumerate() {
                let col: Vec<&Nested> = vals
                    .iter()
                    .map(|n| match n {
                        Nested::Struct(xs) => xs.get(i).unwrap_or(&Nested::Null),
                        _ => &Nested::Null,
                    })
                    .collect();
                children.push(build(f.data_type(), &col)?);
            }
            let nulls = NullBuffer::from(
                vals.iter()
                    .map(|n| matches!(n, Nested::Struct(_)))
                    .collect::<Vec<bool>>(),
            );
            if fields.is_empty() {
                Arc::new(StructArray::new_empty_fields(vals.len(), Some(nulls)))
            } else {
                Arc::new(StructArray::try_new(fields.clone(), children, Some(nulls))?)
            }
        }
        DataType::List(f) => {
            let mut lens = Vec::with_capacity(vals.len());
            let mut items: Vec<&Nested> = Vec::new();
            for n in vals {
                match n {
                    Nested::List(xs) => {
                        lens.push(xs.len());
                        items.extend(xs.iter());
                    }
                    _ => lens.push(0),
                }
            }
            let values = build(f.data_type(), &items)?;
            let nulls = NullBuffer::from(
                vals.iter()
                    .map(|n| matches!(n, Nested::List(_)))
                    .collect::<Vec<bool>>(),
            );
            Arc::new(ListArray::try_new(
                f.clone(),
                OffsetBuffer::from_lengths(lens),
                values,
                Some(nulls),
            )?)
        }
        DataType::Map(entries, sorted) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(bad_type(dt));
            };
            let mut lens = Vec::with_capacity(vals.len());
            let mut keys: Vec<Nested> = Vec::new();
            let mut values: Vec<&Nested> = Vec::new();
            for n in vals {
                match n {
                    Nested::Map(es) => {
                        lens.push(es.len());
                        for (k, v) in es {
                            keys.push(Nested::Str(k.clone()));
                            values.push(v);
                        }
                    }
                    _ => lens.push(0),
                }
            }
            let key_refs: Vec<&Nested> = keys.iter().collect();
            let k = build(kv[0].data_type(), &key_refs)?;
            let v = build(kv[1].data_type(), &values)?;
            let nulls = NullBuffer::from(
                vals.iter()
                    .map(|n| matches!(n, Nested::Map(_)))
                    .collect::<Vec<bool>>(),
            );
            let entries_arr = StructArray::try_new(Fields::from(kv.to_vec()), vec![k, v], None)?;
            Arc::new(MapArray::try_new(
                entries.clone(),
                OffsetBuffer::from_lengths(lens),
                entries_arr,
                Some(nulls),
                *sorted,
            )?)
        }
        other => return Err(bad_type(other)),
    })
}

fn bad_type(dt: &DataType) -> SluiceError {
    SluiceError::not_supported_yet(format!(
        "reading nested values of the type {} is not supported yet",
        spark_type_name(dt)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;

    #[test]
    fn builds_nested_arrays_with_nulls_at_every_level() {
        let dt = crate::schema::parse_ddl_type(
            "STRUCT<a: INT, l: ARRAY<STRING>, m: MAP<STRING, ARRAY<BIGINT>>>",
        )
        .unwrap();
        let dt = nullable_type(&dt);
        let v1 = Nested::Struct(vec![
            Nested::Int(1),
            Nested::List(vec![Nested::Str("x".into()), Nested::Null]),
            Nested::Map(vec![("k".into(), Nested::List(vec![Nested::Int(7)]))]),
        ]);
        let v2 = Nested::Null;
        let v3 = Nested::Struct(vec![Nested::Null, Nested::List(vec![]), Nested::Null]);
        let a = build(&dt, &[&v1, &v2, &v3]).unwrap();
        assert_eq!(a.len(), 3);
        assert!(a.is_valid(0) && a.is_null(1) && a.is_valid(2));
        let s = a.as_any().downcast_ref::<StructArray>().unwrap();
        assert_eq!(
            s.column(0)
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap()
                .value(0),
            1
        );
        let l = s.column(1).as_any().downcast_ref::<ListArray>().unwrap();
        assert_eq!(l.value_length(0), 2);
        assert_eq!(l.value_length(2), 0);
        assert!(l.is_valid(2));
        let m = s.column(2).as_any().downcast_ref::<MapArray>().unwrap();
        assert_eq!(m.value_length(0), 1);
        assert!(m.is_null(2));
    }
}
