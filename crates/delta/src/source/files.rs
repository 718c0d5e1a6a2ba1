//! A batch's data files read as rows (a file at a time, partition values added, types cast to
//! the table's), by the driver's source or, a run of them each, by the workers of a cluster.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use serde_json::{json, Value};
use sluice::distributed::{ReadCounts, ReadItem, ReadItems};
use sluice::error::class;
use sluice::source::RowIter;
use sluice::{Result, SluiceError};

use super::DataFile;

/// A table's data files as rows: what the driver's source reads, or a worker its run of them.
#[derive(Debug, Clone)]
pub(super) struct TableFiles {
    pub(super) dir: PathBuf,
    pub(super) url: String,
    pub(super) schema: SchemaRef,
}

/// What a read of data files counted.
#[derive(Debug, Default)]
pub(super) struct ReadCounted {
    pub(super) rows: AtomicU64,
    pub(super) files: AtomicU64,
}

impl TableFiles {
    /// The rows of `files`, in order, a file at a time (each as its Parquet reader gives its
    /// batches, so a batch of files never has to fit in memory), counted in `counted`. A file
    /// that fails ends the rows with its error.
    pub(super) fn rows(self, files: Vec<DataFile>, counted: Arc<ReadCounted>) -> RowIter {
        let mut files = files.into_iter();
        let mut open: Option<(ParquetRecordBatchReader, DataFile, PathBuf)> = None;
        let mut failed = false;
        Box::new(std::iter::from_fn(move || loop {
            if failed {
                return None;
            }
            let result = match &mut open {
                None => match files.next() {
                    None => return None,
                    Some(f) => self.open(&f).map(|(reader, path)| {
                        counted.files.fetch_add(1, Ordering::Relaxed);
                        open = Some((reader, f, path));
                        None
                    }),
                },
                Some((reader, f, path)) => match reader.next() {
                    None => {
                        open = None;
                        Ok(None)
                    }
                    Some(b) => b
                        .map_err(|e| read_err(path, e))
                        .and_then(|b| self.conform(&b, f))
                        .map(Some),
                },
            };
            match result {
                Ok(None) => continue,
                Ok(Some(b)) => {
                    counted
                        .rows
                        .fetch_add(b.num_rows() as u64, Ordering::Relaxed);
                    return Some(Ok(b));
                }
                Err(e) => {
                    failed = true;
                    return Some(Err(e));
                }
            }
        }))
    }

    /// A data file's reader and its path.
    fn open(&self, f: &DataFile) -> Result<(ParquetRecordBatchReader, PathBuf)> {
        let decoded = percent_decode(&f.path);
        let path = if Path::new(&decoded).is_absolute() || decoded.contains("://") {
            PathBuf::from(&decoded)
        } else {
            self.dir.join(&decoded)
        };
        let file = sluice::storage::open(&path).map_err(|e| {
            SluiceError::io(
                sluice::Fault::Input,
                format!(
                    "opening {} of the Delta table {} (a file the log lists was removed: \
                     restore it, or run VACUUM only past what the stream has read)",
                    path.display(),
                    self.url
                ),
                e,
            )
        })?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.build())
            .map_err(|e| read_err(&path, e))?;
        Ok((reader, path))
    }

    /// A data file's batch with the table's columns: partition values added, types cast.
    fn conform(&self, b: &RecordBatch, f: &DataFile) -> Result<RecordBatch> {
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for field in self.schema.fields() {
            let col = match b.column_by_name(field.name()) {
                Some(c) => c.clone(),
                None => match f.partition_values.get(field.name()) {
                    Some(Some(v)) => {
                        let text: ArrayRef =
                            Arc::new(StringArray::from(vec![v.as_str(); b.num_rows()]));
                        text
                    }
                    _ => new_null_array(field.data_type(), b.num_rows()),
                },
            };
            let col = if col.data_type() == field.data_type() {
                col
            } else {
                arrow::compute::cast(&col, field.data_type()).map_err(|e| {
                    SluiceError::input(
                        class::DELTA_TABLE_INVALID,
                        format!(
                            "column {} of {} does not cast to the table's type: {e}",
                            field.name(),
                            f.path
                        ),
                    )
                })?
            };
            columns.push(col);
        }
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| {
            SluiceError::input(
                class::DELTA_TABLE_INVALID,
                format!("{} does not fit the table's schema: {e}", f.path),
            )
        })
    }
}

/// The kind of a Delta read on a worker (`sluice::source::remote::register_read`).
pub(crate) const READ_KIND: &str = "delta";

/// A worker's read of `files` of `table`, with the session's object store options `storage`.
pub(super) fn worker_spec(
    table: &TableFiles,
    files: &[DataFile],
    storage: &[(String, String)],
) -> Value {
    json!({
        "dir": table.dir.to_string_lossy(),
        "url": table.url,
        "files": files.iter().map(|f| json!({
            "path": f.path,
            "size": f.size,
            "partitionValues": f.partition_values,
        })).collect::<Vec<_>>(),
        "storage": storage,
    })
}

/// Runs a Delta read on this worker (registered as [`READ_KIND`]): its data files read as the
/// driver's source reads them, with the table's `schema`; the rows as they come, then the
/// counts.
pub(crate) fn read_on_worker(spec: &str, schema: SchemaRef) -> Result<ReadItems> {
    let bad = |what: &str| SluiceError::internal(format!("a Delta read's spec: {what}"));
    let v: Value = serde_json::from_str(spec).map_err(|e| bad(&e.to_string()))?;
    let text = |key: &str| v[key].as_str().map(String::from).ok_or_else(|| bad(key));
    let storage: Vec<(String, String)> =
        serde_json::from_value(v["storage"].clone()).map_err(|e| bad(&e.to_string()))?;
    if !storage.is_empty() {
        sluice::storage::configure(storage.iter().map(|(k, v)| (k, v)));
    }
    let files = v["files"]
        .as_array()
        .ok_or_else(|| bad("files"))?
        .iter()
        .map(|f| {
            Ok(DataFile {
                path: f["path"].as_str().ok_or_else(|| bad("path"))?.to_string(),
                size: f["size"].as_u64().unwrap_or(0),
                partition_values: serde_json::from_value(f["partitionValues"].clone())
                    .map_err(|e| bad(&e.to_string()))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let table = TableFiles {
        dir: PathBuf::from(text("dir")?),
        url: text("url")?,
        schema,
    };
    let counted = Arc::new(ReadCounted::default());
    let rows = table.rows(files, Arc::clone(&counted));
    let counts = std::iter::once_with(move || {
        Ok(ReadItem::Counts(ReadCounts {
            rows: counted.rows.load(Ordering::Relaxed),
            files_read: counted.files.load(Ordering::Relaxed),
            ..Default::default()
        }))
    });
    Ok(Box::new(rows.map(|r| r.map(ReadItem::Rows)).chain(counts)))
}

fn read_err(path: &Path, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::input(
        class::FAILED_READ_FILE,
        format!("reading {}: {e}", path.display()),
    )
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
