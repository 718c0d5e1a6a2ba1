//! The driver's (and a routing worker's) calls to a worker: a read task, a stateful task's
//! exchange, and the channels and runtime they use.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use arrow::array::RecordBatch;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Action, FlightData};
use futures::StreamExt;
use sluice::distributed::{ReadItem, ReadItems, ReadTask, StateTask, StateTaskRun};
use sluice::error::{Result, SluiceError};
use tonic::transport::Channel;
use tonic::{Response, Status, Streaming};

use crate::wire::*;

/// The driver's side of a read: starts `task` on `worker`; its items come through a bounded
/// channel from a thread that receives them, a few ahead of the reader (dropping the items
/// cancels the read).
pub(crate) fn read_on(worker: &str, task: ReadTask) -> Result<ReadItems> {
    let body = encode_read_task(&task)?;
    let channel = channel(worker)?;
    let worker = worker.to_string();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<ReadItem>>(4);
    std::thread::Builder::new()
        .name("sluice-remote-read".into())
        .spawn(move || {
            client_runtime().block_on(async move {
                let mut results = match do_action(channel, READ_FILES, body).await {
                    Ok(r) => r.into_inner(),
                    Err(s) => {
                        let _ = tx.send(Err(from_status("a read", &worker, s)));
                        return;
                    }
                };
                while let Some(r) = results.next().await {
                    let item = r
                        .map_err(|s| from_status("a read", &worker, s))
                        .and_then(|m| decode_read_item(&m.body));
                    let failed = item.is_err();
                    if tx.send(item).is_err() || failed {
                        return;
                    }
                }
            })
        })
        .map_err(|e| wire_error("reader thread", e))?;
    Ok(Box::new(rx.into_iter()))
}

/// A Flight client on `channel` for messages as large as a batch's rows.
pub(crate) fn client(channel: Channel) -> FlightServiceClient<Channel> {
    FlightServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE)
}

/// Sends the action `kind` with `body` on `channel`; its results as they come.
async fn do_action(
    channel: Channel,
    kind: &str,
    body: Vec<u8>,
) -> std::result::Result<Response<Streaming<arrow_flight::Result>>, Status> {
    client(channel)
        .do_action(Action {
            r#type: kind.to_string(),
            body: body.into(),
        })
        .await
}

/// The driver's side of a stateful task: a Flight exchange with `worker`, its rows sent
/// through a bounded channel (a few batches ahead of the worker), its answers received by a
/// task of the client runtime into another.
pub(crate) fn start_on(worker: &str, task: StateTask) -> Result<Box<dyn StateTaskRun>> {
    let header = message(&[HEADER], encode_task(&task)?);
    exchange_with(worker, channel(worker)?, header, "a stateful task")
}

/// An exchange with `worker` on `channel` that begins with `header`: rows sent through a
/// bounded channel, answers received by a task of the client runtime into another.
pub(crate) fn exchange_with(
    worker: &str,
    channel: Channel,
    header: FlightData,
    what: &'static str,
) -> Result<Box<dyn StateTaskRun>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<FlightData>(4);
    let (answer_tx, answers) = tokio::sync::mpsc::channel::<Result<Answer>>(4);
    let name = worker.to_string();
    let requests = futures::stream::once(async { header })
        .chain(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|m| (m, rx))
        }));
    client_runtime().spawn(async move {
        let mut results = match client(channel).do_exchange(requests).await {
            Ok(r) => r.into_inner(),
            Err(s) => {
                let _ = answer_tx.send(Err(from_status(what, &name, s))).await;
                return;
            }
        };
        while let Some(m) = results.next().await {
            let answer = m
                .map_err(|s| from_status(what, &name, s))
                .and_then(|m| decode_answer(&m));
            let last = !matches!(answer, Ok(Answer::Rows(_)));
            if answer_tx.send(answer).await.is_err() || last {
                return;
            }
        }
        let ended = wire_error(
            "answer",
            format!("worker {name} ended it without its progress"),
        );
        let _ = answer_tx.send(Err(ended)).await;
    });
    Ok(Box::new(Exchange {
        worker: worker.to_string(),
        what,
        rows: Some(tx),
        answers,
    }))
}

/// A stateful task running on a worker ([`start_on`]).
pub(crate) struct Exchange {
    worker: String,
    /// What the exchange is, for errors.
    what: &'static str,
    /// The task's rows (none once they ended).
    rows: Option<tokio::sync::mpsc::Sender<FlightData>>,
    answers: tokio::sync::mpsc::Receiver<Result<Answer>>,
}

impl StateTaskRun for Exchange {
    fn send(&mut self, input: usize, rows: RecordBatch) -> Result<()> {
        let m = encode_input(input, &rows)?;
        let sent = match &self.rows {
            // Any thread may wait here, inside a runtime's context or not.
            Some(tx) => futures::executor::block_on(tx.send(m)).is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        Err(SluiceError::connector(
            sluice::error::class::IO_ERROR,
            format!("{} on worker {} ended", self.what, self.worker),
        ))
    }

    fn end_input(&mut self) {
        if let Some(tx) = self.rows.take() {
            let _ = futures::executor::block_on(tx.send(message(&[END], Vec::new())));
        }
    }

    fn finish(
        mut self: Box<Self>,
        output: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<String> {
        self.end_input();
        loop {
            match futures::executor::block_on(self.answers.recv()) {
                Some(Ok(Answer::Rows(rows))) => output(rows)?,
                Some(Ok(Answer::Progress(p))) => return Ok(p),
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(wire_error(
                        "answer",
                        format!("worker {} sent none", self.worker),
                    ))
                }
            }
        }
    }
}

/// A worker's error: the one it failed with when it says (class and message kept), else the
/// transport's.
pub(crate) fn from_status(what: &str, worker: &str, status: Status) -> SluiceError {
    if status.code() == tonic::Code::Aborted {
        if let Some(e) = SluiceError::from_wire(status.message()) {
            return e;
        }
    }
    SluiceError::connector(
        sluice::error::class::IO_ERROR,
        format!("{what} on worker {worker}: {status}"),
    )
}

/// Channels by worker, made once (each reconnects when its worker comes back).
pub(crate) fn channel(worker: &str) -> Result<Channel> {
    channel_on(worker, 0)
}

/// Channels by worker and lane, made once: a lane is a connection of its own (routed rows of
/// each input go on a lane of their own, so that rows a task does not take yet, which wait in
/// their connection's flow-control window, never hold up the rows it takes).
pub(crate) fn channel_on(worker: &str, lane: usize) -> Result<Channel> {
    static CHANNELS: OnceLock<Mutex<HashMap<(String, usize), Channel>>> = OnceLock::new();
    let mut channels = CHANNELS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let key = (worker.to_string(), lane);
    if let Some(c) = channels.get(&key) {
        return Ok(c.clone());
    }
    // The channel's background work runs on the tasks' runtime, whichever thread asks.
    let _runtime = client_runtime().enter();
    let c = crate::tls::endpoint(worker)?.connect_lazy();
    channels.insert(key, c.clone());
    Ok(c)
}

/// The runtime the driver's stateful tasks wait on (their callers are plain threads).
pub(crate) fn client_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sluice-state-tasks")
            .enable_all()
            .build()
            .expect("a tokio runtime for stateful tasks")
    })
}
