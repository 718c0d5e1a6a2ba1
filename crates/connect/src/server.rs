//! The Spark Connect service: sessions by the client's `session_id`, `ExecutePlan` (relations
//! are collected into Arrow batches, commands run), reattachable executions (responses are
//! kept until `ReleaseExecute`, so `ReattachExecute` can resume a broken stream), `AnalyzePlan`,
//! `Config`, `Interrupt`, `ReleaseSession`, `FetchErrorDetails` and artifacts. How it is started
//! and stopped is [`mod@crate::serve`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::conf;
use crate::error::{ConnectError, Result};
use crate::grpc::{ResponseStream, SparkConnectService};
use crate::proto;
use crate::proto::execute_plan_response::ResponseType;
use crate::results::Results;
use crate::session::{ConnectSession, SessionSettings};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One execution's responses, kept for `ReattachExecute` until released.
struct Operation {
    session_id: String,
    responses: Vec<proto::ExecutePlanResponse>,
}

/// The session fields a request carries.
trait SessionRequest {
    fn session_id(&self) -> &str;
    fn user_context(&self) -> Option<&proto::UserContext>;
    fn observed_server_side_session_id(&self) -> Option<&String>;
    fn client_type(&self) -> Option<&str>;
}

macro_rules! session_request {
    ($($t:ty),*) => {$(
        impl SessionRequest for $t {
            fn session_id(&self) -> &str {
                &self.session_id
            }
            fn user_context(&self) -> Option<&proto::UserContext> {
                self.user_context.as_ref()
            }
            fn observed_server_side_session_id(&self) -> Option<&String> {
                self.client_observed_server_side_session_id.as_ref()
            }
            fn client_type(&self) -> Option<&str> {
                self.client_type.as_deref()
            }
        }
    )*};
}

session_request!(
    proto::ExecutePlanRequest,
    proto::AnalyzePlanRequest,
    proto::ConfigRequest,
    proto::ArtifactStatusesRequest,
    proto::InterruptRequest,
    proto::AddArtifactsRequest
);

/// The service behind the gRPC routing.
pub struct ConnectService {
    sessions: Mutex<HashMap<String, Arc<ConnectSession>>>,
    operations: Mutex<HashMap<String, Operation>>,
    settings: SessionSettings,
    max_sessions: usize,
    idle_timeout: std::time::Duration,
}

impl ConnectService {
    /// A service whose sessions start Python workers with `settings`, at most `max_sessions` of
    /// them open at once (one idle for `idle_timeout` without an active query makes room).
    pub fn new(
        settings: SessionSettings,
        max_sessions: usize,
        idle_timeout: std::time::Duration,
    ) -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            operations: Mutex::new(HashMap::new()),
            settings,
            max_sessions,
            idle_timeout,
        }
    }

    /// The session idle longest, past the idle timeout and without an active query, if any.
    fn idle_session(&self, sessions: &HashMap<String, Arc<ConnectSession>>) -> Option<String> {
        sessions
            .iter()
            .filter(|(_, s)| {
                s.last_used().elapsed() >= self.idle_timeout
                    && !s
                        .queries
                        .all()
                        .iter()
                        .any(sluice::StreamingQuery::is_active)
            })
            .min_by_key(|(_, s)| s.last_used())
            .map(|(id, _)| id.clone())
    }

    /// The session `session_id`, created on first use. A client that saw another server-side
    /// session (the server restarted) is told its state is gone, as Spark tells it.
    fn session(
        &self,
        session_id: &str,
        user: Option<&proto::UserContext>,
        observed: Option<&String>,
        client_type: Option<&str>,
    ) -> Result<Arc<ConnectSession>> {
        if session_id.is_empty() {
            return Err(ConnectError::illegal_argument(
                "the request has no session_id; connect with SparkSession.builder.remote(..)",
            ));
        }
        let mut sessions = lock(&self.sessions);
        let mut ended = None;
        let session = match sessions.get(session_id) {
            Some(s) => s.clone(),
            None => {
                if sessions.len() >= self.max_sessions {
                    let Some(idle) = self.idle_session(&sessions) else {
                        return Err(crate::limits::too_many_sessions(self.max_sessions));
                    };
                    log::info!(
                        "session {idle} ended after {} s idle, for a new one (--max-sessions {})",
                        self.idle_timeout.as_secs(),
                        self.max_sessions
                    );
                    ended = sessions.remove_entry(&idle);
                }
                let user_id = user.map(|u| u.user_id.as_str()).unwrap_or_default();
                let s = ConnectSession::new(session_id, user_id, self.settings.clone())?;
                crate::observe::session_opened(session_id, user_id, client_type);
                sessions.insert(session_id.to_string(), s.clone());
                s
            }
        };
        drop(sessions);
        if let Some((ended, ended_session)) = ended {
            lock(&self.operations).retain(|_, op| op.session_id != ended);
            // An engine session holds a runtime, which must not be dropped on the async one.
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => drop(handle.spawn_blocking(move || drop(ended_session))),
                Err(_) => drop(ended_session),
            }
        }
        if let Some(seen) = observed {
            if !seen.is_empty() && *seen != session.server_side_session_id {
                return Err(ConnectError::new(
                    crate::error::java::INTERNAL,
                    sluice::error::class::INVALID_HANDLE_SESSION_CHANGED,
                    format!(
                        "The existing Spark server driver instance has restarted, or ended the \
                         session after it was idle (session {session_id}): server-side state \
                         (temp views, cached frames) is gone. Start a new session: spark.stop(), \
                         then getOrCreate()."
                    ),
                ));
            }
        }
        session.touch();
        Ok(session)
    }

    /// The session of a request (see `session`), as a gRPC status on error.
    fn session_for(&self, req: &impl SessionRequest) -> Result<Arc<ConnectSession>, Status> {
        self.session(
            req.session_id(),
            req.user_context(),
            req.observed_server_side_session_id(),
            req.client_type(),
        )
        .map_err(ConnectError::into_status)
    }

    /// Logs every open session closed (server shutdown).
    pub(crate) fn close_all_sessions(&self) {
        for s in lock(&self.sessions).values() {
            crate::observe::session_closed(&s.session_id, &s.user_id);
        }
    }

    /// Stops every query of every session (server shutdown).
    pub fn stop_all_queries(&self) {
        let sessions: Vec<_> = lock(&self.sessions).values().cloned().collect();
        for s in sessions {
            s.queries.stop_all();
        }
    }

    fn stream_from(
        responses: Vec<proto::ExecutePlanResponse>,
    ) -> Response<ResponseStream<proto::ExecutePlanResponse>> {
        Response::new(Box::pin(futures::stream::iter(
            responses.into_iter().map(Ok),
        )))
    }
}

/// The ids every response of one execution carries.
#[derive(Clone)]
struct ResponseIds {
    session_id: String,
    server_side_session_id: String,
    operation_id: String,
}

impl ResponseIds {
    fn response(
        &self,
        response_type: Option<ResponseType>,
        schema: Option<proto::DataType>,
    ) -> proto::ExecutePlanResponse {
        proto::ExecutePlanResponse {
            session_id: self.session_id.clone(),
            server_side_session_id: self.server_side_session_id.clone(),
            operation_id: self.operation_id.clone(),
            response_id: uuid::Uuid::new_v4().to_string(),
            schema,
            response_type,
            ..Default::default()
        }
    }
}

fn is_add_listener_bus(plan: &proto::Plan) -> bool {
    use proto::streaming_query_listener_bus_command::Command as Bus;
    matches!(
        &plan.op_type,
        Some(proto::plan::OpType::Command(proto::Command {
            command_type: Some(
                proto::command::CommandType::StreamingQueryListenerBusCommand(
                    proto::StreamingQueryListenerBusCommand {
                        command: Some(Bus::AddListenerBusListener(true))
                    }
                )
            ),
        }))
    )
}

/// The long-lived response of `add_listener_bus_listener`: "added", then the session's query
/// events as they happen, until the client removes its last listener.
fn listener_bus_stream(
    session: &Arc<ConnectSession>,
    ids: ResponseIds,
) -> Response<ResponseStream<proto::ExecutePlanResponse>> {
    use proto::StreamingQueryListenerEventsResult as Events;
    let rx = session.listener_bus.open(&session.sluice);
    let added = ids.response(
        Some(ResponseType::StreamingQueryListenerEventsResult(Events {
            events: Vec::new(),
            listener_bus_listener_added: Some(true),
        })),
        None,
    );
    let (each, last) = (ids.clone(), ids);
    let events = tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(move |event| {
        each.response(
            Some(ResponseType::StreamingQueryListenerEventsResult(Events {
                events: vec![event],
                listener_bus_listener_added: None,
            })),
            None,
        )
    });
    let complete = futures::stream::once(async move {
        last.response(
            Some(ResponseType::ResultComplete(
                proto::execute_plan_response::ResultComplete {},
            )),
            None,
        )
    });
    let stream = futures::stream::once(async move { added })
        .chain(events)
        .chain(complete)
        .map(Ok);
    Response::new(Box::pin(stream))
}

/// Runs blocking engine work off the async runtime (Sluice's API is blocking).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T, Status> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.into_status()),
        Err(e) => Err(ConnectError::new(
            crate::error::java::INTERNAL,
            sluice::error::class::INTERNAL_ERROR,
            format!("a Sluice task failed: {e}"),
        )
        .into_status()),
    }
}

fn execute(session: &Arc<ConnectSession>, plan: &proto::Plan) -> Result<Results> {
    use proto::plan::OpType;
    match &plan.op_type {
        Some(OpType::Root(relation)) => collect(session, relation),
        Some(OpType::Command(command)) => crate::commands::run(session, command),
        Some(OpType::CompressedOperation(_)) => Err(ConnectError::not_supported(
            "compressed plans (set spark.connect.session.planCompression.threshold to -1 on \
             the client)",
        )),
        None => Err(ConnectError::illegal_argument("the plan is empty")),
    }
}

/// A relation's rows as Arrow batches (`collect`, `show`, `toPandas`, `count`, ...).
pub(crate) fn collect(
    session: &Arc<ConnectSession>,
    relation: &proto::Relation,
) -> Result<Results> {
    let frame = crate::plan::frame(session, relation)?;
    let (schema, batches) = crate::ipc::for_client(frame.schema(), frame.collect()?)?;
    let mut results = Results {
        schema: Some(crate::plan::types::schema_to_proto(&schema)?),
        items: Vec::new(),
    };
    let mut batches: Vec<_> = batches.into_iter().filter(|b| b.num_rows() > 0).collect();
    if batches.is_empty() {
        // An empty result is one batch of no rows (a stream of only a schema would give the
        // client no batch at all), so collect/toPandas/toArrow know the columns.
        batches.push(arrow::array::RecordBatch::new_empty(schema));
    }
    let mut offset = 0i64;
    for batch in &batches {
        let rows = batch.num_rows() as i64;
        results.items.push(ResponseType::ArrowBatch(
            proto::execute_plan_response::ArrowBatch {
                row_count: rows,
                data: crate::ipc::write_batch(batch)?.into(),
                start_offset: Some(offset),
                chunk_index: None,
                num_chunks_in_batch: None,
            },
        ));
        offset += rows;
    }
    Ok(results)
}

fn analyze(
    session: &Arc<ConnectSession>,
    analyze: &proto::analyze_plan_request::Analyze,
) -> Result<proto::analyze_plan_response::Result> {
    use proto::analyze_plan_request::Analyze as A;
    use proto::analyze_plan_response as r;
    let frame_of = |plan: &Option<proto::Plan>| -> Result<sluice::StreamFrame> {
        match plan.as_ref().and_then(|p| p.op_type.as_ref()) {
            Some(proto::plan::OpType::Root(rel)) => crate::plan::frame(session, rel),
            _ => Err(ConnectError::illegal_argument(
                "analyze needs a relation (a DataFrame), not a command",
            )),
        }
    };
    Ok(match analyze {
        A::Schema(s) => r::Result::Schema(r::Schema {
            schema: Some(crate::plan::types::schema_to_proto(
                &frame_of(&s.plan)?.schema(),
            )?),
        }),
        A::Explain(e) => r::Result::Explain(r::Explain {
            explain_string: format!("== Physical Plan ==\n{}", frame_of(&e.plan)?.explain()),
        }),
        A::TreeString(t) => r::Result::TreeString(r::TreeString {
            tree_string: crate::plan::types::tree_string(
                &frame_of(&t.plan)?.schema(),
                t.level.and_then(|l| usize::try_from(l).ok()),
            ),
        }),
        A::IsLocal(l) => {
            let is_local = matches!(
                l.plan.as_ref().and_then(|p| p.op_type.as_ref()),
                Some(proto::plan::OpType::Root(proto::Relation {
                    rel_type: Some(proto::relation::RelType::LocalRelation(_)),
                    ..
                }))
            );
            r::Result::IsLocal(r::IsLocal { is_local })
        }
        A::IsStreaming(s) => r::Result::IsStreaming(r::IsStreaming {
            is_streaming: frame_of(&s.plan)?.is_streaming(),
        }),
        A::InputFiles(_) => r::Result::InputFiles(r::InputFiles { files: Vec::new() }),
        A::SparkVersion(_) => r::Result::SparkVersion(r::SparkVersion {
            version: SPARK_VERSION.to_string(),
        }),
        A::DdlParse(d) => r::Result::DdlParse(r::DdlParse {
            parsed: Some(crate::plan::types::to_proto(
                &crate::plan::types::parse_type_text(&d.ddl_string)?,
            )?),
        }),
        A::SameSemantics(s) => {
            let a = frame_of(&s.target_plan)?;
            let b = frame_of(&s.other_plan)?;
            r::Result::SameSemantics(r::SameSemantics {
                result: a.logical_plan() == b.logical_plan(),
            })
        }
        A::SemanticHash(s) => {
            use std::hash::{Hash, Hasher};
            let frame = frame_of(&s.plan)?;
            let mut h = std::collections::hash_map::DefaultHasher::new();
            frame.logical_plan().hash(&mut h);
            r::Result::SemanticHash(r::SemanticHash {
                result: h.finish() as i32,
            })
        }
        // Sluice has no cache: a frame is recomputed, so persist/unpersist are accepted as
        // no-ops and the storage level is "none".
        A::Persist(_) => r::Result::Persist(r::Persist {}),
        A::Unpersist(_) => r::Result::Unpersist(r::Unpersist {}),
        A::GetStorageLevel(_) => r::Result::GetStorageLevel(r::GetStorageLevel {
            storage_level: Some(proto::StorageLevel {
                use_disk: false,
                use_memory: false,
                use_off_heap: false,
                deserialized: false,
                replication: 1,
            }),
        }),
        A::JsonToDdl(j) => {
            let schema = crate::plan::types::parse_schema(&j.json_string)?;
            r::Result::JsonToDdl(r::JsonToDdl {
                ddl_string: sluice::schema::schema_to_ddl(&schema),
            })
        }
    })
}

/// The Spark version the server reports: the protocol it speaks (pyspark-client 4.2).
pub const SPARK_VERSION: &str = "4.2.0";

#[tonic::async_trait]
impl SparkConnectService for ConnectService {
    async fn execute_plan(
        &self,
        request: Request<proto::ExecutePlanRequest>,
    ) -> Result<Response<ResponseStream<proto::ExecutePlanResponse>>, Status> {
        let req = request.into_inner();
        let session = self.session_for(&req)?;
        let operation_id = req
            .operation_id
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        if lock(&self.operations).contains_key(&operation_id) {
            return Err(ConnectError::new(
                crate::error::java::INTERNAL,
                sluice::error::class::INVALID_HANDLE_OPERATION_ALREADY_EXISTS,
                format!("the operation {operation_id} already exists"),
            )
            .into_status());
        }
        let plan = req
            .plan
            .ok_or_else(|| ConnectError::illegal_argument("ExecutePlan without a plan"))
            .map_err(ConnectError::into_status)?;
        let ids = ResponseIds {
            session_id: session.session_id.clone(),
            server_side_session_id: session.server_side_session_id.clone(),
            operation_id: operation_id.clone(),
        };
        if is_add_listener_bus(&plan) {
            return Ok(listener_bus_stream(&session, ids));
        }
        let s = session.clone();
        let results = blocking(move || execute(&s, &plan)).await?;
        let response = |response_type: Option<ResponseType>, schema: Option<proto::DataType>| {
            ids.response(response_type, schema)
        };
        let mut responses = Vec::new();
        if let Some(schema) = results.schema {
            responses.push(response(None, Some(schema)));
        }
        for item in results.items {
            responses.push(response(Some(item), None));
        }
        responses.push(response(
            Some(ResponseType::ResultComplete(
                proto::execute_plan_response::ResultComplete {},
            )),
            None,
        ));
        let reattachable = req.request_options.iter().any(|o| {
            matches!(
                &o.request_option,
                Some(proto::execute_plan_request::request_option::RequestOption::ReattachOptions(
                    r
                )) if r.reattachable
            )
        });
        if reattachable {
            lock(&self.operations).insert(
                operation_id.clone(),
                Operation {
                    session_id: session.session_id.clone(),
                    responses: responses.clone(),
                },
            );
        }
        Ok(Self::stream_from(responses))
    }

    async fn reattach_execute(
        &self,
        request: Request<proto::ReattachExecuteRequest>,
    ) -> Result<Response<ResponseStream<proto::ExecutePlanResponse>>, Status> {
        let req = request.into_inner();
        let operations = lock(&self.operations);
        let Some(op) = operations
            .get(&req.operation_id)
            .filter(|op| op.session_id == req.session_id)
        else {
            return Err(ConnectError::new(
                crate::error::java::INTERNAL,
                sluice::error::class::INVALID_HANDLE_OPERATION_NOT_FOUND,
                format!(
                    "the operation {} is not known (it was released, or the server restarted)",
                    req.operation_id
                ),
            )
            .into_status());
        };
        let rest: Vec<_> = match &req.last_response_id {
            Some(last) => match op.responses.iter().position(|r| &r.response_id == last) {
                Some(i) => op.responses[i + 1..].to_vec(),
                None => op.responses.clone(),
            },
            None => op.responses.clone(),
        };
        Ok(Self::stream_from(rest))
    }

    async fn release_execute(
        &self,
        request: Request<proto::ReleaseExecuteRequest>,
    ) -> Result<Response<proto::ReleaseExecuteResponse>, Status> {
        use proto::release_execute_request::Release;
        let req = request.into_inner();
        let mut operations = lock(&self.operations);
        match &req.release {
            Some(Release::ReleaseUntil(until)) => {
                if let Some(op) = operations.get_mut(&req.operation_id) {
                    if let Some(i) = op
                        .responses
                        .iter()
                        .position(|r| r.response_id == until.response_id)
                    {
                        op.responses.drain(..=i);
                    }
                }
            }
            _ => {
                operations.remove(&req.operation_id);
            }
        }
        let server_side = lock(&self.sessions)
            .get(&req.session_id)
            .map(|s| s.server_side_session_id.clone())
            .unwrap_or_default();
        Ok(Response::new(proto::ReleaseExecuteResponse {
            session_id: req.session_id,
            server_side_session_id: server_side,
            operation_id: Some(req.operation_id),
        }))
    }

    async fn analyze_plan(
        &self,
        request: Request<proto::AnalyzePlanRequest>,
    ) -> Result<Response<proto::AnalyzePlanResponse>, Status> {
        let req = request.into_inner();
        let session = self.session_for(&req)?;
        let what = req
            .analyze
            .ok_or_else(|| ConnectError::illegal_argument("AnalyzePlan without a request"))
            .map_err(ConnectError::into_status)?;
        let s = session.clone();
        let result = blocking(move || analyze(&s, &what)).await?;
        Ok(Response::new(proto::AnalyzePlanResponse {
            session_id: session.session_id.clone(),
            server_side_session_id: session.server_side_session_id.clone(),
            result: Some(result),
        }))
    }

    async fn config(
        &self,
        request: Request<proto::ConfigRequest>,
    ) -> Result<Response<proto::ConfigResponse>, Status> {
        let req = request.into_inner();
        let session = self.session_for(&req)?;
        let op = req
            .operation
            .and_then(|o| o.op_type)
            .ok_or_else(|| ConnectError::illegal_argument("Config without an operation"))
            .map_err(ConnectError::into_status)?;
        let (pairs, warnings) = conf::run(&session, op).map_err(ConnectError::into_status)?;
        Ok(Response::new(proto::ConfigResponse {
            session_id: session.session_id.clone(),
            server_side_session_id: session.server_side_session_id.clone(),
            pairs,
            warnings,
        }))
    }

    async fn add_artifacts(
        &self,
        request: Request<Streaming<proto::AddArtifactsRequest>>,
    ) -> Result<Response<proto::AddArtifactsResponse>, Status> {
        use proto::add_artifacts_request::Payload;
        use proto::add_artifacts_response::ArtifactSummary;
        let mut stream = request.into_inner();
        let mut session: Option<Arc<ConnectSession>> = None;
        let mut summaries = Vec::new();
        // A chunked artifact in progress: name, data so far, all CRCs right so far.
        let mut chunked: Option<(String, Vec<u8>, bool)> = None;
        let crc_ok = |c: &proto::add_artifacts_request::ArtifactChunk| {
            i64::from(crc32fast::hash(&c.data)) == c.crc
        };
        while let Some(msg) = stream.next().await {
            let msg = msg?;
            if session.is_none() {
                session = Some(self.session_for(&msg)?);
            }
            let Some(s) = session.as_ref() else { break };
            match msg.payload {
                Some(Payload::Batch(batch)) => {
                    for a in batch.artifacts {
                        let ok = a.data.as_ref().is_some_and(crc_ok);
                        if ok {
                            let data = a.data.map(|d| d.data.to_vec()).unwrap_or_default();
                            s.add_artifact(&a.name, data);
                        }
                        summaries.push(ArtifactSummary {
                            name: a.name,
                            is_crc_successful: ok,
                        });
                    }
                }
                Some(Payload::BeginChunk(begin)) => {
                    let (ok, data) = match &begin.initial_chunk {
                        Some(c) => (crc_ok(c), c.data.to_vec()),
                        None => (true, Vec::new()),
                    };
                    chunked = Some((begin.name, data, ok));
                }
                Some(Payload::Chunk(chunk)) => {
                    if let Some((_, data, ok)) = chunked.as_mut() {
                        *ok &= crc_ok(&chunk);
                        data.extend_from_slice(&chunk.data);
                    }
                }
                None => {}
            }
        }
        if let (Some(s), Some((name, data, ok))) = (session.as_ref(), chunked) {
            if ok {
                s.add_artifact(&name, data);
            }
            summaries.push(ArtifactSummary {
                name,
                is_crc_successful: ok,
            });
        }
        let (session_id, server_side) = session
            .map(|s| (s.session_id.clone(), s.server_side_session_id.clone()))
            .unwrap_or_default();
        Ok(Response::new(proto::AddArtifactsResponse {
            session_id,
            server_side_session_id: server_side,
            artifacts: summaries,
        }))
    }

    async fn artifact_status(
        &self,
        request: Request<proto::ArtifactStatusesRequest>,
    ) -> Result<Response<proto::ArtifactStatusesResponse>, Status> {
        let req = request.into_inner();
        let session = self.session_for(&req)?;
        let statuses = req
            .names
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    proto::artifact_statuses_response::ArtifactStatus {
                        exists: session.artifact(n).is_some(),
                    },
                )
            })
            .collect();
        Ok(Response::new(proto::ArtifactStatusesResponse {
            session_id: session.session_id.clone(),
            server_side_session_id: session.server_side_session_id.clone(),
            statuses,
        }))
    }

    async fn interrupt(
        &self,
        request: Request<proto::InterruptRequest>,
    ) -> Result<Response<proto::InterruptResponse>, Status> {
        let req = request.into_inner();
        let session = self.session_for(&req)?;
        // Executions run to completion before their first response is sent, so there is never
        // a running one to interrupt; streaming queries are stopped with query.stop().
        Ok(Response::new(proto::InterruptResponse {
            session_id: session.session_id.clone(),
            server_side_session_id: session.server_side_session_id.clone(),
            interrupted_ids: Vec::new(),
        }))
    }

    async fn release_session(
        &self,
        request: Request<proto::ReleaseSessionRequest>,
    ) -> Result<Response<proto::ReleaseSessionResponse>, Status> {
        let req = request.into_inner();
        let session = lock(&self.sessions).remove(&req.session_id);
        lock(&self.operations).retain(|_, op| op.session_id != req.session_id);
        let server_side = match session {
            Some(s) => {
                let id = s.server_side_session_id.clone();
                // Spark stops a released session's queries.
                let _ = blocking(move || {
                    let active = s.queries.all().iter().filter(|q| q.is_active()).count();
                    s.queries.stop_all();
                    crate::observe::session_released(&s.session_id, &s.user_id, active);
                    Ok(())
                })
                .await;
                id
            }
            None => String::new(),
        };
        Ok(Response::new(proto::ReleaseSessionResponse {
            session_id: req.session_id,
            server_side_session_id: server_side,
        }))
    }

    async fn fetch_error_details(
        &self,
        request: Request<proto::FetchErrorDetailsRequest>,
    ) -> Result<Response<proto::FetchErrorDetailsResponse>, Status> {
        // Errors carry their whole message in the status (no errorId is handed out), so there
        // are never further details to fetch.
        let req = request.into_inner();
        let server_side = lock(&self.sessions)
            .get(&req.session_id)
            .map(|s| s.server_side_session_id.clone())
            .unwrap_or_default();
        Ok(Response::new(proto::FetchErrorDetailsResponse {
            server_side_session_id: server_side,
            session_id: req.session_id,
            root_error_idx: None,
            errors: Vec::new(),
        }))
    }

    async fn clone_session(
        &self,
        _request: Request<proto::CloneSessionRequest>,
    ) -> Result<Response<proto::CloneSessionResponse>, Status> {
        Err(ConnectError::not_supported("CloneSession").into_status())
    }

    async fn get_status(
        &self,
        _request: Request<proto::GetStatusRequest>,
    ) -> Result<Response<proto::GetStatusResponse>, Status> {
        Err(ConnectError::not_supported("GetStatus").into_status())
    }
}
