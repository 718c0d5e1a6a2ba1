//! The server's branches for other clients' workers, run against stand-ins that speak their
//! protocols exactly as the clients' `foreach_batch_worker` and `listener_worker` modules do:
//! PySpark 3.5's (loopback TCP with the secret, no answer to listener events, no exception
//! handling: a failing function ends the process with its traceback on stderr) and 4.3's (each
//! batch also carries the session id it runs in). So these tests need no PySpark 3.5 or 4.3
//! install (the real ones run in `scripts/clients`). The stand-ins are a fake `pyspark` package
//! (`__version__` the version's) on the `PYTHONPATH` of `python3 -S`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::worker::{authenticate, major_minor};
use super::*;
use crate::proto;

/// What both stand-ins share: the 3.5 `__main__` (TCP, secret, pid) and `main`'s start-up.
const COMMON: &str = r#"
import os, socket, struct, sys

def read_int(f):
    return struct.unpack("!i", f.read(4))[0]

def read_long(f):
    return struct.unpack("!q", f.read(8))[0]

def read_utf(f):
    return f.read(read_int(f)).decode()

def write_int(v, f):
    f.write(struct.pack("!i", v))

sock = socket.create_connection(("127.0.0.1", int(os.environ["PYTHON_WORKER_FACTORY_PORT"])))
f = sock.makefile("rwb", 65536)
secret = os.environ["PYTHON_WORKER_FACTORY_SECRET"].encode()
write_int(len(secret), f)
f.write(secret)
f.flush()
assert read_utf(f) == "ok"
write_int(os.getpid(), f)
f.flush()
read_utf(f)  # the client's Python version
session_id = read_utf(f)
# The "pickled function": here the path of the file the stand-in appends to.
out = f.read(read_int(f)).decode()
write_int(0, f)
f.flush()
"#;

/// 3.5's `listener_worker`: events are read, never answered; an exception ends the process.
const LISTENER: &str = r#"
while True:
    event = read_utf(f)
    kind = read_int(f)
    if "poison" in event:
        raise RuntimeError("listener failed on event %d" % kind)
    with open(out, "a") as fh:
        fh.write("%d %s\n" % (kind, event))
    f.flush()
"#;

/// 3.5's `foreach_batch_worker`: each batch answered `0`; an exception ends the process.
const FOREACH_BATCH: &str = r#"
def helper(batch_id):
    raise ValueError("boom in batch %d" % batch_id)

while True:
    df_id = read_utf(f)
    batch_id = read_long(f)
    if batch_id == 1:
        helper(batch_id)
    with open(out, "a") as fh:
        fh.write("%s %d %s\n" % (df_id, batch_id, session_id))
    write_int(0, f)
    f.flush()
"#;

/// 4.3's `foreach_batch_worker`: the batch's session id follows the batch id.
const FOREACH_BATCH_43: &str = r#"
while True:
    df_id = read_utf(f)
    batch_id = read_long(f)
    batch_session = read_utf(f)
    with open(out, "a") as fh:
        fh.write("%s %d %s %s\n" % (df_id, batch_id, session_id, batch_session))
    write_int(0, f)
    f.flush()
"#;

/// A `python3 -S` whose `pyspark` is the 3.5 stand-in.
fn pyspark_35(dir: &Path) -> String {
    fake_pyspark(dir, "3.5.9", FOREACH_BATCH)
}

/// A `python3 -S` whose `pyspark` is a stand-in of `version`, its foreachBatch worker's loop
/// `foreach_batch`.
fn fake_pyspark(dir: &Path, version: &str, foreach_batch: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let worker = dir.join("pkgs/pyspark/sql/connect/streaming/worker");
    std::fs::create_dir_all(&worker).unwrap();
    let mut package = dir.join("pkgs");
    for part in ["pyspark", "sql", "connect", "streaming", "worker"] {
        package = package.join(part);
        let init = if part == "pyspark" {
            format!("__version__ = {version:?}\n")
        } else {
            String::new()
        };
        std::fs::write(package.join("__init__.py"), init).unwrap();
    }
    std::fs::write(
        worker.join("listener_worker.py"),
        format!("{COMMON}{LISTENER}"),
    )
    .unwrap();
    std::fs::write(
        worker.join("foreach_batch_worker.py"),
        format!("{COMMON}{foreach_batch}"),
    )
    .unwrap();
    let python = dir.join(format!("python-{version}"));
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\nPYTHONPATH={} exec python3 -S \"$@\"\n",
            dir.join("pkgs").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    python.to_string_lossy().into_owned()
}

fn config(python: &str) -> PythonConfig {
    let mut config = PythonConfig::from_env(Some(python.to_string()), "sc://127.0.0.1:1".into());
    config.lines = Arc::new(|_, _| {});
    config
}

fn udf(out: &Path) -> proto::PythonUdf {
    proto::PythonUdf {
        command: out.to_string_lossy().into_owned().into_bytes().into(),
        python_ver: "3.11".into(),
        ..Default::default()
    }
}

/// Runs `f` on a thread and fails the test if it takes longer than `limit` (a server waiting
/// for an answer a 3.5 worker never sends would block forever).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .expect("the call did not return in time: did the server wait for an answer?")
}

fn wait_for(path: &Path, lines: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= lines || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_35_listener_worker_gets_events_unanswered_and_its_failure_is_reported_with_the_traceback() {
    let dir = tempfile::tempdir().unwrap();
    let python = pyspark_35(dir.path());
    let out = dir.path().join("events.txt");
    let command = proto::streaming_query_manager_command::StreamingQueryListenerCommand {
        python_listener_payload: Some(udf(&out)),
        id: "l1".into(),
        ..Default::default()
    };
    let mut worker = ListenerWorker::from_command(&config(&python), "9b6c4ba8", &command).unwrap();
    assert_eq!(worker.pyspark_version(), Some("3.5.9"));
    assert!(!worker.answers_events());
    let mut worker = within(Duration::from_secs(20), move || {
        worker.on_query_started(r#"{"id":"q"}"#).unwrap();
        worker.on_query_progress(r#"{"progress":{}}"#).unwrap();
        worker.on_query_idle(r#"{"id":"q"}"#).unwrap();
        worker
    });
    assert_eq!(
        wait_for(&out, 3),
        "0 {\"id\":\"q\"}\n1 {\"progress\":{}}\n2 {\"id\":\"q\"}\n"
    );
    // The listener raises: the 3.5 worker ends, and the next event reports its traceback.
    worker
        .on_query_terminated(r#"{"exception":"poison"}"#)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while worker.is_alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!worker.is_alive());
    let err = worker.on_query_progress(r#"{"progress":{}}"#).unwrap_err();
    assert_eq!(err.error_class, "PYTHON_EXCEPTION", "{}", err.message);
    assert!(
        err.message
            .contains("RuntimeError: listener failed on event 3"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("a message before onQueryProgress"),
        "{}",
        err.message
    );
}

#[test]
fn a_35_foreach_batch_worker_that_raises_is_the_functions_exception() {
    let dir = tempfile::tempdir().unwrap();
    let python = pyspark_35(dir.path());
    let out = dir.path().join("batches.txt");
    let mut worker = ForeachBatchWorker::start(&config(&python), "s-35", &udf(&out)).unwrap();
    worker.call("df-0", 0).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "df-0 0 s-35\n");
    let err = worker.call("df-1", 1).unwrap_err();
    assert_eq!(
        err.java_class,
        "org.apache.spark.api.python.PythonException"
    );
    assert_eq!(err.error_class, "PYTHON_EXCEPTION", "{}", err.message);
    let traceback = err.message.split_once("batch 1: ").unwrap().1;
    assert!(
        traceback.starts_with("Traceback (most recent call last):"),
        "{}",
        err.message
    );
    assert!(err.message.contains("in helper"), "{}", err.message);
    assert!(
        err.message.contains("ValueError: boom in batch 1"),
        "{}",
        err.message
    );
    // Ended, as Spark 3.5's: a further call says so, no hang.
    let err = worker.call("df-2", 2).unwrap_err();
    assert!(
        err.message.contains("cannot run batch 2"),
        "{}",
        err.message
    );
}

#[test]
fn a_43_foreach_batch_worker_gets_the_session_of_each_batch() {
    let dir = tempfile::tempdir().unwrap();
    let python = fake_pyspark(dir.path(), "4.3.0", FOREACH_BATCH_43);
    let out = dir.path().join("batches.txt");
    let mut worker = ForeachBatchWorker::start(&config(&python), "s-43", &udf(&out)).unwrap();
    assert!(worker.sends_session_per_batch());
    within(Duration::from_secs(20), move || {
        worker.call("df-0", 0).unwrap();
        worker.call("df-1", 1).unwrap();
    });
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "df-0 0 s-43 s-43\ndf-1 1 s-43 s-43\n"
    );
    // A 3.5 worker reads no session per batch.
    let dir = tempfile::tempdir().unwrap();
    let python = pyspark_35(dir.path());
    let worker = ForeachBatchWorker::start(&config(&python), "s-35", &udf(&out)).unwrap();
    assert!(!worker.sends_session_per_batch());
}

/// Spark's worker handshake: the right secret gets `ok`, anything else `err`.
#[test]
fn the_worker_socket_takes_only_the_secret() {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let client = |secret: &'static [u8]| {
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&(secret.len() as i32).to_be_bytes()).unwrap();
            s.write_all(secret).unwrap();
            let mut len = [0u8; 4];
            s.read_exact(&mut len).unwrap();
            let mut reply = vec![0u8; i32::from_be_bytes(len) as usize];
            s.read_exact(&mut reply).unwrap();
            String::from_utf8(reply).unwrap()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    for (sent, accepted, reply) in [
        (&b"s3cret"[..], true, "ok"),
        (&b"s3creT"[..], false, "err"),
        (&b"s3cret-and-more"[..], false, "err"),
        (&b""[..], false, "err"),
    ] {
        let handle = client(sent);
        let (mut stream, _) = listener.accept().unwrap();
        assert_eq!(
            authenticate(&mut stream, "s3cret", deadline).unwrap(),
            accepted
        );
        assert_eq!(handle.join().unwrap(), reply);
    }
}

#[test]
fn pyspark_versions_compare_by_major_and_minor() {
    assert_eq!(major_minor("3.5.9"), Some((3, 5)));
    assert_eq!(major_minor("4.3.0.dev1"), Some((4, 3)));
    assert_eq!(major_minor("4.10rc1"), Some((4, 10)));
    assert_eq!(major_minor("four"), None);
    assert_eq!(major_minor("4"), None);
}

/// PySpark 3.5's `spark.streams.addListener` over Spark Connect: `add_listener` runs the pickled
/// listener in the client's `listener_worker` on the server (here the 3.5 stand-in), which gets
/// the query's started, progress and terminated events in order; `list_listeners` and
/// `remove_listener` see it.
#[test]
fn a_35_add_listener_gets_a_querys_events_on_the_server_until_removed() {
    use crate::proto::command::CommandType;
    use crate::proto::execute_plan_response::ResponseType;
    use crate::proto::spark_connect_service_client::SparkConnectServiceClient;
    use crate::proto::streaming_query_manager_command::{
        Command as Manager, StreamingQueryListenerCommand,
    };
    use crate::proto::streaming_query_manager_command_result::ResultType;

    let dir = tempfile::tempdir().unwrap();
    let python = pyspark_35(dir.path());
    let out = dir.path().join("events.txt");
    let src = dir.path().join("in");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("1.json"), "{\"id\": 1}\n{\"id\": 2}\n").unwrap();

    let (tx, rx) = mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let config = crate::ServerConfig {
            listen: "127.0.0.1:0".into(),
            python: Some(python),
            ..Default::default()
        };
        crate::serve_until(config, |addr| tx.send(addr).unwrap(), async move {
            let _ = stopped.await;
        })
        .unwrap();
    });
    let addr = rx.recv().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let session = uuid::Uuid::new_v4().to_string();
    let request = |command: CommandType| proto::ExecutePlanRequest {
        session_id: session.clone(),
        plan: Some(proto::Plan {
            op_type: Some(proto::plan::OpType::Command(proto::Command {
                command_type: Some(command),
            })),
        }),
        ..Default::default()
    };
    let manager = |command: Manager| {
        request(CommandType::StreamingQueryManagerCommand(
            proto::StreamingQueryManagerCommand {
                command: Some(command),
            },
        ))
    };
    let listener = |id: &str| StreamingQueryListenerCommand {
        python_listener_payload: Some(udf(&out)),
        id: id.into(),
        ..Default::default()
    };
    runtime.block_on(async {
        let mut client = SparkConnectServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let mut run = async |req: proto::ExecutePlanRequest| {
            let mut stream = client.execute_plan(req).await.unwrap().into_inner();
            let mut results = Vec::new();
            while let Some(r) = stream.message().await.unwrap() {
                results.push(r.response_type);
            }
            results
        };
        let manager_result = |results: Vec<Option<ResponseType>>| {
            results
                .into_iter()
                .find_map(|r| match r {
                    Some(ResponseType::StreamingQueryManagerCommandResult(r)) => r.result_type,
                    _ => None,
                })
                .unwrap()
        };
        let added = manager_result(run(manager(Manager::AddListener(listener("l1")))).await);
        assert_eq!(added, ResultType::AddListener(true));
        let listed = manager_result(run(manager(Manager::ListListeners(true))).await);
        let ResultType::ListListeners(listed) = listed else {
            panic!("{listed:?}")
        };
        assert_eq!(listed.listener_ids, vec!["l1".to_string()]);

        let start = proto::WriteStreamOperationStart {
            input: Some(proto::Relation {
                common: None,
                rel_type: Some(proto::relation::RelType::Read(proto::Read {
                    is_streaming: true,
                    read_type: Some(proto::read::ReadType::DataSource(proto::read::DataSource {
                        format: Some("json".into()),
                        schema: Some("id INT".into()),
                        paths: vec![src.to_string_lossy().into_owned()],
                        ..Default::default()
                    })),
                })),
            }),
            format: "noop".into(),
            trigger: Some(proto::write_stream_operation_start::Trigger::AvailableNow(
                true,
            )),
            ..Default::default()
        };
        let started = run(request(CommandType::WriteStreamOperationStart(start))).await;
        let query_id = started
            .into_iter()
            .find_map(|r| match r {
                Some(ResponseType::WriteStreamOperationStartResult(r)) => r.query_id,
                _ => None,
            })
            .unwrap()
            .id;
        // started (0), progress (1), terminated (3), each with the query's id.
        let events = wait_for_line_starting(&out, "3 ");
        let kinds: Vec<&str> = events.lines().map(|l| &l[..1]).collect();
        assert_eq!(kinds.first(), Some(&"0"), "{events}");
        assert_eq!(kinds.last(), Some(&"3"), "{events}");
        assert!(kinds.contains(&"1"), "{events}");
        assert!(
            events.lines().next().unwrap().contains(&query_id),
            "{events}"
        );

        let removed = manager_result(run(manager(Manager::RemoveListener(listener("l1")))).await);
        assert_eq!(removed, ResultType::RemoveListener(true));
        let listed = manager_result(run(manager(Manager::ListListeners(true))).await);
        assert_eq!(
            listed,
            ResultType::ListListeners(
                proto::streaming_query_manager_command_result::ListStreamingQueryListenerResult {
                    listener_ids: vec![]
                }
            )
        );
    });
    let _ = stop.send(());
    server.join().unwrap();
}

fn wait_for_line_starting(path: &Path, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().any(|l| l.starts_with(prefix)) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
