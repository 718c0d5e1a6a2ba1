//! Python `StreamingQueryListener`s: pyspark-client 4.2 runs them on the client. Its first
//! `spark.streams.addListener` opens a long-lived `ExecutePlan` (`StreamingQueryListenerBusCommand
//! .add_listener_bus_listener`) on which the server streams every query event of the session;
//! removing the last listener (`remove_listener_bus_listener`) ends that stream. The started
//! event travels in `WriteStreamOperationStartResult.query_started_event_json` instead, and the
//! client posts it when the start result arrives. A Sluice batch can end before that, so a
//! query's later events are held until its start result is out (plus [`START_GRACE`], for the
//! client to take it in), keeping Spark's order: started, then progress, then terminated.
//!
//! PySpark 3.5 keeps its listeners on the *server* instead: `spark.streams.addListener` sends
//! `StreamingQueryManagerCommand.add_listener` with the pickled listener, which the server runs in
//! the client's `listener_worker` ([`crate::python::ListenerWorker`]). Such a server listener gets
//! every event of the session's queries, started included, in order, from a thread of its own
//! (a slow listener never holds up a query, as Spark's asynchronous listener bus), until
//! `remove_listener` or the session's end.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sluice::progress::{QueryIdleEvent, QueryStartedEvent, QueryTerminatedEvent};
use sluice::{StreamingQueryListener, StreamingQueryProgress};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::proto;
use crate::python::{
    bus_event, query_idle_event_json, query_progress_event_json, query_started_event_json,
    query_terminated_event_json, ListenerEventKind, ListenerWorker,
};

/// How long after a query's start result its held events wait.
pub const START_GRACE: Duration = Duration::from_millis(200);

/// The session's listener bus: where the engine's events go while a client listens.
#[derive(Default)]
pub struct ListenerBus {
    sender: Mutex<Option<UnboundedSender<proto::StreamingQueryListenerEvent>>>,
    registered: Mutex<bool>,
    gate: Mutex<Gate>,
    /// The server-side listeners (PySpark 3.5's `add_listener`), by the client's listener id,
    /// in the order they were added: each one's event queue.
    server: Mutex<Vec<(String, EventQueue)>>,
}

/// Where a server-side listener's events wait for its thread.
type EventQueue = Sender<(ListenerEventKind, String)>;

/// Which queries' events may go out, and the events held for the others (in order).
#[derive(Default)]
struct Gate {
    open: HashSet<String>,
    held: HashMap<String, Vec<proto::StreamingQueryListenerEvent>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ListenerBus {
    /// Starts (or restarts) streaming events to the client: the receiving end of the stream.
    /// The engine listener is registered on the session the first time.
    pub fn open(
        self: &Arc<Self>,
        session: &sluice::Session,
    ) -> UnboundedReceiver<proto::StreamingQueryListenerEvent> {
        let (tx, rx) = unbounded_channel();
        *lock(&self.sender) = Some(tx);
        self.register(session);
        rx
    }
    /// Registers the engine listener that feeds the bus on the session, once.
    fn register(self: &Arc<Self>, session: &sluice::Session) {
        let mut registered = lock(&self.registered);
        if !*registered {
            session.add_listener(Arc::new(Forwarder { bus: self.clone() }));
            *registered = true;
        }
    }

    /// Adds a server-side listener (`add_listener`) under the client's id `id`: from now on
    /// every event of the session's queries goes to `worker`, from a thread of its own. An
    /// exception in the listener is logged (as Spark does); a worker that died (a 3.5 worker
    /// ends on the listener's first exception) gets no more events.
    pub fn add_server_listener(
        self: &Arc<Self>,
        session: &sluice::Session,
        id: &str,
        mut worker: ListenerWorker,
    ) -> crate::Result<()> {
        let (tx, rx) = channel::<(ListenerEventKind, String)>();
        let name = format!("python-listener-{id}");
        let listener = id.to_string();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                for (kind, json) in rx {
                    if let Err(e) = worker.send(kind, &json) {
                        log::warn!("streaming query listener {listener}: {}", e.message);
                        if !worker.is_alive() {
                            break;
                        }
                    }
                }
                // Dropping the worker kills its process.
            })
            .map_err(|e| {
                crate::ConnectError::new(
                    crate::error::java::INTERNAL,
                    sluice::error::class::INTERNAL_ERROR,
                    format!("cannot start the thread of a streaming query listener: {e}"),
                )
            })?;
        self.register(session);
        lock(&self.server).push((id.to_string(), tx));
        Ok(())
    }
    /// Removes the server-side listener `id` (its worker ends once its queued events are
    /// delivered); false when there is none.
    pub fn remove_server_listener(&self, id: &str) -> bool {
        let mut server = lock(&self.server);
        let before = server.len();
        server.retain(|(l, _)| l != id);
        server.len() != before
    }
    /// The ids of the server-side listeners, in the order they were added.
    pub fn server_listeners(&self) -> Vec<String> {
        lock(&self.server)
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }
    /// Queues an event for every server-side listener.
    fn to_server_listeners(&self, kind: ListenerEventKind, json: &str) {
        for (_, tx) in lock(&self.server).iter() {
            let _ = tx.send((kind, json.to_string()));
        }
    }
    /// Ends the event stream (the client removed its last listener).
    pub fn close(&self) {
        *lock(&self.sender) = None;
    }
    /// Lets query `id`'s events out once its start result has reached the client: after
    /// [`START_GRACE`], the held ones first.
    pub fn started(self: &Arc<Self>, id: &str) {
        let (bus, id) = (self.clone(), id.to_string());
        std::thread::spawn(move || {
            std::thread::sleep(START_GRACE);
            let mut gate = lock(&bus.gate);
            let held = gate.held.remove(&id).unwrap_or_default();
            gate.open.insert(id);
            if let Some(tx) = lock(&bus.sender).as_ref() {
                for event in held {
                    let _ = tx.send(event);
                }
            }
        });
    }
    fn post(&self, query_id: &str, kind: ListenerEventKind, json: String) {
        let Some(event) = bus_event(kind, json) else {
            return;
        };
        let mut gate = lock(&self.gate);
        if !gate.open.contains(query_id) {
            gate.held
                .entry(query_id.to_string())
                .or_default()
                .push(event);
            return;
        }
        if let Some(tx) = lock(&self.sender).as_ref() {
            let _ = tx.send(event);
        }
    }
}

/// The engine listener that forwards to the bus.
struct Forwarder {
    bus: Arc<ListenerBus>,
}

impl StreamingQueryListener for Forwarder {
    fn on_query_started(&self, event: &QueryStartedEvent) {
        // The bus's client gets it with the start result, as from Spark; server-side
        // listeners get it here.
        let json = query_started_event_json(
            &event.id,
            &event.run_id,
            event.name.as_deref(),
            &event.timestamp,
        );
        self.bus
            .to_server_listeners(ListenerEventKind::Started, &json);
    }
    fn on_query_progress(&self, progress: &StreamingQueryProgress) {
        match query_progress_event_json(&progress.json()) {
            Ok(json) => {
                self.bus
                    .to_server_listeners(ListenerEventKind::Progress, &json);
                self.bus
                    .post(&progress.id, ListenerEventKind::Progress, json)
            }
            Err(e) => log::warn!("listener bus: {}", e.message),
        }
    }
    fn on_query_idle(&self, event: &QueryIdleEvent) {
        let json = query_idle_event_json(&event.id, &event.run_id, &event.timestamp);
        self.bus.to_server_listeners(ListenerEventKind::Idle, &json);
        self.bus.post(&event.id, ListenerEventKind::Idle, json);
    }
    fn on_query_terminated(&self, event: &QueryTerminatedEvent) {
        let json = query_terminated_event_json(
            &event.id,
            &event.run_id,
            event.exception.as_deref(),
            event.error_class_on_exception.as_deref(),
        );
        self.bus
            .to_server_listeners(ListenerEventKind::Terminated, &json);
        self.bus
            .post(&event.id, ListenerEventKind::Terminated, json);
    }
}
