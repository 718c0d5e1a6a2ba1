//! `sluice run --ui ADDR` and `sluice connect --ui ADDR`: a live dashboard of the running
//! queries (for `connect`, every session's), like Spark's Structured Streaming tab, served over
//! HTTP while the queries run (off unless asked for).
//!
//! - `/`: one self-contained page (`ui.html`, no external scripts) that polls `/api/progress`
//!   every second and draws, per query, on `<canvas>`: input vs processing rate, input rows,
//!   batch duration by phase, event-time max and watermark, event-time lag, state rows, state
//!   memory and rows dropped as late, with the batch id on the x axis.
//! - `/api/progress`: `{"seq":N,"queries":[{"id","name","runId","status","exception",
//!   "progress":[StreamingQueryProgress...]}]}`, the last [`HISTORY`] progress documents per
//!   query. `?since=N` returns only the documents recorded after `seq` N (the page asks for
//!   what is new each second instead of the whole history).
//! - `/metrics`: Prometheus text exposition of each query's latest figures (gauges) and totals
//!   over every batch seen (counters), labelled `query` (name, else id) and `id`.
//!
//! `GET` and `HEAD` are served; anything else is 405, an unknown path 404.
//!
//! **Access.** A loopback address (`127.0.0.1`, `::1`, `localhost`) needs nothing. Any other
//! bind (`0.0.0.0:4040`, a LAN address) is refused unless a token is given (`--ui-token TOKEN`
//! or `SLUICE_UI_TOKEN`); with a token, every request (on any address) needs
//! `Authorization: Bearer TOKEN` or `?token=TOKEN`, else 401. The page opened as
//! `http://HOST:PORT/?token=TOKEN` sends the token with its own requests.
//!
//! **A server that cannot be knocked over** (issue 18 part 9; it was `tiny_http`, which a fault
//! campaign froze or killed with huge headers, clients that never read, 5,000 idle connections
//! and a full descriptor table). The server is a small HTTP/1.1 implementation on tokio, on one
//! thread of its own (a current-thread runtime, `sluice-ui`), whatever the number of clients;
//! request heads are parsed by `httparse`. Its bounds ([`LIMITS`]):
//! - a request head (request line and headers) larger than 16 KiB is answered 431 and the
//!   connection closed: no more than that is ever read, let alone kept;
//! - a request head must arrive within 10 s of the connection (or of the previous response on a
//!   kept-alive one), else the connection is closed; a response must be written within 10 s,
//!   else the connection is closed (a client that does not read holds nothing for longer);
//! - at most 64 connections are open at once: beyond that the connection that has waited
//!   longest for a request is closed to make room (idle connections cannot lock out a fresh
//!   client); when every connection is busy writing, a new one is answered 503 and closed;
//! - accepting fails when the process is out of descriptors (EMFILE, ENFILE) or memory: the
//!   server says so once and retries every 100 ms, and serves again as soon as it can.
//!
//! Requests have no body: a request announcing one is answered and its connection closed.
//!
//! [`start`] binds the address and serves from its background thread; the [`Dashboard`] it
//! returns is the `StreamingQueryListener` to register on the session (`Session::add_listener`).
//! Dropping the last reference stops the server.
//!
//! The files: `server.rs` (the socket, the connections and their bounds), `http.rs` (request
//! heads and responses on the wire), `auth.rs` (the token check), `routes.rs` (what each path
//! answers), `history.rs` (the recorded progress, as JSON and as metrics).

mod auth;
mod history;
mod http;
mod routes;
mod server;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard};

use sluice::progress::{QueryStartedEvent, QueryTerminatedEvent, StreamingQueryListener};
use sluice::StreamingQueryProgress;
use tokio::sync::Notify;

use history::History;
use server::{accept_loop, listen, Conns, Limits, Server, LIMITS};

/// Progress documents kept per query (the page's charts show at most this many batches).
pub const HISTORY: usize = 1000;

/// The dashboard: a listener recording every query's progress, and the HTTP server showing it.
pub struct Dashboard {
    url: String,
    history: Arc<Mutex<History>>,
    /// Stops the server (its thread ends, closing every connection).
    shutdown: Arc<Notify>,
    /// The server's state (its connections, for the tests).
    #[cfg_attr(not(test), expect(dead_code))]
    server: Arc<Server>,
}

impl Dashboard {
    /// The page's address, `http://HOST:PORT/` (with the port chosen when asked for port 0).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Connections the server holds open right now.
    #[cfg(test)]
    fn open_connections(&self) -> usize {
        lock(&self.server.conns).open.len()
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        // Stored if the server is not waiting right now: it sees it on its next wait.
        self.shutdown.notify_one();
    }
}

/// Binds `addr` (`HOST:PORT`; a bare port means `127.0.0.1:PORT`; port 0 picks a free one),
/// serves the dashboard from a background thread and prints `sluice: dashboard at URL` to
/// stderr (with the address actually bound when it is not the URL's). `token`: what every
/// request must carry (`Authorization: Bearer TOKEN` or `?token=TOKEN`); an address other than
/// loopback is refused without one. Register the returned dashboard with
/// `Session::add_listener` before starting the queries.
pub fn start(addr: &str, token: Option<&str>) -> Result<Arc<Dashboard>, String> {
    start_with(addr, token, LIMITS)
}

fn start_with(addr: &str, token: Option<&str>, limits: Limits) -> Result<Arc<Dashboard>, String> {
    let addr = addr.trim();
    let addr = if addr.parse::<u16>().is_ok() {
        format!("127.0.0.1:{addr}")
    } else {
        addr.to_string()
    };
    let token = token.map(str::trim).filter(|t| !t.is_empty());
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| {
            format!(
                "--ui {addr}: not an address to serve the dashboard on ({e}); give HOST:PORT, \
                 e.g. 127.0.0.1:4040, or a port"
            )
        })?
        .collect();
    if token.is_none() && addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err(format!(
            "--ui {addr}: the dashboard would be reachable from other machines, so it needs a \
             token: pass --ui-token TOKEN (or set SLUICE_UI_TOKEN=TOKEN) and open \
             http://HOST:PORT/?token=TOKEN (or send Authorization: Bearer TOKEN); or bind \
             127.0.0.1:PORT to serve this machine only"
        ));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("--ui {addr}: cannot start the dashboard's runtime: {e}"))?;
    let listener = {
        // The listener registers with this runtime's reactor.
        let _in_runtime = runtime.enter();
        listen(&addrs).map_err(|e| {
            format!(
                "--ui {addr}: cannot serve the dashboard there: {e}. Is another program (or \
                 another sluice) using that port? Give another HOST:PORT, or port 0 for any \
                 free one"
            )
        })?
    };
    let bound = listener
        .local_addr()
        .map_err(|e| format!("--ui {addr}: the dashboard's socket has no address: {e}"))?;
    let url = format!("http://{}/", browsable(bound));
    let history = Arc::new(Mutex::new(History::default()));
    let shutdown = Arc::new(Notify::new());
    let server = Arc::new(Server {
        history: history.clone(),
        token: token.map(str::to_string),
        limits,
        conns: Mutex::new(Conns::default()),
    });
    let (stop, serving) = (shutdown.clone(), server.clone());
    std::thread::Builder::new()
        .name("sluice-ui".into())
        .spawn(move || runtime.block_on(accept_loop(listener, serving, stop)))
        .map_err(|e| format!("--ui {addr}: cannot start the dashboard's thread: {e}"))?;
    let mut line = format!("sluice: dashboard at {url}");
    if browsable(bound) != bound.to_string() {
        let _ = write!(line, " (listening on {bound})");
    }
    if token.is_some() {
        line.push_str(" (token required: add ?token=TOKEN or send Authorization: Bearer TOKEN)");
    }
    crate::status::print_line(&line);
    Ok(Arc::new(Dashboard {
        url,
        history,
        shutdown,
        server,
    }))
}

/// The address to open in a browser on this machine (a wildcard bind is reached by loopback).
fn browsable(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => format!("127.0.0.1:{}", a.port()),
        SocketAddr::V6(a) if a.ip().is_unspecified() => format!("[::1]:{}", a.port()),
        a => a.to_string(),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StreamingQueryListener for Dashboard {
    fn on_query_started(&self, e: &QueryStartedEvent) {
        lock(&self.history).started(&e.id, &e.run_id, e.name.as_deref());
    }
    fn on_query_progress(&self, p: &StreamingQueryProgress) {
        lock(&self.history).record(p);
    }
    fn on_query_terminated(&self, e: &QueryTerminatedEvent) {
        lock(&self.history).terminated(&e.id, e.exception.as_deref());
    }
}
