//! How `sluice connect` is started and run: [`ServerConfig`] (where, for whom, its limits, as
//! the CLI's flags) and [`serve`] / [`serve_until`]: bind, TLS, the service of
//! [`mod@crate::server`] behind the token check and the wire limits, the workers' own loopback port,
//! and a clean shutdown on SIGTERM/SIGINT (every query stops after its current batch).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::auth::Authenticated;
use crate::error::{ConnectError, Result};
use crate::grpc::{SparkConnectServer, WireLimits};
use crate::server::ConnectService;
use crate::session::SessionSettings;
use crate::tls::TlsFiles;

/// How the server is started: where, for whom, and its limits (`sluice connect`'s flags).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `host:port` to listen on (`127.0.0.1:15002`, Spark Connect's port, by default). An
    /// address other than loopback needs a `token`.
    pub listen: String,
    /// The Python interpreter for `foreachBatch` workers (else `PYSPARK_PYTHON`, else `python3`).
    pub python: Option<String>,
    /// Listeners every session registers when it opens: they see every query of every client
    /// (`sluice connect --ui`'s dashboard).
    pub listeners: crate::observe::Listeners,
    /// The token every call must carry (`authorization: Bearer TOKEN`, what a PySpark client
    /// sends for `sc://..;token=TOKEN`): `--token`, or `SLUICE_CONNECT_TOKEN`.
    pub token: Option<String>,
    /// Serve TLS only, with this certificate and key (`--tls-cert`, `--tls-key`).
    pub tls: Option<TlsFiles>,
    /// The largest request, in bytes (Spark's `spark.connect.grpc.maxInboundMessageSize`, 128
    /// MiB; `--max-message-size`).
    pub max_message_size: usize,
    /// The deepest nesting of a request's messages (Spark's
    /// `spark.connect.grpc.marshallerRecursionLimit`, 1024; `--max-plan-depth`).
    pub max_plan_depth: usize,
    /// Sessions open at once (`--max-sessions`, 1000): each holds a Sluice session (its conf,
    /// views, cached batches, artifacts) until the client's `spark.stop()`; about 0.4 MiB idle
    /// (measured: 200 sessions that had each run a query took 433 KiB apiece), so 1000 hold
    /// about 0.4 GiB. At the limit, the session idle longest past `session_idle_timeout` with
    /// no active query makes room; else a new session is refused.
    pub max_sessions: usize,
    /// How long a session must have had no call and no active query before a new one may take
    /// its place at `max_sessions`: Spark's `spark.connect.session.manager.defaultSessionTimeout`,
    /// 60 minutes (Spark ends such sessions whenever; Sluice only when it needs the room).
    pub session_idle_timeout: std::time::Duration,
    /// Streaming queries active at once, across sessions (`--max-queries`, 100): each holds a
    /// thread, its state and maybe a Python worker process.
    pub max_queries: usize,
}

/// The default of `--max-sessions`.
pub const DEFAULT_MAX_SESSIONS: usize = 1000;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:15002".to_string(),
            python: None,
            listeners: Default::default(),
            token: None,
            tls: None,
            max_message_size: crate::limits::DEFAULT_MAX_MESSAGE_SIZE,
            max_plan_depth: crate::limits::DEFAULT_MAX_PLAN_DEPTH,
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle_timeout: std::time::Duration::from_secs(60 * 60),
            max_queries: crate::streaming::DEFAULT_MAX_QUERIES,
        }
    }
}

impl ServerConfig {
    /// The token, if one was given that is not blank.
    fn token(&self) -> Option<&str> {
        self.token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
    }

    /// Refuses a configuration the server cannot keep: an exposed address without a token, a
    /// limit of zero, a plan depth past what its threads' stacks are sized for.
    pub fn check(&self) -> Result<()> {
        crate::auth::check_exposure(&self.listen, self.token())?;
        for (value, flag) in [
            (self.max_message_size, "--max-message-size"),
            (self.max_plan_depth, "--max-plan-depth"),
            (self.max_sessions, "--max-sessions"),
            (self.max_queries, "--max-queries"),
        ] {
            if value == 0 {
                return Err(ConnectError::illegal_argument(format!(
                    "{flag} 0 would refuse everything; give a positive number"
                )));
            }
        }
        if self.max_plan_depth > crate::limits::MAX_PLAN_DEPTH_CEILING {
            return Err(ConnectError::illegal_argument(format!(
                "--max-plan-depth {} is more than the server's threads have stack for; give at \
                 most {}",
                self.max_plan_depth,
                crate::limits::MAX_PLAN_DEPTH_CEILING
            )));
        }
        Ok(())
    }
}

/// Serves Spark Connect on `config.listen` until SIGTERM or SIGINT; then running queries stop
/// after their current batch and the call returns. `on_listening` gets the bound address (the
/// port when `:0` was asked for).
pub fn serve(config: ServerConfig, on_listening: impl FnOnce(SocketAddr)) -> Result<()> {
    serve_until(config, on_listening, shutdown_signal())
}

/// [`serve`], until `shutdown` resolves (tests, embedding).
///
/// With a token or TLS, the server's own Python workers (`foreachBatch`, `foreach`) connect
/// back on a second port of its own, on loopback without TLS, with a token of the process's
/// (`SPARK_CONNECT_AUTHENTICATE_TOKEN` in their environment): a PySpark client reaches a plain
/// port with a token only as `sc://localhost`, and the workers need not trust the certificate.
pub fn serve_until(
    config: ServerConfig,
    on_listening: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    config.check()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice-connect")
        // Requests are decoded, planned and dropped on these threads (the runtime's and the
        // blocking pool's), recursively, up to --max-plan-depth levels.
        .thread_stack_size(crate::limits::thread_stack_size(config.max_plan_depth))
        .build()
        .map_err(|e| internal(format!("cannot start the server's runtime: {e}")))?;
    runtime.block_on(async move {
        let tls = config
            .tls
            .as_ref()
            .map(TlsFiles::server_config)
            .transpose()?;
        let token = config.token().map(str::to_string);
        let listener = bind(&config.listen).await?;
        let addr = listener.local_addr().map_err(|e| {
            ConnectError::illegal_argument(format!("cannot listen on {}: {e}", config.listen))
        })?;
        if token.is_some() && tls.is_none() && !addr.ip().is_loopback() {
            log::warn!(
                "serving {addr} with a token but without TLS: the token crosses the network in \
                 clear, and PySpark clients given ;token= connect over TLS unless their host is \
                 localhost; serve TLS with --tls-cert and --tls-key (clients add \
                 ;use_ssl=true), or put a TLS proxy in front"
            );
        }
        // The Python workers' own port (see above).
        let secured = token.is_some() || tls.is_some();
        let workers = if secured {
            Some(bind("127.0.0.1:0").await?)
        } else {
            None
        };
        let worker_token = token.as_ref().map(|_| {
            format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            )
        });
        let connect_url = match (&workers, &worker_token) {
            (Some(w), worker_token) => {
                let port = w
                    .local_addr()
                    .map_err(|e| internal(format!("the workers' port: {e}")))?
                    .port();
                // pyspark-client sends a token without TLS only to the host `localhost`.
                let host = if worker_token.is_some() {
                    "localhost"
                } else {
                    "127.0.0.1"
                };
                format!("sc://{host}:{port}")
            }
            (None, _) => format!("sc://{addr}"),
        };
        let settings = SessionSettings {
            python: config.python.clone(),
            connect_url,
            worker_token: worker_token.clone(),
            queries: Arc::new(crate::streaming::QueryLimit::new(config.max_queries)),
            listeners: config.listeners.clone(),
        };
        let service = Arc::new(ConnectService::new(
            settings,
            config.max_sessions,
            config.session_idle_timeout,
        ));
        let routes = SparkConnectServer::new(
            service.clone(),
            WireLimits {
                max_message_size: config.max_message_size,
                max_depth: config.max_plan_depth,
            },
        );
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).map_err(|e| {
                let files = config.tls.as_ref().map_or_else(String::new, |f| {
                    format!(" ({} and {})", f.cert.display(), f.key.display())
                });
                ConnectError::illegal_argument(format!(
                    "--tls-cert and --tls-key{files}: not a certificate chain and the private \
                     key that goes with it ({})",
                    error_chain(&e)
                ))
            })?;
        }
        on_listening(addr);
        // On the signal, queries stop first, while the server still serves (a foreachBatch
        // worker in the middle of a batch needs it to finish that batch); then the server
        // closes, giving open client connections a few seconds.
        let (closing, closed) = tokio::sync::watch::channel(false);
        let closed = move || {
            let mut closed = closed.clone();
            async move {
                let _ = closed.wait_for(|c| *c).await;
            }
        };
        let stopping = service.clone();
        let signal = async move {
            shutdown.await;
            let _ = tokio::task::spawn_blocking(move || stopping.stop_all_queries()).await;
            let _ = closing.send(true);
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        };
        let main = builder
            .add_service(Authenticated::new(
                routes.clone(),
                token.into_iter().collect(),
            ))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                closed(),
            );
        let workers = async {
            match workers {
                Some(listener) => {
                    tonic::transport::Server::builder()
                        .add_service(Authenticated::new(
                            routes,
                            worker_token.into_iter().collect(),
                        ))
                        .serve_with_incoming_shutdown(
                            tokio_stream::wrappers::TcpListenerStream::new(listener),
                            closed(),
                        )
                        .await
                }
                None => Ok(()),
            }
        };
        let result = tokio::select! {
            r = async { tokio::try_join!(main, workers) } => r.map(|_| ()),
            () = signal => Ok(()),
        };
        // Queries started while shutting down stop too.
        let _ = tokio::task::spawn_blocking(move || {
            service.stop_all_queries();
            service.close_all_sessions();
        })
        .await;
        result.map_err(|e| {
            internal(format!(
                "the Spark Connect server failed: {}",
                error_chain(&e)
            ))
        })
    })
}

fn internal(message: String) -> ConnectError {
    ConnectError::new(
        crate::error::java::INTERNAL,
        sluice::error::class::INTERNAL_ERROR,
        message,
    )
}

/// An error with its sources (tonic's transport errors say little at the top).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

async fn bind(listen: &str) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        ConnectError::illegal_argument(format!(
            "cannot listen on {listen}: {e} (another server on that port? pick one with \
             --listen HOST:PORT)"
        ))
    })
}

/// Resolves on SIGTERM or SIGINT: [`serve`]'s end, for a caller of [`serve_until`] that adds
/// its own.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    log::info!("shutting down: stopping queries after their current batch");
}
