//! Running queries: the `StreamingQuery` handle, output modes, triggers, the writer that starts
//! a query, and the micro-batch loop (`MicroBatchExecution`). This is the only code that knows
//! the *order* of things in a batch.

mod execution;
mod writer;

use crate::error::class;
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

/// What the query is doing right now (Spark's `StreamingQueryStatus`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamingQueryStatus {
    pub message: String,
    pub is_data_available: bool,
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
    pub fn new(id: String, run_id: String, name: Option<String>, trigger: Trigger) -> Self {
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
    pub fn lock(&self) -> MutexGuard<'_, SharedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub fn update(&self, f: impl FnOnce(&mut SharedState)) {
        let mut st = self.lock();
        f(&mut st);
        drop(st);
        self.changed.notify_all();
    }
    pub fn stopping(&self) -> bool {
        self.stop_requested.load(Ordering::SeqCst)
    }
    /// Sleeps up to `d`, waking early when the query is asked to stop.
    pub fn sleep(&self, d: Duration) {
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
    pub fn name(&self) -> Option<&str> {
        self.shared.name.as_deref()
    }
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
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
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
    pub fn status(&self) -> StreamingQueryStatus {
        self.shared.lock().status.clone()
    }
    /// The query's logical and physical plans.
    pub fn explain(&self) -> String {
        self.explain.as_ref().clone()
    }
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// What a query thread does around its loop, for micro-batch and continuous execution alike:
/// the started event, the loop (a panic — a bug — becomes an `INTERNAL_ERROR` that
/// `on_panic` words, never a hung query), `on_success` after a clean end, the terminated
/// event, and, once the execution is dropped (its checkpoint lock and sources released, so a
/// restart right after `await_termination` can take the checkpoint), the stopped status.
pub(crate) fn run_query_thread<E>(
    mut execution: E,
    shared: Arc<QueryShared>,
    listeners: Vec<Arc<dyn crate::progress::StreamingQueryListener>>,
    run: impl FnOnce(&mut E) -> Result<()>,
    on_panic: impl FnOnce(&E, &str) -> String,
    on_success: impl FnOnce(&E),
) {
    use crate::progress::{format_timestamp_ms, QueryStartedEvent, QueryTerminatedEvent};
    let started = QueryStartedEvent {
        id: shared.id.clone(),
        run_id: shared.run_id.clone(),
        name: shared.name.clone(),
        timestamp: format_timestamp_ms(now_ms()),
    };
    for l in &listeners {
        l.on_query_started(&started);
    }
    let result =
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut execution))) {
            Ok(r) => r,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                Err(SluiceError::internal(on_panic(&execution, &msg)))
            }
        };
    let (exception, class) = match &result {
        Ok(()) => {
            on_success(&execution);
            (None, None)
        }
        Err(e) => {
            log::error!("query {} failed: {e}", shared.id);
            (Some(e.to_string()), Some(e.class().to_string()))
        }
    };
    let terminated = QueryTerminatedEvent {
        id: shared.id.clone(),
        run_id: shared.run_id.clone(),
        exception,
        error_class_on_exception: class,
    };
    for l in &listeners {
        l.on_query_terminated(&terminated);
    }
    drop(execution);
    shared.update(|st| {
        st.active = false;
        st.exception = result.err();
        st.status = StreamingQueryStatus {
            message: "Stopped".into(),
            is_data_available: false,
            is_trigger_active: false,
        };
    });
}

/// Another query wrote log entry `id` of this checkpoint (`what`: batch or epoch).
pub(crate) fn concurrent_update(id: u64, what: &str) -> SluiceError {
    SluiceError::checkpoint(
        class::CONCURRENT_QUERY,
        format!(
            "Concurrent update to the log. Multiple streaming jobs detected for {id}: another \
             query wrote the same {what}. Run one query per checkpointLocation."
        ),
    )
}

/// The restart checks both executions make before running: the query reads as many sources as
/// the checkpoint's last offsets record (`recorded_sources`), and its source types and sink are
/// the ones recorded in `<checkpoint>/sluice/query.json` (recorded on the first run).
pub(crate) fn check_query_shape(
    checkpoint_root: &std::path::Path,
    recorded_sources: Option<usize>,
    relations: &[(u64, Arc<dyn crate::source::SourceProvider>)],
    sink: &dyn crate::sink::SinkProvider,
) -> Result<()> {
    if let Some(n) = recorded_sources.filter(|n| *n != relations.len()) {
        return Err(SluiceError::checkpoint(
            class::STREAMING_QUERY_SOURCES_CHANGED,
            format!(
                "The query reads {} source(s) but the checkpoint {} was written by a query with \
                 {n}. Changing the number of sources is not allowed; start with a new \
                 checkpointLocation.",
                relations.len(),
                checkpoint_root.display(),
            ),
        ));
    }
    crate::checkpoint::shape::check_or_record(
        checkpoint_root,
        &crate::checkpoint::shape::QueryShape {
            sources: relations
                .iter()
                .map(|(_, p)| (p.kind().to_string(), p.description()))
                .collect(),
            sink_kind: sink.kind().to_string(),
            sink_description: sink.description(),
        },
    )
}
