//! The server over real gRPC, with the generated Spark Connect client: sessions, SQL through
//! `SqlCommand` and a root relation, Arrow results, errors as PySpark reads them, config,
//! reattach and release; tokens, TLS, the refusal of an exposed address without a token, and
//! the limits (message size, plan depth, sessions, queries), each refused by name; sessions
//! that do not see each other's views. (PySpark itself drives the server in python/tests,
//! `test_security.py` for tokens and TLS.)

use std::sync::mpsc;

use arrow::array::{Array, Int32Array};
use sluice_connect::proto;
use sluice_connect::proto::spark_connect_service_client::SparkConnectServiceClient;
use sluice_connect::ServerConfig;
use tonic::transport::Channel;

struct Server {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start() -> Self {
        Self::with(ServerConfig::default())
    }

    /// A server with `config` on a free port of 127.0.0.1 (`url` is `https://` with TLS).
    fn with(config: ServerConfig) -> Self {
        let (tx, rx) = mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let thread = std::thread::spawn(move || {
            let config = ServerConfig {
                listen: "127.0.0.1:0".into(),
                ..config
            };
            sluice_connect::serve_until(config, |addr| tx.send(addr).unwrap(), async move {
                let _ = stopped.await;
            })
            .unwrap();
        });
        let addr = rx.recv().unwrap();
        Self {
            url: format!("{scheme}://{addr}"),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn client(url: &str) -> SparkConnectServiceClient<Channel> {
    SparkConnectServiceClient::connect(url.to_string())
        .await
        .unwrap()
}

fn sql_relation(query: &str) -> proto::Relation {
    proto::Relation {
        common: None,
        rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
            query: query.to_string(),
            ..Default::default()
        })),
    }
}

fn execute_request(session: &str, plan: proto::plan::OpType) -> proto::ExecutePlanRequest {
    proto::ExecutePlanRequest {
        session_id: session.to_string(),
        plan: Some(proto::Plan {
            op_type: Some(plan),
        }),
        request_options: vec![proto::execute_plan_request::RequestOption {
            request_option: Some(
                proto::execute_plan_request::request_option::RequestOption::ReattachOptions(
                    proto::ReattachOptions { reattachable: true },
                ),
            ),
        }],
        ..Default::default()
    }
}

async fn responses(
    client: &mut SparkConnectServiceClient<Channel>,
    req: impl tonic::IntoRequest<proto::ExecutePlanRequest>,
) -> Result<Vec<proto::ExecutePlanResponse>, tonic::Status> {
    let mut stream = client.execute_plan(req).await?.into_inner();
    let mut out = Vec::new();
    while let Some(r) = stream.message().await? {
        out.push(r);
    }
    Ok(out)
}

fn batches(responses: &[proto::ExecutePlanResponse]) -> Vec<arrow::array::RecordBatch> {
    responses
        .iter()
        .filter_map(|r| match &r.response_type {
            Some(proto::execute_plan_response::ResponseType::ArrowBatch(b)) => Some(b),
            _ => None,
        })
        .flat_map(|b| sluice_connect::ipc::read_stream(&b.data).unwrap().1)
        .collect()
}

#[test]
fn sql_runs_and_its_rows_come_back_as_arrow() {
    let server = Server::start();
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let session = uuid::Uuid::new_v4().to_string();
        // spark.sql: the query comes back as a relation the client builds on.
        let cmd = proto::Command {
            command_type: Some(proto::command::CommandType::SqlCommand(proto::SqlCommand {
                input: Some(sql_relation("SELECT 1 + 1 AS two")),
                ..Default::default()
            })),
        };
        let r = responses(
            &mut c,
            execute_request(&session, proto::plan::OpType::Command(cmd)),
        )
        .await
        .unwrap();
        let relation = r
            .iter()
            .find_map(|r| match &r.response_type {
                Some(proto::execute_plan_response::ResponseType::SqlCommandResult(s)) => {
                    s.relation.clone()
                }
                _ => None,
            })
            .expect("a SqlCommandResult");
        // collect(): the rows as Arrow, and the stream ends with ResultComplete.
        let r = responses(
            &mut c,
            execute_request(&session, proto::plan::OpType::Root(relation)),
        )
        .await
        .unwrap();
        assert!(matches!(
            r.last().and_then(|r| r.response_type.as_ref()),
            Some(proto::execute_plan_response::ResponseType::ResultComplete(
                _
            ))
        ));
        let b = batches(&r);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].schema().field(0).name(), "two");
        let col = b[0]
            .column(0)
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap();
        assert_eq!(col.value(0), 2);
        assert!(r
            .iter()
            .all(|x| x.session_id == session && !x.operation_id.is_empty()));
    });
}

#[test]
fn an_unknown_column_is_an_analysis_exception_for_pyspark() {
    let server = Server::start();
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let session = uuid::Uuid::new_v4().to_string();
        let err = responses(
            &mut c,
            execute_request(
                &session,
                proto::plan::OpType::Root(sql_relation("SELECT nope FROM (SELECT 1 AS a)")),
            ),
        )
        .await
        .unwrap_err();
        use tonic_types::StatusExt;
        let info = err.get_details_error_info().expect("an ErrorInfo");
        assert_eq!(info.reason, "org.apache.spark.sql.AnalysisException");
        assert_eq!(
            info.metadata.get("classes").map(String::as_str),
            Some("[\"org.apache.spark.sql.AnalysisException\"]")
        );
        assert!(err.message().contains("nope"), "{}", err.message());
    });
}

#[test]
fn conf_set_is_seen_by_get_and_unknown_keys_are_sql_conf_not_found() {
    use proto::config_request::{operation::OpType, Get, Operation, Set};
    let server = Server::start();
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let session = uuid::Uuid::new_v4().to_string();
        let config = |op: OpType| proto::ConfigRequest {
            session_id: session.clone(),
            operation: Some(Operation { op_type: Some(op) }),
            ..Default::default()
        };
        c.config(config(OpType::Set(Set {
            pairs: vec![proto::KeyValue {
                key: "spark.sql.shuffle.partitions".into(),
                value: Some("3".into()),
            }],
            silent: None,
        })))
        .await
        .unwrap();
        let got = c
            .config(config(OpType::Get(Get {
                keys: vec![
                    "spark.sql.shuffle.partitions".into(),
                    "spark.sql.session.timeZone".into(),
                ],
            })))
            .await
            .unwrap()
            .into_inner();
        let values: Vec<_> = got.pairs.iter().map(|p| p.value.clone()).collect();
        assert_eq!(values, vec![Some("3".to_string()), Some("UTC".to_string())]);
        let err = c
            .config(config(OpType::Get(Get {
                keys: vec!["spark.not.a.key".into()],
            })))
            .await
            .unwrap_err();
        assert!(
            err.message().contains("SQL_CONF_NOT_FOUND"),
            "{}",
            err.message()
        );
        // Another session does not see this session's conf.
        let other = proto::ConfigRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            operation: Some(Operation {
                op_type: Some(OpType::Get(Get {
                    keys: vec!["spark.sql.shuffle.partitions".into()],
                })),
            }),
            ..Default::default()
        };
        let theirs = c.config(other).await.unwrap().into_inner();
        assert_ne!(theirs.pairs[0].value.as_deref(), Some("3"));
    });
}

/// PySpark 3.5's builder sets `spark.remote` as a conf on every `getOrCreate()`: kept without a
/// warning (a warning is a Python `UserWarning` each time), while a key Sluice does not read warns.
#[test]
fn conf_set_of_spark_remote_is_quiet_and_an_unread_key_warns() {
    use proto::config_request::{operation::OpType, Operation, Set};
    let server = Server::start();
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let session = uuid::Uuid::new_v4().to_string();
        let set = |key: &str| proto::ConfigRequest {
            session_id: session.clone(),
            operation: Some(Operation {
                op_type: Some(OpType::Set(Set {
                    pairs: vec![proto::KeyValue {
                        key: key.into(),
                        value: Some("sc://127.0.0.1:15002".into()),
                    }],
                    silent: None,
                })),
            }),
            ..Default::default()
        };
        let remote = c.config(set("spark.remote")).await.unwrap().into_inner();
        assert!(remote.warnings.is_empty(), "{:?}", remote.warnings);
        let other = c
            .config(set("spark.unread.key"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(other.warnings.len(), 1, "{:?}", other.warnings);
        assert!(other.warnings[0].contains("spark.unread.key"));
    });
}

#[test]
fn a_broken_stream_is_reattached_after_the_last_response_seen_and_release_forgets_it() {
    let server = Server::start();
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let session = uuid::Uuid::new_v4().to_string();
        let mut req = execute_request(
            &session,
            proto::plan::OpType::Root(sql_relation("SELECT 7 AS seven")),
        );
        let op = uuid::Uuid::new_v4().to_string();
        req.operation_id = Some(op.clone());
        let all = responses(&mut c, req).await.unwrap();
        assert!(all.len() >= 2, "{all:?}");
        let reattach = |last: Option<String>| proto::ReattachExecuteRequest {
            session_id: session.clone(),
            operation_id: op.clone(),
            last_response_id: last,
            ..Default::default()
        };
        let mut rest = c
            .reattach_execute(reattach(Some(all[0].response_id.clone())))
            .await
            .unwrap()
            .into_inner();
        let mut ids = Vec::new();
        while let Some(r) = rest.message().await.unwrap() {
            ids.push(r.response_id);
        }
        let expected: Vec<_> = all[1..].iter().map(|r| r.response_id.clone()).collect();
        assert_eq!(ids, expected);
        c.release_execute(proto::ReleaseExecuteRequest {
            session_id: session.clone(),
            operation_id: op.clone(),
            release: Some(proto::release_execute_request::Release::ReleaseAll(
                proto::release_execute_request::ReleaseAll {},
            )),
            ..Default::default()
        })
        .await
        .unwrap();
        let err = c.reattach_execute(reattach(None)).await;
        let err = match err {
            Err(e) => e,
            Ok(s) => {
                let mut s = s.into_inner();
                s.message().await.unwrap_err()
            }
        };
        assert!(
            err.message().contains("OPERATION_NOT_FOUND"),
            "{}",
            err.message()
        );
    });
}

/// `message` with `authorization: Bearer TOKEN`, as PySpark sends `;token=TOKEN`.
fn bearer<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

fn get_conf(session: &str, key: &str) -> proto::ConfigRequest {
    use proto::config_request::{operation::OpType, Get, Operation};
    proto::ConfigRequest {
        session_id: session.to_string(),
        operation: Some(Operation {
            op_type: Some(OpType::Get(Get {
                keys: vec![key.to_string()],
            })),
        }),
        ..Default::default()
    }
}

/// The one Int32 value of a `SELECT n` run in `session`.
async fn select_int(
    c: &mut SparkConnectServiceClient<Channel>,
    session: &str,
    query: &str,
    token: Option<&str>,
) -> Result<i32, tonic::Status> {
    let req = execute_request(session, proto::plan::OpType::Root(sql_relation(query)));
    let r = match token {
        Some(t) => responses(c, bearer(req, t)).await?,
        None => responses(c, req).await?,
    };
    let b = batches(&r);
    Ok(b[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int32Array>()
        .unwrap()
        .value(0))
}

#[test]
fn with_a_token_every_call_needs_it_and_the_refusal_says_why_without_showing_it() {
    let server = Server::with(ServerConfig {
        token: Some("s3cret-token".into()),
        ..Default::default()
    });
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let session = uuid::Uuid::new_v4().to_string();
        let conf = || get_conf(&session, "spark.sql.session.timeZone");
        // No token: refused, whatever the RPC.
        let none = c.config(conf()).await.unwrap_err();
        assert_eq!(none.code(), tonic::Code::Unauthenticated, "{none:?}");
        assert!(
            none.message().contains("carried none"),
            "{}",
            none.message()
        );
        assert!(none.message().contains(";token="), "{}", none.message());
        let exec = select_int(&mut c, &session, "SELECT 1", None).await;
        assert_eq!(exec.unwrap_err().code(), tonic::Code::Unauthenticated);
        // A wrong token (one character short, one more, another scheme): refused, not shown.
        for wrong in [
            "Bearer s3cret-toke",
            "Bearer s3cret-tokenn",
            "Basic s3cret-token",
        ] {
            let mut req = tonic::Request::new(conf());
            req.metadata_mut()
                .insert("authorization", wrong.parse().unwrap());
            let err = c.config(req).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated, "{wrong}: {err:?}");
            assert!(
                err.message().starts_with("authentication failed"),
                "{}",
                err.message()
            );
            assert!(!err.message().contains("s3cret"), "{}", err.message());
        }
        // The token: served.
        let got = c
            .config(bearer(conf(), "s3cret-token"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.pairs[0].value.as_deref(), Some("UTC"));
        let two = select_int(
            &mut c,
            &session,
            "SELECT 1 + 1 AS two",
            Some("s3cret-token"),
        );
        assert_eq!(two.await.unwrap(), 2);
    });
}

/// A CA and a certificate it signed for 127.0.0.1 and localhost, made with `openssl` in `dir`
/// (`ca.pem`, `server.pem`, `server.key`).
fn certificates(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509", "-days", "2", "-subj", "/CN=sluice test CA"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem"],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        &[
            &["req", "-subj", "/CN=localhost"][..],
            &ec,
            &["-keyout", "server.key", "-out", "server.csr"],
        ]
        .concat(),
    );
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ]);
}

fn tls_server(dir: &std::path::Path, token: Option<&str>) -> Server {
    certificates(dir);
    Server::with(ServerConfig {
        token: token.map(str::to_string),
        tls: Some(sluice_connect::TlsFiles {
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        }),
        ..Default::default()
    })
}

#[test]
fn a_tls_server_serves_clients_that_trust_its_ca_and_refuses_plain_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let server = tls_server(dir.path(), None);
    let addr = server.url.trim_start_matches("https://").to_string();
    runtime().block_on(async {
        // Plain HTTP/2 to the TLS port: no call gets through.
        let plain = async {
            let mut c = SparkConnectServiceClient::connect(format!("http://{addr}"))
                .await
                .map_err(|e| e.to_string())?;
            select_int(&mut c, "s", "SELECT 1", None)
                .await
                .map_err(|e| e.to_string())
        };
        let refused = tokio::time::timeout(std::time::Duration::from_secs(20), plain)
            .await
            .expect("a plain client is refused, not left hanging");
        assert!(refused.is_err(), "a plain client was served: {refused:?}");
        // TLS, trusting the CA: served.
        let ca = std::fs::read(dir.path().join("ca.pem")).unwrap();
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&ca));
        let channel = Channel::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut c = SparkConnectServiceClient::new(channel);
        let session = uuid::Uuid::new_v4().to_string();
        let three = select_int(&mut c, &session, "SELECT 3 AS three", None).await;
        assert_eq!(three.unwrap(), 3);
        // TLS trusting another CA (a self-signed certificate of its own): refused.
        let other = tempfile::tempdir().unwrap();
        certificates(other.path());
        let wrong_ca = std::fs::read(other.path().join("ca.pem")).unwrap();
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&wrong_ca));
        let connected = Channel::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await;
        assert!(connected.is_err(), "a client of another CA connected");
    });
    // A connection that never starts its handshake is closed after the handshake timeout.
    use std::io::Read;
    let mut idle = std::net::TcpStream::connect(&addr).unwrap();
    idle.set_read_timeout(Some(sluice_connect::tls::HANDSHAKE_TIMEOUT * 3))
        .unwrap();
    let t0 = std::time::Instant::now();
    let read = idle.read(&mut [0u8; 16]);
    assert!(
        matches!(read, Ok(0))
            || read
                .as_ref()
                .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock),
        "{read:?} after {:?}",
        t0.elapsed()
    );
    assert!(
        t0.elapsed() < sluice_connect::tls::HANDSHAKE_TIMEOUT * 2,
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn files_that_are_not_a_certificate_and_its_key_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let other = tempfile::tempdir().unwrap();
    certificates(other.path());
    let serve = |cert: std::path::PathBuf, key: std::path::PathBuf| {
        let config = ServerConfig {
            listen: "127.0.0.1:0".into(),
            tls: Some(sluice_connect::TlsFiles { cert, key }),
            ..Default::default()
        };
        sluice_connect::serve_until(config, |_| panic!("it listened"), async {}).unwrap_err()
    };
    let missing = serve(dir.path().join("nope.pem"), dir.path().join("server.key"));
    assert!(
        missing.message.contains("--tls-cert"),
        "{}",
        missing.message
    );
    assert!(missing.message.contains("nope.pem"), "{}", missing.message);
    // A key that is not the certificate's.
    let mismatched = serve(
        dir.path().join("server.pem"),
        other.path().join("server.key"),
    );
    assert!(
        mismatched.message.contains("--tls-cert and --tls-key"),
        "{}",
        mismatched.message
    );
}

#[test]
fn an_address_other_than_loopback_is_refused_without_a_token() {
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let config = ServerConfig {
            listen: listen.into(),
            ..Default::default()
        };
        let err =
            sluice_connect::serve_until(config, |_| panic!("it listened"), async {}).unwrap_err();
        for part in ["--token", "SLUICE_CONNECT_TOKEN", "127.0.0.1:PORT"] {
            assert!(err.message.contains(part), "{}", err.message);
        }
    }
    // With a token it serves (and stops when told).
    let (tx, rx) = mpsc::channel();
    let config = ServerConfig {
        listen: "0.0.0.0:0".into(),
        token: Some("t".into()),
        ..Default::default()
    };
    sluice_connect::serve_until(config, |addr| tx.send(addr).unwrap(), async {}).unwrap();
    assert!(rx.recv().unwrap().ip().is_unspecified());
}

#[test]
fn a_request_over_the_message_size_limit_is_refused_naming_the_limit() {
    let server = Server::with(ServerConfig {
        max_message_size: 4096,
        ..Default::default()
    });
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let session = uuid::Uuid::new_v4().to_string();
        let padded = |n: usize| format!("SELECT 5 AS five /* {} */", "x".repeat(n));
        assert_eq!(
            select_int(&mut c, &session, &padded(100), None)
                .await
                .unwrap(),
            5
        );
        let err = select_int(&mut c, &session, &padded(5000), None)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        for part in [
            "4096 bytes",
            "spark.connect.grpc.maxInboundMessageSize",
            "--max-message-size",
        ] {
            assert!(err.message().contains(part), "{}", err.message());
        }
    });
}

/// `steps` chained limits over `SELECT 1 AS one`: two nested messages a step.
fn limits_chain(steps: usize) -> proto::Relation {
    let mut rel = sql_relation("SELECT 1 AS one");
    for _ in 0..steps {
        rel = proto::Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::Limit(Box::new(proto::Limit {
                input: Some(Box::new(rel)),
                limit: 5,
            }))),
        };
    }
    rel
}

/// Spark's default nesting limit (1024) is accepted and runs; one step more is refused by name.
/// prost's own limit (100) refused ~49 steps.
#[test]
fn plans_as_deep_as_sparks_limit_run_and_deeper_ones_are_refused_by_name() {
    // The client encodes (recursively) on a thread with room for it.
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(|| {
            let server = Server::start();
            runtime().block_on(async {
                let mut c = client(&server.url).await;
                let session = uuid::Uuid::new_v4().to_string();
                // ExecutePlanRequest(0) > Plan(1) > Relation(2) > (Limit > Relation) x n >
                // Sql(2n + 3): the deepest under 1024 is n = 510.
                for steps in [60, 510] {
                    let req =
                        execute_request(&session, proto::plan::OpType::Root(limits_chain(steps)));
                    let r = responses(&mut c, req).await;
                    let r = r.unwrap_or_else(|e| panic!("{steps} steps: {e:?}"));
                    let b = batches(&r);
                    assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
                }
                let req = execute_request(&session, proto::plan::OpType::Root(limits_chain(511)));
                let err = responses(&mut c, req).await.unwrap_err();
                assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
                for part in [
                    "1024",
                    "spark.connect.grpc.marshallerRecursionLimit",
                    "--max-plan-depth",
                ] {
                    assert!(err.message().contains(part), "{}", err.message());
                }
                // The server still serves.
                let one = select_int(&mut c, &session, "SELECT 1", None).await;
                assert_eq!(one.unwrap(), 1);
            });
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn sessions_past_the_limit_are_refused_until_one_is_released() {
    let server = Server::with(ServerConfig {
        max_sessions: 2,
        ..Default::default()
    });
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let sessions: Vec<String> = (0..3).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let key = "spark.sql.session.timeZone";
        for s in &sessions[..2] {
            c.config(get_conf(s, key)).await.unwrap();
        }
        let err = c.config(get_conf(&sessions[2], key)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        for part in ["2 sessions", "idle", "spark.stop()", "--max-sessions"] {
            assert!(err.message().contains(part), "{}", err.message());
        }
        // Open sessions keep working; a released one makes room.
        c.config(get_conf(&sessions[1], key)).await.unwrap();
        c.release_session(proto::ReleaseSessionRequest {
            session_id: sessions[0].clone(),
            ..Default::default()
        })
        .await
        .unwrap();
        c.config(get_conf(&sessions[2], key)).await.unwrap();
    });
}

/// At the limit, a session idle past the timeout without an active query makes room for a new
/// one (Spark would have ended it); one with an active query does not.
#[test]
fn at_the_session_limit_an_idle_session_without_queries_makes_room() {
    let server = Server::with(ServerConfig {
        max_sessions: 1,
        session_idle_timeout: std::time::Duration::ZERO,
        ..Default::default()
    });
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let key = "spark.sql.session.timeZone";
        let (a, b, d) = (
            uuid::Uuid::new_v4().to_string(),
            uuid::Uuid::new_v4().to_string(),
            uuid::Uuid::new_v4().to_string(),
        );
        let seen = c.config(get_conf(&a, key)).await.unwrap().into_inner();
        // b takes a's place; a comes back as a session that changed.
        c.config(get_conf(&b, key)).await.unwrap();
        let mut again = get_conf(&a, key);
        again.client_observed_server_side_session_id = Some(seen.server_side_session_id);
        let err = c.config(again).await.unwrap_err();
        assert!(
            err.message().contains("SESSION_CHANGED"),
            "{}",
            err.message()
        );
        // a (new) has an active query: d is refused.
        let started = responses(&mut c, start_rate_query(&a, "busy"))
            .await
            .unwrap();
        let err = c.config(get_conf(&d, key)).await.unwrap_err();
        assert!(
            err.message().contains("--max-sessions"),
            "{}",
            err.message()
        );
        let stop = proto::StreamingQueryCommand {
            query_id: Some(query_id(&started)),
            command: Some(proto::streaming_query_command::Command::Stop(true)),
        };
        let stop = execute_request(
            &a,
            proto::plan::OpType::Command(proto::Command {
                command_type: Some(proto::command::CommandType::StreamingQueryCommand(stop)),
            }),
        );
        responses(&mut c, stop).await.unwrap();
        c.config(get_conf(&d, key)).await.unwrap();
    });
}

fn start_rate_query(session: &str, name: &str) -> proto::ExecutePlanRequest {
    let input = proto::Relation {
        common: None,
        rel_type: Some(proto::relation::RelType::Read(proto::Read {
            is_streaming: true,
            read_type: Some(proto::read::ReadType::DataSource(proto::read::DataSource {
                format: Some("rate".into()),
                ..Default::default()
            })),
        })),
    };
    let start = proto::WriteStreamOperationStart {
        input: Some(input),
        format: "noop".into(),
        query_name: name.into(),
        ..Default::default()
    };
    execute_request(
        session,
        proto::plan::OpType::Command(proto::Command {
            command_type: Some(proto::command::CommandType::WriteStreamOperationStart(
                start,
            )),
        }),
    )
}

fn query_id(responses: &[proto::ExecutePlanResponse]) -> proto::StreamingQueryInstanceId {
    responses
        .iter()
        .find_map(|r| match &r.response_type {
            Some(proto::execute_plan_response::ResponseType::WriteStreamOperationStartResult(
                s,
            )) => s.query_id.clone(),
            _ => None,
        })
        .expect("a WriteStreamOperationStartResult")
}

#[test]
fn streaming_queries_past_the_limit_are_refused_until_one_stops() {
    let server = Server::with(ServerConfig {
        max_queries: 1,
        ..Default::default()
    });
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let (a, b) = (
            uuid::Uuid::new_v4().to_string(),
            uuid::Uuid::new_v4().to_string(),
        );
        let first = responses(&mut c, start_rate_query(&a, "first"))
            .await
            .unwrap();
        // The limit is the server's: another session is refused too.
        let err = responses(&mut c, start_rate_query(&b, "second"))
            .await
            .unwrap_err();
        for part in ["1 streaming queries", "query.stop()", "--max-queries"] {
            assert!(err.message().contains(part), "{}", err.message());
        }
        let stop = proto::StreamingQueryCommand {
            query_id: Some(query_id(&first)),
            command: Some(proto::streaming_query_command::Command::Stop(true)),
        };
        responses(
            &mut c,
            execute_request(
                &a,
                proto::plan::OpType::Command(proto::Command {
                    command_type: Some(proto::command::CommandType::StreamingQueryCommand(stop)),
                }),
            ),
        )
        .await
        .unwrap();
        let second = responses(&mut c, start_rate_query(&b, "second"))
            .await
            .unwrap();
        let stop = proto::StreamingQueryCommand {
            query_id: Some(query_id(&second)),
            command: Some(proto::streaming_query_command::Command::Stop(true)),
        };
        responses(
            &mut c,
            execute_request(
                &b,
                proto::plan::OpType::Command(proto::Command {
                    command_type: Some(proto::command::CommandType::StreamingQueryCommand(stop)),
                }),
            ),
        )
        .await
        .unwrap();
    });
}

#[test]
fn a_sessions_temp_views_are_its_own() {
    let server = Server::start();
    runtime().block_on(async {
        let mut c = client(&server.url).await;
        let (a, b) = (
            uuid::Uuid::new_v4().to_string(),
            uuid::Uuid::new_v4().to_string(),
        );
        // df.createOrReplaceTempView("mine") in session a.
        let create = proto::Command {
            command_type: Some(proto::command::CommandType::CreateDataframeView(
                proto::CreateDataFrameViewCommand {
                    input: Some(sql_relation("SELECT 41 AS n")),
                    name: "mine".into(),
                    is_global: false,
                    replace: true,
                },
            )),
        };
        responses(
            &mut c,
            execute_request(&a, proto::plan::OpType::Command(create)),
        )
        .await
        .unwrap();
        let seen = select_int(&mut c, &a, "SELECT n + 1 FROM mine", None).await;
        assert_eq!(seen.unwrap(), 42);
        let err = select_int(&mut c, &b, "SELECT n FROM mine", None)
            .await
            .unwrap_err();
        assert!(err.message().contains("mine"), "{}", err.message());
    });
}
