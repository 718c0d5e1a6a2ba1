//! A stateful operator's rows routed by the workers that read them straight to the owners of
//! their state partitions (Spark's shuffle: map side to reduce side, no files, no driver in
//! between; [`sluice::distributed::ReadRoute`]).
//!
//! The driver starts each state task first, telling it how many senders each input has (each
//! run of each read of the input); the task registers under its exchange name. A reading
//! worker opens an exchange with each owner (header [`ROUTED`]: the task's exchange name and
//! the input), sends the rows of that owner's partitions as it routes them, then their end,
//! and waits for the owner's acknowledgement. The owner takes input 0 from all its senders (in
//! the order the rows come) until each ended, then input 1, then waits for the driver's end of
//! the task, which the driver sends once every read gave it its counts: only then does the
//! task commit. A sender that leaves before its end, or a driver that leaves before its, fails
//! the task, which then commits nothing. Each input's rows come on a connection of their own,
//! so rows of an input the task does not take yet never hold up the rows it takes.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow_flight::FlightData;
use futures::StreamExt;
use sluice::distributed::{StateTask, StateTaskRows, StateTaskRun};
use sluice::error::{Result, SluiceError};
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use crate::client::{channel_on, exchange_with};
use crate::wire::{answer_state_task, decode_input, encode_answer, message, Answer, Stream, END};

/// The header's kind of an exchange of routed rows (a stateful task's is `HEADER`).
pub(crate) const ROUTED: u8 = 3;

/// How long a sender waits for the task it routes to to start on its owner (the driver starts
/// the tasks before the reads, but on other connections).
const TASK_WAIT: Duration = Duration::from_secs(60);

/// Rows an input's channel holds ahead of the task, per input.
const AHEAD: usize = 8;

/// A routed input's items: rows, a sender's end (`None`), or why its rows broke off.
type Item = Result<Option<RecordBatch>>;

/// Tasks that take routed rows, by exchange name: while they run, each input's channel; after,
/// that they ended (a late sender is refused at once).
enum Entry {
    Running(Vec<mpsc::Sender<Item>>),
    Ended,
}

fn tasks() -> &'static Mutex<HashMap<String, Entry>> {
    static TASKS: OnceLock<Mutex<HashMap<String, Entry>>> = OnceLock::new();
    TASKS.get_or_init(Default::default)
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<String, Entry>> {
    tasks().lock().unwrap_or_else(|p| p.into_inner())
}

fn wire_error(what: &str, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::internal(format!("routed rows' {what}: {e}"))
}

/// The sender's side: an exchange with the task `exchange` on `worker`, for rows of input
/// `input`. Its `finish` waits for the owner's acknowledgement of their end.
pub(crate) fn send_to(worker: &str, exchange: &str, input: usize) -> Result<Box<dyn StateTaskRun>> {
    let header = serde_json::to_vec(&(exchange, input)).map_err(|e| wire_error("header", e))?;
    // A worker that serves TLS reaches the others as a driver does: with its --workers-tls-*.
    let what = if crate::tls::serves_tls() && !crate::tls::on() {
        "the state task this worker routes rows to (a worker that serves TLS reaches the other \
         workers over TLS only when started with --workers-tls-ca, and --workers-tls-cert and \
         --workers-tls-key for workers that ask for a certificate)"
    } else {
        "the state task this worker routes rows to"
    };
    exchange_with(
        worker,
        channel_on(worker, 1 + input)?,
        message(&[ROUTED], header),
        what,
    )
}

/// The owner's side of an exchange of routed rows (`header`: the task's exchange name and the
/// input): the rows go to the task's input as they come (waiting while it does not take them),
/// then their end; the answer is an acknowledgement once the end went to the task, or an error.
pub(crate) async fn take_rows(
    header: &[u8],
    mut incoming: Streaming<FlightData>,
) -> std::result::Result<Stream<FlightData>, Status> {
    let (exchange, input): (String, usize) = serde_json::from_slice(header)
        .map_err(|e| Status::invalid_argument(format!("routed rows' header: {e}")))?;
    let waited = Instant::now();
    let to = loop {
        match task_input(&exchange, input) {
            Some(found) => break found?,
            None if waited.elapsed() > TASK_WAIT => {
                return Err(aborted(format!(
                    "routed rows came for the state task {exchange}, which did not start on \
                     this worker within {TASK_WAIT:?}"
                )))
            }
            None => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    };
    let ended = async move {
        loop {
            let item: Item = match incoming.message().await {
                Ok(Some(m)) => match decode_input(&m) {
                    Ok(Some((i, rows))) if i == input => Ok(Some(rows)),
                    Ok(Some((i, _))) => Err(wire_error(
                        "input",
                        format!("rows of input {i} on the exchange of input {input}"),
                    )),
                    Ok(None) => {
                        // Their end, then the acknowledgement.
                        return match to.send(Ok(None)).await {
                            Ok(()) => encode_answer(&Answer::Progress(String::new()))
                                .map_err(|e| Status::aborted(e.to_wire())),
                            Err(_) => Err(ended_first(&exchange)),
                        };
                    }
                    Err(e) => Err(e),
                },
                Ok(None) => Err(wire_error(
                    "sender",
                    "a worker that routed rows left before their end",
                )),
                Err(s) => Err(wire_error("sender", format!("they broke off: {s}"))),
            };
            let failed = item.is_err();
            let why = item.as_ref().err().map(|e| e.to_wire());
            if to.send(item).await.is_err() || failed {
                return Err(why.map_or_else(|| ended_first(&exchange), Status::aborted));
            }
        }
    };
    Ok(futures::stream::once(ended).boxed())
}

/// Where rows of input `input` of the task `exchange` go: `None` while the task has not
/// started on this worker.
fn task_input(
    exchange: &str,
    input: usize,
) -> Option<std::result::Result<mpsc::Sender<Item>, Status>> {
    Some(match lock().get(exchange)? {
        Entry::Running(inputs) => inputs.get(input).cloned().ok_or_else(|| {
            Status::invalid_argument(format!(
                "routed rows of input {input}: the task {exchange} has {} inputs",
                inputs.len()
            ))
        }),
        Entry::Ended => Err(aborted(format!(
            "routed rows came for the state task {exchange}, which had ended (its batch failed \
             and runs again)"
        ))),
    })
}

/// A worker's error as the wire carries it.
fn aborted(message: String) -> Status {
    Status::aborted(SluiceError::internal(message).to_wire())
}

/// The task ended before the rows routed to it did.
fn ended_first(exchange: &str) -> Status {
    aborted(format!(
        "the state task {exchange} ended before the rows routed to it did"
    ))
}

/// A stateful task whose rows are routed to it by `task.senders` senders per input: registered
/// under its exchange name while it runs; `incoming` (the driver's exchange) carries only the
/// end, which the task waits for after its inputs, so that it commits only when the driver saw
/// every read end.
pub(crate) fn run_routed_task(
    task: StateTask,
    mut incoming: Streaming<FlightData>,
) -> Stream<FlightData> {
    let senders = task.senders.clone();
    let exchange = task.exchange.clone();
    let (txs, rxs): (Vec<_>, Vec<_>) = senders.iter().map(|_| mpsc::channel::<Item>(AHEAD)).unzip();
    {
        let mut tasks = lock();
        if tasks.len() > 4096 {
            tasks.retain(|_, e| matches!(e, Entry::Running(_)));
        }
        tasks.insert(exchange.clone(), Entry::Running(txs.clone()));
    }
    let (driver_tx, driver_rx) = std::sync::mpsc::sync_channel::<Result<()>>(1);
    tokio::spawn(async move {
        let ended = match incoming.message().await {
            Ok(Some(m)) if m.app_metadata.first() == Some(&END) => Ok(()),
            Ok(Some(_)) => Err(wire_error(
                "driver",
                "rows from the driver for a task whose rows are routed to it",
            )),
            Ok(None) => Err(wire_error("driver", "its exchange closed")),
            Err(s) => Err(wire_error("driver", format!("it broke off: {s}"))),
        };
        if let Err(e) = &ended {
            // The inputs' senders may never come: the input the task waits on fails.
            let e = &wire_error("driver", format!("{DRIVER_LEFT} ({e})"));
            for tx in &txs {
                let (tx, e) = (tx.clone(), e.clone());
                tokio::spawn(async move { tx.send(Err(e)).await });
            }
        }
        let _ = driver_tx.send(ended);
    });
    let rows = RoutedRows {
        inputs: rxs,
        senders,
        at: 0,
        ended: 0,
        broken: None,
        driver: driver_rx,
        done: false,
    };
    answer_state_task(task, Box::new(rows) as StateTaskRows, move || {
        lock().insert(exchange, Entry::Ended);
    })
}

/// What a task's error says when its driver left (its batch failed).
const DRIVER_LEFT: &str = "the driver ended the task before its end";

fn driver_error(e: &SluiceError) -> bool {
    e.to_string().contains(DRIVER_LEFT)
}

/// A routed task's rows, input by input: an input ends when each of its senders ended it; after
/// the last, the driver's end.
struct RoutedRows {
    inputs: Vec<mpsc::Receiver<Item>>,
    senders: Vec<usize>,
    /// The input being taken, and how many of its senders ended it.
    at: usize,
    ended: usize,
    /// Why a sender's rows broke off: the task waits for the driver, whose batch then fails
    /// with its own error (the read's, which is why), and fails with it.
    broken: Option<SluiceError>,
    driver: std::sync::mpsc::Receiver<Result<()>>,
    done: bool,
}

impl Iterator for RoutedRows {
    type Item = Result<(usize, RecordBatch)>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            if self.at == self.inputs.len() {
                self.done = true;
                let driver = match self.driver.recv() {
                    Ok(ended) => ended,
                    Err(_) => Err(wire_error("driver", "it left before the end")),
                };
                return match (driver, self.broken.take()) {
                    (Ok(()), None) => None,
                    (Ok(()), Some(e)) | (Err(_), Some(e)) => Some(Err(e)),
                    (Err(e), None) => Some(Err(e)),
                };
            }
            if self.ended == self.senders[self.at] {
                self.at += 1;
                self.ended = 0;
                continue;
            }
            match self.inputs[self.at].blocking_recv() {
                Some(Ok(Some(rows))) => return Some(Ok((self.at, rows))),
                Some(Ok(None)) => self.ended += 1,
                // A sender broke off: the task keeps taking the others' rows (their reads end
                // as they would) and fails once the driver ends or drops it.
                Some(Err(e)) if self.broken.is_none() && !driver_error(&e) => {
                    self.broken = Some(e);
                    self.ended += 1;
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(self.broken.take().unwrap_or(e)));
                }
                None => {
                    self.done = true;
                    return Some(Err(wire_error("senders", "they left before their end")));
                }
            }
        }
        None
    }
}
