//! Arrow IPC streams, the data format of Spark Connect: `LocalRelation.data` and
//! `ExecutePlanResponse.arrow_batch.data` are IPC streams (schema message, then batches).

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use crate::error::{ConnectError, Result};

/// Reads an IPC stream into its schema and batches.
pub fn read_stream(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).map_err(|e| {
        ConnectError::illegal_argument(format!("the Arrow IPC data sent is unreadable: {e}"))
    })?;
    let schema = reader.schema();
    let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((schema, batches))
}

/// Writes one batch as an IPC stream (schema + the batch), as `ArrowBatch.data` carries it.
pub fn write_batch(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut writer = StreamWriter::try_new(&mut out, batch.schema_ref())?;
        writer.write(batch)?;
        writer.finish()?;
    }
    Ok(out)
}

/// An IPC stream of a schema and no rows (an empty result still tells its schema).
pub fn write_schema(schema: &SchemaRef) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut writer = StreamWriter::try_new(&mut out, schema)?;
        writer.finish()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

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
        let (empty_schema, none) = read_stream(&write_schema(&schema).unwrap()).unwrap();
        assert_eq!(empty_schema, schema);
        assert!(none.is_empty());
    }

    #[test]
    fn garbage_is_an_illegal_argument_not_a_panic() {
        let err = read_stream(b"not arrow").unwrap_err();
        assert_eq!(err.java_class, crate::error::java::ILLEGAL_ARGUMENT);
    }
}
