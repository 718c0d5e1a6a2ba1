//! Parquet files through the `parquet` crate's Arrow reader: the schema's columns are selected
//! by name (exact, else case-insensitive as Spark's default `caseSensitive=false`), a missing
//! column reads as nulls, and each column is cast to the schema's type. Timestamps keep their
//! instant (UTC micros) whatever their unit or zone.

use crate::error::class;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use arrow::compute::{can_cast_types, cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Schema, TimeUnit, TimestampMicrosecondType};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use super::{file_not_found, Assembler, BATCH_ROWS};
use crate::error::{Fault, Result, SluiceError};
use crate::schema::spark_type_name;

fn find_column(schema: &Schema, name: &str) -> Option<usize> {
    schema
        .fields()
        .iter()
        .position(|f| f.name() == name)
        .or_else(|| {
            schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(name))
        })
}

pub(crate) fn read(path: &Path, uri: &str, context: &str, asm: &mut Assembler<'_>) -> Result<()> {
    let opts = asm.opts;
    let file = match crate::storage::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if opts.ignore_missing_files {
                log::warn!("skipping the missing file {uri} (ignoreMissingFiles=true)");
                return Ok(());
            }
            return Err(file_not_found(uri, context));
        }
        Err(e) => {
            return Err(SluiceError::io(
                Fault::Connector,
                format!("opening {uri}"),
                e,
            ))
        }
    };
    let corrupt = |what: &str, e: &dyn std::fmt::Display| {
        SluiceError::input(
            class::CANNOT_READ_PARQUET_FILE,
            format!(
                "cannot read the Parquet file {uri} ({what}: {e}). It may be corrupt or not a \
                 Parquet file; set the option ignoreCorruptFiles=true to skip such files"
            ),
        )
    };
    let builder = match ParquetRecordBatchReaderBuilder::try_new(file) {
        Ok(b) => b,
        Err(e) if opts.ignore_corrupt_files => {
            log::warn!("skipping the unreadable Parquet file {uri}: {e} (ignoreCorruptFiles=true)");
            return Ok(());
        }
        Err(e) => return Err(corrupt("footer", &e)),
    };
    asm.files_read += 1;
    let target = opts.schema.clone();
    let file_schema = builder.schema().clone();
    let mut roots: Vec<usize> = target
        .fields()
        .iter()
        .filter_map(|f| find_column(&file_schema, f.name()))
        .collect();
    roots.sort_unstable();
    roots.dedup();
    // Check the types up front so the error names the column.
    for f in target.fields() {
        if let Some(i) = find_column(&file_schema, f.name()) {
            let from = file_schema.field(i).data_type();
            if !castable(from, f.data_type()) {
                return Err(SluiceError::input(
                    class::PARQUET_COLUMN_DATA_TYPE_MISMATCH,
                    format!(
                        "the Parquet file {uri} has the column `{}` of type {} ({from}), which \
                         cannot be read as {} as the schema says",
                        file_schema.field(i).name(),
                        spark_type_name(from),
                        spark_type_name(f.data_type())
                    ),
                ));
            }
        }
    }
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| corrupt("reader", &e))?;
    for batch in reader {
        let batch = match batch {
            Ok(b) => b,
            Err(e) if opts.ignore_corrupt_files => {
                log::warn!(
                    "stopping at an unreadable part of {uri}: {e} (ignoreCorruptFiles=true)"
                );
                break;
            }
            Err(e) => return Err(corrupt("data", &e)),
        };
        let bs = batch.schema();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(target.fields().len());
        for f in target.fields() {
            let col = match find_column(&bs, f.name()) {
                Some(i) => adapt(batch.column(i), f.data_type())?,
                None => new_null_array(f.data_type(), batch.num_rows()),
            };
            columns.push(col);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        let out = RecordBatch::try_new_with_options(target.clone(), columns, &options)?;
        asm.push_batch(out)?;
    }
    Ok(())
}

fn castable(from: &DataType, to: &DataType) -> bool {
    match (from, to) {
        (DataType::Timestamp(_, _), DataType::Timestamp(_, _)) => true,
        _ => from == to || can_cast_types(from, to),
    }
}

/// Casts a column to the schema's type; timestamps keep the instant and take the target zone.
fn adapt(col: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    if col.data_type() == to {
        return Ok(col.clone());
    }
    let options = CastOptions {
        safe: true,
        ..Default::default()
    };
    match (col.data_type(), to) {
        (DataType::Timestamp(_, from_tz), DataType::Timestamp(TimeUnit::Microsecond, to_tz)) => {
            let same_zone = DataType::Timestamp(TimeUnit::Microsecond, from_tz.clone());
            let micros = cast_with_options(col.as_ref(), &same_zone, &options)?;
            let arr = micros
                .as_primitive::<TimestampMicrosecondType>()
                .clone()
                .with_timezone_opt(to_tz.clone());
            Ok(Arc::new(arr))
        }
        _ => Ok(cast_with_options(col.as_ref(), to, &options)?),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::fs::File;

    use arrow::array::{Int32Array, Int64Array, StringArray, TimestampMillisecondArray};
    use arrow::datatypes::Field;
    use parquet::arrow::ArrowWriter;
    use serde_json::{json, Value};

    use super::super::test_util::rows;
    use super::super::{read_file, ParseOptions};
    use super::*;
    use crate::source::file::options::Options;

    #[test]
    fn selects_by_name_casts_and_fills_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        let schema = Arc::new(Schema::new(vec![
            Field::new("ID", DataType::Int32, false),
            Field::new("name", DataType::Utf8, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Millisecond, Some("+02:00".into())),
                true,
            ),
            Field::new("unused", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
                Arc::new(
                    TimestampMillisecondArray::from(vec![Some(1_500), None])
                        .with_timezone("+02:00"),
                ),
                Arc::new(Int64Array::from(vec![7, 8])),
            ],
        )
        .unwrap();
        let mut w = ArrowWriter::try_new(File::create(&path).unwrap(), schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();

        let target =
            crate::schema::parse_ddl_schema("id BIGINT, name STRING, ts TIMESTAMP, missing DOUBLE")
                .unwrap();
        let o = ParseOptions::new("parquet", &target, &Options::new(&HashMap::new())).unwrap();
        let mut asm = Assembler::new(&o).unwrap();
        read_file(&path, "file:///a.parquet", "a test", &mut asm).unwrap();
        let out = asm.finish().unwrap();
        assert_eq!(out.files_read, 1);
        assert_eq!(out.batches[0].schema(), o.schema);
        assert_eq!(
            rows(&out.batches),
            vec![
                vec![json!(1), json!("a"), json!(1_500_000), Value::Null],
                vec![json!(2), Value::Null, Value::Null, Value::Null],
            ]
        );

        let bad = crate::schema::parse_ddl_schema("name DATE").unwrap();
        let o = ParseOptions::new("parquet", &bad, &Options::new(&HashMap::new())).unwrap();
        let mut asm = Assembler::new(&o).unwrap();
        let err = read_file(&path, "file:///a.parquet", "a test", &mut asm);
        // Utf8 -> Date32 is castable in arrow (unparseable values become null).
        assert!(err.is_ok());

        std::fs::write(dir.path().join("bad.parquet"), b"not parquet").unwrap();
        let mut asm = Assembler::new(&o).unwrap();
        let err = read_file(
            &dir.path().join("bad.parquet"),
            "file:///bad.parquet",
            "a test",
            &mut asm,
        )
        .unwrap_err();
        assert_eq!(err.class(), "CANNOT_READ_PARQUET_FILE");
        let err = read_file(
            &dir.path().join("gone.parquet"),
            "file:///gone.parquet",
            "batch 3",
            &mut asm,
        )
        .unwrap_err();
        assert_eq!(err.class(), "FILE_NOT_FOUND");
    }
}
