//! The `spark.connect.SparkConnectService` gRPC service: method paths, codecs and message size
//! limits. The generated protocol crate (`sluice-connect-proto`) holds only a client, so the server side
//! of the routing is here, by hand, on tonic's server building blocks: one trait method per
//! RPC, and [`SparkConnectServer`] dispatching `/spark.connect.SparkConnectService/<Method>`,
//! decoding with the server's limits on a message's size and nesting ([`WireLimits`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tonic::body::Body;
use tonic::codegen::{http, Body as HttpBody, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService};
use tonic::{Request, Response, Status, Streaming};

use crate::limits::{explain_too_large, DepthLimitedCodec};
use crate::proto;

/// A stream of responses of a server-streaming RPC.
pub type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// What the server decodes: the largest message (a local relation with data, an artifact chunk;
/// Spark's `spark.connect.grpc.maxInboundMessageSize`) and the deepest nesting of messages
/// (Spark's `spark.connect.grpc.marshallerRecursionLimit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireLimits {
    /// Bytes per message.
    pub max_message_size: usize,
    /// Levels of nested messages.
    pub max_depth: usize,
}

impl Default for WireLimits {
    fn default() -> Self {
        Self {
            max_message_size: crate::limits::DEFAULT_MAX_MESSAGE_SIZE,
            max_depth: crate::limits::DEFAULT_MAX_PLAN_DEPTH,
        }
    }
}

/// The RPCs of `spark.connect.SparkConnectService` (protocol 4.2).
#[tonic::async_trait]
pub trait SparkConnectService: Send + Sync + 'static {
    /// Runs a plan (a relation or a command) and streams its results.
    async fn execute_plan(
        &self,
        request: Request<proto::ExecutePlanRequest>,
    ) -> Result<Response<ResponseStream<proto::ExecutePlanResponse>>, Status>;
    /// Schema, explain, isStreaming, version, DDL parsing, ...
    async fn analyze_plan(
        &self,
        request: Request<proto::AnalyzePlanRequest>,
    ) -> Result<Response<proto::AnalyzePlanResponse>, Status>;
    /// `spark.conf` get/set/unset.
    async fn config(
        &self,
        request: Request<proto::ConfigRequest>,
    ) -> Result<Response<proto::ConfigResponse>, Status>;
    /// Uploads of jars, Python files, archives.
    async fn add_artifacts(
        &self,
        request: Request<Streaming<proto::AddArtifactsRequest>>,
    ) -> Result<Response<proto::AddArtifactsResponse>, Status>;
    /// Which artifacts the server has.
    async fn artifact_status(
        &self,
        request: Request<proto::ArtifactStatusesRequest>,
    ) -> Result<Response<proto::ArtifactStatusesResponse>, Status>;
    /// Interrupts running operations.
    async fn interrupt(
        &self,
        request: Request<proto::InterruptRequest>,
    ) -> Result<Response<proto::InterruptResponse>, Status>;
    /// Resumes the response stream of an operation after a broken connection.
    async fn reattach_execute(
        &self,
        request: Request<proto::ReattachExecuteRequest>,
    ) -> Result<Response<ResponseStream<proto::ExecutePlanResponse>>, Status>;
    /// Releases the buffered responses of an operation.
    async fn release_execute(
        &self,
        request: Request<proto::ReleaseExecuteRequest>,
    ) -> Result<Response<proto::ReleaseExecuteResponse>, Status>;
    /// Ends a session (`spark.stop()`).
    async fn release_session(
        &self,
        request: Request<proto::ReleaseSessionRequest>,
    ) -> Result<Response<proto::ReleaseSessionResponse>, Status>;
    /// The details of an error the client saw.
    async fn fetch_error_details(
        &self,
        request: Request<proto::FetchErrorDetailsRequest>,
    ) -> Result<Response<proto::FetchErrorDetailsResponse>, Status>;
    /// Copies a session.
    async fn clone_session(
        &self,
        request: Request<proto::CloneSessionRequest>,
    ) -> Result<Response<proto::CloneSessionResponse>, Status>;
    /// The status of operations.
    async fn get_status(
        &self,
        request: Request<proto::GetStatusRequest>,
    ) -> Result<Response<proto::GetStatusResponse>, Status>;
}

/// The tower service tonic's server runs: routes each RPC path to `T`'s method.
#[derive(Debug)]
pub struct SparkConnectServer<T> {
    inner: Arc<T>,
    limits: WireLimits,
}

impl<T> SparkConnectServer<T> {
    /// Serves `inner`, decoding requests within `limits`.
    pub fn new(inner: Arc<T>, limits: WireLimits) -> Self {
        Self { inner, limits }
    }
}

impl<T> Clone for SparkConnectServer<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            limits: self.limits,
        }
    }
}

impl<T> NamedService for SparkConnectServer<T> {
    const NAME: &'static str = "spark.connect.SparkConnectService";
}

/// A tower service that runs one call (tonic's `Grpc` calls its service once per request).
struct Once<F>(Option<F>);

impl<F, Fut, Req, Resp> Service<Request<Req>> for Once<F>
where
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    type Response = Response<Resp>;
    type Error = Status;
    type Future = BoxFuture<Response<Resp>, Status>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        match self.0.take() {
            Some(f) => Box::pin(f(request)),
            None => Box::pin(async { Err(Status::internal("a gRPC call was made twice")) }),
        }
    }
}

fn grpc<Enc, Dec>(limits: WireLimits) -> Grpc<DepthLimitedCodec<Enc, Dec>>
where
    Enc: prost::Message + Send + 'static,
    Dec: prost::Message + Default + Send + 'static,
{
    Grpc::new(DepthLimitedCodec::new(limits.max_depth))
        .max_decoding_message_size(limits.max_message_size)
        .max_encoding_message_size(usize::MAX)
}

macro_rules! unary {
    ($inner:expr, $limits:expr, $req:expr, $method:ident) => {{
        let (inner, limits) = ($inner, $limits);
        Box::pin(async move {
            let svc = Once(Some(move |r| async move { inner.$method(r).await }));
            let response = grpc(limits).unary(svc, $req).await;
            Ok(explain_too_large(limits.max_message_size, response))
        })
    }};
}

macro_rules! server_streaming {
    ($inner:expr, $limits:expr, $req:expr, $method:ident) => {{
        let (inner, limits) = ($inner, $limits);
        Box::pin(async move {
            let svc = Once(Some(move |r| async move { inner.$method(r).await }));
            let response = grpc(limits).server_streaming(svc, $req).await;
            Ok(explain_too_large(limits.max_message_size, response))
        })
    }};
}

impl<T, B> Service<http::Request<B>> for SparkConnectServer<T>
where
    T: SparkConnectService,
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let (inner, limits) = (self.inner.clone(), self.limits);
        match req.uri().path() {
            "/spark.connect.SparkConnectService/ExecutePlan" => {
                server_streaming!(inner, limits, req, execute_plan)
            }
            "/spark.connect.SparkConnectService/ReattachExecute" => {
                server_streaming!(inner, limits, req, reattach_execute)
            }
            "/spark.connect.SparkConnectService/AnalyzePlan" => {
                unary!(inner, limits, req, analyze_plan)
            }
            "/spark.connect.SparkConnectService/Config" => unary!(inner, limits, req, config),
            "/spark.connect.SparkConnectService/ArtifactStatus" => {
                unary!(inner, limits, req, artifact_status)
            }
            "/spark.connect.SparkConnectService/Interrupt" => unary!(inner, limits, req, interrupt),
            "/spark.connect.SparkConnectService/ReleaseExecute" => {
                unary!(inner, limits, req, release_execute)
            }
            "/spark.connect.SparkConnectService/ReleaseSession" => {
                unary!(inner, limits, req, release_session)
            }
            "/spark.connect.SparkConnectService/FetchErrorDetails" => {
                unary!(inner, limits, req, fetch_error_details)
            }
            "/spark.connect.SparkConnectService/CloneSession" => {
                unary!(inner, limits, req, clone_session)
            }
            "/spark.connect.SparkConnectService/GetStatus" => {
                unary!(inner, limits, req, get_status)
            }
            "/spark.connect.SparkConnectService/AddArtifacts" => Box::pin(async move {
                let svc = Once(Some(move |r| async move { inner.add_artifacts(r).await }));
                let response = grpc(limits).client_streaming(svc, req).await;
                Ok(explain_too_large(limits.max_message_size, response))
            }),
            other => {
                let status = Status::unimplemented(format!(
                    "Sluice's Spark Connect server has no RPC {other}"
                ));
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}
