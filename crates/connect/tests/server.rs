//! The server over real gRPC, with the generated Spark Connect client: sessions, SQL through
//! `SqlCommand` and a root relation, Arrow results, errors as PySpark reads them, config,
//! reattach and release. (PySpark itself drives the server in python/tests.)

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
        let (tx, rx) = mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let config = ServerConfig {
                listen: "127.0.0.1:0".into(),
                python: None,
                ..Default::default()
            };
            sluice_connect::serve_until(config, |addr| tx.send(addr).unwrap(), async move {
                let _ = stopped.await;
            })
            .unwrap();
        });
        let addr = rx.recv().unwrap();
        Self {
            url: format!("http://{addr}"),
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
    req: proto::ExecutePlanRequest,
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
