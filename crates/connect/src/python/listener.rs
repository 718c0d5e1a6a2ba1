//! Python `StreamingQueryListener`s, and the events' JSON.
//!
//! pyspark-client 4.2's `spark.streams.addListener` keeps the listener in the *client* (the
//! listener bus): it sends `StreamingQueryListenerBusCommand.add_listener_bus_listener` and reads
//! `StreamingQueryListenerEventsResult`s from that long-running execute; the started event
//! travels in `WriteStreamOperationStartResult.query_started_event_json`. [`bus_event`] makes
//! those events. Older clients (3.5) send `StreamingQueryManagerCommand.add_listener` with the
//! pickled listener in `python_listener_payload` instead, which the server runs in the client's
//! `pyspark.sql.connect.streaming.worker.listener_worker`: [`ListenerWorker`].
//!
//! Both parse the same JSON (`QueryStartedEvent.fromJson` etc. in `pyspark/sql/streaming/
//! listener.py`): started `{id, runId, name, timestamp, jobTags}`, progress `{progress: <the
//! StreamingQueryProgress JSON, as lastProgress>}`, idle `{id, runId, timestamp}`, terminated
//! `{id, runId, exception, errorClassOnException}` (`exception` and the class null on success).
//! Note the two numberings differ: the worker reads 0 started, 1 progress, 2 idle, 3 terminated;
//! the bus's `StreamingQueryEventType` is 1 progress, 2 terminated, 3 idle (no started).

use serde_json::{json, Value};

use crate::error::{ConnectError, Result};
use crate::proto;

use super::worker::{handshake, Frame, Launch, Worker, WorkerInterrupt};
use super::PythonConfig;

/// The worker module the client ships for server-side listeners.
pub(super) const LISTENER_MODULE: &str = "pyspark.sql.connect.streaming.worker.listener_worker";

/// The four listener events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenerEventKind {
    /// `onQueryStarted`.
    Started,
    /// `onQueryProgress`.
    Progress,
    /// `onQueryIdle`.
    Idle,
    /// `onQueryTerminated`.
    Terminated,
}

impl ListenerEventKind {
    /// The type the listener worker reads after the JSON.
    fn worker_code(self) -> i32 {
        match self {
            Self::Started => 0,
            Self::Progress => 1,
            Self::Idle => 2,
            Self::Terminated => 3,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Self::Started => "onQueryStarted",
            Self::Progress => "onQueryProgress",
            Self::Idle => "onQueryIdle",
            Self::Terminated => "onQueryTerminated",
        }
    }
}

/// A running listener worker: one per listener added with `add_listener`. Dropping it (on
/// `removeListener` or when the session ends) closes the socket and kills the process.
pub struct ListenerWorker {
    worker: Worker,
}

impl std::fmt::Debug for ListenerWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerWorker").finish_non_exhaustive()
    }
}

impl ListenerWorker {
    /// A handle that kills this worker from another thread (`query.stop()` while a call
    /// blocks): the blocked call then returns an error saying the query was stopped.
    pub fn interrupter(&self) -> WorkerInterrupt {
        self.worker.interrupter()
    }

    /// Starts the listener worker for session `session_id` with the pickled listener
    /// (`StreamingQueryListenerCommand.python_listener_payload`).
    pub fn start(
        config: &PythonConfig,
        session_id: &str,
        listener: &proto::PythonUdf,
    ) -> Result<Self> {
        let launch = Launch::Module(LISTENER_MODULE);
        let mut worker = Worker::spawn(config, "streaming query listener", launch)?;
        let rest = Frame::default().utf(session_id)?.bytes(&listener.command)?;
        handshake(&mut worker, config, &listener.python_ver, rest)?;
        Ok(Self { worker })
    }

    /// Starts the worker from the `add_listener` command, which must carry a Python listener.
    pub fn from_command(
        config: &PythonConfig,
        session_id: &str,
        command: &proto::streaming_query_manager_command::StreamingQueryListenerCommand,
    ) -> Result<Self> {
        let listener = command.python_listener_payload.as_ref().ok_or_else(|| {
            ConnectError::not_supported(
                "a streaming query listener without a Python payload (a JVM listener)",
            )
        })?;
        Self::start(config, session_id, listener)
    }

    /// Calls the listener's method for `kind` with the event `json` (see the module doc for
    /// its shape). An exception in the listener is an error with its traceback; the worker
    /// stays usable (it catches per event), as Spark only logs such errors.
    ///
    /// PySpark 3.5's listener worker answers nothing and catches nothing: the event is only
    /// sent, and an exception in the listener ends the worker, which the next event reports
    /// (with the traceback), as Spark 3.5's server logs it.
    pub fn send(&mut self, kind: ListenerEventKind, json: &str) -> Result<()> {
        let frame = Frame::default().utf(json)?.int(kind.worker_code());
        if self.answers_events() {
            self.worker.request(&frame.0, kind.name(), None)
        } else {
            self.worker.send_unanswered(&frame.0, kind.name())
        }
    }

    /// Whether the worker can still take events (it has not died nor broken the protocol).
    pub fn is_alive(&self) -> bool {
        self.worker.is_alive()
    }

    /// Whether the worker answers each event (`0` or `-2` and the traceback): pyspark 4.0 on.
    pub fn answers_events(&self) -> bool {
        !self.worker.pyspark_older_than(4, 0)
    }

    /// The worker's pyspark version (`"3.5.9"`).
    pub fn pyspark_version(&self) -> Option<&str> {
        self.worker.pyspark_version()
    }
    /// `onQueryStarted` with [`query_started_event_json`].
    pub fn on_query_started(&mut self, json: &str) -> Result<()> {
        self.send(ListenerEventKind::Started, json)
    }
    /// `onQueryProgress` with [`query_progress_event_json`].
    pub fn on_query_progress(&mut self, json: &str) -> Result<()> {
        self.send(ListenerEventKind::Progress, json)
    }
    /// `onQueryIdle` with [`query_idle_event_json`].
    pub fn on_query_idle(&mut self, json: &str) -> Result<()> {
        self.send(ListenerEventKind::Idle, json)
    }
    /// `onQueryTerminated` with [`query_terminated_event_json`].
    pub fn on_query_terminated(&mut self, json: &str) -> Result<()> {
        self.send(ListenerEventKind::Terminated, json)
    }
}

/// `QueryStartedEvent` JSON; `timestamp` as Spark writes it (`2024-01-01T00:00:00.000Z`).
pub fn query_started_event_json(
    id: &str,
    run_id: &str,
    name: Option<&str>,
    timestamp: &str,
) -> String {
    json!({"id": id, "runId": run_id, "name": name, "timestamp": timestamp, "jobTags": []})
        .to_string()
}

/// `QueryProgressEvent` JSON around a `StreamingQueryProgress` JSON (as `lastProgress`).
pub fn query_progress_event_json(progress_json: &str) -> Result<String> {
    let progress: Value = serde_json::from_str(progress_json).map_err(|e| {
        ConnectError::new(
            crate::error::java::INTERNAL,
            sluice::error::class::INTERNAL_ERROR,
            format!("the progress JSON for a listener event is not JSON: {e}"),
        )
    })?;
    Ok(json!({ "progress": progress }).to_string())
}

/// `QueryIdleEvent` JSON.
pub fn query_idle_event_json(id: &str, run_id: &str, timestamp: &str) -> String {
    json!({"id": id, "runId": run_id, "timestamp": timestamp}).to_string()
}

/// `QueryTerminatedEvent` JSON: `exception` (the failure's message) and its error class, both
/// absent when the query stopped without failing.
pub fn query_terminated_event_json(
    id: &str,
    run_id: &str,
    exception: Option<&str>,
    error_class: Option<&str>,
) -> String {
    json!({"id": id, "runId": run_id, "exception": exception, "errorClassOnException": error_class})
        .to_string()
}

/// An event for the client-side listener bus (`StreamingQueryListenerEventsResult.events`);
/// `None` for [`ListenerEventKind::Started`], which goes in the start result instead.
pub fn bus_event(
    kind: ListenerEventKind,
    json: String,
) -> Option<proto::StreamingQueryListenerEvent> {
    let event_type = match kind {
        ListenerEventKind::Started => return None,
        ListenerEventKind::Progress => proto::StreamingQueryEventType::QueryProgressEvent,
        ListenerEventKind::Terminated => proto::StreamingQueryEventType::QueryTerminatedEvent,
        ListenerEventKind::Idle => proto::StreamingQueryEventType::QueryIdleEvent,
    };
    Some(proto::StreamingQueryListenerEvent {
        event_json: json,
        event_type: event_type as i32,
    })
}
