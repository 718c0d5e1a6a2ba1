//! TLS for the Spark Connect port (`sluice connect --tls-cert PEM --tls-key PEM`): clients
//! connect with `sc://HOST:PORT/;use_ssl=true` (and `;token=..`), trusting the certificate's CA
//! (gRPC's `GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`, or the system's roots). On rustls with ring,
//! made the process's provider explicitly as `sluice-distributed` does (the cli links both
//! crates, the build has rustls with ring and aws-lc-rs, and rustls picks none by itself then).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tonic::transport::{Identity, ServerTlsConfig};

use crate::error::{ConnectError, Result};

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The server's certificate chain and key (PEM files).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain (PEM); its names must include the host clients connect to.
    pub cert: PathBuf,
    /// The certificate's private key (PEM).
    pub key: PathBuf,
}

/// Makes ring the process's TLS provider, once; a provider already chosen (by
/// `sluice-distributed`, which picks ring too) stays.
fn provider() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn pem(path: &Path, what: &str, flag: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| {
        ConnectError::illegal_argument(format!(
            "cannot read {what} {} ({flag}): {e}",
            path.display()
        ))
    })?;
    if !String::from_utf8_lossy(&bytes).contains("-----BEGIN ") {
        return Err(ConnectError::illegal_argument(format!(
            "{what} {} ({flag}) is not PEM: give a file with a -----BEGIN ...----- block",
            path.display()
        )));
    }
    Ok(bytes)
}

impl TlsFiles {
    /// tonic's server TLS configuration, the files read now (an unreadable one is named).
    pub(crate) fn server_config(&self) -> Result<ServerTlsConfig> {
        provider();
        let identity = Identity::from_pem(
            pem(&self.cert, "the server's certificate", "--tls-cert")?,
            pem(&self.key, "the server's key", "--tls-key")?,
        );
        // A connection that does not finish its handshake is closed (tonic waits forever by
        // default, each such connection holding a descriptor).
        Ok(ServerTlsConfig::new()
            .identity(identity)
            .timeout(HANDSHAKE_TIMEOUT))
    }
}
