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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sluice::progress::{QueryStartedEvent, QueryTerminatedEvent, StreamingQueryListener};
use sluice::StreamingQueryProgress;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

/// The page, self-contained.
const PAGE: &str = include_str!("ui.html");

/// Progress documents kept per query (the page's charts show at most this many batches).
pub const HISTORY: usize = 1000;

/// Batch phases of `durationMs`, in the order Spark's UI stacks them.
const PHASES: [&str; 6] = [
    "latestOffset",
    "getBatch",
    "walCommit",
    "queryPlanning",
    "addBatch",
    "commitOffsets",
];

/// The bounds of the dashboard's HTTP server (the module documentation says why).
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// Connections open at once.
    max_connections: usize,
    /// Largest request head read, in bytes.
    max_head: usize,
    /// Time for a request head to arrive (from the accept, or from the previous response).
    head_timeout: Duration,
    /// Time to write one response.
    write_timeout: Duration,
}

/// The bounds `sluice run --ui` serves with.
const LIMITS: Limits = Limits {
    max_connections: 64,
    max_head: 16 * 1024,
    head_timeout: Duration::from_secs(10),
    write_timeout: Duration::from_secs(10),
};

/// Most headers a request may have (more is answered 431 like a head too large).
const MAX_HEADERS: usize = 64;

/// Pending connections the kernel keeps while the server is busy or out of descriptors.
const BACKLOG: u32 = 1024;

/// Wait before accepting again after the process ran out of descriptors or memory.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

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

/// A listening socket on the first of `addrs` that can be bound, with a backlog of [`BACKLOG`].
fn listen(addrs: &[SocketAddr]) -> std::io::Result<TcpListener> {
    let mut last = std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address");
    for &a in addrs {
        let socket = if a.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        };
        match socket.and_then(|s| {
            // As std's TcpListener::bind: a restarted sluice can bind while old connections
            // linger in TIME_WAIT (a port in use by a listener is still refused).
            s.set_reuseaddr(true)?;
            s.bind(a)?;
            s.listen(BACKLOG)
        }) {
            Ok(l) => return Ok(l),
            Err(e) => last = e,
        }
    }
    Err(last)
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

/// What every connection of the server shares.
struct Server {
    history: Arc<Mutex<History>>,
    token: Option<String>,
    limits: Limits,
    conns: Mutex<Conns>,
}

/// The open connections: each one's task, and which of them wait for a request.
#[derive(Default)]
struct Conns {
    next_id: u64,
    /// Every open connection's task, by connection id.
    open: HashMap<u64, AbortHandle>,
    /// The connections waiting for a request head, by when they started waiting (oldest
    /// first): `ticket -> connection id`.
    idle: BTreeMap<u64, u64>,
    next_ticket: u64,
}

impl Conns {
    /// Closes the connection that has waited longest for a request, if one waits; whether one
    /// did.
    fn close_oldest_idle(&mut self) -> bool {
        let Some((_, id)) = self.idle.pop_first() else {
            return false;
        };
        if let Some(task) = self.open.remove(&id) {
            // The task is dropped (its socket closed) the next time the runtime polls it.
            task.abort();
        }
        true
    }
}

/// Removes its connection from [`Conns`] when the connection's task ends or is aborted.
struct Registration<'a> {
    server: &'a Server,
    id: u64,
    ticket: Option<u64>,
}

impl Registration<'_> {
    /// The connection waits for a request head (it may be closed to make room).
    fn waiting(&mut self) {
        let mut conns = lock(&self.server.conns);
        let ticket = conns.next_ticket;
        conns.next_ticket += 1;
        conns.idle.insert(ticket, self.id);
        self.ticket = Some(ticket);
    }

    /// The connection has a request to answer (it is not closed to make room).
    fn busy(&mut self) {
        if let Some(t) = self.ticket.take() {
            lock(&self.server.conns).idle.remove(&t);
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut conns = lock(&self.server.conns);
        if let Some(t) = self.ticket.take() {
            conns.idle.remove(&t);
        }
        conns.open.remove(&self.id);
    }
}

/// Whether an accept error means the process is out of descriptors or memory (the pending
/// connection stays in the backlog; accepting again at once would fail the same way).
fn out_of_resources(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

async fn accept_loop(listener: TcpListener, server: Arc<Server>, shutdown: Arc<Notify>) {
    let mut starved = false;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.notified() => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) if out_of_resources(&e) => {
                if !starved {
                    log::warn!(
                        "the dashboard cannot accept a connection: {e}; retrying every {} ms",
                        ACCEPT_BACKOFF.as_millis()
                    );
                    starved = true;
                }
                tokio::select! {
                    _ = shutdown.notified() => return,
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
                continue;
            }
            // That connection failed (reset before it was accepted, ...): the next one may not.
            Err(_) => continue,
        };
        if starved {
            log::warn!("the dashboard accepts connections again");
            starved = false;
        }
        let _ = stream.set_nodelay(true);
        let id = {
            let mut conns = lock(&server.conns);
            if conns.open.len() >= server.limits.max_connections && !conns.close_oldest_idle() {
                drop(conns);
                // Every connection is busy answering: say so without waiting for this one.
                let _ = stream.try_write(&reply_bytes(
                    &Reply::text(503, "the dashboard is busy; try again in a moment\n"),
                    false,
                    false,
                ));
                continue;
            }
            conns.next_id += 1;
            conns.next_id
        };
        let task = tokio::spawn(connection(stream, id, server.clone()));
        // One thread: the task has not run yet, so it cannot have ended before it is listed.
        lock(&server.conns).open.insert(id, task.abort_handle());
        // Let the connection just closed to make room (if any) go before the next accept.
        tokio::task::yield_now().await;
    }
}

/// Why no request head could be read.
enum HeadError {
    /// The client closed the connection (or it failed).
    Closed,
    /// More than `max_head` bytes, or more than [`MAX_HEADERS`] headers.
    TooLarge,
    /// Not HTTP.
    Malformed,
}

/// Reads into `buf` until it holds a complete request head; its length. Never reads more than
/// `max_head` bytes in all.
async fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    max_head: usize,
) -> Result<usize, HeadError> {
    let mut chunk = [0u8; 4096];
    loop {
        if !buf.is_empty() {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            match httparse::Request::new(&mut headers).parse(buf) {
                Ok(httparse::Status::Complete(n)) => return Ok(n),
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
                Err(_) => return Err(HeadError::Malformed),
            }
        }
        if buf.len() >= max_head {
            return Err(HeadError::TooLarge);
        }
        let room = (max_head - buf.len()).min(chunk.len());
        match stream.read(&mut chunk[..room]).await {
            Ok(0) | Err(_) => return Err(HeadError::Closed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Serves one connection: requests one after the other (HTTP/1.1 keep-alive), each head within
/// `head_timeout`, each response within `write_timeout`.
async fn connection(mut stream: TcpStream, id: u64, server: Arc<Server>) {
    let limits = server.limits;
    let mut registration = Registration {
        server: &server,
        id,
        ticket: None,
    };
    let mut buf = Vec::new();
    loop {
        registration.waiting();
        let head = tokio::time::timeout(
            limits.head_timeout,
            read_head(&mut stream, &mut buf, limits.max_head),
        )
        .await;
        registration.busy();
        let (reply, keep_alive, head_only, used) = match head {
            Ok(Ok(n)) => {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut req = httparse::Request::new(&mut headers);
                if req.parse(&buf[..n]).is_err() {
                    return;
                }
                let request = Request::from(&req);
                let reply = respond(&request, &server);
                (reply, request.keep_alive(), request.method == "HEAD", n)
            }
            Ok(Err(HeadError::TooLarge)) => (
                Reply::text(
                    431,
                    "the request's headers are too large (the dashboard reads 16 KiB at most)\n",
                ),
                false,
                false,
                0,
            ),
            Ok(Err(HeadError::Malformed)) => {
                (Reply::text(400, "not an HTTP request\n"), false, false, 0)
            }
            Ok(Err(HeadError::Closed)) => return,
            Err(_) if buf.is_empty() => return,
            Err(_) => (
                Reply::text(408, "the request's head did not arrive in time\n"),
                false,
                false,
                0,
            ),
        };
        let bytes = reply_bytes(&reply, keep_alive, head_only);
        drop(reply);
        match tokio::time::timeout(limits.write_timeout, stream.write_all(&bytes)).await {
            Ok(Ok(())) => {}
            // The client does not read (or has gone): the connection is closed.
            _ => return,
        }
        if !keep_alive {
            let _ = tokio::time::timeout(limits.write_timeout, stream.shutdown()).await;
            return;
        }
        // What follows the head (a pipelined request) stays for the next round.
        buf.drain(..used);
    }
}

/// The parts of a request head the dashboard looks at.
struct Request<'a> {
    method: &'a str,
    target: &'a str,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    version: u8,
    authorization: Option<&'a [u8]>,
    connection: Option<&'a [u8]>,
    /// `Content-Length` other than 0, or `Transfer-Encoding`.
    has_body: bool,
}

impl<'a> Request<'a> {
    fn from(req: &httparse::Request<'_, 'a>) -> Request<'a> {
        let header = |name: &str| {
            req.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value)
        };
        let has_body = header("transfer-encoding").is_some()
            || header("content-length")
                .is_some_and(|v| std::str::from_utf8(v).map(str::trim) != Ok("0"));
        Request {
            method: req.method.unwrap_or_default(),
            target: req.path.unwrap_or("/"),
            version: req.version.unwrap_or(1),
            authorization: header("authorization"),
            connection: header("connection"),
            has_body,
        }
    }

    /// Whether the connection stays open after the response: HTTP/1.1 without `Connection:
    /// close` and without a body (a body is not read, so nothing after it could be).
    fn keep_alive(&self) -> bool {
        let close = self.connection.is_some_and(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("close"))
        });
        self.version == 1 && !close && !self.has_body
    }
}

/// A response before it is written.
struct Reply {
    status: u16,
    content_type: &'static str,
    body: String,
    extra: Vec<(&'static str, &'static str)>,
}

impl Reply {
    fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.to_string(),
            extra: Vec::new(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// The response's bytes: status line, headers, and the body unless `head_only`.
fn reply_bytes(reply: &Reply, keep_alive: bool, head_only: bool) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
         Connection: {}\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type,
        reply.body.len(),
        if keep_alive { "keep-alive" } else { "close" },
    );
    for (name, value) in &reply.extra {
        let _ = write!(head, "{name}: {value}\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    if !head_only {
        bytes.extend_from_slice(reply.body.as_bytes());
    }
    bytes
}

/// `%XX` and `+` decoded (a query string's value).
fn percent_decode(s: &str) -> Vec<u8> {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi << 4) | lo);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Compares in time independent of where the two differ (the length may show).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the request carries the token (`Authorization: Bearer TOKEN` or `?token=TOKEN`).
fn authorized(request: &Request<'_>, query: &str, token: &str) -> bool {
    let bearer = request.authorization.and_then(|v| {
        let v = std::str::from_utf8(v).ok()?.trim();
        let (scheme, credentials) = v.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| credentials.trim())
    });
    if bearer.is_some_and(|b| same_secret(b.as_bytes(), token.as_bytes())) {
        return true;
    }
    query
        .split('&')
        .filter_map(|kv| kv.strip_prefix("token="))
        .any(|v| same_secret(&percent_decode(v), token.as_bytes()))
}

fn respond(request: &Request<'_>, server: &Server) -> Reply {
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((request.target, ""));
    if let Some(token) = &server.token {
        if !authorized(request, query, token) {
            let mut reply = Reply::text(
                401,
                "this dashboard needs its token: open /?token=TOKEN or send \
                 Authorization: Bearer TOKEN (the token given to sluice with --ui-token or \
                 SLUICE_UI_TOKEN)\n",
            );
            reply
                .extra
                .push(("WWW-Authenticate", "Bearer realm=\"sluice\""));
            return reply;
        }
    }
    if !matches!(request.method, "GET" | "HEAD") {
        let mut reply = Reply::text(405, "only GET is served here\n");
        reply.extra.push(("Allow", "GET, HEAD"));
        return reply;
    }
    let history = &server.history;
    let (content_type, body) = match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", PAGE.to_string()),
        "/api/progress" => {
            let since = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("since="))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            ("application/json", lock(history).progress_json(since))
        }
        "/metrics" => (
            "text/plain; version=0.0.4; charset=utf-8",
            lock(history).metrics(),
        ),
        _ => {
            return Reply::text(
                404,
                "not found: the dashboard serves /, /api/progress and /metrics\n",
            )
        }
    };
    Reply {
        status: 200,
        content_type,
        body,
        extra: Vec::new(),
    }
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

/// Every query's recorded progress, in order of first appearance.
#[derive(Default)]
struct History {
    queries: Vec<QueryHistory>,
    /// Number of progress documents recorded so far (each document's `seq` is its number).
    seq: u64,
}

#[derive(Default)]
struct QueryHistory {
    id: String,
    run_id: String,
    name: Option<String>,
    active: bool,
    exception: Option<String>,
    /// `(seq, compact JSON)`, the last [`HISTORY`].
    progress: VecDeque<(u64, Arc<str>)>,
    latest: Option<Latest>,
    batches_total: u64,
    input_rows_total: u64,
    dropped_by_watermark_total: u64,
    /// Tasks run per worker (a query on a cluster), summed over every micro-batch.
    worker_tasks_total: BTreeMap<String, u64>,
}

/// The figures of a query's last progress that `/metrics` shows.
struct Latest {
    batch_id: i64,
    num_input_rows: i64,
    input_rows_per_second: f64,
    processed_rows_per_second: f64,
    batch_duration_ms: i64,
    phases: Vec<(&'static str, i64)>,
    /// `(rows, memory bytes)` summed over the stateful operators, when there are any.
    state: Option<(i64, i64)>,
    watermark_ms: Option<i64>,
    event_time_max_ms: Option<i64>,
    /// `(worker, tasks, task milliseconds)` of a query on a cluster.
    workers: Vec<(String, u64, u64)>,
}

/// One sample per worker: its `worker` label and `value`.
fn worker_values(
    workers: &[(String, u64, u64)],
    value: impl Fn(&(String, u64, u64)) -> f64,
) -> Vec<(Option<String>, f64)> {
    workers
        .iter()
        .map(|w| (Some(format!("worker=\"{}\"", label_value(&w.0))), value(w)))
        .collect()
}

/// ISO-8601 (`2026-09-15T12:10:00.000Z`) to epoch milliseconds.
fn epoch_ms(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}

impl History {
    fn query(&mut self, id: &str) -> &mut QueryHistory {
        let i = match self.queries.iter().position(|q| q.id == id) {
            Some(i) => i,
            None => {
                self.queries.push(QueryHistory {
                    id: id.to_string(),
                    active: true,
                    ..Default::default()
                });
                self.queries.len() - 1
            }
        };
        &mut self.queries[i]
    }

    fn started(&mut self, id: &str, run_id: &str, name: Option<&str>) {
        let q = self.query(id);
        q.run_id = run_id.to_string();
        q.name = name.map(str::to_string);
        q.active = true;
        q.exception = None;
    }

    fn terminated(&mut self, id: &str, exception: Option<&str>) {
        let q = self.query(id);
        q.active = false;
        q.exception = exception.map(str::to_string);
    }

    fn record(&mut self, p: &StreamingQueryProgress) {
        self.seq += 1;
        let seq = self.seq;
        let q = self.query(&p.id);
        q.run_id = p.run_id.clone();
        if p.name.is_some() {
            q.name = p.name.clone();
        }
        q.progress.push_back((seq, Arc::from(p.compact_json())));
        while q.progress.len() > HISTORY {
            q.progress.pop_front();
        }
        let dropped: i64 = p
            .state_operators
            .iter()
            .map(|s| s.num_rows_dropped_by_watermark)
            .sum();
        q.batches_total += 1;
        q.input_rows_total += p.num_input_rows.max(0) as u64;
        q.dropped_by_watermark_total += dropped.max(0) as u64;
        for w in &p.workers {
            *q.worker_tasks_total.entry(w.address.clone()).or_default() += w.num_tasks;
        }
        q.latest = Some(Latest {
            batch_id: p.batch_id,
            num_input_rows: p.num_input_rows,
            input_rows_per_second: p.input_rows_per_second,
            processed_rows_per_second: p.processed_rows_per_second,
            batch_duration_ms: p
                .duration_ms
                .get("triggerExecution")
                .copied()
                .unwrap_or(p.batch_duration),
            phases: PHASES
                .iter()
                .filter_map(|&k| p.duration_ms.get(k).map(|&v| (k, v)))
                .collect(),
            state: (!p.state_operators.is_empty()).then(|| {
                (
                    p.state_operators.iter().map(|s| s.num_rows_total).sum(),
                    p.state_operators.iter().map(|s| s.memory_used_bytes).sum(),
                )
            }),
            watermark_ms: p.event_time.get("watermark").and_then(|s| epoch_ms(s)),
            event_time_max_ms: p.event_time.get("max").and_then(|s| epoch_ms(s)),
            workers: p
                .workers
                .iter()
                .map(|w| (w.address.clone(), w.num_tasks, w.task_duration_ms))
                .collect(),
        });
    }

    /// `/api/progress?since=SEQ`.
    fn progress_json(&self, since: u64) -> String {
        let mut out = format!("{{\"seq\":{},\"queries\":[", self.seq);
        for (i, q) in self.queries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let status = match (q.active, &q.exception) {
                (true, _) => "active",
                (false, None) => "terminated",
                (false, Some(_)) => "failed",
            };
            let head = serde_json::json!({
                "id": q.id,
                "name": q.name,
                "runId": q.run_id,
                "status": status,
                "exception": q.exception,
            })
            .to_string();
            // The head object without its closing brace, then the progress documents as they
            // were serialized when recorded.
            out.push_str(&head[..head.len() - 1]);
            out.push_str(",\"progress\":[");
            let mut first = true;
            for (_, json) in q.progress.iter().filter(|(seq, _)| *seq > since) {
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(json);
            }
            out.push_str("]}");
        }
        out.push_str("]}");
        out
    }

    /// `/metrics`: Prometheus text exposition format 0.0.4.
    fn metrics(&self) -> String {
        type Value = Box<dyn Fn(&QueryHistory) -> Vec<(Option<String>, f64)>>;
        fn latest(f: impl Fn(&Latest) -> Option<f64> + 'static) -> Value {
            Box::new(move |q| {
                q.latest
                    .as_ref()
                    .and_then(&f)
                    .map(|v| vec![(None, v)])
                    .unwrap_or_default()
            })
        }
        fn total(f: impl Fn(&QueryHistory) -> f64 + 'static) -> Value {
            Box::new(move |q| vec![(None, f(q))])
        }
        let families: Vec<(&str, &str, &str, Value)> = vec![
            (
                "sluice_query_active",
                "gauge",
                "1 while the query runs, 0 once it has stopped or failed.",
                total(|q| if q.active { 1.0 } else { 0.0 }),
            ),
            (
                "sluice_batch_id",
                "gauge",
                "Id of the query's last micro-batch.",
                latest(|l| Some(l.batch_id as f64)),
            ),
            (
                "sluice_input_rows",
                "gauge",
                "Rows read by the query's last micro-batch (numInputRows).",
                latest(|l| Some(l.num_input_rows as f64)),
            ),
            (
                "sluice_input_rows_per_second",
                "gauge",
                "Rate at which rows arrived for the last micro-batch (inputRowsPerSecond).",
                latest(|l| Some(l.input_rows_per_second)),
            ),
            (
                "sluice_processed_rows_per_second",
                "gauge",
                "Rate at which the last micro-batch processed its rows (processedRowsPerSecond).",
                latest(|l| Some(l.processed_rows_per_second)),
            ),
            (
                "sluice_batch_duration_ms",
                "gauge",
                "Duration of the last micro-batch in milliseconds (durationMs.triggerExecution).",
                latest(|l| Some(l.batch_duration_ms as f64)),
            ),
            (
                "sluice_batch_phase_duration_ms",
                "gauge",
                "Duration of each phase of the last micro-batch in milliseconds (durationMs).",
                Box::new(|q| {
                    q.latest
                        .as_ref()
                        .map(|l| {
                            l.phases
                                .iter()
                                .map(|(k, v)| (Some(format!("phase=\"{k}\"")), *v as f64))
                                .collect()
                        })
                        .unwrap_or_default()
                }),
            ),
            (
                "sluice_state_rows",
                "gauge",
                "Rows held in state by the query's stateful operators (numRowsTotal, summed).",
                latest(|l| l.state.map(|(rows, _)| rows as f64)),
            ),
            (
                "sluice_state_memory_bytes",
                "gauge",
                "Memory used by the query's state stores in bytes (memoryUsedBytes, summed).",
                latest(|l| l.state.map(|(_, mem)| mem as f64)),
            ),
            (
                "sluice_watermark_ms",
                "gauge",
                "The query's event-time watermark in milliseconds since the epoch.",
                latest(|l| l.watermark_ms.map(|v| v as f64)),
            ),
            (
                "sluice_event_time_lag_ms",
                "gauge",
                "Max event time of the last micro-batch minus the watermark, in milliseconds.",
                latest(|l| match (l.event_time_max_ms, l.watermark_ms) {
                    (Some(max), Some(w)) => Some((max - w) as f64),
                    _ => None,
                }),
            ),
            (
                "sluice_worker_tasks",
                "gauge",
                "Tasks each worker ran for the last micro-batch (a query on a cluster).",
                Box::new(|q| {
                    q.latest
                        .as_ref()
                        .map(|l| worker_values(&l.workers, |(_, n, _)| *n as f64))
                        .unwrap_or_default()
                }),
            ),
            (
                "sluice_worker_task_duration_ms",
                "gauge",
                "Each worker's task durations for the last micro-batch, added up, in milliseconds.",
                Box::new(|q| {
                    q.latest
                        .as_ref()
                        .map(|l| worker_values(&l.workers, |(_, _, ms)| *ms as f64))
                        .unwrap_or_default()
                }),
            ),
            (
                "sluice_worker_tasks_total",
                "counter",
                "Tasks each worker ran, summed over every micro-batch.",
                Box::new(|q| {
                    q.worker_tasks_total
                        .iter()
                        .map(|(w, n)| (Some(format!("worker=\"{}\"", label_value(w))), *n as f64))
                        .collect()
                }),
            ),
            (
                "sluice_batches_total",
                "counter",
                "Micro-batches that reported progress.",
                total(|q| q.batches_total as f64),
            ),
            (
                "sluice_input_rows_total",
                "counter",
                "Rows read, summed over every micro-batch.",
                total(|q| q.input_rows_total as f64),
            ),
            (
                "sluice_rows_dropped_by_watermark_total",
                "counter",
                "Rows dropped as late (behind the watermark), summed over every micro-batch.",
                total(|q| q.dropped_by_watermark_total as f64),
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in &families {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for q in &self.queries {
                let labels = format!(
                    "query=\"{}\",id=\"{}\"",
                    label_value(q.name.as_deref().unwrap_or(&q.id)),
                    label_value(&q.id)
                );
                for (extra, v) in value(q) {
                    let labels = match extra {
                        Some(extra) => format!("{labels},{extra}"),
                        None => labels.clone(),
                    };
                    let _ = writeln!(out, "{name}{{{labels}}} {}", sample(v));
                }
            }
        }
        out
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value as Prometheus spells it.
fn sample(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::time::{Duration, Instant};

    use sluice::{col, window, OutputMode, Session, Trigger};

    fn progress(id: &str, batch: i64, dropped: i64) -> StreamingQueryProgress {
        serde_json::from_value(serde_json::json!({
            "id": id, "runId": "r", "name": "q \"one\"", "timestamp": "2026-09-15T12:10:00.000Z",
            "batchId": batch, "batchDuration": 12, "numInputRows": 100,
            "inputRowsPerSecond": 1000.0, "processedRowsPerSecond": 2500.5,
            "durationMs": {"triggerExecution": 40, "addBatch": 30, "walCommit": 5},
            "eventTime": {"watermark": "2026-09-15T12:10:00.000Z",
                          "max": "2026-09-15T12:10:03.500Z"},
            "stateOperators": [{
                "operatorName": "stateStoreSave", "numRowsTotal": 10, "numRowsUpdated": 1,
                "numRowsRemoved": 0, "allUpdatesTimeMs": 0, "allRemovalsTimeMs": 0,
                "commitTimeMs": 0, "numRowsDroppedByWatermark": dropped,
                "memoryUsedBytes": 2048, "numShufflePartitions": 2,
                "numStateStoreInstances": 2, "customMetrics": {}
            }],
            "sources": [],
            "sink": {"description": "noop", "numOutputRows": 0, "metrics": {}},
            "workers": [{"address": "10.0.0.5:7078", "numTasks": 3, "taskDurationMs": 25}]
        }))
        .expect("a progress document")
    }

    #[test]
    fn history_keeps_the_last_documents_and_answers_what_is_new() {
        let mut h = History::default();
        h.started("a", "r", Some("q1"));
        for b in 0..(HISTORY as i64 + 5) {
            h.record(&progress("a", b, 0));
        }
        h.record(&progress("b", 0, 0));
        let all: serde_json::Value = serde_json::from_str(&h.progress_json(0)).unwrap();
        assert_eq!(all["seq"], HISTORY as u64 + 6);
        let qs = all["queries"].as_array().unwrap();
        assert_eq!(qs.len(), 2);
        assert_eq!(qs[0]["id"], "a");
        assert_eq!(qs[0]["status"], "active");
        let p = qs[0]["progress"].as_array().unwrap();
        assert_eq!(p.len(), HISTORY);
        assert_eq!(p[0]["batchId"], 5, "the oldest documents are dropped");
        assert_eq!(p[HISTORY - 1]["durationMs"]["addBatch"], 30);
        assert_eq!(p[0]["stateOperators"][0]["memoryUsedBytes"], 2048);

        let new: serde_json::Value =
            serde_json::from_str(&h.progress_json(HISTORY as u64 + 4)).unwrap();
        let a = new["queries"][0]["progress"].as_array().unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0]["batchId"], HISTORY as i64 + 4);
        assert_eq!(new["queries"][1]["progress"].as_array().unwrap().len(), 1);

        h.terminated("a", Some("boom"));
        let v: serde_json::Value = serde_json::from_str(&h.progress_json(u64::MAX)).unwrap();
        assert_eq!(v["queries"][0]["status"], "failed");
        assert_eq!(v["queries"][0]["exception"], "boom");
        assert_eq!(v["queries"][0]["progress"].as_array().unwrap().len(), 0);
    }

    #[test]
    fn metrics_are_prometheus_text_with_escaped_labels_and_counters_over_every_batch() {
        let mut h = History::default();
        h.record(&progress("a", 0, 3));
        h.record(&progress("a", 1, 4));
        let m = h.metrics();
        let labels = "query=\"q \\\"one\\\"\",id=\"a\"";
        for line in [
            "# TYPE sluice_input_rows_per_second gauge".to_string(),
            "# TYPE sluice_rows_dropped_by_watermark_total counter".to_string(),
            format!("sluice_batch_id{{{labels}}} 1"),
            format!("sluice_input_rows_per_second{{{labels}}} 1000"),
            format!("sluice_processed_rows_per_second{{{labels}}} 2500.5"),
            format!("sluice_batch_duration_ms{{{labels}}} 40"),
            format!("sluice_batch_phase_duration_ms{{{labels},phase=\"addBatch\"}} 30"),
            format!("sluice_state_rows{{{labels}}} 10"),
            format!("sluice_state_memory_bytes{{{labels}}} 2048"),
            format!("sluice_rows_dropped_by_watermark_total{{{labels}}} 7"),
            format!("sluice_input_rows_total{{{labels}}} 200"),
            format!("sluice_watermark_ms{{{labels}}} {}", 1_789_474_200_000i64),
            format!("sluice_event_time_lag_ms{{{labels}}} 3500"),
            format!("sluice_worker_tasks{{{labels},worker=\"10.0.0.5:7078\"}} 3"),
            format!("sluice_worker_task_duration_ms{{{labels},worker=\"10.0.0.5:7078\"}} 25"),
            format!("sluice_worker_tasks_total{{{labels},worker=\"10.0.0.5:7078\"}} 6"),
        ] {
            assert!(m.lines().any(|l| l == line), "no line {line:?} in\n{m}");
        }
        // Every sample line belongs to a family announced by HELP and TYPE.
        for l in m.lines().filter(|l| !l.starts_with('#')) {
            let name = &l[..l.find('{').unwrap()];
            assert!(m.contains(&format!("# TYPE {name} ")), "{l}");
            assert!(m.contains(&format!("# HELP {name} ")), "{l}");
        }
        assert_eq!(sample(f64::INFINITY), "+Inf");
        assert_eq!(sample(f64::NAN), "NaN");
    }

    #[test]
    fn a_taken_port_is_an_error_naming_the_address() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let err = start(&addr, None).err().expect("the port is taken");
        assert!(err.contains(&format!("--ui {addr}")), "{err}");
        assert!(err.contains("port"), "{err}");
    }

    /// `HOST:PORT` of a dashboard's URL.
    fn host(url: &str) -> String {
        url.trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string()
    }

    /// Sends `raw` on a new connection and reads the answer until the server closes it (within
    /// `wait`): the response text, or the error.
    fn exchange(host: &str, raw: &str, wait: Duration) -> std::io::Result<String> {
        let mut s = TcpStream::connect(host)?;
        s.set_read_timeout(Some(wait))?;
        s.write_all(raw.as_bytes())?;
        let mut out = Vec::new();
        // A connection closed with unread bytes may end in a reset after the answer.
        if let Err(e) = s.read_to_end(&mut out) {
            if out.is_empty() {
                return Err(e);
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// `GET path` with `Connection: close` and extra header lines, answered within `wait`.
    fn get_within(host: &str, path: &str, headers: &str, wait: Duration) -> String {
        let started = Instant::now();
        let response = exchange(
            host,
            &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n"),
            wait,
        )
        .unwrap_or_else(|e| panic!("GET {path}: no answer within {wait:?}: {e}"));
        assert!(
            started.elapsed() <= wait,
            "GET {path} took {:?}",
            started.elapsed()
        );
        response
    }

    fn test_limits() -> Limits {
        Limits {
            max_connections: 8,
            max_head: LIMITS.max_head,
            head_timeout: Duration::from_secs(2),
            write_timeout: Duration::from_secs(2),
        }
    }

    /// A dashboard holding [`HISTORY`] progress documents (`/api/progress` is ~1 MB).
    fn full_dashboard(limits: Limits, token: Option<&str>) -> Arc<Dashboard> {
        let dash = start_with("127.0.0.1:0", token, limits).unwrap();
        for b in 0..HISTORY as i64 {
            dash.on_query_progress(&progress("a", b, 1));
        }
        dash
    }

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// Sets the socket's receive buffer (`SO_RCVBUF`).
    fn set_receive_buffer(s: &TcpStream, size: libc::c_int) {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid socket and a pointer to a c_int of the size given.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
    }

    /// A connection whose receive buffer is as small as the kernel allows, which sends `n`
    /// requests for the whole progress history and never reads an answer.
    fn non_reader(host: &str, n: usize) -> TcpStream {
        let s = TcpStream::connect(host).unwrap();
        set_receive_buffer(&s, 1);
        let request = format!("GET /api/progress HTTP/1.1\r\nHost: {host}\r\n\r\n");
        (&s).write_all(request.repeat(n).as_bytes()).unwrap();
        s
    }

    /// Whether the server has closed `s` (EOF or reset), waiting at most `wait` for it.
    fn closed_by_server(s: &mut TcpStream, wait: Duration) -> bool {
        s.set_read_timeout(Some(wait)).unwrap();
        let mut buf = [0u8; 64 * 1024];
        let deadline = Instant::now() + wait;
        loop {
            match s.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) if Instant::now() < deadline => continue,
                Ok(_) => return false,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return false
                }
                Err(_) => return true,
            }
        }
    }

    #[test]
    fn a_huge_header_is_refused_and_never_accumulated() {
        let dash = start("127.0.0.1:0", None).unwrap();
        let host = host(dash.url());
        let before = rss_kib();
        let mut s = TcpStream::connect(&host).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(b"GET /api/progress HTTP/1.1\r\nHost: x\r\nX-Filler: ")
            .unwrap();
        // 64 MiB of one header, in 64 KiB writes, until the server stops taking it.
        let chunk = vec![b'a'; 64 * 1024];
        let mut sent = 0usize;
        while sent < 64 << 20 {
            match s.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        let grown = rss_kib().saturating_sub(before);
        // What the socket buffers hold on both sides (a few MiB on loopback), not 64 MiB.
        assert!(
            sent < 24 << 20,
            "the server took {} MiB of header",
            sent >> 20
        );
        assert!(
            grown < 48 * 1024,
            "the process grew by {} MiB while 64 MiB of header were offered",
            grown / 1024
        );
        // Answered 431 and closed, or closed at once (the unread bytes reset the connection).
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 431 "),
            "{answer}"
        );
        // Too many headers is the same answer; the server goes on serving.
        let many: String = (0..100).map(|i| format!("X-H{i}: v\r\n")).collect();
        let r = get_within(&host, "/", &many, Duration::from_secs(5));
        assert!(r.starts_with("HTTP/1.1 431 "), "{r}");
        let r = get_within(&host, "/api/progress", "", Duration::from_secs(5));
        assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    }

    #[test]
    fn clients_that_never_read_do_not_hold_up_the_others() {
        let dash = full_dashboard(test_limits(), None);
        let host = host(dash.url());
        // Three clients each asking for the whole history 30 times (~30 MB) and reading none.
        let stuck: Vec<TcpStream> = (0..3).map(|_| non_reader(&host, 30)).collect();
        std::thread::sleep(Duration::from_millis(500));
        for _ in 0..3 {
            let started = Instant::now();
            let r = get_within(&host, "/api/progress", "", Duration::from_secs(2));
            assert!(r.starts_with("HTTP/1.1 200 "), "{}", &r[..r.len().min(200)]);
            eprintln!(
                "answered in {:?} beside 3 clients that never read",
                started.elapsed()
            );
        }
        assert!(dash.open_connections() >= 3, "{}", dash.open_connections());
        // Past the write timeout the server has given up on them and closed their connections.
        let deadline = Instant::now() + test_limits().write_timeout + Duration::from_secs(3);
        while dash.open_connections() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            dash.open_connections(),
            0,
            "connections of clients that never read outlived the write timeout"
        );
        drop(stuck);
    }

    #[test]
    fn idle_connections_beyond_the_cap_are_closed_and_a_fresh_client_is_answered() {
        let limits = test_limits();
        let dash = start_with("127.0.0.1:0", None, limits).unwrap();
        let host = host(dash.url());
        // 40 connections that send nothing, and one sending a head a byte at a time (slowloris).
        let mut idle: Vec<TcpStream> = (0..40)
            .map(|_| TcpStream::connect(&host).unwrap())
            .collect();
        let mut slow = TcpStream::connect(&host).unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nX-Slow: ").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let r = get_within(&host, "/api/progress", "", Duration::from_secs(2));
        assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
        // All but the cap's worth were closed to make room, at once.
        let closed = idle
            .iter_mut()
            .filter_map(|s| closed_by_server(s, Duration::from_millis(50)).then_some(()))
            .count();
        assert!(
            closed >= 40 - limits.max_connections,
            "{closed} of 40 idle connections closed"
        );
        // The others (and the slow head) once the head timeout has passed.
        std::thread::sleep(limits.head_timeout);
        for s in idle.iter_mut().chain(std::iter::once(&mut slow)) {
            assert!(
                closed_by_server(s, Duration::from_secs(3)),
                "an idle connection outlived the head timeout"
            );
        }
    }

    #[test]
    fn when_every_connection_is_busy_a_new_one_is_answered_503_at_once() {
        let limits = Limits {
            max_connections: 1,
            ..test_limits()
        };
        let dash = full_dashboard(limits, None);
        let host = host(dash.url());
        let _stuck = non_reader(&host, 30);
        std::thread::sleep(Duration::from_millis(300));
        let r = get_within(&host, "/api/progress", "", Duration::from_secs(1));
        assert!(r.starts_with("HTTP/1.1 503 "), "{}", &r[..r.len().min(200)]);
        // Once the write timeout has closed the stuck connection, served again.
        std::thread::sleep(limits.write_timeout + Duration::from_millis(500));
        let r = get_within(&host, "/metrics", "", Duration::from_secs(2));
        assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    }

    #[test]
    fn head_other_methods_and_kept_alive_connections() {
        let dash = start("127.0.0.1:0", None).unwrap();
        let host = host(dash.url());
        let head = exchange(
            &host,
            "HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        assert!(
            head.contains(&format!("Content-Length: {}\r\n", PAGE.len())),
            "{head}"
        );
        assert!(
            head.ends_with("\r\n\r\n"),
            "a HEAD answer has no body: {head}"
        );
        let post = exchange(
            &host,
            "POST /api/progress HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        // Two requests on one connection (the second pipelined), both answered, then closed.
        let two = exchange(
            &host,
            "GET /api/progress HTTP/1.1\r\nHost: x\r\n\r\nGET /nothing HTTP/1.1\r\nHost: x\r\n\
             Connection: close\r\n\r\n",
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(two.matches("HTTP/1.1 ").count(), 2, "{two}");
        assert!(two.contains("HTTP/1.1 404 "), "{two}");
        assert!(two.contains("{\"seq\":0,\"queries\":[]}"), "{two}");
        let garbage = exchange(&host, "\x01\x02 nonsense\r\n\r\n", Duration::from_secs(5)).unwrap();
        assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
    }

    #[test]
    fn a_non_loopback_bind_needs_a_token_and_every_request_carries_it() {
        for (addr, token) in [("0.0.0.0:0", None), ("0.0.0.0:0", Some("  "))] {
            let err = start(addr, token).err().expect("refused without a token");
            for part in [
                "--ui 0.0.0.0:0",
                "--ui-token",
                "SLUICE_UI_TOKEN",
                "127.0.0.1",
            ] {
                assert!(err.contains(part), "{part:?} not in {err}");
            }
        }
        let dash = start("0.0.0.0:0", Some("s3cret+")).unwrap();
        assert!(
            dash.url().starts_with("http://127.0.0.1:"),
            "{}",
            dash.url()
        );
        let host = host(dash.url());
        let wait = Duration::from_secs(5);
        for (path, headers, status) in [
            ("/", "", "401"),
            ("/api/progress", "", "401"),
            ("/metrics", "Authorization: Bearer s3cret\r\n", "401"),
            ("/metrics?token=s3cret", "", "401"),
            ("/metrics?token=s3cret+", "", "401"), // `+` in a query is a space
            ("/nothing", "", "401"),
            ("/", "Authorization: Bearer s3cret+\r\n", "200"),
            ("/metrics", "authorization: bearer s3cret+\r\n", "200"),
            ("/?token=s3cret%2B", "", "200"),
            ("/api/progress?since=0&token=s3cret%2b", "", "200"),
            ("/nothing?token=s3cret%2B", "", "404"),
        ] {
            let r = get_within(&host, path, headers, wait);
            assert!(
                r.starts_with(&format!("HTTP/1.1 {status} ")),
                "{path} {headers:?}: {r}"
            );
            if status == "401" {
                assert!(r.contains("WWW-Authenticate: Bearer"), "{r}");
            }
        }
        // A token on a loopback address is required too.
        let local = start("127.0.0.1:0", Some("t")).unwrap();
        let r = get_within(&host_of(&local), "/", "", wait);
        assert!(r.starts_with("HTTP/1.1 401 "), "{r}");
        let r = get_within(&host_of(&local), "/?token=t", "", wait);
        assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    }

    fn host_of(dash: &Dashboard) -> String {
        host(dash.url())
    }

    #[test]
    fn the_page_opened_with_its_token_sends_it_with_its_requests() {
        let chromium = Path::new("/usr/bin/chromium");
        assert!(
            chromium.exists(),
            "/usr/bin/chromium is missing: run `apt-get install -y chromium`"
        );
        let dash = start("127.0.0.1:0", Some("page-token")).unwrap();
        for b in 0..20 {
            dash.on_query_progress(&progress("a", b, 0));
        }
        // The progress is only for requests with the token: the page can only draw it if its
        // own requests carry it.
        let r = get_within(&host_of(&dash), "/api/progress", "", Duration::from_secs(5));
        assert!(r.starts_with("HTTP/1.1 401 "), "{r}");
        let dom = headless(
            chromium,
            &["--dump-dom", &format!("{}?token=page-token", dash.url())],
        );
        let html = String::from_utf8_lossy(&dom.stdout).to_string();
        let body_tag = &html[html.find("<body").expect("a body")..];
        let body_tag = &body_tag[..body_tag.find('>').unwrap()];
        assert_eq!(
            attr_values(body_tag, "data-points").first().copied(),
            Some(20),
            "the page did not get the progress with its token: {body_tag}"
        );
    }

    /// The server half of [`out_of_descriptors_it_backs_off_and_serves_again`], run by it in a
    /// child process: binds, prints `ADDR host:port`, fills its descriptor table, prints
    /// `FULL`, and frees it when a line arrives on stdin.
    #[test]
    #[ignore = "the child process of out_of_descriptors_it_backs_off_and_serves_again"]
    fn out_of_descriptors_server() {
        if std::env::var_os("SLUICE_UI_EMFILE_SERVER").is_none() {
            return;
        }
        let limit = libc::rlimit {
            rlim_cur: 256,
            rlim_max: 256,
        };
        // SAFETY: sets this process's descriptor limit from a valid struct.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
        let dash = start("127.0.0.1:0", None).unwrap();
        println!("ADDR {}", host_of(&dash));
        let mut filler = Vec::new();
        while let Ok(f) = std::fs::File::open("/dev/null") {
            filler.push(f);
        }
        println!("FULL {}", filler.len());
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        drop(filler);
        std::thread::sleep(Duration::from_secs(60));
    }

    /// CPU time (user + system) of process `pid` so far, in clock ticks.
    fn cpu_ticks(pid: u32) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }

    #[test]
    fn out_of_descriptors_it_backs_off_and_serves_again() {
        use std::io::BufRead;
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "ui::tests::out_of_descriptors_server",
                "--exact",
                "--include-ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SLUICE_UI_EMFILE_SERVER", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut host = String::new();
        loop {
            let line = lines.next().expect("the server child ended").unwrap();
            // libtest may print `test NAME ... ` before the child's lines, on the same line.
            if let Some(a) = line.split("ADDR ").nth(1) {
                host = a.trim().to_string();
            }
            if line.contains("FULL ") {
                break;
            }
        }
        // The kernel completes the connections; the server cannot accept them.
        let mut clients: Vec<TcpStream> = (0..3)
            .map(|_| {
                let mut s = TcpStream::connect(&host).unwrap();
                write!(
                    s,
                    "GET /api/progress HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                s
            })
            .collect();
        let ticks = cpu_ticks(child.id());
        std::thread::sleep(Duration::from_secs(1));
        let spent = cpu_ticks(child.id()) - ticks;
        clients[0]
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 16];
        let early = clients[0].read(&mut buf);
        assert!(
            early.is_err(),
            "answered while out of descriptors? {early:?}"
        );
        // Backing off, not spinning on the failing accept (100 ticks a second is a full core).
        assert!(
            spent < 30,
            "{spent} ticks of CPU in a second out of descriptors"
        );
        // Descriptors free again: every waiting client is answered.
        writeln!(child.stdin.as_mut().unwrap()).unwrap();
        for s in &mut clients {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut r = String::new();
            let got = s.read_to_string(&mut r);
            assert!(
                r.starts_with("HTTP/1.1 200 "),
                "not served after the descriptors came back: {got:?} {r}"
            );
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// `GET path` over a plain TCP connection: (status line, body).
    fn get(base: &str, path: &str) -> (String, String) {
        let host = base
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let mut s = TcpStream::connect(&host).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head.lines().next().unwrap_or_default().to_string();
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        (status, if chunked { dechunk(body) } else { body.into() })
    }

    fn dechunk(mut body: &str) -> String {
        let mut out = String::new();
        while let Some((size, rest)) = body.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&rest[..n]);
            body = &rest[n + 2..];
        }
        out
    }

    /// The integer value of `attr="N"` at each of its occurrences in `html`.
    fn attr_values(html: &str, attr: &str) -> Vec<i64> {
        let pat = format!("{attr}=\"");
        html.match_indices(&pat)
            .filter_map(|(i, _)| {
                let rest = &html[i + pat.len()..];
                rest[..rest.find('"')?].parse().ok()
            })
            .collect()
    }

    /// `data-series-points` of the canvas `data-chart=KEY` of query section `name`.
    fn chart_points(dom: &str, name: &str, key: &str) -> i64 {
        let section = dom
            .split("<section")
            .find(|s| s.contains(&format!("data-query-name=\"{name}\"")))
            .unwrap_or_else(|| panic!("no section for query {name} in the DOM"));
        let canvas = section
            .split("<canvas")
            .find(|c| c.contains(&format!("data-chart=\"{key}\"")))
            .unwrap_or_else(|| panic!("no {key} chart for {name}"));
        let tag = &canvas[..canvas.find('>').unwrap()];
        *attr_values(tag, "data-series-points")
            .first()
            .unwrap_or_else(|| panic!("chart {key} of {name} has no data-series-points: {tag}"))
    }

    /// Headless Chromium with its own profile, 5 s of page time (the page polls every second),
    /// killed if it has not finished within two minutes.
    fn headless(chromium: &Path, args: &[&str]) -> std::process::Output {
        let profile = tempfile::tempdir().unwrap();
        Command::new("timeout")
            .args(["--kill-after=10", "120"])
            .arg(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--virtual-time-budget=5000",
                &format!("--user-data-dir={}", profile.path().display()),
            ])
            .args(args)
            .output()
            .unwrap()
    }

    fn screenshot_path() -> PathBuf {
        // target/ of the build (CARGO_TARGET_DIR or the workspace's).
        let exe = std::env::current_exe().unwrap();
        let target = exe
            .ancestors()
            .find(|p| p.join("debug").is_dir() || p.join("release").is_dir())
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        target.join("ui-dashboard.png")
    }

    #[test]
    fn the_dashboard_shows_running_queries_as_json_metrics_and_charts_in_a_browser() {
        let chromium = Path::new("/usr/bin/chromium");
        assert!(
            chromium.exists(),
            "/usr/bin/chromium is missing: this test draws the dashboard in headless Chromium. \
             Run `apt-get install -y chromium` (.ci/run installs it)"
        );
        let session = Session::builder().shuffle_partitions(2).build().unwrap();
        let dash = start("127.0.0.1:0", None).unwrap();
        assert!(
            dash.url().starts_with("http://127.0.0.1:"),
            "{}",
            dash.url()
        );
        assert!(!dash.url().ends_with(":0/"), "{}", dash.url());
        session.add_listener(dash.clone());
        let dir = tempfile::tempdir().unwrap();

        // 100 rows a batch, event time one second further each batch, each row up to 9 s
        // behind it: with a 3 s watermark some rows of every batch are late.
        let windowed = session
            .read_stream()
            .format("rate-micro-batch")
            .option("rowsPerBatch", 100)
            .option("startTimestamp", 1_789_474_200_000i64)
            .load_source()
            .unwrap()
            .select_sql([
                "timestamp - CASE value % 5 WHEN 0 THEN INTERVAL 0 SECONDS \
                 WHEN 1 THEN INTERVAL 2 SECONDS WHEN 2 THEN INTERVAL 4 SECONDS \
                 WHEN 3 THEN INTERVAL 6 SECONDS ELSE INTERVAL 9 SECONDS END AS ts",
                "value % 4 AS key",
            ])
            .unwrap()
            .with_watermark("ts", "3 seconds")
            .unwrap()
            .group_by([window(col("ts"), "5 seconds"), col("key")])
            .count()
            .unwrap()
            .write_stream()
            .query_name("windowed_counts")
            .output_mode(OutputMode::Update)
            .format("noop")
            .option("checkpointLocation", dir.path().join("windowed").display())
            .trigger(Trigger::ProcessingTime(Duration::from_millis(150)))
            .start()
            .unwrap();
        let filtered = session
            .read_stream()
            .format("rate-micro-batch")
            .option("rowsPerBatch", 50)
            .load_source()
            .unwrap()
            .filter_sql("value % 3 = 0")
            .unwrap()
            .write_stream()
            .query_name("filtered_rows")
            .format("noop")
            .option("checkpointLocation", dir.path().join("filtered").display())
            .trigger(Trigger::ProcessingTime(Duration::from_millis(300)))
            .start()
            .unwrap();

        let deadline = Instant::now() + Duration::from_secs(300);
        while windowed.recent_progress().len() < 12 || filtered.recent_progress().len() < 3 {
            assert!(windowed.is_active(), "{:?}", windowed.exception());
            assert!(filtered.is_active(), "{:?}", filtered.exception());
            assert!(
                Instant::now() < deadline,
                "the queries made too few batches"
            );
            std::thread::sleep(Duration::from_millis(50));
        }

        // (1) The JSON history and the metrics, over plain HTTP.
        let (status, body) = get(dash.url(), "/api/progress");
        assert!(status.contains("200"), "{status}");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        let queries = doc["queries"].as_array().unwrap();
        let q = queries
            .iter()
            .find(|q| q["name"] == "windowed_counts")
            .unwrap_or_else(|| panic!("no windowed_counts in {body}"));
        assert_eq!(q["id"], windowed.id());
        assert_eq!(q["status"], "active");
        let p = q["progress"].as_array().unwrap();
        assert!(p.len() >= 12, "{} progress documents", p.len());
        assert!(p.iter().all(|p| p["durationMs"]["addBatch"].is_i64()));
        assert!(p.iter().any(|p| p["numInputRows"] == 100));
        assert!(p.iter().any(|p| p["eventTime"]["watermark"].is_string()));
        assert!(
            p.iter()
                .any(|p| p["stateOperators"][0]["numRowsTotal"].as_i64() > Some(0)),
            "no state rows in {body}"
        );
        let dropped: i64 = p
            .iter()
            .filter_map(|p| p["stateOperators"][0]["numRowsDroppedByWatermark"].as_i64())
            .sum();
        assert!(dropped > 0, "no late rows in {body}");
        assert!(queries.iter().any(|q| q["name"] == "filtered_rows"));
        let last_seq = doc["seq"].as_u64().unwrap();
        let (_, newer) = get(dash.url(), &format!("/api/progress?since={last_seq}"));
        let newer: serde_json::Value = serde_json::from_str(&newer).unwrap();
        for q in newer["queries"].as_array().unwrap() {
            // Only what was recorded in between (a batch or two at most).
            assert!(q["progress"].as_array().unwrap().len() < 5, "{q}");
        }

        let (status, metrics) = get(dash.url(), "/metrics");
        assert!(status.contains("200"), "{status}");
        let label = format!("query=\"windowed_counts\",id=\"{}\"", windowed.id());
        for family in [
            "sluice_input_rows_per_second",
            "sluice_processed_rows_per_second",
            "sluice_batch_duration_ms",
            "sluice_batch_id",
            "sluice_state_rows",
            "sluice_state_memory_bytes",
            "sluice_rows_dropped_by_watermark_total",
            "sluice_watermark_ms",
        ] {
            assert!(metrics.contains(&format!("# HELP {family} ")), "{metrics}");
            assert!(metrics.contains(&format!("# TYPE {family} ")), "{metrics}");
            assert!(
                metrics.contains(&format!("{family}{{{label}}} ")),
                "no {family} for windowed_counts in\n{metrics}"
            );
        }
        let value = |family: &str| -> f64 {
            let prefix = format!("{family}{{{label}}} ");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap()
                .parse()
                .unwrap()
        };
        assert!(value("sluice_rows_dropped_by_watermark_total") >= dropped as f64);
        assert!(value("sluice_state_rows") > 0.0);
        assert!(value("sluice_watermark_ms") > 1_789_474_200_000.0);
        assert!(value("sluice_batch_id") >= 11.0);
        assert!(
            !metrics.contains("sluice_state_rows{query=\"filtered_rows\""),
            "a stateless query has no state gauge"
        );
        let (status, _) = get(dash.url(), "/nothing-here");
        assert!(status.contains("404"), "{status}");

        // (2) The page in a real browser: it fetches the JSON and draws every chart.
        let dom = headless(chromium, &["--dump-dom", dash.url()]);
        let html = String::from_utf8_lossy(&dom.stdout).to_string();
        assert!(
            dom.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&dom.stderr)
        );
        let body_tag = &html[html.find("<body").expect("a body")..];
        let body_tag = &body_tag[..body_tag.find('>').unwrap()];
        let points = attr_values(body_tag, "data-points");
        assert!(
            points.first().copied().unwrap_or(0) >= 15,
            "the page drew no progress points: {body_tag}\n{html}"
        );
        for key in [
            "rates",
            "input-rows",
            "duration",
            "event-time",
            "lag",
            "state-rows",
            "state-memory",
            "late",
        ] {
            let n = chart_points(&html, "windowed_counts", key);
            assert!(n >= 10, "chart {key} of windowed_counts drew {n} points");
        }
        assert!(chart_points(&html, "filtered_rows", "rates") >= 3);
        assert_eq!(
            chart_points(&html, "filtered_rows", "state-rows"),
            0,
            "a stateless query draws no state"
        );
        assert!(html.contains("Input rate vs processing rate"));

        // (3) A screenshot, larger than a blank page.
        let png = screenshot_path();
        let _ = std::fs::remove_file(&png);
        let shot = headless(
            chromium,
            &[
                "--hide-scrollbars",
                "--window-size=1280,1600",
                &format!("--screenshot={}", png.display()),
                dash.url(),
            ],
        );
        assert!(
            shot.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&shot.stderr)
        );
        let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        assert!(size > 20_000, "{} is {size} bytes", png.display());
        eprintln!("dashboard screenshot: {}", png.display());

        windowed.stop();
        filtered.stop();
        let (_, body) = get(dash.url(), "/api/progress?since=999999999");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(
            doc["queries"]
                .as_array()
                .unwrap()
                .iter()
                .all(|q| q["status"] == "terminated"),
            "{body}"
        );
    }
}
