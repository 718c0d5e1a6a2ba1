//! Arrow IPC streams, the data format of Spark Connect: `LocalRelation.data` and
//! `ExecutePlanResponse.arrow_batch.data` are IPC streams (schema message, then batches).

use arrow::array::RecordBatch;
use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef, Schema, SchemaRef, TimeUnit};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use crate::error::{ConnectError, Result};

/// The Arrow type PySpark reads a column as: `timestamp` columns carry a zone (Sluice's are
/// UTC instants without one; the values do not change), and view strings/binaries are plain.
fn client_type(t: &DataType) -> DataType {
    let field = |f: &FieldRef| -> FieldRef {
        Arc::new(
            f.as_ref()
                .clone()
                .with_data_type(client_type(f.data_type())),
        )
    };
    match t {
        // Spark Connect's timestamps are microseconds (PySpark fails on nanoseconds).
        DataType::Timestamp(_, None) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        }
        DataType::Timestamp(_, Some(tz)) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some(tz.clone()))
        }
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        DataType::List(f) => DataType::List(field(f)),
        DataType::LargeList(f) => DataType::LargeList(field(f)),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(field(f), *n),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(field).collect()),
        DataType::Map(f, sorted) => DataType::Map(field(f), *sorted),
        other => other.clone(),
    }
}

/// Batches as the client reads them (see `client_type`).
pub fn for_client(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|f| {
            Arc::new(
                f.as_ref()
                    .clone()
                    .with_data_type(client_type(f.data_type())),
            )
        })
        .collect();
    let target = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    if target == schema {
        return Ok((schema, batches));
    }
    let batches = batches
        .iter()
        .map(|b| {
            let columns = b
                .columns()
                .iter()
                .zip(target.fields())
                .map(|(c, f)| arrow::compute::cast(c, f.data_type()))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok(RecordBatch::try_new(target.clone(), columns)?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((target, batches))
}

/// Reads an IPC stream into its schema and batches.
pub fn read_stream(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).map_err(|e| {
        ConnectError::illegal_argument(format!("the Arrow IPC data sent is unreadable: {e}"))
    })?;
    let schema = reader.schema();
    let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((schema, batches))
}

/// Writes batches as one IPC stream (the schema, then the batches), as `ArrowBatch.data` and
/// `LocalRelation.data` carry them.
pub fn write_batches(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut writer = StreamWriter::try_new(&mut out, schema)?;
        for b in batches {
            writer.write(b)?;
        }
        writer.finish()?;
    }
    Ok(out)
}

/// One batch as an IPC stream.
pub fn write_batch(batch: &RecordBatch) -> Result<Vec<u8>> {
    write_batches(batch.schema_ref(), std::slice::from_ref(batch))
}

#[cfg(test)]
mod tests {
    use arrow::array::{
        Int64Array, StringArray, TimestampMicrosecondArray, TimestampNanosecondArray,
    };
    use arrow::datatypes::Field;

    use super::*;

    #[test]
    fn a_batch_round_trips_through_an_ipc_stream() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
            ],
        )
        .unwrap();
        let (read_schema, batches) = read_stream(&write_batch(&batch).unwrap()).unwrap();
        assert_eq!(read_schema, schema);
        assert_eq!(batches, vec![batch]);
        let empty = RecordBatch::new_empty(schema.clone());
        let (empty_schema, none) = read_stream(&write_batch(&empty).unwrap()).unwrap();
        assert_eq!(empty_schema, schema);
        assert_eq!(
            none[0].num_rows(),
            0,
            "an empty result is one batch of no rows"
        );
    }

    #[test]
    fn timestamps_reach_the_client_zoned_and_view_strings_plain() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new("s", DataType::Utf8View, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(TimestampMicrosecondArray::from(vec![Some(1_000_000)])),
                Arc::new(arrow::array::StringViewArray::from(vec![Some("x")])),
            ],
        )
        .unwrap();
        let (target, batches) = for_client(schema, vec![batch]).unwrap();
        assert_eq!(
            target.field(0).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
        assert_eq!(target.field(1).data_type(), &DataType::Utf8);
        let ts = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(ts.value(0), 1_000_000, "the instant does not move");
    }

    #[test]
    fn nanosecond_timestamps_reach_the_client_as_microseconds() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            true,
        )]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(TimestampNanosecondArray::from(vec![Some(
                1_500_000_000,
            )]))],
        )
        .unwrap();
        let (target, batches) = for_client(schema, vec![batch]).unwrap();
        assert_eq!(
            target.field(0).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
        let ts = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(ts.value(0), 1_500_000);
    }

    #[test]
    fn garbage_is_an_illegal_argument_not_a_panic() {
        let err = read_stream(b"not arrow").unwrap_err();
        assert_eq!(err.java_class, crate::error::java::ILLEGAL_ARGUMENT);
    }
}
