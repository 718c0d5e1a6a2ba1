//! A source's read on a cluster's workers: the driver cuts a batch's pieces (a file source's
//! files, Kafka partitions' offset ranges, a Delta table's data files) into contiguous runs, one
//! per worker that answers (`read_in_runs`); each worker reads its run ([`run_read_task`]) with
//! the readers of the source's kind and streams the rows back as they come, then the read's
//! counts. A [`ReadTask`]'s spec names the source kind (`file`, `kafka`, or a kind a crate on top
//! of the engine registered with [`register_read`], e.g. `delta`) and what its reader needs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};

use crate::distributed::{ReadCounts, ReadItem, ReadItems, ReadOnWorkers, ReadTask};
use crate::error::{Result, SluiceError};
use crate::source::RowIter;
use crate::sync::RwLockExt;

/// A [`ReadTask`]'s spec, by source kind.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "camelCase")]
pub(crate) enum ReadSpec {
    /// A contiguous run of a file source's batch.
    File(super::file::remote::FileRead),
    /// Kafka partitions' offset ranges.
    #[cfg(feature = "kafka")]
    Kafka(super::kafka::remote::KafkaRead),
    /// A read of a kind registered with [`register_read`]: its spec is that read's own text.
    Registered { kind: String, spec: String },
}

impl ReadSpec {
    /// The spec as a [`ReadTask`]'s text.
    pub(crate) fn to_text(&self) -> Result<String> {
        serde_json::to_string(self)
            .map_err(|e| SluiceError::internal(format!("a read task's spec: {e}")))
    }
}

/// How a worker runs a registered read: its spec (the text the driver made) and the rows'
/// schema; the rows as they are read, then the read's counts.
pub type ReadFn = fn(&str, SchemaRef) -> Result<ReadItems>;

fn registered() -> &'static RwLock<HashMap<String, ReadFn>> {
    static READS: OnceLock<RwLock<HashMap<String, ReadFn>>> = OnceLock::new();
    READS.get_or_init(Default::default)
}

/// Lets this process's workers run reads of `kind` (a source of a crate on top of the engine:
/// `sluice_delta::register()` registers `delta`).
pub fn register_read(kind: &str, read: ReadFn) {
    registered()
        .write_unpoisoned()
        .insert(kind.to_string(), read);
}

/// Runs a [`ReadTask`] on this worker: its rows as they are read, then its counts. A worker of
/// a build without the source kind (Kafka without the feature `kafka`, Delta without `delta`)
/// refuses it by name.
pub fn run_read_task(task: ReadTask) -> Result<ReadItems> {
    let spec: ReadSpec = serde_json::from_str(&task.spec).map_err(|e| {
        SluiceError::not_supported_yet(format!(
            "a read this worker cannot run ({e}): start the workers from the same build as the \
             driver"
        ))
    })?;
    match spec {
        ReadSpec::File(f) => super::file::remote::run(f, task.schema),
        #[cfg(feature = "kafka")]
        ReadSpec::Kafka(k) => super::kafka::remote::run(k),
        ReadSpec::Registered { kind, spec } => {
            let read = registered().read_unpoisoned().get(&kind).copied();
            let read = read.ok_or_else(|| {
                SluiceError::not_supported_yet(format!(
                    "a {kind} read on a worker whose build cannot read {kind}: start the workers \
                     from the same build as the driver (with the feature `{kind}`)"
                ))
            })?;
            read(&spec, task.schema)
        }
    }
}

/// Reads `items` (a batch's pieces, in order) on the workers of `on`: cut into contiguous runs,
/// one per worker that answers (at most one per piece), each run's spec made by `spec` from the
/// run and the number of runs (the workers are probed once, here). Each
/// run's rows are one partition, in order, read as the plan pulls them (each worker's read starts
/// now and runs a few batches ahead); `counts` gets each run's counts after its last rows, and
/// the query's record of its tasks the run's time.
pub(crate) fn read_in_runs<T>(
    on: &ReadOnWorkers,
    items: &[T],
    schema: &SchemaRef,
    spec: impl Fn(&[T], usize) -> Result<ReadSpec>,
    counts: Arc<dyn Fn(ReadCounts) + Send + Sync>,
) -> Result<Vec<RowIter>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let workers = on.cluster.answering(&on.workers)?;
    let per = items.len().div_ceil(workers.len().min(items.len()).max(1));
    let runs = items.len().div_ceil(per);
    // Each read starts at the next worker, so batches of fewer runs than workers (a file each)
    // spread over them all, as Spark's scheduler spreads tasks over its executors.
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let first = NEXT.fetch_add(1, Ordering::Relaxed) % workers.len().max(1);
    items
        .chunks(per)
        .zip(workers.iter().cycle().skip(first))
        .map(|(run, worker)| {
            let task = ReadTask {
                spec: spec(run, runs)?.to_text()?,
                schema: schema.clone(),
            };
            let started = Instant::now();
            let items = on.cluster.read_files(worker, task)?;
            let (log, worker, counts) = (on.tasks.clone(), worker.clone(), Arc::clone(&counts));
            let rows: RowIter = Box::new(items.filter_map(move |item| match item {
                Ok(ReadItem::Rows(rows)) => Some(Ok(rows)),
                Ok(ReadItem::Counts(c)) => {
                    if let Some(log) = &log {
                        log.ran(&worker, started.elapsed());
                    }
                    counts(c);
                    None
                }
                Err(e) => Some(Err(e)),
            }));
            Ok(rows)
        })
        .collect()
}

/// `read_in_runs` for a source of a crate on top of the engine: each run read on its worker by
/// the read registered as `kind` ([`register_read`]), from the text `spec` makes of the run.
pub fn read_registered_in_runs<T>(
    kind: &str,
    on: &ReadOnWorkers,
    items: &[T],
    schema: &SchemaRef,
    spec: impl Fn(&[T]) -> Result<String>,
    counts: Arc<dyn Fn(ReadCounts) + Send + Sync>,
) -> Result<Vec<RowIter>> {
    read_in_runs(
        on,
        items,
        schema,
        |run, _| {
            Ok(ReadSpec::Registered {
                kind: kind.to_string(),
                spec: spec(run)?,
            })
        },
        counts,
    )
}
