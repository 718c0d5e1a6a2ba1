//! A query on a cluster (`sluice.distributed.workers`): the engine's hook for running each
//! batch's plan on workers, as Spark's driver runs a micro-batch's tasks on executors. The query
//! loop (offsets, commits, watermark, progress) stays in the process that started the query.
//!
//! The engine does not know how plans travel: a [`Cluster`] registered with
//! [`register_cluster`] (the `sluice-distributed` crate, on `datafusion-distributed`) turns the
//! session's DataFusion state into one that plans a batch over the workers. Without one, a query
//! that names workers fails before its first batch, with the build that has one.

use std::sync::{Arc, OnceLock, RwLock};

use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::Field;
use datafusion::common::DFSchemaRef;
use datafusion::execution::SessionState;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;

use crate::conf::DISTRIBUTED_WORKERS;
use crate::error::{class, Result, SluiceError};
use crate::progress::WorkerProgress;
use crate::sync::RwLockExt;

/// A way to run a batch's plan on workers.
pub trait Cluster: std::fmt::Debug + Send + Sync {
    /// How a query's batches are planned when it runs on `workers` (the `host:port`s of
    /// [`DISTRIBUTED_WORKERS`]): the DataFusion state, built from `local` (the session's), and
    /// the query's record of the tasks they run.
    fn batch_state(&self, local: SessionState, workers: &[String]) -> Result<OnCluster>;

    /// Whether the batch that failed with `error` on `workers` lost one of them: the batch is
    /// then run again, with the same offsets, on the workers that answer.
    fn is_worker_lost(&self, error: &SluiceError, workers: &[String]) -> bool;

    /// The workers of `workers` that answer now, in the order given: a stateful operator's
    /// state partitions are shared out among them, in that order, for one batch.
    /// Fails when none answers.
    fn answering(&self, workers: &[String]) -> Result<Vec<String>>;

    /// Whether every function of `exprs` is, by name, the same function on a worker, so that a
    /// stateful operator built from them there computes what it computes here.
    fn exprs_travel(&self, exprs: &[Expr]) -> bool;

    /// Starts one [`StateTask`] on `worker` (a `host:port` of [`Cluster::answering`]): its rows
    /// go to the worker as they are routed, and its output comes back once they all went
    /// ([`StateTaskRun`]). A worker runs it with [`crate::run_state_task`].
    fn start_state_task(&self, worker: &str, task: StateTask) -> Result<Box<dyn StateTaskRun>>;

    /// Starts reading a [`ReadTask`] on `worker`: its rows as the worker decodes them, then its
    /// counts. A worker runs it with [`crate::run_read_task`].
    fn read_files(&self, worker: &str, task: ReadTask) -> Result<ReadItems>;
}

/// A source's read on a worker: the files of one task and how to parse them, and what the
/// worker does with the rows before it sends them.
#[derive(Debug, Clone)]
pub struct ReadTask {
    /// The files, the format and its options (JSON, read by [`crate::run_read_task`]).
    pub spec: String,
    /// The rows' schema.
    pub schema: arrow::datatypes::SchemaRef,
    /// The columns of the rows the plan scans (all when none).
    pub projection: Option<Vec<usize>>,
    /// The stateless plan over the scanned rows that runs with the read, as the wire carries it
    /// (empty: the rows go as read). Its leaf is a
    /// [`ReadRowsExec`](crate::source::remote::ReadRowsExec); a worker decodes it and runs it
    /// with [`crate::source::remote::run_read_task_under`].
    pub above: Vec<u8>,
    /// Where the rows go instead of back to the driver: a stateful operator's input, routed by
    /// state partition to the workers that own them ([`crate::route_read`]); `None`: back to
    /// the driver.
    pub route: Option<ReadRoute>,
}

/// A read's rows routed from the worker that read them to the owners of the state partitions
/// of a stateful operator's input (Spark's shuffle by key, map side): the read then sends the
/// driver only its counts.
#[derive(Debug, Clone)]
pub struct ReadRoute {
    /// The operator's task (its node, output mode, partitions and batch), as its owners run it;
    /// the reading worker builds the operator from it to route its rows.
    pub task: StateTask,
    /// The operator's input the rows are.
    pub input: usize,
    /// Per state task, in order, the worker running it and the task's [`StateTask::exchange`].
    pub owners: Vec<(String, String)>,
}

/// What a [`ReadTask`] gives, in order: rows, then once its counts.
#[derive(Debug, Clone)]
pub enum ReadItem {
    /// Rows, as the worker decoded them.
    Rows(RecordBatch),
    /// The read's counts, after its last rows.
    Counts(ReadCounts),
}

/// The items of a [`ReadTask`], as they come.
pub type ReadItems = Box<dyn Iterator<Item = Result<ReadItem>> + Send>;

/// A read's counts (the source's metrics `numFilesRead`, `numMalformedRecords`,
/// `numDroppedMalformedRecords`, and its input rows).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadCounts {
    /// Rows read.
    pub rows: u64,
    /// Malformed records seen.
    pub malformed: u64,
    /// Malformed records dropped (`DROPMALFORMED`).
    pub dropped: u64,
    /// Files read.
    pub files_read: u64,
    /// The event-time statistics of each watermark node of the plan that ran with the read
    /// ([`ReadTask::above`]), depth first.
    #[serde(default)]
    pub event_times: Vec<EventTimeStats>,
    /// Rows the read's route dropped as later than the watermark ([`ReadTask::route`]: the
    /// operator's `numRowsDroppedByWatermark`).
    #[serde(default)]
    pub dropped_by_watermark: u64,
}

pub use crate::types::EventTimeStats;

/// How a query's sources read on a cluster (`Source::read_on_workers`).
#[derive(Debug, Clone)]
pub struct ReadOnWorkers {
    /// The cluster.
    pub cluster: Arc<dyn Cluster>,
    /// Its workers (`host:port`), as configured.
    pub workers: Vec<String>,
    /// The session's object store options, for the workers to reach the files.
    pub storage: Vec<(String, String)>,
    /// The query's record of its tasks (a read is one).
    pub tasks: Option<Arc<dyn WorkerTasks>>,
}

/// A stateful operator's batch on one worker: the state partitions it owns, the rows of those
/// partitions, and what it needs to build the operator. Its parts are what a [`Cluster`]
/// carries: `spec` is the engine's own text, `schemas` and `exprs` are DataFusion's logical
/// schemas and expressions (the operator's node, for the worker to build it as the driver did).
#[derive(Debug, Clone)]
pub struct StateTask {
    /// The operator, its state and the batch (JSON, read by [`crate::run_state_task`]).
    pub spec: String,
    /// The logical schemas of the operator's node (its input's, its output's).
    pub schemas: Vec<DFSchemaRef>,
    /// The expression lists of the operator's node (an aggregation's keys and aggregates).
    pub exprs: Vec<Vec<Expr>>,
    /// When the rows come from the workers that read them ([`ReadRoute`]), this task's name
    /// for them to send to (unique to the batch's attempt); empty: the driver sends them.
    pub exchange: String,
    /// Per input, how many senders route rows to the task directly (each ends its rows, and
    /// the input ends when they all did); empty: the driver sends them.
    pub senders: Vec<usize>,
}

/// A [`StateTask`] running on a worker, as the driver sees it: the rows of the task's
/// partitions go to it input by input (every row of input 0, then of input 1, as the operator
/// takes them) while the driver routes them, a few batches ahead of the worker at most; then the
/// task's output rows come back, then its progress.
pub trait StateTaskRun: Send {
    /// Sends `rows` of input `input` (inputs in order); waits while the worker is behind.
    /// Fails when the task failed (then [`StateTaskRun::finish`] says why).
    fn send(&mut self, input: usize, rows: RecordBatch) -> Result<()>;

    /// Ends the task's input: the worker runs the rest of its batch and commits it. Only after
    /// this does the worker commit; a task dropped before it commits nothing.
    fn end_input(&mut self);

    /// Ends the task's input (if not ended yet), then hands each of its output rows to `output`
    /// as they come (at least one batch, which carries their schema);
    /// returns the task's answer (its progress, as [`crate::run_state_task`] made it), or the
    /// error the task failed with.
    fn finish(self: Box<Self>, output: &mut dyn FnMut(RecordBatch) -> Result<()>)
        -> Result<String>;
}

/// A stateful task's rows as a worker receives them: `(input, rows)`, inputs in order.
pub type StateTaskRows = Box<dyn Iterator<Item = Result<(usize, RecordBatch)>> + Send>;

/// A query's batches on a cluster: the state they are planned with and their tasks' record.
#[derive(Debug)]
pub struct OnCluster {
    /// The DataFusion state every plan of the query's batches is made with.
    pub state: SessionState,
    /// The tasks those plans ran on the workers.
    pub tasks: Arc<dyn WorkerTasks>,
}

/// A query's record of the tasks its batches ran on workers, for its progress (`workers`).
pub trait WorkerTasks: std::fmt::Debug + Send + Sync {
    /// The tasks run since the last call, per worker, by address.
    fn take(&self) -> Vec<WorkerProgress>;

    /// Records a task `worker` ran, which took `took` (a stateful operator's task).
    fn ran(&self, worker: &str, took: Duration);
}

fn cluster() -> &'static RwLock<Option<Arc<dyn Cluster>>> {
    static CLUSTER: OnceLock<RwLock<Option<Arc<dyn Cluster>>>> = OnceLock::new();
    CLUSTER.get_or_init(Default::default)
}

/// Sets the process's [`Cluster`] (`sluice_distributed::register()` sets its own).
pub fn register_cluster(c: Arc<dyn Cluster>) {
    *cluster().write_unpoisoned() = Some(c);
}

/// The registered cluster, when `workers` names any.
pub(crate) fn for_workers(workers: &[String]) -> Result<Option<Arc<dyn Cluster>>> {
    if workers.is_empty() {
        return Ok(None);
    }
    match cluster().read_unpoisoned().clone() {
        Some(c) => Ok(Some(c)),
        None => Err(SluiceError::query(
            class::INVALID_CONF_VALUE,
            format!(
                "{DISTRIBUTED_WORKERS} is set ({}), but this build of Sluice cannot run a batch \
                 on workers; use the `sluice` binary (its default build has workers; a lean \
                 build needs the feature `distributed`), or unset \
                 {DISTRIBUTED_WORKERS} to run the query in this process",
                workers.join(",")
            ),
        )),
    }
}

/// Refuses `path` (what `what` is: the checkpoint, a source's folder) on a local disk when a
/// worker of `workers` is on another host: each worker would read and write a folder of its own
/// machine under that name, and a state partition moved between workers would lose what the
/// other wrote. Workers on this host (loopback addresses, `localhost`) share its disk.
pub fn check_shared(path: &std::path::Path, workers: &[String], what: &str) -> Result<()> {
    if crate::storage::is_remote(path) {
        return Ok(());
    }
    let elsewhere: Vec<&String> = workers.iter().filter(|w| !on_this_host(w)).collect();
    if elsewhere.is_empty() {
        return Ok(());
    }
    Err(SluiceError::query(
        class::INVALID_CONF_VALUE,
        format!(
            "{what} {} is on this machine's disk, but the workers {} of {DISTRIBUTED_WORKERS} are \
             on other hosts and cannot reach it: put it on storage every worker reaches \
             (s3a://, gs://, abfss://), or run the workers on this host",
            path.display(),
            elsewhere
                .iter()
                .map(|w| w.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ),
    ))
}

/// Whether a worker's `host:port` is this host (a loopback address or `localhost`).
fn on_this_host(worker: &str) -> bool {
    let host = worker
        .rsplit_once(':')
        .map_or(worker, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A `GenerateExec` (Spark's generators: `explode`, `posexplode`, `inline`, `stack`,
/// `json_tuple`, their `_outer` forms) as the parts a [`Cluster`] carries to its workers
/// ([`crate::generate_parts`], [`crate::generate_exec`]).
#[derive(Debug, Clone)]
pub struct GenerateParts {
    /// `explode`, `posexplode`, `inline`, `stack` or `json_tuple`.
    pub generator: String,
    /// `stack`'s row count (0 for the others).
    pub stack_rows: usize,
    /// The `_outer` form: a row whose generator gives nothing keeps one row of nulls.
    pub outer: bool,
    /// The generator's arguments, over the node's input.
    pub args: Vec<Arc<dyn PhysicalExpr>>,
    /// The input columns kept in the output, by index.
    pub kept: Vec<usize>,
    /// The generated columns, after the kept ones.
    pub generated: Vec<Field>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_folder_is_refused_only_when_a_worker_is_on_another_host() {
        let local = std::path::Path::new("/tmp/ck");
        let here = [
            "127.0.0.1:7078".to_string(),
            "localhost:7079".into(),
            "[::1]:7080".into(),
        ];
        assert!(check_shared(local, &here, "the checkpoint").is_ok());
        let there = ["127.0.0.1:7078".to_string(), "10.0.0.7:7078".into()];
        let err = check_shared(local, &there, "the checkpoint").unwrap_err();
        assert!(err.to_string().contains("10.0.0.7:7078") && err.to_string().contains("s3a://"));
        assert!(check_shared(std::path::Path::new("s3a://b/ck"), &there, "the checkpoint").is_ok());
    }
}
