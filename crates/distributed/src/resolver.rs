//! The workers of `sluice.distributed.workers`, as the driver finds them: [`Workers`] lists
//! those that answer (a TCP connect each time a batch is planned), so a batch run again after a
//! worker was lost runs on the others, and a worker started between batches is used from the
//! next one.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use datafusion::common::DataFusionError;
use datafusion_distributed::WorkerResolver;
use url::Url;

/// How long a worker has to accept a connection before a batch is planned without it.
const ANSWER_WITHIN: Duration = Duration::from_millis(500);

/// The configured workers (`host:port`s).
#[derive(Debug, Clone)]
pub(crate) struct Workers {
    pub(crate) addresses: Vec<String>,
}

impl Workers {
    /// The workers that accept a connection now, in the configured order.
    pub(crate) fn answering(&self) -> Vec<&str> {
        self.addresses
            .iter()
            .map(String::as_str)
            .filter(|w| answers(w))
            .collect()
    }

    /// Whether some configured worker does not answer.
    pub(crate) fn one_is_lost(&self) -> bool {
        self.addresses.iter().any(|w| !answers(w))
    }
}

fn answers(address: &str) -> bool {
    let Ok(addrs) = address.to_socket_addrs() else {
        return false;
    };
    addrs
        .into_iter()
        .any(|a| TcpStream::connect_timeout(&a, ANSWER_WITHIN).is_ok())
}

impl Workers {
    /// The answering workers' URLs; none answering is an error that says how to start them.
    pub(crate) fn urls(&self) -> Result<Vec<Url>, DataFusionError> {
        let answering = self.answering();
        if answering.is_empty() {
            return Err(DataFusionError::Execution(format!(
                "none of the workers of {} answers ({}); start them with `sluice worker --listen \
                 HOST:PORT`, or unset the key to run the query in this process",
                sluice::conf::DISTRIBUTED_WORKERS,
                self.addresses.join(",")
            )));
        }
        answering
            .into_iter()
            .map(|w| {
                Url::parse(&format!("{}://{w}", crate::tls::scheme()))
                    .map_err(|e| DataFusionError::Execution(format!("worker {w}: {e}")))
            })
            .collect()
    }
}

impl WorkerResolver for Workers {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        self.urls()
    }
}
