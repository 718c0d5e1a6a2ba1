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
use arrow::datatypes::{DataType, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;

use super::{file_not_found, ParseOptions, BATCH_ROWS};
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

/// A Parquet file being read: its batches (of the schema's columns) come as the reader decodes
/// them.
pub(crate) struct ParquetFile {
    source: Source,
    target: SchemaRef,
    uri: String,
    ignore_corrupt_files: bool,
}

enum Source {
    /// A local file: one reader over its row groups (pages are read as they are decoded).
    File(ParquetRecordBatchReader),
    /// An object: a reader per row group, whose column chunks are fetched first (the
    /// columns read, in one go), so one row group's columns are in memory at a time.
    Object {
        file: crate::storage::RangedFile,
        metadata: ArrowReaderMetadata,
        mask: ProjectionMask,
        next_row_group: usize,
        reader: Option<ParquetRecordBatchReader>,
    },
}

/// Bytes read from the end of an object first: its footer, in one request.
const FOOTER_GUESS: u64 = 64 << 10;

/// Opens a Parquet file and checks its columns' types; `None` for a file skipped as the
/// options say (missing, or unreadable with `ignoreCorruptFiles`).
pub(crate) fn open(
    opts: &ParseOptions,
    path: &Path,
    uri: &str,
    context: &str,
) -> Result<Option<ParquetFile>> {
    let open_failed = |e: std::io::Error| {
        if e.kind() == ErrorKind::NotFound {
            if opts.ignore_missing_files {
                log::warn!("skipping the missing file {uri} (ignoreMissingFiles=true)");
                return Ok(None);
            }
            return Err(file_not_found(uri, context));
        }
        Err(SluiceError::io(
            Fault::Connector,
            format!("opening {uri}"),
            e,
        ))
    };
    let (local, object) = match crate::storage::open_by_ranges(path) {
        Ok(Some(object)) => {
            let size = parquet::file::reader::Length::len(&object);
            let tail = size.saturating_sub(FOOTER_GUESS)..size;
            if let Err(e) = object.fetch(std::slice::from_ref(&tail)) {
                return open_failed(e);
            }
            (None, Some(object))
        }
        Ok(None) => match crate::storage::open(path) {
            Ok(f) => (Some(f), None),
            Err(e) => return open_failed(e),
        },
        Err(e) => return open_failed(e),
    };
    let metadata = match (&local, &object) {
        (Some(f), _) => ArrowReaderMetadata::load(f, ArrowReaderOptions::default()),
        (_, Some(o)) => ArrowReaderMetadata::load(o, ArrowReaderOptions::default()),
        (None, None) => return Ok(None),
    };
    let metadata = match metadata {
        Ok(m) => m,
        Err(e) if opts.ignore_corrupt_files => {
            log::warn!("skipping the unreadable Parquet file {uri}: {e} (ignoreCorruptFiles=true)");
            return Ok(None);
        }
        Err(e) => return Err(corrupt(uri, "footer", &e)),
    };
    let target = opts.schema.clone();
    let file_schema = metadata.schema().clone();
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
    let mask = ProjectionMask::roots(metadata.parquet_schema(), roots);
    let source = match (local, object) {
        (Some(f), _) => Source::File(
            ParquetRecordBatchReaderBuilder::new_with_metadata(f, metadata)
                .with_projection(mask)
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(|e| corrupt(uri, "reader", &e))?,
        ),
        (_, Some(file)) => Source::Object {
            file,
            metadata,
            mask,
            next_row_group: 0,
            reader: None,
        },
        (None, None) => return Ok(None),
    };
    Ok(Some(ParquetFile {
        source,
        target,
        uri: uri.to_string(),
        ignore_corrupt_files: opts.ignore_corrupt_files,
    }))
}

fn corrupt(uri: &str, what: &str, e: &dyn std::fmt::Display) -> SluiceError {
    SluiceError::input(
        class::CANNOT_READ_PARQUET_FILE,
        format!(
            "cannot read the Parquet file {uri} ({what}: {e}). It may be corrupt or not a \
             Parquet file; set the option ignoreCorruptFiles=true to skip such files"
        ),
    )
}

impl ParquetFile {
    /// The next batch, in the schema's columns; `None` at the end of the file (or at an
    /// unreadable part of it, with `ignoreCorruptFiles`).
    pub(crate) fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let uri = &self.uri;
        let next = match &mut self.source {
            Source::File(reader) => reader.next(),
            Source::Object {
                file,
                metadata,
                mask,
                next_row_group,
                reader,
            } => loop {
                if let Some(r) = reader {
                    match r.next() {
                        None => *reader = None,
                        some => break some,
                    }
                }
                let meta = metadata.metadata();
                if *next_row_group >= meta.num_row_groups() {
                    break None;
                }
                let i = *next_row_group;
                *next_row_group += 1;
                let ranges: Vec<std::ops::Range<u64>> = meta
                    .row_group(i)
                    .columns()
                    .iter()
                    .enumerate()
                    .filter(|(c, _)| mask.leaf_included(*c))
                    .map(|(_, col)| {
                        let (start, len) = col.byte_range();
                        start..start.saturating_add(len)
                    })
                    .collect();
                file.fetch(&ranges)
                    .map_err(|e| SluiceError::io(Fault::Connector, format!("reading {uri}"), e))?;
                *reader = Some(
                    ParquetRecordBatchReaderBuilder::new_with_metadata(
                        file.clone(),
                        metadata.clone(),
                    )
                    .with_projection(mask.clone())
                    .with_row_groups(vec![i])
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(|e| corrupt(uri, "reader", &e))?,
                );
            },
        };
        let batch = match next {
            None => return Ok(None),
            Some(Ok(b)) => b,
            Some(Err(e)) if self.ignore_corrupt_files => {
                log::warn!(
                    "stopping at an unreadable part of {uri}: {e} (ignoreCorruptFiles=true)"
                );
                return Ok(None);
            }
            Some(Err(e)) => return Err(corrupt(uri, "data", &e)),
        };
        let bs = batch.schema();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.target.fields().len());
        for f in self.target.fields() {
            let col = match find_column(&bs, f.name()) {
                Some(i) => adapt(batch.column(i), f.data_type())?,
                None => new_null_array(f.data_type(), batch.num_rows()),
            };
            columns.push(col);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        Ok(Some(RecordBatch::try_new_with_options(
            self.target.clone(),
            columns,
            &options,
        )?))
    }
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
    use super::super::{read_file, Assembler, ParseOptions};
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
