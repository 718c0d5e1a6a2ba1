//! The service.

/// How the server is started.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// host:port to listen on.
    pub listen: String,
}

/// Serves until SIGTERM/SIGINT.
pub fn serve(config: ServerConfig) -> crate::Result<()> {
    let _ = config;
    Ok(())
}
