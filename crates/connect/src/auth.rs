//! Bearer-token authentication, as Spark Connect clients send it, and the rule that a server
//! reachable from other machines needs a token.
//!
//! A PySpark client given `sc://HOST:PORT/;token=TOKEN` (or `SPARK_CONNECT_AUTHENTICATE_TOKEN`)
//! sends the gRPC metadata `authorization: Bearer TOKEN` with every call. [`Authenticated`]
//! wraps the service and refuses any call (every RPC, known or not) without it, or with another
//! token, with `UNAUTHENTICATED` and a message saying which (never the token). Tokens are
//! compared in constant time.
//!
//! What pyspark-client 4.2 requires (`DefaultChannelBuilder.toChannel`): a token makes the
//! channel secure, so `;token=` alone means TLS, except for the host `localhost` without
//! `use_ssl`, where it uses gRPC's local credentials (plain TCP, loopback only) and still sends
//! the token. So: `sc://localhost:PORT/;token=T` reaches a server without TLS on this machine;
//! `sc://HOST:PORT/;use_ssl=true;token=T` reaches one serving TLS (`--tls-cert`/`--tls-key`);
//! `sc://127.0.0.1:PORT/;token=T` (or another host) tries TLS, which a server without it refuses.
//!
//! [`check_exposure`]: an address other than loopback (127.0.0.0/8, `::1`, `localhost`) is
//! refused without a token, as the `--ui` dashboard's: `foreachBatch` runs the client's pickled
//! Python on the server, so an open port is a shell for anyone who reaches it.

use std::convert::Infallible;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::NamedService;
use tonic::Status;

use crate::error::{ConnectError, Result};

/// The environment variable `sluice connect` reads its token from (`--token` wins).
pub const TOKEN_ENV: &str = "SLUICE_CONNECT_TOKEN";

/// `a == b` in time that depends only on the lengths, not on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a call is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No `authorization` metadata.
    NoToken,
    /// `authorization` is not `Bearer TOKEN`.
    NotBearer,
    /// A token that is not the server's.
    WrongToken,
}

impl Refusal {
    /// Why, in a few words (for the server's log).
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::NoToken => "no token",
            Refusal::NotBearer => "authorization metadata other than a bearer token",
            Refusal::WrongToken => "a wrong token",
        }
    }

    /// The status the client gets: `UNAUTHENTICATED`, what is wrong and how to connect.
    pub fn status(self) -> Status {
        Status::unauthenticated(match self {
            Refusal::NoToken => {
                "authentication failed: this Spark Connect server needs a token and the call \
                 carried none. Connect with sc://HOST:PORT/;token=TOKEN (or set \
                 SPARK_CONNECT_AUTHENTICATE_TOKEN), the token the server was given with `sluice \
                 connect --token` or SLUICE_CONNECT_TOKEN; over TLS add ;use_ssl=true, on this \
                 machine without TLS use the host localhost"
            }
            Refusal::NotBearer => {
                "authentication failed: the call's authorization metadata is not `Bearer \
                 TOKEN`; give the token as sc://HOST:PORT/;token=TOKEN"
            }
            Refusal::WrongToken => {
                "authentication failed: the token this client sent is not this server's (the \
                 one given to `sluice connect --token` or SLUICE_CONNECT_TOKEN); check ;token= \
                 in the sc:// URL or SPARK_CONNECT_AUTHENTICATE_TOKEN"
            }
        })
    }
}

/// Why a call is refused, if it is: the tokens accepted (none: every call is served) and the
/// call's `authorization` metadata.
pub fn refusal(tokens: &[String], authorization: Option<&[u8]>) -> Option<Refusal> {
    if tokens.is_empty() {
        return None;
    }
    let Some(value) = authorization else {
        return Some(Refusal::NoToken);
    };
    let bearer = std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, credentials)| credentials.trim());
    let Some(bearer) = bearer else {
        return Some(Refusal::NotBearer);
    };
    // Every token is compared, so the time does not tell which one came close.
    let matched = tokens.iter().fold(false, |ok, t| {
        ok | same_secret(bearer.as_bytes(), t.as_bytes())
    });
    (!matched).then_some(Refusal::WrongToken)
}

/// The client's address, as tonic's server records it for a connection (plain or TLS).
fn peer<B>(req: &http::Request<B>) -> Option<SocketAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let ext = req.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            ext.get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|t| t.get_ref().remote_addr())
        })
}

/// A service that serves only calls carrying one of `tokens` (none: every call).
#[derive(Debug, Clone)]
pub struct Authenticated<S> {
    inner: S,
    tokens: Arc<[String]>,
}

impl<S> Authenticated<S> {
    /// `inner`, for calls that carry one of `tokens` (an empty list lets every call through).
    pub fn new(inner: S, tokens: Vec<String>) -> Self {
        Self {
            inner,
            tokens: tokens.into(),
        }
    }
}

impl<S: NamedService> NamedService for Authenticated<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for Authenticated<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let authorization = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        match refusal(&self.tokens, authorization) {
            Some(refused) => {
                let from = peer(&req).map_or_else(String::new, |a| format!(" from {a}"));
                log::warn!(
                    "refused a Spark Connect call{from} ({}): {}",
                    req.uri().path(),
                    refused.reason()
                );
                let status = refused.status();
                Box::pin(async move { Ok(status.into_http()) })
            }
            None => Box::pin(self.inner.call(req)),
        }
    }
}

/// The addresses `listen` (`host:port`) resolves to.
pub(crate) fn resolve(listen: &str) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|e| {
            ConnectError::illegal_argument(format!(
                "--listen {listen}: not an address to listen on ({e}); give HOST:PORT, e.g. \
                 127.0.0.1:15002"
            ))
        })?
        .collect();
    if addrs.is_empty() {
        return Err(ConnectError::illegal_argument(format!(
            "--listen {listen}: resolves to no address; give HOST:PORT, e.g. 127.0.0.1:15002"
        )));
    }
    Ok(addrs)
}

/// Refuses to serve `listen` without a token when it is reachable from other machines (an
/// address other than loopback: 127.0.0.0/8, `::1`, `localhost`).
pub fn check_exposure(listen: &str, token: Option<&str>) -> Result<()> {
    if token.is_some_and(|t| !t.trim().is_empty()) {
        return Ok(());
    }
    if resolve(listen)?.iter().all(|a| a.ip().is_loopback()) {
        return Ok(());
    }
    Err(ConnectError::illegal_argument(format!(
        "--listen {listen}: the Spark Connect server would be reachable from other machines, \
         and foreachBatch runs the clients' Python on it, so it needs a token: pass --token \
         TOKEN (or set {TOKEN_ENV}=TOKEN) and connect with sc://HOST:PORT/;use_ssl=true;\
         token=TOKEN (serve TLS with --tls-cert and --tls-key); or listen on 127.0.0.1:PORT to \
         serve this machine only"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_loopback_address_needs_a_token() {
        for listen in ["0.0.0.0:15002", "[::]:15002", "10.1.2.3:15002"] {
            let err = check_exposure(listen, None).unwrap_err();
            for part in ["--token", TOKEN_ENV, "127.0.0.1:PORT", listen] {
                assert!(err.message.contains(part), "{}", err.message);
            }
            assert!(check_exposure(listen, Some("  ")).is_err(), "a blank token");
            assert!(check_exposure(listen, Some("s3cret")).is_ok());
        }
        for listen in [
            "127.0.0.1:0",
            "127.3.4.5:15002",
            "[::1]:15002",
            "localhost:15002",
        ] {
            assert!(check_exposure(listen, None).is_ok(), "{listen}");
        }
        assert!(check_exposure("not an address", None).is_err());
    }

    #[test]
    fn a_call_needs_one_of_the_tokens_and_the_refusal_never_shows_it() {
        let tokens = vec!["s3cret".to_string(), "local-7".to_string()];
        assert!(refusal(&[], None).is_none(), "no token: open");
        assert!(refusal(&tokens, Some(b"Bearer s3cret")).is_none());
        assert!(refusal(&tokens, Some(b"bearer  local-7 ")).is_none());
        assert_eq!(refusal(&tokens, None), Some(Refusal::NoToken));
        let cases: [(&[u8], Refusal); 5] = [
            (b"Bearer s3cre", Refusal::WrongToken),
            (b"Bearer s3cretX", Refusal::WrongToken),
            (b"Bearer nope", Refusal::WrongToken),
            (b"Bearer ", Refusal::NotBearer),
            (b"Basic s3cret", Refusal::NotBearer),
        ];
        for (sent, expected) in cases {
            assert_eq!(refusal(&tokens, Some(sent)), Some(expected));
        }
        for refused in [Refusal::NoToken, Refusal::NotBearer, Refusal::WrongToken] {
            let status = refused.status();
            assert_eq!(status.code(), tonic::Code::Unauthenticated);
            assert!(
                status.message().starts_with("authentication failed"),
                "{}",
                status.message()
            );
            assert!(!status.message().contains("s3cret"), "{}", status.message());
        }
        assert!(Refusal::NoToken.status().message().contains("carried none"));
        assert!(Refusal::WrongToken
            .status()
            .message()
            .contains("not this server's"));
    }
}
