//! A file source's batch read by a cluster's workers (`sluice.distributed.workers`), as Spark's
//! executors read a file source's splits: the batch's files (the same files, in the same order,
//! the source log's) are cut into contiguous runs, one per worker that answers; each worker
//! parses its run with the engine's readers ([`run_read_task`], the same format and options)
//! and streams the rows back as it decodes them, then its counts (rows, malformed records,
//! files read), which the source reports as its metrics. The rows, the errors (a `FAILFAST`
//! record keeps its class) and the counts are the ones of a read in one process.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::format::{self, ParseOptions, ReadCounters};
use super::listing::uri_to_path;
use super::options::Options;
use super::FileSource;
use crate::distributed::{ReadCounts, ReadItem, ReadItems, ReadOnWorkers};
use crate::error::Result;
use crate::source::remote::{read_in_runs, ReadSpec, WorkerReads};
use crate::source::SourceBatch;
use crate::types::RowIter;

/// A file read's spec ([`crate::source::remote::ReadSpec::File`]).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FileRead {
    format: String,
    options: HashMap<String, String>,
    files: Vec<String>,
    /// The batch's range, for errors.
    range: String,
    chunk_bytes: usize,
    storage: Vec<(String, String)>,
}

/// The batch of `files` read by the workers of `on`, as the plan pulls it: each worker's read
/// starts when the plan pulls its partition and runs ahead of its reader by a few batches.
pub(super) fn read_on_workers(
    source: &FileSource,
    on: &ReadOnWorkers,
    files: Vec<String>,
    range: String,
) -> SourceBatch {
    let counters = Arc::new(ReadCounters::default());
    match partitions_on_workers(source, on, files, range, &counters) {
        Ok(Some(reads)) => source.lazy_batch(Vec::new(), Some(reads), counters),
        Ok(None) => source.lazy_batch(Vec::new(), None, counters),
        Err(e) => {
            let failed = vec![Box::new(std::iter::once(Err(e))) as RowIter];
            source.lazy_batch(failed, None, counters)
        }
    }
}

fn partitions_on_workers(
    source: &FileSource,
    on: &ReadOnWorkers,
    files: Vec<String>,
    range: String,
    counters: &Arc<ReadCounters>,
) -> Result<Option<Arc<WorkerReads>>> {
    if files.is_empty() {
        return Ok(None);
    }
    crate::distributed::check_shared(
        &source.location.dir,
        &on.workers,
        &format!("the folder of {}", source.description),
    )?;
    let counters = Arc::clone(counters);
    let counts = move |c: ReadCounts| {
        counters.rows.fetch_add(c.rows, Ordering::Relaxed);
        counters.malformed.fetch_add(c.malformed, Ordering::Relaxed);
        counters.dropped.fetch_add(c.dropped, Ordering::Relaxed);
        counters
            .files_read
            .fetch_add(c.files_read, Ordering::Relaxed);
    };
    read_in_runs(
        on,
        &files,
        &source.parse.schema,
        |run, runs| {
            Ok(ReadSpec::File(FileRead {
                format: source.format.clone(),
                options: source.options.clone(),
                files: run.to_vec(),
                range: range.clone(),
                chunk_bytes: source.memory.read_chunk_bytes(runs),
                storage: on.storage.clone(),
            }))
        },
        Arc::new(counts),
    )
    .map(Some)
}

/// Runs a file read on this worker: its files parsed as the driver's source would (the same
/// format, options and `schema`), a piece of `chunk_bytes` at a time, each file's pieces on this
/// worker's cores; the rows as they come, then the counts.
pub(crate) fn run(spec: FileRead, schema: arrow::datatypes::SchemaRef) -> Result<ReadItems> {
    if !spec.storage.is_empty() {
        crate::storage::configure(spec.storage.iter().map(|(k, v)| (k, v)));
    }
    let parse = ParseOptions::new(&spec.format, &schema, &Options::new(&spec.options))?;
    let fan_out = std::thread::available_parallelism().map_or(1, |n| n.get());
    let counters = Arc::new(ReadCounters::default());
    let rows = format::read_files_lazy(
        Arc::new(parse),
        spec.files,
        spec.range,
        uri_to_path,
        spec.chunk_bytes,
        fan_out,
        Arc::clone(&counters),
    );
    let counts = std::iter::once_with(move || {
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        Ok(ReadItem::Counts(ReadCounts {
            rows: get(&counters.rows),
            malformed: get(&counters.malformed),
            dropped: get(&counters.dropped),
            files_read: get(&counters.files_read),
            ..Default::default()
        }))
    });
    Ok(Box::new(rows.map(|r| r.map(ReadItem::Rows)).chain(counts)))
}
