//! A batch's data files, written as its rows come: each task (partition of the result) writes
//! its own files, one per partition folder, as Spark's tasks do, and flushes what its open
//! files buffer (a parquet row group) whenever that passes its share of `sluice.memory.limit`.
//! A batch of any size holds a bounded piece at a time.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use super::partition::PartitionColumns;
use super::{conform_schema, json_line, write_csv, write_err, FileFormat, FileOptions};
use crate::error::{Fault, Result, SluiceError};
use crate::sink::{for_each_partition, BatchStreams};
use crate::storage::PendingFile;
use crate::sync::MutexExt;

/// Writes `rows` under `dir`: per task, `[col=value/..]part-<task>-<job>-c000.<ext>`, the tasks
/// at the same time, each buffering at most about its share of `memory` before it writes. Every file
/// name created is pushed to `created` (also on error, for clean-up). Returns the files
/// written with their row counts, in task order.
pub(super) fn write_files(
    dir: &Path,
    options: &FileOptions,
    partitioning: &PartitionColumns,
    rows: BatchStreams,
    memory: crate::conf::MemoryBudget,
    created: &mut Vec<PathBuf>,
) -> Result<Vec<(PathBuf, usize)>> {
    let job = uuid::Uuid::new_v4();
    let schema = partitioning.data_schema();
    let made = Mutex::new(Vec::new());
    let tasks = rows.into_partitions();
    let buffer_bytes = memory.write_buffer_bytes(tasks.len());
    let per_task = for_each_partition(tasks, |task, rows| {
        let name = format!("part-{task:05}-{job}-c000.{}", options.extension());
        let mut files: Vec<DataFileWriter> = Vec::new();
        let mut by_folder: HashMap<String, usize> = HashMap::new();
        for batch in rows {
            let batch = batch?;
            if batch.num_rows() == 0 {
                continue;
            }
            for (folder, batches) in partitioning.split(std::slice::from_ref(&batch))? {
                let k = match by_folder.get(&folder) {
                    Some(k) => *k,
                    None => {
                        let file = match folder.is_empty() {
                            true => dir.join(&name),
                            false => dir.join(&folder).join(&name),
                        };
                        if let Some(parent) = file.parent().filter(|p| *p != dir) {
                            crate::storage::create_dir_all(parent).map_err(|e| {
                                SluiceError::io(
                                    Fault::Connector,
                                    format!("creating {}", parent.display()),
                                    e,
                                )
                            })?;
                        }
                        made.lock_unpoisoned().push(file.clone());
                        files.push(DataFileWriter::create(file, options, schema)?);
                        by_folder.insert(folder, files.len() - 1);
                        files.len() - 1
                    }
                };
                for b in &batches {
                    files[k].write(b)?;
                }
            }
            let buffered: usize = files.iter().map(DataFileWriter::buffered).sum();
            if buffered > buffer_bytes {
                for f in &mut files {
                    f.flush()?;
                }
            }
        }
        files
            .into_iter()
            .map(DataFileWriter::finish)
            .collect::<Result<Vec<_>>>()
    });
    created.extend(made.into_inner().unwrap_or_default());
    Ok(per_task?.into_iter().flatten().collect())
}

/// One data file being written: created new, under its final name once complete (fsynced
/// locally, one put on an object store), before it is listed in the manifest.
struct DataFileWriter {
    file: PathBuf,
    schema: SchemaRef,
    options: FileOptions,
    rows: usize,
    out: Out,
}

enum Out {
    Parquet(Box<ArrowWriter<BufWriter<PendingFile>>>),
    /// JSON lines or CSV; whether the CSV header is still to be written.
    Text(BufWriter<PendingFile>, bool),
}

impl DataFileWriter {
    fn create(file: PathBuf, options: &FileOptions, schema: &SchemaRef) -> Result<Self> {
        let f = PendingFile::create(&file).map_err(|e| {
            SluiceError::io(Fault::Connector, format!("creating {}", file.display()), e)
        })?;
        let out = match options.format {
            FileFormat::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(if options.snappy {
                        Compression::SNAPPY
                    } else {
                        Compression::UNCOMPRESSED
                    })
                    .build();
                let w = ArrowWriter::try_new(BufWriter::new(f), schema.clone(), Some(props))
                    .map_err(|e| write_err(&file, e))?;
                Out::Parquet(Box::new(w))
            }
            FileFormat::Json | FileFormat::Csv => Out::Text(BufWriter::new(f), options.csv_header),
        };
        Ok(Self {
            file,
            schema: schema.clone(),
            options: options.clone(),
            rows: 0,
            out,
        })
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = conform_schema(batch, &self.schema)?;
        let file = &self.file;
        match (&mut self.out, self.options.format) {
            (Out::Parquet(w), _) => w.write(&batch).map_err(|e| write_err(file, e))?,
            (Out::Text(w, _), FileFormat::Json) => {
                let mut line = String::new();
                for row in 0..batch.num_rows() {
                    line.clear();
                    json_line(&mut line, &batch, row)?;
                    w.write_all(line.as_bytes())
                        .map_err(|e| write_err(file, e))?;
                }
            }
            (Out::Text(w, header), _) => {
                write_csv(
                    w,
                    &self.schema,
                    std::slice::from_ref(&batch),
                    &self.options,
                    *header,
                )
                .map_err(|e| e.context(file.display()))?;
                *header = false;
            }
        }
        self.rows += batch.num_rows();
        Ok(())
    }

    /// The rows buffered in memory (a parquet row group in progress).
    fn buffered(&self) -> usize {
        match &self.out {
            Out::Parquet(w) => w.in_progress_size(),
            Out::Text(..) => 0,
        }
    }

    /// Writes what is buffered (a parquet row group).
    fn flush(&mut self) -> Result<()> {
        if let Out::Parquet(w) = &mut self.out {
            if w.in_progress_rows() > 0 {
                w.flush().map_err(|e| write_err(&self.file, e))?;
            }
        }
        Ok(())
    }

    /// Completes the file and puts it under its name; its name and rows.
    fn finish(self) -> Result<(PathBuf, usize)> {
        let file = self.file;
        let f = match self.out {
            Out::Parquet(w) => {
                let buf = w.into_inner().map_err(|e| write_err(&file, e))?;
                buf.into_inner().map_err(|e| write_err(&file, e.error()))?
            }
            Out::Text(w, _) => w.into_inner().map_err(|e| write_err(&file, e.error()))?,
        };
        match f.publish(crate::storage::Publish::CreateNew) {
            Ok(true) => Ok((file, self.rows)),
            Ok(false) => Err(write_err(&file, "a file of that name is already there")),
            Err(e) => Err(SluiceError::io(
                Fault::Connector,
                format!("writing {}", file.display()),
                e,
            )),
        }
    }
}
