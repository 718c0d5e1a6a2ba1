//! Running queries: the only code that knows the *order* of things in a batch.
//!
//! - `mod.rs`: the [`StreamingQuery`] handle (Spark's `StreamingQuery`) and the state it shares
//!   with the query's thread.
//! - `writer.rs`: [`DataStreamWriter`], which checks a query, resolves its sink, checkpoint and
//!   conf, and starts it.
//! - `execution/`: the executions (Spark's `StreamExecution` and its two subclasses):
//!   - `core.rs`: `StreamExecution`, what both share: the checkpoint (lock, torn tail,
//!     metadata, logs), the typed and pinned conf, the restart shape check, source and sink
//!     creation, the query thread and its lifecycle, status;
//!   - `progress.rs`: `ProgressReporter`, the `StreamingQueryProgress` of each trigger;
//!   - `microbatch.rs`: [`MicroBatchExecution`], the micro-batch loop (construct, WAL,
//!     getBatch, addBatch, commit, progress);
//!   - `continuous.rs`: [`ContinuousExecution`], the continuous loop (poll, end the epoch).
//!
//! Planning is not here: the drivers run plans built in `plan/` (`plan::staged` per batch,
//! `plan::continuous` once).

mod execution;
mod writer;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use execution::{ContinuousExecution, MicroBatchExecution};
pub use writer::DataStreamWriter;

pub use crate::types::{OutputMode, Trigger};

use crate::error::{Result, SluiceError};
use crate::progress::StreamingQueryProgress;
use crate::sync::MutexExt;

/// What the query is doing right now (Spark's `StreamingQueryStatus`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamingQueryStatus {
    /// `message`: what the query is doing, e.g. `Waiting for data to arrive` or `Stopped`.
    pub message: String,
    /// `isDataAvailable`: whether the current trigger has new data to process.
    pub is_data_available: bool,
    /// `isTriggerActive`: whether a trigger is running right now.
    pub is_trigger_active: bool,
}

/// How many progress reports `recent_progress` keeps (`spark.sql.streaming.numRecentProgressUpdates`).
pub const NUM_RECENT_PROGRESS: usize = 100;

#[derive(Debug)]
pub(crate) struct SharedState {
    pub active: bool,
    pub exception: Option<SluiceError>,
    pub progress: VecDeque<StreamingQueryProgress>,
    pub status: StreamingQueryStatus,
    /// Start time of the latest trigger that found no new data.
    pub last_idle_trigger_start: Option<Instant>,
}

/// State shared between the query's thread and its handles.
#[derive(Debug)]
pub(crate) struct QueryShared {
    pub id: String,
    pub run_id: String,
    pub name: Option<String>,
    pub trigger: Trigger,
    pub stop_requested: AtomicBool,
    pub state: Mutex<SharedState>,
    pub changed: Condvar,
}

impl QueryShared {
    pub(crate) fn new(id: String, run_id: String, name: Option<String>, trigger: Trigger) -> Self {
        Self {
            id,
            run_id,
            name,
            trigger,
            stop_requested: AtomicBool::new(false),
            state: Mutex::new(SharedState {
                active: true,
                exception: None,
                progress: VecDeque::new(),
                status: StreamingQueryStatus {
                    message: "Initializing sources".into(),
                    is_data_available: false,
                    is_trigger_active: false,
                },
                last_idle_trigger_start: None,
            }),
            changed: Condvar::new(),
        }
    }
    pub(crate) fn lock(&self) -> MutexGuard<'_, SharedState> {
        self.state.lock_unpoisoned()
    }
    pub(crate) fn update(&self, f: impl FnOnce(&mut SharedState)) {
        let mut st = self.lock();
        f(&mut st);
        drop(st);
        self.changed.notify_all();
    }
    pub(crate) fn stopping(&self) -> bool {
        self.stop_requested.load(Ordering::SeqCst)
    }
    /// Sleeps up to `d`, waking early when the query is asked to stop.
    pub(crate) fn sleep(&self, d: Duration) {
        let deadline = Instant::now() + d;
        let mut st = self.lock();
        while !self.stopping() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            st = match self.changed.wait_timeout(st, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

/// A handle to a running (or finished) streaming query (Spark's `StreamingQuery`).
#[derive(Clone)]
pub struct StreamingQuery {
    shared: Arc<QueryShared>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
    explain: Arc<String>,
}

impl std::fmt::Debug for StreamingQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingQuery")
            .field("id", &self.shared.id)
            .field("run_id", &self.shared.run_id)
            .field("name", &self.shared.name)
            .finish()
    }
}

impl StreamingQuery {
    /// The query's trigger.
    pub fn trigger(&self) -> Trigger {
        self.shared.trigger
    }
    pub(crate) fn new(shared: Arc<QueryShared>, thread: JoinHandle<()>, explain: String) -> Self {
        Self {
            shared,
            thread: Arc::new(Mutex::new(Some(thread))),
            explain: Arc::new(explain),
        }
    }
    /// The query id, stable across restarts from the same checkpoint.
    pub fn id(&self) -> &str {
        &self.shared.id
    }
    /// The id of this run; new at every start.
    pub fn run_id(&self) -> &str {
        &self.shared.run_id
    }
    /// The query's name (`queryName`), if it has one.
    pub fn name(&self) -> Option<&str> {
        self.shared.name.as_deref()
    }
    /// Whether the query is still running (false once it stopped or failed).
    pub fn is_active(&self) -> bool {
        self.shared.lock().active
    }
    /// The error that stopped the query, if it failed.
    pub fn exception(&self) -> Option<SluiceError> {
        self.shared.lock().exception.clone()
    }
    /// Blocks until the query stops; returns its error if it failed.
    pub fn await_termination(&self) -> Result<()> {
        let mut st = self.shared.lock();
        while st.active {
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        let res = match &st.exception {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        };
        drop(st);
        self.join();
        res
    }
    /// Like `await_termination` with a limit: `Ok(true)` if the query stopped in time.
    pub fn await_termination_timeout(&self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        while st.active {
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            st = match self.shared.changed.wait_timeout(st, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        if let Some(e) = &st.exception {
            return Err(e.clone());
        }
        drop(st);
        self.join();
        Ok(true)
    }
    /// Stops the query after the current batch (a batch in flight finishes or is replayed on
    /// restart) and waits for its thread.
    pub fn stop(&self) {
        self.shared.stop_requested.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        let mut st = self.shared.lock();
        while st.active {
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(st);
        self.join();
    }
    fn join(&self) {
        let handle = self.thread.lock_unpoisoned().take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
    /// Blocks until every row available when called has been processed and committed (or the
    /// query stopped). Returns the query's error if it failed meanwhile. For tests.
    pub fn process_all_available(&self) -> Result<()> {
        let called = Instant::now();
        let mut st = self.shared.lock();
        loop {
            if let Some(e) = &st.exception {
                return Err(e.clone());
            }
            if !st.active {
                return Ok(());
            }
            if matches!(st.last_idle_trigger_start, Some(t) if t >= called) {
                return Ok(());
            }
            st = match self
                .shared
                .changed
                .wait_timeout(st, Duration::from_millis(50))
            {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }
    /// The most recent progress report.
    pub fn last_progress(&self) -> Option<StreamingQueryProgress> {
        self.shared.lock().progress.back().cloned()
    }
    /// Up to the last 100 progress reports, oldest first.
    pub fn recent_progress(&self) -> Vec<StreamingQueryProgress> {
        self.shared.lock().progress.iter().cloned().collect()
    }
    /// What the query is doing right now (Spark's `StreamingQuery.status`).
    pub fn status(&self) -> StreamingQueryStatus {
        self.shared.lock().status.clone()
    }
    /// The query's logical and physical plans.
    pub fn explain(&self) -> String {
        self.explain.as_ref().clone()
    }
}
