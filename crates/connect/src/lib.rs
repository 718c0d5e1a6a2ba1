//! # Sluice's Spark Connect server
//!
//! `sluice connect` answers Spark Connect (gRPC, plans as protobuf, data as Arrow IPC), so a
//! PySpark program that says `SparkSession.builder.remote("sc://127.0.0.1:15002")` runs on
//! Sluice unchanged. The messages are generated from Spark's `.proto` files and checked in
//! (`sluice-connect-proto`, protocol 4.2, matching `pyspark-client` 4.2); this crate uses only the engine's public API.
//!
//! | module | concept |
//! |---|---|
//! | [`auth`] | bearer tokens as Spark Connect clients send them; no token, no other address than loopback |
//! | [`tls`] | TLS for the port (`--tls-cert`, `--tls-key`), on rustls with ring |
//! | [`limits`] | a request's size and nesting, sessions and queries: Spark's limits, each refused by name |
//! | [`grpc`] | the `spark.connect.SparkConnectService` gRPC service: method routing and codecs (the generated code is only a client) |
//! | [`mod@serve`] | `ServerConfig` (`sluice connect`'s flags) and `serve`/`serve_until`: bind, TLS, token and wire limits, shutdown |
//! | [`server`] | the service: sessions, execute (with reattach and release), analyze, config, interrupt, artifacts, error details; `serve` with clean shutdown |
//! | `commands` | commands: `spark.sql`, temp views, `writeStream`, the query handle, `spark.streams` |
//! | `results` | what one `ExecutePlan` returns: the responses of a relation or a command, in order |
//! | `conf` | `spark.conf` with Spark's defaults for the keys PySpark reads |
//! | [`session`] | one client session: its Sluice `Session`, temp views, cached batch frames, its streaming queries (`spark.streams`) |
//! | [`plan`] | relations and expressions of the Spark Connect plan to Sluice frames (Spark SQL text over the session's views) |
//! | [`queries`] | a session's streaming queries (`spark.streams`) and the server's limit on active ones |
//! | [`streaming`] | `writeStream` (`WriteStreamOperationStart`) and the query handle / manager commands |
//! | [`python`] | the client's own Python workers: `foreachBatch`, `foreach` and listeners |
//! | [`observe`] | watching the server: listeners every session registers (the `--ui` dashboard), session and query log lines |
//! | [`listener_bus`] | Python `StreamingQueryListener`s: the session's query events streamed to the client |
//! | [`ipc`] | Arrow IPC streams in and out (local relations, results) |
//! | [`error`] | errors as PySpark users catch them (`AnalysisException`, `StreamingQueryException`, ...) |

#![warn(missing_docs, unreachable_pub)]

pub mod auth;
pub(crate) mod commands;
pub(crate) mod conf;
pub mod error;
pub mod grpc;
pub mod ipc;
pub mod limits;
pub mod listener_bus;
pub mod observe;
pub mod plan;
pub mod python;
pub mod queries;
pub(crate) mod results;
pub mod serve;
pub mod server;
pub mod session;
pub mod streaming;
pub mod tls;

/// The generated Spark Connect messages (`spark.connect.*`).
pub use sluice_connect_proto as proto;

pub use error::{ConnectError, Result};
pub use serve::{serve, serve_until, ServerConfig};
pub use tls::TlsFiles;
