//! `foreachBatch`: the client's `pyspark.sql.connect.streaming.worker.foreach_batch_worker`
//! runs the pickled function on each batch, which it reads back over Spark Connect as the
//! `CachedRemoteRelation` the server cached the batch under.
//!
//! Protocol (after the worker's pid): the server sends the client's Python version, the session
//! id and the pickled function (`PythonUdf.command`, cloudpickled by the client's
//! `DataStreamWriter.foreachBatch`); the worker answers `0`. Then per batch: the cached
//! DataFrame's id (UTF-8) and the batch id (`long`), and from pyspark 4.3 on the id of the session
//! the batch runs in (Spark 4.3 clones the query's session per batch; Sluice runs every batch in
//! the client's session, so it sends that one's id, where the cached DataFrame lives); the
//! worker answers `0`, or `-2` and the traceback, after which it exits (its loop is inside the
//! `try`), so a failed function leaves the worker unusable, as in Spark, where the query stops.
//! (pyspark 3.5's worker catches nothing: it exits with the traceback on stderr, which
//! `Worker` turns into the same error.)

use crate::error::Result;
use crate::proto;

use super::worker::{handshake, Frame, Launch, Worker, WorkerInterrupt};
use super::PythonConfig;

/// The worker module the client ships for `foreachBatch`.
pub(super) const FOREACH_BATCH_MODULE: &str =
    "pyspark.sql.connect.streaming.worker.foreach_batch_worker";

/// A running `foreachBatch` worker: one per streaming query, for the query's lifetime. Dropping
/// it closes the socket and kills and reaps the process.
pub struct ForeachBatchWorker {
    worker: Worker,
    /// The client's session id, which pyspark 4.3's worker reads with every batch.
    session_id: String,
}

impl std::fmt::Debug for ForeachBatchWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeachBatchWorker").finish_non_exhaustive()
    }
}

impl ForeachBatchWorker {
    /// A handle that kills this worker from another thread (`query.stop()` while a call
    /// blocks): the blocked call then returns an error saying the query was stopped.
    pub fn interrupter(&self) -> WorkerInterrupt {
        self.worker.interrupter()
    }

    /// Starts the worker (`python -m pyspark.sql.connect.streaming.worker.foreach_batch_worker`)
    /// for the client session `session_id` and hands it the pickled `function`
    /// (`WriteStreamOperationStart.foreach_batch.python_function`). Errors: the interpreter or
    /// pyspark-client missing, no connection within the timeout, a Python version mismatch
    /// (`PYTHON_VERSION_MISMATCH` with the worker's message), the function failing to unpickle.
    pub fn start(
        config: &PythonConfig,
        session_id: &str,
        function: &proto::PythonUdf,
    ) -> Result<Self> {
        let launch = Launch::Module(FOREACH_BATCH_MODULE);
        let mut worker = Worker::spawn(config, "foreachBatch", launch)?;
        let rest = Frame::default().utf(session_id)?.bytes(&function.command)?;
        handshake(&mut worker, config, &function.python_ver, rest)?;
        Ok(Self {
            worker,
            session_id: session_id.to_string(),
        })
    }

    /// Runs the function on the batch the server cached under `df_id` (the worker reads it back
    /// as a `CachedRemoteRelation`), with `batch_id`. Returns when the function returned; an
    /// exception in it is an error (`PythonException`, `PYTHON_EXCEPTION`) with the Python
    /// traceback in its message; a worker that died is an error with its exit status and last
    /// stderr lines.
    pub fn call(&mut self, df_id: &str, batch_id: i64) -> Result<()> {
        let mut frame = Frame::default().utf(df_id)?.long(batch_id);
        if self.sends_session_per_batch() {
            frame = frame.utf(&self.session_id)?;
        }
        self.worker
            .request(&frame.0, &format!("batch {batch_id}"), None)
    }

    /// Whether each batch also carries the session id it runs in (pyspark 4.3 on).
    pub fn sends_session_per_batch(&self) -> bool {
        !self.worker.pyspark_older_than(4, 3)
    }

    /// The interpreter the worker runs on.
    pub fn python(&self) -> &str {
        self.worker.python()
    }
}
