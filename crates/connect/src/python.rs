//! # The client's own Python workers: `foreachBatch`, `foreach` and listeners
//!
//! Spark Connect runs a PySpark client's Python callbacks in Python worker processes that the
//! *server* starts, with the client's own `pyspark-client` (or `pyspark`, 3.5 to 4.x) installed in
//! the interpreter named by `--python` / `PYSPARK_PYTHON` (else `python3`). Each worker connects
//! back to the server twice:
//!
//! - over loopback TCP (`PYTHON_WORKER_FACTORY_PORT`, authenticated with
//!   `PYTHON_WORKER_FACTORY_SECRET` as Spark's `SocketAuthHelper` does: the one transport the
//!   workers of every client version speak, 3.5 and 4.0 having no Unix socket), on which the
//!   server sends the pickled function and then one request per call, in PySpark's framing
//!   (big-endian `int` / `long`, UTF-8 strings and byte strings behind a 4-byte length); the
//!   worker answers each with `0`, or `-2` and the Python traceback;
//! - over Spark Connect itself (`SPARK_CONNECT_LOCAL_URL` plus `;session_id=`), attached to the
//!   client's session, for everything the function does with Spark (reading the cached batch,
//!   writing tables, ...). The worker does not talk to the server until the function uses Spark.
//!
//! | type | worker | per call |
//! |---|---|---|
//! | [`ForeachBatchWorker`] | `pyspark.sql.connect.streaming.worker.foreach_batch_worker` | the cached batch's id and the batch id |
//! | [`ListenerWorker`] | `pyspark.sql.connect.streaming.worker.listener_worker` | an event's JSON and its type |
//! | [`ForeachWriterWorker`] | Sluice's own small driver script for the pickled `foreach` writer | a partition's rows as Arrow IPC |
//!
//! Everything here is blocking std I/O, called from a query's own thread (never from the async
//! runtime). The worker's stdout and stderr are forwarded line by line to a [`LineSink`] (by
//! default the server's own stdout and stderr, as Spark's driver log shows a `print` inside
//! `foreachBatch`). A worker that does not connect, dies, or answers nonsense is an error naming
//! the interpreter, the exit status and its last stderr lines, never a hang or a panic.
//!
//! ## Wiring (the streaming service)
//!
//! - `foreach_batch.python_function`: [`ForeachBatchWorker::start`] when the query starts
//!   (`config.for_user(user_id)`, the client's session id), so a missing interpreter fails
//!   `start()`; the engine's Rust `foreach_batch` closure caches the batch under a fresh id,
//!   calls [`ForeachBatchWorker::call`] and drops the cache. While `call` blocks, the worker
//!   talks to the server: it reads the `CachedRemoteRelation`, and when the function returns it
//!   releases the DataFrame with an `ExecutePlan` of `RemoveCachedRemoteRelationCommand` *before*
//!   answering, so the gRPC service must serve the session while the query thread waits (no
//!   session lock held across `call`), and must answer that command (unknown ids included).
//! - `foreach_writer.python_function`: [`ForeachWriterWorker::start`], and the engine's
//!   `foreach_batch` closure calls [`ForeachWriterWorker::call`] with the batch's partitions.
//! - Listeners: pyspark 4.x runs them client-side (`StreamingQueryListenerBusCommand`;
//!   events from [`bus_event`] and the `query_*_event_json` functions); the `add_listener`
//!   command of PySpark 3.5 gets a [`ListenerWorker`] (`crate::listener_bus`).
//!
//! ## What differs between client versions
//!
//! The worker modules are the client's own, so the server speaks each version's protocol; the
//! worker's `pyspark.__version__` is known once it connected (see `worker::RUN_MODULE`):
//!
//! | pyspark | transport | a foreachBatch call | a failing function | listener events |
//! |---|---|---|---|---|
//! | 3.5 | TCP + secret | DataFrame id, batch id | the worker exits, its traceback on stderr: reported as the function's `PythonException` | not answered (and a failing listener ends its worker) |
//! | 4.0 | TCP + secret | the same | `-2` and the traceback | answered `0` / `-2` |
//! | 4.1, 4.2 | TCP + secret (or a Unix socket, which Sluice does not use) | the same | `-2` and the traceback | answered `0` / `-2` |
//! | 4.3 | the same | and the batch's session id (the client's) | `-2` and the traceback | answered `0` / `-2` |
//!
//! `scripts/clients` runs the quickstart and the PySpark suite's streaming tests with each.
//! - `query.stop()` while a call blocks: [`WorkerInterrupt::interrupt`] (from `interrupter()`).

mod foreach;
mod foreach_batch;
mod listener;
mod worker;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod version_tests;

use std::sync::Arc;
use std::time::Duration;

pub use foreach::ForeachWriterWorker;
pub use foreach_batch::ForeachBatchWorker;
pub use listener::{
    bus_event, query_idle_event_json, query_progress_event_json, query_started_event_json,
    query_terminated_event_json, ListenerEventKind, ListenerWorker,
};
pub use worker::WorkerInterrupt;

/// Which of the worker's output streams a forwarded line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputStream {
    /// The worker's stdout (a `print` in the user's function).
    Stdout,
    /// The worker's stderr (warnings, tracebacks of a crash).
    Stderr,
}

/// Where the worker's output lines go: called once per line, without its line break, from a
/// forwarding thread.
pub type LineSink = Arc<dyn Fn(OutputStream, &str) + Send + Sync>;

/// The sink that writes each line to the server's own stdout or stderr.
pub fn server_output() -> LineSink {
    Arc::new(|stream, line| match stream {
        OutputStream::Stdout => println!("{line}"),
        OutputStream::Stderr => eprintln!("{line}"),
    })
}

/// How the server starts Python workers.
#[derive(Clone)]
pub struct PythonConfig {
    /// The interpreter: `--python`, else `PYSPARK_PYTHON`, else `python3`.
    pub python: String,
    /// The Spark Connect URL the worker connects back to, `sc://127.0.0.1:PORT` (see
    /// [`PythonConfig::for_user`] for a session of another user than the default).
    pub connect_url: String,
    /// The token the worker sends back (`SPARK_CONNECT_AUTHENTICATE_TOKEN`), when the server
    /// wants one.
    pub token: Option<String>,
    /// How long a starting worker may take to connect and to load the function (60 s).
    pub connect_timeout: Duration,
    /// Where the worker's stdout/stderr lines go ([`server_output`] by default).
    pub lines: LineSink,
}

impl std::fmt::Debug for PythonConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonConfig")
            .field("python", &self.python)
            .field("connect_url", &self.connect_url)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl PythonConfig {
    /// The interpreter `python` (from `--python`), else `PYSPARK_PYTHON`, else `python3`; the
    /// workers connect back to `connect_url`; output goes to the server's stdout/stderr.
    pub fn from_env(python: Option<String>, connect_url: String) -> Self {
        let python = python
            .filter(|p| !p.is_empty())
            .or_else(|| {
                std::env::var("PYSPARK_PYTHON")
                    .ok()
                    .filter(|p| !p.is_empty())
            })
            .unwrap_or_else(|| "python3".to_string());
        Self {
            python,
            connect_url,
            token: None,
            connect_timeout: Duration::from_secs(60),
            lines: server_output(),
        }
    }

    /// The same, with the worker's Spark Connect session belonging to `user_id` (Spark keys
    /// sessions by user and session id; Spark's server adds `/;user_id=` the same way).
    pub fn for_user(&self, user_id: &str) -> Self {
        let base = worker_url(&self.connect_url);
        let base = base.split(';').next().unwrap_or(&base);
        let mut config = self.clone();
        config.connect_url = if user_id.is_empty() {
            base.to_string()
        } else {
            format!("{base};user_id={user_id}")
        };
        config
    }
}

/// The URL as the worker gets it in `SPARK_CONNECT_LOCAL_URL`: the client's URL parser needs the
/// `/` before parameters, and the worker appends `;session_id=...` to it.
pub(crate) fn worker_url(url: &str) -> String {
    let (base, params) = match url.split_once(';') {
        Some((base, params)) => (base, Some(params)),
        None => (url, None),
    };
    let base = base.trim_end_matches('/');
    match params {
        Some(params) => format!("{base}/;{params}"),
        None => format!("{base}/"),
    }
}
