//! The bytes of Sluice's tasks on the workers: a stateful task and a read task as DataFusion's
//! proto messages and Arrow IPC, the exchange's messages (header, rows, end), a task's answers,
//! and the answer stream of a stateful task run on a worker.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow_flight::FlightData;
use datafusion::common::{DFSchema, DFSchemaRef};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion_proto::logical_plan::from_proto::parse_exprs;
use datafusion_proto::logical_plan::to_proto::serialize_exprs;
use datafusion_proto::logical_plan::DefaultLogicalExtensionCodec;
use datafusion_proto::protobuf;
use futures::stream::BoxStream;
use futures::StreamExt;
use prost::Message;
use sluice::distributed::{ReadItem, ReadRoute, ReadTask, StateTask, StateTaskRows};
use sluice::error::{Result, SluiceError};
use tonic::Status;

/// The Flight action a source's read is.
pub(crate) const READ_FILES: &str = "sluice.readFiles";

/// A task's or an output's bytes may be as large as a batch's rows.
pub(crate) const MAX_MESSAGE: usize = usize::MAX;

pub(crate) fn wire_error(what: &str, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::internal(format!("a stateful task's {what}: {e}"))
}

/// Length-prefixed sections, in order.
#[derive(Default)]
pub(crate) struct Sections(Vec<u8>);

impl Sections {
    fn push(&mut self, bytes: &[u8]) {
        self.0
            .extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        self.0.extend_from_slice(bytes);
    }
}

/// Reads [`Sections`] back.
pub(crate) struct Reader<'a>(&'a [u8]);

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

pub(crate) fn count(s: &mut Sections, n: usize) {
    s.push(&(n as u64).to_le_bytes());
}

/// Rows as an Arrow IPC stream (none: an empty section).
pub(crate) fn ipc(batches: &[RecordBatch]) -> Result<Vec<u8>> {
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

pub(crate) fn from_ipc(bytes: &[u8]) -> Result<Vec<RecordBatch>> {
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
pub(crate) const ROWS: u8 = 1;
pub(crate) const END: u8 = 2;

pub(crate) fn message(kind: &[u8], body: Vec<u8>) -> FlightData {
    FlightData {
        app_metadata: kind.to_vec().into(),
        data_body: body.into(),
        ..Default::default()
    }
}

/// Rows of input `input` of a stateful task.
pub(crate) fn encode_input(input: usize, rows: &RecordBatch) -> Result<FlightData> {
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

pub(crate) fn decode_answer(m: &FlightData) -> Result<Answer> {
    match m.app_metadata.first() {
        Some(&ROWS) => Ok(Answer::Rows(single(&m.data_body)?)),
        Some(&END) => Ok(Answer::Progress(
            String::from_utf8(m.data_body.to_vec()).map_err(|e| wire_error("progress", e))?,
        )),
        _ => Err(wire_error("answer", "an unknown kind")),
    }
}

/// The one batch of an Arrow IPC stream.
pub(crate) fn single(bytes: &[u8]) -> Result<RecordBatch> {
    from_ipc(bytes)?
        .into_iter()
        .next()
        .ok_or_else(|| wire_error("rows", "none in the message"))
}

/// A schema alone as an Arrow IPC stream.
pub(crate) fn schema_ipc(schema: &arrow::datatypes::SchemaRef) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new(&mut out, schema)?;
    w.finish()?;
    drop(w);
    Ok(out)
}

/// A read task: its spec, its rows' schema (an empty Arrow IPC stream), its projection (JSON),
/// the plan over its rows (datafusion-proto bytes; empty: none), and its route (none: an empty
/// section; else the operator's input and owners as JSON, then the operator's task).
pub(crate) fn encode_read_task(task: &ReadTask) -> Result<Vec<u8>> {
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
pub(crate) fn decode_read_task(bytes: &[u8], functions: &TaskContext) -> Result<ReadTask> {
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

/// A read's item: `0` and one batch as Arrow IPC, or `1` and the counts as JSON.
pub(crate) fn encode_read_item(item: &ReadItem) -> Result<Vec<u8>> {
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

pub(crate) fn decode_read_item(bytes: &[u8]) -> Result<ReadItem> {
    match bytes.split_first() {
        Some((0, rows)) => single(rows).map(ReadItem::Rows),
        Some((1, counts)) => Ok(ReadItem::Counts(
            serde_json::from_slice(counts).map_err(|e| wire_error("counts", e))?,
        )),
        _ => Err(wire_error("read item", "an unknown kind")),
    }
}

/// A stream of Flight messages, as the service answers.
pub(crate) type Stream<T> = BoxStream<'static, std::result::Result<T, Status>>;

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
