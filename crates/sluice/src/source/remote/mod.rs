//! A source's read on a cluster's workers: the driver cuts a batch's pieces (a file source's
//! files, Kafka partitions' offset ranges, a Delta table's data files) into contiguous runs, one
//! per worker that answers (`read_in_runs`); each worker reads its run ([`run_read_task`]) with
//! the readers of the source's kind and streams the rows back as they come, then the read's
//! counts. A [`ReadTask`]'s spec names the source kind (`file`, `kafka`, `rate`, or a kind a
//! crate on top of the engine registered with [`register_read`], e.g. `delta`) and what its
//! reader needs.

mod exec;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};

use crate::distributed::{ReadCounts, ReadItem, ReadItems, ReadOnWorkers, ReadRoute, ReadTask};
use crate::error::{Result, SluiceError};
use crate::operators::watermark::StatsHandle;
use crate::sync::{MutexExt, RwLockExt};
use crate::types::RowIter;

pub(crate) use exec::{reads_under, WorkerReadTable};
pub use exec::{run_read_task_under, ReadRowsExec, WorkerReadExec};

/// A [`ReadTask`]'s spec, by source kind.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "camelCase")]
pub(crate) enum ReadSpec {
    /// A contiguous run of a file source's batch.
    File(super::file::remote::FileRead),
    /// Kafka partitions' offset ranges.
    #[cfg(feature = "kafka")]
    Kafka(crate::kafka::source::remote::KafkaRead),
    /// Slices of a rate source's micro-batch, generated on the worker.
    Rate(super::rate::RateRead),
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

/// Runs a [`ReadTask`] on this worker: its rows as they are read (the columns of its
/// projection), then its counts. A worker of a build without the source kind (Kafka without the
/// feature `kafka`, Delta without `delta`) refuses it by name. (A task with a plan over its rows
/// runs with [`run_read_task_under`].)
pub fn run_read_task(task: ReadTask) -> Result<ReadItems> {
    let items = read_items(task.spec, task.schema)?;
    Ok(match task.projection {
        None => items,
        Some(columns) => Box::new(items.map(move |item| match item {
            Ok(ReadItem::Rows(rows)) => Ok(ReadItem::Rows(rows.project(&columns)?)),
            other => other,
        })),
    })
}

fn read_items(spec: String, schema: SchemaRef) -> Result<ReadItems> {
    let spec: ReadSpec = serde_json::from_str(&spec).map_err(|e| {
        SluiceError::not_supported_yet(format!(
            "a read this worker cannot run ({e}): start the workers from the same build as the \
             driver"
        ))
    })?;
    match spec {
        ReadSpec::File(f) => super::file::remote::run(f, schema),
        ReadSpec::Rate(r) => super::rate::run_on_worker(r),
        #[cfg(feature = "kafka")]
        ReadSpec::Kafka(k) => crate::kafka::source::remote::run(k),
        ReadSpec::Registered { kind, spec } => {
            let read = registered().read_unpoisoned().get(&kind).copied();
            let read = read.ok_or_else(|| {
                SluiceError::not_supported_yet(format!(
                    "a {kind} read on a worker whose build cannot read {kind}: start the workers \
                     from the same build as the driver (with the feature `{kind}`)"
                ))
            })?;
            read(&spec, schema)
        }
    }
}

/// Reads `items` (a batch's pieces, in order) on the workers of `on`: cut into contiguous runs,
/// one per worker that answers (at most one per piece), each run's spec made by `spec` from the
/// run and the number of runs (the workers are probed once, here). Each run's rows are one
/// partition, in order, read when the plan pulls them ([`WorkerReads`]); `counts` gets each
/// run's counts after its last rows, and the query's record of its tasks the run's time.
pub(crate) fn read_in_runs<T>(
    on: &ReadOnWorkers,
    items: &[T],
    schema: &SchemaRef,
    spec: impl Fn(&[T], usize) -> Result<ReadSpec>,
    counts: Arc<dyn Fn(ReadCounts) + Send + Sync>,
) -> Result<Arc<WorkerReads>> {
    let mut runs = Vec::new();
    if !items.is_empty() {
        let workers = on.cluster.answering(&on.workers)?;
        let per = items.len().div_ceil(workers.len().min(items.len()).max(1));
        let count = items.len().div_ceil(per);
        // Each read starts at the next worker, so batches of fewer runs than workers (a file
        // each) spread over them all, as Spark's scheduler spreads tasks over its executors.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let first = NEXT.fetch_add(1, Ordering::Relaxed) % workers.len().max(1);
        for (run, worker) in items.chunks(per).zip(workers.iter().cycle().skip(first)) {
            let task = ReadTask {
                spec: spec(run, count)?.to_text()?,
                schema: schema.clone(),
                projection: None,
                above: Vec::new(),
                route: None,
            };
            runs.push(Some((worker.clone(), task)));
        }
    }
    Ok(Arc::new(WorkerReads {
        on: on.clone(),
        schema: schema.clone(),
        runs: Mutex::new(runs),
        counts,
        context: Mutex::new(None),
        route: Mutex::new(None),
    }))
}

/// A batch's read on the workers, a run per worker, each started when the plan pulls its
/// partition: plainly ([`WorkerReads::partitions`]), or as the leaf of the batch's plan
/// ([`WorkerReadExec`]), which a cluster's placement may give the columns the plan scans and the
/// stateless plan over them, to run on the worker with the read.
pub struct WorkerReads {
    on: ReadOnWorkers,
    /// The source's rows' schema.
    schema: SchemaRef,
    /// Per run, its worker and its task, taken when it starts.
    runs: Mutex<Vec<Option<(String, ReadTask)>>>,
    counts: Arc<dyn Fn(ReadCounts) + Send + Sync>,
    /// What a run's errors say they were reading (the batch, the source, its range).
    context: Mutex<Option<String>>,
    /// Where the runs send their rows instead of to the driver, and the count of the rows
    /// their routes dropped as late ([`WorkerReads::route_to`]).
    route: Mutex<Option<(ReadRoute, Arc<AtomicU64>)>>,
}

impl std::fmt::Debug for WorkerReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WorkerReads({} runs)", self.runs())
    }
}

impl WorkerReads {
    /// The number of runs (the plan's partitions of the read).
    pub fn runs(&self) -> usize {
        self.runs.lock_unpoisoned().len()
    }

    /// The source's rows' schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Errors of the runs say they happened reading `context`.
    pub(crate) fn set_context(&self, context: String) {
        *self.context.lock_unpoisoned() = Some(context);
    }

    /// Each run sends its rows to the owners of a stateful operator's state partitions, as
    /// `route` says, and only its counts to the driver; `dropped` adds up the rows the routes
    /// dropped as late. Set before the runs start.
    pub(crate) fn route_to(&self, route: ReadRoute, dropped: Arc<AtomicU64>) {
        *self.route.lock_unpoisoned() = Some((route, dropped));
    }

    /// Starts run `run` on its worker: the columns `projection` of its rows, through the plan
    /// `above` (its bytes; empty: none), whose watermark nodes' statistics go to `watermarks`
    /// when the read ends. A run starts once.
    pub(crate) fn start(
        &self,
        run: usize,
        projection: Option<Vec<usize>>,
        above: Vec<u8>,
        watermarks: Vec<StatsHandle>,
    ) -> Result<RowIter> {
        let context = self.context.lock_unpoisoned().clone();
        let in_context = move |e: SluiceError| match &context {
            Some(c) => e.context(c),
            None => e,
        };
        let taken = self
            .runs
            .lock_unpoisoned()
            .get_mut(run)
            .and_then(Option::take);
        let (worker, mut task) = taken.ok_or_else(|| {
            SluiceError::internal(format!(
                "run {run} of a read on the workers was started twice in one batch"
            ))
        })?;
        task.projection = projection;
        task.above = above;
        let route = self.route.lock_unpoisoned().clone();
        let dropped = route.as_ref().map(|(_, d)| Arc::clone(d));
        task.route = route.map(|(r, _)| r);
        let started = Instant::now();
        let items = self
            .on
            .cluster
            .read_files(&worker, task)
            .map_err(&in_context)?;
        let (log, counts) = (self.on.tasks.clone(), Arc::clone(&self.counts));
        Ok(Box::new(items.filter_map(move |item| match item {
            Ok(ReadItem::Rows(rows)) => Some(Ok(rows)),
            Ok(ReadItem::Counts(c)) => {
                if let Some(log) = &log {
                    log.ran(&worker, started.elapsed());
                }
                for (seen, handle) in c.event_times.iter().zip(&watermarks) {
                    handle.lock_unpoisoned().merge(seen);
                }
                if let Some(d) = &dropped {
                    d.fetch_add(c.dropped_by_watermark, Ordering::Relaxed);
                }
                counts(c);
                None
            }
            Err(e) => Some(Err(in_context(e))),
        })))
    }

    /// Every run as a partition of its rows as read (all columns, no plan over them), started
    /// when first pulled.
    pub fn partitions(self: &Arc<Self>) -> Vec<RowIter> {
        (0..self.runs())
            .map(|run| {
                let reads = Arc::clone(self);
                let mut rows: Option<RowIter> = None;
                let mut ended = false;
                Box::new(std::iter::from_fn(move || {
                    if ended {
                        return None;
                    }
                    if rows.is_none() {
                        match reads.start(run, None, Vec::new(), Vec::new()) {
                            Ok(r) => rows = Some(r),
                            Err(e) => {
                                ended = true;
                                return Some(Err(e));
                            }
                        }
                    }
                    rows.as_mut().and_then(Iterator::next)
                })) as RowIter
            })
            .collect()
    }
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
) -> Result<Arc<WorkerReads>> {
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
