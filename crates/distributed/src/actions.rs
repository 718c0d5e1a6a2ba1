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

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use datafusion::common::tree_node::TreeNode;
use datafusion::execution::{SessionState, TaskContext};
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf;
use futures::StreamExt;
use prost::Message;
use sluice::distributed::{ReadItem, ReadItems, ReadTask, StateTask, StateTaskRows};
use sluice::error::Result;
use tonic::{Request, Response, Status, Streaming};

use crate::wire::*;

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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::DFSchema;
    use datafusion::logical_expr::{col, lit};
    use sluice::distributed::ReadRoute;

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
