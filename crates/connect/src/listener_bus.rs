//! Python `StreamingQueryListener`s: pyspark-client 4.2 runs them on the client. Its first
//! `spark.streams.addListener` opens a long-lived `ExecutePlan` (`StreamingQueryListenerBusCommand
//! .add_listener_bus_listener`) on which the server streams every query event of the session;
//! removing the last listener (`remove_listener_bus_listener`) ends that stream. The started
//! event travels in `WriteStreamOperationStartResult.query_started_event_json` instead.

use std::sync::{Arc, Mutex, MutexGuard};

use sluice::progress::{QueryIdleEvent, QueryStartedEvent, QueryTerminatedEvent};
use sluice::{StreamingQueryListener, StreamingQueryProgress};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::proto;
use crate::python::{
    bus_event, query_idle_event_json, query_progress_event_json, query_terminated_event_json,
    ListenerEventKind,
};

/// The session's listener bus: where the engine's events go while a client listens.
#[derive(Default)]
pub struct ListenerBus {
    sender: Mutex<Option<UnboundedSender<proto::StreamingQueryListenerEvent>>>,
    registered: Mutex<bool>,
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
    fn post(&self, kind: ListenerEventKind, json: String) {
        let Some(event) = bus_event(kind, json) else {
            return;
        };
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
            Ok(json) => self.bus.post(ListenerEventKind::Progress, json),
            Err(e) => log::warn!("listener bus: {}", e.message),
        }
    }
    fn on_query_idle(&self, event: &QueryIdleEvent) {
        let json = query_idle_event_json(&event.id, &event.run_id, &event.timestamp);
        self.bus.post(ListenerEventKind::Idle, json);
    }
    fn on_query_terminated(&self, event: &QueryTerminatedEvent) {
        let json = query_terminated_event_json(
            &event.id,
            &event.run_id,
            event.exception.as_deref(),
            event.error_class_on_exception.as_deref(),
        );
        self.bus.post(ListenerEventKind::Terminated, json);
    }
}
