//! `sluice worker`: a datafusion-distributed worker that runs the stages of Sluice's batches,
//! with Sluice's functions (Spark's, as the driver's session has them) and Sluice's nodes.

use std::net::SocketAddr;
use std::sync::Arc;

use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion_distributed::{
    DistributedExt, Worker, WorkerPlanRewriteEvent, WorkerPlanRewriteEventResponse,
    WorkerQueryContext,
};
use tonic::transport::Server;

use crate::codec::SluiceCodec;
use crate::tls::WorkerTls;

/// Serves a worker on `listen` until the process ends, on the runtime of a default Sluice
/// session, whose functions (Spark's function library and Sluice's own) it has, so a plan's
/// functions, sent by name, are the ones the driver planned with. `listening` is told the
/// address once the worker accepts connections (port 0 picks a free one). With `tls`, the port
/// serves TLS only (and with its client CA, only drivers whose certificate that CA signed).
pub fn serve(
    listen: SocketAddr,
    tls: Option<&WorkerTls>,
    listening: impl FnOnce(SocketAddr),
) -> sluice::error::Result<()> {
    let session = sluice::session::Session::builder().build()?;
    let functions = session.context().state();
    let tls = tls.map(WorkerTls::server_config).transpose()?;
    crate::tls::set_serves_tls(tls.is_some());
    session.block_on(serve_on(listen, tls, listening, functions))
}

async fn serve_on(
    listen: SocketAddr,
    tls: Option<tonic::transport::ServerTlsConfig>,
    listening: impl FnOnce(SocketAddr),
    functions: SessionState,
) -> sluice::error::Result<()> {
    let state_tasks = crate::actions::StateTasks::server(&functions);
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
    // No Nagle: a task's small messages (its plan, the end of its stream) go at once instead of
    // waiting out a delayed ACK (measured: 90 ms per batch with it, benches/distributed.sh).
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let mut server = Server::builder();
    if let Some(tls) = tls {
        server = server.tls_config(tls).map_err(|e| {
            sluice::error::SluiceError::query(
                sluice::error::class::INVALID_CONF_VALUE,
                format!("sluice worker: its TLS certificate and key: {e}"),
            )
        })?;
    }
    server
        .add_service(worker.into_worker_server())
        .add_service(state_tasks)
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| sluice::error::SluiceError::internal(format!("sluice worker: {e}")))
}

/// The state a task runs in: the config and runtime datafusion-distributed gives the task, and
/// the Sluice session's functions, each name (aliases included) resolving to the same function
/// as on the driver.
fn worker_state(ctx: WorkerQueryContext, sluice: &SessionState) -> SessionState {
    let mut state = ctx
        .builder
        .with_distributed_user_codec(SluiceCodec)
        .with_distributed_worker_plan_rewrite_handler(|event: WorkerPlanRewriteEvent<'_>| {
            log::info!("running a task: {}", event.plan.name());
            Ok(WorkerPlanRewriteEventResponse::new(event.plan))
        })
        .build();
    same_functions(&mut state, sluice);
    state
}

/// Registers `sluice`'s functions in `state` until every name of `sluice`'s registry resolves to
/// the same function in both (registering a function takes its name and every alias, so a name
/// another function claims as an alias is registered again after it).
fn same_functions(state: &mut SessionState, sluice: &SessionState) {
    for _ in 0..8 {
        let mut changed = false;
        for (name, f) in sluice.scalar_functions() {
            if state.scalar_functions().get(name) != Some(f) {
                let _ = state.register_udf(Arc::clone(f));
                changed = true;
            }
        }
        for (name, f) in sluice.aggregate_functions() {
            if state.aggregate_functions().get(name) != Some(f) {
                let _ = state.register_udaf(Arc::clone(f));
                changed = true;
            }
        }
        for (name, f) in sluice.window_functions() {
            if state.window_functions().get(name) != Some(f) {
                let _ = state.register_udwf(Arc::clone(f));
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
    log::warn!("a worker's function names do not all resolve as the driver's");
}
