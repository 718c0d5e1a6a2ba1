//! The dashboard's HTTP/1.1 server and its bounds: the listening socket, the accept loop (and
//! its back-off when out of descriptors), the connections it keeps open (and which it closes to
//! make room), and each connection's requests read and answered within their time limits.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::history::History;
use super::http::{reply_bytes, Reply, Request};
use super::lock;
use super::routes::respond;

/// The bounds of the dashboard's HTTP server (the module documentation says why).
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Connections open at once.
    pub(super) max_connections: usize,
    /// Largest request head read, in bytes.
    pub(super) max_head: usize,
    /// Time for a request head to arrive (from the accept, or from the previous response).
    pub(super) head_timeout: Duration,
    /// Time to write one response.
    pub(super) write_timeout: Duration,
}

/// The bounds `sluice run --ui` serves with.
pub(super) const LIMITS: Limits = Limits {
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

/// A listening socket on the first of `addrs` that can be bound, with a backlog of [`BACKLOG`].
pub(super) fn listen(addrs: &[SocketAddr]) -> std::io::Result<TcpListener> {
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

/// What every connection of the server shares.
pub(super) struct Server {
    pub(super) history: Arc<Mutex<History>>,
    pub(super) token: Option<String>,
    pub(super) limits: Limits,
    pub(super) conns: Mutex<Conns>,
}

/// The open connections: each one's task, and which of them wait for a request.
#[derive(Default)]
pub(super) struct Conns {
    next_id: u64,
    /// Every open connection's task, by connection id.
    pub(super) open: HashMap<u64, AbortHandle>,
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

pub(super) async fn accept_loop(listener: TcpListener, server: Arc<Server>, shutdown: Arc<Notify>) {
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
