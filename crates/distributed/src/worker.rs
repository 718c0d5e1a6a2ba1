//! `sluice worker`: a datafusion-distributed worker that runs the stages of Sluice's batches,
//! with Sluice's functions (Spark's, as the driver's session has them) and Sluice's nodes.

use std::net::SocketAddr;

use datafusion::execution::SessionState;
use datafusion_distributed::{
    DistributedExt, Worker, WorkerPlanRewriteEvent, WorkerPlanRewriteEventResponse,
    WorkerQueryContext,
};
use tonic::transport::Server;

use crate::rows::SluiceCodec;

/// Serves a worker on `listen` until the process ends, on the runtime of a default Sluice
/// session, whose functions (Spark's function library and Sluice's own) it has, so a plan's
/// functions, sent by name, are the ones the driver planned with. `listening` is told the
/// address once the worker accepts connections (port 0 picks a free one).
pub fn serve(listen: SocketAddr, listening: impl FnOnce(SocketAddr)) -> sluice::error::Result<()> {
    let session = sluice::session::Session::builder().build()?;
    let functions = session.context().state();
    session.block_on(serve_on(listen, listening, functions))
}

async fn serve_on(
    listen: SocketAddr,
    listening: impl FnOnce(SocketAddr),
    functions: SessionState,
) -> sluice::error::Result<()> {
    let worker = Worker::from_session_builder(move |ctx: WorkerQueryContext| {
        let functions = functions.clone();
        async move { Ok(worker_state(ctx, &functions)) }
    });
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        sluice::error::SluiceError::query(
            sluice::error::class::INVALID_CONF_VALUE,
            format!("sluice worker cannot listen on {listen}: {e}"),
        )
    })?;
    if let Ok(addr) = listener.local_addr() {
        listening(addr);
    }
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    Server::builder()
        .add_service(worker.into_worker_server())
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| sluice::error::SluiceError::internal(format!("sluice worker: {e}")))
}

fn worker_state(ctx: WorkerQueryContext, functions: &SessionState) -> SessionState {
    ctx.builder
        .with_scalar_functions(functions.scalar_functions().values().cloned().collect())
        .with_aggregate_functions(functions.aggregate_functions().values().cloned().collect())
        .with_window_functions(functions.window_functions().values().cloned().collect())
        .with_distributed_user_codec(SluiceCodec)
        .with_distributed_worker_plan_rewrite_handler(|event: WorkerPlanRewriteEvent<'_>| {
            log::info!("running a task: {}", event.plan.name());
            Ok(WorkerPlanRewriteEventResponse::new(event.plan))
        })
        .build()
}
