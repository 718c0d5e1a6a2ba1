//! TLS between a driver and its workers, as Spark's `spark.ssl.rpc.*` and
//! `spark.authenticate`: a worker started with a certificate and key ([`WorkerTls`], `sluice
//! worker --tls-cert --tls-key`) serves its port over TLS only, and with a client CA
//! (`--tls-client-ca`) it serves only drivers that present a certificate that CA signed (mutual
//! TLS: without it anyone who reaches the port can run tasks there). A driver given the CA that
//! signed the workers' certificates ([`DriverTls`], `--workers-tls-ca`, with its own certificate
//! and key for mutual TLS) reaches every worker over TLS: the stages datafusion-distributed runs,
//! the stateful tasks and the reads (which carry the sources' options, Kafka's secrets among
//! them). Settings of the process, as Spark's are of the application, set once at its start.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, RwLock};

use datafusion::common::DataFusionError;
use datafusion_distributed::grpc::{create_worker_client, BoxCloneSyncChannel};
use datafusion_distributed::{ChannelResolver, WorkerChannel};
use sluice::error::{class, Result, SluiceError};
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig,
};
use url::Url;

/// A worker's TLS: its certificate chain and key (PEM), and the CA whose drivers it serves.
#[derive(Debug, Clone)]
pub struct WorkerTls {
    /// The worker's certificate chain (PEM); its names must include the address drivers use.
    pub cert: PathBuf,
    /// The certificate's private key (PEM).
    pub key: PathBuf,
    /// When set, only drivers presenting a certificate this CA (PEM) signed are served.
    pub client_ca: Option<PathBuf>,
}

/// A driver's TLS to its workers: the CA that signed their certificates, and its own
/// certificate and key for workers that ask for one.
#[derive(Debug, Clone)]
pub struct DriverTls {
    /// The CA (PEM) that signed the workers' certificates.
    pub ca: PathBuf,
    /// The driver's certificate chain (PEM), for workers started with `--tls-client-ca`.
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
}

/// Makes ring the process's TLS provider, once (the build has rustls with both ring and
/// aws-lc-rs, and rustls picks none by itself then); a provider already chosen stays.
fn provider() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn pem(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        SluiceError::query(
            class::INVALID_CONF_VALUE,
            format!("cannot read {what} {}: {e}", path.display()),
        )
    })
}

fn invalid(what: &str, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::query(class::INVALID_CONF_VALUE, format!("{what}: {e}"))
}

impl WorkerTls {
    /// The server's TLS configuration, its files read now (an unreadable one is named).
    pub(crate) fn server_config(&self) -> Result<ServerTlsConfig> {
        provider();
        let identity = Identity::from_pem(
            pem(&self.cert, "the worker's certificate (--tls-cert)")?,
            pem(&self.key, "the worker's key (--tls-key)")?,
        );
        let mut config = ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &self.client_ca {
            config = config.client_ca_root(Certificate::from_pem(pem(
                ca,
                "the drivers' CA (--tls-client-ca)",
            )?));
        }
        Ok(config)
    }
}

impl DriverTls {
    fn client_config(&self) -> Result<ClientTlsConfig> {
        provider();
        let ca = pem(&self.ca, "the workers' CA (--workers-tls-ca)")?;
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(
                    pem(cert, "the driver's certificate (--workers-tls-cert)")?,
                    pem(key, "the driver's key (--workers-tls-key)")?,
                ));
            }
            (None, None) => {}
            _ => {
                return Err(invalid(
                    "--workers-tls-cert and --workers-tls-key",
                    "give both, or neither",
                ))
            }
        }
        Ok(config)
    }
}

fn driver_tls() -> &'static RwLock<Option<ClientTlsConfig>> {
    static TLS: OnceLock<RwLock<Option<ClientTlsConfig>>> = OnceLock::new();
    TLS.get_or_init(Default::default)
}

/// From now on, this process reaches its workers over TLS as `tls` says (its files read now).
pub fn use_tls(tls: &DriverTls) -> Result<()> {
    let config = tls.client_config()?;
    *driver_tls().write().unwrap_or_else(|p| p.into_inner()) = Some(config);
    Ok(())
}

fn client_config() -> Option<ClientTlsConfig> {
    driver_tls()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// Whether this process reaches its workers over TLS.
pub(crate) fn on() -> bool {
    client_config().is_some()
}

/// The URL scheme of a worker's address.
pub(crate) fn scheme() -> &'static str {
    if on() {
        "https"
    } else {
        "http"
    }
}

/// An endpoint for `worker` (`host:port`): over TLS when this process uses it, without Nagle.
pub(crate) fn endpoint(worker: &str) -> Result<Endpoint> {
    let mut endpoint = Endpoint::from_shared(format!("{}://{worker}", scheme()))
        .map_err(|e| invalid(&format!("worker address {worker}"), e))?
        .tcp_nodelay(true);
    if let Some(config) = client_config() {
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| invalid(&format!("TLS to worker {worker}"), e))?;
    }
    Ok(endpoint)
}

/// datafusion-distributed's channels to the workers over TLS: one lazy channel per worker, kept
/// for the query.
#[derive(Default)]
pub(crate) struct TlsChannels {
    channels: Mutex<HashMap<Url, Channel>>,
}

#[async_trait::async_trait]
impl ChannelResolver for TlsChannels {
    async fn get_worker_client_for_url(
        &self,
        url: &Url,
    ) -> std::result::Result<Box<dyn WorkerChannel>, DataFusionError> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let channel = match channels.get(url) {
            Some(c) => c.clone(),
            None => {
                let host = url.host().map(|h| h.to_string()).unwrap_or_default();
                let worker = format!("{host}:{}", url.port().unwrap_or(443));
                let c = endpoint(&worker)
                    .map_err(|e| DataFusionError::External(Box::new(e)))?
                    .connect_lazy();
                channels.insert(url.clone(), c.clone());
                c
            }
        };
        Ok(create_worker_client(BoxCloneSyncChannel::new(channel)))
    }
}

/// Whether this process serves a worker over TLS (set once, when `sluice worker` starts).
static SERVES_TLS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process serves a worker over TLS.
pub(crate) fn serves_tls() -> bool {
    SERVES_TLS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Records whether this process serves a worker over TLS.
pub(crate) fn set_serves_tls(on: bool) {
    SERVES_TLS.store(on, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_or_half_given_tls_files_are_named() {
        let missing = DriverTls {
            ca: PathBuf::from("/nonexistent/ca.pem"),
            cert: None,
            key: None,
        };
        let e = missing.client_config().unwrap_err().to_string();
        assert!(
            e.contains("/nonexistent/ca.pem") && e.contains("--workers-tls-ca"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate").unwrap();
        let half = DriverTls {
            ca,
            cert: Some(dir.path().join("driver.pem")),
            key: None,
        };
        let e = half.client_config().unwrap_err().to_string();
        assert!(e.contains("give both"), "{e}");
        let worker = WorkerTls {
            cert: dir.path().join("worker.pem"),
            key: dir.path().join("worker.key"),
            client_ca: None,
        };
        let e = worker.server_config().unwrap_err().to_string();
        assert!(e.contains("worker.pem") && e.contains("--tls-cert"), "{e}");
    }
}
