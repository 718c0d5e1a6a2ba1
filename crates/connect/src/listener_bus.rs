//! Python `StreamingQueryListener`s: pyspark-client 4.2 runs them on the client. Its first
//! `spark.streams.addListener` opens a long-lived `ExecutePlan` (`StreamingQueryListenerBusCommand
//! .add_listener_bus_listener`) on which the server streams every query event of the session;
//! removing the last listener (`remove_listener_bus_listener`) ends that stream. The started
//! event travels in `WriteStreamOperationStartResult.query_started_event_json` instead, and the
//! client posts it when the start result arrives. A Sluice batch can end before that, so a
//! query's later events are held until its start result is out (plus [`START_GRACE`], for the
//! client to take it in), keeping Spark's order: started, then progress, then terminated.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sluice::progress::{QueryIdleEvent, QueryStartedEvent, QueryTerminatedEvent};
use sluice::{StreamingQueryListener, StreamingQueryProgress};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::proto;
use crate::python::{
    bus_event, query_idle_event_json, query_progress_event_json, query_terminated_event_json,
    ListenerEventKind,
};

/// How long after a query's start result its held events wait.
pub const START_GRACE: Duration = Duration::from_millis(200);

/// The session's listener bus: where the engine's events go while a client listens.
#[derive(Default)]
pub struct ListenerBus {
    sender: Mutex<Option<UnboundedSender<proto::StreamingQueryListenerEvent>>>,
    registered: Mutex<bool>,
    gate: Mutex<Gate>,
}

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
        let mut registered = lock(&self.registered);
        if !*registered {
            session.add_listener(Arc::new(Forwarder { bus: self.clone() }));
            *registered = true;
        }
        rx
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
    fn on_query_started(&self, _event: &QueryStartedEvent) {
        // Sent with the start result, as Spark does.
    }
    fn on_query_progress(&self, progress: &StreamingQueryProgress) {
        match query_progress_event_json(&progress.json()) {
            Ok(json) => self
                .bus
                .post(&progress.id, ListenerEventKind::Progress, json),
            Err(e) => log::warn!("listener bus: {}", e.message),
        }
    }
    fn on_query_idle(&self, event: &QueryIdleEvent) {
        let json = query_idle_event_json(&event.id, &event.run_id, &event.timestamp);
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
            .post(&event.id, ListenerEventKind::Terminated, json);
    }
}
