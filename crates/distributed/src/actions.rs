//! Sluice's own tasks on the workers, on the worker's port beside datafusion-distributed's
//! service: a stateful operator's partitions for one batch ([`sluice::distributed::StateTask`]),
//! a Flight exchange (`DoExchange`: the task, then its rows as the driver routes them, then
//! their end; back, its output rows, then its progress), and a source's read (the action
//! `sluice.readFiles`, [`sluice::distributed::ReadTask`]: its rows streamed back as they are
//! decoded, then its counts). The task's node goes as DataFusion's proto messages (its schemas
//! as `DfSchema`, its expressions as a `LogicalExprList`, functions by name), rows as Arrow IPC;
//! both directions go through bounded channels, so neither side holds a batch's rows. A worker
//! that fails answers with its error (class and message kept, [`SluiceError::to_wire`]); a task
//! whose rows end without their end (the driver's batch failed) commits nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use arrow::array::RecordBatch;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, DFSchemaRef};
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion_proto::logical_plan::from_proto::parse_exprs;
use datafusion_proto::logical_plan::to_proto::serialize_exprs;
use datafusion_proto::logical_plan::DefaultLogicalExtensionCodec;
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf;
use futures::stream::BoxStream;
use futures::StreamExt;
use prost::Message;
use sluice::distributed::{
    ReadItem, ReadItems, ReadRoute, ReadTask, StateTask, StateTaskRows, StateTaskRun,
};
use sluice::error::{Result, SluiceError};
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

/// The Flight action a source's read is.
const READ_FILES: &str = "sluice.readFiles";

/// A task's or an output's bytes may be as large as a batch's rows.
const MAX_MESSAGE: usize = usize::MAX;

fn wire_error(what: &str, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::internal(format!("a stateful task's {what}: {e}"))
}

/// Length-prefixed sections, in order.
#[derive(Default)]
struct Sections(Vec<u8>);

impl Sections {
    fn push(&mut self, bytes: &[u8]) {
        self.0
            .extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        self.0.extend_from_slice(bytes);
    }
}

/// Reads [`Sections`] back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn next(&mut self) -> Result<&'a [u8]> {
        let short = || wire_error("message", "it ends early");
        let len: [u8; 8] = self
            .0
            .get(..8)
            .ok_or_else(short)?
            .try_into()
            .map_err(|_| short())?;
        let len = u64::from_le_bytes(len) as usize;
        let bytes = self.0.get(8..8 + len).ok_or_else(short)?;
        self.0 = &self.0[8 + len..];
        Ok(bytes)
    }

    fn count(&mut self) -> Result<usize> {
        let b = self.next()?;
        let b: [u8; 8] = b
            .try_into()
            .map_err(|_| wire_error("message", "a bad count"))?;
        Ok(u64::from_le_bytes(b) as usize)
    }
}

fn count(s: &mut Sections, n: usize) {
    s.push(&(n as u64).to_le_bytes());
}

/// Rows as an Arrow IPC stream (none: an empty section).
fn ipc(batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let Some(first) = batches.first() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new(&mut out, &first.schema())?;
    for b in batches {
        w.write(b)?;
    }
    w.finish()?;
    drop(w);
    Ok(out)
}

fn from_ipc(bytes: &[u8]) -> Result<Vec<RecordBatch>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    StreamReader::try_new(bytes, None)?
        .map(|b| b.map_err(SluiceError::from))
        .collect()
}

/// A task as bytes.
pub(crate) fn encode_task(task: &StateTask) -> Result<Vec<u8>> {
    let codec = DefaultLogicalExtensionCodec {};
    let mut s = Sections::default();
    s.push(task.spec.as_bytes());
    count(&mut s, task.schemas.len());
    for schema in &task.schemas {
        let proto =
            protobuf::DfSchema::try_from(schema.as_ref()).map_err(|e| wire_error("schema", e))?;
        s.push(&proto.encode_to_vec());
    }
    count(&mut s, task.exprs.len());
    for exprs in &task.exprs {
        let expr = serialize_exprs(exprs, &codec).map_err(|e| wire_error("expressions", e))?;
        s.push(&protobuf::LogicalExprList { expr }.encode_to_vec());
    }
    s.push(task.exchange.as_bytes());
    s.push(&serde_json::to_vec(&task.senders).map_err(|e| wire_error("senders", e))?);
    Ok(s.0)
}

/// A task from bytes; its functions resolve in `functions` (the worker's).
pub(crate) fn decode_task(bytes: &[u8], functions: &TaskContext) -> Result<StateTask> {
    let codec = DefaultLogicalExtensionCodec {};
    let mut r = Reader(bytes);
    let spec = String::from_utf8(r.next()?.to_vec()).map_err(|e| wire_error("spec", e))?;
    let mut schemas: Vec<DFSchemaRef> = Vec::new();
    for _ in 0..r.count()? {
        let proto = protobuf::DfSchema::decode(r.next()?).map_err(|e| wire_error("schema", e))?;
        schemas.push(Arc::new(
            DFSchema::try_from(&proto).map_err(|e| wire_error("schema", e))?,
        ));
    }
    let mut exprs: Vec<Vec<Expr>> = Vec::new();
    for _ in 0..r.count()? {
        let list = protobuf::LogicalExprList::decode(r.next()?)
            .map_err(|e| wire_error("expressions", e))?;
        exprs.push(
            parse_exprs(&list.expr, functions, &codec).map_err(|e| wire_error("expressions", e))?,
        );
    }
    let exchange = String::from_utf8(r.next()?.to_vec()).map_err(|e| wire_error("exchange", e))?;
    let senders = serde_json::from_slice(r.next()?).map_err(|e| wire_error("senders", e))?;
    Ok(StateTask {
        spec,
        schemas,
        exprs,
        exchange,
        senders,
    })
}

/// A stateful task's messages, by the first byte of their `app_metadata`: to the worker, its
/// header (the task), then rows of an input (the input's number follows, `u32` little-endian),
/// then the end of its rows; from the worker, output rows, then the progress.
pub(crate) const HEADER: u8 = 0;
const ROWS: u8 = 1;
pub(crate) const END: u8 = 2;

pub(crate) fn message(kind: &[u8], body: Vec<u8>) -> FlightData {
    FlightData {
        app_metadata: kind.to_vec().into(),
        data_body: body.into(),
        ..Default::default()
    }
}

/// Rows of input `input` of a stateful task.
fn encode_input(input: usize, rows: &RecordBatch) -> Result<FlightData> {
    let mut kind = vec![ROWS];
    kind.extend((input as u32).to_le_bytes());
    Ok(message(&kind, ipc(std::slice::from_ref(rows))?))
}

/// Rows of an input, or `None` at the end of the task's rows.
pub(crate) fn decode_input(m: &FlightData) -> Result<Option<(usize, RecordBatch)>> {
    match m.app_metadata.split_first() {
        Some((&ROWS, input)) => {
            let input: [u8; 4] = input
                .try_into()
                .map_err(|_| wire_error("rows", "a bad input number"))?;
            let rows = single(&m.data_body)?;
            Ok(Some((u32::from_le_bytes(input) as usize, rows)))
        }
        Some((&END, _)) => Ok(None),
        _ => Err(wire_error("message", "an unknown kind")),
    }
}

/// What a stateful task sends back.
#[derive(Debug)]
pub(crate) enum Answer {
    Rows(RecordBatch),
    Progress(String),
}

pub(crate) fn encode_answer(answer: &Answer) -> Result<FlightData> {
    Ok(match answer {
        Answer::Rows(rows) => message(&[ROWS], ipc(std::slice::from_ref(rows))?),
        Answer::Progress(p) => message(&[END], p.as_bytes().to_vec()),
    })
}

fn decode_answer(m: &FlightData) -> Result<Answer> {
    match m.app_metadata.first() {
        Some(&ROWS) => Ok(Answer::Rows(single(&m.data_body)?)),
        Some(&END) => Ok(Answer::Progress(
            String::from_utf8(m.data_body.to_vec()).map_err(|e| wire_error("progress", e))?,
        )),
        _ => Err(wire_error("answer", "an unknown kind")),
    }
}

/// The one batch of an Arrow IPC stream.
fn single(bytes: &[u8]) -> Result<RecordBatch> {
    from_ipc(bytes)?
        .into_iter()
        .next()
        .ok_or_else(|| wire_error("rows", "none in the message"))
}

/// A schema alone as an Arrow IPC stream.
fn schema_ipc(schema: &arrow::datatypes::SchemaRef) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new(&mut out, schema)?;
    w.finish()?;
    drop(w);
    Ok(out)
}

/// A read task: its spec, its rows' schema (an empty Arrow IPC stream), its projection (JSON),
/// the plan over its rows (datafusion-proto bytes; empty: none), and its route (none: an empty
/// section; else the operator's input and owners as JSON, then the operator's task).
fn encode_read_task(task: &ReadTask) -> Result<Vec<u8>> {
    let mut s = Sections::default();
    s.push(task.spec.as_bytes());
    s.push(&schema_ipc(&task.schema)?);
    s.push(&serde_json::to_vec(&task.projection).map_err(|e| wire_error("projection", e))?);
    s.push(&task.above);
    match &task.route {
        None => s.push(&[]),
        Some(route) => {
            let to = (route.input, &route.owners);
            s.push(&serde_json::to_vec(&to).map_err(|e| wire_error("route", e))?);
            s.push(&encode_task(&route.task)?);
        }
    }
    Ok(s.0)
}

/// A read task from bytes; its route's functions resolve in `functions` (the worker's).
fn decode_read_task(bytes: &[u8], functions: &TaskContext) -> Result<ReadTask> {
    let mut r = Reader(bytes);
    let spec = String::from_utf8(r.next()?.to_vec()).map_err(|e| wire_error("spec", e))?;
    let schema = StreamReader::try_new(r.next()?, None)?.schema();
    let projection = serde_json::from_slice(r.next()?).map_err(|e| wire_error("projection", e))?;
    let above = r.next()?.to_vec();
    let to = r.next()?;
    let route = if to.is_empty() {
        None
    } else {
        let (input, owners): (usize, Vec<(String, String)>) =
            serde_json::from_slice(to).map_err(|e| wire_error("route", e))?;
        Some(ReadRoute {
            task: decode_task(r.next()?, functions)?,
            input,
            owners,
        })
    };
    Ok(ReadTask {
        spec,
        schema,
        projection,
        above,
        route,
    })
}

/// Runs `task` on this worker: its rows as read, or through the plan the driver placed over
/// them (decoded with Sluice's nodes and the functions of `functions`); with a route, the rows
/// go to the owners of their state partitions and only the read's counts come back.
fn run_read(mut task: ReadTask, functions: &Arc<TaskContext>) -> Result<ReadItems> {
    let Some(route) = task.route.take() else {
        return read_rows(task, functions);
    };
    log::info!(
        "the read routes its rows to the owners of {} state tasks (input {})",
        route.owners.len(),
        route.input
    );
    let items = read_rows(task, functions)?;
    let counts = sluice::route_read(items, &route, &mut |t| {
        let (worker, exchange) = &route.owners[t];
        crate::routes::send_to(worker, exchange, route.input)
    })?;
    Ok(Box::new(std::iter::once(Ok(ReadItem::Counts(counts)))))
}

/// A read's rows, through the plan over them if any.
fn read_rows(task: ReadTask, functions: &Arc<TaskContext>) -> Result<ReadItems> {
    if task.above.is_empty() {
        return sluice::run_read_task(task);
    }
    let above = protobuf::PhysicalPlanNode::decode(task.above.as_slice())
        .map_err(|e| wire_error("plan over a read", e))?
        .try_into_physical_plan(functions.as_ref(), &crate::codec::SluiceCodec)?;
    let mut nodes = Vec::new();
    let _ = above.apply(|node| {
        nodes.push(node.name().to_string());
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    log::info!("the read runs under {}", nodes.join(" <- "));
    sluice::source::remote::run_read_task_under(task, above, Arc::clone(functions))
}

/// A read's item: `0` and one batch as Arrow IPC, or `1` and the counts as JSON.
fn encode_read_item(item: &ReadItem) -> Result<Vec<u8>> {
    Ok(match item {
        ReadItem::Rows(rows) => {
            let mut out = vec![0u8];
            out.extend(ipc(std::slice::from_ref(rows))?);
            out
        }
        ReadItem::Counts(c) => {
            let mut out = vec![1u8];
            out.extend(serde_json::to_vec(c).map_err(|e| wire_error("counts", e))?);
            out
        }
    })
}

fn decode_read_item(bytes: &[u8]) -> Result<ReadItem> {
    match bytes.split_first() {
        Some((0, rows)) => single(rows).map(ReadItem::Rows),
        Some((1, counts)) => Ok(ReadItem::Counts(
            serde_json::from_slice(counts).map_err(|e| wire_error("counts", e))?,
        )),
        _ => Err(wire_error("read item", "an unknown kind")),
    }
}

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
fn client(channel: Channel) -> FlightServiceClient<Channel> {
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
struct Exchange {
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
fn from_status(what: &str, worker: &str, status: Status) -> SluiceError {
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
fn channel(worker: &str) -> Result<Channel> {
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
fn client_runtime() -> &'static tokio::runtime::Runtime {
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

/// The worker's side: the Flight service that runs stateful tasks.
#[derive(Clone)]
pub(crate) struct StateTasks {
    functions: Arc<TaskContext>,
}

impl StateTasks {
    /// Tasks whose functions resolve in `functions` (the worker's session state).
    pub(crate) fn server(functions: &SessionState) -> FlightServiceServer<StateTasks> {
        FlightServiceServer::new(StateTasks {
            functions: functions.task_ctx(),
        })
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE)
    }
}

pub(crate) type Stream<T> = BoxStream<'static, std::result::Result<T, Status>>;

fn unimplemented<T>() -> std::result::Result<T, Status> {
    Err(Status::unimplemented(
        "a sluice worker answers datafusion-distributed's service, the action sluice.readFiles \
         and stateful tasks as exchanges",
    ))
}

#[tonic::async_trait]
impl FlightService for StateTasks {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;
    type DoExchangeStream = Stream<FlightData>;

    async fn handshake(
        &self,
        _r: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<Response<Self::HandshakeStream>, Status> {
        unimplemented()
    }
    async fn list_flights(
        &self,
        _r: Request<Criteria>,
    ) -> std::result::Result<Response<Self::ListFlightsStream>, Status> {
        unimplemented()
    }
    async fn get_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        unimplemented()
    }
    async fn poll_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<PollInfo>, Status> {
        unimplemented()
    }
    async fn get_schema(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<SchemaResult>, Status> {
        unimplemented()
    }
    async fn do_get(
        &self,
        _r: Request<Ticket>,
    ) -> std::result::Result<Response<Self::DoGetStream>, Status> {
        unimplemented()
    }
    async fn do_put(
        &self,
        _r: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoPutStream>, Status> {
        unimplemented()
    }
    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoExchangeStream>, Status> {
        let mut incoming = request.into_inner();
        let header = incoming
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("an exchange without its header"))?;
        match header.app_metadata.first() {
            Some(&HEADER) => {
                let task = decode_task(&header.data_body, &self.functions)
                    .map_err(|e| Status::aborted(e.to_wire()))?;
                Ok(Response::new(run_state_task(task, incoming)))
            }
            Some(&crate::routes::ROUTED) => Ok(Response::new(
                crate::routes::take_rows(&header.data_body, incoming).await?,
            )),
            _ => Err(Status::invalid_argument(
                "an exchange that is neither a stateful task nor its routed rows",
            )),
        }
    }
    async fn list_actions(
        &self,
        _r: Request<Empty>,
    ) -> std::result::Result<Response<Self::ListActionsStream>, Status> {
        let kinds = vec![Ok(ActionType {
            r#type: READ_FILES.to_string(),
            description: "reads a source's files or offset ranges for one batch".to_string(),
        })];
        Ok(Response::new(futures::stream::iter(kinds).boxed()))
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> std::result::Result<Response<Self::DoActionStream>, Status> {
        let action = request.into_inner();
        if action.r#type == READ_FILES {
            return read_files(&action.body, Arc::clone(&self.functions));
        }
        unimplemented()
    }
}

/// A worker's stateful task: its rows taken from `incoming` as the operator pulls them (a few
/// batches ahead), its output rows sent as they come, then its progress or its error.
fn run_state_task(task: StateTask, mut incoming: Streaming<FlightData>) -> Stream<FlightData> {
    log::info!(
        "running a task: stateful operator ({} bytes of spec)",
        task.spec.len()
    );
    if !task.senders.is_empty() {
        return crate::routes::run_routed_task(task, incoming);
    }
    let (rows_tx, mut rows_rx) = tokio::sync::mpsc::channel::<Result<(usize, RecordBatch)>>(4);
    tokio::spawn(async move {
        loop {
            let item = match incoming.message().await {
                Ok(Some(m)) => match decode_input(&m) {
                    Ok(Some(rows)) => Ok(rows),
                    // The end of the rows: the task may commit.
                    Ok(None) => return,
                    Err(e) => Err(e),
                },
                // The driver left before the end (its batch failed): the task must not commit.
                Ok(None) => Err(wire_error("rows", "the driver ended them before their end")),
                Err(s) => Err(wire_error("rows", format!("they broke off: {s}"))),
            };
            let last = item.is_err();
            if rows_tx.send(item).await.is_err() || last {
                return;
            }
        }
    });
    let rows: StateTaskRows = Box::new(std::iter::from_fn(move || rows_rx.blocking_recv()));
    answer_state_task(task, rows, || ())
}

/// Runs a worker's stateful task over `rows` on a blocking thread: its output rows sent as
/// they come, then its progress or its error; `done` runs once the task ended.
pub(crate) fn answer_state_task(
    task: StateTask,
    rows: StateTaskRows,
    done: impl FnOnce() + Send + 'static,
) -> Stream<FlightData> {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::result::Result<FlightData, Status>>(4);
    tokio::task::spawn_blocking(move || {
        let mut output = |rows: RecordBatch| {
            let m = encode_answer(&Answer::Rows(rows))?;
            tx.blocking_send(Ok(m))
                .map_err(|_| wire_error("output", "the driver left"))
        };
        let ran = sluice::run_state_task(task, rows, &mut output);
        done();
        match &ran {
            Ok(_) => log::info!("a stateful task committed its partitions"),
            Err(e) => log::warn!("a stateful task failed, its partitions not committed: {e}"),
        }
        let last = ran
            .and_then(|p| encode_answer(&Answer::Progress(p)))
            .map_err(|e| Status::aborted(e.to_wire()));
        let _ = tx.blocking_send(last);
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) }).boxed()
}

/// A worker's read: its items sent as they come, a few ahead of the driver (the read waits
/// while the driver does not take them).
fn read_files(
    body: &[u8],
    functions: Arc<TaskContext>,
) -> std::result::Result<Response<Stream<arrow_flight::Result>>, Status> {
    let task = decode_read_task(body, &functions).map_err(|e| Status::aborted(e.to_wire()))?;
    log::info!(
        "running a task: reading files ({} bytes of spec)",
        task.spec.len()
    );
    let (tx, rx) =
        tokio::sync::mpsc::channel::<std::result::Result<arrow_flight::Result, Status>>(4);
    tokio::task::spawn_blocking(move || {
        let items = match run_read(task, &functions) {
            Ok(items) => items,
            Err(e) => {
                let _ = tx.blocking_send(Err(Status::aborted(e.to_wire())));
                return;
            }
        };
        for item in items {
            let message = item
                .and_then(|i| encode_read_item(&i))
                .map(|body| arrow_flight::Result { body: body.into() })
                .map_err(|e| Status::aborted(e.to_wire()));
            let failed = message.is_err();
            if tx.blocking_send(message).is_err() || failed {
                return;
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok(Response::new(stream.boxed()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::logical_expr::{col, lit};

    #[test]
    fn a_task_its_rows_and_its_answers_cross_the_wire_unchanged() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        let df = Arc::new(DFSchema::try_from(schema.as_ref().clone()).unwrap());
        let task = StateTask {
            spec: "{\"a\":1}".into(),
            schemas: vec![df.clone()],
            exprs: vec![vec![col("k") + lit(1i64)], vec![]],
            exchange: "q-1/0".into(),
            senders: vec![3],
        };
        let session = sluice::Session::builder().build().unwrap();
        let ctx = session.context().state().task_ctx();
        let back = decode_task(&encode_task(&task).unwrap(), &ctx).unwrap();
        assert_eq!(back.spec, task.spec);
        assert_eq!(back.schemas, task.schemas);
        assert_eq!(back.exprs, task.exprs);
        assert_eq!((back.exchange, back.senders), (task.exchange, task.senders));
        let (input, rows) = decode_input(&encode_input(1, &batch).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!((input, rows), (1, batch.clone()));
        assert!(decode_input(&message(&[END], Vec::new()))
            .unwrap()
            .is_none());
        assert!(decode_input(&message(&[9], Vec::new())).is_err());
        match decode_answer(&encode_answer(&Answer::Rows(batch.clone())).unwrap()) {
            Ok(Answer::Rows(b)) => assert_eq!(b, batch),
            other => panic!("{other:?}"),
        }
        match decode_answer(&encode_answer(&Answer::Progress("{}".into())).unwrap()) {
            Ok(Answer::Progress(p)) => assert_eq!(p, "{}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_read_task_and_its_items_cross_the_wire_unchanged() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let task = ReadTask {
            spec: "{\"files\":[\"a\"]}".into(),
            schema: schema.clone(),
            projection: Some(vec![0]),
            above: vec![1, 2, 3],
            route: None,
        };
        let functions = TaskContext::default();
        let back = decode_read_task(&encode_read_task(&task).unwrap(), &functions).unwrap();
        assert_eq!(
            (back.spec, back.schema, back.projection, back.above),
            (
                task.spec.clone(),
                task.schema.clone(),
                task.projection.clone(),
                task.above.clone()
            )
        );
        assert!(back.route.is_none());
        // Routed to the owners of a stateful operator's partitions: the route comes across.
        let df = Arc::new(DFSchema::try_from(schema.as_ref().clone()).unwrap());
        let routed = ReadTask {
            route: Some(ReadRoute {
                task: StateTask {
                    spec: "{}".into(),
                    schemas: vec![df],
                    exprs: vec![vec![col("k")]],
                    exchange: "q-2".into(),
                    senders: vec![2, 1],
                },
                input: 1,
                owners: vec![
                    ("a:1".into(), "q-2/0".into()),
                    ("b:2".into(), "q-2/1".into()),
                ],
            }),
            ..task
        };
        let back = decode_read_task(&encode_read_task(&routed).unwrap(), &functions).unwrap();
        let (got, sent) = (back.route.unwrap(), routed.route.unwrap());
        assert_eq!((got.input, &got.owners), (1, &sent.owners));
        assert_eq!(
            (got.task.exchange, got.task.senders, got.task.exprs),
            (sent.task.exchange, sent.task.senders, sent.task.exprs)
        );
        let rows = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(vec![Some(7), None]))],
        )
        .unwrap();
        match decode_read_item(&encode_read_item(&ReadItem::Rows(rows.clone())).unwrap()) {
            Ok(ReadItem::Rows(b)) => assert_eq!(b, rows),
            other => panic!("{other:?}"),
        }
        let counts = sluice::distributed::ReadCounts {
            rows: 2,
            malformed: 1,
            dropped: 0,
            files_read: 1,
            event_times: vec![sluice::distributed::EventTimeStats {
                max: 9,
                min: 3,
                sum: 12.0,
                count: 2,
            }],
            dropped_by_watermark: 4,
        };
        match decode_read_item(&encode_read_item(&ReadItem::Counts(counts.clone())).unwrap()) {
            Ok(ReadItem::Counts(c)) => assert_eq!(c, counts),
            other => panic!("{other:?}"),
        }
        assert!(
            decode_read_item(&[9]).is_err(),
            "an unknown kind is refused"
        );
    }
}
