//! The `spark.connect.SparkConnectService` gRPC service: method paths, codecs and message size
//! limits. The generated protocol crate (`sluice-connect-proto`) holds only a client, so the server side
//! of the routing is here, by hand, on tonic's server building blocks: one trait method per
//! RPC, and [`SparkConnectServer`] dispatching `/spark.connect.SparkConnectService/<Method>`.

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
use tonic_prost::ProstCodec;

use crate::proto;

/// A stream of responses of a server-streaming RPC.
pub type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The largest message the server accepts (a local relation with data, an artifact chunk):
/// Spark's `spark.connect.grpc.maxInboundMessageSize` default, 128 MiB.
pub const MAX_INBOUND_MESSAGE_SIZE: usize = 128 * 1024 * 1024;

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
}

impl<T> SparkConnectServer<T> {
    /// Serves `inner`.
    pub fn new(inner: Arc<T>) -> Self {
        Self { inner }
    }
}

impl<T> Clone for SparkConnectServer<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
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

fn grpc<Enc, Dec>() -> Grpc<ProstCodec<Enc, Dec>>
where
    Enc: prost::Message + Send + 'static,
    Dec: prost::Message + Default + Send + 'static,
{
    Grpc::new(ProstCodec::default())
        .max_decoding_message_size(MAX_INBOUND_MESSAGE_SIZE)
        .max_encoding_message_size(usize::MAX)
}

macro_rules! unary {
    ($inner:expr, $req:expr, $method:ident) => {{
        let inner = $inner;
        Box::pin(async move {
            let svc = Once(Some(move |r| async move { inner.$method(r).await }));
            Ok(grpc().unary(svc, $req).await)
        })
    }};
}

macro_rules! server_streaming {
    ($inner:expr, $req:expr, $method:ident) => {{
        let inner = $inner;
        Box::pin(async move {
            let svc = Once(Some(move |r| async move { inner.$method(r).await }));
            Ok(grpc().server_streaming(svc, $req).await)
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
        let inner = self.inner.clone();
        match req.uri().path() {
            "/spark.connect.SparkConnectService/ExecutePlan" => {
                server_streaming!(inner, req, execute_plan)
            }
            "/spark.connect.SparkConnectService/ReattachExecute" => {
                server_streaming!(inner, req, reattach_execute)
            }
            "/spark.connect.SparkConnectService/AnalyzePlan" => unary!(inner, req, analyze_plan),
            "/spark.connect.SparkConnectService/Config" => unary!(inner, req, config),
            "/spark.connect.SparkConnectService/ArtifactStatus" => {
                unary!(inner, req, artifact_status)
            }
            "/spark.connect.SparkConnectService/Interrupt" => unary!(inner, req, interrupt),
            "/spark.connect.SparkConnectService/ReleaseExecute" => {
                unary!(inner, req, release_execute)
            }
            "/spark.connect.SparkConnectService/ReleaseSession" => {
                unary!(inner, req, release_session)
            }
            "/spark.connect.SparkConnectService/FetchErrorDetails" => {
                unary!(inner, req, fetch_error_details)
            }
            "/spark.connect.SparkConnectService/CloneSession" => unary!(inner, req, clone_session),
            "/spark.connect.SparkConnectService/GetStatus" => unary!(inner, req, get_status),
            "/spark.connect.SparkConnectService/AddArtifacts" => Box::pin(async move {
                let svc = Once(Some(move |r| async move { inner.add_artifacts(r).await }));
                Ok(grpc().client_streaming(svc, req).await)
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
